//! Unit tests of the queue builders on the memory engine: for each transition
//! the exact counter deltas and index keys after commit, and a clean
//! [`check_invariants`].

use std::collections::BTreeMap;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Cf, Direction, Durability, Kv, Read};
use ankusa_keys::{
    CounterField, DeadLetterValue, DedupeValue, DeliveryRow, DueKey, DueKind, DueValue, Envelope,
    Family, InFlightValue, LaneId, RowState, Seq, SinkIx, SourceId, TenantOrd, active_key,
    archive_key, counter_key, dead_letter_key, dedupe_key, delivery_key, due_key, hook_key,
    in_flight_key, lane_head_key, lane_marker_key, lane_member_key, quarantined_key, sentinels,
    tenant_range,
};
use ankusa_lanes::{LaneAssignment, assign};

use super::*;

const T1: TenantOrd = TenantOrd(1);
const T2: TenantOrd = TenantOrd(2);
const SRC: SourceId = SourceId(10);
const NOW: u64 = 1_000_000;
const S0: SinkIx = SinkIx(0);
const S1: SinkIx = SinkIx(1);

use CounterField as F;

fn store() -> MemoryKv {
    let kv = MemoryKv::new();
    commit(&kv, init_store());
    kv
}

fn commit(kv: &MemoryKv, batch: Batch) {
    kv.write(batch, Durability::Sync).expect("commit");
}

fn envelope(source: SourceId, body: &str, dedupe: Option<&str>) -> Envelope {
    Envelope {
        source,
        received_at_ms: NOW - 10,
        method: "POST".into(),
        path: "/hooks/x".into(),
        query: None,
        headers: vec![(b"x-entity-id".to_vec(), b"cust_1".to_vec())],
        body: body.as_bytes().to_vec(),
        dedupe_key: dedupe.map(|d| d.as_bytes().to_vec()),
        idempotency_key: [7; 16],
        replay_of: None,
    }
}

fn laned(sink: SinkIx, key: &str) -> NewRow {
    NewRow {
        sink,
        lane: Some(assign(sink, SRC, Some(key.as_bytes()))),
    }
}

fn plain(sink: SinkIx) -> NewRow {
    NewRow { sink, lane: None }
}

fn lane_of(sink: SinkIx, key: &str) -> LaneId {
    ankusa_lanes::lane_id(sink, SRC, Some(key.as_bytes()))
}

/// Ingests hook `seq` of `tenant` from `source` with `rows`; returns its size.
fn ingest_from(
    kv: &MemoryKv,
    tenant: TenantOrd,
    seq: u64,
    source: SourceId,
    rows: &[NewRow],
) -> u32 {
    let env = envelope(source, &format!("body {seq}"), None);
    let mut b = Batch::new();
    new_ops(
        &mut b,
        &Hook {
            tenant,
            seq: Seq(seq),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        rows,
        NOW,
    );
    commit(kv, b);
    hook_size(&env)
}

fn ingest(kv: &MemoryKv, tenant: TenantOrd, seq: u64, rows: &[NewRow]) -> u32 {
    ingest_from(kv, tenant, seq, SRC, rows)
}

fn counters(kv: &MemoryKv, tenant: TenantOrd) -> BTreeMap<CounterField, i64> {
    CounterField::ALL
        .into_iter()
        .map(|f| (f, kv.counter(&counter_key(tenant, f)).expect("counter")))
        .filter(|(_, v)| *v != 0)
        .collect()
}

/// `after - before`, only the fields that moved.
fn delta(
    before: &BTreeMap<CounterField, i64>,
    after: &BTreeMap<CounterField, i64>,
) -> BTreeMap<CounterField, i64> {
    CounterField::ALL
        .into_iter()
        .map(|f| {
            (
                f,
                after.get(&f).copied().unwrap_or(0) - before.get(&f).copied().unwrap_or(0),
            )
        })
        .filter(|(_, d)| *d != 0)
        .collect()
}

fn map(pairs: &[(CounterField, i64)]) -> BTreeMap<CounterField, i64> {
    pairs.iter().copied().collect()
}

/// Commits `batch` and returns the counter deltas of `tenant`, checking that
/// the aggregate moved by the same amounts (one tenant touched).
fn commit_delta(kv: &MemoryKv, tenant: TenantOrd, batch: Batch) -> BTreeMap<CounterField, i64> {
    let (b, bn) = (counters(kv, tenant), counters(kv, TenantOrd::NODE));
    commit(kv, batch);
    let d = delta(&b, &counters(kv, tenant));
    assert_eq!(
        d,
        delta(&bn, &counters(kv, TenantOrd::NODE)),
        "aggregate moved differently"
    );
    d
}

fn keys(kv: &MemoryKv, family: Family, tenant: TenantOrd) -> Vec<Vec<u8>> {
    kv.scan(
        Cf::Index,
        &tenant_range(family, tenant),
        Direction::Forward,
        1000,
    )
    .expect("scan")
    .into_iter()
    .map(|(k, _)| k.to_vec())
    .collect()
}

fn row(kv: &MemoryKv, id: RowId) -> Option<DeliveryRow> {
    kv.get(Cf::Deliveries, &delivery_key(id.tenant, id.seq, id.sink))
        .expect("get")
        .map(|raw| DeliveryRow::decode(&raw).expect("decode"))
}

fn due_value(kv: &MemoryKv, tenant: TenantOrd, due_ms: u64, id: RowId) -> Option<DueValue> {
    kv.get(Cf::Index, &due_key(tenant, due_ms, id.seq, id.sink))
        .expect("get")
        .map(|v| DueValue::decode(&v).expect("decode"))
}

fn head_of(kv: &MemoryKv, tenant: TenantOrd, lane: LaneId) -> Option<RowId> {
    ankusa_lanes::head(kv, tenant, lane).expect("head")
}

fn clean(kv: &MemoryKv) {
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert!(v.is_empty(), "violations: {v:#?}");
}

fn dk(tenant: TenantOrd, due_ms: u64, seq: u64, sink: SinkIx) -> DueKey {
    DueKey {
        tenant,
        due_ms,
        seq: Seq(seq),
        sink,
    }
}

fn id(tenant: TenantOrd, seq: u64, sink: SinkIx) -> RowId {
    RowId::new(tenant, Seq(seq), sink)
}

/// Runs the lane sweep of `tenant` and commits it.
fn sweep(kv: &MemoryKv, tenant: TenantOrd, now: u64) -> usize {
    let out = ankusa_lanes::sweep(kv, tenant, 64, now).expect("sweep");
    commit(kv, out.batch);
    commit(
        kv,
        ankusa_lanes::sweep_recheck(kv, tenant, &out.recheck).expect("recheck"),
    );
    out.promoted
}

// ---- init, ingest -----------------------------------------------------------

#[test]
fn init_store_writes_sentinels_and_the_format() {
    let kv = store();
    for (cf, key) in sentinels() {
        assert!(
            kv.get(cf, &key).expect("get").is_some(),
            "sentinel {cf:?} missing"
        );
    }
    let raw = kv
        .get(Cf::Meta, ankusa_keys::FORMAT_KEY)
        .expect("get")
        .expect("format");
    assert_eq!(ankusa_keys::meta::decode_format(&raw).expect("decode"), 2);
    clean(&kv);
}

#[test]
fn ingest_of_unordered_sinks_puts_rows_due_now_with_the_active_marker() {
    let kv = store();
    let env = envelope(SRC, "hello", Some("evt_1"));
    let size = hook_size(&env);
    assert_eq!(size as usize, env.encode().len());
    let mut b = Batch::new();
    new_ops(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(1),
            envelope: &env,
            dedupe_expires_at_ms: NOW + 5,
        },
        &[plain(S0), plain(S1)],
        NOW,
    );
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d, map(&[(F::Pending, 2), (F::Bytes, 2 * i64::from(size))]));
    assert_eq!(
        keys(&kv, Family::Due, T1),
        vec![
            due_key(T1, NOW, Seq(1), S0).to_vec(),
            due_key(T1, NOW, Seq(1), S1).to_vec()
        ]
    );
    assert_eq!(
        due_value(&kv, T1, NOW, id(T1, 1, S0)),
        Some(DueValue {
            size,
            kind: DueKind::First
        })
    );
    assert_eq!(keys(&kv, Family::Active, T1), vec![active_key(T1).to_vec()]);
    assert!(keys(&kv, Family::LaneMember, T1).is_empty());
    let r = row(&kv, id(T1, 1, S1)).expect("row");
    assert_eq!(
        (r.state, r.size, r.attempts, r.lane),
        (RowState::Due, size, 0, None)
    );
    assert_eq!(
        Envelope::decode(
            &kv.get(Cf::Hooks, &hook_key(T1, Seq(1)))
                .expect("get")
                .expect("env")
        )
        .expect("decode"),
        env
    );
    assert!(
        kv.get(Cf::Archive, &archive_key(T1, NOW - 10, Seq(1)))
            .expect("get")
            .is_some()
    );
    let dd = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt_1"))
        .expect("get")
        .expect("dedupe");
    assert_eq!(
        ankusa_keys::DedupeValue::decode(&dd).expect("decode"),
        ankusa_keys::DedupeValue {
            seq: Seq(1),
            expires_at_ms: NOW + 5
        }
    );
    clean(&kv);
}

#[test]
fn ingest_of_an_ordered_sink_makes_a_member_with_its_marker_and_no_due_row() {
    let kv = store();
    let env = envelope(SRC, "x", None);
    let mut b = Batch::new();
    new_ops(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(1),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        &[laned(S0, "cust_1"), plain(S1)],
        NOW,
    );
    let size = i64::from(hook_size(&env));
    let d = commit_delta(&kv, T1, b);
    assert_eq!(
        d,
        map(&[(F::Pending, 2), (F::Bytes, 2 * size), (F::LaneMembers, 1)])
    );
    let lane = lane_of(S0, "cust_1");
    assert_eq!(
        keys(&kv, Family::LaneMember, T1),
        vec![lane_member_key(T1, lane, Seq(1), S0).to_vec()]
    );
    assert_eq!(
        keys(&kv, Family::LaneMarker, T1),
        vec![lane_marker_key(T1, lane).to_vec()]
    );
    assert_eq!(
        keys(&kv, Family::Due, T1),
        vec![due_key(T1, NOW, Seq(1), S1).to_vec()]
    );
    assert!(keys(&kv, Family::LaneHead, T1).is_empty());
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(r.state, RowState::Member);
    assert_eq!(r.lane, Some(lane));
    assert_eq!(r.ordering_key, Some(b"cust_1".to_vec()));
    clean(&kv);
}

