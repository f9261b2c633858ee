//! The RocksDB backend of the Ankusa storage engine: production default.
//!
//! - One RocksDB column family per [`Cf`], all created when the store is opened.
//! - The WAL is always on. [`Durability::Buffered`] writes the WAL to the OS
//!   without fsync, which a process crash does not lose. [`Durability::Sync`]
//!   writes the same way and then syncs the WAL (`FlushWAL(sync = true)`, i.e.
//!   `SyncWAL`) before `write` returns. A write with RocksDB's own
//!   `sync = true` would hold RocksDB's write queue through the fsync, so every
//!   other batch (the dispatcher's Buffered claims and outcomes) would queue
//!   behind the ingest's fsync; `SyncWAL` runs beside later writes. What a
//!   caller of `write` is promised is the same: on return the batch is on
//!   stable storage, and the WAL is recovered as a prefix after a crash. The
//!   difference is visibility: other readers may see a Sync batch a few
//!   milliseconds before it is durable (docs/design.md section 4,
//!   "Durability"), which at-least-once delivery allows.
//! - Counters are a merge operator (`ankusa_counter_add`) on the counter column
//!   family: an add is a blind merge of an 8-byte big-endian `i64` delta.
//! - Every scan sets both `iterate_lower_bound` and `iterate_upper_bound`, so a
//!   seek over a queue family stops at the bound instead of walking tombstones.
//! - The `index` column family's memtable is [`INDEX_WRITE_BUFFER_BYTES`]
//!   (not 64 MiB): scans of lanes and due rows step over fewer deleted keys.
//! - Point reads: one LRU block cache of [`BLOCK_CACHE_BYTES`] for every
//!   column family, a full bloom filter in every SST file and a whole-key
//!   bloom filter in every memtable.
//! - A failed write poisons the handle ([`ankusa_engine::Poison`]).
//! - Space comes back after deletes (docs/design.md section 5, "Retention"): the
//!   column families whose keys are deleted in bulk (`hooks` and `archive` by
//!   the retention sweep, `deliveries` as rows are delivered) carry RocksDB's
//!   compact-on-deletion collector, which marks an SST file for compaction when
//!   deletes are dense in it, so deleted data does not wait for the level's
//!   size trigger to leave the disk. [`RocksKv::compact_all`] compacts now (tools
//!   and tests).
//! - WAL recovery at open ([`WalRecovery`]): by default a WAL whose last record
//!   was torn by a crash is accepted (that record was never acknowledged), and
//!   a WAL damaged before its end refuses the open (RocksDB's
//!   `kTolerateCorruptedTailRecords`) instead of being cut there with every
//!   later batch (its `kPointInTimeRecovery`, RocksDB's own default, which an
//!   operator can still ask for: [`WalRecovery::PointInTime`]).
//! - [`RocksKv::open_read_only`] opens a store without writing anything (no
//!   lock, no info log, no flush of the WAL, which it reads into memory): for
//!   tools that only read (`ankusa store check`, `store export`), on a
//!   read-only or full filesystem too.
#![deny(missing_docs, clippy::unwrap_used)]

use std::path::Path;

use ankusa_engine::{
    Batch, Bytes, COUNTER_CF, Cf, Direction, Durability, EngineError, ErrorKind, KeyRange,
    KeyValue, Kv, Op, OpCounters, OpStats, Poison, Read,
};
use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, Cache, ColumnFamily, ColumnFamilyDescriptor,
    CompactOptions, DB, DBRawIteratorWithThreadMode, DBRecoveryMode, MergeOperands, Options,
    ReadOptions, SnapshotWithThreadMode, WriteBatch, WriteOptions,
};

const BACKEND: &str = "rocksdb";
const COUNTER_MERGE: &str = "ankusa_counter_add";
/// Most merge operands a counter keeps in the memtable before a write folds
/// them into one value (bounds the cost of a counter read).
const MAX_SUCCESSIVE_MERGES: usize = 16;
/// The compact-on-deletion collector: a file with at least this many deletes
/// in any window of [`DELETION_WINDOW`] entries, or half of its entries
/// deletes, is marked for compaction.
const DELETION_TRIGGER: usize = 512;
/// See [`DELETION_TRIGGER`].
const DELETION_WINDOW: usize = 1024;
/// See [`DELETION_TRIGGER`].
const DELETION_RATIO: f64 = 0.5;

