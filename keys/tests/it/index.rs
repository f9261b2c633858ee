//! The index families: codecs, order, ranges, rejections.

use ankusa_keys::index::{DEDUPE_KEY_PREFIX_LEN, DUE_KEY_LEN};
use ankusa_keys::sentinel::family_sentinel;
use ankusa_keys::*;
use proptest::prelude::*;

use crate::strategies::*;

/// `key` with its ordinal bytes (1..5) replaced by `ord`.
fn with_ord(key: &[u8], ord: u32) -> Vec<u8> {
    let mut k = key.to_vec();
    k[1..5].copy_from_slice(&ord.to_be_bytes());
    k
}

/// The tests every index family gets. `$fixed` says whether its keys have a
/// fixed width (all but ?K).
macro_rules! index_family {
    ($name:ident, $family:expr, $ty:ident, $fixed:expr, $strategy:expr, $tuple:expr) => {
        // `..k` is a no-op for the one-field ?A key.
        #[allow(clippy::needless_update)]
        mod $name {
            use super::*;

            proptest! {
                #[test]
                fn decode_of_encode_is_identity(k in $strategy) {
                    let bytes = k.encode();
                    prop_assert_eq!(bytes[0], $family.as_byte());
                    if $fixed {
                        prop_assert_eq!(bytes.len(), $family.key_len());
                    }
                    prop_assert_eq!($ty::decode(&bytes), Ok(k.clone()));
                    prop_assert_eq!(Family::of_key(&bytes), Ok($family));
                }

                #[test]
                fn byte_order_is_tuple_order(a in $strategy, b in $strategy) {
                    let tuple = $tuple;
                    prop_assert_eq!(
                        a.encode().as_slice().cmp(b.encode().as_slice()),
                        tuple(&a).cmp(&tuple(&b))
                    );
                }

                #[test]
                fn tenant_range_holds_exactly_the_tenant(k in $strategy) {
                    let t = k.tenant;
                    let range = tenant_range($family, t);
                    let key = k.encode();
                    prop_assert!(range.contains(&key));
                    prop_assert!(family_range($family).contains(&key));
                    if let Some(prev) = t.0.checked_sub(1)
                        && $family.holds(TenantOrd(prev))
                    {
                        let before = $ty { tenant: TenantOrd(prev), ..k.clone() };
                        prop_assert!(!range.contains(&before.encode()));
                        prop_assert!(family_range($family).contains(&before.encode()));
                    }
                    if $family.holds(TenantOrd(t.0 + 1)) {
                        let after = $ty { tenant: TenantOrd(t.0 + 1), ..k.clone() };
                        prop_assert!(!range.contains(&after.encode()));
                    }
                    // The same tail under another family byte is another family's key.
                    for f in Family::ALL {
                        if f != $family {
                            let mut other = key.to_vec();
                            other[0] = f.as_byte();
                            prop_assert!(!range.contains(&other));
                            prop_assert!(!family_range($family).contains(&other));
                        }
                    }
                    // No key with the sentinel's ordinal is in any range.
                    let reserved = with_ord(&key, u32::MAX);
                    prop_assert!(!family_range($family).contains(&reserved));
                    prop_assert!(!range.contains(&reserved));
                    if let Some(s) = family_sentinel($family) {
                        prop_assert!(!range.contains(&s));
                        prop_assert!(!family_range($family).contains(&s));
                        prop_assert!(key.as_slice() < s.as_slice());
                    }
                }

                #[test]
                fn decode_rejects_what_is_not_a_key(k in $strategy) {
                    let key = k.encode().to_vec();
                    for f in Family::ALL {
                        if f != $family {
                            let mut other = key.clone();
                            other[0] = f.as_byte();
                            prop_assert_eq!(
                                $ty::decode(&other),
                                Err(KeyError::WrongFamily { expected: $family, found: f.as_byte() })
                            );
                        }
                    }
                    prop_assert_eq!(
                        $ty::decode(&with_ord(&key, u32::MAX)),
                        Err(KeyError::ReservedOrdinal { what: $family.what(), ord: u32::MAX })
                    );
                    let zero = $ty::decode(&with_ord(&key, 0));
                    if $family == Family::Counter {
                        prop_assert_eq!(zero.map(|z| z.tenant), Ok(TenantOrd::NODE));
                    } else {
                        prop_assert_eq!(zero, Err(KeyError::ReservedOrdinal { what: $family.what(), ord: 0 }));
                    }
                    if $fixed {
                        let n = $family.key_len();
                        let wrong = |found| Err(KeyError::WrongLength { what: $family.what(), expected: n, found });
                        prop_assert_eq!($ty::decode(&key[..n - 1]), wrong(n - 1));
                        let mut longer = key.clone();
                        longer.push(0);
                        prop_assert_eq!($ty::decode(&longer), wrong(n + 1));
                    } else {
                        prop_assert_eq!(
                            $ty::decode(&key[..DEDUPE_KEY_PREFIX_LEN - 1]),
                            Err(KeyError::Truncated { what: $family.what() })
                        );
                    }
                    prop_assert!($ty::decode(&[]).is_err());
                }
            }
        }
    };
}

