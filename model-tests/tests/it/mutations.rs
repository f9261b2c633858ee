//! Mutation check: every planted bug of `ankusa_lanes::mutation` makes the
//! state machine fail (and the benign controls keep it green). The mutation is
//! thread-local and the runner runs on this thread, so tests run in parallel.

use std::cell::Cell;

use ankusa_lanes::mutation::{self, Mutation};
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

use crate::machine::{MAX_STEPS, run_case};
use crate::steps::steps;

/// Cases a mutation may take before the test gives up on catching it.
const BUDGET: u32 = 2000;
/// Cases a benign mutation (a control) must stay green for: it runs them all.
const CONTROL_CASES: u32 = 500;

/// Runs the state machine with `m` planted; returns the runner's result, the
/// case at which the first failure came (1-based) and the cases run.
fn hunt(m: Mutation, cases: u32) -> (Result<(), TestError<Vec<crate::steps::Step>>>, Option<u32>) {
    let _planted = mutation::scoped(m);
    assert_eq!(mutation::current(), m);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    // A fixed seed: "caught after N cases" is the same on every run.
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let ran = Cell::new(0u32);
    let first = Cell::new(None);
    let result = runner.run(&steps(MAX_STEPS), |s| {
        if first.get().is_none() {
            ran.set(ran.get() + 1);
        }
        let r = run_case(&s);
        if r.is_err() && first.get().is_none() {
            first.set(Some(ran.get()));
        }
        r
    });
    (result, first.get())
}

fn must_catch(m: Mutation) {
    assert!(!m.is_benign());
    let (result, first) = hunt(m, BUDGET);
    assert_eq!(
        mutation::current(),
        Mutation::None,
        "the mutation is cleared"
    );
    match result {
        Err(TestError::Fail(why, minimal)) => {
            println!(
                "mutation {m:?}: caught after {} case(s); shrunk to {} step(s): {minimal:?}\n  {why}",
                first.unwrap_or(0),
                minimal.len()
            );
        }
        Err(TestError::Abort(why)) => panic!("mutation {m:?}: the runner aborted: {why}"),
        Ok(()) => {
            panic!("mutation {m:?} survived {BUDGET} cases: the state machine does not catch it")
        }
    }
}

fn must_survive(m: Mutation) {
    assert!(m.is_benign());
    let (result, _) = hunt(m, CONTROL_CASES);
    if let Err(e) = result {
        panic!("benign mutation {m:?} made the machine fail: {e}");
    }
    println!("benign mutation {m:?}: green for {CONTROL_CASES} cases, as it must be");
}

macro_rules! mutation_tests {
    ($($name:ident => $m:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let m = Mutation::$m;
                if m.is_benign() { must_survive(m) } else { must_catch(m) }
            }
        )*

        /// Every mutation the lanes crate plants has a test above.
        #[test]
        fn every_mutation_has_a_test() {
            let tested = [$(Mutation::$m),*];
            for m in Mutation::ALL {
                assert!(tested.contains(&m), "no mutation test for {m:?}");
            }
            assert_eq!(tested.len(), Mutation::ALL.len());
        }
    };
}

mutation_tests! {
    mutation_release_skips_next_member => ReleaseSkipsNextMember,
    mutation_promote_keeps_marker => PromoteKeepsMarker,
    mutation_promote_skips_head => PromoteSkipsHead,
    mutation_claim_forgets_blocked_counter => ClaimForgetsBlockedCounter,
    mutation_member_put_skips_marker => MemberPutSkipsMarker,
    mutation_dead_letter_skips_release => DeadLetterSkipsRelease,
    mutation_revive_ignores_lane => ReviveIgnoresLane,
    mutation_sweep_drops_live_marker => SweepDropsLiveMarker,
    mutation_sweep_skips_recheck => SweepSkipsRecheck,
}
