//! Operating the relay through the admin API and the CLI, with the real
//! binary (docs/design.md section 5, "Admin API", "Replayer", "Pause",
//! "Quarantine", "Purge a tenant", "Retire a source"): an archive replay of a
//! time range (original idempotency keys, lane order, SIGKILL mid-job, no hook
//! replayed twice), quarantine review, pause and resume, a tenant purge
//! (nothing of the tenant left in any column family), a retired source's
//! dead letters, and bad input and the token on every new route. Every JSON
//! answer of the API is validated against the OpenAPI document.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use ankusa_engine::{Cf, Direction, Kv, Read};
use ankusa_keys::{CounterField, Envelope, TenantOrd, counter_key, tenant_ranges};
use serde_json::{Value, json};

use crate::admin::{Admin, cli, validate};
use crate::relay::{Relay, config};
use crate::sink::{Reply, Req, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);
const JSON: (&str, &str) = ("content-type", "application/json");
const KEYS: [&str; 4] = ["cus_a", "cus_b", "cus_c", "cus_d"];

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

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

/// The `i`s of each key's requests, in arrival order.
fn by_key(reqs: &[Req]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in reqs {
        let (k, i) = label(r);
        out.entry(k).or_default().push(i);
    }
    out
}

/// What each key's hooks `from..to` are, in the order they were posted.
fn want(from: usize, to: usize) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for i in from..to {
        out.entry(KEYS[i % KEYS.len()].to_owned())
            .or_default()
            .push(i as u64);
    }
    out
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

fn open_store(relay: &Relay) -> ankusa_engine_rocksdb::RocksKv {
    ankusa_engine_rocksdb::RocksKv::open(relay.data_dir().join("store-rocksdb"))
        .expect("open the store")
}

fn assert_clean(kv: &ankusa_engine_rocksdb::RocksKv) {
    let violations = ankusa_queue::check_invariants(&kv.snapshot()).expect("check");
    assert!(violations.is_empty(), "{violations:#?}");
}

/// Posts hooks `from..to` of `source` (key `KEYS[i % 4]` in x-entity-id)
/// one at a time; their ids by `i`.
async fn post_range(
    relay: &Relay,
    source: &str,
    from: usize,
    to: usize,
) -> BTreeMap<usize, String> {
    let mut ids = BTreeMap::new();
    for i in from..to {
        let key = KEYS[i % KEYS.len()];
        ids.insert(
            i,
            relay
                .post(
                    &format!("/hooks/{source}"),
                    &[JSON, ("x-entity-id", key)],
                    body(key, i),
                )
                .await
                .id(),
        );
    }
    ids
}

async fn received_at(api: &Admin, id: &str) -> u64 {
    let h = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{id}"),
            None,
        )
        .await;
    h["received_at_ms"].as_u64().expect("received_at_ms")
}

/// Waits until the clock is past `ms`, so the next hook is received later.
async fn past(ms: u64) {
    until("the clock past the last hook", WAIT, async || {
        (now_ms() > ms).then_some(())
    })
    .await;
}

fn replay_config(sink: &Sink) -> String {
    config(
        "rocksdb",
        &format!(
            "
tenants: [{{name: default, max_pending: 400}}]
sources:
  - name: orders
    tenant: default
    sinks:
      - {{type: http, name: web, url: '{url}', timeout_ms: 120000, ordered: true, ordering_key: {{header: x-entity-id}}}}
",
            url = sink.url()
        ),
    )
}

/// Archive replay (docs/design.md section 5, "Replayer"): 700 hooks of four
/// keys, delivered; a replay of the 600 received in `[since, until)` through
/// the CLI. Its first step copies 256 hooks; the sink holds them, so the
/// tenant has more than half its bounds (400) pending and the job waits,
/// running: the relay is SIGKILLed there and restarted, the sink released.
/// The job finishes with exactly 600 copies (one per hook of the range, none
/// of the others: the store is read after the relay stops), each delivered
/// with its original's idempotency key, the copies of each key in the order
/// of their originals; the hooks outside the range are not delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_replay_redelivers_a_time_range_in_lane_order_once_across_a_sigkill() {
    let sink = Sink::ok().await;
    let mut relay = Relay::start(&replay_config(&sink)).await;
    let api = Admin::new(&relay, None);
    let mut ids: BTreeMap<usize, String> = BTreeMap::new();
    // Before the range, in it, after it: each part received after the last.
    let mut since = 0;
    let mut until_ms = 0;
    for (from, to) in [
        (0, 50),
        (50, 150),
        (150, 250),
        (250, 350),
        (350, 450),
        (450, 550),
        (550, 650),
        (650, 700),
    ] {
        if from == 50 || from == 650 {
            past(received_at(&api, &ids[&(from - 1)]).await).await;
        }
        ids.extend(post_range(&relay, "orders", from, to).await);
        if from == 50 {
            since = received_at(&api, &ids[&50]).await;
        }
        if from == 650 {
            until_ms = received_at(&api, &ids[&650]).await;
        }
        until("the batch delivered", WAIT, async || {
            (sink.delivered().len() >= to).then_some(())
        })
        .await;
    }
    assert!(since > 0 && until_ms > since);
    let first = sink.requests().len();
    assert_eq!(first, 700);
    sink.set_script(|_| Reply::Hold);

    let admin = format!("http://{}", relay.admin);
    let (code, out, err) = cli(
        &[
            "replay",
            "--source",
            "orders",
            "--since",
            &since.to_string(),
            "--until",
            &until_ms.to_string(),
            "--json",
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("replay --json");
    validate("POST", "/v1/jobs", 202, &job);
    assert_eq!(
        (job["kind"].as_str(), job["state"].as_str(), &job["total"]),
        (Some("replay"), Some("running"), &Value::Null)
    );
    assert_eq!(
        (
            job["filter"]["since_ms"].as_u64(),
            job["filter"]["until_ms"].as_u64()
        ),
        (Some(since), Some(until_ms))
    );
    let id = job["id"].as_u64().expect("job id");
    // The first step's 256 copies are held: the job waits on the bounds.
    let seen = until(
        "the replay waiting on the tenant's bounds",
        WAIT,
        async || {
            let j = api.job(id).await;
            (j["state"] == "running"
                && j["phase"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("waiting")))
            .then_some(j)
        },
    )
    .await;
    assert_eq!(seen["done"].as_u64(), Some(256), "{seen}");
    // The first copy: a new seq, its original's seq and idempotency key.
    let copy = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/701",
            None,
        )
        .await;
    assert_eq!(
        (copy["replay_of"].as_u64(), copy["idempotency_key"].as_str()),
        (Some(51), Some(ids[&50].as_str())),
        "{copy}"
    );
    let original = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/51",
            None,
        )
        .await;
    assert_eq!(original["replay_of"], Value::Null);
    assert_eq!(original["body_base64"], copy["body_base64"]);
    relay.kill();
    relay.restart().await;
    assert!(
        relay.log().contains("resuming admin job"),
        "the job was not resumed:\n{}",
        relay.log()
    );
    sink.release();
    let done = until("the replay done", WAIT, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(
        (
            done["done"].as_u64(),
            done["examined"].as_u64(),
            done["skipped"].as_u64()
        ),
        (Some(600), Some(600), Some(0)),
        "{done}"
    );
    until("the replayed hooks delivered", WAIT, async || {
        (api.tenant("default").await["counters"]["pending"] == 0).then_some(())
    })
    .await;

    let replayed: Vec<Req> = sink.requests()[first..].to_vec();
    let in_range: HashSet<&str> = (50..650).map(|i| ids[&i].as_str()).collect();
    let got: HashSet<String> = replayed.iter().map(Req::id).collect();
    assert_eq!(got.len(), 600, "every hook of the range delivered again");
    assert!(
        got.iter().all(|k| in_range.contains(k.as_str())),
        "a hook outside the range was delivered again"
    );
    for r in &replayed {
        let (key, i) = label(r);
        assert_eq!(
            r.id(),
            ids[&(i as usize)],
            "hook {i} delivered without its original idempotency key"
        );
        assert_eq!(r.key(), Some(key), "the ordering key travels with the copy");
    }
    // Per key, in the order of the originals; a copy in flight at the kill is
    // sent again right after the restart, before anything later of its lane.
    let mut order = by_key(&replayed);
    for v in order.values_mut() {
        v.dedup();
    }
    assert_eq!(order, want(50, 650));
    stop(&mut relay).await;

    let kv = open_store(&relay);
    let mut copies: HashMap<u64, usize> = HashMap::new();
    for kv in ankusa_engine::scan_pages(
        &kv,
        Cf::Hooks,
        ankusa_keys::hooks_range(),
        Direction::Forward,
        512,
    ) {
        let (_, v) = kv.expect("scan");
        if let Some(of) = Envelope::decode(&v).expect("envelope").replay_of {
            *copies.entry(of.0).or_default() += 1;
        }
    }
    assert_eq!(copies.len(), 600, "{copies:?}");
    assert!(
        (51..=650).all(|seq| copies.get(&seq) == Some(&1)),
        "a hook replayed twice or not at all: {copies:?}"
    );
    assert_clean(&kv);
}

