//! The Google Pub/Sub sink through the relay: the Stripe corpus published to an
//! ordered topic, and a regional-endpoint refusal that blocks the lanes
//! (nothing dead-lettered) until the peer heals, after which they drain in
//! order.
//!
//! The peer is a local REST peer of the `:publish` call (below), not Google's
//! emulator, which this machine kind does not have (docs/contributing.md,
//! "Test peers"): **the local peer is what ran**. It stores each topic's accepted
//! messages in arrival order, as a subscription with message ordering would
//! see them from one publisher. The relay reaches it through the sink's
//! `emulator_host` option (the per-sink form of `PUBSUB_EMULATOR_HOST`:
//! `http://<host:port>`, no credentials), so no environment variable has to be
//! set for the child process.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::peer::{drained, unique};
use crate::relay::{Relay, config};
use crate::stripe::{self, Received};

/// Pub/Sub's refusal of an ordering key on an endpoint that would forward the
/// message to another region (its words), which the sink must retry.
const REGIONAL_REFUSAL: &str = "Cannot publish messages that contain ordering keys to topic due a \
    message storage policy on the topic that would require the messages to be forwarded to another \
    region. Please either change the topic's message storage policy or publish to an allowed region \
    using the appropriate regional Cloud Pub/Sub endpoint.";

const PROJECT: &str = "ankusa-it";

/// One `:publish` call as the peer saw it.
#[derive(Clone, Debug)]
struct Call {
    topic: String,
    authorization: Option<String>,
    /// The idempotency key attribute of its (one) message.
    id: String,
    ordering_key: Option<String>,
    /// The status answered.
    status: u16,
}

#[derive(Default)]
struct PeerState {
    /// Accepted messages per topic, in arrival order.
    topics: Mutex<BTreeMap<String, Vec<Received>>>,
    calls: Mutex<Vec<Call>>,
    /// Answer every publish that carries an ordering key with
    /// [`REGIONAL_REFUSAL`] (FAILED_PRECONDITION).
    refuse_ordering: AtomicBool,
    next_id: AtomicU64,
}

/// A local Pub/Sub REST peer: `POST /v1/projects/{p}/topics/{t}:publish`.
struct PubSubPeer {
    addr: SocketAddr,
    state: Arc<PeerState>,
    accept: JoinHandle<()>,
}

