//! The configuration running and its reload (docs/design.md section 5,
//! "Reload"): `GET /v1/config` and `POST /v1/reload`. The reload itself is
//! the relay's ([`crate::ReloadControl`]); a refusal changes nothing and
//! names every problem: 422 `unprocessable` for a file that does not pass
//! `check-config`, 409 `conflict` for one that cannot be applied live.

use ankusa_engine::Kv;
use hyper::StatusCode;

use super::AdminState;
use super::api::{ApiError, Query, rfc3339};
use crate::api_types::{ConfigInfo, Reloaded};
use crate::context::{ConfigStatus, ReloadControl, ReloadFailure, block};

fn control<K: Kv>(state: &AdminState<K>) -> Result<&dyn ReloadControl, ApiError> {
    state
        .reload
        .as_deref()
        .ok_or_else(|| ApiError::unavailable("this relay cannot reload its configuration"))
}

fn info(s: ConfigStatus) -> ConfigInfo {
    ConfigInfo {
        file: s.file,
        hash: s.hash,
        loaded_at_ms: s.loaded_at_ms,
        loaded_at: rfc3339(s.loaded_at_ms).unwrap_or_default(),
        reloads_applied: s.reloads_applied,
        reloads_refused: s.reloads_refused,
    }
}

/// `GET /v1/config`.
pub(super) fn get<K: Kv>(state: &AdminState<K>, q: Query) -> Result<ConfigInfo, ApiError> {
    q.finish()?;
    Ok(info(control(state)?.status()))
}

/// `POST /v1/reload`: applies the file now, or answers why not.
pub(super) fn reload<K: Kv>(
    state: &AdminState<K>,
    body: &[u8],
    q: Query,
) -> Result<Reloaded, ApiError> {
    q.finish()?;
    if !body.iter().all(u8::is_ascii_whitespace) && body != b"{}" {
        return Err(ApiError::bad_request(
            "POST /v1/reload takes no body (the relay re-reads its configuration file)",
        ));
    }
    let reloader = control(state)?;
    match block(reloader.reload()) {
        Ok(done) => Ok(Reloaded {
            changes: done.changes,
            config: info(done.status),
        }),
        Err(ReloadFailure::Invalid(problems)) => Err(ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "unprocessable",
            message: format!(
                "the configuration file does not load; nothing was changed:\n{}",
                problems.join("\n")
            ),
        }),
        Err(ReloadFailure::Refused(reasons)) => Err(ApiError::conflict(format!(
            "the configuration cannot be applied while the relay runs; nothing was changed:\n{}",
            reasons.join("\n")
        ))),
        Err(ReloadFailure::Unavailable(why)) => Err(ApiError::unavailable(why)),
    }
}
