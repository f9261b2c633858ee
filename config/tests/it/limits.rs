//! The configuration's limits (docs/design.md section 7): every numeric option
//! has an upper bound, checked at load (accepted at the bound, refused by name
//! above it); no sink path lies inside `node.data_dir`; a data_dir that is a
//! file is refused; an `env:` value never appears in an error.

use std::path::{Path, PathBuf};

use ankusa_config::limits as max;
use ankusa_config::{Config, ConfigError, TypedOptions};

use crate::helpers::{load, load_env, ok, one, problems};

const FILE: &str = "{type: file, path: x}";

/// One bounded option: the YAML that sets it to `N`, the scope and option an
/// error names, and its bound.
struct Bounded {
    yaml: &'static str,
    scope: &'static str,
    option: &'static str,
    limit: u64,
}

fn sink_src(sink: &str) -> String {
    format!("sources:\n  - name: stripe\n    sinks:\n      - {sink}\n")
}

fn table() -> Vec<Bounded> {
    let b = |yaml, scope, option, limit| Bounded {
        yaml,
        scope,
        option,
        limit,
    };
    let u = u64::from;
    vec![
        b(
            "node: {max_pending: N}",
            "node",
            "max_pending",
            max::MAX_PENDING,
        ),
        b(
            "node: {max_pending_bytes: N}",
            "node",
            "max_pending_bytes",
            max::MAX_PENDING_BYTES,
        ),
        b(
            "node: {attempt_log: {max_attempts: N}}",
            "node",
            "attempt_log.max_attempts",
            u(max::ATTEMPT_LOG_MAX_ATTEMPTS),
        ),
        b(
            "node: {attempt_log: {max_body_bytes: N}}",
            "node",
            "attempt_log.max_body_bytes",
            u(max::ATTEMPT_LOG_MAX_BODY_BYTES),
        ),
        b(
            "listeners: {body_limit_bytes: N}",
            "listeners",
            "body_limit_bytes",
            max::BODY_LIMIT_BYTES,
        ),
        b(
            "listeners: {body_budget_bytes: N}",
            "listeners",
            "body_budget_bytes",
            max::BODY_BUDGET_BYTES,
        ),
        b("dispatch: {batch: N}", "dispatch", "batch", u(max::BATCH)),
        b(
            "dispatch: {sink_concurrency: N}",
            "dispatch",
            "sink_concurrency",
            u(max::SINK_CONCURRENCY),
        ),
        b(
            "dispatch: {pipelined_concurrency: N}",
            "dispatch",
            "pipelined_concurrency",
            u(max::PIPELINED_CONCURRENCY),
        ),
        b(
            "dispatch: {admission_window: N}",
            "dispatch",
            "admission_window",
            u(max::ADMISSION_WINDOW),
        ),
        b(
            "dispatch: {admission_window_bytes: N}",
            "dispatch",
            "admission_window_bytes",
            max::ADMISSION_WINDOW_BYTES,
        ),
        b(
            "dispatch: {flush_interval_ms: N}",
            "dispatch",
            "flush_interval_ms",
            max::FLUSH_INTERVAL_MS,
        ),
        b("retry: {max_ms: N}", "retry", "max_ms", max::RETRY_MS),
        b(
            "retry: {max_elapsed_ms: N}",
            "retry",
            "max_elapsed_ms",
            max::RETRY_MS,
        ),
        b(
            "retry: {retry_after_max_ms: N}",
            "retry",
            "retry_after_max_ms",
            max::RETRY_MS,
        ),
        b(
            "retry: {base_ms: N, max_ms: 31536000000}",
            "retry",
            "base_ms",
            max::RETRY_MS,
        ),
        b(
            "breaker: {failures: N}",
            "breaker",
            "failures",
            u(max::BREAKER_FAILURES),
        ),
        b(
            "breaker: {failures: 1000000, distinct: N}",
            "breaker",
            "distinct",
            u(max::BREAKER_FAILURES),
        ),
        b(
            "breaker: {open_ms: N}",
            "breaker",
            "open_ms",
            max::BREAKER_OPEN_MS,
        ),
        b(
            "retention: {keep_ms: N}",
            "retention",
            "keep_ms",
            max::RETENTION_KEEP_MS,
        ),
        b(
            "retention: {interval_ms: N}",
            "retention",
            "interval_ms",
            max::RETENTION_INTERVAL_MS,
        ),
        b(
            "tenants: [{name: default, max_pending: N}]",
            "tenant \"default\"",
            "max_pending",
            max::MAX_PENDING,
        ),
        b(
            "tenants: [{name: default, max_pending_bytes: N}]",
            "tenant \"default\"",
            "max_pending_bytes",
            max::MAX_PENDING_BYTES,
        ),
        b(
            "sources:\n  - name: stripe\n    dedupe: {header: x-id, ttl_ms: N}\n    sinks: [{type: file, path: x}]",
            "source \"stripe\"",
            "dedupe.ttl_ms",
            max::DEDUPE_TTL_MS,
        ),
        b(
            "sources:\n  - name: stripe\n    verification: {type: stripe, secrets: [whsec_x], tolerance_ms: N}\n    sinks: [{type: file, path: x}]",
            "source \"stripe\"",
            "verification.tolerance_ms",
            max::TOLERANCE_MS,
        ),
    ]
}

