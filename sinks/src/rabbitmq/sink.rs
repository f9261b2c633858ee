//! The RabbitMQ sink's delivery: the connection and its channel pool, the
//! publish, and the answer's [`Outcome`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ErrorKind};
use tokio::time::Instant;

use super::config::{Declare, FORWARD_MEDIUM, MAX_NAME_BYTES, RabbitMqSinkConfig, render};
use crate::forward::{ForwardHeaders, Room};
use crate::{DeliveryCtx, Envelope, Outcome, Sink, SinkError};

/// AMQP `delivery-mode` 2: the broker writes the message to disk in a durable
/// queue.
pub const PERSISTENT: u8 = 2;

/// Idle confirm-mode channels kept per connection; a burst of more concurrent
/// deliveries opens more, and closes the extra ones afterwards.
const MAX_IDLE_CHANNELS: usize = 8;

/// The first wait after a failed connect; it doubles per failure.
const RECONNECT_BASE: Duration = Duration::from_millis(200);
/// The longest wait between two connect attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// Publishes each hook to an exchange with publisher confirms (module docs:
/// [`crate::rabbitmq`]).
pub struct RabbitMqSink {
    uri: AMQPUri,
    exchange: String,
    routing_key: String,
    mandatory: bool,
    declare: Option<Declare>,
    timeout: Duration,
    /// The stored headers each message carries (`forward_headers`).
    forward: ForwardHeaders,
    /// The current connection with its idle channels; `None` before the first
    /// delivery and after a connection was found broken. Locked only to read
    /// or swap the `Arc`, never across an await.
    link: Mutex<Option<Arc<Link>>>,
    /// Serialises reconnecting: concurrent deliveries that find no healthy
    /// connection await one connect instead of each opening their own. Held
    /// only while connecting (bounded by `timeout_ms`).
    reconnect: tokio::sync::Mutex<Backoff>,
}

/// One connection and its pool of idle confirm-mode channels.
struct Link {
    conn: Connection,
    /// Channels not in use. A delivery takes one for itself, so the confirm
    /// (and a `basic.return`) it awaits is its own message's.
    idle: Mutex<Vec<Channel>>,
}

/// When the next connect may be tried, after failures.
#[derive(Default)]
struct Backoff {
    failures: u32,
    next_attempt: Option<Instant>,
    last_error: String,
}

