//! What the dispatch tests share: the Writer and the pipeline on the memory
//! engine ([`start`], [`start_two`]), a scripted sink ([`ScriptSink`]) and a
//! recording one ([`Recorder`]), and waits with a deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::{Envelope, SinkIx, SourceId, TenantOrd};
use ankusa_pipeline::{
    BreakerPolicy, DispatchConfig, Pipeline, PipelineHandle, RetryPolicy, Route, Routes,
};
use ankusa_queue::writer::{IngestRequest, Writer, WriterConfig, WriterHandle};
use ankusa_queue::{NewRow, lanes};
use ankusa_sinks::{DeliveryCtx, Envelope as SinkEnvelope, Outcome, Sink};
use async_trait::async_trait;

/// What the scripted sink saw and what it answers.
#[derive(Default)]
pub struct Script {
    /// (ordering key, body) of every call, in call order.
    pub calls: Vec<(Option<Vec<u8>>, Vec<u8>, u32)>,
    /// Bodies to answer Retry once.
    pub retry_once: Vec<Vec<u8>>,
    /// Bodies to answer Permanent.
    pub permanent: Vec<Vec<u8>>,
    /// Calls in flight per ordering key now, and the most ever seen.
    pub in_flight: HashMap<Vec<u8>, u32>,
    pub max_in_flight_per_key: u32,
}

pub struct ScriptSink {
    pub script: Arc<Mutex<Script>>,
    /// Calls whose ordering key is this wait until `release` is notified.
    pub slow_key: Option<Vec<u8>>,
    pub release: Arc<tokio::sync::Notify>,
    pub delivered: Arc<AtomicU64>,
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

pub const TENANT: TenantOrd = TenantOrd(1);
pub const SOURCE: SourceId = SourceId(1);

pub struct Relay {
    pub kv: Arc<MemoryKv>,
    pub writer: WriterHandle,
    pub pipeline: PipelineHandle,
    pub release: Arc<tokio::sync::Notify>,
    pub delivered: Arc<AtomicU64>,
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub fn start(kv: Arc<MemoryKv>, script: Arc<Mutex<Script>>, slow_key: Option<&str>) -> Relay {
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
    let (writer_handle, handle, tasks) = run(&kv, routes);
    Relay {
        kv,
        writer: writer_handle,
        pipeline: handle,
        release,
        delivered,
        tasks,
    }
}

/// The Writer and the pipeline over `kv` with `routes`, on the tests' quick
/// retry and dispatch settings, each running on its own task.
pub fn run(
    kv: &Arc<MemoryKv>,
    routes: Routes,
) -> (
    WriterHandle,
    PipelineHandle,
    Vec<tokio::task::JoinHandle<()>>,
) {
    run_fenced(kv, routes, None)
}

fn run_fenced(
    kv: &Arc<MemoryKv>,
    routes: Routes,
    fencing: Option<ankusa_pipeline::Fencing>,
) -> (
    WriterHandle,
    PipelineHandle,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let (writer, writer_handle) =
        Writer::new(Arc::clone(kv), WriterConfig::default(), now_ms).unwrap();
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
        Arc::clone(kv),
        routes,
        dispatch,
        retry,
        BreakerPolicy::default(),
        now_ms,
    );
    let pipeline = match fencing {
        Some(f) => pipeline.fencing(f),
        None => pipeline,
    };
    let tasks = vec![
        tokio::spawn(async move { writer.run().await.unwrap() }),
        tokio::spawn(async move { pipeline.run().await.unwrap() }),
    ];
    (writer_handle, handle, tasks)
}

/// Hook `n` of the test source (body `hook-<n>`), for sink 0, laned by `key`
/// when `ordered`.
pub fn request(n: u64, key: Option<&str>, ordered: bool) -> IngestRequest {
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

pub async fn ingest(relay: &Relay, n: u64, key: Option<&str>, ordered: bool) {
    relay.writer.ingest(request(n, key, ordered)).await.unwrap();
    relay.pipeline.wake();
}

/// Waits (a generous 60 s: a loaded machine is slow, never wrong) until `n`
/// hooks were delivered.
pub async fn wait_delivered(relay: &Relay, n: u64) {
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
pub async fn crash(relay: Relay, kv: &Arc<MemoryKv>) {
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

pub async fn stop(relay: Relay) -> Arc<MemoryKv> {
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

pub fn bodies_for(script: &Script, key: &str) -> Vec<String> {
    script
        .calls
        .iter()
        .filter(|(k, _, _)| k.as_deref() == Some(key.as_bytes()))
        .map(|(_, b, _)| String::from_utf8(b.clone()).unwrap())
        .collect()
}

/// One call: (sink index, ordering key, body).
pub type Call = (u16, Option<Vec<u8>>, String);

/// A sink that records every call and answers Ok.
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<Call>>>);

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
    pub fn bodies(&self, sink: u16) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _, _)| *s == sink)
            .map(|(_, _, b)| b.clone())
            .collect()
    }
    pub fn bodies_of_key(&self, sink: u16, key: &str) -> Vec<String> {
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
pub fn start_two(
    kv: Arc<MemoryKv>,
    rec: &Recorder,
    paused: &[ankusa_keys::meta::PauseTarget],
) -> Relay {
    start_two_fenced(kv, rec, paused, None)
}

/// [`start_two`] with a cluster's fencing ([`Pipeline::fencing`]); sink 0
/// is an ordered entry.
pub fn start_two_fenced(
    kv: Arc<MemoryKv>,
    rec: &Recorder,
    paused: &[ankusa_keys::meta::PauseTarget],
    fencing: Option<ankusa_pipeline::Fencing>,
) -> Relay {
    let mut routes = Routes::default();
    routes.ordered.insert((SOURCE, SinkIx(0)));
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
    let (writer_handle, handle, tasks) = run_fenced(&kv, routes, fencing);
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
pub async fn ingest_two(relay: &Relay, n: u64, key: &str) {
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

pub async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..12_000 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out after 60 s waiting for {what}");
}

pub fn held_rows(kv: &MemoryKv) -> usize {
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

pub fn want(keys: &[&str], n: u64, key: &str) -> Vec<String> {
    (0..n)
        .filter(|i| keys[*i as usize % keys.len()] == key)
        .map(|i| format!("hook-{i}"))
        .collect()
}
