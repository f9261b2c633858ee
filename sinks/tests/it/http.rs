//! The HTTP sink against a real local server.

use std::time::{Duration, Instant, SystemTime};

use ankusa_sinks::http::{HttpSink, HttpSinkConfig, classify, retry_after};
use ankusa_sinks::{Options, Outcome, Sink, SinkError};
use hyper::StatusCode;
use serde_json::json;

use crate::server::{Recorded, Reply, Server};
use crate::{SHOPIFY_BODY, SHOPIFY_SHA256, ctx, hook, ordered_ctx, sha256_hex};

fn sink(url: String) -> HttpSink {
    HttpSink::new(&HttpSinkConfig::new(url)).expect("sink")
}

async fn ok_server() -> Server {
    Server::start(|_| Reply::status(200)).await
}

/// The one request the server got.
fn only(server: &Server) -> Recorded {
    let mut r = server.requests();
    assert_eq!(r.len(), 1, "requests: {r:?}");
    r.remove(0)
}

#[tokio::test]
async fn shopify_body_arrives_byte_identical() {
    let server = ok_server().await;
    let s = sink(server.url("/in"));
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    let r = only(&server);
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/in");
    assert_eq!(sha256_hex(&r.body), SHOPIFY_SHA256);
    assert_eq!(r.body, SHOPIFY_BODY);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("content-length"), Some("6698"));
    let text = String::from_utf8(r.body).expect("utf-8");
    assert_eq!(text.matches("\\/").count(), 22);
    assert!(text.contains("\"id\":820982911946154508"));
}

#[tokio::test]
async fn big_integers_and_exact_bytes_survive() {
    let body = br#"{"id":9007199254740993,"amount":123456789012345678901234567890,"f":1.10,"u":"caf\u00e9 \ud83d\ude00","s":"a\/b"}"#;
    let server = ok_server().await;
    let s = sink(server.url("/"));
    let mut h = hook(body);
    h.headers[0].1 = b"application/json; charset=utf-8".to_vec();
    let mut c = ctx();
    c.content_type = Some("application/json; charset=utf-8".into());
    assert_eq!(s.deliver(&h, &c).await, Outcome::Ok);
    let r = only(&server);
    assert_eq!(r.body, body.to_vec());
    assert_eq!(sha256_hex(&r.body), sha256_hex(body));
    assert_eq!(
        r.header("content-type"),
        Some("application/json; charset=utf-8")
    );
}