impl std::fmt::Debug for RabbitMqSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("RabbitMqSink")
            .field("host", &self.uri.authority.host)
            .field("port", &self.uri.authority.port)
            .field("vhost", &self.uri.vhost)
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .field("mandatory", &self.mandatory)
            .field("declare", &self.declare)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RabbitMqSink {
    /// Validates `config` and builds the sink. It does not connect: the first
    /// delivery does (module docs), so this succeeds while RabbitMQ is down.
    /// Deliveries must run inside a tokio runtime.
    ///
    /// # Errors
    /// [`SinkError::InvalidOption`] / [`SinkError::MissingOption`] for a config
    /// that fails [`RabbitMqSinkConfig::validate`].
    pub async fn new(config: &RabbitMqSinkConfig) -> Result<RabbitMqSink, SinkError> {
        config.validate()?;
        Ok(RabbitMqSink {
            uri: config.uri()?,
            exchange: config.exchange.clone(),
            routing_key: config.routing_key.clone(),
            mandatory: config.mandatory,
            declare: config.declare,
            timeout: Duration::from_millis(config.timeout_ms),
            forward: config.forward_headers.clone(),
            link: Mutex::new(None),
            reconnect: tokio::sync::Mutex::new(Backoff::default()),
        })
    }

    /// Whether the sink holds an open connection now (for tests and health:
    /// `false` before the first delivery and after the broker went away).
    pub fn is_connected(&self) -> bool {
        self.current().is_some()
    }

    /// The current connection, if it is open.
    fn current(&self) -> Option<Arc<Link>> {
        let guard = self.link.lock().unwrap_or_else(PoisonError::into_inner);
        guard
            .as_ref()
            .filter(|l| l.conn.status().connected())
            .cloned()
    }

    /// Forgets `link` if it is still the current one: the next delivery
    /// reconnects. Its in-flight deliveries keep their `Arc`; the connection
    /// closes when the last one is dropped.
    fn invalidate(&self, link: &Arc<Link>) {
        let mut guard = self.link.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.as_ref().is_some_and(|l| Arc::ptr_eq(l, link)) {
            *guard = None;
        }
    }

    /// The open connection, connecting when there is none and the backoff
    /// allows; a failure is the delivery's [`Outcome::Retry`].
    async fn link(&self, deadline: Instant) -> Result<Arc<Link>, Outcome> {
        if let Some(link) = self.current() {
            return Ok(link);
        }
        let mut backoff = self.reconnect.lock().await;
        // Another delivery may have reconnected while this one waited.
        if let Some(link) = self.current() {
            return Ok(link);
        }
        let now = Instant::now();
        if let Some(at) = backoff.next_attempt
            && now < at
        {
            return Err(Outcome::retry(format!(
                "RabbitMQ: not connected ({}); next connect attempt in {} ms",
                backoff.last_error,
                (at - now).as_millis()
            )));
        }
        let properties = ConnectionProperties::default().with_connection_name("ankusa".into());
        let error = match tokio::time::timeout_at(
            deadline,
            Connection::connect_uri(self.uri.clone(), properties),
        )
        .await
        {
            Ok(Ok(conn)) => {
                *backoff = Backoff::default();
                let link = Arc::new(Link {
                    conn,
                    idle: Mutex::new(Vec::new()),
                });
                *self.link.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&link));
                return Ok(link);
            }
            // Every connect failure retries: refused, reset, TLS, a refused
            // login or a missing vhost (the broker's setup, not the hook).
            Ok(Err(e)) => format!("connect: {e}"),
            Err(_) => format!("connect: no answer within {} ms", self.timeout.as_millis()),
        };
        backoff.failures = backoff.failures.saturating_add(1);
        let delay = RECONNECT_BASE
            .saturating_mul(1 << backoff.failures.saturating_sub(1).min(5))
            .min(RECONNECT_MAX);
        backoff.next_attempt = Some(Instant::now() + delay);
        backoff.last_error = error.clone();
        Err(Outcome::retry(format!("RabbitMQ {error}")))
    }

    /// An idle channel of `link`, or a new one in confirm mode (declaring the
    /// exchange first when configured).
    async fn channel(&self, link: &Link) -> Result<Channel, Outcome> {
        loop {
            let channel = link
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match channel {
                Some(c) if c.status().connected() => return Ok(c),
                // Closed by the broker (e.g. after a 404): dropped, and a new
                // one is opened below.
                Some(_) => continue,
                None => break,
            }
        }
        let channel = link
            .conn
            .create_channel()
            .await
            .map_err(|e| classify("channel.open", &e, Phase::Open))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| classify("confirm.select", &e, Phase::Open))?;
        if let Some(declare) = self.declare {
            channel
                .exchange_declare(
                    self.exchange.as_str().into(),
                    declare.kind.kind(),
                    ExchangeDeclareOptions {
                        durable: declare.durable,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map_err(|e| classify("exchange.declare", &e, Phase::Publish))?;
        }
        Ok(channel)
    }

    /// Keeps `channel` for the next delivery if it is open and the pool has
    /// room; otherwise it is dropped (which closes it).
    fn put_back(link: &Link, channel: Channel) {
        if channel.status().connected() {
            let mut idle = link.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if idle.len() < MAX_IDLE_CHANNELS {
                idle.push(channel);
            }
        }
    }

    /// The rendered routing key, or the delivery's `Permanent` when it is
    /// longer than AMQP carries.
    fn routing_key(&self, ctx: &DeliveryCtx) -> Result<ShortString, Outcome> {
        let key = ctx.ordering_key_text().unwrap_or_default();
        let rendered = render(&self.routing_key, &ctx.tenant, &ctx.source, &key);
        let len = rendered.len();
        ShortString::try_new(rendered).map_err(|_| {
            Outcome::permanent(format!(
                "RabbitMQ: the routing key is {len} bytes, more than AMQP's {MAX_NAME_BYTES}"
            ))
        })
    }

    /// The message's properties: persistent, `message_id` = the idempotency
    /// key, the content type, and the metadata and the chosen provider
    /// headers as headers.
    fn properties(&self, hook: &Envelope, ctx: &DeliveryCtx) -> BasicProperties {
        let mut headers = FieldTable::default();
        for (name, value) in ctx.attributes() {
            headers.insert(name.into(), AMQPValue::LongString(LongString::from(value)));
        }
        // Names of at most 255 bytes the sink never uses itself
        // (FORWARD_MEDIUM), so each is a short string and overwrites nothing.
        for (name, value) in self
            .forward
            .select(&FORWARD_MEDIUM, hook, ctx, Room::UNLIMITED)
        {
            if let Ok(name) = ShortString::try_new(name) {
                headers.insert(name, AMQPValue::LongString(LongString::from(value)));
            }
        }
        let mut properties = BasicProperties::default()
            .with_delivery_mode(PERSISTENT)
            .with_headers(headers);
        if let Ok(id) = ShortString::try_new(ctx.idempotency_key.as_str()) {
            properties = properties.with_message_id(id);
        }
        if let Some(ct) = content_type(hook, ctx) {
            properties = properties.with_content_type(ct);
        }
        properties
    }

    /// One delivery, every step bounded by `deadline`.
    async fn publish(
        &self,
        deadline: Instant,
        routing_key: ShortString,
        body: &[u8],
        properties: BasicProperties,
    ) -> Outcome {
        let link = match self.link(deadline).await {
            Ok(link) => link,
            Err(outcome) => return outcome,
        };
        if link.conn.status().blocked() {
            return Outcome::retry(BLOCKED);
        }
        let channel = match tokio::time::timeout_at(deadline, self.channel(&link)).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(outcome)) => return outcome,
            Err(_) => {
                self.invalidate(&link);
                return Outcome::retry(format!(
                    "RabbitMQ channel.open: no answer within {} ms",
                    self.timeout.as_millis()
                ));
            }
        };
        let options = BasicPublishOptions {
            mandatory: self.mandatory,
            ..BasicPublishOptions::default()
        };
        let sent = tokio::time::timeout_at(deadline, async {
            channel
                .basic_publish(
                    self.exchange.as_str().into(),
                    routing_key.clone(),
                    options,
                    body,
                    properties,
                )
                .await?
                .await
        })
        .await;
        match sent {
            Ok(Ok(Confirmation::Ack(None))) => {
                Self::put_back(&link, channel);
                Outcome::Ok
            }
            Ok(Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)))) => {
                Self::put_back(&link, channel);
                Outcome::permanent(format!(
                    "RabbitMQ basic.return: {} {} (exchange `{}`, routing key `{}`; no queue is bound for it)",
                    returned.reply_code, returned.reply_text, self.exchange, routing_key
                ))
            }
            // A nack is the broker refusing for now: a queue at its length
            // limit with `x-overflow: reject-publish` (backpressure), or an
            // internal error. Neither is the hook's fault: retry, so an
            // ordered lane waits for room instead of dead-lettering its head.
            Ok(Ok(Confirmation::Nack(None))) => {
                Self::put_back(&link, channel);
                Outcome::retry(format!(
                    "RabbitMQ basic.nack: the broker did not accept the message now (a full queue with reject-publish, or a broker error; exchange `{}`, routing key `{}`)",
                    self.exchange, routing_key
                ))
            }
            // The channel is not in confirm mode: not this hook's fault; the
            // channel is dropped and the next delivery opens another.
            Ok(Ok(Confirmation::NotRequested)) => {
                Outcome::retry("RabbitMQ: the channel was not in confirm mode")
            }
            // A channel error closed the channel (it is dropped here, and the
            // next delivery opens a new one); a connection error shows in the
            // connection's status and the next delivery reconnects.
            Ok(Err(e)) => classify("basic.publish", &e, Phase::Publish),
            Err(_) => {
                if link.conn.status().blocked() {
                    return Outcome::retry(BLOCKED);
                }
                // No confirm in time: the connection may be half-dead (no
                // heartbeat missed yet); the next delivery uses a new one.
                self.invalidate(&link);
                Outcome::retry(format!(
                    "RabbitMQ basic.publish: no confirm within {} ms",
                    self.timeout.as_millis()
                ))
            }
        }
    }
}

