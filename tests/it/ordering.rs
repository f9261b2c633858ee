//! Ordered lanes through the HTTP sink (ADR 0004 sections 1, 2, 4, 6, 7),
//! observed at a real HTTP endpoint.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, lane, until};

const JSON: (&str, &str) = ("content-type", "application/json");

fn body(i: usize, key: &str) -> String {
    format!("{{\"i\":{i},\"key\":\"{key}\"}}")
}

fn index_of(r: &crate::sink::Req) -> usize {
    r.json()["i"]
        .as_u64()
        .unwrap_or_else(|| panic!("request {} has no i: {:?}", r.n, r.json())) as usize
}

/// 100 hooks for one key, the head held until all are queued behind it, and a
/// 503 for hook 50: the endpoint sees 0..=50, 50 again (attempt 2, same
/// idempotency key), then 51..=99; never two requests of the lane at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_100_hooks_with_a_mid_stream_retry_arrive_in_order_one_at_a_time() {
    let failed = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&failed);
    let sink = Sink::start(move |r| match r.json()["i"].as_u64() {
        Some(0) => Reply::Hold,
        Some(50) if !f.swap(true, Ordering::SeqCst) => Reply::Status(503),
        _ => Reply::Status(200),
    })
    .await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
sources:
  - name: orders
    sinks:
      - {{type: http, url: '{}', timeout_ms: 10000, ordered: true, ordering_key: {{header: x-entity-id}}}}
",
            sink.url()
        ),
    ))
    .await;
    let mut ids = Vec::new();
    ids.push(
        relay
            .post(
                "/hooks/orders",
                &[JSON, ("x-entity-id", "order-7")],
                body(0, "order-7"),
            )
            .await
            .id(),
    );
    until(
        "the head at the sink",
        Duration::from_secs(60),
        async || (sink.open(&lane("default", "orders", "order-7")) == 1).then_some(()),
    )
    .await;
    for i in 1..100 {
        ids.push(
            relay
                .post(
                    "/hooks/orders",
                    &[JSON, ("x-entity-id", "order-7")],
                    body(i, "order-7"),
                )
                .await
                .id(),
        );
    }
    // Everything behind the held head waits in the lane, in the store.
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_dispatch_lane_members"], 99.0, "{m:?}");
    assert_eq!(m["ankusa_dispatch_lanes"], 1.0);
    assert_eq!(m["ankusa_dispatch_in_flight"], 1.0);
    assert_eq!(m["ankusa_queue_pending"], 100.0);
    assert_eq!(
        sink.requests().len(),
        1,
        "a member was sent beside the held head"
    );
    sink.release();

    let got = until("100 deliveries", Duration::from_secs(60), async || {
        let d = sink.delivered();
        (d.len() >= 100).then_some(sink.requests())
    })
    .await;
    let order: Vec<usize> = got.iter().map(index_of).collect();
    let mut want: Vec<usize> = (0..=50).collect();
    want.push(50);
    want.extend(51..100);
    assert_eq!(order, want, "arrival order at the endpoint");
    for (r, i) in got.iter().zip(&want) {
        assert_eq!(
            r.id(),
            ids[*i],
            "request {} (hook {i}): idempotency key",
            r.n
        );
        assert_eq!(
            r.key().as_deref(),
            Some("order-7"),
            "request {}: x-ankusa-ordering-key",
            r.n
        );
        assert_eq!(r.header_count("x-ankusa-ordering-key"), 1);
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json")
        );
    }
    assert_eq!(got[51].attempt(), 2, "the retried hook's second attempt");
    assert_eq!(got[50].attempt(), 1);
    assert_eq!(sink.answer_of(got[50].n), Some(503));
    assert_eq!(
        sink.max_open()[&lane("default", "orders", "order-7")],
        1,
        "two requests of one lane were open at once"
    );
    let m = until("the lane drained", Duration::from_secs(60), async || {
        let m = relay.metrics().await;
        (m["ankusa_dispatch_lanes"] == 0.0).then_some(m)
    })
    .await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 100.0);
    assert_eq!(m["ankusa_dispatch_retries_total"], 1.0);
    assert_eq!(m["ankusa_dispatch_lane_members"], 0.0);
    assert_eq!(m["ankusa_queue_pending"], 0.0);
    assert_eq!(
        m.get("ankusa_dispatch_lane_key_missing_total")
            .copied()
            .unwrap_or(0.0),
        0.0,
        "no sink has a keyless row yet"
    );
}

