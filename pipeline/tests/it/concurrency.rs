//! Concurrency that fits the medium (docs/design.md section 5, "Concurrency"):
//! a sink whose client pipelines (`Sink::pipelined`) gets up to
//! `dispatch.pipelined_concurrency` calls in flight per (tenant, sink), each
//! lane still one call at a time; any other sink at most `sink_concurrency`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::{CounterField, SinkIx, TenantOrd};
use ankusa_pipeline::{
    BreakerPolicy, DispatchConfig, Pipeline, PipelineHandle, RetryPolicy, Route, Routes, counter,
};
use ankusa_queue::check_invariants;
use ankusa_queue::writer::{Writer, WriterConfig, WriterHandle};
use ankusa_sinks::{DeliveryCtx, Envelope as SinkEnvelope, Outcome, Sink};
use async_trait::async_trait;
use tokio::sync::watch;

use crate::support::{SOURCE, TENANT, request};

/// Holds every call until `open` turns true; counts calls in flight, overall
/// and per ordering key, and the most seen at once.
struct HoldSink {
    pipelined: bool,
    open: watch::Receiver<bool>,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    per_key: Mutex<(HashMap<Vec<u8>, u64>, u64)>,
    delivered: AtomicU64,
}

#[async_trait]
impl Sink for HoldSink {
    async fn deliver(&self, _: &SinkEnvelope, ctx: &DeliveryCtx) -> Outcome {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(n, Ordering::SeqCst);
        if let Some(k) = &ctx.ordering_key {
            let mut g = self.per_key.lock().unwrap();
            let c = g.0.entry(k.clone()).or_default();
            *c += 1;
            let c = *c;
            g.1 = g.1.max(c);
        }
        let mut open = self.open.clone();
        let _ = open.wait_for(|o| *o).await;
        if let Some(k) = &ctx.ordering_key {
            *self.per_key.lock().unwrap().0.get_mut(k).unwrap() -= 1;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.delivered.fetch_add(1, Ordering::SeqCst);
        Outcome::Ok
    }
    fn kind(&self) -> &'static str {
        "hold"
    }
    fn pipelined(&self) -> bool {
        self.pipelined
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

struct Run {
    kv: Arc<MemoryKv>,
    sink: Arc<HoldSink>,
    open: watch::Sender<bool>,
    writer: WriterHandle,
    pipeline: PipelineHandle,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn start(pipelined: bool) -> Run {
    let kv = Arc::new(MemoryKv::new());
    let (open, rx) = watch::channel(false);
    let sink = Arc::new(HoldSink {
        pipelined,
        open: rx,
        in_flight: AtomicU64::new(0),
        max_in_flight: AtomicU64::new(0),
        per_key: Mutex::new((HashMap::new(), 0)),
        delivered: AtomicU64::new(0),
    });
    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink: Arc::clone(&sink) as Arc<dyn Sink>,
            sink_name: "hold".into(),
            source_name: "demo".into(),
        },
    );
    routes.tenants.insert(TENANT, "acme".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    let (writer, writer_handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms).unwrap();
    let dispatch = DispatchConfig {
        sink_concurrency: 8,
        pipelined_concurrency: 256,
        idle_ms: 2,
        ..DispatchConfig::default()
    };
    let (pipeline, handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        RetryPolicy::default(),
        BreakerPolicy::default(),
        now_ms,
    );
    let tasks = vec![
        tokio::spawn(async move { writer.run().await.unwrap() }),
        tokio::spawn(async move { pipeline.run().await.unwrap() }),
    ];
    Run {
        kv,
        sink,
        open,
        writer: writer_handle,
        pipeline: handle,
        tasks,
    }
}

/// Waits (a generous 60 s) until `cond` holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn finish(run: Run, hooks: u64) {
    run.open.send(true).unwrap();
    let sink = Arc::clone(&run.sink);
    until("every hook is delivered", || {
        sink.delivered.load(Ordering::SeqCst) == hooks
    })
    .await;
    let kv = Arc::clone(&run.kv);
    until("the outcomes are committed", || {
        counter(&*kv, TenantOrd::NODE, CounterField::Pending).unwrap() == 0
    })
    .await;
    run.pipeline.shutdown();
    drop(run.writer);
    for t in run.tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(check_invariants(&*run.kv).unwrap(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelining_sink_gets_many_unordered_calls_at_once() {
    let run = start(true);
    for n in 0..100 {
        run.writer.ingest(request(n, None, false)).await.unwrap();
        run.pipeline.wake();
    }
    let sink = Arc::clone(&run.sink);
    until("all 100 calls are in flight at once", || {
        sink.in_flight.load(Ordering::SeqCst) == 100
    })
    .await;
    finish(run, 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelining_sink_gets_one_call_per_lane_for_many_lanes() {
    let run = start(true);
    // 20 lanes of 5 hooks each.
    for n in 0..100 {
        run.writer
            .ingest(request(n, Some(&format!("k{}", n % 20)), true))
            .await
            .unwrap();
        run.pipeline.wake();
    }
    let sink = Arc::clone(&run.sink);
    until("one call of each of the 20 lanes is in flight", || {
        sink.in_flight.load(Ordering::SeqCst) == 20
    })
    .await;
    let s = Arc::clone(&run.sink);
    finish(run, 100).await;
    assert_eq!(
        s.per_key.lock().unwrap().1,
        1,
        "a lane had two calls at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_other_sink_stays_at_sink_concurrency() {
    let run = start(false);
    for n in 0..40 {
        run.writer.ingest(request(n, None, false)).await.unwrap();
        run.pipeline.wake();
    }
    let sink = Arc::clone(&run.sink);
    until("8 calls are in flight", || {
        sink.in_flight.load(Ordering::SeqCst) == 8
    })
    .await;
    let s = Arc::clone(&run.sink);
    finish(run, 40).await;
    assert_eq!(
        s.max_in_flight.load(Ordering::SeqCst),
        8,
        "sink_concurrency is 8"
    );
}
