//! Dead letters through the admin API: a dead lane head found by every
//! filter and revived behind the lane's current head (ADR 0004 section 4.8),
//! a bulk revive job that survives a SIGKILL and revives each row once, and
//! dead letters of a sink entry removed from the configuration, which a
//! revive leaves where they are and a drop takes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::admin::{Admin, cli, two_sources};
use crate::relay::{Relay, client};
use crate::sink::{Reply, Sink, lane, until};

const LONG: Duration = Duration::from_secs(120);

pub(crate) fn index_of(r: &crate::sink::Req) -> u64 {
    r.json()["i"]
        .as_u64()
        .unwrap_or_else(|| panic!("request {} has no i", r.n))
}

/// ADR 0004 section 4.8 through the API: lane head 0 dead-lettered (410),
/// found by each filter (and by none that does not match), revived while hook
/// 1 is the lane's head with 2 and 3 waiting: it runs after 1 and before 2
/// and 3, delivered once; a second revive is a 409 that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lane_head_is_listed_by_every_filter_and_revived_behind_the_current_head() {
    let gone = Arc::new(AtomicBool::new(true));
    let g = Arc::clone(&gone);
    let sink = Sink::start(move |r| match index_of(r) {
        0 if g.swap(false, Ordering::SeqCst) => Reply::Status(410),
        1 => Reply::Hold,
        _ => Reply::Status(200),
    })
    .await;
    let relay = Relay::start(&two_sources(&sink, "memory", "")).await;
    let api = Admin::new(&relay, None);
    let post = |i: u64| {
        let relay = &relay;
        async move {
            relay
                .post(
                    "/hooks/orders",
                    &[
                        ("content-type", "application/json"),
                        ("x-entity-id", "cust-9"),
                    ],
                    format!("{{\"i\":{i}}}"),
                )
                .await
                .id()
        }
    };
    let id0 = post(0).await;
    until("hook 0 dead-lettered", LONG, async || {
        (api.tenant("default").await["counters"]["dead"] == 1).then_some(())
    })
    .await;
    let mut ids = vec![id0.clone()];
    for i in 1..4 {
        ids.push(post(i).await);
    }
    until(
        "hook 1 held at the sink as the lane's head",
        LONG,
        async || (sink.open(&lane("default", "orders", "cust-9")) == 1).then_some(()),
    )
    .await;

    // The dead letter, and the hook it belongs to.
    let all = api.dead("").await;
    assert_eq!(all.len(), 1, "{all:?}");
    let d = &all[0];
    let row = d["id"].as_str().expect("id").to_owned();
    assert_eq!(row, "default.1.0");
    assert_eq!(
        (
            d["tenant"].as_str(),
            d["source"].as_str(),
            d["sink"].as_str()
        ),
        (Some("default"), Some("orders"), Some("web"))
    );
    assert_eq!(d["idempotency_key"].as_str(), Some(id0.as_str()));
    assert_eq!(d["ordering_key"].as_str(), Some("cust-9"));
    assert!(
        d["reason"]
            .as_str()
            .expect("reason")
            .starts_with("sink gone"),
        "{d}"
    );
    let dead_at = d["dead_at_ms"].as_u64().expect("dead_at_ms");
    let hook = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{id0}"),
            None,
        )
        .await;
    assert_eq!(
        (hook["tenant"].as_str(), hook["seq"].as_u64()),
        (Some("default"), Some(1))
    );
    assert_eq!(hook["body_text"].as_str(), Some("{\"i\":0}"));
    assert_eq!(hook["deliveries"][0]["state"].as_str(), Some("dead"));
    assert_eq!(hook["deliveries"][0]["lane_position"], Value::Null);
    let by_seq = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/1",
            None,
        )
        .await;
    assert_eq!(by_seq, hook);
    let head = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/2",
            None,
        )
        .await;
    assert_eq!(
        (
            head["deliveries"][0]["state"].as_str(),
            head["deliveries"][0]["lane_position"].as_str()
        ),
        (Some("in_flight"), Some("head"))
    );
    let member = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/hooks/{seq}",
            "/v1/tenants/default/hooks/3",
            None,
        )
        .await;
    assert_eq!(
        member["deliveries"][0]["lane_position"].as_str(),
        Some("member")
    );

    // Each filter finds it; each that does not match finds nothing.
    let since = dead_at.to_string();
    let until_ms = (dead_at + 1).to_string();
    for (q, n) in [
        ("tenant=default".to_owned(), 1),
        ("tenant=other".to_owned(), 0),
        ("source=orders".to_owned(), 1),
        ("source=spare".to_owned(), 0),
        ("sink=web".to_owned(), 1),
        ("sink=backup".to_owned(), 0),
        ("reason=sink%20gone".to_owned(), 1),
        ("reason=permanent".to_owned(), 0),
        (format!("since={since}"), 1),
        (format!("since={until_ms}"), 0),
        (format!("until={until_ms}"), 1),
        (format!("until={since}"), 0),
        (
            format!(
                "since={since}&until={until_ms}&tenant=default&source=orders&sink=web&reason=sink"
            ),
            1,
        ),
    ] {
        let got = api.dead(&q).await;
        assert_eq!(got.len(), n, "filter {q}: {got:?}");
        if n == 1 {
            assert_eq!(got[0]["id"].as_str(), Some(row.as_str()), "filter {q}");
        }
    }
    let shown = api
        .ok(
            "GET",
            "/v1/dead-letters/{id}",
            &format!("/v1/dead-letters/{row}"),
            None,
        )
        .await;
    assert_eq!(shown, all[0]);

    // Revive: a member behind head 1.
    let r = api
        .ok(
            "POST",
            "/v1/dead-letters/{id}/revive",
            &format!("/v1/dead-letters/{row}/revive"),
            None,
        )
        .await;
    assert_eq!(
        r,
        json!({ "id": row, "revived": true, "state": "lane_member" })
    );
    let t = api.tenant("default").await;
    assert_eq!(
        (
            t["counters"]["dead"].as_i64(),
            t["counters"]["lane_members"].as_i64(),
            t["counters"]["pending"].as_i64()
        ),
        (Some(0), Some(3), Some(4)),
        "{t}"
    );
    // A second revive is refused and changes nothing.
    let (status, e) = api.revive(&row).await;
    assert_eq!(status, 409);
    assert_eq!(e["error"]["code"], "conflict");
    assert!(
        e["error"]["message"]
            .as_str()
            .expect("message")
            .contains("not in the dead-letter queue"),
        "{e}"
    );
    assert_eq!(api.tenant("default").await["counters"], t["counters"]);
    assert_eq!(
        sink.requests().len(),
        2,
        "nothing but 0 (410) and the held 1 reached the sink"
    );

    sink.release();
    let got = until("every hook delivered", LONG, async || {
        (sink.delivered().len() >= 4).then(|| sink.requests())
    })
    .await;
    let order: Vec<u64> = got.iter().map(index_of).collect();
    assert_eq!(order, vec![0, 1, 0, 2, 3], "arrival order at the sink");
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for r in sink.delivered() {
        *per_key.entry(r.id()).or_default() += 1;
    }
    assert_eq!(per_key.len(), 4);
    assert!(per_key.values().all(|n| *n == 1), "{per_key:?}");
    assert_eq!(per_key.get(&id0), Some(&1));
    until("the tenant drained", LONG, async || {
        (api.tenant("default").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let t = api.tenant("default").await;
    assert_eq!(
        (
            t["counters"]["dead"].as_i64(),
            t["counters"]["delivered_total"].as_i64(),
            t["counters"]["lanes"].as_i64()
        ),
        (Some(0), Some(4), Some(0))
    );
    assert_eq!(api.dead("").await.len(), 0);
}

/// 10,000 dead rows revived by one job in bounded steps; the relay is
/// SIGKILLed while the job runs and restarted: the job resumes from its
/// stored cursor and finishes; every row is delivered exactly once (the sink
/// holds every delivery until the job is done, so nothing was in flight at
/// the kill) and the store's invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_revive_job_survives_a_sigkill_and_revives_each_row_once() {
    const N: usize = 10_000;
    let dying = Arc::new(AtomicBool::new(true));
    let d = Arc::clone(&dying);
    let sink = Sink::start(move |_| {
        if d.load(Ordering::SeqCst) {
            Reply::Status(400)
        } else {
            Reply::Hold
        }
    })
    .await;
    // 64 calls at once per sink: 10,000 deliveries twice (the 400s, then the
    // revived ones) go faster; nothing here depends on it.
    let mut relay = Relay::start(&two_sources(
        &sink,
        "rocksdb",
        "dispatch: {sink_concurrency: 64}",
    ))
    .await;
    let api = Admin::new(&relay, None);
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = tokio::task::JoinSet::new();
    let url = relay.url("/hooks/spare");
    let http = client();
    for i in 0..N {
        let (sem, url, http) = (Arc::clone(&sem), url.clone(), http.clone());
        tasks.spawn(async move {
            let _p = sem.acquire().await.expect("permit");
            let a = crate::relay::post(
                &http,
                &url,
                &[("content-type", "application/json")],
                format!("{{\"i\":{i}}}").into_bytes(),
            )
            .await
            .expect("post");
            a.id()
        });
    }
    let mut ids = std::collections::HashSet::new();
    while let Some(id) = tasks.join_next().await {
        ids.insert(id.expect("task"));
    }
    assert_eq!(ids.len(), N);
    until(
        "every row dead-lettered (HTTP 400)",
        Duration::from_secs(600),
        async || {
            (api.tenant("other").await["counters"]["dead"].as_u64() == Some(N as u64)).then_some(())
        },
    )
    .await;
    dying.store(false, Ordering::SeqCst);

    let job = api.ok("POST", "/v1/jobs", "/v1/jobs", Some(json!({ "kind": "revive", "filter": { "tenant": "other", "reason": "permanent: HTTP 400" } }))).await;
    let id = job["id"].as_u64().expect("job id");
    assert_eq!(
        (job["state"].as_str(), job["total"].as_u64()),
        (Some("running"), Some(N as u64))
    );
    // SIGKILL once the first step is committed and the job is still running.
    let seen = until("the job's first step", LONG, async || {
        let j = api.job(id).await;
        (j["state"] == "running" && j["done"].as_u64().unwrap_or(0) > 0).then_some(j)
    })
    .await;
    relay.kill();
    assert!(seen["done"].as_u64().expect("done") < N as u64);
    relay.restart().await;
    assert!(
        relay.log().contains("resuming admin job"),
        "the restarted relay did not resume the job:\n{}",
        relay.log()
    );
    let done = until("the job done after the restart", LONG, async || {
        let j = api.job(id).await;
        (j["state"] != "running").then_some(j)
    })
    .await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(
        (done["done"].as_u64(), done["examined"].as_u64()),
        (Some(N as u64), Some(N as u64)),
        "{done}"
    );
    let t = api.tenant("other").await;
    assert_eq!(
        (
            t["counters"]["dead"].as_i64(),
            t["counters"]["pending"].as_i64()
        ),
        (Some(0), Some(N as i64)),
        "{t}"
    );

    sink.release();
    until(
        "every revived row delivered",
        Duration::from_secs(600),
        async || (sink.delivered().len() >= N).then_some(()),
    )
    .await;
    until("the tenant drained", LONG, async || {
        (api.tenant("other").await["counters"]["pending"] == 0).then_some(())
    })
    .await;
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for r in sink.delivered() {
        *per_key.entry(r.id()).or_default() += 1;
    }
    assert_eq!(per_key.len(), N);
    assert_eq!(
        per_key
            .keys()
            .cloned()
            .collect::<std::collections::HashSet<_>>(),
        ids
    );
    let twice: Vec<_> = per_key.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(
        api.tenant("other").await["counters"]["delivered_total"].as_u64(),
        Some(N as u64)
    );

    relay.sigterm();
    assert!(relay.wait_exit(LONG).await.success());
    let kv = ankusa_engine_rocksdb::RocksKv::open(relay.data_dir().join("store-rocksdb"))
        .expect("open the store");
    let violations =
        ankusa_queue::check_invariants(&ankusa_engine::Kv::snapshot(&kv)).expect("check");
    assert!(violations.is_empty(), "{violations:#?}");
}

fn removed_sink_config(ok: &Sink, refusing: Option<&Sink>) -> String {
    let mut sinks = format!("      - {{type: http, name: web, url: '{}'}}\n", ok.url());
    if let Some(r) = refusing {
        sinks.push_str(&format!(
            "      - {{type: http, name: boom, url: '{}'}}\n",
            r.url()
        ));
    }
    crate::relay::config(
        "rocksdb",
        &format!(
            "tenants: [{{name: default}}]\nsources:\n  - name: orders\n    tenant: default\n    sinks:\n{sinks}"
        ),
    )
}

/// Dead letters of a sink entry that is no longer configured would die again
/// at once: a single revive is refused (409) naming the way out, a revive job
/// revives nothing, counts them as skipped and says why (not "matched
/// nothing"), and a drop takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_a_removed_sink_are_not_revived_and_a_drop_takes_them() {
    let ok = Sink::ok().await;
    let refusing = Sink::start(|_| Reply::Status(400)).await;
    let mut relay = Relay::start(&removed_sink_config(&ok, Some(&refusing))).await;
    let api = Admin::new(&relay, None);
    for i in 0..2 {
        relay
            .post(
                "/hooks/orders",
                &[("content-type", "application/json")],
                format!("{{\"i\":{i}}}"),
            )
            .await;
    }
    let dead = until("both rows of boom dead-lettered", LONG, async || {
        let dead = api.dead("source=orders").await;
        (dead.len() == 2 && ok.delivered().len() == 2).then_some(dead)
    })
    .await;
    relay.rewrite_config(&removed_sink_config(&ok, None));
    api.ok("POST", "/v1/reload", "/v1/reload", None).await;

    let row = dead[0]["id"].as_str().expect("id").to_owned();
    let (status, e) = api.revive(&row).await;
    assert_eq!(status, 409, "{e}");
    let message = e["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("its sink entry is no longer in the configuration")
            && message.contains(&format!("`ankusa dlq drop {row} --yes`")),
        "{message}"
    );

    let admin = format!("http://{}", relay.admin);
    let (code, out, err) = cli(
        &[
            "dlq", "revive", "--tenant", "default", "--wait", "--admin", &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("revived nothing: the 2 it matched are dead letters of a source or sink entry no longer in the configuration"),
        "{err}"
    );
    assert!(!err.contains("matched nothing"), "{err}");
    assert_eq!(api.dead("source=orders").await.len(), 2);

    let (code, out, err) = cli(
        &[
            "dlq", "drop", "--source", "orders", "--yes", "--wait", "--admin", &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    until("the dead letters dropped", LONG, async || {
        api.dead("source=orders").await.is_empty().then_some(())
    })
    .await;
    // Each boom row was tried once, then never again.
    assert_eq!(refusing.request_count(), 2);
    assert_eq!(ok.delivered().len(), 2);
}
