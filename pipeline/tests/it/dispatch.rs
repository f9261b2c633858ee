//! The pipeline on the memory engine with a scripted in-process sink: lane
//! order, one call per lane, retries, a slow key that blocks nothing else,
//! dead heads releasing their lane, and restart recovery (ADR 0004 sections 4
//! and 7; docs/design.md section 5).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Durability, Kv};
use ankusa_keys::{CounterField, Envelope, SinkIx, SourceId, TenantOrd};
use ankusa_pipeline::{
    BreakerPolicy, BreakerState, DispatchConfig, Pipeline, PipelineHandle, RetryPolicy, Route,
    Routes, counter,
};
use ankusa_queue::writer::{IngestRequest, Writer, WriterConfig, WriterHandle};
use ankusa_queue::{NewRow, check_invariants, lanes};
use ankusa_sinks::{DeliveryCtx, Envelope as SinkEnvelope, Outcome, Sink};
use async_trait::async_trait;

/// What the scripted sink saw and what it answers.
#[derive(Default)]
struct Script {
    /// (ordering key, body) of every call, in call order.
    calls: Vec<(Option<Vec<u8>>, Vec<u8>, u32)>,
    /// Bodies to answer Retry once.
    retry_once: Vec<Vec<u8>>,
    /// Bodies to answer Permanent.
    permanent: Vec<Vec<u8>>,
    /// Calls in flight per ordering key now, and the most ever seen.
    in_flight: HashMap<Vec<u8>, u32>,
    max_in_flight_per_key: u32,
}

struct ScriptSink {
    script: Arc<Mutex<Script>>,
    /// Calls whose ordering key is this wait until `release` is notified.
    slow_key: Option<Vec<u8>>,
    release: Arc<tokio::sync::Notify>,
    delivered: Arc<AtomicU64>,
}

#[async_trait]
impl Sink for ScriptSink {
    async fn deliver(&self, hook: &SinkEnvelope, ctx: &DeliveryCtx) -> Outcome {
        let key = ctx.ordering_key.clone();
        {
            let mut s = self.script.lock().unwrap();
            s.calls.push((key.clone(), hook.body.clone(), ctx.attempt));
            if let Some(k) = &key {
                let n = s.in_flight.entry(k.clone()).or_default();
                *n += 1;
                let n = *n;
                s.max_in_flight_per_key = s.max_in_flight_per_key.max(n);
            }
        }
        if key.is_some() && key == self.slow_key {
            self.release.notified().await;
        } else {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut s = self.script.lock().unwrap();
        if let Some(k) = &key {
            *s.in_flight.get_mut(k).unwrap() -= 1;
        }
        if let Some(i) = s.retry_once.iter().position(|b| *b == hook.body) {
            s.retry_once.remove(i);
            return Outcome::Retry {
                reason: "scripted".into(),
                after: None,
            };
        }
        if s.permanent.contains(&hook.body) {
            return Outcome::Permanent {
                reason: "scripted".into(),
            };
        }
        self.delivered.fetch_add(1, Ordering::SeqCst);
        Outcome::Ok
    }
    fn kind(&self) -> &'static str {
        "script"
    }
}

const TENANT: TenantOrd = TenantOrd(1);
const SOURCE: SourceId = SourceId(1);

