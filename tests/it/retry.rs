//! A retry policy per sink (docs/design.md section 5, "Retry policy";
//! config/ankusa.example.yaml, a sink entry's `retry`), through the real
//! binary: a grace period during which a receiver's 404s are retried, a
//! Retry-After capped by `retry_after_max_ms` and never dead-lettering a first
//! attempt, a per-sink horizon, `retry_statuses` replacing the default list,
//! and the load-time rejections.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::admin::Admin;
use crate::relay::{Relay, config, run_cli};
use crate::sink::{Reply, Req, Sink, until};

const LONG: Duration = Duration::from_secs(120);
const JSON: (&str, &str) = ("content-type", "application/json");

fn body(i: usize, key: &str) -> String {
    format!("{{\"i\":{i},\"key\":\"{key}\"}}")
}

fn index_of(r: &Req) -> u64 {
    r.json()["i"]
        .as_u64()
        .unwrap_or_else(|| panic!("request {} has no i: {:?}", r.n, r.json()))
}

/// Waits until the relay's metrics show `delivered` deliveries and returns
/// them.
async fn settled(relay: &Relay, delivered: f64) -> HashMap<String, f64> {
    until("the deliveries committed", LONG, async || {
        let m = relay.metrics().await;
        (m["ankusa_dispatch_delivered_total"] == delivered).then_some(m)
    })
    .await
}

/// A receiver that answers 404 for 2 s from its first request (a bad deploy),
/// then 200; an ordered sink with a grace period far longer than that (60 s,
/// so that no load on the machine can stretch the 404s past it) and four
/// keys: nothing is dead-lettered, every hook is delivered, and each key's
/// hooks reach the receiver in order. Past a sink's grace period (2 s) a 404
/// dead-letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_404_within_the_grace_period_loses_nothing() {
    let t0: Arc<Mutex<Option<Instant>>> = Arc::default();
    let t = Arc::clone(&t0);
    let sink = Sink::start(move |_| {
        let first = *t.lock().expect("lock").get_or_insert_with(Instant::now);
        if first.elapsed() < Duration::from_secs(2) {
            Reply::Status(404)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 50, max_ms: 200}}
breaker: {{failures: 100000, open_ms: 10}}
sources:
  - name: orders
    sinks:
      - type: http
        name: web
        url: '{}'
        ordered: true
        ordering_key: {{header: x-entity-id}}
        retry: {{grace_ms: 60000}}
  - name: late
    sinks:
      - type: http
        name: brief
        url: '{}'
        retry: {{grace_ms: 2000}}
",
            sink.url(),
            sink.url()
        ),
    ))
    .await;
    let keys = ["k0", "k1", "k2", "k3"];
    let mut ids: HashMap<&str, Vec<String>> = HashMap::new();
    for i in 0..5 {
        for k in keys {
            ids.entry(k).or_default().push(
                relay
                    .post("/hooks/orders", &[JSON, ("x-entity-id", k)], body(i, k))
                    .await
                    .id(),
            );
        }
    }
    let m = settled(&relay, 20.0).await;
    assert_eq!(m["ankusa_dispatch_dead_lettered_total"], 0.0, "{m:?}");
    assert_eq!(m["ankusa_queue_pending"], 0.0, "{m:?}");
    let reqs = sink.requests();
    let refused = reqs
        .iter()
        .filter(|r| sink.answer_of(r.n) == Some(404))
        .count();
    assert!(refused >= 1, "the receiver never answered 404");
    assert!(
        m["ankusa_dispatch_retries_total"] >= refused as f64,
        "every 404 was retried: {m:?}"
    );
    for k in keys {
        // Every request of the key (retries included) in hook order, and each
        // hook delivered once, in the order it was posted.
        let of_key: Vec<&Req> = reqs
            .iter()
            .filter(|r| r.key().as_deref() == Some(k))
            .collect();
        let order: Vec<u64> = of_key.iter().map(|r| index_of(r)).collect();
        assert!(
            order.windows(2).all(|w| w[0] <= w[1]),
            "key {k}: requests out of order: {order:?}"
        );
        let delivered: Vec<String> = sink
            .delivered()
            .iter()
            .filter(|r| r.key().as_deref() == Some(k))
            .map(Req::id)
            .collect();
        assert_eq!(delivered, ids[k], "key {k}: deliveries");
    }
    assert_eq!(
        sink.max_open().values().copied().max(),
        Some(1),
        "two requests of one lane at once"
    );

    // Past the grace period a 404 is permanent: the hook is retried while its
    // grace lasts, then dead-lettered.
    sink.set_script(|_| Reply::Status(404));
    let id = relay
        .post(
            "/hooks/late",
            &[JSON, ("x-entity-id", "late")],
            body(0, "late"),
        )
        .await
        .id();
    let api = Admin::new(&relay, None);
    let dead = until(
        "the 404 past the grace period dead-lettered",
        LONG,
        async || {
            let d = api.dead("sink=brief").await;
            (!d.is_empty()).then_some(d)
        },
    )
    .await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!(d["idempotency_key"].as_str(), Some(id.as_str()));
    assert!(
        d["reason"]
            .as_str()
            .expect("reason")
            .starts_with("permanent: HTTP 404"),
        "{d}"
    );
    // Retried while its grace lasted (how often depends on the machine's
    // speed; that the 404s of the first part were retried is asserted above).
    let tries = sink.requests().iter().filter(|r| r.id() == id).count();
    assert!(tries >= 1, "never attempted");
    assert_eq!(d["attempts"].as_u64(), Some(tries as u64), "{d}");
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_dispatch_dead_lettered_total"], 1.0, "{m:?}");
}

