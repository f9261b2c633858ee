//! `ankusa send` of the GitHub and Stripe corpus files to a relay whose source
//! delivers to the file sink (the embedded demo's shape) puts every hook in the
//! NDJSON file, body byte for byte, in commit order on the ordered sink's
//! keyless lane; with `--resign`, the corpus signed again now with other
//! secrets reaches sources that verify with those and check freshness.

use std::ffi::OsStr;
use std::time::Duration;

use base64::Engine;

use crate::corpus::{corpus_dir, sha256_hex};
use crate::relay::{Relay, config, run_cli};
use crate::sink::{Sink, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_corpus_files_to_the_file_sink() {
    let relay = Relay::start(&config(
        "memory",
        "
sources:
  - name: demo
    path: /hooks/demo
    dedupe: {header: webhook-id}
    sinks:
      - {type: file, name: deliveries, path: '{DIR}/deliveries.ndjson', ordered: true, ordering_key: {header: x-entity-id}}
",
    ))
    .await;
    let files = corpus_files(&["github", "stripe"]);
    let url = format!("http://{}", relay.ingest);
    let mut args: Vec<&OsStr> = files.iter().map(|f| f.as_os_str()).collect();
    args.splice(
        0..0,
        [
            OsStr::new("send"),
            OsStr::new("--url"),
            OsStr::new(&url),
            OsStr::new("--path"),
            OsStr::new("/hooks/demo"),
        ],
    );
    let (status, out) = run_cli(&args, relay.dir.path());
    assert!(status.success(), "ankusa send: {out}");
    assert!(
        out.contains(&format!("{} sent, 0 not accepted", files.len())),
        "{out}"
    );

    let path = relay.dir.path().join("deliveries.ndjson");
    let lines = until(
        "every hook in the NDJSON file",
        Duration::from_secs(60),
        async || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // Only complete lines: the sink may be writing the next one (a 1 MiB
            // body is a long line) while this reads.
            let lines: Vec<serde_json::Value> = text
                .split_inclusive('\n')
                .filter(|l| l.ends_with('\n'))
                .map(|l| serde_json::from_str(l).expect("an NDJSON line"))
                .collect();
            (lines.len() >= files.len()).then_some(lines)
        },
    )
    .await;
    assert_eq!(lines.len(), files.len());
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(corpus_dir().join("index.json")).expect("index"),
    )
    .expect("json");
    let want: Vec<String> = files
        .iter()
        .map(|f| {
            let name = f
                .strip_prefix(corpus_dir())
                .expect("in corpus")
                .display()
                .to_string();
            index["files"]
                .as_array()
                .expect("files")
                .iter()
                .find(|e| e["file"] == name.as_str())
                .expect("indexed")["body_sha256"]
                .as_str()
                .expect("sha")
                .to_owned()
        })
        .collect();
    let got: Vec<String> = lines
        .iter()
        .map(|l| {
            sha256_hex(
                &base64::engine::general_purpose::STANDARD
                    .decode(l["body_base64"].as_str().expect("body_base64"))
                    .expect("base64"),
            )
        })
        .collect();
    assert_eq!(
        got, want,
        "bodies, in the order they were sent (one keyless lane)"
    );
    let mut last = 0;
    for l in &lines {
        assert_eq!(l["ordered"], true);
        assert_eq!(l["ordering_key"], "default/demo");
        assert_eq!(
            (
                l["tenant"].as_str(),
                l["source"].as_str(),
                l["sink"].as_str()
            ),
            (Some("default"), Some("demo"), Some("deliveries"))
        );
        let seq = l["seq"].as_u64().expect("seq");
        assert!(seq > last, "seq {seq} after {last}: not commit order");
        last = seq;
    }
}

