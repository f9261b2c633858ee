//! The committer (docs/design.md section 5): the outcomes of every call that
//! finished since the last step become row transitions (delivered, retry,
//! dead letter, orphan), built against the live engine at commit time (ADR
//! 0004 4.5: a release reads the lane's next member in the same step as it
//! writes, with no other lane work between) and committed as one
//! `Buffered` batch: a group commit, while the calls of other rows go on.
//! The breakers are decided here too. Each attempt's entry of the row's
//! attempt log (docs/design.md section 3, "The attempt log") goes in with
//! its transition, built from the call's `Done`. The stage's own state is the buffer of
//! delivered rows ([`Committer`]); it frees the call slots ([`Slots`]) and
//! decides the breakers ([`BreakerBook`]) it is handed.

use ankusa_engine::{Batch, Cf, Kv};
use ankusa_keys::{AttemptRecord, DeliveryRow, delivery_key};
use ankusa_lanes::OnDeadHead;
use ankusa_queue::metrics::AttemptOutcome;
use ankusa_queue::{LogAttempt, Origin, QueueError, RowId};
use ankusa_sinks::{Outcome, Response};
use rand::Rng;
use tracing::{debug, info, warn};

use crate::PipelineError;
use crate::breaker::BreakerBook;
use crate::calls::Done;
use crate::env::{Env, wake_at};
use crate::events::{PipelineEvent, PipelineEvents};
use crate::failing::{FailingSinks, quiet_ms};
use crate::retire::Retirements;
use crate::slots::Slots;

/// The committer's own state: the buffer of delivered rows (sink kind,
/// received_at), kept between commits.
#[derive(Default)]
pub(crate) struct Committer {
    delivered: Vec<(&'static str, u64)>,
}

/// The state of other stages a commit changes: the slots it frees, the
/// breakers it decides, the retirements it counts, the wake time of the rows
/// it reschedules, the failing runs it extends or ends, and the reports it
/// makes for notifications (docs/design.md section 5, "Notifications").
pub(crate) struct Decide<'a> {
    pub(crate) slots: &'a mut Slots,
    pub(crate) breakers: &'a mut BreakerBook,
    pub(crate) retire: &'a mut Retirements,
    pub(crate) wake: &'a mut Option<u64>,
    pub(crate) failing: &'a mut FailingSinks,
    pub(crate) events: &'a PipelineEvents,
}

impl Committer {
    /// Turns finished calls into row transitions and commits them as one
    /// batch (the buffering sinks were flushed before: `calls::flush_sinks`).
    pub(crate) fn commit<K: Kv>(
        &mut self,
        env: &Env<K>,
        done: Vec<Done>,
        st: &mut Decide<'_>,
    ) -> Result<(), PipelineError> {
        let now = env.now();
        let mut batch = Batch::new();
        let mut rng = rand::rng();
        let delivery = st.breakers.delivery();
        // The delivered rows' (kind, received_at), for the ingest-to-delivery
        // latency once their batch is written (the buffer is kept).
        let mut delivered = std::mem::take(&mut self.delivered);
        for mut d in done {
            st.slots.free(d.key, d.size);
            let response = d.response.take();
            let built = outcome_batch(env, st, &d, response, now, &mut rng);
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
        st.failing.publish(st.events);
        st.breakers.publish(|source, sink| {
            env.routes
                .sinks
                .get(&(source, sink))
                .map_or("", |r| r.sink.kind())
        });
        env.write(batch)?;
        if !delivered.is_empty() {
            let committed = env.now();
            for (kind, received) in delivered.drain(..) {
                if let Some(m) = delivery.kind(kind) {
                    m.ingest_to_delivery
                        .observe_ms(committed.saturating_sub(received));
                }
            }
        }
        self.delivered = delivered;
        Ok(())
    }
}

/// The reason an outcome carries, for the attempt log's `error`: what the
/// sink said (a broker's error text, `HTTP 503 ...: <excerpt>`); `None` for
/// a delivery.
fn reason_of(outcome: &Outcome) -> Option<&str> {
    match outcome {
        Outcome::Ok => None,
        Outcome::Retry { reason, .. }
        | Outcome::Permanent { reason }
        | Outcome::SinkGone { reason }
        | Outcome::SourceGone { reason }
        | Outcome::HttpStatus { reason, .. } => Some(reason),
    }
}

/// The attempt log's entry of a finished call that ended as `ended`, when
/// the log is on (docs/design.md section 3, "The attempt log").
fn attempt_record<K: Kv>(
    env: &Env<K>,
    d: &Done,
    response: Option<&Response>,
    ended: AttemptOutcome,
) -> Option<AttemptRecord> {
    if !env.attempt_log.enabled {
        return None;
    }
    let max_body = env.attempt_log.max_body_bytes;
    Some(AttemptRecord {
        at_ms: d.at_ms,
        duration_ms: u64::try_from(d.elapsed.as_millis()).unwrap_or(u64::MAX),
        outcome: ended.label().to_owned(),
        status: response.map(|r| r.status),
        error: reason_of(&d.outcome).map(str::to_owned),
        headers: response.map_or_else(Vec::new, |r| {
            r.headers
                .iter()
                .map(|(n, v)| (n.as_bytes().to_vec(), v.clone()))
                .collect()
        }),
        body: response.map_or_else(Vec::new, |r| r.body[..r.body.len().min(max_body)].to_vec()),
        body_truncated: response.is_some_and(|r| r.body_truncated || r.body.len() > max_body),
    })
}

/// `record` for a transition's attempt log, keeping `keep` attempts.
fn log_of(record: &Option<AttemptRecord>, keep: u32) -> Option<LogAttempt<'_>> {
    record.as_ref().map(|record| LogAttempt { record, keep })
}

