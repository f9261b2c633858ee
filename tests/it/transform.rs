//! A sink entry's transform end to end (docs/design.md section 6,
//! "Transforms"): a Stripe corpus hook verified at the edge reaches a
//! signing HTTP sink as the program's output, signed over that output
//! (checked with the Standard Webhooks authors' own library) and without
//! Stripe's signature; a replay and a revive after a reload run the new
//! program; `POST /v1/transform/test` and `ankusa transform test` answer
//! the output for a sample, or the failure; a run that aborts its worker
//! process costs its hook, not the relay.

use std::time::Duration;

use serde_json::{Value, json};
use standardwebhooks::Webhook;

use crate::admin::{Admin, cli, validate};
use crate::corpus::Hook;
use crate::relay::{Relay, client, config};
use crate::sink::{Req, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(120);

/// The Standard Webhooks secret the sink signs with.
const SECRET: &str = "whsec_YW5rdXNhLW91dGJvdW5kLXNpZ25pbmcta2V5LW5ldzI=";

/// Ten years: the corpus timestamps are from 2018-2024.
const TEN_YEARS_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// invoice_paid.json reshaped by [`RESHAPE`].
const RESHAPED: &str = r#"{"id":"in_1Pgc6tB7WZ01zgkWu9fdqL6I","customer":"cus_QXg1o8vcGmoR32"}"#;
const RESHAPE: &str = "{id: .data.object.id, customer: .data.object.customer}";

fn stripe_config(sink: &Sink) -> String {
    config(
        "memory",
        &format!(
            "sources:\n  - {{name: stripe, verification: {{type: stripe, secrets: [whsec_corpus_test_secret_0001], tolerance_ms: {TEN_YEARS_MS}}}, sinks: [{{type: http, name: web, url: '{}', signing: {{type: standard_webhooks, secrets: [{SECRET}]}}, transform: {{jq: '{RESHAPE}'}}}}]}}\n",
            sink.url()
        ),
    )
}

/// Whether a receiver knowing [`SECRET`] accepts `r` (the library's own
/// `verify`: id, timestamp within 5 minutes, any `v1,` signature).
fn verifies(r: &Req) -> bool {
    let mut headers = hyper::HeaderMap::new();
    for (n, v) in &r.headers {
        headers.append(
            hyper::header::HeaderName::from_bytes(n.as_bytes()).expect("name"),
            hyper::header::HeaderValue::from_bytes(v).expect("value"),
        );
    }
    Webhook::new(SECRET)
        .expect("secret")
        .verify(&r.body, &headers)
        .is_ok()
}

/// A Stripe hook, verified at the edge with its own signature, goes out as
/// the program's output: the exact JSON, `application/json`, signed by the
/// sink over that body (a receiver verifies it with the scheme's library;
/// the body as received would not verify), and without `Stripe-Signature`,
/// which signs the body as received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transformed_stripe_hook_is_signed_over_its_new_body_without_stripes_signature() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&stripe_config(&sink)).await;
    let hook = Hook::load("stripe/invoice_paid.json");
    let a = relay
        .post("/hooks/stripe", &hook.send_headers(), hook.body.clone())
        .await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let got = until("the transformed hook", WAIT, async || {
        sink.delivered().into_iter().next()
    })
    .await;
    assert_eq!(String::from_utf8_lossy(&got.body), RESHAPED);
    assert_eq!(
        got.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(got.header_count("stripe-signature"), 0, "{:?}", got.headers);
    assert_eq!(got.header("webhook-id"), Some(a.id()));
    assert!(verifies(&got), "the signature is not over the body sent");
    let mut original = got.clone();
    original.body = hook.body.clone();
    assert!(
        !verifies(&original),
        "the signature is over the body received"
    );
}

fn orders_config(sink: &Sink, program: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "sources:\n  - name: orders\n    sinks:\n      - {{type: http, name: web, url: '{}', transform: {{jq: '{program}'}}}}\n",
            sink.url()
        ),
    )
}

