//! The YAML configuration of Ankusa (docs/design.md section 7): parsing, load-time
//! validation, and the typed model every other crate reads.
//!
//! # What it owns
//! - The file's schema: `node`, `listeners`, `store_headers`, `dispatch`,
//!   `retry`, `breaker`, `tenants`, `sources` (each source: path, tenant or
//!   TenantPath, verification, dedupe, store_headers override, sinks),
//!   `cluster`, `notify` (the relay's own notifications: [`Notify`]).
//!   `config/ankusa.example.yaml` documents every option, its default and its
//!   unit (durations end `_ms`, sizes `_bytes`).
//! - Validation: an invalid file never starts the node. Every problem found is
//!   reported, each naming the source, the sink and the option
//!   ([`Problem`]); an unknown option is an error naming it (serde's
//!   `deny_unknown_fields`), with its line and column.
//! - Every load-time rejection of ADR 0004 sections 1 and 2 (ordered sinks):
//!   `ordering_key` without `ordered: true` on any sink but `pubsub`; an
//!   ordering key of an ordered sink that is not `{header: NAME}` or
//!   `{json: a.b.c}` (a plain string is refused: YAML cannot express a
//!   function); `ordered: true` on an `sqs` sink whose `queue_url` does not end
//!   `.fifo`; a `{header}` key that the source's effective store_headers policy
//!   drops or hashes.
//! - Secrets written `env:NAME`, resolved at load through an injectable
//!   [`EnvLookup`]; an unset variable is a load error.
//! - The sink's own options: everything in a sink entry except the keys core
//!   reads (`type`, `name`, `ordered`, `ordering_key`), handed to the sink as
//!   [`SinkEntry::options`]. `http` and `file` options are checked here; the
//!   other kinds' sink crates check theirs when they are built.
//!
//! # What it does not do
//! No tokio, and no I/O beyond reading the file ([`Config::load`]) and the
//! environment. Paths (`data_dir`, a file sink's `path`) are not opened or
//! created here, and listener addresses are not bound.
//!
//! # Dependencies, and why
//! - `serde` (derive): the private raw structs the file is read into, with
//!   `deny_unknown_fields` so a typo is an error naming the option.
//! - `serde_yaml_ng`: the YAML parser. `serde_yaml` is deprecated (archived by
//!   its author); `serde_yaml_ng` is its maintained fork with the same API,
//!   and its errors carry the path, line and column of a mistake. Its
//!   `Mapping` carries a sink's own options to the sink unparsed.
//! - `serde_json`: [`SinkEntry::options_json`] gives those options as the
//!   JSON map the sinks crate builds its adapters from.
//! - `thiserror`: [`ConfigError`], the one error enum of this layer.
//!
//! # Decisions where the spec is silent
//! - `ordered: true` without `ordering_key` is allowed: every hook goes to the
//!   sink's keyless lane (ADR 0004 section 2, "No key → the sink's shared
//!   keyless lane"), so the sink is delivered strictly in commit order per
//!   tenant and source.
//! - A Pub/Sub `ordering_key` without `ordered: true` is the legacy form: YAML
//!   can only express its string form, which is kept in the sink's options.
//!   A `{header}`/`{json}` key there is refused (it needs `ordered: true`).
//! - A source's `store_headers` override replaces the instance policy whole;
//!   its omitted fields take their defaults (default action keep), not the
//!   instance's values.
//! - A source with neither `tenant` nor `tenant_path` belongs to the tenant
//!   named `default`, which must exist; `tenants` omitted is one tenant
//!   `default` with the default bounds.
//! - The admin token is optional only while the admin listener is on a
//!   loopback address. Listener addresses are IP:port (no name lookup at load).
//! - A source must have at least one sink; names of tenants, sources and
//!   sinks are 1-64 characters of `A-Z a-z 0-9 _ -`, starting with a letter or
//!   digit (they appear in URLs and the admin API).
//! - A path that is a TenantPath source's path plus one segment is refused:
//!   the two routes would overlap.
//! - `env:NAME` is resolved in every string of a sink's options, nested ones
//!   included, so sink crates never see a reference and an unset variable
//!   names the sink and option at load (inside a map option, by its whole
//!   path: `auth.basic.password`, `signing.secrets[1]`).
//! - An empty file (or comments only) is refused: it is most likely the wrong
//!   file. `sources: []` is a valid node with no sources (it still drains and
//!   serves the admin API).
//! - A node name may contain dots (a host name); other names may not.
//! - A Standard Webhooks secret must be base64 after its optional `whsec_`,
//!   so a mangled secret fails at load instead of answering 401 to every hook.
//! - YAML anchors and aliases work everywhere; `<<` merge keys only inside a
//!   sink entry (the other sections are typed and refuse unknown keys).
//! - A source may configure `challenge` (docs/design.md section 5's GET challenge):
//!   the query parameter the edge echoes back, and optionally a token that
//!   another query parameter must carry.
//! - `paused` (a source or a sink entry), `quarantine` and
//!   `on_invalid_signature` (a source) are core options: `paused` is removed
//!   from a sink's options like `ordered`. `on_invalid_signature: quarantine`
//!   on a source with `verification: none` is refused (no signature can fail).
//! - `retention.keep_ms` counts from a hook's receipt (the archive is by
//!   receipt time), not from its delivery.
//! - `notify` adds an internal tenant ([`NOTIFY_TENANT`]) and one internal
//!   source per destination to [`Config::tenants`] and [`Config::sources`],
//!   after the file's, so the store registers them and the pipeline delivers
//!   them like any other (docs/design.md section 5, "Notifications"). Their
//!   names start with `_`, which a configured name cannot ([`is_internal`]);
//!   the edge serves no route for them. `notify` with `cluster` is refused
//!   (planned, not built). A destination's `name` is required: its queued
//!   notifications follow it, as a sink entry's rows follow its name.
#![deny(missing_docs, clippy::unwrap_used)]

