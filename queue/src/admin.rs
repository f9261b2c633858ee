//! Housekeeping and admin builders (docs/design.md section 4): sweep_markers,
//! purge_tenant, dead_letter_source, retention, drop_dead, init_store.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ankusa_engine::{Batch, Cf, Direction, KeyRange, Read};
use ankusa_keys::{
    ArchiveKey, CounterField, DedupeValue, DeliveryKey, DeliveryRow, DueKey, EMPTY_VALUE, Envelope,
    Family, LaneMemberKey, SENTINEL_VALUE, STORE_FORMAT, Seq, SinkIx, SourceId, TenantOrd,
    active_key, archive_key, archive_time_range, counter_key, dead_letter_key, dedupe_key,
    deliveries_of_hook_range, delivery_key, hook_key, live_due_range, quarantined_key, sentinels,
    tenant_range, tenant_ranges,
};
use ankusa_lanes::{LANE_FAMILIES, RowId, count};

use crate::attempt_log::{delete_hook_log, delete_row_log};
use crate::transitions::{DeadLetterOf, dead_into};
use crate::{Cursor, Origin, Page, QueueError};

/// True when `tenant` has a ?D that is not held, or a ?P (one seek each). A
/// held row (its sink or source is paused) does not keep the tenant active:
/// its resume ([`crate::unhold`]) puts the ?A back.
fn has_due_or_marker(read: &impl Read, tenant: TenantOrd) -> Result<bool, QueueError> {
    for range in [
        live_due_range(tenant),
        tenant_range(Family::LaneMarker, tenant),
    ] {
        if read.first(Cf::Index, &range, Direction::Forward)?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Most active tenants [`oldest_due`] reads (the dispatch pass reads as many).
pub const OLDEST_DUE_TENANTS: usize = 4096;

/// The due time (unix ms) of the node's oldest row due at `now_ms` and not
/// held, `None` when nothing is due: the `ankusa_dispatch_oldest_due_age_seconds`
/// gauge. It reads the ?A markers (one per tenant with due rows, at most
/// [`OLDEST_DUE_TENANTS`]) and takes one seek per such tenant on its due range
/// up to `now_ms` ([`ankusa_keys::due_range_until`]: held rows are above every
/// real time), never a scan of rows.
///
/// # Errors
/// The engine's; a corrupt ?A or ?D key.
pub fn oldest_due(read: &impl Read, now_ms: u64) -> Result<Option<u64>, QueueError> {
    let active = read.scan(
        Cf::Index,
        &ankusa_keys::family_range(Family::Active),
        Direction::Forward,
        OLDEST_DUE_TENANTS,
    )?;
    let mut oldest: Option<u64> = None;
    for (k, _) in active {
        let tenant = ankusa_keys::ActiveKey::decode(&k)?.tenant;
        if let Some((k, _)) = read.first(
            Cf::Index,
            &ankusa_keys::due_range_until(tenant, now_ms),
            Direction::Forward,
        )? {
            let due = DueKey::decode(&k)?.due_ms;
            oldest = Some(oldest.map_or(due, |o| o.min(due)));
        }
    }
    Ok(oldest)
}

/// The key just above `key`: where a forward scan resumes.
fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// `range` starting at the cursor's key, when it has one.
fn resume(mut range: KeyRange, key: &[u8]) -> KeyRange {
    if !key.is_empty() && key > range.start.as_slice() {
        range.start = key.to_vec();
    }
    range
}

/// Stale active-marker sweep (docs/design.md section 4; ADR 4.6): deletes `tenant`'s ?A
/// when it has no ?D (held rows aside) and no ?P (one seek each); otherwise an
/// empty batch.
///
/// A Writer may commit ?D + ?A between this read and the commit: after
/// committing, commit [`sweep_markers_recheck`] (from the live engine), which
/// puts ?A back if a ?D or ?P appeared. Keeps invariant 4.
///
/// # Errors
/// Engine errors.
pub fn sweep_markers(read: &impl Read, tenant: TenantOrd) -> Result<Batch, QueueError> {
    let mut batch = Batch::new();
    if !has_due_or_marker(read, tenant)? {
        batch.delete(Cf::Index, active_key(tenant));
    }
    Ok(batch)
}

/// The second half of [`sweep_markers`]: puts `tenant`'s ?A back when it now
/// has a ?D or a ?P; otherwise an empty batch.
///
/// # Errors
/// Engine errors.
pub fn sweep_markers_recheck(read: &impl Read, tenant: TenantOrd) -> Result<Batch, QueueError> {
    let mut batch = Batch::new();
    if has_due_or_marker(read, tenant)? {
        batch.put(Cf::Index, active_key(tenant), EMPTY_VALUE);
    }
    Ok(batch)
}

/// Tenant purge (docs/design.md section 4; ADR 4.9): range-deletes every range of
/// `ankusa_keys::tenant_ranges` (every index family, lane families and counters
/// included; hooks, deliveries, archive) and subtracts the tenant's counters
/// (read from `read`) from the node aggregate.
///
/// Precondition: nothing else writes the tenant meanwhile (ingest for it is
/// stopped), or the aggregate drifts by what raced. Keeps invariant 3.
///
/// # Errors
/// Engine errors, a corrupt counter.
pub fn purge_tenant(read: &impl Read, tenant: TenantOrd) -> Result<Batch, QueueError> {
    assert!(tenant.is_tenant(), "purge of reserved ordinal {}", tenant.0);
    let mut batch = Batch::new();
    for field in CounterField::ALL {
        let value = read.counter(&counter_key(tenant, field))?;
        batch.counter_add(counter_key(TenantOrd::NODE, field), -value);
    }
    let lane_ranges: Vec<KeyRange> = LANE_FAMILIES
        .into_iter()
        .map(|f| tenant_range(f, tenant))
        .collect();
    for (cf, range) in tenant_ranges(tenant) {
        // The lane families are lanes' to write (ADR 4.9).
        if cf == Cf::Index && lane_ranges.contains(&range) {
            continue;
        }
        batch.delete_range(cf, range);
    }
    ankusa_lanes::purge_ops(&mut batch, tenant);
    Ok(batch)
}

/// Deleted source (docs/design.md section 4; ADR 4.9): dead-letters `source`'s rows of
/// `tenant` with `reason`, bounded by `limit` entries examined per call,
/// resumable through [`Page::next`]. Two phases, lane by lane: first the lane
/// members (?O, in lane order: each member → ?X), then the ?D rows (each → ?X;
/// a lane head releases its lane, which by then has no member of the source
/// left: a lane belongs to one source). Rows in ?F are left to the pipeline
/// (its attempt ends SourceGone and dead-letters them).
///
/// Precondition: the source takes no more hooks. Keeps invariants 1-4.
///
/// # Errors
/// Engine and decode errors.
pub fn dead_letter_source(
    read: &impl Read,
    tenant: TenantOrd,
    source: SourceId,
    reason: &str,
    cursor: Option<&Cursor>,
    limit: usize,
    now_ms: u64,
) -> Result<Page, QueueError> {
    dead_letter_sinks(
        read,
        tenant,
        source,
        |_| true,
        reason,
        cursor,
        limit,
        now_ms,
    )
}

/// [`dead_letter_source`] for the sink entries of `source` that `sinks`
/// selects (by index): what a start with `--drop-unconfigured` runs for a
/// sink entry removed from the configuration (docs/design.md section 5,
/// "Unconfigured sources and sinks"). The same two phases, members before
/// ?D rows (held ones included), so a head's release never promotes a member
/// that is about to be dead-lettered (a lane belongs to one source and one
/// sink index: ADR 0004 section 2). Rows in ?F are left to the caller, who
/// runs [`crate::recover_inflight`] first when nothing is running.
///
/// Precondition: the selected sinks take no more rows (they are not in the
/// configuration the edge serves). Keeps invariants 1-4.
///
/// # Errors
/// Engine and decode errors.
#[allow(clippy::too_many_arguments)]
pub fn dead_letter_sinks(
    read: &impl Read,
    tenant: TenantOrd,
    source: SourceId,
    sinks: impl Fn(SinkIx) -> bool,
    reason: &str,
    cursor: Option<&Cursor>,
    limit: usize,
    now_ms: u64,
) -> Result<Page, QueueError> {
    const MEMBERS: u8 = 0;
    const DUE: u8 = 1;
    let (phase, start) = match cursor {
        Some(c) => (c.phase, c.key.as_slice()),
        None => (MEMBERS, &[][..]),
    };
    let mut page = Page::default();
    if phase > DUE || limit == 0 {
        // Nothing examined: continue where the caller was.
        page.next = (phase <= DUE).then(|| Cursor {
            phase,
            key: start.to_vec(),
        });
        return Ok(page);
    }
    let family = if phase == MEMBERS {
        Family::LaneMember
    } else {
        Family::Due
    };
    let range = resume(tenant_range(family, tenant), start);
    let entries = read.scan(Cf::Index, &range, Direction::Forward, limit)?;
    let mut sources: HashMap<Seq, Option<SourceId>> = HashMap::new();
    for (k, _) in &entries {
        let (id, from) = if phase == MEMBERS {
            let mk = LaneMemberKey::decode(k)?;
            (RowId::new(mk.tenant, mk.seq, mk.sink), Origin::Member)
        } else {
            let dk = DueKey::decode(k)?;
            (
                RowId::new(dk.tenant, dk.seq, dk.sink),
                Origin::Due { due_ms: dk.due_ms },
            )
        };
        if !sinks(id.sink) {
            continue;
        }
        let src = match sources.get(&id.seq) {
            Some(s) => *s,
            None => {
                let s = match read.get(Cf::Hooks, &hook_key(tenant, id.seq))? {
                    Some(raw) => Some(Envelope::decode(&raw)?.source),
                    None => None,
                };
                sources.insert(id.seq, s);
                s
            }
        };
        if src == Some(source) {
            dead_into(
                read,
                &mut page.batch,
                id,
                DeadLetterOf {
                    from,
                    reason,
                    now_ms,
                    tolerant: false,
                    attempted: false,
                    log: None,
                    on_dead_head: ankusa_lanes::OnDeadHead::Release,
                },
            )?;
            page.moved += 1;
        }
    }
    page.next = match entries.last() {
        // A full page: there may be more of this phase.
        Some((last, _)) if entries.len() == limit => Some(Cursor {
            phase,
            key: after(last),
        }),
        // This phase is done. The ?D phase starts in the next call, after the
        // members' batch commits, so a head's release reads none of them.
        _ if phase == MEMBERS => Some(Cursor {
            phase: DUE,
            key: Vec::new(),
        }),
        _ => None,
    };
    Ok(page)
}

/// Retention (docs/design.md section 4): deletes the envelope, the archive entry
/// and the attempt log (?L, every row's) of each of `tenant`'s hooks received
/// before `cutoff_ms` that no delivery row and no ?Q references; examines up
/// to `limit` archive entries per call, oldest first, resumable through
/// [`Page::next`].
///
/// Keeps invariant 5 (only unreferenced envelopes go) and 7 (their log goes
/// with them).
///
/// # Errors
/// Engine and decode errors.
pub fn retention(
    read: &impl Read,
    tenant: TenantOrd,
    cutoff_ms: u64,
    cursor: Option<&Cursor>,
    limit: usize,
) -> Result<Page, QueueError> {
    if limit == 0 {
        return Ok(Page {
            next: Some(cursor.cloned().unwrap_or(Cursor {
                phase: 0,
                key: Vec::new(),
            })),
            ..Page::default()
        });
    }
    let range = resume(
        archive_time_range(tenant, 0, cutoff_ms),
        cursor.map_or(&[][..], |c| c.key.as_slice()),
    );
    let entries = read.scan(Cf::Archive, &range, Direction::Forward, limit)?;
    let mut page = Page::default();
    for (k, _) in &entries {
        let ak = ArchiveKey::decode(k)?;
        let has_row = read
            .first(
                Cf::Deliveries,
                &deliveries_of_hook_range(tenant, ak.seq),
                Direction::Forward,
            )?
            .is_some();
        let quarantined = read
            .get(Cf::Index, &quarantined_key(tenant, ak.seq))?
            .is_some();
        if !has_row && !quarantined {
            page.batch.delete(Cf::Hooks, hook_key(tenant, ak.seq));
            page.batch.delete(Cf::Archive, k.to_vec());
            // The attempt log outlives the rows (docs/design.md section 3,
            // "The attempt log"), not the envelope (invariant 7).
            delete_hook_log(read, &mut page.batch, tenant, ak.seq)?;
            page.moved += 1;
        }
    }
    page.next = match entries.last() {
        Some((last, _)) if entries.len() == limit => Some(Cursor {
            phase: 0,
            key: after(last),
        }),
        _ => None,
    };
    Ok(page)
}

/// Dedupe expiry (docs/design.md section 5, "Retention"): deletes `tenant`'s ?K
/// records whose `expires_at_ms` is at or before `now_ms` (a provider retry
/// after that is a new hook anyway, so the record only takes space);
/// examines up to `limit` records per call, resumable through [`Page::next`].
///
/// Precondition: built and committed by the Writer (`writer::WriterHandle::
/// expire_dedupe`), the only task that writes ?K: a record it renews between
/// another task's read and that task's delete would be lost, and a provider
/// retry of that hook delivered twice. Keeps every invariant (?K is in none).
///
/// # Errors
/// Engine and decode errors.
pub fn expire_dedupe(
    read: &impl Read,
    tenant: TenantOrd,
    now_ms: u64,
    cursor: Option<&Cursor>,
    limit: usize,
) -> Result<Page, QueueError> {
    if limit == 0 {
        return Ok(Page {
            next: Some(cursor.cloned().unwrap_or(Cursor {
                phase: 0,
                key: Vec::new(),
            })),
            ..Page::default()
        });
    }
    let range = resume(
        tenant_range(Family::Dedupe, tenant),
        cursor.map_or(&[][..], |c| c.key.as_slice()),
    );
    let entries = read.scan(Cf::Index, &range, Direction::Forward, limit)?;
    let mut page = Page::default();
    for (k, v) in &entries {
        if DedupeValue::decode(v)?.expires_at_ms <= now_ms {
            page.batch.delete(Cf::Index, k.to_vec());
            page.moved += 1;
        }
    }
    page.next = match entries.last() {
        Some((last, _)) if entries.len() == limit => Some(Cursor {
            phase: 0,
            key: after(last),
        }),
        _ => None,
    };
    Ok(page)
}

/// DLQ drop (docs/design.md section 4, `drop_dead`; the admin API's purge of
/// dead letters, section 5): deletes each row of `rows` from the DLQ for
/// good, in one batch. Per row: deletes its ?X key, its delivery row and its
/// attempt log (?L); dead −1, dead_bytes −size (tenant and node aggregate,
/// [`count`]). Per hook none of whose rows is left after the batch (its other
/// rows read from `read`, the rows of `rows` counted as gone): deletes the
/// envelope, the attempt log of its delivered rows, its archive entry, and
/// its ?K dedupe record when that record still names this hook (a
/// record rewritten for a later hook with the same dedupe key stays). A hook
/// with another row left (pending, in flight, or dead and not dropped) keeps
/// its envelope (invariant 5). An envelope that does not decode is deleted
/// without its archive entry and dedupe record (they cannot be found), which
/// retention tolerates. A row given twice is dropped once.
///
/// Lane state is not touched, except for the head of a held lane (ADR 0004
/// section 8: a dead row whose lane's ?H names it): its lane is released
/// ([`ankusa_lanes::release_held_head`], reading the lane's first member
/// from `read`: pass the live engine), so the key's next hook is promoted,
/// due `now_ms`. Any other dead row is in no lane family (ADR 0004 section
/// 3: a row of a lane is a member, the head, or in ?X).
///
/// A quarantined hook records no ?K ([`crate::quarantine`]), so a released
/// one that dies and is dropped finds either no record or another hook's
/// (the provider's genuine one): the seq check keeps that record. Held rows
/// (the held band of ?D) are not dead rows and are never touched.
///
/// Precondition: none (the ?X reads decide). Unlike every other ?K write, the
/// record's delete is not serialised by the Writer (the admin API commits the
/// batch under its own lock): should the record expire and an ingest of the
/// same dedupe key rewrite it for a new hook between this read and the
/// commit, that new record is deleted too. Keeps invariants 1-5, 7 and 8.
///
/// # Errors
/// [`QueueError::NotInDlq`] for the first row of `rows` that is not in ?X
/// (nothing is built then); [`QueueError::MissingRow`]; engine and decode
/// errors.
pub fn drop_dead(read: &impl Read, rows: &[RowId], now_ms: u64) -> Result<Batch, QueueError> {
    let rows: BTreeSet<RowId> = rows.iter().copied().collect();
    let mut batch = Batch::new();
    let mut hooks: BTreeMap<(TenantOrd, Seq), usize> = BTreeMap::new();
    for &id in &rows {
        let xkey = dead_letter_key(id.tenant, id.seq, id.sink);
        if read.get(Cf::Index, &xkey)?.is_none() {
            return Err(QueueError::NotInDlq { row: id });
        }
        let raw = read
            .get(Cf::Deliveries, &delivery_key(id.tenant, id.seq, id.sink))?
            .ok_or(QueueError::MissingRow { row: id })?;
        let row = DeliveryRow::decode(&raw)?;
        debug_assert_eq!(
            row.state,
            ankusa_keys::RowState::Dead,
            "drop of {id}: row state"
        );
        batch.delete(Cf::Index, xkey);
        batch.delete(Cf::Deliveries, delivery_key(id.tenant, id.seq, id.sink));
        delete_row_log(read, &mut batch, id)?;
        if let Some(lane) = row.lane
            && ankusa_lanes::holds_lane(read, id, lane)?
        {
            ankusa_lanes::release_held_head(read, &mut batch, id, lane, now_ms)?;
        }
        count(&mut batch, id.tenant, CounterField::Dead, -1);
        count(
            &mut batch,
            id.tenant,
            CounterField::DeadBytes,
            -i64::from(row.size),
        );
        *hooks.entry((id.tenant, id.seq)).or_default() += 1;
    }
    for ((tenant, seq), dropped) in hooks {
        // The hook's rows in sink order: one more than this batch drops is
        // enough to see whether another one is left.
        let left = read
            .scan(
                Cf::Deliveries,
                &deliveries_of_hook_range(tenant, seq),
                Direction::Forward,
                dropped + 1,
            )?
            .into_iter()
            .map(|(k, _)| DeliveryKey::decode(&k))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .any(|k| !rows.contains(&RowId::new(k.tenant, k.seq, k.sink)));
        if left {
            continue;
        }
        let hkey = hook_key(tenant, seq);
        let Some(raw) = read.get(Cf::Hooks, &hkey)? else {
            continue;
        };
        batch.delete(Cf::Hooks, hkey);
        // The log of its delivered rows goes with the envelope (invariant 7);
        // the dropped rows' entries are deleted twice in this batch, which
        // changes nothing.
        delete_hook_log(read, &mut batch, tenant, seq)?;
        let Ok(env) = Envelope::decode(&raw) else {
            continue;
        };
        batch.delete(Cf::Archive, archive_key(tenant, env.received_at_ms, seq));
        if let Some(dk) = &env.dedupe_key {
            let kkey = dedupe_key(tenant, env.source, dk);
            if let Some(v) = read.get(Cf::Index, &kkey)?
                && DedupeValue::decode(&v).is_ok_and(|d| d.seq == seq)
            {
                batch.delete(Cf::Index, kkey);
            }
        }
    }
    Ok(batch)
}

/// A new store (docs/design.md sections 3 and 8): every sentinel
/// (`ankusa_keys::sentinels`) and the format stamp (`ankusa_keys::STORE_FORMAT`).
pub fn init_store() -> Batch {
    let mut batch = Batch::new();
    for (cf, key) in sentinels() {
        batch.put(cf, key, SENTINEL_VALUE);
    }
    batch.put(
        Cf::Meta,
        ankusa_keys::FORMAT_KEY,
        ankusa_keys::meta::encode_format(STORE_FORMAT),
    );
    batch
}
