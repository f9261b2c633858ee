//! The Pub/Sub sink against a local REST peer (`server`): a hyper server
//! that implements the `:publish` call (`POST /v1/projects/{p}/topics/{t}:publish`
//! answering `{"messageIds": [..]}`) and an OAuth token endpoint, and records
//! every request. Google's Pub/Sub emulator is not installed on this machine
//! kind (docs/contributing.md, "Test peers"), so **the local peer is what ran** here:
//! these tests check what the sink sends and how it reads Google's answers,
//! not a real Pub/Sub.
//!
//! The emulator path is driven through `PubSubSinkConfig::from_options_with_env`
//! with a fake environment holding `PUBSUB_EMULATOR_HOST`, never by setting
//! the process's environment (tests run in parallel threads).
//!
//! The service-account tests use `data/pubsub-test-service-account.json`, a
//! throwaway RSA key made for these tests (it belongs to no Google account),
//! copied with its `token_uri` pointed at the local peer.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ankusa_sinks::pubsub::{
    EMULATOR_HOST_ENV, LegacyOrderingKey, PUBSUB_SCOPE, PubSubSink, PubSubSinkConfig,
};
use ankusa_sinks::{Options, Outcome, Sink};
use base64::Engine as _;
use serde_json::json;

use crate::server::{Recorded, Reply, Server};
use crate::{SHOPIFY_BODY, SHOPIFY_SHA256, ctx, hook, ordered_ctx, sha256_hex};

const KEY_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/data/pubsub-test-service-account.json"
);
const PUBLISH_PATH: &str = "/v1/projects/ankusa-test/topics/hooks-acme-shopify:publish";
const REGIONAL_REFUSAL: &str = "Cannot publish messages that contain ordering keys to topic \
    projects/ankusa-test/topics/hooks-acme-shopify due a message storage policy on the topic that \
    would require the messages to be forwarded to another region. Please either change the topic's \
    message storage policy or publish to an allowed region using the appropriate regional Cloud \
    Pub/Sub endpoint.";

fn options(v: serde_json::Value) -> Options {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Options::new(),
    }
}

/// A sink on the emulator path: `PUBSUB_EMULATOR_HOST` = `addr` in a fake
/// environment, plus `extra` options.
async fn emulator_sink(addr: SocketAddr, extra: serde_json::Value) -> PubSubSink {
    let mut o = options(json!({"project": "ankusa-test", "topic": "hooks-{tenant}-{source}"}));
    o.extend(options(extra));
    let host = addr.to_string();
    let config = PubSubSinkConfig::from_options_with_env(&o, |name| {
        (name == EMULATOR_HOST_ENV).then(|| host.clone())
    })
    .expect("valid options");
    assert_eq!(config.emulator_host.as_deref(), Some(host.as_str()));
    PubSubSink::new(&config).await.expect("sink")
}

fn published(id: &str) -> Reply {
    Reply::status(200)
        .header("content-type", "application/json")
        .body(&json!({"messageIds": [id]}).to_string())
}

fn google_error(status: u16, code: &str, message: &str) -> Reply {
    Reply::status(status)
        .header("content-type", "application/json")
        .body(&json!({"error": {"code": status, "message": message, "status": code}}).to_string())
}

/// A peer answering every publish with a fresh message id.
async fn ok_peer() -> Server {
    let n = std::sync::atomic::AtomicU64::new(0);
    Server::start(move |_| {
        published(
            &n.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                .to_string(),
        )
    })
    .await
}

/// The one message of a recorded `:publish` call: (data bytes, attributes,
/// orderingKey).
fn message(r: &Recorded) -> (Vec<u8>, BTreeMap<String, String>, Option<String>) {
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON body");
    let messages = v["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{v}");
    let m = &messages[0];
    let data = base64::engine::general_purpose::STANDARD
        .decode(m["data"].as_str().expect("data"))
        .expect("base64 data");
    let attrs = m["attributes"]
        .as_object()
        .expect("attributes")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string attribute").to_owned()))
        .collect();
    let key = m
        .get("orderingKey")
        .map(|k| k.as_str().expect("string key").to_owned());
    (data, attrs, key)
}

fn only(server: &Server) -> Recorded {
    let mut r = server.requests();
    assert_eq!(r.len(), 1, "requests: {r:?}");
    r.remove(0)
}

/// A port nothing listens on.
fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

