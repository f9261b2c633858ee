//! The storage contract of Ankusa (docs/design.md section 2).
//!
//! Everything the relay keeps is written through this crate: a [`Batch`] of puts,
//! deletes, range deletes and blind counter adds across the column families of
//! [`Cf`], committed by [`Kv::write`] all or nothing, and read back through
//! [`Read`] (point gets, bounded ordered scans with a limit, counters) either from
//! the live engine or from a [`Kv::snapshot`].
//!
//! This crate knows no storage engine. The backends are `memory` (here: the
//! model, used by the model tests), `ankusa-engine-rocksdb` (production) and
//! `ankusa-engine-fjall` (pure Rust). One conformance suite
//! (`ankusa-engine-conformance`) holds every backend to the same contract.
//!
//! # Atomicity
//! A committed batch is seen as if every other write came wholly before or wholly
//! after it, across all column families, after a crash too: a batch is never
//! split. Ops inside one batch apply in order (a put then a delete of the same
//! key leaves nothing; a delete then a counter add leaves the delta).
//!
//! # Durability
//! [`Durability::Sync`] returns only after the batch is on stable storage (the
//! WAL or journal is fsynced). [`Durability::Buffered`] returns after the batch is
//! in the WAL/journal in the OS page cache: a process crash (SIGKILL) loses
//! nothing, a machine crash may lose the last buffered batches.
//!
//! [`Kv::sync`] is the split form of a `Sync` write: batches written
//! `Buffered`, then one sync makes all of them durable (the Writer's pipelined
//! group commit).
//!
//! # Poisoning
//! A failed commit or sync poisons the handle: every later write fails with
//! [`EngineError::Poisoned`] and the process is expected to take its crash path
//! (restart and recover from what the store holds). [`fault::FaultKv`] fails
//! chosen writes and syncs of any backend, for tests of those paths.
#![deny(missing_docs, clippy::unwrap_used)]

use std::ops::Sub;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use bytes::Bytes;

mod batch;
pub mod dump;
pub mod fault;
pub mod memory;
mod mirror;

pub use batch::{Batch, MAX_KEY_BYTES, MAX_VALUE_BYTES, Op};
pub use mirror::CounterMirror;

/// A column family: a separate, ordered key space inside one store.
///
/// A closed set (docs/contributing.md, "Cf and Family"): a backend maps each to
/// its own notion (RocksDB column families, fjall keyspaces, separate maps in
/// memory). Key *families* (prefix bytes inside a column family) belong to
/// `ankusa-keys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cf {
    /// Store format, node id, seq high-water mark, tenant and source registries.
    Meta,
    /// Envelopes, keyed `ord:32, seq:64`.
    Hooks,
    /// Delivery rows, keyed `ord:32, seq:64, sink:16`.
    Deliveries,
    /// Every index family (?D, ?F, ?A, ?O, ?H, ?P, ?X, ?Q, ?K) and the counters (?C).
    Index,
    /// The archive by time, keyed `ord:32, received_at:64, seq:64`.
    Archive,
}

impl Cf {
    /// Every column family, in a fixed order (the order backends create them in).
    pub const ALL: [Cf; 5] = [Cf::Meta, Cf::Hooks, Cf::Deliveries, Cf::Index, Cf::Archive];

    /// The stable name a backend stores this column family under.
    pub fn name(self) -> &'static str {
        match self {
            Cf::Meta => "meta",
            Cf::Hooks => "hooks",
            Cf::Deliveries => "deliveries",
            Cf::Index => "index",
            Cf::Archive => "archive",
        }
    }

    /// Position of this column family in [`Cf::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The column family that holds counters. Counter keys are ordinary keys of this
/// family whose values are 8-byte big-endian `i64`s (see [`encode_counter`]).
pub const COUNTER_CF: Cf = Cf::Index;

/// Encodes a counter value as stored: 8 bytes, big-endian two's complement.
pub fn encode_counter(value: i64) -> [u8; 8] {
    value.to_be_bytes()
}

/// Decodes a stored counter value.
///
/// # Errors
/// [`EngineError::Corrupt`] when the value is not exactly 8 bytes.
pub fn decode_counter(key: &[u8], value: &[u8]) -> Result<i64, EngineError> {
    let raw: [u8; 8] = value.try_into().map_err(|_| EngineError::Corrupt {
        what: format!(
            "counter {} holds {} bytes, expected 8",
            hex(key),
            value.len()
        ),
    })?;
    Ok(i64::from_be_bytes(raw))
}

