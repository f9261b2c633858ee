//! `dead_letter: hold` (ADR 0004 section 8): a dead-lettered lane head keeps
//! its lane; the key's later hooks wait behind it while other keys flow; a
//! revive puts it back as the head (first), a drop releases the lane, a
//! purge takes the held head with the tenant.

use ankusa_lanes::OnDeadHead;

use crate::support::*;

/// Three hooks of key "k" and one of key "j" on sink 0; "k"'s first is
/// claimed and dead-lettered by a `hold` entry. Returns the lane of "k".
fn held_k(kv: &MemoryKv) -> LaneId {
    let lane = lane_of(S0, "k");
    ingest(kv, T1, 1, &[laned(S0, "k")]);
    ingest(kv, T1, 2, &[laned(S0, "k")]);
    ingest(kv, T1, 3, &[laned(S0, "k")]);
    ingest(kv, T1, 4, &[laned(S0, "j")]);
    sweep(kv, T1, NOW);
    commit(kv, claim(kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    let d = commit_delta(
        kv,
        T1,
        dead_letter_logged(
            kv,
            id(T1, 1, S0),
            "permanent: HTTP 422",
            NOW + 1,
            None,
            OnDeadHead::Hold,
        )
        .expect("dead"),
    );
    let size = i64::from(row(kv, id(T1, 1, S0)).expect("row").size);
    assert_eq!(
        d,
        map(&[
            (F::InFlight, -1),
            (F::Pending, -1),
            (F::Bytes, -size),
            (F::Dead, 1),
            (F::DeadBytes, size),
            (F::DeadLetteredTotal, 1),
            (F::LanesHeld, 1),
        ]),
        "a held head: no release (lanes stays), lanes_held +1"
    );
    lane
}

/// One hook of key "k" on sink 0, claimed and dead-lettered by a `hold`
/// entry, nothing behind it. Returns its lane.
fn held_alone(kv: &MemoryKv) -> LaneId {
    ingest(kv, T1, 1, &[laned(S0, "k")]);
    sweep(kv, T1, NOW);
    commit(kv, claim(kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        kv,
        dead_letter_logged(kv, id(T1, 1, S0), "permanent", NOW, None, OnDeadHead::Hold)
            .expect("dead"),
    );
    lane_of(S0, "k")
}

#[test]
fn a_held_head_keeps_its_key_waiting_while_another_key_flows() {
    let kv = store();
    let lane = held_k(&kv);
    // ?H still names the dead row; "k"'s later hooks stay members.
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    assert_eq!(row(&kv, id(T1, 1, S0)).expect("row").state, RowState::Dead);
    for seq in [2, 3] {
        assert_eq!(
            row(&kv, id(T1, seq, S0)).expect("row").state,
            RowState::Member
        );
    }
    // A sweep promotes nothing in the held lane.
    assert_eq!(sweep(&kv, T1, NOW + 2), 0);
    assert_eq!(
        row(&kv, id(T1, 2, S0)).expect("row").state,
        RowState::Member
    );
    // Key "j" was promoted by the first sweep and is due: it flows.
    commit(
        &kv,
        claim(&kv, dk(T1, NOW, 4, S0), NOW + 2).expect("claim j"),
    );
    commit(
        &kv,
        delivered(&kv, id(T1, 4, S0), NOW + 3).expect("deliver j"),
    );
    let c = counters(&kv, T1);
    assert_eq!(
        (
            c.get(&F::Lanes),
            c.get(&F::LanesHeld),
            c.get(&F::LaneMembers)
        ),
        (Some(&1), Some(&1), Some(&2))
    );
    clean(&kv);
}

#[test]
fn a_revived_held_head_goes_first_with_its_lane_position_then_the_rest_in_order() {
    let kv = store();
    let lane = held_k(&kv);
    let position = row(&kv, id(T1, 1, S0)).expect("row").lane_seq;
    assert_eq!(position, Some(1));
    let size = i64::from(row(&kv, id(T1, 1, S0)).expect("row").size);
    let d = commit_delta(
        &kv,
        T1,
        revive(&kv, id(T1, 1, S0), NOW + 10).expect("revive"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Dead, -1),
            (F::DeadBytes, -size),
            (F::Pending, 1),
            (F::Bytes, size),
            (F::LanesHeld, -1),
        ])
    );
    // Back as the head: due now, kind 2, before every member.
    assert_eq!(
        due_value(&kv, T1, NOW + 10, id(T1, 1, S0)),
        Some(DueValue {
            size: size as u32,
            kind: DueKind::HeadFirst
        })
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.lane_seq),
        (RowState::Due, 0, Some(1))
    );
    clean(&kv);
    // Delivered in order: 1, then 2, then 3, positions 1, 2, 3.
    let mut positions = Vec::new();
    for (at, seq) in (NOW + 10..).zip([1, 2, 3]) {
        assert_eq!(head_of(&kv, T1, lane), Some(id(T1, seq, S0)));
        let due = keys(&kv, Family::Due, T1)
            .into_iter()
            .map(|k| DueKey::decode(&k).expect("due key"))
            .find(|k| k.seq == Seq(seq))
            .expect("the head is due");
        commit(&kv, claim(&kv, due, at).expect("claim"));
        positions.push(row(&kv, id(T1, seq, S0)).expect("row").lane_seq);
        commit(&kv, delivered(&kv, id(T1, seq, S0), at).expect("deliver"));
    }
    assert_eq!(positions, vec![Some(1), Some(2), Some(3)]);
    assert_eq!(head_of(&kv, T1, lane), None);
    clean(&kv);
}

