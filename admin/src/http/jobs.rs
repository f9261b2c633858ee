//! Admin jobs (docs/design.md section 5, "Admin API"), run in bounded steps by
//! a task of the admin listener: a DLQ revive or drop by filter, an archive
//! replay, a tenant purge, a source's dead letters (a retired source), and a
//! release or drop of quarantined hooks. [`JobKind`] names them.
//!
//! # Durability: a step is one batch
//! A job's state is versioned JSON in cf `meta` under `keys::meta::job_key`.
//! Each step does a bounded piece of work and puts the job's advanced cursor
//! and counts IN THE SAME BATCH, written `Sync` under the admin write lock. A
//! SIGKILL between two steps loses nothing and repeats nothing: the store
//! holds either the step's work and the cursor past it, or neither. `serve`
//! resumes every `running` job at start ([`resume`]). Who commits a step's
//! batch depends on what it touches:
//! - revive and drop: the admin API itself (at most [`JOB_STEP_ENTRIES`] ?X
//!   entries, `queue::revive` / `queue::drop_dead`); the cursor also keeps a
//!   revived row that dies again from being revived twice by the same job;
//! - replay, release and drop of quarantined hooks: the Writer
//!   (`WriterHandle::job_step`: the hooks, releases or drops and the job's
//!   state in one group batch, the state compare-and-set);
//! - purge and dead letters of a source: the pipeline's task
//!   (`PipelineHandle::exclusive`), between its passes.
//!
//! # States
//! `running` -> `done` (the work is exhausted), `cancelled` (`POST
//! /v1/jobs/{id}/cancel`; the step in progress, if any, completes first: both
//! take the write lock; a cancelled purge lifts the tenant's purge mark, a
//! cancelled retirement ends it) or `failed` (in `error`).

use std::sync::Arc;

use ankusa_engine::{Batch, Cf, Direction, KeyRange, Kv, Read, scan_pages};
use ankusa_keys::meta::{job_key, jobs_range};
use ankusa_queue::QueueError;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::AdminState;
use super::api::{
    ApiError, CursorKind, Query, decode_cursor, encode_cursor, parse_time_ms, rfc3339,
};
use super::dlq::{self, DlqFilter};
use super::steps::{self, Next};

/// Most ?X entries one step of a job examines (and so the most rows one step's
/// batch moves).
pub const JOB_STEP_ENTRIES: usize = 256;
/// The pause between two steps of a job: each step is a `Sync` write under
/// the admin write lock, and the pause leaves the store's write path and the
/// lock to ingest, the pipeline and other admin requests (a 10,000-row job
/// takes 40 steps, so at least 0.8 s).
pub const JOB_STEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);
/// How long a job that waits (a replay over half its tenant's queue bounds, a
/// retired source's calls in flight, a pipeline still recovering) sleeps
/// before it looks again.
pub const JOB_WAIT_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);
/// The version of the job state this binary writes; another is refused.
const JOB_VERSION: u8 = 1;

/// What a job does (docs/design.md section 5, "Admin API").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// `queue::revive` each dead letter the filter matches.
    Revive,
    /// `queue::drop_dead` each dead letter the filter matches.
    Drop,
    /// Archive replay of a source's hooks received in `[since, until)`
    /// (docs/design.md section 5, "Replayer").
    Replay,
    /// Purge of a tenant (`queue::purge_tenant_page`; "Purge a tenant").
    PurgeTenant,
    /// Dead letters of a source's queued rows (`queue::dead_letter_source`;
    /// "Retire a source").
    DeadLetterSource,
    /// Release of every quarantined hook the filter (tenant, source) matches.
    ReleaseQuarantined,
    /// Drop of every quarantined hook the filter matches.
    DropQuarantined,
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
    /// What it did so far: rows revived or dropped, hooks replayed, released
    /// or dropped, rows and quarantined hooks purged, rows dead-lettered (a
    /// retirement: its pages' and the pipeline's, docs/design.md section 5,
    /// "Retire a source").
    pub done: u64,
    /// What it examined and could not act on (a replay: an archive entry
    /// whose envelope is gone, a hook still in quarantine; a release: a hook
    /// whose source is no longer configured).
    #[serde(default)]
    pub skipped: u64,
    /// What it expects to examine, from the maintained counters when it was
    /// created (dead letters of its scope; a purge: the tenant's pending,
    /// dead and quarantined; a source's dead letters: its tenants' pending,
    /// an upper bound; quarantined hooks of its scope); `None` for a replay
    /// (unknown without a scan).
    pub total: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
    /// A replay's sink entries (`None`: every sink of the source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sinks: Option<Vec<String>>,
    /// A replay's bound: the seq high-water mark when it was created (hooks
    /// committed later, its own copies included, are not in its range).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seq: Option<u64>,
    /// What the job is doing now, for operators (a purge's family, "waiting
    /// for ..."); once it stopped, why ("cancelled by an operator",
    /// "stopped: <error>"); `None` once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
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
            "skipped": self.skipped,
            "total": self.total,
            "error": self.error,
            "sinks": self.sinks,
            "phase": self.phase,
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
    Ok(read_job_raw(read, id)?.map(|(job, _)| job))
}

