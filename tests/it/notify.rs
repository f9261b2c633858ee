//! The relay's own notifications and auto-pause through the real binary
//! (docs/design.md section 5, "Notifications"; README, "Notifications"): a
//! breaker that opens and closes is told once each, a burst of dead letters
//! is one summary per window, a sink failing every attempt for its
//! `auto_pause_after_ms` is paused (the admin API shows why) and told about,
//! and a resume delivers its hooks; a notification whose destination is down
//! is delivered after a SIGKILL and a restart, once the destination is up;
//! a bad `notify` section is refused by option.

use std::ffi::OsStr;
use std::time::Duration;

use serde_json::Value;

use crate::admin::Admin;
use crate::relay::{Relay, config, run_cli};
use crate::sink::{Reply, Req, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(120);

/// The notifications `notes` received at `path`, as JSON, in arrival order.
fn notes_at(notes: &Sink, path: &str) -> Vec<Value> {
    notes
        .requests()
        .iter()
        .filter(|r| r.path == path)
        .map(Req::json)
        .collect()
}

/// Those of them whose `event` is `event`.
fn of(notes: &[Value], event: &str) -> Vec<Value> {
    notes
        .iter()
        .filter(|n| n["event"] == event)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_that_opens_and_closes_is_notified_once_each() {
    let sink = Sink::start(|_| Reply::Status(503)).await;
    let notes = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 50}}
breaker: {{failures: 2, distinct: 1, open_ms: 300}}
sources:
  - name: s
    sinks: [{{type: http, name: out, url: '{}'}}]
notify:
  destinations:
    - name: ops
      url: '{}'
      events: [breaker_opened, breaker_closed]
",
            sink.url(),
            notes.url()
        ),
    ))
    .await;
    post_hooks(&relay, 3).await;
    let opened = until("breaker_opened told", WAIT, async || {
        of(&notes_at(&notes, "/in"), "breaker_opened")
            .first()
            .cloned()
    })
    .await;
    assert_eq!(
        (
            &opened["tenant"],
            &opened["source"],
            &opened["sink"],
            &opened["relay"],
            &opened["failures"]
        ),
        (
            &Value::from("default"),
            &Value::from("s"),
            &Value::from("out"),
            &Value::from("ankusa"),
            &Value::from(2)
        ),
        "{opened}"
    );
    assert!(
        opened["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("503")),
        "{opened}"
    );
    // The receiver recovers: the trial delivers, the breaker closes, every
    // hook is delivered.
    sink.set_script(|_| Reply::Status(200));
    until("closed and every hook delivered", WAIT, async || {
        let n = notes_at(&notes, "/in");
        (sink.delivered().len() == 3 && !of(&n, "breaker_closed").is_empty()).then_some(())
    })
    .await;
    let n = notes_at(&notes, "/in");
    assert_eq!(of(&n, "breaker_opened").len(), 1, "{n:#?}");
    let closed = of(&n, "breaker_closed");
    assert_eq!(closed.len(), 1, "{n:#?}");
    assert_eq!(
        (
            &closed[0]["tenant"],
            &closed[0]["source"],
            &closed[0]["sink"]
        ),
        (
            &Value::from("default"),
            &Value::from("s"),
            &Value::from("out")
        )
    );
    assert_eq!(n.len(), 2, "only the events asked for: {n:#?}");
    // Delivered as a hook of the relay's own: tenant _ankusa, the
    // destination's source, JSON.
    let req = &notes.requests()[0];
    assert_eq!(req.header("x-ankusa-tenant").as_deref(), Some("_ankusa"));
    assert_eq!(
        req.header("x-ankusa-source").as_deref(),
        Some("_notify-ops")
    );
    assert_eq!(
        req.header("content-type").as_deref(),
        Some("application/json")
    );
    until("the notifications' outcomes committed", WAIT, async || {
        let m = relay.metrics().await;
        (m.get("ankusa_notify_delivered_total") == Some(&2.0)).then_some(m)
    })
    .await;
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_notify_queued_total"], 2.0);
    assert_eq!(m["ankusa_notify_dropped_total"], 0.0);
    assert_eq!(m["ankusa_notify_failed_total"], 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_burst_is_one_summary_per_window_not_one_message_per_hook() {
    let sink = Sink::start(|_| Reply::Status(400)).await;
    let notes = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
sources:
  - name: s
    sinks: [{{type: http, name: out, url: '{}'}}]
notify:
  dead_letter_window_ms: 3000
  dead_letter_samples: 3
  destinations:
    - {{name: ops, url: '{}', events: [dead_lettered]}}
    - {{name: chat, url: '{}-chat', format: slack, events: [dead_lettered]}}
",
            sink.url(),
            notes.url(),
            notes.url()
        ),
    ))
    .await;
    post_hooks(&relay, 30).await;
    let summaries = until("30 dead letters summarised", WAIT, async || {
        let n = notes_at(&notes, "/in");
        let total: u64 = n.iter().filter_map(|s| s["count"].as_u64()).sum();
        (total >= 30).then_some(n)
    })
    .await;
    let total: u64 = summaries.iter().filter_map(|s| s["count"].as_u64()).sum();
    assert_eq!(total, 30, "{summaries:#?}");
    // One message per window, never one per hook: however the burst fell
    // across windows, two summaries of the sink are a window apart.
    let at: Vec<u64> = summaries
        .iter()
        .map(|s| s["at_ms"].as_u64().expect("at_ms"))
        .collect();
    for pair in at.windows(2) {
        assert!(
            pair[1] >= pair[0] + 3000,
            "two summaries within one window: {summaries:#?}"
        );
    }
    for s in &summaries {
        assert_eq!(s["event"], "dead_lettered");
        assert_eq!(
            (&s["tenant"], &s["source"], &s["sink"], &s["window_ms"]),
            (
                &Value::from("default"),
                &Value::from("s"),
                &Value::from("out"),
                &Value::from(3000)
            )
        );
        let samples = s["samples"].as_array().expect("samples");
        assert!(
            (1..=3).contains(&samples.len()),
            "at most dead_letter_samples: {s}"
        );
        for sample in samples {
            assert!(
                sample["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("permanent: HTTP 400")),
                "{sample}"
            );
            let id = sample["id"].as_str().expect("id");
            assert!(
                id.starts_with("default.") && id.ends_with(".0"),
                "a row id as the admin API takes it: {id}"
            );
        }
    }
    // The same summaries in Slack's form to the other destination.
    let chat = until("the chat summaries", WAIT, async || {
        let c = notes_at(&notes, "/in-chat");
        (c.len() == summaries.len()).then_some(c)
    })
    .await;
    for c in &chat {
        let text = c["text"].as_str().expect("text");
        assert!(
            text.starts_with("[ankusa ankusa] ") && text.contains(" dead-lettered within "),
            "{c}"
        );
        assert_eq!(c.as_object().map(serde_json::Map::len), Some(1), "{c}");
    }
    // Every dead letter is in the DLQ as usual.
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_dlq_dead"], 30.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_failing_every_attempt_is_auto_paused_told_and_resumed() {
    let sink = Sink::start(|_| Reply::Status(503)).await;
    let notes = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 50}}