/// The reason of a delivery while the broker blocks publishers.
const BLOCKED: &str =
    "RabbitMQ: the broker blocked the connection (connection.blocked: a memory or disk alarm)";

#[async_trait]
impl Sink for RabbitMqSink {
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome {
        let routing_key = match self.routing_key(ctx) {
            Ok(key) => key,
            Err(outcome) => return outcome,
        };
        let properties = self.properties(hook, ctx);
        let deadline = Instant::now() + self.timeout;
        match tokio::time::timeout_at(
            deadline,
            self.publish(deadline, routing_key, &hook.body, properties),
        )
        .await
        {
            Ok(outcome) => outcome,
            // Waiting for another delivery's reconnect took the whole time.
            Err(_) => Outcome::retry(format!(
                "RabbitMQ: not connected within {} ms",
                self.timeout.as_millis()
            )),
        }
    }

    fn kind(&self) -> &'static str {
        "rabbitmq"
    }

    fn pipelined(&self) -> bool {
        true
    }
}

/// The provider's content type: the context's, else the envelope's stored
/// `content-type` header; `None` if neither, or if it is not UTF-8 or longer
/// than an AMQP short string.
fn content_type(hook: &Envelope, ctx: &DeliveryCtx) -> Option<ShortString> {
    let text = match ctx.content_type.as_deref() {
        Some(ct) => ct.to_owned(),
        None => hook
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
            .and_then(|(_, v)| String::from_utf8(v.clone()).ok())?,
    };
    ShortString::try_new(text).ok()
}

