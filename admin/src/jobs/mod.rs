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
//!
//! # Layout
//! The job model is [`model`] ([`Job`], its codec, what a step answers);
//! each kind has its own module ([`dlq`]: revive and drop by filter,
//! [`replay`], [`purge`], [`retire`]: a source's dead letters,
//! [`quarantine`]: release and drop by filter), which depends on the model
//! only; this module is the runner: it checks and creates a job
//! ([`create`]), takes its steps on a task ([`spawn`], [`resume`]) and ends
//! it ([`cancel`], a failure), dispatching on the job's kind.

pub mod dlq;
pub mod model;
pub mod purge;
pub mod quarantine;
pub mod replay;
pub mod retire;

use std::sync::Arc;

use ankusa_engine::{Batch, Cf, Direction, Kv, scan_pages};
use ankusa_keys::meta::jobs_range;
use tracing::{info, warn};

use crate::context::Context;
use crate::dlq::DlqFilter;
use crate::error::JobError;
pub use dlq::JOB_STEP_ENTRIES;
use model::JOB_VERSION;
pub use model::{
    Job, JobKind, JobState, Next, PAGE_ENTRIES, Plan, STEP_ENTRIES, decode, encode, put, read_job,
    read_job_raw,
};
pub use replay::STEP_BODY_BYTES;
pub use retire::DEFAULT_RETIRE_REASON;

/// The pause between two steps of a job: each step is a `Sync` write under
/// the admin write lock, and the pause leaves the store's write path and the
/// lock to ingest, the pipeline and other admin requests (a 10,000-row job
/// takes 40 steps, so at least 0.8 s).
pub const JOB_STEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);
/// How long a job that waits (a replay over half its tenant's queue bounds, a
/// retired source's calls in flight, a pipeline still recovering) sleeps
/// before it looks again.
pub const JOB_WAIT_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// Checks a new job's request for its kind and settles what it stores
/// (docs/design.md section 5, "Admin API"); which fields each kind takes is
/// its module's `plan`. A field the kind does not take is refused, and so
/// are `sinks` for any kind but a replay.
///
/// # Errors
/// Invalid for a missing or foreign field, an empty or inverted time range;
/// not found for an unknown tenant, source or sink; a conflict for a tenant
/// being purged.
fn plan<K: Kv>(
    state: &Context<K>,
    kind: JobKind,
    filter: &mut DlqFilter,
    sinks: Option<Vec<String>>,
    now: u64,
) -> Result<Plan, JobError> {
    if sinks.is_some() && kind != JobKind::Replay {
        return Err(JobError::invalid(format!(
            "sinks does not apply to a {} job (a replay's only)",
            model::kind_name(kind)
        )));
    }
    let purging = ankusa_queue::read_purges(&*state.kv)?;
    match kind {
        JobKind::Revive | JobKind::Drop => dlq::plan(state, filter),
        JobKind::Replay => replay::plan(state, filter, sinks, now),
        JobKind::PurgeTenant => purge::plan(state, filter, &purging),
        JobKind::DeadLetterSource => retire::plan(state, filter),
        JobKind::ReleaseQuarantined | JobKind::DropQuarantined => {
            quarantine::plan(state, kind, filter)
        }
    }
}

/// Creates a job of `kind` over `filter` (a replay's `sinks`), checked by
/// its kind (its module's `plan`), committed `Sync` (a purge's with its tenant's purge
/// mark, through the Writer), and starts its steps in the background.
///
/// # Errors
/// As its kind's `plan`; unprocessable when no job id is left; unavailable when a
/// purge finds no Writer; a store failure.
pub fn create<K: Kv>(
    state: &Arc<Context<K>>,
    kind: JobKind,
    mut filter: DlqFilter,
    sinks: Option<Vec<String>>,
) -> Result<Job, JobError> {
    let writes = state.writes.blocking_lock();
    let now = state.now();
    let plan = plan(state, kind, &mut filter, sinks, now)?;
    let last = state
        .kv
        .first(Cf::Meta, &jobs_range(), Direction::Reverse)?;
    let id = match last {
        Some((k, _)) => match ankusa_keys::meta::MetaKey::decode(&k) {
            Ok(ankusa_keys::meta::MetaKey::Job(id)) => id
                .checked_add(1)
                .ok_or_else(|| JobError::unprocessable("no job id is left"))?,
            _ => return Err(JobError::store("a job key does not decode")),
        },
        None => 1,
    };
    let job = Job {
        v: JOB_VERSION,
        id,
        kind,
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
        purge::begin(state, &job)?;
    } else {
        let mut batch = Batch::new();
        put(&mut batch, &job)?;
        state.commit(batch)?;
    }
    drop(writes);
    info!(job = id, kind = ?job.kind, filter = ?job.filter, "admin job created");
    spawn(Arc::clone(state), id);
    Ok(job)
}

