//! The bounded, resumable purge of a tenant (docs/design.md section 4,
//! `purge_tenant_page`; ADR 0004 section 4.9) and the purge mark in `meta`
//! (docs/design.md section 5, "Purge a tenant").
//!
//! [`crate::purge_tenant`] deletes a tenant in one batch; a tenant with a
//! million rows makes that batch too large for one write. [`purge_tenant_page`]
//! deletes the same state page by page, each page one batch that removes at
//! most `limit` entries of one family together with everything that refers to
//! them and the counter moves that go with them (tenant and node aggregate in
//! the same batch, [`ankusa_lanes::count`]), so every invariant of
//! docs/design.md section 4 holds after every page, and the node aggregate is
//! the sum over tenants at every step.
//!
//! Phases, in order (a page works in one phase; the cursor says which):
//!
//! 1. lane members (?O): the member, its delivery row; pending −1, bytes
//!    −size, lane_members −1. Members go first so that no head is removed while
//!    its lane still has a member (a member needs its head or its marker).
//! 2. rows in flight (?F): the ?F entry, the row; pending −1, bytes −size,
//!    in_flight −1; a lane head also its ?H (lanes −1).
//! 3. due rows (?D, the held band included): the ?D entry, the row; pending
//!    −1, bytes −size; a blocked head lanes_blocked −1; a head its ?H.
//! 4. dead letters (?X): the entry, the row; dead −1, dead_bytes −size; the
//!    head of a held lane (ADR 0004 section 8) its ?H (lanes −1, lanes_held
//!    −1).
//! 5. quarantined hooks (?Q): the entry; quarantined −1.
//! 6. lane markers (?P), then any ?H left (none in a consistent store).
//! 7. delivery rows in no index (none in a consistent store), dedupe records
//!    (?K), envelopes (`hooks`), archive entries (`archive`): range deletes
//!    of what the page read. A page of envelopes also range-deletes the
//!    attempt log (?L) of the seqs it spans, so no entry outlives its
//!    envelope (invariant 7).
//! 8. the last page: the tenant's ?A, every counter of the tenant subtracted
//!    from the node aggregate and the tenant's ?C range deleted (so the
//!    `_total` fields leave the aggregate too), and a range delete of every
//!    range of `keys::tenant_ranges`, which finds nothing after a clean run.
//!
//! The registry entries of the tenant (`tenant/name/...`, `tenant/ord/...` in
//! `meta`) stay: a name keeps its number for the life of the store.

use std::collections::BTreeMap;

use ankusa_engine::{Batch, Cf, Direction, KeyRange, Read, scan_pages};
use ankusa_keys::meta::{MetaKey, decode_purge, encode_purge, purge_key, purges_range};
use ankusa_keys::{
    CounterField, DeadLetterKey, DeliveryRow, DueKey, DueKind, DueValue, Family, HookKey,
    InFlightKey, InFlightValue, LaneHeadKey, LaneMarkerKey, LaneMemberKey, LaneMemberValue,
    QuarantinedKey, TenantOrd, active_key, archive_tenant_range, attempt_log_hooks_range,
    deliveries_tenant_range, delivery_key, hooks_tenant_range, tenant_range,
};
use ankusa_lanes::{Member, count};

use crate::{Cursor, Page, QueueError, RowId};

/// The phases of [`purge_tenant_page`], in order, by the name
/// [`purge_phase`] gives them.
const PHASES: [&str; 13] = [
    "lane members",
    "deliveries in flight",
    "due deliveries",
    "dead letters",
    "quarantined hooks",
    "lane markers",
    "lane heads",
    "delivery rows",
    "dedupe records",
    "envelopes",
    "archive entries",
    "counters",
    "done",
];
const MEMBERS: u8 = 0;
const IN_FLIGHT: u8 = 1;
const DUE: u8 = 2;
const DEAD: u8 = 3;
const QUARANTINED: u8 = 4;
const MARKERS: u8 = 5;
const HEADS: u8 = 6;
const ROWS: u8 = 7;
const DEDUPE: u8 = 8;
const HOOKS: u8 = 9;
const ARCHIVE: u8 = 10;
const FINAL: u8 = 11;

/// What the next [`purge_tenant_page`] from `cursor` works on, for
/// operators: `"lane members"`, `"due deliveries"`, ..., `"counters"` (the
/// last page); `None` (not started) is the first phase.
pub fn purge_phase(cursor: Option<&Cursor>) -> &'static str {
    let phase = cursor.map_or(MEMBERS, |c| c.phase);
    PHASES.get(usize::from(phase)).copied().unwrap_or("done")
}

