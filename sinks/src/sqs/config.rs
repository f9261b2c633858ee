//! The SQS sink's options.

use crate::forward::{self, ForwardHeaders, Medium};
use crate::{OptionProblems, Options, SinkError};

/// The options of an sqs sink (`ordered` is core's in a configuration file;
/// [`SqsSinkConfig::from_options`] reads it for configs built in code).
const OPTIONS: &[&str] = &[
    "queue_url",
    "region",
    "endpoint_url",
    "timeout_ms",
    "body_encoding",
    "max_message_bytes",
    "ordered",
    "forward_headers",
];

/// The most message attributes SQS takes on one message.
pub const MAX_ATTRIBUTES: usize = 10;

/// Attributes the sink sends itself on every message: the five `ankusa_*`
/// metadata attributes (`ankusa_ordering_key`, `content_type` and
/// `ankusa_body_encoding` come on top when there is one).
pub const OWN_ATTRIBUTES_AT_LEAST: usize = 5;

/// What a message carries of the provider's headers (`forward_headers`,
/// [`crate::forward`]): String message attributes named as the lower-case
/// header, which SQS allows only of `a-z 0-9 _ - .` (no leading or trailing
/// `.`, no `..`, not starting `aws.` or `amazon.`), values of the characters
/// SQS takes in a String attribute, not empty; never an `ankusa_*` name or
/// `content_type`. The count is what is left of SQS's 10 attributes after the
/// sink's own (5 to 8), and the bytes what is left of `max_message_bytes`
/// after the body and the sink's own attributes (each forwarded one counts
/// its name, `String` and its value).
pub const FORWARD_MEDIUM: Medium = Medium {
    kind: "sqs",
    max_headers: MAX_ATTRIBUTES - OWN_ATTRIBUTES_AT_LEAST,
    max_name_bytes: 256,
    max_value_bytes: MAX_MESSAGE_BYTES_LIMIT as usize,
    max_total_bytes: MAX_MESSAGE_BYTES_LIMIT as usize,
    overhead_bytes: "String".len(),
    reserved: &["content_type"],
    reserved_prefixes: &["ankusa_"],
    name_rule: sqs_attribute_name,
    value_ok: sqs_attribute_value,
};

/// SQS's rule on a message attribute name (lower-case here): `a-z 0-9 _ - .`,
/// no leading or trailing `.`, no `..`, not starting `aws.` or `amazon.`.
pub fn sqs_attribute_name(name: &str) -> Result<(), String> {
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "\"{name}\" has `{c}`; an SQS message attribute name has only letters, digits, `_`, `-` and `.`"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        return Err(format!(
            "\"{name}\": an SQS message attribute name cannot start or end with `.` nor hold `..`"
        ));
    }
    if lower.starts_with("aws.") || lower.starts_with("amazon.") {
        return Err(format!(
            "\"{name}\": SQS reserves attribute names starting `aws.` and `amazon.`"
        ));
    }
    Ok(())
}

/// Whether SQS takes `value` as a String attribute's value as it is: UTF-8,
/// not empty, every character one SQS allows
/// ([`crate::sqs::sqs_char_allowed`]).
pub fn sqs_attribute_value(value: &[u8]) -> bool {
    std::str::from_utf8(value)
        .is_ok_and(|v| !v.is_empty() && v.chars().all(super::sink::sqs_char_allowed))
}

/// `timeout_ms` when the option is absent: 10 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// SQS's classic message size limit, 262,144 bytes (256 KiB): the default of
/// `max_message_bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 262_144;

/// The highest `max_message_bytes`: 1,048,576 bytes (1 MiB), the largest
/// `MaximumMessageSize` a queue can be given.
pub const MAX_MESSAGE_BYTES_LIMIT: u64 = 1_048_576;

/// The lowest `max_message_bytes`: 1,024 bytes, the smallest
/// `MaximumMessageSize` a queue can be given.
pub const MIN_MESSAGE_BYTES: u64 = 1_024;

/// How the body travels in the SQS message body (module docs:
/// [`crate::sqs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyEncoding {
    /// The body as it is (the default): it must be UTF-8 made of characters
    /// SQS accepts, otherwise the hook is [`crate::Outcome::Permanent`].
    Raw,
    /// The body base64-encoded (standard alphabet, padded), every hook, with
    /// the attribute `ankusa_body_encoding = base64`: any bytes travel, at
    /// 4/3 of their size.
    Base64,
}

/// Static credentials for a config built in code (tests, the library API).
/// YAML has no option for them: the relay uses the standard AWS chain.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticCredentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
}

