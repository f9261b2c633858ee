//! The NATS sink against the real nats-server with JetStream at
//! 127.0.0.1:4222 (`.ci/run` starts it), and, for the restart test, a
//! nats-server of its own on a free port. These tests fail, not skip, when it
//! is unreachable.
//!
//! Every test uses its own streams and subjects (the process id, the test's
//! name and a counter) and deletes its streams afterwards.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ankusa_sinks::nats::{NatsSink, NatsSinkConfig};
use ankusa_sinks::{DeliveryCtx, Options, Outcome, Sink, SinkError, uuid_text};
use async_nats::jetstream;
use futures_util::StreamExt as _;
use serde_json::json;

use crate::{SHOPIFY_BODY, ctx, hook, ordered_ctx, sha256_hex};

const URL: &str = "nats://127.0.0.1:4222";

/// The nats-server binary: Debian's package puts it in /usr/sbin (`.ci/run`
/// installs it), else the one on PATH.
fn nats_server() -> &'static str {
    const DEBIAN: &str = "/usr/sbin/nats-server";
    if std::path::Path::new(DEBIAN).exists() {
        DEBIAN
    } else {
        "nats-server"
    }
}

/// A name unique to this process, test and call: `ankusa_<pid>_<test>_<n>`
/// (a valid stream name and subject token).
fn unique(test: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "ankusa_{}_{test}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A JetStream context on `url`, failing the test when it is unreachable.
async fn js(url: &str) -> jetstream::Context {
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("NATS at {url} is not reachable (start it: .ci/run does): {e}"));
    jetstream::new(client)
}

/// A stream capturing `<name>.>`, deleted when dropped (also when the test
/// fails).
struct TestStream {
    url: String,
    name: String,
    stream: jetstream::stream::Stream,
}

impl TestStream {
    async fn create(url: &str, name: &str, config: jetstream::stream::Config) -> TestStream {
        let stream = js(url)
            .await
            .create_stream(jetstream::stream::Config {
                name: name.to_owned(),
                subjects: vec![format!("{name}.>")],
                ..config
            })
            .await
            .expect("create_stream");
        TestStream {
            url: url.to_owned(),
            name: name.to_owned(),
            stream,
        }
    }

    /// How many messages the stream holds.
    async fn len(&self) -> u64 {
        self.stream
            .get_info()
            .await
            .expect("stream info")
            .state
            .messages
    }
}

impl Drop for TestStream {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop cannot await: delete from a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(client) = async_nats::ConnectOptions::new()
                    .connection_timeout(Duration::from_secs(2))
                    .connect(url.as_str())
                    .await
                {
                    let _ = jetstream::new(client).delete_stream(&name).await;
                }
            });
        })
        .join();
    }
}

/// One consumed message: subject, headers (name → values) and payload.
#[derive(Debug)]
struct Got {
    subject: String,
    headers: BTreeMap<String, Vec<String>>,
    payload: Vec<u8>,
}

fn headers_of(map: Option<&async_nats::HeaderMap>) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    if let Some(map) = map {
        for (name, values) in map.iter() {
            out.insert(
                name.to_string(),
                values.iter().map(|v| v.as_str().to_owned()).collect(),
            );
        }
    }
    out
}

/// Reads every message of the stream in order with a pull consumer (acking
/// each), expecting `count` of them.
async fn consume(stream: &TestStream, count: usize) -> Vec<Got> {
    let consumer = stream
        .stream
        .create_consumer(jetstream::consumer::pull::Config::default())
        .await
        .expect("create_consumer");
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        if got.len() >= count {
            break;
        }
        let mut batch = consumer
            .fetch()
            .max_messages(count - got.len())
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .expect("fetch");
        while let Some(m) = batch.next().await {
            let m = m.expect("a message");
            got.push(Got {
                subject: m.message.subject.to_string(),
                headers: headers_of(m.message.headers.as_ref()),
                payload: m.message.payload.to_vec(),
            });
            m.ack().await.expect("ack");
        }
    }
    assert_eq!(got.len(), count, "messages consumed");
    got
}