/// The block cache shared by every column family, bytes (RocksDB's default
/// is 32 MiB per table factory).
pub const BLOCK_CACHE_BYTES: usize = 256 << 20;
/// Bits per key of each SST file's bloom filter (about 1% false positives).
const BLOOM_BITS_PER_KEY: f64 = 10.0;
/// Memtable size of the `index` column family, bytes (RocksDB's default:
/// 64 MiB). Its keys are small and short-lived: a lane member, a due row, a marker
/// is put and deleted within seconds, and a scan of a lane or of the due range
/// steps over every deleted key still in the memtable. A small memtable flushes
/// often, and a flush drops each put deleted in the same memtable, so those
/// scans step over fewer entries (the load runs of 1,000 ordered keys side by
/// side on a busy machine: delivery kept 0.91-0.99 of the ack rate with 4 MiB,
/// 0.46-0.65 with the default; benches/load/RESULTS.md).
const INDEX_WRITE_BUFFER_BYTES: usize = 4 << 20;
/// Share of a memtable's size its whole-key bloom filter takes.
const MEMTABLE_BLOOM_RATIO: f64 = 0.02;

/// The file descriptors [`RocksKv::open_with_file_limit`] keeps out of
/// RocksDB's table cache for the store's other files: the WAL (and the one a
/// memtable switch opens), the MANIFEST, the info log, the lock, the
/// directories it syncs, and the SST files flushes and compactions write.
pub const NON_TABLE_FILES: usize = 24;
/// The fewest table files [`RocksKv::open_with_file_limit`] lets RocksDB keep
/// open, whatever it is given.
const MIN_TABLE_FILES: usize = 16;

/// The block cache of [`RocksKv::open_read_only`], bytes: the tools that
/// open a store read-only read each block about once.
pub const READ_ONLY_BLOCK_CACHE_BYTES: usize = 8 << 20;

/// How an open replays the WAL (RocksDB's `WALRecoveryMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WalRecovery {
    /// A record torn at the end of the WAL (a crash in the middle of a
    /// write: never acknowledged) is dropped; a record that does not verify
    /// before the end (a checksum mismatch, a bad length: damage, not a
    /// crash) fails the open with RocksDB's `Corruption` error naming it
    /// (`kTolerateCorruptedTailRecords`).
    #[default]
    TornTail,
    /// Replays up to the first record that does not verify and drops it and
    /// everything after it, without an error (`kPointInTimeRecovery`,
    /// RocksDB's default). A writable open then flushes what it kept and
    /// deletes the WAL, so the cut is permanent: an operator's choice to keep
    /// what precedes a damaged record, never the default.
    PointInTime,
    /// Every record must verify, the last one too (`kAbsoluteConsistency`):
    /// a record torn by a crash fails the open as damage does. For a check
    /// that must not pass over anything; RocksDB cannot tell a torn last
    /// record from a damaged length field in the WAL's last 32 KiB block
    /// (both are a record longer than what follows it), which
    /// [`WalRecovery::TornTail`] drops and this mode reports.
    Absolute,
}

impl WalRecovery {
    fn mode(self) -> DBRecoveryMode {
        match self {
            WalRecovery::TornTail => DBRecoveryMode::TolerateCorruptedTailRecords,
            WalRecovery::PointInTime => DBRecoveryMode::PointInTime,
            WalRecovery::Absolute => DBRecoveryMode::AbsoluteConsistency,
        }
    }
}

/// A RocksDB store.
pub struct RocksKv {
    db: DB,
    counters: OpCounters,
    poison: Poison,
    /// Opened with [`RocksKv::open_read_only`]: every write fails.
    read_only: bool,
}

impl std::fmt::Debug for RocksKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksKv")
            .field("path", &self.db.path())
            .finish()
    }
}

