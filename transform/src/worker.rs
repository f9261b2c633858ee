//! A transform worker process (docs/design.md section 6, "Transforms"): the
//! relay's own executable started as `ankusa transform-worker`, which runs
//! the programs it is sent, one at a time, until its stdin ends.
//!
//! Why a process: a few of jaq's built-in operations recurse over a value
//! without a step between (printing, comparing, sorting, dropping it), so a
//! program that nests a value hundreds of thousands of levels deep can
//! overflow any stack it is given, and one operation can ask for more
//! memory than there is (`"x" * 1e15`). Either aborts the process it runs
//! in. In a worker that is the worker, not the relay: the relay reads the
//! end of its stdout, dead-letters the hook, and starts another
//! (src/process.rs).
//!
//! The worker keeps the compiled programs it was sent (a handful: one per
//! sink entry with a transform, a reload's new ones, a test call's), so a
//! program compiles once per worker, not per run.

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::process::ExitCode;

use crate::{Limits, Program, RunError, STACK_BYTES, wire};

/// How many compiled programs a worker keeps; past that it forgets them all
/// and compiles again as they come (a relay has one per transform).
const KEPT_PROGRAMS: usize = 64;

/// The most address space a worker may map: 4 GiB. An allocation past it
/// fails at once (and aborts the worker, not the relay) instead of filling
/// the machine's memory until the kernel's OOM killer picks a process,
/// perhaps the relay. Room for the run's 512 MiB stack, the executable and
/// a body of the edge's largest size many times over. The relay's
/// executable sets it (`setrlimit` is a system call the crate does not
/// make: it forbids `unsafe`).
pub const ADDRESS_SPACE_BYTES: u64 = 4 << 30;

/// How often a worker looks whether the relay that started it is still
/// its parent.
const PARENT_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

/// The worker's `main`: serves stdin and stdout on a thread with a
/// [`STACK_BYTES`] stack (the stack the run's bounds assume) until stdin
/// ends. Exit status 0 at the end of stdin, 2 on a malformed request or a
/// failed write (the relay is then gone or broken).
///
/// It also ends, whatever it runs, once the relay that started it is gone
/// (its parent changes, looked at every 200 ms): stdin's end is read only
/// between runs, and a run may go on long past its deadline inside one
/// built-in operation, which the relay, being gone, can no longer kill.
/// (Not `PR_SET_PDEATHSIG`: it fires when the relay's *thread* that started
/// the worker ends, and tokio ends idle threads.)
pub fn main() -> ExitCode {
    #[cfg(unix)]
    {
        let parent = std::os::unix::process::parent_id();
        if parent == 1 {
            // Started by a relay already gone (adopted by init).
            return ExitCode::SUCCESS;
        }
        let _ = std::thread::Builder::new()
            .name("ankusa-transform-parent".to_owned())
            .stack_size(64 << 10)
            .spawn(move || {
                loop {
                    std::thread::sleep(PARENT_CHECK);
                    if std::os::unix::process::parent_id() != parent {
                        std::process::exit(0);
                    }
                }
            });
    }
    let served = std::thread::Builder::new()
        .name("ankusa-transform-worker".to_owned())
        .stack_size(STACK_BYTES)
        .spawn(|| {
            serve(
                BufReader::new(io::stdin().lock()),
                BufWriter::new(io::stdout().lock()),
            )
        });
    match served.map(std::thread::JoinHandle::join) {
        Ok(Ok(Ok(()))) => ExitCode::SUCCESS,
        Ok(Ok(Err(e))) => {
            eprintln!("ankusa transform-worker: {e}");
            ExitCode::from(2)
        }
        Ok(Err(_)) => ExitCode::from(2),
        Err(e) => {
            eprintln!("ankusa transform-worker: no thread for the runs: {e}");
            ExitCode::from(2)
        }
    }
}

