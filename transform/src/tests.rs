#![allow(clippy::unwrap_used)]

use super::*;

fn run(program: &str, body: &str) -> Result<String, RunError> {
    run_with(program, body, Limits::default())
}

/// `Program::eval` on a thread made as `run` makes it (the tests that need
/// tokio are in tests/it).
fn run_with(program: &str, body: &str, limits: Limits) -> Result<String, RunError> {
    let p = Program::compile(program, limits).unwrap();
    let body = body.as_bytes().to_vec();
    std::thread::Builder::new()
        .stack_size(STACK_BYTES)
        .spawn(move || p.eval(&body))
        .unwrap()
        .join()
        .unwrap()
        .map(|b| String::from_utf8(b).unwrap())
}

#[test]
fn one_output_is_the_body_as_compact_json() {
    assert_eq!(
        run(
            r#"{id: .data.object.id, n: (.n + 1), s: "a\"b\n", f: 1.5}"#,
            r#"{"data":{"object":{"id":"in_1"}},"n":41}"#
        )
        .unwrap(),
        r#"{"id":"in_1","n":42,"s":"a\"b\n","f":1.5}"#
    );
}

#[test]
fn outputs_other_than_one_fail() {
    assert_eq!(run("empty", "{}"), Err(RunError::NoOutput));
    assert_eq!(run(".[]", "[1,2]"), Err(RunError::ManyOutputs));
    assert_eq!(run("range(1e18)", "null"), Err(RunError::ManyOutputs));
}

#[test]
fn errors_carry_jaq_words() {
    assert_eq!(
        run("error(\"no customer\")", "{}"),
        Err(RunError::Program("no customer".into()))
    );
    assert_eq!(
        run(".a.b", r#"{"a":"x"}"#),
        Err(RunError::Program("cannot index \"x\" with \"b\"".into()))
    );
    assert!(matches!(
        run(".", "not json"),
        Err(RunError::BodyNotJson(_))
    ));
    assert_eq!(run("halt_error", "{}"), Err(RunError::Halted(5)));
    assert!(
        matches!(run("env", "{}"), Err(RunError::Program(m)) if m.contains("env is not available"))
    );
    assert!(matches!(run("nan", "{}"), Err(RunError::OutputNotJson(_))));
    assert!(matches!(
        run("tobytes", "\"ab\""),
        Err(RunError::OutputNotJson(_))
    ));
}

#[test]
fn compile_errors_name_the_place() {
    let e = Program::compile("{id: .id", Limits::default()).unwrap_err();
    assert!(e.0.contains("line 1"), "{e}");
    let e = Program::compile(".a |\n nosuchfilter(1)", Limits::default()).unwrap_err();
    assert_eq!(e.0, "undefined filter nosuchfilter/1 (line 2, column 2)");
    let e = Program::compile("$ENV.HOME", Limits::default()).unwrap_err();
    assert!(e.0.contains("undefined variable"), "{e}");
    let e = Program::compile("import \"x\" as x; .", Limits::default()).unwrap_err();
    assert!(e.0.contains("cannot import"), "{e}");
}

#[test]
fn a_loop_that_never_ends_stops_at_the_deadline() {
    for program in [
        "def f: f; f",
        "[range(1e18)]",
        "last(range(1e18))",
        "[limit(1e18; repeat(1))] | length",
        "reduce range(1e18) as $i (0; . + $i)",
    ] {
        assert_eq!(
            run(program, "null"),
            Err(RunError::Timeout(100)),
            "{program}"
        );
    }
}

#[test]
fn a_recursion_that_never_ends_stops_at_the_stack_bound() {
    for program in [
        "def f: 1 + f; f",
        "def f: [f]; f",
        "[recurse(.)]",
        "[recurse([.])] | length",
    ] {
        let got = run(program, "[1]");
        assert!(
            matches!(got, Err(RunError::TooDeep | RunError::Timeout(_))),
            "{program}: {got:?}"
        );
    }
    assert_eq!(run("def f: 1 + f; f", "null"), Err(RunError::TooDeep));
}

#[test]
fn a_large_output_stops_at_its_bound() {
    let limits = Limits {
        max_output_bytes: 1000,
        ..Limits::default()
    };
    assert_eq!(
        run_with("\"x\" * 100000", "null", limits),
        Err(RunError::OutputTooLarge(1000))
    );
    assert_eq!(
        run_with("[range(10000)]", "null", limits),
        Err(RunError::OutputTooLarge(1000))
    );
    assert_eq!(
        run_with("\"x\" * 998", "null", limits).map(|s| s.len()),
        Ok(1000)
    );
}

#[test]
#[ignore = "an experiment: how deep a nested value gets within the longest time bound"]
fn experiment_deep_values() {
    let limits = Limits {
        timeout_ms: MAX_TIMEOUT_MS,
        ..Limits::default()
    };
    for n in [100_000, 1_000_000, 10_000_000] {
        let t = Instant::now();
        let got = run_with(
            &format!("reduce range({n}) as $i (null; [.]) | 0"),
            "null",
            limits,
        );
        eprintln!("{n}: {got:?} in {:?}", t.elapsed());
    }
    let t = Instant::now();
    let got = run_with("reduce range(1e18) as $i (null; [.]) | 0", "null", limits);
    eprintln!("forever: {got:?} in {:?}", t.elapsed());
    let t = Instant::now();
    let got = run_with(
        "10 | reduce range(22) as $i (.; . * .) | tostring | length",
        "null",
        limits,
    );
    eprintln!("bigint: {got:?} in {:?}", t.elapsed());
}
