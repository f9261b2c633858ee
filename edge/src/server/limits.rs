//! The ingest and admin listeners' shared limits (issue 14, "Limits that
//! hold"; docs/design.md section 5, "Edge"): the node-wide budget of request
//! body bytes ([`BodyBudget`]), one listener's connection counts
//! ([`ConnStats`]), the answer to a connection past a listener's cap
//! ([`refuse_connection`]), and the accept loop's handling of a failed
//! `accept()` ([`AcceptErrors`]).
//!
//! # Invariants it keeps
//! - The bytes held by every live [`BodyPermit`] together never exceed the
//!   budget's `limit_bytes` (a compare-and-swap, so concurrent requests cannot
//!   all pass on the same reading).
//! - A failed `accept()` (`EMFILE`, `ENFILE`, `ENOBUFS`...) never ends a
//!   listener: it is logged at most once a second and retried after a pause.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tracing::warn;

/// The default of `listeners.body_budget_bytes`: 256 MiB of request bodies
/// being read, verified and committed at once, all ingest connections
/// together (ten bodies at the default 25 MiB `body_limit_bytes`).
pub const DEFAULT_BODY_BUDGET_BYTES: u64 = ankusa_config::defaults::BODY_BUDGET_BYTES;

/// `Retry-After` (seconds) of the 503 a request gets when the body budget is
/// spent, and of the 503 a connection past a listener's cap gets.
pub const BUSY_RETRY_AFTER_S: u64 = 5;

/// The least a [`BodyPermit`] grows by while a body without a
/// `Content-Length` arrives (fewer compare-and-swaps than one per chunk).
const GROW_STEP_BYTES: u64 = 64 * 1024;

/// The node's budget of request body bytes in memory at once: a body is
/// admitted (its declared `Content-Length` taken at once, or a chunked body's
/// bytes as they arrive) only while the bodies already admitted leave room,
/// and its bytes are given back when its request ends (answered, committed
/// or refused). Past it, ingest answers 503 with `Retry-After` and reads no
/// more of that body.
#[derive(Debug)]
pub struct BodyBudget {
    limit_bytes: u64,
    in_use: AtomicU64,
    refused: AtomicU64,
}

impl Default for BodyBudget {
    fn default() -> BodyBudget {
        BodyBudget::new(DEFAULT_BODY_BUDGET_BYTES)
    }
}

impl BodyBudget {
    /// A budget of `limit_bytes` (`listeners.body_budget_bytes`).
    pub fn new(limit_bytes: u64) -> BodyBudget {
        BodyBudget { limit_bytes, in_use: AtomicU64::new(0), refused: AtomicU64::new(0) }
    }

    /// The budget, bytes (`ankusa_ingest_body_budget_bytes`).
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Bytes held by live permits now (`ankusa_ingest_body_bytes_in_flight`).
    pub fn in_use_bytes(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Requests refused because the budget was spent, since the start
    /// (`ankusa_ingest_body_budget_refused_total`).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts one request refused for the budget.
    pub fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes `bytes` of the budget; `None` when that would put the bytes in
    /// use over the limit (nothing taken).
    pub fn try_take(&self, bytes: u64) -> Option<BodyPermit<'_>> {
        // `then`, not `then_some`: a permit built and dropped on refusal
        // would give back bytes it never took.
        self.take(bytes).then(|| BodyPermit { budget: self, bytes })
    }

    fn take(&self, bytes: u64) -> bool {
        if bytes == 0 {
            return true;
        }
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.limit_bytes)
            })
            .is_ok()
    }
}

/// Bytes of a [`BodyBudget`] held for one request; given back when dropped.
#[derive(Debug)]
pub struct BodyPermit<'a> {
    budget: &'a BodyBudget,
    bytes: u64,
}

impl BodyPermit<'_> {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Holds `more` bytes besides; false (nothing taken) when the budget has
    /// no room for them.
    pub fn try_grow(&mut self, more: u64) -> bool {
        let ok = self.budget.take(more);
        if ok {
            self.bytes += more;
        }
        ok
    }
}

impl Drop for BodyPermit<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.in_use.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// Why a body could not be read whole.
#[derive(Debug)]
pub enum BodyReadError {
    /// Over `body_limit_bytes` (413).
    TooLarge,
    /// The body budget has no room for the rest of it (503).
    Budget,
    /// The connection failed or the body was malformed (400).
    Read(hyper::Error),
}

