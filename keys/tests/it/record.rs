//! The versioned values: envelope, delivery row and attempt record.

use ankusa_keys::record::{ATTEMPT_RECORD_VERSION, DELIVERY_ROW_VERSION, ENVELOPE_VERSION};
use ankusa_keys::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::Index;

use crate::strategies::*;

fn envelope() -> impl Strategy<Value = Envelope> {
    (
        source(),
        u64s(),
        "[A-Z]{1,7}",
        "/[a-z0-9/]{0,20}",
        option::of(".{0,20}"),
        vec((bytes(16), bytes(32)), 0..4),
        bytes(256),
        option::of(bytes(32)),
        any::<[u8; 16]>(),
        option::of(any::<u64>().prop_map(Seq)),
    )
        .prop_map(
            |(
                source,
                received_at_ms,
                method,
                path,
                query,
                headers,
                body,
                dedupe_key,
                idempotency_key,
                replay_of,
            )| Envelope {
                source,
                received_at_ms,
                method,
                path,
                query,
                headers,
                body,
                dedupe_key,
                idempotency_key,
                replay_of,
            },
        )
}

fn row() -> impl Strategy<Value = DeliveryRow> {
    (
        proptest::sample::select(RowState::ALL.to_vec()),
        any::<u32>(),
        prop_oneof![0..3u32, any::<u32>()],
        option::of(u64s()),
        option::of(".{0,40}"),
        option::of(lane()),
        option::of(vec(any::<u8>(), 0..=ORDERING_KEY_MAX_BYTES)),
        option::of(u64s()),
        prop_oneof![Just(0u32), 1..25u32, any::<u32>()],
    )
        .prop_map(
            |(
                state,
                size,
                attempts,
                first_attempt_at_ms,
                last_error,
                lane,
                ordering_key,
                lane_seq,
                logged_attempts,
            )| {
                DeliveryRow {
                    state,
                    size,
                    attempts,
                    first_attempt_at_ms,
                    last_error,
                    lane,
                    ordering_key,
                    lane_seq,
                    logged_attempts,
                }
            },
        )
}

fn attempt() -> impl Strategy<Value = AttemptRecord> {
    (
        u64s(),
        u64s(),
        prop_oneof![
            Just("delivered".to_owned()),
            Just("retry".to_owned()),
            "[a-z_]{0,12}"
        ],
        option::of(prop_oneof![Just(200u16), Just(503), any::<u16>()]),
        option::of(".{0,40}"),
        vec((bytes(16), bytes(32)), 0..4),
        bytes(256),
        any::<bool>(),
    )
        .prop_map(
            |(at_ms, duration_ms, outcome, status, error, headers, body, body_truncated)| {
                AttemptRecord {
                    at_ms,
                    duration_ms,
                    outcome,
                    status,
                    error,
                    headers,
                    body,
                    body_truncated,
                }
            },
        )
}

/// One field: `tag:8, len:32, bytes`.
fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
    let mut f = vec![tag];
    f.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    f.extend_from_slice(bytes);
    f
}

/// A versioned value from its fields, with the end tag.
fn value(version: u8, fields: &[(u8, &[u8])]) -> Vec<u8> {
    let mut v = vec![version];
    for (tag, bytes) in fields {
        v.extend(field(*tag, bytes));
    }
    v.push(0);
    v
}

/// `encoded` with an unknown field before its end tag and another right after
/// its version byte.
fn with_unknown_fields(encoded: &[u8], tag: u8, data: &[u8]) -> Vec<u8> {
    let mut v = encoded.to_vec();
    assert_eq!(v.pop(), Some(0), "a versioned value ends with the end tag");
    v.extend(field(tag, data));
    v.push(0);
    v.splice(1..1, field(tag, data));
    v
}

