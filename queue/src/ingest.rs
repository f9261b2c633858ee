//! Ingest (DESIGN section 4, `new_ops`; ADR 0004 section 4.1) and quarantine /
//! release: the Writer's builders. Blind puts only: nothing here reads shared
//! state, so a batch of many hooks (group commit) is a concatenation.

use ankusa_engine::{Batch, Read};
use ankusa_keys::{Envelope, Seq, SinkIx, TenantOrd};
use ankusa_lanes::LaneAssignment;

use crate::QueueError;

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

/// The size a hook counts against its tenant's queue bounds (counter `bytes`):
/// the length of its stored envelope, saturated at `u32::MAX`. Every row of the
/// hook has this size.
pub fn hook_size(envelope: &Envelope) -> u32 {
    let _ = envelope;
    unimplemented!()
}

/// Ingest (DESIGN section 4; ADR 4.1): appends the envelope (cf `hooks`), the
/// archive entry, the dedupe record (`?K`, when the envelope has a dedupe key),
/// and per row: the delivery row, then either ?D (kind 0, due `now_ms`) + ?A, or
/// for a laned row the member put of [`ankusa_lanes::member_put`] (?O + ?P + ?A);
/// counters pending +1 and bytes +size per row (lane_members +1 per laned row).
///
/// Blind puts, no reads. Precondition: `hook.seq` is new (the Writer assigned
/// it), `rows` has distinct sinks. Keeps every invariant: each row is in exactly
/// one place, each member has its ?P, each ?D has its ?A.
pub fn new_ops(batch: &mut Batch, hook: &Hook<'_>, rows: &[NewRow], now_ms: u64) {
    let _ = (batch, hook, rows, now_ms);
    unimplemented!()
}

/// Quarantine (DESIGN section 4): appends the envelope, the archive entry, the
/// dedupe record and ?Q (`reason`), quarantined +1. No delivery row: the hook is
/// held back until [`release`].
///
/// Blind puts. Precondition: `hook.seq` is new.
pub fn quarantine(batch: &mut Batch, hook: &Hook<'_>, reason: &str) {
    let _ = (batch, hook, reason);
    unimplemented!()
}

/// Quarantine release (DESIGN section 4): deletes ?Q of hook `seq`,
/// quarantined −1, and builds its rows through the row part of [`new_ops`]
/// (the envelope is already stored).
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
    let _ = (read, tenant, seq, rows, now_ms);
    unimplemented!()
}
