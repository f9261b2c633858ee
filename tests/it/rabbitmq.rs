//! The RabbitMQ sink through the relay: the Stripe corpus into one queue
//! through an ordered sink (taken back with basic.get), the broker stopped and
//! started under the relay (`rabbitmqctl stop_app` / `start_app`), and an
//! unroutable mandatory publish that dead-letters a lane's head and releases
//! the lane.
//!
//! The broker is the shared RabbitMQ at 127.0.0.1:5672 (guest/guest; `.ci/run`
//! starts it). `stop_app` stops it for every connection of this process, so
//! every test here holds [`BROKER`] for its whole run, and the restart test
//! starts the broker again from a guard's `Drop` even when it fails.

use std::process::Command;
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

use crate::peer::{drained, unique};
use crate::relay::{Relay, config};
use crate::sink::until;
use crate::stripe::{self, Received};

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Held by every test of this module: one of them stops the broker.
static BROKER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A channel on a new connection; fails the test when RabbitMQ is down.
async fn checker() -> (Connection, Channel) {
    let conn = match tokio::time::timeout(
        Duration::from_secs(10),
        Connection::connect(URL, ConnectionProperties::default()),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("RabbitMQ at {URL} is unreachable ({e}); `.ci/run` starts it"),
        Err(_) => panic!("RabbitMQ at {URL} did not answer within 10 s; `.ci/run` starts it"),
    };
    let ch = conn.create_channel().await.expect("channel");
    (conn, ch)
}

/// A fresh durable queue, removed by the broker 10 minutes after its last use
/// if the test does not get to delete it.
async fn queue(ch: &Channel, name: &str) {
    let mut args = FieldTable::default();
    args.insert("x-expires".into(), AMQPValue::LongUInt(600_000));
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        args,
    )
    .await
    .expect("queue.declare");
}

/// Takes every message of `queue` (until it is empty) as [`Received`]: the
/// body, the `ankusa_*` headers, and the properties as `message_id`,
/// `content_type` and `delivery_mode`.
async fn take_all(ch: &Channel, queue: &str) -> Vec<Received> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        let d = m.delivery;
        let mut r = Received {
            body: d.data.clone(),
            ..Received::default()
        };
        if let Some(headers) = d.properties.headers() {
            for (k, v) in headers.inner() {
                let AMQPValue::LongString(s) = v else {
                    panic!("header {k}: not a long string: {v:?}")
                };
                let text = String::from_utf8(s.as_bytes().to_vec())
                    .unwrap_or_else(|_| panic!("header {k}: not UTF-8"));
                r.attrs.insert(k.to_string(), text);
            }
        }
        if let Some(id) = d.properties.message_id() {
            r.attrs.insert("message_id".into(), id.to_string());
        }
        if let Some(ct) = d.properties.content_type() {
            r.attrs.insert("content_type".into(), ct.to_string());
        }
        if let Some(mode) = d.properties.delivery_mode() {
            r.attrs.insert("delivery_mode".into(), mode.to_string());
        }
        out.push(r);
    }
    out
}

/// The queue's message count (a passive declare).
async fn depth(ch: &Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("passive queue.declare")
    .message_count()
}

fn ordered_sink(exchange: &str, routing_key: &str) -> String {
    format!(
        "[{{type: rabbitmq, name: amqp, url: '{URL}', exchange: '{exchange}', routing_key: '{routing_key}', ordered: true, ordering_key: {{json: data.object.customer}}}}]"
    )
}

/// The checks of the AMQP properties every message carries.
fn check_properties(got: &[Received]) {
    let content_type = stripe::hooks(1)[0]
        .header("content-type")
        .expect("corpus content type")
        .to_owned();
    for (i, r) in got.iter().enumerate() {
        assert_eq!(
            r.attrs.get("message_id"),
            r.attrs.get("ankusa_idempotency_key"),
            "message {i}"
        );
        assert_eq!(
            r.attrs.get("content_type"),
            Some(&content_type),
            "message {i}"
        );
        assert_eq!(
            r.attrs.get("delivery_mode").map(String::as_str),
            Some("2"),
            "message {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_corpus_through_an_ordered_sink_arrives_once_in_order_per_customer() {
    let _broker = BROKER.lock().await;
    let (_conn, ch) = checker().await;
    let q = unique("stripe");
    queue(&ch, &q).await;
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 10, max_ms: 200}}\n{}",
            stripe::source_yaml(&ordered_sink("", &q))
        ),
    ))
    .await;
    let sent = stripe::send(&relay, &stripe::hooks(4)).await;
    assert_eq!(sent.len(), 40);
    let m = drained(&relay, Duration::from_secs(90)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 40.0);
    assert_eq!(
        m["ankusa_ingest_duplicates_total"], 4.0,
        "the provider retry of each round"
    );
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    // Confirmed means enqueued: all 40 are in the queue once the relay is done.
    assert_eq!(depth(&ch, &q).await, 40);
    let got = take_all(&ch, &q).await;
    ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("queue.delete");
    stripe::check(&sent, &got);
    check_properties(&got);
    let keys: std::collections::BTreeSet<&str> = got
        .iter()
        .map(|r| r.attrs["ankusa_ordering_key"].as_str())
        .collect();
    assert_eq!(
        keys.len(),
        4,
        "three customers and the keyless lane: {keys:?}"
    );
}