#[test]
fn keyless_rows_share_the_sinks_keyless_lane_and_run_in_seq_order() {
    let kv = store();
    let keyless = || NewRow {
        sink: S0,
        lane: Some(assign(S0, SRC, None)),
    };
    let empty = NewRow {
        sink: S0,
        lane: Some(assign(S0, SRC, Some(b""))),
    };
    assert_eq!(keyless(), empty);
    let lane = ankusa_lanes::lane_id(S0, SRC, None);
    // Two hooks in one batch, as the Writer's group commit builds them.
    let (e1, e2) = (envelope(SRC, "a", None), envelope(SRC, "b", None));
    let mut b = Batch::new();
    for (seq, env) in [(1, &e1), (2, &e2)] {
        new_ops(
            &mut b,
            &Hook {
                tenant: T1,
                seq: Seq(seq),
                envelope: env,
                dedupe_expires_at_ms: NOW,
            },
            &[keyless()],
            NOW,
        );
    }
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d.get(&F::LaneMembers), Some(&2));
    assert_eq!(row(&kv, id(T1, 1, S0)).expect("row").ordering_key, None);
    assert_eq!(row(&kv, id(T1, 2, S0)).expect("row").lane, Some(lane));
    assert_eq!(sweep(&kv, T1, NOW), 1);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        delivered(&kv, id(T1, 1, S0), NOW + 1).expect("delivered"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    clean(&kv);
}

// ---- claim, retry, park, delivered --------------------------------------------

#[test]
fn claim_moves_due_to_in_flight_and_stamps_the_first_attempt() {
    let kv = store();
    let size = ingest(&kv, T1, 1, &[plain(S0)]);
    let d = commit_delta(
        &kv,
        T1,
        claim(&kv, dk(T1, NOW, 1, S0), NOW + 3).expect("claim"),
    );
    assert_eq!(d, map(&[(F::InFlight, 1)]));
    assert!(keys(&kv, Family::Due, T1).is_empty());
    let fv = kv
        .get(Cf::Index, &in_flight_key(T1, Seq(1), S0))
        .expect("get")
        .expect("?F");
    assert_eq!(
        InFlightValue::decode(&fv).expect("decode"),
        InFlightValue {
            size,
            kind: DueKind::First,
            claimed_at_ms: NOW + 3
        }
    );
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.first_attempt_at_ms),
        (RowState::InFlight, Some(NOW + 3))
    );
    clean(&kv);
    // A second claim of the same ?D key is refused.
    let err = claim(&kv, dk(T1, NOW, 1, S0), NOW + 4).expect_err("not due");
    assert!(matches!(
        err,
        QueueError::NotInState {
            expected: "due",
            ..
        }
    ));
}

#[test]
fn retry_counts_an_attempt_and_keeps_the_first_attempt_time() {
    let kv = store();
    let size = ingest(&kv, T1, 1, &[plain(S0)]);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    let d = commit_delta(
        &kv,
        T1,
        retry(&kv, id(T1, 1, S0), NOW + 500, "503", NOW + 1).expect("retry"),
    );
    assert_eq!(d, map(&[(F::InFlight, -1), (F::RetriesTotal, 1)]));
    assert_eq!(
        due_value(&kv, T1, NOW + 500, id(T1, 1, S0)),
        Some(DueValue {
            size,
            kind: DueKind::Retry
        })
    );
    assert!(keys(&kv, Family::InFlight, T1).is_empty());
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.first_attempt_at_ms),
        (RowState::Due, 1, Some(NOW))
    );
    assert_eq!(r.last_error.as_deref(), Some("503"));
    clean(&kv);
    // The second claim keeps first_attempt_at.
    commit(
        &kv,
        claim(&kv, dk(T1, NOW + 500, 1, S0), NOW + 600).expect("claim"),
    );
    assert_eq!(
        row(&kv, id(T1, 1, S0)).expect("row").first_attempt_at_ms,
        Some(NOW)
    );
    let err = retry(&kv, id(T1, 2, S0), NOW + 700, "x", NOW + 600).expect_err("no row");
    assert!(matches!(
        err,
        QueueError::NotInState {
            expected: "in flight",
            ..
        }
    ));
}

#[test]
fn kind_2_and_3_claim_retry_and_park_move_lanes_blocked() {
    let kv = store();
    let lane = lane_of(S0, "k");
    let size = ingest(&kv, T1, 1, &[laned(S0, "k")]);
    assert_eq!(sweep(&kv, T1, NOW), 1);
    let head = id(T1, 1, S0);
    assert_eq!(
        due_value(&kv, T1, NOW, head),
        Some(DueValue {
            size,
            kind: DueKind::HeadFirst
        })
    );

    // Claim of kind 2: in_flight +1 only.
    let d = commit_delta(&kv, T1, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    assert_eq!(d, map(&[(F::InFlight, 1)]));
    // Retry of the head: kind 3, lanes_blocked +1.
    let d = commit_delta(
        &kv,
        T1,
        retry(&kv, head, NOW + 10, "boom", NOW).expect("retry"),
    );
    assert_eq!(
        d,
        map(&[
            (F::InFlight, -1),
            (F::RetriesTotal, 1),
            (F::LanesBlocked, 1)
        ])
    );
    assert_eq!(
        due_value(&kv, T1, NOW + 10, head),
        Some(DueValue {
            size,
            kind: DueKind::HeadRetry
        })
    );
    assert_eq!(head_of(&kv, T1, lane), Some(head));
    clean(&kv);
    // Claim of kind 3: lanes_blocked −1.
    let d = commit_delta(
        &kv,
        T1,
        claim(&kv, dk(T1, NOW + 10, 1, S0), NOW + 10).expect("claim"),
    );
    assert_eq!(d, map(&[(F::InFlight, 1), (F::LanesBlocked, -1)]));
    let fv = kv
        .get(Cf::Index, &in_flight_key(T1, Seq(1), S0))
        .expect("get")
        .expect("?F");
    assert_eq!(
        InFlightValue::decode(&fv).expect("decode").kind,
        DueKind::HeadRetry
    );
    clean(&kv);
    // A retry of the head again, then a park of the due head (a breaker open
    // when the visit meets it): it stays kind 3, lanes_blocked unchanged, no
    // attempt and no retry counted, nothing claimed.
    commit(
        &kv,
        retry(&kv, head, NOW + 12, "boom", NOW + 11).expect("retry"),
    );
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), Some(&1));
    let d = commit_delta(
        &kv,
        T1,
        park(&kv, dk(T1, NOW + 12, 1, S0), NOW + 20, NOW + 12).expect("park"),
    );
    assert_eq!(d, map(&[]));
    assert_eq!(
        due_value(&kv, T1, NOW + 20, head),
        Some(DueValue {
            size,
            kind: DueKind::HeadRetry
        })
    );
    assert_eq!(due_value(&kv, T1, NOW + 12, head), None);
    let r = row(&kv, head).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.last_error.as_deref()),
        (RowState::Due, 2, Some("boom"))
    );
    assert_eq!(r.first_attempt_at_ms, Some(NOW));
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), Some(&1));
    assert_eq!(head_of(&kv, T1, lane), Some(head));
    clean(&kv);
}

#[test]
fn park_of_an_unordered_row_counts_nothing_and_claims_nothing() {
    let kv = store();
    let size = ingest(&kv, T1, 1, &[plain(S0)]);
    let d = commit_delta(
        &kv,
        T1,
        park(&kv, dk(T1, NOW, 1, S0), NOW + 9, NOW).expect("park"),
    );
    assert_eq!(d, map(&[]));
    assert_eq!(
        due_value(&kv, T1, NOW + 9, id(T1, 1, S0)),
        Some(DueValue {
            size,
            kind: DueKind::Retry
        })
    );
    assert!(keys(&kv, Family::InFlight, T1).is_empty());
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.first_attempt_at_ms),
        (RowState::Due, 0, None)
    );
    clean(&kv);
    // A park of a ?D key that is not there is refused.
    let err = park(&kv, dk(T1, NOW, 1, S0), NOW + 9, NOW).expect_err("not due");
    assert!(matches!(
        err,
        QueueError::NotInState {
            expected: "due",
            ..
        }
    ));
}

/// A row claimed only to be parked by an open breaker once got its
/// first_attempt_at at that claim, so a breaker open longer than the retry
/// horizon dead-lettered a hook the sink never saw. A park claims nothing: the
/// horizon starts at the first real attempt, however often and long the row was
/// parked.
#[test]
fn a_parked_row_starts_its_horizon_at_its_first_real_attempt() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    assert_eq!(sweep(&kv, T1, NOW), 1);
    let (plain_row, head) = (id(T1, 1, S0), id(T1, 2, S0));
    // Parked three times, for much longer than any horizon.
    let mut at = NOW;
    for until in [NOW + 60_000, NOW + 3_600_000, NOW + 90_000_000] {
        commit(&kv, park(&kv, dk(T1, at, 1, S0), until, at).expect("park"));
        commit(&kv, park(&kv, dk(T1, at, 2, S0), until, at).expect("park"));
        at = until;
        for r in [plain_row, head] {
            let r = row(&kv, r).expect("row");
            assert_eq!(
                (r.state, r.attempts, r.first_attempt_at_ms),
                (RowState::Due, 0, None)
            );
        }
        clean(&kv);
    }
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), Some(&1));
    // The first real attempt stamps the horizon's start.
    commit(&kv, claim(&kv, dk(T1, at, 1, S0), at + 5).expect("claim"));
    commit(&kv, claim(&kv, dk(T1, at, 2, S0), at + 5).expect("claim"));
    for r in [plain_row, head] {
        let r = row(&kv, r).expect("row");
        assert_eq!(
            (r.state, r.attempts, r.first_attempt_at_ms),
            (RowState::InFlight, 0, Some(at + 5))
        );
    }
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), None);
    clean(&kv);
}

