//! Regression test (found by this suite, fixed in pipeline/src/lib.rs): a sink
//! at its `sink_concurrency` with at least `dispatch.batch` due rows starved
//! every other sink of the same tenant, because `Pipeline::visit` read only the
//! first `dispatch.batch` due entries. A visit now reads on past a saturated
//! sink's rows (up to 8 pages), and (second test, found by a break-it pass of
//! the broker and cloud sinks: a 2 s Pub/Sub endpoint held a Redis sink of the
//! same source to its pace once its backlog passed 512 rows) the next visit
//! goes on from where the last one stopped.

use std::time::Duration;

use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, until};

async fn slow_backlog_then_one_fast_hook(backlog: usize) {
    // /in (source slow) holds every request; /in2 (source fast) answers 200.
    let sink = Sink::start(|r| {
        if r.path == "/in" {
            Reply::Hold
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
sources:
  - name: slow
    sinks: [{{type: http, url: '{url}', timeout_ms: 30000}}]
  - name: fast
    sinks: [{{type: http, url: '{url}2', timeout_ms: 30000}}]
",
            url = sink.url()
        ),
    ))
    .await;
    // More due rows than dispatch.batch (64) for the slow sink, 8 of them in
    // flight (sink_concurrency) and held.
    for i in 0..backlog {
        relay
            .post("/hooks/slow", &[], format!("{{\"i\":{i}}}"))
            .await
            .id();
    }
    let id = relay.post("/hooks/fast", &[], "{}").await.id();
    let got = until(
        "the fast source's hook delivered",
        Duration::from_secs(60),
        async || sink.delivered().into_iter().find(|r| r.id() == id),
    )
    .await;
    assert_eq!(got.path, "/in2");
    sink.release();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sink_does_not_starve_another_sink_of_the_same_tenant() {
    slow_backlog_then_one_fast_hook(100).await;
}

/// 600 held rows in front: more than a visit reads (8 pages of 64), so only
/// the resume cursor of `Pipeline::visit` reaches the fast hook behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sink_backlog_longer_than_a_visit_does_not_starve_another_sink() {
    slow_backlog_then_one_fast_hook(600).await;
}
