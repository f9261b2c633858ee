//! The job model (docs/design.md section 5, "Admin API"): a job's stored
//! state ([`Job`]: versioned JSON in cf `meta` under `keys::meta::job_key`),
//! what a step answers ([`Next`]), what a new job settles ([`Plan`]), and
//! what every job kind's module shares: its tenants, its cursor, how a
//! Writer's or the pipeline's refusal reads, and how a job ends.
//!
//! The job kinds' modules (`dlq`, `replay`, `purge`, `retire`,
//! `quarantine`) depend on this module and never on each other; the runner
//! (`jobs`) depends on them.

use ankusa_engine::{Batch, Cf, Kv, Read};
use ankusa_keys::meta::job_key;
use ankusa_keys::{SourceId, TenantOrd};
use ankusa_queue::writer::{JobState as StoredState, WriteError};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::context::{Context, ControlFailure};
use crate::dlq::DlqFilter;
use crate::error::JobError;

/// Most archive entries (a replay) or ?Q entries (a release or drop) one step
/// examines.
pub const STEP_ENTRIES: usize = 256;
/// Entries one purge page or one page of a source's dead letters examines.
pub const PAGE_ENTRIES: usize = 256;
/// The version of the job state this binary writes; another is refused.
pub(crate) const JOB_VERSION: u8 = 1;

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

impl JobKind {
    /// The kind as the API and the stored state write it (`purge_tenant`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Revive => "revive",
            JobKind::Drop => "drop",
            JobKind::Replay => "replay",
            JobKind::PurgeTenant => "purge_tenant",
            JobKind::DeadLetterSource => "dead_letter_source",
            JobKind::ReleaseQuarantined => "release_quarantined",
            JobKind::DropQuarantined => "drop_quarantined",
        }
    }
}

impl JobState {
    /// The state as the API and the stored state write it (`running`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Cancelled => "cancelled",
            JobState::Failed => "failed",
        }
    }
}

/// A job's state as stored (versioned JSON, `v`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    /// `JOB_VERSION` (the state version this binary writes).
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
    /// whose source is no longer configured; a revive: a row whose source or
    /// sink entry is no longer configured; a revive or drop: a row of a
    /// tenant being purged).
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

/// Reads job `id`.
///
/// # Errors
/// A store failure or a state this binary cannot read.
pub fn read_job(read: &impl Read, id: u64) -> Result<Option<Job>, JobError> {
    Ok(read_job_raw(read, id)?.map(|(job, _)| job))
}

/// Reads job `id` with its stored bytes (what a Writer step compares).
///
/// # Errors
/// As [`read_job`].
pub fn read_job_raw(read: &impl Read, id: u64) -> Result<Option<(Job, Vec<u8>)>, JobError> {
    match read.get(Cf::Meta, &job_key(id))? {
        Some(raw) => decode(&raw).map(|j| Some((j, raw.to_vec()))),
        None => Ok(None),
    }
}

/// A job's state from its stored bytes.
///
/// # Errors
/// A state that does not decode, or that another version wrote.
pub fn decode(raw: &[u8]) -> Result<Job, JobError> {
    let job: Job = serde_json::from_slice(raw)
        .map_err(|e| JobError::store(format!("a job's state does not decode: {e}")))?;
    if job.v != JOB_VERSION {
        return Err(JobError::store(format!(
            "job {} was written by another ankusa (state version {})",
            job.id, job.v
        )));
    }
    Ok(job)
}

/// The stored bytes of `job`.
pub fn encode(job: &Job) -> Result<Vec<u8>, JobError> {
    serde_json::to_vec(job).map_err(JobError::store)
}

/// Puts `job`'s state into `batch`.
pub fn put(batch: &mut Batch, job: &Job) -> Result<(), JobError> {
    batch.put(Cf::Meta, job_key(job.id), encode(job)?);
    Ok(())
}

/// What the job task does after a step.
pub enum Next {
    /// Take the next step soon.
    More,
    /// Look again later (waiting for something else to happen).
    Wait,
    /// The job left `running`, or cannot go on in this run.
    Stop,
}

