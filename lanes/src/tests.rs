//! Unit tests of the lane builders on the memory engine.

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Cf, Direction, Durability, Kv, Op, Read};
use ankusa_keys::{
    CounterField, DeliveryRow, DueKind, DueValue, Family, LaneHeadValue, LaneId, RowState, Seq,
    SinkIx, SourceId, TenantOrd, active_key, counter_key, delivery_key, due_key, lane_head_key,
    lane_marker_key, lane_member_key, tenant_range,
};

use super::*;

const T: TenantOrd = TenantOrd(3);
const NOW: u64 = 1_000;

fn lane() -> LaneId {
    lane_id(SinkIx(1), SourceId(2), Some(b"cust_42"))
}

fn row(seq: u64) -> RowId {
    RowId::new(T, Seq(seq), SinkIx(1))
}

fn commit(kv: &MemoryKv, batch: Batch) {
    kv.write(batch, Durability::Sync).expect("commit");
}

fn counter(kv: &MemoryKv, tenant: TenantOrd, field: CounterField) -> i64 {
    kv.counter(&counter_key(tenant, field)).expect("counter")
}

/// Puts a member's delivery row and its member put, as ingest does.
fn ingest_member(kv: &MemoryKv, seq: u64, size: u32) {
    ingest_member_in(kv, lane(), Some(b"cust_42"), seq, size);
}

fn keys(kv: &MemoryKv, family: Family) -> Vec<Vec<u8>> {
    kv.scan(Cf::Index, &tenant_range(family, T), Direction::Forward, 100)
        .expect("scan")
        .into_iter()
        .map(|(k, _)| k.to_vec())
        .collect()
}

fn stored_row(kv: &MemoryKv, seq: u64) -> DeliveryRow {
    let raw = kv
        .get(Cf::Deliveries, &delivery_key(T, Seq(seq), SinkIx(1)))
        .expect("get")
        .expect("row");
    DeliveryRow::decode(&raw).expect("decode")
}

fn row_state(kv: &MemoryKv, seq: u64) -> RowState {
    stored_row(kv, seq).state
}

fn lane_seq_of(kv: &MemoryKv, lane: LaneId) -> Option<u64> {
    kv.get(Cf::Index, &ankusa_keys::lane_seq_key(T, lane))
        .expect("get")
        .map(|v| ankusa_keys::LaneSeqValue::decode(&v).expect("decode").last)
}

/// Delivers the head `seq` of `lane` as `queue::delivered` does for the lane's
/// part: the release (promoting the next member), then the head's ?D and row
/// deleted.
fn deliver_head(kv: &MemoryKv, lane: LaneId, seq: u64) {
    let mut b = Batch::new();
    release_ops(kv, &mut b, row(seq), lane, NOW).expect("release");
    b.delete(Cf::Index, due_key(T, NOW, Seq(seq), SinkIx(1)));
    b.delete(Cf::Deliveries, delivery_key(T, Seq(seq), SinkIx(1)));
    commit(kv, b);
}

#[test]
fn lane_id_matches_the_adr_formula() {
    // Vectors from Python: sha256(pack('>HI', sink, source) + bytes([0, flag]) + key)[:16].
    assert_eq!(lane().to_hex(), "f8e6310c54bacd251dd45fbba470b271");
    assert_eq!(
        lane_id(SinkIx(1), SourceId(2), None).to_hex(),
        "4f6de867c24682cee05db95d48e1ea47"
    );
    // An empty key is no key: the keyless lane (flag 1), not flag 0 with "".
    assert_eq!(
        lane_id(SinkIx(0), SourceId(7), Some(b"")),
        lane_id(SinkIx(0), SourceId(7), None)
    );
    assert_ne!(
        lane_id(SinkIx(0), SourceId(7), Some(b"")).to_hex(),
        "7552cd181d05589b9253ef612787c901"
    );
    // Sink and source are in the hash.
    assert_ne!(lane(), lane_id(SinkIx(2), SourceId(2), Some(b"cust_42")));
    assert_ne!(lane(), lane_id(SinkIx(1), SourceId(3), Some(b"cust_42")));
}