proptest! {
    #[test]
    fn envelope_round_trips(e in envelope()) {
        let bytes = e.encode();
        prop_assert_eq!(bytes[0], ENVELOPE_VERSION);
        let decoded = Envelope::decode(&bytes);
        prop_assert_eq!(decoded.as_ref(), Ok(&e));
        prop_assert_eq!(decoded.map(|d| d.encode()), Ok(bytes.clone()));
        // The dispatcher's scan reads the source without decoding the rest.
        prop_assert_eq!(Envelope::peek_source(&bytes), Ok(e.source));
        // The edge checks the byte bound with the length the Writer counts.
        prop_assert_eq!(e.encoded_len(), bytes.len());
    }

    #[test]
    fn envelope_skips_unknown_fields(e in envelope(), tag in 11..=u8::MAX, data in bytes(40)) {
        prop_assert_eq!(Envelope::decode(&with_unknown_fields(&e.encode(), tag, &data)), Ok(e));
    }

    #[test]
    fn envelope_refuses_a_truncated_value(e in envelope(), cut in any::<Index>()) {
        let bytes = e.encode();
        let cut = cut.index(bytes.len());
        let expected = if cut == 0 {
            Err(ValueError::UnknownVersion { what: "envelope", found: None, supported: ENVELOPE_VERSION })
        } else {
            Err(ValueError::Truncated { what: "envelope" })
        };
        prop_assert_eq!(Envelope::decode(&bytes[..cut]), expected);
    }

    #[test]
    fn row_round_trips(r in row()) {
        let bytes = r.encode();
        prop_assert_eq!(bytes[0], DELIVERY_ROW_VERSION);
        let decoded = DeliveryRow::decode(&bytes);
        prop_assert_eq!(decoded.as_ref(), Ok(&r));
        prop_assert_eq!(decoded.map(|d| d.encode()), Ok(bytes));
    }

    #[test]
    fn row_skips_unknown_fields(r in row(), tag in 10..=u8::MAX, data in bytes(40)) {
        prop_assert_eq!(DeliveryRow::decode(&with_unknown_fields(&r.encode(), tag, &data)), Ok(r));
    }

    #[test]
    fn row_refuses_a_truncated_value(r in row(), cut in any::<Index>()) {
        let bytes = r.encode();
        let cut = cut.index(bytes.len());
        let expected = if cut == 0 {
            Err(ValueError::UnknownVersion { what: "delivery row", found: None, supported: DELIVERY_ROW_VERSION })
        } else {
            Err(ValueError::Truncated { what: "delivery row" })
        };
        prop_assert_eq!(DeliveryRow::decode(&bytes[..cut]), expected);
    }

    #[test]
    fn attempt_round_trips(a in attempt()) {
        let bytes = a.encode();
        prop_assert_eq!(bytes[0], ATTEMPT_RECORD_VERSION);
        let decoded = AttemptRecord::decode(&bytes);
        prop_assert_eq!(decoded.as_ref(), Ok(&a));
        prop_assert_eq!(decoded.map(|d| d.encode()), Ok(bytes));
    }

    #[test]
    fn attempt_skips_unknown_fields(a in attempt(), tag in 9..=u8::MAX, data in bytes(40)) {
        prop_assert_eq!(AttemptRecord::decode(&with_unknown_fields(&a.encode(), tag, &data)), Ok(a));
    }

    #[test]
    fn attempt_refuses_a_truncated_value(a in attempt(), cut in any::<Index>()) {
        let bytes = a.encode();
        let cut = cut.index(bytes.len());
        let expected = if cut == 0 {
            Err(ValueError::UnknownVersion { what: "attempt record", found: None, supported: ATTEMPT_RECORD_VERSION })
        } else {
            Err(ValueError::Truncated { what: "attempt record" })
        };
        prop_assert_eq!(AttemptRecord::decode(&bytes[..cut]), expected);
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert_eq!(AttemptRecord::decode(&longer), Err(ValueError::TrailingBytes { what: "attempt record" }));
    }

    #[test]
    fn bytes_after_the_end_tag_are_refused(e in envelope(), r in row(), extra in vec(any::<u8>(), 1..8)) {
        let mut env = e.encode();
        env.extend_from_slice(&extra);
        prop_assert_eq!(Envelope::decode(&env), Err(ValueError::TrailingBytes { what: "envelope" }));
        let mut row = r.encode();
        row.extend_from_slice(&extra);
        prop_assert_eq!(DeliveryRow::decode(&row), Err(ValueError::TrailingBytes { what: "delivery row" }));
    }
}

