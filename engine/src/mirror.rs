//! [`CounterMirror`]: a store whose chosen counters are also kept in memory,
//! so that reading them costs no engine read.
//!
//! The edge checks the queue bounds on every hook it takes (docs/design.md
//! section 5, "Edge", step 8): four counter reads per hook (the tenant's and
//! the node's pending rows and bytes). On RocksDB each is a get that folds the
//! counter's merge operands (the ingest profile at 256 connections in
//! benches/load/RESULTS.md: `Edge::reserve` 6.9% of the relay). Those counters
//! change only by the adds of committed batches, so a mirror that applies each
//! committed batch's adds to an in-memory copy reads the same values without
//! the store.
//!
//! # What a read returns
//! A mirrored counter reads the value it was built with plus every add of
//! every batch this wrapper has committed since: the store's value, except
//! while a commit is under way: its increases are applied before the store
//! write and its decreases after it returns, so a reader beside a commit may
//! see a value above the store's, never below it (a bound is then checked
//! against a little more than is pending, never less).
//!
//! A counter stops being mirrored (reads go to the store from then on) when a
//! batch puts, deletes or range-deletes its key (no running relay does; the
//! offline `store check --repair-counters` does), or when a commit touching it
//! fails other than by refusing the batch (what a failed commit left visible
//! is the store's to say).
//!
//! Build it while nothing else writes to the store (at start-up): the values
//! it starts with are read once, and a write that went past the wrapper would
//! never reach the mirror. Every later write must go through it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use crate::{
    Batch, COUNTER_CF, Cf, Direction, Durability, EngineError, KeyRange, KeyValue, Kv, Op, OpStats,
    Read,
};

/// One mirrored counter.
#[derive(Debug)]
struct Mirrored {
    value: AtomicI64,
    /// False once a put, delete or failed commit made the mirror unsure.
    live: AtomicBool,
}

/// A [`Kv`] that reads the counters it was built with from memory
/// (module docs: what a read returns, what turns a counter back to the store).
///
/// Everything else goes to the wrapped store unchanged: gets (also a
/// [`Read::get`] of a counter key), scans, snapshots (whose counters are the
/// store's at the snapshot), syncs, [`Kv::stats`] (a mirrored counter read is
/// not a get of the store and is not counted).
#[derive(Debug)]
pub struct CounterMirror<K> {
    inner: Arc<K>,
    counters: HashMap<Vec<u8>, Mirrored>,
}

impl<K: Kv> CounterMirror<K> {
    /// Wraps `inner`, reading each counter of `keys` (counter keys, as
    /// [`Read::counter`] takes them) once from it.
    ///
    /// # Errors
    /// As [`Read::counter`]: a failed read, a stored value of the wrong width.
    pub fn new(
        inner: Arc<K>,
        keys: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<Self, EngineError> {
        let mut counters = HashMap::new();
        for key in keys {
            let value = inner.counter(&key)?;
            counters.insert(
                key,
                Mirrored {
                    value: AtomicI64::new(value),
                    live: AtomicBool::new(true),
                },
            );
        }
        Ok(CounterMirror { inner, counters })
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<K> {
        &self.inner
    }

    /// Whether reads of `key`'s counter come from memory (it was given to
    /// [`CounterMirror::new`] and nothing has turned it back to the store).
    pub fn mirrors(&self, key: &[u8]) -> bool {
        self.counters
            .get(key)
            .is_some_and(|m| m.live.load(Ordering::Acquire))
    }
}

impl<K: Kv> Read for CounterMirror<K> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<bytes::Bytes>, EngineError> {
        self.inner.get(cf, key)
    }
    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        self.inner.scan(cf, range, dir, limit)
    }
    fn counter(&self, key: &[u8]) -> Result<i64, EngineError> {
        match self.counters.get(key) {
            Some(m) if m.live.load(Ordering::Acquire) => Ok(m.value.load(Ordering::Acquire)),
            _ => self.inner.counter(key),
        }
    }
}

impl<K: Kv> Kv for CounterMirror<K> {
    type Snapshot<'a> = K::Snapshot<'a>;

