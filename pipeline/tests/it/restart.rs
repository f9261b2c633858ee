//! Restart recovery (ADR 0004 section 4.7): a head claimed before a crash is
//! delivered again first, then its lane goes on in order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Durability, Kv};
use ankusa_keys::CounterField;
use ankusa_pipeline::counter;
use ankusa_queue::check_invariants;

use crate::support::*;

/// Restart (ADR 4.7): a head claimed when the process died is delivered again,
/// as a first attempt, before its successor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_redelivers_claimed_head_first() {
    let script = Arc::new(Mutex::new(Script::default()));
    let kv = Arc::new(MemoryKv::new());
    let relay = start(Arc::clone(&kv), Arc::clone(&script), Some("k"));
    for n in 0..3 {
        ingest(&relay, n, Some("k"), true).await;
    }
    // Wait until the head is in its (hanging) call, then "crash": abort the
    // tasks without letting the pipeline flush.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while script.lock().unwrap().calls.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the head's call never began"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    crash(relay, &kv).await;
    assert_eq!(counter(&*kv, TENANT, CounterField::InFlight).unwrap(), 1);
    let script2 = Arc::new(Mutex::new(Script::default()));
    let relay2 = start(Arc::clone(&kv), Arc::clone(&script2), None);
    wait_delivered(&relay2, 3).await;
    let kv = stop(relay2).await;
    let s = script2.lock().unwrap();
    assert_eq!(bodies_for(&s, "k"), vec!["hook-0", "hook-1", "hook-2"]);
    assert_eq!(s.calls[0].2, 1, "the redelivery is a first attempt again");
    assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
    kv.write(ankusa_engine::Batch::new(), Durability::Sync)
        .unwrap();
}
