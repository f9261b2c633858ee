//! Raw file → typed model: defaults, checks, env secrets. Every problem is
//! collected (in file order) before the load fails, so one run shows them all.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};

use crate::defaults as d;
use crate::error::{ConfigError, Problems, Scope};
use crate::limits as max;
use crate::model::{
    AttemptLog, Breaker, Challenge, Cluster, Config, Dedupe, Dispatch, HeaderAction, HeaderPolicy,
    HmacAlgorithm, JsonPath, KeySource, Listeners, LogFormat, Node, OnInvalidSignature, Otel,
    Retention, Retry, SignatureEncoding, SinkKind, Source, StoreBackend, Tenant, TenantBinding,
    TypedOptions, Verification,
};
use crate::raw::{
    RawAction, RawAlgorithm, RawCluster, RawConfig, RawDedupe, RawEncoding, RawHeaderPolicy,
    RawLogFormat, RawOnInvalid, RawOtel, RawScheme, RawSource, RawStore, RawVerification,
};
use crate::secret::{self, EnvLookup, Secret};
use crate::sink;

pub(crate) fn config(
    raw: RawConfig,
    env: EnvLookup<'_>,
    check: crate::SourceCheck<'_>,
) -> Result<Config, ConfigError> {
    let mut p = Problems::default();
    // Every variable an `env:` read, with its value, so no problem's message
    // can carry a value (`scrub_env_values`): an error names the variable.
    let read: RefCell<Vec<(String, String)>> = RefCell::default();
    let recording = |name: &str| {
        let value = env(name);
        if let Some(v) = value.as_ref().and_then(|v| v.to_str()) {
            read.borrow_mut().push((name.to_owned(), v.to_owned()));
        }
        value
    };
    let env: EnvLookup<'_> = &recording;

    let node = node(&raw, &mut p);
    let listeners = listeners(&raw, env, &mut p);
    let store_headers = header_policy(
        &raw.store_headers,
        &Scope::Section("store_headers"),
        "",
        &mut p,
    );
    let dispatch = dispatch(&raw, &mut p);
    let retry = retry(&raw, &mut p);
    let breaker = breaker(&raw, &mut p);
    let retention = retention(&raw, &mut p);
    let mut tenants = tenants(&raw, &mut p);
    let mut sources = sources(
        &raw.sources,
        &tenants,
        &store_headers,
        &retry,
        env,
        check,
        &mut p,
    );
    sink_paths_outside(&node.data_dir, &sources, &mut p);
    if raw.cluster.is_some() {
        held_lanes_not_in_cluster(&sources, &mut p);
    }
    let cluster = raw
        .cluster
        .as_ref()
        .map(|c| cluster(c, &node, &listeners, &mut p));
    // The relay's own notifications: their internal tenant and sources come
    // after the file's (docs/design.md section 5, "Notifications").
    let notify = raw.notify.as_ref().and_then(|n| {
        let built = crate::notify::notify(n, raw.cluster.is_some(), &retry, env, &mut p)?;
        notify_not_to_itself(&built.sources, &listeners, &mut p);
        tenants.push(built.tenant);
        sources.extend(built.sources);
        Some(built.notify)
    });

    if !p.0.is_empty() {
        scrub_env_values(&mut p.0, &read.borrow());
        return Err(ConfigError::Invalid { problems: p.0 });
    }
    Ok(Config {
        node,
        listeners,
        store_headers,
        dispatch,
        retry,
        breaker,
        retention,
        tenants,
        sources,
        cluster,
        notify,
    })
}

/// `dead_letter: hold` with `cluster` (ADR 0004 section 8): refused. A held
/// lane waits for an operator, and a node's drain of a tenant it no longer
/// owns (a planned move, a failover: docs/design.md section 11) ends only
/// when every row of the tenant there is delivered or dead: a held lane's
/// members would keep it from ending.
fn held_lanes_not_in_cluster(sources: &[Source], p: &mut Problems) {
    for s in sources {
        for e in &s.sinks {
            if e.dead_letter == crate::model::DeadLetterLane::Hold {
                p.push(
                    &crate::sink::scope_of(&s.name, &e.name, e.kind.as_str()),
                    "dead_letter",
                    "hold in cluster mode is planned, not built (a held lane's waiting hooks would keep a tenant's move or failover drain from finishing): use release, or remove the cluster section",
                );
            }
        }
    }
}

