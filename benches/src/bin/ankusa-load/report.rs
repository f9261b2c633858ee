//! What a run measured, from the send records, the deliveries and the
//! `/metrics` samples: pure functions (tested below), then the human summary
//! and the JSON line.
//!
//! # The order check
//!
//! For every ordering key (`x-ankusa-ordering-key`: deliveries of an ordered
//! sink), each delivery is compared with the delivery of the key just before
//! it: the relay's seq (commit order) must increase. The same hook again is a
//! *repeat*, not a violation (a lane head delivered again after a restart or
//! a lost answer); anything lower is a violation.
//!
//! The relay's HTTP sink sends no seq, so a pair is decided, in this order,
//! by: both seqs (an `x-ankusa-seq` header if a relay sends one, else the
//! admin API's `GET /v1/hooks/{idempotency_key}`); else the tool's own times:
//! a hook whose 200 was read before the other was sent was committed first
//! (the relay answers 200 only after its commit), so it has the lower seq.
//! Two hooks of a key whose requests overlapped can only be decided by their
//! seqs; without them the pair is counted `unknown`, never as a violation.

use std::collections::{BTreeMap, HashMap, HashSet};

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use crate::metrics::{Gauges, Phase, Sample};
use crate::post::{Outcome, Sent, key_name};
use crate::receiver::Delivery;
use crate::{Args, Drain};

/// What the report is built from.
#[derive(Debug)]
pub struct Input<'a> {
    /// Every hook posted, sorted by load id.
    pub sent: &'a [Sent],
    /// Every delivery, in arrival order.
    pub deliveries: &'a [Delivery],
    /// Seqs looked up through the admin API, by load id.
    pub seqs: HashMap<u64, u64>,
    /// When posting started and ended, µs since the start.
    pub post_start_us: u64,
    /// See `post_start_us`.
    pub post_end_us: u64,
    /// Open loop (`--rate`): ack latency counts from each hook's due time.
    pub open_loop: bool,
    /// Deliveries whose body was not what was sent (the receiver's count).
    pub corrupt: u64,
    /// Connects that failed while posting.
    pub connect_failures: u64,
    /// Deliveries the receiver refused (`--sink-reject-first`).
    pub rejected: u64,
}

fn find(sent: &[Sent], id: u64) -> Option<&Sent> {
    sent.binary_search_by_key(&id, |s| s.id)
        .ok()
        .map(|i| &sent[i])
}

/// Which acked hooks have arrived, updated as deliveries come in.
#[derive(Debug)]
pub struct AckedSet {
    /// By load id: 0 not acked, 1 acked and not received, 2 acked and received.
    state: Vec<u8>,
    missing: usize,
}

impl AckedSet {
    /// Every acked hook of `sent`, none received yet.
    pub fn new(sent: &[Sent]) -> AckedSet {
        let len = sent.last().map_or(0, |s| s.id as usize + 1);
        let mut state = vec![0u8; len];
        let mut missing = 0;
        for s in sent.iter().filter(|s| s.acked()) {
            state[s.id as usize] = 1;
            missing += 1;
        }
        AckedSet { state, missing }
    }

    /// Marks `d`'s hook received.
    pub fn receive(&mut self, d: &Delivery) {
        if let Some(slot) = d.id.and_then(|id| self.state.get_mut(id as usize))
            && *slot == 1
        {
            *slot = 2;
            self.missing -= 1;
        }
    }

    /// Acked hooks not received yet.
    pub fn missing(&self) -> usize {
        self.missing
    }
}

/// How two consecutive deliveries of one key compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pair {
    /// The later one has the higher seq, decided by the seqs.
    InOrderBySeq,
    /// The later one has the higher seq, decided by send and ack times.
    InOrderByTime,
    /// The same hook again.
    Repeat,
    /// The later one has a lower seq.
    Violation,
    /// Cannot be decided without the seqs.
    Unknown,
}

fn seq_of(input: &Input<'_>, d: &Delivery) -> Option<u64> {
    d.seq
        .or_else(|| d.id.and_then(|id| input.seqs.get(&id).copied()))
}

fn compare(input: &Input<'_>, prev: &Delivery, cur: &Delivery) -> Pair {
    let (Some(a), Some(b)) = (prev.id, cur.id) else {
        return Pair::Unknown;
    };
    if a == b {
        return Pair::Repeat;
    }
    if let (Some(x), Some(y)) = (seq_of(input, prev), seq_of(input, cur)) {
        return match y.cmp(&x) {
            std::cmp::Ordering::Greater => Pair::InOrderBySeq,
            std::cmp::Ordering::Less => Pair::Violation,
            // Two hooks never share a seq: a relay bug, shown as unknown.
            std::cmp::Ordering::Equal => Pair::Unknown,
        };
    }
    let (Some(sa), Some(sb)) = (find(input.sent, a), find(input.sent, b)) else {
        return Pair::Unknown;
    };
    // A 2xx read before the other hook was sent: committed first.
    if sa.acked() && sa.ack_us.is_some_and(|t| t <= sb.send_us) {
        return Pair::InOrderByTime;
    }
    if sb.acked() && sb.ack_us.is_some_and(|t| t <= sa.send_us) {
        return Pair::Violation;
    }
    Pair::Unknown
}

