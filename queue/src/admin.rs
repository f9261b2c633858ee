//! Housekeeping and admin builders (DESIGN section 4): sweep_markers,
//! purge_tenant, dead_letter_source, retention, init_store.

use ankusa_engine::{Batch, Read};
use ankusa_keys::{SourceId, TenantOrd};

use crate::{Cursor, Page, QueueError};

/// Stale active-marker sweep (DESIGN section 4; ADR 4.6): deletes `tenant`'s ?A
/// when it has no ?D and no ?P (one seek each); otherwise an empty batch.
///
/// A Writer may commit ?D + ?A between this read and the commit: after
/// committing, commit [`sweep_markers_recheck`] (from the live engine), which
/// puts ?A back if a ?D or ?P appeared. Keeps invariant 4.
///
/// # Errors
/// Engine errors.
pub fn sweep_markers(read: &impl Read, tenant: TenantOrd) -> Result<Batch, QueueError> {
    let _ = (read, tenant);
    unimplemented!()
}

/// The second half of [`sweep_markers`]: puts `tenant`'s ?A back when it now
/// has a ?D or a ?P; otherwise an empty batch.
///
/// # Errors
/// Engine errors.
pub fn sweep_markers_recheck(read: &impl Read, tenant: TenantOrd) -> Result<Batch, QueueError> {
    let _ = (read, tenant);
    unimplemented!()
}

/// Tenant purge (DESIGN section 4; ADR 4.9): range-deletes every range of
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
    let _ = (read, tenant);
    unimplemented!()
}

/// Deleted source (DESIGN section 4; ADR 4.9): dead-letters `source`'s rows of
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
    let _ = (read, tenant, source, reason, cursor, limit, now_ms);
    unimplemented!()
}

/// Retention (DESIGN section 4): deletes the envelope and the archive entry of
/// each of `tenant`'s hooks received before `cutoff_ms` that no delivery row and
/// no ?Q references; examines up to `limit` archive entries per call, oldest
/// first, resumable through [`Page::next`].
///
/// Keeps invariant 5 (only unreferenced envelopes go).
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
    let _ = (read, tenant, cutoff_ms, cursor, limit);
    unimplemented!()
}

/// A new store (DESIGN sections 3 and 8): every sentinel
/// (`ankusa_keys::sentinels`) and the format stamp (`ankusa_keys::STORE_FORMAT`).
pub fn init_store() -> Batch {
    unimplemented!()
}
