//! The Writer (docs/design.md section 5): the one task per node that assigns `seq` and
//! commits ingested hooks, several at a time (group commit), with
//! [`Durability::Sync`], before any of them is acknowledged.
//!
//! - Requests arrive on a bounded channel ([`WriterHandle::ingest`]); the task
//!   takes the first, then every request already waiting (up to
//!   [`WriterConfig::max_group_hooks`] / [`WriterConfig::max_group_bytes`]),
//!   builds one batch with [`crate::new_ops`] for each, the seq high-water mark
//!   in the same batch, writes it `Sync`, and only then answers every request.
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
//!
//! This module needs tokio and is behind the `writer` feature, so the pure
//! builders of this crate stay usable without a runtime (the loom model).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ankusa_engine::{Batch, Cf, Durability, EngineError, Kv, Read};
use ankusa_keys::meta::{decode_seq_high_water, encode_seq_high_water};
use ankusa_keys::{DedupeValue, Envelope, SEQ_HIGH_WATER_KEY, Seq, TenantOrd, dedupe_key};
use tokio::sync::{mpsc, oneshot};

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

/// Why a hook was not committed.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    /// The store failed the commit (or an earlier one): nothing of the group is
    /// acknowledged. The edge answers 503.
    #[error("store failed: {0}")]
    Store(String),
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
    /// is gone, a value that does not decode): nothing was written for it.
    #[error("refused: {0}")]
    Refused(String),
}

impl WriteError {
    fn of(e: QueueError) -> WriteError {
        match e {
            QueueError::NotQuarantined { tenant, seq } => WriteError::NotQuarantined { tenant, seq },
            QueueError::Engine(e) => WriteError::Store(e.to_string()),
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

type ReplyTo<T> = oneshot::Sender<Result<T, WriteError>>;

/// One request to the Writer.
enum Request {
    Ingest(IngestRequest, ReplyTo<Ingested>),
    Quarantine(QuarantineRequest, ReplyTo<Seq>),
    Release { tenant: TenantOrd, seq: Seq, rows: Vec<NewRow>, reply: ReplyTo<()> },
    Drop { tenant: TenantOrd, seq: Seq, reply: ReplyTo<()> },
    ExpireDedupe { tenant: TenantOrd, cursor: Option<Cursor>, limit: usize, reply: ReplyTo<Expired> },
}

impl Request {
    /// Body bytes it adds to a group.
    fn bytes(&self) -> usize {
        match self {
            Request::Ingest(r, _) => r.envelope.body.len(),
            Request::Quarantine(r, _) => r.envelope.body.len(),
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
}

impl Answer {
    fn send(self) {
        match self {
            Answer::Ingest(r, v) => drop(r.send(Ok(v))),
            Answer::Seq(r, v) => drop(r.send(Ok(v))),
            Answer::Done(r) => drop(r.send(Ok(()))),
            Answer::Expired(r, v) => drop(r.send(Ok(v))),
        }
    }

    fn fail(self, e: &WriteError) {
        match self {
            Answer::Ingest(r, _) => drop(r.send(Err(e.clone()))),
            Answer::Seq(r, _) => drop(r.send(Err(e.clone()))),
            Answer::Done(r) => drop(r.send(Err(e.clone()))),
            Answer::Expired(r, _) => drop(r.send(Err(e.clone()))),
        }
    }
}

/// The sending side, cloned by every edge connection.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Request>,
}

impl std::fmt::Debug for WriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterHandle").finish_non_exhaustive()
    }
}

impl WriterHandle {
    async fn ask<T>(&self, make: impl FnOnce(ReplyTo<T>) -> Request) -> Result<T, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| WriteError::Stopped)?;
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
    pub async fn release(&self, tenant: TenantOrd, seq: Seq, rows: Vec<NewRow>) -> Result<(), WriteError> {
        self.ask(|reply| Request::Release { tenant, seq, rows, reply }).await
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
    pub async fn expire_dedupe(&self, tenant: TenantOrd, cursor: Option<Cursor>, limit: usize) -> Result<Expired, WriteError> {
        self.ask(|reply| Request::ExpireDedupe { tenant, cursor, limit, reply }).await
    }
}

/// The Writer task's state. Build with [`Writer::new`], run with [`Writer::run`].
pub struct Writer<K: Kv> {
    kv: Arc<K>,
    cfg: WriterConfig,
    rx: mpsc::Receiver<Request>,
    next_seq: u64,
    clock: Box<dyn Fn() -> u64 + Send>,
}

impl<K: Kv> std::fmt::Debug for Writer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("next_seq", &self.next_seq).finish_non_exhaustive()
    }
}

