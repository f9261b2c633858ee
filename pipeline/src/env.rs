//! What every stage reads and none changes: the store, the routes, the
//! configuration and the clock ([`Env`]). Each stage takes it as an argument
//! next to the state it owns; the dispatcher ([`crate::dispatcher`]) holds the
//! one copy.

use std::sync::Arc;

use ankusa_engine::{Batch, Durability, Kv};
use ankusa_queue::RowId;

use crate::breaker::BreakerPolicy;
use crate::{AttemptLogConfig, DispatchConfig, PipelineError, RetryPolicy, Routes};

/// Pages of `dispatch.batch` due entries a tenant visit reads at most.
pub(crate) const SCAN_PAGES: usize = 8;

/// The store, the routing table, the dispatch, retry, breaker and attempt
/// log configuration and the pipeline's clock.
pub(crate) struct Env<K: Kv> {
    pub(crate) kv: Arc<K>,
    pub(crate) routes: Arc<Routes>,
    pub(crate) dispatch: DispatchConfig,
    pub(crate) retry: RetryPolicy,
    pub(crate) breaker: BreakerPolicy,
    pub(crate) attempt_log: AttemptLogConfig,
    pub(crate) clock: Arc<dyn Fn() -> u64 + Send + Sync>,
}

impl<K: Kv> Env<K> {
    /// The pipeline's clock, unix ms.
    pub(crate) fn now(&self) -> u64 {
        (self.clock)()
    }

    /// `dispatch.batch`, at least 1: a page of due entries, a sweep budget.
    pub(crate) fn page_len(&self) -> usize {
        self.dispatch.batch.max(1)
    }

    /// `row`'s id as `ankusa dlq revive` and `drop` take it
    /// (`<tenant>.<seq>.<sink index>`), for the log lines of a dead letter.
    pub(crate) fn dlq_id(&self, row: RowId) -> String {
        let tenant = self
            .routes
            .tenants
            .get(&row.tenant)
            .map_or_else(|| row.tenant.0.to_string(), Clone::clone);
        format!("{tenant}.{}.{}", row.seq.0, row.sink.0)
    }

    /// Writes `batch` `Buffered` (every batch the pipeline writes but admin
    /// work and pauses: docs/design.md section 5, "Durability"); an empty
    /// batch is not written.
    pub(crate) fn write(&self, batch: Batch) -> Result<(), PipelineError> {
        if !batch.is_empty() {
            self.kv.write(batch, Durability::Buffered)?;
        }
        Ok(())
    }
}

/// Lowers the wake time `next` to `at` (the loop wakes for a row the
/// pipeline rescheduled, or for a rate limit's next call, on time).
pub(crate) fn wake_at(next: &mut Option<u64>, at: u64) {
    *next = Some(next.map_or(at, |w| w.min(at)));
}
