//! The job engine without the HTTP layer (docs/design.md section 5, "Admin
//! API"): a job is checked by its kind, created, run to its end by the
//! runner's task, one committed step at a time; a refused request is a typed
//! [`JobError`] that says why.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ankusa_admin::dlq::DlqFilter;
use ankusa_admin::jobs::{self, Job, JobKind, JobState};
use ankusa_admin::{Context, JobError};
use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Durability, Kv, Read};
use ankusa_keys::{CounterField, Envelope, Seq, SinkIx, TenantOrd, counter_key};
use ankusa_queue::{Hook, NewRow};

pub(crate) const NOW: u64 = 1_700_000_000_000;

fn commit(kv: &MemoryKv, b: Batch) {
    kv.write(b, Durability::Sync).expect("commit");
}

/// The demo's store (tenant `default`, source `demo`) with `n` hooks of the
/// source, one row each for sink 0, dead-lettered.
pub(crate) fn store_with_dead_letters(n: u64) -> (MemoryKv, ankusa_queue::Registry) {
    store_with_dead_letters_of(n, &[0])
}

/// [`store_with_dead_letters`] with one row per hook for each of `sinks`
/// (sink entry indexes of source `demo`; the demo configures only 0).
fn store_with_dead_letters_of(n: u64, sinks: &[u16]) -> (MemoryKv, ankusa_queue::Registry) {
    let kv = MemoryKv::new();
    commit(&kv, ankusa_queue::init_store());
    let (b, registry) = ankusa_queue::register(&kv, ["default"], ["demo"]).expect("register");
    commit(&kv, b);
    let ord = registry.tenants["default"];
    let source = registry.sources["demo"];
    for seq in 1..=n {
        let env = Envelope {
            source,
            received_at_ms: NOW,
            method: "POST".into(),
            path: "/hooks/demo".into(),
            query: None,
            headers: Vec::new(),
            body: b"{}".to_vec(),
            dedupe_key: None,
            idempotency_key: [seq as u8; 16],
            replay_of: None,
        };
        let mut b = Batch::new();
        let hook = Hook {
            tenant: ord,
            seq: Seq(seq),
            envelope: &env,
            dedupe_expires_at_ms: 0,
        };
        let rows: Vec<NewRow> = sinks
            .iter()
            .map(|&s| NewRow {
                sink: SinkIx(s),
                lane: None,
            })
            .collect();
        ankusa_queue::new_ops(&mut b, &hook, &rows, NOW);
        commit(&kv, b);
    }
    let mut cursor = None;
    loop {
        let page =
            ankusa_queue::dead_letter_source(&kv, ord, source, "gone", cursor.as_ref(), 1000, NOW)
                .expect("dead-letter");
        commit(&kv, page.batch);
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    (kv, registry)
}

pub(crate) fn context(kv: MemoryKv, registry: ankusa_queue::Registry) -> Arc<Context<MemoryKv>> {
    let mut ctx = Context::new(
        Arc::new(kv),
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(ankusa_config::Config::default_demo()),
        registry,
    );
    ctx.clock = || NOW + 1_000;
    Arc::new(ctx)
}

async fn create(
    ctx: &Arc<Context<MemoryKv>>,
    kind: JobKind,
    filter: DlqFilter,
    sinks: Option<Vec<String>>,
) -> Result<Job, JobError> {
    let ctx = Arc::clone(ctx);
    tokio::task::spawn_blocking(move || jobs::create(&ctx, kind, filter, sinks))
        .await
        .expect("create")
}

/// The job once it has left `running` (its task takes a step every
/// `JOB_STEP_PAUSE`; the loop only waits for it, it asserts nothing about
/// time).
async fn finished(ctx: &Context<MemoryKv>, id: u64) -> Job {
    loop {
        let job = jobs::read_job(&*ctx.kv, id).expect("read").expect("job");
        if job.state != JobState::Running {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn counter(ctx: &Context<MemoryKv>, ord: TenantOrd, field: CounterField) -> i64 {
    ctx.kv.counter(&counter_key(ord, field)).expect("counter")
}

/// A revive job by filter revives every dead letter it takes and ends
/// `done`; the store stays consistent; a second job finds none; a finished
/// job cannot be cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revive_job_revives_every_dead_letter_of_its_filter() {
    let (kv, registry) = store_with_dead_letters(300);
    let ctx = context(kv, registry);
    let ord = ctx.registry.load().tenants["default"];
    assert_eq!(counter(&ctx, ord, CounterField::Dead), 300);
    let filter = DlqFilter {
        tenant: Some("default".into()),
        ..DlqFilter::default()
    };
    let job = create(&ctx, JobKind::Revive, filter.clone(), None)
        .await
        .expect("created");
    assert_eq!(
        (job.id, job.state, job.total),
        (1, JobState::Running, Some(300))
    );
    let job = tokio::time::timeout(Duration::from_secs(60), finished(&ctx, job.id))
        .await
        .expect("the job ends");
    assert_eq!(
        (job.state, job.done, job.examined, job.skipped),
        (JobState::Done, 300, 300, 0)
    );
    assert_eq!(job.cursor, None);
    assert_eq!(counter(&ctx, ord, CounterField::Dead), 0);
    assert_eq!(counter(&ctx, ord, CounterField::Pending), 300);
    assert_eq!(
        ankusa_queue::check_invariants(&*ctx.kv).expect("check"),
        vec![]
    );

    let again = create(&ctx, JobKind::Drop, filter, None)
        .await
        .expect("created");
    assert_eq!((again.id, again.total), (2, Some(0)));
    let again = tokio::time::timeout(Duration::from_secs(60), finished(&ctx, again.id))
        .await
        .expect("the job ends");
    assert_eq!((again.state, again.done), (JobState::Done, 0));

    let c = Arc::clone(&ctx);
    let refused = tokio::task::spawn_blocking(move || jobs::cancel(&c, 1))
        .await
        .expect("cancel");
    assert_eq!(
        refused.unwrap_err(),
        JobError::Conflict("job 1 is done: only a running job can be cancelled".into())
    );
}

/// A revive job skips the dead letters of a sink entry that is no longer
/// configured (a single revive refuses them: they would die again at once,
/// their reason lost) and counts them as skipped; a drop job takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revive_job_skips_rows_of_an_unconfigured_sink_entry_and_a_drop_takes_them() {
    let (kv, registry) = store_with_dead_letters_of(40, &[0, 3]);
    let ctx = context(kv, registry);
    let ord = ctx.registry.load().tenants["default"];
    assert_eq!(counter(&ctx, ord, CounterField::Dead), 80);
    let revive = create(&ctx, JobKind::Revive, DlqFilter::default(), None)
        .await
        .expect("created");
    let revive = tokio::time::timeout(Duration::from_secs(60), finished(&ctx, revive.id))
        .await
        .expect("the job ends");
    assert_eq!(
        (revive.state, revive.done, revive.examined, revive.skipped),
        (JobState::Done, 40, 80, 40)
    );
    assert_eq!(counter(&ctx, ord, CounterField::Dead), 40);
    assert_eq!(counter(&ctx, ord, CounterField::Pending), 40);
    let left =
        ankusa_admin::dlq::scan(&ctx, &DlqFilter::default(), &[], 1000, usize::MAX).expect("scan");
    assert_eq!(left.matched.len(), 40);
    assert!(left.matched.iter().all(|d| d.row.sink == SinkIx(3)));

    let drop = create(&ctx, JobKind::Drop, DlqFilter::default(), None)
        .await
        .expect("created");
    let drop = tokio::time::timeout(Duration::from_secs(60), finished(&ctx, drop.id))
        .await
        .expect("the job ends");
    assert_eq!(
        (drop.state, drop.done, drop.skipped),
        (JobState::Done, 40, 0)
    );
    assert_eq!(counter(&ctx, ord, CounterField::Dead), 0);
    assert_eq!(
        ankusa_queue::check_invariants(&*ctx.kv).expect("check"),
        vec![]
    );
}

/// What a kind does not take is refused before anything is stored, with a
/// message that names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_request_its_kind_does_not_take_is_refused() {
    let (kv, registry) = store_with_dead_letters(1);
    let ctx = context(kv, registry);
    let refused = [
        (
            JobKind::Replay,
            DlqFilter::default(),
            None,
            JobError::Invalid("a replay needs filter.source".into()),
        ),
        (
            JobKind::Revive,
            DlqFilter::default(),
            Some(vec!["deliveries".into()]),
            JobError::Invalid("sinks does not apply to a revive job (a replay's only)".into()),
        ),
        (
            JobKind::PurgeTenant,
            DlqFilter {
                tenant: Some("default".into()),
                source: Some("demo".into()),
                ..DlqFilter::default()
            },
            None,
            JobError::Invalid("filter.source does not apply to a purge_tenant job".into()),
        ),
        (
            JobKind::DropQuarantined,
            DlqFilter {
                tenant: Some("nobody".into()),
                ..DlqFilter::default()
            },
            None,
            JobError::NotFound("no tenant \"nobody\"".into()),
        ),
        (
            JobKind::Drop,
            DlqFilter {
                since_ms: Some(5),
                until_ms: Some(5),
                ..DlqFilter::default()
            },
            None,
            JobError::Invalid(
                "the time range is empty or inverted: since 5 is not before until 5".into(),
            ),
        ),
    ];
    for (kind, filter, sinks, want) in refused {
        assert_eq!(
            create(&ctx, kind, filter, sinks).await.unwrap_err(),
            want,
            "{kind:?}"
        );
    }
    assert!(jobs::read_job(&*ctx.kv, 1).expect("read").is_none());
}
