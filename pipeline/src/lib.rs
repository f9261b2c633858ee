//! The dispatch pipeline (docs/design.md section 5): the one task that moves pending
//! rows. It decides *when* to call the pure builders of `queue` and `lanes`;
//! what they write is theirs.
//!
//! One pass of the loop:
//! 1. Flush: every sink call that has finished since the last pass becomes one
//!    row transition (delivered, retry, dead-letter, orphan), built against the
//!    live engine at flush time (ADR 0004 4.5: the release's read of the next
//!    member and its write happen in one step, with no other lane work between)
//!    and committed together as one `Buffered` batch, after the sinks that
//!    buffer ([`ankusa_sinks::Sink::flush`]) made their part durable.
//! 2. Visit every tenant with an `?A` marker in turn (fair share): sweep its
//!    lanes while the node's lane_members > 0 (ADR 4.6), claim its due rows up
//!    to `batch`, the admission window and `sink_concurrency` per (tenant,
//!    sink), park them unclaimed instead when that sink's breaker is open,
//!    leave them due when the sink is over its rate limit, and start the sink
//!    calls; a tenant with nothing due gets its stale `?A` swept.
//! 3. Wait for a finished call, a wake-up from the edge, or the idle tick.
//!
//! Paused sources and sink entries (docs/design.md section 5, "Pause"): a visit
//! that meets a due row of a paused sink moves it into the held band of ?D
//! ([`ankusa_queue::hold`]) instead of claiming it, so the backlog of a paused
//! sink is read once and then costs the tenant's other sinks nothing; a resume
//! (the configuration at start, or [`PipelineHandle::resume`]) moves the held
//! rows back in bounded pages ([`ankusa_queue::unhold`]) at the start of the
//! following passes. A held lane head stays its lane's head: the lane keeps its
//! order and nothing behind it moves.
//!
//! Admin work that moves rows the pipeline also moves runs on this task,
//! between passes (docs/design.md section 5, "Purge a tenant" and "Retire a
//! source"): [`PipelineHandle::exclusive`] builds and commits a batch with no
//! visit or flush in between; [`PipelineHandle::quiesce`] stops every visit
//! of a tenant (its purge; the purge marks in `meta` are read at start);
//! [`PipelineHandle::retire`] dead-letters the rows of a source a visit
//! meets and the failed attempts of its calls in flight.
//!
//! Sink calls run as their own tasks and hold no store handle and no lock: a
//! slow sink delays nobody but its own lane. A lane has one row in ?D/?F at a
//! time (its head), so "one call per lane" needs no bookkeeping here.
//!
//! Durability: claims and outcomes are written [`Durability::Buffered`]: the
//! WAL write happens before the call returns, so a process crash (SIGKILL)
//! loses none; a machine crash can lose the last ones, which only sends again
//! deliveries already made, in lane order (at-least-once).
#![deny(missing_docs, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_engine::{Batch, Cf, Direction, Durability, EngineError, Kv, Read};
use ankusa_keys::{
    CounterField, DeliveryRow, DueKey, DueValue, Envelope, Family, LaneId, SinkIx, SourceId, TenantOrd, counter_key, delivery_key,
    due_range_until, family_range, hook_key,
};
use ankusa_keys::meta::{PauseTarget, PausedValue};
use ankusa_queue::{Cursor, Origin, PauseMap, QueueError, RowId};
use ankusa_sinks::{DeliveryCtx, Outcome, Sink};
use rand::Rng;
use tokio::sync::{Notify, mpsc, oneshot, watch};

pub mod retention;
mod retry;
pub use retry::{RetryPolicy, RetryStatuses};
use tracing::{debug, info, warn};

/// Circuit breaker per (tenant, source, sink entry) (docs/design.md section 5,
/// "Breaker"): it opens on `failures` consecutive failed attempts (no `Ok` in
/// between) that came from at least `distinct` different lanes (rows, for an
/// unordered sink), so one key whose head the receiver always refuses cannot
/// open it for every other key of the sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Consecutive failed attempts that open the breaker.
    pub failures: u32,
    /// How many different lanes (or rows of an unordered sink) those
    /// failures must come from, at least (1 = any failures, as before issue
    /// 12). At most `failures`.
    pub distinct: u32,
    /// How long it stays open before one trial call (half-open), ms.
    pub open_ms: u64,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            failures: 10,
            distinct: 3,
            open_ms: 30_000,
        }
    }
}

/// A sink entry's rate limit (docs/design.md section 5, "Rate limit"): at
/// most `per_second` calls a second on average, `burst` at once after a quiet
/// spell. Shared by every tenant of the source (it limits what reaches one
/// destination).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Calls per second, on average (> 0; a fraction is allowed: 0.5 is one
    /// call every 2 s).
    pub per_second: f64,
    /// Calls that may start back to back after the sink was idle (>= 1).
    pub burst: u32,
}

/// How much the pipeline does at once (docs/design.md section 5, `dispatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchConfig {
    /// Most rows claimed per tenant visit; also the lane sweep's budget.
    pub batch: usize,
    /// Most calls in flight per (tenant, sink).
    pub sink_concurrency: usize,
    /// Most calls in flight on the node (the admission window).
    pub window: usize,
    /// Most bytes (row sizes) in flight on the node.
    pub window_bytes: u64,
    /// How long finished calls are collected before their outcomes are
    /// committed as one batch, ms (a lane's ceiling is about 1 / (sink round
    /// trip + this)).
    pub flush_interval_ms: u64,
    /// Longest sleep when there is nothing to do, ms: how late a retry that
    /// fell due is noticed when nothing else wakes the pipeline.
    pub idle_ms: u64,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            batch: 64,
            sink_concurrency: 8,
            window: 1024,
            window_bytes: 64 << 20,
            flush_interval_ms: 5,
            idle_ms: 50,
        }
    }
}

/// Where a source's sink entry delivers.
#[derive(Clone)]
pub struct Route {
    /// The adapter.
    pub sink: Arc<dyn Sink>,
    /// The entry's name, for logs and `DeliveryCtx::sink_name`.
    pub sink_name: String,
    /// The source's configured name.
    pub source_name: String,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("sink", &self.sink.kind())
            .field("sink_name", &self.sink_name)
            .field("source_name", &self.source_name)
            .finish()
    }
}

/// The routing table: (source id, sink index) -> route, and the tenants' names.
#[derive(Clone, Debug, Default)]
pub struct Routes {
    /// Sink entries by (source, index in the source's list).
    pub sinks: HashMap<(SourceId, SinkIx), Route>,
    /// Tenant names by ordinal (every tenant the store has registered: a
    /// resume reads each one's held rows).
    pub tenants: BTreeMap<TenantOrd, String>,
    /// What the configuration pauses (`paused: true` on a source or a sink
    /// entry). The runtime pauses the store holds are added at start.
    pub paused: BTreeSet<PauseTarget>,
    /// The sink entries with a `rate_limit` (docs/design.md section 5, "Rate
    /// limit"); an entry not here is not limited.
    pub rate_limits: HashMap<(SourceId, SinkIx), RateLimit>,
    /// The retry policy of each sink entry that has its own (`retry:` on the
    /// entry, docs/design.md section 5, "Retry policy"); an entry not here
    /// has the pipeline's global policy.
    pub retry: HashMap<(SourceId, SinkIx), RetryPolicy>,
}

impl Routes {
    fn source_known(&self, source: SourceId) -> bool {
        self.sinks.keys().any(|(s, _)| *s == source)
    }

    /// The retry policy of sink entry `sink` of `source`: its own, else
    /// `global`.
    fn retry_policy(&self, source: SourceId, sink: SinkIx, global: RetryPolicy) -> RetryPolicy {
        self.retry.get(&(source, sink)).copied().unwrap_or(global)
    }
}

