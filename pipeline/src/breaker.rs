//! The breaker stage's state (docs/design.md section 5, "Breaker"): one
//! [`Breaker`] per (tenant, source, sink entry), decided by outcomes in the
//! committer ([`crate::commit`]) and read by the scan ([`crate::scan`]) to park
//! due rows or pick a half-open trial; [`PipelineStatus`] is the copy the admin
//! API reads.

use std::collections::HashMap;
use std::sync::Arc;

use ankusa_keys::{DeliveryRow, LaneId, SinkIx, SourceId, TenantOrd};
use ankusa_queue::RowId;
use ankusa_queue::metrics::DeliveryMetrics;

/// Circuit breaker per (tenant, source, sink entry) (docs/design.md section 5,
/// "Breaker"): it opens on `failures` consecutive failed attempts (no `Ok` in
/// between) that came from at least `distinct` different lanes (rows, for an
/// unordered sink), so one key whose head the receiver always refuses cannot
/// open it for every other key of the sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Consecutive failed attempts that open the breaker.
    pub failures: u32,
    /// How many different lanes (or rows of an unordered sink) those failures
    /// must come from, at least (1 = any failures, so one failing lane can open
    /// it). At most `failures`.
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
pub(crate) struct Published {
    pub(crate) failures: u32,
    pub(crate) open_until_ms: u64,
    pub(crate) open: bool,
    /// The sink's kind (`Sink::kind`), for the per-kind breaker gauges.
    pub(crate) kind: &'static str,
}

/// A read-only view of the pipeline's in-memory breakers, shared through an
/// `Arc` with the admin API. The pipeline publishes a copy after every
/// outcome flush (the only place a breaker's failures and open time change);
/// a breaker never published is closed with no failures.
#[derive(Clone, Debug, Default)]
pub struct PipelineStatus {
    pub(crate) breakers: Arc<std::sync::RwLock<HashMap<BreakerKey, Published>>>,
    /// Delivery attempts, call and ingest-to-delivery latencies by sink kind
    /// (`/metrics`), kept by the committer.
    pub(crate) delivery: Arc<DeliveryMetrics>,
}

/// How many breakers of one sink kind are open and half-open
/// ([`PipelineStatus::breakers_by_kind`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BreakerCounts {
    /// Open: the sink's due rows are parked.
    pub open: u64,
    /// Half-open: one trial call at a time.
    pub half_open: u64,
}

impl PipelineStatus {
    /// The delivery figures by sink kind (`ankusa_dispatch_attempts_total`,
    /// `ankusa_dispatch_call_seconds`,
    /// `ankusa_dispatch_ingest_to_delivery_seconds`).
    pub fn delivery(&self) -> Arc<DeliveryMetrics> {
        Arc::clone(&self.delivery)
    }

    /// Open and half-open breakers of each configured sink kind as of
    /// `now_ms` (zeros included), in kind order: the
    /// `ankusa_dispatch_breakers{sink,state}` gauges. Reads the published
    /// copy (memory only, one entry per breaker that has seen a failure).
    pub fn breakers_by_kind(&self, now_ms: u64) -> Vec<(&'static str, BreakerCounts)> {
        let mut out: Vec<(&'static str, BreakerCounts)> = self
            .delivery
            .kinds()
            .iter()
            .map(|k| (k.kind, BreakerCounts::default()))
            .collect();
        if let Ok(m) = self.breakers.read() {
            for b in m.values().filter(|b| b.open) {
                if let Some((_, c)) = out.iter_mut().find(|(k, _)| *k == b.kind) {
                    if now_ms < b.open_until_ms {
                        c.open += 1;
                    } else {
                        c.half_open += 1;
                    }
                }
            }
        }
        out
    }

    /// The breaker of `(tenant, source, sink)` as of `now_ms`.
    pub fn breaker(
        &self,
        tenant: TenantOrd,
        source: SourceId,
        sink: SinkIx,
        now_ms: u64,
    ) -> BreakerState {
        let b = self
            .breakers
            .read()
            .map(|m| m.get(&(tenant, source, sink)).copied())
            .unwrap_or_default()
            .unwrap_or_default();
        if !b.open {
            BreakerState::Closed {
                failures: b.failures,
            }
        } else if now_ms < b.open_until_ms {
            BreakerState::Open {
                until_ms: b.open_until_ms,
            }
        } else {
            BreakerState::HalfOpen
        }
    }
}

/// Every breaker of the node and the copy the admin API reads: the scan
/// reads them ([`BreakerBook::get`]), the committer decides them
/// ([`BreakerBook::entry`]) and publishes them after each flush.
pub(crate) struct BreakerBook {
    breakers: HashMap<BreakerKey, Breaker>,
    /// The copy of `breakers` the admin API reads, and the delivery metrics.
    status: PipelineStatus,
}

impl BreakerBook {
    pub(crate) fn new(status: PipelineStatus) -> BreakerBook {
        BreakerBook {
            breakers: HashMap::new(),
            status,
        }
    }