const ROW_FIELDS: [(u8, &[u8]); 3] = [(1, &[2]), (2, &[0, 0, 1, 0]), (3, &[0, 0, 0, 4])];

#[test]
fn a_row_has_a_stable_layout() {
    let row = DeliveryRow {
        state: RowState::Member,
        size: 256,
        attempts: 4,
        first_attempt_at_ms: None,
        last_error: None,
        lane: Some(LaneId([7; 16])),
        ordering_key: Some(b"cus_1".to_vec()),
        lane_seq: Some(258),
        logged_attempts: 0,
    };
    let mut fields = ROW_FIELDS.to_vec();
    fields.push((6, &[7; 16]));
    fields.push((7, b"cus_1"));
    fields.push((8, &[0, 0, 0, 0, 0, 0, 1, 2]));
    assert_eq!(row.encode(), value(1, &fields));
    // A format 1 row (no lane fields) reads as unlaned.
    assert_eq!(
        DeliveryRow::decode(&value(1, &ROW_FIELDS)),
        Ok(DeliveryRow {
            lane: None,
            ordering_key: None,
            lane_seq: None,
            ..row.clone()
        })
    );
    // A row of a binary before the lane sequence (no field 8) reads without
    // a position; the row gets none until it is promoted again.
    assert_eq!(
        DeliveryRow::decode(&value(1, &fields[..fields.len() - 1])),
        Ok(DeliveryRow {
            lane_seq: None,
            ..row.clone()
        })
    );
    // The attempt log's count is tag 9, written only when above 0, so a row
    // of a relay that keeps no log is byte for byte what it was before.
    let logged = DeliveryRow {
        logged_attempts: 21,
        ..row
    };
    fields.push((9, &[0, 0, 0, 21]));
    assert_eq!(logged.encode(), value(1, &fields));
    assert_eq!(DeliveryRow::decode(&value(1, &fields)), Ok(logged));
}

#[test]
fn a_row_without_a_required_field_is_refused() {
    for missing in 0..ROW_FIELDS.len() {
        let fields: Vec<(u8, &[u8])> = ROW_FIELDS
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != missing)
            .map(|(_, f)| *f)
            .collect();
        let field = ["state", "size", "attempts"][missing];
        assert_eq!(
            DeliveryRow::decode(&value(1, &fields)),
            Err(ValueError::MissingField {
                what: "delivery row",
                field
            })
        );
    }
}

#[test]
fn a_row_with_bad_fields_is_refused() {
    let with = |extra: (u8, &'static [u8])| {
        let mut fields = ROW_FIELDS.to_vec();
        fields.push(extra);
        DeliveryRow::decode(&value(1, &fields))
    };
    assert_eq!(
        with((1, &[0])),
        Err(ValueError::DuplicateField {
            what: "delivery row",
            field: "state"
        })
    );
    assert!(matches!(
        with((6, &[1; 15])),
        Err(ValueError::InvalidField { field: "lane", .. })
    ));
    assert!(matches!(
        with((4, &[1; 4])),
        Err(ValueError::InvalidField {
            field: "first_attempt_at_ms",
            ..
        })
    ));
    assert!(matches!(
        with((5, &[0xff])),
        Err(ValueError::InvalidField {
            field: "last_error",
            ..
        })
    ));
    assert!(matches!(
        with((7, &[b'k'; ORDERING_KEY_MAX_BYTES + 1])),
        Err(ValueError::InvalidField {
            field: "ordering_key",
            ..
        })
    ));
    assert!(with((7, &[b'k'; ORDERING_KEY_MAX_BYTES])).is_ok());
    assert!(matches!(
        with((9, &[0; 2])),
        Err(ValueError::InvalidField {
            field: "logged_attempts",
            ..
        })
    ));
    assert_eq!(with((9, &[0, 0, 0, 1])).map(|r| r.logged_attempts), Ok(1));
    let bad_state = value(1, &[(1, &[4]), (2, &[0; 4]), (3, &[0; 4])]);
    assert!(matches!(
        DeliveryRow::decode(&bad_state),
        Err(ValueError::InvalidField { field: "state", .. })
    ));
    assert_eq!(
        DeliveryRow::decode(&value(2, &ROW_FIELDS)),
        Err(ValueError::UnknownVersion {
            what: "delivery row",
            found: Some(2),
            supported: 1
        })
    );
}

