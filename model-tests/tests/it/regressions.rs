//! Every shrunk failure the state machine found, as a named test
//! (docs/contributing.md, "Regression tests with a postmortem"), each with a
//! three-line postmortem: what failed, why, and what keeps it from coming back.
//!
//! So far the only failures are the planted ones of `ankusa_lanes::mutation`
//! (the queue/lanes bodies were green from their first run against the
//! machine). Each shrunk case is pinned here twice: clean it passes, with its
//! mutation planted it fails, in a few steps and without a random search.

use ankusa_lanes::mutation::{self, Mutation};

use crate::machine::run_memory;
use crate::steps::{At, Race, Step, Step::*, Why, h};

/// `steps` passes on the real code and fails with `m` planted.
fn pinned(m: Mutation, steps: &[Step], failure: &str) {
    run_memory(steps).unwrap_or_else(|e| panic!("clean run fails: {e}"));
    let err = {
        let _planted = mutation::scoped(m);
        run_memory(steps).expect_err("the planted bug is not caught")
    };
    assert!(
        err.contains(failure),
        "{m:?} caught, but not as expected ({failure}): {err}"
    );
}

// Mutation::MemberPutSkipsMarker, shrunk to 1 step.
// What: an ingested member had neither ?H nor ?P (MemberStranded).
// Why: member_put skipped the ?P put; nothing would ever promote the lane.
#[test]
fn member_put_without_marker_strands_the_lane() {
    pinned(
        Mutation::MemberPutSkipsMarker,
        &[Ingest(h(1, 1, 0, 0b1111, 10))],
        "MemberStranded",
    );
}

// Mutation::PromoteSkipsHead, shrunk to 2 steps.
// What: after a sweep's promote, a laned row was in ?D with no ?H naming it.
// Why: promote put ?D without ?H; counters and the model both disagree.
#[test]
fn promote_without_head_leaves_an_unnamed_live_row() {
    pinned(
        Mutation::PromoteSkipsHead,
        &[Ingest(h(2, 1, 0, 0b1111, 10)), SweepLanes(2, 1, None)],
        "LiveRowNotHead",
    );
}

// Mutation::SweepDropsLiveMarker, shrunk to 2 steps.
// What: the sweep deleted the marker of a lane with a member and no head.
// Why: the sweep's promote branch was replaced by a delete; the model's plan says promote.
#[test]
fn sweep_that_drops_a_live_marker_is_seen_in_its_plan() {
    pinned(
        Mutation::SweepDropsLiveMarker,
        &[Ingest(h(2, 1, 0, 0b1111, 10)), SweepLanes(2, 1, None)],
        "the model plans",
    );
}

// Mutation::DeadLetterSkipsRelease, shrunk to 5 steps.
// What: an orphaned head left ?H naming a row in ?X that lanes_held does not
// count (a held lane nobody held: CounterMismatch of lanes_held).
// Why: the dead-letter path skipped release_ops; a poison head would hold its key forever.
#[test]
fn orphaned_head_must_release_its_lane() {
    pinned(
        Mutation::DeadLetterSkipsRelease,
        &[
            Ingest(h(1, 1, 0, 0b1111, 10)),
            Ingest(h(2, 1, 0, 0b1111, 10)),
            Ingest(h(1, 1, 0, 0b1111, 10)),
            SweepLanes(1, 1, None),
            Orphan(0),
        ],
        "field: LanesHeld, stored: 0, expected: 1",
    );
}

// Mutation::ReleaseSkipsNextMember, shrunk to 4 steps.
// What: an orphaned head's lane kept its next member in ?O; the model had it promoted.
// Why: release deleted ?H without reading the next member (ADR 4.4); a later ?P hid it from check_invariants.
#[test]
fn release_must_promote_the_next_member() {
    pinned(
        Mutation::ReleaseSkipsNextMember,
        &[
            Ingest(h(1, 1, 0, 0b1111, 10)),
            SweepLanes(1, 1, Some((At::BeforeBatch, Race::Lane(10)))),
            Ingest(h(1, 1, 0, 0b1111, 10)),
            Orphan(0),
        ],
        "Member/0/None in store, Due/0/None in model",
    );
}