fn bodies(sink: &Sink) -> Vec<String> {
    sink.delivered()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// The stored hook is the body as received, so what runs is the program of
/// the moment: a hook delivered under one program and replayed after a
/// reload gets the new one, and so does a hook the first program failed on
/// (dead-lettered with its message, counted) and that is revived after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_and_a_revive_after_a_reload_run_the_new_program() {
    let sink = Sink::ok().await;
    let v1 = r#"{v: 1, id: (.id // error("no id"))}"#;
    let v2 = r#"{v: 2, id: (.id // "none")}"#;
    let mut relay = Relay::start(&orders_config(&sink, v1)).await;
    let api = Admin::new(&relay, None);
    let json_type = ("content-type", "application/json");
    let a = relay
        .post("/hooks/orders", &[json_type], br#"{"id":"a"}"#.to_vec())
        .await;
    until("the first delivery", WAIT, async || {
        (bodies(&sink) == [r#"{"v":1,"id":"a"}"#]).then_some(())
    })
    .await;
    let hook = api
        .ok(
            "GET",
            "/v1/hooks/{idempotency_key}",
            &format!("/v1/hooks/{}", a.id()),
            None,
        )
        .await;
    let since = hook["received_at_ms"].as_u64().expect("received_at_ms");
    // The next hook is received later: the replay's range holds `a` alone.
    until("the clock past the first hook", WAIT, async || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        (now > since).then_some(())
    })
    .await;
    relay
        .post("/hooks/orders", &[json_type], br#"{"id":null}"#.to_vec())
        .await;
    let dead = until("the dead letter", WAIT, async || {
        api.dead("source=orders").await.into_iter().next()
    })
    .await;
    assert_eq!(dead["reason"].as_str(), Some("permanent: transform: no id"));
    assert_eq!(
        relay
            .metric("ankusa_transform_failed_total{source=\"orders\",sink_name=\"web\"}")
            .await,
        1.0
    );

    relay.rewrite_config(&orders_config(&sink, v2));
    let r = api.ok("POST", "/v1/reload", "/v1/reload", None).await;
    assert_eq!(
        r["changes"],
        json!(["source \"orders\", sink \"web\" changed"])
    );

    let row = dead["id"].as_str().expect("id");
    api.ok(
        "POST",
        "/v1/dead-letters/{id}/revive",
        &format!("/v1/dead-letters/{row}/revive"),
        None,
    )
    .await;
    until(
        "the revived hook, through the new program",
        WAIT,
        async || {
            bodies(&sink)
                .contains(&r#"{"v":2,"id":"none"}"#.to_owned())
                .then_some(())
        },
    )
    .await;

    let job = api
        .ok(
            "POST",
            "/v1/jobs",
            "/v1/jobs",
            Some(json!({"kind": "replay", "filter": {"source": "orders", "since": since, "until": since + 1}})),
        )
        .await;
    let id = job["id"].as_u64().expect("job id");
    until("the replay done", WAIT, async || {
        (api.job(id).await["state"] == "done").then_some(())
    })
    .await;
    until(
        "the replayed hook, through the new program",
        WAIT,
        async || {
            bodies(&sink)
                .contains(&r#"{"v":2,"id":"a"}"#.to_owned())
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        bodies(&sink),
        [
            r#"{"v":1,"id":"a"}"#,
            r#"{"v":2,"id":"none"}"#,
            r#"{"v":2,"id":"a"}"#
        ]
    );
}

/// The transform worker processes of the relay `pid` (its children started
/// as `ankusa transform-worker`).
fn workers(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // The parent's pid is the 4th field, after the name in parentheses.
            let parent = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            parent == Some(pid) && cmdline.split(|b| *b == 0).any(|a| a == b"transform-worker")
        })
        .collect()
}

/// A program that asks for more memory than there is in one operation
/// aborts the process it runs in. It runs in a worker process, so that is
/// the worker: the hook is dead-lettered naming the signal, the next hook
/// is delivered through a new worker, the test endpoint answers the same
/// failure as a 422, and the relay never stops. The workers are bounded to
/// 4 GiB of address space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_aborts_its_worker_dead_letters_its_hook_and_the_relay_goes_on() {
    let sink = Sink::ok().await;
    let program = r#"if .big then "xx" * 1000000000000000 else {id} end"#;
    let mut relay = Relay::start(&orders_config(&sink, program)).await;
    let api = Admin::new(&relay, None);
    let json_type = ("content-type", "application/json");
    relay
        .post("/hooks/orders", &[json_type], br#"{"id":"a"}"#.to_vec())
        .await;
    until("the first delivery", WAIT, async || {
        (bodies(&sink) == [r#"{"id":"a"}"#]).then_some(())
    })
    .await;
    let pid = relay.pid();
    let first = workers(pid);
    assert!(
        !first.is_empty(),
        "no transform worker under the relay {pid}"
    );
    for w in &first {
        // `ps` shows it as `ankusa transform-worker`, `ps -C ankusa` finds it.
        assert_eq!(
            std::fs::read(format!("/proc/{w}/cmdline")).unwrap_or_default(),
            b"ankusa\0transform-worker\0"
        );
        assert_eq!(
            std::fs::read_to_string(format!("/proc/{w}/comm")).unwrap_or_default(),
            "ankusa\n"
        );
        let limits = std::fs::read_to_string(format!("/proc/{w}/limits")).unwrap_or_default();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max address space"))
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            line.split_whitespace().skip(3).take(2).collect::<Vec<_>>(),
            ["4294967296", "4294967296"],
            "{line}"
        );
    }

    relay
        .post("/hooks/orders", &[json_type], br#"{"big":true}"#.to_vec())
        .await;
    let dead = until("the dead letter", WAIT, async || {
        api.dead("source=orders").await.into_iter().next()
    })
    .await;
    let reason = dead["reason"].as_str().expect("reason");
    // The log line names the row as `ankusa dlq revive` takes it.
    let id = dead["id"].as_str().expect("id");
    until("the dead letter's log line", WAIT, async || {
        relay
            .log()
            .lines()
            .any(|l| {
                l.contains("permanent failure: dead-lettered")
                    && l.contains(&format!("dead_letter={id}"))
            })
            .then_some(())
    })
    .await;
    assert!(
        reason.starts_with(
            "permanent: transform: the program's run failed: its transform worker process ended (SIGABRT): "
        ),
        "{reason}"
    );
    relay
        .post("/hooks/orders", &[json_type], br#"{"id":"b"}"#.to_vec())
        .await;
    until("the hook after the abort", WAIT, async || {
        (bodies(&sink) == [r#"{"id":"a"}"#, r#"{"id":"b"}"#]).then_some(())
    })
    .await;
    assert!(relay.running(), "the relay stopped");
    assert_eq!(
        relay
            .metric("ankusa_transform_failed_total{source=\"orders\",sink_name=\"web\"}")
            .await,
        1.0
    );

    let (status, v) = test_call(&relay, "source=orders&sink=web", br#"{"big":true}"#).await;
    assert_eq!(status, 422, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("(SIGABRT)")),
        "{v}"
    );
    let (status, v) = test_call(&relay, "source=orders&sink=web", br#"{"id":"c"}"#).await;
    assert_eq!((status, &v["body"]), (200, &json!(r#"{"id":"c"}"#)), "{v}");
    assert!(relay.running(), "the relay stopped");
    assert_eq!(sink.delivered().len(), 2);
}

/// A worker deep in one long built-in operation (parsing and printing a
/// 4-million-digit integer: minutes in a debug build) when the relay is
/// SIGKILLed ends with it, instead of running on as an orphan: it reads its
/// stdin's end only between runs, so it is killed with its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_busy_when_the_relay_is_killed_ends_with_it() {
    let sink = Sink::ok().await;
    let mut relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "sources:\n  - name: orders\n    sinks:\n      - {{type: http, name: web, url: '{}', transform: {{timeout_ms: 1000, jq: '\"9\" * 4000000 | tonumber | tostring | length'}}}}\n",
            sink.url()
        ),
    ))
    .await;
    relay
        .post(
            "/hooks/orders",
            &[("content-type", "application/json")],
            br#"{"id":"a"}"#.to_vec(),
        )
        .await;
    let pid = relay.pid();
    // A worker is started for the run, when the run starts.
    let busy = until("a worker under the relay", WAIT, async || {
        let w = workers(pid);
        (!w.is_empty()).then_some(w)
    })
    .await;
    relay.kill();
    until("the worker gone with the relay", WAIT, async || {
        busy.iter()
            .all(|w| {
                std::fs::read_to_string(format!("/proc/{w}/stat")).map_or(true, |s| {
                    s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
                })
            })
            .then_some(())
    })
    .await;
}

/// `POST /v1/transform/test` with a raw sample: the answer, validated
/// against the OpenAPI document.
async fn test_call(relay: &Relay, query: &str, sample: &[u8]) -> (u16, Value) {
    let resp = client()
        .post(format!("http://{}/v1/transform/test?{query}", relay.admin))
        .body(sample.to_vec())
        .send()
        .await
        .expect("POST /v1/transform/test");
    let status = resp.status().as_u16();
    let v: Value = serde_json::from_str(&resp.text().await.expect("body")).expect("JSON");
    validate("POST", "/v1/transform/test", status, &v);
    (status, v)
}

/// The test endpoint and the CLI run the configured program, or one given,
/// on a sample and answer its output; a program that fails on it is a 422
/// (exit 1) with the reason a delivery would be dead-lettered with; nothing
/// reaches the sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_endpoint_and_cli_answer_the_output_or_the_failure() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&stripe_config(&sink)).await;
    let hook = Hook::load("stripe/invoice_paid.json");

    let (status, v) = test_call(&relay, "source=stripe&sink=web", &hook.body).await;
    assert_eq!(
        (status, v),
        (
            200,
            json!({"program": RESHAPE, "body": RESHAPED, "bytes": RESHAPED.len()})
        )
    );
    let (status, v) = test_call(&relay, "program=.data.object.amount_due", &hook.body).await;
    assert_eq!((status, &v["body"]), (200, &json!("1000")), "{v}");
    let (status, v) = test_call(&relay, "program=error(%22boom%22)", &hook.body).await;
    assert_eq!(
        (status, &v["error"]),
        (
            422,
            &json!({"code": "transform_failed", "message": "transform: boom"})
        )
    );
    let (status, v) = test_call(&relay, "source=stripe&sink=web", b"not json").await;
    assert_eq!(status, 422, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("transform: the body is not JSON: ")),
        "{v}"
    );
    let (status, v) = test_call(&relay, "program=%7Bid%3A", &hook.body).await;
    assert_eq!(status, 400, "{v}");
    let (status, _) = test_call(&relay, "source=stripe&sink=nosuch", &hook.body).await;
    assert_eq!(status, 404);

    let dir = tempfile::tempdir().expect("tempdir");
    let sample = dir.path().join("invoice_paid.json");
    std::fs::write(&sample, &hook.body).expect("sample");
    let admin = format!("http://{}", relay.admin);
    let sample = sample.to_str().expect("path");
    let (code, out, err) = cli(
        &[
            "transform",
            "test",
            "--source",
            "stripe",
            "--sink",
            "web",
            sample,
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!(
        (code, out.as_str()),
        (0, format!("{RESHAPED}\n").as_str()),
        "{err}"
    );
    let (code, out, err) = cli(
        &[
            "transform",
            "test",
            "--program",
            "error(\"boom\")",
            sample,
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.contains("422 transform_failed: transform: boom"),
        "{err}"
    );
    assert!(!err.contains("corpus file"), "{err}");
    // A corpus file given by mistake (its `body` is the sample) is named.
    let corpus = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/corpus/stripe/invoice_paid.json"
    );
    let (code, _, err) = cli(
        &[
            "transform",
            "test",
            "--program",
            ".",
            corpus,
            "--admin",
            &admin,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("looks like a corpus file of fixtures/corpus/"),
        "{err}"
    );
    assert!(sink.requests().is_empty(), "a test sent something");
}
