//! The call slots (docs/design.md section 5, "Concurrency" and "Rate
//! limit"): the calls in flight per (tenant, source, sink entry), their total
//! and bytes on the node (the admission window), and the sink entries' rate
//! limiters. The calls stage takes a slot ([`Slots::take`]), the committer
//! frees it ([`Slots::free`]), the scan reads them.

use std::collections::HashMap;

use ankusa_keys::{SinkIx, SourceId};

use crate::DispatchConfig;
use crate::breaker::BreakerKey;
use crate::limit::{Limiter, LimiterClock, RateLimit};

/// Calls in flight and rate limiters.
pub(crate) struct Slots {
    in_flight: HashMap<BreakerKey, usize>,
    total: usize,
    bytes: u64,
    /// One limiter per sink entry with a `rate_limit`, on the pipeline's
    /// clock, with the limit it enforces.
    limiters: HashMap<(SourceId, SinkIx), (RateLimit, Limiter)>,
}

impl Slots {
    pub(crate) fn new(limiters: HashMap<(SourceId, SinkIx), (RateLimit, Limiter)>) -> Slots {
        Slots {
            in_flight: HashMap::new(),
            total: 0,
            bytes: 0,
            limiters,
        }
    }

    /// A reload's rate limits: an entry whose limit is unchanged keeps its
    /// limiter (and the calls it has counted); the others get a new one, or
    /// none.
    pub(crate) fn set_limits(
        &mut self,
        limits: &HashMap<(SourceId, SinkIx), RateLimit>,
        clock: &LimiterClock,
    ) {
        let mut old = std::mem::take(&mut self.limiters);
        for (id, limit) in limits {
            let kept = old.remove(id).filter(|(was, _)| was == limit);
            let made = || crate::limit::limiter(*limit, clock).map(|l| (*limit, l));
            if let Some(l) = kept.or_else(made) {
                self.limiters.insert(*id, l);
            }
        }
    }

    /// A call of `key` of `size` bytes starts.
    pub(crate) fn take(&mut self, key: BreakerKey, size: u64) {
        *self.in_flight.entry(key).or_default() += 1;
        self.total += 1;
        self.bytes += size;
    }

    /// A call of `key` of `size` bytes is over (its outcome is committed).
    pub(crate) fn free(&mut self, key: BreakerKey, size: u64) {
        let slot = self.in_flight.entry(key).or_default();
        *slot = slot.saturating_sub(1);
        self.total = self.total.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(size);
    }

    /// Calls of `key` in flight.
    pub(crate) fn busy(&self, key: &BreakerKey) -> usize {
        self.in_flight.get(key).copied().unwrap_or(0)
    }

    /// Calls in flight on the node.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Whether the admission window is full with `calls` more calls of
    /// `bytes` more bytes.
    pub(crate) fn window_full(&self, dispatch: &DispatchConfig, calls: usize, bytes: u64) -> bool {
        self.total + calls >= dispatch.window || self.bytes + bytes >= dispatch.window_bytes
    }

    /// Calls of `source`'s sink entries in flight, every tenant.
    pub(crate) fn of_source(&self, source: SourceId) -> usize {
        self.in_flight
            .iter()
            .filter(|(k, _)| k.1 == source)
            .map(|(_, n)| *n)
            .sum()
    }

    /// `None` when sink entry `id` may start a call now (the call takes its
    /// place in the entry's rate); else the unix ms from which the next one
    /// may start. Never sleeps.
    pub(crate) fn rate_limited(&self, id: (SourceId, SinkIx), now: u64) -> Option<u64> {
        let (_, limiter) = self.limiters.get(&id)?;
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
}
