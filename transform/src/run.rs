//! A run on a thread of the transform pool (docs/design.md section 6,
//! "Transforms"): as many threads as runs may go at once (one per core, at
//! least 2), each with a [`STACK_BYTES`] stack, made once and reused; a
//! run's answer awaited with a deadline.
//!
//! A thread per run, made and detached at each delivery, crashed the relay
//! once in about a million runs (a fault inside `pthread_detach` while the
//! 512 MiB stack of a thread that had just ended was being unmapped), and
//! mapping such a stack per hook cost delivery rate: the pool makes each
//! stack once.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::turns::Turns;
use crate::{GRACE_MS, Program, RunError, STACK_BYTES};

/// A run handed to the pool.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// How many runs may go at once: one per core, at least 2.
fn slots() -> usize {
    std::thread::available_parallelism()
        .map_or(2, usize::from)
        .max(2)
}

/// The runs that may go at once, one per pool thread, in turns by sink
/// entry (src/turns.rs). A run holds its turn until it ends on its thread,
/// so a run whose caller stopped waiting (after a built-in operation
/// outlasted the deadline) still counts, and a run given a turn always finds
/// a thread free.
static RUNS: LazyLock<Arc<Turns>> = LazyLock::new(|| Turns::new(slots()));

/// The pool's queue: its threads take runs from it in turn. `Err` when not
/// one thread could be made (every run is then refused, and retried).
static POOL: LazyLock<Result<Mutex<Sender<Job>>, String>> = LazyLock::new(|| {
    let (tx, rx) = channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let mut made = 0;
    let mut last_error = String::new();
    for i in 0..slots() {
        let rx = Arc::clone(&rx);
        match std::thread::Builder::new()
            .name(format!("ankusa-transform-{i}"))
            .stack_size(STACK_BYTES)
            .spawn(move || work(&rx))
        {
            Ok(_) => made += 1,
            Err(e) => last_error = e.to_string(),
        }
    }
    if made == 0 {
        Err(format!("no thread for the transform pool: {last_error}"))
    } else {
        Ok(Mutex::new(tx))
    }
});

/// A pool thread: runs jobs until the queue is gone (never, in a relay).
fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        match job {
            // A job catches its own unwinding (`Program::eval`).
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

impl Program {
    /// Runs the program on `body` (the stored body, as received): its one
    /// output as compact JSON, the body to deliver.
    ///
    /// Waits for a turn (at most one run per core at once), then runs on a
    /// thread of the pool and answers within `timeout_ms` + [`GRACE_MS`] of
    /// the program's start, whatever the program does.
    ///
    /// # Errors
    /// [`RunError`]: every one but [`RunError::Unavailable`] says the hook
    /// cannot go through this program ([`RunError::is_permanent`]).
    pub async fn run(self: &Arc<Self>, body: Vec<u8>) -> Result<Vec<u8>, RunError> {
        // A turn waited for no longer than the run itself may take: a run
        // whose built-in operation outlasts its deadline keeps its permit
        // until it ends, and the hooks behind it must not wait on it without
        // end. No turn in time is a retry of the row, not a dead letter.
        let wait_turn = Duration::from_millis(self.limits.timeout_ms.saturating_add(GRACE_MS));
        // The entry is its compiled program: one per sink entry.
        let entry = Arc::as_ptr(self) as usize;
        let permit = match tokio::time::timeout(wait_turn, RUNS.take(entry)).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(RunError::Unavailable(
                    "the run slots' turns are gone".to_owned(),
                ));
            }
            Err(_) => {
                return Err(RunError::Unavailable(format!(
                    "no free run slot within {} ms (every slot is busy with other runs, of this or other sink entries)",
                    wait_turn.as_millis()
                )));
            }
        };
        if let Some(command) = crate::process::command() {
            let answer = crate::process::run(self, &body, command).await;
            drop(permit);
            return answer;
        }
        let (tx, rx) = oneshot::channel();
        let program = Arc::clone(self);
        let job: Job = Box::new(move || {
            let answer = program.eval(&body);
            // The caller may have stopped waiting; the answer is then
            // nobody's.
            let _ = tx.send(answer);
            drop(permit);
        });
        let queue = POOL
            .as_ref()
            .map_err(|e| RunError::Unavailable(e.clone()))?;
        queue
            .lock()
            .map_err(|_| {
                RunError::Unavailable("the transform pool's queue is poisoned".to_owned())
            })?
            .send(job)
            .map_err(|_| RunError::Unavailable("the transform pool has no thread".to_owned()))?;
        let wait = Duration::from_millis(self.limits.timeout_ms.saturating_add(GRACE_MS));
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(RunError::Failed(
                "the run's thread ended without an answer".to_owned(),
            )),
            Err(_) => Err(RunError::Timeout(self.limits.timeout_ms)),
        }
    }
}
