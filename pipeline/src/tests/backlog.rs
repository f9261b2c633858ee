//! Break-it checks of the pipelined dispatcher (scan and claim), stepped by
//! hand on the memory engine and a frozen clock as the bench gate
//! ([`super::gate`]) is, so every count is exact and nothing depends on
//! timing.
//!
//! A slow sink's backlog must not cost its tenant's other sinks (docs/design.md
//! section 5, "A pass": "Rows of a saturated sink are skipped, not claimed, so
//! one slow sink does not starve the tenant's others"; "Rate limit": "The
//! per-tenant low-water cursor and envelope-free scan of the pipelined
//! dispatcher remove that cost").
use std::sync::Arc;

use ankusa_engine::Kv;
use ankusa_engine::memory::MemoryKv;
use ankusa_keys::CounterField;
use ankusa_queue::check_invariants;
use ankusa_queue::writer::{Writer, WriterConfig};
use ankusa_sinks::Outcome;

use super::gate::{Answered, CLOCK_MS};
use super::{FAST, SLOW, SOURCE, TENANT, request};
use crate::calls::Done;
use crate::{BreakerPolicy, DispatchConfig, Pipeline, RetryPolicy, Route, Routes, counter};

/// The tenant's one source with its two sink entries, SLOW and FAST, whose
/// calls the tests answer by hand ([`Answered`]).
fn slow_and_fast_routes() -> Routes {
    let mut routes = Routes::default();
    for (ix, name) in [(SLOW, "slow"), (FAST, "fast")] {
        routes.sinks.insert(
            (SOURCE, ix),
            Route {
                sink: Arc::new(Answered),
                sink_name: name.into(),
                source_name: "s".into(),
            },
        );
    }
    routes.tenants.insert(TENANT, "t".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    routes
}

/// Every fast row delivered and every slow row still pending (`hooks` of
/// them, `sink_concurrency` in flight), and the store's invariants hold.
fn assert_only_slow_rows_pending(kv: &MemoryKv, hooks: u64) {
    assert_eq!(
        counter(kv, TENANT, CounterField::Pending).expect("counter"),
        i64::try_from(hooks).expect("hooks"),
        "every fast row delivered, every slow row still pending"
    );
    let violations = check_invariants(kv).expect("check");
    assert!(violations.is_empty(), "{violations:?}");
}

/// What dispatching the fast sink's rows cost.
#[derive(Debug)]
struct Cost {
    /// Engine steps until every fast row was delivered.
    steps: u64,
    /// Steps that claimed no fast row while the fast sink had due rows and
    /// free call slots.
    idle_steps: u64,
    /// Due entries (and hook gets) read per fast delivery.
    entries_per_fast: u64,
    gets_per_fast: u64,
}

/// `hooks` hooks, each with a row for a sink whose calls never end (it holds
/// its `sink_concurrency` calls forever: the rest of its rows are a backlog in
/// front of the fast sink's) and one for a sink that answers every call `Ok`
/// at the next step.
async fn fast_behind_a_slow_backlog(hooks: u64) -> Cost {
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let task = tokio::spawn(writer.run());
    for n in 0..hooks {
        handle.ingest(request(n)).await.expect("ingest");
    }
    drop(handle);
    task.await.expect("writer task").expect("writer");

    let routes = slow_and_fast_routes();
    let dispatch = DispatchConfig::default();
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.dispatcher;
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");
    let before = kv.stats();
    let mut done: Vec<Done> = Vec::new();
    let mut held: Vec<Done> = Vec::new();
    let (mut steps, mut idle_steps, mut fast_delivered, mut fast_in_flight) =
        (0u64, 0u64, 0u64, 0u64);
    while fast_delivered < hooks {
        fast_delivered += done.len() as u64;
        fast_in_flight -= done.len() as u64;
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        steps += 1;
        let mut claimed_fast = 0;
        for c in d.take_calls() {
            let x = c.finish(Outcome::Ok);
            if x.key.2 == FAST {
                claimed_fast += 1;
                done.push(x);
            } else {
                held.push(x);
            }
        }
        fast_in_flight += claimed_fast;
        let fast_due_left = hooks - fast_delivered - fast_in_flight + claimed_fast;
        if claimed_fast == 0 && fast_due_left > 0 {
            idle_steps += 1;
        }
        assert!(steps <= 100 * hooks, "the dispatcher does not converge");
        if done.is_empty() && fast_delivered + fast_in_flight >= hooks {
            break;
        }
    }
    let spent = kv.stats() - before;
    assert_eq!(
        held.len(),
        dispatch.sink_concurrency,
        "the slow sink holds its concurrency, no more"
    );
    assert_only_slow_rows_pending(&kv, hooks);
    Cost {
        steps,
        idle_steps,
        entries_per_fast: spent.entries_scanned / hooks,
        gets_per_fast: spent.gets / hooks,
    }
}

/// The fast sink's rows sit behind a slow sink's growing backlog in the due
/// index (each hook has a row for both, in seq order). With `sink_concurrency`
/// 8, the fast sink can take 8 rows a step: about `hooks / 8` steps. A visit
/// that stops because every sink is saturated does not keep where it stopped
/// (`Scanner::resume` is kept only for a visit that read its 8 pages), so
/// the next visits walk the slow backlog again from the low-water cursor,
/// 456 entries (a hook get each) at a time, before they reach the fast rows:
/// steps and reads per fast delivery grow with the backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sinks_backlog_does_not_cost_the_fast_sink_per_delivery() {
    let small = fast_behind_a_slow_backlog(256).await;
    let large = fast_behind_a_slow_backlog(4096).await;
    // Each fast delivery should cost about the same, however long the slow
    // sink's backlog in front of it: allow 4x the cost with 256 hooks.
    assert!(
        large.steps <= 2 * 4096 / 8,
        "4096 fast rows took {} steps (about {} expected), {} of them claimed no fast row; small {small:?}, large {large:?}",
        large.steps,
        4096 / 8,
        large.idle_steps
    );
    assert!(
        large.entries_per_fast <= 4 * small.entries_per_fast.max(1)
            && large.gets_per_fast <= 4 * small.gets_per_fast.max(1),
        "due entries read per fast delivery grow with the slow backlog: small {small:?}, large {large:?}"
    );
}

