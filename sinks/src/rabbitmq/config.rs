//! The RabbitMQ sink's options.

use lapin::uri::{AMQPScheme, AMQPUri};

use crate::forward::{self, ForwardHeaders, Medium};
use crate::secret::redact_url as redact;
use crate::{OptionProblems, Options, SinkError, template};

/// The options of a rabbitmq sink.
const OPTIONS: &[&str] = &[
    "url",
    "exchange",
    "routing_key",
    "mandatory",
    "declare",
    "timeout_ms",
    "forward_headers",
];

/// What a message carries of the provider's headers (`forward_headers`,
/// [`crate::forward`]): entries of the `headers` table named as the
/// lower-case header (a short string: at most 255 bytes), long-string values
/// of any bytes; never an `ankusa_*` name or `content_type`, nor a header the
/// broker or its plugins act on (`cc`, `bcc`: sender-selected distribution;
/// `x-delay`; `x-death` and `x-first-death-*` / `x-last-death-*`:
/// dead-lettering; `x-delivery-count`; `x-received-from`); at most 64 of them,
/// a value at most 8 KiB, 64 KiB in all.
pub const FORWARD_MEDIUM: Medium = Medium {
    kind: "rabbitmq",
    max_headers: 64,
    max_name_bytes: MAX_NAME_BYTES,
    max_value_bytes: 8 * 1024,
    overhead_bytes: 0,
    max_total_bytes: 64 * 1024,
    reserved: &[
        "content_type",
        "cc",
        "bcc",
        "x-death",
        "x-delay",
        "x-delivery-count",
        "x-received-from",
    ],
    reserved_prefixes: &["ankusa_", "x-death", "x-first-death-", "x-last-death-"],
    name_rule: forward::any_name,
    value_ok: forward::any_value,
};

/// The keys of the `declare` option.
const DECLARE_OPTIONS: &[&str] = &["declare.type", "declare.durable"];

/// `timeout_ms` when the option is absent: 10 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// The longest exchange name or routing key AMQP 0-9-1 carries (a short
/// string), bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// An exchange type the sink can declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeType {
    /// `direct`: routing key equals binding key.
    Direct,
    /// `topic`: routing key matches a binding pattern (`*`, `#`).
    Topic,
    /// `fanout`: every bound queue, routing key ignored.
    Fanout,
    /// `headers`: bindings match message headers.
    Headers,
}

impl ExchangeType {
    /// The type's name, as in the configuration and in `exchange.declare`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Topic => "topic",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Headers => "headers",
        }
    }

    pub(crate) fn kind(self) -> lapin::ExchangeKind {
        match self {
            ExchangeType::Direct => lapin::ExchangeKind::Direct,
            ExchangeType::Topic => lapin::ExchangeKind::Topic,
            ExchangeType::Fanout => lapin::ExchangeKind::Fanout,
            ExchangeType::Headers => lapin::ExchangeKind::Headers,
        }
    }
}

/// The optional `declare` option: the sink declares its exchange (idempotent
/// `exchange.declare`) on every channel it opens, so the exchange exists, or
/// is created again after it was deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declare {
    /// `declare.type`, required.
    pub kind: ExchangeType,
    /// `declare.durable`, default `true`: the exchange survives a broker
    /// restart.
    pub durable: bool,
}

