//! The HTTP sink's `auth` option against real local servers: a receiver that
//! checks the `authorization` header, and an OAuth2 token endpoint that
//! counts its requests and numbers its tokens.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ankusa_sinks::http::{HttpSink, HttpSinkConfig};
use ankusa_sinks::{Options, Outcome, Sink, SinkError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::future::join_all;
use serde_json::json;

use crate::server::{Recorded, Reply, Server};
use crate::{ctx, hook};

fn options(v: serde_json::Value) -> Options {
    v.as_object().expect("object").clone()
}

fn sink(v: serde_json::Value) -> HttpSink {
    HttpSink::new(&HttpSinkConfig::from_options(&options(v)).expect("valid")).expect("sink")
}

/// A hook whose stored headers carry the provider's own `Authorization`.
fn hook_with_provider_authorization() -> ankusa_sinks::Envelope {
    let mut h = hook(b"{\"id\":1}");
    h.headers
        .push((b"Authorization".to_vec(), b"Bearer the-providers".to_vec()));
    h
}

/// A token endpoint that answers its n-th request (from 1) with the token
/// `tok-n` and what `lifetime(n)` says of `expires_in`.
async fn token_endpoint(
    lifetime: impl Fn(usize) -> serde_json::Value + Send + Sync + 'static,
) -> Server {
    let issued = Arc::new(AtomicUsize::new(0));
    Server::start(move |_| {
        let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
        let mut answer = json!({"access_token": format!("tok-{n}"), "token_type": "Bearer"});
        let expires_in = lifetime(n);
        if !expires_in.is_null() {
            answer["expires_in"] = expires_in;
        }
        Reply::status(200)
            .header("content-type", "application/json")
            .body(&answer.to_string())
    })
    .await
}

/// The options of a sink posting to `receiver` with a token from `tokens`.
fn oauth2_options(receiver: &Server, tokens: &Server) -> serde_json::Value {
    json!({
        "url": receiver.url("/in"),
        "auth": {"oauth2": {
            "token_url": tokens.url("/token"),
            "client_id": "relay",
            "client_secret": "s3cret/+",
            "scope": ["hooks.write", "hooks:read"],
        }},
    })
}

/// The `authorization` of every request the receiver got, in order.
fn authorizations(server: &Server) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap_or("-").to_owned())
        .collect()
}

fn retry_reason(o: &Outcome) -> &str {
    match o {
        Outcome::Retry { reason, .. } => reason,
        other => panic!("not a Retry: {other:?}"),
    }
}

/// Basic: the receiver sees `Basic` and the base64 of `user:password` in
/// UTF-8 (a `:` in the password is fine), once, in place of the provider's
/// stored `Authorization`.
#[tokio::test]
async fn basic_auth_sends_the_credentials() {
    let receiver = Server::start(|_| Reply::status(200)).await;
    let s = sink(json!({
        "url": receiver.url("/in"),
        "auth": {"basic": {"username": "relay", "password": "pa:ss w\u{f6}rd"}},
    }));
    assert_eq!(
        s.deliver(&hook_with_provider_authorization(), &ctx()).await,
        Outcome::Ok
    );
    let r = receiver.requests();
    assert_eq!(r.len(), 1);
    let expected = format!("Basic {}", B64.encode("relay:pa:ss w\u{f6}rd".as_bytes()));
    assert_eq!(r[0].header("authorization"), Some(expected.as_str()));
    assert_eq!(expected, "Basic cmVsYXk6cGE6c3Mgd8O2cmQ=");
    // The sink's Debug does not show the credentials.
    let d = format!("{s:?}");
    assert!(!d.contains("cmVsYXk6") && !d.contains("pa:ss"), "{d}");
}

