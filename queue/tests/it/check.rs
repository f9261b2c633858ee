//! The checker: check_invariants finds every planted inconsistency, and
//! check_store counts the keys and fixes drifted counters.

use crate::support::*;

#[test]
fn check_invariants_reports_every_planted_inconsistency() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    ingest(&kv, T1, 3, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    clean(&kv);

    let mut bad = Batch::new();
    // 4: ?D without ?A.
    bad.delete(Cf::Index, active_key(T1));
    // 2: the lane's member loses its marker... and the head: ?H names nothing live.
    bad.put(
        Cf::Index,
        lane_head_key(T1, lane),
        ankusa_keys::LaneHeadValue {
            seq: Seq(77),
            sink: S0,
        }
        .encode(),
    );
    // 1: row 1/1/0 also in ?X.
    bad.put(
        Cf::Index,
        dead_letter_key(T1, Seq(1), S0),
        DeadLetterValue {
            dead_at_ms: 1,
            reason: String::new(),
        }
        .encode(),
    );
    // 3: a counter off by 5 (tenant and therefore not the aggregate).
    bad.counter_add(counter_key(T1, F::Pending).to_vec(), 5);
    // 5: a row without envelope, in no place.
    bad.put(
        Cf::Deliveries,
        delivery_key(T1, Seq(50), S0),
        DeliveryRow {
            state: RowState::Due,
            size: 1,
            attempts: 0,
            first_attempt_at_ms: None,
            last_error: None,
            lane: None,
            ordering_key: None,
            lane_seq: None,
            logged_attempts: 0,
        }
        .encode(),
    );
    // Undecodable: a ?P with a value.
    bad.put(
        Cf::Index,
        lane_marker_key(T1, ankusa_lanes::lane_id(S1, SRC, None)),
        vec![1],
    );
    commit(&kv, bad);

    let v = check_invariants(&kv.snapshot()).expect("check");
    let expect = [
        Violation::DueWithoutActive { tenant: T1 },
        Violation::HeadNotLive {
            tenant: T1,
            lane,
            head: id(T1, 77, S0),
        },
        Violation::LiveRowNotHead {
            row: id(T1, 2, S0),
            lane,
        },
        Violation::RowInManyPlaces {
            row: id(T1, 1, S0),
            places: vec![RowState::Due, RowState::Dead],
        },
        Violation::RowUnplaced {
            row: id(T1, 50, S0),
            state: RowState::Due,
        },
        Violation::EnvelopeMissing {
            row: id(T1, 50, S0),
        },
        Violation::CounterMismatch {
            tenant: T1,
            field: F::Pending,
            stored: 8,
            expected: 3,
        },
        Violation::CounterMismatch {
            tenant: T1,
            field: F::Dead,
            stored: 0,
            expected: 1,
        },
        Violation::CounterMismatch {
            tenant: T1,
            field: F::DeadBytes,
            stored: 0,
            expected: i64::from(row(&kv, id(T1, 1, S0)).expect("row").size),
        },
        Violation::CounterMismatch {
            tenant: TenantOrd::NODE,
            field: F::Pending,
            stored: 3,
            expected: 8,
        },
    ];
    for e in &expect {
        assert!(v.contains(e), "missing {e:?} in {v:#?}");
    }
    assert!(
        v.iter()
            .any(|x| matches!(x, Violation::Undecodable { cf: Cf::Index, .. })),
        "no undecodable marker in {v:#?}"
    );
    // Member 3 still has ?H (a wrong one), so it is not stranded; nothing else.
    assert_eq!(v.len(), expect.len() + 1, "{v:#?}");
}