/// The range a phase works on, and its column family.
fn phase_range(phase: u8, tenant: TenantOrd) -> (Cf, KeyRange) {
    match phase {
        MEMBERS => (Cf::Index, tenant_range(Family::LaneMember, tenant)),
        IN_FLIGHT => (Cf::Index, tenant_range(Family::InFlight, tenant)),
        DUE => (Cf::Index, tenant_range(Family::Due, tenant)),
        DEAD => (Cf::Index, tenant_range(Family::DeadLetter, tenant)),
        QUARANTINED => (Cf::Index, tenant_range(Family::Quarantined, tenant)),
        MARKERS => (Cf::Index, tenant_range(Family::LaneMarker, tenant)),
        HEADS => (Cf::Index, tenant_range(Family::LaneHead, tenant)),
        ROWS => (Cf::Deliveries, deliveries_tenant_range(tenant)),
        DEDUPE => (Cf::Index, tenant_range(Family::Dedupe, tenant)),
        HOOKS => (Cf::Hooks, hooks_tenant_range(tenant)),
        ARCHIVE => (Cf::Archive, archive_tenant_range(tenant)),
        other => unreachable!("purge phase {other} has no range"),
    }
}

fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// The row of `id`, when it is there and decodes.
fn row_of(read: &impl Read, id: RowId) -> Result<Option<DeliveryRow>, QueueError> {
    match read.get(Cf::Deliveries, &delivery_key(id.tenant, id.seq, id.sink))? {
        Some(raw) => Ok(DeliveryRow::decode(&raw).ok()),
        None => Ok(None),
    }
}

/// A head leaving with its row: its ?H goes when the ?H names it.
fn head_leaves(
    read: &impl Read,
    batch: &mut Batch,
    id: RowId,
    row: Option<&DeliveryRow>,
) -> Result<(), QueueError> {
    if let Some(lane) = row.and_then(|r| r.lane)
        && ankusa_lanes::head(read, id.tenant, lane)? == Some(id)
    {
        ankusa_lanes::remove_head(batch, id.tenant, lane);
    }
    Ok(())
}

/// The last page: ?A, the counters, and a range delete of every range of the
/// tenant (empty after a clean run).
fn final_page(read: &impl Read, tenant: TenantOrd) -> Result<Batch, QueueError> {
    // What is left is the one-batch purge's work (counters, range deletes,
    // the lanes' own families), plus the tenant's ?A entry.
    let mut batch = crate::admin::purge_tenant(read, tenant)?;
    batch.delete(Cf::Index, active_key(tenant));
    Ok(batch)
}

