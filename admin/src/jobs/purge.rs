//! A tenant's purge (docs/design.md section 5, "Purge a tenant"): the job's
//! state and the tenant's purge mark go in through the Writer in one batch
//! (`begin`); from then the Writer refuses the tenant's hooks. Each step
//! stops the pipeline's visits of the tenant and commits one page of
//! `queue::purge_tenant_page` with the job's advanced state on the
//! pipeline's task (`PipelineControl::exclusive`), so it never races the
//! pipeline's own batches on the same rows; the end (`finish`: done,
//! cancelled or failed) lifts the mark and gives the tenant back.

use std::sync::{Arc, Mutex};

use ankusa_engine::{Cf, Kv};
use ankusa_keys::CounterField;
use ankusa_keys::meta::job_key;
use ankusa_queue::Cursor;
use ankusa_queue::writer::JobState as StoredState;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tracing::{info, warn};

use super::model::{
    Job, JobKind, JobState, Next, PAGE_ENTRIES, Plan, control_error, encode, only, settle, stored,
    write_error,
};
use crate::context::{Context, block};
use crate::dlq::DlqFilter;
use crate::error::JobError;

/// A purge whose pages are done and whose tenant is to be released.
const FINISHING: &str = "finishing";

/// A purge takes `filter.tenant` only; a tenant already being purged (in
/// `purging`, the marks in the store) is a conflict. Its total is the
/// tenant's pending, dead and quarantined.
///
/// # Errors
/// Invalid for a missing or foreign field; not found for an unknown tenant;
/// a conflict for a tenant being purged; a store failure.
pub(super) fn plan<K: Kv>(
    state: &Context<K>,
    filter: &DlqFilter,
    purging: &std::collections::BTreeMap<ankusa_keys::TenantOrd, u64>,
) -> Result<Plan, JobError> {
    only(JobKind::PurgeTenant, filter, &["tenant"])?;
    let mut plan = Plan::default();
    let t = filter
        .tenant
        .clone()
        .ok_or_else(|| JobError::invalid("a purge needs filter.tenant"))?;
    let ord = state.tenant_ord(&t)?;
    if let Some(job) = purging.get(&ord) {
        return Err(JobError::conflict(format!(
            "tenant {t:?} is already being purged by job {job}"
        )));
    }
    let mut total = 0;
    for f in [
        CounterField::Pending,
        CounterField::Dead,
        CounterField::Quarantined,
    ] {
        total += state.counter(ord, f)?;
    }
    plan.total = Some(total);
    plan.phase = Some(ankusa_queue::purge_phase(None).to_owned());
    Ok(plan)
}

/// Creates a purge job: its state and the tenant's purge mark in one Writer
/// batch (docs/design.md section 5, "Purge a tenant"). From that commit the
/// Writer refuses the tenant's hooks; the job's first step quiesces the
/// pipeline's visits of it.
///
/// # Errors
/// 503 when the Writer is not there; a store failure.
pub(super) fn begin<K: Kv>(state: &Context<K>, job: &Job) -> Result<(), JobError> {
    let tenant = job.filter.tenant.clone().unwrap_or_default();
    let ord = state.tenant_ord(&tenant)?;
    let edge = state
        .edge()
        .ok_or_else(|| JobError::unavailable("the Writer is not running"))?;
    let st = StoredState {
        key: job_key(job.id),
        expect: None,
        value: encode(job)?,
    };
    block(edge.writer.purge_mark(ord, Some(job.id), st)).map_err(write_error(state))?;
    info!(job = job.id, tenant = %tenant, "tenant purge started: its hooks are refused until it ends");
    Ok(())
}

/// Where work run on the pipeline's task leaves the job's new state and its
/// stored bytes.
type Built = Arc<Mutex<Option<(Job, Vec<u8>)>>>;