/// Scan direction: ascending byte order of keys, or descending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Lowest key first.
    Forward,
    /// Highest key first.
    Reverse,
}

/// A half-open key range `[start, end)` in byte order. Every scan and every range
/// delete carries both bounds: an unbounded seek over a queue family walks the
/// tombstones of every deleted head (docs/contributing.md, "Every scan has both
/// bounds"; facebook/rocksdb#5265).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyRange {
    /// Inclusive lower bound.
    pub start: Vec<u8>,
    /// Exclusive upper bound.
    pub end: Vec<u8>,
}

impl KeyRange {
    /// The range `[start, end)`.
    pub fn new(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: start.into(),
            end: end.into(),
        }
    }

    /// Every key that begins with `prefix`.
    ///
    /// # Panics
    /// When `prefix` is empty or all `0xff` (no finite exclusive upper bound).
    pub fn prefix(prefix: &[u8]) -> Self {
        let end = prefix_successor(prefix)
            .unwrap_or_else(|| panic!("prefix {} has no upper bound", hex(prefix)));
        KeyRange::new(prefix.to_vec(), end)
    }

    /// True when `key` lies in `[start, end)`.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && key < self.end.as_slice()
    }

    /// True when the range holds no key at all (`start >= end`).
    pub fn is_empty(&self) -> bool {
        self.start >= self.end
    }
}

/// The smallest key greater than every key that begins with `prefix`, or `None`
/// when there is none (an empty or all-`0xff` prefix).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// How durable a committed batch must be before [`Kv::write`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// On stable storage (WAL/journal fsynced). Ingest and admin batches.
    Sync,
    /// In the WAL/journal in OS buffers: survives a process crash, not a machine
    /// crash. Pipeline batches (claims, outcomes, releases), docs/design.md section 5.
    Buffered,
}

/// One key and its value, as a scan yields them.
pub type KeyValue = (Bytes, Bytes);

/// What a backend's failure ([`EngineError::Backend`]) is, as far as the
/// backend can tell: what a caller decides on (a damaged store is refused
/// with what to do, a held lock is another process on the store), where the
/// message is only for the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The store's files do not verify: RocksDB's `Corruption` status (a
    /// damaged WAL, MANIFEST or SST file). fjall's checksum and decoding
    /// failures are [`ErrorKind::Other`]: what the relay says of a damaged
    /// store (cut the WAL at the damage with RocksDB's recovery mode) is
    /// RocksDB's.
    Corruption,
    /// Another process (or another handle of this one) holds the store's
    /// lock: RocksDB's `LOCK` file, fjall's `Locked`.
    Locked,
    /// The operating system failed an I/O call (a full disk, a read-only
    /// filesystem, permissions): RocksDB's `IO error` status other than its
    /// lock, fjall's I/O error.
    Io,
    /// Anything else (an injected failure, a task that panicked, an
    /// argument the backend refuses).
    Other,
}

/// Errors of the storage layer. Free of every other layer's concepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The backend failed an operation (I/O, corruption it detected, a lock).
    #[error("{backend}: {op} failed: {message}")]
    Backend {
        /// `memory`, `rocksdb` or `fjall`.
        backend: &'static str,
        /// What was being done: `open`, `write`, `sync`, `get`, `scan`, ...
        op: &'static str,
        /// What the failure is, for a caller to decide on.
        kind: ErrorKind,
        /// The backend's own error text.
        message: String,
    },
    /// An earlier commit or sync failed; this handle accepts no more writes.
    #[error(
        "{backend}: the store handle is poisoned by an earlier failed commit or sync ({cause}); restart to recover"
    )]
    Poisoned {
        /// `memory`, `rocksdb` or `fjall`.
        backend: &'static str,
        /// The error of the commit or sync that poisoned the handle (a full
        /// disk: `rocksdb: write failed: IO error: No space left on device:
        /// ...`), so every later refusal names the cause.
        cause: String,
    },
    /// A stored value does not have the shape this layer expects.
    #[error("corrupt store: {what}")]
    Corrupt {
        /// What was found, and where.
        what: String,
    },
    /// A batch the engine refuses before writing anything (for example a range
    /// delete whose start is above its end).
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}

