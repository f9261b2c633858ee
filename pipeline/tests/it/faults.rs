//! Store faults under the real Writer and pipeline (docs/design.md section 5,
//! "A store failure"): the memory engine wrapped in
//! `ankusa_engine::fault::FaultKv`, which fails the commit or sync a test
//! chooses as a real engine fails one.
//!
//! - An ingest whose commit or sync fails is answered with an error, the
//!   Writer stops (the node's crash path), and every hook that was answered
//!   `Committed` is delivered after a restart on the same store; a failed
//!   commit leaves nothing and takes no seq.
//! - An outcome flush that fails after the sink took a lane's head (ADR 0004
//!   section 4.5): the head may go out again, but its lane does not advance
//!   until a release commits; after the restart (or, with a transient fault,
//!   a new pipeline over the same store) the head is sent again and the
//!   members follow in order, each once.
//!
//! `queue::check_invariants` runs on a snapshot at every sink call (each one
//! follows a committed claim), after each failure and at the end.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ankusa_engine::fault::FaultKv;
use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Cf, Durability, EngineError, Kv, Op, Read};
use ankusa_keys::{
    CounterField, Envelope, Seq, SinkIx, SourceId, TenantOrd, delivery_key, hook_key,
};
use ankusa_pipeline::{
    BreakerPolicy, DispatchConfig, Pipeline, PipelineError, PipelineHandle, RetryPolicy, Route,
    Routes, counter,
};
use ankusa_queue::writer::{
    IngestRequest, Ingested, WriteError, Writer, WriterConfig, WriterHandle, seq_high_water,
};
use ankusa_queue::{NewRow, check_invariants, lanes};
use ankusa_sinks::{DeliveryCtx, Envelope as SinkEnvelope, Outcome, Sink};
use async_trait::async_trait;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const TENANT: TenantOrd = TenantOrd(1);
const SOURCE: SourceId = SourceId(1);
const WAIT: Duration = Duration::from_secs(60);

type Store = FaultKv<MemoryKv>;

/// One sink call: (ordering key, body, attempt).
type Call = (Option<String>, String, u32);

/// What every run's sink saw, across restarts.
#[derive(Default)]
struct Log {
    calls: Mutex<Vec<Call>>,
    /// Bodies answered `Ok`.
    delivered: Mutex<Vec<String>>,
    /// What the invariant checker found at any call.
    violations: Mutex<Vec<String>>,
}

impl Log {
    fn bodies_of(&self, key: &str) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.0.as_deref() == Some(key))
            .map(|c| c.1.clone())
            .collect()
    }
    fn delivered(&self) -> HashSet<String> {
        self.delivered.lock().unwrap().iter().cloned().collect()
    }
}

/// Records every call, checks the store's invariants on a snapshot, holds
/// the calls of `hold`'s bodies until `open` turns true, then answers `Ok`.
struct Recorder {
    log: Arc<Log>,
    kv: Weak<Store>,
    hold: HashSet<String>,
    open: watch::Receiver<bool>,
}

#[async_trait]
impl Sink for Recorder {
    async fn deliver(&self, hook: &SinkEnvelope, ctx: &DeliveryCtx) -> Outcome {
        let body = String::from_utf8(hook.body.clone()).unwrap();
        let key = ctx
            .ordering_key
            .as_ref()
            .map(|k| String::from_utf8(k.clone()).unwrap());
        self.log
            .calls
            .lock()
            .unwrap()
            .push((key, body.clone(), ctx.attempt));
        if let Some(kv) = self.kv.upgrade() {
            let found = check_invariants(&kv.snapshot()).unwrap();
            if !found.is_empty() {
                self.log
                    .violations
                    .lock()
                    .unwrap()
                    .push(format!("at the call of {body}: {found:?}"));
            }
        }
        if self.hold.contains(&body) {
            let mut open = self.open.clone();
            let _ = open.wait_for(|o| *o).await;
        }
        self.log.delivered.lock().unwrap().push(body);
        Outcome::Ok
    }
    fn kind(&self) -> &'static str {
        "recorder"
    }
}

