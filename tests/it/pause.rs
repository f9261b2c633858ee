//! Pause and resume: a paused sink or source commits what it accepts and
//! delivers nothing until resumed, then all in order per key; from the
//! configuration (and a restart without the pause) and through the admin API,
//! whose lists show the paused rows as held (docs/design.md section 5,
//! "Pause").

use std::time::Duration;

use serde_json::{Value, json};

use crate::admin::{Admin, cli, validate};
use crate::keyed::{KEYS, body, by_key, label, stop, want};
use crate::relay::{Relay, config};
use crate::sink::{Req, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

const LONG: Duration = Duration::from_secs(120);

const JSON: (&str, &str) = ("content-type", "application/json");

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
        want(0, 100),
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
    assert_eq!(by_key(&ledger), want(0, 100), "in order per key");
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

/// A sink entry paused in the configuration (docs/design.md section 5,
/// "Pause"): the tenant's other sink delivers, the paused sink's rows wait in
/// the held band, the hook view shows them `held` (a held lane head still its
/// lane's head), and the tenant's oldest due row is none of them; the
/// dispatch_paused gauge of the merged /metrics counts the entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sinks_rows_show_as_held_and_are_not_the_oldest_due() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
sources:
  - name: shop
    sinks:
      - {{type: http, name: ledger, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}, paused: true}}
      - {{type: http, name: audit, url: '{url}2'}}
",
            url = sink.url()
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            relay
                .post(
                    "/hooks/shop",
                    &[
                        ("content-type", "application/json"),
                        ("x-entity-id", "cus_a"),
                    ],
                    format!("{{\"i\":{i}}}"),
                )
                .await
                .id(),
        );
    }
    let tenant = api.ok("GET", "/v1/tenants", "/v1/tenants", None).await["items"][0]["name"]
        .as_str()
        .expect("tenant")
        .to_owned();
    // The audit rows are delivered; the ledger's lane head is held once the
    // pipeline has met it: then no live due row is left. (The receiver has a
    // delivery before the relay commits it, and an in-flight row is not due
    // either: wait for the audit rows' commits, pending down to the ledger's 3.)
    let t = until(
        "the audit sink delivered and the ledger head is held",
        LONG,
        async || {
            let t = api.tenant(&tenant).await;
            (sink.delivered().len() == 3
                && t["oldest_due_at_ms"].is_null()
                && t["counters"]["pending"] == 3
                && t["counters"]["in_flight"] == 0)
                .then_some(t)
        },
    )
    .await;
    assert_eq!(
        (
            t["counters"]["pending"].as_i64(),
            t["counters"]["lanes"].as_i64(),
            t["counters"]["lane_members"].as_i64()
        ),
        (Some(3), Some(1), Some(2)),
        "{t}"
    );
    assert!(t["oldest_due_age_ms"].is_null(), "{t}");
    assert!(
        sink.requests().iter().all(|r| r.path == "/in2"),
        "the paused ledger sink was called"
    );
    let head = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{}", ids[0]),
            None,
        )
        .await;
    let ledger = head["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["sink"] == "ledger")
        .expect("the ledger row")
        .clone();
    assert_eq!(
        (ledger["state"].as_str(), ledger["lane_position"].as_str()),
        (Some("held"), Some("head")),
        "{head}"
    );
    let member = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{}", ids[1]),
            None,
        )
        .await;
    let ledger = member["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["sink"] == "ledger")
        .expect("the ledger row")
        .clone();
    assert_eq!(
        (ledger["state"].as_str(), ledger["lane_position"].as_str()),
        (Some("lane_member"), Some("member")),
        "{member}"
    );
    assert_eq!(relay.metrics().await["ankusa_dispatch_paused"], 1.0);
}
