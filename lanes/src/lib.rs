//! Ordering lanes (ADR 0004): the lane id, key normalisation, and the pure batch
//! builders of the lane families ?O (member), ?H (head) and ?P (marker).
//!
//! # What it owns
//! - [`lane_id`] and [`normalize_key`] (ADR 0004 section 2; docs/design.md section 10:
//!   an empty key is no key).
//! - Every write of ?O, ?H and ?P: the member put of ingest and revive (ADR
//!   4.1, 4.8), promote (4.2), the blocked-head bookkeeping (4.3), release
//!   (4.4), the sweep and its recheck (4.6), and the lane parts of a tenant
//!   purge (whole, or page by page) and of `dead_letter_source` (4.9); the
//!   held lane of `dead_letter: hold` (section 8): [`hold_head`],
//!   [`revive_held_head`], [`release_held_head`].
//! - [`count`]: the counter add every builder of `lanes` and `queue` uses, which
//!   moves a tenant's field and the node aggregate in the same batch.
//!
//! # Invariants it keeps (docs/design.md section 4, invariant 2)
//! - Every ?O member has an ?H or a ?P for its lane.
//! - Every ?H names exactly one row, and that row is in ?D or ?F, or in ?X
//!   when its sink holds dead heads (a held lane, ADR 0004 section 8).
//! - A lane has at most one row in ?D or ?F (its head); a held lane has none.
//!
//! The checker of these lives in `ankusa_queue::check_invariants` with the
//! others, because it needs the row families too.
//!
//! # Purity
//! No clock, no I/O of its own, no tokio: builders read through an
//! `ankusa_engine::Read` (a snapshot, or the live engine where the read closes a
//! race: ADR 4.5, 4.6), take `now_ms`, and append to a `Batch`.
#![deny(missing_docs, clippy::unwrap_used)]

use std::fmt;

use ankusa_engine::{Batch, Cf, Direction, EngineError, Read};
use ankusa_keys::{
    CounterField, DeliveryRow, DueKind, DueValue, EMPTY_VALUE, Family, KeyError, LaneHeadKey,
    LaneHeadValue, LaneId, LaneMarkerKey, LaneMemberKey, LaneMemberValue, LaneSeqValue, RowState,
    Seq, SinkIx, SourceId, TenantOrd, ValueError, active_key, counter_key, delivery_key, due_key,
    lane_head_key, lane_marker_key, lane_member_key, lane_members_range, lane_seq_key,
    tenant_range,
};
use sha2::{Digest, Sha256};

pub mod mutation;

use mutation::Mutation;

// ---- ids ----------------------------------------------------------------

/// A delivery row: hook `seq` of `tenant`, for sink `sink` (the key of cf
/// `deliveries`, and of ?F and ?X).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowId {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The hook.
    pub seq: Seq,
    /// The sink.
    pub sink: SinkIx,
}

impl RowId {
    /// The row `(tenant, seq, sink)`.
    pub const fn new(tenant: TenantOrd, seq: Seq, sink: SinkIx) -> RowId {
        RowId { tenant, seq, sink }
    }
}

impl fmt::Display for RowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.seq, self.sink)
    }
}

/// A lane member as read from ?O: its key and its size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    /// The ?O key (tenant, lane, seq, sink).
    pub key: LaneMemberKey,
    /// The row's size in bytes (the ?O value).
    pub size: u32,
}

impl Member {
    /// The member's delivery row.
    pub fn row(&self) -> RowId {
        RowId::new(self.key.tenant, self.key.seq, self.key.sink)
    }
}

