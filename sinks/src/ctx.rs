//! The delivery context: what the pipeline knows about one attempt besides the
//! envelope (docs/design.md section 6, ADR 0004 section 6).

use std::borrow::Cow;

use ankusa_keys::{Seq, SinkIx};

use crate::meta;

/// One delivery attempt of one hook to one sink, as the pipeline sees it.
///
/// Built by the pipeline from the delivery row, the envelope and the
/// configuration; sinks only read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryCtx {
    /// The tenant's name (not its ordinal).
    pub tenant: String,
    /// The source's name as configured (the `{source}` of `/hooks/{source}`).
    pub source: String,
    /// The sink's name in the source's sink list, for logs and the file sink's
    /// lines; its kind is [`crate::Sink::kind`].
    pub sink_name: String,
    /// The sink's index in its source's sink list (part of the delivery row's
    /// key).
    pub sink: SinkIx,
    /// The hook's seq (commit order; the row's key with `sink`).
    pub seq: Seq,
    /// This attempt's number, 1 for the first attempt: the row's attempts so
    /// far plus one. A redelivery after a restart (recover_inflight) is again a
    /// first attempt.
    pub attempt: u32,
    /// The hook's idempotency key, in UUID text form (lower-case, hyphenated,
    /// 36 characters); the same on every redelivery and replay of the hook.
    pub idempotency_key: String,
    /// The ordering key for an ordered sink (ADR 0004 section 6): the row's key
    /// as resolved at ingest (bytes as received, at most 128 of them), or
    /// `"<tenant>/<source>"` for the keyless lane. `None` when the row is not
    /// laned.
    pub ordering_key: Option<Vec<u8>>,
    /// The lane id in hex (32 characters), for logs; `None` when not laned.
    pub lane_hex: Option<String>,
    /// The hook's position in its lane (the row's `lane_seq`: 1, 2, 3, ... per
    /// lane, kept across retries; ADR 0004 section 6, "The lane sequence").
    /// `None` when not laned, and for a head promoted by a binary before the
    /// lane sequence.
    pub lane_seq: Option<u64>,
    /// Whether the row is laned (the sink entry had `ordered: true` when the
    /// hook was ingested). Delivery follows the row, not the current config.
    pub ordered: bool,
    /// When the hook was received, unix milliseconds (the envelope's).
    pub received_at_ms: u64,
    /// The content type the provider sent (the stored `content-type` header),
    /// if any; adapters that carry one pass it unchanged.
    pub content_type: Option<String>,
    /// Most bytes of the destination's answer body a sink reports in
    /// [`crate::Sink::attempt`] (`node.attempt_log.max_body_bytes`, 0 when
    /// the relay keeps no attempt log; docs/design.md section 3, "The
    /// attempt log").
    pub response_body_max_bytes: usize,
}

impl DeliveryCtx {
    /// The ordering key to send, when this delivery is ordered: `Some` only
    /// when [`DeliveryCtx::ordered`] and a key is present.
    pub fn ordering_key(&self) -> Option<&[u8]> {
        if self.ordered {
            self.ordering_key.as_deref()
        } else {
            None
        }
    }

    /// The lane position to send: `Some` only when [`DeliveryCtx::ordered`]
    /// and the row has one.
    pub fn lane_seq(&self) -> Option<u64> {
        if self.ordered { self.lane_seq } else { None }
    }

