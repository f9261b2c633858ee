//! The Writer (docs/design.md section 5): the one task per node that assigns `seq` and
//! commits ingested hooks, several at a time (group commit), durably (the WAL
//! fsynced, as [`Durability::Sync`] promises) before any of them is
//! acknowledged.
//!
//! - Requests arrive on a bounded channel ([`WriterHandle::ingest`]); the task
//!   takes the first, then every request already waiting (up to
//!   [`WriterConfig::max_group_hooks`] / [`WriterConfig::max_group_bytes`]),
//!   builds one batch with [`crate::new_ops`] for each, the seq high-water mark
//!   in the same batch, writes it `Buffered`, and answers every request only
//!   after a [`Kv::sync`] that began after that write returned. The group
//!   commit is pipelined: while one sync runs, the next groups are collected
//!   and written, and the next sync covers all of them ([`Writer::run`]).
//! - Seq is assigned in arrival order and batches commit one after the other,
//!   so commit order is seq order, which is what lanes rely on (ADR 0004,
//!   Consequences). Nothing else assigns seq.
//! - Dedupe is decided here, where it cannot race: a hook whose dedupe key has
//!   an unexpired `?K` record (in the store, or earlier in the same group) is
//!   answered [`Ingested::Duplicate`] and writes nothing (docs/design.md section 10).
//! - A failed commit fails every request of the group with
//!   [`WriteError::Store`] and ends the task: the engine handle is poisoned and
//!   the node takes its crash path ([`Writer::run`] returns the error).
//! - Besides ingest it takes the other writes that must be serialised with
//!   ingest or with each other (docs/design.md section 5, "Quarantine" and
//!   "Retention"): a quarantined hook ([`WriterHandle::quarantine`]: it gets
//!   the next seq like any hook, takes no part in dedupe, and is committed
//!   `Sync` before the edge answers), the release and the drop of a
//!   quarantined hook ([`WriterHandle::release`], [`WriterHandle::drop_quarantined`]:
//!   one at a time per hook, so two releases cannot both build its rows), and
//!   a page of dedupe expiry ([`WriterHandle::expire_dedupe`]: the Writer is
//!   the only task that writes ?K, so a record it renews is never deleted by
//!   an expiry that read it before). Each joins the group it arrives in.
//! - An admin job's step ([`WriterHandle::job_step`], docs/design.md section
//!   5, "Replayer"): archive replays (each copy gets the next seq,
//!   [`crate::replay`]), quarantine releases and drops, and the job's new
//!   state, all in the group's one batch, the state put only if the stored
//!   state is still the one the step was built from (compare and set). A
//!   SIGKILL leaves either the step's hooks and the job's advanced cursor, or
//!   neither: a replay never copies a hook twice.
//! - A tenant's purge mark ([`WriterHandle::purge_mark`], docs/design.md
//!   section 5, "Purge a tenant"): from the group that commits the mark until
//!   the one that clears it, every ingest, quarantine, release, drop and
//!   replay of the tenant is refused ([`WriteError::TenantPurging`]), so
//!   nothing the Writer commits races the purge's pages. The marks the store
//!   holds are read at [`Writer::new`].
//!
//! This module needs tokio and is behind the `writer` feature, so the pure
//! builders of this crate stay usable without a runtime (the loom model).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use ankusa_engine::{Batch, Cf, Durability, EngineError, Kv, Read};
use ankusa_keys::meta::{decode_seq_high_water, encode_seq_high_water};
use ankusa_keys::{Envelope, LaneId, SEQ_HIGH_WATER_KEY, Seq, TenantOrd, dedupe_key};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::WriterMetrics;
use crate::{Cursor, Hook, NewRow, QueueError, new_ops};

/// Tuning of the Writer. Defaults suit a 2-core node.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Requests that may wait for the Writer before senders wait (the channel).
    pub queue_depth: usize,
    /// Most hooks in one group commit.
    pub max_group_hooks: usize,
    /// Most envelope bytes in one group commit.
    pub max_group_bytes: usize,
    /// How long a dedupe record lasts, milliseconds (a provider retry within it
    /// is a hit).
    pub dedupe_ttl_ms: u64,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            queue_depth: 1024,
            max_group_hooks: 256,
            max_group_bytes: 8 << 20,
            dedupe_ttl_ms: 7 * 24 * 3600 * 1000,
        }
    }
}

/// One hook to commit.
#[derive(Debug)]
pub struct IngestRequest {
    /// The tenant that owns it.
    pub tenant: TenantOrd,
    /// The envelope as it will be stored (after the store_headers policy), with
    /// its idempotency key and dedupe key already set.
    pub envelope: Envelope,
    /// One row per sink of the source (with its lane for an ordered sink).
    pub rows: Vec<NewRow>,
    /// How long the hook's dedupe record lasts, ms; `None` takes
    /// [`WriterConfig::dedupe_ttl_ms`]. Ignored without a dedupe key.
    pub dedupe_ttl_ms: Option<u64>,
}

/// What the Writer did with a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ingested {
    /// Committed durably under this seq.
    Committed(Seq),
    /// A dedupe hit: the hook first committed under this seq; nothing written.
    Duplicate(Seq),
}

/// What failed in the store, as [`WriteError::Store`] carries it: the
/// engine's error, or a record the Writer read that does not decode.
#[derive(Clone, Debug)]
pub enum StoreFailure {
    /// The engine failed a read, a commit or a sync (or a task running one
    /// ended without its result).
    Engine(EngineError),
    /// A dedupe record (`?K`) that does not decode.
    CorruptDedupe(ankusa_keys::ValueError),
    /// A failure of the store's reader outside the Writer, in its own words
    /// (the retention sweep's read of the registry).
    Other(Arc<dyn std::error::Error + Send + Sync>),
}

impl StoreFailure {
    /// The engine's error, when it is one.
    pub fn engine(&self) -> Option<&EngineError> {
        match self {
            StoreFailure::Engine(e) => Some(e),
            _ => None,
        }
    }
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreFailure::Engine(e) => e.fmt(f),
            StoreFailure::CorruptDedupe(e) => write!(f, "corrupt dedupe record: {e}"),
            StoreFailure::Other(e) => e.fmt(f),
        }
    }
}