/// RocksDB's error with its kind: its status code (`rocksdb::Error::kind`),
/// and for an `IO error` its lock file's own words (`While lock file: .../LOCK`,
/// another process; `lock hold by current process`, another handle of this
/// one): RocksDB has no status of its own for a held lock.
fn backend_err(op: &'static str, e: rocksdb::Error) -> EngineError {
    let message = e.to_string();
    let kind = if message.contains("While lock file")
        || message.contains("lock hold by current process")
    {
        ErrorKind::Locked
    } else {
        match e.kind() {
            rocksdb::ErrorKind::Corruption => ErrorKind::Corruption,
            rocksdb::ErrorKind::IOError => ErrorKind::Io,
            _ => ErrorKind::Other,
        }
    };
    EngineError::Backend {
        backend: BACKEND,
        op,
        kind,
        message,
    }
}

/// A failure this backend finds itself (not RocksDB's): [`ErrorKind::Other`].
fn own_err(op: &'static str, message: impl std::fmt::Display) -> EngineError {
    EngineError::Backend {
        backend: BACKEND,
        op,
        kind: ErrorKind::Other,
        message: message.to_string(),
    }
}

/// Sums 8-byte big-endian `i64` operands onto the existing value. Returns `None`
/// (RocksDB then reports corruption) for an operand or value of another width.
fn counter_merge(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &MergeOperands,
) -> Option<Vec<u8>> {
    let mut sum: i64 = match existing {
        Some(v) => i64::from_be_bytes(v.try_into().ok()?),
        None => 0,
    };
    for op in operands {
        sum = sum.wrapping_add(i64::from_be_bytes(op.try_into().ok()?));
    }
    Some(sum.to_be_bytes().to_vec())
}

