//! Figures the runtime tasks keep for `/metrics` (docs/design.md section 5,
//! "Admin API"; README, "What to watch"): fixed-bucket histograms and
//! per-sink-kind delivery counters, kept in atomics so an observation on a hot
//! path is a few relaxed increments, no lock and no allocation. The Writer, the
//! pipeline and the edge keep them; the admin listener encodes them at scrape
//! time.
//!
//! No figure here is labelled by a key, a tenant or a lane (ADR 0004 section
//! 7): a [`DeliveryMetrics`] has one entry per configured sink kind, fixed at
//! start, so the series count never grows with tenants, keys or lanes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds of the latency histograms, nanoseconds: 0.5 ms to 30 s,
/// the span of a webhook's ack, a sink call and a hook's trip through the
/// relay.
pub const LATENCY_BOUNDS_NS: &[u64] = &[
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
];

/// Bucket bounds of the request body size histogram, bytes: 256 B to 16 MiB
/// (the default body limit is 1 MiB; a provider's hook is mostly under 16 KiB).
pub const BODY_BOUNDS_BYTES: &[u64] = &[
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];

/// Bucket bounds of the Writer's group size histogram, hooks: 1 to 256 (its
/// `max_group_hooks`).
pub const GROUP_BOUNDS_HOOKS: &[u64] = &[0, 1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Nanoseconds per second: a latency histogram's integer units per base
/// unit. Its bounds are divided by it (exact for whole seconds: 30 s is
/// `30`, where multiplying by the inexact `1e-9` showed `30.000000000000005`).
pub const NANOS_PER_SECOND: f64 = 1e9;

/// A histogram with fixed bucket bounds, in integer units (nanoseconds,
/// bytes, hooks) and shown in the base unit (`value / per_unit`: seconds for
/// nanoseconds). [`Histogram::observe`] is two relaxed `fetch_add`s and a
/// binary search of the bounds; the count is the sum of the buckets, read at
/// scrape time.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// Non-cumulative: `counts[i]` counts values in `(bounds[i-1], bounds[i]]`,
    /// the last one values above every bound (`+Inf`).
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
    per_unit: f64,
}

/// A histogram as read at one moment, in the base unit: what the admin
/// listener encodes.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, observations in this bucket only)`, the last one's
    /// bound `f64::INFINITY` (prometheus-client's `encode_histogram` makes
    /// them cumulative).
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Sum of the observed values, in the base unit.
    pub sum: f64,
}

impl Histogram {
    /// An empty histogram with `bounds` (ascending, in the integer unit) and
    /// `per_unit` (integer units per base unit: [`NANOS_PER_SECOND`] for
    /// seconds, 1.0 for bytes and hooks).
    pub fn new(bounds: &'static [u64], per_unit: f64) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            per_unit,
        }
    }

    /// A latency histogram ([`LATENCY_BOUNDS_NS`], shown in seconds).
    pub fn latency() -> Histogram {
        Histogram::new(LATENCY_BOUNDS_NS, NANOS_PER_SECOND)
    }

    /// Counts one value (in the integer unit).
    pub fn observe(&self, value: u64) {
        let i = self.bounds.partition_point(|b| *b < value);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// Counts one duration (a latency histogram: nanoseconds).
    pub fn observe_duration(&self, d: Duration) {
        self.observe(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Counts one duration given in milliseconds (a latency histogram).
    pub fn observe_ms(&self, ms: u64) {
        self.observe(ms.saturating_mul(1_000_000));
    }

    /// The observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The histogram now, in the base unit.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .map(|b| *b as f64 / self.per_unit)
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        HistogramSnapshot {
            buckets,
            count,
            sum: self.sum.load(Ordering::Relaxed) as f64 / self.per_unit,
        }
    }
}

/// How one delivery attempt ended, as the committer turned it into a row
/// transition (`pipeline::commit`, docs/design.md section 5, "Retry" and
/// "Retry policy"): the `outcome` label of `ankusa_dispatch_attempts_total`.
/// Every outcome but `Delivered` and `Retry` dead-letters the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// `Ok`: the row is delivered.
    Delivered,
    /// Not delivered; retried later (a timeout, a connection failure, a
    /// retried HTTP status, a failed sink flush).
    Retry,
    /// Not delivered and past the retry horizon: dead-lettered.
    HorizonPassed,
    /// Refused for good (`Outcome::Permanent`, a permanent HTTP status):
    /// dead-lettered.
    Permanent,
    /// The destination is gone (HTTP 410, a deleted queue): dead-lettered.
    SinkGone,
    /// The hook's source is gone: dead-lettered as an orphan.
    SourceGone,
    /// An attempt of a retired source that did not deliver: dead-lettered.
    Retired,
}

