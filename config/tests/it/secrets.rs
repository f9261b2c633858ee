//! `env:NAME` secrets, resolved at load through the injected lookup.

use ankusa_config::{SecretOrigin, TypedOptions};
use serde_yaml_ng::Value;

use crate::helpers::{load_env, problems};

const YAML: &str = "
listeners: {admin: '0.0.0.0:8081', admin_token: 'env:ADMIN_TOKEN'}
sources:
  - name: stripe
    verification: {type: stripe, secrets: ['env:STRIPE_SECRET', 'env:STRIPE_SECRET_OLD', literal-one]}
    sinks:
      - {type: http, name: h, url: 'http://h/', headers: {Authorization: 'env:SINK_TOKEN', x-team: core}}
      - {type: redis, name: r, url: 'env:REDIS_URL', auth: {password: 'env:REDIS_PASSWORD'}, streams: ['env:REDIS_STREAM', plain]}
";

const ALL: [(&str, &str); 7] = [
    ("ADMIN_TOKEN", "admin-t0ken-0123456789"),
    ("STRIPE_SECRET", "whsec_corpus_test_secret_0001"),
    ("STRIPE_SECRET_OLD", "whsec_corpus_test_secret_0000"),
    ("SINK_TOKEN", "Bearer abc"),
    ("REDIS_URL", "redis://127.0.0.1:6379"),
    ("REDIS_PASSWORD", "pw"),
    ("REDIS_STREAM", "hooks"),
];

#[test]
fn env_secrets_are_resolved_everywhere() {
    let c = load_env(YAML, &ALL).expect("all variables set");
    let token = c.listeners.admin_token.as_ref().expect("token");
    assert_eq!(token.expose(), "admin-t0ken-0123456789");
    assert_eq!(token.origin(), &SecretOrigin::Env("ADMIN_TOKEN".into()));
    let s = &c.sources[0];
    let secrets: Vec<(&str, &SecretOrigin)> = s
        .verification
        .secrets()
        .iter()
        .map(|x| (x.expose(), x.origin()))
        .collect();
    assert_eq!(
        secrets,
        [
            (
                "whsec_corpus_test_secret_0001",
                &SecretOrigin::Env("STRIPE_SECRET".into())
            ),
            (
                "whsec_corpus_test_secret_0000",
                &SecretOrigin::Env("STRIPE_SECRET_OLD".into())
            ),
            ("literal-one", &SecretOrigin::Literal),
        ]
    );
    assert_eq!(
        s.verification.secrets()[0].as_bytes(),
        b"whsec_corpus_test_secret_0001"
    );
    let TypedOptions::Http(h) = &s.sinks[0].typed else {
        panic!("http expected")
    };
    let auth = &h.headers["authorization"];
    assert_eq!(
        (auth.expose(), auth.origin()),
        ("Bearer abc", &SecretOrigin::Env("SINK_TOKEN".into()))
    );
    assert_eq!(h.headers["x-team"].origin(), &SecretOrigin::Literal);
    // The sink's own options hold the resolved values, nested ones too.
    assert_eq!(
        serde_json::Value::Object(s.sinks[1].options_json()),
        serde_json::json!({
            "url": "redis://127.0.0.1:6379",
            "auth": {"password": "pw"},
            "streams": ["hooks", "plain"],
        })
    );
    assert_eq!(
        s.sinks[0]
            .options
            .get("headers")
            .and_then(|h| h.get("Authorization")),
        Some(&Value::String("Bearer abc".into()))
    );
}

#[test]
fn debug_never_shows_a_secret() {
    let c = load_env(YAML, &ALL).expect("all variables set");
    let text = format!("{:?}", c.sources[0].verification);
    assert!(text.contains("Secret(env:STRIPE_SECRET)"), "{text}");
    assert!(text.contains("Secret(literal, 11 bytes)"), "{text}");
    assert!(!text.contains("whsec_corpus"), "{text}");
    assert!(!format!("{:?}", c.listeners).contains("admin-t0ken"));
}