    /// The breaker of `key`, if it has seen an outcome.
    pub(crate) fn get(&self, key: &BreakerKey) -> Option<&Breaker> {
        self.breakers.get(key)
    }

    /// The breaker of `key`, closed if new.
    pub(crate) fn entry(&mut self, key: BreakerKey) -> &mut Breaker {
        self.breakers.entry(key).or_default()
    }

    /// The delivery metrics the committer keeps.
    pub(crate) fn delivery(&self) -> Arc<DeliveryMetrics> {
        Arc::clone(&self.status.delivery)
    }

    /// Copies the breakers' failures and open times for the admin API
    /// (`kind`: the sink kind of a (source, sink entry)).
    pub(crate) fn publish(&self, kind: impl Fn(SourceId, SinkIx) -> &'static str) {
        if let Ok(mut m) = self.status.breakers.write() {
            m.clear();
            m.extend(self.breakers.iter().map(|(k, b)| {
                (
                    *k,
                    Published {
                        failures: b.failures,
                        open_until_ms: b.open_until_ms,
                        open: b.open,
                        kind: kind(k.1, k.2),
                    },
                )
            }));
        }
    }
}

/// A breaker's (and a sink slot's) key: (tenant, source, sink entry).
pub(crate) type BreakerKey = (TenantOrd, SourceId, SinkIx);

/// Where a failed attempt came from, for the breaker: a laned row's lane, or
/// an unordered row itself (each unordered row fails on its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Site {
    Lane(LaneId),
    Row(RowId),
}

impl Site {
    pub(crate) fn of(id: RowId, row: &DeliveryRow) -> Site {
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
pub(crate) struct Breaker {
    /// Consecutive failed attempts (no `Ok` or permanent answer between).
    pub(crate) failures: u32,
    /// The different sites of those failures, first seen first (at most
    /// `SITES_KEPT`, or `policy.distinct` when that is more).
    pub(crate) sites: Vec<Site>,
    /// Open; half-open once `open_until_ms` has passed.
    pub(crate) open: bool,
    pub(crate) open_until_ms: u64,
    pub(crate) trial_in_flight: bool,
    /// The site whose attempt failed last: the next half-open trial goes to a
    /// row of another lane when the visit finds one, so one lane whose head
    /// keeps failing does not take every trial while other lanes' heads
    /// (which might succeed and close the breaker) wait (ADR 0004 4.3: a retry
    /// blocks its lane and nothing else).
    pub(crate) last_failed: Option<Site>,
}

impl Breaker {
    /// A failed attempt of `site` (`trial`: the half-open trial) at `now_ms`.
    /// Returns whether it opened the breaker (or opened it again).
    pub(crate) fn failed(
        &mut self,
        site: Site,
        trial: bool,
        policy: &BreakerPolicy,
        now_ms: u64,
    ) -> bool {
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
    pub(crate) fn answered(&mut self) -> bool {
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
    pub(crate) fn trial_rank(&self, site: Site) -> u8 {
        if self.last_failed == Some(site) {
            2
        } else if self.sites.contains(&site) {
            1
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(b: u8) -> Site {
        Site::Lane(LaneId([b; 16]))
    }

    const POLICY: BreakerPolicy = BreakerPolicy {
        failures: 5,
        distinct: 3,
        open_ms: 1000,
    };

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
        assert_eq!(
            (b.failures, b.open, b.sites.len(), b.last_failed),
            (0, false, 0, None)
        );
        assert!(!b.answered());
    }

    #[test]
    fn unordered_rows_are_sites_of_their_own() {
        let row = |seq| Site::Row(RowId::new(TenantOrd(1), ankusa_keys::Seq(seq), SinkIx(0)));
        let mut b = Breaker::default();
        for (now, seq) in [1, 1, 1, 1, 2].into_iter().enumerate() {
            assert!(!b.failed(row(seq), false, &POLICY, now as u64));
        }
        assert!(
            b.failed(row(3), false, &POLICY, 9),
            "five failures, three rows"
        );
        // distinct 1: any five failures.
        let one = BreakerPolicy {
            distinct: 1,
            ..POLICY
        };
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
}
