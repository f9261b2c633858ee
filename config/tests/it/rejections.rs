//! Every other load-time rejection, each with the exact scope and option.

use crate::helpers::{load, one, problems};

const FILE: &str = "{type: file, path: x}";

#[test]
fn unknown_tenant() {
    assert_eq!(
        one(&format!(
            "tenants: [{{name: acme}}]\nsources:\n  - {{name: a, tenant: acme2, sinks: [{FILE}]}}\n"
        )),
        "source \"a\": option \"tenant\": unknown tenant \"acme2\" (not in tenants)"
    );
    // No tenant named: the tenant `default` must exist.
    assert_eq!(
        one(&format!(
            "tenants: [{{name: acme}}]\nsources:\n  - {{name: a, sinks: [{FILE}]}}\n"
        )),
        "source \"a\": option \"tenant\": required: name a tenant, or set tenant_path: true \
         (there is no tenant \"default\" to default to)"
    );
}

#[test]
fn tenant_and_tenant_path_exclude_each_other() {
    assert_eq!(
        one(&format!(
            "sources:\n  - {{name: a, tenant: default, tenant_path: true, sinks: [{FILE}]}}\n"
        )),
        "source \"a\": option \"tenant_path\": tenant_path: true takes the tenant from the URL; \
         remove tenant, or set tenant_path: false"
    );
}

#[test]
fn duplicate_and_bad_names() {
    assert_eq!(
        one(&format!(
            "sources:\n  - {{name: a, sinks: [{FILE}]}}\n  - {{name: a, path: /other, sinks: [{FILE}]}}\n"
        )),
        "source \"a\": option \"name\": duplicate source name"
    );
    assert_eq!(
        one("tenants: [{name: t}, {name: t}]\n"),
        "tenant \"t\": option \"name\": duplicate tenant name"
    );
    assert_eq!(
        one(&format!(
            "sources:\n  - {{name: 'a b', path: /ab, sinks: [{FILE}]}}\n"
        )),
        "source \"a b\": option \"name\": \"a b\" is not a valid name: 1-64 characters of \
         A-Z a-z 0-9 _ -, starting with a letter or digit"
    );
    assert_eq!(
        one("tenants: [{name: '-x'}]\nsources: []\n"),
        "tenant \"-x\": option \"name\": \"-x\" is not a valid name: 1-64 characters of \
         A-Z a-z 0-9 _ -, starting with a letter or digit"
    );
}

#[test]
fn duplicate_paths() {
    // An explicit path equal to another source's default path.
    assert_eq!(
        one(&format!(
            "sources:\n  - {{name: a, sinks: [{FILE}]}}\n  - {{name: b, path: /hooks/a, sinks: [{FILE}]}}\n"
        )),
        "source \"b\": option \"path\": \"/hooks/a\" is already the path of source \"a\""
    );
}

#[test]
fn a_path_under_a_tenant_path_route_is_refused() {
    assert_eq!(
        one(&format!(
            "sources:\n  - {{name: shop, tenant_path: true, sinks: [{FILE}]}}\n  - {{name: b, path: /hooks/shop/acme, sinks: [{FILE}]}}\n"
        )),
        "source \"b\": option \"path\": \"/hooks/shop/acme\" overlaps the route /hooks/shop/{tenant} \
         of TenantPath source \"shop\""
    );
    // Two segments deeper does not overlap.
    assert!(load(&format!(
        "sources:\n  - {{name: shop, tenant_path: true, sinks: [{FILE}]}}\n  - {{name: b, path: /hooks/shop/acme/x, sinks: [{FILE}]}}\n"
    ))
    .is_ok());
}

#[test]
fn bad_paths() {
    for (path, why) in [
        ("hooks/a", "it must start with /"),
        ("/", "it needs at least one segment"),
        ("/hooks//a", "empty segment (// or a trailing /)"),
        ("/hooks/a/", "empty segment (// or a trailing /)"),
        ("/hooks/../a", "a . or .. segment"),
        (
            "/hooks/a?x=1",
            "only letters, digits and -._~!$&'()*+,;=:@ in a segment (no spaces, ?, #, %)",
        ),
        (
            "/hooks/a b",
            "only letters, digits and -._~!$&'()*+,;=:@ in a segment (no spaces, ?, #, %)",
        ),
        (
            "/_ankusa/handover/t",
            "/_ankusa/ is reserved for the relay's own cluster traffic",
        ),
        (
            "/_ankusa",
            "/_ankusa/ is reserved for the relay's own cluster traffic",
        ),
    ] {
        assert_eq!(
            one(&format!(
                "sources:\n  - {{name: a, path: '{path}', sinks: [{FILE}]}}\n"
            )),
            format!("source \"a\": option \"path\": \"{path}\" is not a valid route: {why}")
        );
    }
}

