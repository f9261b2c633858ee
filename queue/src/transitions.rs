//! The pipeline's and the replayer's row transitions (docs/design.md section 4): claim,
//! retry, park, delivered, dead-letter, orphan, revive, recover_inflight.

use ankusa_engine::{Batch, Cf, Direction, Read};
use ankusa_keys::{
    CounterField, DeadLetterValue, DeliveryRow, DueKey, DueKind, DueValue, EMPTY_VALUE, Family,
    InFlightKey, InFlightValue, LaneMemberValue, RowState, active_key, dead_letter_key,
    delivery_key, due_key, family_range, in_flight_key, lane_member_key,
};
use ankusa_lanes::mutation::{self, Mutation};
use ankusa_lanes::{Member, OnDeadHead, count};

use crate::attempt_log::{LogAttempt, log_into};
use crate::{Cursor, Origin, Page, QueueError, RowId};

/// The delivery row of `id`, decoded.
pub(crate) fn read_row(read: &impl Read, id: RowId) -> Result<DeliveryRow, QueueError> {
    let raw = read
        .get(Cf::Deliveries, &delivery_key(id.tenant, id.seq, id.sink))?
        .ok_or(QueueError::MissingRow { row: id })?;
    Ok(DeliveryRow::decode(&raw)?)
}

fn put_row(batch: &mut Batch, id: RowId, row: &DeliveryRow) {
    batch.put(
        Cf::Deliveries,
        delivery_key(id.tenant, id.seq, id.sink),
        row.encode(),
    );
}

/// The ?F value of `id`, or [`QueueError::NotInState`].
fn read_in_flight(read: &impl Read, id: RowId) -> Result<InFlightValue, QueueError> {
    let raw = read
        .get(Cf::Index, &in_flight_key(id.tenant, id.seq, id.sink))?
        .ok_or(QueueError::NotInState {
            row: id,
            expected: "in flight",
        })?;
    Ok(InFlightValue::decode(&raw)?)
}

/// Claim (docs/design.md section 4): ?D → ?F. Deletes the ?D key `due`, puts ?F (size
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
    let id = RowId::new(due.tenant, due.seq, due.sink);
    let raw = read
        .get(Cf::Index, &due.encode())?
        .ok_or(QueueError::NotInState {
            row: id,
            expected: "due",
        })?;
    let dv = DueValue::decode(&raw)?;
    let mut row = read_row(read, id)?;
    debug_assert_eq!(row.state, RowState::Due, "claim of {id}: row state");
    debug_assert_eq!(
        dv.kind.is_head(),
        row.lane.is_some(),
        "claim of {id}: kind vs lane"
    );
    row.state = RowState::InFlight;
    row.first_attempt_at_ms.get_or_insert(now_ms);
    let mut batch = Batch::new();
    batch.delete(Cf::Index, due.encode());
    batch.put(
        Cf::Index,
        in_flight_key(id.tenant, id.seq, id.sink),
        InFlightValue {
            size: dv.size,
            kind: dv.kind,
            claimed_at_ms: now_ms,
        }
        .encode(),
    );
    put_row(&mut batch, id, &row);
    count(&mut batch, id.tenant, CounterField::InFlight, 1);
    if dv.kind == DueKind::HeadRetry && !mutation::active(Mutation::ClaimForgetsBlockedCounter) {
        ankusa_lanes::unblock_head(&mut batch, id.tenant);
    }
    Ok(batch)
}

/// Retry (docs/design.md section 4): ?F → ?D due at `due_ms`, kind 1 (kind 3 for a lane
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
    retry_logged(read, row, due_ms, error, now_ms, None)
}