impl EngineError {
    /// The [`ErrorKind`] of a backend's failure; `None` for the other errors
    /// (a poisoned handle, a value of the wrong shape, a refused batch).
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            EngineError::Backend { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// Read access to a store: the live engine or a snapshot.
///
/// Every method is a bounded operation: a point get, a scan with both bounds
/// and a limit, or a counter read.
pub trait Read {
    /// The value of `key` in `cf`, if any. An empty key is never stored, so it
    /// reads as `None`.
    ///
    /// # Errors
    /// [`EngineError::Backend`] when the backend fails the read.
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError>;

    /// Up to `limit` entries of `cf` whose keys lie in `range`, in byte order of
    /// keys (`Forward`) or in reverse (`Reverse`). A `limit` of 0 returns nothing.
    ///
    /// # Errors
    /// [`EngineError::Backend`] when the backend fails the read.
    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError>;

    /// The current value of the counter under `key` (in [`COUNTER_CF`]); 0 when
    /// it has never been added to.
    ///
    /// # Errors
    /// [`EngineError::Corrupt`] when the stored value is not 8 bytes.
    fn counter(&self, key: &[u8]) -> Result<i64, EngineError> {
        match self.get(COUNTER_CF, key)? {
            Some(v) => decode_counter(key, &v),
            None => Ok(0),
        }
    }

    /// The first entry of `range` in direction `dir` (a scan with limit 1).
    ///
    /// # Errors
    /// As [`Read::scan`].
    fn first(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
    ) -> Result<Option<KeyValue>, EngineError> {
        Ok(self.scan(cf, range, dir, 1)?.into_iter().next())
    }
}

impl<T: Read + ?Sized> Read for &T {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        (**self).get(cf, key)
    }
    fn scan(
        &self,
        cf: Cf,
        range: &KeyRange,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<KeyValue>, EngineError> {
        (**self).scan(cf, range, dir, limit)
    }
    fn counter(&self, key: &[u8]) -> Result<i64, EngineError> {
        (**self).counter(key)
    }
}

/// A store: atomic batch writes, live reads, snapshots, operation counts.
pub trait Kv: Read + Send + Sync + 'static {
    /// A consistent point-in-time view; lives no longer than the store.
    type Snapshot<'a>: Read
    where
        Self: 'a;

    /// A view of the store as of now. Later writes are invisible to it.
    fn snapshot(&self) -> Self::Snapshot<'_>;

    /// Applies every op of `batch`, in order, as one atomic unit, then makes it as
    /// durable as `durability` says before returning.
    ///
    /// # Errors
    /// [`EngineError::Poisoned`] after an earlier failure; [`EngineError::Backend`]
    /// when this commit or sync fails (the handle is then poisoned);
    /// [`EngineError::InvalidBatch`] for a batch refused before anything is written.
    fn write(&self, batch: Batch, durability: Durability) -> Result<(), EngineError>;

    /// Makes every batch whose [`Kv::write`] returned before this call as
    /// durable as [`Durability::Sync`] makes it (the WAL or journal fsynced).
    ///
    /// `write(b, Buffered)` then `sync()` is the split form of
    /// `write(b, Sync)`: a caller that commits many batches (the Writer's group
    /// commit, docs/design.md section 5) writes the next batch while the sync
    /// of the earlier ones runs, and answers each batch's requests only after a
    /// sync that began after that batch's write returned. Writes from other
    /// threads during the sync are not blocked by it on RocksDB (`SyncWAL`);
    /// on fjall they wait for the journal's lock.
    ///
    /// # Errors
    /// [`EngineError::Poisoned`] after an earlier failure; [`EngineError::Backend`]
    /// when the sync fails (the handle is then poisoned: what was written since
    /// the last successful sync may or may not be durable).
    fn sync(&self) -> Result<(), EngineError>;

    /// Operation counts since the store was opened (exact, unlike timings).
    fn stats(&self) -> OpStats;

    /// The backend's name: `memory`, `rocksdb` or `fjall`.
    fn backend(&self) -> &'static str;
}

/// Operation counts of one store handle, as read at one moment.
///
/// Benches and the bench gate compare these: they are exact where timings are
/// noisy. Subtract two readings for the cost of what ran between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpStats {
    /// Point gets (including counter reads).
    pub gets: u64,
    /// Scans started (each positions an iterator once).
    pub seeks: u64,
    /// Entries returned by scans.
    pub entries_scanned: u64,
    /// Batches committed.
    pub batches: u64,
    /// Bytes of keys and values in committed batches (as [`Batch::size_bytes`]).
    pub bytes_written: u64,
}

