//! The backend-neutral dump of a store (docs/design.md section 8, "Dumps"):
//! every `(cf, key, value)` of every column family, sentinels and counters
//! included, as one file that [`import`] loads into any backend.
//!
//! What it owns: the byte layout of a dump and its checks. It knows no key
//! layout: counters are ordinary keys of [`crate::COUNTER_CF`] with 8-byte
//! values, so copying every key copies them; the store format and the meta
//! key that carries the origin backend are given by the caller.
//!
//! # Layout (all integers big endian)
//! - **Header**: [`MAGIC`] (8 bytes), dump version `u16` ([`DUMP_VERSION`]),
//!   store format `u32`, origin backend (`len:8`, ASCII), CRC32 of the header
//!   bytes before it.
//! - **Records**, in [`Cf::ALL`] order and byte order of keys within a column
//!   family: tag `b'R'`, cf `u8` ([`Cf::index`]), key length `u16`, value
//!   length `u32`, CRC32 of those 8 framing bytes (a damaged length is caught
//!   before it is trusted), the key, the value, CRC32 of every byte of the
//!   record before it (tag to value).
//! - **Trailer**: tag `b'E'`, the record count of each column family (`u64`
//!   each, [`Cf::ALL`] order), the bytes of all records (`u64`), the digest
//!   (CRC32 over the bytes of every record in order), CRC32 of the trailer
//!   bytes before it. Nothing may follow.
//!
//! # The origin backend
//! The header names the backend the records were *first* exported from, not
//! the one a given export read: [`import`] keeps the header's backend in the
//! store under the caller's `origin_key` (cf `meta`), and [`export`] puts that
//! value in the header instead of dumping the key as a record. So an export
//! from RocksDB, imported into fjall and exported again, is byte-identical
//! to the first dump, and a checked-in fixture made on the memory engine
//! comes back byte for byte from any backend it was loaded into.
//!
//! # Memory
//! [`export`] reads in pages sized by bytes ([`PAGE_BYTES`]: a page holds
//! fewer entries when they are large) and writes through the caller's
//! writer; [`import`] reads record by record and commits batches of at most
//! [`BATCH_BYTES`]. Neither holds more than a page or a batch (and the one
//! record being read), whatever the store's size.

use std::io::{self, Write};

use crate::{Batch, Cf, Direction, Durability, EngineError, KeyRange, Kv, MAX_KEY_BYTES, Read};

/// The first 8 bytes of every dump.
pub const MAGIC: [u8; 8] = *b"ANKUSADP";
/// The dump layout this binary writes and reads.
pub const DUMP_VERSION: u16 = 1;
/// The most bytes of keys and values [`export`] asks one scan for (an
/// estimate from the largest entry of the page before).
pub const PAGE_BYTES: usize = 4 << 20;
/// The most entries of one export scan.
pub const PAGE_ENTRIES: usize = 1024;
/// [`import`] commits a batch once it holds this many bytes of keys and values.
pub const BATCH_BYTES: usize = 4 << 20;
/// ... or this many records.
pub const BATCH_RECORDS: usize = 4096;

const RECORD_TAG: u8 = b'R';
const END_TAG: u8 = b'E';
const FRAME_LEN: usize = 8;

/// What a dump's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The layout version ([`DUMP_VERSION`]).
    pub dump_version: u16,
    /// The store format stamped in the store the dump was made of (0: none).
    pub store_format: u32,
    /// The backend the records were first exported from (`rocksdb`, `fjall`,
    /// `memory`).
    pub backend: String,
}

/// What an export wrote or an import read and committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The header.
    pub header: Header,
    /// Records per column family, [`Cf::ALL`] order.
    pub counts: [u64; 5],
    /// Bytes of the whole dump file.
    pub file_bytes: u64,
    /// The digest of the trailer (CRC32 over every record's bytes).
    pub digest: u32,
}

