//! Dedupe at ingest: a provider retry (same event id) is a duplicate that
//! writes nothing, also when copies race the first; Stripe events out of
//! provider order keep their arrival order.

use std::time::Duration;

use crate::corpus::Hook;
use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, until};

const TEN_YEARS_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

fn event_id(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).expect("stripe body is JSON");
    v["id"].as_str().expect("event id").to_owned()
}

/// Stripe events posted in an order unlike their `created` times reach an
/// ordered sink (one lane per customer, `{json: data.object.customer}`) in
/// the order they were accepted; `invoice_paid_provider_retry` (same event id
/// as `invoice_paid`) answers 200 `"duplicate": true` with the first hook's
/// id, both while the first is still in flight and after it was delivered,
/// and is never delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_events_keep_arrival_order_and_a_provider_retry_writes_nothing() {
    // Every request is held until all events are in, so the lanes fill up.
    let sink = Sink::start(|_| Reply::Hold).await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
sources:
  - name: stripe
    verification: {{type: stripe, secrets: [whsec_corpus_test_secret_0001], tolerance_ms: {TEN_YEARS_MS}}}
    dedupe: {{json: id}}
    sinks:
      - {{type: http, url: '{}', ordered: true, ordering_key: {{json: data.object.customer}}}}
",
            sink.url()
        ),
    ))
    .await;
    // Customer cus_QXg1o8vcGmoR32's events, newest `created` first-ish, and
    // the events without a customer (keyless lane), also out of order.
    let customer = [
        "stripe/payment_intent_succeeded.json", // created 1721948660
        "stripe/invoice_paid.json",             // 1721948650
        "stripe/invoice_created.json",          // 1721948630
        "stripe/customer_subscription_created.json", // 1721948620
        "stripe/invoice_finalized.json",        // 1721948640
    ];
    let keyless = [
        "stripe/checkout_session_completed.json", // 1721948690
        "stripe/customer_updated.json",           // 1721948610
        "stripe/customer_created.json",           // 1721948600
        "stripe/charge_dispute_created.json",     // 1721948680
        "stripe/charge_succeeded_guest.json",     // 1721948670
    ];
    let mut posted = Vec::new();
    for (i, file) in customer
        .iter()
        .zip(keyless.iter())
        .flat_map(|(a, b)| [*a, *b])
        .enumerate()
    {
        let h = Hook::load(file);
        let a = relay
            .post("/hooks/stripe", &h.send_headers(), h.body.clone())
            .await;
        assert_eq!(a.status, 200, "{file}: {a:?}");
        assert!(a.body.get("duplicate").is_none(), "{file}: {a:?}");
        posted.push((file, event_id(&h.body), a.id()));
        if i == 0 {
            until(
                "the first event held at the sink",
                Duration::from_secs(60),
                async || (!sink.requests().is_empty()).then_some(()),
            )
            .await;
        }
    }
    let paid_id = posted
        .iter()
        .find(|(f, _, _)| *f == "stripe/invoice_paid.json")
        .expect("posted")
        .2
        .clone();
    let retry = Hook::load("stripe/invoice_paid_provider_retry.json");
    assert_eq!(
        event_id(&retry.body),
        posted
            .iter()
            .find(|(f, _, _)| *f == "stripe/invoice_paid.json")
            .expect("posted")
            .1
    );
    let a = relay
        .post("/hooks/stripe", &retry.send_headers(), retry.body.clone())
        .await;
    assert_eq!(
        (a.status, &a.body["id"], &a.body["duplicate"]),
        (200, &serde_json::json!(paid_id), &serde_json::json!(true)),
        "{a:?}"
    );
    let m = until(
        "both lane heads at the sink",
        Duration::from_secs(60),
        async || {
            if sink.requests().len() < 2 {
                return None;
            }
            Some(relay.metrics().await)
        },
    )
    .await;
    assert_eq!(m["ankusa_ingest_accepted_total"], 10.0);
    assert_eq!(m["ankusa_ingest_duplicates_total"], 1.0);
    assert_eq!(m["ankusa_queue_pending"], 10.0, "the retry added a row");
    assert_eq!(
        m["ankusa_dispatch_lane_members"], 8.0,
        "two heads out, eight behind them"
    );
    sink.release();

    let got = until("ten deliveries", Duration::from_secs(60), async || {
        let d = sink.delivered();
        (d.len() >= 10).then_some(d)
    })
    .await;
    let lane = |key: &str| -> Vec<String> {
        got.iter()
            .filter(|r| r.key().as_deref() == Some(key))
            .map(|r| event_id(&r.body))
            .collect()
    };
    let want = |files: &[&str]| -> Vec<String> {
        files
            .iter()
            .map(|f| event_id(&Hook::load(f).body))
            .collect()
    };
    assert_eq!(
        lane("cus_QXg1o8vcGmoR32"),
        want(&customer),
        "customer lane: arrival order, not `created` order"
    );
    assert_eq!(
        lane("default/stripe"),
        want(&keyless),
        "keyless lane: arrival order"
    );
    for r in &got {
        let (_, _, id) = posted
            .iter()
            .find(|(_, e, _)| *e == event_id(&r.body))
            .expect("a posted event");
        assert_eq!(&r.id(), id);
    }

    // The retry again, after the first was delivered: still a hit.
    let a = relay
        .post("/hooks/stripe", &retry.send_headers(), retry.body.clone())
        .await;
    assert_eq!(
        (a.status, &a.body["id"], &a.body["duplicate"]),
        (200, &serde_json::json!(paid_id), &serde_json::json!(true)),
        "{a:?}"
    );
    let m = until("the lanes drained", Duration::from_secs(60), async || {
        let m = relay.metrics().await;
        (m["ankusa_queue_pending"] == 0.0).then_some(m)
    })
    .await;
    assert_eq!(m["ankusa_ingest_accepted_total"], 10.0);
    assert_eq!(m["ankusa_ingest_duplicates_total"], 2.0);
    assert_eq!(m["ankusa_dispatch_delivered_total"], 10.0);
    assert_eq!(sink.requests().len(), 10, "a duplicate was delivered");
    assert_eq!(m["ankusa_dispatch_lane_key_missing_total"], 5.0);
}