breaker: {{open_ms: 2000}}
sources:
  - name: s
    sinks:
      - {{type: http, name: out, url: '{}', auto_pause_after_ms: 1500}}
notify:
  destinations:
    - name: ops
      url: '{}'
      events: [sink_auto_paused]
",
            sink.url(),
            notes.url()
        ),
    ))
    .await;
    let mut ids = post_hooks(&relay, 5).await;
    let api = Admin::new(&relay, None);
    let reason = until("the sink auto-paused", WAIT, async || {
        let src = api
            .ok("GET", "/v1/sources/{source}", "/v1/sources/s", None)
            .await;
        let out = &src["sinks"][0];
        (out["paused"] == true).then(|| out["pause"]["by_runtime"]["reason"].clone())
    })
    .await;
    let reason = reason.as_str().expect("a runtime pause with a reason");
    assert!(
        reason.starts_with("auto-paused: every attempt failed for 1.5 s (last error: HTTP 503"),
        "{reason}"
    );
    let paused = until("sink_auto_paused told", WAIT, async || {
        of(&notes_at(&notes, "/in"), "sink_auto_paused")
            .first()
            .cloned()
    })
    .await;
    assert_eq!(
        (&paused["source"], &paused["sink"], &paused["reason"]),
        (&Value::from("s"), &Value::from("out"), &Value::from(reason)),
        "{paused}"
    );
    assert_eq!(notes_at(&notes, "/in").len(), 1, "one notification");
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_dispatch_auto_paused_total"], 1.0);
    assert_eq!(m["ankusa_dispatch_paused"], 1.0);
    // Paused, its hooks are still accepted and kept.
    ids.push(relay.post("/hooks/s", &[], "{\"i\":5}").await.id());
    // Fixed and resumed, as any pause: every hook is delivered.
    sink.set_script(|_| Reply::Status(200));
    let r = api
        .ok(
            "POST",
            "/v1/sources/{source}/sinks/{sink}/resume",
            "/v1/sources/s/sinks/out/resume",
            None,
        )
        .await;
    assert_eq!(r["paused"], false, "{r}");
    let got = until("every hook delivered after the resume", WAIT, async || {
        let mut d: Vec<String> = sink.delivered().iter().map(Req::id).collect();
        d.sort();
        d.dedup();
        (d.len() == ids.len()).then_some(d)
    })
    .await;
    ids.sort();
    assert_eq!(got, ids);
    assert_eq!(relay.metrics().await["ankusa_dispatch_paused"], 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_failing_every_attempt_is_told_once_per_run() {
    let sink = Sink::start(|_| Reply::Status(502)).await;
    let notes = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 50}}
