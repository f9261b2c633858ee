//! drop_dead: dropping dead letters deletes a hook's envelope, archive entry
//! and dedupe record with its last row only, and refuses rows not in the DLQ.

use crate::support::*;

#[test]
fn drop_dead_of_a_hooks_last_row_deletes_the_row_its_envelope_archive_and_dedupe_record() {
    let kv = store();
    let size = i64::from(ingest_dedupe(&kv, 1, "evt_1", &[plain(S0)]));
    kill(&kv, 1, S0);
    clean(&kv);
    let d = commit_delta(
        &kv,
        T1,
        drop_dead(&kv, &[id(T1, 1, S0)], NOW).expect("drop"),
    );
    assert_eq!(d, map(&[(F::Dead, -1), (F::DeadBytes, -size)]));
    assert!(keys(&kv, Family::DeadLetter, T1).is_empty());
    assert!(row(&kv, id(T1, 1, S0)).is_none());
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(!has(&kv, Cf::Archive, &archive_key(T1, NOW - 10, Seq(1))));
    assert!(!has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    clean(&kv);
    // Gone: a second drop, and a revive, are refused and build nothing.
    let err = drop_dead(&kv, &[id(T1, 1, S0)], NOW).expect_err("not in the DLQ");
    assert!(matches!(err, QueueError::NotInDlq { row } if row == id(T1, 1, S0)));
    assert!(matches!(
        revive(&kv, id(T1, 1, S0), NOW),
        Err(QueueError::NotInDlq { .. })
    ));
}

#[test]
fn drop_dead_keeps_the_envelope_while_another_row_of_the_hook_is_left() {
    let kv = store();
    let size = i64::from(ingest_dedupe(&kv, 1, "evt_1", &[plain(S0), plain(S1)]));
    kill(&kv, 1, S0);
    let d = commit_delta(
        &kv,
        T1,
        drop_dead(&kv, &[id(T1, 1, S0)], NOW).expect("drop"),
    );
    assert_eq!(d, map(&[(F::Dead, -1), (F::DeadBytes, -size)]));
    // Row S1 is still due: its envelope, archive entry and dedupe record stay.
    assert!(has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(has(&kv, Cf::Archive, &archive_key(T1, NOW - 10, Seq(1))));
    assert!(has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    assert_eq!(row(&kv, id(T1, 1, S1)).expect("row").state, RowState::Due);
    clean(&kv);
    // S1 dies too and is dropped: now the hook goes.
    kill(&kv, 1, S1);
    commit(&kv, drop_dead(&kv, &[id(T1, 1, S1)], NOW).expect("drop"));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(!has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    assert_eq!(counters(&kv, T1).get(&F::Dead), None);
    clean(&kv);
}

#[test]
fn drop_dead_of_every_row_of_a_hook_in_one_batch_deletes_the_hook_once() {
    let kv = store();
    let size = i64::from(ingest_dedupe(&kv, 1, "evt_1", &[plain(S0), plain(S1)]));
    ingest(&kv, T1, 2, &[plain(S0)]);
    kill(&kv, 1, S0);
    kill(&kv, 1, S1);
    kill(&kv, 2, S0);
    // Both rows of hook 1 (one given twice), not hook 2's.
    let b = drop_dead(&kv, &[id(T1, 1, S1), id(T1, 1, S0), id(T1, 1, S1)], NOW).expect("drop");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d, map(&[(F::Dead, -2), (F::DeadBytes, -2 * size)]));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(!has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    assert!(has(&kv, Cf::Hooks, &hook_key(T1, Seq(2))));
    assert_eq!(
        keys(&kv, Family::DeadLetter, T1),
        vec![dead_letter_key(T1, Seq(2), S0).to_vec()]
    );
    clean(&kv);
}

#[test]
fn drop_dead_refuses_a_batch_with_a_row_not_in_the_dlq_and_builds_nothing() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[plain(S0)]);
    kill(&kv, 1, S0);
    let err = drop_dead(&kv, &[id(T1, 1, S0), id(T1, 2, S0)], NOW).expect_err("row 2 is due");
    assert!(matches!(err, QueueError::NotInDlq { row } if row == id(T1, 2, S0)));
    assert_eq!(keys(&kv, Family::DeadLetter, T1).len(), 1);
    clean(&kv);
}

#[test]
fn drop_dead_leaves_a_dedupe_record_that_names_a_later_hook() {
    let kv = store();
    ingest_dedupe(&kv, 1, "evt_1", &[plain(S0)]);
    kill(&kv, 1, S0);
    // The record expired and the provider's id came again as hook 2.
    ingest_dedupe(&kv, 2, "evt_1", &[plain(S0)]);
    commit(&kv, drop_dead(&kv, &[id(T1, 1, S0)], NOW).expect("drop"));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    let v = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt_1"))
        .expect("get")
        .expect("record");
    assert_eq!(DedupeValue::decode(&v).expect("decode").seq, Seq(2));
    clean(&kv);
}

#[test]
fn drop_dead_of_a_dead_lane_head_leaves_the_lane_to_its_next_member() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "gone", NOW).expect("dead"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    let before = counters(&kv, T1);
    commit(&kv, drop_dead(&kv, &[id(T1, 1, S0)], NOW).expect("drop"));
    let d = delta(&before, &counters(&kv, T1));
    assert_eq!(
        d.keys().copied().collect::<Vec<_>>(),
        vec![F::Dead, F::DeadBytes]
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    clean(&kv);
}

/// A hook whose other row is held by a pause (the held band of ?D) keeps its
/// envelope, archive entry and dedupe record when its dead row is dropped; the
/// held row stays held and its resume finds the envelope. Every step leaves
/// the invariants as pause defines them (a held ?D needs no ?A).
#[test]
fn drop_dead_keeps_the_hook_of_a_row_held_by_a_pause() {
    let kv = store();
    let size = i64::from(ingest_dedupe(&kv, 1, "evt_1", &[plain(S0), plain(S1)]));
    commit(&kv, hold(&kv, dk(T1, NOW, 1, S1)).expect("hold"));
    kill(&kv, 1, S0);
    clean(&kv);
    let d = commit_delta(
        &kv,
        T1,
        drop_dead(&kv, &[id(T1, 1, S0)], NOW).expect("drop"),
    );
    assert_eq!(d, map(&[(F::Dead, -1), (F::DeadBytes, -size)]));
    assert!(has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(has(&kv, Cf::Archive, &archive_key(T1, NOW - 10, Seq(1))));
    assert!(has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    assert_eq!(
        held(&kv, T1),
        vec![dk(T1, ankusa_keys::held_due_ms(NOW), 1, S1)]
    );
    clean(&kv);
    let p = unhold(&kv, T1, |_, _| false, None, 10).expect("unhold");
    assert_eq!(p.moved, 1);
    commit(&kv, p.batch);
    assert!(due_value(&kv, T1, NOW, id(T1, 1, S1)).is_some());
    clean(&kv);
}

/// A quarantined hook records no ?K: released, dead-lettered and dropped, it
/// leaves the dedupe record of the provider's genuine hook (same dedupe key)
/// alone, though its envelope carries that key.
#[test]
fn drop_dead_of_a_released_quarantined_hook_keeps_the_genuine_hooks_dedupe_record() {
    let kv = store();
    ingest_dedupe(&kv, 1, "evt", &[plain(S0)]);
    let env = hold_in_quarantine(&kv, T1, 2, "invalid signature: forged");
    assert_eq!(env.dedupe_key.as_deref(), Some(&b"evt"[..]));
    commit(
        &kv,
        release(&kv, T1, Seq(2), &[plain(S0)], NOW).expect("release"),
    );
    kill(&kv, 2, S0);
    clean(&kv);
    commit(&kv, drop_dead(&kv, &[id(T1, 2, S0)], NOW).expect("drop"));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(2))));
    assert!(!has(
        &kv,
        Cf::Archive,
        &archive_key(T1, env.received_at_ms, Seq(2))
    ));
    let v = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt"))
        .expect("get")
        .expect("the genuine hook's record");
    assert_eq!(DedupeValue::decode(&v).expect("decode").seq, Seq(1));
    assert!(has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    clean(&kv);
}
