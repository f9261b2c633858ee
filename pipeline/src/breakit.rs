//! Break-it checks of the pipelined dispatcher (scan and claim), stepped by
//! hand on the memory engine and a frozen clock as the bench gate
//! ([`crate::gate`]) is, so every count is exact and nothing depends on timing.
//!
//! A slow sink's backlog must not cost its tenant's other sinks (docs/design.md
//! section 5, "A pass": "Rows of a saturated sink are skipped, not claimed, so
//! one slow sink does not starve the tenant's others"; "Rate limit": "The
//! per-tenant low-water cursor and envelope-free scan of the pipelined
//! dispatcher remove that cost").

use std::sync::Arc;

use ankusa_engine::Kv;
use ankusa_engine::memory::MemoryKv;
use ankusa_keys::{CounterField, Envelope, SinkIx, SourceId, TenantOrd};
use ankusa_queue::writer::{IngestRequest, Writer, WriterConfig};
use ankusa_queue::{NewRow, check_invariants};
use ankusa_sinks::{DeliveryCtx, Outcome, Sink};
use async_trait::async_trait;

use crate::calls::Done;
use crate::gate::{Answered, CLOCK_MS};
use crate::{BreakerPolicy, DispatchConfig, Pipeline, RetryPolicy, Route, Routes, counter};

const TENANT: TenantOrd = TenantOrd(1);
const SOURCE: SourceId = SourceId(1);
const SLOW: SinkIx = SinkIx(0);
const FAST: SinkIx = SinkIx(1);

fn request(n: u64) -> IngestRequest {
    let envelope = Envelope {
        source: SOURCE,
        received_at_ms: CLOCK_MS,
        method: "POST".into(),
        path: "/hooks/s".into(),
        query: None,
        headers: vec![],
        body: format!("{{\"n\":{n}}}").into_bytes(),
        dedupe_key: None,
        idempotency_key: n.to_be_bytes().repeat(2).try_into().expect("16 bytes"),
        replay_of: None,
    };
    IngestRequest {
        tenant: TENANT,
        envelope,
        rows: vec![
            NewRow {
                sink: SLOW,
                lane: None,
            },
            NewRow {
                sink: FAST,
                lane: None,
            },
        ],
        dedupe_ttl_ms: None,
    }
}

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
    d.low_water_reset = std::time::Duration::MAX;
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
        for c in std::mem::take(&mut d.calls) {
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
/// (`Dispatcher::resume` is kept only for a visit that read its 8 pages), so
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
    d.low_water_reset = std::time::Duration::MAX;
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
        for c in std::mem::take(&mut d.calls) {
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

/// A sink whose client pipelines (`Sink::pipelined`): up to
/// `dispatch.pipelined_concurrency` calls per (tenant, sink).
struct Pipelined;

#[async_trait]
impl Sink for Pipelined {
    async fn deliver(&self, _: &Envelope, _: &DeliveryCtx) -> Outcome {
        Outcome::Ok
    }
    fn kind(&self) -> &'static str {
        "breakit-pipelined"
    }
    fn pipelined(&self) -> bool {
        true
    }
}

/// Four tenants with a backlog each on a pipelining sink fill the admission
/// window (4 x `pipelined_concurrency` 256 = `admission_window` 1024), and a
/// fifth tenant's one hook waits. Calls end 64 at a time, oldest first, one
/// batch per step. A pass visits tenants in key order, and each of the first
/// four reclaims the window room its own finished calls freed before the
/// fifth is visited, so the fifth gets room only when the others' backlogs
/// run dry: "A pass visits every tenant with an ?A marker, in key order (fair
/// share)" does not hold once a few tenants can fill the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_busy_tenants_on_a_pipelining_sink_do_not_starve_a_fifth() {
    const BACKLOG: u64 = 2000;
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let task = tokio::spawn(writer.run());
    let tenants: Vec<TenantOrd> = (1..=5).map(TenantOrd).collect();
    let ingest = async |n: u64, t: TenantOrd| {
        let mut r = request(n);
        r.tenant = t;
        r.rows = vec![NewRow {
            sink: SinkIx(0),
            lane: None,
        }];
        handle.ingest(r).await.expect("ingest");
    };
    for n in 0..4 * BACKLOG {
        ingest(n, tenants[usize::try_from(n % 4).expect("small")]).await;
    }
    let mut routes = Routes::default();
    // One source for every tenant (a `{tenant}` path source): not in
    // `source_tenants`.
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink: Arc::new(Pipelined),
            sink_name: "ps".into(),
            source_name: "p".into(),
        },
    );
    for t in &tenants {
        routes.tenants.insert(*t, format!("t{}", t.0));
    }
    let dispatch = DispatchConfig::default();
    assert_eq!(
        4 * dispatch.pipelined_concurrency,
        dispatch.window,
        "the defaults this test is about"
    );
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.dispatcher;
    d.low_water_reset = std::time::Duration::MAX;
    d.start_up().expect("start");
    let mut in_flight: std::collections::VecDeque<Done> = std::collections::VecDeque::new();
    // The four fill the window (no call ends yet).
    while d.in_flight_total < dispatch.window {
        d.step(Vec::new(), Vec::new(), true).expect("step");
        in_flight.extend(
            std::mem::take(&mut d.calls)
                .into_iter()
                .map(|c| c.finish(Outcome::Ok)),
        );
    }
    // Now the fifth tenant's one hook comes in.
    ingest(4 * BACKLOG, tenants[4]).await;
    drop(handle);
    task.await.expect("writer task").expect("writer");
    let mut done: Vec<Done> = Vec::new();
    for _ in 0..64 {
        if let Some(x) = in_flight.pop_front() {
            done.push(x);
        }
    }
    let mut steps = 0;
    let fifth = loop {
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        steps += 1;
        let calls: Vec<Done> = std::mem::take(&mut d.calls)
            .into_iter()
            .map(|c| c.finish(Outcome::Ok))
            .collect();
        if let Some(x) = calls.iter().find(|x| x.key.0 == TenantOrd(5)) {
            break Some((steps, x.row));
        }
        in_flight.extend(calls);
        if in_flight.is_empty() {
            break None;
        }
        for _ in 0..64 {
            if let Some(x) = in_flight.pop_front() {
                done.push(x);
            }
        }
    };
    let pending: Vec<i64> = tenants[..4]
        .iter()
        .map(|t| counter(&*kv, *t, CounterField::Pending).expect("counter"))
        .collect();
    let Some((at_step, row)) = fifth else {
        panic!("the fifth tenant's hook was never claimed")
    };
    assert!(
        pending
            .iter()
            .all(|p| *p > i64::try_from(BACKLOG).expect("backlog") / 2),
        "the fifth tenant's one hook ({row}) was claimed at step {at_step} only, when the four busy tenants had {pending:?} \
         rows pending of {BACKLOG} each: it waited for their backlogs"
    );
}