/// Equal failures: the same engine error or record, or the same shared
/// cause of [`StoreFailure::Other`].
impl PartialEq for StoreFailure {
    fn eq(&self, other: &StoreFailure) -> bool {
        match (self, other) {
            (StoreFailure::Engine(a), StoreFailure::Engine(b)) => a == b,
            (StoreFailure::CorruptDedupe(a), StoreFailure::CorruptDedupe(b)) => a == b,
            (StoreFailure::Other(a), StoreFailure::Other(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for StoreFailure {}

impl From<EngineError> for StoreFailure {
    fn from(e: EngineError) -> StoreFailure {
        StoreFailure::Engine(e)
    }
}

/// Why a hook was not committed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    /// The store failed the commit (or an earlier one): nothing of the group is
    /// acknowledged. The edge answers 503.
    #[error("store failed: {0}")]
    Store(StoreFailure),
    /// The Writer has stopped (shutdown or an earlier store failure).
    #[error("the writer has stopped")]
    Stopped,
    /// A release or drop of a hook that is not quarantined (released or
    /// dropped already, or never held).
    #[error("hook {tenant}/{seq} is not quarantined")]
    NotQuarantined {
        /// The tenant.
        tenant: TenantOrd,
        /// The hook.
        seq: Seq,
    },
    /// A request the store's state refuses (a quarantined hook whose envelope
    /// is gone, a value that does not decode, a job step built from a job
    /// state that changed since): nothing was written for it.
    #[error("refused: {0}")]
    Refused(String),
    /// The tenant is being purged (docs/design.md section 5, "Purge a
    /// tenant"): nothing is committed for it until the purge ends. The edge
    /// answers 503 with a Retry-After.
    #[error("tenant {tenant} is being purged")]
    TenantPurging {
        /// The tenant.
        tenant: TenantOrd,
    },
}

impl WriteError {
    fn of(e: QueueError) -> WriteError {
        match e {
            QueueError::NotQuarantined { tenant, seq } => {
                WriteError::NotQuarantined { tenant, seq }
            }
            QueueError::Engine(e) => WriteError::Store(e.into()),
            other => WriteError::Refused(other.to_string()),
        }
    }
}

/// A hook to hold in quarantine ([`WriterHandle::quarantine`]).
#[derive(Debug)]
pub struct QuarantineRequest {
    /// The tenant that owns it.
    pub tenant: TenantOrd,
    /// The envelope as it will be stored (after the store_headers policy). Its
    /// dedupe key, if any, is stored but not recorded (no ?K).
    pub envelope: Envelope,
    /// Why it is held, for operators (the ?Q value).
    pub reason: String,
}

/// What a page of dedupe expiry did ([`WriterHandle::expire_dedupe`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    /// Records deleted.
    pub deleted: usize,
    /// Where to continue; `None` when the tenant's ?K range is done.
    pub next: Option<Cursor>,
}

/// An admin job's new state, written in the batch of its step only if the
/// stored state is still `expect` (compare and set: a step built from a state
/// that changed since is refused, and writes nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobState {
    /// The job's key in `meta` (`keys::meta::job_key`).
    pub key: Vec<u8>,
    /// The stored value the step was built from; `None`: the key is absent.
    pub expect: Option<Vec<u8>>,
    /// The value to put.
    pub value: Vec<u8>,
}

/// One operation of an admin job step ([`WriterHandle::job_step`]).
#[derive(Clone, Debug)]
pub enum JobOp {
    /// Archive replay: a copy of a stored hook as a new hook of `tenant`
    /// ([`crate::replay`]: the next seq, no dedupe record). `envelope` is the
    /// stored one with `replay_of` set to the original's seq.
    Replay {
        /// The tenant.
        tenant: TenantOrd,
        /// The copy's envelope.
        envelope: Envelope,
        /// Its rows, resolved as at ingest for the chosen sinks.
        rows: Vec<NewRow>,
    },
    /// [`crate::release`] of quarantined hook `seq` with `rows`.
    Release {
        /// The tenant.
        tenant: TenantOrd,
        /// The hook.
        seq: Seq,
        /// Its rows.
        rows: Vec<NewRow>,
    },
    /// [`crate::drop_quarantined`] of quarantined hook `seq`.
    DropQuarantined {
        /// The tenant.
        tenant: TenantOrd,
        /// The hook.
        seq: Seq,
    },
}

impl JobOp {
    fn tenant(&self) -> TenantOrd {
        match self {
            JobOp::Replay { tenant, .. }
            | JobOp::Release { tenant, .. }
            | JobOp::DropQuarantined { tenant, .. } => *tenant,
        }
    }
}

/// A step of an admin job: its operations and its new state, one batch.
#[derive(Clone, Debug)]
pub struct JobStep {
    /// The job's new state (compare and set).
    pub state: JobState,
    /// What the step does, in order.
    pub ops: Vec<JobOp>,
}

type ReplyTo<T> = oneshot::Sender<Result<T, WriteError>>;

/// One request to the Writer.
enum Request {
    Ingest(IngestRequest, ReplyTo<Ingested>),
    Quarantine(QuarantineRequest, ReplyTo<Seq>),
    Release {
        tenant: TenantOrd,
        seq: Seq,
        rows: Vec<NewRow>,
        reply: ReplyTo<()>,
    },
    Drop {
        tenant: TenantOrd,
        seq: Seq,
        reply: ReplyTo<()>,
    },
    ExpireDedupe {
        tenant: TenantOrd,
        cursor: Option<Cursor>,
        limit: usize,
        reply: ReplyTo<Expired>,
    },
    JobStep(JobStep, ReplyTo<Vec<Seq>>),
    Adopt {
        tenant: TenantOrd,
        records: Vec<crate::handover::Record>,
        reply: ReplyTo<crate::handover::Adopted>,
    },
    PurgeMark {
        tenant: TenantOrd,
        job: Option<u64>,
        state: JobState,
        reply: ReplyTo<()>,
    },
}

impl Request {
    /// Body bytes it adds to a group.
    fn bytes(&self) -> usize {
        match self {
            Request::Ingest(r, _) => r.envelope.body.len(),
            Request::Quarantine(r, _) => r.envelope.body.len(),
            Request::Adopt { records, .. } => {
                records.iter().map(|(_, k, v)| k.len() + v.len()).sum()
            }
            Request::JobStep(step, _) => step
                .ops
                .iter()
                .map(|op| match op {
                    JobOp::Replay { envelope, .. } => envelope.body.len(),
                    _ => 0,
                })
                .sum(),
            _ => 0,
        }
    }
}

/// An answer waiting for the group's commit.
enum Answer {
    Ingest(ReplyTo<Ingested>, Ingested),
    Seq(ReplyTo<Seq>, Seq),
    Done(ReplyTo<()>),
    Expired(ReplyTo<Expired>, Expired),
    Seqs(ReplyTo<Vec<Seq>>, Vec<Seq>),
    Adopted(ReplyTo<crate::handover::Adopted>, crate::handover::Adopted),
}

impl Answer {
    fn send(self) {
        match self {
            Answer::Ingest(r, v) => drop(r.send(Ok(v))),
            Answer::Seq(r, v) => drop(r.send(Ok(v))),
            Answer::Done(r) => drop(r.send(Ok(()))),
            Answer::Expired(r, v) => drop(r.send(Ok(v))),
            Answer::Seqs(r, v) => drop(r.send(Ok(v))),
            Answer::Adopted(r, v) => drop(r.send(Ok(v))),
        }
    }

    fn fail(self, e: &WriteError) {
        match self {
            Answer::Ingest(r, _) => drop(r.send(Err(e.clone()))),
            Answer::Seq(r, _) => drop(r.send(Err(e.clone()))),
            Answer::Done(r) => drop(r.send(Err(e.clone()))),
            Answer::Expired(r, _) => drop(r.send(Err(e.clone()))),
            Answer::Seqs(r, _) => drop(r.send(Err(e.clone()))),
            Answer::Adopted(r, _) => drop(r.send(Err(e.clone()))),
        }
    }
}

/// The lanes the Writer put members (and their ?P markers) into since the
/// dispatcher last took them ([`WriterHandle::lane_rows`]; docs/design.md
/// section 5, "Lane sweep"). A hint, never the truth: the markers in the
/// store are, and a hint lost in a crash is covered by the full sweep the
/// dispatcher runs at start-up and periodically.
#[derive(Debug, Default)]
pub struct LaneRows {
    inner: Mutex<LaneRowsTaken>,
}

/// What [`LaneRows::take`] hands over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneRowsTaken {
    /// Some write may have put members into lanes it did not name (an admin
    /// job step), or more than [`LANE_ROWS_MAX`] lanes were named: sweep every
    /// marker of every tenant.
    pub all: bool,
    /// The `(tenant, lane)` pairs that got members, when not `all`.
    pub lanes: HashSet<(TenantOrd, LaneId)>,
}

/// Most lanes [`LaneRows`] names before it says "all" instead (about 2 MiB).
pub const LANE_ROWS_MAX: usize = 65_536;

impl LaneRows {
    /// Adds what one commit wrote: `all`, or members into `lanes`. Call after
    /// the commit returned, so a taker sees the members in the store.
    pub fn add(&self, all: bool, lanes: impl IntoIterator<Item = (TenantOrd, LaneId)>) {
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if all || inner.all {
            inner.all = true;
            inner.lanes.clear();
            return;
        }
        inner.lanes.extend(lanes);
        if inner.lanes.len() > LANE_ROWS_MAX {
            inner.all = true;
            inner.lanes.clear();
        }
    }

    /// Lanes named and not taken yet (0 once "all" was added).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .lanes
            .len()
    }

    /// Whether nothing was added since the last take (no lane, not "all").
    pub fn is_empty(&self) -> bool {
        let inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !inner.all && inner.lanes.is_empty()
    }

