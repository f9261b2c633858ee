//! Signed deliveries of the HTTP sink (docs/design.md section 6), checked by a
//! verifier that shares no code with the relay: the Standard Webhooks authors'
//! own Rust library (`standardwebhooks`, whose HMAC is the `hmac-sha256` crate;
//! the sink and the edge use RustCrypto's `hmac`), the `hmac-sha256` crate for
//! the plain HMAC header, and the providers' own signatures in the corpus. Real
//! corpus hooks go through the real binary to a real local receiver.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use standardwebhooks::Webhook;

use crate::corpus::Hook;
use crate::relay::{Relay, config, run_cli};
use crate::sink::{Reply, Req, Sink, until};

/// Two Standard Webhooks secrets (32 random-looking bytes each): the one
/// being retired and its successor.
const OLD: &str = "whsec_YW5rdXNhLW91dGJvdW5kLXNpZ25pbmcta2V5LW9sZDE=";
const NEW: &str = "whsec_YW5rdXNhLW91dGJvdW5kLXNpZ25pbmcta2V5LW5ldzI=";
/// A secret no sink signs with.
const OTHER: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Ten years: the corpus timestamps are from 2018-2024.
const TEN_YEARS_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// The request's headers as the `http` crate's map the library reads.
fn header_map(r: &Req) -> hyper::HeaderMap {
    let mut m = hyper::HeaderMap::new();
    for (n, v) in &r.headers {
        m.append(
            hyper::header::HeaderName::from_bytes(n.as_bytes()).expect("name"),
            hyper::header::HeaderValue::from_bytes(v).expect("value"),
        );
    }
    m
}

/// Whether a receiver that knows only `secret` accepts `r` (the library's
/// own `verify`: id, timestamp within 5 minutes, any `v1,` signature).
fn verifies(secret: &str, r: &Req) -> bool {
    Webhook::new(secret)
        .expect("secret")
        .verify(&r.body, &header_map(r))
        .is_ok()
}

/// The `v1,` signature the library computes for `r` under `secret`.
fn library_signature(secret: &str, r: &Req) -> String {
    let id = r.header("webhook-id").expect("webhook-id");
    let ts: i64 = r
        .header("webhook-timestamp")
        .expect("webhook-timestamp")
        .parse()
        .expect("unix seconds");
    Webhook::new(secret)
        .expect("secret")
        .sign(&id, ts, &r.body)
        .expect("sign")
}