impl AttemptOutcome {
    /// Every outcome, in label order.
    pub const ALL: [AttemptOutcome; 7] = [
        AttemptOutcome::Delivered,
        AttemptOutcome::Retry,
        AttemptOutcome::HorizonPassed,
        AttemptOutcome::Permanent,
        AttemptOutcome::SinkGone,
        AttemptOutcome::SourceGone,
        AttemptOutcome::Retired,
    ];

    /// The `outcome` label value.
    pub const fn label(self) -> &'static str {
        match self {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::Retry => "retry",
            AttemptOutcome::HorizonPassed => "horizon_passed",
            AttemptOutcome::Permanent => "permanent",
            AttemptOutcome::SinkGone => "sink_gone",
            AttemptOutcome::SourceGone => "source_gone",
            AttemptOutcome::Retired => "retired",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// The delivery figures of one sink kind (`http`, `file`, `kafka`, ...).
#[derive(Debug)]
pub struct SinkKindMetrics {
    /// The sink kind (`Sink::kind`).
    pub kind: &'static str,
    attempts: [AtomicU64; AttemptOutcome::ALL.len()],
    /// Duration of each sink call (from its start to the sink's answer),
    /// seconds.
    pub call_latency: Histogram,
    /// From a hook's `received_at` to the commit of its delivered row,
    /// seconds: one observation per delivered row.
    pub ingest_to_delivery: Histogram,
}

impl SinkKindMetrics {
    fn new(kind: &'static str) -> SinkKindMetrics {
        SinkKindMetrics {
            kind,
            attempts: std::array::from_fn(|_| AtomicU64::new(0)),
            call_latency: Histogram::latency(),
            ingest_to_delivery: Histogram::latency(),
        }
    }

    /// Counts one attempt that ended in `outcome`.
    pub fn attempt(&self, outcome: AttemptOutcome) {
        self.attempts[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Attempts that ended in `outcome` so far.
    pub fn attempts(&self, outcome: AttemptOutcome) -> u64 {
        self.attempts[outcome.index()].load(Ordering::Relaxed)
    }
}

/// The pipeline's delivery figures, one [`SinkKindMetrics`] per sink kind
/// the configuration has (fixed at start): the series of
/// `ankusa_dispatch_attempts_total{sink,outcome}`,
/// `ankusa_dispatch_call_seconds{sink}` and
/// `ankusa_dispatch_ingest_to_delivery_seconds{sink}`.
#[derive(Debug, Default)]
pub struct DeliveryMetrics {
    kinds: Box<[SinkKindMetrics]>,
}

impl DeliveryMetrics {
    /// Figures for each of `kinds` (repeats are one kind), in name order.
    pub fn new(kinds: impl IntoIterator<Item = &'static str>) -> DeliveryMetrics {
        let mut k: Vec<&'static str> = kinds.into_iter().collect();
        k.sort_unstable();
        k.dedup();
        DeliveryMetrics {
            kinds: k.into_iter().map(SinkKindMetrics::new).collect(),
        }
    }

    /// The figures of sink kind `kind` (`None`: not a configured kind).
    pub fn kind(&self, kind: &str) -> Option<&SinkKindMetrics> {
        self.kinds.iter().find(|m| m.kind == kind)
    }

    /// Every configured kind's figures, in name order.
    pub fn kinds(&self) -> &[SinkKindMetrics] {
        &self.kinds
    }
}

/// The Writer's figures (docs/design.md section 5, "Writer"):
/// `ankusa_writer_group_hooks` and `ankusa_writer_commit_seconds`.
#[derive(Debug)]
pub struct WriterMetrics {
    /// Hooks given a seq per group commit (ingest, quarantine, replay
    /// copies), one observation per group written; its sum is every hook the
    /// Writer committed.
    pub group_hooks: Histogram,
    /// From the start of a group's write to the end of the sync that makes it
    /// durable (its requests are answered then), seconds; one observation
    /// per group written.
    pub commit_latency: Histogram,
}

impl Default for WriterMetrics {
    fn default() -> Self {
        WriterMetrics {
            group_hooks: Histogram::new(GROUP_BOUNDS_HOOKS, 1.0),
            commit_latency: Histogram::latency(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_on_a_bound_is_in_that_bound_s_bucket() {
        let h = Histogram::new(&[10, 20], 1.0);
        for v in [0, 10, 11, 20, 21, u64::MAX / 4] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(10.0, 2), (20.0, 2), (f64::INFINITY, 2)]);
        assert_eq!(s.count, 6);
        assert_eq!(h.count(), 6);
    }

    #[test]
    fn latency_is_shown_in_seconds() {
        let h = Histogram::latency();
        h.observe_duration(Duration::from_millis(3));
        h.observe_ms(40);
        let s = h.snapshot();
        assert!((s.sum - 0.043).abs() < 1e-12, "{}", s.sum);
        assert_eq!(s.buckets[0].0, 0.0005);
        let le_5ms = s
            .buckets
            .iter()
            .find(|(b, _)| (*b - 0.005).abs() < 1e-12)
            .unwrap();
        assert_eq!(le_5ms.1, 1);
        let le_50ms = s
            .buckets
            .iter()
            .find(|(b, _)| (*b - 0.05).abs() < 1e-12)
            .unwrap();
        assert_eq!(le_50ms.1, 1);
    }

    /// Regression (brk16): the bounds were `ns * 1e-9`, and `/metrics`
    /// showed the top latency bucket as `le="30.000000000000005"` (a
    /// dashboard's `le="30"` matched nothing). Each bound is now the
    /// decimal it is written as.
    #[test]
    fn latency_bounds_are_the_decimals_they_are_written_as() {
        let bounds: Vec<f64> = Histogram::latency()
            .snapshot()
            .buckets
            .iter()
            .map(|(b, _)| *b)
            .collect();
        assert_eq!(
            bounds,
            [
                0.0005,
                0.001,
                0.0025,
                0.005,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                0.5,
                1.0,
                2.5,
                5.0,
                10.0,
                30.0,
                f64::INFINITY
            ]
        );
        assert_eq!(
            bounds
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(" "),
            "0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 inf"
        );
    }

    #[test]
    fn kinds_are_fixed_and_counted_by_outcome() {
        let m = DeliveryMetrics::new(["http", "file", "http"]);
        assert_eq!(
            m.kinds().iter().map(|k| k.kind).collect::<Vec<_>>(),
            ["file", "http"]
        );
        let http = m.kind("http").unwrap();
        http.attempt(AttemptOutcome::Retry);
        http.attempt(AttemptOutcome::Retry);
        http.attempt(AttemptOutcome::Delivered);
        assert_eq!(http.attempts(AttemptOutcome::Retry), 2);
        assert_eq!(http.attempts(AttemptOutcome::Delivered), 1);
        assert_eq!(http.attempts(AttemptOutcome::Permanent), 0);
        assert!(m.kind("kafka").is_none());
        let labels: Vec<_> = AttemptOutcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels.len(), 7);
        assert!(
            AttemptOutcome::ALL
                .iter()
                .enumerate()
                .all(|(i, o)| o.index() == i)
        );
    }
}