/// Errors of the lane builders: what they read was not there or did not decode.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The engine failed a read.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A key read back does not decode as its family.
    #[error("corrupt key: {0}")]
    Key(#[from] KeyError),
    /// A value read back does not have its layout.
    #[error("corrupt value: {0}")]
    Value(#[from] ValueError),
    /// A lane member whose delivery row is gone (a corrupt store).
    #[error("lane member {row} has no delivery row")]
    MissingRow {
        /// The member's row.
        row: RowId,
    },
}

// ---- the key and the lane (ADR 0004 section 2) ----------------------------

/// The longest ordering key kept as is (the SQS group id limit); a longer one is
/// replaced by `"sha256:" + hex(sha256(key))` (ADR 0004 section 2).
pub const KEY_MAX_BYTES: usize = ankusa_keys::ORDERING_KEY_MAX_BYTES;

/// The key a row is ordered by, from the key resolved at ingest:
/// - empty: `None`, the sink's keyless lane (docs/design.md section 10);
/// - over [`KEY_MAX_BYTES`]: `"sha256:"` followed by the lower-case hex of the
///   key's sha256 (71 bytes);
/// - otherwise the key's bytes unchanged (not re-encoded: two different
///   invalid-UTF-8 values never merge).
///
/// Idempotent: a normalised key normalises to itself.
pub fn normalize_key(key: &[u8]) -> Option<Vec<u8>> {
    if key.is_empty() {
        return None;
    }
    if key.len() <= KEY_MAX_BYTES {
        return Some(key.to_vec());
    }
    let digest = Sha256::digest(key);
    let mut out = b"sha256:".to_vec();
    out.extend_from_slice(ankusa_engine::hex(&digest).as_bytes());
    Some(out)
}

/// The lane of a row (ADR 0004 section 2): the first 16 bytes of
/// `sha256(sink:16 BE, source:32 BE, 0:8, flag:8, key)`, with flag 1 and an
/// empty key for the keyless lane and flag 0 otherwise. The tenant is not in
/// the hash: it is the ordinal in front of every lane key.
///
/// `key` is normalised first ([`normalize_key`]): `Some(b"")` is the keyless
/// lane, and a key over [`KEY_MAX_BYTES`] and its normalised form give the same
/// lane.
pub fn lane_id(sink: SinkIx, source: SourceId, key: Option<&[u8]>) -> LaneId {
    let normalized = key.and_then(normalize_key);
    let (flag, key): (u8, &[u8]) = match &normalized {
        Some(k) => (0, k),
        None => (1, &[]),
    };
    let mut h = Sha256::new();
    h.update(sink.0.to_be_bytes());
    h.update(source.0.to_be_bytes());
    h.update([0u8, flag]);
    h.update(key);
    let digest = h.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    LaneId(id)
}

/// What a laned sink stamps into a new delivery row: its lane and its
/// (normalised) ordering key, `None` for the keyless lane.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LaneAssignment {
    /// The lane ([`lane_id`]).
    pub lane: LaneId,
    /// The normalised key ([`normalize_key`]); `None` on the keyless lane.
    pub ordering_key: Option<Vec<u8>>,
}

/// The lane and stored key of a row of `source`'s sink `sink` whose resolved
/// key is `key` (`None` when the key is missing): [`normalize_key`] then
/// [`lane_id`].
pub fn assign(sink: SinkIx, source: SourceId, key: Option<&[u8]>) -> LaneAssignment {
    let ordering_key = key.and_then(normalize_key);
    LaneAssignment {
        lane: lane_id(sink, source, ordering_key.as_deref()),
        ordering_key,
    }
}

// ---- counters -------------------------------------------------------------

/// Adds `delta` to counter `field` of `tenant` and of the node aggregate
/// ([`TenantOrd::NODE`]) in `batch` (docs/design.md section 3: both move in the same
/// batch). A zero delta adds nothing.
///
/// # Panics
/// When `tenant` is not a real tenant (the aggregate is moved only through its
/// tenants).
pub fn count(batch: &mut Batch, tenant: TenantOrd, field: CounterField, delta: i64) {
    assert!(
        tenant.is_tenant(),
        "counter add for reserved ordinal {}",
        tenant.0
    );
    batch.counter_add(counter_key(tenant, field), delta);
    batch.counter_add(counter_key(TenantOrd::NODE, field), delta);
}

