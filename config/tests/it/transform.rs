//! A sink entry's `transform: {jq}`: compiled at load, and every load-time
//! rejection with the exact source, sink and option (docs/design.md section
//! 6, "Transforms").

use ankusa_config::SinkEntry;
use ankusa_transform::Limits;

use crate::helpers::{ok, one, with_sink};

fn entry(sink: &str) -> SinkEntry {
    ok(&with_sink(sink)).sources[0].sinks[0].clone()
}

const AT: &str = "source \"stripe\", sink \"ledger\"";

#[test]
fn no_transform_delivers_the_body_as_received() {
    assert_eq!(
        entry("{type: file, name: ledger, path: /tmp/x.ndjson}").transform,
        None
    );
}

#[test]
fn a_program_is_compiled_with_its_bounds_on_any_sink_type() {
    let e = entry(
        "{type: http, name: ledger, url: 'http://h/x', transform: {jq: '{id: .data.object.id}'}}",
    );
    let p = e.transform.expect("a transform");
    assert_eq!(p.text(), "{id: .data.object.id}");
    assert_eq!(p.limits(), Limits::default());
    assert_eq!(
        p.limits(),
        Limits {
            timeout_ms: 100,
            max_output_bytes: 1 << 20
        }
    );
    // A core key: the sink's own options never see it.
    assert!(!e.options.contains_key("transform"));

    let e = entry(
        "{type: redis, name: ledger, url: 'redis://127.0.0.1', stream: s, transform: {jq: '.data', timeout_ms: 250, max_output_bytes: 4096}}",
    );
    assert_eq!(
        e.transform.expect("a transform").limits(),
        Limits {
            timeout_ms: 250,
            max_output_bytes: 4096
        }
    );
}

#[test]
fn a_program_that_does_not_compile_is_refused_with_jaq_words() {
    assert_eq!(
        one(&with_sink(
            "{type: file, name: ledger, path: /tmp/x.ndjson, transform: {jq: '.data | nosuch(1)'}}"
        )),
        format!(
            "{AT} (file): option \"transform.jq\": does not compile: undefined filter nosuch/1 (line 1, column 9)"
        )
    );
    let parse = one(&with_sink(
        "{type: http, name: ledger, url: 'http://h/x', transform: {jq: '{id: .id'}}",
    ));
    assert!(
        parse.starts_with(&format!(
            "{AT} (http): option \"transform.jq\": does not compile: expected"
        )),
        "{parse}"
    );
    // The relay's environment is not a program's to read.
    let env = one(&with_sink(
        "{type: http, name: ledger, url: 'http://h/x', transform: {jq: '$ENV.ADMIN_TOKEN'}}",
    ));
    assert!(env.contains("undefined variable $ENV"), "{env}");
}

#[test]
fn every_option_is_checked() {
    let sink = |t: &str| {
        with_sink(&format!(
            "{{type: file, name: ledger, path: /tmp/x.ndjson, transform: {t}}}"
        ))
    };
    assert_eq!(
        one(&sink("'.data'")),
        format!(
            "{AT} (file): option \"transform\": must be {{jq: PROGRAM}} (optionally timeout_ms, max_output_bytes), found \".data\""
        )
    );
    assert_eq!(
        one(&sink("{timeout_ms: 50}")),
        format!(
            "{AT} (file): option \"transform.jq\": required: the jq program whose one output is the body this sink gets"
        )
    );
    assert_eq!(
        one(&sink("{jq: '.', timeout_ms: 5000}")),
        format!(
            "{AT} (file): option \"transform.timeout_ms\": must be a whole number of milliseconds from 1 to 1000, found 5000"
        )
    );
    assert_eq!(
        one(&sink("{jq: '.', max_output_bytes: 0}")),
        format!(
            "{AT} (file): option \"transform.max_output_bytes\": must be a whole number of bytes from 1 to 67108864, found 0"
        )
    );
    assert_eq!(
        one(&sink("{jq: '.', program: x}")),
        format!(
            "{AT} (file): option \"transform.program\": unknown option of transform (its options: jq, timeout_ms, max_output_bytes)"
        )
    );
    assert_eq!(
        one(&sink("{jq: '  '}")),
        format!(
            "{AT} (file): option \"transform.jq\": is empty: write a jq program, or omit transform to deliver the body as received"
        )
    );
}
