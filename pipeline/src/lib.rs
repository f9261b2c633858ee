//! The dispatch pipeline (docs/design.md section 5): it moves pending rows to
//! their sinks. It decides *when* to call the pure builders of `queue` and
//! `lanes`; what they write is theirs.
//!
//! Stages, each a module, with the types that cross between them:
//! - **scan and claim** ([`scan`]): a visit of each tenant with an `?A` marker
//!   in turn (fair share) sweeps its lanes while the node's lane_members > 0
//!   (ADR 4.6), reads its due index from a low-water cursor, and claims due
//!   rows up to `batch`, the admission window and the sink's concurrency per
//!   (tenant, sink); it holds rows of paused sinks, parks rows of a sink whose
//!   breaker ([`breaker`]) is open, leaves rows of a sink over its rate limit
//!   ([`limit`]) due, and hands every claimed row on as a `Start`.
//! - **calls** ([`calls`]): each claimed row becomes a `Call` that runs as its
//!   own task on the async runtime, holds no store handle and no lock, and
//!   reports a `Done`. A slow sink delays nobody but its own lane. A sink
//!   entry with a transform ([`transform`]) has its program run on the body
//!   first, in the call (docs/design.md section 6, "Transforms").
//! - **committer** ([`commit`]): the `Done`s that came in since the last step
//!   become row transitions built against the live engine (ADR 0004 4.5) and
//!   one `Buffered` batch; a lane's release in it promotes the next member,
//!   which the scan of the same step claims. The retry policy ([`retry`])
//!   decides retries and dead letters; the breakers count failures here,
//!   and so do the failing runs of the sink entries ([`failing`]), which
//!   pause an entry with an `auto_pause_after_ms` once every attempt failed
//!   that long.
//!
//! What the stages report for the relay's notifications (breakers opened
//! and closed, dead letters counted per sink entry, failing and auto-paused
//! entries) is recorded in [`PipelineEvents`] ([`events`]), in memory and
//! bounded, for `ankusa serve` to read (docs/design.md section 5,
//! "Notifications"): the pipeline never waits on it.
//!
//! Each stage is a type that owns its state behind private fields and a
//! small method surface: the scan's [`scan::Scanner`] (with its
//! [`cursor::Cursors`]), the lane sweep's [`sweep::LaneSweep`] (a visit's
//! first step), the call slots and rate limiters ([`slots::Slots`]), the
//! breakers ([`breaker::BreakerBook`]), the pauses and their resume work
//! ([`pauses::Pauses`]), the held-back backlogs ([`held::HeldBacklogs`]),
//! the retiring sources ([`retire::Retirements`]) and the committer
//! ([`commit::Committer`]). What every stage reads and none changes (store,
//! routes, configuration, clock) is [`env::Env`]. The dispatcher
//! ([`dispatcher::Dispatcher`]) is their composition: it runs them in order
//! and hands each, as arguments, the others' state it needs.
//!
//! The module graph (who imports whom; the crate root's types, `Routes`,
//! `DispatchConfig`, `PipelineError` and the policies, are read by every
//! module and left out). It has no circle, and the test
//! `tests::module_graph` checks that it is the code's:
//!
//! ```text
//! dispatcher -> breaker, calls, commit, env, events, failing, handle, held, limit, pauses, retire, scan, slots, sweep
//! commit -> breaker, calls, env, events, failing, retire, slots
//! calls -> breaker, scan, slots, transform
//! scan -> breaker, cursor, env, events, held, pauses, retire, slots
//! held -> breaker, cursor, env, pauses
//! pauses -> cursor, env, handle
//! sweep -> env
//! slots -> breaker, limit
//! env -> breaker
//! handle -> breaker, events
//! failing -> events
//! breaker, cursor, events, limit, retention, retire, retry, transform -> (none)
//! ```
//!
//! The engine work of the stages (every store read and commit) runs in one
//! engine step at a time ([`dispatcher`]), off the async worker threads
//! (`spawn_blocking`): a slow compaction or fsync never stalls the sink
//! calls or the edge. The async loop ([`Pipeline::run`]) only gathers the
//! outcomes and control calls, flushes the sinks that buffer, runs a step,
//! starts the calls it claimed, and waits when there is nothing to do. Steps
//! follow each other as fast as they come: outcomes are group-committed by
//! the next step while the calls of other rows go on, and a visit that
//! stopped at its claim budget is followed by another step at once.
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
//! Admin work that moves rows the pipeline also moves runs in an engine step,
//! before its commit and visits (docs/design.md section 5, "Purge a tenant"
//! and "Retire a source"): [`PipelineHandle::exclusive`] builds and commits a
//! batch with no visit or commit in between; [`PipelineHandle::quiesce`] stops
//! every visit of a tenant (its purge; the purge marks in `meta` are read at
//! start); [`PipelineHandle::retire`] dead-letters the rows of a source a
//! visit meets and the failed attempts of its calls in flight.
//!
//! A lane has one row in ?D/?F at a time (its head), so "one call per lane"
//! needs no bookkeeping here.
//!
//! Durability: claims and outcomes are written [`ankusa_engine::Durability::Buffered`]: the
//! WAL write happens before the commit returns, so a process crash (SIGKILL)
//! loses none; a machine crash can lose the last ones, which only sends again
//! deliveries already made, in lane order (at-least-once).
#![deny(missing_docs, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_engine::{EngineError, Kv, Read};
use ankusa_keys::meta::PauseTarget;
use ankusa_keys::{CounterField, LaneId, SinkIx, SourceId, TenantOrd, counter_key};
use ankusa_lanes::OnDeadHead;
use ankusa_queue::{PauseMap, QueueError};
use ankusa_sinks::Sink;
use tokio::sync::{Notify, mpsc, watch};
use tracing::{info, warn};

