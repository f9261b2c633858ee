//! Store faults and a full disk (docs/design.md section 5, "A store failure";
//! README, "A full disk (or any store failure): the relay stops"): the edge
//! over a store that fails a commit or a sync (503 `store_failed`, nothing
//! acknowledged that was not committed), a failed outcome flush on RocksDB
//! through the real HTTP sink (ADR 0004 section 4.5), and the real binary whose
//! RocksDB data_dir fills up (a tmpfs this test mounts): ingest stops answering
//! 200, the node says why and stops, and after space returns a restart delivers
//! every acknowledged hook.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ankusa_edge::server::{Edge, EdgeStats, STORE_FAILED, build_routes};
use ankusa_engine::fault::FaultKv;
use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Cf, Durability, EngineError, Kv, Op, Read};
use ankusa_engine_rocksdb::RocksKv;
use ankusa_keys::{
    CounterField, Envelope, Seq, SinkIx, SourceId, TenantOrd, counter_key, delivery_key, hook_key,
};
use ankusa_pipeline::{
    BreakerPolicy, DispatchConfig, Pipeline, PipelineError, RetryPolicy, Route, Routes,
};
use ankusa_queue::writer::{IngestRequest, Ingested, Writer, WriterConfig};
use ankusa_queue::{NewRow, check_invariants, lanes};

use crate::relay::{Relay, client, post};
use crate::sink::{Reply, Req, Sink, until};

const JSON: (&str, &str) = ("content-type", "application/json");
const WAIT: Duration = Duration::from_secs(60);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The edge in process over a memory store behind `FaultKv`, for each kind
/// of fault: a hook is answered 200, then the Writer's commit (`write`) or
/// its sync (`sync`) of the next hook fails: that hook is answered 503 with
/// `Retry-After: 5` and the generic `store_failed` body (never the store's
/// error), the Writer stops, and the next hook is refused too (503). The
/// store holds the acknowledged hook, the failed write left nothing (a
/// failed sync leaves its batch, unacknowledged), and its invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_under_ingest_answers_503_and_acknowledges_nothing_uncommitted() {
    for fault in ["write", "sync"] {
        let cfg = ankusa_config::Config::from_yaml(
            "
sources:
  - name: s
    dedupe: {header: webhook-id}
    sinks: [{type: http, url: 'http://127.0.0.1:9/in', ordered: true, ordering_key: {header: x-entity-id}}]
",
            &|_| None,
        )
        .expect("config");
        let kv = Arc::new(FaultKv::new(MemoryKv::new()));
        kv.write(ankusa_queue::init_store(), Durability::Sync)
            .expect("init");
        let (batch, registry) = ankusa_queue::register(&*kv, ["default"], ["s"]).expect("register");
        kv.write(batch, Durability::Sync).expect("register");
        let (writer, handle) =
            Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms).expect("writer");
        let writer_task = tokio::spawn(writer.run());
        let stats = Arc::new(EdgeStats::default());
        let edge = Arc::new(Edge {
            kv: Arc::clone(&kv),
            writer: handle,
            on_commit: Box::new(|| {}),
            routes: arc_swap::ArcSwap::from_pointee(ankusa_edge::server::IngestRoutes {
                sources: build_routes(&cfg, &registry).expect("routes"),
                body_limit_bytes: 1 << 20,
                node_max_pending: 1000,
                node_max_pending_bytes: 1 << 30,
            }),
            max_connections: ankusa_edge::server::MAX_CONNECTIONS,
            shutting_down: Arc::new(AtomicBool::new(false)),
            reservations: Default::default(),
            stats: Arc::clone(&stats),
            clock: Box::new(now_ms),
            owners: None,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hooks/s", listener.local_addr().expect("addr"));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let serve = tokio::spawn(Arc::clone(&edge).serve(listener, stop_rx));
        let c = client();
        let send = async |n: usize| {
            let h = [
                JSON,
                ("x-entity-id", "cus_1"),
                ("webhook-id", &format!("evt_{n}")),
            ];
            post(&c, &url, &h, format!("{{\"n\":{n}}}").into_bytes())
                .await
                .expect("post")
        };
        let a = send(1).await;
        assert_eq!(a.status, 200, "{fault}: {a:?}");
        match fault {
            "write" => kv.fail_next_writes(1),
            _ => kv.fail_next_syncs(1),
        }
        let a = send(2).await;
        assert_eq!(
            (a.status, a.retry_after.as_deref()),
            (503, Some("5")),
            "{fault}: {a:?}"
        );
        assert_eq!(
            a.body,
            serde_json::json!({ "error": STORE_FAILED }),
            "{fault}"
        );
        let err = tokio::time::timeout(WAIT, writer_task)
            .await
            .expect("the writer stops")
            .expect("join")
            .unwrap_err();
        assert!(
            matches!(err, EngineError::Backend { op, .. } if op == fault),
            "{fault}: {err}"
        );
        // Nothing more is acknowledged: the Writer is gone (the node exits).
        let a = send(3).await;
        assert_eq!(a.status, 503, "{fault}: {a:?}");
        assert_eq!(
            stats.accepted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{fault}"
        );
        assert_eq!(
            stats.unavailable.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "{fault}"
        );
        let stored = |seq: u64| {
            kv.get(Cf::Hooks, &hook_key(TenantOrd(1), Seq(seq)))
                .expect("get")
                .is_some()
        };
        assert!(stored(1), "{fault}: the acknowledged hook");
        assert_eq!(
            stored(2),
            fault == "sync",
            "{fault}: a failed write leaves nothing; a failed sync its batch"
        );
        assert!(!stored(3), "{fault}");
        assert_eq!(
            check_invariants(&kv.snapshot()).expect("check"),
            vec![],
            "{fault}"
        );
        let _ = stop_tx.send(true);
        serve.await.expect("edge");
    }
}

