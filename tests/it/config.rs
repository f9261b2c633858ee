//! Every ADR 0004 section 1-2 rejection that applies to the http and file sinks
//! (and the redis sink's own option checks), through the binary:
//! `ankusa check-config FILE` and `ankusa serve --config FILE` both exit non-zero
//! naming the source, the sink and the option, and serve starts nothing (no
//! data_dir, no store).

use std::ffi::OsStr;
use std::path::Path;

use crate::relay::run_cli;

fn base(kind: &str) -> &'static str {
    match kind {
        "http" => "url: 'http://127.0.0.1:9/hooks'",
        "file" => "path: DATA.out.ndjson",
        other => panic!("no kind {other}"),
    }
}

/// A whole config: `top` (e.g. a store_headers section), one source `billing`
/// with `source_extra` lines, its one sink entry `sink` (a flow mapping).
fn yaml(dir: &Path, top: &str, source_extra: &str, sink: &str) -> String {
    let data = dir.join("data");
    let data = data.display();
    format!(
        "node: {{data_dir: '{data}', store: rocksdb}}
listeners: {{ingest: '127.0.0.1:0', admin: '127.0.0.1:0'}}
{top}
sources:
  - name: billing
{source_extra}    sinks:
      - {sink}
"
    )
    .replace("DATA", &data.to_string())
}

