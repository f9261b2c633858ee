//! The answers of the admin API as types (docs/design.md section 5, "Admin
//! API"): what the listener ([`crate::http`]) serialises, and what its
//! clients (`ankusa tenants`, `dlq`, `jobs`, ..., and `ankusa top`)
//! deserialise; and the two request bodies ([`JobRequest`],
//! [`PauseRequest`]), which the listener reads and the CLI writes. One type
//! per schema of the OpenAPI document (`http/openapi.json`, served at
//! `/v1/openapi.json`), named as the document names it;
//! `admin/tests/it/openapi.rs` holds the two together.
//!
//! # The wire
//! - Every field of an answer is always written: an `Option` is `null` when
//!   absent, never left out (no answer's field is skipped when empty), as
//!   the document requires. A request body leaves out what it does not give.
//! - The listener writes an answer through `serde_json::Value`, whose
//!   objects are sorted by key: the bytes do not depend on the order of the
//!   fields here, which follow the document.
//! - An answer read ignores fields it does not know, so a client reads the
//!   answer of a relay that added one; a request body with a field it does
//!   not know is refused (400), so a typo is not a filter silently ignored.
//!
//! These types hold only data and serde (no store, no HTTP); the job kinds
//! and states are the job model's own enums ([`JobKind`], [`JobState`]).
//! They live in this crate, not one of their own, because their one client,
//! the `ankusa` binary, already depends on it.

use serde::{Deserialize, Serialize};

use crate::jobs::{JobKind, JobState};

/// Every error of the API: `{"error": {"code", "message"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The inside of an [`Error`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable and machine-readable: `bad_request`, `unauthorized`,
    /// `forbidden`, `not_found`, `method_not_allowed`, `conflict`,
    /// `payload_too_large`, `unprocessable`, `request_timeout`,
    /// `too_many_requests`, `unavailable`, `store_failed`.
    pub code: String,
    /// For a person.
    pub message: String,
}

/// One page of a list: its items and the cursor of the next page (`None`:
/// the list is done). The document names each list's schema:
/// [`TenantList`], [`SourceList`], [`DeadLetterList`], [`JobList`],
/// [`QuarantineList`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// This page's items.
    pub items: Vec<T>,
    /// Opaque; pass it as `cursor` for the next page.
    pub next_cursor: Option<String>,
}

impl<T> Default for Page<T> {
    fn default() -> Self {
        Page {
            items: Vec::new(),
            next_cursor: None,
        }
    }
}

/// `GET /v1/tenants`.
pub type TenantList = Page<Tenant>;
/// `GET /v1/sources`.
pub type SourceList = Page<Source>;
/// `GET /v1/dead-letters`.
pub type DeadLetterList = Page<DeadLetter>;
/// `GET /v1/jobs`.
pub type JobList = Page<Job>;
/// `GET /v1/tenants/{tenant}/quarantine`.
pub type QuarantineList = Page<QuarantinedItem>;

/// A tenant's maintained counters (docs/design.md section 3), read with
/// point gets: `_bytes` are bytes, `_total` are monotonic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Rows pending: due, held, in flight or lane members.
    pub pending: i64,
    /// Bytes of the pending rows.
    pub pending_bytes: i64,
    /// Rows claimed by a sink call now.
    pub in_flight: i64,
    /// Dead letters.
    pub dead: i64,
    /// Bytes of the dead letters.
    pub dead_bytes: i64,
    /// Hooks held in quarantine.
    pub quarantined: i64,
    /// Rows delivered since the store was made.
    pub delivered_total: i64,
    /// Rows dead-lettered since the store was made.
    pub dead_lettered_total: i64,
    /// Retries scheduled since the store was made.
    pub retries_total: i64,
    /// Busy ordering lanes.
    pub lanes: i64,
    /// Lanes whose head waits for a retry.
    pub lanes_blocked: i64,
    /// Rows waiting behind a lane's head.
    pub lane_members: i64,
    /// Lanes held by a dead-lettered head until it is revived or dropped
    /// (`dead_letter: hold`, ADR 0004 section 8). Absent from an older
    /// relay's answer: 0.
    #[serde(default)]
    pub lanes_held: i64,
}

fn release() -> String {
    "release".to_owned()
}