/// Errors that stop the pipeline: the store failed (the handle is poisoned, the
/// node takes its crash path).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A commit or read failed.
    #[error("store: {0}")]
    Store(#[from] EngineError),
    /// A builder found the store inconsistent where it cannot carry on.
    #[error("queue: {0}")]
    Queue(#[from] QueueError),
}

/// Control of a running pipeline.
#[derive(Clone, Debug)]
pub struct PipelineHandle {
    wake: Arc<Notify>,
    shutdown: Arc<watch::Sender<bool>>,
    /// True once the pipeline has recovered the previous run's claimed rows
    /// and is dispatching (what `/readyz` reports).
    pub ready: Arc<AtomicBool>,
    /// How many configured sink entries are paused now, by the configuration
    /// or the runtime control, a source's pause counting each of its sinks
    /// (the `ankusa_dispatch_paused` gauge).
    pub paused_sinks: Arc<AtomicU64>,
    control: mpsc::UnboundedSender<Control>,
    book: Arc<Mutex<PauseBook>>,
    /// What the admin API reads of the breakers (read-only).
    pub status: PipelineStatus,
}

/// The state of one (tenant, source, sink entry)'s breaker as the admin API
/// reports it (docs/design.md section 5, "Breaker").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; `failures` consecutive `Retry` outcomes so far (it
    /// opens at `breaker.failures` of them from `breaker.distinct` lanes or
    /// rows).
    Closed {
        /// Consecutive failed attempts.
        failures: u32,
    },
    /// Due rows are parked until `until_ms` (unix ms).
    Open {
        /// When it half-opens, unix ms.
        until_ms: u64,
    },
    /// One trial call at a time decides: Ok closes it, a failure opens it.
    HalfOpen,
}

/// What the pipeline publishes of one breaker: consecutive failures, open
/// until (unix ms), open or not.
#[derive(Clone, Copy, Debug, Default)]
struct Published {
    failures: u32,
    open_until_ms: u64,
    open: bool,
}

/// A read-only view of the pipeline's in-memory breakers, shared through an
/// `Arc` with the admin API. The pipeline publishes a copy after every
/// outcome flush (the only place a breaker's failures and open time change);
/// a breaker never published is closed with no failures.
#[derive(Clone, Debug, Default)]
pub struct PipelineStatus {
    breakers: Arc<std::sync::RwLock<HashMap<BreakerKey, Published>>>,
}

impl PipelineStatus {
    /// The breaker of `(tenant, source, sink)` as of `now_ms`.
    pub fn breaker(&self, tenant: TenantOrd, source: SourceId, sink: SinkIx, now_ms: u64) -> BreakerState {
        let b = self
            .breakers
            .read()
            .map(|m| m.get(&(tenant, source, sink)).copied())
            .unwrap_or_default()
            .unwrap_or_default();
        if !b.open {
            BreakerState::Closed { failures: b.failures }
        } else if now_ms < b.open_until_ms {
            BreakerState::Open { until_ms: b.open_until_ms }
        } else {
            BreakerState::HalfOpen
        }
    }
}

/// What [`PipelineHandle::retire`] reports about a source's retirement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retirement {
    /// The source's calls in flight now.
    pub in_flight: usize,
    /// Rows of the source the pipeline dead-lettered with the retirement's
    /// reason (due rows met by a visit, attempts that did not deliver) since
    /// the previous call; taken by this call (in memory: a restart starts
    /// again from zero).
    pub dead_lettered: u64,
}

/// Why a runtime control call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The target names a source or sink entry the configuration does not
    /// have (a pause of it would hold nothing the relay delivers).
    #[error("{0:?} is not a configured source or sink entry")]
    NotConfigured(PauseTarget),
    /// The store failed the write (the node takes its crash path).
    #[error("store: {0}")]
    Store(String),
    /// The pipeline has stopped.
    #[error("the pipeline has stopped")]
    Stopped,
    /// Admin work given to [`PipelineHandle::exclusive`] refused to build its
    /// batch (nothing was written).
    #[error("{0}")]
    Work(String),
}

/// Admin work run on the pipeline's task ([`PipelineHandle::exclusive`]): it
/// reads the live store and returns the batch to commit, or why it cannot.
pub type ExclusiveWork = Box<dyn FnOnce() -> Result<Batch, String> + Send>;

/// The pause state of one target (docs/design.md section 5, "Pause").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PauseStatus {
    /// What it applies to.
    pub target: PauseTarget,
    /// The configuration pauses it (`paused: true`): only a configuration
    /// change and a restart lift that.
    pub by_config: bool,
    /// The runtime control pauses it (persisted in `meta`, survives a
    /// restart): since when and why.
    pub by_runtime: Option<PausedValue>,
}

impl PauseStatus {
    /// Whether the target itself is paused (a sink entry is also paused while
    /// its source is: [`PipelineHandle::sink_paused`]).
    pub fn paused(&self) -> bool {
        self.by_config || self.by_runtime.is_some()
    }
}

/// The pauses in force, shared by the pipeline (which alone changes them) and
/// its handles (which read them).
#[derive(Debug, Default)]
struct PauseBook {
    config: BTreeSet<PauseTarget>,
    runtime: PauseMap,
}

impl PauseBook {
    fn targets(&self) -> BTreeSet<PauseTarget> {
        self.config.iter().copied().chain(self.runtime.keys().copied()).collect()
    }

    fn status(&self, target: PauseTarget) -> PauseStatus {
        PauseStatus {
            target,
            by_config: self.config.contains(&target),
            by_runtime: self.runtime.get(&target).cloned(),
        }
    }
}

enum Control {
    SetPause {
        target: PauseTarget,
        /// `Some` pauses (with the reason), `None` resumes.
        reason: Option<String>,
        reply: oneshot::Sender<Result<PauseStatus, ControlError>>,
    },
    Quiesce {
        tenant: TenantOrd,
        quiet: bool,
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
    Retire {
        source: SourceId,
        /// `Some` retires (with the dead-letter reason), `None` ends it.
        reason: Option<String>,
        reply: oneshot::Sender<Result<Retirement, ControlError>>,
    },
    Exclusive {
        work: ExclusiveWork,
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
}

impl PipelineHandle {
    /// Tells the pipeline new work may be due (the edge calls it after a commit).
    pub fn wake(&self) {
        self.wake.notify_one();
    }
    /// Stops claiming; the pipeline finishes the calls in flight, flushes their
    /// outcomes and returns.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        self.wake.notify_one();
    }

    async fn set_pause(&self, target: PauseTarget, reason: Option<String>) -> Result<PauseStatus, ControlError> {
        let (reply, rx) = oneshot::channel();
        self.control
            .send(Control::SetPause { target, reason, reply })
            .map_err(|_| ControlError::Stopped)?;
        self.wake.notify_one();
        rx.await.map_err(|_| ControlError::Stopped)?
    }

    /// Pauses `target` at run time (docs/design.md section 5, "Pause"; the admin
    /// API's call): the pause is committed to `meta` (`Sync`) so it survives a
    /// restart, and applied by the pipeline before this returns: from then on
    /// the pipeline claims no row of the target (calls already in flight
    /// finish). Hooks keep being accepted. Pausing what is paused replaces the
    /// reason and the time.
    ///
    /// # Errors
    /// [`ControlError::NotConfigured`] for a source or sink entry the
    /// configuration does not have; [`ControlError::Store`];
    /// [`ControlError::Stopped`].
    pub async fn pause(&self, target: PauseTarget, reason: &str) -> Result<PauseStatus, ControlError> {
        self.set_pause(target, Some(reason.to_owned())).await
    }

    /// Lifts the runtime pause of `target` (deletes it from `meta`) and starts
    /// moving its held rows back, in bounded pages, from the next pass. A pause
    /// the configuration sets stays (the returned status says so), and a sink
    /// entry stays paused while its source is.
    ///
    /// # Errors
    /// As [`PipelineHandle::pause`].
    pub async fn resume(&self, target: PauseTarget) -> Result<PauseStatus, ControlError> {
        self.set_pause(target, None).await
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T, ControlError>>) -> Control) -> Result<T, ControlError> {
        let (reply, rx) = oneshot::channel();
        self.control.send(make(reply)).map_err(|_| ControlError::Stopped)?;
        self.wake.notify_one();
        rx.await.map_err(|_| ControlError::Stopped)?
    }

