//! What an admin action and a job's step work with ([`Context`]): the store,
//! the configuration and the store's names, the clock, the one-at-a-time
//! write lock, and the handles of the other tasks: the ingest edge (its
//! Writer and routes) and the pipeline's controls ([`PipelineControl`]).
//!
//! The context owns them; the HTTP layer holds one (`http::AdminState`) and
//! the job runner shares it with its tasks.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ankusa_config::Config;
use ankusa_edge::server::Edge;
use ankusa_engine::{Batch, Cf, Kv, Read};
use ankusa_keys::meta::PauseTarget;
use ankusa_keys::{
    CounterField, Envelope, Seq, SinkIx, SourceId, TenantOrd, counter_key, hook_key,
};
use ankusa_queue::Registry;
use arc_swap::ArcSwap;

use crate::error::JobError;

/// A future the admin API waits on from its blocking threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Admin work run on the pipeline's task (`pipeline::PipelineHandle::
/// exclusive`): reads the live store, returns the batch the pipeline commits.
pub type PipelineWork = Box<dyn FnOnce() -> Result<Batch, String> + Send>;

/// Why the pipeline did not do what the admin API asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlFailure {
    /// The target is not a configured source or sink entry.
    NotConfigured,
    /// The work refused to build its batch (its message).
    Refused(String),
    /// The pipeline has stopped, or the store failed.
    Unavailable(String),
}

/// Why a reload changed nothing (docs/design.md section 5, "Reload").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadFailure {
    /// The file does not load or does not pass `check-config`: every problem,
    /// as `check-config` says it (422).
    Invalid(Vec<String>),
    /// The file is valid but cannot be applied while the relay runs (a
    /// listener, `data_dir` or the store changed; queued work of a removed
    /// source or sink entry): every reason, named (409).
    Refused(Vec<String>),
    /// The relay is stopping, or the store failed (503).
    Unavailable(String),
}

/// What a reload did: the configuration now running (its hash and load
/// time) and what changed, one line each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadDone {
    /// The loaded configuration's status after the reload.
    pub status: ConfigStatus,
    /// What changed (`source "billing" added`, ...); empty when the file is
    /// the one already running.
    pub changes: Vec<String>,
}

/// The configuration running: where it came from, its hash, when it was
/// loaded, and how many reloads were applied or refused since the start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigStatus {
    /// The file (`None`: the embedded demo configuration).
    pub file: Option<String>,
    /// SHA-256 of the loaded configuration file's bytes, hex.
    pub hash: String,
    /// When it was loaded (the start, or the last reload applied), unix ms.
    pub loaded_at_ms: u64,
    /// Reloads applied since the start.
    pub reloads_applied: u64,
    /// Reloads refused since the start.
    pub reloads_refused: u64,
}

/// Reloads the configuration (docs/design.md section 5, "Reload"): `serve`
/// implements it; `POST /v1/reload` calls it from a blocking thread of the
/// admin API.
pub trait ReloadControl: Send + Sync {
    /// Re-reads the configuration file and applies it, or says why not.
    fn reload(&self) -> BoxFuture<'_, Result<ReloadDone, ReloadFailure>>;
    /// The configuration running.
    fn status(&self) -> ConfigStatus;
}