/// `cluster` (docs/design.md section 11): a node id, at least one etcd
/// member's `http://` URL, an address the other nodes can reach, and a lease
/// TTL etcd can grant (whole seconds).
fn cluster(c: &RawCluster, node: &Node, listeners: &Listeners, p: &mut Problems) -> Cluster {
    let scope = Scope::Section("cluster");
    let node_id = match &c.node_id {
        None => {
            p.push(
                &scope,
                "node_id",
                "is required: this node's name in the cluster, unique and stable across restarts (n1)",
            );
            String::new()
        }
        Some(id) => {
            if let Err(why) = check_name(id) {
                p.push(&scope, "node_id", why);
            }
            id.clone()
        }
    };
    let etcd = c.etcd.clone().unwrap_or_default();
    if etcd.is_empty() {
        p.push(
            &scope,
            "etcd",
            "is required: the client URLs of the etcd members ([http://127.0.0.1:2379])",
        );
    }
    for url in &etcd {
        let host = url.strip_prefix("http://");
        let ok = host.is_some_and(|h| !h.is_empty() && !h.starts_with('/'))
            && !url.chars().any(|ch| ch.is_whitespace() || ch.is_control());
        if !ok {
            p.push(
                &scope,
                "etcd",
                format!(
                    "\"{url}\" is not an etcd client URL: http://host:port (the member's --advertise-client-urls)"
                ),
            );
        }
    }
    let advertise = match &c.advertise {
        Some(a) => {
            let ok = a.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            }) && !a
                .chars()
                .any(|ch| ch.is_whitespace() || ch.is_control() || ch == '/');
            if !ok {
                p.push(
                    &scope,
                    "advertise",
                    format!("\"{a}\" is not host:port (where the other nodes reach this node's ingest listener)"),
                );
            }
            a.clone()
        }
        None => {
            let ingest = listeners.ingest;
            if ingest.ip().is_unspecified() || ingest.port() == 0 {
                p.push(
                    &scope,
                    "advertise",
                    format!(
                        "is required when listeners.ingest ({ingest}) is not an address the other nodes can reach: \
                         give this node's host:port"
                    ),
                );
            }
            ingest.to_string()
        }
    };
    let (min_ttl, max_ttl) = max::CLUSTER_LEASE_TTL_MS;
    let lease_ttl_ms = c.lease_ttl_ms.unwrap_or(d::CLUSTER_LEASE_TTL_MS);
    if lease_ttl_ms < min_ttl || lease_ttl_ms > max_ttl || !lease_ttl_ms.is_multiple_of(1_000) {
        p.push(
            &scope,
            "lease_ttl_ms",
            format!(
                "{lease_ttl_ms} is not a lease etcd grants: whole seconds from {min_ttl} to {max_ttl} (3000)"
            ),
        );
    }
    let hold_ms = bounded(
        c.hold_ms,
        d::CLUSTER_HOLD_MS,
        max::CLUSTER_HOLD_MS,
        &scope,
        "hold_ms",
        p,
    );
    let name = c.name.clone().unwrap_or_else(|| d::CLUSTER_NAME.to_owned());
    if let Err(why) = check_name(&name) {
        p.push(&scope, "name", why);
    }
    if node.store == StoreBackend::Memory {
        p.push(
            &scope,
            "",
            "a cluster node needs a store that survives a restart (node.store: memory does not): \
             what it acknowledges must outlive it until it is delivered or drained",
        );
    }
    Cluster {
        node_id,
        etcd,
        advertise,
        lease_ttl_ms,
        hold_ms,
        name,
    }
}

fn retention(raw: &RawConfig, p: &mut Problems) -> Retention {
    let scope = Scope::Section("retention");
    Retention {
        keep_ms: bounded(
            raw.retention.keep_ms,
            d::RETENTION_KEEP_MS,
            max::RETENTION_KEEP_MS,
            &scope,
            "keep_ms",
            p,
        ),
        interval_ms: bounded(
            raw.retention.interval_ms,
            d::RETENTION_INTERVAL_MS,
            max::RETENTION_INTERVAL_MS,
            &scope,
            "interval_ms",
            p,
        ),
    }
}

fn node(raw: &RawConfig, p: &mut Problems) -> Node {
    let scope = Scope::Section("node");
    let n = &raw.node;
    let name = n.name.clone().unwrap_or_else(|| d::NODE_NAME.to_owned());
    // A node name may be a host name, dots included.
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !ok {
        p.push(
            &scope,
            "name",
            format!("\"{name}\" is not a valid node name: 1-64 characters of A-Z a-z 0-9 _ - ., starting with a letter or digit"),
        );
    }
    let data_dir = n
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(d::DATA_DIR));
    if data_dir.as_os_str().is_empty() {
        p.push(&scope, "data_dir", "must not be empty");
    } else if let Ok(m) = std::fs::metadata(&data_dir)
        && !m.is_dir()
    {
        p.push(
            &scope,
            "data_dir",
            format!(
                "\"{}\" exists and is not a directory: name a directory (it is created when missing)",
                data_dir.display()
            ),
        );
    }
    let store = match n.store {
        None | Some(RawStore::Rocksdb) => StoreBackend::RocksDb,
        Some(RawStore::Fjall) => StoreBackend::Fjall,
        Some(RawStore::Memory) => StoreBackend::Memory,
    };
    let max_pending = bounded(
        n.max_pending,
        d::NODE_MAX_PENDING,
        max::MAX_PENDING,
        &scope,
        "max_pending",
        p,
    );
    let max_pending_bytes = bounded(
        n.max_pending_bytes,
        d::NODE_MAX_PENDING_BYTES,
        max::MAX_PENDING_BYTES,
        &scope,
        "max_pending_bytes",
        p,
    );
    let log_format = match n.log_format {
        None | Some(RawLogFormat::Text) => LogFormat::Text,
        Some(RawLogFormat::Json) => LogFormat::Json,
    };
    let otel = n.otel.as_ref().map(|o| otel(o, p));
    let attempt_log = AttemptLog {
        enabled: n.attempt_log.enabled.unwrap_or(true),
        max_attempts: bounded(
            n.attempt_log.max_attempts,
            d::ATTEMPT_LOG_MAX_ATTEMPTS,
            max::ATTEMPT_LOG_MAX_ATTEMPTS,
            &scope,
            "attempt_log.max_attempts",
            p,
        ),
        // 0 keeps no body: not refused.
        max_body_bytes: match n.attempt_log.max_body_bytes {
            Some(v) if v > max::ATTEMPT_LOG_MAX_BODY_BYTES => {
                above(
                    &scope,
                    "attempt_log.max_body_bytes",
                    v,
                    max::ATTEMPT_LOG_MAX_BODY_BYTES,
                    p,
                );
                d::ATTEMPT_LOG_MAX_BODY_BYTES
            }
            Some(v) => v,
            None => d::ATTEMPT_LOG_MAX_BODY_BYTES,
        },
    };
    Node {
        name,
        data_dir,
        store,
        max_pending,
        max_pending_bytes,
        log_format,
        otel,
        attempt_log,
    }
}

