//! The typed model: what every other crate reads. Built only by validation
//! (`crate::Config::from_yaml`), so every value here has passed the checks of
//! docs/design.md section 7 and ADR 0004 sections 1-2; defaults are filled in.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::secret::Secret;

/// A whole, valid configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// This node: its name, its store.
    pub node: Node,
    /// The two HTTP listeners.
    pub listeners: Listeners,
    /// The instance's store_headers policy (a source may replace it).
    pub store_headers: HeaderPolicy,
    /// The pipeline's batch and concurrency limits.
    pub dispatch: Dispatch,
    /// Retry backoff and horizon.
    pub retry: Retry,
    /// The breaker per (tenant, sink).
    pub breaker: Breaker,
    /// How long delivered hooks are kept, and how often they are reclaimed.
    pub retention: Retention,
    /// The tenants, in file order (at least one).
    pub tenants: Vec<Tenant>,
    /// The sources, in file order.
    pub sources: Vec<Source>,
    /// `cluster`: this node's place in a cluster of relays on etcd
    /// (docs/design.md section 11); `None`, the default, is a standalone
    /// relay.
    pub cluster: Option<Cluster>,
    /// `notify`: the relay's own notifications (docs/design.md section 5,
    /// "Notifications"); `None` without destinations. Its destinations are
    /// delivered through the internal tenant and sources this configuration
    /// also holds (`tenants` and `sources` end with them:
    /// [`crate::is_internal`]).
    pub notify: Option<crate::Notify>,
}

impl Config {
    /// The source named `name`.
    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// The tenant named `name`.
    pub fn tenant(&self, name: &str) -> Option<&Tenant> {
        self.tenants.iter().find(|t| t.name == name)
    }

    /// The sources the file configures, without the internal ones the
    /// relay adds for itself (the notify destinations: [`crate::is_internal`]).
    pub fn configured_sources(&self) -> impl Iterator<Item = &Source> {
        self.sources.iter().filter(|s| !crate::is_internal(&s.name))
    }
}

/// `cluster`: cluster mode (docs/design.md section 11, README "Running a
/// cluster"). `node_id` and `advertise` are this node's; the rest is the
/// cluster's and must be the same on every node, as must every section but
/// `node` and `listeners` (the catalog compares the digests of
/// [`crate::shared_sections`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// `node_id`: this node's name in the catalog, unique in the cluster and
    /// stable across restarts (the tenants it owns are recorded under it).
    pub node_id: String,
    /// `etcd`: the client URLs of the etcd members (`http://host:port`), at
    /// least one; each call tries them in turn.
    pub etcd: Vec<String>,
    /// `advertise`: where the other nodes forward the hooks of the tenants
    /// this node owns (`host:port` of its ingest listener as they reach
    /// it). Default: `listeners.ingest`, which must then not be an
    /// unspecified address (`0.0.0.0`).
    pub advertise: String,
    /// `lease_ttl_ms`: the TTL of this node's lease in etcd, whole seconds
    /// (etcd's unit), 2,000 to 60,000. Default 3,000. A node that has not
    /// renewed within it loses its tenants (a failover); it stops
    /// acknowledging before then, by its own clock.
    pub lease_ttl_ms: u64,
    /// `hold_ms`: how long a hook for a tenant that has no live owner (a
    /// failover in progress) is held before it is answered 503 with
    /// `Retry-After`. Default 4,000; at most 60,000.
    pub hold_ms: u64,
    /// `name`: the cluster's name, the prefix of its keys in etcd
    /// (`/ankusa/<name>/`), so clusters can share etcd members. Default
    /// `ankusa`.
    pub name: String,
}

/// `node`: this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's name, in logs and metrics. Default `ankusa`.
    pub name: String,
    /// Where the store lives. Default `./data` (relative to the working
    /// directory).
    pub data_dir: PathBuf,
    /// The storage engine. Default RocksDB.
    pub store: StoreBackend,
    /// The node's bound on pending deliveries, all tenants together (the edge
    /// answers 503 + Retry-After above it). Default 1,000,000; at most
    /// [`crate::limits::MAX_PENDING`].
    pub max_pending: u64,
    /// The node's bound on the bytes of pending deliveries. Default 1 GiB;
    /// at most [`crate::limits::MAX_PENDING_BYTES`].
    pub max_pending_bytes: u64,
    /// The format of the log lines (`node.log_format`; `serve --log-format`
    /// overrides it). Default [`LogFormat::Text`].
    pub log_format: LogFormat,
    /// `node.otel`: OpenTelemetry export of the relay's spans; `None` when
    /// the file has no `otel` (the standard `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// still turns the export on in a binary built with it).
    pub otel: Option<Otel>,
    /// `node.attempt_log`: what the store keeps of each delivery attempt.
    pub attempt_log: AttemptLog,
}