/// The bounded tenant purge (docs/design.md section 4, `purge_tenant_page`;
/// ADR 4.9): one page of at most `limit` entries of the phase `cursor` is in
/// (the module docs list the phases), from where the previous page stopped;
/// `None` starts. [`Page::next`] is `None` after the last page, which deletes
/// the tenant's counters and subtracts them from the node aggregate.
/// [`Page::moved`] counts the delivery rows and quarantined hooks the page
/// deleted.
///
/// Precondition: nothing else writes the tenant's rows, lanes or quarantine
/// meanwhile (the Writer refuses its hooks and the pipeline leaves it alone
/// while its purge mark is set: docs/design.md section 5, "Purge a tenant").
/// Keeps invariants 1-5 after every page, and the node aggregate equal to
/// the sum over tenants; after the last page no key of the tenant is left in
/// any column family but its registry entries in `meta`.
///
/// # Panics
/// On a reserved ordinal.
///
/// # Errors
/// Engine and decode errors.
pub fn purge_tenant_page(
    read: &impl Read,
    tenant: TenantOrd,
    cursor: Option<&Cursor>,
    limit: usize,
) -> Result<Page, QueueError> {
    assert!(tenant.is_tenant(), "purge of reserved ordinal {}", tenant.0);
    let (phase, start) = match cursor {
        Some(c) => (c.phase, c.key.as_slice()),
        None => (MEMBERS, &[][..]),
    };
    let mut page = Page::default();
    if phase >= FINAL {
        page.batch = final_page(read, tenant)?;
        return Ok(page);
    }
    let limit = limit.max(1);
    let (cf, mut range) = phase_range(phase, tenant);
    if start > range.start.as_slice() {
        range.start = start.to_vec();
    }
    let entries = read.scan(cf, &range, Direction::Forward, limit)?;
    let batch = &mut page.batch;
    for (k, v) in &entries {
        match phase {
            MEMBERS => {
                let key = LaneMemberKey::decode(k)?;
                let size = LaneMemberValue::decode(v)?.size;
                ankusa_lanes::remove_member(batch, &Member { key, size });
                batch.delete(Cf::Deliveries, delivery_key(tenant, key.seq, key.sink));
                count(batch, tenant, CounterField::Pending, -1);
                count(batch, tenant, CounterField::Bytes, -i64::from(size));
                page.moved += 1;
            }
            IN_FLIGHT => {
                let key = InFlightKey::decode(k)?;
                let fv = InFlightValue::decode(v)?;
                let id = RowId::new(tenant, key.seq, key.sink);
                let row = row_of(read, id)?;
                batch.delete(Cf::Index, k.to_vec());
                batch.delete(Cf::Deliveries, delivery_key(tenant, key.seq, key.sink));
                count(batch, tenant, CounterField::Pending, -1);
                count(batch, tenant, CounterField::Bytes, -i64::from(fv.size));
                count(batch, tenant, CounterField::InFlight, -1);
                if fv.kind.is_head() {
                    head_leaves(read, batch, id, row.as_ref())?;
                }
                page.moved += 1;
            }
            DUE => {
                let key = DueKey::decode(k)?;
                let dv = DueValue::decode(v)?;
                let id = RowId::new(tenant, key.seq, key.sink);
                let row = row_of(read, id)?;
                batch.delete(Cf::Index, k.to_vec());
                batch.delete(Cf::Deliveries, delivery_key(tenant, key.seq, key.sink));
                count(batch, tenant, CounterField::Pending, -1);
                count(batch, tenant, CounterField::Bytes, -i64::from(dv.size));
                if dv.kind == DueKind::HeadRetry {
                    ankusa_lanes::unblock_head(batch, tenant);
                }
                if dv.kind.is_head() {
                    head_leaves(read, batch, id, row.as_ref())?;
                }
                page.moved += 1;
            }
            DEAD => {
                let key = DeadLetterKey::decode(k)?;
                let id = RowId::new(tenant, key.seq, key.sink);
                let row = row_of(read, id)?;
                batch.delete(Cf::Index, k.to_vec());
                batch.delete(Cf::Deliveries, delivery_key(tenant, key.seq, key.sink));
                count(batch, tenant, CounterField::Dead, -1);
                if let Some(r) = &row {
                    count(batch, tenant, CounterField::DeadBytes, -i64::from(r.size));
                    if let Some(lane) = r.lane
                        && ankusa_lanes::holds_lane(read, id, lane)?
                    {
                        ankusa_lanes::remove_held_head(batch, tenant, lane);
                    }
                }
                page.moved += 1;
            }
            QUARANTINED => {
                QuarantinedKey::decode(k)?;
                batch.delete(Cf::Index, k.to_vec());
                count(batch, tenant, CounterField::Quarantined, -1);
                page.moved += 1;
            }
            MARKERS => {
                let key = LaneMarkerKey::decode(k)?;
                ankusa_lanes::remove_marker(batch, tenant, key.lane);
            }
            HEADS => {
                let key = LaneHeadKey::decode(k)?;
                ankusa_lanes::remove_head(batch, tenant, key.lane);
            }
            _ => {}
        }
    }
    // Families without counters go as one range delete of what was read.
    if phase >= ROWS
        && let Some((last, _)) = entries.last()
    {
        batch.delete_range(cf, KeyRange::new(range.start.clone(), after(last)));
        // The attempt log of the envelopes this page deletes: every ?L entry
        // of the seqs from the page's first envelope to its last (the span
        // holds no other hook, and a consistent store has no entry without
        // its envelope: invariant 7). An earlier page's envelopes are gone
        // with their log; the last page's range delete of the tenant takes
        // whatever a store broken otherwise still has.
        if phase == HOOKS
            && let Some((first, _)) = entries.first()
        {
            let (first, last) = (HookKey::decode(first)?.seq, HookKey::decode(last)?.seq);
            batch.delete_range(Cf::Index, attempt_log_hooks_range(tenant, first, last));
        }
    }
    page.next = Some(match entries.last() {
        Some((last, _)) if entries.len() == limit => Cursor {
            phase,
            key: after(last),
        },
        // This phase is done: the next one starts in the next call, after this
        // page has committed.
        _ => Cursor {
            phase: phase + 1,
            key: Vec::new(),
        },
    });
    Ok(page)
}

/// The purge marks the store holds (docs/design.md section 5, "Purge a
/// tenant"): each tenant being purged, with the id of the admin job that
/// purges it. Read at start by the Writer and the pipeline.
///
/// # Errors
/// Engine errors; a mark that does not decode.
pub fn read_purges(read: &impl Read) -> Result<BTreeMap<TenantOrd, u64>, QueueError> {
    let mut out = BTreeMap::new();
    for kv in scan_pages(read, Cf::Meta, purges_range(), Direction::Forward, 256) {
        let (k, v) = kv?;
        let MetaKey::Purge(tenant) = MetaKey::decode(&k)? else {
            continue;
        };
        out.insert(tenant, decode_purge(&v)?);
    }
    Ok(out)
}

/// Puts the purge mark of `tenant`, naming admin job `job` (`meta`
/// `purge/<ord>`). The Writer appends it to its batch when it starts refusing
/// the tenant's hooks (`writer::WriterHandle::purge_mark`).
pub fn set_purge(batch: &mut Batch, tenant: TenantOrd, job: u64) {
    batch.put(Cf::Meta, purge_key(tenant), encode_purge(job));
}

/// Deletes the purge mark of `tenant`.
pub fn clear_purge(batch: &mut Batch, tenant: TenantOrd) {
    batch.delete(Cf::Meta, purge_key(tenant));
}
