//! The ingest and admin listeners' shared limits (docs/design.md section 5,
//! "Limits" and "Edge"; README, "Limits"): the node-wide budget of request body
//! bytes ([`BodyBudget`]), one listener's connection counts ([`ConnStats`]),
//! the answer to a connection past a listener's cap ([`refuse_connection`]),
//! and the accept loop's handling of a failed `accept()` ([`AcceptErrors`]).
//!
//! # Invariants it keeps
//! - The bytes held by every live [`BodyPermit`] together never exceed the
//!   budget's `limit_bytes` (a compare-and-swap, so concurrent requests cannot
//!   all pass on the same reading).
//! - A permit holds the body bytes its request has received, no more: a
//!   body's bytes are taken from the budget as they arrive, never from its
//!   `Content-Length` ahead of them ([`read_body`]). A client therefore holds
//!   only what it has sent (and for at most the body timeout): a few slow
//!   clients declaring large bodies cannot spend the budget for everyone.
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

/// The first buffer of a body without a `Content-Length` (address space: its
/// pages become resident only as the body's bytes are written into it).
const FIRST_BUFFER_BYTES: u64 = 64 * 1024;

/// The node's budget of request body bytes in memory at once, all ingest
/// connections together: the bytes of the bodies received so far and held
/// until their requests end (answered, committed or refused). Each body's
/// bytes are taken from it as they arrive, whether the body has a
/// `Content-Length` or is chunked; a body whose next bytes do not fit is
/// refused there (ingest answers 503 with `Retry-After` and reads no more of
/// it) and gives back what it held. A declared `Content-Length` takes
/// nothing ahead of its bytes, so connections that declare large bodies and
/// send them slowly hold only what they have sent.
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
        BodyBudget {
            limit_bytes,
            in_use: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
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

    /// A permit holding nothing yet, for a body about to be read: it grows
    /// as the body's bytes arrive ([`BodyPermit::try_grow`], [`read_body`]).
    pub fn empty_permit(&self) -> BodyPermit<'_> {
        BodyPermit {
            budget: self,
            bytes: 0,
        }
    }

    /// Takes `bytes` of the budget; `None` when that would put the bytes in
    /// use over the limit (nothing taken).
    pub fn try_take(&self, bytes: u64) -> Option<BodyPermit<'_>> {
        // `then`, not `then_some`: a permit built and dropped on refusal
        // would give back bytes it never took.
        self.take(bytes).then(|| BodyPermit {
            budget: self,
            bytes,
        })
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
    /// The body budget has no room for the bytes that arrived, or the
    /// allocator refused the body's buffer (503).
    Budget,
    /// The connection failed or the body was malformed (400).
    Read(Box<dyn std::error::Error + Send + Sync>),
}