mod breaker;
mod calls;
mod commit;
mod cursor;
mod dispatcher;
mod env;
mod events;
mod failing;
mod handle;
mod held;
mod limit;
mod pauses;
pub mod retention;
mod retire;
mod retry;
mod scan;
mod slots;
mod sweep;
#[cfg(test)]
mod tests;
mod transform;

pub use breaker::{BreakerCounts, BreakerPolicy, BreakerState, PipelineStatus};
pub use events::{
    DEAD_LETTER_SAMPLES_KEPT, DeadLetterTally, FailingRun, PipelineEvent, PipelineEvents,
};
pub use handle::{
    ControlError, ExclusiveWork, PauseStatus, PipelineHandle, Reconfiguration, Retirement,
};
pub use limit::RateLimit;
pub use retry::{ALWAYS_RETRIED, RetryPolicy, RetryStatuses};
pub use transform::{TRANSFORMED_CONTENT_TYPE, Transform};

use calls::Done;
use dispatcher::Dispatcher;
use handle::{Control, PauseBook};
use limit::{LimiterClock, limiter};

/// How much the pipeline does at once (docs/design.md section 5, `dispatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchConfig {
    /// Most rows claimed per tenant visit; also the lane sweep's budget.
    pub batch: usize,
    /// Most calls in flight per (tenant, sink) of a sink whose client does
    /// not pipeline (HTTP, file).
    pub sink_concurrency: usize,
    /// Most calls in flight per (tenant, sink) of a sink whose client
    /// pipelines them ([`ankusa_sinks::Sink::pipelined`]); each lane is still
    /// one call at a time.
    pub pipelined_concurrency: usize,
    /// Most calls in flight on the node (the admission window).
    pub window: usize,
    /// Most bytes (row sizes) in flight on the node.
    pub window_bytes: u64,
    /// How long finished calls are collected before their outcomes are
    /// committed, ms. 0 (the default): an outcome is committed by the next
    /// engine step, with every other outcome that came in while the step
    /// before ran (a group commit that grows with the load); a lane's ceiling
    /// is about 1 / (sink round trip + one step + this).
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
            pipelined_concurrency: 256,
            window: 1024,
            window_bytes: 64 << 20,
            flush_interval_ms: 0,
            idle_ms: 50,
        }
    }
}

