//! The dispatcher: the state the stages share and the engine step that runs
//! them in turn (docs/design.md section 5). A step never waits on a sink: it
//! commits the outcomes that have come in (the committer), visits the tenants
//! (scan and claim) and hands back the calls to start; the sink calls run on
//! the async runtime meanwhile.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ankusa_engine::{Batch, Durability, Kv};
use ankusa_keys::meta::{PauseTarget, PausedValue};
use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::Cursor;
use ankusa_queue::writer::LaneRows;
use tracing::info;

use crate::breaker::{Breaker, BreakerKey, BreakerPolicy, PipelineStatus};
use crate::calls::{Call, Done};
use crate::handle::{Control, ControlError, PauseBook, Retirement};
use crate::limit::Limiter;
use crate::{DispatchConfig, PipelineError, RetryPolicy, Routes};

/// How often the due scan's low-water cursors are dropped, so a row a clock
/// step put below a cursor waits at most this long.
pub(crate) const LOW_WATER_RESET: Duration = Duration::from_secs(1);

/// The dispatcher's state and its engine work: everything the stages read
/// and write, owned by one engine step at a time (the async side hands it to
/// a blocking thread for each step: [`crate::Pipeline::run`]). Its methods
/// are the stages: [`Dispatcher::step`] runs the committer
/// ([`crate::commit`]) and then the scan and claim ([`crate::scan`]), which
/// hands back the calls to start ([`crate::calls`]).
pub(crate) struct Dispatcher<K: Kv> {
    pub(crate) kv: Arc<K>,
    pub(crate) routes: Arc<Routes>,
    pub(crate) dispatch: DispatchConfig,
    pub(crate) retry: RetryPolicy,
    pub(crate) breaker: BreakerPolicy,
    pub(crate) clock: Arc<dyn Fn() -> u64 + Send + Sync>,
    pub(crate) in_flight: HashMap<BreakerKey, usize>,
    pub(crate) in_flight_total: usize,
    pub(crate) in_flight_bytes: u64,
    pub(crate) ready: Arc<AtomicBool>,
    /// The earliest due time of a row this pipeline rescheduled (retry, park),
    /// so the loop wakes for it on time instead of at the next idle tick.
    pub(crate) next_wake_ms: Option<u64>,
    pub(crate) breakers: HashMap<BreakerKey, Breaker>,
    /// One limiter per sink entry with a `rate_limit` (docs/design.md section
    /// 5, "Rate limit"), on the pipeline's clock.
    pub(crate) limiters: HashMap<(SourceId, SinkIx), Limiter>,
    /// The copy of `breakers` the admin API reads.
    pub(crate) status: PipelineStatus,
    /// Per tenant, where the last visit stopped reading the due index when it
    /// hit [`SCAN_PAGES`] with saturated sinks' rows in front: the next visit
    /// reads its first page from the top (new and retried rows, the head of
    /// every sink) and its other pages from here, so rows behind more than
    /// `SCAN_PAGES` pages of a slow sink's backlog are reached too. Dropped when
    /// a visit reads to the end of what is due.
    pub(crate) resume: HashMap<TenantOrd, Vec<u8>>,
    /// The pauses in force (shared with the handles).
    pub(crate) book: Arc<Mutex<PauseBook>>,
    /// The pipeline's copy of `book`'s targets, read for every due row.
    pub(crate) paused: BTreeSet<PauseTarget>,
    pub(crate) paused_sinks: Arc<AtomicU64>,
    /// Tenants whose held rows a resume must look at, with where the last
    /// page stopped: one page of [`ankusa_queue::unhold`] each per pass.
    pub(crate) unhold: BTreeMap<TenantOrd, Option<Cursor>>,
    /// Sink entries whose backlog a visit held back (docs/design.md section
    /// 5, "A sink's backlog held back"): their rows wait in the held band and
    /// come back, oldest first, in each pass, as many as keep the entry's live
    /// backlog at [`crate::scan::OVERFLOW_SKIPPED`] pages
    /// ([`Dispatcher::overflow_pass`]). Not persisted: a restart moves every
    /// held row of an entry that is not paused back (`start_up`).
    pub(crate) overflow: HashMap<BreakerKey, Overflow>,
    /// Tenants no visit touches ([`PipelineHandle::quiesce`]: being purged).
    pub(crate) quiet: BTreeSet<TenantOrd>,
    /// Sources being retired, with the dead-letter reason
    /// ([`PipelineHandle::retire`]).
    pub(crate) retiring: HashMap<SourceId, String>,
    /// Rows of each retiring source this task dead-lettered with the
    /// retirement's reason (a due row met by a visit, an attempt that did not
    /// deliver) and not yet reported: [`PipelineHandle::retire`] takes them,
    /// so the admin job counts them in its `done`.
    pub(crate) retired_dead: HashMap<SourceId, u64>,
    /// Per tenant, the sink entries its rows may be for (its sources' and
    /// those of the sources [`Routes::source_tenants`] does not bind): a
    /// visit reads a first page no larger than their free call slots, and
    /// stops reading when it has found all of them saturated.
    pub(crate) tenant_routes: HashMap<TenantOrd, Vec<(SourceId, SinkIx)>>,
    /// Calls the last step claimed, for the async side to start.
    pub(crate) calls: Vec<Call>,
    /// A visit stopped at its claim budget with rows left: step again at once.
    pub(crate) more: bool,
    /// Per tenant, the due time (unix ms) of the first live due entry the
    /// last visit read: the next visit starts its scan there instead of at
    /// the top of the tenant's due range, past the deletes of every row
    /// claimed before it (docs/design.md section 5, "Low-water cursor").
    pub(crate) low_water: HashMap<TenantOrd, u64>,
    /// When the cursors were last dropped (every `low_water_reset` a visit
    /// reads from the top again).
    pub(crate) low_water_since: Instant,
    /// [`LOW_WATER_RESET`]; the bench gate turns it off (its counts must not
    /// depend on how long a run takes).
    pub(crate) low_water_reset: Duration,
    /// The Writer's due floor ([`crate::Pipeline::due_floor`]): taken before
    /// each pass, it lowers the cursors to the rows committed meanwhile.
    pub(crate) due_floor: Option<Arc<AtomicU64>>,
    /// The tenant the last pass visited first: the next pass starts after it,
    /// so the tenants take turns at the room a step frees (fair share).
    pub(crate) first_visited: Option<TenantOrd>,
    /// The source of each hook a visit read the envelope of (at most
    /// [`crate::scan::SOURCES_KEPT`]): a row met again, its sink saturated, is
    /// skipped without reading its envelope again (in the 1,000-key load run, a
    /// tenant with an idle second source read 125 envelopes per hook delivered,
    /// half of the relay's CPU).
    pub(crate) sources: HashMap<(TenantOrd, ankusa_keys::Seq), SourceId>,
    /// Per tenant, the sink entries whose rows its recent visits met: a shallow
    /// visit sizes its first page by their free slots and stops when they are
    /// saturated, so an entry with no rows (an idle source of the tenant) does
    /// not make every visit read `SCAN_PAGES` pages (before: 137 due entries
    /// read per hook delivered in a load run). Replaced by each deep visit
    /// (every [`crate::scan::SHALLOW_VISITS`]-th, and the first after the
    /// entries were dropped: with the low-water cursors, on control calls and
    /// when held rows come back).
    pub(crate) met: HashMap<TenantOrd, std::collections::HashSet<(SourceId, SinkIx)>>,
    /// Per tenant, the shallow visits since its last deep one.
    pub(crate) shallow_visits: HashMap<TenantOrd, u32>,
    /// The Writer's lane hints ([`crate::Pipeline::lane_rows`]); `None`:
    /// every visit sweeps every marker.
    pub(crate) lane_rows: Option<Arc<LaneRows>>,
    /// Per tenant, the lanes the Writer named that no visit has swept yet
    /// (`ankusa_lanes::sweep_lanes`: point reads of their markers).
    pub(crate) sweep_lanes: HashMap<TenantOrd, Vec<ankusa_keys::LaneId>>,
    /// Whether the visits of the coming pass run the lane sweep (it is costly:
    /// a sweep walks the tombstones of every marker deleted since the memtable
    /// was flushed; in the 1,000-key load run it was 73% of the relay's CPU
    /// while nothing new came in).
    pub(crate) sweep: bool,
    /// The committer's buffer of delivered rows (sink kind, received_at),
    /// kept between commits.
    pub(crate) delivered_scratch: Vec<(&'static str, u64)>,
}

/// One sink entry's held-back backlog ([`Dispatcher::overflow`]).
#[derive(Debug, Default)]
pub(crate) struct Overflow {
    /// Where the next release page starts in the tenant's held band.
    pub(crate) from: Option<Vec<u8>>,
    /// The entry's rows the last visit that read past them skipped (left
    /// due): its live backlog.
    pub(crate) live: usize,
}

impl<K: Kv> Dispatcher<K> {
    pub(crate) fn now(&self) -> u64 {
        (self.clock)()
    }