#[test]
fn unset_and_empty_variables_are_load_errors() {
    let without = |name: &str| -> Vec<(&str, &str)> {
        ALL.iter().copied().filter(|(k, _)| *k != name).collect()
    };
    assert_eq!(
        problems(load_env(YAML, &without("STRIPE_SECRET_OLD"))),
        [
            "source \"stripe\": option \"verification.secrets[1]\": environment variable STRIPE_SECRET_OLD is not set"
        ]
    );
    assert_eq!(
        problems(load_env(YAML, &without("ADMIN_TOKEN"))),
        ["listeners: option \"admin_token\": environment variable ADMIN_TOKEN is not set"]
    );
    assert_eq!(
        problems(load_env(YAML, &without("SINK_TOKEN"))),
        [
            "source \"stripe\", sink \"h\" (http): option \"headers.Authorization\": environment variable SINK_TOKEN is not set"
        ]
    );
    assert_eq!(
        problems(load_env(YAML, &without("REDIS_PASSWORD"))),
        [
            "source \"stripe\", sink \"r\" (redis): option \"auth.password\": environment variable REDIS_PASSWORD is not set"
        ]
    );
    let mut empty: Vec<(&str, &str)> = without("STRIPE_SECRET");
    empty.push(("STRIPE_SECRET", ""));
    assert_eq!(
        problems(load_env(YAML, &empty)),
        [
            "source \"stripe\": option \"verification.secrets[0]\": environment variable STRIPE_SECRET is empty"
        ]
    );
    // Nothing set: every reference is reported, in file order.
    assert_eq!(problems(load_env(YAML, &[])).len(), 7);
}

#[test]
fn a_malformed_reference_is_refused() {
    let yaml = "sources:\n  - {name: s, verification: {type: github, secrets: ['env:']}, sinks: [{type: file, path: x}]}\n";
    assert_eq!(
        problems(load_env(yaml, &[])),
        [
            "source \"s\": option \"verification.secrets[0]\": \"env:\" does not name an environment variable"
        ]
    );
}

#[test]
fn the_process_environment_is_the_default_lookup() {
    // PATH is set in every test process; a name nobody sets is not.
    assert!(ankusa_config::process_env("PATH").is_some());
    assert!(ankusa_config::process_env("ANKUSA_CONFIG_TEST_SURELY_UNSET_9F1C").is_none());
}

/// A list inside a map option (the http sink's `signing.secrets`) resolves
/// item by item: an unset variable is named with its index, and the other
/// items keep their places (the unset one is null) for the sink's checks.
#[test]
fn a_list_in_a_map_option_names_the_unset_item() {
    let yaml = "sources:\n  - name: s\n    sinks:\n      - {type: http, name: h, url: 'http://h/', signing: {type: standard_webhooks, secrets: ['env:NEW', 'env:OLD', whsec_literal]}}\n";
    assert_eq!(
        problems(load_env(yaml, &[("NEW", "whsec_new")])),
        [
            "source \"s\", sink \"h\" (http): option \"signing.secrets[1]\": environment variable OLD is not set"
        ]
    );
    let c = load_env(yaml, &[("NEW", "whsec_new"), ("OLD", "whsec_old")]).expect("all set");
    assert_eq!(
        c.sources[0].sinks[0].options_json()["signing"],
        serde_json::json!({"type": "standard_webhooks", "secrets": ["whsec_new", "whsec_old", "whsec_literal"]})
    );
}

/// Deeper in a map option (the http sink's `auth`), each unset secret is
/// named by its whole path, and the entries that resolve reach the sink.
#[test]
fn a_secret_deep_in_a_map_option_is_named_by_its_path() {
    let yaml = "sources:\n  - name: s\n    sinks:\n      - {type: http, name: b, url: 'https://h/', auth: {basic: {username: relay, password: 'env:RECEIVER_PASSWORD'}}}\n      - {type: http, name: o, url: 'https://h/', auth: {oauth2: {token_url: 'https://idp/token', client_id: 'env:CLIENT_ID', client_secret: 'env:CLIENT_SECRET', scope: [a, 'env:SCOPE']}}}\n";
    assert_eq!(
        problems(load_env(yaml, &[("CLIENT_ID", "relay")])),
        [
            "source \"s\", sink \"b\" (http): option \"auth.basic.password\": environment variable RECEIVER_PASSWORD is not set",
            "source \"s\", sink \"o\" (http): option \"auth.oauth2.client_secret\": environment variable CLIENT_SECRET is not set",
            "source \"s\", sink \"o\" (http): option \"auth.oauth2.scope[1]\": environment variable SCOPE is not set",
        ]
    );
    let c = load_env(
        yaml,
        &[
            ("RECEIVER_PASSWORD", "pw"),
            ("CLIENT_ID", "relay"),
            ("CLIENT_SECRET", "s3cret"),
            ("SCOPE", "hooks.write"),
        ],
    )
    .expect("all set");
    let sinks = &c.sources[0].sinks;
    assert_eq!(
        sinks[0].options_json()["auth"],
        serde_json::json!({"basic": {"username": "relay", "password": "pw"}})
    );
    assert_eq!(
        sinks[1].options_json()["auth"],
        serde_json::json!({"oauth2": {"token_url": "https://idp/token", "client_id": "relay", "client_secret": "s3cret", "scope": ["a", "hooks.write"]}})
    );
}
