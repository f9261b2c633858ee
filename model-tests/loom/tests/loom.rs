//! The loom model of ADR 0004 sections 4.5 and 4.6 (see `src/lib.rs` for the
//! command). The store is the memory engine behind a `loom::sync::Mutex`, and
//! every read and every write takes the lock on its own, so loom interleaves a
//! writer's blind commit between any two reads of the pipeline's release and
//! sweep, and between a read and the write built from it. The batches are the
//! real `queue`/`lanes` builders'.
#![cfg(ankusa_loom)]

use std::sync::atomic::{AtomicUsize, Ordering};

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{
    Batch, Bytes, Cf, Direction, Durability, EngineError, KeyRange, KeyValue, Kv, Read,
};
use ankusa_keys::index::{LaneHeadKey, LaneMemberKey};
use ankusa_keys::{
    DueKey, Envelope, Family, LaneHeadValue, Seq, SinkIx, SourceId, TenantOrd, family_range,
};
use ankusa_lanes as lanes;
use ankusa_queue as queue;
use loom::sync::{Arc, Mutex};

const T: TenantOrd = TenantOrd(1);
const SRC: SourceId = SourceId(1);
const SINK: SinkIx = SinkIx(0);
const NOW: u64 = 1_790_000_000_000;

/// The store as loom sees it: one lock acquisition per read and per write.
/// `broken` collects what a check found mid-run; it is asserted after the
/// threads are joined (a panic while a loom thread is alive aborts the
/// process instead of failing the test).
struct Store(Mutex<MemoryKv>, std::sync::Mutex<Vec<String>>);

impl Read for Store {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        self.0.lock().expect("lock").get(cf, key)
    }
    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        self.0.lock().expect("lock").scan(cf, range, dir, limit)
    }
}

impl Store {
    fn new() -> Store {
        let s = Store(
            Mutex::new(MemoryKv::new()),
            std::sync::Mutex::new(Vec::new()),
        );
        s.write(queue::init_store());
        s
    }

    fn write(&self, batch: Batch) {
        self.0
            .lock()
            .expect("lock")
            .write(batch, Durability::Buffered)
            .expect("write");
    }

    /// Commits `batch` and, under the same lock, checks the invariants: a
    /// release keeps them at once, whatever the writer did before or does
    /// after (ADR 4.5). (A sweep's batch alone need not: its recheck closes
    /// the gap, ADR 4.6.)
    fn write_checked(&self, what: &str, batch: Batch) {
        // Assert after the guard drops: a loom guard dropped while a panic
        // unwinds out of the model aborts the process.
        let violations = {
            let kv = self.0.lock().expect("lock");
            kv.write(batch, Durability::Buffered).expect("write");
            queue::check_invariants(&kv.snapshot()).expect("check_invariants")
        };
        if !violations.is_empty() {
            self.1.lock().expect("broken").push(format!(
                "invariants broken right after {what}: {violations:?}"
            ));
        }
    }

    /// The Writer: a hook of the lane (blind puts: ?O + ?P + ?A, row, envelope).
    fn ingest(&self, seq: u64) {
        let envelope = Envelope {
            source: SRC,
            received_at_ms: NOW,
            method: "POST".into(),
            path: "/hooks/s1".into(),
            query: None,
            headers: vec![(b"x-entity-id".to_vec(), b"cus_a".to_vec())],
            body: b"{}".to_vec(),
            dedupe_key: None,
            idempotency_key: u128::from(seq).to_be_bytes(),
            replay_of: None,
        };
        let rows = [queue::NewRow {
            sink: SINK,
            lane: Some(lanes::assign(SINK, SRC, Some(b"cus_a"))),
        }];
        let mut b = Batch::new();
        queue::new_ops(
            &mut b,
            &queue::Hook {
                tenant: T,
                seq: Seq(seq),
                envelope: &envelope,
                dedupe_expires_at_ms: NOW,
            },
            &rows,
            NOW,
        );
        self.write(b);
    }

    /// The pipeline's sweep of the tenant (ADR 4.6): the batch, then the recheck.
    fn sweep(&self) {
        let out = lanes::sweep(self, T, 16, NOW).expect("sweep");
        self.write(out.batch);
        let b = lanes::sweep_recheck(self, T, &out.recheck).expect("sweep_recheck");
        self.write(b);
    }

    /// The pipeline's named sweep of the lane (the Writer named it: docs/design.md
    /// section 5, "Lane sweep"): point reads of its marker, the batch, then
    /// the recheck.
    fn sweep_named(&self) {
        let lane = lanes::assign(SINK, SRC, Some(b"cus_a")).lane;
        let out = lanes::sweep_lanes(self, T, &[lane], NOW).expect("sweep_lanes");
        self.write(out.batch);
        let b = lanes::sweep_recheck(self, T, &out.recheck).expect("sweep_recheck");
        self.write(b);
    }

