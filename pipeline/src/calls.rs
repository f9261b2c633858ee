//! The calls stage (docs/design.md section 5): a claimed row ([`Start`])
//! becomes a [`Call`] ([`launch`]: its delivery context built, its sink slot
//! taken), the call runs as its own task on the async runtime
//! and holds no store handle and no lock, and its [`Done`] goes back to the
//! committer. A slot is free again when the outcome is committed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ankusa_keys::{Envelope, SinkIx, SourceId};
use ankusa_queue::RowId;
use ankusa_sinks::{DeliveryCtx, Outcome, Response};
use tokio::sync::mpsc;
use tracing::{Instrument, warn};

use crate::breaker::{BreakerKey, Site};
use crate::scan::Start;
use crate::slots::Slots;
use crate::transform::{self, Transform};
use crate::{Route, Routes};

/// A finished call: the boundary between the calls stage and the committer.
pub(crate) struct Done {
    pub(crate) row: RowId,
    pub(crate) key: BreakerKey,
    pub(crate) site: Site,
    pub(crate) outcome: Outcome,
    pub(crate) attempts_before: u32,
    pub(crate) size: u64,
    pub(crate) trial: bool,
    /// The sink's kind (`Sink::kind`): the `sink` label of the delivery
    /// metrics.
    pub(crate) kind: &'static str,
    /// How long the sink call took (zero for a `Done` not from a call).
    pub(crate) elapsed: Duration,
    /// When the call was launched, unix ms on the pipeline's clock: the
    /// attempt's time in the row's attempt log.
    pub(crate) at_ms: u64,
    /// What the destination answered (`Sink::attempt`), for the attempt log.
    pub(crate) response: Option<Response>,
    /// The hook's `received_at`, unix ms (ingest-to-delivery latency).
    pub(crate) received_at_ms: u64,
    /// Whether the sink was called: not when the entry's transform failed
    /// or could not run (src/transform.rs). An outcome without a call says
    /// nothing of the sink: neither its breaker nor its failing run
    /// (notifications, auto-pause) counts it.
    pub(crate) sink_called: bool,
    /// The attempt's `delivery` span ([`delivery_span`]); the committer
    /// records its `outcome` and `duration_ms`, and it closes when this
    /// `Done` is dropped. `Span::none()` when the filter leaves it off.
    pub(crate) span: tracing::Span,
}

/// A call ready to start: what the task needs and what its [`Done`] carries.
pub(crate) struct Call {
    route: Route,
    envelope: Envelope,
    ctx: DeliveryCtx,
    row: RowId,
    key: BreakerKey,
    site: Site,
    attempts_before: u32,
    size: u64,
    trial: bool,
    span: tracing::Span,
    /// The sink entry's transform, run on the body before the sink call.
    transform: Option<Transform>,
    at_ms: u64,
}

/// The `delivery` span of one attempt (debug level, target
/// `ankusa_pipeline::calls`: off under the default `info` filter, on with
/// `RUST_LOG=ankusa=debug`). Fields: `sink_kind` (`Sink::kind`), `sink` (the
/// sink entry's name), `source`, `tenant` (names), `seq` (the hook's), `attempt`
/// (1 for the first), `ordered`; the committer adds `outcome`
/// ([`AttemptOutcome::label`](ankusa_queue::metrics::AttemptOutcome::label),
/// or `dropped` for a row that moved on while the call ran) and `duration_ms`
/// (the sink call, fractional). No ordering key and no lane: they may carry
/// personal data (ADR 0004 section 7). The field values are built only when
/// the span is enabled. Integers are `i64`, OpenTelemetry's integer
/// (tracing-opentelemetry exports a `u64` as its text; a build with the
/// `otel` feature exports this span).
fn delivery_span(kind: &'static str, ctx: &DeliveryCtx) -> tracing::Span {
    tracing::debug_span!(
        "delivery",
        sink_kind = kind,
        sink = %ctx.sink_name,
        source = %ctx.source,
        tenant = %ctx.tenant,
        seq = i64::try_from(ctx.seq.0).unwrap_or(i64::MAX),
        attempt = i64::from(ctx.attempt),
        ordered = ctx.ordered,
        outcome = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    )
}

