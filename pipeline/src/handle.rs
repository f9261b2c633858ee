//! Control of a running pipeline ([`PipelineHandle`]): wake-ups, shutdown,
//! pauses, quiesce, retirement and exclusive admin work (docs/design.md
//! section 5, "Pause", "Purge a tenant", "Retire a source", "Admin API"). Each
//! call is a [`Control`] message the dispatcher applies between two steps.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use ankusa_engine::{Batch, EngineError};
use ankusa_keys::meta::{PauseTarget, PausedValue};
use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::PauseMap;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::breaker::PipelineStatus;

/// Control of a running pipeline.
#[derive(Clone, Debug)]
pub struct PipelineHandle {
    pub(crate) wake: Arc<Notify>,
    pub(crate) shutdown: Arc<watch::Sender<Option<u64>>>,
    /// True once the pipeline has recovered the previous run's claimed rows
    /// and is dispatching (what `/readyz` reports).
    pub ready: Arc<AtomicBool>,
    /// How many configured sink entries are paused now, by the configuration
    /// or the runtime control, a source's pause counting each of its sinks
    /// (the `ankusa_dispatch_paused` gauge).
    pub paused_sinks: Arc<AtomicU64>,
    pub(crate) control: mpsc::UnboundedSender<Control>,
    pub(crate) book: Arc<Mutex<PauseBook>>,
    /// What the admin API reads of the breakers (read-only).
    pub status: PipelineStatus,
    /// What the pipeline reports for the relay's notifications (breakers
    /// opened and closed, dead letters, failing and auto-paused sink entries:
    /// docs/design.md section 5, "Notifications").
    pub events: crate::events::PipelineEvents,
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
    Store(EngineError),
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
pub(crate) struct PauseBook {
    pub(crate) config: BTreeSet<PauseTarget>,
    pub(crate) runtime: PauseMap,
}

impl PauseBook {
    pub(crate) fn targets(&self) -> BTreeSet<PauseTarget> {
        self.config
            .iter()
            .copied()
            .chain(self.runtime.keys().copied())
            .collect()
    }

    pub(crate) fn status(&self, target: PauseTarget) -> PauseStatus {
        PauseStatus {
            target,
            by_config: self.config.contains(&target),
            by_runtime: self.runtime.get(&target).cloned(),
        }
    }
}

pub(crate) enum Control {
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
    Reconfigure {
        config: Box<Reconfiguration>,
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
}

/// What a reload gives the pipeline (docs/design.md section 5, "Reload"):
/// the new routing table and the dispatch, retry and breaker settings, each
/// replacing the old one whole at the start of the next step. Calls in
/// flight finish with what claimed them (each holds its route).
#[derive(Debug)]
pub struct Reconfiguration {
    /// The new routing table. An entry leaving the configuration stays in it
    /// while rows of it may still be queued (the reload keeps it; the next
    /// start's unconfigured-work check decides its rows).
    pub routes: crate::Routes,
    /// `dispatch` settings.
    pub dispatch: crate::DispatchConfig,
    /// The global retry policy.
    pub retry: crate::RetryPolicy,
    /// The breaker policy.
    pub breaker: crate::BreakerPolicy,
}

impl PipelineHandle {
    /// Tells the pipeline new work may be due (the edge calls it after a commit).
    pub fn wake(&self) {
        self.wake.notify_one();
    }
    /// Stops claiming; the pipeline finishes the calls in flight, flushes their
    /// outcomes and returns.
    pub fn shutdown(&self) {
        self.shutdown_within(std::time::Duration::from_millis(crate::SHUTDOWN_WAIT_MS));
    }

    /// [`PipelineHandle::shutdown`], waiting at most `wait` for the calls in
    /// flight: a takeover's old process (docs/design.md section 5,
    /// "Takeover") keeps the new one's held requests waiting while it
    /// stops, so it leaves a slow call claimed for the new process to make
    /// again (at-least-once) rather than hold them.
    pub fn shutdown_within(&self, wait: std::time::Duration) {
        let _ = self
            .shutdown
            .send(Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)));
        self.wake.notify_one();
    }

    async fn set_pause(
        &self,
        target: PauseTarget,
        reason: Option<String>,
    ) -> Result<PauseStatus, ControlError> {
        let (reply, rx) = oneshot::channel();
        self.control
            .send(Control::SetPause {
                target,
                reason,
                reply,
            })
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
    pub async fn pause(
        &self,
        target: PauseTarget,
        reason: &str,
    ) -> Result<PauseStatus, ControlError> {
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

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, ControlError>>) -> Control,
    ) -> Result<T, ControlError> {
        let (reply, rx) = oneshot::channel();
        self.control
            .send(make(reply))
            .map_err(|_| ControlError::Stopped)?;
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
        self.ask(|reply| Control::Quiesce {
            tenant,
            quiet,
            reply,
        })
        .await
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
    pub async fn retire(
        &self,
        source: SourceId,
        reason: Option<String>,
    ) -> Result<Retirement, ControlError> {
        self.ask(|reply| Control::Retire {
            source,
            reason,
            reply,
        })
        .await
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

    /// Replaces the routing table and the dispatch, retry and breaker
    /// settings (a reload: docs/design.md section 5, "Reload"); applied by
    /// the pipeline before this returns. Rows claimed from then on are
    /// delivered by the new routes; calls in flight finish with theirs.
    ///
    /// # Errors
    /// [`ControlError::Stopped`].
    pub async fn reconfigure(&self, config: Reconfiguration) -> Result<(), ControlError> {
        let config = Box::new(config);
        self.ask(|reply| Control::Reconfigure { config, reply })
            .await
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