/// `node.attempt_log`: every attempt of every delivery row kept with its
/// time, duration, outcome and the destination's answer, the last
/// `max_attempts` per row, until retention removes the hook
/// (docs/design.md section 3, "The attempt log"). Read at start: a reload
/// refuses a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptLog {
    /// `enabled`: keep the log. Default true. Off, attempts write nothing to
    /// it (what was written stays until retention).
    pub enabled: bool,
    /// `max_attempts`: the attempts kept per row, the newest. Default 20,
    /// 1 to [`crate::limits::ATTEMPT_LOG_MAX_ATTEMPTS`].
    pub max_attempts: u32,
    /// `max_body_bytes`: the first bytes of an HTTP answer's body kept.
    /// Default 4,096; 0 keeps none; at most
    /// [`crate::limits::ATTEMPT_LOG_MAX_BODY_BYTES`] (what the HTTP sink
    /// reads of an answer).
    pub max_body_bytes: u32,
}

impl Default for AttemptLog {
    fn default() -> Self {
        AttemptLog {
            enabled: true,
            max_attempts: crate::defaults::ATTEMPT_LOG_MAX_ATTEMPTS,
            max_body_bytes: crate::defaults::ATTEMPT_LOG_MAX_BODY_BYTES,
        }
    }
}

/// `node.otel`: OpenTelemetry export of the `ingest` and `delivery` spans
/// over OTLP/HTTP (README, "Logs"). Only a binary built with the cargo
/// feature `otel` exports; one without it refuses a file that has this
/// section, naming it. Each value given here wins over its standard
/// environment variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Otel {
    /// `endpoint`: the collector's OTLP/HTTP base URL, `http://` or
    /// `https://` (`/v1/traces` is appended, as to
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`). `None`: the environment's
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is, or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`), else `http://localhost:4318`.
    pub endpoint: Option<String>,
    /// `service_name`: the `service.name` of the exported resource. `None`:
    /// `OTEL_SERVICE_NAME` (or a `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`), else `ankusa`.
    pub service_name: Option<String>,
    /// `filter`: which spans are exported, in `RUST_LOG`'s directive syntax,
    /// apart from the log lines' `RUST_LOG`. Default
    /// [`crate::defaults::OTEL_FILTER`] (`ankusa=debug`: both spans, even
    /// when the log lines are at `info`). The binary checks its syntax.
    pub filter: String,
}

/// `node.log_format`: how `serve` writes its log lines (to stdout, one event
/// a line; `RUST_LOG` filters them in either format).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `text`: tracing-subscriber's human-readable lines (default).
    #[default]
    Text,
    /// `json`: one JSON object a line (tracing-subscriber's JSON formatter:
    /// `timestamp`, `level`, `fields`, `target`, and `span`/`spans` for the
    /// spans an event is in).
    Json,
}

impl LogFormat {
    /// The name as written in the file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The storage engine of `node.store` (docs/design.md section 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreBackend {
    /// `rocksdb`: production default.
    RocksDb,
    /// `fjall`: the pure-Rust alternative.
    Fjall,
    /// `memory`: nothing survives a restart; tests and demos only.
    Memory,
}

impl StoreBackend {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreBackend::RocksDb => "rocksdb",
            StoreBackend::Fjall => "fjall",
            StoreBackend::Memory => "memory",
        }
    }
}

/// `listeners`: the ingest and admin HTTP listeners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listeners {
    /// Where providers POST hooks. Default `127.0.0.1:8080`.
    pub ingest: SocketAddr,
    /// The admin API and `/metrics`. Default `127.0.0.1:8081`.
    pub admin: SocketAddr,
    /// The admin API's bearer token. Optional only while `admin` is a
    /// loopback address.
    pub admin_token: Option<Secret>,
    /// Whether `/metrics` asks for the admin token too (when one is
    /// configured). Default false: a Prometheus scraper needs no secret;
    /// `/healthz` and `/readyz` never ask.
    pub metrics_require_token: bool,
    /// The largest body the edge accepts (413 above). Default 25 MiB; at
    /// most [`crate::limits::BODY_LIMIT_BYTES`].
    pub body_limit_bytes: u64,
    /// The bytes of request bodies the edge holds in memory at once (received
    /// so far and being read, verified and committed), all ingest connections
    /// together (README, "Limits"): each body's bytes are taken from it as they
    /// arrive (never by `Content-Length` ahead of them); a request whose bytes
    /// do not fit gets 503 with `Retry-After` and nothing more of its body is
    /// read. Default 256 MiB; at least `body_limit_bytes`; at most
    /// [`crate::limits::BODY_BUDGET_BYTES`].
    pub body_budget_bytes: u64,
}

