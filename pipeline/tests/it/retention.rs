//! Retention (docs/design.md section 5, "Retention"): a round reclaims
//! delivered hooks and expired dedupe records.

use std::sync::Arc;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Durability, Kv};
use ankusa_keys::{CounterField, SinkIx};
use ankusa_pipeline::counter;
use ankusa_queue::{NewRow, check_invariants};

use crate::support::*;

/// A round deletes the envelopes and archive entries of delivered hooks
/// received before the cutoff, and keeps a quarantined hook, a pending one and
/// recent ones; the dedupe round expires records through the Writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_reclaims_delivered_hooks_and_expired_dedupe_records() {
    use ankusa_engine::{Cf, Direction, Read};
    use ankusa_keys::meta::PauseTarget;
    use ankusa_pipeline::retention::{RetentionConfig, dedupe_round, retention_round};
    use ankusa_queue::writer::QuarantineRequest;
    let kv = Arc::new(MemoryKv::new());
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .unwrap();
    let (batch, _) = ankusa_queue::register(&*kv, ["acme"], ["demo"]).unwrap();
    kv.write(batch, Durability::Sync).unwrap();
    let rec = Recorder::default();
    let relay = start_two(Arc::clone(&kv), &rec, &[]);
    for n in 0..20 {
        let mut req = request(n, None, false);
        req.rows = vec![NewRow {
            sink: SinkIx(1),
            lane: None,
        }];
        req.envelope.dedupe_key = Some(format!("evt_{n}").into_bytes());
        req.dedupe_ttl_ms = Some(1);
        relay.writer.ingest(req).await.unwrap();
        relay.pipeline.wake();
    }
    let q = request(99, None, false).envelope;
    let qseq = relay
        .writer
        .quarantine(QuarantineRequest {
            tenant: TENANT,
            envelope: q,
            reason: "review".into(),
        })
        .await
        .unwrap();
    until("20 delivered and settled", || {
        (counter(&*kv, TENANT, CounterField::DeliveredTotal).unwrap() == 20).then_some(())
    })
    .await;
    // One more, held by a pause: still pending when the round runs.
    relay
        .pipeline
        .pause(PauseTarget::Sink(SOURCE, SinkIx(1)), "x")
        .await
        .unwrap();
    let mut req = request(100, None, false);
    req.rows = vec![NewRow {
        sink: SinkIx(1),
        lane: None,
    }];
    relay.writer.ingest(req).await.unwrap();
    let hooks = |kv: &MemoryKv| {
        kv.scan(
            Cf::Hooks,
            &ankusa_keys::hooks_tenant_range(TENANT),
            Direction::Forward,
            1000,
        )
        .unwrap()
        .len()
    };
    let archive = |kv: &MemoryKv| {
        kv.scan(
            Cf::Archive,
            &ankusa_keys::archive_tenant_range(TENANT),
            Direction::Forward,
            1000,
        )
        .unwrap()
        .len()
    };
    assert_eq!((hooks(&kv), archive(&kv)), (22, 22));
    let cfg = RetentionConfig {
        page: 3,
        ..RetentionConfig::new(60_000, 1_000)
    };
    // Nothing is old enough yet.
    assert_eq!(
        retention_round(&kv, &cfg, now_ms(), || false)
            .await
            .unwrap(),
        0
    );
    let deleted = retention_round(&kv, &cfg, now_ms() + 120_000, || false)
        .await
        .unwrap();
    assert_eq!(deleted, 20);
    assert_eq!(
        (hooks(&kv), archive(&kv)),
        (2, 2),
        "the quarantined and the pending hook stay"
    );
    assert!(
        kv.get(Cf::Hooks, &ankusa_keys::hook_key(TENANT, qseq))
            .unwrap()
            .is_some()
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
    let expired = dedupe_round(&kv, &relay.writer, 4, || false).await.unwrap();
    assert_eq!(expired, 20, "every record had a 1 ms lifetime");
    assert!(
        kv.scan(
            Cf::Index,
            &ankusa_keys::tenant_range(ankusa_keys::Family::Dedupe, TENANT),
            Direction::Forward,
            10
        )
        .unwrap()
        .is_empty()
    );
    let kv = stop(relay).await;
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}
