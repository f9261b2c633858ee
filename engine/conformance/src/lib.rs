//! The conformance suite of the storage contract (docs/design.md section 2), written
//! once and run against every backend (TiKV's `engine_traits_tests`, parity's
//! `kvdb-shared-tests`).
//!
//! Each check is a public function generic over [`Kv`]; [`conformance_suite!`]
//! turns them into `#[test]`s for one backend. The memory backend is the model:
//! [`model_equivalence`] applies the same random batches to the model and to the
//! backend under test and requires identical contents after every batch, so the
//! model accepts and rejects exactly what the engines do.
//!
//! The crash test (`tests/crash.rs` with the `crash-child` binary) lives beside
//! this file: a child process commits `Sync` batches in a loop and is killed with
//! SIGKILL at random moments; after every reopen each batch is all or nothing and
//! every acknowledged batch is present.
#![deny(missing_docs)]
#![allow(clippy::unwrap_used)] // a test suite: a failed unwrap is a failed check

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{
    Batch, Bytes, Cf, Direction, Durability, EngineError, KeyRange, KeyValue, Kv, Op, Read,
    scan_pages,
};

/// The backends this suite knows, by name, for the crash child and the benches.
pub mod backends {
    use super::*;

    /// Opens a RocksDB store at `dir`.
    pub fn rocksdb(dir: &Path) -> ankusa_engine_rocksdb::RocksKv {
        ankusa_engine_rocksdb::RocksKv::open(dir).unwrap()
    }
    /// Opens a fjall store at `dir`.
    pub fn fjall(dir: &Path) -> ankusa_engine_fjall::FjallKv {
        ankusa_engine_fjall::FjallKv::open(dir).unwrap()
    }
    /// A fresh memory store (`dir` is ignored).
    pub fn memory(_dir: &Path) -> MemoryKv {
        MemoryKv::new()
    }
}

fn full(cf: Cf, kv: &impl Read) -> Vec<KeyValue> {
    scan_pages(
        kv,
        cf,
        KeyRange::new(Vec::new(), vec![0xff; 64]),
        Direction::Forward,
        7,
    )
    .collect::<Result<Vec<_>, _>>()
    .unwrap()
}

