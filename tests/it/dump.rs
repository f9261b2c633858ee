//! `ankusa store export` / `import` between backends (docs/design.md section 8,
//! "Dumps"), the store fixtures (`ankusa fixture`) and the upgrade test. The
//! real binary on real RocksDB and fjall stores; the relay drains each fixture
//! into a recording HTTP server.
//!
//! - Export from RocksDB, import into fjall, export again: byte-identical.
//! - A flipped byte is refused naming the record and its byte offset; a
//!   truncated dump is refused; the target is left as it was.
//! - The export of a 1 GiB store stays under 100 MiB of resident memory (the
//!   child's peak, from the kernel).
//! - Every fixture, loaded into RocksDB and into fjall, exports back to its
//!   own bytes, passes `store check`, and the relay (which migrates it to
//!   format 2 at boot) drains it: every pending row delivered once, each
//!   lane in order, the claimed head first; `store check` passes after.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use ankusa_engine::{Batch, Cf, Durability, Kv};

use crate::relay::{BIN, Relay, run_cli};
use crate::sink::{Sink, until};
use crate::store::store_check;

fn fixture_path(format: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/store/store-v{format}.dump"))
}

fn cli(args: &[&OsStr], cwd: &Path) -> (ExitStatus, String) {
    run_cli(args, cwd)
}

fn export(data: &Path, file: &Path) -> (ExitStatus, String) {
    cli(
        &[
            OsStr::new("store"),
            OsStr::new("export"),
            data.as_os_str(),
            file.as_os_str(),
        ],
        data.parent().expect("parent"),
    )
}

fn import(file: &Path, data: &Path, backend: &str) -> (ExitStatus, String) {
    cli(
        &[
            OsStr::new("store"),
            OsStr::new("import"),
            file.as_os_str(),
            data.as_os_str(),
            OsStr::new("--store"),
            OsStr::new(backend),
        ],
        data.parent().expect("parent"),
    )
}

/// `(offset, key length, value length)` of every record of a dump (the
/// layout of docs/design.md section 8).
fn records(dump: &[u8]) -> Vec<(usize, usize, usize)> {
    let mut at = 8 + 2 + 4 + 1 + usize::from(dump[14]) + 4;
    let mut out = Vec::new();
    while dump[at] == b'R' {
        let klen = usize::from(u16::from_be_bytes([dump[at + 2], dump[at + 3]]));
        let vlen =
            u32::from_be_bytes([dump[at + 4], dump[at + 5], dump[at + 6], dump[at + 7]]) as usize;
        out.push((at, klen, vlen));
        at += 12 + klen + vlen + 4;
    }
    assert_eq!(dump[at], b'E', "trailer at {at}");
    out
}

/// The origin backend a dump's header names.
fn origin(dump: &[u8]) -> String {
    String::from_utf8_lossy(&dump[15..15 + usize::from(dump[14])]).into_owned()
}

/// A RocksDB store written with the engine: a new store's sentinels and
/// stamp, registry entries, hooks and counters.
fn plant_rocksdb(store_dir: &Path) {
    let kv = ankusa_engine_rocksdb::RocksKv::open(store_dir).expect("open");
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .expect("init");
    let (b, _) = ankusa_queue::register(&kv, ["acme"], ["shop"]).expect("register");
    kv.write(b, Durability::Sync).expect("register");
    let mut b = Batch::new();
    for i in 0..500u64 {
        let mut key = 1u32.to_be_bytes().to_vec();
        key.extend_from_slice(&i.to_be_bytes());
        b.put(
            Cf::Hooks,
            key,
            format!("hook {i} ")
                .repeat(i as usize % 40 + 1)
                .into_bytes(),
        );
    }
    b.counter_add(
        ankusa_keys::counter_key(
            ankusa_keys::TenantOrd(1),
            ankusa_keys::CounterField::DeliveredTotal,
        )
        .to_vec(),
        500,
    );
    // The Writer's mark over the hooks (invariant 6: an import refuses a
    // store holding a hook above it).
    b.put(
        Cf::Meta,
        ankusa_keys::meta::SEQ_HIGH_WATER_KEY.to_vec(),
        ankusa_keys::meta::encode_seq_high_water(ankusa_keys::Seq(499)).to_vec(),
    );
    kv.write(b, Durability::Sync).expect("write");
}