// ---- reads ----------------------------------------------------------------

/// The lowest member of `lane` of `tenant` (the one a promote takes), if any:
/// one bounded seek.
///
/// # Errors
/// [`LaneError::Engine`], or a corrupt key or value.
pub fn first_member(
    read: &impl Read,
    tenant: TenantOrd,
    lane: LaneId,
) -> Result<Option<Member>, LaneError> {
    let Some((k, v)) = read.first(
        Cf::Index,
        &lane_members_range(tenant, lane),
        Direction::Forward,
    )?
    else {
        return Ok(None);
    };
    Ok(Some(Member {
        key: LaneMemberKey::decode(&k)?,
        size: LaneMemberValue::decode(&v)?.size,
    }))
}

/// The head of `lane` of `tenant` (the ?H value), if the lane is busy.
///
/// # Errors
/// [`LaneError::Engine`], or a corrupt value.
pub fn head(read: &impl Read, tenant: TenantOrd, lane: LaneId) -> Result<Option<RowId>, LaneError> {
    match read.get(Cf::Index, &lane_head_key(tenant, lane))? {
        Some(v) => {
            let h = LaneHeadValue::decode(&v)?;
            Ok(Some(RowId::new(tenant, h.seq, h.sink)))
        }
        None => Ok(None),
    }
}

/// The lanes of `tenant` that hold a pending row: every lane with a head
/// (?H) or a marker (?P); by invariant 2 a member's lane has one of them.
/// `None` when there are more than `limit` (two scans of at most
/// `limit + 1` keys each). A cluster node lists them when it fences a
/// tenant for a planned move (docs/design.md section 11, "Planned moves"):
/// only these keys' new hooks wait on the target.
///
/// # Errors
/// [`LaneError::Engine`], or a key that does not decode.
pub fn busy_lanes(
    read: &impl Read,
    tenant: TenantOrd,
    limit: usize,
) -> Result<Option<std::collections::BTreeSet<LaneId>>, LaneError> {
    let mut lanes = std::collections::BTreeSet::new();
    let bound = limit.saturating_add(1);
    for e in read.scan(
        Cf::Index,
        &tenant_range(Family::LaneHead, tenant),
        Direction::Forward,
        bound,
    )? {
        lanes.insert(LaneHeadKey::decode(&e.0)?.lane);
    }
    for e in read.scan(
        Cf::Index,
        &tenant_range(Family::LaneMarker, tenant),
        Direction::Forward,
        bound,
    )? {
        lanes.insert(LaneMarkerKey::decode(&e.0)?.lane);
    }
    Ok((lanes.len() <= limit).then_some(lanes))
}

// ---- 4.1 / 4.8: member put ------------------------------------------------

/// ADR 4.1 (ingest) and 4.8 (revive): `row` joins `lane` as a member. Appends
/// ?O (value `size`), ?P, the tenant's ?A, and lane_members +1. Blind puts: no
/// read of lane state.
///
/// The caller writes the delivery row itself (state `Member`, lane set) and
/// moves pending/bytes (ingest) or dead/pending (revive).
///
/// Precondition: `row` is in no other place. Keeps invariant 2: the new ?O has
/// its ?P; the sweep promotes it when the lane has no head.
pub fn member_put(batch: &mut Batch, row: RowId, lane: LaneId, size: u32) {
    batch.put(
        Cf::Index,
        lane_member_key(row.tenant, lane, row.seq, row.sink),
        LaneMemberValue { size }.encode(),
    );
    if !mutation::active(Mutation::MemberPutSkipsMarker) {
        batch.put(Cf::Index, lane_marker_key(row.tenant, lane), EMPTY_VALUE);
    }
    batch.put(Cf::Index, active_key(row.tenant), EMPTY_VALUE);
    count(batch, row.tenant, CounterField::LaneMembers, 1);
}

// ---- 4.2: promote ---------------------------------------------------------

