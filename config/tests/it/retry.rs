//! A sink entry's `retry:` (docs/design.md section 5, "Retry policy"): the
//! global section with the entry's overrides, and every rejection with its
//! source, sink and option.

use ankusa_config::SinkRetry;

use crate::helpers::{load, ok, one, problems};

fn http(retry: &str) -> String {
    format!(
        "retry: {{base_ms: 200, max_ms: 5000, max_elapsed_ms: 60000}}\nsources:\n  - name: s\n    sinks:\n      - {{type: http, name: web, url: 'http://h/', retry: {retry}}}\n"
    )
}

fn retry_of(yaml: &str) -> SinkRetry {
    ok(yaml).sources[0].sinks[0].retry.clone()
}

#[test]
fn overrides_apply_field_by_field() {
    let global = SinkRetry {
        base_ms: 200,
        max_ms: 5000,
        max_elapsed_ms: 60000,
        retry_after_max_ms: 5000,
        retry_statuses: None,
        grace_ms: None,
        overridden: false,
    };
    // No `retry:`: the global values, the Retry-After cap = max_ms.
    let plain = "retry: {base_ms: 200, max_ms: 5000, max_elapsed_ms: 60000}\nsources:\n  - name: s\n    sinks: [{type: file, path: x}]\n";
    assert_eq!(retry_of(plain), global);
    assert_eq!(
        retry_of(&http("{}")),
        SinkRetry {
            overridden: true,
            ..global.clone()
        }
    );
    // max_ms overridden: the Retry-After cap follows it.
    assert_eq!(
        retry_of(&http("{max_ms: 800}")),
        SinkRetry {
            max_ms: 800,
            retry_after_max_ms: 800,
            overridden: true,
            ..global.clone()
        }
    );
    assert_eq!(
        retry_of(&http(
            "{base_ms: 10, max_elapsed_ms: 1000, retry_after_max_ms: 0, grace_ms: 500, retry_statuses: [404, '5xx', 409]}"
        )),
        SinkRetry {
            base_ms: 10,
            max_elapsed_ms: 1000,
            retry_after_max_ms: 0,
            grace_ms: Some(500),
            retry_statuses: Some([404, 409].into_iter().chain(500..=599).collect()),
            overridden: true,
            ..global.clone()
        }
    );
    // grace_ms 0 is no grace; "4xx" is the whole class; an empty list
    // retries no status.
    let r = retry_of(&http("{grace_ms: 0, retry_statuses: ['4XX']}"));
    assert_eq!(
        (r.grace_ms, r.retry_statuses),
        (None, Some((400..=499).collect()))
    );
    // A global retry_after_max_ms is the default of every entry.
    let capped = "retry: {max_ms: 5000, retry_after_max_ms: 42}\nsources:\n  - name: s\n    sinks: [{type: file, path: x}, {type: file, path: y, retry: {max_ms: 9000}}, {type: file, path: z, retry: {retry_after_max_ms: 7}}]\n";
    let c = ok(capped);
    assert_eq!(c.retry.retry_after_max_ms, Some(42));
    let caps: Vec<u64> = c.sources[0]
        .sinks
        .iter()
        .map(|e| e.retry.retry_after_max_ms)
        .collect();
    assert_eq!(caps, [42, 42, 7]);
    assert_eq!(ok(plain).retry.retry_after_max_ms, None);
    // Every kind takes the timing fields.
    let file = "sources:\n  - name: s\n    sinks: [{type: file, path: x, retry: {max_elapsed_ms: 5000, retry_after_max_ms: 100}}]\n";
    let r = retry_of(file);
    assert_eq!((r.max_elapsed_ms, r.retry_after_max_ms), (5000, 100));
    // `retry` is core's: the sink's own options never see it.
    assert!(
        ok(&http("{grace_ms: 5}")).sources[0].sinks[0]
            .options
            .get("retry")
            .is_none()
    );
}