/// What the store keeps of one request header (docs/design.md section 3: the stored
/// envelope's headers are "after the store_headers policy").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderAction {
    /// Store the value as received.
    Keep,
    /// Do not store the header.
    Drop,
    /// Store a hash of the value instead of the value.
    Hash,
}

impl HeaderAction {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderAction::Keep => "keep",
            HeaderAction::Drop => "drop",
            HeaderAction::Hash => "hash",
        }
    }
}

/// A store_headers policy: an action per header name, and a default action for
/// every other header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderPolicy {
    /// The action of a header not in `headers`. Default keep.
    pub default: HeaderAction,
    /// Actions by header name, lowercased.
    pub headers: BTreeMap<String, HeaderAction>,
}

impl HeaderPolicy {
    /// The action for `name` (matched case-insensitively).
    pub fn action(&self, name: &str) -> HeaderAction {
        self.headers
            .get(&name.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.default)
    }
}

impl Default for HeaderPolicy {
    /// Keep every header.
    fn default() -> HeaderPolicy {
        HeaderPolicy {
            default: HeaderAction::Keep,
            headers: BTreeMap::new(),
        }
    }
}

/// `dispatch`: the pipeline's limits (docs/design.md section 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    /// Due rows claimed per tenant visit, and the lane promotion budget per
    /// visit (ADR 0004 section 1). Default 64; at most [`crate::limits::BATCH`].
    pub batch: u32,
    /// Sink calls at once per sink and tenant (HTTP, file). Default 8; at
    /// most [`crate::limits::SINK_CONCURRENCY`].
    pub sink_concurrency: u32,
    /// Sink calls at once per sink and tenant for the sinks whose client
    /// pipelines them (Kafka, NATS, Redis, RabbitMQ, Pub/Sub, SQS): unordered
    /// hooks and lanes, each lane one call at a time. Default 256; at most
    /// [`crate::limits::PIPELINED_CONCURRENCY`].
    pub pipelined_concurrency: u32,
    /// The admission window: claimed (in-flight) deliveries the node holds at
    /// once, all tenants together. Default 1024; at most
    /// [`crate::limits::ADMISSION_WINDOW`].
    pub admission_window: u32,
    /// The admission window in bytes of claimed deliveries. Default 64 MiB;
    /// at most [`crate::limits::ADMISSION_WINDOW_BYTES`].
    pub admission_window_bytes: u64,
    /// How long the pipeline collects outcomes before it commits them as one
    /// batch. Default 0: the next engine step commits every outcome that came
    /// in meanwhile (docs/design.md section 5, "Committer"). At most
    /// [`crate::limits::FLUSH_INTERVAL_MS`] (10 s).
    pub flush_interval_ms: u64,
}

/// `retry`: exponential backoff with full jitter (docs/design.md section 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retry {
    /// The first backoff. Default 1 s.
    pub base_ms: u64,
    /// The largest backoff. Default 10 min.
    pub max_ms: u64,
    /// A delivery dead-letters this long after its first attempt. Default
    /// 24 h.
    pub max_elapsed_ms: u64,
    /// The longest a Retry-After holds a delivery, ms (0: the backoff alone
    /// decides); `None`: each sink entry's effective `max_ms`.
    pub retry_after_max_ms: Option<u64>,
}

impl Retry {
    /// `max_elapsed_ms` as a duration.
    pub fn max_elapsed(&self) -> Duration {
        Duration::from_millis(self.max_elapsed_ms)
    }
}

