//! What a delivery attempt came to (docs/design.md section 6).

use std::time::Duration;

/// The result of one [`crate::Sink::deliver`] call; the pipeline turns it into
/// exactly one row transition (docs/design.md section 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered (and, for a sink that buffers, durable after the next
    /// [`crate::Sink::flush`]): the row is deleted, the lane released.
    Ok,
    /// Not delivered this time; try again. The pipeline backs off
    /// exponentially with full jitter, waits at least `after` when the
    /// destination said how long (Retry-After), and dead-letters past the
    /// retry horizon. Throttling, timeouts and connection failures.
    Retry {
        /// What went wrong, for `last_error` and logs (short; no body dumps).
        reason: String,
        /// How long the destination asked to wait, if it said.
        after: Option<Duration>,
    },
    /// The destination rejected this hook and will reject it again: the row is
    /// dead-lettered now.
    Permanent {
        /// Why, for the DLQ entry.
        reason: String,
    },
    /// The destination itself is gone (HTTP 410, a deleted queue or topic):
    /// dead-lettered now, like [`Outcome::Permanent`], with its own reason.
    SinkGone {
        /// Why, for the DLQ entry.
        reason: String,
    },
    /// The hook's source no longer exists (deleted, or not configured on this
    /// node): dead-lettered now as an orphan.
    SourceGone {
        /// Why, for the DLQ entry.
        reason: String,
    },
}

impl Outcome {
    /// A retry with no Retry-After.
    pub fn retry(reason: impl Into<String>) -> Outcome {
        Outcome::Retry {
            reason: reason.into(),
            after: None,
        }
    }

    /// A permanent rejection.
    pub fn permanent(reason: impl Into<String>) -> Outcome {
        Outcome::Permanent {
            reason: reason.into(),
        }
    }

    /// Whether the row is done with this attempt (delivered or dead-lettered),
    /// i.e. anything but a retry.
    pub fn is_final(&self) -> bool {
        !matches!(self, Outcome::Retry { .. })
    }
}
