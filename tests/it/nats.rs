//! The NATS sink through the relay: the Stripe corpus into an ordered JetStream
//! subject (read back with a pull consumer), the sink's nats-server killed and
//! restarted under it, and a subject no stream captures, which dead-letters a
//! lane's head and releases the lane.
//!
//! The shared nats-server with JetStream at 127.0.0.1:4222 (`.ci/run` starts
//! it) takes the corpus and the dead-letter tests, each on its own stream and
//! subjects; the restart test runs a private `nats-server -js` on a free port
//! with its own store directory, so killing it disturbs no other test.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures_util::StreamExt as _;

use crate::peer::{ChildServer, drained, free_port, unique};
use crate::relay::{Relay, config};
use crate::stripe::{self, Received};

const SHARED: &str = "nats://127.0.0.1:4222";

/// The nats-server binary: Debian's package puts it in /usr/sbin (`.ci/run`
/// installs it), else the one on PATH.
fn nats_server() -> &'static str {
    const DEBIAN: &str = "/usr/sbin/nats-server";
    if std::path::Path::new(DEBIAN).exists() {
        DEBIAN
    } else {
        "nats-server"
    }
}

async fn js(url: &str) -> jetstream::Context {
    match async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(url)
        .await
    {
        Ok(c) => jetstream::new(c),
        Err(e) => panic!("NATS at {url} is unreachable ({e}); `.ci/run` starts it"),
    }
}

/// Creates the stream `name` capturing `<name>.>` (file storage, the default
/// two-minute duplicate window).
async fn create_stream(url: &str, name: &str) -> jetstream::stream::Stream {
    js(url)
        .await
        .create_stream(jetstream::stream::Config {
            name: name.to_owned(),
            subjects: vec![format!("{name}.>")],
            ..Default::default()
        })
        .await
        .expect("create_stream")
}

async fn delete_stream(url: &str, name: &str) {
    let _ = js(url).await.delete_stream(name).await;
}

/// Every message of the stream, in stream order, through one pull consumer
/// (acked): the payload as the body, every header as an attribute (each must
/// be single-valued).
async fn read_stream(url: &str, name: &str) -> Vec<Received> {
    let stream = js(url).await.get_stream(name).await.expect("get_stream");
    let total = stream.get_info().await.expect("stream info").state.messages as usize;
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::Config::default())
        .await
        .expect("create_consumer");
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < total {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "read {} of {total} messages",
            got.len()
        );
        let mut batch = consumer
            .fetch()
            .max_messages(total - got.len())
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .expect("fetch");
        while let Some(m) = batch.next().await {
            let m = m.expect("a message");
            let mut r = Received {
                body: m.message.payload.to_vec(),
                ..Default::default()
            };
            if let Some(headers) = &m.message.headers {
                for (name, values) in headers.iter() {
                    assert_eq!(values.len(), 1, "header {name}: {values:?}");
                    r.attrs
                        .insert(name.to_string(), values[0].as_str().to_owned());
                }
            }
            got.push(r);
            m.ack().await.expect("ack");
        }
    }
    got
}

fn ordered_sink(url: &str, subject: &str) -> String {
    format!(
        "[{{type: nats, name: js, url: '{url}', subject: '{subject}', timeout_ms: 2000, ordered: true, ordering_key: {{json: data.object.customer}}}}]"
    )
}

/// The NATS-specific headers of every message: `Nats-Msg-Id` is the
/// idempotency key, `Content-Type` the corpus's.
fn check_nats_headers(got: &[Received]) {
    let content_type = stripe::hooks(1)[0]
        .header("content-type")
        .expect("corpus content type")
        .to_owned();
    for r in got {
        // The idempotency key and the sink's index (the only sink: 0).
        assert_eq!(
            r.attrs.get("Nats-Msg-Id").cloned(),
            r.attrs
                .get("ankusa_idempotency_key")
                .map(|k| format!("{k}.0")),
            "{:?}",
            r.attrs
        );
        assert_eq!(r.attrs.get("Content-Type"), Some(&content_type));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_corpus_through_an_ordered_jetstream_subject_arrives_once_in_order_per_customer() {
    let name = unique("stripe");
    let _stream = create_stream(SHARED, &name).await;
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 10, max_ms: 200}}\n{}",
            stripe::source_yaml(&ordered_sink(
                SHARED,
                &format!("{name}.{{tenant}}.{{source}}")
            ))
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
    let got = read_stream(SHARED, &name).await;
    delete_stream(SHARED, &name).await;
    stripe::check(&sent, &got);
    check_nats_headers(&got);
    // Four lanes: three customers and the keyless one.
    let keys: std::collections::BTreeSet<&str> = got
        .iter()
        .map(|r| r.attrs["ankusa_ordering_key"].as_str())
        .collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
}