/// The row transition of one finished call, and how the attempt ended
/// (`ankusa_dispatch_attempts_total`'s outcome), with the attempt's entry of
/// the row's attempt log in the same batch.
fn outcome_batch<K: Kv>(
    env: &Env<K>,
    st: &mut Decide<'_>,
    d: &Done,
    response: Option<Response>,
    now: u64,
    rng: &mut impl Rng,
) -> Result<(Batch, AttemptOutcome), QueueError> {
    let kv = &*env.kv;
    let keep = env.attempt_log.max_attempts;
    let record = |ended| attempt_record(env, d, response.as_ref(), ended);

    // The sink entry's retry policy decides an HTTP status (retry,
    // permanent, sink gone) and a retry's next attempt (docs/design.md
    // section 5, "Retry policy").
    let policy = env.routes.retry_policy(d.key.1, d.key.2, env.retry);
    // A dead-lettered head of a `dead_letter: hold` entry holds its lane
    // (ADR 0004 section 8); every row such an entry has in flight is a head.
    let on_dead = env.routes.on_dead_head(d.key.1, d.key.2);
    let first = match d.outcome {
        Outcome::Retry { .. } | Outcome::HttpStatus { .. } => {
            first_attempt_ms(kv, d.row)?.unwrap_or(now)
        }
        _ => now,
    };
    let outcome = policy.resolve(d.outcome.clone(), first, now);
    // The entry's failing run (docs/design.md section 5, "Notifications"):
    // a delivery ends it, any other answer of the sink extends it.
    let entry = (d.key.1, d.key.2);
    if st.retire.reason(d.key.1).is_none() && d.sink_called {
        match &outcome {
            Outcome::Ok => st.failing.answered(entry),
            Outcome::Retry { reason, .. }
            | Outcome::Permanent { reason }
            | Outcome::SinkGone { reason } => {
                st.failing
                    .failed(entry, now, reason, quiet_ms(&policy, &env.breaker));
            }
            Outcome::SourceGone { .. } | Outcome::HttpStatus { .. } => {}
        }
    }
    let breaker = st.breakers.entry(d.key);
    if d.trial {
        breaker.trial_in_flight = false;
    }
    // A retired source's attempt that did not deliver is not retried.
    if !matches!(d.outcome, Outcome::Ok)
        && let Some(reason) = st.retire.reason(d.key.1)
    {
        warn!(row = %d.row, dead_letter = %env.dlq_id(d.row), "an attempt of a retired source failed: dead-lettered");
        let r = record(AttemptOutcome::Retired);
        // A retired source's lanes are released: nothing comes after them.
        let batch = ankusa_queue::dead_letter_logged(
            kv,
            d.row,
            reason,
            now,
            log_of(&r, keep),
            OnDeadHead::Release,
        )?;
        st.retire.count_dead(d.key.1);
        return Ok((batch, AttemptOutcome::Retired));
    }
    match &outcome {
        Outcome::Ok => {
            if breaker.answered() {
                info!(row = %d.row, "breaker closed: the trial delivery succeeded");
                st.events.push(closed(d, now));
            }
            debug!(row = %d.row, "delivered");
            let r = record(AttemptOutcome::Delivered);
            Ok((
                ankusa_queue::delivered_logged(kv, d.row, now, log_of(&r, keep))?,
                AttemptOutcome::Delivered,
            ))
        }
        Outcome::Retry { reason, after } => {
            // Reported when it opens, not when a failed half-open trial
            // opens it again: it never closed in between.
            let was_open = breaker.open;
            // A transform that could not run is no failure of the sink.
            if d.sink_called && breaker.failed(d.site, d.trial, &env.breaker, now) {
                warn!(row = %d.row, failures = breaker.failures, lanes = breaker.sites.len(), open_ms = env.breaker.open_ms, "breaker open for this sink");
            }
            if breaker.open && !was_open {
                st.events.push(PipelineEvent::BreakerOpened {
                    tenant: d.key.0,
                    source: d.key.1,
                    sink: d.key.2,
                    failures: breaker.failures,
                    open_until_ms: breaker.open_until_ms,
                    last_error: reason.clone(),
                    at_ms: now,
                });
            }
            let attempts = d.attempts_before + 1;
            let Some(due) = policy.next_attempt(attempts, *after, first, now, rng) else {
                warn!(row = %d.row, dead_letter = %env.dlq_id(d.row), %reason, "retry horizon passed: dead-lettered");
                held(env, d, on_dead);
                let r = record(AttemptOutcome::HorizonPassed);
                let why = format!("retry horizon passed: {reason}");
                let b = ankusa_queue::dead_letter_logged(
                    kv,
                    d.row,
                    &why,
                    now,
                    log_of(&r, keep),
                    on_dead,
                )?;
                st.events.dead_lettered(d.key.1, d.row, &why);
                return Ok((b, AttemptOutcome::HorizonPassed));
            };
            let delay = due.saturating_sub(now);
            warn!(row = %d.row, attempt = attempts, delay_ms = delay, %reason, "delivery failed; will retry");
            wake_at(st.wake, due);
            let r = record(AttemptOutcome::Retry);
            Ok((
                ankusa_queue::retry_logged(kv, d.row, due, reason, now, log_of(&r, keep))?,
                AttemptOutcome::Retry,
            ))
        }
        Outcome::Permanent { reason } => {
            if d.sink_called && breaker.answered() {
                st.events.push(closed(d, now));
            }
            warn!(row = %d.row, dead_letter = %env.dlq_id(d.row), %reason, "permanent failure: dead-lettered");
            held(env, d, on_dead);
            let r = record(AttemptOutcome::Permanent);
            let why = format!("permanent: {reason}");
            let b =
                ankusa_queue::dead_letter_logged(kv, d.row, &why, now, log_of(&r, keep), on_dead)?;
            st.events.dead_lettered(d.key.1, d.row, &why);
            Ok((b, AttemptOutcome::Permanent))
        }
        Outcome::SinkGone { reason } => {
            warn!(row = %d.row, dead_letter = %env.dlq_id(d.row), %reason, "sink gone: dead-lettered");
            held(env, d, on_dead);
            let r = record(AttemptOutcome::SinkGone);
            let why = format!("sink gone: {reason}");
            let b =
                ankusa_queue::dead_letter_logged(kv, d.row, &why, now, log_of(&r, keep), on_dead)?;
            st.events.dead_lettered(d.key.1, d.row, &why);
            Ok((b, AttemptOutcome::SinkGone))
        }
        Outcome::SourceGone { reason } => {
            warn!(row = %d.row, %reason, "source gone: dead-lettered as an orphan");
            let r = record(AttemptOutcome::SourceGone);
            Ok((
                ankusa_queue::orphan_logged(
                    kv,
                    d.row,
                    Origin::InFlight,
                    &format!("source gone: {reason}"),
                    now,
                    log_of(&r, keep),
                )?,
                AttemptOutcome::SourceGone,
            ))
        }
        Outcome::HttpStatus { .. } => unreachable!("resolved by the retry policy above"),
    }
}

/// Says so when `d`'s dead letter holds its lane (ADR 0004 section 8),
/// with the row's id as the dead-letter line gives it.
fn held<K: Kv>(env: &Env<K>, d: &Done, on_dead: OnDeadHead) {
    if on_dead == OnDeadHead::Hold {
        let id = env.dlq_id(d.row);
        warn!(row = %d.row, dead_letter = %id, "lane held: this hook's ordering key delivers nothing more until the dead letter is revived (it goes first) or dropped (dead_letter: hold)");
    }
}

/// The report of `d`'s breaker closing at `now`.
fn closed(d: &Done, now: u64) -> PipelineEvent {
    PipelineEvent::BreakerClosed {
        tenant: d.key.0,
        source: d.key.1,
        sink: d.key.2,
        at_ms: now,
    }
}

/// The first attempt time of `row` (None when the row has none or is gone).
fn first_attempt_ms<K: Kv>(kv: &K, row: RowId) -> Result<Option<u64>, QueueError> {
    let raw = kv.get(Cf::Deliveries, &delivery_key(row.tenant, row.seq, row.sink))?;
    Ok(raw
        .as_deref()
        .map(DeliveryRow::decode)
        .transpose()?
        .and_then(|r| r.first_attempt_at_ms))
}