/// ADR 4.2: makes `member` the head of its lane. Appends: delete its ?O, put ?H
/// (naming it), put ?D (kind 2, due `now_ms`, value size from the ?O) and the
/// tenant's ?A, delete ?P, rewrite its delivery row to state `Due`,
/// lane_members −1, lanes +1. first_attempt_at is left alone: it starts at the
/// first claim.
///
/// Precondition: `member` is the lowest member of a lane with no head (read it
/// with [`first_member`] from the same reader). Keeps invariant 2: the lane's
/// one row in ?D/?F is named by ?H.
///
/// # Errors
/// [`LaneError::MissingRow`] when the member has no delivery row; engine and
/// decode errors.
pub fn promote(
    read: &impl Read,
    batch: &mut Batch,
    member: &Member,
    now_ms: u64,
) -> Result<(), LaneError> {
    debug_assert!(
        head(read, member.key.tenant, member.key.lane)
            .ok()
            .flatten()
            .is_none(),
        "promote of {:?} into a busy lane",
        member.key
    );
    promote_inner(read, batch, member, now_ms, false)
}

/// Promote; `replaces_head` when the lane's old head is released in the same
/// batch (ADR 4.4): ?H is overwritten and lanes does not move.
fn promote_inner(
    read: &impl Read,
    batch: &mut Batch,
    member: &Member,
    now_ms: u64,
    replaces_head: bool,
) -> Result<(), LaneError> {
    let k = member.key;
    let row_id = member.row();
    let dkey = delivery_key(k.tenant, k.seq, k.sink);
    let raw = read
        .get(Cf::Deliveries, &dkey)?
        .ok_or(LaneError::MissingRow { row: row_id })?;
    let mut row = DeliveryRow::decode(&raw)?;
    debug_assert_eq!(
        row.state,
        RowState::Member,
        "promote of {row_id}, not a member"
    );
    debug_assert_eq!(
        row.lane,
        Some(k.lane),
        "promote of {row_id} into another lane"
    );
    row.state = RowState::Due;
    if row.lane_seq.is_none() {
        row.lane_seq = Some(next_lane_seq(read, batch, k.tenant, k.lane)?);
    }
    batch.delete(Cf::Index, lane_member_key(k.tenant, k.lane, k.seq, k.sink));
    batch.put(Cf::Deliveries, dkey, row.encode());
    if !mutation::active(Mutation::PromoteSkipsHead) {
        batch.put(
            Cf::Index,
            lane_head_key(k.tenant, k.lane),
            LaneHeadValue {
                seq: k.seq,
                sink: k.sink,
            }
            .encode(),
        );
    } else if replaces_head {
        batch.delete(Cf::Index, lane_head_key(k.tenant, k.lane));
    }
    batch.put(
        Cf::Index,
        due_key(k.tenant, now_ms, k.seq, k.sink),
        DueValue {
            size: member.size,
            kind: DueKind::HeadFirst,
        }
        .encode(),
    );
    batch.put(Cf::Index, active_key(k.tenant), EMPTY_VALUE);
    if !mutation::active(Mutation::PromoteKeepsMarker) {
        batch.delete(Cf::Index, lane_marker_key(k.tenant, k.lane));
    }
    count(batch, k.tenant, CounterField::LaneMembers, -1);
    if !replaces_head {
        count(batch, k.tenant, CounterField::Lanes, 1);
    }
    Ok(())
}