#[test]
fn delivered_deletes_the_row_and_keeps_the_envelope() {
    let kv = store();
    let size = i64::from(ingest(&kv, T1, 1, &[plain(S0), plain(S1)]));
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    let d = commit_delta(
        &kv,
        T1,
        delivered(&kv, id(T1, 1, S0), NOW + 1).expect("delivered"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Pending, -1),
            (F::Bytes, -size),
            (F::InFlight, -1),
            (F::DeliveredTotal, 1)
        ])
    );
    assert_eq!(row(&kv, id(T1, 1, S0)), None);
    assert!(keys(&kv, Family::InFlight, T1).is_empty());
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(1)))
            .expect("get")
            .is_some()
    );
    assert_eq!(
        counters(&kv, T1),
        map(&[(F::Pending, 1), (F::Bytes, size), (F::DeliveredTotal, 1)])
    );
    clean(&kv);
    let err = delivered(&kv, id(T1, 1, S0), NOW + 2).expect_err("gone");
    assert!(matches!(err, QueueError::NotInState { .. }));
}

#[test]
fn delivered_head_hands_the_lane_to_the_next_member_in_seq_order() {
    let kv = store();
    let lane = lane_of(S0, "k");
    let size = i64::from(ingest(&kv, T1, 1, &[laned(S0, "k")]));
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    ingest(&kv, T1, 3, &[laned(S0, "k")]);
    assert_eq!(sweep(&kv, T1, NOW), 1);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    assert_eq!(counters(&kv, T1).get(&F::LaneMembers), Some(&2));
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    clean(&kv);

    let d = commit_delta(
        &kv,
        T1,
        delivered(&kv, id(T1, 1, S0), NOW + 5).expect("delivered"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Pending, -1),
            (F::Bytes, -size),
            (F::InFlight, -1),
            (F::DeliveredTotal, 1),
            (F::LaneMembers, -1)
        ])
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert_eq!(
        due_value(&kv, T1, NOW + 5, id(T1, 2, S0)).map(|v| v.kind),
        Some(DueKind::HeadFirst)
    );
    assert_eq!(
        keys(&kv, Family::LaneMember, T1),
        vec![lane_member_key(T1, lane, Seq(3), S0).to_vec()]
    );
    assert_eq!(row(&kv, id(T1, 2, S0)).expect("row").state, RowState::Due);
    assert_eq!(counters(&kv, T1).get(&F::Lanes), Some(&1));
    clean(&kv);

    // Drain: 2 then 3, then the lane is free.
    for (seq, at) in [(2, NOW + 5), (3, NOW + 6)] {
        commit(&kv, claim(&kv, dk(T1, at, seq, S0), at).expect("claim"));
        commit(
            &kv,
            delivered(&kv, id(T1, seq, S0), at + 1).expect("delivered"),
        );
        clean(&kv);
    }
    assert_eq!(head_of(&kv, T1, lane), None);
    assert_eq!(counters(&kv, T1), map(&[(F::DeliveredTotal, 3)]));
    assert!(keys(&kv, Family::LaneHead, T1).is_empty());
}

// ---- dead letter, orphan, revive --------------------------------------------------

#[test]
fn a_dead_head_releases_its_lane_to_the_next_member() {
    let kv = store();
    let lane = lane_of(S0, "k");
    let size = i64::from(ingest(&kv, T1, 1, &[laned(S0, "k")]));
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    let b = dead_letter(
        &kv,
        id(T1, 1, S0),
        Origin::InFlight,
        "permanent: 400",
        NOW + 7,
    )
    .expect("dead");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(
        d,
        map(&[
            (F::Pending, -1),
            (F::Bytes, -size),
            (F::InFlight, -1),
            (F::Dead, 1),
            (F::DeadBytes, size),
            (F::DeadLetteredTotal, 1),
            (F::LaneMembers, -1),
        ])
    );
    let x = kv
        .get(Cf::Index, &dead_letter_key(T1, Seq(1), S0))
        .expect("get")
        .expect("?X");
    assert_eq!(
        DeadLetterValue::decode(&x).expect("decode"),
        DeadLetterValue {
            dead_at_ms: NOW + 7,
            reason: "permanent: 400".into()
        }
    );
    assert_eq!(row(&kv, id(T1, 1, S0)).expect("row").state, RowState::Dead);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert_eq!(
        due_value(&kv, T1, NOW + 7, id(T1, 2, S0)).map(|v| v.kind),
        Some(DueKind::HeadFirst)
    );
    clean(&kv);
}

#[test]
fn dead_letter_of_a_blocked_head_from_due_unblocks_and_frees_the_lane() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 50, "x", NOW).expect("retry"),
    );
    let b = dead_letter(
        &kv,
        id(T1, 1, S0),
        Origin::Due { due_ms: NOW + 50 },
        "source gone",
        NOW + 1,
    )
    .expect("dead");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d.get(&F::LanesBlocked), Some(&-1));
    assert_eq!(d.get(&F::Lanes), Some(&-1));
    assert_eq!(d.get(&F::InFlight), None);
    assert_eq!(head_of(&kv, T1, lane), None);
    assert!(keys(&kv, Family::Due, T1).is_empty());
    clean(&kv);
    // Wrong origin is refused.
    let err = dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "x", NOW).expect_err("not in ?F");
    assert!(matches!(err, QueueError::NotInState { .. }));
}

#[test]
fn revive_puts_an_unordered_row_back_due_now_and_refuses_a_second_revive() {
    let kv = store();
    let size = i64::from(ingest(&kv, T1, 1, &[plain(S0)]));
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 1, "x", NOW).expect("retry"),
    );
    commit(
        &kv,
        claim(&kv, dk(T1, NOW + 1, 1, S0), NOW + 1).expect("claim"),
    );
    commit(
        &kv,
        dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "horizon", NOW + 2).expect("dead"),
    );
    let d = commit_delta(
        &kv,
        T1,
        revive(&kv, id(T1, 1, S0), NOW + 100).expect("revive"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Dead, -1),
            (F::DeadBytes, -size),
            (F::Pending, 1),
            (F::Bytes, size)
        ])
    );
    assert_eq!(
        due_value(&kv, T1, NOW + 100, id(T1, 1, S0)),
        Some(DueValue {
            size: size as u32,
            kind: DueKind::First
        })
    );
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.first_attempt_at_ms),
        (RowState::Due, 0, None)
    );
    assert!(keys(&kv, Family::DeadLetter, T1).is_empty());
    clean(&kv);
    let err = revive(&kv, id(T1, 1, S0), NOW + 101).expect_err("not in DLQ");
    assert!(matches!(err, QueueError::NotInDlq { row } if row == id(T1, 1, S0)));
    assert_eq!(err.to_string(), "row 1/1/0 is not in the DLQ");
}

#[test]
fn revive_of_a_laned_row_lands_after_the_current_head() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    ingest(&kv, T1, 3, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "poison", NOW).expect("dead"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));

    let size = i64::from(row(&kv, id(T1, 1, S0)).expect("row").size);
    let d = commit_delta(
        &kv,
        T1,
        revive(&kv, id(T1, 1, S0), NOW + 1).expect("revive"),
    );
    assert_eq!(
        d,
        map(&[
            (F::Dead, -1),
            (F::DeadBytes, -size),
            (F::Pending, 1),
            (F::Bytes, size),
            (F::LaneMembers, 1)
        ])
    );
    // A member, not a second row in ?D beside the head.
    assert_eq!(
        row(&kv, id(T1, 1, S0)).expect("row").state,
        RowState::Member
    );
    assert_eq!(keys(&kv, Family::Due, T1).len(), 1);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert_eq!(
        keys(&kv, Family::LaneMarker, T1),
        vec![lane_marker_key(T1, lane).to_vec()]
    );
    clean(&kv);
    // The sweep sees the head and only drops the marker.
    assert_eq!(sweep(&kv, T1, NOW + 1), 0);
    clean(&kv);
    // Head 2 delivered: the revived 1 (lowest seq) goes before 3.
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S0), NOW + 2).expect("claim"));
    commit(
        &kv,
        delivered(&kv, id(T1, 2, S0), NOW + 3).expect("delivered"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    assert_eq!(
        keys(&kv, Family::LaneMember, T1),
        vec![lane_member_key(T1, lane, Seq(3), S0).to_vec()]
    );
    clean(&kv);
}

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

// ---- recovery, markers -----------------------------------------------------------

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

#[test]
fn sweep_markers_keeps_active_while_due_or_lane_work_exists() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    // ?D present: nothing to do.
    assert!(sweep_markers(&kv, T1).expect("sweep").is_empty());
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    // Only ?F: the marker goes.
    let b = sweep_markers(&kv, T1).expect("sweep");
    assert_eq!(
        b.ops(),
        &[ankusa_engine::Op::Delete {
            cf: Cf::Index,
            key: active_key(T1).to_vec()
        }]
    );
    commit(&kv, b);
    assert!(keys(&kv, Family::Active, T1).is_empty());
    assert!(sweep_markers_recheck(&kv, T1).expect("recheck").is_empty());
    clean(&kv);
    // A ?P alone keeps it (a member waiting for its promote).
    ingest(&kv, T1, 2, &[laned(S1, "k")]);
    assert!(sweep_markers(&kv, T1).expect("sweep").is_empty());
    // A writer's ?D racing a delete: the recheck puts ?A back.
    let mut b = Batch::new();
    b.delete(Cf::Index, active_key(T1));
    commit(&kv, b);
    commit(&kv, sweep_markers_recheck(&kv, T1).expect("recheck"));
    assert_eq!(keys(&kv, Family::Active, T1), vec![active_key(T1).to_vec()]);
    clean(&kv);
}

// ---- quarantine -------------------------------------------------------------------

#[test]
fn quarantine_holds_the_hook_and_release_builds_its_rows() {
    let kv = store();
    let env = envelope(SRC, "q", Some("evt_q"));
    let size = i64::from(hook_size(&env));
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(4),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        "schema",
    );
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d, map(&[(F::Quarantined, 1)]));
    assert!(
        kv.get(Cf::Index, &quarantined_key(T1, Seq(4)))
            .expect("get")
            .is_some()
    );
    // A quarantined hook takes no part in dedupe: no ?K for its dedupe key.
    assert!(
        kv.get(Cf::Index, &dedupe_key(T1, SRC, b"evt_q"))
            .expect("get")
            .is_none()
    );
    assert!(row(&kv, id(T1, 4, S0)).is_none());
    clean(&kv);

    let b = release(&kv, T1, Seq(4), &[plain(S0), laned(S1, "k")], NOW + 1).expect("release");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(
        d,
        map(&[
            (F::Quarantined, -1),
            (F::Pending, 2),
            (F::Bytes, 2 * size),
            (F::LaneMembers, 1)
        ])
    );
    assert_eq!(
        due_value(&kv, T1, NOW + 1, id(T1, 4, S0)).map(|v| v.size as i64),
        Some(size)
    );
    assert_eq!(
        row(&kv, id(T1, 4, S1)).expect("row").state,
        RowState::Member
    );
    clean(&kv);
    let err = release(&kv, T1, Seq(4), &[plain(S0)], NOW).expect_err("released");
    assert!(matches!(
        err,
        QueueError::NotQuarantined {
            tenant: T1,
            seq: Seq(4)
        }
    ));
}