impl RocksKv {
    /// Opens the store at `path`, creating it and every column family if missing.
    /// RocksDB keeps every SST file open (its default `max_open_files` of -1).
    /// The WAL is recovered as [`WalRecovery::TornTail`].
    ///
    /// # Errors
    /// [`EngineError::Backend`] with RocksDB's message (a lock held by another
    /// process, a corrupt manifest, a WAL damaged before its end, permissions).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, EngineError> {
        Self::open_with(path, None, BLOCK_CACHE_BYTES, WalRecovery::TornTail)
    }

    /// Opens the existing store at `path` read-only (RocksDB's
    /// `OpenForReadOnly`): nothing in the directory is created, written,
    /// renamed or locked (no `LOCK`, no info `LOG`, no new MANIFEST or
    /// OPTIONS file, no flush), so it works on a read-only or full
    /// filesystem and beside nothing but a stopped store (it does not take
    /// the lock: a caller that must not read a running relay's store asks
    /// the lock first). The WAL is replayed into memory as `recovery` says
    /// (what it drops stays in the file). The block cache is
    /// [`READ_ONLY_BLOCK_CACHE_BYTES`]. [`Kv::write`] and [`Kv::sync`] fail
    /// with [`EngineError::Backend`] (`op` `write`/`sync`).
    ///
    /// # Errors
    /// [`EngineError::Backend`] with RocksDB's message (no store at `path`,
    /// a corrupt manifest, a WAL `recovery` does not accept, a column family
    /// missing, permissions).
    pub fn open_read_only(
        path: impl AsRef<Path>,
        recovery: WalRecovery,
    ) -> Result<Self, EngineError> {
        let path = path.as_ref();
        // rust-rocksdb creates the directory before every open, read-only
        // ones too: a missing store must not be made.
        if !path.is_dir() {
            return Err(own_err(
                "open",
                format!("{}: no such store directory", path.display()),
            ));
        }
        let mut db_opts = Options::default();
        db_opts.set_wal_recovery_mode(recovery.mode());
        let cfs = cf_descriptors(READ_ONLY_BLOCK_CACHE_BYTES);
        let db = DB::open_cf_descriptors_read_only(&db_opts, path, cfs, false)
            .map_err(|e| backend_err("open", e))?;
        Self::checked(db, true)
    }

    /// [`RocksKv::open_with_file_limit`] (or [`RocksKv::open`], `max_files`
    /// `None`) with the WAL recovered as `recovery` says.
    ///
    /// # Errors
    /// As [`RocksKv::open`].
    pub fn open_with_recovery(
        path: impl AsRef<Path>,
        max_files: Option<usize>,
        recovery: WalRecovery,
    ) -> Result<Self, EngineError> {
        Self::open_with(path, max_files, BLOCK_CACHE_BYTES, recovery)
    }

    /// [`RocksKv::open`] with a block cache of `cache_bytes` instead of
    /// [`BLOCK_CACHE_BYTES`]: for a tool that reads a whole store once
    /// (`ankusa store export`), where a large cache only grows the process
    /// and is never read twice.
    ///
    /// # Errors
    /// As [`RocksKv::open`].
    pub fn open_with_block_cache(
        path: impl AsRef<Path>,
        cache_bytes: usize,
    ) -> Result<Self, EngineError> {
        Self::open_with(path, None, cache_bytes, WalRecovery::TornTail)
    }

    /// [`RocksKv::open`] with at most `max_files` file descriptors for the
    /// store (docs/design.md section 5, "Limits": the relay sizes it from its
    /// file-descriptor limit): RocksDB's `max_open_files` (its table cache of
    /// SST files) is `max_files` less [`NON_TABLE_FILES`], kept for the WAL,
    /// the MANIFEST, the info log, the lock and the files a flush or a
    /// compaction writes. `None`: RocksDB's default, every SST file open.
    ///
    /// # Errors
    /// As [`RocksKv::open`].
    pub fn open_with_file_limit(
        path: impl AsRef<Path>,
        max_files: usize,
    ) -> Result<Self, EngineError> {
        Self::open_with(
            path,
            Some(max_files),
            BLOCK_CACHE_BYTES,
            WalRecovery::TornTail,
        )
    }

    fn open_with(
        path: impl AsRef<Path>,
        max_files: Option<usize>,
        cache_bytes: usize,
        recovery: WalRecovery,
    ) -> Result<Self, EngineError> {
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_wal_recovery_mode(recovery.mode());
        if let Some(files) = max_files {
            // RocksDB itself takes 10 off `max_open_files` for its own
            // non-table files; at least 16 table files stay cacheable.
            let table_files = files.saturating_sub(NON_TABLE_FILES).max(MIN_TABLE_FILES);
            db_opts.set_max_open_files(i32::try_from(table_files).unwrap_or(i32::MAX));
        }
        let db = DB::open_cf_descriptors(&db_opts, path.as_ref(), cf_descriptors(cache_bytes))
            .map_err(|e| backend_err("open", e))?;
        Self::checked(db, false)
    }

    /// The handle over `db`, once every column family is there.
    fn checked(db: DB, read_only: bool) -> Result<Self, EngineError> {
        for cf in Cf::ALL {
            if db.cf_handle(cf.name()).is_none() {
                return Err(own_err(
                    "open",
                    format!("column family {} missing after open", cf.name()),
                ));
            }
        }
        Ok(RocksKv {
            db,
            counters: OpCounters::default(),
            poison: Poison::default(),
            read_only,
        })
    }

    /// Compacts every column family over its whole key range now (RocksDB's
    /// manual compaction, memtables flushed first): deleted keys and their
    /// tombstones leave the disk. For tools and tests; the relay relies on the
    /// deletion-triggered compaction set at open.
    ///
    /// # Errors
    /// [`EngineError::Backend`] when the flush fails, or the store is open
    /// read-only.
    pub fn compact_all(&self) -> Result<(), EngineError> {
        self.refuse_if_read_only("flush")?;
        // Force: the bottommost level is rewritten too, so tombstones that a
        // trivial move would have carried down are dropped with what they
        // delete.
        let mut opts = CompactOptions::default();
        opts.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        for cf in Cf::ALL {
            self.db
                .flush_cf(self.cf(cf))
                .map_err(|e| backend_err("flush", e))?;
            self.db
                .compact_range_cf_opt(self.cf(cf), None::<&[u8]>, None::<&[u8]>, &opts);
        }
        Ok(())
    }

    /// Flushes every column family's memtable to an SST file now, so the next
    /// open replays no WAL (for tools and tests that build a large store and
    /// then measure what reading it costs).
    ///
    /// # Errors
    /// [`EngineError::Backend`] when a flush fails, or the store is open
    /// read-only.
    pub fn flush_all(&self) -> Result<(), EngineError> {
        self.refuse_if_read_only("flush")?;
        for cf in Cf::ALL {
            self.db
                .flush_cf(self.cf(cf))
                .map_err(|e| backend_err("flush", e))?;
        }
        Ok(())
    }

    /// The bytes of `cf`'s live SST files (`rocksdb.total-sst-files-size`):
    /// what the column family holds on disk apart from the WAL and the
    /// memtables.
    ///
    /// # Errors
    /// [`EngineError::Backend`] when RocksDB cannot report it.
    pub fn sst_bytes(&self, cf: Cf) -> Result<u64, EngineError> {
        self.db
            .property_int_value_cf(self.cf(cf), "rocksdb.total-sst-files-size")
            .map_err(|e| backend_err("property", e))?
            .ok_or_else(|| own_err("property", "rocksdb.total-sst-files-size not reported"))
    }

    /// True when opened with [`RocksKv::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn refuse_if_read_only(&self, op: &'static str) -> Result<(), EngineError> {
        if self.read_only {
            return Err(own_err(op, "the store is open read-only"));
        }
        Ok(())
    }

    fn cf(&self, cf: Cf) -> &ColumnFamily {
        // Every column family is checked to exist in `open`.
        #[allow(clippy::expect_used)]
        self.db
            .cf_handle(cf.name())
            .expect("column family created at open")
    }

    fn native_batch(&self, batch: Batch) -> WriteBatch {
        let mut wb = WriteBatch::default();
        for op in batch.into_ops_coalesced() {
            match op {
                Op::Put { cf, key, value } => wb.put_cf(self.cf(cf), key, value),
                Op::Delete { cf, key } => wb.delete_cf(self.cf(cf), key),
                Op::DeleteRange { cf, range } => {
                    wb.delete_range_cf(self.cf(cf), range.start, range.end)
                }
                Op::CounterAdd { key, delta } => {
                    wb.merge_cf(self.cf(COUNTER_CF), key, delta.to_be_bytes())
                }
            }
        }
        wb
    }
}