/// [`retry`], with the attempt that ended here in the row's attempt log when
/// `log` is given (docs/design.md section 3, "The attempt log"): its ?L entry
/// and the delete of the entry `log.keep` attempts back in the same batch,
/// and the row's logged_attempts +1.
///
/// Precondition: as [`retry`]. Keeps invariants 1-4, 7 and 8.
///
/// # Errors
/// As [`retry`].
pub fn retry_logged(
    read: &impl Read,
    row: RowId,
    due_ms: u64,
    error: &str,
    now_ms: u64,
    log: Option<LogAttempt<'_>>,
) -> Result<Batch, QueueError> {
    let id = row;
    debug_assert!(due_ms >= now_ms, "{id} retried into the past");
    let fv = read_in_flight(read, id)?;
    let mut row = read_row(read, id)?;
    debug_assert_eq!(row.state, RowState::InFlight, "retry of {id}: row state");
    let kind = fv.kind.as_retry();
    let mut batch = Batch::new();
    batch.delete(Cf::Index, in_flight_key(id.tenant, id.seq, id.sink));
    batch.put(
        Cf::Index,
        due_key(id.tenant, due_ms, id.seq, id.sink),
        DueValue {
            size: fv.size,
            kind,
        }
        .encode(),
    );
    batch.put(Cf::Index, active_key(id.tenant), EMPTY_VALUE);
    row.state = RowState::Due;
    row.attempts = row.attempts.saturating_add(1);
    row.last_error = Some(error.to_owned());
    if let Some(log) = log {
        log_into(&mut batch, id, &mut row, log);
    }
    put_row(&mut batch, id, &row);
    count(&mut batch, id.tenant, CounterField::InFlight, -1);
    count(&mut batch, id.tenant, CounterField::RetriesTotal, 1);
    if kind == DueKind::HeadRetry {
        ankusa_lanes::block_head(&mut batch, id.tenant);
    }
    Ok(batch)
}

/// Breaker park (docs/design.md section 4): a due row that the pipeline does
/// not attempt because its sink's breaker is open moves, unclaimed, to
/// `due_ms` (when the breaker half-opens): ?D `due` → ?D at `due_ms`, kind 1
/// (kind 3 for a lane head, lanes_blocked +1 when it was not kind 3
/// already), with the tenant's ?A. The row record is not touched: the attempt
/// never ran, so no attempts +1, no retries_total +1, last_error kept, and a
/// row never attempted keeps no first_attempt_at: its retry horizon starts at
/// its first real attempt, however long it was parked.
///
/// Precondition: `due` is in ?D and not held, `due_ms >= now_ms`. Keeps
/// invariants 1-4 (a head stays the one row of its lane in ?D/?F).
///
/// # Errors
/// [`QueueError::NotInState`] when `due` is not in ?D; engine and decode
/// errors.
pub fn park(read: &impl Read, due: DueKey, due_ms: u64, now_ms: u64) -> Result<Batch, QueueError> {
    let id = RowId::new(due.tenant, due.seq, due.sink);
    debug_assert!(due_ms >= now_ms, "{id} parked into the past");
    debug_assert!(!due.is_held(), "park of a held row {due:?}");
    let key = due.encode();
    let raw = read.get(Cf::Index, &key)?.ok_or(QueueError::NotInState {
        row: id,
        expected: "due",
    })?;
    let dv = DueValue::decode(&raw)?;
    let kind = dv.kind.as_retry();
    let mut batch = Batch::new();
    batch.delete(Cf::Index, key);
    batch.put(
        Cf::Index,
        due_key(id.tenant, due_ms, id.seq, id.sink),
        DueValue {
            size: dv.size,
            kind,
        }
        .encode(),
    );
    batch.put(Cf::Index, active_key(id.tenant), EMPTY_VALUE);
    if kind == DueKind::HeadRetry && dv.kind != DueKind::HeadRetry {
        ankusa_lanes::block_head(&mut batch, id.tenant);
    }
    Ok(batch)
}

/// Delivered (docs/design.md section 4): deletes ?F and the row; pending −1, bytes
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
    delivered_logged(read, row, now_ms, None)
}

/// [`delivered`], with the delivering attempt in the row's attempt log when
/// `log` is given (docs/design.md section 3, "The attempt log"): the row goes,
/// its log stays until its hook's envelope goes (retention), so the
/// destination's answer to the delivery can still be read.
///
/// Precondition: as [`delivered`]. Keeps invariants 1-3, 7 and 8.
///
/// # Errors
/// As [`delivered`].
pub fn delivered_logged(
    read: &impl Read,
    row: RowId,
    now_ms: u64,
    log: Option<LogAttempt<'_>>,
) -> Result<Batch, QueueError> {
    let id = row;
    let fv = read_in_flight(read, id)?;
    let mut row = read_row(read, id)?;
    debug_assert_eq!(row.state, RowState::InFlight, "delivered {id}: row state");
    let mut batch = Batch::new();
    batch.delete(Cf::Index, in_flight_key(id.tenant, id.seq, id.sink));
    batch.delete(Cf::Deliveries, delivery_key(id.tenant, id.seq, id.sink));
    if let Some(log) = log {
        log_into(&mut batch, id, &mut row, log);
    }
    count(&mut batch, id.tenant, CounterField::Pending, -1);
    count(
        &mut batch,
        id.tenant,
        CounterField::Bytes,
        -i64::from(fv.size),
    );
    count(&mut batch, id.tenant, CounterField::InFlight, -1);
    count(&mut batch, id.tenant, CounterField::DeliveredTotal, 1);
    if let Some(lane) = row.lane {
        ankusa_lanes::release_ops(read, &mut batch, id, lane, now_ms)?;
    }
    Ok(batch)
}

