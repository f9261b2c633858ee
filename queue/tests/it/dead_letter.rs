//! Dead letter: a dead head releases its lane, a blocked head dead-lettered
//! from ?D frees it, and a row dead after an attempt counts that attempt.

use crate::support::*;

#[test]
fn a_dead_head_releases_its_lane_to_the_next_member() {
    let kv = store();
    let lane = lane_of(S0, "k");
    let size = i64::from(ingest(&kv, T1, 1, &[laned(S0, "k")]));
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    let b = dead_letter(
        &kv,
        id(T1, 1, S0),
        Origin::InFlight,
        "permanent: 400",
        NOW + 7,
    )
    .expect("dead");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(
        d,
        map(&[
            (F::Pending, -1),
            (F::Bytes, -size),
            (F::InFlight, -1),
            (F::Dead, 1),
            (F::DeadBytes, size),
            (F::DeadLetteredTotal, 1),
            (F::LaneMembers, -1),
        ])
    );
    let x = kv
        .get(Cf::Index, &dead_letter_key(T1, Seq(1), S0))
        .expect("get")
        .expect("?X");
    assert_eq!(
        DeadLetterValue::decode(&x).expect("decode"),
        DeadLetterValue {
            dead_at_ms: NOW + 7,
            reason: "permanent: 400".into()
        }
    );
    assert_eq!(row(&kv, id(T1, 1, S0)).expect("row").state, RowState::Dead);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert_eq!(
        due_value(&kv, T1, NOW + 7, id(T1, 2, S0)).map(|v| v.kind),
        Some(DueKind::HeadFirst)
    );
    clean(&kv);
}

#[test]
fn dead_letter_of_a_blocked_head_from_due_unblocks_and_frees_the_lane() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 50, "x", NOW).expect("retry"),
    );
    let b = dead_letter(
        &kv,
        id(T1, 1, S0),
        Origin::Due { due_ms: NOW + 50 },
        "source gone",
        NOW + 1,
    )
    .expect("dead");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d.get(&F::LanesBlocked), Some(&-1));
    assert_eq!(d.get(&F::Lanes), Some(&-1));
    assert_eq!(d.get(&F::InFlight), None);
    assert_eq!(head_of(&kv, T1, lane), None);
    assert!(keys(&kv, Family::Due, T1).is_empty());
    clean(&kv);
    // Wrong origin is refused.
    let err = dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "x", NOW).expect_err("not in ?F");
    assert!(matches!(err, QueueError::NotInState { .. }));
}

/// A row dead-lettered by its first attempt's outcome shows that attempt
/// (attempts 1, last_error the reason); `dead_letter` at a claim (nothing ran)
/// counts none. Found by an operator's walkthrough of the admin API: rows dead
/// on a 410 showed attempts 0 and no error.
#[test]
fn a_row_dead_after_its_attempt_counts_the_attempt() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[plain(S0)]);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S0), NOW).expect("claim"));
    commit(
        &kv,
        ankusa_queue::dead_letter_attempted(&kv, id(T1, 1, S0), "sink gone: HTTP 410", NOW + 1)
            .expect("dead"),
    );
    commit(
        &kv,
        dead_letter(
            &kv,
            id(T1, 2, S0),
            Origin::InFlight,
            "retry horizon passed",
            NOW + 1,
        )
        .expect("dead"),
    );
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.last_error.as_deref()),
        (RowState::Dead, 1, Some("sink gone: HTTP 410"))
    );
    let r = row(&kv, id(T1, 2, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.last_error.as_deref()),
        (RowState::Dead, 0, None)
    );
    clean(&kv);
}