index_family!(
    due,
    Family::Due,
    DueKey,
    true,
    (tenant(), u64s(), seq(), sink()).prop_map(|(tenant, due_ms, seq, sink)| DueKey {
        tenant,
        due_ms,
        seq,
        sink
    }),
    |k: &DueKey| (k.tenant.0, k.due_ms, k.seq.0, k.sink.0)
);

index_family!(
    in_flight,
    Family::InFlight,
    InFlightKey,
    true,
    (tenant(), seq(), sink()).prop_map(|(tenant, seq, sink)| InFlightKey { tenant, seq, sink }),
    |k: &InFlightKey| (k.tenant.0, k.seq.0, k.sink.0)
);

index_family!(
    active,
    Family::Active,
    ActiveKey,
    true,
    tenant().prop_map(|tenant| ActiveKey { tenant }),
    |k: &ActiveKey| k.tenant.0
);

index_family!(
    lane_member,
    Family::LaneMember,
    LaneMemberKey,
    true,
    (tenant(), lane(), seq(), sink()).prop_map(|(tenant, lane, seq, sink)| LaneMemberKey {
        tenant,
        lane,
        seq,
        sink
    }),
    |k: &LaneMemberKey| (k.tenant.0, k.lane.0, k.seq.0, k.sink.0)
);

index_family!(
    lane_head,
    Family::LaneHead,
    LaneHeadKey,
    true,
    (tenant(), lane()).prop_map(|(tenant, lane)| LaneHeadKey { tenant, lane }),
    |k: &LaneHeadKey| (k.tenant.0, k.lane.0)
);

index_family!(
    lane_marker,
    Family::LaneMarker,
    LaneMarkerKey,
    true,
    (tenant(), lane()).prop_map(|(tenant, lane)| LaneMarkerKey { tenant, lane }),
    |k: &LaneMarkerKey| (k.tenant.0, k.lane.0)
);

index_family!(
    lane_seq,
    Family::LaneSeq,
    LaneSeqKey,
    true,
    (tenant(), lane()).prop_map(|(tenant, lane)| LaneSeqKey { tenant, lane }),
    |k: &LaneSeqKey| (k.tenant.0, k.lane.0)
);

index_family!(
    dead_letter,
    Family::DeadLetter,
    DeadLetterKey,
    true,
    (tenant(), seq(), sink()).prop_map(|(tenant, seq, sink)| DeadLetterKey { tenant, seq, sink }),
    |k: &DeadLetterKey| (k.tenant.0, k.seq.0, k.sink.0)
);

index_family!(
    quarantined,
    Family::Quarantined,
    QuarantinedKey,
    true,
    (tenant(), seq()).prop_map(|(tenant, seq)| QuarantinedKey { tenant, seq }),
    |k: &QuarantinedKey| (k.tenant.0, k.seq.0)
);

index_family!(
    dedupe,
    Family::Dedupe,
    DedupeKey,
    false,
    (tenant(), source(), bytes(48)).prop_map(|(tenant, source, dedupe_key)| DedupeKey {
        tenant,
        source,
        dedupe_key
    }),
    |k: &DedupeKey| (k.tenant.0, k.source.0, k.dedupe_key.clone())
);

