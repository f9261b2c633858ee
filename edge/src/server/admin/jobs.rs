//! Admin jobs (docs/design.md section 5, "Admin API"): a DLQ revive or drop by
//! filter, run in bounded steps by a task of the admin listener.
//!
//! # Durability: a step is one batch
//! A job's state is versioned JSON in cf `meta` under `keys::meta::job_key`.
//! Each step examines at most [`JOB_STEP_ENTRIES`] ?X entries from the job's
//! cursor, builds the revives (`queue::revive`) or the drop
//! (`queue::drop_dead`) of the ones its filter matches, and puts the job's
//! advanced cursor and counts IN THE SAME BATCH, written `Sync` under the
//! admin write lock. A SIGKILL between two steps loses nothing and repeats
//! nothing: the store holds either the rows moved and the cursor past them, or
//! neither. `serve` resumes every `running` job at start
//! ([`resume`]). The cursor also keeps a revived row that dies again from
//! being revived twice by the same job (its ?X key is behind the cursor).
//!
//! # States
//! `running` -> `done` (the range is exhausted), `cancelled` (`POST
//! /v1/jobs/{id}/cancel`; the step in progress, if any, completes first: both
//! take the write lock) or `failed` (a store error, in `error`).

use std::sync::Arc;

use ankusa_engine::{Batch, Cf, Direction, KeyRange, Kv, Read, scan_pages};
use ankusa_keys::meta::{job_key, jobs_range};
use ankusa_keys::{CounterField, TenantOrd, counter_key};
use ankusa_queue::QueueError;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::AdminState;
use super::api::{ApiError, CursorKind, Query, decode_cursor, encode_cursor, parse_time_ms, rfc3339, tenant_ord};
use super::dlq::{self, DlqFilter};

/// Most ?X entries one step of a job examines (and so the most rows one step's
/// batch moves).
pub const JOB_STEP_ENTRIES: usize = 256;
/// The pause between two steps of a job: each step is a `Sync` write under
/// the admin write lock, and the pause leaves the store's write path and the
/// lock to ingest, the pipeline and other admin requests (a 10,000-row job
/// takes 40 steps, so at least 0.8 s).
pub const JOB_STEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);
/// The version of the job state this binary writes; another is refused.
const JOB_VERSION: u8 = 1;

/// What a job does to the dead letters its filter matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// `queue::revive` each.
    Revive,
    /// `queue::drop_dead` each.
    Drop,
}

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Steps are being taken (or will be, after a restart).
    Running,
    /// Every entry of its range was examined.
    Done,
    /// An operator cancelled it; what earlier steps did stays done.
    Cancelled,
    /// A store error stopped it (`error`).
    Failed,
}

/// A job's state as stored (versioned JSON, `v`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    /// [`JOB_VERSION`].
    pub v: u8,
    /// The job's id (its meta key).
    pub id: u64,
    /// Revive or drop.
    pub kind: JobKind,
    /// Which dead letters.
    pub filter: DlqFilter,
    /// Where it is.
    pub state: JobState,
    /// Unix ms.
    pub created_at_ms: u64,
    /// Unix ms of its last step or change.
    pub updated_at_ms: u64,
    /// Unix ms it left `running`.
    pub finished_at_ms: Option<u64>,
    /// The ?X key its next step resumes at (base64url); `None` at the start
    /// and once done.
    pub cursor: Option<String>,
    /// ?X entries examined so far.
    pub examined: u64,
    /// Rows revived or dropped so far.
    pub done: u64,
    /// The dead letters in the job's scope (the tenant's `dead` counter, or
    /// the node's) when it was created: how many entries it expects to
    /// examine.
    pub total: u64,
    /// Why it failed.
    pub error: Option<String>,
}