/// A sink entry's retry policy (`retry:` on the entry, docs/design.md section
/// 5, "Retry policy"): the global [`Retry`] with the entry's overrides
/// applied field by field, and what only an entry can set. Every sink entry
/// has one (the global values when it sets nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkRetry {
    /// The first backoff, ms (the entry's `retry.base_ms`, else `retry.base_ms`).
    pub base_ms: u64,
    /// The largest backoff, ms (the entry's, else the global).
    pub max_ms: u64,
    /// The retry horizon, ms after the first attempt (the entry's, else the
    /// global).
    pub max_elapsed_ms: u64,
    /// The longest a Retry-After holds a row, ms; 0: a Retry-After holds it
    /// no longer than the backoff. Default: the global
    /// `retry.retry_after_max_ms`, else this entry's effective `max_ms`.
    pub retry_after_max_ms: u64,
    /// The HTTP error statuses (400-599, ascending) an http sink retries;
    /// `None` is the default, 408, 425, 429 and 5xx. Only an http entry
    /// takes the option.
    pub retry_statuses: Option<Vec<u16>>,
    /// For this long after a row's first attempt, every 4xx answer is
    /// retried, ms (http entries only); `None` (or 0) is no grace.
    pub grace_ms: Option<u64>,
    /// Whether the entry has a `retry:` key of its own.
    pub overridden: bool,
}

impl SinkRetry {
    /// The global policy, nothing overridden.
    pub fn from_global(global: &Retry) -> SinkRetry {
        SinkRetry {
            base_ms: global.base_ms,
            max_ms: global.max_ms,
            max_elapsed_ms: global.max_elapsed_ms,
            retry_after_max_ms: global.retry_after_max_ms.unwrap_or(global.max_ms),
            retry_statuses: None,
            grace_ms: None,
            overridden: false,
        }
    }
}

/// `breaker`: one per (tenant, source, sink entry) (docs/design.md section 5,
/// "Breaker").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breaker {
    /// Consecutive failures that open it. Default 5; at most
    /// [`crate::limits::BREAKER_FAILURES`].
    pub failures: u32,
    /// How many different lanes (rows, for an unordered sink) those failures
    /// must come from, at least, so one key the receiver always refuses
    /// cannot open it. Default min(3, `failures`); at most `failures`.
    pub distinct: u32,
    /// How long it stays open before it half-opens. Default 30 s; at most
    /// [`crate::limits::BREAKER_OPEN_MS`].
    pub open_ms: u64,
}

/// `retention`: how long the store keeps a hook that nothing refers to any
/// more (delivered to every sink, or dropped from quarantine), and how often
/// the pipeline reclaims them (docs/design.md section 5, "Retention").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A hook's envelope and archive entry are deleted once it was received
    /// this long ago and no delivery row (pending or dead-lettered) and no
    /// quarantine refers to it. Default 7 days; at most
    /// [`crate::limits::RETENTION_KEEP_MS`].
    pub keep_ms: u64,
    /// How often the background sweep runs (each run reads every tenant's
    /// archive in bounded pages, and expires stale dedupe records). Default
    /// 60 s; at most [`crate::limits::RETENTION_INTERVAL_MS`].
    pub interval_ms: u64,
}

/// What the edge does with a hook whose signature does not verify
/// (`on_invalid_signature`, docs/design.md section 5, "Quarantine").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInvalidSignature {
    /// `reject`: 401, nothing stored (the default).
    Reject,
    /// `quarantine`: committed to quarantine with the verification error as
    /// its reason and answered 202; never delivered unless released.
    Quarantine,
}

/// A tenant and its queue bounds (the edge answers 429 + Retry-After above
/// them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant {
    /// The name (in a TenantPath URL, the admin API, the store registry).
    pub name: String,
    /// Pending deliveries (lane members included). Default 100,000; at most
    /// [`crate::limits::MAX_PENDING`].
    pub max_pending: u64,
    /// Bytes of pending deliveries. Default 256 MiB; at most
    /// [`crate::limits::MAX_PENDING_BYTES`].
    pub max_pending_bytes: u64,
}

/// Which tenant a source's hooks belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenantBinding {
    /// Every hook goes to this tenant.
    Fixed(String),
    /// TenantPath: the tenant is the last segment of `{path}/{tenant}`; a
    /// tenant that is not configured is refused by the edge.
    Path,
}