    /// Stops (`quiet: true`) or restarts the pipeline's visits of `tenant`
    /// (docs/design.md section 5, "Purge a tenant"): once this returns, no
    /// visit of the tenant is under way and none starts (no claim, sweep,
    /// hold or dead letter of its rows) until it is called with `false`.
    /// Outcomes of its calls already in flight are still flushed. The purge
    /// marks in `meta` quiesce their tenants at start.
    ///
    /// # Errors
    /// [`ControlError::Stopped`].
    pub async fn quiesce(&self, tenant: TenantOrd, quiet: bool) -> Result<(), ControlError> {
        self.ask(|reply| Control::Quiesce { tenant, quiet, reply }).await
    }

    /// Retires `source` (`Some(reason)`) or ends its retirement (`None`)
    /// (docs/design.md section 5, "Retire a source"): while retired, a visit
    /// dead-letters each due row of the source it meets (with `reason`)
    /// instead of claiming it, and an attempt of the source that ends in
    /// anything but `Ok` is dead-lettered instead of retried. In memory
    /// only: the admin job that retires a source says it again after a
    /// restart. Returns the source's calls in flight now and the rows the
    /// pipeline dead-lettered for the retirement since the last call
    /// ([`Retirement`]).
    ///
    /// # Errors
    /// [`ControlError::Stopped`].
    pub async fn retire(&self, source: SourceId, reason: Option<String>) -> Result<Retirement, ControlError> {
        self.ask(|reply| Control::Retire { source, reason, reply }).await
    }

    /// Runs `work` on the pipeline's task between two passes and commits the
    /// batch it returns `Sync` (docs/design.md section 5, "Admin API"): no
    /// visit and no outcome flush runs between its reads and the commit, so
    /// admin work that moves rows (a purge page, a source's dead letters)
    /// never races the pipeline's own batches.
    ///
    /// # Errors
    /// [`ControlError::Work`] when `work` refused (nothing written);
    /// [`ControlError::Store`] (the node takes its crash path);
    /// [`ControlError::Stopped`].
    pub async fn exclusive(&self, work: ExclusiveWork) -> Result<(), ControlError> {
        self.ask(|reply| Control::Exclusive { work, reply }).await
    }

    /// Every target paused now, by the configuration or the runtime control,
    /// in (source, sink) order. The store's runtime pauses are in it once
    /// [`PipelineHandle::ready`] is set (the pipeline reads them at start).
    pub fn pauses(&self) -> Vec<PauseStatus> {
        let book = self.book.lock().unwrap_or_else(|p| p.into_inner());
        book.targets().into_iter().map(|t| book.status(t)).collect()
    }

    /// Whether sink entry `sink` of `source` is paused now (itself or its
    /// source, by either).
    pub fn sink_paused(&self, source: SourceId, sink: SinkIx) -> bool {
        let book = self.book.lock().unwrap_or_else(|p| p.into_inner());
        let t = book.targets();
        t.contains(&PauseTarget::Source(source)) || t.contains(&PauseTarget::Sink(source, sink))
    }
}

type BreakerKey = (TenantOrd, SourceId, SinkIx);

/// Where a failed attempt came from, for the breaker: a laned row's lane, or
/// an unordered row itself (each unordered row fails on its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Site {
    Lane(LaneId),
    Row(RowId),
}

impl Site {
    fn of(id: RowId, row: &DeliveryRow) -> Site {
        row.lane.map_or(Site::Row(id), Site::Lane)
    }
}

/// How many different failing sites a breaker remembers (more when
/// `breaker.distinct` is larger): enough to steer its half-open trials to
/// lanes that have not failed.
const SITES_KEPT: usize = 16;

/// A (tenant, source, sink entry)'s breaker (docs/design.md section 5,
/// "Breaker"): closed until `policy.failures` consecutive failed attempts came
/// from at least `policy.distinct` different sites; then open until
/// `open_until_ms` (due rows are parked until then); then half-open: one trial
/// call at a time, whose Ok closes it and whose failure opens it again for
/// `open_ms`.
#[derive(Debug, Default, Clone)]
struct Breaker {
    /// Consecutive failed attempts (no `Ok` or permanent answer between).
    failures: u32,
    /// The different sites of those failures, first seen first (at most
    /// `SITES_KEPT`, or `policy.distinct` when that is more).
    sites: Vec<Site>,
    /// Open; half-open once `open_until_ms` has passed.
    open: bool,
    open_until_ms: u64,
    trial_in_flight: bool,
    /// The site whose attempt failed last: the next half-open trial goes to a
    /// row of another lane when the visit finds one, so one lane whose head
    /// keeps failing does not take every trial while other lanes' heads
    /// (which might succeed and close the breaker) wait (ADR 0004 4.3: a retry
    /// blocks its lane and nothing else).
    last_failed: Option<Site>,
}

impl Breaker {
    /// A failed attempt of `site` (`trial`: the half-open trial) at `now_ms`.
    /// Returns whether it opened the breaker (or opened it again).
    fn failed(&mut self, site: Site, trial: bool, policy: &BreakerPolicy, now_ms: u64) -> bool {
        self.failures = self.failures.saturating_add(1);
        self.last_failed = Some(site);
        let distinct = usize::try_from(policy.distinct.max(1)).unwrap_or(usize::MAX);
        if !self.sites.contains(&site) && self.sites.len() < SITES_KEPT.max(distinct) {
            self.sites.push(site);
        }
        let opens = if self.open {
            // A trial failed, or a call started before it opened failed
            // after the open time ran out.
            trial || self.open_until_ms <= now_ms
        } else {
            self.failures >= policy.failures && self.sites.len() >= distinct
        };
        if opens {
            self.open = true;
            self.open_until_ms = now_ms.saturating_add(policy.open_ms);
        }
        opens
    }

    /// The sink answered (delivered, or refused for good: it is up). Returns
    /// whether the breaker was open.
    fn answered(&mut self) -> bool {
        let was_open = self.open;
        self.failures = 0;
        self.sites.clear();
        self.open = false;
        self.open_until_ms = 0;
        self.last_failed = None;
        was_open
    }

    /// How a row of `site` ranks as a half-open trial: 0, a lane with no
    /// failure in the current run (taken at once); 1, one that failed; 2, the
    /// one that failed last.
    fn trial_rank(&self, site: Site) -> u8 {
        if self.last_failed == Some(site) {
            2
        } else if self.sites.contains(&site) {
            1
        } else {
            0
        }
    }
}

/// The pipeline's clock (unix ms) as a `governor` clock, so a rate limit
/// counts time as the rest of dispatch does (and a test's clock drives both).
#[derive(Clone)]
struct LimiterClock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl governor::clock::Clock for LimiterClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        Duration::from_millis((self.0)())
    }
}

type Limiter = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    LimiterClock,
    governor::middleware::NoOpMiddleware<Duration>,
>;

/// A GCRA limiter for `limit` on `clock`; `None` for a rate no quota can
/// express (not above 0, not finite: the configuration refuses them).
fn limiter(limit: RateLimit, clock: &LimiterClock) -> Option<Limiter> {
    if !(limit.per_second.is_finite() && limit.per_second > 0.0) {
        return None;
    }
    let period = Duration::try_from_secs_f64(1.0 / limit.per_second).ok()?;
    let burst = std::num::NonZeroU32::new(limit.burst.max(1))?;
    // governor keeps period x burst in u64 nanoseconds and panics past it;
    // the configuration's bounds keep far below (1000 s x 10^6 = 10^18 ns).
    let span_ns = period.as_nanos().checked_mul(u128::from(burst.get()))?;
    if span_ns >= u128::from(u64::MAX / 2) {
        return None;
    }
    let quota = governor::Quota::with_period(period)?.allow_burst(burst);
    Some(governor::RateLimiter::direct_with_clock(quota, clock.clone()))
}