impl PubSubPeer {
    async fn start() -> PubSubPeer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the peer");
        let addr = listener.local_addr().expect("peer address");
        let state = Arc::new(PeerState::default());
        let st = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let st = Arc::clone(&st);
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let st = Arc::clone(&st);
                        async move { Ok::<_, Infallible>(publish(&st, req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        PubSubPeer {
            addr,
            state,
            accept,
        }
    }

    fn messages(&self, topic: &str) -> Vec<Received> {
        self.state
            .topics
            .lock()
            .expect("lock")
            .get(topic)
            .cloned()
            .unwrap_or_default()
    }

    fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().expect("lock").clone()
    }

    fn refuse_ordering(&self, on: bool) {
        self.state.refuse_ordering.store(on, Ordering::SeqCst);
    }
}

impl Drop for PubSubPeer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn json_answer(status: u16, body: serde_json::Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

fn google_error(status: u16, code: &str, message: &str) -> Response<Full<Bytes>> {
    json_answer(
        status,
        serde_json::json!({"error": {"code": status, "message": message, "status": code}}),
    )
}

async fn publish(st: &PeerState, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let topic = path
        .strip_prefix(&format!("/v1/projects/{PROJECT}/topics/"))
        .and_then(|rest| rest.strip_suffix(":publish"));
    let (Some(topic), true) = (topic, parts.method == hyper::Method::POST) else {
        return google_error(
            404,
            "NOT_FOUND",
            &format!("no such resource: {} {path}", parts.method),
        );
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    };
    let messages = v["messages"].as_array().cloned().unwrap_or_default();
    if messages.len() != 1 {
        return google_error(400, "INVALID_ARGUMENT", "expected one message per publish");
    }
    let m = &messages[0];
    let attrs: BTreeMap<String, String> = m["attributes"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("<not a string>").to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let Some(data) = m["data"]
        .as_str()
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
    else {
        return google_error(400, "INVALID_ARGUMENT", "data is not base64");
    };
    let ordering_key = m
        .get("orderingKey")
        .and_then(|k| k.as_str())
        .map(str::to_owned);
    let refuse = ordering_key.is_some() && st.refuse_ordering.load(Ordering::SeqCst);
    let status = if refuse { 400 } else { 200 };
    st.calls.lock().expect("lock").push(Call {
        topic: topic.to_owned(),
        authorization: parts
            .headers
            .get("authorization")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        id: attrs
            .get("ankusa_idempotency_key")
            .cloned()
            .unwrap_or_default(),
        ordering_key,
        status,
    });
    if refuse {
        return google_error(400, "FAILED_PRECONDITION", REGIONAL_REFUSAL);
    }
    st.topics
        .lock()
        .expect("lock")
        .entry(topic.to_owned())
        .or_default()
        .push(Received { body: data, attrs });
    let id = st.next_id.fetch_add(1, Ordering::SeqCst);
    json_answer(200, serde_json::json!({"messageIds": [id.to_string()]}))
}

fn ordered_sink(peer: &PubSubPeer, topic: &str) -> String {
    format!(
        "[{{type: pubsub, name: events, project: {PROJECT}, topic: '{topic}', emulator_host: '{}', ordered: true, ordering_key: {{json: data.object.customer}}}}]",
        peer.addr
    )
}

/// Every call's `orderingKey` is its message's `ankusa_ordering_key`, and no
/// call carried credentials (the emulator path).
fn check_calls(calls: &[Call], topic: &str, received: &[Received]) {
    let key_of: BTreeMap<&str, &str> = received
        .iter()
        .map(|r| {
            (
                r.attrs["ankusa_idempotency_key"].as_str(),
                r.attrs["ankusa_ordering_key"].as_str(),
            )
        })
        .collect();
    for c in calls {
        assert_eq!(c.topic, topic);
        assert_eq!(
            c.authorization, None,
            "the emulator path sends no credentials"
        );
        assert_eq!(
            c.ordering_key.as_deref(),
            key_of.get(c.id.as_str()).copied(),
            "{c:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_corpus_through_an_ordered_topic_arrives_once_in_order_per_customer() {
    let peer = PubSubPeer::start().await;
    let topic = unique("stripe");
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 10, max_ms: 200}}\n{}",
            stripe::source_yaml(&ordered_sink(&peer, &topic))
        ),
    ))
    .await;
    let sent = stripe::send(&relay, &stripe::hooks(4)).await;
    assert_eq!(sent.len(), 40);
    let m = drained(&relay, Duration::from_secs(90)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 40.0);
    assert_eq!(
        m["ankusa_ingest_duplicates_total"], 4.0,
        "the provider retry of each round"
    );
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    let got = peer.messages(&topic);
    stripe::check(&sent, &got);
    check_calls(&peer.calls(), &topic, &got);
    let content_type = stripe::hooks(1)[0]
        .header("content-type")
        .expect("corpus content type")
        .to_owned();
    for r in &got {
        assert_eq!(r.attrs.get("content_type"), Some(&content_type));
    }
    // Four lanes: three customers and the keyless one ("default/stripe").
    let keys: std::collections::BTreeSet<&str> = got
        .iter()
        .map(|r| r.attrs["ankusa_ordering_key"].as_str())
        .collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(keys.contains(stripe::KEYLESS));
}