struct Relay {
    kv: Arc<MemoryKv>,
    writer: WriterHandle,
    pipeline: PipelineHandle,
    release: Arc<tokio::sync::Notify>,
    delivered: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn start(kv: Arc<MemoryKv>, script: Arc<Mutex<Script>>, slow_key: Option<&str>) -> Relay {
    let release = Arc::new(tokio::sync::Notify::new());
    let delivered = Arc::new(AtomicU64::new(0));
    let sink = ScriptSink {
        script,
        slow_key: slow_key.map(|k| k.as_bytes().to_vec()),
        release: Arc::clone(&release),
        delivered: Arc::clone(&delivered),
    };
    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink: Arc::new(sink),
            sink_name: "script".into(),
            source_name: "demo".into(),
        },
    );
    routes.tenants.insert(TENANT, "acme".into());
    let (writer, writer_handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms).unwrap();
    let retry = RetryPolicy {
        base_ms: 2,
        max_ms: 10,
        max_elapsed_ms: 60_000,
        ..RetryPolicy::default()
    };
    let dispatch = DispatchConfig {
        batch: 16,
        sink_concurrency: 8,
        window: 64,
        idle_ms: 2,
        flush_interval_ms: 1,
        ..DispatchConfig::default()
    };
    let (pipeline, handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        retry,
        BreakerPolicy::default(),
        now_ms,
    );
    let tasks = vec![
        tokio::spawn(async move { writer.run().await.unwrap() }),
        tokio::spawn(async move { pipeline.run().await.unwrap() }),
    ];
    Relay {
        kv,
        writer: writer_handle,
        pipeline: handle,
        release,
        delivered,
        tasks,
    }
}

/// Hook `n` of the test source (body `hook-<n>`), for sink 0, laned by `key`
/// when `ordered`.
fn request(n: u64, key: Option<&str>, ordered: bool) -> IngestRequest {
    let envelope = Envelope {
        source: SOURCE,
        received_at_ms: now_ms(),
        method: "POST".into(),
        path: "/hooks/demo".into(),
        query: None,
        headers: vec![],
        body: format!("hook-{n}").into_bytes(),
        dedupe_key: None,
        idempotency_key: [0; 16],
        replay_of: None,
    };
    let lane = ordered.then(|| lanes::assign(SinkIx(0), SOURCE, key.map(str::as_bytes)));
    IngestRequest {
        tenant: TENANT,
        envelope,
        rows: vec![NewRow {
            sink: SinkIx(0),
            lane,
        }],
        dedupe_ttl_ms: None,
    }
}

async fn ingest(relay: &Relay, n: u64, key: Option<&str>, ordered: bool) {
    relay.writer.ingest(request(n, key, ordered)).await.unwrap();
    relay.pipeline.wake();
}

/// Waits (a generous 60 s: a loaded machine is slow, never wrong) until `n`
/// hooks were delivered.
async fn wait_delivered(relay: &Relay, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if relay.delivered.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "only {} of {n} delivered",
        relay.delivered.load(Ordering::SeqCst)
    );
}

/// The process dies: both tasks are stopped where they are (nothing more is
/// flushed), and this returns once nothing of the stopped node holds `kv`.
/// abort() stops a task at its next await, but an engine step already on a
/// blocking thread (`spawn_blocking`) runs to its end and may still claim or
/// commit: a new pipeline started before it ends would share the store with
/// the old one, which is not a state a real crash leaves (regression: the new
/// pipeline's claim of the recovered head met the old step's claim of it,
/// `NotInState { expected: "due" }`, once under CPU load in CI).
async fn crash(relay: Relay, kv: &Arc<MemoryKv>) {
    let Relay {
        kv: own,
        writer,
        pipeline,
        tasks,
        ..
    } = relay;
    for t in tasks {
        t.abort();
        assert!(
            t.await.is_err_and(|e| e.is_cancelled()),
            "the task ended on its own"
        );
    }
    drop((own, writer, pipeline));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while Arc::strong_count(kv) > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the store is still held by the stopped node"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn stop(relay: Relay) -> Arc<MemoryKv> {
    relay.pipeline.shutdown();
    drop(relay.writer);
    for t in relay.tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    relay.kv
}

fn bodies_for(script: &Script, key: &str) -> Vec<String> {
    script
        .calls
        .iter()
        .filter(|(k, _, _)| k.as_deref() == Some(key.as_bytes()))
        .map(|(_, b, _)| String::from_utf8(b.clone()).unwrap())
        .collect()
}