/// `node.otel`: the endpoint must be an http(s) URL with a host, the service
/// name and the filter non-empty (the filter's syntax is the binary's
/// check: this crate knows no tracing).
fn otel(o: &RawOtel, p: &mut Problems) -> Otel {
    let scope = Scope::Section("node");
    if let Some(e) = &o.endpoint {
        let host = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"));
        let ok = host.is_some_and(|h| !h.is_empty() && !h.starts_with('/'))
            && !e.chars().any(|c| c.is_whitespace() || c.is_control());
        if !ok {
            p.push(
                &scope,
                "otel.endpoint",
                format!(
                    "\"{e}\" is not an OTLP/HTTP endpoint: the collector's http:// or https:// URL \
                     (http://127.0.0.1:4318; /v1/traces is appended)"
                ),
            );
        }
    }
    if o.service_name.as_ref().is_some_and(|s| s.trim().is_empty()) {
        p.push(
            &scope,
            "otel.service_name",
            "must not be empty (leave it out for OTEL_SERVICE_NAME, else ankusa)",
        );
    }
    if o.filter.as_ref().is_some_and(|f| f.trim().is_empty()) {
        p.push(
            &scope,
            "otel.filter",
            format!(
                "must not be empty (leave it out for {}; `off` exports nothing)",
                d::OTEL_FILTER
            ),
        );
    }
    Otel {
        endpoint: o.endpoint.clone(),
        service_name: o.service_name.clone(),
        filter: o
            .filter
            .clone()
            .unwrap_or_else(|| d::OTEL_FILTER.to_owned()),
    }
}

fn listeners(raw: &RawConfig, env: EnvLookup<'_>, p: &mut Problems) -> Listeners {
    let scope = Scope::Section("listeners");
    let l = &raw.listeners;
    let addr = |text: Option<&String>,
                default: &str,
                option: &str,
                p: &mut Problems|
     -> SocketAddr {
        let text = text.map_or(default, String::as_str);
        match text.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => {
                p.push(
                    &scope,
                    option,
                    format!("\"{text}\" is not a listener address: write IP:port, e.g. 127.0.0.1:8080 or [::1]:8080"),
                );
                // Only reached when the load fails; the value is never used.
                SocketAddr::from(([127, 0, 0, 1], 0))
            }
        }
    };
    let ingest = addr(l.ingest.as_ref(), d::INGEST_ADDR, "ingest", p);
    let admin = addr(l.admin.as_ref(), d::ADMIN_ADDR, "admin", p);
    if ingest == admin && ingest.port() != 0 {
        p.push(
            &scope,
            "admin",
            format!("is the same address as ingest ({ingest})"),
        );
    }
    let admin_token = match &l.admin_token {
        None => {
            if !admin.ip().is_loopback() {
                p.push(
                    &scope,
                    "admin_token",
                    format!("required when the admin listener is not on a loopback address (admin is {admin})"),
                );
            }
            None
        }
        Some(raw) => match secret::resolve(raw, env) {
            // A bearer token travels in a header: HTTP trims its outer
            // whitespace and refuses control bytes, so such a token could
            // never be sent and every call would be refused.
            Ok(s) if !s.expose().bytes().all(|b| b.is_ascii_graphic()) => {
                p.push(
                    &scope,
                    "admin_token",
                    "must be printable ASCII without spaces (it is sent as `Authorization: Bearer <token>`); check for a trailing newline in its variable",
                );
                None
            }
            Ok(s) if s.expose().len() < max::MIN_ADMIN_TOKEN_LEN => {
                p.push(
                    &scope,
                    "admin_token",
                    format!(
                        "is {} characters; it must have at least {} (it guards revive, drop and purge, and a short token can be guessed): make one with `openssl rand -hex 32`",
                        s.expose().len(),
                        max::MIN_ADMIN_TOKEN_LEN
                    ),
                );
                None
            }
            Ok(s) => Some(s),
            Err(m) => {
                p.push(&scope, "admin_token", m);
                None
            }
        },
    };
    let metrics_require_token = l.metrics_require_token.unwrap_or(false);
    if metrics_require_token && l.admin_token.is_none() {
        p.push(
            &scope,
            "metrics_require_token",
            "requires admin_token (there is no token to require)",
        );
    }
    let body_limit_bytes = bounded(
        l.body_limit_bytes,
        d::BODY_LIMIT_BYTES,
        max::BODY_LIMIT_BYTES,
        &scope,
        "body_limit_bytes",
        p,
    );
    let body_budget_bytes = bounded(
        l.body_budget_bytes,
        d::BODY_BUDGET_BYTES,
        max::BODY_BUDGET_BYTES,
        &scope,
        "body_budget_bytes",
        p,
    );
    // A body the limit lets in must fit the budget, or it could never be read.
    if body_budget_bytes < body_limit_bytes {
        p.push(
            &scope,
            "body_budget_bytes",
            format!("{body_budget_bytes} is below body_limit_bytes ({body_limit_bytes}): a body of the largest size accepted could never be read"),
        );
    }
    Listeners {
        ingest,
        admin,
        admin_token,
        metrics_require_token,
        body_limit_bytes,
        body_budget_bytes,
    }
}

/// `prefix` is the option path of the policy inside its scope (`""` for the
/// instance section, `"store_headers."` inside a source).
fn header_policy(
    raw: &RawHeaderPolicy,
    scope: &Scope,
    prefix: &str,
    p: &mut Problems,
) -> HeaderPolicy {
    let mut headers = BTreeMap::new();
    for (name, action) in &raw.headers {
        let lower = name.to_ascii_lowercase();
        if let Err(m) = check_header_name(name) {
            p.push(scope, format!("{prefix}headers.{name}"), m);
        } else if headers.insert(lower.clone(), action_of(*action)).is_some() {
            p.push(
                scope,
                format!("{prefix}headers.{name}"),
                format!("header \"{lower}\" is listed twice (names are case-insensitive)"),
            );
        }
    }
    HeaderPolicy {
        default: raw.default.map_or(HeaderAction::Keep, action_of),
        headers,
    }
}

fn action_of(a: RawAction) -> HeaderAction {
    match a {
        RawAction::Keep => HeaderAction::Keep,
        RawAction::Drop => HeaderAction::Drop,
        RawAction::Hash => HeaderAction::Hash,
    }
}