/// Runs check-config and serve on `yaml`: both must fail and print `expected`.
fn refused(yaml: &str, dir: &Path, expected: &str) {
    let file = dir.join("bad.yaml");
    std::fs::write(&file, yaml).expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(!status.success(), "check-config accepted:\n{yaml}\n{out}");
    assert!(
        out.contains(expected),
        "check-config output lacks\n  {expected}\ngot:\n{out}\n---\n{yaml}"
    );
    let (status, out) = run_cli(
        &[
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
        dir,
    );
    assert!(!status.success(), "serve started on:\n{yaml}\n{out}");
    assert!(
        out.contains(expected),
        "serve output lacks\n  {expected}\ngot:\n{out}\n---\n{yaml}"
    );
    assert!(
        !dir.join("data").exists(),
        "serve created the data_dir of an invalid config:\n{yaml}"
    );
}

fn prefix(kind: &str, option: &str) -> String {
    format!("source \"billing\", sink \"orders\" ({kind}): option \"{option}\": ")
}

#[test]
fn ordered_sink_rejections_name_source_sink_and_option() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut cases = 0;
    for kind in ["http", "file"] {
        let b = base(kind);
        // ordered with a plain string key.
        refused(
            &yaml(
                dir,
                "",
                "",
                &format!(
                    "{{type: {kind}, name: orders, {b}, ordered: true, ordering_key: x-entity-id}}"
                ),
            ),
            dir,
            &format!(
                "{}\"x-entity-id\" is a plain string; an ordered sink takes {{header: NAME}} or {{json: a.b.c}} (YAML cannot express a function key)",
                prefix(kind, "ordering_key")
            ),
        );
        cases += 1;
        // ordering_key without ordered (absent or false), in every form.
        for ordered in ["", "ordered: false, "] {
            for key in [
                "{header: x-entity-id}",
                "{json: data.object.customer}",
                "cust",
            ] {
                refused(
                    &yaml(
                        dir,
                        "",
                        "",
                        &format!(
                            "{{type: {kind}, name: orders, {b}, {ordered}ordering_key: {key}}}"
                        ),
                    ),
                    dir,
                    &format!(
                        "{}requires ordered: true (only a pubsub sink takes an ordering_key without it)",
                        prefix(kind, "ordering_key")
                    ),
                );
                cases += 1;
            }
        }
        // The other rejected forms of an ordered sink's key, and of ordered.
        for (key, message) in [
            (
                "[x-entity-id]",
                "place 0: \"x-entity-id\" is a plain string; an ordered sink takes {header: NAME} or {json: a.b.c} (YAML cannot express a function key)",
            ),
            (
                "{header: x-entity-id, json: data.id}",
                "must be {header: NAME} or {json: a.b.c}, found a map",
            ),
            (
                "{header: 'x entity'}",
                "\"x entity\" is not a valid HTTP header name",
            ),
            (
                "{json: 'data..customer'}",
                "\"data..customer\" is not a JSON dot path: write member names separated by dots, e.g. data.object.customer",
            ),
        ] {
            refused(
                &yaml(
                    dir,
                    "",
                    "",
                    &format!(
                        "{{type: {kind}, name: orders, {b}, ordered: true, ordering_key: {key}}}"
                    ),
                ),
                dir,
                &format!("{}{message}", prefix(kind, "ordering_key")),
            );
            cases += 1;
        }
        refused(
            &yaml(
                dir,
                "",
                "",
                &format!("{{type: {kind}, name: orders, {b}, ordered: 'yes'}}"),
            ),
            dir,
            &format!(
                "{}must be true or false, found \"yes\"",
                prefix(kind, "ordered")
            ),
        );
        cases += 1;
        // An ordering header the store would not keep (ADR 0004 section 2).
        let ordered = format!(
            "{{type: {kind}, name: orders, {b}, ordered: true, ordering_key: {{header: X-Entity-Id}}}}"
        );
        for (top, extra, whose, action) in [
            (
                "store_headers:\n  headers:\n    x-entity-id: drop",
                "",
                "the instance store_headers policy",
                "drops",
            ),
            (
                "store_headers:\n  default: hash",
                "",
                "the instance store_headers policy",
                "hashes",
            ),
            (
                "",
                "    store_headers:\n      headers:\n        X-ENTITY-ID: hash\n",
                "the source's store_headers override",
                "hashes",
            ),
            (
                "",
                "    store_headers:\n      default: drop\n",
                "the source's store_headers override",
                "drops",
            ),
        ] {
            refused(
                &yaml(dir, top, extra, &ordered),
                dir,
                &format!(
                    "{}header \"x-entity-id\" is not kept by the store: {whose} {action} it, so a replay could not resolve the same key (docs/adr-0004-ordering-lanes.md section 2); set store_headers headers.x-entity-id: keep",
                    prefix(kind, "ordering_key")
                ),
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 2 * (1 + 6 + 4 + 1 + 4));
}

#[test]
fn every_problem_of_a_file_is_listed_and_a_valid_file_passes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let data = dir.join("data");
    let bad = format!(
        "node: {{data_dir: '{d}'}}
sources:
  - name: billing
    sinks:
      - {{type: http, name: a, url: 'http://127.0.0.1:9/x', ordering_key: {{header: k}}}}
      - {{type: file, name: c, path: '{d}.x', ordered: true, ordering_key: k}}
      - {{type: redis, name: r, url: 'http://127.0.0.1:6379', stream: s}}
  - name: events
    tenant: nobody
    sinks:
      - {{type: kafka, name: k, brokers: '127.0.0.1:9092', topic: t, lingr_ms: 5}}
",
        d = data.display()
    );
    let file = dir.join("bad.yaml");
    std::fs::write(&file, &bad).expect("write");
    // The configuration's own problems and those of the sink adapters (redis,
    // kafka), in one run, in file order.
    for args in [
        vec![OsStr::new("check-config"), file.as_os_str()],
        vec![
            OsStr::new("serve"),
            OsStr::new("--config"),
            file.as_os_str(),
        ],
    ] {
        let (status, out) = run_cli(&args, dir);
        assert!(!status.success(), "{args:?}: {out}");
        assert!(out.contains("5 problems in the config:"), "{args:?}: {out}");
        let expected = [
            "source \"billing\", sink \"a\" (http): option \"ordering_key\": requires ordered: true",
            "source \"billing\", sink \"c\" (file): option \"ordering_key\": \"k\" is a plain string",
            "source \"billing\", sink \"r\" (redis): option \"url\": ",
            "source \"events\": option \"tenant\": unknown tenant \"nobody\"",
            "source \"events\", sink \"k\" (kafka): option \"lingr_ms\": unknown option of a kafka sink (its options: brokers, topic, key, timeout_ms, properties, forward_headers; every sink: type, name, ordered, ordering_key, paused, retry, filter, rate_limit, transform, auto_pause_after_ms, dead_letter)",
        ];
        let mut at = 0;
        for e in expected {
            let i = out[at..]
                .find(e)
                .unwrap_or_else(|| panic!("{args:?}: lacks (or out of order) {e}\n{out}"));
            at += i + e.len();
        }
    }
    assert!(!data.exists());

    let good = format!(
        "node: {{data_dir: '{d}'}}
sources:
  - name: billing
    sinks:
      - {{type: http, name: a, url: 'http://127.0.0.1:9/x', ordered: true, ordering_key: {{header: X-Entity-Id}}}}
      - {{type: file, name: c, path: '{d}.x', ordered: true, ordering_key: {{json: data.object.customer}}}}
      - {{type: file, name: d, path: '{d}.y', ordered: true}}
",
        d = data.display()
    );
    std::fs::write(&file, &good).expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(status.success(), "{out}");
    assert!(out.contains(": ok (1 source, 1 tenant)"), "{out}");
}

/// Every problem of every sink adapter in one `check-config` run: sinks of
/// each broker kind (and http) with several mistakes each, every one a line
/// naming the source, the sink and the option (`properties.<name>` for one
/// Kafka property), unknown options listing the sink's options.
#[test]
fn every_problem_of_every_sink_is_listed_in_one_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let data = dir.join("data");
    let bad = format!(
        r#"node: {{data_dir: '{d}'}}
sources:
  - name: billing
    sinks:
      - {{type: redis, name: r, url: 'http://x', stream: '', strem: 1}}
      - {{type: nats, name: n, url: 'http://x', subject: 'a.*', mode: bogus}}
      - {{type: rabbitmq, name: q, url: 'amqp://127.0.0.1', exchange: x, declare: {{type: bogus, durable: maybe}}, mandatory: 'no'}}
      - {{type: http, name: h, url: 'http://127.0.0.1:9/x', headers: {{x-a: "a\x01b", x-b: "c\x01d"}}, retry_statuses: [500]}}
  - name: events
    sinks:
      - {{type: kafka, name: k, brokers: '127.0.0.1:9092', topic: t, lingr_ms: 5, properties: {{linger.ms: abc, no.such.property: 1, acks: '0'}}}}
      - {{type: sqs, name: s, queue_url: 'https://sqs.eu-west-1.amazonaws.com/1/q', body_encoding: hex, region: EU, visibility: 3}}
      - {{type: pubsub, name: p, project: 'a/b', topic: google-x, timeout_ms: 0}}
"#,
        d = data.display()
    );
    let file = dir.join("bad.yaml");
    std::fs::write(&file, &bad).expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(!status.success(), "{out}");
    let every = "every sink: type, name, ordered, ordering_key, paused, retry, filter, rate_limit, transform, auto_pause_after_ms, dead_letter";
    let expected = [
        "source \"billing\", sink \"r\" (redis): option \"stream\": must not be empty".to_owned(),
        format!("source \"billing\", sink \"r\" (redis): option \"strem\": unknown option of a redis sink (its options: url, mode, stream, channel, maxlen, timeout_ms, forward_headers; {every})"),
        "source \"billing\", sink \"r\" (redis): option \"url\": `http://x` is not a redis:// URL".to_owned(),
        "source \"billing\", sink \"n\" (nats): option \"mode\": `bogus` is not `jetstream` or `core`".to_owned(),
        "source \"billing\", sink \"n\" (nats): option \"subject\": `a.*` has the wildcard `*`".to_owned(),
        "source \"billing\", sink \"n\" (nats): option \"url\": must be a nats:// or tls:// URL".to_owned(),
        "source \"billing\", sink \"q\" (rabbitmq): option \"declare.durable\": must be true or false".to_owned(),
        "source \"billing\", sink \"q\" (rabbitmq): option \"declare.type\": `bogus` is not direct, topic, fanout or headers".to_owned(),
        "source \"billing\", sink \"q\" (rabbitmq): option \"mandatory\": must be true or false".to_owned(),
        "source \"billing\", sink \"h\" (http): option \"headers.x-a\": is not a valid header value (control character)".to_owned(),
        "source \"billing\", sink \"h\" (http): option \"headers.x-b\": is not a valid header value (control character)".to_owned(),
        // A retry option beside `type` names where it belongs.
        "source \"billing\", sink \"h\" (http): option \"retry_statuses\": unknown option of a http sink: `retry_statuses` is an option of the entry's `retry:` (write `retry: {retry_statuses: ...}`)".to_owned(),
        format!("source \"events\", sink \"k\" (kafka): option \"lingr_ms\": unknown option of a kafka sink (its options: brokers, topic, key, timeout_ms, properties, forward_headers; {every})"),
        "source \"events\", sink \"k\" (kafka): option \"properties.acks\": cannot be set".to_owned(),
        "source \"events\", sink \"k\" (kafka): option \"properties.linger.ms\": ".to_owned(),
        "source \"events\", sink \"k\" (kafka): option \"properties.no.such.property\": ".to_owned(),
        "source \"events\", sink \"s\" (sqs): option \"body_encoding\": `hex` is not `raw` or `base64`".to_owned(),
        "source \"events\", sink \"s\" (sqs): option \"region\": `EU` is not a region name".to_owned(),
        format!("source \"events\", sink \"s\" (sqs): option \"visibility\": unknown option of a sqs sink (its options: queue_url, region, endpoint_url, timeout_ms, body_encoding, max_message_bytes, forward_headers; {every})"),
        "source \"events\", sink \"p\" (pubsub): option \"project\": `a/b` has `/`".to_owned(),
        "source \"events\", sink \"p\" (pubsub): option \"timeout_ms\": must be more than 0".to_owned(),
        "source \"events\", sink \"p\" (pubsub): option \"topic\": must not start with `goog`".to_owned(),
    ];
    for e in &expected {
        assert!(out.contains(e.as_str()), "lacks {e}\n{out}");
    }
    assert!(
        out.contains(&format!("{} problems in the config:", expected.len())),
        "{out}"
    );
    assert!(!data.exists());
}