    /// Claims the one due row there is.
    fn claim_due(&self) -> queue::RowId {
        let (k, _) = self
            .first(Cf::Index, &family_range(Family::Due), Direction::Forward)
            .expect("scan")
            .expect("a due row");
        let due = DueKey::decode(&k).expect("?D key");
        self.write(queue::claim(self, due, NOW).expect("claim"));
        queue::row_id(due.tenant, due.seq, due.sink)
    }

    /// The pipeline: the head was delivered; the release reads the next member
    /// and writes (ADR 4.4, 4.5), then the tenant's sweep runs.
    fn deliver_then_sweep(&self, head: queue::RowId) {
        let b = queue::delivered(self, head, NOW).expect("delivered");
        self.write_checked("the release", b);
        self.sweep();
    }

    /// Everything that must hold once the threads are done and one more sweep
    /// ran: nothing broken mid-run, the invariants, every member behind a head (promoted work), the
    /// head the lowest row of its lane, and `expect` rows left in the lane.
    fn check_settled(&self, expect: usize) {
        let broken = self.1.lock().expect("broken").clone();
        assert!(broken.is_empty(), "{}", broken.join("; "));
        self.sweep();
        // Read under the lock, assert after it (see `write_checked`).
        let (violations, heads, members) = {
            let kv = self.0.lock().expect("lock");
            let snap = kv.snapshot();
            let scan = |f: Family| {
                snap.scan(Cf::Index, &family_range(f), Direction::Forward, 1000)
                    .expect("scan")
            };
            let heads: Vec<(LaneHeadKey, LaneHeadValue)> = scan(Family::LaneHead)
                .iter()
                .map(|(k, v)| {
                    (
                        LaneHeadKey::decode(k).expect("?H"),
                        LaneHeadValue::decode(v).expect("?H value"),
                    )
                })
                .collect();
            let members: Vec<LaneMemberKey> = scan(Family::LaneMember)
                .iter()
                .map(|(k, _)| LaneMemberKey::decode(k).expect("?O"))
                .collect();
            (
                queue::check_invariants(&snap).expect("check_invariants"),
                heads,
                members,
            )
        };
        assert!(violations.is_empty(), "invariants broken: {violations:?}");
        for m in &members {
            let head = heads
                .iter()
                .find(|(k, _)| k.tenant == m.tenant && k.lane == m.lane);
            let Some((_, h)) = head else {
                panic!("member {m:?} was not promoted: its lane has no head after the sweep");
            };
            assert!(
                h.seq < m.seq,
                "head {h:?} is not below member {m:?}: lane out of order"
            );
        }
        assert_eq!(
            heads.len() + members.len(),
            expect,
            "rows left in the lane: heads {heads:?}, members {members:?}"
        );
    }
}

/// Runs `f` under loom (at most `LOOM_MAX_PREEMPTIONS`, default 2) and
/// returns how many interleavings it explored.
fn explore(name: &str, f: impl Fn() + Sync + Send + 'static) -> usize {
    let executions = std::sync::Arc::new(AtomicUsize::new(0));
    let start = std::time::Instant::now();
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    let counter = std::sync::Arc::clone(&executions);
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let n = executions.load(Ordering::Relaxed);
    println!(
        "loom {name}: {n} interleavings explored (preemption bound {:?}) in {:.1?}",
        builder.preemption_bound,
        start.elapsed()
    );
    assert!(
        n > 1,
        "loom explored {n} interleaving(s): the model has no race in it"
    );
    n
}

/// ADR 4.5: the head is delivered while a writer commits the lane's next two
/// members. Whether the release's read sees the member (promote) or not (?H
/// deleted, the member's own ?P left for the sweep), the sweep that follows
/// leaves the member promoted.
fn release_vs_writer_head_only() {
    let store = Arc::new(Store::new());
    store.ingest(1);
    store.sweep();
    let head = store.claim_due();
    let writer = {
        let store = Arc::clone(&store);
        loom::thread::spawn(move || {
            store.ingest(2);
            store.ingest(3);
        })
    };
    store.deliver_then_sweep(head);
    writer.join().expect("writer");
    store.check_settled(2);
}

#[test]
fn release_races_a_writer_on_a_lane_with_only_its_head() {
    explore(
        "release vs writer, lane with only its head",
        release_vs_writer_head_only,
    );
}

