//! A source moved to another tenant in the configuration does not stall its
//! old tenant's other sources.

use std::sync::Arc;

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::NewRow;
use ankusa_queue::writer::{Writer, WriterConfig};
use ankusa_sinks::Outcome;

use super::gate::{Answered, CLOCK_MS};
use super::{TENANT, request};
use crate::calls::Done;
use crate::{BreakerPolicy, DispatchConfig, Pipeline, RetryPolicy, Route, Routes};

/// A source moved from one tenant to another in the configuration (`tenant:
/// a` -> `tenant: b`; `ankusa serve` starts, the source and its sinks are
/// still configured) leaves tenant a's queued rows of it. `Routes::
/// source_tenants` now binds it to b, so tenant a's sink entries
/// (`Scanner::tenant_routes`) are its other sources' only, and
/// `all_saturated` compares counts, not entries: the moved source's sink at its
/// concurrency counts as "every sink of tenant a saturated", and the visit
/// stops before tenant a's other source's rows. Against the real binary: a
/// hook of the other source waited more than 60 s (until the moved source's
/// 300-row backlog at 3 s a call drained) instead of 0.1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_moved_to_another_tenant_does_not_stall_its_old_tenants_other_sources() {
    const MOVED: SourceId = SourceId(1);
    const OTHER: SourceId = SourceId(2);
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let task = tokio::spawn(writer.run());
    // 20 hooks of the moved source queued for tenant 1, then one of its other
    // source.
    for n in 0..21 {
        let mut r = request(n);
        r.envelope.source = if n < 20 { MOVED } else { OTHER };
        r.rows = vec![NewRow {
            sink: SinkIx(0),
            lane: None,
        }];
        handle.ingest(r).await.expect("ingest");
    }
    drop(handle);
    task.await.expect("writer task").expect("writer");

    let mut routes = Routes::default();
    for (s, name) in [(MOVED, "moved"), (OTHER, "other")] {
        routes.sinks.insert(
            (s, SinkIx(0)),
            Route {
                sink: Arc::new(Answered),
                sink_name: "http".into(),
                source_name: name.into(),
            },
        );
    }
    routes.tenants.insert(TENANT, "a".into());
    routes.tenants.insert(TenantOrd(2), "b".into());
    routes.source_tenants.insert(MOVED, TenantOrd(2));
    routes.source_tenants.insert(OTHER, TENANT);
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.dispatcher;
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");
    // The moved source's calls never end (a slow receiver): it stays at its
    // sink_concurrency.
    let mut claimed: Vec<Done> = Vec::new();
    for _ in 0..10 {
        d.step(Vec::new(), Vec::new(), true).expect("step");
        claimed.extend(d.take_calls().into_iter().map(|c| c.finish(Outcome::Ok)));
    }
    let moved = claimed.iter().filter(|x| x.key.1 == MOVED).count();
    assert_eq!(
        moved,
        DispatchConfig::default().sink_concurrency,
        "the moved source's sink at its concurrency"
    );
    assert!(
        claimed.iter().any(|x| x.key.1 == OTHER),
        "tenant a's other source's hook was not claimed in 10 steps while the moved source's sink was saturated"
    );
}
