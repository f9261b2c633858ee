//! A sink entry's transform (docs/design.md section 6, "Transforms"): a jq
//! program, compiled once when the configuration loads and run on each
//! delivery's stored body, whose single output is the body delivered.
//!
//! # What it owns
//! - [`Program::compile`]: the program checked and compiled with jaq (the
//!   jq language, its standard library and JSON values; src/funs.rs says
//!   what a transform may not call). A program that does not compile is a
//!   [`CompileError`] with jaq's words and the place in the program.
//! - [`Program::run`] (feature `run`): one run, bounded, and its
//!   [`RunError`]s. The run reads the body as JSON, takes the program's one
//!   output and writes it as compact JSON. Where it runs:
//!   - in a **worker process** ([`worker`], src/process.rs) when the
//!     executable said how to start one ([`use_worker_processes`]; the
//!     `ankusa` binary always does): a few built-in operations cannot be
//!     bounded from inside a run (below), and what they do to the process
//!     they run in then happens to a worker, never to the relay;
//!   - else on a thread of a pool in the caller's process (a library user,
//!     the crates' own tests).
//! - The failure counters of `/metrics` ([`metrics`]).
//!
//! # The bounds of a run
//! A program is written by an operator, but it runs on every hook, on what a
//! provider sent, inside the relay: a mistake in it (`def f: f; f`, `[recurse]`,
//! `[range(1e18)]`) must cost that hook its delivery (a dead letter naming
//! why), never the relay. So:
//! - **time**: [`Limits::timeout_ms`] (default 100 ms) from the program's
//!   start, read every [`budget::CLOCK_EVERY`] steps of the run
//!   (src/budget.rs); the caller stops waiting [`GRACE_MS`] later whatever
//!   happens (one built-in operation, such as sorting a large array or
//!   printing a huge integer, runs to its end before the next step);
//! - **stack**: the run has a thread of its own with a [`STACK_BYTES`]
//!   stack, and a run whose stack grows more than [`STACK_BUDGET_BYTES`]
//!   (a recursion that does not end) is stopped at the next step, far from
//!   an overflow, which would abort the process;
//! - **output**: [`Limits::max_output_bytes`] (default 1 MiB), counted while
//!   the output is written; a program with more than one output is stopped
//!   at its second, one with none fails;
//! - **input**: the body is read with serde_json, whose nesting bound (at most 127 levels)
//!   keeps a deep body off the stack; a body that is not JSON fails;
//! - **memory**: what a run holds is what it built step by step within its
//!   time bound, freed when it ends (the values of a stopped run are
//!   dropped as its thread unwinds). One operation can allocate in one go,
//!   without a step between: `"x" * N` makes a string of N bytes;
//! - **what no step sees**: a few built-in operations recurse over a value
//!   without a step between (printing it with `tojson` or in a message,
//!   comparing or sorting it, dropping it), so a value the program nested
//!   hundreds of thousands of levels deep can overflow any stack; and an
//!   allocation that fails (`"xx" * 1e15`) aborts the process. Both abort
//!   the process the run is in: a worker process, which the relay replaces,
//!   dead-lettering the hook ([`RunError::Failed`], naming the signal). A
//!   worker's address space is bounded ([`worker::ADDRESS_SPACE_BYTES`]),
//!   so a large allocation fails at once instead of taking the machine's
//!   memory. A run whose worker does not answer by `timeout_ms` +
//!   [`GRACE_MS`] is a timeout, and that worker is killed;
//! - **at once**: at most as many runs as the machine has cores
//!   (`available_parallelism`, at least 2) run at a time; the others wait
//!   their turn, given to the sink entries in turn (src/turns.rs: one
//!   entry's slow programs do not hold back another's), and a run's time
//!   counts from its start.
//!
//! The step bounds rely on unwinding (a stopped run unwinds its thread): the
//! workspace builds with `panic = "unwind"`, Cargo's default, and this crate
//! refuses to build otherwise.
#![deny(missing_docs, clippy::unwrap_used)]
// Without `run` nothing calls a program (the config crate compiles only).
#![cfg_attr(
    all(not(feature = "run"), not(test)),
    expect(dead_code, reason = "a run is the feature `run`'s")
)]

#[cfg(panic = "abort")]
compile_error!(
    "ankusa-transform stops a run by unwinding its thread: build with panic = \"unwind\""
);

mod budget;
mod funs;
mod json;
pub mod metrics;
#[cfg(feature = "run")]
mod process;
#[cfg(feature = "run")]
mod run;
#[cfg(feature = "run")]
mod turns;
mod wire;
pub mod worker;

#[cfg(feature = "run")]
pub use process::{WorkerCommand, use_worker_processes};

use std::fmt;
use std::time::{Duration, Instant};

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars};
use jaq_json::Val;

use budget::{Budget, Guard, Guarded, Stop};