/// The Writer reads its clock for a group before it commits it (and fsyncs):
/// a hook's due time is that reading. A visit that runs meanwhile and meets a
/// row due a little later (a retry that just fell due, a promoted head) sets
/// the tenant's low-water cursor above the hook's due time, and the hook is
/// under the cursor when its commit lands: no visit reads it until the cursor
/// is dropped (`LOW_WATER_RESET`, 1 s). Measured against the real binary: a
/// healthy sink's p99 latency went from 23 ms to 710 ms (max 989 ms) while 4
/// rows of another sink of the same tenant were retrying. docs/design.md
/// section 5, "Low-water cursor", says ingest is due "now", at or after the
/// cursor; it is due at the Writer's "now", which can be before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_committed_after_a_visit_that_read_a_later_row_is_claimed_by_the_next_visit() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let writer_clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let pipeline_clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let kv = Arc::new(MemoryKv::new());
    let wc = Arc::clone(&writer_clock);
    let (writer, handle) = Writer::new(Arc::clone(&kv), WriterConfig::default(), move || {
        wc.load(Ordering::SeqCst)
    })
    .expect("writer");
    let task = tokio::spawn(writer.run());
    let one_row = |n: u64| {
        let mut r = request(n);
        r.rows = vec![NewRow {
            sink: FAST,
            lane: None,
        }];
        r
    };

    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, FAST),
        Route {
            sink: Arc::new(Answered),
            sink_name: "fast".into(),
            source_name: "s".into(),
        },
    );
    routes.tenants.insert(TENANT, "t".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    let pc = Arc::clone(&pipeline_clock);
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        RetryPolicy::default(),
        BreakerPolicy::default(),
        move || pc.load(Ordering::SeqCst),
    );
    // As `ankusa serve` wires it (Pipeline::due_floor).
    let mut d = pipeline.due_floor(handle.due_floor()).dispatcher;
    // The cursor reset is a wall-clock second; this test is about the steps
    // before it.
    d.low_water_reset = std::time::Duration::MAX;
    d.start_up().expect("start");

    // Hook 0 is committed at +10 ms and claimed by a visit at +20 ms: the
    // cursor is at +10 ms.
    writer_clock.store(CLOCK_MS + 10, Ordering::SeqCst);
    handle.ingest(one_row(0)).await.expect("ingest");
    pipeline_clock.store(CLOCK_MS + 20, Ordering::SeqCst);
    d.step(Vec::new(), Vec::new(), true).expect("step");
    let first: Vec<Done> = std::mem::take(&mut d.calls)
        .into_iter()
        .map(|c| c.finish(Outcome::Ok))
        .collect();
    assert_eq!(first.len(), 1, "hook 0 claimed");

    // Hook 1's group read the Writer's clock at +5 ms, before that visit,
    // and its commit lands after it.
    writer_clock.store(CLOCK_MS + 5, Ordering::SeqCst);
    handle.ingest(one_row(1)).await.expect("ingest");
    drop(handle);
    task.await.expect("writer task").expect("writer");

    let mut claimed = Vec::new();
    let mut done = first;
    for step in 1..=3 {
        pipeline_clock.store(CLOCK_MS + 20 + step, Ordering::SeqCst);
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        for c in std::mem::take(&mut d.calls) {
            let x = c.finish(Outcome::Ok);
            claimed.push(x.row);
            done.push(x);
        }
    }
    assert_eq!(
        claimed.len(),
        1,
        "hook 1 (due +5 ms, committed after a visit set the low-water cursor at +10 ms) was not claimed in 3 steps: {claimed:?}"
    );
}