impl<K: Kv> Writer<K> {
    /// A Writer over `kv`, resuming after the stored seq high-water mark, and the
    /// handle senders use. `clock` gives unix milliseconds (the runtime's clock;
    /// tests pass their own).
    ///
    /// # Errors
    /// The engine's error reading the high-water mark, or a corrupt mark.
    pub fn new(
        kv: Arc<K>,
        cfg: WriterConfig,
        clock: impl Fn() -> u64 + Send + 'static,
    ) -> Result<(Writer<K>, WriterHandle), EngineError> {
        let high = seq_high_water(&*kv)?.0;
        let (tx, rx) = mpsc::channel(cfg.queue_depth.max(1));
        Ok((
            Writer {
                kv,
                cfg,
                rx,
                next_seq: high + 1,
                clock: Box::new(clock),
            },
            WriterHandle { tx },
        ))
    }

    /// Runs until every [`WriterHandle`] is dropped (returns `Ok`) or a commit
    /// fails (returns the error after failing that group's requests).
    ///
    /// # Errors
    /// The engine error of the failed commit.
    pub async fn run(mut self) -> Result<(), EngineError> {
        while let Some(first) = self.rx.recv().await {
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
            self.commit_group(group).await?;
        }
        Ok(())
    }

    async fn commit_group(&mut self, group: Vec<Request>) -> Result<(), EngineError> {
        let now_ms = (self.clock)();
        let mut batch = Batch::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(group.len());
        let mut seen: HashMap<Vec<u8>, Seq> = HashMap::new();
        let mut held_touched: HashSet<(TenantOrd, Seq)> = HashSet::new();
        let first_seq = self.next_seq;
        // Dedupe expiry goes first in the batch: an ingest of this group that
        // renews an expired record puts it after the expiry's delete, so the
        // renewed record stays.
        let (expiries, group): (Vec<Request>, Vec<Request>) =
            group.into_iter().partition(|r| matches!(r, Request::ExpireDedupe { .. }));
        for req in expiries.into_iter().chain(group) {
            match req {
                Request::ExpireDedupe { tenant, cursor, limit, reply } => {
                    match crate::expire_dedupe(&*self.kv, tenant, now_ms, cursor.as_ref(), limit) {
                        Ok(page) => {
                            batch.extend(page.batch);
                            answers.push(Answer::Expired(reply, Expired { deleted: page.moved, next: page.next }));
                        }
                        Err(e) => drop(reply.send(Err(WriteError::of(e)))),
                    }
                }
                Request::Release { tenant, seq, rows, reply } => {
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
                    let hook = Hook { tenant: req.tenant, seq, envelope: &req.envelope, dedupe_expires_at_ms: 0 };
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
                        match self.kv.get(Cf::Index, &key) {
                            Ok(Some(v)) => match DedupeValue::decode(&v) {
                                Ok(d) if d.expires_at_ms > now_ms => {
                                    answers.push(Answer::Ingest(reply, Ingested::Duplicate(d.seq)));
                                    continue;
                                }
                                Ok(_) => {} // expired: a new hook
                                Err(e) => {
                                    let _ = reply.send(Err(WriteError::Store(format!("corrupt dedupe record: {e}"))));
                                    continue;
                                }
                            },
                            Ok(None) => {}
                            Err(e) => {
                                let _ = reply.send(Err(WriteError::Store(e.to_string())));
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
                        dedupe_expires_at_ms: now_ms.saturating_add(req.dedupe_ttl_ms.unwrap_or(self.cfg.dedupe_ttl_ms)),
                    };
                    new_ops(&mut batch, &hook, &req.rows, now_ms);
                    answers.push(Answer::Ingest(reply, Ingested::Committed(seq)));
                }
            }
        }
        if self.next_seq > first_seq {
            batch.put(Cf::Meta, SEQ_HIGH_WATER_KEY, encode_seq_high_water(Seq(self.next_seq - 1)));
        }
        if !batch.is_empty() {
            let kv = Arc::clone(&self.kv);
            // fsync blocks: keep it off the async workers.
            let result = tokio::task::spawn_blocking(move || kv.write(batch, Durability::Sync))
                .await
                .unwrap_or_else(|e| Err(EngineError::Backend { backend: "writer", op: "write", message: e.to_string() }));
            if let Err(e) = result {
                let err = WriteError::Store(e.to_string());
                for a in answers {
                    a.fail(&err);
                }
                self.rx.close();
                return Err(e);
            }
        }
        for a in answers {
            a.send();
        }
        Ok(())
    }
}

/// Reads the seq high-water mark (the highest seq committed), 0 for a new store.
///
/// # Errors
/// Engine errors; a corrupt mark.
pub fn seq_high_water(read: &impl Read) -> Result<Seq, EngineError> {
    match read.get(Cf::Meta, SEQ_HIGH_WATER_KEY)? {
        Some(v) => decode_seq_high_water(&v)
            .map_err(|e| EngineError::Corrupt { what: format!("seq high-water mark: {e}") }),
        None => Ok(Seq(0)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeSet;

    use ankusa_engine::memory::MemoryKv;
    use ankusa_engine::{Direction, scan_pages};
    use ankusa_keys::{SinkIx, SourceId, hooks_range};

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
            rows: vec![NewRow { sink: SinkIx(0), lane: None }],
            dedupe_ttl_ms: None,
        }
    }

    fn start(kv: &Arc<MemoryKv>) -> (tokio::task::JoinHandle<Result<(), EngineError>>, WriterHandle) {
        let (writer, handle) = Writer::new(Arc::clone(kv), WriterConfig::default(), || 5_000).unwrap();
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
        drop(handle);
        task.await.unwrap().unwrap();
        assert_eq!(seq_high_water(&*kv).unwrap(), Seq(200));
        let hooks = scan_pages(&*kv, Cf::Hooks, hooks_range(), Direction::Forward, 64).count();
        assert_eq!(hooks, 200);
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        // A new Writer resumes after the mark.
        let (task, handle) = start(&kv);
        assert_eq!(handle.ingest(req(9, None)).await.unwrap(), Ingested::Committed(Seq(201)));
        drop(handle);
        task.await.unwrap().unwrap();
    }

    /// A provider retry is a dedupe hit whether it arrives in the same group or
    /// later, and writes nothing; another source's same id is not a hit.
    #[tokio::test]
    async fn dedupe_hits_write_nothing() {
        let kv = Arc::new(MemoryKv::new());
        let (writer, handle) = Writer::new(Arc::clone(&kv), WriterConfig::default(), || 5_000).unwrap();
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
        assert_eq!(answers, [Ingested::Committed(Seq(1)), Ingested::Duplicate(Seq(1))]);
        let batches = kv.stats().batches;
        assert_eq!(handle.ingest(req(3, Some("evt_1"))).await.unwrap(), Ingested::Duplicate(Seq(1)));
        assert_eq!(kv.stats().batches, batches, "a dedupe hit wrote a batch");
        let mut other = req(4, Some("evt_1"));
        other.envelope.source = SourceId(2);
        assert_eq!(handle.ingest(other).await.unwrap(), Ingested::Committed(Seq(2)));
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
        assert_eq!(handle.ingest(req(1, None)).await.unwrap(), Ingested::Committed(Seq(1)));
        kv.inject_write_failure();
        let err = handle.ingest(req(2, None)).await.unwrap_err();
        assert!(matches!(err, WriteError::Store(ref m) if m.contains("injected")), "{err}");
        assert!(task.await.unwrap().is_err());
        assert_eq!(handle.ingest(req(3, None)).await.unwrap_err(), WriteError::Stopped);
        assert_eq!(seq_high_water(&*kv).unwrap(), Seq(1));
    }

    /// A quarantined hook takes the next seq, writes no dedupe record and is
    /// no dedupe hit; a release and a drop of one hook queued in one group:
    /// the first applies, the second is refused; expiry of dedupe records.
    #[tokio::test]
    async fn quarantine_release_and_drop_go_through_the_writer() {
        let kv = Arc::new(MemoryKv::new());
        kv.write(crate::init_store(), Durability::Sync).unwrap();
        let (writer, handle) = Writer::new(Arc::clone(&kv), WriterConfig::default(), || 5_000).unwrap();
        let task = tokio::spawn(writer.run());
        assert_eq!(handle.ingest(req(1, Some("evt_1"))).await.unwrap(), Ingested::Committed(Seq(1)));
        let q = |n: u64| QuarantineRequest { tenant: TenantOrd(1), envelope: envelope(n, Some("evt_1")), reason: "invalid signature".into() };
        assert_eq!(handle.quarantine(q(2)).await.unwrap(), Seq(2));
        assert_eq!(handle.quarantine(q(3)).await.unwrap(), Seq(3));
        // The quarantined hooks did not touch the first hook's dedupe record.
        let rec = kv.get(Cf::Index, &dedupe_key(TenantOrd(1), SourceId(1), b"evt_1")).unwrap().unwrap();
        assert_eq!(DedupeValue::decode(&rec).unwrap().seq, Seq(1));
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        assert_eq!(kv.counter(&ankusa_keys::counter_key(TenantOrd(1), ankusa_keys::CounterField::Quarantined)).unwrap(), 2);
        // Release and drop of seq 2, and a second release of it, race.
        let rows = vec![NewRow { sink: SinkIx(0), lane: None }];
        let (a, b, c) = tokio::join!(
            handle.release(TenantOrd(1), Seq(2), rows.clone()),
            handle.drop_quarantined(TenantOrd(1), Seq(2)),
            handle.release(TenantOrd(1), Seq(2), rows.clone()),
        );
        let oks = [&a, &b, &c].iter().filter(|r| r.is_ok()).count();
        assert_eq!(oks, 1, "{a:?} {b:?} {c:?}");
        for r in [a, b, c] {
            if let Err(e) = r {
                assert_eq!(e, WriteError::NotQuarantined { tenant: TenantOrd(1), seq: Seq(2) });
            }
        }
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        handle.drop_quarantined(TenantOrd(1), Seq(3)).await.unwrap();
        assert!(kv.get(Cf::Hooks, &ankusa_keys::hook_key(TenantOrd(1), Seq(3))).unwrap().is_none());
        assert_eq!(
            handle.release(TenantOrd(1), Seq(3), rows).await.unwrap_err(),
            WriteError::NotQuarantined { tenant: TenantOrd(1), seq: Seq(3) }
        );
        assert_eq!(kv.counter(&ankusa_keys::counter_key(TenantOrd(1), ankusa_keys::CounterField::Quarantined)).unwrap(), 0);
        assert_eq!(check_invariants(&*kv).unwrap(), vec![]);
        // Expiry at the Writer's clock (5,000): the record expires 7 days later.
        let e = handle.expire_dedupe(TenantOrd(1), None, 10).await.unwrap();
        assert_eq!(e, Expired { deleted: 0, next: None });
        drop(handle);
        task.await.unwrap().unwrap();
        let (writer, handle) = Writer::new(Arc::clone(&kv), WriterConfig::default(), || u64::MAX / 2).unwrap();
        let task = tokio::spawn(writer.run());
        let e = handle.expire_dedupe(TenantOrd(1), None, 10).await.unwrap();
        assert_eq!(e, Expired { deleted: 1, next: None });
        assert!(kv.get(Cf::Index, &dedupe_key(TenantOrd(1), SourceId(1), b"evt_1")).unwrap().is_none());
        // An ingest of the same id is a new hook now.
        assert_eq!(handle.ingest(req(9, Some("evt_1"))).await.unwrap(), Ingested::Committed(Seq(4)));
        drop(handle);
        task.await.unwrap().unwrap();
        assert_eq!(seq_high_water(&*kv).unwrap(), Seq(4));
    }
}