breaker: {{open_ms: 300}}
sources:
  - name: s
    sinks: [{{type: http, name: out, url: '{}'}}]
notify:
  sink_failing_after_ms: 1000
  destinations:
    - {{name: ops, url: '{}', events: [sink_failing]}}
",
            sink.url(),
            notes.url()
        ),
    ))
    .await;
    relay.post("/hooks/s", &[], "{\"i\":0}").await.id();
    relay.post("/hooks/s", &[], "{\"i\":1}").await.id();
    let failing = until("sink_failing told", WAIT, async || {
        notes_at(&notes, "/in").first().cloned()
    })
    .await;
    assert_eq!(failing["event"], "sink_failing");
    assert_eq!(
        (&failing["source"], &failing["sink"], &failing["tenant"]),
        (&Value::from("s"), &Value::from("out"), &Value::Null)
    );
    assert!(
        failing["failing_for_ms"]
            .as_u64()
            .is_some_and(|ms| ms >= 1000),
        "{failing}"
    );
    assert!(
        failing["last_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("HTTP 502")),
        "{failing}"
    );
    // The sink keeps failing (more attempts, the same run): not told again.
    let seen = sink.request_count();
    until("more failed attempts", WAIT, async || {
        (sink.request_count() >= seen + 5).then_some(())
    })
    .await;
    assert_eq!(notes_at(&notes, "/in").len(), 1, "told once per run");
    // Delivered: the run ends, and a new one is told again.
    sink.set_script(|_| Reply::Status(200));
    until("the hooks delivered", WAIT, async || {
        (sink.delivered().len() == 2).then_some(())
    })
    .await;
    sink.set_script(|_| Reply::Status(502));
    relay.post("/hooks/s", &[], "{\"i\":2}").await.id();
    until("a second run told", WAIT, async || {
        (notes_at(&notes, "/in").len() == 2).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_whose_destination_is_down_is_delivered_after_a_restart() {
    let sink = Sink::start(|_| Reply::Status(400)).await;
    // Where the destination will be: nothing listens there yet.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let mut relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
retry: {{base_ms: 50, max_ms: 200}}
sources:
  - name: s
    sinks: [{{type: http, name: out, url: '{}'}}]
notify:
  dead_letter_window_ms: 1000
  destinations:
    - {{name: ops, url: 'http://{down}/notes', events: [dead_lettered]}}
",
            sink.url()
        ),
    ))
    .await;
    relay.post("/hooks/s", &[], "{\"i\":0}").await.id();
    // Queued, and its destination refused at least once.
    until("the notification queued and attempted", WAIT, async || {
        let m = relay.metrics().await;
        (m.get("ankusa_notify_queued_total") == Some(&1.0)
            && m.get("ankusa_dispatch_retries_total")
                .is_some_and(|r| *r >= 1.0))
        .then_some(())
    })
    .await;
    relay.kill();
    let notes = Sink::start_at(down, |_| Reply::Status(200)).await;
    relay.restart().await;
    let got = until("the notification delivered", WAIT, async || {
        let n = notes_at(&notes, "/notes");
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert_eq!(got[0]["event"], "dead_lettered");
    assert_eq!(got[0]["count"], 1);
    until("its outcome committed", WAIT, async || {
        (relay.metrics().await.get("ankusa_notify_delivered_total") == Some(&1.0)).then_some(())
    })
    .await;
    // One notification, delivered once (a redelivery repeats its id).
    let ids: std::collections::BTreeSet<String> = notes.requests().iter().map(Req::id).collect();
    assert_eq!(ids.len(), 1, "{:#?}", notes.requests());
}

/// Runs check-config on `notify` (a whole `notify:` section after one good
/// source): it must fail and print each of `expected`.
fn refused(notify: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = format!(
        "node: {{data_dir: '{}', store: memory}}
listeners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}
sources:
  - name: s
    sinks: [{{type: http, url: 'http://127.0.0.1:9/x'}}]
{notify}",
        dir.path().join("data").display()
    );
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir.path());
    assert!(!status.success(), "check-config accepted:\n{yaml}\n{out}");
    for e in expected {
        assert!(
            out.contains(e),
            "check-config output lacks\n  {e}\ngot:\n{out}\n---\n{yaml}"
        );
    }
}

