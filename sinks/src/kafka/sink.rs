//! The Kafka sink's delivery: the record and the delivery report's
//! [`Outcome`].

use std::borrow::Cow;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;

use super::config::{FORWARD_MEDIUM, KafkaSinkConfig, check_topic, render};
use super::context::KafkaContext;
use crate::forward::{ForwardHeaders, Room};
use crate::{DeliveryCtx, Envelope, Outcome, Sink, SinkError};

/// The record header holding the provider's content type.
pub const CONTENT_TYPE_HEADER: &str = "content_type";

/// Produces each hook as one record and waits for its delivery report (module
/// docs: [`crate::kafka`]).
pub struct KafkaSink {
    /// The producer's configuration, kept to build a new producer after a
    /// fatal error.
    client_config: ClientConfig,
    /// The producers' context (rate-limited librdkafka logs), shared with a
    /// replacement producer.
    context: KafkaContext,
    /// The idempotent producer; replaced (never locked across an await) when
    /// librdkafka reports a fatal error.
    producer: RwLock<Arc<FutureProducer<KafkaContext>>>,
    topic: String,
    key: Option<String>,
    timeout: Duration,
    /// The stored headers each record carries (`forward_headers`).
    forward: ForwardHeaders,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the properties: they may hold passwords.
        f.debug_struct("KafkaSink")
            .field("topic", &self.topic)
            .field("key", &self.key)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Validates `config` and creates the producer. librdkafka connects in
    /// its own threads, in the background: this works while every broker is
    /// down (deliveries then retry). Errors: an invalid option, or a producer
    /// librdkafka refuses to create ([`SinkError::Setup`]).
    pub async fn new(config: &KafkaSinkConfig) -> Result<KafkaSink, SinkError> {
        config.validate()?;
        let client_config = config.client_config();
        let context = KafkaContext::new();
        let producer = create(&client_config, &context)?;
        Ok(KafkaSink {
            client_config,
            context,
            producer: RwLock::new(Arc::new(producer)),
            topic: config.topic.clone(),
            key: config.key.clone(),
            timeout: Duration::from_millis(config.timeout_ms),
            forward: config.forward_headers.clone(),
        })
    }

    /// The current producer.
    fn producer(&self) -> Arc<FutureProducer<KafkaContext>> {
        match self.producer.read() {
            Ok(p) => Arc::clone(&p),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces `failed` by a new producer, unless another delivery already
    /// did. A producer that cannot be created keeps the old one (its
    /// deliveries keep retrying).
    fn replace(&self, failed: &Arc<FutureProducer<KafkaContext>>) {
        let mut guard = match self.producer.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if Arc::ptr_eq(&guard, failed)
            && let Ok(fresh) = create(&self.client_config, &self.context)
        {
            *guard = Arc::new(fresh);
        }
    }

    /// The record key: the lane's key in ordered mode, else the `key`
    /// template rendered, else none.
    fn key<'a>(&self, ctx: &'a DeliveryCtx) -> Option<Cow<'a, [u8]>> {
        if let Some(k) = ctx.ordering_key() {
            return Some(Cow::Borrowed(k));
        }
        self.key.as_ref().map(|t| {
            Cow::Owned(render(t, &ctx.tenant, &ctx.source, &ctx.idempotency_key).into_bytes())
        })
    }
}

/// A producer for `config` with `context`; librdkafka's cross-checks of the
/// settings happen here.
fn create(
    config: &ClientConfig,
    context: &KafkaContext,
) -> Result<FutureProducer<KafkaContext>, SinkError> {
    config
        .create_with_context(context.clone())
        .map_err(|e| SinkError::Setup(format!("Kafka producer: {e}")))
}

/// The record headers: the metadata of [`DeliveryCtx::attributes`], then the
/// content type (the context's, else the stored header's) if there is one,
/// then the chosen provider headers (`forward`).
fn headers(hook: &Envelope, ctx: &DeliveryCtx, forward: &ForwardHeaders) -> OwnedHeaders {
    let attributes = ctx.attributes();
    let mut headers = OwnedHeaders::new_with_capacity(attributes.len() + 1);
    for (name, value) in &attributes {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    let content_type = ctx.content_type.as_deref().map(str::as_bytes).or_else(|| {
        hook.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
            .map(|(_, v)| v.as_slice())
    });
    if let Some(ct) = content_type {
        headers = headers.insert(Header {
            key: CONTENT_TYPE_HEADER,
            value: Some(ct),
        });
    }
    for (name, value) in forward.select(&FORWARD_MEDIUM, hook, ctx, Room::UNLIMITED) {
        headers = headers.insert(Header {
            key: name.as_str(),
            value: Some(value.as_slice()),
        });
    }
    headers
}

#[async_trait]
impl Sink for KafkaSink {
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome {
        let topic = render(&self.topic, &ctx.tenant, &ctx.source, &ctx.idempotency_key);
        if let Err(reason) = check_topic(&topic) {
            return Outcome::permanent(format!("Kafka: {reason}"));
        }
        let key = self.key(ctx);
        let mut record = FutureRecord::<[u8], [u8]>::to(&topic)
            .payload(hook.body.as_slice())
            .headers(headers(hook, ctx, &self.forward));
        if let Some(k) = key.as_deref() {
            record = record.key(k);
        }
        let producer = self.producer();
        // librdkafka fails a queued record after `message.timeout.ms`, so the
        // report comes within the queue wait plus that bound; the outer bound
        // is a backstop (a record it abandons may still be delivered: a
        // duplicate, which at-least-once allows).
        let bound = self.timeout.saturating_mul(2) + Duration::from_secs(5);
        let report =
            tokio::time::timeout(bound, producer.send(record, Timeout::After(self.timeout))).await;
        match report {
            Err(_) => Outcome::retry(format!(
                "Kafka produce to {topic}: no delivery report within {} ms",
                bound.as_millis()
            )),
            Ok(Ok(_delivery)) => Outcome::Ok,
            Ok(Err((e, _record))) => {
                let code = e.rdkafka_error_code();
                if code == Some(RDKafkaErrorCode::Fatal) {
                    // The idempotent producer cannot go on (e.g. a sequence
                    // gap it could not recover from): a new one gets a new
                    // producer id; this hook retries on it.
                    self.replace(&producer);
                }
                classify(&topic, &e)
            }
        }
    }

    fn kind(&self) -> &'static str {
        "kafka"
    }

    fn pipelined(&self) -> bool {
        true
    }
}