/// `check_store` (what `ankusa store check` runs): the census counts keys, not
/// counters; a drift of a tenant's keyed counter, of a tenant's `_total` field
/// and of the aggregate each get the value the keys call for, and the batch
/// of the fixes leaves a clean store whatever the counters held.
#[test]
fn check_store_counts_the_keys_and_fixes_every_drifted_counter() {
    let kv = store();
    let s1 = ingest(&kv, T1, 1, &[plain(S0), laned(S1, "k")]);
    let s2 = ingest(&kv, T1, 2, &[laned(S1, "k")]);
    let s3 = ingest(&kv, T2, 3, &[plain(S0)]);
    sweep(&kv, T1, NOW);
    let report = check_store(&kv.snapshot()).expect("check");
    assert_eq!(report.violations, vec![]);
    assert_eq!(report.counter_fixes, vec![]);
    assert_eq!(
        report.census,
        Census {
            tenants: 2,
            hooks: 3,
            rows: 4,
            pending: 4,
            in_flight: 0,
            lane_members: 1,
            lanes: 1,
            lanes_held: 0,
            dead: 0,
            quarantined: 0,
        }
    );

    let mut bad = Batch::new();
    // A tenant's keyed field off (the aggregate moved with it, as a wrong
    // builder would move both), a tenant's `_total` field with the aggregate
    // left behind, and the aggregate alone off.
    bad.counter_add(counter_key(T1, F::Bytes).to_vec(), 100);
    bad.counter_add(counter_key(TenantOrd::NODE, F::Bytes).to_vec(), 100);
    bad.counter_add(counter_key(T2, F::DeliveredTotal).to_vec(), 7);
    bad.counter_add(counter_key(TenantOrd::NODE, F::LaneMembers).to_vec(), -1);
    commit(&kv, bad);
    let report = check_store(&kv.snapshot()).expect("check");
    let bytes_t1 = i64::from(s1) * 2 + i64::from(s2);
    let bytes_all = bytes_t1 + i64::from(s3);
    assert_eq!(
        report.counter_fixes,
        vec![
            CounterFix {
                tenant: T1,
                field: F::Bytes,
                stored: bytes_t1 + 100,
                expected: bytes_t1
            },
            CounterFix {
                tenant: TenantOrd::NODE,
                field: F::Bytes,
                stored: bytes_all + 100,
                expected: bytes_all
            },
            CounterFix {
                tenant: TenantOrd::NODE,
                field: F::DeliveredTotal,
                stored: 0,
                expected: 7
            },
            CounterFix {
                tenant: TenantOrd::NODE,
                field: F::LaneMembers,
                stored: 0,
                expected: 1
            },
        ]
    );
    assert_eq!(
        report.violations.len(),
        3,
        "the aggregate of bytes is the sum of the stored tenants: {:#?}",
        report.violations
    );
    assert_eq!(
        report.census.pending, 4,
        "the census counts keys, not counters"
    );
    commit(&kv, counter_fix_batch(&report.counter_fixes));
    let after = check_store(&kv.snapshot()).expect("check");
    assert_eq!(after.violations, vec![]);
    assert_eq!(after.counter_fixes, vec![]);
    assert_eq!(
        kv.counter(&counter_key(T2, F::DeliveredTotal))
            .expect("counter"),
        7,
        "a `_total` field keeps its value"
    );
}

#[test]
fn check_invariants_finds_a_stranded_member_and_two_live_rows_in_a_lane() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    // Member 2 put straight into ?D beside the head, and the marker of the lane
    // gone while a (fake) third member waits.
    let mut bad = Batch::new();
    bad.delete(Cf::Index, lane_member_key(T1, lane, Seq(2), S0));
    bad.put(
        Cf::Index,
        due_key(T1, NOW, Seq(2), S0),
        DueValue {
            size: 1,
            kind: DueKind::First,
        }
        .encode(),
    );
    bad.delete(Cf::Index, lane_head_key(T1, lane));
    commit(&kv, bad);
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert!(
        v.contains(&Violation::LaneManyLive {
            tenant: T1,
            lane,
            rows: vec![id(T1, 1, S0), id(T1, 2, S0)]
        }),
        "{v:#?}"
    );
    assert!(
        v.contains(&Violation::KindMismatch {
            row: id(T1, 2, S0),
            kind: DueKind::First,
            laned: true
        }),
        "{v:#?}"
    );
    assert!(
        v.contains(&Violation::StateMismatch {
            row: id(T1, 2, S0),
            state: RowState::Member,
            place: RowState::Due
        }),
        "{v:#?}"
    );
    assert!(
        v.contains(&Violation::LiveRowNotHead {
            row: id(T1, 1, S0),
            lane
        }),
        "{v:#?}"
    );

    // A member with neither ?H nor ?P.
    let kv = store();
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    let mut bad = Batch::new();
    bad.delete(Cf::Index, lane_marker_key(T1, lane));
    commit(&kv, bad);
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert_eq!(
        v,
        vec![Violation::MemberStranded {
            row: id(T1, 1, S0),
            lane
        }]
    );
}

