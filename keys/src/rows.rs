//! Keys of the `hooks`, `deliveries` and `archive` column families
//! (docs/design.md section 3).
//!
//! | cf | key | value |
//! | --- | --- | --- |
//! | `hooks` | `ord:32, seq:64` | the envelope ([`crate::Envelope`]) |
//! | `deliveries` | `ord:32, seq:64, sink:16` | the delivery row ([`crate::DeliveryRow`]) |
//! | `archive` | `ord:32, received_at_ms:64, seq:64` | empty: the envelope stays in `hooks` until retention ends |
//!
//! Each begins with the tenant ordinal, so one tenant's hooks, rows and archive
//! are one range each, and a hook's rows (one per sink) are adjacent. No real
//! key carries ordinal 0 or `u32::MAX` (the sentinels' ordinal).

use ankusa_engine::KeyRange;

use crate::codec::{Put, Take, key_len};
use crate::error::KeyError;
use crate::ids::{Seq, SinkIx, TenantOrd};

/// Width of a `hooks` key: `ord:32, seq:64`.
pub const HOOK_KEY_LEN: usize = 4 + 8;
/// Width of a `deliveries` key: `ord:32, seq:64, sink:16`.
pub const DELIVERY_KEY_LEN: usize = 4 + 8 + 2;
/// Width of an `archive` key: `ord:32, received_at_ms:64, seq:64`.
pub const ARCHIVE_KEY_LEN: usize = 4 + 8 + 8;

fn assert_tenant(what: &str, tenant: TenantOrd) {
    assert!(
        tenant.is_tenant(),
        "{what} key built with reserved tenant ordinal {} (0 is the node aggregate, u32::MAX the sentinel)",
        tenant.0
    );
}

/// Checks the width of `key` and reads its (real) tenant ordinal.
fn open<'a, const N: usize>(
    key: &'a [u8],
    what: &'static str,
) -> Result<(Take<'a>, TenantOrd), KeyError> {
    key_len::<N>(key, what)?;
    let mut t = Take::new(key, what);
    let ord = t.u32()?;
    if !TenantOrd(ord).is_tenant() {
        return Err(KeyError::ReservedOrdinal { what, ord });
    }
    Ok((t, TenantOrd(ord)))
}

/// `[ord:32]` .. `[ord+1:32]`: every key of one tenant in a cf keyed by ordinal.
fn tenant_span(what: &str, tenant: TenantOrd) -> KeyRange {
    assert_tenant(what, tenant);
    KeyRange::new(tenant.0.to_be_bytes(), (tenant.0 + 1).to_be_bytes())
}

/// `[1:32]` .. `[u32::MAX:32]`: every real key of a cf keyed by ordinal.
fn cf_span() -> KeyRange {
    KeyRange::new(
        TenantOrd::FIRST.0.to_be_bytes(),
        TenantOrd::RESERVED.to_be_bytes(),
    )
}

// ---- hooks --------------------------------------------------------------

/// A decoded `hooks` key: the envelope of hook `seq` of `tenant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HookKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The hook.
    pub seq: Seq,
}

/// `ord:32, seq:64` in cf `hooks`.
///
/// # Panics
/// On a reserved ordinal (0 or `u32::MAX`).
pub fn hook_key(tenant: TenantOrd, seq: Seq) -> [u8; HOOK_KEY_LEN] {
    assert_tenant("hooks", tenant);
    Put::new().u32(tenant.0).u64(seq.0).done()
}

impl HookKey {
    /// The key bytes ([`hook_key`]).
    pub fn encode(&self) -> [u8; HOOK_KEY_LEN] {
        hook_key(self.tenant, self.seq)
    }

    /// Decodes a `hooks` key.
    ///
    /// # Errors
    /// [`KeyError::WrongLength`], [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<HookKey, KeyError> {
        let (mut t, tenant) = open::<HOOK_KEY_LEN>(key, "hooks")?;
        Ok(HookKey {
            tenant,
            seq: Seq(t.u64()?),
        })
    }
}

/// Every real key of cf `hooks` (all tenants; the sentinel excluded).
pub fn hooks_range() -> KeyRange {
    cf_span()
}

/// The envelopes of `tenant`, in seq order.
///
/// # Panics
/// On a reserved ordinal.
pub fn hooks_tenant_range(tenant: TenantOrd) -> KeyRange {
    tenant_span("hooks", tenant)
}

// ---- deliveries ---------------------------------------------------------