impl Job {
    /// The API's view (no version, no cursor).
    pub fn view(&self) -> Value {
        json!({
            "id": self.id,
            "kind": self.kind,
            "filter": filter_view(&self.filter),
            "state": self.state,
            "created_at_ms": self.created_at_ms,
            "created_at": rfc3339(self.created_at_ms),
            "updated_at_ms": self.updated_at_ms,
            "finished_at_ms": self.finished_at_ms,
            "examined": self.examined,
            "done": self.done,
            "total": self.total,
            "error": self.error,
        })
    }
}

fn filter_view(f: &DlqFilter) -> Value {
    json!({
        "tenant": f.tenant,
        "source": f.source,
        "sink": f.sink,
        "reason": f.reason,
        "since_ms": f.since_ms,
        "until_ms": f.until_ms,
    })
}

/// Reads job `id`.
///
/// # Errors
/// 503 for a store failure or a state this binary cannot read.
pub fn read_job(read: &impl Read, id: u64) -> Result<Option<Job>, ApiError> {
    match read.get(Cf::Meta, &job_key(id))? {
        Some(raw) => decode(&raw).map(Some),
        None => Ok(None),
    }
}

fn decode(raw: &[u8]) -> Result<Job, ApiError> {
    let job: Job = serde_json::from_slice(raw).map_err(|e| ApiError::store(format!("a job's state does not decode: {e}")))?;
    if job.v != JOB_VERSION {
        return Err(ApiError::store(format!("job {} was written by another ankusa (state version {})", job.id, job.v)));
    }
    Ok(job)
}

fn put(batch: &mut Batch, job: &Job) -> Result<(), ApiError> {
    let value = serde_json::to_vec(job).map_err(ApiError::store)?;
    batch.put(Cf::Meta, job_key(job.id), value);
    Ok(())
}

/// The body of `POST /v1/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobRequest {
    kind: JobKind,
    #[serde(default)]
    filter: FilterRequest,
}

/// A filter as a request gives it: `since`/`until` as unix ms or RFC 3339.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterRequest {
    tenant: Option<String>,
    source: Option<String>,
    sink: Option<String>,
    reason: Option<String>,
    since: Option<Value>,
    until: Option<Value>,
}

fn time_of(name: &str, v: Option<Value>) -> Result<Option<u64>, ApiError> {
    let bad = |m: String| ApiError::bad_request(format!("filter.{name}: {m}"));
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| bad(format!("{n} is not unix milliseconds"))),
        Some(Value::String(s)) => parse_time_ms(&s).map(Some).map_err(bad),
        Some(other) => Err(bad(format!("{other} is neither unix milliseconds nor an RFC 3339 string"))),
    }
}

/// `POST /v1/jobs`: body `{"kind": "revive" | "drop", "filter": {tenant,
/// source, sink, reason, since, until}}`; answers 202 with the job, whose
/// steps then run in the background.
pub(crate) fn create<K: Kv>(state: &Arc<AdminState<K>>, body: &[u8], q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let req: JobRequest = serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the body is not a job request: {e}")))?;
    let f = req.filter;
    let filter = DlqFilter {
        tenant: f.tenant.filter(|s| !s.is_empty()),
        source: f.source.filter(|s| !s.is_empty()),
        sink: f.sink.filter(|s| !s.is_empty()),
        reason: f.reason.filter(|s| !s.is_empty()),
        since_ms: time_of("since", f.since)?,
        until_ms: time_of("until", f.until)?,
    };
    filter.check(state)?;
    let scope = match &filter.tenant {
        Some(t) => tenant_ord(&state.registry, t)?,
        None => TenantOrd::NODE,
    };
    let writes = state.writes.blocking_lock();
    let total = state.kv.counter(&counter_key(scope, CounterField::Dead))?.max(0) as u64;
    let last = state.kv.first(Cf::Meta, &jobs_range(), Direction::Reverse)?;
    let id = match last {
        Some((k, _)) => match ankusa_keys::meta::MetaKey::decode(&k) {
            Ok(ankusa_keys::meta::MetaKey::Job(id)) => id.checked_add(1).ok_or_else(|| ApiError::unprocessable("no job id is left"))?,
            _ => return Err(ApiError::store("a job key does not decode")),
        },
        None => 1,
    };
    let now = (state.clock)();
    let job = Job {
        v: JOB_VERSION,
        id,
        kind: req.kind,
        filter,
        state: JobState::Running,
        created_at_ms: now,
        updated_at_ms: now,
        finished_at_ms: None,
        cursor: None,
        examined: 0,
        done: 0,
        total,
        error: None,
    };
    let mut batch = Batch::new();
    put(&mut batch, &job)?;
    dlq::commit(state, batch)?;
    drop(writes);
    info!(job = id, kind = ?job.kind, filter = ?job.filter, "admin job created");
    spawn(Arc::clone(state), id);
    Ok(job.view())
}

