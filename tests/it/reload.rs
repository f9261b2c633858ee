//! Reload (README, "Changing a running relay"; docs/design.md section 5,
//! "Reload"): `ankusa reload`, SIGHUP and `POST /v1/reload` apply a changed
//! configuration file while the relay takes hooks, or change nothing and say
//! why. Hooks are posted on a new connection each (as a provider does) while
//! the reloads happen; every one must be answered 200.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::admin::cli;
use crate::relay::{Outcomes, Relay, acked, config, load, more_hooks};
use crate::sink::{Reply, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(90);

const JSON: (&str, &str) = ("content-type", "application/json");

/// `ankusa reload` against `relay`: (exit code, stdout, stderr). The
/// command runs on this worker thread (`block_in_place`): the load and the
/// sink go on meanwhile.
fn reload(relay: &Relay) -> (i32, String, String) {
    let admin = format!("http://{}", relay.admin);
    tokio::task::block_in_place(|| cli(&["reload", "--admin", &admin], None))
}

/// `GET /v1/config`.
async fn config_info(relay: &Relay) -> Value {
    crate::relay::client()
        .get(format!("http://{}/v1/config", relay.admin))
        .send()
        .await
        .expect("GET /v1/config")
        .text()
        .await
        .map(|t| serde_json::from_str(&t).expect("JSON"))
        .expect("body")
}

fn two_sources(sink: &Sink, orders_sinks: &str, billing: bool) -> String {
    let base = sink.url();
    let billing = if billing {
        format!(
            "  - name: billing\n    sinks: [{{type: http, name: ledger, url: '{base}/billing'}}]\n"
        )
    } else {
        String::new()
    };
    config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 50, max_ms: 200}}\nsources:\n  - name: orders\n    sinks: [{}]\n{billing}",
            orders_sinks.replace("{BASE}", &base)
        ),
    )
}