/// The lane sequence (ADR 0004 section 6, "The lane sequence"): the next
/// position of `lane`, one more than its ?S (1 for a lane that never gave one
/// out), with the put of ?S appended. A row keeps the position it was given at
/// its first promotion, so only a row that has none calls this: a retry, a
/// redelivery after a restart (the head stays the head, ADR 4.7) and a revive
/// of a dead letter carry the number the receiver may have seen already.
///
/// One promotion per lane per batch at most (a lane has one head), read from
/// the same reader as the promotion itself: what keeps invariant 2 keeps the
/// positions distinct.
fn next_lane_seq(
    read: &impl Read,
    batch: &mut Batch,
    tenant: TenantOrd,
    lane: LaneId,
) -> Result<u64, LaneError> {
    let key = lane_seq_key(tenant, lane);
    let last = match read.get(Cf::Index, &key)? {
        Some(v) => LaneSeqValue::decode(&v)?.last,
        None => 0,
    };
    let next = last.saturating_add(1);
    batch.put(Cf::Index, key, LaneSeqValue { last: next }.encode());
    Ok(next)
}

// ---- 4.3: a blocked head --------------------------------------------------

/// ADR 4.3: the lane head of `tenant` goes back to ?D as a retry or a breaker
/// park (kind 3): lanes_blocked +1. The caller (`queue::retry` / `park`)
/// rewrites the ?D with kind [`DueKind::HeadRetry`]; ?H and every member stay.
pub fn block_head(batch: &mut Batch, tenant: TenantOrd) {
    count(batch, tenant, CounterField::LanesBlocked, 1);
}

/// ADR 4.3: a kind 3 ?D row of `tenant` leaves ?D (claimed, dead-lettered,
/// purged): lanes_blocked −1.
pub fn unblock_head(batch: &mut Batch, tenant: TenantOrd) {
    count(batch, tenant, CounterField::LanesBlocked, -1);
}

// ---- 4.4: release ---------------------------------------------------------

/// ADR 4.4: `head` of `lane` ends its life in ?D/?F (delivered, dead-lettered,
/// orphaned). Reads the lane's first member from `read`; if there is one,
/// appends the promote of 4.2 for it (?H now names it; lanes does not move),
/// otherwise deletes ?H, lanes −1. The caller removes the head's own ?D/?F and
/// row in the same batch.
///
/// Read from the live engine, with no other lane work between the read and the
/// commit (ADR 4.5): a member committed after the read also committed its ?P,
/// and the sweep promotes it.
///
/// Precondition: ?H of `lane` names `head`. Keeps invariant 2.
///
/// # Errors
/// Engine and decode errors; [`LaneError::MissingRow`] for a member without a
/// row.
pub fn release_ops(
    read: &impl Read,
    batch: &mut Batch,
    head_row: RowId,
    lane: LaneId,
    now_ms: u64,
) -> Result<(), LaneError> {
    let tenant = head_row.tenant;
    debug_assert_eq!(
        head(read, tenant, lane).ok().flatten(),
        Some(head_row),
        "release of {head_row}, which is not the head of lane {lane}"
    );
    release_inner(read, batch, tenant, lane, now_ms).map(|_| ())
}

/// The release of [`release_ops`]: promotes the lane's first member (true)
/// or deletes ?H (false).
fn release_inner(
    read: &impl Read,
    batch: &mut Batch,
    tenant: TenantOrd,
    lane: LaneId,
    now_ms: u64,
) -> Result<bool, LaneError> {
    let next = if mutation::active(Mutation::ReleaseSkipsNextMember) {
        None
    } else {
        first_member(read, tenant, lane)?
    };
    match next {
        Some(m) => promote_inner(read, batch, &m, now_ms, true).map(|()| true),
        None => {
            batch.delete(Cf::Index, lane_head_key(tenant, lane));
            count(batch, tenant, CounterField::Lanes, -1);
            Ok(false)
        }
    }
}

// ---- section 8: a held lane ----------------------------------------------

/// What a dead-lettered lane head does to its lane (ADR 0004 section 8): the
/// sink entry's `dead_letter` option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnDeadHead {
    /// The head leaves its lane, whose next member is promoted (ADR 4.4): a
    /// poison hook does not stop its key, and a revived one runs after the
    /// key's later hooks.
    #[default]
    Release,
    /// The head keeps its lane while it is a dead letter: ?H still names it
    /// (its row is in ?X), so the key's later hooks wait behind it until an
    /// operator revives it ([`revive_held_head`]: it goes first) or drops it
    /// ([`release_held_head`]).
    Hold,
}

