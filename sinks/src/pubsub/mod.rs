//! The Google Pub/Sub sink (cargo feature `pubsub`, default on): publishes each
//! hook to a topic over Pub/Sub's REST API (docs/design.md sections 6 and 10,
//! ADR 0004 section 6).
//!
//! # What goes out
//! One `POST {endpoint}/v1/projects/{project}/topics/{topic}:publish` per hook
//! with `{"messages":[{"data": .., "attributes": {..}, "orderingKey": ..}]}`:
//! - `data`: the stored body in standard base64, so the subscriber decodes the
//!   provider's bytes unchanged;
//! - `attributes`: the metadata of [`crate::DeliveryCtx::attributes`]
//!   (`ankusa_message_version` `"1"`, `ankusa_idempotency_key`,
//!   `ankusa_tenant`, `ankusa_source`, `ankusa_received_at` in unix ms and,
//!   for a laned row, `ankusa_ordering_key`), and `content_type`, the
//!   provider's content type ([`crate::DeliveryCtx::content_type`], else the
//!   stored `content-type` header; absent if neither); with
//!   `forward_headers`, the chosen provider headers too, named as the
//!   lower-case header, in what is left of Pub/Sub's 100 attributes
//!   ([`crate::forward`], [`FORWARD_MEDIUM`](crate::pubsub::FORWARD_MEDIUM));
//! - `orderingKey`: see below; absent when there is none.
//!
//! `topic` is a template: `{tenant}` and `{source}` are replaced by the
//! hook's tenant and source names. Pub/Sub answers `{"messageIds": [..]}` once
//! it has stored the message; only then is the outcome `Ok`.
//!
//! # Ordered mode, and the legacy key
//! With `ordered: true`, `orderingKey` is the lane's key
//! ([`crate::DeliveryCtx::ordering_key_text`]; `"<tenant>/<source>"` for the
//! keyless lane) and the pipeline publishes a lane's hooks one at a time. For
//! subscribers to see that order, two things outside the relay are needed:
//! the subscription must have **message ordering enabled**, and the sink must
//! publish to a **regional endpoint** (`endpoint:
//! https://us-east1-pubsub.googleapis.com`, the region where the topic's
//! messages are stored): Pub/Sub keeps the order of one key only within one
//! region, and refuses ordering keys on the global endpoint when the topic's
//! message storage policy would forward them to another region. That refusal
//! (a `FAILED_PRECONDITION`, or any 400 whose message speaks of ordering keys
//! and regions or endpoints) is a `Retry`, not a dead letter (docs/design.md section
//! 10): the lane blocks, `ankusa_dispatch_lanes_blocked` shows it, and it
//! drains in order once the endpoint or the topic's policy is fixed.
//!
//! Without `ordered: true`, a Pub/Sub sink entry keeps the legacy meaning of
//! `ordering_key` (ADR 0004 section 1): the config crate leaves the option in
//! the sink's options, and the sink sends that fixed string as `orderingKey`
//! on every message, with no lane (so publishes are concurrent and Pub/Sub
//! orders them as it receives them). YAML can only give that string: a
//! `{header}`/`{json}` key there is refused at load (it needs `ordered:
//! true`). The function form of the ADR exists in the library API only:
//! [`PubSubSinkConfig::legacy_ordering_key`] =
//! [`LegacyOrderingKey::Fn`], for a program that builds its [`PubSubSink`]
//! itself; it is called with the hook under `catch_unwind`, and a panic or
//! `None` sends no key. A laned row's own key always wins over a legacy key.
//!
//! # Credentials
//! - `credentials: /path/key.json`: a service-account key file. It is read and
//!   checked at load; the first delivery signs a JWT with its key and trades it
//!   at the file's `token_uri` for an access token, cached until shortly before
//!   it expires (scope `https://www.googleapis.com/auth/pubsub`).
//! - No `credentials`: the Application Default Credentials chain, looked up
//!   on the first delivery (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's
//!   `application_default_credentials.json`, the metadata server, the `gcloud`
//!   tool). Until one answers, deliveries retry.
//! - An emulator: the `emulator_host` option, or else the environment
//!   variable `PUBSUB_EMULATOR_HOST` as Google's own clients read it (set and
//!   not empty): requests go to `http://<host:port>` instead of `endpoint`, and
//!   no credentials are sent (`credentials` is then ignored).
//!
//! Nothing is fetched at start: [`PubSubSink::new`] makes no request, so a
//! relay starts while Google is unreachable and its hooks retry. An `http://`
//! `endpoint` is accepted for local peers; a token sent there travels in
//! clear.
//!
//! Tokens come from the `gcp_auth` crate: with its `ring` feature it signs
//! with ring and fetches tokens through hyper-rustls with ring and the
//! platform's root certificates, so the build pulls no aws-lc-sys (no cmake)
//! and no OpenSSL, like the HTTP sink (whose reqwest client, with ring, this
//! sink uses for publishing: [`crate::http`]). google-cloud-auth's default
//! features build aws-lc-rs; yup-oauth2 is made for interactive OAuth flows.
//!
//! # Outcomes
//! | answer | outcome |
//! | --- | --- |
//! | 2xx with `messageIds` | [`Outcome::Ok`](crate::Outcome::Ok) |
//! | 2xx without a message id (a proxy's page, a cut-off answer) | `Retry` |
//! | 400 `FAILED_PRECONDITION`, or a 400 about ordering keys and regions/endpoints | `Retry` |
//! | 400 `INVALID_ARGUMENT` and other 400s (a message over 10 MB, a bad attribute) | `Permanent` |
//! | 401 (token refused) | `Retry` |
//! | 403 `PERMISSION_DENIED` | `Permanent` |
//! | 404 `NOT_FOUND` (topic or project) | `SinkGone` |
//! | 408, 409 `ABORTED`, 425, 429 `RESOURCE_EXHAUSTED`, 499 `CANCELLED`, 5xx | `Retry`, `after` from Retry-After |
//! | connection refused/reset, DNS, TLS, timeout (`timeout_ms`) | `Retry` |
//! | no token (ADC not found, token endpoint down or refusing, timeout) | `Retry` |
//! | any other status (413, other 4xx, 1xx/3xx: redirects are not followed) | `Permanent` |
//!
//! Every other `FAILED_PRECONDITION` (a disabled KMS key, say) is also a
//! retry: it is the topic's state that must change, not the hook, and past
//! the retry horizon an unordered row is dead-lettered anyway. A bad option
//! (missing `project`/`topic`, a bad `endpoint`, an unreadable or wrong
//! `credentials` file) is a [`SinkError`](crate::SinkError) at load that
//! names the option.
//!
//! # Connections
//! One [`reqwest::Client`] per sink (its own keep-alive pool); `timeout_ms`
//! bounds a token fetch and, separately, the whole publish request. The
//! answer is read up to 64 KiB.

mod config;
mod sink;

pub use config::{
    DEFAULT_ENDPOINT, DEFAULT_TIMEOUT_MS, EMULATOR_HOST_ENV, FORWARD_MEDIUM, LegacyOrderingKey,
    MAX_ATTRIBUTES, MAX_ORDERING_KEY_BYTES, OrderingKeyFn, PubSubSinkConfig,
};
pub use sink::{CONTENT_TYPE_ATTR, PUBSUB_SCOPE, PubSubSink, classify, is_ordering_region_error};
