//! The read-only routes (docs/design.md section 5, "Admin API"): tenants with
//! their maintained counters, sources with their sinks and breakers, and one
//! hook with every delivery row.

use ankusa_config::{KeySource, Order, OrderingKey, Source, TenantBinding, Verification};
use ankusa_engine::{Cf, Direction, Kv, Read};
use ankusa_keys::meta::{decode_name, tenant_by_ord_key, tenant_ords_range};
use ankusa_keys::{
    CounterField, DeadLetterValue, DeliveryKey, DeliveryRow, DueKey, Envelope, Family, RowState, Seq, SinkIx, TenantOrd,
    archive_time_range, counter_key, dead_letter_key, deliveries_of_hook_range, hook_key, tenant_range,
};
use ankusa_queue::RowId;
use serde_json::{Value, json};

use super::AdminState;
use super::api::{ApiError, CursorKind, Query, b64, decode_cursor, encode_cursor, rfc3339, row_id_text, tenant_ord, utf8, uuid_text};

/// The counter fields as the API names them (`bytes` is `pending_bytes`).
pub(crate) fn counter_name(field: CounterField) -> &'static str {
    match field {
        CounterField::Bytes => "pending_bytes",
        other => other.name(),
    }
}

/// One tenant: its maintained counters (point reads of `?C`, never scans),
/// the age of its oldest due row (one seek on its ?D range), its bounds.
fn tenant_view<K: Kv>(state: &AdminState<K>, name: &str, ord: TenantOrd, now_ms: u64) -> Result<Value, ApiError> {
    let kv = &*state.kv;
    let mut counters = serde_json::Map::new();
    for field in CounterField::ALL {
        counters.insert(counter_name(field).into(), json!(kv.counter(&counter_key(ord, field))?));
    }
    let oldest = kv.first(Cf::Index, &tenant_range(Family::Due, ord), Direction::Forward)?;
    let oldest_due_ms = match oldest {
        Some((k, _)) => Some(DueKey::decode(&k).map_err(ApiError::store)?.due_ms),
        None => None,
    };
    let configured = state.config.tenant(name);
    Ok(json!({
        "name": name,
        "ordinal": ord.0,
        "configured": configured.is_some(),
        "max_pending": configured.map(|t| t.max_pending),
        "max_pending_bytes": configured.map(|t| t.max_pending_bytes),
        "counters": counters,
        "oldest_due_at_ms": oldest_due_ms,
        "oldest_due_age_ms": oldest_due_ms.map(|d| now_ms.saturating_sub(d)),
    }))
}

/// `GET /v1/tenants`: every tenant the store knows (a tenant removed from the
/// configuration keeps its number and shows `configured: false`), in ordinal
/// order.
pub(crate) fn list_tenants<K: Kv>(state: &AdminState<K>, mut q: Query) -> Result<Value, ApiError> {
    let limit = q.limit()?;
    let cursor = q.take("cursor").map(|c| decode_cursor(CursorKind::Tenants, &c)).transpose()?;
    q.finish()?;
    let mut range = tenant_ords_range();
    if let Some(after) = cursor {
        let ord: [u8; 4] = after.as_slice().try_into().map_err(|_| ApiError::bad_request("cursor is not valid here: wrong length"))?;
        let start = tenant_by_ord_key(TenantOrd(u32::from_be_bytes(ord).clamp(1, TenantOrd::LAST.0)));
        if start.as_slice() > range.start.as_slice() {
            range.start = start;
        }
    }
    let entries = state.kv.scan(Cf::Meta, &range, Direction::Forward, limit + 1)?;
    let now = (state.clock)();
    let mut items = Vec::new();
    let mut next = None;
    for (i, (k, v)) in entries.iter().enumerate() {
        let ord_bytes: [u8; 4] = k[k.len().saturating_sub(4)..].try_into().map_err(ApiError::store)?;
        let ord = TenantOrd(u32::from_be_bytes(ord_bytes));
        if i == limit {
            next = Some(encode_cursor(CursorKind::Tenants, &ord_bytes));
            break;
        }
        let name = decode_name(v).map_err(ApiError::store)?;
        items.push(tenant_view(state, &name, ord, now)?);
    }
    Ok(json!({ "items": items, "next_cursor": next }))
}

