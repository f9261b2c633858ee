//! The dispatcher: the composition of the stages and the engine step that
//! runs them in turn (docs/design.md section 5). A step never waits on a
//! sink: it applies the control calls, commits the outcomes that have come in
//! (the committer), visits the tenants (scan and claim) and hands back the
//! calls to start; the sink calls run on the async runtime meanwhile. Each
//! stage owns its state; the dispatcher hands each the others' it needs.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ankusa_engine::{Durability, Kv};
use ankusa_keys::meta::PauseTarget;
use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::writer::LaneRows;
use tracing::{info, warn};

use crate::PipelineError;
use crate::breaker::{BreakerBook, PipelineStatus};
use crate::calls::{Call, Done, launch};
use crate::commit::{Committer, Decide};
use crate::env::Env;
use crate::events::{PipelineEvent, PipelineEvents};
use crate::failing::FailingSinks;
use crate::handle::{Control, ControlError, PauseBook, Retirement};
use crate::held::HeldBacklogs;
use crate::limit::Limiter;
use crate::pauses::Pauses;
use crate::retire::Retirements;
use crate::scan::{Scanner, VisitStages};
use crate::slots::Slots;
use crate::sweep::LaneSweep;

/// The stages and what the step hands back: owned by one engine step at a
/// time (the async side hands it to a blocking thread for each step:
/// [`crate::Pipeline::run`]).
pub(crate) struct Dispatcher<K: Kv> {
    env: Env<K>,
    /// Scan and claim's state ([`crate::scan`]).
    scanner: Scanner,
    /// The lane sweep's state, the first step of a visit ([`crate::sweep`]).
    lanes: LaneSweep,
    /// Calls in flight and rate limiters ([`crate::slots`]).
    slots: Slots,
    /// The breakers and their published copy ([`crate::breaker`]).
    breakers: BreakerBook,
    /// Pauses and the resume work ([`crate::pauses`]).
    pauses: Pauses,
    /// Held-back backlogs ([`crate::held`]).
    held: HeldBacklogs,
    /// Retiring sources ([`crate::retire`]).
    retire: Retirements,
    /// The committer's state ([`crate::commit`]).
    committer: Committer,
    /// The sink entries whose every attempt is failing ([`crate::failing`]):
    /// the committer extends and ends their runs, and an entry with an
    /// `auto_pause_after_ms` is paused once its run lasts that long.
    failing: FailingSinks,
    /// What the pipeline reports for notifications ([`crate::events`]).
    events: PipelineEvents,
    /// Tenants no visit touches ([`crate::PipelineHandle::quiesce`]: being
    /// purged).
    quiet: BTreeSet<TenantOrd>,
    /// The cluster's fencing ([`crate::Pipeline::fencing`]); `None`: standalone.
    fencing: Option<crate::Fencing>,
    ready: Arc<AtomicBool>,
    /// The Writer's due floor ([`crate::Pipeline::due_floor`]): taken before
    /// each pass, it lowers the cursors to the rows committed meanwhile.
    due_floor: Option<Arc<AtomicU64>>,
    /// The earliest due time of a row this pipeline rescheduled (retry,
    /// park) or of a rate-limited sink's next call, so the loop wakes for it
    /// on time instead of at the next idle tick.
    next_wake_ms: Option<u64>,
    /// Calls the last step claimed, for the async side to start.
    calls: Vec<Call>,
    /// A visit stopped at its claim budget with rows left: step again at once.
    more: bool,
}

/// What [`Dispatcher::new`] is built from besides the environment: the
/// state shared with the handles, and the limiters.
pub(crate) struct Shared {
    pub(crate) ready: Arc<AtomicBool>,
    pub(crate) book: Arc<Mutex<PauseBook>>,
    pub(crate) paused_sinks: Arc<AtomicU64>,
    pub(crate) status: PipelineStatus,
    pub(crate) limiters: HashMap<(SourceId, SinkIx), (crate::limit::RateLimit, Limiter)>,
    pub(crate) tenant_routes: HashMap<TenantOrd, Vec<(SourceId, SinkIx)>>,
    pub(crate) events: PipelineEvents,
}