index_family!(
    counter,
    Family::Counter,
    CounterKey,
    true,
    (
        counter_tenant(),
        proptest::sample::select(CounterField::ALL.to_vec())
    )
        .prop_map(|(tenant, field)| CounterKey { tenant, field }),
    |k: &CounterKey| (k.tenant.0, k.field.as_u8())
);

index_family!(
    attempt_log,
    Family::AttemptLog,
    AttemptLogKey,
    true,
    (
        tenant(),
        seq(),
        sink(),
        prop_oneof![1..25u32, Just(u32::MAX), any::<u32>()]
    )
        .prop_map(|(tenant, seq, sink, attempt)| AttemptLogKey {
            tenant,
            seq,
            sink,
            attempt
        }),
    |k: &AttemptLogKey| (k.tenant.0, k.seq.0, k.sink.0, k.attempt)
);

proptest! {
    /// A row's attempt log is its own prefix, inside its hook's; a hook's is
    /// inside the range of any span of hooks that holds its seq, and no
    /// other hook's or tenant's entry is in them.
    #[test]
    fn attempt_log_ranges_hold_exactly_the_row_and_the_hook(
        t in tenant(), seq in seq(), sink in sink(), other in sink(), n in any::<u32>(), m in any::<u32>(),
        first in seq(), last in seq()
    ) {
        let key = attempt_log_key(t, seq, sink, n);
        let row = attempt_log_row_range(t, seq, sink);
        let hook = attempt_log_hook_range(t, seq);
        prop_assert!(row.contains(&key));
        prop_assert!(hook.contains(&key));
        prop_assert!(row.contains(&attempt_log_key(t, seq, sink, 0)));
        prop_assert!(row.contains(&attempt_log_key(t, seq, sink, u32::MAX)));
        prop_assert_eq!(row.contains(&attempt_log_key(t, seq, other, m)), other == sink);
        prop_assert!(hook.contains(&attempt_log_key(t, seq, other, m)));
        prop_assert!(tenant_range(Family::AttemptLog, t).start <= hook.start);
        prop_assert!(hook.end <= tenant_range(Family::AttemptLog, t).end);
        if let Some(next) = seq.0.checked_add(1) {
            prop_assert!(!hook.contains(&attempt_log_key(t, Seq(next), SinkIx(0), 0)));
        }
        if let Some(prev) = seq.0.checked_sub(1) {
            prop_assert!(!hook.contains(&attempt_log_key(t, Seq(prev), SinkIx(u16::MAX), u32::MAX)));
        }
        if t.0 < TenantOrd::LAST.0 {
            prop_assert!(!hook.contains(&attempt_log_key(TenantOrd(t.0 + 1), seq, sink, n)));
        }
        // A span of hooks: exactly the seqs first..=last.
        let span = attempt_log_hooks_range(t, first, last);
        prop_assert_eq!(span.contains(&key), first <= seq && seq <= last);
        prop_assert_eq!(span.is_empty(), first > last);
        prop_assert!(!span.contains(&dead_letter_key(t, seq, sink)));
    }

    /// A held ?D key (docs/design.md section 5, "Pause") keeps its due time,
    /// is in the tenant's held range and in no due range of a real clock, and
    /// the live and held ranges split the tenant's ?D range between them.
    #[test]
    fn the_held_band_keeps_the_due_time_and_leaves_every_due_range(
        t in tenant(), due in 0..HELD_DUE_BIT, now in 0..HELD_DUE_BIT, seq in seq(), sink in sink()
    ) {
        let key = DueKey::decode(&due_key(t, held_due_ms(due), seq, sink)).expect("decodes");
        prop_assert!(key.is_held());
        prop_assert_eq!(key.unheld_due_ms(), due);
        let plain = DueKey { tenant: t, due_ms: due, seq, sink };
        prop_assert!(!plain.is_held());
        prop_assert_eq!(plain.unheld_due_ms(), due);
        let held = key.encode();
        prop_assert!(held_due_range(t).contains(&held));
        prop_assert!(!live_due_range(t).contains(&held));
        prop_assert!(!due_range_until(t, now).contains(&held));
        prop_assert!(live_due_range(t).contains(&plain.encode()));
        prop_assert!(!held_due_range(t).contains(&plain.encode()));
        prop_assert_eq!(&live_due_range(t).start, &tenant_range(Family::Due, t).start);
        prop_assert_eq!(&live_due_range(t).end, &held_due_range(t).start);
        prop_assert_eq!(&held_due_range(t).end, &tenant_range(Family::Due, t).end);
    }

    #[test]
    fn due_range_until_holds_due_at_or_before_now(
        t in tenant(), now in u64s(), earlier in u64s(), seq in seq(), sink in sink()
    ) {
        let range = due_range_until(t, now);
        prop_assert!(range.contains(&due_key(t, now, seq, sink)));
        prop_assert!(range.contains(&due_key(t, earlier.min(now), seq, sink)));
        if let Some(later) = now.checked_add(1) {
            prop_assert!(!range.contains(&due_key(t, later, Seq(0), SinkIx(0))));
            prop_assert!(!range.contains(&due_key(t, later.max(earlier), seq, sink)));
        } else {
            prop_assert_eq!(range.clone(), tenant_range(Family::Due, t));
        }
        if t.0 < TenantOrd::LAST.0 {
            prop_assert!(!range.contains(&due_key(TenantOrd(t.0 + 1), 0, Seq(0), SinkIx(0))));
        }
        if t.0 > TenantOrd::FIRST.0 {
            prop_assert!(!range.contains(&due_key(TenantOrd(t.0 - 1), 0, seq, sink)));
            prop_assert!(!range.contains(&due_key(TenantOrd(t.0 - 1), u64::MAX, Seq(u64::MAX), SinkIx(u16::MAX))));
        }
        prop_assert!(!range.contains(&family_sentinel(Family::Due).expect("the family has a sentinel")));
    }

    #[test]
    fn lane_members_range_holds_exactly_the_lane(
        t in tenant(), l in lane(), other in lane(), seq in seq(), sink in sink()
    ) {
        let range = lane_members_range(t, l);
        prop_assert!(range.contains(&lane_member_key(t, l, seq, sink)));
        prop_assert!(range.contains(&lane_member_key(t, l, Seq(0), SinkIx(0))));
        prop_assert!(range.contains(&lane_member_key(t, l, Seq(u64::MAX), SinkIx(u16::MAX))));
        prop_assert_eq!(range.contains(&lane_member_key(t, other, seq, sink)), other == l);
        // Lanes one bit apart, at either end of the id.
        for at in [0, 15] {
            let mut near = l.0;
            near[at] ^= 1;
            prop_assert!(!range.contains(&lane_member_key(t, LaneId(near), seq, sink)));
        }
        prop_assert!(!range.contains(&lane_head_key(t, l)));
        prop_assert!(!range.contains(&lane_marker_key(t, l)));
        if t.0 < TenantOrd::LAST.0 {
            prop_assert!(!range.contains(&lane_member_key(TenantOrd(t.0 + 1), l, seq, sink)));
        }
        prop_assert!(tenant_range(Family::LaneMember, t).start <= range.start);
        prop_assert!(range.end <= tenant_range(Family::LaneMember, t).end);
        prop_assert!(!range.contains(&family_sentinel(Family::LaneMember).expect("the family has a sentinel")));
    }

    #[test]
    fn dedupe_source_range_holds_exactly_the_source(
        t in tenant(), s in source(), other in source(), k in bytes(32)
    ) {
        let range = dedupe_source_range(t, s);
        prop_assert!(range.contains(&dedupe_key(t, s, &k)));
        prop_assert!(range.contains(&dedupe_key(t, s, &[])));
        prop_assert_eq!(range.contains(&dedupe_key(t, other, &k)), other == s);
        if t.0 < TenantOrd::LAST.0 {
            prop_assert!(!range.contains(&dedupe_key(TenantOrd(t.0 + 1), s, &k)));
        }
        prop_assert!(!range.contains(&family_sentinel(Family::Dedupe).expect("the family has a sentinel")));
    }

    #[test]
    fn tenant_ranges_cover_every_family_of_the_tenant(t in tenant(), seq in seq(), sink in sink(), l in lane()) {
        let ranges = tenant_ranges(t);
        prop_assert_eq!(ranges.len(), Family::ALL.len() + 3);
        let keys: Vec<(ankusa_engine::Cf, Vec<u8>)> = vec![
            (ankusa_engine::Cf::Index, due_key(t, 5, seq, sink).to_vec()),
            (ankusa_engine::Cf::Index, in_flight_key(t, seq, sink).to_vec()),
            (ankusa_engine::Cf::Index, active_key(t).to_vec()),
            (ankusa_engine::Cf::Index, lane_member_key(t, l, seq, sink).to_vec()),
            (ankusa_engine::Cf::Index, lane_head_key(t, l).to_vec()),
            (ankusa_engine::Cf::Index, lane_marker_key(t, l).to_vec()),
            (ankusa_engine::Cf::Index, dead_letter_key(t, seq, sink).to_vec()),
            (ankusa_engine::Cf::Index, quarantined_key(t, seq).to_vec()),
            (ankusa_engine::Cf::Index, dedupe_key(t, SourceId(1), b"id")),
            (ankusa_engine::Cf::Index, counter_key(t, CounterField::Pending).to_vec()),
            (ankusa_engine::Cf::Index, attempt_log_key(t, seq, sink, 3).to_vec()),
            (ankusa_engine::Cf::Hooks, hook_key(t, seq).to_vec()),
            (ankusa_engine::Cf::Deliveries, delivery_key(t, seq, sink).to_vec()),
            (ankusa_engine::Cf::Archive, archive_key(t, 5, seq).to_vec()),
        ];
        for (cf, key) in &keys {
            let holding = ranges.iter().filter(|(c, r)| c == cf && r.contains(key)).count();
            prop_assert_eq!(holding, 1, "{:?} {:?}", cf, key);
        }
        // The node aggregate's counters are not the tenant's.
        let node = counter_key(TenantOrd::NODE, CounterField::Pending);
        prop_assert!(!ranges.iter().any(|(_, r)| r.contains(&node)));
    }
}