#[test]
fn duplicate_sink_names_in_a_source() {
    assert_eq!(
        one(
            "sources:\n  - {name: a, sinks: [{type: file, name: out, path: x}, {type: file, name: out, path: y}]}\n"
        ),
        "source \"a\", sink \"out\" (file): option \"name\": duplicate sink name in this source"
    );
    // A given name that collides with a default one.
    assert_eq!(
        one(
            "sources:\n  - {name: a, sinks: [{type: http, url: 'http://h/'}, {type: file, name: http-0, path: y}]}\n"
        ),
        "source \"a\", sink \"http-0\" (file): option \"name\": duplicate sink name in this source"
    );
    // The same name in two sources is fine.
    assert!(load("sources:\n  - {name: a, sinks: [{type: file, name: out, path: x}]}\n  - {name: b, sinks: [{type: file, name: out, path: x}]}\n").is_ok());
}

#[test]
fn sink_type_and_shape() {
    assert_eq!(
        one("sources:\n  - {name: a, sinks: [{path: x}]}\n"),
        "source \"a\", sink \"sink-0\" (?): option \"type\": required: one of http, file, sqs, pubsub, kafka, rabbitmq, nats, redis"
    );
    assert_eq!(
        one("sources:\n  - {name: a, sinks: [{type: htp, url: x}]}\n"),
        "source \"a\", sink \"sink-0\" (htp): option \"type\": unknown sink type \"htp\": one of http, file, sqs, pubsub, kafka, rabbitmq, nats, redis"
    );
    assert_eq!(
        one("sources:\n  - {name: a, sinks: []}\n"),
        "source \"a\": option \"sinks\": at least one sink is required"
    );
    assert_eq!(
        one("sources:\n  - {name: a}\n"),
        "source \"a\": option \"sinks\": at least one sink is required"
    );
    assert_eq!(
        one("sources:\n  - {name: a, sinks: [{type: file, name: 3, path: x}]}\n"),
        "source \"a\", sink \"file-0\" (file): option \"name\": must be a string, found 3"
    );
    assert_eq!(
        one("sources:\n  - {name: a, sinks: [{type: kafka, 7: x}]}\n"),
        "source \"a\", sink \"kafka-0\" (kafka): option \"7\": option names must be strings"
    );
}

