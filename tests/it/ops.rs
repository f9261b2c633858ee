//! Operating the relay (docs/design.md section 5, "Pause", "Unconfigured sources
//! and sinks", "Quarantine", "Retention"), through the real binary and, for the
//! quarantine release the admin API will call, the edge in process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ankusa_engine::{Cf, Direction, Durability, Kv, Read};
use ankusa_engine_rocksdb::RocksKv;
use ankusa_keys::{DeadLetterValue, Family, TenantOrd, tenant_range};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::relay::{Relay, config};
use crate::sink::{Reply, Req, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(90);
const JSON: (&str, &str) = ("content-type", "application/json");
const KEYS: [&str; 4] = ["cus_a", "cus_b", "cus_c", "cus_d"];

fn body(key: &str, i: usize) -> String {
    format!("{{\"key\":\"{key}\",\"i\":{i}}}")
}

fn label(r: &Req) -> (String, u64) {
    let j = r.json();
    (
        j["key"].as_str().unwrap_or("?").to_owned(),
        j["i"].as_u64().unwrap_or(u64::MAX),
    )
}

/// The `i`s each key's hooks arrived with, in arrival order.
fn by_key(reqs: &[Req]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in reqs {
        let (k, i) = label(r);
        out.entry(k).or_default().push(i);
    }
    out
}

/// What each key's hooks should be, in the order they were posted.
fn want(n: usize) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for i in 0..n {
        out.entry(KEYS[i % KEYS.len()].to_owned())
            .or_default()
            .push(i as u64);
    }
    out
}

fn store_path(relay: &Relay) -> std::path::PathBuf {
    relay.data_dir().join("store-rocksdb")
}

async fn stop(relay: &mut Relay) {
    relay.sigterm();
    let status = relay.wait_exit(WAIT).await;
    assert!(
        status.success(),
        "the relay did not stop cleanly: {status}\n{}",
        relay.log()
    );
}

fn two_sinks(url: &str, paused: bool) -> String {
    config(
        "rocksdb",
        &format!(
            "
sources:
  - name: shop
    sinks:
      - {{type: http, name: ledger, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}, paused: {paused}}}
      - {{type: http, name: audit, url: '{url}2'}}
"
        ),
    )
}

/// A sink paused in the configuration: 100 hooks with ordering keys are all
/// accepted; the other sink of the same tenant delivers every one while the
/// paused one gets none (its lane heads wait, the members stay); a restart
/// with the pause lifted delivers all 100 to it, in order per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sink_waits_in_order_and_a_restart_without_the_pause_delivers_it() {
    let sink = Sink::ok().await;
    let mut relay = Relay::start(&two_sinks(&sink.url(), true)).await;
    for i in 0..100 {
        let key = KEYS[i % KEYS.len()];
        relay
            .post("/hooks/shop", &[JSON, ("x-entity-id", key)], body(key, i))
            .await
            .id();
    }
    until(
        "the audit sink got all 100 and the ledger rows wait",
        WAIT,
        async || {
            let audit = sink.delivered().iter().filter(|r| r.path == "/in2").count();
            let m = relay.metrics().await;
            (audit == 100 && m["ankusa_queue_pending"] == 100.0).then_some(())
        },
    )
    .await;
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_dispatch_paused"], 1.0);
    assert_eq!(m["ankusa_dispatch_lanes"], 4.0, "one head per key: {m:?}");
    assert_eq!(m["ankusa_dispatch_lane_members"], 96.0);
    assert_eq!(m["ankusa_dispatch_in_flight"], 0.0);
    assert!(
        sink.requests().iter().all(|r| r.path == "/in2"),
        "the paused ledger sink was called"
    );
    // Unordered: concurrent calls may reach the receiver in any order, so
    // compare each key's hooks as a set (every one, once).
    let mut audit = by_key(&sink.delivered());
    audit.values_mut().for_each(|v| v.sort_unstable());
    assert_eq!(
        audit,
        want(100),
        "the audit sink, unordered, got every hook once"
    );
    stop(&mut relay).await;

    relay.set_template(&two_sinks(&sink.url(), false));
    relay.restart().await;
    let ledger = until("the ledger sink got all 100", WAIT, async || {
        let l: Vec<Req> = sink
            .delivered()
            .into_iter()
            .filter(|r| r.path == "/in")
            .collect();
        (l.len() == 100).then_some(l)
    })
    .await;
    assert_eq!(by_key(&ledger), want(100), "in order per key");
    for r in &ledger {
        assert_eq!(
            r.key(),
            Some(label(r).0),
            "the ordering key travels with the hook"
        );
    }
    until("nothing pending", WAIT, async || {
        (relay.metrics().await["ankusa_queue_pending"] == 0.0).then_some(())
    })
    .await;
    assert_eq!(relay.metrics().await["ankusa_dispatch_paused"], 0.0);
}