/// Under a steady stream of hooks on new connections, `ankusa reload` adds a
/// source and a sink entry: the command says what changed, the new source
/// takes a hook at once, no hook is refused or answered anything but 200,
/// every hook is delivered to the sink it had, and every hook accepted after
/// the reload also to the new entry (none before the reload began).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_adds_a_source_and_a_sink_and_refuses_no_hook() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let web = "{type: http, name: web, url: '{BASE}'}";
    let mut relay = Relay::start(&two_sources(&sink, web, false)).await;
    let (stop, out): (Arc<AtomicBool>, Outcomes) = Default::default();
    let task = load(
        relay.url("/hooks/orders"),
        Arc::clone(&stop),
        Arc::clone(&out),
    );
    more_hooks(&out, 50, "50 hooks before the reload").await;

    let before = acked(&out);
    relay.rewrite_config(&two_sources(
        &sink,
        &format!("{web}, {{type: http, name: audit, url: '{{BASE}}/audit'}}"),
        true,
    ));
    let (code, stdout, stderr) = reload(&relay);
    let after = acked(&out);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for want in [
        "2 changes",
        "source \"orders\", sink \"audit\" added",
        "source \"billing\" added",
    ] {
        assert!(stdout.contains(want), "{want:?} not in:\n{stdout}");
    }
    // The new source takes hooks as soon as the reload has answered.
    let billed = relay
        .post("/hooks/billing", &[JSON], "{\"invoice\":1}")
        .await;
    assert_eq!(billed.status, 200, "{billed:?}");
    until("50 hooks after the reload", WAIT, async || {
        (acked(&out) >= after + 50).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("load task");

    let ids = accepted_ids(&out);
    let at = |path: &str| sink.ids_at(path);
    until("every hook delivered to web", WAIT, async || {
        let web = at("/in");
        ids.iter().all(|id| web.contains(id)).then_some(())
    })
    .await;
    until(
        "the hooks after the reload delivered to audit",
        WAIT,
        async || {
            let audit = at("/in/audit");
            // The one request that may have been in flight when the command
            // returned was routed by either configuration.
            ids[after + 1..]
                .iter()
                .all(|id| audit.contains(id))
                .then_some(())
        },
    )
    .await;
    let audit = at("/in/audit");
    assert!(
        ids[..before].iter().all(|id| !audit.contains(id)),
        "a hook accepted before the reload began reached the new entry"
    );
    until("the billing hook delivered", WAIT, async || {
        at("/in/billing").contains(&billed.id()).then_some(())
    })
    .await;
    let info = config_info(&relay).await;
    assert_eq!(info["reloads_applied"], 1, "{info}");
    let m = relay.metrics().await;
    assert_eq!(
        m["ankusa_config_reloads_total{result=\"applied\"}"], 1.0,
        "{m:?}"
    );
}

/// A reload that cannot be applied changes nothing and says why: a file
/// that does not load (every problem, as `check-config` says it), a changed
/// listener (named). SIGHUP is a reload (before, it ended the relay: exit
/// 129) and a refused one is logged. The running configuration serves
/// throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reload_changes_nothing_and_sighup_reloads() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let web = "{type: http, name: web, url: '{BASE}'}";
    let good = two_sources(&sink, web, false);
    let mut relay = Relay::start(&good).await;
    let hash = config_info(&relay).await["hash"].clone();
    // Hooks on new connections all along: no refusal may touch them.
    let (stop, out): (Arc<AtomicBool>, Outcomes) = Default::default();
    let task = load(
        relay.url("/hooks/orders"),
        Arc::clone(&stop),
        Arc::clone(&out),
    );
    more_hooks(&out, 20, "20 hooks before the reloads").await;

    relay.rewrite_config(&two_sources(
        &sink,
        "{type: http, name: web, url: 'htp://nowhere'}",
        false,
    ));
    let (code, stdout, stderr) = reload(&relay);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("does not load")
            && stderr.contains("source \"orders\", sink \"web\" (http): option \"url\""),
        "{stderr}"
    );

    relay.rewrite_config(&good.replace("ingest: '{INGEST}'", "ingest: '127.0.0.1:1'"));
    let (code, stdout, stderr) = reload(&relay);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("listeners.ingest: cannot change while the relay runs"),
        "{stderr}"
    );
    // SIGHUP with the same refused file: logged, nothing changed.
    relay.sighup();
    until("the SIGHUP's refusal logged", WAIT, async || {
        relay
            .log()
            .contains("configuration reload refused (it cannot be applied live)")
            .then_some(())
    })
    .await;
    assert!(relay.running(), "SIGHUP ended the relay:\n{}", relay.log());
    let info = config_info(&relay).await;
    assert_eq!(
        (info["reloads_refused"].as_u64(), &info["hash"]),
        (Some(3), &hash),
        "{info}"
    );
    assert_eq!(relay.post("/hooks/orders", &[JSON], "{}").await.status, 200);

    // SIGHUP with a good file: applied.
    relay.rewrite_config(&two_sources(&sink, web, true));
    relay.sighup();
    until("the SIGHUP's reload applied", WAIT, async || {
        (config_info(&relay).await["reloads_applied"] == 1).then_some(())
    })
    .await;
    assert_ne!(config_info(&relay).await["hash"], hash);
    assert_eq!(
        relay.post("/hooks/billing", &[JSON], "{}").await.status,
        200
    );
    assert!(relay.running());
    let m = relay.metrics().await;
    assert_eq!(
        (
            m["ankusa_config_reloads_total{result=\"applied\"}"],
            m["ankusa_config_reloads_total{result=\"refused\"}"]
        ),
        (1.0, 3.0),
        "{m:?}"
    );
    more_hooks(&out, 20, "20 hooks after the reloads").await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("load task");
    every_hook_accepted_and_delivered(&sink, &out, "/in").await;
}

/// The ids of a [`load`]'s hooks, once it is checked that every one was
/// answered 200.
fn accepted_ids(out: &Outcomes) -> Vec<String> {
    let outcomes = out.lock().expect("lock").clone();
    let failed: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} hooks not accepted: {:?}",
        failed.len(),
        outcomes.len(),
        &failed[..failed.len().min(5)]
    );
    outcomes
        .into_iter()
        .map(Result::unwrap_or_default)
        .collect()
}

/// Every hook of a [`load`] was answered 200 and reached the sink at `path`.
async fn every_hook_accepted_and_delivered(sink: &Sink, out: &Outcomes, path: &str) {
    let ids = accepted_ids(out);
    until(
        &format!("every hook delivered to {path}"),
        WAIT,
        async || {
            let got = sink.ids_at(path);
            ids.iter().all(|id| got.contains(id)).then_some(())
        },
    )
    .await;
}