/// docs/design.md section 10: a publish with an ordering key refused for want of a
/// regional endpoint is a retry, so the lane's head waits (the lanes show in
/// `ankusa_dispatch_lanes_blocked`), only heads are attempted, nothing is
/// dead-lettered, and once the publisher can publish the lanes drain in order.
///
/// The breaker is kept shut (100000 failures): while it is open only one
/// trial delivery per (tenant, sink) goes out, so one lane's head could take
/// every trial and the other's would not be seen refused; what is checked here
/// is the lanes, not the breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regional_endpoint_refusal_blocks_the_lanes_until_the_peer_heals() {
    let peer = PubSubPeer::start().await;
    peer.refuse_ordering(true);
    let topic = unique("regional");
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 10, max_ms: 100}}\nbreaker: {{failures: 100000, open_ms: 100}}\n{}",
            stripe::source_yaml(&ordered_sink(&peer, &topic))
        ),
    ))
    .await;
    // Round 0: five hooks of the corpus customer, five of the keyless lane.
    let sent = stripe::send(&relay, &stripe::hooks(1)).await;
    assert_eq!(sent.len(), 10);
    let heads: std::collections::BTreeSet<&str> = [stripe::CUSTOMER, stripe::KEYLESS]
        .iter()
        .map(|k| {
            sent.iter()
                .find(|s| s.key == *k)
                .expect("a hook of each lane")
                .id
                .as_str()
        })
        .collect();
    // Blocked "for a while": both heads refused several times each.
    let seen = std::sync::Mutex::new(String::new());
    let m = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let calls = peer.calls();
            let refused: Vec<usize> = heads
                .iter()
                .map(|h| {
                    calls
                        .iter()
                        .filter(|c| c.id == *h && c.status == 400)
                        .count()
                })
                .collect();
            let m = relay.metrics().await;
            *seen.lock().expect("lock") = format!(
                "refused per head {refused:?}, calls {}, metrics {m:?}",
                calls.len()
            );
            if refused.iter().all(|n| *n >= 3) && m["ankusa_dispatch_lanes_blocked"] == 2.0 {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "both lanes never seen blocked with each head refused 3 times: {}\n{}",
            seen.lock().expect("lock"),
            relay.log()
        )
    });
    assert_eq!(
        m["ankusa_dispatch_lane_members"], 8.0,
        "the other eight wait behind their heads"
    );
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    assert_eq!(
        m.get("ankusa_dispatch_delivered_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    let calls = peer.calls();
    assert!(
        calls
            .iter()
            .all(|c| heads.contains(c.id.as_str()) && c.status == 400),
        "only the heads were tried: {calls:?}"
    );
    assert!(peer.messages(&topic).is_empty());

    peer.refuse_ordering(false);
    let m = drained(&relay, Duration::from_secs(90)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 10.0);
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    assert_eq!(m["ankusa_dispatch_lanes_blocked"], 0.0);
    let got = peer.messages(&topic);
    stripe::check(&sent, &got);
    check_calls(&peer.calls(), &topic, &got);
    assert!(m["ankusa_dispatch_retries_total"] >= 6.0, "{m:?}");
}

/// A config with one source `billing` whose one sink entry is `sink`.
fn check_config_yaml(dir: &std::path::Path, sink: &str) -> String {
    let data = dir.join("data");
    format!(
        "node: {{data_dir: '{}', store: rocksdb}}\nlisteners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}\nsources:\n  - name: billing\n    sinks:\n      - {sink}\n",
        data.display()
    )
}

/// Runs `ankusa check-config` on a config whose one sink is `sink`.
fn check_config(dir: &std::path::Path, sink: &str) -> (bool, String) {
    let file = dir.join("pubsub.yaml");
    std::fs::write(&file, check_config_yaml(dir, sink)).expect("write");
    let (status, out) = crate::relay::run_cli(
        &[std::ffi::OsStr::new("check-config"), file.as_os_str()],
        dir,
    );
    (status.success(), out)
}

/// The Pub/Sub legacy key forms (ADR 0004 section 1) and the sink's own
/// options, through the binary: a `{json}`/`{header}` key without `ordered`
/// and a plain string with `ordered: true` are refused by the config crate,
/// bad options by the adapter, each naming the option; the legacy string and
/// an ordered regional sink pass (no connection is made).
#[test]
fn pubsub_sinks_are_checked_by_check_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let at = "source \"billing\", sink \"events\" (pubsub): ";
    for (sink, expected) in [
        (
            "{type: pubsub, name: events, project: p, topic: t, ordering_key: {json: data.object.customer}}".to_owned(),
            format!("{at}option \"ordering_key\": a {{header: NAME}} or {{json: a.b.c}} key requires ordered: true"),
        ),
        (
            "{type: pubsub, name: events, project: p, topic: t, ordering_key: {header: x-entity-id}}".to_owned(),
            format!("{at}option \"ordering_key\": a {{header: NAME}} or {{json: a.b.c}} key requires ordered: true"),
        ),
        (
            "{type: pubsub, name: events, project: p, topic: t, ordered: true, ordering_key: fixed-key}".to_owned(),
            format!("{at}option \"ordering_key\": "),
        ),
        ("{type: pubsub, name: events, project: p}".to_owned(), format!("{at}option \"topic\": required")),
        (
            "{type: pubsub, name: events, project: p, topic: t, endpoint: 'pubsub.googleapis.com'}".to_owned(),
            format!("{at}option \"endpoint\": "),
        ),
        (
            format!("{{type: pubsub, name: events, project: p, topic: t, credentials: '{}'}}", dir.join("missing.json").display()),
            format!("{at}option \"credentials\": cannot read"),
        ),
        (
            "{type: pubsub, name: events, project: p, topic: 'hooks-{tenat}'}".to_owned(),
            format!("{at}option \"topic\": "),
        ),
    ] {
        let (ok, out) = check_config(dir, &sink);
        assert!(!ok, "check-config accepted {sink}:\n{out}");
        assert!(out.contains(&expected), "check-config output lacks\n  {expected}\ngot:\n{out}\n--- {sink}");
    }
    for sink in [
        "{type: pubsub, name: events, project: p, topic: t, ordering_key: fixed-key}",
        "{type: pubsub, name: events, project: p, topic: 'hooks-{tenant}-{source}', endpoint: 'https://us-east1-pubsub.googleapis.com', ordered: true, ordering_key: {json: data.object.customer}}",
    ] {
        let (ok, out) = check_config(dir, sink);
        assert!(ok, "check-config refused {sink}:\n{out}");
    }
}