/// The per-sink options: (kind, the rest of the entry, option, bound).
fn sink_table() -> Vec<(&'static str, &'static str, &'static str, u64)> {
    let t = max::SINK_TIMEOUT_MS;
    vec![
        (
            "http",
            "url: 'http://127.0.0.1:9/x', timeout_ms: N",
            "timeout_ms",
            t,
        ),
        (
            "sqs",
            "queue_url: 'https://q/1/q', timeout_ms: N",
            "timeout_ms",
            t,
        ),
        (
            "sqs",
            "queue_url: 'https://q/1/q', max_message_bytes: N",
            "max_message_bytes",
            max::SQS_MAX_MESSAGE_BYTES,
        ),
        (
            "pubsub",
            "project: p, topic: t, timeout_ms: N",
            "timeout_ms",
            t,
        ),
        (
            "kafka",
            "brokers: 'h:9092', topic: t, timeout_ms: N",
            "timeout_ms",
            t,
        ),
        (
            "nats",
            "url: 'nats://h:4222', subject: s, timeout_ms: N",
            "timeout_ms",
            t,
        ),
        (
            "redis",
            "url: 'redis://h:6379', stream: s, timeout_ms: N",
            "timeout_ms",
            t,
        ),
        (
            "redis",
            "url: 'redis://h:6379', stream: s, maxlen: N",
            "maxlen",
            max::REDIS_MAXLEN,
        ),
        (
            "rabbitmq",
            "url: 'amqp://h:5672/%2f', exchange: e, timeout_ms: N",
            "timeout_ms",
            t,
        ),
        (
            "http",
            "url: 'http://127.0.0.1:9/x', retry: {max_elapsed_ms: N}",
            "retry.max_elapsed_ms",
            max::RETRY_MS,
        ),
        (
            "http",
            "url: 'http://127.0.0.1:9/x', retry: {max_elapsed_ms: 31536000000, grace_ms: N}",
            "retry.grace_ms",
            max::RETRY_MS,
        ),
        (
            "http",
            "url: 'http://127.0.0.1:9/x', rate_limit: {per_second: 1, burst: N}",
            "rate_limit.burst",
            1_000_000,
        ),
    ]
}