/// Ten copies of one Stripe event posted at once (a provider retry racing
/// the first attempt): one is committed, the other nine answer 200
/// `"duplicate": true` with its id, one delivery; the keyless-lane counter
/// counts the one committed row only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_copies_of_one_event_commit_once() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
sources:
  - name: stripe
    verification: {{type: stripe, secrets: [whsec_corpus_test_secret_0001], tolerance_ms: {TEN_YEARS_MS}}}
    dedupe: {{json: id}}
    sinks:
      - {{type: http, url: '{}', ordered: true, ordering_key: {{json: data.object.customer}}}}
",
            sink.url()
        ),
    ))
    .await;
    let h = Hook::load("stripe/customer_created.json");
    let url = relay.url("/hooks/stripe");
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let h = h.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let client = crate::relay::client();
            crate::relay::post(&client, &url, &h.send_headers(), h.body.clone())
                .await
                .expect("post")
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("task"));
    }
    assert!(answers.iter().all(|a| a.status == 200), "{answers:?}");
    let firsts: Vec<_> = answers
        .iter()
        .filter(|a| a.body.get("duplicate").is_none())
        .collect();
    assert_eq!(firsts.len(), 1, "{answers:?}");
    let id = firsts[0].id();
    assert!(
        answers.iter().all(|a| a.body["id"] == id.as_str()),
        "{answers:?}"
    );
    let got = until("the delivery", Duration::from_secs(60), async || {
        sink.delivered().into_iter().next()
    })
    .await;
    assert_eq!(got.id(), id);
    let m = until("drained", Duration::from_secs(60), async || {
        let m = relay.metrics().await;
        (m["ankusa_queue_pending"] == 0.0).then_some(m)
    })
    .await;
    assert_eq!(m["ankusa_ingest_accepted_total"], 1.0);
    assert_eq!(m["ankusa_ingest_duplicates_total"], 9.0);
    assert_eq!(sink.requests().len(), 1);
    assert_eq!(
        m["ankusa_dispatch_lane_key_missing_total"], 1.0,
        "keyless rows counted that were never committed"
    );
}
