//! `ankusa-load`: a running relay end to end under load
//! (benches/load/README.md; the runs it made are in benches/load/RESULTS.md).
//!
//! The tool is both ends of the relay: it POSTs hooks to the relay's ingest
//! URL over `--connections` keep-alive HTTP/1.1 connections, and it runs the
//! HTTP server the relay's HTTP sink delivers to (the *receiver*). Every hook
//! carries a unique load id (header `x-load-id`, and in the generated JSON
//! body), so the receiver can tell which acked hook arrived, when, how many
//! times, and in which order per ordering key. Then it prints what a person
//! needs to judge a run: acked/s and ack latency, delivered/s and
//! ingest-to-delivery latency, lost, duplicated, out of order, unexpected, and
//! the relay's backlog (`ankusa_queue_pending`) over the run.
//!
//! ```text
//! ankusa-load --target http://127.0.0.1:8080/hooks/load --sink-port 9000 \
//!             --admin http://127.0.0.1:8081 --connections 64 --duration-s 30 --json
//! ankusa-load --baseline --target http://127.0.0.1:8090/hooks/load --connections 64 --duration-s 30
//! ```
//!
//! Exit codes: 0 when every acked hook was received and none came out of
//! order (and at least one was acked); 1 otherwise; 2 for a usage error or a
//! receiver port that cannot be bound. `benches/load/README.md` has the
//! details and `benches/load/e2e.sh` the cells it runs.
#![deny(missing_docs, clippy::unwrap_used)]

mod admin;
mod metrics;
mod post;
mod receiver;
mod report;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant, SystemTime};

use clap::{Parser, ValueEnum};

/// The command line (`ankusa-load --help`).
#[derive(Debug, Parser)]
#[command(
    name = "ankusa-load",
    about = "Load a running Ankusa relay end to end: post hooks, receive them as its HTTP sink's destination, count lost, duplicated and out-of-order deliveries",
    after_help = "Exit: 0 when no acked hook was lost and none came out of order, 1 otherwise, 2 on a usage error. See benches/load/README.md."
)]
pub struct Args {
    /// The relay's ingest URL of the source to load, e.g. http://127.0.0.1:8080/hooks/load
    /// (with --baseline: plain-hyper's URL).
    #[arg(long)]
    pub target: String,
    /// Keep-alive connections, each one task doing one request at a time.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    /// How long to post, seconds (default 10 when --hooks is not given).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// How many hooks to post at most (with --duration-s: whichever ends first).
    #[arg(long)]
    pub hooks: Option<u64>,
    /// Post at this many hooks per second (open loop: hook i is due at i/R s,
    /// and its ack latency counts from then); default: as fast as the
    /// connections go (closed loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Size of a generated JSON body, bytes (at least its fields: about 80).
    #[arg(long, default_value_t = 2048)]
    pub body_bytes: usize,
    /// Post the bodies of a corpus directory (fixtures/corpus) in turn, with
    /// their provider headers, instead of generated ones (the source must not
    /// verify: the signatures are years old).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// The header that carries each hook's key (the relay's ordered sink is
    /// keyed on it).
    #[arg(long, default_value = "x-entity-id")]
    pub key_header: String,
    /// How many different keys (1: one hot key).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub keys: u32,
    /// How keys are drawn.
    #[arg(long, value_enum, default_value_t = KeyDist::Uniform)]
    pub key_dist: KeyDist,
    /// Exponent of the Zipf distribution (--key-dist zipf).
    #[arg(long, default_value_t = 1.0)]
    pub zipf_s: f64,
    /// Seed of the key draws (the same seed, the same keys per connection).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The receiver's port on 127.0.0.1 (0: a free one, printed).
    #[arg(long, default_value_t = 0)]
    pub sink_port: u16,
    /// The receiver answers each delivery after this many milliseconds.
    #[arg(long, default_value_t = 0)]
    pub sink_delay_ms: u64,
    /// Fault injection: at this many seconds after the start, the receiver
    /// dies: it closes its listener and every connection, answering nothing
    /// (a delivery it had taken and not answered comes again: a duplicate).
    #[arg(long, requires = "sink_outage_s")]
    pub sink_outage_at_s: Option<f64>,
    /// How long the receiver stays down (--sink-outage-at-s), seconds.
    #[arg(long, requires = "sink_outage_at_s")]
    pub sink_outage_s: Option<f64>,
    /// Fault injection: the receiver answers 400 to its first N deliveries
    /// and does not count them (the relay dead-letters those hooks: they are
    /// lost until revived, and a revived hook of an ordered key arrives out
    /// of order).
    #[arg(long, default_value_t = 0)]
    pub sink_reject_first: u64,
    /// The relay's admin listener, e.g. http://127.0.0.1:8081: /metrics every
    /// second (backlog), and each hook's seq where the order check needs it.
    #[arg(long)]
    pub admin: Option<String>,
    /// Bearer token of the admin API (listeners.admin_token).
    #[arg(long, env = "ANKUSA_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// At most this many seq look-ups through the admin API for the order
    /// check (0: none; pairs it cannot decide are counted as unknown).
    #[arg(long, default_value_t = 200_000)]
    pub seq_lookups: usize,
    /// After posting, how long to wait for every acked hook to arrive, seconds.
    #[arg(long, default_value_t = 120.0)]
    pub drain_timeout_s: f64,
    /// Bound on one request (send and answer), seconds.
    #[arg(long, default_value_t = 30.0)]
    pub timeout_s: f64,
    /// Post only, against plain-hyper (benches/src/bin/plain-hyper.rs): no
    /// receiver, no delivery figures.
    #[arg(long)]
    pub baseline: bool,
    /// A name for this run, copied into the JSON line.
    #[arg(long, default_value = "")]
    pub label: String,
    /// Print one JSON line with every figure on stdout (the human summary
    /// then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// No progress lines while running.
    #[arg(long)]
    pub quiet: bool,
}

