//! A source moved to another tenant in the configuration does not stall its
//! old tenant's other source (a break-it test of the dispatcher against the
//! real binary: what an unlucky operator's change does to dispatch).

use std::time::Duration;

use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, until};

/// An operator moves a source from tenant `a` to tenant `b` (`tenant: a` ->
/// `tenant: b`) while `a` still has deliveries of it queued behind a slow
/// receiver. `serve` starts (the source and its sink entries are still
/// configured), and the pipeline binds the source to `b`
/// (`Routes::source_tenants`), so tenant `a`'s sink entries are its other
/// source's only. The moved source's sink, at its `sink_concurrency`, then
/// counts as "every sink entry of `a` saturated" (`all_saturated` compares
/// counts, not entries), every visit of `a` stops at it, and `a`'s other
/// source delivers nothing until that backlog has drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_moved_to_another_tenant_does_not_stall_its_old_tenants_other_source() {
    // /in (the moved source) holds every request; /in2 answers 200.
    let sink = Sink::start(|r| {
        if r.path == "/in" {
            Reply::Hold
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let template = |tenant: &str| {
        config(
            "rocksdb",
            &format!(
                "
tenants: [{{name: a}}, {{name: b}}]
sources:
  - name: moved
    tenant: {tenant}
    sinks: [{{type: http, url: '{url}', timeout_ms: 600000}}]
  - name: other
    tenant: a
    sinks: [{{type: http, url: '{url}2'}}]
",
                url = sink.url()
            ),
        )
    };
    let mut relay = Relay::start(&template("a")).await;
    for i in 0..20 {
        relay
            .post("/hooks/moved", &[], format!("{{\"i\":{i}}}"))
            .await
            .id();
    }
    until(
        "8 calls of the moved source held",
        Duration::from_secs(60),
        async || (sink.requests().iter().filter(|r| r.path == "/in").count() >= 8).then_some(()),
    )
    .await;
    relay.kill();
    relay.set_template(&template("b"));
    relay.restart().await;
    until(
        "the moved source's 8 calls held again after the restart",
        Duration::from_secs(60),
        async || (sink.requests().iter().filter(|r| r.path == "/in").count() >= 16).then_some(()),
    )
    .await;
    let id = relay.post("/hooks/other", &[], "{}").await.id();
    let got = until(
        "tenant a's other source's hook delivered",
        Duration::from_secs(60),
        async || sink.delivered().into_iter().find(|r| r.id() == id),
    )
    .await;
    assert_eq!(got.path, "/in2");
    assert_eq!(got.header("x-ankusa-tenant").as_deref(), Some("a"));
    sink.release();
}
