//! Sentinels: one per scanned family, above every real key, in no range.

use ankusa_engine::Cf;
use ankusa_keys::index::DEDUPE_KEY_PREFIX_LEN;
use ankusa_keys::sentinel::{SENTINEL_FAMILIES, family_sentinel};
use ankusa_keys::*;

#[test]
fn every_scanned_family_has_one_sentinel() {
    let all = sentinels();
    assert_eq!(all.len(), SENTINEL_FAMILIES.len() + 3);
    for family in SENTINEL_FAMILIES {
        let s = family_sentinel(family).expect("a sentinel");
        assert_eq!(
            all.iter()
                .filter(|(cf, k)| *cf == Cf::Index && *k == s)
                .count(),
            1
        );
        assert_eq!(s[0], family.as_byte());
        assert_eq!(s.len(), family.key_len());
        assert!(s[1..].iter().all(|b| *b == 0xff));
        // Above the family's range, below the next byte's keys.
        assert!(s.as_slice() >= family_range(family).end.as_slice());
        assert!(s.as_slice() < [family.as_byte() + 1].as_slice());
        assert!(is_sentinel(Cf::Index, &s));
        assert!(!is_sentinel(Cf::Hooks, &s));
    }
    assert_eq!(family_sentinel(Family::Counter), None);
    // The attempt log is read within a hook's or a row's prefix only.
    assert_eq!(family_sentinel(Family::AttemptLog), None);
    assert!(!is_sentinel(Cf::Index, &[b'L'; 19]));
    for (cf, len) in [(Cf::Hooks, 12), (Cf::Deliveries, 14), (Cf::Archive, 20)] {
        let keys: Vec<&Vec<u8>> = all
            .iter()
            .filter(|(c, _)| *c == cf)
            .map(|(_, k)| k)
            .collect();
        assert_eq!(keys, [&vec![0xff; len]]);
        assert!(is_sentinel(cf, &vec![0xff; len]));
    }
    assert!(all.iter().all(|(cf, _)| *cf != Cf::Meta));
}

#[test]
fn decoders_refuse_sentinels() {
    let s = |f| family_sentinel(f).expect("a sentinel");
    fn reserved<T>(f: Family) -> Result<T, KeyError> {
        Err(KeyError::ReservedOrdinal {
            what: f.what(),
            ord: u32::MAX,
        })
    }
    assert_eq!(DueKey::decode(&s(Family::Due)), reserved(Family::Due));
    assert_eq!(
        InFlightKey::decode(&s(Family::InFlight)),
        reserved(Family::InFlight)
    );
    assert_eq!(
        ActiveKey::decode(&s(Family::Active)),
        reserved(Family::Active)
    );
    assert_eq!(
        LaneMemberKey::decode(&s(Family::LaneMember)),
        reserved(Family::LaneMember)
    );
    assert_eq!(
        LaneHeadKey::decode(&s(Family::LaneHead)),
        reserved(Family::LaneHead)
    );
    assert_eq!(
        LaneMarkerKey::decode(&s(Family::LaneMarker)),
        reserved(Family::LaneMarker)
    );
    assert_eq!(
        DeadLetterKey::decode(&s(Family::DeadLetter)),
        reserved(Family::DeadLetter)
    );
    assert_eq!(
        QuarantinedKey::decode(&s(Family::Quarantined)),
        reserved(Family::Quarantined)
    );
    assert_eq!(
        DedupeKey::decode(&s(Family::Dedupe)),
        reserved(Family::Dedupe)
    );
    assert_eq!(s(Family::Dedupe).len(), DEDUPE_KEY_PREFIX_LEN);
}

#[test]
fn the_highest_real_keys_sort_below_the_sentinels() {
    let t = TenantOrd::LAST;
    let lane = LaneId([0xff; 16]);
    let (seq, sink) = (Seq(u64::MAX), SinkIx(u16::MAX));
    let highest: Vec<(Family, Vec<u8>)> = vec![
        (Family::Due, due_key(t, u64::MAX, seq, sink).to_vec()),
        (Family::InFlight, in_flight_key(t, seq, sink).to_vec()),
        (Family::Active, active_key(t).to_vec()),
        (
            Family::LaneMember,
            lane_member_key(t, lane, seq, sink).to_vec(),
        ),
        (Family::LaneHead, lane_head_key(t, lane).to_vec()),
        (Family::LaneMarker, lane_marker_key(t, lane).to_vec()),
        (Family::DeadLetter, dead_letter_key(t, seq, sink).to_vec()),
        (Family::Quarantined, quarantined_key(t, seq).to_vec()),
        (
            Family::Dedupe,
            dedupe_key(t, SourceId(u32::MAX), &[0xff; 300]),
        ),
    ];
    for (family, key) in highest {
        let s = family_sentinel(family).expect("a sentinel");
        assert!(key < s, "{family:?}");
        assert!(family_range(family).contains(&key), "{family:?}");
        assert!(tenant_range(family, t).contains(&key), "{family:?}");
        assert!(!is_sentinel(Cf::Index, &key), "{family:?}");
    }
    let rows = [
        (Cf::Hooks, hook_key(t, seq).to_vec(), hooks_range()),
        (
            Cf::Deliveries,
            delivery_key(t, seq, sink).to_vec(),
            deliveries_range(),
        ),
        (
            Cf::Archive,
            archive_key(t, u64::MAX, seq).to_vec(),
            archive_range(),
        ),
    ];
    for (cf, key, range) in rows {
        assert!(range.contains(&key), "{cf:?}");
        assert!(!is_sentinel(cf, &key), "{cf:?}");
        assert!(!key.iter().all(|b| *b == 0xff), "{cf:?}");
    }
    // The lane members of the last tenant's last lane stop below the sentinel.
    let members = lane_members_range(t, lane);
    assert!(!members.contains(&family_sentinel(Family::LaneMember).expect("a sentinel")));
    assert!(members.end.as_slice() <= family_range(Family::LaneMember).end.as_slice());
    assert!(
        !due_range_until(t, u64::MAX).contains(&family_sentinel(Family::Due).expect("a sentinel"))
    );
}
