//! The steps of the admin jobs that are not DLQ revives or drops
//! (docs/design.md section 5, "Admin API", "Replayer", "Purge a tenant",
//! "Retire a source", "Quarantine"): what each kind of job takes
//! ([`plan`]), one bounded step of each ([`step`]), and how a job ends
//! ([`finish`]: done, cancelled or failed, with what a purge or a retirement
//! must undo).
//!
//! Every step runs under the admin write lock on a blocking thread, and its
//! work and the job's advanced state are one batch:
//! - a replay and a release or drop of quarantined hooks go through the
//!   Writer (`WriterHandle::job_step`: the copies take the next seqs, the
//!   state is compare-and-set);
//! - a purge page and a page of a source's dead letters are built and
//!   committed on the pipeline's task (`PipelineControl::exclusive`), so they
//!   never race the pipeline's own batches on the same rows.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use ankusa_engine::{Batch, Cf, Kv};
use ankusa_keys::meta::job_key;
use ankusa_keys::{
    ArchiveKey, CounterField, Seq, SinkIx, SourceId, TenantOrd, archive_time_range, counter_key,
    quarantined_key,
};
use ankusa_queue::Cursor;
use ankusa_queue::writer::{JobOp, JobState as StoredState, JobStep, WriteError};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tracing::{info, warn};

use super::api::{ApiError, tenant_ord};
use super::dlq::{self, DlqFilter};
use super::jobs::{Job, JobKind, JobState, encode, put};
use super::views::read_envelope;
use super::{AdminState, ControlFailure, block};
use ankusa_edge::server::{Edge, SourceRoute};
use ankusa_edge::{Header, ParsedBody};

/// Most archive entries (a replay) or ?Q entries (a release or drop) one step
/// examines.
pub const STEP_ENTRIES: usize = 256;
/// Most body bytes one replay step copies (then the step ends early).
pub const STEP_BODY_BYTES: usize = 8 << 20;
/// Entries one purge page or one page of a source's dead letters examines.
pub const PAGE_ENTRIES: usize = 256;
/// The dead-letter reason of a source's rows when the request gives none.
pub const DEFAULT_RETIRE_REASON: &str = "source retired through the admin API";
/// A purge whose pages are done and whose tenant is to be released.
const FINISHING: &str = "finishing";
/// A retirement whose pages are done, waiting for the source's calls in flight.
const WAITING_CALLS: &str = "waiting for calls in flight";

/// What the job task does after a step.
pub(crate) enum Next {
    /// Take the next step soon.
    More,
    /// Look again later (waiting for something else to happen).
    Wait,
    /// The job left `running`, or cannot go on in this run.
    Stop,
}

/// What [`plan`] settled for a new job.
pub(crate) struct Plan {
    pub total: Option<u64>,
    pub sinks: Option<Vec<String>>,
    pub max_seq: Option<u64>,
    pub phase: Option<String>,
}

