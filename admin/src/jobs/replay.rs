//! An archive replay (docs/design.md section 5, "Replayer"): a source's hooks
//! received in `[since, until)` copied as new hooks (`replay_of` set) with
//! rows for the source's current sinks (or the chosen ones), through the
//! Writer (`WriterHandle::job_step`: the copies take the next seqs, the job's
//! state is compare-and-set in the same group batch).

use std::collections::BTreeSet;

use ankusa_edge::server::{IngestRoutes, SourceRoute};
use ankusa_edge::{Header, ParsedBody};
use ankusa_engine::{Batch, Cf, Kv};
use ankusa_keys::{
    ArchiveKey, CounterField, SinkIx, TenantOrd, archive_time_range, quarantined_key,
};
use ankusa_queue::writer::{JobOp, JobStep};
use tracing::info;

use super::model::{
    Job, JobKind, JobState, Next, Plan, STEP_ENTRIES, advance, after, cursor_of, only, position,
    put, registered_source, source_tenants, stored, write_error,
};
use crate::context::{Context, block, read_envelope};
use crate::dlq::DlqFilter;
use crate::error::JobError;

/// Most body bytes one replay step copies (then the step ends early).
pub const STEP_BODY_BYTES: usize = 8 << 20;

/// A replay takes `filter.source` (configured), `filter.since` (received at
/// or after), `filter.until` (before; default `now`), `filter.tenant`
/// (optional) and `sinks` (optional sink entry names of the source). Its
/// bound is the seq high-water mark now: hooks committed later, its own
/// copies included, are not in its range.
///
/// # Errors
/// Invalid for a missing or foreign field, an empty or inverted time range;
/// not found for an unknown tenant, source or sink.
pub(super) fn plan<K: Kv>(
    state: &Context<K>,
    filter: &mut DlqFilter,
    sinks: Option<Vec<String>>,
    now: u64,
) -> Result<Plan, JobError> {
    only(
        JobKind::Replay,
        filter,
        &["tenant", "source", "since", "until"],
    )?;
    let mut plan = Plan::default();
    let source = filter
        .source
        .clone()
        .ok_or_else(|| JobError::invalid("a replay needs filter.source"))?;
    let config = state.config.load();
    let configured = config
        .source(&source)
        .ok_or_else(|| JobError::not_found(format!("no source {source:?} in the configuration (a replay builds rows with its current sinks)")))?;
    registered_source(state, &source)?;
    let since = filter.since_ms.ok_or_else(|| {
        JobError::invalid("a replay needs filter.since (received at or after: unix ms or RFC 3339)")
    })?;
    let until = *filter.until_ms.get_or_insert(now);
    if since >= until {
        return Err(JobError::invalid(format!(
            "the time range is empty or inverted: since {since} is not before until {until}"
        )));
    }
    source_tenants(state, &source, filter.tenant.as_deref())?;
    if let Some(list) = sinks {
        if list.is_empty() {
            return Err(JobError::invalid(
                "sinks is empty: leave it out to replay to every sink of the source",
            ));
        }
        let mut chosen = BTreeSet::new();
        for s in &list {
            if !configured.sinks.iter().any(|e| &e.name == s) {
                return Err(JobError::not_found(format!(
                    "source {source:?} has no sink {s:?}"
                )));
            }
            chosen.insert(s.clone());
        }
        plan.sinks = Some(chosen.into_iter().collect());
    }
    plan.max_seq = Some(ankusa_queue::writer::seq_high_water(&*state.kv)?.0);
    Ok(plan)
}

/// The route of `source` in the running edge's routes.
fn route_of<'r>(routes: &'r IngestRoutes, source: &str) -> Result<&'r SourceRoute, JobError> {
    routes
        .sources
        .iter()
        .find(|r| r.name == source)
        .ok_or_else(|| JobError::conflict(format!("source {source:?} is no longer configured")))
}