/// Runs `rabbitmqctl <args>`, panicking with its output when it fails.
fn rabbitmqctl(args: &[&str]) {
    let out = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run rabbitmqctl ({e}); `.ci/run` installs RabbitMQ"));
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stops the broker's application; its `Drop` starts it again (also when the
/// test fails), so no later test finds RabbitMQ down.
struct Stopped {
    running: bool,
}

impl Stopped {
    fn stop() -> Stopped {
        rabbitmqctl(&["stop_app"]);
        Stopped { running: false }
    }

    fn start(&mut self) {
        if !self.running {
            self.running = true;
            rabbitmqctl(&["start_app"]);
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.running {
            self.running = true;
            // Not `rabbitmqctl()`: no panic while a failed test unwinds.
            let _ = Command::new("rabbitmqctl").arg("start_app").status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_stopped_and_started_hooks_retry_and_arrive_in_order() {
    let _broker = BROKER.lock().await;
    let q = unique("restart");
    {
        let (_conn, ch) = checker().await;
        queue(&ch, &q).await;
    }
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 20, max_ms: 300}}\n{}",
            stripe::source_yaml(&ordered_sink("", &q))
        ),
    ))
    .await;

    // `stop_app` / `start_app`; the sink reconnects (the guard starts the
    // broker again if the test fails while it is stopped).
    let mut stopped: Option<Stopped> = None;
    let sent = stripe::down_then_back(&relay, "RabbitMQ", Duration::from_secs(90), async |up| {
        if up {
            stopped.as_mut().expect("stopped before").start();
        } else {
            stopped = Some(Stopped::stop());
        }
    })
    .await;

    let (_conn, ch) = until(
        "RabbitMQ accepting connections again",
        Duration::from_secs(60),
        async || {
            let conn = Connection::connect(URL, ConnectionProperties::default())
                .await
                .ok()?;
            let ch = conn.create_channel().await.ok()?;
            Some((conn, ch))
        },
    )
    .await;
    let got = take_all(&ch, &q).await;
    ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("queue.delete");
    // At-least-once: a publish whose confirm the stop swallowed is sent again.
    let repeats = stripe::check_at_least_once(&sent, &got);
    assert_eq!(got.len(), 40 + repeats);
    check_properties(&got);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_publish_dead_letters_the_head_and_releases_the_lane() {
    let _broker = BROKER.lock().await;
    let (_conn, ch) = checker().await;
    let x = unique("unroutable-x");
    let q = unique("unroutable-q");
    queue(&ch, &q).await;
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "retry: {{base_ms: 10, max_ms: 50}}\n{}",
            stripe::source_yaml(&ordered_sink(&x, "{tenant}.{ordering_key}"))
        ),
    ))
    .await;
    // No queue is bound for `default.cus_QXg1o8vcGmoR33`: the mandatory
    // publish comes back, permanent; bound, the lane's next hook arrives.
    let bind = async || {
        ch.queue_bind(
            q.as_str().into(),
            x.as_str().into(),
            "default.cus_QXg1o8vcGmoR33".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("queue.bind");
    };
    let read = async || {
        let got = take_all(&ch, &q).await;
        ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await
            .expect("queue.delete");
        ch.exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default())
            .await
            .expect("exchange.delete");
        got
    };
    let got = stripe::dead_lettered_head_releases_the_lane(&relay, "NO_ROUTE", bind, read).await;
    check_properties(&got);
}

/// Provider headers: GitHub and Shopify hooks through a sink with
/// `forward_headers`: each message's headers table carries the chosen provider
/// headers (lower-case names, the provider's values) beside the `ankusa_*`
/// metadata, and none of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_headers_chosen_arrive_in_the_headers_table() {
    use crate::provider;
    let _broker = BROKER.lock().await;
    let (_conn, ch) = checker().await;
    let q = unique("headers");
    queue(&ch, &q).await;
    let sink = format!(
        "{{type: rabbitmq, name: amqp, url: '{URL}', exchange: '', routing_key: '{q}', forward_headers: {}}}",
        provider::CHOSEN_YAML
    );
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "retry: {{base_ms: 10, max_ms: 200}}\n{}",
            provider::sources_yaml(&sink)
        ),
    ))
    .await;
    let sent = provider::send(&relay, &provider::FILES).await;
    let m = drained(&relay, Duration::from_secs(60)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 4.0, "{m:?}");
    assert_eq!(depth(&ch, &q).await, 4);
    let got = take_all(&ch, &q).await;
    ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("queue.delete");
    let by_id = provider::check(&sent, &got, &provider::CHOSEN);
    for s in &sent {
        let r = by_id[&s.id];
        assert_eq!(r.attrs.get("message_id"), Some(&s.id));
        assert_eq!(
            r.attrs.get("content_type").map(String::as_str),
            s.hook.header("content-type")
        );
    }
    assert_eq!(by_id[&sent[0].id].attrs["x-github-event"], "push");
    assert_eq!(
        by_id[&sent[3].id].attrs["x-shopify-shop-domain"],
        "corpus-test-shop.myshopify.com"
    );
    assert_eq!(
        m["ankusa_forwarded_headers_dropped_total{sink=\"rabbitmq\"}"],
        0.0
    );
}