#[test]
fn a_bad_notify_section_is_refused_by_option() {
    refused(
        "notify:
  destinations:
    - {name: ops, url: 'http://127.0.0.1:9/n', events: [breaker_opened, breaker_open]}
    - {name: chat, url: 'not a url', events: [dead_lettered]}
    - {name: quiet, url: 'http://127.0.0.1:9/q'}
",
        &[
            "notify: option \"destinations[0].events[1]\": unknown event \"breaker_open\"",
            "notify: option \"destinations[1].url\": \"not a url\" is not an http:// or https:// URL",
            "notify: option \"destinations[2].events\": at least one event is required",
        ],
    );
    refused(
        "notify: {destinations: []}\n",
        &["notify: option \"destinations\": at least one destination is required"],
    );
}

#[test]
fn auto_pause_after_ms_of_zero_or_past_its_bound_is_refused() {
    for bad in ["0", "2592000001"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let yaml = format!(
            "node: {{data_dir: '{}', store: memory}}
listeners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}
sources:
  - name: s
    sinks: [{{type: http, name: out, url: 'http://127.0.0.1:9/x', auto_pause_after_ms: {bad}}}]
",
            dir.path().join("data").display()
        );
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, &yaml).expect("write");
        let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir.path());
        assert!(!status.success(), "check-config accepted {bad}:\n{out}");
        assert!(
            out.contains(
                "source \"s\", sink \"out\" (http): option \"auto_pause_after_ms\": must be whole milliseconds from 1000 (1 s) to 2592000000 (30 days)"
            ),
            "{out}"
        );
    }
}

#[test]
fn check_config_counts_the_destinations_apart_from_the_file_s_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = format!(
        "node: {{data_dir: '{}', store: memory}}
listeners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}
sources:
  - name: s
    sinks: [{{type: http, url: 'http://127.0.0.1:9/x', auto_pause_after_ms: 60000}}]
notify:
  destinations:
    - {{name: ops, url: 'http://127.0.0.1:9/n', events: [dead_lettered]}}
    - {{name: chat, url: 'http://127.0.0.1:9/c', format: slack, events: [sink_auto_paused]}}
",
        dir.path().join("data").display()
    );
    let file = dir.path().join("good.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir.path());
    assert!(status.success(), "{out}");
    assert!(
        out.contains(": ok (1 source, 1 tenant, 2 notify destinations)"),
        "{out}"
    );
}

/// Posts `n` hooks `{"i": 0..n}` to source `s`, each answered 200: their ids.
async fn post_hooks(relay: &Relay, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(
            relay
                .post("/hooks/s", &[], format!("{{\"i\":{i}}}"))
                .await
                .id(),
        );
    }
    ids
}
