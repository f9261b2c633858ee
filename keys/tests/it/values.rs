//! Values of the index families.

use ankusa_engine::encode_counter;
use ankusa_keys::*;
use proptest::prelude::*;

use crate::strategies::*;

fn kind() -> impl Strategy<Value = DueKind> {
    proptest::sample::select(DueKind::ALL.to_vec())
}

fn wrong_len<T>(what: &'static str, expected: usize, found: usize) -> Result<T, ValueError> {
    Err(ValueError::WrongLength {
        what,
        expected,
        found,
    })
}

proptest! {
    #[test]
    fn due_value_round_trips(size in any::<u32>(), kind in kind()) {
        let v = DueValue { size, kind };
        let bytes = v.encode();
        prop_assert_eq!(&bytes[..4], &size.to_be_bytes()[..]);
        prop_assert_eq!(bytes[4], kind.as_u8());
        prop_assert_eq!(DueValue::decode(&bytes), Ok(v));
        prop_assert_eq!(DueValue::decode(&bytes[..4]), wrong_len("?D due", 5, 4));
    }

    #[test]
    fn in_flight_value_round_trips(size in any::<u32>(), kind in kind(), claimed_at_ms in u64s()) {
        let v = InFlightValue { size, kind, claimed_at_ms };
        let bytes = v.encode();
        prop_assert_eq!(bytes.len(), 13);
        prop_assert_eq!(InFlightValue::decode(&bytes), Ok(v));
        prop_assert_eq!(InFlightValue::decode(&bytes[..12]), wrong_len("?F in flight", 13, 12));
    }

    #[test]
    fn lane_member_value_round_trips(size in any::<u32>()) {
        let v = LaneMemberValue { size };
        prop_assert_eq!(LaneMemberValue::decode(&v.encode()), Ok(v));
        prop_assert_eq!(LaneMemberValue::decode(&[0; 5]), wrong_len("?O lane member", 4, 5));
    }

    #[test]
    fn lane_head_value_round_trips(seq in seq(), sink in sink()) {
        let v = LaneHeadValue { seq, sink };
        let bytes = v.encode();
        prop_assert_eq!(bytes.len(), 10);
        prop_assert_eq!(LaneHeadValue::decode(&bytes), Ok(v));
        prop_assert_eq!(LaneHeadValue::decode(&bytes[..9]), wrong_len("?H lane head", 10, 9));
    }

    #[test]
    fn dead_letter_value_round_trips(dead_at_ms in u64s(), reason in ".{0,40}") {
        let v = DeadLetterValue { dead_at_ms, reason };
        let bytes = v.encode();
        prop_assert_eq!(&bytes[..8], &dead_at_ms.to_be_bytes()[..]);
        prop_assert_eq!(DeadLetterValue::decode(&bytes), Ok(v));
        prop_assert_eq!(
            DeadLetterValue::decode(&bytes[..7]),
            Err(ValueError::Truncated { what: "?X dead letter" })
        );
    }

    #[test]
    fn quarantined_value_round_trips(reason in ".{0,40}") {
        let v = QuarantinedValue { reason };
        prop_assert_eq!(QuarantinedValue::decode(&v.encode()), Ok(v));
    }

    #[test]
    fn dedupe_value_round_trips(seq in seq(), expires_at_ms in u64s()) {
        let v = DedupeValue { seq, expires_at_ms };
        let bytes = v.encode();
        prop_assert_eq!(bytes.len(), 16);
        prop_assert_eq!(DedupeValue::decode(&bytes), Ok(v));
        prop_assert_eq!(DedupeValue::decode(&bytes[1..]), wrong_len("?K dedupe", 16, 15));
    }

    #[test]
    fn counter_value_round_trips(n in any::<i64>()) {
        prop_assert_eq!(decode_counter_value(&encode_counter(n)), Ok(n));
        prop_assert_eq!(decode_counter_value(&encode_counter(n)[1..]), wrong_len("?C counter", 8, 7));
    }
}

#[test]
fn due_kinds_are_the_designs() {
    let table = [
        (DueKind::First, 0u8, false, false),
        (DueKind::Retry, 1, false, true),
        (DueKind::HeadFirst, 2, true, false),
        (DueKind::HeadRetry, 3, true, true),
    ];
    for (kind, byte, head, retry) in table {
        assert_eq!(kind.as_u8(), byte);
        assert_eq!(DueKind::from_u8(byte), Some(kind));
        assert_eq!(kind.is_head(), head);
        assert_eq!(kind.is_retry(), retry);
        assert_eq!(kind.as_first().is_head(), head);
        assert!(!kind.as_first().is_retry());
        assert_eq!(kind.as_retry().is_head(), head);
        assert!(kind.as_retry().is_retry());
    }
    assert_eq!(DueKind::from_u8(4), None);
}

#[test]
fn unknown_kinds_and_bad_utf8_are_refused() {
    let mut due = DueValue {
        size: 9,
        kind: DueKind::First,
    }
    .encode();
    due[4] = 4;
    assert!(matches!(
        DueValue::decode(&due),
        Err(ValueError::InvalidField { field: "kind", .. })
    ));
    let mut in_flight = InFlightValue {
        size: 9,
        kind: DueKind::HeadRetry,
        claimed_at_ms: 1,
    }
    .encode();
    in_flight[4] = 0xff;
    assert!(matches!(
        InFlightValue::decode(&in_flight),
        Err(ValueError::InvalidField { field: "kind", .. })
    ));
    let mut dead = DeadLetterValue {
        dead_at_ms: 1,
        reason: String::new(),
    }
    .encode();
    dead.push(0xff);
    assert!(matches!(
        DeadLetterValue::decode(&dead),
        Err(ValueError::InvalidField {
            field: "reason",
            ..
        })
    ));
    assert!(matches!(
        QuarantinedValue::decode(&[0xc3]),
        Err(ValueError::InvalidField {
            field: "reason",
            ..
        })
    ));
}

#[test]
fn marker_values_are_empty() {
    assert_eq!(decode_empty_value(&EMPTY_VALUE), Ok(()));
    assert_eq!(decode_empty_value(&[0]), wrong_len("?A/?P marker", 0, 1));
}
