//! The low-water cursor: a hook committed after a visit that read a later
//! row is claimed by the next visit (docs/design.md section 5, "Low-water
//! cursor").

use std::sync::Arc;

use ankusa_engine::memory::MemoryKv;
use ankusa_queue::NewRow;
use ankusa_queue::writer::{Writer, WriterConfig};
use ankusa_sinks::Outcome;

use super::gate::{Answered, CLOCK_MS};
use super::{FAST, SOURCE, TENANT, request};
use crate::calls::Done;
use crate::{BreakerPolicy, DispatchConfig, Pipeline, RetryPolicy, Route, Routes};

/// The Writer reads its clock for a group before it commits it (and fsyncs):
/// a hook's due time is that reading. A visit that runs meanwhile and meets a
/// row due a little later (a retry that just fell due, a promoted head) sets
/// the tenant's low-water cursor above the hook's due time, and the hook is
/// under the cursor when its commit lands: no visit reads it until the cursor
/// is dropped (`LOW_WATER_RESET`, 1 s). Measured against the real binary: a
/// healthy sink's p99 latency went from 23 ms to 710 ms (max 989 ms) while 4
/// rows of another sink of the same tenant were retrying. docs/design.md
/// section 5, "Low-water cursor", says ingest is due "now", at or after the
/// cursor; it is due at the Writer's "now", which can be before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_committed_after_a_visit_that_read_a_later_row_is_claimed_by_the_next_visit() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let writer_clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let pipeline_clock = Arc::new(AtomicU64::new(CLOCK_MS));
    let kv = Arc::new(MemoryKv::new());
    let wc = Arc::clone(&writer_clock);
    let (writer, handle) = Writer::new(Arc::clone(&kv), WriterConfig::default(), move || {
        wc.load(Ordering::SeqCst)
    })
    .expect("writer");
    let task = tokio::spawn(writer.run());
    let one_row = |n: u64| {
        let mut r = request(n);
        r.rows = vec![NewRow {
            sink: FAST,
            lane: None,
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
    let pc = Arc::clone(&pipeline_clock);
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        RetryPolicy::default(),
        BreakerPolicy::default(),
        move || pc.load(Ordering::SeqCst),
    );
    // As `ankusa serve` wires it (Pipeline::due_floor).
    let mut d = pipeline.due_floor(handle.due_floor()).dispatcher;
    // The cursor reset is a wall-clock second; this test is about the steps
    // before it.
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");

    // Hook 0 is committed at +10 ms and claimed by a visit at +20 ms: the
    // cursor is at +10 ms.
    writer_clock.store(CLOCK_MS + 10, Ordering::SeqCst);
    handle.ingest(one_row(0)).await.expect("ingest");
    pipeline_clock.store(CLOCK_MS + 20, Ordering::SeqCst);
    d.step(Vec::new(), Vec::new(), true).expect("step");
    let first: Vec<Done> = d
        .take_calls()
        .into_iter()
        .map(|c| c.finish(Outcome::Ok))
        .collect();
    assert_eq!(first.len(), 1, "hook 0 claimed");

    // Hook 1's group read the Writer's clock at +5 ms, before that visit,
    // and its commit lands after it.
    writer_clock.store(CLOCK_MS + 5, Ordering::SeqCst);
    handle.ingest(one_row(1)).await.expect("ingest");
    drop(handle);
    task.await.expect("writer task").expect("writer");

    let mut claimed = Vec::new();
    let mut done = first;
    for step in 1..=3 {
        pipeline_clock.store(CLOCK_MS + 20 + step, Ordering::SeqCst);
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        for c in d.take_calls() {
            let x = c.finish(Outcome::Ok);
            claimed.push(x.row);
            done.push(x);
        }
    }
    assert_eq!(
        claimed.len(),
        1,
        "hook 1 (due +5 ms, committed after a visit set the low-water cursor at +10 ms) was not claimed in 3 steps: {claimed:?}"
    );
}