impl std::fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// The SQS sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: sqs
///     queue_url: https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo  # required
///     ordered: true                  # core's option: needs a queue_url ending .fifo
///     # region: eu-west-1            # optional; else from the queue URL, else AWS_REGION / profile / IMDS
///     # endpoint_url: http://127.0.0.1:5000   # optional: another endpoint (LocalStack, moto, a VPC endpoint)
///     # timeout_ms: 10000            # optional, > 0: bound on one SendMessage, connecting included
///     # body_encoding: raw           # optional: raw (default) or base64
///     # max_message_bytes: 262144    # optional, 1024..=1048576: body + attributes
/// ```
///
/// Credentials come from the standard AWS chain: `AWS_ACCESS_KEY_ID` /
/// `AWS_SECRET_ACCESS_KEY` (/ `AWS_SESSION_TOKEN`), the shared config and
/// credentials files (`AWS_PROFILE`, `credential_process` included, SSO
/// profiles not), web identity (`AWS_WEB_IDENTITY_TOKEN_FILE`, EKS), the ECS
/// container endpoint and the EC2 instance metadata service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqsSinkConfig {
    /// The queue's URL as SQS gives it (`GetQueueUrl`, the console): an
    /// `http://` or `https://` URL whose last path segment is the queue name;
    /// a name ending `.fifo` is a FIFO queue.
    pub queue_url: String,
    /// The AWS region (`eu-west-1`). `None`: the region in the queue URL's
    /// host (`sqs.<region>.amazonaws.com`), else the standard chain
    /// (`AWS_REGION`, the profile, IMDS).
    pub region: Option<String>,
    /// Another endpoint for the SQS API (`http://127.0.0.1:5000`); `None`:
    /// AWS's endpoint of the region.
    pub endpoint_url: Option<String>,
    /// The bound on one SendMessage call, connecting and signing included,
    /// milliseconds; more than 0.
    pub timeout_ms: u64,
    /// Raw or base64 bodies.
    pub body_encoding: BodyEncoding,
    /// The largest message sent, bytes, counted as SQS counts it: the body
    /// (after encoding) plus every attribute's name, type (`String`) and
    /// value. A larger one is [`crate::Outcome::Permanent`] without a call.
    /// 1,024 to 1,048,576; default 262,144.
    pub max_message_bytes: u64,
    /// Whether the sink entry has `ordered: true`. Core reads that option and
    /// removes it from the sink's options; the relay sets this field (and
    /// [`SqsSinkConfig::from_options`] reads an `ordered` option for configs
    /// built in code). An ordered sink needs a FIFO queue.
    pub ordered: bool,
    /// Static credentials instead of the standard chain (module docs); not an
    /// option of the YAML.
    pub credentials: Option<StaticCredentials>,
    /// The stored headers each message carries as String message attributes
    /// ([`FORWARD_MEDIUM`]), as many as fit. Default none.
    pub forward_headers: ForwardHeaders,
}