/// Cancels job `id`: a running job stops before its next step (a purge
/// lifts its tenant's purge mark, a source's retirement ends).
///
/// # Errors
/// Not found for no such job; a conflict for a job no longer running;
/// unavailable when a purge finds no Writer; a store failure.
pub fn cancel<K: Kv>(state: &Context<K>, id: u64) -> Result<Job, JobError> {
    let _writes = state.writes.blocking_lock();
    let (job, raw) =
        read_job_raw(&*state.kv, id)?.ok_or_else(|| JobError::not_found(format!("no job {id}")))?;
    if job.state != JobState::Running {
        return Err(JobError::conflict(format!(
            "job {id} is {}: only a running job can be cancelled",
            serde_json::to_value(job.state)
                .unwrap_or_default()
                .as_str()
                .unwrap_or("finished")
        )));
    }
    let job = finish(state, job, raw, JobState::Cancelled, None)?;
    info!(job = id, "admin job cancelled");
    Ok(job)
}

/// Ends a running job in `to` (`done`, `cancelled`, `failed` with `error`),
/// undoing what its kind holds (a purge's mark, a source's retirement). The
/// write lock is held.
///
/// # Errors
/// Unavailable when a purge finds no Writer (the relay is stopping: the job
/// is still running and resumes at the next start), a store failure.
fn finish<K: Kv>(
    state: &Context<K>,
    job: Job,
    raw: Vec<u8>,
    to: JobState,
    error: Option<String>,
) -> Result<Job, JobError> {
    match job.kind {
        JobKind::PurgeTenant => purge::finish(state, job, raw, to, error),
        JobKind::DeadLetterSource => retire::finish(state, job, to, error),
        _ => model::finish(state, job, to, error),
    }
}

/// One step of job `id`: what the job's task does next.
fn step<K: Kv>(state: &Context<K>, id: u64) -> Result<Next, JobError> {
    let _writes = state.writes.blocking_lock();
    let Some((job, raw)) = read_job_raw(&*state.kv, id)? else {
        return Ok(Next::Stop);
    };
    if job.state != JobState::Running {
        return Ok(Next::Stop);
    }
    match job.kind {
        JobKind::Revive | JobKind::Drop => dlq::step(state, job),
        JobKind::Replay => replay::step(state, job, raw),
        JobKind::PurgeTenant => purge::step(state, job, raw),
        JobKind::DeadLetterSource => retire::step(state, job),
        JobKind::ReleaseQuarantined | JobKind::DropQuarantined => quarantine::step(state, job, raw),
    }
}

/// Marks job `id` failed with `error` (best effort: the store may be what
/// failed), lifting a purge's mark or ending a retirement.
fn fail<K: Kv>(state: &Context<K>, id: u64, error: &JobError) {
    let _writes = state.writes.blocking_lock();
    if let Ok(Some((job, raw))) = read_job_raw(&*state.kv, id)
        && job.state == JobState::Running
        && let Err(e) = finish(
            state,
            job,
            raw,
            JobState::Failed,
            Some(error.message().to_owned()),
        )
    {
        warn!(job = id, error = %e.message(), "could not record the job's failure");
    }
}

/// Runs job `id`'s steps on a task until it leaves `running` or the relay
/// stops (then the next start resumes it).
pub fn spawn<K: Kv>(state: Arc<Context<K>>, id: u64) {
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
                    info!(job = id, error = %e.message(), "relay stopping: the job's step did not finish; it resumes at the next start");
                    return;
                }
                Ok(Err(e)) => {
                    warn!(job = id, error = %e.message(), "admin job failed");
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
pub fn resume<K: Kv>(state: &Arc<Context<K>>) -> Result<usize, JobError> {
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