/// `GET /v1/tenants/{tenant}`.
pub(crate) fn get_tenant<K: Kv>(state: &AdminState<K>, name: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let ord = tenant_ord(&state.registry, name)?;
    tenant_view(state, name, ord, (state.clock)())
}

fn key_source(k: &KeySource) -> Value {
    match k {
        KeySource::Header(h) => json!({ "header": h }),
        KeySource::Json(p) => json!({ "json": p.dotted }),
    }
}

fn scheme(v: &Verification) -> &'static str {
    match v {
        Verification::None => "none",
        Verification::Github { .. } => "github",
        Verification::Stripe { .. } => "stripe",
        Verification::Shopify { .. } => "shopify",
        Verification::Slack { .. } => "slack",
        Verification::StandardWebhooks { .. } => "standard_webhooks",
        Verification::Hmac { .. } => "hmac",
    }
}

/// A breaker as JSON.
fn breaker_json(tenant: &str, b: BreakerReport) -> Value {
    match b {
        BreakerReport::Closed { failures } => json!({ "tenant": tenant, "state": "closed", "failures": failures }),
        BreakerReport::Open { until_ms } => json!({ "tenant": tenant, "state": "open", "open_until_ms": until_ms }),
        BreakerReport::HalfOpen => json!({ "tenant": tenant, "state": "half_open" }),
    }
}

/// The state of a (tenant, source, sink entry)'s breaker as the pipeline
/// reports it (docs/design.md section 5, "Breaker").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerReport {
    /// Calls go through; consecutive failures so far.
    Closed {
        /// Consecutive `Retry` outcomes.
        failures: u32,
    },
    /// Claimed rows are parked until `until_ms` (unix ms).
    Open {
        /// When it half-opens.
        until_ms: u64,
    },
    /// One trial call at a time.
    HalfOpen,
}

/// One source: never a secret, only the verification scheme's name.
fn source_view<K: Kv>(state: &AdminState<K>, s: &Source) -> Value {
    let now = (state.clock)();
    let tenants: Vec<&str> = match &s.tenant {
        TenantBinding::Fixed(t) => vec![t.as_str()],
        TenantBinding::Path => state.config.tenants.iter().map(|t| t.name.as_str()).collect(),
    };
    let id = state.registry.sources.get(&s.name).copied();
    let sinks: Vec<Value> = s
        .sinks
        .iter()
        .map(|e| {
            let (ordered, key) = match &e.order {
                Order::Unordered => (false, Value::Null),
                Order::Ordered { key: None } => (true, Value::Null),
                Order::Ordered { key: Some(OrderingKey::Header(h)) } => (true, json!({ "header": h })),
                Order::Ordered { key: Some(OrderingKey::Json(p)) } => (true, json!({ "json": p.dotted })),
                Order::Ordered { key: Some(OrderingKey::Func(_)) } => (true, json!({ "function": true })),
            };
            let breakers: Vec<Value> = match id {
                Some(id) => tenants
                    .iter()
                    .filter_map(|t| Some((*t, *state.registry.tenants.get(*t)?)))
                    .map(|(t, ord)| breaker_json(t, (state.breakers)(ord, id, SinkIx(e.index), now)))
                    .collect(),
                None => Vec::new(),
            };
            json!({
                "name": e.name,
                "type": e.kind.as_str(),
                "index": e.index,
                "ordered": ordered,
                "ordering_key": key,
                "breakers": breakers,
            })
        })
        .collect();
    json!({
        "name": s.name,
        "path": s.path,
        "tenant": match &s.tenant {
            TenantBinding::Fixed(t) => json!({ "fixed": t }),
            TenantBinding::Path => json!({ "path": true }),
        },
        "verification": scheme(&s.verification),
        "dedupe": s.dedupe.as_ref().map(|d| json!({ "key": key_source(&d.key), "ttl_ms": d.ttl_ms })),
        "sinks": sinks,
    })
}

