//! Keys of the `index` column family (docs/design.md section 3; ADR 0004 section 3).
//!
//! Every index key is `family:8, ord:32, ...` with every integer fixed-width big
//! endian, so the byte order of keys is the order of their field tuples and one
//! tenant's state in one family is one contiguous range.
//!
//! | family | key | what it is for |
//! | --- | --- | --- |
//! | `?D` due | `?D, ord:32, due_ms:64, seq:64, sink:16` | a row waiting for its attempt; the dispatch scan reads a tenant's due rows up to now; a due_ms with [`HELD_DUE_BIT`] set is a row held by a pause |
//! | `?F` in flight | `?F, ord:32, seq:64, sink:16` | a claimed row whose attempt is running |
//! | `?A` active tenant | `?A, ord:32` | the tenant may have due work (a visit reads its ?D) |
//! | `?O` lane member | `?O, ord:32, lane:128, seq:64, sink:16` | a laned row waiting its turn, in seq order (ADR 0004 section 3) |
//! | `?H` lane head | `?H, ord:32, lane:128` | the one row of a busy lane that is in ?D or ?F |
//! | `?P` lane marker | `?P, ord:32, lane:128` | the lane may have a member and no head: promotion work |
//! | `?X` dead letter | `?X, ord:32, seq:64, sink:16` | a row in the DLQ |
//! | `?Q` quarantined | `?Q, ord:32, seq:64` | a hook held back from delivery |
//! | `?K` dedupe | `?K, ord:32, source:32, dedupe_key` | a provider id already accepted, per source (docs/design.md section 10) |
//! | `?C` counter | `?C, ord:32, field:8` | a maintained counter ([`CounterField`]), ordinal 0 the node aggregate |
//! | `?L` attempt log | `?L, ord:32, seq:64, sink:16, attempt:32` | one attempt of a row: when, how long, how it ended, what the destination answered ([`crate::AttemptRecord`]) |
//!
//! Each family has a builder returning the key bytes (a fixed array; a `Vec` for
//! the variable-width ?K), a decoded struct with a checked `decode`, and ranges
//! ([`family_range`], [`tenant_range`], [`due_range_until`],
//! [`lane_members_range`], [`dedupe_source_range`]) that never contain a
//! sentinel ([`crate::sentinels`]).
//!
//! Builders panic on a tenant ordinal the family cannot hold (0 outside ?C,
//! `u32::MAX` anywhere): that is a broken invariant of the caller.

use ankusa_engine::KeyRange;

use crate::codec::{Put, Take};
use crate::error::KeyError;
use crate::ids::{LaneId, Seq, SinkIx, SourceId, TenantOrd};

/// A key family of the `index` column family: the first byte of its keys.
///
/// `Cf` names a column family, `Family` a prefix inside `index`
/// (docs/contributing.md, "Cf and Family": two types, two words).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Family {
    /// `?D` due: a row waiting for an attempt at `due_ms`.
    Due = b'D',
    /// `?F` in flight: a claimed row.
    InFlight = b'F',
    /// `?A` active tenant: the tenant may have due work.
    Active = b'A',
    /// `?O` lane member: a laned row waiting its turn.
    LaneMember = b'O',
    /// `?H` lane head: the lane's row in ?D or ?F.
    LaneHead = b'H',
    /// `?P` lane marker: the lane may have a member and no head.
    LaneMarker = b'P',
    /// `?X` dead letter: a row in the DLQ.
    DeadLetter = b'X',
    /// `?Q` quarantined: a hook held back from delivery.
    Quarantined = b'Q',
    /// `?K` dedupe: a provider id accepted for a source.
    Dedupe = b'K',
    /// `?C` counter: a maintained counter.
    Counter = b'C',
    /// `?S` lane sequence: the last position given out in a lane (ADR 0004
    /// section 6, "The lane sequence").
    LaneSeq = b'S',
    /// `?L` attempt log: one attempt of a row and the destination's answer
    /// (docs/design.md section 3, "The attempt log").
    AttemptLog = b'L',
}