/// A Retry-After of a day, capped at 1 s on one sink: its row is attempted
/// again after the cap, not a day later. On a sink whose horizon (1 s) is
/// shorter than the Retry-After cap, the day-long Retry-After does not
/// dead-letter the hook after one attempt: it is attempted again at the
/// horizon. Nothing is dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_long_retry_after_is_capped_and_never_dead_letters_a_first_attempt() {
    let sink = Sink::start(|r| {
        if r.attempt() == 1 {
            Reply::RetryAfter(503, "86400")
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
sources:
  - name: capped
    sinks: [{{type: http, name: capped, url: '{url}', retry: {{retry_after_max_ms: 1000}}}}]
  - name: short
    sinks: [{{type: http, name: short, url: '{url}', retry: {{max_elapsed_ms: 1000, retry_after_max_ms: 600000}}}}]
",
            url = sink.url()
        ),
    ))
    .await;
    let capped = relay
        .post("/hooks/capped", &[JSON], body(0, "capped"))
        .await
        .id();
    let short = relay
        .post("/hooks/short", &[JSON], body(1, "short"))
        .await
        .id();
    let m = settled(&relay, 2.0).await;
    assert_eq!(m["ankusa_dispatch_dead_lettered_total"], 0.0, "{m:?}");
    assert_eq!(m["ankusa_dispatch_retries_total"], 2.0, "{m:?}");
    for id in [&capped, &short] {
        let tries: Vec<Req> = sink
            .requests()
            .into_iter()
            .filter(|r| &r.id() == id)
            .collect();
        assert_eq!(
            tries.iter().map(Req::attempt).collect::<Vec<_>>(),
            [1, 2],
            "{id}"
        );
        assert_eq!(sink.answer_of(tries[0].n), Some(503));
    }
    let capped_tries: Vec<Req> = sink
        .requests()
        .into_iter()
        .filter(|r| r.id() == capped)
        .collect();
    let waited = capped_tries[1].at.duration_since(capped_tries[0].at);
    assert!(
        waited >= Duration::from_millis(900),
        "the capped Retry-After held the row only {waited:?}"
    );
}

/// Two sinks of one source whose receiver always answers 503: the one with
/// `retry.max_elapsed_ms: 1500` dead-letters its row at that horizon, the
/// other (the global 24 h horizon) keeps retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_sink_horizon_dead_letters_at_that_horizon() {
    let sink = Sink::start(|_| Reply::Status(503)).await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 50, max_ms: 100}}
breaker: {{failures: 100000, open_ms: 10}}
sources:
  - name: s
    sinks:
      - {{type: http, name: brief, url: '{url}', retry: {{max_elapsed_ms: 1500}}}}
      - {{type: http, name: patient, url: '{url}'}}
