//! The Redis sink against the real Redis at 127.0.0.1:6379 (`.ci/run` starts
//! it). These tests fail, not skip, when it is unreachable.
//!
//! Every test uses its own keys (the process id and the test's name) and
//! deletes them afterwards.

use std::time::Duration;

use ankusa_sinks::redis::{RedisSink, RedisSinkConfig};
use ankusa_sinks::{Options, Outcome, Sink, SinkError};
use serde_json::json;

use crate::{SHOPIFY_BODY, ctx, hook, ordered_ctx, sha256_hex};

const URL: &str = "redis://127.0.0.1:6379";

/// A key unique to this process and test.
fn key(test: &str) -> String {
    format!("ankusa-test:{}:{test}", std::process::id())
}

/// A plain (blocking) connection for checks, failing the test when Redis is
/// not reachable.
fn checker() -> ::redis::Connection {
    let client = ::redis::Client::open(URL).expect("client");
    client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("Redis at {URL} is not reachable (start it: .ci/run does): {e}"))
}

/// Deletes the keys when dropped (also when the test fails).
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let mut c = checker();
        for k in &self.0 {
            let _: Result<i64, _> = ::redis::cmd("DEL").arg(k).query(&mut c);
        }
    }
}

fn options(v: serde_json::Value) -> Options {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Options::new(),
    }
}

fn sink(v: serde_json::Value) -> RedisSink {
    let config = RedisSinkConfig::from_options(&options(v)).expect("valid options");
    RedisSink::new(&config).expect("sink")
}

/// A stream entry: (id, field/value pairs in order).
type Entry = (String, Vec<(String, Vec<u8>)>);

/// The stream's entries.
fn xrange(stream: &str) -> Vec<Entry> {
    let entries: Vec<(String, Vec<Vec<u8>>)> = ::redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query(&mut checker())
        .expect("XRANGE");
    entries
        .into_iter()
        .map(|(id, flat)| {
            let pairs = flat
                .chunks(2)
                .map(|p| {
                    (
                        String::from_utf8(p[0].clone()).expect("field name"),
                        p[1].clone(),
                    )
                })
                .collect();
            (id, pairs)
        })
        .collect()
}

fn field<'a>(fields: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
}

#[tokio::test]
async fn fields_and_body_arrive_byte_identical() {
    let stream = key("fields");
    let _cleanup = Cleanup(vec![format!("{stream}:acme:shopify")]);
    let s = sink(json!({"url": URL, "stream": format!("{stream}:{{tenant}}:{{source}}")}));
    assert_eq!(s.kind(), "redis");
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    // Bytes that are not UTF-8, and an empty body, survive unchanged too.
    let odd: Vec<u8> = (0..=255u8).rev().collect();
    assert_eq!(s.deliver(&hook(&odd), &ctx()).await, Outcome::Ok);
    assert_eq!(s.deliver(&hook(b""), &ctx()).await, Outcome::Ok);

    let entries = xrange(&format!("{stream}:acme:shopify"));
    assert_eq!(entries.len(), 3);
    let fields = &entries[0].1;
    let body = field(fields, "body").expect("body field");
    assert_eq!(sha256_hex(body), crate::SHOPIFY_SHA256);
    assert_eq!(body, SHOPIFY_BODY);
    let c = ctx();
    assert_eq!(field(fields, "ankusa_message_version"), Some(&b"1"[..]));
    assert_eq!(
        field(fields, "ankusa_idempotency_key"),
        Some(c.idempotency_key.as_bytes())
    );
    assert_eq!(field(fields, "ankusa_tenant"), Some(&b"acme"[..]));
    assert_eq!(field(fields, "ankusa_source"), Some(&b"shopify"[..]));
    assert_eq!(
        field(fields, "ankusa_received_at"),
        Some(&b"1764500000123"[..])
    );
    assert_eq!(
        field(fields, "content_type"),
        Some(&b"application/json"[..])
    );
    assert_eq!(field(fields, "ankusa_ordering_key"), None);
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "body",
            "ankusa_message_version",
            "ankusa_idempotency_key",
            "ankusa_tenant",
            "ankusa_source",
            "ankusa_received_at",
            "content_type"
        ]
    );
    assert_eq!(field(&entries[1].1, "body"), Some(odd.as_slice()));
    assert_eq!(field(&entries[2].1, "body"), Some(&b""[..]));
}

#[tokio::test]
async fn content_type_falls_back_to_the_stored_header_and_else_is_absent() {
    let stream = key("ctype");
    let _cleanup = Cleanup(vec![stream.clone()]);
    let s = sink(json!({"url": URL, "stream": stream}));
    let no_ctx_type = ankusa_sinks::DeliveryCtx {
        content_type: None,
        ..ctx()
    };
    assert_eq!(s.deliver(&hook(b"{}"), &no_ctx_type).await, Outcome::Ok);
    let mut bare = hook(b"x");
    bare.headers.clear();
    assert_eq!(s.deliver(&bare, &no_ctx_type).await, Outcome::Ok);
    let entries = xrange(&stream);
    assert_eq!(
        field(&entries[0].1, "content_type"),
        Some(&b"application/json"[..])
    );
    assert_eq!(field(&entries[1].1, "content_type"), None);
}

