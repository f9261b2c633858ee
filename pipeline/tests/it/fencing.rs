//! A cluster's fencing of the pipeline (docs/design.md section 11,
//! "Fencing" and "Failover"): a tenant this node may not deliver has nothing
//! claimed; one behind the epoch barrier has its unordered rows delivered at
//! once and its ordered lanes held, heads and members, until the barrier
//! lifts, when every key's hooks go out in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::CounterField;
use ankusa_pipeline::{TenantClaims, counter};
use ankusa_queue::check_invariants;

use crate::support::*;

fn claims(state: &AtomicU8) -> TenantClaims {
    match state.load(Ordering::SeqCst) {
        0 => TenantClaims::Nothing,
        1 => TenantClaims::Unordered,
        _ => TenantClaims::All,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_tenant_waits_and_the_barrier_holds_only_its_ordered_lanes() {
    let rec = Recorder::default();
    let state = Arc::new(AtomicU8::new(0));
    let asked = Arc::new(AtomicU64::new(0));
    let (seen, count) = (Arc::clone(&state), Arc::clone(&asked));
    let relay = start_two_fenced(
        Arc::new(MemoryKv::new()),
        &rec,
        &[],
        Some(Arc::new(move |t| {
            assert_eq!(t, TENANT, "only the test's tenant has rows");
            count.fetch_add(1, Ordering::SeqCst);
            claims(&seen)
        })),
    );
    let keys = ["a", "b", "c"];
    for n in 0..30 {
        ingest_two(&relay, n, keys[n as usize % 3]).await;
    }
    // Not this node's: nothing is claimed. Five passes of the pipeline
    // asked the fencing after the last hook was committed, and every row is
    // still pending.
    let after = asked.load(Ordering::SeqCst);
    for _ in 0..5 {
        relay.pipeline.wake();
        until("a pass asked the fencing", || {
            (asked.load(Ordering::SeqCst) > after).then_some(())
        })
        .await;
    }
    until("five more passes", || {
        (asked.load(Ordering::SeqCst) >= after + 5).then_some(())
    })
    .await;
    assert_eq!(
        rec.0.lock().unwrap().len(),
        0,
        "a fenced tenant was delivered"
    );
    assert_eq!(
        counter(&*relay.kv, TENANT, CounterField::Pending).unwrap(),
        60
    );
    // Behind the barrier: the unordered sink gets all 30, the ordered none.
    state.store(1, Ordering::SeqCst);
    relay.pipeline.wake();
    until("the unordered sink delivered all 30", || {
        (rec.bodies(1).len() == 30).then_some(())
    })
    .await;
    until("its outcomes committed", || {
        (counter(&*relay.kv, TENANT, CounterField::Pending).unwrap() == 30).then_some(())
    })
    .await;
    assert!(
        rec.bodies(0).is_empty(),
        "an ordered lane behind the barrier was delivered: {:?}",
        rec.bodies(0)
    );
    // More hooks arrive behind the barrier: members of the held lanes.
    for n in 30..60 {
        ingest_two(&relay, n, keys[n as usize % 3]).await;
    }
    until("the unordered sink delivered all 60", || {
        (rec.bodies(1).len() == 60).then_some(())
    })
    .await;
    assert!(rec.bodies(0).is_empty());
    // The barrier lifts: every key's 20 hooks, in order.
    state.store(2, Ordering::SeqCst);
    relay.pipeline.wake();
    until("the ordered sink delivered all 60", || {
        (rec.bodies(0).len() == 60).then_some(())
    })
    .await;
    for k in keys {
        assert_eq!(rec.bodies_of_key(0, k), want(&keys, 60, k), "key {k}");
    }
    until("every outcome committed", || {
        (counter(&*relay.kv, TENANT, CounterField::Pending).unwrap() == 0).then_some(())
    })
    .await;
    let kv = stop(relay).await;
    check_invariants(&*kv).unwrap();
}

/// A planned move's barrier ([`TenantClaims::AllBut`]): only the listed
/// ordered lanes are held; every other key's ordered lane and the unordered
/// sink deliver at once, and the held lane goes out in order once the barrier
/// lifts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_moves_barrier_holds_only_the_lanes_it_lists() {
    let rec = Recorder::default();
    let held_lane = ankusa_queue::lanes::lane_id(ankusa_keys::SinkIx(0), SOURCE, Some(b"a"));
    let lifted = Arc::new(AtomicU8::new(0));
    let seen = Arc::clone(&lifted);
    let listed = Arc::new(
        [held_lane]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>(),
    );
    let relay = start_two_fenced(
        Arc::new(MemoryKv::new()),
        &rec,
        &[],
        Some(Arc::new(move |_| {
            if seen.load(Ordering::SeqCst) == 0 {
                TenantClaims::AllBut(Arc::clone(&listed))
            } else {
                TenantClaims::All
            }
        })),
    );
    let keys = ["a", "b", "c"];
    for n in 0..30 {
        ingest_two(&relay, n, keys[n as usize % 3]).await;
    }
    // Keys b and c (not listed) and the unordered sink go at once.
    until("b's and c's 20 ordered hooks and all 30 unordered", || {
        (rec.bodies(0).len() == 20 && rec.bodies(1).len() == 30).then_some(())
    })
    .await;
    for k in ["b", "c"] {
        assert_eq!(rec.bodies_of_key(0, k), want(&keys, 30, k), "key {k}");
    }
    assert!(
        rec.bodies_of_key(0, "a").is_empty(),
        "a listed lane was delivered behind the barrier"
    );
    until("their outcomes committed: a's 10 ordered rows left", || {
        (counter(&*relay.kv, TENANT, CounterField::Pending).unwrap() == 10).then_some(())
    })
    .await;
    assert!(rec.bodies_of_key(0, "a").is_empty());
    lifted.store(1, Ordering::SeqCst);
    relay.pipeline.wake();
    until("a's 10 ordered hooks", || {
        (rec.bodies(0).len() == 30).then_some(())
    })
    .await;
    assert_eq!(rec.bodies_of_key(0, "a"), want(&keys, 30, "a"));
    until("every outcome committed", || {
        (counter(&*relay.kv, TENANT, CounterField::Pending).unwrap() == 0).then_some(())
    })
    .await;
    let kv = stop(relay).await;
    check_invariants(&*kv).unwrap();
}