/// A source moved from one tenant to another in the configuration (`tenant:
/// a` -> `tenant: b`; `ankusa serve` starts, the source and its sinks are
/// still configured) leaves tenant a's queued rows of it. `Routes::
/// source_tenants` now binds it to b, so tenant a's sink entries
/// (`Dispatcher::tenant_routes`) are its other sources' only, and
/// `all_saturated` compares counts, not entries: the moved source's sink at its
/// concurrency counts as "every sink of tenant a saturated", and the visit
/// stops before tenant a's other source's rows. Against the real binary: a
/// hook of the other source waited more than 60 s (until the moved source's
/// 300-row backlog at 3 s a call drained) instead of 0.1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_moved_to_another_tenant_does_not_stall_its_old_tenants_other_sources() {
    const MOVED: SourceId = SourceId(1);
    const OTHER: SourceId = SourceId(2);
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let task = tokio::spawn(writer.run());
    // 20 hooks of the moved source queued for tenant 1, then one of its other
    // source.
    for n in 0..21 {
        let mut r = request(n);
        r.envelope.source = if n < 20 { MOVED } else { OTHER };
        r.rows = vec![NewRow {
            sink: SinkIx(0),
            lane: None,
        }];
        handle.ingest(r).await.expect("ingest");
    }
    drop(handle);
    task.await.expect("writer task").expect("writer");

    let mut routes = Routes::default();
    for (s, name) in [(MOVED, "moved"), (OTHER, "other")] {
        routes.sinks.insert(
            (s, SinkIx(0)),
            Route {
                sink: Arc::new(Answered),
                sink_name: "http".into(),
                source_name: name.into(),
            },
        );
    }
    routes.tenants.insert(TENANT, "a".into());
    routes.tenants.insert(TenantOrd(2), "b".into());
    routes.source_tenants.insert(MOVED, TenantOrd(2));
    routes.source_tenants.insert(OTHER, TENANT);
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.dispatcher;
    d.low_water_reset = std::time::Duration::MAX;
    d.start_up().expect("start");
    // The moved source's calls never end (a slow receiver): it stays at its
    // sink_concurrency.
    let mut claimed: Vec<Done> = Vec::new();
    for _ in 0..10 {
        d.step(Vec::new(), Vec::new(), true).expect("step");
        claimed.extend(
            std::mem::take(&mut d.calls)
                .into_iter()
                .map(|c| c.finish(Outcome::Ok)),
        );
    }
    let moved = claimed.iter().filter(|x| x.key.1 == MOVED).count();
    assert_eq!(
        moved,
        DispatchConfig::default().sink_concurrency,
        "the moved source's sink at its concurrency"
    );
    assert!(
        claimed.iter().any(|x| x.key.1 == OTHER),
        "tenant a's other source's hook was not claimed in 10 steps while the moved source's sink was saturated"
    );
}

