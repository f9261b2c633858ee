//! Delivery rows (docs/design.md section 4): the pure batch builder of every row
//! transition, and the checker of the store's invariants.
//!
//! # What it owns
//! Every write of cf `hooks`, `deliveries`, `archive` and of the index families
//! ?D, ?F, ?A, ?X, ?Q, ?K, ?L (the lane families ?O, ?H, ?P through
//! [`ankusa_lanes`]), and the counters 1..=13 (docs/design.md section 3), which every
//! builder moves in the same batch for the tenant and the node aggregate
//! ([`ankusa_lanes::count`]).
//!
//! # Shape
//! Each builder is pure: it reads what it needs through an
//! [`ankusa_engine::Read`] (a snapshot, or the live engine where the read closes
//! a race), takes `now_ms` (unix milliseconds), and returns a [`Batch`] (or
//! appends to one, for the Writer's group commit). No clock, no I/O of its own,
//! no tokio. Each builder's doc states its precondition and the invariant it
//! keeps, and `debug_assert!`s the precondition where that is cheap.
//!
//! # Invariants (docs/design.md section 4), checked by [`check_invariants`]
//! 1. Every row of `deliveries` is in exactly one place: ?D, ?F, ?O or ?X, and
//!    its state field says which.
//! 2. Every ?O has an ?H or a ?P for its lane; every ?H names exactly one row in
//!    ?D or ?F; a lane has at most one row in ?D or ?F.
//! 3. Every counter equals the count (or byte sum) of its keys, per tenant, and
//!    the aggregate equals the sum over tenants.
//! 4. A tenant with a ?D row that is not held (docs/design.md section 5,
//!    "Pause") has an ?A marker.
//! 5. A delivery row's envelope exists in `hooks`.
//! 6. No hook or delivery row is stored above the seq high-water mark (the
//!    Writer gives out seqs above it: [`seq_above_high_water`]).
//! 7. An attempt log entry (?L) has its hook's envelope in `hooks`.
//! 8. An attempt log entry of a row that exists is numbered at most the
//!    row's `logged_attempts`.
//!
//! # Decisions where docs/design.md and ADR 0004 are silent
//! - A row's size ([`hook_size`]) is the length of its stored envelope.
//! - A breaker [`park`] moves a due row unclaimed (?D → ?D) and counts neither
//!   an attempt nor retries_total (the attempt never ran); a row never
//!   attempted keeps no first_attempt_at, so its retry horizon starts at its
//!   first real attempt. It still moves a head to kind 3 and lanes_blocked +1.
//! - [`revive`] restarts the row: attempts 0 and no first_attempt_at, so the
//!   retry horizon starts again at its next claim; last_error is kept.
//! - lanes_blocked counts the kind 3 rows in ?D (a claimed kind 3 row is not
//!   blocked), which is what [`check_invariants`] compares it with.
//! - [`purge_tenant`] subtracts every field from the aggregate, the `_total`
//!   ones too, so the aggregate stays the sum over tenants.
//! - [`sweep_markers`] has a recheck ([`sweep_markers_recheck`]) like the lane
//!   sweep's: a Writer's ?D + ?A committed between its read and its delete
//!   would otherwise leave a ?D without ?A (invariant 4).
//! - [`drop_dead`] deletes a hook's envelope, archive entry and dedupe record
//!   with its last row: a provider retry of a dropped hook is accepted again
//!   as a new hook (the operator dropped it on purpose).
//! - [`dead_letter_source`] leaves rows in ?F to the pipeline (their attempt
//!   ends SourceGone) and dead-letters members before heads, so a head's
//!   release never promotes a member of the deleted source.
//! - A paused sink's due rows are *held* ([`hold`]): the same ?D key with the
//!   top bit of its due time set, so no due scan reads them and they do not
//!   keep their tenant active; [`unhold`] puts them back at the time they had.
//!   Held rows are still pending (they count against the tenant's bounds), a
//!   held head still blocks its lane, and the retry horizon of a row already
//!   attempted keeps running while it is held.
//! - A quarantined hook takes no part in dedupe: [`quarantine`] writes no ?K,
//!   and [`release`] keeps the hook's seq (its laned rows join their lanes as
//!   a revive does, ADR 4.8). [`drop_quarantined`] deletes the envelope and
//!   the archive entry with the ?Q.
//! - [`expire_dedupe`] is the Writer's to run: it is the only task that writes
//!   ?K, so an expired record it deletes cannot have been renewed meanwhile.
//! - [`purge_tenant_page`] purges a tenant page by page (members before heads,
//!   so no member is ever stranded), each page moving the counters of what it
//!   deletes; the last page subtracts what is left of the tenant's counters
//!   (its `_total` fields) from the aggregate and deletes them.
//! - [`replay`] is [`new_ops`] without the dedupe record: an archive replay's
//!   copy takes no part in dedupe, so the provider's own record stays as it is.
//! - The attempt log ([`attempt_log`]) is written by the outcome's own
//!   transition ([`retry_logged`], [`delivered_logged`],
//!   [`dead_letter_logged`], [`orphan_logged`]); the builders without the
//!   suffix write none (the model tests', the fixtures'). A revive keeps the
//!   row's log and its count: the revived row's attempts follow its earlier
//!   ones. A hook's log outlives its delivered rows and goes with its
//!   envelope; a hand-over does not carry it (the owner's seqs are its own).
//!
//! # Errors
//! Operating errors (the engine failed, a stored value does not decode, a row is
//! not where the caller said, a revive of a row not in the DLQ) are
//! [`QueueError`]s. A broken invariant found inside a builder is an assertion.
#![deny(missing_docs, clippy::unwrap_used)]

