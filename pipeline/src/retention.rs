//! The retention sweep (docs/design.md section 5, "Retention"): a background task
//! beside the pipeline that reclaims the envelopes and archive entries of hooks
//! nothing refers to any more, once they were received `keep_ms` ago
//! ([`ankusa_queue::retention`]), and the dedupe records that have expired
//! ([`ankusa_queue::expire_dedupe`], through the Writer, the only task that
//! writes ?K).
//!
//! It never holds up dispatch: it is its own task, each page is read and
//! committed on a blocking thread, a round visits every registered tenant in
//! pages of [`RetentionConfig::page`] entries and then sleeps
//! [`RetentionConfig::interval_ms`]. Its deletes are safe beside the pipeline
//! and the Writer without coordination: a hook with no delivery row and no ?Q
//! never gets one again (a revive needs a dead row, a release a ?Q; archive
//! replay makes new hooks), so the read that found it unreferenced cannot be
//! overtaken. Its batches are `Buffered`: a lost one is redone next round.
//!
//! Space: the engines reclaim deleted keys when they compact; the RocksDB
//! backend marks files dense with deletes for compaction
//! (`ankusa_engine_rocksdb`), so a sweep's deletes do not linger on disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ankusa_engine::{Durability, Kv};
use ankusa_keys::TenantOrd;
use ankusa_queue::writer::{StoreFailure, WriteError, WriterHandle};
use ankusa_queue::{Cursor, Registry};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::PipelineError;

/// How the sweep runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Keep a hook this long after its receipt, ms (`retention.keep_ms`).
    pub keep_ms: u64,
    /// Between two rounds, ms (`retention.interval_ms`).
    pub interval_ms: u64,
    /// Archive entries (or dedupe records) examined per page.
    pub page: usize,
    /// Between two rounds of dedupe expiry, ms: at least `interval_ms`
    /// ([`DEDUPE_EXPIRY_MS`] by default, since expiry reads every record).
    pub dedupe_every_ms: u64,
}

/// How often expired dedupe records are swept by default: hourly (records
/// live `dedupe.ttl_ms`, 72 h by default; an expired one only takes space).
pub const DEDUPE_EXPIRY_MS: u64 = 3_600_000;

impl RetentionConfig {
    /// The sweep of `retention.keep_ms` and `retention.interval_ms`, pages of
    /// 256, dedupe expiry hourly (or every round when rounds are rarer).
    pub fn new(keep_ms: u64, interval_ms: u64) -> RetentionConfig {
        RetentionConfig {
            keep_ms,
            interval_ms,
            page: 256,
            dedupe_every_ms: DEDUPE_EXPIRY_MS.max(interval_ms),
        }
    }
}

/// What one round reclaimed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Envelopes (with their archive entries) deleted.
    pub hooks: usize,
    /// Expired dedupe records deleted.
    pub dedupe: usize,
}

