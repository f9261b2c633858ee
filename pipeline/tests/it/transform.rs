//! A sink entry's transform at delivery (docs/design.md section 6,
//! "Transforms"): the sink gets the program's output as the body, as JSON,
//! without the provider's signature headers; a run that fails dead-letters
//! its row with the reason and the next hooks go on; the stored hook is
//! never changed.

use std::sync::{Arc, Mutex};

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Cf, Read as _};
use ankusa_keys::{DeliveryRow, Envelope, RowState, Seq, SinkIx, delivery_key, hook_key};
use ankusa_pipeline::{Route, Routes, Transform};
use ankusa_queue::NewRow;
use ankusa_queue::writer::{IngestRequest, Ingested};
use ankusa_sinks::{DeliveryCtx, Envelope as SinkEnvelope, Outcome, Sink};
use ankusa_transform::{Limits, Program};
use async_trait::async_trait;

use crate::support::*;

/// What a sink got: body, content type, stored header names (lower-case).
type Got = (String, Option<String>, Vec<String>);

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Got>>>);

#[async_trait]
impl Sink for Capture {
    async fn deliver(&self, hook: &SinkEnvelope, ctx: &DeliveryCtx) -> Outcome {
        self.0.lock().unwrap().push((
            String::from_utf8_lossy(&hook.body).into_owned(),
            ctx.content_type.clone(),
            hook.headers
                .iter()
                .map(|(n, _)| String::from_utf8_lossy(n).to_ascii_lowercase())
                .collect(),
        ));
        Outcome::Ok
    }
    fn kind(&self) -> &'static str {
        "capture"
    }
}

/// Stored headers: (name, value) as bytes.
type Headers = Vec<(Vec<u8>, Vec<u8>)>;

/// A Stripe corpus hook: its stored headers and its body.
fn stripe(name: &str) -> (Headers, Vec<u8>) {
    let path = format!(
        "{}/../fixtures/corpus/stripe/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let file: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let headers = file["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h[0].as_str().unwrap().as_bytes().to_vec(),
                h[1].as_str().unwrap().as_bytes().to_vec(),
            )
        })
        .collect();
    (headers, file["body"].as_str().unwrap().as_bytes().to_vec())
}

/// A relay whose sink 0 (named `sink`) has `program` with `limits`.
fn relay(program: &str, limits: Limits, sink: &str, capture: &Capture) -> Relay {
    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink: Arc::new(capture.clone()),
            sink_name: sink.into(),
            source_name: "stripe".into(),
        },
    );
    let program = Arc::new(Program::compile(program, limits).unwrap());
    routes
        .transforms
        .insert((SOURCE, SinkIx(0)), Transform::new(program, None));
    routes.tenants.insert(TENANT, "acme".into());
    let kv = Arc::new(MemoryKv::new());
    let (writer, pipeline, tasks) = run(&kv, routes);
    Relay {
        kv,
        writer,
        pipeline,
        release: Arc::new(tokio::sync::Notify::new()),
        delivered: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        tasks,
    }
}

async fn send(relay: &Relay, headers: Headers, body: Vec<u8>) -> Seq {
    let req = IngestRequest {
        tenant: TENANT,
        envelope: Envelope {
            source: SOURCE,
            received_at_ms: now_ms(),
            method: "POST".into(),
            path: "/hooks/stripe".into(),
            query: None,
            headers,
            body,
            dedupe_key: None,
            idempotency_key: [7; 16],
            replay_of: None,
        },
        rows: vec![NewRow {
            sink: SinkIx(0),
            lane: None,
        }],
        dedupe_ttl_ms: None,
    };
    let Ingested::Committed(seq) = relay.writer.ingest(req).await.unwrap() else {
        panic!("a duplicate")
    };
    relay.pipeline.wake();
    seq
}

/// The row of `seq` once it is a dead letter: its reason.
async fn dead_reason(relay: &Relay, seq: Seq) -> String {
    let key = delivery_key(TENANT, seq, SinkIx(0));
    until("the row is a dead letter", || {
        let row = DeliveryRow::decode(&relay.kv.get(Cf::Deliveries, &key).unwrap()?).unwrap();
        (row.state == RowState::Dead).then(|| row.last_error.unwrap_or_default())
    })
    .await
}

async fn got(capture: &Capture, n: usize) -> Vec<Got> {
    until(&format!("{n} deliveries"), || {
        let got = capture.0.lock().unwrap().clone();
        (got.len() >= n).then_some(got)
    })
    .await
}