/// Regression (found by a helper's full test run: `retry::a_per_sink_horizon_
/// dead_letters_at_that_horizon` failed now and then): a retry the pipeline
/// reaches only after its horizon passed is dead-lettered at claim time
/// (`RetryPolicy::dead_at_claim`), and that path wrote the reason "retry
/// v.horizon passed" (a search-and-replace slip), while an attempt that
/// failed past the horizon (the committer's path) wrote "retry horizon
/// passed: ...". Which path a row takes depends on when the pipeline gets to
/// it; the reason an operator reads must not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_reached_after_its_horizon_is_dead_lettered_with_the_horizon_reason() {
    use ankusa_engine::{Cf, Direction, Read};
    use ankusa_keys::{DeadLetterValue, Family, family_range};
    use std::sync::atomic::{AtomicU64, Ordering};

    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let task = tokio::spawn(writer.run());
    let mut req = request(0);
    req.rows = vec![NewRow {
        sink: FAST,
        lane: None,
    }];
    handle.ingest(req).await.expect("ingest");
    drop(handle);
    task.await.expect("writer task").expect("writer");

    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, FAST),
        Route {
            sink: Arc::new(Answered),
            sink_name: "fast".into(),
            source_name: "s".into(),
        },
    );
    routes.tenants.insert(TENANT, "t".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    let clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let c = Arc::clone(&clock);
    // Every wait 100 ms, the horizon 1 s after the first attempt.
    let retry = RetryPolicy {
        base_ms: 100,
        max_ms: 100,
        max_elapsed_ms: 1_000,
        ..RetryPolicy::default()
    };
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        retry,
        BreakerPolicy::default(),
        move || c.load(Ordering::SeqCst),
    );
    let mut d = pipeline.dispatcher;
    d.low_water_reset = std::time::Duration::MAX;
    d.start_up().expect("start");

    // The first attempt, at CLOCK_MS, fails: the retry is due 100 ms later.
    d.step(Vec::new(), Vec::new(), true).expect("step");
    let failed: Vec<Done> = std::mem::take(&mut d.calls)
        .into_iter()
        .map(|c| {
            c.finish(Outcome::Retry {
                reason: "503".into(),
                after: None,
            })
        })
        .collect();
    assert_eq!(failed.len(), 1, "the hook's row claimed");
    d.step(Vec::new(), failed, false).expect("commit the retry");

    // The pipeline gets to the row 2 s later: its horizon has passed.
    clock.store(CLOCK_MS + 2_000, Ordering::SeqCst);
    d.step(Vec::new(), Vec::new(), true).expect("step");
    assert!(d.calls.is_empty(), "no attempt past the horizon");

    let dead = kv
        .scan(
            Cf::Index,
            &family_range(Family::DeadLetter),
            Direction::Forward,
            10,
        )
        .expect("scan");
    assert_eq!(dead.len(), 1, "one dead letter");
    let value = DeadLetterValue::decode(&dead[0].1).expect("dead letter value");
    assert_eq!(value.reason, "retry horizon passed");
    assert_eq!(value.dead_at_ms, CLOCK_MS + 2_000);
    assert_eq!(
        counter(&*kv, TENANT, CounterField::Pending).expect("counter"),
        0
    );
    let violations = check_invariants(&*kv).expect("check");
    assert!(violations.is_empty(), "{violations:?}");
}

