//! The Kafka sink's options.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;

use crate::forward::{self, ForwardHeaders, Medium};
use crate::{OptionProblems, Options, SinkError, template};

/// The options of a kafka sink.
const OPTIONS: &[&str] = &[
    "brokers",
    "topic",
    "key",
    "timeout_ms",
    "properties",
    "forward_headers",
];

/// What a record carries of the provider's headers (`forward_headers`,
/// [`crate::forward`]): record headers named as the lower-case header, values
/// of any bytes; never an `ankusa_*` name or `content_type` (the sink's own);
/// at most 64 of them, a value at most 8 KiB, 64 KiB in all (headers count
/// against the broker's `message.max.bytes`).
pub const FORWARD_MEDIUM: Medium = Medium {
    kind: "kafka",
    max_headers: 64,
    max_name_bytes: 256,
    max_value_bytes: 8 * 1024,
    overhead_bytes: 0,
    max_total_bytes: 64 * 1024,
    reserved: &["content_type"],
    reserved_prefixes: &["ankusa_"],
    name_rule: forward::any_name,
    value_ok: forward::any_value,
};

/// `timeout_ms` when the option is absent: 30 s (librdkafka's own
/// `message.timeout.ms` default is 300 s).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// The smallest `timeout_ms`: librdkafka batches for `linger.ms` (5 ms by
/// default) before it sends, and a bound below a broker round trip only
/// produces retries.
pub const MIN_TIMEOUT_MS: u64 = 100;

/// The largest `timeout_ms` librdkafka accepts (`message.timeout.ms` is a
/// C `int`).
pub const MAX_TIMEOUT_MS: u64 = i32::MAX as u64;

/// librdkafka properties the sink sets itself and `properties` may not
/// override, with the reason given in the error.
const RESERVED: &[(&str, &str)] = &[
    (
        "enable.idempotence",
        "the sink's producer is always idempotent",
    ),
    (
        "acks",
        "the sink always waits for all in-sync replicas (acks=all)",
    ),
    (
        "request.required.acks",
        "the sink always waits for all in-sync replicas (acks=all)",
    ),
    ("bootstrap.servers", "set the option `brokers` instead"),
    ("metadata.broker.list", "set the option `brokers` instead"),
    ("message.timeout.ms", "set the option `timeout_ms` instead"),
    ("delivery.timeout.ms", "set the option `timeout_ms` instead"),
    (
        "partitioner",
        "ordered mode relies on murmur2_random (the Java client's partitioning)",
    ),
    ("transactional.id", "the sink does not use transactions"),
    (
        "retries",
        "the idempotent producer's retries are librdkafka's",
    ),
    (
        "message.send.max.retries",
        "the idempotent producer's retries are librdkafka's",
    ),
];

/// The Kafka sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: kafka
///     brokers: "kafka-1:9092,kafka-2:9092"    # required: bootstrap servers (or a list)
///     topic: "hooks.{tenant}.{source}"        # required: a template
///     # key: "{idempotency_key}"              # optional: unordered rows' record key
///     timeout_ms: 30000                       # optional: delivery bound, default 30000
///     properties:                             # optional: more librdkafka settings
///       security.protocol: sasl_plaintext
///       sasl.mechanism: PLAIN
///       sasl.username: relay
///       sasl.password: secret
///     # forward_headers: [x-github-event]     # optional: stored headers as record headers
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct KafkaSinkConfig {
    /// The bootstrap servers, `host:port` separated by commas
    /// (`bootstrap.servers`).
    pub brokers: String,
    /// The topic, a template in which `{tenant}` and `{source}` are replaced;
    /// the rest may hold only `a-z A-Z 0-9 . _ -` (Kafka's topic alphabet).
    pub topic: String,
    /// The record key of an unordered delivery, a template in which
    /// `{tenant}`, `{source}` and `{idempotency_key}` are replaced; `None`
    /// (the default) sends no key (librdkafka then spreads records over the
    /// partitions). An ordered delivery's key is always the lane's key.
    pub key: Option<String>,
    /// The delivery bound in milliseconds: librdkafka's `message.timeout.ms`
    /// (how long it retries a record before failing it) and the longest
    /// `deliver` waits for room in the producer's queue. 100 to 2^31-1.
    pub timeout_ms: u64,
    /// Extra librdkafka settings (security, SASL, client.id, linger.ms, ...),
    /// applied after the sink's own; those in the reserved list (idempotence,
    /// acks, partitioner, retries, transactions, the timeout and the brokers)
    /// are refused, and `max.in.flight` must stay from 1 to 5.
    pub properties: BTreeMap<String, String>,
    /// The stored headers each record carries as record headers
    /// ([`FORWARD_MEDIUM`]). Default none.
    pub forward_headers: ForwardHeaders,
}