mod error;
mod model;
mod notify;
mod raw;
mod secret;
pub(crate) mod sink;
mod structural;
mod validate;

use std::collections::BTreeMap;
use std::path::Path;

pub use error::{ConfigError, Problem, Scope};
pub use model::RateLimit;
pub use model::{
    AttemptLog, Breaker, Challenge, Cluster, Config, DeadLetterLane, Dedupe, Dispatch, FileSink,
    FilterCondition, FilterTest, HeaderAction, HeaderPolicy, HmacAlgorithm, HttpSink, JsonPath,
    KeyFn, KeyFnInner, KeyInput, KeySource, Listeners, LogFormat, Node, OnInvalidSignature, Order,
    OrderingKey, Otel, Retention, Retry, SignatureEncoding, SinkEntry, SinkKind, SinkRetry, Source,
    StoreBackend, Tenant, TenantBinding, TypedOptions, Verification,
};
pub use notify::{
    NOTIFY_TENANT, Notify, NotifyDestination, NotifyEvent, NotifyFormat, is_internal,
    notify_source_name,
};
pub use secret::{
    EnvLookup, Secret, SecretOrigin, process_env, redact_url, resolve as resolve_secret,
    secret_param,
};
pub use sink::CORE_KEYS as SINK_CORE_KEYS;

/// A check the load runs on each source once it parsed, for what other layers
/// refuse (a sink adapter's options, what the edge cannot serve): the problems
/// it returns are reported with this crate's, in file order.
pub type SourceCheck<'a> = &'a dyn Fn(&Source) -> Vec<Problem>;

/// The embedded default configuration: what `ankusa serve` runs with no
/// `--config` (the demo of the README, "Set up"). RocksDB under `./data`,
/// ingest on 127.0.0.1:8080, admin on 127.0.0.1:8081, one tenant `default`, and
/// a source `demo` at `/hooks/demo` (no verification, dedupe on the
/// `webhook-id` header) delivering to the file sink `./deliveries.ndjson`
/// (outside the data dir: no sink path may lie inside it, docs/design.md
/// section 7), ordered by the `x-entity-id` header.
pub const DEFAULT_YAML: &str = include_str!("default.yaml");