/// One step of a purge: the pipeline's visits of the tenant stopped (again:
/// idempotent), then one page of `queue::purge_tenant_page` and the job's
/// advanced state, built and committed on the pipeline's task; after the
/// last page, [`finish`] lifts the mark.
pub(super) fn step<K: Kv>(state: &Context<K>, job: Job, raw: Vec<u8>) -> Result<Next, JobError> {
    let tenant = job.filter.tenant.clone().unwrap_or_default();
    let ord = state.tenant_ord(&tenant)?;
    if !state.ready.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(Next::Wait); // the pipeline is recovering the previous run's claims
    }
    let control = state.pipeline()?;
    block(control.quiesce(ord, true)).map_err(control_error)?;
    if job.phase.as_deref() == Some(FINISHING) {
        finish(state, job, raw, JobState::Done, None)?;
        return Ok(Next::Stop);
    }
    let cursor = match &job.cursor {
        Some(c) => Some(
            URL_SAFE_NO_PAD
                .decode(c.as_bytes())
                .ok()
                .and_then(|b| Cursor::from_bytes(&b))
                .ok_or_else(|| {
                    JobError::store(format!("job {}'s cursor does not decode", job.id))
                })?,
        ),
        None => None,
    };
    let kv = Arc::clone(&state.kv);
    let now = (state.clock)();
    let out: Built = Arc::default();
    let result = Arc::clone(&out);
    let mut next_job = job;
    let work = Box::new(move || {
        let page = ankusa_queue::purge_tenant_page(&*kv, ord, cursor.as_ref(), PAGE_ENTRIES)
            .map_err(|e| e.to_string())?;
        next_job.examined += page.moved as u64;
        next_job.done += page.moved as u64;
        next_job.cursor = page
            .next
            .as_ref()
            .map(|c| URL_SAFE_NO_PAD.encode(c.to_bytes()));
        next_job.phase = Some(match &page.next {
            Some(c) => ankusa_queue::purge_phase(Some(c)).to_owned(),
            None => FINISHING.to_owned(),
        });
        next_job.updated_at_ms = now;
        let value = serde_json::to_vec(&next_job).map_err(|e| e.to_string())?;
        let mut batch = page.batch;
        batch.put(Cf::Meta, job_key(next_job.id), value.clone());
        *result.lock().unwrap_or_else(|p| p.into_inner()) = Some((next_job, value));
        Ok(batch)
    });
    block(control.exclusive(work)).map_err(control_error)?;
    let Some((job, raw)) = out.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return Err(JobError::store("the purge page was not built"));
    };
    if job.phase.as_deref() == Some(FINISHING) {
        let job = finish(state, job, raw, JobState::Done, None)?;
        info!(job = job.id, purged = job.done, "tenant purged");
        return Ok(Next::Stop);
    }
    Ok(Next::More)
}

/// Ends a running purge in `to` (`done`, `cancelled`, `failed` with
/// `error`): its mark is lifted through the Writer (with the job's final
/// state, compare-and-set) and the pipeline visits the tenant again. The
/// write lock is held.
///
/// # Errors
/// Unavailable when the Writer is gone (the relay is stopping: the job is
/// still running and resumes at the next start), a store failure.
pub(crate) fn finish<K: Kv>(
    state: &Context<K>,
    mut job: Job,
    raw: Vec<u8>,
    to: JobState,
    error: Option<String>,
) -> Result<Job, JobError> {
    settle(&mut job, to, error, state.now());
    let tenant = job.filter.tenant.clone().unwrap_or_default();
    let ord = state.tenant_ord(&tenant)?;
    let edge = state.edge().ok_or_else(|| {
        JobError::unavailable("the relay is stopping: the purge's mark is lifted at the next start")
    })?;
    block(edge.writer.purge_mark(ord, None, stored(&job, raw)?)).map_err(write_error(state))?;
    if let Ok(control) = state.pipeline()
        && let Err(e) = block(control.quiesce(ord, false))
    {
        warn!(tenant = %tenant, error = ?e, "the pipeline did not take the tenant back (it does at the next start)");
    }
    info!(job = job.id, tenant = %tenant, state = ?job.state, "tenant purge ended; the tenant takes hooks again");
    Ok(job)
}
