//! The attempt log through the running pipeline (docs/design.md section 3,
//! "The attempt log"): each attempt's time, duration, outcome and the
//! destination's answer reach the row's log in the outcome's batch; the
//! log's limits (`node.attempt_log`) apply; off, nothing is written.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Cf, Direction, Durability, Kv, Read};
use ankusa_keys::{AttemptRecord, CounterField, Family, Seq, SinkIx, tenant_range};
use ankusa_pipeline::{
    AttemptLogConfig, BreakerPolicy, DispatchConfig, Pipeline, PipelineHandle, RetryPolicy, Route,
    Routes, counter,
};
use ankusa_queue::writer::{Writer, WriterConfig, WriterHandle};
use ankusa_queue::{check_invariants, hook_attempts};
use ankusa_sinks::{Attempted, DeliveryCtx, Envelope as SinkEnvelope, Outcome, Response, Sink};
use async_trait::async_trait;

use crate::support::*;

/// Answers each call with the next of `answers` (the last one again when
/// they run out), after holding it `hold`; records the body limit the
/// pipeline asked for.
struct Answers {
    answers: Vec<Attempted>,
    calls: AtomicU32,
    hold: Duration,
    body_limits: Mutex<Vec<usize>>,
}

#[async_trait]
impl Sink for Answers {
    async fn deliver(&self, hook: &SinkEnvelope, ctx: &DeliveryCtx) -> Outcome {
        self.attempt(hook, ctx).await.outcome
    }
    async fn attempt(&self, _: &SinkEnvelope, ctx: &DeliveryCtx) -> Attempted {
        self.body_limits
            .lock()
            .unwrap()
            .push(ctx.response_body_max_bytes);
        tokio::time::sleep(self.hold).await;
        let n = self.calls.fetch_add(1, Ordering::SeqCst) as usize;
        self.answers[n.min(self.answers.len() - 1)].clone()
    }
    fn kind(&self) -> &'static str {
        "answers"
    }
}

fn http(status: u16, body: &str, outcome: Outcome) -> Attempted {
    Attempted {
        outcome,
        response: Some(Response {
            status,
            headers: vec![
                ("content-type".into(), b"text/plain".to_vec()),
                ("x-request-id".into(), format!("r{status}").into_bytes()),
            ],
            body: body.as_bytes().to_vec(),
            body_truncated: false,
        }),
    }
}

fn status(status: u16, body: &str) -> Attempted {
    http(
        status,
        body,
        Outcome::HttpStatus {
            status,
            reason: format!("HTTP {status}: {body}"),
            after: None,
        },
    )
}

/// A running Writer and pipeline; dropped, both are stopped.
struct Running {
    kv: Arc<MemoryKv>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _handles: (WriterHandle, PipelineHandle),
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The Writer and a pipeline over a new store with one sink answering
/// `sink`, keeping the log as `log` says; hook 1 ingested.
async fn one_hook(sink: Arc<Answers>, log: AttemptLogConfig) -> Running {
    let kv = Arc::new(MemoryKv::new());
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .unwrap();
    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink,
            sink_name: "out".into(),
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
        idle_ms: 2,
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
    let pipeline = pipeline.attempt_log(log);
    let tasks = vec![
        tokio::spawn(async move { writer.run().await.unwrap() }),
        tokio::spawn(async move { pipeline.run().await.unwrap() }),
    ];
    writer_handle.ingest(request(1, None, false)).await.unwrap();
    handle.wake();
    Running {
        kv,
        tasks,
        _handles: (writer_handle, handle),
    }
}

fn delivered(kv: &MemoryKv) -> i64 {
    counter(kv, TENANT, CounterField::DeliveredTotal).unwrap()
}

/// 503, 503, 200: three entries with their statuses, answers, times and
/// durations (each call held 20 ms), numbered 1 to 3, the last one
/// `delivered` after the row is gone; the invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_retries_then_a_delivery_leave_three_entries() {
    let sink = Arc::new(Answers {
        answers: vec![
            status(503, "busy 1"),
            status(503, "busy 2"),
            http(200, "{\"ok\":true}", Outcome::Ok),
        ],
        calls: AtomicU32::new(0),
        hold: Duration::from_millis(20),
        body_limits: Mutex::new(Vec::new()),
    });
    let before = now_ms();
    let run = one_hook(Arc::clone(&sink), AttemptLogConfig::default()).await;
    until("the hook delivered", || {
        (delivered(&run.kv) == 1).then_some(())
    })
    .await;
    let after = now_ms();
    let log = hook_attempts(&*run.kv, TENANT, Seq(1), 20).unwrap();
    let rows: Vec<SinkIx> = log.keys().copied().collect();
    assert_eq!(rows, vec![SinkIx(0)]);
    let entries = &log[&SinkIx(0)];
    type Seen<'a> = (u32, Option<u16>, &'a str, &'a [u8], Option<&'a str>);
    let seen: Vec<Seen<'_>> = entries
        .iter()
        .map(|(n, a)| {
            (
                *n,
                a.status,
                a.outcome.as_str(),
                a.body.as_slice(),
                a.error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                1,
                Some(503),
                "retry",
                &b"busy 1"[..],
                Some("HTTP 503: busy 1")
            ),
            (
                2,
                Some(503),
                "retry",
                &b"busy 2"[..],
                Some("HTTP 503: busy 2")
            ),
            (3, Some(200), "delivered", &b"{\"ok\":true}"[..], None),
        ]
    );
    for (n, a) in entries {
        assert!(a.duration_ms >= 20, "attempt {n}: {a:?}");
        assert!(
            (before..=after).contains(&a.at_ms),
            "attempt {n} at {} not within the test's {before}..={after}",
            a.at_ms
        );
        assert_eq!(
            a.headers[1],
            (
                b"x-request-id".to_vec(),
                format!("r{}", a.status.unwrap()).into_bytes()
            )
        );
        assert!(!a.body_truncated);
    }
    assert!(entries[0].1.at_ms <= entries[1].1.at_ms && entries[1].1.at_ms <= entries[2].1.at_ms);
    assert_eq!(*sink.body_limits.lock().unwrap(), vec![4096; 3]);
    assert!(check_invariants(&*run.kv).unwrap().is_empty());
    drop(run);
}

