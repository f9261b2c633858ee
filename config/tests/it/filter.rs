//! A sink entry's `filter`, its grammar and every load-time rejection, each
//! with the exact source, sink and option.

use ankusa_config::{FilterCondition, FilterTest, JsonPath, KeySource, SinkEntry};

use crate::helpers::{load, ok, one, problems, with_sink, with_sink_and};

fn http(extra: &str) -> String {
    format!("{{type: http, name: invoices, url: 'http://h/x', {extra}}}")
}

fn entry(extra: &str) -> SinkEntry {
    let c = ok(&with_sink(&http(extra)));
    c.sources[0].sinks[0].clone()
}

fn json(dotted: &str) -> KeySource {
    KeySource::Json(JsonPath {
        dotted: dotted.to_owned(),
        segments: dotted.split('.').map(str::to_owned).collect(),
    })
}

const AT: &str = "source \"stripe\", sink \"invoices\" (http): option";

#[test]
fn no_filter_takes_every_hook() {
    assert_eq!(entry("ordered: true").filter, []);
}

#[test]
fn each_test_on_a_header_or_a_json_path() {
    assert_eq!(
        entry("filter: {json: type, prefix: 'invoice.'}").filter,
        [FilterCondition {
            on: json("type"),
            test: FilterTest::Prefix("invoice.".into())
        }]
    );
    assert_eq!(
        entry("filter: {header: X-GitHub-Event, one_of: [push, pull_request]}").filter,
        [FilterCondition {
            on: KeySource::Header("x-github-event".into()),
            test: FilterTest::OneOf(vec!["push".into(), "pull_request".into()])
        }]
    );
    assert_eq!(
        entry("filter: {json: data.object.status, equals: paid}").filter,
        [FilterCondition {
            on: json("data.object.status"),
            test: FilterTest::Equals("paid".into())
        }]
    );
    assert_eq!(
        entry("filter: {header: x-foo, exists: true}").filter,
        [FilterCondition {
            on: KeySource::Header("x-foo".into()),
            test: FilterTest::Exists(true)
        }]
    );
    assert_eq!(
        entry("filter: {json: data.object.customer, exists: false}").filter,
        [FilterCondition {
            on: json("data.object.customer"),
            test: FilterTest::Exists(false)
        }]
    );
    // An empty equals is a value like any other.
    assert_eq!(
        entry("filter: {header: x-foo, equals: ''}").filter[0].test,
        FilterTest::Equals(String::new())
    );
}

#[test]
fn a_list_of_conditions_all_required_in_order() {
    let e = entry(
        "filter: [{json: type, prefix: 'invoice.'}, {json: data.object.status, one_of: [paid, open]}]",
    );
    assert_eq!(
        e.filter,
        [
            FilterCondition {
                on: json("type"),
                test: FilterTest::Prefix("invoice.".into())
            },
            FilterCondition {
                on: json("data.object.status"),
                test: FilterTest::OneOf(vec!["paid".into(), "open".into()])
            },
        ]
    );
    // `filter` is core's: never a sink's own option.
    assert!(e.options.get("filter").is_none());
    assert!(e.options.get("url").is_some());
}

#[test]
fn filter_on_every_kind_is_core() {
    // A broker sink's own options never see it (their crates reject unknown
    // options).
    let c = ok(&with_sink(
        "{type: redis, name: r, url: 'redis://localhost', stream: s, filter: {json: type, equals: a}}",
    ));
    let e = &c.sources[0].sinks[0];
    assert_eq!(e.filter.len(), 1);
    assert!(e.options.get("filter").is_none());
}

#[test]
fn bad_tests_are_named() {
    let cases: [(&str, String); 12] = [
        (
            "filter: {json: type, equals: a, prefix: b}",
            format!(
                "{AT} \"filter\": has 2 tests (equals, prefix): give one per condition (a list of conditions must all match)"
            ),
        ),
        (
            "filter: {json: type}",
            format!("{AT} \"filter\": has no test: add one of equals, one_of, prefix, exists"),
        ),
        (
            "filter: {json: type, equals: a, matches: 'inv.*'}",
            format!(
                "{AT} \"filter\": unknown key \"matches\" of a filter condition: write {{header: NAME}} or {{json: a.b.c}} with one of equals: TEXT, one_of: [TEXT, ...], prefix: TEXT, exists: true|false"
            ),
        ),
        (
            "filter: {json: type, one_of: []}",
            format!(
                "{AT} \"filter\": one_of is empty, so nothing would match: list at least one value"
            ),
        ),
        (
            "filter: {json: type, one_of: push}",
            format!("{AT} \"filter\": one_of must be a list of strings, found \"push\""),
        ),
        (
            "filter: {json: type, one_of: [push, 3]}",
            format!(
                "{AT} \"filter\": one_of value 1 must be a string, found 3: a filter compares header values and JSON strings (quote a number or a boolean: \"42\")"
            ),
        ),
        (
            "filter: {json: livemode, equals: true}",
            format!(
                "{AT} \"filter\": equals must be a string, found true: a filter compares header values and JSON strings (quote a number or a boolean: \"42\")"
            ),
        ),
        (
            "filter: {json: type, prefix: ''}",
            format!(
                "{AT} \"filter\": prefix is empty, so it would match every string: use exists: true, or omit filter"
            ),
        ),
        (
            "filter: {header: x-foo, exists: 'yes'}",
            format!("{AT} \"filter\": exists must be true or false, found \"yes\""),
        ),
        (
            "filter: {json: 'data..status', equals: paid}",
            format!(
                "{AT} \"filter\": json: \"data..status\" is not a JSON dot path: write member names separated by dots, e.g. data.object.customer"
            ),
        ),
        (
            "filter: {header: 'x foo', equals: a}",
            format!("{AT} \"filter\": header: \"x foo\" is not a valid HTTP header name"),
        ),
        (
            "filter: {header: x-foo, json: type, equals: a}",
            format!(
                "{AT} \"filter\": has both header and json: a condition reads one (a list of conditions must all match)"
            ),
        ),
    ];
    for (extra, want) in cases {
        assert_eq!(one(&with_sink(&http(extra))), want, "{extra}");
    }
}

