//! Archive replay (docs/design.md section 5, "Replayer"): a time range
//! redelivered with its original idempotency keys, in lane order, once across
//! a SIGKILL; a replay stopped by a tenant purge says why.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use ankusa_engine::{Cf, Direction};
use ankusa_keys::Envelope;
use serde_json::{Value, json};

use crate::admin::{Admin, cli, validate};
use crate::keyed::{KEYS, assert_clean, body, by_key, label, open_store, stop, want};
use crate::purge::{job_ended, start_purge};
use crate::relay::{Relay, config};
use crate::sink::{Reply, Req, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

const JSON: (&str, &str) = ("content-type", "application/json");

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
