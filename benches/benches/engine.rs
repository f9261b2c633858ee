//! Storage backends side by side (docs/design.md section 2): Sync commits of 1,
//! 16 and 256 puts of 1 KiB; a prefix scan of 10,000 keys; the first live key
//! after 100,000 deletes at the head of a queue family (the tombstone case);
//! counter adds.

use std::time::Duration;

use ankusa_benches::{BACKENDS, with_backend};
use ankusa_engine::{Batch, Cf, Direction, Durability, KeyRange, scan_pages};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn due_key(i: u64) -> Vec<u8> {
    // The shape of a ?D key: family, tenant, due, seq, sink.
    let mut k = vec![b'D'];
    k.extend_from_slice(&1u32.to_be_bytes());
    k.extend_from_slice(&i.to_be_bytes());
    k.extend_from_slice(&i.to_be_bytes());
    k.extend_from_slice(&0u16.to_be_bytes());
    k
}

fn sync_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("sync_commit_1KiB_puts");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    for puts in [1usize, 16, 256] {
        g.throughput(Throughput::Elements(1));
        for backend in BACKENDS {
            let dir = tempfile::tempdir().unwrap();
            with_backend(backend, dir.path(), |kv| {
                let mut next = 0u64;
                let value = vec![0x5a; 1024];
                g.bench_function(BenchmarkId::new(backend, puts), |b| {
                    b.iter(|| {
                        let mut w = Batch::new();
                        for _ in 0..puts {
                            w.put(Cf::Hooks, next.to_be_bytes(), value.clone());
                            next += 1;
                        }
                        kv.write(w, Durability::Sync).unwrap();
                    })
                });
            });
        }
    }
    g.finish();
}

fn prefix_scan(c: &mut Criterion) {
    let mut g = c.benchmark_group("prefix_scan_10k");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    g.throughput(Throughput::Elements(10_000));
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        with_backend(backend, dir.path(), |kv| {
            for chunk in 0..10u64 {
                let mut w = Batch::new();
                for i in chunk * 1000..(chunk + 1) * 1000 {
                    w.put(Cf::Index, due_key(i), 100u32.to_be_bytes());
                }
                // Neighbours on both sides that the scan must not return.
                w.put(Cf::Index, vec![b'C'; 8], vec![0; 8]).put(
                    Cf::Index,
                    vec![b'F'; 8],
                    vec![0; 8],
                );
                kv.write(w, Durability::Buffered).unwrap();
            }
            let range = KeyRange::prefix(b"D");
            g.bench_function(backend, |b| {
                b.iter(|| {
                    let n = scan_pages(
                        kv.read(),
                        Cf::Index,
                        range.clone(),
                        Direction::Forward,
                        1000,
                    )
                    .count();
                    assert_eq!(n, 10_000);
                })
            });
        });
    }
    g.finish();
}

fn tombstone_scan(c: &mut Criterion) {
    let mut g = c.benchmark_group("first_live_after_100k_deletes");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        with_backend(backend, dir.path(), |kv| {
            for chunk in 0..100u64 {
                let mut w = Batch::new();
                for i in chunk * 1000..(chunk + 1) * 1000 {
                    w.put(Cf::Index, due_key(i), 100u32.to_be_bytes());
                }
                kv.write(w, Durability::Buffered).unwrap();
            }
            let mut w = Batch::new();
            w.put(Cf::Index, due_key(100_000), 100u32.to_be_bytes());
            kv.write(w, Durability::Buffered).unwrap();
            // Delete the queue's head one batch at a time, as delivered rows are.
            for chunk in 0..100u64 {
                let mut w = Batch::new();
                for i in chunk * 1000..(chunk + 1) * 1000 {
                    w.delete(Cf::Index, due_key(i));
                }
                kv.write(w, Durability::Buffered).unwrap();
            }
            let range = KeyRange::prefix(b"D");
            let before = kv.stats();
            g.bench_function(backend, |b| {
                b.iter(|| {
                    let first = kv
                        .read()
                        .first(Cf::Index, &range, Direction::Forward)
                        .unwrap();
                    assert_eq!(first.map(|(k, _)| k.to_vec()), Some(due_key(100_000)));
                })
            });
            let d = kv.stats() - before;
            assert_eq!(d.entries_scanned, d.seeks, "one entry per seek");
        });
    }
    g.finish();
}

fn counter_adds(c: &mut Criterion) {
    // One transition's worth: 12 counter fields for a tenant and the aggregate.
    let mut g = c.benchmark_group("counter_adds_24_buffered");
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    g.throughput(Throughput::Elements(24));
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        with_backend(backend, dir.path(), |kv| {
            g.bench_function(backend, |b| {
                b.iter(|| {
                    let mut w = Batch::new();
                    for ord in [0u32, 1] {
                        for field in 1u8..=12 {
                            let mut k = vec![b'C'];
                            k.extend_from_slice(&ord.to_be_bytes());
                            k.push(field);
                            w.counter_add(k, 1);
                        }
                    }
                    kv.write(w, Durability::Buffered).unwrap();
                })
            });
        });
    }
    g.finish();
}

fn counter_read_after_adds(c: &mut Criterion) {
    // A hot counter after 20,000 blind adds (every transition adds to a dozen):
    // what a read costs once the adds have piled up.
    let mut g = c.benchmark_group("counter_read_after_20k_adds");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    for backend in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        with_backend(backend, dir.path(), |kv| {
            for _ in 0..20_000 {
                let mut w = Batch::new();
                w.counter_add(b"Chot".to_vec(), 1);
                kv.write(w, Durability::Buffered).unwrap();
            }
            g.bench_function(backend, |b| {
                b.iter(|| assert_eq!(kv.read().counter(b"Chot").unwrap(), 20_000))
            });
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    sync_commit,
    prefix_scan,
    tombstone_scan,
    counter_adds,
    counter_read_after_adds
);
criterion_main!(benches);