#[test]
fn export_from_rocksdb_import_into_fjall_export_again_is_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first_data = dir.path().join("first");
    plant_rocksdb(&first_data.join("store-rocksdb"));
    let d1 = dir.path().join("one.dump");
    let (status, out) = export(&first_data, &d1);
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.contains("exported 519 records"), "{out}");
    let one = std::fs::read(&d1).expect("read");
    assert_eq!(origin(&one), "rocksdb");

    let second_data = dir.path().join("second");
    let (status, out) = import(&d1, &second_data, "fjall");
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(
        out.contains("imported 519 records (format 2, origin rocksdb)"),
        "{out}"
    );
    assert!(second_data.join("store-fjall/version").is_file());
    let d2 = dir.path().join("two.dump");
    let (status, out) = export(&second_data, &d2);
    assert_eq!(status.code(), Some(0), "{out}");
    let two = std::fs::read(&d2).expect("read");
    assert_eq!(one.len(), two.len());
    assert!(one == two, "the second dump differs from the first");

    // And back into RocksDB: the same bytes again.
    let third_data = dir.path().join("third");
    assert_eq!(import(&d2, &third_data, "rocksdb").0.code(), Some(0));
    let d3 = dir.path().join("three.dump");
    assert_eq!(export(&third_data, &d3).0.code(), Some(0));
    assert!(
        std::fs::read(&d3).expect("read") == one,
        "the third dump differs from the first"
    );

    // FILE exists: refused (2), the file untouched.
    let (status, out) = export(&third_data, &d3);
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(out.contains("exists"), "{out}");
    // The target store exists: refused (2).
    let (status, out) = import(&d1, &third_data, "rocksdb");
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(out.contains("exists and is not empty"), "{out}");
}

/// The entries of `dir`, recursively, with their sizes (what "left as it
/// was" compares).
fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries {
            let e = e.expect("entry");
            let md = e.metadata().expect("metadata");
            out.push((e.path(), md.len()));
            if md.is_dir() {
                out.extend(listing(&e.path()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_flipped_byte_or_a_truncated_dump_is_refused_and_the_target_left_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = std::fs::read(fixture_path(2)).expect("fixture");
    let recs = records(&good);
    // A value byte of record 40 flipped.
    let (offset, klen, vlen) = recs[40];
    assert!(vlen > 0);
    let mut bad = good.clone();
    bad[offset + 12 + klen + vlen / 2] ^= 0x20;
    let bad_file = dir.path().join("flipped.dump");
    std::fs::write(&bad_file, &bad).expect("write");

    // Into a data_dir that does not exist: refused (1), nothing created.
    let missing = dir.path().join("new-data");
    let (status, out) = import(&bad_file, &missing, "fjall");
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("record 40 (at byte {offset}): CRC32 mismatch")),
        "{out}"
    );
    assert!(
        !missing.exists(),
        "the refused import created {}",
        missing.display()
    );

    // Into a data_dir that holds another store: refused, the directory as it was.
    let data = dir.path().join("data");
    assert_eq!(import(&fixture_path(1), &data, "rocksdb").0.code(), Some(0));
    let before = listing(&data);
    let (status, out) = import(&bad_file, &data, "fjall");
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("record 40"), "{out}");
    assert_eq!(listing(&data), before);

    // A flipped length byte (the record's framing) of record 3.
    let (offset3, _, _) = recs[3];
    let mut bad = good.clone();
    bad[offset3 + 5] ^= 0x01;
    std::fs::write(&bad_file, &bad).expect("write");
    let (status, out) = import(&bad_file, &data, "fjall");
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "record 3 (at byte {offset3}): CRC32 mismatch in the record's framing"
        )),
        "{out}"
    );
    assert_eq!(listing(&data), before);

    // Truncated inside a record, and cut before the trailer.
    for cut in [
        recs[60].0 + 7,
        recs[recs.len() - 1].0 + 12 + recs[recs.len() - 1].1 + recs[recs.len() - 1].2 + 4,
    ] {
        let short = dir.path().join("short.dump");
        std::fs::write(&short, &good[..cut]).expect("write");
        let (status, out) = import(&short, &data, "fjall");
        assert_eq!(status.code(), Some(1), "cut at {cut}: {out}");
        assert!(out.contains("truncated"), "cut at {cut}: {out}");
        assert_eq!(listing(&data), before);
    }
    // Neither the refused imports nor the staging directories left anything.
    assert!(!data.join("store-fjall").exists());
}

