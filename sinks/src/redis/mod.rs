//! The Redis sink (cargo feature `redis`, default on): XADD each hook to a
//! stream, or PUBLISH it to a channel (docs/design.md section 6, ADR 0004
//! section 6).
//!
//! # Stream mode (`mode: stream`, the default)
//! `XADD <stream> [MAXLEN ~ <maxlen>] * <fields>` with the fields:
//! - `body`: the stored body, byte for byte (Redis strings are binary-safe);
//! - the metadata of [`crate::DeliveryCtx::attributes`]:
//!   `ankusa_message_version` (`"1"`), `ankusa_idempotency_key`,
//!   `ankusa_tenant`, `ankusa_source`, `ankusa_received_at` (unix ms) and,
//!   only for a laned row, `ankusa_ordering_key`;
//! - `content_type`: the provider's content type
//!   ([`crate::DeliveryCtx::content_type`], else the envelope's stored
//!   `content-type` header); absent if neither;
//! - with `forward_headers`, the chosen provider headers, one field each
//!   named as the lower-case header ([`crate::forward`],
//!   [`FORWARD_MEDIUM`](crate::redis::FORWARD_MEDIUM)).
//!
//! `stream` is a template: `{tenant}` and `{source}` are replaced by the
//! hook's tenant and source names. `maxlen` trims the stream approximately
//! (`MAXLEN ~ N`: Redis trims whole macro nodes, so the stream may hold a few
//! more than N entries). The sink answers [`Outcome::Ok`](crate::Outcome::Ok)
//! once Redis has answered the XADD with an entry id; how durable that entry
//! is then is the server's persistence setting (AOF/RDB), not the sink's.
//!
//! # Publish mode (`mode: publish`): fire-and-forget
//! `PUBLISH <channel> <body>`: the message is the body only (Redis Pub/Sub has
//! no headers, so the metadata does not travel). Redis delivers a published
//! message to the subscribers connected at that moment and keeps nothing: the
//! sink answers `Ok` as soon as Redis accepted the PUBLISH, even when no one
//! was subscribed. Delivery is therefore **at-most-once past the broker**; use
//! stream mode when a consumer must not miss hooks.
//!
//! # Ordered mode
//! The pipeline calls the sink one hook at a time per lane, so a lane's XADDs
//! are sequential and one stream keeps their order (entry ids grow). The key
//! travels in the `ankusa_ordering_key` field. Several consumers (a consumer
//! group, or several readers) do not keep per-key order between them; one
//! reader of one stream does. Ordering is documented, not enforced.
//!
//! # Outcomes
//! | answer | outcome |
//! | --- | --- |
//! | an entry id / a subscriber count | [`Outcome::Ok`](crate::Outcome::Ok) |
//! | connection refused/reset/dropped, any I/O error, timeout (`timeout_ms`) | `Retry` |
//! | `LOADING`, `BUSY`, `TRYAGAIN`, `MASTERDOWN`, `CLUSTERDOWN`, `READONLY`, `OOM` | `Retry` |
//! | `WRONGTYPE` (the key holds another type), any other server error | `Permanent` |
//! | a client-side error without a server code (authentication, protocol) | `Retry` |
//!
//! A bad `url` or option is a [`SinkError`](crate::SinkError) at load that
//! names the option.
//!
//! # Connections
//! One multiplexed connection per sink ([`redis::aio::ConnectionManager`]):
//! concurrent deliveries share it, and after a connection error it reconnects
//! in the background (the failed delivery retries through the pipeline). The
//! connection is made lazily on the first delivery, so a relay starts while
//! Redis is down and its hooks retry until it is back.

mod config;
mod sink;

pub use config::{DEFAULT_TIMEOUT_MS, FORWARD_MEDIUM, RedisMode, RedisSinkConfig};
pub use sink::{RedisSink, classify_server_code};