#[test]
fn http_sink_options() {
    let sink = |s: &str| format!("sources:\n  - {{name: a, sinks: [{s}]}}\n");
    assert_eq!(
        one(&sink("{type: http, name: h}")),
        "source \"a\", sink \"h\" (http): option \"url\": required: the http(s) URL hooks are POSTed to"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', urll: 'http://h/'}"
        )),
        "source \"a\", sink \"h\" (http): option \"urll\": unknown option of a http sink (its options: url, timeout_ms, headers, signing, tls, auth; every sink: type, name, ordered, ordering_key, paused, retry, filter, rate_limit, transform, auto_pause_after_ms, dead_letter)"
    );
    let p = problems(load(&sink("{type: http, name: h, urll: 'http://h/'}")));
    assert_eq!(
        p[1],
        "source \"a\", sink \"h\" (http): option \"url\": required: the http(s) URL hooks are POSTed to"
    );
    assert_eq!(
        one(&sink("{type: http, name: h, url: 'ftp://h/'}")),
        "source \"a\", sink \"h\" (http): option \"url\": \"ftp://h/\" is not an http:// or https:// URL"
    );
    assert_eq!(
        one(&sink("{type: http, name: h, url: 'https:///x'}")),
        "source \"a\", sink \"h\" (http): option \"url\": \"https:///x\" has no host"
    );
    assert_eq!(
        one(&sink("{type: http, name: h, url: 'http://h/a b'}")),
        "source \"a\", sink \"h\" (http): option \"url\": \"http://h/a b\" contains whitespace"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', timeout_ms: 0}"
        )),
        "source \"a\", sink \"h\" (http): option \"timeout_ms\": must be a whole number of milliseconds above 0, found 0"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', timeout_ms: 1.5}"
        )),
        "source \"a\", sink \"h\" (http): option \"timeout_ms\": must be a whole number of milliseconds above 0, found 1.5"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', headers: {X-Ankusa-Tenant: t}}"
        )),
        "source \"a\", sink \"h\" (http): option \"headers.X-Ankusa-Tenant\": \"x-ankusa-tenant\" is set by the http sink itself"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', headers: {Host: t}}"
        )),
        "source \"a\", sink \"h\" (http): option \"headers.Host\": \"host\" is set by the http sink itself"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', headers: {Content-Type: text/plain}}"
        )),
        "source \"a\", sink \"h\" (http): option \"headers.Content-Type\": \"content-type\" is set by the http sink itself"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', headers: {'a b': t}}"
        )),
        "source \"a\", sink \"h\" (http): option \"headers.a b\": \"a b\" is not a valid HTTP header name"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', headers: {x-n: 5}}"
        )),
        "source \"a\", sink \"h\" (http): option \"headers.x-n\": must be a string, found 5"
    );
    assert_eq!(
        one(&sink(
            "{type: http, name: h, url: 'http://h/', headers: [a]}"
        )),
        "source \"a\", sink \"h\" (http): option \"headers\": must be a map of header name to value, found a list"
    );
}

#[test]
fn file_sink_options() {
    let sink = |s: &str| format!("sources:\n  - {{name: a, sinks: [{s}]}}\n");
    assert_eq!(
        one(&sink("{type: file, name: f}")),
        "source \"a\", sink \"f\" (file): option \"path\": required: the NDJSON file hooks are appended to"
    );
    assert_eq!(
        one(&sink("{type: file, name: f, path: ''}")),
        "source \"a\", sink \"f\" (file): option \"path\": must be a non-empty string, found \"\""
    );
    assert_eq!(
        one(&sink("{type: file, name: f, path: x, fsync: always}")),
        "source \"a\", sink \"f\" (file): option \"fsync\": unknown option of a file sink (its options: path; every sink: type, name, ordered, ordering_key, paused, retry, filter, rate_limit, transform, auto_pause_after_ms, dead_letter)"
    );
}

#[test]
fn listener_addresses() {
    assert_eq!(
        one("listeners: {ingest: 'localhost:8080'}\n"),
        "listeners: option \"ingest\": \"localhost:8080\" is not a listener address: write IP:port, e.g. 127.0.0.1:8080 or [::1]:8080"
    );
    assert_eq!(
        one("listeners: {admin: '127.0.0.1'}\n"),
        "listeners: option \"admin\": \"127.0.0.1\" is not a listener address: write IP:port, e.g. 127.0.0.1:8080 or [::1]:8080"
    );
    assert_eq!(
        one("listeners: {ingest: '127.0.0.1:9000', admin: '127.0.0.1:9000'}\n"),
        "listeners: option \"admin\": is the same address as ingest (127.0.0.1:9000)"
    );
    assert_eq!(
        one("listeners: {admin: '0.0.0.0:8081'}\n"),
        "listeners: option \"admin_token\": required when the admin listener is not on a loopback address (admin is 0.0.0.0:8081)"
    );
    // A token HTTP cannot carry (found by a break-it pass of the admin API:
    // every call was refused).
    for token in ["'tok '", "' '", "\"a\\nb\"", "'tök'"] {
        assert_eq!(
            one(&format!("listeners: {{admin_token: {token}}}\n")),
            "listeners: option \"admin_token\": must be printable ASCII without spaces (it is sent as `Authorization: Bearer <token>`); check for a trailing newline in its variable",
            "{token}"
        );
    }
    // A short token falls to guessing (a two-character one in 0.3 s): refused
    // at any address, loopback included, with a way to make a good one.
    for token in ["x", "0123456789abcde"] {
        assert_eq!(
            one(&format!("listeners: {{admin_token: '{token}'}}\n")),
            format!(
                "listeners: option \"admin_token\": is {} characters; it must have at least 16 (it guards revive, drop and purge, and a short token can be guessed): make one with `openssl rand -hex 32`",
                token.len()
            ),
            "{token}"
        );
    }
    assert_eq!(
        one("listeners: {metrics_require_token: true}\n"),
        "listeners: option \"metrics_require_token\": requires admin_token (there is no token to require)"
    );
    // Port 0 (tests) may repeat: the OS picks two ports.
    assert!(load("listeners: {ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}\n").is_ok());
    assert_eq!(
        one("listeners: {body_limit_bytes: 0}\n"),
        "listeners: option \"body_limit_bytes\": must be greater than 0"
    );
}

