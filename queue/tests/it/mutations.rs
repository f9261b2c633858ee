//! Planted bugs (`lanes::mutation`, feature `mutations`): every harmful one
//! is caught by check_invariants on a lane driven through its transitions.

use crate::support::*;
use ankusa_lanes::mutation::{self, Mutation};

/// A lane of three hooks driven through promote, claim, retry, claim,
/// dead-letter, revive, delivered and a sweep; returns the violations of
/// the first step after which there are any (empty: none ever).
fn drive(m: Mutation) -> Vec<Violation> {
    let _g = mutation::scoped(m);
    let kv = store();
    type Step = Box<dyn Fn(&MemoryKv)>;
    let steps: Vec<Step> = vec![
        Box::new(|kv| {
            let _ = ingest(kv, T1, 1, &[laned(S0, "k")]);
        }),
        Box::new(|kv| {
            let _ = ingest(kv, T1, 2, &[laned(S0, "k")]);
        }),
        Box::new(|kv| {
            let _ = ingest(kv, T1, 3, &[laned(S0, "k")]);
        }),
        Box::new(|kv| {
            let _ = sweep(kv, T1, NOW);
        }),
        Box::new(|kv| commit(kv, claim(kv, dk(T1, NOW, 1, S0), NOW).expect("claim"))),
        Box::new(|kv| {
            commit(
                kv,
                retry(kv, id(T1, 1, S0), NOW + 1, "x", NOW).expect("retry"),
            )
        }),
        Box::new(|kv| {
            commit(
                kv,
                claim(kv, dk(T1, NOW + 1, 1, S0), NOW + 1).expect("claim"),
            )
        }),
        Box::new(|kv| {
            let b = dead_letter(kv, id(T1, 1, S0), Origin::InFlight, "x", NOW + 2).expect("dead");
            commit(kv, b)
        }),
        Box::new(|kv| commit(kv, revive(kv, id(T1, 1, S0), NOW + 3).expect("revive"))),
        Box::new(|kv| {
            commit(
                kv,
                claim(kv, dk(T1, NOW + 2, 2, S0), NOW + 3).expect("claim"),
            )
        }),
        Box::new(|kv| {
            commit(
                kv,
                delivered(kv, id(T1, 2, S0), NOW + 4).expect("delivered"),
            )
        }),
        Box::new(|kv| {
            let _ = sweep(kv, T1, NOW + 5);
        }),
    ];
    for step in steps {
        step(&kv);
        let v = check_invariants(&kv.snapshot()).expect("check");
        if !v.is_empty() {
            return v;
        }
    }
    // The run ends drained but for the revived row 1 (now the head) and 3.
    assert_eq!(head_of(&kv, T1, lane_of(S0, "k")), Some(id(T1, 1, S0)));
    Vec::new()
}

#[test]
fn no_mutation_and_the_benign_control_stay_clean() {
    assert_eq!(drive(Mutation::None), vec![]);
    assert_eq!(drive(Mutation::PromoteKeepsMarker), vec![]);
}

#[test]
fn every_harmful_mutation_breaks_an_invariant_a_model_checks() {
    for m in Mutation::ALL {
        if m.is_benign() || m == Mutation::SweepSkipsRecheck {
            continue;
        }
        let v = drive(m);
        assert!(!v.is_empty(), "{m:?} went unnoticed");
    }
}
