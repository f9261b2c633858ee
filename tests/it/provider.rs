//! Provider headers on broker and cloud sinks (`forward_headers`,
//! sinks/src/forward.rs): real GitHub and Shopify corpus hooks, verified with
//! the corpus secrets, through a broker sink that forwards some of their stored
//! headers; each broker's test module consumes the real broker and hands what
//! it got to [`check`].

use std::collections::HashMap;

use crate::corpus::Hook;
use crate::relay::Relay;
use crate::stripe::Received;

/// The corpus files sent: two GitHub events and two Shopify topics.
pub const FILES: [&str; 4] = [
    "github/push_new_branch.json",
    "shopify/orders_create.json",
    "github/issues_opened.json",
    "shopify/products_update.json",
];

/// The headers the sinks of [`sources_yaml`] forward (lower-case).
pub const CHOSEN: [&str; 4] = [
    "x-github-event",
    "x-github-delivery",
    "x-shopify-topic",
    "x-shopify-shop-domain",
];

/// [`CHOSEN`] as a YAML flow list, for `forward_headers: {LIST}`.
pub const CHOSEN_YAML: &str =
    "[X-GitHub-Event, x-github-delivery, X-Shopify-Topic, x-shopify-shop-domain]";

/// Headers the providers sent and the store kept, that no sink of
/// [`sources_yaml`] chose: they must not arrive (under any case).
pub const NOT_CHOSEN: [&str; 7] = [
    "x-hub-signature-256",
    "x-github-hook-id",
    "user-agent",
    "x-shopify-hmac-sha256",
    "x-shopify-webhook-id",
    "x-shopify-api-version",
    "content-length",
];

/// The `sources:` section: `github` and `shopify` (default tenant, each
/// verifying the corpus signatures), each with the one sink `sink` (a YAML
/// flow mapping; `{SOURCE}` in it is replaced by the source's name).
pub fn sources_yaml(sink: &str) -> String {
    format!(
        "sources:\n  - {{name: github, verification: {{type: github, secrets: [\"It's a Secret to Everybody\"]}}, sinks: [{}]}}\n  - {{name: shopify, verification: {{type: shopify, secrets: [shpss_corpus_test_secret_0001]}}, sinks: [{}]}}\n",
        sink.replace("{SOURCE}", "github"),
        sink.replace("{SOURCE}", "shopify"),
    )
}

/// One accepted hook: the corpus file and the idempotency key answered.
#[derive(Clone, Debug)]
pub struct Sent {
    pub hook: Hook,
    pub id: String,
}

/// Posts `files` (corpus paths) to their provider's source; each must be 200.
pub async fn send(relay: &Relay, files: &[&str]) -> Vec<Sent> {
    let mut out = Vec::new();
    for f in files {
        let hook = Hook::load(f);
        let a = relay
            .post(
                &format!("/hooks/{}", hook.provider()),
                &hook.send_headers(),
                hook.body.clone(),
            )
            .await;
        assert_eq!(a.status, 200, "{f}: {a:?}");
        out.push(Sent { id: a.id(), hook });
    }
    out
}

/// Every sent hook arrived once, byte for byte, and carries each header of
/// `chosen` the provider sent, under its lower-case name, with the provider's
/// value (and none it did not send); no header of [`NOT_CHOSEN`] that is not
/// in `chosen` arrived, under any case. Returns the messages by idempotency
/// key.
pub fn check<'a>(
    sent: &[Sent],
    got: &'a [Received],
    chosen: &[&str],
) -> HashMap<String, &'a Received> {
    assert_eq!(got.len(), sent.len(), "messages: {got:?}");
    let mut by_id = HashMap::new();
    for r in got {
        let id = r
            .attrs
            .get("ankusa_idempotency_key")
            .unwrap_or_else(|| panic!("no idempotency key: {:?}", r.attrs))
            .clone();
        assert!(by_id.insert(id.clone(), r).is_none(), "{id} arrived twice");
    }
    for s in sent {
        let file = &s.hook.file;
        let r = by_id
            .get(&s.id)
            .unwrap_or_else(|| panic!("{file} ({}) did not arrive", s.id));
        assert!(
            r.body == s.hook.body,
            "{file}: the body is not the one sent"
        );
        for name in chosen {
            assert_eq!(
                r.attrs.get(*name).map(String::as_str),
                s.hook.header(name),
                "{file}: header {name}; got {:?}",
                r.attrs
            );
        }
        for name in NOT_CHOSEN.iter().filter(|n| !chosen.contains(n)) {
            assert!(
                !r.attrs.keys().any(|k| k.eq_ignore_ascii_case(name)),
                "{file}: {name} was not chosen but arrived: {:?}",
                r.attrs
            );
        }
    }
    by_id
}

/// The provider headers a hook arrives with under `forward_headers: all`:
/// every header sent but the framing, the content type and the host, by
/// lower-case name (the corpus sends each name once).
pub fn all_forwarded(hook: &Hook) -> Vec<(String, String)> {
    hook.send_headers()
        .into_iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .filter(|(n, _)| n != "content-type")
        .collect()
}