/// The order check's result.
#[derive(Debug, Default)]
pub struct Order {
    /// Ordering keys seen.
    pub keys: usize,
    /// Consecutive pairs compared.
    pub pairs: u64,
    /// Pairs decided by seqs.
    pub by_seq: u64,
    /// Pairs decided by send and ack times.
    pub by_time: u64,
    /// The same hook delivered twice in a row (not a violation).
    pub repeats: u64,
    /// Pairs delivered in the wrong order.
    pub violations: u64,
    /// Pairs that could not be decided.
    pub unknown: u64,
    /// The load ids of the undecided pairs.
    pub unknown_ids: HashSet<u64>,
    /// The first violation, in words.
    pub first_violation: Option<String>,
}

/// Runs the order check over the deliveries of ordered sinks.
pub fn order(input: &Input<'_>) -> Order {
    let mut by_key: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in input.deliveries {
        if let Some(k) = d.ordering_key.as_deref() {
            by_key.entry(k).or_default().push(d);
        }
    }
    let mut o = Order {
        keys: by_key.len(),
        ..Order::default()
    };
    let mut keys: Vec<_> = by_key.into_iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (key, ds) in keys {
        for w in ds.windows(2) {
            o.pairs += 1;
            match compare(input, w[0], w[1]) {
                Pair::InOrderBySeq => o.by_seq += 1,
                Pair::InOrderByTime => o.by_time += 1,
                Pair::Repeat => o.repeats += 1,
                Pair::Violation => {
                    o.violations += 1;
                    if o.first_violation.is_none() {
                        let (a, b) = (w[0].id.unwrap_or(0), w[1].id.unwrap_or(0));
                        o.first_violation = Some(
                            match (seq_of(input, w[0]), seq_of(input, w[1])) {
                                (Some(x), Some(y)) => format!(
                                    "key {key}: hook {b} (seq {y}) delivered after hook {a} (seq {x})"
                                ),
                                _ => format!(
                                    "key {key}: hook {b} delivered after hook {a}, which was sent after hook {b}'s 200"
                                ),
                            },
                        );
                    }
                }
                Pair::Unknown => {
                    o.unknown += 1;
                    o.unknown_ids.extend(w[0].id);
                    o.unknown_ids.extend(w[1].id);
                }
            }
        }
    }
    o
}

/// The load ids whose seq the order check needs.
pub fn ids_needing_seq(input: &Input<'_>) -> HashSet<u64> {
    order(input).unknown_ids
}

/// `(load id, idempotency key)` of at most `max` of `wanted`, from their
/// deliveries, smallest ids first.
pub fn idempotency_keys(
    deliveries: &[Delivery],
    wanted: &HashSet<u64>,
    max: usize,
) -> Vec<(u64, u128)> {
    let mut found: BTreeMap<u64, u128> = BTreeMap::new();
    for d in deliveries {
        if let (Some(id), Some(k)) = (d.id, d.idempotency_key)
            && wanted.contains(&id)
        {
            found.entry(id).or_insert(k);
        }
    }
    found.into_iter().take(max).collect()
}

/// Latency percentiles, milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    /// p50, p99, p99.9, max; `None` when nothing was recorded.
    pub p50: Option<f64>,
    /// See `p50`.
    pub p99: Option<f64>,
    /// See `p50`.
    pub p999: Option<f64>,
    /// See `p50`.
    pub max: Option<f64>,
}

fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency::default();
    }
    let ms = |us: u64| Some(us as f64 / 1000.0);
    Latency {
        p50: ms(h.value_at_quantile(0.5)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
    }
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 1 h, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid")
}

/// The backlog over the run (`ankusa_queue_pending`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Backlog {
    /// Before the first post.
    pub start: Option<f64>,
    /// At the sample nearest the middle of the posting window.
    pub middle: Option<f64>,
    /// Right after posting.
    pub post_end: Option<f64>,
    /// At the end.
    pub end: Option<f64>,
    /// The largest read.
    pub max: Option<f64>,
    /// Least-squares slope over the posting window, hooks per second.
    pub slope_per_s: Option<f64>,
    /// Samples in the posting window.
    pub samples: usize,
}

/// Least-squares slope of `(x, y)`, or `None` with fewer than two distinct x.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    (den > 0.0).then(|| num / den)
}