#[test]
fn bad_shapes_are_named() {
    assert_eq!(
        one(&with_sink(&http("filter: {equals: paid}"))),
        format!(
            "{AT} \"filter\": reads nothing: write {{header: NAME}} or {{json: a.b.c}} with one of equals: TEXT, one_of: [TEXT, ...], prefix: TEXT, exists: true|false"
        )
    );
    assert_eq!(
        one(&with_sink(&http("filter: []"))),
        format!("{AT} \"filter\": an empty list: omit filter to take every hook")
    );
    assert_eq!(
        one(&with_sink(&http("filter: 'invoice.*'"))),
        format!(
            "{AT} \"filter\": must be a condition, {{header: NAME}} or {{json: a.b.c}} with one of equals: TEXT, one_of: [TEXT, ...], prefix: TEXT, exists: true|false, or a list of conditions that must all match; found \"invoice.*\""
        )
    );
    assert_eq!(
        one(&with_sink(&http("filter: {json: [a], equals: b}"))),
        format!("{AT} \"filter\": json: must be a dot path, found a list")
    );
    assert_eq!(
        one(&with_sink(&http("filter: {header: 7, equals: b}"))),
        format!("{AT} \"filter\": header: must be a header name, found 7")
    );
}

#[test]
fn every_problem_of_a_list_is_reported_in_one_run_by_position() {
    let p = problems(load(&with_sink(&http(
        "filter: [{json: type, prefix: 'invoice.'}, {json: type, one_of: []}, x, {header: 'a b', exists: maybe}]",
    ))));
    assert_eq!(
        p,
        [
            format!(
                "{AT} \"filter[1]\": one_of is empty, so nothing would match: list at least one value"
            ),
            format!(
                "{AT} \"filter[2]\": must be a condition, {{header: NAME}} or {{json: a.b.c}} with one of equals: TEXT, one_of: [TEXT, ...], prefix: TEXT, exists: true|false; found \"x\""
            ),
            format!("{AT} \"filter[3]\": header: \"a b\" is not a valid HTTP header name"),
            format!("{AT} \"filter[3]\": exists must be true or false, found \"maybe\""),
        ]
    );
}

#[test]
fn a_header_the_store_does_not_keep_is_refused() {
    // The instance policy drops it.
    let yaml = format!(
        "store_headers:\n  headers:\n    x-github-event: drop\n{}",
        with_sink(&http("filter: {header: X-GitHub-Event, equals: push}"))
    );
    assert_eq!(
        one(&yaml),
        format!(
            "{AT} \"filter\": header \"x-github-event\" is not kept by the store: the instance store_headers policy drops it, so a quarantine release or a replay could not apply the same filter (docs/design.md section 5, \"Quarantine\"); set store_headers headers.x-github-event: keep"
        )
    );
    // The source's override hashes it by default; in a list, by position.
    let yaml = with_sink_and(
        "    store_headers:\n      default: hash\n      headers:\n        stripe-signature: keep\n",
        &http("filter: [{header: stripe-signature, exists: true}, {header: X-Foo, exists: true}]"),
    );
    assert_eq!(
        one(&yaml),
        format!(
            "{AT} \"filter[1]\": header \"x-foo\" is not kept by the store: the source's store_headers override hashes it, so a quarantine release or a replay could not apply the same filter (docs/design.md section 5, \"Quarantine\"); set store_headers headers.x-foo: keep"
        )
    );
    // A JSON path reads the stored body: any policy.
    let yaml = with_sink_and(
        "    store_headers:\n      default: drop\n",
        &http("filter: {json: type, prefix: 'invoice.'}"),
    );
    assert_eq!(ok(&yaml).sources[0].sinks[0].filter.len(), 1);
}

#[test]
fn the_example_file_documents_the_stripe_and_github_filters() {
    let text = std::fs::read_to_string(crate::example::example_path()).expect("example file");
    let c = crate::helpers::load_env(&text, &crate::example::EXAMPLE_ENV)
        .unwrap_or_else(|e| panic!("example: {e}"));
    let gh = c.source("github").expect("github");
    assert_eq!(gh.sink("ci").expect("ci").filter, []);
    assert_eq!(
        gh.sink("deploys").expect("deploys").filter,
        [FilterCondition {
            on: KeySource::Header("x-github-event".into()),
            test: FilterTest::OneOf(vec!["push".into(), "pull_request".into()])
        }]
    );
    let st = c.source("stripe").expect("stripe");
    let inv = st.sink("invoices").expect("invoices");
    assert!(inv.order.is_ordered());
    assert_eq!(
        inv.filter,
        [FilterCondition {
            on: json("type"),
            test: FilterTest::Prefix("invoice.".into())
        }]
    );
    assert_eq!(inv.index, 2, "added at the end of the list");
}