impl SqsSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        self.queue_url.clone()
    }

    /// A config for `queue_url` with every default (unordered, raw bodies,
    /// the standard region and credential chains).
    pub fn new(queue_url: impl Into<String>) -> SqsSinkConfig {
        SqsSinkConfig {
            queue_url: queue_url.into(),
            region: None,
            endpoint_url: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            body_encoding: BodyEncoding::Raw,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            ordered: false,
            credentials: None,
            forward_headers: ForwardHeaders::None,
        }
    }

    /// Whether [`SqsSinkConfig::queue_url`] names a FIFO queue (its name ends
    /// `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.queue_url.ends_with(".fifo")
    }

    /// Reads and validates the options `queue_url`, `region`, `endpoint_url`,
    /// `timeout_ms`, `body_encoding`, `max_message_bytes` and `ordered`; any
    /// other option is an error, as is a wrong type or value. Every error
    /// names the option, and every problem of `options` is reported, in the
    /// order of the options ([`SinkError::Options`] when there are several).
    pub fn from_options(options: &Options) -> Result<SqsSinkConfig, SinkError> {
        let mut p = OptionProblems::new();
        let mut config = SqsSinkConfig::new("");
        let mut queue_url = None;
        for (name, value) in options {
            match name.as_str() {
                "queue_url" => queue_url = p.string("queue_url", value),
                "region" => config.region = p.string("region", value),
                forward::OPTION => config.forward_headers = ForwardHeaders::read(value, &mut p),
                "endpoint_url" => config.endpoint_url = p.string("endpoint_url", value),
                "timeout_ms" => {
                    if let Some(ms) = p.whole("timeout_ms", value, "milliseconds") {
                        config.timeout_ms = ms;
                    }
                }
                "max_message_bytes" => {
                    if let Some(n) = p.whole("max_message_bytes", value, "bytes") {
                        config.max_message_bytes = n;
                    }
                }
                "body_encoding" => match p.string("body_encoding", value).as_deref() {
                    Some("raw") => config.body_encoding = BodyEncoding::Raw,
                    Some("base64") => config.body_encoding = BodyEncoding::Base64,
                    Some(other) => {
                        p.invalid(
                            "body_encoding",
                            format!("`{other}` is not `raw` or `base64`"),
                        );
                    }
                    None => {}
                },
                "ordered" => {
                    if let Some(b) = p.boolean("ordered", value) {
                        config.ordered = b;
                    }
                }
                _ => p.unknown(name.clone(), OPTIONS),
            }
        }
        match queue_url {
            Some(u) => config.queue_url = u,
            None if p.ok("queue_url") => p.missing("queue_url"),
            None => {}
        }
        config.check(&mut p);
        p.sort_as_written(options);
        p.finish(config)
    }

    /// Checks every field, reporting every problem;
    /// [`crate::sqs::SqsSink::new`] calls it too, so a config built in code
    /// is held to the same rules. Agrees with the config crate: `ordered`
    /// with a queue URL not ending `.fifo` is refused.
    pub fn validate(&self) -> Result<(), SinkError> {
        let mut p = OptionProblems::new();
        self.check(&mut p);
        p.into_result()
    }

    /// Records the problems of every field whose value is real
    /// ([`OptionProblems::ok`]), and the rule between `ordered` and
    /// `queue_url` when both are.
    fn check(&self, p: &mut OptionProblems) {
        if p.ok("queue_url")
            && let Err(reason) = check_queue_url(&self.queue_url)
        {
            p.invalid("queue_url", reason);
        }
        if self.ordered && p.ok("ordered") && p.ok("queue_url") && !self.is_fifo() {
            p.invalid(
                "ordered",
                format!(
                    "requires a FIFO queue (queue_url must end in .fifo); queue_url is `{}`",
                    self.queue_url
                ),
            );
        }
        if let Some(region) = &self.region {
            let ok = !region.is_empty()
                && region
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                p.invalid(
                    "region",
                    format!("`{region}` is not a region name (like `eu-west-1`)"),
                );
            }
        }
        if let Some(endpoint) = &self.endpoint_url
            && let Err(reason) = check_url(endpoint)
        {
            p.invalid("endpoint_url", reason);
        }
        if p.ok("timeout_ms") && self.timeout_ms == 0 {
            p.invalid("timeout_ms", "must be more than 0");
        }
        if p.ok("max_message_bytes")
            && !(MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES_LIMIT).contains(&self.max_message_bytes)
        {
            p.invalid(
                "max_message_bytes",
                format!(
                    "must be {MIN_MESSAGE_BYTES} to {MAX_MESSAGE_BYTES_LIMIT} (SQS's MaximumMessageSize range)"
                ),
            );
        }
        if let Some(c) = &self.credentials
            && (c.access_key_id.is_empty() || c.secret_access_key.is_empty())
        {
            p.invalid("credentials", "key id and secret must not be empty");
        }
        self.forward_headers.check(&self.forward_medium(), p);
    }

    /// [`FORWARD_MEDIUM`] with room for one attribute fewer when bodies are
    /// base64 (`ankusa_body_encoding`); an ordered sink's
    /// `ankusa_ordering_key` and a hook's `content_type` are left to the
    /// delivery (what does not fit then is dropped).
    pub fn forward_medium(&self) -> Medium {
        let mut m = FORWARD_MEDIUM;
        if self.body_encoding == BodyEncoding::Base64 {
            m.max_headers -= 1;
        }
        m
    }

    /// The region to use when [`SqsSinkConfig::region`] is not set: the
    /// `<region>` of a queue URL whose host is `sqs.<region>.amazonaws.com`
    /// (or `.amazonaws.com.cn`), else `None` (the standard chain decides).
    pub fn region_from_url(&self) -> Option<&str> {
        let host = url_host(&self.queue_url)?;
        let rest = host.strip_prefix("sqs.")?;
        let (region, domain) = rest.split_once('.')?;
        let aws = matches!(domain, "amazonaws.com" | "amazonaws.com.cn" | "api.aws");
        (aws && !region.is_empty()).then_some(region)
    }
}