// ---- purge, deleted source, retention -------------------------------------------------

#[test]
fn purge_tenant_removes_every_family_and_counter_and_fixes_the_aggregate() {
    let kv = store();
    // Tenant 1: a busy lane with a blocked head and members, an unordered row, a
    // dead row, a quarantined hook, a dedupe record.
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k"), plain(S1)]);
    ingest(&kv, T1, 3, &[laned(S0, "j")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 5, "x", NOW).expect("retry"),
    );
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S1), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 2, S1), Origin::InFlight, "x", NOW).expect("dead"),
    );
    let env = envelope(SRC, "q", Some("evt"));
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(9),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        "r",
    );
    commit(&kv, b);
    // Tenant 2: one unordered row.
    ingest(&kv, T2, 5, &[plain(S0)]);
    clean(&kv);
    let c1 = counters(&kv, T1);
    assert_eq!(c1.get(&F::Lanes), Some(&2));
    assert_eq!(c1.get(&F::LanesBlocked), Some(&1));
    assert_eq!(c1.get(&F::LaneMembers), Some(&1));

    commit(&kv, purge_tenant(&kv, T1).expect("purge"));
    for family in Family::ALL {
        assert!(
            keys(&kv, family, T1).is_empty(),
            "{family:?} of tenant 1 survived"
        );
    }
    for (cf, range) in ankusa_keys::tenant_ranges(T1) {
        assert!(
            kv.scan(cf, &range, Direction::Forward, 1)
                .expect("scan")
                .is_empty(),
            "{cf:?}"
        );
    }
    assert!(counters(&kv, T1).is_empty());
    assert_eq!(counters(&kv, TenantOrd::NODE), counters(&kv, T2));
    assert_eq!(keys(&kv, Family::Due, T2).len(), 1);
    // Sentinels survive.
    for (cf, key) in sentinels() {
        assert!(kv.get(cf, &key).expect("get").is_some());
    }
    clean(&kv);
}

#[test]
fn dead_letter_source_dead_letters_members_then_heads_lane_by_lane() {
    let kv = store();
    let gone = SourceId(66);
    let lane = ankusa_lanes::lane_id(S0, gone, Some(b"k"));
    let row_of = |sink| NewRow {
        sink,
        lane: Some(LaneAssignment {
            lane,
            ordering_key: Some(b"k".to_vec()),
        }),
    };
    ingest_from(&kv, T1, 1, gone, &[row_of(S0), plain(S1)]);
    ingest_from(&kv, T1, 2, gone, &[row_of(S0)]);
    ingest_from(&kv, T1, 3, gone, &[row_of(S0)]);
    ingest(&kv, T1, 4, &[laned(S0, "k"), plain(S1)]); // another source: untouched
    sweep(&kv, T1, NOW);
    // The gone source's head is blocked (kind 3).
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 5, "x", NOW).expect("retry"),
    );
    clean(&kv);

    let mut cursor = None;
    let mut calls = 0;
    let mut moved = 0;
    loop {
        let p = dead_letter_source(&kv, T1, gone, "source deleted", cursor.as_ref(), 1, NOW + 9)
            .expect("dls");
        moved += p.moved;
        commit(&kv, p.batch);
        clean(&kv);
        calls += 1;
        match p.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(calls < 20, "no progress");
    }
    assert_eq!(moved, 4);
    for (seq, sink) in [(1, S0), (1, S1), (2, S0), (3, S0)] {
        assert_eq!(
            row(&kv, id(T1, seq, sink)).expect("row").state,
            RowState::Dead,
            "{seq}/{sink}"
        );
    }
    assert_eq!(head_of(&kv, T1, lane), None);
    let c = counters(&kv, T1);
    assert_eq!(c.get(&F::Dead), Some(&4));
    assert_eq!(c.get(&F::LanesBlocked), None);
    // Source 10's rows: its lane is busy and its unordered row due.
    assert_eq!(head_of(&kv, T1, lane_of(S0, "k")), Some(id(T1, 4, S0)));
    assert_eq!(row(&kv, id(T1, 4, S1)).expect("row").state, RowState::Due);
    assert_eq!(c.get(&F::Pending), Some(&2));
    assert_eq!(c.get(&F::Lanes), Some(&1));
}

#[test]
fn retention_deletes_only_unreferenced_envelopes_before_the_cutoff() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]); // delivered below
    ingest(&kv, T1, 2, &[plain(S0)]); // still pending
    let env = envelope(SRC, "q", None);
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(3),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        "r",
    );
    commit(&kv, b);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(&kv, delivered(&kv, id(T1, 1, S0), NOW).expect("delivered"));

    // Nothing is older than a cutoff at receive time.
    let p = retention(&kv, T1, NOW - 10, None, 10).expect("retention");
    assert_eq!(
        (p.moved, p.batch.is_empty(), p.next.is_none()),
        (0, true, true)
    );

    let mut cursor = None;
    let mut moved = 0;
    loop {
        let p = retention(&kv, T1, NOW, cursor.as_ref(), 1).expect("retention");
        moved += p.moved;
        commit(&kv, p.batch);
        match p.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(moved, 1);
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(1)))
            .expect("get")
            .is_none()
    );
    assert!(
        kv.get(Cf::Archive, &archive_key(T1, NOW - 10, Seq(1)))
            .expect("get")
            .is_none()
    );
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(2)))
            .expect("get")
            .is_some()
    );
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(3)))
            .expect("get")
            .is_some()
    );
    clean(&kv);
}

/// A hook no sink's filter took (docs/design.md section 10, "Filters per
/// sink"): the edge passes no row. Its envelope, archive entry and dedupe
/// record are committed, no counter moves but none is wrong, and retention
/// deletes it like a delivered hook. A release with no row only ends the
/// quarantine.
#[test]
fn a_hook_with_no_row_is_stored_deduped_and_reclaimed_by_retention() {
    let kv = store();
    ingest_dedupe(&kv, 1, "evt_filtered", &[]);
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(1)))
            .expect("get")
            .is_some()
    );
    assert!(
        kv.get(Cf::Archive, &archive_key(T1, NOW - 10, Seq(1)))
            .expect("get")
            .is_some()
    );
    let d = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt_filtered"))
        .expect("get")
        .expect("?K");
    assert_eq!(DedupeValue::decode(&d).expect("decode").seq, Seq(1));
    assert!(
        counters(&kv, T1).values().all(|v| *v == 0),
        "{:?}",
        counters(&kv, T1)
    );
    assert!(
        keys(&kv, Family::Active, T1).is_empty(),
        "no ?A without a due row"
    );
    clean(&kv);

    let env = envelope(SRC, "q", None);
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(2),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        "r",
    );
    commit(&kv, b);
    let d = commit_delta(
        &kv,
        T1,
        release(&kv, T1, Seq(2), &[], NOW).expect("release"),
    );
    assert_eq!(d, map(&[(F::Quarantined, -1)]));
    clean(&kv);

    let p = retention(&kv, T1, NOW, None, 10).expect("retention");
    assert_eq!(p.moved, 2);
    commit(&kv, p.batch);
    for seq in [1, 2] {
        assert!(
            kv.get(Cf::Hooks, &hook_key(T1, Seq(seq)))
                .expect("get")
                .is_none()
        );
        assert!(
            kv.get(Cf::Archive, &archive_key(T1, NOW - 10, Seq(seq)))
                .expect("get")
                .is_none()
        );
    }
    clean(&kv);
}

// ---- drop_dead --------------------------------------------------------------------

/// Ingests hook `seq` of T1 (with dedupe key `dedupe`) with `rows`; returns its size.
fn ingest_dedupe(kv: &MemoryKv, seq: u64, dedupe: &str, rows: &[NewRow]) -> u32 {
    let env = envelope(SRC, &format!("body {seq}"), Some(dedupe));
    let mut b = Batch::new();
    new_ops(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(seq),
            envelope: &env,
            dedupe_expires_at_ms: NOW + 1_000,
        },
        rows,
        NOW,
    );
    commit(kv, b);
    hook_size(&env)
}

/// Claims T1's unordered row (seq, sink), due at NOW, and dead-letters it.
fn kill(kv: &MemoryKv, seq: u64, sink: SinkIx) {
    commit(kv, claim(kv, dk(T1, NOW, seq, sink), NOW).expect("claim"));
    commit(
        kv,
        dead_letter(kv, id(T1, seq, sink), Origin::InFlight, "HTTP 400", NOW).expect("dead"),
    );
}

fn has(kv: &MemoryKv, cf: Cf, key: &[u8]) -> bool {
    kv.get(cf, key).expect("get").is_some()
}

