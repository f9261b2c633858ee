//! Errors of the YAML itself: syntax, types, unknown options (with their
//! name, path, line and column), and reading the file.

use ankusa_config::{Config, ConfigError};

use crate::helpers::load;

fn yaml_error(text: &str) -> (String, Option<usize>, Option<usize>) {
    match load(text) {
        Err(ConfigError::Yaml {
            message,
            line,
            column,
        }) => (message, line, column),
        Err(other) => panic!("expected a YAML error, got: {other}"),
        Ok(_) => panic!("expected a YAML error, got a config"),
    }
}

#[test]
fn an_unknown_option_is_named_with_its_position() {
    let (message, line, column) = yaml_error("node:\n  name: a\n  data_dri: /x\n");
    assert_eq!(
        message,
        "node: unknown field `data_dri`, expected one of `name`, `data_dir`, `store`, `max_pending`, `max_pending_bytes`, `log_format`, `otel`, `attempt_log` at line 3 column 3"
    );
    assert_eq!((line, column), (Some(3), Some(3)));

    let (message, line, _) =
        yaml_error("sources:\n  - name: a\n    tenat: acme\n    sinks: [{type: file, path: x}]\n");
    assert!(
        message.starts_with(
            "sources[0]: unknown field `tenat`, expected one of `name`, `path`, `tenant`"
        ),
        "{message}"
    );
    assert_eq!(line, Some(3));

    let (message, _, _) =
        yaml_error("sources:\n  - name: a\n    verification: {type: stripe, secret: [x]}\n");
    assert!(
        message.starts_with("sources[0].verification: unknown field `secret`"),
        "{message}"
    );

    let (message, _, _) = yaml_error("listners: {}\n");
    assert!(
        message.starts_with("unknown field `listners`, expected one of `node`, `listeners`"),
        "{message}"
    );

    let e = load("retry: {base: 5}\n").expect_err("unknown");
    assert!(
        e.to_string()
            .starts_with("invalid config: retry: unknown field `base`, expected one of `base_ms`"),
        "{e}"
    );
}

#[test]
fn wrong_types_and_values_are_named() {
    let (message, line, column) = yaml_error("dispatch:\n  batch: -1\n");
    assert_eq!(
        message,
        "dispatch.batch: invalid type: integer `-1`, expected u32 at line 2 column 10"
    );
    assert_eq!((line, column), (Some(2), Some(10)));
    let (message, _, _) = yaml_error("node: {store: rocks}\n");
    assert!(
        message.starts_with(
            "node.store: unknown variant `rocks`, expected one of `rocksdb`, `fjall`, `memory`"
        ),
        "{message}"
    );
    let (message, _, _) = yaml_error("node: {log_format: xml}\n");
    assert!(
        message.starts_with("node.log_format: unknown variant `xml`, expected `text` or `json`"),
        "{message}"
    );
    let (message, _, _) = yaml_error("sources:\n  - name: a\n    verification: {type: paypal}\n");
    assert!(
        message.starts_with("sources[0].verification.type: unknown variant `paypal`"),
        "{message}"
    );
    let (message, _, _) = yaml_error("sources:\n  - name: a\n    verification: github-v2\n");
    assert!(message.contains("unknown variant `github-v2`"), "{message}");
    let (message, _, _) = yaml_error("store_headers: {default: strip}\n");
    assert!(
        message.starts_with(
            "store_headers.default: unknown variant `strip`, expected one of `keep`, `drop`, `hash`"
        ),
        "{message}"
    );
    let (message, _, _) = yaml_error("sources:\n  - path: /x\n");
    assert!(
        message.starts_with("sources[0]: missing field `name`"),
        "{message}"
    );
    let (message, _, _) = yaml_error("sources:\n  - name: a\n    sinks: [http]\n");
    assert!(
        message.starts_with(
            "sources[0].sinks[0]: invalid type: string \"http\", expected a YAML mapping"
        ),
        "{message}"
    );
}

#[test]
fn a_syntax_error_carries_line_and_column() {
    let (message, line, column) = yaml_error("node:\n  name: a\n  store: rocksdb: x\n");
    // Column 17 is the second `:` of `  store: rocksdb: x`.
    assert_eq!(
        message,
        "mapping values are not allowed in this context at line 3 column 17"
    );
    assert_eq!((line, column), (Some(3), Some(17)));
    let (_, line, _) = yaml_error("node:\n\tname: a\n");
    assert_eq!(line, Some(2));
}