/// The queue URL's problem, if any: an http(s) URL with a host whose last
/// path segment is the queue's name, and no query or fragment.
fn check_queue_url(queue_url: &str) -> Result<(), String> {
    check_url(queue_url)?;
    // A queue URL is `<endpoint>/<account>/<name>`: a query or fragment
    // would make `.fifo` (and the name) be read from the wrong part.
    if queue_url.contains(['?', '#']) {
        return Err(format!(
            "`{queue_url}` has a query or fragment; a queue URL ends in the queue's name"
        ));
    }
    if queue_name(queue_url).is_empty() {
        return Err(format!(
            "`{queue_url}` has no queue name (expected https://sqs.<region>.amazonaws.com/<account>/<name>)"
        ));
    }
    Ok(())
}

/// An `http://` or `https://` URL with a host and no whitespace: what the
/// SDK's endpoint and the queue URL need. Returns why not.
fn check_url(url: &str) -> Result<(), String> {
    if url.is_empty() {
        return Err("must not be empty".into());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("`{url}` contains whitespace"));
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!("`{url}` is not an http:// or https:// URL"));
    }
    match url_host(url) {
        Some(h) if !h.is_empty() && !h.starts_with(':') => Ok(()),
        _ => Err(format!("`{url}` has no host")),
    }
}

/// The host (with port) of an http(s) URL, without user info.
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    Some(authority.rsplit_once('@').map_or(authority, |(_, h)| h))
}

