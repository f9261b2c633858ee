//! ADR 0004 sections 1 and 2: the option grammar of ordered sinks and every
//! load-time rejection, each with the exact source, sink and option.

use ankusa_config::{JsonPath, Order, OrderingKey, SinkKind, TypedOptions};
use serde_yaml_ng::Value;

use crate::helpers::{load_env, ok, one, problems, with_sink, with_sink_and};

/// Minimal valid options of each kind (the broker kinds' options are the sink
/// crates' to check).
fn base(kind: &str) -> &'static str {
    match kind {
        "http" => "url: 'http://127.0.0.1:9000/hooks'",
        "file" => "path: /tmp/ankusa-test.ndjson",
        "sqs" => "queue_url: 'https://sqs.eu-west-1.amazonaws.com/1/orders'",
        "pubsub" => "project: p, topic: t",
        "kafka" => "brokers: 'localhost:9092', topic: t",
        "rabbitmq" => "url: 'amqp://localhost', exchange: x",
        "nats" => "url: 'nats://localhost', subject: s",
        "redis" => "url: 'redis://localhost', stream: s",
        other => panic!("no kind {other}"),
    }
}

const KINDS: [&str; 8] = [
    "http", "file", "sqs", "pubsub", "kafka", "rabbitmq", "nats", "redis",
];

#[test]
fn ordering_key_without_ordered_is_refused_on_every_sink_but_pubsub() {
    for kind in KINDS.iter().filter(|k| **k != "pubsub") {
        for ordered in ["", "ordered: false, "] {
            for key in [
                "{header: x-entity-id}",
                "{json: data.object.customer}",
                "cust",
            ] {
                let yaml = with_sink(&format!(
                    "{{type: {kind}, name: orders, {}, {ordered}ordering_key: {key}}}",
                    base(kind)
                ));
                assert_eq!(
                    one(&yaml),
                    format!(
                        "source \"stripe\", sink \"orders\" ({kind}): option \"ordering_key\": \
                         requires ordered: true (only a pubsub sink takes an ordering_key without it)"
                    ),
                    "{yaml}"
                );
            }
        }
    }
}

#[test]
fn pubsub_legacy_string_key_is_kept_for_the_sink() {
    for ordered in ["", "ordered: false, "] {
        let c = ok(&with_sink(&format!(
            "{{type: pubsub, name: events, project: p, topic: t, {ordered}ordering_key: customer-42}}"
        )));
        let s = &c.sources[0].sinks[0];
        assert_eq!(s.kind, SinkKind::Pubsub);
        assert_eq!(s.order, Order::Unordered);
        assert_eq!(
            s.options.get("ordering_key"),
            Some(&Value::String("customer-42".into()))
        );
        assert_eq!(s.options.get("ordered"), None);
        assert_eq!(s.options.len(), 3, "{:?}", s.options);
        assert_eq!(
            s.options_json()["ordering_key"],
            serde_json::json!("customer-42")
        );
    }
}

#[test]
fn pubsub_header_or_json_key_without_ordered_is_refused() {
    for key in [
        "{header: x-entity-id}",
        "{json: data.object.customer}",
        "[a, b]",
    ] {
        assert_eq!(
            one(&with_sink(&format!(
                "{{type: pubsub, name: events, project: p, topic: t, ordering_key: {key}}}"
            ))),
            "source \"stripe\", sink \"events\" (pubsub): option \"ordering_key\": \
             a {header: NAME} or {json: a.b.c} key requires ordered: true; without it a pubsub \
             ordering_key is the legacy form, a plain string passed to the sink"
        );
    }
}

#[test]
fn pubsub_ordered_key_is_core_and_removed_from_the_options() {
    let c = ok(&with_sink(
        "{type: pubsub, name: events, project: p, topic: t, ordered: true, ordering_key: {json: data.object.customer}}",
    ));
    let s = &c.sources[0].sinks[0];
    assert_eq!(
        s.order,
        Order::Ordered {
            key: Some(OrderingKey::Json(JsonPath {
                dotted: "data.object.customer".into(),
                segments: vec!["data".into(), "object".into(), "customer".into()],
            }))
        }
    );
    let keys: Vec<&str> = s.options.keys().filter_map(Value::as_str).collect();
    assert_eq!(keys, ["project", "topic"]);
}

