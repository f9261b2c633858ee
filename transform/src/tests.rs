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
    // `env` would read the relay's environment: refused at load, not at the
    // first hook.
    let e = Program::compile("{id: .id, home: env.HOME}", Limits::default()).unwrap_err();
    assert!(e.0.contains("undefined filter env/0"), "{e}");
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

/// With a stack budget of 1 MiB (the relay's is [`STACK_BUDGET_BYTES`]) a
/// recursion without end meets it long before the longest time bound.
#[test]
fn a_recursion_that_never_ends_stops_at_the_stack_bound() {
    let limits = Limits {
        timeout_ms: MAX_TIMEOUT_MS,
        ..Limits::default()
    };
    for program in ["def f: 1 + f; f", "def f: [f]; f", "def f: {a: f}; f"] {
        let p = Program::compile(program, limits).unwrap();
        let got = std::thread::Builder::new()
            .stack_size(STACK_BYTES)
            .spawn(move || p.eval_within(b"null", 1 << 20))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(got, Err(RunError::TooDeep), "{program}");
    }
}

/// With the relay's own bounds, a recursion without end (or one that also
/// grows without end) stops at one of them, whichever it meets first: the
/// process is unharmed either way.
#[test]
fn a_recursion_that_never_ends_stops_at_a_bound() {
    for program in [
        "def f: 1 + f; f",
        "def f: [f]; f",
        "[recurse(.)]",
        "[recurse([.])] | length",
    ] {
        let got = run(program, "[1]");
        assert!(
            matches!(got, Err(RunError::TooDeep | RunError::Timeout(100))),
            "{program}: {got:?}"
        );
    }
}

#[test]
fn a_large_output_stops_at_its_bound() {
    // The longest time bound: these end well within it, loaded or not.
    let limits = Limits {
        timeout_ms: MAX_TIMEOUT_MS,
        max_output_bytes: 1000,
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

/// A run stopped at the longest time bound while it nests a value deeper at
/// every step (about a million levels in that time) drops that value as its
/// thread unwinds: within the stack, answered, the process alive.
#[test]
fn a_deep_value_built_until_the_deadline_is_dropped_within_the_stack() {
    let limits = Limits {
        timeout_ms: MAX_TIMEOUT_MS,
        ..Limits::default()
    };
    assert_eq!(
        run_with("reduce range(1e18) as $i (null; [.])", "null", limits),
        Err(RunError::Timeout(MAX_TIMEOUT_MS))
    );
}

/// A body carrying a deep JSON text in a string (an SNS envelope's
/// `Message`, say) is refused by `fromjson` before jaq's parser, which
/// recurses once per level, could overflow the run's stack; a shallow one
/// parses as jq's does.
#[test]
fn fromjson_refuses_a_text_nested_deeper_than_the_bound() {
    let deep = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
    let body = serde_json::json!({"Message": deep}).to_string();
    assert!(
        matches!(run(".Message | fromjson", &body), Err(RunError::Program(m)) if m.contains("nests 1000000 deep")),
        "{:?}",
        run(".Message | fromjson", &body)
    );
    let body = serde_json::json!({"Message": "{\"type\":\"a\",\"s\":\"[[[\"}"}).to_string();
    assert_eq!(
        run(".Message | fromjson | .type", &body),
        Ok("\"a\"".to_owned())
    );
    assert_eq!(super::funs::nesting(b"[{\"a\":[1]}, \"[[[[\\\"\"]"), 3);
}
