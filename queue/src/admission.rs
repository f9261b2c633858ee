//! What the ingest path reads of the store before it commits a hook, in one
//! place for the edge (its answer before the commit: docs/design.md section 5,
//! "Edge", steps 6-8) and the Writer (its decision at the commit): the purge
//! mark, the live dedupe record and the size a hook's rows count against the
//! byte bounds. Each takes a reader and the time; no clock, no I/O of its own.
//!
//! The edge and the Writer both decide: the edge answers a provider retry or
//! a purged tenant without a round trip through the Writer, and the Writer,
//! which serialises the commits, decides again at the commit (a record or a
//! mark may have appeared meanwhile). Reading through the same functions keeps
//! the two decisions the same rule.

use ankusa_engine::{Cf, Read};
use ankusa_keys::{DedupeValue, Envelope, Seq, SourceId, TenantOrd, dedupe_key};

use crate::QueueError;

/// Whether `tenant` carries a purge mark (docs/design.md section 5, "Purge a
/// tenant"): one point get of `meta` `purge/<ord>`.
///
/// # Errors
/// The engine's.
pub fn is_purging(read: &impl Read, tenant: TenantOrd) -> Result<bool, QueueError> {
    Ok(read
        .get(Cf::Meta, &ankusa_keys::meta::purge_key(tenant))?
        .is_some())
}

/// The first hook's seq when `(tenant, source)` holds a live dedupe record for
/// `dedupe_key` at `now_ms` (a record expires at its `expires_at_ms`); `None`
/// when it holds none or an expired one (a new hook).
///
/// # Errors
/// The engine's; [`QueueError::Value`] for a record that does not decode.
pub fn live_dedupe(
    read: &impl Read,
    tenant: TenantOrd,
    source: SourceId,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<Seq>, QueueError> {
    let Some(raw) = read.get(Cf::Index, &dedupe_key(tenant, source, key))? else {
        return Ok(None);
    };
    let record = DedupeValue::decode(&raw)?;
    Ok((record.expires_at_ms > now_ms).then_some(record.seq))
}

/// The size each row of a hook counts against its tenant's and the node's
/// byte bounds (counter `bytes`): its stored envelope's length, saturated at
/// `u32::MAX`. The Writer's commit adds exactly this per row, so the edge's
/// reservation of it never lets a bound be overshot.
pub fn hook_size(envelope: &Envelope) -> u32 {
    size_of_encoded(envelope.encoded_len())
}

/// The row size of an envelope encoded in `len` bytes: the rule of
/// [`hook_size`], for the Writer's builders, which have the encoding at hand.
pub(crate) fn size_of_encoded(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}
