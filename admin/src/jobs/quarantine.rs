//! A release or drop of every quarantined hook a filter (tenant, source)
//! takes (docs/design.md section 5, "Quarantine"): at most
//! [`STEP_ENTRIES`] ?Q entries a step, each released (rows resolved from the
//! stored envelope with its source's current configuration, as one release:
//! `crate::quarantine::release`) or dropped through the Writer with the
//! job's advanced state, one batch (`WriterHandle::job_step`).

use std::sync::Arc;

use ankusa_edge::{Header, ParsedBody};
use ankusa_engine::Kv;
use ankusa_keys::{CounterField, Seq, SourceId, TenantOrd};
use ankusa_queue::writer::{JobOp, JobStep};
use tracing::info;

use super::model::{
    Job, JobKind, JobState, Next, Plan, STEP_ENTRIES, advance, cursor_of, only, position,
    registered_source, scope_tenants, stored, write_error,
};
use crate::context::{Context, block, read_envelope};
use crate::dlq::DlqFilter;
use crate::error::JobError;

/// A release or drop of quarantined hooks takes `filter.tenant` and
/// `filter.source`, both optional; its total is the quarantined hooks of its
/// tenant (or of the node).
///
/// # Errors
/// Invalid for a foreign field; not found for an unknown tenant or source;
/// a store failure.
pub(super) fn plan<K: Kv>(
    state: &Context<K>,
    kind: JobKind,
    filter: &DlqFilter,
) -> Result<Plan, JobError> {
    only(kind, filter, &["tenant", "source"])?;
    let mut plan = Plan::default();
    if let Some(s) = &filter.source {
        registered_source(state, s)?;
    }
    let scope = match &filter.tenant {
        Some(t) => state.tenant_ord(t)?,
        None => TenantOrd::NODE,
    };
    plan.total = Some(state.counter(scope, CounterField::Quarantined)?);
    Ok(plan)
}

/// One step of a release or drop of quarantined hooks: up to
/// [`STEP_ENTRIES`] ?Q entries of the job's tenants from its cursor, each of
/// the job's source released (rows resolved from the stored envelope with
/// its source's current configuration, as `crate::quarantine::release_quarantined`) or
/// dropped through the Writer with the job's advanced state, one batch.
pub(super) fn step<K: Kv>(
    state: &Context<K>,
    mut job: Job,
    raw: Vec<u8>,
) -> Result<Next, JobError> {
    let Some(edge) = state.edge() else {
        return Ok(Next::Stop);
    };
    let tenants = scope_tenants(state, job.filter.tenant.as_deref())?;
    let only: Option<SourceId> = match &job.filter.source {
        Some(s) => Some(registered_source(state, s)?),
        None => None,
    };
    let (mut ti, mut resume) = position(&tenants, cursor_of(&job)?);
    let mut ops = Vec::new();
    // (source, sink) of each row a filter kept a release from making, counted
    // once the step commits.
    let mut filtered: Vec<(String, String)> = Vec::new();
    // Releases that make no row (no sink's filter takes the hook).
    let mut unmatched = 0u64;
    let mut budget = STEP_ENTRIES;
    while let Some(&ord) = tenants.get(ti) {
        let after_seq = (resume.len() == 8).then(|| {
            Seq(u64::from_be_bytes(
                resume.as_slice().try_into().unwrap_or([0; 8]),
            ))
        });
        let page = ankusa_queue::list_quarantined(&*state.kv, ord, after_seq, budget)?;
        budget -= page.hooks.len();
        for h in &page.hooks {
            resume = h.seq.0.to_be_bytes().to_vec();
            let env = read_envelope(&*state.kv, ord, h.seq)?;
            let src = env.as_ref().map(|e| e.source);
            if only.is_some() && src != only {
                continue;
            }
            job.examined += 1;
            match job.kind {
                JobKind::ReleaseQuarantined => {
                    let routes = edge.routes.load();
                    let route = env
                        .as_ref()
                        .and_then(|e| routes.sources.iter().find(|r| r.id == e.source));
                    let (Some(env), Some(route)) = (env.as_ref(), route) else {
                        job.skipped += 1; // no envelope, or its source is not configured
                        continue;
                    };
                    let headers: Vec<Header<'_>> = env
                        .headers
                        .iter()
                        .map(|(n, v)| (n.as_slice(), v.as_slice()))
                        .collect();
                    let r = route.resolve(&headers, &ParsedBody::new(&env.body));
                    filtered.extend(
                        r.filtered
                            .iter()
                            .map(|sink| (route.name.clone(), (*sink).to_owned())),
                    );
                    unmatched += u64::from(r.rows.is_empty());
                    ops.push(JobOp::Release {
                        tenant: ord,
                        seq: h.seq,
                        rows: r.rows,
                    });
                }
                _ => ops.push(JobOp::DropQuarantined {
                    tenant: ord,
                    seq: h.seq,
                }),
            }
        }
        if page.next.is_some() || budget == 0 {
            break;
        }
        ti += 1;
        resume = Vec::new();
    }
    advance(
        &mut job,
        (state.clock)(),
        ops.len(),
        tenants.get(ti).copied(),
        &resume,
    );
    let released = job.kind == JobKind::ReleaseQuarantined && !ops.is_empty();
    let writer = edge.writer.clone();
    let stats = Arc::clone(&edge.stats);
    drop(edge);
    block(writer.job_step(JobStep {
        state: stored(&job, raw)?,
        ops,
    }))
    .map_err(write_error(state))?;
    for (source, sink) in &filtered {
        stats.count_filtered(source, [sink.as_str()]);
    }
    stats
        .unmatched
        .fetch_add(unmatched, std::sync::atomic::Ordering::Relaxed);
    if released {
        state.wake();
    }
    if job.state == JobState::Done {
        info!(job = job.id, kind = ?job.kind, done = job.done, skipped = job.skipped, "quarantine job done");
        return Ok(Next::Stop);
    }
    Ok(Next::More)
}
