//! Values of the index families (docs/design.md section 3; ADR 0004 section 3).
//!
//! | family | value |
//! | --- | --- |
//! | `?D` | `size:32, kind:8` ([`DueValue`]) |
//! | `?F` | `size:32, kind:8, claimed_at_ms:64` ([`InFlightValue`]) |
//! | `?O` | `size:32` ([`LaneMemberValue`]) |
//! | `?H` | `seq:64, sink:16` ([`LaneHeadValue`]) |
//! | `?A`, `?P` | empty ([`EMPTY_VALUE`]) |
//! | `?X` | `dead_at_ms:64, reason` (UTF-8 to the end, [`DeadLetterValue`]) |
//! | `?Q` | `reason` (UTF-8, [`QuarantinedValue`]) |
//! | `?K` | `seq:64, expires_at_ms:64` ([`DedupeValue`]) |
//! | `?C` | `i64` big endian ([`ankusa_engine::encode_counter`], [`decode_counter_value`]) |
//! | `?S` | `last:64`, the last lane position given out ([`LaneSeqValue`]) |
//!
//! Sizes are the byte size of the delivery row's hook as counted against the
//! tenant's queue bounds (counter fields `bytes` and `dead_bytes`).

use crate::codec::{Put, Take, value_len};
use crate::error::ValueError;
use crate::ids::{Seq, SinkIx};

/// What an attempt of a `?D` (or `?F`) row is (docs/design.md section 3; kinds 2 and 3
/// are ADR 0004 section 3's and exist from store format 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum DueKind {
    /// A first attempt of an unlaned row.
    First = 0,
    /// A retry (or breaker park) of an unlaned row.
    Retry = 1,
    /// A first attempt of a lane head.
    HeadFirst = 2,
    /// A retry (or breaker park) of a lane head: the lane is blocked.
    HeadRetry = 3,
}

impl DueKind {
    /// Every kind, by byte.
    pub const ALL: [DueKind; 4] = [
        DueKind::First,
        DueKind::Retry,
        DueKind::HeadFirst,
        DueKind::HeadRetry,
    ];

    /// The kind byte (0..=3).
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The kind whose byte is `byte`, or `None` outside 0..=3.
    pub fn from_u8(byte: u8) -> Option<DueKind> {
        DueKind::ALL.into_iter().find(|k| k.as_u8() == byte)
    }

    /// True for a lane head's kinds (2 and 3).
    pub const fn is_head(self) -> bool {
        matches!(self, DueKind::HeadFirst | DueKind::HeadRetry)
    }

    /// True for the retry kinds (1 and 3).
    pub const fn is_retry(self) -> bool {
        matches!(self, DueKind::Retry | DueKind::HeadRetry)
    }

    /// The first-attempt kind of the same laned-ness (0 or 2): what
    /// `recover_inflight` gives a claimed row back.
    pub const fn as_first(self) -> DueKind {
        if self.is_head() {
            DueKind::HeadFirst
        } else {
            DueKind::First
        }
    }

    /// The retry kind of the same laned-ness (1 or 3).
    pub const fn as_retry(self) -> DueKind {
        if self.is_head() {
            DueKind::HeadRetry
        } else {
            DueKind::Retry
        }
    }
}

fn decode_kind(what: &'static str, byte: u8) -> Result<DueKind, ValueError> {
    DueKind::from_u8(byte).ok_or_else(|| ValueError::InvalidField {
        what,
        field: "kind",
        reason: format!("{byte} is not a due kind (0..=3)"),
    })
}

/// The value of `?A` and `?P` keys: nothing.
pub const EMPTY_VALUE: [u8; 0] = [];

/// Checks that a `?A` or `?P` value is empty.
///
/// # Errors
/// [`ValueError::WrongLength`] for any other value.
pub fn decode_empty_value(value: &[u8]) -> Result<(), ValueError> {
    value_len::<0>(value, "?A/?P marker").map(|_| ())
}

/// The value of a `?D` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DueValue {
    /// The row's size in bytes.
    pub size: u32,
    /// What the attempt is.
    pub kind: DueKind,
}

/// Width of a `?D` value.
pub const DUE_VALUE_LEN: usize = 4 + 1;

