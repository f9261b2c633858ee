//! The pipeline's and the replayer's row transitions (DESIGN section 4): claim,
//! retry, park, delivered, dead-letter, orphan, revive, recover_inflight.

use ankusa_engine::{Batch, Read};
use ankusa_keys::DueKey;

use crate::{Origin, Page, QueueError, RowId};

/// Claim (DESIGN section 4): ?D → ?F. Deletes the ?D key `due`, puts ?F (size
/// and kind of the ?D value, claimed at `now_ms`), rewrites the row to state
/// `InFlight` with first_attempt_at set to `now_ms` at its first claim;
/// in_flight +1; a kind 3 row (a blocked head) lanes_blocked −1.
///
/// Precondition: `due` is in ?D. Keeps invariants 1-3 (a head stays the one row
/// of its lane in ?D/?F).
///
/// # Errors
/// [`QueueError::NotInState`] when `due` is not in ?D; [`QueueError::MissingRow`];
/// engine and decode errors.
pub fn claim(read: &impl Read, due: DueKey, now_ms: u64) -> Result<Batch, QueueError> {
    let _ = (read, due, now_ms);
    unimplemented!()
}

/// Retry (DESIGN section 4): ?F → ?D due at `due_ms`, kind 1 (kind 3 for a lane
/// head, lanes_blocked +1, ADR 4.3); attempts +1, last_error = `error`;
/// in_flight −1, retries_total +1. ?H and the lane's members stay.
///
/// Precondition: `row` is in ?F, `due_ms >= now_ms`. Keeps invariants 1-4.
///
/// # Errors
/// [`QueueError::NotInState`] when `row` is not in ?F; [`QueueError::MissingRow`];
/// engine and decode errors.
pub fn retry(
    read: &impl Read,
    row: RowId,
    due_ms: u64,
    error: &str,
    now_ms: u64,
) -> Result<Batch, QueueError> {
    let _ = (read, row, due_ms, error, now_ms);
    unimplemented!()
}

/// Breaker park (DESIGN section 4): as [`retry`] but the attempt never ran: no
/// attempts +1, no retries_total +1, last_error unchanged. ?F → ?D due at
/// `due_ms`, kind 1 (kind 3 for a lane head, lanes_blocked +1); in_flight −1.
///
/// Precondition: `row` is in ?F, `due_ms >= now_ms`. Keeps invariants 1-4.
///
/// # Errors
/// As [`retry`].
pub fn park(read: &impl Read, row: RowId, due_ms: u64, now_ms: u64) -> Result<Batch, QueueError> {
    let _ = (read, row, due_ms, now_ms);
    unimplemented!()
}

/// Delivered (DESIGN section 4): deletes ?F and the row; pending −1, bytes
/// −size, in_flight −1, delivered_total +1; for a laned row the lane release of
/// ADR 4.4 ([`ankusa_lanes::release_ops`], reading the next member from `read`:
/// pass the live engine). The envelope stays until retention.
///
/// Precondition: `row` is in ?F. Keeps invariants 1-3.
///
/// # Errors
/// [`QueueError::NotInState`] when `row` is not in ?F; [`QueueError::MissingRow`];
/// engine and decode errors.
pub fn delivered(read: &impl Read, row: RowId, now_ms: u64) -> Result<Batch, QueueError> {
    let _ = (read, row, now_ms);
    unimplemented!()
}

/// Dead-letter (DESIGN section 4): the row leaves `from` (?F; or ?D / ?O for a
/// deleted source) for ?X (dead_at `now_ms`, `reason`), row state `Dead`;
/// pending −1, bytes −size, dead +1, dead_bytes +size, dead_lettered_total +1;
/// from ?F in_flight −1; from a kind 3 ?D lanes_blocked −1; from ?O
/// lane_members −1 (no release: a member is not the head). A lane head (from ?F
/// or ?D) releases its lane (ADR 4.4): a poison hook does not hold its key.
///
/// Precondition: `row` is in `from`. Keeps invariants 1-3.
///
/// # Errors
/// [`QueueError::NotInState`] when `row` is not in `from`;
/// [`QueueError::MissingRow`]; engine and decode errors.
pub fn dead_letter(
    read: &impl Read,
    row: RowId,
    from: Origin,
    reason: &str,
    now_ms: u64,
) -> Result<Batch, QueueError> {
    let _ = (read, row, from, reason, now_ms);
    unimplemented!()
}

/// Orphan (DESIGN section 4): a row whose envelope or source is gone (or whose
/// stored row does not decode) is dead-lettered with `reason`, as
/// [`dead_letter`], lane release included. A row that does not decode is
/// rewritten from its index entry (size; no lane: a head's lane cannot be
/// released then, which [`crate::check_invariants`] will report).
///
/// Precondition: `row` is in `from`. Keeps invariants 1-3.
///
/// # Errors
/// As [`dead_letter`], except that an undecodable row is not an error.
pub fn orphan(
    read: &impl Read,
    row: RowId,
    from: Origin,
    reason: &str,
    now_ms: u64,
) -> Result<Batch, QueueError> {
    let _ = (read, row, from, reason, now_ms);
    unimplemented!()
}

/// DLQ revive (DESIGN section 4; ADR 4.8): deletes ?X; dead −1, dead_bytes
/// −size, pending +1, bytes +size; the row restarts (attempts 0, no
/// first_attempt_at, so the retry horizon starts again at its next claim).
/// Unlaned: ?D kind 0 due `now_ms` + ?A, state `Due`. Laned: a member + ?P
/// ([`ankusa_lanes::member_put`]), state `Member`: it runs after the lane's
/// current head and every earlier member.
///
/// Precondition: none (the ?X read decides). Keeps invariants 1-4.
///
/// # Errors
/// [`QueueError::NotInDlq`] when `row` is not in ?X (DESIGN section 10);
/// [`QueueError::MissingRow`]; engine and decode errors.
pub fn revive(read: &impl Read, row: RowId, now_ms: u64) -> Result<Batch, QueueError> {
    let _ = (read, row, now_ms);
    unimplemented!()
}

/// Startup recovery (DESIGN section 4; ADR 4.7): up to `limit` ?F rows (all
/// tenants, in key order) go back to ?D as a first attempt (kind 0, or 2 for a
/// lane head; a kind 3 row becomes kind 2) due `now_ms`, with ?A, state `Due`;
/// in_flight −1. ?H and members are untouched; attempts and first_attempt_at
/// stay. Call again (after committing) while [`Page::next`] is `Some`: the moved
/// rows are gone from ?F, so the next call starts at the first left.
///
/// Precondition: no attempt is running (startup). Keeps invariants 1-4.
///
/// # Errors
/// [`QueueError::MissingRow`]; engine and decode errors.
pub fn recover_inflight(read: &impl Read, limit: usize, now_ms: u64) -> Result<Page, QueueError> {
    let _ = (read, limit, now_ms);
    unimplemented!()
}
