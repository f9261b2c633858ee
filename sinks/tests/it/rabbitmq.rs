//! The RabbitMQ sink against the real RabbitMQ at 127.0.0.1:5672 (guest/guest;
//! `.ci/run` starts it). These tests fail, not skip, when it is unreachable.
//!
//! Every test uses its own queues and exchanges (the process id, the time and
//! the test's name); queues are durable with `x-expires` (the broker removes
//! them ten minutes after their last use) and deleted at the end of a passing
//! test. Nothing here stops the broker: the restart test is the relay's
//! (tests/it/rabbitmq.rs at the root), which holds its own lock.

use std::sync::Arc;
use std::time::Duration;

use ::lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use ::lapin::types::{AMQPValue, FieldTable, LongString};
use ::lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use ankusa_sinks::rabbitmq::{RabbitMqSink, RabbitMqSinkConfig};
use ankusa_sinks::{DeliveryCtx, Options, Outcome, Sink, SinkError};
use serde_json::json;

use crate::{SHOPIFY_BODY, ctx, hook, ordered_ctx, sha256_hex};

const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// A name unique to this process, this moment and test.
fn name(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("ankusa-test.{}.{nanos}.{test}", std::process::id())
}

/// A channel of a checker connection, failing the test when RabbitMQ is not
/// reachable.
async fn checker() -> (Connection, Channel) {
    let conn = tokio::time::timeout(
        Duration::from_secs(10),
        Connection::connect(URL, ConnectionProperties::default()),
    )
    .await
    .unwrap_or_else(|_| panic!("RabbitMQ at {URL} did not answer (start it: .ci/run does)"))
    .unwrap_or_else(|e| panic!("RabbitMQ at {URL} is not reachable (start it: .ci/run does): {e}"));
    let channel = conn.create_channel().await.expect("channel");
    (conn, channel)
}

/// Declares a fresh durable queue that expires 10 minutes after its last use.
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

/// Takes exactly `n` messages from `queue` (waiting up to 10 s for them),
/// then checks that no further message is there.
async fn take(ch: &Channel, queue: &str, n: usize) -> Vec<::lapin::message::Delivery> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let got = ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get");
        match got {
            Some(m) => out.push(m.delivery),
            None => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{queue}: {} of {n} messages arrived",
                    out.len()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let extra = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get");
    assert!(extra.is_none(), "{queue}: more than {n} messages");
    out
}

async fn drop_queue(ch: &Channel, name: &str) {
    ch.queue_delete(name.into(), QueueDeleteOptions::default())
        .await
        .expect("queue.delete");
}

fn options(v: serde_json::Value) -> Options {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Options::new(),
    }
}

async fn sink(v: serde_json::Value) -> RabbitMqSink {
    let config = RabbitMqSinkConfig::from_options(&options(v)).expect("valid options");
    RabbitMqSink::new(&config).await.expect("sink")
}

/// The properties the sink must send for `ctx`, exactly.
fn expected(ctx: &DeliveryCtx) -> BasicProperties {
    let mut headers = FieldTable::default();
    let mut put = |k: &str, v: &str| {
        headers.insert(k.into(), AMQPValue::LongString(LongString::from(v)));
    };
    put("ankusa_message_version", "1");
    put(
        "ankusa_idempotency_key",
        "01932c4e-5f60-7abc-8def-0123456789ab",
    );
    put("ankusa_tenant", "acme");
    put("ankusa_source", "shopify");
    put("ankusa_received_at", "1764500000123");
    if let Some(key) = ctx.ordering_key_text() {
        put("ankusa_ordering_key", &key);
    }
    if ctx.ordered {
        // The lane position of `ordered_ctx` (ADR 0004 section 6).
        put("ankusa_lane_seq", "3");
    }
    let mut p = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id("01932c4e-5f60-7abc-8def-0123456789ab".into())
        .with_headers(headers);
    if let Some(ct) = &ctx.content_type {
        p = p.with_content_type(ct.as_str().into());
    }
    p
}