/// Width of a `?D` key: `?D, ord:32, due_ms:64, seq:64, sink:16`.
pub const DUE_KEY_LEN: usize = 1 + 4 + 8 + 8 + 2;
/// Width of a `?F` key: `?F, ord:32, seq:64, sink:16`.
pub const IN_FLIGHT_KEY_LEN: usize = 1 + 4 + 8 + 2;
/// Width of a `?A` key: `?A, ord:32`.
pub const ACTIVE_KEY_LEN: usize = 1 + 4;
/// Width of a `?O` key: `?O, ord:32, lane:128, seq:64, sink:16`.
pub const LANE_MEMBER_KEY_LEN: usize = 1 + 4 + 16 + 8 + 2;
/// Width of a `?H` key: `?H, ord:32, lane:128`.
pub const LANE_HEAD_KEY_LEN: usize = 1 + 4 + 16;
/// Width of a `?P` key: `?P, ord:32, lane:128`.
pub const LANE_MARKER_KEY_LEN: usize = 1 + 4 + 16;
/// Width of a `?X` key: `?X, ord:32, seq:64, sink:16`.
pub const DEAD_LETTER_KEY_LEN: usize = 1 + 4 + 8 + 2;
/// Width of a `?Q` key: `?Q, ord:32, seq:64`.
pub const QUARANTINED_KEY_LEN: usize = 1 + 4 + 8;
/// Width of the fixed part of a `?K` key (`?K, ord:32, source:32`); the dedupe
/// key's bytes follow.
pub const DEDUPE_KEY_PREFIX_LEN: usize = 1 + 4 + 4;
/// Width of a `?C` key: `?C, ord:32, field:8`.
pub const COUNTER_KEY_LEN: usize = 1 + 4 + 1;
/// Width of a `?S` key: `?S, ord:32, lane:128`.
pub const LANE_SEQ_KEY_LEN: usize = 1 + 4 + 16;
/// Width of a `?L` key: `?L, ord:32, seq:64, sink:16, attempt:32`.
pub const ATTEMPT_LOG_KEY_LEN: usize = 1 + 4 + 8 + 2 + 4;

impl Family {
    /// Every family, in the order of docs/design.md section 3's table.
    pub const ALL: [Family; 12] = [
        Family::Due,
        Family::InFlight,
        Family::Active,
        Family::LaneMember,
        Family::LaneHead,
        Family::LaneMarker,
        Family::DeadLetter,
        Family::Quarantined,
        Family::Dedupe,
        Family::Counter,
        Family::LaneSeq,
        Family::AttemptLog,
    ];

    /// The family byte that begins every key of the family.
    pub const fn as_byte(self) -> u8 {
        self as u8
    }

    /// The family whose byte is `byte`.
    ///
    /// # Errors
    /// [`KeyError::UnknownFamily`] for a byte that is no family's.
    pub fn from_byte(byte: u8) -> Result<Family, KeyError> {
        Family::ALL
            .into_iter()
            .find(|f| f.as_byte() == byte)
            .ok_or(KeyError::UnknownFamily(byte))
    }

    /// The family of an index key (its first byte).
    ///
    /// # Errors
    /// [`KeyError::Truncated`] for an empty key, [`KeyError::UnknownFamily`].
    pub fn of_key(key: &[u8]) -> Result<Family, KeyError> {
        let first = key.first().ok_or(KeyError::Truncated { what: "index" })?;
        Family::from_byte(*first)
    }

    /// The family's name in errors and tools, e.g. `?D due`.
    pub const fn what(self) -> &'static str {
        match self {
            Family::Due => "?D due",
            Family::InFlight => "?F in flight",
            Family::Active => "?A active tenant",
            Family::LaneMember => "?O lane member",
            Family::LaneHead => "?H lane head",
            Family::LaneMarker => "?P lane marker",
            Family::DeadLetter => "?X dead letter",
            Family::Quarantined => "?Q quarantined",
            Family::Dedupe => "?K dedupe",
            Family::Counter => "?C counter",
            Family::LaneSeq => "?S lane sequence",
            Family::AttemptLog => "?L attempt log",
        }
    }

    /// Width of the family's keys in bytes; for ?K, whose dedupe key has a
    /// variable width, the width of its fixed part ([`DEDUPE_KEY_PREFIX_LEN`]).
    pub const fn key_len(self) -> usize {
        match self {
            Family::Due => DUE_KEY_LEN,
            Family::InFlight => IN_FLIGHT_KEY_LEN,
            Family::Active => ACTIVE_KEY_LEN,
            Family::LaneMember => LANE_MEMBER_KEY_LEN,
            Family::LaneHead => LANE_HEAD_KEY_LEN,
            Family::LaneMarker => LANE_MARKER_KEY_LEN,
            Family::DeadLetter => DEAD_LETTER_KEY_LEN,
            Family::Quarantined => QUARANTINED_KEY_LEN,
            Family::Dedupe => DEDUPE_KEY_PREFIX_LEN,
            Family::Counter => COUNTER_KEY_LEN,
            Family::LaneSeq => LANE_SEQ_KEY_LEN,
            Family::AttemptLog => ATTEMPT_LOG_KEY_LEN,
        }
    }

    /// True when the family's keys have a fixed width (all but ?K).
    pub const fn is_fixed_width(self) -> bool {
        !matches!(self, Family::Dedupe)
    }

    /// The lowest ordinal a key of this family may carry: 0 (the node
    /// aggregate) for ?C, 1 for every other family.
    pub const fn min_ord(self) -> TenantOrd {
        match self {
            Family::Counter => TenantOrd::NODE,
            _ => TenantOrd::FIRST,
        }
    }

    /// True when a key of this family may carry `tenant`.
    pub const fn holds(self, tenant: TenantOrd) -> bool {
        tenant.0 >= self.min_ord().0 && tenant.0 <= TenantOrd::LAST.0
    }

    /// The first bytes of every key of this family and tenant: `family, ord:32`.
    ///
    /// # Panics
    /// When the family cannot hold `tenant` ([`Family::holds`]).
    pub fn tenant_prefix(self, tenant: TenantOrd) -> [u8; 5] {
        assert_holds(self, tenant);
        Put::new().u8(self.as_byte()).u32(tenant.0).done()
    }
}

