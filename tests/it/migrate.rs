//! Store format migrations (docs/design.md section 8) with the real binary on
//! stores the real relay wrote:
//!
//! - a binary that reads only format 1 (the hidden test setting
//!   `ANKUSA_TEST_SUPPORTED_FORMAT=1`) refuses a format 2 store from `serve`,
//!   `store check` and `store migrate` with the same message, naming both
//!   formats, and every (cf, key, value) of the store is as it was;
//! - a migration SIGKILLed in the middle (the test-only migration 2 -> 3 of
//!   `ANKUSA_TEST_SUPPORTED_FORMAT=3`, paused after 2 of its 5 batches by
//!   `ANKUSA_TEST_MIGRATION_PAUSE_AFTER`) left the stamp at 2 and its progress
//!   in the store; the binary that reads format 2 refuses that store; the
//!   dry run says where the step stopped; the next start of the format 3
//!   binary resumes it and rewrites each row exactly once;
//! - `store migrate --dry-run` on a format 1 store prints the step and writes
//!   nothing; `store migrate` stamps 2; on a current store it has nothing to
//!   do; `serve` migrates a format 1 store at start and logs it.

use std::ffi::OsStr;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use ankusa_engine::{Batch, Cf, Direction, Durability, KeyRange, Kv, Read, scan_pages};
use ankusa_keys::meta::encode_format;
use ankusa_keys::{FORMAT_KEY, MIGRATION_KEY, MigrationProgress};
use ankusa_queue::migrate::test_marks_range;

use crate::relay::{Relay, config, run_cli_env};
use crate::sink::{Sink, until};

type Listing = Vec<(Cf, Vec<u8>, Vec<u8>)>;

/// `ankusa store <cmd> <dir> [extra]` with `env`: (status, output).
fn store_cmd(cmd: &str, dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("store"), OsStr::new(cmd), dir.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    run_cli_env(&args, dir.parent().expect("parent of the data dir"), env)
}

/// Runs `f` on the stopped store of `backend` under `data_dir`, opened with
/// the engine itself.
fn with_store<T>(
    backend: &str,
    data_dir: &Path,
    f: impl FnOnce(&dyn Read, &dyn Fn(Batch)) -> T,
) -> T {
    let dir = data_dir.join(format!("store-{backend}"));
    match backend {
        "rocksdb" => {
            let kv = ankusa_engine_rocksdb::RocksKv::open(&dir).expect("open");
            f(&kv, &|b| kv.write(b, Durability::Sync).expect("write"))
        }
        "fjall" => {
            let kv = ankusa_engine_fjall::FjallKv::open(&dir).expect("open");
            f(&kv, &|b| kv.write(b, Durability::Sync).expect("write"))
        }
        other => panic!("no backend {other}"),
    }
}

/// Every (cf, key, value) of the stopped store.
fn listing(backend: &str, data_dir: &Path) -> Listing {
    with_store(backend, data_dir, |r, _| {
        let mut out = Vec::new();
        for cf in Cf::ALL {
            for kv in scan_pages(
                r,
                cf,
                KeyRange::new(Vec::new(), vec![0xff; 1024]),
                Direction::Forward,
                500,
            ) {
                let (k, v) = kv.expect("scan");
                out.push((cf, k.to_vec(), v.to_vec()));
            }
        }
        out
    })
}

fn format_of(listing: &Listing) -> Option<u32> {
    listing
        .iter()
        .find(|(cf, k, _)| *cf == Cf::Meta && k == FORMAT_KEY)
        .map(|(_, _, v)| u32::from_be_bytes(v.as_slice().try_into().expect("4 bytes")))
}