/// True when `row`, a dead letter of `lane`, is its lane's head: the lane is
/// held (ADR 0004 section 8). One point read of ?H.
///
/// # Errors
/// Engine and decode errors.
pub fn holds_lane(read: &impl Read, row: RowId, lane: LaneId) -> Result<bool, LaneError> {
    Ok(head(read, row.tenant, lane)? == Some(row))
}

/// ADR 0004 section 8: the head of a lane is dead-lettered under
/// [`OnDeadHead::Hold`]: ?H stays (naming the row the caller moves to ?X),
/// lanes_held +1, and nothing is promoted; the lane's members and its marker
/// stay (the sweep sees the head and leaves them).
///
/// Precondition: ?H names the row, which the same batch moves from ?D/?F to
/// ?X. Keeps invariant 2 (a head in ?X is a held lane's).
pub fn hold_head(batch: &mut Batch, tenant: TenantOrd) {
    count(batch, tenant, CounterField::LanesHeld, 1);
}

/// ADR 0004 section 8: the revive of a held lane's head: it goes back to ?D
/// as its lane's head, first attempt (kind 2, due `now_ms`), before every
/// member of its lane; with the tenant's ?A, lanes_held −1. ?H stays. The
/// caller deletes ?X, moves dead/pending, and rewrites the row to `Due` (its
/// lane position stays: a receiver sees the number it may have seen).
///
/// Precondition: ?H of the row's lane names `row` (see [`holds_lane`]) and
/// the row is in ?X. Keeps invariant 2.
pub fn revive_held_head(batch: &mut Batch, row: RowId, size: u32, now_ms: u64) {
    batch.put(
        Cf::Index,
        due_key(row.tenant, now_ms, row.seq, row.sink),
        DueValue {
            size,
            kind: DueKind::HeadFirst,
        }
        .encode(),
    );
    batch.put(Cf::Index, active_key(row.tenant), EMPTY_VALUE);
    count(batch, row.tenant, CounterField::LanesHeld, -1);
}

/// ADR 0004 section 8: a held lane's head leaves the store (dropped from the
/// DLQ): the release of ADR 4.4 (the lane's first member is promoted, or ?H
/// goes), lanes_held −1. The caller deletes the row and its ?X.
///
/// Read from the live engine. Unlike [`release_ops`], whose caller is the
/// pipeline (its sweep never runs between the read and the commit, ADR
/// 4.5), the drop is the admin API's, so a sweep may run in between: a
/// member a writer commits after the read comes with its ?P, which that
/// sweep deletes because ?H is still there. So a release that found no
/// member puts the ?P back (and the tenant's ?A): after the commit the
/// lane has no head and a marker, and the next sweep promotes such a
/// member, or deletes the marker when there is none.
///
/// Precondition: ?H of `lane` names `row`, which is in ?X. Keeps invariant 2.
///
/// # Errors
/// As [`release_ops`].
pub fn release_held_head(
    read: &impl Read,
    batch: &mut Batch,
    row: RowId,
    lane: LaneId,
    now_ms: u64,
) -> Result<(), LaneError> {
    count(batch, row.tenant, CounterField::LanesHeld, -1);
    if !release_inner(read, batch, row.tenant, lane, now_ms)? {
        batch.put(Cf::Index, lane_marker_key(row.tenant, lane), EMPTY_VALUE);
        batch.put(Cf::Index, active_key(row.tenant), EMPTY_VALUE);
    }
    Ok(())
}

/// ADR 0004 section 8, a tenant purge page: a held lane's head leaves with
/// its row (the caller deletes the row and its ?X in the same batch): ?H
/// goes, lanes −1, lanes_held −1. As [`remove_head`], the lane has no member
/// left.
pub fn remove_held_head(batch: &mut Batch, tenant: TenantOrd, lane: LaneId) {
    count(batch, tenant, CounterField::LanesHeld, -1);
    remove_head(batch, tenant, lane);
}

