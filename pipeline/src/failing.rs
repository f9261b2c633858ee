//! The failing sink entries (docs/design.md section 5, "Notifications"):
//! per (source, sink entry), the run of attempts that all failed since the
//! last one that was answered. The committer records each outcome
//! ([`FailingSinks::failed`], [`FailingSinks::answered`]); the dispatcher
//! pauses an entry whose run has lasted its `auto_pause_after_ms`
//! ([`FailingSinks::due_for_pause`]); the runs are published for the
//! `sink_failing` notification ([`crate::events::PipelineEvents::failing`]).
//!
//! What fails: every attempt that did not deliver because of the sink (a
//! retry, the retry horizon, a permanent refusal, the sink gone): a receiver
//! whose token was rotated answers 401 to everything and loses as many hooks
//! as one that is down. What answers: a delivery. A source gone, or a
//! retired source's attempt, is neither. Unlike the breaker, the run is per
//! sink entry across tenants: the pause it leads to is the entry's.
//!
//! A quiet spell ends a run too: when no attempt of the entry failed for
//! longer than [`quiet_ms`] of it, the next failure starts a new run. A sink
//! with rows to deliver is attempted at least that often (a retry waits at
//! most `max_ms`, or a Retry-After's `retry_after_max_ms`; a parked row gets
//! its trial after `breaker.open_ms`), so only an entry that had nothing to
//! deliver is quiet that long, and one failure yesterday and one today is
//! not "failing for a day".

use std::collections::HashMap;

use ankusa_keys::{SinkIx, SourceId};

use crate::events::{FailingRun, PipelineEvents};
use crate::{BreakerPolicy, RetryPolicy};

/// The longest an error is kept in a run (and so in a pause's reason): an
/// HTTP sink's reason carries a body excerpt.
const ERROR_CHARS: usize = 200;

/// How long an entry with `retry` and `breaker` may go without an attempt
/// while it still has rows to deliver, twice over: a longer quiet spell ends
/// a failing run.
pub(crate) fn quiet_ms(retry: &RetryPolicy, breaker: &BreakerPolicy) -> u64 {
    retry
        .max_ms
        .max(retry.retry_after_max_ms.unwrap_or(retry.max_ms))
        .max(breaker.open_ms)
        .saturating_mul(2)
}

/// The failing runs of the node's sink entries.
#[derive(Debug, Default)]
pub(crate) struct FailingSinks {
    runs: HashMap<(SourceId, SinkIx), FailingRun>,
    /// A run began, ended or moved since the last publish.
    changed: bool,
}

impl FailingSinks {
    /// An attempt of `key` failed at `now` with `error`; a run whose last
    /// failure is more than `quiet` ms old starts again.
    pub(crate) fn failed(&mut self, key: (SourceId, SinkIx), now: u64, error: &str, quiet: u64) {
        let error: String = error.chars().take(ERROR_CHARS).collect();
        self.changed = true;
        match self.runs.get_mut(&key) {
            Some(run) if now.saturating_sub(run.last_ms) <= quiet => {
                run.last_ms = run.last_ms.max(now);
                run.attempts += 1;
                run.last_error = error;
            }
            _ => {
                self.runs.insert(
                    key,
                    FailingRun {
                        since_ms: now,
                        last_ms: now,
                        attempts: 1,
                        last_error: error,
                    },
                );
            }
        }
    }

    /// An attempt of `key` was answered: its run, if any, ends.
    pub(crate) fn answered(&mut self, key: (SourceId, SinkIx)) {
        if self.runs.remove(&key).is_some() {
            self.changed = true;
        }
    }

    /// The runs that have lasted at least their entry's `auto_pause_after_ms`
    /// (`after`) by `now`, in key order, with it.
    pub(crate) fn due_for_pause(
        &self,
        after: &HashMap<(SourceId, SinkIx), u64>,
        now: u64,
    ) -> Vec<((SourceId, SinkIx), FailingRun, u64)> {
        let mut out: Vec<_> = self
            .runs
            .iter()
            .filter_map(|(key, run)| {
                let ms = *after.get(key)?;
                (now.saturating_sub(run.since_ms) >= ms).then(|| (*key, run.clone(), ms))
            })
            .collect();
        out.sort_by_key(|(k, _, _)| *k);
        out
    }

    /// Publishes the runs when they changed.
    pub(crate) fn publish(&mut self, events: &PipelineEvents) {
        if std::mem::take(&mut self.changed) {
            events.set_failing(&self.runs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: (SourceId, SinkIx) = (SourceId(1), SinkIx(0));

    #[test]
    fn a_run_lasts_from_its_first_failure_until_an_answer() {
        let mut f = FailingSinks::default();
        let after = HashMap::from([(KEY, 1_000)]);
        f.failed(KEY, 10_000, "HTTP 503", 60_000);
        f.failed(KEY, 10_500, "HTTP 502", 60_000);
        assert!(f.due_for_pause(&after, 10_999).is_empty());
        let due = f.due_for_pause(&after, 11_000);
        assert_eq!(due.len(), 1);
        assert_eq!(
            (
                due[0].1.since_ms,
                due[0].1.attempts,
                due[0].1.last_error.as_str()
            ),
            (10_000, 2, "HTTP 502")
        );
        f.answered(KEY);
        assert!(f.due_for_pause(&after, 20_000).is_empty());
        // An entry without auto_pause_after_ms is never due.
        f.failed(KEY, 30_000, "x", 60_000);
        assert!(f.due_for_pause(&HashMap::new(), 1 << 60).is_empty());
    }

    #[test]
    fn a_quiet_spell_starts_a_new_run() {
        let mut f = FailingSinks::default();
        f.failed(KEY, 0, "a", 1_000);
        f.failed(KEY, 5_000, "b", 1_000);
        let events = PipelineEvents::default();
        f.publish(&events);
        assert_eq!(events.failing()[0].1.since_ms, 5_000);
        assert_eq!(events.failing()[0].1.attempts, 1);
    }

    #[test]
    fn quiet_is_twice_the_longest_an_entry_waits_between_attempts() {
        let retry = RetryPolicy {
            max_ms: 600_000,
            retry_after_max_ms: Some(900_000),
            ..RetryPolicy::default()
        };
        assert_eq!(quiet_ms(&retry, &BreakerPolicy::default()), 1_800_000);
    }
}