/// Quarantine review (docs/design.md section 5, "Quarantine"): a
/// `quarantine: true` source whose store_headers keeps only the ordering
/// header: its hooks are listed page by page, shown, released one by one (API
/// and CLI) in order with their stored ordering key, dropped
/// (404 afterwards, counters right), and the rest released or dropped by a
/// job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantined_hooks_are_listed_released_in_order_and_dropped() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
tenants: [{{name: default}}]
sources:
  - name: review
    tenant: default
    quarantine: true
    store_headers: {{default: drop, headers: {{x-entity-id: keep}}}}
    sinks:
      - {{type: http, name: web, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}}}
",
            url = sink.url()
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let admin = format!("http://{}", relay.admin);
    let a = admin.as_str();
    let mut ids = Vec::new();
    for i in 0..12 {
        let key = KEYS[i % 2];
        let r = relay
            .post("/hooks/review", &[JSON, ("x-entity-id", key)], body(key, i))
            .await;
        assert_eq!(
            (r.status, r.body["quarantined"].as_bool()),
            (202, Some(true)),
            "{r:?}"
        );
        ids.push(r.body["id"].as_str().expect("id").to_owned());
    }
    assert_eq!(api.tenant("default").await["counters"]["quarantined"], 12);
    // Three pages of five.
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1.. {
        let q = cursor
            .take()
            .map_or_else(|| "limit=5".to_owned(), |c| format!("limit=5&cursor={c}"));
        let page = api
            .ok(
                "GET",
                "/v1/tenants/{tenant}/quarantine",
                &format!("/v1/tenants/default/quarantine?{q}"),
                None,
            )
            .await;
        listed.extend(page["items"].as_array().expect("items").clone());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => {
                assert_eq!(pages, 3);
                break;
            }
        }
    }
    assert_eq!(listed.len(), 12);
    for (i, h) in listed.iter().enumerate() {
        assert_eq!(
            (h["seq"].as_u64(), h["source"].as_str()),
            (Some(i as u64 + 1), Some("review")),
            "{h}"
        );
        assert_eq!(
            (h["id"].as_str(), h["reason"].as_str()),
            (
                Some(format!("default.{}", i + 1).as_str()),
                Some("source under quarantine")
            )
        );
        assert_eq!(h["idempotency_key"].as_str(), Some(ids[i].as_str()));
    }
    let shown = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/1",
            None,
        )
        .await;
    assert_eq!(shown["reason"], "source under quarantine");
    // The hook's own view says it is held (it has no rows to show).
    let hook = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/1",
            None,
        )
        .await;
    assert_eq!(
        (
            hook["quarantined"].as_str(),
            hook["deliveries"].as_array().map(Vec::len)
        ),
        (Some("source under quarantine"), Some(0)),
        "{hook}"
    );
    let (code, out, err) = cli(
        &[
            "hooks", "show", "--tenant", "default", "--seq", "1", "--admin", a,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("quarantined: source under quarantine"),
        "{out}"
    );
    // The source's store_headers keeps the ordering header and nothing else.
    let headers = shown["hook"]["headers"].as_array().expect("headers");
    assert_eq!(headers.len(), 1, "{shown}");
    assert_eq!(
        (headers[0]["name"].as_str(), headers[0]["value"].as_str()),
        (Some("x-entity-id"), Some("cus_a")),
        "{shown}"
    );
    // Nothing is delivered while held.
    assert_eq!(sink.requests().len(), 0);

    // Release 1..=6 through the API, 7 and 8 through the CLI.
    for seq in 1..=6 {
        let r = api
            .ok(
                "POST",
                "/v1/tenants/{tenant}/quarantine/{seq}/release",
                &format!("/v1/tenants/default/quarantine/{seq}/release"),
                None,
            )
            .await;
        assert_eq!(
            r,
            json!({ "id": format!("default.{seq}"), "released": true, "source": "review", "rows": 1 })
        );
    }
    assert_eq!(
        api.ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/1",
            None
        )
        .await["quarantined"],
        Value::Null
    );
    for seq in [7, 8] {
        let (code, out, err) = cli(
            &[
                "quarantine",
                "release",
                &format!("default.{seq}"),
                "--admin",
                a,
            ],
            None,
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&format!("released default.{seq}")), "{out}");
    }
    // Drop 9 and 10 through the API, 11 and 12 through the CLI (--yes).
    for seq in [9, 10] {
        let r = api
            .ok(
                "DELETE",
                "/v1/tenants/{tenant}/quarantine/{seq}",
                &format!("/v1/tenants/default/quarantine/{seq}"),
                None,
            )
            .await;
        assert_eq!(
            r,
            json!({ "id": format!("default.{seq}"), "dropped": true })
        );
    }
    let (code, _, err) = cli(&["quarantine", "drop", "default.11", "--admin", a], None);
    assert_eq!(code, 2, "a drop without --yes: {err}");
    assert!(err.contains("--yes"));
    for seq in [11, 12] {
        let (code, _, err) = cli(
            &[
                "quarantine",
                "drop",
                &format!("default.{seq}"),
                "--yes",
                "--admin",
                a,
            ],
            None,
        );
        assert_eq!(code, 0, "{err}");
    }
    let delivered = until("the released hooks delivered", WAIT, async || {
        (sink.delivered().len() == 8).then(|| sink.delivered())
    })
    .await;
    assert_eq!(
        by_key(&delivered),
        BTreeMap::from([
            ("cus_a".to_owned(), vec![0, 2, 4, 6]),
            ("cus_b".to_owned(), vec![1, 3, 5, 7])
        ])
    );
    for r in &delivered {
        let (key, i) = label(r);
        assert_eq!(
            r.key(),
            Some(key),
            "the stored ordering header makes the lane"
        );
        assert_eq!(
            r.id(),
            ids[i as usize],
            "a released hook keeps its idempotency key"
        );
    }
    // Dropped: gone. Released: no longer quarantined.
    for seq in 9..=12 {
        let (status, e) = api
            .call(
                "GET",
                "/v1/tenants/{tenant}/quarantine/{seq}",
                &format!("/v1/tenants/default/quarantine/{seq}"),
                None,
            )
            .await;
        assert_eq!(status, 404, "{e}");
        let (status, _) = api
            .call(
                "GET",
                "/v1/tenants/{tenant}/hooks/{seq}",
                &format!("/v1/tenants/default/hooks/{seq}"),
                None,
            )
            .await;
        assert_eq!(status, 404);
    }
    let (status, e) = api
        .call(
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/1/release",
            None,
        )
        .await;
    assert_eq!(status, 409, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .contains("not quarantined"),
        "{e}"
    );
    until("the released hooks settled", WAIT, async || {
        (api.tenant("default").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let c = api.tenant("default").await["counters"].clone();
    assert_eq!(
        (
            c["quarantined"].as_i64(),
            c["delivered_total"].as_i64(),
            c["dead"].as_i64()
        ),
        (Some(0), Some(8), Some(0)),
        "{c}"
    );
    assert_eq!(relay.metrics().await["ankusa_quarantined"], 0.0);

    // The rest by jobs: three released, two dropped.
    for i in 12..15 {
        relay
            .post(
                "/hooks/review",
                &[JSON, ("x-entity-id", "cus_a")],
                body("cus_a", i),
            )
            .await;
    }
    let (code, out, err) = cli(
        &[
            "quarantine",
            "release",
            "--source",
            "review",
            "--wait",
            "--json",
            "--admin",
            a,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job");
    assert_eq!(
        (
            job["kind"].as_str(),
            job["state"].as_str(),
            job["done"].as_u64()
        ),
        (Some("release_quarantined"), Some("done"), Some(3)),
        "{job}"
    );
    until("the job's hooks delivered", WAIT, async || {
        (sink.delivered().len() == 11).then_some(())
    })
    .await;
    for i in 15..17 {
        relay
            .post(
                "/hooks/review",
                &[JSON, ("x-entity-id", "cus_b")],
                body("cus_b", i),
            )
            .await;
    }
    let (code, out, err) = cli(
        &[
            "quarantine",
            "drop",
            "--all",
            "--yes",
            "--wait",
            "--json",
            "--admin",
            a,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job");
    assert_eq!(
        (
            job["kind"].as_str(),
            job["state"].as_str(),
            job["done"].as_u64()
        ),
        (Some("drop_quarantined"), Some("done"), Some(2)),
        "{job}"
    );
    let (code, out, _) = cli(&["quarantine", "list", "--admin", a], None);
    assert_eq!(code, 0);
    assert!(out.contains("(none)"), "{out}");
    let c = api.tenant("default").await["counters"].clone();
    assert_eq!(c["quarantined"].as_i64(), Some(0), "{c}");
}

fn pause_config(url: &str) -> String {
    config(
        "memory",
        &format!(
            "
sources:
  - name: shop
    sinks:
      - {{type: http, name: ledger, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}}}
      - {{type: http, name: audit, url: '{url}2'}}
  - name: held
    paused: true
    sinks: [{{type: http, url: '{url}3'}}]
"
        ),
    )
}

/// Pause and resume through the API and the CLI (docs/design.md section 5,
/// "Pause"): the ledger sink paused, 100 hooks of four keys are accepted, the
/// audit sink gets every one and the ledger none; resumed, the ledger gets
/// all 100 in order per key. A resume of what is not paused, or of a pause
/// the configuration sets, is a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_paused_through_the_api_delivers_nothing_until_resumed_then_all_in_order() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&pause_config(&sink.url())).await;
    let api = Admin::new(&relay, None);
    let admin = format!("http://{}", relay.admin);
    let (code, out, err) = cli(
        &[
            "pause",
            "shop",
            "--sink",
            "ledger",
            "--reason",
            "ledger maintenance",
            "--json",
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let p: Value = serde_json::from_str(&out).expect("pause --json");
    validate("POST", "/v1/sources/{source}/sinks/{sink}/pause", 200, &p);
    assert_eq!(
        (
            p["paused"].as_bool(),
            p["delivering"].as_bool(),
            p["by_config"].as_bool()
        ),
        (Some(true), Some(false), Some(false)),
        "{p}"
    );
    assert_eq!(p["by_runtime"]["reason"], "ledger maintenance");
    let src = api
        .ok("GET", "/v1/sources/{source}", "/v1/sources/shop", None)
        .await;
    let sinks = src["sinks"].as_array().expect("sinks");
    assert_eq!(
        (sinks[0]["name"].as_str(), sinks[0]["paused"].as_bool()),
        (Some("ledger"), Some(true))
    );
    assert_eq!(
        sinks[0]["pause"]["by_runtime"]["reason"],
        "ledger maintenance"
    );
    assert_eq!(
        (sinks[1]["name"].as_str(), sinks[1]["paused"].as_bool()),
        (Some("audit"), Some(false))
    );
    assert_eq!(src["paused"], false);

    for i in 0..100 {
        let key = KEYS[i % KEYS.len()];
        relay
            .post("/hooks/shop", &[JSON, ("x-entity-id", key)], body(key, i))
            .await
            .id();
    }
    let tenant = api.ok("GET", "/v1/tenants", "/v1/tenants", None).await["items"][0]["name"]
        .as_str()
        .expect("tenant")
        .to_owned();
    until(
        "the audit sink got all 100 and the ledger's wait",
        WAIT,
        async || {
            let audit = sink.delivered().iter().filter(|r| r.path == "/in2").count();
            (audit == 100 && api.tenant(&tenant).await["counters"]["pending"] == 100).then_some(())
        },
    )
    .await;
    assert!(
        sink.requests().iter().all(|r| r.path == "/in2"),
        "the paused ledger sink was called"
    );
    assert_eq!(
        relay.metrics().await["ankusa_dispatch_paused"],
        2.0,
        "the ledger and the held source's sink"
    );

    let r = api
        .ok(
            "POST",
            "/v1/sources/{source}/sinks/{sink}/resume",
            "/v1/sources/shop/sinks/ledger/resume",
            None,
        )
        .await;
    assert_eq!(
        (
            r["paused"].as_bool(),
            r["delivering"].as_bool(),
            &r["by_runtime"]
        ),
        (Some(false), Some(true), &Value::Null),
        "{r}"
    );
    let ledger = until("the ledger got all 100", WAIT, async || {
        let l: Vec<Req> = sink
            .delivered()
            .into_iter()
            .filter(|r| r.path == "/in")
            .collect();
        (l.len() == 100).then_some(l)
    })
    .await;
    assert_eq!(by_key(&ledger), want(0, 100), "in order per key");
    until("nothing pending", WAIT, async || {
        (api.tenant(&tenant).await["counters"]["pending"] == 0).then_some(())
    })
    .await;

    // Not paused: 409. Paused by the configuration: 409, and it stays.
    let (status, e) = api
        .call(
            "POST",
            "/v1/sources/{source}/sinks/{sink}/resume",
            "/v1/sources/shop/sinks/ledger/resume",
            None,
        )
        .await;
    assert_eq!(status, 409, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .contains("not paused"),
        "{e}"
    );
    let (status, e) = api
        .call(
            "POST",
            "/v1/sources/{source}/resume",
            "/v1/sources/held/resume",
            None,
        )
        .await;
    assert_eq!(status, 409, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .contains("configuration"),
        "{e}"
    );
    let held = api
        .ok("GET", "/v1/sources/{source}", "/v1/sources/held", None)
        .await;
    assert_eq!(
        (
            held["paused"].as_bool(),
            held["pause"]["by_config"].as_bool()
        ),
        (Some(true), Some(true)),
        "{held}"
    );
    // A whole source, paused through the API and resumed through the CLI.
    let p = api
        .ok(
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/shop/pause",
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (p["paused"].as_bool(), p["by_runtime"]["reason"].as_str()),
        (Some(true), Some("paused through the admin API")),
        "{p}"
    );
    let (code, out, err) = cli(&["resume", "shop", "--admin", &admin], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("source shop: not paused; delivering"), "{out}");
    assert_eq!(
        relay.metrics().await["ankusa_dispatch_paused"],
        1.0,
        "only the held source's sink"
    );
}

fn purge_config(url: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 100000, open_ms: 10}}
tenants: [{{name: doomed}}, {{name: keeper}}]
sources:
  - name: d_orders
    tenant: doomed
    sinks:
      - {{type: http, name: web, url: '{url}', timeout_ms: 120000, ordered: true, ordering_key: {{header: x-entity-id}}}}
  - name: d_review
    tenant: doomed
    quarantine: true
    sinks: [{{type: http, name: web, url: '{url}'}}]
  - name: k_orders
    tenant: keeper
    sinks: [{{type: http, name: web, url: '{url}k', timeout_ms: 120000}}]
"
        ),
    )
}

/// The node aggregate as `/metrics` shows it, by counter name.
async fn node_counters(relay: &Relay) -> BTreeMap<&'static str, f64> {
    let m = relay.metrics().await;
    [
        ("pending", "ankusa_queue_pending"),
        ("pending_bytes", "ankusa_queue_pending_bytes"),
        ("in_flight", "ankusa_dispatch_in_flight"),
        ("dead", "ankusa_dlq_dead"),
        ("dead_bytes", "ankusa_dlq_dead_bytes"),
        ("quarantined", "ankusa_quarantined"),
        ("delivered_total", "ankusa_dispatch_delivered_total"),
        ("dead_lettered_total", "ankusa_dispatch_dead_lettered_total"),
        ("lanes", "ankusa_dispatch_lanes"),
        ("lane_members", "ankusa_dispatch_lane_members"),
    ]
    .into_iter()
    .map(|(k, name)| {
        (
            k,
            *m.get(name).unwrap_or_else(|| panic!("no {name} in {m:?}")),
        )
    })
    .collect()
}

/// A tenant purge (docs/design.md section 5, "Purge a tenant"; ADR 0004
/// section 4.9): a tenant with lane heads in flight, lane members, dead
/// letters and quarantined hooks is purged by a job (the CLI refuses without
/// --yes); afterwards its counters are zero, the node aggregate equals the
/// other tenant's counters (also after the purged tenant's calls in flight
/// return), and, the relay stopped, no key of the tenant is left in any
/// column family of the store, whose invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_purge_leaves_nothing_of_the_tenant_and_the_aggregate_equal_to_the_others() {
    let sink = Sink::start(|r| match (r.path.as_str(), r.json()["key"].as_str()) {
        (_, Some("fail")) => Reply::Status(400),
        ("/ink", Some("hold")) | ("/in", _) => Reply::Hold,
        _ => Reply::Status(200),
    })
    .await;
    let mut relay = Relay::start(&purge_config(&sink.url())).await;
    let api = Admin::new(&relay, None);
    let admin = format!("http://{}", relay.admin);
    for (i, k) in ["f1", "f2", "f3"].into_iter().enumerate() {
        relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-entity-id", k)],
                body("fail", i),
            )
            .await
            .id();
    }
    until("three dead", WAIT, async || {
        (api.tenant("doomed").await["counters"]["dead"] == 3).then_some(())
    })
    .await;
    for i in 0..20 {
        let key = KEYS[i % 3];
        relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-entity-id", key)],
                body(key, i),
            )
            .await
            .id();
    }
    for i in 0..4 {
        let r = relay.post("/hooks/d_review", &[JSON], body("q", i)).await;
        assert_eq!(r.status, 202);
    }
    for (i, k) in ["ok", "ok", "ok", "ok", "ok", "fail", "hold"]
        .into_iter()
        .enumerate()
    {
        relay
            .post("/hooks/k_orders", &[JSON], body(k, i))
            .await
            .id();
    }
    let before = until("both tenants settled", WAIT, async || {
        let d = api.tenant("doomed").await["counters"].clone();
        let k = api.tenant("keeper").await["counters"].clone();
        (d["in_flight"] == 3
            && d["lane_members"] == 17
            && k["delivered_total"] == 5
            && k["dead"] == 1
            && k["in_flight"] == 1)
            .then_some(d)
    })
    .await;
    assert_eq!(
        (
            before["pending"].as_i64(),
            before["quarantined"].as_i64(),
            before["lanes"].as_i64()
        ),
        (Some(20), Some(4), Some(3)),
        "{before}"
    );
    let ord = api.tenant("doomed").await["ordinal"]
        .as_u64()
        .expect("ordinal") as u32;

    let (code, _, err) = cli(&["purge-tenant", "doomed", "--admin", &admin], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(
        api.tenant("doomed").await["counters"],
        before,
        "a refused purge changed something"
    );
    let (code, out, err) = cli(
        &[
            "purge-tenant",
            "doomed",
            "--yes",
            "--wait",
            "--json",
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job");
    validate("GET", "/v1/jobs/{id}", 200, &job);
    assert_eq!(
        (job["kind"].as_str(), job["state"].as_str()),
        (Some("purge_tenant"), Some("done")),
        "{job}"
    );
    assert_eq!(
        (job["done"].as_u64(), job["total"].as_u64()),
        (Some(27), Some(27)),
        "20 pending + 3 dead + 4 quarantined: {job}"
    );
    let zero: BTreeMap<String, Value> = [
        "pending",
        "pending_bytes",
        "in_flight",
        "dead",
        "dead_bytes",
        "quarantined",
        "delivered_total",
        "dead_lettered_total",
        "retries_total",
        "lanes",
        "lanes_blocked",
        "lane_members",
    ]
    .into_iter()
    .map(|f| (f.to_owned(), json!(0)))
    .collect();
    let after: BTreeMap<String, Value> =
        serde_json::from_value(api.tenant("doomed").await["counters"].clone()).expect("counters");
    assert_eq!(after, zero);
    let (status, _) = api
        .call(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/doomed/hooks/4",
            None,
        )
        .await;
    assert_eq!(status, 404);
    let q = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/doomed/quarantine",
            None,
        )
        .await;
    assert_eq!(q["items"], json!([]));
    let keeper = api.tenant("keeper").await["counters"].clone();
    let node = node_counters(&relay).await;
    for (field, v) in &node {
        assert_eq!(
            keeper[*field].as_f64(),
            Some(*v),
            "node {field} is not keeper's: {node:?} {keeper}"
        );
    }
    // The purged tenant's calls still out come back: their outcomes find no
    // row and change nothing.
    sink.release();
    until("keeper drained", WAIT, async || {
        (api.tenant("keeper").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let after: BTreeMap<String, Value> =
        serde_json::from_value(api.tenant("doomed").await["counters"].clone()).expect("counters");
    assert_eq!(after, zero, "an outcome of a purged row moved a counter");
    stop(&mut relay).await;

    let kv = open_store(&relay);
    for (cf, range) in tenant_ranges(TenantOrd(ord)) {
        let left = kv.scan(cf, &range, Direction::Forward, 10).expect("scan");
        assert!(
            left.is_empty(),
            "{cf:?} still holds keys of the purged tenant: {left:?}"
        );
    }
    let keeper_ord = TenantOrd(ord + 1);
    for field in CounterField::ALL {
        let (n, k) = (
            kv.counter(&counter_key(TenantOrd::NODE, field))
                .expect("node"),
            kv.counter(&counter_key(keeper_ord, field)).expect("keeper"),
        );
        assert_eq!(n, k, "node {field:?}");
    }
    assert!(
        ankusa_queue::read_purges(&kv).expect("purges").is_empty(),
        "the purge mark is still there"
    );
    assert_clean(&kv);
}

/// A retired source (docs/design.md section 5, "Retire a source"): its lane
/// members and due rows are dead-lettered by a job, its lane heads in flight
/// are left to the pipeline, which dead-letters them when their attempt
/// fails; the job ends once no call of the source is out. Every row of the
/// source is then in the DLQ with the reason; the other source of the tenant
/// delivered everything and has no dead letter; the store's invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_sources_queued_rows_are_dead_lettered_and_other_sources_untouched() {
    let sink = Sink::start(|r| match r.path.as_str() {
        "/in" => Reply::HoldThen(503),
        "/inf" => Reply::Status(503),
        _ => Reply::Status(200),
    })
    .await;
    let url = sink.url();
    let mut relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
retry: {{base_ms: 60000, max_ms: 60000}}
breaker: {{failures: 100000, open_ms: 10}}
tenants: [{{name: default}}]
sources:
  - name: old
    tenant: default
    sinks:
      - {{type: http, name: ledger, url: '{url}', timeout_ms: 120000, ordered: true, ordering_key: {{header: x-entity-id}}}}
      - {{type: http, name: flaky, url: '{url}f'}}
  - name: new
    tenant: default
    sinks: [{{type: http, name: web, url: '{url}n'}}]
"
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let admin = format!("http://{}", relay.admin);
    for i in 0..30 {
        let key = KEYS[i % 3];
        relay
            .post("/hooks/old", &[JSON, ("x-entity-id", key)], body(key, i))
            .await
            .id();
    }
    for i in 0..5 {
        relay.post("/hooks/new", &[JSON], body("n", i)).await.id();
    }
    until(
        "three lane heads held, every flaky row tried",
        WAIT,
        async || {
            let c = api.tenant("default").await["counters"].clone();
            let flaky = sink.requests().iter().filter(|r| r.path == "/inf").count();
            (c["in_flight"].as_u64() >= Some(3)
                && c["lane_members"] == 27
                && flaky >= 30
                && sink.delivered().len() == 5)
                .then_some(())
        },
    )
    .await;

    let (code, _, _) = cli(&["retire-source", "old", "--admin", &admin], None);
    assert_eq!(code, 2, "without --yes");
    let (code, out, err) = cli(
        &[
            "retire-source",
            "old",
            "--yes",
            "--reason",
            "retired: provider gone",
            "--json",
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job");
    validate("POST", "/v1/jobs", 202, &job);
    assert_eq!(
        (job["kind"].as_str(), job["filter"]["reason"].as_str()),
        (Some("dead_letter_source"), Some("retired: provider gone"))
    );
    let id = job["id"].as_u64().expect("id");
    let waiting = until(
        "the job waiting for the source's calls in flight",
        WAIT,
        async || {
            let j = api.job(id).await;
            (j["phase"] == "waiting for calls in flight").then_some(j)
        },
    )
    .await;
    assert_eq!(waiting["state"], "running");
    // Members and due rows are dead; the three heads are still out.
    let c = until("only the held heads out", WAIT, async || {
        let c = api.tenant("default").await["counters"].clone();
        (c["in_flight"] == 3).then_some(c)
    })
    .await;
    assert_eq!(
        (c["lane_members"].as_i64(), c["lanes"].as_i64()),
        (Some(0), Some(3)),
        "{c}"
    );
    assert_eq!(
        api.job(id).await["state"],
        "running",
        "the job ended with calls of the source out"
    );
    // Hooks of the source received while it is retired: the pipeline
    // dead-letters their due rows (a new lane's head and the flaky rows) with
    // the job's reason, and the job counts them in its `done`.
    for i in 30..35 {
        relay
            .post(
                "/hooks/old",
                &[JSON, ("x-entity-id", "cus_z")],
                body("cus_z", i),
            )
            .await
            .id();
    }
    until(
        "the new hooks' rows dead-lettered by the pipeline",
        WAIT,
        async || {
            let c = api.tenant("default").await["counters"].clone();
            (c["dead"] == 67 && c["in_flight"] == 3).then_some(())
        },
    )
    .await;
    sink.release();
    let done = until("the job done", WAIT, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await;
    assert_eq!(done["state"], "done", "{done}");
    // Every row dead-lettered for the retirement: 27 members and 30 flaky
    // rows by the job's pages, the 3 heads whose attempts failed and the 10
    // rows of the later hooks by the pipeline.
    assert_eq!(done["done"].as_u64(), Some(70), "{done}");
    assert_eq!(
        done["phase"],
        Value::Null,
        "a done job does nothing now: {done}"
    );
    until("nothing pending", WAIT, async || {
        (api.tenant("default").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let dead = api.dead("source=old&limit=1000").await;
    assert_eq!(dead.len(), 70, "every row of the retired source is dead");
    assert!(
        dead.iter().all(|d| d["reason"] == "retired: provider gone"),
        "{dead:?}"
    );
    let ledger: Vec<&Value> = dead.iter().filter(|d| d["sink"] == "ledger").collect();
    assert_eq!(ledger.len(), 35);
    assert_eq!(api.dead("source=new").await.len(), 0);
    let c = api.tenant("default").await["counters"].clone();
    assert_eq!(
        (
            c["dead"].as_i64(),
            c["delivered_total"].as_i64(),
            c["lanes"].as_i64(),
            c["in_flight"].as_i64()
        ),
        (Some(70), Some(5), Some(0), Some(0)),
        "{c}"
    );
    assert_eq!(
        sink.requests().iter().filter(|r| r.path == "/in").count(),
        3,
        "a lane member of the retired source was delivered"
    );
    let src = api
        .ok("GET", "/v1/sources/{source}", "/v1/sources/new", None)
        .await;
    assert_eq!(src["paused"], false);
    stop(&mut relay).await;
    assert_clean(&open_store(&relay));
}

/// Every new route: unknown tenant, source or sink, an inverted range, a
/// malformed cursor, a huge limit, a release of a hook that is not
/// quarantined, bodies of the wrong shape: a 4xx with a message, never a 5xx,
/// and nothing changes; and 401 without the token on every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_no_token_on_every_new_route_are_4xx() {
    const TOKEN: &str = "operate-token";
    let sink = Sink::ok().await;
    let relay = Relay::start(
        &config(
            "memory",
            &format!(
                "
tenants: [{{name: default}}]
sources:
  - name: shop
    tenant: default
    sinks: [{{type: http, name: ledger, url: '{url}'}}]
  - name: review
    tenant: default
    quarantine: true
    sinks: [{{type: http, name: web, url: '{url}'}}]
",
                url = sink.url()
            ),
        )
        .replace(
            "listeners: {ingest: '{INGEST}', admin: '{ADMIN}'}",
            &format!(
                "listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}', admin_token: '{TOKEN}'}}"
            ),
        ),
    )
    .await;
    let api = Admin::new(&relay, Some(TOKEN));
    relay.post("/hooks/shop", &[JSON], "{}").await.id();
    assert_eq!(relay.post("/hooks/review", &[JSON], "{}").await.status, 202);
    until("the shop hook delivered", WAIT, async || {
        (sink.delivered().len() == 1).then_some(())
    })
    .await;
    // The receiver has the hook before the relay commits its outcome: wait
    // for the commit, so that `before` is a state nothing is still changing.
    let before = until("the shop hook's delivery committed", WAIT, async || {
        let t = api.tenant("default").await;
        (t["counters"]["delivered_total"] == 1 && t["counters"]["in_flight"] == 0).then_some(t)
    })
    .await;
    let job = |v: Value| Some(v);
    let cases: Vec<(&str, &str, String, Option<Value>, u16)> = vec![
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/nope/pause".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/shop/pause".into(),
            Some(json!({ "why": "x" })),
            400,
        ),
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/shop/pause".into(),
            Some(json!("paused")),
            400,
        ),
        (
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/shop/pause?x=1".into(),
            None,
            400,
        ),
        (
            "POST",
            "/v1/sources/{source}/resume",
            "/v1/sources/nope/resume".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/resume",
            "/v1/sources/shop/resume".into(),
            None,
            409,
        ),
        (
            "POST",
            "/v1/sources/{source}/resume",
            "/v1/sources/shop/resume".into(),
            Some(json!({ "reason": "x" })),
            400,
        ),
        (
            "POST",
            "/v1/sources/{source}/sinks/{sink}/pause",
            "/v1/sources/shop/sinks/nope/pause".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/sinks/{sink}/pause",
            "/v1/sources/nope/sinks/ledger/pause".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/sinks/{sink}/resume",
            "/v1/sources/shop/sinks/nope/resume".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/sources/{source}/sinks/{sink}/resume",
            "/v1/sources/shop/sinks/ledger/resume".into(),
            None,
            409,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/nobody/quarantine".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine?cursor=%21%21".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine?cursor=AQEx".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine?limit=1000000".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine?source=nope".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/x".into(),
            None,
            400,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/999".into(),
            None,
            404,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/1".into(),
            None,
            409,
        ),
        (
            "GET",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/nobody/quarantine/2".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/1/release".into(),
            None,
            409,
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/999/release".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/tenants/{tenant}/quarantine/{seq}/release",
            "/v1/tenants/default/quarantine/-1/release".into(),
            None,
            400,
        ),
        (
            "DELETE",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/default/quarantine/1".into(),
            None,
            409,
        ),
        (
            "DELETE",
            "/v1/tenants/{tenant}/quarantine/{seq}",
            "/v1/tenants/nobody/quarantine/2".into(),
            None,
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "replay", "filter": { "source": "shop" } })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "replay", "filter": { "since": 1 } })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "replay", "filter": { "source": "nope", "since": 1 } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 9, "until": 3 } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z" } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 1, "reason": "x" } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 1 }, "sinks": ["nope"] }),
            ),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 1 }, "sinks": [] }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "replay", "filter": { "source": "shop", "since": 1, "tenant": "nobody" } }),
            ),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "revive", "sinks": ["ledger"] })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "purge_tenant" })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "purge_tenant", "filter": { "tenant": "nobody" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "purge_tenant", "filter": { "tenant": "default", "source": "shop" } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "dead_letter_source" })),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "dead_letter_source", "filter": { "source": "nope" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(
                json!({ "kind": "dead_letter_source", "filter": { "source": "shop", "since": 1 } }),
            ),
            400,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "release_quarantined", "filter": { "source": "nope" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "drop_quarantined", "filter": { "tenant": "nobody" } })),
            404,
        ),
        (
            "POST",
            "/v1/jobs",
            "/v1/jobs".into(),
            job(json!({ "kind": "drop_quarantined", "filter": { "reason": "x" } })),
            400,
        ),
    ];
    for (m, pattern, path, body, want) in cases {
        let (status, e) = api.call(m, pattern, &path, body.clone()).await;
        assert_eq!(status, want, "{m} {path} {body:?}: {e}");
        assert!(
            !e["error"]["message"].as_str().expect("message").is_empty(),
            "{e}"
        );
    }
    // Nothing changed, no job was made, nothing is paused.
    assert_eq!(api.tenant("default").await["counters"], before["counters"]);
    assert_eq!(
        api.ok("GET", "/v1/jobs", "/v1/jobs", None).await["items"],
        json!([])
    );
    assert_eq!(
        api.ok("GET", "/v1/sources/{source}", "/v1/sources/shop", None)
            .await["paused"],
        false
    );

    // The token, on every new route.
    for bad in [None, Some("wrong")] {
        let anon = Admin::new(&relay, bad);
        for (m, pattern, path) in [
            (
                "POST",
                "/v1/sources/{source}/pause",
                "/v1/sources/shop/pause",
            ),
            (
                "POST",
                "/v1/sources/{source}/resume",
                "/v1/sources/shop/resume",
            ),
            (
                "POST",
                "/v1/sources/{source}/sinks/{sink}/pause",
                "/v1/sources/shop/sinks/ledger/pause",
            ),
            (
                "POST",
                "/v1/sources/{source}/sinks/{sink}/resume",
                "/v1/sources/shop/sinks/ledger/resume",
            ),
            (
                "GET",
                "/v1/tenants/{tenant}/quarantine",
                "/v1/tenants/default/quarantine",
            ),
            (
                "GET",
                "/v1/tenants/{tenant}/quarantine/{seq}",
                "/v1/tenants/default/quarantine/2",
            ),
            (
                "DELETE",
                "/v1/tenants/{tenant}/quarantine/{seq}",
                "/v1/tenants/default/quarantine/2",
            ),
            (
                "POST",
                "/v1/tenants/{tenant}/quarantine/{seq}/release",
                "/v1/tenants/default/quarantine/2/release",
            ),
            ("POST", "/v1/jobs", "/v1/jobs"),
        ] {
            let body = (path == "/v1/jobs")
                .then(|| json!({ "kind": "purge_tenant", "filter": { "tenant": "default" } }));
            let (status, e) = anon.call(m, pattern, path, body).await;
            assert_eq!(status, 401, "{bad:?} {m} {path}: {e}");
            assert_eq!(e["error"]["code"], "unauthorized");
        }
    }
    assert_eq!(
        api.tenant("default").await["counters"],
        before["counters"],
        "a refused request changed something"
    );
    assert_eq!(
        api.ok(
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/default/quarantine",
            None
        )
        .await["items"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

fn purge_dedupe_config(url: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "
tenants: [{{name: doomed}}, {{name: keeper}}]
sources:
  - name: d_orders
    tenant: doomed
    dedupe: {{header: x-delivery}}
    sinks: [{{type: http, name: web, url: '{url}'}}]
  - name: d_review
    tenant: doomed
    quarantine: true
    sinks: [{{type: http, name: web, url: '{url}'}}]
  - name: k_orders
    tenant: keeper
    dedupe: {{header: x-delivery}}
    sinks: [{{type: http, name: web, url: '{url}k'}}]
"
        ),
    )
}