#[test]
fn family_bytes_are_the_designs() {
    let table = [
        (Family::Due, b'D'),
        (Family::InFlight, b'F'),
        (Family::Active, b'A'),
        (Family::LaneMember, b'O'),
        (Family::LaneHead, b'H'),
        (Family::LaneMarker, b'P'),
        (Family::DeadLetter, b'X'),
        (Family::Quarantined, b'Q'),
        (Family::Dedupe, b'K'),
        (Family::Counter, b'C'),
        (Family::LaneSeq, b'S'),
        (Family::AttemptLog, b'L'),
    ];
    assert_eq!(Family::ALL.len(), table.len());
    for (family, byte) in table {
        assert_eq!(family.as_byte(), byte);
        assert_eq!(Family::from_byte(byte), Ok(family));
    }
    for byte in 0..=u8::MAX {
        if !table.iter().any(|(_, b)| *b == byte) {
            assert_eq!(Family::from_byte(byte), Err(KeyError::UnknownFamily(byte)));
        }
    }
    assert_eq!(
        Family::of_key(&[]),
        Err(KeyError::Truncated { what: "index" })
    );
    assert_eq!(DUE_KEY_LEN, 23);
}

#[test]
fn counter_fields_are_the_designs() {
    let names = [
        "pending",
        "bytes",
        "in_flight",
        "dead",
        "dead_bytes",
        "quarantined",
        "delivered_total",
        "dead_lettered_total",
        "retries_total",
        "lanes",
        "lanes_blocked",
        "lane_members",
        "lanes_held",
    ];
    assert_eq!(CounterField::ALL.len(), 13);
    for (i, field) in CounterField::ALL.into_iter().enumerate() {
        assert_eq!(usize::from(field.as_u8()), i + 1);
        assert_eq!(field.name(), names[i]);
        assert_eq!(CounterField::from_u8(field.as_u8()), Ok(field));
    }
    for byte in [0u8, 14, 15, 0x7f, 0xff] {
        assert_eq!(
            CounterField::from_u8(byte),
            Err(KeyError::UnknownCounterField(byte))
        );
    }
    let mut key = counter_key(TenantOrd(7), CounterField::LaneMembers).to_vec();
    key[5] = 14;
    assert_eq!(
        CounterKey::decode(&key),
        Err(KeyError::UnknownCounterField(14))
    );
    assert_eq!(
        counter_key(TenantOrd(0x0102_0304), CounterField::Bytes),
        [b'C', 1, 2, 3, 4, 2]
    );
}