/// `GET /v1/sources`: the configured sources, in name order.
pub(crate) fn list_sources<K: Kv>(state: &AdminState<K>, mut q: Query) -> Result<Value, ApiError> {
    let limit = q.limit()?;
    let cursor = q.take("cursor").map(|c| decode_cursor(CursorKind::Sources, &c)).transpose()?;
    q.finish()?;
    let mut sources: Vec<&Source> = state.config.sources.iter().collect();
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    let start = cursor.unwrap_or_default();
    let rest: Vec<&Source> = sources.into_iter().filter(|s| s.name.as_bytes() >= start.as_slice()).collect();
    let next = rest.get(limit).map(|s| encode_cursor(CursorKind::Sources, s.name.as_bytes()));
    let items: Vec<Value> = rest.iter().take(limit).map(|s| source_view(state, s)).collect();
    Ok(json!({ "items": items, "next_cursor": next }))
}

/// `GET /v1/sources/{source}`.
pub(crate) fn get_source<K: Kv>(state: &AdminState<K>, name: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let s = state.config.source(name).ok_or_else(|| ApiError::not_found(format!("no source {name:?} in the configuration")))?;
    Ok(source_view(state, s))
}

/// The sink entry name of `(source, index)` in the configuration.
pub(crate) fn sink_name<K: Kv>(state: &AdminState<K>, source: Option<&str>, sink: SinkIx) -> Option<String> {
    let s = state.config.source(source?)?;
    s.sinks.iter().find(|e| e.index == sink.0).map(|e| e.name.clone())
}

/// One delivery row of a hook: where it is and what happened to it.
fn row_view<K: Kv>(state: &AdminState<K>, tenant: &str, source: Option<&str>, id: RowId, row: &DeliveryRow) -> Result<Value, ApiError> {
    let state_name = match row.state {
        RowState::Due => "due",
        RowState::InFlight => "in_flight",
        RowState::Member => "lane_member",
        RowState::Dead => "dead",
    };
    let dead = if row.state == RowState::Dead {
        match state.kv.get(Cf::Index, &dead_letter_key(id.tenant, id.seq, id.sink))? {
            Some(v) => {
                let d = DeadLetterValue::decode(&v).map_err(ApiError::store)?;
                json!({ "dead_at_ms": d.dead_at_ms, "dead_at": rfc3339(d.dead_at_ms), "reason": d.reason })
            }
            None => Value::Null,
        }
    } else {
        Value::Null
    };
    // ADR 0004 section 3: a laned row in ?D/?F is its lane's head, in ?O a
    // member; a dead row is in no lane.
    let lane = match (row.lane, row.state) {
        (Some(_), RowState::Due | RowState::InFlight) => json!("head"),
        (Some(_), RowState::Member) => json!("member"),
        _ => Value::Null,
    };
    Ok(json!({
        "id": row_id_text(tenant, id),
        "sink_index": id.sink.0,
        "sink": sink_name(state, source, id.sink),
        "state": state_name,
        "attempts": row.attempts,
        "first_attempt_at_ms": row.first_attempt_at_ms,
        "last_error": row.last_error,
        "size_bytes": row.size,
        "ordered": row.lane.is_some(),
        "ordering_key": row.ordering_key.as_deref().map(utf8),
        "ordering_key_base64": row.ordering_key.as_deref().map(b64),
        "lane_position": lane,
        "dead": dead,
    }))
}