/// Panics when `family` cannot hold `tenant`: a key with ordinal `u32::MAX`
/// would sort at or above the sentinel, one with ordinal 0 outside ?C would be
/// counted against the node aggregate.
fn assert_holds(family: Family, tenant: TenantOrd) {
    assert!(
        family.holds(tenant),
        "{} key built with reserved tenant ordinal {} (0 is the node aggregate, u32::MAX the sentinel)",
        family.what(),
        tenant.0
    );
}

/// Checks the family byte and width of `key` and reads its ordinal; the reader
/// is left at the first field after the ordinal.
fn open(key: &[u8], family: Family) -> Result<(Take<'_>, TenantOrd), KeyError> {
    let what = family.what();
    match key.first() {
        Some(&b) if b != family.as_byte() => {
            return Err(KeyError::WrongFamily {
                expected: family,
                found: b,
            });
        }
        _ => {}
    }
    if family.is_fixed_width() {
        if key.len() != family.key_len() {
            return Err(KeyError::WrongLength {
                what,
                expected: family.key_len(),
                found: key.len(),
            });
        }
    } else if key.len() < family.key_len() {
        return Err(KeyError::Truncated { what });
    }
    let mut t = Take::new(key, what);
    t.u8()?;
    let tenant = TenantOrd(t.u32()?);
    if !family.holds(tenant) {
        return Err(KeyError::ReservedOrdinal {
            what,
            ord: tenant.0,
        });
    }
    Ok((t, tenant))
}

// ---- ?D due -------------------------------------------------------------

/// A decoded `?D` key: the row `(seq, sink)` of `tenant` is due at `due_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DueKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// When the attempt is due, unix milliseconds.
    pub due_ms: u64,
    /// The hook.
    pub seq: Seq,
    /// The sink.
    pub sink: SinkIx,
}

/// `?D, ord:32, due_ms:64, seq:64, sink:16`.
///
/// # Panics
/// On a reserved ordinal (0 or `u32::MAX`).
pub fn due_key(tenant: TenantOrd, due_ms: u64, seq: Seq, sink: SinkIx) -> [u8; DUE_KEY_LEN] {
    assert_holds(Family::Due, tenant);
    Put::new()
        .u8(Family::Due.as_byte())
        .u32(tenant.0)
        .u64(due_ms)
        .u64(seq.0)
        .u16(sink.0)
        .done()
}

impl DueKey {
    /// The key bytes ([`due_key`]).
    pub fn encode(&self) -> [u8; DUE_KEY_LEN] {
        due_key(self.tenant, self.due_ms, self.seq, self.sink)
    }

    /// Decodes a `?D` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<DueKey, KeyError> {
        let (mut t, tenant) = open(key, Family::Due)?;
        Ok(DueKey {
            tenant,
            due_ms: t.u64()?,
            seq: Seq(t.u64()?),
            sink: SinkIx(t.u16()?),
        })
    }
}

/// The `?D` keys of `tenant` due at or before `now_ms` (`due_ms <= now_ms`): the
/// dispatch scan's range.
///
/// # Panics
/// On a reserved ordinal.
pub fn due_range_until(tenant: TenantOrd, now_ms: u64) -> KeyRange {
    let start = Family::Due.tenant_prefix(tenant);
    match now_ms.checked_add(1) {
        Some(after) => {
            let end: [u8; 13] = Put::new().bytes(&start).u64(after).done();
            KeyRange::new(start, end)
        }
        None => tenant_range(Family::Due, tenant),
    }
}

// ---- ?D held band (pause) -------------------------------------------------

/// The top bit of a `?D` key's `due_ms`: set, the row is *held* because its
/// source or sink is paused (docs/design.md section 5, "Pause"). The low 63
/// bits keep the due time the row had when it was held, so a resume puts it
/// back where it was. Every real clock (unix milliseconds) is below this bit,
/// so a held row is outside [`due_range_until`] for every `now_ms` a runtime
/// passes, and the held rows of a tenant sort after all its other ?D keys
/// ([`held_due_range`]).
pub const HELD_DUE_BIT: u64 = 1 << 63;

