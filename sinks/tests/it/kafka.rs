//! The Kafka sink against librdkafka's in-process mock cluster
//! (`rdkafka::mocking::MockCluster`): real Kafka protocol on a loopback port,
//! idempotent produce, fetch, metadata and injected errors. Each test has its
//! own cluster and topics.
//!
//! What the mock showed (librdkafka 2.12.1):
//! - it auto-creates a topic a client asks for only when the client allows
//!   it: with the sink's `allow.auto.create.topics=false` a missing topic is
//!   `SinkGone`; with `properties: {allow.auto.create.topics: true}` the
//!   record is delivered to a new topic;
//! - injected `REQUEST_TIMED_OUT` / `NOT_LEADER_FOR_PARTITION` /
//!   `_TRANSPORT` on Produce are retried inside librdkafka (the idempotent
//!   producer keeps the partition's order and writes each record once), so the
//!   sink answers `Ok`; a broker that stays down past `timeout_ms` is `Retry`;
//! - the mock checks idempotent sequence numbers only for transactional
//!   producers: with two Produce requests in flight for one partition and an
//!   error injected on the first, it appends the second, and librdkafka takes
//!   that ack as proof the first was persisted (an "implicit ack",
//!   confluentinc/librdkafka#2501) although the mock never wrote it. A real
//!   broker answers OUT_OF_ORDER_SEQUENCE_NUMBER instead. These tests deliver
//!   one hook at a time, so the case does not arise here; the relay's test
//!   (tests/it/kafka.rs) sets `max.in.flight: 1` for its injected errors.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ankusa_sinks::kafka::{KafkaSink, KafkaSinkConfig};
use ankusa_sinks::{DeliveryCtx, Options, Outcome, Sink, SinkError};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::json;

use crate::{SHOPIFY_BODY, ctx, hook, ordered_ctx};

/// Partitions of every test topic.
const PARTITIONS: i32 = 3;

/// Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), written
/// from the Java source independently of librdkafka's.
fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h = SEED ^ (len as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The Java client's default partition of a keyed record:
/// `Utils.toPositive(Utils.murmur2(key)) % numPartitions`.
fn java_partition(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions
}

#[test]
fn murmur2_matches_the_java_client() {
    // Kafka's UtilsTest.testMurmur2.
    let vectors: [(&[u8], i32); 6] = [
        (b"21", -973_932_308),
        (b"foobar", -790_332_482),
        (b"a-little-bit-long-string", -985_981_536),
        (b"a-little-bit-longer-string", -1_486_304_829),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        (b"abc", 479_470_107),
    ];
    for (key, hash) in vectors {
        assert_eq!(murmur2(key), hash, "{}", String::from_utf8_lossy(key));
    }
    // toPositive(-790332482) = 1357151166; % 50 = 16, % 3 = 0.
    assert_eq!(java_partition(b"foobar", 50), 16);
    assert_eq!(java_partition(b"foobar", 3), 0);
    assert_eq!(
        java_partition(b"21", 3),
        (-973_932_308i32 & 0x7fff_ffff) % 3
    );
}

/// A name unique to this process and test.
fn topic(test: &str) -> String {
    format!("ankusa-test-{}-{test}", std::process::id())
}

/// A mock cluster of one broker with `topics` created (3 partitions each).
fn cluster(topics: &[&str]) -> MockCluster<'static, DefaultProducerContext> {
    let mock = MockCluster::new(1).expect("mock cluster");
    for t in topics {
        mock.create_topic(t, PARTITIONS, 1).expect("create topic");
    }
    mock
}

fn options(v: serde_json::Value) -> Options {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Options::new(),
    }
}

async fn sink(v: serde_json::Value) -> KafkaSink {
    let config = KafkaSinkConfig::from_options(&options(v)).expect("valid options");
    KafkaSink::new(&config).await.expect("sink")
}