#[test]
fn redis_sinks_are_checked_by_their_adapter() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // A bad URL and a placeholder the template does not know: each named.
    for (sink, expected) in [
        (
            "{type: redis, name: orders, url: 'http://127.0.0.1:6379', stream: s}",
            "source \"billing\", sink \"orders\" (redis): option \"url\": ",
        ),
        (
            "{type: redis, name: orders, url: 'redis://127.0.0.1:6379', stream: 'h:{tenat}'}",
            "source \"billing\", sink \"orders\" (redis): option \"stream\": ",
        ),
        (
            "{type: redis, name: orders, url: 'redis://127.0.0.1:6379', mode: publish, channel: c, maxlen: 10}",
            "source \"billing\", sink \"orders\" (redis): option \"maxlen\": ",
        ),
    ] {
        refused(&yaml(dir, "", "", sink), dir, expected);
    }
    // A valid one, ordered, passes check-config (no connection is made).
    let file = dir.join("good.yaml");
    std::fs::write(
        &file,
        yaml(
            dir,
            "",
            "",
            "{type: redis, name: orders, url: 'redis://127.0.0.1:6379', stream: 'h:{tenant}:{source}', maxlen: 1000, ordered: true, ordering_key: {json: data.object.customer}}",
        ),
    )
    .expect("write");
    let (status, out) = run_cli(&[OsStr::new("check-config"), file.as_os_str()], dir);
    assert!(status.success(), "{out}");
}

