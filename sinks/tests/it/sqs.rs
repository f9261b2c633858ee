//! The SQS sink against moto's server (`.ci/moto.sh` starts it on
//! 127.0.0.1:5000; `ANKUSA_TEST_SQS_ENDPOINT` overrides). These tests fail,
//! not skip, when it is unreachable.
//!
//! Every test creates its own queues (the process id, the time and the
//! test's name) and deletes them afterwards. moto's SequenceNumbers are not
//! monotonic: nothing here asserts on them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ankusa_sinks::sqs::{SqsSink, SqsSinkConfig, StaticCredentials, message_group_id};
use ankusa_sinks::{DeliveryCtx, Options, Outcome, Sink, SinkError};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use serde_json::json;

use crate::{SHOPIFY_BODY, ctx, hook, ordered_ctx, sha256_hex};

/// moto's endpoint.
fn endpoint() -> String {
    std::env::var("ANKUSA_TEST_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5000".into())
}

const REGION: &str = "us-east-1";

fn credentials() -> StaticCredentials {
    StaticCredentials {
        access_key_id: "test".into(),
        secret_access_key: "test".into(),
    }
}

/// An SDK client for setup and checks, against moto.
async fn admin() -> aws_sdk_sqs::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .region(aws_sdk_sqs::config::Region::new(REGION))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .endpoint_url(endpoint())
        .load()
        .await;
    aws_sdk_sqs::Client::new(&config)
}

/// A queue made for one test, deleted on drop (also when the test fails).
struct Queue {
    url: String,
}

impl Queue {
    /// Creates a queue named after the test (FIFO when `fifo`), failing the
    /// test when moto is unreachable.
    async fn create(test: &str, fifo: bool) -> Queue {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let mut name = format!("ankusa-{}-{nanos}-{test}", std::process::id());
        let mut req = admin().await.create_queue();
        if fifo {
            name.push_str(".fifo");
            req = req
                .attributes(QueueAttributeName::FifoQueue, "true")
                .attributes(QueueAttributeName::ContentBasedDeduplication, "false");
        }
        let out = req.queue_name(&name).send().await.unwrap_or_else(|e| {
            panic!(
                "moto's SQS at {} is not reachable (run .ci/moto.sh): {}",
                endpoint(),
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            )
        });
        Queue {
            url: out.queue_url().expect("queue url").to_owned(),
        }
    }

    /// Receives (and deletes) messages until `n` arrived or `within` passed.
    async fn receive_within(&self, n: usize, within: Duration) -> Vec<aws_sdk_sqs::types::Message> {
        let client = admin().await;
        let deadline = Instant::now() + within;
        let mut out = Vec::new();
        while out.len() < n && Instant::now() < deadline {
            let got = client
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(10)
                .visibility_timeout(300)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .expect("ReceiveMessage");
            let messages = got.messages.unwrap_or_default();
            if messages.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            for m in messages {
                client
                    .delete_message()
                    .queue_url(&self.url)
                    .receipt_handle(m.receipt_handle().expect("receipt handle"))
                    .send()
                    .await
                    .expect("DeleteMessage");
                out.push(m);
            }
        }
        out
    }
}

impl Queue {
    /// Receives (and deletes) messages until `n` arrived or 10 s passed.
    async fn receive(&self, n: usize) -> Vec<aws_sdk_sqs::types::Message> {
        self.receive_within(n, Duration::from_secs(10)).await
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let url = self.url.clone();
        // Drop runs inside the test's runtime: delete on a thread of its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let _ = admin().await.delete_queue().queue_url(url).send().await;
            });
        })
        .join();
    }
}

fn options(v: serde_json::Value) -> Options {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Options::new(),
    }
}

/// A sink for `queue_url` on moto with the test credentials.
async fn sink(queue_url: &str, extra: serde_json::Value) -> SqsSink {
    let mut o =
        options(json!({"queue_url": queue_url, "endpoint_url": endpoint(), "region": REGION}));
    o.extend(options(extra));
    let mut config = SqsSinkConfig::from_options(&o).expect("valid options");
    config.credentials = Some(credentials());
    SqsSink::new(&config).await.expect("sink")
}

/// The message's String attributes.
fn attrs(m: &aws_sdk_sqs::types::Message) -> BTreeMap<String, String> {
    m.message_attributes()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            assert_eq!(v.data_type(), "String", "{k}");
            (
                k.clone(),
                v.string_value().expect("string value").to_owned(),
            )
        })
        .collect()
}

fn system(m: &aws_sdk_sqs::types::Message, name: MessageSystemAttributeName) -> Option<String> {
    m.attributes().and_then(|a| a.get(&name)).cloned()
}

