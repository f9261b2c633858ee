//! The NATS sink (cargo feature `nats`, default on): publish each hook to a
//! subject, through JetStream with the stream's ack awaited, or as a core NATS
//! message (docs/design.md section 6, ADR 0004 section 6).
//!
//! # The message
//! - payload: the stored body, byte for byte;
//! - headers: the metadata of [`crate::DeliveryCtx::attributes`]
//!   (`ankusa_message_version` (`"1"`), `ankusa_idempotency_key`,
//!   `ankusa_tenant`, `ankusa_source`, `ankusa_received_at` (unix ms) and,
//!   only for a laned row, `ankusa_ordering_key`), `Content-Type` (the
//!   provider's: [`crate::DeliveryCtx::content_type`], else the envelope's
//!   stored `content-type` header; absent if neither) and, in JetStream mode,
//!   `Nats-Msg-Id` = the idempotency key and the sink's index,
//!   `"<idempotency key>.<sink>"` ([`crate::DeliveryCtx::broker_dedupe_id`]:
//!   scoped to the sink, so a hook's two sinks whose subjects one stream
//!   captures are both stored). A value holding a CR or LF (which no
//!   NATS header value may) is sent as `sha256:<hex>` of its bytes; an
//!   ordering key that is not UTF-8 is decoded lossily
//!   ([`crate::DeliveryCtx::ordering_key_text`]). With `forward_headers`,
//!   the chosen provider headers too, named as the lower-case header
//!   ([`crate::forward`], [`FORWARD_MEDIUM`](crate::nats::FORWARD_MEDIUM):
//!   never a `nats-*` name JetStream would act on).
//!
//! `subject` is a template: `{tenant}` and `{source}` are replaced by the
//! hook's tenant and source names (`hooks.{tenant}.{source}`). The template is
//! checked at load (tokens not empty, no whitespace, no `*`/`>` wildcard); a
//! rendered subject that is not valid (a name holding whitespace) is
//! `Permanent`.
//!
//! # JetStream mode (`mode: jetstream`, the default)
//! A JetStream publish: the server's stream that captures the subject stores
//! the message and answers with an ack, which the sink awaits (up to
//! `timeout_ms`) before answering [`Outcome::Ok`](crate::Outcome::Ok). The
//! `Nats-Msg-Id` header makes a redelivery of the same hook (after a timeout
//! whose publish did arrive, a relay restart) a duplicate that the stream
//! drops inside its duplicate window (`duplicate_window`, 2 minutes by
//! default); its ack says `duplicate` and the sink answers `Ok`. A stream must
//! exist for the subject (the sink creates none): with none, JetStream has no
//! responder for the subject and the hook is dead-lettered as `Permanent`.
//!
//! # Core mode (`mode: core`): at-most-once past the broker
//! A core NATS publish and a flush: `Ok` means the message was written to the
//! server's socket, not that anyone received it. NATS delivers it to the
//! subscribers of that moment and keeps nothing, so delivery is
//! **at-most-once past the broker**. For users without JetStream; use the
//! default when a consumer must not miss hooks.
//!
//! # Ordered mode
//! The pipeline calls the sink one hook at a time per lane, and each publish
//! is answered (JetStream ack, or flush) before the lane's next one, so a
//! lane's publishes are sequential. The key travels in the
//! `ankusa_ordering_key` header. One subject captured by one stream keeps
//! their order (stream sequence numbers grow), and one consumer reading it in
//! order (one ordered or pull consumer with one worker) sees it. Several
//! consumers, a queue group or a pull consumer with several workers do not
//! keep per-key order between them, nor do redeliveries of unacked messages.
//! Ordering is documented, not enforced.
//!
//! # Outcomes
//! | answer | outcome |
//! | --- | --- |
//! | a JetStream ack (also `duplicate`), a flushed core publish | [`Outcome::Ok`](crate::Outcome::Ok) |
//! | not connected: the first connection not up within `timeout_ms`, or the client reconnecting | `Retry` |
//! | no ack / no flush within `timeout_ms` (`timeout_ms`, default 10000), the connection lost under the request | `Retry` |
//! | a JetStream error with status 503 (temporarily unavailable), another 5xx or 429 | `Retry` |
//! | no responders: no stream captures the subject | `Permanent` ("no stream captures this subject") |
//! | a JetStream error with another status (400 "message size exceeds maximum allowed", wrong expected last sequence or message id) | `Permanent` |
//! | the message over the server's `max_payload`; a rendered subject that is not valid | `Permanent` |
//!
//! A bad `url` (only `nats://` and `tls://`), subject template or option is a
//! [`SinkError`](crate::SinkError) at load that names the option.
//!
//! # Connections
//! One client per sink (async-nats), shared by concurrent deliveries. It
//! connects in the background, so the sink is built while NATS is down; a
//! delivery before the first connection waits for it up to `timeout_ms`, then
//! retries. After a disconnect (a server restart) the client reconnects on
//! its own, without limit, backing off from 100 ms up to 2 s between
//! attempts; a delivery while it is disconnected answers `Retry` at once
//! instead of queueing behind the outage, and every delivery answers within
//! `timeout_ms`. The URL may carry `user:password@`; it is never logged.

mod config;
mod sink;

pub use config::{DEFAULT_TIMEOUT_MS, FORWARD_MEDIUM, NatsMode, NatsSinkConfig};
pub use sink::{CONTENT_TYPE_HEADER, NatsSink, classify_publish};
