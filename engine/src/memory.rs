//! The in-memory backend: the model the other backends are checked against.
//!
//! Five `BTreeMap`s behind one lock, copy-on-write so a snapshot is an `Arc`
//! clone. Obviously correct before fast: ops apply one after the other under the
//! write lock, which is exactly the contract of [`Kv::write`]. Nothing survives
//! the process; durability options are accepted and ignored.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::{
    Batch, Cf, Direction, Durability, EngineError, KeyRange, KeyValue, Kv, Op, OpCounters, OpStats,
    Poison, Read, decode_counter, encode_counter,
};

const BACKEND: &str = "memory";

type Map = BTreeMap<Vec<u8>, Bytes>;

#[derive(Clone, Debug, Default)]
struct State {
    cfs: [Map; 5],
}

/// What an op replaced, so a batch that fails halfway can be rolled back.
type Undo = Vec<(usize, Vec<u8>, Option<Bytes>)>;

impl State {
    fn set(&mut self, cf: usize, key: Vec<u8>, value: Option<Bytes>, undo: &mut Undo) {
        let old = match value {
            Some(v) => self.cfs[cf].insert(key.clone(), v),
            None => self.cfs[cf].remove(&key),
        };
        undo.push((cf, key, old));
    }

    fn apply(&mut self, op: Op, undo: &mut Undo) -> Result<(), EngineError> {
        match op {
            Op::Put { cf, key, value } => self.set(cf.index(), key, Some(Bytes::from(value)), undo),
            Op::Delete { cf, key } => self.set(cf.index(), key, None, undo),
            Op::DeleteRange { cf, range } => {
                let doomed: Vec<Vec<u8>> = self.cfs[cf.index()]
                    .range::<[u8], _>((
                        Bound::Included(&range.start[..]),
                        Bound::Excluded(&range.end[..]),
                    ))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in doomed {
                    self.set(cf.index(), k, None, undo);
                }
            }
            Op::CounterAdd { key, delta } => {
                let cf = crate::COUNTER_CF.index();
                let old = match self.cfs[cf].get(&key) {
                    Some(v) => decode_counter(&key, v)?,
                    None => 0,
                };
                let new = Bytes::copy_from_slice(&encode_counter(old.wrapping_add(delta)));
                self.set(cf, key, Some(new), undo);
            }
        }
        Ok(())
    }

    fn rollback(&mut self, undo: Undo) {
        for (cf, key, old) in undo.into_iter().rev() {
            match old {
                Some(v) => self.cfs[cf].insert(key, v),
                None => self.cfs[cf].remove(&key),
            };
        }
    }

    fn get(&self, cf: Cf, key: &[u8]) -> Option<Bytes> {
        self.cfs[cf.index()].get(key).cloned()
    }

    fn scan(&self, cf: Cf, range: &KeyRange, dir: Direction, limit: usize) -> Vec<KeyValue> {
        if range.is_empty() || limit == 0 {
            return Vec::new();
        }
        let iter = self.cfs[cf.index()].range::<[u8], _>((
            Bound::Included(&range.start[..]),
            Bound::Excluded(&range.end[..]),
        ));
        let to_kv = |(k, v): (&Vec<u8>, &Bytes)| (Bytes::copy_from_slice(k), v.clone());
        match dir {
            Direction::Forward => iter.take(limit).map(to_kv).collect(),
            Direction::Reverse => iter.rev().take(limit).map(to_kv).collect(),
        }
    }
}

/// The in-memory store. Cheap to create; used by the model tests and as the
/// reference in the backend-equivalence tests.
#[derive(Debug, Default)]
pub struct MemoryKv {
    state: RwLock<Arc<State>>,
    counters: OpCounters,
    poison: Poison,
    fail_next_write: AtomicBool,
}

impl MemoryKv {
    /// An empty store.
    pub fn new() -> Self {
        MemoryKv::default()
    }

    /// Makes the next [`Kv::write`] fail as a real engine's failed commit does
    /// (nothing applied, handle poisoned). For tests of the crash path.
    pub fn inject_write_failure(&self) {
        self.fail_next_write.store(true, Ordering::SeqCst);
    }

    fn current(&self) -> Arc<State> {
        match self.state.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }
}

/// A point-in-time view of a [`MemoryKv`].
#[derive(Debug)]
pub struct MemorySnapshot<'a> {
    state: Arc<State>,
    counters: &'a OpCounters,
}

impl Read for MemorySnapshot<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        self.counters.get();
        Ok(self.state.get(cf, key))
    }
    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        let out = self.state.scan(cf, range, dir, limit);
        self.counters.scan(out.len());
        Ok(out)
    }
}

impl Read for MemoryKv {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        self.counters.get();
        Ok(self.current().get(cf, key))
    }
    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        let out = self.current().scan(cf, range, dir, limit);
        self.counters.scan(out.len());
        Ok(out)
    }
}

impl Kv for MemoryKv {
    type Snapshot<'a> = MemorySnapshot<'a>;

    fn snapshot(&self) -> MemorySnapshot<'_> {
        MemorySnapshot {
            state: self.current(),
            counters: &self.counters,
        }
    }

    /// Nothing to make durable; fails only on a poisoned handle.
    fn sync(&self) -> Result<(), EngineError> {
        self.poison.check(BACKEND)
    }

    fn write(&self, batch: Batch, _durability: Durability) -> Result<(), EngineError> {
        self.poison.check(BACKEND)?;
        batch.validate()?;
        let size = batch.size_bytes();
        let mut guard = match self.state.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if self.fail_next_write.swap(false, Ordering::SeqCst) {
            let e = EngineError::Backend {
                backend: BACKEND,
                op: "write",
                kind: crate::ErrorKind::Other,
                message: "injected write failure".into(),
            };
            self.poison.set_by(&e);
            return Err(e);
        }
        // Copy-on-write: the maps are cloned only while a snapshot holds them.
        // A failing op (a corrupt counter) rolls back what the batch applied, so
        // the store is left as it was, as a real engine's failed batch leaves it.
        let state = Arc::make_mut(&mut guard);
        let mut undo = Undo::new();
        for op in batch.into_ops() {
            if let Err(e) = state.apply(op, &mut undo) {
                state.rollback(undo);
                return Err(e);
            }
        }
        self.counters.batch(size);
        Ok(())
    }

    fn stats(&self) -> OpStats {
        self.counters.read()
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }
}
