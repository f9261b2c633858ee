//! The Kafka sink through the relay: the Stripe corpus into an ordered topic of
//! 3 partitions on librdkafka's in-process mock cluster
//! (`rdkafka::mocking::MockCluster`, real Kafka protocol on a loopback port, in
//! this test process), read back from every partition; then the same with
//! errors injected into the mock's Produce handling and a broker that goes down
//! and comes back.
//!
//! At-least-once: the idempotent producer keeps librdkafka's own retries from
//! duplicating or reordering records, but a delivery the sink answered
//! `Retry` for (its delivery report timed out while the broker was down) is
//! produced again by the pipeline, so a hook may be in the topic twice,
//! directly after its first copy in its key's sequence
//! (`stripe::check_at_least_once`). Per-key order and "every hook at least
//! once" are what the contract promises and what is asserted.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::peer::unique;
use crate::relay::{Relay, config, run_cli};
use crate::sink::until;
use crate::stripe::{self, Received};

const PARTITIONS: i32 = 3;

/// A one-broker mock cluster with `topic` (3 partitions).
fn cluster(topic: &str) -> MockCluster<'static, DefaultProducerContext> {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic(topic, PARTITIONS, 1)
        .expect("create topic");
    mock
}

/// Kafka's murmur2 (the Java client's `Utils.murmur2`).
fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h = 0x9747_b28c_u32 ^ (data.len() as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]).wrapping_mul(M);
        k ^= k >> 24;
        h = h.wrapping_mul(M) ^ k.wrapping_mul(M);
    }
    for (i, b) in tail.iter().enumerate().rev() {
        h ^= u32::from(*b) << (8 * i);
    }
    if !tail.is_empty() {
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    (h ^ (h >> 15)) as i32
}

/// The Java client's partition of a keyed record.
fn java_partition(key: &[u8]) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % PARTITIONS
}

/// One consumed record: its partition and what `stripe::check` reads.
struct Record {
    partition: i32,
    key: Option<Vec<u8>>,
    received: Received,
}

/// Every record of `topic`, partition after partition in offset order, read
/// up to each partition's high watermark (an exact count).
async fn consume(servers: &str, topic: &str) -> Vec<Record> {
    let (servers, topic) = (servers.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", "ankusa-it")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut total = 0;
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            let (_, high) = consumer
                .fetch_watermarks(&topic, p, Duration::from_secs(10))
                .expect("watermarks");
            total += high;
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .expect("offset");
        }
        consumer.assign(&tpl).expect("assign");
        // Keyed by position: a record fetched twice (a consumer-side
        // refetch) is one record of the log.
        let mut out: BTreeMap<(i32, i64), Record> = BTreeMap::new();
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
            let mut received = Received {
                body: msg.payload().unwrap_or_default().to_vec(),
                ..Received::default()
            };
            if let Some(headers) = msg.headers() {
                for h in headers.iter() {
                    let value = String::from_utf8(h.value.unwrap_or_default().to_vec())
                        .expect("header value is UTF-8");
                    received.attrs.insert(h.key.to_owned(), value);
                }
            }
            let record = Record {
                partition: msg.partition(),
                key: msg.key().map(<[u8]>::to_vec),
                received,
            };
            if let Some(before) = out.insert((msg.partition(), msg.offset()), record) {
                eprintln!(
                    "partition {} offset {} fetched twice ({:?})",
                    msg.partition(),
                    msg.offset(),
                    before.key
                );
            }
        }
        out.into_values().collect()
    })
    .await
    .expect("consumer thread")
}

/// Each key on one partition, the one the Java client would pick, and the
/// record key equal to the `ankusa_ordering_key` header.
fn check_partitions(records: &[Record]) -> BTreeMap<String, i32> {
    let mut partition_of: BTreeMap<String, i32> = BTreeMap::new();
    for r in records {
        let key = r.received.attrs["ankusa_ordering_key"].clone();
        assert_eq!(
            r.key.as_deref(),
            Some(key.as_bytes()),
            "the record key is the lane's key"
        );
        assert_eq!(
            r.partition,
            java_partition(key.as_bytes()),
            "{key}: not on its murmur2 partition"
        );
        let p = *partition_of.entry(key.clone()).or_insert(r.partition);
        assert_eq!(p, r.partition, "{key} on two partitions");
    }
    partition_of
}

fn ordered_sink(servers: &str, topic: &str, extra: &str) -> String {
    format!(
        "[{{type: kafka, name: events, brokers: '{servers}', topic: '{topic}'{extra}, ordered: true, ordering_key: {{json: data.object.customer}}}}]"
    )
}

