//! What the pipeline does and reports for the relay's notifications
//! (docs/design.md section 5, "Notifications"), stepped by hand on a clock
//! the test moves: a sink entry whose every attempt fails for its
//! `auto_pause_after_ms` is paused (in `meta`, with its reason) and the
//! pause is reported; a breaker that opens and closes is reported once each;
//! dead letters are counted per sink entry, not reported one by one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::meta::PauseTarget;
use ankusa_queue::NewRow;
use ankusa_queue::writer::{Writer, WriterConfig};
use ankusa_sinks::Outcome;
use tokio::sync::oneshot;

use super::gate::{Answered, CLOCK_MS};
use super::{FAST, SOURCE, TENANT, request};
use crate::calls::Done;
use crate::dispatcher::Dispatcher;
use crate::handle::Control;
use crate::{
    BreakerPolicy, DispatchConfig, Pipeline, PipelineEvent, PipelineEvents, PipelineHandle,
    RetryPolicy, Route, Routes,
};

/// `hooks` hooks with one row each for FAST, committed; a dispatcher over
/// them whose clock is `clock`, with `auto_pause` on FAST when given.
async fn relay(
    hooks: u64,
    clock: &Arc<AtomicU64>,
    auto_pause: Option<u64>,
    breaker: BreakerPolicy,
) -> (Arc<MemoryKv>, Dispatcher<MemoryKv>, PipelineHandle) {
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let task = tokio::spawn(writer.run());
    for n in 0..hooks {
        let mut req = request(n);
        req.rows = vec![NewRow {
            sink: FAST,
            lane: None,
        }];
        handle.ingest(req).await.expect("ingest");
    }
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
    if let Some(ms) = auto_pause {
        routes.auto_pause.insert((SOURCE, FAST), ms);
    }
    let c = Arc::clone(clock);
    // Every retry 100 ms later; no horizon within the test.
    let retry = RetryPolicy {
        base_ms: 100,
        max_ms: 100,
        ..RetryPolicy::default()
    };
    let (pipeline, handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        retry,
        breaker,
        move || c.load(Ordering::SeqCst),
    );
    let mut d = pipeline.dispatcher;
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");
    (kv, d, handle)
}

/// One step at `at`: claims what is due and answers every call with
/// `outcome`, then commits the answers; how many calls there were.
fn attempt(d: &mut Dispatcher<MemoryKv>, clock: &AtomicU64, at: u64, outcome: &Outcome) -> usize {
    clock.store(at, Ordering::SeqCst);
    d.step(Vec::new(), Vec::new(), true).expect("step");
    let done: Vec<Done> = d
        .take_calls()
        .into_iter()
        .map(|c| c.finish(outcome.clone()))
        .collect();
    let n = done.len();
    d.step(Vec::new(), done, false).expect("commit");
    n
}

fn retry() -> Outcome {
    Outcome::Retry {
        reason: "HTTP 503 Service Unavailable".into(),
        after: None,
    }
}

