//! Recovery at start: claims in ?F come back as first attempts, in pages.

use crate::support::*;

#[test]
fn recover_inflight_returns_claims_as_first_attempts_in_pages() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k"), plain(S1)]);
    ingest(&kv, T2, 2, &[plain(S0)]);
    sweep(&kv, T1, NOW);
    // The head retries once (kind 3), then is claimed again.
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 1, "x", NOW).expect("retry"),
    );
    commit(
        &kv,
        claim(&kv, dk(T1, NOW + 1, 1, S0), NOW + 1).expect("claim"),
    );
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S1), NOW).expect("claim"));
    commit(&kv, claim(&kv, dk(T2, NOW, 2, S0), NOW).expect("claim"));
    // Tenant 1 loses its ?A to prove recovery puts it back.
    let mut b = Batch::new();
    b.delete(Cf::Index, active_key(T1));
    commit(&kv, b);

    let p = recover_inflight(&kv, 2, NOW + 9).expect("recover");
    assert_eq!(p.moved, 2);
    assert!(p.next.is_some());
    let d = commit_delta(&kv, T1, p.batch);
    assert_eq!(d, map(&[(F::InFlight, -2)]));
    let p = recover_inflight(&kv, 2, NOW + 9).expect("recover");
    assert_eq!((p.moved, p.next.is_none()), (1, true));
    commit(&kv, p.batch);
    assert_eq!(recover_inflight(&kv, 2, NOW + 9).expect("recover").moved, 0);

    assert_eq!(
        due_value(&kv, T1, NOW + 9, id(T1, 1, S0)).map(|v| v.kind),
        Some(DueKind::HeadFirst)
    );
    assert_eq!(
        due_value(&kv, T1, NOW + 9, id(T1, 1, S1)).map(|v| v.kind),
        Some(DueKind::First)
    );
    assert_eq!(
        due_value(&kv, T2, NOW + 9, id(T2, 2, S0)).map(|v| v.kind),
        Some(DueKind::First)
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.first_attempt_at_ms),
        (RowState::Due, 1, Some(NOW))
    );
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), None);
    assert_eq!(counters(&kv, TenantOrd::NODE).get(&F::InFlight), None);
    clean(&kv);
}