/// `ctx` with its own idempotency key (FIFO queues deduplicate on it).
fn with_key(c: DeliveryCtx, n: u32) -> DeliveryCtx {
    DeliveryCtx {
        idempotency_key: format!("01932c4e-5f60-7abc-8def-{n:012x}"),
        ..c
    }
}

fn expected_attrs(c: &DeliveryCtx) -> BTreeMap<String, String> {
    c.attributes()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .chain([("content_type".to_owned(), "application/json".to_owned())])
        .collect()
}

#[tokio::test]
async fn standard_queue_body_and_attributes_arrive_exactly() {
    let q = Queue::create("std", false).await;
    let s = sink(&q.url, json!({})).await;
    assert_eq!(s.kind(), "sqs");
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    // Every character class SQS allows survives unchanged.
    let text = "tab\t lf\n cr\r é \u{D7FF} \u{E000} \u{FFFD} \u{10000} \u{10FFFF} 😀";
    assert_eq!(s.deliver(&hook(text.as_bytes()), &ctx()).await, Outcome::Ok);

    let got = q.receive(2).await;
    assert_eq!(got.len(), 2);
    let shopify = got
        .iter()
        .find(|m| m.body().is_some_and(|b| b.len() == SHOPIFY_BODY.len()))
        .expect("the shopify message");
    let body = shopify.body().expect("body").as_bytes();
    assert_eq!(body, SHOPIFY_BODY);
    assert_eq!(sha256_hex(body), crate::SHOPIFY_SHA256);
    let want: BTreeMap<String, String> = [
        ("ankusa_message_version", "1"),
        (
            "ankusa_idempotency_key",
            "01932c4e-5f60-7abc-8def-0123456789ab",
        ),
        ("ankusa_tenant", "acme"),
        ("ankusa_source", "shopify"),
        ("ankusa_received_at", "1764500000123"),
        ("content_type", "application/json"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(attrs(shopify), want);
    // A standard queue: no group.
    assert_eq!(
        system(shopify, MessageSystemAttributeName::MessageGroupId),
        None
    );
    let other = got
        .iter()
        .find(|m| m.body() != shopify.body())
        .expect("the text message");
    assert_eq!(other.body(), Some(text));
}

#[tokio::test]
async fn fifo_group_ids_and_dedup_ids() {
    let q = Queue::create("fifo-ids", true).await;
    let s = sink(&q.url, json!({"ordered": true})).await;
    let long_legal = "k".repeat(128);
    let too_long = "k".repeat(129);
    let punct = r##"!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"##;
    let hashed = |k: &[u8]| format!("sha256:{}", sha256_hex(k));
    // (ordered key or None, expected group id)
    let cases: Vec<(Option<&[u8]>, String)> = vec![
        (Some(b"cus_1"), "cus_1".into()),
        (Some(b"acme/shopify"), "acme/shopify".into()),
        (Some(long_legal.as_bytes()), long_legal.clone()),
        (Some(punct.as_bytes()), punct.into()),
        (Some(too_long.as_bytes()), hashed(too_long.as_bytes())),
        (Some(b"has space"), hashed(b"has space")),
        (Some(b"caf\xc3\xa9"), hashed(b"caf\xc3\xa9")),
        (Some(b"bad\xffutf8"), hashed(b"bad\xffutf8")),
        (None, String::new()),
    ];
    let mut sent = Vec::new();
    for (i, (key, _)) in cases.iter().enumerate() {
        let n = u32::try_from(i).expect("small");
        let c = with_key(key.map_or_else(ctx, ordered_ctx), n);
        let body = format!("{{\"n\":{i}}}");
        assert_eq!(
            s.deliver(&hook(body.as_bytes()), &c).await,
            Outcome::Ok,
            "case {i}"
        );
        sent.push((body, c));
    }
    let got = q.receive(cases.len()).await;
    assert_eq!(got.len(), cases.len());
    for (i, ((key, group), (body, c))) in cases.iter().zip(&sent).enumerate() {
        let m = got
            .iter()
            .find(|m| m.body() == Some(body.as_str()))
            .unwrap_or_else(|| panic!("case {i} not received"));
        let group = if key.is_some() {
            group.clone()
        } else {
            c.idempotency_key.clone()
        };
        assert_eq!(
            system(m, MessageSystemAttributeName::MessageGroupId).as_deref(),
            Some(group.as_str()),
            "case {i}"
        );
        if let Some(k) = key {
            assert_eq!(group, message_group_id(k));
        }
        assert_eq!(
            system(m, MessageSystemAttributeName::MessageDeduplicationId).as_deref(),
            Some(c.broker_dedupe_id().as_str()),
            "case {i}"
        );
        assert_eq!(attrs(m), expected_attrs(c), "case {i}");
    }
    // The lossy ordering-key attribute of the non-UTF-8 key, exact group id.
    let bad = got
        .iter()
        .find(|m| m.body() == Some(sent[7].0.as_str()))
        .expect("case 7");
    assert_eq!(
        attrs(bad).get("ankusa_ordering_key").map(String::as_str),
        Some("bad\u{FFFD}utf8")
    );
}

#[tokio::test]
async fn fifo_keeps_each_groups_order_and_drops_a_reused_dedup_id() {
    let q = Queue::create("fifo-order", true).await;
    let s = sink(&q.url, json!({"ordered": true})).await;
    let keys: [&[u8]; 3] = [b"cus_a", b"cus b", b"cus_c"];
    let mut n = 0u32;
    for round in 0..8 {
        for key in keys {
            let body = format!("{}:{round}", String::from_utf8_lossy(key));
            let c = with_key(ordered_ctx(key), n);
            n += 1;
            assert_eq!(s.deliver(&hook(body.as_bytes()), &c).await, Outcome::Ok);
        }
    }
    // The same idempotency key again (a redelivery): accepted, and dropped by
    // the queue's deduplication.
    let again = with_key(ordered_ctx(b"cus_a"), 0);
    assert_eq!(s.deliver(&hook(b"cus_a:dup"), &again).await, Outcome::Ok);

    let got = q.receive(24).await;
    // Nothing more arrives: the duplicate was dropped (moto makes a sent
    // message visible at once; the queue is empty after the 24).
    let extra = q.receive_within(1, Duration::from_secs(1)).await;
    assert!(
        extra.is_empty(),
        "{:?}",
        extra.iter().map(|m| m.body()).collect::<Vec<_>>()
    );
    assert_eq!(got.len(), 24);
    let mut per_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &got {
        let group = system(m, MessageSystemAttributeName::MessageGroupId).expect("group id");
        per_group
            .entry(group)
            .or_default()
            .push(m.body().expect("body").to_owned());
    }
    for key in keys {
        let name = String::from_utf8_lossy(key);
        let want: Vec<String> = (0..8).map(|r| format!("{name}:{r}")).collect();
        assert_eq!(per_group.get(&message_group_id(key)), Some(&want), "{name}");
    }
    assert!(per_group.contains_key(&format!("sha256:{}", sha256_hex(b"cus b"))));
}

#[tokio::test]
async fn oversize_and_unsendable_bodies_are_permanent() {
    let q = Queue::create("sizes", false).await;
    let s = sink(&q.url, json!({})).await;
    // Over 262,144 bytes: refused before any call.
    let big = vec![b'a'; 262_145];
    match s.deliver(&hook(&big), &ctx()).await {
        Outcome::Permanent { reason } => {
            assert!(
                reason.contains("262144") && reason.contains("max_message_bytes"),
                "{reason}"
            )
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
    // Exactly 262,144 bytes of body: the attributes count too.
    let edge = vec![b'a'; 262_144];
    assert!(matches!(
        s.deliver(&hook(&edge), &ctx()).await,
        Outcome::Permanent { .. }
    ));
    // Not UTF-8, a NUL, U+FFFE, empty.
    for (body, needle) in [
        (&b"{\"a\":\"\xff\"}"[..], "not valid UTF-8"),
        (&b"a\x00b"[..], "U+0000"),
        ("\u{FFFE}".as_bytes(), "U+FFFE"),
        (&b""[..], "empty"),
    ] {
        match s.deliver(&hook(body), &ctx()).await {
            Outcome::Permanent { reason } => assert!(reason.contains(needle), "{reason}"),
            other => panic!("expected Permanent for {body:?}, got {other:?}"),
        }
    }
    // A large body within the limit goes through byte-identical.
    let fits: Vec<u8> = (0..200_000u32)
        .map(|i| b"abcdefghij"[(i % 10) as usize])
        .collect();
    assert_eq!(s.deliver(&hook(&fits), &ctx()).await, Outcome::Ok);
    let got = q.receive(1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body().map(str::as_bytes), Some(fits.as_slice()));
}

#[tokio::test]
async fn base64_encoding_carries_any_bytes() {
    use base64::Engine as _;
    let q = Queue::create("b64", false).await;
    let s = sink(&q.url, json!({"body_encoding": "base64"})).await;
    let odd: Vec<u8> = (0..=255u8).rev().collect();
    assert_eq!(s.deliver(&hook(&odd), &ctx()).await, Outcome::Ok);
    let got = q.receive(1).await;
    assert_eq!(got.len(), 1);
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(got[0].body().expect("body"))
        .expect("base64");
    assert_eq!(decoded, odd);
    let mut want = expected_attrs(&ctx());
    want.insert("ankusa_body_encoding".into(), "base64".into());
    assert_eq!(attrs(&got[0]), want);
}

#[tokio::test]
async fn a_nonexistent_or_deleted_queue_is_sink_gone() {
    let q = Queue::create("gone", false).await;
    let never = format!("{}-never-created", q.url);
    let s = sink(&never, json!({})).await;
    match s.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::SinkGone { reason } => {
            assert!(
                reason.contains("NonExistentQueue") || reason.contains("QueueDoesNotExist"),
                "{reason}"
            )
        }
        other => panic!("expected SinkGone, got {other:?}"),
    }
    let s = sink(&q.url, json!({})).await;
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    admin()
        .await
        .delete_queue()
        .queue_url(&q.url)
        .send()
        .await
        .expect("DeleteQueue");
    assert!(matches!(
        s.deliver(&hook(b"{}"), &ctx()).await,
        Outcome::SinkGone { .. }
    ));
}

#[tokio::test]
async fn an_unreachable_endpoint_is_retry() {
    // A port nothing listens on: bind one, then free it. The sink is built
    // while the endpoint is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let down = format!("http://127.0.0.1:{port}");
    let mut config = SqsSinkConfig::from_options(&options(json!({
        "queue_url": format!("{down}/000000000000/q.fifo"), "endpoint_url": down,
        "region": REGION, "timeout_ms": 2000, "ordered": true
    })))
    .expect("valid");
    config.credentials = Some(credentials());
    let s = SqsSink::new(&config)
        .await
        .expect("built while the endpoint is down");
    for _ in 0..2 {
        match s.deliver(&hook(b"{}"), &ordered_ctx(b"cus_1")).await {
            Outcome::Retry { reason, after } => {
                assert_eq!(after, None);
                assert!(reason.starts_with("SQS SendMessage"), "{reason}");
            }
            other => panic!("expected Retry, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_endpoint_that_never_answers_is_retry_after_timeout_ms() {
    // Accepts connections and reads nothing: the call times out.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = listener.accept().await {
            conns.push(c);
        }
    });
    let silent = format!("http://{addr}");
    let mut config = SqsSinkConfig::from_options(&options(json!({
        "queue_url": format!("{silent}/000000000000/q"), "endpoint_url": silent,
        "region": REGION, "timeout_ms": 300
    })))
    .expect("valid");
    config.credentials = Some(credentials());
    let s = SqsSink::new(&config).await.expect("sink");
    match s.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Retry { reason, after } => {
            assert_eq!(after, None);
            assert!(
                reason.contains("timeout") || reason.contains("no answer"),
                "{reason}"
            );
        }
        other => panic!("expected Retry, got {other:?}"),
    }
    held.abort();
}

#[tokio::test]
async fn bad_options_are_load_errors_naming_the_option() {
    let std_url = format!("{}/000000000000/plain", endpoint());
    let e = SqsSinkConfig::from_options(&options(json!({"queue_url": std_url, "ordered": true})))
        .expect_err("ordered on a standard queue");
    assert!(
        matches!(&e, SinkError::InvalidOption { option, .. } if option == "ordered"),
        "{e}"
    );
    assert!(e.to_string().contains(".fifo"), "{e}");
    // The constructor holds a config built in code to the same rule.
    let mut config = SqsSinkConfig::new(std_url.clone());
    config.ordered = true;
    let e = SqsSink::new(&config)
        .await
        .expect_err("ordered on a standard queue");
    assert!(
        matches!(&e, SinkError::InvalidOption { option, .. } if option == "ordered"),
        "{e}"
    );

    let e =
        SqsSinkConfig::from_options(&options(json!({"region": REGION}))).expect_err("no queue_url");
    assert!(
        matches!(
            &e,
            SinkError::MissingOption {
                option: "queue_url"
            }
        ),
        "{e}"
    );
    for bad in [
        "127.0.0.1:5000",
        "ftp://127.0.0.1:5000",
        "http://",
        "http://a b",
    ] {
        let e = SqsSinkConfig::from_options(&options(
            json!({"queue_url": std_url, "endpoint_url": bad}),
        ))
        .expect_err("bad endpoint_url");
        assert!(
            matches!(&e, SinkError::InvalidOption { option, .. } if option == "endpoint_url"),
            "{bad}: {e}"
        );
    }
    let e = SqsSinkConfig::from_options(&options(json!({"queue_url": std_url, "visibility": 3})))
        .expect_err("unknown option");
    assert!(
        matches!(&e, SinkError::UnknownOption { option, .. } if option == "visibility"),
        "{e}"
    );
    // A FIFO queue may be ordered.
    let ok = SqsSinkConfig::from_options(&options(
        json!({"queue_url": format!("{std_url}.fifo"), "ordered": true}),
    ))
    .expect("ordered FIFO");
    assert!(ok.is_fifo() && ok.ordered);
}