    /// Takes what was added since the last take (and leaves nothing).
    pub fn take(&self) -> LaneRowsTaken {
        std::mem::take(
            &mut *self
                .inner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// The sending side, cloned by every edge connection.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Request>,
    due_floor: Arc<AtomicU64>,
    lane_rows: Arc<LaneRows>,
    metrics: Arc<WriterMetrics>,
}

impl std::fmt::Debug for WriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterHandle").finish_non_exhaustive()
    }
}

impl WriterHandle {
    /// The lowest due time (unix ms) of the rows the Writer committed since
    /// the dispatcher last took it (`u64::MAX`: none): the Writer lowers it
    /// after each commit, the dispatcher swaps it out before each visit and
    /// lowers its low-water cursors to it (docs/design.md section 5,
    /// "Low-water cursor"): a group dates its rows before it commits, so a
    /// visit in between may have set a cursor above them.
    pub fn due_floor(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.due_floor)
    }

    /// Added to by the Writer after each commit that may have written lane
    /// members or their ?P markers: the lanes of an ingest's ordered rows and
    /// of a quarantine release, "all" for an admin job step. The dispatcher
    /// takes it before each pass and sweeps (ADR 0004 4.6) the named lanes
    /// with point reads, and every marker only when told "all" (or it swept a
    /// full budget last time, or a second has passed): docs/design.md section
    /// 5, "Lane sweep".
    pub fn lane_rows(&self) -> Arc<LaneRows> {
        Arc::clone(&self.lane_rows)
    }

    /// The Writer's group sizes and commit latencies (`/metrics`): the
    /// admin listener holds this, not the handle, so the Writer can stop.
    pub fn metrics(&self) -> Arc<WriterMetrics> {
        Arc::clone(&self.metrics)
    }

    async fn ask<T>(&self, make: impl FnOnce(ReplyTo<T>) -> Request) -> Result<T, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| WriteError::Stopped)?;
        rx.await.map_err(|_| WriteError::Stopped)?
    }

    /// Commits `req` and waits for the durable commit (or the dedupe answer).
    ///
    /// # Errors
    /// [`WriteError::Store`] when the commit failed; [`WriteError::Stopped`]
    /// when the Writer is gone.
    pub async fn ingest(&self, req: IngestRequest) -> Result<Ingested, WriteError> {
        self.ask(|reply| Request::Ingest(req, reply)).await
    }

    /// Holds a hook in quarantine (docs/design.md section 5, "Quarantine"): it gets
    /// the next seq, its envelope, archive entry and ?Q are committed `Sync`
    /// ([`crate::quarantine`]), and the call returns its seq after the commit.
    /// No dedupe check and no dedupe record.
    ///
    /// # Errors
    /// [`WriteError::Store`] when the commit failed; [`WriteError::Stopped`].
    pub async fn quarantine(&self, req: QuarantineRequest) -> Result<Seq, WriteError> {
        self.ask(|reply| Request::Quarantine(req, reply)).await
    }

    /// Releases quarantined hook `seq` of `tenant` with `rows` (resolved by the
    /// caller from the stored envelope, ADR 0004 section 2): [`crate::release`],
    /// built from the live store and committed `Sync` by the Writer, so two
    /// releases (or a release and a drop) of one hook are never both applied.
    /// The hook keeps its seq.
    ///
    /// # Errors
    /// [`WriteError::NotQuarantined`] when it is not (or no longer) held;
    /// [`WriteError::Refused`] when its envelope is gone; [`WriteError::Store`];
    /// [`WriteError::Stopped`].
    pub async fn release(
        &self,
        tenant: TenantOrd,
        seq: Seq,
        rows: Vec<NewRow>,
    ) -> Result<(), WriteError> {
        self.ask(|reply| Request::Release {
            tenant,
            seq,
            rows,
            reply,
        })
        .await
    }

    /// Drops quarantined hook `seq` of `tenant` ([`crate::drop_quarantined`]:
    /// its ?Q, envelope and archive entry), committed `Sync` by the Writer.
    ///
    /// # Errors
    /// [`WriteError::NotQuarantined`]; [`WriteError::Store`]; [`WriteError::Stopped`].
    pub async fn drop_quarantined(&self, tenant: TenantOrd, seq: Seq) -> Result<(), WriteError> {
        self.ask(|reply| Request::Drop { tenant, seq, reply }).await
    }

    /// One page (`limit` records examined) of dedupe expiry of `tenant`
    /// ([`crate::expire_dedupe`] at the Writer's clock), from `cursor`.
    ///
    /// # Errors
    /// [`WriteError::Store`]; [`WriteError::Stopped`].
    pub async fn expire_dedupe(
        &self,
        tenant: TenantOrd,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Expired, WriteError> {
        self.ask(|reply| Request::ExpireDedupe {
            tenant,
            cursor,
            limit,
            reply,
        })
        .await
    }

    /// Commits one step of an admin job (docs/design.md section 5, "Admin
    /// API" and "Replayer"): every operation of `step` and the job's new
    /// state in one `Sync` batch of the group, or nothing. Each replay gets
    /// the next seq (returned in operation order); releases and drops are
    /// built from the live store at commit time like
    /// [`WriterHandle::release`]. The state is put only if the stored one is
    /// still `step.state.expect`.
    ///
    /// # Errors
    /// [`WriteError::Refused`] when the job's state changed, or an operation
    /// cannot be built (a hook no longer quarantined is
    /// [`WriteError::NotQuarantined`]); [`WriteError::TenantPurging`];
    /// [`WriteError::Store`]; [`WriteError::Stopped`]. Nothing is written on
    /// an error.
    pub async fn job_step(&self, step: JobStep) -> Result<Vec<Seq>, WriteError> {
        self.ask(|reply| Request::JobStep(step, reply)).await
    }

    /// Stores a page of another node's remains of `tenant` (a cluster's
    /// hand-over, docs/design.md section 11: [`crate::handover::adopt`]),
    /// every hook under a new seq, committed `Sync` with the group.
    ///
    /// # Errors
    /// [`WriteError::Refused`] for a page [`crate::handover::adopt`] refuses
    /// (nothing is written); [`WriteError::TenantPurging`];
    /// [`WriteError::Store`]; [`WriteError::Stopped`].
    pub async fn adopt(
        &self,
        tenant: TenantOrd,
        records: Vec<crate::handover::Record>,
    ) -> Result<crate::handover::Adopted, WriteError> {
        self.ask(|reply| Request::Adopt {
            tenant,
            records,
            reply,
        })
        .await
    }

    /// Sets (`job: Some(id)`) or clears (`None`) the purge mark of `tenant`
    /// with the purge job's new `state` (compare and set), `Sync`, in one
    /// batch (docs/design.md section 5, "Purge a tenant"). From the commit
    /// that sets it, every request of the tenant is refused
    /// ([`WriteError::TenantPurging`]) until the commit that clears it.
    ///
    /// # Errors
    /// [`WriteError::Refused`] when the job's state changed;
    /// [`WriteError::Store`]; [`WriteError::Stopped`].
    pub async fn purge_mark(
        &self,
        tenant: TenantOrd,
        job: Option<u64>,
        state: JobState,
    ) -> Result<(), WriteError> {
        self.ask(|reply| Request::PurgeMark {
            tenant,
            job,
            state,
            reply,
        })
        .await
    }
}

/// The sync in flight ([`Writer::run`]).
type SyncJob = tokio::task::JoinHandle<Result<(), EngineError>>;

/// What woke the Writer's loop.
enum Next {
    Synced(Result<(), EngineError>),
    Request(Option<Request>),
}

/// A finished blocking task's result; a panic in it is a failed engine call.
fn joined(r: Result<Result<(), EngineError>, tokio::task::JoinError>) -> Result<(), EngineError> {
    r.unwrap_or_else(|e| {
        Err(EngineError::Backend {
            backend: "writer",
            op: "sync",
            kind: ankusa_engine::ErrorKind::Other,
            message: e.to_string(),
        })
    })
}