/// A node: the Writer and the pipeline over one store, wired as `serve`
/// wires them (due floor and lane-rows flag).
struct Node {
    kv: Arc<Store>,
    writer: Option<WriterHandle>,
    pipeline: PipelineHandle,
    writer_task: Option<JoinHandle<Result<(), EngineError>>>,
    pipeline_task: Option<JoinHandle<Result<(), PipelineError>>>,
    /// Lets the held calls answer.
    open: watch::Sender<bool>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn start(kv: Arc<Store>, log: &Arc<Log>, hold: &[&str]) -> Node {
    let (writer, handle) = Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms).unwrap();
    let writer_task = tokio::spawn(writer.run());
    let (pipeline_task, pipeline, open) = start_pipeline(&kv, log, hold, &handle);
    Node {
        kv,
        writer: Some(handle),
        pipeline,
        writer_task: Some(writer_task),
        pipeline_task: Some(pipeline_task),
        open,
    }
}

fn start_pipeline(
    kv: &Arc<Store>,
    log: &Arc<Log>,
    hold: &[&str],
    writer: &WriterHandle,
) -> (
    JoinHandle<Result<(), PipelineError>>,
    PipelineHandle,
    watch::Sender<bool>,
) {
    let (open, open_rx) = watch::channel(false);
    let sink = Recorder {
        log: Arc::clone(log),
        kv: Arc::downgrade(kv),
        hold: hold.iter().map(|b| (*b).to_owned()).collect(),
        open: open_rx,
    };
    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink: Arc::new(sink),
            sink_name: "recorder".into(),
            source_name: "demo".into(),
        },
    );
    routes.tenants.insert(TENANT, "acme".into());
    let dispatch = DispatchConfig {
        batch: 16,
        idle_ms: 5,
        ..DispatchConfig::default()
    };
    let (pipeline, handle) = Pipeline::new(
        Arc::clone(kv),
        routes,
        dispatch,
        RetryPolicy::default(),
        BreakerPolicy::default(),
        now_ms,
    );
    let pipeline = pipeline
        .due_floor(writer.due_floor())
        .lane_rows(writer.lane_rows());
    (tokio::spawn(pipeline.run()), handle, open)
}

/// Hook `body` (dedupe key `evt_<body>`), for sink 0; laned by `key` when given.
fn request(body: &str, key: Option<&str>) -> IngestRequest {
    let envelope = Envelope {
        source: SOURCE,
        received_at_ms: now_ms(),
        method: "POST".into(),
        path: "/hooks/demo".into(),
        query: None,
        headers: vec![],
        body: body.as_bytes().to_vec(),
        dedupe_key: Some(format!("evt_{body}").into_bytes()),
        idempotency_key: [0; 16],
        replay_of: None,
    };
    let lane = key.map(|k| lanes::assign(SinkIx(0), SOURCE, Some(k.as_bytes())));
    IngestRequest {
        tenant: TENANT,
        envelope,
        rows: vec![NewRow {
            sink: SinkIx(0),
            lane,
        }],
        dedupe_ttl_ms: None,
    }
}

impl Node {
    fn writer(&self) -> &WriterHandle {
        self.writer.as_ref().expect("the writer handle")
    }

    async fn ingest(&self, body: &str, key: Option<&str>) -> Result<Ingested, WriteError> {
        let r = self.writer().ingest(request(body, key)).await;
        self.pipeline.wake();
        r
    }

    async fn commit(&self, body: &str, key: Option<&str>) -> Seq {
        match self.ingest(body, key).await {
            Ok(Ingested::Committed(seq)) => seq,
            other => panic!("ingest of {body}: {other:?}"),
        }
    }

