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
    let reqs = until("the first reopening", Duration::from_secs(60), async || {
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

/// Found by the Pub/Sub relay tests of issue 6: the half-open trial always
/// went to the same row (the earliest due: a failing lane head whose short
/// retry put it in front of the parked rows), so one lane whose head keeps
/// failing kept the breaker open and every other lane of the sink waited.
/// The next trial now goes to another due row when there is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_lane_head_does_not_take_every_half_open_trial() {
    let sink = Sink::start(|r| if r.key().as_deref() == Some("bad") { Reply::Status(503) } else { Reply::Status(200) }).await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 2, open_ms: 300}}
sources:
  - name: s
    sinks: [{{type: http, url: '{}', ordered: true, ordering_key: {{header: x-entity-id}}}}]
",
            sink.url()
        ),
    ))
    .await;
    // The bad lane's head fails alone until the breaker is open.
    relay.post("/hooks/s", &[("x-entity-id", "bad")], "{\"i\":0}").await.id();
    until("the breaker open", Duration::from_secs(60), async || {
        (sink.requests().len() >= 2 && relay.log().contains("breaker open for this sink")).then_some(())
    })
    .await;
    let good: Vec<String> = post_good_lane(&relay).await;
    let got = until("the good lane delivered while the bad head keeps failing", Duration::from_secs(60), async || {
        let ok: Vec<String> = sink.delivered().iter().map(|r| r.id()).collect();
        good.iter().all(|id| ok.contains(id)).then_some(ok)
    })
    .await;
    assert_eq!(got.len(), 3, "only the good lane's hooks succeed");
    // The good lane's outcomes committed; the bad lane is still there, its
    // head retrying (or in flight).
    let m = until("the good lane settled", Duration::from_secs(60), async || {
        let m = relay.metrics().await;
        (m["ankusa_dispatch_delivered_total"] == 3.0).then_some(m)
    })
    .await;
    assert_eq!((m["ankusa_dispatch_lanes"], m["ankusa_queue_pending"]), (1.0, 1.0), "{m:?}");
    assert_eq!(m["ankusa_dispatch_dead_lettered_total"], 0.0);
}

async fn post_good_lane(relay: &Relay) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 1..=3 {
        ids.push(relay.post("/hooks/s", &[("x-entity-id", "good")], format!("{{\"i\":{i}}}")).await.id());
    }
    ids
}
