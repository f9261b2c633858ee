//! The bench gate of ADR 0004 (Consequences; docs/design.md section 2,
//! "Operation counts"): engine operations per hook on the ingest path (the
//! Writer) and the dispatch path (the dispatcher's steps) for (a) no ordered
//! sink, with and without an idle second source in the tenant, and with the
//! attempt log off (docs/design.md section 3, "The attempt log"), (b) one
//! ordered source over many keys, (c) one hot key, compared
//! exactly with the checked-in baseline `pipeline/gate/baseline.txt`. Any
//! change fails: an increase is a regression to fix; a decrease is recorded
//! by running `ANKUSA_GATE_BLESS=1 cargo test -p ankusa-pipeline gate` and
//! committing the new baseline with the change that earned it.
//!
//! The counts are exact (the memory engine's [`OpStats`]) and do not depend
//! on timing: hooks are ingested one at a time (one group commit each), and
//! the dispatcher is stepped by hand, every call answering `Ok` before the
//! next step, on a frozen clock. Timings are the load tool's business
//! (`benches/load/`), never this test's.

use std::fmt::Write as _;
use std::sync::Arc;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Kv, OpStats, Read};
use ankusa_keys::{CounterField, Envelope, SinkIx, SourceId, TenantOrd};
use ankusa_queue::writer::{IngestRequest, Writer, WriterConfig};
use ankusa_queue::{NewRow, check_invariants, lanes};
use ankusa_sinks::{DeliveryCtx, Outcome, Sink};
use async_trait::async_trait;

use crate::{BreakerPolicy, DispatchConfig, Pipeline, RetryPolicy, Route, Routes, counter};

const TENANT: TenantOrd = TenantOrd(1);
const SOURCE: SourceId = SourceId(1);
/// The frozen clock of the gate (and of the break-it checks), unix ms.
pub(crate) const CLOCK_MS: u64 = 1_780_000_000_000;
/// Hooks per case.
const HOOKS: u64 = 512;
/// The body of every hook: 2 KiB, as in the load runs.
const BODY_BYTES: usize = 2048;

/// A sink the gate (and the break-it checks) never call: the steps answer
/// every call themselves.
pub(crate) struct Answered;

#[async_trait]
impl Sink for Answered {
    async fn deliver(&self, _: &Envelope, _: &DeliveryCtx) -> Outcome {
        Outcome::Ok
    }
    fn kind(&self) -> &'static str {
        "gate"
    }
}

/// One case: `keys` ordering keys of an ordered sink (`None`: unordered);
/// `idle_sibling`: the tenant has a second source, with a sink of its own, that
/// gets no hooks (in a load run such an entry, never saturated, made every
/// visit read 8 pages and 125 envelopes per hook delivered); `attempt_log`:
/// the row's attempt log is kept (`node.attempt_log.enabled`, docs/design.md
/// section 3, "The attempt log"). The calls answer `Ok` with no answer to
/// keep (as a broker sink does), so a kept attempt costs its ?L entry's
/// bytes and no operation: an HTTP answer adds its headers and body.
struct Case {
    name: &'static str,
    keys: Option<u64>,
    idle_sibling: bool,
    attempt_log: bool,
}

const CASES: [Case; 5] = [
    Case {
        name: "unordered",
        keys: None,
        idle_sibling: false,
        attempt_log: true,
    },
    Case {
        name: "unordered_idle_sibling",
        keys: None,
        idle_sibling: true,
        attempt_log: true,
    },
    Case {
        name: "ordered_1000_keys",
        keys: Some(1000),
        idle_sibling: false,
        attempt_log: true,
    },
    Case {
        name: "one_hot_key",
        keys: Some(1),
        idle_sibling: false,
        attempt_log: true,
    },
    Case {
        name: "unordered_no_attempt_log",
        keys: None,
        idle_sibling: false,
        attempt_log: false,
    },
];

/// The idle sibling source of [`Case::idle_sibling`].
const SIBLING: SourceId = SourceId(2);