fn dispatch(raw: &RawConfig, p: &mut Problems) -> Dispatch {
    let scope = Scope::Section("dispatch");
    let r = &raw.dispatch;
    let batch = bounded(r.batch, d::BATCH, max::BATCH, &scope, "batch", p);
    let sink_concurrency = bounded(
        r.sink_concurrency,
        d::SINK_CONCURRENCY,
        max::SINK_CONCURRENCY,
        &scope,
        "sink_concurrency",
        p,
    );
    let pipelined_concurrency = bounded(
        r.pipelined_concurrency,
        d::PIPELINED_CONCURRENCY,
        max::PIPELINED_CONCURRENCY,
        &scope,
        "pipelined_concurrency",
        p,
    );
    let admission_window = bounded(
        r.admission_window,
        d::ADMISSION_WINDOW,
        max::ADMISSION_WINDOW,
        &scope,
        "admission_window",
        p,
    );
    let admission_window_bytes = bounded(
        r.admission_window_bytes,
        d::ADMISSION_WINDOW_BYTES,
        max::ADMISSION_WINDOW_BYTES,
        &scope,
        "admission_window_bytes",
        p,
    );
    // 0 is allowed: the outcomes of a pass are flushed at once.
    let flush_interval_ms = match r.flush_interval_ms {
        Some(n) if n > max::FLUSH_INTERVAL_MS => {
            above(&scope, "flush_interval_ms", n, max::FLUSH_INTERVAL_MS, p);
            d::FLUSH_INTERVAL_MS
        }
        n => n.unwrap_or(d::FLUSH_INTERVAL_MS),
    };
    Dispatch {
        batch,
        sink_concurrency,
        pipelined_concurrency,
        admission_window,
        admission_window_bytes,
        flush_interval_ms,
    }
}

fn retry(raw: &RawConfig, p: &mut Problems) -> Retry {
    let scope = Scope::Section("retry");
    let r = &raw.retry;
    let base_ms = positive(r.base_ms, d::RETRY_BASE_MS, &scope, "base_ms", p);
    let max_ms = positive(r.max_ms, d::RETRY_MAX_MS, &scope, "max_ms", p);
    let max_elapsed_ms = positive(
        r.max_elapsed_ms,
        d::RETRY_MAX_ELAPSED_MS,
        &scope,
        "max_elapsed_ms",
        p,
    );
    if base_ms > max_ms {
        p.push(
            &scope,
            "base_ms",
            format!("{base_ms} is greater than max_ms ({max_ms}): the first backoff cannot exceed the largest"),
        );
    }
    // The same bound as a sink entry's `retry:` (config/src/sink.rs).
    for (option, value) in [
        ("base_ms", Some(base_ms)),
        ("max_ms", Some(max_ms)),
        ("max_elapsed_ms", Some(max_elapsed_ms)),
        ("retry_after_max_ms", r.retry_after_max_ms),
    ] {
        if let Some(n) = value.filter(|n| *n > YEAR_MS) {
            p.push(
                &scope,
                option,
                format!("{n} is more than a year ({YEAR_MS} ms): write milliseconds"),
            );
        }
    }
    Retry {
        base_ms,
        max_ms,
        max_elapsed_ms,
        // 0 is allowed: the backoff alone decides.
        retry_after_max_ms: r.retry_after_max_ms,
    }
}

fn breaker(raw: &RawConfig, p: &mut Problems) -> Breaker {
    let scope = Scope::Section("breaker");
    let failures = bounded(
        raw.breaker.failures,
        d::BREAKER_FAILURES,
        max::BREAKER_FAILURES,
        &scope,
        "failures",
        p,
    );
    let distinct = bounded(
        raw.breaker.distinct,
        d::BREAKER_DISTINCT.min(failures),
        max::BREAKER_FAILURES,
        &scope,
        "distinct",
        p,
    );
    if distinct > failures {
        p.push(
            &scope,
            "distinct",
            format!("{distinct} is greater than failures ({failures}): {failures} failures come from at most {failures} lanes, so the breaker could never open"),
        );
    }
    let open_ms = positive(
        raw.breaker.open_ms,
        d::BREAKER_OPEN_MS,
        &scope,
        "open_ms",
        p,
    );
    if open_ms > DAY_MS {
        p.push(
            &scope,
            "open_ms",
            format!("{open_ms} is more than a day ({DAY_MS} ms): an open breaker parks every row of its sink that long; write milliseconds"),
        );
    }
    Breaker {
        failures,
        distinct: distinct.min(failures),
        open_ms,
    }
}

/// The most a global retry duration may be (as a sink entry's `retry:`).
const YEAR_MS: u64 = max::RETRY_MS;
/// The most `breaker.open_ms` may be.
const DAY_MS: u64 = max::BREAKER_OPEN_MS;

