//! The Redis sink through the relay: the Stripe corpus into an ordered stream
//! (read back with XRANGE), the sink's Redis killed and restarted and its
//! connections killed (`CLIENT KILL`), and a `WRONGTYPE` that dead-letters a
//! lane's head and releases the lane.
//!
//! The shared Redis at 127.0.0.1:6379 (`.ci/run` starts it) takes the corpus
//! and the dead-letter test, each on its own stream; the down-and-back test
//! runs a private `redis-server` on a free port (AOF, fsync always) so killing
//! it disturbs no other test.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::peer::{ChildServer, drained, free_port, unique};
use crate::relay::{Relay, config};
use crate::stripe::{self, Received};

const SHARED: &str = "redis://127.0.0.1:6379";

async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("url");
    match client.get_multiplexed_async_connection().await {
        Ok(c) => c,
        Err(e) => panic!("Redis at {url} is unreachable ({e}); `.ci/run` starts it"),
    }
}

/// XRANGE of the whole stream as [`Received`]: the `body` field, every other
/// field as an attribute.
async fn read_stream(url: &str, stream: &str) -> Vec<Received> {
    let entries: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(&mut conn(url).await)
        .await
        .expect("XRANGE");
    entries
        .into_iter()
        .map(|(id, flat)| {
            let mut r = Received::default();
            for pair in flat.chunks(2) {
                let name = String::from_utf8(pair[0].clone()).expect("field name");
                if name == "body" {
                    r.body = pair[1].clone();
                } else {
                    r.attrs.insert(
                        name,
                        String::from_utf8(pair[1].clone())
                            .unwrap_or_else(|_| panic!("entry {id}: field not UTF-8")),
                    );
                }
            }
            r
        })
        .collect()
}

async fn del(url: &str, key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut conn(url).await)
        .await
        .expect("DEL");
}

fn ordered_sink(url: &str, stream: &str) -> String {
    format!(
        "[{{type: redis, name: stream, url: '{url}', stream: '{stream}', ordered: true, ordering_key: {{json: data.object.customer}}}}]"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_corpus_through_an_ordered_stream_arrives_once_in_order_per_customer() {
    let stream = unique("stripe");
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 10, max_ms: 200}}\n{}",
            stripe::source_yaml(&ordered_sink(SHARED, &stream))
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
    let got = read_stream(SHARED, &stream).await;
    del(SHARED, &stream).await;
    stripe::check(&sent, &got);
    let content_type = stripe::hooks(1)[0]
        .header("content-type")
        .expect("corpus content type")
        .to_owned();
    for r in &got {
        assert_eq!(r.attrs.get("content_type"), Some(&content_type));
    }
    // Four lanes: three customers and the keyless one.
    let keys: std::collections::BTreeSet<&str> = got
        .iter()
        .map(|r| r.attrs["ankusa_ordering_key"].as_str())
        .collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
}

/// A `redis-server` of this test's own on 127.0.0.1:`port`, appending every
/// write to its AOF with an fsync before it answers, so a SIGKILL loses
/// nothing it acknowledged.
fn private_redis(port: u16, dir: &Path) -> ChildServer {
    ChildServer::start(
        "redis-server",
        Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "yes",
            ])
            .args(["--appendfsync", "always", "--dir"])
            .arg(dir),
        port,
        Duration::from_secs(60),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_restarted_and_connections_killed_hooks_retry_and_arrive_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut redis = private_redis(port, dir.path());
    let url = format!("redis://127.0.0.1:{port}");
    let stream = unique("down");
    let relay = Relay::start(&config(
        "rocksdb",
        // The breaker opens while Redis is down; a short open period lets the
        // half-open trial find it back soon after the restart.
        &format!(
            "retry: {{base_ms: 20, max_ms: 300}}\nbreaker: {{failures: 5, open_ms: 300}}\n{}",
            stripe::source_yaml(&ordered_sink(&url, &stream))
        ),
    ))
    .await;

    // SIGKILLed and restarted on the same port and AOF.
    let mut sent = stripe::down_then_back(&relay, "Redis", Duration::from_secs(30), async |up| {
        if up {
            redis = private_redis(port, dir.path());
        } else {
            redis.kill();
        }
    })
    .await;

    // The sink's connections killed under it: the next XADDs fail, retry on a
    // new connection, and arrive.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut conn(&url).await)
        .await
        .expect("CLIENT KILL");
    assert!(killed >= 1, "the relay had no connection to kill");
    sent.extend(stripe::send(&relay, &stripe::hooks_in(4..6)).await);
    let m = drained(&relay, Duration::from_secs(90)).await;
    assert_eq!(sent.len(), 60);
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0,
        "{m:?}"
    );
    assert_eq!(m["ankusa_dlq_dead"], 0.0);
    assert_eq!(m["ankusa_dispatch_delivered_total"], 60.0);

    let got = read_stream(&url, &stream).await;
    // At-least-once: an XADD whose answer the kill swallowed is sent again.
    let repeats = stripe::check_at_least_once(&sent, &got);
    assert_eq!(got.len(), 60 + repeats);
    redis.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrongtype_dead_letters_the_head_and_releases_the_lane() {
    let stream = unique("wrongtype");
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "retry: {{base_ms: 10, max_ms: 50}}\n{}",
            stripe::source_yaml(&ordered_sink(SHARED, &stream))
        ),
    ))
    .await;
    // The stream's key holds a string: XADD answers WRONGTYPE; the key
    // fixed (deleted), the lane's next hook arrives.
    let _: () = redis::cmd("SET")
        .arg(&stream)
        .arg("not a stream")
        .query_async(&mut conn(SHARED).await)
        .await
        .expect("SET");
    stripe::dead_lettered_head_releases_the_lane(
        &relay,
        "WRONGTYPE",
        async || del(SHARED, &stream).await,
        async || {
            let got = read_stream(SHARED, &stream).await;
            del(SHARED, &stream).await;
            got
        },
    )
    .await;
}

/// Provider headers: GitHub and Shopify hooks through a stream sink with
/// `forward_headers`: each entry carries the chosen provider headers as fields,
/// with the provider's values, and none of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_headers_chosen_arrive_as_stream_fields() {
    use crate::provider;
    let stream = unique("headers");
    let sink = format!(
        "{{type: redis, name: stream, url: '{SHARED}', stream: '{stream}', forward_headers: {}}}",
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
    let got = read_stream(SHARED, &stream).await;
    del(SHARED, &stream).await;
    let by_id = provider::check(&sent, &got, &provider::CHOSEN);
    // The sink's own fields are still there, unchanged.
    for s in &sent {
        let r = by_id[&s.id];
        assert_eq!(
            r.attrs.get("content_type").map(String::as_str),
            s.hook.header("content-type")
        );
        assert_eq!(r.attrs["ankusa_source"], s.hook.provider());
    }
    let github = &by_id[&sent[0].id].attrs;
    assert_eq!(github["x-github-event"], "push");
    assert!(!github.contains_key("x-shopify-topic"));
    assert_eq!(by_id[&sent[1].id].attrs["x-shopify-topic"], "orders/create");
    assert_eq!(
        m["ankusa_forwarded_headers_dropped_total{sink=\"redis\"}"],
        0.0
    );
}