/// A relay on `backend` that delivered `n` hooks to a local HTTP sink, then
/// stopped with SIGTERM: its store holds `n` envelopes (kept for retention).
async fn stopped_relay_with_hooks(backend: &str, n: usize) -> (Relay, Sink) {
    let sink = Sink::ok().await;
    let mut relay = Relay::start(&config(
        backend,
        &format!(
            "sources:\n  - name: s\n    sinks:\n      - {{type: http, url: '{}'}}\n",
            sink.url()
        ),
    ))
    .await;
    for i in 0..n {
        relay
            .post(
                "/hooks/s",
                &[("content-type", "application/json")],
                format!("{{\"i\":{i}}}"),
            )
            .await
            .id();
    }
    until(
        &format!("{n} hooks delivered"),
        Duration::from_secs(120),
        async || (sink.delivered().len() == n).then_some(()),
    )
    .await;
    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}\n{}", relay.log());
    (relay, sink)
}

const ONLY_FORMAT_1: (&str, &str) = ("ANKUSA_TEST_SUPPORTED_FORMAT", "1");
const REFUSAL: &str = "StoreFormatNewer { found: 2, supported: 1 }: this store is format 2, written by a newer ankusa; \
     this ankusa reads store formats up to 1 and changed nothing. Run an ankusa that reads format 2 on it";

