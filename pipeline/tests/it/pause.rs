//! Pause and resume (docs/design.md section 5, "Pause"): a paused sink waits in
//! order while the other sink delivers; pauses survive restarts, and a
//! restart without the configuration's pause resumes.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::{CounterField, SinkIx, TenantOrd};
use ankusa_pipeline::counter;
use ankusa_queue::check_invariants;

use crate::support::*;

/// A runtime pause of one sink: every hook is still committed, the other sink
/// of the same tenant delivers all of them (a backlog of 300 held rows in
/// front does not starve it), the paused sink gets nothing and its lane heads
/// are held (members stay); the gauge and the listing show the pause. A
/// resume delivers everything, in order per key; the store ends empty and
/// consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_sink_waits_in_order_while_the_other_sink_delivers() {
    use ankusa_keys::meta::PauseTarget;
    let rec = Recorder::default();
    let relay = start_two(Arc::new(MemoryKv::new()), &rec, &[]);
    let target = PauseTarget::Sink(SOURCE, SinkIx(0));
    let st = relay
        .pipeline
        .pause(target, "endpoint migration")
        .await
        .unwrap();
    assert!(st.paused() && !st.by_config);
    assert_eq!(
        st.by_runtime.as_ref().map(|v| v.reason.as_str()),
        Some("endpoint migration")
    );
    assert!(relay.pipeline.sink_paused(SOURCE, SinkIx(0)));
    assert!(!relay.pipeline.sink_paused(SOURCE, SinkIx(1)));
    assert_eq!(relay.pipeline.paused_sinks.load(Ordering::Relaxed), 1);
    let keys = ["a", "b", "c"];
    // A backlog of unordered-sink rows held in front: 300 hooks.
    for n in 0..300 {
        ingest_two(&relay, n, keys[n as usize % 3]).await;
    }
    until("sink 1 delivered all 300", || {
        (rec.bodies(1).len() == 300).then_some(())
    })
    .await;
    until("the three lane heads held", || {
        (held_rows(&relay.kv) == 3).then_some(())
    })
    .await;
    until("sink 1's outcomes committed", || {
        (counter(&*relay.kv, TENANT, CounterField::Pending).unwrap() == 300).then_some(())
    })
    .await;
    assert!(
        rec.bodies(0).is_empty(),
        "a paused sink was called: {:?}",
        rec.bodies(0)
    );
    assert_eq!(
        counter(&*relay.kv, TENANT, CounterField::LaneMembers).unwrap(),
        297
    );
    assert_eq!(counter(&*relay.kv, TENANT, CounterField::Lanes).unwrap(), 3);
    assert_eq!(
        counter(&*relay.kv, TENANT, CounterField::Pending).unwrap(),
        300
    );
    assert_eq!(check_invariants(&*relay.kv).unwrap(), vec![]);
    assert_eq!(relay.pipeline.pauses(), vec![st.clone()]);
    // An unconfigured sink cannot be paused.
    assert_eq!(
        relay
            .pipeline
            .pause(PauseTarget::Sink(SOURCE, SinkIx(7)), "x")
            .await
            .unwrap_err(),
        ankusa_pipeline::ControlError::NotConfigured(PauseTarget::Sink(SOURCE, SinkIx(7)))
    );
    let st = relay.pipeline.resume(target).await.unwrap();
    assert!(!st.paused());
    until("sink 0 delivered all 300", || {
        (rec.bodies(0).len() == 300).then_some(())
    })
    .await;
    for k in keys {
        assert_eq!(rec.bodies_of_key(0, k), want(&keys, 300, k), "key {k}");
    }
    assert_eq!(relay.pipeline.paused_sinks.load(Ordering::Relaxed), 0);
    assert!(relay.pipeline.pauses().is_empty());
    let kv = stop(relay).await;
    assert_eq!(held_rows(&kv), 0);
    assert_eq!(
        counter(&*kv, TenantOrd::NODE, CounterField::Pending).unwrap(),
        0
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}

/// A configured pause of a whole source: nothing is delivered; a restart
/// without it delivers every hook in order per key. A runtime pause survives
/// a restart (it is in the store), and its resume then delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pauses_survive_restarts_and_a_restart_without_the_config_pause_resumes() {
    use ankusa_keys::meta::PauseTarget;
    let kv = Arc::new(MemoryKv::new());
    let rec = Recorder::default();
    let relay = start_two(Arc::clone(&kv), &rec, &[PauseTarget::Source(SOURCE)]);
    assert_eq!(relay.pipeline.paused_sinks.load(Ordering::Relaxed), 2);
    let keys = ["a", "b"];
    for n in 0..40 {
        ingest_two(&relay, n, keys[n as usize % 2]).await;
    }
    until("the heads and the unordered rows held", || {
        (held_rows(&kv) == 42).then_some(())
    })
    .await;
    // The resume of a configured pause is refused by the configuration.
    let st = relay
        .pipeline
        .resume(PauseTarget::Source(SOURCE))
        .await
        .unwrap();
    assert!(st.by_config && st.paused());
    assert!(rec.0.lock().unwrap().is_empty());
    let kv = stop(relay).await;
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);

    // Restart without the pause: everything goes out, in order per key.
    let relay = start_two(Arc::clone(&kv), &rec, &[]);
    until("both sinks delivered all 40", || {
        (rec.bodies(0).len() == 40 && rec.bodies(1).len() == 40).then_some(())
    })
    .await;
    for k in keys {
        assert_eq!(rec.bodies_of_key(0, k), want(&keys, 40, k), "key {k}");
    }
    // A runtime pause of sink 1, then a restart: still paused.
    relay
        .pipeline
        .pause(PauseTarget::Sink(SOURCE, SinkIx(1)), "maintenance")
        .await
        .unwrap();
    let kv = stop(relay).await;
    let rec2 = Recorder::default();
    let relay = start_two(Arc::clone(&kv), &rec2, &[]);
    until("ready", || {
        relay.pipeline.ready.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let p = relay.pipeline.pauses();
    assert_eq!(p.len(), 1);
    assert_eq!(
        (
            p[0].target,
            p[0].by_config,
            p[0].by_runtime.as_ref().map(|v| v.reason.clone())
        ),
        (
            PauseTarget::Sink(SOURCE, SinkIx(1)),
            false,
            Some("maintenance".to_owned())
        )
    );
    for n in 40..50 {
        ingest_two(&relay, n, "a").await;
    }
    until("sink 0 delivered the 10 new hooks", || {
        (rec2.bodies(0).len() == 10).then_some(())
    })
    .await;
    until("sink 1's rows held", || {
        (held_rows(&kv) == 10).then_some(())
    })
    .await;
    assert!(rec2.bodies(1).is_empty());
    relay
        .pipeline
        .resume(PauseTarget::Sink(SOURCE, SinkIx(1)))
        .await
        .unwrap();
    until("sink 1 delivered the 10 new hooks", || {
        (rec2.bodies(1).len() == 10).then_some(())
    })
    .await;
    let kv = stop(relay).await;
    assert_eq!(
        counter(&*kv, TenantOrd::NODE, CounterField::Pending).unwrap(),
        0
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}
