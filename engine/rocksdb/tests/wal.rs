//! WAL recovery and the read-only open of the RocksDB backend on real stores:
//! a read-only open changes no byte of the directory and refuses a WAL damaged
//! before its end, as the default writable open does; a record torn at the end
//! (a crash in the middle of a write) is dropped by both; the point-in-time
//! mode is the operator's choice to keep what precedes the damage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ankusa_engine::{Batch, Cf, Direction, Durability, ErrorKind, KeyRange, Kv, Read};
use ankusa_engine_rocksdb::{RocksKv, WalRecovery};

/// A directory under the system temp dir, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("ankusa-rocksdb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("mkdir");
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const HOOKS: u32 = 30;

/// A store with [`HOOKS`] hooks (100 bytes of 7s each), one `Sync` batch
/// each, left in the WAL as a killed process leaves it. Returns the WAL's
/// path.
fn killed_store(dir: &Path) -> PathBuf {
    let kv = RocksKv::open(dir).expect("open");
    for i in 0..HOOKS {
        let mut b = Batch::new();
        b.put(Cf::Hooks, i.to_be_bytes().to_vec(), vec![7u8; 100]);
        kv.write(b, Durability::Sync).expect("write");
    }
    // What a SIGKILL leaves: the hooks in the WAL, nothing flushed
    // (RocksDB does not flush memtables on close while the WAL is on).
    drop(kv);
    let logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "log")
                && std::fs::metadata(p).is_ok_and(|m| m.len() > 0)
        })
        .collect();
    assert_eq!(logs.len(), 1, "one WAL holds the hooks: {logs:?}");
    assert!(
        !std::fs::read_dir(dir).expect("read dir").any(|e| e
            .expect("entry")
            .path()
            .extension()
            .is_some_and(|x| x == "sst")),
        "nothing flushed"
    );
    logs[0].clone()
}

/// Every file of `dir` (recursively) with its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(contents(&p));
        } else {
            out.insert(p.clone(), std::fs::read(&p).expect("read"));
        }
    }
    out
}

/// Asserts `dir` holds exactly `before` (naming the files that differ).
fn assert_unchanged(dir: &Path, before: &BTreeMap<PathBuf, Vec<u8>>, what: &str) {
    let now = contents(dir);
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(now.keys())
        .filter(|p| before.get(*p) != now.get(*p))
        .collect();
    assert!(changed.is_empty(), "{what} changed {changed:?}");
}

fn hooks(kv: &impl Read) -> usize {
    kv.scan(
        Cf::Hooks,
        &KeyRange::new(vec![0u8], vec![0xffu8; 8]),
        Direction::Forward,
        1000,
    )
    .expect("scan")
    .len()
}

/// Overwrites 16 bytes of `file` at `at`.
fn damage(file: &Path, at: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .expect("open the WAL");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(&[0xde, 0xad, 0xbe, 0xef].repeat(4))
        .expect("write");
}

#[test]
fn a_read_only_open_reads_the_wal_and_changes_no_byte() {
    let dir = Dir::new("ro");
    killed_store(&dir.0);
    let before = contents(&dir.0);
    let kv = RocksKv::open_read_only(&dir.0, WalRecovery::TornTail).expect("open read-only");
    assert!(kv.is_read_only());
    assert_eq!(
        hooks(&kv),
        HOOKS as usize,
        "the WAL's hooks, replayed in memory"
    );
    assert_eq!(hooks(&kv.snapshot()), HOOKS as usize);
    let mut b = Batch::new();
    b.put(Cf::Hooks, vec![9], vec![9]);
    let err = kv.write(b, Durability::Sync).unwrap_err();
    assert!(
        err.to_string().contains("the store is open read-only"),
        "{err}"
    );
    assert!(kv.sync().is_err());
    assert!(kv.flush_all().is_err());
    // A second read-only open beside the first: no lock is taken.
    let other =
        RocksKv::open_read_only(&dir.0, WalRecovery::TornTail).expect("a second read-only open");
    assert_eq!(hooks(&other), HOOKS as usize);
    drop((kv, other));
    assert_unchanged(&dir.0, &before, "the read-only opens changed the directory");
    // The writable open still finds every hook.
    assert_eq!(hooks(&RocksKv::open(&dir.0).expect("open")), HOOKS as usize);
}

#[test]
fn a_read_only_open_of_no_store_creates_nothing() {
    let dir = Dir::new("ro-none");
    let missing = dir.0.join("store");
    let err = RocksKv::open_read_only(&missing, WalRecovery::Absolute).unwrap_err();
    assert!(
        matches!(err, ankusa_engine::EngineError::Backend { op: "open", .. }),
        "{err}"
    );
    assert!(!missing.exists(), "created {}", missing.display());
}

/// A store another handle holds is [`ErrorKind::Locked`] (RocksDB says so
/// only in its `IO error`'s words), with RocksDB's message as it is.
#[test]
fn a_held_lock_is_its_own_kind() {
    let dir = Dir::new("locked");
    let held = RocksKv::open(&dir.0).expect("open");
    let err = RocksKv::open(&dir.0).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Locked), "{err}");
    assert!(err.to_string().contains("IO error"), "{err}");
    drop(held);
}

