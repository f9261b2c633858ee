//! Sinks: where a hook goes after it is committed (docs/design.md section 6, ADR 0004
//! section 6).
//!
//! This crate owns the [`Sink`] trait the pipeline calls, the [`DeliveryCtx`]
//! it passes, the [`Outcome`] every adapter maps its client's answer to, the
//! metadata names every adapter sends ([`meta`]), and the adapters themselves,
//! one directory each behind a cargo feature (docs/contributing.md, "Sinks: one
//! directory and one feature each"; Vector's sinks).
//!
//! What every adapter keeps:
//! - the body goes out byte-identical to what the provider sent (the stored
//!   envelope's `body`), never re-encoded;
//! - the metadata of [`meta`] travels as the medium's headers or attributes,
//!   and in ordered mode the ordering key too (ADR 0004 section 6);
//! - every answer maps to exactly one [`Outcome`]: nothing is "dropped"
//!   (docs/contributing.md, "Explicit outcomes"; vectordotdev/vector#12145).
//!   Throttling, timeouts and connection failures retry; a rejected message is
//!   permanent; a deleted destination is [`Outcome::SinkGone`]. An HTTP error
//!   status is [`Outcome::HttpStatus`], which the sink entry's retry policy
//!   resolves into one of those (docs/design.md section 5, "Retry policy").
//!
//! # Adapters and features
//! | feature (default) | module | sink |
//! | --- | --- | --- |
//! | `http` (on) | [`http`](mod@http) | POST to a URL, optionally signed (Standard Webhooks or one HMAC header); reqwest over rustls with ring (no aws-lc-sys, no OpenSSL) |
//! | `file` (on) | [`file`](mod@file) | NDJSON lines, base64 body, fsync per batch in [`Sink::flush`] |
//! | `redis` (on) | [`redis`](mod@redis) | XADD to a stream (body and metadata as fields), or PUBLISH (fire-and-forget); one multiplexed connection |
//! | `nats` (on) | [`nats`](mod@nats) | JetStream publish, ack awaited, `Nats-Msg-Id` = idempotency key (or core publish + flush); metadata as headers |
//! | `pubsub` (on) | [`pubsub`](mod@pubsub) | Google Pub/Sub REST `:publish` (base64 data, attributes, orderingKey); tokens via gcp_auth (ring), or none for an emulator |
//! | `kafka` (on) | [`kafka`](mod@kafka) | an idempotent producer (acks=all), record key = the lane's key (murmur2 partitioning like the Java client), metadata as headers; librdkafka built from C source |
//! | `sqs` (on) | [`sqs`](mod@sqs) | SendMessage with the metadata as String message attributes; FIFO: MessageGroupId = the lane's key (`sha256:` form when SQS refuses it), MessageDeduplicationId = idempotency key; AWS SDK over rustls with ring |
//! | `rabbitmq` (on) | [`rabbitmq`](mod@rabbitmq) | basic.publish to an exchange with publisher confirms (mandatory: a return is permanent), persistent, `message_id` = idempotency key, metadata as headers; lapin, one connection and a channel pool |
//!
//! Broker and cloud sinks also carry the provider's stored headers a sink
//! entry chooses with `forward_headers` ([`forward`]), within each medium's
//! limits.
//!
//! A sink holds no store handle and no lock across an await: it is given the
//! envelope and the context, and answers.
#![deny(missing_docs, clippy::unwrap_used)]

mod ctx;
mod error;
#[cfg(any(
    feature = "redis",
    feature = "nats",
    feature = "rabbitmq",
    feature = "kafka",
    feature = "pubsub",
    feature = "sqs"
))]
pub mod forward;
pub mod meta;
mod outcome;
mod secret;
#[cfg(any(
    feature = "redis",
    feature = "nats",
    feature = "rabbitmq",
    feature = "kafka",
    feature = "pubsub"
))]
mod template;

use async_trait::async_trait;

pub use ankusa_keys::{Envelope, SinkIx};
pub use ctx::{DeliveryCtx, uuid_text};
pub use error::{OptionProblems, SinkError};
pub use outcome::{Attempted, Outcome, Response};

/// A sink's options as written in its source's sink entry, after core removed
/// the options it reads itself (`ordered`, `ordering_key`; docs/design.md section 7).
///
/// The config crate hands each adapter this neutral map (YAML converts to it
/// one to one); each adapter's `from_options` validates it, names the option
/// in every [`SinkError`], and reports every problem of the map in one error
/// ([`OptionProblems`]).
pub type Options = serde_json::Map<String, serde_json::Value>;

