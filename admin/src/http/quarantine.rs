//! Quarantine review through the admin API (docs/design.md section 5,
//! "Quarantine"): list a tenant's held hooks, show one, release one (its
//! rows resolved from the stored envelope as at ingest, through the Writer:
//! `Edge::release_quarantined`), drop one (`Edge::drop_quarantined`). Release
//! or drop of every hook of a source is a job (`release_quarantined`,
//! `drop_quarantined`).

use ankusa_engine::{Cf, Kv};
use ankusa_keys::{QuarantinedValue, Seq, quarantined_key};
use serde_json::{Value, json};

use super::api::{
    ApiError, CursorKind, Query, decode_cursor, encode_cursor, parse_seq, rfc3339, tenant_ord,
    uuid_text,
};
use super::steps::purging;
use super::views::{hook_view, read_envelope};
use super::{AdminState, block};
use ankusa_edge::server::ReleaseError;

/// `GET /v1/tenants/{tenant}/quarantine`: the tenant's quarantined hooks in
/// seq order (`limit`, `cursor`; `source` narrows the page to one source).
pub(crate) fn list<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    mut q: Query,
) -> Result<Value, ApiError> {
    let limit = q.limit()?;
    let cursor = q
        .take("cursor")
        .map(|c| decode_cursor(CursorKind::Quarantine, &c))
        .transpose()?;
    let source = q.take("source");
    q.finish()?;
    let ord = tenant_ord(&state.registry, tenant)?;
    let only = match &source {
        Some(s) => Some(
            *state
                .registry
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
    let items: Vec<Value> = page
        .hooks
        .iter()
        .filter(|h| only.is_none() || h.source == only)
        .map(|h| {
            json!({
                "id": format!("{tenant}.{}", h.seq.0),
                "tenant": tenant,
                "seq": h.seq.0,
                "reason": h.reason,
                "source": h.source.and_then(|s| state.registry.source_name(s)),
                "received_at_ms": h.received_at_ms,
                "received_at": h.received_at_ms.and_then(rfc3339),
                "size_bytes": h.size_bytes,
                "idempotency_key": h.idempotency_key.as_ref().map(uuid_text),
            })
        })
        .collect();
    let next = page
        .next
        .map(|s| encode_cursor(CursorKind::Quarantine, &s.0.to_be_bytes()));
    Ok(json!({ "items": items, "next_cursor": next }))
}

/// The reason a hook is held, or why it is not: 404 for no such hook, 409
/// for a hook that is not quarantined.
fn held<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: &str,
) -> Result<(ankusa_keys::TenantOrd, Seq, String), ApiError> {
    let ord = tenant_ord(&state.registry, tenant)?;
    let seq = parse_seq(seq)?;
    match state.kv.get(Cf::Index, &quarantined_key(ord, seq))? {
        Some(v) => Ok((
            ord,
            seq,
            QuarantinedValue::decode(&v)
                .map_err(ApiError::store)?
                .reason,
        )),
        None if read_envelope(&*state.kv, ord, seq)?.is_some() => Err(ApiError::conflict(format!(
            "hook {} of tenant {tenant:?} is not quarantined",
            seq.0
        ))),
        None => Err(ApiError::not_found(format!(
            "tenant {tenant:?} has no hook {} (never stored, dropped, or removed by retention)",
            seq.0
        ))),
    }
}

/// `GET /v1/tenants/{tenant}/quarantine/{seq}`: why it is held, and the hook
/// (its envelope as stored).
pub(crate) fn get<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: &str,
    q: Query,
) -> Result<Value, ApiError> {
    q.finish()?;
    let (ord, seq, reason) = held(state, tenant, seq)?;
    let env = read_envelope(&*state.kv, ord, seq)?.ok_or_else(|| {
        ApiError::not_found(format!(
            "hook {} of tenant {tenant:?} has no envelope",
            seq.0
        ))
    })?;
    Ok(json!({ "reason": reason, "hook": hook_view(state, tenant, ord, seq, &env)? }))
}

fn release_error(tenant: &str, seq: Seq, e: ReleaseError) -> ApiError {
    match e {
        ReleaseError::NotQuarantined { .. } => ApiError::conflict(format!(
            "hook {} of tenant {tenant:?} is not quarantined",
            seq.0
        )),
        ReleaseError::SourceNotConfigured { source_id } => ApiError::conflict(format!(
            "the hook's source (number {source_id}) is not in the configuration: nothing to deliver it to; drop it instead"
        )),
        ReleaseError::Write(ankusa_queue::writer::WriteError::TenantPurging { .. }) => {
            ApiError::conflict(format!("tenant {tenant:?} is being purged"))
        }
        ReleaseError::Write(ankusa_queue::writer::WriteError::Stopped) => {
            ApiError::unavailable("the Writer has stopped (the relay is stopping)")
        }
        ReleaseError::Write(e) => ApiError::store(e),
        ReleaseError::Store(m) => ApiError::store(m),
    }
}

/// `POST /v1/tenants/{tenant}/quarantine/{seq}/release`: the hook's rows,
/// resolved from its stored envelope with its source's configuration as at
/// ingest, committed through the Writer; the hook keeps its seq.
pub(crate) fn release<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: &str,
    q: Query,
) -> Result<Value, ApiError> {
    q.finish()?;
    let _writes = state.writes.blocking_lock();
    let (ord, seq, _) = held(state, tenant, seq)?;
    if purging(state, ord)? {
        return Err(ApiError::conflict(format!(
            "tenant {tenant:?} is being purged"
        )));
    }
    let edge = state
        .edge()
        .ok_or_else(|| ApiError::unavailable("the Writer is not running"))?;
    let released =
        block(edge.release_quarantined(ord, seq)).map_err(|e| release_error(tenant, seq, e))?;
    Ok(
        json!({ "id": format!("{tenant}.{}", seq.0), "released": true, "source": released.source, "rows": released.rows }),
    )
}

/// `DELETE /v1/tenants/{tenant}/quarantine/{seq}`: the hook, its envelope and
/// archive entry are deleted for good.
pub(crate) fn drop_one<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: &str,
    q: Query,
) -> Result<Value, ApiError> {
    q.finish()?;
    let _writes = state.writes.blocking_lock();
    let (ord, seq, _) = held(state, tenant, seq)?;
    if purging(state, ord)? {
        return Err(ApiError::conflict(format!(
            "tenant {tenant:?} is being purged"
        )));
    }
    let edge = state
        .edge()
        .ok_or_else(|| ApiError::unavailable("the Writer is not running"))?;
    block(edge.drop_quarantined(ord, seq)).map_err(|e| release_error(tenant, seq, e))?;
    Ok(json!({ "id": format!("{tenant}.{}", seq.0), "dropped": true }))
}