fn kind_name(kind: JobKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn counter<K: Kv>(
    state: &AdminState<K>,
    tenant: TenantOrd,
    field: CounterField,
) -> Result<u64, ApiError> {
    Ok(state.kv.counter(&counter_key(tenant, field))?.max(0) as u64)
}

/// The tenants whose hooks `source` takes (a fixed tenant, or every tenant of
/// the configuration for a tenant_path source; every registered tenant when
/// the source is no longer configured), narrowed to `only`; in ordinal order.
///
/// # Errors
/// 404 for an unknown tenant, 400 for one the source does not serve.
fn source_tenants<K: Kv>(
    state: &AdminState<K>,
    source: &str,
    only: Option<&str>,
) -> Result<Vec<TenantOrd>, ApiError> {
    let names: Vec<String> = match state.config.source(source).map(|s| &s.tenant) {
        Some(ankusa_config::TenantBinding::Fixed(t)) => vec![t.clone()],
        Some(ankusa_config::TenantBinding::Path) => state
            .config
            .tenants
            .iter()
            .map(|t| t.name.clone())
            .collect(),
        None => state.registry.tenants.keys().cloned().collect(),
    };
    let mut ords: Vec<TenantOrd> = names
        .iter()
        .filter_map(|n| state.registry.tenants.get(n).copied())
        .collect();
    if let Some(t) = only {
        let ord = tenant_ord(&state.registry, t)?;
        if !ords.contains(&ord) {
            return Err(ApiError::bad_request(format!(
                "tenant {t:?} takes no hooks of source {source:?}"
            )));
        }
        ords = vec![ord];
    }
    ords.sort();
    Ok(ords)
}

/// Every registered tenant, or `only`, in ordinal order.
fn scope_tenants<K: Kv>(
    state: &AdminState<K>,
    only: Option<&str>,
) -> Result<Vec<TenantOrd>, ApiError> {
    let mut ords: Vec<TenantOrd> = match only {
        Some(t) => vec![tenant_ord(&state.registry, t)?],
        None => state.registry.tenants.values().copied().collect(),
    };
    ords.sort();
    Ok(ords)
}

fn registered_source<K: Kv>(state: &AdminState<K>, name: &str) -> Result<SourceId, ApiError> {
    state
        .registry
        .sources
        .get(name)
        .copied()
        .ok_or_else(|| ApiError::not_found(format!("no source {name:?}")))
}

/// Checks a new job's request for its kind and settles what it stores
/// (docs/design.md section 5, "Admin API"):
/// - `revive`, `drop`: the DLQ filter (every field optional);
/// - `replay`: `filter.source` (configured), `filter.since` (received at or
///   after), `filter.until` (before; default now), `filter.tenant`
///   (optional), `sinks` (optional sink entry names of the source);
/// - `purge_tenant`: `filter.tenant` only; a tenant already being purged is
///   a 409;
/// - `dead_letter_source`: `filter.source`, `filter.tenant` (optional),
///   `filter.reason` (the dead-letter reason, default
///   [`DEFAULT_RETIRE_REASON`]);
/// - `release_quarantined`, `drop_quarantined`: `filter.tenant` and
///   `filter.source`, both optional.
///
/// A field the kind does not take is a 400.
///
/// # Errors
/// 400 for a missing or foreign field, an empty or inverted time range; 404
/// for an unknown tenant, source or sink; 409 for a tenant being purged.
pub(crate) fn plan<K: Kv>(
    state: &AdminState<K>,
    kind: JobKind,
    filter: &mut DlqFilter,
    sinks: Option<Vec<String>>,
    now: u64,
) -> Result<Plan, ApiError> {
    let name = kind_name(kind);
    let foreign = |field: &str| {
        ApiError::bad_request(format!("filter.{field} does not apply to a {name} job"))
    };
    let given = |f: &DlqFilter| -> Vec<&'static str> {
        let mut out = Vec::new();
        if f.tenant.is_some() {
            out.push("tenant");
        }
        if f.source.is_some() {
            out.push("source");
        }
        if f.sink.is_some() {
            out.push("sink");
        }
        if f.reason.is_some() {
            out.push("reason");
        }
        if f.since_ms.is_some() {
            out.push("since");
        }
        if f.until_ms.is_some() {
            out.push("until");
        }
        out
    };
    let only = |f: &DlqFilter, allowed: &[&str]| -> Result<(), ApiError> {
        match given(f).into_iter().find(|g| !allowed.contains(g)) {
            Some(g) => Err(foreign(g)),
            None => Ok(()),
        }
    };
    if sinks.is_some() && kind != JobKind::Replay {
        return Err(ApiError::bad_request(format!(
            "sinks does not apply to a {name} job (a replay's only)"
        )));
    }
    let purging = ankusa_queue::read_purges(&*state.kv)?;
    let mut plan = Plan {
        total: None,
        sinks: None,
        max_seq: None,
        phase: None,
    };
    match kind {
        JobKind::Revive | JobKind::Drop => {
            filter.check(state)?;
            let scope = match &filter.tenant {
                Some(t) => tenant_ord(&state.registry, t)?,
                None => TenantOrd::NODE,
            };
            plan.total = Some(counter(state, scope, CounterField::Dead)?);
        }
        JobKind::Replay => {
            only(filter, &["tenant", "source", "since", "until"])?;
            let source = filter
                .source
                .clone()
                .ok_or_else(|| ApiError::bad_request("a replay needs filter.source"))?;
            let configured = state
                .config
                .source(&source)
                .ok_or_else(|| ApiError::not_found(format!("no source {source:?} in the configuration (a replay builds rows with its current sinks)")))?;
            registered_source(state, &source)?;
            let since = filter.since_ms.ok_or_else(|| {
                ApiError::bad_request(
                    "a replay needs filter.since (received at or after: unix ms or RFC 3339)",
                )
            })?;
            let until = *filter.until_ms.get_or_insert(now);
            if since >= until {
                return Err(ApiError::bad_request(format!(
                    "the time range is empty or inverted: since {since} is not before until {until}"
                )));
            }
            source_tenants(state, &source, filter.tenant.as_deref())?;
            if let Some(list) = sinks {
                if list.is_empty() {
                    return Err(ApiError::bad_request(
                        "sinks is empty: leave it out to replay to every sink of the source",
                    ));
                }
                let mut chosen = BTreeSet::new();
                for s in &list {
                    if !configured.sinks.iter().any(|e| &e.name == s) {
                        return Err(ApiError::not_found(format!(
                            "source {source:?} has no sink {s:?}"
                        )));
                    }
                    chosen.insert(s.clone());
                }
                plan.sinks = Some(chosen.into_iter().collect());
            }
            plan.max_seq = Some(ankusa_queue::writer::seq_high_water(&*state.kv)?.0);
        }
        JobKind::PurgeTenant => {
            only(filter, &["tenant"])?;
            let t = filter
                .tenant
                .clone()
                .ok_or_else(|| ApiError::bad_request("a purge needs filter.tenant"))?;
            let ord = tenant_ord(&state.registry, &t)?;
            if let Some(job) = purging.get(&ord) {
                return Err(ApiError::conflict(format!(
                    "tenant {t:?} is already being purged by job {job}"
                )));
            }
            let mut total = 0;
            for f in [
                CounterField::Pending,
                CounterField::Dead,
                CounterField::Quarantined,
            ] {
                total += counter(state, ord, f)?;
            }
            plan.total = Some(total);
            plan.phase = Some(ankusa_queue::purge_phase(None).to_owned());
        }
        JobKind::DeadLetterSource => {
            only(filter, &["tenant", "source", "reason"])?;
            let source = filter.source.clone().ok_or_else(|| {
                ApiError::bad_request("a dead_letter_source job needs filter.source")
            })?;
            registered_source(state, &source)?;
            let mut total = 0;
            for ord in source_tenants(state, &source, filter.tenant.as_deref())? {
                total += counter(state, ord, CounterField::Pending)?;
            }
            filter
                .reason
                .get_or_insert_with(|| DEFAULT_RETIRE_REASON.to_owned());
            plan.total = Some(total);
        }
        JobKind::ReleaseQuarantined | JobKind::DropQuarantined => {
            only(filter, &["tenant", "source"])?;
            if let Some(s) = &filter.source {
                registered_source(state, s)?;
            }
            let scope = match &filter.tenant {
                Some(t) => tenant_ord(&state.registry, t)?,
                None => TenantOrd::NODE,
            };
            plan.total = Some(counter(state, scope, CounterField::Quarantined)?);
        }
    }
    Ok(plan)
}