fn failures_of(sink: &str) -> u64 {
    ankusa_transform::metrics::failures()
        .into_iter()
        .find(|(source, s, _)| source == "stripe" && s == sink)
        .map_or(0, |(_, _, n)| n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_hook_is_reshaped_and_delivered_as_json_without_its_signature() {
    let capture = Capture::default();
    let relay = relay(
        "{id: .data.object.id, customer: .data.object.customer}",
        Limits::default(),
        "reshaped",
        &capture,
    );
    let (headers, body) = stripe("invoice_paid");
    let seq = send(&relay, headers.clone(), body.clone()).await;
    let got = got(&capture, 1).await;
    assert_eq!(
        got[0].0,
        r#"{"id":"in_1Pgc6tB7WZ01zgkWu9fdqL6I","customer":"cus_QXg1o8vcGmoR32"}"#
    );
    assert_eq!(got[0].1.as_deref(), Some("application/json"));
    assert_eq!(
        got[0].2,
        [
            "host",
            "user-agent",
            "content-length",
            "accept",
            "cache-control",
            "accept-encoding",
            "content-type"
        ]
    );
    // The stored hook is as received: a replay or a revive transforms again.
    let stored = Envelope::decode(
        &relay
            .kv
            .get(Cf::Hooks, &hook_key(TENANT, seq))
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stored.body, body);
    assert_eq!(stored.headers, headers);
    stop(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_the_program_fails_on_is_dead_lettered_with_its_message_and_the_next_ones_go_on() {
    let capture = Capture::default();
    let relay = relay(
        r#"{id: .data.object.id, customer: (.data.object.customer // error("no customer on \(.type)"))}"#,
        Limits::default(),
        "customers",
        &capture,
    );
    let (h, b) = stripe("invoice_paid");
    send(&relay, h, b).await;
    let (h, b) = stripe("customer_created");
    let failing = send(&relay, h, b).await;
    let (h, b) = stripe("payment_intent_succeeded");
    send(&relay, h, b).await;
    let not_json = send(&relay, vec![], b"<xml/>".to_vec()).await;
    assert_eq!(
        dead_reason(&relay, failing).await,
        "permanent: transform: no customer on customer.created"
    );
    assert_eq!(
        dead_reason(&relay, not_json).await,
        "permanent: transform: the body is not JSON: expected value at line 1 column 1"
    );
    // The sink is unordered: the two may arrive in either order.
    let mut bodies: Vec<String> = got(&capture, 2).await.into_iter().map(|g| g.0).collect();
    bodies.sort();
    assert_eq!(
        bodies,
        [
            r#"{"id":"in_1Pgc6tB7WZ01zgkWu9fdqL6I","customer":"cus_QXg1o8vcGmoR32"}"#,
            r#"{"id":"pi_1PgafyB7WZ01zgkWSjxsAJo3","customer":"cus_QXg1o8vcGmoR32"}"#,
        ]
    );
    assert_eq!(failures_of("customers"), 2);
    stop(relay).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_its_time_or_output_bound_is_dead_lettered_and_the_relay_goes_on() {
    let capture = Capture::default();
    // Never ends on an object with `loop`; a large output on one with
    // `many` (one string of 1,000 bytes, made in one step: no clock in
    // it); the others are small.
    let relay = relay(
        "if .loop then (def f: f; f) elif .many then \"x\" * 1000 elif .deep then (def f: [f]; f) else {ok: .n} end",
        Limits {
            timeout_ms: 50,
            max_output_bytes: 100,
        },
        "bounded",
        &capture,
    );
    let looping = send(&relay, vec![], br#"{"loop":true}"#.to_vec()).await;
    let large = send(&relay, vec![], br#"{"many":true}"#.to_vec()).await;
    let deep = send(&relay, vec![], br#"{"deep":true}"#.to_vec()).await;
    send(&relay, vec![], br#"{"n":1}"#.to_vec()).await;
    assert_eq!(
        dead_reason(&relay, looping).await,
        "permanent: transform: the program ran longer than its bound of 50 ms"
    );
    assert_eq!(
        dead_reason(&relay, large).await,
        "permanent: transform: the output is larger than its bound of 100 bytes"
    );
    let deep = dead_reason(&relay, deep).await;
    assert!(
        [
            "permanent: transform: the program recursed deeper than its bound (64 MiB of stack)",
            "permanent: transform: the program ran longer than its bound of 50 ms"
        ]
        .contains(&deep.as_str()),
        "{deep}"
    );
    assert_eq!(got(&capture, 1).await[0].0, r#"{"ok":1}"#);
    // Still running: a hook after them is delivered too.
    send(&relay, vec![], br#"{"n":2}"#.to_vec()).await;
    assert_eq!(got(&capture, 2).await[1].0, r#"{"ok":2}"#);
    assert_eq!(failures_of("bounded"), 3);
    stop(relay).await;
}