/// A source: a route, its verification, dedupe, header policy and sinks.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// Unique name.
    pub name: String,
    /// Unique route. Default `/hooks/{name}`. A TenantPath source is
    /// reached at `{path}/{tenant}` only.
    pub path: String,
    /// The tenant its hooks belong to.
    pub tenant: TenantBinding,
    /// Signature verification.
    pub verification: Verification,
    /// Dedupe of provider retries, if any.
    pub dedupe: Option<Dedupe>,
    /// A GET subscription challenge the edge answers itself, if any.
    pub challenge: Option<Challenge>,
    /// The effective store_headers policy: the source's override if it has
    /// one, else the instance's.
    pub store_headers: HeaderPolicy,
    /// Whether `store_headers` is the source's own override.
    pub store_headers_overridden: bool,
    /// The sinks, in file order. Each entry's [`SinkEntry::index`] is its
    /// position when loaded; `ankusa serve` replaces it with the entry's slot
    /// in the store, found by its name (docs/design.md section 5,
    /// "Unconfigured sources and sinks"), so a reordered list changes nothing.
    pub sinks: Vec<SinkEntry>,
    /// `paused: true`: its hooks are accepted and committed as usual, and none
    /// is delivered to any of its sinks until it is resumed (docs/design.md
    /// section 5, "Pause"). Default false.
    pub paused: bool,
    /// `quarantine: true`: every hook that passes verification is committed to
    /// quarantine (answered 202) instead of being delivered: a new integration
    /// under review. Default false.
    pub quarantine: bool,
    /// What a failed signature does. Default [`OnInvalidSignature::Reject`].
    pub on_invalid_signature: OnInvalidSignature,
}

impl Source {
    /// Whether any sink of the source is ordered (the edge resolves ordering
    /// keys only for such a source).
    pub fn has_ordered_sink(&self) -> bool {
        self.sinks.iter().any(|s| s.order.is_ordered())
    }

    /// The sink named `name`.
    pub fn sink(&self, name: &str) -> Option<&SinkEntry> {
        self.sinks.iter().find(|s| s.name == name)
    }
}

/// HMAC digest of the generic `hmac` scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HmacAlgorithm {
    /// `sha1` (legacy providers only).
    Sha1,
    /// `sha256`, the default.
    Sha256,
    /// `sha512`.
    Sha512,
}

/// How the generic `hmac` scheme's signature is written in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignatureEncoding {
    /// Lowercase or uppercase hex, the default.
    Hex,
    /// Standard base64.
    Base64,
}

/// A source's signature verification. Every verifying scheme has at least
/// one secret; any secret that matches accepts the hook (rotation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verification {
    /// No verification.
    None,
    /// GitHub: `X-Hub-Signature-256: sha256=hex(HMAC-SHA256(secret, body))`.
    Github {
        /// The secrets.
        secrets: Vec<Secret>,
    },
    /// Stripe: `Stripe-Signature: t=..,v1=..`, timestamp within the tolerance.
    Stripe {
        /// The secrets.
        secrets: Vec<Secret>,
        /// Allowed clock difference, both directions, in ms. Default
        /// 300,000; at most [`crate::limits::TOLERANCE_MS`].
        tolerance_ms: u64,
    },
    /// Shopify: `X-Shopify-Hmac-Sha256: base64(HMAC-SHA256(secret, body))`.
    Shopify {
        /// The secrets.
        secrets: Vec<Secret>,
    },
    /// Slack: `X-Slack-Signature: v0=..` over `v0:<ts>:<body>`.
    Slack {
        /// The secrets.
        secrets: Vec<Secret>,
        /// Allowed clock difference, both directions, in ms. Default
        /// 300,000; at most [`crate::limits::TOLERANCE_MS`].
        tolerance_ms: u64,
    },
    /// Standard Webhooks / Svix: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature` (or the `svix-` names); `whsec_` secrets.
    StandardWebhooks {
        /// The secrets.
        secrets: Vec<Secret>,
        /// Allowed clock difference, both directions, in ms. Default
        /// 300,000; at most [`crate::limits::TOLERANCE_MS`].
        tolerance_ms: u64,
    },
    /// A generic HMAC of the body in one header.
    Hmac {
        /// The header that carries the signature, lowercased.
        header: String,
        /// The digest. Default sha256.
        algorithm: HmacAlgorithm,
        /// How the digest is written. Default hex.
        encoding: SignatureEncoding,
        /// Text before the digest in the header (`sha256=`). Default empty.
        prefix: String,
        /// The secrets.
        secrets: Vec<Secret>,
    },
}