/// `GET /v1/tenants/{tenant}`: one tenant the store knows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Its name.
    pub name: String,
    /// Its number in the store.
    pub ordinal: u32,
    /// `false`: the store knows it, the configuration no longer names it.
    pub configured: bool,
    /// Its bound on pending rows (`None` when not configured).
    pub max_pending: Option<u64>,
    /// Its bound on pending bytes (`None` when not configured).
    pub max_pending_bytes: Option<u64>,
    /// Its maintained counters.
    pub counters: Counters,
    /// Due time of its first due row not held by a pause, unix ms.
    pub oldest_due_at_ms: Option<u64>,
    /// Now minus `oldest_due_at_ms` (0 when not due yet), ms.
    pub oldest_due_age_ms: Option<u64>,
}

/// A (tenant, source, sink entry)'s breaker as the pipeline reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaker {
    /// The tenant.
    pub tenant: String,
    /// Its state (the `state` field and what goes with it).
    #[serde(flatten)]
    pub state: BreakerState,
}

/// A breaker's `state`, with the field each state carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls go through.
    Closed {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// Due rows wait until `open_until_ms`.
    Open {
        /// When it half-opens, unix ms.
        open_until_ms: u64,
    },
    /// One trial call at a time.
    HalfOpen,
}

impl BreakerState {
    /// The `state` as the API writes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            BreakerState::Closed { .. } => "closed",
            BreakerState::Open { .. } => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Where a key is read: one of `{"header": name}`, `{"json": dotted path}`,
/// `{"function": true}` (an ordering key computed by a function),
/// `{"first_of": [...]}` (an ordering key's places, tried in order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySpec {
    /// A request header.
    Header(String),
    /// A dotted path into the JSON body.
    Json(String),
    /// A function of the configuration (always `true`).
    Function(bool),
    /// Places tried in order, the first that holds a key giving it (ADR 0004
    /// section 1).
    FirstOf(Vec<KeySpec>),
}

impl KeySpec {
    /// The field's name and its value as text (`header`, `x-key`).
    pub fn parts(&self) -> (&'static str, String) {
        match self {
            KeySpec::Header(h) => ("header", h.clone()),
            KeySpec::Json(p) => ("json", p.clone()),
            KeySpec::Function(f) => ("function", f.to_string()),
            KeySpec::FirstOf(places) => (
                "first_of",
                places
                    .iter()
                    .map(|p| {
                        let (by, what) = p.parts();
                        format!("{by} {what}")
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        }
    }
}

/// What pauses a target itself (docs/design.md section 5, "Pause").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseInfo {
    /// `paused: true` in the configuration.
    pub by_config: bool,
    /// Paused through the admin API.
    pub by_runtime: Option<RuntimePause>,
}

/// A pause made through the admin API (persisted; survives a restart).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimePause {
    /// Since when, unix ms.
    pub since_ms: u64,
    /// `since_ms` as RFC 3339.
    pub since: Option<String>,
    /// Why.
    pub reason: String,
}

/// One sink entry of a [`Source`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sink {
    /// The entry's name.
    pub name: String,
    /// Its kind (`http`, `file`, `sqs`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its index in the source.
    pub index: u16,
    /// Delivered in order (by lanes).
    pub ordered: bool,
    /// Where its ordering key is read (`None`: unordered, or one keyless
    /// lane).
    pub ordering_key: Option<KeySpec>,
    /// What a dead-lettered lane head does to its key: `release` or `hold`
    /// (ADR 0004 section 8). Absent from an older relay's answer: `release`.
    #[serde(default = "release")]
    pub dead_letter: String,
    /// Its breaker for each tenant of the source.
    pub breakers: Vec<Breaker>,
    /// What pauses the entry itself.
    pub pause: PauseInfo,
    /// Paused now: itself or its source.
    pub paused: bool,
}

/// A source's tenant: `{"fixed": name}` or `{"path": true}` (the tenant is
/// the path's last segment).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceTenant {
    /// Every hook goes to this tenant.
    Fixed(String),
    /// The tenant is in the path (always `true`).
    Path(bool),
}

/// A source's dedupe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dedupe {
    /// Where the dedupe key is read.
    pub key: KeySpec,
    /// How long a key is remembered, ms.
    pub ttl_ms: u64,
}

