//! Store fault injection for tests: [`FaultKv`] wraps any [`Kv`] and fails
//! chosen commits or syncs, or holds syncs until a test lets them go.
//!
//! What an injected failure looks like to the caller is what a real engine's
//! failure looks like: an injected write failure applies nothing and returns
//! [`EngineError::Backend`] with `op: "write"`; an injected sync failure
//! returns it with `op: "sync"` (what was written before it stays visible, as
//! on a real engine, whose data may or may not have reached the disk). After
//! an injected failure the wrapper poisons itself like a real handle
//! ([`EngineError::Poisoned`] for every later write and sync) unless it was
//! built with [`FaultKv::transient`], whose failures pass: the way to test a
//! caller that retries, or a store that fails "for a while" (a full disk
//! that gets space back).
//!
//! A write can also be chosen by what it writes ([`FaultKv::fail_write_where`]:
//! the first batch a predicate accepts), so a test fails exactly the commit it
//! means (one pipeline flush, say) whatever other writes run beside it.
//!
//! Reads are never failed: they go to the wrapped store unchanged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use crate::{
    Batch, Cf, Direction, Durability, EngineError, KeyRange, KeyValue, Kv, OpStats, Poison, Read,
};

const BACKEND: &str = "fault";

/// Chooses a batch to fail ([`FaultKv::fail_write_where`]).
type BatchFilter = Box<dyn Fn(&Batch) -> bool + Send + Sync>;

/// A [`Kv`] that fails chosen writes and syncs of the store it wraps.
///
/// Counting: [`FaultKv::writes`] and [`FaultKv::syncs`] count calls (injected
/// failures included, calls refused because the wrapper is poisoned not);
/// [`Kv::stats`] is the wrapped store's.
pub struct FaultKv<K> {
    inner: K,
    transient: bool,
    poison: Poison,
    /// Writes to fail: the next `n` from the moment it was set.
    fail_writes: AtomicU64,
    /// The next write whose batch this accepts fails (then it is cleared).
    fail_where: Mutex<Option<BatchFilter>>,
    /// Syncs to fail, likewise.
    fail_syncs: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
    syncs_started: AtomicU64,
    /// `None`: syncs run at once; `Some(n)`: `n` more syncs may run, the rest
    /// wait ([`FaultKv::hold_syncs`]).
    sync_permits: Mutex<Option<u64>>,
    permits_changed: Condvar,
}

impl<K: std::fmt::Debug> std::fmt::Debug for FaultKv<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultKv")
            .field("inner", &self.inner)
            .field("transient", &self.transient)
            .field("fail_writes", &self.fail_writes)
            .field("fail_syncs", &self.fail_syncs)
            .field("writes", &self.writes)
            .field("syncs", &self.syncs)
            .finish_non_exhaustive()
    }
}

impl<K: Kv> FaultKv<K> {
    /// Wraps `inner`; an injected failure poisons the wrapper, as a real
    /// engine's failed commit or sync poisons its handle.
    pub fn new(inner: K) -> Self {
        FaultKv {
            inner,
            transient: false,
            poison: Poison::default(),
            fail_writes: AtomicU64::new(0),
            fail_where: Mutex::new(None),
            fail_syncs: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            syncs_started: AtomicU64::new(0),
            sync_permits: Mutex::new(None),
            permits_changed: Condvar::new(),
        }
    }

    /// Wraps `inner`; injected failures do not poison: the next write or sync
    /// after the chosen ones succeeds.
    pub fn transient(inner: K) -> Self {
        FaultKv {
            transient: true,
            ..FaultKv::new(inner)
        }
    }

    /// The wrapped store (reads and writes through it bypass the faults).
    pub fn inner(&self) -> &K {
        &self.inner
    }

    /// The wrapped store, the wrapper gone: what a restart after a failure
    /// opens again (an injected failure never poisons the wrapped store, only
    /// the wrapper).
    pub fn into_inner(self) -> K {
        self.inner
    }

    /// The next `n` writes fail (each applies nothing).
    pub fn fail_next_writes(&self, n: u64) {
        self.fail_writes.store(n, Ordering::SeqCst);
    }