/// Which step failed: the outcome of a broker error depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Opening a channel or turning on confirms: nothing about the hook.
    Open,
    /// Declaring the exchange or publishing: channel errors are about the
    /// destination.
    Publish,
}

/// The outcome of a failed client call.
fn classify(what: &str, e: &lapin::Error, phase: Phase) -> Outcome {
    let reason = format!("RabbitMQ {what}: {e}");
    let ErrorKind::ProtocolError(amqp) = e.kind() else {
        // I/O (refused, reset), a closed channel or connection, a missed
        // heartbeat, the channel limit: the connection's state, not the hook.
        return Outcome::retry(reason);
    };
    match (phase, amqp.kind()) {
        // 404 on publish: the exchange does not exist (deleted).
        (Phase::Publish, AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)) => {
            Outcome::SinkGone { reason }
        }
        // 405: an exclusive resource of another connection; it goes away.
        (Phase::Publish, AMQPErrorKind::Soft(AMQPSoftError::RESOURCELOCKED)) => {
            Outcome::retry(reason)
        }
        // 403 (no write permission, a reserved name), 406 (the exchange
        // exists with another type or durability; a message above
        // max_message_size), 311, 312, 313: the broker rejects this publish
        // and would again.
        (Phase::Publish, AMQPErrorKind::Soft(_)) => Outcome::permanent(reason),
        // Connection errors (320 CONNECTION_FORCED at a broker shutdown, 541,
        // 506 ...) and anything while opening a channel.
        _ => Outcome::retry(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::protocol::{AMQPError, AMQPHardError};

    fn protocol(kind: AMQPErrorKind) -> lapin::Error {
        ErrorKind::ProtocolError(AMQPError::new(kind, "test".into())).into()
    }

    #[test]
    fn outcomes_of_broker_errors() {
        let soft = |s| protocol(AMQPErrorKind::Soft(s));
        assert!(matches!(
            classify("p", &soft(AMQPSoftError::NOTFOUND), Phase::Publish),
            Outcome::SinkGone { .. }
        ));
        for s in [
            AMQPSoftError::ACCESSREFUSED,
            AMQPSoftError::PRECONDITIONFAILED,
            AMQPSoftError::CONTENTTOOLARGE,
            AMQPSoftError::NOROUTE,
        ] {
            assert!(matches!(
                classify("p", &soft(s.clone()), Phase::Publish),
                Outcome::Permanent { .. }
            ));
            assert!(matches!(
                classify("p", &soft(s), Phase::Open),
                Outcome::Retry { .. }
            ));
        }
        assert!(matches!(
            classify("p", &soft(AMQPSoftError::RESOURCELOCKED), Phase::Publish),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            classify(
                "p",
                &protocol(AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED)),
                Phase::Publish
            ),
            Outcome::Retry { .. }
        ));
        let io: lapin::Error = std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert!(matches!(
            classify("p", &io, Phase::Publish),
            Outcome::Retry { .. }
        ));
        let missed: lapin::Error = ErrorKind::MissingHeartbeatError.into();
        assert!(matches!(
            classify("p", &missed, Phase::Publish),
            Outcome::Retry { .. }
        ));
    }
}