async fn a_format_1_binary_refuses_a_format_2_store(backend: &str) {
    let (mut relay, _sink) = stopped_relay_with_hooks(backend, 5).await;
    let data = relay.data_dir();
    let before = listing(backend, &data);
    assert_eq!(format_of(&before), Some(2));
    assert!(
        before.iter().filter(|(cf, _, _)| *cf == Cf::Hooks).count() >= 5,
        "the store holds the hooks"
    );

    relay.set_env(&[ONLY_FORMAT_1]);
    let (status, log) = relay.restart_refused().await;
    assert_eq!(
        status.code(),
        Some(3),
        "serve refuses a newer store with exit 3:\n{log}"
    );
    assert!(log.contains(REFUSAL), "{log}");
    assert!(
        !log.contains("new store") && !log.contains("store format migrated"),
        "{log}"
    );

    let (status, out) = store_cmd("check", &data, &[], &[ONLY_FORMAT_1]);
    assert_eq!(status.code(), Some(3), "{out}");
    assert!(
        out.contains(REFUSAL),
        "store check gives the same message: {out}"
    );
    for extra in [&["--dry-run"][..], &[]] {
        let (status, out) = store_cmd("migrate", &data, extra, &[ONLY_FORMAT_1]);
        assert_eq!(status.code(), Some(3), "store migrate {extra:?}: {out}");
        assert!(
            out.contains(REFUSAL),
            "store migrate {extra:?} gives the same message: {out}"
        );
    }

    assert!(
        listing(backend, &data) == before,
        "the refused store changed"
    );
    // The binary that reads format 2 still runs it.
    relay.set_env(&[]);
    relay.restart().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_1_binary_refuses_a_format_2_rocksdb_store_and_changes_nothing() {
    a_format_1_binary_refuses_a_format_2_store("rocksdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_1_binary_refuses_a_format_2_fjall_store_and_changes_nothing() {
    a_format_1_binary_refuses_a_format_2_store("fjall").await;
}

/// The test migration's marks: (hook key, count).
type Marks = Vec<(Vec<u8>, u32)>;

/// The hooks' keys in cf hooks, and the test migration's marks.
fn hooks_and_marks(listing: &Listing) -> (Vec<Vec<u8>>, Marks) {
    let hooks: Vec<Vec<u8>> = listing
        .iter()
        .filter(|(cf, k, _)| *cf == Cf::Hooks && !ankusa_keys::is_sentinel(Cf::Hooks, k))
        .map(|(_, k, _)| k.clone())
        .collect();
    let marks = test_marks_range();
    let marks = listing
        .iter()
        .filter(|(cf, k, _)| *cf == Cf::Meta && marks.contains(k))
        .map(|(_, k, v)| {
            (
                k[b"migration-test/".len()..].to_vec(),
                u32::from_be_bytes(v.as_slice().try_into().expect("4 bytes")),
            )
        })
        .collect();
    (hooks, marks)
}

fn progress_of(listing: &Listing) -> Option<MigrationProgress> {
    listing
        .iter()
        .find(|(cf, k, _)| *cf == Cf::Meta && k == MIGRATION_KEY)
        .map(|(_, _, v)| MigrationProgress::decode(v).expect("progress decodes"))
}

/// 37 hooks, the test migration 2 -> 3 in batches of 8 (5 batches: 8, 8, 8,
/// 8, 5): SIGKILL after the second batch, then a start that resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_killed_in_the_middle_resumes_at_the_next_start() {
    let backend = "rocksdb";
    let (mut relay, sink) = stopped_relay_with_hooks(backend, 37).await;
    let data = relay.data_dir();
    let (hooks, marks) = hooks_and_marks(&listing(backend, &data));
    assert_eq!((hooks.len(), marks.len()), (37, 0));

    relay.set_env(&[
        ("ANKUSA_TEST_SUPPORTED_FORMAT", "3"),
        ("ANKUSA_TEST_MIGRATION_PAUSE_AFTER", "2"),
    ]);
    relay.spawn_detached();
    until(
        "the migration paused after 2 batches",
        Duration::from_secs(120),
        async || {
            relay
                .log()
                .contains("test setting: migration paused after 2 batches")
                .then_some(())
        },
    )
    .await;
    relay.kill();

    // In the middle: the stamp still 2, the progress of 2 batches, the rows
    // of those batches rewritten once and no other.
    let middle = listing(backend, &data);
    assert_eq!(
        format_of(&middle),
        Some(2),
        "the stamp moves only in the last batch"
    );
    let p = progress_of(&middle).expect("the progress key is in the store");
    assert_eq!((p.from, p.to, p.batches, p.rows), (2, 3, 2, 16));
    let (_, marks) = hooks_and_marks(&middle);
    assert_eq!(
        marks.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        hooks[..16].to_vec()
    );
    assert!(marks.iter().all(|(_, n)| *n == 1), "{marks:?}");

    // The binary that reads format 2 does not touch a store a newer one is
    // migrating (its stamp is still 2, its rows are part rewritten).
    relay.set_env(&[]);
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("StoreFormatNewer { found: 3, supported: 2 }: a migration of this store from format 2 to format 3 is in the middle"), "{log}");
    assert!(
        log.contains("Run an ankusa that reads format 3 on it: it resumes the migration"),
        "{log}"
    );
    let (status, out) = store_cmd("check", &data, &[], &[]);
    assert_eq!(status.code(), Some(3), "{out}");
    assert!(
        out.contains("a migration of this store from format 2 to format 3 is in the middle"),
        "{out}"
    );
    assert!(
        listing(backend, &data) == middle,
        "the refusal wrote nothing"
    );

    // The dry run says where it stopped, and writes nothing.
    let (status, out) = store_cmd(
        "migrate",
        &data,
        &["--dry-run"],
        &[("ANKUSA_TEST_SUPPORTED_FORMAT", "3")],
    );
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(
        out.contains(
            "(rocksdb, format 2): would migrate to format 3 in 1 step (--dry-run: nothing written)"
        ),
        "{out}"
    );
    assert!(out.contains("  2 -> 3 (rewrites rows, at most 8 per batch): rewrites a test mark per envelope of cf hooks (test only)"), "{out}");
    assert!(out.contains("  2 -> 3 is in the middle: 2 batches and 16 rows committed by an earlier run; it resumes there"), "{out}");
    assert!(
        listing(backend, &data) == middle,
        "the dry run wrote nothing"
    );

    // The next start resumes: 3 more batches, 5 and 37 rows in all.
    relay.set_env(&[("ANKUSA_TEST_SUPPORTED_FORMAT", "3")]);
    relay.restart().await;
    let log = relay.log();
    assert!(
        log.contains("store format migrated 2 -> 3: 5 batches, 37 rows (resumed: an earlier run committed some of them)"),
        "{log}"
    );
    assert!(!log.contains("store format migrated 1 -> 2"), "{log}");
    // The relay works on the migrated store.
    relay
        .post(
            "/hooks/s",
            &[("content-type", "application/json")],
            "{\"after\":true}",
        )
        .await
        .id();
    until(
        "the hook after the migration delivered",
        Duration::from_secs(120),
        async || (sink.delivered().len() == 38).then_some(()),
    )
    .await;
    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}\n{}", relay.log());

    let after = listing(backend, &data);
    assert_eq!(format_of(&after), Some(3));
    assert_eq!(
        progress_of(&after),
        None,
        "the progress key goes with the last batch"
    );
    let (_, marks) = hooks_and_marks(&after);
    assert_eq!(
        marks.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        hooks,
        "every hook of the migration, and only those"
    );
    assert!(
        marks.iter().all(|(_, n)| *n == 1),
        "each row rewritten exactly once: {marks:?}"
    );

    // Now a format 3 store: the binary that reads format 2 refuses it.
    relay.set_env(&[]);
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(
        log.contains("StoreFormatNewer { found: 3, supported: 2 }"),
        "{log}"
    );
    assert!(log.contains("Run an ankusa that reads format 3"), "{log}");
}