/// The name of tenant `ord` in the registry (its ordinal when the registry
/// does not have it).
fn tenant_name<K: Kv>(state: &AdminState<K>, ord: TenantOrd) -> String {
    state
        .registry
        .tenants
        .iter()
        .find(|(_, o)| **o == ord)
        .map_or_else(|| format!("#{}", ord.0), |(n, _)| format!("{n:?}"))
}

/// An error of the Writer as the API reports it (a tenant by its name).
fn write_error<K: Kv>(state: &AdminState<K>) -> impl Fn(WriteError) -> ApiError + '_ {
    move |e| write_error_of(state, e)
}

fn write_error_of<K: Kv>(state: &AdminState<K>, e: WriteError) -> ApiError {
    match e {
        WriteError::TenantPurging { tenant } => ApiError::conflict(format!(
            "tenant {} is being purged",
            tenant_name(state, tenant)
        )),
        WriteError::NotQuarantined { tenant, seq } => {
            ApiError::conflict(format!("hook {seq} of tenant {tenant} is not quarantined"))
        }
        WriteError::Refused(m) => ApiError::conflict(m),
        WriteError::Stopped => {
            ApiError::unavailable("the Writer has stopped (the relay is stopping)")
        }
        WriteError::Store(m) => ApiError::store(m),
    }
}