#[test]
fn ordered_key_as_a_plain_string_is_refused_on_every_sink() {
    for kind in KINDS {
        let base = if kind == "sqs" {
            "queue_url: 'https://sqs.eu-west-1.amazonaws.com/1/orders.fifo'"
        } else {
            base(kind)
        };
        let yaml = with_sink(&format!(
            "{{type: {kind}, name: orders, {base}, ordered: true, ordering_key: x-entity-id}}"
        ));
        assert_eq!(
            one(&yaml),
            format!(
                "source \"stripe\", sink \"orders\" ({kind}): option \"ordering_key\": \
                 \"x-entity-id\" is a plain string; an ordered sink takes {{header: NAME}} or \
                 {{json: a.b.c}} (YAML cannot express a function key)"
            )
        );
    }
}

#[test]
fn ordered_key_of_any_other_form_is_refused() {
    let cases = [
        (
            "[x-entity-id]",
            "place 0: \"x-entity-id\" is a plain string; an ordered sink takes {header: NAME} or \
             {json: a.b.c} (YAML cannot express a function key)",
        ),
        (
            "[]",
            "an empty list; give one or more of {header: NAME} or {json: a.b.c}, tried in order",
        ),
        (
            "[{json: data.id}, [{json: a}]]",
            "place 1 is a list; a place is {header: NAME} or {json: a.b.c}",
        ),
        (
            "[{json: data.id}, {json: 'a..b'}]",
            "place 1: \"a..b\" is not a JSON dot path: write member names separated by dots, e.g. data.object.customer",
        ),
        (
            "[{json: a}, {json: b}, {json: c}, {json: d}, {json: e}, {json: f}, {json: g}, {json: h}, {json: i}]",
            "9 places; at most 8 are tried",
        ),
        ("42", "must be {header: NAME} or {json: a.b.c}, found 42"),
        (
            "true",
            "must be {header: NAME} or {json: a.b.c}, found true",
        ),
        (
            "null",
            "must be {header: NAME} or {json: a.b.c}, found null",
        ),
        ("{}", "must be {header: NAME} or {json: a.b.c}, found a map"),
        (
            "{mfa: 'Mod.fun'}",
            "must be {header: NAME} or {json: a.b.c}, found key \"mfa\"",
        ),
        (
            "{fun: key_of}",
            "must be {header: NAME} or {json: a.b.c}, found key \"fun\"",
        ),
        (
            "{header: x-entity-id, json: data.id}",
            "must be {header: NAME} or {json: a.b.c}, found a map",
        ),
        (
            "{header: 7}",
            "the header of {header: NAME} or {json: a.b.c} must be a string, found 7",
        ),
        (
            "{json: [a, b]}",
            "the json of {header: NAME} or {json: a.b.c} must be a string, found a list",
        ),
        (
            "{header: 'x entity'}",
            "\"x entity\" is not a valid HTTP header name",
        ),
        ("{header: ''}", "\"\" is not a valid HTTP header name"),
        (
            "{json: 'data..customer'}",
            "\"data..customer\" is not a JSON dot path: write member names separated by dots, e.g. data.object.customer",
        ),
        (
            "{json: '.customer'}",
            "\".customer\" is not a JSON dot path: write member names separated by dots, e.g. data.object.customer",
        ),
        (
            "{json: ''}",
            "\"\" is not a JSON dot path: write member names separated by dots, e.g. data.object.customer",
        ),
    ];
    for (key, message) in cases {
        let yaml = with_sink(&format!(
            "{{type: http, name: orders, url: 'http://127.0.0.1:9/x', ordered: true, ordering_key: {key}}}"
        ));
        assert_eq!(
            one(&yaml),
            format!(
                "source \"stripe\", sink \"orders\" (http): option \"ordering_key\": {message}"
            ),
            "{key}"
        );
    }
}

#[test]
fn ordered_must_be_a_boolean() {
    assert_eq!(
        one(&with_sink(
            "{type: http, name: orders, url: 'http://h/x', ordered: 'yes'}"
        )),
        "source \"stripe\", sink \"orders\" (http): option \"ordered\": must be true or false, found \"yes\""
    );
}