#[test]
fn drop_dead_of_a_hooks_last_row_deletes_the_row_its_envelope_archive_and_dedupe_record() {
    let kv = store();
    let size = i64::from(ingest_dedupe(&kv, 1, "evt_1", &[plain(S0)]));
    kill(&kv, 1, S0);
    clean(&kv);
    let d = commit_delta(&kv, T1, drop_dead(&kv, &[id(T1, 1, S0)]).expect("drop"));
    assert_eq!(d, map(&[(F::Dead, -1), (F::DeadBytes, -size)]));
    assert!(keys(&kv, Family::DeadLetter, T1).is_empty());
    assert!(row(&kv, id(T1, 1, S0)).is_none());
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(!has(&kv, Cf::Archive, &archive_key(T1, NOW - 10, Seq(1))));
    assert!(!has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    clean(&kv);
    // Gone: a second drop, and a revive, are refused and build nothing.
    let err = drop_dead(&kv, &[id(T1, 1, S0)]).expect_err("not in the DLQ");
    assert!(matches!(err, QueueError::NotInDlq { row } if row == id(T1, 1, S0)));
    assert!(matches!(
        revive(&kv, id(T1, 1, S0), NOW),
        Err(QueueError::NotInDlq { .. })
    ));
}

#[test]
fn drop_dead_keeps_the_envelope_while_another_row_of_the_hook_is_left() {
    let kv = store();
    let size = i64::from(ingest_dedupe(&kv, 1, "evt_1", &[plain(S0), plain(S1)]));
    kill(&kv, 1, S0);
    let d = commit_delta(&kv, T1, drop_dead(&kv, &[id(T1, 1, S0)]).expect("drop"));
    assert_eq!(d, map(&[(F::Dead, -1), (F::DeadBytes, -size)]));
    // Row S1 is still due: its envelope, archive entry and dedupe record stay.
    assert!(has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(has(&kv, Cf::Archive, &archive_key(T1, NOW - 10, Seq(1))));
    assert!(has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    assert_eq!(row(&kv, id(T1, 1, S1)).expect("row").state, RowState::Due);
    clean(&kv);
    // S1 dies too and is dropped: now the hook goes.
    kill(&kv, 1, S1);
    commit(&kv, drop_dead(&kv, &[id(T1, 1, S1)]).expect("drop"));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(!has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    assert_eq!(counters(&kv, T1).get(&F::Dead), None);
    clean(&kv);
}

#[test]
fn drop_dead_of_every_row_of_a_hook_in_one_batch_deletes_the_hook_once() {
    let kv = store();
    let size = i64::from(ingest_dedupe(&kv, 1, "evt_1", &[plain(S0), plain(S1)]));
    ingest(&kv, T1, 2, &[plain(S0)]);
    kill(&kv, 1, S0);
    kill(&kv, 1, S1);
    kill(&kv, 2, S0);
    // Both rows of hook 1 (one given twice), not hook 2's.
    let b = drop_dead(&kv, &[id(T1, 1, S1), id(T1, 1, S0), id(T1, 1, S1)]).expect("drop");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d, map(&[(F::Dead, -2), (F::DeadBytes, -2 * size)]));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(!has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    assert!(has(&kv, Cf::Hooks, &hook_key(T1, Seq(2))));
    assert_eq!(
        keys(&kv, Family::DeadLetter, T1),
        vec![dead_letter_key(T1, Seq(2), S0).to_vec()]
    );
    clean(&kv);
}

#[test]
fn drop_dead_refuses_a_batch_with_a_row_not_in_the_dlq_and_builds_nothing() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[plain(S0)]);
    kill(&kv, 1, S0);
    let err = drop_dead(&kv, &[id(T1, 1, S0), id(T1, 2, S0)]).expect_err("row 2 is due");
    assert!(matches!(err, QueueError::NotInDlq { row } if row == id(T1, 2, S0)));
    assert_eq!(keys(&kv, Family::DeadLetter, T1).len(), 1);
    clean(&kv);
}

#[test]
fn drop_dead_leaves_a_dedupe_record_that_names_a_later_hook() {
    let kv = store();
    ingest_dedupe(&kv, 1, "evt_1", &[plain(S0)]);
    kill(&kv, 1, S0);
    // The record expired and the provider's id came again as hook 2.
    ingest_dedupe(&kv, 2, "evt_1", &[plain(S0)]);
    commit(&kv, drop_dead(&kv, &[id(T1, 1, S0)]).expect("drop"));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    let v = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt_1"))
        .expect("get")
        .expect("record");
    assert_eq!(DedupeValue::decode(&v).expect("decode").seq, Seq(2));
    clean(&kv);
}

#[test]
fn drop_dead_of_a_dead_lane_head_leaves_the_lane_to_its_next_member() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 1, S0), Origin::InFlight, "gone", NOW).expect("dead"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    let before = counters(&kv, T1);
    commit(&kv, drop_dead(&kv, &[id(T1, 1, S0)]).expect("drop"));
    let d = delta(&before, &counters(&kv, T1));
    assert_eq!(
        d.keys().copied().collect::<Vec<_>>(),
        vec![F::Dead, F::DeadBytes]
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    clean(&kv);
}

// ---- the checker -------------------------------------------------------------------

#[test]
fn check_invariants_reports_every_planted_inconsistency() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    ingest(&kv, T1, 3, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    clean(&kv);

    let mut bad = Batch::new();
    // 4: ?D without ?A.
    bad.delete(Cf::Index, active_key(T1));
    // 2: the lane's member loses its marker... and the head: ?H names nothing live.
    bad.put(
        Cf::Index,
        lane_head_key(T1, lane),
        ankusa_keys::LaneHeadValue {
            seq: Seq(77),
            sink: S0,
        }
        .encode(),
    );
    // 1: row 1/1/0 also in ?X.
    bad.put(
        Cf::Index,
        dead_letter_key(T1, Seq(1), S0),
        DeadLetterValue {
            dead_at_ms: 1,
            reason: String::new(),
        }
        .encode(),
    );
    // 3: a counter off by 5 (tenant and therefore not the aggregate).
    bad.counter_add(counter_key(T1, F::Pending).to_vec(), 5);
    // 5: a row without envelope, in no place.
    bad.put(
        Cf::Deliveries,
        delivery_key(T1, Seq(50), S0),
        DeliveryRow {
            state: RowState::Due,
            size: 1,
            attempts: 0,
            first_attempt_at_ms: None,
            last_error: None,
            lane: None,
            ordering_key: None,
        }
        .encode(),
    );
    // Undecodable: a ?P with a value.
    bad.put(
        Cf::Index,
        lane_marker_key(T1, ankusa_lanes::lane_id(S1, SRC, None)),
        vec![1],
    );
    commit(&kv, bad);

    let v = check_invariants(&kv.snapshot()).expect("check");
    let expect = [
        Violation::DueWithoutActive { tenant: T1 },
        Violation::HeadNotLive {
            tenant: T1,
            lane,
            head: id(T1, 77, S0),
        },
        Violation::LiveRowNotHead {
            row: id(T1, 2, S0),
            lane,
        },
        Violation::RowInManyPlaces {
            row: id(T1, 1, S0),
            places: vec![RowState::Due, RowState::Dead],
        },
        Violation::RowUnplaced {
            row: id(T1, 50, S0),
            state: RowState::Due,
        },
        Violation::EnvelopeMissing {
            row: id(T1, 50, S0),
        },
        Violation::CounterMismatch {
            tenant: T1,
            field: F::Pending,
            stored: 8,
            expected: 3,
        },
        Violation::CounterMismatch {
            tenant: T1,
            field: F::Dead,
            stored: 0,
            expected: 1,
        },
        Violation::CounterMismatch {
            tenant: T1,
            field: F::DeadBytes,
            stored: 0,
            expected: i64::from(row(&kv, id(T1, 1, S0)).expect("row").size),
        },
        Violation::CounterMismatch {
            tenant: TenantOrd::NODE,
            field: F::Pending,
            stored: 3,
            expected: 8,
        },
    ];
    for e in &expect {
        assert!(v.contains(e), "missing {e:?} in {v:#?}");
    }
    assert!(
        v.iter()
            .any(|x| matches!(x, Violation::Undecodable { cf: Cf::Index, .. })),
        "no undecodable marker in {v:#?}"
    );
    // Member 3 still has ?H (a wrong one), so it is not stranded; nothing else.
    assert_eq!(v.len(), expect.len() + 1, "{v:#?}");
}

/// `check_store` (what `ankusa store check` runs): the census counts keys, not
/// counters; a drift of a tenant's keyed counter, of a tenant's `_total` field
/// and of the aggregate each get the value the keys call for, and the batch
/// of the fixes leaves a clean store whatever the counters held.
#[test]
fn check_store_counts_the_keys_and_fixes_every_drifted_counter() {
    let kv = store();
    let s1 = ingest(&kv, T1, 1, &[plain(S0), laned(S1, "k")]);
    let s2 = ingest(&kv, T1, 2, &[laned(S1, "k")]);
    let s3 = ingest(&kv, T2, 3, &[plain(S0)]);
    sweep(&kv, T1, NOW);
    let report = check_store(&kv.snapshot()).expect("check");
    assert_eq!(report.violations, vec![]);
    assert_eq!(report.counter_fixes, vec![]);
    assert_eq!(
        report.census,
        Census {
            tenants: 2,
            hooks: 3,
            rows: 4,
            pending: 4,
            in_flight: 0,
            lane_members: 1,
            lanes: 1,
            dead: 0,
            quarantined: 0,
        }
    );

    let mut bad = Batch::new();
    // A tenant's keyed field off (the aggregate moved with it, as a wrong
    // builder would move both), a tenant's `_total` field with the aggregate
    // left behind, and the aggregate alone off.
    bad.counter_add(counter_key(T1, F::Bytes).to_vec(), 100);
    bad.counter_add(counter_key(TenantOrd::NODE, F::Bytes).to_vec(), 100);
    bad.counter_add(counter_key(T2, F::DeliveredTotal).to_vec(), 7);
    bad.counter_add(counter_key(TenantOrd::NODE, F::LaneMembers).to_vec(), -1);
    commit(&kv, bad);
    let report = check_store(&kv.snapshot()).expect("check");
    let bytes_t1 = i64::from(s1) * 2 + i64::from(s2);
    let bytes_all = bytes_t1 + i64::from(s3);
    assert_eq!(
        report.counter_fixes,
        vec![
            CounterFix {
                tenant: T1,
                field: F::Bytes,
                stored: bytes_t1 + 100,
                expected: bytes_t1
            },
            CounterFix {
                tenant: TenantOrd::NODE,
                field: F::Bytes,
                stored: bytes_all + 100,
                expected: bytes_all
            },
            CounterFix {
                tenant: TenantOrd::NODE,
                field: F::DeliveredTotal,
                stored: 0,
                expected: 7
            },
            CounterFix {
                tenant: TenantOrd::NODE,
                field: F::LaneMembers,
                stored: 0,
                expected: 1
            },
        ]
    );
    assert_eq!(
        report.violations.len(),
        3,
        "the aggregate of bytes is the sum of the stored tenants: {:#?}",
        report.violations
    );
    assert_eq!(
        report.census.pending, 4,
        "the census counts keys, not counters"
    );
    commit(&kv, counter_fix_batch(&report.counter_fixes));
    let after = check_store(&kv.snapshot()).expect("check");
    assert_eq!(after.violations, vec![]);
    assert_eq!(after.counter_fixes, vec![]);
    assert_eq!(
        kv.counter(&counter_key(T2, F::DeliveredTotal))
            .expect("counter"),
        7,
        "a `_total` field keeps its value"
    );
}

#[test]
fn check_invariants_finds_a_stranded_member_and_two_live_rows_in_a_lane() {
    let kv = store();
    let lane = lane_of(S0, "k");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    // Member 2 put straight into ?D beside the head, and the marker of the lane
    // gone while a (fake) third member waits.
    let mut bad = Batch::new();
    bad.delete(Cf::Index, lane_member_key(T1, lane, Seq(2), S0));
    bad.put(
        Cf::Index,
        due_key(T1, NOW, Seq(2), S0),
        DueValue {
            size: 1,
            kind: DueKind::First,
        }
        .encode(),
    );
    bad.delete(Cf::Index, lane_head_key(T1, lane));
    commit(&kv, bad);
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert!(
        v.contains(&Violation::LaneManyLive {
            tenant: T1,
            lane,
            rows: vec![id(T1, 1, S0), id(T1, 2, S0)]
        }),
        "{v:#?}"
    );
    assert!(
        v.contains(&Violation::KindMismatch {
            row: id(T1, 2, S0),
            kind: DueKind::First,
            laned: true
        }),
        "{v:#?}"
    );
    assert!(
        v.contains(&Violation::StateMismatch {
            row: id(T1, 2, S0),
            state: RowState::Member,
            place: RowState::Due
        }),
        "{v:#?}"
    );
    assert!(
        v.contains(&Violation::LiveRowNotHead {
            row: id(T1, 1, S0),
            lane
        }),
        "{v:#?}"
    );

    // A member with neither ?H nor ?P.
    let kv = store();
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    let mut bad = Batch::new();
    bad.delete(Cf::Index, lane_marker_key(T1, lane));
    commit(&kv, bad);
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert_eq!(
        v,
        vec![Violation::MemberStranded {
            row: id(T1, 1, S0),
            lane
        }]
    );
}

// ---- mutations ---------------------------------------------------------------------

#[cfg(feature = "mutations")]
mod mutations {
    use super::*;
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
                let b =
                    dead_letter(kv, id(T1, 1, S0), Origin::InFlight, "x", NOW + 2).expect("dead");
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
}

// ---- pause: hold and unhold ---------------------------------------------------------

fn held(kv: &MemoryKv, tenant: TenantOrd) -> Vec<DueKey> {
    kv.scan(
        Cf::Index,
        &ankusa_keys::held_due_range(tenant),
        Direction::Forward,
        1000,
    )
    .expect("scan")
    .into_iter()
    .map(|(k, _)| DueKey::decode(&k).expect("decode"))
    .collect()
}

fn due_keys(kv: &MemoryKv, tenant: TenantOrd) -> Vec<DueKey> {
    keys(kv, Family::Due, tenant)
        .iter()
        .map(|k| DueKey::decode(k).expect("decode"))
        .collect()
}

/// The overflow release (`unhold_sink`): only the named entry's held rows go
/// back, oldest first, at most `budget` a page, at the due times they had,
/// with the tenant's ?A; another entry's held rows (a pause's) stay; the
/// cursor goes on after the last row moved, and a band with none of the
/// entry's rows left ends with nothing moved.
#[test]
fn unhold_sink_moves_back_only_its_entrys_held_rows_oldest_first() {
    let kv = store();
    for seq in 1..=4 {
        ingest(&kv, T1, seq, &[plain(S0), plain(S1)]);
    }
    clean(&kv);
    for d in due_keys(&kv, T1) {
        commit(&kv, hold(&kv, d).expect("hold"));
    }
    assert_eq!(held(&kv, T1).len(), 8);
    let before = counters(&kv, T1);
    // Two of S0's rows, the oldest: seq 1 and 2.
    let p = unhold_sink(&kv, T1, (SRC, S0), None, 100, 2).expect("unhold_sink");
    assert_eq!((p.moved, p.min_due_ms), (2, Some(NOW)));
    let next = p.next.clone().expect("a budget filled: more may follow");
    commit(&kv, p.batch);
    let due: Vec<(u64, SinkIx)> = due_keys(&kv, T1)
        .iter()
        .filter(|d| !d.is_held())
        .map(|d| (d.seq.0, d.sink))
        .collect();
    assert_eq!(due, vec![(1, S0), (2, S0)]);
    assert_eq!(
        keys(&kv, Family::Active, T1).len(),
        1,
        "the release puts ?A"
    );
    // From the cursor: the other two; then nothing of S0 is held.
    let p = unhold_sink(&kv, T1, (SRC, S0), Some(&next), 100, 10).expect("unhold_sink");
    assert_eq!((p.moved, p.next.is_none()), (2, true));
    commit(&kv, p.batch);
    let p = unhold_sink(&kv, T1, (SRC, S0), None, 100, 10).expect("unhold_sink");
    assert_eq!(
        (p.moved, p.next.is_none(), p.batch.is_empty()),
        (0, true, true)
    );
    // S1's rows (another entry) and another source's entry stay held.
    assert_eq!(
        held(&kv, T1).iter().map(|d| d.sink).collect::<Vec<_>>(),
        vec![S1; 4]
    );
    let p = unhold_sink(&kv, T1, (SourceId(99), S1), None, 100, 10).expect("unhold_sink");
    assert_eq!(p.moved, 0);
    assert_eq!(counters(&kv, T1), before, "no counter moves");
    clean(&kv);
}

/// A paused sink's due rows and lane head are held: out of every due scan, no
/// counter moved, the lane keeps its head and members, the tenant's ?A can go;
/// a resume of another sink moves nothing, a resume of theirs puts each back
/// at the due time it had, with the ?A.
#[test]
fn hold_takes_a_paused_sinks_rows_out_of_the_due_scan_and_unhold_puts_them_back() {
    let kv = store();
    let other = SourceId(11);
    ingest(&kv, T1, 1, &[plain(S0), laned(S1, "k")]);
    ingest(&kv, T1, 2, &[plain(S0), laned(S1, "k")]);
    ingest_from(&kv, T1, 3, other, &[plain(S0)]);
    assert_eq!(sweep(&kv, T1, NOW), 1);
    // A retry of seq 2's S0 row, due later: it keeps that time through a hold.
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 2, S0), NOW + 500, "x", NOW).expect("retry"),
    );
    clean(&kv);
    let before = counters(&kv, T1);
    // Pause (SRC, S0) and (SRC, S1): hold every due row of theirs.
    for d in due_keys(&kv, T1) {
        if d.seq != Seq(3) {
            let b = hold(&kv, d).expect("hold");
            assert_eq!(
                commit_delta(&kv, T1, b),
                map(&[]),
                "a hold moves no counter"
            );
            clean(&kv);
        }
    }
    let h = held(&kv, T1);
    assert_eq!(h.len(), 3, "{h:?}");
    assert!(h.iter().all(|d| d.is_held()));
    assert_eq!(
        h.iter()
            .map(|d| (d.seq.0, d.sink, d.unheld_due_ms()))
            .collect::<Vec<_>>(),
        vec![(1, S0, NOW), (1, S1, NOW), (2, S0, NOW + 500)]
    );
    // Out of the due scan, far in the future too; the other source's row is not.
    let scan = kv
        .scan(
            Cf::Index,
            &ankusa_keys::due_range_until(T1, NOW + 1_000_000),
            Direction::Forward,
            100,
        )
        .expect("scan");
    assert_eq!(scan.len(), 1);
    assert_eq!(DueKey::decode(&scan[0].0).expect("decode").seq, Seq(3));
    // The head is still the lane's head and its member stays.
    assert_eq!(head_of(&kv, T1, lane_of(S1, "k")), Some(id(T1, 1, S1)));
    assert_eq!(sweep(&kv, T1, NOW), 0);
    assert_eq!(
        row(&kv, id(T1, 2, S1)).expect("row").state,
        RowState::Member
    );
    assert_eq!(counters(&kv, T1), before);
    // With the other source's row gone, held rows alone do not keep ?A.
    commit(&kv, claim(&kv, dk(T1, NOW, 3, S0), NOW).expect("claim"));
    commit(&kv, delivered(&kv, id(T1, 3, S0), NOW).expect("delivered"));
    commit(&kv, sweep_markers(&kv, T1).expect("sweep"));
    assert!(keys(&kv, Family::Active, T1).is_empty());
    clean(&kv);
    // A resume while both are still paused moves nothing.
    let p = unhold(&kv, T1, |s, _| s == SRC, None, 10).expect("unhold");
    assert_eq!((p.moved, p.next.is_none()), (0, true));
    assert!(p.batch.is_empty());
    // Resume S1 only, one entry per call: the head goes back, S0's rows stay.
    let mut cursor = None;
    let mut moved = 0;
    for _ in 0..10 {
        let p = unhold(&kv, T1, |s, k| s == SRC && k == S0, cursor.as_ref(), 1).expect("unhold");
        moved += p.moved;
        assert_eq!(commit_delta(&kv, T1, p.batch), map(&[]));
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert!(cursor.is_none(), "unhold did not finish");
    assert_eq!(moved, 1);
    assert_eq!(
        keys(&kv, Family::Active, T1).len(),
        1,
        "the resume put ?A back"
    );
    assert!(due_value(&kv, T1, NOW, id(T1, 1, S1)).is_some());
    assert_eq!(held(&kv, T1).len(), 2);
    // Resume everything: back at the due times they had.
    let p = unhold(&kv, T1, |_, _| false, None, 10).expect("unhold");
    assert_eq!(p.moved, 2);
    commit(&kv, p.batch);
    assert!(held(&kv, T1).is_empty());
    assert!(due_value(&kv, T1, NOW, id(T1, 1, S0)).is_some());
    assert_eq!(
        due_value(&kv, T1, NOW + 500, id(T1, 2, S0)).map(|v| v.kind),
        Some(DueKind::Retry)
    );
    clean(&kv);
    // A hold of a row that is not due is refused.
    assert!(matches!(
        hold(&kv, dk(T1, NOW, 9, S0)),
        Err(QueueError::NotInState { .. })
    ));
}