impl<K: Kv> Dispatcher<K> {
    pub(crate) fn new(env: Env<K>, shared: Shared) -> Dispatcher<K> {
        Dispatcher {
            env,
            scanner: Scanner::new(shared.tenant_routes),
            lanes: LaneSweep::new(),
            slots: Slots::new(shared.limiters),
            breakers: BreakerBook::new(shared.status),
            pauses: Pauses::new(shared.book, shared.paused_sinks),
            held: HeldBacklogs::default(),
            retire: Retirements::default(),
            committer: Committer::default(),
            failing: FailingSinks::default(),
            events: shared.events,
            quiet: BTreeSet::new(),
            fencing: None,
            ready: shared.ready,
            due_floor: None,
            next_wake_ms: None,
            calls: Vec::new(),
            more: false,
        }
    }

    pub(crate) fn env(&self) -> &Env<K> {
        &self.env
    }

    pub(crate) fn now(&self) -> u64 {
        self.env.now()
    }

    /// Takes the cluster's fencing.
    pub(crate) fn set_fencing(&mut self, fencing: crate::Fencing) {
        self.fencing = Some(fencing);
    }

    /// Takes the attempt log's configuration.
    pub(crate) fn set_attempt_log(&mut self, config: crate::AttemptLogConfig) {
        self.env.attempt_log = config;
    }

    /// Takes the Writer's due floor.
    pub(crate) fn set_due_floor(&mut self, floor: Arc<AtomicU64>) {
        self.due_floor = Some(floor);
    }

    /// Takes the Writer's lane hints.
    pub(crate) fn set_lane_rows(&mut self, hints: Arc<LaneRows>) {
        self.lanes.set_hints(hints);
    }

    /// The calls the last step claimed, to start.
    pub(crate) fn take_calls(&mut self) -> Vec<Call> {
        std::mem::take(&mut self.calls)
    }

    /// The calls the last step claimed, not taken.
    #[cfg(test)]
    pub(crate) fn calls(&self) -> &[Call] {
        &self.calls
    }

    /// Tenant visits so far.
    #[cfg(test)]
    pub(crate) fn visits(&self) -> u64 {
        self.scanner.visits()
    }

    /// Calls in flight on the node.
    pub(crate) fn in_flight(&self) -> usize {
        self.slots.total()
    }

    /// Whether the last step stopped a visit at its claim budget.
    pub(crate) fn more(&self) -> bool {
        self.more
    }

    /// The wake time of the earliest rescheduled row, taken once it is due
    /// at `now`: `None` when there is none or it is due.
    pub(crate) fn wake_in(&mut self, now: u64) -> Option<u64> {
        match self.next_wake_ms {
            Some(at) if at <= now => {
                self.next_wake_ms = None;
                None
            }
            Some(at) => Some(at - now),
            None => None,
        }
    }

    /// The low-water cursors' reset period (the tests turn it off).
    #[cfg(test)]
    pub(crate) fn set_low_water_reset(&mut self, reset: std::time::Duration) {
        self.scanner.cursors_mut().set_reset(reset);
    }

    /// The coming pass runs the full lane sweep.
    #[cfg(test)]
    pub(crate) fn sweep_all(&mut self) {
        self.lanes.request_full();
    }

