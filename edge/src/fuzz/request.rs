//! The request path target: a [`Case`] as one HTTP request through
//! [`Edge::handle`], the function the ingest listener calls for every
//! request, in process (no socket): routing, method, body limit,
//! verification, the Slack handshake, quarantine, dedupe, the sinks' filters
//! and ordering keys, the queue bounds and the Writer's commit to a fresh
//! in-memory store. The edge's contract (`server` module docs): no input
//! makes it panic or answer a 5xx other than a store failure, and a memory
//! store does not fail.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ankusa_config::Config;
use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Cf, Direction, Durability, Kv, Read};
use ankusa_keys::{Envelope, TenantOrd, hooks_tenant_range};
use ankusa_queue::writer::{Writer, WriterConfig};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_LENGTH, HeaderName, HeaderValue, TRANSFER_ENCODING};
use hyper::{Method, Request, StatusCode, Uri};

use super::{Case, Scheme};
use crate::server::{Edge, EdgeStats, build_routes};

/// The harness's body limit (the relay's default is 25 MiB): small, so the
/// corpus's 1 MiB bodies take the 413 path.
pub const HARNESS_BODY_LIMIT_BYTES: u64 = 64 * 1024;

/// The relay configuration the request target runs: one source per
/// verification scheme the config offers (with the corpus test secrets,
/// dedupe keys, ordered sinks keyed by JSON paths and headers, filters), an
/// unsigned source whose tenant is the last path segment, a source that
/// holds bad signatures in quarantine, one that holds every hook, a GET
/// challenge, and a tenant whose bound (1 pending row) refuses a hook with 2
/// rows (429). The HTTP sinks are never called (no pipeline runs).
pub const HARNESS_CONFIG: &str = r#"
node: {store: memory}
tenants:
  - {name: default}
  - {name: acme}
  - {name: globex, max_pending: 1}
sources:
  - name: github
    verification: {type: github, secrets: ["It's a Secret to Everybody"]}
    dedupe: {header: x-github-delivery}
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a', ordered: true, ordering_key: {json: repository.full_name}}
      - {type: http, url: 'http://127.0.0.1:9/b', filter: {header: x-github-event, one_of: [push, pull_request]}}
  - name: stripe
    verification: {type: stripe, secrets: [whsec_corpus_test_secret_0001, whsec_corpus_test_secret_0000]}
    dedupe: {json: id}
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a', ordered: true, ordering_key: {json: data.object.customer}, filter: {json: type, prefix: "invoice."}}
      - {type: http, url: 'http://127.0.0.1:9/b', filter: [{json: data.object.status, exists: true}, {json: livemode, exists: false}]}
  - name: shopify
    verification: {type: shopify, secrets: [shpss_corpus_test_secret_0001]}
    dedupe: {header: x-shopify-webhook-id}
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a', ordered: true, ordering_key: {header: x-shopify-product-id}}
  - name: slack
    verification: {type: slack, secrets: [8f742231b10e8888abcd99yyyzzz85a5]}
    dedupe: {json: event_id}
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a', ordered: true, ordering_key: {json: event.channel}}
  - name: standard-webhooks
    verification: {type: standard_webhooks, secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]}
    dedupe: {header: webhook-id}
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a', ordered: true}
  - name: hmac
    verification: {type: hmac, header: x-hub-signature, algorithm: sha1, encoding: hex, prefix: 'sha1=', secrets: ["It's a Secret to Everybody"]}
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a'}
  - name: salesforce
    tenant_path: true
    dedupe: {header: x-entity-id}
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a', ordered: true, ordering_key: {header: x-entity-id}}
      - {type: http, url: 'http://127.0.0.1:9/b'}
  - name: held
    verification: {type: github, secrets: ["It's a Secret to Everybody"]}
    on_invalid_signature: quarantine
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a'}
  - name: review
    quarantine: true
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a'}
  - name: subscribe
    challenge: {query: hub.challenge, token_query: hub.verify_token, token: fuzz-token}
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a'}
  - name: bounded
    tenant: globex
    sinks:
      - {type: http, url: 'http://127.0.0.1:9/a'}
      - {type: http, url: 'http://127.0.0.1:9/b'}
