//! Keys and values of cf `meta`.

use ankusa_keys::meta::*;
use ankusa_keys::*;
use proptest::prelude::*;

use crate::strategies::*;

fn meta_key() -> impl Strategy<Value = MetaKey> {
    prop_oneof![
        Just(MetaKey::Format),
        Just(MetaKey::Migration),
        Just(MetaKey::NodeId),
        Just(MetaKey::Origin),
        Just(MetaKey::SeqHighWater),
        ".{0,20}".prop_map(MetaKey::TenantByName),
        tenant().prop_map(MetaKey::TenantByOrd),
        ".{0,20}".prop_map(MetaKey::SourceByName),
        source().prop_map(MetaKey::SourceById),
        source().prop_map(MetaKey::SourceSinks),
        source().prop_map(|s| MetaKey::Paused(PauseTarget::Source(s))),
        (source(), sink()).prop_map(|(s, k)| MetaKey::Paused(PauseTarget::Sink(s, k))),
        any::<u64>().prop_map(MetaKey::Job),
        tenant().prop_map(MetaKey::Purge),
    ]
}

proptest! {
    #[test]
    fn meta_keys_round_trip(k in meta_key()) {
        prop_assert_eq!(MetaKey::decode(&k.encode()), Ok(k));
    }

    #[test]
    fn registry_ranges_hold_exactly_their_entries(k in meta_key()) {
        let key = k.encode();
        let ranges = [
            (tenant_names_range(), matches!(k, MetaKey::TenantByName(_))),
            (tenant_ords_range(), matches!(k, MetaKey::TenantByOrd(_))),
            (source_names_range(), matches!(k, MetaKey::SourceByName(_))),
            (source_ids_range(), matches!(k, MetaKey::SourceById(_))),
            (source_sinks_range(), matches!(k, MetaKey::SourceSinks(_))),
            (paused_range(), matches!(k, MetaKey::Paused(_))),
            (jobs_range(), matches!(k, MetaKey::Job(_))),
            (purges_range(), matches!(k, MetaKey::Purge(_))),
        ];
        for (range, holds) in ranges {
            prop_assert_eq!(range.contains(&key), holds, "{:?} in {:?}", k, range);
        }
    }

    #[test]
    fn registry_ordinals_sort_in_number_order(a in tenant(), b in tenant(), x in source(), y in source()) {
        prop_assert_eq!(tenant_by_ord_key(a).cmp(&tenant_by_ord_key(b)), a.cmp(&b));
        prop_assert_eq!(source_by_id_key(x).cmp(&source_by_id_key(y)), x.cmp(&y));
    }

    /// A source's pause sorts before its sinks' pauses, and pauses sort in
    /// (source, sink) order, so one range read lists them grouped by source.
    #[test]
    fn pauses_sort_by_source_then_sink(x in source(), y in source(), a in sink(), b in sink()) {
        let (px, py) = (paused_key(PauseTarget::Source(x)), paused_key(PauseTarget::Source(y)));
        prop_assert_eq!(px.cmp(&py), x.cmp(&y));
        prop_assert!(px < paused_key(PauseTarget::Sink(x, a)));
        prop_assert_eq!(
            paused_key(PauseTarget::Sink(x, a)).cmp(&paused_key(PauseTarget::Sink(y, b))),
            (x, a).cmp(&(y, b))
        );
    }

    #[test]
    fn pause_and_sink_list_values_round_trip(since in u64s(), reason in ".{0,40}", names in proptest::collection::vec("[a-z0-9_-]{1,64}", 0..8)) {
        let v = PausedValue { since_ms: since, reason };
        prop_assert_eq!(PausedValue::decode(&v.encode()), Ok(v));
        prop_assert_eq!(decode_sink_names(&encode_sink_names(&names)), Ok(names));
    }

    #[test]
    fn job_keys_sort_in_id_order(a in any::<u64>(), b in any::<u64>()) {
        prop_assert_eq!(job_key(a).cmp(&job_key(b)), a.cmp(&b));
    }

    #[test]
    fn meta_values_round_trip(format in any::<u32>(), node in any::<[u8; 16]>(), seq in seq(), t in tenant(), s in source(), name in ".{0,20}") {
        prop_assert_eq!(decode_format(&encode_format(format)), Ok(format));
        prop_assert_eq!(decode_node_id(&node), Ok(node));
        prop_assert_eq!(decode_seq_high_water(&encode_seq_high_water(seq)), Ok(seq));
        prop_assert_eq!(decode_tenant_ord(&encode_tenant_ord(t)), Ok(t));
        prop_assert_eq!(decode_source_id(&encode_source_id(s)), Ok(s));
        prop_assert_eq!(decode_name(name.as_bytes()), Ok(name));
    }

    #[test]
    fn migration_progress_round_trips(from in any::<u32>(), to in any::<u32>(), batches in any::<u64>(), rows in any::<u64>(), cursor in proptest::collection::vec(any::<u8>(), 0..40)) {
        let p = MigrationProgress { from, to, batches, rows, cursor };
        prop_assert_eq!(MigrationProgress::decode(&p.encode()), Ok(p));
    }
}

#[test]
fn a_short_migration_progress_is_refused() {
    let p = MigrationProgress {
        from: 1,
        to: 2,
        batches: 3,
        rows: 4,
        cursor: Vec::new(),
    };
    let bytes = p.encode();
    assert_eq!(bytes.len(), 24);
    assert_eq!(MetaKey::decode(MIGRATION_KEY), Ok(MetaKey::Migration));
    assert_eq!(
        MigrationProgress::decode(&bytes[..23]),
        Err(ValueError::Truncated {
            what: "migration progress"
        })
    );
}

