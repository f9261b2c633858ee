//! The example file in the repo and the embedded default both load, into the
//! model they document.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ankusa_config::{
    Config, DEFAULT_YAML, DeadLetterLane, Dedupe, FileSink, HeaderAction, KeySource, NotifyEvent,
    NotifyFormat, OnInvalidSignature, Order, OrderingKey, Retention, SinkKind, SinkRetry,
    StoreBackend, TenantBinding, TypedOptions, Verification,
};
use serde_yaml_ng::Value;

use crate::helpers::load_env;

pub(crate) fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ankusa.example.yaml")
}

pub(crate) const EXAMPLE_ENV: [(&str, &str); 14] = [
    ("ANKUSA_ADMIN_TOKEN", "admin-token-0123456789"),
    ("GITHUB_WEBHOOK_SECRET", "It's a Secret to Everybody"),
    ("GITHUB_WEBHOOK_SECRET_OLD", "old github secret"),
    ("CI_TOKEN", "Bearer ci"),
    ("DEPLOY_BOT_CLIENT_SECRET", "deploy-bot-client-secret"),
    ("LEDGER_PASSWORD", "ledger-password"),
    // RFC 8032 section 7.1 TEST 1's secret key.
    (
        "PARTNER_SIGNING_KEY",
        "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=",
    ),
    (
        "CI_SIGNING_SECRET",
        "whsec_YW5rdXNhLW91dGJvdW5kLXNpZ25pbmcta2V5LW5ldzI=",
    ),
    (
        "CI_SIGNING_SECRET_OLD",
        "whsec_YW5rdXNhLW91dGJvdW5kLXNpZ25pbmcta2V5LW9sZDE=",
    ),
    ("STRIPE_WEBHOOK_SECRET", "whsec_corpus_test_secret_0001"),
    ("SHOPIFY_WEBHOOK_SECRET", "shpss_corpus_test_secret_0001"),
    ("BILLING_SECRET", "billing"),
    (
        "PARTNER_WEBHOOK_SECRET",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ),
    ("UNUSED", "x"),
];

