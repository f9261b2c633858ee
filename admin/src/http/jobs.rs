//! The admin jobs through the API (docs/design.md section 5, "Admin API"):
//! `POST /v1/jobs` (the request parsed here, the job checked, created and
//! run by [`crate::jobs`]), `GET /v1/jobs[/{id}]`, `POST
//! /v1/jobs/{id}/cancel`.

use std::sync::Arc;

use ankusa_engine::{Cf, Direction, KeyRange, Kv};
use ankusa_keys::meta::{job_key, jobs_range};
use serde_json::Value;

use super::AdminState;
use super::api::{
    ApiError, CursorKind, Query, decode_cursor, encode_cursor, parse_time_ms, rfc3339,
};
use crate::api_types::{self, Filter, JobList, JobRequest, Page};
use crate::dlq::DlqFilter;
use crate::jobs::{self, Job, decode, read_job};

/// A job as the API shows it (no version, no cursor).
pub fn job_view(job: &Job) -> api_types::Job {
    api_types::Job {
        id: job.id,
        kind: job.kind,
        filter: filter_view(&job.filter),
        state: job.state,
        created_at_ms: job.created_at_ms,
        created_at: rfc3339(job.created_at_ms),
        updated_at_ms: job.updated_at_ms,
        finished_at_ms: job.finished_at_ms,
        examined: job.examined,
        done: job.done,
        total: job.total,
        error: job.error.clone(),
        skipped: job.skipped,
        sinks: job.sinks.clone(),
        phase: job.phase.clone(),
    }
}

fn filter_view(f: &DlqFilter) -> Filter {
    Filter {
        tenant: f.tenant.clone(),
        source: f.source.clone(),
        sink: f.sink.clone(),
        reason: f.reason.clone(),
        since_ms: f.since_ms,
        until_ms: f.until_ms,
    }
}

fn time_of(name: &str, v: Option<Value>) -> Result<Option<u64>, ApiError> {
    let bad = |m: String| ApiError::bad_request(format!("filter.{name}: {m}"));
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad(format!("{n} is not unix milliseconds"))),
        Some(Value::String(s)) => parse_time_ms(&s).map(Some).map_err(bad),
        Some(other) => Err(bad(format!(
            "{other} is neither unix milliseconds nor an RFC 3339 string"
        ))),
    }
}

/// `POST /v1/jobs`: body `{"kind", "filter": {tenant, source, sink, reason,
/// since, until}, "sinks": [...]}` (which fields a kind takes: each kind's `plan` in [`crate::jobs`]);
/// answers 202 with the job, whose steps then run in the background.
pub(crate) fn create<K: Kv>(
    state: &Arc<AdminState<K>>,
    body: &[u8],
    q: Query,
) -> Result<api_types::Job, ApiError> {
    q.finish()?;
    let req: JobRequest = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a job request: {e}")))?;
    let f = req.filter;
    // An empty field is refused, never read as "no filter": a script passing
    // an unset variable must not turn a drop of one tenant's dead letters
    // into a drop of every tenant's (found by the break-it pass).
    for (name, value) in [
        ("tenant", &f.tenant),
        ("source", &f.source),
        ("sink", &f.sink),
        ("reason", &f.reason),
    ] {
        if value.as_deref() == Some("") {
            return Err(ApiError::bad_request(format!(
                "filter.{name} is empty: leave it out to mean every {name}, or name one"
            )));
        }
    }
    let filter = DlqFilter {
        tenant: f.tenant,
        source: f.source,
        sink: f.sink,
        reason: f.reason,
        since_ms: time_of("since", f.since)?,
        until_ms: time_of("until", f.until)?,
    };
    let job = jobs::create(&state.ctx, req.kind, filter, req.sinks)?;
    Ok(job_view(&job))
}

/// `GET /v1/jobs`: newest first.
pub(crate) fn list<K: Kv>(state: &AdminState<K>, mut q: Query) -> Result<JobList, ApiError> {
    let limit = q.limit()?;
    let cursor = q
        .take("cursor")
        .map(|c| decode_cursor(CursorKind::Jobs, &c))
        .transpose()?;
    q.finish()?;
    let mut range: KeyRange = jobs_range();
    if let Some(c) = cursor {
        let id: [u8; 8] = c
            .as_slice()
            .try_into()
            .map_err(|_| ApiError::bad_request("cursor is not valid here: wrong length"))?;
        let mut end = job_key(u64::from_be_bytes(id));
        end.push(0);
        if end.as_slice() < range.end.as_slice() {
            range.end = end;
        }
    }
    let entries = state
        .kv
        .scan(Cf::Meta, &range, Direction::Reverse, limit + 1)?;
    let mut items = Vec::new();
    let mut next = None;
    for (i, (_, v)) in entries.iter().enumerate() {
        let job = decode(v)?;
        if i == limit {
            next = Some(encode_cursor(CursorKind::Jobs, &job.id.to_be_bytes()));
            break;
        }
        items.push(job_view(&job));
    }
    Ok(Page {
        items,
        next_cursor: next,
    })
}

/// A job id from a path segment.
///
/// # Errors
/// 400 when it is not a number.
pub fn parse_id(text: &str) -> Result<u64, ApiError> {
    super::api::canonical(text)
        .ok_or_else(|| ApiError::bad_request(format!("job id {text:?} is not a number")))
}

/// `GET /v1/jobs/{id}`.
pub(crate) fn get<K: Kv>(
    state: &AdminState<K>,
    id: &str,
    q: Query,
) -> Result<api_types::Job, ApiError> {
    q.finish()?;
    let id = parse_id(id)?;
    let job =
        read_job(&*state.kv, id)?.ok_or_else(|| ApiError::not_found(format!("no job {id}")))?;
    Ok(job_view(&job))
}

/// `POST /v1/jobs/{id}/cancel`: a running job stops before its next step (a
/// purge lifts its tenant's purge mark, a source's retirement ends); a job no
/// longer running is a 409.
pub(crate) fn cancel<K: Kv>(
    state: &AdminState<K>,
    id: &str,
    q: Query,
) -> Result<api_types::Job, ApiError> {
    q.finish()?;
    let id = parse_id(id)?;
    let job = jobs::cancel(state, id)?;
    Ok(job_view(&job))
}
