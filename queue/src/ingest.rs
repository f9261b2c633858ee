//! Ingest (docs/design.md section 4, `new_ops`; ADR 0004 section 4.1) and quarantine /
//! release: the Writer's builders. Blind puts only: nothing here reads shared
//! state, so a batch of many hooks (group commit) is a concatenation.

use ankusa_engine::{Batch, Cf, Direction, Read};
use ankusa_keys::{
    CounterField, DedupeValue, DeliveryRow, DueKind, DueValue, EMPTY_VALUE, Envelope, Family,
    QuarantinedKey, QuarantinedValue, RowState, Seq, SinkIx, SourceId, TenantOrd, active_key,
    archive_key, dedupe_key, deliveries_of_hook_range, delivery_key, due_key, hook_key,
    quarantined_key, tenant_range,
};
use ankusa_lanes::{LaneAssignment, RowId, count};

use crate::QueueError;
use crate::admission::size_of_encoded;

/// A hook the Writer commits: its tenant, the seq it assigned, the envelope.
#[derive(Clone, Copy, Debug)]
pub struct Hook<'a> {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The seq the Writer assigned (commit order).
    pub seq: Seq,
    /// The envelope as stored (after the store_headers policy).
    pub envelope: &'a Envelope,
    /// Until when a provider retry of it is a dedupe hit, unix milliseconds
    /// (used only when the envelope has a dedupe key).
    pub dedupe_expires_at_ms: u64,
}

/// One delivery row of a new hook: the sink, and its lane for an ordered sink.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NewRow {
    /// The sink's index in the source's sinks.
    pub sink: SinkIx,
    /// `Some` for an ordered sink (ADR 0004 section 2: [`ankusa_lanes::assign`]).
    pub lane: Option<LaneAssignment>,
}

/// The envelope, its archive entry and its dedupe record.
fn hook_ops(batch: &mut Batch, hook: &Hook<'_>, encoded: Vec<u8>) {
    let env = hook.envelope;
    batch.put(Cf::Hooks, hook_key(hook.tenant, hook.seq), encoded);
    batch.put(
        Cf::Archive,
        archive_key(hook.tenant, env.received_at_ms, hook.seq),
        EMPTY_VALUE,
    );
    if let Some(dk) = &env.dedupe_key {
        batch.put(
            Cf::Index,
            dedupe_key(hook.tenant, env.source, dk),
            DedupeValue {
                seq: hook.seq,
                expires_at_ms: hook.dedupe_expires_at_ms,
            }
            .encode(),
        );
    }
}

/// The rows of hook `seq` (each `size` bytes): the row part of [`new_ops`].
pub(crate) fn rows_ops(
    batch: &mut Batch,
    tenant: TenantOrd,
    seq: Seq,
    size: u32,
    rows: &[NewRow],
    now_ms: u64,
) {
    debug_assert!(
        rows.iter()
            .enumerate()
            .all(|(i, r)| rows[..i].iter().all(|o| o.sink != r.sink)),
        "hook {tenant}/{seq} has two rows for one sink"
    );
    for r in rows {
        let id = RowId::new(tenant, seq, r.sink);
        let row = DeliveryRow {
            state: if r.lane.is_some() {
                RowState::Member
            } else {
                RowState::Due
            },
            size,
            attempts: 0,
            first_attempt_at_ms: None,
            last_error: None,
            lane: r.lane.as_ref().map(|a| a.lane),
            ordering_key: r.lane.as_ref().and_then(|a| a.ordering_key.clone()),
            // Given at the row's first promotion (`ankusa_lanes::promote`).
            lane_seq: None,
            logged_attempts: 0,
        };
        batch.put(
            Cf::Deliveries,
            delivery_key(tenant, seq, r.sink),
            row.encode(),
        );
        match &r.lane {
            None => {
                batch.put(
                    Cf::Index,
                    due_key(tenant, now_ms, seq, r.sink),
                    DueValue {
                        size,
                        kind: DueKind::First,
                    }
                    .encode(),
                );
                batch.put(Cf::Index, active_key(tenant), EMPTY_VALUE);
            }
            Some(a) => ankusa_lanes::member_put(batch, id, a.lane, size),
        }
        count(batch, tenant, CounterField::Pending, 1);
        count(batch, tenant, CounterField::Bytes, i64::from(size));
    }
}