/// A file `ankusa send` cannot read or parse is an error naming the file, and
/// then nothing is posted; `--keep-going` posts the others and the summary
/// counts only what was posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_refuses_unreadable_files_and_counts_only_what_it_posted() {
    let relay = Relay::start(&config(
        "memory",
        "
sources:
  - name: demo
    path: /hooks/demo
    sinks:
      - {type: file, name: deliveries, path: '{DIR}/deliveries.ndjson'}
",
    ))
    .await;
    let url = format!("http://{}", relay.ingest);
    let good = corpus_dir().join("stripe/customer_created.json");
    let missing = relay.dir.path().join("no-such-hook.json");
    let not_corpus = relay.dir.path().join("not-a-hook.json");
    std::fs::write(&not_corpus, "{\"body\": 1}").expect("write");
    let send = |extra: &[&OsStr]| {
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("send"),
            OsStr::new("--url"),
            OsStr::new(&url),
            OsStr::new("--path"),
            OsStr::new("/hooks/demo"),
        ];
        args.extend_from_slice(extra);
        args.extend([
            good.as_os_str(),
            missing.as_os_str(),
            not_corpus.as_os_str(),
            good.as_os_str(),
        ]);
        run_cli(&args, relay.dir.path())
    };

    let (status, out) = send(&[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&format!("{}: cannot read it", missing.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("{}: not a corpus file", not_corpus.display())),
        "{out}"
    );
    assert!(
        out.contains("2 of 4 files could not be loaded; nothing sent"),
        "{out}"
    );
    assert!(
        !out.contains(" sent, "),
        "no summary of posts when nothing was posted: {out}"
    );
    let accepted = relay.metric("ankusa_ingest_accepted_total").await;
    assert_eq!(accepted, 0.0, "nothing posted: {out}");

    // An address without a scheme is refused before anything is read or sent.
    let (status, out) = run_cli(
        &[
            OsStr::new("send"),
            OsStr::new("--url"),
            OsStr::new("127.0.0.1:8080"),
            good.as_os_str(),
        ],
        relay.dir.path(),
    );
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("is not an http:// or https:// address"),
        "{out}"
    );

    let (status, out) = send(&[OsStr::new("--keep-going")]);
    assert!(!status.success(), "files were skipped: {out}");
    assert!(
        out.contains("2 sent, 0 not accepted, 2 skipped (could not be loaded)"),
        "{out}"
    );
    let accepted = until(
        "the two posted hooks accepted",
        Duration::from_secs(60),
        async || {
            let n = relay.metric("ankusa_ingest_accepted_total").await;
            (n >= 2.0).then_some(n)
        },
    )
    .await;
    assert_eq!(accepted, 2.0, "{out}");
}

/// The verifying relay's secrets: none is the corpus's
/// (fixtures/corpus/README.md), so no corpus file verifies as stored.
const STRIPE_SECRET: &str = "whsec_resign_it_stripe";
const GITHUB_SECRET: &str = "resign-it github secret";
const SHOPIFY_SECRET: &str = "shpss_resign_it_shopify";
const SLACK_SECRET: &str = "resign-it-slack-signing-secret";
/// `whsec_` and the base64 of 34 bytes.
const STDWH_SECRET: &str = "whsec_YW5rdXNhIHJlc2lnbiB0ZXN0IGtleSwgbm90IHJlYWwhIQ==";

/// The `--resign` arguments for the relay's secrets (`only` limits them to
/// the schemes named).
fn resign_args(only: &[&str]) -> Vec<String> {
    [
        ("stripe", STRIPE_SECRET),
        ("github", GITHUB_SECRET),
        ("shopify", SHOPIFY_SECRET),
        ("slack", SLACK_SECRET),
        ("standard_webhooks", STDWH_SECRET),
    ]
    .into_iter()
    .filter(|(scheme, _)| only.is_empty() || only.contains(scheme))
    .flat_map(|(scheme, secret)| ["--resign".to_owned(), format!("{scheme}={secret}")])
    .collect()
}

/// The corpus files of these provider folders, sorted.
fn corpus_files(dirs: &[&str]) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for dir in dirs {
        let mut d: Vec<_> = std::fs::read_dir(corpus_dir().join(dir))
            .expect("corpus dir")
            .map(|e| e.expect("entry").path())
            .collect();
        d.sort();
        files.extend(d);
    }
    files
}