/// Whether `b` deletes the delivery row of hook `seq` of tenant 1 (its
/// delivered outcome, with its lane's release).
fn delivers(b: &Batch, seq: Seq) -> bool {
    let key = delivery_key(TenantOrd(1), seq, SinkIx(0));
    b.ops()
        .iter()
        .any(|op| matches!(op, Op::Delete { cf: Cf::Deliveries, key: k } if k[..] == key[..]))
}

/// ADR 0004 section 4.5 on RocksDB through the real HTTP sink: the endpoint
/// takes lane k's head (200) and the flush that commits that outcome and
/// releases the lane fails. The pipeline stops with the store's error, the
/// lane has not advanced (its members were never sent), and the store,
/// opened again by a new Writer and pipeline (a restart), sends the head
/// again (same idempotency key) and then every member in order, each once.
/// The invariant checker runs at every request the endpoint gets, after the
/// failure and at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_flush_on_rocksdb_sends_the_head_again_and_then_its_members_in_order() {
    type Store = FaultKv<RocksKv>;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let current: Arc<Mutex<Weak<Store>>> = Arc::new(Mutex::new(Weak::new()));
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let (cur, viol) = (Arc::clone(&current), Arc::clone(&violations));
    let first_head = Arc::new(AtomicBool::new(true));
    let fh = Arc::clone(&first_head);
    let sink = Sink::start(move |r| {
        if let Some(kv) = cur.lock().expect("lock").upgrade() {
            let found = check_invariants(&kv.snapshot()).expect("check");
            if !found.is_empty() {
                viol.lock()
                    .expect("lock")
                    .push(format!("at request {}: {found:?}", r.n));
            }
        }
        // The first request (the head) is held until the test lets it go.
        if fh.swap(false, std::sync::atomic::Ordering::SeqCst) {
            Reply::Hold
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let config = ankusa_sinks::http::HttpSinkConfig::new(sink.url());
    let run = |kv: &Arc<Store>| {
        let http = ankusa_sinks::http::HttpSink::new(&config).expect("http sink");
        let mut routes = Routes::default();
        routes.sinks.insert(
            (SourceId(1), SinkIx(0)),
            Route {
                sink: Arc::new(http),
                sink_name: "http".into(),
                source_name: "s".into(),
            },
        );
        routes.tenants.insert(TenantOrd(1), "default".into());
        let (writer, handle) =
            Writer::new(Arc::clone(kv), WriterConfig::default(), now_ms).expect("writer");
        let dispatch = DispatchConfig {
            idle_ms: 5,
            ..DispatchConfig::default()
        };
        let (pipeline, control) = Pipeline::new(
            Arc::clone(kv),
            routes,
            dispatch,
            RetryPolicy::default(),
            BreakerPolicy::default(),
            now_ms,
        );
        let pipeline = pipeline
            .due_floor(handle.due_floor())
            .lane_rows(handle.lane_rows());
        (
            tokio::spawn(writer.run()),
            tokio::spawn(pipeline.run()),
            handle,
            control,
        )
    };
    let ingest = async |w: &ankusa_queue::writer::WriterHandle, i: usize| -> Seq {
        let envelope = Envelope {
            source: SourceId(1),
            received_at_ms: now_ms(),
            method: "POST".into(),
            path: "/hooks/s".into(),
            query: None,
            headers: vec![],
            body: format!("{{\"i\":{i}}}").into_bytes(),
            dedupe_key: None,
            idempotency_key: idempotency_key(i),
            replay_of: None,
        };
        let lane = lanes::assign(SinkIx(0), SourceId(1), Some(b"k"));
        let req = IngestRequest {
            tenant: TenantOrd(1),
            envelope,
            rows: vec![NewRow {
                sink: SinkIx(0),
                lane: Some(lane),
            }],
            dedupe_ttl_ms: None,
        };
        match w.ingest(req).await {
            Ok(Ingested::Committed(seq)) => seq,
            other => panic!("ingest {i}: {other:?}"),
        }
    };

    let kv = Arc::new(FaultKv::new(RocksKv::open(&path).expect("open")));
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .expect("init");
    *current.lock().expect("lock") = Arc::downgrade(&kv);
    let (writer_task, pipeline_task, writer, control) = run(&kv);
    let head = ingest(&writer, 0).await;
    control.wake();
    kv.fail_write_where(move |b| delivers(b, head));
    until("the head at the endpoint", WAIT, async || {
        (sink.requests().len() == 1).then_some(())
    })
    .await;
    for i in 1..5 {
        ingest(&writer, i).await;
    }
    sink.release();
    let err = tokio::time::timeout(WAIT, pipeline_task)
        .await
        .expect("the pipeline stops")
        .expect("join")
        .unwrap_err();
    assert!(
        matches!(
            err,
            PipelineError::Store(EngineError::Backend { op: "write", .. })
        ),
        "{err}"
    );
    assert_eq!(
        sink.requests().len(),
        1,
        "a member went out before the head's release committed"
    );
    assert_eq!(sink.answer_of(0), Some(200), "the endpoint took the head");
    assert_eq!(
        kv.counter(&counter_key(TenantOrd(1), CounterField::InFlight))
            .expect("counter"),
        1
    );
    assert_eq!(
        kv.counter(&counter_key(TenantOrd(1), CounterField::LaneMembers))
            .expect("counter"),
        4
    );
    assert_eq!(check_invariants(&kv.snapshot()).expect("check"), vec![]);
    // The process dies: the Writer goes with it; the store is opened again.
    drop(writer);
    let _ = tokio::time::timeout(WAIT, writer_task)
        .await
        .expect("the writer stops");
    let kv = Arc::try_unwrap(kv)
        .expect("the store has no other holder")
        .into_inner();
    drop(kv);

    let kv = Arc::new(FaultKv::new(RocksKv::open(&path).expect("reopen")));
    *current.lock().expect("lock") = Arc::downgrade(&kv);
    let (writer_task, pipeline_task, writer, control) = run(&kv);
    let got = until("every hook delivered", WAIT, async || {
        let d = sink.delivered();
        (d.len() >= 6).then_some(d)
    })
    .await;
    let order: Vec<u64> = got
        .iter()
        .map(|r| r.json()["i"].as_u64().expect("i"))
        .collect();
    assert_eq!(
        order,
        [0, 0, 1, 2, 3, 4],
        "the head again, then its members, each once"
    );
    assert_eq!(
        got[0].id(),
        got[1].id(),
        "the head goes again with its idempotency key"
    );
    assert_eq!(got[1].attempt(), 1, "as a first attempt (ADR 0004 4.7)");
    control.shutdown();
    drop(writer);
    tokio::time::timeout(WAIT, writer_task)
        .await
        .expect("writer")
        .expect("join")
        .expect("writer");
    tokio::time::timeout(WAIT, pipeline_task)
        .await
        .expect("pipeline")
        .expect("join")
        .expect("pipeline");
    assert_eq!(
        sink.requests().len(),
        6,
        "{:?}",
        sink.requests().iter().map(|r| r.json()).collect::<Vec<_>>()
    );
    assert_eq!(*violations.lock().expect("lock"), Vec::<String>::new());
    assert_eq!(check_invariants(&kv.snapshot()).expect("check"), vec![]);
    for f in [
        CounterField::Pending,
        CounterField::InFlight,
        CounterField::Lanes,
        CounterField::LaneMembers,
    ] {
        assert_eq!(
            kv.counter(&counter_key(TenantOrd::NODE, f))
                .expect("counter"),
            0,
            "{f:?}"
        );
    }
}

/// A distinct idempotency key per hook of the test above.
fn idempotency_key(i: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[8..].copy_from_slice(&(i as u64 + 1).to_be_bytes());
    b
}

/// A tmpfs mounted for one test, unmounted (and its directory removed) when
/// dropped, whatever the test did.
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount(8) syntax: `16m`) on a new directory,
    /// or says why it cannot.
    pub(crate) fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount(8) could not run: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs refused ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Grows (or shrinks) the mounted tmpfs; its files stay.
    pub(crate) fn resize(&self, size: &str) {
        self.remount(&format!("size={size}"));
    }

    /// Remounts the tmpfs with `options` (mount(8) syntax: `ro`, `size=16m`);
    /// its files stay.
    pub(crate) fn remount(&self, options: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(self.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "remount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Still busy (a process of a failed test): detach it now, the
            // kernel frees it when the last user goes.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Free bytes of the filesystem that holds `path` (df(1), in 1 KiB blocks).
fn free_bytes(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["-k", "--output=avail"])
        .arg(path)
        .output()
        .expect("run df");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .nth(1)
        .and_then(|l| l.trim().parse::<u64>().ok())
        .expect("df output")
        * 1024
}

fn hook_body(i: usize, key: &str) -> String {
    // 16 KiB of payload that does not compress (RocksDB compresses its SST
    // files with lz4): the 16 MiB disk fills after some hundreds of hooks,
    // and what the WAL holds takes as much again once flushed.
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let pad: String = (0..16 << 10)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"0123456789abcdef"[(x & 15) as usize])
        })
        .collect();
    format!("{{\"i\":{i},\"key\":\"{key}\",\"pad\":\"{pad}\"}}")
}

