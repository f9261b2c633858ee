//! The committer (docs/design.md section 5): the outcomes of every call that
//! finished since the last step become row transitions (delivered, retry,
//! dead letter, orphan), built against the live engine at commit time (ADR
//! 0004 4.5: a release reads the lane's next member in the same step as it
//! writes, with no other lane work between) and committed as one
//! `Buffered` batch: a group commit, while the calls of other rows go on.
//! The breakers are decided here too.

use ankusa_engine::{Batch, Cf, Kv};
use ankusa_keys::{DeliveryRow, delivery_key};
use ankusa_queue::metrics::AttemptOutcome;
use ankusa_queue::{Origin, QueueError, RowId};
use ankusa_sinks::Outcome;
use rand::Rng;
use tracing::{debug, info, warn};

use crate::PipelineError;
use crate::breaker::Published;
use crate::calls::Done;
use crate::dispatcher::Dispatcher;

impl<K: Kv> Dispatcher<K> {
    /// Turns finished calls into row transitions and commits them as one
    /// batch (the buffering sinks were flushed before: `calls::flush_sinks`).
    pub(crate) fn commit(&mut self, done: Vec<Done>) -> Result<(), PipelineError> {
        let now = self.now();
        let mut batch = Batch::new();
        let mut rng = rand::rng();
        let delivery = std::sync::Arc::clone(&self.status.delivery);
        // The delivered rows' (kind, received_at), for the ingest-to-delivery
        // latency once their batch is written (the buffer is kept).
        let mut delivered = std::mem::take(&mut self.delivered_scratch);
        for d in done {
            let slot = self.in_flight.entry(d.key).or_default();
            *slot = slot.saturating_sub(1);
            self.in_flight_total = self.in_flight_total.saturating_sub(1);
            self.in_flight_bytes = self.in_flight_bytes.saturating_sub(d.size);
            let built = self.outcome_batch(&d, now, &mut rng);
            match built {
                Ok((b, outcome)) => {
                    batch.extend(b);
                    d.span.record("outcome", outcome.label());
                    d.span
                        .record("duration_ms", d.elapsed.as_secs_f64() * 1000.0);
                    if let Some(m) = delivery.kind(d.kind) {
                        m.attempt(outcome);
                        m.call_latency.observe_duration(d.elapsed);
                        if outcome == AttemptOutcome::Delivered {
                            delivered.push((d.kind, d.received_at_ms));
                        }
                    }
                }
                Err(QueueError::NotInState { row, .. } | QueueError::MissingRow { row }) => {
                    // Purged or dead-lettered by an admin while the call ran.
                    d.span.record("outcome", "dropped");
                    d.span
                        .record("duration_ms", d.elapsed.as_secs_f64() * 1000.0);
                    debug!(%row, "outcome of a row that has moved on: dropped");
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.publish_breakers();
        self.write(batch)?;
        if !delivered.is_empty() {
            let committed = self.now();
            for (kind, received) in delivered.drain(..) {
                if let Some(m) = delivery.kind(kind) {
                    m.ingest_to_delivery
                        .observe_ms(committed.saturating_sub(received));
                }
            }
        }
        self.delivered_scratch = delivered;
        Ok(())
    }

    /// Copies the breakers' failures and open times for the admin API.
    fn publish_breakers(&self) {
        if let Ok(mut m) = self.status.breakers.write() {
            m.clear();
            m.extend(self.breakers.iter().map(|(k, b)| {
                let kind = self
                    .routes
                    .sinks
                    .get(&(k.1, k.2))
                    .map_or("", |r| r.sink.kind());
                (
                    *k,
                    Published {
                        failures: b.failures,
                        open_until_ms: b.open_until_ms,
                        open: b.open,
                        kind,
                    },
                )
            }));
        }
    }

    /// The row transition of one finished call, and how the attempt ended
    /// (`ankusa_dispatch_attempts_total`'s outcome).
    fn outcome_batch(
        &mut self,
        d: &Done,
        now: u64,
        rng: &mut impl Rng,
    ) -> Result<(Batch, AttemptOutcome), QueueError> {
        // The sink entry's retry policy decides an HTTP status (retry,
        // permanent, sink gone) and a retry's next attempt (docs/design.md
        // section 5, "Retry policy").
        let policy = self.routes.retry_policy(d.key.1, d.key.2, self.retry);
        let first = match d.outcome {
            Outcome::Retry { .. } | Outcome::HttpStatus { .. } => {
                self.first_attempt_ms(d.row)?.unwrap_or(now)
            }
            _ => now,
        };
        let outcome = policy.resolve(d.outcome.clone(), first, now);
        let breaker = self.breakers.entry(d.key).or_default();
        if d.trial {
            breaker.trial_in_flight = false;
        }
        // A retired source's attempt that did not deliver is not retried.
        if !matches!(d.outcome, Outcome::Ok)
            && let Some(reason) = self.retiring.get(&d.key.1)
        {
            warn!(row = %d.row, "an attempt of a retired source failed: dead-lettered");
            let batch = ankusa_queue::dead_letter_attempted(&*self.kv, d.row, reason, now)?;
            *self.retired_dead.entry(d.key.1).or_default() += 1;
            return Ok((batch, AttemptOutcome::Retired));
        }
        match &outcome {
            Outcome::Ok => {
                if breaker.answered() {
                    info!(row = %d.row, "breaker closed: the trial delivery succeeded");
                }
                debug!(row = %d.row, "delivered");
                Ok((
                    ankusa_queue::delivered(&*self.kv, d.row, now)?,
                    AttemptOutcome::Delivered,
                ))
            }
            Outcome::Retry { reason, after } => {
                if breaker.failed(d.site, d.trial, &self.breaker, now) {
                    warn!(row = %d.row, failures = breaker.failures, lanes = breaker.sites.len(), open_ms = self.breaker.open_ms, "breaker open for this sink");
                }
                let attempts = d.attempts_before + 1;
                let Some(due) = policy.next_attempt(attempts, *after, first, now, rng) else {
                    warn!(row = %d.row, %reason, "retry horizon passed: dead-lettered");
                    let b = ankusa_queue::dead_letter_attempted(
                        &*self.kv,
                        d.row,
                        &format!("retry horizon passed: {reason}"),
                        now,
                    )?;
                    return Ok((b, AttemptOutcome::HorizonPassed));
                };
                let delay = due.saturating_sub(now);
                warn!(row = %d.row, attempt = attempts, delay_ms = delay, %reason, "delivery failed; will retry");
                self.next_wake_ms = Some(self.next_wake_ms.map_or(due, |w| w.min(due)));
                Ok((
                    ankusa_queue::retry(&*self.kv, d.row, due, reason, now)?,
                    AttemptOutcome::Retry,
                ))
            }
            Outcome::Permanent { reason } => {
                breaker.answered();
                warn!(row = %d.row, %reason, "permanent failure: dead-lettered");
                Ok((
                    ankusa_queue::dead_letter_attempted(
                        &*self.kv,
                        d.row,
                        &format!("permanent: {reason}"),
                        now,
                    )?,
                    AttemptOutcome::Permanent,
                ))
            }
            Outcome::SinkGone { reason } => {
                warn!(row = %d.row, %reason, "sink gone: dead-lettered");
                Ok((
                    ankusa_queue::dead_letter_attempted(
                        &*self.kv,
                        d.row,
                        &format!("sink gone: {reason}"),
                        now,
                    )?,
                    AttemptOutcome::SinkGone,
                ))
            }
            Outcome::SourceGone { reason } => {
                warn!(row = %d.row, %reason, "source gone: dead-lettered as an orphan");
                Ok((
                    ankusa_queue::orphan(
                        &*self.kv,
                        d.row,
                        Origin::InFlight,
                        &format!("source gone: {reason}"),
                        now,
                    )?,
                    AttemptOutcome::SourceGone,
                ))
            }
            Outcome::HttpStatus { .. } => unreachable!("resolved by the retry policy above"),
        }
    }

    /// The first attempt time of `row` (None when the row has none or is gone).
    fn first_attempt_ms(&self, row: RowId) -> Result<Option<u64>, QueueError> {
        let raw = self
            .kv
            .get(Cf::Deliveries, &delivery_key(row.tenant, row.seq, row.sink))?;
        Ok(raw
            .as_deref()
            .map(DeliveryRow::decode)
            .transpose()?
            .and_then(|r| r.first_attempt_at_ms))
    }
}
