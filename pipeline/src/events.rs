//! What the pipeline reports for the relay's notifications (docs/design.md
//! section 5, "Notifications"): breakers that open and close, sink entries
//! paused by `auto_pause_after_ms`, the dead letters of each sink entry
//! (counted, with a few samples, never one record per hook), and the sink
//! entries whose every attempt is failing. [`PipelineEvents`] is shared with
//! whoever turns them into notifications (`ankusa serve`); the pipeline only
//! records, in memory and bounded, and never waits on the reader: a
//! notification can never hold a delivery back.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::RowId;
use tokio::sync::Notify;

/// Events kept for the reader at most; past it the oldest are dropped and
/// counted ([`PipelineEvents::take`]). Breakers open and close at most
/// every `breaker.open_ms` per sink entry and tenant, so only a reader that
/// stopped reading reaches it.
const EVENTS_KEPT: usize = 4096;

/// Dead-letter samples kept per sink entry and tenant between two reads
/// (the configuration's most, `notify.dead_letter_samples`).
pub const DEAD_LETTER_SAMPLES_KEPT: usize = 20;

/// One thing that happened to a sink entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipelineEvent {
    /// The breaker of (tenant, source, sink entry) opened (or opened again
    /// after a failed half-open trial).
    BreakerOpened {
        /// The tenant.
        tenant: TenantOrd,
        /// The source.
        source: SourceId,
        /// The sink entry's slot.
        sink: SinkIx,
        /// Consecutive failed attempts when it opened.
        failures: u32,
        /// When it half-opens, unix ms.
        open_until_ms: u64,
        /// The last attempt's error.
        last_error: String,
        /// When, unix ms.
        at_ms: u64,
    },
    /// The breaker of (tenant, source, sink entry) closed: an attempt was
    /// answered.
    BreakerClosed {
        /// The tenant.
        tenant: TenantOrd,
        /// The source.
        source: SourceId,
        /// The sink entry's slot.
        sink: SinkIx,
        /// When, unix ms.
        at_ms: u64,
    },
    /// A sink entry was paused because every attempt failed for its
    /// `auto_pause_after_ms` (docs/design.md section 5, "Pause").
    SinkAutoPaused {
        /// The source.
        source: SourceId,
        /// The sink entry's slot.
        sink: SinkIx,
        /// The first failed attempt of the run, unix ms.
        failing_since_ms: u64,
        /// The pause's reason, as the admin API shows it.
        reason: String,
        /// When, unix ms.
        at_ms: u64,
    },
}

/// The dead letters of one (tenant, source, sink entry) since the last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterTally {
    /// How many rows.
    pub count: u64,
    /// The first [`DEAD_LETTER_SAMPLES_KEPT`] of them: the row and its
    /// dead-letter reason.
    pub samples: Vec<(RowId, String)>,
}

/// A sink entry whose every attempt has failed since `since_ms` (no attempt
/// answered: delivered, in the breaker's words; a 4xx is a failure here,
/// docs/design.md section 5, "Notifications").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailingRun {
    /// The run's first failed attempt, unix ms.
    pub since_ms: u64,
    /// Its last failed attempt, unix ms.
    pub last_ms: u64,
    /// Failed attempts in the run.
    pub attempts: u64,
    /// The last attempt's error.
    pub last_error: String,
}

#[derive(Debug, Default)]
struct Book {
    events: VecDeque<PipelineEvent>,
    lost: u64,
    dead: BTreeMap<(TenantOrd, SourceId, SinkIx), DeadLetterTally>,
    failing: HashMap<(SourceId, SinkIx), FailingRun>,
}

/// The pipeline's reports, shared by the pipeline (which records) and a
/// reader (which takes). Cloning shares them.
#[derive(Clone, Debug, Default)]
pub struct PipelineEvents {
    book: Arc<Mutex<Book>>,
    changed: Arc<Notify>,
    auto_paused: Arc<AtomicU64>,
}