fn backlog(samples: &[Sample], post_start_us: u64, post_end_us: u64) -> Backlog {
    let pick = |phase: Phase| {
        samples
            .iter()
            .filter(|s| s.phase == phase)
            .find_map(|s| s.gauges.pending)
    };
    let window: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            matches!(s.phase, Phase::Start | Phase::Posting | Phase::PostEnd)
                && s.gauges.pending.is_some()
        })
        .collect();
    let mid = (post_start_us + post_end_us) / 2;
    let middle = window
        .iter()
        .filter(|s| s.phase == Phase::Posting)
        .min_by_key(|s| s.at_us.abs_diff(mid))
        .and_then(|s| s.gauges.pending);
    let points: Vec<(f64, f64)> = window
        .iter()
        .filter_map(|s| s.gauges.pending.map(|p| (s.at_us as f64 / 1e6, p)))
        .collect();
    Backlog {
        start: pick(Phase::Start),
        middle,
        post_end: pick(Phase::PostEnd),
        end: samples
            .iter()
            .rev()
            .find(|s| s.phase == Phase::End)
            .and_then(|s| s.gauges.pending),
        max: samples
            .iter()
            .filter_map(|s| s.gauges.pending)
            .reduce(f64::max),
        slope_per_s: slope(&points),
        samples: points.len(),
    }
}

/// How much a counter grew over its reads, as Prometheus' `increase()`:
/// a read lower than the one before is a reset (a relay restart: the edge's
/// `ankusa_ingest_*` counters live in memory), counted from 0. `None` with
/// fewer than two reads.
pub fn increase(reads: impl Iterator<Item = f64>) -> Option<f64> {
    let mut prev = None::<f64>;
    let mut total = None::<f64>;
    for v in reads {
        if let Some(p) = prev {
            *total.get_or_insert(0.0) += if v >= p { v - p } else { v };
        }
        prev = Some(v);
    }
    total
}

/// Everything a run measured.
#[derive(Debug)]
pub struct Report {
    posted: u64,
    acked: u64,
    non2xx: BTreeMap<u16, u64>,
    errors: BTreeMap<&'static str, u64>,
    connect_failures: u64,
    post_s: f64,
    ack: Latency,
    max_lag_ms: Option<f64>,
    delivered: u64,
    receipts: u64,
    delivered_in_window: u64,
    /// Hooks whose first arrival fell in each whole minute of the posting
    /// window (a run of at least two minutes; [`Report::minutes`]).
    per_minute: Vec<u64>,
    last_first_arrival_s: Option<f64>,
    e2e: Latency,
    lost: u64,
    duplicated: u64,
    extra_receipts: u64,
    unexpected: u64,
    unexpected_after_non2xx: u64,
    unknown_ids: u64,
    corrupt: u64,
    wrong_key: u64,
    rejected: u64,
    retried_receipts: u64,
    order: Order,
    seq_lookups: Option<(usize, usize)>,
    backlog: Backlog,
    relay_delta: Option<Gauges>,
    drain: Option<Drain>,
    post_end_us: u64,
}