fn paused_source(url: &str, paused: bool) -> String {
    config(
        "rocksdb",
        &format!(
            "
sources:
  - name: held
    paused: {paused}
    sinks: [{{type: http, url: '{url}'}}]
  - name: witness
    sinks: [{{type: http, url: '{url}2'}}]
"
        ),
    )
}

/// A paused source's hooks are answered 200 and committed (they survive a
/// SIGKILL), and none reaches its sink while a hook of another source posted
/// after them is delivered; after a restart without the pause all are
/// delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_source_accepts_and_commits_but_delivers_nothing_until_resumed() {
    let sink = Sink::ok().await;
    let mut relay = Relay::start(&paused_source(&sink.url(), true)).await;
    let mut ids = Vec::new();
    for i in 0..10 {
        let a = relay.post("/hooks/held", &[JSON], body("held", i)).await;
        assert_eq!(a.status, 200, "{a:?}");
        ids.push(a.id());
    }
    let witness = relay
        .post("/hooks/witness", &[JSON], body("witness", 0))
        .await
        .id();
    until("the witness delivered", WAIT, async || {
        sink.delivered()
            .iter()
            .any(|r| r.id() == witness)
            .then_some(())
    })
    .await;
    until("the witness's outcome committed", WAIT, async || {
        (relay.metrics().await["ankusa_queue_pending"] == 10.0).then_some(())
    })
    .await;
    assert!(
        sink.requests().iter().all(|r| r.path == "/in2"),
        "a paused source's hook was delivered"
    );
    assert_eq!(relay.metrics().await["ankusa_dispatch_paused"], 1.0);
    // Committed: a SIGKILL loses none of them.
    relay.kill();
    relay.set_template(&paused_source(&sink.url(), false));
    relay.restart().await;
    let got = until("the 10 held hooks delivered", WAIT, async || {
        let d: Vec<Req> = sink
            .delivered()
            .into_iter()
            .filter(|r| r.path == "/in")
            .collect();
        (d.len() == 10).then_some(d)
    })
    .await;
    let mut got_ids: Vec<String> = got.iter().map(Req::id).collect();
    got_ids.sort();
    ids.sort();
    assert_eq!(got_ids, ids);
}

fn before_removal(url: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "
breaker: {{failures: 1000}}
retry: {{base_ms: 50, max_ms: 200}}
sources:
  - name: keep
    sinks:
      - {{type: http, name: main, url: '{url}'}}
      - {{type: http, name: audit, url: '{url}down'}}
  - name: gone
    sinks:
      - {{type: http, name: ordered, url: '{url}down', ordered: true, ordering_key: {{header: x-entity-id}}}}
"
        ),
    )
}

fn after_removal(url: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "
sources:
  - name: keep
    sinks:
      - {{type: http, name: main, url: '{url}'}}
"
        ),
    )
}