/// The Writer task's state. Build with [`Writer::new`], run with [`Writer::run`].
pub struct Writer<K: Kv> {
    kv: Arc<K>,
    cfg: WriterConfig,
    rx: mpsc::Receiver<Request>,
    next_seq: u64,
    clock: Box<dyn Fn() -> u64 + Send>,
    /// Tenants being purged: their requests are refused.
    purging: BTreeSet<TenantOrd>,
    /// [`WriterHandle::due_floor`].
    due_floor: Arc<AtomicU64>,
    /// [`WriterHandle::lane_rows`].
    lane_rows: Arc<LaneRows>,
    /// [`WriterHandle::metrics`].
    metrics: Arc<WriterMetrics>,
}

impl<K: Kv> std::fmt::Debug for Writer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("next_seq", &self.next_seq)
            .finish_non_exhaustive()
    }
}

impl<K: Kv> Writer<K> {
    /// A Writer over `kv`, resuming after the stored seq high-water mark, and the
    /// handle senders use. `clock` gives unix milliseconds (the runtime's clock;
    /// tests pass their own).
    ///
    /// # Errors
    /// The engine's error reading the high-water mark, a corrupt mark, or a
    /// store holding a hook above the mark (invariant 6: new hooks would
    /// overwrite it).
    pub fn new(
        kv: Arc<K>,
        cfg: WriterConfig,
        clock: impl Fn() -> u64 + Send + 'static,
    ) -> Result<(Writer<K>, WriterHandle), EngineError> {
        let high = seq_high_water(&*kv)?.0;
        // Invariant 6: seqs are given out from the mark up, so a store with a
        // hook above it would have that hook overwritten.
        match crate::check::seq_above_high_water(&*kv) {
            Ok(None) => {}
            Ok(Some(v)) => {
                return Err(EngineError::Corrupt {
                    what: v.to_string(),
                });
            }
            Err(crate::QueueError::Engine(e)) => return Err(e),
            Err(e) => {
                return Err(EngineError::Corrupt {
                    what: format!("reading the highest stored seq: {e}"),
                });
            }
        }
        let purging = crate::read_purges(&*kv)
            .map_err(|e| EngineError::Corrupt {
                what: format!("purge marks: {e}"),
            })?
            .into_keys()
            .collect();
        let (tx, rx) = mpsc::channel(cfg.queue_depth.max(1));
        let due_floor = Arc::new(AtomicU64::new(u64::MAX));
        let lane_rows = Arc::new(LaneRows::default());
        let metrics = Arc::new(WriterMetrics::default());
        Ok((
            Writer {
                kv,
                cfg,
                rx,
                next_seq: high + 1,
                clock: Box::new(clock),
                purging,
                due_floor: Arc::clone(&due_floor),
                lane_rows: Arc::clone(&lane_rows),
                metrics: Arc::clone(&metrics),
            },
            WriterHandle {
                tx,
                due_floor,
                lane_rows,
                metrics,
            },
        ))
    }

    /// Runs until every [`WriterHandle`] is dropped (returns `Ok` once every
    /// written group is synced and answered) or a commit or sync fails
    /// (returns the error after failing every request not yet answered).
    ///
    /// The group commit is pipelined (docs/design.md section 5, "Writer"):
    /// a group's batch is written `Buffered`, then one [`Kv::sync`] at a time
    /// runs off the task while the next groups are collected and written. A
    /// sync answers the groups written before it began, never a group written
    /// during it; groups are written one after the other, so commit order is
    /// still seq order.
    ///
    /// # Errors
    /// The engine error of the failed commit or sync.
    pub async fn run(mut self) -> Result<(), EngineError> {
        // Groups written since the sync in flight began: the next sync's.
        let mut written: Vec<Answer> = Vec::new();
        // When each group written since then began its write (the commit
        // latency of `WriterMetrics`).
        let mut written_at: Vec<Instant> = Vec::new();
        // The sync in flight, the answers it makes durable and their groups'
        // start times.
        let mut syncing: Option<(SyncJob, Vec<Answer>, Vec<Instant>)> = None;
        loop {
            if syncing.is_none() && (!written.is_empty() || !written_at.is_empty()) {
                syncing = Some((
                    self.start_sync(),
                    std::mem::take(&mut written),
                    std::mem::take(&mut written_at),
                ));
            }
            let next = match syncing.as_mut() {
                Some((job, _, _)) => tokio::select! {
                    biased;
                    done = job => Next::Synced(joined(done)),
                    req = self.rx.recv() => Next::Request(req),
                },
                None => Next::Request(self.rx.recv().await),
            };
            let first = match next {
                Next::Synced(result) => {
                    let (_, answers, started) = syncing.take().expect("a sync was in flight");
                    self.synced(result, answers, &started, &mut written)?;
                    continue;
                }
                Next::Request(Some(first)) => first,
                Next::Request(None) => break,
            };
            let mut bytes = first.bytes();
            let mut group = vec![first];
            while group.len() < self.cfg.max_group_hooks && bytes < self.cfg.max_group_bytes {
                match self.rx.try_recv() {
                    Ok(next) => {
                        bytes += next.bytes();
                        group.push(next);
                    }
                    Err(_) => break,
                }
            }
            let started = Instant::now();
            match self.commit_group(group).await {
                Ok((answers, wrote)) => {
                    written.extend(answers);
                    if wrote {
                        written_at.push(started);
                    }
                }
                Err(e) => {
                    // The group's own requests were failed. What was written
                    // before is as durable as the sync in flight makes it.
                    if let Some((job, answers, started)) = syncing.take() {
                        let result = joined(job.await);
                        let _ = self.synced(result, answers, &started, &mut Vec::new());
                    }
                    let err = WriteError::Store(StoreFailure::from(e.clone()));
                    for a in written {
                        a.fail(&err);
                    }
                    self.rx.close();
                    return Err(e);
                }
            }
        }
        // Every handle is gone: answer what is written, once it is durable.
        if let Some((job, answers, started)) = syncing.take() {
            let result = joined(job.await);
            self.synced(result, answers, &started, &mut written)?;
        }
        if !written.is_empty() || !written_at.is_empty() {
            let result = joined(self.start_sync().await);
            self.synced(
                result,
                std::mem::take(&mut written),
                &written_at,
                &mut Vec::new(),
            )?;
        }
        Ok(())
    }

    /// A sync of everything written so far, off the async workers (it blocks
    /// on the fsync).
    fn start_sync(&self) -> SyncJob {
        let kv = Arc::clone(&self.kv);
        tokio::task::spawn_blocking(move || kv.sync())
    }

    /// Answers the groups a finished sync made durable (and counts the
    /// commit latency of each, from `started`); on its failure fails them and
    /// every group written after it began (`written`) and stops.
    fn synced(
        &mut self,
        result: Result<(), EngineError>,
        answers: Vec<Answer>,
        started: &[Instant],
        written: &mut Vec<Answer>,
    ) -> Result<(), EngineError> {
        match result {
            Ok(()) => {
                for a in answers {
                    a.send();
                }
                for t in started {
                    self.metrics.commit_latency.observe_duration(t.elapsed());
                }
                Ok(())
            }
            Err(e) => {
                let err = WriteError::Store(StoreFailure::from(e.clone()));
                for a in answers.into_iter().chain(written.drain(..)) {
                    a.fail(&err);
                }
                self.rx.close();
                Err(e)
            }
        }
    }