/// `due_ms` in the held band: [`HELD_DUE_BIT`] set, the time kept.
pub const fn held_due_ms(due_ms: u64) -> u64 {
    due_ms | HELD_DUE_BIT
}

impl DueKey {
    /// Whether this ?D key is in the held band ([`HELD_DUE_BIT`]).
    pub const fn is_held(&self) -> bool {
        self.due_ms & HELD_DUE_BIT != 0
    }

    /// The due time without the held bit: the time the row is due when it is
    /// not (or no longer) held, unix milliseconds.
    pub const fn unheld_due_ms(&self) -> u64 {
        self.due_ms & !HELD_DUE_BIT
    }
}

/// The held `?D` keys of `tenant` (due_ms with [`HELD_DUE_BIT`] set), in the
/// order of their kept due time: what a resume reads.
///
/// # Panics
/// On a reserved ordinal.
pub fn held_due_range(tenant: TenantOrd) -> KeyRange {
    let start = Family::Due.tenant_prefix(tenant);
    let from: [u8; 13] = Put::new().bytes(&start).u64(HELD_DUE_BIT).done();
    KeyRange::new(from, tenant_range(Family::Due, tenant).end)
}

/// The `?D` keys of `tenant` that are not held (due_ms below
/// [`HELD_DUE_BIT`]), whenever they are due: what makes a tenant active
/// (docs/design.md section 4, invariant 4).
///
/// # Panics
/// On a reserved ordinal.
pub fn live_due_range(tenant: TenantOrd) -> KeyRange {
    let start = Family::Due.tenant_prefix(tenant);
    let end: [u8; 13] = Put::new().bytes(&start).u64(HELD_DUE_BIT).done();
    KeyRange::new(start, end)
}

// ---- ?F in flight -------------------------------------------------------

/// A decoded `?F` key: the row `(seq, sink)` of `tenant` is claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InFlightKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The hook.
    pub seq: Seq,
    /// The sink.
    pub sink: SinkIx,
}

/// `?F, ord:32, seq:64, sink:16`.
///
/// # Panics
/// On a reserved ordinal.
pub fn in_flight_key(tenant: TenantOrd, seq: Seq, sink: SinkIx) -> [u8; IN_FLIGHT_KEY_LEN] {
    row_index_key(Family::InFlight, tenant, seq, sink)
}

impl InFlightKey {
    /// The key bytes ([`in_flight_key`]).
    pub fn encode(&self) -> [u8; IN_FLIGHT_KEY_LEN] {
        in_flight_key(self.tenant, self.seq, self.sink)
    }

    /// Decodes a `?F` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<InFlightKey, KeyError> {
        let (tenant, seq, sink) = decode_row_index_key(Family::InFlight, key)?;
        Ok(InFlightKey { tenant, seq, sink })
    }
}

/// `family, ord:32, seq:64, sink:16`, the shape of ?F and ?X.
fn row_index_key(family: Family, tenant: TenantOrd, seq: Seq, sink: SinkIx) -> [u8; 15] {
    assert_holds(family, tenant);
    Put::new()
        .u8(family.as_byte())
        .u32(tenant.0)
        .u64(seq.0)
        .u16(sink.0)
        .done()
}

fn decode_row_index_key(family: Family, key: &[u8]) -> Result<(TenantOrd, Seq, SinkIx), KeyError> {
    let (mut t, tenant) = open(key, family)?;
    Ok((tenant, Seq(t.u64()?), SinkIx(t.u16()?)))
}

// ---- ?A active tenant ---------------------------------------------------

/// A decoded `?A` key: `tenant` may have due work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActiveKey {
    /// The tenant.
    pub tenant: TenantOrd,
}

/// `?A, ord:32`.
///
/// # Panics
/// On a reserved ordinal.
pub fn active_key(tenant: TenantOrd) -> [u8; ACTIVE_KEY_LEN] {
    Family::Active.tenant_prefix(tenant)
}

impl ActiveKey {
    /// The key bytes ([`active_key`]).
    pub fn encode(&self) -> [u8; ACTIVE_KEY_LEN] {
        active_key(self.tenant)
    }

    /// Decodes a `?A` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<ActiveKey, KeyError> {
        let (_, tenant) = open(key, Family::Active)?;
        Ok(ActiveKey { tenant })
    }
}

// ---- ?O lane member -----------------------------------------------------

/// A decoded `?O` key: the row `(seq, sink)` waits in `lane` of `tenant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaneMemberKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The lane.
    pub lane: LaneId,
    /// The hook.
    pub seq: Seq,
    /// The sink.
    pub sink: SinkIx,
}