    /// The ordering key as text for media whose attributes are strings: the
    /// key itself when it is UTF-8, otherwise lossily decoded (U+FFFD per
    /// invalid sequence). `None` when not ordered.
    pub fn ordering_key_text(&self) -> Option<Cow<'_, str>> {
        self.ordering_key().map(String::from_utf8_lossy)
    }

    /// The id a broker deduplicates on (JetStream's `Nats-Msg-Id`, an SQS FIFO
    /// queue's `MessageDeduplicationId`): `"<idempotency key>.<sink index>"`,
    /// e.g. `01932c4e-5f60-7abc-8def-0123456789ab.0` (at most 42 characters).
    ///
    /// The same on every redelivery and replay of the hook to this sink, so
    /// the broker's duplicate window drops a redelivery; different for the
    /// hook's other sinks, so two sinks of one source whose messages land in
    /// one stream or one FIFO queue (an ordered and an unordered sink, two
    /// subjects one stream captures) are both stored. With the bare
    /// idempotency key the broker kept one of them and the other sink's
    /// consumers never saw the hook. Consumers that dedupe across sinks use
    /// the `ankusa_idempotency_key` attribute.
    pub fn broker_dedupe_id(&self) -> String {
        format!("{}.{}", self.idempotency_key, self.sink.0)
    }

    /// The metadata of docs/design.md section 6 as `(attribute name, value)` pairs, for
    /// media with string attributes (message attributes, broker headers):
    /// message version, idempotency key, tenant, source, received_at (unix
    /// milliseconds, decimal) and, when ordered, the ordering key and the
    /// lane position.
    pub fn attributes(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (meta::MESSAGE_VERSION_ATTR, meta::MESSAGE_VERSION.to_owned()),
            (meta::IDEMPOTENCY_KEY_ATTR, self.idempotency_key.clone()),
            (meta::TENANT_ATTR, self.tenant.clone()),
            (meta::SOURCE_ATTR, self.source.clone()),
            (meta::RECEIVED_AT_ATTR, self.received_at_ms.to_string()),
        ];
        if let Some(key) = self.ordering_key_text() {
            out.push((meta::ORDERING_KEY_ATTR, key.into_owned()));
        }
        if let Some(n) = self.lane_seq() {
            out.push((meta::LANE_SEQ_ATTR, n.to_string()));
        }
        out
    }
}

/// The UUID text form (`8-4-4-4-12` lower-case hex) of 16 idempotency key bytes,
/// as [`DeliveryCtx::idempotency_key`] holds it.
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(ordered: bool, key: Option<&[u8]>) -> DeliveryCtx {
        DeliveryCtx {
            tenant: "acme".into(),
            source: "stripe".into(),
            sink_name: "out".into(),
            sink: SinkIx(0),
            seq: Seq(9),
            attempt: 1,
            idempotency_key: "01932c4e-5f60-7abc-8def-0123456789ab".into(),
            ordering_key: key.map(<[u8]>::to_vec),
            lane_hex: None,
            lane_seq: Some(4),
            ordered,
            received_at_ms: 1_700_000_000_000,
            content_type: None,
            response_body_max_bytes: 4096,
        }
    }

    #[test]
    fn attributes_carry_the_ordering_key_only_when_ordered() {
        let base = vec![
            ("ankusa_message_version", "1".to_owned()),
            (
                "ankusa_idempotency_key",
                "01932c4e-5f60-7abc-8def-0123456789ab".to_owned(),
            ),
            ("ankusa_tenant", "acme".to_owned()),
            ("ankusa_source", "stripe".to_owned()),
            ("ankusa_received_at", "1700000000000".to_owned()),
        ];
        assert_eq!(ctx(false, Some(b"cus_1")).attributes(), base);
        assert_eq!(ctx(false, Some(b"cus_1")).ordering_key(), None);
        let mut ordered = base.clone();
        ordered.push(("ankusa_ordering_key", "cus_1".to_owned()));
        ordered.push(("ankusa_lane_seq", "4".to_owned()));
        assert_eq!(ctx(true, Some(b"cus_1")).attributes(), ordered);
        assert_eq!(
            ctx(true, Some(b"a\xffb")).ordering_key_text().as_deref(),
            Some("a\u{fffd}b")
        );
        let mut keyless = base.clone();
        keyless.push(("ankusa_lane_seq", "4".to_owned()));
        assert_eq!(ctx(true, None).attributes(), keyless);
        assert_eq!(ctx(false, None).lane_seq(), None);
    }

    #[test]
    fn broker_dedupe_id_is_scoped_to_the_sink() {
        let c = ctx(false, None);
        assert_eq!(
            c.broker_dedupe_id(),
            "01932c4e-5f60-7abc-8def-0123456789ab.0"
        );
        let other = DeliveryCtx {
            sink: SinkIx(65535),
            attempt: 3,
            ..c.clone()
        };
        assert_eq!(
            other.broker_dedupe_id(),
            "01932c4e-5f60-7abc-8def-0123456789ab.65535"
        );
        assert_eq!(other.broker_dedupe_id().len(), 42);
        assert_eq!(
            DeliveryCtx {
                attempt: 9,
                ..c.clone()
            }
            .broker_dedupe_id(),
            c.broker_dedupe_id()
        );
    }

    #[test]
    fn uuid_text_form() {
        let b = [
            0x01, 0x93, 0x2c, 0x4e, 0x5f, 0x60, 0x7a, 0xbc, 0x8d, 0xef, 0x01, 0x23, 0x45, 0x67,
            0x89, 0xab,
        ];
        assert_eq!(uuid_text(&b), "01932c4e-5f60-7abc-8def-0123456789ab");
    }
}