/// The outcome of a failed produce.
fn classify(topic: &str, e: &KafkaError) -> Outcome {
    let reason = format!("Kafka produce to {topic}: {e}");
    match e.rdkafka_error_code() {
        Some(code) => outcome_of(code, reason),
        // Not an error of the produce call (cannot happen for a send); the
        // hook is not known to be at fault.
        None => Outcome::retry(reason),
    }
}

/// The [`Outcome`] of a produce that failed with `code` (module docs: the
/// Outcomes table). `reason` becomes the outcome's reason.
///
/// - `SinkGone`: the topic or partition does not exist
///   (`UNKNOWN_TOPIC_OR_PART`, `_UNKNOWN_TOPIC`, `_UNKNOWN_PARTITION`,
///   `UNKNOWN_TOPIC_ID`);
/// - `Permanent`: the record itself is refused, or the topic is not ours to
///   write (`MSG_SIZE_TOO_LARGE`, `INVALID_MSG_SIZE`,
///   `TOPIC_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`,
///   `INVALID_TOPIC_EXCEPTION`, `INVALID_RECORD`, `INVALID_TIMESTAMP`,
///   `POLICY_VIOLATION`, `UNSUPPORTED_FOR_MESSAGE_FORMAT`,
///   `INVALID_REQUIRED_ACKS`, `_BAD_MSG`, `_INVALID_ARG`);
/// - `Retry`: everything else, in particular timeouts (`_MSG_TIMED_OUT`,
///   `_TIMED_OUT`, `REQUEST_TIMED_OUT`), transport and broker failures
///   (`_TRANSPORT`, `_ALL_BROKERS_DOWN`, `_RESOLVE`, `NETWORK_EXCEPTION`,
///   `BROKER_NOT_AVAILABLE`), leadership moves (`NOT_LEADER_FOR_PARTITION`,
///   `LEADER_NOT_AVAILABLE`), `NOT_ENOUGH_REPLICAS*`, a full queue
///   (`_QUEUE_FULL`), throttling, idempotence resets (`_FATAL`, after which
///   the sink builds a new producer, `OUT_OF_ORDER_SEQUENCE_NUMBER`,
///   `UNKNOWN_PRODUCER_ID`) and authentication failures (`_AUTHENTICATION`,
///   `SASL_AUTHENTICATION_FAILED`: fixing the credentials must not cost the
///   hooks).
pub fn outcome_of(code: RDKafkaErrorCode, reason: String) -> Outcome {
    use RDKafkaErrorCode as C;
    match code {
        C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition | C::UnknownTopicId => {
            Outcome::SinkGone { reason }
        }
        C::MessageSizeTooLarge
        | C::InvalidMessageSize
        | C::TopicAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::InvalidTopic
        | C::InvalidRecord
        | C::InvalidTimestamp
        | C::PolicyViolation
        | C::UnsupportedForMessageFormat
        | C::InvalidRequiredAcks
        | C::BadMessage
        | C::InvalidArgument => Outcome::Permanent { reason },
        _ => Outcome::Retry {
            reason,
            after: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(code: RDKafkaErrorCode) -> &'static str {
        match outcome_of(code, String::new()) {
            Outcome::Ok => "ok",
            Outcome::Retry { .. } => "retry",
            Outcome::Permanent { .. } => "permanent",
            Outcome::SinkGone { .. } => "sink_gone",
            Outcome::SourceGone { .. } => "source_gone",
            Outcome::HttpStatus { .. } => "http_status",
        }
    }

    #[test]
    fn error_codes() {
        use RDKafkaErrorCode as C;
        for code in [
            C::MessageTimedOut,
            C::OperationTimedOut,
            C::RequestTimedOut,
            C::BrokerTransportFailure,
            C::AllBrokersDown,
            C::Resolve,
            C::NotLeaderForPartition,
            C::LeaderNotAvailable,
            C::QueueFull,
            C::NetworkException,
            C::NotEnoughReplicas,
            C::NotEnoughReplicasAfterAppend,
            C::ThrottlingQuotaExceeded,
            C::Fatal,
            C::OutOfOrderSequenceNumber,
            C::UnknownProducerId,
            C::Authentication,
            C::PurgeQueue,
            C::KafkaStorageError,
        ] {
            assert_eq!(kind(code), "retry", "{code:?}");
        }
        for code in [
            C::MessageSizeTooLarge,
            C::InvalidMessageSize,
            C::TopicAuthorizationFailed,
            C::InvalidTopic,
            C::InvalidRecord,
            C::BadMessage,
        ] {
            assert_eq!(kind(code), "permanent", "{code:?}");
        }
        for code in [
            C::UnknownTopicOrPartition,
            C::UnknownTopic,
            C::UnknownPartition,
        ] {
            assert_eq!(kind(code), "sink_gone", "{code:?}");
        }
    }
}
