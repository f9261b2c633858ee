//! `dead_letter: hold` through the relay (ADR 0004 section 8): a lane head
//! the receiver refuses for good is dead-lettered and keeps its key's later
//! hooks waiting while another key flows; the lane shows as held in the
//! tenant's counters, `/metrics` and `ankusa tenants`; a revive delivers it
//! first and then the rest in order, with their lane positions; a drop of
//! another held head lets its key go on without it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::admin::{Admin, cli};
use crate::relay::{Relay, config};
use crate::revive::index_of;
use crate::sink::{Reply, Sink, until};

const LONG: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lane_waits_for_its_dead_head_and_a_revive_delivers_it_first() {
    // Hooks 0 (key cust-9) and 10 (key cust-5) are refused with a 400 (a
    // permanent failure) while `refuse` is set; everything else is taken.
    let refuse = Arc::new(AtomicBool::new(true));
    let r = Arc::clone(&refuse);
    let sink = Sink::start(move |req| match index_of(req) {
        0 | 10 if r.load(Ordering::SeqCst) => Reply::Status(400),
        _ => Reply::Status(200),
    })
    .await;
    let mut relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 100000, open_ms: 10}}
tenants: [{{name: default}}]
sources:
  - name: orders
    tenant: default
    sinks:
      - {{type: http, name: web, url: '{url}', ordered: true, ordering_key: {{header: x-entity-id}}, dead_letter: hold}}