/// `ankusa send` of `files` to `url` with `extra` options first.
fn send_files(
    url: &str,
    extra: &[String],
    files: &[std::path::PathBuf],
    cwd: &std::path::Path,
) -> (std::process::ExitStatus, String) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("send"), OsStr::new("--url"), OsStr::new(url)];
    args.extend(extra.iter().map(OsStr::new));
    args.extend(files.iter().map(|f| f.as_os_str()));
    run_cli(&args, cwd)
}

/// `--resign` signs each corpus file again now with the secret given for
/// its scheme: a relay whose Stripe, GitHub, Shopify, Slack and Standard
/// Webhooks sources verify with secrets of their own and the default
/// freshness window (300 s) refuses every file as stored (4xx) and accepts
/// every file re-signed (2xx), and the sink gets each body byte for byte. A
/// file whose scheme has no `--resign` is named and nothing is posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_lets_sources_with_their_own_secrets_and_a_freshness_window_take_the_corpus() {
    let sink = Sink::ok().await;
    let url = sink.url();
    let http = |name: &str| format!("[{{type: http, url: '{url}/{name}'}}]");
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
sources:
  - {{name: stripe, verification: {{type: stripe, secrets: ['{STRIPE_SECRET}'], tolerance_ms: 300000}}, sinks: {}}}
  - {{name: github, verification: {{type: github, secrets: ['{GITHUB_SECRET}']}}, sinks: {}}}
  - {{name: shopify, verification: {{type: shopify, secrets: ['{SHOPIFY_SECRET}']}}, sinks: {}}}
  - {{name: slack, verification: {{type: slack, secrets: ['{SLACK_SECRET}'], tolerance_ms: 300000}}, sinks: {}}}
  - {{name: stdwh, verification: {{type: standard_webhooks, secrets: ['{STDWH_SECRET}'], tolerance_ms: 300000}}, sinks: {}}}
  - {{name: svix, verification: {{type: standard_webhooks, secrets: ['{STDWH_SECRET}'], tolerance_ms: 300000}}, sinks: {}}}
",
            http("stripe"),
            http("github"),
            http("shopify"),
            http("slack"),
            http("stdwh"),
            http("svix"),
        ),
    ))
    .await;
    let ingest = format!("http://{}", relay.ingest);
    let cwd = relay.dir.path();
    let files = corpus_files(&["stripe", "github", "shopify", "slack", "standard-webhooks"]);
    let n = files.len();

    // A scheme without its --resign: named, with the option, and nothing
    // posted (the other files load).
    let some = [
        corpus_dir().join("stripe/invoice_paid.json"),
        corpus_dir().join("shopify/products_update.json"),
        corpus_dir().join("slack/event_callback_app_mention.json"),
        corpus_dir().join("github/ping.json"),
    ];
    let (status, out) = send_files(&ingest, &resign_args(&["stripe", "github"]), &some, cwd);
    assert!(!status.success(), "{out}");
    for (file, scheme, header) in [
        (&some[1], "shopify", "X-Shopify-Hmac-Sha256"),
        (&some[2], "slack", "X-Slack-Signature"),
    ] {
        assert!(
            out.contains(&format!(
                "{}: signed with {scheme} ({header}), but no --resign {scheme}=SECRET was given",
                file.display()
            )),
            "{out}"
        );
    }
    assert!(
        out.contains("2 of 4 files could not be loaded; nothing sent"),
        "{out}"
    );
    assert!(!out.contains(" -> "), "nothing posted: {out}");
    for secret in [STRIPE_SECRET, GITHUB_SECRET] {
        assert!(!out.contains(secret), "a secret in the output: {out}");
    }

    // As stored: every file refused, by the wrong secret or by its age.
    let (status, out) = send_files(&ingest, &[], &files, cwd);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&format!("{n} sent, {n} not accepted")),
        "{out}"
    );
    for f in &files {
        let line = format!("{} -> 4", f.display());
        assert!(
            out.contains(&line),
            "{} not refused with a 4xx: {out}",
            f.display()
        );
    }
    assert_eq!(
        relay.metric("ankusa_ingest_accepted_total").await,
        0.0,
        "{out}"
    );
    assert_eq!(sink.request_count(), 0);

    // Re-signed now with the relay's secrets: every file accepted.
    let (status, out) = send_files(&ingest, &resign_args(&[]), &files, cwd);
    assert!(status.success(), "{out}");
    assert!(out.contains(&format!("{n} sent, 0 not accepted")), "{out}");

    // Every hook at the sink, each body byte for byte, at its source's
    // path. Slack's url_verification is answered by the edge and stores
    // nothing.
    let mut want: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter(|f| !f.ends_with("slack/url_verification.json"))
        .map(|f| {
            let hook = crate::corpus::Hook::load(
                &f.strip_prefix(corpus_dir())
                    .expect("in corpus")
                    .display()
                    .to_string(),
            );
            let source = match hook.provider() {
                "standard-webhooks" if hook.header("svix-signature").is_some() => "svix",
                "standard-webhooks" => "stdwh",
                p => p,
            };
            (source.to_owned(), hook.body)
        })
        .collect();
    want.sort();
    let delivered = until(
        "every re-signed hook at the sink",
        Duration::from_secs(120),
        async || {
            let d = sink.delivered();
            let hooks: std::collections::BTreeSet<String> = d.iter().map(|r| r.id()).collect();
            (hooks.len() >= want.len()).then_some(d)
        },
    )
    .await;
    // One delivery per hook (a redelivery repeats its idempotency key); each
    // source's sink URL ends in the source's name.
    let mut got: Vec<(String, Vec<u8>)> = delivered
        .into_iter()
        .map(|r| (r.id(), r))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .map(|r| {
            let source = r.path.rsplit('/').next().unwrap_or_default().to_owned();
            (source, r.body)
        })
        .collect();
    got.sort();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(
            g == w,
            "delivered {} ({} bytes, sha256 {}), expected {} ({} bytes, sha256 {})",
            g.0,
            g.1.len(),
            sha256_hex(&g.1),
            w.0,
            w.1.len(),
            sha256_hex(&w.1)
        );
    }
}