/// GitHub, Stripe, Shopify and Standard Webhooks corpus hooks, each verified
/// at the edge, go out through a sink signing with two secrets (one of them
/// from the environment): each delivery carries the body byte for byte, the
/// hook's idempotency key as `webhook-id`, and two `v1,` signatures, the
/// first equal to the library's under the old secret and the second under
/// the new one; a receiver knowing either secret alone verifies it, one
/// knowing neither does not. A Standard Webhooks provider's own `webhook-*`
/// headers are replaced by the sink's. No secret appears in the relay's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_webhooks_rotation_verifies_with_the_schemes_own_library() {
    let sink = Sink::ok().await;
    let t = TEN_YEARS_MS;
    let http = format!(
        "[{{type: http, name: signed, url: '{}', signing: {{type: standard_webhooks, secrets: [{OLD}, 'env:ANKUSA_TEST_NEW_SECRET']}}}}]",
        sink.url()
    );
    let relay = Relay::start_with_env(
        &config(
            "memory",
            &format!(
                r#"
sources:
  - {{name: github, verification: {{type: github, secrets: ["It's a Secret to Everybody"]}}, sinks: {http}}}
  - {{name: stripe, verification: {{type: stripe, secrets: [whsec_corpus_test_secret_0001], tolerance_ms: {t}}}, sinks: {http}}}
  - {{name: shopify, verification: {{type: shopify, secrets: [shpss_corpus_test_secret_0001]}}, sinks: {http}}}
  - {{name: stdwh, verification: {{type: standard_webhooks, secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw], tolerance_ms: {t}}}, sinks: {http}}}
"#
            ),
        ),
        &[("ANKUSA_TEST_NEW_SECRET", NEW)],
    )
    .await;
    let files = [
        ("github", "github/push_new_branch.json"),
        ("github", "github/issues_opened.json"),
        ("github", "github/pull_request_opened.json"),
        ("stripe", "stripe/invoice_paid.json"),
        ("stripe", "stripe/customer_created.json"),
        ("shopify", "shopify/orders_create.json"),
        (
            "stdwh",
            "standard-webhooks/contact_created_multi_signature.json",
        ),
    ];
    // idempotency key -> the corpus hook sent.
    let mut sent: HashMap<String, Hook> = HashMap::new();
    for (source, file) in files {
        let h = Hook::load(file);
        let a = relay
            .post(
                &format!("/hooks/{source}"),
                &h.send_headers(),
                h.body.clone(),
            )
            .await;
        sent.insert(a.id(), h);
    }
    let got = until(
        "every signed hook at the receiver",
        Duration::from_secs(60),
        async || {
            let d = sink.delivered();
            (d.len() >= files.len()).then_some(d)
        },
    )
    .await;
    assert_eq!(got.len(), files.len(), "{got:?}");
    for r in &got {
        let id = r.id();
        let h = sent
            .get(&id)
            .unwrap_or_else(|| panic!("a delivery of no hook sent: {id}"));
        assert_eq!(
            r.body, h.body,
            "{}: the body signed and sent is the stored body",
            h.file
        );
        assert_eq!(r.header_count("webhook-id"), 1, "{}", h.file);
        assert_eq!(r.header_count("webhook-timestamp"), 1, "{}", h.file);
        assert_eq!(r.header_count("webhook-signature"), 1, "{}", h.file);
        assert_eq!(
            r.header("webhook-id").as_deref(),
            Some(id.as_str()),
            "{}: webhook-id is the idempotency key",
            h.file
        );
        let sig = r.header("webhook-signature").expect("signature");
        let entries: Vec<&str> = sig.split(' ').collect();
        assert_eq!(
            entries,
            [library_signature(OLD, r), library_signature(NEW, r)],
            "{}: one signature per secret, in the order of secrets",
            h.file
        );
        assert!(
            verifies(OLD, r),
            "{}: a receiver knowing only the old secret",
            h.file
        );
        assert!(
            verifies(NEW, r),
            "{}: a receiver knowing only the new secret",
            h.file
        );
        assert!(
            !verifies(OTHER, r),
            "{}: a receiver with another secret must refuse",
            h.file
        );
        // A flipped byte of the body no longer verifies.
        let mut tampered = r.clone();
        tampered.body[0] ^= 0x01;
        assert!(!verifies(NEW, &tampered), "{}", h.file);
    }
    // The Standard Webhooks provider's own headers did not travel.
    let stdwh = got
        .iter()
        .find(|r| r.header("x-ankusa-source").as_deref() == Some("stdwh"))
        .expect("stdwh delivery");
    assert_ne!(
        stdwh.header("webhook-id").as_deref(),
        Some("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
    );
    assert!(
        !stdwh
            .header("webhook-signature")
            .unwrap_or_default()
            .contains("v1a,"),
        "the provider's signature was forwarded"
    );
    let log = relay.log();
    for secret in [OLD, NEW, &OLD[6..], &NEW[6..]] {
        assert!(
            !log.contains(secret),
            "a signing secret is in the relay's log:\n{log}"
        );
    }
}

