//! The steps of the state machine and their strategy.
//!
//! The key space is small on purpose (2 tenants x 3 keys x 2 sinks, 2 sources)
//! so lanes collide. A step that acts on a row names it by `pick`, an index
//! taken modulo the rows the *store* holds in the right place when the step
//! runs (its precondition: with no such row the step is skipped), so a shrunk
//! sequence still means something.
//!
//! `Debug` is short and valid Rust (with `use Step::*` and `h`, `At`, `Race`,
//! `Why` in scope, as in `regressions.rs`), so a shrunk case pastes straight
//! into a regression test.

use std::fmt;

use proptest::prelude::*;

/// A hook to ingest: tenant (1..=2), source (1..=2), ordering key (0 = none:
/// the keyless lane, 1..=2 a key), per sink whether its row is laned, and a size.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    pub t: u8,
    pub src: u8,
    pub key: u8,
    /// Bit 0: sink 0 gets a row; bit 1: sink 1 gets a row; bit 2: sink 0 is
    /// ordered; bit 3: sink 1 is ordered. At least one of bits 0-1 is set.
    pub sinks: u8,
    pub size: u32,
}

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "h({}, {}, {}, 0b{:04b}, {})",
            self.t, self.src, self.key, self.sinks, self.size
        )
    }
}

/// `h(t, src, key, sinks, size)`: a [`Hook`], short.
pub const fn h(t: u8, src: u8, key: u8, sinks: u8, size: u32) -> Hook {
    Hook {
        t,
        src,
        key,
        sinks,
        size,
    }
}

/// Why a claimed row is dead-lettered (every path ADR 0004 4.4 lists).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Policy,
    Horizon,
    Permanent,
    SinkGone,
    /// A permanent failure of a `dead_letter: hold` entry: a head keeps its
    /// lane held (ADR 0004 section 8).
    Held,
}

/// A writer that commits between two steps of the pipeline's lane work.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Race {
    /// A hook with the tenant, source and key of the lane the pipeline is
    /// working on (both sinks, both ordered), of this size.
    Lane(u32),
    /// Any hook.
    Hook(Hook),
}

impl fmt::Debug for Race {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Race::Lane(size) => write!(f, "Race::Lane({size})"),
            Race::Hook(hk) => write!(f, "Race::Hook({hk:?})"),
        }
    }
}

/// Where a racing writer's commit lands relative to a lane sweep.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// After the sweep read the lane and before its batch commits.
    BeforeBatch,
    /// After the sweep's batch commits and before its recheck reads.
    BeforeRecheck,
}

impl fmt::Debug for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Why::Policy => "Policy",
            Why::Horizon => "Horizon",
            Why::Permanent => "Permanent",
            Why::SinkGone => "SinkGone",
            Why::Held => "Held",
        };
        write!(f, "Why::{name}")
    }
}

