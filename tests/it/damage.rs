//! A damaged store (the tester's report): a fjall journal or a RocksDB WAL
//! overwritten after a SIGKILL, a store whose format stamp is gone, a full or
//! read-only disk under `ankusa store check`. The real binary on stores the
//! real relay wrote.
//!
//! - `serve` never takes a store directory with the engine's data files and
//!   no format stamp for a new store: it refuses (exit 3), naming the
//!   directory and what to do; a store whose first start was interrupted
//!   before its stamp (its creation marker still there) is stamped.
//! - A RocksDB WAL damaged before its end refuses `serve` and `store check`
//!   (exit 3, RocksDB's corruption named) instead of being cut; the operator's
//!   `ANKUSA_ROCKSDB_WAL_RECOVERY=point-in-time` keeps what precedes it.
//! - `store check` on RocksDB changes no byte of the store (every file
//!   compared before and after), and runs on a full disk and a read-only one.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use crate::faults::Tmpfs;
use crate::relay::{Relay, config, run_cli};
use crate::sink::Sink;
use crate::store::store_check;

const JSON: (&str, &str) = ("content-type", "application/json");
const HOOKS: usize = 30;

/// A relay on `backend` whose one sink entry is paused: every hook stays
/// pending in the store.
async fn relay(backend: &str, sink: &Sink) -> Relay {
    Relay::start(&config(
        backend,
        &format!(
            "
sources:
  - name: s
    sinks: [{{type: http, url: '{}', paused: true}}]
",
            sink.url()
        ),
    ))
    .await
}

/// A hook body with a run of 200 `z`s (the WAL damage is aimed at one).
fn body(i: usize) -> String {
    format!("{{\"i\":{i},\"pad\":\"{}\"}}", "z".repeat(200))
}

/// [`HOOKS`] hooks acknowledged, then SIGKILL: the store as a crash leaves it.
async fn post_and_kill(relay: &mut Relay) {
    for i in 0..HOOKS {
        relay.post("/hooks/s", &[JSON], body(i)).await.id();
    }
    relay.kill();
}

/// Every file under `dir` with its bytes.
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

/// Asserts `dir` holds exactly `before`, naming the files that differ.
fn assert_unchanged(dir: &Path, before: &BTreeMap<PathBuf, Vec<u8>>, what: &str) {
    let now = contents(dir);
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(now.keys())
        .filter(|p| before.get(*p) != now.get(*p))
        .collect();
    assert!(changed.is_empty(), "{what} changed {changed:?}");
}

/// The files of `dir` whose name ends in `.ext`, sorted by name length then
/// name (`9.jnl` before `10.jnl`).
fn files_ending(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
    out
}

/// The RocksDB WAL that holds the hooks: the one `.log` file with bytes.
fn wal(store: &Path) -> PathBuf {
    let logs: Vec<PathBuf> = files_ending(store, "log")
        .into_iter()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .collect();
    assert_eq!(
        logs.len(),
        1,
        "one WAL with bytes in {}: {logs:?}",
        store.display()
    );
    logs[0].clone()
}

/// Overwrites 16 bytes of `file` at `at` (the tester's damage).
fn damage(file: &Path, at: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .expect("open");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(&[0xde, 0xad, 0xbe, 0xef].repeat(4))
        .expect("write");
    f.sync_all().expect("sync");
}

/// The offset of the first run of 16 `z`s (a hook's payload) a third or more
/// into `file`.
fn payload_at_a_third(file: &Path) -> u64 {
    let bytes = std::fs::read(file).expect("read");
    let from = bytes.len() / 3;
    (from..bytes.len() - 16)
        .find(|&i| bytes[i..i + 16].iter().all(|&b| b == b'z'))
        .expect("a payload after a third") as u64
}

/// `ankusa store <args>`: (status, output).
fn store_cmd(args: &[&OsStr], cwd: &Path) -> (ExitStatus, String) {
    let mut all = vec![OsStr::new("store")];
    all.extend_from_slice(args);
    run_cli(&all, cwd)
}

/// The `N hooks` of `store check`'s clean summary.
fn hooks_in(out: &str) -> usize {
    let (_, rest) = out
        .split_once(": clean (")
        .unwrap_or_else(|| panic!("not a clean summary: {out}"));
    rest.split(", ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"))
}