impl PipelineEvents {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the events recorded since the last call, oldest first, and how
    /// many were dropped because the reader fell [`EVENTS_KEPT`] behind.
    pub fn take(&self) -> (Vec<PipelineEvent>, u64) {
        let mut b = self.book();
        let lost = std::mem::take(&mut b.lost);
        (b.events.drain(..).collect(), lost)
    }

    /// Takes the dead letters counted since the last call, per (tenant,
    /// source, sink entry).
    pub fn take_dead_letters(&self) -> BTreeMap<(TenantOrd, SourceId, SinkIx), DeadLetterTally> {
        std::mem::take(&mut self.book().dead)
    }

    /// The sink entries whose every attempt is failing now, as of the last
    /// outcome commit.
    pub fn failing(&self) -> Vec<((SourceId, SinkIx), FailingRun)> {
        let mut out: Vec<_> = self
            .book()
            .failing
            .iter()
            .map(|(k, r)| (*k, r.clone()))
            .collect();
        out.sort_by_key(|(k, _)| *k);
        out
    }

    /// Sink entries paused by `auto_pause_after_ms` since the start (the
    /// `ankusa_dispatch_auto_paused_total` counter).
    pub fn auto_paused_total(&self) -> u64 {
        self.auto_paused.load(Ordering::Relaxed)
    }

    /// Waits until something was recorded since the last wait (one wake-up
    /// is kept for a reader that was not waiting).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    pub(crate) fn push(&self, event: PipelineEvent) {
        if matches!(event, PipelineEvent::SinkAutoPaused { .. }) {
            self.auto_paused.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut b = self.book();
            if b.events.len() >= EVENTS_KEPT {
                b.events.pop_front();
                b.lost += 1;
            }
            b.events.push_back(event);
        }
        self.changed.notify_one();
    }

    /// Counts a dead letter of `row` (of `source`) with `reason`.
    pub(crate) fn dead_lettered(&self, source: SourceId, row: RowId, reason: &str) {
        let mut b = self.book();
        let t = b.dead.entry((row.tenant, source, row.sink)).or_default();
        t.count += 1;
        if t.samples.len() < DEAD_LETTER_SAMPLES_KEPT {
            t.samples.push((row, reason.to_owned()));
        }
    }

    /// Replaces the published failing runs.
    pub(crate) fn set_failing(&self, runs: &HashMap<(SourceId, SinkIx), FailingRun>) {
        self.book().failing.clone_from(runs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(at_ms: u64) -> PipelineEvent {
        PipelineEvent::BreakerClosed {
            tenant: TenantOrd(1),
            source: SourceId(1),
            sink: SinkIx(0),
            at_ms,
        }
    }

    #[test]
    fn a_reader_that_falls_behind_loses_the_oldest_and_is_told() {
        let e = PipelineEvents::default();
        for at in 0..EVENTS_KEPT as u64 + 3 {
            e.push(closed(at));
        }
        let (got, lost) = e.take();
        assert_eq!((got.len(), lost), (EVENTS_KEPT, 3));
        assert_eq!(got[0], closed(3));
        assert_eq!(e.take(), (Vec::new(), 0));
    }

    #[test]
    fn dead_letters_are_counted_with_a_few_samples() {
        let e = PipelineEvents::default();
        for seq in 0..30 {
            let row = RowId::new(TenantOrd(1), ankusa_keys::Seq(seq), SinkIx(0));
            e.dead_lettered(SourceId(2), row, "permanent: HTTP 400");
        }
        let taken = e.take_dead_letters();
        let t = &taken[&(TenantOrd(1), SourceId(2), SinkIx(0))];
        assert_eq!(t.count, 30);
        assert_eq!(t.samples.len(), DEAD_LETTER_SAMPLES_KEPT);
        assert!(e.take_dead_letters().is_empty());
    }
}