/// Waits until every accepted hook is settled (nothing pending) and returns
/// the metrics then; fails with the relay's log.
async fn drained(relay: &Relay, within: Duration) -> std::collections::HashMap<String, f64> {
    let deadline = Instant::now() + within;
    loop {
        let m = relay.metrics().await;
        if m["ankusa_queue_pending"] == 0.0 {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "queue not drained after {within:?}: {m:?}\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn murmur2_is_the_java_clients() {
    // Kafka's UtilsTest.testMurmur2 vectors.
    assert_eq!(murmur2(b"21"), -973_932_308);
    assert_eq!(murmur2(b"foobar"), -790_332_482);
    assert_eq!(murmur2(b"a-little-bit-longer-string"), -1_486_304_829);
    assert_eq!(murmur2(b"abc"), 479_470_107);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_corpus_through_an_ordered_topic_one_partition_per_customer_in_order() {
    let topic = unique("stripe");
    let mock = cluster(&topic);
    let servers = mock.bootstrap_servers();
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 10, max_ms: 200}}\n{}",
            stripe::source_yaml(&ordered_sink(&servers, &topic, ""))
        ),
    ))
    .await;
    let sent = stripe::send(&relay, &stripe::hooks(4)).await;
    assert_eq!(sent.len(), 40);
    let m = drained(&relay, Duration::from_secs(60)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 40.0, "{m:?}");
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );

    let records = consume(&servers, &topic).await;
    let got: Vec<Received> = records.iter().map(|r| r.received.clone()).collect();
    stripe::check(&sent, &got);
    let content_type = stripe::hooks(1)[0]
        .header("content-type")
        .expect("corpus content type")
        .to_owned();
    for r in &got {
        assert_eq!(r.attrs.get("content_type"), Some(&content_type));
    }
    let partitions = check_partitions(&records);
    // Four lanes (three customers and the keyless one) over the partitions.
    assert_eq!(partitions.len(), 4, "{partitions:?}");
    let used: BTreeSet<i32> = partitions.values().copied().collect();
    assert!(used.len() >= 2, "all keys on one partition: {partitions:?}");
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_errors_and_a_down_broker_every_hook_arrives_in_order_per_customer() {
    let topic = unique("faults");
    let mock = cluster(&topic);
    let servers = mock.bootstrap_servers();
    // A short delivery bound so a down broker turns into sink-level retries.
    //
    // One request in flight per connection: the mock checks idempotent
    // sequence numbers only for transactional producers, so with two Produce
    // requests R1, R2 in flight for a partition it appends R2 after an
    // injected error on R1, where a real broker answers
    // OUT_OF_ORDER_SEQUENCE_NUMBER; librdkafka then takes R2's ack as proof
    // that R1 was persisted ("implicit ack", confluentinc/librdkafka#2081,
    // #2501) and R1's hook is reported delivered but is not in the mock's
    // log. Observed here with the default max.in.flight (5): the first hook
    // of a partition missing in about half the runs.
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 20, max_ms: 300}}\nbreaker: {{failures: 5, open_ms: 300}}\n{}",
            stripe::source_yaml(&ordered_sink(
                &servers,
                &topic,
                ", timeout_ms: 1000, properties: {max.in.flight: 1}"
            ))
        ),
    ))
    .await;
    use RDKafkaRespErr::*;
    let burst = [
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR__TRANSPORT,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
    ];

    // Injected Produce errors: librdkafka retries them (or the sink answers
    // Retry and the pipeline does).
    let mut sent = Vec::new();
    for round in 0..3 {
        mock.request_errors(RDKafkaApiKey::Produce, &burst);
        sent.extend(stripe::send(&relay, &stripe::hooks_in(round..round + 1)).await);
    }
    drained(&relay, Duration::from_secs(60)).await;
    mock.clear_request_errors(RDKafkaApiKey::Produce);

    // The broker down: two rounds are accepted and wait in their lanes, the
    // heads retrying; then it is back.
    mock.broker_down(1).expect("broker down");
    sent.extend(stripe::send(&relay, &stripe::hooks_in(3..5)).await);
    until(
        "heads retrying while the broker is down",
        Duration::from_secs(60),
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_retries_total"] >= 2.0 && m["ankusa_dispatch_lanes_blocked"] >= 1.0)
                .then_some(())
        },
    )
    .await;
    mock.broker_up(1).expect("broker up");
    let m = drained(&relay, Duration::from_secs(60)).await;
    assert_eq!(sent.len(), 50);
    assert_eq!(m["ankusa_dispatch_delivered_total"], 50.0, "{m:?}");
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0,
        "{m:?}"
    );

    let records = consume(&servers, &topic).await;
    let got: Vec<Received> = records.iter().map(|r| r.received.clone()).collect();
    let ids: BTreeSet<&str> = got
        .iter()
        .filter_map(|r| r.attrs.get("ankusa_idempotency_key").map(String::as_str))
        .collect();
    let missing: Vec<(&str, &str, &str)> = sent
        .iter()
        .filter(|s| !ids.contains(s.id.as_str()))
        .map(|s| (s.file.as_str(), s.id.as_str(), s.key.as_str()))
        .collect();
    if !missing.is_empty() {
        eprintln!("not in the topic: {missing:?}; relay log:\n{}", relay.log());
    }
    let repeats = stripe::check_at_least_once(&sent, &got);
    assert_eq!(got.len(), 50 + repeats);
    check_partitions(&records);
    eprintln!("records repeated after sink-level retries: {repeats}");
    drop(relay);
}