/// A `nats-server -js` of this test's own on 127.0.0.1:`port`, its JetStream
/// store in `dir` (JetStream writes each message to its file before the ack,
/// so a SIGKILL loses nothing acknowledged).
fn private_nats(port: u16, dir: &Path) -> ChildServer {
    ChildServer::start(
        nats_server(),
        Command::new(nats_server())
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir),
        port,
        Duration::from_secs(60),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_killed_and_restarted_hooks_retry_and_arrive_once_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut nats = private_nats(port, dir.path());
    let url = format!("nats://127.0.0.1:{port}");
    let name = unique("restart");
    create_stream(&url, &name).await;
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 20, max_ms: 300}}\n{}",
            stripe::source_yaml(&ordered_sink(&url, &format!("{name}.{{source}}")))
        ),
    ))
    .await;

    // SIGKILLed and restarted on the same port and store: the client
    // reconnects by itself.
    let sent = stripe::down_then_back(&relay, "NATS", Duration::from_secs(60), async |up| {
        if up {
            nats = private_nats(port, dir.path());
        } else {
            nats.kill();
        }
    })
    .await;

    let got = read_stream(&url, &name).await;
    // Exactly once in the stream: a publish whose ack was lost is sent again
    // with the same Nats-Msg-Id and JetStream drops the duplicate.
    stripe::check(&sent, &got);
    check_nats_headers(&got);
    nats.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_no_stream_captures_dead_letters_the_head_and_releases_the_lane() {
    let name = unique("nostream");
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "retry: {{base_ms: 10, max_ms: 50}}\n{}",
            stripe::source_yaml(&ordered_sink(SHARED, &format!("{name}.{{source}}")))
        ),
    ))
    .await;
    // No stream captures `<name>.stripe` yet: JetStream has no responder;
    // the stream created, the lane's next hook arrives.
    let got = stripe::dead_lettered_head_releases_the_lane(
        &relay,
        "no stream captures this subject",
        async || {
            create_stream(SHARED, &name).await;
        },
        async || {
            let got = read_stream(SHARED, &name).await;
            delete_stream(SHARED, &name).await;
            got
        },
    )
    .await;
    check_nats_headers(&got);
}

/// Provider headers: GitHub and Shopify hooks through two JetStream sinks, one
/// with a list of `forward_headers`, one with `all`: each message carries the
/// chosen provider headers as NATS headers (lower-case names, the provider's
/// values), the listed sink none of the others, the `all` sink every stored one
/// but the framing and the content type (which travels as the sink's own
/// `Content-Type`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_headers_chosen_arrive_as_nats_headers() {
    use crate::provider;
    let (listed, all) = (unique("listed"), unique("all"));
    let _a = create_stream(SHARED, &listed).await;
    let _b = create_stream(SHARED, &all).await;
    let sinks = format!(
        "{{type: nats, name: listed, url: '{SHARED}', subject: '{listed}.{{SOURCE}}', forward_headers: {}}}, {{type: nats, name: all, url: '{SHARED}', subject: '{all}.{{SOURCE}}', forward_headers: all}}",
        provider::CHOSEN_YAML
    );
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "retry: {{base_ms: 10, max_ms: 200}}\n{}",
            provider::sources_yaml(&sinks)
        ),
    ))
    .await;
    let sent = provider::send(&relay, &provider::FILES).await;
    let m = drained(&relay, Duration::from_secs(60)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 8.0, "{m:?}");
    let got = read_stream(SHARED, &listed).await;
    let got_all = read_stream(SHARED, &all).await;
    delete_stream(SHARED, &listed).await;
    delete_stream(SHARED, &all).await;

    let by_id = provider::check(&sent, &got, &provider::CHOSEN);
    assert_eq!(by_id[&sent[0].id].attrs["x-github-event"], "push");
    assert_eq!(by_id[&sent[2].id].attrs["x-github-event"], "issues");
    assert_eq!(by_id[&sent[1].id].attrs["x-shopify-topic"], "orders/create");
    assert_eq!(
        by_id[&sent[3].id].attrs["x-shopify-topic"],
        "products/update"
    );

    assert_eq!(got_all.len(), 4);
    for s in &sent {
        let r = got_all
            .iter()
            .find(|r| r.attrs.get("ankusa_idempotency_key") == Some(&s.id))
            .unwrap_or_else(|| panic!("{} missing", s.hook.file));
        for (name, value) in provider::all_forwarded(&s.hook) {
            assert_eq!(
                r.attrs.get(&name),
                Some(&value),
                "{}: {name}; got {:?}",
                s.hook.file,
                r.attrs
            );
        }
        for never in ["content-type", "content-length", "host"] {
            assert!(
                !r.attrs.contains_key(never),
                "{}: {never} forwarded: {:?}",
                s.hook.file,
                r.attrs
            );
        }
        assert_eq!(
            r.attrs.get("Content-Type").map(String::as_str),
            s.hook.header("content-type")
        );
        assert_eq!(r.attrs.get("Nats-Msg-Id"), Some(&format!("{}.1", s.id)));
    }
    assert_eq!(
        m["ankusa_forwarded_headers_dropped_total{sink=\"nats\"}"],
        0.0
    );
}