/// The refusal of a store with data files and no stamp, as `serve` and
/// `store check` say it.
fn assert_no_stamp_refusal(out: &str, store: &Path, backend: &str) {
    for want in [
        "the store has data files but no format stamp: it is damaged, or its journal/WAL was cut when it was opened",
        &format!("ankusa store import DUMP DATA_DIR --store {backend}"),
        &format!(
            "or move {} away to start with an empty store",
            store.display()
        ),
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

/// A store directory made by the engine and never stamped (what a relay
/// killed between its store's open and its first batch leaves).
fn unstamped_store(backend: &str, dir: &Path) {
    match backend {
        "rocksdb" => drop(ankusa_engine_rocksdb::RocksKv::open(dir).expect("create")),
        _ => drop(ankusa_engine_fjall::FjallKv::open(dir).expect("create")),
    }
}

/// The creation marker `serve` writes beside a new store until its stamp is
/// durable.
fn marker(data: &Path, backend: &str) -> PathBuf {
    data.join(format!(".store-{backend}.creating"))
}

async fn no_stamp_and_first_start(backend: &str) {
    let sink = Sink::ok().await;
    let mut relay = relay(backend, &sink).await;
    let data = relay.data_dir();
    let store = data.join(format!("store-{backend}"));
    assert!(relay.log().contains("new store"), "{}", relay.log());
    assert!(
        !marker(&data, backend).exists(),
        "the creation marker is removed once the stamp is durable"
    );
    relay.kill();

    // Engine files, no stamp, no marker: refused, and left as it was.
    std::fs::remove_dir_all(&store).expect("rm the store");
    unstamped_store(backend, &store);
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    assert_no_stamp_refusal(&log, &store, backend);
    assert!(!log.contains("new store"), "{log}");
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(3), "{out}");
    assert_no_stamp_refusal(&out, &store, backend);
    let (status, out) = store_cmd(
        &[OsStr::new("migrate"), data.as_os_str()],
        data.parent().expect("parent"),
    );
    assert_eq!(status.code(), Some(3), "{out}");
    assert_no_stamp_refusal(&out, &store, backend);

    // The same with the creation marker: a first start killed before its
    // stamp was durable. store check says so (exit 2), serve stamps it.
    std::fs::write(marker(&data, backend), b"").expect("marker");
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains("a relay's first start was interrupted before it stamped this new store"),
        "{out}"
    );
    relay.restart().await;
    assert!(relay.log().contains("new store"), "{}", relay.log());
    assert!(!marker(&data, backend).exists());
    relay.post("/hooks/s", &[JSON], body(0)).await.id();
    relay.kill();

    // An empty store directory (made by an operator, or a mount point) is a
    // new store.
    std::fs::remove_dir_all(&store).expect("rm the store");
    std::fs::create_dir(&store).expect("mkdir");
    relay.restart().await;
    assert!(relay.log().contains("new store"), "{}", relay.log());
    relay.sigterm();
    assert!(
        relay.wait_exit(Duration::from_secs(90)).await.success(),
        "{}",
        relay.log()
    );
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(0), "{out}");
    assert_eq!(hooks_in(&out), 0, "{out}");
}

