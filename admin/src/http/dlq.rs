//! The dead-letter queue through the admin API (docs/design.md section 5,
//! "Admin API"; the ?X family of section 3): list with filters, show, revive
//! one row, drop one row. What a filter takes and the mutations are the
//! domain's ([`crate::dlq`]).

use ankusa_engine::{Cf, Kv};
use ankusa_keys::{DeadLetterValue, DeliveryRow, dead_letter_key, delivery_key};
use ankusa_queue::RowId;

use super::AdminState;
use super::api::{
    ApiError, CursorKind, Query, decode_cursor, encode_cursor, parse_row_id, rfc3339, row_id_text,
    utf8, uuid_text,
};
use crate::api_types::{DeadLetter, DeadLetterList, Dropped, Page, Revived};
use crate::dlq::{self, Dead, DlqFilter, Envelopes, scan};

/// Most ?X entries one list request examines: a page may hold fewer than
/// `limit` items (filters that match little) while `next_cursor` is set.
pub const LIST_SCAN_BUDGET: usize = 10_000;

/// A filter from the query parameters `tenant`, `source`, `sink`, `reason`,
/// `since`, `until` (unix ms or RFC 3339).
///
/// # Errors
/// 400 for a malformed time.
pub fn filter_from_query(q: &mut Query) -> Result<DlqFilter, ApiError> {
    Ok(DlqFilter {
        tenant: q.take("tenant"),
        source: q.take("source"),
        sink: q.take("sink"),
        reason: q.take("reason"),
        since_ms: q.time_ms("since")?,
        until_ms: q.time_ms("until")?,
    })
}

/// A dead letter as the API shows it.
fn dead_view<K: Kv>(
    state: &AdminState<K>,
    d: &Dead,
    envelopes: &mut Envelopes,
) -> Result<DeadLetter, ApiError> {
    let tenant = state
        .registry
        .load()
        .tenant_name(d.row.tenant)
        .unwrap_or("?")
        .to_owned();
    let env = match &d.envelope {
        Some(e) => Some(e.clone()),
        None => envelopes.get(&*state.kv, d.row)?,
    };
    let source = env.as_ref().and_then(|e| {
        state
            .registry
            .load()
            .source_name(e.source)
            .map(str::to_owned)
    });
    let row = match state.kv.get(
        Cf::Deliveries,
        &delivery_key(d.row.tenant, d.row.seq, d.row.sink),
    )? {
        Some(raw) => DeliveryRow::decode(&raw).ok(),
        None => None,
    };
    // One ?H read for a laned row: whether it holds its lane.
    let holds_lane = match row.as_ref().and_then(|r| r.lane) {
        Some(lane) => {
            ankusa_queue::lanes::holds_lane(&*state.kv, d.row, lane).map_err(ApiError::store)?
        }
        None => false,
    };
    Ok(DeadLetter {
        holds_lane,
        id: row_id_text(&tenant, d.row),
        seq: d.row.seq.0,
        sink_index: d.row.sink.0,
        sink: state.sink_name(source.as_deref(), d.row.sink),
        idempotency_key: env.as_ref().map(|e| uuid_text(&e.idempotency_key)),
        dead_at_ms: d.value.dead_at_ms,
        dead_at: rfc3339(d.value.dead_at_ms),
        reason: d.value.reason.clone(),
        attempts: row.as_ref().map(|r| r.attempts),
        last_error: row.as_ref().and_then(|r| r.last_error.clone()),
        size_bytes: row.as_ref().map(|r| r.size),
        ordering_key: row
            .as_ref()
            .and_then(|r| r.ordering_key.as_deref().and_then(utf8)),
        tenant,
        source,
    })
}

/// `GET /v1/dead-letters`: filters `tenant`, `source`, `sink`, `reason`
/// (prefix), `since`/`until` on dead_at; `limit`, `cursor`. In ?X key order
/// (tenant, seq, sink).
pub(crate) fn list<K: Kv>(state: &AdminState<K>, mut q: Query) -> Result<DeadLetterList, ApiError> {
    let limit = q.limit()?;
    let cursor = q
        .take("cursor")
        .map(|c| decode_cursor(CursorKind::DeadLetters, &c))
        .transpose()?;
    let filter = filter_from_query(&mut q)?;
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
    Ok(Page {
        items,
        next_cursor: next,
    })
}

fn one<K: Kv>(
    state: &AdminState<K>,
    id: &str,
) -> Result<(RowId, Option<DeadLetterValue>), ApiError> {
    let row = parse_row_id(&state.registry.load(), id)?;
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

/// `GET /v1/dead-letters/{id}`.
pub(crate) fn get<K: Kv>(
    state: &AdminState<K>,
    id: &str,
    q: Query,
) -> Result<DeadLetter, ApiError> {
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

/// `POST /v1/dead-letters/{id}/revive`: `queue::revive` of one row (ADR 0004
/// section 4.8). A row not in the DLQ is a 409 and nothing changes.
pub(crate) fn revive<K: Kv>(
    state: &AdminState<K>,
    id: &str,
    q: Query,
) -> Result<Revived, ApiError> {
    q.finish()?;
    let row = parse_row_id(&state.registry.load(), id)?;
    let at = dlq::revive(state, row, id)?;
    Ok(Revived {
        id: id.to_owned(),
        revived: true,
        state: at.to_owned(),
    })
}

/// `DELETE /v1/dead-letters/{id}`: `queue::drop_dead` of one row. A row not
/// in the DLQ is a 409 and nothing changes.
pub(crate) fn drop_one<K: Kv>(
    state: &AdminState<K>,
    id: &str,
    q: Query,
) -> Result<Dropped, ApiError> {
    q.finish()?;
    let row = parse_row_id(&state.registry.load(), id)?;
    dlq::drop_one(state, row, id)?;
    Ok(Dropped {
        id: id.to_owned(),
        dropped: true,
    })
}
