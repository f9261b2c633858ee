//! Runs in worker processes (docs/design.md section 6, "Transforms"): how
//! the relay runs a program when its executable can be started as a worker
//! ([`use_worker_processes`]; the `ankusa` binary does so at start).
//!
//! Each run takes an idle worker, or starts one, sends it the request and
//! reads its answer within the run's `timeout_ms` + [`GRACE_MS`]:
//! - an answer: the worker goes back to the idle ones;
//! - no answer in time: the worker is killed (a built-in operation that
//!   outlasts the deadline ends with it) and the run is a
//!   [`RunError::Timeout`];
//! - the worker's stdout ends: when a worker started for this run aborted
//!   (SIGABRT, SIGSEGV, ...: a stack overflow, an allocation that failed),
//!   the run is a [`RunError::Failed`] naming the signal, which
//!   dead-letters the hook. Any other end is not the program's doing: a
//!   worker that had served runs before may have been killed while idle,
//!   and a SIGKILL or SIGTERM comes from outside. The run is tried on a new
//!   worker, and when a second new one also ends so, it is a
//!   [`RunError::Unavailable`], a retry of the row;
//! - no answer in time from a worker stopped from outside (SIGSTOP): it
//!   is killed and the run is a [`RunError::Unavailable`] too;
//! - a worker that cannot be started: [`RunError::Unavailable`], a retry of
//!   the row.
//!
//! At most as many workers as runs may go at once (the turn a run holds),
//! made as needed and kept idle between runs. A worker ends when the relay
//! does: its stdin ends (and it is killed when its handle is dropped).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::{GRACE_MS, Program, RunError, wire};

/// How a worker is started: an executable and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The executable: the relay's own (`/proc/self/exe` on Linux, which
    /// starts the running file even after an upgrade replaced it on disk).
    pub program: PathBuf,
    /// Its arguments (`["transform-worker"]`).
    pub args: Vec<OsString>,
    /// The name it is started under (its `argv[0]`, what `ps` shows):
    /// `ankusa` rather than `/proc/self/exe`; `None` keeps `program`.
    pub arg0: Option<OsString>,
}

static COMMAND: OnceLock<WorkerCommand> = OnceLock::new();

/// Runs every program of this process in worker processes started with
/// `command` from now on. Call once, at start, before any run; `false`
/// when a command was set already (the first stays).
pub fn use_worker_processes(command: WorkerCommand) -> bool {
    COMMAND.set(command).is_ok()
}

/// The worker command, when runs go to worker processes.
pub(crate) fn command() -> Option<&'static WorkerCommand> {
    COMMAND.get()
}

/// The idle workers.
static IDLE: Mutex<Vec<Worker>> = Mutex::new(Vec::new());

