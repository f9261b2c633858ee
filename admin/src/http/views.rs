//! The read-only routes (docs/design.md section 5, "Admin API"): tenants with
//! their maintained counters, sources with their sinks and breakers, and one
//! hook with every delivery row and each row's attempt log.

use ankusa_config::{KeySource, Order, OrderingKey, Source, TenantBinding, Verification};
use ankusa_engine::{Cf, Direction, Kv};
use std::collections::BTreeSet;

use ankusa_keys::meta::{PauseTarget, decode_name, tenant_by_ord_key, tenant_ords_range};
use ankusa_keys::{
    AttemptRecord, CounterField, DeadLetterValue, DeliveryKey, DeliveryRow, DueKey, Envelope,
    QuarantinedValue, RowState, Seq, SinkIx, SourceId, TenantOrd, archive_time_range, counter_key,
    dead_letter_key, deliveries_of_hook_range, due_key, held_due_ms, held_due_range,
    live_due_range, quarantined_key,
};
use ankusa_queue::RowId;

use super::AdminState;
use super::api::{
    ApiError, CursorKind, Query, b64, decode_cursor, encode_cursor, rfc3339, row_id_text,
    tenant_ord, utf8, uuid_text,
};
use super::pause::pause_info;
use crate::api_types::{
    self, Attempt, Breaker, BreakerState, Counters, DeadInfo, Dedupe, Delivery, Header, Hook,
    KeySpec, Page, RowAttempts, Sink, SourceTenant, Tenant, TenantList,
};
use crate::context::read_envelope;

/// The field of [`Counters`] that shows `field`: named as the field
/// (`CounterField::name`), but `bytes` is `pending_bytes`.
pub(crate) fn counter_mut(c: &mut Counters, field: CounterField) -> &mut i64 {
    match field {
        CounterField::Pending => &mut c.pending,
        CounterField::Bytes => &mut c.pending_bytes,
        CounterField::InFlight => &mut c.in_flight,
        CounterField::Dead => &mut c.dead,
        CounterField::DeadBytes => &mut c.dead_bytes,
        CounterField::Quarantined => &mut c.quarantined,
        CounterField::DeliveredTotal => &mut c.delivered_total,
        CounterField::DeadLetteredTotal => &mut c.dead_lettered_total,
        CounterField::RetriesTotal => &mut c.retries_total,
        CounterField::Lanes => &mut c.lanes,
        CounterField::LanesBlocked => &mut c.lanes_blocked,
        CounterField::LaneMembers => &mut c.lane_members,
        CounterField::LanesHeld => &mut c.lanes_held,
    }
}

/// One tenant: its maintained counters (point reads of `?C`, never scans),
/// the age of its oldest due row (one seek on the live part of its ?D range:
/// a row held by a pause is in the held band, docs/design.md section 5,
/// "Pause", and is not due until a resume), its bounds.
fn tenant_view<K: Kv>(
    state: &AdminState<K>,
    name: &str,
    ord: TenantOrd,
    now_ms: u64,
) -> Result<Tenant, ApiError> {
    let kv = &*state.kv;
    let mut counters = Counters::default();
    for field in CounterField::ALL {
        *counter_mut(&mut counters, field) = kv.counter(&counter_key(ord, field))?;
    }
    let oldest = kv.first(Cf::Index, &live_due_range(ord), Direction::Forward)?;
    let oldest_due_ms = match oldest {
        Some((k, _)) => Some(DueKey::decode(&k).map_err(ApiError::store)?.due_ms),
        None => None,
    };
    let config = state.config.load();
    let configured = config.tenant(name);
    Ok(Tenant {
        name: name.to_owned(),
        ordinal: ord.0,
        configured: configured.is_some(),
        max_pending: configured.map(|t| t.max_pending),
        max_pending_bytes: configured.map(|t| t.max_pending_bytes),
        counters,
        oldest_due_at_ms: oldest_due_ms,
        oldest_due_age_ms: oldest_due_ms.map(|d| now_ms.saturating_sub(d)),
    })
}