impl DueValue {
    /// `size:32, kind:8`.
    pub fn encode(&self) -> [u8; DUE_VALUE_LEN] {
        Put::new().u32(self.size).u8(self.kind.as_u8()).done()
    }

    /// Decodes a `?D` value.
    ///
    /// # Errors
    /// [`ValueError::WrongLength`], [`ValueError::InvalidField`] (an unknown kind).
    pub fn decode(value: &[u8]) -> Result<DueValue, ValueError> {
        const WHAT: &str = "?D due";
        value_len::<DUE_VALUE_LEN>(value, WHAT)?;
        let mut t = Take::new(value, WHAT);
        Ok(DueValue {
            size: t.u32()?,
            kind: decode_kind(WHAT, t.u8()?)?,
        })
    }
}

/// The value of a `?F` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InFlightValue {
    /// The row's size in bytes.
    pub size: u32,
    /// What the running attempt is (the kind of the ?D it was claimed from).
    pub kind: DueKind,
    /// When it was claimed, unix milliseconds.
    pub claimed_at_ms: u64,
}

/// Width of a `?F` value.
pub const IN_FLIGHT_VALUE_LEN: usize = 4 + 1 + 8;

impl InFlightValue {
    /// `size:32, kind:8, claimed_at_ms:64`.
    pub fn encode(&self) -> [u8; IN_FLIGHT_VALUE_LEN] {
        Put::new()
            .u32(self.size)
            .u8(self.kind.as_u8())
            .u64(self.claimed_at_ms)
            .done()
    }

    /// Decodes a `?F` value.
    ///
    /// # Errors
    /// [`ValueError::WrongLength`], [`ValueError::InvalidField`] (an unknown kind).
    pub fn decode(value: &[u8]) -> Result<InFlightValue, ValueError> {
        const WHAT: &str = "?F in flight";
        value_len::<IN_FLIGHT_VALUE_LEN>(value, WHAT)?;
        let mut t = Take::new(value, WHAT);
        Ok(InFlightValue {
            size: t.u32()?,
            kind: decode_kind(WHAT, t.u8()?)?,
            claimed_at_ms: t.u64()?,
        })
    }
}

/// The value of a `?O` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaneMemberValue {
    /// The row's size in bytes.
    pub size: u32,
}

/// Width of a `?O` value.
pub const LANE_MEMBER_VALUE_LEN: usize = 4;

impl LaneMemberValue {
    /// `size:32`.
    pub fn encode(&self) -> [u8; LANE_MEMBER_VALUE_LEN] {
        self.size.to_be_bytes()
    }

    /// Decodes a `?O` value.
    ///
    /// # Errors
    /// [`ValueError::WrongLength`].
    pub fn decode(value: &[u8]) -> Result<LaneMemberValue, ValueError> {
        let raw = value_len::<LANE_MEMBER_VALUE_LEN>(value, "?O lane member")?;
        Ok(LaneMemberValue {
            size: u32::from_be_bytes(raw),
        })
    }
}

/// The value of a `?H` key: the lane's head row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaneHeadValue {
    /// The head's hook.
    pub seq: Seq,
    /// The head's sink.
    pub sink: SinkIx,
}

/// Width of a `?H` value.
pub const LANE_HEAD_VALUE_LEN: usize = 8 + 2;

impl LaneHeadValue {
    /// `seq:64, sink:16`.
    pub fn encode(&self) -> [u8; LANE_HEAD_VALUE_LEN] {
        Put::new().u64(self.seq.0).u16(self.sink.0).done()
    }

    /// Decodes a `?H` value.
    ///
    /// # Errors
    /// [`ValueError::WrongLength`].
    pub fn decode(value: &[u8]) -> Result<LaneHeadValue, ValueError> {
        const WHAT: &str = "?H lane head";
        value_len::<LANE_HEAD_VALUE_LEN>(value, WHAT)?;
        let mut t = Take::new(value, WHAT);
        Ok(LaneHeadValue {
            seq: Seq(t.u64()?),
            sink: SinkIx(t.u16()?),
        })
    }
}

/// The value of a `?S` lane sequence key: the last position given out in the
/// lane (ADR 0004 section 6, "The lane sequence"); the next promoted row that
/// has none gets `last + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaneSeqValue {
    /// The last position given out, from 1.
    pub last: u64,
}