#[tokio::test]
async fn default_exchange_delivers_body_and_properties_exactly() {
    let (_conn, ch) = checker().await;
    let q = name("default");
    queue(&ch, &q).await;
    let s = sink(json!({"url": URL, "exchange": "", "routing_key": q})).await;
    assert_eq!(s.kind(), "rabbitmq");
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    assert_eq!(
        s.deliver(&hook(SHOPIFY_BODY), &ordered_ctx(b"cus_1")).await,
        Outcome::Ok
    );
    // Bytes that are not UTF-8, and an empty body, survive unchanged too; a
    // context without a content type falls back to the stored header, and a
    // hook with neither has none.
    let odd: Vec<u8> = (0..=255u8).rev().collect();
    let no_type = DeliveryCtx {
        content_type: None,
        ..ctx()
    };
    assert_eq!(s.deliver(&hook(&odd), &no_type).await, Outcome::Ok);
    let mut bare = hook(b"");
    bare.headers.clear();
    assert_eq!(s.deliver(&bare, &no_type).await, Outcome::Ok);

    let got = take(&ch, &q, 4).await;
    assert_eq!(sha256_hex(&got[0].data), crate::SHOPIFY_SHA256);
    assert_eq!(got[0].data, SHOPIFY_BODY);
    assert_eq!(got[0].properties, expected(&ctx()));
    assert_eq!(got[0].exchange.as_str(), "");
    assert_eq!(got[0].routing_key.as_str(), q);
    assert_eq!(got[1].data, SHOPIFY_BODY);
    assert_eq!(got[1].properties, expected(&ordered_ctx(b"cus_1")));
    assert_eq!(got[2].data, odd);
    assert_eq!(got[2].properties, expected(&ctx()));
    assert_eq!(got[3].data, b"");
    assert_eq!(got[3].properties, expected(&no_type));
    drop_queue(&ch, &q).await;
}