/// The same hook delivered again carries the same `webhook-id`: after a 500
/// (a retry, attempt 2), and after the relay was SIGKILLed holding the
/// request and restarted on its store (attempt 1 again). The restart also
/// finishes the rotation (only the new secret left): the redelivery verifies
/// for a receiver that knows only the new secret, and no longer with the old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_after_a_retry_or_a_restart_carries_the_same_webhook_id() {
    let killed = Arc::new(AtomicBool::new(false));
    let k = Arc::clone(&killed);
    let sink = Sink::start(move |r| {
        let file = r.header("x-github-event").unwrap_or_default();
        match file.as_str() {
            // The push is held until the relay dies with it.
            "push" if !k.load(Ordering::SeqCst) => Reply::Hold,
            // The issue is refused once.
            "issues" if r.attempt() == 1 => Reply::Status(500),
            _ => Reply::Status(200),
        }
    })
    .await;
    let template = |secrets: &str| {
        config(
            "rocksdb",
            &format!(
                r#"
retry: {{base_ms: 10, max_ms: 20}}
sources:
  - name: github
    verification: {{type: github, secrets: ["It's a Secret to Everybody"]}}
    sinks: [{{type: http, url: '{}', timeout_ms: 60000, signing: {{type: standard_webhooks, secrets: {secrets}}}}}]
"#,
                sink.url()
            ),
        )
    };
    let mut relay = Relay::start(&template(&format!("[{OLD}, {NEW}]"))).await;
    let push = Hook::load("github/push_new_branch.json");
    let issue = Hook::load("github/issues_opened.json");
    let push_id = relay
        .post("/hooks/github", &push.send_headers(), push.body.clone())
        .await
        .id();
    let issue_id = relay
        .post("/hooks/github", &issue.send_headers(), issue.body.clone())
        .await
        .id();

    let issue_reqs = until(
        "the issue refused once, then delivered",
        Duration::from_secs(60),
        async || {
            let all: Vec<Req> = sink
                .requests()
                .into_iter()
                .filter(|r| r.id() == issue_id)
                .collect();
            (all.len() >= 2 && sink.answer_of(all[1].n) == Some(200)).then_some(all)
        },
    )
    .await;
    assert_eq!(issue_reqs.len(), 2, "{issue_reqs:?}");
    assert_eq!((issue_reqs[0].attempt(), issue_reqs[1].attempt()), (1, 2));
    assert_eq!(sink.answer_of(issue_reqs[0].n), Some(500));
    for r in &issue_reqs {
        assert_eq!(
            r.header("webhook-id").as_deref(),
            Some(issue_id.as_str()),
            "attempt {}",
            r.attempt()
        );
        assert!(
            verifies(OLD, r) && verifies(NEW, r),
            "attempt {}",
            r.attempt()
        );
        assert_eq!(r.body, issue.body);
    }

    until(
        "the push held by the receiver",
        Duration::from_secs(60),
        async || {
            sink.requests()
                .iter()
                .any(|r| r.id() == push_id)
                .then_some(())
        },
    )
    .await;
    // The issue's delivery committed before the kill (else it is, rightly,
    // delivered again after the restart).
    until(
        "the issue's delivery committed",
        Duration::from_secs(60),
        async || (relay.metric("ankusa_dispatch_delivered_total").await == 1.0).then_some(()),
    )
    .await;
    relay.kill();
    killed.store(true, Ordering::SeqCst);
    relay.set_template(&template(&format!("[{NEW}]")));
    relay.restart().await;
    let push_reqs = until(
        "the push delivered after the restart",
        Duration::from_secs(60),
        async || {
            let all: Vec<Req> = sink
                .requests()
                .into_iter()
                .filter(|r| r.id() == push_id)
                .collect();
            (all.len() >= 2 && sink.answer_of(all[1].n) == Some(200)).then_some(all)
        },
    )
    .await;
    assert_eq!(push_reqs.len(), 2, "{push_reqs:?}");
    assert_eq!(
        sink.answer_of(push_reqs[0].n),
        None,
        "the first request died with the relay"
    );
    let (first, again) = (&push_reqs[0], &push_reqs[1]);
    assert_eq!(
        again.attempt(),
        1,
        "a recovered row goes back as a first attempt"
    );
    assert_eq!(
        first.header("webhook-id").as_deref(),
        Some(push_id.as_str())
    );
    assert_eq!(
        again.header("webhook-id").as_deref(),
        Some(push_id.as_str()),
        "the redelivery carries the same webhook-id"
    );
    assert_eq!(again.body, push.body);
    let ts = |r: &Req| {
        r.header("webhook-timestamp")
            .and_then(|t| t.parse::<u64>().ok())
            .expect("timestamp")
    };
    assert!(
        ts(again) >= ts(first),
        "the redelivery is signed at its own attempt"
    );
    assert!(verifies(OLD, first) && verifies(NEW, first));
    assert!(
        verifies(NEW, again),
        "a receiver knowing only the new secret"
    );
    assert!(
        !verifies(OLD, again),
        "the old secret was retired at the restart"
    );
    assert_eq!(
        again.header("webhook-signature"),
        Some(library_signature(NEW, again))
    );
    assert_eq!(sink.delivered().len(), 2);
    assert!(
        sink.requests()
            .iter()
            .all(|r| r.header("webhook-id") == Some(r.id()))
    );
}