/// A dump of `entries` whose header announces `store_format`, made with the
/// engine's exporter (the records need not be a relay's store).
fn dump_with(store_format: u32, entries: &[(Cf, &[u8], &[u8])]) -> Vec<u8> {
    let kv = ankusa_engine::memory::MemoryKv::new();
    let mut b = Batch::new();
    for (cf, k, v) in entries {
        b.put(*cf, k.to_vec(), v.to_vec());
    }
    kv.write(b, Durability::Sync).expect("write");
    let mut out = Vec::new();
    ankusa_engine::dump::export(
        &kv,
        "rocksdb",
        store_format,
        ankusa_keys::ORIGIN_KEY,
        &mut out,
        &mut |_, _| {},
    )
    .expect("export");
    out
}

/// A DATA_DIR that is a file is refused up front (2) and left as it was; a
/// dump whose header's store format is not the stamp its records hold (a
/// stamp that is not a u32, a header of 0 with a stamp, two formats) is
/// refused (1) naming both, and no store appears.
#[test]
fn import_refuses_a_data_dir_that_is_a_file_and_a_stamp_the_header_does_not_announce() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file_dir = dir.path().join("data-file");
    std::fs::write(&file_dir, b"not a data dir").expect("write");
    let (status, out) = import(&fixture_path(2), &file_dir, "fjall");
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "{}: exists and is not a directory",
            file_dir.display()
        )),
        "{out}"
    );
    assert_eq!(std::fs::read(&file_dir).expect("read"), b"not a data dir");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        left.iter()
            .all(|n| !n.to_string_lossy().contains(".import-")),
        "a staging directory was left: {left:?}"
    );

    // A DATA_DIR whose parent does not exist: refused (2) naming the parent,
    // nothing created.
    let deep = dir.path().join("no-parent").join("data");
    let fixture = fixture_path(2);
    let args = [
        OsStr::new("store"),
        OsStr::new("import"),
        fixture.as_os_str(),
        deep.as_os_str(),
        OsStr::new("--store"),
        OsStr::new("fjall"),
    ];
    let (status, out) = cli(&args, dir.path());
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "{}: does not exist (import creates DATA_DIR, not its parents",
            deep.parent().expect("parent").display()
        )),
        "{out}"
    );
    assert!(!dir.path().join("no-parent").exists());

    // A store directory given as DATA_DIR (the new user's report: the store
    // was nested in it, where neither serve nor store check looks): refused
    // (2), nothing created in it.
    let named = dir.path().join("d2").join("store-fjall");
    std::fs::create_dir_all(&named).expect("mkdir");
    let (status, out) = import(&fixture_path(2), &named, "fjall");
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(out.contains("a store directory; import takes the relay's node.data_dir and creates store-fjall in it (give its parent)"), "{out}");
    assert_eq!(
        std::fs::read_dir(&named).expect("read").count(),
        0,
        "something was created in {}",
        named.display()
    );

    let stamp: &[u8] = b"format";
    let cases: [(u32, Vec<u8>, &str); 4] = [
        (
            0,
            vec![0xff, 0xfe],
            "its record of the store format stamp (meta key `format`) does not decode: store format value is 2 bytes, expected 4",
        ),
        (
            2,
            vec![0xff, 0xfe],
            "its record of the store format stamp (meta key `format`) does not decode: store format value is 2 bytes, expected 4",
        ),
        (
            0,
            2u32.to_be_bytes().to_vec(),
            "its header says no store format, its records hold a store format stamp of 2",
        ),
        (
            2,
            3u32.to_be_bytes().to_vec(),
            "its header says store format 2, its records hold a store format stamp of 3",
        ),
    ];
    let data = dir.path().join("data");
    for (announced, value, problem) in cases {
        let file = dir.path().join("hand-made.dump");
        std::fs::write(
            &file,
            dump_with(
                announced,
                &[(Cf::Meta, stamp, &value), (Cf::Hooks, b"k", b"v")],
            ),
        )
        .expect("write");
        for backend in ["rocksdb", "fjall"] {
            let (status, out) = import(&file, &data, backend);
            assert_eq!(
                status.code(),
                Some(1),
                "{announced} {value:?} into {backend}: {out}"
            );
            assert!(
                out.contains(&format!(
                    "the dump is refused, nothing was imported: {problem}"
                )),
                "{out}"
            );
            assert!(
                !data.exists(),
                "the refused import created {}",
                data.display()
            );
        }
        std::fs::remove_file(&file).expect("rm");
    }
    // A header of 0 without a stamp record (a store no relay opened) loads.
    let file = dir.path().join("unstamped.dump");
    std::fs::write(&file, dump_with(0, &[(Cf::Hooks, b"k", b"v")])).expect("write");
    let (status, out) = import(&file, &data, "fjall");
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(
        out.contains("imported 1 record (format 0, origin rocksdb)"),
        "{out}"
    );
}