#[tokio::test]
async fn ordering_key_is_present_only_when_ordered() {
    let stream = key("ordered");
    let _cleanup = Cleanup(vec![stream.clone()]);
    let s = sink(json!({"url": URL, "stream": stream}));
    // A laned hook, then the same key on an unordered row, then a lane's
    // hooks one at a time: they keep their order in the stream.
    assert_eq!(
        s.deliver(&hook(b"0"), &ordered_ctx(b"cus_1")).await,
        Outcome::Ok
    );
    let unordered = ankusa_sinks::DeliveryCtx {
        ordering_key: Some(b"cus_1".to_vec()),
        ..ctx()
    };
    assert_eq!(s.deliver(&hook(b"1"), &unordered).await, Outcome::Ok);
    for i in 2..50 {
        let body = i.to_string();
        assert_eq!(
            s.deliver(&hook(body.as_bytes()), &ordered_ctx(b"cus_2"))
                .await,
            Outcome::Ok
        );
    }
    let entries = xrange(&stream);
    assert_eq!(entries.len(), 50);
    assert_eq!(
        field(&entries[0].1, "ankusa_ordering_key"),
        Some(&b"cus_1"[..])
    );
    assert_eq!(field(&entries[1].1, "ankusa_ordering_key"), None);
    for (i, (_, fields)) in entries.iter().enumerate().skip(2) {
        assert_eq!(field(fields, "body"), Some(i.to_string().as_bytes()));
        assert_eq!(field(fields, "ankusa_ordering_key"), Some(&b"cus_2"[..]));
    }
}

#[tokio::test]
async fn maxlen_trims_the_stream() {
    let stream = key("maxlen");
    let _cleanup = Cleanup(vec![stream.clone()]);
    let s = sink(json!({"url": URL, "stream": stream, "maxlen": 10}));
    for i in 0..500 {
        assert_eq!(
            s.deliver(&hook(format!("{i}").as_bytes()), &ctx()).await,
            Outcome::Ok
        );
    }
    let len: u64 = ::redis::cmd("XLEN")
        .arg(&stream)
        .query(&mut checker())
        .expect("XLEN");
    // `MAXLEN ~ 10` trims whole macro nodes (stream-node-max-entries, 100 by
    // default): at least 10 entries stay, far fewer than 500.
    assert!((10..=200).contains(&len), "XLEN {len}");
    let entries = xrange(&stream);
    // The newest entry is the last hook.
    assert_eq!(
        field(&entries[entries.len() - 1].1, "body"),
        Some(&b"499"[..])
    );
}

#[tokio::test]
async fn wrongtype_is_permanent() {
    let k = key("wrongtype");
    let _cleanup = Cleanup(vec![k.clone()]);
    let _: () = ::redis::cmd("SET")
        .arg(&k)
        .arg("a string")
        .query(&mut checker())
        .expect("SET");
    let s = sink(json!({"url": URL, "stream": k}));
    match s.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Permanent { reason } => assert!(reason.contains("WRONGTYPE"), "{reason}"),
        other => panic!("expected Permanent, got {other:?}"),
    }
    // The connection is fine afterwards.
    let other = key("wrongtype-after");
    let _cleanup2 = Cleanup(vec![other.clone()]);
    let s2 = sink(json!({"url": URL, "stream": other}));
    assert_eq!(s2.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
}

#[tokio::test]
async fn a_refused_port_is_retry() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let s = sink(
        json!({"url": format!("redis://127.0.0.1:{port}"), "stream": "s", "timeout_ms": 2000}),
    );
    let started = std::time::Instant::now();
    for _ in 0..2 {
        match s.deliver(&hook(b"{}"), &ctx()).await {
            Outcome::Retry { reason, after } => {
                assert_eq!(after, None);
                assert!(reason.starts_with("Redis XADD"), "{reason}");
            }
            other => panic!("expected Retry, got {other:?}"),
        }
    }
    // Bounded by timeout_ms (2 s a call), not by the OS's connect timeout
    // (minutes): a generous bound for a loaded machine still tells them apart.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn publish_delivers_to_a_subscriber() {
    let channel = key("publish");
    let s =
        sink(json!({"url": URL, "mode": "publish", "channel": format!("{channel}:{{source}}")}));
    let full = format!("{channel}:shopify");

    // A subscriber on its own thread (the blocking client's pub/sub).
    let (tx, rx) = std::sync::mpsc::channel();
    let sub_channel = full.clone();
    let subscriber = std::thread::spawn(move || {
        let mut conn = checker();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let mut pubsub = conn.as_pubsub();
        pubsub.subscribe(&sub_channel).expect("SUBSCRIBE");
        let msg = pubsub.get_message().expect("a message");
        let _ = tx.send((
            msg.get_channel_name().to_owned(),
            msg.get_payload_bytes().to_vec(),
        ));
    });
    // Publish once the subscription is in place.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, n): (String, u64) = ::redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&full)
            .query(&mut checker())
            .expect("PUBSUB NUMSUB");
        if n > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "subscriber never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    let (name, payload) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the subscriber got the message");
    subscriber.join().expect("subscriber thread");
    assert_eq!(name, full);
    assert_eq!(payload, SHOPIFY_BODY);
    // Fire-and-forget: publishing with no subscriber is still Ok.
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
}

#[test]
fn bad_options_are_load_errors_naming_the_option() {
    let e = RedisSinkConfig::from_options(&options(json!({"url": "not a url", "stream": "s"})))
        .expect_err("bad url");
    assert!(
        matches!(&e, SinkError::InvalidOption { option, .. } if option == "url"),
        "{e}"
    );
    let e = RedisSinkConfig::from_options(&options(json!({"url": URL, "stream": "s:{nope}"})))
        .expect_err("bad template");
    assert!(
        matches!(&e, SinkError::InvalidOption { option, .. } if option == "stream"),
        "{e}"
    );
}