#[tokio::test]
async fn content_type_falls_back_to_the_stored_header_and_else_is_absent() {
    let server = ok_server().await;
    let s = sink(server.url("/"));
    let mut c = ctx();
    c.content_type = None;
    let mut h = hook(b"a=1&b=2");
    h.headers = vec![(
        b"content-TYPE".to_vec(),
        b"application/x-www-form-urlencoded".to_vec(),
    )];
    assert_eq!(s.deliver(&h, &c).await, Outcome::Ok);
    h.headers.clear();
    assert_eq!(s.deliver(&h, &c).await, Outcome::Ok);
    let r = server.requests();
    assert_eq!(r.len(), 2);
    assert_eq!(
        r[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(r[1].header("content-type"), None);
    assert_eq!(r[1].body, b"a=1&b=2");
}

#[tokio::test]
async fn metadata_headers_have_the_right_values() {
    let server = ok_server().await;
    let mut config = HttpSinkConfig::new(server.url("/"));
    config.headers = vec![
        ("Authorization".into(), "Bearer t0ken".into()),
        ("x-team".into(), "payments".into()),
    ];
    let s = HttpSink::new(&config).expect("sink");
    let mut c = ctx();
    c.attempt = 3;
    assert_eq!(s.deliver(&hook(b"{}"), &c).await, Outcome::Ok);
    let r = only(&server);
    assert_eq!(r.header("x-ankusa-message-version"), Some("1"));
    assert_eq!(
        r.header("x-ankusa-idempotency-key"),
        Some("01932c4e-5f60-7abc-8def-0123456789ab")
    );
    assert_eq!(r.header("x-ankusa-tenant"), Some("acme"));
    assert_eq!(r.header("x-ankusa-source"), Some("shopify"));
    assert_eq!(r.header("x-ankusa-received-at"), Some("1764500000123"));
    assert_eq!(r.header("x-ankusa-attempt"), Some("3"));
    assert_eq!(r.header("x-ankusa-seq"), Some("42"));
    assert_eq!(r.header("authorization"), Some("Bearer t0ken"));
    assert_eq!(r.header("x-team"), Some("payments"));
    assert_eq!(r.header("x-ankusa-ordering-key"), None, "unordered");
    assert!(
        r.header("user-agent")
            .is_some_and(|ua| ua.starts_with("ankusa/"))
    );
}

#[tokio::test]
async fn ordering_key_and_lane_seq_headers_only_when_ordered() {
    let server = ok_server().await;
    let s = sink(server.url("/"));
    // A key on a row that is not laned is not sent.
    let mut unordered = ordered_ctx(b"cus_123");
    unordered.ordered = false;
    assert_eq!(s.deliver(&hook(b"1"), &unordered).await, Outcome::Ok);
    assert_eq!(
        s.deliver(&hook(b"2"), &ordered_ctx(b"cus_123")).await,
        Outcome::Ok
    );
    // The keyless lane's key.
    assert_eq!(
        s.deliver(&hook(b"3"), &ordered_ctx(b"acme/shopify")).await,
        Outcome::Ok
    );
    let r = server.requests();
    assert_eq!(r.len(), 3);
    assert!(r[0].all("x-ankusa-ordering-key").is_empty());
    assert!(r[0].all("x-ankusa-lane-seq").is_empty());
    assert_eq!(r[1].header("x-ankusa-ordering-key"), Some("cus_123"));
    assert_eq!(r[1].header("x-ankusa-lane-seq"), Some("3"));
    assert_eq!(r[2].header("x-ankusa-ordering-key"), Some("acme/shopify"));
    assert_eq!(r[2].header("x-ankusa-lane-seq"), Some("3"));
}

#[tokio::test]
async fn ordering_key_bytes_are_sent_as_received_or_hashed() {
    let server = ok_server().await;
    let s = sink(server.url("/"));
    // Non-UTF-8 bytes are legal header bytes (obs-text): sent unchanged.
    let raw = b"caf\xe9-\xff";
    assert_eq!(s.deliver(&hook(b"1"), &ordered_ctx(raw)).await, Outcome::Ok);
    // A newline (a `{json}` key may hold one) is not: sent as sha256:<hex>.
    let nl = b"line1\nline2";
    assert_eq!(s.deliver(&hook(b"2"), &ordered_ctx(nl)).await, Outcome::Ok);
    let r = server.requests();
    assert_eq!(r[0].all("x-ankusa-ordering-key"), vec![raw.as_slice()]);
    assert_eq!(
        r[1].header("x-ankusa-ordering-key"),
        Some(format!("sha256:{}", sha256_hex(nl)).as_str())
    );
}

/// Answers `/status/<code>` with that code; extra headers for some.
async fn status_server(retry_at: SystemTime) -> Server {
    let date = httpdate_fmt(retry_at);
    Server::start(move |r| {
        let code: u16 = r
            .path
            .trim_start_matches("/status/")
            .parse()
            .expect("status path");
        let reply = Reply::status(code);
        match code {
            429 => reply.header("retry-after", "7").body("slow down"),
            503 => reply.header("retry-after", &date).body("maintenance"),
            400 => reply.body("{\"error\":\"missing field\n  `amount`\"}"),
            404 => reply.body("no such hook endpoint"),
            301 => reply.header("location", "https://elsewhere.example/in"),
            _ => reply,
        }
    })
    .await
}

fn httpdate_fmt(t: SystemTime) -> String {
    // RFC 9110 IMF-fixdate, formatted by hand so the test does not use the
    // parser it checks.
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after epoch")
        .as_secs();
    let days = secs / 86_400;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(mo - 1) as usize];
    format!("{wd}, {d:02} {mon} {y} {h:02}:{m:02}:{s:02} GMT")
}

#[tokio::test]
async fn each_status_maps_to_its_outcome() {
    let retry_at = SystemTime::now() + Duration::from_secs(120);
    let server = status_server(retry_at).await;
    let deliver = |code: u16| {
        let s = sink(server.url(&format!("/status/{code}")));
        async move { s.deliver(&hook(b"{}"), &ctx()).await }
    };

    assert_eq!(deliver(200).await, Outcome::Ok);
    assert_eq!(deliver(204).await, Outcome::Ok);
    assert_eq!(
        deliver(408).await,
        Outcome::HttpStatus {
            status: 408,
            reason: "HTTP 408 Request Timeout".into(),
            after: None
        }
    );
    assert_eq!(
        deliver(429).await,
        Outcome::HttpStatus {
            status: 429,
            reason: "HTTP 429 Too Many Requests: slow down".into(),
            after: Some(Duration::from_secs(7))
        }
    );
    match deliver(503)
        .await
        .resolve_status(Outcome::retried_by_default)
    {
        Outcome::Retry { reason, after } => {
            assert_eq!(reason, "HTTP 503 Service Unavailable: maintenance");
            let after = after.expect("HTTP-date Retry-After");
            // The date has whole seconds and some time has passed (a loaded
            // machine can take seconds between the answer and its parse).
            assert!(
                after >= Duration::from_secs(60) && after <= Duration::from_secs(120),
                "after = {after:?}"
            );
        }
        other => panic!("503: {other:?}"),
    }
    // Under the default policy (no `retry.retry_statuses` on the entry).
    let default = |o: Outcome| o.resolve_status(Outcome::retried_by_default);
    assert_eq!(
        default(deliver(410).await),
        Outcome::SinkGone {
            reason: "HTTP 410 Gone".into()
        }
    );
    assert_eq!(
        default(deliver(400).await),
        Outcome::Permanent {
            reason: "HTTP 400 Bad Request: {\"error\":\"missing field `amount`\"}".into()
        }
    );
    assert_eq!(
        deliver(404).await,
        Outcome::HttpStatus {
            status: 404,
            reason: "HTTP 404 Not Found: no such hook endpoint".into(),
            after: None
        }
    );
    assert_eq!(
        default(deliver(404).await),
        Outcome::Permanent {
            reason: "HTTP 404 Not Found: no such hook endpoint".into()
        }
    );
    assert_eq!(
        deliver(301).await,
        Outcome::Permanent {
            reason:
                "HTTP 301 Moved Permanently (redirect to https://elsewhere.example/in not followed)"
                    .into()
        }
    );
    assert!(matches!(
        default(deliver(500).await),
        Outcome::Retry { after: None, .. }
    ));
    assert!(matches!(
        default(deliver(425).await),
        Outcome::Retry { after: None, .. }
    ));
    // One request per delivery: nothing retried or redirected inside the sink.
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        [200, 204, 408, 429, 503, 410, 400, 404, 404, 301, 500, 425]
            .map(|c| format!("/status/{c}"))
            .to_vec()
    );
}