/// How keys are drawn (`--key-dist`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Key i (from 0) with probability proportional to 1/(i+1)^s.
    Zipf,
}

impl KeyDist {
    fn name(self) -> &'static str {
        match self {
            KeyDist::Uniform => "uniform",
            KeyDist::Zipf => "zipf",
        }
    }
}

/// One monotonic clock for both ends of the tool: every time it records is
/// microseconds since `t0`, so a send and its delivery compare directly.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    t0: Instant,
    unix_us0: u64,
}

impl Clock {
    fn start() -> Clock {
        let unix_us0 = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Clock {
            t0: Instant::now(),
            unix_us0,
        }
    }

    /// Microseconds since the start.
    pub fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// `us` (since the start) as unix microseconds.
    pub fn unix_us(&self, us: u64) -> u64 {
        self.unix_us0 + us
    }

    /// `us` (since the start) as an `Instant`.
    pub fn at(&self, us: u64) -> Instant {
        self.t0 + Duration::from_micros(us)
    }
}

/// What every task watches: Ctrl-C presses (the first stops posting, the
/// second stops waiting for deliveries).
#[derive(Debug, Default)]
pub struct Stop {
    interrupts: AtomicU8,
    posting_done: AtomicBool,
}

impl Stop {
    /// Whether posting should stop (a Ctrl-C).
    pub fn posting(&self) -> bool {
        self.interrupts.load(Ordering::Relaxed) >= 1
    }
    /// Whether waiting for deliveries should stop (a second Ctrl-C).
    pub fn draining(&self) -> bool {
        self.interrupts.load(Ordering::Relaxed) >= 2
    }
    /// Whether the posting phase has ended.
    pub fn posted(&self) -> bool {
        self.posting_done.load(Ordering::Relaxed)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = check(&args) {
        eprintln!("ankusa-load: {e}");
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ankusa-load: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ankusa-load: {e}");
            ExitCode::from(2)
        }
    }
}

/// Checks of the options clap cannot express.
fn check(a: &Args) -> Result<(), String> {
    let positive = |name: &str, v: Option<f64>| match v {
        Some(x) if !(x.is_finite() && x > 0.0) => Err(format!("{name} must be a number above 0")),
        _ => Ok(()),
    };
    positive("--duration-s", a.duration_s)?;
    positive("--rate", a.rate)?;
    positive("--drain-timeout-s", Some(a.drain_timeout_s))?;
    positive("--timeout-s", Some(a.timeout_s))?;
    positive("--sink-outage-s", a.sink_outage_s)?;
    if let Some(at) = a.sink_outage_at_s
        && !(at.is_finite() && at >= 0.0)
    {
        return Err("--sink-outage-at-s must be 0 or more".into());
    }
    if !(a.zipf_s.is_finite() && a.zipf_s >= 0.0) {
        return Err("--zipf-s must be 0 or more".into());
    }
    if a.hooks == Some(0) {
        return Err("--hooks must be more than 0".into());
    }
    if a.baseline
        && (a.sink_outage_at_s.is_some() || a.sink_delay_ms > 0 || a.sink_reject_first > 0)
    {
        return Err("--baseline runs no receiver: --sink-* options do not apply".into());
    }
    hyper::header::HeaderName::from_bytes(a.key_header.as_bytes())
        .map_err(|_| format!("--key-header {:?} is not a header name", a.key_header))?;
    Ok(())
}