/// The column families of [`Cf::ALL`] with their options, over one block
/// cache of `cache_bytes`.
fn cf_descriptors(cache_bytes: usize) -> Vec<ColumnFamilyDescriptor> {
    // Point reads (an envelope per claimed row, its delivery row, lane heads)
    // dominate the dispatcher's store work (a load run's profile,
    // benches/load/RESULTS.md: half of the relay's CPU in `DB::Get` with
    // RocksDB's defaults: no filter, a 32 MiB block cache). One block cache for
    // every column family, a full bloom filter per SST file and a whole-key
    // bloom filter per memtable, so a read for a key a file or memtable does
    // not hold skips it.
    let cache = Cache::new_lru_cache(cache_bytes);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
    Cf::ALL
        .iter()
        .map(|cf| {
            let mut opts = Options::default();
            opts.set_block_based_table_factory(&table);
            opts.set_memtable_whole_key_filtering(true);
            opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
            if *cf == COUNTER_CF {
                opts.set_merge_operator_associative(COUNTER_MERGE, counter_merge);
                // Counters are hot keys (every transition adds to a dozen):
                // without a bound, a read walks every merge operand since the
                // last flush, which the load run measured at 75% of the
                // relay's CPU. Past this many operands a write folds them.
                opts.set_max_successive_merges(MAX_SUCCESSIVE_MERGES);
            }
            if matches!(cf, Cf::Hooks | Cf::Archive | Cf::Deliveries) {
                opts.add_compact_on_deletion_collector_factory(
                    DELETION_WINDOW,
                    DELETION_TRIGGER,
                    DELETION_RATIO,
                );
            }
            if *cf == Cf::Index {
                opts.set_write_buffer_size(INDEX_WRITE_BUFFER_BYTES);
            }
            ColumnFamilyDescriptor::new(cf.name(), opts)
        })
        .collect()
}