const KEYS: [&str; 8] = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"];

/// Posts hooks (numbered from `next`, keys in turn) one after the other to
/// the running relay until one is not answered 200, then three more: none
/// may get a 200 (each is a 503, or no answer once the process is gone).
/// Then the node must exit 1 with one error line naming the disk's error
/// and what it does. The 200s go to `acked`, the others to `refused`.
async fn fill(
    relay: &mut Relay,
    disk: &Tmpfs,
    next: &mut usize,
    acked: &mut Vec<(String, String)>,
    refused: &mut Vec<String>,
) {
    let started = Instant::now();
    let from = *next;
    loop {
        let i = *next;
        *next += 1;
        let key = KEYS[i % KEYS.len()];
        match relay
            .try_post("/hooks/s", &[JSON, ("x-entity-id", key)], hook_body(i, key))
            .await
        {
            Ok(a) if a.status == 200 => acked.push((key.to_owned(), a.id())),
            Ok(a) => {
                assert_eq!(a.status, 503, "hook {i}: {a:?}");
                refused.push(format!("hook {i}: 503 {}", a.body));
                break;
            }
            Err(e) => {
                refused.push(format!("hook {i}: no answer ({e})"));
                break;
            }
        }
        assert!(
            *next - from < 20_000 && started.elapsed() < WAIT,
            "the 16 MiB disk never filled: {} hooks, {} bytes free",
            *next - from,
            free_bytes(disk.path())
        );
    }
    // Nothing more is acknowledged.
    for _ in 0..3 {
        let i = *next;
        *next += 1;
        let key = KEYS[i % KEYS.len()];
        match relay
            .try_post("/hooks/s", &[JSON, ("x-entity-id", key)], hook_body(i, key))
            .await
        {
            Ok(a) => {
                assert_eq!(a.status, 503, "a hook after the disk filled: {a:?}");
                refused.push(format!("hook {i}: 503 {}", a.body));
            }
            Err(e) => refused.push(format!("hook {i}: no answer ({e})")),
        }
    }
    let status = relay.wait_exit(WAIT).await;
    let log = relay.log();
    assert_eq!(
        status.code(),
        Some(1),
        "the node stops (fail-stop) on the full disk: {status}\n{log}"
    );
    // One line says what failed (the disk's error, whichever task met it
    // first or its poisoned handle after) and what the node does.
    let line = log
        .lines()
        .find(|l| l.contains("stopping the node"))
        .unwrap_or_else(|| panic!("no fail-stop line:\n{log}"));
    assert!(
        line.contains("ERROR") && line.contains("No space left on device"),
        "the fail-stop line does not name the disk's error: {line}"
    );
    eprintln!(
        "full disk after {} hooks acknowledged in all; then {:?}",
        acked.len(),
        &refused[refused.len() - 4..]
    );
    for l in log.lines().filter(|l| {
        l.contains("ERROR")
            || l.contains("WARN ") && l.contains("store")
            || l.starts_with("ankusa:")
    }) {
        eprintln!("  relay: {l}");
    }
}