/// A configured `authorization` header beside `auth` is refused by name,
/// also when the auth has problems of its own; without `auth` it is an
/// ordinary header.
#[test]
fn an_authorization_header_beside_auth_is_refused() {
    let err = |v| {
        HttpSinkConfig::from_options(&options(v))
            .expect_err("refused")
            .problems()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        err(json!({
            "url": "https://h/",
            "headers": {"Authorization": "Bearer static", "x-team": "a"},
            "auth": {"basic": {"username": "u", "password": "p"}},
        })),
        [
            "sink option `headers.Authorization`: is written by the sink's auth (basic) and cannot be configured beside it"
        ]
    );
    assert_eq!(
        err(json!({
            "url": "https://h/",
            "headers": {"authorization": "Bearer static"},
            "auth": {"oauth2": {"token_url": "https://idp/t", "client_id": "c"}},
        })),
        [
            "sink option `auth.oauth2.client_secret`: is required: the client's secret (write env:NAME to keep it out of the file)",
            "sink option `headers.authorization`: is written by the sink's auth (oauth2) and cannot be configured beside it",
        ]
    );
    HttpSinkConfig::from_options(&options(
        json!({"url": "https://h/", "headers": {"authorization": "Bearer static"}}),
    ))
    .expect("valid");
    // A config built in code is held to the same rule.
    let mut c = HttpSinkConfig::new("https://h/");
    c.auth = Some(
        ankusa_sinks::http::Auth::from_option(
            &json!({"basic": {"username": "u", "password": "p"}}),
        )
        .expect("valid"),
    );
    c.headers = vec![("AUTHORIZATION".into(), "x".into())];
    let e = HttpSink::new(&c).expect_err("refused");
    assert_eq!(e.option(), Some("headers.AUTHORIZATION"));
}

/// Twenty deliveries at once and five more after them share one token: the
/// token endpoint is asked once (while it takes its time, the others wait
/// for that one fetch), with the client-credentials form, the scopes, and
/// the client id and secret form-encoded as Basic credentials.
#[tokio::test]
async fn one_token_serves_many_deliveries() {
    let fetches = Arc::new(AtomicUsize::new(0));
    let counted = fetches.clone();
    let tokens = Server::start(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        Reply::status(200)
            .header("content-type", "application/json")
            .body(r#"{"access_token":"tok-1","token_type":"bearer","expires_in":3600}"#)
            .delay(Duration::from_millis(200))
    })
    .await;
    let receiver = Server::start(|r| {
        Reply::status(if r.header("authorization") == Some("Bearer tok-1") {
            200
        } else {
            401
        })
    })
    .await;
    let s = sink(oauth2_options(&receiver, &tokens));
    let h = hook_with_provider_authorization();
    let c = ctx();
    let outcomes = join_all((0..20).map(|_| s.deliver(&h, &c))).await;
    assert!(outcomes.iter().all(|o| *o == Outcome::Ok), "{outcomes:?}");
    for _ in 0..5 {
        assert_eq!(s.deliver(&h, &c).await, Outcome::Ok);
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "one token request");
    let seen = authorizations(&receiver);
    assert_eq!(seen.len(), 25);
    assert!(seen.iter().all(|a| a == "Bearer tok-1"), "{seen:?}");
    // The token request itself (RFC 6749 sections 4.4.2 and 2.3.1).
    let t: Vec<Recorded> = tokens.requests();
    assert_eq!(t.len(), 1);
    assert_eq!(
        (t[0].method.as_str(), t[0].path.as_str()),
        ("POST", "/token")
    );
    assert_eq!(
        t[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(
        String::from_utf8(t[0].body.clone()).expect("utf-8"),
        "grant_type=client_credentials&scope=hooks.write+hooks%3Aread"
    );
    assert_eq!(
        t[0].header("authorization"),
        Some(format!("Basic {}", B64.encode("relay:s3cret%2F%2B")).as_str())
    );
}

/// `client_secret_post`: the id and secret travel in the form body, and no
/// `authorization` goes to the token endpoint.
#[tokio::test]
async fn client_secret_post_sends_the_credentials_in_the_body() {
    let tokens = token_endpoint(|_| json!(3600)).await;
    let receiver = Server::start(|_| Reply::status(200)).await;
    let s = sink(json!({
        "url": receiver.url("/in"),
        "auth": {"oauth2": {
            "token_url": tokens.url("/token"),
            "client_id": "relay id",
            "client_secret": "s3cret&=",
            "auth_method": "client_secret_post",
        }},
    }));
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    let t = tokens.requests();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].header("authorization"), None);
    assert_eq!(
        String::from_utf8(t[0].body.clone()).expect("utf-8"),
        "grant_type=client_credentials&client_id=relay+id&client_secret=s3cret%26%3D"
    );
    assert_eq!(authorizations(&receiver), ["Bearer tok-1"]);
}