#[test]
fn ordered_sqs_needs_a_fifo_queue() {
    assert_eq!(
        one(&with_sink(
            "{type: sqs, name: orders, queue_url: 'https://sqs.eu-west-1.amazonaws.com/1/orders', ordered: true, ordering_key: {json: data.object.customer}}"
        )),
        "source \"stripe\", sink \"orders\" (sqs): option \"ordered\": requires a FIFO queue \
         (queue_url must end in .fifo); queue_url is \"https://sqs.eu-west-1.amazonaws.com/1/orders\""
    );
    // Keyless ordered is still ordered.
    assert_eq!(
        one(&with_sink(
            "{type: sqs, name: orders, queue_url: 'https://q/1/orders.fifo.bak', ordered: true}"
        )),
        "source \"stripe\", sink \"orders\" (sqs): option \"ordered\": requires a FIFO queue \
         (queue_url must end in .fifo); queue_url is \"https://q/1/orders.fifo.bak\""
    );
    assert_eq!(
        one(&with_sink("{type: sqs, name: orders, ordered: true}")),
        "source \"stripe\", sink \"orders\" (sqs): option \"ordered\": requires a FIFO queue \
         (queue_url must end in .fifo), and queue_url is missing"
    );
    // The URL is checked after env: is resolved; the message names the
    // variable, never its value (which may be a secret).
    let yaml = with_sink("{type: sqs, name: orders, queue_url: 'env:QUEUE', ordered: true}");
    assert_eq!(
        problems(load_env(&yaml, &[("QUEUE", "https://q/1/std")])),
        [
            "source \"stripe\", sink \"orders\" (sqs): option \"ordered\": requires a FIFO queue \
          (queue_url must end in .fifo); queue_url is the value of env:QUEUE"
        ]
    );
    // An unset variable is reported once, as itself.
    assert_eq!(
        problems(load_env(&yaml, &[])),
        [
            "source \"stripe\", sink \"orders\" (sqs): option \"queue_url\": environment variable QUEUE is not set"
        ]
    );
    let c = load_env(&yaml, &[("QUEUE", "https://q/1/orders.fifo")]).expect("fifo via env");
    assert_eq!(
        c.sources[0].sinks[0].options.get("queue_url"),
        Some(&Value::String("https://q/1/orders.fifo".into()))
    );
    // Unordered on a standard queue, and ordered on a FIFO one, load.
    let c = ok(&with_sink(
        "{type: sqs, name: orders, queue_url: 'https://q/1/std'}",
    ));
    assert_eq!(c.sources[0].sinks[0].order, Order::Unordered);
    let c = ok(&with_sink(
        "{type: sqs, name: orders, queue_url: 'https://q/1/orders.fifo', ordered: true, ordering_key: {json: data.object.customer}}",
    ));
    let s = &c.sources[0].sinks[0];
    assert!(s.order.is_ordered());
    let keys: Vec<&str> = s.options.keys().filter_map(Value::as_str).collect();
    assert_eq!(keys, ["queue_url"]);
    assert_eq!(s.typed, TypedOptions::Unchecked);
}

#[test]
fn ordered_without_key_is_the_keyless_lane() {
    let c = ok(&with_sink(
        "{type: http, name: orders, url: 'http://h/x', ordered: true}",
    ));
    let s = &c.sources[0].sinks[0];
    assert_eq!(s.order, Order::Ordered { key: None });
    assert!(s.order.is_ordered());
    assert_eq!(s.order.key(), None);
    assert!(c.sources[0].has_ordered_sink());
    assert!(s.options.get("ordered").is_none());
}

#[test]
fn ordered_header_key_is_lowercased_and_removed_from_options() {
    let c = ok(&with_sink(
        "{type: http, name: orders, url: 'http://h/x', ordered: true, ordering_key: {header: X-Entity-Id}}",
    ));
    let s = &c.sources[0].sinks[0];
    assert_eq!(
        s.order.key(),
        Some(&OrderingKey::Header("x-entity-id".into()))
    );
    let keys: Vec<&str> = s.options.keys().filter_map(Value::as_str).collect();
    assert_eq!(keys, ["url"]);
}

/// ADR 0004 section 1: an ordering key may be a list of places tried in
/// order; a list of one is that place.
#[test]
fn an_ordering_key_list_is_its_places_in_order() {
    let c = ok(&with_sink(
        "{type: http, name: orders, url: 'http://h/x', ordered: true, ordering_key: [{json: data.object.customer}, {header: X-Entity-Id}]}",
    ));
    let Some(OrderingKey::FirstOf(places)) = c.sources[0].sinks[0].order.key() else {
        panic!("{:?}", c.sources[0].sinks[0].order);
    };
    assert!(
        matches!(&places[0], OrderingKey::Json(p) if p.dotted == "data.object.customer"),
        "{places:?}"
    );
    assert_eq!(places[1], OrderingKey::Header("x-entity-id".into()));
    let c = ok(&with_sink(
        "{type: http, name: orders, url: 'http://h/x', ordered: true, ordering_key: [{header: X-Entity-Id}]}",
    ));
    assert_eq!(
        c.sources[0].sinks[0].order.key(),
        Some(&OrderingKey::Header("x-entity-id".into()))
    );
    // A header place must be kept by the store like a single header key;
    // the problem names the place by its index.
    let yaml = format!(
        "store_headers:\n  headers:\n    x-entity-id: drop\n{}",
        with_sink(
            "{type: http, name: orders, url: 'http://h/x', ordered: true, ordering_key: [{json: data.id}, {header: X-Entity-Id}]}"
        )
    );
    assert_eq!(
        one(&yaml),
        "source \"stripe\", sink \"orders\" (http): option \"ordering_key[1]\": header \"x-entity-id\" is \
         not kept by the store: the instance store_headers policy drops it, so a replay could not \
         resolve the same key (docs/adr-0004-ordering-lanes.md section 2); set store_headers headers.x-entity-id: keep"
    );
}