/// `?O, ord:32, lane:128, seq:64, sink:16` (ADR 0004 section 3).
///
/// # Panics
/// On a reserved ordinal.
pub fn lane_member_key(
    tenant: TenantOrd,
    lane: LaneId,
    seq: Seq,
    sink: SinkIx,
) -> [u8; LANE_MEMBER_KEY_LEN] {
    assert_holds(Family::LaneMember, tenant);
    Put::new()
        .u8(Family::LaneMember.as_byte())
        .u32(tenant.0)
        .bytes(&lane.0)
        .u64(seq.0)
        .u16(sink.0)
        .done()
}

impl LaneMemberKey {
    /// The key bytes ([`lane_member_key`]).
    pub fn encode(&self) -> [u8; LANE_MEMBER_KEY_LEN] {
        lane_member_key(self.tenant, self.lane, self.seq, self.sink)
    }

    /// Decodes a `?O` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<LaneMemberKey, KeyError> {
        let (mut t, tenant) = open(key, Family::LaneMember)?;
        Ok(LaneMemberKey {
            tenant,
            lane: LaneId(t.array()?),
            seq: Seq(t.u64()?),
            sink: SinkIx(t.u16()?),
        })
    }
}

/// The `?O` members of one lane, lowest seq first: the first entry of a forward
/// scan is the member a promote takes (ADR 0004 section 4.2).
///
/// # Panics
/// On a reserved ordinal.
pub fn lane_members_range(tenant: TenantOrd, lane: LaneId) -> KeyRange {
    KeyRange::prefix(&lane_key(Family::LaneMember, tenant, lane))
}

/// `family, ord:32, lane:128`: a ?H or ?P key, or the prefix of a lane's ?O keys.
fn lane_key(family: Family, tenant: TenantOrd, lane: LaneId) -> [u8; 21] {
    assert_holds(family, tenant);
    Put::new()
        .u8(family.as_byte())
        .u32(tenant.0)
        .bytes(&lane.0)
        .done()
}

fn decode_lane_key(family: Family, key: &[u8]) -> Result<(TenantOrd, LaneId), KeyError> {
    let (mut t, tenant) = open(key, family)?;
    Ok((tenant, LaneId(t.array()?)))
}

// ---- ?H lane head -------------------------------------------------------

/// A decoded `?H` key: `lane` of `tenant` is busy (its head is in ?D or ?F).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaneHeadKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The lane.
    pub lane: LaneId,
}

/// `?H, ord:32, lane:128` (ADR 0004 section 3).
///
/// # Panics
/// On a reserved ordinal.
pub fn lane_head_key(tenant: TenantOrd, lane: LaneId) -> [u8; LANE_HEAD_KEY_LEN] {
    lane_key(Family::LaneHead, tenant, lane)
}

impl LaneHeadKey {
    /// The key bytes ([`lane_head_key`]).
    pub fn encode(&self) -> [u8; LANE_HEAD_KEY_LEN] {
        lane_head_key(self.tenant, self.lane)
    }

    /// Decodes a `?H` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<LaneHeadKey, KeyError> {
        let (tenant, lane) = decode_lane_key(Family::LaneHead, key)?;
        Ok(LaneHeadKey { tenant, lane })
    }
}

// ---- ?P lane marker -----------------------------------------------------

/// A decoded `?P` key: `lane` of `tenant` may have a member and no head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaneMarkerKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The lane.
    pub lane: LaneId,
}

/// `?P, ord:32, lane:128` (ADR 0004 section 3).
///
/// # Panics
/// On a reserved ordinal.
pub fn lane_marker_key(tenant: TenantOrd, lane: LaneId) -> [u8; LANE_MARKER_KEY_LEN] {
    lane_key(Family::LaneMarker, tenant, lane)
}

impl LaneMarkerKey {
    /// The key bytes ([`lane_marker_key`]).
    pub fn encode(&self) -> [u8; LANE_MARKER_KEY_LEN] {
        lane_marker_key(self.tenant, self.lane)
    }

    /// Decodes a `?P` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<LaneMarkerKey, KeyError> {
        let (tenant, lane) = decode_lane_key(Family::LaneMarker, key)?;
        Ok(LaneMarkerKey { tenant, lane })
    }
}

// ---- ?S lane sequence ---------------------------------------------------

/// A decoded `?S` key: the lane sequence of `lane` of `tenant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaneSeqKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The lane.
    pub lane: LaneId,
}

/// `?S, ord:32, lane:128` (ADR 0004 section 6, "The lane sequence"): outlives
/// the lane's ?H and ?P, so a key that goes quiet and comes back continues
/// its numbers. Read by point gets only (no sentinel, like ?C).
///
/// # Panics
/// On a reserved ordinal.
pub fn lane_seq_key(tenant: TenantOrd, lane: LaneId) -> [u8; LANE_SEQ_KEY_LEN] {
    lane_key(Family::LaneSeq, tenant, lane)
}

impl LaneSeqKey {
    /// The key bytes ([`lane_seq_key`]).
    pub fn encode(&self) -> [u8; LANE_SEQ_KEY_LEN] {
        lane_seq_key(self.tenant, self.lane)
    }