",
            url = sink.url()
        ),
    ))
    .await;
    let started = Instant::now();
    let id = relay.post("/hooks/s", &[JSON], body(0, "x")).await.id();
    let api = Admin::new(&relay, None);
    let dead = until("the brief sink's row dead-lettered", LONG, async || {
        let d = api.dead("").await;
        (!d.is_empty()).then_some(d)
    })
    .await;
    // Not at the first attempts: near the horizon (the last retry whose
    // wait would pass it is not made).
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "dead-lettered long before its horizon"
    );
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!(
        (d["sink"].as_str(), d["idempotency_key"].as_str()),
        (Some("brief"), Some(id.as_str())),
        "{d}"
    );
    assert!(
        d["reason"]
            .as_str()
            .expect("reason")
            .starts_with("retry horizon passed"),
        "{d}"
    );
    assert!(d["attempts"].as_u64().expect("attempts") >= 2, "{d}");
    // The patient sink keeps retrying the same hook after that.
    let at_death = sink.requests().len();
    until(
        "the patient sink retried after the brief one gave up",
        LONG,
        async || (sink.requests().len() > at_death + 2).then_some(()),
    )
    .await;
    let m = relay.metrics().await;
    assert_eq!(
        (
            m["ankusa_dispatch_dead_lettered_total"],
            m["ankusa_queue_pending"]
        ),
        (1.0, 1.0),
        "{m:?}"
    );
    assert_eq!(api.dead("sink=patient").await.len(), 0);
}

/// `retry_statuses` replaces the default list: with [404, 409] a 404 and a
/// 409 are retried and delivered, and a 503 (no longer listed) is
/// dead-lettered as permanent at its first attempt. 408, 425 and 429 mean
/// "later" and are retried under every list, listed or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_statuses_replace_the_default_list() {
    let sink = Sink::start(|r| match (index_of(r), r.attempt()) {
        (0, 1) => Reply::Status(404),
        (1, 1) => Reply::Status(409),
        (2, _) => Reply::Status(503),
        (3, 1) => Reply::Status(429),
        (4, 1) => Reply::Status(408),
        (5, 1) => Reply::Status(425),
        _ => Reply::Status(200),
    })
    .await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
sources:
  - name: s
    sinks: [{{type: http, name: web, url: '{}', retry: {{retry_statuses: [404, 409]}}}}]
",
            sink.url()
        ),
    ))
    .await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(relay.post("/hooks/s", &[JSON], body(i, "x")).await.id());
    }
    let api = Admin::new(&relay, None);
    let dead = until("the 503 dead-lettered", LONG, async || {
        let d = api.dead("").await;
        (!d.is_empty()).then_some(d)
    })
    .await;
    let m = settled(&relay, 5.0).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["idempotency_key"].as_str(), Some(ids[2].as_str()));
    assert!(
        dead[0]["reason"]
            .as_str()
            .expect("reason")
            .starts_with("permanent: HTTP 503"),
        "{}",
        dead[0]
    );
    assert_eq!(dead[0]["attempts"].as_u64(), Some(1));
    assert_eq!(
        (
            m["ankusa_dispatch_retries_total"],
            m["ankusa_dispatch_dead_lettered_total"]
        ),
        (5.0, 1.0),
        "{m:?}"
    );
    let delivered: Vec<String> = sink.delivered().iter().map(Req::id).collect();
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert!(
            delivered.contains(id),
            "hook {i} not delivered: {delivered:?}"
        );
    }
}