#[test]
fn the_example_file_loads_into_the_model_it_documents() {
    let text = std::fs::read_to_string(example_path()).expect("example file");
    let c = load_env(&text, &EXAMPLE_ENV).unwrap_or_else(|e| panic!("example: {e}"));

    assert_eq!(c.node.name, "relay-1");
    assert_eq!(c.node.store, StoreBackend::RocksDb);
    assert_eq!(
        c.node.attempt_log,
        ankusa_config::AttemptLog {
            enabled: true,
            max_attempts: 20,
            max_body_bytes: 4096,
        }
    );
    assert_eq!(
        c.listeners.ingest,
        "127.0.0.1:8080".parse::<SocketAddr>().expect("addr")
    );
    assert_eq!(
        c.listeners.admin_token.as_ref().map(|t| t.expose()),
        Some("admin-token-0123456789")
    );
    assert!(!c.listeners.metrics_require_token);
    assert_eq!(c.store_headers.action("Authorization"), HeaderAction::Drop);
    assert_eq!(c.store_headers.action("x-api-key"), HeaderAction::Hash);
    assert_eq!(
        c.store_headers.action("x-github-delivery"),
        HeaderAction::Keep
    );
    assert_eq!(c.dispatch.batch, 64);
    assert_eq!(c.retry.max_elapsed_ms, 86_400_000);
    assert_eq!(
        c.tenants
            .iter()
            .map(|t| (t.name.as_str(), t.max_pending))
            .collect::<Vec<_>>(),
        [
            ("default", 100_000),
            ("acme", 100_000),
            ("globex", 20_000),
            // The notifications' internal tenant, bound by notify.max_pending.
            ("_ankusa", 10_000)
        ]
    );
    assert_eq!(
        c.sources
            .iter()
            .map(|s| (s.name.as_str(), s.path.as_str()))
            .collect::<Vec<_>>(),
        [
            ("github", "/hooks/github"),
            ("stripe", "/hooks/stripe"),
            ("shopify", "/hooks/shopify"),
            ("billing", "/hooks/billing"),
            ("partner", "/hooks/partner"),
            // One internal source per notify destination.
            ("_notify-ops-chat", "/_ankusa/notify/ops-chat"),
            ("_notify-incidents", "/_ankusa/notify/incidents"),
        ]
    );
    assert_eq!(
        c.retention,
        Retention {
            keep_ms: 604_800_000,
            interval_ms: 60_000
        }
    );

    // GitHub: two secrets (rotation), dedupe on the delivery id, an http sink.
    let gh = c.source("github").expect("github");
    assert_eq!(gh.tenant, TenantBinding::Fixed("default".into()));
    assert_eq!(gh.verification.kind(), "github");
    assert_eq!(
        gh.verification
            .secrets()
            .iter()
            .map(|s| s.expose())
            .collect::<Vec<_>>(),
        ["It's a Secret to Everybody", "old github secret"]
    );
    assert_eq!(
        gh.dedupe,
        Some(Dedupe {
            key: KeySource::Header("x-github-delivery".into()),
            ttl_ms: 86_400_000,
        })
    );
    let TypedOptions::Http(h) = &gh.sinks[0].typed else {
        panic!("http expected")
    };
    assert_eq!(
        (gh.sinks[0].name.as_str(), h.url.as_str(), h.timeout_ms),
        ("ci", "https://ci.internal.example/github", 5000)
    );
    assert_eq!(h.headers["authorization"].expose(), "Bearer ci");
    // Its own retry policy over the global one.
    assert_eq!(
        gh.sinks[0].retry,
        SinkRetry {
            base_ms: 1_000,
            max_ms: 600_000,
            max_elapsed_ms: 21_600_000,
            retry_after_max_ms: 60_000,
            retry_statuses: Some([408, 409, 425, 429].into_iter().chain(500..=599).collect()),
            grace_ms: Some(600_000),
            overridden: true,
        }
    );
    assert_eq!(
        c.source("stripe").expect("stripe").sinks[0].retry,
        SinkRetry::from_global(&c.retry)
    );
    // Its signing is the sinks crate's option, resolved here item by item.
    assert_eq!(
        gh.sinks[0].options_json()["signing"],
        serde_json::json!({
            "type": "standard_webhooks",
            "secrets": [
                "whsec_YW5rdXNhLW91dGJvdW5kLXNpZ25pbmcta2V5LW5ldzI=",
                "whsec_YW5rdXNhLW91dGJvdW5kLXNpZ25pbmcta2V5LW9sZDE="
            ]
        })
    );

    // Stripe: an ordered FIFO sink keyed on data.object.customer, and a file sink.
    let st = c.source("stripe").expect("stripe");
    assert_eq!(st.tenant, TenantBinding::Fixed("acme".into()));
    assert_eq!(
        st.verification,
        Verification::Stripe {
            secrets: st.verification.secrets().to_vec(),
            tolerance_ms: 300_000,
        }
    );
    assert!(st.store_headers_overridden);
    assert_eq!(
        st.store_headers.action("stripe-signature"),
        HeaderAction::Drop
    );
    assert_eq!(st.store_headers.action("authorization"), HeaderAction::Keep);
    let orders = st.sink("orders").expect("orders");
    assert_eq!((orders.kind, orders.index), (SinkKind::Sqs, 0));
    let Order::Ordered {
        key: Some(OrderingKey::FirstOf(places)),
    } = &orders.order
    else {
        panic!("ordered by a list of places expected: {:?}", orders.order)
    };
    let paths: Vec<&[String]> = places
        .iter()
        .map(|p| match p {
            OrderingKey::Json(path) => path.segments.as_slice(),
            other => panic!("a json place expected: {other:?}"),
        })
        .collect();
    assert_eq!(
        paths,
        [["data", "object", "customer"], ["data", "object", "id"]]
    );
    assert_eq!(
        orders
            .options
            .keys()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>(),
        ["queue_url", "region"]
    );
    assert_eq!(st.sinks[1].name, "file-1");
    assert_eq!(st.sinks[1].order, Order::Unordered);
    assert_eq!(
        st.sinks[1].typed,
        TypedOptions::File(FileSink {
            path: "./relay-deliveries/stripe.ndjson".into()
        })
    );

    // Billing's sink reshapes each invoice event; the others send it as received.
    let invoices = st.sink("invoices").expect("invoices");
    assert_eq!(
        invoices.transform.as_ref().map(|p| p.text()),
        Some(
            "{invoice: .data.object.id, customer: .data.object.customer, status: .data.object.status, amount_due: .data.object.amount_due}"
        )
    );
    assert_eq!(
        invoices.transform.as_ref().map(|p| p.limits()),
        Some(ankusa_transform::Limits::default())
    );
    assert_eq!(
        (orders.transform.as_ref(), st.sinks[1].transform.as_ref()),
        (None, None)
    );

    // Billing's lanes hold behind a dead letter; the orders queue's release.
    assert_eq!(
        (invoices.dead_letter, orders.dead_letter),
        (DeadLetterLane::Hold, DeadLetterLane::Release)
    );

    // TenantPath: Shopify, ordered by a header the instance policy keeps.
    let sh = c.source("shopify").expect("shopify");
    assert_eq!(sh.tenant, TenantBinding::Path);
    assert_eq!(sh.verification.kind(), "shopify");
    assert_eq!(sh.sinks[0].name, "http-0");
    assert_eq!(
        sh.sinks[0].order.key(),
        Some(&OrderingKey::Header("x-shopify-product-id".into()))
    );
    assert_eq!(
        sh.sinks[0].rate_limit,
        Some(ankusa_config::RateLimit {
            per_second: 20.0,
            burst: 20
        })
    );
    assert_eq!(c.breaker.distinct, 3);

    // Generic HMAC.
    let bi = c.source("billing").expect("billing");
    let Verification::Hmac { header, prefix, .. } = &bi.verification else {
        panic!("hmac expected")
    };
    assert_eq!(
        (header.as_str(), prefix.as_str()),
        ("x-billing-signature", "sha256=")
    );
    // A failed signature is held in quarantine; the ledger sink is paused,
    // the file sink is not; the source itself is not paused.
    assert_eq!(bi.on_invalid_signature, OnInvalidSignature::Quarantine);
    assert!(!bi.quarantine && !bi.paused);
    assert_eq!(
        bi.sinks
            .iter()
            .map(|e| (e.name.as_str(), e.paused))
            .collect::<Vec<_>>(),
        [("file-0", false), ("ledger", true)]
    );
    // `paused` is core's: the sink does not see it; its Basic credentials
    // are the sinks crate's option, resolved here.
    assert!(bi.sinks[1].options.get("paused").is_none());
    assert_eq!(
        bi.sinks[1].options_json()["auth"],
        serde_json::json!({"basic": {"username": "ankusa", "password": "ledger-password"}})
    );
    // The deploy bot's OAuth2 client credentials, the secret resolved.
    assert_eq!(
        gh.sink("deploys").expect("deploys").options_json()["auth"],
        serde_json::json!({"oauth2": {
            "token_url": "https://idp.internal.example/oauth2/token",
            "client_id": "ankusa-relay",
            "client_secret": "deploy-bot-client-secret",
            "scope": "deploys.write",
        }})
    );

    // Under review: every hook held.
    let pa = c.source("partner").expect("partner");
    assert!(pa.quarantine);
    // Its sink signs with an Ed25519 key (the sinks crate's option).
    assert_eq!(
        pa.sinks[0].options_json()["signing"],
        serde_json::json!({"type": "standard_webhooks", "secrets": ["whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A="]})
    );
    assert_eq!(pa.on_invalid_signature, OnInvalidSignature::Reject);
    assert!(!gh.quarantine && !gh.paused);

    // Auto-pause: the ci sink only; a core option the sink does not see.
    assert_eq!(gh.sinks[0].auto_pause_after_ms, Some(600_000));
    assert!(gh.sinks[0].options.get("auto_pause_after_ms").is_none());
    assert_eq!(gh.sinks[1].auto_pause_after_ms, None);

    // Notifications: two destinations, each delivered by an internal
    // source's http sink named after it.
    let n = c.notify.as_ref().expect("notify");
    assert_eq!(
        n.destinations
            .iter()
            .map(|d| (d.name.as_str(), d.source.as_str(), d.format, d.events.len()))
            .collect::<Vec<_>>(),
        [
            ("ops-chat", "_notify-ops-chat", NotifyFormat::Slack, 6),
            ("incidents", "_notify-incidents", NotifyFormat::Json, 2)
        ]
    );
    assert_eq!(
        n.wanting(NotifyEvent::SinkAutoPaused)
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["ops-chat", "incidents"]
    );
    assert_eq!(
        (
            n.dead_letter_window_ms,
            n.dead_letter_samples,
            n.sink_failing_after_ms,
            n.tenant_bounds_percent,
            n.max_pending
        ),
        (60_000, 5, 300_000, 80, 10_000)
    );
    let inc = c.source("_notify-incidents").expect("incidents' source");
    assert_eq!(inc.tenant, TenantBinding::Fixed("_ankusa".into()));
    let TypedOptions::Http(h) = &inc.sinks[0].typed else {
        panic!("http expected")
    };
    assert_eq!(
        (inc.sinks[0].name.as_str(), h.url.as_str(), h.timeout_ms),
        (
            "incidents",
            "https://incidents.internal.example/ankusa",
            5000
        )
    );
    assert_eq!(h.headers["x-team"].expose(), "relay-ops");
}