/// What the pipeline keeps of each attempt in the row's attempt log
/// (docs/design.md section 3, "The attempt log"; `node.attempt_log`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptLogConfig {
    /// Keep the log. Off, no attempt writes to it.
    pub enabled: bool,
    /// The newest attempts kept per row (at least 1).
    pub max_attempts: u32,
    /// The first bytes of an HTTP answer's body kept (0: none).
    pub max_body_bytes: usize,
}

impl Default for AttemptLogConfig {
    /// On, 20 attempts, 4 KiB of each body: the configuration's defaults.
    fn default() -> Self {
        AttemptLogConfig {
            enabled: true,
            max_attempts: 20,
            max_body_bytes: 4096,
        }
    }
}

impl AttemptLogConfig {
    /// What a sink reports of an answer's body: nothing when the log is off.
    pub(crate) fn response_body_max_bytes(&self) -> usize {
        if self.enabled { self.max_body_bytes } else { 0 }
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
    /// The tenant of each source bound to one. A source not listed may carry
    /// hooks of any tenant (a `{tenant}` path source, or a test that does not
    /// say): its sink entries count for every tenant. A visit sizes its first
    /// page by the free call slots of its tenant's sink entries and stops
    /// reading when it has found all of them saturated (docs/design.md
    /// section 5, "A pass").
    pub source_tenants: HashMap<SourceId, TenantOrd>,
    /// The ordered sink entries (ADR 0004): what a tenant behind a
    /// cluster's epoch barrier does not claim ([`TenantClaims::Unordered`]).
    pub ordered: BTreeSet<(SourceId, SinkIx)>,
    /// The sink entries with a `transform` (docs/design.md section 6,
    /// "Transforms"): each call runs it on the stored body before the sink
    /// gets the hook. An entry not here gets the body as received.
    pub transforms: HashMap<(SourceId, SinkIx), Transform>,
    /// The sink entries with an `auto_pause_after_ms`: paused once every
    /// attempt has failed that long, ms (docs/design.md section 5,
    /// "Notifications"); an entry not here is never paused by the pipeline.
    pub auto_pause: HashMap<(SourceId, SinkIx), u64>,
    /// The ordered sink entries with `dead_letter: hold` (ADR 0004 section
    /// 7): a lane head they dead-letter keeps its lane held until it is
    /// revived or dropped. An entry not here releases the lane.
    pub held: BTreeSet<(SourceId, SinkIx)>,
}

/// Which of a tenant's due rows this node may claim: every tenant's, always,
/// in a standalone relay. In a cluster (docs/design.md section 11) a node
/// claims the rows of a tenant it owns while its lease is fresh, and of an
/// earlier epoch it is draining; a tenant whose earlier epochs are not yet
/// drained (the epoch barrier) has the rows of its held-back ordered lanes
/// left due, so every key's hooks of the earlier epoch are delivered before
/// its new ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenantClaims {
    /// Every due row.
    All,
    /// The rows of unordered sink entries only: an ordered lane's head stays
    /// due and its members stay members, unclaimed, until the barrier lifts
    /// (a failover's barrier: the new owner cannot know which keys the old
    /// epoch holds).
    Unordered,
    /// Every row but those of these ordered lanes, whose heads stay due and
    /// members stay members until the barrier lifts (a planned move's
    /// barrier: the lanes in which the old owner still held rows when it
    /// fenced the tenant).
    AllBut(Arc<BTreeSet<LaneId>>),
    /// None: the tenant is not this node's to deliver now (another node
    /// owns it, or this node's lease is past its deadline). Rows already
    /// claimed finish.
    Nothing,
}