/// 100 hooks for one key with a retry in the middle arrive in order, one call
/// of the lane at a time; the store ends empty and consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_lane_in_order_with_mid_stream_retry() {
    let script = Arc::new(Mutex::new(Script {
        retry_once: vec![b"hook-30".to_vec()],
        ..Default::default()
    }));
    let relay = start(Arc::new(MemoryKv::new()), Arc::clone(&script), None);
    for n in 0..100 {
        ingest(&relay, n, Some("cus_1"), true).await;
    }
    wait_delivered(&relay, 100).await;
    let kv = stop(relay).await;
    let s = script.lock().unwrap();
    let mut want: Vec<String> = (0..100).map(|n| format!("hook-{n}")).collect();
    want.insert(31, "hook-30".into()); // the retried attempt comes again before hook-31
    assert_eq!(bodies_for(&s, "cus_1"), want);
    assert_eq!(s.max_in_flight_per_key, 1);
    let retried = s.calls.iter().find(|(_, b, a)| b == b"hook-30" && *a == 2);
    assert!(retried.is_some(), "the retry is attempt 2");
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
    for f in [
        CounterField::Pending,
        CounterField::Lanes,
        CounterField::LaneMembers,
        CounterField::InFlight,
    ] {
        assert_eq!(counter(&*kv, TenantOrd::NODE, f).unwrap(), 0, "{f:?}");
    }
    assert_eq!(
        counter(&*kv, TENANT, CounterField::DeliveredTotal).unwrap(),
        100
    );
    assert_eq!(
        counter(&*kv, TENANT, CounterField::RetriesTotal).unwrap(),
        1
    );
}

/// A key whose sink call hangs does not delay another key: all of the fast
/// key's hooks are delivered while the slow head is still in its call; the
/// slow lane's members wait; once released, they follow in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_key_blocks_only_its_lane() {
    let script = Arc::new(Mutex::new(Script::default()));
    let relay = start(Arc::new(MemoryKv::new()), Arc::clone(&script), Some("slow"));
    for n in 0..5 {
        ingest(&relay, n, Some("slow"), true).await;
    }
    for n in 5..25 {
        ingest(&relay, n, Some("fast"), true).await;
    }
    wait_delivered(&relay, 20).await;
    {
        let s = script.lock().unwrap();
        assert_eq!(bodies_for(&s, "fast").len(), 20);
        assert_eq!(
            bodies_for(&s, "slow"),
            vec!["hook-0"],
            "only the slow head was called"
        );
    }
    assert_eq!(
        counter(&*relay.kv, TENANT, CounterField::LaneMembers).unwrap(),
        4
    );
    // One release per call of the slow lane, each once that call has begun:
    // `notify_one` keeps at most one permit, so two releases before the next
    // call would collapse into one (a loaded machine found that).
    for i in 1..=5 {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while bodies_for(&script.lock().unwrap(), "slow").len() < i {
            assert!(
                std::time::Instant::now() < deadline,
                "slow call {i} never began"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        relay.release.notify_one();
    }
    wait_delivered(&relay, 25).await;
    let kv = stop(relay).await;
    let s = script.lock().unwrap();
    assert_eq!(
        bodies_for(&s, "slow"),
        (0..5).map(|n| format!("hook-{n}")).collect::<Vec<_>>()
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}

/// A head that fails permanently is dead-lettered and releases its lane: the
/// next hook of the key goes ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_head_releases_lane() {
    let script = Arc::new(Mutex::new(Script {
        permanent: vec![b"hook-1".to_vec()],
        ..Default::default()
    }));
    let relay = start(Arc::new(MemoryKv::new()), Arc::clone(&script), None);
    for n in 0..4 {
        ingest(&relay, n, Some("k"), true).await;
    }
    wait_delivered(&relay, 3).await;
    let kv = stop(relay).await;
    let s = script.lock().unwrap();
    assert_eq!(
        bodies_for(&s, "k"),
        vec!["hook-0", "hook-1", "hook-2", "hook-3"]
    );
    assert_eq!(counter(&*kv, TENANT, CounterField::Dead).unwrap(), 1);
    assert_eq!(counter(&*kv, TENANT, CounterField::Lanes).unwrap(), 0);
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}

/// Unordered hooks all arrive, at most sink_concurrency at a time, and the
/// keyless lane of an ordered sink carries "<tenant>/<source>".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unordered_and_keyless() {
    let script = Arc::new(Mutex::new(Script::default()));
    let relay = start(Arc::new(MemoryKv::new()), Arc::clone(&script), None);
    for n in 0..30 {
        ingest(&relay, n, None, false).await;
    }
    for n in 30..35 {
        ingest(&relay, n, None, true).await;
    }
    wait_delivered(&relay, 35).await;
    let kv = stop(relay).await;
    let s = script.lock().unwrap();
    assert_eq!(
        bodies_for(&s, "acme/demo"),
        (30..35).map(|n| format!("hook-{n}")).collect::<Vec<_>>()
    );
    assert_eq!(s.calls.iter().filter(|(k, _, _)| k.is_none()).count(), 30);
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}