/// `type: hmac` reproduces the providers' own signatures of the corpus
/// bodies: GitHub's `X-Hub-Signature-256` (hex, `sha256=`) and Shopify's
/// `X-Shopify-Hmac-Sha256` (base64) with the providers' secrets, computed by
/// GitHub and Shopify, not by us; the default header checked with the
/// `hmac-sha256` crate. The sink's header replaces the provider's stored one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hmac_signing_matches_the_providers_own_signatures() {
    let github_rx = Sink::ok().await;
    let shopify_rx = Sink::ok().await;
    let plain_rx = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            r#"
sources:
  - name: github
    verification: {{type: github, secrets: ["It's a Secret to Everybody"]}}
    sinks:
      - {{type: http, name: gh, url: '{gh}', signing: {{type: hmac, secret: "It's a Secret to Everybody", header: X-Hub-Signature-256, prefix: 'sha256='}}}}
      - {{type: http, name: plain, url: '{plain}', signing: {{type: hmac, secret: 'relay-to-service-key'}}}}
  - name: shopify
    verification: {{type: shopify, secrets: [shpss_corpus_test_secret_0001]}}
    sinks:
      - {{type: http, url: '{shop}', signing: {{type: hmac, secret: shpss_corpus_test_secret_0001, header: x-shopify-hmac-sha256, encoding: base64}}}}
"#,
            gh = github_rx.url(),
            plain = plain_rx.url(),
            shop = shopify_rx.url(),
        ),
    ))
    .await;
    let github = [
        "github/push_new_branch.json",
        "github/issues_opened.json",
        "github/ping.json",
    ]
    .map(Hook::load);
    for h in &github {
        relay
            .post("/hooks/github", &h.send_headers(), h.body.clone())
            .await
            .id();
    }
    let shop = Hook::load("shopify/orders_create.json");
    relay
        .post("/hooks/shopify", &shop.send_headers(), shop.body.clone())
        .await
        .id();
    let deadline = Duration::from_secs(60);
    let gh = until("the GitHub hooks", deadline, async || {
        (github_rx.delivered().len() >= 3).then(|| github_rx.delivered())
    })
    .await;
    let plain = until("the GitHub hooks (plain)", deadline, async || {
        (plain_rx.delivered().len() >= 3).then(|| plain_rx.delivered())
    })
    .await;
    let sh = until("the Shopify hook", deadline, async || {
        (!shopify_rx.delivered().is_empty()).then(|| shopify_rx.delivered())
    })
    .await;
    for h in &github {
        let r = gh
            .iter()
            .find(|r| r.body == h.body)
            .unwrap_or_else(|| panic!("{} not delivered byte for byte", h.file));
        assert_eq!(r.header_count("x-hub-signature-256"), 1, "{}", h.file);
        assert_eq!(
            r.header("x-hub-signature-256").as_deref(),
            h.header("X-Hub-Signature-256"),
            "{}: GitHub's own signature",
            h.file
        );
        let r = plain
            .iter()
            .find(|r| r.body == h.body)
            .unwrap_or_else(|| panic!("{} not delivered byte for byte", h.file));
        let want: String = hmac_sha256::HMAC::mac(&h.body, b"relay-to-service-key")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(r.header("x-ankusa-signature"), Some(want), "{}", h.file);
        assert_eq!(r.header_count("webhook-signature"), 0);
    }
    assert_eq!(sh.len(), 1);
    assert_eq!(sh[0].body, shop.body);
    assert_eq!(sh[0].header_count("x-shopify-hmac-sha256"), 1);
    assert_eq!(
        sh[0].header("x-shopify-hmac-sha256").as_deref(),
        shop.header("X-Shopify-Hmac-Sha256"),
        "Shopify's own signature"
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode(hmac_sha256::HMAC::mac(
        &shop.body,
        b"shpss_corpus_test_secret_0001",
    ));
    assert_eq!(sh[0].header("x-shopify-hmac-sha256"), Some(b64));
}

