//! `POST /v1/transform/test` (docs/design.md section 6, "Transforms"): runs
//! a sink entry's configured jq program, or one given with the request, on
//! a sample body and answers the body the sink would get, or why it would
//! not get one. Nothing is stored or sent. The body of the request is the
//! sample (as a provider would send it, at most 64 KiB); the query names
//! the program: `source=S&sink=K` (the entry's, with its bounds), or
//! `program=` (with `timeout_ms` and `max_output_bytes`, default 100 ms and
//! 1 MiB). A run that fails answers 422 `transform_failed` with the reason a
//! delivery would be dead-lettered with; one that could not start now (the
//! run slots busy, a worker that could not start) 429 `transform_busy`.

use std::sync::Arc;

use ankusa_engine::Kv;
use ankusa_transform::{Limits, Program};
use hyper::StatusCode;

use super::AdminState;
use super::api::{ApiError, Query};
use crate::api_types::TransformTested;
use crate::context::block;

/// `POST /v1/transform/test`.
pub(super) fn test<K: Kv>(
    state: &AdminState<K>,
    body: &[u8],
    mut q: Query,
) -> Result<TransformTested, ApiError> {
    let source = q.take("source");
    let sink = q.take("sink");
    let text = q.take("program");
    let timeout_ms = bound(&mut q, "timeout_ms", ankusa_transform::MAX_TIMEOUT_MS)?;
    let max_output_bytes = bound(
        &mut q,
        "max_output_bytes",
        ankusa_transform::MAX_OUTPUT_BYTES,
    )?;
    q.finish()?;
    let program: Arc<Program> = match (text, source, sink) {
        (Some(text), None, None) => {
            let defaults = Limits::default();
            let limits = Limits {
                timeout_ms: timeout_ms.unwrap_or(defaults.timeout_ms),
                max_output_bytes: max_output_bytes.unwrap_or(defaults.max_output_bytes),
            };
            Arc::new(
                Program::compile(&text, limits).map_err(|e| {
                    ApiError::bad_request(format!("the program does not compile: {e}"))
                })?,
            )
        }
        (None, Some(source), Some(sink)) => {
            if timeout_ms.is_some() || max_output_bytes.is_some() {
                return Err(ApiError::bad_request(
                    "timeout_ms and max_output_bytes go with program=; a configured transform runs with its own",
                ));
            }
            let config = state.config.load();
            let entry = config
                .source(&source)
                .ok_or_else(|| ApiError::not_found(format!("no source \"{source}\"")))?
                .sinks
                .iter()
                .find(|e| e.name == sink)
                .ok_or_else(|| {
                    ApiError::not_found(format!("source \"{source}\" has no sink \"{sink}\""))
                })?;
            entry.transform.clone().ok_or_else(|| {
                ApiError::conflict(format!(
                    "sink \"{sink}\" of source \"{source}\" has no transform: it delivers the body as received"
                ))
            })?
        }
        _ => {
            return Err(ApiError::bad_request(
                "name a configured transform with source= and sink=, or give a program with program=",
            ));
        }
    };
    match block(program.run(body.to_vec())) {
        Ok(out) => Ok(TransformTested {
            program: program.text().to_owned(),
            bytes: out.len() as u64,
            body: String::from_utf8_lossy(&out).into_owned(),
        }),
        // A run that could not start now (every run slot busy, a worker
        // that could not start or was killed from outside) says nothing of
        // the program: try again, as a delivery would be retried.
        Err(e) if !e.is_permanent() => Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "transform_busy",
            message: format!("transform: {e} (try the test again)"),
        }),
        Err(e) => Err(ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "transform_failed",
            message: format!("transform: {e}"),
        }),
    }
}

/// A whole number from 1 to `max`, or absent.
fn bound(q: &mut Query, name: &str, max: u64) -> Result<Option<u64>, ApiError> {
    q.take(name)
        .map(|raw| match raw.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_request(format!(
                "{name} {raw:?} is not a whole number from 1 to {max}"
            ))),
        })
        .transpose()
}