fn two_tenants(sink: &Sink, timeout_ms: u64, dispatch: &str) -> String {
    config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20, retry_after_max_ms: 60000}}
dispatch: {{{dispatch}}}
tenants: [{{name: default}}, {{name: other}}]
sources:
  - name: a
    sinks: [{{type: http, url: '{url}', timeout_ms: {timeout_ms}, ordered: true, ordering_key: {{header: x-entity-id}}}}]
  - name: b
    tenant: other
    sinks: [{{type: http, url: '{url}', timeout_ms: {timeout_ms}, ordered: true, ordering_key: {{header: x-entity-id}}}}]
",
            url = sink.url()
        ),
    )
}

fn is_slow_of_default(r: &crate::sink::Req) -> bool {
    r.key().as_deref() == Some("slow") && r.header("x-ankusa-tenant").as_deref() == Some("default")
}

/// The first attempt of the slow lane's first hook.
fn is_slow_head_first_try(r: &crate::sink::Req) -> bool {
    is_slow_of_default(r) && index_of(r) == 0 && r.attempt() == 1
}

/// The endpoint holds key "slow" of tenant default until the sink's timeout
/// (1.5 s): key "fast" of the same tenant and sink, and another tenant's hooks
/// (on a key also named "slow"), all arrive while it is held; then the slow
/// head is retried (same idempotency key) and its successor follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_key_delays_neither_another_key_nor_another_tenant() {
    let sink = Sink::start(|r| {
        if is_slow_head_first_try(r) {
            Reply::Hold
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relay = Relay::start(&two_tenants(&sink, 1500, "sink_concurrency: 8")).await;
    let slow1 = relay
        .post(
            "/hooks/a",
            &[JSON, ("x-entity-id", "slow")],
            body(0, "slow"),
        )
        .await
        .id();
    let slow2 = relay
        .post(
            "/hooks/a",
            &[JSON, ("x-entity-id", "slow")],
            body(1, "slow"),
        )
        .await
        .id();
    until(
        "the slow head held at the sink",
        Duration::from_secs(60),
        async || (sink.open(&lane("default", "a", "slow")) == 1).then_some(()),
    )
    .await;

    let mut fast = Vec::new();
    for i in 0..10 {
        fast.push(
            relay
                .post(
                    "/hooks/a",
                    &[JSON, ("x-entity-id", "fast")],
                    body(i, "fast"),
                )
                .await
                .id(),
        );
    }
    let mut other = Vec::new();
    for i in 0..5 {
        other.push(
            relay
                .post(
                    "/hooks/b",
                    &[JSON, ("x-entity-id", "slow")],
                    body(i, "slow"),
                )
                .await
                .id(),
        );
    }
    let delivered = until(
        "fast and other-tenant hooks",
        Duration::from_secs(60),
        async || {
            let d = sink.delivered();
            (d.len() >= 15).then_some(d)
        },
    )
    .await;
    // All of them while the slow head's first attempt was still open.
    let reqs = sink.requests();
    let slow: Vec<_> = reqs.iter().filter(|r| is_slow_of_default(r)).collect();
    assert_eq!(
        slow.len(),
        1,
        "the slow lane sent more than its held head: {slow:?}"
    );
    assert_eq!(
        sink.open(&lane("default", "a", "slow")),
        1,
        "the held head was given up before the other hooks arrived"
    );
    let ids: Vec<String> = delivered
        .iter()
        .filter(|r| r.header("x-ankusa-tenant").as_deref() == Some("default"))
        .map(|r| r.id())
        .collect();
    assert_eq!(ids, fast, "key fast: order");
    let ids: Vec<String> = delivered
        .iter()
        .filter(|r| r.header("x-ankusa-tenant").as_deref() == Some("other"))
        .map(|r| r.id())
        .collect();
    assert_eq!(ids, other, "tenant other, key slow: order");
    for r in delivered
        .iter()
        .filter(|r| r.header("x-ankusa-tenant").as_deref() == Some("other"))
    {
        assert_eq!(r.key().as_deref(), Some("slow"));
        assert_eq!(r.header("x-ankusa-source").as_deref(), Some("b"));
    }

    // The relay gives up on the held request at its timeout and retries it.
    let slow = until("the slow lane done", Duration::from_secs(60), async || {
        let s: Vec<_> = sink
            .delivered()
            .into_iter()
            .filter(is_slow_of_default)
            .collect();
        (s.len() >= 2).then_some(s)
    })
    .await;
    let all_slow: Vec<_> = sink
        .requests()
        .into_iter()
        .filter(is_slow_of_default)
        .collect();
    let seen: Vec<(String, u32)> = all_slow.iter().map(|r| (r.id(), r.attempt())).collect();
    assert_eq!(
        seen,
        [(slow1.clone(), 1), (slow1.clone(), 2), (slow2.clone(), 1)],
        "slow lane: head, its retry, its successor"
    );
    assert_eq!(
        slow.iter().map(|r| r.id()).collect::<Vec<_>>(),
        [slow1, slow2]
    );
    let retry_at = all_slow[1].at.duration_since(all_slow[0].at);
    assert!(
        retry_at >= Duration::from_millis(1400),
        "retried {retry_at:?} after the first attempt, before the 1.5 s timeout"
    );
    let last_other = delivered.iter().map(|r| r.n).max().expect("deliveries");
    assert!(
        last_other < all_slow[1].n,
        "another key waited for the slow key's retry"
    );
    // One request of a lane at a time. The slow lane's first attempt is
    // the exception the receiver can see: the relay gave it up at its
    // timeout and closed the connection, but on a busy machine the receiver
    // may notice the close only after the retry arrived. Its order is the
    // attempt sequence and the retry time checked above.
    let slow_lane = lane("default", "a", "slow");
    let open = sink.max_open();
    assert!(
        open.iter()
            .filter(|(l, _)| **l != slow_lane)
            .all(|(_, m)| *m == 1),
        "two requests of one lane at once: {open:?}"
    );
    assert!(
        relay.log().contains("timed out after 1500 ms"),
        "{}",
        relay.log()
    );
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_dispatch_retries_total"], 1.0);
}

/// With one call at a time per (tenant, sink) and an admission window of one
/// claimed row for the node, a slow head waiting out its Retry-After holds no
/// slot and no window room: hooks of another key go through meanwhile, and
/// `ankusa_dispatch_lanes_blocked` shows the waiting lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retrying_lane_holds_no_slot_between_attempts() {
    let sink = Sink::start(|r| {
        if is_slow_head_first_try(r) {
            Reply::RetryAfter(503, "2")
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relay = Relay::start(&two_tenants(
        &sink,
        10_000,
        "sink_concurrency: 1, admission_window: 1",
    ))
    .await;
    let slow1 = relay
        .post(
            "/hooks/a",
            &[JSON, ("x-entity-id", "slow")],
            body(0, "slow"),
        )
        .await
        .id();
    let slow2 = relay
        .post(
            "/hooks/a",
            &[JSON, ("x-entity-id", "slow")],
            body(1, "slow"),
        )
        .await
        .id();
    until(
        "the slow head blocked",
        Duration::from_secs(60),
        async || (relay.metrics().await["ankusa_dispatch_lanes_blocked"] == 1.0).then_some(()),
    )
    .await;
    let mut fast = Vec::new();
    for i in 0..5 {
        fast.push(
            relay
                .post(
                    "/hooks/a",
                    &[JSON, ("x-entity-id", "fast")],
                    body(i, "fast"),
                )
                .await
                .id(),
        );
    }
    let got = until(
        "the fast key's hooks",
        Duration::from_secs(60),
        async || {
            let d: Vec<_> = sink
                .delivered()
                .into_iter()
                .filter(|r| r.key().as_deref() == Some("fast"))
                .collect();
            (d.len() >= 5).then_some(d)
        },
    )
    .await;
    assert_eq!(got.iter().map(|r| r.id()).collect::<Vec<_>>(), fast);
    let slow: Vec<_> = sink
        .requests()
        .into_iter()
        .filter(is_slow_of_default)
        .collect();
    assert_eq!(
        slow.len(),
        1,
        "the slow head was retried before its Retry-After: {slow:?}"
    );
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_dispatch_lanes_blocked"], 1.0);
    assert_eq!(
        m["ankusa_dispatch_lane_members"], 1.0,
        "slow2 waits behind its head"
    );

    let slow = until("the slow lane done", Duration::from_secs(60), async || {
        let s: Vec<_> = sink
            .requests()
            .into_iter()
            .filter(is_slow_of_default)
            .collect();
        (s.len() >= 3 && sink.delivered().len() >= 7).then_some(s)
    })
    .await;
    let seen: Vec<(String, u32)> = slow.iter().map(|r| (r.id(), r.attempt())).collect();
    assert_eq!(seen, [(slow1.clone(), 1), (slow1, 2), (slow2, 1)]);
    let waited = slow[1].at.duration_since(slow[0].at);
    assert!(
        waited >= Duration::from_millis(1900),
        "Retry-After: 2 not honoured: retried after {waited:?}"
    );
    // The sink has answered; the relay commits the outcome within its flush
    // interval.
    let m = until(
        "the last outcome committed",
        Duration::from_secs(60),
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_delivered_total"] == 7.0).then_some(m)
        },
    )
    .await;
    assert_eq!(m["ankusa_dispatch_lanes_blocked"], 0.0);
}

/// An ordered sink's hooks with no key (header missing or empty, or no
/// ordering_key at all) share the keyless lane, sent with
/// `x-ankusa-ordering-key: <tenant>/<source>`, in commit order, and
/// `ankusa_dispatch_lane_key_missing_total` counts each such row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keyless_lane_and_its_key() {
    let sink = Sink::ok().await;
    // fjall: the pure-Rust store, end to end.
    let relay = Relay::start(&config(
        "fjall",
        &format!(
            "
tenants: [{{name: acme}}]
sources:
  - name: kl
    tenant: acme
    sinks:
      - {{type: http, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}}}
      - {{type: http, url: '{url}2', ordered: true}}
",
            url = sink.url()
        ),
    ))
    .await;
    // (header value, posted id)
    let sends: [Option<&str>; 7] = [None, Some("k"), Some(""), None, Some("k"), Some(""), None];
    let mut ids = Vec::new();
    for (i, h) in sends.iter().enumerate() {
        let mut headers = vec![JSON];
        if let Some(v) = h {
            headers.push(("x-entity-id", v));
        }
        ids.push(relay.post("/hooks/kl", &headers, body(i, "")).await.id());
    }
    let got = until("14 deliveries", Duration::from_secs(60), async || {
        let d = sink.delivered();
        (d.len() >= 14).then_some(d)
    })
    .await;
    assert_eq!(got.len(), 14);
    let first: Vec<_> = got.iter().filter(|r| r.path == "/in").collect();
    let keyless: Vec<String> = first
        .iter()
        .filter(|r| r.key().as_deref() == Some("acme/kl"))
        .map(|r| r.id())
        .collect();
    let want: Vec<String> = sends
        .iter()
        .zip(&ids)
        .filter(|(h, _)| h.is_none_or(str::is_empty))
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(
        keyless, want,
        "keyless lane (header missing or empty): its members in commit order"
    );
    let keyed: Vec<String> = first
        .iter()
        .filter(|r| r.key().as_deref() == Some("k"))
        .map(|r| r.id())
        .collect();
    assert_eq!(keyed, [ids[1].clone(), ids[4].clone()]);
    assert_eq!(
        keyless.len() + keyed.len(),
        7,
        "unexpected ordering keys: {first:?}"
    );
    let second: Vec<_> = got.iter().filter(|r| r.path == "/in2").collect();
    assert!(
        second.iter().all(|r| r.key().as_deref() == Some("acme/kl")),
        "ordered without ordering_key: the keyless lane"
    );
    assert_eq!(
        second.iter().map(|r| r.id()).collect::<Vec<_>>(),
        ids,
        "keyless lane of the second sink: commit order"
    );
    assert_eq!(
        relay.metric("ankusa_dispatch_lane_key_missing_total").await,
        12.0,
        "5 keyless rows of sink 0 + 7 of sink 1"
    );
    assert_eq!(
        relay
            .metric("ankusa_dispatch_lane_key_missing_total{sink=\"http\"}")
            .await,
        12.0,
        "labelled by the sink kind only"
    );
}

/// A lane's head that is dead-lettered (a permanent 400, or a 503 past the
/// retry horizon) releases its lane: the next hook of the key goes ahead
/// (ADR 0004 4.4: a poison hook must not hold its key forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_head_releases_its_lane() {
    let sink = Sink::start(|r| match (r.key().as_deref(), index_of(r)) {
        (Some("poison"), 0) => Reply::Status(400),
        (Some("down"), 0) => Reply::Status(503),
        _ => Reply::Status(200),
    })
    .await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 20, max_ms: 50, max_elapsed_ms: 400}}