    /// Decodes a `?S` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<LaneSeqKey, KeyError> {
        let (tenant, lane) = decode_lane_key(Family::LaneSeq, key)?;
        Ok(LaneSeqKey { tenant, lane })
    }
}

// ---- ?X dead letter -----------------------------------------------------

/// A decoded `?X` key: the row `(seq, sink)` of `tenant` is in the DLQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeadLetterKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The hook.
    pub seq: Seq,
    /// The sink.
    pub sink: SinkIx,
}

/// `?X, ord:32, seq:64, sink:16`.
///
/// # Panics
/// On a reserved ordinal.
pub fn dead_letter_key(tenant: TenantOrd, seq: Seq, sink: SinkIx) -> [u8; DEAD_LETTER_KEY_LEN] {
    row_index_key(Family::DeadLetter, tenant, seq, sink)
}

impl DeadLetterKey {
    /// The key bytes ([`dead_letter_key`]).
    pub fn encode(&self) -> [u8; DEAD_LETTER_KEY_LEN] {
        dead_letter_key(self.tenant, self.seq, self.sink)
    }

    /// Decodes a `?X` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<DeadLetterKey, KeyError> {
        let (tenant, seq, sink) = decode_row_index_key(Family::DeadLetter, key)?;
        Ok(DeadLetterKey { tenant, seq, sink })
    }
}

// ---- ?Q quarantined -----------------------------------------------------

/// A decoded `?Q` key: the hook `seq` of `tenant` is quarantined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuarantinedKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The hook.
    pub seq: Seq,
}

/// `?Q, ord:32, seq:64`.
///
/// # Panics
/// On a reserved ordinal.
pub fn quarantined_key(tenant: TenantOrd, seq: Seq) -> [u8; QUARANTINED_KEY_LEN] {
    assert_holds(Family::Quarantined, tenant);
    Put::new()
        .u8(Family::Quarantined.as_byte())
        .u32(tenant.0)
        .u64(seq.0)
        .done()
}

impl QuarantinedKey {
    /// The key bytes ([`quarantined_key`]).
    pub fn encode(&self) -> [u8; QUARANTINED_KEY_LEN] {
        quarantined_key(self.tenant, self.seq)
    }

    /// Decodes a `?Q` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<QuarantinedKey, KeyError> {
        let (mut t, tenant) = open(key, Family::Quarantined)?;
        Ok(QuarantinedKey {
            tenant,
            seq: Seq(t.u64()?),
        })
    }
}

// ---- ?K dedupe ----------------------------------------------------------

/// A decoded `?K` key: `source` of `tenant` has accepted a hook with
/// `dedupe_key` (docs/design.md section 10: dedupe is scoped per source).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DedupeKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The source.
    pub source: SourceId,
    /// The dedupe key's bytes, as resolved at ingest (any length, may be empty).
    pub dedupe_key: Vec<u8>,
}

/// `?K, ord:32, source:32, dedupe_key` (the key's bytes run to the end).
///
/// Keys of one `(tenant, source)` sort by their dedupe key's bytes; with
/// a variable-width tail, byte order is the tuple order with the dedupe key
/// compared as a byte string.
///
/// # Panics
/// On a reserved ordinal.
pub fn dedupe_key(tenant: TenantOrd, source: SourceId, dedupe_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(DEDUPE_KEY_PREFIX_LEN + dedupe_key.len());
    key.extend_from_slice(&dedupe_prefix(tenant, source));
    key.extend_from_slice(dedupe_key);
    key
}

fn dedupe_prefix(tenant: TenantOrd, source: SourceId) -> [u8; DEDUPE_KEY_PREFIX_LEN] {
    assert_holds(Family::Dedupe, tenant);
    Put::new()
        .u8(Family::Dedupe.as_byte())
        .u32(tenant.0)
        .u32(source.0)
        .done()
}

impl DedupeKey {
    /// The key bytes ([`dedupe_key`]).
    pub fn encode(&self) -> Vec<u8> {
        dedupe_key(self.tenant, self.source, &self.dedupe_key)
    }

    /// Decodes a `?K` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::Truncated`] (shorter than
    /// [`DEDUPE_KEY_PREFIX_LEN`]), [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<DedupeKey, KeyError> {
        let (mut t, tenant) = open(key, Family::Dedupe)?;
        let source = SourceId(t.u32()?);
        Ok(DedupeKey {
            tenant,
            source,
            dedupe_key: t.rest().to_vec(),
        })
    }
}

/// The `?K` keys of one source of `tenant` (for dropping a deleted source's
/// dedupe records).
///
/// # Panics
/// On a reserved ordinal.
pub fn dedupe_source_range(tenant: TenantOrd, source: SourceId) -> KeyRange {
    KeyRange::prefix(&dedupe_prefix(tenant, source))
}