/// The default of every option the file may omit, in the option's unit.
pub mod defaults {
    /// `node.name`.
    pub const NODE_NAME: &str = "ankusa";
    /// The most places an `ordering_key` list may try (ADR 0004 section 1):
    /// each is read from every hook at ingest.
    pub const ORDERING_KEY_PLACES: usize = 8;
    /// `node.data_dir`.
    pub const DATA_DIR: &str = "./data";
    /// `node.max_pending`.
    pub const NODE_MAX_PENDING: u64 = 1_000_000;
    /// `node.max_pending_bytes`: 1 GiB.
    pub const NODE_MAX_PENDING_BYTES: u64 = 1 << 30;
    /// `node.attempt_log.max_attempts`.
    pub const ATTEMPT_LOG_MAX_ATTEMPTS: u32 = 20;
    /// `node.attempt_log.max_body_bytes`: 4 KiB.
    pub const ATTEMPT_LOG_MAX_BODY_BYTES: u32 = 4096;
    /// `node.otel.filter`: the `ingest` and `delivery` spans (debug level,
    /// targets `ankusa_edge::...` and `ankusa_pipeline::...`).
    pub const OTEL_FILTER: &str = "ankusa=debug";
    /// `listeners.ingest`.
    pub const INGEST_ADDR: &str = "127.0.0.1:8080";
    /// `listeners.admin`.
    pub const ADMIN_ADDR: &str = "127.0.0.1:8081";
    /// `listeners.body_limit_bytes`: 25 MiB, GitHub's own cap on webhook
    /// payloads (the largest of the providers we know), so no real provider
    /// delivery is refused by default.
    pub const BODY_LIMIT_BYTES: u64 = 25 << 20;
    /// `listeners.body_budget_bytes`: 256 MiB of request bodies in memory at
    /// once, all ingest connections together (ten bodies of the default
    /// `body_limit_bytes`).
    pub const BODY_BUDGET_BYTES: u64 = 256 << 20;
    /// `dispatch.batch`.
    pub const BATCH: u32 = 64;
    /// `dispatch.sink_concurrency`.
    pub const SINK_CONCURRENCY: u32 = 8;
    /// `dispatch.pipelined_concurrency`.
    pub const PIPELINED_CONCURRENCY: u32 = 256;
    /// `dispatch.admission_window`.
    pub const ADMISSION_WINDOW: u32 = 1024;
    /// `dispatch.admission_window_bytes`: 64 MiB.
    pub const ADMISSION_WINDOW_BYTES: u64 = 64 << 20;
    /// `dispatch.flush_interval_ms`.
    pub const FLUSH_INTERVAL_MS: u64 = 0;
    /// `retry.base_ms`: 1 s.
    pub const RETRY_BASE_MS: u64 = 1_000;
    /// `retry.max_ms`: 10 min.
    pub const RETRY_MAX_MS: u64 = 600_000;
    /// `retry.max_elapsed_ms`: 24 h.
    pub const RETRY_MAX_ELAPSED_MS: u64 = 86_400_000;
    /// `breaker.failures`.
    pub const BREAKER_FAILURES: u32 = 5;
    /// `breaker.distinct`, at most: the default is min(this, `failures`).
    pub const BREAKER_DISTINCT: u32 = 3;
    /// `breaker.open_ms`: 30 s.
    pub const BREAKER_OPEN_MS: u64 = 30_000;
    /// `retention.keep_ms`: 7 days.
    pub const RETENTION_KEEP_MS: u64 = 7 * 24 * 3_600_000;
    /// `retention.interval_ms`: 60 s.
    pub const RETENTION_INTERVAL_MS: u64 = 60_000;
    /// The tenant of a source that names none, and the one tenant when
    /// `tenants` is omitted.
    pub const TENANT: &str = "default";
    /// `tenants[].max_pending`.
    pub const TENANT_MAX_PENDING: u64 = 100_000;
    /// `tenants[].max_pending_bytes`: 256 MiB.
    pub const TENANT_MAX_PENDING_BYTES: u64 = 256 << 20;
    /// `verification.tolerance_ms`: 300 s (docs/design.md section 10).
    pub const TOLERANCE_MS: u64 = 300_000;
    /// `dedupe.ttl_ms`: 72 h (Stripe retries a hook for up to three days).
    pub const DEDUPE_TTL_MS: u64 = 259_200_000;
    /// `timeout_ms` of an http sink: 10 s.
    pub const HTTP_TIMEOUT_MS: u64 = 10_000;
    /// `cluster.lease_ttl_ms`: 3 s.
    pub const CLUSTER_LEASE_TTL_MS: u64 = 3_000;
    /// `cluster.hold_ms`: 4 s.
    pub const CLUSTER_HOLD_MS: u64 = 4_000;
    /// `cluster.name`.
    pub const CLUSTER_NAME: &str = "ankusa";
    /// `notify.dead_letter_window_ms`: one `dead_lettered` summary per sink
    /// a minute at most.
    pub const NOTIFY_DEAD_LETTER_WINDOW_MS: u64 = 60_000;
    /// `notify.dead_letter_samples`: the dead letters a summary names.
    pub const NOTIFY_DEAD_LETTER_SAMPLES: u32 = 5;
    /// `notify.sink_failing_after_ms`: 5 minutes of failed attempts.
    pub const NOTIFY_SINK_FAILING_AFTER_MS: u64 = 300_000;
    /// `notify.tenant_bounds_percent`.
    pub const NOTIFY_TENANT_BOUNDS_PERCENT: u32 = 80;
    /// `notify.max_pending`: notifications queued at once (the internal
    /// tenant's `max_pending`).
    pub const NOTIFY_MAX_PENDING: u64 = 10_000;
}

