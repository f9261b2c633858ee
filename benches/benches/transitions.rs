//! The pure batch builders of `queue` and `lanes` (docs/design.md section 4):
//! ns per transition and engine operations per transition (gets, seeks, entries
//! scanned), on the memory engine so the figures are the builders' own cost. A
//! setup (not timed) builds the state each transition starts from; the timed
//! routine builds the transition's batch and commits it. Op counts of one
//! routine are printed as `ops/transition` lines (reads of the builder, and the
//! one batch it commits).
//!
//! Transitions: ingest (unordered, ordered), claim, delivered (unordered),
//! release with a waiting member, release without one (delivered of a lane
//! head), and the lane sweep of one marker.

use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Durability, Kv, OpStats};
use ankusa_keys::{DueKey, Envelope, Seq, SinkIx, SourceId, TenantOrd};
use ankusa_queue::{Hook, NewRow, RowId, lanes, new_ops};
use criterion::{Criterion, criterion_group, criterion_main};

const T: TenantOrd = TenantOrd(1);
const SRC: SourceId = SourceId(1);
const NOW: u64 = 1_700_000_000_000;

fn envelope(n: u64) -> Envelope {
    Envelope {
        source: SRC,
        received_at_ms: NOW,
        method: "POST".into(),
        path: "/hooks/bench".into(),
        query: None,
        headers: vec![(b"content-type".to_vec(), b"application/json".to_vec())],
        body: vec![b'x'; 1024],
        dedupe_key: Some(format!("evt_{n}").into_bytes()),
        idempotency_key: [7; 16],
        replay_of: None,
    }
}

fn ingest(kv: &MemoryKv, seq: u64, lane: Option<&str>) {
    let env = envelope(seq);
    let hook = Hook {
        tenant: T,
        seq: Seq(seq),
        envelope: &env,
        dedupe_expires_at_ms: NOW + 1,
    };
    let row = NewRow {
        sink: SinkIx(0),
        lane: lane.map(|k| lanes::assign(SinkIx(0), SRC, Some(k.as_bytes()))),
    };
    let mut b = Batch::new();
    new_ops(&mut b, &hook, &[row], NOW);
    kv.write(b, Durability::Buffered).unwrap();
}

fn report(name: &str, d: OpStats) {
    eprintln!(
        "ops/transition {name}: gets {}, seeks {}, entries scanned {}, batches {}, bytes written {}",
        d.gets, d.seeks, d.entries_scanned, d.batches, d.bytes_written
    );
}

/// Benches `routine` on the state `setup` builds before each iteration, and
/// reports the engine operations of one routine call (build + commit).
fn bench<S>(
    c: &mut Criterion,
    name: &str,
    kv: &MemoryKv,
    mut setup: impl FnMut(&MemoryKv) -> S,
    mut routine: impl FnMut(&MemoryKv, S),
) {
    let s = setup(kv);
    let before = kv.stats();
    routine(kv, s);
    report(name, kv.stats() - before);
    c.bench_function(name, |b| {
        b.iter_batched(
            || setup(kv),
            |s| routine(kv, s),
            criterion::BatchSize::PerIteration,
        )
    });
}

fn claim_row(kv: &MemoryKv, seq: u64) -> RowId {
    let due = DueKey {
        tenant: T,
        due_ms: NOW,
        seq: Seq(seq),
        sink: SinkIx(0),
    };
    kv.write(
        ankusa_queue::claim(kv, due, NOW).unwrap(),
        Durability::Buffered,
    )
    .unwrap();
    RowId::new(T, Seq(seq), SinkIx(0))
}

fn promote_all(kv: &MemoryKv) {
    let out = lanes::sweep(kv, T, 64, NOW).unwrap();
    kv.write(out.batch, Durability::Buffered).unwrap();
}

fn transitions(c: &mut Criterion) {
    let mut seq = 0u64;
    let mut next = move || {
        seq += 1;
        seq
    };
    let kv = MemoryKv::new();
    bench(
        c,
        "ingest_unordered",
        &kv,
        |_| next(),
        |kv, s| ingest(kv, s, None),
    );
    let kv = MemoryKv::new();
    bench(
        c,
        "ingest_ordered",
        &kv,
        |_| next(),
        |kv, s| ingest(kv, s, Some("cus_1")),
    );
    let kv = MemoryKv::new();
    bench(
        c,
        "claim",
        &kv,
        |kv| {
            let s = next();
            ingest(kv, s, None);
            DueKey {
                tenant: T,
                due_ms: NOW,
                seq: Seq(s),
                sink: SinkIx(0),
            }
        },
        |kv, due| {
            kv.write(
                ankusa_queue::claim(kv, due, NOW).unwrap(),
                Durability::Buffered,
            )
            .unwrap()
        },
    );
    let kv = MemoryKv::new();
    bench(
        c,
        "delivered_unordered",
        &kv,
        |kv| {
            let s = next();
            ingest(kv, s, None);
            claim_row(kv, s)
        },
        |kv, row| {
            kv.write(
                ankusa_queue::delivered(kv, row, NOW).unwrap(),
                Durability::Buffered,
            )
            .unwrap()
        },
    );
    // A lane head delivered while a member waits: the release promotes it.
    let kv = MemoryKv::new();
    bench(
        c,
        "delivered_head_release_with_member",
        &kv,
        |kv| {
            let (a, b) = (next(), next());
            let key = format!("lane{a}");
            ingest(kv, a, Some(&key));
            ingest(kv, b, Some(&key));
            promote_all(kv);
            claim_row(kv, a)
        },
        |kv, row| {
            kv.write(
                ankusa_queue::delivered(kv, row, NOW).unwrap(),
                Durability::Buffered,
            )
            .unwrap()
        },
    );
    // A lane head delivered with nobody behind it: the release deletes ?H.
    let kv = MemoryKv::new();
    bench(
        c,
        "delivered_head_release_no_member",
        &kv,
        |kv| {
            let a = next();
            ingest(kv, a, Some(&format!("lane{a}")));
            promote_all(kv);
            claim_row(kv, a)
        },
        |kv, row| {
            kv.write(
                ankusa_queue::delivered(kv, row, NOW).unwrap(),
                Durability::Buffered,
            )
            .unwrap()
        },
    );
    // The per-visit sweep of one marker whose lane has a member and no head.
    let kv = MemoryKv::new();
    bench(
        c,
        "sweep_one_marker_promote",
        &kv,
        |kv| {
            let a = next();
            ingest(kv, a, Some(&format!("lane{a}")));
        },
        |kv, ()| {
            let out = lanes::sweep(kv, T, 1, NOW).unwrap();
            assert_eq!(out.promoted, 1);
            kv.write(out.batch, Durability::Buffered).unwrap();
        },
    );
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
}

criterion_group! { name = benches; config = config(); targets = transitions }
criterion_main!(benches);