/// Ingest (docs/design.md section 4; ADR 4.1): appends the envelope (cf `hooks`), the
/// archive entry, the dedupe record (`?K`, when the envelope has a dedupe key),
/// and per row: the delivery row, then either ?D (kind 0, due `now_ms`) + ?A, or
/// for a laned row the member put of [`ankusa_lanes::member_put`] (?O + ?P + ?A);
/// counters pending +1 and bytes +size per row (lane_members +1 per laned row).
///
/// Blind puts, no reads. Precondition: `hook.seq` is new (the Writer assigned
/// it), `rows` has distinct sinks. Keeps every invariant: each row is in exactly
/// one place, each member has its ?P, each ?D has its ?A.
pub fn new_ops(batch: &mut Batch, hook: &Hook<'_>, rows: &[NewRow], now_ms: u64) {
    let encoded = hook.envelope.encode();
    let size = size_of_encoded(encoded.len());
    hook_ops(batch, hook, encoded);
    rows_ops(batch, hook.tenant, hook.seq, size, rows, now_ms);
}

/// Archive replay (docs/design.md section 4, `replay`; section 5, "Replayer";
/// ADR 4.8): appends a copy of a stored hook as a new hook under `hook.seq`:
/// the envelope (whose `replay_of` names the original's seq, and which keeps
/// the original's idempotency key and received time), its archive entry, and
/// the rows of [`new_ops`] (a laned row joins its lane as a member, ADR 4.1),
/// but no dedupe record: a copy takes no part in dedupe, so the record of the
/// provider's hook stays as it is.
///
/// Blind puts, no reads. Precondition: `hook.seq` is new (the Writer assigned
/// it), `rows` has distinct sinks. Keeps every invariant, as [`new_ops`].
pub fn replay(batch: &mut Batch, hook: &Hook<'_>, rows: &[NewRow], now_ms: u64) {
    debug_assert!(
        hook.envelope.replay_of.is_some(),
        "replay of {} without replay_of",
        hook.seq
    );
    let env = hook.envelope;
    let encoded = env.encode();
    let size = size_of_encoded(encoded.len());
    batch.put(Cf::Hooks, hook_key(hook.tenant, hook.seq), encoded);
    batch.put(
        Cf::Archive,
        archive_key(hook.tenant, env.received_at_ms, hook.seq),
        EMPTY_VALUE,
    );
    rows_ops(batch, hook.tenant, hook.seq, size, rows, now_ms);
}

/// Quarantine (docs/design.md section 4): appends the envelope, the archive entry
/// and ?Q (`reason`), quarantined +1. No delivery row: the hook is held back
/// until [`release`] or [`drop_quarantined`]. No dedupe record either, even
/// when the envelope has a dedupe key: a quarantined hook takes no part in
/// dedupe (docs/design.md section 10), so a hook held for a bad signature
/// cannot make the provider's genuine one a duplicate.
///
/// Blind puts. Precondition: `hook.seq` is new (the Writer assigned it). Keeps
/// every invariant (quarantined counts the ?Q keys).
pub fn quarantine(batch: &mut Batch, hook: &Hook<'_>, reason: &str) {
    let env = hook.envelope;
    batch.put(Cf::Hooks, hook_key(hook.tenant, hook.seq), env.encode());
    batch.put(
        Cf::Archive,
        archive_key(hook.tenant, env.received_at_ms, hook.seq),
        EMPTY_VALUE,
    );
    batch.put(
        Cf::Index,
        quarantined_key(hook.tenant, hook.seq),
        QuarantinedValue {
            reason: reason.to_owned(),
        }
        .encode(),
    );
    count(batch, hook.tenant, CounterField::Quarantined, 1);
}

/// Quarantine release (docs/design.md section 4): deletes ?Q of hook `seq`,
/// quarantined −1, and builds its rows through the row part of [`new_ops`]
/// (the envelope is already stored). The hook keeps its seq: a laned row
/// joins its lane as a member under that seq, like a revived row (ADR 4.8),
/// after the lane's current head and before any later member still waiting.
/// The caller resolves `rows` from the stored envelope with the edge's
/// function (ADR 0004 section 2), and commits through the Writer
/// (`writer::WriterHandle::release`), which serialises releases and drops of
/// one hook.
///
/// Precondition: nothing else releases or drops the hook meanwhile (the
/// Writer). Keeps every invariant (each new row in exactly one place, each
/// member with its ?P, each ?D with its ?A).
///
/// # Errors
/// [`QueueError::NotQuarantined`] when there is no ?Q for the hook;
/// [`QueueError::MissingEnvelope`]; engine and decode errors.
pub fn release(
    read: &impl Read,
    tenant: TenantOrd,
    seq: Seq,
    rows: &[NewRow],
    now_ms: u64,
) -> Result<Batch, QueueError> {
    let qkey = quarantined_key(tenant, seq);
    if read.get(Cf::Index, &qkey)?.is_none() {
        return Err(QueueError::NotQuarantined { tenant, seq });
    }
    let stored = read
        .get(Cf::Hooks, &hook_key(tenant, seq))?
        .ok_or(QueueError::MissingEnvelope { tenant, seq })?;
    // The size is the stored envelope's, as new_ops counts it.
    Envelope::decode(&stored)?;
    let mut batch = Batch::new();
    batch.delete(Cf::Index, qkey);
    count(&mut batch, tenant, CounterField::Quarantined, -1);
    rows_ops(
        &mut batch,
        tenant,
        seq,
        size_of_encoded(stored.len()),
        rows,
        now_ms,
    );
    Ok(batch)
}