/// Restart (ADR 4.7): a head claimed when the process died is delivered again,
/// as a first attempt, before its successor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_redelivers_claimed_head_first() {
    let script = Arc::new(Mutex::new(Script::default()));
    let kv = Arc::new(MemoryKv::new());
    let relay = start(Arc::clone(&kv), Arc::clone(&script), Some("k"));
    for n in 0..3 {
        ingest(&relay, n, Some("k"), true).await;
    }
    // Wait until the head is in its (hanging) call, then "crash": abort the
    // tasks without letting the pipeline flush.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while script.lock().unwrap().calls.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the head's call never began"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    crash(relay, &kv).await;
    assert_eq!(counter(&*kv, TENANT, CounterField::InFlight).unwrap(), 1);
    let script2 = Arc::new(Mutex::new(Script::default()));
    let relay2 = start(Arc::clone(&kv), Arc::clone(&script2), None);
    wait_delivered(&relay2, 3).await;
    let kv = stop(relay2).await;
    let s = script2.lock().unwrap();
    assert_eq!(bodies_for(&s, "k"), vec!["hook-0", "hook-1", "hook-2"]);
    assert_eq!(s.calls[0].2, 1, "the redelivery is a first attempt again");
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
    kv.write(ankusa_engine::Batch::new(), Durability::Sync)
        .unwrap();
}

/// A sink that always asks for a retry after an absurd Retry-After.
struct RetryForever(Arc<AtomicU64>);

#[async_trait]
impl Sink for RetryForever {
    async fn deliver(&self, _hook: &SinkEnvelope, _ctx: &DeliveryCtx) -> Outcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        Outcome::Retry {
            reason: "503".into(),
            after: Some(Duration::MAX),
        }
    }
    fn kind(&self) -> &'static str {
        "retry-forever"
    }
}