/// Every column family's whole contents, for comparing two stores.
pub fn dump(kv: &impl Read) -> Vec<(Cf, Vec<KeyValue>)> {
    Cf::ALL.iter().map(|cf| (*cf, full(*cf, kv))).collect()
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn keys(kvs: &[KeyValue]) -> Vec<&[u8]> {
    kvs.iter().map(|(k, _)| k.as_ref()).collect()
}

/// Put, get, overwrite and delete, and column families as separate key spaces.
pub fn put_get_delete<K: Kv>(kv: &K) {
    let mut w = Batch::new();
    for cf in Cf::ALL {
        w.put(cf, "k", cf.name());
    }
    kv.write(w, Durability::Sync).unwrap();
    for cf in Cf::ALL {
        assert_eq!(kv.get(cf, b"k").unwrap(), Some(b(cf.name())), "{cf:?}");
        assert_eq!(kv.get(cf, b"missing").unwrap(), None);
    }
    let mut w = Batch::new();
    w.put(Cf::Hooks, "k", "second").delete(Cf::Meta, "k");
    kv.write(w, Durability::Buffered).unwrap();
    assert_eq!(kv.get(Cf::Hooks, b"k").unwrap(), Some(b("second")));
    assert_eq!(kv.get(Cf::Meta, b"k").unwrap(), None);
    assert_eq!(kv.get(Cf::Index, b"k").unwrap(), Some(b("index")));
    // An empty value is ordinary; an empty or oversized key is refused by every
    // backend alike, and reading an empty key finds nothing.
    let mut w = Batch::new();
    w.put(Cf::Archive, "e", Vec::new());
    kv.write(w, Durability::Sync).unwrap();
    assert_eq!(kv.get(Cf::Archive, b"e").unwrap(), Some(Bytes::new()));
    for bad in [Vec::new(), vec![1u8; ankusa_engine::MAX_KEY_BYTES + 1]] {
        let mut w = Batch::new();
        w.put(Cf::Archive, "ok", "1").put(Cf::Archive, bad, "x");
        let err = kv.write(w, Durability::Sync).unwrap_err();
        assert!(matches!(err, EngineError::InvalidBatch(_)), "{err}");
        assert_eq!(kv.get(Cf::Archive, b"ok").unwrap(), None);
    }
    assert_eq!(kv.get(Cf::Archive, b"").unwrap(), None);
    let mut w = Batch::new();
    w.put(
        Cf::Archive,
        vec![2u8; ankusa_engine::MAX_KEY_BYTES],
        "longest",
    );
    kv.write(w, Durability::Sync).unwrap();
    assert_eq!(
        kv.get(Cf::Archive, &[2u8; ankusa_engine::MAX_KEY_BYTES])
            .unwrap(),
        Some(b("longest"))
    );
}

/// Ops inside one batch apply in order.
pub fn batch_applies_in_order<K: Kv>(kv: &K) {
    let mut w = Batch::new();
    w.put(Cf::Index, "a", "1")
        .delete(Cf::Index, "a")
        .put(Cf::Index, "b", "1")
        .put(Cf::Index, "b", "2")
        .delete(Cf::Index, "c")
        .put(Cf::Index, "c", "3")
        .put(Cf::Index, "r1", "x")
        .delete_range(Cf::Index, KeyRange::new("r", "s"))
        .delete_range(Cf::Index, KeyRange::new("t", "u"))
        .put(Cf::Index, "t1", "y");
    kv.write(w, Durability::Sync).unwrap();
    assert_eq!(kv.get(Cf::Index, b"a").unwrap(), None);
    assert_eq!(kv.get(Cf::Index, b"b").unwrap(), Some(b("2")));
    assert_eq!(kv.get(Cf::Index, b"c").unwrap(), Some(b("3")));
    assert_eq!(kv.get(Cf::Index, b"r1").unwrap(), None);
    assert_eq!(kv.get(Cf::Index, b"t1").unwrap(), Some(b("y")));
}

/// A batch the engine refuses writes nothing, in any column family.
pub fn invalid_batch_writes_nothing<K: Kv>(kv: &K) {
    let mut w = Batch::new();
    for cf in Cf::ALL {
        w.put(cf, "atom", "x");
    }
    w.counter_add("ctr", 5);
    w.delete_range(Cf::Hooks, KeyRange::new("z", "a"));
    let err = kv.write(w, Durability::Sync).unwrap_err();
    assert!(matches!(err, EngineError::InvalidBatch(_)), "{err}");
    for cf in Cf::ALL {
        assert_eq!(kv.get(cf, b"atom").unwrap(), None, "{cf:?}");
    }
    assert_eq!(kv.counter(b"ctr").unwrap(), 0);
    // A refused batch does not poison: the next one commits.
    let mut w = Batch::new();
    w.put(Cf::Meta, "after", "ok");
    kv.write(w, Durability::Sync).unwrap();
    assert_eq!(kv.get(Cf::Meta, b"after").unwrap(), Some(b("ok")));
}

/// Readers never see part of a batch: a writer commits batches that set one key
/// in every column family to the same value and add 1 to a counter; readers on
/// snapshots always find the five values and the counter agreeing.
pub fn atomic_across_column_families<K: Kv>(kv: &K) {
    const ROUNDS: u64 = 300;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut checks = 0u64;
                while !done.load(Ordering::Acquire) || checks == 0 {
                    let snap = kv.snapshot();
                    let vals: Vec<Option<Bytes>> = Cf::ALL
                        .iter()
                        .map(|cf| snap.get(*cf, b"atom").unwrap())
                        .collect();
                    let round = snap.counter(b"rounds").unwrap();
                    let want = if round == 0 {
                        None
                    } else {
                        Some(Bytes::from(round.to_string()))
                    };
                    for (cf, v) in Cf::ALL.iter().zip(&vals) {
                        assert_eq!(
                            v, &want,
                            "{cf:?} disagrees with the counter at round {round}"
                        );
                    }
                    checks += 1;
                }
            });
        }
        for i in 1..=ROUNDS {
            let mut w = Batch::new();
            for cf in Cf::ALL {
                w.put(cf, "atom", i.to_string());
            }
            w.counter_add("rounds", 1);
            kv.write(w, Durability::Buffered).unwrap();
        }
        done.store(true, Ordering::Release);
    });
    assert_eq!(kv.counter(b"rounds").unwrap(), ROUNDS as i64);
}

