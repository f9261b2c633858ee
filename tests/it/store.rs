//! `ankusa store check DATA_DIR [--repair-counters]` (README, "Checking a
//! stopped store"): the real binary's invariant checker on a store the real
//! relay wrote, RocksDB and fjall. A running relay's store is refused by name;
//! a clean store passes with its summary; violations planted with the engine
//! directly (a drifted counter, an orphan delivery row) are each named with
//! exit 1; the repair sets the counters from the keys, says old and new values,
//! and leaves the rest.

use std::ffi::OsStr;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use ankusa_engine::{Batch, Cf, Durability, Kv};
use ankusa_keys::{
    CounterField, DeliveryRow, RowState, Seq, SinkIx, TenantOrd, counter_key, delivery_key,
};

use crate::relay::{Relay, config, run_cli};
use crate::sink::{Sink, until};

const JSON: (&str, &str) = ("content-type", "application/json");

/// `ankusa store check <dir> [extra]`: (status, output).
pub fn store_check(dir: &Path, extra: &[&str]) -> (ExitStatus, String) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("store"), OsStr::new("check"), dir.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    let cwd = dir.parent().expect("parent of the data dir");
    run_cli(&args, cwd)
}

/// Opens the store of `backend` under `data_dir` with the engine itself and
/// commits `batch` (the relay is stopped).
fn plant(backend: &str, data_dir: &Path, batch: Batch) {
    let dir = data_dir.join(format!("store-{backend}"));
    match backend {
        "rocksdb" => ankusa_engine_rocksdb::RocksKv::open(&dir)
            .expect("open")
            .write(batch, Durability::Sync)
            .expect("write"),
        "fjall" => ankusa_engine_fjall::FjallKv::open(&dir)
            .expect("open")
            .write(batch, Durability::Sync)
            .expect("write"),
        other => panic!("no backend {other}"),
    }
}

/// The tenant `default`'s ordinal, read from the stopped store.
fn default_tenant(backend: &str, data_dir: &Path) -> TenantOrd {
    let dir = data_dir.join(format!("store-{backend}"));
    let reg = match backend {
        "rocksdb" => {
            ankusa_queue::Registry::read(&ankusa_engine_rocksdb::RocksKv::open(&dir).expect("open"))
        }
        _ => ankusa_queue::Registry::read(&ankusa_engine_fjall::FjallKv::open(&dir).expect("open")),
    }
    .expect("registry");
    reg.tenants["default"]
}