#[test]
fn normalize_key_hashes_long_keys_and_drops_empty_ones() {
    assert_eq!(normalize_key(b""), None);
    assert_eq!(normalize_key(b"abc"), Some(b"abc".to_vec()));
    let max = vec![b'y'; 128];
    assert_eq!(normalize_key(&max), Some(max.clone()));
    let long = vec![b'x'; 129];
    let hashed = normalize_key(&long).expect("some");
    assert_eq!(
        hashed,
        b"sha256:0ec9eb33e74510bcdd1f2ea55206e82f21649c5c2becbf2b433eb475b34c01bd".to_vec()
    );
    // Idempotent, and the long key and its normal form share a lane.
    assert_eq!(normalize_key(&hashed), Some(hashed.clone()));
    assert_eq!(
        lane_id(SinkIx(1), SourceId(2), Some(&long)),
        lane_id(SinkIx(1), SourceId(2), Some(&hashed))
    );
    let a = assign(SinkIx(1), SourceId(2), Some(&long));
    assert_eq!(a.ordering_key, Some(hashed));
    assert_eq!(assign(SinkIx(1), SourceId(2), Some(b"")).ordering_key, None);
}

#[test]
fn count_moves_tenant_and_aggregate() {
    let mut b = Batch::new();
    count(&mut b, T, CounterField::Lanes, -2);
    count(&mut b, T, CounterField::Lanes, 0);
    assert_eq!(
        b.ops(),
        &[
            Op::CounterAdd {
                key: counter_key(T, CounterField::Lanes).to_vec(),
                delta: -2
            },
            Op::CounterAdd {
                key: counter_key(TenantOrd::NODE, CounterField::Lanes).to_vec(),
                delta: -2
            },
        ]
    );
}

#[test]
fn member_put_is_blind_puts_of_member_marker_active() {
    let mut b = Batch::new();
    member_put(&mut b, row(7), lane(), 42);
    assert_eq!(
        b.ops(),
        &[
            Op::Put {
                cf: Cf::Index,
                key: lane_member_key(T, lane(), Seq(7), SinkIx(1)).to_vec(),
                value: 42u32.to_be_bytes().to_vec(),
            },
            Op::Put {
                cf: Cf::Index,
                key: lane_marker_key(T, lane()).to_vec(),
                value: vec![]
            },
            Op::Put {
                cf: Cf::Index,
                key: active_key(T).to_vec(),
                value: vec![]
            },
            Op::CounterAdd {
                key: counter_key(T, CounterField::LaneMembers).to_vec(),
                delta: 1
            },
            Op::CounterAdd {
                key: counter_key(TenantOrd::NODE, CounterField::LaneMembers).to_vec(),
                delta: 1
            },
        ]
    );
}

/// ADR 0004 section 6, "The lane sequence": each row gets the next position
/// of its lane when it is first promoted (by the sweep or by the release of
/// the head before it), the positions outlive the lane's ?H and ?P, and a
/// row that has one keeps it when promoted again (a revived dead letter).
#[test]
fn promotion_gives_each_row_the_next_lane_position_once() {
    let kv = MemoryKv::new();
    let other = lane_id(SinkIx(1), SourceId(2), Some(b"cust_7"));
    for seq in [5, 9, 12] {
        ingest_member(&kv, seq, 10);
    }
    ingest_member_in(&kv, other, Some(b"cust_7"), 6, 10);
    assert_eq!(lane_seq_of(&kv, lane()), None);
    let out = sweep(&kv, T, 16, NOW).expect("sweep");
    assert_eq!(out.promoted, 2);
    commit(&kv, out.batch);
    assert_eq!(stored_row(&kv, 5).lane_seq, Some(1));
    assert_eq!(
        stored_row(&kv, 6).lane_seq,
        Some(1),
        "each lane counts alone"
    );
    assert_eq!(stored_row(&kv, 9).lane_seq, None, "a member has none yet");
    deliver_head(&kv, lane(), 5);
    assert_eq!(stored_row(&kv, 9).lane_seq, Some(2));
    deliver_head(&kv, lane(), 9);
    assert_eq!(stored_row(&kv, 12).lane_seq, Some(3));
    deliver_head(&kv, lane(), 12);
    // The lane is idle: no ?H, no ?P, but its ?S stays.
    assert_eq!(
        kv.get(Cf::Index, &lane_head_key(T, lane())).expect("get"),
        None
    );
    assert_eq!(lane_seq_of(&kv, lane()), Some(3));
    assert_eq!(lane_seq_of(&kv, other), Some(1));

    // The key comes back: the next hook continues at 4.
    ingest_member(&kv, 20, 10);
    commit(&kv, sweep(&kv, T, 16, NOW).expect("sweep").batch);
    assert_eq!(stored_row(&kv, 20).lane_seq, Some(4));
    deliver_head(&kv, lane(), 20);

    // A row that already has a position (a revived dead letter) keeps it
    // and the lane gives out nothing.
    let mut b = Batch::new();
    let mut revived = stored_row(&kv, 6);
    revived.state = RowState::Member;
    revived.lane = Some(lane());
    revived.lane_seq = Some(2);
    b.put(
        Cf::Deliveries,
        delivery_key(T, Seq(30), SinkIx(1)),
        revived.encode(),
    );
    member_put(&mut b, row(30), lane(), 10);
    commit(&kv, b);
    commit(&kv, sweep(&kv, T, 16, NOW).expect("sweep").batch);
    assert_eq!(stored_row(&kv, 30).lane_seq, Some(2));
    assert_eq!(lane_seq_of(&kv, lane()), Some(4));
}

