//! The admin listener's connections under its cap (docs/design.md section 5,
//! "Admin API"): room for the probes.
//!
//! A connection counts as busy from the moment its request's headers are in
//! until its answer's body has been written (the body carries a [`Busy`]
//! guard, dropped when hyper is done with it); at any other time it is idle:
//! waiting for a request, or sending one slowly. When the listener holds its
//! cap and a new connection arrives, the oldest idle connection is closed to
//! make room ([`Conns::evict_idle`]); only when every connection is busy is
//! the new one refused (503). Without this, anyone who reached the port could
//! fill the cap with idle connections (no token is needed to open one) and
//! `/healthz` and `/readyz` would fail, so the probes would restart a healthy
//! relay.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, SizeHint};
use tokio::task::{AbortHandle, Id, JoinSet};

/// Marks a connection busy while it lives: one per request, moved into the
/// answer's body.
#[derive(Debug)]
pub(crate) struct Busy(Arc<AtomicUsize>);

impl Busy {
    pub(crate) fn new(count: &Arc<AtomicUsize>) -> Busy {
        count.fetch_add(1, Ordering::SeqCst);
        Busy(Arc::clone(count))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body that keeps its connection busy until hyper has written
/// it and dropped it.
#[derive(Debug)]
pub(crate) struct Tracked<B> {
    inner: B,
    _busy: Busy,
}

impl<B> Tracked<B> {
    pub(crate) fn new(inner: B, busy: Busy) -> Tracked<B> {
        Tracked { inner, _busy: busy }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// One open connection: when it was accepted (in order) and whether it is
/// inside a request.
struct Slot {
    order: u64,
    busy: Arc<AtomicUsize>,
    abort: AbortHandle,
}

/// The listener's open connections, each a task.
#[derive(Default)]
pub(crate) struct Conns {
    tasks: JoinSet<()>,
    slots: HashMap<Id, Slot>,
    accepted: u64,
}

impl Conns {
    /// Connections open now (an evicted one no longer counts, though its
    /// task may take a moment to end).
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Serves a new connection: `serve` gets the counter its requests mark
    /// busy.
    pub(crate) fn spawn<F>(&mut self, serve: impl FnOnce(Arc<AtomicUsize>) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let busy = Arc::new(AtomicUsize::new(0));
        let abort = self.tasks.spawn(serve(Arc::clone(&busy)));
        self.accepted += 1;
        self.slots.insert(
            abort.id(),
            Slot {
                order: self.accepted,
                busy,
                abort,
            },
        );
    }

    /// Waits until a connection's task ends (pending forever while none
    /// runs). Cancel-safe, as `JoinSet::join_next_with_id` is.
    pub(crate) async fn ended(&mut self) {
        match self.tasks.join_next_with_id().await {
            Some(Ok((id, ()))) => {
                self.slots.remove(&id);
            }
            Some(Err(e)) => {
                self.slots.remove(&e.id());
            }
            None => std::future::pending().await,
        }
    }

    /// Closes the oldest idle connection; false when every one is busy.
    pub(crate) fn evict_idle(&mut self) -> bool {
        let oldest = self
            .slots
            .iter()
            .filter(|(_, s)| s.busy.load(Ordering::SeqCst) == 0 && !s.abort.is_finished())
            .min_by_key(|(_, s)| s.order)
            .map(|(id, _)| *id);
        match oldest.and_then(|id| self.slots.remove(&id)) {
            Some(slot) => {
                slot.abort.abort();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// Three connections, each a task that never ends on its own and says,
    /// by dropping its sender, that it was closed.
    fn three(conns: &mut Conns) -> (Vec<Arc<AtomicUsize>>, Vec<oneshot::Receiver<()>>) {
        let (mut busy, mut closed) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (tx, rx) = oneshot::channel::<()>();
            conns.spawn(|b| {
                busy.push(b);
                async move {
                    let _tx = tx;
                    std::future::pending::<()>().await;
                }
            });
            closed.push(rx);
        }
        (busy, closed)
    }

    #[tokio::test]
    async fn the_oldest_idle_connection_makes_room_and_busy_ones_stay() {
        let mut conns = Conns::default();
        let (busy, mut closed) = three(&mut conns);
        assert_eq!(conns.len(), 3);
        // The oldest is inside a request: the second-oldest goes.
        let first = Busy::new(&busy[0]);
        assert!(conns.evict_idle());
        assert_eq!(conns.len(), 2);
        assert!(
            (&mut closed[1]).await.is_err(),
            "the oldest idle one closed"
        );
        assert!(
            closed[0]
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty)
        );
        // Every one left is busy: nothing goes (the listener refuses).
        let third = Busy::new(&busy[2]);
        assert!(!conns.evict_idle());
        assert_eq!(conns.len(), 2);
        // Once the first's answer is written it is idle, and goes.
        drop(first);
        assert!(conns.evict_idle());
        assert!((&mut closed[0]).await.is_err());
        assert_eq!(conns.len(), 1);
        assert!(
            closed[2]
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty)
        );
        drop(third);
        // The evicted tasks are reaped without counting again.
        conns.ended().await;
        conns.ended().await;
        assert_eq!(conns.len(), 1);
    }
}