/// The RabbitMQ sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: rabbitmq
///     url: amqp://guest:guest@127.0.0.1:5672/%2f   # required: amqp:// or amqps://
///     exchange: hooks                    # required; "" is the default exchange
///     routing_key: "{tenant}.{source}"   # optional template, default ""
///     # mandatory: true                  # optional, default true: unroutable is an error
///     # declare: {type: topic, durable: true}   # optional; default: not declared
///     timeout_ms: 5000                   # optional, > 0, default 10000
///     # forward_headers: [x-github-event] # optional: stored headers in the message's headers table
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RabbitMqSinkConfig {
    /// The broker: `amqp://user:password@host:port/vhost` (the vhost
    /// percent-encoded, `%2f` for `/`; no path at all is `/` too) or
    /// `amqps://...` (TLS, the platform's certificate verifier).
    pub url: String,
    /// The exchange to publish to; `""` is the default exchange, which routes
    /// to the queue named by the routing key.
    pub exchange: String,
    /// The routing key, a template in which `{tenant}`, `{source}` and
    /// `{ordering_key}` are replaced (module docs: [`crate::rabbitmq`]).
    pub routing_key: String,
    /// Publish with the `mandatory` flag: a message no queue is bound for
    /// comes back (`basic.return`) and the delivery is
    /// [`Outcome::Permanent`](crate::Outcome::Permanent). Without it the
    /// broker drops such a message and the delivery is `Ok`.
    pub mandatory: bool,
    /// Declare the exchange; `None` (the default) uses an existing one.
    pub declare: Option<Declare>,
    /// The bound on one delivery (connecting when needed, opening a channel,
    /// the publish and its confirm), milliseconds; more than 0.
    pub timeout_ms: u64,
    /// The stored headers each message carries in its headers table
    /// ([`FORWARD_MEDIUM`]). Default none.
    pub forward_headers: ForwardHeaders,
}

impl std::fmt::Debug for RabbitMqSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("RabbitMqSinkConfig")
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .field("mandatory", &self.mandatory)
            .field("declare", &self.declare)
            .field("timeout_ms", &self.timeout_ms)
            .field("forward_headers", &self.forward_headers)
            .finish_non_exhaustive()
    }
}