    /// Builds one group's batch and writes it `Buffered`; returns the answers
    /// that wait for the next sync, and whether a batch was written (it counts
    /// the group's hooks in `WriterMetrics::group_hooks` then). On a failed
    /// write, fails the group's requests and returns the error.
    async fn commit_group(
        &mut self,
        group: Vec<Request>,
    ) -> Result<(Vec<Answer>, bool), EngineError> {
        let now_ms = (self.clock)();
        let mut batch = Batch::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(group.len());
        let mut seen: HashMap<Vec<u8>, Seq> = HashMap::new();
        let mut held_touched: HashSet<(TenantOrd, Seq)> = HashSet::new();
        let mut jobs_touched: HashSet<Vec<u8>> = HashSet::new();
        let first_seq = self.next_seq;
        // The lanes this group may write members into (WriterHandle::lane_rows);
        // `all` when it cannot name them.
        let mut lane_rows_all = false;
        let mut lane_rows: Vec<(TenantOrd, LaneId)> = Vec::new();
        // Dedupe expiry goes first in the batch: an ingest of this group that
        // renews an expired record puts it after the expiry's delete, so the
        // renewed record stays.
        let (expiries, group): (Vec<Request>, Vec<Request>) = group
            .into_iter()
            .partition(|r| matches!(r, Request::ExpireDedupe { .. }));
        for req in expiries.into_iter().chain(group) {
            match req {
                Request::ExpireDedupe {
                    tenant,
                    cursor,
                    limit,
                    reply,
                } => {
                    match crate::expire_dedupe(&*self.kv, tenant, now_ms, cursor.as_ref(), limit) {
                        Ok(page) => {
                            batch.extend(page.batch);
                            answers.push(Answer::Expired(
                                reply,
                                Expired {
                                    deleted: page.moved,
                                    next: page.next,
                                },
                            ));
                        }
                        Err(e) => drop(reply.send(Err(WriteError::of(e)))),
                    }
                }
                Request::JobStep(step, reply) => {
                    lane_rows_all = true;
                    match self.job_step(
                        &mut batch,
                        step,
                        now_ms,
                        &mut held_touched,
                        &mut jobs_touched,
                    ) {
                        Ok(seqs) => answers.push(Answer::Seqs(reply, seqs)),
                        Err(e) => drop(reply.send(Err(e))),
                    }
                }
                Request::PurgeMark {
                    tenant,
                    job,
                    state,
                    reply,
                } => {
                    if let Err(e) = self.check_job(&state, &mut jobs_touched) {
                        let _ = reply.send(Err(e));
                        continue;
                    }
                    match job {
                        Some(id) => {
                            self.purging.insert(tenant);
                            crate::set_purge(&mut batch, tenant, id);
                        }
                        None => {
                            self.purging.remove(&tenant);
                            crate::clear_purge(&mut batch, tenant);
                        }
                    }
                    batch.put(Cf::Meta, state.key, state.value);
                    answers.push(Answer::Done(reply));
                }
                Request::Adopt { tenant, reply, .. } if self.purging.contains(&tenant) => {
                    let _ = reply.send(Err(WriteError::TenantPurging { tenant }));
                }
                Request::Adopt {
                    tenant,
                    records,
                    reply,
                } => {
                    let mut adopted = Batch::new();
                    let mut next = self.next_seq;
                    match crate::handover::adopt(
                        &*self.kv,
                        &mut adopted,
                        tenant,
                        &records,
                        &mut next,
                    ) {
                        Ok(a) => {
                            self.next_seq = next;
                            batch.extend(adopted);
                            answers.push(Answer::Adopted(reply, a));
                        }
                        Err(e) => drop(reply.send(Err(WriteError::of(e)))),
                    }
                }
                Request::Release { tenant, reply, .. } | Request::Drop { tenant, reply, .. }
                    if self.purging.contains(&tenant) =>
                {
                    let _ = reply.send(Err(WriteError::TenantPurging { tenant }));
                }
                Request::Quarantine(req, reply) if self.purging.contains(&req.tenant) => {
                    let _ = reply.send(Err(WriteError::TenantPurging { tenant: req.tenant }));
                }
                Request::Ingest(req, reply) if self.purging.contains(&req.tenant) => {
                    let _ = reply.send(Err(WriteError::TenantPurging { tenant: req.tenant }));
                }
                Request::Release {
                    tenant,
                    seq,
                    rows,
                    reply,
                } => {
                    lane_rows.extend(
                        rows.iter()
                            .filter_map(|r| r.lane.as_ref())
                            .map(|l| (tenant, l.lane)),
                    );
                    if !held_touched.insert((tenant, seq)) {
                        let _ = reply.send(Err(WriteError::NotQuarantined { tenant, seq }));
                        continue;
                    }
                    match crate::release(&*self.kv, tenant, seq, &rows, now_ms) {
                        Ok(b) => {
                            batch.extend(b);
                            answers.push(Answer::Done(reply));
                        }
                        Err(e) => drop(reply.send(Err(WriteError::of(e)))),
                    }
                }
                Request::Drop { tenant, seq, reply } => {
                    if !held_touched.insert((tenant, seq)) {
                        let _ = reply.send(Err(WriteError::NotQuarantined { tenant, seq }));
                        continue;
                    }
                    match crate::drop_quarantined(&*self.kv, tenant, seq) {
                        Ok(b) => {
                            batch.extend(b);
                            answers.push(Answer::Done(reply));
                        }
                        Err(e) => drop(reply.send(Err(WriteError::of(e)))),
                    }
                }
                Request::Quarantine(req, reply) => {
                    let seq = Seq(self.next_seq);
                    self.next_seq += 1;
                    let hook = Hook {
                        tenant: req.tenant,
                        seq,
                        envelope: &req.envelope,
                        dedupe_expires_at_ms: 0,
                    };
                    crate::quarantine(&mut batch, &hook, &req.reason);
                    answers.push(Answer::Seq(reply, seq));
                }
                Request::Ingest(req, reply) => {
                    if let Some(dk) = &req.envelope.dedupe_key {
                        let key = dedupe_key(req.tenant, req.envelope.source, dk);
                        if let Some(seq) = seen.get(&key) {
                            answers.push(Answer::Ingest(reply, Ingested::Duplicate(*seq)));
                            continue;
                        }
                        // The edge's pre-check read the same record
                        // (`crate::live_dedupe`); this decides at the commit.
                        match crate::live_dedupe(
                            &*self.kv,
                            req.tenant,
                            req.envelope.source,
                            dk,
                            now_ms,
                        ) {
                            Ok(Some(seq)) => {
                                answers.push(Answer::Ingest(reply, Ingested::Duplicate(seq)));
                                continue;
                            }
                            Ok(None) => {} // none, or expired: a new hook
                            Err(QueueError::Value(e)) => {
                                let _ = reply
                                    .send(Err(WriteError::Store(StoreFailure::CorruptDedupe(e))));
                                continue;
                            }
                            Err(e) => {
                                let _ = reply.send(Err(WriteError::of(e)));
                                continue;
                            }
                        }
                        seen.insert(key, Seq(self.next_seq));
                    }
                    let seq = Seq(self.next_seq);
                    self.next_seq += 1;
                    let hook = Hook {
                        tenant: req.tenant,
                        seq,
                        envelope: &req.envelope,
                        dedupe_expires_at_ms: now_ms
                            .saturating_add(req.dedupe_ttl_ms.unwrap_or(self.cfg.dedupe_ttl_ms)),
                    };
                    lane_rows.extend(
                        req.rows
                            .iter()
                            .filter_map(|r| r.lane.as_ref())
                            .map(|l| (req.tenant, l.lane)),
                    );
                    new_ops(&mut batch, &hook, &req.rows, now_ms);
                    answers.push(Answer::Ingest(reply, Ingested::Committed(seq)));
                }
            }
        }
        if self.next_seq > first_seq {
            batch.put(
                Cf::Meta,
                SEQ_HIGH_WATER_KEY,
                encode_seq_high_water(Seq(self.next_seq - 1)),
            );
        }
        let wrote = !batch.is_empty();
        if wrote {
            let kv = Arc::clone(&self.kv);
            // A write can stall (RocksDB's write stalls): off the async workers.
            let result = tokio::task::spawn_blocking(move || kv.write(batch, Durability::Buffered))
                .await
                .unwrap_or_else(|e| {
                    Err(EngineError::Backend {
                        backend: "writer",
                        op: "write",
                        kind: ankusa_engine::ErrorKind::Other,
                        message: e.to_string(),
                    })
                });
            if let Err(e) = result {
                let err = WriteError::Store(StoreFailure::from(e.clone()));
                for a in answers {
                    a.fail(&err);
                }
                return Err(e);
            }
            // After the write: a visit that takes the floor sees the rows. They
            // may be delivered before they are durable; none is acknowledged
            // before (docs/design.md section 2, "Durability").
            self.due_floor
                .fetch_min(now_ms, std::sync::atomic::Ordering::SeqCst);
            if lane_rows_all || !lane_rows.is_empty() {
                self.lane_rows.add(lane_rows_all, lane_rows);
            }
            self.metrics.group_hooks.observe(self.next_seq - first_seq);
        }
        Ok((answers, wrote))
    }
}

