//! Pause and resume through the admin API (docs/design.md section 5, "Pause"):
//! `POST /v1/sources/{source}/pause|resume` and
//! `POST /v1/sources/{source}/sinks/{sink}/pause|resume`, and the pause state
//! `GET /v1/sources[/{source}]` shows.
//!
//! The pipeline commits the change (`meta` `pause/...`, `Sync`) and applies it
//! before the call returns ([`crate::PipelineControl::set_pause`]). A pause the
//! configuration sets (`paused: true`) cannot be lifted here: a resume of it
//! is a 409 that changes nothing; a resume of a target that is not paused is a
//! 409 too (never a silent success, as a second DLQ revive).

use ankusa_config::Source;
use ankusa_engine::Kv;
use ankusa_keys::SinkIx;
use ankusa_keys::meta::{PauseTarget, PausedValue};
use ankusa_queue::PauseMap;

use super::AdminState;
use super::api::{ApiError, Query, rfc3339};
use crate::api_types::{PauseInfo, PauseRequest, PauseState, RuntimePause};
use crate::context::{ControlFailure, block};

/// The reason a pause made through the API records when the request gives
/// none.
pub const DEFAULT_PAUSE_REASON: &str = "paused through the admin API";
/// The longest pause reason the API takes, bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// `{by_config, by_runtime}` of one target: what pauses it itself.
pub(crate) fn pause_info(by_config: bool, runtime: Option<&PausedValue>) -> PauseInfo {
    PauseInfo {
        by_config,
        by_runtime: runtime.map(|p| RuntimePause {
            since_ms: p.since_ms,
            since: rfc3339(p.since_ms),
            reason: p.reason.clone(),
        }),
    }
}

/// The configured source `name` and, for `sink`, its entry's index.
fn target<K: Kv>(
    state: &AdminState<K>,
    name: &str,
    sink: Option<&str>,
) -> Result<(PauseTarget, bool, &'static str), ApiError> {
    let config = state.config.load();
    let source: &Source = config
        .source(name)
        .ok_or_else(|| ApiError::not_found(format!("no source {name:?} in the configuration")))?;
    let id = *state.registry.load().sources.get(name).ok_or_else(|| {
        ApiError::not_found(format!("source {name:?} is not registered in the store"))
    })?;
    match sink {
        None => Ok((PauseTarget::Source(id), source.paused, "source")),
        Some(sink) => {
            let e = source
                .sinks
                .iter()
                .find(|e| e.name == sink)
                .ok_or_else(|| {
                    ApiError::not_found(format!("source {name:?} has no sink {sink:?}"))
                })?;
            Ok((PauseTarget::Sink(id, SinkIx(e.index)), e.paused, "sink"))
        }
    }
}

/// The pause state of a target after a change.
fn view(
    source: &str,
    sink: Option<&str>,
    by_config: bool,
    source_paused: bool,
    runtime: &PauseMap,
    target: PauseTarget,
) -> PauseState {
    let by_runtime = runtime.get(&target);
    let paused = by_config || by_runtime.is_some();
    let info = pause_info(by_config, by_runtime);
    PauseState {
        source: source.to_owned(),
        sink: sink.map(str::to_owned),
        paused,
        // A sink entry delivers when neither it nor its source is paused.
        delivering: !paused && !source_paused,
        by_config: info.by_config,
        by_runtime: info.by_runtime,
    }
}

/// `POST /v1/sources/{source}[/sinks/{sink}]/pause|resume`.
pub(crate) fn change<K: Kv>(
    state: &AdminState<K>,
    source: &str,
    sink: Option<&str>,
    pause: bool,
    body: &[u8],
    q: Query,
) -> Result<PauseState, ApiError> {
    q.finish()?;
    let req: PauseRequest = if body.iter().all(u8::is_ascii_whitespace) {
        PauseRequest::default()
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body is not a pause request ({{\"reason\": \"...\"}}): {e}"
            ))
        })?
    };
    if !pause && req.reason.is_some() {
        return Err(ApiError::bad_request("a resume takes no reason"));
    }
    if req
        .reason
        .as_ref()
        .is_some_and(|r| r.len() > MAX_REASON_BYTES)
    {
        return Err(ApiError::bad_request(format!(
            "the reason is over {MAX_REASON_BYTES} bytes"
        )));
    }
    let (target, by_config, what) = target(state, source, sink)?;
    let named = match sink {
        Some(k) => format!("sink {k:?} of source {source:?}"),
        None => format!("source {source:?}"),
    };
    let _writes = state.writes.blocking_lock();
    let control = state.pipeline()?;
    let runtime = ankusa_queue::read_pauses(&*state.kv)?;
    if !pause {
        if by_config {
            return Err(ApiError::conflict(format!(
                "{named} is paused by the configuration (paused: true on the {what}): the API cannot lift that pause; remove it from the configuration and restart the relay"
            )));
        }
        if !runtime.contains_key(&target) {
            return Err(ApiError::conflict(format!("{named} is not paused")));
        }
    }
    let reason = pause.then(|| {
        req.reason
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| DEFAULT_PAUSE_REASON.to_owned())
    });
    match block(control.set_pause(target, reason)) {
        Ok(()) => {}
        Err(ControlFailure::NotConfigured) => {
            return Err(ApiError::not_found(format!(
                "{named} is not configured in the running relay"
            )));
        }
        Err(ControlFailure::Refused(m) | ControlFailure::Unavailable(m)) => {
            return Err(ApiError::unavailable(m));
        }
    }
    let runtime = ankusa_queue::read_pauses(&*state.kv)?;
    let source_paused = match target {
        PauseTarget::Sink(id, _) => {
            state.config.load().source(source).is_some_and(|s| s.paused)
                || runtime.contains_key(&PauseTarget::Source(id))
        }
        PauseTarget::Source(_) => false,
    };
    Ok(view(
        source,
        sink,
        by_config,
        source_paused,
        &runtime,
        target,
    ))
}