    fn snapshot(&self) -> K::Snapshot<'_> {
        self.inner.snapshot()
    }

    fn write(&self, batch: Batch, durability: Durability) -> Result<(), EngineError> {
        if self.counters.is_empty() {
            return self.inner.write(batch, durability);
        }
        let mut adds: Vec<(&Mirrored, i64)> = Vec::new();
        let mut touched: Vec<&Mirrored> = Vec::new();
        for op in batch.ops() {
            match op {
                Op::CounterAdd { key, delta } => {
                    if let Some(m) = self.counters.get(key.as_slice()) {
                        adds.push((m, *delta));
                    }
                }
                Op::Put { cf, key, .. } | Op::Delete { cf, key } if *cf == COUNTER_CF => {
                    if let Some(m) = self.counters.get(key.as_slice()) {
                        touched.push(m);
                    }
                }
                Op::DeleteRange { cf, range } if *cf == COUNTER_CF => {
                    touched.extend(
                        self.counters
                            .iter()
                            .filter(|(k, _)| range.contains(k))
                            .map(|(_, m)| m),
                    );
                }
                Op::Put { .. } | Op::Delete { .. } | Op::DeleteRange { .. } => {}
            }
        }
        // Before the write: from the moment the store may hold the put, the
        // counter is read from the store.
        for m in &touched {
            m.live.store(false, Ordering::Release);
        }
        // Increases before the write, decreases after it: the mirror never
        // reads below the store, also while a row made outside the edge's
        // reservations (a revive, a replay, a release) is delivered and its
        // -1 committed before this batch's +1 reached the mirror.
        for (m, delta) in adds.iter().filter(|(_, d)| *d > 0) {
            m.value.fetch_add(*delta, Ordering::AcqRel);
        }
        match self.inner.write(batch, durability) {
            Ok(()) => {
                for (m, delta) in adds.iter().filter(|(_, d)| *d < 0) {
                    m.value.fetch_add(*delta, Ordering::AcqRel);
                }
                Ok(())
            }
            // Refused before anything was written: the increases go back.
            Err(e @ EngineError::InvalidBatch(_)) => {
                for (m, delta) in adds.iter().filter(|(_, d)| *d > 0) {
                    m.value.fetch_sub(*delta, Ordering::AcqRel);
                }
                Err(e)
            }
            Err(e) => {
                for (m, _) in adds {
                    m.live.store(false, Ordering::Release);
                }
                Err(e)
            }
        }
    }

    fn sync(&self) -> Result<(), EngineError> {
        self.inner.sync()
    }

    fn stats(&self) -> OpStats {
        self.inner.stats()
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultKv;
    use crate::memory::MemoryKv;

    const PENDING: &[u8] = b"c/pending";
    const BYTES: &[u8] = b"c/bytes";
    const OTHER: &[u8] = b"c/other";

    fn adds(pending: i64, bytes: i64, other: i64) -> Batch {
        let mut b = Batch::new();
        b.counter_add(PENDING, pending)
            .counter_add(BYTES, bytes)
            .counter_add(OTHER, other);
        b.put(Cf::Hooks, b"h1".to_vec(), b"envelope".to_vec());
        b
    }

    fn mirror_of(kv: MemoryKv) -> (Arc<MemoryKv>, CounterMirror<MemoryKv>) {
        let kv = Arc::new(kv);
        let m = CounterMirror::new(Arc::clone(&kv), [PENDING.to_vec(), BYTES.to_vec()])
            .expect("mirror");
        (kv, m)
    }

    #[test]
    fn mirrored_counters_read_the_stores_values_without_a_get() {
        let kv = MemoryKv::new();
        kv.write(adds(3, 300, 7), Durability::Sync).expect("write");
        let (store, m) = mirror_of(kv);
        assert_eq!(
            m.counter(PENDING).expect("read"),
            3,
            "the start value is read from the store"
        );
        m.write(adds(2, 200, 1), Durability::Buffered)
            .expect("write");
        m.write(adds(-4, -400, 0), Durability::Sync).expect("write");
        let before = store.stats().gets;
        assert_eq!(
            (
                m.counter(PENDING).expect("read"),
                m.counter(BYTES).expect("read")
            ),
            (1, 100)
        );
        assert_eq!(
            store.stats().gets,
            before,
            "a mirrored read is no get of the store"
        );
        assert_eq!(
            m.counter(OTHER).expect("read"),
            8,
            "a counter not mirrored is the store's"
        );
        assert_eq!(store.stats().gets, before + 1);
        assert_eq!(
            (
                store.counter(PENDING).expect("read"),
                store.counter(BYTES).expect("read")
            ),
            (1, 100)
        );
        assert!(
            m.get(Cf::Hooks, b"h1").expect("get").is_some(),
            "the rest of the batch reached the store"
        );
    }

    #[test]
    fn writers_on_many_threads_leave_the_mirror_equal_to_the_store() {
        let (store, m) = mirror_of(MemoryKv::new());
        std::thread::scope(|s| {
            for t in 0..4i64 {
                let m = &m;
                s.spawn(move || {
                    for i in 0..500i64 {
                        let delta = if (i + t) % 3 == 0 { -1 } else { 2 };
                        m.write(adds(delta, delta * 100, 0), Durability::Buffered)
                            .expect("write");
                    }
                });
            }
        });
        assert_eq!(
            m.counter(PENDING).expect("read"),
            store.counter(PENDING).expect("read")
        );
        assert_eq!(
            m.counter(BYTES).expect("read"),
            store.counter(BYTES).expect("read")
        );
        assert_ne!(
            store.counter(PENDING).expect("read"),
            0,
            "the writers added something"
        );
    }

    #[test]
    fn a_put_of_a_mirrored_counter_turns_it_back_to_the_store() {
        let (_store, m) = mirror_of(MemoryKv::new());
        m.write(adds(5, 500, 0), Durability::Sync).expect("write");
        let mut fix = Batch::new();
        fix.put(
            COUNTER_CF,
            PENDING.to_vec(),
            crate::encode_counter(42).to_vec(),
        );
        m.write(fix, Durability::Sync).expect("write");
        assert!(!m.mirrors(PENDING) && m.mirrors(BYTES));
        assert_eq!(
            m.counter(PENDING).expect("read"),
            42,
            "the put's value, read from the store"
        );
        m.write(adds(1, 1, 0), Durability::Sync).expect("write");
        assert_eq!(
            (
                m.counter(PENDING).expect("read"),
                m.counter(BYTES).expect("read")
            ),
            (43, 501)
        );
        let mut wipe = Batch::new();
        wipe.delete_range(COUNTER_CF, KeyRange::prefix(b"c/"));
        m.write(wipe, Durability::Sync).expect("write");
        assert!(!m.mirrors(BYTES));
        assert_eq!(m.counter(BYTES).expect("read"), 0);
    }

    #[test]
    fn a_failed_commit_turns_its_counters_back_to_the_store() {
        let kv = Arc::new(FaultKv::transient(MemoryKv::new()));
        let m = CounterMirror::new(Arc::clone(&kv), [PENDING.to_vec(), BYTES.to_vec()])
            .expect("mirror");
        m.write(adds(2, 20, 0), Durability::Sync).expect("write");
        kv.fail_next_writes(1);
        assert!(matches!(
            m.write(adds(9, 0, 0), Durability::Sync),
            Err(EngineError::Backend { .. })
        ));
        assert!(
            !m.mirrors(PENDING),
            "what a failed commit left is the store's to say"
        );
        assert!(
            m.mirrors(BYTES),
            "a zero add is no op of the batch: BYTES was not in it"
        );
        assert_eq!(
            m.counter(PENDING).expect("read"),
            2,
            "the injected failure applied nothing"
        );
        // A batch refused before anything is written keeps the mirror.
        let mut refused = adds(0, 7, 0);
        refused.put(
            Cf::Hooks,
            vec![0u8; crate::MAX_KEY_BYTES + 1],
            b"v".to_vec(),
        );
        assert!(matches!(
            m.write(refused, Durability::Sync),
            Err(EngineError::InvalidBatch(_))
        ));
        assert!(m.mirrors(BYTES));
        assert_eq!(m.counter(BYTES).expect("read"), 20);
    }
}