/// Takes the sink slot and window room of a claimed row and makes its call,
/// launched at `now_ms` (the attempt log's time of the attempt); the sink
/// reports at most `response_body_max_bytes` of the answer's body.
pub(crate) fn launch(
    s: Start,
    routes: &Routes,
    slots: &mut Slots,
    now_ms: u64,
    response_body_max_bytes: usize,
) -> Call {
    let tenant_name = routes
        .tenants
        .get(&s.row_id.tenant)
        .cloned()
        .unwrap_or_else(|| s.row_id.tenant.to_string());
    let content_type = s
        .envelope
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
    let ordered = s.row.lane.is_some();
    let ordering_key = if ordered {
        Some(
            s.row
                .ordering_key
                .clone()
                .unwrap_or_else(|| format!("{}/{}", tenant_name, s.route.source_name).into_bytes()),
        )
    } else {
        None
    };
    let ctx = DeliveryCtx {
        tenant: tenant_name,
        source: s.route.source_name.clone(),
        sink_name: s.route.sink_name.clone(),
        sink: s.row_id.sink,
        seq: s.row_id.seq,
        attempt: s.row.attempts + 1,
        idempotency_key: ankusa_sinks::uuid_text(&s.envelope.idempotency_key),
        ordering_key,
        lane_hex: s.row.lane.map(|l| l.to_hex()),
        lane_seq: s.row.lane_seq,
        ordered,
        received_at_ms: s.envelope.received_at_ms,
        content_type,
        response_body_max_bytes,
    };
    let span = delivery_span(s.route.sink.kind(), &ctx);
    let transform = routes.transforms.get(&(s.key.1, s.key.2)).cloned();
    slots.take(s.key, s.size);
    Call {
        transform,
        route: s.route,
        envelope: s.envelope,
        ctx,
        row: s.row_id,
        key: s.key,
        site: s.site,
        attempts_before: s.row.attempts,
        size: s.size,
        trial: s.trial,
        span,
        at_ms: now_ms,
    }
}

impl Call {
    /// The call's [`Done`] with `outcome`.
    pub(crate) fn finish(self, outcome: Outcome) -> Done {
        Done {
            row: self.row,
            key: self.key,
            site: self.site,
            outcome,
            attempts_before: self.attempts_before,
            size: self.size,
            trial: self.trial,
            kind: self.route.sink.kind(),
            elapsed: Duration::ZERO,
            at_ms: self.at_ms,
            response: None,
            received_at_ms: self.ctx.received_at_ms,
            sink_called: true,
            span: self.span,
        }
    }
}

/// Starts `call` as its own task; its [`Done`] is sent on `tx`.
pub(crate) fn spawn(call: Call, tx: &mpsc::UnboundedSender<Done>) {
    let tx = tx.clone();
    // The sink's own events during the call are inside the attempt's span.
    let span = call.span.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let mut call = call;
        let mut sink_called = true;
        let attempted = match call.transform.take() {
            None => {
                call.route
                    .sink
                    .attempt(&call.envelope, &call.ctx)
                    .instrument(span)
                    .await
            }
            // The stored envelope stays as it is; the sink gets the
            // transformed one (src/transform.rs).
            Some(t) => match transform::apply(&t, &call.envelope, &mut call.ctx).await {
                Ok(transformed) => {
                    call.route
                        .sink
                        .attempt(&transformed, &call.ctx)
                        .instrument(span)
                        .await
                }
                Err(outcome) => {
                    sink_called = false;
                    outcome.into()
                }
            },
        };
        let elapsed = started.elapsed();
        let mut done = call.finish(attempted.outcome);
        done.sink_called = sink_called;
        done.elapsed = elapsed;
        done.response = attempted.response;
        let _ = tx.send(done);
    });
}

/// Sinks that buffer ([`ankusa_sinks::Sink::flush`]) make their part of
/// `done` durable before the committer deletes any of its rows; a sink whose
/// flush fails gets its `Ok` outcomes turned into retries (those deliveries
/// are not durable at the destination). Runs on the async side, before the
/// engine step that commits `done`.
pub(crate) async fn flush_sinks(routes: &Arc<Routes>, done: &mut [Done]) {
    let mut flushed: HashMap<(SourceId, SinkIx), bool> = HashMap::new();
    for d in done.iter() {
        let id = (d.key.1, d.key.2);
        if matches!(d.outcome, Outcome::Ok)
            && !flushed.contains_key(&id)
            && let Some(route) = routes.sinks.get(&id)
        {
            let ok = match route.sink.flush().await {
                Ok(()) => true,
                Err(e) => {
                    warn!(sink = %route.sink_name, error = %e, "sink flush failed; its deliveries of this batch will be retried");
                    false
                }
            };
            flushed.insert(id, ok);
        }
    }
    for d in done.iter_mut() {
        if matches!(d.outcome, Outcome::Ok) && flushed.get(&(d.key.1, d.key.2)) == Some(&false) {
            d.outcome = Outcome::Retry {
                reason: "sink flush failed".into(),
                after: None,
            };
        }
    }
}