async fn check_and_repair(backend: &str) {
    let sink = Sink::ok().await;
    // The second sink entry is paused: its five rows stay pending (held), so
    // the store has counters that are not zero.
    let mut relay = Relay::start(&config(
        backend,
        &format!(
            "
sources:
  - name: s
    sinks:
      - {{type: http, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}}}
      - {{type: http, url: '{url}', paused: true}}
",
            url = sink.url()
        ),
    ))
    .await;
    for i in 0..5 {
        let key = if i % 2 == 0 { "a" } else { "b" };
        relay
            .post(
                "/hooks/s",
                &[JSON, ("x-entity-id", key)],
                format!("{{\"i\":{i}}}"),
            )
            .await
            .id();
    }
    until(
        "five hooks delivered",
        Duration::from_secs(60),
        async || (sink.delivered().len() == 5).then_some(()),
    )
    .await;
    let data = relay.data_dir();

    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(3), "a running relay's store: {out}");
    assert!(
        out.contains("the store is in use: a running relay"),
        "{out}"
    );
    if backend == "rocksdb" {
        // Refused before RocksDB's open: an open that fails on the lock has
        // already rotated the running relay's info log (LOG -> LOG.old.*).
        assert!(
            out.contains("/store-rocksdb/LOCK)"),
            "names the lock and its holder: {out}"
        );
        let rotated: Vec<String> = std::fs::read_dir(data.join("store-rocksdb"))
            .expect("read the store dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("LOG.old"))
            .collect();
        assert!(
            rotated.is_empty(),
            "store check renamed the running relay's LOG: {rotated:?}"
        );
    }

    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}\n{}", relay.log());

    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(0), "{out}");
    assert_eq!(out.lines().count(), 1, "one line when clean: {out}");
    assert!(out.contains(&format!("({backend}, format 2): clean (1 tenant, 5 hooks; 5 pending rows (0 in flight, 0 lane members), 0 busy lanes, 0 dead, 0 quarantined)")), "{out}");

    // Planted: the tenant's pending counter 3 too high (the aggregate moved
    // with it), and a delivery row in no index and without an envelope.
    let t = default_tenant(backend, &data);
    let orphan = delivery_key(t, Seq(999), SinkIx(0));
    let mut bad = Batch::new();
    bad.counter_add(counter_key(t, CounterField::Pending).to_vec(), 3);
    bad.counter_add(
        counter_key(TenantOrd::NODE, CounterField::Pending).to_vec(),
        3,
    );
    bad.put(
        Cf::Deliveries,
        orphan.to_vec(),
        DeliveryRow {
            state: RowState::Due,
            size: 10,
            attempts: 0,
            first_attempt_at_ms: None,
            last_error: None,
            lane: None,
            ordering_key: None,
            lane_seq: None,
            logged_attempts: 0,
        }
        .encode(),
    );
    plant(backend, &data, bad);

    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(1), "{out}");
    for want in [
        "violation: counter pending of tenant default holds 8, its keys add up to 5 (invariant 3",
        "violation: row default.999.0 is in no index (its state says due (?D)) (invariant 1)",
        "violation: row default.999.0 has no envelope in cf hooks (invariant 5)",
        "violation: tenant default stores hook seq 999 above the seq high-water mark 5: new hooks would overwrite stored ones (invariant 6)",
        ": 4 violations",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }

    // The repair sets the counters; the orphan row is left, so still exit 1.
    let (status, out) = store_check(&data, &["--repair-counters"]);
    assert_eq!(status.code(), Some(1), "{out}");
    for want in [
        "left as it is: row default.999.0 is in no index",
        "repaired 2 counters in one batch:",
        "  pending of tenant default: 8 -> 5",
        "  pending of the node aggregate: 8 -> 5",
        ": 3 violations",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(!out.contains("violation: counter"), "{out}");

    // The orphan removed and a drift of the tenant's bytes alone: the
    // repair makes the store clean (exit 0), the aggregate left as it was.
    let mut bad = Batch::new();
    bad.delete(Cf::Deliveries, orphan.to_vec());
    bad.counter_add(counter_key(t, CounterField::Bytes).to_vec(), -100);
    plant(backend, &data, bad);
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains("violation: counter bytes of tenant default holds "),
        "{out}"
    );
    assert!(
        out.contains("violation: counter bytes of the node aggregate holds "),
        "the aggregate against the tenants' sum: {out}"
    );
    let (status, out) = store_check(&data, &["--repair-counters"]);
    assert_eq!(status.code(), Some(0), "{out}");
    let fixed: Vec<&str> = out.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(fixed.len(), 1, "only the tenant's bytes: {out}");
    let (old, new) = fixed[0]
        .trim()
        .strip_prefix("bytes of tenant default: ")
        .and_then(|s| s.split_once(" -> "))
        .unwrap_or_else(|| panic!("{out}"));
    let (old, new): (i64, i64) = (old.parse().expect("old"), new.parse().expect("new"));
    assert_eq!(new - old, 100, "{out}");
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l.contains(": clean (1 tenant, 5 hooks; 5 pending rows")),
        "{out}"
    );
    let (status, out) = store_check(&data, &["--store", backend]);
    assert_eq!(status.code(), Some(0), "{out}");

    // The repaired store still runs.
    relay.restart().await;
    assert_eq!(relay.metric("ankusa_queue_pending").await, 5.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_and_repair_counters_on_rocksdb() {
    check_and_repair("rocksdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_and_repair_counters_on_fjall() {
    check_and_repair("fjall").await;
}

/// A directory without a store is a usage error (2), naming what it looked
/// for; `--store` naming a backend that is not there says which one is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_without_a_store_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(out.contains("no ankusa store here"), "{out}");
    assert_eq!(
        std::fs::read_dir(&data).expect("read").count(),
        0,
        "store check created nothing"
    );
    let (status, out) = store_check(&data.join("missing"), &[]);
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(out.contains("not a directory"), "{out}");
}

/// An open error whose text has "lock" in it but is no lock (here the path,
/// `.../blocks/...`; RocksDB's `block checksum mismatch` too) is a store that
/// cannot be opened, not "in use by a running relay".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_names_a_broken_store_under_a_blocks_dir_as_broken_not_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("blocks");
    let store = data.join("store-rocksdb");
    drop(ankusa_engine_rocksdb::RocksKv::open(&store).expect("create the store"));
    std::fs::write(store.join("CURRENT"), "MANIFEST-999999\n")
        .expect("point CURRENT at a missing manifest");
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(3), "{out}");
    assert!(
        out.contains(&format!("cannot open the store at {}", store.display())),
        "{out}"
    );
    assert!(out.contains("MANIFEST-999999"), "the engine's error: {out}");
    assert!(!out.contains("in use"), "no relay holds it: {out}");
}