impl Sub for OpStats {
    type Output = OpStats;
    fn sub(self, rhs: OpStats) -> OpStats {
        OpStats {
            gets: self.gets - rhs.gets,
            seeks: self.seeks - rhs.seeks,
            entries_scanned: self.entries_scanned - rhs.entries_scanned,
            batches: self.batches - rhs.batches,
            bytes_written: self.bytes_written - rhs.bytes_written,
        }
    }
}

/// Live operation counters that a backend updates and [`Kv::stats`] reads.
#[derive(Debug, Default)]
pub struct OpCounters {
    gets: AtomicU64,
    seeks: AtomicU64,
    entries_scanned: AtomicU64,
    batches: AtomicU64,
    bytes_written: AtomicU64,
}

impl OpCounters {
    /// Counts one point get.
    pub fn get(&self) {
        self.gets.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts one scan that returned `entries` entries.
    pub fn scan(&self, entries: usize) {
        self.seeks.fetch_add(1, Ordering::Relaxed);
        self.entries_scanned
            .fetch_add(entries as u64, Ordering::Relaxed);
    }
    /// Counts one committed batch.
    pub fn batch(&self, batch_bytes: u64) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.bytes_written.fetch_add(batch_bytes, Ordering::Relaxed);
    }
    /// The counts now.
    pub fn read(&self) -> OpStats {
        OpStats {
            gets: self.gets.load(Ordering::Relaxed),
            seeks: self.seeks.load(Ordering::Relaxed),
            entries_scanned: self.entries_scanned.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
        }
    }
}

/// The poison flag of a store handle: set by the first failed commit or
/// sync, with that failure's error as the cause every later refusal names.
#[derive(Debug, Default)]
pub struct Poison {
    set: AtomicBool,
    cause: std::sync::OnceLock<String>,
}

impl Poison {
    /// Fails with [`EngineError::Poisoned`] once the handle is poisoned.
    ///
    /// # Errors
    /// [`EngineError::Poisoned`] after [`Poison::set`] or [`Poison::set_by`].
    pub fn check(&self, backend: &'static str) -> Result<(), EngineError> {
        if self.set.load(Ordering::Acquire) {
            let cause = self
                .cause
                .get()
                .cloned()
                .unwrap_or_else(|| "its error was not recorded".to_owned());
            Err(EngineError::Poisoned { backend, cause })
        } else {
            Ok(())
        }
    }
    /// Poisons the handle for good, with no recorded cause.
    pub fn set(&self) {
        self.set.store(true, Ordering::Release);
    }
    /// Poisons the handle for good because of `cause` (the failed commit's or
    /// sync's error; the first one is kept).
    pub fn set_by(&self, cause: &EngineError) {
        let _ = self.cause.set(cause.to_string());
        self.set();
    }
    /// True once poisoned.
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }
}

/// Every entry of `range`, fetched in pages of `page` entries: the scan for
/// callers that must see a whole range (the invariant checker, exports) without
/// holding it in memory at once. Each page is one bounded [`Read::scan`].
pub fn scan_pages<'r, R: Read + ?Sized>(
    read: &'r R,
    cf: Cf,
    range: KeyRange,
    dir: Direction,
    page: usize,
) -> impl Iterator<Item = Result<KeyValue, EngineError>> + 'r {
    ScanPages {
        read,
        cf,
        range,
        dir,
        page: page.max(1),
        buf: Vec::new().into_iter(),
        done: false,
    }
}

struct ScanPages<'r, R: ?Sized> {
    read: &'r R,
    cf: Cf,
    range: KeyRange,
    dir: Direction,
    page: usize,
    buf: std::vec::IntoIter<KeyValue>,
    done: bool,
}

impl<R: Read + ?Sized> Iterator for ScanPages<'_, R> {
    type Item = Result<KeyValue, EngineError>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(kv) = self.buf.next() {
                return Some(Ok(kv));
            }
            if self.done || self.range.is_empty() {
                return None;
            }
            let page = match self.read.scan(self.cf, &self.range, self.dir, self.page) {
                Ok(page) => page,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if page.len() < self.page {
                self.done = true;
            }
            if let Some((last, _)) = page.last() {
                match self.dir {
                    // Resume just above the last key: the key itself plus a zero byte.
                    Direction::Forward => {
                        let mut next = last.to_vec();
                        next.push(0);
                        self.range.start = next;
                    }
                    Direction::Reverse => self.range.end = last.to_vec(),
                }
            }
            self.buf = page.into_iter();
        }
    }
}

/// Lower-case hex of `bytes`, for error messages and logs.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