#[test]
fn keys_are_big_endian_fixed_width() {
    assert_eq!(
        due_key(TenantOrd(1), 0x0102, Seq(3), SinkIx(0x0405)),
        [
            b'D', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 3, 4, 5
        ]
    );
    assert_eq!(
        dedupe_key(TenantOrd(2), SourceId(3), b"ab"),
        [b'K', 0, 0, 0, 2, 0, 0, 0, 3, b'a', b'b']
    );
}

#[test]
fn family_range_spans_first_to_last_ordinal() {
    let due = family_range(Family::Due);
    assert_eq!(due.start, [b'D', 0, 0, 0, 1]);
    assert_eq!(due.end, [b'D', 0xff, 0xff, 0xff, 0xff]);
    let counters = family_range(Family::Counter);
    assert!(counters.contains(&counter_key(TenantOrd::NODE, CounterField::Pending)));
    assert!(counters.contains(&counter_key(TenantOrd::LAST, CounterField::LaneMembers)));
    assert!(!counters.contains(&[b'C', 0xff, 0xff, 0xff, 0xff, 1]));
}

#[test]
fn tenant_ord_checks_the_reserved_ordinals() {
    assert_eq!(TenantOrd::checked(1), Ok(TenantOrd(1)));
    assert_eq!(TenantOrd::checked(u32::MAX - 1), Ok(TenantOrd::LAST));
    assert!(TenantOrd::checked(0).is_err());
    assert!(TenantOrd::checked(u32::MAX).is_err());
    assert_eq!(TenantOrd(5).next(), Some(TenantOrd(6)));
    assert_eq!(TenantOrd::LAST.next(), None);
    assert!(TenantOrd::NODE.is_node());
    assert!(!TenantOrd::NODE.is_tenant());
}

