//! The lane sequence (ADR 0004 section 6, "The lane sequence"), checked by
//! the repository's own receiver example (`examples/lane-receiver`): each
//! key's deliveries carry 1, 2, 3, ... with a number repeated only when the
//! same hook is delivered again, across retries and a SIGKILL of the relay.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::future::join_all;

use crate::relay::{Relay, client, config};

/// The example receiver, run with python3 on a free loopback port; killed
/// when dropped.
struct Receiver {
    child: Child,
    url: String,
}

impl Receiver {
    /// Starts `receiver.py --port 0 --fail <fail>` and reads the port it
    /// printed.
    fn start(fail: u32) -> Receiver {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/lane-receiver/receiver.py"
        );
        let mut child = Command::new("python3")
            .args([script, "--port", "0", "--fail", &fail.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run python3 (the example receiver needs it)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the receiver's first line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line of the receiver: {line:?}"))
            .to_owned();
        Receiver {
            child,
            url: format!("http://{addr}"),
        }
    }

    /// Its `/report`: per key, what arrived and what it made of it.
    async fn report(&self) -> BTreeMap<String, serde_json::Value> {
        let body = client()
            .get(format!("{}/report", self.url))
            .send()
            .await
            .expect("GET /report")
            .bytes()
            .await
            .expect("report body");
        serde_json::from_slice(&body).expect("report JSON")
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const KEYS: usize = 50;
const PER_KEY: usize = 20;

/// Posts hooks `from..to` (hook `i` of key `k<i % KEYS>`), 25 at a time, each
/// answered 200.
async fn post_range(relay: &Relay, from: usize, to: usize) {
    let all: Vec<usize> = (from..to).collect();
    for chunk in all.chunks(25) {
        join_all(chunk.iter().map(|&i| {
            let key = format!("k{}", i % KEYS);
            async move {
                let body = format!("{{\"i\":{i},\"key\":\"{key}\"}}");
                let a = relay
                    .try_post(
                        "/hooks/orders",
                        &[("content-type", "application/json"), ("x-entity-id", &key)],
                        body,
                    )
                    .await
                    .expect("post");
                assert_eq!(a.status, 200, "hook {i}: {}", a.body);
            }
        }))
        .await;
    }
}

/// 1,000 hooks over 50 keys to an ordered HTTP sink whose receiver answers
/// 503 to the first attempt of every 7th position of a key, with a SIGKILL of
/// the relay after the first 500 were acknowledged (deliveries and retries
/// under way). Per key the receiver is given 1..=20, each number after the
/// one before it or again (a retry, a redelivery), never a gap, never a step
/// back; every number is processed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_sees_one_to_n_with_repeats_only_on_redelivery_across_a_sigkill() {
    let receiver = Receiver::start(7);
    let mut relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 50}}
# The 7th positions of 50 keys fail together: the breaker would park the
# sink for its open_ms; this test is about the numbers, not the breaker.
breaker: {{failures: 100000, open_ms: 10}}
sources:
  - name: orders
    sinks:
      - {{type: http, url: '{}/in', ordered: true, ordering_key: {{header: x-entity-id}}}}
",
            receiver.url
        ),
    ))
    .await;
    let total = KEYS * PER_KEY;
    post_range(&relay, 0, total / 2).await;
    relay.kill();
    relay.restart().await;
    post_range(&relay, total / 2, total).await;

    // Every key's 20 hooks processed by the receiver; a timeout shows what
    // it has, and the relay's counters.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let report = loop {
        let r = receiver.report().await;
        let done: usize = r
            .values()
            .map(|k| k["processed"].as_array().map_or(0, Vec::len))
            .sum();
        if r.len() == KEYS && done == total {
            break r;
        }
        if std::time::Instant::now() > deadline {
            let short: BTreeMap<&String, String> = r
                .iter()
                .filter(|(_, k)| k["processed"].as_array().map_or(0, Vec::len) != PER_KEY)
                .map(|(key, k)| {
                    (
                        key,
                        format!(
                            "arrivals {} missing {} restarts {}",
                            k["arrivals"], k["missing"], k["restarts"]
                        ),
                    )
                })
                .collect();
            panic!(
                "after 180 s the receiver processed {done} of {total} hooks over {} keys; \
                 keys short of {PER_KEY}: {short:#?}\nrelay metrics: {:?}\nlog:\n{}",
                r.len(),
                relay.metrics().await,
                relay.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let mut repeats = 0;
    for (key, k) in &report {
        let arrivals: Vec<u64> = k["arrivals"]
            .as_array()
            .expect("arrivals")
            .iter()
            .map(|n| n.as_u64().expect("number"))
            .collect();
        assert_eq!(arrivals.first(), Some(&1), "{key}: {arrivals:?}");
        for w in arrivals.windows(2) {
            assert!(
                w[1] == w[0] || w[1] == w[0] + 1,
                "{key}: a gap or a step back in {arrivals:?}"
            );
        }
        let processed: Vec<u64> = k["processed"]
            .as_array()
            .expect("processed")
            .iter()
            .map(|n| n.as_u64().expect("number"))
            .collect();
        assert_eq!(processed, (1..=PER_KEY as u64).collect::<Vec<_>>(), "{key}");
        assert_eq!(k["missing"], serde_json::json!([]), "{key}");
        assert_eq!(k["restarts"], 0, "{key}: the numbers started again");
        repeats += k["duplicates"].as_u64().expect("duplicates");
    }
    // The 503s were retried with their numbers: the receiver processed them
    // on their second attempt (not counted as duplicates, which are numbers
    // it had processed already: the SIGKILL's redeliveries, if any).
    eprintln!(
        "lane sequence: {total} hooks over {KEYS} keys, {repeats} redelivered after processing"
    );
}