/// The configured limits apply: 2 attempts kept of 4, 5 bytes of each body
/// (marked truncated); a broker-like answer (no response) keeps its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_limits_apply() {
    let sink = Arc::new(Answers {
        answers: vec![
            status(500, "first answer"),
            Attempted::from(Outcome::Retry {
                reason: "broker said: queue full".into(),
                after: None,
            }),
            status(502, "third answer"),
            http(201, "created", Outcome::Ok),
        ],
        calls: AtomicU32::new(0),
        hold: Duration::ZERO,
        body_limits: Mutex::new(Vec::new()),
    });
    let log = AttemptLogConfig {
        enabled: true,
        max_attempts: 2,
        max_body_bytes: 5,
    };
    let run = one_hook(Arc::clone(&sink), log).await;
    until("the hook delivered", || {
        (delivered(&run.kv) == 1).then_some(())
    })
    .await;
    let entries = &hook_attempts(&*run.kv, TENANT, Seq(1), 20).unwrap()[&SinkIx(0)];
    let seen: Vec<(u32, Option<u16>, &[u8], bool)> = entries
        .iter()
        .map(|(n, a)| (*n, a.status, a.body.as_slice(), a.body_truncated))
        .collect();
    assert_eq!(
        seen,
        vec![
            (3, Some(502), &b"third"[..], true),
            (4, Some(201), &b"creat"[..], true)
        ]
    );
    assert_eq!(*sink.body_limits.lock().unwrap(), vec![5; 4]);
    drop(run);

    // The broker-like attempt, kept with a larger limit: no status, no
    // answer, its reason as the error.
    let sink = Arc::new(Answers {
        answers: vec![
            Attempted::from(Outcome::Retry {
                reason: "broker said: queue full".into(),
                after: None,
            }),
            Attempted::from(Outcome::Ok),
        ],
        calls: AtomicU32::new(0),
        hold: Duration::ZERO,
        body_limits: Mutex::new(Vec::new()),
    });
    let run = one_hook(sink, AttemptLogConfig::default()).await;
    until("the hook delivered", || {
        (delivered(&run.kv) == 1).then_some(())
    })
    .await;
    let entries = &hook_attempts(&*run.kv, TENANT, Seq(1), 20).unwrap()[&SinkIx(0)];
    let first: &AttemptRecord = &entries[0].1;
    assert_eq!(
        (
            first.outcome.as_str(),
            first.status,
            first.error.as_deref(),
            first.headers.len(),
            first.body.len()
        ),
        ("retry", None, Some("broker said: queue full"), 0, 0)
    );
    assert_eq!(entries[1].1.outcome, "delivered");
    drop(run);
}

/// Off, no attempt writes to the log, the row counts none, and the sinks
/// are asked for no body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_nothing_is_logged() {
    let sink = Arc::new(Answers {
        answers: vec![status(503, "busy"), http(200, "ok", Outcome::Ok)],
        calls: AtomicU32::new(0),
        hold: Duration::ZERO,
        body_limits: Mutex::new(Vec::new()),
    });
    let log = AttemptLogConfig {
        enabled: false,
        ..AttemptLogConfig::default()
    };
    let run = one_hook(Arc::clone(&sink), log).await;
    until("the hook delivered", || {
        (delivered(&run.kv) == 1).then_some(())
    })
    .await;
    let entries = run
        .kv
        .scan(
            Cf::Index,
            &tenant_range(Family::AttemptLog, TENANT),
            Direction::Forward,
            10,
        )
        .unwrap();
    assert!(entries.is_empty(), "{entries:?}");
    assert_eq!(*sink.body_limits.lock().unwrap(), vec![0; 2]);
    assert_eq!(
        counter(&*run.kv, TENANT, CounterField::RetriesTotal).unwrap(),
        1,
        "the retry happened"
    );
    drop(run);
}
