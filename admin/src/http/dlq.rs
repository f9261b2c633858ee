//! The dead-letter queue through the admin API (docs/design.md section 5,
//! "Admin API"; the ?X family of section 3): list with filters, show, revive
//! one row, drop one row, and the bounded step a revive or drop job takes.
//!
//! Every mutation is one batch built by a pure builder of `queue`
//! (`queue::revive`, ADR 0004 section 4.8: a laned row re-enters as a member
//! plus its ?P marker and waits behind the lane's current head;
//! `queue::drop_dead`), written `Durability::Sync` under the admin write lock,
//! then the pipeline is woken.

use std::collections::HashMap;

use ankusa_engine::{Batch, Cf, Direction, KeyRange, Kv, Read};
use ankusa_keys::{
    DeadLetterKey, DeadLetterValue, DeliveryRow, Envelope, Family, Seq, SourceId, TenantOrd,
    dead_letter_key, delivery_key, family_range, hook_key, tenant_range,
};
use ankusa_queue::{QueueError, RowId};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::AdminState;
use super::api::{
    ApiError, CursorKind, Query, decode_cursor, encode_cursor, parse_row_id, rfc3339, row_id_text,
    tenant_ord, utf8, uuid_text,
};
use super::views::sink_name;

/// Most ?X entries one list request examines: a page may hold fewer than
/// `limit` items (filters that match little) while `next_cursor` is set.
pub const LIST_SCAN_BUDGET: usize = 10_000;

/// Which dead letters a list or a job takes. Every field narrows; all names
/// are the configuration's. Stored in a job's state as it was given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DlqFilter {
    /// Tenant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Source name (the hook's source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Sink entry name (of the hook's source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<String>,
    /// The dead-letter reason starts with this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// dead_at_ms at or after this, unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// dead_at_ms before this, unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
}

impl DlqFilter {
    /// From the query parameters `tenant`, `source`, `sink`, `reason`,
    /// `since`, `until` (unix ms or RFC 3339).
    ///
    /// # Errors
    /// 400 for a malformed time.
    pub fn from_query(q: &mut Query) -> Result<DlqFilter, ApiError> {
        Ok(DlqFilter {
            tenant: q.take("tenant"),
            source: q.take("source"),
            sink: q.take("sink"),
            reason: q.take("reason"),
            since_ms: q.time_ms("since")?,
            until_ms: q.time_ms("until")?,
        })
    }

    /// Checks the filter against the store and the configuration.
    ///
    /// # Errors
    /// 400 for an inverted time range; 404 for a tenant, source or sink name
    /// nobody has.
    pub fn check<K: Kv>(&self, state: &AdminState<K>) -> Result<(), ApiError> {
        if let (Some(s), Some(u)) = (self.since_ms, self.until_ms)
            && s >= u
        {
            return Err(ApiError::bad_request(format!(
                "the time range is empty or inverted: since {s} is not before until {u}"
            )));
        }
        if let Some(t) = &self.tenant {
            tenant_ord(&state.registry, t)?;
        }
        if let Some(s) = &self.source
            && !state.registry.sources.contains_key(s)
        {
            return Err(ApiError::not_found(format!("no source {s:?}")));
        }
        if let Some(name) = &self.sink {
            let sources: Vec<&ankusa_config::Source> = match &self.source {
                Some(s) => state.config.source(s).into_iter().collect(),
                None => state.config.sources.iter().collect(),
            };
            if !sources
                .iter()
                .any(|s| s.sinks.iter().any(|e| &e.name == name))
            {
                return Err(ApiError::not_found(format!(
                    "no sink {name:?} in {}",
                    self.source
                        .as_deref()
                        .map_or("any source".to_owned(), |s| format!("source {s:?}"))
                )));
            }
        }
        Ok(())
    }

    /// The ?X range the filter covers.
    fn range<K: Kv>(&self, state: &AdminState<K>) -> Result<KeyRange, ApiError> {
        Ok(match &self.tenant {
            Some(t) => tenant_range(Family::DeadLetter, tenant_ord(&state.registry, t)?),
            None => family_range(Family::DeadLetter),
        })
    }