#[test]
fn sweep_promotes_the_lowest_member_then_drops_markers_of_busy_lanes() {
    let kv = MemoryKv::new();
    ingest_member(&kv, 5, 10);
    ingest_member(&kv, 9, 20);
    let out = sweep(&kv, T, 16, NOW).expect("sweep");
    assert_eq!((out.markers, out.promoted), (1, 1));
    assert!(out.recheck.is_empty());
    commit(&kv, out.batch);

    let head_raw = kv
        .get(Cf::Index, &lane_head_key(T, lane()))
        .expect("get")
        .expect("head");
    assert_eq!(
        LaneHeadValue::decode(&head_raw).expect("decode"),
        LaneHeadValue {
            seq: Seq(5),
            sink: SinkIx(1)
        }
    );
    let due = kv
        .get(Cf::Index, &due_key(T, NOW, Seq(5), SinkIx(1)))
        .expect("get")
        .expect("due");
    assert_eq!(
        DueValue::decode(&due).expect("decode"),
        DueValue {
            size: 10,
            kind: DueKind::HeadFirst
        }
    );
    assert_eq!(row_state(&kv, 5), RowState::Due);
    assert_eq!(row_state(&kv, 9), RowState::Member);
    assert_eq!(
        keys(&kv, Family::LaneMember),
        vec![lane_member_key(T, lane(), Seq(9), SinkIx(1)).to_vec()]
    );
    assert!(keys(&kv, Family::LaneMarker).is_empty());
    assert_eq!(counter(&kv, T, CounterField::LaneMembers), 1);
    assert_eq!(counter(&kv, T, CounterField::Lanes), 1);
    assert_eq!(counter(&kv, TenantOrd::NODE, CounterField::Lanes), 1);

    // A new member arrives: its ?P, then a sweep sees the head and deletes it.
    ingest_member(&kv, 11, 30);
    let out = sweep(&kv, T, 16, NOW).expect("sweep");
    assert_eq!((out.markers, out.promoted), (1, 0));
    commit(&kv, out.batch);
    assert!(keys(&kv, Family::LaneMarker).is_empty());
    assert_eq!(keys(&kv, Family::LaneMember).len(), 2);
}

/// Puts a member of `lane` with `ordering_key` (row and member put), as
/// ingest does.
fn ingest_member_in(kv: &MemoryKv, lane: LaneId, ordering_key: Option<&[u8]>, seq: u64, size: u32) {
    let mut b = Batch::new();
    let r = DeliveryRow {
        state: RowState::Member,
        size,
        attempts: 0,
        first_attempt_at_ms: None,
        last_error: None,
        lane: Some(lane),
        ordering_key: ordering_key.map(<[u8]>::to_vec),
        lane_seq: None,
        logged_attempts: 0,
    };
    b.put(
        Cf::Deliveries,
        delivery_key(T, Seq(seq), SinkIx(1)),
        r.encode(),
    );
    member_put(&mut b, row(seq), lane, size);
    commit(kv, b);
}

