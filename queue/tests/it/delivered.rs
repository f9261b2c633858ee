//! Delivered: the row goes, the envelope stays, and a delivered head hands its
//! lane to the next member in seq order.

use crate::support::*;

#[test]
fn delivered_deletes_the_row_and_keeps_the_envelope() {
    let kv = store();
    let size = i64::from(ingest(&kv, T1, 1, &[plain(S0), plain(S1)]));
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    let d = commit_delta(
        &kv,
        T1,
        delivered(&kv, id(T1, 1, S0), NOW + 1).expect("delivered"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Pending, -1),
            (F::Bytes, -size),
            (F::InFlight, -1),
            (F::DeliveredTotal, 1)
        ])
    );
    assert_eq!(row(&kv, id(T1, 1, S0)), None);
    assert!(keys(&kv, Family::InFlight, T1).is_empty());
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(1)))
            .expect("get")
            .is_some()
    );
    assert_eq!(
        counters(&kv, T1),
        map(&[(F::Pending, 1), (F::Bytes, size), (F::DeliveredTotal, 1)])
    );
    clean(&kv);
    let err = delivered(&kv, id(T1, 1, S0), NOW + 2).expect_err("gone");
    assert!(matches!(err, QueueError::NotInState { .. }));
}

#[test]
fn delivered_head_hands_the_lane_to_the_next_member_in_seq_order() {
    let kv = store();
    let lane = lane_of(S0, "k");
    let size = i64::from(ingest(&kv, T1, 1, &[laned(S0, "k")]));
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    ingest(&kv, T1, 3, &[laned(S0, "k")]);
    assert_eq!(sweep(&kv, T1, NOW), 1);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    assert_eq!(counters(&kv, T1).get(&F::LaneMembers), Some(&2));
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    clean(&kv);

    let d = commit_delta(
        &kv,
        T1,
        delivered(&kv, id(T1, 1, S0), NOW + 5).expect("delivered"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Pending, -1),
            (F::Bytes, -size),
            (F::InFlight, -1),
            (F::DeliveredTotal, 1),
            (F::LaneMembers, -1)
        ])
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert_eq!(
        due_value(&kv, T1, NOW + 5, id(T1, 2, S0)).map(|v| v.kind),
        Some(DueKind::HeadFirst)
    );
    assert_eq!(
        keys(&kv, Family::LaneMember, T1),
        vec![lane_member_key(T1, lane, Seq(3), S0).to_vec()]
    );
    assert_eq!(row(&kv, id(T1, 2, S0)).expect("row").state, RowState::Due);
    assert_eq!(counters(&kv, T1).get(&F::Lanes), Some(&1));
    clean(&kv);

    // Drain: 2 then 3, then the lane is free.
    for (seq, at) in [(2, NOW + 5), (3, NOW + 6)] {
        commit(&kv, claim(&kv, dk(T1, at, seq, S0), at).expect("claim"));
        commit(
            &kv,
            delivered(&kv, id(T1, seq, S0), at + 1).expect("delivered"),
        );
        clean(&kv);
    }
    assert_eq!(head_of(&kv, T1, lane), None);
    assert_eq!(counters(&kv, T1), map(&[(F::DeliveredTotal, 3)]));
    assert!(keys(&kv, Family::LaneHead, T1).is_empty());
}
