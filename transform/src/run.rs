//! A run on its own thread (docs/design.md section 6, "Transforms"): a
//! thread with a [`STACK_BYTES`] stack per run, at most as many at once as
//! the machine has cores, its answer awaited with a deadline.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot};

use crate::{GRACE_MS, Program, RunError, STACK_BYTES};

/// The runs that may go at once: one per core, at least 2. A run holds its
/// permit until its thread ends, so a run whose caller stopped waiting
/// (after a built-in operation outlasted the deadline) still counts.
static RUNS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    Arc::new(Semaphore::new(cores.max(2)))
});

impl Program {
    /// Runs the program on `body` (the stored body, as received): its one
    /// output as compact JSON, the body to deliver.
    ///
    /// Waits for a turn (at most one run per core at once), then runs on a
    /// thread of its own and answers within `timeout_ms` + [`GRACE_MS`] of
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
        let permit = match tokio::time::timeout(wait_turn, Arc::clone(&RUNS).acquire_owned()).await
        {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => return Err(RunError::Unavailable(e.to_string())),
            Err(_) => {
                return Err(RunError::Unavailable(format!(
                    "no free run slot within {} ms (every slot is held by a run past its deadline)",
                    wait_turn.as_millis()
                )));
            }
        };
        let (tx, rx) = oneshot::channel();
        let program = Arc::clone(self);
        std::thread::Builder::new()
            .name("ankusa-transform".to_owned())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                let answer = program.eval(&body);
                // The caller may have stopped waiting; the answer is then
                // nobody's.
                let _ = tx.send(answer);
                drop(permit);
            })
            .map_err(|e| RunError::Unavailable(format!("no thread for the run: {e}")))?;
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