impl Report {
    /// Builds the report. `lookups`: seq look-ups asked and failed.
    pub fn build(
        input: &Input<'_>,
        samples: &[Sample],
        drain: Option<Drain>,
        lookups: Option<(usize, usize)>,
    ) -> Report {
        let mut non2xx = BTreeMap::new();
        let mut errors = BTreeMap::new();
        let mut ack_h = histogram();
        let mut acked = 0;
        let mut max_lag = None::<u64>;
        for s in input.sent {
            match s.outcome {
                Outcome::Status(c) if (200..300).contains(&c) => {
                    acked += 1;
                    let from = if input.open_loop {
                        s.due_us.unwrap_or(s.send_us)
                    } else {
                        s.send_us
                    };
                    if let Some(t) = s.ack_us {
                        ack_h.saturating_record(t.saturating_sub(from).max(1));
                    }
                }
                Outcome::Status(c) => *non2xx.entry(c).or_insert(0) += 1,
                Outcome::Timeout => *errors.entry("timeout").or_insert(0) += 1,
                Outcome::Io => *errors.entry("connection").or_insert(0) += 1,
            }
            if let Some(due) = s.due_us {
                max_lag = Some(max_lag.unwrap_or(0).max(s.send_us.saturating_sub(due)));
            }
        }
        // Receipts per load id (index: load id), and the first arrival.
        let len = input.sent.last().map_or(0, |s| s.id as usize + 1);
        let mut count = vec![0u32; len];
        let mut first = vec![u64::MAX; len];
        let mut unknown_ids = 0;
        let mut retried = 0;
        let mut wrong_key = 0;
        for d in input.deliveries {
            if d.attempt > 1 {
                retried += 1;
            }
            match d.id.and_then(|id| find(input.sent, id)) {
                Some(s) => {
                    count[s.id as usize] += 1;
                    first[s.id as usize] = first[s.id as usize].min(d.at_us);
                    // An ordered sink's ordering key is the key the hook was sent with.
                    if d.ordering_key
                        .as_deref()
                        .is_some_and(|k| k != key_name(s.key))
                    {
                        wrong_key += 1;
                    }
                }
                None => unknown_ids += 1,
            }
        }
        let mut e2e_h = histogram();
        let (
            mut delivered,
            mut in_window,
            mut lost,
            mut dup,
            mut extra,
            mut unexpected,
            mut after_non2xx,
        ) = (0, 0, 0, 0, 0, 0, 0);
        let mut last_first = None::<u64>;
        let whole_minutes =
            (input.post_end_us.saturating_sub(input.post_start_us) / 60_000_000) as usize;
        let mut per_minute = vec![0u64; if whole_minutes >= 2 { whole_minutes } else { 0 }];
        for s in input.sent {
            let (c, f) = (count[s.id as usize], first[s.id as usize]);
            if c > 0 {
                delivered += 1;
                if f <= input.post_end_us {
                    in_window += 1;
                }
                if let Some(m) = f
                    .checked_sub(input.post_start_us)
                    .map(|t| (t / 60_000_000) as usize)
                    && let Some(n) = per_minute.get_mut(m)
                {
                    *n += 1;
                }
                last_first = Some(last_first.unwrap_or(0).max(f));
                if c > 1 {
                    dup += 1;
                    extra += u64::from(c - 1);
                }
                if s.acked() {
                    e2e_h.saturating_record(f.saturating_sub(s.send_us).max(1));
                } else {
                    unexpected += 1;
                    if matches!(s.outcome, Outcome::Status(_)) {
                        after_non2xx += 1;
                    }
                }
            } else if s.acked() {
                lost += 1;
            }
        }
        let relay_delta = samples.last().map(|last| {
            let b = last.gauges;
            let d = |f: fn(&Gauges) -> Option<f64>| {
                increase(samples.iter().filter_map(|s| f(&s.gauges)))
            };
            Gauges {
                pending: b.pending,
                in_flight: b.in_flight,
                lane_members: b.lane_members,
                lanes: b.lanes,
                accepted: d(|g| g.accepted),
                delivered: d(|g| g.delivered),
                retries: d(|g| g.retries),
                dead_lettered: d(|g| g.dead_lettered),
                throttled: d(|g| g.throttled),
                unavailable: d(|g| g.unavailable),
            }
        });
        Report {
            posted: input.sent.len() as u64,
            acked,
            non2xx,
            errors,
            connect_failures: input.connect_failures,
            post_s: (input.post_end_us.saturating_sub(input.post_start_us)) as f64 / 1e6,
            ack: latency(&ack_h),
            max_lag_ms: max_lag.map(|l| l as f64 / 1000.0),
            delivered,
            receipts: input.deliveries.len() as u64,
            delivered_in_window: in_window,
            per_minute,
            last_first_arrival_s: last_first
                .map(|t| t.saturating_sub(input.post_start_us) as f64 / 1e6),
            e2e: latency(&e2e_h),
            lost,
            duplicated: dup,
            extra_receipts: extra,
            unexpected,
            unexpected_after_non2xx: after_non2xx,
            unknown_ids,
            corrupt: input.corrupt,
            wrong_key,
            rejected: input.rejected,
            retried_receipts: retried,
            order: order(input),
            seq_lookups: lookups,
            backlog: backlog(samples, input.post_start_us, input.post_end_us),
            relay_delta,
            drain,
            post_end_us: input.post_end_us,
        }
    }

    /// Whether the run passes: something acked and, unless `baseline`,
    /// nothing lost and nothing out of order.
    pub fn ok(&self, baseline: bool) -> bool {
        self.acked > 0 && (baseline || (self.lost == 0 && self.order.violations == 0))
    }

    fn per_s(n: u64, s: Option<f64>) -> Option<f64> {
        s.filter(|s| *s > 0.0).map(|s| n as f64 / s)
    }

    fn acked_per_s(&self) -> Option<f64> {
        Self::per_s(self.acked, Some(self.post_s))
    }

    fn delivered_per_s_post(&self) -> Option<f64> {
        Self::per_s(self.delivered_in_window, Some(self.post_s))
    }

    /// Delivered hooks/s in each whole minute of the posting window (first
    /// arrivals), and the lowest and highest of them as a ratio to the first
    /// minute's: a soak is flat when both stay within 0.9-1.1 (its delivered
    /// rate within 10% of the first minute's). Empty for a run shorter than two
    /// minutes.
    pub fn minutes(&self) -> (Vec<f64>, Option<(f64, f64)>) {
        let rates: Vec<f64> = self.per_minute.iter().map(|n| *n as f64 / 60.0).collect();
        let spread = rates.first().filter(|f| **f > 0.0).map(|first| {
            let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rates.iter().copied().fold(0.0, f64::max);
            (lo / first, hi / first)
        });
        (rates, spread)
    }

    fn delivered_per_s(&self) -> Option<f64> {
        Self::per_s(self.delivered, self.last_first_arrival_s)
    }

