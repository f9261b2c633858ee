//! A source's dead letters (docs/design.md section 5, "Retire a source"):
//! the source retired in the pipeline, its queued rows dead-lettered a page
//! at a time on the pipeline's task (`PipelineControl::exclusive`), then the
//! job waits for the source's calls in flight; its end (`finish`) ends the
//! retirement.

use std::sync::Arc;

use ankusa_engine::{Batch, Cf, Kv};
use ankusa_keys::CounterField;
use ankusa_keys::meta::job_key;
use ankusa_queue::Cursor;
use tracing::{info, warn};

use super::model::{
    Job, JobKind, JobState, Next, PAGE_ENTRIES, Plan, control_error, cursor_of, only, position,
    put, registered_source, set_cursor, settle, source_tenants,
};
use crate::context::{Context, block};
use crate::dlq::DlqFilter;
use crate::error::JobError;

/// The dead-letter reason of a source's rows when the request gives none.
pub const DEFAULT_RETIRE_REASON: &str = "source retired through the admin API";
/// A retirement whose pages are done, waiting for the source's calls in flight.
const WAITING_CALLS: &str = "waiting for calls in flight";

/// A source's dead letters take `filter.source`, `filter.tenant` (optional)
/// and `filter.reason` (the dead-letter reason, default
/// [`DEFAULT_RETIRE_REASON`]). Its total is its tenants' pending, an upper
/// bound.
///
/// # Errors
/// Invalid for a missing or foreign field; not found for an unknown tenant
/// or source; a store failure.
pub(super) fn plan<K: Kv>(state: &Context<K>, filter: &mut DlqFilter) -> Result<Plan, JobError> {
    only(
        JobKind::DeadLetterSource,
        filter,
        &["tenant", "source", "reason"],
    )?;
    let mut plan = Plan::default();
    let source = filter
        .source
        .clone()
        .ok_or_else(|| JobError::invalid("a dead_letter_source job needs filter.source"))?;
    registered_source(state, &source)?;
    let mut total = 0;
    for ord in source_tenants(state, &source, filter.tenant.as_deref())? {
        total += state.counter(ord, CounterField::Pending)?;
    }
    filter
        .reason
        .get_or_insert_with(|| DEFAULT_RETIRE_REASON.to_owned());
    plan.total = Some(total);
    Ok(plan)
}

/// One step of a source's dead letters (docs/design.md section 5, "Retire a
/// source"): the source retired in the pipeline (idempotent: in memory only,
/// so it is said again after a restart), then one page of
/// `queue::dead_letter_source` (members before due rows, lane by lane) of the
/// job's current tenant with the job's advanced state, built and committed on
/// the pipeline's task. After the last tenant, the job waits until the
/// source has no call in flight (a failed attempt of a retired source is
/// dead-lettered by the pipeline), then ends and the retirement with it.
pub(super) fn step<K: Kv>(state: &Context<K>, job: Job) -> Result<Next, JobError> {
    let source = job.filter.source.clone().unwrap_or_default();
    let id = registered_source(state, &source)?;
    let reason = job
        .filter
        .reason
        .clone()
        .unwrap_or_else(|| DEFAULT_RETIRE_REASON.to_owned());
    let tenants = source_tenants(state, &source, job.filter.tenant.as_deref())?;
    let control = state.pipeline()?;
    let (busy, by_pipeline) =
        block(control.retire(id, Some(reason.clone()))).map_err(control_error)?;
    // `done` counts every row dead-lettered for the retirement: the pages'
    // and the pipeline's (due rows its visits met, attempts that failed).
    let mut job = job;
    job.done += by_pipeline;
    if job.phase.as_deref() == Some(WAITING_CALLS) {
        if busy > 0 {
            if by_pipeline > 0 {
                job.updated_at_ms = (state.clock)();
                let mut batch = Batch::new();
                put(&mut batch, &job)?;
                state.commit(batch)?;
            }
            return Ok(Next::Wait);
        }
        let job = finish(state, job, JobState::Done, None)?;
        info!(job = job.id, source = %source, dead_lettered = job.done, "source's queued rows dead-lettered");
        return Ok(Next::Stop);
    }
    let (ti, resume) = position(&tenants, cursor_of(&job)?);
    let Some(&ord) = tenants.get(ti) else {
        job.phase = Some(WAITING_CALLS.to_owned());
        let mut batch = Batch::new();
        put(&mut batch, &job)?;
        state.commit(batch)?;
        return Ok(Next::More);
    };
    let cursor = Cursor::from_bytes(&resume);
    let next_ord = tenants.get(ti + 1).copied();
    let kv = Arc::clone(&state.kv);
    let now = (state.clock)();
    let mut next_job = job;
    let work = Box::new(move || {
        let page = ankusa_queue::dead_letter_source(
            &*kv,
            ord,
            id,
            &reason,
            cursor.as_ref(),
            PAGE_ENTRIES,
            now,
        )
        .map_err(|e| e.to_string())?;
        next_job.examined += page.moved as u64;
        next_job.done += page.moved as u64;
        next_job.updated_at_ms = now;
        match (&page.next, next_ord) {
            (Some(c), _) => set_cursor(&mut next_job, Some((ord, &c.to_bytes()))),
            (None, Some(n)) => set_cursor(&mut next_job, Some((n, &[]))),
            (None, None) => {
                set_cursor(&mut next_job, None);
                next_job.phase = Some(WAITING_CALLS.to_owned());
            }
        }
        let value = serde_json::to_vec(&next_job).map_err(|e| e.to_string())?;
        let mut batch = page.batch;
        batch.put(Cf::Meta, job_key(next_job.id), value);
        Ok(batch)
    });
    block(control.exclusive(work)).map_err(control_error)?;
    Ok(Next::More)
}

/// Ends a running retirement in `to` (`done`, `cancelled`, `failed` with
/// `error`): the retirement ends first, so the rows the pipeline
/// dead-lettered for it up to its end are in the job's final `done`; then
/// the final state is committed `Sync`. The write lock is held.
///
/// # Errors
/// A store failure.
pub(crate) fn finish<K: Kv>(
    state: &Context<K>,
    mut job: Job,
    to: JobState,
    error: Option<String>,
) -> Result<Job, JobError> {
    settle(&mut job, to, error, state.now());
    if let Some(id) = job
        .filter
        .source
        .as_deref()
        .and_then(|s| state.registry.load().sources.get(s).copied())
        && let Ok(control) = state.pipeline()
    {
        match block(control.retire(id, None)) {
            Ok((_, by_pipeline)) => job.done += by_pipeline,
            Err(e) => {
                warn!(source = id.0, error = ?e, "the pipeline did not end the source's retirement")
            }
        }
    }
    let mut batch = Batch::new();
    put(&mut batch, &job)?;
    state.commit(batch)?;
    Ok(job)
}