struct Worker {
    /// What started it: a run takes only a worker of its own command.
    command: WorkerCommand,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// One run of `program` on `body` in a worker (the caller holds a turn).
pub(crate) async fn run(
    program: &Program,
    body: &[u8],
    command: &WorkerCommand,
) -> Result<Vec<u8>, RunError> {
    let request = wire::request(program.text(), program.limits(), body);
    let wait = Duration::from_millis(program.limits.timeout_ms.saturating_add(GRACE_MS));
    let mut idle = take_idle(command);
    let mut started = 0;
    loop {
        let (mut worker, fresh) = match idle.take() {
            Some(w) => (w, false),
            None => {
                started += 1;
                (start(command)?, true)
            }
        };
        match tokio::time::timeout(wait, exchange(&mut worker, &request, program)).await {
            Ok(Ok(answer)) => {
                give_back(worker);
                return answer;
            }
            Err(_) => {
                // A worker stopped from outside (SIGSTOP) ran nothing: the
                // time is not the program's.
                let stopped = worker.child.id().is_some_and(is_stopped);
                end(worker, true).await;
                if stopped {
                    return Err(RunError::Unavailable(
                        "its transform worker process was stopped (SIGSTOP) under the run; it was killed and the run is retried".to_owned(),
                    ));
                }
                return Err(RunError::Timeout(program.limits.timeout_ms));
            }
            Ok(Err(why)) => {
                let status = end(worker, false).await;
                // A new worker that aborted under the run: the program did
                // it (a stack overflow, a failed allocation).
                if fresh && status.is_some_and(aborted) {
                    return Err(RunError::Failed(ended_words(status, &why)));
                }
                // Anything else (an idle worker gone, a kill from outside)
                // is not the program's: once more on a new worker, then a
                // retry of the row.
                if started >= 2 {
                    return Err(RunError::Unavailable(format!(
                        "{}; not the program's doing (a kill from outside?), so the run is retried",
                        ended_words(status, &why)
                    )));
                }
            }
        }
    }
}

/// An idle worker of `command` that is still running. One that ended while
/// idle (killed from outside) is reaped here and left out, so it neither
/// lingers as a zombie nor costs a run its first try.
fn take_idle(command: &WorkerCommand) -> Option<Worker> {
    let mut idle = IDLE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    while let Some(at) = idle.iter().rposition(|w| w.command == *command) {
        let mut worker = idle.swap_remove(at);
        if matches!(worker.child.try_wait(), Ok(None)) {
            return Some(worker);
        }
    }
    None
}

fn give_back(worker: Worker) {
    IDLE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(worker);
}

fn start(command: &WorkerCommand) -> Result<Worker, RunError> {
    let mut cmd = Command::new(&command.program);
    cmd.args(&command.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // What an aborting worker prints is not the relay's log (the
        // relay says why in the run's error); its environment holds the
        // relay's secrets, which a worker never needs. The loader's search
        // path stays: the executable may need it to start at all.
        .stderr(Stdio::null())
        .env_clear()
        .kill_on_drop(true);
    if let Some(path) = std::env::var_os("LD_LIBRARY_PATH") {
        cmd.env("LD_LIBRARY_PATH", path);
    }
    // Its own process group: a Ctrl-C at the relay's terminal is the
    // relay's to act on (it drains, and its runs still need workers).
    #[cfg(unix)]
    cmd.process_group(0);
    #[cfg(unix)]
    if let Some(name) = &command.arg0 {
        cmd.arg0(name);
    }
    let mut child = cmd.spawn().map_err(|e| {
        RunError::Unavailable(format!(
            "cannot start a transform worker ({}): {e}",
            command.program.display()
        ))
    })?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(RunError::Unavailable(
            "a transform worker started without its pipes".to_owned(),
        ));
    };
    Ok(Worker {
        command: command.clone(),
        child,
        stdin,
        stdout: BufReader::new(stdout),
    })
}

/// The worker's answer to `request`; `Err` with why when its pipes ended or
/// failed or it answered nonsense.
async fn exchange(
    worker: &mut Worker,
    request: &[u8],
    program: &Program,
) -> Result<Result<Vec<u8>, RunError>, String> {
    let broken = |e: std::io::Error| e.to_string();
    worker.stdin.write_all(request).await.map_err(broken)?;
    worker.stdin.flush().await.map_err(broken)?;
    let mut head = [0u8; 17];
    worker.stdout.read_exact(&mut head).await.map_err(broken)?;
    let len = wire::answer_len(&head, program.limits).map_err(broken)?;
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    worker.stdout.read_exact(&mut bytes).await.map_err(broken)?;
    wire::answer(&head, bytes).map_err(broken)
}

/// Ends `worker`: killed at once when `kill`, else its exit status if it
/// ends by itself within a second (an abort under way), else killed.
async fn end(mut worker: Worker, kill: bool) -> Option<ExitStatus> {
    drop(worker.stdin);
    if !kill
        && let Ok(Ok(status)) =
            tokio::time::timeout(Duration::from_secs(1), worker.child.wait()).await
    {
        return Some(status);
    }
    let _ = worker.child.start_kill();
    worker.child.wait().await.ok()
}

/// The words of a run whose worker ended under it.
fn ended_words(status: Option<ExitStatus>, why: &str) -> String {
    match status {
        Some(s) if aborted(s) => format!(
            "its transform worker process ended ({}): an operation overflowed the \
             stack or failed to allocate, such as printing, sorting or comparing a value \
             nested hundreds of thousands of levels deep, or making a string too large",
            describe(s)
        ),
        Some(s) => format!(
            "its transform worker process ended without an answer ({}): {why}",
            describe(s)
        ),
        None => format!("its transform worker process gave no answer: {why}"),
    }
}

/// Whether `status` is a process's own abort: SIGABRT (a stack overflow, a
/// failed allocation), SIGSEGV, SIGBUS, SIGILL or SIGFPE. A SIGKILL or
/// SIGTERM comes from outside (an operator, the OOM killer).
#[cfg(unix)]
fn aborted(status: ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt as _;
    matches!(status.signal(), Some(4 | 6 | 7 | 8 | 11))
}

#[cfg(not(unix))]
fn aborted(_: ExitStatus) -> bool {
    false
}

/// Whether process `pid` is stopped (SIGSTOP, or a tracer's stop), read
/// from `/proc/PID/stat`'s state; `false` where that cannot be read.
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(") ")?;
            rest.chars().next()
        })
        .is_some_and(|state| matches!(state, 'T' | 't'))
}