/// One consumed record.
#[derive(Debug, Clone)]
struct Record {
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    body: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// Every record of `topic`, partition by partition in offset order: reads
/// each partition from the start up to its high watermark (so the count is
/// exact, not "what arrived in time").
async fn consume(servers: &str, topic: &str) -> Vec<Record> {
    let (servers, topic) = (servers.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || consume_blocking(&servers, &topic))
        .await
        .expect("consumer thread")
}

fn consume_blocking(servers: &str, topic: &str) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "ankusa-test")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .expect("consumer");
    let mut high = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        let (low, hw) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .expect("watermarks");
        assert_eq!(low, 0);
        high.insert(p, hw);
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("assign offset");
    }
    consumer.assign(&tpl).expect("assign");
    let total: i64 = high.values().sum();
    let mut out: Vec<Record> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (out.len() as i64) < total {
        assert!(
            Instant::now() < deadline,
            "consumed {} of {total} records",
            out.len()
        );
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let msg = msg.expect("consume");
        let headers = msg
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        (
                            h.key.to_owned(),
                            h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(Record {
            partition: msg.partition(),
            offset: msg.offset(),
            key: msg.key().map(<[u8]>::to_vec),
            body: msg.payload().map(<[u8]>::to_vec).unwrap_or_default(),
            headers,
        });
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// Delivers like the pipeline does for one lane: again after each `Retry`,
/// and the next hook only after `Ok`. Returns how many retries it took.
async fn deliver_until_ok(s: &KafkaSink, body: &[u8], ctx: &DeliveryCtx) -> usize {
    let mut retries = 0;
    loop {
        match s.deliver(&hook(body), ctx).await {
            Outcome::Ok => return retries,
            Outcome::Retry { .. } if retries < 20 => retries += 1,
            other => panic!("{}: {other:?}", String::from_utf8_lossy(body)),
        }
    }
}

/// Keys of several customers; between them they use every partition of 3.
const CUSTOMERS: [&[u8]; 6] = [
    b"cus_NffrFeUfNV2Hib",
    b"cus_9s6XKzkNRiz8i3",
    b"cus_OaBHnd2nb8lhyk",
    b"cus_1",
    b"cus_2",
    b"cus_4",
];

#[tokio::test]
async fn ordered_keys_land_on_their_murmur2_partition_in_order() {
    let t = topic("ordered");
    let mock = cluster(&[&t]);
    let servers = mock.bootstrap_servers();
    let s = sink(json!({"brokers": servers, "topic": t})).await;
    assert_eq!(s.kind(), "kafka");
    let used: std::collections::BTreeSet<i32> = CUSTOMERS
        .iter()
        .map(|k| java_partition(k, PARTITIONS))
        .collect();
    assert_eq!(used.len(), 3, "the keys should cover every partition");

    // Interleaved lanes, each lane's hooks one at a time.
    let rounds = 15;
    for i in 0..rounds {
        for key in CUSTOMERS {
            let body = format!("{}:{i}", String::from_utf8_lossy(key));
            assert_eq!(
                s.deliver(&hook(body.as_bytes()), &ordered_ctx(key)).await,
                Outcome::Ok
            );
        }
    }

    let records = consume(&servers, &t).await;
    assert_eq!(records.len(), rounds * CUSTOMERS.len());
    for key in CUSTOMERS {
        let name = String::from_utf8_lossy(key);
        let mine: Vec<&Record> = records
            .iter()
            .filter(|r| r.key.as_deref() == Some(key))
            .collect();
        assert_eq!(mine.len(), rounds, "{name}");
        let expected = java_partition(key, PARTITIONS);
        for (i, r) in mine.iter().enumerate() {
            assert_eq!(
                r.partition, expected,
                "{name} is on the Java client's partition"
            );
            assert_eq!(r.body, format!("{name}:{i}").as_bytes(), "{name} in order");
            assert_eq!(r.header("ankusa_ordering_key"), Some(key));
        }
    }
}

#[tokio::test]
async fn headers_key_and_body_are_exact() {
    let t = topic("exact");
    let keyed = topic("exact-keyed");
    let mock = cluster(&[&t, &keyed]);
    let servers = mock.bootstrap_servers();
    let s = sink(json!({"brokers": servers, "topic": t})).await;

    // Unordered: no key, the metadata and the content type as headers.
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    // Bytes that are not UTF-8, an empty body, no content type anywhere.
    let odd: Vec<u8> = (0..=255u8).rev().collect();
    let bare_ctx = DeliveryCtx {
        content_type: None,
        ..ctx()
    };
    let mut bare = hook(&odd);
    bare.headers.clear();
    assert_eq!(s.deliver(&bare, &bare_ctx).await, Outcome::Ok);
    // The stored header when the context has none.
    assert_eq!(s.deliver(&hook(b""), &bare_ctx).await, Outcome::Ok);
    // Ordered: the lane's key (not UTF-8 here) is the record key.
    let lane_key = b"cus_\xff_1".as_slice();
    assert_eq!(
        s.deliver(&hook(b"{}"), &ordered_ctx(lane_key)).await,
        Outcome::Ok
    );

    let records = consume(&servers, &t).await;
    assert_eq!(records.len(), 4);
    let find = |body: &[u8]| -> Record {
        records
            .iter()
            .find(|r| r.body == body)
            .cloned()
            .expect("the record")
    };
    let c = ctx();
    let first = find(SHOPIFY_BODY);
    assert_eq!(first.key, None);
    assert_eq!(crate::sha256_hex(&first.body), crate::SHOPIFY_SHA256);
    let expected: Vec<(String, Vec<u8>)> = vec![
        ("ankusa_message_version".into(), b"1".to_vec()),
        (
            "ankusa_idempotency_key".into(),
            c.idempotency_key.clone().into_bytes(),
        ),
        ("ankusa_tenant".into(), b"acme".to_vec()),
        ("ankusa_source".into(), b"shopify".to_vec()),
        ("ankusa_received_at".into(), b"1764500000123".to_vec()),
        ("content_type".into(), b"application/json".to_vec()),
    ];
    assert_eq!(first.headers, expected);
    let second = find(&odd);
    assert_eq!(second.headers, expected[..5].to_vec());
    let third = find(b"");
    assert_eq!(third.headers, expected);
    let fourth = find(b"{}");
    assert_eq!(fourth.key.as_deref(), Some(lane_key));
    assert_eq!(fourth.partition, java_partition(lane_key, PARTITIONS));
    let mut ordered = expected[..5].to_vec();
    ordered.push((
        "ankusa_ordering_key".into(),
        "cus_\u{fffd}_1".as_bytes().to_vec(),
    ));
    ordered.push(("ankusa_lane_seq".into(), b"3".to_vec()));
    ordered.push(("content_type".into(), b"application/json".to_vec()));
    assert_eq!(fourth.headers, ordered);

    // Unordered with a key template.
    let s = sink(json!({"brokers": servers, "topic": keyed, "key": "{tenant}/{idempotency_key}"}))
        .await;
    assert_eq!(s.deliver(&hook(b"k"), &ctx()).await, Outcome::Ok);
    // An ordered row still uses the lane's key.
    assert_eq!(
        s.deliver(&hook(b"o"), &ordered_ctx(b"cus_1")).await,
        Outcome::Ok
    );
    let records = consume(&servers, &keyed).await;
    assert_eq!(records.len(), 2);
    let k = records.iter().find(|r| r.body == b"k").expect("k");
    let want = format!("acme/{}", c.idempotency_key);
    assert_eq!(k.key.as_deref(), Some(want.as_bytes()));
    assert_eq!(k.partition, java_partition(want.as_bytes(), PARTITIONS));
    let o = records.iter().find(|r| r.body == b"o").expect("o");
    assert_eq!(o.key.as_deref(), Some(&b"cus_1"[..]));
}

#[tokio::test]
async fn topic_template_uses_tenant_and_source() {
    let t = topic("tpl");
    let full = format!("{t}.acme.shopify");
    let mock = cluster(&[&full]);
    let servers = mock.bootstrap_servers();
    let s = sink(json!({"brokers": servers, "topic": format!("{t}.{{tenant}}.{{source}}")})).await;
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    assert_eq!(consume(&servers, &full).await.len(), 1);
    // A tenant name that renders an illegal topic name is permanent.
    let bad = DeliveryCtx {
        tenant: "ac me".into(),
        ..ctx()
    };
    match s.deliver(&hook(b"{}"), &bad).await {
        Outcome::Permanent { reason } => assert!(reason.contains("topic name"), "{reason}"),
        other => panic!("expected Permanent, got {other:?}"),
    }
}

#[tokio::test]
async fn injected_produce_errors_retry_without_reordering_a_lane() {
    let t = topic("inject");
    let mock = cluster(&[&t]);
    let servers = mock.bootstrap_servers();
    let s = sink(json!({"brokers": servers, "topic": t, "timeout_ms": 10000})).await;
    // Warm up: metadata and the producer id.
    assert_eq!(
        s.deliver(&hook(b"warm"), &ordered_ctx(b"cus_0")).await,
        Outcome::Ok
    );

    use RDKafkaRespErr::*;
    let errors = [
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR__TRANSPORT,
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
    ];
    let mut retries = 0;
    let rounds = 8;
    for i in 0..rounds {
        // A burst of errors now and then, for whichever Produce comes next.
        if i % 3 == 0 {
            mock.request_errors(RDKafkaApiKey::Produce, &errors);
        }
        for key in &CUSTOMERS[..3] {
            let body = format!("{}:{i}", String::from_utf8_lossy(key));
            retries += deliver_until_ok(&s, body.as_bytes(), &ordered_ctx(key)).await;
        }
    }
    mock.clear_request_errors(RDKafkaApiKey::Produce);

    let records = consume(&servers, &t).await;
    for key in &CUSTOMERS[..3] {
        let name = String::from_utf8_lossy(key);
        let bodies: Vec<String> = records
            .iter()
            .filter(|r| r.key.as_deref() == Some(*key))
            .inspect(|r| assert_eq!(r.partition, java_partition(key, PARTITIONS)))
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .collect();
        // At-least-once: a hook the sink answered Retry for may be there
        // twice, adjacent; its first occurrences are in order.
        let mut firsts: Vec<String> = Vec::new();
        for b in &bodies {
            if !firsts.contains(b) {
                firsts.push(b.clone());
            }
        }
        let want: Vec<String> = (0..rounds).map(|i| format!("{name}:{i}")).collect();
        assert_eq!(firsts, want, "{name}");
        if retries == 0 {
            // librdkafka retried inside the delivery bound: exactly once.
            assert_eq!(bodies, want, "{name}");
        }
    }
    eprintln!("sink-level retries under injected errors: {retries}");
}

#[tokio::test]
async fn a_down_broker_is_retry_and_the_sink_recovers() {
    let t = topic("down");
    let mock = cluster(&[&t]);
    let servers = mock.bootstrap_servers();
    let s = sink(json!({"brokers": servers, "topic": t, "timeout_ms": 1500})).await;
    assert_eq!(
        s.deliver(&hook(b"0"), &ordered_ctx(b"cus_1")).await,
        Outcome::Ok
    );
    mock.broker_down(1).expect("broker down");
    match s.deliver(&hook(b"1"), &ordered_ctx(b"cus_1")).await {
        Outcome::Retry { reason, after } => {
            assert_eq!(after, None);
            assert!(reason.starts_with("Kafka produce to"), "{reason}");
        }
        other => panic!("expected Retry, got {other:?}"),
    }
    mock.broker_up(1).expect("broker up");
    deliver_until_ok(&s, b"1", &ordered_ctx(b"cus_1")).await;
    assert_eq!(
        s.deliver(&hook(b"2"), &ordered_ctx(b"cus_1")).await,
        Outcome::Ok
    );
    let bodies: Vec<Vec<u8>> = consume(&servers, &t)
        .await
        .into_iter()
        .map(|r| r.body)
        .collect();
    let mut firsts: Vec<Vec<u8>> = Vec::new();
    for b in bodies {
        if !firsts.contains(&b) {
            firsts.push(b);
        }
    }
    assert_eq!(firsts, [b"0".to_vec(), b"1".to_vec(), b"2".to_vec()]);
}

#[tokio::test]
async fn the_sink_is_built_while_no_broker_listens() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let s = sink(json!({"brokers": format!("127.0.0.1:{port}"), "topic": "t", "timeout_ms": 1000}))
        .await;
    match s.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Retry { reason, .. } => assert!(reason.contains("Kafka produce to t"), "{reason}"),
        other => panic!("expected Retry, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_topic_is_sink_gone() {
    let t = topic("present");
    let missing = topic("missing");
    let mock = cluster(&[&t]);
    let servers = mock.bootstrap_servers();
    let s = sink(json!({"brokers": servers, "topic": missing, "timeout_ms": 5000})).await;
    match s.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::SinkGone { reason } => assert!(reason.contains(&missing), "{reason}"),
        other => panic!("expected SinkGone, got {other:?}"),
    }
    // The next delivery to it too, and quickly (librdkafka remembers).
    assert!(matches!(
        s.deliver(&hook(b"{}"), &ctx()).await,
        Outcome::SinkGone { .. }
    ));

    // With auto-creation allowed, the mock creates the topic.
    let created = topic("autocreated");
    let s = sink(json!({
        "brokers": servers, "topic": created, "timeout_ms": 5000,
        "properties": {"allow.auto.create.topics": true}
    }))
    .await;
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
}

#[tokio::test]
async fn refused_records_are_permanent() {
    let t = topic("refused");
    let mock = cluster(&[&t]);
    let servers = mock.bootstrap_servers();
    let s = sink(json!({"brokers": servers, "topic": t, "timeout_ms": 5000})).await;
    // Over librdkafka's message.max.bytes (1000000): refused before sending.
    let big = vec![b'x'; 1_100_000];
    match s.deliver(&hook(&big), &ctx()).await {
        Outcome::Permanent { reason } => {
            assert!(reason.to_lowercase().contains("too large"), "{reason}")
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
    // The broker refusing the record's size, or the topic's authorization.
    assert_eq!(s.deliver(&hook(b"ok"), &ctx()).await, Outcome::Ok);
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    match s.deliver(&hook(b"big"), &ctx()).await {
        Outcome::Permanent { reason } => {
            assert!(reason.to_lowercase().contains("too large"), "{reason}")
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    match s.deliver(&hook(b"denied"), &ctx()).await {
        Outcome::Permanent { reason } => {
            assert!(reason.to_lowercase().contains("authoriz"), "{reason}")
        }
        other => panic!("expected Permanent, got {other:?}"),
    }
    // The producer still works (librdkafka may fail the topic's records
    // until its next metadata refresh: each of those is Permanent too).
    let mut refused = 0;
    loop {
        match s.deliver(&hook(b"after"), &ctx()).await {
            Outcome::Ok => break,
            Outcome::Permanent { reason } if refused < 100 && reason.contains("authoriz") => {
                refused += 1
            }
            other => panic!("expected Ok, got {other:?} after {refused} refusals"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("records refused after the injected authorization failure: {refused}");
    let bodies: Vec<Vec<u8>> = consume(&servers, &t)
        .await
        .into_iter()
        .map(|r| r.body)
        .collect();
    assert_eq!(
        bodies.iter().filter(|b| b.as_slice() == b"after").count(),
        1
    );
    assert!(!bodies.iter().any(|b| b.len() == big.len()));
}

#[test]
fn bad_options_are_load_errors_naming_the_option() {
    let invalid = |v: serde_json::Value| -> (String, String) {
        match KafkaSinkConfig::from_options(&options(v)) {
            Err(SinkError::InvalidOption { option, reason }) => (option, reason),
            Err(SinkError::MissingOption { option }) => (option.to_owned(), "missing".into()),
            Err(SinkError::UnknownOption { option, .. }) => (option, "unknown".into()),
            other => panic!("expected an option error, got {other:?}"),
        }
    };
    assert_eq!(invalid(json!({"topic": "t"})).0, "brokers");
    assert_eq!(invalid(json!({"brokers": "a:9092"})).0, "topic");
    assert_eq!(
        invalid(json!({"brokers": "a:9092", "topic": "a b"})).0,
        "topic"
    );
    assert_eq!(
        invalid(json!({"brokers": "a:9092", "topic": "t", "partitions": 3})).0,
        "partitions"
    );
    for reserved in [
        "enable.idempotence",
        "acks",
        "partitioner",
        "message.timeout.ms",
    ] {
        let (option, reason) =
            invalid(json!({"brokers": "a:9092", "topic": "t", "properties": {reserved: "1"}}));
        assert_eq!(option, format!("properties.{reserved}"));
        assert!(reason.contains("cannot be set"), "{reason}");
    }
    // librdkafka's parser: unknown names, bad values, features this build
    // does not have (no OpenSSL, no zlib).
    let (option, reason) = invalid(
        json!({"brokers": "a:9092", "topic": "t", "properties": {"sasl.mechanizm": "PLAIN"}}),
    );
    assert_eq!(option, "properties.sasl.mechanizm", "{reason}");
    let (option, reason) = invalid(
        json!({"brokers": "a:9092", "topic": "t", "properties": {"security.protocol": "ssl"}}),
    );
    assert_eq!(option, "properties.security.protocol", "{reason}");
    let (option, reason) = invalid(
        json!({"brokers": "a:9092", "topic": "t", "properties": {"compression.type": "gzip"}}),
    );
    assert_eq!(option, "properties.compression.type", "{reason}");
    let (option, _) =
        invalid(json!({"brokers": "a:9092", "topic": "t", "properties": {"linger.ms": -5}}));
    assert_eq!(option, "properties.linger.ms");
    // What this build does have.
    for (name, value) in [
        ("sasl.mechanism", "PLAIN"),
        ("compression.type", "snappy"),
        ("compression.type", "lz4"),
        ("client.id", "ankusa"),
    ] {
        KafkaSinkConfig::from_options(&options(
            json!({"brokers": "a:9092", "topic": "t", "properties": {name: value}}),
        ))
        .unwrap_or_else(|e| panic!("{name}={value}: {e}"));
    }
    // SASL PLAIN over plaintext: accepted at load, and the producer is built
    // (librdkafka checks the mechanism only then).
    let config = KafkaSinkConfig::from_options(&options(json!({
        "brokers": "127.0.0.1:9", "topic": "t",
        "properties": {"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                       "sasl.username": "u", "sasl.password": "p"}
    })))
    .expect("SASL PLAIN");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(KafkaSink::new(&config))
        .expect("a SASL PLAIN producer");
    // Other mechanisms are refused at load, naming the property.
    let (option, reason) = invalid(json!({
        "brokers": "a:9092", "topic": "t",
        "properties": {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-512"}
    }));
    assert_eq!(option, "properties.sasl.mechanism", "{reason}");
    // Several bad properties (and options) at once: every one is named in one
    // error, librdkafka's refusals included.
    let e = KafkaSinkConfig::from_options(&options(json!({
        "brokers": "a:9092", "topic": "a b", "partitions": 3,
        "properties": {"linger.ms": "abc", "no.such.property": 1, "acks": "0", "security.protocol": "ssl"}
    })))
    .expect_err("six problems");
    let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
    assert_eq!(
        names,
        [
            "partitions",
            "properties.acks",
            "properties.linger.ms",
            "properties.no.such.property",
            "properties.security.protocol",
            "topic",
        ],
        "{e}"
    );
}