#[test]
fn lane_id_hex_is_lower_case_and_full_width() {
    let mut id = [0u8; 16];
    id[0] = 0xab;
    id[15] = 0x01;
    let lane = LaneId(id);
    assert_eq!(lane.to_hex(), "ab000000000000000000000000000001");
    assert_eq!(format!("{lane}"), lane.to_hex());
    assert_eq!(
        format!("{lane:?}"),
        "LaneId(ab000000000000000000000000000001)"
    );
    // from_hex reads back what to_hex writes, in either case, and nothing
    // else.
    assert_eq!(LaneId::from_hex(&lane.to_hex()), Some(lane));
    assert_eq!(
        LaneId::from_hex("AB000000000000000000000000000001"),
        Some(lane)
    );
    for bad in [
        "",
        "ab",
        "ab00000000000000000000000000000",
        "ab0000000000000000000000000000011",
        "zz000000000000000000000000000001",
        "+b000000000000000000000000000001",
    ] {
        assert_eq!(LaneId::from_hex(bad), None, "{bad:?}");
    }
}

proptest! {
    #[test]
    fn lane_id_hex_round_trips(id in proptest::array::uniform16(any::<u8>())) {
        prop_assert_eq!(LaneId::from_hex(&LaneId(id).to_hex()), Some(LaneId(id)));
    }
}

#[test]
#[should_panic(expected = "reserved tenant ordinal")]
fn building_an_index_key_with_the_sentinel_ordinal_panics() {
    let _ = due_key(TenantOrd(u32::MAX), 0, Seq(0), SinkIx(0));
}

#[test]
#[should_panic(expected = "reserved tenant ordinal")]
fn building_a_non_counter_key_with_the_node_ordinal_panics() {
    let _ = lane_head_key(TenantOrd::NODE, LaneId([0; 16]));
}

#[test]
#[should_panic(expected = "reserved tenant ordinal")]
fn building_a_counter_key_with_the_sentinel_ordinal_panics() {
    let _ = counter_key(TenantOrd(u32::MAX), CounterField::Pending);
}

#[test]
#[should_panic(expected = "reserved tenant ordinal")]
fn a_range_of_the_node_ordinal_outside_counters_panics() {
    let _ = tenant_range(Family::Due, TenantOrd::NODE);
}
