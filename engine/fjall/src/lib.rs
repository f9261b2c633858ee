//! The fjall backend of the Ankusa storage engine: pure Rust, no C++ to build.
//!
//! - One fjall keyspace per [`Cf`], in a single-writer transactional database.
//! - [`Kv::write`] runs the whole [`Batch`] as one write transaction (fjall
//!   commits a transaction as one atomic journal batch across keyspaces).
//!   Every commit writes the journal with `PersistMode::Buffer` (flushed to the
//!   OS, which a process crash does not lose); [`Durability::Sync`] then
//!   fsyncs it (`persist(SyncAll)`, as [`Kv::sync`]) before returning.
//! - A batch seen whole: fjall 3.1.13 gives a flushed memtable's new version a
//!   fresh sequence number and makes every number below it visible, also that
//!   of a batch still being applied to its keyspaces; a read that took its
//!   snapshot then could see some of the batch's keys and not others (a due
//!   row without its envelope: the relay dead-lettered committed hooks as
//!   "envelope missing" in an ingest run of 2026-12-03). A read takes its
//!   snapshot under a lock that a commit holds exclusively while it applies
//!   the batch (not while it fsyncs), so no snapshot falls inside a commit
//!   (`ankusa_engine_conformance::batch_whole_while_memtables_turn_over`).
//! - fjall has no merge operator, so a counter add reads the counter inside the
//!   write transaction and writes the sum. Write transactions are serialized by
//!   fjall's single-writer lock, so adds from concurrent writers never lose an
//!   update, and callers still never read a counter to change it.
//! - fjall has no range tombstone: a range delete removes each key of the range
//!   inside the same transaction (bounded by what the range holds).
//! - A failed commit or persist poisons the handle; fjall poisons its own
//!   database too (pinned to 3.1.13, which returns those errors: fjall #304/#308).
#![deny(missing_docs, clippy::unwrap_used)]

use std::path::Path;
use std::sync::{PoisonError, RwLock};

use ankusa_engine::{
    Batch, Bytes, COUNTER_CF, Cf, Direction, Durability, EngineError, ErrorKind, KeyRange,
    KeyValue, Kv, Op, OpCounters, OpStats, Poison, Read, decode_counter, encode_counter,
};
use fjall::{
    Iter, KeyspaceCreateOptions, PersistMode, Readable, SingleWriterTxDatabase,
    SingleWriterTxKeyspace, Snapshot,
};

const BACKEND: &str = "fjall";

/// fjall's error with its kind: `Locked` (another process holds the store),
/// an I/O error (its own or its LSM-tree's), or anything else (its checksum
/// and decoding failures included: [`ErrorKind::Corruption`] is RocksDB's).
fn backend_err(op: &'static str, e: fjall::Error) -> EngineError {
    let kind = match &e {
        fjall::Error::Locked => ErrorKind::Locked,
        fjall::Error::Io(_) | fjall::Error::Storage(fjall::LsmError::Io(_)) => ErrorKind::Io,
        _ => ErrorKind::Other,
    };
    EngineError::Backend {
        backend: BACKEND,
        op,
        kind,
        message: e.to_string(),
    }
}

/// The file descriptors [`FjallKv::open_with_file_limit`] keeps out of
/// fjall's file cache for the store's other files (journals, the lock,
/// version files, what flushes and compactions write).
pub const NON_TABLE_FILES: usize = 24;
/// The fewest files [`FjallKv::open_with_file_limit`] lets fjall cache
/// (fjall refuses fewer than 10).
const MIN_TABLE_FILES: usize = 16;

/// fjall's block cache, in bytes: 256 MiB, as RocksDB's
/// (`ankusa_engine_rocksdb::BLOCK_CACHE_BYTES`). fjall's own default is
/// 32 MiB, under which a store past a few hundred thousand hooks reads most
/// table blocks with pread (37% of the relay's CPU in the half-rate soak of
/// benches/load/RESULTS.md, where delivery fell to about 200 hooks/s).
pub const BLOCK_CACHE_BYTES: u64 = 256 << 20;

/// Memtable size of the `index` keyspace, bytes (fjall's default: 64 MiB), as
/// RocksDB's index column family (`ankusa_engine_rocksdb`'s 4 MiB). Its keys
/// are put and deleted within seconds (a due row, a lane member, a marker),
/// and a due-range scan walks every version still in the memtable's skiplist:
/// in the half-rate soak of 2026-12-03 (1,100 hooks/s) 75% of the relay's CPU
/// was `FjallKv::scan` in `crossbeam_skiplist` range iteration, delivery fell
/// to about 400 hooks/s after four minutes and the backlog grew until a flush
/// (benches/load/RESULTS.md). A small memtable flushes often.
pub const INDEX_MEMTABLE_BYTES: u64 = 4 << 20;