/// What [`dead_into`] is told about one dead-letter: where the row is, why,
/// when, and how.
#[derive(Clone, Copy)]
pub(crate) struct DeadLetterOf<'a> {
    /// The place the row leaves.
    pub(crate) from: Origin,
    /// The dead letter's reason (and, `attempted`, the row's last error).
    pub(crate) reason: &'a str,
    /// The dead letter's time.
    pub(crate) now_ms: u64,
    /// Rewrite an undecodable or missing row from its index entry ([`orphan`]).
    pub(crate) tolerant: bool,
    /// The attempt that ended here ran: count it and keep its error.
    pub(crate) attempted: bool,
    /// The attempt that ended here, for the row's attempt log.
    pub(crate) log: Option<LogAttempt<'a>>,
    /// What a lane head's death does to its lane (ADR 0004 section 8).
    pub(crate) on_dead_head: OnDeadHead,
}

/// Appends the dead-letter of `id` to `batch` (see [`dead_letter`]).
pub(crate) fn dead_into(
    read: &impl Read,
    batch: &mut Batch,
    id: RowId,
    of: DeadLetterOf<'_>,
) -> Result<(), QueueError> {
    let DeadLetterOf {
        from,
        reason,
        now_ms,
        tolerant,
        attempted,
        log,
        on_dead_head,
    } = of;
    let decoded = read_row(read, id);
    let stored = match decoded {
        Ok(row) => Some(row),
        Err(QueueError::Value(_) | QueueError::MissingRow { .. }) if tolerant => None,
        Err(e) => return Err(e),
    };
    let not_in = |expected| QueueError::NotInState { row: id, expected };
    // Leave the place the row is in; learn its index size and kind.
    let (size, kind) = match from {
        Origin::Due { due_ms } => {
            let key = due_key(id.tenant, due_ms, id.seq, id.sink);
            let raw = read.get(Cf::Index, &key)?.ok_or_else(|| not_in("due"))?;
            let dv = DueValue::decode(&raw)?;
            batch.delete(Cf::Index, key);
            if dv.kind == DueKind::HeadRetry {
                ankusa_lanes::unblock_head(batch, id.tenant);
            }
            (dv.size, Some(dv.kind))
        }
        Origin::InFlight => {
            let fv = read_in_flight(read, id)?;
            batch.delete(Cf::Index, in_flight_key(id.tenant, id.seq, id.sink));
            count(batch, id.tenant, CounterField::InFlight, -1);
            (fv.size, Some(fv.kind))
        }
        Origin::Member => {
            let lane = stored
                .as_ref()
                .and_then(|r| r.lane)
                .ok_or_else(|| not_in("a lane member"))?;
            let key = lane_member_key(id.tenant, lane, id.seq, id.sink);
            let raw = read
                .get(Cf::Index, &key)?
                .ok_or_else(|| not_in("a lane member"))?;
            let key = ankusa_keys::LaneMemberKey::decode(&key)?;
            let size = LaneMemberValue::decode(&raw)?.size;
            ankusa_lanes::remove_member(batch, &Member { key, size });
            (size, None)
        }
    };
    let mut row = stored.clone().unwrap_or(DeliveryRow {
        state: RowState::Dead,
        size,
        attempts: 0,
        first_attempt_at_ms: None,
        last_error: None,
        lane: None,
        ordering_key: None,
        lane_seq: None,
        logged_attempts: 0,
    });
    debug_assert!(
        stored.is_none()
            || matches!(
                (from, row.state),
                (Origin::Due { .. }, RowState::Due)
                    | (Origin::InFlight, RowState::InFlight)
                    | (Origin::Member, RowState::Member)
            ),
        "dead-letter of {id} from {from}: row state {:?}",
        row.state
    );
    row.state = RowState::Dead;
    if attempted {
        // The attempt that ended here ran: count it, and keep its error.
        row.attempts = row.attempts.saturating_add(1);
        row.last_error = Some(reason.to_owned());
    }
    if let Some(log) = log {
        log_into(batch, id, &mut row, log);
    }
    batch.put(
        Cf::Index,
        dead_letter_key(id.tenant, id.seq, id.sink),
        DeadLetterValue {
            dead_at_ms: now_ms,
            reason: reason.to_owned(),
        }
        .encode(),
    );
    put_row(batch, id, &row);
    count(batch, id.tenant, CounterField::Pending, -1);
    count(batch, id.tenant, CounterField::Bytes, -i64::from(size));
    count(batch, id.tenant, CounterField::Dead, 1);
    count(
        batch,
        id.tenant,
        CounterField::DeadBytes,
        i64::from(row.size),
    );
    count(batch, id.tenant, CounterField::DeadLetteredTotal, 1);
    let is_head = kind.is_some_and(DueKind::is_head);
    if let (true, Some(lane)) = (is_head, row.lane)
        && !mutation::active(Mutation::DeadLetterSkipsRelease)
    {
        match on_dead_head {
            OnDeadHead::Release => ankusa_lanes::release_ops(read, batch, id, lane, now_ms)?,
            OnDeadHead::Hold => ankusa_lanes::hold_head(batch, id.tenant),
        }
    }
    Ok(())
}