/// Reads job `id` with its stored bytes (what a Writer step compares).
///
/// # Errors
/// As [`read_job`].
pub(crate) fn read_job_raw(read: &impl Read, id: u64) -> Result<Option<(Job, Vec<u8>)>, ApiError> {
    match read.get(Cf::Meta, &job_key(id))? {
        Some(raw) => decode(&raw).map(|j| Some((j, raw.to_vec()))),
        None => Ok(None),
    }
}

fn decode(raw: &[u8]) -> Result<Job, ApiError> {
    let job: Job = serde_json::from_slice(raw)
        .map_err(|e| ApiError::store(format!("a job's state does not decode: {e}")))?;
    if job.v != JOB_VERSION {
        return Err(ApiError::store(format!(
            "job {} was written by another ankusa (state version {})",
            job.id, job.v
        )));
    }
    Ok(job)
}

/// The stored bytes of `job`.
pub(crate) fn encode(job: &Job) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(job).map_err(ApiError::store)
}

/// Puts `job`'s state into `batch`.
pub(crate) fn put(batch: &mut Batch, job: &Job) -> Result<(), ApiError> {
    batch.put(Cf::Meta, job_key(job.id), encode(job)?);
    Ok(())
}

/// The body of `POST /v1/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobRequest {
    kind: JobKind,
    #[serde(default)]
    filter: FilterRequest,
    /// A replay's sink entries (default: every sink of the source).
    #[serde(default)]
    sinks: Option<Vec<String>>,
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
/// since, until}, "sinks": [...]}` (which fields a kind takes: [`steps::plan`]);
/// answers 202 with the job, whose steps then run in the background.
pub(crate) fn create<K: Kv>(
    state: &Arc<AdminState<K>>,
    body: &[u8],
    q: Query,
) -> Result<Value, ApiError> {
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
    let mut filter = DlqFilter {
        tenant: f.tenant,
        source: f.source,
        sink: f.sink,
        reason: f.reason,
        since_ms: time_of("since", f.since)?,
        until_ms: time_of("until", f.until)?,
    };
    let writes = state.writes.blocking_lock();
    let now = (state.clock)();
    let plan = steps::plan(state, req.kind, &mut filter, req.sinks, now)?;
    let last = state
        .kv
        .first(Cf::Meta, &jobs_range(), Direction::Reverse)?;
    let id = match last {
        Some((k, _)) => match ankusa_keys::meta::MetaKey::decode(&k) {
            Ok(ankusa_keys::meta::MetaKey::Job(id)) => id
                .checked_add(1)
                .ok_or_else(|| ApiError::unprocessable("no job id is left"))?,
            _ => return Err(ApiError::store("a job key does not decode")),
        },
        None => 1,
    };
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
        skipped: 0,
        total: plan.total,
        error: None,
        sinks: plan.sinks,
        max_seq: plan.max_seq,
        phase: plan.phase,
    };
    if job.kind == JobKind::PurgeTenant {
        // The purge mark goes in with the job, through the Writer.
        steps::begin_purge(state, &job)?;
    } else {
        let mut batch = Batch::new();
        put(&mut batch, &job)?;
        dlq::commit(state, batch)?;
    }
    drop(writes);
    info!(job = id, kind = ?job.kind, filter = ?job.filter, "admin job created");
    spawn(Arc::clone(state), id);
    Ok(job.view())
}

/// `GET /v1/jobs`: newest first.
pub(crate) fn list<K: Kv>(state: &AdminState<K>, mut q: Query) -> Result<Value, ApiError> {
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
        items.push(job.view());
    }
    Ok(json!({ "items": items, "next_cursor": next }))
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
pub(crate) fn get<K: Kv>(state: &AdminState<K>, id: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let id = parse_id(id)?;
    Ok(read_job(&*state.kv, id)?
        .ok_or_else(|| ApiError::not_found(format!("no job {id}")))?
        .view())
}