/// `timeout_ms` when the entry does not say: 100 ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 100;
/// `max_output_bytes` when the entry does not say: 1 MiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1 << 20;
/// The most `timeout_ms` may be: 1 s. A transform is a reshaping of one
/// body; a program that needs longer is not one, and every second of it
/// is a core held per hook.
pub const MAX_TIMEOUT_MS: u64 = 1_000;
/// The most `max_output_bytes` may be: 64 MiB.
pub const MAX_OUTPUT_BYTES: u64 = 64 << 20;
/// How long past its `timeout_ms` the caller waits for a run's answer before
/// it reports the timeout itself (a built-in operation that outlasts the
/// deadline; see the crate docs).
pub const GRACE_MS: u64 = 2_000;
/// The stack of a run's thread: 512 MiB of address space, of which a run
/// touches what it uses.
pub const STACK_BYTES: usize = 512 << 20;
/// How deep a run's stack may grow: 64 MiB. The rest of [`STACK_BYTES`] is
/// the margin for what runs between two steps (dropping a deeply nested
/// value a stopped run built, printing a message).
pub const STACK_BUDGET_BYTES: usize = 64 << 20;

/// The bounds of a program's runs (docs/design.md section 6, "Transforms").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// How long a run may take, from the program's start, ms: 1 to
    /// [`MAX_TIMEOUT_MS`].
    pub timeout_ms: u64,
    /// How many bytes the output may have: 1 to [`MAX_OUTPUT_BYTES`].
    pub max_output_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

/// A compiled program and its bounds. Compiled once (at load), shared by
/// every run (`Arc<Program>`); holds no state between runs.
pub struct Program {
    text: String,
    limits: Limits,
    filter: jaq_core::Filter<Guarded>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("text", &self.text)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Two programs are the same when their text and bounds are.
impl PartialEq for Program {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.limits == other.limits
    }
}

/// A program that does not compile: jaq's words, each with its place in the
/// program (`line L, column C`), `; `-separated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(pub String);

/// Why a run gave no body (docs/design.md section 6, "Transforms"). Every
/// one is the hook's or the program's, so the delivery is dead-lettered
/// (`transform: <this>`), but [`RunError::Unavailable`], which is the
/// machine's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The stored body is not JSON (serde_json's words).
    #[error("the body is not JSON: {0}")]
    BodyNotJson(String),
    /// The program raised an error (jaq's words, or the program's own
    /// `error(...)`).
    #[error("{0}")]
    Program(String),
    /// The program gave no output (`empty`, `select` that failed).
    #[error("the program gave no output")]
    NoOutput,
    /// The program gave a second output.
    #[error("the program gave more than one output")]
    ManyOutputs,
    /// The run passed its `timeout_ms`.
    #[error("the program ran longer than its bound of {0} ms")]
    Timeout(u64),
    /// The run's stack grew past [`STACK_BUDGET_BYTES`].
    #[error("the program recursed deeper than its bound ({} MiB of stack)", STACK_BUDGET_BYTES >> 20)]
    TooDeep,
    /// The output has more than `max_output_bytes` bytes.
    #[error("the output is larger than its bound of {0} bytes")]
    OutputTooLarge(u64),
    /// The output is not JSON (NaN, a byte string, a key that is not a
    /// string, nesting deeper than 512).
    #[error("the output is not JSON: {0}")]
    OutputNotJson(String),
    /// `halt` or `halt_error`.
    #[error("the program halted (halt or halt_error, exit code {0})")]
    Halted(i32),
    /// jaq itself failed (a panic inside it, caught on the run's thread), or
    /// the run aborted its worker process (a stack overflow or an
    /// allocation that failed, named by its signal).
    #[error("the program's run failed: {0}")]
    Failed(String),
    /// The run could not start or finish for a cause outside the program
    /// (no free run slot, no thread, no worker process started, a worker
    /// killed or stopped from outside): the machine's condition, not the
    /// hook's, so a delivery retries.
    #[error("the transform could not run: {0}")]
    Unavailable(String),
}

impl RunError {
    /// Whether the hook cannot be delivered through this program as it is:
    /// every error but [`RunError::Unavailable`].
    pub fn is_permanent(&self) -> bool {
        !matches!(self, RunError::Unavailable(_))
    }
}

/// The longest message of a [`RunError::Program`] (a jaq message can print
/// a whole value): longer ones end in `...`.
const MAX_MESSAGE_BYTES: usize = 1024;