fn tenants(raw: &RawConfig, p: &mut Problems) -> Vec<Tenant> {
    let Some(list) = &raw.tenants else {
        return vec![Tenant {
            name: d::TENANT.to_owned(),
            max_pending: d::TENANT_MAX_PENDING,
            max_pending_bytes: d::TENANT_MAX_PENDING_BYTES,
        }];
    };
    if list.is_empty() {
        p.push(
            &Scope::Section("tenants"),
            "tenants",
            "at least one tenant is required",
        );
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for t in list {
        let scope = Scope::Tenant {
            tenant: t.name.clone(),
        };
        if let Err(m) = check_name(&t.name) {
            p.push(&scope, "name", m);
        } else if !seen.insert(t.name.clone()) {
            p.push(&scope, "name", "duplicate tenant name");
        }
        out.push(Tenant {
            name: t.name.clone(),
            max_pending: bounded(
                t.max_pending,
                d::TENANT_MAX_PENDING,
                max::MAX_PENDING,
                &scope,
                "max_pending",
                p,
            ),
            max_pending_bytes: bounded(
                t.max_pending_bytes,
                d::TENANT_MAX_PENDING_BYTES,
                max::MAX_PENDING_BYTES,
                &scope,
                "max_pending_bytes",
                p,
            ),
        });
    }
    out
}

fn sources(
    raw: &[RawSource],
    tenants: &[Tenant],
    instance_headers: &HeaderPolicy,
    global_retry: &Retry,
    env: EnvLookup<'_>,
    check: crate::SourceCheck<'_>,
    p: &mut Problems,
) -> Vec<Source> {
    let mut names = HashSet::new();
    let mut paths: HashMap<String, String> = HashMap::new();
    let mut out = Vec::with_capacity(raw.len());
    for rs in raw {
        let scope = Scope::Source {
            source_name: rs.name.clone(),
        };
        let mut duplicate = false;
        if let Err(m) = check_name(&rs.name) {
            p.push(&scope, "name", m);
        } else if !names.insert(rs.name.clone()) {
            p.push(&scope, "name", "duplicate source name");
            duplicate = true;
        }

        let path = rs
            .path
            .clone()
            .unwrap_or_else(|| format!("/hooks/{}", rs.name));
        if let Err(m) = check_path(&path) {
            p.push(&scope, "path", m);
        } else if let Some(other) = paths.get(&path) {
            // A second source of the same name at the same path: the
            // duplicate name already says it.
            if !(duplicate && other == &rs.name) {
                p.push(
                    &scope,
                    "path",
                    format!("\"{path}\" is already the path of source \"{other}\""),
                );
            }
        } else {
            paths.insert(path.clone(), rs.name.clone());
        }

        let tenant = match (&rs.tenant, rs.tenant_path.unwrap_or(false)) {
            (Some(_), true) => {
                p.push(
                    &scope,
                    "tenant_path",
                    "tenant_path: true takes the tenant from the URL; remove tenant, or set tenant_path: false",
                );
                TenantBinding::Path
            }
            (None, true) => TenantBinding::Path,
            (Some(t), false) => {
                if !tenants.iter().any(|x| &x.name == t) {
                    p.push(
                        &scope,
                        "tenant",
                        format!("unknown tenant \"{t}\" (not in tenants)"),
                    );
                }
                TenantBinding::Fixed(t.clone())
            }
            (None, false) => {
                if !tenants.iter().any(|x| x.name == d::TENANT) {
                    p.push(
                        &scope,
                        "tenant",
                        format!(
                            "required: name a tenant, or set tenant_path: true (there is no tenant \"{}\" to default to)",
                            d::TENANT
                        ),
                    );
                }
                TenantBinding::Fixed(d::TENANT.to_owned())
            }
        };

        let verification = verification(rs.verification.as_ref(), &scope, env, p);
        let dedupe = rs.dedupe.as_ref().and_then(|r| dedupe(r, &scope, p));
        let challenge = rs
            .challenge
            .as_ref()
            .and_then(|r| challenge(r, &scope, env, p));
        let (store_headers, overridden) = match &rs.store_headers {
            Some(o) => (header_policy(o, &scope, "store_headers.", p), true),
            None => (instance_headers.clone(), false),
        };

        if rs.sinks.is_empty() {
            p.push(&scope, "sinks", "at least one sink is required");
        }
        if rs.sinks.len() > usize::from(u16::MAX) + 1 {
            p.push(&scope, "sinks", "at most 65536 sinks per source");
        }
        let ctx = sink::SourceCtx {
            source_name: &rs.name,
            store_headers: &store_headers,
            overridden,
            env,
            retry: global_retry,
        };
        let mut sink_names = HashSet::new();
        let mut sinks = Vec::with_capacity(rs.sinks.len());
        for (index, entry) in rs.sinks.iter().enumerate() {
            let index = u16::try_from(index).unwrap_or(u16::MAX);
            if let Some(s) = sink::entry(&ctx, index, entry, p) {
                if !sink_names.insert(s.name.clone()) {
                    p.push(
                        &sink::scope_of(&rs.name, &s.name, s.kind.as_str()),
                        "name",
                        "duplicate sink name in this source",
                    );
                }
                sinks.push(s);
            }
        }

        let on_invalid_signature = match rs.on_invalid_signature {
            None | Some(RawOnInvalid::Reject) => OnInvalidSignature::Reject,
            Some(RawOnInvalid::Quarantine) => {
                if verification == Verification::None {
                    p.push(
                        &scope,
                        "on_invalid_signature",
                        "quarantine needs a verification scheme: with verification none no signature can fail (use quarantine: true to hold every hook)",
                    );
                }
                OnInvalidSignature::Quarantine
            }
        };

        let source = Source {
            name: rs.name.clone(),
            path,
            tenant,
            verification,
            dedupe,
            challenge,
            store_headers,
            store_headers_overridden: overridden,
            sinks,
            paused: rs.paused.unwrap_or(false),
            quarantine: rs.quarantine.unwrap_or(false),
            on_invalid_signature,
        };
        // The other layers' checks, on what parsed, so their problems come in
        // the same run as this crate's (an option this crate has already
        // refused is not reported twice; every problem another layer finds in
        // one option is, e.g. two bad names of one `forward_headers` list).
        let own = p.0.len();
        for extra in check(&source) {
            if !p.0[..own]
                .iter()
                .any(|q| q.scope == extra.scope && q.option == extra.option)
            {
                p.0.push(extra);
            }
        }
        out.push(source);
    }

    // A TenantPath source at P also answers P/{tenant}: a source whose path is
    // P plus one segment would share its routes.
    for tp in out.iter().filter(|s| s.tenant == TenantBinding::Path) {
        let prefix = format!("{}/", tp.path);
        for s in &out {
            if let Some(rest) = s.path.strip_prefix(&prefix)
                && !rest.contains('/')
            {
                p.push(
                    &Scope::Source {
                        source_name: s.name.clone(),
                    },
                    "path",
                    format!(
                        "\"{}\" overlaps the route {}{{tenant}} of TenantPath source \"{}\"",
                        s.path, prefix, tp.name
                    ),
                );
            }
        }
    }
    out
}

fn verification(
    raw: Option<&RawVerification>,
    scope: &Scope,
    env: EnvLookup<'_>,
    p: &mut Problems,
) -> Verification {
    let Some(r) = raw else {
        return Verification::None;
    };
    let kind = r.kind;
    let name = scheme_name(kind);
    // Options a scheme does not read are refused: a stray option is a
    // misunderstanding (a tolerance on GitHub, which signs no timestamp).
    let takes_tolerance = matches!(
        kind,
        RawScheme::Stripe | RawScheme::Slack | RawScheme::StandardWebhooks
    );
    let not_for = |option: &str, p: &mut Problems| {
        p.push(
            scope,
            format!("verification.{option}"),
            format!("is not an option of {name} verification"),
        );
    };
    if r.tolerance_ms.is_some() && !takes_tolerance {
        not_for("tolerance_ms", p);
    }
    if kind != RawScheme::Hmac {
        for (set, option) in [
            (r.header.is_some(), "header"),
            (r.algorithm.is_some(), "algorithm"),
            (r.encoding.is_some(), "encoding"),
            (r.prefix.is_some(), "prefix"),
        ] {
            if set {
                not_for(option, p);
            }
        }
    }
    if kind == RawScheme::None {
        if r.secrets.is_some() {
            not_for("secrets", p);
        }
        return Verification::None;
    }

    let mut secrets = Vec::new();
    match &r.secrets {
        None => p.push(
            scope,
            "verification.secrets",
            format!("required for {name} verification (a list of one or more secrets)"),
        ),
        Some(list) if list.is_empty() => p.push(
            scope,
            "verification.secrets",
            format!("is empty: {name} verification needs at least one secret"),
        ),
        Some(list) => {
            for (i, raw) in list.iter().enumerate() {
                match secret::resolve(raw, env) {
                    Ok(s)
                        if kind == RawScheme::StandardWebhooks
                            && !standard_webhooks_secret(s.expose()) =>
                    {
                        p.push(
                            scope,
                            format!("verification.secrets[{i}]"),
                            "is not a Standard Webhooks secret: expected whsec_ followed by base64",
                        )
                    }
                    Ok(s) => secrets.push(s),
                    Err(m) => p.push(scope, format!("verification.secrets[{i}]"), m),
                }
            }
        }
    }
    let tolerance_ms = bounded(
        r.tolerance_ms,
        d::TOLERANCE_MS,
        max::TOLERANCE_MS,
        scope,
        "verification.tolerance_ms",
        p,
    );
    build_verification(kind, secrets, tolerance_ms, r, scope, p)
}

fn build_verification(
    kind: RawScheme,
    secrets: Vec<Secret>,
    tolerance_ms: u64,
    r: &RawVerification,
    scope: &Scope,
    p: &mut Problems,
) -> Verification {
    match kind {
        RawScheme::None => Verification::None,
        RawScheme::Github => Verification::Github { secrets },
        RawScheme::Stripe => Verification::Stripe {
            secrets,
            tolerance_ms,
        },
        RawScheme::Shopify => Verification::Shopify { secrets },
        RawScheme::Slack => Verification::Slack {
            secrets,
            tolerance_ms,
        },
        RawScheme::StandardWebhooks => Verification::StandardWebhooks {
            secrets,
            tolerance_ms,
        },
        RawScheme::Hmac => {
            let header = match &r.header {
                None => {
                    p.push(
                        scope,
                        "verification.header",
                        "required for hmac verification (the header that carries the signature)",
                    );
                    String::new()
                }
                Some(h) => {
                    if let Err(m) = check_header_name(h) {
                        p.push(scope, "verification.header", m);
                    }
                    h.to_ascii_lowercase()
                }
            };
            Verification::Hmac {
                header,
                algorithm: match r.algorithm {
                    None | Some(RawAlgorithm::Sha256) => HmacAlgorithm::Sha256,
                    Some(RawAlgorithm::Sha1) => HmacAlgorithm::Sha1,
                    Some(RawAlgorithm::Sha512) => HmacAlgorithm::Sha512,
                },
                encoding: match r.encoding {
                    None | Some(RawEncoding::Hex) => SignatureEncoding::Hex,
                    Some(RawEncoding::Base64) => SignatureEncoding::Base64,
                },
                prefix: r.prefix.clone().unwrap_or_default(),
                secrets,
            }
        }
    }
}

fn scheme_name(kind: RawScheme) -> &'static str {
    match kind {
        RawScheme::None => "none",
        RawScheme::Github => "github",
        RawScheme::Stripe => "stripe",
        RawScheme::Shopify => "shopify",
        RawScheme::Slack => "slack",
        RawScheme::StandardWebhooks => "standard_webhooks",
        RawScheme::Hmac => "hmac",
    }
}

