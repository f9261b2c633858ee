//! Quarantine review through the admin API (docs/design.md section 5,
//! "Quarantine"): list a tenant's held hooks, show one, release one (its
//! rows resolved from the stored envelope as at ingest, through the Writer:
//! [`crate::quarantine::release`]), drop one
//! ([`crate::quarantine::drop_one`]). Release or drop of every hook of a
//! source is a job (`release_quarantined`, `drop_quarantined`).

use ankusa_engine::Kv;
use ankusa_keys::Seq;

use super::AdminState;
use super::api::{
    ApiError, CursorKind, Query, decode_cursor, encode_cursor, parse_seq, rfc3339, tenant_ord,
    uuid_text,
};
use super::views::hook_view;
use crate::api_types::{Dropped, Page, QuarantineList, QuarantinedHook, QuarantinedItem, Released};
use crate::context::read_envelope;
use crate::quarantine;

/// `GET /v1/tenants/{tenant}/quarantine`: the tenant's quarantined hooks in
/// seq order (`limit`, `cursor`; `source` narrows the page to one source).
pub(crate) fn list<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    mut q: Query,
) -> Result<QuarantineList, ApiError> {
    let limit = q.limit()?;
    let cursor = q
        .take("cursor")
        .map(|c| decode_cursor(CursorKind::Quarantine, &c))
        .transpose()?;
    let source = q.take("source");
    q.finish()?;
    let ord = tenant_ord(&state.registry.load(), tenant)?;
    let only = match &source {
        Some(s) => Some(
            *state
                .registry
                .load()
                .sources
                .get(s)
                .ok_or_else(|| ApiError::not_found(format!("no source {s:?}")))?,
        ),
        None => None,
    };
    let after = match cursor {
        Some(c) => Some(Seq(u64::from_be_bytes(c.as_slice().try_into().map_err(
            |_| ApiError::bad_request("cursor is not valid here: wrong length"),
        )?))),
        None => None,
    };
    let page = ankusa_queue::list_quarantined(&*state.kv, ord, after, limit)?;
    let items: Vec<QuarantinedItem> = page
        .hooks
        .iter()
        .filter(|h| only.is_none() || h.source == only)
        .map(|h| QuarantinedItem {
            id: format!("{tenant}.{}", h.seq.0),
            tenant: tenant.to_owned(),
            seq: h.seq.0,
            reason: h.reason.clone(),
            source: h
                .source
                .and_then(|s| state.registry.load().source_name(s).map(str::to_owned)),
            received_at_ms: h.received_at_ms,
            received_at: h.received_at_ms.and_then(rfc3339),
            size_bytes: h.size_bytes,
            idempotency_key: h.idempotency_key.as_ref().map(uuid_text),
        })
        .collect();
    let next = page
        .next
        .map(|s| encode_cursor(CursorKind::Quarantine, &s.0.to_be_bytes()));
    Ok(Page {
        items,
        next_cursor: next,
    })
}

/// The hook a path names and the reason it is held, or why it is not: 404
/// for no such tenant or hook, 400 for a seq that is not a number, 409 for a
/// hook that is not quarantined.
fn held<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: &str,
) -> Result<(ankusa_keys::TenantOrd, Seq, String), ApiError> {
    let ord = tenant_ord(&state.registry.load(), tenant)?;
    let seq = parse_seq(seq)?;
    let reason = quarantine::reason(state, tenant, ord, seq)?;
    Ok((ord, seq, reason))
}

/// `GET /v1/tenants/{tenant}/quarantine/{seq}`: why it is held, and the hook
/// (its envelope as stored).
pub(crate) fn get<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: &str,
    q: Query,
) -> Result<QuarantinedHook, ApiError> {
    q.finish()?;
    let (ord, seq, reason) = held(state, tenant, seq)?;
    let env = read_envelope(&*state.kv, ord, seq)?.ok_or_else(|| {
        ApiError::not_found(format!(
            "hook {} of tenant {tenant:?} has no envelope",
            seq.0
        ))
    })?;
    Ok(QuarantinedHook {
        reason,
        hook: hook_view(state, tenant, ord, seq, &env)?,
    })
}

/// `POST /v1/tenants/{tenant}/quarantine/{seq}/release`: the hook's rows,
/// resolved from its stored envelope with its source's configuration as at
/// ingest, committed through the Writer; the hook keeps its seq.
pub(crate) fn release<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: &str,
    q: Query,
) -> Result<Released, ApiError> {
    q.finish()?;
    let ord = tenant_ord(&state.registry.load(), tenant)?;
    let seq = parse_seq(seq)?;
    let released = quarantine::release(state, tenant, ord, seq)?;
    Ok(Released {
        id: format!("{tenant}.{}", seq.0),
        released: true,
        source: released.source,
        rows: released.rows as u64,
    })
}

/// `DELETE /v1/tenants/{tenant}/quarantine/{seq}`: the hook, its envelope and
/// archive entry are deleted for good.
pub(crate) fn drop_one<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: &str,
    q: Query,
) -> Result<Dropped, ApiError> {
    q.finish()?;
    let ord = tenant_ord(&state.registry.load(), tenant)?;
    let seq = parse_seq(seq)?;
    quarantine::drop_one(state, tenant, ord, seq)?;
    Ok(Dropped {
        id: format!("{tenant}.{}", seq.0),
        dropped: true,
    })
}