/// Stamps the stopped store format 1 (a store a binary before ADR 0004 wrote:
/// no lane can be in it, the rest is the same).
fn stamp_format_1(backend: &str, data_dir: &Path) {
    with_store(backend, data_dir, |_, write| {
        let mut b = Batch::new();
        b.put(Cf::Meta, FORMAT_KEY, encode_format(1));
        write(b);
    });
}

async fn store_migrate_on_a_format_1_store(backend: &str) {
    let (mut relay, _sink) = stopped_relay_with_hooks(backend, 3).await;
    let data = relay.data_dir();
    stamp_format_1(backend, &data);
    let v1 = listing(backend, &data);
    assert_eq!(format_of(&v1), Some(1));

    let (status, out) = store_cmd("migrate", &data, &["--dry-run"], &[]);
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.contains(&format!("({backend}, format 1): would migrate to format 2 in 1 step (--dry-run: nothing written)")), "{out}");
    assert!(
        out.contains("  1 -> 2 (stamp only): rewrites nothing: format 2 adds ordering lanes"),
        "{out}"
    );
    assert!(listing(backend, &data) == v1, "the dry run wrote nothing");

    let (status, out) = store_cmd("migrate", &data, &[], &[]);
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!(
            "({backend}, format 1): migrated 1 -> 2: 1 batch, 0 rows (stamp only)"
        )),
        "{out}"
    );
    assert!(out.contains("now format 2"), "{out}");
    let v2 = listing(backend, &data);
    assert_eq!(format_of(&v2), Some(2));
    let changed: Vec<_> = v2.iter().filter(|e| !v1.contains(e)).collect();
    assert_eq!(
        changed,
        [&(Cf::Meta, FORMAT_KEY.to_vec(), vec![0, 0, 0, 2])],
        "only the stamp moved"
    );
    assert_eq!(v1.len(), v2.len());

    for extra in [&["--dry-run"][..], &[]] {
        let (status, out) = store_cmd("migrate", &data, extra, &[]);
        assert_eq!(status.code(), Some(0), "{extra:?}: {out}");
        assert!(
            out.contains(&format!(
                "({backend}, format 2): nothing to do (this ankusa reads store format 2)"
            )),
            "{out}"
        );
    }
    assert!(listing(backend, &data) == v2);

    // `serve` migrates a format 1 store at start and logs it.
    stamp_format_1(backend, &data);
    relay.restart().await;
    let log = relay.log();
    assert!(
        log.contains("store format migrated 1 -> 2: 1 batch, 0 rows (stamp only)"),
        "{log}"
    );
    // A running relay's store: refused by name.
    let (status, out) = store_cmd("migrate", &data, &["--dry-run"], &[]);
    assert_eq!(status.code(), Some(3), "{out}");
    assert!(
        out.contains("the store is in use: a running relay"),
        "{out}"
    );
    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}\n{}", relay.log());
    assert_eq!(format_of(&listing(backend, &data)), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_migrate_dry_run_then_migrate_a_format_1_rocksdb_store() {
    store_migrate_on_a_format_1_store("rocksdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_migrate_dry_run_then_migrate_a_format_1_fjall_store() {
    store_migrate_on_a_format_1_store("fjall").await;
}

/// No store at DATA_DIR: a usage error (2), nothing created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_migrate_without_a_store_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let (status, out) = store_cmd("migrate", &data, &["--dry-run"], &[]);
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(out.contains("no ankusa store here"), "{out}");
    assert_eq!(
        std::fs::read_dir(&data).expect("read").count(),
        0,
        "store migrate created nothing"
    );
    let (status, out) = store_cmd(
        "migrate",
        &data,
        &[],
        &[("ANKUSA_TEST_SUPPORTED_FORMAT", "7")],
    );
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains("ANKUSA_TEST_SUPPORTED_FORMAT=7: a test setting that takes 1 or 3"),
        "{out}"
    );
}