fn dedupe(r: &RawDedupe, scope: &Scope, p: &mut Problems) -> Option<Dedupe> {
    let ttl_ms = bounded(
        r.ttl_ms,
        d::DEDUPE_TTL_MS,
        max::DEDUPE_TTL_MS,
        scope,
        "dedupe.ttl_ms",
        p,
    );
    let key = match (&r.header, &r.json) {
        (Some(_), Some(_)) => {
            p.push(scope, "dedupe", "give one of header or json, not both");
            return None;
        }
        (None, None) => {
            p.push(
                scope,
                "dedupe",
                "give the key: {header: NAME} or {json: a.b.c}",
            );
            return None;
        }
        (Some(h), None) => match check_header_name(h) {
            Ok(()) => KeySource::Header(h.to_ascii_lowercase()),
            Err(m) => {
                p.push(scope, "dedupe.header", m);
                return None;
            }
        },
        (None, Some(j)) => match json_path(j) {
            Ok(path) => KeySource::Json(path),
            Err(m) => {
                p.push(scope, "dedupe.json", m);
                return None;
            }
        },
    };
    Some(Dedupe { key, ttl_ms })
}

fn challenge(
    r: &crate::raw::RawChallenge,
    scope: &Scope,
    env: EnvLookup<'_>,
    p: &mut Problems,
) -> Option<Challenge> {
    let param = |name: &str, option: &str, p: &mut Problems| {
        let ok = !name.is_empty()
            && !name.chars().any(|c| {
                c == '&' || c == '=' || c == '#' || c == '?' || c.is_whitespace() || c.is_control()
            });
        if !ok {
            p.push(
                scope,
                option,
                format!("\"{name}\" is not a query parameter name"),
            );
        }
        ok
    };
    let mut good = param(&r.query, "challenge.query", p);
    let token = match (&r.token_query, &r.token) {
        (None, None) => None,
        (Some(q), Some(t)) => {
            good &= param(q, "challenge.token_query", p);
            match secret::resolve(t, env) {
                Ok(s) => Some((q.clone(), s)),
                Err(m) => {
                    p.push(scope, "challenge.token", m);
                    None
                }
            }
        }
        (Some(_), None) => {
            p.push(
                scope,
                "challenge.token",
                "required with token_query (the value the GET must carry)",
            );
            None
        }
        (None, Some(_)) => {
            p.push(
                scope,
                "challenge.token_query",
                "required with token (the query parameter that carries it)",
            );
            None
        }
    };
    good.then(|| Challenge {
        query: r.query.clone(),
        token,
    })
}