/// An error of the pipeline's controls as the API reports it.
fn control_error(e: ControlFailure) -> ApiError {
    match e {
        ControlFailure::NotConfigured => ApiError::conflict("not configured in the running relay"),
        ControlFailure::Refused(m) => ApiError::conflict(m),
        ControlFailure::Unavailable(m) => ApiError::unavailable(m),
    }
}

fn stored(job: &Job, raw: Vec<u8>) -> Result<StoredState, ApiError> {
    Ok(StoredState {
        key: job_key(job.id),
        expect: Some(raw),
        value: encode(job)?,
    })
}

/// The job's cursor: the tenant it is at and what it resumes from there.
fn cursor_of(job: &Job) -> Result<Option<(TenantOrd, Vec<u8>)>, ApiError> {
    let Some(c) = &job.cursor else {
        return Ok(None);
    };
    let raw = URL_SAFE_NO_PAD
        .decode(c.as_bytes())
        .map_err(|_| ApiError::store(format!("job {}'s cursor does not decode", job.id)))?;
    if raw.len() < 4 {
        return Err(ApiError::store(format!(
            "job {}'s cursor is too short",
            job.id
        )));
    }
    let (ord, rest) = raw.split_at(4);
    let ord = u32::from_be_bytes([ord[0], ord[1], ord[2], ord[3]]);
    Ok(Some((TenantOrd(ord), rest.to_vec())))
}

/// The end of a step that walks tenants in order: `done` more ops, and the
/// cursor at `(next tenant, resume)`, or the job done when no tenant is left.
fn advance(job: &mut Job, now: u64, done: usize, next: Option<TenantOrd>, resume: &[u8]) {
    job.updated_at_ms = now;
    job.done += done as u64;
    match next {
        Some(ord) => set_cursor(job, Some((ord, resume))),
        None => {
            set_cursor(job, None);
            job.state = JobState::Done;
            job.finished_at_ms = Some(now);
        }
    }
}

fn set_cursor(job: &mut Job, at: Option<(TenantOrd, &[u8])>) {
    job.cursor = at.map(|(ord, rest)| {
        let mut raw = ord.0.to_be_bytes().to_vec();
        raw.extend_from_slice(rest);
        URL_SAFE_NO_PAD.encode(raw)
    });
}

/// Where a multi-tenant scan is: the index in `tenants` of the cursor's
/// tenant (or the next one, when the configuration lost it) and the resume
/// bytes inside it.
fn position(tenants: &[TenantOrd], at: Option<(TenantOrd, Vec<u8>)>) -> (usize, Vec<u8>) {
    match at {
        None => (0, Vec::new()),
        Some((ord, rest)) => match tenants.iter().position(|t| *t == ord) {
            Some(i) => (i, rest),
            None => (
                tenants
                    .iter()
                    .position(|t| *t > ord)
                    .unwrap_or(tenants.len()),
                Vec::new(),
            ),
        },
    }
}

fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// One step of a job of a kind this module runs (the write lock held).
pub(crate) fn step<K: Kv>(state: &AdminState<K>, job: Job, raw: Vec<u8>) -> Result<Next, ApiError> {
    match job.kind {
        JobKind::Replay => replay_step(state, job, raw),
        JobKind::PurgeTenant => purge_step(state, job, raw),
        JobKind::DeadLetterSource => retire_step(state, job),
        JobKind::ReleaseQuarantined | JobKind::DropQuarantined => quarantine_step(state, job, raw),
        JobKind::Revive | JobKind::Drop => Ok(Next::Stop),
    }
}