    fn needs_envelope(&self) -> bool {
        self.source.is_some() || self.sink.is_some()
    }
}

/// One ?X entry, decoded, with its hook's source when it was read.
pub(crate) struct Dead {
    pub row: RowId,
    pub value: DeadLetterValue,
    envelope: Option<Envelope>,
}

/// Reads envelopes once per hook.
#[derive(Default)]
struct Envelopes {
    seen: HashMap<(TenantOrd, Seq), Option<Envelope>>,
}

impl Envelopes {
    fn get(&mut self, read: &impl Read, row: RowId) -> Result<Option<Envelope>, ApiError> {
        if let Some(e) = self.seen.get(&(row.tenant, row.seq)) {
            return Ok(e.clone());
        }
        let env = match read.get(Cf::Hooks, &hook_key(row.tenant, row.seq))? {
            // An undecodable envelope is shown as missing, not a failure: the
            // operator can still drop the row.
            Some(raw) => Envelope::decode(&raw).ok(),
            None => None,
        };
        self.seen.insert((row.tenant, row.seq), env.clone());
        Ok(env)
    }
}

/// What [`scan`] found: the matching entries, and where the next scan
/// resumes (`None`: the range is done).
pub(crate) struct Scanned {
    pub matched: Vec<Dead>,
    pub examined: usize,
    pub resume: Option<Vec<u8>>,
}

/// Examines up to `budget` ?X entries of `filter`'s range from `from` (a key;
/// empty: the start), stopping early once `want` match.
pub(crate) fn scan<K: Kv>(
    state: &AdminState<K>,
    filter: &DlqFilter,
    from: &[u8],
    budget: usize,
    want: usize,
) -> Result<Scanned, ApiError> {
    let mut range = filter.range(state)?;
    if from > range.start.as_slice() {
        if from >= range.end.as_slice() {
            return Ok(Scanned {
                matched: Vec::new(),
                examined: 0,
                resume: None,
            });
        }
        range.start = from.to_vec();
    }
    let source_id: Option<SourceId> = filter
        .source
        .as_ref()
        .and_then(|s| state.registry.sources.get(s).copied());
    let mut envelopes = Envelopes::default();
    let mut out = Scanned {
        matched: Vec::new(),
        examined: 0,
        resume: None,
    };
    const PAGE: usize = 512;
    'pages: loop {
        let page = state.kv.scan(
            Cf::Index,
            &range,
            Direction::Forward,
            PAGE.min(budget - out.examined).max(1),
        )?;
        let full = page.len() == PAGE.min(budget - out.examined).max(1);
        for (k, v) in &page {
            out.examined += 1;
            let mut next = k.to_vec();
            next.push(0);
            let key = DeadLetterKey::decode(k).map_err(ApiError::store)?;
            let value = DeadLetterValue::decode(v).map_err(ApiError::store)?;
            let row = RowId::new(key.tenant, key.seq, key.sink);
            let mut ok = filter
                .reason
                .as_ref()
                .is_none_or(|r| value.reason.starts_with(r.as_str()))
                && filter.since_ms.is_none_or(|s| value.dead_at_ms >= s)
                && filter.until_ms.is_none_or(|u| value.dead_at_ms < u);
            let mut envelope = None;
            if ok && filter.needs_envelope() {
                envelope = envelopes.get(&*state.kv, row)?;
                let src = envelope.as_ref().map(|e| e.source);
                if source_id.is_some() && src != source_id {
                    ok = false;
                }
                if let Some(want_sink) = &filter.sink {
                    let src_name = src.and_then(|s| state.registry.source_name(s));
                    if sink_name(state, src_name, row.sink).as_deref() != Some(want_sink.as_str()) {
                        ok = false;
                    }
                }
            }
            if ok {
                out.matched.push(Dead {
                    row,
                    value,
                    envelope,
                });
            }
            if out.matched.len() >= want || out.examined >= budget {
                out.resume = Some(next);
                break 'pages;
            }
            range.start = next;
        }
        if !full {
            break;
        }
    }
    // A resume key at the end of the range is "done".
    if out
        .resume
        .as_deref()
        .is_some_and(|r| r >= range.end.as_slice())
    {
        out.resume = None;
    }
    Ok(out)
}

