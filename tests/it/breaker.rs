//! Regression test (found by this suite, fixed in pipeline/src/lib.rs): once
//! the breaker's `open_ms` has passed, the pipeline sent every parked row again
//! (up to `sink_concurrency`) instead of one trial delivery (half-open); a
//! failed trial opens the breaker again, a successful one closes it.

use std::time::Duration;

use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_breaker_sends_one_trial() {
    let sink = Sink::start(|_| Reply::Status(500)).await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 2, open_ms: 1000}}
sources:
  - name: s
    sinks: [{{type: http, url: '{}'}}]
",
            sink.url()
        ),
    ))
    .await;
    for i in 0..10 {
        relay.post("/hooks/s", &[], format!("{{\"i\":{i}}}")).await.id();
    }
    // The breaker opens after the first two failures; wait past one open_ms.
    let reqs = until("the first reopening", Duration::from_secs(5), async || {
        let r = sink.requests();
        let t0 = r.first()?.at;
        r.iter().any(|x| x.at.duration_since(t0) > Duration::from_millis(1500)).then_some(r)
    })
    .await;
    let t0 = reqs[0].at;
    let in_first_half_open: Vec<_> = reqs
        .iter()
        .filter(|r| (Duration::from_millis(900)..Duration::from_millis(1500)).contains(&r.at.duration_since(t0)))
        .map(|r| r.json()["i"].clone())
        .collect();
    assert_eq!(in_first_half_open.len(), 1, "half-open sent {in_first_half_open:?}");
}
