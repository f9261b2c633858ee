//! The domain's error: why an admin action or a job's step did not happen
//! ([`JobError`]). The HTTP layer maps each kind to its status and code
//! (`http::api::ApiError`, `impl From<JobError>`); nothing here knows HTTP.

use ankusa_queue::QueueError;

/// The message an operator is given for every store failure; the detail
/// (a backend's error, which may name the store's files and so the
/// data_dir) is in the relay's log only.
pub const STORE_FAILED_MESSAGE: &str =
    "the store failed a read or a write; the relay's log has the detail";

/// Why an admin action or a job's step did not happen. Every variant but
/// [`JobError::Store`] carries the message an operator reads.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// The request is malformed or asks for what its kind does not take.
    #[error("{0}")]
    Invalid(String),
    /// A tenant, source, sink, row, hook or job nobody has.
    #[error("{0}")]
    NotFound(String),
    /// The target is not in a state that allows it (not dead, not
    /// quarantined, being purged, no longer configured, ...).
    #[error("{0}")]
    Conflict(String),
    /// Well-formed, but it cannot be done as asked.
    #[error("{0}")]
    Unprocessable(String),
    /// A task it needs (the Writer, the pipeline) is not running: the relay
    /// is starting or stopping.
    #[error("{0}")]
    Unavailable(String),
    /// The store failed a read or a write (the detail, logged when the error
    /// was made: [`JobError::store`]).
    #[error("the store failed: {0}")]
    Store(String),
}

impl JobError {
    /// A store failure: logs `e` (it may name the store's files) and keeps
    /// it; an operator is only told [`STORE_FAILED_MESSAGE`].
    pub fn store(e: impl std::fmt::Display) -> JobError {
        tracing::warn!(error = %e, "admin request: the store failed (answered 503 store_failed)");
        JobError::Store(e.to_string())
    }

    /// What an operator is told: the message, or [`STORE_FAILED_MESSAGE`]
    /// for a store failure (a failed job records this).
    pub fn message(&self) -> &str {
        match self {
            JobError::Invalid(m)
            | JobError::NotFound(m)
            | JobError::Conflict(m)
            | JobError::Unprocessable(m)
            | JobError::Unavailable(m) => m,
            JobError::Store(_) => STORE_FAILED_MESSAGE,
        }
    }
}

impl From<ankusa_engine::EngineError> for JobError {
    fn from(e: ankusa_engine::EngineError) -> Self {
        JobError::store(e)
    }
}

impl From<QueueError> for JobError {
    /// A row not in the DLQ is a conflict (docs/design.md section 10: a
    /// second revive is refused, never a silent success); every other queue
    /// error is the store's.
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::NotInDlq { .. } => {
                JobError::Conflict("the row is not in the dead-letter queue".to_owned())
            }
            other => JobError::store(other),
        }
    }
}

impl JobError {
    /// [`JobError::Invalid`].
    pub fn invalid(message: impl Into<String>) -> JobError {
        JobError::Invalid(message.into())
    }
    /// [`JobError::NotFound`].
    pub fn not_found(message: impl Into<String>) -> JobError {
        JobError::NotFound(message.into())
    }
    /// [`JobError::Conflict`].
    pub fn conflict(message: impl Into<String>) -> JobError {
        JobError::Conflict(message.into())
    }
    /// [`JobError::Unprocessable`].
    pub fn unprocessable(message: impl Into<String>) -> JobError {
        JobError::Unprocessable(message.into())
    }
    /// [`JobError::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> JobError {
        JobError::Unavailable(message.into())
    }
}