/// Says, at each visit, which rows of a tenant may be claimed
/// ([`Pipeline::fencing`]).
pub type Fencing = Arc<dyn Fn(TenantOrd) -> TenantClaims + Send + Sync>;

impl Routes {
    pub(crate) fn source_known(&self, source: SourceId) -> bool {
        self.sinks.keys().any(|(s, _)| *s == source)
    }

    /// The retry policy of sink entry `sink` of `source`: its own, else
    /// `global`.
    pub(crate) fn retry_policy(
        &self,
        source: SourceId,
        sink: SinkIx,
        global: RetryPolicy,
    ) -> RetryPolicy {
        self.retry.get(&(source, sink)).copied().unwrap_or(global)
    }

    /// What a lane head of sink entry `sink` of `source` does to its lane
    /// when it is dead-lettered (ADR 0004 section 8).
    pub(crate) fn on_dead_head(&self, source: SourceId, sink: SinkIx) -> OnDeadHead {
        if self.held.contains(&(source, sink)) {
            OnDeadHead::Hold
        } else {
            OnDeadHead::Release
        }
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

/// The pipeline: build with [`Pipeline::new`], run with [`Pipeline::run`].
pub struct Pipeline<K: Kv> {
    dispatcher: Dispatcher<K>,
    wake: Arc<Notify>,
    /// `Some(wait_ms)` once stopping: how long to wait for the calls in
    /// flight ([`SHUTDOWN_WAIT_MS`], or a takeover's shorter wait).
    shutdown: watch::Receiver<Option<u64>>,
    done_tx: mpsc::UnboundedSender<Done>,
    done_rx: mpsc::UnboundedReceiver<Done>,
    control_rx: mpsc::UnboundedReceiver<Control>,
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
        let (shutdown_tx, shutdown) = watch::channel(None);
        let wake = Arc::new(Notify::new());
        let ready = Arc::new(AtomicBool::new(false));
        let book = Arc::new(Mutex::new(PauseBook {
            config: routes.paused.clone(),
            runtime: PauseMap::new(),
        }));
        // The configuration's pauses count from the start; the runtime ones
        // join when `run` has read them.
        let paused_sinks = Arc::new(AtomicU64::new(
            routes
                .sinks
                .keys()
                .filter(|(s, k)| {
                    routes.paused.contains(&PauseTarget::Source(*s))
                        || routes.paused.contains(&PauseTarget::Sink(*s, *k))
                })
                .count() as u64,
        ));
        let status = PipelineStatus {
            delivery: Arc::new(ankusa_queue::metrics::DeliveryMetrics::new(
                routes.sinks.values().map(|r| r.sink.kind()),
            )),
            ..PipelineStatus::default()
        };
        let clock: Arc<dyn Fn() -> u64 + Send + Sync> = Arc::new(clock);
        let limiter_clock = LimiterClock(Arc::clone(&clock));
        let limiters = routes
            .rate_limits
            .iter()
            .filter_map(|(id, limit)| {
                let l = limiter(*limit, &limiter_clock);
                if l.is_none() {
                    warn!(
                        source = id.0.0,
                        sink = id.1.0,
                        ?limit,
                        "a rate limit no quota can express: not applied"
                    );
                }
                Some((*id, (*limit, l?)))
            })
            .collect();
        let tenant_routes = tenant_routes_of(&routes);
        let events = events::PipelineEvents::default();
        let handle = PipelineHandle {
            wake: Arc::clone(&wake),
            shutdown: Arc::new(shutdown_tx),
            ready: Arc::clone(&ready),
            paused_sinks: Arc::clone(&paused_sinks),
            control,
            book: Arc::clone(&book),
            status: status.clone(),
            events: events.clone(),
        };
        (
            Pipeline {
                dispatcher: Dispatcher::new(
                    env::Env {
                        kv,
                        routes: Arc::new(routes),
                        dispatch,
                        retry,
                        breaker,
                        attempt_log: AttemptLogConfig::default(),
                        clock,
                    },
                    dispatcher::Shared {
                        ready: Arc::clone(&ready),
                        book,
                        paused_sinks,
                        status,
                        limiters,
                        tenant_routes,
                        events,
                    },
                ),
                wake,
                shutdown,
                done_tx,
                done_rx,
                control_rx,
            },
            handle,
        )
    }

    /// Takes the cluster's fencing (docs/design.md section 11): each visit of
    /// a tenant first asks it which of the tenant's rows this node may claim
    /// ([`TenantClaims`]). Without one, every row of every tenant.
    #[must_use]
    pub fn fencing(mut self, fencing: Fencing) -> Self {
        self.dispatcher.set_fencing(fencing);
        self
    }

    /// Takes the Writer's due floor ([`ankusa_queue::writer::WriterHandle::due_floor`]):
    /// before each pass the dispatcher lowers its low-water cursors to the
    /// rows the Writer committed meanwhile, so a hook dated before a visit
    /// that set a cursor above it is read by the next visit (without it, by
    /// the next cursor reset, at most a second later).
    #[must_use]
    pub fn due_floor(mut self, floor: Arc<std::sync::atomic::AtomicU64>) -> Self {
        self.dispatcher.set_due_floor(floor);
        self
    }

    /// Takes what the row's attempt log keeps of each attempt
    /// (`node.attempt_log`; docs/design.md section 3, "The attempt log").
    /// Without it, [`AttemptLogConfig::default`]: on, 20 attempts a row, 4 KiB
    /// of each answer's body.
    #[must_use]
    pub fn attempt_log(mut self, config: AttemptLogConfig) -> Self {
        self.dispatcher.set_attempt_log(config);
        self
    }

    /// Takes the Writer's lane hints ([`ankusa_queue::writer::WriterHandle::lane_rows`]):
    /// the lane sweep (ADR 0004 4.6) then reads the markers of the lanes the
    /// Writer named (point reads, `ankusa_lanes::sweep_lanes`), and scans
    /// every marker only at start-up, after a write that named no lanes (an
    /// admin job step), after a scan that read a full budget of markers,
    /// after a control call, and at least once a second (docs/design.md
    /// section 5, "Lane sweep"). Without it, every visit scans every marker
    /// while the node has lane members.
    #[must_use]
    pub fn lane_rows(mut self, hints: Arc<ankusa_queue::writer::LaneRows>) -> Self {
        self.dispatcher.set_lane_rows(hints);
        self
    }

    /// Runs: recovers claimed rows of a previous run (ADR 4.7), then loops until
    /// shutdown with nothing in flight.
    ///
    /// # Errors
    /// A store failure ([`PipelineError`]); the caller exits the process.
    pub async fn run(self) -> Result<(), PipelineError> {
        let Pipeline {
            dispatcher,
            wake,
            shutdown,
            done_tx,
            mut done_rx,
            mut control_rx,
        } = self;
        let (mut d, ()) = engine(dispatcher, |d| d.start_up()).await?;
        let mut stopping_since: Option<tokio::time::Instant> = None;
        let mut done: Vec<Done> = Vec::new();
        let mut controls: Vec<Control> = Vec::new();
        loop {
            // Read each round: a reload replaces them (Control::Reconfigure).
            let routes = Arc::clone(&d.env().routes);
            let flush_interval = Duration::from_millis(d.env().dispatch.flush_interval_ms);
            let idle_ms = d.env().dispatch.idle_ms.max(1);
            let stop_wait_ms = *shutdown.borrow();
            let stopping = stop_wait_ms.is_some();
            if stopping && stopping_since.is_none() {
                stopping_since = Some(tokio::time::Instant::now());
            }
            while let Ok(c) = control_rx.try_recv() {
                controls.push(c);
            }
            while let Ok(x) = done_rx.try_recv() {
                done.push(x);
            }
            calls::flush_sinks(&routes, &mut done).await;
            let (c, x) = (std::mem::take(&mut controls), std::mem::take(&mut done));
            let (next, calls) = engine(d, move |d| {
                d.step(c, x, !stopping)?;
                Ok(d.take_calls())
            })
            .await?;
            d = next;
            for call in calls {
                calls::spawn(call, &done_tx);
            }
            if stopping {
                if d.in_flight() == 0 {
                    info!("pipeline stopped: nothing in flight");
                    return Ok(());
                }
                // A destination that does not answer must not hold the
                // process past an orchestrator's kill grace: the calls still
                // out stay claimed in the store and are delivered again after
                // the next start (recover_inflight, ADR 4.7; at-least-once).
                let wait_ms = stop_wait_ms.unwrap_or(SHUTDOWN_WAIT_MS);
                if stopping_since.is_some_and(|t| t.elapsed() >= Duration::from_millis(wait_ms)) {
                    warn!(
                        in_flight = d.in_flight(),
                        waited_ms = wait_ms,
                        "pipeline stopped with deliveries still in flight; they are delivered again after the next start"
                    );
                    return Ok(());
                }
            } else if d.more() {
                // A visit stopped at its claim budget: step again at once
                // (after letting the calls just spawned run).
                tokio::task::yield_now().await;
                continue;
            }
            let now = d.now();
            let mut idle = idle_ms;
            if let Some(wait) = d.wake_in(now) {
                idle = idle.min(wait);
            }
            tokio::select! {
                Some(x) = done_rx.recv() => {
                    done.push(x);
                    if !flush_interval.is_zero() {
                        // Collect what else finishes within the flush
                        // interval, then commit the outcomes together.
                        tokio::time::sleep(flush_interval).await;
                    }
                }
                Some(c) = control_rx.recv() => controls.push(c),
                _ = wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(idle)) => {}
            }
        }
    }
}

