//! Orphan: a row whose envelope is gone is dead-lettered and releases its lane;
//! an undecodable row is rewritten from its index entry.

use crate::support::*;

#[test]
fn orphan_dead_letters_a_row_whose_envelope_is_gone_and_releases_its_lane() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    let mut b = Batch::new();
    b.delete(Cf::Hooks, hook_key(T1, Seq(1)));
    commit(&kv, b);
    let b = orphan(
        &kv,
        id(T1, 1, S0),
        Origin::Due { due_ms: NOW },
        "envelope missing",
        NOW + 1,
    )
    .expect("orphan");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d.get(&F::Dead), Some(&1));
    assert_eq!(d.get(&F::DeadLetteredTotal), Some(&1));
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    // The DLQ entry of a hook without envelope stays visible as invariant 5.
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert_eq!(v, vec![Violation::EnvelopeMissing { row: id(T1, 1, S0) }]);
}

#[test]
fn orphan_of_an_undecodable_row_rewrites_it_from_its_index_entry() {
    let kv = store();
    let size = ingest(&kv, T1, 1, &[plain(S0)]);
    let mut b = Batch::new();
    b.put(Cf::Deliveries, delivery_key(T1, Seq(1), S0), vec![99u8]);
    commit(&kv, b);
    assert!(dead_letter(&kv, id(T1, 1, S0), Origin::Due { due_ms: NOW }, "x", NOW).is_err());
    commit(
        &kv,
        orphan(
            &kv,
            id(T1, 1, S0),
            Origin::Due { due_ms: NOW },
            "row undecodable",
            NOW,
        )
        .expect("orphan"),
    );
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!((r.state, r.size), (RowState::Dead, size));
    clean(&kv);
}