/// A store whose engine record is gone (RocksDB's CURRENT, fjall's
/// version): `serve` refuses it before the engine opens it, and every file
/// stays as it was (a new user's report: RocksDB's open with
/// create_if_missing made a new database there and deleted the table files).
async fn engine_record_gone(backend: &str, record: &str) {
    let sink = Sink::ok().await;
    let mut relay = relay(backend, &sink).await;
    post_and_kill(&mut relay).await;
    let data = relay.data_dir();
    let store = data.join(format!("store-{backend}"));
    std::fs::remove_file(store.join(record)).expect("rm the engine record");
    let before = contents(&store);
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    for want in [
        format!(
            "the store directory {} holds files but no {record}",
            store.display()
        ),
        "Nothing was changed".to_owned(),
        format!(
            "or move {} away to start with an empty store",
            store.display()
        ),
    ] {
        assert!(log.contains(&want), "missing {want:?} in:\n{log}");
    }
    assert!(!log.contains("new store"), "{log}");
    assert_unchanged(
        &store,
        &before,
        "serve on a store without its engine record",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_rocksdb_store_without_current_and_changes_nothing() {
    engine_record_gone("rocksdb", "CURRENT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_fjall_store_without_its_version_file_and_changes_nothing() {
    engine_record_gone("fjall", "version").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_rocksdb_files_without_a_stamp_and_stamps_an_interrupted_first_start() {
    no_stamp_and_first_start("rocksdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_fjall_files_without_a_stamp_and_stamps_an_interrupted_first_start() {
    no_stamp_and_first_start("fjall").await;
}

/// The tester's fjall case: the journal overwritten at its start after a
/// SIGKILL. fjall's open cuts the journal there (the stamp goes with it);
/// `serve` refuses instead of starting on an empty store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_fjall_store_whose_damaged_journal_took_the_stamp() {
    let sink = Sink::ok().await;
    let mut relay = relay("fjall", &sink).await;
    post_and_kill(&mut relay).await;
    let data = relay.data_dir();
    let store = data.join("store-fjall");
    let journals = files_ending(&store, "jnl");
    assert!(!journals.is_empty(), "no journal in {}", store.display());
    damage(&journals[0], 0);
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    assert_no_stamp_refusal(&log, &store, "fjall");
    assert!(!log.contains("new store"), "started as a new store:\n{log}");
    // Still refused on the next start (nothing was stamped).
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    assert_no_stamp_refusal(&log, &store, "fjall");
}

/// The tester's RocksDB case: 16 bytes of a hook a third into the WAL after
/// a SIGKILL. `store check` reports the corruption (exit 3) and changes no
/// byte; `serve` refuses (exit 3) and leaves the WAL as it was; with
/// `ANKUSA_ROCKSDB_WAL_RECOVERY=point-in-time` it keeps the hooks before the
/// damage, and the store is clean with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rocksdb_wal_damaged_before_its_end_is_reported_and_refused_not_cut() {
    let sink = Sink::ok().await;
    let mut relay = relay("rocksdb", &sink).await;
    post_and_kill(&mut relay).await;
    let data = relay.data_dir();
    let store = data.join("store-rocksdb");
    let wal = wal(&store);
    damage(&wal, payload_at_a_third(&wal));
    let before = contents(&store);

    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(3), "{out}");
    for want in [
        &format!(
            "cannot open the store at {}: it is damaged",
            store.display()
        ),
        "Corruption: ",
        "checksum mismatch",
        "ANKUSA_ROCKSDB_WAL_RECOVERY=point-in-time",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert_unchanged(&store, &before, "store check");

    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    for want in [
        &format!("the store at {} is damaged", store.display()),
        "checksum mismatch",
        "ankusa store import",
        "ANKUSA_ROCKSDB_WAL_RECOVERY=point-in-time",
    ] {
        assert!(log.contains(want), "missing {want:?} in:\n{log}");
    }
    assert!(
        std::fs::read(&wal).expect("read the WAL") == before[&wal],
        "the refused start changed the WAL"
    );

    relay.set_env(&[("ANKUSA_ROCKSDB_WAL_RECOVERY", "point-in-time")]);
    relay.restart().await;
    assert!(
        relay.log().contains(
            "ANKUSA_ROCKSDB_WAL_RECOVERY=point-in-time: the WAL was replayed up to its first record"
        ),
        "{}",
        relay.log()
    );
    relay.sigterm();
    assert!(
        relay.wait_exit(Duration::from_secs(90)).await.success(),
        "{}",
        relay.log()
    );
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(0), "{out}");
    let kept = hooks_in(&out);
    assert!(
        kept > 0 && kept < HOOKS,
        "the hooks before the damage: {out}"
    );
}

/// RocksDB's WAL overwritten at its start: the stamp's record is the one
/// damaged. Whatever the open does with it (refused as damage, or taken for a
/// torn tail), `serve` refuses; the operator's point-in-time start drops the
/// whole WAL, stamp included, and is refused as data files without a stamp
/// instead of starting empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rocksdb_wal_damaged_at_its_start_never_starts_an_empty_store() {
    let sink = Sink::ok().await;
    let mut relay = relay("rocksdb", &sink).await;
    post_and_kill(&mut relay).await;
    let data = relay.data_dir();
    let store = data.join("store-rocksdb");
    damage(&wal(&store), 0);
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("is damaged") || log.contains("no format stamp"),
        "{log}"
    );
    relay.set_env(&[("ANKUSA_ROCKSDB_WAL_RECOVERY", "point-in-time")]);
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    assert_no_stamp_refusal(&log, &store, "rocksdb");
    assert!(!log.contains("new store"), "{log}");
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(3), "{out}");
    assert_no_stamp_refusal(&out, &store, "rocksdb");
}