impl<K: Kv> Writer<K> {
    /// The compare and set of a job's state: refused when the job was touched
    /// earlier in this group or its stored state is not the one expected.
    fn check_job(
        &self,
        state: &JobState,
        touched: &mut HashSet<Vec<u8>>,
    ) -> Result<(), WriteError> {
        if !touched.insert(state.key.clone()) {
            return Err(WriteError::Refused(
                "the job has another step in this group".into(),
            ));
        }
        let stored = self
            .kv
            .get(Cf::Meta, &state.key)
            .map_err(|e| WriteError::Store(e.into()))?;
        if stored.as_deref() != state.expect.as_deref() {
            return Err(WriteError::Refused(
                "the job's state changed since its step was built".into(),
            ));
        }
        Ok(())
    }

    /// Builds one job step into `group` (all of it, or nothing) and returns
    /// the seqs of its replays.
    fn job_step(
        &mut self,
        group: &mut Batch,
        step: JobStep,
        now_ms: u64,
        held_touched: &mut HashSet<(TenantOrd, Seq)>,
        jobs_touched: &mut HashSet<Vec<u8>>,
    ) -> Result<Vec<Seq>, WriteError> {
        self.check_job(&step.state, jobs_touched)?;
        if let Some(op) = step
            .ops
            .iter()
            .find(|op| self.purging.contains(&op.tenant()))
        {
            return Err(WriteError::TenantPurging {
                tenant: op.tenant(),
            });
        }
        let mut batch = Batch::new();
        let mut seqs = Vec::new();
        let mut next = self.next_seq;
        let mut touched = Vec::new();
        for op in &step.ops {
            match op {
                JobOp::Replay {
                    tenant,
                    envelope,
                    rows,
                } => {
                    let hook = Hook {
                        tenant: *tenant,
                        seq: Seq(next),
                        envelope,
                        dedupe_expires_at_ms: 0,
                    };
                    crate::replay(&mut batch, &hook, rows, now_ms);
                    seqs.push(Seq(next));
                    next += 1;
                }
                JobOp::Release { tenant, seq, rows } => {
                    if held_touched.contains(&(*tenant, *seq)) || touched.contains(&(*tenant, *seq))
                    {
                        return Err(WriteError::NotQuarantined {
                            tenant: *tenant,
                            seq: *seq,
                        });
                    }
                    touched.push((*tenant, *seq));
                    batch.extend(
                        crate::release(&*self.kv, *tenant, *seq, rows, now_ms)
                            .map_err(WriteError::of)?,
                    );
                }
                JobOp::DropQuarantined { tenant, seq } => {
                    if held_touched.contains(&(*tenant, *seq)) || touched.contains(&(*tenant, *seq))
                    {
                        return Err(WriteError::NotQuarantined {
                            tenant: *tenant,
                            seq: *seq,
                        });
                    }
                    touched.push((*tenant, *seq));
                    batch.extend(
                        crate::drop_quarantined(&*self.kv, *tenant, *seq)
                            .map_err(WriteError::of)?,
                    );
                }
            }
        }
        held_touched.extend(touched);
        self.next_seq = next;
        group.extend(batch);
        group.put(Cf::Meta, step.state.key, step.state.value);
        Ok(seqs)
    }
}