/// Each tenant's sink entries: those of the sources bound to it and of the
/// sources bound to none (a scan visit sizes its first page by their free
/// call slots).
pub(crate) fn tenant_routes_of(routes: &Routes) -> HashMap<TenantOrd, Vec<(SourceId, SinkIx)>> {
    routes
        .tenants
        .keys()
        .map(|t| {
            let mine = routes
                .sinks
                .keys()
                .filter(|id| routes.source_tenants.get(&id.0).is_none_or(|o| o == t))
                .copied()
                .collect();
            (*t, mine)
        })
        .collect()
}

/// Runs `f` on the dispatcher on a blocking thread (`spawn_blocking`), off
/// the async workers, and hands the dispatcher back with `f`'s result. A
/// panic in `f` is resumed on the caller.
async fn engine<K: Kv, T: Send + 'static>(
    mut d: Dispatcher<K>,
    f: impl FnOnce(&mut Dispatcher<K>) -> Result<T, PipelineError> + Send + 'static,
) -> Result<(Dispatcher<K>, T), PipelineError> {
    match tokio::task::spawn_blocking(move || {
        let r = f(&mut d);
        r.map(|t| (d, t))
    })
    .await
    {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// How long a stopping pipeline waits for the deliveries in flight, ms (10 s:
/// with the edge's drain it stays inside Kubernetes' default 30 s grace).
pub const SHUTDOWN_WAIT_MS: u64 = 10_000;

/// How the reason of a pause the pipeline makes itself begins (a sink entry
/// whose every attempt failed for its `auto_pause_after_ms`; docs/design.md
/// section 5, "Pause"): `ankusa sources` shows such a pause as `auto`.
pub const AUTO_PAUSE_REASON_PREFIX: &str = "auto-paused: ";

/// Reads a tenant counter field, for metrics and tests.
///
/// # Errors
/// Engine errors.
pub fn counter(
    read: &impl Read,
    tenant: TenantOrd,
    field: CounterField,
) -> Result<i64, EngineError> {
    read.counter(&counter_key(tenant, field))
}