/// A directory store check may not read can hide a store: that is exit 3
/// naming it and the OS error, not exit 2 "no ankusa store here". Permissions
/// do this to a non-root operator (root reads through them); a symlink loop
/// does it to anyone, so it stands in for them here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_check_names_a_store_dir_it_cannot_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let store = data.join("store-rocksdb");
    std::os::unix::fs::symlink(&store, &store).expect("a symlink to itself");
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(3), "{out}");
    assert!(
        out.contains(&format!("{}: cannot read it (", store.display())),
        "{out}"
    );
    assert!(!out.contains("no ankusa store here"), "{out}");
    let (status, out) = store_check(&store, &[]);
    assert_eq!(status.code(), Some(3), "the store dir itself: {out}");
    assert!(
        out.contains(&format!("{}: cannot read it (", store.display())),
        "{out}"
    );
}

/// Invariant 6: a store whose seq high-water mark is below a stored hook's
/// seq (a relay's store with its mark lowered with the engine, as an edited
/// dump would carry it) is named by `store check` (exit 1), refused by
/// `serve` before it writes anything, and its dump refused by `store import`
/// (exit 1, no store made); with the mark put back, the store checks clean
/// and serves. Before, such a dump imported, passed `store check`, and the
/// relay then overwrote stored hooks with new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seq_high_water_mark_below_a_stored_seq_is_refused_by_check_serve_and_import() {
    let sink = Sink::ok().await;
    let mut relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "sources:\n  - name: s\n    sinks: [{{type: http, url: '{}'}}]\n",
            sink.url()
        ),
    ))
    .await;
    for i in 0..3 {
        relay
            .post("/hooks/s", &[JSON], format!("{{\"i\":{i}}}"))
            .await
            .id();
    }
    until(
        "three hooks delivered",
        Duration::from_secs(60),
        async || (sink.delivered().len() == 3).then_some(()),
    )
    .await;
    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}");
    let data = relay.data_dir();
    let mark = |seq: u64| {
        let mut b = Batch::new();
        b.put(
            Cf::Meta,
            ankusa_keys::meta::SEQ_HIGH_WATER_KEY.to_vec(),
            ankusa_keys::meta::encode_seq_high_water(Seq(seq)).to_vec(),
        );
        b
    };
    plant("rocksdb", &data, mark(1));

    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains("stores hook seq 3 above the seq high-water mark 1")
            && out.contains("(invariant 6)"),
        "{out}"
    );

    let (status, log) = relay.restart_refused().await;
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(
            "the store holds hook seq 3 (tenant ordinal 1) above its seq high-water mark 1"
        ),
        "{log}"
    );

    let dump = data.parent().expect("parent").join("low-mark.dump");
    let (status, out) = run_cli(
        &[
            OsStr::new("store"),
            OsStr::new("export"),
            data.as_os_str(),
            dump.as_os_str(),
        ],
        data.parent().expect("parent"),
    );
    assert!(status.success(), "{out}");
    let target = data.parent().expect("parent").join("imported");
    let (status, out) = run_cli(
        &[
            OsStr::new("store"),
            OsStr::new("import"),
            dump.as_os_str(),
            target.as_os_str(),
            OsStr::new("--store"),
            OsStr::new("fjall"),
        ],
        data.parent().expect("parent"),
    );
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains("the dump is refused, nothing was imported: the store holds hook seq 3"),
        "{out}"
    );
    assert!(
        !target.exists(),
        "a refused import left {}",
        target.display()
    );

    plant("rocksdb", &data, mark(3));
    let (status, out) = store_check(&data, &[]);
    assert_eq!(status.code(), Some(0), "{out}");
    relay.restart().await;
    let id = relay
        .post("/hooks/s", &[JSON], "{\"i\":3}".to_owned())
        .await
        .id();
    until(
        "the fourth hook delivered",
        Duration::from_secs(60),
        async || sink.delivered().iter().any(|r| r.id() == id).then_some(()),
    )
    .await;
}