/// What a reader saw in [`batch_whole_while_memtables_turn_over`]: batches whose
/// index entry it found and whose hook it then did not.
#[derive(Debug, Default)]
pub struct TurnoverReport {
    /// Batches written.
    pub written: u64,
    /// Index entries the reader met (each once).
    pub met: u64,
    /// Index entries met whose hook a later live get did not find.
    pub hook_missing_live: Vec<u64>,
    /// Of those, the ones a second get (right after) found.
    pub found_on_second_get: u64,
    /// Of those, the ones still missing when the writer and reader are done.
    pub missing_at_end: u64,
}

/// The dispatcher's read pattern against the Writer's, over enough bytes
/// that every memtable fills, is sealed, flushed and dropped many times: a
/// writer commits `batches` batches, each one 2 KiB value in [`Cf::Hooks`]
/// and its small entry in [`Cf::Index`] (under the prefix byte 1), plus a
/// counter add, as the Writer's ingest batch does; a reader on another thread scans
/// the index for entries it has not met and gets each one's hook. A batch is
/// atomic, so every entry met has its hook: the report lists each miss.
pub fn batch_whole_while_memtables_turn_over<K: Kv>(kv: &K, batches: u64) -> TurnoverReport {
    let done = AtomicBool::new(false);
    let value = vec![b'x'; 2048];
    let key = |i: u64| i.to_be_bytes().to_vec();
    // Index entries under 0x01 (the counter's key is in the index family too).
    let entry = |i: u64| [&[1u8][..], &i.to_be_bytes()].concat();
    let mut report = TurnoverReport {
        written: batches,
        ..TurnoverReport::default()
    };
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut r = TurnoverReport::default();
            let mut next = 0u64;
            loop {
                let finished = done.load(Ordering::Acquire);
                let page = kv
                    .scan(
                        Cf::Index,
                        &KeyRange::new(entry(next), vec![2u8]),
                        ankusa_engine::Direction::Forward,
                        256,
                    )
                    .unwrap();
                for (k, _) in &page {
                    let i = u64::from_be_bytes(k[1..9].try_into().unwrap());
                    r.met += 1;
                    next = i + 1;
                    if kv.get(Cf::Hooks, &key(i)).unwrap().is_none() {
                        if kv.get(Cf::Hooks, &key(i)).unwrap().is_some() {
                            r.found_on_second_get += 1;
                        }
                        r.hook_missing_live.push(i);
                    }
                }
                if finished && page.is_empty() {
                    return r;
                }
            }
        });
        for i in 0..batches {
            let mut w = Batch::new();
            w.put(Cf::Hooks, key(i), value.clone());
            w.put(Cf::Index, entry(i), b"due".to_vec());
            w.counter_add("pending", 1);
            kv.write(w, Durability::Buffered).unwrap();
        }
        done.store(true, Ordering::Release);
        let r = reader.join().unwrap();
        report.met = r.met;
        report.hook_missing_live = r.hook_missing_live;
        report.found_on_second_get = r.found_on_second_get;
    });
    report.missing_at_end = report
        .hook_missing_live
        .iter()
        .filter(|i| kv.get(Cf::Hooks, &key(**i)).unwrap().is_none())
        .count() as u64;
    report
}

/// Range deletes remove exactly `[start, end)` and nothing in other families.
pub fn range_delete<K: Kv>(kv: &K) {
    let mut w = Batch::new();
    for i in 0u8..20 {
        w.put(Cf::Deliveries, vec![1, i], vec![i]);
        w.put(Cf::Hooks, vec![1, i], vec![i]);
    }
    w.put(Cf::Deliveries, vec![1], "short")
        .put(Cf::Deliveries, vec![1, 5, 0xff], "long");
    kv.write(w, Durability::Sync).unwrap();
    let mut w = Batch::new();
    w.delete_range(Cf::Deliveries, KeyRange::new(vec![1, 5], vec![1, 10]));
    w.delete_range(Cf::Deliveries, KeyRange::new(vec![1, 15], vec![1, 15])); // empty: no-op
    kv.write(w, Durability::Sync).unwrap();
    let left = full(Cf::Deliveries, kv);
    let mut want: Vec<Vec<u8>> = vec![vec![1]];
    want.extend((0u8..5).chain(10..20).map(|i| vec![1, i]));
    assert_eq!(
        keys(&left),
        want.iter().map(|k| k.as_slice()).collect::<Vec<_>>()
    );
    assert_eq!(
        full(Cf::Hooks, kv).len(),
        20,
        "another column family was touched"
    );
}