/// Dead-letter (docs/design.md section 4): the row leaves `from` (?F; or ?D / ?O for a
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
    let mut batch = Batch::new();
    dead_into(
        read,
        &mut batch,
        row,
        DeadLetterOf {
            from,
            reason,
            now_ms,
            tolerant: false,
            attempted: false,
            log: None,
            on_dead_head: OnDeadHead::Release,
        },
    )?;
    Ok(batch)
}

/// [`dead_letter`] of a claimed row whose attempt just ended (a permanent
/// failure, a gone sink, a failure past the retry horizon): as
/// `dead_letter(read, row, Origin::InFlight, reason, now_ms)`, and the row's
/// attempts +1 and last_error = `reason`, so the dead row says how many
/// attempts it had (a row dead on its first attempt shows 1, not 0).
///
/// Precondition: `row` is in ?F. Keeps invariants 1-3.
///
/// # Errors
/// As [`dead_letter`].
pub fn dead_letter_attempted(
    read: &impl Read,
    row: RowId,
    reason: &str,
    now_ms: u64,
) -> Result<Batch, QueueError> {
    dead_letter_logged(read, row, reason, now_ms, None, OnDeadHead::Release)
}

/// [`dead_letter_attempted`], with the attempt that ended here in the row's
/// attempt log when `log` is given (docs/design.md section 3, "The attempt
/// log"); the dead row keeps its log until it is dropped or its hook's
/// envelope goes. A lane head releases its lane under
/// [`OnDeadHead::Release`], and keeps it held under [`OnDeadHead::Hold`]
/// (ADR 0004 section 8: ?H stays, naming the dead row; lanes_held +1).
///
/// Precondition: `row` is in ?F. Keeps invariants 1-3, 7 and 8.
///
/// # Errors
/// As [`dead_letter`].
pub fn dead_letter_logged(
    read: &impl Read,
    row: RowId,
    reason: &str,
    now_ms: u64,
    log: Option<LogAttempt<'_>>,
    on_dead_head: OnDeadHead,
) -> Result<Batch, QueueError> {
    let mut batch = Batch::new();
    dead_into(
        read,
        &mut batch,
        row,
        DeadLetterOf {
            from: Origin::InFlight,
            reason,
            now_ms,
            tolerant: false,
            attempted: true,
            log,
            on_dead_head,
        },
    )?;
    Ok(batch)
}

/// Orphan (docs/design.md section 4): a row whose envelope or source is gone (or whose
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
    orphan_logged(read, row, from, reason, now_ms, None)
}

/// [`orphan`], with the attempt that ended here (a sink that answered that
/// the hook's source is gone) in the row's attempt log when `log` is given
/// (docs/design.md section 3, "The attempt log").
///
/// Precondition: `row` is in `from`. Keeps invariants 1-3, 7 and 8, except
/// for a row that does not decode: rewritten from its index entry, its log
/// count starts again, and the checker reports its earlier entries above it
/// (invariant 8), as it reports the lane it can no longer release.
///
/// # Errors
/// As [`orphan`].
pub fn orphan_logged(
    read: &impl Read,
    row: RowId,
    from: Origin,
    reason: &str,
    now_ms: u64,
    log: Option<LogAttempt<'_>>,
) -> Result<Batch, QueueError> {
    let mut batch = Batch::new();
    dead_into(
        read,
        &mut batch,
        row,
        DeadLetterOf {
            from,
            reason,
            now_ms,
            tolerant: true,
            attempted: false,
            log,
            on_dead_head: OnDeadHead::Release,
        },
    )?;
    Ok(batch)
}