/// The last path segment of the queue URL: the queue's name.
fn queue_name(url: &str) -> &str {
    let Some((_, rest)) = url.split_once("://") else {
        return "";
    };
    let path = rest.split(['?', '#']).next().unwrap_or("");
    match path.split_once('/') {
        Some((_, p)) => p.trim_end_matches('/').rsplit('/').next().unwrap_or(""),
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{error_of, opts};

    fn err(v: serde_json::Value) -> String {
        error_of(SqsSinkConfig::from_options, v)
    }

    const Q: &str = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders";

    #[test]
    fn forward_headers_fit_sqs_attribute_names_and_count() {
        let c = SqsSinkConfig::from_options(&opts(serde_json::json!({
            "queue_url": Q, "forward_headers": ["X-GitHub-Event", "x-shopify.topic", "a_b", "x-4", "x-5"]
        })))
        .expect("five valid names");
        assert_eq!(
            c.forward_headers,
            ForwardHeaders::Listed(vec![
                "x-github-event".into(),
                "x-shopify.topic".into(),
                "a_b".into(),
                "x-4".into(),
                "x-5".into()
            ])
        );
        // base64 bodies take one more attribute of the sink's own.
        assert_eq!(
            err(
                serde_json::json!({"queue_url": Q, "body_encoding": "base64", "forward_headers": ["a", "b", "c", "d", "e"]})
            ),
            "sink option `forward_headers`: 5 headers listed; a sqs message carries at most 4 besides the sink's own"
        );
        for (name, why) in [
            ("x-a+b", "has `+`"),
            (".x", "cannot start or end with `.`"),
            ("x.", "cannot start or end with `.`"),
            ("x..y", "cannot start or end with `.` nor hold `..`"),
            (
                "aws.x",
                "SQS reserves attribute names starting `aws.` and `amazon.`",
            ),
            (
                "Amazon.x",
                "SQS reserves attribute names starting `aws.` and `amazon.`",
            ),
            ("ankusa_tenant", "is a name the sqs sink uses itself"),
            ("content_type", "is a name the sqs sink uses itself"),
        ] {
            let e = err(serde_json::json!({"queue_url": Q, "forward_headers": [name]}));
            assert!(
                e.starts_with("sink option `forward_headers`: ") && e.contains(why),
                "{name}: {e}"
            );
        }
        assert!(sqs_attribute_value(b"push"));
        assert!(
            !sqs_attribute_value(b""),
            "SQS refuses an empty attribute value"
        );
        assert!(!sqs_attribute_value(b"a\x01b"));
        assert!(!sqs_attribute_value(b"\xff"));
    }

    #[test]
    fn reads_options() {
        let c = SqsSinkConfig::from_options(&opts(serde_json::json!({
            "queue_url": "http://127.0.0.1:5000/123456789012/o.fifo", "region": "us-east-1",
            "endpoint_url": "http://127.0.0.1:5000", "timeout_ms": 500, "body_encoding": "base64",
            "max_message_bytes": 1_048_576, "ordered": true
        })))
        .expect("valid");
        assert!(c.is_fifo());
        assert!(c.ordered);
        assert_eq!(c.region.as_deref(), Some("us-east-1"));
        assert_eq!(c.endpoint_url.as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(c.timeout_ms, 500);
        assert_eq!(c.body_encoding, BodyEncoding::Base64);
        assert_eq!(c.max_message_bytes, 1_048_576);
        let c =
            SqsSinkConfig::from_options(&opts(serde_json::json!({"queue_url": Q}))).expect("valid");
        assert_eq!(c, SqsSinkConfig::new(Q));
        assert!(!c.is_fifo());
        assert_eq!(c.region_from_url(), Some("eu-west-1"));
        assert_eq!(
            SqsSinkConfig::new("http://127.0.0.1:5000/1/q").region_from_url(),
            None
        );
    }

    #[test]
    fn every_error_names_its_option() {
        assert!(err(serde_json::json!({})).contains("`queue_url`"));
        assert!(err(serde_json::json!({"queue_url": 5})).contains("`queue_url`"));
        assert!(err(serde_json::json!({"queue_url": "sqs://x/1/q"})).contains("`queue_url`"));
        assert!(err(serde_json::json!({"queue_url": "https://x"})).contains("`queue_url`"));
        assert!(err(serde_json::json!({"queue_url": "https:///1/q"})).contains("`queue_url`"));
        assert!(
            err(
                serde_json::json!({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q?x=.fifo"})
            )
            .contains("query or fragment")
        );
        assert!(err(serde_json::json!({"queue_url": Q, "ordered": true})).contains("`ordered`"));
        assert!(err(serde_json::json!({"queue_url": Q, "ordered": "yes"})).contains("`ordered`"));
        assert!(err(serde_json::json!({"queue_url": Q, "region": "EU West"})).contains("`region`"));
        assert!(err(serde_json::json!({"queue_url": Q, "region": ""})).contains("`region`"));
        assert!(
            err(serde_json::json!({"queue_url": Q, "endpoint_url": "localhost:5000"}))
                .contains("`endpoint_url`")
        );
        assert!(
            err(serde_json::json!({"queue_url": Q, "endpoint_url": "http://a b"}))
                .contains("`endpoint_url`")
        );
        assert!(err(serde_json::json!({"queue_url": Q, "timeout_ms": 0})).contains("`timeout_ms`"));
        assert!(
            err(serde_json::json!({"queue_url": Q, "timeout_ms": -1})).contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"queue_url": Q, "body_encoding": "hex"}))
                .contains("`body_encoding`")
        );
        assert!(
            err(serde_json::json!({"queue_url": Q, "max_message_bytes": 1_048_577}))
                .contains("`max_message_bytes`")
        );
        assert!(
            err(serde_json::json!({"queue_url": Q, "max_message_bytes": 1023}))
                .contains("`max_message_bytes`")
        );
        assert!(err(serde_json::json!({"queue_url": Q, "queue": "x"})).contains("`queue`"));
    }

    /// Every problem `from_options` reports for `v`, as its text.
    fn problems(v: serde_json::Value) -> Vec<String> {
        crate::test_support::problems_of(SqsSinkConfig::from_options, v)
    }

    #[test]
    fn every_problem_is_reported_in_one_run() {
        assert_eq!(
            problems(serde_json::json!({
                "queue_url": "https://x", "region": "EU", "endpoint_url": 5, "body_encoding": "hex",
                "max_message_bytes": 10, "queue": 1, "timeout_ms": 0
            })),
            [
                "sink option `body_encoding`: `hex` is not `raw` or `base64`",
                "sink option `endpoint_url`: must be a string",
                "sink option `max_message_bytes`: must be 1024 to 1048576 (SQS's MaximumMessageSize range)",
                "unknown sink option `queue` (valid: queue_url, region, endpoint_url, timeout_ms, body_encoding, max_message_bytes, ordered, forward_headers)",
                "sink option `queue_url`: `https://x` has no queue name (expected https://sqs.<region>.amazonaws.com/<account>/<name>)",
                "sink option `region`: `EU` is not a region name (like `eu-west-1`)",
                "sink option `timeout_ms`: must be more than 0",
            ]
        );
        // `ordered` needs a FIFO queue_url: not checked against a broken one.
        assert_eq!(
            problems(serde_json::json!({"queue_url": 5, "ordered": true})),
            ["sink option `queue_url`: must be a string"]
        );
        assert_eq!(
            problems(serde_json::json!({"ordered": "yes", "endpoint_url": "localhost:5000"})),
            [
                "sink option `endpoint_url`: `localhost:5000` is not an http:// or https:// URL",
                "sink option `ordered`: must be true or false",
                "sink option `queue_url` is required",
            ]
        );
    }

    #[test]
    fn queue_names_and_hosts() {
        assert_eq!(queue_name(Q), "orders");
        assert_eq!(queue_name("http://h:1/1/q.fifo/"), "q.fifo");
        assert_eq!(queue_name("http://h:1"), "");
        assert_eq!(url_host("http://u:p@h:1/x"), Some("h:1"));
    }
}
