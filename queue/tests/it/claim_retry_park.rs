//! Claim, retry and park: a row's move between ?D and ?F, its attempts and
//! first attempt time, and kind 2 and 3 heads in lanes_blocked.

use crate::support::*;

#[test]
fn claim_moves_due_to_in_flight_and_stamps_the_first_attempt() {
    let kv = store();
    let size = ingest(&kv, T1, 1, &[plain(S0)]);
    let d = commit_delta(
        &kv,
        T1,
        claim(&kv, dk(T1, NOW, 1, S0), NOW + 3).expect("claim"),
    );
    assert_eq!(d, map(&[(F::InFlight, 1)]));
    assert!(keys(&kv, Family::Due, T1).is_empty());
    let fv = kv
        .get(Cf::Index, &in_flight_key(T1, Seq(1), S0))
        .expect("get")
        .expect("?F");
    assert_eq!(
        InFlightValue::decode(&fv).expect("decode"),
        InFlightValue {
            size,
            kind: DueKind::First,
            claimed_at_ms: NOW + 3
        }
    );
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.first_attempt_at_ms),
        (RowState::InFlight, Some(NOW + 3))
    );
    clean(&kv);
    // A second claim of the same ?D key is refused.
    let err = claim(&kv, dk(T1, NOW, 1, S0), NOW + 4).expect_err("not due");
    assert!(matches!(
        err,
        QueueError::NotInState {
            expected: "due",
            ..
        }
    ));
}

#[test]
fn retry_counts_an_attempt_and_keeps_the_first_attempt_time() {
    let kv = store();
    let size = ingest(&kv, T1, 1, &[plain(S0)]);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    let d = commit_delta(
        &kv,
        T1,
        retry(&kv, id(T1, 1, S0), NOW + 500, "503", NOW + 1).expect("retry"),
    );
    assert_eq!(d, map(&[(F::InFlight, -1), (F::RetriesTotal, 1)]));
    assert_eq!(
        due_value(&kv, T1, NOW + 500, id(T1, 1, S0)),
        Some(DueValue {
            size,
            kind: DueKind::Retry
        })
    );
    assert!(keys(&kv, Family::InFlight, T1).is_empty());
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.first_attempt_at_ms),
        (RowState::Due, 1, Some(NOW))
    );
    assert_eq!(r.last_error.as_deref(), Some("503"));
    clean(&kv);
    // The second claim keeps first_attempt_at.
    commit(
        &kv,
        claim(&kv, dk(T1, NOW + 500, 1, S0), NOW + 600).expect("claim"),
    );
    assert_eq!(
        row(&kv, id(T1, 1, S0)).expect("row").first_attempt_at_ms,
        Some(NOW)
    );
    let err = retry(&kv, id(T1, 2, S0), NOW + 700, "x", NOW + 600).expect_err("no row");
    assert!(matches!(
        err,
        QueueError::NotInState {
            expected: "in flight",
            ..
        }
    ));
}