const ORDERED_HTTP: &str = "{type: http, name: orders, url: 'http://h/x', ordered: true, ordering_key: {header: X-Entity-Id}}";

#[test]
fn ordering_header_dropped_by_the_instance_policy_is_refused() {
    let yaml = format!(
        "store_headers:\n  headers:\n    x-entity-id: drop\n{}",
        with_sink(ORDERED_HTTP)
    );
    assert_eq!(
        one(&yaml),
        "source \"stripe\", sink \"orders\" (http): option \"ordering_key\": header \"x-entity-id\" is \
         not kept by the store: the instance store_headers policy drops it, so a replay could not \
         resolve the same key (docs/adr-0004-ordering-lanes.md section 2); set store_headers headers.x-entity-id: keep"
    );
    // By the default action too.
    let yaml = format!(
        "store_headers:\n  default: hash\n{}",
        with_sink(ORDERED_HTTP)
    );
    assert_eq!(
        one(&yaml),
        "source \"stripe\", sink \"orders\" (http): option \"ordering_key\": header \"x-entity-id\" is \
         not kept by the store: the instance store_headers policy hashes it, so a replay could not \
         resolve the same key (docs/adr-0004-ordering-lanes.md section 2); set store_headers headers.x-entity-id: keep"
    );
}

#[test]
fn ordering_header_hashed_by_the_source_override_is_refused() {
    let yaml = with_sink_and(
        "    store_headers:\n      headers:\n        X-ENTITY-ID: hash\n",
        ORDERED_HTTP,
    );
    assert_eq!(
        one(&yaml),
        "source \"stripe\", sink \"orders\" (http): option \"ordering_key\": header \"x-entity-id\" is \
         not kept by the store: the source's store_headers override hashes it, so a replay could not \
         resolve the same key (docs/adr-0004-ordering-lanes.md section 2); set store_headers headers.x-entity-id: keep"
    );
    let yaml = with_sink_and("    store_headers:\n      default: drop\n", ORDERED_HTTP);
    assert!(one(&yaml).contains("the source's store_headers override drops it"));
}

#[test]
fn the_source_override_replaces_the_instance_policy() {
    // The instance drops the header, the source's override keeps it: allowed.
    let yaml = format!(
        "store_headers:\n  default: drop\n{}",
        with_sink_and(
            "    store_headers:\n      headers:\n        x-entity-id: keep\n",
            ORDERED_HTTP
        )
    );
    let c = ok(&yaml);
    let s = &c.sources[0];
    assert!(s.store_headers_overridden);
    assert_eq!(
        s.store_headers.action("X-Entity-Id"),
        ankusa_config::HeaderAction::Keep
    );
    // The override's omitted default is keep, not the instance's drop.
    assert_eq!(
        s.store_headers.action("authorization"),
        ankusa_config::HeaderAction::Keep
    );
    assert_eq!(
        c.store_headers.action("x-entity-id"),
        ankusa_config::HeaderAction::Drop
    );
    // The instance keeps it, the override drops it by default: refused.
    let yaml = format!(
        "store_headers:\n  default: keep\n{}",
        with_sink_and(
            "    store_headers:\n      default: drop\n      headers:\n        other: keep\n",
            ORDERED_HTTP
        )
    );
    assert!(one(&yaml).contains("the source's store_headers override drops it"));
}

