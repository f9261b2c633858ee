//! What the tests share: a store with `init_store`, hooks ingested through the
//! builders, and readers of counters, index keys, rows and lane heads; with
//! the crates' items every test names, so a test module needs only
//! `use crate::support::*;`.

pub use std::collections::BTreeMap;

pub use ankusa_engine::memory::MemoryKv;
pub use ankusa_engine::{Batch, Cf, Direction, Durability, Kv, Read};
pub use ankusa_keys::{
    CounterField, DeadLetterValue, DedupeValue, DeliveryRow, DueKey, DueKind, DueValue, Envelope,
    Family, InFlightValue, LaneId, RowState, Seq, SinkIx, SourceId, TenantOrd, active_key,
    archive_key, counter_key, dead_letter_key, dedupe_key, delivery_key, due_key, hook_key,
    in_flight_key, lane_head_key, lane_marker_key, lane_member_key, quarantined_key, sentinels,
    tenant_range,
};
pub use ankusa_lanes::{LaneAssignment, assign};
pub use ankusa_queue::*;

pub const T1: TenantOrd = TenantOrd(1);
pub const T2: TenantOrd = TenantOrd(2);
pub const SRC: SourceId = SourceId(10);
pub const NOW: u64 = 1_000_000;
pub const S0: SinkIx = SinkIx(0);
pub const S1: SinkIx = SinkIx(1);

pub use CounterField as F;

pub fn store() -> MemoryKv {
    let kv = MemoryKv::new();
    commit(&kv, init_store());
    kv
}

pub fn commit(kv: &MemoryKv, batch: Batch) {
    kv.write(batch, Durability::Sync).expect("commit");
}

pub fn envelope(source: SourceId, body: &str, dedupe: Option<&str>) -> Envelope {
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

pub fn laned(sink: SinkIx, key: &str) -> NewRow {
    NewRow {
        sink,
        lane: Some(assign(sink, SRC, Some(key.as_bytes()))),
    }
}

pub fn plain(sink: SinkIx) -> NewRow {
    NewRow { sink, lane: None }
}

pub fn lane_of(sink: SinkIx, key: &str) -> LaneId {
    ankusa_lanes::lane_id(sink, SRC, Some(key.as_bytes()))
}

/// Ingests hook `seq` of `tenant` from `source` with `rows`; returns its size.
pub fn ingest_from(
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

pub fn ingest(kv: &MemoryKv, tenant: TenantOrd, seq: u64, rows: &[NewRow]) -> u32 {
    ingest_from(kv, tenant, seq, SRC, rows)
}

pub fn counters(kv: &MemoryKv, tenant: TenantOrd) -> BTreeMap<CounterField, i64> {
    CounterField::ALL
        .into_iter()
        .map(|f| (f, kv.counter(&counter_key(tenant, f)).expect("counter")))
        .filter(|(_, v)| *v != 0)
        .collect()
}

/// `after - before`, only the fields that moved.
pub fn delta(
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

pub fn map(pairs: &[(CounterField, i64)]) -> BTreeMap<CounterField, i64> {
    pairs.iter().copied().collect()
}

/// Commits `batch` and returns the counter deltas of `tenant`, checking that
/// the aggregate moved by the same amounts (one tenant touched).
pub fn commit_delta(kv: &MemoryKv, tenant: TenantOrd, batch: Batch) -> BTreeMap<CounterField, i64> {
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

pub fn keys(kv: &MemoryKv, family: Family, tenant: TenantOrd) -> Vec<Vec<u8>> {
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

pub fn row(kv: &MemoryKv, id: RowId) -> Option<DeliveryRow> {
    kv.get(Cf::Deliveries, &delivery_key(id.tenant, id.seq, id.sink))
        .expect("get")
        .map(|raw| DeliveryRow::decode(&raw).expect("decode"))
}

pub fn due_value(kv: &MemoryKv, tenant: TenantOrd, due_ms: u64, id: RowId) -> Option<DueValue> {
    kv.get(Cf::Index, &due_key(tenant, due_ms, id.seq, id.sink))
        .expect("get")
        .map(|v| DueValue::decode(&v).expect("decode"))
}

pub fn head_of(kv: &MemoryKv, tenant: TenantOrd, lane: LaneId) -> Option<RowId> {
    ankusa_lanes::head(kv, tenant, lane).expect("head")
}

pub fn clean(kv: &MemoryKv) {
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert!(v.is_empty(), "violations: {v:#?}");
}

pub fn dk(tenant: TenantOrd, due_ms: u64, seq: u64, sink: SinkIx) -> DueKey {
    DueKey {
        tenant,
        due_ms,
        seq: Seq(seq),
        sink,
    }
}

pub fn id(tenant: TenantOrd, seq: u64, sink: SinkIx) -> RowId {
    RowId::new(tenant, Seq(seq), sink)
}

/// Runs the lane sweep of `tenant` and commits it.
pub fn sweep(kv: &MemoryKv, tenant: TenantOrd, now: u64) -> usize {
    let out = ankusa_lanes::sweep(kv, tenant, 64, now).expect("sweep");
    commit(kv, out.batch);
    commit(
        kv,
        ankusa_lanes::sweep_recheck(kv, tenant, &out.recheck).expect("recheck"),
    );
    out.promoted
}

/// Ingests hook `seq` of T1 (with dedupe key `dedupe`) with `rows`; returns its size.
pub fn ingest_dedupe(kv: &MemoryKv, seq: u64, dedupe: &str, rows: &[NewRow]) -> u32 {
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
pub fn kill(kv: &MemoryKv, seq: u64, sink: SinkIx) {
    commit(kv, claim(kv, dk(T1, NOW, seq, sink), NOW).expect("claim"));
    commit(
        kv,
        dead_letter(kv, id(T1, seq, sink), Origin::InFlight, "HTTP 400", NOW).expect("dead"),
    );
}

pub fn has(kv: &MemoryKv, cf: Cf, key: &[u8]) -> bool {
    kv.get(cf, key).expect("get").is_some()
}

pub fn held(kv: &MemoryKv, tenant: TenantOrd) -> Vec<DueKey> {
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

pub fn due_keys(kv: &MemoryKv, tenant: TenantOrd) -> Vec<DueKey> {
    keys(kv, Family::Due, tenant)
        .iter()
        .map(|k| DueKey::decode(k).expect("decode"))
        .collect()
}

pub fn hold_in_quarantine(kv: &MemoryKv, tenant: TenantOrd, seq: u64, reason: &str) -> Envelope {
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
