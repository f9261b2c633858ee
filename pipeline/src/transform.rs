//! A sink entry's transform at delivery (docs/design.md section 6,
//! "Transforms"): the call runs the entry's jq program on the stored body
//! and hands the sink an envelope whose body is the program's output.
//!
//! The stored envelope is never changed: a redelivery, a revive and a replay
//! run the program again, the one configured at that moment. The
//! transformed envelope's content type is `application/json` (its
//! `content-type` header and [`DeliveryCtx::content_type`]), and it carries
//! none of the provider's signature headers
//! ([`ankusa_sinks::meta::PROVIDER_SIGNATURE_HEADERS`], and a source's own
//! `hmac` header): they sign the body as received, which this sink does not
//! get. What a sink signs itself (the HTTP sink's `signing`) it signs over
//! the body it is handed, so over the transformed one.
//!
//! A run that fails (the body is not JSON, the program errs or gives other
//! than one output, a bound is passed) is [`Outcome::Permanent`] with reason
//! `transform: <why>`: the row is dead-lettered, the next hooks go on. It is
//! counted (`ankusa_transform_failed_total{source,sink}`) and logged. A run
//! that could not start (no free run slot, no thread, no worker process) is
//! a retry, not counted there, and since the sink was not called, neither
//! its breaker nor its failing run counts it (src/calls.rs, `Done`).

use std::sync::Arc;

use ankusa_keys::Envelope;
use ankusa_sinks::{DeliveryCtx, Outcome};
use ankusa_transform::Program;
use tracing::warn;

/// The content type of a transformed body.
pub const TRANSFORMED_CONTENT_TYPE: &str = "application/json";

/// A sink entry's transform, as the pipeline runs it.
#[derive(Clone, Debug)]
pub struct Transform {
    /// The compiled program (the configuration's).
    pub program: Arc<Program>,
    /// The stored headers (lower-case names) a transformed body does not
    /// carry: the providers' signature headers and the source's own.
    pub signature_headers: Vec<String>,
}

impl Transform {
    /// The transform of `program`, leaving out the providers' signature
    /// headers and `extra` (a source's `hmac` header).
    pub fn new(program: Arc<Program>, extra: Option<&str>) -> Transform {
        let mut signature_headers: Vec<String> = ankusa_sinks::meta::PROVIDER_SIGNATURE_HEADERS
            .iter()
            .map(|h| (*h).to_owned())
            .collect();
        if let Some(h) = extra {
            let h = h.to_ascii_lowercase();
            if !signature_headers.contains(&h) {
                signature_headers.push(h);
            }
        }
        Transform {
            program,
            signature_headers,
        }
    }
}

/// Runs `t` on `envelope`'s body: the envelope to deliver, or the outcome
/// of a run that failed.
pub(crate) async fn apply(
    t: &Transform,
    stored: &Envelope,
    ctx: &mut DeliveryCtx,
) -> Result<Envelope, Outcome> {
    match t.program.run(stored.body.clone()).await {
        Ok(body) => {
            let mut headers: Vec<(Vec<u8>, Vec<u8>)> = stored
                .headers
                .iter()
                .filter(|(name, _)| {
                    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
                    name != "content-type" && !t.signature_headers.contains(&name)
                })
                .cloned()
                .collect();
            headers.push((
                b"content-type".to_vec(),
                TRANSFORMED_CONTENT_TYPE.as_bytes().to_vec(),
            ));
            ctx.content_type = Some(TRANSFORMED_CONTENT_TYPE.to_owned());
            Ok(Envelope {
                source: stored.source,
                received_at_ms: stored.received_at_ms,
                method: stored.method.clone(),
                path: stored.path.clone(),
                query: stored.query.clone(),
                headers,
                body,
                dedupe_key: stored.dedupe_key.clone(),
                idempotency_key: stored.idempotency_key,
                replay_of: stored.replay_of,
            })
        }
        Err(e) => {
            let reason = format!("transform: {e}");
            let permanent = e.is_permanent();
            warn!(
                source = %ctx.source,
                sink = %ctx.sink_name,
                tenant = %ctx.tenant,
                seq = ctx.seq.0,
                error = %e,
                "{}",
                if permanent {
                    "the sink entry's transform failed"
                } else {
                    "the sink entry's transform could not run; the delivery is retried"
                },
            );
            if permanent {
                // Counted as `ankusa_transform_failed_total` documents it: a
                // delivery dead-lettered by its transform.
                ankusa_transform::metrics::record_failure(&ctx.source, &ctx.sink_name);
                Err(Outcome::Permanent { reason })
            } else {
                Err(Outcome::Retry {
                    reason,
                    after: None,
                })
            }
        }
    }
}