/// One destination of a source's hooks (docs/design.md section 6).
///
/// The pipeline calls [`Sink::deliver`] at most `sink_concurrency` times at
/// once per sink and tenant, and one at a time per ordering lane (a lane's next
/// hook only after the previous one returned [`Outcome::Ok`]). After it has
/// collected a batch of outcomes, and before it commits them, it calls
/// [`Sink::flush`] once on every sink that delivered in the batch: a sink that
/// buffers (the file sink's fsync) makes those deliveries durable there. An
/// `Err` from `flush` means the batch's `Ok` outcomes of that sink are not
/// durable: the pipeline turns them into retries.
#[async_trait]
pub trait Sink: Send + Sync {
    /// Delivers one hook. Never panics on anything the hook contains; maps
    /// every error of its client to an [`Outcome`].
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome;

    /// Delivers one hook as [`Sink::deliver`] does and also says what the
    /// destination answered, for the row's attempt log (docs/design.md
    /// section 6, "What the destination answered"). The pipeline calls this
    /// one. The default reports no answer: a broker's error text travels in
    /// the outcome's reason. The HTTP sink reports its answer's status,
    /// headers and the first [`DeliveryCtx::response_body_max_bytes`] of its
    /// body.
    async fn attempt(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Attempted {
        self.deliver(hook, ctx).await.into()
    }

    /// Makes every delivery that returned [`Outcome::Ok`] since the last flush
    /// durable at the destination. The default does nothing: a sink whose
    /// `deliver` only answers `Ok` once the destination has acknowledged (HTTP,
    /// brokers with confirms) has nothing to flush.
    async fn flush(&self) -> Result<(), SinkError> {
        Ok(())
    }

    /// The adapter's kind, as in the configuration and as the `sink` label of
    /// metrics (`"http"`, `"file"`, ...): never a tenant, key or URL.
    fn kind(&self) -> &'static str;

    /// Whether the adapter's client pipelines its calls (many in flight on
    /// one connection, answered as they complete: Kafka, NATS JetStream,
    /// Redis, RabbitMQ with confirms, Pub/Sub, SQS), so the pipeline may keep
    /// up to `dispatch.pipelined_concurrency` unordered hooks and lanes in
    /// flight per (tenant, sink) instead of `dispatch.sink_concurrency`
    /// (docs/design.md section 5, "Concurrency"). Each lane is still one call
    /// at a time. The default (HTTP, file): no.
    fn pipelined(&self) -> bool {
        false
    }
}

#[cfg(feature = "file")]
pub mod file;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "pubsub")]
pub mod pubsub;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqs")]
pub mod sqs;

/// Helpers of the broker adapters' option tests (http and file have none).
#[cfg(all(
    test,
    any(
        feature = "redis",
        feature = "nats",
        feature = "rabbitmq",
        feature = "kafka",
        feature = "pubsub",
        feature = "sqs"
    )
))]
pub(crate) mod test_support {
    use crate::{Options, SinkError};

    /// `v` as sink options when it is a JSON object; anything else is no
    /// options.
    pub(crate) fn opts(v: serde_json::Value) -> Options {
        match v {
            serde_json::Value::Object(m) => m,
            _ => Options::new(),
        }
    }

    /// The error text `from_options` gives for `v`, or `unexpectedly valid:
    /// <config>` (which no error assertion matches).
    pub(crate) fn error_of<C: std::fmt::Debug>(
        from_options: impl Fn(&Options) -> Result<C, SinkError>,
        v: serde_json::Value,
    ) -> String {
        match from_options(&opts(v)) {
            Ok(c) => format!("unexpectedly valid: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Every problem `from_options` reports for `v`, one string each, or
    /// `["unexpectedly valid: <config>"]`.
    pub(crate) fn problems_of<C: std::fmt::Debug>(
        from_options: impl Fn(&Options) -> Result<C, SinkError>,
        v: serde_json::Value,
    ) -> Vec<String> {
        match from_options(&opts(v)) {
            Ok(c) => vec![format!("unexpectedly valid: {c:?}")],
            Err(e) => e.problems().iter().map(ToString::to_string).collect(),
        }
    }
}