/// Scans: byte order both ways, inclusive start, exclusive end, limits.
pub fn scan_bounds_order_limit<K: Kv>(kv: &K) {
    let all: Vec<Vec<u8>> = vec![
        vec![0x00],
        vec![0x10],
        vec![0x10, 0x00],
        vec![0x10, 0xff],
        vec![0x11],
        vec![0x7f, 0xff, 0xff],
        vec![0x80],
        vec![0xff],
        vec![0xff, 0xff],
    ];
    let mut w = Batch::new();
    // Insert out of order; the engine orders.
    for k in all.iter().rev() {
        w.put(Cf::Index, k.clone(), k.clone());
    }
    kv.write(w, Durability::Sync).unwrap();
    let range = KeyRange::new(vec![0x10], vec![0xff]);
    let fwd = kv.scan(Cf::Index, &range, Direction::Forward, 100).unwrap();
    let expect: Vec<&[u8]> = all[1..7].iter().map(|k| k.as_slice()).collect();
    assert_eq!(keys(&fwd), expect);
    for (k, v) in &fwd {
        assert_eq!(k, v);
    }
    let rev = kv.scan(Cf::Index, &range, Direction::Reverse, 100).unwrap();
    let mut expect_rev = expect.clone();
    expect_rev.reverse();
    assert_eq!(keys(&rev), expect_rev);
    assert!(
        kv.scan(Cf::Index, &range, Direction::Forward, 0)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        keys(&kv.scan(Cf::Index, &range, Direction::Forward, 2).unwrap()),
        expect[..2]
    );
    assert_eq!(
        keys(&kv.scan(Cf::Index, &range, Direction::Reverse, 2).unwrap()),
        expect_rev[..2]
    );
    // Prefix ranges and the all-0xff end.
    let p = kv
        .scan(
            Cf::Index,
            &KeyRange::prefix(&[0x10]),
            Direction::Forward,
            100,
        )
        .unwrap();
    assert_eq!(keys(&p), vec![&[0x10][..], &[0x10, 0x00], &[0x10, 0xff]]);
    let tail = kv
        .scan(
            Cf::Index,
            &KeyRange::new(vec![0xff], vec![0xff, 0xff, 0x00]),
            Direction::Reverse,
            9,
        )
        .unwrap();
    assert_eq!(keys(&tail), vec![&[0xff, 0xff][..], &[0xff]]);
    // Empty and inverted ranges yield nothing.
    assert!(
        kv.scan(
            Cf::Index,
            &KeyRange::new(vec![0x12], vec![0x12]),
            Direction::Forward,
            9
        )
        .unwrap()
        .is_empty()
    );
    assert!(
        kv.scan(
            Cf::Index,
            &KeyRange::new(vec![0x90], vec![0x20]),
            Direction::Reverse,
            9
        )
        .unwrap()
        .is_empty()
    );
    assert_eq!(
        kv.first(Cf::Index, &range, Direction::Reverse)
            .unwrap()
            .map(|kv| kv.0),
        Some(Bytes::from(vec![0x80]))
    );
    // Paging sees the whole range exactly once, both ways.
    let paged: Vec<KeyValue> = scan_pages(kv, Cf::Index, range.clone(), Direction::Forward, 2)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(paged, fwd);
    let paged: Vec<KeyValue> = scan_pages(kv, Cf::Index, range.clone(), Direction::Reverse, 4)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(paged, rev);
}

/// The first live key after many deleted ones (the tombstone case of a queue
/// head): found, and exactly one entry scanned.
pub fn scan_after_many_deletes<K: Kv>(kv: &K) {
    let key = |i: u32| {
        let mut k = vec![b'D'];
        k.extend_from_slice(&i.to_be_bytes());
        k
    };
    for chunk in 0..10u32 {
        let mut w = Batch::new();
        for i in chunk * 500..(chunk + 1) * 500 {
            w.put(Cf::Index, key(i), "v");
        }
        kv.write(w, Durability::Buffered).unwrap();
    }
    for chunk in 0..9u32 {
        let mut w = Batch::new();
        for i in chunk * 500..(chunk + 1) * 500 {
            w.delete(Cf::Index, key(i));
        }
        kv.write(w, Durability::Buffered).unwrap();
    }
    let before = kv.stats();
    let first = kv
        .first(Cf::Index, &KeyRange::prefix(b"D"), Direction::Forward)
        .unwrap();
    assert_eq!(first.map(|(k, _)| k.to_vec()), Some(key(4500)));
    let d = kv.stats() - before;
    assert_eq!((d.seeks, d.entries_scanned), (1, 1));
}

