//! The SQS sink through the relay: the Stripe corpus into an ordered FIFO queue
//! on moto (`.ci/moto.sh` starts it on 127.0.0.1:5000;
//! `ANKUSA_TEST_SQS_ENDPOINT` overrides), keyed on `data.object.customer`,
//! received back with ReceiveMessage. The relay finds its credentials through
//! the standard AWS chain: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` in the
//! child's environment. Fails, not skips, when moto is unreachable.
//!
//! moto's SequenceNumbers are not monotonic: nothing here asserts on them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

use crate::relay::{Relay, config};
use crate::sink::until;
use crate::stripe::{self, Received};

const REGION: &str = "us-east-1";

fn endpoint() -> String {
    std::env::var("ANKUSA_TEST_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:5000".into())
}

/// The child's environment: static test credentials for the standard chain
/// (the environment comes first in it), no instance metadata lookups.
const AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

async fn admin() -> aws_sdk_sqs::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .region(aws_sdk_sqs::config::Region::new(REGION))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .endpoint_url(endpoint())
        .load()
        .await;
    aws_sdk_sqs::Client::new(&config)
}

/// A FIFO queue of this run (deduplication by MessageDeduplicationId only).
async fn fifo_queue(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos();
    let name = format!("ankusa-it-{what}-{}-{nanos}.fifo", std::process::id());
    let out = admin()
        .await
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::ContentBasedDeduplication, "false")
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "moto's SQS at {} is not reachable (run .ci/moto.sh): {}",
                endpoint(),
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            )
        });
    out.queue_url().expect("queue url").to_owned()
}

/// One received message: what `stripe::check` reads, and the FIFO ids.
struct Got {
    received: Received,
    group_id: Option<String>,
    dedup_id: Option<String>,
}

/// Receives and deletes messages (a FIFO group's next message is only handed
/// out once the one before is deleted) until `n` arrived or 30 s passed, in
/// consume order.
async fn receive(url: &str, n: usize) -> Vec<Got> {
    let client = admin().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        let got = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(300)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage");
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for m in messages {
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().expect("receipt handle"))
                .send()
                .await
                .expect("DeleteMessage");
            let attrs: BTreeMap<String, String> = m
                .message_attributes()
                .into_iter()
                .flatten()
                .map(|(k, v)| {
                    assert_eq!(v.data_type(), "String", "attribute {k}");
                    (
                        k.clone(),
                        v.string_value().expect("string value").to_owned(),
                    )
                })
                .collect();
            let system = |name: MessageSystemAttributeName| {
                m.attributes().and_then(|a| a.get(&name)).cloned()
            };
            out.push(Got {
                received: Received {
                    body: m.body().expect("body").as_bytes().to_vec(),
                    attrs,
                },
                group_id: system(MessageSystemAttributeName::MessageGroupId),
                dedup_id: system(MessageSystemAttributeName::MessageDeduplicationId),
            });
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_corpus_through_an_ordered_fifo_queue_arrives_once_in_order_per_customer() {
    let url = fifo_queue("stripe").await;
    let sinks = format!(
        "[{{type: sqs, name: queue, queue_url: '{url}', endpoint_url: '{}', region: {REGION}, ordered: true, ordering_key: {{json: data.object.customer}}}}]",
        endpoint()
    );
    let relay = Relay::start_with_env(
        &config(
            "rocksdb",
            &format!(
                "retry: {{base_ms: 10, max_ms: 200}}\n{}",
                stripe::source_yaml(&sinks)
            ),
        ),
        &AWS_ENV,
    )
    .await;
    let sent = stripe::send(&relay, &stripe::hooks(4)).await;
    assert_eq!(sent.len(), 40);
    let m = until(
        "the relay's queue drained",
        Duration::from_secs(60),
        async || {
            let m = relay.metrics().await;
            (m["ankusa_queue_pending"] == 0.0).then_some(m)
        },
    )
    .await;
    assert_eq!(
        m["ankusa_dispatch_delivered_total"],
        40.0,
        "log:\n{}",
        relay.log()
    );
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );

    let got = receive(&url, sent.len()).await;
    let _ = admin().await.delete_queue().queue_url(&url).send().await;
    let received: Vec<Received> = got.iter().map(|g| g.received.clone()).collect();
    stripe::check(&sent, &received);

    let content_type = stripe::hooks(1)[0]
        .header("content-type")
        .expect("corpus content type")
        .to_owned();
    let by_id: BTreeMap<&str, &stripe::Sent> = sent.iter().map(|s| (s.id.as_str(), s)).collect();
    for g in &got {
        let id = g.received.attrs["ankusa_idempotency_key"].as_str();
        let s = by_id[id];
        // The lane's key is a legal group id (customer ids, "default/stripe"):
        // sent as is. The dedup id is the idempotency key and the sink's
        // index (the only sink: 0).
        assert_eq!(g.group_id.as_deref(), Some(s.key.as_str()), "{}", s.file);
        assert_eq!(
            g.group_id
                .as_deref()
                .map(str::as_bytes)
                .map(ankusa_sinks::sqs::message_group_id),
            Some(s.key.clone())
        );
        assert_eq!(g.dedup_id, Some(format!("{id}.0")), "{}", s.file);
        assert_eq!(
            g.received.attrs.get("content_type"),
            Some(&content_type),
            "{}",
            s.file
        );
        let names: Vec<&str> = g.received.attrs.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "ankusa_idempotency_key",
                "ankusa_lane_seq",
                "ankusa_message_version",
                "ankusa_ordering_key",
                "ankusa_received_at",
                "ankusa_source",
                "ankusa_tenant",
                "content_type"
            ],
            "{}",
            s.file
        );
    }
    // Four groups: three customers and the keyless lane.
    let groups: std::collections::BTreeSet<&str> =
        got.iter().filter_map(|g| g.group_id.as_deref()).collect();
    assert_eq!(groups.len(), 4, "{groups:?}");
    assert!(groups.contains(stripe::KEYLESS), "{groups:?}");
}

