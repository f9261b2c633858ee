//! The NATS sink's delivery: the message and the answer's [`Outcome`].

use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::{HeaderMap, HeaderValue};
use async_trait::async_trait;
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;

use super::config::{FORWARD_MEDIUM, NatsMode, NatsSinkConfig, check_subject, render};
use crate::forward::{ForwardHeaders, Room};
use crate::{DeliveryCtx, Envelope, Outcome, Sink, SinkError};

/// The header carrying the provider's content type.
pub const CONTENT_TYPE_HEADER: &str = "Content-Type";

/// How often a delivery looks again whether the first connection is up.
const CONNECT_POLL: Duration = Duration::from_millis(20);

/// The longest wait between two reconnect attempts: a restarted server is
/// found again within this much of it accepting connections.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

/// Publishes each hook to a NATS subject (module docs: [`crate::nats`]).
pub struct NatsSink {
    /// One client per sink; it reconnects on its own. Clones share it.
    client: async_nats::Client,
    /// The JetStream context over `client` (publish acks bounded by the
    /// timeout); unused in core mode.
    jetstream: async_nats::jetstream::Context,
    mode: NatsMode,
    subject: String,
    timeout: Duration,
    forward: ForwardHeaders,
}

impl std::fmt::Debug for NatsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("NatsSink")
            .field("mode", &self.mode)
            .field("subject", &self.subject)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl NatsSink {
    /// Validates `config` and builds the sink's client. The connection is made
    /// in the background (and remade after every disconnect, without limit),
    /// so this succeeds while NATS is down; deliveries before the first
    /// connection wait for it up to `timeout_ms`, then retry. Must be called
    /// inside a tokio runtime.
    ///
    /// # Errors
    /// [`SinkError::InvalidOption`] for a config that [`NatsSinkConfig::validate`]
    /// rejects; [`SinkError::Setup`] when the client cannot be built.
    pub async fn new(config: &NatsSinkConfig) -> Result<NatsSink, SinkError> {
        config.validate()?;
        let addr = config.server_addr()?;
        let timeout = Duration::from_millis(config.timeout_ms);
        let client = async_nats::ConnectOptions::new()
            .name("ankusa")
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connection_timeout(timeout)
            .request_timeout(Some(timeout))
            .reconnect_delay_callback(reconnect_delay)
            .connect(addr)
            .await
            .map_err(|e| SinkError::Setup(format!("NATS client: {e}")))?;
        let jetstream = async_nats::jetstream::ContextBuilder::new()
            .timeout(timeout)
            .build(client.clone());
        Ok(NatsSink {
            client,
            jetstream,
            mode: config.mode,
            subject: config.subject.clone(),
            timeout,
            forward: config.forward_headers.clone(),
        })
    }

    /// The subject, headers and payload of one delivery; `Err` with the
    /// outcome when the rendered subject is not a valid one.
    fn message(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Result<(String, HeaderMap), Outcome> {
        let subject = render(&self.subject, &ctx.tenant, &ctx.source);
        check_subject(&subject).map_err(|reason| {
            Outcome::permanent(format!("NATS subject from tenant and source: {reason}"))
        })?;
        let mut headers = HeaderMap::new();
        if self.mode == NatsMode::JetStream {
            headers.insert(
                async_nats::header::NATS_MESSAGE_ID,
                header_value(ctx.broker_dedupe_id().as_bytes()),
            );
        }
        for (name, value) in ctx.attributes() {
            headers.insert(name, header_value(value.as_bytes()));
        }
        let content_type = ctx.content_type.as_deref().map(str::as_bytes).or_else(|| {
            hook.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
                .map(|(_, v)| v.as_slice())
        });
        if let Some(ct) = content_type {
            headers.insert(CONTENT_TYPE_HEADER, header_value(ct));
        }
        // The chosen provider headers: lower-case names the sink never uses
        // itself, values without CR or LF (FORWARD_MEDIUM), so both parse.
        for (name, value) in self
            .forward
            .select(&FORWARD_MEDIUM, hook, ctx, Room::UNLIMITED)
        {
            let value = std::str::from_utf8(&value)
                .ok()
                .and_then(|v| v.parse::<HeaderValue>().ok());
            if let (Ok(name), Some(value)) = (name.parse::<async_nats::HeaderName>(), value) {
                headers.insert(name, value);
            }
        }
        Ok((subject, headers))
    }

    /// Waits until the client is connected, up to `deadline`, when it has not
    /// connected yet; `Err` with a retry when it is not connected then, or has
    /// lost its connection (it is reconnecting: retry rather than queue the
    /// message behind the outage).
    async fn connected(&self, deadline: Instant) -> Result<(), Outcome> {
        loop {
            match self.client.connection_state() {
                State::Connected => return Ok(()),
                State::Disconnected => {
                    return Err(Outcome::retry("NATS: not connected (reconnecting)"));
                }
                State::Pending => {
                    if Instant::now() + CONNECT_POLL > deadline {
                        return Err(Outcome::retry(format!(
                            "NATS: no connection within {} ms",
                            self.timeout.as_millis()
                        )));
                    }
                    tokio::time::sleep(CONNECT_POLL).await;
                }
            }
        }
    }

    async fn publish(&self, hook: &Envelope, ctx: &DeliveryCtx, deadline: Instant) -> Outcome {
        let (subject, headers) = match self.message(hook, ctx) {
            Ok(m) => m,
            Err(outcome) => return outcome,
        };
        if let Err(outcome) = self.connected(deadline).await {
            return outcome;
        }
        let payload = hook.body.clone().into();
        match self.mode {
            NatsMode::JetStream => {
                let publish = PublishMessage::build().payload(payload).headers(headers);
                let ack = match self.jetstream.send_publish(subject.clone(), publish).await {
                    Ok(ack) => ack,
                    Err(e) => return classify_publish(&subject, &e),
                };
                match ack.await {
                    // A duplicate (the idempotency key seen inside the
                    // stream's duplicate window) was stored before: Ok.
                    Ok(_) => Outcome::Ok,
                    Err(e) => classify_publish(&subject, &e),
                }
            }
            NatsMode::Core => {
                if let Err(e) = self
                    .client
                    .publish_with_headers(subject, headers, payload)
                    .await
                {
                    return classify_core_publish(&e);
                }
                match self.client.flush().await {
                    Ok(()) => Outcome::Ok,
                    Err(e) => Outcome::retry(format!("NATS flush: {e}")),
                }
            }
        }
    }
}

#[async_trait]
impl Sink for NatsSink {
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome {
        let deadline = Instant::now() + self.timeout;
        // The context's timeout bounds the JetStream ack; this bounds the
        // whole call (a full outgoing queue, a flush that never completes).
        match tokio::time::timeout_at(deadline, self.publish(hook, ctx, deadline)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::retry(format!(
                "NATS publish: no answer within {} ms",
                self.timeout.as_millis()
            )),
        }
    }

    fn kind(&self) -> &'static str {
        "nats"
    }

    fn pipelined(&self) -> bool {
        true
    }
}