    /// The human summary (several lines).
    pub fn human(&self, a: &Args) -> String {
        let f = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
        };
        let lat = |l: &Latency| {
            format!(
                "p50 {} ms  p99 {} ms  p99.9 {} ms  max {} ms",
                f(l.p50, 2),
                f(l.p99, 2),
                f(l.p999, 2),
                f(l.max, 2)
            )
        };
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        let body = match &a.corpus {
            Some(d) => format!("corpus {}", d.display()),
            None => format!("{}-byte JSON bodies", a.body_bytes),
        };
        let keys = match (a.keys, a.key_dist) {
            (1, _) => "one key".to_string(),
            (k, crate::KeyDist::Zipf) => format!("{k} keys (zipf s={})", a.zipf_s),
            (k, _) => format!("{k} keys (uniform)"),
        };
        line(format!(
            "ankusa-load{}: {} {}, {} connections, {}, {}, {} ({})",
            if a.label.is_empty() {
                String::new()
            } else {
                format!(" [{}]", a.label)
            },
            if a.baseline { "baseline" } else { "relay" },
            a.target,
            a.connections,
            a.rate
                .map_or("closed loop".to_string(), |r| format!("open loop at {r}/s")),
            body,
            keys,
            a.key_header
        ));
        let non2xx: u64 = self.non2xx.values().sum();
        let errors: u64 = self.errors.values().sum();
        line(format!(
            "posting     {:.2} s: {} posted, {} acked ({}/s), non-2xx {}{}, errors {}{}, failed connects {}",
            self.post_s,
            self.posted,
            self.acked,
            f(self.acked_per_s(), 1),
            non2xx,
            if self.non2xx.is_empty() {
                String::new()
            } else {
                format!(" {:?}", self.non2xx)
            },
            errors,
            if self.errors.is_empty() {
                String::new()
            } else {
                format!(" {:?}", self.errors)
            },
            self.connect_failures,
        ));
        line(format!(
            "ack latency {}{}",
            lat(&self.ack),
            match (a.rate, self.max_lag_ms) {
                (Some(_), Some(l)) =>
                    format!("  (from each hook's due time; the latest send was {l:.1} ms late)"),
                _ => String::new(),
            }
        ));
        if a.baseline {
            line(format!(
                "result      {}",
                if self.ok(true) {
                    "OK"
                } else {
                    "FAILED (nothing acked)"
                }
            ));
            return out;
        }
        line(format!(
            "delivered   {} hooks ({} receipts; {} retried attempts): {}/s over the posting window, {}/s overall (last first arrival {} s after the start)",
            self.delivered,
            self.receipts,
            self.retried_receipts,
            f(self.delivered_per_s_post(), 1),
            f(self.delivered_per_s(), 1),
            f(self.last_first_arrival_s, 2),
        ));
        line(format!(
            "e2e latency {}  (from send to first arrival)",
            lat(&self.e2e)
        ));
        let (rates, spread) = self.minutes();
        if !rates.is_empty() {
            line(format!(
                "per minute  delivered/s {}; lowest {} and highest {} x the first minute's",
                rates
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                f(spread.map(|s| s.0), 3),
                f(spread.map(|s| s.1), 3),
            ));
        }
        if self.rejected > 0 {
            line(format!(
                "rejected    {} deliveries refused with 400 (--sink-reject-first), not counted as receipts",
                self.rejected
            ));
        }
        line(format!(
            "integrity   lost {}  duplicated {} (extra receipts {})  unexpected {} (after a non-2xx {})  unknown ids {}  corrupt {}  wrong key {}",
            self.lost,
            self.duplicated,
            self.extra_receipts,
            self.unexpected,
            self.unexpected_after_non2xx,
            self.unknown_ids,
            self.corrupt,
            self.wrong_key
        ));
        let o = &self.order;
        if o.keys == 0 {
            line(
                "order       no ordered deliveries (no x-ankusa-ordering-key): not checked"
                    .to_string(),
            );
        } else {
            line(format!(
                "order       {} ordering keys, {} consecutive pairs: {} out of order, {} repeats, {} unknown (decided by seq {}, by send/ack times {}){}",
                o.keys,
                o.pairs,
                o.violations,
                o.repeats,
                o.unknown,
                o.by_seq,
                o.by_time,
                match self.seq_lookups {
                    Some((n, failed)) =>
                        format!("; {n} seqs looked up through the admin API, {failed} failed"),
                    None => String::new(),
                }
            ));
            if let Some(v) = &o.first_violation {
                line(format!("            first: {v}"));
            }
        }
        let b = &self.backlog;
        if b.samples > 0 || b.end.is_some() {
            line(format!(
                "backlog     ankusa_queue_pending: start {}, middle {}, end of posting {}, end {}; max {}; slope {} hooks/s over the posting window ({} samples)",
                f(b.start, 0),
                f(b.middle, 0),
                f(b.post_end, 0),
                f(b.end, 0),
                f(b.max, 0),
                f(b.slope_per_s, 1),
                b.samples
            ));
        }
        if let Some(r) = &self.relay_delta {
            line(format!(
                "relay       accepted +{}, delivered +{}, retries +{}, dead-lettered +{}, 429 +{}, 503 +{}",
                f(r.accepted, 0),
                f(r.delivered, 0),
                f(r.retries, 0),
                f(r.dead_lettered, 0),
                f(r.throttled, 0),
                f(r.unavailable, 0)
            ));
        }
        if let Some(d) = &self.drain {
            let since = |t: u64| t.saturating_sub(self.post_end_us) as f64 / 1e6;
            line(match (d.complete, d.all_acked_at_us) {
                (true, Some(t)) => format!(
                    "drain       every acked hook received {:.2} s after posting ended; waited {:.2} s in all",
                    since(t),
                    since(d.end_us)
                ),
                _ => format!(
                    "drain       gave up {:.2} s after posting ended{}: {} acked hooks not received (relay pending {}, dead-lettered +{})",
                    since(d.end_us),
                    if d.relay_idle {
                        ", the relay having had nothing pending for 5 s"
                    } else {
                        ""
                    },
                    self.lost,
                    f(self.backlog.end, 0),
                    f(self.relay_delta.and_then(|r| r.dead_lettered), 0),
                ),
            });
        }
        line(format!(
            "result      {}",
            if self.ok(false) {
                "OK (nothing lost, nothing out of order)".to_string()
            } else if self.acked == 0 {
                "FAILED (nothing acked)".to_string()
            } else {
                format!(
                    "FAILED (lost {}, out of order {})",
                    self.lost, self.order.violations
                )
            }
        ));
        out
    }

    /// The JSON line (one object; milliseconds and hooks per second).
    pub fn json(&self, a: &Args) -> String {
        let lat = |prefix: &str, l: &Latency, m: &mut serde_json::Map<String, Value>| {
            m.insert(format!("{prefix}_p50_ms"), json!(l.p50));
            m.insert(format!("{prefix}_p99_ms"), json!(l.p99));
            m.insert(format!("{prefix}_p999_ms"), json!(l.p999));
            m.insert(format!("{prefix}_max_ms"), json!(l.max));
        };
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("label", json!(a.label));
        put("mode", json!(if a.baseline { "baseline" } else { "relay" }));
        put("target", json!(a.target));
        put("connections", json!(a.connections));
        put("rate", json!(a.rate));
        put(
            "body_bytes",
            json!(if a.corpus.is_some() {
                None
            } else {
                Some(a.body_bytes)
            }),
        );
        put(
            "corpus",
            json!(a.corpus.as_ref().map(|p| p.display().to_string())),
        );
        put("keys", json!(a.keys));
        put("key_dist", json!(a.key_dist.name()));
        put("sink_delay_ms", json!(a.sink_delay_ms));
        put("posted", json!(self.posted));
        put("acked", json!(self.acked));
        put("non2xx", json!(self.non2xx.values().sum::<u64>()));
        put(
            "non2xx_by_status",
            json!(
                self.non2xx
                    .iter()
                    .map(|(k, v)| (k.to_string(), *v))
                    .collect::<BTreeMap<_, _>>()
            ),
        );
        put("errors", json!(self.errors.values().sum::<u64>()));
        put("errors_by_kind", json!(self.errors));
        put("connect_failures", json!(self.connect_failures));
        put("post_s", json!(self.post_s));
        put("acked_per_s", json!(self.acked_per_s()));
        put("max_send_lag_ms", json!(self.max_lag_ms));
        put("ok", json!(self.ok(a.baseline)));
        if !a.baseline {
            put("delivered", json!(self.delivered));
            put("receipts", json!(self.receipts));
            put("retried_receipts", json!(self.retried_receipts));
            put("delivered_per_s_post", json!(self.delivered_per_s_post()));
            put("delivered_per_s", json!(self.delivered_per_s()));
            let (rates, spread) = self.minutes();
            put("delivered_per_s_by_minute", json!(rates));
            put("minute_rate_low_ratio", json!(spread.map(|s| s.0)));
            put("minute_rate_high_ratio", json!(spread.map(|s| s.1)));
            put("lost", json!(self.lost));
            put("duplicated", json!(self.duplicated));
            put("extra_receipts", json!(self.extra_receipts));
            put("unexpected", json!(self.unexpected));
            put(
                "unexpected_after_non2xx",
                json!(self.unexpected_after_non2xx),
            );
            put("unknown_ids", json!(self.unknown_ids));
            put("corrupt", json!(self.corrupt));
            put("wrong_key", json!(self.wrong_key));
            put("rejected", json!(self.rejected));
            put("ordered_keys", json!(self.order.keys));
            put("order_pairs", json!(self.order.pairs));
            put("out_of_order", json!(self.order.violations));
            put("order_repeats", json!(self.order.repeats));
            put("order_unknown", json!(self.order.unknown));
            put("order_by_seq", json!(self.order.by_seq));
            put("seq_lookups", json!(self.seq_lookups.map(|l| l.0)));
            put("seq_lookups_failed", json!(self.seq_lookups.map(|l| l.1)));
            put("drained", json!(self.drain.map(|d| d.complete)));
            put(
                "drain_s",
                json!(
                    self.drain
                        .map(|d| d.end_us.saturating_sub(self.post_end_us) as f64 / 1e6)
                ),
            );
        }
        let b = &self.backlog;
        put("backlog_start", json!(b.start));
        put("backlog_mid", json!(b.middle));
        put("backlog_post_end", json!(b.post_end));
        put("backlog_end", json!(b.end));
        put("backlog_max", json!(b.max));
        put("backlog_slope_per_s", json!(b.slope_per_s));
        if let Some(r) = &self.relay_delta {
            put("relay_accepted", json!(r.accepted));
            put("relay_delivered", json!(r.delivered));
            put("relay_retries", json!(r.retries));
            put("relay_dead_lettered", json!(r.dead_lettered));
        }
        lat("ack", &self.ack, &mut m);
        if !a.baseline {
            lat("e2e", &self.e2e, &mut m);
        }
        Value::Object(m).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(id: u64, send_us: u64, ack_us: u64) -> Sent {
        Sent {
            id,
            key: 0,
            send_us,
            due_us: None,
            ack_us: Some(ack_us),
            outcome: Outcome::Status(200),
        }
    }

    fn got(id: u64, key: Option<&str>, at_us: u64) -> Delivery {
        Delivery {
            id: Some(id),
            ordering_key: key.map(Into::into),
            seq: None,
            idempotency_key: Some(u128::from(id) + 1000),
            attempt: 1,
            at_us,
        }
    }

    fn input<'a>(s: &'a [Sent], d: &'a [Delivery]) -> Input<'a> {
        Input {
            sent: s,
            deliveries: d,
            seqs: HashMap::new(),
            post_start_us: 0,
            post_end_us: 1_000_000,
            open_loop: false,
            corrupt: 0,
            connect_failures: 0,
            rejected: 0,
        }
    }

    /// Hooks 0..3 of one key, each sent after the previous one's 200.
    fn serial() -> Vec<Sent> {
        vec![
            sent(0, 0, 10),
            sent(1, 20, 30),
            sent(2, 40, 50),
            sent(3, 60, 70),
        ]
    }

    #[test]
    fn in_order_deliveries_pass_and_count_nothing_wrong() {
        let s = serial();
        let d: Vec<_> = (0..4).map(|i| got(i, Some("k"), 100 + i)).collect();
        let r = Report::build(&input(&s, &d), &[], None, None);
        assert_eq!(
            (r.acked, r.delivered, r.lost, r.duplicated, r.unexpected),
            (4, 4, 0, 0, 0)
        );
        assert_eq!(
            (
                r.order.pairs,
                r.order.by_time,
                r.order.violations,
                r.order.unknown
            ),
            (3, 3, 0, 0)
        );
        assert!(r.ok(false));
    }

    /// A soak's delivered rate per whole minute of the posting window, and
    /// the spread against the first minute; a shorter run has none.
    #[test]
    fn first_arrivals_are_counted_per_whole_minute_of_the_posting_window() {
        let min = 60_000_000u64;
        let s: Vec<Sent> = (0..5).map(|i| sent(i, i, i + 1)).collect();
        // Minute 0: hooks 0, 1 (and 1 again: counted once); minute 1: 2, 3;
        // minute 2: 4 (a partial third minute is not a bucket).
        let d = vec![
            got(0, None, 10),
            got(1, None, min - 1),
            got(1, None, min + 5),
            got(2, None, min),
            got(3, None, 2 * min - 1),
            got(4, None, 2 * min + 1),
        ];
        let mut i = input(&s, &d);
        i.post_end_us = 2 * min + 30_000_000;
        let r = Report::build(&i, &[], None, None);
        assert_eq!(r.per_minute, vec![2, 2]);
        let (rates, spread) = r.minutes();
        assert_eq!(rates, vec![2.0 / 60.0, 2.0 / 60.0]);
        assert_eq!(spread, Some((1.0, 1.0)));
        let r = Report::build(&input(&s, &d), &[], None, None);
        assert_eq!(r.minutes(), (vec![], None));
    }

    #[test]
    fn a_repeat_of_the_last_hook_is_a_duplicate_not_a_violation() {
        let s = serial();
        let d = vec![
            got(0, Some("k"), 1),
            got(1, Some("k"), 2),
            got(1, Some("k"), 3),
            got(2, Some("k"), 4),
            got(3, Some("k"), 5),
        ];
        let r = Report::build(&input(&s, &d), &[], None, None);
        assert_eq!((r.duplicated, r.extra_receipts), (1, 1));
        assert_eq!((r.order.repeats, r.order.violations), (1, 0));
        assert!(r.ok(false));
    }

    #[test]
    fn an_older_hook_again_or_a_swap_is_a_violation() {
        let s = serial();
        // 0 1 2 0 3: hook 0 again after 2 (not the last one): one violation.
        let d = vec![
            got(0, Some("k"), 1),
            got(1, Some("k"), 2),
            got(2, Some("k"), 3),
            got(0, Some("k"), 4),
            got(3, Some("k"), 5),
        ];
        let r = Report::build(&input(&s, &d), &[], None, None);
        assert_eq!((r.order.violations, r.duplicated), (1, 1));
        assert!(!r.ok(false));
        // 0 2 1 3: one descent.
        let d = vec![
            got(0, Some("k"), 1),
            got(2, Some("k"), 2),
            got(1, Some("k"), 3),
            got(3, Some("k"), 4),
        ];
        let r = Report::build(&input(&s, &d), &[], None, None);
        assert_eq!(r.order.violations, 1);
        assert_eq!(
            r.order.first_violation.as_deref(),
            Some("key k: hook 1 delivered after hook 2, which was sent after hook 1's 200")
        );
    }

    #[test]
    fn overlapping_sends_need_seqs_and_are_unknown_without_them() {
        // 0 and 1 were out at the same time: either order is legal.
        let s = vec![sent(0, 0, 100), sent(1, 50, 150)];
        let d = vec![got(1, Some("k"), 200), got(0, Some("k"), 300)];
        let mut i = input(&s, &d);
        let o = order(&i);
        assert_eq!((o.unknown, o.violations), (1, 0));
        assert_eq!(ids_needing_seq(&i), HashSet::from([0, 1]));
        assert_eq!(
            idempotency_keys(&d, &HashSet::from([0, 1]), 10),
            vec![(0, 1000), (1, 1001)]
        );
        // The relay committed 1 first: in order.
        i.seqs = HashMap::from([(0, 8), (1, 7)]);
        let o = order(&i);
        assert_eq!((o.by_seq, o.violations, o.unknown), (1, 0, 0));
        // It committed 0 first: a violation.
        i.seqs = HashMap::from([(0, 7), (1, 8)]);
        assert_eq!(order(&i).violations, 1);
    }

    #[test]
    fn keys_are_checked_apart_and_unordered_deliveries_not_at_all() {
        let s = serial();
        let d = vec![
            got(1, Some("a"), 1),
            got(0, Some("b"), 2),
            got(3, None, 3),
            got(2, None, 4),
        ];
        let r = Report::build(&input(&s, &d), &[], None, None);
        assert_eq!((r.order.keys, r.order.pairs, r.order.violations), (2, 0, 0));
    }

    #[test]
    fn lost_unexpected_and_unknown_are_told_apart() {
        let mut s = serial();
        s[1].outcome = Outcome::Io;
        s[1].ack_us = None;
        s[2].outcome = Outcome::Status(503);
        // 0 received, 1 (no answer) received, 2 (503) received, 3 lost; 99 never sent.
        let d = vec![
            got(0, None, 1),
            got(1, None, 2),
            got(2, None, 3),
            got(99, None, 4),
        ];
        let r = Report::build(&input(&s, &d), &[], None, None);
        assert_eq!(
            (
                r.acked,
                r.lost,
                r.unexpected,
                r.unexpected_after_non2xx,
                r.unknown_ids
            ),
            (2, 1, 2, 1, 1)
        );
        assert_eq!(r.non2xx.get(&503), Some(&1));
        assert_eq!(r.errors.get("connection"), Some(&1));
        assert!(!r.ok(false));
        let mut acked = AckedSet::new(&s);
        assert_eq!(acked.missing(), 2);
        for x in &d {
            acked.receive(x);
        }
        acked.receive(&d[0]);
        assert_eq!(acked.missing(), 1);
    }

    #[test]
    fn the_backlog_slope_is_least_squares() {
        assert_eq!(slope(&[(0.0, 10.0), (1.0, 20.0), (2.0, 30.0)]), Some(10.0));
        assert_eq!(slope(&[(0.0, 5.0), (1.0, 5.0)]), Some(0.0));
        assert_eq!(slope(&[(0.0, 5.0)]), None);
        let g = |p: f64| Gauges {
            pending: Some(p),
            ..Gauges::default()
        };
        let samples = [
            Sample {
                at_us: 0,
                phase: Phase::Start,
                gauges: g(0.0),
            },
            Sample {
                at_us: 1_000_000,
                phase: Phase::Posting,
                gauges: g(100.0),
            },
            Sample {
                at_us: 2_000_000,
                phase: Phase::Posting,
                gauges: g(200.0),
            },
            Sample {
                at_us: 3_000_000,
                phase: Phase::PostEnd,
                gauges: g(300.0),
            },
            Sample {
                at_us: 4_000_000,
                phase: Phase::End,
                gauges: g(0.0),
            },
        ];
        let b = backlog(&samples, 0, 3_000_000);
        assert_eq!(
            (b.start, b.middle, b.post_end, b.end, b.max),
            (Some(0.0), Some(100.0), Some(300.0), Some(0.0), Some(300.0))
        );
        assert_eq!(b.slope_per_s.map(|x| x.round()), Some(100.0));
    }

    #[test]
    fn a_counter_reset_counts_from_zero() {
        assert_eq!(increase([10.0, 15.0, 3.0, 7.0].into_iter()), Some(12.0));
        assert_eq!(increase([10.0, 15.0].into_iter()), Some(5.0));
        assert_eq!(increase([10.0].into_iter()), None);
    }

    #[test]
    fn latencies_come_from_the_histogram() {
        let s: Vec<Sent> = (0..1000)
            .map(|i| sent(i, i * 10, i * 10 + 1000 + i))
            .collect();
        let r = Report::build(&input(&s, &[]), &[], None, None);
        let p50 = r.ack.p50.expect("p50");
        assert!((1.49..=1.51).contains(&p50), "{p50}");
        assert_eq!(r.lost, 1000);
    }
}