/// The body budget must hold one body of the largest size the limit accepts, or
/// such a body could never be read.
#[test]
fn a_body_budget_below_the_body_limit_is_refused() {
    assert_eq!(
        one("listeners: {body_limit_bytes: 2048, body_budget_bytes: 2047}\n"),
        "listeners: option \"body_budget_bytes\": 2047 is below body_limit_bytes (2048): a body of the largest size accepted could never be read"
    );
    assert!(load("listeners: {body_limit_bytes: 2048, body_budget_bytes: 2048}\n").is_ok());
    // The default budget (256 MiB) holds the largest limit (256 MiB).
    assert!(load("listeners: {body_limit_bytes: 268435456}\n").is_ok());
}

#[test]
fn zero_limits() {
    for (section, option) in [
        ("dispatch", "batch"),
        ("dispatch", "sink_concurrency"),
        ("dispatch", "pipelined_concurrency"),
        ("dispatch", "admission_window"),
        ("dispatch", "admission_window_bytes"),
        ("retry", "base_ms"),
        ("retry", "max_elapsed_ms"),
        ("breaker", "failures"),
        ("breaker", "distinct"),
        ("breaker", "open_ms"),
        ("node", "max_pending"),
        ("node", "max_pending_bytes"),
    ] {
        assert_eq!(
            one(&format!("{section}: {{{option}: 0}}\n")),
            format!("{section}: option \"{option}\": must be greater than 0")
        );
    }
    assert_eq!(
        one("tenants: [{name: t, max_pending: 0}]\n"),
        "tenant \"t\": option \"max_pending\": must be greater than 0"
    );
    // flush_interval_ms may be 0 (flush every outcome at once).
    assert!(load("dispatch: {flush_interval_ms: 0}\n").is_ok());
}

#[test]
fn retry_base_above_max() {
    assert_eq!(
        one("retry: {base_ms: 5000, max_ms: 1000}\n"),
        "retry: option \"base_ms\": 5000 is greater than max_ms (1000): the first backoff cannot exceed the largest"
    );
    // Against the default max (600000).
    assert_eq!(
        one("retry: {base_ms: 700000}\n"),
        "retry: option \"base_ms\": 700000 is greater than max_ms (600000): the first backoff cannot exceed the largest"
    );
}

#[test]
fn verification_rejections() {
    let src = |v: &str| format!("sources:\n  - {{name: s, verification: {v}, sinks: [{FILE}]}}\n");
    assert_eq!(
        one(&src("{type: stripe, secrets: []}")),
        "source \"s\": option \"verification.secrets\": is empty: stripe verification needs at least one secret"
    );
    assert_eq!(
        one(&src("{type: github}")),
        "source \"s\": option \"verification.secrets\": required for github verification (a list of one or more secrets)"
    );
    assert_eq!(
        one(&src("shopify")),
        "source \"s\": option \"verification.secrets\": required for shopify verification (a list of one or more secrets)"
    );
    assert_eq!(
        one(&src("{type: github, secrets: [a], tolerance_ms: 1000}")),
        "source \"s\": option \"verification.tolerance_ms\": is not an option of github verification"
    );
    assert_eq!(
        one(&src("{type: stripe, secrets: [a], header: x-sig}")),
        "source \"s\": option \"verification.header\": is not an option of stripe verification"
    );
    assert_eq!(
        one(&src("{type: none, secrets: [a]}")),
        "source \"s\": option \"verification.secrets\": is not an option of none verification"
    );
    assert_eq!(
        one(&src("{type: hmac, secrets: [a]}")),
        "source \"s\": option \"verification.header\": required for hmac verification (the header that carries the signature)"
    );
    assert_eq!(
        one(&src("{type: slack, secrets: [a], tolerance_ms: 0}")),
        "source \"s\": option \"verification.tolerance_ms\": must be greater than 0"
    );
    assert_eq!(
        one(&src("{type: stripe, secrets: ['']}")),
        "source \"s\": option \"verification.secrets[0]\": the secret is empty"
    );
}