fn request(n: u64, keys: Option<u64>) -> IngestRequest {
    let envelope = Envelope {
        source: SOURCE,
        received_at_ms: CLOCK_MS,
        method: "POST".into(),
        path: "/hooks/gate".into(),
        query: None,
        headers: vec![(b"content-type".to_vec(), b"application/json".to_vec())],
        body: vec![b'x'; BODY_BYTES],
        dedupe_key: None,
        idempotency_key: n.to_be_bytes().repeat(2).try_into().expect("16 bytes"),
        replay_of: None,
    };
    let lane = keys.map(|k| {
        let key = format!("entity-{}", n % k);
        lanes::assign(SinkIx(0), SOURCE, Some(key.as_bytes()))
    });
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

/// Ingests and dispatches the case's hooks; returns the engine operations of
/// each path and the dispatcher's tenant visits.
async fn run(case: &Case) -> (OpStats, OpStats, u64) {
    let kv = Arc::new(MemoryKv::new());
    let (writer, handle) =
        Writer::new(Arc::clone(&kv), WriterConfig::default(), || CLOCK_MS).expect("writer");
    // Wired as `ankusa serve` wires them: the Writer names the lanes it puts
    // members into, and the dispatcher sweeps those (docs/design.md section 5,
    // "Lane sweep").
    let lane_rows = handle.lane_rows();
    let task = tokio::spawn(writer.run());
    let before = kv.stats();
    for n in 0..HOOKS {
        handle.ingest(request(n, case.keys)).await.expect("ingest");
    }
    let ingest = kv.stats() - before;
    drop(handle);
    task.await.expect("writer task").expect("writer");

    let mut routes = Routes::default();
    routes.sinks.insert(
        (SOURCE, SinkIx(0)),
        Route {
            sink: Arc::new(Answered),
            sink_name: "gate".into(),
            source_name: "gate".into(),
        },
    );
    routes.tenants.insert(TENANT, "gate".into());
    routes.source_tenants.insert(SOURCE, TENANT);
    if case.idle_sibling {
        routes.sinks.insert(
            (SIBLING, SinkIx(0)),
            Route {
                sink: Arc::new(Answered),
                sink_name: "idle".into(),
                source_name: "idle".into(),
            },
        );
        routes.source_tenants.insert(SIBLING, TENANT);
    }
    let (pipeline, _handle) = Pipeline::new(
        Arc::clone(&kv),
        routes,
        DispatchConfig::default(),
        RetryPolicy::default(),
        BreakerPolicy::default(),
        || CLOCK_MS,
    );
    let mut d = pipeline
        .lane_rows(lane_rows)
        .attempt_log(crate::AttemptLogConfig {
            enabled: case.attempt_log,
            ..crate::AttemptLogConfig::default()
        })
        .dispatcher;
    d.set_low_water_reset(std::time::Duration::MAX);
    d.start_up().expect("start");
    let before = kv.stats();
    let mut done = Vec::new();
    let mut steps = 0;
    loop {
        d.step(Vec::new(), std::mem::take(&mut done), true)
            .expect("step");
        let calls = d.take_calls();
        if calls.is_empty() {
            break;
        }
        done = calls.into_iter().map(|c| c.finish(Outcome::Ok)).collect();
        steps += 1;
        assert!(
            steps <= 10 * HOOKS,
            "{}: the dispatcher does not converge",
            case.name
        );
    }
    let dispatch = kv.stats() - before;
    let visits = d.visits();
    assert_eq!(
        counter(&*kv, TenantOrd::NODE, CounterField::Pending).expect("counter"),
        0,
        "{}: every hook delivered",
        case.name
    );
    let violations = check_invariants(&*kv).expect("check");
    assert!(violations.is_empty(), "{}: {violations:?}", case.name);
    // One attempt kept per delivered hook, or none.
    let logged = kv
        .scan(
            ankusa_engine::Cf::Index,
            &ankusa_keys::tenant_range(ankusa_keys::Family::AttemptLog, TENANT),
            ankusa_engine::Direction::Forward,
            usize::try_from(HOOKS).expect("small") + 1,
        )
        .expect("scan")
        .len() as u64;
    assert_eq!(
        logged,
        if case.attempt_log { HOOKS } else { 0 },
        "{}: the attempt log",
        case.name
    );
    (ingest, dispatch, visits)
}

/// `case path metric per_1000_hooks` lines, the baseline's format; the
/// dispatch path adds its tenant visits per 1000 hooks (`visits`) and the
/// batches it wrote per 1000 visits (`batches_per_1000_visits`: the visits'
/// writes, the lane sweeps' and the committer's, over the visits), so a
/// change in how many writes a visit makes shows here.
fn table(rows: &[(&str, &str, OpStats, Option<u64>)]) -> String {
    let mut out = String::from(
        "# case path metric per_1000_hooks (pipeline/src/tests/gate.rs; exact, never timings; \
         batches_per_1000_visits is per 1000 visits)\n",
    );
    for (case, path, s, visits) in rows {
        for (metric, v) in [
            ("gets", s.gets),
            ("seeks", s.seeks),
            ("entries_scanned", s.entries_scanned),
            ("batches", s.batches),
            ("bytes_written", s.bytes_written),
        ] {
            let _ = writeln!(out, "{case} {path} {metric} {}", v * 1000 / HOOKS);
        }
        if let Some(visits) = visits {
            let _ = writeln!(out, "{case} {path} visits {}", visits * 1000 / HOOKS);
            let _ = writeln!(
                out,
                "{case} {path} batches_per_1000_visits {}",
                s.batches * 1000 / (*visits).max(1)
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_operations_per_hook_match_the_baseline() {
    let mut rows = Vec::new();
    for case in &CASES {
        let (ingest, dispatch, visits) = run(case).await;
        rows.push((case.name, "ingest", ingest, None));
        rows.push((case.name, "dispatch", dispatch, Some(visits)));
    }
    let measured = table(&rows);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("gate/baseline.txt");
    if std::env::var_os("ANKUSA_GATE_BLESS").is_some() {
        std::fs::write(&path, &measured).expect("write the baseline");
        return;
    }
    let baseline = std::fs::read_to_string(&path).expect("pipeline/gate/baseline.txt");
    let parse = |t: &str| -> Vec<(String, u64)> {
        t.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').expect("`case path metric value`");
                (k.to_owned(), v.parse().expect("a number"))
            })
            .collect()
    };
    let (want, got) = (parse(&baseline), parse(&measured));
    let mut report = String::new();
    for ((k, w), (k2, g)) in want.iter().zip(&got) {
        assert_eq!(
            k, k2,
            "the baseline lists other cases or metrics: bless it again"
        );
        if g != w {
            let what = if g > w {
                "MORE (a regression)"
            } else {
                "fewer (bless the new baseline)"
            };
            let _ = writeln!(report, "{k}: {g} per 1000 hooks, baseline {w}: {what}");
        }
    }
    assert_eq!(
        want.len(),
        got.len(),
        "the baseline lists other cases or metrics: bless it again"
    );
    assert!(
        report.is_empty(),
        "engine operations per hook differ from pipeline/gate/baseline.txt:\n{report}\
         an increase must be fixed; a decrease is recorded with \
         `ANKUSA_GATE_BLESS=1 cargo test -p ankusa-pipeline gate` (commit the new baseline)"
    );
}
