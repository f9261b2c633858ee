//! The turns of the run slots (docs/design.md section 6, "Transforms"):
//! at most as many runs at once as there are slots, and when runs wait, the
//! slot that frees goes to the sink entries in turn, one run each, not to
//! the longest queue. One entry's slow programs (each holding a slot up to
//! its deadline) then delay another entry's runs by at most about one run
//! each, instead of by that entry's whole queue: a slow transform holds back
//! its own hooks, not every other sink's.
//!
//! An entry is its compiled program (one per sink entry; a reload compiles a
//! new one), named by the program's address.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// The slots and the runs waiting for one, per entry.
pub(crate) struct Turns {
    state: Mutex<State>,
}

struct State {
    free: usize,
    /// Each waiting entry's runs, oldest first.
    waiting: HashMap<usize, VecDeque<oneshot::Sender<Turn>>>,
    /// The entries with a waiting run, in the order their turn comes.
    ring: VecDeque<usize>,
}

/// One slot, held by a run; dropping it gives the slot to the next entry's
/// oldest waiting run, or frees it.
pub(crate) struct Turn {
    /// `None` once the slot went on elsewhere (see [`Turns::give`]).
    turns: Option<Arc<Turns>>,
}

impl Turns {
    /// `slots` slots, all free.
    pub(crate) fn new(slots: usize) -> Arc<Turns> {
        Arc::new(Turns {
            state: Mutex::new(State {
                free: slots,
                waiting: HashMap::new(),
                ring: VecDeque::new(),
            }),
        })
    }

    /// A slot for a run of `entry`: at once when one is free and no run
    /// waits, else when the entries' turns come to it. Dropping the future
    /// gives up the place (a slot handed to it meanwhile goes on).
    pub(crate) async fn take(self: &Arc<Self>, entry: usize) -> Option<Turn> {
        let rx = {
            let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let st = &mut *guard;
            if st.free > 0 && st.ring.is_empty() {
                st.free -= 1;
                return Some(Turn {
                    turns: Some(Arc::clone(self)),
                });
            }
            let (tx, rx) = oneshot::channel();
            let queue = st.waiting.entry(entry).or_default();
            if queue.is_empty() {
                st.ring.push_back(entry);
            }
            queue.push_back(tx);
            rx
        };
        rx.await.ok()
    }

    /// The slot of a dropped [`Turn`]: to the next entry in turn whose
    /// waiting run is still there, else free.
    fn give(self: &Arc<Self>) {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let st = &mut *guard;
        while let Some(entry) = st.ring.pop_front() {
            let Some(queue) = st.waiting.get_mut(&entry) else {
                continue;
            };
            let next = queue.pop_front();
            if queue.is_empty() {
                st.waiting.remove(&entry);
            } else {
                st.ring.push_back(entry);
            }
            if let Some(tx) = next {
                let turn = Turn {
                    turns: Some(Arc::clone(self)),
                };
                match tx.send(turn) {
                    Ok(()) => return,
                    // That run stopped waiting: the slot is not its, and
                    // this turn must not give it back (the lock is held).
                    Err(mut turn) => turn.turns = None,
                }
            }
        }
        st.free += 1;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(turns) = self.turns.take() {
            turns.give();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A waiting `take` as a task: its turn arrives on the channel.
    fn wait(
        turns: &Arc<Turns>,
        entry: usize,
        got: &tokio::sync::mpsc::UnboundedSender<(usize, Turn)>,
    ) {
        let (turns, got) = (Arc::clone(turns), got.clone());
        tokio::spawn(async move {
            if let Some(t) = turns.take(entry).await {
                let _ = got.send((entry, t));
            }
        });
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_entries_in_turn_not_to_the_longest_queue() {
        let turns = Turns::new(1);
        let held = turns.take(1).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Entry 1 queues five runs, then entry 2 one, then entry 3 one.
        for _ in 0..5 {
            wait(&turns, 1, &tx);
            tokio::task::yield_now().await;
        }
        wait(&turns, 2, &tx);
        tokio::task::yield_now().await;
        wait(&turns, 3, &tx);
        tokio::task::yield_now().await;
        drop(held);
        let mut order = Vec::new();
        for _ in 0..7 {
            let (entry, turn) = rx.recv().await.unwrap();
            order.push(entry);
            drop(turn);
        }
        assert_eq!(order, [1, 2, 3, 1, 1, 1, 1]);
        // Every slot is free again: one is taken at once.
        assert!(turns.take(9).await.is_some());
    }

    #[tokio::test]
    async fn a_run_that_stops_waiting_passes_its_slot_on() {
        let turns = Turns::new(1);
        let held = turns.take(1).await.unwrap();
        // Entry 2 gives up waiting; entry 3 waits on.
        let gave_up =
            tokio::time::timeout(std::time::Duration::from_millis(1), turns.take(2)).await;
        assert!(gave_up.is_err());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        wait(&turns, 3, &tx);
        tokio::task::yield_now().await;
        drop(held);
        let (entry, turn) = rx.recv().await.unwrap();
        assert_eq!(entry, 3);
        drop(turn);
        // Two slots' worth of takes at once: only one slot exists.
        let a = turns.take(4).await.unwrap();
        let b = tokio::time::timeout(std::time::Duration::from_millis(1), turns.take(5)).await;
        assert!(b.is_err(), "a second slot appeared");
        drop(a);
    }
}