/// Removing a sink entry that still has queued deliveries is refused by
/// name, as at a start (a reload never drops hooks); removing one with
/// nothing queued is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_a_sink_with_queued_hooks_is_refused_by_name() {
    let sink = Sink::start(|r| {
        if r.path == "/in/down" {
            Reply::Status(503)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let main = "{type: http, name: main, url: '{BASE}'}";
    let down = "{type: http, name: slow, url: '{BASE}/down'}";
    let mut relay = Relay::start(&two_sources(&sink, &format!("{main}, {down}"), false)).await;
    for i in 0..3 {
        relay
            .post("/hooks/orders", &[JSON], format!("{{\"i\":{i}}}"))
            .await
            .id();
    }
    until("main delivered 3, slow's 3 queued", WAIT, async || {
        let m = relay.metrics().await;
        (sink.delivered().iter().filter(|r| r.path == "/in").count() == 3
            && m["ankusa_queue_pending"] == 3.0)
            .then_some(())
    })
    .await;
    relay.rewrite_config(&two_sources(&sink, main, false));
    let (code, stdout, stderr) = reload(&relay);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(
            "source \"orders\", sink \"slow\" (slot 1) is not in the configuration and has 3 queued deliveries"
        ),
        "{stderr}"
    );
    // With a listener changed as well, both are named in one answer.
    relay.rewrite_config(
        &two_sources(&sink, main, false).replace("ingest: '{INGEST}'", "ingest: '127.0.0.1:1'"),
    );
    let (code, stdout, stderr) = reload(&relay);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("listeners.ingest: cannot change while the relay runs")
            && stderr.contains("sink \"slow\" (slot 1) is not in the configuration"),
        "{stderr}"
    );
    // `main` has nothing queued: removing it is applied, and `slow` keeps its
    // slot (its hooks stay its own).
    relay.rewrite_config(&two_sources(&sink, down, false));
    let (code, stdout, stderr) = reload(&relay);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("source \"orders\", sink \"main\" removed"),
        "{stdout}"
    );
    assert_eq!(relay.metrics().await["ankusa_queue_pending"], 3.0);
}

const OLD_SECRET: &str = "old-secret-0001";
const NEW_SECRET: &str = "new-secret-0002";

/// POSTs a GitHub hook signed with `secret` to source `gh`: the status.
async fn signed(relay: &Relay, secret: &str) -> u16 {
    let body = b"{\"action\":\"opened\"}";
    let sig = crate::relay::github_signature(secret, body);
    relay
        .post(
            "/hooks/gh",
            &[
                JSON,
                ("x-github-event", "issues"),
                ("x-hub-signature-256", &sig),
            ],
            body.to_vec(),
        )
        .await
        .status
}

