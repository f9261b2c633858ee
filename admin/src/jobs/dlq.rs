//! A revive or drop of every dead letter a filter takes (docs/design.md
//! section 5, "Admin API"): at most [`JOB_STEP_ENTRIES`] ?X entries a step
//! (`queue::revive` / `queue::drop_dead`), committed by the admin API itself
//! with the job's advanced cursor in the same batch; the cursor also keeps a
//! revived row that dies again from being revived twice by the same job.

use ankusa_engine::{Batch, Kv};
use ankusa_keys::{CounterField, TenantOrd};
use ankusa_queue::QueueError;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tracing::info;

use super::model::{Job, JobKind, JobState, Next, Plan, put};
use crate::context::Context;
use crate::dlq::{self, DlqFilter};
use crate::error::JobError;

/// Most ?X entries one step of a job examines (and so the most rows one step's
/// batch moves).
pub const JOB_STEP_ENTRIES: usize = 256;

/// A revive or drop takes the DLQ filter (every field optional); its total is
/// the dead letters of its tenant (or of the node).
///
/// # Errors
/// As [`DlqFilter::check`]; a store failure.
pub(super) fn plan<K: Kv>(state: &Context<K>, filter: &DlqFilter) -> Result<Plan, JobError> {
    filter.check(state)?;
    let scope = match &filter.tenant {
        Some(t) => state.tenant_ord(t)?,
        None => TenantOrd::NODE,
    };
    Ok(Plan {
        total: Some(state.counter(scope, CounterField::Dead)?),
        ..Plan::default()
    })
}

/// One step of a DLQ revive or drop job (the write lock held).
pub(super) fn step<K: Kv>(state: &Context<K>, mut job: Job) -> Result<Next, JobError> {
    let id = job.id;
    let from = match &job.cursor {
        Some(c) => URL_SAFE_NO_PAD
            .decode(c.as_bytes())
            .map_err(|_| JobError::store(format!("job {id}'s cursor does not decode")))?,
        None => Vec::new(),
    };
    let found = dlq::scan(state, &job.filter, &from, JOB_STEP_ENTRIES, usize::MAX)?;
    let now = (state.clock)();
    let mut batch = Batch::new();
    // Rows of a tenant being purged are left to the purge. A revive skips
    // the rows whose source or sink entry is no longer configured, as a
    // single revive refuses them: they would only die again at once, with
    // their reason lost (a drop takes them).
    let purging = ankusa_queue::read_purges(&*state.kv)?;
    let mut rows = Vec::with_capacity(found.matched.len());
    for d in &found.matched {
        if purging.contains_key(&d.row.tenant) {
            continue;
        }
        if job.kind == JobKind::Revive && dlq::unconfigured(state, d.row)?.is_some() {
            continue;
        }
        rows.push(d.row);
    }
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
            batch.extend(ankusa_queue::drop_dead(&*state.kv, &rows, now)?);
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
    state.commit(batch)?;
    if job.kind == JobKind::Revive && !rows.is_empty() {
        state.wake();
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