/// Ends a running job in `to` (`done`, `cancelled`, `failed` with `error`),
/// undoing what it holds: a purge's mark is lifted through the Writer (with
/// the job's final state, compare-and-set) and the pipeline visits the tenant
/// again; a source's retirement ends. The write lock is held.
///
/// # Errors
/// 503 when the Writer is gone (the relay is stopping: the job is still
/// running and resumes at the next start), a store failure.
pub(crate) fn finish<K: Kv>(
    state: &AdminState<K>,
    mut job: Job,
    raw: Vec<u8>,
    to: JobState,
    error: Option<String>,
) -> Result<Job, ApiError> {
    let now = (state.clock)();
    job.state = to;
    // The phase says what a running job is doing; once it stops, why it
    // stopped (a replay waiting on its bounds and then failed must not keep
    // saying it waits).
    job.phase = match to {
        JobState::Running => job.phase,
        JobState::Done => None,
        JobState::Cancelled => Some("cancelled by an operator".to_owned()),
        JobState::Failed => Some(format!("stopped: {}", error.as_deref().unwrap_or("failed"))),
    };
    job.error = error;
    job.updated_at_ms = now;
    job.finished_at_ms = Some(now);
    match job.kind {
        JobKind::PurgeTenant => {
            let tenant = job.filter.tenant.clone().unwrap_or_default();
            let ord = tenant_ord(&state.registry, &tenant)?;
            let edge = state.edge().ok_or_else(|| {
                ApiError::unavailable(
                    "the relay is stopping: the purge's mark is lifted at the next start",
                )
            })?;
            block(edge.writer.purge_mark(ord, None, stored(&job, raw)?))
                .map_err(write_error(state))?;
            if let Ok(control) = state.pipeline()
                && let Err(e) = block(control.quiesce(ord, false))
            {
                warn!(tenant = %tenant, error = ?e, "the pipeline did not take the tenant back (it does at the next start)");
            }
            info!(job = job.id, tenant = %tenant, state = ?job.state, "tenant purge ended; the tenant takes hooks again");
        }
        JobKind::DeadLetterSource => {
            // The retirement ends first, so the rows the pipeline dead-lettered
            // for it up to its end are in the job's final `done`.
            if let Some(id) = job
                .filter
                .source
                .as_deref()
                .and_then(|s| state.registry.sources.get(s))
                .copied()
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
            dlq::commit(state, batch)?;
        }
        _ => {
            let mut batch = Batch::new();
            put(&mut batch, &job)?;
            dlq::commit(state, batch)?;
        }
    }
    Ok(job)
}

// ---- replay -----------------------------------------------------------------

/// The route of `source` in the running edge.
fn route_of<'e, K: Kv>(edge: &'e Edge<K>, source: &str) -> Result<&'e SourceRoute, ApiError> {
    edge.sources
        .iter()
        .find(|r| r.name == source)
        .ok_or_else(|| ApiError::conflict(format!("source {source:?} is no longer configured")))
}