/// Accepted at `limit`; above it (by one, and at 2^64-1) refused, each
/// problem naming `scope` and `option`, one of them the value.
fn check_bound(yaml: &str, scope: &str, option: &str, limit: u64) {
    let at = yaml.replace('N', &limit.to_string());
    if let Err(e) = load(&at) {
        panic!("{scope} {option} refused at its bound {limit}: {e}\n---\n{at}");
    }
    for over in [limit + 1, u64::MAX] {
        let text = yaml.replace('N', &over.to_string());
        // A u32 option refuses 2^64-1 as it parses, naming the option.
        if let Err(ConfigError::Yaml { message, .. }) = load(&text) {
            let last = option.rsplit('.').next().unwrap_or(option);
            assert!(
                over == u64::MAX && message.contains(last) && message.contains("u32"),
                "{message}"
            );
            continue;
        }
        let got = problems(load(&text));
        let named = format!("{scope}: option \"{option}\": ");
        assert!(
            got.iter().all(|p| p.starts_with(&named)),
            "{over} for {option}: a problem not naming {named}: {got:#?}"
        );
        assert!(
            got.iter().any(|p| p.contains(&over.to_string())),
            "{over} for {option}: no problem names the value: {got:#?}"
        );
    }
}

#[test]
fn every_bounded_option_is_refused_by_name_above_its_bound_and_accepted_at_it() {
    let mut n = 0;
    for b in table() {
        check_bound(b.yaml, b.scope, b.option, b.limit);
        n += 1;
    }
    for (kind, rest, option, limit) in sink_table() {
        let yaml = sink_src(&format!("{{type: {kind}, name: s, {rest}}}"));
        check_bound(
            &yaml,
            &format!("source \"stripe\", sink \"s\" ({kind})"),
            option,
            limit,
        );
        n += 1;
    }
    assert_eq!(n, 37);
}

#[test]
fn a_flush_interval_and_an_http_timeout_of_u64_max_are_refused_with_the_bound() {
    assert_eq!(
        one("dispatch: {flush_interval_ms: 18446744073709551615}"),
        "dispatch: option \"flush_interval_ms\": 18446744073709551615 is above its upper bound, \
         10000 (config/ankusa.example.yaml lists every bound)"
    );
    assert_eq!(
        one(&sink_src(
            "{type: http, name: web, url: 'http://h/', timeout_ms: 18446744073709551615}"
        )),
        "source \"stripe\", sink \"web\" (http): option \"timeout_ms\": 18446744073709551615 is above \
         its upper bound, 600000 (config/ankusa.example.yaml lists every bound)"
    );
    // 0 stays the default: flush at once.
    assert_eq!(
        ok("dispatch: {flush_interval_ms: 0}")
            .dispatch
            .flush_interval_ms,
        0
    );
    let c = ok(&sink_src(
        "{type: http, name: web, url: 'http://h/', timeout_ms: 600000}",
    ));
    match &c.sources[0].sinks[0].typed {
        TypedOptions::Http(h) => assert_eq!(h.timeout_ms, 600_000),
        other => panic!("not an http sink: {other:?}"),
    }
}

/// A fresh directory under the system's temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("ankusa-config-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        Scratch(dir.canonicalize().expect("canonicalize"))
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn with_data_dir(data: &Path, sink: &str) -> String {
    format!(
        "node: {{data_dir: '{}'}}\nsources:\n  - name: stripe\n    sinks:\n      - {sink}\n",
        data.display()
    )
}