#[test]
fn a_json_key_is_not_subject_to_store_headers() {
    let yaml = format!(
        "store_headers:\n  default: drop\n{}",
        with_sink(
            "{type: file, name: f, path: /tmp/x, ordered: true, ordering_key: {json: data.object.customer}}"
        )
    );
    let c = ok(&yaml);
    assert!(
        matches!(c.sources[0].sinks[0].order.key(), Some(OrderingKey::Json(p)) if p.segments.len() == 3)
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let yaml = "sources:\n  - name: stripe\n    sinks:\n      \
        - {type: http, name: a, url: 'http://h/x', ordering_key: {header: k}}\n      \
        - {type: sqs, name: b, queue_url: 'https://q/std', ordered: true}\n      \
        - {type: file, name: c, path: /tmp/x, ordered: true, ordering_key: k}\n";
    let err = crate::helpers::load(yaml).expect_err("three problems");
    assert_eq!(
        problems(Err(err.clone_for_test())),
        [
            "source \"stripe\", sink \"a\" (http): option \"ordering_key\": requires ordered: true (only a pubsub sink takes an ordering_key without it)",
            "source \"stripe\", sink \"b\" (sqs): option \"ordered\": requires a FIFO queue (queue_url must end in .fifo); queue_url is \"https://q/std\"",
            "source \"stripe\", sink \"c\" (file): option \"ordering_key\": \"k\" is a plain string; an ordered sink takes {header: NAME} or {json: a.b.c} (YAML cannot express a function key)",
        ]
    );
    assert!(
        err.to_string()
            .starts_with("3 problems in the config:\n  - source \"stripe\", sink \"a\" (http)")
    );
}

/// `ConfigError` is not `Clone` (it may hold an `io::Error`); rebuild the
/// invalid kind for a second look.
trait CloneForTest {
    fn clone_for_test(&self) -> ankusa_config::ConfigError;
}

impl CloneForTest for ankusa_config::ConfigError {
    fn clone_for_test(&self) -> ankusa_config::ConfigError {
        ankusa_config::ConfigError::Invalid {
            problems: self.problems().to_vec(),
        }
    }
}

/// ADR 0004 section 8: `dead_letter: release | hold` on an ordered entry;
/// `release` by default.
#[test]
fn dead_letter_takes_release_or_hold_on_an_ordered_sink() {
    use ankusa_config::DeadLetterLane;
    for (option, want) in [
        ("", DeadLetterLane::Release),
        (", dead_letter: release", DeadLetterLane::Release),
        (", dead_letter: hold", DeadLetterLane::Hold),
    ] {
        let c = ok(&with_sink(&format!(
            "{{type: http, name: orders, url: 'http://h/x', ordered: true, ordering_key: {{json: id}}{option}}}"
        )));
        let e = &c.sources[0].sinks[0];
        assert_eq!(e.dead_letter, want, "{option}");
        assert!(!e.options.contains_key("dead_letter"), "a core option");
    }
    // `release` needs no lane; `hold` does.
    let c = ok(&with_sink(
        "{type: http, name: orders, url: 'http://h/x', dead_letter: release}",
    ));
    assert_eq!(c.sources[0].sinks[0].dead_letter, DeadLetterLane::Release);
    assert_eq!(
        one(&with_sink(
            "{type: http, name: orders, url: 'http://h/x', dead_letter: hold}"
        )),
        "source \"stripe\", sink \"orders\" (http): option \"dead_letter\": hold requires ordered: true \
         (it holds an ordering key's lane; an unordered sink has none)"
    );
    assert_eq!(
        one(&with_sink(
            "{type: http, name: orders, url: 'http://h/x', ordered: true, dead_letter: keep}"
        )),
        "source \"stripe\", sink \"orders\" (http): option \"dead_letter\": must be release (a \
         dead-lettered hook frees its ordering key) or hold (the key's later hooks wait until it is \
         revived or dropped), found \"keep\""
    );
}

/// ADR 0004 section 8: a held lane would keep a cluster node's drain of a
/// moved tenant from ending: refused with `cluster`, by name.
#[test]
fn dead_letter_hold_is_refused_in_a_cluster() {
    let yaml = format!(
        "{}cluster: {{node_id: n1, etcd: ['http://127.0.0.1:2379'], advertise: '127.0.0.1:8080'}}\n",
        with_sink(
            "{type: http, name: orders, url: 'http://h/x', ordered: true, dead_letter: hold}"
        )
    );
    let p = problems(crate::helpers::load(&yaml));
    assert!(
        p.iter().any(|m| m.starts_with(
            "source \"stripe\", sink \"orders\" (http): option \"dead_letter\": hold in cluster mode is planned, not built"
        )),
        "{p:#?}"
    );
    // `release` is fine there.
    let yaml = yaml.replace("dead_letter: hold", "dead_letter: release");
    assert_eq!(
        ok(&yaml).sources[0].sinks[0].dead_letter,
        ankusa_config::DeadLetterLane::Release
    );
}