struct Done {
    row: RowId,
    key: BreakerKey,
    site: Site,
    outcome: Outcome,
    attempts_before: u32,
    size: u64,
    trial: bool,
}

/// The pipeline task. Build with [`Pipeline::new`], run with [`Pipeline::run`].
pub struct Pipeline<K: Kv> {
    kv: Arc<K>,
    routes: Arc<Routes>,
    dispatch: DispatchConfig,
    retry: RetryPolicy,
    breaker: BreakerPolicy,
    clock: Arc<dyn Fn() -> u64 + Send + Sync>,
    wake: Arc<Notify>,
    shutdown: watch::Receiver<bool>,
    in_flight: HashMap<BreakerKey, usize>,
    in_flight_total: usize,
    in_flight_bytes: u64,
    ready: Arc<AtomicBool>,
    /// The earliest due time of a row this pipeline rescheduled (retry, park),
    /// so the loop wakes for it on time instead of at the next idle tick.
    next_wake_ms: Option<u64>,
    breakers: HashMap<BreakerKey, Breaker>,
    /// One limiter per sink entry with a `rate_limit` (docs/design.md section
    /// 5, "Rate limit"), on the pipeline's clock.
    limiters: HashMap<(SourceId, SinkIx), Limiter>,
    /// The copy of `breakers` the admin API reads.
    status: PipelineStatus,
    /// Per tenant, where the last visit stopped reading the due index when it
    /// hit [`SCAN_PAGES`] with saturated sinks' rows in front: the next visit
    /// reads its first page from the top (new and retried rows, the head of
    /// every sink) and its other pages from here, so rows behind more than
    /// `SCAN_PAGES` pages of a slow sink's backlog are reached too. Dropped when
    /// a visit reads to the end of what is due.
    resume: HashMap<TenantOrd, Vec<u8>>,
    done_tx: mpsc::UnboundedSender<Done>,
    done_rx: mpsc::UnboundedReceiver<Done>,
    control_rx: mpsc::UnboundedReceiver<Control>,
    /// The pauses in force (shared with the handles).
    book: Arc<Mutex<PauseBook>>,
    /// The pipeline's copy of `book`'s targets, read for every due row.
    paused: BTreeSet<PauseTarget>,
    paused_sinks: Arc<AtomicU64>,
    /// Tenants whose held rows a resume must look at, with where the last
    /// page stopped: one page of [`ankusa_queue::unhold`] each per pass.
    unhold: BTreeMap<TenantOrd, Option<Cursor>>,
    /// Tenants no visit touches ([`PipelineHandle::quiesce`]: being purged).
    quiet: BTreeSet<TenantOrd>,
    /// Sources being retired, with the dead-letter reason
    /// ([`PipelineHandle::retire`]).
    retiring: HashMap<SourceId, String>,
    /// Rows of each retiring source this task dead-lettered with the
    /// retirement's reason (a due row met by a visit, an attempt that did not
    /// deliver) and not yet reported: [`PipelineHandle::retire`] takes them,
    /// so the admin job counts them in its `done`.
    retired_dead: HashMap<SourceId, u64>,
}

impl<K: Kv> Pipeline<K> {
    /// A pipeline over `kv` delivering by `routes`; `clock` gives unix ms.
    pub fn new(
        kv: Arc<K>,
        routes: Routes,
        dispatch: DispatchConfig,
        retry: RetryPolicy,
        breaker: BreakerPolicy,
        clock: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> (Pipeline<K>, PipelineHandle) {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (control, control_rx) = mpsc::unbounded_channel();
        let (shutdown_tx, shutdown) = watch::channel(false);
        let wake = Arc::new(Notify::new());
        let ready = Arc::new(AtomicBool::new(false));
        let book = Arc::new(Mutex::new(PauseBook { config: routes.paused.clone(), runtime: PauseMap::new() }));
        // The configuration's pauses count from the start; the runtime ones
        // join when `run` has read them.
        let paused_sinks = Arc::new(AtomicU64::new(
            routes
                .sinks
                .keys()
                .filter(|(s, k)| routes.paused.contains(&PauseTarget::Source(*s)) || routes.paused.contains(&PauseTarget::Sink(*s, *k)))
                .count() as u64,
        ));
        let status = PipelineStatus::default();
        let clock: Arc<dyn Fn() -> u64 + Send + Sync> = Arc::new(clock);
        let limiter_clock = LimiterClock(Arc::clone(&clock));
        let limiters = routes
            .rate_limits
            .iter()
            .filter_map(|(id, limit)| {
                let l = limiter(*limit, &limiter_clock);
                if l.is_none() {
                    warn!(source = id.0.0, sink = id.1.0, ?limit, "a rate limit no quota can express: not applied");
                }
                Some((*id, l?))
            })
            .collect();
        let handle = PipelineHandle {
            wake: Arc::clone(&wake),
            shutdown: Arc::new(shutdown_tx),
            ready: Arc::clone(&ready),
            paused_sinks: Arc::clone(&paused_sinks),
            control,
            book: Arc::clone(&book),
            status: status.clone(),
        };
        (
            Pipeline {
                kv,
                routes: Arc::new(routes),
                dispatch,
                retry,
                breaker,
                clock,
                wake,
                shutdown,
                in_flight: HashMap::new(),
                in_flight_total: 0,
                in_flight_bytes: 0,
                ready: Arc::clone(&ready),
                next_wake_ms: None,
                breakers: HashMap::new(),
                limiters,
                status,
                resume: HashMap::new(),
                done_tx,
                done_rx,
                control_rx,
                book,
                paused: BTreeSet::new(),
                paused_sinks,
                unhold: BTreeMap::new(),
                quiet: BTreeSet::new(),
                retiring: HashMap::new(),
                retired_dead: HashMap::new(),
            },
            handle,
        )
    }

    fn now(&self) -> u64 {
        (self.clock)()
    }

    /// `None` when sink entry `id` may start a call now (the call takes its
    /// place in the entry's rate); else the unix ms from which the next one
    /// may start. Never sleeps.
    fn rate_limited(&self, id: (SourceId, SinkIx), now: u64) -> Option<u64> {
        let limiter = self.limiters.get(&id)?;
        match limiter.check() {
            Ok(()) => None,
            Err(not_until) => {
                let at = not_until.earliest_possible();
                let ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX).saturating_add(u64::from(at.subsec_nanos() % 1_000_000 != 0));
                Some(ms.max(now.saturating_add(1)))
            }
        }
    }

    fn write(&self, batch: Batch) -> Result<(), PipelineError> {
        if !batch.is_empty() {
            self.kv.write(batch, Durability::Buffered)?;
        }
        Ok(())
    }