/// Reads a request body whole into one buffer, holding its bytes in
/// `permit`: `declared` (a `Content-Length` already checked against `limit`
/// and already held by the permit) sizes the buffer once; a body without one
/// grows the buffer (and the permit, by at least 64 KiB at a time) as it
/// arrives. Each chunk is copied out of hyper's read buffer as it comes, so a
/// body costs its length once, not once more for a list of chunks.
///
/// # Errors
/// [`BodyReadError::TooLarge`] past `limit`, [`BodyReadError::Budget`] when
/// the permit cannot grow (nothing more of the body is read), and
/// [`BodyReadError::Read`].
pub async fn read_body(
    mut body: hyper::body::Incoming,
    limit: u64,
    declared: Option<u64>,
    permit: &mut BodyPermit<'_>,
) -> Result<Vec<u8>, BodyReadError> {
    use http_body_util::BodyExt;
    let mut buf: Vec<u8> = Vec::with_capacity(usize::try_from(declared.unwrap_or(0).min(limit)).unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyReadError::Read)?;
        let Ok(data) = frame.into_data() else { continue };
        let len = buf.len() as u64 + data.len() as u64;
        if len > limit {
            return Err(BodyReadError::TooLarge);
        }
        if len > buf.capacity() as u64 {
            // Grow the buffer to what the permit holds: at least double (as a
            // Vec would) and at least one step, never past the limit.
            let cap = len.max(2 * buf.capacity() as u64).max(GROW_STEP_BYTES).min(limit);
            if cap > permit.bytes() && !permit.try_grow(cap - permit.bytes()) {
                return Err(BodyReadError::Budget);
            }
            buf.reserve_exact(usize::try_from(cap).unwrap_or(usize::MAX) - buf.len());
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf)
}

/// One listener's connections, for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections open now (`ankusa_listener_connections{listener}`).
    pub open: AtomicU64,
    /// The listener's cap (`ankusa_listener_connections_max{listener}`).
    pub cap: AtomicU64,
    /// Connections refused because the listener held its cap
    /// (`ankusa_listener_connections_refused_total{listener}`).
    pub refused: AtomicU64,
}

/// The message of the 503 a connection past a listener's cap gets.
pub fn cap_message(listener: &str, cap: usize) -> String {
    format!("the {listener} listener holds its cap of {cap} connections; retry later")
}

/// Answers a connection the listener will not serve because it holds its cap
/// of connections: whatever the client has sent already is read (so the close
/// is not a reset that could discard the answer), `503` with `Retry-After`,
/// `Connection: close` and the JSON `body` is written if the socket takes it
/// at once, and the connection is closed. Nothing waits: the listener goes on
/// accepting, and the file descriptor is free again before this returns.
pub fn refuse_connection(stream: TcpStream, body: &str) {
    use std::io::{Read, Write};
    // The std socket (still non-blocking): tokio's `try_read`/`try_write`
    // would see no readiness yet on a socket accepted this instant.
    let Ok(mut stream) = stream.into_std() else { return };
    let mut scratch = [0u8; 4096];
    for _ in 0..16 {
        match stream.read(&mut scratch) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {BUSY_RETRY_AFTER_S}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write(answer.as_bytes());
    drop(stream);
}

/// How an accept loop rides out a failed `accept()`: the listener is never
/// given up. The error (most often `EMFILE`: the process has no file
/// descriptor left) is logged at most once a second with how many failed
/// since the last line, and the loop pauses before it accepts again (the
/// connection waits in the kernel's backlog meanwhile).
#[derive(Debug, Default)]
pub struct AcceptErrors {
    last_logged: Option<Instant>,
    since_logged: u64,
}

impl AcceptErrors {
    /// How long the loop waits after a failed `accept()`.
    pub const PAUSE: Duration = Duration::from_millis(50);

    /// Records one failed `accept()` of `listener` and returns how long to
    /// pause before the next.
    pub fn failed(&mut self, listener: &str, e: &std::io::Error) -> Duration {
        self.since_logged += 1;
        let now = Instant::now();
        if self.last_logged.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            warn!(
                listener,
                error = %e,
                failed = self.since_logged,
                "accept failed (the listener keeps running; connections wait in the backlog)"
            );
            self.last_logged = Some(now);
            self.since_logged = 0;
        }
        Self::PAUSE
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Permits never hold more than the limit together, and give their
    /// bytes back when dropped.
    #[test]
    fn permits_hold_at_most_the_limit_and_give_back_on_drop() {
        let b = BodyBudget::new(100);
        let a = b.try_take(60).unwrap();
        assert!(b.try_take(41).is_none(), "60 + 41 > 100");
        let mut c = b.try_take(40).unwrap();
        assert_eq!(b.in_use_bytes(), 100);
        assert!(!c.try_grow(1));
        assert_eq!(c.bytes(), 40);
        drop(a);
        assert_eq!(b.in_use_bytes(), 40);
        assert!(c.try_grow(60));
        assert_eq!((c.bytes(), b.in_use_bytes()), (100, 100));
        assert!(b.try_take(0).is_some(), "an empty body takes nothing");
        drop(c);
        assert_eq!(b.in_use_bytes(), 0);
        assert!(b.try_take(u64::MAX).is_none(), "no overflow");
        assert_eq!(b.in_use_bytes(), 0);
    }

    /// Threads taking and giving back at once never see more than the
    /// limit in use.
    #[test]
    fn concurrent_permits_never_exceed_the_limit() {
        let b = std::sync::Arc::new(BodyBudget::new(1_000));
        let peak = std::sync::Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (b, peak) = (std::sync::Arc::clone(&b), std::sync::Arc::clone(&peak));
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        if let Some(p) = b.try_take(1 + i % 300) {
                            peak.fetch_max(b.in_use_bytes(), Ordering::Relaxed);
                            drop(p);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(peak.load(Ordering::Relaxed) <= 1_000);
        assert_eq!(b.in_use_bytes(), 0);
    }
}