#[test]
fn kafka_options_are_checked_at_load_naming_source_sink_and_option() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let data = dir.join("data");
    let yaml = |sink: &str| {
        format!(
            "node: {{data_dir: '{}', store: rocksdb}}\nlisteners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}\nsources:\n  - name: billing\n    sinks:\n      - {sink}\n",
            data.display()
        )
    };
    for (sink, expected) in [
        (
            "{type: kafka, name: orders, topic: t}",
            "source \"billing\", sink \"orders\" (kafka): option \"brokers\": required",
        ),
        (
            "{type: kafka, name: orders, brokers: 'k:9092'}",
            "source \"billing\", sink \"orders\" (kafka): option \"topic\": required",
        ),
        (
            "{type: kafka, name: orders, brokers: 'k:9092', topic: 'a/{source}'}",
            "source \"billing\", sink \"orders\" (kafka): option \"topic\": ",
        ),
        (
            "{type: kafka, name: orders, brokers: 'k:9092', topic: t, properties: {acks: '1'}}",
            "source \"billing\", sink \"orders\" (kafka): option \"properties.acks\": cannot be set",
        ),
        (
            "{type: kafka, name: orders, brokers: 'k:9092', topic: t, properties: {socket.timeout.mz: 5}}",
            "source \"billing\", sink \"orders\" (kafka): option \"properties.socket.timeout.mz\": ",
        ),
    ] {
        let file = dir.join("bad.yaml");
        std::fs::write(&file, yaml(sink)).expect("write");
        for args in [
            vec![OsStr::new("check-config"), file.as_os_str()],
            vec![
                OsStr::new("serve"),
                OsStr::new("--config"),
                file.as_os_str(),
            ],
        ] {
            let (status, out) = run_cli(&args, dir);
            assert!(!status.success(), "{args:?} accepted {sink}:\n{out}");
            assert!(
                out.contains(expected),
                "{args:?} output lacks\n  {expected}\ngot:\n{out}"
            );
        }
        assert!(
            !data.exists(),
            "serve created the data_dir of an invalid config"
        );
    }
    let file = dir.join("good.yaml");
    std::fs::write(
        &file,
        yaml("{type: kafka, name: orders, brokers: 'k1:9092,k2:9092', topic: 'hooks.{tenant}.{source}', key: '{idempotency_key}', properties: {client.id: ankusa, linger.ms: 10}}"),
    )
    .expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(status.success(), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_starts_while_no_broker_listens_and_delivers_once_it_does() {
    // The cluster's only broker is down (its port refuses connections) when
    // the relay starts: the sink is built anyway, the hooks are accepted and
    // retry, and arrive once the broker is up.
    let topic = unique("late");
    let mock = cluster(&topic);
    let servers = mock.bootstrap_servers();
    mock.broker_down(1).expect("broker down");
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "retry: {{base_ms: 20, max_ms: 300}}\nbreaker: {{failures: 5, open_ms: 300}}\n{}",
            stripe::source_yaml(&ordered_sink(&servers, &topic, ", timeout_ms: 1000"))
        ),
    ))
    .await;
    let sent = stripe::send(&relay, &stripe::hooks(1)).await;
    until(
        "deliveries retrying while the broker is down",
        Duration::from_secs(60),
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_retries_total"] >= 1.0).then_some(())
        },
    )
    .await;
    mock.broker_up(1).expect("broker up");
    let m = drained(&relay, Duration::from_secs(60)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 10.0, "{m:?}");
    let records = consume(&servers, &topic).await;
    let got: Vec<Received> = records.iter().map(|r| r.received.clone()).collect();
    let repeats = stripe::check_at_least_once(&sent, &got);
    assert_eq!(got.len(), 10 + repeats);
    check_partitions(&records);
    drop(relay);
}

/// Provider headers: GitHub and Shopify hooks through a sink with
/// `forward_headers`: each record carries the chosen provider headers as record
/// headers (lower-case names, the provider's values) beside the `ankusa_*`
/// metadata and `content_type`, and none of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_headers_chosen_arrive_as_record_headers() {
    use crate::provider;
    let topic = unique("headers");
    let mock = cluster(&topic);
    let servers = mock.bootstrap_servers();
    let sink = format!(
        "{{type: kafka, name: events, brokers: '{servers}', topic: '{topic}', forward_headers: {}}}",
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
    let records = consume(&servers, &topic).await;
    let got: Vec<Received> = records.iter().map(|r| r.received.clone()).collect();
    let by_id = provider::check(&sent, &got, &provider::CHOSEN);
    for s in &sent {
        assert_eq!(
            by_id[&s.id].attrs.get("content_type").map(String::as_str),
            s.hook.header("content-type")
        );
    }
    assert_eq!(by_id[&sent[2].id].attrs["x-github-event"], "issues");
    assert_eq!(by_id[&sent[1].id].attrs["x-shopify-topic"], "orders/create");
    assert_eq!(
        m["ankusa_forwarded_headers_dropped_total{sink=\"kafka\"}"],
        0.0
    );
    drop(relay);
}