/// ADR 4.5 with a member already waiting: the release promotes it, and the
/// writer's later members stay behind it in order.
fn release_vs_writer_with_member() {
    let store = Arc::new(Store::new());
    store.ingest(1);
    store.sweep();
    let head = store.claim_due();
    store.ingest(2);
    // A visit's sweep drops the member's ?P (the lane has a head): from
    // here the member relies on the release alone.
    store.sweep();
    let writer = {
        let store = Arc::clone(&store);
        loom::thread::spawn(move || {
            store.ingest(3);
            store.ingest(4);
        })
    };
    store.deliver_then_sweep(head);
    writer.join().expect("writer");
    store.check_settled(3);
}

#[test]
fn release_races_a_writer_on_a_lane_with_a_member() {
    explore(
        "release vs writer, lane with a member",
        release_vs_writer_with_member,
    );
}

/// ADR 4.6: the sweep finds a marker on an empty lane (its member was
/// dead-lettered with its source), deletes it and rechecks, while a writer
/// commits a new member with its ?P. The recheck (or the writer's own ?P
/// coming after the delete) leaves the member reachable; the next sweep
/// promotes it. `sweep` is the scan of the markers ([`Store::sweep`]) or the
/// sweep of the lane the Writer named ([`Store::sweep_named`]).
fn sweep_vs_writer_empty_lane_with(sweep: fn(&Store)) {
    let store = Arc::new(Store::new());
    store.ingest(1);
    let mut cursor = None;
    loop {
        let page =
            queue::dead_letter_source(&*store, T, SRC, "source deleted", cursor.as_ref(), 100, NOW)
                .expect("dead_letter_source");
        store.write(page.batch);
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    let writer = {
        let store = Arc::clone(&store);
        loom::thread::spawn(move || store.ingest(2))
    };
    sweep(&store);
    writer.join().expect("writer");
    store.check_settled(1);
}

fn sweep_vs_writer_empty_lane() {
    sweep_vs_writer_empty_lane_with(Store::sweep);
}

#[test]
fn sweep_races_a_writer_on_an_empty_lane() {
    explore("sweep vs writer, empty lane", sweep_vs_writer_empty_lane);
}

#[test]
fn named_sweep_races_a_writer_on_an_empty_lane() {
    explore("named sweep vs writer, empty lane", || {
        sweep_vs_writer_empty_lane_with(Store::sweep_named)
    });
}

/// Both races at once, with two writers (the Writer's group commits land in
/// any order relative to each other's and the pipeline's reads): the release
/// of a head with a member behind it, then the sweep, while one writer commits
/// two members and another one more.
fn release_and_sweep_vs_two_writers() {
    let store = Arc::new(Store::new());
    store.ingest(1);
    store.sweep();
    let head = store.claim_due();
    store.ingest(2);
    store.sweep();
    let a = {
        let store = Arc::clone(&store);
        loom::thread::spawn(move || {
            store.ingest(3);
            store.ingest(4);
        })
    };
    let b = {
        let store = Arc::clone(&store);
        loom::thread::spawn(move || store.ingest(5))
    };
    store.deliver_then_sweep(head);
    a.join().expect("writer a");
    b.join().expect("writer b");
    store.check_settled(4);
}

#[test]
fn release_and_sweep_race_two_writers() {
    explore(
        "release + sweep vs two writers",
        release_and_sweep_vs_two_writers,
    );
}

/// The model can fail: with the recheck of ADR 4.6 planted away
/// (`Mutation::SweepSkipsRecheck`, which no sequential model sees), loom
/// finds the interleaving where the sweep deletes the writer's fresh ?P.
/// The mutation is thread-local, and loom runs every modelled thread on
/// this one.
#[test]
fn loom_catches_a_sweep_without_its_recheck() {
    use ankusa_lanes::mutation::{self, Mutation};
    let caught = {
        let _planted = mutation::scoped(Mutation::SweepSkipsRecheck);
        std::panic::catch_unwind(|| {
            explore(
                "sweep vs writer, empty lane, SweepSkipsRecheck planted",
                sweep_vs_writer_empty_lane,
            )
        })
    };
    assert_eq!(mutation::current(), Mutation::None);
    assert!(caught.is_err(), "loom did not catch SweepSkipsRecheck");
    println!("loom caught SweepSkipsRecheck");
}

/// And with the release's read of the next member planted away
/// (`Mutation::ReleaseSkipsNextMember`).
#[test]
fn loom_catches_a_release_that_skips_the_next_member() {
    use ankusa_lanes::mutation::{self, Mutation};
    let caught = {
        let _planted = mutation::scoped(Mutation::ReleaseSkipsNextMember);
        std::panic::catch_unwind(|| {
            explore(
                "release vs writer, ReleaseSkipsNextMember planted",
                release_vs_writer_with_member,
            )
        })
    };
    assert_eq!(mutation::current(), Mutation::None);
    assert!(caught.is_err(), "loom did not catch ReleaseSkipsNextMember");
    println!("loom caught ReleaseSkipsNextMember");
}
