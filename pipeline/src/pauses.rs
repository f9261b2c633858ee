//! Pauses (docs/design.md section 5, "Pause"): the pauses in force (the
//! book shared with the handles, the pipeline's copy read for every due row,
//! the paused-sinks gauge) and the tenants whose held rows a resume must look
//! at ([`Pauses::unhold_pass`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ankusa_engine::Kv;
use ankusa_keys::meta::{PauseTarget, PausedValue};
use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::{Cursor, PauseMap};
use tracing::info;

use crate::cursor::Cursors;
use crate::env::Env;
use crate::handle::{PauseBook, PauseStatus};
use crate::{PipelineError, Routes};

/// The pauses and the resume work.
pub(crate) struct Pauses {
    /// The pauses in force (shared with the handles).
    book: Arc<Mutex<PauseBook>>,
    /// The pipeline's copy of `book`'s targets, read for every due row.
    paused: BTreeSet<PauseTarget>,
    /// The paused sink entries, for `/metrics`.
    gauge: Arc<AtomicU64>,
    /// Tenants whose held rows a resume must look at, with where the last
    /// page stopped: one page of [`ankusa_queue::unhold`] each per pass.
    unhold: BTreeMap<TenantOrd, Option<Cursor>>,
}

impl Pauses {
    pub(crate) fn new(book: Arc<Mutex<PauseBook>>, gauge: Arc<AtomicU64>) -> Pauses {
        Pauses {
            book,
            paused: BTreeSet::new(),
            gauge,
            unhold: BTreeMap::new(),
        }
    }

    /// At start: the runtime pauses the store holds join the configuration's,
    /// and every tenant's held rows are looked at once (rows held under a
    /// pause lifted while the relay was down go back to dispatch).
    pub(crate) fn start_up(&mut self, runtime: PauseMap, routes: &Routes) {
        self.book.lock().unwrap_or_else(|p| p.into_inner()).runtime = runtime;
        self.refresh(routes);
        self.unhold = routes.tenants.keys().map(|t| (*t, None)).collect();
    }

    /// A reload's routes: the configuration's pauses are replaced by
    /// `routes.paused`; when one was lifted, every tenant's held rows are
    /// looked at again (as a runtime resume does).
    pub(crate) fn reconfigure(&mut self, routes: &Routes) {
        self.book.lock().unwrap_or_else(|p| p.into_inner()).config = routes.paused.clone();
        let before = self.paused.clone();
        self.refresh(routes);
        if !before.is_subset(&self.paused) {
            for t in routes.tenants.keys() {
                self.unhold.insert(*t, None);
            }
        }
    }

    /// Recomputes the pipeline's copy of the pauses and the paused-sinks gauge.
    fn refresh(&mut self, routes: &Routes) {
        self.paused = self
            .book
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .targets();
        let n = routes
            .sinks
            .keys()
            .filter(|(s, k)| self.is_paused(*s, *k))
            .count();
        self.gauge.store(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn is_paused(&self, source: SourceId, sink: SinkIx) -> bool {
        !self.paused.is_empty()
            && (self.paused.contains(&PauseTarget::Source(source))
                || self.paused.contains(&PauseTarget::Sink(source, sink)))
    }

    /// Applies a runtime pause (`Some(reason)`) or resume (`None`) of
    /// `target` that the store already holds; when something was resumed,
    /// every tenant's held rows are looked at again. The target's status.
    pub(crate) fn apply(
        &mut self,
        target: PauseTarget,
        reason: Option<String>,
        now: u64,
        routes: &Routes,
    ) -> PauseStatus {
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
        self.refresh(routes);
        if self.paused.len() < before.len() || !before.is_subset(&self.paused) {
            // Something was resumed: look at every tenant's held rows again.
            for t in routes.tenants.keys() {
                self.unhold.insert(*t, None);
            }
        }
        status
    }

    /// `tenant`'s held rows are looked at again (it is no longer quiet:
    /// rows may have come in since).
    pub(crate) fn look_again(&mut self, tenant: TenantOrd) {
        self.unhold.insert(tenant, None);
    }

    /// One page of resume work per tenant that has some (see `unhold`);
    /// a tenant whose rows came back has its cursor and met entries dropped.
    pub(crate) fn unhold_pass<K: Kv>(
        &mut self,
        env: &Env<K>,
        quiet: &BTreeSet<TenantOrd>,
        cursors: &mut Cursors,
    ) -> Result<(), PipelineError> {
        if self.unhold.is_empty() {
            return Ok(());
        }
        let todo: Vec<(TenantOrd, Option<Cursor>)> =
            std::mem::take(&mut self.unhold).into_iter().collect();
        let mut moved = 0;
        for (tenant, cursor) in todo {
            if quiet.contains(&tenant) {
                // Its turn comes when it is no longer quiet.
                self.unhold.insert(tenant, cursor);
                continue;
            }
            let paused = &self.paused;
            let still = |s: SourceId, k: SinkIx| {
                paused.contains(&PauseTarget::Source(s))
                    || paused.contains(&PauseTarget::Sink(s, k))
            };
            let page =
                ankusa_queue::unhold(&*env.kv, tenant, still, cursor.as_ref(), env.page_len())?;
            moved += page.moved;
            if page.moved > 0 {
                // Held rows come back at their own due times, maybe below
                // the cursor, and for entries no recent visit met.
                cursors.drop_tenant(tenant);
            }
            env.write(page.batch)?;
            if let Some(next) = page.next {
                self.unhold.insert(tenant, Some(next));
            }
        }
        if moved > 0 {
            info!(rows = moved, "resumed: held rows back to dispatch");
        }
        Ok(())
    }
}