/// Standard Webhooks secrets are `whsec_` and base64 (the prefix is
/// optional); checked here so a bad secret fails at load, not on every hook.
fn standard_webhooks_secret(s: &str) -> bool {
    let b = s.strip_prefix("whsec_").unwrap_or(s).as_bytes();
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    let body = &b[..b.len() - pad];
    let shape_ok = if pad == 0 {
        body.len() % 4 != 1
    } else {
        pad <= 2 && b.len().is_multiple_of(4)
    };
    !body.is_empty()
        && shape_ok
        && body
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

/// No sink option that is a local path may lie inside `node.data_dir`
/// (docs/design.md section 7): a file sink writing there can overwrite the
/// store's own files (its first delivery once replaced RocksDB's CURRENT, and
/// the store never opened again). The paths: a file sink's `path`, a pubsub
/// sink's `credentials`, an http sink's `tls.client_cert`, `tls.client_key`
/// and `tls.ca` (read, never written, but the store's directory is the
/// store's alone). Both sides are compared after [`resolved`] (absolute,
/// `..` resolved, symlinks resolved where the parts exist).
fn sink_paths_outside(data_dir: &Path, sources: &[Source], p: &mut Problems) {
    if data_dir.as_os_str().is_empty() {
        return;
    }
    let store = resolved(data_dir);
    let text = |v: Option<&serde_yaml_ng::Value>| {
        v.and_then(serde_yaml_ng::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    for s in sources {
        for e in &s.sinks {
            let paths: Vec<(String, PathBuf)> = match (&e.typed, e.kind) {
                (TypedOptions::File(f), _) => vec![("path".to_owned(), f.path.clone())],
                (_, SinkKind::Pubsub) => text(e.options.get("credentials"))
                    .map(|c| ("credentials".to_owned(), c))
                    .into_iter()
                    .collect(),
                (_, SinkKind::Http) => ["client_cert", "client_key", "ca"]
                    .into_iter()
                    .filter_map(|k| {
                        let tls = e.options.get("tls")?;
                        text(tls.get(k)).map(|path| (format!("tls.{k}"), path))
                    })
                    .collect(),
                _ => continue,
            };
            for (option, path) in paths {
                if !resolved(&path).starts_with(&store) {
                    continue;
                }
                p.push(
                    &sink::scope_of(&s.name, &e.name, e.kind.as_str()),
                    option,
                    format!(
                        "\"{}\" is inside node.data_dir (\"{}\"), where the store keeps its files: name a path outside it",
                        path.display(),
                        data_dir.display()
                    ),
                );
            }
        }
    }
}

/// `path` as the node will reach it: absolute (a relative path is taken from
/// the working directory, as the node takes it), each part that is a
/// symlink replaced by its target (a dangling one too), `.` dropped and `..`
/// removing the part before it, after the symlinks before it were followed
/// (as the file system does). Parts that do not exist are taken as written.
pub(crate) fn resolved(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| path.to_path_buf(), |d| d.join(path))
    };
    // The parts still to walk, the next one last.
    let mut todo: Vec<PathBuf> = absolute
        .components()
        .rev()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut out = PathBuf::new();
    // Links followed: a loop stops being followed (the kernel's own limit).
    let mut hops = 0;
    while let Some(part) = todo.pop() {
        match part.components().next() {
            Some(Component::ParentDir) => {
                out.pop();
            }
            Some(Component::CurDir) | None => {}
            Some(Component::RootDir | Component::Prefix(_)) => out = part,
            Some(Component::Normal(name)) => {
                out.push(name);
                if hops < 40
                    && let Ok(target) = std::fs::read_link(&out)
                {
                    hops += 1;
                    out.pop();
                    todo.extend(
                        target
                            .components()
                            .rev()
                            .map(|c| PathBuf::from(c.as_os_str())),
                    );
                }
            }
        }
    }
    out
}

/// Replaces, in every problem's message, each value an `env:` reference
/// resolved to by `the value of env:NAME`, so an error names the variable and
/// never shows its value (a secret: docs/design.md section 7, "Secrets in
/// output"; an invalid value was once echoed in the error). A value of 8 bytes
/// or more is replaced wherever it appears; a shorter one where a message
/// quotes it (`"v"`, `` `v` ``, `'v'`), so a digit in a message's own text is
/// not taken for it.
fn scrub_env_values(problems: &mut [crate::Problem], read: &[(String, String)]) {
    let mut values: Vec<&(String, String)> = read.iter().filter(|(_, v)| !v.is_empty()).collect();
    // The longest first, so a value that contains another is replaced whole.
    values.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    for problem in problems {
        for (name, value) in &values {
            let shown = format!("the value of env:{name}");
            // A URL is shown with its credentials hidden: that form too.
            let redacted = secret::redact_url(value);
            for form in [redacted.as_str(), value.as_str()] {
                for (open, close) in [("\"", "\""), ("`", "`"), ("'", "'")] {
                    problem.message = problem
                        .message
                        .replace(&format!("{open}{form}{close}"), &shown);
                }
                if value.len() >= 8 {
                    problem.message = problem.message.replace(form, &shown);
                }
            }
        }
    }
}

// ---- shared checks ---------------------------------------------------------

/// `value`, or `default` when omitted; 0 is refused (none of these limits
/// means anything at zero).
pub(crate) fn positive<T: Copy + PartialEq + Default + std::fmt::Display>(
    value: Option<T>,
    default: T,
    scope: &Scope,
    option: &str,
    p: &mut Problems,
) -> T {
    match value {
        None => default,
        Some(v) if v == T::default() => {
            p.push(scope, option, "must be greater than 0");
            default
        }
        Some(v) => v,
    }
}

/// `value`, or `default` when omitted; 0 is refused as by [`positive`], and
/// so is a value above `limit` (its upper bound, [`crate::limits`]).
pub(crate) fn bounded<T: Copy + PartialOrd + Default + std::fmt::Display>(
    value: Option<T>,
    default: T,
    limit: T,
    scope: &Scope,
    option: &str,
    p: &mut Problems,
) -> T {
    match positive(value, default, scope, option, p) {
        v if v > limit => {
            above(scope, option, v, limit, p);
            default
        }
        v => v,
    }
}

/// Reports `value` of `option` above its upper bound `limit`.
pub(crate) fn above(
    scope: &Scope,
    option: &str,
    value: impl std::fmt::Display,
    limit: impl std::fmt::Display,
    p: &mut Problems,
) {
    p.push(
        scope,
        option,
        format!("{value} is above its upper bound, {limit} (config/ankusa.example.yaml lists every bound)"),
    );
}

/// Tenant, source and sink names: 1-64 of `A-Z a-z 0-9 _ -`, starting with a
/// letter or digit (they appear in URLs, the admin API and logs).
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{name}\" is not a valid name: 1-64 characters of A-Z a-z 0-9 _ -, starting with a letter or digit"
        ))
    }
}