/// The lane sweep runs only after lane rows (in the 1,000-key load run its
/// scan of the ?P markers walked the tombstones of every marker deleted since
/// the last memtable flush, 73% of the relay's CPU while nothing new came in):
/// with the Writer's lane hints wired as `ankusa serve` wires them, a pass
/// sweeps only after lane rows were committed. Every lane still gets its first member
/// promoted by a sweep and delivers its hooks in order, and a pass with nothing
/// new does not read the markers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lane_sweep_runs_after_lane_rows_and_every_lane_still_delivers_in_order() {
    use ankusa_queue::lanes;
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let lane_rows = handle.lane_rows();
    let task = tokio::spawn(writer.run());
    const KEYS: u64 = 10;
    const HOOKS: u64 = 100;
    let keyed = |n: u64| {
        let mut r = request(n);
        let key = format!("entity-{}", n % KEYS);
        r.rows = vec![NewRow {
            sink: FAST,
            lane: Some(lanes::assign(FAST, SOURCE, Some(key.as_bytes()))),
        }];
        r
    };
    for n in 0..HOOKS {
        handle.ingest(keyed(n)).await.expect("ingest");
    }
    // And one unordered hook for the slow sink, whose retry (an hour out)
    // keeps the tenant active while the lanes' heads are out.
    let mut r = request(HOOKS);
    r.rows = vec![NewRow {
        sink: SLOW,
        lane: None,
    }];
    handle.ingest(r).await.expect("ingest");
    assert_eq!(
        lane_rows.len() as u64,
        KEYS,
        "the Writer names the lanes it put members into"
    );

    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, FAST),
        Route {
            sink: Arc::new(Answered),
            sink_name: "fast".into(),
            source_name: "s".into(),
        },
    );
    routes.sinks.insert(
        (SOURCE, SLOW),
        Route {
            sink: Arc::new(Answered),
            sink_name: "slow".into(),
            source_name: "s".into(),
        },
    );
    routes.tenants.insert(TENANT, "t".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    // Room for every lane's head at once.
    let dispatch = DispatchConfig {
        sink_concurrency: 64,
        ..DispatchConfig::default()
    };
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.lane_rows(Arc::clone(&lane_rows)).dispatcher;
    d.low_water_reset = std::time::Duration::MAX;
    d.start_up().expect("start");

    // One step: the sweep promotes every lane's first member; the calls
    // stay out (each lane's head in flight, members behind it).
    d.step(Vec::new(), Vec::new(), true).expect("step");
    let calls = std::mem::take(&mut d.calls);
    let (slow, first): (Vec<Done>, Vec<Done>) = calls
        .into_iter()
        .map(|c| c.finish(Outcome::Ok))
        .partition(|x| x.row.sink == SLOW);
    assert_eq!(
        first.len() as u64,
        KEYS,
        "one head per lane, promoted by the sweep"
    );
    assert_eq!(slow.len(), 1);
    assert!(lane_rows.is_empty(), "the pass took the named lanes");
    let retry: Vec<Done> = slow
        .into_iter()
        .map(|mut x| {
            x.outcome = Outcome::Retry {
                reason: "503".into(),
                after: Some(std::time::Duration::from_secs(3600)),
            };
            x
        })
        .collect();
    d.step(Vec::new(), retry, true).expect("commit the retry");
    assert!(d.calls.is_empty());

    // A pass with nothing new: no sweep, so no read of the ?P markers.
    let before = kv.stats();
    d.step(Vec::new(), Vec::new(), true).expect("idle step");
    let idle = kv.stats() - before;
    d.sweep = true;
    let before = kv.stats();
    d.step(Vec::new(), Vec::new(), true).expect("forced sweep");
    let swept = kv.stats() - before;
    assert_eq!(
        swept.seeks,
        idle.seeks + 1,
        "a sweeping pass reads the markers once more: idle {idle:?}, swept {swept:?}"
    );

    // The rest: each step commits the last calls' outcomes (a release
    // promotes the next member itself) and starts the next ones.
    let mut delivered: Vec<u64> = first.iter().map(|x| x.row.seq.0).collect();
    let mut done = first;
    let mut steps = 0;
    while !done.is_empty() {
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        done = std::mem::take(&mut d.calls)
            .into_iter()
            .map(|c| c.finish(Outcome::Ok))
            .collect();
        delivered.extend(done.iter().map(|x| x.row.seq.0));
        steps += 1;
        assert!(steps <= 10 * HOOKS, "the dispatcher does not converge");
    }
    drop(handle);
    task.await.expect("writer task").expect("writer");
    assert_eq!(
        delivered.len() as u64,
        HOOKS,
        "every ordered hook delivered once"
    );
    // Seqs are given in ingest order: per key, the delivered seqs ascend.
    for key in 0..KEYS {
        let seqs: Vec<u64> = delivered
            .iter()
            .copied()
            .filter(|s| (s - 1) % KEYS == key)
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "key {key}: {seqs:?}");
    }
    assert_eq!(
        counter(&*kv, TENANT, CounterField::Pending).expect("counter"),
        1,
        "only the slow sink's retry is left"
    );
    let violations = check_invariants(&*kv).expect("check");
    assert!(violations.is_empty(), "{violations:?}");
}