breaker: {{failures: 1000}}
sources:
  - name: s
    sinks: [{{type: http, url: '{}', ordered: true, ordering_key: {{header: x-entity-id}}}}]
",
            sink.url()
        ),
    ))
    .await;
    let mut ids = std::collections::HashMap::new();
    for key in ["poison", "down"] {
        for i in 0..3 {
            ids.insert(
                (key.to_owned(), i),
                relay
                    .post("/hooks/s", &[JSON, ("x-entity-id", key)], body(i, key))
                    .await
                    .id(),
            );
        }
    }
    let m = until(
        "both heads dead-lettered and their lanes drained",
        Duration::from_secs(60),
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dlq_dead"] == 2.0 && m["ankusa_queue_pending"] == 0.0).then_some(m)
        },
    )
    .await;
    assert_eq!(m["ankusa_dispatch_dead_lettered_total"], 2.0);
    assert_eq!(m["ankusa_dispatch_delivered_total"], 4.0);
    assert_eq!(m["ankusa_dispatch_lanes"], 0.0);
    let reqs = sink.requests();
    let poison: Vec<(usize, u32)> = reqs
        .iter()
        .filter(|r| r.key().as_deref() == Some("poison"))
        .map(|r| (index_of(r), r.attempt()))
        .collect();
    assert_eq!(
        poison,
        [(0, 1), (1, 1), (2, 1)],
        "a permanent failure is not retried; the lane goes on"
    );
    let down: Vec<usize> = reqs
        .iter()
        .filter(|r| r.key().as_deref() == Some("down"))
        .map(index_of)
        .collect();
    let tries = down.iter().take_while(|i| **i == 0).count();
    // How many attempts fit in the horizon depends on the machine's load;
    // that the head was attempted, and that nothing of its lane went before
    // it was dead-lettered, does not.
    assert!(tries >= 1, "the 503 head was attempted first: {down:?}");
    assert_eq!(
        &down[tries..],
        [1, 2],
        "after the horizon the lane goes on: {down:?}"
    );
    let first = reqs
        .iter()
        .find(|r| r.key().as_deref() == Some("down"))
        .expect("down head");
    let last = reqs
        .iter()
        .rev()
        .find(|r| r.key().as_deref() == Some("down") && index_of(r) == 0)
        .expect("down head");
    // The relay starts no attempt past the horizon, measured from the first
    // attempt's claim; what the sink sees adds the time from claim to arrival
    // of each request, which differs by a few ms between attempts.
    // A generous margin: on a loaded machine the time from claim to arrival
    // varies by far more than a few ms; a relay that ignored the horizon would
    // retry for ever (the wait above would time out).
    let span = last.at.duration_since(first.at);
    assert!(
        span <= Duration::from_millis(400 + 5_000),
        "attempted {span:?} after the first attempt, far past the 400 ms horizon"
    );
    for r in reqs.iter().filter(|r| index_of(r) > 0) {
        assert_eq!(r.id(), ids[&(r.key().expect("key"), index_of(r))]);
    }
    let log = relay.log();
    assert!(log.contains("permanent failure: dead-lettered"), "{log}");
    // The horizon is checked at the outcome and again at the claim; which of
    // the two finds it passed depends on timing, and both log this.
    assert!(log.contains("retry horizon passed"), "{log}");
}