    /// `None` when sink entry `id` may start a call now (the call takes its
    /// place in the entry's rate); else the unix ms from which the next one
    /// may start. Never sleeps.
    pub(crate) fn rate_limited(&self, id: (SourceId, SinkIx), now: u64) -> Option<u64> {
        let limiter = self.limiters.get(&id)?;
        match limiter.check() {
            Ok(()) => None,
            Err(not_until) => {
                let at = not_until.earliest_possible();
                let ms = u64::try_from(at.as_millis())
                    .unwrap_or(u64::MAX)
                    .saturating_add(u64::from(at.subsec_nanos() % 1_000_000 != 0));
                Some(ms.max(now.saturating_add(1)))
            }
        }
    }

    pub(crate) fn write(&self, batch: Batch) -> Result<(), PipelineError> {
        if !batch.is_empty() {
            self.kv.write(batch, Durability::Buffered)?;
        }
        Ok(())
    }

    /// Recomputes the pipeline's copy of the pauses and the paused-sinks gauge.
    pub(crate) fn refresh_pauses(&mut self) {
        self.paused = self
            .book
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .targets();
        let n = self
            .routes
            .sinks
            .keys()
            .filter(|(s, k)| self.is_paused(*s, *k))
            .count();
        self.paused_sinks.store(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn is_paused(&self, source: SourceId, sink: SinkIx) -> bool {
        !self.paused.is_empty()
            && (self.paused.contains(&PauseTarget::Source(source))
                || self.paused.contains(&PauseTarget::Sink(source, sink)))
    }

    /// Applies a runtime control call: the pause is committed to `meta` first
    /// (`Sync`: the caller is told it survives a restart), then applied.
    pub(crate) fn control(&mut self, c: Control) -> Result<(), PipelineError> {
        let (target, reason, reply) = match c {
            Control::SetPause {
                target,
                reason,
                reply,
            } => (target, reason, reply),
            Control::Quiesce {
                tenant,
                quiet,
                reply,
            } => {
                if quiet {
                    self.quiet.insert(tenant);
                    self.resume.remove(&tenant);
                    self.overflow.retain(|k, _| k.0 != tenant);
                } else if self.quiet.remove(&tenant) {
                    // Rows may have come in since: look again.
                    self.unhold.insert(tenant, None);
                }
                info!(
                    tenant = tenant.0,
                    quiet, "tenant visits changed by the runtime control"
                );
                let _ = reply.send(Ok(()));
                return Ok(());
            }
            Control::Retire {
                source,
                reason,
                reply,
            } => {
                match reason {
                    Some(r) => {
                        if self.retiring.insert(source, r).is_none() {
                            info!(
                                source = source.0,
                                "source retired: its rows are dead-lettered as they are met"
                            );
                        }
                    }
                    None => {
                        if self.retiring.remove(&source).is_some() {
                            info!(source = source.0, "source retirement ended");
                        }
                    }
                }
                let in_flight = self
                    .in_flight
                    .iter()
                    .filter(|(k, _)| k.1 == source)
                    .map(|(_, n)| *n)
                    .sum();
                let dead_lettered = self.retired_dead.remove(&source).unwrap_or(0);
                let _ = reply.send(Ok(Retirement {
                    in_flight,
                    dead_lettered,
                }));
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
                    let _ = reply.send(Err(ControlError::Store(e.clone())));
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
            let _ = reply.send(Err(ControlError::Store(e.clone())));
            return Err(e.into());
        }
        let status = {
            let mut book = self.book.lock().unwrap_or_else(|p| p.into_inner());
            match reason {
                Some(reason) => {
                    book.runtime.insert(
                        target,
                        PausedValue {
                            since_ms: now,
                            reason,
                        },
                    );
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
        info!(
            ?target,
            paused = status.paused(),
            by_config = status.by_config,
            "pause changed by the runtime control"
        );
        let _ = reply.send(Ok(status));
        Ok(())
    }

    /// One page of resume work per tenant that has some (see `unhold`).
    pub(crate) fn unhold_pass(&mut self) -> Result<(), PipelineError> {
        if self.unhold.is_empty() {
            return Ok(());
        }
        let todo: Vec<(TenantOrd, Option<Cursor>)> =
            std::mem::take(&mut self.unhold).into_iter().collect();
        let mut moved = 0;
        for (tenant, cursor) in todo {
            if self.quiet.contains(&tenant) {
                // Its turn comes when it is no longer quiet.
                self.unhold.insert(tenant, cursor);
                continue;
            }
            let paused = self.paused.clone();
            let still = |s: SourceId, k: SinkIx| {
                paused.contains(&PauseTarget::Source(s))
                    || paused.contains(&PauseTarget::Sink(s, k))
            };
            let page = ankusa_queue::unhold(
                &*self.kv,
                tenant,
                still,
                cursor.as_ref(),
                self.dispatch.batch.max(1),
            )?;
            moved += page.moved;
            if page.moved > 0 {
                // Held rows come back at their own due times, maybe below
                // the cursor, and for entries no recent visit met.
                self.low_water.remove(&tenant);
                self.met.remove(&tenant);
            }
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

    /// Releases held-back backlogs (`overflow`): for each entry, its oldest
    /// held rows go back to due ([`ankusa_queue::unhold_sink`]), as many as
    /// bring its live backlog (what the last visit skipped) back to
    /// [`crate::scan::OVERFLOW_SKIPPED`] pages, and the tenant's low-water
    /// cursor is lowered to them. Oldest first: a held-back backlog is
    /// delivered in due order behind at most those pages. An entry with no
    /// held row left is dropped; a paused one waits for its resume.
    pub(crate) fn overflow_pass(&mut self) -> Result<(), PipelineError> {
        if self.overflow.is_empty() {
            return Ok(());
        }
        let keys: Vec<BreakerKey> = self.overflow.keys().copied().collect();
        let examine = self.dispatch.batch.max(1) * crate::scan::SCAN_PAGES;
        let mut done = Vec::new();
        for key in keys {
            let (tenant, source, sink) = key;
            let Some(o) = self.overflow.get_mut(&key) else {
                continue;
            };
            let budget =
                (crate::scan::OVERFLOW_SKIPPED * self.dispatch.batch.max(1)).saturating_sub(o.live);
            let from = o.from.clone();
            if budget == 0 || self.quiet.contains(&tenant) || self.is_paused(source, sink) {
                continue;
            }
            if !self.routes.sinks.contains_key(&(source, sink)) {
                // Not configured any more: the start-up release and the
                // visits dead-letter its rows.
                done.push(key);
                continue;
            }
            let page = ankusa_queue::unhold_sink(
                &*self.kv,
                tenant,
                (source, sink),
                from.as_deref(),
                examine,
                budget,
            )?;
            if let Some(min) = page.min_due_ms
                && let Some(low) = self.low_water.get_mut(&tenant)
            {
                *low = (*low).min(min);
            }
            let moved = page.moved;
            self.write(page.batch)?;
            if let Some(o) = self.overflow.get_mut(&key) {
                // Counted live until a visit reads past them.
                o.live += moved;
            }
            match page.next {
                Some(next) => {
                    if let Some(o) = self.overflow.get_mut(&key) {
                        o.from = Some(next);
                    }
                }
                // From the band's start with nothing moved: nothing of the
                // entry is held any more.
                None if moved == 0 && from.is_none() => done.push(key),
                None => {
                    if let Some(o) = self.overflow.get_mut(&key) {
                        o.from = None;
                    }
                }
            }
        }
        for key in done {
            self.overflow.remove(&key);
            info!(
                tenant = key.0.0,
                source = key.1.0,
                sink = key.2.0,
                "a sink's held-back backlog is back in dispatch"
            );
        }
        Ok(())
    }

    /// recover_inflight at start: every ?F back to ?D as a first attempt.
    pub(crate) fn recover(&self) -> Result<(), PipelineError> {
        let mut moved = 0;
        loop {
            let page =
                ankusa_queue::recover_inflight(&*self.kv, self.dispatch.batch.max(1), self.now())?;
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

    /// What `run` does before its first step: tenants being purged are left
    /// alone, claimed rows of a previous run go back to due (ADR 4.7), the
    /// runtime pauses are read, and every tenant's held rows are looked at
    /// once (rows held under a pause lifted while the relay was down go back
    /// to dispatch).
    pub(crate) fn start_up(&mut self) -> Result<(), PipelineError> {
        self.quiet = ankusa_queue::read_purges(&*self.kv)?.into_keys().collect();
        self.recover()?;
        let runtime = ankusa_queue::read_pauses(&*self.kv)?;
        self.book.lock().unwrap_or_else(|p| p.into_inner()).runtime = runtime;
        self.refresh_pauses();
        self.unhold = self.routes.tenants.keys().map(|t| (*t, None)).collect();
        self.ready.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// One engine step: apply the control calls, commit the outcomes of
    /// `done` as one batch (the committer), then, unless the pipeline is
    /// stopping, visit every active tenant (scan and claim). The calls to
    /// start are left in [`Dispatcher::calls`].
    pub(crate) fn step(
        &mut self,
        controls: Vec<Control>,
        done: Vec<Done>,
        visit: bool,
    ) -> Result<(), PipelineError> {
        self.more = false;
        for c in controls {
            // Admin work may move rows below a cursor: read from the top.
            self.low_water.clear();
            self.met.clear();
            self.sweep = true;
            self.control(c)?;
        }
        if !done.is_empty() {
            self.commit(done)?;
        }
        if visit {
            if let Some(floor) = &self.due_floor {
                let low = floor.swap(u64::MAX, Ordering::SeqCst);
                if low != u64::MAX {
                    for cursor in self.low_water.values_mut() {
                        *cursor = (*cursor).min(low);
                    }
                }
            }
            match &self.lane_rows {
                Some(hints) => {
                    let taken = hints.take();
                    if taken.all {
                        self.sweep = true;
                    }
                    for (tenant, lane) in taken.lanes {
                        self.sweep_lanes.entry(tenant).or_default().push(lane);
                    }
                    // Named lanes of tenants no visit reaches (a purge) must
                    // not pile up: past the Writer's own bound, scan instead.
                    if self.sweep_lanes.values().map(Vec::len).sum::<usize>()
                        > ankusa_queue::writer::LANE_ROWS_MAX
                    {
                        self.sweep_lanes.clear();
                        self.sweep = true;
                    }
                }
                None => self.sweep = true,
            }
            if self.low_water_since.elapsed() >= self.low_water_reset {
                self.low_water.clear();
                self.met.clear();
                self.sweep = true;
                self.low_water_since = Instant::now();
            }
            self.pass()?;
        }
        Ok(())
    }
}