fn options(v: serde_json::Value) -> Options {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Options::new(),
    }
}

async fn sink(v: serde_json::Value) -> NatsSink {
    let config = NatsSinkConfig::from_options(&options(v)).expect("valid options");
    NatsSink::new(&config).await.expect("sink")
}

/// `base` with idempotency key number `n` (distinct keys are distinct
/// messages to JetStream's dedupe).
fn with_key(base: DeliveryCtx, n: u8) -> DeliveryCtx {
    let mut key = crate::IDEMPOTENCY_KEY;
    key[15] = n;
    DeliveryCtx {
        idempotency_key: uuid_text(&key),
        ..base
    }
}

/// The headers every delivery of `ctx` carries.
fn expected_headers(c: &DeliveryCtx) -> BTreeMap<String, Vec<String>> {
    let mut h: BTreeMap<String, Vec<String>> = BTreeMap::new();
    h.insert("Nats-Msg-Id".into(), vec![c.broker_dedupe_id()]);
    for (name, value) in c.attributes() {
        h.insert(name.into(), vec![value]);
    }
    h.insert("Content-Type".into(), vec!["application/json".into()]);
    h
}

#[tokio::test]
async fn body_and_headers_arrive_exact() {
    let name = unique("exact");
    let stream = TestStream::create(URL, &name, Default::default()).await;
    let s = sink(json!({"url": URL, "subject": format!("{name}.{{tenant}}.{{source}}")})).await;
    assert_eq!(s.kind(), "nats");
    let plain = ctx();
    let ordered = with_key(ordered_ctx(b"cus_1"), 1);
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &plain).await, Outcome::Ok);
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ordered).await, Outcome::Ok);
    // Bytes that are not UTF-8, and an empty body, survive unchanged too.
    let odd: Vec<u8> = (0..=255u8).rev().collect();
    assert_eq!(
        s.deliver(&hook(&odd), &with_key(ctx(), 2)).await,
        Outcome::Ok
    );
    assert_eq!(
        s.deliver(&hook(b""), &with_key(ctx(), 3)).await,
        Outcome::Ok
    );

    let got = consume(&stream, 4).await;
    assert_eq!(got[0].subject, format!("{name}.acme.shopify"));
    assert_eq!(sha256_hex(&got[0].payload), crate::SHOPIFY_SHA256);
    assert_eq!(got[0].payload, SHOPIFY_BODY);
    let expected = expected_headers(&plain);
    assert_eq!(
        expected.keys().collect::<Vec<_>>(),
        [
            "Content-Type",
            "Nats-Msg-Id",
            "ankusa_idempotency_key",
            "ankusa_message_version",
            "ankusa_received_at",
            "ankusa_source",
            "ankusa_tenant"
        ]
    );
    assert_eq!(
        expected["ankusa_idempotency_key"],
        ["01932c4e-5f60-7abc-8def-0123456789ab"]
    );
    assert_eq!(expected["ankusa_received_at"], ["1764500000123"]);
    assert_eq!(got[0].headers, expected);

    assert_eq!(got[1].payload, SHOPIFY_BODY);
    let mut expected = expected_headers(&ordered);
    assert_eq!(
        expected.remove("ankusa_ordering_key"),
        Some(vec!["cus_1".to_owned()])
    );
    let mut headers = got[1].headers.clone();
    assert_eq!(
        headers.remove("ankusa_ordering_key"),
        Some(vec!["cus_1".to_owned()])
    );
    assert_eq!(headers, expected);
    assert_ne!(got[1].headers["Nats-Msg-Id"], got[0].headers["Nats-Msg-Id"]);

    assert_eq!(got[2].payload, odd);
    assert_eq!(got[3].payload, b"");
}