/// Answers each request on `input` with its run's answer on `output`, in
/// turn, until `input` ends. Must run on a thread with a [`STACK_BYTES`]
/// stack that a run may unwind ([`Program::eval`]'s terms).
///
/// # Errors
/// A malformed request, or a read or write that failed.
pub fn serve(mut input: impl Read, mut output: impl Write) -> io::Result<()> {
    let mut programs: HashMap<(String, Limits), Program> = HashMap::new();
    while let Some(request) = wire::read_request(&mut input)? {
        let key = (request.text, request.limits);
        if !programs.contains_key(&key) {
            if programs.len() >= KEPT_PROGRAMS {
                programs.clear();
            }
            match Program::compile(&key.0, key.1) {
                Ok(p) => {
                    programs.insert(key.clone(), p);
                }
                Err(e) => {
                    // The relay compiled it before sending it: the same
                    // executable cannot disagree, but say so if it does.
                    let answer = Err(RunError::Failed(format!(
                        "the transform worker could not compile the program: {e}"
                    )));
                    wire::write_answer(&mut output, &answer)?;
                    continue;
                }
            }
        }
        let answer = match programs.get(&key) {
            Some(p) => p.eval(&request.body),
            None => Err(RunError::Failed("the program was not kept".to_owned())),
        };
        wire::write_answer(&mut output, &answer)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// `serve` over bytes, on a thread made as `main` makes it: the answers.
    fn served(requests: Vec<u8>) -> Vec<Result<Vec<u8>, RunError>> {
        let out = std::thread::Builder::new()
            .stack_size(STACK_BYTES)
            .spawn(move || {
                let mut out = Vec::new();
                serve(&requests[..], &mut out).unwrap();
                out
            })
            .unwrap()
            .join()
            .unwrap();
        let mut answers = Vec::new();
        let mut rest = &out[..];
        while !rest.is_empty() {
            let head: [u8; 17] = rest[..17].try_into().unwrap();
            let len = wire::answer_len(&head, Limits::default()).unwrap() as usize;
            answers.push(wire::answer(&head, rest[17..17 + len].to_vec()).unwrap());
            rest = &rest[17 + len..];
        }
        answers
    }

    #[test]
    fn a_worker_answers_each_request_in_turn() {
        let mut requests = wire::request("{id: .a}", Limits::default(), br#"{"a":"x"}"#);
        requests.extend(wire::request("{id: .a}", Limits::default(), b"not json"));
        requests.extend(wire::request("error(\"no\")", Limits::default(), b"{}"));
        requests.extend(wire::request(
            "{id: .a}",
            Limits {
                timeout_ms: 100,
                max_output_bytes: 4,
            },
            br#"{"a":"x"}"#,
        ));
        requests.extend(wire::request("{id: .a}", Limits::default(), br#"{"a":2}"#));
        let answers = served(requests);
        assert_eq!(answers.len(), 5);
        assert_eq!(answers[0], Ok(br#"{"id":"x"}"#.to_vec()));
        assert!(matches!(answers[1], Err(RunError::BodyNotJson(_))));
        assert_eq!(answers[2], Err(RunError::Program("no".into())));
        assert_eq!(answers[3], Err(RunError::OutputTooLarge(4)));
        assert_eq!(answers[4], Ok(br#"{"id":2}"#.to_vec()));
    }

    #[test]
    fn a_program_that_does_not_compile_is_answered_not_fatal() {
        let mut requests = wire::request("{", Limits::default(), b"{}");
        requests.extend(wire::request(".", Limits::default(), b"[1]"));
        let answers = served(requests);
        assert!(
            matches!(&answers[0], Err(RunError::Failed(w)) if w.contains("could not compile")),
            "{answers:?}"
        );
        assert_eq!(answers[1], Ok(b"[1]".to_vec()));
    }

    #[test]
    fn a_worker_forgets_its_programs_past_its_bound() {
        let mut requests = Vec::new();
        for i in 0..KEPT_PROGRAMS + 3 {
            requests.extend(wire::request(&format!(". + {i}"), Limits::default(), b"1"));
        }
        let answers = served(requests);
        assert_eq!(answers.len(), KEPT_PROGRAMS + 3);
        for (i, a) in answers.into_iter().enumerate() {
            assert_eq!(a, Ok((i + 1).to_string().into_bytes()));
        }
    }
}
