//! Rows of deleted sources and unconfigured sinks: dead_letter_source lane by
//! lane, pending_rows per (source, sink), dead_letter_sinks.

use crate::support::*;

#[test]
fn dead_letter_source_dead_letters_members_then_heads_lane_by_lane() {
    let kv = store();
    let gone = SourceId(66);
    let lane = ankusa_lanes::lane_id(S0, gone, Some(b"k"));
    let row_of = |sink| NewRow {
        sink,
        lane: Some(LaneAssignment {
            lane,
            ordering_key: Some(b"k".to_vec()),
        }),
    };
    ingest_from(&kv, T1, 1, gone, &[row_of(S0), plain(S1)]);
    ingest_from(&kv, T1, 2, gone, &[row_of(S0)]);
    ingest_from(&kv, T1, 3, gone, &[row_of(S0)]);
    ingest(&kv, T1, 4, &[laned(S0, "k"), plain(S1)]); // another source: untouched
    sweep(&kv, T1, NOW);
    // The gone source's head is blocked (kind 3).
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 5, "x", NOW).expect("retry"),
    );
    clean(&kv);

    let mut cursor = None;
    let mut calls = 0;
    let mut moved = 0;
    loop {
        let p = dead_letter_source(&kv, T1, gone, "source deleted", cursor.as_ref(), 1, NOW + 9)
            .expect("dls");
        moved += p.moved;
        commit(&kv, p.batch);
        clean(&kv);
        calls += 1;
        match p.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(calls < 20, "no progress");
    }
    assert_eq!(moved, 4);
    for (seq, sink) in [(1, S0), (1, S1), (2, S0), (3, S0)] {
        assert_eq!(
            row(&kv, id(T1, seq, sink)).expect("row").state,
            RowState::Dead,
            "{seq}/{sink}"
        );
    }
    assert_eq!(head_of(&kv, T1, lane), None);
    let c = counters(&kv, T1);
    assert_eq!(c.get(&F::Dead), Some(&4));
    assert_eq!(c.get(&F::LanesBlocked), None);
    // Source 10's rows: its lane is busy and its unordered row due.
    assert_eq!(head_of(&kv, T1, lane_of(S0, "k")), Some(id(T1, 4, S0)));
    assert_eq!(row(&kv, id(T1, 4, S1)).expect("row").state, RowState::Due);
    assert_eq!(c.get(&F::Pending), Some(&2));
    assert_eq!(c.get(&F::Lanes), Some(&1));
}

/// pending_rows counts ?D (held too), ?F and ?O rows per (source, sink), reads
/// no envelope for a sink index `maybe` refuses, and dead_letter_sinks moves
/// only the selected sink's rows, members before heads.
#[test]
fn pending_rows_counts_per_source_and_sink_and_dead_letter_sinks_takes_only_those() {
    let kv = store();
    let gone = SourceId(12);
    ingest(&kv, T1, 1, &[plain(S0), laned(S1, "k")]);
    ingest(&kv, T1, 2, &[plain(S0), laned(S1, "k")]);
    ingest(&kv, T1, 3, &[plain(S0), laned(S1, "j")]);
    ingest_from(&kv, T1, 4, gone, &[plain(S0)]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(&kv, hold(&kv, dk(T1, NOW, 2, S0)).expect("hold"));
    clean(&kv);
    let all = pending_rows(&kv, T1, |_| true, |_, _| true, 2).expect("pending");
    assert_eq!(
        all.into_iter().collect::<Vec<_>>(),
        vec![((SRC, S0), 3), ((SRC, S1), 3), ((gone, S0), 1)]
    );
    let gets = kv.stats().gets;
    let s1 = pending_rows(&kv, T1, |k| k == S1, |s, _| s == SRC, 64).expect("pending");
    assert_eq!(s1.into_iter().collect::<Vec<_>>(), vec![((SRC, S1), 3)]);
    assert_eq!(
        kv.stats().gets - gets,
        3,
        "one envelope read per hook with an S1 row"
    );
    let none = pending_rows(&kv, T1, |_| false, |_, _| true, 64).expect("pending");
    assert!(none.is_empty());

    let before = counters(&kv, T1);
    let mut cursor = None;
    let mut moved = 0;
    for _ in 0..20 {
        let p = dead_letter_sinks(
            &kv,
            T1,
            SRC,
            |k| k == S1,
            "sink removed from the config",
            cursor.as_ref(),
            2,
            NOW + 1,
        )
        .expect("dls");
        moved += p.moved;
        commit(&kv, p.batch);
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(moved, 3);
    let d = delta(&before, &counters(&kv, T1));
    assert_eq!(d.get(&F::Dead), Some(&3));
    assert_eq!(d.get(&F::Pending), Some(&-3));
    assert!(head_of(&kv, T1, lane_of(S1, "k")).is_none());
    assert!(head_of(&kv, T1, lane_of(S1, "j")).is_none());
    for x in keys(&kv, Family::DeadLetter, T1) {
        let v = DeadLetterValue::decode(&kv.get(Cf::Index, &x).expect("get").expect("value"))
            .expect("decode");
        assert_eq!(v.reason, "sink removed from the config");
    }
    // S0's rows and the other source's are untouched.
    let left = pending_rows(&kv, T1, |_| true, |_, _| true, 64).expect("pending");
    assert_eq!(
        left.into_iter().collect::<Vec<_>>(),
        vec![((SRC, S0), 3), ((gone, S0), 1)]
    );
}
