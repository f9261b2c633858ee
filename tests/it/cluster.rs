//! Cluster mode (docs/design.md section 11; README, "Running a cluster"):
//! real etcd members and real relays on loopback. Any node takes any
//! tenant's hooks (the owner commits, the others forward); a node's death
//! moves its tenants to the live nodes at the next epoch, behind the epoch
//! barrier, and every acknowledged hook is delivered, each key's in
//! acknowledgement order ([`crate::history`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ankusa_catalog::cluster::{Catalog, Snapshot};

use crate::etcd::Etcd;
use crate::history::History;
use crate::relay::{Relay, client, config, post};
use crate::sink::{Reply, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(120);

/// The tenants of every test: one source each (`/hooks/s<i>`), with an
/// ordered sink (`/o`) and an unordered one (`/u`).
const TENANTS: usize = 6;

/// A node's configuration: everything but `node_id` is the same on every
/// node (the listeners are placeholders the relay harness fills).
fn template(node_id: &str, etcd: &Etcd, sink: &Sink, lease_ttl_ms: u64) -> String {
    template_held(node_id, etcd, sink, lease_ttl_ms, 4_000)
}

/// [`template`] with the cluster's `hold_ms`.
fn template_held(
    node_id: &str,
    etcd: &Etcd,
    sink: &Sink,
    lease_ttl_ms: u64,
    hold_ms: u64,
) -> String {
    template_of(
        node_id,
        &format!(
            "etcd: {}, lease_ttl_ms: {lease_ttl_ms}, hold_ms: {hold_ms}",
            etcd.yaml_list()
        ),
        sink,
        TENANTS,
    )
}

/// A node's configuration: `cluster` is `node_id` and `cluster` (the rest
/// of the section), with `tenants` tenants `t<i>` and their sources.
fn template_of(node_id: &str, cluster: &str, sink: &Sink, tenants: usize) -> String {
    let url = sink.url();
    let mut rest = format!(
        "cluster: {{node_id: {node_id}, {cluster}}}\n\
         retry: {{base_ms: 20, max_ms: 200}}\n\
         tenants: [{}]\nsources:\n",
        (0..tenants)
            .map(|i| format!("{{name: t{i}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for i in 0..tenants {
        rest.push_str(&format!(
            "  - name: s{i}\n    tenant: t{i}\n    sinks:\n      \
             - {{type: http, name: o, url: '{url}/o', ordered: true, ordering_key: {{header: x-entity-id}}}}\n      \
             - {{type: http, name: u, url: '{url}/u'}}\n"
        ));
    }
    config("rocksdb", &rest)
}

/// The catalog of the test's cluster.
fn catalog(etcd: &Etcd) -> Catalog {
    Catalog::new(etcd.client(), "ankusa")
}

/// Waits until every tenant has a live owner; the catalog then.
async fn all_owned(etcd: &Etcd) -> Snapshot {
    let cat = catalog(etcd);
    until("every tenant owned by a live node", WAIT, async || {
        let snap = cat.snapshot().await.ok()?;
        (snap.tenants.len() == TENANTS && snap.tenants.keys().all(|t| snap.live_owner(t).is_some()))
            .then_some(snap)
    })
    .await
}

/// Starts the nodes `n1..=count` one after the other.
async fn nodes(count: usize, etcd: &Etcd, sink: &Sink, lease_ttl_ms: u64) -> Vec<Relay> {
    let mut out = Vec::new();
    for i in 1..=count {
        out.push(Relay::start(&template(&format!("n{i}"), etcd, sink, lease_ttl_ms)).await);
    }
    out
}

/// Which relay of `nodes` (`n<i+1>`) owns `tenant`.
fn owner_index(snap: &Snapshot, tenant: &str) -> usize {
    let (id, _) = snap.live_owner(tenant).expect("an owner");
    id.trim_start_matches('n').parse::<usize>().expect("n<i>") - 1
}

/// Any node takes any tenant's hooks: every hook posted to every node is answered 200 and
/// delivered once to each sink; the nodes that do not own a tenant forward
/// its hooks (their metrics count them) and commit none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_node_takes_any_tenants_hooks_and_the_owner_commits_them() {
    let etcd = Etcd::start(1).await;
    let sink = Sink::ok().await;
    let relays = nodes(3, &etcd, &sink, 3_000).await;
    // Which node owns which tenant depends on when each joined (the
    // controller gives a tenant to a node once and never moves it on its
    // own): the test reads it.
    let snap = all_owned(&etcd).await;
    let mut ids = std::collections::BTreeSet::new();
    for (n, r) in relays.iter().enumerate() {
        for t in 0..TENANTS {
            let key = format!("k{n}");
            let a = r
                .post(
                    &format!("/hooks/s{t}"),
                    &[("content-type", "application/json"), ("x-entity-id", &key)],
                    format!("{{\"node\":{n},\"tenant\":{t}}}"),
                )
                .await;
            ids.insert(a.id());
        }
    }
    assert_eq!(ids.len(), 3 * TENANTS);
    until("every hook delivered to both sinks", WAIT, async || {
        (sink.ids_at("/in/o") == ids && sink.ids_at("/in/u") == ids).then_some(())
    })
    .await;
    // Each node forwarded the hooks of the tenants it does not own.
    for (i, r) in relays.iter().enumerate() {
        let owned = snap
            .tenants
            .keys()
            .filter(|t| owner_index(&snap, t) == i)
            .count();
        assert_eq!(
            r.metric("ankusa_cluster_forwarded_total").await,
            (TENANTS - owned) as f64,
            "node n{}: {}",
            i + 1,
            r.log()
        );
    }
}

/// Posts hook `n` of `key` (JSON `{"key", "n"}`) for tenant `t<tenant>`
/// to the node at `url` and records it in `history` under the name
/// `<key>-<n>` (a hook committed whose answer was lost has no id the client
/// saw, and may be delivered all the same): acknowledged on a 200, refused
/// otherwise. Returns the transport error, if any.
async fn post_recorded(
    client: &reqwest::Client,
    url: &str,
    tenant: usize,
    key: &str,
    n: usize,
    history: &History,
) -> Result<(), reqwest::Error> {
    let id = format!("{key}-{n}");
    let body = format!("{{\"key\":\"{key}\",\"n\":{n}}}");
    let headers = [("content-type", "application/json"), ("x-entity-id", key)];
    let got = post(
        client,
        &format!("{url}/hooks/s{tenant}"),
        &headers,
        body.into_bytes(),
    )
    .await;
    match got {
        Ok(a) if a.status == 200 => history.ack(&id, Some(key)),
        Ok(other) => {
            eprintln!("{id} not acknowledged: {other:?}");
            history.refused(&id);
        }
        Err(e) => {
            eprintln!("{id} not acknowledged: {e}");
            history.refused(&id);
            return Err(e);
        }
    }
    Ok(())
}

/// Posts hooks for `tenant` (source `s<t>`) to `nodes` in turn, one key at
/// a time per task so each key's hooks are sent after the previous answer,
/// recording acks and refusals in `history`.
fn keyed_load(
    urls: Vec<String>,
    tenant: usize,
    keys: usize,
    stop: Arc<AtomicBool>,
    history: Arc<History>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..keys)
        .map(|k| {
            let (urls, stop, history) = (urls.clone(), Arc::clone(&stop), Arc::clone(&history));
            tokio::spawn(async move {
                let client = client();
                let key = format!("t{tenant}k{k}");
                let mut n = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let url = &urls[(n + k) % urls.len()];
                    let _ = post_recorded(&client, url, tenant, &key, n, &history).await;
                    n += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect()
}

/// The name a [`keyed_load`] hook has in the history: its key and number,
/// from its JSON body.
fn hook_name(r: &crate::sink::Req) -> String {
    let v = r.json();
    format!("{}-{}", v["key"].as_str().unwrap_or("?"), v["n"])
}

/// Records every delivery of `sink` into `history`, by path (`/in/o` is the
/// ordered sink, `/in/u` the unordered one).
fn record_deliveries(sink: &Sink, history: &History) {
    for r in sink.delivered() {
        let name = r.path.trim_start_matches("/in/");
        // The ordered sink's key is the lane's (`x-ankusa-ordering-key`).
        let key = if name == "o" { r.key() } else { None };
        history.delivered(name, &hook_name(&r), key.as_deref());
    }
}

/// Waits until every hook of `history` acknowledged is delivered to both
/// sinks; a failure names the missing ones and gives the nodes' logs.
async fn all_delivered(history: &History, sink: &Sink, relays: &[Relay]) {
    let acked = history.acked();
    let deadline = Instant::now() + WAIT;
    loop {
        let (o, u) = (names_at(sink, "/in/o"), names_at(sink, "/in/u"));
        let missing: Vec<&String> = acked
            .iter()
            .filter(|id| !o.contains(*id) || !u.contains(*id))
            .collect();
        if missing.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = relays.iter().map(Relay::log).collect();
            panic!(
                "{} acknowledged hooks not delivered to both sinks after {WAIT:?}: {:?}\n{}",
                missing.len(),
                missing.iter().take(20).collect::<Vec<_>>(),
                logs.join("\n-----\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The history names of the hooks `sink` delivered at `path`.
fn names_at(sink: &Sink, path: &str) -> std::collections::BTreeSet<String> {
    sink.delivered()
        .iter()
        .filter(|r| r.path == path)
        .map(hook_name)
        .collect()
}

/// A busy t0 whose owner is about to fail: the load of [`keyed_load`] on
/// four keys through the other nodes, 100 hooks acknowledged, then the
/// ordered sink slowed (30 ms a call) and 100 more, so the owner holds
/// undelivered hooks of its epoch when it fails.
struct Busy {
    snap: Snapshot,
    owner: usize,
    history: Arc<History>,
    stop: Arc<AtomicBool>,
    load: Vec<tokio::task::JoinHandle<()>>,
}

async fn busy_t0(etcd: &Etcd, sink: &Sink, relays: &[Relay]) -> Busy {
    let snap = all_owned(etcd).await;
    let owner = owner_index(&snap, "t0");
    let urls: Vec<String> = relays
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != owner)
        .map(|(_, r)| format!("http://{}", r.ingest))
        .collect();
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let load = keyed_load(urls, 0, 4, Arc::clone(&stop), Arc::clone(&history));
    acked_at_least(&history, 100).await;
    sink.set_script(|r| {
        if r.path == "/in/o" {
            Reply::Delay(Duration::from_millis(30), 200)
        } else {
            Reply::Status(200)
        }
    });
    acked_at_least(&history, 200).await;
    Busy {
        snap,
        owner,
        history,
        stop,
        load,
    }
}

/// Waits until `history` has `n` acknowledged hooks.
async fn acked_at_least(history: &History, n: usize) {
    until(&format!("{n} hooks acknowledged"), WAIT, async || {
        (history.acked().len() >= n).then_some(())
    })
    .await;
}

/// A node's death under load: its tenants go to the live nodes within the
/// lease's TTL and a second, hooks held meanwhile are answered once the new
/// owner has the tenant; the killed node comes back, drains what it held of
/// its old epoch (in lane order, before the barrier lifts), and every
/// acknowledged hook is delivered, each key's in acknowledgement order on
/// the ordered sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owners_tenants_move_and_its_old_epoch_drains_first() {
    let etcd = Etcd::start(1).await;
    let sink = Sink::ok().await;
    let mut relays = nodes(3, &etcd, &sink, 2_000).await;
    let Busy {
        snap,
        owner: victim,
        history,
        stop,
        load,
    } = busy_t0(&etcd, &sink, &relays).await;
    relays[victim].kill();
    let killed = Instant::now();
    let cat = catalog(&etcd);
    let moved = until(
        "t0 owned by a live node at the next epoch",
        WAIT,
        async || {
            let s = cat.snapshot().await.ok()?;
            let (t, _) = &s.tenants["t0"];
            (t.epoch > snap.tenants["t0"].0.epoch && s.live_owner("t0").is_some()).then_some(s)
        },
    )
    .await;
    let after = killed.elapsed();
    let (t0, _) = &moved.tenants["t0"];
    assert_eq!(
        t0.drains
            .iter()
            .map(|d| d.node.as_str())
            .collect::<Vec<_>>(),
        [format!("n{}", victim + 1)],
        "the killed node's epoch is the barrier"
    );
    // Hooks are taken again by the new owner.
    let mark = history.acked().len();
    until("hooks acknowledged after the failover", WAIT, async || {
        (history.acked().len() >= mark + 50).then_some(())
    })
    .await;
    eprintln!("failover: t0 moved {after:?} after the kill");
    sink.set_script(|_| Reply::Status(200));
    relays[victim].restart().await;
    until(
        "the barrier lifted (the old epoch drained)",
        WAIT,
        async || {
            let s = cat.snapshot().await.ok()?;
            s.tenants["t0"].0.drains.is_empty().then_some(())
        },
    )
    .await;
    // The restarted node delivered what it held of its old epoch of each
    // of its tenants and recorded them drained.
    let owned = snap
        .tenants
        .keys()
        .filter(|t| owner_index(&snap, t) == victim)
        .count();
    assert_eq!(
        relays[victim].metric("ankusa_cluster_drains_total").await,
        owned as f64,
        "{}",
        relays[victim].log()
    );
    stop.store(true, Ordering::SeqCst);
    for h in load {
        h.await.expect("load task");
    }
    all_delivered(&history, &sink, &relays).await;
    record_deliveries(&sink, &history);
    let summary = history.assert_kept(&["o"], &["o", "u"]);
    eprintln!("{summary}");
}

/// `ankusa cluster ...` with the configuration file of `relay`: its exit
/// code and output.
fn cluster_cli(relay: &Relay, args: &[&str]) -> (i32, String) {
    let config = relay.config_path();
    let mut all: Vec<&std::ffi::OsStr> = vec!["cluster".as_ref()];
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    all.push("--config".as_ref());
    all.push(config.as_os_str());
    let (status, out) = crate::relay::run_cli(&all, relay.dir.path());
    (status.code().unwrap_or(-1), out)
}

/// A node gone for good: its tenant moves behind a barrier that `cluster
/// status` shows, new hooks reach the unordered sink at once and wait on
/// the ordered one; `cluster forfeit` is refused without `--yes`, for an
/// epoch the tenant does not wait for, and for a live node's; given, it
/// says how many acknowledged hooks it gives up (the dead node's last
/// report) and the ordered sink gets the new hooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forfeit_lifts_the_barrier_of_a_node_gone_for_good_and_says_what_it_gives_up() {
    let etcd = Etcd::start(1).await;
    // The ordered sink holds every call: the owner's hooks stay pending.
    let sink = Sink::start(|r| {
        if r.path == "/in/o" {
            Reply::Hold
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let mut relays = nodes(2, &etcd, &sink, 2_000).await;
    let snap = all_owned(&etcd).await;
    let victim = owner_index(&snap, "t0");
    let other = 1 - victim;
    let victim_id = format!("n{}", victim + 1);
    for n in 0..10 {
        let key = format!("k{}", n % 2);
        relays[other]
            .post(
                "/hooks/s0",
                &[("content-type", "application/json"), ("x-entity-id", &key)],
                format!("{{\"n\":{n}}}"),
            )
            .await
            .id();
    }
    // The owner's report: 10 pending (2 in flight, 8 lane members).
    let cat = catalog(&etcd);
    until(
        "the owner reports 10 pending hooks of t0",
        WAIT,
        async || {
            let s = cat.snapshot().await.ok()?;
            let r = s.reports.get("t0")?.get(&victim_id)?;
            (r.pending == 10).then_some(())
        },
    )
    .await;
    relays[victim].kill();
    let epoch = snap.tenants["t0"].0.epoch;
    until("t0 moved behind the dead node's epoch", WAIT, async || {
        let s = cat.snapshot().await.ok()?;
        (s.live_owner("t0").is_some() && s.tenants["t0"].0.epoch == epoch + 1).then_some(())
    })
    .await;
    let (code, out) = cluster_cli(&relays[other], &["status", "--json"]);
    assert_eq!(code, 0, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).expect("status is JSON");
    // An operator's machine need not have the relay's secrets: a file with
    // an `env:` secret that is not set there gives the same status.
    let with_secret = relays[other].dir.path().join("with-secret.yaml");
    let text = std::fs::read_to_string(relays[other].config_path()).expect("config");
    let marked = text.replacen(
        "url: '",
        "headers: {x-token: 'env:ANKUSA_TEST_NEVER_SET'}, url: '",
        1,
    );
    assert_ne!(marked, text, "the file has an HTTP sink");
    std::fs::write(&with_secret, marked).expect("write");
    let (code, out) = crate::relay::run_cli(
        &[
            "cluster".as_ref(),
            "status".as_ref(),
            "--config".as_ref(),
            with_secret.as_os_str(),
        ],
        relays[other].dir.path(),
    );
    assert_eq!(code.code(), Some(0), "{out}");
    assert!(out.contains("TENANT"), "{out}");
    let t0 = status["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["name"] == "t0")
        .expect("t0")
        .clone();
    assert_eq!(t0["owner"], format!("n{}", other + 1));
    assert_eq!(t0["epoch"], epoch + 1);
    // A failover's drain holds every ordered lane (`lanes` null).
    assert_eq!(
        t0["barrier"],
        serde_json::json!([{"node": victim_id, "epoch": epoch, "lanes": null}])
    );
    assert_eq!(t0["barrier_pending"][format!("{victim_id}@{epoch}")], 10);
    let dead = status["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["id"] == victim_id.as_str())
        .expect("the dead node is listed");
    assert_eq!(dead["alive"], false);
    let live = status["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["id"] == format!("n{}", other + 1))
        .expect("the live node");
    assert_eq!(live["alive"], true);
    assert_eq!(live["config_current"], true);
    // The text form names the barrier too.
    let (code, text) = cluster_cli(&relays[other], &["status"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!(
            "{victim_id}@{epoch} (10 pending there; node down: it drains when back, or forfeit)"
        )),
        "{text}"
    );
    // New hooks: the unordered sink gets them, the ordered one waits.
    sink.set_script(|_| Reply::Status(200));
    let mut after = Vec::new();
    for n in 10..14 {
        let key = format!("k{}", n % 2);
        after.push(
            relays[other]
                .post(
                    "/hooks/s0",
                    &[("content-type", "application/json"), ("x-entity-id", &key)],
                    format!("{{\"n\":{n}}}"),
                )
                .await
                .id(),
        );
    }
    until("the unordered sink got the new hooks", WAIT, async || {
        let u = sink.ids_at("/in/u");
        after.iter().all(|id| u.contains(id)).then_some(())
    })
    .await;
    let o = sink.ids_at("/in/o");
    assert!(
        after.iter().all(|id| !o.contains(id)),
        "an ordered lane behind the barrier delivered"
    );
    // The new owner says what it holds back: two keys, each a head and a
    // member.
    until(
        "the barrier-held gauge counts the 4 ordered rows",
        WAIT,
        async || {
            let held = relays[other]
                .metric("ankusa_cluster_barrier_held_rows")
                .await;
            (held == 4.0).then_some(())
        },
    )
    .await;
    // Refusals: no --yes; an epoch the tenant does not wait for.
    let e = epoch.to_string();
    let (code, out) = cluster_cli(&relays[other], &["forfeit", "t0", "--epoch", &e]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("add --yes"), "{out}");
    let wrong = (epoch + 7).to_string();
    let (code, out) = cluster_cli(
        &relays[other],
        &["forfeit", "t0", "--epoch", &wrong, "--yes"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "tenant t0 has no undrained epoch {wrong} (its barrier: {victim_id}@{epoch})"
        )),
        "{out}"
    );
    let (code, out) = cluster_cli(&relays[other], &["forfeit", "t0", "--epoch", &e, "--yes"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "forfeited epoch {epoch} of tenant t0, held by node {victim_id}: 10 deliveries of acknowledged hooks not made (one per hook and sink"
        )),
        "{out}"
    );
    assert!(out.contains("the barrier is lifted"), "{out}");
    until("the ordered sink got the new hooks", WAIT, async || {
        let o = sink.ids_at("/in/o");
        after.iter().all(|id| o.contains(id)).then_some(())
    })
    .await;
    // A live node's epoch is never forfeited: kill nothing, ask for the
    // live owner's current epoch (not a drain): refused as not waited for.
    let cur = (epoch + 1).to_string();
    let (code, out) = cluster_cli(&relays[other], &["forfeit", "t0", "--epoch", &cur, "--yes"]);
    assert_eq!(code, 1, "{out}");
    // The node comes back after all: it delivers nothing of the forfeited
    // epoch, says so, and is never given t0 while it holds those rows.
    let before = sink.ids_at("/in/o").len();
    relays[victim].restart().await;
    until(
        "the returned node reports its stale rows",
        WAIT,
        async || {
            let s = cat.snapshot().await.ok()?;
            (s.stale_rows("t0", &victim_id) == 10).then_some(())
        },
    )
    .await;
    assert!(
        relays[victim]
            .log()
            .contains("from an epoch that was forfeited while it was away"),
        "{}",
        relays[victim].log()
    );
    let (code, out) = cluster_cli(&relays[other], &["move", "t0", "--to", &victim_id]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "node {victim_id} holds 10 undelivered rows of tenant t0 from an epoch that was forfeited"
        )),
        "{out}"
    );
    assert_eq!(
        sink.ids_at("/in/o").len(),
        before,
        "a forfeited hook was delivered"
    );
}

/// A zombie: the owner of a busy tenant paused (SIGSTOP) past its lease
/// while hooks arrive, through the other nodes and at its own listener. The
/// tenant moves; when the zombie resumes it has passed its deadline, so it
/// acknowledges nothing as the owner (what reached it is forwarded to the
/// new owner), joins again, and delivers what it held of the old epoch only
/// as the drain, before the barrier lifts: every key's order holds across
/// the two owners and nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_acknowledges_nothing_after_its_deadline_and_drains_in_order() {
    let etcd = Etcd::start(1).await;
    let sink = Sink::ok().await;
    let relays = nodes(3, &etcd, &sink, 2_000).await;
    let Busy {
        snap,
        owner: zombie,
        history,
        stop,
        load,
    } = busy_t0(&etcd, &sink, &relays).await;
    relays[zombie].signal("STOP");
    // A provider that reaches the zombie itself: its requests wait in the
    // paused process's accept queue (one key, one at a time).
    let direct = {
        let (url, history, stop) = (
            format!("http://{}/hooks/s0", relays[zombie].ingest),
            Arc::clone(&history),
            Arc::clone(&stop),
        );
        tokio::spawn(async move {
            let client = crate::relay::client();
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) && n < 20 {
                let id = format!("t0z-{n}");
                let body = format!("{{\"key\":\"t0z\",\"n\":{n}}}");
                let headers = [("content-type", "application/json"), ("x-entity-id", "t0z")];
                match post(&client, &url, &headers, body.into_bytes()).await {
                    Ok(a) if a.status == 200 => history.ack(&id, Some("t0z")),
                    Ok(_) | Err(_) => history.refused(&id),
                }
                n += 1;
            }
        })
    };
    let cat = catalog(&etcd);
    let epoch = snap.tenants["t0"].0.epoch;
    until("t0 moved off the paused owner", WAIT, async || {
        let s = cat.snapshot().await.ok()?;
        (s.tenants["t0"].0.epoch > epoch && s.live_owner("t0").is_some()).then_some(())
    })
    .await;
    let mark = history.acked().len();
    until("hooks acknowledged by the new owner", WAIT, async || {
        (history.acked().len() >= mark + 100).then_some(())
    })
    .await;
    sink.set_script(|_| Reply::Status(200));
    relays[zombie].signal("CONT");
    until(
        "the barrier lifted (the zombie drained its epoch)",
        WAIT,
        async || {
            let s = cat.snapshot().await.ok()?;
            s.tenants["t0"].0.drains.is_empty().then_some(())
        },
    )
    .await;
    let mark = history.acked().len();
    until("hooks acknowledged after the drain", WAIT, async || {
        (history.acked().len() >= mark + 50).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for h in load {
        h.await.expect("load task");
    }
    direct.await.expect("direct task");
    // The zombie owns nothing now and said so in its log.
    let s = cat.snapshot().await.expect("catalog");
    let zid = format!("n{}", zombie + 1);
    assert!(
        s.tenants
            .values()
            .all(|(t, _)| t.owner.as_deref() != Some(zid.as_str())),
        "the zombie owns a tenant again: {s:?}"
    );
    let log = relays[zombie].log();
    assert!(log.contains("lease expired in etcd"), "{log}");
    // What reached the zombie directly after it resumed was forwarded to
    // the new owner (and acknowledged by it), never committed as the owner.
    let direct_acked = history
        .acked()
        .iter()
        .filter(|id| id.starts_with("t0z-"))
        .count();
    assert!(
        direct_acked > 0,
        "no hook sent to the zombie was acknowledged"
    );
    assert!(
        relays[zombie]
            .metric("ankusa_cluster_forwarded_total")
            .await
            >= 1.0,
        "{}",
        relays[zombie].log()
    );
    all_delivered(&history, &sink, &relays).await;
    record_deliveries(&sink, &history);
    let summary = history.assert_kept(&["o"], &["o", "u"]);
    eprintln!("zombie: {direct_acked} hooks sent to it acknowledged; {summary}");
}

/// etcd's faults. One member of three killed (a follower) changes nothing:
/// no tenant moves, every hook is answered 200. All three paused: each node
/// serves until its deadline, then answers 503 with `Retry-After`, never a
/// 200 for a hook sent after the lease's TTL had passed since etcd stopped
/// (a node cannot know it still owns the tenant); when etcd returns the
/// nodes take hooks again, and every acknowledged hook is delivered, each
/// key's in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_losing_a_member_changes_nothing_and_losing_all_stops_acknowledgements() {
    let ttl = Duration::from_millis(3_000);
    let mut etcd = Etcd::start(3).await;
    let sink = Sink::ok().await;
    // A short hold: each refusal below waits for it.
    let mut relays = Vec::new();
    for i in 1..=3 {
        relays
            .push(Relay::start(&template_held(&format!("n{i}"), &etcd, &sink, 3_000, 1_000)).await);
    }
    let before = all_owned(&etcd).await;
    // A follower dies: hooks keep being acknowledged, nothing moves.
    let leader = until("an etcd leader", WAIT, async || etcd.leader().await).await;
    let follower = (leader + 1) % 3;
    etcd.kill(follower);
    let history = Arc::new(History::new());
    let client = client();
    for n in 0..60 {
        let r = &relays[n % 3];
        let t = n % TENANTS;
        let key = format!("t{t}k0");
        let id = format!("{key}-{n}");
        let a = post(
            &client,
            &format!("http://{}/hooks/s{t}", r.ingest),
            &[("content-type", "application/json"), ("x-entity-id", &key)],
            format!("{{\"key\":\"{key}\",\"n\":{n}}}").into_bytes(),
        )
        .await
        .expect("answered");
        assert_eq!(a.status, 200, "hook {n} with one etcd member down: {a:?}");
        history.ack(&id, Some(&key));
    }
    let cat = catalog(&etcd);
    let now = cat.snapshot().await.expect("catalog");
    for (name, (t, _)) in &before.tenants {
        assert_eq!(now.tenants[name].0.epoch, t.epoch, "tenant {name} moved");
    }
    etcd.restart(follower);
    etcd.wait_writable().await;
    // All three paused.
    for i in 0..3 {
        etcd.signal(i, "STOP");
    }
    let stopped = Instant::now();
    let mut n = 1_000usize;
    let mut refused_after_ttl = 0;
    // Until 12 hooks sent after the TTL have been answered.
    while refused_after_ttl < 12 {
        let sent = Instant::now();
        let r = &relays[n % 3];
        let t = n % TENANTS;
        let key = format!("t{t}k0");
        let id = format!("{key}-{n}");
        let got = post(
            &client,
            &format!("http://{}/hooks/s{t}", r.ingest),
            &[("content-type", "application/json"), ("x-entity-id", &key)],
            format!("{{\"key\":\"{key}\",\"n\":{n}}}").into_bytes(),
        )
        .await;
        let after_ttl = sent.duration_since(stopped) > ttl;
        match got {
            Ok(a) if a.status == 200 => {
                assert!(
                    !after_ttl,
                    "hook {n} sent {:?} after etcd stopped (TTL {ttl:?}) was acknowledged",
                    sent.duration_since(stopped)
                );
                history.ack(&id, Some(&key));
            }
            Ok(a) => {
                history.refused(&id);
                if after_ttl {
                    assert_eq!(a.status, 503, "{a:?}");
                    assert!(a.retry_after.is_some(), "503 without Retry-After: {a:?}");
                    refused_after_ttl += 1;
                }
            }
            Err(e) => panic!("hook {n}: a live node did not answer: {e}"),
        }
        n += 1;
    }
    // Past their deadlines the nodes are not ready: a load balancer sends
    // providers elsewhere (or answers 503 itself).
    for r in &relays {
        let (status, body) = r.readyz().await.expect("/readyz answers");
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("cluster lease"), "{body}");
    }
    for i in 0..3 {
        etcd.signal(i, "CONT");
    }
    // Back: every tenant takes hooks again.
    for t in 0..TENANTS {
        let key = format!("t{t}k0");
        let acked = until(
            "a hook acknowledged after etcd returned",
            WAIT,
            async || {
                n += 1;
                let id = format!("{key}-{n}");
                let a = post(
                    &client,
                    &format!("http://{}/hooks/s{t}", relays[n % 3].ingest),
                    &[("content-type", "application/json"), ("x-entity-id", &key)],
                    format!("{{\"key\":\"{key}\",\"n\":{n}}}").into_bytes(),
                )
                .await
                .ok()?;
                if a.status == 200 {
                    Some(id)
                } else {
                    history.refused(&id);
                    None
                }
            },
        )
        .await;
        history.ack(&acked, Some(&key));
    }
    for r in &relays {
        until("the node ready again", WAIT, async || {
            (r.readyz().await?.0 == 200).then_some(())
        })
        .await;
    }
    all_delivered(&history, &sink, &relays).await;
    record_deliveries(&sink, &history);
    history.assert_kept(&["o"], &["o", "u"]);
}

/// The `ankusa cluster status --json` of the cluster `relay` is in.
fn status_json(relay: &Relay) -> serde_json::Value {
    let (code, out) = cluster_cli(relay, &["status", "--json"]);
    assert_eq!(code, 0, "{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("status is not JSON ({e}): {out}"))
}

/// Whether node `id` runs the cluster's configuration, by `status`.
fn config_current(status: &serde_json::Value, id: &str) -> Option<bool> {
    status["nodes"].as_array()?.iter().find(|n| n["id"] == id)?["config_current"].as_bool()
}

/// A reload reaches the cluster one node at a time: the first node to
/// reload a new file (a seventh tenant and its source) validates and
/// publishes it, the catalog numbers the new tenant once for every node and
/// gives it to a node on the new file, and `cluster status` shows the node
/// still on the old one until it reloads the same file. A reload that
/// changes the `cluster` section is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reaches_every_node_and_new_names_are_numbered_once() {
    let etcd = Etcd::start(1).await;
    let sink = Sink::ok().await;
    let mut relays = nodes(2, &etcd, &sink, 3_000).await;
    let before = all_owned(&etcd).await;
    let cluster = format!(
        "etcd: {}, lease_ttl_ms: 3000, hold_ms: 4000",
        etcd.yaml_list()
    );
    relays[0].rewrite_config(&template_of("n1", &cluster, &sink, TENANTS + 1));
    relays[0].sighup();
    let cat = catalog(&etcd);
    let snap = until(
        "the new configuration published and t6 owned",
        WAIT,
        async || {
            let s = cat.snapshot().await.ok()?;
            let changed = s.config.as_ref()?.hash != before.config.as_ref()?.hash;
            (changed && s.live_owner("t6").is_some()).then_some(s)
        },
    )
    .await;
    // t6 went to n1, the node on the cluster's configuration, numbered 7.
    assert_eq!(snap.live_owner("t6").map(|(id, _)| id), Some("n1"));
    assert_eq!(snap.tenants["t6"].0.ord, 7);
    let status = status_json(&relays[0]);
    assert_eq!(config_current(&status, "n1"), Some(true), "{status:#}");
    assert_eq!(config_current(&status, "n2"), Some(false), "{status:#}");
    let hook = |n: usize| format!("{{\"n\":{n}}}");
    let headers = [("content-type", "application/json"), ("x-entity-id", "k")];
    let first = relays[0].post("/hooks/s6", &headers, hook(1)).await.id();
    // n2 routes by its own file, which has no s6 yet.
    assert_eq!(
        relays[1].post("/hooks/s6", &headers, hook(2)).await.status,
        404
    );
    relays[1].rewrite_config(&template_of("n2", &cluster, &sink, TENANTS + 1));
    relays[1].sighup();
    until("n2 on the cluster's configuration", WAIT, async || {
        config_current(&status_json(&relays[0]), "n2").filter(|c| *c)
    })
    .await;
    let second = relays[1].post("/hooks/s6", &headers, hook(3)).await.id();
    until("both hooks of t6 delivered in order", WAIT, async || {
        let o: Vec<String> = sink
            .delivered()
            .iter()
            .filter(|r| r.path == "/in/o")
            .map(crate::sink::Req::id)
            .collect();
        (o == [first.clone(), second.clone()]).then_some(())
    })
    .await;
    // The cluster section cannot change on a running node.
    let changed = format!(
        "etcd: {}, lease_ttl_ms: 4000, hold_ms: 4000",
        etcd.yaml_list()
    );
    relays[1].rewrite_config(&template_of("n2", &changed, &sink, TENANTS + 1));
    relays[1].sighup();
    until("the refused reload logged", WAIT, async || {
        relays[1]
            .log()
            .contains("cluster: cannot change while the relay runs")
            .then_some(())
    })
    .await;
}

/// `ankusa serve` of `template` in a directory of its own, on free ports,
/// which must exit without serving: its exit code and output.
fn refused_start(template: &str) -> (i32, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .to_string()
    };
    let text = template
        .replace("{INGEST}", &port())
        .replace("{ADMIN}", &port())
        .replace("{DATA}", &dir.path().join("data").display().to_string())
        .replace("{DIR}", &dir.path().display().to_string());
    let file = dir.path().join("node.yaml");
    std::fs::write(&file, text).expect("write the config");
    let (status, out) = crate::relay::run_cli(
        &["serve".as_ref(), "--config".as_ref(), file.as_os_str()],
        dir.path(),
    );
    (status.code().unwrap_or(-1), out)
}

/// A node whose file differs from the cluster's is refused at start,
/// naming the parts that differ; one with a live node's id is refused
/// naming that node's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_file_or_a_taken_id_is_refused_by_name() {
    let etcd = Etcd::start(1).await;
    let sink = Sink::ok().await;
    let relays = nodes(1, &etcd, &sink, 3_000).await;
    let cluster = format!(
        "etcd: {}, lease_ttl_ms: 3000, hold_ms: 4000",
        etcd.yaml_list()
    );
    // Another file: a seventh tenant and source.
    let (status, log) = refused_start(&template_of("n2", &cluster, &sink, TENANTS + 1));
    assert_eq!(status, 1, "{log}");
    assert!(
        log.contains("this node's configuration differs from the cluster's in sources.s6, tenants.t6: every section but node and listeners must be the same on every node"),
        "{log}"
    );
    // n1's id while n1 lives: refused after waiting for the record to go.
    let (status, log) = refused_start(&template("n1", &etcd, &sink, 3_000));
    assert_eq!(status, 1, "{log}");
    assert!(
        log.contains(&format!(
            "node_id n1 is in use by a live node at {}: each node needs its own node_id",
            relays[0].ingest
        )),
        "{log}"
    );
}

/// Posts `count` hooks of tenant `t<tenant>` to `url`, over `keys` keys
/// (`<prefix><k>`), from 32 tasks; each key's hooks are sent one after the
/// other (a key belongs to one task), recorded in `history`.
async fn backlog(
    url: &str,
    tenant: usize,
    prefix: &str,
    count: usize,
    keys: usize,
    history: &Arc<History>,
) {
    let tasks: Vec<_> = (0..32)
        .map(|task| {
            let (url, prefix, history) = (url.to_owned(), prefix.to_owned(), Arc::clone(history));
            tokio::spawn(async move {
                let client = client();
                // Key `i % keys` belongs to task `(i % keys) % 32` alone.
                for i in (0..count).filter(|i| (i % keys) % 32 == task) {
                    let key = format!("{prefix}{}", i % keys);
                    let _ = post_recorded(&client, &url, tenant, &key, i, &history).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("backlog task");
    }
}

/// A planned move of a tenant with a backlog (10,000 pending hooks over
/// 1,000 keys with `ANKUSA_CLUSTER_SOAK=1`, else 2,000 over 200), under
/// load, and back: the owner fences the tenant (hooks held, not refused),
/// the tenant flips to the target, the old owner delivers its backlog in
/// place before the target's lanes of those keys go on, while keys with no
/// pending row at the fence are delivered by the target at once; nothing
/// lost, every key in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_move_with_a_backlog_loses_nothing_and_keeps_order() {
    let soak = std::env::var_os("ANKUSA_CLUSTER_SOAK").is_some();
    let (count, keys) = if soak { (10_000, 1_000) } else { (2_000, 200) };
    let etcd = Etcd::start(1).await;
    // The ordered sink holds every call of a backlog key (`b...`) until
    // released: the backlog stays, and so does the old owner's drain.
    let sink = Sink::start(|r| {
        if r.path == "/in/o" && r.key().is_some_and(|k| k.starts_with('b')) {
            Reply::Hold
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relays = nodes(2, &etcd, &sink, 3_000).await;
    let snap = all_owned(&etcd).await;
    let from = owner_index(&snap, "t0");
    let to = 1 - from;
    let (from_id, to_id) = (format!("n{}", from + 1), format!("n{}", to + 1));
    let history = Arc::new(History::new());
    backlog(
        &format!("http://{}", relays[to].ingest),
        0,
        "b",
        count,
        keys,
        &history,
    )
    .await;
    assert_eq!(
        history.acked().len(),
        count,
        "every backlog hook acknowledged"
    );
    // Load on other keys through both nodes while the tenant moves.
    let urls: Vec<String> = relays
        .iter()
        .map(|r| format!("http://{}", r.ingest))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let load = keyed_load(urls, 0, 4, Arc::clone(&stop), Arc::clone(&history));
    let (code, out) = cluster_cli(&relays[0], &["move", "t0", "--to", &to_id]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("tenant t0 is on {to_id}")), "{out}");
    let cat = catalog(&etcd);
    let moved = cat.snapshot().await.expect("catalog");
    assert_eq!(
        moved.tenants["t0"]
            .0
            .drains
            .iter()
            .map(|d| d.node.as_str())
            .collect::<Vec<_>>(),
        [from_id.as_str()],
        "the old owner's epoch is the barrier"
    );
    // The drain lists the lanes the old owner held at the fence: every
    // backlog key's (one ordered sink), and only a few load keys' besides.
    let listed = moved.tenants["t0"].0.drains[0]
        .lanes
        .as_ref()
        .map_or(usize::MAX, Vec::len);
    assert!(
        (keys..=keys + 4).contains(&listed),
        "the drain lists {listed} lanes, the backlog has {keys} keys"
    );
    let status = status_json(&relays[0]);
    let t0 = status["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["name"] == "t0")
        .expect("t0")
        .clone();
    assert_eq!(
        t0["barrier"][0]["lanes"].as_u64(),
        Some(listed as u64),
        "{t0}"
    );
    // Keys with no pending row at the fence are not held: their hooks,
    // sent through both nodes, are delivered by the target while the old
    // owner's drain is still in place (its backlog is held by the sink).
    let client = client();
    let mut acked_at = std::collections::HashMap::new();
    for n in 0..60 {
        let key = format!("f{}", n % 20);
        let url = format!("http://{}", relays[n % 2].ingest);
        post_recorded(&client, &url, 0, &key, n, &history)
            .await
            .expect("a fresh key's hook");
        acked_at.insert(format!("{key}-{n}"), Instant::now());
    }
    assert_eq!(
        history
            .acked()
            .iter()
            .filter(|id| id.starts_with('f'))
            .count(),
        60,
        "every fresh key's hook acknowledged"
    );
    until(
        "the fresh keys' 60 hooks delivered to the ordered sink behind the barrier",
        WAIT,
        async || {
            let got = sink
                .delivered()
                .into_iter()
                .filter(|r| r.path == "/in/o" && r.key().is_some_and(|k| k.starts_with('f')))
                .count();
            (got >= 60).then_some(())
        },
    )
    .await;
    let barrier = cat.snapshot().await.expect("catalog").tenants["t0"]
        .0
        .drains
        .len();
    assert_eq!(barrier, 1, "the old owner's drain is still in place");
    let mut delays: Vec<Duration> = sink
        .delivered()
        .into_iter()
        .filter(|r| r.path == "/in/o" && r.key().is_some_and(|k| k.starts_with('f')))
        .filter_map(|r| Some(r.at.saturating_duration_since(*acked_at.get(&hook_name(&r))?)))
        .collect();
    delays.sort();
    eprintln!(
        "move: fresh keys delivered behind the barrier, acknowledgement to delivery: median {:?}, max {:?}",
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
    // The move back is refused while the old owner's epoch is undrained:
    // its older hooks would have to go out after the target's newer ones.
    let (code, out) = cluster_cli(&relays[0], &["move", "t0", "--to", &from_id]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "node {from_id} cannot own tenant t0 until the tenant's earlier epochs are drained"
        )),
        "{out}"
    );
    sink.release();
    until(
        "the old owner drained its backlog (the barrier lifted)",
        WAIT,
        async || {
            let s = cat.snapshot().await.ok()?;
            s.tenants["t0"].0.drains.is_empty().then_some(())
        },
    )
    .await;
    let (code, out) = cluster_cli(&relays[0], &["move", "t0", "--to", &from_id, "--wait"]);
    assert_eq!(code, 0, "{out}");
    let mark = history.acked().len();
    until("hooks acknowledged after the moves", WAIT, async || {
        (history.acked().len() >= mark + 50).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for h in load {
        h.await.expect("load task");
    }
    all_delivered(&history, &sink, &relays).await;
    record_deliveries(&sink, &history);
    let summary = history.assert_kept(&["o"], &["o", "u"]);
    eprintln!("move: {summary}");
    if std::env::var_os("DUMP").is_some() {
        for r in &relays {
            eprintln!("=====\n{}", r.log());
        }
    }
    // Held, never refused: the load saw no refusal.
    assert_eq!(summary.refused, 0, "{summary}");
}

/// HAProxy (Debian's `haproxy`) in front of the nodes, as
/// deploy/cluster/haproxy.cfg has it: balanced over the ingest listeners,
/// each checked on its admin `/readyz` (a drained node answers 503).
struct Haproxy {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    async fn start(relays: &[Relay]) -> Haproxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let mut cfg = format!(
            "global\n  maxconn 2000\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n  \
             retries 3\n  option redispatch\n  retry-on conn-failure empty-response\n\
             frontend ingest\n  bind {addr}\n  default_backend relays\n\
             backend relays\n  balance roundrobin\n  option httpchk GET /readyz\n  \
             default-server inter 200ms fall 1 rise 1\n"
        );
        for (i, r) in relays.iter().enumerate() {
            cfg.push_str(&format!(
                "  server n{} {} check port {}\n",
                i + 1,
                r.ingest,
                r.admin.port()
            ));
        }
        let file = dir.path().join("haproxy.cfg");
        std::fs::write(&file, cfg).expect("write haproxy.cfg");
        let child = std::process::Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("haproxy (Debian's haproxy; `bash .ci/run` installs it)");
        let h = Haproxy {
            child,
            addr,
            _dir: dir,
        };
        let client = client();
        until("HAProxy answers", WAIT, async || {
            client
                .get(format!("http://{}/hooks/none", h.addr))
                .send()
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        h
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A rolling upgrade behind HAProxy: each of the three nodes in turn is
/// drained (its tenants moved off, its `/readyz` 503 so HAProxy sends it
/// nothing), stopped, started again and undrained, while hooks of every
/// tenant arrive through HAProxy: none refused, none lost, every key in
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_behind_haproxy_refuses_nothing_and_loses_nothing() {
    let etcd = Etcd::start(1).await;
    let sink = Sink::ok().await;
    let mut relays = nodes(3, &etcd, &sink, 3_000).await;
    all_owned(&etcd).await;
    let proxy = Haproxy::start(&relays).await;
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let url = vec![format!("http://{}", proxy.addr)];
    let mut load = Vec::new();
    for t in 0..TENANTS {
        load.extend(keyed_load(
            url.clone(),
            t,
            2,
            Arc::clone(&stop),
            Arc::clone(&history),
        ));
    }
    until("hooks acknowledged through HAProxy", WAIT, async || {
        (history.acked().len() >= 100).then_some(())
    })
    .await;
    for i in 0..3 {
        let id = format!("n{}", i + 1);
        let ctl = (i + 1) % 3;
        let (code, out) = cluster_cli(&relays[ctl], &["drain", &id, "--wait"]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains(&format!("node {id} owns no tenant")), "{out}");
        until("the drained node's /readyz answers 503", WAIT, async || {
            relays[i]
                .readyz()
                .await
                .filter(|(s, _)| *s == 503)
                .map(|_| ())
        })
        .await;
        // HAProxy has seen it (its check every 200 ms): a few more hooks.
        let mark = history.acked().len();
        until("hooks acknowledged while drained", WAIT, async || {
            (history.acked().len() >= mark + 30).then_some(())
        })
        .await;
        relays[i].sigterm();
        let status = relays[i].wait_exit(WAIT).await;
        assert!(status.success(), "{status:?}\n{}", relays[i].log());
        relays[i].spawn_detached();
        until("the restarted node joined", WAIT, async || {
            relays[i].log().contains("joined the cluster").then_some(())
        })
        .await;
        let (code, out) = cluster_cli(&relays[ctl], &["undrain", &id]);
        assert_eq!(code, 0, "{out}");
        // Twice, or a node that is not drained: refused, nothing changed.
        let (code, out) = cluster_cli(&relays[ctl], &["undrain", &id]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains(&format!("node {id} is not drained")), "{out}");
        until("the node ready again", WAIT, async || {
            relays[i]
                .readyz()
                .await
                .filter(|(s, _)| *s == 200)
                .map(|_| ())
        })
        .await;
        let mark = history.acked().len();
        until("hooks acknowledged after the restart", WAIT, async || {
            (history.acked().len() >= mark + 30).then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::SeqCst);
    for h in load {
        h.await.expect("load task");
    }
    all_delivered(&history, &sink, &relays).await;
    record_deliveries(&sink, &history);
    let summary = history.assert_kept(&["o"], &["o", "u"]);
    eprintln!("rolling: {summary}");
    assert_eq!(summary.refused, 0, "{summary}");
}

/// Posts hooks of tenant `t<tenant>` over `keys` keys to the nodes in
/// `live` (a list the test changes as it kills and restarts them), one key
/// per task, each key's next hook after the previous answer; counts a
/// connection refused by a node in the list when the request was sent.
fn live_load(
    live: Arc<std::sync::Mutex<Vec<String>>>,
    tenant: usize,
    keys: usize,
    stop: Arc<AtomicBool>,
    history: Arc<History>,
    refused: Arc<std::sync::atomic::AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..keys)
        .map(|k| {
            let (live, stop, history, refused) = (
                Arc::clone(&live),
                Arc::clone(&stop),
                Arc::clone(&history),
                Arc::clone(&refused),
            );
            tokio::spawn(async move {
                let client = client();
                let key = format!("t{tenant}k{k}");
                let mut n = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let url = {
                        let l = live.lock().expect("lock");
                        l[(n + k) % l.len()].clone()
                    };
                    if let Err(e) = post_recorded(&client, &url, tenant, &key, n, &history).await
                        && e.is_connect()
                        && live.lock().expect("lock").contains(&url)
                    {
                        eprintln!("{key}-{n}: a live node refused the connection: {e}");
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                    n += 1;
                    // Paced so the ordered sink's lanes (one call at a time
                    // per key, a failure in ten retried with backoff) keep
                    // up: a backlog that grows round after round would make
                    // each drain longer than the last.
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            })
        })
        .collect()
}

/// The kill test: three nodes, six tenants, an ordered and an unordered
/// sink whose receiver fails one request in ten; the owner of the busy
/// tenant t0 is SIGKILLed five times under load (twenty with
/// `ANKUSA_CLUSTER_SOAK=1`) and comes back each time. Every acknowledged
/// hook is delivered, each key's in acknowledgement order (a duplicate only
/// the lane's latest head); t0 is answered again within the lease TTL and
/// 2 s of each kill; no live node refuses a connection; `ankusa store
/// check` is clean on every node at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_kills_of_a_busy_owner_lose_nothing_and_reorder_nothing() {
    let rounds = if std::env::var_os("ANKUSA_CLUSTER_SOAK").is_some() {
        20
    } else {
        5
    };
    let ttl = Duration::from_millis(2_000);
    let etcd = Etcd::start(1).await;
    // One request in ten fails (500): retried, in order on the ordered sink.
    let sink = Sink::start(|r| {
        if r.n % 10 == 3 {
            Reply::Status(500)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let mut relays = nodes(3, &etcd, &sink, 2_000).await;
    all_owned(&etcd).await;
    let urls: Vec<String> = relays
        .iter()
        .map(|r| format!("http://{}", r.ingest))
        .collect();
    let live = Arc::new(std::sync::Mutex::new(urls.clone()));
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut load = live_load(
        Arc::clone(&live),
        0,
        4,
        Arc::clone(&stop),
        Arc::clone(&history),
        Arc::clone(&refused),
    );
    for t in 1..TENANTS {
        load.extend(live_load(
            Arc::clone(&live),
            t,
            1,
            Arc::clone(&stop),
            Arc::clone(&history),
            Arc::clone(&refused),
        ));
    }
    let cat = catalog(&etcd);
    let mut failovers = Vec::new();
    for round in 0..rounds {
        let mark = history.acked().len();
        until("hooks acknowledged before the kill", WAIT, async || {
            (history.acked().len() >= mark + 60).then_some(())
        })
        .await;
        let mut polls = 0u32;
        let snap = until("t0 owned and no barrier", WAIT, async || {
            let s = cat.snapshot().await.ok()?;
            polls += 1;
            if polls.is_multiple_of(1000) {
                eprintln!(
                    "round {round}: still waiting: tenants {:?}, live nodes {:?}, reports {:?}",
                    s.tenants,
                    s.nodes.keys().collect::<Vec<_>>(),
                    s.reports
                );
            }
            (s.live_owner("t0").is_some() && s.tenants.values().all(|(t, _)| t.drains.is_empty()))
                .then_some(s)
        })
        .await;
        let victim = owner_index(&snap, "t0");
        let epoch = snap.tenants["t0"].0.epoch;
        live.lock().expect("lock").retain(|u| *u != urls[victim]);
        relays[victim].kill();
        let killed = Instant::now();
        // t0 answered again: a hook of t0 acknowledged after the kill by
        // the new owner (held meanwhile, not refused).
        until("t0 at the next epoch", WAIT, async || {
            let s = cat.snapshot().await.ok()?;
            (s.tenants["t0"].0.epoch > epoch && s.live_owner("t0").is_some()).then_some(())
        })
        .await;
        let mark = history
            .acked()
            .iter()
            .filter(|id| id.starts_with("t0k"))
            .count();
        until(
            "a hook of t0 acknowledged after the kill",
            WAIT,
            async || {
                (history
                    .acked()
                    .iter()
                    .filter(|id| id.starts_with("t0k"))
                    .count()
                    > mark)
                    .then_some(())
            },
        )
        .await;
        let answered = killed.elapsed();
        failovers.push(answered);
        assert!(
            answered < ttl + Duration::from_secs(2),
            "round {round}: t0 answered again {answered:?} after the kill (lease TTL {ttl:?} + 2 s)"
        );
        relays[victim].restart().await;
        live.lock().expect("lock").push(urls[victim].clone());
    }
    until("every barrier lifted", WAIT, async || {
        let s = cat.snapshot().await.ok()?;
        s.tenants
            .values()
            .all(|(t, _)| t.drains.is_empty())
            .then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for h in load {
        h.await.expect("load task");
    }
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "a live node refused connections"
    );
    all_delivered(&history, &sink, &relays).await;
    record_deliveries(&sink, &history);
    let summary = history.assert_kept(&["o"], &["o", "u"]);
    eprintln!("kills: t0 answered again after {failovers:?}; {summary}");
    for (i, r) in relays.iter_mut().enumerate() {
        r.sigterm();
        let status = r.wait_exit(WAIT).await;
        assert!(status.success(), "n{}: {status:?}", i + 1);
        let data = r.data_dir();
        let (status, out) = crate::relay::run_cli(
            &["store".as_ref(), "check".as_ref(), data.as_os_str()],
            r.dir.path(),
        );
        assert_eq!(status.code(), Some(0), "store check of n{}: {out}", i + 1);
    }
}

/// After a planned move, the old owner, once it has delivered what it held
/// of the tenant, hands the rest (dead letters, the archive, dedupe
/// records) to the new owner and deletes its copy (docs/design.md section
/// 11, "Hand-over"): the new owner lists the dead letters, revives them
/// into their keys' lanes, and the old node holds nothing of the tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_nodes_dead_letters_and_archive_go_to_the_new_owner() {
    let etcd = Etcd::start(1).await;
    // The ordered sink refuses (400: a dead letter at once) the hooks of
    // keys `x...` until the receiver is fixed.
    let fixed = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&fixed);
    let sink = Sink::start(move |r| {
        if r.path == "/in/o"
            && r.key().is_some_and(|k| k.starts_with('x'))
            && !seen.load(Ordering::SeqCst)
        {
            Reply::Status(400)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relays = nodes(2, &etcd, &sink, 3_000).await;
    let snap = all_owned(&etcd).await;
    let from = owner_index(&snap, "t0");
    let to = 1 - from;
    let to_id = format!("n{}", to + 1);
    let history = Arc::new(History::new());
    let client = client();
    let url = format!("http://{}", relays[from].ingest);
    for n in 0..20 {
        let key = if n % 2 == 0 {
            format!("x{n}")
        } else {
            format!("k{n}")
        };
        post_recorded(&client, &url, 0, &key, n, &history)
            .await
            .expect("a hook");
    }
    assert_eq!(history.acked().len(), 20);
    let old = crate::admin::Admin::new(&relays[from], None);
    let new = crate::admin::Admin::new(&relays[to], None);
    until(
        "the old owner dead-lettered the ten x hooks",
        WAIT,
        async || {
            let t = old.tenant("t0").await;
            (t["counters"]["dead"] == 10 && t["counters"]["pending"] == 0).then_some(())
        },
    )
    .await;
    let (code, out) = cluster_cli(&relays[0], &["move", "t0", "--to", &to_id, "--wait"]);
    assert_eq!(code, 0, "{out}");
    until(
        "the dead letters handed to the new owner and gone from the old",
        WAIT,
        async || {
            let (o, n) = (old.dead("tenant=t0").await, new.dead("tenant=t0").await);
            (o.is_empty() && n.len() == 10).then_some(())
        },
    )
    .await;
    until("the hand-over recorded on both nodes", WAIT, async || {
        let sent = relays[from]
            .metric("ankusa_cluster_handed_over_total")
            .await;
        let took = relays[to].metric("ankusa_cluster_adopted_total").await;
        // Every hook: ten dead letters, ten delivered (archive).
        (sent == 20.0 && took == 20.0).then_some(())
    })
    .await;
    let t = old.tenant("t0").await["counters"].clone();
    assert_eq!(
        (t["dead"].as_u64(), t["pending"].as_u64()),
        (Some(0), Some(0)),
        "{t}"
    );
    let t = new.tenant("t0").await["counters"].clone();
    assert_eq!(t["dead"].as_u64(), Some(10), "{t}");
    // The offer is gone from the catalog once the hand-over is done.
    until("the hand-over offer withdrawn", WAIT, async || {
        let s = catalog(&etcd).snapshot().await.ok()?;
        s.handovers
            .get("t0")
            .is_none_or(|h| h.is_empty())
            .then_some(())
    })
    .await;
    // Revived on the new owner, each dead letter is delivered in its lane.
    fixed.store(true, Ordering::SeqCst);
    for item in new.dead("tenant=t0").await {
        let id = item["id"].as_str().expect("id").to_owned();
        new.ok(
            "POST",
            "/v1/dead-letters/{id}/revive",
            &format!("/v1/dead-letters/{id}/revive"),
            None,
        )
        .await;
    }
    until(
        "the revived hooks delivered by the new owner",
        WAIT,
        async || {
            let keys: std::collections::BTreeSet<String> = sink
                .delivered()
                .into_iter()
                .filter(|r| r.path == "/in/o")
                .filter_map(|r| r.key())
                .filter(|k| k.starts_with('x'))
                .collect();
            (keys.len() == 10).then_some(())
        },
    )
    .await;
    assert_eq!(new.dead("tenant=t0").await.len(), 0);
}