async fn run(args: Args) -> Result<ExitCode, String> {
    let args = Arc::new(args);
    let clock = Clock::start();
    let stop = Arc::new(Stop::default());
    {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                let n = stop.interrupts.fetch_add(1, Ordering::Relaxed) + 1;
                eprintln!(
                    "ankusa-load: interrupted ({}): {}",
                    n,
                    if n == 1 {
                        "posting stops; Ctrl-C again to stop waiting for deliveries"
                    } else {
                        "reporting what arrived"
                    }
                );
            }
        });
    }
    let plan = post::Plan::new(&args, clock)?;

    // The receiver first: the relay may deliver as soon as the first hook is acked.
    let receiver = if args.baseline {
        None
    } else {
        let outage = match (args.sink_outage_at_s, args.sink_outage_s) {
            (Some(at), Some(len)) => Some(((at * 1e6) as u64, Duration::from_secs_f64(len))),
            _ => None,
        };
        let expect_bytes = plan.generated_len();
        let listen = SocketAddr::from(([127, 0, 0, 1], args.sink_port));
        let r = receiver::Receiver::start(
            listen,
            Duration::from_millis(args.sink_delay_ms),
            outage,
            expect_bytes,
            args.sink_reject_first,
            clock,
        )
        .await
        .map_err(|e| format!("receiver: cannot listen on {listen}: {e}"))?;
        eprintln!("ankusa-load: receiver listening on {}", r.addr());
        Some(r)
    };

    let admin = match &args.admin {
        Some(url) => Some(Arc::new(admin::Admin::new(url, args.admin_token.clone())?)),
        None => None,
    };
    let sampler = admin
        .as_ref()
        .map(|a| metrics::Sampler::start(Arc::clone(a), clock, Arc::clone(&stop)));
    if let Some(s) = &sampler {
        // One scrape before the first post: the backlog at the start.
        s.scrape_now(metrics::Phase::Start).await;
    }

    let progress = (!args.quiet).then(|| {
        tokio::spawn(progress_lines(
            Arc::clone(&plan.live),
            receiver.clone(),
            sampler.clone(),
            clock,
            Arc::clone(&stop),
        ))
    });

    let posted = post::run(Arc::clone(&plan), Arc::clone(&stop)).await;
    stop.posting_done.store(true, Ordering::Relaxed);
    if let Some(s) = &sampler {
        s.scrape_now(metrics::Phase::PostEnd).await;
    }

    let drain = match &receiver {
        Some(r) => Some(drain(&args, &posted, r, sampler.as_ref(), clock, &stop).await),
        None => None,
    };
    if let Some(s) = &sampler {
        s.scrape_now(metrics::Phase::End).await;
        s.stop();
    }
    if let Some(p) = progress {
        p.abort();
    }
    let (deliveries, corrupt, rejected) = match &receiver {
        Some(r) => {
            r.stop();
            (r.take(), r.corrupt(), r.rejected())
        }
        None => (Vec::new(), 0, 0),
    };

    let mut input = report::Input {
        sent: &posted.sent,
        deliveries: &deliveries,
        seqs: Default::default(),
        post_start_us: posted.start_us,
        post_end_us: posted.end_us,
        open_loop: args.rate.is_some(),
        corrupt,
        connect_failures: plan.live.connect_failures.load(Ordering::Relaxed),
        rejected,
    };
    // The relay's HTTP sink sends no seq: where send and ack times cannot
    // decide the order of two deliveries of a key, ask the admin API.
    let mut lookup_note = None;
    if let Some(a) = &admin
        && !args.baseline
    {
        let wanted = report::ids_needing_seq(&input);
        if !wanted.is_empty() && args.seq_lookups > 0 {
            let keys = report::idempotency_keys(&deliveries, &wanted, args.seq_lookups);
            let (seqs, failed) = a.lookup_seqs(&keys, 8).await;
            lookup_note = Some((keys.len(), failed));
            input.seqs = seqs;
        }
    }
    let samples = sampler.as_ref().map(|s| s.samples()).unwrap_or_default();
    let r = report::Report::build(&input, &samples, drain, lookup_note);
    let summary = r.human(&args);
    let ok = r.ok(args.baseline);
    if args.json {
        eprint!("{summary}");
        println!("{}", r.json(&args));
    } else {
        print!("{summary}");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// How the wait for deliveries ended.
#[derive(Debug, Clone, Copy)]
pub struct Drain {
    /// Every acked hook was received.
    pub complete: bool,
    /// When the wait ended, µs since the start.
    pub end_us: u64,
    /// When the last acked hook was received (µs since the start), if all were.
    pub all_acked_at_us: Option<u64>,
    /// The wait ended early: hooks were missing while the relay had nothing
    /// pending or in flight for `IDLE_GIVE_UP_US` (dead-lettered, or lost).
    pub relay_idle: bool,
}

/// How long the relay may have nothing pending while acked hooks are still
/// missing before the wait ends (nothing more can come), µs.
const IDLE_GIVE_UP_US: u64 = 5_000_000;

/// Waits until every acked hook has been received and, with `--admin`, the
/// relay has nothing pending (so late duplicates are counted too), for at
/// most `--drain-timeout-s` after posting ended.
async fn drain(
    args: &Args,
    posted: &post::Posted,
    receiver: &receiver::Receiver,
    sampler: Option<&metrics::Sampler>,
    clock: Clock,
    stop: &Stop,
) -> Drain {
    let deadline = posted.end_us + (args.drain_timeout_s * 1e6) as u64;
    let mut acked = report::AckedSet::new(&posted.sent);
    let mut seen = 0;
    let mut all_at = None;
    let mut idle_since = None;
    // After the last acked hook arrived: at most this long for the relay's
    // pending count to reach 0.
    let settle_us = 10_000_000;
    loop {
        let now = clock.now_us();
        seen = receiver.scan_from(seen, |d| acked.receive(d));
        if acked.missing() == 0 && all_at.is_none() {
            all_at = Some(now);
        }
        if let Some(at) = all_at {
            let settled = match sampler {
                None => true,
                Some(s) => s.relay_idle().await || now >= at + settle_us,
            };
            if settled {
                return Drain {
                    complete: true,
                    end_us: clock.now_us(),
                    all_acked_at_us: Some(at),
                    relay_idle: false,
                };
            }
        } else if let Some(s) = sampler {
            // The 1 s samples: a relay with nothing pending will deliver nothing more.
            match s.last_sample() {
                Some(x)
                    if x.phase == metrics::Phase::Draining
                        && x.gauges.pending == Some(0.0)
                        && x.gauges.in_flight.is_none_or(|f| f == 0.0) =>
                {
                    let since = *idle_since.get_or_insert(x.at_us);
                    if now >= since + IDLE_GIVE_UP_US {
                        return Drain {
                            complete: false,
                            end_us: now,
                            all_acked_at_us: None,
                            relay_idle: true,
                        };
                    }
                }
                _ => idle_since = None,
            }
        }
        if now >= deadline || stop.draining() {
            return Drain {
                complete: acked.missing() == 0,
                end_us: now,
                all_acked_at_us: all_at,
                relay_idle: false,
            };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One line every 5 s on stderr while the tool runs.
async fn progress_lines(
    live: Arc<post::Live>,
    receiver: Option<receiver::Receiver>,
    sampler: Option<metrics::Sampler>,
    clock: Clock,
    stop: Arc<Stop>,
) {
    let mut last = (0u64, 0u64);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let t = clock.now_us();
        let acked = live.acked.load(Ordering::Relaxed);
        let received = receiver.as_ref().map_or(0, |r| r.count() as u64);
        let backlog = sampler
            .as_ref()
            .and_then(|s| s.last_pending())
            .map_or_else(|| "-".to_string(), |p| p.to_string());
        let dt = (t - last.0) as f64 / 1e6;
        eprintln!(
            "ankusa-load: {:6.1} s {} acked {} ({:.0}/s) failed {} received {} backlog {}",
            t as f64 / 1e6,
            if stop.posted() { "draining" } else { "posting" },
            acked,
            (acked - last.1) as f64 / dt,
            live.failed.load(Ordering::Relaxed),
            received,
            backlog
        );
        last = (t, acked);
    }
}