/// The auto-pauses among `events`' reports.
fn auto_paused(events: &PipelineEvents) -> Vec<(PauseTarget, String)> {
    events
        .take()
        .0
        .into_iter()
        .filter_map(|e| match e {
            PipelineEvent::SinkAutoPaused {
                source,
                sink,
                reason,
                ..
            } => Some((PauseTarget::Sink(source, sink), reason)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_failing_every_attempt_for_its_auto_pause_after_ms_is_paused_until_resumed() {
    let clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let (kv, mut d, handle) = relay(3, &clock, Some(1_000), BreakerPolicy::default()).await;
    let target = PauseTarget::Sink(SOURCE, FAST);

    // Failing for 0 and then 600 ms: not yet.
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS, &retry()), 3);
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS + 600, &retry()), 3);
    assert!(handle.pauses().is_empty());
    let failing = handle.events.failing();
    assert_eq!(failing.len(), 1);
    assert_eq!(
        (failing[0].0, failing[0].1.since_ms, failing[0].1.attempts),
        ((SOURCE, FAST), CLOCK_MS, 6)
    );
    assert!(auto_paused(&handle.events).is_empty());

    // Failing for 1.2 s: paused, in the store too, with its reason.
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS + 1_200, &retry()), 3);
    let reason =
        "auto-paused: every attempt failed for 1 s (last error: HTTP 503 Service Unavailable)";
    assert_eq!(auto_paused(&handle.events), [(target, reason.to_owned())]);
    assert_eq!(handle.events.auto_paused_total(), 1);
    let pauses = handle.pauses();
    assert_eq!(pauses.len(), 1);
    assert_eq!(pauses[0].target, target);
    assert_eq!(
        pauses[0].by_runtime.as_ref().map(|p| p.reason.as_str()),
        Some(reason)
    );
    let stored = ankusa_queue::read_pauses(&*kv).expect("pauses");
    assert_eq!(stored[&target].reason, reason);
    assert_eq!(stored[&target].since_ms, CLOCK_MS + 1_200);
    // Its run ended with the pause.
    assert!(handle.events.failing().is_empty());

    // Paused: nothing is attempted, however long.
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS + 60_000, &retry()), 0);

    // A resume (the admin API's) lets the rows go again; they deliver.
    let (reply, answer) = oneshot::channel();
    clock.store(CLOCK_MS + 61_000, Ordering::SeqCst);
    d.step(
        vec![Control::SetPause {
            target,
            reason: None,
            reply,
        }],
        Vec::new(),
        false,
    )
    .expect("resume");
    assert!(!answer.await.expect("reply").expect("resumed").paused());
    let mut delivered = 0;
    for step in 0..10 {
        delivered += attempt(&mut d, &clock, CLOCK_MS + 61_000 + step, &Outcome::Ok);
    }
    assert_eq!(delivered, 3);
    assert!(handle.pauses().is_empty());
    assert!(auto_paused(&handle.events).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_ends_the_run_so_a_sink_that_sometimes_answers_is_never_paused() {
    let clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let (_kv, mut d, handle) = relay(4, &clock, Some(1_000), BreakerPolicy::default()).await;
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS, &retry()), 4);
    // One row delivered at 900 ms: the run ends.
    clock.store(CLOCK_MS + 900, Ordering::SeqCst);
    d.step(Vec::new(), Vec::new(), true).expect("step");
    let mut calls = d.take_calls().into_iter();
    let mut done = vec![calls.next().expect("a call").finish(Outcome::Ok)];
    done.extend(calls.map(|c| c.finish(retry())));
    d.step(Vec::new(), done, false).expect("commit");
    // Failing again from 900 ms: at 1.5 s it has failed for 600 ms only.
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS + 1_500, &retry()), 3);
    assert!(handle.pauses().is_empty());
    assert_eq!(handle.events.failing()[0].1.since_ms, CLOCK_MS + 900);
    // Without auto_pause_after_ms nothing is ever paused.
    let clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let (_kv, mut d, handle) = relay(1, &clock, None, BreakerPolicy::default()).await;
    for at in 0..20 {
        attempt(&mut d, &clock, CLOCK_MS + at * 1_000, &retry());
    }
    assert!(handle.pauses().is_empty());
    assert_eq!(handle.events.failing()[0].1.attempts, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_that_opens_and_closes_is_reported_once_each() {
    let clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let breaker = BreakerPolicy {
        failures: 2,
        distinct: 1,
        open_ms: 1_000,
    };
    let (_kv, mut d, handle) = relay(3, &clock, None, breaker).await;
    // Three failures open it (at the second).
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS, &retry()), 3);
    // Open: rows are parked; half-open at 1 s: one trial, which fails
    // (opens it again: not reported again).
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS + 500, &retry()), 0);
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS + 1_000, &retry()), 1);
    // The next trial delivers: closed, then the others deliver.
    assert_eq!(attempt(&mut d, &clock, CLOCK_MS + 2_000, &Outcome::Ok), 1);
    let mut more = 0;
    for step in 0..10 {
        more += attempt(&mut d, &clock, CLOCK_MS + 2_001 + step, &Outcome::Ok);
    }
    assert_eq!(more, 2);
    let (events, lost) = handle.events.take();
    assert_eq!(lost, 0);
    assert_eq!(
        events,
        [
            PipelineEvent::BreakerOpened {
                tenant: TENANT,
                source: SOURCE,
                sink: FAST,
                failures: 2,
                open_until_ms: CLOCK_MS + 1_000,
                last_error: "HTTP 503 Service Unavailable".into(),
                at_ms: CLOCK_MS,
            },
            PipelineEvent::BreakerClosed {
                tenant: TENANT,
                source: SOURCE,
                sink: FAST,
                at_ms: CLOCK_MS + 2_000,
            },
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_counted_per_sink_entry_with_samples() {
    let clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let (_kv, mut d, handle) = relay(30, &clock, None, BreakerPolicy::default()).await;
    let permanent = Outcome::Permanent {
        reason: "HTTP 400 Bad Request".into(),
    };
    let mut attempted = 0;
    for step in 0..10 {
        attempted += attempt(&mut d, &clock, CLOCK_MS + step, &permanent);
    }
    assert_eq!(attempted, 30);
    let tallies = handle.events.take_dead_letters();
    assert_eq!(tallies.len(), 1);
    let t = &tallies[&(TENANT, SOURCE, FAST)];
    assert_eq!(t.count, 30);
    assert_eq!(t.samples.len(), crate::DEAD_LETTER_SAMPLES_KEPT);
    assert_eq!(t.samples[0].1, "permanent: HTTP 400 Bad Request");
    // No breaker event: a permanent answer is an answer.
    assert!(handle.events.take().0.is_empty());
    // A 4xx for everything is a failing sink, too.
    assert_eq!(handle.events.failing()[0].1.attempts, 30);
}