    /// Applies a runtime control call: the pause is committed to `meta` first
    /// (`Sync`: the caller is told it survives a restart), then applied.
    fn control(&mut self, c: Control) -> Result<(), PipelineError> {
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
                    self.scanner.forget_resume(tenant);
                    self.held.forget_tenant(tenant);
                } else if self.quiet.remove(&tenant) {
                    // Rows may have come in since: look again.
                    self.pauses.look_again(tenant);
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
                self.retire.set(source, reason);
                let in_flight = self.slots.of_source(source);
                let dead_lettered = self.retire.take_dead(source);
                let _ = reply.send(Ok(Retirement {
                    in_flight,
                    dead_lettered,
                }));
                return Ok(());
            }
            Control::Reconfigure { config, reply } => {
                self.reconfigure(*config);
                let _ = reply.send(Ok(()));
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
                    && let Err(e) = self.env.kv.write(batch, Durability::Sync)
                {
                    let _ = reply.send(Err(ControlError::Store(e.clone())));
                    return Err(e.into());
                }
                let _ = reply.send(Ok(()));
                return Ok(());
            }
        };
        let configured = match target {
            PauseTarget::Source(s) => self.env.routes.source_known(s),
            PauseTarget::Sink(s, k) => self.env.routes.sinks.contains_key(&(s, k)),
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
        if let Err(e) = self.env.kv.write(batch, Durability::Sync) {
            let _ = reply.send(Err(ControlError::Store(e.clone())));
            return Err(e.into());
        }
        let status = self.pauses.apply(target, reason, now, &self.env.routes);
        // Named as the operator named them (the ids are the store's).
        let (source, sink) = match target {
            PauseTarget::Source(s) => (
                self.env
                    .routes
                    .sinks
                    .iter()
                    .find(|((id, _), _)| *id == s)
                    .map(|(_, r)| r.source_name.clone()),
                None,
            ),
            PauseTarget::Sink(s, k) => match self.env.routes.sinks.get(&(s, k)) {
                Some(r) => (Some(r.source_name.clone()), Some(r.sink_name.clone())),
                None => (None, None),
            },
        };
        info!(
            source = source.as_deref().unwrap_or("?"),
            sink = sink.as_deref().unwrap_or("(all)"),
            paused = status.paused(),
            by_config = status.by_config,
            "pause changed by the runtime control"
        );
        let _ = reply.send(Ok(status));
        Ok(())
    }

    /// Pauses each sink entry whose every attempt has failed for its
    /// `auto_pause_after_ms` (docs/design.md section 5, "Pause" and
    /// "Notifications"): the same runtime pause as the admin API's, committed
    /// `Sync` to `meta` with a reason that says why, so it survives a restart
    /// and is lifted by a resume like any other. Its run ends with the pause:
    /// after a resume the entry must fail that long again.
    fn auto_pause(&mut self) -> Result<(), PipelineError> {
        let now = self.now();
        for (key, run, after_ms) in self.failing.due_for_pause(&self.env.routes.auto_pause, now) {
            self.failing.answered(key);
            if self.pauses.is_paused(key.0, key.1) {
                continue;
            }
            let Some(route) = self.env.routes.sinks.get(&key) else {
                continue;
            };
            let (source_name, sink_name) = (route.source_name.clone(), route.sink_name.clone());
            let reason = format!(
                "{}every attempt failed for {} (last error: {})",
                crate::AUTO_PAUSE_REASON_PREFIX,
                seconds(after_ms),
                run.last_error
            );
            let target = PauseTarget::Sink(key.0, key.1);
            self.env.kv.write(
                ankusa_queue::set_pause(target, now, &reason),
                Durability::Sync,
            )?;
            self.pauses
                .apply(target, Some(reason.clone()), now, &self.env.routes);
            warn!(
                source = %source_name,
                sink = %sink_name,
                failing_since_ms = run.since_ms,
                attempts = run.attempts,
                %reason,
                "sink auto-paused: resume it with the admin API (ankusa resume) once it is fixed; its hooks are kept meanwhile"
            );
            self.events.push(PipelineEvent::SinkAutoPaused {
                source: key.0,
                sink: key.1,
                failing_since_ms: run.since_ms,
                reason,
                at_ms: now,
            });
        }
        self.failing.publish(&self.events);
        Ok(())
    }

    /// A reload's new routes and settings (docs/design.md section 5,
    /// "Reload"): each stage takes what it derives from them (the tenants'
    /// sink entries, the rate limiters, the configuration's pauses); the
    /// breakers, the slots in flight and the held backlogs are keyed by
    /// (tenant, source, sink slot), which a reload does not change.
    fn reconfigure(&mut self, c: crate::handle::Reconfiguration) {
        let routes = c.routes;
        self.scanner
            .set_tenant_routes(crate::tenant_routes_of(&routes));
        let clock = crate::limit::LimiterClock(Arc::clone(&self.env.clock));
        self.slots.set_limits(&routes.rate_limits, &clock);
        self.env.routes = Arc::new(routes);
        self.env.dispatch = c.dispatch;
        self.env.retry = c.retry;
        self.env.breaker = c.breaker;
        self.pauses.reconfigure(&self.env.routes);
        // A new source's markers: the next pass sweeps every lane.
        self.lanes.request_full();
        info!(
            sink_entries = self.env.routes.sinks.len(),
            "the pipeline took the reloaded configuration"
        );
    }

    /// recover_inflight at start: every ?F back to ?D as a first attempt.
    fn recover(&self) -> Result<(), PipelineError> {
        let mut moved = 0;
        loop {
            let page =
                ankusa_queue::recover_inflight(&*self.env.kv, self.env.page_len(), self.now())?;
            moved += page.moved;
            let more = page.next.is_some();
            self.env.write(page.batch)?;
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
        self.quiet = ankusa_queue::read_purges(&*self.env.kv)?
            .into_keys()
            .collect();
        self.recover()?;
        let runtime = ankusa_queue::read_pauses(&*self.env.kv)?;
        self.pauses.start_up(runtime, &self.env.routes);
        self.ready.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// One engine step: apply the control calls, commit the outcomes of
    /// `done` as one batch (the committer), then, unless the pipeline is
    /// stopping, visit every active tenant (scan and claim). The calls to
    /// start are left for [`Dispatcher::take_calls`].
    pub(crate) fn step(
        &mut self,
        controls: Vec<Control>,
        done: Vec<Done>,
        visit: bool,
    ) -> Result<(), PipelineError> {
        self.more = false;
        for c in controls {
            // Admin work may move rows below a cursor: read from the top.
            self.scanner.cursors_mut().drop_all();
            self.lanes.request_full();
            self.control(c)?;
        }
        if !done.is_empty() {
            self.committer.commit(
                &self.env,
                done,
                &mut Decide {
                    slots: &mut self.slots,
                    breakers: &mut self.breakers,
                    retire: &mut self.retire,
                    wake: &mut self.next_wake_ms,
                    failing: &mut self.failing,
                    events: &self.events,
                },
            )?;
            self.auto_pause()?;
        }
        if visit {
            if let Some(floor) = &self.due_floor {
                let low = floor.swap(u64::MAX, Ordering::SeqCst);
                if low != u64::MAX {
                    self.scanner.cursors_mut().lower_all(low);
                }
            }
            self.lanes.take_hints();
            if self.scanner.cursors_mut().reset_due() {
                self.lanes.request_full();
            }
            self.pass()?;
        }
        Ok(())
    }

    /// One visit of every active tenant: first the resume work and the
    /// held-back backlogs' release, then per tenant the lane sweep and the
    /// scan and claim, whose claimed rows take their slots before the next
    /// tenant's visit.
    fn pass(&mut self) -> Result<(), PipelineError> {
        self.pauses
            .unhold_pass(&self.env, &self.quiet, self.scanner.cursors_mut())?;
        self.held.pass(
            &self.env,
            &self.quiet,
            &self.pauses,
            self.scanner.cursors_mut(),
        )?;
        let full_sweep = self.lanes.begin_pass();
        let tenants = self.scanner.tenants(&self.env)?;
        for tenant in tenants {
            if self.quiet.contains(&tenant) {
                continue;
            }
            let claims = self
                .fencing
                .as_ref()
                .map_or(crate::TenantClaims::All, |g| g(tenant));
            if claims == crate::TenantClaims::Nothing {
                continue;
            }
            let now = self.now();
            if self.lanes.sweep(&self.env, tenant, full_sweep, now)? {
                self.more = true;
            }
            let visited = self.scanner.visit(
                &self.env,
                &mut VisitStages {
                    slots: &self.slots,
                    breakers: &self.breakers,
                    pauses: &self.pauses,
                    held: &mut self.held,
                    retire: &mut self.retire,
                    wake: &mut self.next_wake_ms,
                    claims: &claims,
                    events: &self.events,
                },
                tenant,
                now,
            )?;
            if visited.more {
                self.more = true;
            }
            for s in visited.starts {
                if s.trial {
                    self.breakers.entry(s.key).trial_in_flight = true;
                    info!(row = %s.row_id, "breaker half-open: one trial delivery");
                }
                let body_max = self.env.attempt_log.response_body_max_bytes();
                self.calls
                    .push(launch(s, &self.env.routes, &mut self.slots, now, body_max));
            }
        }
        Ok(())
    }
}

/// `ms` in seconds as a reason says it: `600 s`, `1.5 s`.
fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        let text = format!("{:.3}", ms as f64 / 1000.0);
        format!("{} s", text.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pause_reason_says_seconds() {
        assert_eq!(super::seconds(600_000), "600 s");
        assert_eq!(super::seconds(1_500), "1.5 s");
        assert_eq!(super::seconds(1_250), "1.25 s");
    }
}