fn bounded(range: &KeyRange) -> ReadOptions {
    let mut ro = ReadOptions::default();
    ro.set_iterate_lower_bound(range.start.clone());
    ro.set_iterate_upper_bound(range.end.clone());
    ro
}

fn drain(
    mut it: DBRawIteratorWithThreadMode<'_, DB>,
    dir: Direction,
    limit: usize,
) -> Result<Vec<KeyValue>, EngineError> {
    let mut out = Vec::new();
    match dir {
        Direction::Forward => it.seek_to_first(),
        Direction::Reverse => it.seek_to_last(),
    }
    while out.len() < limit {
        let Some((k, v)) = it.item() else { break };
        out.push((Bytes::copy_from_slice(k), Bytes::copy_from_slice(v)));
        match dir {
            Direction::Forward => it.next(),
            Direction::Reverse => it.prev(),
        }
    }
    it.status().map_err(|e| backend_err("scan", e))?;
    Ok(out)
}

impl Read for RocksKv {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        self.counters.get();
        let v = self
            .db
            .get_pinned_cf(self.cf(cf), key)
            .map_err(|e| backend_err("get", e))?;
        Ok(v.map(|v| Bytes::copy_from_slice(&v)))
    }

    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        if range.is_empty() || limit == 0 {
            self.counters.scan(0);
            return Ok(Vec::new());
        }
        let out = drain(
            self.db.raw_iterator_cf_opt(self.cf(cf), bounded(range)),
            dir,
            limit,
        )?;
        self.counters.scan(out.len());
        Ok(out)
    }
}

/// A point-in-time view of a [`RocksKv`] (a RocksDB snapshot).
pub struct RocksSnapshot<'a> {
    kv: &'a RocksKv,
    snap: SnapshotWithThreadMode<'a, DB>,
}

impl Read for RocksSnapshot<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        self.kv.counters.get();
        let v = self
            .snap
            .get_cf(self.kv.cf(cf), key)
            .map_err(|e| backend_err("get", e))?;
        Ok(v.map(Bytes::from))
    }

    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        if range.is_empty() || limit == 0 {
            self.kv.counters.scan(0);
            return Ok(Vec::new());
        }
        let out = drain(
            self.snap
                .raw_iterator_cf_opt(self.kv.cf(cf), bounded(range)),
            dir,
            limit,
        )?;
        self.kv.counters.scan(out.len());
        Ok(out)
    }
}

impl Kv for RocksKv {
    type Snapshot<'a> = RocksSnapshot<'a>;

    fn snapshot(&self) -> RocksSnapshot<'_> {
        RocksSnapshot {
            kv: self,
            snap: self.db.snapshot(),
        }
    }

    fn write(&self, batch: Batch, durability: Durability) -> Result<(), EngineError> {
        self.refuse_if_read_only("write")?;
        self.poison.check(BACKEND)?;
        batch.validate()?;
        let size = batch.size_bytes();
        let wb = self.native_batch(batch);
        // Never `sync = true`: see the crate docs (a sync write holds the
        // write queue through its fsync).
        let mut wo = WriteOptions::default();
        wo.set_sync(false);
        if let Err(e) = self.db.write_opt(wb, &wo) {
            let e = backend_err("write", e);
            self.poison.set_by(&e);
            return Err(e);
        }
        self.counters.batch(size);
        if durability == Durability::Sync {
            self.sync()?;
        }
        Ok(())
    }

    /// `FlushWAL(sync = true)`: writes what RocksDB buffers of the WAL and
    /// fsyncs it, beside later writes.
    fn sync(&self) -> Result<(), EngineError> {
        self.refuse_if_read_only("sync")?;
        self.poison.check(BACKEND)?;
        if let Err(e) = self.db.flush_wal(true) {
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