#[test]
fn each_rejection_names_source_sink_and_option() {
    let p = |opt: &str, msg: &str| {
        format!("source \"s\", sink \"web\" (http): option \"{opt}\": {msg}")
    };
    assert_eq!(
        one(&http("{base_ms: 6000}")),
        p(
            "retry.base_ms",
            "base_ms 6000 is greater than max_ms 5000 (the global retry.max_ms): the first backoff cannot exceed the largest"
        )
    );
    assert_eq!(
        one(&http("{max_ms: 100}")),
        p(
            "retry.max_ms",
            "base_ms 200 (the global retry.base_ms) is greater than max_ms 100: the first backoff cannot exceed the largest"
        )
    );
    assert_eq!(
        one(&http("{max_elapsed_ms: 0}")),
        p("retry.max_elapsed_ms", "must be greater than 0")
    );
    assert_eq!(
        one(&http("{max_ms: -5}")),
        p(
            "retry.max_ms",
            "must be a whole number of milliseconds, above 0, found -5"
        )
    );
    assert_eq!(
        one(&http("{retry_after_max_ms: '10s'}")),
        p(
            "retry.retry_after_max_ms",
            "must be a whole number of milliseconds, 0 or more, found \"10s\""
        )
    );
    assert_eq!(
        one(&http("{max_elapsed_ms: 31536000001}")),
        p(
            "retry.max_elapsed_ms",
            "31536000001 is more than a year (31536000000 ms): write milliseconds"
        )
    );
    assert_eq!(
        one(&http("{grace_ms: 70000}")),
        p(
            "retry.grace_ms",
            "70000 is longer than the retry horizon max_elapsed_ms (60000): the horizon dead-letters a row before its grace period ends"
        )
    );
    assert_eq!(
        one(&http("{retry_statuses: [200]}")),
        p(
            "retry.retry_statuses",
            "200 is a success (2xx): it is delivered, never retried"
        )
    );
    assert_eq!(
        one(&http("{retry_statuses: [399]}")),
        p(
            "retry.retry_statuses",
            "399 is not an HTTP error status: list statuses from 400 to 599"
        )
    );
    assert_eq!(
        one(&http("{retry_statuses: [600]}")),
        p(
            "retry.retry_statuses",
            "600 is not an HTTP error status: list statuses from 400 to 599"
        )
    );
    assert_eq!(
        one(&http("{retry_statuses: [503, '5xx']}")),
        p(
            "retry.retry_statuses",
            "\"5xx\" covers 503, listed before it: list one of them"
        )
    );
    assert_eq!(
        one(&http("{retry_statuses: ['4xx', '5xx', 418]}")),
        p("retry.retry_statuses", "418 is already covered by \"4xx\"")
    );
    assert_eq!(
        one(&http("{retry_statuses: [404, 404]}")),
        p("retry.retry_statuses", "404 is listed twice")
    );
    assert_eq!(
        one(&http("{retry_statuses: []}")),
        p(
            "retry.retry_statuses",
            "is empty: nothing would be retried, not even a 503 or a 429; leave it out for the default [408, 425, 429, \"5xx\"]"
        )
    );
    assert_eq!(
        one(&http("{retry_statuses: 404}")),
        p(
            "retry.retry_statuses",
            "must be a list of HTTP statuses (400-599) or \"4xx\" / \"5xx\", e.g. [408, 425, 429, 404, \"5xx\"]; found 404"
        )
    );
    assert_eq!(
        one(&http("{backoff: 5}")),
        p(
            "retry.backoff",
            "unknown retry option (the options: base_ms, max_ms, max_elapsed_ms, retry_after_max_ms, retry_statuses, grace_ms)"
        )
    );
    assert_eq!(
        one(&http("[1, 2]")),
        p(
            "retry",
            "must be a map of retry options (base_ms, max_ms, max_elapsed_ms, retry_after_max_ms, retry_statuses, grace_ms), found a list"
        )
    );
    // http only.
    let redis = "sources:\n  - name: s\n    sinks: [{type: redis, name: r, url: 'redis://h', stream: x, retry: {retry_statuses: [404], grace_ms: 5}}]\n";
    assert_eq!(
        problems(load(redis)),
        [
            "source \"s\", sink \"r\" (redis): option \"retry.retry_statuses\": only an http sink takes it (HTTP statuses); a redis sink's failures are retried by their kind",
            "source \"s\", sink \"r\" (redis): option \"retry.grace_ms\": only an http sink takes it (HTTP statuses); a redis sink's failures are retried by their kind",
        ]
    );
    // Every problem of one entry in one run.
    let all = problems(load(&http(
        "{base_ms: 0, max_ms: x, retry_statuses: [1, 2], grace_ms: -1, what: 1}",
    )));
    assert_eq!(all.len(), 6, "{all:#?}");
}