#[test]
fn the_example_file_names_every_variable_it_needs() {
    // Without its environment it is refused, naming each variable.
    let p = Config::load_with_env(example_path(), &|_| None).expect_err("no env");
    let names: Vec<String> = p.problems().iter().map(|p| p.message.clone()).collect();
    assert_eq!(
        names,
        [
            "environment variable ANKUSA_ADMIN_TOKEN is not set",
            "environment variable GITHUB_WEBHOOK_SECRET is not set",
            "environment variable GITHUB_WEBHOOK_SECRET_OLD is not set",
            "environment variable CI_TOKEN is not set",
            "environment variable CI_SIGNING_SECRET is not set",
            "environment variable CI_SIGNING_SECRET_OLD is not set",
            "environment variable DEPLOY_BOT_CLIENT_SECRET is not set",
            "environment variable STRIPE_WEBHOOK_SECRET is not set",
            "environment variable SHOPIFY_WEBHOOK_SECRET is not set",
            "environment variable BILLING_SECRET is not set",
            "environment variable LEDGER_PASSWORD is not set",
            "environment variable PARTNER_WEBHOOK_SECRET is not set",
            "environment variable PARTNER_SIGNING_KEY is not set",
        ]
    );
}

#[test]
fn the_embedded_default_is_the_demo() {
    let c = Config::default_demo();
    assert_eq!(c, load_env(DEFAULT_YAML, &[]).expect("default"));
    assert_eq!(c.node.store, StoreBackend::RocksDb);
    assert_eq!(c.node.data_dir, PathBuf::from("./data"));
    assert_eq!(
        c.listeners.ingest,
        "127.0.0.1:8080".parse::<SocketAddr>().expect("addr")
    );
    assert_eq!(
        c.listeners.admin,
        "127.0.0.1:8081".parse::<SocketAddr>().expect("addr")
    );
    assert_eq!(c.listeners.admin_token, None);
    assert_eq!(c.tenants.len(), 1);
    assert_eq!(c.tenants[0].name, "default");
    assert_eq!(c.sources.len(), 1);
    let demo = &c.sources[0];
    assert_eq!(
        (demo.name.as_str(), demo.path.as_str()),
        ("demo", "/hooks/demo")
    );
    assert_eq!(demo.tenant, TenantBinding::Fixed("default".into()));
    assert_eq!(demo.verification, Verification::None);
    assert_eq!(
        demo.dedupe.as_ref().map(|d| &d.key),
        Some(&KeySource::Header("webhook-id".into()))
    );
    assert_eq!(demo.sinks.len(), 1);
    let sink = &demo.sinks[0];
    assert_eq!(sink.kind, SinkKind::File);
    assert_eq!(
        sink.typed,
        TypedOptions::File(FileSink {
            path: "./deliveries.ndjson".into()
        })
    );
    assert_eq!(
        sink.order,
        Order::Ordered {
            key: Some(OrderingKey::Header("x-entity-id".into()))
        }
    );
    assert_eq!(
        serde_json::Value::Object(sink.options_json()),
        serde_json::json!({"path": "./deliveries.ndjson"})
    );
}