#[tokio::test]
async fn content_type_falls_back_to_the_stored_header_and_else_is_absent() {
    let name = unique("ctype");
    let stream = TestStream::create(URL, &name, Default::default()).await;
    let s = sink(json!({"url": URL, "subject": format!("{name}.x")})).await;
    let no_ctx_type = DeliveryCtx {
        content_type: None,
        ..ctx()
    };
    assert_eq!(s.deliver(&hook(b"{}"), &no_ctx_type).await, Outcome::Ok);
    let mut bare = hook(b"x");
    bare.headers.clear();
    assert_eq!(
        s.deliver(&bare, &with_key(no_ctx_type, 1)).await,
        Outcome::Ok
    );
    let got = consume(&stream, 2).await;
    assert_eq!(got[0].headers["Content-Type"], ["application/json"]);
    assert_eq!(got[1].headers.get("Content-Type"), None);
}

#[tokio::test]
async fn a_redelivery_is_stored_once() {
    let name = unique("dedupe");
    let stream = TestStream::create(URL, &name, Default::default()).await;
    let s = sink(json!({"url": URL, "subject": format!("{name}.x")})).await;
    // The same hook three times (a retry after a lost ack, a redelivery after
    // a restart): every answer is Ok, the stream holds it once.
    for _ in 0..3 {
        assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    }
    assert_eq!(stream.len().await, 1);
    // Another sink (a restarted relay) with the same key: still once.
    let s2 = sink(json!({"url": URL, "subject": format!("{name}.x")})).await;
    assert_eq!(s2.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    assert_eq!(stream.len().await, 1);
    // Another key is another message.
    assert_eq!(
        s.deliver(&hook(SHOPIFY_BODY), &with_key(ctx(), 7)).await,
        Outcome::Ok
    );
    assert_eq!(stream.len().await, 2);
    // The same hook for the source's other sink (another index) into the same
    // stream is that sink's message, not a duplicate.
    let other_sink = ankusa_sinks::DeliveryCtx {
        sink: ankusa_keys::SinkIx(ctx().sink.0 + 1),
        ..ctx()
    };
    assert_eq!(
        s2.deliver(&hook(SHOPIFY_BODY), &other_sink).await,
        Outcome::Ok
    );
    assert_eq!(stream.len().await, 3);
    let got = consume(&stream, 3).await;
    assert_eq!(got[0].payload, SHOPIFY_BODY);
    assert_eq!(got[0].headers["Nats-Msg-Id"], [ctx().broker_dedupe_id()]);
    assert_eq!(
        got[2].headers["Nats-Msg-Id"],
        [other_sink.broker_dedupe_id()]
    );
    assert_eq!(
        got[2].headers["ankusa_idempotency_key"],
        [ctx().idempotency_key]
    );
}

#[tokio::test]
async fn one_lane_keeps_its_order_in_the_stream() {
    let name = unique("ordered");
    let stream = TestStream::create(URL, &name, Default::default()).await;
    let s = sink(json!({"url": URL, "subject": format!("{name}.{{source}}")})).await;
    // A lane's hooks one at a time, as the pipeline calls them; an unordered
    // row with a key carries no ordering key.
    let unordered = DeliveryCtx {
        ordering_key: Some(b"cus_2".to_vec()),
        ..with_key(ctx(), 200)
    };
    assert_eq!(
        s.deliver(&hook(b"unordered"), &unordered).await,
        Outcome::Ok
    );
    for i in 0..50u8 {
        let body = i.to_string();
        assert_eq!(
            s.deliver(&hook(body.as_bytes()), &with_key(ordered_ctx(b"cus_2"), i))
                .await,
            Outcome::Ok
        );
    }
    let got = consume(&stream, 51).await;
    assert_eq!(got[0].payload, b"unordered");
    assert_eq!(got[0].headers.get("ankusa_ordering_key"), None);
    for (i, g) in got[1..].iter().enumerate() {
        assert_eq!(g.payload, i.to_string().as_bytes());
        assert_eq!(g.headers["ankusa_ordering_key"], ["cus_2"]);
    }
}

#[tokio::test]
async fn a_subject_with_no_stream_is_permanent() {
    let s = sink(json!({"url": URL, "subject": format!("{}.x", unique("nostream"))})).await;
    match s.deliver(&hook(SHOPIFY_BODY), &ctx()).await {
        Outcome::Permanent { reason } => {
            assert!(
                reason.contains("no stream captures this subject"),
                "{reason}"
            );
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
}

#[tokio::test]
async fn a_message_the_stream_rejects_is_permanent() {
    let name = unique("toolarge");
    let stream = TestStream::create(
        URL,
        &name,
        jetstream::stream::Config {
            max_message_size: 1024,
            ..Default::default()
        },
    )
    .await;
    let s = sink(json!({"url": URL, "subject": format!("{name}.x")})).await;
    match s.deliver(&hook(SHOPIFY_BODY), &ctx()).await {
        Outcome::Permanent { reason } => {
            assert!(reason.contains("message size exceeds maximum"), "{reason}");
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
    // The client is fine afterwards: a small message is stored.
    assert_eq!(
        s.deliver(&hook(b"{}"), &with_key(ctx(), 1)).await,
        Outcome::Ok
    );
    assert_eq!(stream.len().await, 1);
}

/// A port nothing listens on: bind one, then free it.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

#[tokio::test]
async fn an_unreachable_server_is_retry_within_the_timeout() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    // Built while nothing listens: the sink connects in the background.
    for mode in ["jetstream", "core"] {
        let s = sink(json!({"url": url, "subject": "x", "mode": mode, "timeout_ms": 500})).await;
        for _ in 0..2 {
            // The outer bound only turns a hang into a failure.
            let outcome =
                tokio::time::timeout(Duration::from_secs(30), s.deliver(&hook(b"{}"), &ctx()))
                    .await
                    .expect("deliver answered");
            match outcome {
                Outcome::Retry { reason, after } => {
                    assert_eq!(after, None);
                    assert!(reason.starts_with("NATS"), "{reason}");
                }
                other => panic!("expected Retry, got {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn core_mode_delivers_to_a_subscriber() {
    let subject = format!("{}.{{source}}", unique("core"));
    let full = subject.replace("{source}", "shopify");
    let client = js(URL).await.client();
    let mut sub = client.subscribe(full.clone()).await.expect("subscribe");
    client.flush().await.expect("flush");
    let s = sink(json!({"url": URL, "mode": "core", "subject": subject})).await;
    assert_eq!(
        s.deliver(&hook(SHOPIFY_BODY), &ordered_ctx(b"cus_9")).await,
        Outcome::Ok
    );
    let m = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("a message within 10 s")
        .expect("subscription open");
    assert_eq!(m.subject.as_str(), full);
    assert_eq!(m.payload.as_ref(), SHOPIFY_BODY);
    let mut expected = expected_headers(&ordered_ctx(b"cus_9"));
    // Core NATS has no dedupe: no Nats-Msg-Id.
    expected.remove("Nats-Msg-Id");
    assert_eq!(headers_of(m.headers.as_ref()), expected);
    assert_eq!(expected["ankusa_ordering_key"], ["cus_9"]);
    // At-most-once: publishing with no subscriber is still Ok.
    drop(sub);
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
}

/// A nats-server with JetStream of this test's own, on `port` with its store
/// in `dir`; killed when dropped.
struct OwnServer(Child);

impl OwnServer {
    fn start(port: u16, dir: &std::path::Path) -> OwnServer {
        let child = Command::new(nats_server())
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} did not start: {e}", nats_server()));
        OwnServer(child)
    }

    fn stop(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Delivers until the answer is not Retry (100 ms apart, giving up after at
/// least `tries` attempts and 60 s), as the pipeline's retries would; the
/// final outcome.
async fn deliver_until_final(s: &NatsSink, body: &[u8], c: &DeliveryCtx, tries: usize) -> Outcome {
    let mut last = Outcome::retry("never tried");
    // At least `tries` attempts, and for at least 60 s: a loaded machine
    // restarts a server slowly.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut n = 0;
    while n < tries || std::time::Instant::now() < deadline {
        n += 1;
        last = s.deliver(&hook(body), c).await;
        if last.is_final() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last
}

#[tokio::test]
async fn it_reconnects_after_a_server_restart() {
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("tempdir");
    let name = unique("restart");
    // Built before the server exists.
    let s = sink(json!({"url": url, "subject": format!("{name}.x"), "timeout_ms": 1000})).await;
    assert!(matches!(
        s.deliver(&hook(b"early"), &ctx()).await,
        Outcome::Retry { .. }
    ));

    let server = OwnServer::start(port, dir.path());
    let mut connected = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if let Ok(c) = async_nats::connect(url.as_str()).await {
            connected = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = connected.expect("own nats-server came up");
    let stream = jetstream::new(client)
        .create_stream(jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("{name}.>")],
            ..Default::default()
        })
        .await
        .expect("create_stream");
    for i in 0..5u8 {
        let outcome = deliver_until_final(&s, &[b'a' + i], &with_key(ctx(), i), 100).await;
        assert_eq!(outcome, Outcome::Ok, "hook {i}");
    }

    server.stop();
    // During the outage: Retry, answered (the outer bound only catches a hang).
    for i in 5..8u8 {
        let outcome = tokio::time::timeout(
            Duration::from_secs(30),
            s.deliver(&hook(&[b'a' + i]), &with_key(ctx(), i)),
        )
        .await
        .expect("deliver answered during the outage");
        assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    }

    let _server = OwnServer::start(port, dir.path());
    for i in 5..10u8 {
        let outcome = deliver_until_final(&s, &[b'a' + i], &with_key(ctx(), i), 200).await;
        assert_eq!(outcome, Outcome::Ok, "hook {i} after the restart");
    }
    let info = stream.get_info().await;
    // The first `stream` handle's client reconnected too.
    let info = info.expect("stream info after the restart");
    assert_eq!(info.state.messages, 10);
    let check = TestStream {
        url: url.clone(),
        name: name.clone(),
        stream,
    };
    let got = consume(&check, 10).await;
    let bodies: Vec<Vec<u8>> = got.into_iter().map(|g| g.payload).collect();
    let expected: Vec<Vec<u8>> = (0..10u8).map(|i| vec![b'a' + i]).collect();
    assert_eq!(bodies, expected);
}

#[test]
fn bad_options_are_load_errors_naming_the_option() {
    let e = NatsSinkConfig::from_options(&options(
        json!({"url": "http://127.0.0.1:4222", "subject": "s"}),
    ))
    .expect_err("bad url");
    assert!(
        matches!(&e, SinkError::InvalidOption { option, .. } if option == "url"),
        "{e}"
    );
    let e = NatsSinkConfig::from_options(&options(json!({"url": URL, "subject": "s.{nope}"})))
        .expect_err("bad template");
    assert!(
        matches!(&e, SinkError::InvalidOption { option, .. } if option == "subject"),
        "{e}"
    );
    let e = NatsSinkConfig::from_options(&options(json!({"url": URL, "subject": "s.>"})))
        .expect_err("wildcard");
    assert!(
        matches!(&e, SinkError::InvalidOption { option, .. } if option == "subject"),
        "{e}"
    );
    let e = NatsSinkConfig::from_options(&options(json!({"url": URL}))).expect_err("no subject");
    assert!(
        matches!(&e, SinkError::MissingOption { option: "subject" }),
        "{e}"
    );
    let e =
        NatsSinkConfig::from_options(&options(json!({"url": URL, "subject": "s", "stream": "S"})))
            .expect_err("unknown");
    assert!(
        matches!(&e, SinkError::UnknownOption { option, .. } if option == "stream"),
        "{e}"
    );
}