/// The delay before reconnect attempt `attempts` (1 for the first): none, then
/// doubling from 100 ms up to [`MAX_RECONNECT_DELAY`].
fn reconnect_delay(attempts: usize) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let doublings = u32::try_from(attempts - 2).unwrap_or(u32::MAX).min(5);
    Duration::from_millis(100u64 << doublings).min(MAX_RECONNECT_DELAY)
}

/// `value` as a header value, or `sha256:<hex>` of it when it holds a CR or
/// LF, which no NATS header value may (the HTTP sink's rule).
fn header_value(value: &[u8]) -> HeaderValue {
    let text = String::from_utf8_lossy(value);
    text.parse::<HeaderValue>().unwrap_or_else(|_| {
        let digest = Sha256::digest(value);
        let mut s = String::with_capacity(7 + 64);
        s.push_str("sha256:");
        for b in digest.iter() {
            s.push_str(&format!("{b:02x}"));
        }
        // Hex digits and a colon: always a valid value.
        s.parse::<HeaderValue>().unwrap_or_default()
    })
}

/// The outcome of a failed JetStream publish (the send or its ack).
///
/// - no ack in time, the connection lost under the request, too many acks
///   pending: retry;
/// - no responders (no stream captures the subject): permanent;
/// - the message over the server's `max_payload`, a wrong expected last
///   sequence or message id: permanent;
/// - any other error the stream answered: by its status code, 503 (JetStream
///   temporarily unavailable) and other 5xx or 429 retry, the rest (400
///   "message size exceeds maximum allowed", ...) is permanent;
/// - any other client-side failure (the client's queue closed, an answer it
///   could not read): retry.
pub fn classify_publish(
    subject: &str,
    e: &async_nats::jetstream::context::PublishError,
) -> Outcome {
    let reason = format!("NATS JetStream publish to `{subject}`: {e}");
    match e.kind() {
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending => Outcome::retry(reason),
        PublishErrorKind::StreamNotFound => Outcome::permanent(format!(
            "NATS JetStream publish to `{subject}`: no stream captures this subject (no responders); \
             create a stream for it or fix the sink's `subject`"
        )),
        PublishErrorKind::MaxPayloadExceeded
        | PublishErrorKind::WrongLastMessageId
        | PublishErrorKind::WrongLastSequence => Outcome::permanent(reason),
        PublishErrorKind::Other => {
            let api_error = std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>());
            match api_error {
                Some(api) if api.code() >= 500 || api.code() == 429 => Outcome::retry(reason),
                Some(_) => Outcome::permanent(reason),
                None => Outcome::retry(reason),
            }
        }
    }
}