impl Summary {
    /// Records in all column families.
    pub fn records(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Where in a dump a problem was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// The header (at byte 0).
    Header,
    /// Record `index` (0-based, in file order), which begins at byte `offset`.
    Record {
        /// 0-based, in file order.
        index: u64,
        /// Byte offset of its first byte.
        offset: u64,
    },
    /// The trailer, which begins at byte `offset`.
    Trailer {
        /// Byte offset of its first byte.
        offset: u64,
    },
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Header => f.write_str("the header"),
            Position::Record { index, offset } => write!(f, "record {index} (at byte {offset})"),
            Position::Trailer { offset } => write!(f, "the trailer (at byte {offset})"),
        }
    }
}

/// Errors of [`export`] and [`import`].
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The store failed a read or a write.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Reading or writing the dump file failed.
    #[error("{what}: {source}")]
    Io {
        /// `reading the dump`, `writing the dump`.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The dump does not verify: a CRC, a count, the digest, a length, a
    /// truncation, bytes after the trailer. Nothing of it may be trusted.
    #[error("{at}: {problem}")]
    Corrupt {
        /// Where.
        at: Position,
        /// What does not match, with the stored and computed values.
        problem: String,
    },
    /// A dump this binary cannot read (another layout version).
    #[error("dump version {found}; this ankusa reads dump version {DUMP_VERSION}")]
    Version {
        /// The header's version.
        found: u16,
    },
    /// [`import`] into a store that already holds keys.
    #[error(
        "the target store is not empty (cf {cf} holds keys): import loads into an empty store only"
    )]
    NotEmpty {
        /// The first column family found with a key.
        cf: &'static str,
    },
}

impl DumpError {
    fn corrupt(at: Position, problem: impl Into<String>) -> Self {
        DumpError::Corrupt {
            at,
            problem: problem.into(),
        }
    }
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> DumpError {
    move |source| DumpError::Io { what, source }
}

/// Every key a store may hold but [`top_key`]: the longest bound a backend
/// takes is [`MAX_KEY_BYTES`] long (fjall refuses a longer one).
fn all_keys() -> KeyRange {
    KeyRange::new(Vec::new(), top_key())
}

/// The greatest key a store may hold ([`MAX_KEY_BYTES`] bytes of `0xff`),
/// which [`all_keys`] leaves out: read with a point get after the scan.
fn top_key() -> Vec<u8> {
    vec![0xff; MAX_KEY_BYTES]
}

fn cf_of(byte: u8) -> Option<Cf> {
    Cf::ALL.get(usize::from(byte)).copied()
}

/// Writes what it is given to `out` and feeds it to a CRC32, counting bytes.
struct Counted<W> {
    out: W,
    bytes: u64,
}

impl<W: Write> Counted<W> {
    fn put(&mut self, buf: &[u8]) -> Result<(), DumpError> {
        self.out
            .write_all(buf)
            .map_err(io_err("writing the dump"))?;
        self.bytes += buf.len() as u64;
        Ok(())
    }
}

fn header_bytes(header: &Header) -> Vec<u8> {
    let mut h = Vec::with_capacity(24 + header.backend.len());
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&header.dump_version.to_be_bytes());
    h.extend_from_slice(&header.store_format.to_be_bytes());
    let name = header.backend.as_bytes();
    let len = u8::try_from(name.len()).unwrap_or(u8::MAX);
    h.push(len);
    h.extend_from_slice(&name[..usize::from(len)]);
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_be_bytes());
    h
}

