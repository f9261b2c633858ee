//! The largest retry horizon, breaker open time and Retry-After are
//! saturated, not overflowed: the pipeline keeps running.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::{CounterField, SinkIx};
use ankusa_pipeline::{
    BreakerPolicy, BreakerState, DispatchConfig, Pipeline, RetryPolicy, Route, Routes, counter,
};
use ankusa_queue::check_invariants;
use ankusa_queue::writer::{Writer, WriterConfig};
use ankusa_sinks::{DeliveryCtx, Envelope as SinkEnvelope, Outcome, Sink};
use async_trait::async_trait;

use crate::support::*;

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