/// A receiver that refuses the token (401) makes the sink fetch a new one
/// and post the hook again in the same attempt: delivered, two token
/// requests. One that refuses every token gets one new token per delivery,
/// and its 401 is the outcome, saying so.
#[tokio::test]
async fn a_401_refreshes_the_token_once() {
    let tokens = token_endpoint(|_| json!(3600)).await;
    // Revoked: tok-1. Accepted: any later one.
    let receiver = Server::start(|r| {
        Reply::status(if r.header("authorization") == Some("Bearer tok-1") {
            401
        } else {
            200
        })
    })
    .await;
    let s = sink(oauth2_options(&receiver, &tokens));
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    assert_eq!(tokens.requests().len(), 2);
    assert_eq!(authorizations(&receiver), ["Bearer tok-1", "Bearer tok-2"]);
    let attempts: Vec<_> = receiver
        .requests()
        .iter()
        .map(|r| r.header("x-ankusa-attempt").map(str::to_owned))
        .collect();
    assert_eq!(attempts, [Some("1".to_owned()), Some("1".to_owned())]);
    // The new token is kept.
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    assert_eq!(tokens.requests().len(), 2);

    let tokens = token_endpoint(|_| json!(3600)).await;
    let refusing = Server::start(|_| Reply::status(401).body("token rejected")).await;
    let s = sink(oauth2_options(&refusing, &tokens));
    let o = s.deliver(&hook(b"{}"), &ctx()).await;
    assert_eq!(
        o,
        Outcome::HttpStatus {
            status: 401,
            reason: "HTTP 401 Unauthorized: token rejected (again with a new OAuth2 token)".into(),
            after: None,
        }
    );
    assert_eq!(tokens.requests().len(), 2);
    assert_eq!(authorizations(&refusing), ["Bearer tok-1", "Bearer tok-2"]);
    assert!(matches!(
        s.deliver(&hook(b"{}"), &ctx()).await,
        Outcome::HttpStatus { status: 401, .. }
    ));
    assert_eq!(tokens.requests().len(), 3, "one new token per delivery");
}