"#;

/// The scheme of the source at `path` (for `sign`), if it verifies.
fn scheme_at(path: &[u8]) -> Option<Scheme> {
    let path = path.split(|&b| b == b'?').next().unwrap_or(path);
    Some(match path {
        b"/hooks/github" | b"/hooks/held" => Scheme::GitHub,
        b"/hooks/stripe" => Scheme::Stripe,
        b"/hooks/shopify" => Scheme::Shopify,
        b"/hooks/slack" => Scheme::Slack,
        b"/hooks/standard-webhooks" => Scheme::StandardWebhooks,
        b"/hooks/hmac" => Scheme::Hmac,
        _ => return None,
    })
}

struct Harness {
    rt: tokio::runtime::Runtime,
    config: Config,
}

thread_local! {
    static HARNESS: RefCell<Option<Harness>> = const { RefCell::new(None) };
}

/// The request as hyper would hand it over, or `None` when hyper would have
/// refused it (400) before the edge: a method, target, header name or header
/// value that does not parse. The framing headers are the body's own
/// (`Content-Length`, unless the case sends `Transfer-Encoding`).
fn build_request(case: &Case) -> Option<Request<Full<Bytes>>> {
    let words = case.words();
    let method = Method::from_bytes(words.first()?).ok()?;
    let uri = Uri::try_from(*words.get(1)?).ok()?;
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .body(Full::new(Bytes::from(case.body.clone())))
        .ok()?;
    let mut chunked = false;
    for (name, value) in &case.headers {
        let name = HeaderName::from_bytes(name).ok()?;
        let value = HeaderValue::from_bytes(value).ok()?;
        if name == CONTENT_LENGTH {
            continue;
        }
        chunked |= name == TRANSFER_ENCODING;
        req.headers_mut().append(name, value);
    }
    if !chunked {
        req.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(case.body.len()));
    }
    Some(req)
}

/// The envelopes in the store, all tenants.
fn envelopes(kv: &MemoryKv) -> Vec<Envelope> {
    (1..=3)
        .flat_map(|t| {
            kv.scan(
                Cf::Hooks,
                &hooks_tenant_range(TenantOrd(t)),
                Direction::Forward,
                16,
            )
            .expect("scan")
        })
        .map(|(_, v)| Envelope::decode(&v).expect("a stored envelope decodes"))
        .collect()
}