#[test]
fn a_sink_path_inside_the_data_dir_is_refused_direct_via_dotdot_and_via_a_symlink() {
    let s = Scratch::new("paths");
    let data = s.path().join("data");
    std::fs::create_dir_all(data.join("store-rocksdb")).expect("mkdir");
    let link = s.path().join("link");
    std::os::unix::fs::symlink(&data, &link).expect("symlink");
    let refused = |path: String, data_dir: &Path| {
        let yaml = with_data_dir(
            data_dir,
            &format!("{{type: file, name: out, path: '{path}'}}"),
        );
        assert_eq!(
            one(&yaml),
            format!(
                "source \"stripe\", sink \"out\" (file): option \"path\": \"{path}\" is inside node.data_dir (\"{}\"), \
                 where the store keeps its files: name a path outside it",
                data_dir.display()
            ),
            "{yaml}"
        );
    };
    let d = data.display();
    // Direct, the store's own file, one not yet there, and a missing subdirectory.
    refused(format!("{d}/store-rocksdb/CURRENT"), &data);
    refused(format!("{d}/deliveries.ndjson"), &data);
    refused(format!("{d}/new/dir/out.ndjson"), &data);
    // Through `..` and `.`.
    refused(
        format!("{}/other/../data/./CURRENT", s.path().display()),
        &data,
    );
    // Through a symlink to the data dir, and the data dir given through one.
    refused(format!("{}/store-rocksdb/CURRENT", link.display()), &data);
    refused(format!("{d}/CURRENT"), &link);
    // A symlink to a data_dir not made yet (a dangling link) is followed too.
    let later_link = s.path().join("later-link");
    std::os::unix::fs::symlink(s.path().join("not-yet"), &later_link).expect("symlink");
    refused(
        format!("{}/CURRENT", later_link.display()),
        &s.path().join("not-yet"),
    );
    // A data_dir that does not exist yet, given with `..`.
    let later = s.path().join("later");
    refused(
        format!("{}/x.ndjson", later.display()),
        &s.path().join("sub/../later"),
    );

    // Beside it is fine, as is a name that only begins like it.
    for path in [
        format!("{}/out.ndjson", s.path().display()),
        format!("{d}-out.ndjson"),
        format!("{d}/../out.ndjson"),
    ] {
        let c = ok(&with_data_dir(
            &data,
            &format!("{{type: file, name: out, path: '{path}'}}"),
        ));
        assert_eq!(c.sources[0].sinks[0].name, "out");
    }
}

/// The new user's report: one mistyped `node` option (`store: rocks`) made
/// the node section fall back to its defaults, so the file sinks under the
/// default `./data` were refused as inside node.data_dir: one typo, three
/// problems. The section's other options are kept: one typo, one problem.
#[test]
fn one_bad_node_option_is_one_problem_not_a_default_data_dir_as_well() {
    let yaml = "node: {data_dir: ./relay-data, store: rocks}\nsources:\n  - name: stripe\n    sinks:\n      - {type: file, name: out, path: ./data/stripe.ndjson}\n";
    let err = load(yaml).expect_err("store: rocks").to_string();
    assert!(err.contains("node.store: unknown variant `rocks`"), "{err}");
    assert!(!err.contains("data_dir"), "one typo, one problem: {err}");
    // With the data_dir that the file names, the path check still runs.
    let inside = "node: {data_dir: ./data, store: rocks}\nsources:\n  - name: stripe\n    sinks:\n      - {type: file, name: out, path: ./data/stripe.ndjson}\n";
    let all = problems(load(inside));
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all[1].contains("is inside node.data_dir (\"./data\")"),
        "{all:?}"
    );
}

#[test]
fn a_pubsub_credentials_file_inside_the_data_dir_is_refused() {
    let s = Scratch::new("creds");
    let data = s.path().join("data");
    let yaml = with_data_dir(
        &data,
        &format!(
            "{{type: pubsub, name: ps, project: p, topic: t, credentials: '{}/sa.json'}}",
            data.display()
        ),
    );
    assert_eq!(
        one(&yaml),
        format!(
            "source \"stripe\", sink \"ps\" (pubsub): option \"credentials\": \"{d}/sa.json\" is inside node.data_dir (\"{d}\"), \
             where the store keeps its files: name a path outside it",
            d = data.display()
        )
    );
}

/// An http sink's `tls` files are paths of a sink too: each one inside the
/// data dir is refused by its name, one outside it is fine.
#[test]
fn tls_files_inside_the_data_dir_are_refused() {
    let s = Scratch::new("tls");
    let data = s.path().join("data");
    let d = data.display();
    let outside = s.path().join("ca.pem");
    let yaml = with_data_dir(
        &data,
        &format!(
            "{{type: http, name: h, url: 'https://h/', tls: {{client_cert: '{d}/relay.crt', client_key: '{d}/../data/relay.key', ca: '{}'}}}}",
            outside.display()
        ),
    );
    let inside = |option: &str, path: String| {
        format!(
            "source \"stripe\", sink \"h\" (http): option \"{option}\": \"{path}\" is inside node.data_dir (\"{d}\"), \
             where the store keeps its files: name a path outside it"
        )
    };
    assert_eq!(
        problems(load(&yaml)),
        [
            inside("tls.client_cert", format!("{d}/relay.crt")),
            inside("tls.client_key", format!("{d}/../data/relay.key")),
        ]
    );
}