/// Invariant 2, lane positions (ADR 0004 section 6, "The lane sequence"): a
/// row whose position is above its lane's ?S, and two rows of a lane with one
/// position, are found; positions given by the builders are not.
#[test]
fn check_invariants_finds_a_lane_position_above_its_lane_or_given_twice() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    clean(&kv);
    assert_eq!(row(&kv, id(T1, 1, S0)).and_then(|r| r.lane_seq), Some(1));

    // The member carries position 1 too, as if given twice.
    let mut member = row(&kv, id(T1, 2, S0)).expect("row");
    member.lane_seq = Some(1);
    let mut bad = Batch::new();
    bad.put(
        Cf::Deliveries,
        delivery_key(T1, Seq(2), S0),
        member.encode(),
    );
    commit(&kv, bad);
    let v = check_invariants(&kv.snapshot()).expect("check");
    let shared = |seq| Violation::LaneSeqWrong {
        row: id(T1, seq, S0),
        lane,
        lane_seq: 1,
        last: 1,
        shared: true,
    };
    assert_eq!(v, vec![shared(1), shared(2)]);

    // Above the lane's last position.
    member.lane_seq = Some(5);
    let mut bad = Batch::new();
    bad.put(
        Cf::Deliveries,
        delivery_key(T1, Seq(2), S0),
        member.encode(),
    );
    commit(&kv, bad);
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert_eq!(
        v,
        vec![Violation::LaneSeqWrong {
            row: id(T1, 2, S0),
            lane,
            lane_seq: 5,
            last: 1,
            shared: false,
        }]
    );
}

/// Invariant 6: a hook or a delivery row above the seq high-water mark is
/// found (the highest, under any tenant), one at or below it is not; a key
/// that does not decode is passed over.
#[test]
fn seq_above_high_water_finds_the_highest_stored_seq_above_the_mark() {
    use ankusa_keys::meta::{SEQ_HIGH_WATER_KEY, encode_seq_high_water};
    let kv = store();
    let mark = |seq: u64| {
        let mut b = Batch::new();
        b.put(
            Cf::Meta,
            SEQ_HIGH_WATER_KEY.to_vec(),
            encode_seq_high_water(Seq(seq)).to_vec(),
        );
        commit(&kv, b);
    };
    assert_eq!(seq_above_high_water(&kv).expect("read"), None);
    ingest(&kv, T1, 3, &[plain(S0)]);
    ingest(&kv, T2, 9, &[plain(S0)]);
    ingest(&kv, T1, 5, &[plain(S0)]);
    // No mark at all: every seq is above it.
    assert_eq!(
        seq_above_high_water(&kv).expect("read"),
        Some(SeqAboveHighWater {
            tenant: T2,
            seq: Seq(9),
            high_water: Seq(0)
        })
    );
    mark(8);
    assert_eq!(
        seq_above_high_water(&kv).expect("read"),
        Some(SeqAboveHighWater {
            tenant: T2,
            seq: Seq(9),
            high_water: Seq(8)
        })
    );
    mark(9);
    assert_eq!(seq_above_high_water(&kv).expect("read"), None);
    // A delivery row alone (no envelope) counts as well.
    let mut b = Batch::new();
    b.put(
        Cf::Deliveries,
        delivery_key(T1, Seq(12), S0),
        DeliveryRow {
            state: RowState::Due,
            size: 1,
            attempts: 0,
            first_attempt_at_ms: None,
            last_error: None,
            lane: None,
            ordering_key: None,
            lane_seq: None,
            logged_attempts: 0,
        }
        .encode(),
    );
    // And a hooks key that is no hook key is passed over.
    b.put(Cf::Hooks, b"k".to_vec(), b"v".to_vec());
    commit(&kv, b);
    assert_eq!(
        seq_above_high_water(&kv).expect("read"),
        Some(SeqAboveHighWater {
            tenant: T1,
            seq: Seq(12),
            high_water: Seq(9)
        })
    );
    let e = seq_above_high_water(&kv)
        .expect("read")
        .expect("found")
        .to_string();
    assert!(
        e.contains("hook seq 12 (tenant ordinal 1) above its seq high-water mark 9"),
        "{e}"
    );
}