/// Regression (found by adversarial testing: `attempt to add with overflow`
/// panicked the pipeline, and the restart crash-looped): the largest retry
/// horizon, breaker open time and Retry-After the config and a sink can give
/// are saturated, not overflowed. The pipeline keeps running and the row
/// waits in ?D.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_retry_after_and_breaker_do_not_overflow() {
    let kv = Arc::new(MemoryKv::new());
    let calls = Arc::new(AtomicU64::new(0));
    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink: Arc::new(RetryForever(Arc::clone(&calls))),
            sink_name: "r".into(),
            source_name: "demo".into(),
        },
    );
    let (writer, writer_handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms).unwrap();
    let retry = RetryPolicy {
        base_ms: 1,
        max_ms: u64::MAX,
        max_elapsed_ms: u64::MAX,
        ..RetryPolicy::default()
    };
    let breaker = BreakerPolicy {
        failures: 1,
        distinct: 1,
        open_ms: u64::MAX,
    };
    let dispatch = DispatchConfig {
        idle_ms: 2,
        flush_interval_ms: 1,
        ..DispatchConfig::default()
    };
    let (pipeline, handle) =
        Pipeline::new(Arc::clone(&kv), routes, dispatch, retry, breaker, now_ms);
    let writer_task = tokio::spawn(writer.run());
    let pipeline_task = tokio::spawn(pipeline.run());
    for n in 0..2 {
        writer_handle.ingest(request(n, None, false)).await.unwrap();
        handle.wake();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(calls.load(Ordering::SeqCst) >= 1
        && counter(&*kv, TENANT, CounterField::RetriesTotal).unwrap() >= 1)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no failed call and retry within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!pipeline_task.is_finished(), "the pipeline stopped");
    assert!(counter(&*kv, TENANT, CounterField::RetriesTotal).unwrap() >= 1);
    assert_eq!(
        counter(&*kv, TENANT, CounterField::Pending).unwrap(),
        2,
        "both rows wait, none lost"
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
    // The admin API's read-only view: the breaker opened (for u64::MAX ms),
    // another (tenant, sink) is closed with no failures.
    assert_eq!(
        handle.status.breaker(TENANT, SOURCE, SinkIx(0), now_ms()),
        BreakerState::Open { until_ms: u64::MAX }
    );
    assert_eq!(
        handle.status.breaker(TENANT, SOURCE, SinkIx(1), now_ms()),
        BreakerState::Closed { failures: 0 }
    );
    handle.shutdown();
    drop(writer_handle);
    tokio::time::timeout(Duration::from_secs(10), pipeline_task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    writer_task.await.unwrap().unwrap();
}

// ---- pause and resume (docs/design.md section 5, "Pause") -----------------------------

/// One call: (sink index, ordering key, body).
type Call = (u16, Option<Vec<u8>>, String);

/// A sink that records every call and answers Ok.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Call>>>);

#[async_trait]
impl Sink for Recorder {
    async fn deliver(&self, hook: &SinkEnvelope, ctx: &DeliveryCtx) -> Outcome {
        self.0.lock().unwrap().push((
            ctx.sink.0,
            ctx.ordering_key.clone(),
            String::from_utf8_lossy(&hook.body).into_owned(),
        ));
        Outcome::Ok
    }
    fn kind(&self) -> &'static str {
        "recorder"
    }
}

impl Recorder {
    fn bodies(&self, sink: u16) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _, _)| *s == sink)
            .map(|(_, _, b)| b.clone())
            .collect()
    }
    fn bodies_of_key(&self, sink: u16, key: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, k, _)| *s == sink && k.as_deref() == Some(key.as_bytes()))
            .map(|(_, _, b)| b.clone())
            .collect()
    }
}

/// Two sinks of the source: 0 ordered by key, 1 unordered; `paused` as the
/// configuration says.
fn start_two(
    kv: Arc<MemoryKv>,
    rec: &Recorder,
    paused: &[ankusa_keys::meta::PauseTarget],
) -> Relay {
    let mut routes = Routes::default();
    for (i, name) in [(0u16, "ordered"), (1, "plain")] {
        routes.sinks.insert(
            (SOURCE, SinkIx(i)),
            Route {
                sink: Arc::new(rec.clone()),
                sink_name: name.into(),
                source_name: "demo".into(),
            },
        );
    }
    routes.tenants.insert(TENANT, "acme".into());
    routes.paused = paused.iter().copied().collect();
    let (writer, writer_handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms).unwrap();
    let retry = RetryPolicy {
        base_ms: 2,
        max_ms: 10,
        max_elapsed_ms: 60_000,
        ..RetryPolicy::default()
    };
    let dispatch = DispatchConfig {
        batch: 16,
        sink_concurrency: 8,
        window: 64,
        idle_ms: 2,
        flush_interval_ms: 1,
        ..DispatchConfig::default()
    };
    let (pipeline, handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        retry,
        BreakerPolicy::default(),
        now_ms,
    );
    let tasks = vec![
        tokio::spawn(async move { writer.run().await.unwrap() }),
        tokio::spawn(async move { pipeline.run().await.unwrap() }),
    ];
    Relay {
        kv,
        writer: writer_handle,
        pipeline: handle,
        release: Arc::new(tokio::sync::Notify::new()),
        delivered: Arc::new(AtomicU64::new(0)),
        tasks,
    }
}