fn base_attrs() -> BTreeMap<String, String> {
    [
        ("ankusa_message_version", "1"),
        (
            "ankusa_idempotency_key",
            "01932c4e-5f60-7abc-8def-0123456789ab",
        ),
        ("ankusa_tenant", "acme"),
        ("ankusa_source", "shopify"),
        ("ankusa_received_at", "1764500000123"),
        ("content_type", "application/json"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[tokio::test]
async fn emulator_publish_carries_the_body_attributes_and_ordering_key_and_no_credentials() {
    let peer = ok_peer().await;
    let sink = emulator_sink(peer.addr, json!({})).await;
    assert_eq!(sink.kind(), "pubsub");
    assert_eq!(
        sink.deliver(&hook(SHOPIFY_BODY), &ordered_ctx(b"cus_QXg1o8vcGmoR32"))
            .await,
        Outcome::Ok
    );
    let r = only(&peer);
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, PUBLISH_PATH);
    assert_eq!(
        r.header("authorization"),
        None,
        "the emulator path sends no credentials"
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    let (data, attrs, key) = message(&r);
    // Base64 round trip, byte-identical: the 22 `\/` escapes and the id above
    // 2^53 survive.
    assert_eq!(data, SHOPIFY_BODY);
    assert_eq!(sha256_hex(&data), SHOPIFY_SHA256);
    let mut want = base_attrs();
    want.insert("ankusa_ordering_key".into(), "cus_QXg1o8vcGmoR32".into());
    want.insert("ankusa_lane_seq".into(), "3".into());
    assert_eq!(attrs, want);
    assert_eq!(key.as_deref(), Some("cus_QXg1o8vcGmoR32"));
}

#[tokio::test]
async fn keyless_lane_and_unordered_rows() {
    let peer = ok_peer().await;
    let sink = emulator_sink(peer.addr, json!({})).await;
    // The keyless lane's key is "<tenant>/<source>".
    assert_eq!(
        sink.deliver(&hook(b"{}"), &ordered_ctx(b"acme/shopify"))
            .await,
        Outcome::Ok
    );
    // A key that is not UTF-8 goes out lossily decoded, in both places.
    assert_eq!(
        sink.deliver(&hook(b"{}"), &ordered_ctx(b"a\xffb")).await,
        Outcome::Ok
    );
    // Unordered: no orderingKey, no ankusa_ordering_key.
    assert_eq!(sink.deliver(&hook(b"[1]"), &ctx()).await, Outcome::Ok);
    // No content type anywhere: no content_type attribute.
    let mut bare = hook(b"x");
    bare.headers.clear();
    let mut c = ctx();
    c.content_type = None;
    assert_eq!(sink.deliver(&bare, &c).await, Outcome::Ok);
    let r = peer.requests();
    assert_eq!(r.len(), 4);
    let (_, attrs, key) = message(&r[0]);
    assert_eq!(key.as_deref(), Some("acme/shopify"));
    assert_eq!(attrs["ankusa_ordering_key"], "acme/shopify");
    let (_, attrs, key) = message(&r[1]);
    assert_eq!(key.as_deref(), Some("a\u{fffd}b"));
    assert_eq!(attrs["ankusa_ordering_key"], "a\u{fffd}b");
    let (data, attrs, key) = message(&r[2]);
    assert_eq!(data, b"[1]");
    assert_eq!(key, None);
    assert_eq!(attrs, base_attrs());
    let (data, attrs, _) = message(&r[3]);
    assert_eq!(data, b"x");
    let mut want = base_attrs();
    want.remove("content_type");
    assert_eq!(attrs, want);
}

#[tokio::test]
async fn legacy_fixed_ordering_key_is_sent_on_every_message() {
    let peer = ok_peer().await;
    // What the config crate hands an unordered pubsub sink with
    // `ordering_key: tenant-feed` (the option stays in its options).
    let sink = emulator_sink(peer.addr, json!({"ordering_key": "tenant-feed"})).await;
    for body in [&b"1"[..], b"2", b"3"] {
        assert_eq!(sink.deliver(&hook(body), &ctx()).await, Outcome::Ok);
    }
    let r = peer.requests();
    assert_eq!(r.len(), 3);
    for (i, req) in r.iter().enumerate() {
        let (data, attrs, key) = message(req);
        assert_eq!(data, (i + 1).to_string().into_bytes());
        assert_eq!(key.as_deref(), Some("tenant-feed"));
        // Not laned: the ordering-key attribute is ordered mode's.
        assert_eq!(attrs, base_attrs());
    }
    // A laned row's own key wins over the legacy key.
    assert_eq!(
        sink.deliver(&hook(b"4"), &ordered_ctx(b"cus_9")).await,
        Outcome::Ok
    );
    let (_, _, key) = message(&peer.requests()[3]);
    assert_eq!(key.as_deref(), Some("cus_9"));
}

#[tokio::test]
async fn legacy_function_key_from_the_library_api() {
    let peer = ok_peer().await;
    let mut config = PubSubSinkConfig::new("ankusa-test", "hooks-{tenant}-{source}");
    config.emulator_host = Some(peer.addr.to_string());
    config.legacy_ordering_key = Some(LegacyOrderingKey::Fn(Arc::new(|h| {
        assert!(h.body != b"panic", "a key function that panics");
        (h.body != b"none").then(|| format!("len-{}", h.body.len()))
    })));
    let sink = PubSubSink::new(&config).await.expect("sink");
    assert_eq!(sink.deliver(&hook(b"abc"), &ctx()).await, Outcome::Ok);
    assert_eq!(sink.deliver(&hook(b"none"), &ctx()).await, Outcome::Ok);
    assert_eq!(sink.deliver(&hook(b"panic"), &ctx()).await, Outcome::Ok);
    let keys: Vec<Option<String>> = peer.requests().iter().map(|r| message(r).2).collect();
    assert_eq!(keys, vec![Some("len-3".to_owned()), None, None]);
}

/// The test key with its `token_uri` at `token_uri`, in a temporary file.
fn key_file(dir: &tempfile::TempDir, token_uri: &str) -> String {
    let mut key: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(KEY_FILE).expect("test key")).expect("JSON");
    key["token_uri"] = json!(token_uri);
    let path = dir.path().join("sa.json");
    std::fs::write(&path, key.to_string()).expect("write key");
    path.to_str().expect("utf-8").to_owned()
}

/// The claims of a JWT (not checked: the peer is no authority).
fn jwt_claims(jwt: &str) -> serde_json::Value {
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3, "{jwt}");
    let header = base64::engine::general_purpose::URL_SAFE
        .decode(parts[0])
        .expect("b64 header");
    assert_eq!(header, br#"{"alg":"RS256","typ":"JWT"}"#);
    assert!(!parts[2].is_empty(), "signed");
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE
            .decode(parts[1])
            .expect("b64 claims"),
    )
    .expect("claims JSON")
}

#[tokio::test]
async fn service_account_token_is_fetched_lazily_and_sent_as_bearer() {
    let peer = Server::start(|r| {
        if r.path == "/token" {
            Reply::status(200)
                .header("content-type", "application/json")
                .body(r#"{"access_token":"ya29.test-token-1","expires_in":3600,"token_type":"Bearer"}"#)
        } else {
            published("7")
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let token_uri = peer.url("/token");
    let config = PubSubSinkConfig::from_options_with_env(
        &options(json!({
            "project": "ankusa-test", "topic": "hooks-{tenant}-{source}",
            "endpoint": peer.url(""), "credentials": key_file(&dir, &token_uri),
        })),
        |_| None,
    )
    .expect("valid options");
    let sink = PubSubSink::new(&config).await.expect("sink");
    assert!(peer.requests().is_empty(), "nothing is fetched at start");
    assert_eq!(
        sink.deliver(&hook(SHOPIFY_BODY), &ordered_ctx(b"cus_1"))
            .await,
        Outcome::Ok
    );
    assert_eq!(sink.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    let r = peer.requests();
    let paths: Vec<&str> = r.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        vec!["/token", PUBLISH_PATH, PUBLISH_PATH],
        "one token, cached"
    );
    // The token request: a JWT bearer grant signed with the key.
    let form: BTreeMap<String, String> = url_form(&r[0].body);
    assert_eq!(
        form["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    let claims = jwt_claims(&form["assertion"]);
    assert_eq!(
        claims["iss"],
        "ankusa-test@ankusa-test.iam.gserviceaccount.com"
    );
    assert_eq!(claims["scope"], PUBSUB_SCOPE);
    assert_eq!(claims["aud"], token_uri.as_str());
    for publish in &r[1..] {
        assert_eq!(
            publish.header("authorization"),
            Some("Bearer ya29.test-token-1")
        );
    }
    let (data, _, key) = message(&r[1]);
    assert_eq!(data, SHOPIFY_BODY);
    assert_eq!(key.as_deref(), Some("cus_1"));
}

/// `application/x-www-form-urlencoded` pairs (the token request's body).
fn url_form(body: &[u8]) -> BTreeMap<String, String> {
    let text = std::str::from_utf8(body).expect("utf-8 form");
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode_form(k), decode_form(v)))
        .collect()
}

fn decode_form(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("hex");
                out.push(u8::from_str_radix(hex, 16).expect("hex byte"));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).expect("utf-8")
}

#[tokio::test]
async fn token_failures_retry_and_nothing_is_published() {
    // The token endpoint refuses.
    let peer = Server::start(|r| {
        if r.path == "/token" {
            Reply::status(400)
                .body(r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#)
        } else {
            published("1")
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = PubSubSinkConfig::new("ankusa-test", "hooks-{tenant}-{source}");
    config.endpoint = peer.url("");
    config.credentials = Some(key_file(&dir, &peer.url("/token")).into());
    let sink = PubSubSink::new(&config).await.expect("sink");
    match sink.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Retry {
            reason,
            after: None,
        } => assert!(reason.contains("token"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(
        peer.requests().iter().all(|r| r.path == "/token"),
        "no publish without a token"
    );

    // The token endpoint is down: the sink is still built (no network at
    // start), and deliveries retry.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = PubSubSinkConfig::new("ankusa-test", "t");
    config.endpoint = peer.url("");
    config.credentials = Some(key_file(&dir, &format!("http://{}/token", closed_port())).into());
    let sink = PubSubSink::new(&config)
        .await
        .expect("built while the token endpoint is down");
    assert!(matches!(
        sink.deliver(&hook(b"{}"), &ctx()).await,
        Outcome::Retry { .. }
    ));
}

#[tokio::test]
async fn the_sink_is_built_without_network_and_retries_while_the_peer_is_down() {
    let down = closed_port();
    let sink = emulator_sink(down, json!({"timeout_ms": 2000})).await;
    match sink.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Retry {
            reason,
            after: None,
        } => {
            assert!(reason.contains("connection failed"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Application Default Credentials: nothing is looked up at start.
    let config = PubSubSinkConfig::from_options_with_env(
        &options(json!({"project": "p", "topic": "t"})),
        |_| None,
    )
    .expect("valid");
    assert!(config.credentials.is_none() && config.emulator_host.is_none());
    PubSubSink::new(&config)
        .await
        .expect("built without looking for credentials");
}

#[tokio::test]
async fn regional_endpoint_refusal_is_a_retry() {
    let peer = Server::start(|_| google_error(400, "FAILED_PRECONDITION", REGIONAL_REFUSAL)).await;
    let sink = emulator_sink(peer.addr, json!({})).await;
    match sink.deliver(&hook(b"{}"), &ordered_ctx(b"cus_1")).await {
        Outcome::Retry {
            reason,
            after: None,
        } => {
            assert!(reason.contains("FAILED_PRECONDITION"), "{reason}");
            assert!(
                reason.contains("regional Cloud Pub/Sub endpoint"),
                "{reason}"
            );
            assert!(
                reason.contains("projects/ankusa-test/topics/hooks-acme-shopify"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The same words under INVALID_ARGUMENT: still a retry.
    let peer = Server::start(|_| google_error(400, "INVALID_ARGUMENT", REGIONAL_REFUSAL)).await;
    let sink = emulator_sink(peer.addr, json!({})).await;
    assert!(matches!(
        sink.deliver(&hook(b"{}"), &ordered_ctx(b"cus_1")).await,
        Outcome::Retry { .. }
    ));
}

#[tokio::test]
async fn errors_map_to_outcomes() {
    type Check = fn(&Outcome) -> bool;
    let cases: Vec<(Reply, Check)> = vec![
        (
            google_error(
                404,
                "NOT_FOUND",
                "Resource not found (resource=hooks-acme-shopify).",
            ),
            |o| matches!(o, Outcome::SinkGone { reason } if reason.contains("NOT_FOUND")),
        ),
        (
            google_error(
                403,
                "PERMISSION_DENIED",
                "User not authorized to perform this action.",
            ),
            |o| matches!(o, Outcome::Permanent { reason } if reason.contains("PERMISSION_DENIED")),
        ),
        (
            google_error(
                400,
                "INVALID_ARGUMENT",
                "Request payload size exceeds the limit: 10485760 bytes.",
            ),
            |o| matches!(o, Outcome::Permanent { reason } if reason.contains("10485760")),
        ),
        (
            google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded").header("retry-after", "3"),
            |o| {
                *o == Outcome::Retry {
                reason: "Pub/Sub publish to projects/ankusa-test/topics/hooks-acme-shopify: HTTP 429 RESOURCE_EXHAUSTED: Quota exceeded".into(),
                after: Some(Duration::from_secs(3)),
            }
            },
        ),
        (
            google_error(
                503,
                "UNAVAILABLE",
                "The service was unable to fulfill your request.",
            ),
            |o| matches!(o, Outcome::Retry { after: None, .. }),
        ),
        (
            google_error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials.",
            ),
            |o| matches!(o, Outcome::Retry { .. }),
        ),
        (Reply::status(200).body("<html>proxy</html>"), |o| {
            matches!(o, Outcome::Retry { .. })
        }),
    ];
    for (reply, check) in cases {
        let shown = format!("{reply:?}");
        let peer = Server::start(move |_| reply.clone()).await;
        let sink = emulator_sink(peer.addr, json!({})).await;
        let outcome = sink.deliver(&hook(b"{}"), &ordered_ctx(b"cus_1")).await;
        assert!(check(&outcome), "{shown} -> {outcome:?}");
        assert_eq!(peer.requests().len(), 1);
    }
}