/// Runs `cmd` to its end; its exit code and its peak resident memory
/// (`VmHWM` of /proc/PID/status, KiB), read every 5 ms while it runs (the
/// kernel's high-water mark only grows, so the last reading holds every
/// earlier peak). Not `ru_maxrss` from wait4: it counts the pages of the
/// test process the child shared until its exec.
fn run_measured(mut cmd: std::process::Command) -> (Option<i32>, u64) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let status_file = format!("/proc/{}/status", child.id());
    let mut hwm = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    loop {
        if let Ok(s) = std::fs::read_to_string(&status_file)
            && let Some(v) = s.lines().find_map(|l| l.strip_prefix("VmHWM:"))
        {
            hwm = hwm.max(v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0));
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            return (status.code(), hwm);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the export still runs after 600 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_export_of_a_1_gib_store_stays_under_100_mib_resident() {
    const VALUE: usize = 1 << 20;
    const VALUES: u64 = 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    {
        let kv = ankusa_engine_rocksdb::RocksKv::open(data.join("store-rocksdb")).expect("open");
        kv.write(ankusa_queue::init_store(), Durability::Sync)
            .expect("init");
        let mut value = vec![0u8; VALUE];
        for chunk in 0..VALUES / 16 {
            let mut b = Batch::new();
            for i in chunk * 16..chunk * 16 + 16 {
                value[..8].copy_from_slice(&i.to_be_bytes());
                let mut key = 1u32.to_be_bytes().to_vec();
                key.extend_from_slice(&i.to_be_bytes());
                b.put(Cf::Hooks, key, value.clone());
            }
            kv.write(b, Durability::Buffered).expect("write");
        }
        kv.sync().expect("sync");
        kv.flush_all().expect("flush");
    }
    let file = dir.path().join("big.dump");
    let mut cmd = std::process::Command::new(BIN);
    cmd.args([
        OsStr::new("store"),
        OsStr::new("export"),
        data.as_os_str(),
        file.as_os_str(),
    ]);
    let (code, peak) = run_measured(cmd);
    assert_eq!(code, Some(0), "the export failed");
    let size = std::fs::metadata(&file).expect("dump").len();
    assert!(size > VALUES * VALUE as u64, "a dump of {size} bytes");
    eprintln!("export of a {size}-byte dump: peak resident {peak} KiB");
    assert!(peak > 1024, "no measurement ({peak} KiB)");
    assert!(
        peak < 100 * 1024,
        "the export peaked at {peak} KiB resident"
    );
}

/// The fixture configuration (fixtures/store/relay.yaml) on `backend`, its
/// sinks pointed at `sink`, as a [`Relay`] template.
fn fixture_config(backend: &str, sink: &Sink) -> String {
    let yaml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/store/relay.yaml"),
    )
    .expect("relay.yaml");
    let mut out = String::new();
    for (from, to) in [
        ("  data_dir: ./data\n", "  data_dir: '{DATA}'\n".to_owned()),
        ("  store: rocksdb\n", format!("  store: {backend}\n")),
        (
            "  ingest: 127.0.0.1:8080\n",
            "  ingest: '{INGEST}'\n".to_owned(),
        ),
        (
            "  admin: 127.0.0.1:8081\n",
            "  admin: '{ADMIN}'\n".to_owned(),
        ),
        ("http://127.0.0.1:9000", sink.url()),
    ] {
        assert!(yaml.contains(from), "relay.yaml has no {from:?}");
        out = if out.is_empty() {
            yaml.replace(from, &to)
        } else {
            out.replace(from, &to)
        };
    }
    out
}