/// One round of envelope retention over every tenant the store has
/// registered, at `now_ms`: pages of `cfg.page`, each read and committed on a
/// blocking thread. `stop` is asked before each page: a round that must stop
/// (the node is shutting down) ends there, and the next round starts over.
///
/// # Errors
/// A store failure.
pub async fn retention_round<K: Kv>(
    kv: &Arc<K>,
    cfg: &RetentionConfig,
    now_ms: u64,
    stop: impl Fn() -> bool,
) -> Result<usize, PipelineError> {
    let cutoff = now_ms.saturating_sub(cfg.keep_ms);
    let tenants = tenants(kv).await?;
    let mut deleted = 0;
    for tenant in tenants {
        let mut cursor: Option<Cursor> = None;
        loop {
            if stop() {
                return Ok(deleted);
            }
            let kv = Arc::clone(kv);
            let page = cfg.page.max(1);
            let c = cursor.take();
            let (moved, next) = tokio::task::spawn_blocking(move || -> Result<_, PipelineError> {
                let p = ankusa_queue::retention(&*kv, tenant, cutoff, c.as_ref(), page)?;
                if !p.batch.is_empty() {
                    kv.write(p.batch, Durability::Buffered)?;
                }
                Ok((p.moved, p.next))
            })
            .await
            .map_err(|e| {
                PipelineError::Store(ankusa_engine::EngineError::Backend {
                    backend: "retention",
                    op: "join",
                    kind: ankusa_engine::ErrorKind::Other,
                    message: e.to_string(),
                })
            })??;
            deleted += moved;
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
    }
    Ok(deleted)
}

/// One round of dedupe expiry over every registered tenant, through the
/// Writer (at its clock); `stop` as in [`retention_round`].
///
/// # Errors
/// [`WriteError`] from the Writer (a store failure, or it has stopped).
pub async fn dedupe_round<K: Kv>(
    kv: &Arc<K>,
    writer: &WriterHandle,
    page: usize,
    stop: impl Fn() -> bool,
) -> Result<usize, WriteError> {
    let tenants = tenants(kv)
        .await
        .map_err(|e| WriteError::Store(StoreFailure::Other(Arc::new(e))))?;
    let mut deleted = 0;
    for tenant in tenants {
        let mut cursor = None;
        loop {
            if stop() {
                return Ok(deleted);
            }
            let e = writer.expire_dedupe(tenant, cursor, page.max(1)).await?;
            deleted += e.deleted;
            match e.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
    }
    Ok(deleted)
}

async fn tenants<K: Kv>(kv: &Arc<K>) -> Result<Vec<TenantOrd>, PipelineError> {
    let kv = Arc::clone(kv);
    let reg = tokio::task::spawn_blocking(move || Registry::read(&*kv))
        .await
        .map_err(|e| {
            PipelineError::Store(ankusa_engine::EngineError::Backend {
                backend: "retention",
                op: "join",
                kind: ankusa_engine::ErrorKind::Other,
                message: e.to_string(),
            })
        })??;
    Ok(reg.tenants.values().copied().collect())
}

/// What the sweep has reclaimed since the process started (the
/// `ankusa_retention_hooks_deleted_total` and
/// `ankusa_retention_dedupe_expired_total` counters).
#[derive(Debug, Default)]
pub struct RetentionStats {
    /// Envelopes (with their archive entries) deleted.
    pub hooks_deleted: Arc<AtomicU64>,
    /// Expired dedupe records deleted.
    pub dedupe_expired: Arc<AtomicU64>,
}

/// Runs the sweep until `shutdown` turns true: a round, then `interval_ms` of
/// sleep (a shutdown ends the sleep at once, and a round in progress after
/// its current page: the task holds a Writer handle, which the Writer waits
/// for before it stops). Dedupe expiry runs every `dedupe_every_ms`. `clock` gives unix ms;
/// `stats` counts what was reclaimed.
///
/// # Errors
/// A store failure (the node takes its crash path). A Writer that has stopped
/// ends the task with `Ok` (the node is stopping).
pub async fn run<K: Kv>(
    kv: Arc<K>,
    writer: WriterHandle,
    cfg: RetentionConfig,
    clock: impl Fn() -> u64 + Send + Sync + 'static,
    stats: RetentionStats,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), PipelineError> {
    let mut last_dedupe: Option<u64> = None;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let now = clock();
        let stop = {
            let shutdown = shutdown.clone();
            move || *shutdown.borrow()
        };
        let hooks = retention_round(&kv, &cfg, now, &stop).await?;
        let mut dedupe = 0;
        if last_dedupe.is_none_or(|at| now.saturating_sub(at) >= cfg.dedupe_every_ms) {
            match dedupe_round(&kv, &writer, cfg.page, &stop).await {
                Ok(n) => dedupe = n,
                Err(WriteError::Stopped) => return Ok(()),
                Err(e) => warn!(error = %e, "dedupe expiry failed; retried next round"),
            }
            last_dedupe = Some(now);
        }
        stats
            .hooks_deleted
            .fetch_add(hooks as u64, Ordering::Relaxed);
        stats
            .dedupe_expired
            .fetch_add(dedupe as u64, Ordering::Relaxed);
        if hooks + dedupe > 0 {
            info!(
                hooks,
                dedupe,
                keep_ms = cfg.keep_ms,
                "retention: reclaimed delivered hooks and expired dedupe records"
            );
        } else {
            debug!("retention: nothing to reclaim");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(cfg.interval_ms.max(1))) => {}
            _ = shutdown.changed() => {}
        }
    }
}