/// `POST /v1/jobs/{id}/cancel`: a running job stops before its next step (a
/// purge lifts its tenant's purge mark, a source's retirement ends); a job no
/// longer running is a 409.
pub(crate) fn cancel<K: Kv>(state: &AdminState<K>, id: &str, q: Query) -> Result<Value, ApiError> {
    q.finish()?;
    let id = parse_id(id)?;
    let _writes = state.writes.blocking_lock();
    let (job, raw) =
        read_job_raw(&*state.kv, id)?.ok_or_else(|| ApiError::not_found(format!("no job {id}")))?;
    if job.state != JobState::Running {
        return Err(ApiError::conflict(format!(
            "job {id} is {}: only a running job can be cancelled",
            serde_json::to_value(job.state)
                .unwrap_or_default()
                .as_str()
                .unwrap_or("finished")
        )));
    }
    let job = steps::finish(state, job, raw, JobState::Cancelled, None)?;
    info!(job = id, "admin job cancelled");
    Ok(job.view())
}

/// One step of a DLQ revive or drop job (the write lock held).
fn dlq_step<K: Kv>(state: &AdminState<K>, mut job: Job) -> Result<Next, ApiError> {
    let id = job.id;
    let from = match &job.cursor {
        Some(c) => URL_SAFE_NO_PAD
            .decode(c.as_bytes())
            .map_err(|_| ApiError::store(format!("job {id}'s cursor does not decode")))?,
        None => Vec::new(),
    };
    let found = dlq::scan(state, &job.filter, &from, JOB_STEP_ENTRIES, usize::MAX)?;
    let now = (state.clock)();
    let mut batch = Batch::new();
    // Rows of a tenant being purged are left to the purge.
    let purging = ankusa_queue::read_purges(&*state.kv)?;
    let rows: Vec<_> = found
        .matched
        .iter()
        .map(|d| d.row)
        .filter(|r| !purging.contains_key(&r.tenant))
        .collect();
    job.skipped += (found.matched.len() - rows.len()) as u64;
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
        _ => {}
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
        info!(
            job = id,
            done = job.done,
            examined = job.examined,
            "admin job done"
        );
        return Ok(Next::Stop);
    }
    Ok(Next::More)
}

/// One step of job `id`: what the job's task does next.
fn step<K: Kv>(state: &AdminState<K>, id: u64) -> Result<Next, ApiError> {
    let _writes = state.writes.blocking_lock();
    let Some((job, raw)) = read_job_raw(&*state.kv, id)? else {
        return Ok(Next::Stop);
    };
    if job.state != JobState::Running {
        return Ok(Next::Stop);
    }
    match job.kind {
        JobKind::Revive | JobKind::Drop => dlq_step(state, job),
        _ => steps::step(state, job, raw),
    }
}

/// Marks job `id` failed with `error` (best effort: the store may be what
/// failed), lifting a purge's mark or ending a retirement.
fn fail<K: Kv>(state: &AdminState<K>, id: u64, error: &ApiError) {
    let _writes = state.writes.blocking_lock();
    if let Ok(Some((job, raw))) = read_job_raw(&*state.kv, id)
        && job.state == JobState::Running
        && let Err(e) = steps::finish(
            state,
            job,
            raw,
            JobState::Failed,
            Some(error.message.clone()),
        )
    {
        warn!(job = id, error = %e.message, "could not record the job's failure");
    }
}

/// Runs job `id`'s steps on a task until it leaves `running` or the relay
/// stops (then the next start resumes it).
pub fn spawn<K: Kv>(state: Arc<AdminState<K>>, id: u64) {
    tokio::spawn(async move {
        loop {
            if state
                .shutting_down
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                info!(
                    job = id,
                    "relay stopping: the job resumes at the next start"
                );
                return;
            }
            let st = Arc::clone(&state);
            match tokio::task::spawn_blocking(move || step(&st, id)).await {
                Ok(Ok(Next::More)) => tokio::time::sleep(JOB_STEP_PAUSE).await,
                Ok(Ok(Next::Wait)) => tokio::time::sleep(JOB_WAIT_PAUSE).await,
                Ok(Ok(Next::Stop)) => return,
                Ok(Err(e))
                    if state
                        .shutting_down
                        .load(std::sync::atomic::Ordering::SeqCst) =>
                {
                    info!(job = id, error = %e.message, "relay stopping: the job's step did not finish; it resumes at the next start");
                    return;
                }
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