/// One step of an archive replay (docs/design.md section 5, "Replayer"): up
/// to [`STEP_ENTRIES`] archive entries of the job's tenants in `[since,
/// until)` from its cursor (or [`STEP_BODY_BYTES`] of bodies), each hook of
/// the source with a seq up to the job's bound copied as a new hook through
/// the Writer (`JobOp::Replay`) with the job's advanced state, one batch.
/// Waits while the hook's tenant has half its queue bounds pending (or the
/// node half of its own).
pub(super) fn step<K: Kv>(
    state: &Context<K>,
    mut job: Job,
    raw: Vec<u8>,
) -> Result<Next, JobError> {
    let Some(edge) = state.edge() else {
        return Ok(Next::Stop);
    };
    let source = job.filter.source.clone().unwrap_or_default();
    // One configuration for the whole step (a reload replaces it whole).
    let routes = edge.routes.load_full();
    let route = route_of(&routes, &source)?;
    let tenants = source_tenants(state, &source, job.filter.tenant.as_deref())?;
    let bound = |ord: TenantOrd| {
        route
            .tenant
            .iter()
            .chain(route.path_tenants.values())
            .find(|t| t.ord == ord)
            .map(|t| (t.max_pending, t.max_pending_bytes))
            .unwrap_or((routes.node_max_pending, routes.node_max_pending_bytes))
    };
    let chosen: Option<BTreeSet<SinkIx>> = job.sinks.as_ref().map(|names| {
        state
            .config
            .load()
            .source(&source)
            .map(|s| {
                s.sinks
                    .iter()
                    .filter(|e| names.contains(&e.name))
                    .map(|e| SinkIx(e.index))
                    .collect()
            })
            .unwrap_or_default()
    });
    let since = job.filter.since_ms.unwrap_or(0);
    let until = job.filter.until_ms.unwrap_or(u64::MAX);
    let max_seq = job.max_seq.unwrap_or(u64::MAX);
    let (mut ti, mut resume) = position(&tenants, cursor_of(&job)?);
    // Half the bounds: a replay never fills a tenant's queue for live traffic.
    if let Some(&ord) = tenants.get(ti) {
        let (max_rows, max_bytes) = bound(ord);
        let node_rows = state.counter(TenantOrd::NODE, CounterField::Pending)?;
        let node_bytes = state.counter(TenantOrd::NODE, CounterField::Bytes)?;
        if state.counter(ord, CounterField::Pending)?.saturating_mul(2) >= max_rows
            || state.counter(ord, CounterField::Bytes)?.saturating_mul(2) >= max_bytes
            || node_rows.saturating_mul(2) >= routes.node_max_pending
            || node_bytes.saturating_mul(2) >= routes.node_max_pending_bytes
        {
            let phase = "waiting for the tenant's queue to drain below half its bounds";
            if job.phase.as_deref() != Some(phase) {
                info!(
                    job = job.id,
                    tenant = ord.0,
                    "replay waits: the tenant has half its queue bounds pending"
                );
                job.phase = Some(phase.to_owned());
                job.updated_at_ms = (state.clock)();
                let mut batch = Batch::new();
                put(&mut batch, &job)?;
                state.commit(batch)?;
            }
            return Ok(Next::Wait);
        }
    }
    job.phase = None;
    let mut ops = Vec::new();
    let mut budget = STEP_ENTRIES;
    let mut bytes = 0usize;
    'tenants: while let Some(&ord) = tenants.get(ti) {
        let mut range = archive_time_range(ord, since, until);
        if resume.as_slice() > range.start.as_slice() {
            range.start = resume.clone();
        }
        let entries = state.kv.scan(
            Cf::Archive,
            &range,
            ankusa_engine::Direction::Forward,
            budget,
        )?;
        let full = entries.len() == budget;
        for (k, _) in entries {
            budget -= 1;
            resume = after(&k);
            let ak = ArchiveKey::decode(&k).map_err(JobError::store)?;
            if ak.seq.0 > max_seq {
                continue; // committed after the job began: not in its range
            }
            let Some(env) = read_envelope(&*state.kv, ord, ak.seq).ok().flatten() else {
                job.skipped += 1; // its envelope is gone (retention or a drop)
                continue;
            };
            if env.source != route.id || env.replay_of.is_some() {
                continue; // another source's hook, or an earlier replay's copy
            }
            job.examined += 1;
            if state
                .kv
                .get(Cf::Index, &quarantined_key(ord, ak.seq))?
                .is_some()
            {
                job.skipped += 1; // held in quarantine: release it instead
                continue;
            }
            let headers: Vec<Header<'_>> = env
                .headers
                .iter()
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .collect();
            let (mut rows, _) = route.rows_for(&headers, &ParsedBody::new(&env.body));
            if let Some(chosen) = &chosen {
                rows.retain(|r| chosen.contains(&r.sink));
            }
            if rows.is_empty() {
                job.skipped += 1;
                continue;
            }
            bytes += env.body.len();
            let mut copy = env;
            copy.replay_of = Some(ak.seq);
            ops.push(JobOp::Replay {
                tenant: ord,
                envelope: copy,
                rows,
            });
            if bytes >= STEP_BODY_BYTES || budget == 0 {
                break 'tenants;
            }
        }
        if full || budget == 0 {
            break;
        }
        // This tenant's range is done.
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
    let n = ops.len();
    let edge_writer = edge.writer.clone();
    drop(edge);
    block(edge_writer.job_step(JobStep {
        state: stored(&job, raw)?,
        ops,
    }))
    .map_err(write_error(state))?;
    if n > 0 {
        state.wake();
    }
    if job.state == JobState::Done {
        info!(
            job = job.id,
            replayed = job.done,
            examined = job.examined,
            skipped = job.skipped,
            "archive replay done"
        );
        return Ok(Next::Stop);
    }
    Ok(Next::More)
}