/// A dead letter as JSON.
fn dead_view<K: Kv>(
    state: &AdminState<K>,
    d: &Dead,
    envelopes: &mut Envelopes,
) -> Result<Value, ApiError> {
    let tenant = state
        .registry
        .tenant_name(d.row.tenant)
        .unwrap_or("?")
        .to_owned();
    let env = match &d.envelope {
        Some(e) => Some(e.clone()),
        None => envelopes.get(&*state.kv, d.row)?,
    };
    let source = env
        .as_ref()
        .and_then(|e| state.registry.source_name(e.source))
        .map(str::to_owned);
    let row = match state.kv.get(
        Cf::Deliveries,
        &delivery_key(d.row.tenant, d.row.seq, d.row.sink),
    )? {
        Some(raw) => DeliveryRow::decode(&raw).ok(),
        None => None,
    };
    Ok(json!({
        "id": row_id_text(&tenant, d.row),
        "tenant": tenant,
        "seq": d.row.seq.0,
        "sink_index": d.row.sink.0,
        "sink": sink_name(state, source.as_deref(), d.row.sink),
        "source": source,
        "idempotency_key": env.as_ref().map(|e| uuid_text(&e.idempotency_key)),
        "dead_at_ms": d.value.dead_at_ms,
        "dead_at": rfc3339(d.value.dead_at_ms),
        "reason": d.value.reason,
        "attempts": row.as_ref().map(|r| r.attempts),
        "last_error": row.as_ref().and_then(|r| r.last_error.clone()),
        "size_bytes": row.as_ref().map(|r| r.size),
        "ordering_key": row.as_ref().and_then(|r| r.ordering_key.as_deref().map(utf8)),
    }))
}

/// `GET /v1/dead-letters`: filters `tenant`, `source`, `sink`, `reason`
/// (prefix), `since`/`until` on dead_at; `limit`, `cursor`. In ?X key order
/// (tenant, seq, sink).
pub(crate) fn list<K: Kv>(state: &AdminState<K>, mut q: Query) -> Result<Value, ApiError> {
    let limit = q.limit()?;
    let cursor = q
        .take("cursor")
        .map(|c| decode_cursor(CursorKind::DeadLetters, &c))
        .transpose()?;
    let filter = DlqFilter::from_query(&mut q)?;
    q.finish()?;
    filter.check(state)?;
    let found = scan(
        state,
        &filter,
        cursor.as_deref().unwrap_or(&[]),
        LIST_SCAN_BUDGET,
        limit,
    )?;
    let mut envelopes = Envelopes::default();
    let items = found
        .matched
        .iter()
        .map(|d| dead_view(state, d, &mut envelopes))
        .collect::<Result<Vec<_>, _>>()?;
    let next = found
        .resume
        .map(|k| encode_cursor(CursorKind::DeadLetters, &k));
    Ok(json!({ "items": items, "next_cursor": next }))
}

fn one<K: Kv>(
    state: &AdminState<K>,
    id: &str,
) -> Result<(RowId, Option<DeadLetterValue>), ApiError> {
    let row = parse_row_id(&state.registry, id)?;
    let value = state
        .kv
        .get(Cf::Index, &dead_letter_key(row.tenant, row.seq, row.sink))?;
    Ok((
        row,
        value
            .map(|v| DeadLetterValue::decode(&v))
            .transpose()
            .map_err(ApiError::store)?,
    ))
}

