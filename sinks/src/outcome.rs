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
    /// The destination answered an HTTP error status (400-599). Whether that
    /// is a retry, a permanent rejection or the sink gone is the sink entry's
    /// retry policy's call (`retry.retry_statuses` and `retry.grace_ms`,
    /// docs/design.md section 5, "Retry policy"): the pipeline resolves it
    /// with [`Outcome::resolve_status`] before it becomes a row transition.
    HttpStatus {
        /// The status code, 400-599.
        status: u16,
        /// `HTTP <status> <reason phrase>[: <body excerpt>]`, for
        /// `last_error`, the DLQ entry and logs.
        reason: String,
        /// How long the destination asked to wait (Retry-After), if it said;
        /// used when the status is retried.
        after: Option<Duration>,
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
    /// i.e. anything but a retry. An unresolved [`Outcome::HttpStatus`] is
    /// not final (its policy may retry it): resolve it first.
    pub fn is_final(&self) -> bool {
        !matches!(self, Outcome::Retry { .. } | Outcome::HttpStatus { .. })
    }

    /// Resolves an [`Outcome::HttpStatus`]: a [`Outcome::Retry`] (with its
    /// Retry-After) when `retried(status)` says so; else
    /// [`Outcome::SinkGone`] for 410 and [`Outcome::Permanent`] for any
    /// other status, with the same reason. Every other outcome is returned
    /// as it is. [`Outcome::retried_by_default`] is the policy when a sink
    /// entry sets none.
    pub fn resolve_status(self, retried: impl FnOnce(u16) -> bool) -> Outcome {
        match self {
            Outcome::HttpStatus {
                status,
                reason,
                after,
            } => {
                if retried(status) {
                    Outcome::Retry { reason, after }
                } else if status == 410 {
                    Outcome::SinkGone { reason }
                } else {
                    Outcome::Permanent { reason }
                }
            }
            other => other,
        }
    }

    /// The HTTP statuses retried when a sink entry's retry policy lists none:
    /// 408 Request Timeout, 425 Too Early, 429 Too Many Requests and every
    /// 5xx. Any other 4xx is permanent (410: the sink is gone).
    pub fn retried_by_default(status: u16) -> bool {
        matches!(status, 408 | 425 | 429 | 500..=599)
    }
}

/// What the destination answered to one attempt, as far as the attempt log
/// keeps it (docs/design.md section 6, "What the destination answered"): the
/// HTTP sink gives one for every answer it read; the broker sinks give none
/// (their error text is the outcome's reason).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The answer's headers, in the order received: lower-case name, value
    /// bytes; at most [`Response::MAX_HEADERS`], each value cut to
    /// [`Response::MAX_HEADER_VALUE_BYTES`].
    pub headers: Vec<(String, Vec<u8>)>,
    /// The first bytes of the answer's body, at most
    /// [`crate::DeliveryCtx::response_body_max_bytes`].
    pub body: Vec<u8>,
    /// The body had more than `body` holds (or the sink stopped reading it).
    pub body_truncated: bool,
}

impl Response {
    /// Most headers of an answer a [`Response`] keeps (the first ones).
    pub const MAX_HEADERS: usize = 64;
    /// Most bytes of one header value a [`Response`] keeps.
    pub const MAX_HEADER_VALUE_BYTES: usize = 1024;
}

/// One finished [`crate::Sink::attempt`]: its outcome and, when the sink has
/// one, what the destination answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempted {
    /// The outcome, as [`crate::Sink::deliver`] gives it.
    pub outcome: Outcome,
    /// The destination's answer; `None` when there was none to read (a
    /// timeout, a refused connection) or the sink reports none.
    pub response: Option<Response>,
}

impl From<Outcome> for Attempted {
    fn from(outcome: Outcome) -> Attempted {
        Attempted {
            outcome,
            response: None,
        }
    }
}