// Mutation::ReviveIgnoresLane, shrunk to 3 steps.
// What: a revived laned row came back as ?D kind 0 (KindMismatch, LiveRowNotHead).
// Why: revive skipped member_put; it would run beside the head, out of order (ADR 4.8).
#[test]
fn revive_of_a_laned_row_rejoins_its_lane() {
    pinned(
        Mutation::ReviveIgnoresLane,
        &[Ingest(h(1, 1, 0, 0b1111, 10)), DeadSource(1, 1), Revive(0)],
        "KindMismatch",
    );
}

// Mutation::ClaimForgetsBlockedCounter, shrunk to 6 steps.
// What: lanes_blocked stayed 1 after a blocked head (kind 3) was claimed again.
// Why: claim skipped unblock_head; only a counter check sees it (invariant 3).
#[test]
fn claim_of_a_blocked_head_unblocks_the_lane_counter() {
    pinned(
        Mutation::ClaimForgetsBlockedCounter,
        &[
            Ingest(h(2, 1, 0, 0b1111, 10)),
            SweepLanes(2, 1, None),
            Claim(0),
            Retry(0, 0),
            Revive(0),
            Claim(0),
        ],
        "LanesBlocked",
    );
}

// Mutation::SweepSkipsRecheck, shrunk to 3 steps.
// What: a member committed between the sweep's read and its delete of the marker was stranded.
// Why: the recheck of ADR 4.6 never put the marker back; only the racing-writer step shows it.
#[test]
fn sweep_recheck_restores_a_racing_writers_marker() {
    pinned(
        Mutation::SweepSkipsRecheck,
        &[
            Ingest(h(2, 2, 0, 0b1111, 10)),
            DeadSource(2, 2),
            SweepLanes(2, 1, Some((At::BeforeBatch, Race::Lane(10)))),
        ],
        "MemberStranded",
    );
}

// Mutation::PromoteKeepsMarker (benign, a control), no failure to pin.
// What: a ?P beside a head; the next sweep deletes it (ADR 4.6).
// Why pinned: the model must not flag a harmless leftover, or it flags noise.
#[test]
fn a_marker_beside_a_head_is_harmless() {
    let steps = [
        Ingest(h(1, 1, 1, 0b1111, 10)),
        SweepLanes(1, 4, None),
        Claim(0),
        Delivered(0, None),
        Dead(0, Why::Permanent),
        SweepLanes(1, 4, None),
    ];
    let _planted = mutation::scoped(Mutation::PromoteKeepsMarker);
    run_memory(&steps).unwrap_or_else(|e| panic!("benign mutation flagged: {e}"));
}

// Found while adding `dead_letter: hold` (ADR 0004 section 8), shrunk to 5
// and 4 steps (machine and equivalence; the paged purge, limit 1).
// What: the model's check wanted every lane head in ?D/?F; a held head is in ?X.
// Why pinned: a held lane must pass the check, the machine and a paged purge.
#[test]
fn a_held_head_stays_its_lanes_head_from_the_dlq() {
    let held = [
        Ingest(h(1, 1, 0, 0b1111, 10)),
        SweepLanes(1, 1, None),
        Ingest(h(1, 1, 0, 0b1111, 10)),
        Claim(0),
        Dead(0, Why::Held),
    ];
    run_memory(&held).unwrap_or_else(|e| panic!("a held lane fails the machine: {e}"));
    let purged = [
        Group(h(1, 1, 0, 0b1111, 10), h(2, 1, 0, 0b1111, 10)),
        SweepLanes(1, 1, None),
        Claim(0),
        Dead(0, Why::Held),
    ];
    crate::purge::purge_after(&purged, 1)
        .unwrap_or_else(|e| panic!("a held lane fails the paged purge: {e}"));
}