/// A dead row whose source, or sink entry, is no longer in the
/// configuration would only be dead-lettered again at once (and lose its
/// reason): refused with 409, nothing changed. A row whose envelope is gone
/// is left to `queue::revive`, which refuses it.
fn refuse_unconfigured<K: Kv>(
    state: &AdminState<K>,
    row: ankusa_queue::RowId,
    id: &str,
) -> Result<(), ApiError> {
    let Some(raw) = state.kv.get(Cf::Hooks, &hook_key(row.tenant, row.seq))? else {
        return Ok(());
    };
    let Ok(env) = Envelope::decode(&raw) else {
        return Ok(());
    };
    let name = state.registry.source_name(env.source);
    let configured = name
        .and_then(|n| state.config.source(n))
        .is_some_and(|s| s.sinks.iter().any(|e| e.index == row.sink.0));
    if configured {
        return Ok(());
    }
    Err(ApiError::conflict(format!(
        "row {id} cannot be revived: its {} is no longer in the configuration (it would be dead-lettered again at once)",
        match name.and_then(|n| state.config.source(n)) {
            Some(_) => "sink entry".to_owned(),
            None => format!("source {:?}", name.unwrap_or("?")),
        }
    )))
}

fn not_dead(id: &str) -> ApiError {
    ApiError::conflict(format!("row {id} is not in the dead-letter queue"))
}

/// `GET /v1/dead-letters/{id}`.
pub(crate) fn get<K: Kv>(state: &AdminState<K>, id: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let (row, value) = one(state, id)?;
    let value = value
        .ok_or_else(|| ApiError::not_found(format!("row {id} is not in the dead-letter queue")))?;
    dead_view(
        state,
        &Dead {
            row,
            value,
            envelope: None,
        },
        &mut Envelopes::default(),
    )
}

/// Writes an admin batch `Sync` (docs/design.md section 5, "Admin API").
pub(crate) fn commit<K: Kv>(state: &AdminState<K>, batch: Batch) -> Result<(), ApiError> {
    state.kv.write(batch, ankusa_engine::Durability::Sync)?;
    Ok(())
}

/// A 409 for a row of a tenant being purged (its rows are the purge's).
fn refuse_purging<K: Kv>(state: &AdminState<K>, row: RowId) -> Result<(), ApiError> {
    if super::steps::purging(state, row.tenant)? {
        let tenant = state.registry.tenant_name(row.tenant).unwrap_or("?");
        return Err(ApiError::conflict(format!(
            "tenant {tenant:?} is being purged"
        )));
    }
    Ok(())
}

/// `POST /v1/dead-letters/{id}/revive`: `queue::revive` of one row (ADR 0004
/// section 4.8). A row not in the DLQ is a 409 and nothing changes.
pub(crate) fn revive<K: Kv>(state: &AdminState<K>, id: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let row = parse_row_id(&state.registry, id)?;
    let _writes = state.writes.blocking_lock();
    refuse_purging(state, row)?;
    refuse_unconfigured(state, row, id)?;
    let batch = match ankusa_queue::revive(&*state.kv, row, (state.clock)()) {
        Ok(b) => b,
        Err(QueueError::NotInDlq { .. }) => return Err(not_dead(id)),
        Err(e) => return Err(e.into()),
    };
    commit(state, batch)?;
    (state.wake)();
    let laned = state
        .kv
        .get(Cf::Deliveries, &delivery_key(row.tenant, row.seq, row.sink))?
        .and_then(|raw| DeliveryRow::decode(&raw).ok())
        .is_some_and(|r| r.lane.is_some());
    Ok(json!({ "id": id, "revived": true, "state": if laned { "lane_member" } else { "due" } }))
}

/// `DELETE /v1/dead-letters/{id}`: `queue::drop_dead` of one row. A row not
/// in the DLQ is a 409 and nothing changes.
pub(crate) fn drop_one<K: Kv>(
    state: &AdminState<K>,
    id: &str,
    q: Query,
) -> Result<Value, ApiError> {
    q.finish()?;
    let row = parse_row_id(&state.registry, id)?;
    let _writes = state.writes.blocking_lock();
    refuse_purging(state, row)?;
    let batch = match ankusa_queue::drop_dead(&*state.kv, &[row]) {
        Ok(b) => b,
        Err(QueueError::NotInDlq { .. }) => return Err(not_dead(id)),
        Err(e) => return Err(e.into()),
    };
    commit(state, batch)?;
    Ok(json!({ "id": id, "dropped": true }))
}