/// A stamp that is not a u32 (2 bytes), or a migration progress that does
/// not decode, in a stopped store: `serve` exits 3 (restarting cannot help)
/// naming the key and the decode error once; `store check` and `store
/// migrate [--dry-run]` exit 3 with the same words (not "run it again to
/// resume": a rerun cannot help either); nothing is written.
async fn a_stamp_that_does_not_decode_is_refused(backend: &str) {
    let (mut relay, _sink) = stopped_relay_with_hooks(backend, 2).await;
    let data = relay.data_dir();
    let cases: [(&[u8], &[u8], &str); 2] = [
        (
            FORMAT_KEY,
            &[0xff, 0xfe],
            "the store's meta key `format` (the store format stamp) does not decode: store format value is 2 bytes, expected 4; \
             this ankusa cannot tell the store's format and changed nothing",
        ),
        // The decode error of a progress is the keys crate's words: the key is
        // what this test pins.
        (
            MIGRATION_KEY,
            &[1, 2, 3],
            "the store's meta key `migration` (the progress of a migration in the middle) does not decode: ",
        ),
    ];
    for (key, value, refusal) in cases {
        with_store(backend, &data, |_, write| {
            let mut b = Batch::new();
            b.put(Cf::Meta, key, value.to_vec());
            write(b);
        });
        let before = listing(backend, &data);
        let (status, log) = relay.restart_refused().await;
        assert_eq!(
            status.code(),
            Some(3),
            "serve refuses it with exit 3:\n{log}"
        );
        assert_eq!(
            log.matches(refusal).count(),
            1,
            "named once: {refusal}\n{log}"
        );
        assert!(log.contains("changed nothing"), "{log}");
        assert!(!log.contains("store format migrated"), "{log}");
        let (status, out) = store_cmd("check", &data, &[], &[]);
        assert_eq!(status.code(), Some(3), "{out}");
        assert!(out.contains(refusal), "store check: {out}");
        for extra in [&["--dry-run"][..], &[]] {
            let (status, out) = store_cmd("migrate", &data, extra, &[]);
            assert_eq!(status.code(), Some(3), "store migrate {extra:?}: {out}");
            assert!(out.contains(refusal), "store migrate {extra:?}: {out}");
            assert!(
                !out.contains("run store migrate again"),
                "store migrate {extra:?}: {out}"
            );
        }
        assert!(
            listing(backend, &data) == before,
            "the refused store changed"
        );
        // Put the key back as a relay leaves it: the stamp 2, no progress.
        with_store(backend, &data, |_, write| {
            let mut b = Batch::new();
            if key == FORMAT_KEY {
                b.put(Cf::Meta, FORMAT_KEY, encode_format(2));
            } else {
                b.delete(Cf::Meta, MIGRATION_KEY);
            }
            write(b);
        });
    }
    relay.restart().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rocksdb_store_whose_stamp_does_not_decode_is_refused_with_exit_3() {
    a_stamp_that_does_not_decode_is_refused("rocksdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fjall_store_whose_stamp_does_not_decode_is_refused_with_exit_3() {
    a_stamp_that_does_not_decode_is_refused("fjall").await;
}