/// The upper bound of every numeric option, in the option's unit, checked at
/// load: a larger value is refused by name (docs/design.md section 7). A value
/// without a bound could stop the node in all but name (a `flush_interval_ms`
/// of 2^64-1 never flushes, so nothing is delivered and SIGTERM no longer stops
/// it) or allocate without end. Each bound is far above any real use;
/// config/ankusa.example.yaml lists them beside the options. `retry.*` and a
/// sink entry's `retry:` take at most a year, and `rate_limit` at most
/// 1,000,000 hooks per second (their own checks).
pub mod limits {
    /// `listeners.admin_token`: at least 16 characters. The token guards
    /// revive, drop, purge and replay; a short one falls to guessing (two
    /// characters took 0.3 s at one connection's pace). 16 random hex
    /// characters are 64 bits; `openssl rand -hex 32` gives 256.
    pub const MIN_ADMIN_TOKEN_LEN: usize = 16;
    /// `node.max_pending` and `tenants[].max_pending`: 1,000,000,000 rows.
    pub const MAX_PENDING: u64 = 1_000_000_000;
    /// `node.max_pending_bytes` and `tenants[].max_pending_bytes`: 1 TiB.
    pub const MAX_PENDING_BYTES: u64 = 1 << 40;
    /// `node.attempt_log.max_attempts`: 1,000 attempts per row.
    pub const ATTEMPT_LOG_MAX_ATTEMPTS: u32 = 1_000;
    /// `node.attempt_log.max_body_bytes`: 64 KiB, what the HTTP sink reads
    /// of an answer to drain its connection.
    pub const ATTEMPT_LOG_MAX_BODY_BYTES: u32 = 64 * 1024;
    /// `listeners.body_limit_bytes`: 256 MiB (a body is held in memory
    /// whole while it is verified and committed).
    pub const BODY_LIMIT_BYTES: u64 = 256 << 20;
    /// `listeners.body_budget_bytes`: 16 GiB (it is memory the node may
    /// hold at once).
    pub const BODY_BUDGET_BYTES: u64 = 16 << 30;
    /// `dispatch.batch`: 10,000 rows claimed per scan.
    pub const BATCH: u32 = 10_000;
    /// `dispatch.sink_concurrency`: 10,000 calls at once per sink.
    pub const SINK_CONCURRENCY: u32 = 10_000;
    /// `dispatch.pipelined_concurrency`: 100,000 calls at once per pipelined
    /// sink.
    pub const PIPELINED_CONCURRENCY: u32 = 100_000;
    /// `dispatch.admission_window`: 1,000,000 rows.
    pub const ADMISSION_WINDOW: u32 = 1_000_000;
    /// `dispatch.admission_window_bytes`: 16 GiB.
    pub const ADMISSION_WINDOW_BYTES: u64 = 16 << 30;
    /// `dispatch.flush_interval_ms`: 10 s (0, the default, flushes at once).
    pub const FLUSH_INTERVAL_MS: u64 = 10_000;
    /// `breaker.failures` and `breaker.distinct`: 1,000,000.
    pub const BREAKER_FAILURES: u32 = 1_000_000;
    /// `breaker.open_ms`: 24 h.
    pub const BREAKER_OPEN_MS: u64 = 24 * 3_600_000;
    /// `retention.keep_ms`: 10 years (3,650 days).
    pub const RETENTION_KEEP_MS: u64 = 3_650 * 24 * 3_600_000;
    /// `retention.interval_ms`: 24 h.
    pub const RETENTION_INTERVAL_MS: u64 = 24 * 3_600_000;
    /// `verification.tolerance_ms`: 10 years (3,650 days). A window a
    /// signed timestamp is compared with, never waited on; tests verify
    /// recorded provider payloads years old with it.
    pub const TOLERANCE_MS: u64 = 3_650 * 24 * 3_600_000;
    /// `dedupe.ttl_ms`: 365 days.
    pub const DEDUPE_TTL_MS: u64 = 365 * 24 * 3_600_000;
    /// The durations of `retry` and of a sink entry's `retry:`: 365 days.
    pub const RETRY_MS: u64 = 365 * 24 * 3_600_000;
    /// `timeout_ms` of every sink type that takes one (http, sqs, pubsub,
    /// kafka, nats, redis, rabbitmq): 10 min.
    pub const SINK_TIMEOUT_MS: u64 = 600_000;
    /// `maxlen` of a redis sink: 1,000,000,000 stream entries.
    pub const REDIS_MAXLEN: u64 = 1_000_000_000;
    /// `cluster.lease_ttl_ms`: 2 s at least (etcd grants no shorter lease
    /// with its default timings), 60 s at most (a dead node's tenants wait
    /// that long for a new owner).
    pub const CLUSTER_LEASE_TTL_MS: (u64, u64) = (2_000, 60_000);
    /// `cluster.hold_ms`: 60 s.
    pub const CLUSTER_HOLD_MS: u64 = 60_000;
    /// `max_message_bytes` of an sqs sink: 1 MiB, SQS's own limit (the sinks
    /// crate checks its lower bound, 1,024).
    pub const SQS_MAX_MESSAGE_BYTES: u64 = 1 << 20;
    /// A sink entry's `auto_pause_after_ms`: 1 s at least (a blip must not
    /// pause a sink), 30 days at most.
    pub const AUTO_PAUSE_AFTER_MS: (u64, u64) = (1_000, 30 * 24 * 3_600_000);
    /// `notify.sink_failing_after_ms`: as `auto_pause_after_ms`.
    pub const NOTIFY_SINK_FAILING_AFTER_MS: (u64, u64) = AUTO_PAUSE_AFTER_MS;
    /// `notify.dead_letter_window_ms`: 1 s to 24 h.
    pub const NOTIFY_DEAD_LETTER_WINDOW_MS: (u64, u64) = (1_000, 24 * 3_600_000);
    /// `notify.dead_letter_samples`: 20 (a summary is one chat message).
    pub const NOTIFY_DEAD_LETTER_SAMPLES: u32 = 20;
    /// `notify.max_pending`: 1,000,000 notifications.
    pub const NOTIFY_MAX_PENDING: u64 = 1_000_000;
    /// `notify.destinations`: 16.
    pub const NOTIFY_DESTINATIONS: usize = 16;
}

