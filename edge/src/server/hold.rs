//! Holding ingest connections while a takeover moves the store (docs/design.md
//! section 5, "Takeover"): the new process accepts on the listening socket it
//! was passed as soon as it has it, so no connection waits in the kernel's
//! backlog or is refused, and keeps each accepted connection unread until its
//! [`Edge`](super::Edge) can serve it. A connection held longer than the bound
//! is answered `503` with `Retry-After` and closed: a provider that times out
//! (GitHub after 10 s) then records a failure it retries on its own terms,
//! never a hook that was silently lost. If the takeover fails, every held
//! connection gets that answer at once.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::{debug, info};

use super::limits;

/// The default bound on how long a held connection waits for the new
/// process's edge: well inside GitHub's 10 s delivery timeout, and long
/// enough for the old process to finish its requests and close the store.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(5);

/// A connection accepted while the edge could not serve it yet.
pub struct Held {
    /// The connection, nothing read from it yet.
    pub stream: TcpStream,
    /// Its client.
    pub peer: SocketAddr,
    since: Instant,
}

/// What a holding listener ended with: the listener (to be served by the
/// edge) and the connections still held, oldest first.
pub struct Released {
    /// The listener the holding accepted on.
    pub listener: TcpListener,
    /// The connections held, oldest first.
    pub held: Vec<Held>,
    /// How many were answered 503 because they waited past the bound, and
    /// how many because the hold was full.
    pub answered_busy: u64,
}

/// Accepts on a listener and holds the connections (see the module docs).
pub struct Holding {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Released>,
}

/// The answer of a connection held past the bound, or refused because the
/// hold is full.
const BUSY: &str = "{\"error\":\"the relay is handing over to a new process; retry shortly\"}";

impl Holding {
    /// Starts holding: at most `cap` connections, each for at most `bound`.
    #[must_use]
    pub fn start(listener: TcpListener, bound: Duration, cap: usize) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut held: VecDeque<Held> = VecDeque::new();
            let mut answered_busy = 0u64;
            let mut accept_errors = limits::AcceptErrors::default();
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, peer)) => {
                            if held.len() >= cap.max(1) {
                                answered_busy += 1;
                                limits::refuse_connection(stream, BUSY);
                            } else {
                                held.push_back(Held { stream, peer, since: Instant::now() });
                            }
                        }
                        Err(e) => tokio::time::sleep(accept_errors.failed("ingest", &e)).await,
                    },
                    _ = tick.tick() => {
                        // Oldest first: the front waited longest.
                        while held.front().is_some_and(|h| h.since.elapsed() >= bound) {
                            let h = held.pop_front().expect("front checked");
                            answered_busy += 1;
                            debug!(peer = %h.peer, "a held ingest connection waited past the bound: 503");
                            limits::refuse_connection(h.stream, BUSY);
                        }
                    }
                    _ = &mut stopped => break,
                }
            }
            Released {
                listener,
                held: held.into(),
                answered_busy,
            }
        });
        Self { stop, task }
    }

    /// Stops accepting and returns the listener and the connections held
    /// (for [`Edge::serve_with`](super::Edge::serve_with)).
    ///
    /// # Panics
    /// The holding task panicked (it does not).
    pub async fn release(self) -> Released {
        let _ = self.stop.send(());
        let released = self.task.await.expect("the holding task does not panic");
        info!(
            held = released.held.len(),
            answered_busy = released.answered_busy,
            "takeover: the edge serves the connections held while the store moved"
        );
        released
    }

    /// Stops accepting and answers every held connection `503` with
    /// `Retry-After` (the takeover failed); returns how many were held.
    pub async fn refuse_all(self) -> usize {
        let _ = self.stop.send(());
        let Ok(released) = self.task.await else {
            return 0;
        };
        let n = released.held.len();
        for h in released.held {
            limits::refuse_connection(h.stream, BUSY);
        }
        n
    }
}