/// `GET /v1/sources/{source}`: a configured source (never a secret: only
/// its verification scheme's name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// Its name.
    pub name: String,
    /// Its ingest path.
    pub path: String,
    /// Which tenant its hooks go to.
    pub tenant: SourceTenant,
    /// The verification scheme (`none`, `github`, `stripe`, `shopify`,
    /// `slack`, `standard_webhooks`, `hmac`).
    pub verification: String,
    /// Its dedupe, if any.
    pub dedupe: Option<Dedupe>,
    /// Its sink entries.
    pub sinks: Vec<Sink>,
    /// What pauses the source itself.
    pub pause: PauseInfo,
    /// Paused now.
    pub paused: bool,
}

/// A delivery row that is dead: when and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadInfo {
    /// When, unix ms.
    pub dead_at_ms: u64,
    /// `dead_at_ms` as RFC 3339.
    pub dead_at: Option<String>,
    /// Why.
    pub reason: String,
}

/// One delivery row of a [`Hook`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// Row id `<tenant>.<seq>.<sink index>`.
    pub id: String,
    /// The sink entry's index.
    pub sink_index: u16,
    /// The sink entry's name (`None` when no longer configured).
    pub sink: Option<String>,
    /// `due`, `held`, `in_flight`, `lane_member` or `dead`.
    pub state: String,
    /// Calls made.
    pub attempts: u32,
    /// When the first call was made, unix ms.
    pub first_attempt_at_ms: Option<u64>,
    /// The last call's error.
    pub last_error: Option<String>,
    /// The row's size, bytes.
    pub size_bytes: u32,
    /// In a lane.
    pub ordered: bool,
    /// The ordering key as UTF-8 text (`None` when absent or not UTF-8).
    pub ordering_key: Option<String>,
    /// The ordering key, base64.
    pub ordering_key_base64: Option<String>,
    /// `head` or `member` of its lane, or `held`: a dead letter that holds
    /// its lane (`dead_letter: hold`, ADR 0004 section 8).
    pub lane_position: Option<String>,
    /// When and why it died.
    pub dead: Option<DeadInfo>,
}

/// One header of a [`Hook`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Its name.
    pub name: String,
    /// Its value as UTF-8 text (`None` when not UTF-8).
    pub value: Option<String>,
    /// Its value, base64.
    pub value_base64: String,
}

/// `GET /v1/tenants/{tenant}/hooks/{seq}`, `GET /v1/hooks/{key}`: a hook's
/// envelope as stored and every delivery row it still has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    /// Its tenant.
    pub tenant: String,
    /// Its seq.
    pub seq: u64,
    /// The idempotency key (UUID text).
    pub idempotency_key: String,
    /// Its source (`None` when the store no longer names it).
    pub source: Option<String>,
    /// When it was received, unix ms.
    pub received_at_ms: u64,
    /// `received_at_ms` as RFC 3339.
    pub received_at: Option<String>,
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
    /// The request's query.
    pub query: Option<String>,
    /// The request's headers as stored.
    pub headers: Vec<Header>,
    /// The body, base64.
    pub body_base64: String,
    /// The body as UTF-8 text (`None` when not UTF-8).
    pub body_text: Option<String>,
    /// The dedupe key as UTF-8 text.
    pub dedupe_key: Option<String>,
    /// The dedupe key, base64.
    pub dedupe_key_base64: Option<String>,
    /// Every delivery row it still has.
    pub deliveries: Vec<Delivery>,
    /// For a replay's copy: the seq of the hook it copied.
    pub replay_of: Option<u64>,
    /// Why it is held in quarantine (`None`: not held).
    pub quarantined: Option<String>,
    /// The attempt log of each of its rows that has one, in sink order: the
    /// rows it still has and the delivered ones, whose log outlives them
    /// until retention (docs/design.md section 3, "The attempt log").
    pub attempt_log: Vec<RowAttempts>,
}

/// The attempt log of one delivery row of a [`Hook`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowAttempts {
    /// Row id `<tenant>.<seq>.<sink index>`.
    pub id: String,
    /// The sink entry's index.
    pub sink_index: u16,
    /// The sink entry's name (`None` when no longer configured).
    pub sink: Option<String>,
    /// The row's state as in [`Delivery::state`], or `delivered` when the
    /// row is gone (delivered: only a delivery deletes a row and keeps its
    /// log).
    pub state: String,
    /// Its newest attempts (at most `node.attempt_log.max_attempts`), oldest
    /// first.
    pub attempts: Vec<Attempt>,
}