/// A held kind 3 head still counts in lanes_blocked, and a held row can be
/// dead-lettered from the held band (a deleted source, --drop-unconfigured).
#[test]
fn a_held_blocked_head_stays_blocked_and_dead_letters_from_the_held_band() {
    let kv = store();
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 5, "x", NOW).expect("retry"),
    );
    commit(&kv, hold(&kv, dk(T1, NOW + 5, 1, S0)).expect("hold"));
    assert_eq!(counters(&kv, T1).get(&F::LanesBlocked), Some(&1));
    clean(&kv);
    let mut cursor = None;
    for _ in 0..10 {
        let p = dead_letter_sinks(
            &kv,
            T1,
            SRC,
            |k| k == S0,
            "sink removed from the config",
            cursor.as_ref(),
            10,
            NOW + 9,
        )
        .expect("dls");
        commit(&kv, p.batch);
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert!(held(&kv, T1).is_empty());
    assert_eq!(keys(&kv, Family::DeadLetter, T1).len(), 2);
    assert!(head_of(&kv, T1, lane_of(S0, "k")).is_none());
    let c = counters(&kv, T1);
    assert_eq!(
        (c.get(&F::LanesBlocked), c.get(&F::Pending), c.get(&F::Dead)),
        (None, None, Some(&2))
    );
}