impl Verification {
    /// The scheme's name as written in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            Verification::None => "none",
            Verification::Github { .. } => "github",
            Verification::Stripe { .. } => "stripe",
            Verification::Shopify { .. } => "shopify",
            Verification::Slack { .. } => "slack",
            Verification::StandardWebhooks { .. } => "standard_webhooks",
            Verification::Hmac { .. } => "hmac",
        }
    }

    /// The secrets (empty for [`Verification::None`]).
    pub fn secrets(&self) -> &[Secret] {
        match self {
            Verification::None => &[],
            Verification::Github { secrets }
            | Verification::Stripe { secrets, .. }
            | Verification::Shopify { secrets }
            | Verification::Slack { secrets, .. }
            | Verification::StandardWebhooks { secrets, .. }
            | Verification::Hmac { secrets, .. } => secrets,
        }
    }

    /// The timestamp tolerance of a scheme that signs a timestamp.
    pub fn tolerance_ms(&self) -> Option<u64> {
        match self {
            Verification::Stripe { tolerance_ms, .. }
            | Verification::Slack { tolerance_ms, .. }
            | Verification::StandardWebhooks { tolerance_ms, .. } => Some(*tolerance_ms),
            _ => None,
        }
    }
}

/// A dot path into a JSON body (`data.object.customer`), normalized to
/// segments. It walks object members only (docs/design.md section 10): a segment
/// `0` is the member named "0", never an array index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPath {
    /// The path as written.
    pub dotted: String,
    /// Its segments, none empty.
    pub segments: Vec<String>,
}

/// Where a key comes from: a request header, or a string at a JSON path of
/// the body. Used by dedupe and by ordering keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// `{header: NAME}`: the first value of the header, matched
    /// case-insensitively (the name is stored lowercased).
    Header(String),
    /// `{json: a.b.c}`: the string at that path.
    Json(JsonPath),
}

/// `dedupe`: drop provider retries of a hook already accepted (scoped per
/// source, docs/design.md section 10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dedupe {
    /// Where the dedupe key comes from.
    pub key: KeySource,
    /// How long a key is remembered. Default 72 h (Stripe retries for up to
    /// three days); at most [`crate::limits::DEDUPE_TTL_MS`].
    pub ttl_ms: u64,
}

/// `challenge`: a provider's GET handshake, answered by the edge without
/// storing anything (docs/design.md section 5): a GET to the source's path is answered
/// 200 with the value of the query parameter `query` as the body (Meta's
/// `hub.challenge`, Dropbox's `challenge`). With a token, the query parameter
/// `token_query` must equal it, or the GET is answered 403.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The query parameter echoed back.
    pub query: String,
    /// The query parameter that carries the token, and the token; both or
    /// neither.
    pub token: Option<(String, Secret)>,
}

/// What a key function is given: the request as received.
#[derive(Clone, Copy, Debug)]
pub struct KeyInput<'a> {
    /// The source's name.
    pub source: &'a str,
    /// The hook's tenant.
    pub tenant: &'a str,
    /// Every request header in received order (names lowercased), values as
    /// received.
    pub headers: &'a [(&'a str, &'a [u8])],
    /// The body as received.
    pub body: &'a [u8],
}

/// The signature of an ordering key function: `None` is "no key" (the
/// keyless lane).
pub type KeyFnInner =
    dyn Fn(&KeyInput<'_>) -> Option<Vec<u8>> + Send + Sync + std::panic::RefUnwindSafe;

/// An ordering key given as a Rust function through the library API (the
/// ADR's `{mod, fun, args}` form; YAML cannot express it). The edge calls it
/// under `catch_unwind`: a panic is "no key" (ADR 0004 section 2). It is on
/// the ack path: keep it pure and fast.
#[derive(Clone)]
pub struct KeyFn(pub Arc<KeyFnInner>);

impl KeyFn {
    /// Wraps a function.
    pub fn new(
        f: impl Fn(&KeyInput<'_>) -> Option<Vec<u8>> + Send + Sync + std::panic::RefUnwindSafe + 'static,
    ) -> KeyFn {
        KeyFn(Arc::new(f))
    }

    /// Calls it. The caller owns the `catch_unwind`.
    pub fn call(&self, input: &KeyInput<'_>) -> Option<Vec<u8>> {
        (self.0)(input)
    }
}

impl fmt::Debug for KeyFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyFn(..)")
    }
}