/// Under a steady stream of hooks on new connections, a reload rotates a
/// provider secret and a sink's signing secret: after it a hook signed with
/// the new provider secret is accepted and one signed with the old is 401;
/// every hook of the stream is answered 200 and delivered, signed with the
/// old or the new signing secret, and those accepted after the reload with
/// the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_rotates_a_provider_secret_and_a_signing_secret() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let yaml = |secret: &str, signing: &str| {
        config(
            "memory",
            &format!(
                "sources:\n  - name: gh\n    verification: {{type: github, secrets: ['{secret}']}}\n    sinks: [{{type: http, url: '{base}'}}]\n  \
                 - name: orders\n    sinks: [{{type: http, name: signed, url: '{base}/orders', signing: {{type: hmac, secret: '{signing}', header: x-signature, prefix: 'sha256='}}}}]\n",
                base = sink.url()
            ),
        )
    };
    let (old_signing, new_signing) = ("relay-signing-0001", "relay-signing-0002");
    let mut relay = Relay::start(&yaml(OLD_SECRET, old_signing)).await;
    let (stop, out): (Arc<AtomicBool>, Outcomes) = Default::default();
    let task = load(
        relay.url("/hooks/orders"),
        Arc::clone(&stop),
        Arc::clone(&out),
    );
    more_hooks(&out, 20, "20 hooks before the reload").await;
    assert_eq!(signed(&relay, OLD_SECRET).await, 200);
    assert_eq!(signed(&relay, NEW_SECRET).await, 401);
    relay.rewrite_config(&yaml(NEW_SECRET, new_signing));
    let (code, stdout, stderr) = reload(&relay);
    let after = acked(&out);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("source \"gh\" changed"), "{stdout}");
    assert!(stdout.contains("source \"orders\""), "{stdout}");
    assert_eq!(signed(&relay, NEW_SECRET).await, 200);
    assert_eq!(signed(&relay, OLD_SECRET).await, 401);
    until("20 hooks after the reload", WAIT, async || {
        (acked(&out) >= after + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("load task");
    every_hook_accepted_and_delivered(&sink, &out, "/in/orders").await;

    let ids: Vec<String> = out
        .lock()
        .expect("lock")
        .iter()
        .map(|o| o.clone().unwrap_or_default())
        .collect();
    let sign = |secret: &str, body: &[u8]| crate::relay::github_signature(secret, body);
    for r in sink.delivered().iter().filter(|r| r.path == "/in/orders") {
        let got = r.header("x-signature").unwrap_or_default();
        let (old, new) = (sign(old_signing, &r.body), sign(new_signing, &r.body));
        assert!(
            got == old || got == new,
            "a delivery signed with neither secret: {got}"
        );
        // The one request that may have been in flight when the command
        // returned was routed by either configuration.
        if ids[after + 1..].contains(&r.id()) {
            assert_eq!(
                got, new,
                "a hook accepted after the reload signed with the old secret"
            );
        }
    }
}

/// The configuration file replaced by a FIFO (or a device): the reload is
/// refused at once, naming the file, instead of blocking on the read (before,
/// every later reload hung, and a SIGTERM never ended the relay); the relay
/// then stops cleanly. A SIGHUP sent as the relay starts never ends it (it
/// died with exit 129 when one came before the handler was installed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_a_fifo_is_refused_and_sighup_during_the_start_is_ignored() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let web = "{type: http, name: web, url: '{BASE}'}";
    let mut relay = Relay::start(&two_sources(&sink, web, false)).await;
    // SIGHUPs while the relay starts: from its first log line (the file is
    // loaded; before it, the process may not have reached `main`, whose
    // first line ignores SIGHUP) until it is ready.
    relay.sigterm();
    assert!(relay.wait_exit(WAIT).await.success());
    relay.spawn_detached();
    let mut sent = 0;
    until(
        "the relay ready after SIGHUPs during its start",
        WAIT,
        async || {
            assert!(
                relay.running(),
                "a SIGHUP ended the starting relay:\n{}",
                relay.log()
            );
            if !relay.log().is_empty() {
                relay.sighup();
                sent += 1;
            }
            (relay.readyz().await.map(|r| r.0) == Some(200)).then_some(())
        },
    )
    .await;

    assert!(sent > 0, "no SIGHUP was sent during the start");
    assert!(relay.running());
    let file = relay.data_dir().parent().expect("dir").join("relay.yaml");
    std::fs::remove_file(&file).expect("rm");
    let status = std::process::Command::new("mkfifo")
        .arg(&file)
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let (code, stdout, stderr) = reload(&relay);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("is not a regular file"), "{stderr}");
    assert_eq!(relay.post("/hooks/orders", &[JSON], "{}").await.status, 200);
    relay.sigterm();
    let status = relay.wait_exit(WAIT).await;
    assert!(status.success(), "{status}\n{}", relay.log());
}

/// Under systemd (`NOTIFY_SOCKET`, here a datagram socket of the test's
/// own): `READY=1` once the relay answers `/readyz` 200, `RELOADING=1` (with
/// `MONOTONIC_USEC`) then `READY=1` around a reload, `STOPPING=1` at SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_systemd_the_relay_notifies_ready_reloading_and_stopping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify.sock");
    let sock = tokio::net::UnixDatagram::bind(&path).expect("bind");
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let web = "{type: http, name: web, url: '{BASE}'}";
    let socket = path.display().to_string();
    let mut relay = Relay::start_with_env(
        &two_sources(&sink, web, false),
        &[("NOTIFY_SOCKET", &socket)],
    )
    .await;
    let next = async || -> String {
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(WAIT, sock.recv(&mut buf))
            .await
            .expect("a notification within the deadline")
            .expect("recv");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(next().await, "READY=1");
    assert_eq!(relay.readyz().await.map(|r| r.0), Some(200));
    relay.sighup();
    let reloading = next().await;
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC=")
            && reloading["RELOADING=1\nMONOTONIC_USEC=".len()..]
                .parse::<u64>()
                .is_ok(),
        "{reloading:?}"
    );
    assert_eq!(next().await, "READY=1");
    relay.sigterm();
    assert_eq!(next().await, "STOPPING=1");
    assert!(relay.wait_exit(WAIT).await.success());
}