/// A fjall store.
pub struct FjallKv {
    db: SingleWriterTxDatabase,
    keyspaces: Vec<SingleWriterTxKeyspace>,
    counters: OpCounters,
    poison: Poison,
    /// Held exclusively around a commit and shared while a read takes its
    /// snapshot, so no snapshot is taken while a batch is being applied
    /// ("A batch seen whole" in the crate docs).
    gate: RwLock<()>,
}

impl std::fmt::Debug for FjallKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallKv").finish_non_exhaustive()
    }
}

impl FjallKv {
    /// Opens the store at `path`, creating it and every keyspace if missing.
    ///
    /// # Errors
    /// [`EngineError::Backend`] with fjall's message (a lock held by another
    /// process, a corrupt journal, permissions).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, EngineError> {
        Self::open_with(path, None, None)
    }

    /// [`FjallKv::open`] with every keyspace created with a memtable of
    /// `memtable_bytes` (an existing keyspace keeps its own), so memtables
    /// fill, are sealed, flushed and dropped after a few hundred small
    /// batches: for tests and benches of what happens around a flush
    /// (`ankusa_engine_conformance::batch_whole_while_memtables_turn_over`).
    ///
    /// # Errors
    /// As [`FjallKv::open`].
    pub fn open_with_memtable_bytes(
        path: impl AsRef<Path>,
        memtable_bytes: u64,
    ) -> Result<Self, EngineError> {
        Self::open_with(path, None, Some(memtable_bytes))
    }

    /// [`FjallKv::open`] with at most `max_files` file descriptors for the
    /// store (docs/design.md section 5, "Limits": the relay sizes it from its
    /// file-descriptor limit): fjall's cache of open table and blob files
    /// (`max_cached_files`, 900 by default) is `max_files` less
    /// [`NON_TABLE_FILES`], kept for the journal, the lock and the files a
    /// flush or a compaction writes.
    ///
    /// # Errors
    /// As [`FjallKv::open`].
    pub fn open_with_file_limit(
        path: impl AsRef<Path>,
        max_files: usize,
    ) -> Result<Self, EngineError> {
        Self::open_with(path, Some(max_files), None)
    }

    fn open_with(
        path: impl AsRef<Path>,
        max_files: Option<usize>,
        memtable_bytes: Option<u64>,
    ) -> Result<Self, EngineError> {
        let mut builder =
            SingleWriterTxDatabase::builder(path.as_ref()).cache_size(BLOCK_CACHE_BYTES);
        if let Some(files) = max_files {
            // fjall panics below 10 cached files.
            builder = builder.max_cached_files(Some(
                files.saturating_sub(NON_TABLE_FILES).max(MIN_TABLE_FILES),
            ));
        }
        let db = builder.open().map_err(|e| backend_err("open", e))?;
        let keyspaces = Cf::ALL
            .iter()
            .map(|cf| {
                db.keyspace(cf.name(), || match (memtable_bytes, cf) {
                    (Some(bytes), _) => KeyspaceCreateOptions::default().max_memtable_size(bytes),
                    (None, Cf::Index) => {
                        KeyspaceCreateOptions::default().max_memtable_size(INDEX_MEMTABLE_BYTES)
                    }
                    (None, _) => KeyspaceCreateOptions::default(),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| backend_err("open", e))?;
        Ok(FjallKv {
            db,
            keyspaces,
            counters: OpCounters::default(),
            poison: Poison::default(),
            gate: RwLock::new(()),
        })
    }

    fn ks(&self, cf: Cf) -> &SingleWriterTxKeyspace {
        &self.keyspaces[cf.index()]
    }

    /// A snapshot of the store as of the last batch committed whole
    /// ([`FjallKv::gate`]).
    fn read_snapshot(&self) -> Snapshot {
        let _gate = self.gate.read().unwrap_or_else(PoisonError::into_inner);
        self.db.read_tx()
    }
}

fn range_iter(read: &impl Readable, ks: &SingleWriterTxKeyspace, range: &KeyRange) -> Iter {
    read.range(ks.inner(), range.start.as_slice()..range.end.as_slice())
}

fn collect(iter: Iter, dir: Direction, limit: usize) -> Result<Vec<KeyValue>, EngineError> {
    let mut out = Vec::new();
    let mut push = |guard: fjall::Guard| -> Result<bool, EngineError> {
        let (k, v) = guard.into_inner().map_err(|e| backend_err("scan", e))?;
        out.push((Bytes::copy_from_slice(&k), Bytes::copy_from_slice(&v)));
        Ok(out.len() < limit)
    };
    match dir {
        Direction::Forward => {
            for g in iter {
                if !push(g)? {
                    break;
                }
            }
        }
        Direction::Reverse => {
            for g in iter.rev() {
                if !push(g)? {
                    break;
                }
            }
        }
    }
    Ok(out)
}

fn snapshot_get(
    snap: &Snapshot,
    kv: &FjallKv,
    cf: Cf,
    key: &[u8],
) -> Result<Option<Bytes>, EngineError> {
    kv.counters.get();
    if key.is_empty() {
        return Ok(None); // fjall asserts on empty keys; none is ever stored
    }
    let v = snap
        .get(kv.ks(cf).inner(), key)
        .map_err(|e| backend_err("get", e))?;
    Ok(v.map(|v| Bytes::copy_from_slice(&v)))
}

fn snapshot_scan(
    snap: &Snapshot,
    kv: &FjallKv,
    cf: Cf,
    range: &KeyRange,
    dir: Direction,
    limit: usize,
) -> Result<Vec<KeyValue>, EngineError> {
    let out = if range.is_empty() || limit == 0 {
        Vec::new()
    } else {
        collect(range_iter(snap, kv.ks(cf), range), dir, limit)?
    };
    kv.counters.scan(out.len());
    Ok(out)
}

impl Read for FjallKv {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        snapshot_get(&self.read_snapshot(), self, cf, key)
    }
    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        snapshot_scan(&self.read_snapshot(), self, cf, range, dir, limit)
    }
}