#[test]
fn dedupe_rejections() {
    let src = |v: &str| format!("sources:\n  - {{name: s, dedupe: {v}, sinks: [{FILE}]}}\n");
    assert_eq!(
        one(&src("{header: a, json: b}")),
        "source \"s\": option \"dedupe\": give one of header or json, not both"
    );
    assert_eq!(
        one(&src("{ttl_ms: 5}")),
        "source \"s\": option \"dedupe\": give the key: {header: NAME} or {json: a.b.c}"
    );
    assert_eq!(
        one(&src("{json: 'a.'}")),
        "source \"s\": option \"dedupe.json\": \"a.\" is not a JSON dot path: write member names separated by dots, e.g. data.object.customer"
    );
    assert_eq!(
        one(&src("{header: webhook-id, ttl_ms: 0}")),
        "source \"s\": option \"dedupe.ttl_ms\": must be greater than 0"
    );
}

#[test]
fn store_headers_rejections() {
    assert_eq!(
        one("store_headers: {headers: {X-A: drop, x-a: keep}}\n"),
        "store_headers: option \"headers.x-a\": header \"x-a\" is listed twice (names are case-insensitive)"
    );
    assert_eq!(
        one(&format!(
            "sources:\n  - {{name: s, store_headers: {{headers: {{'bad name': drop}}}}, sinks: [{FILE}]}}\n"
        )),
        "source \"s\": option \"store_headers.headers.bad name\": \"bad name\" is not a valid HTTP header name"
    );
}

#[test]
fn challenge_option() {
    let src = |c: &str| format!("sources:\n  - {{name: s, challenge: {c}, sinks: [{FILE}]}}\n");
    let c = crate::helpers::load_env(
        &src("{query: hub.challenge, token_query: hub.verify_token, token: 'env:META_TOKEN'}"),
        &[("META_TOKEN", "t0k")],
    )
    .expect("challenge with token");
    let ch = c.sources[0].challenge.as_ref().expect("challenge");
    assert_eq!(ch.query, "hub.challenge");
    let (q, t) = ch.token.as_ref().expect("token");
    assert_eq!((q.as_str(), t.expose()), ("hub.verify_token", "t0k"));
    let c = crate::helpers::ok(&src("{query: challenge}"));
    assert_eq!(
        c.sources[0].challenge,
        Some(ankusa_config::Challenge {
            query: "challenge".into(),
            token: None,
        })
    );
    assert_eq!(
        crate::helpers::ok(&format!("sources:\n  - {{name: s, sinks: [{FILE}]}}\n")).sources[0]
            .challenge,
        None
    );
    assert_eq!(
        one(&src("{query: 'a=b'}")),
        "source \"s\": option \"challenge.query\": \"a=b\" is not a query parameter name"
    );
    assert_eq!(
        one(&src("{query: c, token_query: t}")),
        "source \"s\": option \"challenge.token\": required with token_query (the value the GET must carry)"
    );
    assert_eq!(
        one(&src("{query: c, token: x}")),
        "source \"s\": option \"challenge.token_query\": required with token (the query parameter that carries it)"
    );
}

#[test]
fn standard_webhooks_secrets_must_be_base64() {
    let src = |secret: &str| {
        format!(
            "sources:\n  - {{name: s, verification: {{type: standard_webhooks, secrets: ['{secret}']}}, sinks: [{FILE}]}}\n"
        )
    };
    for good in [
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_YWJj",
        "whsec_YWI=",
        "whsec_YWI",
    ] {
        assert!(load(&src(good)).is_ok(), "{good}");
    }
    for bad in ["whsec_", "whsec_not base64!", "whsec_YWJjZ", "whsec_Y==="] {
        assert_eq!(
            one(&src(bad)),
            "source \"s\": option \"verification.secrets[0]\": is not a Standard Webhooks secret: expected whsec_ followed by base64",
            "{bad}"
        );
    }
}

