//! The RabbitMQ sink (cargo feature `rabbitmq`, default on): publish each hook
//! to an exchange with publisher confirms (docs/design.md section 6, ADR 0004
//! section 6). Client: lapin (AMQP 0-9-1) on tokio, TLS through rustls with
//! ring.
//!
//! # What it sends
//! `basic.publish` to `exchange` with the routing key `routing_key`, and:
//! - the body: the stored body, byte for byte;
//! - `delivery_mode` 2 (persistent: written to disk in a durable queue);
//! - `message_id`: the hook's idempotency key (UUID text), the same on every
//!   redelivery, so a consumer can drop duplicates;
//! - `content_type`: the provider's content type
//!   ([`crate::DeliveryCtx::content_type`], else the envelope's stored
//!   `content-type` header); absent if neither, or if it is not UTF-8 or
//!   longer than 255 bytes;
//! - headers (long strings), from [`crate::DeliveryCtx::attributes`]:
//!   `ankusa_message_version` (`"1"`), `ankusa_idempotency_key`,
//!   `ankusa_tenant`, `ankusa_source`, `ankusa_received_at` (unix ms, decimal)
//!   and, only for a laned row, `ankusa_ordering_key`; with
//!   `forward_headers`, the chosen provider headers too, named as the
//!   lower-case header ([`crate::forward`],
//!   [`FORWARD_MEDIUM`](crate::rabbitmq::FORWARD_MEDIUM)).
//!
//! `routing_key` is a template: `{tenant}` and `{source}` are replaced by the
//! hook's tenant and source names and `{ordering_key}` by the lane's ordering
//! key in ordered mode (the empty string for a row that is not laned). With
//! the default exchange (`exchange: ""`) the routing key is the name of the
//! queue to deliver to.
//!
//! # The exchange: used, or declared
//! By default the sink **does not declare** anything: the exchange (and the
//! queues bound to it) must exist; publishing to a missing exchange is
//! [`Outcome::SinkGone`](crate::Outcome::SinkGone). With
//! `declare: {type: direct|topic|fanout|headers, durable: true}` the sink
//! declares the exchange on every channel it opens (idempotent), so it is
//! created at the first delivery and again after it was deleted; an exchange
//! that exists with another type or durability is `Permanent` (406). Queues
//! and bindings are never declared: they are the consumers' side.
//!
//! # Confirms and unroutable messages
//! Every channel is in confirm mode and the sink answers
//! [`Outcome::Ok`](crate::Outcome::Ok) only on the broker's `basic.ack` for
//! the message. With `mandatory: true` (the default) a message no queue is
//! bound for comes back as `basic.return` (312 NO_ROUTE) before its ack: that
//! is `Permanent`, not a success. A `basic.nack` (a queue at its length
//! limit with `x-overflow: reject-publish`) is backpressure: `Retry`. With `mandatory: false` the broker drops
//! such a message and acks it: `Ok`, and the hook is lost past the broker.
//!
//! # Ordered mode
//! The pipeline calls the sink one hook at a time per lane, so a lane's
//! publishes are sequential: each waits for the previous one's confirm. The
//! key travels in the `ankusa_ordering_key` header (and in the routing key if
//! the template has `{ordering_key}`). RabbitMQ keeps the publish order within
//! one queue, so **one consumer of one queue** sees a lane's hooks in order.
//! Several consumers of a queue (competing consumers, or prefetch with
//! redelivery after a nack or a consumer's crash) do not keep per-key order;
//! nor do hooks of one lane routed to different queues. Ordering is
//! documented, not enforced.
//!
//! # Outcomes
//! | answer | outcome |
//! | --- | --- |
//! | `basic.ack` | [`Outcome::Ok`](crate::Outcome::Ok) |
//! | `basic.return` (mandatory, unroutable) | `Permanent` |
//! | `basic.nack` (a full queue with `x-overflow: reject-publish`, a broker error) | `Retry` |
//! | channel closed 404 NOT_FOUND on publish (no such exchange) | `SinkGone` |
//! | channel closed 403 ACCESS_REFUSED, 406 PRECONDITION_FAILED (e.g. above `max_message_size`, a declare that clashes), 311 | `Permanent` |
//! | channel closed 405 RESOURCE_LOCKED | `Retry` |
//! | a routing key longer than 255 bytes after rendering | `Permanent` |
//! | connection refused/reset, TLS, login refused, unknown vhost, a missed heartbeat | `Retry` |
//! | connection closed by the broker (320 CONNECTION_FORCED at a restart, 541 ...) | `Retry` |
//! | `connection.blocked` (flow control: a memory or disk alarm) | `Retry` |
//! | no confirm within `timeout_ms` (connecting, opening a channel, publishing) | `Retry` |
//!
//! A bad `url` (only `amqp://` and `amqps://`), exchange name, template or
//! `declare` is a [`SinkError`](crate::SinkError) at load that names the
//! option.
//!
//! # Connections
//! One connection per sink and a pool of confirm-mode channels on it. A
//! delivery takes a channel for itself (an idle one, or a new one) and gives
//! it back after the confirm, so concurrent deliveries never wait on each
//! other's confirms or returns, and a channel the broker closed (404, 403)
//! affects only its own delivery: it is dropped and the next delivery opens a
//! new one. At most 8 idle channels are kept.
//!
//! The connection is made lazily by the first delivery, so a relay starts
//! while RabbitMQ is down. A delivery that finds the connection closed (a
//! broker restart closes it with 320) reconnects, and concurrent deliveries
//! await that one reconnect. A failed connect answers `Retry` and backs off:
//! 200 ms after the first failure, doubling up to 5 s; deliveries in between
//! answer `Retry` at once without touching the network. A publish with no
//! confirm within `timeout_ms` drops the connection too (it may be half
//! dead), unless the broker has blocked it.

mod config;
mod sink;

pub use config::{
    DEFAULT_TIMEOUT_MS, Declare, ExchangeType, FORWARD_MEDIUM, MAX_NAME_BYTES, RabbitMqSinkConfig,
};
pub use sink::{PERSISTENT, RabbitMqSink};
