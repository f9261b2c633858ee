//! Defaults of every option, and the shapes of sources and sinks that load.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use ankusa_config::{
    AttemptLog, Breaker, Dedupe, Dispatch, FileSink, HeaderAction, HeaderPolicy, HmacAlgorithm,
    HttpSink, JsonPath, KeyFn, KeySource, Listeners, LogFormat, Node, Order, OrderingKey, Retry,
    SignatureEncoding, SinkKind, StoreBackend, Tenant, TenantBinding, TypedOptions, Verification,
    defaults,
};
use serde_yaml_ng::Value;

use crate::helpers::{ok, one};

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("test address")
}

#[test]
fn an_almost_empty_file_takes_every_default() {
    let c = ok("sources:\n  - name: demo\n    sinks: [{type: file, path: out.ndjson}]\n");
    assert_eq!(
        c.node,
        Node {
            name: "ankusa".into(),
            data_dir: PathBuf::from("./data"),
            store: StoreBackend::RocksDb,
            max_pending: 1_000_000,
            max_pending_bytes: 1 << 30,
            log_format: LogFormat::Text,
            otel: None,
            attempt_log: AttemptLog {
                enabled: true,
                max_attempts: 20,
                max_body_bytes: 4096,
            },
        }
    );
    assert_eq!(
        c.listeners,
        Listeners {
            ingest: addr("127.0.0.1:8080"),
            admin: addr("127.0.0.1:8081"),
            admin_token: None,
            metrics_require_token: false,
            body_limit_bytes: 26_214_400,
            body_budget_bytes: 268_435_456,
        }
    );
    assert_eq!(c.store_headers, HeaderPolicy::default());
    assert_eq!(c.store_headers.action("anything"), HeaderAction::Keep);
    assert_eq!(
        c.dispatch,
        Dispatch {
            batch: 64,
            sink_concurrency: 8,
            pipelined_concurrency: 256,
            admission_window: 1024,
            admission_window_bytes: 64 << 20,
            flush_interval_ms: 0,
        }
    );
    assert_eq!(
        c.retry,
        Retry {
            base_ms: 1000,
            max_ms: 600_000,
            max_elapsed_ms: 86_400_000,
            retry_after_max_ms: None,
        }
    );
    assert_eq!(
        c.retry.max_elapsed(),
        std::time::Duration::from_secs(24 * 3600)
    );
    assert_eq!(
        c.breaker,
        Breaker {
            failures: 5,
            distinct: 3,
            open_ms: 30_000,
        }
    );
    assert_eq!(
        c.tenants,
        [Tenant {
            name: "default".into(),
            max_pending: 100_000,
            max_pending_bytes: 256 << 20,
        }]
    );
    let s = &c.sources[0];
    assert_eq!(s.name, "demo");
    assert_eq!(s.path, "/hooks/demo");
    assert_eq!(s.tenant, TenantBinding::Fixed("default".into()));
    assert_eq!(s.verification, Verification::None);
    assert_eq!(s.dedupe, None);
    assert!(!s.store_headers_overridden);
    assert_eq!(s.sinks.len(), 1);
    let k = &s.sinks[0];
    assert_eq!(k.name, "file-0");
    assert_eq!(k.kind, SinkKind::File);
    assert_eq!(k.index, 0);
    assert_eq!(k.order, Order::Unordered);
    assert_eq!(
        k.typed,
        TypedOptions::File(FileSink {
            path: PathBuf::from("out.ndjson"),
        })
    );
    // The defaults module says the same.
    assert_eq!(defaults::BATCH, c.dispatch.batch);
    assert_eq!(defaults::RETRY_MAX_ELAPSED_MS, c.retry.max_elapsed_ms);
}

