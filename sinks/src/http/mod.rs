//! The HTTP sink (cargo feature `http`, default on): POSTs each hook to one URL
//! (docs/design.md section 6, ADR 0004 section 6).
//!
//! # What goes out
//! - `POST <url>` with the stored body byte for byte and the provider's
//!   original content type ([`crate::DeliveryCtx::content_type`], else the
//!   envelope's stored `content-type` header; none if neither).
//! - Metadata headers ([`crate::meta`]): `x-ankusa-message-version: 1`,
//!   `x-ankusa-idempotency-key`, `x-ankusa-tenant`, `x-ankusa-source`,
//!   `x-ankusa-received-at` (unix ms), `x-ankusa-attempt` (1 for the first),
//!   `x-ankusa-seq` (the hook's commit order on the node), and, only for a
//!   laned row, `x-ankusa-ordering-key`. A value that is not a
//!   legal header value (a control byte, e.g. a `{json}` key holding a
//!   newline) is sent as `sha256:<hex of its bytes>`, the same stable form
//!   docs/design.md section 10 gives the SQS group id.
//! - The configured extra headers ([`HttpSinkConfig::headers`]).
//! - With `auth` ([`auth`]), `authorization`: `Basic` credentials, or an
//!   OAuth2 client-credentials token as `Bearer` ([`oauth2`]: fetched once
//!   per sink, shared, renewed before it expires). A provider's stored `Authorization` is not forwarded beside
//!   it.
//! - With `signing`, the signature headers ([`signing`]): Standard Webhooks'
//!   `webhook-id` (the idempotency key), `webhook-timestamp` (the attempt's
//!   unix seconds) and `webhook-signature` (`v1` HMAC and `v1a` Ed25519
//!   entries), or one HMAC header. They replace
//!   a provider's stored header of the same name.
//!
//! # Outcomes
//! | answer | outcome |
//! | --- | --- |
//! | 2xx | [`Outcome::Ok`](crate::Outcome::Ok) |
//! | 4xx, 5xx | [`HttpStatus`](crate::Outcome::HttpStatus), reason `HTTP <status> <phrase>: <body excerpt>`, `after` from Retry-After (delay-seconds or an HTTP date) |
//! | connection refused/reset, DNS, TLS (a receiver refusing the client certificate, a certificate not chaining to `tls.ca`), timeout (`timeout_ms`) | `Retry`, no `after` |
//! | with `auth.oauth2`: the token endpoint unreachable, answering an error, or no token | `Retry`, reason `OAuth2 token endpoint <url>: ...`, `after` from its Retry-After |
//! | with `auth.oauth2`: 401 | the token is renewed and the hook posted once more in the same attempt; that answer is the outcome |
//! | 1xx/3xx (redirects are not followed: a POST turned into a GET would lose the hook) | `Permanent` |
//!
//! # The answer, for the attempt log
//! [`Sink::attempt`](crate::Sink::attempt) also reports what the endpoint
//! answered ([`Response`](crate::Response)): the status, the first 64 headers
//! (each value cut to 1 KiB) and the first
//! [`DeliveryCtx::response_body_max_bytes`](crate::DeliveryCtx::response_body_max_bytes)
//! of the body (at most [`DRAIN_MAX_BYTES`], what it reads anyway), with
//! `body_truncated` when there was more. A timeout or a failed connection
//! has no answer. The pipeline keeps it in the row's attempt log
//! (docs/design.md section 3, "The attempt log").
//!
//! The pipeline resolves an `HttpStatus` with the sink entry's retry policy
//! ([`Outcome::resolve_status`](crate::Outcome::resolve_status); docs/design.md
//! section 5, "Retry policy"). By default ([`Outcome::retried_by_default`](crate::Outcome::retried_by_default))
//! 408, 425, 429 and 5xx are retried, 410 Gone is `SinkGone` and any other
//! 4xx is `Permanent`; an entry's `retry.retry_statuses` replaces that list
//! and its `retry.grace_ms` retries every 4xx for a while after a row's first
//! attempt.
//!
//! In ordered mode the pipeline calls the sink one hook at a time per lane, so
//! a lane's hooks reach the endpoint in order; the endpoint sees the key in
//! `x-ankusa-ordering-key`.
//!
//! # TLS: rustls with ring, not reqwest's default aws-lc-rs
//! reqwest 0.13's default TLS is rustls with the aws-lc-rs crypto provider,
//! which builds aws-lc-sys: a cmake + C build of AWS-LC, minutes on the two
//! cores this project builds on, and a cmake requirement on every machine. The
//! sink instead enables reqwest's `rustls-no-provider` feature (rustls with the
//! platform certificate verifier, no provider chosen) and rustls's `ring`
//! feature, and installs ring's provider as the process default before it
//! builds a client ([`HttpSink::new`]). ring is a small C/asm build that needs
//! only a C compiler. If the process already has a default provider (installed
//! by the binary or another library), that one is used. No native-tls: no
//! OpenSSL to link (docs/contributing.md, "TLS: rustls and ring": all TLS is
//! rustls).
//!
//! With `tls` ([`tls`]) the sink presents a client certificate to a receiver
//! that asks for one (mutual TLS), and checks the receiver's certificate
//! against a private CA instead of the platform's roots; both are read and
//! checked at load.
//!
//! # Connections
//! One [`reqwest::Client`] per sink, so each sink has its own connection pool
//! (keep-alive) and one sink's slow endpoint cannot starve another's pool.
//! `timeout_ms` bounds the whole request (connect, send, and reading the
//! answer); the body of an answer is read up to 64 KiB so the connection can go
//! back to the pool.

pub mod auth;
mod config;
pub mod oauth2;
pub mod signing;
mod sink;
pub mod tls;

pub use auth::Auth;
pub use config::{DEFAULT_TIMEOUT_MS, HttpSinkConfig};
pub use signing::Signing;
pub use sink::{DRAIN_MAX_BYTES, HttpSink, classify, client, install_crypto_provider, retry_after};
pub use tls::TlsOptions;