/// Reads the seq high-water mark (the highest seq committed), 0 for a new store.
///
/// # Errors
/// Engine errors; a corrupt mark.
pub fn seq_high_water(read: &impl Read) -> Result<Seq, EngineError> {
    match read.get(Cf::Meta, SEQ_HIGH_WATER_KEY)? {
        Some(v) => decode_seq_high_water(&v).map_err(|e| EngineError::Corrupt {
            what: format!("seq high-water mark: {e}"),
        }),
        None => Ok(Seq(0)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeSet;

    use ankusa_engine::memory::MemoryKv;
    use ankusa_engine::{Direction, scan_pages};
    use ankusa_keys::{DedupeValue, SinkIx, SourceId, hooks_range};

    use super::*;
    use crate::check_invariants;

    fn envelope(n: u64, dedupe: Option<&str>) -> Envelope {
        Envelope {
            source: SourceId(1),
            received_at_ms: 1_000 + n,
            method: "POST".into(),
            path: "/hooks/demo".into(),
            query: None,
            headers: vec![(b"content-type".to_vec(), b"application/json".to_vec())],
            body: format!("{{\"n\":{n}}}").into_bytes(),
            dedupe_key: dedupe.map(|d| d.as_bytes().to_vec()),
            idempotency_key: [n as u8; 16],
            replay_of: None,
        }
    }

    fn req(n: u64, dedupe: Option<&str>) -> IngestRequest {
        IngestRequest {
            tenant: TenantOrd(1),
            envelope: envelope(n, dedupe),
            rows: vec![NewRow {
                sink: SinkIx(0),
                lane: None,
            }],
            dedupe_ttl_ms: None,
        }
    }

    fn start(
        kv: &Arc<MemoryKv>,
    ) -> (
        tokio::task::JoinHandle<Result<(), EngineError>>,
        WriterHandle,
    ) {
        let (writer, handle) =
            Writer::new(Arc::clone(kv), WriterConfig::default(), || 5_000).unwrap();
        (tokio::spawn(writer.run()), handle)
    }

    /// Concurrent senders get distinct, gap-free seqs; the high-water mark and
    /// the stored envelopes agree; the store keeps every invariant.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_ingest_assigns_gap_free_seqs() {
        let kv = Arc::new(MemoryKv::new());
        kv.write(crate::init_store(), Durability::Sync).unwrap();
        let (task, handle) = start(&kv);
        let mut joins = Vec::new();
        for t in 0..8u64 {
            let h = handle.clone();
            joins.push(tokio::spawn(async move {
                let mut seqs = Vec::new();
                for i in 0..25u64 {
                    match h.ingest(req(t * 100 + i, None)).await.unwrap() {
                        Ingested::Committed(s) => seqs.push(s.0),
                        other => panic!("unexpected {other:?}"),
                    }
                }
                seqs
            }));
        }
        let mut all = BTreeSet::new();
        for j in joins {
            for s in j.await.unwrap() {
                assert!(all.insert(s), "seq {s} given twice");
            }
        }
        assert_eq!(all, (1..=200).collect::<BTreeSet<u64>>());
        let metrics = handle.metrics();
        drop(handle);
        task.await.unwrap().unwrap();
        // Every hook in some group, each group written once and synced once.
        let groups = metrics.group_hooks.snapshot();
        assert_eq!(groups.sum, 200.0);
        assert!((1..=200).contains(&groups.count), "{groups:?}");
        assert_eq!(metrics.commit_latency.count(), groups.count);
        assert_eq!(seq_high_water(&*kv).unwrap(), Seq(200));
        let hooks = scan_pages(&*kv, Cf::Hooks, hooks_range(), Direction::Forward, 64).count();
        assert_eq!(hooks, 200);
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        // A new Writer resumes after the mark.
        let (task, handle) = start(&kv);
        assert_eq!(
            handle.ingest(req(9, None)).await.unwrap(),
            Ingested::Committed(Seq(201))
        );
        drop(handle);
        task.await.unwrap().unwrap();
    }

    /// A provider retry is a dedupe hit whether it arrives in the same group or
    /// later, and writes nothing; another source's same id is not a hit.
    #[tokio::test]
    async fn dedupe_hits_write_nothing() {
        let kv = Arc::new(MemoryKv::new());
        let (writer, handle) =
            Writer::new(Arc::clone(&kv), WriterConfig::default(), || 5_000).unwrap();
        // Queue three before the Writer runs, so they share one group.
        let h1 = handle.clone();
        let a = tokio::spawn(async move { h1.ingest(req(1, Some("evt_1"))).await });
        let h2 = handle.clone();
        let b = tokio::spawn(async move { h2.ingest(req(2, Some("evt_1"))).await });
        tokio::task::yield_now().await;
        let task = tokio::spawn(writer.run());
        let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
        let mut answers = [a, b];
        answers.sort_by_key(|x| matches!(x, Ingested::Duplicate(_)));
        assert_eq!(
            answers,
            [Ingested::Committed(Seq(1)), Ingested::Duplicate(Seq(1))]
        );
        let batches = kv.stats().batches;
        assert_eq!(
            handle.ingest(req(3, Some("evt_1"))).await.unwrap(),
            Ingested::Duplicate(Seq(1))
        );
        assert_eq!(kv.stats().batches, batches, "a dedupe hit wrote a batch");
        let mut other = req(4, Some("evt_1"));
        other.envelope.source = SourceId(2);
        assert_eq!(
            handle.ingest(other).await.unwrap(),
            Ingested::Committed(Seq(2))
        );
        drop(handle);
        task.await.unwrap().unwrap();
        assert_eq!(seq_high_water(&*kv).unwrap(), Seq(2));
    }

    /// A failed commit fails the request, stops the Writer with the error, and
    /// later requests see `Stopped`.
    #[tokio::test]
    async fn store_failure_fails_the_group_and_stops() {
        let kv = Arc::new(MemoryKv::new());
        let (task, handle) = start(&kv);
        assert_eq!(
            handle.ingest(req(1, None)).await.unwrap(),
            Ingested::Committed(Seq(1))
        );
        kv.inject_write_failure();
        let err = handle.ingest(req(2, None)).await.unwrap_err();
        assert!(
            matches!(err, WriteError::Store(ref m) if m.to_string().contains("injected")),
            "{err}"
        );
        assert!(task.await.unwrap().is_err());
        assert_eq!(
            handle.ingest(req(3, None)).await.unwrap_err(),
            WriteError::Stopped
        );
        assert_eq!(seq_high_water(&*kv).unwrap(), Seq(1));
    }

    /// The pipelined group commit: a group is written while the sync of the
    /// one before runs, and is answered only by a sync that began after its
    /// write, never by the one in flight.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_group_is_written_during_the_previous_sync_and_answered_by_the_next() {
        use ankusa_engine::fault::FaultKv;
        let kv = Arc::new(FaultKv::new(MemoryKv::new()));
        kv.write(crate::init_store(), Durability::Buffered).unwrap();
        let (writer, handle) =
            Writer::new(Arc::clone(&kv), WriterConfig::default(), || 5_000).unwrap();
        let task = tokio::spawn(writer.run());
        kv.hold_syncs();
        let wait = |what: &'static str, cond: Box<dyn Fn() -> bool>| async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while !cond() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "timed out waiting for {what}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        };
        let h = handle.clone();
        let a = tokio::spawn(async move { h.ingest(req(1, None)).await });
        let k = Arc::clone(&kv);
        wait(
            "the first group's sync",
            Box::new(move || k.syncs_started() == 1),
        )
        .await;
        let h = handle.clone();
        let b = tokio::spawn(async move { h.ingest(req(2, None)).await });
        // Written while the first sync is held: visible, not answered.
        let k = Arc::clone(&kv);
        wait(
            "the second group's write",
            Box::new(move || {
                k.inner()
                    .get(Cf::Hooks, &ankusa_keys::hook_key(TenantOrd(1), Seq(2)))
                    .unwrap()
                    .is_some()
            }),
        )
        .await;
        assert!(
            !a.is_finished() && !b.is_finished(),
            "answered before any sync returned"
        );
        kv.release_syncs(1);
        assert_eq!(a.await.unwrap().unwrap(), Ingested::Committed(Seq(1)));
        // The second group waits for the sync after it, which is held.
        let k = Arc::clone(&kv);
        wait("the second sync", Box::new(move || k.syncs_started() == 2)).await;
        assert!(
            !b.is_finished(),
            "the second group was answered by a sync that began before its write"
        );
        kv.release_syncs(1);
        assert_eq!(b.await.unwrap().unwrap(), Ingested::Committed(Seq(2)));
        kv.stop_holding_syncs();
        drop(handle);
        task.await.unwrap().unwrap();
        assert_eq!(kv.syncs(), 2);
        assert_eq!(seq_high_water(&*kv).unwrap(), Seq(2));
    }

    /// A failed sync fails the groups it was to answer and the group written
    /// during it, and stops the Writer; a group that a successful sync covered
    /// keeps its answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_sync_fails_every_unanswered_group_and_stops() {
        use ankusa_engine::fault::FaultKv;
        let kv = Arc::new(FaultKv::new(MemoryKv::new()));
        let (writer, handle) =
            Writer::new(Arc::clone(&kv), WriterConfig::default(), || 5_000).unwrap();
        let task = tokio::spawn(writer.run());
        assert_eq!(
            handle.ingest(req(1, None)).await.unwrap(),
            Ingested::Committed(Seq(1))
        );
        kv.hold_syncs();
        kv.fail_next_syncs(1);
        let h = handle.clone();
        let a = tokio::spawn(async move { h.ingest(req(2, None)).await });
        let k = Arc::clone(&kv);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while k.syncs_started() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for the second sync"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let h = handle.clone();
        let b = tokio::spawn(async move { h.ingest(req(3, None)).await });
        while k.writes() < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for the third write"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        kv.stop_holding_syncs();
        for r in [a.await.unwrap(), b.await.unwrap()] {
            let err = r.unwrap_err();
            assert!(
                matches!(err, WriteError::Store(ref m) if m.to_string().contains("injected sync failure")),
                "{err}"
            );
        }
        let err = task.await.unwrap().unwrap_err();
        assert!(
            matches!(err, EngineError::Backend { op: "sync", .. }),
            "{err}"
        );
        assert_eq!(
            handle.ingest(req(4, None)).await.unwrap_err(),
            WriteError::Stopped
        );
    }

    /// A quarantined hook takes the next seq, writes no dedupe record and is
    /// no dedupe hit; a release and a drop of one hook queued in one group:
    /// the first applies, the second is refused; expiry of dedupe records.
    #[tokio::test]
    async fn quarantine_release_and_drop_go_through_the_writer() {
        let kv = Arc::new(MemoryKv::new());
        kv.write(crate::init_store(), Durability::Sync).unwrap();
        let (writer, handle) =
            Writer::new(Arc::clone(&kv), WriterConfig::default(), || 5_000).unwrap();
        let task = tokio::spawn(writer.run());
        assert_eq!(
            handle.ingest(req(1, Some("evt_1"))).await.unwrap(),
            Ingested::Committed(Seq(1))
        );
        let q = |n: u64| QuarantineRequest {
            tenant: TenantOrd(1),
            envelope: envelope(n, Some("evt_1")),
            reason: "invalid signature".into(),
        };
        assert_eq!(handle.quarantine(q(2)).await.unwrap(), Seq(2));
        assert_eq!(handle.quarantine(q(3)).await.unwrap(), Seq(3));
        // The quarantined hooks did not touch the first hook's dedupe record.
        let rec = kv
            .get(Cf::Index, &dedupe_key(TenantOrd(1), SourceId(1), b"evt_1"))
            .unwrap()
            .unwrap();
        assert_eq!(DedupeValue::decode(&rec).unwrap().seq, Seq(1));
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        assert_eq!(
            kv.counter(&ankusa_keys::counter_key(
                TenantOrd(1),
                ankusa_keys::CounterField::Quarantined
            ))
            .unwrap(),
            2
        );
        // Release and drop of seq 2, and a second release of it, race.
        let rows = vec![NewRow {
            sink: SinkIx(0),
            lane: None,
        }];
        let (a, b, c) = tokio::join!(
            handle.release(TenantOrd(1), Seq(2), rows.clone()),
            handle.drop_quarantined(TenantOrd(1), Seq(2)),
            handle.release(TenantOrd(1), Seq(2), rows.clone()),
        );
        let oks = [&a, &b, &c].iter().filter(|r| r.is_ok()).count();
        assert_eq!(oks, 1, "{a:?} {b:?} {c:?}");
        for r in [a, b, c] {
            if let Err(e) = r {
                assert_eq!(
                    e,
                    WriteError::NotQuarantined {
                        tenant: TenantOrd(1),
                        seq: Seq(2)
                    }
                );
            }
        }
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        handle.drop_quarantined(TenantOrd(1), Seq(3)).await.unwrap();
        assert!(
            kv.get(Cf::Hooks, &ankusa_keys::hook_key(TenantOrd(1), Seq(3)))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            handle
                .release(TenantOrd(1), Seq(3), rows)
                .await
                .unwrap_err(),
            WriteError::NotQuarantined {
                tenant: TenantOrd(1),
                seq: Seq(3)
            }
        );
        assert_eq!(
            kv.counter(&ankusa_keys::counter_key(
                TenantOrd(1),
                ankusa_keys::CounterField::Quarantined
            ))
            .unwrap(),
            0
        );
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        // Expiry at the Writer's clock (5,000): the record expires 7 days later.
        let e = handle.expire_dedupe(TenantOrd(1), None, 10).await.unwrap();
        assert_eq!(
            e,
            Expired {
                deleted: 0,
                next: None
            }
        );
        drop(handle);
        task.await.unwrap().unwrap();
        let (writer, handle) =
            Writer::new(Arc::clone(&kv), WriterConfig::default(), || u64::MAX / 2).unwrap();
        let task = tokio::spawn(writer.run());
        let e = handle.expire_dedupe(TenantOrd(1), None, 10).await.unwrap();
        assert_eq!(
            e,
            Expired {
                deleted: 1,
                next: None
            }
        );
        assert!(
            kv.get(Cf::Index, &dedupe_key(TenantOrd(1), SourceId(1), b"evt_1"))
                .unwrap()
                .is_none()
        );
        // An ingest of the same id is a new hook now.
        assert_eq!(
            handle.ingest(req(9, Some("evt_1"))).await.unwrap(),
            Ingested::Committed(Seq(4))
        );
        drop(handle);
        task.await.unwrap().unwrap();
        assert_eq!(seq_high_water(&*kv).unwrap(), Seq(4));
    }

    fn state(key: &[u8], expect: Option<&[u8]>, value: &[u8]) -> JobState {
        JobState {
            key: key.to_vec(),
            expect: expect.map(<[u8]>::to_vec),
            value: value.to_vec(),
        }
    }

    /// A job step: its replays take the next seqs, its release applies, and
    /// its state is put, all in one commit; a step built from a stale state
    /// is refused and writes nothing (no seq taken); a step whose release
    /// cannot be built writes nothing either.
    #[tokio::test]
    async fn a_job_step_commits_its_replays_releases_and_state_together_or_not_at_all() {
        let kv = Arc::new(MemoryKv::new());
        kv.write(crate::init_store(), Durability::Sync).unwrap();
        let (task, handle) = start(&kv);
        assert_eq!(
            handle.ingest(req(1, Some("evt_1"))).await.unwrap(),
            Ingested::Committed(Seq(1))
        );
        let q = QuarantineRequest {
            tenant: TenantOrd(1),
            envelope: envelope(2, None),
            reason: "review".into(),
        };
        assert_eq!(handle.quarantine(q).await.unwrap(), Seq(2));
        let mut copy = envelope(1, Some("evt_1"));
        copy.replay_of = Some(Seq(1));
        let rows = vec![NewRow {
            sink: SinkIx(0),
            lane: None,
        }];
        let replay = JobOp::Replay {
            tenant: TenantOrd(1),
            envelope: copy.clone(),
            rows: rows.clone(),
        };
        let step = JobStep {
            state: state(b"job/x", None, b"one"),
            ops: vec![
                replay.clone(),
                JobOp::Release {
                    tenant: TenantOrd(1),
                    seq: Seq(2),
                    rows: rows.clone(),
                },
                replay.clone(),
            ],
        };
        assert_eq!(handle.job_step(step).await.unwrap(), vec![Seq(3), Seq(4)]);
        assert_eq!(
            kv.get(Cf::Meta, b"job/x").unwrap().as_deref(),
            Some(&b"one"[..])
        );
        let stored = Envelope::decode(
            &kv.get(Cf::Hooks, &ankusa_keys::hook_key(TenantOrd(1), Seq(4)))
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (stored.replay_of, stored.idempotency_key),
            (Some(Seq(1)), copy.idempotency_key)
        );
        // The copies wrote no dedupe record: the provider's names seq 1.
        let rec = kv
            .get(Cf::Index, &dedupe_key(TenantOrd(1), SourceId(1), b"evt_1"))
            .unwrap()
            .unwrap();
        assert_eq!(DedupeValue::decode(&rec).unwrap().seq, Seq(1));
        assert_eq!(
            kv.counter(&ankusa_keys::counter_key(
                TenantOrd(1),
                ankusa_keys::CounterField::Pending
            ))
            .unwrap(),
            4
        );
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        // Stale: the stored state is "one", not absent.
        let stale = JobStep {
            state: state(b"job/x", None, b"two"),
            ops: vec![replay.clone()],
        };
        assert!(matches!(
            handle.job_step(stale).await,
            Err(WriteError::Refused(_))
        ));
        // A release of a hook no longer quarantined sinks the whole step.
        let step = JobStep {
            state: state(b"job/x", Some(b"one"), b"two"),
            ops: vec![
                replay.clone(),
                JobOp::Release {
                    tenant: TenantOrd(1),
                    seq: Seq(2),
                    rows,
                },
            ],
        };
        assert_eq!(
            handle.job_step(step).await.unwrap_err(),
            WriteError::NotQuarantined {
                tenant: TenantOrd(1),
                seq: Seq(2)
            }
        );
        assert_eq!(
            kv.get(Cf::Meta, b"job/x").unwrap().as_deref(),
            Some(&b"one"[..])
        );
        // No seq was taken by the refused steps.
        assert_eq!(
            handle.ingest(req(5, None)).await.unwrap(),
            Ingested::Committed(Seq(5))
        );
        drop(handle);
        task.await.unwrap().unwrap();
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
    }

    /// A purge mark: from its commit every request of the tenant is refused
    /// (another tenant's are not), a new Writer over the store refuses too
    /// (the marks are read at start), and clearing it lets hooks in again.
    #[tokio::test]
    async fn a_purge_mark_refuses_the_tenants_requests_until_it_is_cleared() {
        let kv = Arc::new(MemoryKv::new());
        kv.write(crate::init_store(), Durability::Sync).unwrap();
        let (task, handle) = start(&kv);
        let t1 = TenantOrd(1);
        handle
            .purge_mark(t1, Some(7), state(b"job/7", None, b"purging"))
            .await
            .unwrap();
        assert_eq!(
            crate::read_purges(&*kv)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![(t1, 7)]
        );
        let refused = WriteError::TenantPurging { tenant: t1 };
        assert_eq!(handle.ingest(req(1, None)).await.unwrap_err(), refused);
        let q = QuarantineRequest {
            tenant: t1,
            envelope: envelope(2, None),
            reason: "r".into(),
        };
        assert_eq!(handle.quarantine(q).await.unwrap_err(), refused);
        assert_eq!(
            handle.drop_quarantined(t1, Seq(9)).await.unwrap_err(),
            refused
        );
        let mut other = req(3, None);
        other.tenant = TenantOrd(2);
        assert_eq!(
            handle.ingest(other).await.unwrap(),
            Ingested::Committed(Seq(1))
        );
        drop(handle);
        task.await.unwrap().unwrap();
        let (task, handle) = start(&kv);
        assert_eq!(handle.ingest(req(4, None)).await.unwrap_err(), refused);
        handle
            .purge_mark(t1, None, state(b"job/7", Some(b"purging"), b"done"))
            .await
            .unwrap();
        assert!(crate::read_purges(&*kv).unwrap().is_empty());
        assert_eq!(
            handle.ingest(req(5, None)).await.unwrap(),
            Ingested::Committed(Seq(2))
        );
        drop(handle);
        task.await.unwrap().unwrap();
    }
}