impl std::fmt::Debug for KafkaSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Property names only: values may hold passwords.
        f.debug_struct("KafkaSinkConfig")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("key", &self.key)
            .field("timeout_ms", &self.timeout_ms)
            .field("properties", &self.properties.keys().collect::<Vec<_>>())
            .field("forward_headers", &self.forward_headers)
            .finish()
    }
}

impl KafkaSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        format!("{} topic {}", self.brokers, self.topic)
    }

    /// A config with the default timeout, no unordered key and no extra
    /// properties.
    pub fn new(brokers: impl Into<String>, topic: impl Into<String>) -> KafkaSinkConfig {
        KafkaSinkConfig {
            brokers: brokers.into(),
            topic: topic.into(),
            key: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            properties: BTreeMap::new(),
            forward_headers: ForwardHeaders::None,
        }
    }

    /// Reads and validates the options `brokers` (a string or a list of
    /// strings), `topic`, `key`, `timeout_ms` and `properties` (a map of
    /// strings, numbers or booleans); any other option is an error, as is a
    /// wrong type or value. Every error names the option
    /// (`properties.<name>` for one property), and every problem of
    /// `options` is reported, each property's included, in the order of the
    /// options ([`SinkError::Options`] when there are several).
    pub fn from_options(options: &Options) -> Result<KafkaSinkConfig, SinkError> {
        let mut p = OptionProblems::new();
        let (mut brokers, mut topic, mut key) = (None, None, None);
        let mut timeout_ms = DEFAULT_TIMEOUT_MS;
        let mut properties = BTreeMap::new();
        let mut forward_headers = ForwardHeaders::None;
        for (name, value) in options {
            match name.as_str() {
                forward::OPTION => forward_headers = ForwardHeaders::read(value, &mut p),
                "brokers" => {
                    brokers = match value {
                        serde_json::Value::Array(list) => {
                            let names: Option<Vec<&str>> =
                                list.iter().map(serde_json::Value::as_str).collect();
                            if names.is_none() {
                                p.invalid("brokers", "must be a string or a list of strings");
                            }
                            names.map(|n| n.join(","))
                        }
                        other => p.string("brokers", other),
                    };
                }
                "topic" => topic = p.string("topic", value),
                "key" => key = p.string("key", value),
                "timeout_ms" => {
                    if let Some(ms) = p.whole("timeout_ms", value, "milliseconds") {
                        timeout_ms = ms;
                    }
                }
                "properties" => match value.as_object() {
                    None => p.invalid("properties", "must be a map of librdkafka settings"),
                    Some(map) => {
                        for (prop, v) in map {
                            let text = match v {
                                serde_json::Value::String(s) => s.clone(),
                                serde_json::Value::Number(n) => n.to_string(),
                                serde_json::Value::Bool(b) => b.to_string(),
                                _ => {
                                    // Left out: it has its problem.
                                    p.invalid(
                                        format!("properties.{prop}"),
                                        "must be a string, a number or a boolean",
                                    );
                                    continue;
                                }
                            };
                            properties.insert(prop.clone(), text);
                        }
                    }
                },
                _ => p.unknown(name.clone(), OPTIONS),
            }
        }
        if brokers.is_none() && p.ok("brokers") {
            p.missing("brokers");
        }
        if topic.is_none() && p.ok("topic") {
            p.missing("topic");
        }
        let config = KafkaSinkConfig {
            brokers: brokers.unwrap_or_default(),
            topic: topic.unwrap_or_default(),
            key,
            timeout_ms,
            properties,
            forward_headers,
        };
        config.check(&mut p);
        p.sort_as_written(options);
        p.finish(config)
    }

    /// Checks every field, and every property against librdkafka's own
    /// configuration parser (no connection is made), reporting every problem;
    /// [`crate::kafka::KafkaSink::new`] calls it too, so a config built in
    /// code is held to the same rules.
    pub fn validate(&self) -> Result<(), SinkError> {
        let mut p = OptionProblems::new();
        self.check(&mut p);
        p.into_result()
    }

    /// Records the problems of every field whose value is real
    /// ([`OptionProblems::ok`]), each property's, and the rules between
    /// properties and `timeout_ms` where their inputs are real.
    fn check(&self, p: &mut OptionProblems) {
        self.forward_headers.check(&FORWARD_MEDIUM, p);
        if p.ok("brokers") && self.brokers.split(',').map(str::trim).any(str::is_empty) {
            p.invalid(
                "brokers",
                "must list bootstrap servers as host:port, separated by commas (none may be empty)",
            );
        }
        if p.ok("topic") {
            let literal = render(&self.topic, "", "", "");
            if self.topic.is_empty() {
                p.invalid("topic", "must not be empty");
            } else if let Err(reason) = template::check(&self.topic, &["tenant", "source"]) {
                p.invalid("topic", reason);
            } else if let Some(c) = literal.chars().find(|c| !is_topic_char(*c)) {
                p.invalid(
                    "topic",
                    format!("{c:?} cannot be in a Kafka topic name (only a-z A-Z 0-9 . _ -)"),
                );
            }
        }
        if let Some(key) = &self.key {
            if key.is_empty() {
                p.invalid(
                    "key",
                    "must not be empty (leave it out for records without a key)",
                );
            } else if let Err(reason) =
                template::check(key, &["tenant", "source", "idempotency_key"])
            {
                p.invalid("key", reason);
            }
        }
        if p.ok("timeout_ms") && !(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&self.timeout_ms) {
            p.invalid(
                "timeout_ms",
                format!("must be from {MIN_TIMEOUT_MS} to {MAX_TIMEOUT_MS}"),
            );
        }
        let prop = |name: &str| format!("properties.{name}");
        for name in self.properties.keys() {
            if let Some((_, why)) = RESERVED.iter().find(|(r, _)| r == name) {
                p.invalid(prop(name), format!("cannot be set: {why}"));
            }
        }
        // The idempotent producer keeps order with up to 5 requests in
        // flight per partition (librdkafka refuses more, but only when the
        // producer is created).
        for name in ["max.in.flight", "max.in.flight.requests.per.connection"] {
            if let Some(v) = self.properties.get(name)
                && p.ok(&prop(name))
                && !v.trim().parse::<u32>().is_ok_and(|n| (1..=5).contains(&n))
            {
                p.invalid(
                    prop(name),
                    "must be 1 to 5 (the idempotent producer's limit)",
                );
            }
        }
        if p.ok("timeout_ms") {
            for name in ["linger.ms", "queue.buffering.max.ms"] {
                if let Some(v) = self.properties.get(name)
                    && p.ok(&prop(name))
                    && v.trim()
                        .parse::<f64>()
                        .is_ok_and(|ms| ms >= self.timeout_ms as f64)
                {
                    p.invalid(
                        prop(name),
                        format!("must be below `timeout_ms` ({})", self.timeout_ms),
                    );
                }
            }
        }
        // This librdkafka has SASL PLAIN only (no Cyrus SASL, no OpenSSL for
        // SCRAM and OAUTHBEARER); its default mechanism is GSSAPI, and it
        // only notices when the producer is created. Refuse it at load.
        let sasl = self
            .properties
            .get("security.protocol")
            .is_some_and(|p| p.trim().to_ascii_lowercase().starts_with("sasl"));
        let mechanism = ["sasl.mechanism", "sasl.mechanisms"]
            .into_iter()
            .find_map(|name| self.properties.get(name).map(|m| (name, m)));
        match mechanism {
            Some((name, m)) if !m.trim().eq_ignore_ascii_case("PLAIN") => {
                if p.ok(&prop(name)) {
                    p.invalid(
                        prop(name),
                        format!("`{m}` is not available: this build's librdkafka has SASL PLAIN only (no OpenSSL or Cyrus SASL)"),
                    );
                }
            }
            Some(_) => {}
            None => {
                if sasl && p.ok("properties.security.protocol") {
                    p.invalid(
                        "properties.sasl.mechanism",
                        "must be PLAIN with a sasl_* security.protocol (librdkafka's default, GSSAPI, is not in this build)",
                    );
                }
            }
        }
        self.check_with_librdkafka(p);
    }

    /// Records what librdkafka's parser refuses (names, types, values, and
    /// features this build does not have: no SSL, no GSSAPI): the sink's own
    /// settings alone, then each property not already refused on top of
    /// them, one at a time, so every bad property is named (librdkafka
    /// stops at the first).
    fn check_with_librdkafka(&self, p: &mut OptionProblems) {
        // A value with a problem of its own (or missing) is not tried again
        // here: a valid stand-in lets the properties be checked.
        let brokers = if p.ok("brokers") {
            self.brokers.as_str()
        } else {
            "localhost:9092"
        };
        let timeout_ms = if p.ok("timeout_ms") {
            self.timeout_ms
        } else {
            DEFAULT_TIMEOUT_MS
        };
        let base = sink_settings(brokers, timeout_ms);
        if let Err(e) = base.create_native_config() {
            let (key, desc) = match e {
                KafkaError::ClientConfig(_, desc, key, _) => (key, desc),
                other => (String::new(), other.to_string()),
            };
            let option = if key == "bootstrap.servers" {
                "brokers"
            } else {
                "timeout_ms"
            };
            if p.ok(option) {
                p.invalid(option, desc);
            }
            // Every property would fail on the same setting.
            return;
        }
        for (name, value) in &self.properties {
            let option = format!("properties.{name}");
            if !p.ok(&option) {
                continue;
            }
            let mut one = base.clone();
            one.set(name, value);
            match one.create_native_config() {
                Ok(_) => {}
                Err(KafkaError::ClientConfig(_, desc, _, _)) => p.invalid(option, desc),
                Err(other) => p.invalid(option, other.to_string()),
            }
        }
    }

    /// The producer's librdkafka configuration: the sink's guarantees, then
    /// `properties`.
    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut c = sink_settings(&self.brokers, self.timeout_ms);
        for (name, value) in &self.properties {
            c.set(name, value);
        }
        c
    }
}

