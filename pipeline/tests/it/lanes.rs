//! Ordered lanes (ADR 0004 section 4; docs/design.md section 5): in order with
//! a mid-stream retry, one call per lane, a slow key that blocks only its
//! lane, a dead head releasing its lane, and unordered and keyless rows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::{CounterField, TenantOrd};
use ankusa_pipeline::counter;
use ankusa_queue::check_invariants;

use crate::support::*;

/// 100 hooks for one key with a retry in the middle arrive in order, one call
/// of the lane at a time; the store ends empty and consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_lane_in_order_with_mid_stream_retry() {
    let script = Arc::new(Mutex::new(Script {
        retry_once: vec![b"hook-30".to_vec()],
        ..Default::default()
    }));
    let relay = start(Arc::new(MemoryKv::new()), Arc::clone(&script), None);
    for n in 0..100 {
        ingest(&relay, n, Some("cus_1"), true).await;
    }
    wait_delivered(&relay, 100).await;
    let kv = stop(relay).await;
    let s = script.lock().unwrap();
    let mut want: Vec<String> = (0..100).map(|n| format!("hook-{n}")).collect();
    want.insert(31, "hook-30".into()); // the retried attempt comes again before hook-31
    assert_eq!(bodies_for(&s, "cus_1"), want);
    assert_eq!(s.max_in_flight_per_key, 1);
    let retried = s.calls.iter().find(|(_, b, a)| b == b"hook-30" && *a == 2);
    assert!(retried.is_some(), "the retry is attempt 2");
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
    for f in [
        CounterField::Pending,
        CounterField::Lanes,
        CounterField::LaneMembers,
        CounterField::InFlight,
    ] {
        assert_eq!(counter(&*kv, TenantOrd::NODE, f).unwrap(), 0, "{f:?}");
    }
    assert_eq!(
        counter(&*kv, TENANT, CounterField::DeliveredTotal).unwrap(),
        100
    );
    assert_eq!(
        counter(&*kv, TENANT, CounterField::RetriesTotal).unwrap(),
        1
    );
}

/// A key whose sink call hangs does not delay another key: all of the fast
/// key's hooks are delivered while the slow head is still in its call; the
/// slow lane's members wait; once released, they follow in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_key_blocks_only_its_lane() {
    let script = Arc::new(Mutex::new(Script::default()));
    let relay = start(Arc::new(MemoryKv::new()), Arc::clone(&script), Some("slow"));
    for n in 0..5 {
        ingest(&relay, n, Some("slow"), true).await;
    }
    for n in 5..25 {
        ingest(&relay, n, Some("fast"), true).await;
    }
    wait_delivered(&relay, 20).await;
    {
        let s = script.lock().unwrap();
        assert_eq!(bodies_for(&s, "fast").len(), 20);
        assert_eq!(
            bodies_for(&s, "slow"),
            vec!["hook-0"],
            "only the slow head was called"
        );
    }
    assert_eq!(
        counter(&*relay.kv, TENANT, CounterField::LaneMembers).unwrap(),
        4
    );
    // One release per call of the slow lane, each once that call has begun:
    // `notify_one` keeps at most one permit, so two releases before the next
    // call would collapse into one (a loaded machine found that).
    for i in 1..=5 {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while bodies_for(&script.lock().unwrap(), "slow").len() < i {
            assert!(
                std::time::Instant::now() < deadline,
                "slow call {i} never began"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        relay.release.notify_one();
    }
    wait_delivered(&relay, 25).await;
    let kv = stop(relay).await;
    let s = script.lock().unwrap();
    assert_eq!(
        bodies_for(&s, "slow"),
        (0..5).map(|n| format!("hook-{n}")).collect::<Vec<_>>()
    );
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}

/// A head that fails permanently is dead-lettered and releases its lane: the
/// next hook of the key goes ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_head_releases_lane() {
    let script = Arc::new(Mutex::new(Script {
        permanent: vec![b"hook-1".to_vec()],
        ..Default::default()
    }));
    let relay = start(Arc::new(MemoryKv::new()), Arc::clone(&script), None);
    for n in 0..4 {
        ingest(&relay, n, Some("k"), true).await;
    }
    wait_delivered(&relay, 3).await;
    let kv = stop(relay).await;
    let s = script.lock().unwrap();
    assert_eq!(
        bodies_for(&s, "k"),
        vec!["hook-0", "hook-1", "hook-2", "hook-3"]
    );
    assert_eq!(counter(&*kv, TENANT, CounterField::Dead).unwrap(), 1);
    assert_eq!(counter(&*kv, TENANT, CounterField::Lanes).unwrap(), 0);
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}

/// Unordered hooks all arrive, at most sink_concurrency at a time, and the
/// keyless lane of an ordered sink carries "<tenant>/<source>".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unordered_and_keyless() {
    let script = Arc::new(Mutex::new(Script::default()));
    let relay = start(Arc::new(MemoryKv::new()), Arc::clone(&script), None);
    for n in 0..30 {
        ingest(&relay, n, None, false).await;
    }
    for n in 30..35 {
        ingest(&relay, n, None, true).await;
    }
    wait_delivered(&relay, 35).await;
    let kv = stop(relay).await;
    let s = script.lock().unwrap();
    assert_eq!(
        bodies_for(&s, "acme/demo"),
        (30..35).map(|n| format!("hook-{n}")).collect::<Vec<_>>()
    );
    assert_eq!(s.calls.iter().filter(|(k, _, _)| k.is_none()).count(), 30);
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
}