    /// The first later write whose batch `chosen` accepts fails (it applies
    /// nothing, as [`FaultKv::fail_next_writes`]); the writes before it, and
    /// every write after it on a transient wrapper, go through. A second call
    /// replaces a choice not yet used. `chosen` runs for each write until it
    /// accepts one, under a lock: keep it cheap and never write from it.
    pub fn fail_write_where(&self, chosen: impl Fn(&Batch) -> bool + Send + Sync + 'static) {
        *self
            .fail_where
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(chosen));
    }

    /// Whether a choice of [`FaultKv::fail_write_where`] is still waiting for
    /// its batch.
    pub fn write_choice_pending(&self) -> bool {
        self.fail_where
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The next `n` syncs fail (and so does a `Durability::Sync` write, whose
    /// batch is then visible but was not made durable).
    pub fn fail_next_syncs(&self, n: u64) {
        self.fail_syncs.store(n, Ordering::SeqCst);
    }

    /// From now on a sync (and a `Durability::Sync` write) waits, after it
    /// counts in [`FaultKv::syncs_started`], until [`FaultKv::release_syncs`]
    /// lets it run.
    pub fn hold_syncs(&self) {
        *self.permits() = Some(0);
    }

    /// Lets `n` more held syncs run.
    pub fn release_syncs(&self, n: u64) {
        let mut p = self.permits();
        if let Some(left) = p.as_mut() {
            *left += n;
        }
        self.permits_changed.notify_all();
    }

    /// Stops holding syncs: every waiting and later sync runs.
    pub fn stop_holding_syncs(&self) {
        *self.permits() = None;
        self.permits_changed.notify_all();
    }

    /// Calls of [`Kv::write`] so far (each counts once it passed the poison
    /// check).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Syncs (including those of `Durability::Sync` writes) that have
    /// started, held ones included.
    pub fn syncs_started(&self) -> u64 {
        self.syncs_started.load(Ordering::SeqCst)
    }

    /// Syncs that have returned (successfully or not).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    fn permits(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.sync_permits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn take(counter: &AtomicU64) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Whether `batch` is the one [`FaultKv::fail_write_where`] waits for
    /// (the choice is then used up).
    fn chosen(&self, batch: &Batch) -> bool {
        let mut f = self
            .fail_where
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if f.as_ref().is_some_and(|f| f(batch)) {
            *f = None;
            return true;
        }
        false
    }

    fn injected(&self, op: &'static str) -> EngineError {
        let e = EngineError::Backend {
            backend: BACKEND,
            op,
            kind: crate::ErrorKind::Other,
            message: format!("injected {op} failure"),
        };
        if !self.transient {
            self.poison.set_by(&e);
        }
        e
    }

    fn sync_inner(&self) -> Result<(), EngineError> {
        self.syncs_started.fetch_add(1, Ordering::SeqCst);
        {
            let mut p = self.permits();
            while p.is_some_and(|left| left == 0) {
                p = self
                    .permits_changed
                    .wait(p)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if let Some(left) = p.as_mut() {
                *left -= 1;
            }
        }
        let result = if FaultKv::<K>::take(&self.fail_syncs) {
            Err(self.injected("sync"))
        } else {
            self.inner.sync()
        };
        self.syncs.fetch_add(1, Ordering::SeqCst);
        result
    }
}

impl<K: Kv> Read for FaultKv<K> {
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
        self.inner.counter(key)
    }
}

impl<K: Kv> Kv for FaultKv<K> {
    type Snapshot<'a> = K::Snapshot<'a>;

    fn snapshot(&self) -> K::Snapshot<'_> {
        self.inner.snapshot()
    }

    fn write(&self, batch: Batch, durability: Durability) -> Result<(), EngineError> {
        self.poison.check(BACKEND)?;
        self.writes.fetch_add(1, Ordering::SeqCst);
        if FaultKv::<K>::take(&self.fail_writes) || self.chosen(&batch) {
            return Err(self.injected("write"));
        }
        self.inner.write(batch, Durability::Buffered)?;
        match durability {
            Durability::Buffered => Ok(()),
            Durability::Sync => self.sync_inner(),
        }
    }

    fn sync(&self) -> Result<(), EngineError> {
        self.poison.check(BACKEND)?;
        self.sync_inner()
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
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::memory::MemoryKv;

    fn put(k: &str) -> Batch {
        let mut b = Batch::new();
        b.put(Cf::Meta, k.to_owned(), "1");
        b
    }

    #[test]
    fn a_failed_write_applies_nothing_and_poisons() {
        let kv = FaultKv::new(MemoryKv::new());
        kv.write(put("a"), Durability::Sync).unwrap();
        kv.fail_next_writes(1);
        let err = kv.write(put("b"), Durability::Buffered).unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::Backend {
                    backend: "fault",
                    op: "write",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(kv.get(Cf::Meta, b"b").unwrap(), None);
        let refused = kv.write(put("c"), Durability::Buffered).unwrap_err();
        assert!(
            matches!(&refused, EngineError::Poisoned { cause, .. } if cause.contains("injected write failure")),
            "{refused}"
        );
        assert!(matches!(kv.sync(), Err(EngineError::Poisoned { .. })));
        assert_eq!(kv.get(Cf::Meta, b"a").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(kv.writes(), 2);
    }

    #[test]
    fn transient_failures_pass_after_the_chosen_ones() {
        let kv = FaultKv::transient(MemoryKv::new());
        kv.fail_next_writes(2);
        kv.fail_next_syncs(1);
        assert!(kv.write(put("a"), Durability::Buffered).is_err());
        assert!(kv.write(put("a"), Durability::Buffered).is_err());
        kv.write(put("a"), Durability::Buffered).unwrap();
        let err = kv.sync().unwrap_err();
        assert!(
            matches!(err, EngineError::Backend { op: "sync", .. }),
            "{err}"
        );
        kv.sync().unwrap();
        // A Sync write whose sync fails leaves its batch visible.
        kv.fail_next_syncs(1);
        assert!(kv.write(put("b"), Durability::Sync).is_err());
        assert_eq!(kv.get(Cf::Meta, b"b").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!((kv.writes(), kv.syncs(), kv.syncs_started()), (4, 3, 3));
    }

    #[test]
    fn a_write_chosen_by_its_batch_fails_and_the_others_pass() {
        let kv = FaultKv::transient(MemoryKv::new());
        kv.fail_write_where(|b| {
            b.ops()
                .iter()
                .any(|op| matches!(op, crate::Op::Put { key, .. } if key == b"b"))
        });
        assert!(kv.write_choice_pending());
        kv.write(put("a"), Durability::Buffered).unwrap();
        let err = kv.write(put("b"), Durability::Buffered).unwrap_err();
        assert!(
            matches!(err, EngineError::Backend { op: "write", .. }),
            "{err}"
        );
        assert!(!kv.write_choice_pending());
        assert_eq!(kv.get(Cf::Meta, b"b").unwrap(), None);
        // Used up: the same batch goes through now.
        kv.write(put("b"), Durability::Buffered).unwrap();
        // Unwrapped, the store is what the wrapper let through.
        let inner = kv.into_inner();
        assert_eq!(
            inner.get(Cf::Meta, b"a").unwrap().as_deref(),
            Some(&b"1"[..])
        );
        assert_eq!(
            inner.get(Cf::Meta, b"b").unwrap().as_deref(),
            Some(&b"1"[..])
        );
        inner.write(put("c"), Durability::Sync).unwrap();
    }

    #[test]
    fn held_syncs_wait_for_their_permits() {
        let kv = Arc::new(FaultKv::new(MemoryKv::new()));
        kv.hold_syncs();
        let k = Arc::clone(&kv);
        let t = std::thread::spawn(move || k.sync());
        while kv.syncs_started() < 1 {
            std::thread::yield_now();
        }
        // Held: a write beside it goes through, the sync has not returned.
        kv.write(put("a"), Durability::Buffered).unwrap();
        assert_eq!(kv.syncs(), 0);
        kv.release_syncs(1);
        t.join().unwrap().unwrap();
        assert_eq!(kv.syncs(), 1);
        kv.stop_holding_syncs();
        kv.sync().unwrap();
        assert_eq!(kv.syncs(), 2);
    }
}