/// One attempt of a delivery row, from its attempt log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Its number in the row's log, 1 for the first (a revive does not
    /// start it again).
    pub attempt: u32,
    /// When it started, unix ms.
    pub at_ms: u64,
    /// `at_ms` as RFC 3339.
    pub at: Option<String>,
    /// How long the sink call took, ms.
    pub duration_ms: u64,
    /// How it ended, as `ankusa_dispatch_attempts_total` counts it:
    /// `delivered`, `retry`, `horizon_passed`, `permanent`, `sink_gone`,
    /// `source_gone`, `retired`.
    pub outcome: String,
    /// The HTTP status answered (`None`: no HTTP answer, e.g. a timeout or
    /// a broker sink).
    pub status: Option<u16>,
    /// What went wrong, as the sink said it (a broker's error text,
    /// `timed out after 10000 ms`); `None` for a delivery.
    pub error: Option<String>,
    /// The answer's headers, in the order received.
    pub response_headers: Vec<Header>,
    /// The first bytes of the answer's body as text, lossily decoded (a
    /// byte sequence that is not UTF-8 shows as U+FFFD); `None` when no
    /// body was kept.
    pub response_body: Option<String>,
    /// The same bytes, base64, when they are not UTF-8 (the text above
    /// differs from them); `None` otherwise.
    pub response_body_base64: Option<String>,
    /// The answer's body had more than was kept
    /// (`node.attempt_log.max_body_bytes`).
    pub response_body_truncated: bool,
}

/// `GET /v1/dead-letters/{id}`: one dead letter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Row id `<tenant>.<seq>.<sink index>`.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// Its hook's seq.
    pub seq: u64,
    /// The sink entry's index.
    pub sink_index: u16,
    /// The sink entry's name.
    pub sink: Option<String>,
    /// Its hook's source.
    pub source: Option<String>,
    /// Its hook's idempotency key.
    pub idempotency_key: Option<String>,
    /// When it died, unix ms.
    pub dead_at_ms: u64,
    /// `dead_at_ms` as RFC 3339.
    pub dead_at: Option<String>,
    /// Why it died.
    pub reason: String,
    /// Calls made.
    pub attempts: Option<u32>,
    /// The last call's error.
    pub last_error: Option<String>,
    /// The row's size, bytes.
    pub size_bytes: Option<u32>,
    /// The ordering key as UTF-8 text.
    pub ordering_key: Option<String>,
    /// Whether it is the head of a held lane (`dead_letter: hold`, ADR 0004
    /// section 8): its key's later hooks wait for its revive (it goes
    /// first) or drop.
    #[serde(default)]
    pub holds_lane: bool,
}

/// `POST /v1/dead-letters/{id}/revive`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revived {
    /// The row id.
    pub id: String,
    /// Always `true`.
    pub revived: bool,
    /// `due`, `lane_member` behind its lane's head, or `lane_head`: the
    /// head of a held lane, delivered first (ADR 0004 section 8).
    pub state: String,
}

/// `DELETE /v1/dead-letters/{id}`, `DELETE
/// /v1/tenants/{tenant}/quarantine/{seq}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// The row id, or `<tenant>.<seq>` of a hook.
    pub id: String,
    /// Always `true`.
    pub dropped: bool,
}

/// A job's filter as the API shows it: every field, `None` when not given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    /// Tenant name.
    pub tenant: Option<String>,
    /// Source name.
    pub source: Option<String>,
    /// Sink entry name.
    pub sink: Option<String>,
    /// The reason (a prefix, or a retirement's reason).
    pub reason: Option<String>,
    /// At or after, unix ms.
    pub since_ms: Option<u64>,
    /// Before, unix ms.
    pub until_ms: Option<u64>,
}

impl Filter {
    /// The fields given, as `(name, text)` in the document's order.
    pub fn given(&self) -> Vec<(&'static str, String)> {
        let text = |v: &Option<String>| v.clone();
        let num = |v: &Option<u64>| v.map(|n| n.to_string());
        [
            ("tenant", text(&self.tenant)),
            ("source", text(&self.source)),
            ("sink", text(&self.sink)),
            ("reason", text(&self.reason)),
            ("since_ms", num(&self.since_ms)),
            ("until_ms", num(&self.until_ms)),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
    }
}

/// `GET /v1/jobs/{id}` (and the answer of `POST /v1/jobs` and a cancel): a
/// job as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Its id.
    pub id: u64,
    /// What it does.
    pub kind: JobKind,
    /// What it acts on.
    pub filter: Filter,
    /// Where it is.
    pub state: JobState,
    /// When it was created, unix ms.
    pub created_at_ms: u64,
    /// `created_at_ms` as RFC 3339.
    pub created_at: Option<String>,
    /// Its last step or change, unix ms.
    pub updated_at_ms: u64,
    /// When it left `running`, unix ms.
    pub finished_at_ms: Option<u64>,
    /// Entries examined so far.
    pub examined: u64,
    /// What it did so far.
    pub done: u64,
    /// What it expects to examine (`None` for a replay).
    pub total: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
    /// Examined and not acted on.
    pub skipped: u64,
    /// A replay's sink entries (`None`: every sink of the source).
    pub sinks: Option<Vec<String>>,
    /// What it is doing now, or why it stopped.
    pub phase: Option<String>,
}