/// Every problem of the sinks' `retry:` options in one check-config run, each
/// naming the source, the sink and the option; serve refuses the same file.
#[test]
fn bad_retry_options_are_refused_at_load_naming_source_sink_and_option() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let data = dir.join("data");
    let yaml = format!(
        "node: {{data_dir: '{data}', store: rocksdb}}
listeners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}
retry: {{max_ms: 1000}}
sources:
  - name: billing
    sinks:
      - {{type: http, name: web, url: 'http://127.0.0.1:9/', retry: {{base_ms: 5000, retry_statuses: [404, 204, 700, \"3xx\", 404], grace_ms: -1, jitter: true}}}}
      - {{type: http, name: slow, url: 'http://127.0.0.1:9/', retry: {{max_elapsed_ms: 100000000000000, retry_after_max_ms: 1.5, grace_ms: 9000, max_ms: 0}}}}
      - {{type: file, name: disk, path: '{data}.out.ndjson', retry: {{retry_statuses: [404], grace_ms: 1000, base_ms: 10}}}}
      - {{type: http, name: flat, url: 'http://127.0.0.1:9/', retry: 5}}
      - {{type: http, name: tight, url: 'http://127.0.0.1:9/', retry: {{max_elapsed_ms: 1000, grace_ms: 2000}}}}
",
        data = data.display()
    );
    let file = dir.join("bad.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let expected = [
        "source \"billing\", sink \"web\" (http): option \"retry.retry_statuses\": 204 is a success (2xx): it is delivered, never retried",
        "source \"billing\", sink \"web\" (http): option \"retry.retry_statuses\": 700 is not an HTTP error status: list statuses from 400 to 599",
        "source \"billing\", sink \"web\" (http): option \"retry.retry_statuses\": \"3xx\" is not an HTTP error status",
        "source \"billing\", sink \"web\" (http): option \"retry.retry_statuses\": 404 is listed twice",
        "source \"billing\", sink \"web\" (http): option \"retry.grace_ms\": must be a whole number of milliseconds, 0 or more, found -1",
        "source \"billing\", sink \"web\" (http): option \"retry.jitter\": unknown retry option",
        "source \"billing\", sink \"web\" (http): option \"retry.base_ms\": base_ms 5000 is greater than max_ms 1000 (the global retry.max_ms): the first backoff cannot exceed the largest",
        "source \"billing\", sink \"slow\" (http): option \"retry.max_elapsed_ms\": 100000000000000 is more than a year",
        "source \"billing\", sink \"slow\" (http): option \"retry.retry_after_max_ms\": must be a whole number of milliseconds, 0 or more, found 1.5",
        "source \"billing\", sink \"slow\" (http): option \"retry.max_ms\": must be greater than 0",
        "source \"billing\", sink \"disk\" (file): option \"retry.retry_statuses\": only an http sink takes it",
        "source \"billing\", sink \"disk\" (file): option \"retry.grace_ms\": only an http sink takes it",
        "source \"billing\", sink \"flat\" (http): option \"retry\": must be a map of retry options",
        "source \"billing\", sink \"tight\" (http): option \"retry.grace_ms\": 2000 is longer than the retry horizon max_elapsed_ms (1000)",
    ];
    for cmd in [
        vec![OsStr::new("check-config"), file.as_os_str()],
        vec![
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
    ] {
        let (status, out) = run_cli(&cmd, dir);
        assert!(!status.success(), "{cmd:?} accepted:\n{out}");
        for e in expected {
            assert!(out.contains(e), "{cmd:?} output lacks\n  {e}\ngot:\n{out}");
        }
        // The file sink's valid base_ms is not a problem; the slow sink's
        // grace (9000 ms, under its unreadable horizon) neither.
        assert!(
            !out.contains("sink \"disk\" (file): option \"retry.base_ms\""),
            "{out}"
        );
        assert!(
            !out.contains("sink \"slow\" (http): option \"retry.grace_ms\""),
            "{out}"
        );
        assert!(
            !data.exists(),
            "serve created the data_dir of an invalid config"
        );
    }
    // Valid options load.
    let good = format!(
        "node: {{data_dir: '{data}', store: rocksdb}}
listeners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}
retry: {{max_ms: 1000}}
sources:
  - name: billing
    sinks:
      - {{type: http, name: web, url: 'http://127.0.0.1:9/', retry: {{base_ms: 10, max_ms: 100, max_elapsed_ms: 60000, retry_after_max_ms: 0, grace_ms: 5000, retry_statuses: [408, 425, 429, 404, 409, \"5xx\"]}}}}
      - {{type: http, name: all4xx, url: 'http://127.0.0.1:9/', retry: {{retry_statuses: [\"4xx\"], base_ms: 1000}}}}
      - {{type: file, name: disk, path: '{data}.out.ndjson', retry: {{max_elapsed_ms: 5000, retry_after_max_ms: 100}}}}
",
        data = data.display()
    );
    std::fs::write(&file, &good).expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(status.success(), "check-config refused:\n{good}\n{out}");
}