/// Hook `n` with a row for both sinks, sink 0's laned by `key`.
async fn ingest_two(relay: &Relay, n: u64, key: &str) {
    let mut req = request(n, None, false);
    req.rows = vec![
        NewRow {
            sink: SinkIx(0),
            lane: Some(lanes::assign(SinkIx(0), SOURCE, Some(key.as_bytes()))),
        },
        NewRow {
            sink: SinkIx(1),
            lane: None,
        },
    ];
    relay.writer.ingest(req).await.unwrap();
    relay.pipeline.wake();
}

async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..12_000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out after 60 s waiting for {what}");
}

fn held_rows(kv: &MemoryKv) -> usize {
    use ankusa_engine::{Cf, Direction, Read};
    kv.scan(
        Cf::Index,
        &ankusa_keys::held_due_range(TENANT),
        Direction::Forward,
        10_000,
    )
    .unwrap()
    .len()
}

fn want(keys: &[&str], n: u64, key: &str) -> Vec<String> {
    (0..n)
        .filter(|i| keys[*i as usize % keys.len()] == key)
        .map(|i| format!("hook-{i}"))
        .collect()
}

/// A runtime pause of one sink: every hook is still committed, the other sink
/// of the same tenant delivers all of them (a backlog of 300 held rows in
/// front does not starve it), the paused sink gets nothing and its lane heads
/// are held (members stay); the gauge and the listing show the pause. A
/// resume delivers everything, in order per key; the store ends empty and
/// consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sink_waits_in_order_while_the_other_sink_delivers() {
    use ankusa_keys::meta::PauseTarget;
    let rec = Recorder::default();
    let relay = start_two(Arc::new(MemoryKv::new()), &rec, &[]);
    let target = PauseTarget::Sink(SOURCE, SinkIx(0));
    let st = relay
        .pipeline
        .pause(target, "endpoint migration")
        .await
        .unwrap();
    assert!(st.paused() && !st.by_config);
    assert_eq!(
        st.by_runtime.as_ref().map(|v| v.reason.as_str()),
        Some("endpoint migration")
    );
    assert!(relay.pipeline.sink_paused(SOURCE, SinkIx(0)));
    assert!(!relay.pipeline.sink_paused(SOURCE, SinkIx(1)));
    assert_eq!(relay.pipeline.paused_sinks.load(Ordering::Relaxed), 1);
    let keys = ["a", "b", "c"];
    // A backlog of unordered-sink rows held in front: 300 hooks.
    for n in 0..300 {
        ingest_two(&relay, n, keys[n as usize % 3]).await;
    }
    until("sink 1 delivered all 300", || {
        (rec.bodies(1).len() == 300).then_some(())
    })
    .await;
    until("the three lane heads held", || {
        (held_rows(&relay.kv) == 3).then_some(())
    })
    .await;
    until("sink 1's outcomes committed", || {
        (counter(&*relay.kv, TENANT, CounterField::Pending).unwrap() == 300).then_some(())
    })
    .await;
    assert!(
        rec.bodies(0).is_empty(),
        "a paused sink was called: {:?}",
        rec.bodies(0)
    );
    assert_eq!(
        counter(&*relay.kv, TENANT, CounterField::LaneMembers).unwrap(),
        297
    );
    assert_eq!(counter(&*relay.kv, TENANT, CounterField::Lanes).unwrap(), 3);
    assert_eq!(
        counter(&*relay.kv, TENANT, CounterField::Pending).unwrap(),
        300
    );
    assert_eq!(check_invariants(&*relay.kv).unwrap(), vec![]);
    assert_eq!(relay.pipeline.pauses(), vec![st.clone()]);
    // An unconfigured sink cannot be paused.
    assert_eq!(
        relay
            .pipeline
            .pause(PauseTarget::Sink(SOURCE, SinkIx(7)), "x")
            .await
            .unwrap_err(),
        ankusa_pipeline::ControlError::NotConfigured(PauseTarget::Sink(SOURCE, SinkIx(7)))
    );
    let st = relay.pipeline.resume(target).await.unwrap();
    assert!(!st.paused());
    until("sink 0 delivered all 300", || {
        (rec.bodies(0).len() == 300).then_some(())
    })
    .await;
    for k in keys {
        assert_eq!(rec.bodies_of_key(0, k), want(&keys, 300, k), "key {k}");
    }
    assert_eq!(relay.pipeline.paused_sinks.load(Ordering::Relaxed), 0);
    assert!(relay.pipeline.pauses().is_empty());
    let kv = stop(relay).await;
    assert_eq!(held_rows(&kv), 0);
    assert_eq!(
        counter(&*kv, TenantOrd::NODE, CounterField::Pending).unwrap(),
        0
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}