    /// Runs: recovers claimed rows of a previous run (ADR 4.7), then loops until
    /// shutdown with nothing in flight.
    ///
    /// # Errors
    /// A store failure ([`PipelineError`]); the caller exits the process.
    pub async fn run(mut self) -> Result<(), PipelineError> {
        // Tenants being purged are left alone from the first pass.
        self.quiet = ankusa_queue::read_purges(&*self.kv)?.into_keys().collect();
        self.recover()?;
        // The runtime pauses an earlier run (or the admin API) left in the
        // store, with the configuration's; every tenant's held rows are looked
        // at once, so rows held under a pause lifted while the relay was down
        // (a configuration change) go back to dispatch.
        let runtime = ankusa_queue::read_pauses(&*self.kv)?;
        self.book.lock().unwrap_or_else(|p| p.into_inner()).runtime = runtime;
        self.refresh_pauses();
        self.unhold = self.routes.tenants.keys().map(|t| (*t, None)).collect();
        self.ready.store(true, Ordering::SeqCst);
        let mut stopping_since: Option<tokio::time::Instant> = None;
        loop {
            let stopping = *self.shutdown.borrow();
            if stopping && stopping_since.is_none() {
                stopping_since = Some(tokio::time::Instant::now());
            }
            while let Ok(c) = self.control_rx.try_recv() {
                self.control(c)?;
            }
            let mut done = Vec::new();
            while let Ok(d) = self.done_rx.try_recv() {
                done.push(d);
            }
            if !done.is_empty() {
                self.flush(done).await?;
            }
            if stopping {
                if self.in_flight_total == 0 {
                    info!("pipeline stopped: nothing in flight");
                    return Ok(());
                }
                // A destination that does not answer must not hold the
                // process past an orchestrator's kill grace: the calls still
                // out stay claimed in the store and are delivered again after
                // the next start (recover_inflight, ADR 4.7; at-least-once).
                if stopping_since.is_some_and(|t| t.elapsed() >= Duration::from_millis(SHUTDOWN_WAIT_MS)) {
                    warn!(
                        in_flight = self.in_flight_total,
                        waited_ms = SHUTDOWN_WAIT_MS,
                        "pipeline stopped with deliveries still in flight; they are delivered again after the next start"
                    );
                    return Ok(());
                }
            } else {
                self.pass()?;
            }
            let now = self.now();
            let mut idle_ms = self.dispatch.idle_ms.max(1);
            match self.next_wake_ms {
                Some(at) if at <= now => self.next_wake_ms = None,
                Some(at) => idle_ms = idle_ms.min(at - now),
                None => {}
            }
            let idle = Duration::from_millis(idle_ms);
            tokio::select! {
                Some(d) = self.done_rx.recv() => {
                    // Collect what else finishes within the flush interval,
                    // then commit the outcomes together.
                    tokio::time::sleep(Duration::from_millis(self.dispatch.flush_interval_ms)).await;
                    let mut done = vec![d];
                    while let Ok(d) = self.done_rx.try_recv() {
                        done.push(d);
                    }
                    self.flush(done).await?;
                }
                Some(c) = self.control_rx.recv() => self.control(c)?,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(idle) => {}
            }
        }
    }

    /// Recomputes the pipeline's copy of the pauses and the paused-sinks gauge.
    fn refresh_pauses(&mut self) {
        self.paused = self.book.lock().unwrap_or_else(|p| p.into_inner()).targets();
        let n = self.routes.sinks.keys().filter(|(s, k)| self.is_paused(*s, *k)).count();
        self.paused_sinks.store(n as u64, Ordering::Relaxed);
    }

    fn is_paused(&self, source: SourceId, sink: SinkIx) -> bool {
        !self.paused.is_empty()
            && (self.paused.contains(&PauseTarget::Source(source)) || self.paused.contains(&PauseTarget::Sink(source, sink)))
    }

    /// Applies a runtime control call: the pause is committed to `meta` first
    /// (`Sync`: the caller is told it survives a restart), then applied.
    fn control(&mut self, c: Control) -> Result<(), PipelineError> {
        let (target, reason, reply) = match c {
            Control::SetPause { target, reason, reply } => (target, reason, reply),
            Control::Quiesce { tenant, quiet, reply } => {
                if quiet {
                    self.quiet.insert(tenant);
                    self.resume.remove(&tenant);
                } else if self.quiet.remove(&tenant) {
                    // Rows may have come in since: look again.
                    self.unhold.insert(tenant, None);
                }
                info!(tenant = tenant.0, quiet, "tenant visits changed by the runtime control");
                let _ = reply.send(Ok(()));
                return Ok(());
            }
            Control::Retire { source, reason, reply } => {
                match reason {
                    Some(r) => {
                        if self.retiring.insert(source, r).is_none() {
                            info!(source = source.0, "source retired: its rows are dead-lettered as they are met");
                        }
                    }
                    None => {
                        if self.retiring.remove(&source).is_some() {
                            info!(source = source.0, "source retirement ended");
                        }
                    }
                }
                let in_flight = self.in_flight.iter().filter(|(k, _)| k.1 == source).map(|(_, n)| *n).sum();
                let dead_lettered = self.retired_dead.remove(&source).unwrap_or(0);
                let _ = reply.send(Ok(Retirement { in_flight, dead_lettered }));
                return Ok(());
            }
            Control::Exclusive { work, reply } => {
                let batch = match work() {
                    Ok(b) => b,
                    Err(why) => {
                        let _ = reply.send(Err(ControlError::Work(why)));
                        return Ok(());
                    }
                };
                if !batch.is_empty()
                    && let Err(e) = self.kv.write(batch, Durability::Sync)
                {
                    let _ = reply.send(Err(ControlError::Store(e.to_string())));
                    return Err(e.into());
                }
                let _ = reply.send(Ok(()));
                return Ok(());
            }
        };
        let configured = match target {
            PauseTarget::Source(s) => self.routes.source_known(s),
            PauseTarget::Sink(s, k) => self.routes.sinks.contains_key(&(s, k)),
        };
        if !configured {
            let _ = reply.send(Err(ControlError::NotConfigured(target)));
            return Ok(());
        }
        let now = self.now();
        let batch = match &reason {
            Some(r) => ankusa_queue::set_pause(target, now, r),
            None => ankusa_queue::clear_pause(target),
        };
        if let Err(e) = self.kv.write(batch, Durability::Sync) {
            let _ = reply.send(Err(ControlError::Store(e.to_string())));
            return Err(e.into());
        }
        let status = {
            let mut book = self.book.lock().unwrap_or_else(|p| p.into_inner());
            match reason {
                Some(reason) => {
                    book.runtime.insert(target, PausedValue { since_ms: now, reason });
                }
                None => {
                    book.runtime.remove(&target);
                }
            }
            book.status(target)
        };
        let before = self.paused.clone();
        self.refresh_pauses();
        if self.paused.len() < before.len() || !before.is_subset(&self.paused) {
            // Something was resumed: look at every tenant's held rows again.
            for t in self.routes.tenants.keys() {
                self.unhold.insert(*t, None);
            }
        }
        info!(?target, paused = status.paused(), by_config = status.by_config, "pause changed by the runtime control");
        let _ = reply.send(Ok(status));
        Ok(())
    }

    /// One page of resume work per tenant that has some (see `unhold`).
    fn unhold_pass(&mut self) -> Result<(), PipelineError> {
        if self.unhold.is_empty() {
            return Ok(());
        }
        let todo: Vec<(TenantOrd, Option<Cursor>)> = std::mem::take(&mut self.unhold).into_iter().collect();
        let mut moved = 0;
        for (tenant, cursor) in todo {
            if self.quiet.contains(&tenant) {
                // Its turn comes when it is no longer quiet.
                self.unhold.insert(tenant, cursor);
                continue;
            }
            let paused = self.paused.clone();
            let still = |s: SourceId, k: SinkIx| {
                paused.contains(&PauseTarget::Source(s)) || paused.contains(&PauseTarget::Sink(s, k))
            };
            let page = ankusa_queue::unhold(&*self.kv, tenant, still, cursor.as_ref(), self.dispatch.batch.max(1))?;
            moved += page.moved;
            self.write(page.batch)?;
            if let Some(next) = page.next {
                self.unhold.insert(tenant, Some(next));
            }
        }
        if moved > 0 {
            info!(rows = moved, "resumed: held rows back to dispatch");
        }
        Ok(())
    }

    /// recover_inflight at start: every ?F back to ?D as a first attempt.
    fn recover(&self) -> Result<(), PipelineError> {
        let mut moved = 0;
        loop {
            let page = ankusa_queue::recover_inflight(&*self.kv, self.dispatch.batch.max(1), self.now())?;
            moved += page.moved;
            let more = page.next.is_some();
            self.write(page.batch)?;
            if !more {
                break;
            }
        }
        if moved > 0 {
            info!(rows = moved, "recovered rows claimed by the previous run");
        }
        Ok(())
    }