/// Drop of a quarantined hook (docs/design.md section 4): deletes its ?Q, its
/// envelope and its archive entry, quarantined −1. A quarantined hook has no
/// delivery row and no dedupe record, so nothing else refers to it.
///
/// Precondition: nothing else releases or drops the hook meanwhile (commit
/// through the Writer, `writer::WriterHandle::drop_quarantined`); the hook
/// has no delivery row (debug-asserted). Keeps invariants 3 and 5.
///
/// # Errors
/// [`QueueError::NotQuarantined`] when there is no ?Q for the hook; engine and
/// decode errors.
pub fn drop_quarantined(
    read: &impl Read,
    tenant: TenantOrd,
    seq: Seq,
) -> Result<Batch, QueueError> {
    let qkey = quarantined_key(tenant, seq);
    if read.get(Cf::Index, &qkey)?.is_none() {
        return Err(QueueError::NotQuarantined { tenant, seq });
    }
    debug_assert!(
        read.first(
            Cf::Deliveries,
            &deliveries_of_hook_range(tenant, seq),
            Direction::Forward
        )?
        .is_none(),
        "quarantined hook {tenant}/{seq} has delivery rows"
    );
    let mut batch = Batch::new();
    batch.delete(Cf::Index, qkey);
    count(&mut batch, tenant, CounterField::Quarantined, -1);
    let hkey = hook_key(tenant, seq);
    if let Some(raw) = read.get(Cf::Hooks, &hkey)? {
        let env = Envelope::decode(&raw)?;
        batch.delete(Cf::Archive, archive_key(tenant, env.received_at_ms, seq));
        batch.delete(Cf::Hooks, hkey);
    }
    Ok(batch)
}

/// One quarantined hook, as [`list_quarantined`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The hook.
    pub seq: Seq,
    /// Why it is held (the ?Q value).
    pub reason: String,
    /// Its source (`None` when the envelope is gone or does not decode).
    pub source: Option<SourceId>,
    /// When it was received, unix milliseconds (`None` as for `source`).
    pub received_at_ms: Option<u64>,
    /// The stored envelope's length, bytes (0 when it is gone).
    pub size_bytes: u64,
    /// The idempotency key given at ingest (`None` as for `source`).
    pub idempotency_key: Option<[u8; 16]>,
}

/// A page of [`list_quarantined`]: the hooks, and the cursor of the next page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuarantinePage {
    /// The hooks, in seq order.
    pub hooks: Vec<Quarantined>,
    /// Pass it as `after` for the next page; `None` when this page is the last.
    pub next: Option<Seq>,
}

/// Lists `tenant`'s quarantined hooks in seq order, at most `limit`, starting
/// after seq `after` (`None`: from the first). Reads the ?Q range and each
/// listed hook's envelope; writes nothing.
///
/// # Errors
/// Engine and decode errors (an envelope that does not decode is listed with
/// `source: None`).
pub fn list_quarantined(
    read: &impl Read,
    tenant: TenantOrd,
    after: Option<Seq>,
    limit: usize,
) -> Result<QuarantinePage, QueueError> {
    let mut range = tenant_range(Family::Quarantined, tenant);
    if let Some(Seq(s)) = after {
        match s.checked_add(1) {
            Some(next) => range.start = quarantined_key(tenant, Seq(next)).to_vec(),
            None => return Ok(QuarantinePage::default()),
        }
    }
    // One more than asked: whether there is a next page.
    let entries = read.scan(
        Cf::Index,
        &range,
        Direction::Forward,
        limit.saturating_add(1),
    )?;
    let mut page = QuarantinePage::default();
    for (k, v) in entries.iter().take(limit) {
        let seq = QuarantinedKey::decode(k)?.seq;
        let reason = QuarantinedValue::decode(v)?.reason;
        let raw = read.get(Cf::Hooks, &hook_key(tenant, seq))?;
        let env = raw.as_deref().map(Envelope::decode).and_then(Result::ok);
        page.hooks.push(Quarantined {
            seq,
            reason,
            source: env.as_ref().map(|e| e.source),
            received_at_ms: env.as_ref().map(|e| e.received_at_ms),
            size_bytes: raw.as_ref().map_or(0, |r| r.len() as u64),
            idempotency_key: env.as_ref().map(|e| e.idempotency_key),
        });
    }
    if entries.len() > limit {
        page.next = page.hooks.last().map(|h| h.seq);
    }
    Ok(page)
}