/// `GET /v1/tenants`: every tenant the store knows (a tenant removed from the
/// configuration keeps its number and shows `configured: false`), in ordinal
/// order.
pub(crate) fn list_tenants<K: Kv>(
    state: &AdminState<K>,
    mut q: Query,
) -> Result<TenantList, ApiError> {
    let limit = q.limit()?;
    let cursor = q
        .take("cursor")
        .map(|c| decode_cursor(CursorKind::Tenants, &c))
        .transpose()?;
    q.finish()?;
    let mut range = tenant_ords_range();
    if let Some(after) = cursor {
        let ord: [u8; 4] = after
            .as_slice()
            .try_into()
            .map_err(|_| ApiError::bad_request("cursor is not valid here: wrong length"))?;
        let start = tenant_by_ord_key(TenantOrd(
            u32::from_be_bytes(ord).clamp(1, TenantOrd::LAST.0),
        ));
        if start.as_slice() > range.start.as_slice() {
            range.start = start;
        }
    }
    let entries = state
        .kv
        .scan(Cf::Meta, &range, Direction::Forward, limit + 1)?;
    let now = (state.clock)();
    let mut items = Vec::new();
    let mut next = None;
    for (i, (k, v)) in entries.iter().enumerate() {
        let ord_bytes: [u8; 4] = k[k.len().saturating_sub(4)..]
            .try_into()
            .map_err(ApiError::store)?;
        let ord = TenantOrd(u32::from_be_bytes(ord_bytes));
        if i == limit {
            next = Some(encode_cursor(CursorKind::Tenants, &ord_bytes));
            break;
        }
        let name = decode_name(v).map_err(ApiError::store)?;
        items.push(tenant_view(state, &name, ord, now)?);
    }
    Ok(Page {
        items,
        next_cursor: next,
    })
}

/// `GET /v1/tenants/{tenant}`.
pub(crate) fn get_tenant<K: Kv>(
    state: &AdminState<K>,
    name: &str,
    q: Query,
) -> Result<Tenant, ApiError> {
    q.finish()?;
    let ord = tenant_ord(&state.registry.load(), name)?;
    tenant_view(state, name, ord, (state.clock)())
}

/// An ordering key as the API shows it.
fn ordering_key_spec(k: &OrderingKey) -> KeySpec {
    match k {
        OrderingKey::Header(h) => KeySpec::Header(h.clone()),
        OrderingKey::Json(p) => KeySpec::Json(p.dotted.clone()),
        OrderingKey::Func(_) => KeySpec::Function(true),
        OrderingKey::FirstOf(places) => {
            KeySpec::FirstOf(places.iter().map(ordering_key_spec).collect())
        }
    }
}

