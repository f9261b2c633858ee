//! Every corpus file (fixtures/README.md) with its provider's secret verifies
//! and reaches the HTTP sink byte for byte (sha256 = index.json's
//! `body_sha256`, Shopify's `\/` escapes and integers above 2^53 included); a
//! flipped body byte, a wrong secret and a stale timestamp are 401 and store
//! nothing.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::relay::Relay;
use crate::sink::{Sink, until};

pub fn corpus_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/corpus"));
    assert!(
        dir.join("index.json").is_file(),
        "the webhook corpus is missing: {}",
        dir.display()
    );
    dir
}

/// One corpus file: its headers in send order and its exact body bytes.
#[derive(Clone, Debug)]
pub struct Hook {
    pub file: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Hook {
    pub fn load(file: &str) -> Hook {
        let text = std::fs::read_to_string(corpus_dir().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let headers = v["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|h| {
                (
                    h[0].as_str().expect("name").to_owned(),
                    h[1].as_str().expect("value").to_owned(),
                )
            })
            .collect();
        Hook {
            file: file.to_owned(),
            headers,
            body: v["body"].as_str().expect("body").as_bytes().to_vec(),
        }
    }

    /// The headers to send: all but those the client derives from the
    /// connection and the body (Host, Content-Length).
    pub fn send_headers(&self) -> Vec<(&str, &str)> {
        self.headers
            .iter()
            .filter(|(n, _)| {
                !n.eq_ignore_ascii_case("host") && !n.eq_ignore_ascii_case("content-length")
            })
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn provider(&self) -> &str {
        self.file.split('/').next().expect("provider dir")
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `index.json`'s files: (file, body_sha256).
fn index() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(corpus_dir().join("index.json")).expect("index.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("index.json is JSON");
    v["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            (
                f["file"].as_str().expect("file").to_owned(),
                f["body_sha256"].as_str().expect("sha").to_owned(),
            )
        })
        .collect()
}

/// Ten years: the corpus timestamps are from 2018-2024.
const TEN_YEARS_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// The source each provider's files go to.
fn source_of(provider: &str) -> &'static str {
    match provider {
        "github" => "github",
        "stripe" => "stripe",
        "shopify" => "shopify",
        "slack" => "slack",
        "standard-webhooks" => "stdwh",
        // Twilio (URL-signed, no scheme in the relay) and Salesforce (unsigned).
        _ => "plain",
    }
}

fn config(sink: &str) -> String {
    let t = TEN_YEARS_MS;
    let http = format!("[{{type: http, url: '{sink}'}}]");
    format!(
        r#"
node: {{data_dir: '{{DATA}}', store: memory}}
listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}'}}
sources:
  - {{name: github, verification: {{type: github, secrets: ["It's a Secret to Everybody"]}}, sinks: {http}}}
  - {{name: stripe, verification: {{type: stripe, secrets: [whsec_corpus_test_secret_0001], tolerance_ms: {t}}}, sinks: {http}}}
  - {{name: shopify, verification: {{type: shopify, secrets: [shpss_corpus_test_secret_0001]}}, sinks: {http}}}
  - {{name: slack, verification: {{type: slack, secrets: [8f742231b10e8888abcd99yyyzzz85a5], tolerance_ms: {t}}}, sinks: {http}}}
  - {{name: stdwh, verification: {{type: standard_webhooks, secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw], tolerance_ms: {t}}}, sinks: {http}}}
  - {{name: plain, sinks: {http}}}
  # The same schemes with the wrong secret.
  - {{name: github-wrong, verification: {{type: github, secrets: [not-the-secret]}}, sinks: {http}}}
  - {{name: stripe-wrong, verification: {{type: stripe, secrets: [whsec_corpus_test_secret_9999], tolerance_ms: {t}}}, sinks: {http}}}
  - {{name: shopify-wrong, verification: {{type: shopify, secrets: [shpss_not_the_secret]}}, sinks: {http}}}
  - {{name: slack-wrong, verification: {{type: slack, secrets: [00000000000000000000000000000000], tolerance_ms: {t}}}, sinks: {http}}}
  - {{name: stdwh-wrong, verification: {{type: standard_webhooks, secrets: [whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA], tolerance_ms: {t}}}, sinks: {http}}}
  # The timestamped schemes with the default tolerance (300 s).
  - {{name: stripe-now, verification: {{type: stripe, secrets: [whsec_corpus_test_secret_0001]}}, sinks: {http}}}
  - {{name: slack-now, verification: {{type: slack, secrets: [8f742231b10e8888abcd99yyyzzz85a5]}}, sinks: {http}}}
  - {{name: stdwh-now, verification: {{type: standard_webhooks, secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}}, sinks: {http}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_corpus_file_verifies_and_arrives_byte_identical_refusals_store_nothing() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(&sink.url())).await;
    let files = index();
    assert!(files.len() >= 50, "index.json lists {} files", files.len());
    let hooks: Vec<Hook> = files.iter().map(|(f, _)| Hook::load(f)).collect();
    for (h, (_, sha)) in hooks.iter().zip(&files) {
        assert_eq!(
            &sha256_hex(&h.body),
            sha,
            "{}: the corpus body is not the indexed one",
            h.file
        );
    }

    // ---- refusals first: 401, and nothing stored -------------------------
    let mut refused = 0;
    let verified: Vec<&Hook> = hooks
        .iter()
        .filter(|h| source_of(h.provider()) != "plain")
        .collect();
    for h in &verified {
        let mut body = h.body.clone();
        let i = body.len() / 2;
        body[i] ^= 0x01;
        let a = relay
            .post(
                &format!("/hooks/{}", source_of(h.provider())),
                &h.send_headers(),
                body,
            )
            .await;
        assert_eq!(a.status, 401, "{} with a flipped body byte: {a:?}", h.file);
        assert!(
            a.body["error"]
                .as_str()
                .is_some_and(|e| e.contains("no signature matches")),
            "{}: {a:?}",
            h.file
        );
        refused += 1;
    }
    for (file, source) in [
        ("github/push_new_branch.json", "github-wrong"),
        ("stripe/invoice_paid.json", "stripe-wrong"),
        ("shopify/orders_create.json", "shopify-wrong"),
        ("slack/event_callback_app_mention.json", "slack-wrong"),
        (
            "standard-webhooks/contact_created_multi_signature.json",
            "stdwh-wrong",
        ),
    ] {
        let h = Hook::load(file);
        let a = relay
            .post(
                &format!("/hooks/{source}"),
                &h.send_headers(),
                h.body.clone(),
            )
            .await;
        assert_eq!(a.status, 401, "{file} to {source}: {a:?}");
        assert!(
            a.body["error"]
                .as_str()
                .is_some_and(|e| e.contains("no signature matches")),
            "{file}: {a:?}"
        );
        refused += 1;
    }
    // The corpus timestamps are years old: the default tolerance refuses them.
    for (file, source) in [
        ("stripe/customer_created.json", "stripe-now"),
        ("slack/event_callback_app_mention.json", "slack-now"),
        (
            "standard-webhooks/contact_created_multi_signature.json",
            "stdwh-now",
        ),
        (
            "standard-webhooks/contact_created_full_svix_headers.json",
            "stdwh-now",
        ),
    ] {
        let h = Hook::load(file);
        let a = relay
            .post(
                &format!("/hooks/{source}"),
                &h.send_headers(),
                h.body.clone(),
            )
            .await;
        assert_eq!(a.status, 401, "{file} to {source}: {a:?}");
        let e = a.body["error"].as_str().unwrap_or_default();
        // Years in the past: said as "old", not as a distance "from now".
        assert!(
            e.contains("signature timestamp is") && e.contains(" s old (tolerance 300 s)"),
            "{file}: {a:?}"
        );
        refused += 1;
    }
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_ingest_unauthorized_total"], refused as f64);
    assert_eq!(
        m["ankusa_ingest_accepted_total"], 0.0,
        "a refused hook was committed"
    );
    assert_eq!(m["ankusa_queue_pending"], 0.0, "a refused hook is pending");
    assert_eq!(m["ankusa_queue_pending_bytes"], 0.0);

    // ---- every file with its provider's secret ---------------------------
    // (source, sha256) -> (file, idempotency key) of each accepted hook.
    let mut expected: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
    for h in &hooks {
        let source = source_of(h.provider());
        let a = relay
            .post(
                &format!("/hooks/{source}"),
                &h.send_headers(),
                h.body.clone(),
            )
            .await;
        assert_eq!(a.status, 200, "{} to {source}: {a:?}", h.file);
        if h.file == "slack/url_verification.json" {
            // Answered by the edge itself, nothing stored.
            let sent: serde_json::Value = serde_json::from_slice(&h.body).expect("json");
            assert_eq!(a.body["challenge"], sent["challenge"], "{a:?}");
            assert!(a.body.get("id").is_none(), "{a:?}");
            continue;
        }
        expected
            .entry((source.to_owned(), sha256_hex(&h.body)))
            .or_default()
            .push((h.file.clone(), a.id()));
    }
    let accepted: usize = expected.values().map(Vec::len).sum();
    assert_eq!(accepted, hooks.len() - 1);
    let got = until(
        "every accepted corpus hook at the sink",
        Duration::from_secs(60),
        async || {
            let d = sink.delivered();
            (d.len() >= accepted).then_some(d)
        },
    )
    .await;
    assert_eq!(got.len(), accepted, "deliveries beyond the accepted hooks");
    assert_eq!(
        sink.requests().len(),
        accepted,
        "a delivery was retried or a refused hook sent"
    );

    let by_file: HashMap<&str, &Hook> = hooks.iter().map(|h| (h.file.as_str(), h)).collect();
    let mut seen: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for r in &got {
        let source = r.header("x-ankusa-source").expect("x-ankusa-source");
        seen.entry((source, sha256_hex(&r.body)))
            .or_default()
            .push(r.id());
    }
    for ((source, sha), files) in &expected {
        let ids = seen.get(&(source.clone(), sha.clone())).unwrap_or_else(|| {
            panic!("{files:?}: no delivery from {source} with body sha256 {sha} (body changed on the way?)")
        });
        let mut want: Vec<String> = files.iter().map(|(_, id)| id.clone()).collect();
        let mut ids = ids.clone();
        want.sort();
        ids.sort();
        assert_eq!(
            ids, want,
            "{files:?}: idempotency keys at the sink differ from the ingest answers"
        );
    }
    assert_eq!(seen.len(), expected.len());
    for r in &got {
        assert_eq!(r.method, "POST");
        assert_eq!(r.header("x-ankusa-tenant").as_deref(), Some("default"));
        assert_eq!(r.header("x-ankusa-message-version").as_deref(), Some("1"));
        assert_eq!(r.header("x-ankusa-attempt").as_deref(), Some("1"));
        assert_eq!(
            r.header_count("x-ankusa-ordering-key"),
            0,
            "unordered sink sent an ordering key"
        );
    }
    // Content type as the provider sent it; the body checks that matter most.
    for ((source, _), files) in &expected {
        for (file, id) in files {
            let h = by_file[file.as_str()];
            let r = got.iter().find(|r| &r.id() == id).expect("delivery");
            assert_eq!(
                r.header("content-type").as_deref(),
                h.header("content-type"),
                "{file} via {source}"
            );
            assert_eq!(r.body.len(), h.body.len(), "{file}");
        }
    }
    let shopify_order = got
        .iter()
        .find(|r| r.body.windows(18).any(|w| w == b"820982911946154508"))
        .expect("orders_create delivered");
    assert!(
        shopify_order.body.windows(2).any(|w| w == b"\\/"),
        "Shopify's \\/ escapes were rewritten"
    );
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_ingest_accepted_total"], accepted as f64);
    assert_eq!(m["ankusa_ingest_unauthorized_total"], refused as f64);
    assert_eq!(m["ankusa_dispatch_delivered_total"], accepted as f64);
}