// ---- ?C counter ---------------------------------------------------------

/// A counter field (docs/design.md section 3; fields 10-12 are ADR 0004 section 3's).
/// Each is kept per tenant and, moved in the same batch, in the node aggregate
/// under [`TenantOrd::NODE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum CounterField {
    /// Rows in ?D, ?F or ?O.
    Pending = 1,
    /// Sum of the sizes (bytes) of the pending rows.
    Bytes = 2,
    /// Rows in ?F.
    InFlight = 3,
    /// Rows in ?X.
    Dead = 4,
    /// Sum of the sizes (bytes) of the rows in ?X.
    DeadBytes = 5,
    /// Hooks in ?Q.
    Quarantined = 6,
    /// Rows delivered, ever (monotonic).
    DeliveredTotal = 7,
    /// Rows dead-lettered, ever (monotonic).
    DeadLetteredTotal = 8,
    /// Retries scheduled, ever (monotonic).
    RetriesTotal = 9,
    /// Busy lanes: lane heads (?H).
    Lanes = 10,
    /// Lane heads waiting out a retry or a breaker park (kind 3 ?D rows).
    LanesBlocked = 11,
    /// Lane members (?O).
    LaneMembers = 12,
    /// Held lanes: lane heads in ?X that their ?H still names, holding their
    /// key's later hooks until revived or dropped (ADR 0004 section 8,
    /// `dead_letter: hold`).
    LanesHeld = 13,
}

impl CounterField {
    /// Every field, in field order (1..=13).
    pub const ALL: [CounterField; 13] = [
        CounterField::Pending,
        CounterField::Bytes,
        CounterField::InFlight,
        CounterField::Dead,
        CounterField::DeadBytes,
        CounterField::Quarantined,
        CounterField::DeliveredTotal,
        CounterField::DeadLetteredTotal,
        CounterField::RetriesTotal,
        CounterField::Lanes,
        CounterField::LanesBlocked,
        CounterField::LaneMembers,
        CounterField::LanesHeld,
    ];

    /// The field byte (1..=13).
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The field whose byte is `byte`.
    ///
    /// # Errors
    /// [`KeyError::UnknownCounterField`] outside 1..=13.
    pub fn from_u8(byte: u8) -> Result<CounterField, KeyError> {
        CounterField::ALL
            .into_iter()
            .find(|f| f.as_u8() == byte)
            .ok_or(KeyError::UnknownCounterField(byte))
    }

    /// The field's name as docs/design.md section 3 spells it, e.g. `in_flight`.
    pub const fn name(self) -> &'static str {
        match self {
            CounterField::Pending => "pending",
            CounterField::Bytes => "bytes",
            CounterField::InFlight => "in_flight",
            CounterField::Dead => "dead",
            CounterField::DeadBytes => "dead_bytes",
            CounterField::Quarantined => "quarantined",
            CounterField::DeliveredTotal => "delivered_total",
            CounterField::DeadLetteredTotal => "dead_lettered_total",
            CounterField::RetriesTotal => "retries_total",
            CounterField::Lanes => "lanes",
            CounterField::LanesBlocked => "lanes_blocked",
            CounterField::LaneMembers => "lane_members",
            CounterField::LanesHeld => "lanes_held",
        }
    }
}

/// A decoded `?C` key: counter `field` of `tenant` (or of the node aggregate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CounterKey {
    /// The tenant, or [`TenantOrd::NODE`] for the node aggregate.
    pub tenant: TenantOrd,
    /// The field.
    pub field: CounterField,
}

/// `?C, ord:32, field:8`; the value is an `i64` moved by counter adds
/// (`ankusa_engine::encode_counter`). Ordinal 0 is the node aggregate.
///
/// # Panics
/// On ordinal `u32::MAX`.
pub fn counter_key(tenant: TenantOrd, field: CounterField) -> [u8; COUNTER_KEY_LEN] {
    assert_holds(Family::Counter, tenant);
    Put::new()
        .u8(Family::Counter.as_byte())
        .u32(tenant.0)
        .u8(field.as_u8())
        .done()
}

impl CounterKey {
    /// The key bytes ([`counter_key`]).
    pub fn encode(&self) -> [u8; COUNTER_KEY_LEN] {
        counter_key(self.tenant, self.field)
    }

    /// Decodes a `?C` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`] (`u32::MAX`),
    /// [`KeyError::UnknownCounterField`].
    pub fn decode(key: &[u8]) -> Result<CounterKey, KeyError> {
        let (mut t, tenant) = open(key, Family::Counter)?;
        Ok(CounterKey {
            tenant,
            field: CounterField::from_u8(t.u8()?)?,
        })
    }
}

// ---- ?L attempt log ------------------------------------------------------