/// `check-config` (and `serve`) refuse an sqs sink's bad options by name and
/// pass a valid ordered FIFO one without connecting anywhere.
#[test]
fn sqs_sinks_are_checked_by_their_adapter() {
    use std::ffi::OsStr;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let yaml = |sink: &str| {
        format!(
            "node: {{data_dir: '{}', store: rocksdb}}\nlisteners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}\nsources:\n  - name: billing\n    sinks:\n      - {sink}\n",
            dir.join("data").display()
        )
    };
    let q = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders";
    for (sink, expected) in [
        (
            format!("{{type: sqs, name: orders, queue_url: '{q}', ordered: true}}"),
            "option \"ordered\": requires a FIFO queue",
        ),
        (
            "{type: sqs, name: orders, region: eu-west-1}".to_owned(),
            "option \"queue_url\": required",
        ),
        (
            format!(
                "{{type: sqs, name: orders, queue_url: '{q}', endpoint_url: 'localhost:5000'}}"
            ),
            "option \"endpoint_url\": ",
        ),
        (
            format!("{{type: sqs, name: orders, queue_url: '{q}', body_encoding: hex}}"),
            "option \"body_encoding\": ",
        ),
        (
            format!("{{type: sqs, name: orders, queue_url: '{q}', visibility: 30}}"),
            "option \"visibility\": unknown option of a sqs sink (its options: queue_url, region, endpoint_url, timeout_ms, body_encoding, max_message_bytes, forward_headers; every sink: type, name, ordered, ordering_key, paused, retry, filter, rate_limit, transform, auto_pause_after_ms, dead_letter)",
        ),
    ] {
        let file = dir.join("bad.yaml");
        std::fs::write(&file, yaml(&sink)).expect("write");
        for args in [
            vec![OsStr::new("check-config"), file.as_os_str()],
            vec![
                OsStr::new("serve"),
                OsStr::new("--config"),
                file.as_os_str(),
            ],
        ] {
            let (status, out) = crate::relay::run_cli(&args, dir);
            assert!(!status.success(), "{args:?} accepted {sink}:\n{out}");
            assert!(
                out.contains("source \"billing\", sink \"orders\" (sqs)") && out.contains(expected),
                "{args:?} {sink}: lacks {expected:?}:\n{out}"
            );
        }
        assert!(
            !dir.join("data").exists(),
            "serve created the data_dir for {sink}"
        );
    }
    let file = dir.join("good.yaml");
    std::fs::write(
        &file,
        yaml(&format!("{{type: sqs, name: orders, queue_url: '{q}.fifo', ordered: true, ordering_key: {{json: data.object.customer}}, body_encoding: base64, timeout_ms: 5000}}")),
    )
    .expect("write");
    let (status, out) = crate::relay::run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(status.success(), "{out}");
}