",
            url = sink.url()
        ),
    ))
    .await;
    let api = Admin::new(&relay, None);

    // Hook 0 dies as its lane's head; its key's hooks 1 and 2 come after.
    post(&relay, 0, "cust-9").await;
    until("hook 0 dead-lettered", LONG, async || {
        (api.tenant("default").await["counters"]["dead"] == 1).then_some(())
    })
    .await;
    post(&relay, 1, "cust-9").await;
    post(&relay, 2, "cust-9").await;
    // Another key flows past the held lane.
    post(&relay, 3, "cust-1").await;
    until("hook 3 of another key delivered", LONG, async || {
        sink.delivered()
            .iter()
            .any(|r| index_of(r) == 3)
            .then_some(())
    })
    .await;
    // Held: 1 and 2 are members behind the dead head, which ?H still names.
    let held = until("hooks 1 and 2 waiting as members", LONG, async || {
        let t = api.tenant("default").await;
        (t["counters"]["lane_members"] == 2).then_some(t)
    })
    .await;
    assert_eq!(
        (
            held["counters"]["lanes_held"].as_i64(),
            held["counters"]["lanes"].as_i64(),
            held["counters"]["dead"].as_i64(),
        ),
        (Some(1), Some(1), Some(1)),
        "{held}"
    );
    assert_eq!(relay.metrics().await["ankusa_dispatch_lanes_held"], 1.0);
    let dead = api.dead("").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["holds_lane"], true, "{dead:?}");
    let row = dead[0]["id"].as_str().expect("id").to_owned();
    assert!(
        dead[0]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("permanent")),
        "{dead:?}"
    );
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
            hook["deliveries"][0]["state"].as_str(),
            hook["deliveries"][0]["lane_position"].as_str()
        ),
        (Some("dead"), Some("held"))
    );
    // `ankusa tenants` shows the held lane.
    let admin = format!("http://{}", relay.admin);
    let (code, out, err) = cli(&["tenants", "--admin", &admin], None);
    assert_eq!(code, 0, "{err}");
    let header: Vec<&str> = out
        .lines()
        .next()
        .expect("header")
        .split_whitespace()
        .collect();
    let line: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("default"))
        .expect("the tenant's line")
        .split_whitespace()
        .collect();
    let held_at = header
        .iter()
        .position(|c| *c == "HELD")
        .expect("HELD column");
    assert_eq!(line[held_at], "1", "{out}");
    // `ankusa dlq list` marks the row its key waits for.
    let (code, out, err) = cli(&["dlq", "list", "--admin", &admin], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with(&row) && l.contains("(holds its lane) permanent")),
        "{out}"
    );
    // `ankusa sources` says the entry holds.
    let (code, out, err) = cli(&["sources", "--admin", &admin], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("header:x-entity-id (hold)"), "{out}");
    assert_eq!(
        sink.delivered().iter().map(index_of).collect::<Vec<_>>(),
        vec![3],
        "nothing of the held key was delivered"
    );
    // `store check` of the stopped store counts the held lane; a restart
    // keeps it held.
    relay.sigterm();
    assert!(relay.wait_exit(LONG).await.success());
    let (status, out) = crate::store::store_check(&relay.data_dir(), &[]);
    assert_eq!(status.code(), Some(0), "store check: {out}");
    assert!(
        out.contains("2 lane members), 1 busy lane (1 held), 1 dead,"),
        "{out}"
    );
    relay.restart().await;
    assert_eq!(
        api.tenant("default").await["counters"]["lanes_held"].as_i64(),
        Some(1)
    );

    // Revive: hook 0 goes first, then 1 and 2, with positions 1, 2, 3.
    refuse.store(false, Ordering::SeqCst);
    let revived = api
        .ok(
            "POST",
            "/v1/dead-letters/{id}/revive",
            &format!("/v1/dead-letters/{row}/revive"),
            None,
        )
        .await;
    assert_eq!(
        revived,
        json!({ "id": row, "revived": true, "state": "lane_head" })
    );
    let got = until("the held key delivered", LONG, async || {
        let d = sink.delivered();
        (d.len() >= 4).then_some(d)
    })
    .await;
    let key9: Vec<(u64, Option<String>)> = got
        .iter()
        .filter(|r| r.key().as_deref() == Some("cust-9"))
        .map(|r| (index_of(r), r.header("x-ankusa-lane-seq")))
        .collect();
    assert_eq!(
        key9,
        vec![
            (0, Some("1".into())),
            (1, Some("2".into())),
            (2, Some("3".into()))
        ]
    );
    until("the held lane released", LONG, async || {
        let t = api.tenant("default").await;
        (t["counters"]["lanes_held"] == 0 && t["counters"]["pending"] == 0).then_some(())
    })
    .await;

    // A drop: hook 10 (key cust-5) dies and holds its lane, 11 waits; the
    // drop lets 11 go on without it.
    refuse.store(true, Ordering::SeqCst);
    post(&relay, 10, "cust-5").await;
    until("hook 10 dead-lettered", LONG, async || {
        (api.tenant("default").await["counters"]["lanes_held"] == 1).then_some(())
    })
    .await;
    post(&relay, 11, "cust-5").await;
    until("hook 11 waiting as a member", LONG, async || {
        (api.tenant("default").await["counters"]["lane_members"] == 1).then_some(())
    })
    .await;
    let dead = api.dead("").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let row = dead[0]["id"].as_str().expect("id").to_owned();
    api.ok(
        "DELETE",
        "/v1/dead-letters/{id}",
        &format!("/v1/dead-letters/{row}"),
        None,
    )
    .await;
    until("hook 11 delivered after the drop", LONG, async || {
        sink.delivered()
            .iter()
            .any(|r| index_of(r) == 11)
            .then_some(())
    })
    .await;
    let t = until("the tenant drained", LONG, async || {
        let t = api.tenant("default").await;
        (t["counters"]["pending"] == 0).then_some(t)
    })
    .await;
    assert_eq!(
        (
            t["counters"]["lanes_held"].as_i64(),
            t["counters"]["lanes"].as_i64(),
            t["counters"]["dead"].as_i64()
        ),
        (Some(0), Some(0), Some(0)),
        "{t}"
    );
    assert!(
        !sink.delivered().iter().any(|r| index_of(r) == 10),
        "the dropped hook was never delivered"
    );
    assert!(
        relay.log().contains("lane held") && relay.log().contains(&format!("dead_letter={row}")),
        "each hold is logged with the id dlq revive takes: {}",
        relay.log()
    );
    relay.sigterm();
    assert!(relay.wait_exit(LONG).await.success());
    let (status, out) = crate::store::store_check(&relay.data_dir(), &[]);
    assert_eq!(status.code(), Some(0), "store check: {out}");
}

/// Posts hook `i` of ordering key `key` to source `orders`: its id.
async fn post(relay: &Relay, i: u64, key: &str) -> String {
    relay
        .post(
            "/hooks/orders",
            &[("content-type", "application/json"), ("x-entity-id", key)],
            format!("{{\"i\":{i}}}"),
        )
        .await
        .id()
}