#[test]
fn the_fixed_meta_keys_and_the_format() {
    assert_eq!(STORE_FORMAT, 2);
    assert_eq!(encode_format(STORE_FORMAT), [0, 0, 0, 2]);
    assert_eq!(MetaKey::decode(FORMAT_KEY), Ok(MetaKey::Format));
    assert_eq!(MetaKey::decode(NODE_ID_KEY), Ok(MetaKey::NodeId));
    assert_eq!(
        MetaKey::decode(SEQ_HIGH_WATER_KEY),
        Ok(MetaKey::SeqHighWater)
    );
    assert_eq!(tenant_by_name_key("acme"), b"tenant/name/acme");
    assert_eq!(
        tenant_by_ord_key(TenantOrd(0x0102_0304)),
        b"tenant/ord/\x01\x02\x03\x04"
    );
    assert_eq!(job_key(7), b"job/\0\0\0\0\0\0\0\x07");
    assert_eq!(MetaKey::decode(&job_key(7)), Ok(MetaKey::Job(7)));
}

#[test]
fn bad_meta_keys_and_values_are_refused() {
    assert_eq!(
        MetaKey::decode(b"formats"),
        Err(KeyError::WrongPrefix { what: "meta" })
    );
    assert_eq!(
        MetaKey::decode(b""),
        Err(KeyError::WrongPrefix { what: "meta" })
    );
    assert_eq!(
        MetaKey::decode(b"tenant/ord/\0\0\0\0"),
        Err(KeyError::ReservedOrdinal {
            what: "tenant by ordinal",
            ord: 0
        })
    );
    assert_eq!(
        MetaKey::decode(b"tenant/ord/\xff\xff\xff\xff"),
        Err(KeyError::ReservedOrdinal {
            what: "tenant by ordinal",
            ord: u32::MAX
        })
    );
    assert_eq!(
        MetaKey::decode(b"source/id/\0\0\x01"),
        Err(KeyError::WrongLength {
            what: "source by id",
            expected: 4,
            found: 3
        })
    );
    assert_eq!(
        MetaKey::decode(b"tenant/name/\xff"),
        Err(KeyError::NotUtf8 {
            what: "tenant by name"
        })
    );
    assert_eq!(
        decode_format(&[0, 2]),
        Err(ValueError::WrongLength {
            what: "store format",
            expected: 4,
            found: 2
        })
    );
    assert!(matches!(
        decode_tenant_ord(&[0; 4]),
        Err(ValueError::InvalidField { .. })
    ));
    assert!(matches!(
        decode_name(&[0xff]),
        Err(ValueError::InvalidField { .. })
    ));
    assert_eq!(
        MetaKey::decode(b"job/\0\0\0\x01"),
        Err(KeyError::WrongLength {
            what: "job",
            expected: 8,
            found: 4
        })
    );
    assert!(decode_node_id(&[0; 15]).is_err());
    assert!(decode_seq_high_water(&[0; 9]).is_err());
}

#[test]
fn pause_and_sink_list_layouts() {
    assert_eq!(
        paused_key(PauseTarget::Source(SourceId(0x0102_0304))),
        b"pause/\x01\x02\x03\x04"
    );
    assert_eq!(
        paused_key(PauseTarget::Sink(SourceId(1), SinkIx(2))),
        b"pause/\0\0\0\x01\0\x02"
    );
    assert_eq!(source_sinks_key(SourceId(7)), b"source/sinks/\0\0\0\x07");
    assert_eq!(encode_sink_names(&["ab", "c"]), b"\0\x02\0\x02ab\0\x01c");
    assert_eq!(
        PausedValue {
            since_ms: 1,
            reason: "x".into()
        }
        .encode(),
        b"\0\0\0\0\0\0\0\x01x"
    );
    assert_eq!(
        PauseTarget::Sink(SourceId(3), SinkIx(1)).source(),
        SourceId(3)
    );
    // The registry's ranges do not hold the sink lists.
    assert!(!source_names_range().contains(&source_sinks_key(SourceId(1))));
    assert!(!source_ids_range().contains(&source_sinks_key(SourceId(1))));
}

#[test]
fn bad_pause_and_sink_list_entries_are_refused() {
    assert_eq!(
        MetaKey::decode(b"pause/\0\0\x01"),
        Err(KeyError::WrongLength {
            what: "pause",
            expected: 6,
            found: 3
        })
    );
    assert_eq!(
        MetaKey::decode(b"pause/\0\0\0\x01\0"),
        Err(KeyError::WrongLength {
            what: "pause",
            expected: 6,
            found: 5
        })
    );
    assert!(MetaKey::decode(b"source/sinks/\0").is_err());
    assert_eq!(
        decode_sink_names(b"\0"),
        Err(ValueError::Truncated {
            what: "source sinks"
        })
    );
    assert_eq!(
        decode_sink_names(b"\0\x01\0\x05ab"),
        Err(ValueError::Truncated {
            what: "source sinks"
        })
    );
    assert!(matches!(
        decode_sink_names(b"\0\x01\0\x01\xff"),
        Err(ValueError::InvalidField { .. })
    ));
    assert!(matches!(
        decode_sink_names(b"\0\0x"),
        Err(ValueError::InvalidField { .. })
    ));
    assert_eq!(
        PausedValue::decode(&[0; 7]),
        Err(ValueError::Truncated { what: "pause" })
    );
    assert!(matches!(
        PausedValue::decode(b"\0\0\0\0\0\0\0\0\xff"),
        Err(ValueError::InvalidField { .. })
    ));
}
