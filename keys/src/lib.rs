//! Every key and value layout of an Ankusa store (store format 2,
//! docs/design.md section 3; the lane families of ADR 0004 section 3). Only
//! this crate builds key bytes: every other crate calls a builder here and
//! decodes with the checked decoder here.
//!
//! # What it owns
//! - The key families and their layouts, fixed-width big endian, so the byte
//!   order of keys is the order of their field tuples: [`index`] (?D ?F ?A ?O ?H
//!   ?P ?X ?Q ?K ?C ?L in cf `index`), [`rows`] (cfs `hooks`, `deliveries`,
//!   `archive`), [`meta`] (cf `meta`).
//! - The value layouts: [`values`] (index families), [`record`] (the versioned
//!   envelope, delivery row and attempt record).
//! - The ranges every scan and range delete uses: per family, per tenant, and the
//!   narrower ones (due up to now, one lane's members, one hook's rows).
//! - The [`sentinel`]s and the [`CounterField`]s.
//!
//! # Invariants it keeps
//! - Every index key begins `family:8, ord:32`; every key of `hooks`,
//!   `deliveries` and `archive` begins `ord:32`: one tenant's state is one
//!   contiguous range per family.
//! - Ordinal 0 ([`TenantOrd::NODE`]) appears only in counter keys (the node
//!   aggregate); ordinal `u32::MAX` only in sentinels. Builders panic on either
//!   where it does not belong (a broken invariant of the caller); decoders
//!   return [`KeyError::ReservedOrdinal`].
//! - No range built here contains a sentinel.
//!
//! The crate does no I/O and reads no clock: times are passed in as unix
//! milliseconds (`*_ms`).
#![deny(missing_docs, clippy::unwrap_used)]

mod codec;
mod error;
mod ids;
pub mod index;
pub mod meta;
pub mod record;
pub mod rows;
pub mod sentinel;
pub mod values;

use ankusa_engine::{Cf, KeyRange};

pub use error::{KeyError, ValueError};
pub use ids::{LaneId, Seq, SinkIx, SourceId, TenantOrd};
pub use index::{
    ActiveKey, AttemptLogKey, CounterField, CounterKey, DeadLetterKey, DedupeKey, DueKey, Family,
    HELD_DUE_BIT, InFlightKey, LaneHeadKey, LaneMarkerKey, LaneMemberKey, LaneSeqKey,
    QuarantinedKey, active_key, attempt_log_hook_range, attempt_log_hooks_range, attempt_log_key,
    attempt_log_row_range, counter_key, dead_letter_key, dedupe_key, dedupe_source_range, due_key,
    due_range_until, family_range, held_due_ms, held_due_range, in_flight_key, lane_head_key,
    lane_marker_key, lane_member_key, lane_members_range, lane_seq_key, live_due_range,
    quarantined_key, tenant_range,
};
pub use meta::{
    FORMAT_KEY, MIGRATION_KEY, MetaKey, MigrationProgress, NODE_ID_KEY, ORIGIN_KEY,
    SEQ_HIGH_WATER_KEY, STORE_FORMAT,
};
pub use record::{AttemptRecord, DeliveryRow, Envelope, ORDERING_KEY_MAX_BYTES, RowState};
pub use rows::{
    ArchiveKey, DeliveryKey, HookKey, archive_key, archive_range, archive_tenant_range,
    archive_time_range, deliveries_of_hook_range, deliveries_range, deliveries_tenant_range,
    delivery_key, hook_key, hooks_range, hooks_tenant_range,
};
pub use sentinel::{SENTINEL_VALUE, is_sentinel, sentinels};
pub use values::{
    DeadLetterValue, DedupeValue, DueKind, DueValue, EMPTY_VALUE, InFlightValue, LaneHeadValue,
    LaneMemberValue, LaneSeqValue, QuarantinedValue, decode_counter_value, decode_empty_value,
};

/// Every range that holds state of `tenant`, one per index family (its
/// counters included) and one per cf `hooks`, `deliveries`, `archive`: what a
/// tenant purge range-deletes (docs/design.md section 4, `purge_tenant`), so a family
/// added here is purged with the others (ADR 0004, Consequences). The purge
/// reads the tenant's counters first, to subtract them from the node aggregate.
///
/// # Panics
/// On a reserved ordinal (0 or `u32::MAX`).
pub fn tenant_ranges(tenant: TenantOrd) -> Vec<(Cf, KeyRange)> {
    assert!(
        tenant.is_tenant(),
        "tenant_ranges of reserved ordinal {}",
        tenant.0
    );
    let mut all: Vec<(Cf, KeyRange)> = Family::ALL
        .into_iter()
        .map(|f| (Cf::Index, tenant_range(f, tenant)))
        .collect();
    all.push((Cf::Hooks, hooks_tenant_range(tenant)));
    all.push((Cf::Deliveries, deliveries_tenant_range(tenant)));
    all.push((Cf::Archive, archive_tenant_range(tenant)));
    all
}