#[test]
fn kind_2_and_3_claim_retry_and_park_move_lanes_blocked() {
    let kv = store();
    let lane = lane_of(S0, "k");
    let size = ingest(&kv, T1, 1, &[laned(S0, "k")]);
    assert_eq!(sweep(&kv, T1, NOW), 1);
    let head = id(T1, 1, S0);
    assert_eq!(
        due_value(&kv, T1, NOW, head),
        Some(DueValue {
            size,
            kind: DueKind::HeadFirst
        })
    );

    // Claim of kind 2: in_flight +1 only.
    let d = commit_delta(&kv, T1, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    assert_eq!(d, map(&[(F::InFlight, 1)]));
    // Retry of the head: kind 3, lanes_blocked +1.
    let d = commit_delta(
        &kv,
        T1,
        retry(&kv, head, NOW + 10, "boom", NOW).expect("retry"),
    );
    assert_eq!(
        d,
        map(&[
            (F::InFlight, -1),
            (F::RetriesTotal, 1),
            (F::LanesBlocked, 1)
        ])
    );
    assert_eq!(
        due_value(&kv, T1, NOW + 10, head),
        Some(DueValue {
            size,
            kind: DueKind::HeadRetry
        })
    );
    assert_eq!(head_of(&kv, T1, lane), Some(head));
    clean(&kv);
    // Claim of kind 3: lanes_blocked −1.
    let d = commit_delta(
        &kv,
        T1,
        claim(&kv, dk(T1, NOW + 10, 1, S0), NOW + 10).expect("claim"),
    );
    assert_eq!(d, map(&[(F::InFlight, 1), (F::LanesBlocked, -1)]));
    let fv = kv
        .get(Cf::Index, &in_flight_key(T1, Seq(1), S0))
        .expect("get")
        .expect("?F");
    assert_eq!(
        InFlightValue::decode(&fv).expect("decode").kind,
        DueKind::HeadRetry
    );
    clean(&kv);
    // A retry of the head again, then a park of the due head (a breaker open
    // when the visit meets it): it stays kind 3, lanes_blocked unchanged, no
    // attempt and no retry counted, nothing claimed.
    commit(
        &kv,
        retry(&kv, head, NOW + 12, "boom", NOW + 11).expect("retry"),
    );
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), Some(&1));
    let d = commit_delta(
        &kv,
        T1,
        park(&kv, dk(T1, NOW + 12, 1, S0), NOW + 20, NOW + 12).expect("park"),
    );
    assert_eq!(d, map(&[]));
    assert_eq!(
        due_value(&kv, T1, NOW + 20, head),
        Some(DueValue {
            size,
            kind: DueKind::HeadRetry
        })
    );
    assert_eq!(due_value(&kv, T1, NOW + 12, head), None);
    let r = row(&kv, head).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.last_error.as_deref()),
        (RowState::Due, 2, Some("boom"))
    );
    assert_eq!(r.first_attempt_at_ms, Some(NOW));
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), Some(&1));
    assert_eq!(head_of(&kv, T1, lane), Some(head));
    clean(&kv);
}

#[test]
fn park_of_an_unordered_row_counts_nothing_and_claims_nothing() {
    let kv = store();
    let size = ingest(&kv, T1, 1, &[plain(S0)]);
    let d = commit_delta(
        &kv,
        T1,
        park(&kv, dk(T1, NOW, 1, S0), NOW + 9, NOW).expect("park"),
    );
    assert_eq!(d, map(&[]));
    assert_eq!(
        due_value(&kv, T1, NOW + 9, id(T1, 1, S0)),
        Some(DueValue {
            size,
            kind: DueKind::Retry
        })
    );
    assert!(keys(&kv, Family::InFlight, T1).is_empty());
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.first_attempt_at_ms),
        (RowState::Due, 0, None)
    );
    clean(&kv);
    // A park of a ?D key that is not there is refused.
    let err = park(&kv, dk(T1, NOW, 1, S0), NOW + 9, NOW).expect_err("not due");
    assert!(matches!(
        err,
        QueueError::NotInState {
            expected: "due",
            ..
        }
    ));
}

/// A row claimed only to be parked by an open breaker once got its
/// first_attempt_at at that claim, so a breaker open longer than the retry
/// horizon dead-lettered a hook the sink never saw. A park claims nothing: the
/// horizon starts at the first real attempt, however often and long the row was
/// parked.
#[test]
fn a_parked_row_starts_its_horizon_at_its_first_real_attempt() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    assert_eq!(sweep(&kv, T1, NOW), 1);
    let (plain_row, head) = (id(T1, 1, S0), id(T1, 2, S0));
    // Parked three times, for much longer than any horizon.
    let mut at = NOW;
    for until in [NOW + 60_000, NOW + 3_600_000, NOW + 90_000_000] {
        commit(&kv, park(&kv, dk(T1, at, 1, S0), until, at).expect("park"));
        commit(&kv, park(&kv, dk(T1, at, 2, S0), until, at).expect("park"));
        at = until;
        for r in [plain_row, head] {
            let r = row(&kv, r).expect("row");
            assert_eq!(
                (r.state, r.attempts, r.first_attempt_at_ms),
                (RowState::Due, 0, None)
            );
        }
        clean(&kv);
    }
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), Some(&1));
    // The first real attempt stamps the horizon's start.
    commit(&kv, claim(&kv, dk(T1, at, 1, S0), at + 5).expect("claim"));
    commit(&kv, claim(&kv, dk(T1, at, 2, S0), at + 5).expect("claim"));
    for r in [plain_row, head] {
        let r = row(&kv, r).expect("row");
        assert_eq!(
            (r.state, r.attempts, r.first_attempt_at_ms),
            (RowState::InFlight, 0, Some(at + 5))
        );
    }
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), None);
    clean(&kv);
}
