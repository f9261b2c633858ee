//! Planted bugs for the model tests: a switch that makes one decision point of
//! `lanes` (or of `queue`, which reads it too) do the wrong thing, so the model
//! tests can prove they catch it.
//!
//! With the cargo feature `mutations` off (the default) [`active`] is a `const
//! fn` that returns `false`: every check folds away and no thread-local exists.
//! With it on, each thread has its own current [`Mutation`] ([`Mutation::None`]
//! until `set` or `scoped` changes it), so parallel tests do not see each
//! other's mutation.
//!
//! Each variant documents which invariant of docs/design.md section 4 (or which
//! ordering property of ADR 0004) it breaks, and how soon a model sees it.

/// A planted bug. Only one is active at a time (per thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// No planted bug: the code as written.
    #[default]
    None,
    /// `release_ops` deletes ?H (lanes −1) without reading or promoting the
    /// lane's next member. Breaks invariant 2 at once when the lane had a member:
    /// an ?O with neither ?H nor ?P (the lane is stranded).
    ReleaseSkipsNextMember,
    /// `promote` forgets to delete the lane's ?P marker. Benign by design: the
    /// next sweep sees the head and deletes the marker (ADR 4.6). A control: a
    /// model run with it must stay green (invariant 2 allows a marker beside a
    /// head), which shows the harness does not flag harmless leftovers.
    PromoteKeepsMarker,
    /// `promote` does not put ?H (but still counts lanes +1 and puts the ?D).
    /// Breaks invariant 2 (a laned row in ?D with no head naming it; members
    /// behind it with no ?H and no ?P) and invariant 3 (lanes != ?H count).
    PromoteSkipsHead,
    /// `queue::claim` of a kind 3 row forgets lanes_blocked −1. Breaks
    /// invariant 3 (lanes_blocked != the count of kind 3 ?D rows).
    ClaimForgetsBlockedCounter,
    /// `member_put` (ingest and revive of a laned row) puts ?O without ?P.
    /// Breaks invariant 2 for a lane without a head (an ?O with no ?H and no ?P).
    MemberPutSkipsMarker,
    /// `queue::dead_letter` / `orphan` of a lane head skip `release_ops`. Breaks
    /// invariants 2 and 3: ?H names a row in ?X that lanes_held does not count
    /// (a held lane no `hold` entry made), and its members wait forever.
    DeadLetterSkipsRelease,
    /// `queue::revive` of a laned row re-enters it as ?D kind 0 instead of a
    /// member + ?P. Breaks invariant 2 when the lane is busy (two rows of one
    /// lane in ?D/?F) and lane order (ADR 4.8).
    ReviveIgnoresLane,
    /// `sweep` deletes a marker whose lane has members and no head instead of
    /// promoting. Breaks invariant 2 (an ?O with no ?H and no ?P).
    SweepDropsLiveMarker,
    /// `sweep_recheck` never puts a marker back. Only visible in the race the
    /// recheck closes (a writer's member committed between the sweep's read and
    /// its delete, ADR 4.6): the loom / racing-writer models catch it, a
    /// sequential model does not.
    SweepSkipsRecheck,
}

impl Mutation {
    /// Every mutation but [`Mutation::None`].
    pub const ALL: [Mutation; 9] = [
        Mutation::ReleaseSkipsNextMember,
        Mutation::PromoteKeepsMarker,
        Mutation::PromoteSkipsHead,
        Mutation::ClaimForgetsBlockedCounter,
        Mutation::MemberPutSkipsMarker,
        Mutation::DeadLetterSkipsRelease,
        Mutation::ReviveIgnoresLane,
        Mutation::SweepDropsLiveMarker,
        Mutation::SweepSkipsRecheck,
    ];

    /// True for the planted bugs that must NOT make a model fail (controls).
    pub const fn is_benign(self) -> bool {
        matches!(self, Mutation::None | Mutation::PromoteKeepsMarker)
    }
}

/// True when `m` is the current thread's mutation. Always `false` without the
/// `mutations` feature.
#[cfg(not(feature = "mutations"))]
#[inline(always)]
pub const fn active(m: Mutation) -> bool {
    let _ = m;
    false
}

#[cfg(feature = "mutations")]
mod switch {
    use super::Mutation;
    use std::cell::Cell;

    thread_local! {
        static CURRENT: Cell<Mutation> = const { Cell::new(Mutation::None) };
    }

    /// True when `m` is the current thread's mutation (never for
    /// [`Mutation::None`]).
    pub fn active(m: Mutation) -> bool {
        m != Mutation::None && CURRENT.with(|c| c.get() == m)
    }

    /// Makes `m` the current thread's mutation until the next `set`.
    pub fn set(m: Mutation) {
        CURRENT.with(|c| c.set(m));
    }

    /// The current thread's mutation.
    pub fn current() -> Mutation {
        CURRENT.with(|c| c.get())
    }

    /// Makes `m` current until the returned guard drops, then restores the
    /// previous one.
    pub fn scoped(m: Mutation) -> Guard {
        let previous = current();
        set(m);
        Guard { previous }
    }

    /// Restores the previous mutation when dropped ([`scoped`]).
    #[derive(Debug)]
    pub struct Guard {
        previous: Mutation,
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            set(self.previous);
        }
    }
}

#[cfg(feature = "mutations")]
pub use switch::{Guard, active, current, scoped, set};
