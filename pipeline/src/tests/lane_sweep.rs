//! The lane sweep: a pass sweeps after lane rows were committed, only the
//! lanes the Writer named, and a full sweep promotes a member whose name was
//! lost; every lane delivers in order.

use std::sync::Arc;

use ankusa_engine::Kv;
use ankusa_engine::memory::MemoryKv;
use ankusa_keys::CounterField;
use ankusa_queue::writer::{Writer, WriterConfig};
use ankusa_queue::{NewRow, check_invariants};
use ankusa_sinks::Outcome;

use super::gate::{Answered, CLOCK_MS};
use super::{FAST, SLOW, SOURCE, TENANT, request};
use crate::calls::Done;
use crate::{BreakerPolicy, DispatchConfig, Pipeline, RetryPolicy, Route, Routes, counter};

/// The lane sweep runs only after lane rows (in the 1,000-key load run its
/// scan of the ?P markers walked the tombstones of every marker deleted since
/// the last memtable flush, 73% of the relay's CPU while nothing new came in):
/// with the Writer's lane hints wired as `ankusa serve` wires them, a pass
/// sweeps only after lane rows were committed. Every lane still gets its first member
/// promoted by a sweep and delivers its hooks in order, and a pass with nothing
/// new does not read the markers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lane_sweep_runs_after_lane_rows_and_every_lane_still_delivers_in_order() {
    use ankusa_queue::lanes;
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let lane_rows = handle.lane_rows();
    let task = tokio::spawn(writer.run());
    const KEYS: u64 = 10;
    const HOOKS: u64 = 100;
    let keyed = |n: u64| {
        let mut r = request(n);
        let key = format!("entity-{}", n % KEYS);
        r.rows = vec![NewRow {
            sink: FAST,
            lane: Some(lanes::assign(FAST, SOURCE, Some(key.as_bytes()))),
        }];
        r
    };
    for n in 0..HOOKS {
        handle.ingest(keyed(n)).await.expect("ingest");
    }
    // And one unordered hook for the slow sink, whose retry (an hour out)
    // keeps the tenant active while the lanes' heads are out.
    let mut r = request(HOOKS);
    r.rows = vec![NewRow {
        sink: SLOW,
        lane: None,
    }];
    handle.ingest(r).await.expect("ingest");
    assert_eq!(
        lane_rows.len() as u64,
        KEYS,
        "the Writer names the lanes it put members into"
    );

    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, FAST),
        Route {
            sink: Arc::new(Answered),
            sink_name: "fast".into(),
            source_name: "s".into(),
        },
    );
    routes.sinks.insert(
        (SOURCE, SLOW),
        Route {
            sink: Arc::new(Answered),
            sink_name: "slow".into(),
            source_name: "s".into(),
        },
    );
    routes.tenants.insert(TENANT, "t".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    // Room for every lane's head at once.
    let dispatch = DispatchConfig {
        sink_concurrency: 64,
        ..DispatchConfig::default()
    };
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.lane_rows(Arc::clone(&lane_rows)).dispatcher;
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");

    // One step: the sweep promotes every lane's first member; the calls
    // stay out (each lane's head in flight, members behind it).
    d.step(Vec::new(), Vec::new(), true).expect("step");
    let calls = d.take_calls();
    let (slow, first): (Vec<Done>, Vec<Done>) = calls
        .into_iter()
        .map(|c| c.finish(Outcome::Ok))
        .partition(|x| x.row.sink == SLOW);
    assert_eq!(
        first.len() as u64,
        KEYS,
        "one head per lane, promoted by the sweep"
    );
    assert_eq!(slow.len(), 1);
    assert!(lane_rows.is_empty(), "the pass took the named lanes");
    let retry: Vec<Done> = slow
        .into_iter()
        .map(|mut x| {
            x.outcome = Outcome::Retry {
                reason: "503".into(),
                after: Some(std::time::Duration::from_secs(3600)),
            };
            x
        })
        .collect();
    d.step(Vec::new(), retry, true).expect("commit the retry");
    assert!(d.calls().is_empty());

    // A pass with nothing new: no sweep, so no read of the ?P markers.
    let before = kv.stats();
    d.step(Vec::new(), Vec::new(), true).expect("idle step");
    let idle = kv.stats() - before;
    d.sweep_all();
    let before = kv.stats();
    d.step(Vec::new(), Vec::new(), true).expect("forced sweep");
    let swept = kv.stats() - before;
    assert_eq!(
        swept.seeks,
        idle.seeks + 1,
        "a sweeping pass reads the markers once more: idle {idle:?}, swept {swept:?}"
    );

    // The rest: each step commits the last calls' outcomes (a release
    // promotes the next member itself) and starts the next ones.
    let mut delivered: Vec<u64> = first.iter().map(|x| x.row.seq.0).collect();
    let mut done = first;
    let mut steps = 0;
    while !done.is_empty() {
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        done = d
            .take_calls()
            .into_iter()
            .map(|c| c.finish(Outcome::Ok))
            .collect();
        delivered.extend(done.iter().map(|x| x.row.seq.0));
        steps += 1;
        assert!(steps <= 10 * HOOKS, "the dispatcher does not converge");
    }
    drop(handle);
    task.await.expect("writer task").expect("writer");
    assert_eq!(
        delivered.len() as u64,
        HOOKS,
        "every ordered hook delivered once"
    );
    // Seqs are given in ingest order: per key, the delivered seqs ascend.
    for key in 0..KEYS {
        let seqs: Vec<u64> = delivered
            .iter()
            .copied()
            .filter(|s| (s - 1) % KEYS == key)
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "key {key}: {seqs:?}");
    }
    assert_eq!(
        counter(&*kv, TENANT, CounterField::Pending).expect("counter"),
        1,
        "only the slow sink's retry is left"
    );
    let violations = check_invariants(&*kv).expect("check");
    assert!(violations.is_empty(), "{violations:?}");
}

