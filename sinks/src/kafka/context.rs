//! The producer's client context: librdkafka's log lines and global errors
//! through `tracing`, rate-limited (module docs: [`crate::kafka`], "Logs").
//!
//! rdkafka's default context forwards every librdkafka log line and global
//! error at its own level; with the brokers down an idle relay then logs
//! several ERROR lines a second (connection refused, "all brokers down"),
//! forever. Here a warning-or-worse line is a WARN at most once per
//! [`WINDOW`] per facility, a global error a WARN at most once per
//! [`WINDOW`] per error code, and everything else is DEBUG.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

/// How long after a WARN line the same facility (or error code) logs at
/// DEBUG only, counting the lines it held back.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// Per key: let the first line through, then at most one per `window`,
/// counting the ones in between. Pure: the caller supplies the time.
#[derive(Debug)]
pub(crate) struct RateLimiter<K> {
    window: Duration,
    /// Per key: when a line was last let through, and how many were held
    /// back since.
    seen: Mutex<HashMap<K, (Instant, u64)>>,
}

impl<K: Eq + Hash> RateLimiter<K> {
    /// A limiter letting one line per key through per `window`.
    pub(crate) fn new(window: Duration) -> Self {
        RateLimiter {
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a line for `key` at `now` is let through: `Some(n)` with the
    /// number of lines held back since the previous one let through (0 for
    /// the first), or `None` if it is held back (and counted). A `now`
    /// earlier than the last line let through counts as within the window.
    pub(crate) fn check<Q>(&self, key: &Q, now: Instant) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // A panic while holding the lock cannot leave the map inconsistent
        // (each update is one assignment).
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        match seen.get_mut(key) {
            None => {
                seen.insert(key.to_owned(), (now, 0));
                Some(0)
            }
            Some((last, suppressed)) => {
                let elapsed = now.checked_duration_since(*last);
                if elapsed.is_some_and(|e| e >= self.window) {
                    let held = *suppressed;
                    *last = now;
                    *suppressed = 0;
                    Some(held)
                } else {
                    *suppressed += 1;
                    None
                }
            }
        }
    }
}

/// The text appended to a WARN line after `suppressed` held-back lines.
fn note(suppressed: u64) -> String {
    if suppressed == 0 {
        String::new()
    } else {
        format!(
            " ({suppressed} similar lines suppressed in the last {} s)",
            WINDOW.as_secs()
        )
    }
}

/// Whether librdkafka's `level` is a warning or worse.
fn is_warning(level: RDKafkaLogLevel) -> bool {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error
        | RDKafkaLogLevel::Warning => true,
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info | RDKafkaLogLevel::Debug => false,
    }
}

/// The Kafka sink's producer context. Cloning shares the limiters, so a
/// producer built after a fatal error goes on with its predecessor's.
#[derive(Debug, Clone)]
pub(crate) struct KafkaContext {
    /// Warning-or-worse log lines, per librdkafka facility.
    logs: Arc<RateLimiter<String>>,
    /// Global errors, per error code (`None`: an error without one).
    errors: Arc<RateLimiter<Option<i32>>>,
}

impl KafkaContext {
    /// A context with empty limiters.
    pub(crate) fn new() -> Self {
        KafkaContext {
            logs: Arc::new(RateLimiter::new(WINDOW)),
            errors: Arc::new(RateLimiter::new(WINDOW)),
        }
    }
}

impl ClientContext for KafkaContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let passed = if is_warning(level) {
            self.logs.check(fac, Instant::now())
        } else {
            None
        };
        match passed {
            Some(suppressed) => tracing::warn!(
                sink = "kafka",
                facility = fac,
                level = ?level,
                suppressed,
                "librdkafka: {log_message}{}",
                note(suppressed)
            ),
            None => tracing::debug!(
                sink = "kafka",
                facility = fac,
                level = ?level,
                "librdkafka: {log_message}"
            ),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        match self.errors.check(&code.map(|c| c as i32), Instant::now()) {
            Some(suppressed) => tracing::warn!(
                sink = "kafka",
                code = ?code,
                suppressed,
                "librdkafka: {error}: {reason}{}",
                note(suppressed)
            ),
            None => tracing::debug!(sink = "kafka", code = ?code, "librdkafka: {error}: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_passes_then_one_per_window_with_the_count() {
        let limiter = RateLimiter::<String>::new(WINDOW);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);

        assert_eq!(
            limiter.check("FAIL", at(0)),
            Some(0),
            "the first line passes"
        );
        assert_eq!(limiter.check("FAIL", at(0)), None);
        assert_eq!(limiter.check("FAIL", at(10)), None);
        assert_eq!(limiter.check("FAIL", at(59)), None);
        // Another facility has its own window.
        assert_eq!(limiter.check("ERROR", at(30)), Some(0));
        assert_eq!(limiter.check("ERROR", at(31)), None);
        // 60 s after the last line let through: passes with the count.
        assert_eq!(limiter.check("FAIL", at(60)), Some(3));
        // The count restarts, and so does the window.
        assert_eq!(limiter.check("FAIL", at(61)), None);
        assert_eq!(limiter.check("FAIL", at(119)), None);
        assert_eq!(limiter.check("FAIL", at(200)), Some(2));
        assert_eq!(limiter.check("FAIL", at(260)), Some(0), "nothing held back");
        assert_eq!(limiter.check("ERROR", at(90)), Some(1));
        // A timestamp before the last line let through is within the window.
        assert_eq!(limiter.check("ERROR", at(80)), None);
        assert_eq!(limiter.check("ERROR", at(150)), Some(1));
    }

    #[test]
    fn error_codes_are_keys() {
        let limiter = RateLimiter::<Option<i32>>::new(WINDOW);
        let t0 = Instant::now();
        assert_eq!(limiter.check(&Some(-187), t0), Some(0));
        assert_eq!(
            limiter.check(&Some(-187), t0 + Duration::from_secs(1)),
            None
        );
        assert_eq!(
            limiter.check(&Some(-195), t0 + Duration::from_secs(1)),
            Some(0)
        );
        assert_eq!(limiter.check(&None, t0 + Duration::from_secs(1)), Some(0));
        assert_eq!(
            limiter.check(&Some(-187), t0 + Duration::from_secs(61)),
            Some(1)
        );
    }

    #[test]
    fn the_note() {
        assert_eq!(note(0), "");
        assert_eq!(note(5), " (5 similar lines suppressed in the last 60 s)");
    }

    #[test]
    fn warning_levels() {
        use RDKafkaLogLevel as L;
        for level in [L::Emerg, L::Alert, L::Critical, L::Error, L::Warning] {
            assert!(is_warning(level), "{level:?}");
        }
        for level in [L::Notice, L::Info, L::Debug] {
            assert!(!is_warning(level), "{level:?}");
        }
    }
}