/// The dead letters of tenant 1 in the store at `path`: reason -> count.
fn dead_letters(path: &std::path::Path) -> BTreeMap<String, usize> {
    let kv = RocksKv::open(path).expect("open the store");
    let mut out = BTreeMap::new();
    for (_, v) in kv
        .scan(
            Cf::Index,
            &tenant_range(Family::DeadLetter, TenantOrd(1)),
            Direction::Forward,
            10_000,
        )
        .expect("scan")
    {
        *out.entry(DeadLetterValue::decode(&v).expect("?X value").reason)
            .or_default() += 1;
    }
    out
}

/// A source (with ordered lanes) and a sink entry removed from the
/// configuration while their hooks are queued (their endpoint down): the node
/// refuses to start, naming each with its pending count and the two ways out,
/// and changes nothing; `--drop-unconfigured` starts it with their rows in the
/// dead-letter queue under "source removed from the config" and "sink removed
/// from the config"; the next start needs no flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_source_or_sink_with_queued_hooks_stops_the_start_until_dropped() {
    let sink = Sink::start(|r| {
        if r.path == "/indown" {
            Reply::Status(503)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let mut relay = Relay::start(&before_removal(&sink.url())).await;
    for i in 0..3 {
        relay
            .post("/hooks/keep", &[JSON], body("keep", i))
            .await
            .id();
    }
    for i in 0..5 {
        let key = KEYS[i % 2];
        relay
            .post("/hooks/gone", &[JSON, ("x-entity-id", key)], body(key, i))
            .await
            .id();
    }
    until(
        "keep's main sink delivered 3, 8 rows queued",
        WAIT,
        async || {
            let main = sink.delivered().iter().filter(|r| r.path == "/in").count();
            let m = relay.metrics().await;
            (main == 3
                && m["ankusa_queue_pending"] == 8.0
                && m["ankusa_dispatch_retries_total"] >= 1.0)
                .then_some(())
        },
    )
    .await;
    stop(&mut relay).await;

    relay.set_template(&after_removal(&sink.url()));
    let (status, log) = relay.restart_refused().await;
    assert!(!status.success(), "{log}");
    for needle in [
        "the store has queued deliveries for sources or sinks that are not in the configuration",
        "source \"gone\" (not in the configuration): 5 pending",
        "source \"gone\", sink \"ordered\" (index 0): 5 pending",
        "source \"keep\", sink \"audit\" (index 1), not in the configuration: 3 pending",
        "paused: true",
        "ankusa serve --drop-unconfigured",
    ] {
        assert!(
            log.contains(needle),
            "{needle:?} not in the refusal:\n{log}"
        );
    }
    assert!(
        dead_letters(&store_path(&relay)).is_empty(),
        "a refused start changed the store"
    );

    relay.set_args(&["--drop-unconfigured"]);
    relay.restart().await;
    let m = relay.metrics().await;
    assert_eq!(
        (
            m["ankusa_dlq_dead"],
            m["ankusa_queue_pending"],
            m["ankusa_dispatch_lanes"],
            m["ankusa_dispatch_lane_members"]
        ),
        (8.0, 0.0, 0.0, 0.0),
        "{m:?}"
    );
    stop(&mut relay).await;
    assert_eq!(
        dead_letters(&store_path(&relay)),
        BTreeMap::from([
            ("sink removed from the config".to_owned(), 3),
            ("source removed from the config".to_owned(), 5)
        ])
    );
    {
        let kv = RocksKv::open(store_path(&relay)).expect("open the store");
        assert_eq!(
            ankusa_queue::check_invariants(&kv.snapshot()).expect("check"),
            vec![]
        );
    }
    // Nothing unconfigured is left: a start without the flag.
    relay.set_args(&[]);
    relay.restart().await;
    assert_eq!(relay.metrics().await["ankusa_dlq_dead"], 8.0);
}

const GITHUB_SECRET: &str = "It's a Secret to Everybody";

fn github_signature(body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(GITHUB_SECRET.as_bytes())
        .expect("any key length");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// `quarantine: true` holds every hook (202, never delivered);
/// `on_invalid_signature: quarantine` holds a forged hook instead of refusing
/// it, and the forgery takes no part in dedupe: the genuine hook with the same
/// delivery id is accepted (200, not a duplicate) and delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_hooks_are_held_and_a_bad_signature_is_held_not_refused() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
sources:
  - name: review
    quarantine: true
    sinks: [{{type: http, url: '{url}'}}]
  - name: signed
    verification: {{type: github, secrets: [\"{GITHUB_SECRET}\"]}}
    on_invalid_signature: quarantine
    dedupe: {{header: x-github-delivery}}
    sinks: [{{type: http, url: '{url}'}}]
  - name: strict
    verification: {{type: github, secrets: [\"{GITHUB_SECRET}\"]}}
    sinks: [{{type: http, url: '{url}'}}]
",
            url = sink.url()
        ),
    ))
    .await;
    for i in 0..3 {
        let a = relay
            .post("/hooks/review", &[JSON], body("review", i))
            .await;
        assert_eq!(a.status, 202, "{a:?}");
        assert_eq!(a.body["quarantined"], true);
        assert_eq!(a.body["id"].as_str().map(str::len), Some(36), "{a:?}");
    }
    let genuine = body("signed", 1);
    let forged = body("forged", 1);
    let a = relay
        .post(
            "/hooks/signed",
            &[
                JSON,
                ("x-github-delivery", "d-1"),
                ("x-hub-signature-256", &github_signature(b"something else")),
            ],
            forged.clone(),
        )
        .await;
    assert_eq!(
        (a.status, a.body["quarantined"].as_bool()),
        (202, Some(true)),
        "{a:?}"
    );
    let a = relay
        .post(
            "/hooks/signed",
            &[
                JSON,
                ("x-github-delivery", "d-1"),
                ("x-hub-signature-256", &github_signature(genuine.as_bytes())),
            ],
            genuine.clone(),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(
        a.body.get("duplicate"),
        None,
        "the forged hook made the genuine one a duplicate: {a:?}"
    );
    let genuine_id = a.id();
    // Without the option a bad signature is still refused.
    let a = relay
        .post(
            "/hooks/strict",
            &[JSON, ("x-hub-signature-256", "sha256=00")],
            forged.clone(),
        )
        .await;
    assert_eq!(a.status, 401, "{a:?}");
    until("the genuine hook delivered", WAIT, async || {
        sink.delivered()
            .iter()
            .any(|r| r.id() == genuine_id)
            .then_some(())
    })
    .await;
    until("its outcome committed", WAIT, async || {
        (relay.metrics().await["ankusa_queue_pending"] == 0.0).then_some(())
    })
    .await;
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_quarantined"], 4.0, "{m:?}");
    assert_eq!(m["ankusa_ingest_quarantined_total"], 4.0);
    assert_eq!(m["ankusa_ingest_unauthorized_total"], 1.0);
    assert_eq!(m["ankusa_ingest_accepted_total"], 1.0);
    let reqs = sink.requests();
    assert_eq!(reqs.len(), 1, "a quarantined hook was delivered: {reqs:?}");
    assert_eq!(String::from_utf8_lossy(&reqs[0].body), genuine);
}

/// The release and drop entry points of the admin API
/// (`ankusa_admin::quarantine`), on the edge in process (memory store): a hook held for a bad signature is released with
/// its rows resolved from the stored envelope (its ordering key from a stored
/// header, ADR 0004 section 2) and keeps its seq; a second release is refused;
/// a drop deletes another held hook; the store stays consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_hook_is_released_with_its_stored_ordering_key_or_dropped() {
    use ankusa_admin::quarantine::{ReleaseError, drop_quarantined, release_quarantined};
    use ankusa_edge::server::{Edge, EdgeStats, build_routes};
    use ankusa_engine::memory::MemoryKv;
    use ankusa_keys::{SinkIx, lane_member_key};
    use ankusa_queue::writer::{Writer, WriterConfig};

    let yaml = format!(
        "
sources:
  - name: signed
    verification: {{type: github, secrets: [\"{GITHUB_SECRET}\"]}}
    on_invalid_signature: quarantine
    sinks:
      - {{type: http, url: 'http://127.0.0.1:9/in', ordered: true, ordering_key: {{header: x-entity-id}}}}
      - {{type: http, url: 'http://127.0.0.1:9/in2'}}
"
    );
    let cfg = ankusa_config::Config::from_yaml(&yaml, &|_| None).expect("config");
    let kv = Arc::new(MemoryKv::new());
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .expect("init");
    let (batch, registry) =
        ankusa_queue::register(&*kv, ["default"], ["signed"]).expect("register");
    kv.write(batch, Durability::Sync).expect("register");
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms).expect("writer");
    let writer_task = tokio::spawn(writer.run());
    let woken = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let w = Arc::clone(&woken);
    let edge = Arc::new(Edge {
        kv: Arc::clone(&kv),
        writer: handle,
        on_commit: Box::new(move || {
            w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }),
        sources: build_routes(&cfg, &registry).expect("routes"),
        body_limit_bytes: 1 << 20,
        max_connections: ankusa_edge::server::MAX_CONNECTIONS,
        node_max_pending: 1000,
        node_max_pending_bytes: 1 << 30,
        shutting_down: Arc::new(AtomicBool::new(false)),
        reservations: Default::default(),
        stats: Arc::new(EdgeStats::default()),
        clock: Box::new(now_ms),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let serve = tokio::spawn(Arc::clone(&edge).serve(listener, stop_rx));
    let client = crate::relay::client();
    for (i, key) in ["cus_9", "cus_8"].into_iter().enumerate() {
        let a = crate::relay::post(
            &client,
            &format!("http://{addr}/hooks/signed"),
            &[
                JSON,
                ("x-entity-id", key),
                ("x-hub-signature-256", "sha256=00"),
            ],
            body(key, i).into_bytes(),
        )
        .await
        .expect("post");
        assert_eq!(a.status, 202, "{a:?}");
    }
    let page = ankusa_queue::list_quarantined(&*kv, TenantOrd(1), None, 10).expect("list");
    assert_eq!(page.hooks.len(), 2);
    assert!(
        page.hooks[0].reason.starts_with("invalid signature"),
        "{:?}",
        page.hooks[0]
    );
    let (first, second) = (page.hooks[0].seq, page.hooks[1].seq);
    let source = registry.sources["signed"];

    let r = release_quarantined(&edge, TenantOrd(1), first)
        .await
        .expect("release");
    assert_eq!((r.source.as_str(), r.rows), ("signed", 2));
    assert_eq!(
        woken.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the pipeline is woken"
    );
    // The ordered sink's row joined the lane of the stored header's key.
    let lane = ankusa_queue::lanes::lane_id(SinkIx(0), source, Some(b"cus_9"));
    assert!(
        kv.get(
            Cf::Index,
            &lane_member_key(TenantOrd(1), lane, first, SinkIx(0))
        )
        .expect("get")
        .is_some()
    );
    assert_eq!(ankusa_queue::check_invariants(&*kv).expect("check"), vec![]);
    assert_eq!(
        release_quarantined(&edge, TenantOrd(1), first)
            .await
            .unwrap_err(),
        ReleaseError::NotQuarantined {
            tenant: TenantOrd(1),
            seq: first
        }
    );
    drop_quarantined(&edge, TenantOrd(1), second)
        .await
        .expect("drop");
    assert!(
        kv.get(Cf::Hooks, &ankusa_keys::hook_key(TenantOrd(1), second))
            .expect("get")
            .is_none()
    );
    assert_eq!(
        drop_quarantined(&edge, TenantOrd(1), second)
            .await
            .unwrap_err(),
        ReleaseError::NotQuarantined {
            tenant: TenantOrd(1),
            seq: second
        }
    );
    assert!(
        ankusa_queue::list_quarantined(&*kv, TenantOrd(1), None, 10)
            .expect("list")
            .hooks
            .is_empty()
    );
    assert_eq!(ankusa_queue::check_invariants(&*kv).expect("check"), vec![]);
    let _ = stop_tx.send(true);
    serve.await.expect("edge");
    drop(edge);
    writer_task.await.expect("join").expect("writer");
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Keys of `cf` in tenant 1's range of the store at `path`.
fn count_keys(kv: &RocksKv, cf: Cf) -> usize {
    let range = match cf {
        Cf::Hooks => ankusa_keys::hooks_tenant_range(TenantOrd(1)),
        Cf::Archive => ankusa_keys::archive_tenant_range(TenantOrd(1)),
        _ => ankusa_keys::deliveries_tenant_range(TenantOrd(1)),
    };
    kv.scan(cf, &range, Direction::Forward, 100_000)
        .expect("scan")
        .len()
}

/// The SST bytes of `hooks` and `archive` after a full manual compaction.
fn compacted_sst_bytes(path: &std::path::Path) -> (u64, u64) {
    let kv = RocksKv::open(path).expect("open the store");
    kv.compact_all().expect("compact");
    (
        kv.sst_bytes(Cf::Hooks).expect("sst"),
        kv.sst_bytes(Cf::Archive).expect("sst"),
    )
}

/// With `retention.keep_ms: 2000`, every delivered hook's envelope and archive
/// entry is gone once the sweep has run past it: the store, opened after the
/// relay stopped, holds no key of them in `hooks` or `archive`, and after a
/// full compaction those column families take what an empty store's take
/// (within 10%).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_reclaims_delivered_hooks_and_their_space() {
    let sink = Sink::ok().await;
    let yaml = config(
        "rocksdb",
        &format!(
            "
retention: {{keep_ms: 2000, interval_ms: 200}}
sources:
  - name: s
    sinks: [{{type: http, url: '{}'}}]
",
            sink.url()
        ),
    );
    // The empty store: the same configuration, no hook.
    let mut empty = Relay::start(&yaml).await;
    stop(&mut empty).await;
    let empty_bytes = compacted_sst_bytes(&store_path(&empty));

    let mut relay = Relay::start(&yaml).await;
    let big = "x".repeat(8 * 1024);
    for i in 0..50 {
        relay
            .post(
                "/hooks/s",
                &[JSON],
                format!("{{\"i\":{i},\"pad\":\"{big}\"}}"),
            )
            .await
            .id();
    }
    until(
        "50 delivered, and their envelopes reclaimed by the sweep",
        WAIT,
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_delivered_total"] == 50.0
                && m["ankusa_retention_hooks_deleted_total"] == 50.0)
                .then_some(())
        },
    )
    .await;
    stop(&mut relay).await;
    {
        let kv = RocksKv::open(store_path(&relay)).expect("open the store");
        assert_eq!(
            count_keys(&kv, Cf::Hooks),
            0,
            "delivered envelopes left in hooks"
        );
        assert_eq!(count_keys(&kv, Cf::Archive), 0, "archive entries left");
        assert_eq!(count_keys(&kv, Cf::Deliveries), 0);
        assert_eq!(
            ankusa_queue::check_invariants(&kv.snapshot()).expect("check"),
            vec![]
        );
    }
    let (hooks, archive) = compacted_sst_bytes(&store_path(&relay));
    let within = |got: u64, base: u64| got <= base + base / 10 + 1;
    assert!(
        within(hooks, empty_bytes.0),
        "hooks: {hooks} SST bytes, the empty store's {}",
        empty_bytes.0
    );
    assert!(
        within(archive, empty_bytes.1),
        "archive: {archive} SST bytes, the empty store's {}",
        empty_bytes.1
    );
}

/// With retention shorter than the dedupe lifetime, a provider's resend
/// after the first hook's envelope was deleted is still a duplicate (200,
/// nothing stored), and its `id` is `null`, not an empty string: the dedupe
/// record keeps only the seq, so the first hook's idempotency key is not
/// known any more (docs/design.md section 5, "Edge", step 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_after_retention_deleted_the_hook_is_a_duplicate_with_a_null_id() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retention: {{keep_ms: 2000, interval_ms: 200}}
sources:
  - name: s
    dedupe: {{header: x-delivery}}
    sinks: [{{type: http, url: '{}'}}]
",
            sink.url()
        ),
    ))
    .await;
    let headers = [JSON, ("x-delivery", "evt_1")];
    let first = relay.post("/hooks/s", &headers, "{\"i\":1}").await.id();
    let dup = relay.post("/hooks/s", &headers, "{\"i\":1}").await;
    assert_eq!(
        (
            dup.status,
            dup.body["duplicate"].as_bool(),
            dup.body["id"].as_str()
        ),
        (200, Some(true), Some(first.as_str())),
        "{dup:?}"
    );
    until(
        "the hook delivered and its envelope deleted by retention",
        WAIT,
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_delivered_total"] == 1.0
                && m["ankusa_retention_hooks_deleted_total"] == 1.0)
                .then_some(())
        },
    )
    .await;
    let late = relay.post("/hooks/s", &headers, "{\"i\":1}").await;
    assert_eq!(late.status, 200, "{late:?}");
    let obj = late.body.as_object().expect("a JSON object");
    assert_eq!(
        obj.get("duplicate"),
        Some(&serde_json::Value::Bool(true)),
        "{late:?}"
    );
    assert_eq!(obj.get("id"), Some(&serde_json::Value::Null), "{late:?}");
    let m = relay.metrics().await;
    assert_eq!(
        (
            m["ankusa_ingest_accepted_total"],
            m["ankusa_ingest_duplicates_total"]
        ),
        (1.0, 2.0),
        "{m:?}"
    );
    assert_eq!(sink.requests().len(), 1, "a duplicate was delivered");
}

/// Regression (found by `.ci/stress.sh`: `retention_reclaims_delivered_hooks_and_their_space`
/// failed with "the relay did not stop cleanly: signal: 15"): `/readyz` answers 200 once the
/// pipeline has recovered, which can be before `serve` installed its SIGTERM handler, and a
/// SIGTERM in that window killed the process with the signal's default action. The handlers are
/// now installed before the listeners are bound: a SIGTERM sent as soon as the relay is ready
/// stops it cleanly (exit 0), every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_as_soon_as_the_relay_is_ready_stops_it_cleanly() {
    let sink = Sink::ok().await;
    let yaml = config(
        "rocksdb",
        &format!(
            "
sources:
  - name: s
    sinks: [{{type: http, url: '{}'}}]
",
            sink.url()
        ),
    );
    for _ in 0..3 {
        let mut relay = Relay::start(&yaml).await;
        stop(&mut relay).await;
        assert!(relay.log().contains("shutting down"), "{}", relay.log());
    }
}

/// A port in use refuses the start before the store is opened: the error
/// names `listeners.ingest`, and no new, empty store is left behind (a new
/// user's report: the store was created, then the bind failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_refuses_the_start_and_creates_no_store() {
    let sink = Sink::ok().await;
    let yaml = config(
        "rocksdb",
        &format!(
            "\nsources:\n  - name: s\n    sinks: [{{type: http, url: '{}'}}]\n",
            sink.url()
        ),
    );
    let mut relay = Relay::start(&yaml).await;
    stop(&mut relay).await;
    std::fs::remove_dir_all(relay.data_dir()).expect("remove the data_dir");
    let ingest = relay
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let _taken = std::net::TcpListener::bind(&ingest).expect("hold the relay's ingest port");
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!("listeners.ingest: cannot bind {ingest}")),
        "{log}"
    );
    assert!(
        !relay.data_dir().exists(),
        "a refused start made {}:\n{log}",
        relay.data_dir().display()
    );
}