#[test]
fn a_file_sink_path_must_name_a_file() {
    assert_eq!(
        one("sources:\n  - {name: a, sinks: [{type: file, name: f, path: ./data/}]}\n"),
        "source \"a\", sink \"f\" (file): option \"path\": \"./data/\" names a directory; name the file"
    );
}

#[test]
fn node_names_may_be_host_names() {
    assert_eq!(
        crate::helpers::ok("node: {name: relay-1.eu.example.com}\n")
            .node
            .name,
        "relay-1.eu.example.com"
    );
    assert_eq!(
        one("node: {name: 'relay 1'}\n"),
        "node: option \"name\": \"relay 1\" is not a valid node name: 1-64 characters of A-Z a-z 0-9 _ - ., starting with a letter or digit"
    );
}

/// A breaker that could never open, and every bad `rate_limit`, each naming the
/// source, the sink and the option; every problem of the file in one run.
#[test]
fn breaker_distinct_and_rate_limit_rejections() {
    assert_eq!(
        one("breaker: {failures: 2, distinct: 3}\n"),
        "breaker: option \"distinct\": 3 is greater than failures (2): 2 failures come from at most 2 lanes, so the breaker could never open"
    );
    assert_eq!(
        one("retry: {max_elapsed_ms: 99999999999999}\n"),
        "retry: option \"max_elapsed_ms\": 99999999999999 is more than a year (31536000000 ms): write milliseconds"
    );
    assert_eq!(
        one("breaker: {open_ms: 99999999999}\n"),
        "breaker: option \"open_ms\": 99999999999 is more than a day (86400000 ms): an open breaker parks every row of its sink that long; write milliseconds"
    );
    let sink = |rl: &str| {
        format!(
            "sources:\n  - name: shop\n    sinks:\n      - {{type: file, name: out, path: x, rate_limit: {rl}}}\n"
        )
    };
    for (rl, option, message) in [
        (
            "20",
            "rate_limit",
            "must be {per_second: N, burst: M} (hooks per second, burst optional), found 20",
        ),
        (
            "{burst: 5}",
            "rate_limit.per_second",
            "required: hooks per second, from 0.001 to 1000000",
        ),
        (
            "{per_second: 0}",
            "rate_limit.per_second",
            "must be a number of hooks per second from 0.001 (one in 1000 s; pause the sink to stop it) to 1000000, found 0",
        ),
        (
            "{per_second: -3}",
            "rate_limit.per_second",
            "must be a number of hooks per second from 0.001 (one in 1000 s; pause the sink to stop it) to 1000000, found -3",
        ),
        (
            "{per_second: fast}",
            "rate_limit.per_second",
            "must be a number of hooks per second from 0.001 (one in 1000 s; pause the sink to stop it) to 1000000, found \"fast\"",
        ),
        (
            "{per_second: 2000000}",
            "rate_limit.per_second",
            "must be a number of hooks per second from 0.001 (one in 1000 s; pause the sink to stop it) to 1000000, found 2000000",
        ),
        (
            "{per_second: 0.0001}",
            "rate_limit.per_second",
            "must be a number of hooks per second from 0.001 (one in 1000 s; pause the sink to stop it) to 1000000, found 0.0001",
        ),
        (
            "{per_second: 0.0009, burst: 1000000}",
            "rate_limit.per_second",
            "must be a number of hooks per second from 0.001 (one in 1000 s; pause the sink to stop it) to 1000000, found 0.0009",
        ),
        (
            "{per_second: 5, burst: 0}",
            "rate_limit.burst",
            "must be a whole number of hooks from 1 to 1000000, found 0",
        ),
        (
            "{per_second: 5, burst: 2.5}",
            "rate_limit.burst",
            "must be a whole number of hooks from 1 to 1000000, found 2.5",
        ),
        (
            "{per_second: 5, per_minute: 9}",
            "rate_limit.per_minute",
            "unknown option of rate_limit (its options: per_second, burst)",
        ),
    ] {
        assert_eq!(
            one(&sink(rl)),
            format!("source \"shop\", sink \"out\" (file): option \"{option}\": {message}"),
            "{rl}"
        );
    }
    // Every problem in one run.
    let p = problems(load(&sink("{per_second: 0, burst: 0, every: 2}")));
    assert_eq!(p.len(), 3, "{p:#?}");
}