impl RabbitMqSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        format!(
            "{} exchange {:?} routing key {}",
            crate::secret::redact_url(&self.url),
            self.exchange,
            self.routing_key
        )
    }

    /// A config publishing to `exchange` with `routing_key`, mandatory, not
    /// declaring, with the default timeout.
    pub fn new(
        url: impl Into<String>,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
    ) -> RabbitMqSinkConfig {
        RabbitMqSinkConfig {
            url: url.into(),
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            mandatory: true,
            declare: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            forward_headers: ForwardHeaders::None,
        }
    }

    /// Reads and validates the options `url`, `exchange`, `routing_key`,
    /// `mandatory`, `declare` (`type`, `durable`) and `timeout_ms`; any other
    /// option is an error, as is a wrong type or value. Every error names the
    /// option (`declare.type` for one of `declare`), and every problem of
    /// `options` is reported, in the order of the options
    /// ([`SinkError::Options`] when there are several).
    pub fn from_options(options: &Options) -> Result<RabbitMqSinkConfig, SinkError> {
        let mut p = OptionProblems::new();
        let (mut url, mut exchange, mut routing_key, mut declare) = (None, None, None, None);
        let mut mandatory = true;
        let mut timeout_ms = DEFAULT_TIMEOUT_MS;
        let mut forward_headers = ForwardHeaders::None;
        for (name, value) in options {
            match name.as_str() {
                "url" => url = p.string("url", value),
                "exchange" => exchange = p.string("exchange", value),
                forward::OPTION => forward_headers = ForwardHeaders::read(value, &mut p),
                "routing_key" => routing_key = p.string("routing_key", value),
                "mandatory" => {
                    if let Some(b) = p.boolean("mandatory", value) {
                        mandatory = b;
                    }
                }
                "declare" => declare = read_declare(value, &mut p),
                "timeout_ms" => {
                    if let Some(ms) = p.whole("timeout_ms", value, "milliseconds") {
                        timeout_ms = ms;
                    }
                }
                _ => p.unknown(name.clone(), OPTIONS),
            }
        }
        if url.is_none() && p.ok("url") {
            p.missing("url");
        }
        if exchange.is_none() && p.ok("exchange") {
            p.missing("exchange");
        }
        let config = RabbitMqSinkConfig {
            url: url.unwrap_or_default(),
            exchange: exchange.unwrap_or_default(),
            routing_key: routing_key.unwrap_or_default(),
            mandatory,
            declare,
            timeout_ms,
            forward_headers,
        };
        config.check(&mut p);
        p.sort_as_written(options);
        p.finish(config)
    }

    /// Checks every field, reporting every problem;
    /// [`crate::rabbitmq::RabbitMqSink::new`] calls it too, so a config built
    /// in code is held to the same rules.
    pub fn validate(&self) -> Result<(), SinkError> {
        let mut p = OptionProblems::new();
        self.check(&mut p);
        p.into_result()
    }

    /// Records the problems of every field whose value is real
    /// ([`OptionProblems::ok`]), and the rules between `declare` and
    /// `exchange` when both are.
    fn check(&self, p: &mut OptionProblems) {
        if p.ok("url") {
            p.take(self.uri());
        }
        if p.ok("exchange")
            && let Err(reason) = check_exchange(&self.exchange)
        {
            p.invalid("exchange", reason);
        }
        if self.declare.is_some() && p.ok("declare") && p.ok("exchange") {
            if self.exchange.is_empty() {
                p.invalid(
                    "declare",
                    "the default exchange (`exchange: \"\"`) always exists and cannot be declared",
                );
            } else if self.exchange.starts_with("amq.") {
                p.invalid(
                    "declare",
                    format!(
                        "`{}`: names starting with `amq.` are reserved by the broker and cannot be declared",
                        self.exchange
                    ),
                );
            }
        }
        if p.ok("routing_key") {
            if let Err(reason) =
                template::check(&self.routing_key, &["tenant", "source", "ordering_key"])
            {
                p.invalid("routing_key", reason);
            } else if render(&self.routing_key, "", "", "").len() > MAX_NAME_BYTES {
                // The placeholders' values are only known per hook; the fixed
                // part alone must already fit.
                p.invalid(
                    "routing_key",
                    format!("is longer than {MAX_NAME_BYTES} bytes"),
                );
            }
        }
        if p.ok("timeout_ms") && self.timeout_ms == 0 {
            p.invalid("timeout_ms", "must be more than 0");
        }
        self.forward_headers.check(&FORWARD_MEDIUM, p);
    }

    /// The parsed [`RabbitMqSinkConfig::url`] (no connection).
    pub(crate) fn uri(&self) -> Result<AMQPUri, SinkError> {
        let scheme = self.url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("amqp" | "amqps")) {
            return Err(SinkError::invalid(
                "url",
                format!("`{}` is not an amqp:// or amqps:// URL", redact(&self.url)),
            ));
        }
        let uri: AMQPUri = self.url.parse().map_err(|e| {
            SinkError::invalid(
                "url",
                format!("`{}` is not an AMQP URL: {e}", redact(&self.url)),
            )
        })?;
        if !matches!(uri.scheme, AMQPScheme::AMQP | AMQPScheme::AMQPS) {
            return Err(SinkError::invalid("url", "must be amqp:// or amqps://"));
        }
        if uri.authority.host.is_empty() {
            return Err(SinkError::invalid(
                "url",
                format!("`{}` has no host", redact(&self.url)),
            ));
        }
        if uri.vhost.is_empty() {
            return Err(SinkError::invalid(
                "url",
                format!(
                    "`{}` names the empty virtual host (a trailing `/`); write no path, or `/%2f`, for the default vhost `/`",
                    redact(&self.url)
                ),
            ));
        }
        Ok(uri)
    }
}

/// Reads the `declare` map, recording each of its problems. `None` when it
/// is not a map; a map with a wrong or missing `type` is read with a
/// placeholder type (its problem recorded), so the rules of `declare` with
/// `exchange` still apply.
fn read_declare(value: &serde_json::Value, p: &mut OptionProblems) -> Option<Declare> {
    let Some(map) = value.as_object() else {
        p.invalid(
            "declare",
            "must be a map: {type: direct|topic|fanout|headers, durable: true}",
        );
        return None;
    };
    let mut kind = None;
    let mut durable = true;
    for (name, v) in map {
        match name.as_str() {
            "type" => {
                kind = match p.string("declare.type", v).as_deref() {
                    Some("direct") => Some(ExchangeType::Direct),
                    Some("topic") => Some(ExchangeType::Topic),
                    Some("fanout") => Some(ExchangeType::Fanout),
                    Some("headers") => Some(ExchangeType::Headers),
                    Some(other) => {
                        p.invalid(
                            "declare.type",
                            format!("`{other}` is not direct, topic, fanout or headers"),
                        );
                        None
                    }
                    None => None,
                };
            }
            "durable" => {
                if let Some(b) = p.boolean("declare.durable", v) {
                    durable = b;
                }
            }
            other => p.unknown(format!("declare.{other}"), DECLARE_OPTIONS),
        }
    }
    if kind.is_none() && p.ok("declare.type") {
        p.missing("declare.type");
    }
    Some(Declare {
        kind: kind.unwrap_or(ExchangeType::Direct),
        durable,
    })
}