/// A malformed `--resign` stops `ankusa send` before it reads a file or
/// posts anything, naming the value by its scheme and never printing the
/// secret.
#[test]
fn send_refuses_a_malformed_resign_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = corpus_dir().join("stripe/invoice_paid.json");
    // Nothing listens there: a post would fail with another message.
    let url = "http://127.0.0.1:9";
    for (values, expected) in [
        (
            &["stripe"][..],
            "--resign stripe: no secret; expected stripe=SECRET",
        ),
        (
            &["whsec_top_secret_value"][..],
            "--resign value 1 of 1: expected SCHEME=SECRET (SCHEME one of github, stripe, shopify, slack, standard_webhooks, twilio), found no '='",
        ),
        (
            &["paypal=top_secret_value"][..],
            "--resign paypal=...: unknown scheme \"paypal\"",
        ),
        (&["stripe="][..], "--resign stripe=...: the secret is empty"),
        (
            &["standard_webhooks=whsec_top_secret_value!"][..],
            "--resign standard_webhooks=...: secret is not whsec_ followed by base64",
        ),
        (
            &[
                "stripe=whsec_top_secret_value",
                "stripe=whsec_top_secret_value2",
            ][..],
            "--resign stripe=... is given twice: one secret per scheme",
        ),
        (
            &["github=env:ANKUSA_RESIGN_TEST_UNSET"][..],
            "--resign github=...: environment variable ANKUSA_RESIGN_TEST_UNSET is not set",
        ),
    ] {
        let extra: Vec<String> = values
            .iter()
            .flat_map(|v| ["--resign".to_owned(), (*v).to_owned()])
            .collect();
        let (status, out) = send_files(url, &extra, std::slice::from_ref(&file), dir.path());
        assert!(!status.success(), "{values:?}: {out}");
        assert!(out.contains(expected), "{values:?}: {out}");
        assert!(out.contains("nothing sent"), "{values:?}: {out}");
        assert!(!out.contains("top_secret_value"), "{values:?}: {out}");
        assert!(!out.contains(" sent, "), "{values:?}: {out}");
    }
}