#[test]
fn duplicate_keys_are_refused() {
    let (message, _, _) = yaml_error("node: {name: a}\nnode: {name: b}\n");
    assert!(message.contains("duplicate field `node`"), "{message}");
}

#[test]
fn load_reads_a_file_and_names_a_missing_one() {
    let path = std::env::temp_dir().join(format!("ankusa-config-test-{}.yaml", std::process::id()));
    std::fs::write(&path, "node: {name: from-file}\n").expect("write temp file");
    let c = Config::load(&path).expect("loads");
    assert_eq!(c.node.name, "from-file");
    std::fs::remove_file(&path).expect("remove temp file");
    match Config::load(&path) {
        Err(e @ ConfigError::Read { .. }) => {
            assert!(
                e.to_string()
                    .starts_with(&format!("cannot read config file {}: ", path.display())),
                "{e}"
            )
        }
        other => panic!("expected a read error, got {other:?}"),
    }
}

#[test]
fn an_empty_file_is_refused() {
    for text in ["", "# only a comment\n", "---\n", "null\n"] {
        let (message, line, _) = yaml_error(text);
        assert_eq!(
            message, "the file is empty (write `sources: []` for a node with no sources)",
            "{text:?}"
        );
        assert_eq!(line, None);
    }
    // The explicit form loads.
    assert!(load("sources: []\n").expect("explicit").sources.is_empty());
}

#[test]
fn anchors_aliases_and_merge_keys_in_sink_entries() {
    let c = load(
        "sources:\n  - {name: a, sinks: [&base {type: http, url: 'http://h/', timeout_ms: 500}]}\n  \
         - {name: b, sinks: [*base, {<<: *base, name: slow, timeout_ms: 9000}]}\n",
    )
    .expect("anchors");
    let b = c.source("b").expect("b");
    let timeouts: Vec<(&str, u64)> = b
        .sinks
        .iter()
        .map(|s| match &s.typed {
            ankusa_config::TypedOptions::Http(h) => (s.name.as_str(), h.timeout_ms),
            other => panic!("http expected, got {other:?}"),
        })
        .collect();
    assert_eq!(timeouts, [("http-0", 500), ("slow", 9000)]);
    assert!(b.sinks[1].options.get("<<").is_none());
}

/// The parser's messages name what the user wrote (a mapping), not this crate's
/// private types (found by a break-it pass of the configuration).
#[test]
fn a_wrong_shape_is_described_without_internal_type_names() {
    let (message, _, _) = yaml_error("- a\n");
    assert!(
        message.contains("a mapping of top-level sections"),
        "{message}"
    );
    let (message, _, _) = yaml_error("sources:\n  - just a string\n");
    assert!(message.contains("a mapping (a source)"), "{message}");
    assert!(!message.contains("Raw"), "{message}");
}

/// Several mistakes the parser refuses (a misspelled section, a misspelled
/// option in two sources, a value of the wrong type) and one the validation
/// finds in a source that parsed: all reported in one run, each source by its
/// name (the parser used to stop at the first).
#[test]
fn every_structural_problem_is_reported_in_one_run() {
    let text = "\
node: {max_pending: lots}
dispach: {batch: 10}
tenants: [{name: default}]
sources:
  - name: github
    dedup: {header: x-github-delivery}
    sinks: [{type: file, path: x}]
  - name: stripe
    verification: {type: stripe, secrets: [s], tolerence_ms: 5}
    sinks: [{type: file, path: y}]
  - name: shop
    tenant: nobody
    sinks: [{type: file, path: z}]
";
    let e = load(text).expect_err("refused");
    let problems: Vec<String> = e.problems().iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 5, "{problems:#?}");
    let expect = [
        // The first keeps the parser's full path and line.
        "node: option \"max_pending\": invalid type: string \"lots\", expected u64 at line 1 column 21",
        "the file: unknown field `dispach`",
        "source \"github\": unknown field `dedup`",
        "source \"stripe\": unknown field `tolerence_ms`",
        "source \"shop\": option \"tenant\": unknown tenant \"nobody\"",
    ];
    for (got, want) in problems.iter().zip(expect) {
        assert!(
            got.starts_with(want),
            "{got:?} does not start with {want:?}\n{problems:#?}"
        );
    }
    // One parser mistake alone keeps the parser's own error, with its line.
    let (_, line, _) = yaml_error("node:\n  name: a\n  data_dri: /x\n");
    assert_eq!(line, Some(3));
}