#[test]
#[should_panic(expected = "ordering key of 129 bytes")]
fn encoding_an_overlong_ordering_key_panics() {
    let row = DeliveryRow {
        state: RowState::Due,
        size: 1,
        attempts: 0,
        first_attempt_at_ms: None,
        last_error: None,
        lane: None,
        ordering_key: Some(vec![0; ORDERING_KEY_MAX_BYTES + 1]),
        lane_seq: None,
        logged_attempts: 0,
    };
    let _ = row.encode();
}

fn envelope_fields() -> Vec<(u8, Vec<u8>)> {
    vec![
        (1, 3u32.to_be_bytes().to_vec()),
        (2, 1_700_000_000_000u64.to_be_bytes().to_vec()),
        (3, b"POST".to_vec()),
        (4, b"/hooks/stripe".to_vec()),
        (6, [&4u32.to_be_bytes()[..], b"x-idsome-id"].concat()),
        (7, b"{}".to_vec()),
        (9, vec![9; 16]),
    ]
}

fn envelope_value(fields: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let borrowed: Vec<(u8, &[u8])> = fields.iter().map(|(t, b)| (*t, b.as_slice())).collect();
    value(1, &borrowed)
}

#[test]
fn an_envelope_has_a_stable_layout() {
    let decoded = Envelope::decode(&envelope_value(&envelope_fields()));
    assert_eq!(
        decoded,
        Ok(Envelope {
            source: SourceId(3),
            received_at_ms: 1_700_000_000_000,
            method: "POST".into(),
            path: "/hooks/stripe".into(),
            query: None,
            headers: vec![(b"x-id".to_vec(), b"some-id".to_vec())],
            body: b"{}".to_vec(),
            dedupe_key: None,
            idempotency_key: [9; 16],
            replay_of: None,
        })
    );
    assert_eq!(
        decoded.map(|e| e.encode()),
        Ok(envelope_value(&envelope_fields()))
    );
}

/// Tag 10 (replay_of, docs/design.md section 5, "Replayer"): a replay copy's
/// original seq, 8 bytes big endian after the idempotency key; any other
/// length is refused.
#[test]
fn a_replay_copy_carries_its_originals_seq_in_tag_10() {
    let mut fields = envelope_fields();
    fields.push((10, 42u64.to_be_bytes().to_vec()));
    let decoded = Envelope::decode(&envelope_value(&fields)).expect("decodes");
    assert_eq!(decoded.replay_of, Some(Seq(42)));
    assert_eq!(decoded.encode(), envelope_value(&fields));
    let mut bad = envelope_fields();
    bad.push((10, vec![1, 2, 3]));
    assert!(matches!(
        Envelope::decode(&envelope_value(&bad)),
        Err(ValueError::InvalidField {
            field: "replay_of",
            ..
        })
    ));
}

#[test]
fn an_envelope_without_a_required_field_is_refused() {
    let required = [
        (1, "source"),
        (2, "received_at_ms"),
        (3, "method"),
        (4, "path"),
        (7, "body"),
        (9, "idempotency_key"),
    ];
    for (tag, name) in required {
        let fields: Vec<(u8, Vec<u8>)> = envelope_fields()
            .into_iter()
            .filter(|(t, _)| *t != tag)
            .collect();
        assert_eq!(
            Envelope::decode(&envelope_value(&fields)),
            Err(ValueError::MissingField {
                what: "envelope",
                field: name
            })
        );
    }
}