use std::fmt;

use ankusa_engine::{Batch, EngineError};
use ankusa_keys::{KeyError, Seq, SinkIx, TenantOrd, ValueError};

pub use ankusa_lanes as lanes;
pub use ankusa_lanes::{LaneAssignment, RowId, count, mutation};

mod admin;
mod admission;
pub mod attempt_log;
mod check;
pub mod handover;
mod ingest;
pub mod metrics;
pub mod migrate;
mod pause;
mod purge;
mod registry;
mod transitions;
mod unconfigured;
#[cfg(feature = "writer")]
pub mod writer;

pub use admin::{
    OLDEST_DUE_TENANTS, dead_letter_sinks, dead_letter_source, drop_dead, expire_dedupe,
    init_store, oldest_due, purge_tenant, retention, sweep_markers, sweep_markers_recheck,
};
pub use admission::{hook_size, is_purging, live_dedupe};
pub use attempt_log::{LogAttempt, hook_attempts, row_attempts};
pub use check::{
    Census, CheckReport, CounterFix, SeqAboveHighWater, Violation, check_invariants, check_store,
    counter_fix_batch, seq_above_high_water,
};
pub use ingest::{
    Hook, NewRow, QuarantinePage, Quarantined, drop_quarantined, list_quarantined, new_ops,
    quarantine, release, replay,
};
pub use pause::{
    PauseMap, SinkUnhold, clear_pause, hold, read_pauses, set_pause, unhold, unhold_sink,
};
pub use purge::{clear_purge, purge_phase, purge_tenant_page, read_purges, set_purge};
pub use registry::{Registry, register, register_numbered};
pub use transitions::{
    claim, dead_letter, dead_letter_attempted, dead_letter_logged, delivered, delivered_logged,
    orphan, orphan_logged, park, recover_inflight, retry, retry_logged, revive,
};
pub use unconfigured::pending_rows;

/// Where a row is taken from by [`dead_letter`] and [`orphan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// From ?D, where it is due at `due_ms` (the ?D key's due field).
    Due {
        /// The due time in the row's ?D key, unix milliseconds.
        due_ms: u64,
    },
    /// From ?F (claimed).
    InFlight,
    /// From ?O (a lane member; only for a deleted source).
    Member,
}

/// Where a bounded, resumable builder stopped: pass it back to continue. Opaque.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    phase: u8,
    key: Vec<u8>,
}