/// A broken `signing` is a load error of check-config and serve naming the
/// source, the sink and the option, every problem in one run, and never
/// quoting a secret.
#[test]
fn signing_problems_are_load_errors_naming_source_sink_and_option() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let data = dir.join("data");
    let yaml = format!(
        r#"node: {{data_dir: '{data}', store: rocksdb}}
listeners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}
sources:
  - name: billing
    sinks:
      - {{type: http, name: orders, url: 'http://127.0.0.1:9/in', signing: {{type: standard_webhooks, secrets: [{NEW}, 'whsec_not base64!', 'env:ANKUSA_SIGNING_TEST_UNSET']}}}}
      - {{type: http, name: empty, url: 'http://127.0.0.1:9/in', headers: {{webhook-timestamp: '1'}}, signing: {{type: standard_webhooks, secrets: []}}}}
      - {{type: http, name: clash, url: 'http://127.0.0.1:9/in', headers: {{Webhook-Id: fixed}}, signing: {{type: standard_webhooks, secrets: [{OLD}]}}}}
      - {{type: http, name: plain, url: 'http://127.0.0.1:9/in', signing: {{type: hmac, secret: 'sekrit-value', encoding: hex32, secrets: [a]}}}}
      - {{type: http, name: typo, url: 'http://127.0.0.1:9/in', signing: {{type: standard_webhook, secrets: [{OLD}]}}}}
"#,
        data = data.display()
    );
    let file = dir.join("bad.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let expected = [
        r#"source "billing", sink "orders" (http): option "signing.secrets[1]": is not a Standard Webhooks secret: expected whsec_ followed by (padded, standard) base64"#,
        r#"source "billing", sink "orders" (http): option "signing.secrets[2]": environment variable ANKUSA_SIGNING_TEST_UNSET is not set"#,
        r#"source "billing", sink "empty" (http): option "signing.secrets": is empty: name at least one whsec_ (HMAC) or whsk_ (Ed25519) secret"#,
        r#"source "billing", sink "empty" (http): option "headers.webhook-timestamp": is written by the sink's signing (type standard_webhooks) and cannot be configured"#,
        r#"source "billing", sink "clash" (http): option "headers.Webhook-Id": is written by the sink's signing (type standard_webhooks) and cannot be configured"#,
        r#"source "billing", sink "plain" (http): option "signing.secrets": type hmac signs with one `secret`"#,
        r#"source "billing", sink "plain" (http): option "signing.encoding": must be hex or base64"#,
        r#"source "billing", sink "typo" (http): option "signing.type": must be standard_webhooks or hmac, found "standard_webhook""#,
    ];
    let check = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    let serve = run_cli(
        &[
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
        dir,
    );
    for (what, (status, out)) in [("check-config", check), ("serve", serve)] {
        assert!(!status.success(), "{what} accepted:\n{out}");
        for e in expected {
            assert!(out.contains(e), "{what} output lacks\n  {e}\ngot:\n{out}");
        }
        // Each problem once (the config crate's and the adapter's checks of
        // one option are one problem).
        assert_eq!(
            out.matches("option \"signing.secrets[2]\"").count(),
            1,
            "{what}:\n{out}"
        );
        for secret in ["sekrit-value", &NEW[6..], &OLD[6..]] {
            assert!(!out.contains(secret), "{what} printed a secret:\n{out}");
        }
    }
    assert!(
        !data.exists(),
        "serve created the data_dir of an invalid config"
    );

    // The same file with the problems fixed loads.
    let good = yaml
        .replace(", 'whsec_not base64!', 'env:ANKUSA_SIGNING_TEST_UNSET'", "")
        .replace(
            "headers: {webhook-timestamp: '1'}, signing: {type: standard_webhooks, secrets: []}",
            &format!("signing: {{type: standard_webhooks, secrets: [{OLD}]}}"),
        )
        .replace("headers: {Webhook-Id: fixed}, ", "")
        .replace(", encoding: hex32, secrets: [a]", ", encoding: base64")
        .replace("standard_webhook,", "standard_webhooks,");
    std::fs::write(&file, &good).expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(
        status.success(),
        "check-config refused the fixed file:\n{out}\n---\n{good}"
    );
}