/// Checks an exchange name as RabbitMQ accepts it: at most 255 bytes of
/// letters, digits, `-`, `_`, `.` and `:` (empty is the default exchange).
fn check_exchange(name: &str) -> Result<(), String> {
    if name.len() > MAX_NAME_BYTES {
        return Err(format!("is longer than {MAX_NAME_BYTES} bytes"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')))
    {
        return Err(format!(
            "`{name}` has {c:?}: exchange names are letters, digits, `-`, `_`, `.` and `:`"
        ));
    }
    Ok(())
}

/// The routing key template with its placeholders replaced, in one pass (a
/// value containing `{source}` is not replaced again). `ordering_key` is the
/// lane's key in ordered mode, else empty.
pub(crate) fn render(routing_key: &str, tenant: &str, source: &str, ordering_key: &str) -> String {
    template::render(
        routing_key,
        &[
            ("tenant", tenant),
            ("source", source),
            ("ordering_key", ordering_key),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{error_of, opts};

    fn err(v: serde_json::Value) -> String {
        error_of(RabbitMqSinkConfig::from_options, v)
    }

    #[test]
    fn reads_every_option() {
        let c = RabbitMqSinkConfig::from_options(&opts(serde_json::json!({
            "url": "amqp://guest:guest@127.0.0.1:5672/%2f", "exchange": "hooks",
            "routing_key": "{tenant}.{source}.{ordering_key}", "mandatory": false,
            "declare": {"type": "topic", "durable": false}, "timeout_ms": 500
        })))
        .expect("valid");
        assert_eq!(c.exchange, "hooks");
        assert_eq!(c.routing_key, "{tenant}.{source}.{ordering_key}");
        assert!(!c.mandatory);
        assert_eq!(
            c.declare,
            Some(Declare {
                kind: ExchangeType::Topic,
                durable: false
            })
        );
        assert_eq!(c.timeout_ms, 500);
        let c = RabbitMqSinkConfig::from_options(&opts(serde_json::json!({
            "url": "amqps://h.example", "exchange": "", "declare": null
        })));
        assert!(c.is_err(), "declare: null is not a map");
        let c = RabbitMqSinkConfig::from_options(&opts(serde_json::json!({
            "url": "amqps://h.example", "exchange": ""
        })))
        .expect("valid");
        assert_eq!(c.routing_key, "");
        assert!(c.mandatory);
        assert_eq!(c.declare, None);
        assert_eq!(c.timeout_ms, DEFAULT_TIMEOUT_MS);
        let c = RabbitMqSinkConfig::from_options(&opts(serde_json::json!({
            "url": "amqp://h", "exchange": "x", "declare": {"type": "direct"}
        })))
        .expect("valid");
        assert_eq!(
            c.declare,
            Some(Declare {
                kind: ExchangeType::Direct,
                durable: true
            })
        );
    }

    #[test]
    fn every_error_names_its_option() {
        let u = "amqp://127.0.0.1";
        let cases = [
            (serde_json::json!({"exchange": "x"}), "`url`"),
            (
                serde_json::json!({"url": "http://x", "exchange": "x"}),
                "`url`",
            ),
            (
                serde_json::json!({"url": "amqp//x", "exchange": "x"}),
                "`url`",
            ),
            (
                serde_json::json!({"url": "amqp://[::1", "exchange": "x"}),
                "`url`",
            ),
            (
                serde_json::json!({"url": "amqp://h/", "exchange": "x"}),
                "`url`",
            ),
            (serde_json::json!({"url": 5, "exchange": "x"}), "`url`"),
            (serde_json::json!({"url": u}), "`exchange`"),
            (
                serde_json::json!({"url": u, "exchange": "a b"}),
                "`exchange`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x".repeat(256)}),
                "`exchange`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "routing_key": "{tenat}"}),
                "`routing_key`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "routing_key": "a{"}),
                "`routing_key`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "routing_key": "a}"}),
                "`routing_key`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "routing_key": "k".repeat(256)}),
                "`routing_key`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "mandatory": "yes"}),
                "`mandatory`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "timeout_ms": 0}),
                "`timeout_ms`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "timeout_ms": -1}),
                "`timeout_ms`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "exchang": "y"}),
                "`exchang`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "declare": "topic"}),
                "`declare`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "declare": {}}),
                "`declare.type`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "declare": {"type": "x-delayed"}}),
                "`declare.type`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "declare": {"type": "direct", "durable": 1}}),
                "`declare.durable`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "x", "declare": {"type": "direct", "auto_delete": true}}),
                "`declare.auto_delete`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "", "declare": {"type": "direct"}}),
                "`declare`",
            ),
            (
                serde_json::json!({"url": u, "exchange": "amq.topic", "declare": {"type": "topic"}}),
                "`declare`",
            ),
        ];
        for (options, name) in cases {
            let e = err(options.clone());
            assert!(e.contains(name), "{options}: {e}");
        }
    }

    #[test]
    fn url_errors_hide_the_password() {
        let e = err(serde_json::json!({"url": "amqp://guest:s3cret@h/", "exchange": "x"}));
        assert!(e.contains("guest:***@h"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        let debug = format!(
            "{:?}",
            RabbitMqSinkConfig::new("amqp://guest:s3cret@h", "x", "k")
        );
        assert!(!debug.contains("s3cret"), "{debug}");
    }

    /// Every problem `from_options` reports for `v`, as its text.
    fn problems(v: serde_json::Value) -> Vec<String> {
        crate::test_support::problems_of(RabbitMqSinkConfig::from_options, v)
    }

    #[test]
    fn every_problem_is_reported_in_one_run() {
        assert_eq!(
            problems(serde_json::json!({
                "url": "amqp://h", "exchange": "",
                "declare": {"type": "bogus", "durable": "maybe", "auto_delete": true},
                "mandatory": "no", "timeout_ms": 0, "routing_key": "{tenat}"
            })),
            [
                "sink option `declare`: the default exchange (`exchange: \"\"`) always exists and cannot be declared",
                "unknown sink option `declare.auto_delete` (valid: declare.type, declare.durable)",
                "sink option `declare.durable`: must be true or false",
                "sink option `declare.type`: `bogus` is not direct, topic, fanout or headers",
                "sink option `mandatory`: must be true or false",
                "sink option `routing_key`: `{tenat}` is not a placeholder (only `{tenant}`, `{source}` and `{ordering_key}`)",
                "sink option `timeout_ms`: must be more than 0",
            ]
        );
        // A broken exchange: the rule of `declare` with it is not applied.
        assert_eq!(
            problems(
                serde_json::json!({"url": "http://guest:s3cret@h", "exchange": 5, "declare": {}, "queue": "q"})
            ),
            [
                "sink option `declare.type` is required",
                "sink option `exchange`: must be a string",
                "unknown sink option `queue` (valid: url, exchange, routing_key, mandatory, declare, timeout_ms, forward_headers)",
                "sink option `url`: `http://guest:***@h` is not an amqp:// or amqps:// URL",
            ]
        );
        assert_eq!(
            problems(serde_json::json!({"declare": "topic"})),
            [
                "sink option `declare`: must be a map: {type: direct|topic|fanout|headers, durable: true}",
                "sink option `url` is required",
                "sink option `exchange` is required",
            ]
        );
    }

    #[test]
    fn templates_render_in_one_pass() {
        assert_eq!(
            render(
                "h.{tenant}.{source}.{ordering_key}.{tenant}",
                "acme",
                "stripe",
                "cus_1"
            ),
            "h.acme.stripe.cus_1.acme"
        );
        assert_eq!(render("{source}", "{tenant}", "{tenant}", ""), "{tenant}");
        assert_eq!(render("k-{ordering_key}", "a", "b", ""), "k-");
        assert_eq!(render("plain", "a", "b", "c"), "plain");
    }
}