/// Reads a request body whole into one buffer, taking each chunk's bytes
/// from the budget into `permit` as the chunk arrives, before it is copied:
/// the permit holds the bytes received so far, so a client that declared a
/// large `Content-Length` and sent little holds little. `declared` (a
/// `Content-Length` already checked against `limit`) sizes the buffer once,
/// at the first chunk; a body without one grows its buffer (at least
/// doubling, never past `limit`). A buffer's capacity beyond the bytes
/// written is address space, not memory: its pages become resident only as
/// bytes are written into them (glibc maps blocks of 1 MiB and more afresh,
/// `serve`'s mmap threshold), so the bodies' resident bytes stay within the
/// budget (plus at most a page per body). Each chunk is copied out of
/// hyper's read buffer as it comes, so a body costs its length once, not
/// once more for a list of chunks. Generic over the body: hyper's
/// `Incoming` on the listener, a `Full` in the fuzz target of the request
/// path (`crate::fuzz::request`, feature `fuzz`).
///
/// # Errors
/// [`BodyReadError::TooLarge`] past `limit`; [`BodyReadError::Budget`] when
/// the budget has no room for a chunk that arrived, or the allocator refused
/// the buffer (nothing more of the body is read; the permit keeps what it
/// held until it is dropped); [`BodyReadError::Read`].
pub async fn read_body<B>(
    mut body: B,
    limit: u64,
    declared: Option<u64>,
    permit: &mut BodyPermit<'_>,
) -> Result<Vec<u8>, BodyReadError>
where
    B: hyper::body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use http_body_util::BodyExt;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyReadError::Read(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        let len = buf.len() as u64 + data.len() as u64;
        if len > limit {
            return Err(BodyReadError::TooLarge);
        }
        // The chunk's bytes come out of the budget now that they are here
        // (the permit held exactly `buf.len()` until this chunk).
        if len > permit.bytes() && !permit.try_grow(len - permit.bytes()) {
            return Err(BodyReadError::Budget);
        }
        if len > buf.capacity() as u64 {
            // `Content-Length` sizes the buffer once (hyper ends the body at
            // exactly that length); a chunked body's at least doubles.
            let cap = match declared {
                Some(d) => d.max(len),
                None => len
                    .max(2 * buf.capacity() as u64)
                    .max(FIRST_BUFFER_BYTES)
                    .min(limit),
            };
            // `try_`: an allocator that refuses (strict overcommit) is a 503,
            // never an abort of the relay.
            let more = usize::try_from(cap).unwrap_or(usize::MAX) - buf.len();
            buf.try_reserve_exact(more)
                .map_err(|_| BodyReadError::Budget)?;
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
    let Ok(mut stream) = stream.into_std() else {
        return;
    };
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
        if self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
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

    /// A body from a list of chunks, then either its end or (`hold`) no
    /// more bytes ever: a client that stopped sending.
    struct Chunks {
        chunks: std::collections::VecDeque<bytes::Bytes>,
        hold: bool,
    }

    impl Chunks {
        fn new(sizes: &[usize], hold: bool) -> Chunks {
            let chunks = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| bytes::Bytes::from(vec![b'a' + i as u8; n]))
                .collect();
            Chunks { chunks, hold }
        }
    }

    impl hyper::body::Body for Chunks {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>>
        {
            match self.chunks.pop_front() {
                Some(c) => std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(c)))),
                None if self.hold => std::task::Poll::Pending,
                None => std::task::Poll::Ready(None),
            }
        }
    }

    /// Polls `fut` once (the chunks of a [`Chunks`] body are all ready at
    /// once): its output, or `None` when it waits for more of the body.
    fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> Option<F::Output> {
        match fut.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }

    /// A body that declared a large `Content-Length` and sent a few bytes
    /// holds those bytes only: the rest of the budget stays free for other
    /// bodies, and the slow one takes its bytes as they arrive.
    #[test]
    fn a_declared_length_takes_nothing_ahead_of_the_bytes_received() {
        let b = BodyBudget::new(1_000);
        let mut slow = b.empty_permit();
        {
            let read = read_body(Chunks::new(&[3, 4], true), 1_000, Some(1_000), &mut slow);
            let mut read = std::pin::pin!(read);
            assert!(
                poll_once(read.as_mut()).is_none(),
                "the slow body waits for the rest"
            );
            assert_eq!(b.in_use_bytes(), 7, "7 bytes received, 1,000 declared");
            // Another body (declaring all the room that is left) is read whole.
            let mut other = b.empty_permit();
            let other_read = read_body(
                Chunks::new(&[500, 493], false),
                1_000,
                Some(993),
                &mut other,
            );
            let body = poll_once(std::pin::pin!(other_read)).unwrap().unwrap();
            assert_eq!(body.len(), 993);
            assert_eq!((other.bytes(), b.in_use_bytes()), (993, 1_000));
            drop(other);
            assert_eq!(b.in_use_bytes(), 7);
        }
        assert_eq!(
            slow.bytes(),
            7,
            "the permit keeps what it held until dropped"
        );
        drop(slow);
        assert_eq!(b.in_use_bytes(), 0);
    }

    /// A chunk the budget has no room for when it arrives refuses the body
    /// (`Budget`), and no more of the body is read; with and without a
    /// `Content-Length`.
    #[test]
    fn a_chunk_without_room_refuses_the_body_and_nothing_more_is_read() {
        for declared in [Some(60), None] {
            let b = BodyBudget::new(100);
            let held = b.try_take(70).unwrap();
            let mut permit = b.empty_permit();
            let mut body = Chunks::new(&[20, 20, 20], false);
            let got = poll_once(std::pin::pin!(read_body(
                &mut body,
                100,
                declared,
                &mut permit
            )))
            .unwrap();
            assert!(
                matches!(got, Err(BodyReadError::Budget)),
                "{declared:?}: {got:?}"
            );
            assert_eq!(
                body.chunks.len(),
                1,
                "{declared:?}: the third chunk is not read"
            );
            assert_eq!(
                (permit.bytes(), b.in_use_bytes()),
                (20, 90),
                "{declared:?}: the first chunk is held"
            );
            drop(permit);
            drop(held);
            assert_eq!(b.in_use_bytes(), 0);
        }
    }

    /// A body read whole holds exactly its length, chunked or not, its
    /// bytes in order; past the limit it is `TooLarge`.
    #[test]
    fn a_body_read_whole_holds_its_length() {
        let b = BodyBudget::new(1 << 20);
        for declared in [Some(200_000), None] {
            let mut permit = b.empty_permit();
            let body = Chunks::new(&[1, 70_000, 129_999], false);
            let got = poll_once(std::pin::pin!(read_body(
                body,
                1 << 20,
                declared,
                &mut permit
            )))
            .unwrap()
            .unwrap();
            assert_eq!(got.len(), 200_000, "{declared:?}");
            assert_eq!(
                (got[0], got[1], got[70_001], got[199_999]),
                (b'a', b'b', b'c', b'c')
            );
            assert_eq!(
                (permit.bytes(), b.in_use_bytes()),
                (200_000, 200_000),
                "{declared:?}"
            );
        }
        assert_eq!(b.in_use_bytes(), 0);
        let mut permit = b.empty_permit();
        let got = poll_once(std::pin::pin!(read_body(
            Chunks::new(&[60, 60], false),
            100,
            None,
            &mut permit
        )))
        .unwrap();
        assert!(matches!(got, Err(BodyReadError::TooLarge)), "{got:?}");
        assert_eq!(permit.bytes(), 60, "the bytes past the limit are not taken");
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