/// The answer to every hook of a tenant being purged: 503, Retry-After 30.
fn assert_purge_refusal(what: &str, a: &crate::relay::Answer) {
    assert_eq!(
        (a.status, a.retry_after.as_deref()),
        (503, Some("30")),
        "{what}: {a:?}"
    );
    let msg = a.body["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("tenant doomed is being purged"),
        "{what}: {a:?}"
    );
}

async fn start_purge(api: &Admin) -> u64 {
    let job = api
        .ok(
            "POST",
            "/v1/jobs",
            "/v1/jobs",
            Some(json!({ "kind": "purge_tenant", "filter": { "tenant": "doomed" } })),
        )
        .await;
    job["id"].as_u64().expect("job id")
}

async fn job_ended(api: &Admin, id: u64) -> Value {
    until("the job ended", WAIT, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await
}

/// Posts hook `delivery` of d_orders; its id (a new hook, not a duplicate).
async fn post_new(relay: &Relay, delivery: &str) -> String {
    let a = relay
        .post(
            "/hooks/d_orders",
            &[JSON, ("x-delivery", delivery)],
            body(delivery, 0),
        )
        .await;
    assert_eq!(a.body["duplicate"], Value::Null, "{a:?}");
    a.id()
}

/// A tenant purge refuses every hook of the tenant before the dedupe check
/// (docs/design.md section 5, "Edge" and "Purge a tenant"): while the job
/// runs, a provider's resend of a hook whose dedupe record is still stored
/// gets 503 + Retry-After 30 like a new hook and a quarantined one (not 200
/// "duplicate": the purge deletes the hook it duplicates, and the provider
/// would never send it again); another tenant's hooks are accepted; after
/// the purge the resend is taken as a new hook. The same after a SIGKILL
/// mid-purge and a restart (the mark is read from the store). An answer
/// counts only when the job was still running after it arrived (the purge
/// may end first: then the round is tried again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_refuses_a_providers_resend_before_dedupe_also_after_a_restart() {
    let sink = Sink::ok().await;
    let mut relay = Relay::start(&purge_dedupe_config(&sink.url())).await;
    let api = Admin::new(&relay, None);
    let first = post_new(&relay, "evt_1").await;
    let dup = relay
        .post(
            "/hooks/d_orders",
            &[JSON, ("x-delivery", "evt_1")],
            body("evt_1", 0),
        )
        .await;
    assert_eq!(
        (
            dup.status,
            dup.body["duplicate"].as_bool(),
            dup.body["id"].as_str()
        ),
        (200, Some(true), Some(first.as_str())),
        "{dup:?}"
    );
    relay
        .post(
            "/hooks/k_orders",
            &[JSON, ("x-delivery", "evt_1")],
            body("evt_1", 0),
        )
        .await
        .id();

    // Live: the answers while the job runs.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no answer arrived while a purge ran"
        );
        let id = start_purge(&api).await;
        let resend = relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-delivery", "evt_1")],
                body("evt_1", 0),
            )
            .await;
        let new = relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-delivery", "evt_new")],
                body("evt_new", 0),
            )
            .await;
        let held = relay.post("/hooks/d_review", &[JSON], body("q", 0)).await;
        let keeper = relay
            .post(
                "/hooks/k_orders",
                &[JSON, ("x-delivery", "evt_2")],
                body("evt_2", 0),
            )
            .await;
        let during = api.job(id).await["state"] == "running";
        assert_eq!(keeper.status, 200, "another tenant's hook: {keeper:?}");
        let done = job_ended(&api, id).await;
        assert_eq!(done["state"], "done", "{done}");
        if during {
            assert_purge_refusal("a resend of a stored hook", &resend);
            assert_purge_refusal("a new hook", &new);
            assert_purge_refusal("a hook held in quarantine", &held);
            break;
        }
        // The purge ended first: the tenant has nothing; start again.
        post_new(&relay, "evt_1").await;
    }
    // After the purge: the provider's retry is a new hook.
    let after = post_new(&relay, "evt_1").await;
    assert_ne!(after, first);

    // Restart mid-purge: SIGKILL while the job runs, the store still has the
    // mark and the dedupe record; the restarted relay refuses the resend.
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no answer arrived while a resumed purge ran"
        );
        let id = start_purge(&api).await;
        relay.kill();
        let (marked, recorded) = {
            let kv = open_store(&relay);
            let marks = ankusa_queue::read_purges(&kv).expect("purges");
            let ord = marks.keys().next().copied();
            let recorded = ord.is_some_and(|o| {
                kv.scan(
                    Cf::Index,
                    &ankusa_keys::tenant_range(ankusa_keys::Family::Dedupe, o),
                    Direction::Forward,
                    10,
                )
                .expect("scan")
                .len()
                    == 1
            });
            (!marks.is_empty(), recorded)
        };
        relay.restart().await;
        let resend = relay
            .post(
                "/hooks/d_orders",
                &[JSON, ("x-delivery", "evt_1")],
                body("evt_1", 0),
            )
            .await;
        let during = api.job(id).await["state"] == "running";
        let done = job_ended(&api, id).await;
        assert_eq!(done["state"], "done", "{done}");
        if marked && recorded && during {
            assert_purge_refusal("a resend after a restart mid-purge", &resend);
            break;
        }
        if resend.status == 200 {
            continue; // taken after the purge ended: the tenant has evt_1 again
        }
        post_new(&relay, "evt_1").await;
    }
    stop(&mut relay).await;
    assert_clean(&open_store(&relay));
}