/// A point-in-time view of a [`FjallKv`] (a fjall snapshot).
pub struct FjallSnapshot<'a> {
    kv: &'a FjallKv,
    snap: Snapshot,
}

impl Read for FjallSnapshot<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        snapshot_get(&self.snap, self.kv, cf, key)
    }
    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        snapshot_scan(&self.snap, self.kv, cf, range, dir, limit)
    }
}

impl Kv for FjallKv {
    type Snapshot<'a> = FjallSnapshot<'a>;

    fn snapshot(&self) -> FjallSnapshot<'_> {
        FjallSnapshot {
            kv: self,
            snap: self.read_snapshot(),
        }
    }

    fn write(&self, batch: Batch, durability: Durability) -> Result<(), EngineError> {
        self.poison.check(BACKEND)?;
        batch.validate()?;
        let size = batch.size_bytes();
        // Committed to the journal in the OS, then (Sync) fsynced outside the
        // gate: a read waits for a commit's memtable inserts, never for a disk.
        let mut tx = self.db.write_tx().durability(Some(PersistMode::Buffer));
        for op in batch.into_ops_coalesced() {
            match op {
                Op::Put { cf, key, value } => tx.insert(self.ks(cf), key, value),
                Op::Delete { cf, key } => tx.remove(self.ks(cf), key),
                Op::DeleteRange { cf, range } => {
                    let ks = self.ks(cf);
                    let mut doomed = Vec::new();
                    for g in range_iter(&tx, ks, &range) {
                        doomed.push(g.key().map_err(|e| backend_err("write", e))?);
                    }
                    for k in doomed {
                        tx.remove(ks, k);
                    }
                }
                Op::CounterAdd { key, delta } => {
                    let ks = self.ks(COUNTER_CF);
                    let old = match tx
                        .get(ks.inner(), &key)
                        .map_err(|e| backend_err("write", e))?
                    {
                        Some(v) => decode_counter(&key, &v)?,
                        None => 0,
                    };
                    tx.insert(ks, key, encode_counter(old.wrapping_add(delta)));
                }
            }
        }
        let committed = {
            let _gate = self.gate.write().unwrap_or_else(PoisonError::into_inner);
            tx.commit()
        };
        if let Err(e) = committed {
            let e = backend_err("write", e);
            self.poison.set_by(&e);
            return Err(e);
        }
        self.counters.batch(size);
        match durability {
            Durability::Sync => self.sync(),
            Durability::Buffered => Ok(()),
        }
    }

    /// `persist(SyncAll)`: fsyncs the journal; fjall holds the journal's lock
    /// through the fsync, so writes from other threads wait for it.
    fn sync(&self) -> Result<(), EngineError> {
        self.poison.check(BACKEND)?;
        if let Err(e) = self.db.persist(PersistMode::SyncAll) {
            let e = backend_err("sync", e);
            self.poison.set_by(&e);
            return Err(e);
        }
        Ok(())
    }

    fn stats(&self) -> OpStats {
        self.counters.read()
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store another handle holds is [`ErrorKind::Locked`], with fjall's
    /// message as it is.
    #[test]
    fn a_held_lock_is_its_own_kind() {
        let dir = std::env::temp_dir().join(format!("ankusa-fjall-locked-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let held = FjallKv::open(&dir).expect("open");
        let Err(err) = FjallKv::open(&dir) else {
            panic!("a second open of a held store succeeded")
        };
        assert_eq!(err.kind(), Some(ErrorKind::Locked), "{err}");
        assert_eq!(err.to_string(), "fjall: open failed: FjallError: Locked");
        drop(held);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