/// Width of a `?S` value.
pub const LANE_SEQ_VALUE_LEN: usize = 8;

impl LaneSeqValue {
    /// `last:64`.
    pub fn encode(&self) -> [u8; LANE_SEQ_VALUE_LEN] {
        self.last.to_be_bytes()
    }

    /// Decodes a `?S` value.
    ///
    /// # Errors
    /// [`ValueError::WrongLength`].
    pub fn decode(value: &[u8]) -> Result<LaneSeqValue, ValueError> {
        Ok(LaneSeqValue {
            last: u64::from_be_bytes(value_len::<LANE_SEQ_VALUE_LEN>(value, "?S lane sequence")?),
        })
    }
}

fn utf8(what: &'static str, field: &'static str, bytes: &[u8]) -> Result<String, ValueError> {
    String::from_utf8(bytes.to_vec()).map_err(|e| ValueError::InvalidField {
        what,
        field,
        reason: e.to_string(),
    })
}

/// The value of a `?X` key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeadLetterValue {
    /// When the row was dead-lettered, unix milliseconds.
    pub dead_at_ms: u64,
    /// Why, for operators (UTF-8, may be empty).
    pub reason: String,
}

impl DeadLetterValue {
    /// `dead_at_ms:64, reason` (the reason's UTF-8 bytes run to the end).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + self.reason.len());
        v.extend_from_slice(&self.dead_at_ms.to_be_bytes());
        v.extend_from_slice(self.reason.as_bytes());
        v
    }

    /// Decodes a `?X` value.
    ///
    /// # Errors
    /// [`ValueError::Truncated`] (shorter than 8 bytes),
    /// [`ValueError::InvalidField`] (a reason that is not UTF-8).
    pub fn decode(value: &[u8]) -> Result<DeadLetterValue, ValueError> {
        const WHAT: &str = "?X dead letter";
        let mut t = Take::new(value, WHAT);
        let dead_at_ms = t.u64()?;
        Ok(DeadLetterValue {
            dead_at_ms,
            reason: utf8(WHAT, "reason", t.rest())?,
        })
    }
}

/// The value of a `?Q` key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QuarantinedValue {
    /// Why the hook is held back (UTF-8, may be empty).
    pub reason: String,
}

impl QuarantinedValue {
    /// `reason` (its UTF-8 bytes).
    pub fn encode(&self) -> Vec<u8> {
        self.reason.as_bytes().to_vec()
    }

    /// Decodes a `?Q` value.
    ///
    /// # Errors
    /// [`ValueError::InvalidField`] (not UTF-8).
    pub fn decode(value: &[u8]) -> Result<QuarantinedValue, ValueError> {
        Ok(QuarantinedValue {
            reason: utf8("?Q quarantined", "reason", value)?,
        })
    }
}

/// The value of a `?K` key: the hook that was accepted, and until when a
/// provider retry of it is still dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DedupeValue {
    /// The accepted hook.
    pub seq: Seq,
    /// When the record expires, unix milliseconds.
    pub expires_at_ms: u64,
}

/// Width of a `?K` value.
pub const DEDUPE_VALUE_LEN: usize = 8 + 8;

impl DedupeValue {
    /// `seq:64, expires_at_ms:64`.
    pub fn encode(&self) -> [u8; DEDUPE_VALUE_LEN] {
        Put::new().u64(self.seq.0).u64(self.expires_at_ms).done()
    }

    /// Decodes a `?K` value.
    ///
    /// # Errors
    /// [`ValueError::WrongLength`].
    pub fn decode(value: &[u8]) -> Result<DedupeValue, ValueError> {
        const WHAT: &str = "?K dedupe";
        value_len::<DEDUPE_VALUE_LEN>(value, WHAT)?;
        let mut t = Take::new(value, WHAT);
        Ok(DedupeValue {
            seq: Seq(t.u64()?),
            expires_at_ms: t.u64()?,
        })
    }
}

/// Decodes a `?C` value (an `i64`, big endian, as
/// [`ankusa_engine::encode_counter`] writes it).
///
/// # Errors
/// [`ValueError::WrongLength`] when it is not 8 bytes.
pub fn decode_counter_value(value: &[u8]) -> Result<i64, ValueError> {
    Ok(i64::from_be_bytes(value_len::<8>(value, "?C counter")?))
}