/// Provider headers: GitHub and Shopify hooks through a sink with
/// `forward_headers`: each message carries the chosen provider headers as
/// String message attributes (lower-case names, the provider's values) beside
/// the `ankusa_*` metadata and `content_type`, and none of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_headers_chosen_arrive_as_message_attributes() {
    use crate::provider;
    let url = fifo_queue("headers").await;
    let sink = format!(
        "{{type: sqs, name: queue, queue_url: '{url}', endpoint_url: '{}', region: {REGION}, forward_headers: {}}}",
        endpoint(),
        provider::CHOSEN_YAML
    );
    let relay = Relay::start_with_env(
        &config(
            "memory",
            &format!(
                "retry: {{base_ms: 10, max_ms: 200}}\n{}",
                provider::sources_yaml(&sink)
            ),
        ),
        &AWS_ENV,
    )
    .await;
    let sent = provider::send(&relay, &provider::FILES).await;
    let m = crate::peer::drained(&relay, Duration::from_secs(60)).await;
    assert_eq!(
        m["ankusa_dispatch_delivered_total"],
        4.0,
        "log:\n{}",
        relay.log()
    );
    let got = receive(&url, sent.len()).await;
    let _ = admin().await.delete_queue().queue_url(&url).send().await;
    let received: Vec<Received> = got.iter().map(|g| g.received.clone()).collect();
    let by_id = provider::check(&sent, &received, &provider::CHOSEN);
    for s in &sent {
        assert_eq!(
            by_id[&s.id].attrs.get("content_type").map(String::as_str),
            s.hook.header("content-type")
        );
    }
    let github: Vec<&str> = by_id[&sent[0].id]
        .attrs
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        github,
        [
            "ankusa_idempotency_key",
            "ankusa_message_version",
            "ankusa_received_at",
            "ankusa_source",
            "ankusa_tenant",
            "content_type",
            "x-github-delivery",
            "x-github-event",
        ]
    );
    assert_eq!(by_id[&sent[1].id].attrs["x-shopify-topic"], "orders/create");
    assert_eq!(
        m["ankusa_forwarded_headers_dropped_total{sink=\"sqs\"}"],
        0.0
    );
}

/// SQS takes 10 message attributes. A GitHub hook through a sink that forwards
/// five headers has six attributes of the sink's own (the five `ankusa_*` and
/// `content_type`): the first four listed travel, the fifth (`user-agent`) is
/// dropped and counted, and every hook is still delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_over_the_sqs_attribute_limit_are_dropped_and_counted_the_hook_delivered() {
    use crate::provider;
    let url = fifo_queue("limit").await;
    let listed = [
        "x-github-event",
        "x-github-delivery",
        "x-hub-signature-256",
        "x-github-hook-id",
        "user-agent",
    ];
    let sink = format!(
        "{{type: sqs, name: queue, queue_url: '{url}', endpoint_url: '{}', region: {REGION}, forward_headers: [{}]}}",
        endpoint(),
        listed.join(", ")
    );
    let relay = Relay::start_with_env(
        &config(
            "memory",
            &format!(
                "retry: {{base_ms: 10, max_ms: 200}}\n{}",
                provider::sources_yaml(&sink)
            ),
        ),
        &AWS_ENV,
    )
    .await;
    let files = [
        "github/push_new_branch.json",
        "github/issues_opened.json",
        "github/pull_request_opened.json",
    ];
    let sent = provider::send(&relay, &files).await;
    let m = crate::peer::drained(&relay, Duration::from_secs(60)).await;
    assert_eq!(
        m["ankusa_dispatch_delivered_total"],
        3.0,
        "log:\n{}",
        relay.log()
    );
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    assert_eq!(
        m["ankusa_forwarded_headers_dropped_total{sink=\"sqs\"}"], 3.0,
        "one per hook: {m:?}"
    );
    assert_eq!(
        m["ankusa_forwarded_headers_dropped_total"], 3.0,
        "no other sink dropped any"
    );
    let got = receive(&url, sent.len()).await;
    let _ = admin().await.delete_queue().queue_url(&url).send().await;
    let received: Vec<Received> = got.iter().map(|g| g.received.clone()).collect();
    let by_id = provider::check(&sent, &received, &listed[..4]);
    for s in &sent {
        let attrs = &by_id[&s.id].attrs;
        assert_eq!(attrs.len(), 10, "{}: {attrs:?}", s.hook.file);
        assert!(
            !attrs.contains_key("user-agent"),
            "{}: {attrs:?}",
            s.hook.file
        );
        assert!(
            s.hook.header("user-agent").is_some(),
            "{}: the corpus hook has a User-Agent",
            s.hook.file
        );
    }
}
