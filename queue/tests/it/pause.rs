//! Pause: hold takes a paused sink's rows out of the due scan, unhold puts them
//! back, and runtime pauses are kept in meta.

use crate::support::*;

/// The overflow release (`unhold_sink`): only the named entry's held rows go
/// back, oldest first, at most `budget` a page, at the due times they had,
/// with the tenant's ?A; another entry's held rows (a pause's) stay; the
/// cursor goes on after the last row moved, and a band with none of the
/// entry's rows left ends with nothing moved.
#[test]
fn unhold_sink_moves_back_only_its_entrys_held_rows_oldest_first() {
    let kv = store();
    for seq in 1..=4 {
        ingest(&kv, T1, seq, &[plain(S0), plain(S1)]);
    }
    clean(&kv);
    for d in due_keys(&kv, T1) {
        commit(&kv, hold(&kv, d).expect("hold"));
    }
    assert_eq!(held(&kv, T1).len(), 8);
    let before = counters(&kv, T1);
    // Two of S0's rows, the oldest: seq 1 and 2.
    let p = unhold_sink(&kv, T1, (SRC, S0), None, 100, 2).expect("unhold_sink");
    assert_eq!((p.moved, p.min_due_ms), (2, Some(NOW)));
    let next = p.next.clone().expect("a budget filled: more may follow");
    commit(&kv, p.batch);
    let due: Vec<(u64, SinkIx)> = due_keys(&kv, T1)
        .iter()
        .filter(|d| !d.is_held())
        .map(|d| (d.seq.0, d.sink))
        .collect();
    assert_eq!(due, vec![(1, S0), (2, S0)]);
    assert_eq!(
        keys(&kv, Family::Active, T1).len(),
        1,
        "the release puts ?A"
    );
    // From the cursor: the other two; then nothing of S0 is held.
    let p = unhold_sink(&kv, T1, (SRC, S0), Some(&next), 100, 10).expect("unhold_sink");
    assert_eq!((p.moved, p.next.is_none()), (2, true));
    commit(&kv, p.batch);
    let p = unhold_sink(&kv, T1, (SRC, S0), None, 100, 10).expect("unhold_sink");
    assert_eq!(
        (p.moved, p.next.is_none(), p.batch.is_empty()),
        (0, true, true)
    );
    // S1's rows (another entry) and another source's entry stay held.
    assert_eq!(
        held(&kv, T1).iter().map(|d| d.sink).collect::<Vec<_>>(),
        vec![S1; 4]
    );
    let p = unhold_sink(&kv, T1, (SourceId(99), S1), None, 100, 10).expect("unhold_sink");
    assert_eq!(p.moved, 0);
    assert_eq!(counters(&kv, T1), before, "no counter moves");
    clean(&kv);
}