// ---- 4.6: sweep -----------------------------------------------------------

/// What [`sweep`] built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepOutcome {
    /// The batch to commit (promotes and marker deletes).
    pub batch: Batch,
    /// Lanes whose marker this batch deletes because they had neither head nor
    /// member: after committing `batch`, commit [`sweep_recheck`] of these.
    pub recheck: Vec<LaneId>,
    /// Markers read.
    pub markers: usize,
    /// Lanes promoted.
    pub promoted: usize,
}

/// ADR 4.6: reads up to `budget` of `tenant`'s ?P markers and, for each lane:
/// a head exists → delete the marker (the head's release will read the
/// members); no head and a member → promote it (4.2); neither → delete the
/// marker and list the lane in [`SweepOutcome::recheck`].
///
/// Read from the live engine. Keeps invariant 2.
///
/// # Errors
/// Engine and decode errors.
pub fn sweep(
    read: &impl Read,
    tenant: TenantOrd,
    budget: usize,
    now_ms: u64,
) -> Result<SweepOutcome, LaneError> {
    let mut out = SweepOutcome::default();
    let markers = read.scan(
        Cf::Index,
        &tenant_range(Family::LaneMarker, tenant),
        Direction::Forward,
        budget,
    )?;
    out.markers = markers.len();
    for (k, _) in markers {
        let marker = LaneMarkerKey::decode(&k)?;
        sweep_lane(read, &mut out, tenant, marker.lane, now_ms)?;
    }
    Ok(out)
}

/// ADR 4.6 for named lanes: the step of [`sweep`] for each of `lanes` whose
/// ?P marker is there, found by a point read of the marker instead of a scan
/// of the tenant's marker range. A lane whose marker is gone needs nothing: its
/// members (if any) have a head (invariant 2), whose release reads them.
///
/// `lanes` are the lanes a writer put members into since the last sweep (the
/// Writer's lane hints, docs/design.md section 5, "Lane sweep"), in any order
/// and with repeats; each is swept once, in lane order, so the outcome is
/// [`sweep`]'s over the same markers. Point reads, because a scan steps over
/// the deleted marker of every hook swept since the memtable was flushed (10%
/// of the relay's CPU in the 1,000-key load run); a point read finds the newest
/// version of one key. A marker nobody named (a hint lost in a crash) is left
/// to the full [`sweep`], which the dispatcher still runs at start-up and
/// periodically.
///
/// Read from the live engine. Keeps invariant 2.
///
/// # Errors
/// Engine and decode errors.
pub fn sweep_lanes(
    read: &impl Read,
    tenant: TenantOrd,
    lanes: &[LaneId],
    now_ms: u64,
) -> Result<SweepOutcome, LaneError> {
    let mut out = SweepOutcome::default();
    let mut lanes = lanes.to_vec();
    lanes.sort_unstable();
    lanes.dedup();
    for lane in lanes {
        if read
            .get(Cf::Index, &lane_marker_key(tenant, lane))?
            .is_none()
        {
            continue;
        }
        out.markers += 1;
        sweep_lane(read, &mut out, tenant, lane, now_ms)?;
    }
    Ok(out)
}

/// One marked lane of a sweep: a head → delete the marker; no head and a
/// member → promote it; neither → delete the marker and recheck the lane.
fn sweep_lane(
    read: &impl Read,
    out: &mut SweepOutcome,
    tenant: TenantOrd,
    lane: LaneId,
    now_ms: u64,
) -> Result<(), LaneError> {
    if head(read, tenant, lane)?.is_some() {
        out.batch.delete(Cf::Index, lane_marker_key(tenant, lane));
    } else if let Some(m) = first_member(read, tenant, lane)? {
        if mutation::active(Mutation::SweepDropsLiveMarker) {
            out.batch.delete(Cf::Index, lane_marker_key(tenant, lane));
        } else {
            promote_inner(read, &mut out.batch, &m, now_ms, false)?;
            out.promoted += 1;
        }
    } else {
        out.batch.delete(Cf::Index, lane_marker_key(tenant, lane));
        out.recheck.push(lane);
    }
    Ok(())
}