/// A snapshot sees the store as it was, whatever is written after it.
pub fn snapshot_isolation<K: Kv>(kv: &K) {
    let mut w = Batch::new();
    w.put(Cf::Hooks, "a", "old")
        .put(Cf::Hooks, "b", "old")
        .put(Cf::Hooks, "c", "old")
        .counter_add("n", 7);
    kv.write(w, Durability::Sync).unwrap();
    let snap = kv.snapshot();
    let mut w = Batch::new();
    w.put(Cf::Hooks, "a", "new")
        .delete(Cf::Hooks, "b")
        .delete_range(Cf::Hooks, KeyRange::new("c", "d"))
        .put(Cf::Hooks, "d", "new")
        .counter_add("n", 5);
    kv.write(w, Durability::Sync).unwrap();
    let all = KeyRange::new("a", "z");
    assert_eq!(snap.get(Cf::Hooks, b"a").unwrap(), Some(b("old")));
    assert_eq!(snap.get(Cf::Hooks, b"b").unwrap(), Some(b("old")));
    assert_eq!(
        keys(&snap.scan(Cf::Hooks, &all, Direction::Forward, 10).unwrap()),
        vec![&b"a"[..], b"b", b"c"]
    );
    assert_eq!(snap.counter(b"n").unwrap(), 7);
    assert_eq!(kv.get(Cf::Hooks, b"a").unwrap(), Some(b("new")));
    assert_eq!(
        keys(&kv.scan(Cf::Hooks, &all, Direction::Reverse, 10).unwrap()),
        vec![&b"d"[..], b"a"]
    );
    assert_eq!(kv.counter(b"n").unwrap(), 12);
    // A new snapshot sees the new state.
    assert_eq!(kv.snapshot().get(Cf::Hooks, b"b").unwrap(), None);
}

/// Counter adds: blind, signed, ordered with puts and deletes of the same key,
/// several per batch; a counter that was never added to reads 0.
pub fn counters<K: Kv>(kv: &K) {
    assert_eq!(kv.counter(b"c1").unwrap(), 0);
    let mut w = Batch::new();
    w.counter_add("c1", 5)
        .counter_add("c1", -2)
        .counter_add("c2", -9)
        .counter_add("c3", 0);
    kv.write(w, Durability::Sync).unwrap();
    assert_eq!(kv.counter(b"c1").unwrap(), 3);
    assert_eq!(kv.counter(b"c2").unwrap(), -9);
    assert_eq!(
        kv.get(Cf::Index, b"c3").unwrap(),
        None,
        "a zero add writes nothing"
    );
    let mut w = Batch::new();
    w.delete(Cf::Index, "c1").counter_add("c1", 4);
    w.put(Cf::Index, "c2", 100i64.to_be_bytes())
        .counter_add("c2", 1);
    kv.write(w, Durability::Sync).unwrap();
    assert_eq!(kv.counter(b"c1").unwrap(), 4);
    assert_eq!(kv.counter(b"c2").unwrap(), 101);
    // Counters are ordinary keys of their column family: scans see 8-byte values.
    let scanned = kv
        .scan(Cf::Index, &KeyRange::new("c", "d"), Direction::Forward, 10)
        .unwrap();
    assert_eq!(
        scanned,
        vec![
            (b("c1"), Bytes::from(4i64.to_be_bytes().to_vec())),
            (b("c2"), Bytes::from(101i64.to_be_bytes().to_vec()))
        ]
    );
    let mut w = Batch::new();
    w.delete_range(Cf::Index, KeyRange::new("c", "d"));
    kv.write(w, Durability::Sync).unwrap();
    assert_eq!(kv.counter(b"c2").unwrap(), 0);
}