/// A file sink whose path is a directory is refused by check-config (it used
/// to pass, and serve failed only after creating the store).
#[test]
fn a_file_sink_path_that_is_a_directory_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let taken = dir.join("out");
    std::fs::create_dir(&taken).expect("mkdir");
    let sink = format!("{{type: file, name: orders, path: '{}'}}", taken.display());
    refused(
        &yaml(dir, "", "", &sink),
        dir,
        &format!(
            "{}{} is a directory, not a file",
            prefix("file", "path"),
            taken.display()
        ),
    );
}

/// An option above its upper bound (docs/design.md section 7) is refused by
/// check-config and serve, naming it (a flush interval and an http timeout of
/// 2^64-1 ms: the first passed and stopped all delivery and SIGTERM).
#[test]
fn options_above_their_bound_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let max = u64::MAX;
    refused(
        &yaml(
            dir,
            &format!("dispatch: {{flush_interval_ms: {max}}}"),
            "",
            "{type: http, name: orders, url: 'http://127.0.0.1:9/hooks'}",
        ),
        dir,
        &format!("dispatch: option \"flush_interval_ms\": {max} is above its upper bound, 10000"),
    );
    refused(
        &yaml(
            dir,
            "",
            "",
            &format!(
                "{{type: http, name: orders, url: 'http://127.0.0.1:9/hooks', timeout_ms: {max}}}"
            ),
        ),
        dir,
        &format!(
            "{}{max} is above its upper bound, 600000",
            prefix("http", "timeout_ms")
        ),
    );
    refused(
        &yaml(
            dir,
            "",
            "",
            "{type: redis, name: orders, url: 'redis://127.0.0.1:6379', stream: s, timeout_ms: 600001}",
        ),
        dir,
        &format!(
            "{}600001 is above its upper bound, 600000",
            prefix("redis", "timeout_ms")
        ),
    );
}