/// `GET /v1/jobs`: newest first.
pub(crate) fn list<K: Kv>(state: &AdminState<K>, mut q: Query) -> Result<Value, ApiError> {
    let limit = q.limit()?;
    let cursor = q.take("cursor").map(|c| decode_cursor(CursorKind::Jobs, &c)).transpose()?;
    q.finish()?;
    let mut range: KeyRange = jobs_range();
    if let Some(c) = cursor {
        let id: [u8; 8] = c.as_slice().try_into().map_err(|_| ApiError::bad_request("cursor is not valid here: wrong length"))?;
        let mut end = job_key(u64::from_be_bytes(id));
        end.push(0);
        if end.as_slice() < range.end.as_slice() {
            range.end = end;
        }
    }
    let entries = state.kv.scan(Cf::Meta, &range, Direction::Reverse, limit + 1)?;
    let mut items = Vec::new();
    let mut next = None;
    for (i, (_, v)) in entries.iter().enumerate() {
        let job = decode(v)?;
        if i == limit {
            next = Some(encode_cursor(CursorKind::Jobs, &job.id.to_be_bytes()));
            break;
        }
        items.push(job.view());
    }
    Ok(json!({ "items": items, "next_cursor": next }))
}

/// A job id from a path segment.
///
/// # Errors
/// 400 when it is not a number.
pub fn parse_id(text: &str) -> Result<u64, ApiError> {
    text.parse::<u64>().map_err(|_| ApiError::bad_request(format!("job id {text:?} is not a number")))
}

/// `GET /v1/jobs/{id}`.
pub(crate) fn get<K: Kv>(state: &AdminState<K>, id: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let id = parse_id(id)?;
    Ok(read_job(&*state.kv, id)?.ok_or_else(|| ApiError::not_found(format!("no job {id}")))?.view())
}

/// `POST /v1/jobs/{id}/cancel`: a running job stops before its next step; a
/// job no longer running is a 409.
pub(crate) fn cancel<K: Kv>(state: &AdminState<K>, id: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let id = parse_id(id)?;
    let _writes = state.writes.blocking_lock();
    let mut job = read_job(&*state.kv, id)?.ok_or_else(|| ApiError::not_found(format!("no job {id}")))?;
    if job.state != JobState::Running {
        return Err(ApiError::conflict(format!("job {id} is {}: only a running job can be cancelled", serde_json::to_value(job.state).unwrap_or_default().as_str().unwrap_or("finished"))));
    }
    let now = (state.clock)();
    job.state = JobState::Cancelled;
    job.updated_at_ms = now;
    job.finished_at_ms = Some(now);
    let mut batch = Batch::new();
    put(&mut batch, &job)?;
    dlq::commit(state, batch)?;
    info!(job = id, "admin job cancelled");
    Ok(job.view())
}

