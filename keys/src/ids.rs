//! Newtypes for the fields of keys, so a key of four integers cannot be built
//! with two of them swapped (docs/contributing.md, "Keys module like TiKV").

use std::fmt;

use crate::error::KeyError;

/// A tenant's ordinal (`u32`, docs/design.md section 3): the first field of every key
/// after the family byte.
///
/// - `0` ([`TenantOrd::NODE`]) is the node aggregate, used only by counter keys.
/// - Tenants are `1..=u32::MAX - 1` ([`TenantOrd::FIRST`]..=[`TenantOrd::LAST`]).
/// - `u32::MAX` ([`TenantOrd::RESERVED`]) belongs to the sentinels: no real key
///   carries it, so a sentinel sits above every real key of its family.
///
/// Key builders panic on an ordinal their family cannot hold (a broken invariant
/// of the caller, never an operating error); decoders return
/// [`KeyError::ReservedOrdinal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantOrd(pub u32);

impl TenantOrd {
    /// The node aggregate of the counters (ordinal 0).
    pub const NODE: TenantOrd = TenantOrd(0);
    /// The first tenant ordinal.
    pub const FIRST: TenantOrd = TenantOrd(1);
    /// The highest tenant ordinal (`u32::MAX - 1`).
    pub const LAST: TenantOrd = TenantOrd(u32::MAX - 1);
    /// The ordinal of the sentinels, never a tenant's.
    pub const RESERVED: u32 = u32::MAX;

    /// True for a real tenant (`1..=u32::MAX - 1`).
    pub const fn is_tenant(self) -> bool {
        self.0 >= TenantOrd::FIRST.0 && self.0 <= TenantOrd::LAST.0
    }

    /// True for the node aggregate (0).
    pub const fn is_node(self) -> bool {
        self.0 == TenantOrd::NODE.0
    }

    /// `ord` as a tenant ordinal, checked to be a real tenant's.
    ///
    /// # Errors
    /// [`KeyError::ReservedOrdinal`] for 0 and `u32::MAX`.
    pub fn checked(ord: u32) -> Result<TenantOrd, KeyError> {
        let t = TenantOrd(ord);
        if t.is_tenant() {
            Ok(t)
        } else {
            Err(KeyError::ReservedOrdinal {
                what: "tenant",
                ord,
            })
        }
    }

    /// The next tenant ordinal, or `None` after [`TenantOrd::LAST`] (for the
    /// tenant registry's allocator).
    pub fn next(self) -> Option<TenantOrd> {
        let next = TenantOrd(self.0.checked_add(1)?);
        next.is_tenant().then_some(next)
    }
}

impl fmt::Display for TenantOrd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A hook's sequence number (`u64`): assigned by the Writer in commit order
/// (docs/design.md section 5), the same for every delivery row of the hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(pub u64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A sink's index (`u16`) in its source's list of sinks: with the seq it names a
/// delivery row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SinkIx(pub u16);

impl fmt::Display for SinkIx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A source's number (`u32`) in the source registry (cf meta): the form in which
/// the source is stored in envelopes and dedupe keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceId(pub u32);

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An ordering lane's id (ADR 0004 section 2): the first 16 bytes of
/// `sha256(sink:16, source id, 0, flag:8, key)`, computed by whoever resolves
/// the key. Fixed width, so lane keys have no delimiter to forge.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaneId(pub [u8; 16]);

impl LaneId {
    /// Lower-case hex of the 16 bytes (32 characters): the form in logs and in a
    /// sink's `ctx.lane_hex` (ADR 0004 section 6).
    pub fn to_hex(&self) -> String {
        ankusa_engine::hex(&self.0)
    }

    /// The lane id whose [`LaneId::to_hex`] is `hex` (either case); `None`
    /// for anything else.
    pub fn from_hex(hex: &str) -> Option<LaneId> {
        let b = hex.as_bytes();
        if b.len() != 32 {
            return None;
        }
        let nibble = |c: u8| {
            char::from(c)
                .to_digit(16)
                .and_then(|d| u8::try_from(d).ok())
        };
        let mut out = [0u8; 16];
        for (i, o) in out.iter_mut().enumerate() {
            *o = nibble(b[2 * i])? << 4 | nibble(b[2 * i + 1])?;
        }
        Some(LaneId(out))
    }
}

impl fmt::Debug for LaneId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LaneId({})", self.to_hex())
    }
}

impl fmt::Display for LaneId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}