/// The offset of the hook payload (100 bytes of 7s) nearest a third into `wal`.
fn payload_at_a_third(wal: &Path) -> u64 {
    let bytes = std::fs::read(wal).expect("read the WAL");
    let from = bytes.len() / 3;
    let at = (from..bytes.len() - 16)
        .find(|&i| bytes[i..i + 16].iter().all(|&b| b == 7))
        .expect("a payload after a third");
    at as u64
}

/// The tester's damage inside a record (16 bytes of a payload a third into
/// the WAL): a checksum mismatch, which no mode but point in time passes over.
#[test]
fn a_wal_damaged_before_its_end_refuses_the_open_and_point_in_time_cuts_it() {
    let dir = Dir::new("damaged");
    let wal = killed_store(&dir.0);
    damage(&wal, payload_at_a_third(&wal));
    let before = contents(&dir.0);
    for mode in [WalRecovery::TornTail, WalRecovery::Absolute] {
        let err = RocksKv::open_read_only(&dir.0, mode).unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::Corruption), "{mode:?}: {err}");
        let err = err.to_string();
        assert!(
            err.contains("Corruption") && err.contains("checksum mismatch"),
            "{mode:?}: the read-only open names the damage: {err}"
        );
        assert_unchanged(
            &dir.0,
            &before,
            &format!("{mode:?}: the refused read-only open"),
        );
    }
    let err = RocksKv::open(&dir.0).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Corruption), "{err}");
    let err = err.to_string();
    assert!(
        err.contains("Corruption") && err.contains("checksum mismatch"),
        "the writable open refuses too: {err}"
    );
    assert!(
        std::fs::read(&wal).expect("read the WAL") == before[&wal],
        "the refused open left the WAL as it was"
    );
    // The operator's choice: keep what precedes the damage.
    let before = contents(&dir.0);
    let kept = hooks(
        &RocksKv::open_read_only(&dir.0, WalRecovery::PointInTime)
            .expect("read-only, point in time"),
    );
    assert!(
        kept > 0 && kept < HOOKS as usize,
        "point in time keeps the hooks before the damage: {kept}"
    );
    assert_unchanged(&dir.0, &before, "the read-only open");
    let kv =
        RocksKv::open_with_recovery(&dir.0, None, WalRecovery::PointInTime).expect("point in time");
    assert_eq!(hooks(&kv), kept);
}

/// Damage over a record's header in the WAL's last 32 KiB block (here its
/// only one) whose length field now points past the end: RocksDB reads it as
/// a record torn by a crash, which the default mode drops with what follows;
/// only the absolute mode reports it.
#[test]
fn a_damaged_length_in_the_last_block_is_reported_only_by_the_absolute_mode() {
    let dir = Dir::new("length");
    let wal = killed_store(&dir.0);
    let bytes = std::fs::read(&wal).expect("read the WAL");
    assert!(bytes.len() < 32 << 10, "one block");
    // A record header is the 7 bytes before a batch's 12-byte header; the
    // payload of the previous hook ends right before it.
    let at = payload_at_a_third(&wal);
    let end = (at as usize..bytes.len())
        .find(|&i| bytes[i] != 7)
        .expect("the payload's end");
    // crc (4) + length (2, little endian) + type (1): a length of 0xffff.
    let mut f = bytes.clone();
    f[end + 4] = 0xff;
    f[end + 5] = 0xff;
    std::fs::write(&wal, &f).expect("write the WAL");
    let before = contents(&dir.0);
    let kept = hooks(
        &RocksKv::open_read_only(&dir.0, WalRecovery::TornTail).expect("taken for a torn tail"),
    );
    assert!(kept < HOOKS as usize, "{kept}");
    let err = RocksKv::open_read_only(&dir.0, WalRecovery::Absolute)
        .unwrap_err()
        .to_string();
    assert!(err.contains("Corruption"), "{err}");
    assert_unchanged(&dir.0, &before, "the read-only open");
}

#[test]
fn a_record_torn_at_the_end_of_the_wal_is_dropped_without_an_error() {
    let dir = Dir::new("torn");
    let wal = killed_store(&dir.0);
    let len = std::fs::metadata(&wal).expect("stat").len();
    // The last write cut short (a crash in the middle of it): 20 bytes of
    // its record missing.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&wal)
        .expect("open")
        .set_len(len - 20)
        .expect("truncate");
    let before = contents(&dir.0);
    let kv = RocksKv::open_read_only(&dir.0, WalRecovery::TornTail)
        .expect("read-only open of a torn tail");
    assert_eq!(
        hooks(&kv),
        HOOKS as usize - 1,
        "only the torn record is dropped"
    );
    drop(kv);
    let err = RocksKv::open_read_only(&dir.0, WalRecovery::Absolute)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Corruption"),
        "the absolute mode reports a torn tail too: {err}"
    );
    assert_unchanged(&dir.0, &before, "the read-only open");
    let kv = RocksKv::open(&dir.0).expect("writable open of a torn tail");
    assert_eq!(hooks(&kv), HOOKS as usize - 1);
}