impl PartialEq for KeyFn {
    /// The same function object.
    fn eq(&self, other: &KeyFn) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The ordering key of an ordered sink (ADR 0004 section 1).
#[derive(Clone, Debug, PartialEq)]
pub enum OrderingKey {
    /// `{header: NAME}` (the header must survive the source's store_headers
    /// policy: ADR 0004 section 2).
    Header(String),
    /// `{json: a.b.c}`.
    Json(JsonPath),
    /// A Rust function (library API only).
    Func(KeyFn),
    /// `[{json: data.object.customer}, {json: data.object.id}]`: the places
    /// tried in order; the first that holds a non-empty key gives it (ADR
    /// 0004 section 1). Each is a `Header` or a `Json`; at most
    /// [`crate::defaults::ORDERING_KEY_PLACES`].
    FirstOf(Vec<OrderingKey>),
}

/// Whether a sink entry is ordered, and by what key.
#[derive(Clone, Debug, PartialEq)]
pub enum Order {
    /// `ordered: false` (the default): deliveries run concurrently.
    Unordered,
    /// `ordered: true`: one lane per key (ADR 0004).
    Ordered {
        /// The key; `None` (no `ordering_key`) sends every hook to the
        /// sink's one keyless lane, so the sink is delivered strictly in
        /// commit order per tenant.
        key: Option<OrderingKey>,
    },
}

impl Order {
    /// `ordered: true`.
    pub fn is_ordered(&self) -> bool {
        matches!(self, Order::Ordered { .. })
    }

    /// The ordering key, if ordered with one.
    pub fn key(&self) -> Option<&OrderingKey> {
        match self {
            Order::Ordered { key } => key.as_ref(),
            Order::Unordered => None,
        }
    }
}

/// The `type` of a sink entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SinkKind {
    /// `http`
    Http,
    /// `file`
    File,
    /// `sqs`
    Sqs,
    /// `pubsub` (Google Pub/Sub)
    Pubsub,
    /// `kafka`
    Kafka,
    /// `rabbitmq`
    Rabbitmq,
    /// `nats`
    Nats,
    /// `redis`
    Redis,
}

impl SinkKind {
    /// Every kind, in the order of the docs.
    pub const ALL: [SinkKind; 8] = [
        SinkKind::Http,
        SinkKind::File,
        SinkKind::Sqs,
        SinkKind::Pubsub,
        SinkKind::Kafka,
        SinkKind::Rabbitmq,
        SinkKind::Nats,
        SinkKind::Redis,
    ];

    /// The name as written in the file (and the `kind()` of the adapter).
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Http => "http",
            SinkKind::File => "file",
            SinkKind::Sqs => "sqs",
            SinkKind::Pubsub => "pubsub",
            SinkKind::Kafka => "kafka",
            SinkKind::Rabbitmq => "rabbitmq",
            SinkKind::Nats => "nats",
            SinkKind::Redis => "redis",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<SinkKind> {
        SinkKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// The options of an `http` sink, checked here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSink {
    /// Where hooks are POSTed: an `http://` or `https://` URL with a host.
    pub url: String,
    /// Timeout of one request, in ms. Default 10,000; at most
    /// [`crate::limits::SINK_TIMEOUT_MS`].
    pub timeout_ms: u64,
    /// Extra request headers, by lowercased name; a value written `env:NAME`
    /// is resolved at load.
    pub headers: BTreeMap<String, Secret>,
}

/// The options of a `file` sink, checked here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSink {
    /// The NDJSON file hooks are appended to.
    pub path: PathBuf,
}

/// The options checked here, for the kinds this crate knows the shape of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypedOptions {
    /// `http`.
    Http(HttpSink),
    /// `file`.
    File(FileSink),
    /// Every other kind: its sink crate validates [`SinkEntry::options`].
    Unchecked,
}