/// `store check` on a killed RocksDB store (its hooks only in the WAL):
/// clean with every hook, every file byte-identical after; then on a copy on
/// a full disk and on a read-only one, the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_on_rocksdb_writes_nothing_and_runs_on_a_full_or_read_only_disk() {
    let sink = Sink::ok().await;
    let mut relay = relay("rocksdb", &sink).await;
    post_and_kill(&mut relay).await;
    let data = relay.data_dir();
    let store = data.join("store-rocksdb");
    assert!(std::fs::metadata(wal(&store)).expect("stat").len() > 0);
    let before = contents(&store);
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(0), "{out}");
    assert_eq!(hooks_in(&out), HOOKS, "{out}");
    assert_unchanged(&store, &before, "store check");

    let disk = match Tmpfs::mount("8m") {
        Ok(d) => d,
        Err(why) => {
            eprintln!(
                "\n\n!!!!!!!! SKIPPED the full-disk half of damage::store_check_on_rocksdb_...: {why} (the test needs root to mount a tmpfs) !!!!!!!!\n"
            );
            return;
        }
    };
    let copy = disk.path().join("data");
    std::fs::create_dir(&copy).expect("mkdir");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&store)
        .arg(&copy)
        .status()
        .expect("cp");
    assert!(status.success());
    let copied = copy.join("store-rocksdb");
    // Fill the disk: a file grown until the write fails with ENOSPC.
    {
        use std::io::Write;
        let mut filler = std::fs::File::create(disk.path().join("filler")).expect("filler");
        let block = vec![0xa5u8; 64 << 10];
        let err = loop {
            if let Err(e) = filler.write_all(&block) {
                break e;
            }
        };
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        // Whatever a partial write left: the last bytes too.
        while filler.write(&[0u8; 512]).is_ok_and(|n| n > 0) {}
    }
    let before = contents(&copied);
    // Run from the data_dir on the ordinary disk (the CLI's log goes there).
    let (status, out) = run_cli(
        &[OsStr::new("store"), OsStr::new("check"), copy.as_os_str()],
        &data,
    );
    assert_eq!(status.code(), Some(0), "on a full disk: {out}");
    assert_eq!(hooks_in(&out), HOOKS, "{out}");
    assert_unchanged(&copied, &before, "store check on a full disk");

    disk.remount("ro");
    assert!(
        std::fs::write(disk.path().join("probe"), b"x").is_err(),
        "the tmpfs is read-only"
    );
    let (status, out) = run_cli(
        &[OsStr::new("store"), OsStr::new("check"), copied.as_os_str()],
        &data,
    );
    assert_eq!(status.code(), Some(0), "on a read-only disk: {out}");
    assert_eq!(hooks_in(&out), HOOKS, "{out}");
    assert_unchanged(&copied, &before, "store check on a read-only disk");
    drop(disk);
}

/// The new user's report: `node.store` switched to fjall on a data_dir that
/// holds only a RocksDB store started an empty fjall store and left the
/// RocksDB store's hooks undelivered, with a warning. The start is refused,
/// saying how to move the store or start empty on purpose, and nothing is
/// created; an empty `store-fjall` directory made on purpose starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_node_store_without_moving_the_store_is_refused() {
    let sink = Sink::ok().await;
    let mut relay = relay("rocksdb", &sink).await;
    for i in 0..3 {
        relay.post("/hooks/s", &[JSON], body(i)).await.id();
    }
    relay.sigterm();
    assert!(
        relay.wait_exit(Duration::from_secs(120)).await.success(),
        "{}",
        relay.log()
    );
    let data = relay.data_dir();
    let fjall = data.join("store-fjall");
    relay.set_template(&config(
        "fjall",
        &format!(
            "sources:\n  - name: s\n    sinks: [{{type: http, url: '{}', paused: true}}]\n",
            sink.url()
        ),
    ));
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("node.store is fjall, and data_dir")
            && log.contains("holds a rocksdb store but no fjall store"),
        "{log}"
    );
    assert!(
        log.contains("ankusa store import FILE")
            && log.contains(&format!("mkdir {}", fjall.display())),
        "{log}"
    );
    assert!(
        !fjall.exists(),
        "the refused start created {}",
        fjall.display()
    );
    let (code, out) = store_check(&data, &[]);
    assert_eq!(code.code(), Some(0), "{out}");
    assert_eq!(hooks_in(&out), 3, "{out}");

    std::fs::create_dir(&fjall).expect("mkdir");
    relay.restart().await;
    assert!(
        relay.log().contains("data_dir also holds a rocksdb store"),
        "{}",
        relay.log()
    );
    relay.sigterm();
    assert!(
        relay.wait_exit(Duration::from_secs(120)).await.success(),
        "{}",
        relay.log()
    );
}