/// `(sink path, key, i)` of a delivery (the fixture's bodies name the key
/// and i).
fn label(r: &crate::sink::Req) -> (String, String, u64) {
    let j = r.json();
    (
        r.path.clone(),
        j["key"].as_str().unwrap_or("?").to_owned(),
        j["i"].as_u64().unwrap_or(u64::MAX),
    )
}

async fn upgrade(format: u32, backend: &str) {
    let fixture = fixture_path(format);
    let sink = Sink::ok().await;
    let template = fixture_config(backend, &sink);
    let loaded = std::sync::Mutex::new(String::new());
    let mut relay = Relay::start_prepared(&template, &|data: &Path| {
        let (status, out) = import(&fixture, data, backend);
        assert_eq!(status.code(), Some(0), "{out}");
        // The store exports back to the fixture's bytes.
        let again = data.parent().expect("parent").join("again.dump");
        let (status, out) = export(data, &again);
        assert_eq!(status.code(), Some(0), "{out}");
        assert!(
            std::fs::read(&again).expect("again") == std::fs::read(&fixture).expect("fixture"),
            "the export of the loaded fixture differs from it"
        );
        let (status, out) = store_check(data, &[]);
        assert_eq!(status.code(), Some(0), "before the relay: {out}");
        *loaded.lock().expect("lock") = out;
    })
    .await;
    let before = loaded.lock().expect("lock").clone();
    assert!(
        before.contains(&format!("({backend}, format {format}): clean")),
        "{before}"
    );

    // What each fixture holds pending (src/fixture.rs): every row but the
    // dead ones, the delivered ones and the quarantined hook.
    let want: Vec<(&str, &str, u64)> = if format == 1 {
        let mut w = Vec::new();
        for i in 0..6u64 {
            let key = ["A", "B"][i as usize % 2];
            w.push(("/in/orders", key, i));
            if i != 3 && i != 4 {
                w.push(("/in/audit", key, i));
            }
        }
        w.extend([("/in/ledger", "-", 0), ("/in/ledger", "-", 2)]);
        w
    } else {
        let mut w = Vec::new();
        for (key, n) in [("A", 3u64), ("B", 3), ("-", 2)] {
            for i in 0..n {
                w.push(("/in/orders", key, i));
                if !(key == "-" && i == 0) {
                    w.push(("/in/audit", key, i));
                }
            }
        }
        w.extend([
            ("/in/audit", "D", 0),
            ("/in/ledger", "-", 0),
            ("/in/ledger", "-", 1),
        ]);
        w
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while sink.delivered().len() < want.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "not every pending row of the fixture delivered after 120 s: {:?}\n{}",
            sink.delivered().iter().map(label).collect::<Vec<_>>(),
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Settled: nothing more arrives, nothing is pending.
    until("nothing pending", Duration::from_secs(60), async || {
        (relay.metric("ankusa_queue_pending").await == 0.0).then_some(())
    })
    .await;
    let got = sink.delivered();
    let mut labels: Vec<(String, String, u64)> = got.iter().map(label).collect();
    let in_order = labels.clone();
    labels.sort();
    let mut expected: Vec<(String, String, u64)> = want
        .iter()
        .map(|(p, k, i)| ((*p).to_owned(), (*k).to_owned(), *i))
        .collect();
    expected.sort();
    assert_eq!(labels, expected, "every pending row delivered once");
    if format == 2 {
        // Each lane of the ordered sink in order; lane A's claimed head
        // (recovered at the start) before its successors.
        let mut lanes: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (p, k, i) in &in_order {
            if p == "/in/orders" {
                lanes.entry(k.clone()).or_default().push(*i);
            }
        }
        assert_eq!(lanes["A"], [0, 1, 2], "{in_order:?}");
        assert_eq!(lanes["B"], [0, 1, 2], "{in_order:?}");
        assert_eq!(lanes["-"], [0, 1], "{in_order:?}");
        // The recovered head carries the idempotency key the fixture gave it
        // (src/fixture.rs: a UUIDv7 of its receive time, T0 + 1 s, and seq 1).
        let a0 = got
            .iter()
            .find(|r| label(r) == ("/in/orders".to_owned(), "A".to_owned(), 0))
            .expect("A0");
        assert_eq!(a0.id(), "018bcfe5-6be8-7000-8000-000000000001");
    }

    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(90)).await;
    assert!(status.success(), "{status}\n{}", relay.log());
    let (status, out) = store_check(&relay.data_dir(), &[]);
    assert_eq!(status.code(), Some(0), "after the drain: {out}");
    assert!(
        out.contains(&format!("({backend}, format 2): clean")),
        "migrated to format 2: {out}"
    );
    assert!(out.contains("0 pending rows"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_store_v1_on_rocksdb() {
    upgrade(1, "rocksdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_store_v1_on_fjall() {
    upgrade(1, "fjall").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_store_v2_on_rocksdb() {
    upgrade(2, "rocksdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_store_v2_on_fjall() {
    upgrade(2, "fjall").await;
}

/// `ankusa fixture` makes the checked-in bytes again; an unknown format is a
/// usage error.
#[test]
fn the_fixture_builder_makes_the_checked_in_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for format in [1u32, 2] {
        let out = dir.path().join(format!("v{format}.dump"));
        let f = format.to_string();
        let (status, text) = cli(
            &[
                OsStr::new("fixture"),
                OsStr::new("--format"),
                OsStr::new(&f),
                out.as_os_str(),
            ],
            dir.path(),
        );
        assert_eq!(status.code(), Some(0), "{text}");
        let made = std::fs::read(&out).expect("made");
        let checked_in = std::fs::read(fixture_path(format)).expect("checked in");
        assert!(
            made == checked_in,
            "format {format}: `ankusa fixture` no longer makes fixtures/store/store-v{format}.dump (regenerate it only for a deliberate change)"
        );
        assert_eq!(origin(&made), "memory");
    }
    let out = dir.path().join("v3.dump");
    let (status, text) = cli(
        &[
            OsStr::new("fixture"),
            OsStr::new("--format"),
            OsStr::new("3"),
            out.as_os_str(),
        ],
        dir.path(),
    );
    assert_eq!(status.code(), Some(2), "{text}");
    assert!(text.contains("no fixture of store format 3"), "{text}");
    assert!(!out.exists());
}