#[test]
fn every_section_option_is_read() {
    let c = ok("
node: {name: relay-2, data_dir: /var/lib/ankusa, store: fjall, max_pending: 50, max_pending_bytes: 4096}
listeners: {ingest: '0.0.0.0:9000', admin: '[::1]:9001', admin_token: t0ken-0123456789abc, metrics_require_token: true, body_limit_bytes: 2048, body_budget_bytes: 4096}
store_headers: {default: drop, headers: {X-Entity-Id: keep, authorization: hash}}
dispatch: {batch: 16, sink_concurrency: 2, pipelined_concurrency: 9, admission_window: 100, admission_window_bytes: 1000, flush_interval_ms: 3}
retry: {base_ms: 10, max_ms: 10, max_elapsed_ms: 60000}
breaker: {failures: 3, distinct: 2, open_ms: 1500}
tenants: [{name: acme, max_pending: 7, max_pending_bytes: 700}, {name: globex}]
sources:
  - {name: a, tenant: acme, sinks: [{type: file, path: a.ndjson}]}
");
    assert_eq!(c.node.name, "relay-2");
    assert_eq!(c.node.data_dir, PathBuf::from("/var/lib/ankusa"));
    assert_eq!(c.node.store, StoreBackend::Fjall);
    assert_eq!((c.node.max_pending, c.node.max_pending_bytes), (50, 4096));
    assert_eq!(c.listeners.ingest, addr("0.0.0.0:9000"));
    assert_eq!(c.listeners.admin, addr("[::1]:9001"));
    assert_eq!(c.listeners.body_limit_bytes, 2048);
    assert_eq!(c.listeners.body_budget_bytes, 4096);
    assert!(c.listeners.metrics_require_token);
    assert_eq!(c.store_headers.default, HeaderAction::Drop);
    assert_eq!(
        c.store_headers.headers,
        BTreeMap::from([
            ("authorization".to_owned(), HeaderAction::Hash),
            ("x-entity-id".to_owned(), HeaderAction::Keep),
        ])
    );
    assert_eq!(c.store_headers.action("X-ENTITY-ID"), HeaderAction::Keep);
    assert_eq!(c.store_headers.action("cookie"), HeaderAction::Drop);
    assert_eq!(
        c.dispatch,
        Dispatch {
            batch: 16,
            sink_concurrency: 2,
            pipelined_concurrency: 9,
            admission_window: 100,
            admission_window_bytes: 1000,
            flush_interval_ms: 3,
        }
    );
    assert_eq!(
        c.retry,
        Retry {
            base_ms: 10,
            max_ms: 10,
            max_elapsed_ms: 60_000,
            retry_after_max_ms: None,
        }
    );
    assert_eq!(
        c.breaker,
        Breaker {
            failures: 3,
            distinct: 2,
            open_ms: 1500,
        }
    );
    assert_eq!(
        c.tenants,
        [
            Tenant {
                name: "acme".into(),
                max_pending: 7,
                max_pending_bytes: 700,
            },
            Tenant {
                name: "globex".into(),
                max_pending: 100_000,
                max_pending_bytes: 256 << 20,
            },
        ]
    );
    assert_eq!(c.tenant("globex").map(|t| t.max_pending), Some(100_000));
    assert_eq!(
        c.source("a").map(|s| &s.tenant),
        Some(&TenantBinding::Fixed("acme".into()))
    );
    assert!(c.source("b").is_none());
    // metrics_require_token needs a token, given here; read as written.
    assert_eq!(
        c.listeners.admin_token.as_ref().map(|t| t.expose()),
        Some("t0ken-0123456789abc")
    );
}

#[test]
fn verification_schemes_and_their_defaults() {
    let c = ok("
sources:
  - {name: gh, verification: {type: github, secrets: [a]}, sinks: [{type: file, path: x}]}
  - {name: st, verification: {type: stripe, secrets: [new, old]}, sinks: [{type: file, path: x}]}
  - {name: st2, verification: {type: stripe, secrets: [s], tolerance_ms: 60000}, sinks: [{type: file, path: x}]}
  - {name: sh, verification: {type: shopify, secrets: [s]}, sinks: [{type: file, path: x}]}
  - {name: sl, verification: {type: slack, secrets: [s]}, sinks: [{type: file, path: x}]}
  - {name: sw, verification: {type: standard_webhooks, secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw']}, sinks: [{type: file, path: x}]}
  - {name: hm, verification: {type: hmac, header: X-Sig, secrets: [s]}, sinks: [{type: file, path: x}]}
  - {name: hm2, verification: {type: hmac, header: x-sig, algorithm: sha512, encoding: base64, prefix: 'v1=', secrets: [s]}, sinks: [{type: file, path: x}]}
  - {name: no, verification: none, sinks: [{type: file, path: x}]}
  - {name: no2, verification: {type: none}, sinks: [{type: file, path: x}]}
");
    let v = |name: &str| {
        c.source(name)
            .map(|s| s.verification.clone())
            .expect("source")
    };
    let secrets = |name: &str| -> Vec<String> {
        v(name)
            .secrets()
            .iter()
            .map(|s| s.expose().to_owned())
            .collect()
    };
    assert_eq!(v("gh").kind(), "github");
    assert_eq!(secrets("gh"), ["a"]);
    assert_eq!(v("gh").tolerance_ms(), None);
    assert_eq!(v("st").kind(), "stripe");
    assert_eq!(secrets("st"), ["new", "old"]);
    assert_eq!(v("st").tolerance_ms(), Some(300_000));
    assert_eq!(v("st2").tolerance_ms(), Some(60_000));
    assert_eq!(v("sh").kind(), "shopify");
    assert_eq!(v("sl").tolerance_ms(), Some(300_000));
    assert_eq!(v("sw").kind(), "standard_webhooks");
    assert_eq!(v("sw").tolerance_ms(), Some(300_000));
    assert_eq!(secrets("sw"), ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
    let Verification::Hmac {
        header,
        algorithm,
        encoding,
        prefix,
        secrets: s,
    } = v("hm")
    else {
        panic!("hmac expected")
    };
    assert_eq!(
        (
            header.as_str(),
            algorithm,
            encoding,
            prefix.as_str(),
            s.len()
        ),
        (
            "x-sig",
            HmacAlgorithm::Sha256,
            SignatureEncoding::Hex,
            "",
            1
        )
    );
    let Verification::Hmac {
        algorithm,
        encoding,
        prefix,
        ..
    } = v("hm2")
    else {
        panic!("hmac expected")
    };
    assert_eq!(
        (algorithm, encoding, prefix.as_str()),
        (HmacAlgorithm::Sha512, SignatureEncoding::Base64, "v1=")
    );
    assert_eq!(v("no"), Verification::None);
    assert_eq!(v("no2"), Verification::None);
    assert!(v("no").secrets().is_empty());
}

#[test]
fn dedupe_forms_and_ttl() {
    let c = ok("
sources:
  - {name: a, dedupe: {header: Webhook-Id}, sinks: [{type: file, path: x}]}
  - {name: b, dedupe: {json: data.object.id, ttl_ms: 1000}, sinks: [{type: file, path: x}]}
");
    assert_eq!(
        c.sources[0].dedupe,
        Some(Dedupe {
            key: KeySource::Header("webhook-id".into()),
            ttl_ms: 259_200_000,
        })
    );
    assert_eq!(
        c.sources[1].dedupe,
        Some(Dedupe {
            key: KeySource::Json(JsonPath {
                dotted: "data.object.id".into(),
                segments: vec!["data".into(), "object".into(), "id".into()],
            }),
            ttl_ms: 1000,
        })
    );
}

#[test]
fn tenant_path_sources() {
    let c = ok("
tenants: [{name: acme}, {name: globex}]
sources:
  - {name: shopify, tenant_path: true, sinks: [{type: file, path: x}]}
  - {name: other, path: /in/other, tenant: globex, tenant_path: false, sinks: [{type: file, path: x}]}
");
    assert_eq!(c.sources[0].tenant, TenantBinding::Path);
    assert_eq!(c.sources[0].path, "/hooks/shopify");
    assert_eq!(c.sources[1].tenant, TenantBinding::Fixed("globex".into()));
    assert_eq!(c.sources[1].path, "/in/other");
}

#[test]
fn http_sink_options_and_default_names() {
    let c = ok("
sources:
  - name: a
    sinks:
      - {type: http, url: 'https://example.com/in?x=1'}
      - {type: http, name: second, url: 'http://10.0.0.1:8080/', timeout_ms: 2500, headers: {Authorization: 'Bearer t', x-team: core}}
      - {type: kafka, brokers: ['b1:9092', 'b2:9092'], topic: hooks, acks: all, nested: {level: [1, 2.5, true, null]}}
");
    let s = &c.sources[0];
    assert_eq!(
        s.sinks
            .iter()
            .map(|k| (k.name.as_str(), k.index))
            .collect::<Vec<_>>(),
        [("http-0", 0), ("second", 1), ("kafka-2", 2)]
    );
    let TypedOptions::Http(HttpSink {
        url,
        timeout_ms,
        headers,
    }) = &s.sinks[0].typed
    else {
        panic!("http expected")
    };
    assert_eq!(
        (url.as_str(), *timeout_ms, headers.len()),
        ("https://example.com/in?x=1", 10_000, 0)
    );
    let TypedOptions::Http(h) = &s.sinks[1].typed else {
        panic!("http expected")
    };
    assert_eq!(h.url, "http://10.0.0.1:8080/");
    assert_eq!(h.timeout_ms, 2500);
    let hv: Vec<(&str, &str)> = h
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.expose()))
        .collect();
    assert_eq!(hv, [("authorization", "Bearer t"), ("x-team", "core")]);
    // A kind this crate does not type keeps its options untouched.
    let k = &s.sinks[2];
    assert_eq!(k.kind, SinkKind::Kafka);
    assert_eq!(k.typed, TypedOptions::Unchecked);
    assert_eq!(
        serde_json::Value::Object(k.options_json()),
        serde_json::json!({
            "brokers": ["b1:9092", "b2:9092"],
            "topic": "hooks",
            "acks": "all",
            "nested": {"level": [1, 2.5, true, null]},
        })
    );
    assert_eq!(k.options.get("type"), None);
    assert_eq!(k.options.get("topic"), Some(&Value::String("hooks".into())));
    assert_eq!(s.sink("second").map(|k| k.index), Some(1));
}

#[test]
fn an_ordering_key_function_through_the_library_api() {
    let mut c = ok(
        "sources:\n  - {name: a, sinks: [{type: file, name: f, path: x, ordered: true}, {type: file, name: g, path: y}]}\n",
    );
    let f = KeyFn::new(|input| input.headers.first().map(|(_, v)| v.to_vec()));
    c.set_ordering_key_fn("a", "f", f.clone())
        .expect("ordered sink");
    let Some(OrderingKey::Func(got)) = c.sources[0].sinks[0].order.key() else {
        panic!("function key expected")
    };
    assert_eq!(got, &f);
    let input = ankusa_config::KeyInput {
        source: "a",
        tenant: "default",
        headers: &[("x-entity-id", b"cus_1")],
        body: b"{}",
    };
    assert_eq!(got.call(&input), Some(b"cus_1".to_vec()));
    let err = c
        .set_ordering_key_fn("a", "g", f.clone())
        .expect_err("unordered sink");
    assert_eq!(
        err.to_string(),
        "source \"a\", sink \"g\" (file): option \"ordering_key\": requires ordered: true"
    );
    let err = c
        .set_ordering_key_fn("a", "h", f.clone())
        .expect_err("no such sink");
    assert_eq!(
        err.to_string(),
        "source \"a\": option \"sinks\": no sink named \"h\""
    );
    let err = c
        .set_ordering_key_fn("b", "f", f)
        .expect_err("no such source");
    assert_eq!(
        err.to_string(),
        "sources: option \"name\": no source named \"b\""
    );
}

#[test]
fn zero_sources_is_a_valid_node() {
    // A node with no sources still drains and serves the admin API.
    let c = ok("node: {store: memory}\n");
    assert!(c.sources.is_empty());
    assert_eq!(c.node.store, StoreBackend::Memory);
    // But a tenants list must not be empty.
    assert_eq!(
        one("tenants: []\n"),
        "tenants: option \"tenants\": at least one tenant is required"
    );
}

/// `breaker.distinct` defaults to min(3, failures); a sink's `rate_limit` is
/// read as written, its burst defaulting to per_second rounded up; it is a core
/// key, not one of the sink's own options.
#[test]
fn breaker_distinct_and_rate_limit_defaults() {
    for (failures, distinct) in [(1, 1), (2, 2), (3, 3), (5, 3), (100, 3)] {
        let c = ok(&format!("breaker: {{failures: {failures}}}\n"));
        assert_eq!(c.breaker.distinct, distinct, "failures {failures}");
    }
    let c = ok("
sources:
  - name: a
    sinks:
      - {type: file, name: f, path: a.ndjson, rate_limit: {per_second: 20}}
      - {type: file, name: g, path: b.ndjson, rate_limit: {per_second: 0.5, burst: 3}}
      - {type: redis, name: r, url: 'redis://127.0.0.1', stream: s, rate_limit: {per_second: 2.5}}
      - {type: file, name: h, path: c.ndjson}
");
    let s = &c.sources[0];
    let limits: Vec<Option<ankusa_config::RateLimit>> =
        s.sinks.iter().map(|e| e.rate_limit).collect();
    assert_eq!(
        limits,
        vec![
            Some(ankusa_config::RateLimit {
                per_second: 20.0,
                burst: 20
            }),
            Some(ankusa_config::RateLimit {
                per_second: 0.5,
                burst: 3
            }),
            Some(ankusa_config::RateLimit {
                per_second: 2.5,
                burst: 3
            }),
            None,
        ]
    );
    assert!(
        s.sinks
            .iter()
            .all(|e| e.options.get("rate_limit").is_none())
    );
}

/// `node.otel` (README, "Logs"): left out, no section; `{}` takes the
/// defaults (endpoint and service name from the environment, the filter
/// `ankusa=debug`); every option is read as written.
#[test]
fn node_otel_is_read_with_its_defaults() {
    let file = "sources: []\n";
    assert_eq!(ok(&format!("node: {{}}\n{file}")).node.otel, None);
    assert_eq!(
        ok(&format!("node: {{otel: {{}}}}\n{file}")).node.otel,
        Some(ankusa_config::Otel {
            endpoint: None,
            service_name: None,
            filter: defaults::OTEL_FILTER.to_owned()
        })
    );
    assert_eq!(defaults::OTEL_FILTER, "ankusa=debug");
    let c = ok(&format!(
        "node:\n  otel:\n    endpoint: https://collector.example:4318\n    service_name: relay-eu\n    filter: 'ankusa_pipeline=debug'\n{file}"
    ));
    assert_eq!(
        c.node.otel,
        Some(ankusa_config::Otel {
            endpoint: Some("https://collector.example:4318".to_owned()),
            service_name: Some("relay-eu".to_owned()),
            filter: "ankusa_pipeline=debug".to_owned(),
        })
    );
}
