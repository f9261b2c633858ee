//! Integration tests of the sinks against real peers: a hyper server on
//! 127.0.0.1:0 that records every request (`server`), and real files in a
//! temporary directory.

#[cfg(feature = "file")]
mod file;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
mod http_auth;
#[cfg(feature = "http")]
mod http_tls;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "pubsub")]
mod pubsub;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "http")]
mod server;
#[cfg(feature = "sqs")]
mod sqs;

use ankusa_keys::{Envelope, Seq, SinkIx, SourceId};
use ankusa_sinks::{DeliveryCtx, uuid_text};

/// The body of `shopify/orders_create.json` from the shared corpus, byte for
/// byte: 22 `\/` escapes and the order id 820982911946154508 (above 2^53).
pub const SHOPIFY_BODY: &[u8] = include_bytes!("data/shopify_orders_create.body");
/// Its `body_sha256` in the corpus index.
pub const SHOPIFY_SHA256: &str = "6269b23334e834338af7b2b89acb5dbe614d7f81e64c4cea61741728d40cf692";

/// A fixed idempotency key (a UUIDv7's bytes).
pub const IDEMPOTENCY_KEY: [u8; 16] = [
    0x01, 0x93, 0x2c, 0x4e, 0x5f, 0x60, 0x7a, 0xbc, 0x8d, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
];

/// A stored hook with `body` and a JSON content type.
pub fn hook(body: &[u8]) -> Envelope {
    Envelope {
        source: SourceId(3),
        received_at_ms: 1_764_500_000_123,
        method: "POST".into(),
        path: "/hooks/shopify".into(),
        query: Some("shop=corpus-test-shop".into()),
        headers: vec![
            (b"Content-Type".to_vec(), b"application/json".to_vec()),
            (b"X-Shopify-Topic".to_vec(), b"orders/create".to_vec()),
        ],
        body: body.to_vec(),
        dedupe_key: None,
        idempotency_key: IDEMPOTENCY_KEY,
        replay_of: None,
    }
}

/// The context of a first, unordered attempt for tenant `acme`, source
/// `shopify`.
pub fn ctx() -> DeliveryCtx {
    DeliveryCtx {
        tenant: "acme".into(),
        source: "shopify".into(),
        sink_name: "out".into(),
        sink: SinkIx(1),
        seq: Seq(42),
        attempt: 1,
        idempotency_key: uuid_text(&IDEMPOTENCY_KEY),
        ordering_key: None,
        lane_hex: None,
        lane_seq: None,
        ordered: false,
        received_at_ms: 1_764_500_000_123,
        content_type: Some("application/json".into()),
        response_body_max_bytes: 4096,
    }
}

/// `ctx()` in ordered mode with `key`.
pub fn ordered_ctx(key: &[u8]) -> DeliveryCtx {
    DeliveryCtx {
        ordering_key: Some(key.to_vec()),
        lane_hex: Some("00112233445566778899aabbccddeeff".into()),
        lane_seq: Some(3),
        ordered: true,
        ..ctx()
    }
}

/// Lower-case hex of sha256(bytes).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn shopify_fixture_is_the_corpus_body() {
    assert_eq!(SHOPIFY_BODY.len(), 6698);
    assert_eq!(sha256_hex(SHOPIFY_BODY), SHOPIFY_SHA256);
    let text = std::str::from_utf8(SHOPIFY_BODY).expect("utf-8");
    assert_eq!(text.matches("\\/").count(), 22);
    assert!(text.contains("820982911946154508"));
}