/// The named sweep: a pass sweeps the lanes the Writer named with point reads
/// of their markers and scans no marker range, so a member whose name was lost
/// (as in a crash between the commit and the take) waits for the next full
/// sweep (start-up, a control call, the once-a-second reset), which promotes
/// it. Both lanes end delivered, invariants clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_sweeps_the_named_lanes_and_a_lost_name_waits_for_the_full_sweep() {
    use ankusa_queue::lanes;
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let lane_rows = handle.lane_rows();
    let task = tokio::spawn(writer.run());
    let keyed = |n: u64, key: &str| {
        let mut r = request(n);
        r.rows = vec![NewRow {
            sink: FAST,
            lane: Some(lanes::assign(FAST, SOURCE, Some(key.as_bytes()))),
        }];
        r
    };

    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, FAST),
        Route {
            sink: Arc::new(Answered),
            sink_name: "fast".into(),
            source_name: "s".into(),
        },
    );
    routes.tenants.insert(TENANT, "t".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.lane_rows(Arc::clone(&lane_rows)).dispatcher;
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");
    // The start-up pass: the full sweep over an empty store.
    d.step(Vec::new(), Vec::new(), true).expect("step");
    assert!(d.calls().is_empty());

    // Key "lost": committed, its name taken by nobody's pass.
    let lost = handle.ingest(keyed(0, "lost")).await.expect("ingest");
    assert_eq!(lane_rows.take().lanes.len(), 1, "the Writer named the lane");
    // Key "named": committed and named.
    let named = handle.ingest(keyed(1, "named")).await.expect("ingest");
    assert_eq!(lane_rows.len(), 1);
    let seq_of = |i: ankusa_queue::writer::Ingested| match i {
        ankusa_queue::writer::Ingested::Committed(s) => s.0,
        other => panic!("not committed: {other:?}"),
    };
    let (lost, named) = (seq_of(lost), seq_of(named));

    d.step(Vec::new(), Vec::new(), true).expect("step");
    let calls: Vec<Done> = d
        .take_calls()
        .into_iter()
        .map(|c| c.finish(Outcome::Ok))
        .collect();
    let seqs: Vec<u64> = calls.iter().map(|x| x.row.seq.0).collect();
    assert_eq!(seqs, vec![named], "only the named lane was swept");
    assert_eq!(
        counter(&*kv, TENANT, CounterField::LaneMembers).expect("counter"),
        1,
        "the lost lane's member waits"
    );
    d.step(Vec::new(), calls, true).expect("commit");
    assert!(
        d.calls().is_empty(),
        "a pass with no name and no full sweep promotes nothing"
    );

    // The full sweep (as after a control call or the once-a-second reset).
    d.sweep_all();
    d.step(Vec::new(), Vec::new(), true).expect("full sweep");
    let calls: Vec<Done> = d
        .take_calls()
        .into_iter()
        .map(|c| c.finish(Outcome::Ok))
        .collect();
    assert_eq!(
        calls.iter().map(|x| x.row.seq.0).collect::<Vec<_>>(),
        vec![lost],
        "the full sweep promotes it"
    );
    d.step(Vec::new(), calls, true).expect("commit");
    assert!(d.calls().is_empty());

    drop(handle);
    task.await.expect("writer task").expect("writer");
    assert_eq!(
        counter(&*kv, TENANT, CounterField::Pending).expect("counter"),
        0,
        "both delivered"
    );
    let violations = check_invariants(&*kv).expect("check");
    assert!(violations.is_empty(), "{violations:?}");
}