/// What the admin API asks of the pipeline (docs/design.md section 5,
/// "Pause", "Purge a tenant", "Retire a source"). `serve` implements it over
/// `pipeline::PipelineHandle`; the admin crate does not depend on the
/// pipeline. Each call but [`PipelineControl::wake`] is awaited from a
/// blocking thread of the admin API.
pub trait PipelineControl: Send + Sync {
    /// Pauses `target` at run time (`Some(reason)`) or lifts its runtime
    /// pause (`None`), committed `Sync` and applied before it returns.
    fn set_pause(
        &self,
        target: PauseTarget,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<(), ControlFailure>>;
    /// Stops (`true`) or restarts the pipeline's visits of `tenant`.
    fn quiesce(&self, tenant: TenantOrd, quiet: bool) -> BoxFuture<'_, Result<(), ControlFailure>>;
    /// Retires `source` (`Some(reason)`) or ends it (`None`); the source's
    /// calls in flight now, and the rows the pipeline dead-lettered for the
    /// retirement since the previous call (taken by this one).
    fn retire(
        &self,
        source: SourceId,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<(usize, u64), ControlFailure>>;
    /// Runs `work` on the pipeline's task and commits its batch `Sync`.
    fn exclusive(&self, work: PipelineWork) -> BoxFuture<'_, Result<(), ControlFailure>>;
    /// Wakes the pipeline (rows were revived, released or replayed), as
    /// ingest's `on_commit` does.
    fn wake(&self);
}

/// The system clock, unix ms.
pub fn system_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What the admin actions and the jobs' steps read and write. It holds no
/// part of the edge that keeps the Writer alive for longer than the relay
/// runs ([`Context::detach_edge`]).
pub struct Context<K: Kv> {
    /// The store (maintained counters, the API's reads and batches).
    pub kv: Arc<K>,
    /// The configuration (names, bounds, sinks; its secrets are never shown,
    /// only the admin token is read, to check requests). A reload replaces
    /// it whole ([`Context::reconfigure`]); read it once per request or step.
    pub config: ArcSwap<Config>,
    /// The store's names and numbers (tenants, sources). A reload that adds
    /// names replaces it; it only grows (names are never taken back), so a
    /// registry newer than the configuration read beside it still names all
    /// of that configuration's tenants and sources.
    pub registry: ArcSwap<Registry>,
    /// Ready once the store is open and the pipeline has recovered the
    /// previous run's claimed rows (the pipeline sets it).
    pub ready: Arc<AtomicBool>,
    /// Set when the relay begins to stop: `/readyz` answers 503 from then on,
    /// and jobs stop between steps (the next start resumes them).
    pub shutting_down: Arc<AtomicBool>,
    /// Why the node takes no traffic now though it runs, if it does not
    /// (cluster mode: drained by an operator, so a load balancer sends it
    /// nothing before its restart): `/readyz` answers 503 with it. `None`:
    /// no such reason (a standalone relay).
    pub unready: Option<Box<dyn Fn() -> Option<String> + Send + Sync>>,
    /// Unix ms (default [`system_clock`]).
    pub clock: fn() -> u64,
    /// One admin mutation at a time: two revives of one row cannot race, and
    /// a job's step and a cancel do not interleave.
    pub writes: tokio::sync::Mutex<()>,
    /// The ingest edge: its Writer handle and its routes (quarantine
    /// releases and drops, archive replays, purge marks). `None` before it
    /// is attached and after [`Context::detach_edge`]: the Writer stops
    /// only when every handle is gone, so the relay detaches it when it
    /// begins to stop; a job step that finds none stops and is resumed at the
    /// next start.
    pub ingest: std::sync::Mutex<Option<Arc<Edge<K>>>>,
    /// The pipeline's controls (pauses, quiesce, retire, exclusive work,
    /// wake); `None` answers those routes 503 and wakes nobody.
    pub pipeline: Option<Box<dyn PipelineControl>>,
    /// The reload (`POST /v1/reload`, `GET /v1/config`); `None` answers
    /// those routes 503.
    pub reload: Option<Box<dyn ReloadControl>>,
}

impl<K: Kv> Context<K> {
    /// A context with no edge and no pipeline attached and the system clock.
    pub fn new(
        kv: Arc<K>,
        ready: Arc<AtomicBool>,
        shutting_down: Arc<AtomicBool>,
        config: Arc<Config>,
        registry: Registry,
    ) -> Context<K> {
        Context {
            kv,
            config: ArcSwap::new(config),
            registry: ArcSwap::from_pointee(registry),
            ready,
            shutting_down,
            unready: None,
            clock: system_clock,
            writes: tokio::sync::Mutex::new(()),
            ingest: std::sync::Mutex::new(None),
            pipeline: None,
            reload: None,
        }
    }

    /// Replaces the configuration and the registry (a reload: docs/design.md
    /// section 5, "Reload"), the registry first, so that every configuration
    /// read finds its names registered.
    pub fn reconfigure(&self, config: Arc<Config>, registry: Registry) {
        self.registry.store(Arc::new(registry));
        self.config.store(config);
    }

    /// Gives the admin API the edge (its Writer and routes).
    pub fn attach_edge(&self, edge: Arc<Edge<K>>) {
        *self.ingest.lock().unwrap_or_else(|p| p.into_inner()) = Some(edge);
    }

    /// Drops the admin API's hold on the edge (and so on the Writer), as the
    /// relay begins to stop.
    pub fn detach_edge(&self) {
        self.ingest.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// The edge, while attached.
    pub fn edge(&self) -> Option<Arc<Edge<K>>> {
        self.ingest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The pipeline's controls.
    ///
    /// # Errors
    /// [`JobError::Unavailable`] when there is none.
    pub fn pipeline(&self) -> Result<&dyn PipelineControl, JobError> {
        self.pipeline
            .as_deref()
            .ok_or_else(|| JobError::Unavailable("the pipeline is not running".to_owned()))
    }

    /// Wakes the pipeline (after a revive, a release, a replay).
    pub fn wake(&self) {
        if let Some(p) = &self.pipeline {
            p.wake();
        }
    }

    /// Unix ms.
    pub fn now(&self) -> u64 {
        (self.clock)()
    }

    /// Writes an admin batch `Sync` (docs/design.md section 5, "Admin API").
    ///
    /// # Errors
    /// A store failure.
    pub fn commit(&self, batch: Batch) -> Result<(), JobError> {
        self.kv.write(batch, ankusa_engine::Durability::Sync)?;
        Ok(())
    }

    /// A maintained counter of `tenant` (never below 0).
    ///
    /// # Errors
    /// A store failure.
    pub fn counter(&self, tenant: TenantOrd, field: CounterField) -> Result<u64, JobError> {
        Ok(self.kv.counter(&counter_key(tenant, field))?.max(0) as u64)
    }

    /// Whether `tenant` is being purged (its mark is in `meta`): admin writes
    /// to its rows are refused meanwhile.
    ///
    /// # Errors
    /// A store failure.
    pub fn purging(&self, tenant: TenantOrd) -> Result<bool, JobError> {
        Ok(self
            .kv
            .get(Cf::Meta, &ankusa_keys::meta::purge_key(tenant))?
            .is_some())
    }

    /// The ordinal of tenant `name`.
    ///
    /// # Errors
    /// [`JobError::NotFound`] when the store has no such tenant.
    pub fn tenant_ord(&self, name: &str) -> Result<TenantOrd, JobError> {
        tenant_ord(&self.registry.load(), name)
    }

    /// The sink entry name of `(source, index)` in the configuration.
    pub fn sink_name(&self, source: Option<&str>, sink: SinkIx) -> Option<String> {
        let config = self.config.load();
        let s = config.source(source?)?;
        s.sinks
            .iter()
            .find(|e| e.index == sink.0)
            .map(|e| e.name.clone())
    }
}

/// The ordinal of tenant `name` in `registry`.
///
/// # Errors
/// [`JobError::NotFound`] when the store has no such tenant.
pub fn tenant_ord(registry: &Registry, name: &str) -> Result<TenantOrd, JobError> {
    registry
        .tenants
        .get(name)
        .copied()
        .ok_or_else(|| JobError::NotFound(format!("no tenant {name:?}")))
}

/// Hook `seq` of `ord`'s stored envelope, `None` when it is gone.
///
/// # Errors
/// A store failure, or an envelope that does not decode.
pub fn read_envelope(
    read: &impl Read,
    ord: TenantOrd,
    seq: Seq,
) -> Result<Option<Envelope>, JobError> {
    match read.get(Cf::Hooks, &hook_key(ord, seq))? {
        Some(raw) => Ok(Some(Envelope::decode(&raw).map_err(JobError::store)?)),
        None => Ok(None),
    }
}

/// Waits on `fut` from one of the admin API's blocking threads.
pub(crate) fn block<T>(fut: impl Future<Output = T>) -> T {
    tokio::runtime::Handle::current().block_on(fut)
}