#[test]
fn sweep_lanes_builds_the_scans_batch_for_the_marked_lanes_it_is_named() {
    let kv = MemoryKv::new();
    let key_lane = |k: &[u8]| lane_id(SinkIx(1), SourceId(2), Some(k));
    let (promote, busy, empty, unmarked) = (
        key_lane(b"promote"),
        key_lane(b"busy"),
        key_lane(b"empty"),
        key_lane(b"unmarked"),
    );
    // busy and unmarked: a head (promoted by a sweep), then busy gets a new
    // member and its marker; unmarked keeps none.
    ingest_member_in(&kv, busy, None, 1, 10);
    ingest_member_in(&kv, unmarked, None, 2, 10);
    commit(&kv, sweep(&kv, T, 16, NOW).expect("sweep").batch);
    ingest_member_in(&kv, busy, None, 3, 10);
    // promote: two members, no head.
    ingest_member_in(&kv, promote, None, 4, 10);
    ingest_member_in(&kv, promote, None, 5, 10);
    // empty: a marker and nothing else.
    let mut b = Batch::new();
    b.put(
        Cf::Index,
        lane_marker_key(T, empty),
        ankusa_keys::EMPTY_VALUE,
    );
    commit(&kv, b);

    let scanned = sweep(&kv, T, 16, NOW).expect("sweep");
    assert_eq!((scanned.markers, scanned.promoted), (3, 1));
    assert_eq!(scanned.recheck, vec![empty]);
    // Named in any order, with repeats and a lane without a marker: the
    // same batch, the same outcome.
    let named =
        sweep_lanes(&kv, T, &[unmarked, empty, promote, busy, promote], NOW).expect("sweep_lanes");
    assert_eq!(named, scanned);
    // Named one lane: only that lane's step.
    let one = sweep_lanes(&kv, T, &[promote], NOW).expect("sweep_lanes");
    assert_eq!((one.markers, one.promoted), (1, 1));
    assert!(one.recheck.is_empty());
    commit(&kv, one.batch);
    assert_eq!(head(&kv, T, promote).expect("head"), Some(row(4)));
    assert_eq!(row_state(&kv, 5), RowState::Member);
    // Nothing named, nothing read.
    let none = sweep_lanes(&kv, T, &[], NOW).expect("sweep_lanes");
    assert_eq!(none, SweepOutcome::default());
}

#[test]
fn release_promotes_the_next_member_or_frees_the_lane() {
    let kv = MemoryKv::new();
    ingest_member(&kv, 5, 10);
    ingest_member(&kv, 9, 20);
    commit(&kv, sweep(&kv, T, 16, NOW).expect("sweep").batch);

    // Release of head 5: 9 becomes head, lanes stays 1.
    let mut b = Batch::new();
    release_ops(&kv, &mut b, row(5), lane(), NOW + 1).expect("release");
    commit(&kv, b);
    assert_eq!(head(&kv, T, lane()).expect("head"), Some(row(9)));
    assert_eq!(counter(&kv, T, CounterField::Lanes), 1);
    assert_eq!(counter(&kv, T, CounterField::LaneMembers), 0);
    assert!(
        kv.get(Cf::Index, &due_key(T, NOW + 1, Seq(9), SinkIx(1)))
            .expect("get")
            .is_some()
    );

    // Release of head 9 with nothing behind it: ?H goes, lanes 0.
    let mut b = Batch::new();
    release_ops(&kv, &mut b, row(9), lane(), NOW + 2).expect("release");
    assert_eq!(
        b.ops(),
        &[
            Op::Delete {
                cf: Cf::Index,
                key: lane_head_key(T, lane()).to_vec()
            },
            Op::CounterAdd {
                key: counter_key(T, CounterField::Lanes).to_vec(),
                delta: -1
            },
            Op::CounterAdd {
                key: counter_key(TenantOrd::NODE, CounterField::Lanes).to_vec(),
                delta: -1
            },
        ]
    );
    commit(&kv, b);
    assert_eq!(head(&kv, T, lane()).expect("head"), None);
    assert_eq!(counter(&kv, T, CounterField::Lanes), 0);
}

#[test]
fn sweep_recheck_puts_back_a_marker_a_racing_writer_needed() {
    let kv = MemoryKv::new();
    // A stale marker: no head, no member.
    let mut b = Batch::new();
    b.put(Cf::Index, lane_marker_key(T, lane()), EMPTY_VALUE);
    commit(&kv, b);
    let out = sweep(&kv, T, 16, NOW).expect("sweep");
    assert_eq!(out.recheck, vec![lane()]);
    // The writer commits a member (and its ?P) before the sweep's delete lands.
    ingest_member(&kv, 4, 8);
    commit(&kv, out.batch);
    assert!(
        keys(&kv, Family::LaneMarker).is_empty(),
        "the sweep deleted the writer's marker"
    );
    let again = sweep_recheck(&kv, T, &[lane()]).expect("recheck");
    commit(&kv, again);
    assert_eq!(
        keys(&kv, Family::LaneMarker),
        vec![lane_marker_key(T, lane()).to_vec()]
    );
    // Without a member the recheck writes nothing.
    let other = lane_id(SinkIx(9), SourceId(9), None);
    assert!(sweep_recheck(&kv, T, &[other]).expect("recheck").is_empty());
}