impl fmt::Debug for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::BeforeBatch => f.write_str("At::BeforeBatch"),
            At::BeforeRecheck => f.write_str("At::BeforeRecheck"),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The Writer commits a hook.
    Ingest(Hook),
    /// The Writer's group commit: two hooks (consecutive seqs) in one batch.
    Group(Hook, Hook),
    /// The pipeline claims a due row (?D due by now -> ?F).
    Claim(u8),
    /// A claimed row's attempt failed: due again `delay` ms from now.
    Retry(u8, u16),
    /// A breaker park of a due row (not claimed): due again `delay` ms from now.
    Park(u8, u16),
    /// A claimed row was delivered. With a hook, a writer commits it between
    /// the release's read of the next member and the release's write (ADR 4.5).
    Delivered(u8, Option<Race>),
    /// A claimed row is dead-lettered.
    Dead(u8, Why),
    /// A claimed row whose envelope/source is gone: dead-lettered as an orphan.
    Orphan(u8),
    /// The replayer revives a dead letter.
    Revive(u8),
    /// Admin: a dead letter is dropped for good (`queue::drop_dead`).
    DropDead(u8),
    /// Process restart: `recover_inflight`.
    Restart,
    /// The pipeline's lane sweep of a tenant (up to `limit` markers), with an
    /// optional racing writer.
    SweepLanes(u8, u8, Option<(At, Race)>),
    /// The stale ?A sweep of a tenant, with an optional writer committing
    /// between the sweep's read and its batch (its recheck closes that gap).
    SweepMarkers(u8, Option<Race>),
    /// Admin: purge a tenant.
    Purge(u8),
    /// Admin: a source was deleted; dead-letter its rows.
    DeadSource(u8, u8),
    /// The Writer holds a hook back (quarantine: envelope and ?Q, no rows).
    Quarantine(Hook),
    /// The replayer releases a quarantined hook: its rows take the ingest path.
    Release(u8),
    /// Retention of a tenant: envelopes older than `age` ms that no row and
    /// no ?Q references go.
    Retention(u8, u16),
    /// The pipeline holds a due row of a paused sink (docs/design.md section
    /// 5, "Pause"): its ?D key moves to the held band.
    Hold(u8),
    /// A resume of a tenant's held rows, keeping held those of one
    /// `(source, sink)` that is still paused.
    Unhold(u8, Option<(u8, u8)>),
    /// Time passes.
    Advance(u16),
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Step::*;
        match self {
            Ingest(hk) => write!(f, "Ingest({hk:?})"),
            Group(a, b) => write!(f, "Group({a:?}, {b:?})"),
            Claim(p) => write!(f, "Claim({p})"),
            Retry(p, d) => write!(f, "Retry({p}, {d})"),
            Park(p, d) => write!(f, "Park({p}, {d})"),
            Delivered(p, None) => write!(f, "Delivered({p}, None)"),
            Delivered(p, Some(hk)) => write!(f, "Delivered({p}, Some({hk:?}))"),
            Dead(p, w) => write!(f, "Dead({p}, {w:?})"),
            Orphan(p) => write!(f, "Orphan({p})"),
            Revive(p) => write!(f, "Revive({p})"),
            DropDead(p) => write!(f, "DropDead({p})"),
            Restart => write!(f, "Restart"),
            SweepLanes(t, l, None) => write!(f, "SweepLanes({t}, {l}, None)"),
            SweepLanes(t, l, Some((at, hk))) => {
                write!(f, "SweepLanes({t}, {l}, Some(({at:?}, {hk:?})))")
            }
            SweepMarkers(t, None) => write!(f, "SweepMarkers({t}, None)"),
            SweepMarkers(t, Some(r)) => write!(f, "SweepMarkers({t}, Some({r:?}))"),
            Purge(t) => write!(f, "Purge({t})"),
            DeadSource(t, s) => write!(f, "DeadSource({t}, {s})"),
            Quarantine(hk) => write!(f, "Quarantine({hk:?})"),
            Release(p) => write!(f, "Release({p})"),
            Retention(t, age) => write!(f, "Retention({t}, {age})"),
            Hold(p) => write!(f, "Hold({p})"),
            Unhold(t, k) => write!(f, "Unhold({t}, {k:?})"),
            Advance(ms) => write!(f, "Advance({ms})"),
        }
    }
}

pub fn hook() -> impl Strategy<Value = Hook> {
    (
        1..=2u8,
        prop_oneof![4 => Just(1u8), 1 => Just(2u8)],
        0..=2u8,
        // Mostly both sinks, mostly ordered, so lanes fill up.
        prop_oneof![
            6 => Just(0b1111u8),
            2 => Just(0b1011u8),
            2 => Just(0b0111u8),
            1 => Just(0b0011u8),
            1 => Just(0b1010u8),
            1 => Just(0b0101u8),
            1 => Just(0b0001u8),
        ],
        prop_oneof![Just(10u32), Just(100u32), 1..2000u32],
    )
        .prop_map(|(t, src, key, sinks, size)| Hook {
            t,
            src,
            key,
            sinks,
            size,
        })
}