/// The parts of a configuration file every node of a cluster must have
/// alike (docs/design.md section 11, "The catalog"), by name, each as
/// canonical JSON (keys sorted): every top-level section but `node` and
/// `listeners`, each tenant (`tenants.<name>`) and each source
/// (`sources.<name>`) on its own, and `cluster` without `node_id` and
/// `advertise`. The catalog keeps each part's digest, so a node whose file
/// differs is refused naming the parts that differ. The text is compared as
/// written: `env:` names, not their values, and an omitted default differs
/// from the default written out.
///
/// # Errors
/// A file that does not parse as YAML, or has a key YAML allows and JSON
/// does not (a mapping as a key).
pub fn shared_sections(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    use serde_json::Value as J;
    let yaml: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|e| ConfigError::from_yaml(&e))?;
    let json: J = serde_json::to_value(&yaml).map_err(|e| ConfigError::Yaml {
        message: format!("a key that is not a string or number: {e}"),
        line: None,
        column: None,
    })?;
    let mut parts = BTreeMap::new();
    let J::Object(top) = json else {
        return Ok(parts);
    };
    for (section, value) in top {
        match (section.as_str(), value) {
            ("node" | "listeners", _) => {}
            ("cluster", J::Object(mut c)) => {
                c.remove("node_id");
                c.remove("advertise");
                // The same etcd members in another order are the same
                // cluster: each node may list its nearest member first.
                if let Some(J::Array(members)) = c.get_mut("etcd") {
                    members.sort_by_key(|m| m.to_string());
                }
                parts.insert(section, canonical(&J::Object(c)));
            }
            ("tenants" | "sources", J::Array(list)) => {
                for (i, item) in list.into_iter().enumerate() {
                    let name = item["name"]
                        .as_str()
                        .map_or_else(|| format!("[{i}]"), str::to_owned);
                    parts.insert(format!("{section}.{name}"), canonical(&item));
                }
            }
            (_, value) => {
                parts.insert(section, canonical(&value));
            }
        }
    }
    Ok(parts)
}