/// A replay waiting on its tenant's bounds and then stopped by a purge of
/// the tenant fails saying the tenant's name, and its phase says why it
/// stopped instead of "waiting ..."; a cancelled replay's phase says it was
/// cancelled. A round counts only when the replay failed (the purge may end
/// before the replay's next step: then it is tried again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_stopped_by_a_purge_names_the_tenant_and_its_phase_says_why() {
    let sink = Sink::start(|_| Reply::Hold).await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
tenants: [{{name: doomed, max_pending: 4000}}]
sources:
  - name: d_orders
    tenant: doomed
    sinks: [{sinks}]
",
            sinks = (0..8)
                .map(|i| format!(
                    "{{type: http, name: s{i}, url: '{url}', timeout_ms: 120000}}",
                    url = sink.url()
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let replay = async || -> u64 {
        // 2000 rows (8 per hook): half the bounds, so the replay waits; and
        // enough pages of the purge after its first one (rows, envelopes,
        // archive entries) that the replay's next look usually falls in it.
        for i in 0..250 {
            relay
                .post("/hooks/d_orders", &[JSON], body("r", i))
                .await
                .id();
        }
        let job = api
            .ok(
                "POST",
                "/v1/jobs",
                "/v1/jobs",
                Some(json!({ "kind": "replay", "filter": { "source": "d_orders", "since": 0 } })),
            )
            .await;
        let id = job["id"].as_u64().expect("job id");
        until(
            "the replay waiting on the tenant's bounds",
            WAIT,
            async || {
                let j = api.job(id).await;
                (j["state"] == "running"
                    && j["phase"]
                        .as_str()
                        .is_some_and(|p| p.starts_with("waiting")))
                .then_some(())
            },
        )
        .await;
        id
    };
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the replay never stepped while the purge ran"
        );
        let id = replay().await;
        let purge = start_purge(&api).await;
        let r = job_ended(&api, id).await;
        assert_eq!(job_ended(&api, purge).await["state"], "done");
        if r["state"] == "failed" {
            assert_eq!(r["error"], "tenant \"doomed\" is being purged", "{r}");
            assert_eq!(
                r["phase"], "stopped: tenant \"doomed\" is being purged",
                "{r}"
            );
            break;
        }
        assert_eq!(r["state"], "done", "{r}");
    }
    // Cancelled while waiting (the purge left the tenant empty).
    let id = replay().await;
    let c = api
        .ok(
            "POST",
            "/v1/jobs/{id}/cancel",
            &format!("/v1/jobs/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(
        (c["state"].as_str(), c["phase"].as_str()),
        (Some("cancelled"), Some("cancelled by an operator")),
        "{c}"
    );
    assert_eq!(api.job(id).await["phase"], "cancelled by an operator");
}
