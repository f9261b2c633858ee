//! The retry horizon: a retry reached after it is dead-lettered with the
//! horizon's reason, whichever path finds it.

use std::sync::Arc;

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::CounterField;
use ankusa_queue::writer::{Writer, WriterConfig};
use ankusa_queue::{NewRow, check_invariants};
use ankusa_sinks::Outcome;

use super::gate::{Answered, CLOCK_MS};
use super::{FAST, SOURCE, TENANT, request};
use crate::calls::Done;
use crate::{BreakerPolicy, DispatchConfig, Pipeline, RetryPolicy, Route, Routes, counter};

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
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");

    // The first attempt, at CLOCK_MS, fails: the retry is due 100 ms later.
    d.step(Vec::new(), Vec::new(), true).expect("step");
    let failed: Vec<Done> = d
        .take_calls()
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
    assert!(d.calls().is_empty(), "no attempt past the horizon");

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