/// The sink's own librdkafka settings (its guarantees), for `brokers` and a
/// delivery bound of `timeout_ms`; [`KafkaSinkConfig::client_config`] adds
/// the properties.
fn sink_settings(brokers: &str, timeout_ms: u64) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", timeout_ms.to_string())
        // A missing topic is the sink's to report (SinkGone), not the
        // broker's to create from a templated name.
        .set("allow.auto.create.topics", "false")
        // Fail records for a missing topic within the delivery bound
        // (librdkafka waits 30 s by default before it believes a topic
        // is missing, which would turn SinkGone into a timeout).
        .set(
            "topic.metadata.propagation.max.ms",
            (timeout_ms / 2).min(30_000).to_string(),
        )
        // librdkafka fails an in-flight record only when its request
        // times out (30 s by default), whatever message.timeout.ms says:
        // bound that by the delivery bound too.
        .set("request.timeout.ms", timeout_ms.min(30_000).to_string());
    c
}

/// Whether `c` may be in a Kafka topic name.
fn is_topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Checks a rendered topic name as Kafka does: 1 to 249 characters of
/// `a-z A-Z 0-9 . _ -`, and not `.` or `..`.
pub(crate) fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() || topic.len() > 249 {
        return Err(format!("topic name {topic:?} must be 1 to 249 characters"));
    }
    if topic == "." || topic == ".." {
        return Err(format!("{topic:?} is not a legal topic name"));
    }
    if let Some(c) = topic.chars().find(|c| !is_topic_char(*c)) {
        return Err(format!(
            "topic name {topic:?} holds {c:?} (only a-z A-Z 0-9 . _ -)"
        ));
    }
    Ok(())
}