/// Provider headers: GitHub and Shopify hooks through a sink with
/// `forward_headers`: each published message carries the chosen provider
/// headers as attributes (lower-case names, the provider's values) beside the
/// `ankusa_*` metadata and `content_type`, and none of the others. The local
/// REST peer stands in for Pub/Sub (docs/contributing.md, "Test peers").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_headers_chosen_arrive_as_attributes() {
    use crate::provider;
    let peer = PubSubPeer::start().await;
    let topic = unique("headers");
    let sink = format!(
        "{{type: pubsub, name: events, project: {PROJECT}, topic: '{topic}', emulator_host: '{}', forward_headers: {}}}",
        peer.addr,
        provider::CHOSEN_YAML
    );
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "retry: {{base_ms: 10, max_ms: 200}}\n{}",
            provider::sources_yaml(&sink)
        ),
    ))
    .await;
    let sent = provider::send(&relay, &provider::FILES).await;
    let m = drained(&relay, Duration::from_secs(60)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 4.0, "{m:?}");
    let got = peer.messages(&topic);
    let by_id = provider::check(&sent, &got, &provider::CHOSEN);
    for s in &sent {
        assert_eq!(
            by_id[&s.id].attrs.get("content_type").map(String::as_str),
            s.hook.header("content-type")
        );
    }
    assert_eq!(
        by_id[&sent[0].id].attrs["x-github-delivery"],
        "083ba102-9da5-5bfc-b88a-a15b3705922e"
    );
    assert_eq!(
        by_id[&sent[3].id].attrs["x-shopify-topic"],
        "products/update"
    );
    assert_eq!(
        m["ankusa_forwarded_headers_dropped_total{sink=\"pubsub\"}"],
        0.0
    );
}