/// A configured pause of a whole source: nothing is delivered; a restart
/// without it delivers every hook in order per key. A runtime pause survives
/// a restart (it is in the store), and its resume then delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pauses_survive_restarts_and_a_restart_without_the_config_pause_resumes() {
    use ankusa_keys::meta::PauseTarget;
    let kv = Arc::new(MemoryKv::new());
    let rec = Recorder::default();
    let relay = start_two(Arc::clone(&kv), &rec, &[PauseTarget::Source(SOURCE)]);
    assert_eq!(relay.pipeline.paused_sinks.load(Ordering::Relaxed), 2);
    let keys = ["a", "b"];
    for n in 0..40 {
        ingest_two(&relay, n, keys[n as usize % 2]).await;
    }
    until("the heads and the unordered rows held", || {
        (held_rows(&kv) == 42).then_some(())
    })
    .await;
    // The resume of a configured pause is refused by the configuration.
    let st = relay
        .pipeline
        .resume(PauseTarget::Source(SOURCE))
        .await
        .unwrap();
    assert!(st.by_config && st.paused());
    assert!(rec.0.lock().unwrap().is_empty());
    let kv = stop(relay).await;
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);

    // Restart without the pause: everything goes out, in order per key.
    let relay = start_two(Arc::clone(&kv), &rec, &[]);
    until("both sinks delivered all 40", || {
        (rec.bodies(0).len() == 40 && rec.bodies(1).len() == 40).then_some(())
    })
    .await;
    for k in keys {
        assert_eq!(rec.bodies_of_key(0, k), want(&keys, 40, k), "key {k}");
    }
    // A runtime pause of sink 1, then a restart: still paused.
    relay
        .pipeline
        .pause(PauseTarget::Sink(SOURCE, SinkIx(1)), "maintenance")
        .await
        .unwrap();
    let kv = stop(relay).await;
    let rec2 = Recorder::default();
    let relay = start_two(Arc::clone(&kv), &rec2, &[]);
    until("ready", || {
        relay.pipeline.ready.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let p = relay.pipeline.pauses();
    assert_eq!(p.len(), 1);
    assert_eq!(
        (
            p[0].target,
            p[0].by_config,
            p[0].by_runtime.as_ref().map(|v| v.reason.clone())
        ),
        (
            PauseTarget::Sink(SOURCE, SinkIx(1)),
            false,
            Some("maintenance".to_owned())
        )
    );
    for n in 40..50 {
        ingest_two(&relay, n, "a").await;
    }
    until("sink 0 delivered the 10 new hooks", || {
        (rec2.bodies(0).len() == 10).then_some(())
    })
    .await;
    until("sink 1's rows held", || {
        (held_rows(&kv) == 10).then_some(())
    })
    .await;
    assert!(rec2.bodies(1).is_empty());
    relay
        .pipeline
        .resume(PauseTarget::Sink(SOURCE, SinkIx(1)))
        .await
        .unwrap();
    until("sink 1 delivered the 10 new hooks", || {
        (rec2.bodies(1).len() == 10).then_some(())
    })
    .await;
    let kv = stop(relay).await;
    assert_eq!(
        counter(&*kv, TenantOrd::NODE, CounterField::Pending).unwrap(),
        0
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}

// ---- retention (docs/design.md section 5, "Retention") ---------------------------------

/// A round deletes the envelopes and archive entries of delivered hooks
/// received before the cutoff, and keeps a quarantined hook, a pending one and
/// recent ones; the dedupe round expires records through the Writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_reclaims_delivered_hooks_and_expired_dedupe_records() {
    use ankusa_engine::{Cf, Direction, Read};
    use ankusa_keys::meta::PauseTarget;
    use ankusa_pipeline::retention::{RetentionConfig, dedupe_round, retention_round};
    use ankusa_queue::writer::QuarantineRequest;
    let kv = Arc::new(MemoryKv::new());
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .unwrap();
    let (batch, _) = ankusa_queue::register(&*kv, ["acme"], ["demo"]).unwrap();
    kv.write(batch, Durability::Sync).unwrap();
    let rec = Recorder::default();
    let relay = start_two(Arc::clone(&kv), &rec, &[]);
    for n in 0..20 {
        let mut req = request(n, None, false);
        req.rows = vec![NewRow {
            sink: SinkIx(1),
            lane: None,
        }];
        req.envelope.dedupe_key = Some(format!("evt_{n}").into_bytes());
        req.dedupe_ttl_ms = Some(1);
        relay.writer.ingest(req).await.unwrap();
        relay.pipeline.wake();
    }
    let q = request(99, None, false).envelope;
    let qseq = relay
        .writer
        .quarantine(QuarantineRequest {
            tenant: TENANT,
            envelope: q,
            reason: "review".into(),
        })
        .await
        .unwrap();
    until("20 delivered and settled", || {
        (counter(&*kv, TENANT, CounterField::DeliveredTotal).unwrap() == 20).then_some(())
    })
    .await;
    // One more, held by a pause: still pending when the round runs.
    relay
        .pipeline
        .pause(PauseTarget::Sink(SOURCE, SinkIx(1)), "x")
        .await
        .unwrap();
    let mut req = request(100, None, false);
    req.rows = vec![NewRow {
        sink: SinkIx(1),
        lane: None,
    }];
    relay.writer.ingest(req).await.unwrap();
    let hooks = |kv: &MemoryKv| {
        kv.scan(
            Cf::Hooks,
            &ankusa_keys::hooks_tenant_range(TENANT),
            Direction::Forward,
            1000,
        )
        .unwrap()
        .len()
    };
    let archive = |kv: &MemoryKv| {
        kv.scan(
            Cf::Archive,
            &ankusa_keys::archive_tenant_range(TENANT),
            Direction::Forward,
            1000,
        )
        .unwrap()
        .len()
    };
    assert_eq!((hooks(&kv), archive(&kv)), (22, 22));
    let cfg = RetentionConfig {
        page: 3,
        ..RetentionConfig::new(60_000, 1_000)
    };
    // Nothing is old enough yet.
    assert_eq!(
        retention_round(&kv, &cfg, now_ms(), || false)
            .await
            .unwrap(),
        0
    );
    let deleted = retention_round(&kv, &cfg, now_ms() + 120_000, || false)
        .await
        .unwrap();
    assert_eq!(deleted, 20);
    assert_eq!(
        (hooks(&kv), archive(&kv)),
        (2, 2),
        "the quarantined and the pending hook stay"
    );
    assert!(
        kv.get(Cf::Hooks, &ankusa_keys::hook_key(TENANT, qseq))
            .unwrap()
            .is_some()
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
    let expired = dedupe_round(&kv, &relay.writer, 4, || false).await.unwrap();
    assert_eq!(expired, 20, "every record had a 1 ms lifetime");
    assert!(
        kv.scan(
            Cf::Index,
            &ankusa_keys::tenant_range(ankusa_keys::Family::Dedupe, TENANT),
            Direction::Forward,
            10
        )
        .unwrap()
        .is_empty()
    );
    let kv = stop(relay).await;
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}