/// The template (topic or key) with `{tenant}`, `{source}` and
/// `{idempotency_key}` replaced (in one pass).
pub(crate) fn render(name: &str, tenant: &str, source: &str, idempotency_key: &str) -> String {
    template::render(
        name,
        &[
            ("tenant", tenant),
            ("source", source),
            ("idempotency_key", idempotency_key),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{error_of, opts};

    fn err(v: serde_json::Value) -> String {
        error_of(KafkaSinkConfig::from_options, v)
    }

    #[test]
    fn reads_every_option() {
        let c = KafkaSinkConfig::from_options(&opts(serde_json::json!({
            "brokers": ["k1:9092", "k2:9092"], "topic": "hooks.{tenant}.{source}",
            "key": "{idempotency_key}", "timeout_ms": 5000,
            "properties": {"client.id": "relay", "linger.ms": 20, "socket.keepalive.enable": true}
        })))
        .expect("valid");
        assert_eq!(c.brokers, "k1:9092,k2:9092");
        assert_eq!(c.topic, "hooks.{tenant}.{source}");
        assert_eq!(c.key.as_deref(), Some("{idempotency_key}"));
        assert_eq!(c.timeout_ms, 5000);
        assert_eq!(
            c.properties.get("linger.ms").map(String::as_str),
            Some("20")
        );
        assert_eq!(
            c.properties
                .get("socket.keepalive.enable")
                .map(String::as_str),
            Some("true")
        );
        let cc = c.client_config();
        assert_eq!(cc.get("bootstrap.servers"), Some("k1:9092,k2:9092"));
        assert_eq!(cc.get("enable.idempotence"), Some("true"));
        assert_eq!(cc.get("acks"), Some("all"));
        assert_eq!(cc.get("partitioner"), Some("murmur2_random"));
        assert_eq!(cc.get("message.timeout.ms"), Some("5000"));
        assert_eq!(cc.get("topic.metadata.propagation.max.ms"), Some("2500"));
        assert_eq!(cc.get("request.timeout.ms"), Some("5000"));
        assert_eq!(cc.get("client.id"), Some("relay"));

        let c = KafkaSinkConfig::from_options(&opts(serde_json::json!({
            "brokers": "127.0.0.1:9092", "topic": "t"
        })))
        .expect("valid");
        assert_eq!(c, KafkaSinkConfig::new("127.0.0.1:9092", "t"));
        assert_eq!(c.timeout_ms, DEFAULT_TIMEOUT_MS);
        assert_eq!(
            c.client_config().get("topic.metadata.propagation.max.ms"),
            Some("15000")
        );
        // The debug form lists property names, not values.
        let mut secret = c.clone();
        secret
            .properties
            .insert("sasl.password".into(), "hunter2".into());
        assert!(!format!("{secret:?}").contains("hunter2"));
    }

    #[test]
    fn every_error_names_its_option() {
        assert!(err(serde_json::json!({"topic": "t"})).contains("`brokers`"));
        assert!(err(serde_json::json!({"brokers": "", "topic": "t"})).contains("`brokers`"));
        assert!(
            err(serde_json::json!({"brokers": "a:1,,b:2", "topic": "t"})).contains("`brokers`")
        );
        assert!(err(serde_json::json!({"brokers": [1], "topic": "t"})).contains("`brokers`"));
        assert!(err(serde_json::json!({"brokers": "a:1"})).contains("`topic`"));
        assert!(err(serde_json::json!({"brokers": "a:1", "topic": ""})).contains("`topic`"));
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "a/{source}"})).contains("`topic`")
        );
        assert!(err(serde_json::json!({"brokers": "a:1", "topic": "{tenat}"})).contains("`topic`"));
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "{idempotency_key}"}))
                .contains("`topic`")
        );
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "t", "key": ""})).contains("`key`")
        );
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "t", "key": "{lane}"}))
                .contains("`key`")
        );
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "t", "timeout_ms": 0}))
                .contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "t", "timeout_ms": "1"}))
                .contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "t", "timeout_ms": 1u64 << 31}))
                .contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "t", "topik": "x"}))
                .contains("`topik`")
        );
        assert!(
            err(serde_json::json!({"brokers": "a:1", "topic": "t", "properties": 1}))
                .contains("`properties`")
        );
        for reserved in [
            "enable.idempotence",
            "acks",
            "request.required.acks",
            "partitioner",
            "bootstrap.servers",
        ] {
            let e = err(
                serde_json::json!({"brokers": "a:1", "topic": "t", "properties": {reserved: "x"}}),
            );
            assert!(e.contains(&format!("`properties.{reserved}`")), "{e}");
            assert!(e.contains("cannot be set"), "{e}");
        }
        let e = err(
            serde_json::json!({"brokers": "a:1", "topic": "t", "properties": {"no.such.property": "1"}}),
        );
        assert!(e.contains("`properties.no.such.property`"), "{e}");
        let e = err(
            serde_json::json!({"brokers": "a:1", "topic": "t", "properties": {"linger.ms": "soon"}}),
        );
        assert!(e.contains("`properties.linger.ms`"), "{e}");
        let e = err(serde_json::json!({
            "brokers": "a:1", "topic": "t", "timeout_ms": 1000, "properties": {"linger.ms": 1000}
        }));
        assert!(e.contains("`properties.linger.ms`"), "{e}");
        let e = err(
            serde_json::json!({"brokers": "a:1", "topic": "t", "properties": {"client.id": ["x"]}}),
        );
        assert!(e.contains("`properties.client.id`"), "{e}");
        for bad in [0, 6] {
            let e = err(
                serde_json::json!({"brokers": "a:1", "topic": "t", "properties": {"max.in.flight": bad}}),
            );
            assert!(e.contains("`properties.max.in.flight`"), "{e}");
        }
        assert!(
            KafkaSinkConfig::from_options(&opts(serde_json::json!({
                "brokers": "a:1", "topic": "t", "properties": {"max.in.flight": 1}
            })))
            .is_ok()
        );
        let e = err(serde_json::json!({
            "brokers": "a:1", "topic": "t",
            "properties": {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-256"}
        }));
        assert!(e.contains("`properties.sasl.mechanism`"), "{e}");
        let e = err(serde_json::json!({
            "brokers": "a:1", "topic": "t", "properties": {"security.protocol": "SASL_PLAINTEXT"}
        }));
        assert!(e.contains("`properties.sasl.mechanism`"), "{e}");
        let e = err(
            serde_json::json!({"brokers": "a:1", "topic": "t", "properties": {"compression.type": "zstd"}}),
        );
        assert!(e.contains("`properties.compression.type`"), "{e}");
    }

    /// Every problem `from_options` reports for `v`, as its text.
    fn problems(v: serde_json::Value) -> Vec<String> {
        crate::test_support::problems_of(KafkaSinkConfig::from_options, v)
    }

    #[test]
    fn every_problem_is_reported_in_one_run() {
        // The tester's example: one problem per property, each named.
        let got = problems(serde_json::json!({
            "brokers": "a:1", "topic": "t",
            "properties": {"linger.ms": "abc", "no.such.property": 1, "acks": "0"}
        }));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(
            got[0],
            "sink option `properties.acks`: cannot be set: the sink always waits for all in-sync replicas (acks=all)"
        );
        assert!(
            got[1].starts_with("sink option `properties.linger.ms`: ")
                && got[1].contains("linger.ms"),
            "{got:?}"
        );
        assert!(
            got[2].starts_with("sink option `properties.no.such.property`: ")
                && got[2].contains("No such configuration property"),
            "{got:?}"
        );
        // Every option wrong at once; brokers, missing, comes last.
        let got = problems(serde_json::json!({
            "topic": "", "key": "", "timeout_ms": 5, "topik": 1,
            "properties": {"max.in.flight": 9, "client.id": ["x"], "linger.ms": 10}
        }));
        assert_eq!(
            got,
            [
                "sink option `key`: must not be empty (leave it out for records without a key)",
                "sink option `properties.client.id`: must be a string, a number or a boolean",
                "sink option `properties.max.in.flight`: must be 1 to 5 (the idempotent producer's limit)",
                "sink option `timeout_ms`: must be from 100 to 2147483647",
                "sink option `topic`: must not be empty",
                "unknown sink option `topik` (valid: brokers, topic, key, timeout_ms, properties, forward_headers)",
                "sink option `brokers` is required",
            ]
        );
        // linger.ms against a broken timeout: that rule is not applied; against
        // a valid one it is, with the other properties' problems.
        let got = problems(serde_json::json!({
            "brokers": ["a:1", 2], "topic": "t", "timeout_ms": 1000,
            "properties": {"linger.ms": 1000, "sasl.mechanism": "GSSAPI", "compression.type": "zstd"}
        }));
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(
            got[0],
            "sink option `brokers`: must be a string or a list of strings"
        );
        assert!(
            got[1].starts_with("sink option `properties.compression.type`: "),
            "{got:?}"
        );
        assert_eq!(
            got[2],
            "sink option `properties.linger.ms`: must be below `timeout_ms` (1000)"
        );
        assert!(
            got[3]
                .starts_with("sink option `properties.sasl.mechanism`: `GSSAPI` is not available"),
            "{got:?}"
        );
    }

    #[test]
    fn topic_names_and_templates() {
        assert_eq!(
            render("h.{tenant}.{source}", "acme", "stripe", "k"),
            "h.acme.stripe"
        );
        assert_eq!(render("{idempotency_key}", "a", "b", "0193-x"), "0193-x");
        assert!(check_topic("hooks.acme_1-x").is_ok());
        assert!(check_topic("").is_err());
        assert!(check_topic("..").is_err());
        assert!(check_topic("a b").is_err());
        assert!(check_topic(&"a".repeat(250)).is_err());
    }
}