/// What a job kind's `plan` settled for a new job.
#[derive(Default)]
pub struct Plan {
    /// What it expects to examine ([`Job::total`]).
    pub total: Option<u64>,
    /// A replay's sink entries ([`Job::sinks`]).
    pub sinks: Option<Vec<String>>,
    /// A replay's seq bound ([`Job::max_seq`]).
    pub max_seq: Option<u64>,
    /// What it is doing first ([`Job::phase`]).
    pub phase: Option<String>,
}

pub(crate) fn kind_name(kind: JobKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Refuses a filter field that a job of `kind` does not take (each field
/// given, in the order tenant, source, sink, reason, since, until, must be in
/// `allowed`).
///
/// # Errors
/// [`JobError::Invalid`] naming the first foreign field.
pub(crate) fn only(kind: JobKind, f: &DlqFilter, allowed: &[&str]) -> Result<(), JobError> {
    let given = [
        ("tenant", f.tenant.is_some()),
        ("source", f.source.is_some()),
        ("sink", f.sink.is_some()),
        ("reason", f.reason.is_some()),
        ("since", f.since_ms.is_some()),
        ("until", f.until_ms.is_some()),
    ];
    match given
        .into_iter()
        .find(|(g, on)| *on && !allowed.contains(g))
    {
        Some((g, _)) => Err(JobError::invalid(format!(
            "filter.{g} does not apply to a {} job",
            kind_name(kind)
        ))),
        None => Ok(()),
    }
}

/// The tenants whose hooks `source` takes (a fixed tenant, or every tenant of
/// the configuration for a tenant_path source; every registered tenant when
/// the source is no longer configured), narrowed to `only`; in ordinal order.
///
/// # Errors
/// 404 for an unknown tenant, 400 for one the source does not serve.
pub(crate) fn source_tenants<K: Kv>(
    state: &Context<K>,
    source: &str,
    only: Option<&str>,
) -> Result<Vec<TenantOrd>, JobError> {
    let names: Vec<String> = match state.config.load().source(source).map(|s| &s.tenant) {
        Some(ankusa_config::TenantBinding::Fixed(t)) => vec![t.clone()],
        Some(ankusa_config::TenantBinding::Path) => state
            .config
            .load()
            .tenants
            .iter()
            .map(|t| t.name.clone())
            .collect(),
        None => state.registry.load().tenants.keys().cloned().collect(),
    };
    let mut ords: Vec<TenantOrd> = names
        .iter()
        .filter_map(|n| state.registry.load().tenants.get(n).copied())
        .collect();
    if let Some(t) = only {
        let ord = state.tenant_ord(t)?;
        if !ords.contains(&ord) {
            return Err(JobError::invalid(format!(
                "tenant {t:?} takes no hooks of source {source:?}"
            )));
        }
        ords = vec![ord];
    }
    ords.sort();
    Ok(ords)
}

/// Every registered tenant, or `only`, in ordinal order.
pub(crate) fn scope_tenants<K: Kv>(
    state: &Context<K>,
    only: Option<&str>,
) -> Result<Vec<TenantOrd>, JobError> {
    let mut ords: Vec<TenantOrd> = match only {
        Some(t) => vec![state.tenant_ord(t)?],
        None => state.registry.load().tenants.values().copied().collect(),
    };
    ords.sort();
    Ok(ords)
}

pub(crate) fn registered_source<K: Kv>(
    state: &Context<K>,
    name: &str,
) -> Result<SourceId, JobError> {
    state
        .registry
        .load()
        .sources
        .get(name)
        .copied()
        .ok_or_else(|| JobError::not_found(format!("no source {name:?}")))
}

/// The name of tenant `ord` in the registry (its ordinal when the registry
/// does not have it).
pub(crate) fn tenant_name<K: Kv>(state: &Context<K>, ord: TenantOrd) -> String {
    state
        .registry
        .load()
        .tenants
        .iter()
        .find(|(_, o)| **o == ord)
        .map_or_else(|| format!("#{}", ord.0), |(n, _)| format!("{n:?}"))
}

/// An error of the Writer as the API reports it (a tenant by its name).
pub(crate) fn write_error<K: Kv>(state: &Context<K>) -> impl Fn(WriteError) -> JobError + '_ {
    move |e| write_error_of(state, e)
}

pub(crate) fn write_error_of<K: Kv>(state: &Context<K>, e: WriteError) -> JobError {
    match e {
        WriteError::TenantPurging { tenant } => JobError::conflict(format!(
            "tenant {} is being purged",
            tenant_name(state, tenant)
        )),
        WriteError::NotQuarantined { tenant, seq } => {
            JobError::conflict(format!("hook {seq} of tenant {tenant} is not quarantined"))
        }
        WriteError::Refused(m) => JobError::conflict(m),
        WriteError::Stopped => {
            JobError::unavailable("the Writer has stopped (the relay is stopping)")
        }
        WriteError::Store(m) => JobError::store(m),
    }
}

/// An error of the pipeline's controls as the API reports it.
pub(crate) fn control_error(e: ControlFailure) -> JobError {
    match e {
        ControlFailure::NotConfigured => JobError::conflict("not configured in the running relay"),
        ControlFailure::Refused(m) => JobError::conflict(m),
        ControlFailure::Unavailable(m) => JobError::unavailable(m),
    }
}

pub(crate) fn stored(job: &Job, raw: Vec<u8>) -> Result<StoredState, JobError> {
    Ok(StoredState {
        key: job_key(job.id),
        expect: Some(raw),
        value: encode(job)?,
    })
}

/// The job's cursor: the tenant it is at and what it resumes from there.
pub(crate) fn cursor_of(job: &Job) -> Result<Option<(TenantOrd, Vec<u8>)>, JobError> {
    let Some(c) = &job.cursor else {
        return Ok(None);
    };
    let raw = URL_SAFE_NO_PAD
        .decode(c.as_bytes())
        .map_err(|_| JobError::store(format!("job {}'s cursor does not decode", job.id)))?;
    if raw.len() < 4 {
        return Err(JobError::store(format!(
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
pub(crate) fn advance(
    job: &mut Job,
    now: u64,
    done: usize,
    next: Option<TenantOrd>,
    resume: &[u8],
) {
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

pub(crate) fn set_cursor(job: &mut Job, at: Option<(TenantOrd, &[u8])>) {
    job.cursor = at.map(|(ord, rest)| {
        let mut raw = ord.0.to_be_bytes().to_vec();
        raw.extend_from_slice(rest);
        URL_SAFE_NO_PAD.encode(raw)
    });
}

/// Where a multi-tenant scan is: the index in `tenants` of the cursor's
/// tenant (or the next one, when the configuration lost it) and the resume
/// bytes inside it.
pub(crate) fn position(
    tenants: &[TenantOrd],
    at: Option<(TenantOrd, Vec<u8>)>,
) -> (usize, Vec<u8>) {
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

pub(crate) fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// Sets a job that leaves `running` to `to` (`done`, `cancelled`, `failed`
/// with `error`) at `now`: its state, phase, error and times.
pub(crate) fn settle(job: &mut Job, to: JobState, error: Option<String>, now: u64) {
    job.state = to;
    // The phase says what a running job is doing; once it stops, why it
    // stopped (a replay waiting on its bounds and then failed must not keep
    // saying it waits).
    job.phase = match to {
        JobState::Running => job.phase.take(),
        JobState::Done => None,
        JobState::Cancelled => Some("cancelled by an operator".to_owned()),
        JobState::Failed => Some(format!("stopped: {}", error.as_deref().unwrap_or("failed"))),
    };
    job.error = error;
    job.updated_at_ms = now;
    job.finished_at_ms = Some(now);
}

/// Ends a running job that holds nothing (a DLQ revive or drop, a replay, a
/// release or drop of quarantined hooks): its final state, committed `Sync`.
/// The write lock is held.
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
    let mut batch = Batch::new();
    put(&mut batch, &job)?;
    state.commit(batch)?;
    Ok(job)
}