/// Many writers adding to the same counters at once lose no add.
pub fn concurrent_counter_adds<K: Kv>(kv: &K) {
    const THREADS: i64 = 8;
    const BATCHES: i64 = 150;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in 0..BATCHES {
                    let mut w = Batch::new();
                    w.counter_add("total", 1)
                        .counter_add("bytes", 3)
                        .counter_add(format!("t{t}"), 1);
                    if i % 2 == 0 {
                        w.counter_add("signed", 2);
                    } else {
                        w.counter_add("signed", -1);
                    }
                    kv.write(w, Durability::Buffered).unwrap();
                }
            });
        }
    });
    assert_eq!(kv.counter(b"total").unwrap(), THREADS * BATCHES);
    assert_eq!(kv.counter(b"bytes").unwrap(), 3 * THREADS * BATCHES);
    assert_eq!(kv.counter(b"signed").unwrap(), THREADS * (BATCHES / 2));
    for t in 0..THREADS {
        assert_eq!(kv.counter(format!("t{t}").as_bytes()).unwrap(), BATCHES);
    }
}

/// Operation counts are exact and the same on every backend.
pub fn op_counts<K: Kv>(kv: &K) {
    let s0 = kv.stats();
    let mut w = Batch::new();
    w.put(Cf::Meta, "ab", "cde")
        .delete(Cf::Meta, "x")
        .counter_add("n", 1);
    let size = w.size_bytes();
    assert_eq!(size, 5 + 1 + 9);
    kv.write(w, Durability::Sync).unwrap();
    kv.get(Cf::Meta, b"ab").unwrap();
    kv.counter(b"n").unwrap();
    kv.scan(Cf::Meta, &KeyRange::new("a", "b"), Direction::Forward, 10)
        .unwrap();
    kv.snapshot()
        .scan(Cf::Meta, &KeyRange::new("a", "z"), Direction::Reverse, 10)
        .unwrap();
    let d = kv.stats() - s0;
    assert_eq!(d.batches, 1);
    assert_eq!(d.bytes_written, size);
    assert_eq!(d.gets, 2);
    assert_eq!(d.seeks, 2);
    assert_eq!(d.entries_scanned, 2);
}

/// Everything written `Sync` (puts, deletes, range deletes, counters) is there
/// after the store is closed and opened again. Durable backends only.
pub fn reopen_durability<K: Kv>(dir: &Path, open: impl Fn(&Path) -> K) {
    {
        let kv = open(dir);
        let mut w = Batch::new();
        for i in 0u32..100 {
            w.put(Cf::Hooks, i.to_be_bytes(), vec![7u8; 1024]);
        }
        w.counter_add("n", 100);
        kv.write(w, Durability::Sync).unwrap();
        let mut w = Batch::new();
        w.delete(Cf::Hooks, 0u32.to_be_bytes())
            .delete_range(
                Cf::Hooks,
                KeyRange::new(10u32.to_be_bytes(), 20u32.to_be_bytes()),
            )
            .counter_add("n", -11)
            .put(Cf::Meta, "format", "2");
        kv.write(w, Durability::Sync).unwrap();
        let mut w = Batch::new();
        w.put(Cf::Meta, "split", "1");
        kv.write(w, Durability::Buffered).unwrap();
        kv.sync().unwrap();
        let mut w = Batch::new();
        w.put(Cf::Meta, "buffered", "1");
        kv.write(w, Durability::Buffered).unwrap();
    }
    let kv = open(dir);
    let hooks = full(Cf::Hooks, &kv);
    assert_eq!(hooks.len(), 89);
    assert!(hooks.iter().all(|(_, v)| v.len() == 1024));
    assert_eq!(kv.get(Cf::Hooks, &0u32.to_be_bytes()).unwrap(), None);
    assert_eq!(kv.get(Cf::Hooks, &15u32.to_be_bytes()).unwrap(), None);
    assert_eq!(
        kv.get(Cf::Hooks, &20u32.to_be_bytes())
            .unwrap()
            .map(|v| v.len()),
        Some(1024)
    );
    assert_eq!(kv.counter(b"n").unwrap(), 89);
    assert_eq!(kv.get(Cf::Meta, b"format").unwrap(), Some(b("2")));
    assert_eq!(kv.get(Cf::Meta, b"split").unwrap(), Some(b("1")));
    // A clean close keeps Buffered writes too.
    assert_eq!(kv.get(Cf::Meta, b"buffered").unwrap(), Some(b("1")));
}