    /// One visit of every active tenant.
    fn pass(&mut self) -> Result<(), PipelineError> {
        self.unhold_pass()?;
        let active = self.kv.scan(Cf::Index, &family_range(Family::Active), Direction::Forward, 4096)?;
        for (k, _) in active {
            let tenant = ankusa_keys::ActiveKey::decode(&k).map_err(QueueError::from)?.tenant;
            if self.quiet.contains(&tenant) {
                continue;
            }
            self.visit(tenant)?;
        }
        Ok(())
    }

    fn visit(&mut self, tenant: TenantOrd) -> Result<(), PipelineError> {
        let now = self.now();
        // ADR 4.6: lane sweep while the node has lane members; one read when not.
        if self.kv.counter(&counter_key(TenantOrd::NODE, CounterField::LaneMembers))? > 0 {
            let out = ankusa_lanes::sweep(&*self.kv, tenant, self.dispatch.batch, now).map_err(QueueError::from)?;
            self.write(out.batch)?;
            if !out.recheck.is_empty() {
                let again = ankusa_lanes::sweep_recheck(&*self.kv, tenant, &out.recheck).map_err(QueueError::from)?;
                self.write(again)?;
            }
        }
        let mut range = due_range_until(tenant, now);
        let mut resume = self.resume.remove(&tenant);
        let mut reached_end = false;
        let page_len = self.dispatch.batch.max(1);
        // Rows of a saturated sink are skipped, not claimed, so a visit reads on
        // past them (up to SCAN_PAGES pages) to reach other sinks' rows: one
        // slow sink does not starve the tenant's other sinks.
        let mut pages = 0;
        let mut claims = Batch::new();
        let mut starts: Vec<Start> = Vec::new();
        let mut parks = Vec::new();
        let mut dead = Batch::new();
        let mut holds = Batch::new();
        let mut saturated: HashSet<BreakerKey> = HashSet::new();
        let mut start_bytes = 0u64;
        let mut horizon: Vec<RowId> = Vec::new();
        // Per half-open breaker, the best trial candidate the scan met among
        // rows of lanes that failed in the breaker's current run (the lane
        // that failed last ranks worst): taken as the trial only if no row of
        // another lane of the sink is.
        let mut deferred: HashMap<BreakerKey, (u8, DueKey, Start)> = HashMap::new();
        'pages: while starts.len() + parks.len() < page_len && pages < SCAN_PAGES {
            // After the first page, jump to where the last visit stopped.
            if pages == 1
                && let Some(at) = resume.take()
                && at > range.start
                && at < range.end
            {
                range.start = at;
            }
            let due = self.kv.scan(Cf::Index, &range, Direction::Forward, page_len)?;
            pages += 1;
            if due.is_empty() {
                if pages == 1 {
                    let b = ankusa_queue::sweep_markers(&*self.kv, tenant)?;
                    if !b.is_empty() {
                        self.write(b)?;
                        let again = ankusa_queue::sweep_markers_recheck(&*self.kv, tenant)?;
                        self.write(again)?;
                    }
                    return Ok(());
                }
                reached_end = true;
                break;
            }
            let full_page = due.len() == page_len;
            if let Some((last, _)) = due.last() {
                let mut next = last.to_vec();
                next.push(0);
                range.start = next;
            }
            for (k, v) in due {
                if self.in_flight_total + starts.len() >= self.dispatch.window
                    || self.in_flight_bytes + start_bytes >= self.dispatch.window_bytes
                {
                    break 'pages;
                }
                let dk = DueKey::decode(&k).map_err(QueueError::from)?;
                let size = u64::from(DueValue::decode(&v).map_err(QueueError::from)?.size);
                let row_id = RowId::new(tenant, dk.seq, dk.sink);
                let Some(envelope) = self.kv.get(Cf::Hooks, &hook_key(tenant, dk.seq))? else {
                    warn!(%row_id, "envelope missing: dead-lettering the row as an orphan");
                    dead.extend(ankusa_queue::orphan(&*self.kv, row_id, Origin::Due { due_ms: dk.due_ms }, "envelope missing", now)?);
                    continue;
                };
                let envelope = match Envelope::decode(&envelope) {
                    Ok(e) => e,
                    Err(e) => {
                        warn!(%row_id, error = %e, "envelope does not decode: dead-lettering the row as an orphan");
                        dead.extend(ankusa_queue::orphan(&*self.kv, row_id, Origin::Due { due_ms: dk.due_ms }, "envelope does not decode", now)?);
                        continue;
                    }
                };
                if let Some(reason) = self.retiring.get(&envelope.source) {
                    debug!(%row_id, "a row of a retired source: dead-lettered");
                    dead.extend(ankusa_queue::dead_letter(&*self.kv, row_id, Origin::Due { due_ms: dk.due_ms }, reason, now)?);
                    *self.retired_dead.entry(envelope.source).or_default() += 1;
                    continue;
                }
                let key = (tenant, envelope.source, dk.sink);
                if saturated.contains(&key) {
                    continue;
                }
                let Some(route) = self.routes.sinks.get(&(envelope.source, dk.sink)).cloned() else {
                    let reason = if self.routes.source_known(envelope.source) { "sink gone: not configured" } else { "source gone: not configured" };
                    warn!(%row_id, reason, "dead-lettering a row nobody can deliver");
                    dead.extend(ankusa_queue::dead_letter(&*self.kv, row_id, Origin::Due { due_ms: dk.due_ms }, reason, now)?);
                    continue;
                };
                // A paused sink: its row leaves the due scan until a resume
                // (a head stays its lane's head; nothing behind it moves).
                if self.is_paused(envelope.source, dk.sink) {
                    holds.extend(ankusa_queue::hold(&*self.kv, dk)?);
                    continue;
                }
                let busy = self.in_flight.get(&key).copied().unwrap_or(0) + starts.iter().filter(|s| s.key == key).count();
                if busy >= self.dispatch.sink_concurrency {
                    saturated.insert(key);
                    continue;
                }
                // Breaker: open -> park; half-open -> one trial call at a time.
                let (open, half_open, trial_busy) = match self.breakers.get(&key) {
                    Some(b) => (
                        b.open,
                        b.open && b.open_until_ms <= now,
                        b.trial_in_flight || starts.iter().any(|s| s.key == key && s.trial),
                    ),
                    None => (false, false, false),
                };
                if half_open && trial_busy {
                    saturated.insert(key);
                    continue;
                }
                let Some(row) = self.kv.get(Cf::Deliveries, &delivery_key(tenant, dk.seq, dk.sink))? else {
                    continue; // claim would fail the same way; the checker reports it
                };
                let row = DeliveryRow::decode(&row).map_err(QueueError::from)?;
                // The horizon is checked again when the row is claimed: a
                // retry due just inside it must not start an attempt outside
                // it (a row due at or past it gets its attempt: RetryPolicy::dead_at_claim).
                if let Some(first) = row.first_attempt_at_ms
                    && self.routes.retry_policy(envelope.source, dk.sink, self.retry).dead_at_claim(first, dk.due_ms, now)
                {
                    claims.extend(ankusa_queue::claim(&*self.kv, dk, now)?);
                    horizon.push(row_id);
                    continue;
                }
                if open && !half_open {
                    // Parked unclaimed: a park is no attempt, so a row never
                    // attempted keeps no first_attempt_at (issue 12).
                    let until = self.breakers.get(&key).map_or(now, |b| b.open_until_ms);
                    parks.push((dk, until));
                    continue;
                }
                let site = Site::of(row_id, &row);
                if half_open {
                    let rank = self.breakers.get(&key).map_or(0, |b| b.trial_rank(site));
                    if rank > 0 {
                        // A lane that failed in this run: kept in reserve in
                        // case no other lane of the sink has a due row.
                        if deferred.get(&key).is_none_or(|(r, ..)| rank < *r) {
                            deferred.insert(key, (rank, dk, Start { row_id, key, route, envelope, row, size, trial: true, site }));
                        }
                        continue;
                    }
                }
                // Rate limit: a sink over its rate leaves its rows due (no
                // claim, no slot, no window room; a lane head simply waits)
                // and the loop wakes when the next call may start.
                if let Some(at) = self.rate_limited((envelope.source, dk.sink), now) {
                    saturated.insert(key);
                    self.next_wake_ms = Some(self.next_wake_ms.map_or(at, |w| w.min(at)));
                    continue;
                }
                claims.extend(ankusa_queue::claim(&*self.kv, dk, now)?);
                start_bytes += size;
                starts.push(Start { row_id, key, route, envelope, row, size, trial: half_open, site });
            }
            if !full_page {
                reached_end = true;
                break;
            }
        }
        // Stopped at the page limit with saturated sinks' rows skipped: the
        // next visit goes on from here (after its first page) instead of
        // re-reading the same backlog and never reaching what lies behind it.
        if !reached_end && pages >= SCAN_PAGES && !saturated.is_empty() {
            self.resume.insert(tenant, range.start.clone());
        }
        // A half-open sink whose due rows the scan met are all of lanes that
        // failed in the breaker's current run: the best ranked is the trial.
        for (key, (_, dk, start)) in deferred {
            let trial_taken = starts.iter().any(|s| s.key == key && s.trial);
            if trial_taken || self.in_flight_total + starts.len() >= self.dispatch.window {
                continue;
            }
            if let Some(at) = self.rate_limited((key.1, key.2), now) {
                self.next_wake_ms = Some(self.next_wake_ms.map_or(at, |w| w.min(at)));
                continue;
            }
            claims.extend(ankusa_queue::claim(&*self.kv, dk, now)?);
            starts.push(start);
        }
        self.write(dead)?;
        self.write(holds)?;
        self.write(claims)?;
        if !horizon.is_empty() {
            let mut b = Batch::new();
            for row_id in &horizon {
                warn!(row = %row_id, "retry horizon passed before the next attempt: dead-lettered");
                b.extend(ankusa_queue::dead_letter(&*self.kv, *row_id, Origin::InFlight, "retry horizon passed", now)?);
            }
            self.write(b)?;
        }
        if !parks.is_empty() {
            let mut b = Batch::new();
            for (dk, until) in &parks {
                b.extend(ankusa_queue::park(&*self.kv, *dk, *until, now)?);
                self.next_wake_ms = Some(self.next_wake_ms.map_or(*until, |w| w.min(*until)));
            }
            self.write(b)?;
        }
        for s in starts {
            if s.trial {
                self.breakers.entry(s.key).or_default().trial_in_flight = true;
                info!(row = %s.row_id, "breaker half-open: one trial delivery");
            }
            self.start(s);
        }
        Ok(())
    }

    fn start(&mut self, s: Start) {
        let tenant_name = self.routes.tenants.get(&s.row_id.tenant).cloned().unwrap_or_else(|| s.row_id.tenant.to_string());
        let content_type = s
            .envelope
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        let ordered = s.row.lane.is_some();
        let ordering_key = if ordered {
            Some(s.row.ordering_key.clone().unwrap_or_else(|| format!("{}/{}", tenant_name, s.route.source_name).into_bytes()))
        } else {
            None
        };
        let ctx = DeliveryCtx {
            tenant: tenant_name,
            source: s.route.source_name.clone(),
            sink_name: s.route.sink_name.clone(),
            sink: s.row_id.sink,
            seq: s.row_id.seq,
            attempt: s.row.attempts + 1,
            idempotency_key: ankusa_sinks::uuid_text(&s.envelope.idempotency_key),
            ordering_key,
            lane_hex: s.row.lane.map(|l| l.to_hex()),
            ordered,
            received_at_ms: s.envelope.received_at_ms,
            content_type,
        };
        *self.in_flight.entry(s.key).or_default() += 1;
        self.in_flight_total += 1;
        self.in_flight_bytes += s.size;
        let tx = self.done_tx.clone();
        let attempts_before = s.row.attempts;
        let (size, trial, site) = (s.size, s.trial, s.site);
        tokio::spawn(async move {
            let outcome = s.route.sink.deliver(&s.envelope, &ctx).await;
            let _ = tx.send(Done { row: s.row_id, key: s.key, site, outcome, attempts_before, size, trial });
        });
    }

    /// Turns finished calls into row transitions, one batch (ADR 4.5: built
    /// now, from the live engine).
    async fn flush(&mut self, done: Vec<Done>) -> Result<(), PipelineError> {
        // Sinks that buffer make their part durable before any row is deleted;
        // a sink whose flush fails gets its Ok outcomes turned into retries
        // (those deliveries are not durable at the destination).
        let mut flushed: HashMap<(SourceId, SinkIx), bool> = HashMap::new();
        for d in &done {
            let id = (d.key.1, d.key.2);
            if matches!(d.outcome, Outcome::Ok)
                && !flushed.contains_key(&id)
                && let Some(route) = self.routes.sinks.get(&id)
            {
                let ok = match route.sink.flush().await {
                    Ok(()) => true,
                    Err(e) => {
                        warn!(sink = %route.sink_name, error = %e, "sink flush failed; its deliveries of this batch will be retried");
                        false
                    }
                };
                flushed.insert(id, ok);
            }
        }
        let mut done = done;
        for d in &mut done {
            if matches!(d.outcome, Outcome::Ok) && flushed.get(&(d.key.1, d.key.2)) == Some(&false) {
                d.outcome = Outcome::Retry { reason: "sink flush failed".into(), after: None };
            }
        }
        let now = self.now();
        let mut batch = Batch::new();
        let mut rng = rand::rng();
        for d in done {
            let slot = self.in_flight.entry(d.key).or_default();
            *slot = slot.saturating_sub(1);
            self.in_flight_total = self.in_flight_total.saturating_sub(1);
            self.in_flight_bytes = self.in_flight_bytes.saturating_sub(d.size);
            let built = self.outcome_batch(&d, now, &mut rng);
            match built {
                Ok(b) => {
                    batch.extend(b);
                }
                Err(QueueError::NotInState { row, .. } | QueueError::MissingRow { row }) => {
                    // Purged or dead-lettered by an admin while the call ran.
                    debug!(%row, "outcome of a row that has moved on: dropped");
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.publish_breakers();
        self.write(batch)
    }

    /// Copies the breakers' failures and open times for the admin API.
    fn publish_breakers(&self) {
        if let Ok(mut m) = self.status.breakers.write() {
            m.clear();
            m.extend(
                self.breakers
                    .iter()
                    .map(|(k, b)| (*k, Published { failures: b.failures, open_until_ms: b.open_until_ms, open: b.open })),
            );
        }
    }

    fn outcome_batch(&mut self, d: &Done, now: u64, rng: &mut impl Rng) -> Result<Batch, QueueError> {
        // The sink entry's retry policy decides an HTTP status (retry,
        // permanent, sink gone) and a retry's next attempt (docs/design.md
        // section 5, "Retry policy").
        let policy = self.routes.retry_policy(d.key.1, d.key.2, self.retry);
        let first = match d.outcome {
            Outcome::Retry { .. } | Outcome::HttpStatus { .. } => self.first_attempt_ms(d.row)?.unwrap_or(now),
            _ => now,
        };
        let outcome = policy.resolve(d.outcome.clone(), first, now);
        let breaker = self.breakers.entry(d.key).or_default();
        if d.trial {
            breaker.trial_in_flight = false;
        }
        // A retired source's attempt that did not deliver is not retried.
        if !matches!(d.outcome, Outcome::Ok)
            && let Some(reason) = self.retiring.get(&d.key.1)
        {
            warn!(row = %d.row, "an attempt of a retired source failed: dead-lettered");
            let batch = ankusa_queue::dead_letter_attempted(&*self.kv, d.row, reason, now)?;
            *self.retired_dead.entry(d.key.1).or_default() += 1;
            return Ok(batch);
        }
        match &outcome {
            Outcome::Ok => {
                if breaker.answered() {
                    info!(row = %d.row, "breaker closed: the trial delivery succeeded");
                }
                debug!(row = %d.row, "delivered");
                ankusa_queue::delivered(&*self.kv, d.row, now)
            }
            Outcome::Retry { reason, after } => {
                if breaker.failed(d.site, d.trial, &self.breaker, now) {
                    warn!(row = %d.row, failures = breaker.failures, lanes = breaker.sites.len(), open_ms = self.breaker.open_ms, "breaker open for this sink");
                }
                let attempts = d.attempts_before + 1;
                let Some(due) = policy.next_attempt(attempts, *after, first, now, rng) else {
                    warn!(row = %d.row, %reason, "retry horizon passed: dead-lettered");
                    return ankusa_queue::dead_letter_attempted(&*self.kv, d.row, &format!("retry horizon passed: {reason}"), now);
                };
                let delay = due.saturating_sub(now);
                warn!(row = %d.row, attempt = attempts, delay_ms = delay, %reason, "delivery failed; will retry");
                self.next_wake_ms = Some(self.next_wake_ms.map_or(due, |w| w.min(due)));
                ankusa_queue::retry(&*self.kv, d.row, due, reason, now)
            }
            Outcome::Permanent { reason } => {
                breaker.answered();
                warn!(row = %d.row, %reason, "permanent failure: dead-lettered");
                ankusa_queue::dead_letter_attempted(&*self.kv, d.row, &format!("permanent: {reason}"), now)
            }
            Outcome::SinkGone { reason } => {
                warn!(row = %d.row, %reason, "sink gone: dead-lettered");
                ankusa_queue::dead_letter_attempted(&*self.kv, d.row, &format!("sink gone: {reason}"), now)
            }
            Outcome::SourceGone { reason } => {
                warn!(row = %d.row, %reason, "source gone: dead-lettered as an orphan");
                ankusa_queue::orphan(&*self.kv, d.row, Origin::InFlight, &format!("source gone: {reason}"), now)
            }
            Outcome::HttpStatus { .. } => unreachable!("resolved by the retry policy above"),
        }
    }

    /// The first attempt time of `row` (None when the row has none or is gone).
    fn first_attempt_ms(&self, row: RowId) -> Result<Option<u64>, QueueError> {
        let raw = self.kv.get(Cf::Deliveries, &delivery_key(row.tenant, row.seq, row.sink))?;
        Ok(raw.as_deref().map(DeliveryRow::decode).transpose()?.and_then(|r| r.first_attempt_at_ms))
    }
}

struct Start {
    row_id: RowId,
    key: BreakerKey,
    site: Site,
    route: Route,
    envelope: Envelope,
    row: DeliveryRow,
    size: u64,
    trial: bool,
}

/// How long a stopping pipeline waits for the deliveries in flight, ms (10 s:
/// with the edge's drain it stays inside Kubernetes' default 30 s grace).
pub const SHUTDOWN_WAIT_MS: u64 = 10_000;

/// Pages of `dispatch.batch` due entries a tenant visit reads at most.
const SCAN_PAGES: usize = 8;

/// Reads a tenant counter field, for metrics and tests.
///
/// # Errors
/// Engine errors.
pub fn counter(read: &impl Read, tenant: TenantOrd, field: CounterField) -> Result<i64, EngineError> {
    read.counter(&counter_key(tenant, field))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    fn lane(b: u8) -> Site {
        Site::Lane(LaneId([b; 16]))
    }

    const POLICY: BreakerPolicy = BreakerPolicy { failures: 5, distinct: 3, open_ms: 1000 };

    #[test]
    fn one_failing_lane_never_opens_the_breaker() {
        let mut b = Breaker::default();
        for now in 0..100 {
            assert!(!b.failed(lane(1), false, &POLICY, now));
        }
        assert_eq!((b.failures, b.open, b.sites.len()), (100, false, 1));
        // Nor do two (distinct 3).
        for now in 100..200 {
            assert!(!b.failed(lane(2), false, &POLICY, now));
        }
        assert!(!b.open);
    }

    #[test]
    fn failures_from_distinct_lanes_open_it_and_an_answer_closes_it() {
        let mut b = Breaker::default();
        // Four failures from three lanes: five are needed.
        for (now, l) in [1, 2, 1, 3].into_iter().enumerate() {
            assert!(!b.failed(lane(l), false, &POLICY, now as u64));
        }
        assert!(b.failed(lane(1), false, &POLICY, 10));
        assert_eq!((b.open, b.open_until_ms), (true, 1010));
        // A call started before it opened fails while open: no extension.
        assert!(!b.failed(lane(2), false, &POLICY, 20));
        assert_eq!(b.open_until_ms, 1010);
        // A failed trial opens it again.
        assert!(b.failed(lane(4), true, &POLICY, 1500));
        assert_eq!(b.open_until_ms, 2500);
        assert!(b.answered());
        assert_eq!((b.failures, b.open, b.sites.len(), b.last_failed), (0, false, 0, None));
        assert!(!b.answered());
    }

    #[test]
    fn unordered_rows_are_sites_of_their_own() {
        let row = |seq| Site::Row(RowId::new(TenantOrd(1), ankusa_keys::Seq(seq), SinkIx(0)));
        let mut b = Breaker::default();
        for (now, seq) in [1, 1, 1, 1, 2].into_iter().enumerate() {
            assert!(!b.failed(row(seq), false, &POLICY, now as u64));
        }
        assert!(b.failed(row(3), false, &POLICY, 9), "five failures, three rows");
        // distinct 1: any five failures.
        let one = BreakerPolicy { distinct: 1, ..POLICY };
        let mut b = Breaker::default();
        for now in 0..4 {
            assert!(!b.failed(row(1), false, &one, now));
        }
        assert!(b.failed(row(1), false, &one, 4));
    }

    #[test]
    fn half_open_trials_rank_other_lanes_first() {
        let mut b = Breaker::default();
        for (now, l) in [1, 2, 3, 1, 2].into_iter().enumerate() {
            b.failed(lane(l), false, &POLICY, now as u64);
        }
        assert!(b.open);
        assert_eq!(b.trial_rank(lane(9)), 0, "a lane that has not failed");
        assert_eq!(b.trial_rank(lane(1)), 1, "a lane that failed");
        assert_eq!(b.trial_rank(lane(2)), 2, "the lane that failed last");
        b.failed(lane(9), true, &POLICY, 2000);
        assert_eq!((b.trial_rank(lane(9)), b.trial_rank(lane(2))), (2, 1));
    }

    #[test]
    fn the_rate_limit_counts_on_the_pipeline_clock() {
        let now = Arc::new(AtomicU64::new(1_000_000));
        let n = Arc::clone(&now);
        let clock = LimiterClock(Arc::new(move || n.load(Ordering::SeqCst)));
        let l = limiter(RateLimit { per_second: 20.0, burst: 20 }, &clock).expect("a quota");
        for _ in 0..20 {
            assert!(l.check().is_ok(), "the burst");
        }
        let next = l.check().expect_err("over the rate").earliest_possible();
        assert!(next > Duration::from_millis(1_000_000) && next <= Duration::from_millis(1_000_050), "{next:?}");
        now.store(1_000_049, Ordering::SeqCst);
        assert!(l.check().is_err());
        now.store(1_000_050, Ordering::SeqCst);
        assert!(l.check().is_ok(), "one every 50 ms");
        assert!(l.check().is_err());
        // A fraction: one every 2 s.
        let slow = limiter(RateLimit { per_second: 0.5, burst: 1 }, &clock).expect("a quota");
        assert!(slow.check().is_ok());
        now.store(1_002_049, Ordering::SeqCst);
        assert!(slow.check().is_err());
        now.store(1_002_050, Ordering::SeqCst);
        assert!(slow.check().is_ok());
        // Rates no quota can express are refused, not a panic.
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(limiter(RateLimit { per_second: bad, burst: 1 }, &clock).is_none(), "{bad}");
        }
    }
}