/// DLQ revive (docs/design.md section 4; ADR 4.8): deletes ?X; dead −1, dead_bytes
/// −size, pending +1, bytes +size; the row restarts (attempts 0, no
/// first_attempt_at, so the retry horizon starts again at its next claim).
/// Unlaned: ?D kind 0 due `now_ms` + ?A, state `Due`. Laned: a member + ?P
/// ([`ankusa_lanes::member_put`]), state `Member`: it runs after the lane's
/// current head and every earlier member. The head of a held lane (ADR 0004
/// section 8: its ?H names it) goes back as the head instead, before every
/// member: ?D kind 2 due `now_ms` + ?A, state `Due`, lanes_held −1
/// ([`ankusa_lanes::revive_held_head`]).
///
/// Precondition: none (the ?X read decides). Keeps invariants 1-4.
///
/// # Errors
/// [`QueueError::NotInDlq`] when `row` is not in ?X (docs/design.md section 10);
/// [`QueueError::MissingRow`]; engine and decode errors.
pub fn revive(read: &impl Read, row: RowId, now_ms: u64) -> Result<Batch, QueueError> {
    let id = row;
    let xkey = dead_letter_key(id.tenant, id.seq, id.sink);
    if read.get(Cf::Index, &xkey)?.is_none() {
        return Err(QueueError::NotInDlq { row: id });
    }
    let mut row = read_row(read, id)?;
    debug_assert_eq!(row.state, RowState::Dead, "revive of {id}: row state");
    let mut batch = Batch::new();
    batch.delete(Cf::Index, xkey);
    count(&mut batch, id.tenant, CounterField::Dead, -1);
    count(
        &mut batch,
        id.tenant,
        CounterField::DeadBytes,
        -i64::from(row.size),
    );
    count(&mut batch, id.tenant, CounterField::Pending, 1);
    count(
        &mut batch,
        id.tenant,
        CounterField::Bytes,
        i64::from(row.size),
    );
    row.attempts = 0;
    row.first_attempt_at_ms = None;
    let lane = row
        .lane
        .filter(|_| !mutation::active(Mutation::ReviveIgnoresLane));
    match lane {
        Some(lane) if ankusa_lanes::holds_lane(read, id, lane)? => {
            row.state = RowState::Due;
            ankusa_lanes::revive_held_head(&mut batch, id, row.size, now_ms);
        }
        Some(lane) => {
            row.state = RowState::Member;
            ankusa_lanes::member_put(&mut batch, id, lane, row.size);
        }
        None => {
            row.state = RowState::Due;
            batch.put(
                Cf::Index,
                due_key(id.tenant, now_ms, id.seq, id.sink),
                DueValue {
                    size: row.size,
                    kind: DueKind::First,
                }
                .encode(),
            );
            batch.put(Cf::Index, active_key(id.tenant), EMPTY_VALUE);
        }
    }
    put_row(&mut batch, id, &row);
    Ok(batch)
}

/// Startup recovery (docs/design.md section 4; ADR 4.7): up to `limit` ?F rows (all
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
    let entries = read.scan(
        Cf::Index,
        &family_range(Family::InFlight),
        Direction::Forward,
        limit,
    )?;
    let mut page = Page::default();
    for (k, v) in &entries {
        let fk = InFlightKey::decode(k)?;
        let fv = InFlightValue::decode(v)?;
        let id = RowId::new(fk.tenant, fk.seq, fk.sink);
        let mut row = read_row(read, id)?;
        let batch = &mut page.batch;
        batch.delete(Cf::Index, k.to_vec());
        batch.put(
            Cf::Index,
            due_key(id.tenant, now_ms, id.seq, id.sink),
            DueValue {
                size: fv.size,
                kind: fv.kind.as_first(),
            }
            .encode(),
        );
        batch.put(Cf::Index, active_key(id.tenant), EMPTY_VALUE);
        row.state = RowState::Due;
        put_row(batch, id, &row);
        count(batch, id.tenant, CounterField::InFlight, -1);
        page.moved += 1;
    }
    if limit > 0 && entries.len() == limit {
        page.next = Some(Cursor {
            phase: 0,
            key: Vec::new(),
        });
    }
    Ok(page)
}