/// The outcome of a failed core publish: over `max_payload` or an invalid
/// subject is permanent; the client's queue closed is retry.
fn classify_core_publish(e: &async_nats::client::PublishError) -> Outcome {
    use async_nats::client::PublishErrorKind as Kind;
    let reason = format!("NATS publish: {e}");
    match e.kind() {
        Kind::MaxPayloadExceeded | Kind::InvalidSubject => Outcome::permanent(reason),
        Kind::Send => Outcome::retry(reason),
    }
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::context::PublishError;

    use super::*;

    fn api_error(code: u16, err_code: u64, description: &str) -> PublishError {
        let e: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": code, "err_code": err_code, "description": description
        }))
        .expect("a JetStream API error");
        PublishError::with_source(PublishErrorKind::Other, e)
    }

    fn is_retry(o: &Outcome) -> bool {
        matches!(o, Outcome::Retry { after: None, .. })
    }

    fn is_permanent(o: &Outcome) -> bool {
        matches!(o, Outcome::Permanent { .. })
    }

    #[test]
    fn publish_errors() {
        for kind in [
            PublishErrorKind::TimedOut,
            PublishErrorKind::BrokenPipe,
            PublishErrorKind::MaxAckPending,
        ] {
            assert!(
                is_retry(&classify_publish("s", &PublishError::new(kind))),
                "{kind:?}"
            );
        }
        for kind in [
            PublishErrorKind::StreamNotFound,
            PublishErrorKind::MaxPayloadExceeded,
            PublishErrorKind::WrongLastMessageId,
            PublishErrorKind::WrongLastSequence,
        ] {
            assert!(
                is_permanent(&classify_publish("s", &PublishError::new(kind))),
                "{kind:?}"
            );
        }
        match classify_publish("a.b", &PublishError::new(PublishErrorKind::StreamNotFound)) {
            Outcome::Permanent { reason } => {
                assert!(reason.contains("no stream captures"), "{reason}");
                assert!(reason.contains("`a.b`"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let too_big = api_error(400, 10054, "message size exceeds maximum allowed");
        assert!(is_permanent(&classify_publish("s", &too_big)));
        let unavailable = api_error(503, 10008, "JetStream system temporarily unavailable");
        assert!(is_retry(&classify_publish("s", &unavailable)));
        // No API error under `Other`: a client-side failure.
        assert!(is_retry(&classify_publish(
            "s",
            &PublishError::new(PublishErrorKind::Other)
        )));
    }

    #[test]
    fn header_values_without_cr_lf_pass_and_others_are_hashed() {
        assert_eq!(header_value(b"cus_1").as_str(), "cus_1");
        assert_eq!(header_value("ü ok".as_bytes()).as_str(), "ü ok");
        let hashed = header_value(b"a\r\nb");
        assert!(
            hashed.as_str().starts_with("sha256:"),
            "{}",
            hashed.as_str()
        );
        assert_eq!(hashed.as_str().len(), 7 + 64);
    }

    #[test]
    fn reconnect_delays() {
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert_eq!(reconnect_delay(2), Duration::from_millis(100));
        assert_eq!(reconnect_delay(3), Duration::from_millis(200));
        assert_eq!(reconnect_delay(100), MAX_RECONNECT_DELAY);
    }
}
