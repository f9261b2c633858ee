//! Fair share between tenants: a few busy tenants that fill the admission
//! window do not starve another (docs/design.md section 5, "A pass").

use std::sync::Arc;

use ankusa_engine::memory::MemoryKv;
use ankusa_keys::{CounterField, Envelope, SinkIx, TenantOrd};
use ankusa_queue::NewRow;
use ankusa_queue::writer::{Writer, WriterConfig};
use ankusa_sinks::{DeliveryCtx, Outcome, Sink};
use async_trait::async_trait;

use super::gate::CLOCK_MS;
use super::{SOURCE, request};
use crate::calls::Done;
use crate::{BreakerPolicy, DispatchConfig, Pipeline, RetryPolicy, Route, Routes, counter};

/// A sink whose client pipelines (`Sink::pipelined`): up to
/// `dispatch.pipelined_concurrency` calls per (tenant, sink).
struct Pipelined;

#[async_trait]
impl Sink for Pipelined {
    async fn deliver(&self, _: &Envelope, _: &DeliveryCtx) -> Outcome {
        Outcome::Ok
    }
    fn kind(&self) -> &'static str {
        "breakit-pipelined"
    }
    fn pipelined(&self) -> bool {
        true
    }
}

/// Four tenants with a backlog each on a pipelining sink fill the admission
/// window (4 x `pipelined_concurrency` 256 = `admission_window` 1024), and a
/// fifth tenant's one hook waits. Calls end 64 at a time, oldest first, one
/// batch per step. A pass visits tenants in key order, and each of the first
/// four reclaims the window room its own finished calls freed before the
/// fifth is visited, so the fifth gets room only when the others' backlogs
/// run dry: "A pass visits every tenant with an ?A marker, in key order (fair
/// share)" does not hold once a few tenants can fill the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_busy_tenants_on_a_pipelining_sink_do_not_starve_a_fifth() {
    const BACKLOG: u64 = 2000;
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    let task = tokio::spawn(writer.run());
    let tenants: Vec<TenantOrd> = (1..=5).map(TenantOrd).collect();
    let ingest = async |n: u64, t: TenantOrd| {
        let mut r = request(n);
        r.tenant = t;
        r.rows = vec![NewRow {
            sink: SinkIx(0),
            lane: None,
        }];
        handle.ingest(r).await.expect("ingest");
    };
    for n in 0..4 * BACKLOG {
        ingest(n, tenants[usize::try_from(n % 4).expect("small")]).await;
    }
    let mut routes = Routes::default();
    // One source for every tenant (a `{tenant}` path source): not in
    // `source_tenants`.
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink: Arc::new(Pipelined),
            sink_name: "ps".into(),
            source_name: "p".into(),
        },
    );
    for t in &tenants {
        routes.tenants.insert(*t, format!("t{}", t.0));
    }
    let dispatch = DispatchConfig::default();
    assert_eq!(
        4 * dispatch.pipelined_concurrency,
        dispatch.window,
        "the defaults this test is about"
    );
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        dispatch,
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline.dispatcher;
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");
    let mut in_flight: std::collections::VecDeque<Done> = std::collections::VecDeque::new();
    // The four fill the window (no call ends yet).
    while d.in_flight() < dispatch.window {
        d.step(Vec::new(), Vec::new(), true).expect("step");
        in_flight.extend(d.take_calls().into_iter().map(|c| c.finish(Outcome::Ok)));
    }
    // Now the fifth tenant's one hook comes in.
    ingest(4 * BACKLOG, tenants[4]).await;
    drop(handle);
    task.await.expect("writer task").expect("writer");
    let mut done: Vec<Done> = Vec::new();
    for _ in 0..64 {
        if let Some(x) = in_flight.pop_front() {
            done.push(x);
        }
    }
    let mut steps = 0;
    let fifth = loop {
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        steps += 1;
        let calls: Vec<Done> = d
            .take_calls()
            .into_iter()
            .map(|c| c.finish(Outcome::Ok))
            .collect();
        if let Some(x) = calls.iter().find(|x| x.key.0 == TenantOrd(5)) {
            break Some((steps, x.row));
        }
        in_flight.extend(calls);
        if in_flight.is_empty() {
            break None;
        }
        for _ in 0..64 {
            if let Some(x) = in_flight.pop_front() {
                done.push(x);
            }
        }
    };
    let pending: Vec<i64> = tenants[..4]
        .iter()
        .map(|t| counter(&*kv, *t, CounterField::Pending).expect("counter"))
        .collect();
    let Some((at_step, row)) = fifth else {
        panic!("the fifth tenant's hook was never claimed")
    };
    assert!(
        pending
            .iter()
            .all(|p| *p > i64::try_from(BACKLOG).expect("backlog") / 2),
        "the fifth tenant's one hook ({row}) was claimed at step {at_step} only, when the four busy tenants had {pending:?} \
         rows pending of {BACKLOG} each: it waited for their backlogs"
    );
}
