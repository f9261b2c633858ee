//! The metadata names every adapter sends beside the body (docs/design.md section 6,
//! ADR 0004 section 6).
//!
//! Attribute names (`*_ATTR`) are for media with message attributes or broker
//! headers (SQS, Pub/Sub, RabbitMQ, NATS, Redis, Kafka headers); header names
//! (`*_HEADER`) are the HTTP sink's. `ankusa_message_version` stays `"1"` while
//! metadata only grows (the ordering key was additive).

/// The value of the message version attribute and header.
pub const MESSAGE_VERSION: &str = "1";

/// Attribute: the metadata layout's version, [`MESSAGE_VERSION`].
pub const MESSAGE_VERSION_ATTR: &str = "ankusa_message_version";
/// Attribute: the hook's idempotency key (UUID text).
pub const IDEMPOTENCY_KEY_ATTR: &str = "ankusa_idempotency_key";
/// Attribute: the tenant's name.
pub const TENANT_ATTR: &str = "ankusa_tenant";
/// Attribute: the source's name.
pub const SOURCE_ATTR: &str = "ankusa_source";
/// Attribute: when the hook was received, unix milliseconds in decimal.
pub const RECEIVED_AT_ATTR: &str = "ankusa_received_at";
/// Attribute: the ordering key, in ordered mode only.
pub const ORDERING_KEY_ATTR: &str = "ankusa_ordering_key";
/// Attribute: the hook's position in its lane, in ordered mode only (decimal;
/// [`LANE_SEQ_HEADER`]).
pub const LANE_SEQ_ATTR: &str = "ankusa_lane_seq";

/// HTTP header: [`MESSAGE_VERSION`].
pub const MESSAGE_VERSION_HEADER: &str = "x-ankusa-message-version";
/// HTTP header: the idempotency key (UUID text).
pub const IDEMPOTENCY_KEY_HEADER: &str = "x-ankusa-idempotency-key";
/// HTTP header: the tenant's name.
pub const TENANT_HEADER: &str = "x-ankusa-tenant";
/// HTTP header: the source's name.
pub const SOURCE_HEADER: &str = "x-ankusa-source";
/// HTTP header: when the hook was received, unix milliseconds in decimal.
pub const RECEIVED_AT_HEADER: &str = "x-ankusa-received-at";
/// HTTP header: this attempt's number, 1 for the first.
pub const ATTEMPT_HEADER: &str = "x-ankusa-attempt";
/// HTTP header: the hook's seq, its commit order on the node that accepted
/// it (decimal). Along one lane it increases; a redelivery (after a restart,
/// or an attempt whose answer was lost) repeats the lane's last one, so a
/// receiver can check a key's order by it (ADR 0004 section 7).
pub const SEQ_HEADER: &str = "x-ankusa-seq";
/// HTTP header: the ordering key, in ordered mode only (ADR 0004 section 6).
pub const ORDERING_KEY_HEADER: &str = "x-ankusa-ordering-key";
/// HTTP header: the hook's position in its lane, in ordered mode only: 1, 2,
/// 3, ... per ordering key and sink, the same on every retry and redelivery
/// of the hook (decimal; ADR 0004 section 6, "The lane sequence"). A receiver
/// that has seen `n` for a key and is given `n` again has a redelivery; given
/// `n + 2`, it missed one.
pub const LANE_SEQ_HEADER: &str = "x-ankusa-lane-seq";

/// Stored provider headers no sink forwards: hop-by-hop headers (RFC 9110
/// section 7.6.1), the framing of the provider's request, and the content
/// type (every sink carries it already: the HTTP sink's `content-type`,
/// `content_type`, or the message's property). The HTTP sink skips them; a
/// broker sink's `forward_headers: all` skips them (uncounted: they are not
/// the provider's hook), and listing one is an error. `proxy-*` and
/// `x-ankusa-*` names ([`NEVER_FORWARDED_PREFIXES`]) are skipped the same way.
pub const NEVER_FORWARDED: &[&str] = &[
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "content-type",
    "expect",
];

/// Name prefixes no sink forwards (see [`NEVER_FORWARDED`]).
pub const NEVER_FORWARDED_PREFIXES: &[&str] = &["proxy-", "x-ankusa-"];

/// Whether no sink forwards `name` (lower-case): [`NEVER_FORWARDED`] and its
/// prefixes.
pub fn never_forwarded(name: &str) -> bool {
    NEVER_FORWARDED.contains(&name) || NEVER_FORWARDED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The providers' signature headers, lower-case (the edge's verifiers,
/// docs/design.md section 5, "Edge"): GitHub's `x-hub-signature-256` and its
/// SHA-1 `x-hub-signature`, Stripe's `stripe-signature`, Shopify's
/// `x-shopify-hmac-sha256`, Slack's `x-slack-signature`, Standard Webhooks'
/// `webhook-signature` and Svix's `svix-signature`, Twilio's
/// `x-twilio-signature`. A sink entry with a transform delivers another body
/// than the one they sign, so they would not verify: no sink gets them with
/// a transformed body (docs/design.md section 6, "Transforms"), nor a
/// source's own `hmac` header, which the relay adds to these.
pub const PROVIDER_SIGNATURE_HEADERS: &[&str] = &[
    "x-hub-signature-256",
    "x-hub-signature",
    "stripe-signature",
    "x-shopify-hmac-sha256",
    "x-slack-signature",
    "webhook-signature",
    "svix-signature",
    "x-twilio-signature",
];