/// A decoded `?L` key: attempt `attempt` of the row `(seq, sink)` of `tenant`
/// (docs/design.md section 3, "The attempt log").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptLogKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The hook.
    pub seq: Seq,
    /// The sink.
    pub sink: SinkIx,
    /// The attempt's number in the row's log, 1 for the first attempt the
    /// log holds (the row's `logged_attempts` after it: a revive does not
    /// start it again, so a revived row's attempts follow its earlier ones).
    pub attempt: u32,
}

/// `?L, ord:32, seq:64, sink:16, attempt:32`. A row's entries are adjacent
/// and in attempt order, and a hook's rows' entries are adjacent: one
/// prefix deletes a hook's log ([`attempt_log_hook_range`]).
///
/// # Panics
/// On a reserved ordinal.
pub fn attempt_log_key(
    tenant: TenantOrd,
    seq: Seq,
    sink: SinkIx,
    attempt: u32,
) -> [u8; ATTEMPT_LOG_KEY_LEN] {
    assert_holds(Family::AttemptLog, tenant);
    Put::new()
        .u8(Family::AttemptLog.as_byte())
        .u32(tenant.0)
        .u64(seq.0)
        .u16(sink.0)
        .u32(attempt)
        .done()
}

impl AttemptLogKey {
    /// The key bytes ([`attempt_log_key`]).
    pub fn encode(&self) -> [u8; ATTEMPT_LOG_KEY_LEN] {
        attempt_log_key(self.tenant, self.seq, self.sink, self.attempt)
    }

    /// Decodes a `?L` key.
    ///
    /// # Errors
    /// [`KeyError::WrongFamily`], [`KeyError::WrongLength`],
    /// [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<AttemptLogKey, KeyError> {
        let (mut t, tenant) = open(key, Family::AttemptLog)?;
        Ok(AttemptLogKey {
            tenant,
            seq: Seq(t.u64()?),
            sink: SinkIx(t.u16()?),
            attempt: t.u32()?,
        })
    }
}

/// The `?L` entries of one row, oldest attempt first: a reverse scan with a
/// limit reads the newest ones and stops before the deleted older ones.
///
/// # Panics
/// On a reserved ordinal.
pub fn attempt_log_row_range(tenant: TenantOrd, seq: Seq, sink: SinkIx) -> KeyRange {
    KeyRange::prefix(&row_index_key(Family::AttemptLog, tenant, seq, sink))
}

/// The `?L` entries of every row of one hook (what goes with its envelope:
/// retention, a drop, a hand-over).
///
/// # Panics
/// On a reserved ordinal.
pub fn attempt_log_hook_range(tenant: TenantOrd, seq: Seq) -> KeyRange {
    attempt_log_hooks_range(tenant, seq, seq)
}

/// The `?L` entries of the hooks `first..=last` of `tenant` (a purge page's
/// envelopes). Empty when `first > last`.
///
/// # Panics
/// On a reserved ordinal.
pub fn attempt_log_hooks_range(tenant: TenantOrd, first: Seq, last: Seq) -> KeyRange {
    assert_holds(Family::AttemptLog, tenant);
    let hook = |seq: u64| -> [u8; 13] {
        Put::new()
            .u8(Family::AttemptLog.as_byte())
            .u32(tenant.0)
            .u64(seq)
            .done()
    };
    let start = hook(first.0);
    if first > last {
        return KeyRange::new(start, start);
    }
    match last.0.checked_add(1) {
        Some(next) => KeyRange::new(start, hook(next)),
        // The tenant's last possible seq: the range ends where the tenant's does.
        None => KeyRange::new(start, tenant_range(Family::AttemptLog, tenant).end),
    }
}

// ---- ranges -------------------------------------------------------------

/// Every real key of `family`: from the family's lowest ordinal
/// ([`Family::min_ord`]) up to, not including, the sentinel's ordinal.
pub fn family_range(family: Family) -> KeyRange {
    let start: [u8; 5] = Put::new()
        .u8(family.as_byte())
        .u32(family.min_ord().0)
        .done();
    let end: [u8; 5] = Put::new()
        .u8(family.as_byte())
        .u32(TenantOrd::RESERVED)
        .done();
    KeyRange::new(start, end)
}

/// Every key of `family` for `tenant` (for ?C, `tenant` may be the node
/// aggregate): one contiguous range per family (docs/design.md section 3).
///
/// # Panics
/// When the family cannot hold `tenant`.
pub fn tenant_range(family: Family, tenant: TenantOrd) -> KeyRange {
    let start = family.tenant_prefix(tenant);
    // tenant.0 <= u32::MAX - 1, so the next ordinal exists; for the last tenant
    // it is the sentinel's ordinal, which the exclusive end leaves out.
    let end: [u8; 5] = Put::new().u8(family.as_byte()).u32(tenant.0 + 1).done();
    KeyRange::new(start, end)
}