/// A full disk: the relay's RocksDB data_dir on a 16 MiB tmpfs, hooks posted
/// one after the other to an ordered source until ingest stops answering 200.
/// The node never answers 200 for a hook it could not commit: what it answers
/// instead is 503 (or nothing, once it has exited); it logs the store's error
/// (ENOSPC) and what it does about it, and stops with exit status 1
/// (fail-stop). A restart on the still full disk is refused at open or stops
/// the same way. After the tmpfs is grown (space returns), a restart on the
/// same data_dir delivers every hook that got a 200 to the HTTP sink, each key
/// in the order of its acknowledgements (a duplicate only repeats the lane's
/// head), and the stopped store passes the invariant checker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_node_without_acknowledging_what_it_could_not_commit() {
    let disk = match Tmpfs::mount("16m") {
        Ok(d) => d,
        Err(why) => {
            eprintln!(
                "\n\n!!!!!!!! SKIPPED faults::a_full_disk_...: {why} (the test needs root to mount a tmpfs) !!!!!!!!\n"
            );
            return;
        }
    };
    let data = disk.path().join("data");
    let sink = Sink::ok().await;
    let template = format!(
        "node: {{data_dir: '{}', store: rocksdb}}
listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}'}}
retry: {{base_ms: 10, max_ms: 100}}
sources:
  - name: s
    sinks: [{{type: http, url: '{}', ordered: true, ordering_key: {{header: x-entity-id}}}}]