#[test]
fn a_data_dir_that_is_a_file_is_refused() {
    let s = Scratch::new("datafile");
    let file = s.path().join("data");
    std::fs::write(&file, b"not a directory").expect("write");
    let yaml = format!(
        "node: {{data_dir: '{}'}}\nsources:\n  - name: a\n    sinks: [{FILE}]\n",
        file.display()
    );
    assert_eq!(
        one(&yaml),
        format!(
            "node: option \"data_dir\": \"{}\" exists and is not a directory: name a directory (it is created when missing)",
            file.display()
        )
    );
    // A directory, or one that does not exist yet, is fine.
    let c: Config = ok(&format!("node: {{data_dir: '{}'}}\n", s.path().display()));
    assert_eq!(c.node.data_dir, s.path());
    ok(&format!(
        "node: {{data_dir: '{}/new'}}\n",
        s.path().display()
    ));
}

#[test]
fn an_invalid_env_value_is_never_echoed() {
    let secret = "s3cr3t-v4lue-not-a-url";
    // An http sink's url, an sqs queue_url, a timeout: each refused naming
    // the variable.
    let yaml = "sources:\n  - name: stripe\n    sinks:\n      - {type: http, name: web, url: 'env:HOOK_URL', timeout_ms: 'env:T'}\n";
    let got = problems(load_env(yaml, &[("HOOK_URL", secret), ("T", "abc")]));
    let all = got.join("\n");
    assert!(!all.contains(secret), "{all}");
    assert!(!all.contains("abc"), "{all}");
    assert_eq!(
        got,
        [
            "source \"stripe\", sink \"web\" (http): option \"url\": the value of env:HOOK_URL is not an http:// or https:// URL",
            "source \"stripe\", sink \"web\" (http): option \"timeout_ms\": must be a whole number of milliseconds above 0, found the value of env:T",
        ]
    );
    // A URL with credentials: neither the redacted form nor the whole value.
    let url = "http://user:pa55word@h.example/x y?token=tok123456";
    let got = problems(load_env(
        "sources:\n  - name: stripe\n    sinks:\n      - {type: http, name: web, url: 'env:HOOK_URL'}\n",
        &[("HOOK_URL", url)],
    ));
    assert_eq!(
        got,
        [
            "source \"stripe\", sink \"web\" (http): option \"url\": the value of env:HOOK_URL contains whitespace"
        ]
    );
}

#[test]
fn a_url_in_an_error_has_no_credentials_or_secret_parameters() {
    let got = one(&sink_src(
        "{type: http, name: web, url: 'ftp://u:pa55@h/x?token=t0k3n&v=1'}",
    ));
    assert_eq!(
        got,
        "source \"stripe\", sink \"web\" (http): option \"url\": \"ftp://u:***@h/x?token=***&v=1\" is not an http:// or https:// URL"
    );
}

/// `node.attempt_log.max_body_bytes: 0` keeps no body: accepted (the only
/// bounded option where 0 means something); `max_attempts: 0` is refused;
/// `enabled: false` loads.
#[test]
fn an_attempt_log_keeping_no_body_loads_and_one_keeping_no_attempt_does_not() {
    let c = ok("node: {attempt_log: {enabled: false, max_body_bytes: 0}}\nsources: []\n");
    assert_eq!(
        c.node.attempt_log,
        ankusa_config::AttemptLog {
            enabled: false,
            max_attempts: 20,
            max_body_bytes: 0,
        }
    );
    assert_eq!(
        one("node: {attempt_log: {max_attempts: 0}}"),
        "node: option \"attempt_log.max_attempts\": must be greater than 0"
    );
}