/// One step of job `id`: true when it is still running afterwards.
fn step<K: Kv>(state: &AdminState<K>, id: u64) -> Result<bool, ApiError> {
    let _writes = state.writes.blocking_lock();
    let Some(mut job) = read_job(&*state.kv, id)? else { return Ok(false) };
    if job.state != JobState::Running {
        return Ok(false);
    }
    let from = match &job.cursor {
        Some(c) => URL_SAFE_NO_PAD.decode(c.as_bytes()).map_err(|_| ApiError::store(format!("job {id}'s cursor does not decode")))?,
        None => Vec::new(),
    };
    let found = dlq::scan(state, &job.filter, &from, JOB_STEP_ENTRIES, usize::MAX)?;
    let now = (state.clock)();
    let mut batch = Batch::new();
    let rows: Vec<_> = found.matched.iter().map(|d| d.row).collect();
    match job.kind {
        JobKind::Revive => {
            for &row in &rows {
                match ankusa_queue::revive(&*state.kv, row, now) {
                    Ok(b) => {
                        batch.extend(b);
                    }
                    // Read under the write lock from the entry just scanned:
                    // only a store change by another process could do this.
                    Err(QueueError::NotInDlq { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        JobKind::Drop if !rows.is_empty() => {
            batch.extend(ankusa_queue::drop_dead(&*state.kv, &rows)?);
        }
        JobKind::Drop => {}
    }
    job.examined += found.examined as u64;
    job.done += rows.len() as u64;
    job.cursor = found.resume.as_deref().map(|k| URL_SAFE_NO_PAD.encode(k));
    job.updated_at_ms = now;
    if job.cursor.is_none() {
        job.state = JobState::Done;
        job.finished_at_ms = Some(now);
    }
    put(&mut batch, &job)?;
    dlq::commit(state, batch)?;
    if job.kind == JobKind::Revive && !rows.is_empty() {
        (state.wake)();
    }
    if job.state == JobState::Done {
        info!(job = id, done = job.done, examined = job.examined, "admin job done");
    }
    Ok(job.state == JobState::Running)
}

/// Marks job `id` failed with `error` (best effort: the store may be what
/// failed).
fn fail<K: Kv>(state: &AdminState<K>, id: u64, error: &ApiError) {
    let _writes = state.writes.blocking_lock();
    if let Ok(Some(mut job)) = read_job(&*state.kv, id) {
        let now = (state.clock)();
        job.state = JobState::Failed;
        job.error = Some(error.message.clone());
        job.updated_at_ms = now;
        job.finished_at_ms = Some(now);
        let mut batch = Batch::new();
        if put(&mut batch, &job).is_ok() {
            let _ = dlq::commit(state, batch);
        }
    }
}

/// Runs job `id`'s steps on a task until it leaves `running` or the relay
/// stops (then the next start resumes it).
pub fn spawn<K: Kv>(state: Arc<AdminState<K>>, id: u64) {
    tokio::spawn(async move {
        loop {
            if state.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
                info!(job = id, "relay stopping: the job resumes at the next start");
                return;
            }
            let st = Arc::clone(&state);
            match tokio::task::spawn_blocking(move || step(&st, id)).await {
                Ok(Ok(true)) => tokio::time::sleep(JOB_STEP_PAUSE).await,
                Ok(Ok(false)) => return,
                Ok(Err(e)) => {
                    warn!(job = id, error = %e.message, "admin job failed");
                    let st = Arc::clone(&state);
                    let _ = tokio::task::spawn_blocking(move || fail(&st, id, &e)).await;
                    return;
                }
                Err(e) => {
                    warn!(job = id, error = %e, "admin job step panicked or was cancelled");
                    return;
                }
            }
        }
    });
}

/// At start: every job still `running` (the previous run stopped or was
/// killed mid-job) is resumed from its stored cursor.
///
/// # Errors
/// A store failure reading the jobs.
pub fn resume<K: Kv>(state: &Arc<AdminState<K>>) -> Result<usize, ApiError> {
    let mut resumed = 0;
    for kv in scan_pages(&*state.kv, Cf::Meta, jobs_range(), Direction::Forward, 256) {
        let (_, v) = kv?;
        let job = decode(&v)?;
        if job.state == JobState::Running {
            info!(job = job.id, kind = ?job.kind, done = job.done, examined = job.examined, "resuming admin job");
            spawn(Arc::clone(state), job.id);
            resumed += 1;
        }
    }
    Ok(resumed)
}
