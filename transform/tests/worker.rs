//! Runs in real worker processes (docs/design.md section 6, "Transforms"):
//! this test's own executable is the worker (`worker transform-worker`
//! serves as `ankusa transform-worker` does), so it has no test harness:
//! the harness would print to the stdout the worker answers on.

use std::process::ExitCode;
use std::sync::Arc;

use ankusa_transform::{Limits, Program, RunError, WorkerCommand, use_worker_processes, worker};

/// A test: its future, boxed.
type Test = fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("transform-worker") {
        return worker::main();
    }
    let exe = std::env::current_exe().expect("the test's own path");
    assert!(use_worker_processes(WorkerCommand {
        program: exe,
        args: vec!["transform-worker".into()],
        arg0: None,
    }));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let tests: &[(&str, Test)] = &[
        ("a_worker_runs_programs_and_answers_their_errors", || {
            Box::pin(a_worker_runs_programs_and_answers_their_errors())
        }),
        (
            "an_allocation_that_aborts_the_worker_fails_the_run_not_the_caller",
            || Box::pin(an_allocation_that_aborts_the_worker_fails_the_run_not_the_caller()),
        ),
        (
            "a_value_nested_too_deep_to_print_fails_the_run_not_the_caller",
            || Box::pin(a_value_nested_too_deep_to_print_fails_the_run_not_the_caller()),
        ),
        ("the_bounds_hold_in_a_worker", || {
            Box::pin(the_bounds_hold_in_a_worker())
        }),
        ("runs_at_once_each_get_their_own_answer", || {
            Box::pin(runs_at_once_each_get_their_own_answer())
        }),
    ];
    for (name, test) in tests {
        rt.block_on(test());
        println!("test {name} ... ok");
    }
    ExitCode::SUCCESS
}

fn program(text: &str, timeout_ms: u64) -> Arc<Program> {
    Arc::new(
        Program::compile(
            text,
            Limits {
                timeout_ms,
                max_output_bytes: 1 << 20,
            },
        )
        .expect("compiles"),
    )
}

async fn a_worker_runs_programs_and_answers_their_errors() {
    let reshape = program(
        "{id: .data.object.id, amount: .data.object.amount_paid}",
        1_000,
    );
    let body = br#"{"id":"evt_1","data":{"object":{"id":"in_1","amount_paid":2000}}}"#;
    assert_eq!(
        reshape.run(body.to_vec()).await,
        Ok(br#"{"id":"in_1","amount":2000}"#.to_vec())
    );
    assert!(matches!(
        reshape.run(b"not json".to_vec()).await,
        Err(RunError::BodyNotJson(_))
    ));
    assert_eq!(
        program("error(\"no customer\")", 1_000)
            .run(b"{}".to_vec())
            .await,
        Err(RunError::Program("no customer".into()))
    );
    assert_eq!(
        program("halt_error", 1_000).run(b"{}".to_vec()).await,
        Err(RunError::Halted(5))
    );
}

async fn an_allocation_that_aborts_the_worker_fails_the_run_not_the_caller() {
    // 2e15 bytes: no machine has them, and the allocation's failure aborts
    // the process it is made in (no unwinding): here the worker.
    let huge = program(r#""xx" * 1000000000000000"#, 1_000);
    match huge.run(b"{}".to_vec()).await {
        Err(RunError::Failed(words)) => {
            assert!(words.contains("SIGABRT"), "{words}");
            assert!(words.is_ascii() && words.len() < 400, "{words}");
        }
        other => panic!("expected the worker's abort, got {other:?}"),
    }
    // The caller lives on and the next run is served by a new worker.
    assert_eq!(
        program(".a", 1_000).run(br#"{"a":[1,2]}"#.to_vec()).await,
        Ok(b"[1,2]".to_vec())
    );
}

async fn a_value_nested_too_deep_to_print_fails_the_run_not_the_caller() {
    // Built step by step (each step within the stack bound), then printed
    // by one built-in operation that recurses once per level: 300,000
    // levels overflow the worker's 512 MiB stack in a debug build (measured:
    // it aborts after about 1 s). On a machine too busy to build them by the
    // deadline the run times out first; either way the run fails and the
    // caller lives, which on a thread of the caller's own it would not.
    let deep = program("reduce range(300000) as $i (0; [.]) | tojson", 1_000);
    match deep.run(b"{}".to_vec()).await {
        Err(RunError::Failed(words)) => assert!(words.contains("SIGABRT"), "{words}"),
        Err(RunError::Timeout(1_000)) => {}
        other => panic!("expected the worker's abort or the deadline, got {other:?}"),
    }
    assert_eq!(
        program("[.[] + 1]", 1_000).run(b"[1,2]".to_vec()).await,
        Ok(b"[2,3]".to_vec())
    );
}

async fn the_bounds_hold_in_a_worker() {
    assert_eq!(
        program("def f: f; f", 50).run(b"{}".to_vec()).await,
        Err(RunError::Timeout(50))
    );
    assert_eq!(
        program("def f: [f]; f", 1_000).run(b"{}".to_vec()).await,
        Err(RunError::TooDeep)
    );
    let small = Arc::new(
        Program::compile(
            r#""x" * 100000"#,
            Limits {
                timeout_ms: 1_000,
                max_output_bytes: 1_000,
            },
        )
        .expect("compiles"),
    );
    assert_eq!(
        small.run(b"{}".to_vec()).await,
        Err(RunError::OutputTooLarge(1_000))
    );
}

async fn runs_at_once_each_get_their_own_answer() {
    let p = program("{n: (.n * 2)}", 1_000);
    let mut runs = tokio::task::JoinSet::new();
    for n in 0..40u32 {
        let p = Arc::clone(&p);
        runs.spawn(async move { (n, p.run(format!("{{\"n\":{n}}}").into_bytes()).await) });
    }
    let mut seen = 0;
    while let Some(joined) = runs.join_next().await {
        let (n, answer) = joined.expect("a run's task");
        assert_eq!(answer, Ok(format!("{{\"n\":{}}}", n * 2).into_bytes()));
        seen += 1;
    }
    assert_eq!(seen, 40);
}