#[tokio::test]
async fn declared_direct_exchange_routes_by_the_template() {
    let (_conn, ch) = checker().await;
    let x = name("direct-x");
    let q = name("direct-q");
    queue(&ch, &q).await;
    let s = sink(json!({
        "url": URL, "exchange": x, "routing_key": "{tenant}.{source}.{ordering_key}",
        "declare": {"type": "direct", "durable": true}
    }))
    .await;
    // The first delivery declares the exchange; nothing is bound yet, so the
    // mandatory publish comes back: permanent, not a success.
    match s.deliver(&hook(b"{}"), &ordered_ctx(b"cus_1")).await {
        Outcome::Permanent { reason } => {
            assert!(reason.contains("312 NO_ROUTE"), "{reason}");
            assert!(reason.contains("acme.shopify.cus_1"), "{reason}");
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
    // It exists now, durable and direct (a passive declare of another kind
    // would fail; a same-kind, same-durability declare is accepted).
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("the sink declared a durable direct exchange");
    ch.queue_bind(
        q.as_str().into(),
        x.as_str().into(),
        "acme.shopify.cus_1".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.bind");
    for i in 0..20 {
        let body = format!("{{\"n\":{i}}}");
        assert_eq!(
            s.deliver(&hook(body.as_bytes()), &ordered_ctx(b"cus_1"))
                .await,
            Outcome::Ok
        );
    }
    assert_eq!(
        s.deliver(&hook(SHOPIFY_BODY), &ordered_ctx(b"cus_1")).await,
        Outcome::Ok
    );
    // Another lane's key routes elsewhere (unbound here): permanent.
    assert!(matches!(
        s.deliver(&hook(b"{}"), &ordered_ctx(b"cus_2")).await,
        Outcome::Permanent { .. }
    ));
    let got = take(&ch, &q, 21).await;
    for (i, m) in got.iter().take(20).enumerate() {
        assert_eq!(
            m.data,
            format!("{{\"n\":{i}}}").as_bytes(),
            "one lane keeps its order"
        );
        assert_eq!(m.routing_key.as_str(), "acme.shopify.cus_1");
    }
    assert_eq!(got[20].data, SHOPIFY_BODY);
    assert_eq!(got[20].exchange.as_str(), x);
    assert_eq!(got[20].properties, expected(&ordered_ctx(b"cus_1")));

    // A sink declaring the same exchange with another type is refused by the
    // broker (406): permanent.
    let clash = sink(json!({
        "url": URL, "exchange": x, "routing_key": "k", "declare": {"type": "fanout"}
    }))
    .await;
    match clash.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Permanent { reason } => {
            assert!(reason.contains("PRECONDITION_FAILED"), "{reason}")
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
    drop_queue(&ch, &q).await;
    ch.exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .expect("exchange.delete");
}

#[tokio::test]
async fn unroutable_is_permanent_with_mandatory_and_ok_without() {
    let (_conn, _ch) = checker().await;
    let missing = name("no-such-queue");
    let s = sink(json!({"url": URL, "exchange": "", "routing_key": missing})).await;
    match s.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Permanent { reason } => assert!(reason.contains("NO_ROUTE"), "{reason}"),
        other => panic!("expected Permanent, got {other:?}"),
    }
    // Without `mandatory` the broker drops the message and acks it.
    let lossy =
        sink(json!({"url": URL, "exchange": "", "routing_key": missing, "mandatory": false})).await;
    assert_eq!(lossy.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    // Still permanent on the next try (the channel was kept and is fine).
    assert!(matches!(
        s.deliver(&hook(b"{}"), &ctx()).await,
        Outcome::Permanent { .. }
    ));
}

/// A queue at its length limit with `x-overflow: reject-publish` nacks a
/// publish: backpressure, so `Retry` (an ordered lane waits for room), and
/// the same hook is accepted once a consumer made room.
#[tokio::test]
async fn a_full_queue_that_rejects_publishes_is_retry_until_there_is_room() {
    let (_conn, ch) = checker().await;
    let q = name("full");
    let mut args = FieldTable::default();
    args.insert("x-expires".into(), AMQPValue::LongUInt(600_000));
    args.insert("x-max-length".into(), AMQPValue::LongInt(2));
    args.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    ch.queue_declare(
        q.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        args,
    )
    .await
    .expect("queue.declare");
    let s = sink(json!({"url": URL, "exchange": "", "routing_key": q})).await;
    assert_eq!(
        s.deliver(&hook(b"1"), &ordered_ctx(b"k")).await,
        Outcome::Ok
    );
    assert_eq!(
        s.deliver(&hook(b"2"), &ordered_ctx(b"k")).await,
        Outcome::Ok
    );
    match s.deliver(&hook(b"3"), &ordered_ctx(b"k")).await {
        Outcome::Retry { reason, .. } => assert!(reason.contains("basic.nack"), "{reason}"),
        other => panic!("expected Retry for a full queue, got {other:?}"),
    }
    let first = take(&ch, &q, 2).await;
    assert_eq!(
        first.iter().map(|d| d.data.clone()).collect::<Vec<_>>(),
        [b"1".to_vec(), b"2".to_vec()]
    );
    assert_eq!(
        s.deliver(&hook(b"3"), &ordered_ctx(b"k")).await,
        Outcome::Ok
    );
    assert_eq!(take(&ch, &q, 1).await[0].data, b"3");
    drop_queue(&ch, &q).await;
}

#[tokio::test]
async fn missing_exchange_is_sink_gone_and_the_sink_recovers() {
    let (_conn, ch) = checker().await;
    let x = name("gone-x");
    let q = name("gone-q");
    queue(&ch, &q).await;
    let s = sink(json!({"url": URL, "exchange": x, "routing_key": "k"})).await;
    for _ in 0..2 {
        match s.deliver(&hook(b"{}"), &ctx()).await {
            Outcome::SinkGone { reason } => {
                assert!(reason.contains("NOT_FOUND"), "{reason}");
                assert!(reason.contains(&x), "{reason}");
            }
            other => panic!("expected SinkGone, got {other:?}"),
        }
    }
    // The broker closed that channel; once the exchange exists the same sink
    // delivers (on a new channel of the same connection).
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");
    ch.queue_bind(
        q.as_str().into(),
        x.as_str().into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.bind");
    assert!(s.is_connected());
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    let got = take(&ch, &q, 1).await;
    assert_eq!(got[0].data, SHOPIFY_BODY);
    drop_queue(&ch, &q).await;
    ch.exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .expect("exchange.delete");
}

#[tokio::test]
async fn concurrent_deliveries_each_get_their_own_confirm() {
    let (_conn, ch) = checker().await;
    let q = name("concurrent");
    queue(&ch, &q).await;
    let good = Arc::new(sink(json!({"url": URL, "exchange": "", "routing_key": "{source}"})).await);
    // One sink, 64 deliveries at once, half of them unroutable (source
    // `nowhere`, a queue that does not exist): every answer is its own.
    let mut set = tokio::task::JoinSet::new();
    for i in 0..64u32 {
        let s = Arc::clone(&good);
        let q = q.clone();
        set.spawn(async move {
            let routable = i % 2 == 0;
            let c = DeliveryCtx {
                source: if routable { q } else { name("nowhere") },
                ..ctx()
            };
            (
                routable,
                i,
                s.deliver(&hook(i.to_string().as_bytes()), &c).await,
            )
        });
    }
    let mut delivered = Vec::new();
    while let Some(r) = set.join_next().await {
        let (routable, i, outcome) = r.expect("task");
        if routable {
            assert_eq!(outcome, Outcome::Ok, "{i}");
            delivered.push(i.to_string().into_bytes());
        } else {
            assert!(
                matches!(outcome, Outcome::Permanent { .. }),
                "{i}: {outcome:?}"
            );
        }
    }
    let mut got: Vec<Vec<u8>> = take(&ch, &q, 32)
        .await
        .into_iter()
        .map(|d| d.data)
        .collect();
    got.sort();
    delivered.sort();
    assert_eq!(got, delivered);
    drop_queue(&ch, &q).await;
}

#[tokio::test]
async fn an_unreachable_broker_is_retry_and_the_sink_builds_anyway() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let s = sink(json!({"url": format!("amqp://127.0.0.1:{port}"), "exchange": "", "routing_key": "q", "timeout_ms": 2000})).await;
    assert!(!s.is_connected());
    for _ in 0..3 {
        match s.deliver(&hook(b"{}"), &ctx()).await {
            Outcome::Retry { reason, after } => {
                assert_eq!(after, None);
                assert!(reason.starts_with("RabbitMQ"), "{reason}");
                assert!(reason.contains("refused"), "{reason}");
            }
            other => panic!("expected Retry, got {other:?}"),
        }
    }
    // A peer that accepts TCP but never speaks AMQP: the delivery gives up
    // after timeout_ms with a retry, it does not hang.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let s = sink(json!({"url": format!("amqp://127.0.0.1:{port}"), "exchange": "", "routing_key": "q", "timeout_ms": 300})).await;
    match s.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Retry { reason, .. } => assert!(reason.contains("within 300 ms"), "{reason}"),
        other => panic!("expected Retry, got {other:?}"),
    }
    drop(silent);
}

/// A TCP proxy in front of RabbitMQ that the test can cut (every connection
/// dropped, the port closed) and restore on the same port.
struct Proxy {
    port: u16,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    async fn start(port: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("proxy bind");
        let port = listener.local_addr().expect("addr").port();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                conns.spawn(async move {
                    if let Ok(mut broker) = tokio::net::TcpStream::connect("127.0.0.1:5672").await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
                    }
                });
            }
        });
        Proxy {
            port,
            task: Some(task),
        }
    }

    /// Drops every proxied connection and stops listening.
    async fn cut(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

#[tokio::test]
async fn a_broken_connection_retries_then_reconnects() {
    let (_conn, ch) = checker().await;
    let q = name("reconnect");
    queue(&ch, &q).await;
    let mut proxy = Proxy::start(0).await;
    let port = proxy.port;
    let s = sink(json!({
        "url": format!("amqp://guest:guest@127.0.0.1:{port}/%2f"), "exchange": "",
        "routing_key": q, "timeout_ms": 3000
    }))
    .await;
    assert_eq!(s.deliver(&hook(b"before"), &ctx()).await, Outcome::Ok);
    assert!(s.is_connected());

    proxy.cut().await;
    // The connection is gone; deliveries retry (reconnecting, refused, or
    // waiting out the backoff) and never report a success.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.is_connected() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sink never noticed the cut"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..3 {
        assert!(matches!(
            s.deliver(&hook(b"during"), &ctx()).await,
            Outcome::Retry { .. }
        ));
    }

    let _proxy = Proxy::start(port).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut retries = 0;
    loop {
        match s.deliver(&hook(b"after"), &ctx()).await {
            Outcome::Ok => break,
            Outcome::Retry { .. } => retries += 1,
            other => panic!("expected Ok or Retry, got {other:?}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reconnect after {retries} retries"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.is_connected());
    let got: Vec<Vec<u8>> = take(&ch, &q, 2).await.into_iter().map(|d| d.data).collect();
    assert_eq!(got, [b"before".to_vec(), b"after".to_vec()]);
    drop_queue(&ch, &q).await;
}

#[test]
fn bad_options_are_load_errors_naming_the_option() {
    let named = |v: serde_json::Value, option: &str| {
        let e = RabbitMqSinkConfig::from_options(&options(v.clone())).expect_err("invalid");
        let got = match &e {
            SinkError::InvalidOption { option, .. } => option.clone(),
            SinkError::MissingOption { option } => (*option).to_owned(),
            SinkError::UnknownOption { option, .. } => option.clone(),
            other => panic!("{v}: unexpected {other}"),
        };
        assert_eq!(got, option, "{v}: {e}");
    };
    named(json!({"url": "http://127.0.0.1", "exchange": ""}), "url");
    named(json!({"url": "amqp://127.0.0.1/", "exchange": ""}), "url");
    named(json!({"url": URL}), "exchange");
    named(json!({"url": URL, "exchange": "has space"}), "exchange");
    named(
        json!({"url": URL, "exchange": "x", "routing_key": "{tenant}.{lane}"}),
        "routing_key",
    );
    named(
        json!({"url": URL, "exchange": "x", "declare": {"type": "x-consistent-hash"}}),
        "declare.type",
    );
    named(
        json!({"url": URL, "exchange": "x", "declare": {"type": "topic", "durable": "yes"}}),
        "declare.durable",
    );
    named(
        json!({"url": URL, "exchange": "", "declare": {"type": "direct"}}),
        "declare",
    );
    named(
        json!({"url": URL, "exchange": "x", "timeout_ms": 0}),
        "timeout_ms",
    );
    named(
        json!({"url": URL, "exchange": "x", "mandatory": 1}),
        "mandatory",
    );
    named(json!({"url": URL, "exchange": "x", "queue": "q"}), "queue");
}

#[tokio::test]
async fn a_routing_key_too_long_for_amqp_is_permanent() {
    let s = sink(json!({"url": URL, "exchange": "", "routing_key": format!("{}.{{ordering_key}}", "k".repeat(200))})).await;
    match s.deliver(&hook(b"{}"), &ordered_ctx(&[b'x'; 100])).await {
        Outcome::Permanent { reason } => {
            assert!(reason.contains("routing key is 301 bytes"), "{reason}")
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
}