fn key_source(k: &KeySource) -> KeySpec {
    match k {
        KeySource::Header(h) => KeySpec::Header(h.clone()),
        KeySource::Json(p) => KeySpec::Json(p.dotted.clone()),
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

/// A breaker as the API shows it.
fn breaker_view(tenant: &str, b: BreakerReport) -> Breaker {
    Breaker {
        tenant: tenant.to_owned(),
        state: match b {
            BreakerReport::Closed { failures } => BreakerState::Closed { failures },
            BreakerReport::Open { until_ms } => BreakerState::Open {
                open_until_ms: until_ms,
            },
            BreakerReport::HalfOpen => BreakerState::HalfOpen,
        },
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
    /// Due rows are parked (unclaimed) until `until_ms` (unix ms).
    Open {
        /// When it half-opens.
        until_ms: u64,
    },
    /// One trial call at a time.
    HalfOpen,
}

/// One source: never a secret, only the verification scheme's name; the
/// pauses in force on it and on each sink entry (the configuration's and the
/// runtime ones of `runtime`, docs/design.md section 5, "Pause").
fn source_view<K: Kv>(
    state: &AdminState<K>,
    s: &Source,
    runtime: &ankusa_queue::PauseMap,
) -> api_types::Source {
    let now = (state.clock)();
    let id = state.registry.load().sources.get(&s.name).copied();
    let source_runtime = id.and_then(|id| runtime.get(&PauseTarget::Source(id)));
    let source_paused = s.paused || source_runtime.is_some();
    let config = state.config.load();
    let tenants: Vec<&str> = match &s.tenant {
        TenantBinding::Fixed(t) => vec![t.as_str()],
        TenantBinding::Path => config.tenants.iter().map(|t| t.name.as_str()).collect(),
    };
    let sinks: Vec<Sink> = s
        .sinks
        .iter()
        .map(|e| {
            let (ordered, key) = match &e.order {
                Order::Unordered => (false, None),
                Order::Ordered { key: None } => (true, None),
                Order::Ordered { key: Some(k) } => (true, Some(ordering_key_spec(k))),
            };
            let breakers: Vec<Breaker> = match id {
                Some(id) => tenants
                    .iter()
                    .filter_map(|t| Some((*t, *state.registry.load().tenants.get(*t)?)))
                    .map(|(t, ord)| {
                        breaker_view(t, (state.breakers)(ord, id, SinkIx(e.index), now))
                    })
                    .collect(),
                None => Vec::new(),
            };
            let sink_runtime =
                id.and_then(|id| runtime.get(&PauseTarget::Sink(id, SinkIx(e.index))));
            Sink {
                name: e.name.clone(),
                kind: e.kind.as_str().to_owned(),
                index: e.index,
                ordered,
                ordering_key: key,
                dead_letter: e.dead_letter.as_str().to_owned(),
                breakers,
                pause: pause_info(e.paused, sink_runtime),
                paused: source_paused || e.paused || sink_runtime.is_some(),
            }
        })
        .collect();
    api_types::Source {
        name: s.name.clone(),
        path: s.path.clone(),
        tenant: match &s.tenant {
            TenantBinding::Fixed(t) => SourceTenant::Fixed(t.clone()),
            TenantBinding::Path => SourceTenant::Path(true),
        },
        verification: scheme(&s.verification).to_owned(),
        dedupe: s.dedupe.as_ref().map(|d| Dedupe {
            key: key_source(&d.key),
            ttl_ms: d.ttl_ms,
        }),
        sinks,
        pause: pause_info(s.paused, source_runtime),
        paused: source_paused,
    }
}

/// `GET /v1/sources`: the configured sources, in name order.
pub(crate) fn list_sources<K: Kv>(
    state: &AdminState<K>,
    mut q: Query,
) -> Result<api_types::SourceList, ApiError> {
    let limit = q.limit()?;
    let cursor = q
        .take("cursor")
        .map(|c| decode_cursor(CursorKind::Sources, &c))
        .transpose()?;
    q.finish()?;
    let config = state.config.load();
    let mut sources: Vec<&Source> = config.sources.iter().collect();
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    let start = cursor.unwrap_or_default();
    let rest: Vec<&Source> = sources
        .into_iter()
        .filter(|s| s.name.as_bytes() >= start.as_slice())
        .collect();
    let next = rest
        .get(limit)
        .map(|s| encode_cursor(CursorKind::Sources, s.name.as_bytes()));
    let runtime = ankusa_queue::read_pauses(&*state.kv)?;
    let items = rest
        .iter()
        .take(limit)
        .map(|s| source_view(state, s, &runtime))
        .collect();
    Ok(Page {
        items,
        next_cursor: next,
    })
}

/// `GET /v1/sources/{source}`.
pub(crate) fn get_source<K: Kv>(
    state: &AdminState<K>,
    name: &str,
    q: Query,
) -> Result<api_types::Source, ApiError> {
    q.finish()?;
    let config = state.config.load();
    let s = config
        .source(name)
        .ok_or_else(|| ApiError::not_found(format!("no source {name:?} in the configuration")))?;
    let runtime = ankusa_queue::read_pauses(&*state.kv)?;
    Ok(source_view(state, s, &runtime))
}

/// One delivery row of a hook: where it is and what happened to it.
fn row_view<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    source: Option<&str>,
    id: RowId,
    row: &DeliveryRow,
    held: bool,
) -> Result<Delivery, ApiError> {
    let state_name = match row.state {
        RowState::Due if held => "held",
        RowState::Due => "due",
        RowState::InFlight => "in_flight",
        RowState::Member => "lane_member",
        RowState::Dead => "dead",
    };
    let dead = if row.state == RowState::Dead {
        match state
            .kv
            .get(Cf::Index, &dead_letter_key(id.tenant, id.seq, id.sink))?
        {
            Some(v) => {
                let d = DeadLetterValue::decode(&v).map_err(ApiError::store)?;
                Some(DeadInfo {
                    dead_at_ms: d.dead_at_ms,
                    dead_at: rfc3339(d.dead_at_ms),
                    reason: d.reason,
                })
            }
            None => None,
        }
    } else {
        None
    };
    // ADR 0004 section 3: a laned row in ?D/?F is its lane's head (one a
    // pause holds too), in ?O a member; a dead row is in no lane, but for
    // the head of a held lane (section 8), which its ?H still names.
    let lane = match (row.lane, row.state) {
        (Some(_), RowState::Due | RowState::InFlight) => Some("head"),
        (Some(_), RowState::Member) => Some("member"),
        (Some(lane), RowState::Dead)
            if ankusa_queue::lanes::holds_lane(&*state.kv, id, lane)
                .map_err(ApiError::store)? =>
        {
            Some("held")
        }
        _ => None,
    };
    Ok(Delivery {
        id: row_id_text(tenant, id),
        sink_index: id.sink.0,
        sink: state.sink_name(source, id.sink),
        state: state_name.to_owned(),
        attempts: row.attempts,
        first_attempt_at_ms: row.first_attempt_at_ms,
        last_error: row.last_error.clone(),
        size_bytes: row.size,
        ordered: row.lane.is_some(),
        ordering_key: row.ordering_key.as_deref().and_then(utf8),
        ordering_key_base64: row.ordering_key.as_deref().map(b64),
        lane_position: lane.map(str::to_owned),
        dead,
    })
}

/// How much earlier than the hook's `received_at_ms` [`held_sinks`] starts
/// reading the held band (a due time is never before the hook was received,
/// on a clock that does not step back by more than this).
const HELD_LOOKUP_SLACK_MS: u64 = 60_000;
/// Most held ?D entries [`held_sinks`] reads for one hook.
const HELD_LOOKUP_ENTRIES: usize = 10_000;

/// The sink entries of hook `seq` of source `source` whose due row is held by
/// a pause (docs/design.md section 5, "Pause"), or will be at the pipeline's
/// next visit: its source or sink entry is paused now, by the configuration or
/// by the runtime control (whose pauses `meta` holds). The held band is read
/// only when the tenant has held rows: from the hook's receive time (a row is
/// never due before its hook was received), at most [`HELD_LOOKUP_ENTRIES`]
/// entries, for a row held under a pause lifted since (its resume is moving
/// it back).
fn held_sinks<K: Kv>(
    state: &AdminState<K>,
    ord: TenantOrd,
    seq: Seq,
    source: SourceId,
    source_name: Option<&str>,
    received_at_ms: u64,
    due: &[SinkIx],
) -> Result<BTreeSet<SinkIx>, ApiError> {
    let mut held = BTreeSet::new();
    if due.is_empty() {
        return Ok(held);
    }
    let runtime = ankusa_queue::read_pauses(&*state.kv)?;
    let config = state.config.load();
    let configured = source_name.and_then(|n| config.source(n));
    for &sink in due {
        let by_config = configured
            .is_some_and(|s| s.paused || s.sinks.iter().any(|e| e.index == sink.0 && e.paused));
        let by_runtime = runtime.contains_key(&PauseTarget::Source(source))
            || runtime.contains_key(&PauseTarget::Sink(source, sink));
        if by_config || by_runtime {
            held.insert(sink);
        }
    }
    let mut band = held_due_range(ord);
    if held.len() == due.len()
        || state
            .kv
            .first(Cf::Index, &band, Direction::Forward)?
            .is_none()
    {
        return Ok(held);
    }
    let from = due_key(
        ord,
        held_due_ms(received_at_ms.saturating_sub(HELD_LOOKUP_SLACK_MS)),
        Seq(0),
        SinkIx(0),
    )
    .to_vec();
    if from.as_slice() > band.start.as_slice() {
        band.start = from;
    }
    for (k, _) in state
        .kv
        .scan(Cf::Index, &band, Direction::Forward, HELD_LOOKUP_ENTRIES)?
    {
        let dk = DueKey::decode(&k).map_err(ApiError::store)?;
        if dk.seq == seq && due.contains(&dk.sink) {
            held.insert(dk.sink);
            if held.len() == due.len() {
                break;
            }
        }
    }
    Ok(held)
}

/// A hook: its envelope as stored and every delivery row it still has.
pub(crate) fn hook_view<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    ord: TenantOrd,
    seq: Seq,
    env: &Envelope,
) -> Result<Hook, ApiError> {
    let source = state
        .registry
        .load()
        .source_name(env.source)
        .map(str::to_owned);
    let rows = state.kv.scan(
        Cf::Deliveries,
        &deliveries_of_hook_range(ord, seq),
        Direction::Forward,
        usize::from(u16::MAX) + 1,
    )?;
    let mut decoded = Vec::with_capacity(rows.len());
    for (k, v) in rows {
        let dk = DeliveryKey::decode(&k).map_err(ApiError::store)?;
        let row = DeliveryRow::decode(&v).map_err(ApiError::store)?;
        decoded.push((dk.sink, row));
    }
    let due: Vec<SinkIx> = decoded
        .iter()
        .filter(|(_, r)| r.state == RowState::Due)
        .map(|(s, _)| *s)
        .collect();
    let held = held_sinks(
        state,
        ord,
        seq,
        env.source,
        source.as_deref(),
        env.received_at_ms,
        &due,
    )?;
    let mut deliveries = Vec::new();
    for (sink, row) in &decoded {
        deliveries.push(row_view(
            state,
            tenant,
            source.as_deref(),
            RowId::new(ord, seq, *sink),
            row,
            held.contains(sink),
        )?);
    }
    let headers: Vec<Header> = env.headers.iter().map(|(n, v)| header(n, v)).collect();
    let attempt_log = attempt_log_view(state, tenant, source.as_deref(), ord, seq, &decoded)?;
    // A quarantined hook has no rows yet: say why, or the operator sees a
    // hook that goes nowhere.
    let quarantined = match state.kv.get(Cf::Index, &quarantined_key(ord, seq))? {
        Some(v) => Some(
            QuarantinedValue::decode(&v)
                .map_err(ApiError::store)?
                .reason,
        ),
        None => None,
    };
    Ok(Hook {
        tenant: tenant.to_owned(),
        seq: seq.0,
        idempotency_key: uuid_text(&env.idempotency_key),
        source,
        received_at_ms: env.received_at_ms,
        received_at: rfc3339(env.received_at_ms),
        method: env.method.clone(),
        path: env.path.clone(),
        query: env.query.clone(),
        headers,
        body_base64: b64(&env.body),
        body_text: utf8(&env.body),
        dedupe_key: env.dedupe_key.as_deref().and_then(utf8),
        dedupe_key_base64: env.dedupe_key.as_deref().map(b64),
        deliveries,
        replay_of: env.replay_of.map(|s| s.0),
        quarantined,
        attempt_log,
    })
}

/// A header as the API shows it: its name, its value as text when it is
/// UTF-8, and base64.
fn header(name: &[u8], value: &[u8]) -> Header {
    Header {
        name: String::from_utf8_lossy(name).into_owned(),
        value: utf8(value),
        value_base64: b64(value),
    }
}

/// The attempt log of each row of hook `seq` that has one (docs/design.md
/// section 3, "The attempt log"): the newest `node.attempt_log.max_attempts`
/// of each, oldest first; `rows` are the hook's rows still in the store, a
/// logged row not among them was delivered.
fn attempt_log_view<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    source: Option<&str>,
    ord: TenantOrd,
    seq: Seq,
    rows: &[(SinkIx, DeliveryRow)],
) -> Result<Vec<RowAttempts>, ApiError> {
    let keep = state.config.load().node.attempt_log.max_attempts as usize;
    let logs = ankusa_queue::hook_attempts(&*state.kv, ord, seq, keep)?;
    Ok(logs
        .into_iter()
        .map(|(sink, entries)| {
            let row_state = rows
                .iter()
                .find(|(s, _)| *s == sink)
                .map_or("delivered", |(_, r)| match r.state {
                    RowState::Due => "due",
                    RowState::InFlight => "in_flight",
                    RowState::Member => "lane_member",
                    RowState::Dead => "dead",
                });
            RowAttempts {
                id: row_id_text(tenant, RowId::new(ord, seq, sink)),
                sink_index: sink.0,
                sink: state.sink_name(source, sink),
                state: row_state.to_owned(),
                attempts: entries
                    .into_iter()
                    .map(|(n, a)| attempt_view(n, a))
                    .collect(),
            }
        })
        .collect())
}

