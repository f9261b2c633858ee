//! The file as written: serde structs with `deny_unknown_fields`, every
//! optional field an `Option` so validation fills the defaults in one place
//! ([`crate::defaults`]). Sink entries stay `Mapping`s: their keys beyond the
//! core ones belong to the sink.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, IntoDeserializer, MapAccess, Visitor};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawConfig {
    pub node: RawNode,
    pub listeners: RawListeners,
    pub store_headers: RawHeaderPolicy,
    pub dispatch: RawDispatch,
    pub retry: RawRetry,
    pub breaker: RawBreaker,
    pub retention: RawRetention,
    pub tenants: Option<Vec<RawTenant>>,
    pub sources: Vec<RawSource>,
    pub cluster: Option<RawCluster>,
    pub notify: Option<RawNotify>,
}

/// `notify`: where the relay sends its own notifications (docs/design.md
/// section 5, "Notifications"). Event names and formats are strings, checked
/// by validation, so a wrong one is named with the destination's index
/// instead of failing the whole section's parse.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawNotify {
    pub destinations: Vec<RawDestination>,
    pub dead_letter_window_ms: Option<u64>,
    pub dead_letter_samples: Option<u32>,
    pub sink_failing_after_ms: Option<u64>,
    pub tenant_bounds_percent: Option<u32>,
    pub max_pending: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawDestination {
    pub name: Option<String>,
    pub url: Option<String>,
    pub format: Option<String>,
    pub headers: Option<serde_yaml_ng::Mapping>,
    pub timeout_ms: Option<u64>,
    pub events: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawCluster {
    pub node_id: Option<String>,
    pub etcd: Option<Vec<String>>,
    pub advertise: Option<String>,
    pub lease_ttl_ms: Option<u64>,
    pub hold_ms: Option<u64>,
    pub name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawNode {
    pub name: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub store: Option<RawStore>,
    pub max_pending: Option<u64>,
    pub max_pending_bytes: Option<u64>,
    pub log_format: Option<RawLogFormat>,
    pub otel: Option<RawOtel>,
    pub attempt_log: RawAttemptLog,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawAttemptLog {
    pub enabled: Option<bool>,
    pub max_attempts: Option<u32>,
    pub max_body_bytes: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawOtel {
    pub endpoint: Option<String>,
    pub service_name: Option<String>,
    pub filter: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawLogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawStore {
    Rocksdb,
    Fjall,
    Memory,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawListeners {
    pub ingest: Option<String>,
    pub admin: Option<String>,
    pub admin_token: Option<String>,
    pub metrics_require_token: Option<bool>,
    pub body_limit_bytes: Option<u64>,
    pub body_budget_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawAction {
    Keep,
    Drop,
    Hash,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawHeaderPolicy {
    pub default: Option<RawAction>,
    pub headers: BTreeMap<String, RawAction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawDispatch {
    pub batch: Option<u32>,
    pub sink_concurrency: Option<u32>,
    pub pipelined_concurrency: Option<u32>,
    pub admission_window: Option<u32>,
    pub admission_window_bytes: Option<u64>,
    pub flush_interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawRetry {
    pub base_ms: Option<u64>,
    pub max_ms: Option<u64>,
    pub max_elapsed_ms: Option<u64>,
    pub retry_after_max_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawBreaker {
    pub failures: Option<u32>,
    pub distinct: Option<u32>,
    pub open_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawRetention {
    pub keep_ms: Option<u64>,
    pub interval_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTenant {
    pub name: String,
    pub max_pending: Option<u64>,
    pub max_pending_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSource {
    pub name: String,
    pub path: Option<String>,
    pub tenant: Option<String>,
    pub tenant_path: Option<bool>,
    #[serde(default, deserialize_with = "verification")]
    pub verification: Option<RawVerification>,
    pub dedupe: Option<RawDedupe>,
    pub challenge: Option<RawChallenge>,
    pub store_headers: Option<RawHeaderPolicy>,
    pub paused: Option<bool>,
    pub quarantine: Option<bool>,
    pub on_invalid_signature: Option<RawOnInvalid>,
    #[serde(default)]
    pub sinks: Vec<serde_yaml_ng::Mapping>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawOnInvalid {
    Reject,
    Quarantine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawScheme {
    None,
    Github,
    Stripe,
    Shopify,
    Slack,
    StandardWebhooks,
    Hmac,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawAlgorithm {
    Sha1,
    Sha256,
    Sha512,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawEncoding {
    Hex,
    Base64,
}

/// `verification: github` (a scheme name alone) or
/// `verification: {type: github, secrets: [...]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVerification {
    #[serde(rename = "type")]
    pub kind: RawScheme,
    pub secrets: Option<Vec<String>>,
    pub tolerance_ms: Option<u64>,
    pub header: Option<String>,
    pub algorithm: Option<RawAlgorithm>,
    pub encoding: Option<RawEncoding>,
    pub prefix: Option<String>,
}

/// Accepts the scheme name alone or the full map; the map goes through the
/// derived impl on the same deserializer, so its errors keep their position.
pub(crate) fn verification<'de, D: de::Deserializer<'de>>(
    d: D,
) -> Result<Option<RawVerification>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<RawVerification>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a scheme name (none, github, stripe, shopify, slack, standard_webhooks, hmac) or a map with `type`")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            let kind = RawScheme::deserialize(s.into_deserializer())?;
            Ok(Some(RawVerification {
                kind,
                secrets: None,
                tolerance_ms: None,
                header: None,
                algorithm: None,
                encoding: None,
                prefix: None,
            }))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            RawVerification::deserialize(MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_any(V)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDedupe {
    pub header: Option<String>,
    pub json: Option<String>,
    pub ttl_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawChallenge {
    pub query: String,
    pub token_query: Option<String>,
    pub token: Option<String>,
}