/// A hook: its envelope as stored and every delivery row it still has.
fn hook_view<K: Kv>(state: &AdminState<K>, tenant: &str, ord: TenantOrd, seq: Seq, env: &Envelope) -> Result<Value, ApiError> {
    let source = state.registry.source_name(env.source).map(str::to_owned);
    let rows = state.kv.scan(Cf::Deliveries, &deliveries_of_hook_range(ord, seq), Direction::Forward, usize::from(u16::MAX) + 1)?;
    let mut deliveries = Vec::new();
    for (k, v) in rows {
        let dk = DeliveryKey::decode(&k).map_err(ApiError::store)?;
        let row = DeliveryRow::decode(&v).map_err(ApiError::store)?;
        deliveries.push(row_view(state, tenant, source.as_deref(), RowId::new(ord, seq, dk.sink), &row)?);
    }
    let headers: Vec<Value> = env
        .headers
        .iter()
        .map(|(n, v)| json!({ "name": String::from_utf8_lossy(n), "value": utf8(v), "value_base64": b64(v) }))
        .collect();
    Ok(json!({
        "tenant": tenant,
        "seq": seq.0,
        "idempotency_key": uuid_text(&env.idempotency_key),
        "source": source,
        "received_at_ms": env.received_at_ms,
        "received_at": rfc3339(env.received_at_ms),
        "method": env.method,
        "path": env.path,
        "query": env.query,
        "headers": headers,
        "body_base64": b64(&env.body),
        "body_text": utf8(&env.body),
        "dedupe_key": env.dedupe_key.as_deref().map(utf8),
        "dedupe_key_base64": env.dedupe_key.as_deref().map(b64),
        "deliveries": deliveries,
    }))
}

fn read_envelope(read: &impl Read, ord: TenantOrd, seq: Seq) -> Result<Option<Envelope>, ApiError> {
    match read.get(Cf::Hooks, &hook_key(ord, seq))? {
        Some(raw) => Ok(Some(Envelope::decode(&raw).map_err(ApiError::store)?)),
        None => Ok(None),
    }
}

/// `GET /v1/tenants/{tenant}/hooks/{seq}`.
pub(crate) fn get_hook<K: Kv>(state: &AdminState<K>, tenant: &str, seq: Seq, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let ord = tenant_ord(&state.registry, tenant)?;
    let env = read_envelope(&*state.kv, ord, seq)?
        .ok_or_else(|| ApiError::not_found(format!("tenant {tenant:?} has no hook {} (never stored, or removed by retention or a drop)", seq.0)))?;
    hook_view(state, tenant, ord, seq, &env)
}

/// How far before the key's timestamp [`find_hook`] looks when the exact
/// millisecond finds nothing (keys given by a release that took the UUID's
/// time from its own clock read, a few ms after `received_at_ms`).
const LOOKUP_SLACK_MS: u64 = 1_000;
/// Most archive entries [`find_hook`] reads per tenant in the slack window.
const LOOKUP_SLACK_ENTRIES: usize = 1_000;

/// `GET /v1/hooks/{idempotency_key}`: the hook whose envelope carries this
/// idempotency key, found without a key family of its own
/// (docs/design.md section 10): the edge makes the UUIDv7's 48-bit
/// timestamp equal to the envelope's `received_at_ms`, so the hook is in
/// the `archive` range `(ord, received_at_ms, *)` of its tenant: one small
/// range per tenant, each candidate envelope read and its key compared.
pub(crate) fn find_hook<K: Kv>(state: &AdminState<K>, key: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let uuid = uuid::Uuid::parse_str(key).map_err(|_| ApiError::bad_request(format!("{key:?} is not a UUID")))?;
    if uuid.get_version_num() != 7 {
        return Err(ApiError::bad_request(format!("{key:?} is not an idempotency key of this relay (they are UUIDv7)")));
    }
    let wanted = *uuid.as_bytes();
    let b = uuid.as_bytes();
    let ts = u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]);
    let windows = [(ts, ts.saturating_add(1), usize::MAX), (ts.saturating_sub(LOOKUP_SLACK_MS), ts.saturating_add(1), LOOKUP_SLACK_ENTRIES)];
    for (from, until, cap) in windows {
        for (name, &ord) in &state.registry.tenants {
            let range = archive_time_range(ord, from, until);
            let entries = state.kv.scan(Cf::Archive, &range, Direction::Forward, cap.min(100_000))?;
            for (k, _) in entries {
                let ak = ankusa_keys::ArchiveKey::decode(&k).map_err(ApiError::store)?;
                if let Some(env) = read_envelope(&*state.kv, ord, ak.seq)?
                    && env.idempotency_key == wanted
                {
                    return hook_view(state, name, ord, ak.seq, &env);
                }
            }
        }
    }
    Err(ApiError::not_found(format!("no hook with idempotency key {key} (never stored, or removed by retention or a drop)")))
}
