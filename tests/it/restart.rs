//! Restart after SIGKILL with busy lanes (ADR 0004 section 4.7): the
//! recovered heads go again first and every lane keeps its order. RocksDB
//! stores: the state must survive the process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::keyed::{body, label};
use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, lane, until};

const JSON: (&str, &str) = ("content-type", "application/json");

/// SIGKILL with lane A's head held open by the endpoint (A1, A2 behind it),
/// lane B's head waiting out a 503 + Retry-After (B1 behind it) and lane C
/// done; after a restart on the same store, A0 is delivered again with the
/// same idempotency key before A1, B0 is retried before B1, and every lane
/// keeps its order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_busy_lanes_then_restart_keeps_the_order() {
    let killed = Arc::new(AtomicBool::new(false));
    let k = Arc::clone(&killed);
    let sink = Sink::start(move |r| {
        let (key, i) = label(r);
        match (key.as_str(), i) {
            ("A", 0) if !k.load(Ordering::SeqCst) => Reply::Hold,
            ("B", 0) if r.attempt() == 1 => Reply::RetryAfter(503, "2"),
            _ => Reply::Status(200),
        }
    })
    .await;
    let mut relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20, retry_after_max_ms: 60000}}
sources:
  - name: s
    sinks: [{{type: http, url: '{}', timeout_ms: 30000, ordered: true, ordering_key: {{header: x-entity-id}}}}]
",
            sink.url()
        ),
    ))
    .await;
    let mut ids: BTreeMap<(String, u64), String> = BTreeMap::new();
    let mut send = async |key: &str, i: usize| {
        let id = relay
            .post("/hooks/s", &[JSON, ("x-entity-id", key)], body(key, i))
            .await
            .id();
        ids.insert((key.to_owned(), i as u64), id);
    };
    send("A", 0).await;
    send("B", 0).await;
    send("C", 0).await;
    until(
        "A0 held, B0 refused, C0 delivered",
        Duration::from_secs(60),
        async || {
            let b0 = sink
                .requests()
                .iter()
                .any(|r| label(r) == ("B".into(), 0) && sink.answer_of(r.n) == Some(503));
            let c0 = sink.delivered().iter().any(|r| label(r) == ("C".into(), 0));
            (sink.open(&lane("default", "s", "A")) == 1 && b0 && c0).then_some(())
        },
    )
    .await;
    send("A", 1).await;
    send("A", 2).await;
    send("B", 1).await;
    let m = until(
        "the lanes as expected before the kill",
        Duration::from_secs(60),
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_lanes_blocked"] == 1.0 && m["ankusa_dispatch_lane_members"] == 3.0)
                .then_some(m)
        },
    )
    .await;
    assert_eq!(m["ankusa_dispatch_lanes"], 2.0, "A and B have heads: {m:?}");
    assert_eq!(m["ankusa_dispatch_in_flight"], 1.0, "A0 is claimed");
    assert_eq!(m["ankusa_queue_pending"], 5.0);
    assert_eq!(
        sink.requests().len(),
        3,
        "a member went out beside its head"
    );

    relay.kill();
    killed.store(true, Ordering::SeqCst);
    relay.restart().await;

    let got = until(
        "every hook delivered after the restart",
        Duration::from_secs(60),
        async || {
            let d = sink.delivered();
            (d.len() >= 6).then_some(d)
        },
    )
    .await;
    assert_eq!(got.len(), 6, "{got:?}");
    let reqs = sink.requests();
    let per_key = |key: &str| -> Vec<(u64, String, Option<u16>)> {
        reqs.iter()
            .filter(|r| label(r).0 == key)
            .map(|r| (label(r).1, r.id(), sink.answer_of(r.n)))
            .collect()
    };
    let id = |k: &str, i: u64| ids[&(k.to_owned(), i)].clone();
    // A0's first request was never answered (the relay died holding it).
    assert_eq!(
        per_key("A"),
        [
            (0, id("A", 0), None),
            (0, id("A", 0), Some(200)),
            (1, id("A", 1), Some(200)),
            (2, id("A", 2), Some(200))
        ],
        "lane A: the claimed head again (same idempotency key) before its successors"
    );
    assert_eq!(
        per_key("B"),
        [
            (0, id("B", 0), Some(503)),
            (0, id("B", 0), Some(200)),
            (1, id("B", 1), Some(200))
        ],
        "lane B"
    );
    assert_eq!(
        per_key("C"),
        [(0, id("C", 0), Some(200))],
        "lane C: delivered once"
    );
    let a0_again = reqs
        .iter()
        .filter(|r| label(r) == ("A".into(), 0))
        .nth(1)
        .expect("A0 again");
    assert_eq!(
        a0_again.attempt(),
        1,
        "a recovered head goes back as a first attempt (ADR 0004 4.7)"
    );
    let b0_again = reqs
        .iter()
        .filter(|r| label(r) == ("B".into(), 0))
        .nth(1)
        .expect("B0 again");
    assert_eq!(b0_again.attempt(), 2);
    assert!(
        sink.max_open().values().all(|m| *m == 1),
        "{:?}",
        sink.max_open()
    );
    let m = until("the lanes drained", Duration::from_secs(60), async || {
        let m = relay.metrics().await;
        (m["ankusa_dispatch_lanes"] == 0.0).then_some(m)
    })
    .await;
    assert_eq!(m["ankusa_dispatch_lane_members"], 0.0);
    assert_eq!(m["ankusa_dispatch_lanes_blocked"], 0.0);
    assert_eq!(m["ankusa_queue_pending"], 0.0);
    assert_eq!(m["ankusa_dispatch_in_flight"], 0.0);
    assert_eq!(
        m["ankusa_dispatch_delivered_total"], 6.0,
        "the store's delivered total across both runs"
    );
    assert!(
        relay
            .log()
            .contains("recovered rows claimed by the previous run"),
        "{}",
        relay.log()
    );
}