/// `POST /v1/sources/{source}[/sinks/{sink}]/pause|resume`: the target's
/// pause state after the change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseState {
    /// The source.
    pub source: String,
    /// The sink entry (`None`: the whole source).
    pub sink: Option<String>,
    /// The target itself is paused.
    pub paused: bool,
    /// Neither the target nor (for a sink) its source is paused.
    pub delivering: bool,
    /// `paused: true` in the configuration.
    pub by_config: bool,
    /// Paused through the admin API.
    pub by_runtime: Option<RuntimePause>,
}

/// One hook of a [`QuarantineList`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedItem {
    /// `<tenant>.<seq>`.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// Its seq.
    pub seq: u64,
    /// Why it is held.
    pub reason: String,
    /// Its source.
    pub source: Option<String>,
    /// When it was received, unix ms.
    pub received_at_ms: Option<u64>,
    /// `received_at_ms` as RFC 3339.
    pub received_at: Option<String>,
    /// Its envelope's size, bytes.
    pub size_bytes: u64,
    /// Its idempotency key.
    pub idempotency_key: Option<String>,
}

/// `GET /v1/tenants/{tenant}/quarantine/{seq}`: why it is held, and the
/// hook.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedHook {
    /// Why it is held.
    pub reason: String,
    /// The hook as stored.
    pub hook: Hook,
}

/// `POST /v1/tenants/{tenant}/quarantine/{seq}/release`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// `<tenant>.<seq>`.
    pub id: String,
    /// Always `true`.
    pub released: bool,
    /// The hook's source.
    pub source: String,
    /// Delivery rows made.
    pub rows: u64,
}

/// The body of `POST /v1/jobs`: which fields of the filter a kind takes is
/// each kind's (`crate::jobs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// What the job does.
    pub kind: JobKind,
    /// What it acts on.
    #[serde(default)]
    pub filter: FilterRequest,
    /// A replay's sink entries (default: every sink of the source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sinks: Option<Vec<String>>,
}

/// A job's filter as a request gives it: a field left out is every one;
/// `since`/`until` are unix ms (a number) or RFC 3339 (text), read by the
/// listener, which names what else it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterRequest {
    /// Tenant name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Source name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Sink entry name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sink: Option<String>,
    /// The reason (a prefix, or a retirement's reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// At or after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<serde_json::Value>,
    /// Before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<serde_json::Value>,
}

/// The body of a pause (optional): why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    /// Why (default "paused through the admin API").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /v1/config`: the configuration running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigInfo {
    /// The file it was loaded from (`None`: the embedded demo).
    pub file: Option<String>,
    /// SHA-256 of the file's bytes, hex.
    pub hash: String,
    /// When it was loaded (the start or the last reload applied), unix ms.
    pub loaded_at_ms: u64,
    /// The same, RFC 3339.
    pub loaded_at: String,
    /// Reloads applied since the start.
    pub reloads_applied: u64,
    /// Reloads refused since the start.
    pub reloads_refused: u64,
}

/// `POST /v1/transform/test`: the body a sink entry's transform makes of a
/// sample (docs/design.md section 6, "Transforms"); a run that fails is an
/// error answer (422 `transform_failed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformTested {
    /// The program that ran, as written.
    pub program: String,
    /// The body the sink would get: the program's one output as compact
    /// JSON (content type `application/json`).
    pub body: String,
    /// Its length in bytes.
    pub bytes: u64,
}

/// `POST /v1/reload`: the reload applied (a refusal is an error answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// What changed, one line each (empty: the file is the one running).
    pub changes: Vec<String>,
    /// The configuration running now.
    pub config: ConfigInfo,
}