",
        data.display(),
        sink.url()
    );
    let mut relay = Relay::start(&template).await;
    // (key, idempotency key) of every 200, in the order they came.
    let mut acked: Vec<(String, String)> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut next = 0usize;
    fill(&mut relay, &disk, &mut next, &mut acked, &mut refused).await;
    assert!(
        acked.len() > 50,
        "only {} hooks before the disk filled",
        acked.len()
    );
    let first = acked.len();

    // A restart while the disk is still full (an orchestrator restarting
    // the relay): RocksDB's open either fails, naming the error, or recovers
    // in what the exit freed, and the node then takes hooks while they fit
    // and stops the same way.
    match relay.restart_ready_or_exit().await {
        Some((status, log)) => {
            assert!(
                !status.success() && log.contains("No space left on device"),
                "a start on the full disk: {status}\n{log}"
            );
            eprintln!(
                "the restart on the full disk was refused: {}",
                log.lines().last().unwrap_or("")
            );
        }
        None => {
            fill(&mut relay, &disk, &mut next, &mut acked, &mut refused).await;
            eprintln!(
                "the restart on the full disk took {} more hooks and stopped again",
                acked.len() - first
            );
        }
    }

    // Space returns: the volume is grown; the same data_dir starts again.
    disk.resize("256m");
    relay.restart().await;
    let ids: HashSet<&str> = acked.iter().map(|(_, id)| id.as_str()).collect();
    until("every acknowledged hook delivered", WAIT, async || {
        let got: HashSet<String> = sink.delivered().iter().map(Req::id).collect();
        ids.iter().all(|id| got.contains(*id)).then_some(())
    })
    .await;
    until("nothing left to deliver", WAIT, async || {
        (relay.metrics().await["ankusa_queue_pending"] == 0.0).then_some(())
    })
    .await;
    // Per key, in acknowledgement order; a repeat only right after itself
    // (the lane's head sent again); hooks that were not acknowledged (a
    // commit the failed sync did not make durable but the disk kept) may be
    // delivered too, at most the ones refused.
    let delivered = sink.delivered();
    let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &delivered {
        let seq = per_key.entry(r.key().expect("ordering key")).or_default();
        if seq.last() != Some(&r.id()) {
            seq.push(r.id());
        }
    }
    let mut want: HashMap<String, Vec<String>> = HashMap::new();
    for (key, id) in &acked {
        want.entry(key.clone()).or_default().push(id.clone());
    }
    for (key, seq) in &per_key {
        let got: Vec<&String> = seq.iter().filter(|id| ids.contains(id.as_str())).collect();
        let w: Vec<&String> = want
            .get(key)
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        assert_eq!(
            got, w,
            "lane {key}: delivered out of acknowledgement order or twice"
        );
    }
    let extra: HashSet<String> = delivered
        .iter()
        .map(Req::id)
        .filter(|id| !ids.contains(id.as_str()))
        .collect();
    assert!(
        extra.len() <= refused.len(),
        "{} hooks delivered that were never acknowledged: {extra:?}",
        extra.len()
    );
    relay.sigterm();
    assert!(relay.wait_exit(WAIT).await.success(), "{}", relay.log());
    let kv = RocksKv::open(data.join("store-rocksdb")).expect("open the store");
    assert_eq!(check_invariants(&kv).expect("check"), vec![]);
    drop(kv);
    drop(relay);
    drop(disk);
}