/// JSON text with every object's keys sorted, whatever order the map type
/// keeps (serde_json's `preserve_order` may be on in the build).
fn canonical(v: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match v {
        J::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", J::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        J::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

impl Config {
    /// Reads and validates the file at `path`, resolving `env:NAME` from the
    /// process environment.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        Config::load_with_env(path, &process_env)
    }

    /// [`Config::load`] with the checks of the layers this crate does not
    /// know (each sink's own options, what the edge can serve): `check` runs
    /// on every source that parsed, and its problems join this crate's in one
    /// [`ConfigError::Invalid`], so one run reports every problem of the file.
    pub fn load_checked(
        path: impl AsRef<Path>,
        check: SourceCheck<'_>,
    ) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_yaml_checked(&text, &process_env, check)
    }

    /// Reads and validates the file at `path`, resolving `env:NAME` through
    /// `env`.
    pub fn load_with_env(
        path: impl AsRef<Path>,
        env: EnvLookup<'_>,
    ) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_yaml(&text, env)
    }

    /// Parses and validates YAML text, resolving `env:NAME` through `env`.
    pub fn from_yaml(text: &str, env: EnvLookup<'_>) -> Result<Config, ConfigError> {
        Config::from_yaml_checked(text, env, &|_| Vec::new())
    }

    /// [`Config::from_yaml`] with `check` run on every source that parsed
    /// ([`Config::load_checked`]).
    pub fn from_yaml_checked(
        text: &str,
        env: EnvLookup<'_>,
        check: SourceCheck<'_>,
    ) -> Result<Config, ConfigError> {
        // An empty file (or comments only) is most likely the wrong file: it
        // would start a node that accepts nothing. `sources: []` says so.
        if serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text).is_ok_and(|v| v.is_null()) {
            return Err(ConfigError::Yaml {
                message: "the file is empty (write `sources: []` for a node with no sources)"
                    .to_owned(),
                line: None,
                column: None,
            });
        }
        match serde_yaml_ng::from_str::<raw::RawConfig>(text) {
            Ok(raw) => validate::config(raw, env, check),
            Err(first) => Err(structural::every_problem(text, &first, env, check)),
        }
    }

    /// The embedded default configuration ([`DEFAULT_YAML`]). It names no
    /// environment variable, so it does not read the environment.
    pub fn default_demo() -> Config {
        // A test loads DEFAULT_YAML and asserts the model: failing here is a
        // build that was never tested.
        #[allow(clippy::expect_used)]
        Config::from_yaml(DEFAULT_YAML, &|_| None).expect("the embedded DEFAULT_YAML is valid")
    }

    /// Gives an ordered sink a Rust function as its ordering key (the
    /// library API's form of the ADR's `{mod, fun, args}`; YAML has none).
    /// Refused when the source or sink does not exist or the sink is not
    /// `ordered: true`.
    pub fn set_ordering_key_fn(
        &mut self,
        source: &str,
        sink: &str,
        f: KeyFn,
    ) -> Result<(), ConfigError> {
        let invalid = |scope: Scope, option: &str, message: String| ConfigError::Invalid {
            problems: vec![Problem {
                scope,
                option: option.to_owned(),
                message,
            }],
        };
        let Some(src) = self.sources.iter_mut().find(|s| s.name == source) else {
            return Err(invalid(
                Scope::Section("sources"),
                "name",
                format!("no source named \"{source}\""),
            ));
        };
        let Some(entry) = src.sinks.iter_mut().find(|s| s.name == sink) else {
            return Err(invalid(
                Scope::Source {
                    source_name: source.to_owned(),
                },
                "sinks",
                format!("no sink named \"{sink}\""),
            ));
        };
        if !entry.order.is_ordered() {
            return Err(invalid(
                Scope::Sink {
                    source_name: source.to_owned(),
                    sink: sink.to_owned(),
                    kind: entry.kind.as_str().to_owned(),
                },
                "ordering_key",
                "requires ordered: true".to_owned(),
            ));
        }
        entry.order = Order::Ordered {
            key: Some(OrderingKey::Func(f)),
        };
        Ok(())
    }
}