    /// Waits until the pipeline task has ended (on its own) and returns how.
    async fn pipeline_ended(&mut self) -> Result<(), PipelineError> {
        let task = self.pipeline_task.take().expect("the pipeline task");
        tokio::time::timeout(WAIT, task)
            .await
            .expect("the pipeline did not stop")
            .unwrap()
    }

    /// Waits until the Writer task has ended (on its own) and returns how.
    async fn writer_ended(&mut self) -> Result<(), EngineError> {
        let task = self.writer_task.take().expect("the writer task");
        tokio::time::timeout(WAIT, task)
            .await
            .expect("the writer did not stop")
            .unwrap()
    }

    /// The process dies: its tasks are stopped where they are (nothing more is
    /// flushed), and the store is handed back as a restart opens it again.
    async fn crash(mut self) -> MemoryKv {
        if let Some(t) = self.pipeline_task.take() {
            t.abort();
            let _ = t.await;
        }
        drop(self.writer.take());
        if let Some(t) = self.writer_task.take() {
            let _ = tokio::time::timeout(WAIT, t)
                .await
                .expect("the writer stops once its handles are gone");
        }
        // An engine step already on a blocking thread finishes on its own.
        let mut kv = self.kv;
        let deadline = Instant::now() + WAIT;
        loop {
            match Arc::try_unwrap(kv) {
                Ok(store) => return store.into_inner(),
                Err(back) => kv = back,
            }
            assert!(
                Instant::now() < deadline,
                "the store is still held by the stopped node"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A clean stop: the pipeline finishes and the Writer drains.
    async fn stop(mut self) -> Arc<Store> {
        self.pipeline.shutdown();
        drop(self.writer.take());
        self.writer_ended().await.unwrap();
        self.pipeline_ended().await.unwrap();
        self.kv
    }
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn assert_consistent(kv: &impl Kv, when: &str) {
    assert_eq!(
        check_invariants(&kv.snapshot()).unwrap(),
        vec![],
        "invariants {when}"
    );
}

/// The store after every hook is delivered: nothing pending, claimed or laned.
fn assert_drained(kv: &impl Kv, delivered_total: i64) {
    assert_consistent(kv, "at the end");
    for f in [
        CounterField::Pending,
        CounterField::InFlight,
        CounterField::Lanes,
        CounterField::LaneMembers,
        CounterField::Bytes,
    ] {
        assert_eq!(counter(kv, TenantOrd::NODE, f).unwrap(), 0, "{f:?}");
    }
    assert_eq!(
        counter(kv, TENANT, CounterField::DeliveredTotal).unwrap(),
        delivered_total
    );
}

/// Whether `b` puts the envelope of `seq` (the Writer's commit of that hook).
fn puts_envelope(b: &Batch, seq: Seq) -> bool {
    let key = hook_key(TENANT, seq);
    b.ops()
        .iter()
        .any(|op| matches!(op, Op::Put { cf: Cf::Hooks, key: k, .. } if k[..] == key[..]))
}

/// Whether `b` deletes the delivery row of `seq` (its delivered outcome: the
/// pipeline's flush of it, with its lane's release ops).
fn delivers(b: &Batch, seq: Seq) -> bool {
    let key = delivery_key(TENANT, seq, SinkIx(0));
    b.ops()
        .iter()
        .any(|op| matches!(op, Op::Delete { cf: Cf::Deliveries, key: k } if k[..] == key[..]))
}

fn owned(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// A failed commit of an ingest group: the request gets `WriteError::Store`,
/// the Writer stops with the engine's error, a later request is refused, the
/// failed hook left nothing (no envelope, no seq taken), and after a restart
/// on the same store every hook answered `Committed` is delivered in lane
/// order; the provider's retry of the failed one is a new hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_ingest_commit_is_answered_with_an_error_and_leaves_nothing() {
    let log = Arc::new(Log::default());
    let kv = Arc::new(FaultKv::new(MemoryKv::new()));
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .unwrap();
    let mut node = start(kv, &log, &[]);
    for b in ["k-0", "k-1", "k-2"] {
        node.commit(b, Some("k")).await;
    }
    // Their outcomes committed, so the failure below meets no flush of them.
    until("k-0..k-2 delivered", || {
        counter(&*node.kv, TENANT, CounterField::DeliveredTotal).unwrap() == 3
    })
    .await;
    node.kv.fail_write_where(|b| puts_envelope(b, Seq(4)));
    let err = node.ingest("k-3", Some("k")).await.unwrap_err();
    assert!(
        matches!(err, WriteError::Store(ref m) if m.to_string().contains("injected write failure")),
        "{err:?}"
    );
    let ended = node.writer_ended().await.unwrap_err();
    assert!(
        matches!(ended, EngineError::Backend { op: "write", .. }),
        "{ended}"
    );
    assert_eq!(
        node.ingest("k-4", Some("k")).await.unwrap_err(),
        WriteError::Stopped,
        "the Writer stopped"
    );
    assert!(
        node.kv
            .get(Cf::Hooks, &hook_key(TENANT, Seq(4)))
            .unwrap()
            .is_none(),
        "the failed commit wrote its envelope"
    );
    assert_eq!(seq_high_water(&*node.kv).unwrap(), Seq(3));
    assert_consistent(&*node.kv, "after the failed commit");
    let kv = node.crash().await;

    let node = start(Arc::new(FaultKv::new(kv)), &log, &[]);
    // The provider retries the refused hook: a new hook under the next seq
    // (its dedupe record was never written), then another.
    assert_eq!(node.commit("k-3", Some("k")).await, Seq(4));
    assert_eq!(node.commit("k-4", Some("k")).await, Seq(5));
    until("every committed hook delivered", || {
        log.delivered().len() == 5
    })
    .await;
    let kv = node.stop().await;
    assert_eq!(
        log.bodies_of("k"),
        owned(&["k-0", "k-1", "k-2", "k-3", "k-4"]),
        "each once, in order"
    );
    assert_eq!(*log.violations.lock().unwrap(), Vec::<String>::new());
    assert_drained(&*kv, 5);
}

/// A failed sync of an ingest group (its batch was written, not made
/// durable): the request gets `WriteError::Store`, the Writer stops; the
/// groups a successful sync covered keep their `Committed`. Whether the
/// unsynced hook survives is the engine's business (here it does, as after a
/// process crash on a real one): the provider's retry of it is then a dedupe
/// hit naming its seq, and it is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_ingest_sync_is_answered_with_an_error_and_the_acknowledged_hooks_are_kept() {
    let log = Arc::new(Log::default());
    let kv = Arc::new(FaultKv::new(MemoryKv::new()));
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .unwrap();
    let mut node = start(kv, &log, &[]);
    for b in ["k-0", "k-1"] {
        node.commit(b, Some("k")).await;
    }
    node.commit("u-0", None).await;
    until("k-0, k-1 and u-0 delivered", || {
        counter(&*node.kv, TENANT, CounterField::DeliveredTotal).unwrap() == 3
    })
    .await;
    // Only the Writer syncs (the pipeline's commits are Buffered): the next
    // sync is the one of k-2's group.
    node.kv.fail_next_syncs(1);
    let err = node.ingest("k-2", Some("k")).await.unwrap_err();
    assert!(
        matches!(err, WriteError::Store(ref m) if m.to_string().contains("injected sync failure")),
        "{err:?}"
    );
    let ended = node.writer_ended().await.unwrap_err();
    assert!(
        matches!(ended, EngineError::Backend { op: "sync", .. }),
        "{ended}"
    );
    assert_eq!(
        node.ingest("k-3", Some("k")).await.unwrap_err(),
        WriteError::Stopped
    );
    assert_consistent(&*node.kv, "after the failed sync");
    let kv = node.crash().await;

    let node = start(Arc::new(FaultKv::new(kv)), &log, &[]);
    assert_eq!(
        node.ingest("k-2", Some("k")).await.unwrap(),
        Ingested::Duplicate(Seq(4)),
        "the retry of the unsynced hook"
    );
    assert_eq!(node.commit("k-3", Some("k")).await, Seq(5));
    until("every hook delivered", || {
        log.delivered().is_superset(
            &owned(&["k-0", "k-1", "k-2", "k-3", "u-0"])
                .into_iter()
                .collect(),
        )
    })
    .await;
    let kv = node.stop().await;
    // k-2 may have gone out before its failed sync (a row is visible once
    // written), and as a recovered head again after the crash; nothing else
    // repeats.
    let k = log.bodies_of("k");
    let mut once = k.clone();
    once.dedup();
    assert_eq!(once, owned(&["k-0", "k-1", "k-2", "k-3"]), "lane k: {k:?}");
    assert_eq!(k.iter().filter(|b| *b != "k-2").count(), 3, "lane k: {k:?}");
    assert_eq!(*log.violations.lock().unwrap(), Vec::<String>::new());
    assert_drained(&*kv, 5);
}

/// ADR 0004 section 4.5, a failed flush: the sink took lane a's head (its
/// call answered `Ok`) and the batch that commits the outcome and promotes
/// the next member fails. The pipeline stops with the store's error (the
/// node's crash path); the lane has not advanced: no member of it went out,
/// its head is still claimed, and the Writer, poisoned, acknowledges
/// nothing more. After a restart on the same store the head goes out again
/// (a first attempt, ADR 4.7), then a's members in order, each once; the
/// other lane and the unordered hooks, whose outcomes committed before, are
/// not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_flush_after_the_sink_took_a_head_holds_its_lane_until_the_restart_releases_it() {
    let log = Arc::new(Log::default());
    let kv = Arc::new(FaultKv::new(MemoryKv::new()));
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .unwrap();
    let mut node = start(kv, &log, &["a-0"]);
    let head = node.commit("a-0", Some("a")).await;
    node.kv.fail_write_where(move |b| delivers(b, head));
    until("a-0 in its call", || !log.bodies_of("a").is_empty()).await;
    for b in ["a-1", "a-2", "a-3", "a-4"] {
        node.commit(b, Some("a")).await;
    }
    for b in ["b-0", "b-1", "b-2"] {
        node.commit(b, Some("b")).await;
    }
    for b in ["u-0", "u-1"] {
        node.commit(b, None).await;
    }
    until(
        "lane b and the unordered hooks delivered and committed",
        || counter(&*node.kv, TENANT, CounterField::DeliveredTotal).unwrap() == 5,
    )
    .await;
    assert!(
        node.kv.write_choice_pending(),
        "a write that was not a-0's outcome failed"
    );
    // The sink answers Ok for a-0; the flush of that outcome fails.
    node.open.send_replace(true);
    let err = node.pipeline_ended().await.unwrap_err();
    assert!(
        matches!(
            err,
            PipelineError::Store(EngineError::Backend { op: "write", .. })
        ),
        "{err}"
    );
    assert!(!node.kv.write_choice_pending());
    // The lane did not advance: a-0 went out once, no member did.
    assert_eq!(log.bodies_of("a"), owned(&["a-0"]));
    assert!(log.delivered().contains("a-0"), "the sink accepted a-0");
    let kv = &*node.kv;
    assert_eq!(
        counter(kv, TENANT, CounterField::InFlight).unwrap(),
        1,
        "a-0 is still claimed"
    );
    assert_eq!(
        counter(kv, TENANT, CounterField::Lanes).unwrap(),
        1,
        "a-0 is still lane a's head"
    );
    assert_eq!(counter(kv, TENANT, CounterField::LaneMembers).unwrap(), 4);
    assert_eq!(
        counter(kv, TENANT, CounterField::DeliveredTotal).unwrap(),
        5
    );
    assert_consistent(kv, "after the failed flush");
    // The handle is poisoned: nothing more is acknowledged, and the Writer
    // stops at its next commit.
    let err = node.ingest("a-5", Some("a")).await.unwrap_err();
    assert!(
        matches!(err, WriteError::Store(ref m) if m.to_string().contains("poisoned") && m.to_string().contains("injected write failure")),
        "{err:?}"
    );
    let ended = node.writer_ended().await.unwrap_err();
    assert!(matches!(ended, EngineError::Poisoned { .. }), "{ended}");
    let kv = node.crash().await;

    let node = start(Arc::new(FaultKv::new(kv)), &log, &[]);
    node.commit("a-5", Some("a")).await;
    until("lane a delivered", || log.delivered().len() == 11).await;
    let kv = node.stop().await;
    let calls = log.calls.lock().unwrap().clone();
    assert_eq!(
        log.bodies_of("a"),
        owned(&["a-0", "a-0", "a-1", "a-2", "a-3", "a-4", "a-5"]),
        "the head again, then its members, each once"
    );
    let again = calls.iter().filter(|c| c.1 == "a-0").nth(1).unwrap();
    assert_eq!(
        again.2, 1,
        "the recovered head goes out as a first attempt (ADR 0004 4.7)"
    );
    assert_eq!(
        log.bodies_of("b"),
        owned(&["b-0", "b-1", "b-2"]),
        "lane b: its outcomes were committed, nothing again"
    );
    let unordered: Vec<&str> = calls
        .iter()
        .filter(|c| c.0.is_none())
        .map(|c| c.1.as_str())
        .collect();
    assert_eq!(unordered.len(), 2, "{unordered:?}");
    assert_eq!(*log.violations.lock().unwrap(), Vec::<String>::new());
    assert_drained(&*kv, 11);
}

/// The same failed flush with a transient fault (the store is not poisoned):
/// the pipeline still stops on it (a failed flush is never retried in
/// place: its release ops are rebuilt from the store by the next run), the
/// Writer goes on acknowledging hooks, which join the lane behind the
/// unreleased head; a new pipeline over the same store sends the head again
/// and then every member in order, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_flush_failure_holds_the_lane_while_ingest_goes_on() {
    let log = Arc::new(Log::default());
    let kv = Arc::new(FaultKv::transient(MemoryKv::new()));
    kv.write(ankusa_queue::init_store(), Durability::Sync)
        .unwrap();
    let mut node = start(kv, &log, &["a-0"]);
    let head = node.commit("a-0", Some("a")).await;
    node.kv.fail_write_where(move |b| delivers(b, head));
    until("a-0 in its call", || !log.bodies_of("a").is_empty()).await;
    node.commit("a-1", Some("a")).await;
    node.open.send_replace(true);
    let err = node.pipeline_ended().await.unwrap_err();
    assert!(
        matches!(
            err,
            PipelineError::Store(EngineError::Backend { op: "write", .. })
        ),
        "{err}"
    );
    // Not poisoned: the Writer goes on.
    node.commit("a-2", Some("a")).await;
    assert_eq!(
        log.bodies_of("a"),
        owned(&["a-0"]),
        "a member went out behind an unreleased head"
    );
    assert_consistent(&*node.kv, "after the failed flush");
    let (task, handle, open) = start_pipeline(&node.kv, &log, &[], node.writer());
    node.pipeline_task = Some(task);
    node.pipeline = handle;
    node.open = open;
    node.commit("a-3", Some("a")).await;
    until("lane a delivered", || log.bodies_of("a").len() == 5).await;
    let kv = node.stop().await;
    assert_eq!(
        log.bodies_of("a"),
        owned(&["a-0", "a-0", "a-1", "a-2", "a-3"])
    );
    assert_eq!(*log.violations.lock().unwrap(), Vec::<String>::new());
    assert_drained(&*kv, 4);
}