fn why() -> impl Strategy<Value = Why> {
    // A held lane (ADR 0004 section 8) is weighted up: its revive and drop
    // come only after a held head.
    prop_oneof![
        1 => Just(Why::Policy),
        1 => Just(Why::Horizon),
        1 => Just(Why::Permanent),
        1 => Just(Why::SinkGone),
        2 => Just(Why::Held)
    ]
}

fn delay() -> impl Strategy<Value = u16> {
    prop_oneof![Just(0u16), Just(100u16), Just(1000u16), 1..5000u16]
}

fn race() -> impl Strategy<Value = Race> {
    prop_oneof![
        3 => prop_oneof![Just(10u32), 1..2000u32].prop_map(Race::Lane),
        1 => hook().prop_map(Race::Hook),
    ]
}

pub fn step() -> impl Strategy<Value = Step> {
    use Step::*;
    let tenant = || 1..=2u8;
    prop_oneof![
        14 => hook().prop_map(Ingest),
        3 => (hook(), hook()).prop_map(|(a, b)| Group(a, b)),
        14 => any::<u8>().prop_map(Claim),
        5 => (any::<u8>(), delay()).prop_map(|(p, d)| Retry(p, d)),
        2 => (any::<u8>(), delay()).prop_map(|(p, d)| Park(p, d)),
        14 => (any::<u8>(), prop::option::weighted(0.3, race())).prop_map(|(p, hk)| Delivered(p, hk)),
        3 => (any::<u8>(), why()).prop_map(|(p, w)| Dead(p, w)),
        1 => any::<u8>().prop_map(Orphan),
        4 => any::<u8>().prop_map(Revive),
        2 => any::<u8>().prop_map(DropDead),
        2 => Just(Restart),
        6 => (
            tenant(),
            1..=4u8,
            prop::option::weighted(
                0.5,
                (prop_oneof![2 => Just(At::BeforeBatch), 1 => Just(At::BeforeRecheck)], race())
            )
        )
            .prop_map(|(t, l, r)| SweepLanes(t, l, r)),
        3 => (tenant(), prop::option::weighted(0.3, race())).prop_map(|(t, r)| SweepMarkers(t, r)),
        1 => tenant().prop_map(Purge),
        3 => (tenant(), 1..=2u8).prop_map(|(t, s)| DeadSource(t, s)),
        2 => hook().prop_map(Quarantine),
        2 => any::<u8>().prop_map(Release),
        2 => (tenant(), prop_oneof![Just(0u16), 1..10_000u16]).prop_map(|(t, a)| Retention(t, a)),
        4 => prop_oneof![Just(100u16), Just(1000u16), 1..6000u16].prop_map(Advance),
        3 => any::<u8>().prop_map(Hold),
        2 => (tenant(), prop::option::weighted(0.5, (1..=2u8, 0..=1u8))).prop_map(|(t, k)| Unhold(t, k)),
    ]
}

pub fn steps(max: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..=max)
}

/// A shrunk case is pasted back from its `Debug` output: keep it Rust.
#[test]
fn debug_output_is_the_rust_that_builds_the_steps() {
    use Step::*;
    let steps = vec![
        Ingest(h(1, 2, 0, 0b1011, 10)),
        Delivered(3, Some(Race::Lane(7))),
        Dead(0, Why::SinkGone),
        SweepLanes(
            2,
            1,
            Some((At::BeforeBatch, Race::Hook(h(2, 1, 1, 0b1111, 5)))),
        ),
        SweepMarkers(1, None),
        Advance(100),
    ];
    assert_eq!(
        format!("{steps:?}"),
        "[Ingest(h(1, 2, 0, 0b1011, 10)), Delivered(3, Some(Race::Lane(7))), Dead(0, Why::SinkGone), \
         SweepLanes(2, 1, Some((At::BeforeBatch, Race::Hook(h(2, 1, 1, 0b1111, 5))))), SweepMarkers(1, None), Advance(100)]"
    );
}