/// The named sweep: a pass sweeps the lanes the Writer named with point reads
/// of their markers and scans no marker range, so a member whose name was lost
/// (as in a crash between the commit and the take) waits for the next full
/// sweep (start-up, a control call, the once-a-second reset), which promotes
/// it. Both lanes end delivered, invariants clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_sweeps_the_named_lanes_and_a_lost_name_waits_for_the_full_sweep() {
    use ankusa_queue::lanes;
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let lane_rows = handle.lane_rows();
    let task = tokio::spawn(writer.run());
    let keyed = |n: u64, key: &str| {
        let mut r = request(n);
        r.rows = vec![NewRow {
            sink: FAST,
            lane: Some(lanes::assign(FAST, SOURCE, Some(key.as_bytes()))),
        }];
        r
    };

    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, FAST),
        Route {
            sink: Arc::new(Answered),
            sink_name: "fast".into(),
            source_name: "s".into(),
        },
    );
    routes.tenants.insert(TENANT, "t".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.lane_rows(Arc::clone(&lane_rows)).dispatcher;
    d.low_water_reset = std::time::Duration::MAX;
    d.start_up().expect("start");
    // The start-up pass: the full sweep over an empty store.
    d.step(Vec::new(), Vec::new(), true).expect("step");
    assert!(d.calls.is_empty());

    // Key "lost": committed, its name taken by nobody's pass.
    let lost = handle.ingest(keyed(0, "lost")).await.expect("ingest");
    assert_eq!(lane_rows.take().lanes.len(), 1, "the Writer named the lane");
    // Key "named": committed and named.
    let named = handle.ingest(keyed(1, "named")).await.expect("ingest");
    assert_eq!(lane_rows.len(), 1);
    let seq_of = |i: ankusa_queue::writer::Ingested| match i {
        ankusa_queue::writer::Ingested::Committed(s) => s.0,
        other => panic!("not committed: {other:?}"),
    };
    let (lost, named) = (seq_of(lost), seq_of(named));

    d.step(Vec::new(), Vec::new(), true).expect("step");
    let calls: Vec<Done> = std::mem::take(&mut d.calls)
        .into_iter()
        .map(|c| c.finish(Outcome::Ok))
        .collect();
    let seqs: Vec<u64> = calls.iter().map(|x| x.row.seq.0).collect();
    assert_eq!(seqs, vec![named], "only the named lane was swept");
    assert_eq!(
        counter(&*kv, TENANT, CounterField::LaneMembers).expect("counter"),
        1,
        "the lost lane's member waits"
    );
    d.step(Vec::new(), calls, true).expect("commit");
    assert!(
        d.calls.is_empty(),
        "a pass with no name and no full sweep promotes nothing"
    );

    // The full sweep (as after a control call or the once-a-second reset).
    d.sweep = true;
    d.step(Vec::new(), Vec::new(), true).expect("full sweep");
    let calls: Vec<Done> = std::mem::take(&mut d.calls)
        .into_iter()
        .map(|c| c.finish(Outcome::Ok))
        .collect();
    assert_eq!(
        calls.iter().map(|x| x.row.seq.0).collect::<Vec<_>>(),
        vec![lost],
        "the full sweep promotes it"
    );
    d.step(Vec::new(), calls, true).expect("commit");
    assert!(d.calls.is_empty());

    drop(handle);
    task.await.expect("writer task").expect("writer");
    assert_eq!(
        counter(&*kv, TENANT, CounterField::Pending).expect("counter"),
        0,
        "both delivered"
    );
    let violations = check_invariants(&*kv).expect("check");
    assert!(violations.is_empty(), "{violations:?}");
}