/// A broker sink's `forward_headers` may list only headers the store keeps
/// (docs/design.md section 6, "Provider headers"): a dropped or hashed one
/// could never travel. `all`, kept headers and the http/file kinds (whose own
/// checks refuse the option) are not this rule's.
#[test]
fn forward_headers_must_be_kept_by_store_headers() {
    let yaml = "store_headers: {headers: {x-secret: drop, X-Api-Key: hash}}\nsources:\n  - name: a\n    sinks:\n      - {type: kafka, name: k, brokers: b, topic: t, forward_headers: [X-Secret, x-api-key, x-kept, 'bad name', 3]}\n      - {type: sqs, name: q, queue_url: u, forward_headers: all}\n  - name: b\n    store_headers: {default: drop, headers: {x-kept: keep}}\n    sinks:\n      - {type: nats, name: n, url: u, subject: s, forward_headers: [x-kept, x-other]}\n";
    assert_eq!(
        one(
            "sources:\n  - {name: a, sinks: [{type: http, name: h, url: 'http://x/', forward_headers: all}]}\n"
        ),
        "source \"a\", sink \"h\" (http): option \"forward_headers\": is an option of the broker and cloud \
         sinks; the http sink forwards every stored header already (less hop-by-hop and framing ones)"
    );
    assert_eq!(
        one(
            "sources:\n  - {name: a, sinks: [{type: file, name: f, path: x, forward_headers: [x-a]}]}\n"
        ),
        "source \"a\", sink \"f\" (file): option \"forward_headers\": is an option of the broker and cloud \
         sinks; the file sink writes every stored header in each line already"
    );
    assert_eq!(
        problems(load(yaml)),
        [
            "source \"a\", sink \"k\" (kafka): option \"forward_headers\": header \"x-secret\" is not kept by the store: \
             the instance store_headers policy drops it, so it could never travel to the sink; set store_headers \
             headers.x-secret: keep, or leave it out",
            "source \"a\", sink \"k\" (kafka): option \"forward_headers\": header \"x-api-key\" is not kept by the store: \
             the instance store_headers policy hashes it, so it could never travel to the sink; set store_headers \
             headers.x-api-key: keep, or leave it out",
            "source \"b\", sink \"n\" (nats): option \"forward_headers\": header \"x-other\" is not kept by the store: \
             the source's store_headers override drops it, so it could never travel to the sink; set store_headers \
             headers.x-other: keep, or leave it out",
        ]
    );
}

/// `node.otel`: an endpoint that is not an http(s) URL with a host, an empty
/// service name or filter, each named; an unknown option of the section is
/// named by the parser.
#[test]
fn node_otel_values_are_checked() {
    for bad in [
        "collector:4318",
        "grpc://collector:4317",
        "http://",
        "https:///v1",
        "http://a b",
    ] {
        assert_eq!(
            one(&format!(
                "node: {{otel: {{endpoint: '{bad}'}}}}\nsources: []\n"
            )),
            format!(
                "node: option \"otel.endpoint\": \"{bad}\" is not an OTLP/HTTP endpoint: the collector's http:// or https:// URL \
                 (http://127.0.0.1:4318; /v1/traces is appended)"
            )
        );
    }
    assert_eq!(
        one("node: {otel: {service_name: ' '}}\nsources: []\n"),
        "node: option \"otel.service_name\": must not be empty (leave it out for OTEL_SERVICE_NAME, else ankusa)"
    );
    assert_eq!(
        one("node: {otel: {filter: ''}}\nsources: []\n"),
        "node: option \"otel.filter\": must not be empty (leave it out for ankusa=debug; `off` exports nothing)"
    );
    let e = load("node: {otel: {endpont: 'http://x'}}\nsources: []\n").expect_err("unknown option");
    assert!(e.to_string().contains("node.otel: unknown field `endpont`, expected one of `endpoint`, `service_name`, `filter`"), "{e}");
}