/// A decoded `deliveries` key: the row of hook `seq` for sink `sink`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// The hook.
    pub seq: Seq,
    /// The sink.
    pub sink: SinkIx,
}

/// `ord:32, seq:64, sink:16` in cf `deliveries`.
///
/// # Panics
/// On a reserved ordinal.
pub fn delivery_key(tenant: TenantOrd, seq: Seq, sink: SinkIx) -> [u8; DELIVERY_KEY_LEN] {
    assert_tenant("deliveries", tenant);
    Put::new().u32(tenant.0).u64(seq.0).u16(sink.0).done()
}

impl DeliveryKey {
    /// The key bytes ([`delivery_key`]).
    pub fn encode(&self) -> [u8; DELIVERY_KEY_LEN] {
        delivery_key(self.tenant, self.seq, self.sink)
    }

    /// Decodes a `deliveries` key.
    ///
    /// # Errors
    /// [`KeyError::WrongLength`], [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<DeliveryKey, KeyError> {
        let (mut t, tenant) = open::<DELIVERY_KEY_LEN>(key, "deliveries")?;
        Ok(DeliveryKey {
            tenant,
            seq: Seq(t.u64()?),
            sink: SinkIx(t.u16()?),
        })
    }
}

/// Every real key of cf `deliveries` (all tenants; the sentinel excluded).
pub fn deliveries_range() -> KeyRange {
    cf_span()
}

/// The delivery rows of `tenant`, in `(seq, sink)` order.
///
/// # Panics
/// On a reserved ordinal.
pub fn deliveries_tenant_range(tenant: TenantOrd) -> KeyRange {
    tenant_span("deliveries", tenant)
}

/// The delivery rows of one hook (one per sink), in sink order: what retention
/// reads to know whether an envelope is still referenced.
///
/// # Panics
/// On a reserved ordinal.
pub fn deliveries_of_hook_range(tenant: TenantOrd, seq: Seq) -> KeyRange {
    KeyRange::prefix(&hook_key(tenant, seq))
}

// ---- archive ------------------------------------------------------------

/// A decoded `archive` key: hook `seq` of `tenant` was received at
/// `received_at_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ArchiveKey {
    /// The tenant.
    pub tenant: TenantOrd,
    /// When the hook was received, unix milliseconds.
    pub received_at_ms: u64,
    /// The hook.
    pub seq: Seq,
}

/// `ord:32, received_at_ms:64, seq:64` in cf `archive` (the value is empty).
///
/// # Panics
/// On a reserved ordinal.
pub fn archive_key(tenant: TenantOrd, received_at_ms: u64, seq: Seq) -> [u8; ARCHIVE_KEY_LEN] {
    assert_tenant("archive", tenant);
    Put::new()
        .u32(tenant.0)
        .u64(received_at_ms)
        .u64(seq.0)
        .done()
}

impl ArchiveKey {
    /// The key bytes ([`archive_key`]).
    pub fn encode(&self) -> [u8; ARCHIVE_KEY_LEN] {
        archive_key(self.tenant, self.received_at_ms, self.seq)
    }

    /// Decodes an `archive` key.
    ///
    /// # Errors
    /// [`KeyError::WrongLength`], [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<ArchiveKey, KeyError> {
        let (mut t, tenant) = open::<ARCHIVE_KEY_LEN>(key, "archive")?;
        Ok(ArchiveKey {
            tenant,
            received_at_ms: t.u64()?,
            seq: Seq(t.u64()?),
        })
    }
}

/// Every real key of cf `archive` (all tenants; the sentinel excluded).
pub fn archive_range() -> KeyRange {
    cf_span()
}

/// The archive of `tenant`, oldest first.
///
/// # Panics
/// On a reserved ordinal.
pub fn archive_tenant_range(tenant: TenantOrd) -> KeyRange {
    tenant_span("archive", tenant)
}

/// The archive entries of `tenant` received in `[from_ms, until_ms)` (archive
/// replay by time; retention with `from_ms = 0`). Empty when
/// `until_ms <= from_ms` (then `start == end`, a valid empty range delete).
///
/// # Panics
/// On a reserved ordinal.
pub fn archive_time_range(tenant: TenantOrd, from_ms: u64, until_ms: u64) -> KeyRange {
    assert_tenant("archive", tenant);
    let start: [u8; 12] = Put::new().u32(tenant.0).u64(from_ms).done();
    let end: [u8; 12] = Put::new().u32(tenant.0).u64(until_ms.max(from_ms)).done();
    KeyRange::new(start, end)
}