/// One attempt as the API shows it: the body as lossy text, and as base64
/// too when it is not UTF-8.
fn attempt_view(attempt: u32, a: AttemptRecord) -> Attempt {
    let (response_body, response_body_base64) = if a.body.is_empty() {
        (None, None)
    } else {
        match std::str::from_utf8(&a.body) {
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => (
                Some(String::from_utf8_lossy(&a.body).into_owned()),
                Some(b64(&a.body)),
            ),
        }
    };
    Attempt {
        attempt,
        at_ms: a.at_ms,
        at: rfc3339(a.at_ms),
        duration_ms: a.duration_ms,
        outcome: a.outcome,
        status: a.status,
        error: a.error,
        response_headers: a.headers.iter().map(|(n, v)| header(n, v)).collect(),
        response_body,
        response_body_base64,
        response_body_truncated: a.body_truncated,
    }
}

/// `GET /v1/tenants/{tenant}/hooks/{seq}`.
pub(crate) fn get_hook<K: Kv>(
    state: &AdminState<K>,
    tenant: &str,
    seq: Seq,
    q: Query,
) -> Result<Hook, ApiError> {
    q.finish()?;
    let ord = tenant_ord(&state.registry.load(), tenant)?;
    let env = read_envelope(&*state.kv, ord, seq)?.ok_or_else(|| {
        ApiError::not_found(format!(
            "tenant {tenant:?} has no hook {} (never stored, or removed by retention or a drop)",
            seq.0
        ))
    })?;
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
pub(crate) fn find_hook<K: Kv>(
    state: &AdminState<K>,
    key: &str,
    q: Query,
) -> Result<Hook, ApiError> {
    q.finish()?;
    let uuid = uuid::Uuid::parse_str(key)
        .map_err(|_| ApiError::bad_request(format!("{key:?} is not a UUID")))?;
    if uuid.get_version_num() != 7 {
        return Err(ApiError::bad_request(format!(
            "{key:?} is not an idempotency key of this relay (they are UUIDv7)"
        )));
    }
    let wanted = *uuid.as_bytes();
    let b = uuid.as_bytes();
    let ts = u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]);
    let windows = [
        (ts, ts.saturating_add(1), usize::MAX),
        (
            ts.saturating_sub(LOOKUP_SLACK_MS),
            ts.saturating_add(1),
            LOOKUP_SLACK_ENTRIES,
        ),
    ];
    for (from, until, cap) in windows {
        for (name, &ord) in &state.registry.load().tenants {
            let range = archive_time_range(ord, from, until);
            let entries =
                state
                    .kv
                    .scan(Cf::Archive, &range, Direction::Forward, cap.min(100_000))?;
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
    Err(ApiError::not_found(format!(
        "no hook with idempotency key {key} (never stored, or removed by retention or a drop)"
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use ankusa_engine::memory::MemoryKv;
    use ankusa_engine::{Batch, Durability, Kv};
    use ankusa_keys::meta::PauseTarget;
    use ankusa_keys::{DueKey, Envelope, Seq, SinkIx, TenantOrd};
    use ankusa_queue::{Hook, NewRow};

    use super::super::api::Query;
    use super::super::{AdminState, OPENAPI_JSON};
    use super::{get_hook, get_tenant};
    use crate::context::Context;

    const NOW: u64 = 1_700_000_000_000;

    fn commit(kv: &MemoryKv, b: Batch) {
        kv.write(b, Durability::Sync).unwrap();
    }

    /// The demo's store with hook `seq` of its source, one unordered row for
    /// sink 0, due at `due_ms`.
    fn ingest(kv: &MemoryKv, ord: TenantOrd, source: ankusa_keys::SourceId, seq: u64, due_ms: u64) {
        let env = Envelope {
            source,
            received_at_ms: due_ms,
            method: "POST".into(),
            path: "/hooks/demo".into(),
            query: None,
            headers: Vec::new(),
            body: b"{}".to_vec(),
            dedupe_key: None,
            idempotency_key: [seq as u8; 16],
            replay_of: None,
        };
        let mut b = Batch::new();
        let hook = Hook {
            tenant: ord,
            seq: Seq(seq),
            envelope: &env,
            dedupe_expires_at_ms: 0,
        };
        ankusa_queue::new_ops(
            &mut b,
            &hook,
            &[NewRow {
                sink: SinkIx(0),
                lane: None,
            }],
            due_ms,
        );
        commit(kv, b);
    }

    fn state() -> AdminState<MemoryKv> {
        let kv = MemoryKv::new();
        commit(&kv, ankusa_queue::init_store());
        let (b, registry) = ankusa_queue::register(&kv, ["default"], ["demo"]).unwrap();
        commit(&kv, b);
        let mut ctx = Context::new(
            Arc::new(kv),
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(ankusa_config::Config::default_demo()),
            registry,
        );
        ctx.clock = || NOW + 1_000;
        AdminState::new(Arc::new(ctx), Arc::default())
    }

    fn row_state<K: Kv>(s: &AdminState<K>, seq: u64) -> String {
        let h = get_hook(s, "default", Seq(seq), Query::parse(None).unwrap()).unwrap();
        h.deliveries[0].state.clone()
    }

    fn oldest<K: Kv>(s: &AdminState<K>) -> Option<u64> {
        get_tenant(s, "default", Query::parse(None).unwrap())
            .unwrap()
            .oldest_due_at_ms
    }

    /// Each counter field has its own field of the answer, named as the
    /// store names it (`bytes` is `pending_bytes`), and the answer has no
    /// other.
    #[test]
    fn every_counter_field_is_one_field_of_the_answer() {
        use crate::api_types::Counters;
        use ankusa_keys::CounterField;
        for (i, field) in CounterField::ALL.into_iter().enumerate() {
            let mut c = Counters::default();
            *super::counter_mut(&mut c, field) = i as i64 + 1;
            let v = serde_json::to_value(&c).unwrap();
            let name = match field {
                CounterField::Bytes => "pending_bytes",
                other => other.name(),
            };
            assert_eq!(v[name], serde_json::json!(i + 1), "{name}");
            let set = v.as_object().unwrap().values().filter(|n| **n != 0);
            assert_eq!(set.count(), 1, "{name}: {v}");
        }
        let fields = serde_json::to_value(Counters::default()).unwrap();
        assert_eq!(fields.as_object().unwrap().len(), CounterField::ALL.len());
    }

    /// A row held by a pause (the held band of ?D) is not the tenant's oldest
    /// due row, and the hook view reports it `held`, a state the OpenAPI
    /// document lists; so is a due row of a sink the runtime control pauses.
    #[test]
    fn held_rows_are_not_due_and_show_as_held() {
        let s = state();
        let kv = &*s.kv;
        let ord = s.registry.load().tenants["default"];
        let src = s.registry.load().sources["demo"];
        ingest(kv, ord, src, 1, NOW);
        ingest(kv, ord, src, 2, NOW + 5);
        assert_eq!(oldest(&s), Some(NOW));
        assert_eq!(
            (row_state(&s, 1), row_state(&s, 2)),
            ("due".into(), "due".into())
        );
        let due = |seq: u64, due_ms: u64| DueKey {
            tenant: ord,
            due_ms,
            seq: Seq(seq),
            sink: SinkIx(0),
        };
        commit(kv, ankusa_queue::hold(kv, due(1, NOW)).unwrap());
        assert_eq!(oldest(&s), Some(NOW + 5));
        assert_eq!(
            (row_state(&s, 1), row_state(&s, 2)),
            ("held".into(), "due".into())
        );
        commit(kv, ankusa_queue::hold(kv, due(2, NOW + 5)).unwrap());
        assert_eq!(oldest(&s), None);
        assert_eq!(row_state(&s, 2), "held");
        // Resumed: due again.
        commit(
            kv,
            ankusa_queue::unhold(kv, ord, |_, _| false, None, 10)
                .unwrap()
                .batch,
        );
        assert_eq!(oldest(&s), Some(NOW));
        assert_eq!(
            (row_state(&s, 1), row_state(&s, 2)),
            ("due".into(), "due".into())
        );
        // A runtime pause of the sink: its due rows wait, not yet moved.
        commit(
            kv,
            ankusa_queue::set_pause(PauseTarget::Sink(src, SinkIx(0)), NOW, "maintenance"),
        );
        assert_eq!(
            (row_state(&s, 1), row_state(&s, 2)),
            ("held".into(), "held".into())
        );
        let doc: serde_json::Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        let states = &doc["components"]["schemas"]["Delivery"]["properties"]["state"]["enum"];
        assert!(
            states.as_array().unwrap().iter().any(|v| v == "held"),
            "{states}"
        );
    }

    /// The attempt log of a hook's rows: a delivered row (gone from
    /// `deliveries`) keeps its attempts, shown `delivered`; a row still due
    /// shows its state; a body that is not UTF-8 is text (lossy) and base64.
    #[test]
    fn the_hook_view_lists_each_rows_attempts_a_delivered_one_too() {
        use ankusa_keys::AttemptRecord;
        use ankusa_queue::{LogAttempt, RowId};
        let s = state();
        let kv = &*s.kv;
        let ord = s.registry.load().tenants["default"];
        let src = s.registry.load().sources["demo"];
        ingest(kv, ord, src, 1, NOW);
        ingest(kv, ord, src, 2, NOW);
        let rec = |at_ms: u64, status: u16, outcome: &str, body: &[u8]| AttemptRecord {
            at_ms,
            duration_ms: 15,
            outcome: outcome.into(),
            status: Some(status),
            error: (status >= 400).then(|| format!("HTTP {status}")),
            headers: vec![(b"x-request-id".to_vec(), b"abc".to_vec())],
            body: body.to_vec(),
            body_truncated: status == 503,
        };
        let due = |seq: u64, due_ms: u64| DueKey {
            tenant: ord,
            due_ms,
            seq: Seq(seq),
            sink: SinkIx(0),
        };
        let row = |seq: u64| RowId::new(ord, Seq(seq), SinkIx(0));
        for seq in [1, 2] {
            commit(kv, ankusa_queue::claim(kv, due(seq, NOW), NOW).unwrap());
            let r = rec(NOW, 503, "retry", b"\xffbusy");
            commit(
                kv,
                ankusa_queue::retry_logged(
                    kv,
                    row(seq),
                    NOW + 10,
                    "HTTP 503",
                    NOW,
                    Some(LogAttempt {
                        record: &r,
                        keep: 20,
                    }),
                )
                .unwrap(),
            );
        }
        commit(
            kv,
            ankusa_queue::claim(kv, due(1, NOW + 10), NOW + 10).unwrap(),
        );
        let r = rec(NOW + 10, 200, "delivered", b"ok");
        commit(
            kv,
            ankusa_queue::delivered_logged(
                kv,
                row(1),
                NOW + 10,
                Some(LogAttempt {
                    record: &r,
                    keep: 20,
                }),
            )
            .unwrap(),
        );
        let h = get_hook(&s, "default", Seq(1), Query::parse(None).unwrap()).unwrap();
        assert!(h.deliveries.is_empty(), "the delivered row is gone");
        assert_eq!(h.attempt_log.len(), 1);
        let l = &h.attempt_log[0];
        assert_eq!(
            (
                l.id.as_str(),
                l.sink_index,
                l.sink.as_deref(),
                l.state.as_str()
            ),
            ("default.1.0", 0, Some("deliveries"), "delivered")
        );
        let got: Vec<_> = l
            .attempts
            .iter()
            .map(|a| {
                (
                    a.attempt,
                    a.at_ms,
                    a.duration_ms,
                    a.outcome.as_str(),
                    a.status,
                    a.error.as_deref(),
                    a.response_body.as_deref(),
                    a.response_body_base64.as_deref(),
                    a.response_body_truncated,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    1,
                    NOW,
                    15,
                    "retry",
                    Some(503),
                    Some("HTTP 503"),
                    Some("\u{fffd}busy"),
                    Some("/2J1c3k="),
                    true
                ),
                (
                    2,
                    NOW + 10,
                    15,
                    "delivered",
                    Some(200),
                    None,
                    Some("ok"),
                    None,
                    false
                ),
            ]
        );
        assert_eq!(l.attempts[0].at.as_deref(), Some("2023-11-14T22:13:20Z"));
        assert_eq!(l.attempts[0].response_headers[0].name, "x-request-id");
        assert_eq!(
            l.attempts[0].response_headers[0].value.as_deref(),
            Some("abc")
        );
        let h = get_hook(&s, "default", Seq(2), Query::parse(None).unwrap()).unwrap();
        assert_eq!(
            (
                h.attempt_log.len(),
                h.attempt_log[0].state.as_str(),
                h.attempt_log[0].attempts.len()
            ),
            (1, "due", 1)
        );
    }
}