/// Writes a dump of everything `read` holds to `out` (docs/design.md section
/// 8): the header with `store_format` and the origin backend (the value under
/// `origin_key` in cf `meta` when the store has one, else `backend`), every
/// record of every column family in [`Cf::ALL`] order and key order (the
/// `origin_key` record excepted: the header carries it), and the trailer.
/// `progress(records, bytes)` is called after every page.
///
/// Give it a snapshot (or a stopped store) for a consistent dump. `out` should
/// be buffered; it is flushed at the end.
///
/// # Errors
/// [`DumpError::Engine`] when a read fails; [`DumpError::Io`] when a write
/// fails.
pub fn export<R: Read + ?Sized, W: Write>(
    read: &R,
    backend: &str,
    store_format: u32,
    origin_key: &[u8],
    out: W,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Summary, DumpError> {
    let origin = match read.get(Cf::Meta, origin_key)? {
        Some(v) => String::from_utf8_lossy(&v).into_owned(),
        None => backend.to_owned(),
    };
    let mut w = DumpWriter::new(
        Header {
            dump_version: DUMP_VERSION,
            store_format,
            backend: origin,
        },
        out,
    )?;
    for cf in Cf::ALL {
        let mut range = all_keys();
        let mut limit = 1usize;
        loop {
            let page = read.scan(cf, &range, Direction::Forward, limit)?;
            let full = page.len() == limit;
            let mut largest = 1usize;
            for (k, v) in &page {
                largest = largest.max(k.len() + v.len());
                if cf == Cf::Meta && k.as_ref() == origin_key {
                    continue;
                }
                w.record(cf, k, v)?;
            }
            progress(w.records(), w.out.bytes);
            match page.last() {
                Some((last, _)) if full => {
                    let mut next = last.to_vec();
                    next.push(0);
                    range.start = next;
                }
                _ => break,
            }
            limit = (PAGE_BYTES / largest).clamp(1, PAGE_ENTRIES);
        }
        let top = top_key();
        if let Some(v) = read.get(cf, &top)? {
            w.record(cf, &top, &v)?;
        }
    }
    w.finish()
}

/// Writes a dump record by record: the header at [`DumpWriter::new`], the
/// trailer at [`DumpWriter::finish`]. [`export`] writes a whole store with
/// it; a caller that knows the key layout writes part of one (a cluster
/// node's hand-over of one tenant, docs/design.md section 11). Records must
/// come in [`Cf::ALL`] order and ascending key order within a column family,
/// as [`import`] and [`read_records`] check.
pub struct DumpWriter<W: Write> {
    out: Counted<W>,
    header: Header,
    counts: [u64; 5],
    digest: crc32fast::Hasher,
    record_bytes: u64,
    record: Vec<u8>,
}

impl<W: Write> DumpWriter<W> {
    /// Writes `header` to `out`.
    ///
    /// # Errors
    /// [`DumpError::Io`] when the write fails.
    pub fn new(header: Header, out: W) -> Result<DumpWriter<W>, DumpError> {
        let mut out = Counted { out, bytes: 0 };
        out.put(&header_bytes(&header))?;
        Ok(DumpWriter {
            out,
            header,
            counts: [0; 5],
            digest: crc32fast::Hasher::new(),
            record_bytes: 0,
            record: Vec::new(),
        })
    }

    /// Writes one record.
    ///
    /// # Errors
    /// [`DumpError::Io`] when the write fails.
    pub fn record(&mut self, cf: Cf, key: &[u8], value: &[u8]) -> Result<(), DumpError> {
        encode_record(&mut self.record, cf, key, value);
        self.digest.update(&self.record);
        self.record_bytes += self.record.len() as u64;
        self.out.put(&self.record)?;
        self.counts[cf.index()] += 1;
        Ok(())
    }

    /// The records written so far.
    pub fn records(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Writes the trailer and flushes.
    ///
    /// # Errors
    /// [`DumpError::Io`] when the write fails.
    pub fn finish(mut self) -> Result<Summary, DumpError> {
        let digest = self.digest.finalize();
        let mut t = Vec::with_capacity(1 + 8 * 6 + 8);
        t.push(END_TAG);
        for c in self.counts {
            t.extend_from_slice(&c.to_be_bytes());
        }
        t.extend_from_slice(&self.record_bytes.to_be_bytes());
        t.extend_from_slice(&digest.to_be_bytes());
        let crc = crc32fast::hash(&t);
        t.extend_from_slice(&crc.to_be_bytes());
        self.out.put(&t)?;
        self.out.out.flush().map_err(io_err("writing the dump"))?;
        Ok(Summary {
            header: self.header,
            counts: self.counts,
            file_bytes: self.out.bytes,
            digest,
        })
    }
}

/// One record's bytes into `buf` (cleared first).
fn encode_record(buf: &mut Vec<u8>, cf: Cf, key: &[u8], value: &[u8]) {
    buf.clear();
    // Keys are at most MAX_KEY_BYTES (u16) and values at most MAX_VALUE_BYTES
    // (u32) on every backend (`Batch::validate`).
    let klen = u16::try_from(key.len()).unwrap_or(u16::MAX);
    let vlen = u32::try_from(value.len()).unwrap_or(u32::MAX);
    buf.push(RECORD_TAG);
    buf.push(cf.index() as u8);
    buf.extend_from_slice(&klen.to_be_bytes());
    buf.extend_from_slice(&vlen.to_be_bytes());
    let frame = crc32fast::hash(&buf[..FRAME_LEN]);
    buf.extend_from_slice(&frame.to_be_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
    let crc = crc32fast::hash(buf);
    buf.extend_from_slice(&crc.to_be_bytes());
}

/// Reads from `input`, counting bytes; tells a clean end of file from a short
/// read.
struct Source<R> {
    input: R,
    offset: u64,
}

impl<R: io::Read> Source<R> {
    /// Fills `buf`; `Ok(false)` when the input ended before its first byte.
    fn fill(&mut self, buf: &mut [u8], at: Position, what: &str) -> Result<bool, DumpError> {
        let mut got = 0;
        while got < buf.len() {
            match self.input.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => {
                    return Err(DumpError::corrupt(
                        at,
                        format!(
                            "the dump ends in the middle of {what} (truncated at byte {})",
                            self.offset + got as u64
                        ),
                    ));
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(DumpError::Io {
                        what: "reading the dump",
                        source: e,
                    });
                }
            }
        }
        self.offset += buf.len() as u64;
        Ok(true)
    }

    fn exact(&mut self, buf: &mut [u8], at: Position, what: &str) -> Result<(), DumpError> {
        if self.fill(buf, at, what)? {
            Ok(())
        } else {
            Err(DumpError::corrupt(
                at,
                format!(
                    "the dump ends before {what} (truncated at byte {})",
                    self.offset
                ),
            ))
        }
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn read_header<R: io::Read>(src: &mut Source<R>) -> Result<(Header, Vec<u8>), DumpError> {
    let at = Position::Header;
    let mut fixed = [0u8; 8 + 2 + 4 + 1];
    src.exact(&mut fixed, at, "the header")?;
    if fixed[..8] != MAGIC {
        return Err(DumpError::corrupt(
            at,
            "not an ankusa dump (its first 8 bytes are not ANKUSADP)",
        ));
    }
    let version = u16::from_be_bytes([fixed[8], fixed[9]]);
    if version != DUMP_VERSION {
        return Err(DumpError::Version { found: version });
    }
    let mut name = vec![0u8; usize::from(fixed[14])];
    src.exact(&mut name, at, "the header")?;
    let mut crc = [0u8; 4];
    src.exact(&mut crc, at, "the header")?;
    let mut all = fixed.to_vec();
    all.extend_from_slice(&name);
    let computed = crc32fast::hash(&all);
    if be32(&crc) != computed {
        return Err(DumpError::corrupt(
            at,
            format!(
                "CRC32 mismatch (stored {:08x}, computed {computed:08x})",
                be32(&crc)
            ),
        ));
    }
    let backend = String::from_utf8(name)
        .map_err(|_| DumpError::corrupt(at, "the backend name is not UTF-8"))?;
    all.extend_from_slice(&crc);
    Ok((
        Header {
            dump_version: version,
            store_format: be32(&fixed[10..14]),
            backend,
        },
        all,
    ))
}

/// Reads the header of a dump (for a tool that says what a dump holds before
/// loading it).
///
/// # Errors
/// As [`import`], for the header.
pub fn read_dump_header<R: io::Read>(input: R) -> Result<Header, DumpError> {
    Ok(read_header(&mut Source { input, offset: 0 })?.0)
}

/// Loads a dump from `input` into `kv`, which must be empty (docs/design.md
/// section 8): every record is checked (its framing CRC, its CRC, a known
/// column family, a key within the engine's bounds) before it is added to a
/// batch; batches of at most [`BATCH_BYTES`] / [`BATCH_RECORDS`] are committed
/// `Buffered` as they fill; at the end the trailer's counts, byte total and
/// digest are checked against what was read, the header's backend is put
/// under `origin_key` in cf `meta` (see the module docs), and the last batch
/// is committed `Sync` (every earlier batch durable with it).
/// `progress(records, bytes read)` is called after every batch.
///
/// On an error, part of the dump may have been committed: load into a new
/// store and throw it away on error (the CLI imports into a new directory
/// beside the target and renames it into place only on success).
///
/// # Errors
/// [`DumpError::Corrupt`] naming the record (index and byte offset) or the
/// header or trailer that does not verify, or a dump cut short;
/// [`DumpError::Version`]; [`DumpError::NotEmpty`]; [`DumpError::Io`];
/// [`DumpError::Engine`] when a write fails.
pub fn import<K: Kv, R: io::Read>(
    kv: &K,
    input: R,
    origin_key: &[u8],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Summary, DumpError> {
    for cf in Cf::ALL {
        if read_first(kv, cf)? {
            return Err(DumpError::NotEmpty { cf: cf.name() });
        }
    }
    let mut batch = Batch::new();
    let mut batch_bytes = 0usize;
    let mut batch_records = 0usize;
    let summary = read_records(input, origin_key, &mut |r| {
        batch.put(r.cf, r.key.to_vec(), r.value.to_vec());
        batch_bytes += r.key.len() + r.value.len();
        batch_records += 1;
        if batch_bytes >= BATCH_BYTES || batch_records >= BATCH_RECORDS {
            kv.write(std::mem::take(&mut batch), Durability::Buffered)?;
            batch_bytes = 0;
            batch_records = 0;
            progress(r.index + 1, r.end);
        }
        Ok(())
    })?;
    batch.put(
        Cf::Meta,
        origin_key.to_vec(),
        summary.header.backend.as_bytes().to_vec(),
    );
    kv.write(batch, Durability::Sync)?;
    progress(summary.records(), summary.file_bytes);
    Ok(summary)
}

/// One verified record of a dump, handed to [`read_records`]' caller.
#[derive(Debug)]
pub struct Record<'a> {
    /// Its index (0 for the first record).
    pub index: u64,
    /// The byte offset just past it in the dump.
    pub end: u64,
    /// Its column family.
    pub cf: Cf,
    /// Its key.
    pub key: &'a [u8],
    /// Its value.
    pub value: &'a [u8],
}

/// Reads a dump from `input` and hands each record to `each` once its own
/// checks passed (framing, CRC32, order, not the `origin_key` record); then
/// verifies the trailer. A record handed on is not yet covered by the
/// trailer's checks: a caller that must not act on a damaged dump collects
/// the records and acts once this returns `Ok` ([`import`] writes to a new
/// store it throws away on error).
///
/// # Errors
/// As [`import`], and whatever `each` returns.
pub fn read_records<R: io::Read>(
    input: R,
    origin_key: &[u8],
    each: &mut dyn FnMut(Record<'_>) -> Result<(), DumpError>,
) -> Result<Summary, DumpError> {
    let mut src = Source { input, offset: 0 };
    let (header, _) = read_header(&mut src)?;
    let mut counts = [0u64; 5];
    let mut digest = crc32fast::Hasher::new();
    let mut record_bytes = 0u64;
    let mut index = 0u64;
    let mut last: Option<(Cf, Vec<u8>)> = None;
    let trailer_at = loop {
        let offset = src.offset;
        let at = Position::Record { index, offset };
        let mut tag = [0u8; 1];
        if !src.fill(&mut tag, at, "a record")? {
            return Err(DumpError::corrupt(
                at,
                format!(
                    "the dump ends after {index} records at byte {offset}, without its trailer (truncated)"
                ),
            ));
        }
        match tag[0] {
            RECORD_TAG => {}
            END_TAG => break offset,
            other => {
                return Err(DumpError::corrupt(
                    at,
                    format!("unknown tag {other:#04x} (expected a record 'R' or the trailer 'E')"),
                ));
            }
        }
        let mut rec = vec![RECORD_TAG];
        let mut frame = [0u8; FRAME_LEN - 1 + 4];
        src.exact(&mut frame, at, "a record's framing")?;
        rec.extend_from_slice(&frame[..FRAME_LEN - 1]);
        let frame_crc = crc32fast::hash(&rec);
        let stored = be32(&frame[FRAME_LEN - 1..]);
        if stored != frame_crc {
            return Err(DumpError::corrupt(
                at,
                format!(
                    "CRC32 mismatch in the record's framing (stored {stored:08x}, computed {frame_crc:08x})"
                ),
            ));
        }
        rec.extend_from_slice(&frame[FRAME_LEN - 1..]);
        let cf = cf_of(frame[0])
            .ok_or_else(|| DumpError::corrupt(at, format!("unknown column family {}", frame[0])))?;
        let klen = usize::from(u16::from_be_bytes([frame[1], frame[2]]));
        let vlen = be32(&frame[3..7]) as usize;
        if klen == 0 {
            return Err(DumpError::corrupt(at, "an empty key"));
        }
        let head = rec.len();
        rec.resize(head + klen + vlen, 0);
        src.exact(&mut rec[head..], at, "a record's key and value")?;
        let mut crc = [0u8; 4];
        src.exact(&mut crc, at, "a record's CRC32")?;
        let computed = crc32fast::hash(&rec);
        if be32(&crc) != computed {
            return Err(DumpError::corrupt(
                at,
                format!(
                    "CRC32 mismatch (stored {:08x}, computed {computed:08x})",
                    be32(&crc)
                ),
            ));
        }
        rec.extend_from_slice(&crc);
        let key = &rec[head..head + klen];
        if cf == Cf::Meta && key == origin_key {
            return Err(DumpError::corrupt(
                at,
                "a record of the origin key, which only the header carries",
            ));
        }
        if let Some((lcf, lkey)) = &last
            && (*lcf, lkey.as_slice()) >= (cf, key)
        {
            return Err(DumpError::corrupt(
                at,
                "records out of order (each column family in order, keys ascending)",
            ));
        }
        last = Some((cf, key.to_vec()));
        digest.update(&rec);
        record_bytes += rec.len() as u64;
        counts[cf.index()] += 1;
        each(Record {
            index,
            end: src.offset,
            cf,
            key,
            value: &rec[head + klen..head + klen + vlen],
        })?;
        index += 1;
    };
    let at = Position::Trailer { offset: trailer_at };
    let mut t = [0u8; 8 * 5 + 8 + 4 + 4];
    src.exact(&mut t, at, "the trailer")?;
    let mut body = vec![END_TAG];
    body.extend_from_slice(&t[..t.len() - 4]);
    let computed = crc32fast::hash(&body);
    let stored = be32(&t[t.len() - 4..]);
    if stored != computed {
        return Err(DumpError::corrupt(
            at,
            format!("CRC32 mismatch (stored {stored:08x}, computed {computed:08x})"),
        ));
    }
    for (i, cf) in Cf::ALL.into_iter().enumerate() {
        let want = be64(&t[i * 8..]);
        if want != counts[i] {
            return Err(DumpError::corrupt(
                at,
                format!(
                    "the trailer counts {want} records of cf {}, the dump holds {}",
                    cf.name(),
                    counts[i]
                ),
            ));
        }
    }
    let want_bytes = be64(&t[40..]);
    if want_bytes != record_bytes {
        return Err(DumpError::corrupt(
            at,
            format!(
                "the trailer counts {want_bytes} bytes of records, the dump holds {record_bytes}"
            ),
        ));
    }
    let digest = digest.finalize();
    let want_digest = be32(&t[48..]);
    if want_digest != digest {
        return Err(DumpError::corrupt(
            at,
            format!("digest mismatch (stored {want_digest:08x}, computed {digest:08x})"),
        ));
    }
    let mut extra = [0u8; 1];
    if src.fill(&mut extra, at, "")? {
        return Err(DumpError::corrupt(
            at,
            format!("bytes after the trailer (at byte {})", src.offset - 1),
        ));
    }
    Ok(Summary {
        header,
        counts,
        file_bytes: src.offset,
        digest,
    })
}

fn read_first<K: Kv>(kv: &K, cf: Cf) -> Result<bool, EngineError> {
    Ok(kv.first(cf, &all_keys(), Direction::Forward)?.is_some()
        || kv.get(cf, &top_key())?.is_some())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::memory::MemoryKv;

    const ORIGIN: &[u8] = b"origin";

    fn store() -> MemoryKv {
        let kv = MemoryKv::new();
        let mut b = Batch::new();
        b.put(Cf::Meta, b"format".to_vec(), 2u32.to_be_bytes().to_vec());
        for i in 0..300u32 {
            b.put(
                Cf::Hooks,
                i.to_be_bytes().to_vec(),
                vec![i as u8; (i as usize) * 7],
            );
            b.put(
                Cf::Deliveries,
                [i.to_be_bytes(), [0; 4]].concat(),
                b"row".to_vec(),
            );
        }
        b.put(Cf::Index, vec![0xff; 5], Vec::new());
        b.counter_add(b"C\0\0\0\x01\x01".to_vec(), -42);
        b.put(Cf::Archive, vec![1], Vec::new());
        b.put(Cf::Archive, top_key(), b"the greatest key".to_vec());
        kv.write(b, Durability::Sync).unwrap();
        kv
    }

    fn dump_of(kv: &MemoryKv, backend: &str) -> Vec<u8> {
        let mut out = Vec::new();
        export(&kv.snapshot(), backend, 2, ORIGIN, &mut out, &mut |_, _| {}).unwrap();
        out
    }

    fn load(bytes: &[u8]) -> (MemoryKv, Result<Summary, DumpError>) {
        let kv = MemoryKv::new();
        let r = import(&kv, bytes, ORIGIN, &mut |_, _| {});
        (kv, r)
    }

    fn everything(kv: &MemoryKv) -> Vec<(Cf, Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        for cf in Cf::ALL {
            for (k, v) in kv
                .scan(cf, &all_keys(), Direction::Forward, usize::MAX)
                .unwrap()
            {
                all.push((cf, k.to_vec(), v.to_vec()));
            }
            if let Some(v) = kv.get(cf, &top_key()).unwrap() {
                all.push((cf, top_key(), v.to_vec()));
            }
        }
        all
    }

    #[test]
    fn round_trip_is_byte_identical_and_keeps_the_origin() {
        let kv = store();
        let first = dump_of(&kv, "rocksdb");
        let (copy, summary) = load(&first);
        let summary = summary.unwrap();
        assert_eq!(summary.counts, [1, 300, 300, 2, 2]);
        assert_eq!(summary.header.backend, "rocksdb");
        assert_eq!(summary.header.store_format, 2);
        assert_eq!(summary.file_bytes, first.len() as u64);
        assert_eq!(copy.counter(b"C\0\0\0\x01\x01").unwrap(), -42);
        assert_eq!(
            copy.get(Cf::Meta, ORIGIN).unwrap().unwrap().as_ref(),
            b"rocksdb"
        );
        // Exported again "from fjall": the header keeps the first origin.
        let second = dump_of(&copy, "fjall");
        assert_eq!(first, second);
        let mut without_origin = everything(&copy);
        without_origin.retain(|(cf, k, _)| !(*cf == Cf::Meta && k == ORIGIN));
        assert_eq!(everything(&kv), without_origin);
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let first = dump_of(&store(), "memory");
        // Every byte of a small dump (headers, framing, keys, values, CRCs,
        // trailer) flipped in turn.
        let small = MemoryKv::new();
        let mut b = Batch::new();
        b.put(Cf::Hooks, b"k1".to_vec(), b"v1".to_vec());
        b.put(Cf::Index, b"k2".to_vec(), b"value two".to_vec());
        small.write(b, Durability::Sync).unwrap();
        let bytes = dump_of(&small, "memory");
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(load(&bad).1.is_err(), "byte {i} flipped was accepted");
        }
        // A flipped value byte of record 5 is named with its index and offset.
        let mut offset = header_bytes(&Header {
            dump_version: 1,
            store_format: 2,
            backend: "memory".into(),
        })
        .len();
        let mut rec = Vec::new();
        let entries = everything(&store());
        for (cf, k, v) in entries.iter().take(5) {
            encode_record(&mut rec, *cf, k, v);
            offset += rec.len();
        }
        let mut bad = first.clone();
        bad[offset + 12 + 4 + 1] ^= 0x80;
        let (_, r) = load(&bad);
        let e = r.unwrap_err();
        assert!(
            matches!(e, DumpError::Corrupt { at: Position::Record { index: 5, offset: o }, .. } if o == offset as u64),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("record 5 (at byte {offset}): CRC32 mismatch")),
            "{e}"
        );
    }

    #[test]
    fn a_truncated_dump_is_refused() {
        let bytes = dump_of(&store(), "memory");
        for cut in [0, 5, 20, bytes.len() / 2, bytes.len() - 60, bytes.len() - 1] {
            let (_, r) = load(&bytes[..cut]);
            let e = r.unwrap_err();
            assert!(
                e.to_string().contains("truncated") || e.to_string().contains("ends"),
                "cut at {cut}: {e}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let e = load(&longer).1.unwrap_err();
        assert!(e.to_string().contains("bytes after the trailer"), "{e}");
    }

    #[test]
    fn a_dropped_record_fails_the_counts() {
        let bytes = dump_of(&store(), "memory");
        let h = header_bytes(&Header {
            dump_version: 1,
            store_format: 2,
            backend: "memory".into(),
        })
        .len();
        // Record 0 is the meta format stamp: 12 framing + 6 key + 4 value + 4.
        let rec0 = 12 + 6 + 4 + 4;
        let bad = [&bytes[..h], &bytes[h + rec0..]].concat();
        let e = load(&bad).1.unwrap_err();
        assert!(
            e.to_string()
                .contains("the trailer counts 1 records of cf meta, the dump holds 0"),
            "{e}"
        );
    }

    #[test]
    fn import_refuses_a_store_that_is_not_empty() {
        let bytes = dump_of(&store(), "memory");
        let kv = store();
        let e = import(&kv, bytes.as_slice(), ORIGIN, &mut |_, _| {}).unwrap_err();
        assert!(matches!(e, DumpError::NotEmpty { cf: "meta" }), "{e}");
    }

    #[test]
    fn export_pages_large_values_in_bounded_scans() {
        let kv = MemoryKv::new();
        let mut b = Batch::new();
        for i in 0..40u8 {
            b.put(Cf::Hooks, vec![i + 1], vec![i; 1 << 20]);
        }
        kv.write(b, Durability::Sync).unwrap();
        let before = kv.stats();
        let mut out = Vec::new();
        let s = export(&kv, "memory", 2, ORIGIN, &mut out, &mut |_, _| {}).unwrap();
        let used = kv.stats() - before;
        assert_eq!(s.counts[Cf::Hooks.index()], 40);
        // 1 MiB values: 4 per page after the first one-entry page.
        assert!(used.seeks >= 10, "{used:?}");
        assert_eq!(used.entries_scanned, 40);
        let (copy, r) = load(&out);
        r.unwrap();
        assert_eq!(copy.get(Cf::Hooks, &[40]).unwrap().unwrap().len(), 1 << 20);
    }
}