impl Cursor {
    /// The cursor as bytes (`phase:8`, then the key), for a caller that
    /// persists where a bounded job stopped (an admin job's state,
    /// docs/design.md section 5, "Admin API"). Read back with
    /// [`Cursor::from_bytes`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.key.len());
        out.push(self.phase);
        out.extend_from_slice(&self.key);
        out
    }

    /// A cursor from [`Cursor::to_bytes`]; `None` for empty bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Cursor> {
        let (&phase, key) = bytes.split_first()?;
        Some(Cursor {
            phase,
            key: key.to_vec(),
        })
    }
}

/// What a bounded builder built: one batch, and where to continue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// The batch to commit.
    pub batch: Batch,
    /// `None` when the work is done; otherwise pass it to the next call (after
    /// committing `batch`).
    pub next: Option<Cursor>,
    /// Entries this call moved, deleted or dead-lettered.
    pub moved: usize,
}

/// Operating errors of the queue builders.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The engine failed a read.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A key read back does not decode as its family.
    #[error("corrupt key: {0}")]
    Key(#[from] KeyError),
    /// A value read back does not have its layout.
    #[error("corrupt value: {0}")]
    Value(#[from] ValueError),
    /// A revive of a row that is not in the DLQ (docs/design.md section 10: a second
    /// revive is refused, not reported as a success).
    #[error("row {row} is not in the DLQ")]
    NotInDlq {
        /// The row.
        row: RowId,
    },
    /// A transition of a row that is not where the transition takes it from
    /// (a claim of a row no longer in ?D, an outcome of a row no longer in ?F).
    #[error("row {row} is not {expected}")]
    NotInState {
        /// The row.
        row: RowId,
        /// Where it was expected: `due`, `in flight`, `a lane member`.
        expected: &'static str,
    },
    /// An index entry whose delivery row is gone.
    #[error("row {row} has no delivery row")]
    MissingRow {
        /// The row.
        row: RowId,
    },
    /// A release of a hook that is not quarantined.
    #[error("hook {tenant}/{seq} is not quarantined")]
    NotQuarantined {
        /// The tenant.
        tenant: TenantOrd,
        /// The hook.
        seq: Seq,
    },
    /// No number is left for a new tenant or source.
    #[error("the {what} registry is full")]
    RegistryFull {
        /// `tenant` or `source`.
        what: &'static str,
    },
    /// A number given for a name (a cluster's) that this store already
    /// gives to another name, or a name this store numbers otherwise.
    #[error("{what} {name} is number {number} in the cluster, but {detail} in this store")]
    RegistryConflict {
        /// `tenant` or `source`.
        what: &'static str,
        /// The name.
        name: String,
        /// The number it was given.
        number: u32,
        /// What the store says instead.
        detail: String,
    },
    /// A cluster hand-over's page refused (docs/design.md section 11,
    /// "Hand-over").
    #[error(transparent)]
    Handover(#[from] handover::HandoverError),
    /// A hook whose envelope is gone where one is needed.
    #[error("hook {tenant}/{seq} has no envelope")]
    MissingEnvelope {
        /// The tenant.
        tenant: TenantOrd,
        /// The hook.
        seq: Seq,
    },
}

impl From<ankusa_lanes::LaneError> for QueueError {
    fn from(e: ankusa_lanes::LaneError) -> Self {
        use ankusa_lanes::LaneError as L;
        match e {
            L::Engine(e) => QueueError::Engine(e),
            L::Key(e) => QueueError::Key(e),
            L::Value(e) => QueueError::Value(e),
            L::MissingRow { row } => QueueError::MissingRow { row },
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Due { due_ms } => write!(f, "due at {due_ms}"),
            Origin::InFlight => f.write_str("in flight"),
            Origin::Member => f.write_str("a lane member"),
        }
    }
}

/// `(tenant, seq, sink)` as a [`RowId`].
pub fn row_id(tenant: TenantOrd, seq: Seq, sink: SinkIx) -> RowId {
    RowId::new(tenant, seq, sink)
}