/// One entry of a source's `sinks`.
#[derive(Clone, Debug, PartialEq)]
pub struct SinkEntry {
    /// Unique within the source. Default `<type>-<index>` (`http-0`).
    pub name: String,
    /// The type.
    pub kind: SinkKind,
    /// The store's `sink:16` of its rows: its position in the source's list
    /// as loaded; `ankusa serve` sets it to the entry's slot, which follows
    /// its name (docs/design.md section 5, "Unconfigured sources and sinks").
    pub index: u16,
    /// Ordered or not, and by what key.
    pub order: Order,
    /// `paused: true`: rows for this sink wait (in order, for an ordered
    /// sink) until it is resumed; the source's other sinks deliver as usual.
    /// Default false.
    pub paused: bool,
    /// `rate_limit: {per_second, burst}`: at most this many hooks a second go
    /// to the sink (docs/design.md section 5, "Rate limit"). Default none.
    pub rate_limit: Option<RateLimit>,
    /// The retry policy: the global `retry` section with the entry's
    /// `retry:` overrides (docs/design.md section 5, "Retry policy").
    pub retry: SinkRetry,
    /// The sink's own options: the entry without the keys core reads
    /// (`type`, `name`, `ordered`, and `ordering_key` except a Pub/Sub legacy
    /// key, which stays: ADR 0004 section 1). Every string written `env:NAME`
    /// has been replaced by the variable's value.
    pub options: serde_yaml_ng::Mapping,
    /// The options checked here (http, file).
    pub typed: TypedOptions,
    /// `filter`: the conditions a hook must all meet for this sink to get a
    /// delivery row, decided at ingest (and again, with the stored headers,
    /// at a quarantine release or an archive replay). Empty (no `filter`):
    /// every hook of the source.
    pub filter: Vec<FilterCondition>,
    /// `transform: {jq, timeout_ms, max_output_bytes}`: the compiled jq
    /// program whose one output, run on the stored body at each delivery, is
    /// the body this sink gets (docs/design.md section 6, "Transforms").
    /// `None`: the body as received.
    pub transform: Option<std::sync::Arc<ankusa_transform::Program>>,
    /// `auto_pause_after_ms`: a sink entry whose every attempt has failed
    /// for this long is paused by the pipeline, as the admin API's pause
    /// does (docs/design.md section 5, "Pause" and "Notifications"). From
    /// [`crate::limits::AUTO_PAUSE_AFTER_MS`]'s least to its most; `None`
    /// (the default): never.
    pub auto_pause_after_ms: Option<u64>,
    /// `dead_letter: release | hold` (ADR 0004 section 8): what a
    /// dead-lettered lane head does to its key's later hooks. Only on an
    /// ordered entry; [`DeadLetterLane::Release`] by default.
    pub dead_letter: DeadLetterLane,
}

/// An ordered sink entry's `dead_letter` option (ADR 0004 section 8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeadLetterLane {
    /// `release` (the default): a dead-lettered head leaves its lane and the
    /// key's next hook is delivered; a revive of the dead letter runs after
    /// the key's later hooks.
    #[default]
    Release,
    /// `hold`: the key's later hooks wait behind the dead-lettered head
    /// (other keys flow) until an operator revives it (it goes first) or
    /// drops it.
    Hold,
}

impl DeadLetterLane {
    /// The option's value as written in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeadLetterLane::Release => "release",
            DeadLetterLane::Hold => "hold",
        }
    }
}

/// A sink entry's `rate_limit` (docs/design.md section 5, "Rate limit"):
/// applied in dispatch, shared by every tenant of the source; rows over the
/// rate wait due, holding no call slot and no admission window room.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Hooks per second on average: above 0, at most 1,000,000; a fraction
    /// is allowed (0.5 is one hook every 2 s).
    pub per_second: f64,
    /// Hooks that may go back to back after a quiet spell: 1 to 1,000,000.
    /// Default `per_second` rounded up.
    pub burst: u32,
}

impl SinkEntry {
    /// [`SinkEntry::options`] as the JSON map the sinks crate builds adapters
    /// from (`ankusa_sinks::Options`). Keys are strings (checked at load);
    /// a YAML tag is dropped (its value is kept); a non-finite float is null.
    pub fn options_json(&self) -> serde_json::Map<String, serde_json::Value> {
        self.options
            .iter()
            .map(|(k, v)| (crate::sink::key_text(k), crate::sink::yaml_to_json(v)))
            .collect()
    }
}

/// One condition of a sink entry's `filter` (YAML
/// `{header: NAME, <test>}` or `{json: a.b.c, <test>}`): what it reads, and
/// the test that value must pass. A list of conditions matches when every
/// condition does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterCondition {
    /// What the condition reads: the first value of a header (the name is
    /// stored lowercased, matched case-insensitively; the source's
    /// store_headers policy keeps it), or the value at a JSON dot path of the
    /// body (object members only).
    pub on: KeySource,
    /// The test.
    pub test: FilterTest,
}

/// The test of a [`FilterCondition`]. Every compared value is a string: a
/// header value is compared byte for byte with the UTF-8 of the string, a
/// JSON value must be a JSON string (a number, boolean, null, object or array
/// never equals, is never one of, never has a prefix). A body that is not
/// JSON (or is over 1 MiB, the JSON key limit) has no JSON value at any path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterTest {
    /// `equals: TEXT`: the value is exactly this (case-sensitive).
    Equals(String),
    /// `one_of: [A, B, ...]` (at least one): the value is exactly one of these.
    OneOf(Vec<String>),
    /// `prefix: TEXT` (not empty): the value starts with this.
    Prefix(String),
    /// `exists: true`: the header is present (any value, empty included), or
    /// the JSON path holds a value other than null (any type). `exists:
    /// false`: the opposite, a body that is not JSON included.
    Exists(bool),
}