/// One step of an archive replay (docs/design.md section 5, "Replayer"): up
/// to [`STEP_ENTRIES`] archive entries of the job's tenants in `[since,
/// until)` from its cursor (or [`STEP_BODY_BYTES`] of bodies), each hook of
/// the source with a seq up to the job's bound copied as a new hook through
/// the Writer (`JobOp::Replay`) with the job's advanced state, one batch.
/// Waits while the hook's tenant has half its queue bounds pending (or the
/// node half of its own).
fn replay_step<K: Kv>(state: &AdminState<K>, mut job: Job, raw: Vec<u8>) -> Result<Next, ApiError> {
    let Some(edge) = state.edge() else {
        return Ok(Next::Stop);
    };
    let source = job.filter.source.clone().unwrap_or_default();
    let route = route_of(&edge, &source)?;
    let tenants = source_tenants(state, &source, job.filter.tenant.as_deref())?;
    let bound = |ord: TenantOrd| {
        route
            .tenant
            .iter()
            .chain(route.path_tenants.values())
            .find(|t| t.ord == ord)
            .map(|t| (t.max_pending, t.max_pending_bytes))
            .unwrap_or((edge.node_max_pending, edge.node_max_pending_bytes))
    };
    let chosen: Option<BTreeSet<SinkIx>> = job.sinks.as_ref().map(|names| {
        state
            .config
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
        let node_rows = counter(state, TenantOrd::NODE, CounterField::Pending)?;
        let node_bytes = counter(state, TenantOrd::NODE, CounterField::Bytes)?;
        if counter(state, ord, CounterField::Pending)?.saturating_mul(2) >= max_rows
            || counter(state, ord, CounterField::Bytes)?.saturating_mul(2) >= max_bytes
            || node_rows.saturating_mul(2) >= edge.node_max_pending
            || node_bytes.saturating_mul(2) >= edge.node_max_pending_bytes
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
                dlq::commit(state, batch)?;
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
            let ak = ArchiveKey::decode(&k).map_err(ApiError::store)?;
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
        (state.wake)();
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

// ---- quarantine: release or drop of every hook a filter matches ---------------

/// One step of a release or drop of quarantined hooks: up to
/// [`STEP_ENTRIES`] ?Q entries of the job's tenants from its cursor, each of
/// the job's source released (rows resolved from the stored envelope with
/// its source's current configuration, as `Edge::release_quarantined`) or
/// dropped through the Writer with the job's advanced state, one batch.
fn quarantine_step<K: Kv>(
    state: &AdminState<K>,
    mut job: Job,
    raw: Vec<u8>,
) -> Result<Next, ApiError> {
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
                    let route = env
                        .as_ref()
                        .and_then(|e| edge.sources.iter().find(|r| r.id == e.source));
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
        (state.wake)();
    }
    if job.state == JobState::Done {
        info!(job = job.id, kind = ?job.kind, done = job.done, skipped = job.skipped, "quarantine job done");
        return Ok(Next::Stop);
    }
    Ok(Next::More)
}

// ---- purge --------------------------------------------------------------------

/// Creates a purge job: its state and the tenant's purge mark in one Writer
/// batch (docs/design.md section 5, "Purge a tenant"). From that commit the
/// Writer refuses the tenant's hooks; the job's first step quiesces the
/// pipeline's visits of it.
///
/// # Errors
/// 503 when the Writer is not there; a store failure.
pub(crate) fn begin_purge<K: Kv>(state: &AdminState<K>, job: &Job) -> Result<(), ApiError> {
    let tenant = job.filter.tenant.clone().unwrap_or_default();
    let ord = tenant_ord(&state.registry, &tenant)?;
    let edge = state
        .edge()
        .ok_or_else(|| ApiError::unavailable("the Writer is not running"))?;
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
fn purge_step<K: Kv>(state: &AdminState<K>, job: Job, raw: Vec<u8>) -> Result<Next, ApiError> {
    let tenant = job.filter.tenant.clone().unwrap_or_default();
    let ord = tenant_ord(&state.registry, &tenant)?;
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
                    ApiError::store(format!("job {}'s cursor does not decode", job.id))
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
        return Err(ApiError::store("the purge page was not built"));
    };
    if job.phase.as_deref() == Some(FINISHING) {
        let job = finish(state, job, raw, JobState::Done, None)?;
        info!(job = job.id, purged = job.done, "tenant purged");
        return Ok(Next::Stop);
    }
    Ok(Next::More)
}

// ---- a source's dead letters (retire a source) ---------------------------------

/// One step of a source's dead letters (docs/design.md section 5, "Retire a
/// source"): the source retired in the pipeline (idempotent: in memory only,
/// so it is said again after a restart), then one page of
/// `queue::dead_letter_source` (members before due rows, lane by lane) of the
/// job's current tenant with the job's advanced state, built and committed on
/// the pipeline's task. After the last tenant, the job waits until the
/// source has no call in flight (a failed attempt of a retired source is
/// dead-lettered by the pipeline), then ends and the retirement with it.
fn retire_step<K: Kv>(state: &AdminState<K>, job: Job) -> Result<Next, ApiError> {
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
                dlq::commit(state, batch)?;
            }
            return Ok(Next::Wait);
        }
        let raw = encode(&job)?;
        let job = finish(state, job, raw, JobState::Done, None)?;
        info!(job = job.id, source = %source, dead_lettered = job.done, "source's queued rows dead-lettered");
        return Ok(Next::Stop);
    }
    let (ti, resume) = position(&tenants, cursor_of(&job)?);
    let Some(&ord) = tenants.get(ti) else {
        job.phase = Some(WAITING_CALLS.to_owned());
        let mut batch = Batch::new();
        put(&mut batch, &job)?;
        dlq::commit(state, batch)?;
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

/// Whether `tenant` is being purged (its mark is in `meta`): admin writes to
/// its rows are refused meanwhile.
pub(crate) fn purging<K: Kv>(state: &AdminState<K>, tenant: TenantOrd) -> Result<bool, ApiError> {
    Ok(state
        .kv
        .get(Cf::Meta, &ankusa_keys::meta::purge_key(tenant))?
        .is_some())
}
