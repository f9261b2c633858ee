//! The Kafka sink (cargo feature `kafka`, default on): produce each hook as one
//! record with an idempotent librdkafka producer, and answer once the brokers
//! have acknowledged it (docs/design.md section 6, ADR 0004 section 6).
//!
//! # The record
//! - value: the stored body, byte for byte;
//! - key: in ordered mode the lane's key ([`crate::DeliveryCtx::ordering_key`],
//!   bytes as received, or `"<tenant>/<source>"` for the keyless lane);
//!   otherwise the `key` template (`{tenant}`, `{source}`,
//!   `{idempotency_key}`) if configured, else no key;
//! - headers: the metadata of [`crate::DeliveryCtx::attributes`]
//!   (`ankusa_message_version` = `"1"`, `ankusa_idempotency_key`,
//!   `ankusa_tenant`, `ankusa_source`, `ankusa_received_at` in unix ms and,
//!   only for a laned row, `ankusa_ordering_key`), then `content_type`: the
//!   provider's content type (the context's, else the stored `content-type`
//!   header; absent if neither). Header values are UTF-8 text except
//!   `content_type`, which is the stored bytes; with `forward_headers`, the
//!   chosen provider headers follow, named as the lower-case header
//!   ([`crate::forward`], [`FORWARD_MEDIUM`](crate::kafka::FORWARD_MEDIUM));
//! - topic: the `topic` template with `{tenant}` and `{source}` replaced; a
//!   rendered name Kafka would refuse (other than `a-z A-Z 0-9 . _ -`, or
//!   longer than 249) is `Permanent`;
//! - timestamp: the producer's (create time, now); `ankusa_received_at` is
//!   when the hook arrived.
//!
//! # Producer settings
//! `enable.idempotence=true` and `acks=all` (fixed: `properties` may not
//! change them), `partitioner=murmur2_random` (a keyed record goes to
//! `(murmur2(key) & 0x7fffffff) % partitions`, the Java client's default
//! partitioner, so Java/Kafka Streams consumers agree on a key's partition;
//! keyless records are spread at random), `message.timeout.ms` = `timeout_ms`,
//! `allow.auto.create.topics=false` (a missing topic is `SinkGone`, not
//! created from a template; `properties` may turn it back on), and
//! `topic.metadata.propagation.max.ms` = min(`timeout_ms` / 2, 30000) so a
//! missing topic is reported as missing within the delivery bound, and
//! `request.timeout.ms` = min(`timeout_ms`, 30000) (librdkafka fails a record
//! that is in flight only when its request times out).
//! `properties` adds any other librdkafka setting (`client.id`, `linger.ms`,
//! `max.in.flight` 1 to 5,
//! `compression.type`: `none` or `lz4`/`snappy`, which librdkafka bundles;
//! `security.protocol` `plaintext` or `sasl_plaintext` with `sasl.mechanism`
//! `PLAIN`). This build of librdkafka has no OpenSSL, zlib, zstd or Cyrus SASL
//! (no system libraries): `ssl`/`sasl_ssl`, SASL mechanisms other than PLAIN
//! (SCRAM, GSSAPI, OAUTHBEARER) and gzip/zstd are refused at load, naming the
//! property. TLS to the brokers would need rdkafka's `ssl` feature (OpenSSL).
//!
//! # Delivery and ordered mode
//! `deliver` enqueues the record (waiting up to `timeout_ms` for room in
//! librdkafka's queue) and awaits its delivery report: `Ok` means every
//! in-sync replica has the record. librdkafka retries inside
//! `message.timeout.ms` (timeouts, leader changes, disconnects); with
//! idempotence those retries neither duplicate nor reorder a partition's
//! records.
//!
//! The pipeline hands a lane's hooks over one at a time, each after the
//! previous one's `Ok`, and a key always maps to one partition (while the
//! topic's partition count does not change): a lane's records are in order in
//! that partition. Adding partitions moves keys. A delivery that fails
//! (`Retry`) is produced again later, before any later hook of its lane, so a
//! consumer sees the lane in order, possibly with the retried hook twice
//! (at-least-once: dedupe on `ankusa_idempotency_key`). One case can still
//! reorder: a record whose delivery report was a timeout but which the broker
//! nonetheless wrote (the timeout raced the acknowledgement) stays in the log;
//! it is then followed by its own retry, so the first occurrences of a lane's
//! hooks keep their order.
//!
//! # Outcomes
//! | delivery report / error | outcome |
//! | --- | --- |
//! | delivered (acks=all) | [`Outcome::Ok`](crate::Outcome::Ok) |
//! | `_MSG_TIMED_OUT`, `REQUEST_TIMED_OUT`, `_TRANSPORT`, `_ALL_BROKERS_DOWN`, `NOT_LEADER_FOR_PARTITION`, `LEADER_NOT_AVAILABLE`, `NOT_ENOUGH_REPLICAS`, `_QUEUE_FULL` (after waiting `timeout_ms`), throttling, authentication failures, any other error | `Retry` |
//! | `_FATAL` (the idempotent producer gave up) | `Retry`, on a new producer |
//! | `MSG_SIZE_TOO_LARGE` (librdkafka's `message.max.bytes` or the broker's), `TOPIC_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`, `INVALID_RECORD`, `POLICY_VIOLATION`, an illegal topic name | `Permanent` |
//! | `UNKNOWN_TOPIC_OR_PART`, `_UNKNOWN_TOPIC`, `_UNKNOWN_PARTITION` | `SinkGone` |
//!
//! [`outcome_of`] has the full list. A bad option is a
//! [`SinkError`](crate::SinkError) at load that names it (`brokers`, `topic`,
//! `properties.<name>`, ...); librdkafka's own parser checks every property
//! then, without connecting.
//!
//! # Connections
//! One producer per sink, shared by every delivery (librdkafka multiplexes
//! and batches). Creating it does not connect: librdkafka's threads connect
//! to the brokers in the background and reconnect after failures, so a relay
//! starts while Kafka is down and its hooks retry until it is back. After a
//! fatal producer error the sink replaces the producer.
//!
//! # Logs
//! The producer has its own client context, which logs librdkafka's log
//! lines and global errors through `tracing` with `sink = "kafka"` (never
//! the properties, which may hold credentials). With the brokers down
//! librdkafka reports every failed connection attempt, several a second:
//! - a log line is DEBUG, except that a line at WARNING or worse is a WARN
//!   (fields `facility`, `level`) for the first of its facility (`FAIL`,
//!   `ERROR`, ...) and then at most once per 60 s per facility;
//! - a global error (`_ALL_BROKERS_DOWN`, `_TRANSPORT`, ...) is a WARN
//!   (field `code`) at most once per 60 s per error code, else DEBUG.
//!
//! A WARN that follows held-back lines ends with "(N similar lines
//! suppressed in the last 60 s)" and has `suppressed = N`. These lines do
//! not change any delivery's [`Outcome`](crate::Outcome): each failed
//! delivery's reason is logged by the pipeline.

mod config;
mod context;
mod sink;

pub use config::{
    DEFAULT_TIMEOUT_MS, FORWARD_MEDIUM, KafkaSinkConfig, MAX_TIMEOUT_MS, MIN_TIMEOUT_MS,
};
pub use sink::{CONTENT_TYPE_HEADER, KafkaSink, outcome_of};