/// The request path target. The case's control line is the request line
/// (`METHOD PATH` plus the words of the module docs); on a signed source
/// `sign` signs it with the source's secret at `now` (the edge's clock).
/// A fresh memory store per case, and:
/// - no panic, no 5xx;
/// - a 4xx stores nothing; a 200 `{"id"}` stores exactly that hook, its body
///   byte for byte, a 202 holds it in quarantine; every other answer (a
///   challenge, Slack's handshake) stores nothing; the store's invariants
///   hold (`ankusa_queue::check_invariants`);
/// - a signed case is not refused 401; a tampered one is never accepted
///   (200), and is only held (202) by the source that quarantines bad
///   signatures.
///
/// Returns the answer's status, or `None` when hyper would have refused the
/// request before the edge (the bounded run counts them).
///
/// # Panics
/// When a promise above is broken (that is the finding).
pub fn request(data: &[u8]) -> Option<u16> {
    let mut case = Case::parse(data);
    let now_s = case.now_s();
    let words: Vec<Vec<u8>> = case.words().iter().map(|w| w.to_vec()).collect();
    let path = words.get(1).cloned().unwrap_or_default();
    let scheme = scheme_at(&path);
    let (sign, tamper) = (case.flag("sign") && scheme.is_some(), case.flag("tamper"));
    if let (true, Some(s)) = (sign, scheme) {
        s.sign(&mut case, now_s, super::TWILIO_URL);
        if tamper {
            case.body.push(b'X');
        }
    }
    let req = build_request(&case)?;
    let get = req.method() == Method::GET;
    HARNESS.with(|h| {
        let mut h = h.borrow_mut();
        let h = h.get_or_insert_with(|| Harness {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a tokio runtime"),
            config: Config::from_yaml(HARNESS_CONFIG, &|_| None).expect("the harness config loads"),
        });
        let (status, body, kv) =
            h.rt.block_on(run(&h.config, req, now_s.saturating_mul(1000)));
        let text = String::from_utf8_lossy(&body);
        assert!(!status.is_server_error(), "{status} {text}");
        let stored = envelopes(&kv);
        let reply: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
        let id = reply
            .as_ref()
            .and_then(|r| r.get("id"))
            .and_then(|i| i.as_str());
        match status.as_u16() {
            200 if id.is_some() => {
                assert_eq!(stored.len(), 1, "200 {text}: one hook stored");
                assert_eq!(
                    stored[0].body, case.body,
                    "200: the body stored as received"
                );
            }
            202 => {
                assert_eq!(stored.len(), 1, "202 {text}: one hook held");
                assert!(
                    reply.as_ref().is_some_and(|r| r["quarantined"] == true),
                    "202 {text}"
                );
            }
            _ => assert!(
                stored.is_empty(),
                "{status} {text}: nothing may be stored, found {}",
                stored.len()
            ),
        }
        let violations = ankusa_queue::check_invariants(&*kv).expect("check");
        assert!(violations.is_empty(), "{status} {text}: {violations:?}");
        if sign && !get {
            if !tamper {
                assert_ne!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "a signed request refused: {text}"
                );
            } else {
                assert_ne!(
                    status,
                    StatusCode::OK,
                    "a tampered request accepted: {text}"
                );
                let held = path.starts_with(b"/hooks/held");
                assert!(
                    status != StatusCode::ACCEPTED || held,
                    "a tampered request held by {:?}",
                    String::from_utf8_lossy(&path)
                );
            }
        }
        Some(status.as_u16())
    })
}

/// One request on a fresh store: the answer's status and body, and the store.
async fn run(
    config: &Config,
    req: Request<Full<Bytes>>,
    now_ms: u64,
) -> (StatusCode, Bytes, Arc<MemoryKv>) {
    let kv = Arc::new(MemoryKv::new());
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .expect("init the store");
    let (batch, registry) = ankusa_queue::register(
        &*kv,
        config.tenants.iter().map(|t| t.name.as_str()),
        config.sources.iter().map(|s| s.name.as_str()),
    )
    .expect("register");
    kv.write(batch, Durability::Sync).expect("register");
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), move || now_ms).expect("a writer");
    let writer = tokio::spawn(writer.run());
    let edge = Edge {
        kv: Arc::clone(&kv),
        writer: handle,
        on_commit: Box::new(|| {}),
        routes: arc_swap::ArcSwap::from_pointee(crate::server::IngestRoutes {
            sources: build_routes(config, &registry).expect("routes"),
            body_limit_bytes: HARNESS_BODY_LIMIT_BYTES,
            node_max_pending: 1_000_000,
            node_max_pending_bytes: 1 << 40,
        }),
        max_connections: 1,
        shutting_down: Arc::new(AtomicBool::new(false)),
        reservations: Default::default(),
        stats: Arc::new(EdgeStats::default()),
        clock: Box::new(move || now_ms),
        owners: None,
    };
    let peer = SocketAddr::from(([127, 0, 0, 1], 40_000));
    let resp = edge.handle(req, peer).await;
    drop(edge);
    writer.await.expect("the writer task").expect("the writer");
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (status, body, kv)
}