#[test]
fn promote_of_a_member_without_row_is_an_error() {
    let kv = MemoryKv::new();
    let mut b = Batch::new();
    member_put(&mut b, row(5), lane(), 10);
    commit(&kv, b);
    let err = sweep(&kv, T, 16, NOW).expect_err("no row");
    assert!(matches!(err, LaneError::MissingRow { row: r } if r == row(5)));
}

#[test]
fn purge_ops_range_deletes_the_four_lane_families() {
    let kv = MemoryKv::new();
    ingest_member(&kv, 5, 10);
    ingest_member(&kv, 6, 10);
    commit(&kv, sweep(&kv, T, 16, NOW).expect("sweep").batch);
    assert_eq!(keys(&kv, Family::LaneSeq).len(), 1);
    let mut b = Batch::new();
    purge_ops(&mut b, T);
    assert_eq!(b.len(), 4);
    commit(&kv, b);
    for f in LANE_FAMILIES {
        assert!(keys(&kv, f).is_empty(), "{f:?} survived the purge");
    }
}

#[test]
fn remove_member_deletes_one_member() {
    let kv = MemoryKv::new();
    ingest_member(&kv, 5, 10);
    let m = first_member(&kv, T, lane()).expect("read").expect("member");
    assert_eq!(m.row(), row(5));
    assert_eq!(m.size, 10);
    let mut b = Batch::new();
    remove_member(&mut b, &m);
    commit(&kv, b);
    assert_eq!(first_member(&kv, T, lane()).expect("read"), None);
    assert_eq!(counter(&kv, T, CounterField::LaneMembers), 0);
    assert_eq!(counter(&kv, TenantOrd::NODE, CounterField::LaneMembers), 0);
}

#[cfg(not(feature = "mutations"))]
#[test]
fn mutations_are_off_without_the_feature() {
    for m in mutation::Mutation::ALL {
        assert!(!mutation::active(m));
    }
}

#[cfg(feature = "mutations")]
#[test]
fn a_scoped_mutation_is_active_on_this_thread_only() {
    use mutation::Mutation;
    {
        let _g = mutation::scoped(Mutation::ReleaseSkipsNextMember);
        assert!(mutation::active(Mutation::ReleaseSkipsNextMember));
        assert!(!mutation::active(Mutation::PromoteSkipsHead));
        let other = std::thread::spawn(|| mutation::active(Mutation::ReleaseSkipsNextMember))
            .join()
            .expect("join");
        assert!(!other);
    }
    assert_eq!(mutation::current(), Mutation::None);
}

#[test]
fn busy_lanes_lists_the_lanes_with_a_head_or_a_marker_up_to_a_limit() {
    let kv = MemoryKv::new();
    let key_lane = |k: &[u8]| lane_id(SinkIx(1), SourceId(2), Some(k));
    let (headed, marked, other_tenant) = (key_lane(b"headed"), key_lane(b"marked"), key_lane(b"x"));
    assert_eq!(
        busy_lanes(&kv, T, 8).expect("read"),
        Some(Default::default())
    );
    // headed: a member promoted to head (its marker deleted by the sweep);
    // marked: a member with its marker, not swept yet.
    ingest_member_in(&kv, headed, None, 1, 10);
    commit(&kv, sweep(&kv, T, 16, NOW).expect("sweep").batch);
    ingest_member_in(&kv, marked, None, 2, 10);
    // Another tenant's lane is not listed.
    let mut b = Batch::new();
    b.put(
        Cf::Index,
        lane_marker_key(TenantOrd(T.0 + 1), other_tenant),
        ankusa_keys::EMPTY_VALUE,
    );
    commit(&kv, b);
    assert_eq!(keys(&kv, Family::LaneHead).len(), 1);
    assert_eq!(
        busy_lanes(&kv, T, 8).expect("read"),
        Some([headed, marked].into_iter().collect())
    );
    assert_eq!(
        busy_lanes(&kv, T, 2).expect("read"),
        Some([headed, marked].into_iter().collect())
    );
    assert_eq!(
        busy_lanes(&kv, T, 1).expect("read"),
        None,
        "more than the limit"
    );
}
