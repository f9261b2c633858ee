//! Revive: a dead row back due now, once; a laned row after the current head.

use crate::support::*;

#[test]
fn revive_puts_an_unordered_row_back_due_now_and_refuses_a_second_revive() {
    let kv = store();
    let size = i64::from(ingest(&kv, T1, 1, &[plain(S0)]));
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 1, "x", NOW).expect("retry"),
    );
    commit(
        &kv,
        claim(&kv, dk(T1, NOW + 1, 1, S0), NOW + 1).expect("claim"),
    );
    commit(
        &kv,
        dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "horizon", NOW + 2).expect("dead"),
    );
    let d = commit_delta(
        &kv,
        T1,
        revive(&kv, id(T1, 1, S0), NOW + 100).expect("revive"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Dead, -1),
            (F::DeadBytes, -size),
            (F::Pending, 1),
            (F::Bytes, size)
        ])
    );
    assert_eq!(
        due_value(&kv, T1, NOW + 100, id(T1, 1, S0)),
        Some(DueValue {
            size: size as u32,
            kind: DueKind::First
        })
    );
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.first_attempt_at_ms),
        (RowState::Due, 0, None)
    );
    assert!(keys(&kv, Family::DeadLetter, T1).is_empty());
    clean(&kv);
    let err = revive(&kv, id(T1, 1, S0), NOW + 101).expect_err("not in DLQ");
    assert!(matches!(err, QueueError::NotInDlq { row } if row == id(T1, 1, S0)));
    assert_eq!(err.to_string(), "row 1/1/0 is not in the DLQ");
}

#[test]
fn revive_of_a_laned_row_lands_after_the_current_head() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    ingest(&kv, T1, 3, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "poison", NOW).expect("dead"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));

    let size = i64::from(row(&kv, id(T1, 1, S0)).expect("row").size);
    let d = commit_delta(
        &kv,
        T1,
        revive(&kv, id(T1, 1, S0), NOW + 1).expect("revive"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Dead, -1),
            (F::DeadBytes, -size),
            (F::Pending, 1),
            (F::Bytes, size),
            (F::LaneMembers, 1)
        ])
    );
    // A member, not a second row in ?D beside the head.
    assert_eq!(
        row(&kv, id(T1, 1, S0)).expect("row").state,
        RowState::Member
    );
    assert_eq!(keys(&kv, Family::Due, T1).len(), 1);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert_eq!(
        keys(&kv, Family::LaneMarker, T1),
        vec![lane_marker_key(T1, lane).to_vec()]
    );
    clean(&kv);
    // The sweep sees the head and only drops the marker.
    assert_eq!(sweep(&kv, T1, NOW + 1), 0);
    clean(&kv);
    // Head 2 delivered: the revived 1 (lowest seq) goes before 3.
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S0), NOW + 2).expect("claim"));
    commit(
        &kv,
        delivered(&kv, id(T1, 2, S0), NOW + 3).expect("delivered"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    assert_eq!(
        keys(&kv, Family::LaneMember, T1),
        vec![lane_member_key(T1, lane, Seq(3), S0).to_vec()]
    );
    clean(&kv);
}