/// What dispatching the ordered fast sink's lanes cost ([`lanes_behind_a_slow_backlog`]).
#[derive(Debug)]
struct LaneCost {
    steps: u64,
    entries_per_fast: u64,
}

/// Lanes of the ordered sink in [`lanes_behind_a_slow_backlog`]: fewer than
/// its `sink_concurrency` (8), so the ordered sink is never saturated while
/// the slow one always is.
const LANES: u64 = 4;

/// `hooks` hooks, each with a row for a sink whose calls never end (a
/// backlog of `hooks - 8` rows) and one for an ordered sink over [`LANES`]
/// keys that answers `Ok` at the next step (the break-it report of
/// 2026-12-03: a rate-limited Redis sink beside an ordered HTTP sink of the
/// same source). A lane's next member is promoted behind every slow row of
/// an earlier seq, so without the held-back backlog each hop of a lane is
/// reached only after the slow backlog in front of it is read again.
/// Asserts each lane delivered in seq order and the store's invariants.
async fn lanes_behind_a_slow_backlog(hooks: u64) -> LaneCost {
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let lane_rows = handle.lane_rows();
    let task = tokio::spawn(writer.run());
    for n in 0..hooks {
        let mut r = request(n);
        let key = format!("entity-{}", n % LANES);
        r.rows[1].lane = Some(ankusa_queue::lanes::assign(
            FAST,
            SOURCE,
            Some(key.as_bytes()),
        ));
        handle.ingest(r).await.expect("ingest");
    }
    drop(handle);
    task.await.expect("writer task").expect("writer");

    let routes = slow_and_fast_routes();
    let dispatch = DispatchConfig::default();
    // The dispatcher's clock moves on 1 ms a step (the hooks were ingested
    // at CLOCK_MS): a promoted member is due at its promotion, behind every
    // slow row in the due index, as in a real run.
    let clock = Arc::new(std::sync::atomic::AtomicU64::new(CLOCK_MS));
    let now = Arc::clone(&clock);
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        RetryPolicy::default(),
        BreakerPolicy::default(),
        move || now.load(std::sync::atomic::Ordering::SeqCst),
    );
    let mut d = pipeline.lane_rows(lane_rows).dispatcher;
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");
    let before = kv.stats();
    let mut done: Vec<Done> = Vec::new();
    let mut held: Vec<Done> = Vec::new();
    let mut order: std::collections::BTreeMap<u64, Vec<u64>> = std::collections::BTreeMap::new();
    let mut first_seq: Option<u64> = None;
    let (mut steps, mut fast_delivered) = (0u64, 0u64);
    while fast_delivered < hooks {
        fast_delivered += done.len() as u64;
        clock.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        steps += 1;
        for c in d.take_calls() {
            let x = c.finish(Outcome::Ok);
            if x.key.2 == FAST {
                let base = *first_seq.get_or_insert(x.row.seq.0 - x.row.seq.0 % LANES);
                order
                    .entry((x.row.seq.0 - base) % LANES)
                    .or_default()
                    .push(x.row.seq.0);
                done.push(x);
            } else {
                held.push(x);
            }
        }
        assert!(steps <= 100 * hooks, "the dispatcher does not converge");
        if done.is_empty() && fast_delivered >= hooks {
            break;
        }
    }
    let spent = kv.stats() - before;
    assert_eq!(
        held.len(),
        dispatch.sink_concurrency,
        "the slow sink holds its concurrency, no more"
    );
    assert_eq!(order.len() as u64, LANES, "every lane delivered");
    for (lane, seqs) in &order {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "lane {lane} out of order: {seqs:?}"
        );
        assert_eq!(seqs.len() as u64, hooks / LANES, "lane {lane}");
    }
    assert_only_slow_rows_pending(&kv, hooks);
    LaneCost {
        steps,
        entries_per_fast: spent.entries_scanned / hooks,
    }
}

/// Ordered lanes behind a slow sink's growing backlog: each step can deliver
/// one hop of each of the 4 lanes, so about `hooks / 4` steps, and the due
/// entries read per delivery stay flat however deep the slow backlog is (the
/// rows of a saturated sink past one page are held back, docs/design.md
/// section 5, "A sink's backlog held back"). Without the hold, a visit read
/// its 8 pages of the slow backlog and stopped short of the lane heads
/// promoted behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_lanes_behind_a_slow_sinks_backlog_go_on_at_one_hop_per_step() {
    let small = lanes_behind_a_slow_backlog(256).await;
    let large = lanes_behind_a_slow_backlog(4096).await;
    assert!(
        large.steps <= 2 * 4096 / LANES + 8,
        "4096 hooks over {LANES} lanes took {} steps (about {} expected); small {small:?}, large {large:?}",
        large.steps,
        4096 / LANES
    );
    assert!(
        large.entries_per_fast <= 4 * small.entries_per_fast.max(1),
        "due entries read per lane hop grow with the slow backlog: small {small:?}, large {large:?}"
    );
}