#[test]
fn runtime_pauses_are_kept_in_meta() {
    use ankusa_keys::meta::{PauseTarget, PausedValue};
    let kv = store();
    assert!(read_pauses(&kv).expect("read").is_empty());
    commit(
        &kv,
        set_pause(PauseTarget::Sink(SRC, S1), 5, "endpoint migration"),
    );
    commit(&kv, set_pause(PauseTarget::Source(SourceId(2)), 6, ""));
    let p = read_pauses(&kv).expect("read");
    assert_eq!(
        p.into_iter().collect::<Vec<_>>(),
        vec![
            (
                PauseTarget::Source(SourceId(2)),
                PausedValue {
                    since_ms: 6,
                    reason: String::new()
                }
            ),
            (
                PauseTarget::Sink(SRC, S1),
                PausedValue {
                    since_ms: 5,
                    reason: "endpoint migration".into()
                }
            ),
        ]
    );
    commit(&kv, clear_pause(PauseTarget::Source(SourceId(2))));
    assert_eq!(read_pauses(&kv).expect("read").len(), 1);
    clean(&kv);
}

// ---- unconfigured sources and sinks ---------------------------------------------------

/// pending_rows counts ?D (held too), ?F and ?O rows per (source, sink), reads
/// no envelope for a sink index `maybe` refuses, and dead_letter_sinks moves
/// only the selected sink's rows, members before heads.
#[test]
fn pending_rows_counts_per_source_and_sink_and_dead_letter_sinks_takes_only_those() {
    let kv = store();
    let gone = SourceId(12);
    ingest(&kv, T1, 1, &[plain(S0), laned(S1, "k")]);
    ingest(&kv, T1, 2, &[plain(S0), laned(S1, "k")]);
    ingest(&kv, T1, 3, &[plain(S0), laned(S1, "j")]);
    ingest_from(&kv, T1, 4, gone, &[plain(S0)]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(&kv, hold(&kv, dk(T1, NOW, 2, S0)).expect("hold"));
    clean(&kv);
    let all = pending_rows(&kv, T1, |_| true, |_, _| true, 2).expect("pending");
    assert_eq!(
        all.into_iter().collect::<Vec<_>>(),
        vec![((SRC, S0), 3), ((SRC, S1), 3), ((gone, S0), 1)]
    );
    let gets = kv.stats().gets;
    let s1 = pending_rows(&kv, T1, |k| k == S1, |s, _| s == SRC, 64).expect("pending");
    assert_eq!(s1.into_iter().collect::<Vec<_>>(), vec![((SRC, S1), 3)]);
    assert_eq!(
        kv.stats().gets - gets,
        3,
        "one envelope read per hook with an S1 row"
    );
    let none = pending_rows(&kv, T1, |_| false, |_, _| true, 64).expect("pending");
    assert!(none.is_empty());

    let before = counters(&kv, T1);
    let mut cursor = None;
    let mut moved = 0;
    for _ in 0..20 {
        let p = dead_letter_sinks(
            &kv,
            T1,
            SRC,
            |k| k == S1,
            "sink removed from the config",
            cursor.as_ref(),
            2,
            NOW + 1,
        )
        .expect("dls");
        moved += p.moved;
        commit(&kv, p.batch);
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(moved, 3);
    let d = delta(&before, &counters(&kv, T1));
    assert_eq!(d.get(&F::Dead), Some(&3));
    assert_eq!(d.get(&F::Pending), Some(&-3));
    assert!(head_of(&kv, T1, lane_of(S1, "k")).is_none());
    assert!(head_of(&kv, T1, lane_of(S1, "j")).is_none());
    for x in keys(&kv, Family::DeadLetter, T1) {
        let v = DeadLetterValue::decode(&kv.get(Cf::Index, &x).expect("get").expect("value"))
            .expect("decode");
        assert_eq!(v.reason, "sink removed from the config");
    }
    // S0's rows and the other source's are untouched.
    let left = pending_rows(&kv, T1, |_| true, |_, _| true, 64).expect("pending");
    assert_eq!(
        left.into_iter().collect::<Vec<_>>(),
        vec![((SRC, S0), 3), ((gone, S0), 1)]
    );
}

// ---- quarantine: drop, list; dedupe expiry ---------------------------------------------

fn hold_in_quarantine(kv: &MemoryKv, tenant: TenantOrd, seq: u64, reason: &str) -> Envelope {
    let mut env = envelope(SRC, &format!("q{seq}"), Some("evt"));
    env.received_at_ms = NOW - 100 + seq;
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant,
            seq: Seq(seq),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        reason,
    );
    commit(kv, b);
    env
}

#[test]
fn drop_quarantined_deletes_the_hook_and_list_quarantined_pages_in_seq_order() {
    let kv = store();
    for seq in [3, 5, 8] {
        hold_in_quarantine(&kv, T1, seq, &format!("reason {seq}"));
    }
    hold_in_quarantine(&kv, T2, 4, "other tenant");
    clean(&kv);
    let p = list_quarantined(&kv, T1, None, 2).expect("list");
    assert_eq!(
        p.hooks.iter().map(|h| h.seq.0).collect::<Vec<_>>(),
        vec![3, 5]
    );
    assert_eq!(p.next, Some(Seq(5)));
    assert_eq!(p.hooks[0].reason, "reason 3");
    assert_eq!(p.hooks[0].source, Some(SRC));
    assert_eq!(p.hooks[0].received_at_ms, Some(NOW - 97));
    assert_eq!(p.hooks[0].idempotency_key, Some([7; 16]));
    assert!(p.hooks[0].size_bytes > 0);
    let p = list_quarantined(&kv, T1, p.next, 2).expect("list");
    assert_eq!(p.hooks.iter().map(|h| h.seq.0).collect::<Vec<_>>(), vec![8]);
    assert_eq!(p.next, None);
    assert!(
        list_quarantined(&kv, T1, Some(Seq(u64::MAX)), 2)
            .expect("list")
            .hooks
            .is_empty()
    );

    let d = commit_delta(&kv, T1, drop_quarantined(&kv, T1, Seq(5)).expect("drop"));
    assert_eq!(d, map(&[(F::Quarantined, -1)]));
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(5)))
            .expect("get")
            .is_none()
    );
    assert!(
        kv.get(Cf::Archive, &archive_key(T1, NOW - 95, Seq(5)))
            .expect("get")
            .is_none()
    );
    assert!(
        kv.get(Cf::Index, &quarantined_key(T1, Seq(5)))
            .expect("get")
            .is_none()
    );
    clean(&kv);
    assert!(matches!(
        drop_quarantined(&kv, T1, Seq(5)),
        Err(QueueError::NotQuarantined {
            tenant: T1,
            seq: Seq(5)
        })
    ));
    assert!(matches!(
        release(&kv, T1, Seq(5), &[plain(S0)], NOW),
        Err(QueueError::NotQuarantined { .. })
    ));
    // A released hook cannot be dropped; its envelope stays for its rows.
    commit(
        &kv,
        release(&kv, T1, Seq(3), &[plain(S0)], NOW).expect("release"),
    );
    assert!(matches!(
        drop_quarantined(&kv, T1, Seq(3)),
        Err(QueueError::NotQuarantined { .. })
    ));
    clean(&kv);
    assert_eq!(
        list_quarantined(&kv, T1, None, 10)
            .expect("list")
            .hooks
            .len(),
        1
    );
    assert_eq!(
        list_quarantined(&kv, T2, None, 10)
            .expect("list")
            .hooks
            .len(),
        1
    );
}

/// A released laned hook keeps its seq and joins its lane as a member behind
/// the current head (ADR 4.8), before a later member still waiting.
#[test]
fn a_released_laned_hook_joins_its_lane_behind_the_head_before_later_members() {
    let kv = store();
    hold_in_quarantine(&kv, T1, 2, "source under quarantine");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 3, &[laned(S0, "k")]);
    ingest(&kv, T1, 4, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        release(&kv, T1, Seq(2), &[laned(S0, "k")], NOW).expect("release"),
    );
    clean(&kv);
    commit(&kv, delivered(&kv, id(T1, 1, S0), NOW).expect("delivered"));
    assert_eq!(head_of(&kv, T1, lane_of(S0, "k")), Some(id(T1, 2, S0)));
    clean(&kv);
}