/// A token that has expired is renewed: one of a second is renewed once its
/// second (less the margin, a tenth of it) has passed, and the deliveries
/// before then kept it. One with `expires_in: 0` (no lifetime a token can be
/// used in) is kept as one without a lifetime, until a receiver's 401,
/// rather than fetched again for every delivery.
#[tokio::test]
async fn an_expired_token_is_renewed() {
    let tokens = token_endpoint(|n| json!(if n == 1 { 0 } else { 3600 })).await;
    let receiver = Server::start(|_| Reply::status(200)).await;
    let s = sink(oauth2_options(&receiver, &tokens));
    for _ in 0..3 {
        assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    }
    assert_eq!(tokens.requests().len(), 1);
    assert_eq!(
        authorizations(&receiver),
        ["Bearer tok-1", "Bearer tok-1", "Bearer tok-1"]
    );

    // A lifetime of one second, renewed after 0.9 s: deliver until the
    // receiver sees the second token (60 s at most).
    let tokens = token_endpoint(|n| json!(if n == 1 { 1 } else { 3600 })).await;
    let receiver = Server::start(|_| Reply::status(200)).await;
    let s = sink(oauth2_options(&receiver, &tokens));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !authorizations(&receiver).contains(&"Bearer tok-2".to_owned()) {
        assert!(Instant::now() < deadline, "the token was never renewed");
        assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(tokens.requests().len(), 2);
    let seen = authorizations(&receiver);
    let first_new = seen
        .iter()
        .position(|a| a == "Bearer tok-2")
        .expect("tok-2");
    assert!(
        seen[..first_new].iter().all(|a| a == "Bearer tok-1"),
        "{seen:?}"
    );
    assert!(first_new >= 1, "the first token served its own delivery");
}

/// A token endpoint that cannot be reached, answers an error, or answers
/// without a token: the delivery is a `Retry` naming the endpoint (with its
/// Retry-After), never a dead letter, and the receiver is not called.
#[tokio::test]
async fn a_failing_token_endpoint_is_a_retry_naming_it() {
    let receiver = Server::start(|_| Reply::status(200)).await;
    // Nothing listens there: a port bound, then released.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let down = format!("http://127.0.0.1:{closed}/token");
    let s = sink(json!({
        "url": receiver.url("/in"),
        "auth": {"oauth2": {"token_url": down, "client_id": "c", "client_secret": "s"}},
    }));
    let o = s.deliver(&hook(b"{}"), &ctx()).await;
    let reason = retry_reason(&o);
    assert!(
        reason.starts_with(&format!(
            "OAuth2 token endpoint http://127.0.0.1:{closed}/token: connection failed"
        )),
        "{reason}"
    );

    let unavailable = Server::start(|_| {
        Reply::status(503)
            .header("retry-after", "7")
            .body(r#"{"error":"temporarily_unavailable"}"#)
    })
    .await;
    let s = sink(oauth2_options(&receiver, &unavailable));
    assert_eq!(
        s.deliver(&hook(b"{}"), &ctx()).await,
        Outcome::Retry {
            reason: format!(
                "OAuth2 token endpoint {}: answered HTTP 503 Service Unavailable: {{\"error\":\"temporarily_unavailable\"}}",
                unavailable.url("/token")
            ),
            after: Some(Duration::from_secs(7)),
        }
    );

    // A refused client (a wrong secret) is still a retry: an operator fixes
    // the secret and the hooks go out.
    let refusing =
        Server::start(|_| Reply::status(401).body(r#"{"error":"invalid_client"}"#)).await;
    let s = sink(oauth2_options(&receiver, &refusing));
    let o = s.deliver(&hook(b"{}"), &ctx()).await;
    assert!(
        retry_reason(&o)
            .ends_with(": answered HTTP 401 Unauthorized: {\"error\":\"invalid_client\"}"),
        "{o:?}"
    );

    let no_token = Server::start(|_| Reply::status(200).body("<html>login</html>")).await;
    let s = sink(oauth2_options(&receiver, &no_token));
    let o = s.deliver(&hook(b"{}"), &ctx()).await;
    assert_eq!(
        retry_reason(&o),
        format!(
            "OAuth2 token endpoint {}: answered 2xx with a body that is not JSON",
            no_token.url("/token")
        )
    );
    assert!(
        receiver.requests().is_empty(),
        "no delivery without a token"
    );
}

/// Deliveries waiting on one failing fetch share its failure: ten at once
/// against a slow, failing endpoint make one token request, not ten.
#[tokio::test]
async fn waiting_deliveries_share_one_failed_fetch() {
    let failing = Server::start(|_| {
        Reply::status(500)
            .body("down")
            .delay(Duration::from_millis(100))
    })
    .await;
    let receiver = Server::start(|_| Reply::status(200)).await;
    let s = sink(oauth2_options(&receiver, &failing));
    let h = hook(b"{}");
    let c = ctx();
    let outcomes = join_all((0..10).map(|_| s.deliver(&h, &c))).await;
    for o in &outcomes {
        assert!(
            retry_reason(o).ends_with(": answered HTTP 500 Internal Server Error: down"),
            "{o:?}"
        );
    }
    assert_eq!(failing.requests().len(), 1);
    // A delivery after that failure asks again.
    assert!(matches!(s.deliver(&h, &c).await, Outcome::Retry { .. }));
    assert_eq!(failing.requests().len(), 2);
    assert!(receiver.requests().is_empty());
}

/// A token endpoint over plain http is refused unless it is on loopback
/// (the client secret would travel in the clear).
#[test]
fn a_token_endpoint_in_the_clear_is_refused() {
    let e = HttpSinkConfig::from_options(&options(json!({
        "url": "https://h/",
        "auth": {"oauth2": {"token_url": "http://idp.example/token", "client_id": "c", "client_secret": "s"}},
    })))
    .expect_err("refused");
    assert!(
        matches!(&e, SinkError::InvalidOption { option, .. } if option == "auth.oauth2.token_url"),
        "{e:?}"
    );
}