impl Program {
    /// Compiles `text` with `limits`. Does not run it.
    ///
    /// # Errors
    /// [`CompileError`] when jaq cannot lex, parse or compile it (an unknown
    /// filter or variable, an import: a transform reads no files).
    pub fn compile(text: &str, limits: Limits) -> Result<Program, CompileError> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let arena = Arena::default();
        let modules = Loader::new(defs)
            .load(
                &arena,
                File {
                    code: text,
                    path: (),
                },
            )
            .map_err(|errs| {
                let messages = errs.into_iter().flat_map(|(_, e)| load_error(text, e));
                CompileError(messages.collect::<Vec<_>>().join("; "))
            })?;
        let filter = Compiler::default()
            .with_funs(funs::all())
            .compile(modules)
            .map_err(|errs| {
                let messages = errs.into_iter().flat_map(|(_, e)| e).map(|(name, u)| {
                    let what = match u {
                        jaq_core::compile::Undefined::Filter(arity) => {
                            format!("undefined filter {name}/{arity}")
                        }
                        other => format!("undefined {} {name}", other.as_str()),
                    };
                    format!("{what} ({})", place(text, name))
                });
                CompileError(messages.collect::<Vec<_>>().join("; "))
            })?;
        Ok(Program {
            text: text.to_owned(),
            limits,
            filter,
        })
    }

    /// The program as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Its bounds.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// One run on the calling thread: `body` read as JSON, the program run
    /// within its bounds, its one output written. The thread must be one the
    /// run may unwind and whose stack has room beyond
    /// [`STACK_BUDGET_BYTES`] (`run` makes one; tests may call this from a
    /// thread they made so).
    fn eval(&self, body: &[u8]) -> Result<Vec<u8>, RunError> {
        self.eval_within(body, STACK_BUDGET_BYTES)
    }

    /// [`Program::eval`] with a stack budget of `stack_bytes` (tests use a
    /// small one, so that a recursion meets it before the clock).
    fn eval_within(&self, body: &[u8], stack_bytes: usize) -> Result<Vec<u8>, RunError> {
        let input: Val =
            serde_json::from_slice(body).map_err(|e| RunError::BodyNotJson(e.to_string()))?;
        let deadline = Instant::now() + Duration::from_millis(self.limits.timeout_ms);
        let max = usize::try_from(self.limits.max_output_bytes).unwrap_or(usize::MAX);
        let budget = Budget::new(deadline, stack_bytes);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let ctx = Ctx::<Guarded>::new(Guard::new(&self.filter.lut, &budget), Vars::new([]));
            let mut outputs = self.filter.id.run((ctx, input));
            let first = match outputs.next() {
                None => return Err(RunError::NoOutput),
                Some(Err(e)) => return Err(exception(e)),
                Some(Ok(v)) => v,
            };
            if outputs.next().is_some() {
                return Err(RunError::ManyOutputs);
            }
            drop(outputs);
            json::write(&first, max).map_err(|e| match e {
                json::WriteError::TooLarge => {
                    RunError::OutputTooLarge(self.limits.max_output_bytes)
                }
                json::WriteError::NotJson(why) => RunError::OutputNotJson(why),
            })
        }));
        match caught {
            Ok(answer) => answer,
            Err(payload) => Err(match payload.downcast_ref::<Stop>() {
                Some(Stop::Time) => RunError::Timeout(self.limits.timeout_ms),
                Some(Stop::Stack) => RunError::TooDeep,
                None => RunError::Failed(panic_text(payload.as_ref())),
            }),
        }
    }
}

/// A jaq exception of the main filter: an error, or `halt`.
fn exception(e: jaq_core::Exn<'_, Val>) -> RunError {
    match e.get_err() {
        Ok(err) => {
            let text = match err.into_val() {
                Val::TStr(s) => String::from_utf8_lossy(&s).into_owned(),
                other => other.to_string(),
            };
            RunError::Program(shorten(text))
        }
        Err(exn) => match exn.get_halt() {
            Ok(code) => RunError::Halted(code),
            Err(_) => RunError::Failed("an exception escaped the program".to_owned()),
        },
    }
}

fn shorten(mut s: String) -> String {
    if s.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES - 3;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// jaq's lex, parse and module errors of a program, each with its place.
fn load_error(text: &str, e: jaq_core::load::Error<&str>) -> Vec<String> {
    use jaq_core::load::{Error, lex};
    match e {
        Error::Io(items) => items
            .into_iter()
            .map(|(path, why)| format!("cannot import {path}: {why} (a transform reads no files)"))
            .collect(),
        Error::Lex(items) => items
            .into_iter()
            .map(|(expect, found)| {
                let what = match expect {
                    lex::Expect::Digit => "a digit".to_owned(),
                    lex::Expect::Ident => "an identifier".to_owned(),
                    lex::Expect::Delim(open) => format!("the closing delimiter of {open}"),
                    lex::Expect::Escape => "a string escape sequence".to_owned(),
                    lex::Expect::Unicode => "4 hexadecimal digits of a code point".to_owned(),
                    _ => "a token".to_owned(),
                };
                format!("expected {what} ({})", place(text, found))
            })
            .collect(),
        Error::Parse(items) => items
            .into_iter()
            .map(|(expect, found)| {
                let found_text = if found.is_empty() {
                    "the end of the program".to_owned()
                } else {
                    format!("\"{}\"", found.chars().take(40).collect::<String>())
                };
                format!(
                    "expected {}, found {found_text} ({})",
                    expect.as_str(),
                    place(text, found)
                )
            })
            .collect(),
    }
}

/// `line L, column C` of `part`, a slice of `text` (jaq's errors point into
/// the program); `the end of the program` when it is not one.
fn place(text: &str, part: &str) -> String {
    let start = text.as_ptr() as usize;
    let at = (part.as_ptr() as usize).wrapping_sub(start);
    if at > text.len() || (at == text.len() && !part.is_empty()) {
        return "at the end of the program".to_owned();
    }
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {column}")
}

#[cfg(test)]
mod tests;