#[test]
fn dropping_a_held_head_releases_its_lane_to_the_next_hook() {
    let kv = store();
    let lane = held_k(&kv);
    let size = i64::from(row(&kv, id(T1, 1, S0)).expect("row").size);
    let d = commit_delta(
        &kv,
        T1,
        drop_dead(&kv, &[id(T1, 1, S0)], NOW + 20).expect("drop"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Dead, -1),
            (F::DeadBytes, -size),
            (F::LanesHeld, -1),
            (F::LaneMembers, -1),
        ]),
        "the release promotes seq 2 (lanes stays)"
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert_eq!(
        due_value(&kv, T1, NOW + 20, id(T1, 2, S0)).map(|v| v.kind),
        Some(DueKind::HeadFirst)
    );
    clean(&kv);
}

#[test]
fn dropping_the_held_head_of_a_lane_with_nothing_behind_it_frees_the_lane() {
    let kv = store();
    let lane = held_alone(&kv);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    commit(
        &kv,
        drop_dead(&kv, &[id(T1, 1, S0)], NOW + 1).expect("drop"),
    );
    assert_eq!(head_of(&kv, T1, lane), None);
    let c = counters(&kv, T1);
    assert_eq!(
        (c.get(&F::Lanes), c.get(&F::LanesHeld)),
        (None, None),
        "zero counters are not listed"
    );
    clean(&kv);
}

#[test]
fn a_revive_of_another_dead_row_of_a_held_lane_waits_behind_the_held_head() {
    let kv = store();
    let lane = lane_of(S0, "k");
    // Seq 1 dies under `release` (seq 2 becomes the head), then seq 2 dies
    // under `hold`.
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "released", NOW).expect("dead"),
    );
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S0), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter_logged(&kv, id(T1, 2, S0), "held", NOW, None, OnDeadHead::Hold).expect("dead"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    // Seq 1's revive makes it a member behind the held head.
    commit(&kv, revive(&kv, id(T1, 1, S0), NOW + 1).expect("revive"));
    assert_eq!(
        row(&kv, id(T1, 1, S0)).expect("row").state,
        RowState::Member
    );
    assert_eq!(sweep(&kv, T1, NOW + 1), 0);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    clean(&kv);
}

#[test]
fn a_paged_purge_takes_a_held_head_with_its_lane() {
    let kv = store();
    let lane = held_k(&kv);
    let mut cursor = None;
    loop {
        let page = purge_tenant_page(&kv, T1, cursor.as_ref(), 1).expect("page");
        commit(&kv, page.batch);
        clean(&kv);
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(head_of(&kv, T1, lane), None);
    assert_eq!(counters(&kv, T1), BTreeMap::new());
}

#[test]
fn the_checker_counts_held_lanes_and_finds_a_wrong_count() {
    let kv = store();
    held_k(&kv);
    clean(&kv);
    let census = check_store(&kv.snapshot()).expect("check").census;
    assert_eq!((census.lanes, census.lanes_held), (2, 1), "{census:?}");
    // A lanes_held that disagrees with the store's held heads is reported.
    let mut b = Batch::new();
    ankusa_lanes::count(&mut b, T1, F::LanesHeld, 1);
    commit(&kv, b);
    let v = check_invariants(&kv).expect("check");
    assert!(
        v.iter().any(|v| matches!(
            v,
            Violation::CounterMismatch { tenant, field: F::LanesHeld, stored: 2, expected: 1 }
                if *tenant == T1
        )),
        "{v:?}"
    );
}

/// A drop of a held head runs in the admin API, so the pipeline's sweep may
/// run between its read (no member yet) and its commit: a member a writer
/// commits in between, whose ?P that sweep deletes (?H is still there),
/// must not be stranded. The drop puts the marker back; the next sweep
/// promotes the member.
#[test]
fn a_member_arriving_while_a_held_head_is_dropped_is_promoted_after_the_drop() {
    let kv = store();
    let lane = held_alone(&kv);
    // The drop reads the lane: no member.
    let drop = drop_dead(&kv, &[id(T1, 1, S0)], NOW + 1).expect("drop");
    // A writer commits hook 2 of the key (?O and ?P); a sweep sees the held
    // head and deletes the marker.
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    assert_eq!(sweep(&kv, T1, NOW + 1), 0);
    // The drop commits.
    commit(&kv, drop);
    clean(&kv);
    assert_eq!(head_of(&kv, T1, lane), None);
    // The next sweep promotes hook 2.
    assert_eq!(sweep(&kv, T1, NOW + 2), 1);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    clean(&kv);
}