/// A random op over a small key space, for [`model_equivalence`].
pub fn arb_op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let cf = prop_oneof![Just(Cf::Hooks), Just(Cf::Index)];
    let key = proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0xff)], 0..3);
    prop_oneof![
        4 => (cf.clone(), key.clone(), proptest::collection::vec(any::<u8>(), 0..4))
            .prop_map(|(cf, key, value)| Op::Put { cf, key, value }),
        2 => (cf.clone(), key.clone()).prop_map(|(cf, key)| Op::Delete { cf, key }),
        1 => (cf, key.clone(), key.clone()).prop_map(|(cf, a, b)| {
            let (start, end) = if a <= b { (a, b) } else { (b, a) };
            Op::DeleteRange { cf, range: KeyRange::new(start, end) }
        }),
        2 => (key, -3i64..4).prop_map(|(mut key, delta)| {
            key.insert(0, b'C'); // counters live apart from puts so values stay 8 bytes
            Op::CounterAdd { key, delta }
        }),
    ]
}

/// The shrunk `model_equivalence` case of the summed counter adds
/// (`Batch::into_ops_coalesced`): +2 and -2 to one counter in one batch leave
/// the counter present at 0, as the model's adds one by one do, and a batch
/// that adds to two counters several times, beside other keys, sums each.
pub fn counter_adds_of_one_batch_netting_zero<K: Kv>(kv: &K) {
    let mut b = Batch::new();
    b.counter_add(b"C".to_vec(), 2)
        .counter_add(b"C".to_vec(), -2);
    kv.write(b, Durability::Buffered).unwrap();
    assert_eq!(
        kv.get(Cf::Index, b"C").unwrap().as_deref(),
        Some(&0i64.to_be_bytes()[..])
    );
    assert_eq!(kv.counter(b"C").unwrap(), 0);
    let mut b = Batch::new();
    for i in 0..64i64 {
        b.counter_add(b"Cpending".to_vec(), 1)
            .put(Cf::Index, format!("k{i:02}"), b"v".to_vec())
            .counter_add(b"Cbytes".to_vec(), i);
    }
    kv.write(b, Durability::Buffered).unwrap();
    assert_eq!(kv.counter(b"Cpending").unwrap(), 64);
    assert_eq!(kv.counter(b"Cbytes").unwrap(), (0..64).sum::<i64>());
    assert_eq!(
        kv.scan(
            Cf::Index,
            &KeyRange::new(b"k".to_vec(), b"l".to_vec()),
            Direction::Forward,
            100
        )
        .unwrap()
        .len(),
        64
    );
}

/// Applies `batches` to the model and to `kv`; after every batch both stores
/// hold the same bytes in every column family and give the same scans.
pub fn model_equivalence<K: Kv>(kv: &K, batches: Vec<Vec<Op>>) {
    let model = MemoryKv::new();
    for ops in batches {
        let batch = Batch::from(ops);
        let a = model
            .write(batch.clone(), Durability::Buffered)
            .map_err(|e| e.to_string());
        let b = kv
            .write(batch, Durability::Buffered)
            .map_err(|e| e.to_string());
        assert_eq!(a.is_ok(), b.is_ok(), "model said {a:?}, backend said {b:?}");
        assert_eq!(dump(&model), dump(kv));
        let r = KeyRange::new(vec![0], vec![1, 0xff]);
        for dir in [Direction::Forward, Direction::Reverse] {
            assert_eq!(
                model.scan(Cf::Index, &r, dir, 3).unwrap(),
                kv.scan(Cf::Index, &r, dir, 3).unwrap()
            );
        }
    }
}