#[cfg(unix)]
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.signal(), status.code()) {
        (Some(1), _) => "SIGHUP".to_owned(),
        (Some(2), _) => "SIGINT".to_owned(),
        (Some(4), _) => "SIGILL".to_owned(),
        (Some(6), _) => "SIGABRT".to_owned(),
        (Some(7), _) => "SIGBUS".to_owned(),
        (Some(8), _) => "SIGFPE".to_owned(),
        (Some(9), _) => "SIGKILL".to_owned(),
        (Some(11), _) => "SIGSEGV".to_owned(),
        (Some(13), _) => "SIGPIPE".to_owned(),
        (Some(15), _) => "SIGTERM".to_owned(),
        (Some(n), _) => format!("signal {n}"),
        (None, Some(c)) => format!("exit status {c}"),
        (None, None) => status.to_string(),
    }
}

#[cfg(not(unix))]
fn describe(status: ExitStatus) -> String {
    status.to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::Limits;

    fn sh(script: &str) -> WorkerCommand {
        WorkerCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            arg0: None,
        }
    }

    fn program(timeout_ms: u64) -> Program {
        Program::compile(
            ".",
            Limits {
                timeout_ms,
                max_output_bytes: 1024,
            },
        )
        .unwrap()
    }

    /// A worker that reads one request of `len` bytes, answers the body
    /// `1`, and ends: an idle worker that is gone by the next run.
    fn answers_once(len: usize) -> WorkerCommand {
        sh(&format!(
            "head -c {len} >/dev/null; \\
             printf '\\000\\000\\000\\000\\000\\000\\000\\000\\000\\001\\000\\000\\000\\000\\000\\000\\000'; printf 1"
        ))
    }

    #[tokio::test]
    async fn a_worker_that_never_answers_is_a_timeout_and_is_killed() {
        // The shell keeps its stdout (the pipe) open while `cat` reads.
        let p = program(1);
        let started = std::time::Instant::now();
        let answer = run(&p, b"{}", &sh("cat >/dev/null; :")).await;
        assert_eq!(answer, Err(RunError::Timeout(1)));
        // Not kept: a run of the same command starts another (and times
        // out again rather than finding a worker still reading).
        assert!(started.elapsed() >= Duration::from_millis(GRACE_MS));
        assert_eq!(
            run(&p, b"{}", &sh("cat >/dev/null; :")).await,
            Err(RunError::Timeout(1))
        );
    }

    #[tokio::test]
    async fn a_worker_that_aborts_under_a_run_fails_it_by_its_signal() {
        let answer = run(&program(100), b"{}", &sh("kill -ABRT $$")).await;
        match answer {
            Err(RunError::Failed(words)) => {
                assert!(words.contains("SIGABRT"), "{words}");
                assert!(words.contains("transform worker process"), "{words}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_worker_killed_from_outside_under_a_run_is_not_the_programs_doing() {
        match run(&program(100), b"{}", &sh("kill -KILL $$")).await {
            Err(e @ RunError::Unavailable(_)) => {
                assert!(!e.is_permanent());
                let words = e.to_string();
                assert!(words.contains("SIGKILL"), "{words}");
                assert!(words.contains("not the program's doing"), "{words}");
            }
            other => panic!("{other:?}"),
        }
        match run(&program(100), b"{}", &sh("exit 3")).await {
            Err(RunError::Unavailable(words)) => {
                assert!(words.contains("exit status 3"), "{words}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_worker_stopped_from_outside_is_killed_and_the_run_retried() {
        match run(&program(1), b"{}", &sh("kill -STOP $$")).await {
            Err(e @ RunError::Unavailable(_)) => {
                assert!(e.to_string().contains("SIGSTOP"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_worker_gone_while_idle_is_not_blamed_the_run_goes_to_a_new_one() {
        let p = program(100);
        let len = wire::request(p.text(), p.limits(), b"{}").len();
        let command = answers_once(len);
        assert_eq!(run(&p, b"{}", &command).await, Ok(b"1".to_vec()));
        // The first worker went back idle and has ended since: the next run
        // finds it gone and is served by a new one.
        assert_eq!(run(&p, b"{}", &command).await, Ok(b"1".to_vec()));
        assert_eq!(run(&p, b"{}", &command).await, Ok(b"1".to_vec()));
    }

    #[tokio::test]
    async fn a_worker_that_cannot_start_is_unavailable() {
        let command = WorkerCommand {
            program: "/nonexistent/ankusa".into(),
            args: vec![],
            arg0: Some("ankusa".into()),
        };
        match run(&program(100), b"{}", &command).await {
            Err(e @ RunError::Unavailable(_)) => {
                assert!(!e.is_permanent());
                assert!(e.to_string().contains("/nonexistent/ankusa"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
}