/// A file sink writing into the data_dir (there, its first delivery once
/// replaced RocksDB's CURRENT) is refused by check-config and serve, directly,
/// through `..` and through a symlink.
#[test]
fn a_file_sink_inside_the_data_dir_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonicalize");
    let data = dir.join("data");
    let link = dir.join("link");
    std::os::unix::fs::symlink(&data, &link).expect("symlink");
    for path in [
        format!("{}/store-rocksdb/CURRENT", data.display()),
        format!("{}/other/../data/out.ndjson", dir.display()),
        format!("{}/store-rocksdb/CURRENT", link.display()),
    ] {
        refused(
            &yaml(
                &dir,
                "",
                "",
                &format!("{{type: file, name: orders, path: '{path}'}}"),
            ),
            &dir,
            &format!(
                "{}\"{path}\" is inside node.data_dir (\"{}\"), where the store keeps its files",
                prefix("file", "path"),
                data.display()
            ),
        );
    }
}

/// A data_dir that exists as a file is refused at load (serve used to fail only
/// when it opened the store).
#[test]
fn a_data_dir_that_is_a_file_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let file = dir.join("data");
    std::fs::write(&file, b"x").expect("write");
    let yaml = yaml(
        dir,
        "",
        "",
        "{type: http, name: orders, url: 'http://127.0.0.1:9/hooks'}",
    );
    let path = dir.join("bad.yaml");
    std::fs::write(&path, &yaml).expect("write");
    let expected = format!(
        "node: option \"data_dir\": \"{}\" exists and is not a directory",
        file.display()
    );
    for args in [
        vec![OsStr::new("check-config"), path.as_os_str()],
        vec![
            OsStr::new("serve"),
            OsStr::new("--config"),
            path.as_os_str(),
        ],
    ] {
        let (status, out) = run_cli(&args, dir);
        assert!(!status.success(), "{args:?} accepted:\n{out}");
        assert!(
            out.contains(&expected),
            "{args:?}: lacks\n  {expected}\ngot:\n{out}"
        );
    }
    assert!(file.is_file());
}