/// An HTTP header name (an RFC 9110 token).
pub(crate) fn check_header_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("\"{name}\" is not a valid HTTP header name"))
    }
}

/// A dot path: non-empty segments separated by dots.
pub(crate) fn json_path(dotted: &str) -> Result<JsonPath, String> {
    let segments: Vec<String> = dotted.split('.').map(str::to_owned).collect();
    if dotted.is_empty() || segments.iter().any(String::is_empty) {
        return Err(format!(
            "\"{dotted}\" is not a JSON dot path: write member names separated by dots, e.g. data.object.customer"
        ));
    }
    Ok(JsonPath {
        dotted: dotted.to_owned(),
        segments,
    })
}

fn check_path(path: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("\"{path}\" is not a valid route: {why}"));
    if !path.starts_with('/') {
        return bad("it must start with /");
    }
    if path.len() > 256 {
        return bad("longer than 256 bytes");
    }
    let rest = &path[1..];
    if rest.is_empty() {
        return bad("it needs at least one segment");
    }
    // A cluster's nodes send each other hand-over pages under /_ankusa/
    // (docs/design.md section 11, "Hand-over").
    if rest == "_ankusa" || rest.starts_with("_ankusa/") {
        return bad("/_ankusa/ is reserved for the relay's own cluster traffic");
    }
    for seg in rest.split('/') {
        if seg.is_empty() {
            return bad("empty segment (// or a trailing /)");
        }
        if seg == "." || seg == ".." {
            return bad("a . or .. segment");
        }
        if !seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b))
        {
            return bad(
                "only letters, digits and -._~!$&'()*+,;=:@ in a segment (no spaces, ?, #, %)",
            );
        }
    }
    Ok(())
}

/// A notify destination may not be one of the relay's own listeners: a
/// notification posted to its ingest would be a hook whose dead letters
/// notify again, without end, and one posted to its admin API would act on
/// it (docs/design.md section 5, "Notifications"). The URL's host is compared
/// when it is an IP address or `localhost`; a listener on `0.0.0.0` or `::`
/// is every address of the machine.
fn notify_not_to_itself(
    sources: &[crate::model::Source],
    listeners: &crate::model::Listeners,
    p: &mut Problems,
) {
    for (i, s) in sources.iter().enumerate() {
        for e in &s.sinks {
            let Some(url) = e.options.get("url").and_then(serde_yaml_ng::Value::as_str) else {
                continue;
            };
            let Some((host, port)) = url_host_port(url) else {
                continue;
            };
            for (which, addr) in [("ingest", listeners.ingest), ("admin", listeners.admin)] {
                let same_host = match host {
                    Host::Loopback => addr.ip().is_loopback() || addr.ip().is_unspecified(),
                    Host::Ip(ip) => {
                        ip == addr.ip()
                            || addr.ip().is_unspecified()
                            || (ip.is_loopback() && addr.ip().is_loopback())
                    }
                };
                if same_host && port == addr.port() {
                    p.push(
                        &crate::error::Scope::Section("notify"),
                        format!("destinations[{i}].url"),
                        format!(
                            "is the relay's own {which} listener ({addr}): its notifications would come back to it"
                        ),
                    );
                }
            }
        }
    }
}

/// The host of a URL, as far as a listener comparison needs it.
enum Host {
    Loopback,
    Ip(std::net::IpAddr),
}

/// `http(s)://host[:port]/...` as (host, port), the scheme's port when none
/// is written; `None` for a host name other than `localhost`.
fn url_host_port(url: &str) -> Option<(Host, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default,
    };
    let host = if host.eq_ignore_ascii_case("localhost") {
        Host::Loopback
    } else {
        Host::Ip(host.parse().ok()?)
    };
    Some((host, port))
}