#[test]
fn expire_dedupe_deletes_only_expired_records_in_pages() {
    let kv = store();
    let mut b = Batch::new();
    for (i, expires) in [NOW - 1, NOW, NOW + 1, NOW - 5].into_iter().enumerate() {
        b.put(
            Cf::Index,
            dedupe_key(T1, SRC, format!("evt_{i}").as_bytes()),
            ankusa_keys::DedupeValue {
                seq: Seq(i as u64),
                expires_at_ms: expires,
            }
            .encode(),
        );
    }
    b.put(
        Cf::Index,
        dedupe_key(T2, SRC, b"evt_0"),
        ankusa_keys::DedupeValue {
            seq: Seq(9),
            expires_at_ms: 0,
        }
        .encode(),
    );
    commit(&kv, b);
    let mut cursor = None;
    let mut deleted = 0;
    for _ in 0..10 {
        let p = expire_dedupe(&kv, T1, NOW, cursor.as_ref(), 1).expect("expire");
        deleted += p.moved;
        commit(&kv, p.batch);
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(deleted, 3);
    assert_eq!(
        keys(&kv, Family::Dedupe, T1).len(),
        1,
        "the unexpired record stays"
    );
    assert!(
        kv.get(Cf::Index, &dedupe_key(T1, SRC, b"evt_2"))
            .expect("get")
            .is_some()
    );
    assert_eq!(
        keys(&kv, Family::Dedupe, T2).len(),
        1,
        "another tenant's records stay"
    );
}

// ---- drop_dead with pause and quarantine ---------------------------------------------

/// A hook whose other row is held by a pause (the held band of ?D) keeps its
/// envelope, archive entry and dedupe record when its dead row is dropped; the
/// held row stays held and its resume finds the envelope. Every step leaves
/// the invariants as pause defines them (a held ?D needs no ?A).
#[test]
fn drop_dead_keeps_the_hook_of_a_row_held_by_a_pause() {
    let kv = store();
    let size = i64::from(ingest_dedupe(&kv, 1, "evt_1", &[plain(S0), plain(S1)]));
    commit(&kv, hold(&kv, dk(T1, NOW, 1, S1)).expect("hold"));
    kill(&kv, 1, S0);
    clean(&kv);
    let d = commit_delta(&kv, T1, drop_dead(&kv, &[id(T1, 1, S0)]).expect("drop"));
    assert_eq!(d, map(&[(F::Dead, -1), (F::DeadBytes, -size)]));
    assert!(has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert!(has(&kv, Cf::Archive, &archive_key(T1, NOW - 10, Seq(1))));
    assert!(has(&kv, Cf::Index, &dedupe_key(T1, SRC, b"evt_1")));
    assert_eq!(
        held(&kv, T1),
        vec![dk(T1, ankusa_keys::held_due_ms(NOW), 1, S1)]
    );
    clean(&kv);
    let p = unhold(&kv, T1, |_, _| false, None, 10).expect("unhold");
    assert_eq!(p.moved, 1);
    commit(&kv, p.batch);
    assert!(due_value(&kv, T1, NOW, id(T1, 1, S1)).is_some());
    clean(&kv);
}

/// A quarantined hook records no ?K: released, dead-lettered and dropped, it
/// leaves the dedupe record of the provider's genuine hook (same dedupe key)
/// alone, though its envelope carries that key.
#[test]
fn drop_dead_of_a_released_quarantined_hook_keeps_the_genuine_hooks_dedupe_record() {
    let kv = store();
    ingest_dedupe(&kv, 1, "evt", &[plain(S0)]);
    let env = hold_in_quarantine(&kv, T1, 2, "invalid signature: forged");
    assert_eq!(env.dedupe_key.as_deref(), Some(&b"evt"[..]));
    commit(
        &kv,
        release(&kv, T1, Seq(2), &[plain(S0)], NOW).expect("release"),
    );
    kill(&kv, 2, S0);
    clean(&kv);
    commit(&kv, drop_dead(&kv, &[id(T1, 2, S0)]).expect("drop"));
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(2))));
    assert!(!has(
        &kv,
        Cf::Archive,
        &archive_key(T1, env.received_at_ms, Seq(2))
    ));
    let v = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt"))
        .expect("get")
        .expect("the genuine hook's record");
    assert_eq!(DedupeValue::decode(&v).expect("decode").seq, Seq(1));
    assert!(has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    clean(&kv);
}

// ---- purge_tenant_page ------------------------------------------------------

/// Every key and value of `tenant` in every column family.
fn tenant_state(kv: &MemoryKv, tenant: TenantOrd) -> Vec<(Cf, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for (cf, range) in ankusa_keys::tenant_ranges(tenant) {
        for (k, v) in kv
            .scan(cf, &range, Direction::Forward, 100_000)
            .expect("scan")
        {
            out.push((cf, k.to_vec(), v.to_vec()));
        }
    }
    out
}

/// Tenant 1 with every kind of state: a lane with a blocked head and a
/// member, a lane whose head is in flight with a member behind it, a held
/// row (paused sink), an unordered due row, a dead row, a quarantined hook,
/// dedupe records; tenant 2 with an unordered row and a dead one.
fn busy_store() -> MemoryKv {
    let kv = store();
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k"), plain(S1)]);
    ingest(&kv, T1, 3, &[laned(S0, "j")]);
    ingest(&kv, T1, 4, &[laned(S0, "j")]);
    ingest_dedupe(&kv, 5, "evt_5", &[plain(S0), plain(S1)]);
    sweep(&kv, T1, NOW);
    // Lane k: head 1 retried (kind 3, blocked), member 2.
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 5, "x", NOW).expect("retry"),
    );
    // Lane j: head 3 in flight, member 4.
    commit(&kv, claim(&kv, dk(T1, NOW, 3, S0), NOW).expect("claim"));
    // Hook 2's unordered row dead; hook 5's row for S1 held.
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S1), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 2, S1), Origin::InFlight, "x", NOW).expect("dead"),
    );
    commit(&kv, hold(&kv, dk(T1, NOW, 5, S1)).expect("hold"));
    hold_in_quarantine(&kv, T1, 9, "source under quarantine");
    ingest(&kv, T2, 6, &[plain(S0)]);
    ingest(&kv, T2, 7, &[plain(S1)]);
    commit(&kv, claim(&kv, dk(T2, NOW, 7, S1), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T2, 7, S1), Origin::InFlight, "x", NOW).expect("dead"),
    );
    clean(&kv);
    kv
}

/// The bounded purge, one page at a time with pages of 1, 2, 3 and 1000
/// entries: check_invariants is clean and the aggregate is the sum over
/// tenants after every page; at the end no key of tenant 1 is left in any
/// column family, the aggregate equals tenant 2's counters, and tenant 2's
/// state is byte for byte what it was.
#[test]
fn purge_tenant_page_keeps_every_invariant_after_each_page_and_leaves_nothing() {
    for limit in [1, 2, 3, 1000] {
        let kv = busy_store();
        let c1 = counters(&kv, T1);
        assert_eq!(
            (
                c1.get(&F::Lanes),
                c1.get(&F::LanesBlocked),
                c1.get(&F::LaneMembers),
                c1.get(&F::InFlight)
            ),
            (Some(&2), Some(&1), Some(&2), Some(&1)),
            "{c1:?}"
        );
        let other = tenant_state(&kv, T2);
        let mut cursor: Option<Cursor> = None;
        let mut pages = 0;
        let mut moved = 0;
        let mut phases = Vec::new();
        loop {
            phases.push(purge_phase(cursor.as_ref()));
            let page = purge_tenant_page(&kv, T1, cursor.as_ref(), limit).expect("page");
            moved += page.moved;
            assert!(
                page.moved <= limit,
                "a page of {limit} moved {}",
                page.moved
            );
            commit(&kv, page.batch);
            pages += 1;
            clean(&kv);
            // The round trip an admin job's state makes.
            cursor = page
                .next
                .map(|c| Cursor::from_bytes(&c.to_bytes()).expect("cursor"));
            if cursor.is_none() {
                break;
            }
            assert!(pages < 500, "the purge does not end");
        }
        // 6 pending rows (2 members, 1 in flight, 3 due, the held one
        // included) + 1 dead + 1 quarantined hook.
        assert_eq!(moved, 8, "limit {limit}");
        assert_eq!(phases.first(), Some(&"lane members"));
        assert_eq!(phases.last(), Some(&"counters"));
        assert!(
            tenant_state(&kv, T1).is_empty(),
            "limit {limit}: {:?}",
            tenant_state(&kv, T1)
        );
        assert!(counters(&kv, T1).is_empty());
        assert_eq!(counters(&kv, TenantOrd::NODE), counters(&kv, T2));
        assert_eq!(tenant_state(&kv, T2), other, "tenant 2 changed");
        for (cf, key) in sentinels() {
            assert!(kv.get(cf, &key).expect("get").is_some(), "a sentinel went");
        }
    }
}

/// An archive replay's copy: a new seq, the original's idempotency key and
/// received time, rows as at ingest (a laned row a member behind the lane's
/// head), and no dedupe record (the original's stays as it is).
#[test]
fn replay_copies_a_hook_under_a_new_seq_without_a_dedupe_record() {
    let kv = store();
    ingest_dedupe(&kv, 1, "evt_1", &[laned(S0, "cust_1")]);
    sweep(&kv, T1, NOW);
    let raw = kv
        .get(Cf::Hooks, &hook_key(T1, Seq(1)))
        .expect("get")
        .expect("envelope");
    let mut copy = Envelope::decode(&raw).expect("decode");
    copy.replay_of = Some(Seq(1));
    let mut b = Batch::new();
    replay(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(2),
            envelope: &copy,
            dedupe_expires_at_ms: 0,
        },
        &[laned(S0, "cust_1")],
        NOW + 1,
    );
    let d = commit_delta(&kv, T1, b);
    let size = i64::from(hook_size(&copy));
    assert_eq!(
        d,
        map(&[(F::Pending, 1), (F::Bytes, size), (F::LaneMembers, 1)])
    );
    let stored = Envelope::decode(
        &kv.get(Cf::Hooks, &hook_key(T1, Seq(2)))
            .expect("get")
            .expect("copy"),
    )
    .expect("decode");
    assert_eq!(stored, copy);
    assert!(has(
        &kv,
        Cf::Archive,
        &archive_key(T1, copy.received_at_ms, Seq(2))
    ));
    assert_eq!(
        row(&kv, id(T1, 2, S0)).expect("row").state,
        RowState::Member
    );
    let v = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt_1"))
        .expect("get")
        .expect("record");
    assert_eq!(
        DedupeValue::decode(&v).expect("decode").seq,
        Seq(1),
        "the copy rewrote the dedupe record"
    );
    clean(&kv);
}

/// A row dead-lettered by its first attempt's outcome shows that attempt
/// (attempts 1, last_error the reason); `dead_letter` at a claim (nothing ran)
/// counts none. Found by an operator's walkthrough of the admin API: rows dead
/// on a 410 showed attempts 0 and no error.
#[test]
fn a_row_dead_after_its_attempt_counts_the_attempt() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[plain(S0)]);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S0), NOW).expect("claim"));
    commit(
        &kv,
        crate::dead_letter_attempted(&kv, id(T1, 1, S0), "sink gone: HTTP 410", NOW + 1)
            .expect("dead"),
    );
    commit(
        &kv,
        dead_letter(
            &kv,
            id(T1, 2, S0),
            Origin::InFlight,
            "retry horizon passed",
            NOW + 1,
        )
        .expect("dead"),
    );
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.last_error.as_deref()),
        (RowState::Dead, 1, Some("sink gone: HTTP 410"))
    );
    let r = row(&kv, id(T1, 2, S0)).expect("row");
    assert_eq!(
        (r.state, r.attempts, r.last_error.as_deref()),
        (RowState::Dead, 0, None)
    );
    clean(&kv);
}