/// Expands to the `#[test]`s of the suite for one backend.
///
/// `$open` is an expression of type `fn(&Path) -> K`; `durable` adds the tests
/// that reopen the store.
#[macro_export]
macro_rules! conformance_suite {
    ($open:expr) => {
        fn fresh() -> (tempfile::TempDir, impl ankusa_engine::Kv) {
            let dir = tempfile::tempdir().unwrap();
            let kv = ($open)(dir.path());
            (dir, kv)
        }
        #[test]
        fn put_get_delete() {
            let (_d, kv) = fresh();
            $crate::put_get_delete(&kv)
        }
        #[test]
        fn batch_applies_in_order() {
            let (_d, kv) = fresh();
            $crate::batch_applies_in_order(&kv)
        }
        #[test]
        fn invalid_batch_writes_nothing() {
            let (_d, kv) = fresh();
            $crate::invalid_batch_writes_nothing(&kv)
        }
        #[test]
        fn atomic_across_column_families() {
            let (_d, kv) = fresh();
            $crate::atomic_across_column_families(&kv)
        }
        #[test]
        fn batch_whole_while_memtables_turn_over() {
            let (_d, kv) = fresh();
            let r = $crate::batch_whole_while_memtables_turn_over(&kv, 20_000);
            assert_eq!(r.met, 20_000, "{r:?}");
            assert!(
                r.hook_missing_live.is_empty(),
                "index entries met without their hook: {r:?}"
            );
        }
        #[test]
        fn range_delete() {
            let (_d, kv) = fresh();
            $crate::range_delete(&kv)
        }
        #[test]
        fn scan_bounds_order_limit() {
            let (_d, kv) = fresh();
            $crate::scan_bounds_order_limit(&kv)
        }
        #[test]
        fn scan_after_many_deletes() {
            let (_d, kv) = fresh();
            $crate::scan_after_many_deletes(&kv)
        }
        #[test]
        fn snapshot_isolation() {
            let (_d, kv) = fresh();
            $crate::snapshot_isolation(&kv)
        }
        #[test]
        fn counters() {
            let (_d, kv) = fresh();
            $crate::counters(&kv)
        }
        #[test]
        fn concurrent_counter_adds() {
            let (_d, kv) = fresh();
            $crate::concurrent_counter_adds(&kv)
        }
        #[test]
        fn op_counts() {
            let (_d, kv) = fresh();
            $crate::op_counts(&kv)
        }
        #[test]
        fn counter_adds_of_one_batch_netting_zero() {
            let (_d, kv) = fresh();
            $crate::counter_adds_of_one_batch_netting_zero(&kv)
        }
        proptest::proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
            #[test]
            fn model_equivalence(batches in proptest::collection::vec(
                proptest::collection::vec($crate::arb_op(), 1..6), 1..12)) {
                let (_d, kv) = fresh();
                $crate::model_equivalence(&kv, batches);
            }
        }
    };
    ($open:expr, durable) => {
        $crate::conformance_suite!($open);
        #[test]
        fn reopen_durability() {
            let dir = tempfile::tempdir().unwrap();
            $crate::reopen_durability(dir.path(), $open)
        }
    };
}

/// The counter the crash test's batches add to.
pub const CRASH_COUNTER: &[u8] = b"crash/batches";

/// The key batch `i` of the crash test puts in every column family.
pub fn crash_key(i: i64) -> Vec<u8> {
    let mut k = b"crash/".to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Checks a store the crash child was killed over: the counter says `n`
/// batches, and every column family holds exactly the keys of batches `0..n`
/// with their full values (no torn batch), and `n > last_acked`.
/// Returns `n`.
pub fn check_crashed_store(kv: &impl Read, last_acked: Option<i64>) -> i64 {
    let n = kv.counter(CRASH_COUNTER).unwrap();
    for cf in Cf::ALL {
        let range = KeyRange::prefix(b"crash/");
        let found: Vec<KeyValue> = scan_pages(kv, cf, range, Direction::Forward, 1000)
            .collect::<Result<_, _>>()
            .unwrap();
        // The counter key itself lives in the index family under the same prefix.
        let found: Vec<KeyValue> = found
            .into_iter()
            .filter(|(k, _)| k.as_ref() != CRASH_COUNTER)
            .collect();
        assert_eq!(
            found.len() as i64,
            n,
            "{cf:?} holds {} batch keys, the counter says {n}",
            found.len()
        );
        for (i, (k, v)) in found.iter().enumerate() {
            assert_eq!(
                k.as_ref(),
                crash_key(i as i64).as_slice(),
                "{cf:?}: batch {i} missing"
            );
            assert_eq!(
                v.as_ref(),
                vec![(i % 251) as u8; 256].as_slice(),
                "{cf:?}: batch {i} torn"
            );
        }
    }
    if let Some(acked) = last_acked {
        assert!(
            n > acked,
            "batch {acked} was acknowledged but the store holds only {n} batches"
        );
    }
    n
}