#[test]
fn an_envelope_with_bad_fields_is_refused() {
    let with = |extra: (u8, Vec<u8>)| {
        let mut fields = envelope_fields();
        fields.push(extra);
        Envelope::decode(&envelope_value(&fields))
    };
    assert_eq!(
        with((7, b"again".to_vec())),
        Err(ValueError::DuplicateField {
            what: "envelope",
            field: "body"
        })
    );
    assert!(matches!(
        with((3, vec![0xff])),
        Err(ValueError::InvalidField {
            field: "method",
            ..
        })
    ));
    let mut short_source = envelope_fields();
    short_source[0].1.pop();
    assert!(matches!(
        Envelope::decode(&envelope_value(&short_source)),
        Err(ValueError::InvalidField {
            field: "source",
            ..
        })
    ));
    let mut short_key = envelope_fields();
    short_key[6].1.pop();
    assert!(matches!(
        Envelope::decode(&envelope_value(&short_key)),
        Err(ValueError::InvalidField {
            field: "idempotency_key",
            ..
        })
    ));
    // A header whose name length runs past the field.
    assert_eq!(
        with((6, [&100u32.to_be_bytes()[..], b"x"].concat())),
        Err(ValueError::Truncated { what: "envelope" })
    );
    assert_eq!(
        Envelope::decode(&[]),
        Err(ValueError::UnknownVersion {
            what: "envelope",
            found: None,
            supported: 1
        })
    );
}

#[test]
fn peeking_the_source_refuses_what_has_none() {
    let without: Vec<(u8, Vec<u8>)> = envelope_fields()
        .into_iter()
        .filter(|(t, _)| *t != 1)
        .collect();
    assert_eq!(
        Envelope::peek_source(&envelope_value(&without)),
        Err(ValueError::MissingField {
            what: "envelope",
            field: "source"
        })
    );
    assert!(matches!(
        Envelope::peek_source(&[]),
        Err(ValueError::UnknownVersion { .. })
    ));
    assert!(matches!(
        Envelope::peek_source(&[ENVELOPE_VERSION, 1, 0]),
        Err(ValueError::Truncated { .. })
    ));
}

#[test]
fn an_attempt_has_a_stable_layout() {
    let a = AttemptRecord {
        at_ms: 1_700_000_000_000,
        duration_ms: 12,
        outcome: "retry".into(),
        status: Some(503),
        error: Some("HTTP 503".into()),
        headers: vec![(b"retry-after".to_vec(), b"5".to_vec())],
        body: b"busy".to_vec(),
        body_truncated: true,
    };
    let header = [&11u32.to_be_bytes()[..], b"retry-after", b"5"].concat();
    let fields: Vec<(u8, &[u8])> = vec![
        (1, &[0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0]),
        (2, &[0, 0, 0, 0, 0, 0, 0, 12]),
        (3, b"retry"),
        (4, &[1, 0xf7]),
        (5, b"HTTP 503"),
        (6, &header),
        (7, b"busy"),
        (8, &[1]),
    ];
    assert_eq!(a.encode(), value(1, &fields));
    // A delivery with no answer kept: the three required fields only.
    let bare = AttemptRecord {
        at_ms: 1,
        duration_ms: 0,
        outcome: "delivered".into(),
        ..AttemptRecord::default()
    };
    assert_eq!(
        bare.encode(),
        value(
            1,
            &[
                (1, &[0, 0, 0, 0, 0, 0, 0, 1]),
                (2, &[0; 8]),
                (3, b"delivered")
            ]
        )
    );
    for missing in [1u8, 2, 3] {
        let without: Vec<(u8, &[u8])> = fields
            .iter()
            .copied()
            .filter(|(t, _)| *t != missing)
            .collect();
        let field = ["at_ms", "duration_ms", "outcome"][usize::from(missing - 1)];
        assert_eq!(
            AttemptRecord::decode(&value(1, &without)),
            Err(ValueError::MissingField {
                what: "attempt record",
                field
            })
        );
    }
    let with = |extra: (u8, &'static [u8])| {
        let mut f = fields.clone();
        f.push(extra);
        f.sort_by_key(|(t, _)| *t);
        AttemptRecord::decode(&value(1, &f))
    };
    assert_eq!(
        with((4, &[0, 200])),
        Err(ValueError::DuplicateField {
            what: "attempt record",
            field: "status"
        })
    );
    let mut zero_flag = fields.clone();
    zero_flag[7] = (8, &[0]);
    assert!(matches!(
        AttemptRecord::decode(&value(1, &zero_flag)),
        Err(ValueError::InvalidField {
            field: "body_truncated",
            ..
        })
    ));
    assert_eq!(
        AttemptRecord::decode(&value(2, &fields)),
        Err(ValueError::UnknownVersion {
            what: "attempt record",
            found: Some(2),
            supported: 1
        })
    );
}