/// A paused sink's due rows and lane head are held: out of every due scan, no
/// counter moved, the lane keeps its head and members, the tenant's ?A can go;
/// a resume of another sink moves nothing, a resume of theirs puts each back
/// at the due time it had, with the ?A.
#[test]
fn hold_takes_a_paused_sinks_rows_out_of_the_due_scan_and_unhold_puts_them_back() {
    let kv = store();
    let other = SourceId(11);
    ingest(&kv, T1, 1, &[plain(S0), laned(S1, "k")]);
    ingest(&kv, T1, 2, &[plain(S0), laned(S1, "k")]);
    ingest_from(&kv, T1, 3, other, &[plain(S0)]);
    assert_eq!(sweep(&kv, T1, NOW), 1);
    // A retry of seq 2's S0 row, due later: it keeps that time through a hold.
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 2, S0), NOW + 500, "x", NOW).expect("retry"),
    );
    clean(&kv);
    let before = counters(&kv, T1);
    // Pause (SRC, S0) and (SRC, S1): hold every due row of theirs.
    for d in due_keys(&kv, T1) {
        if d.seq != Seq(3) {
            let b = hold(&kv, d).expect("hold");
            assert_eq!(
                commit_delta(&kv, T1, b),
                map(&[]),
                "a hold moves no counter"
            );
            clean(&kv);
        }
    }
    let h = held(&kv, T1);
    assert_eq!(h.len(), 3, "{h:?}");
    assert!(h.iter().all(|d| d.is_held()));
    assert_eq!(
        h.iter()
            .map(|d| (d.seq.0, d.sink, d.unheld_due_ms()))
            .collect::<Vec<_>>(),
        vec![(1, S0, NOW), (1, S1, NOW), (2, S0, NOW + 500)]
    );
    // Out of the due scan, far in the future too; the other source's row is not.
    let scan = kv
        .scan(
            Cf::Index,
            &ankusa_keys::due_range_until(T1, NOW + 1_000_000),
            Direction::Forward,
            100,
        )
        .expect("scan");
    assert_eq!(scan.len(), 1);
    assert_eq!(DueKey::decode(&scan[0].0).expect("decode").seq, Seq(3));
    // The head is still the lane's head and its member stays.
    assert_eq!(head_of(&kv, T1, lane_of(S1, "k")), Some(id(T1, 1, S1)));
    assert_eq!(sweep(&kv, T1, NOW), 0);
    assert_eq!(
        row(&kv, id(T1, 2, S1)).expect("row").state,
        RowState::Member
    );
    assert_eq!(counters(&kv, T1), before);
    // With the other source's row gone, held rows alone do not keep ?A.
    commit(&kv, claim(&kv, dk(T1, NOW, 3, S0), NOW).expect("claim"));
    commit(&kv, delivered(&kv, id(T1, 3, S0), NOW).expect("delivered"));
    commit(&kv, sweep_markers(&kv, T1).expect("sweep"));
    assert!(keys(&kv, Family::Active, T1).is_empty());
    clean(&kv);
    // A resume while both are still paused moves nothing.
    let p = unhold(&kv, T1, |s, _| s == SRC, None, 10).expect("unhold");
    assert_eq!((p.moved, p.next.is_none()), (0, true));
    assert!(p.batch.is_empty());
    // Resume S1 only, one entry per call: the head goes back, S0's rows stay.
    let mut cursor = None;
    let mut moved = 0;
    for _ in 0..10 {
        let p = unhold(&kv, T1, |s, k| s == SRC && k == S0, cursor.as_ref(), 1).expect("unhold");
        moved += p.moved;
        assert_eq!(commit_delta(&kv, T1, p.batch), map(&[]));
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert!(cursor.is_none(), "unhold did not finish");
    assert_eq!(moved, 1);
    assert_eq!(
        keys(&kv, Family::Active, T1).len(),
        1,
        "the resume put ?A back"
    );
    assert!(due_value(&kv, T1, NOW, id(T1, 1, S1)).is_some());
    assert_eq!(held(&kv, T1).len(), 2);
    // Resume everything: back at the due times they had.
    let p = unhold(&kv, T1, |_, _| false, None, 10).expect("unhold");
    assert_eq!(p.moved, 2);
    commit(&kv, p.batch);
    assert!(held(&kv, T1).is_empty());
    assert!(due_value(&kv, T1, NOW, id(T1, 1, S0)).is_some());
    assert_eq!(
        due_value(&kv, T1, NOW + 500, id(T1, 2, S0)).map(|v| v.kind),
        Some(DueKind::Retry)
    );
    clean(&kv);
    // A hold of a row that is not due is refused.
    assert!(matches!(
        hold(&kv, dk(T1, NOW, 9, S0)),
        Err(QueueError::NotInState { .. })
    ));
}

/// A held kind 3 head still counts in lanes_blocked, and a held row can be
/// dead-lettered from the held band (a deleted source, --drop-unconfigured).
#[test]
fn a_held_blocked_head_stays_blocked_and_dead_letters_from_the_held_band() {
    let kv = store();
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 5, "x", NOW).expect("retry"),
    );
    commit(&kv, hold(&kv, dk(T1, NOW + 5, 1, S0)).expect("hold"));
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), Some(&1));
    clean(&kv);
    let mut cursor = None;
    for _ in 0..10 {
        let p = dead_letter_sinks(
            &kv,
            T1,
            SRC,
            |k| k == S0,
            "sink removed from the config",
            cursor.as_ref(),
            10,
            NOW + 9,
        )
        .expect("dls");
        commit(&kv, p.batch);
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert!(held(&kv, T1).is_empty());
    assert_eq!(keys(&kv, Family::DeadLetter, T1).len(), 2);
    assert!(head_of(&kv, T1, lane_of(S0, "k")).is_none());
    let c = counters(&kv, T1);
    assert_eq!(
        (c.get(&F::LanesBlocked), c.get(&F::Pending), c.get(&F::Dead)),
        (None, None, Some(&2))
    );
}

#[test]
fn runtime_pauses_are_kept_in_meta() {
    use ankusa_keys::meta::{PauseTarget, PausedValue};
    let kv = store();
    assert!(read_pauses(&kv).expect("read").is_empty());
    commit(
        &kv,
        set_pause(PauseTarget::Sink(SRC, S1), 5, "endpoint migration"),
    );
    commit(&kv, set_pause(PauseTarget::Source(SourceId(2)), 6, ""));
    let p = read_pauses(&kv).expect("read");
    assert_eq!(
        p.into_iter().collect::<Vec<_>>(),
        vec![
            (
                PauseTarget::Source(SourceId(2)),
                PausedValue {
                    since_ms: 6,
                    reason: String::new()
                }
            ),
            (
                PauseTarget::Sink(SRC, S1),
                PausedValue {
                    since_ms: 5,
                    reason: "endpoint migration".into()
                }
            ),
        ]
    );
    commit(&kv, clear_pause(PauseTarget::Source(SourceId(2))));
    assert_eq!(read_pauses(&kv).expect("read").len(), 1);
    clean(&kv);
}