#[tokio::test]
async fn connection_refused_is_retry() {
    // A port that was just free and has no listener now.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let s = sink(format!("http://{addr}/"));
    match s.deliver(&hook(b"{}"), &ctx()).await {
        Outcome::Retry { reason, after } => {
            assert_eq!(after, None);
            assert!(reason.starts_with("connection failed: "), "{reason}");
            assert!(reason.to_lowercase().contains("refused"), "{reason}");
            assert!(!reason.contains(&addr.to_string()), "no URL: {reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_held_request_past_timeout_is_retry() {
    // The answer comes far later than any scheduling delay: a call that was
    // not cut at timeout_ms would take 120 s and end Ok.
    let server = Server::start(|_| Reply::status(200).delay(Duration::from_secs(120))).await;
    let mut config = HttpSinkConfig::new(server.url("/slow"));
    // Long enough that even a loaded machine has sent the request before it
    // passes (the check below), far shorter than the held answer.
    config.timeout_ms = 2_000;
    let s = HttpSink::new(&config).expect("sink");
    let started = Instant::now();
    let outcome = s.deliver(&hook(b"{}"), &ctx()).await;
    let took = started.elapsed();
    assert_eq!(
        outcome,
        Outcome::Retry {
            reason: "timed out after 2000 ms".into(),
            after: None
        }
    );
    assert!(
        took >= Duration::from_millis(2_000) && took < Duration::from_secs(60),
        "{took:?}"
    );
    // The request did reach the server: the timeout covers the answer too.
    assert_eq!(only(&server).path, "/slow");
}

#[tokio::test]
async fn connections_are_pooled_per_sink() {
    let server = ok_server().await;
    let s = sink(server.url("/"));
    for i in 0..3u8 {
        assert_eq!(s.deliver(&hook(&[b'0' + i]), &ctx()).await, Outcome::Ok);
    }
    let r = server.requests();
    assert_eq!(r.len(), 3);
    assert_eq!(r[0].peer, r[1].peer, "second request on a new connection");
    assert_eq!(r[1].peer, r[2].peer, "third request on a new connection");
    assert_eq!(s.kind(), "http");
}

#[test]
fn classify_table() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let raw = |code: u16| classify(StatusCode::from_u16(code).expect("code"), None, b"", now);
    // Under the default policy (no `retry.retry_statuses` on the entry).
    let c = |code: u16| raw(code).resolve_status(Outcome::retried_by_default);
    for code in [200, 201, 202, 204, 299] {
        assert_eq!(c(code), Outcome::Ok, "{code}");
    }
    for code in [408, 425, 429, 500, 502, 503, 504, 599] {
        assert!(
            matches!(c(code), Outcome::Retry { after: None, .. }),
            "{code}"
        );
    }
    assert!(matches!(c(410), Outcome::SinkGone { .. }));
    // Every 4xx and 5xx comes out as its status, for the policy to decide.
    for code in [400, 404, 408, 409, 410, 425, 429, 499, 500, 503, 599] {
        assert!(
            matches!(raw(code), Outcome::HttpStatus { status, after: None, .. } if status == code),
            "{code}"
        );
    }
    // A policy that retries 404 and 409 but not 503.
    let custom = |code: u16| raw(code).resolve_status(|s| matches!(s, 404 | 409));
    assert!(matches!(custom(404), Outcome::Retry { .. }));
    assert!(matches!(custom(409), Outcome::Retry { .. }));
    assert!(matches!(custom(503), Outcome::Permanent { .. }));
    assert!(matches!(custom(410), Outcome::SinkGone { .. }));
    // A Retry-After travels with the status and is kept when it is retried.
    let with_after = classify(StatusCode::NOT_FOUND, Some(b"5"), b"", now);
    assert!(matches!(
        with_after.clone(),
        Outcome::HttpStatus { status: 404, after: Some(d), .. } if d == Duration::from_secs(5)
    ));
    assert!(matches!(
        with_after.resolve_status(|_| true),
        Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(5)
    ));
    for code in [400, 401, 403, 404, 405, 409, 413, 415, 422, 451, 499] {
        assert!(matches!(c(code), Outcome::Permanent { .. }), "{code}");
    }
    for code in [100, 302, 304, 307, 308] {
        assert!(matches!(c(code), Outcome::Permanent { .. }), "{code}");
    }
    // A long body is cut to 200 characters and marked.
    let long = "x".repeat(1000);
    match classify(StatusCode::BAD_REQUEST, None, long.as_bytes(), now) {
        Outcome::HttpStatus { reason, .. } => {
            assert_eq!(
                reason,
                format!("HTTP 400 Bad Request: {}…", "x".repeat(200))
            );
        }
        other => panic!("{other:?}"),
    }
    // Retry-After on a status that does not retry is ignored.
    assert_eq!(classify(StatusCode::OK, Some(b"5"), b"", now), Outcome::Ok);
}

#[test]
fn retry_after_forms() {
    let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
    assert_eq!(retry_after(b"120", now), Some(Duration::from_secs(120)));
    assert_eq!(retry_after(b" 0 ", now), Some(Duration::ZERO));
    assert_eq!(
        retry_after(b"Sun, 06 Nov 1994 08:50:07 GMT", now),
        Some(Duration::from_secs(30))
    );
    // The obsolete RFC 850 and asctime forms are HTTP dates too.
    assert_eq!(
        retry_after(b"Sunday, 06-Nov-94 08:49:47 GMT", now),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        retry_after(b"Sun Nov  6 08:49:57 1994", now),
        Some(Duration::from_secs(20))
    );
    // A date in the past: no wait.
    assert_eq!(
        retry_after(b"Sat, 05 Nov 1994 08:49:37 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(retry_after(b"-5", now), None);
    assert_eq!(retry_after(b"1.5", now), None);
    assert_eq!(retry_after(b"soon", now), None);
    assert_eq!(retry_after(b"", now), None);
    assert_eq!(retry_after(b"\xff", now), None);
}

fn options(v: serde_json::Value) -> Options {
    v.as_object().expect("object").clone()
}

fn invalid_option(e: SinkError) -> String {
    match e {
        SinkError::InvalidOption { option, .. } => option,
        other => panic!("not InvalidOption: {other:?}"),
    }
}

#[test]
fn config_from_options() {
    let c = HttpSinkConfig::from_options(&options(json!({
        "url": "https://hooks.example.com/in?k=1",
        "timeout_ms": 2500,
        "headers": {"Authorization": "Bearer x"}
    })))
    .expect("valid");
    assert_eq!(
        c,
        HttpSinkConfig {
            url: "https://hooks.example.com/in?k=1".into(),
            timeout_ms: 2500,
            headers: vec![("Authorization".into(), "Bearer x".into())],
            signing: None,
            tls: None,
            auth: None,
        }
    );
    let d = HttpSinkConfig::from_options(&options(json!({"url": "http://127.0.0.1:9/"})))
        .expect("valid");
    assert_eq!(d.timeout_ms, 10_000);
    assert!(d.headers.is_empty());
}

#[test]
fn config_errors_name_the_option() {
    let err = |v| HttpSinkConfig::from_options(&options(v)).expect_err("invalid");
    assert_eq!(invalid_option(err(json!({"url": "not a url"}))), "url");
    assert_eq!(invalid_option(err(json!({"url": "ftp://h/x"}))), "url");
    assert_eq!(invalid_option(err(json!({"url": 5}))), "url");
    assert_eq!(
        invalid_option(err(json!({"url": "http://h/", "timeout_ms": 0}))),
        "timeout_ms"
    );
    assert_eq!(
        invalid_option(err(json!({"url": "http://h/", "timeout_ms": -1}))),
        "timeout_ms"
    );
    assert_eq!(
        invalid_option(err(json!({"url": "http://h/", "timeout_ms": "1s"}))),
        "timeout_ms"
    );
    assert_eq!(
        invalid_option(err(
            json!({"url": "http://h/", "headers": {"X-Ankusa-Tenant": "x"}})
        )),
        "headers.X-Ankusa-Tenant"
    );
    assert_eq!(
        invalid_option(err(
            json!({"url": "http://h/", "headers": {"content-type": "text/plain"}})
        )),
        "headers.content-type"
    );
    assert_eq!(
        invalid_option(err(
            json!({"url": "http://h/", "headers": {"bad name": "x"}})
        )),
        "headers.bad name"
    );
    assert_eq!(
        invalid_option(err(json!({"url": "http://h/", "headers": {"x-a": "a\nb"}}))),
        "headers.x-a"
    );
    assert_eq!(
        invalid_option(err(json!({"url": "http://h/", "headers": ["x"]}))),
        "headers"
    );
    assert!(matches!(
        err(json!({"timeout_ms": 5})),
        SinkError::MissingOption { option: "url" }
    ));
    match err(json!({"url": "http://h/", "timout_ms": 5})) {
        SinkError::UnknownOption { option, .. } => assert_eq!(option, "timout_ms"),
        other => panic!("{other:?}"),
    }
    // The message names the option too.
    let msg = err(json!({"url": "http://h/", "timeout_ms": 0})).to_string();
    assert_eq!(msg, "sink option `timeout_ms`: must be more than 0");
    // A config built in code is checked by the constructor.
    let mut c = HttpSinkConfig::new("http://h/");
    c.timeout_ms = 0;
    assert_eq!(
        invalid_option(HttpSink::new(&c).expect_err("zero")),
        "timeout_ms"
    );
}

/// Every problem of the options in one error, in option order (headers by
/// their order in the map): two bad header values are two problems, and a
/// header that is not a string does not hide the others.
#[test]
fn every_config_problem_is_reported_at_once() {
    let e = HttpSinkConfig::from_options(&options(json!({
        "url": "ftp://h/x",
        "timeout_ms": 0,
        "timout": 1,
        "headers": {"x-a": "a\nb", "x-b": "c\rd", "Content-Type": "t", "x-c": 5, "x-ok": "fine"}
    })))
    .expect_err("seven problems");
    let got: Vec<String> = e.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "sink option `headers.Content-Type`: is set by the sink and cannot be configured",
            "sink option `headers.x-a`: is not a valid header value (control character)",
            "sink option `headers.x-b`: is not a valid header value (control character)",
            "sink option `headers.x-c`: must be a string",
            "sink option `timeout_ms`: must be more than 0",
            "unknown sink option `timout` (valid: url, timeout_ms, headers, signing, tls, auth)",
            "sink option `url`: scheme `ftp` is not http or https",
        ]
    );
    assert!(
        e.to_string()
            .starts_with("7 problems: sink option `headers.Content-Type`: "),
        "{e}"
    );
    // A missing url with a bad header: both.
    let e = HttpSinkConfig::from_options(&options(json!({"headers": {"bad name": "x"}})))
        .expect_err("two problems");
    let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
    assert_eq!(names, ["headers.bad name", "url"]);
    // A config built in code: the constructor reports every problem too.
    let mut c = HttpSinkConfig::new("http://h/");
    c.timeout_ms = 0;
    c.headers = vec![("host".into(), "x".into()), ("x-a".into(), "\u{7f}".into())];
    let e = HttpSink::new(&c).expect_err("three problems");
    let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
    assert_eq!(names, ["timeout_ms", "headers.host", "headers.x-a"]);
}

/// The provider's stored headers reach the destination (so it can tell a
/// GitHub `push` from a `ping`), except hop-by-hop and framing headers, our
/// own `x-ankusa-*` names (a provider cannot spoof them) and headers the sink
/// config sets (the config wins).
#[tokio::test]
async fn provider_headers_are_forwarded_except_reserved_ones() {
    let server = ok_server().await;
    let mut config = HttpSinkConfig::new(server.url("/"));
    config.headers = vec![("x-team".into(), "payments".into())];
    let s = HttpSink::new(&config).expect("sink");
    let mut h = hook(b"{}");
    h.headers.extend([
        (b"X-GitHub-Event".to_vec(), b"push".to_vec()),
        (b"Connection".to_vec(), b"close".to_vec()),
        (b"Transfer-Encoding".to_vec(), b"chunked".to_vec()),
        (b"Content-Length".to_vec(), b"999".to_vec()),
        (b"x-ankusa-tenant".to_vec(), b"spoofed".to_vec()),
        (b"x-team".to_vec(), b"from-provider".to_vec()),
    ]);
    assert_eq!(s.deliver(&h, &ctx()).await, Outcome::Ok);
    let r = only(&server);
    assert_eq!(r.header("x-github-event"), Some("push"));
    assert_eq!(r.header("x-shopify-topic"), Some("orders/create"));
    assert_eq!(
        r.header("x-ankusa-tenant"),
        Some("acme"),
        "a provider header cannot spoof metadata"
    );
    assert_eq!(r.header("x-team"), Some("payments"), "the sink config wins");
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(
        r.header("content-length"),
        Some("2"),
        "framing is the sink's own"
    );
    assert_ne!(r.header("connection"), Some("close"));
}

const WHSEC_A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const WHSEC_B: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// A signed delivery carries each Standard Webhooks header once: the id is
/// the idempotency key, the timestamp the attempt's, the signature one `v1,`
/// entry per secret over the body as sent; a provider's own `webhook-*`
/// headers (stored from a Standard Webhooks source) are replaced, not sent
/// beside ours. (The root package's tests/it/signing.rs verifies the
/// signatures with the scheme's own library.)
#[tokio::test]
async fn standard_webhooks_signing_replaces_the_providers_headers() {
    let server = ok_server().await;
    let config = HttpSinkConfig::from_options(&options(json!({
        "url": server.url("/in"),
        "signing": {"type": "standard_webhooks", "secrets": [WHSEC_A, WHSEC_B]},
    })))
    .expect("valid");
    let signing = config.signing.clone().expect("signing");
    let s = HttpSink::new(&config).expect("sink");
    let mut h = hook(SHOPIFY_BODY);
    h.headers.extend([
        (b"webhook-id".to_vec(), b"msg_provider".to_vec()),
        (b"Webhook-Timestamp".to_vec(), b"1614265330".to_vec()),
        (b"webhook-signature".to_vec(), b"v1,providers/own=".to_vec()),
    ]);
    let before = unix_s();
    assert_eq!(s.deliver(&h, &ctx()).await, Outcome::Ok);
    let after = unix_s();
    let r = only(&server);
    assert_eq!(r.body, SHOPIFY_BODY);
    assert_eq!(
        r.header("webhook-id"),
        Some("01932c4e-5f60-7abc-8def-0123456789ab")
    );
    assert_eq!(r.header("webhook-id"), r.header("x-ankusa-idempotency-key"));
    let ts: u64 = r
        .header("webhook-timestamp")
        .expect("timestamp")
        .parse()
        .expect("unix seconds");
    assert!(
        (before..=after).contains(&ts),
        "{before} <= {ts} <= {after}"
    );
    let sig = r.header("webhook-signature").expect("signature");
    assert_eq!(sig.split(' ').count(), 2, "{sig}");
    assert!(
        sig.split(' ')
            .all(|e| e.starts_with("v1,") && e.len() == 3 + 44),
        "{sig}"
    );
    let expected = signing.headers("01932c4e-5f60-7abc-8def-0123456789ab", ts, SHOPIFY_BODY);
    assert_eq!(expected[2].1.to_str().expect("ascii"), sig);
    assert_eq!(
        r.header("x-shopify-topic"),
        Some("orders/create"),
        "other provider headers still travel"
    );
}

/// An Ed25519 (`whsk_`) key signs `v1a` beside a `whsec_` secret's `v1`,
/// and a receiver that holds only the public key (`whpk_`, as the sink's
/// key gives it) verifies the delivery: the signature is Ed25519 over
/// `{webhook-id}.{webhook-timestamp}.{body}` as received.
#[tokio::test]
async fn ed25519_signature_verifies_with_the_public_key() {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as B64;
    let server = ok_server().await;
    let whsk = format!("whsk_{}", B64.encode([7u8; 32]));
    let config = HttpSinkConfig::from_options(&options(json!({
        "url": server.url("/in"),
        "signing": {"type": "standard_webhooks", "secrets": [WHSEC_A, whsk]},
    })))
    .expect("valid");
    let Some(ankusa_sinks::http::Signing::StandardWebhooks { keys }) = &config.signing else {
        panic!("{:?}", config.signing)
    };
    let ankusa_sinks::http::signing::StandardKey::Ed25519(key) = &keys[1] else {
        panic!("{keys:?}")
    };
    let whpk = key.public_key();
    let s = HttpSink::new(&config).expect("sink");
    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    let r = only(&server);
    let sig = r.header("webhook-signature").expect("signature");
    let entries: Vec<&str> = sig.split(' ').collect();
    assert_eq!(entries.len(), 2, "{sig}");
    assert!(entries[0].starts_with("v1,"), "{sig}");
    let v1a = B64
        .decode(entries[1].strip_prefix("v1a,").expect("v1a second"))
        .expect("base64");
    // What the receiver knows: the public key, and the request.
    let public = B64
        .decode(whpk.strip_prefix("whpk_").expect("whpk_"))
        .expect("base64");
    assert_eq!(public.len(), 32);
    let signed = [
        r.header("webhook-id").expect("id").as_bytes(),
        b".",
        r.header("webhook-timestamp").expect("timestamp").as_bytes(),
        b".",
        &r.body,
    ]
    .concat();
    let verifier = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &public);
    verifier.verify(&signed, &v1a).expect("v1a verifies");
    // Over another body it does not.
    let mut other = signed.clone();
    *other.last_mut().expect("body") ^= 1;
    assert!(verifier.verify(&other, &v1a).is_err());
}

/// The hmac type: one header, GitHub's form when asked, over the exact body.
#[tokio::test]
async fn hmac_signing_writes_one_header() {
    let server = ok_server().await;
    let config = HttpSinkConfig::from_options(&options(json!({
        "url": server.url("/in"),
        "signing": {"type": "hmac", "secret": "It's a Secret to Everybody", "header": "X-Hub-Signature-256", "prefix": "sha256="},
    })))
    .expect("valid");
    let s = HttpSink::new(&config).expect("sink");
    let mut h = hook(b"Hello, World!");
    h.headers.push((
        b"X-Hub-Signature-256".to_vec(),
        b"sha256=from-the-provider".to_vec(),
    ));
    assert_eq!(s.deliver(&h, &ctx()).await, Outcome::Ok);
    let r = only(&server);
    // GitHub's documented test vector for this secret and payload.
    assert_eq!(
        r.header("x-hub-signature-256"),
        Some("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
    );
    assert_eq!(r.header("webhook-signature"), None);
}

/// The configured headers cannot write the signing's headers, and a broken
/// signing is named option by option beside the sink's other problems.
#[test]
fn signing_conflicts_and_problems_name_the_option() {
    let e = HttpSinkConfig::from_options(&options(json!({
        "url": "http://h/",
        "headers": {"Webhook-Signature": "v1,x", "x-team": "a"},
        "signing": {"type": "standard_webhooks", "secrets": [WHSEC_A]},
    })))
    .expect_err("conflict");
    assert_eq!(
        e.to_string(),
        "sink option `headers.Webhook-Signature`: is written by the sink's signing (type standard_webhooks) and cannot be configured"
    );
    let e = HttpSinkConfig::from_options(&options(json!({
        "url": "http://h/",
        "headers": {"x-signature": "s"},
        "signing": {"type": "hmac", "secret": "k", "header": "X-Signature"},
    })))
    .expect_err("conflict");
    assert_eq!(invalid_option(e), "headers.x-signature");
    // Without signing, webhook-* are ordinary headers.
    HttpSinkConfig::from_options(&options(
        json!({"url": "http://h/", "headers": {"webhook-id": "x"}}),
    ))
    .expect("valid");
    let e = HttpSinkConfig::from_options(&options(json!({
        "url": "ftp://h/",
        "signing": {"type": "standard_webhooks", "secrets": ["whsec_!!", WHSEC_A, ""]},
    })))
    .expect_err("problems");
    let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
    assert_eq!(names, ["signing.secrets[0]", "signing.secrets[2]", "url"]);
    // A config built in code is checked by the constructor too.
    let mut c = HttpSinkConfig::new("http://h/");
    c.signing = Some(
        ankusa_sinks::http::Signing::from_option(&json!({"type": "hmac", "secret": "k"}))
            .expect("valid"),
    );
    c.headers = vec![("X-Ankusa-Signature".into(), "x".into())];
    assert_eq!(
        invalid_option(HttpSink::new(&c).expect_err("reserved")),
        "headers.X-Ankusa-Signature"
    );
}

/// A signing with problems of its own still owns its headers: a clash with
/// the configured headers is reported in the same run.
#[test]
fn a_header_clash_is_reported_beside_a_broken_signing() {
    let e = HttpSinkConfig::from_options(&options(json!({
        "url": "http://h/",
        "headers": {"webhook-id": "x"},
        "signing": {"type": "standard_webhooks", "secrets": []},
    })))
    .expect_err("problems");
    let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
    assert_eq!(names, ["headers.webhook-id", "signing.secrets"]);
    let e = HttpSinkConfig::from_options(&options(json!({
        "url": "http://h/",
        "headers": {"X-Sig": "x"},
        "signing": {"type": "hmac", "header": "x-sig"},
    })))
    .expect_err("problems");
    let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
    assert_eq!(names, ["headers.X-Sig", "signing.secret"]);
}

/// Every http sink of `config/ankusa.example.yaml` loads in this crate as
/// `check-config` loads it (signing with an Ed25519 key, Basic and OAuth2
/// auth), so the file documents options the sink takes.
#[test]
fn the_example_files_http_sinks_load() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/ankusa.example.yaml");
    let text = std::fs::read_to_string(path).expect("example file");
    // Values of the shapes the file asks for (whsec_, whsk_, any).
    let env = |name: &str| -> Option<std::ffi::OsString> {
        Some(match name {
            "PARTNER_SIGNING_KEY" => "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=".into(),
            "CI_SIGNING_SECRET_OLD" => WHSEC_B.into(),
            n if n.contains("SIGNING_SECRET") || n == "PARTNER_WEBHOOK_SECRET" => WHSEC_A.into(),
            _ => "a-secret-value-of-32-characters".into(),
        })
    };
    let c = ankusa_config::Config::from_yaml(&text, &env).expect("example");
    let mut schemes = Vec::new();
    for s in &c.sources {
        for e in s.sinks.iter().filter(|e| e.kind.as_str() == "http") {
            let h = HttpSinkConfig::from_options(&e.options_json())
                .unwrap_or_else(|err| panic!("{} / {}: {err}", s.name, e.name));
            HttpSink::new(&h).unwrap_or_else(|err| panic!("{} / {}: {err}", s.name, e.name));
            if let Some(a) = &h.auth {
                schemes.push((e.name.clone(), a.scheme()));
            }
        }
    }
    assert_eq!(
        schemes,
        [
            ("deploys".to_owned(), "oauth2"),
            ("ledger".to_owned(), "basic")
        ]
    );
}

/// What the endpoint answered, for the attempt log (docs/design.md section
/// 6, "What the destination answered"): a receiver answering 503 with a
/// body twice, then 200, gives the three statuses, bodies and headers, and
/// the same outcomes as `deliver`.
#[tokio::test]
async fn each_attempt_reports_the_answers_status_headers_and_body() {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let server = Server::start(move |_| {
        let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n < 2 {
            Reply::status(503)
                .header("retry-after", "7")
                .header("x-request-id", &format!("req-{n}"))
                .body(&format!("overloaded, try {n}"))
        } else {
            Reply::status(200)
                .header("x-request-id", "req-2")
                .body("{\"received\":true}")
        }
    })
    .await;
    let s = sink(server.url("/in"));
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(s.attempt(&hook(b"{}"), &ctx()).await);
    }
    let summary: Vec<(u16, String, bool, Option<String>)> = got
        .iter()
        .map(|a| {
            let r = a.response.as_ref().expect("an answer");
            let id = r
                .headers
                .iter()
                .find(|(n, _)| n == "x-request-id")
                .map(|(_, v)| String::from_utf8(v.clone()).expect("utf-8"));
            (
                r.status,
                String::from_utf8(r.body.clone()).expect("utf-8"),
                r.body_truncated,
                id,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (503, "overloaded, try 0".into(), false, Some("req-0".into())),
            (503, "overloaded, try 1".into(), false, Some("req-1".into())),
            (
                200,
                "{\"received\":true}".into(),
                false,
                Some("req-2".into())
            ),
        ]
    );
    let retry_after = got[0]
        .response
        .as_ref()
        .and_then(|r| r.headers.iter().find(|(n, _)| n == "retry-after"))
        .map(|(_, v)| v.clone());
    assert_eq!(retry_after, Some(b"7".to_vec()));
    assert_eq!(
        got[0].outcome,
        Outcome::HttpStatus {
            status: 503,
            reason: "HTTP 503 Service Unavailable: overloaded, try 0".into(),
            after: Some(Duration::from_secs(7)),
        }
    );
    assert_eq!(got[2].outcome, Outcome::Ok);
    assert_eq!(server.requests().len(), 3);
}

/// A 1 MiB answer is kept as its first 4 KiB (the context's limit), marked
/// truncated; a limit of 0 keeps no body; a refused connection has no
/// answer.
#[tokio::test]
async fn a_large_answer_is_kept_as_its_first_bytes() {
    let big: String = (0..(1 << 20))
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let body = big.clone();
    let server = Server::start(move |_| Reply::status(500).body(&body)).await;
    let s = sink(server.url("/big"));
    let a = s.attempt(&hook(b"{}"), &ctx()).await;
    let r = a.response.expect("an answer");
    assert_eq!(r.status, 500);
    assert_eq!(r.body.len(), 4096);
    assert_eq!(r.body, big.as_bytes()[..4096].to_vec());
    assert!(r.body_truncated);
    assert!(
        matches!(a.outcome, Outcome::HttpStatus { status: 500, .. }),
        "{:?}",
        a.outcome
    );
    let mut none = ctx();
    none.response_body_max_bytes = 0;
    let r = s
        .attempt(&hook(b"{}"), &none)
        .await
        .response
        .expect("an answer");
    assert_eq!((r.status, r.body.len(), r.body_truncated), (500, 0, true));
    // An empty body is all there: not truncated.
    let empty = Server::start(|_| Reply::status(204)).await;
    let r = sink(empty.url("/"))
        .attempt(&hook(b"{}"), &ctx())
        .await
        .response
        .expect("an answer");
    assert_eq!((r.status, r.body.len(), r.body_truncated), (204, 0, false));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let a = sink(format!("http://{addr}/"))
        .attempt(&hook(b"{}"), &ctx())
        .await;
    assert_eq!(a.response, None);
    assert!(
        matches!(a.outcome, Outcome::Retry { .. }),
        "{:?}",
        a.outcome
    );
}