/// ADR 4.6, second half: after the [`sweep`] batch that deleted the markers of
/// `lanes` has committed, reads each lane's members once more from the live
/// engine and puts the marker back where one appeared (a writer's member
/// committed between the sweep's read and its delete). Empty batch when none
/// did.
///
/// # Errors
/// Engine and decode errors.
pub fn sweep_recheck(
    read: &impl Read,
    tenant: TenantOrd,
    lanes: &[LaneId],
) -> Result<Batch, LaneError> {
    let mut batch = Batch::new();
    for &lane in lanes {
        if mutation::active(Mutation::SweepSkipsRecheck) {
            continue;
        }
        if first_member(read, tenant, lane)?.is_some() {
            batch.put(Cf::Index, lane_marker_key(tenant, lane), EMPTY_VALUE);
        }
    }
    Ok(batch)
}

// ---- 4.9: erase and delete ------------------------------------------------

/// ADR 4.9, `dead_letter_source` part for a member: deletes `member`'s ?O,
/// lane_members −1. The caller moves the row to ?X and its counters. The lane's
/// ?P (if any) stays: the sweep deletes it once the lane is empty.
pub fn remove_member(batch: &mut Batch, member: &Member) {
    let k = member.key;
    batch.delete(Cf::Index, lane_member_key(k.tenant, k.lane, k.seq, k.sink));
    count(batch, k.tenant, CounterField::LaneMembers, -1);
}

/// ADR 4.9, the bounded purge of a tenant (`queue::purge_tenant_page`): the
/// head of `lane` leaves with its row (the caller deletes the row and its ?D
/// or ?F in the same batch): deletes ?H, lanes −1. No promote: a purge
/// deletes the lane's members before its head.
///
/// Precondition: ?H of `lane` names a row the same batch deletes, and the
/// lane has no member left. Keeps invariant 2.
pub fn remove_head(batch: &mut Batch, tenant: TenantOrd, lane: LaneId) {
    batch.delete(Cf::Index, lane_head_key(tenant, lane));
    count(batch, tenant, CounterField::Lanes, -1);
}

/// ADR 4.9, the bounded purge of a tenant: deletes the ?P marker of `lane`
/// (markers have no counter).
///
/// Precondition: the lane has no member left (a member needs its head or its
/// marker). Keeps invariant 2.
pub fn remove_marker(batch: &mut Batch, tenant: TenantOrd, lane: LaneId) {
    batch.delete(Cf::Index, lane_marker_key(tenant, lane));
}

/// The lane families ?O, ?H, ?P and ?S.
pub const LANE_FAMILIES: [Family; 4] = [
    Family::LaneMember,
    Family::LaneHead,
    Family::LaneMarker,
    Family::LaneSeq,
];

/// The counter fields lanes owns (ADR 0004 sections 3 and 8): lanes,
/// lanes_blocked, lane_members, lanes_held.
pub const LANE_FIELDS: [CounterField; 4] = [
    CounterField::Lanes,
    CounterField::LanesBlocked,
    CounterField::LaneMembers,
    CounterField::LanesHeld,
];

/// ADR 4.9, `purge_tenant` part: range-deletes `tenant`'s ?O, ?H, ?P and ?S. The
/// lane counters go with the tenant's other counters (the caller subtracts them
/// from the aggregate).
pub fn purge_ops(batch: &mut Batch, tenant: TenantOrd) {
    for family in LANE_FAMILIES {
        batch.delete_range(Cf::Index, tenant_range(family, tenant));
    }
}

#[cfg(test)]
mod tests;