/// Bad `forward_headers` are load errors naming the source, the sink and the
/// option, every one in one `check-config` run (and `serve` refuses the
/// file): not a list nor `all`, a bad header name, a name the sink uses
/// itself, one no sink forwards, one the medium cannot carry, too many for
/// SQS, a header the store_headers policy drops or hashes, and redis publish
/// mode. A valid file passes without connecting anywhere.
#[cfg(all(
    feature = "redis",
    feature = "sqs",
    feature = "nats",
    feature = "kafka",
    feature = "pubsub",
    feature = "rabbitmq"
))]
#[test]
fn bad_forward_headers_are_refused_at_load_naming_source_sink_and_option() {
    use std::ffi::OsStr;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let data = dir.join("data");
    let q = "https://sqs.eu-west-1.amazonaws.com/1/q";
    let bad = format!(
        r#"node: {{data_dir: '{d}'}}
store_headers: {{headers: {{x-secret: drop, x-api-key: hash}}}}
sources:
  - name: github
    sinks:
      - {{type: redis, name: r, url: 'redis://127.0.0.1:6379', stream: s, forward_headers: some}}
      - {{type: redis, name: rp, url: 'redis://127.0.0.1:6379', mode: publish, channel: c, forward_headers: [x-github-event]}}
      - {{type: nats, name: n, url: 'nats://127.0.0.1:4222', subject: s, forward_headers: [Nats-Msg-Id, 'bad name', ankusa_tenant]}}
      - {{type: sqs, name: q, queue_url: '{q}', forward_headers: [a, b, c, d, e, f]}}
      - {{type: sqs, name: q2, queue_url: '{q}', forward_headers: [x-a+b, content-type, host]}}
      - {{type: kafka, name: k, brokers: '127.0.0.1:9092', topic: t, forward_headers: [x-secret, x-api-key]}}
      - {{type: kafka, name: k2, brokers: '127.0.0.1:9092', topic: t, forward_headers: [content_type]}}
      - {{type: pubsub, name: p, project: p, topic: t, emulator_host: '127.0.0.1:1', forward_headers: [goog-x]}}
      - {{type: rabbitmq, name: m, url: 'amqp://127.0.0.1', exchange: x, forward_headers: [cc, x-github-event, X-GitHub-Event]}}
  - name: shopify
    store_headers: {{default: drop, headers: {{x-shopify-topic: keep}}}}
    sinks:
      - {{type: kafka, name: k, brokers: '127.0.0.1:9092', topic: t, forward_headers: [x-shopify-topic, x-shopify-shop-domain]}}
"#,
        d = data.display()
    );
    let file = dir.join("bad.yaml");
    std::fs::write(&file, &bad).expect("write");
    let at = |source: &str, sink: &str, kind: &str| {
        format!("source \"{source}\", sink \"{sink}\" ({kind}): option \"forward_headers\": ")
    };
    let expected = [
        format!(
            "{}must be `all` or a list of header names, found \"some\"",
            at("github", "r", "redis")
        ),
        format!(
            "{}`mode: publish` sends the body alone",
            at("github", "rp", "redis")
        ),
        format!(
            "{}\"bad name\" is not a valid HTTP header name",
            at("github", "n", "nats")
        ),
        format!(
            "{}\"nats-msg-id\" is a name the nats sink uses itself",
            at("github", "n", "nats")
        ),
        format!(
            "{}\"ankusa_tenant\" is a name the nats sink uses itself",
            at("github", "n", "nats")
        ),
        format!(
            "{}6 headers listed; a sqs message carries at most 5 besides the sink's own",
            at("github", "q", "sqs")
        ),
        format!(
            "{}\"x-a+b\" has `+`; an SQS message attribute name has only letters, digits, `_`, `-` and `.`",
            at("github", "q2", "sqs")
        ),
        format!(
            "{}\"content-type\": the sink carries the content type already",
            at("github", "q2", "sqs")
        ),
        format!(
            "{}\"host\": a hop-by-hop, framing or relay header, never forwarded",
            at("github", "q2", "sqs")
        ),
        format!(
            "{}header \"x-secret\" is not kept by the store: the instance store_headers policy drops it",
            at("github", "k", "kafka")
        ),
        format!(
            "{}header \"x-api-key\" is not kept by the store: the instance store_headers policy hashes it",
            at("github", "k", "kafka")
        ),
        format!(
            "{}\"content_type\" is a name the kafka sink uses itself",
            at("github", "k2", "kafka")
        ),
        format!(
            "{}\"goog-x\" is a name the pubsub sink uses itself",
            at("github", "p", "pubsub")
        ),
        format!(
            "{}\"cc\" is a name the rabbitmq sink uses itself",
            at("github", "m", "rabbitmq")
        ),
        format!(
            "{}header \"x-github-event\" is listed twice (names are case-insensitive)",
            at("github", "m", "rabbitmq")
        ),
        format!(
            "{}header \"x-shopify-shop-domain\" is not kept by the store: the source's store_headers override drops it",
            at("shopify", "k", "kafka")
        ),
    ];
    for args in [
        vec![OsStr::new("check-config"), file.as_os_str()],
        vec![
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
    ] {
        let (status, out) = crate::relay::run_cli(&args, dir);
        assert!(!status.success(), "{args:?}: {out}");
        for e in &expected {
            assert!(out.contains(e.as_str()), "{args:?}: lacks\n  {e}\n{out}");
        }
        assert!(
            out.contains(&format!("{} problems in the config:", expected.len())),
            "{args:?}: {out}"
        );
    }
    assert!(!data.exists(), "serve created the data_dir");

    let good = format!(
        r#"node: {{data_dir: '{d}'}}
sources:
  - name: github
    sinks:
      - {{type: redis, name: r, url: 'redis://127.0.0.1:6379', stream: s, forward_headers: [X-GitHub-Event, x-github-delivery]}}
      - {{type: sqs, name: q, queue_url: '{q}', forward_headers: all}}
      - {{type: nats, name: n, url: 'nats://127.0.0.1:4222', subject: s, forward_headers: []}}
"#,
        d = data.display()
    );
    std::fs::write(&file, &good).expect("write");
    let (status, out) = crate::relay::run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(status.success(), "{out}");
}
