//! The Redis sink's options.

use crate::forward::{self, ForwardHeaders, Medium};
use crate::secret::redact_url;
use crate::{OptionProblems, Options, SinkError, template};

/// The options of a redis sink.
const OPTIONS: &[&str] = &[
    "url",
    "mode",
    "stream",
    "channel",
    "maxlen",
    "timeout_ms",
    "forward_headers",
];

/// What a stream entry carries of the provider's headers (`forward_headers`,
/// [`crate::forward`]): each one a field named as the lower-case header, any
/// bytes; never `body`, `content_type` or an `ankusa_*` name (the sink's own
/// fields); at most 64 of them, a value at most 8 KiB, 64 KiB in all.
pub const FORWARD_MEDIUM: Medium = Medium {
    kind: "redis",
    max_headers: 64,
    max_name_bytes: 256,
    max_value_bytes: 8 * 1024,
    overhead_bytes: 0,
    max_total_bytes: 64 * 1024,
    reserved: &["body", "content_type"],
    reserved_prefixes: &["ankusa_"],
    name_rule: forward::any_name,
    value_ok: forward::any_value,
};

/// Records the problem of a stream or channel name (`option`), if any: empty,
/// or a template with another placeholder than `{tenant}` and `{source}`.
fn check_target(option: &str, target: &str, p: &mut OptionProblems) {
    if target.is_empty() {
        p.invalid(option, "must not be empty");
    } else if let Err(reason) = template::check(target, &["tenant", "source"]) {
        p.invalid(option, reason);
    }
}

/// `timeout_ms` when the option is absent: 10 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// What the sink does with a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisMode {
    /// `XADD` to the stream `stream` (the default).
    Stream,
    /// `PUBLISH` the body to the channel `channel`: fire-and-forget
    /// (module docs: [`crate::redis`]).
    Publish,
}

/// The Redis sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: redis
///     url: redis://127.0.0.1:6379/0        # required: redis:// (or redis+unix://)
///     stream: "hooks:{tenant}:{source}"    # stream mode: required, a template
///     maxlen: 100000                       # stream mode, optional: MAXLEN ~ N
///     # mode: publish                      # optional: publish instead of XADD
///     # channel: "hooks:{source}"          # publish mode: required, a template
///     timeout_ms: 5000                     # optional, > 0, default 10000
///     # forward_headers: [x-github-event]  # stream mode, optional: stored headers as fields
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisSinkConfig {
    /// The server: a `redis://` URL (credentials and database number in it).
    pub url: String,
    /// Stream or publish.
    pub mode: RedisMode,
    /// The stream key (stream mode) or channel (publish mode), a template in
    /// which `{tenant}` and `{source}` are replaced; no other `{...}`.
    pub target: String,
    /// `MAXLEN ~ N` on every XADD (stream mode only); more than 0.
    pub maxlen: Option<u64>,
    /// The bound on connecting and on one command, milliseconds; more than 0.
    pub timeout_ms: u64,
    /// The stored headers each stream entry carries as fields (stream mode
    /// only; [`FORWARD_MEDIUM`]). Default none.
    pub forward_headers: ForwardHeaders,
}

impl RedisSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        match self.mode {
            RedisMode::Stream => format!(
                "{} stream {}",
                crate::secret::redact_url(&self.url),
                self.target
            ),
            RedisMode::Publish => format!(
                "{} channel {} (publish)",
                crate::secret::redact_url(&self.url),
                self.target
            ),
        }
    }

    /// A stream-mode config with the default timeout and no MAXLEN.
    pub fn stream(url: impl Into<String>, stream: impl Into<String>) -> RedisSinkConfig {
        RedisSinkConfig {
            url: url.into(),
            mode: RedisMode::Stream,
            target: stream.into(),
            maxlen: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            forward_headers: ForwardHeaders::None,
        }
    }

    /// A publish-mode config with the default timeout.
    pub fn publish(url: impl Into<String>, channel: impl Into<String>) -> RedisSinkConfig {
        RedisSinkConfig {
            mode: RedisMode::Publish,
            ..RedisSinkConfig::stream(url, channel)
        }
    }

    /// The option that names [`RedisSinkConfig::target`] in this mode.
    pub fn target_option(&self) -> &'static str {
        match self.mode {
            RedisMode::Stream => "stream",
            RedisMode::Publish => "channel",
        }
    }

    /// Reads and validates the options `url`, `mode`, `stream`, `channel`,
    /// `maxlen` and `timeout_ms`; any other option is an error, as is a wrong
    /// type or value, or an option of the other mode. Every error names the
    /// option, and every problem of `options` is reported, in the order of
    /// the options ([`SinkError::Options`] when there are several). With a
    /// wrong `mode`, `stream` and `channel` are each checked as a name but
    /// neither is required.
    pub fn from_options(options: &Options) -> Result<RedisSinkConfig, SinkError> {
        let mut p = OptionProblems::new();
        let (mut url, mut mode, mut stream, mut channel, mut maxlen) =
            (None, None, None, None, None);
        let mut timeout_ms = DEFAULT_TIMEOUT_MS;
        let mut forward_headers = ForwardHeaders::None;
        for (name, value) in options {
            match name.as_str() {
                "url" => url = p.string("url", value),
                forward::OPTION => forward_headers = ForwardHeaders::read(value, &mut p),
                "mode" => {
                    mode = match p.string("mode", value).as_deref() {
                        Some("stream") => Some(RedisMode::Stream),
                        Some("publish") => Some(RedisMode::Publish),
                        Some(other) => {
                            p.invalid("mode", format!("`{other}` is not `stream` or `publish`"));
                            None
                        }
                        None => None,
                    };
                }
                "stream" => stream = p.string("stream", value),
                "channel" => channel = p.string("channel", value),
                "maxlen" => maxlen = p.whole("maxlen", value, "entries"),
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
        let mode_known = p.ok("mode");
        let mode = mode.unwrap_or(RedisMode::Stream);
        let target = if !mode_known {
            // Which of `stream` and `channel` is the target is not known:
            // check each given one as a name, require neither.
            if let Some(c) = &channel
                && p.ok("channel")
            {
                check_target("channel", c, &mut p);
            }
            if stream.is_none() {
                p.placeholder("stream");
            }
            stream
        } else {
            match mode {
                RedisMode::Stream => {
                    if channel.is_some() && p.ok("channel") {
                        p.invalid(
                            "channel",
                            "is for `mode: publish`; stream mode writes to `stream`",
                        );
                    }
                    if stream.is_none() && p.ok("stream") {
                        p.missing("stream");
                    }
                    stream
                }
                RedisMode::Publish => {
                    if stream.is_some() && p.ok("stream") {
                        p.invalid(
                            "stream",
                            "is for stream mode; `mode: publish` publishes to `channel`",
                        );
                    }
                    if maxlen.is_some() && p.ok("maxlen") {
                        p.invalid("maxlen", "trims a stream; `mode: publish` has none");
                    }
                    if channel.is_none() && p.ok("channel") {
                        p.missing("channel");
                    }
                    channel
                }
            }
        };
        let config = RedisSinkConfig {
            url: url.unwrap_or_default(),
            mode,
            target: target.unwrap_or_default(),
            maxlen,
            timeout_ms,
            forward_headers,
        };
        config.check(&mut p);
        p.sort_as_written(options);
        p.finish(config)
    }

    /// Checks every field, reporting every problem;
    /// [`crate::redis::RedisSink::new`] calls it too, so a config built in
    /// code is held to the same rules.
    pub fn validate(&self) -> Result<(), SinkError> {
        let mut p = OptionProblems::new();
        self.check(&mut p);
        p.into_result()
    }

    /// Records the problems of every field whose value is real
    /// ([`OptionProblems::ok`]), and the rule between `maxlen` and `mode`
    /// when both are.
    fn check(&self, p: &mut OptionProblems) {
        if p.ok("url") {
            p.take(self.client());
        }
        let option = self.target_option();
        if p.ok(option) {
            check_target(option, &self.target, p);
        }
        if p.ok("maxlen") {
            if self.maxlen == Some(0) {
                p.invalid("maxlen", "must be more than 0");
            } else if self.maxlen.is_some() && self.mode == RedisMode::Publish && p.ok("mode") {
                p.invalid("maxlen", "trims a stream; `mode: publish` has none");
            }
        }
        if p.ok("timeout_ms") && self.timeout_ms == 0 {
            p.invalid("timeout_ms", "must be more than 0");
        }
        if self.mode == RedisMode::Publish && !self.forward_headers.is_none() && p.ok("mode") {
            p.invalid(
                forward::OPTION,
                "`mode: publish` sends the body alone; headers travel as stream fields",
            );
        }
        self.forward_headers.check(&FORWARD_MEDIUM, p);
    }

    /// The client for [`RedisSinkConfig::url`] (parsing only; no connection).
    pub(crate) fn client(&self) -> Result<redis::Client, SinkError> {
        let scheme = self.url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("redis" | "redis+unix" | "unix")) {
            return Err(SinkError::invalid(
                "url",
                format!(
                    "`{}` is not a redis:// URL (this build has no TLS for rediss://)",
                    redact_url(&self.url)
                ),
            ));
        }
        redis::Client::open(self.url.as_str()).map_err(|e| {
            SinkError::invalid(
                "url",
                format!("`{}` is not a Redis URL: {e}", redact_url(&self.url)),
            )
        })
    }
}

/// The template with `{tenant}` and `{source}` replaced (in one pass).
pub(crate) fn render(target: &str, tenant: &str, source: &str) -> String {
    template::render(target, &[("tenant", tenant), ("source", source)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{error_of, opts};

    fn err(v: serde_json::Value) -> String {
        error_of(RedisSinkConfig::from_options, v)
    }

    #[test]
    fn forward_headers_are_stream_fields_only() {
        let c = RedisSinkConfig::from_options(&opts(serde_json::json!({
            "url": "redis://127.0.0.1:6379", "stream": "s", "forward_headers": "all"
        })))
        .expect("all");
        assert_eq!(c.forward_headers, ForwardHeaders::All);
        assert_eq!(
            err(
                serde_json::json!({"url": "redis://127.0.0.1:6379", "mode": "publish", "channel": "c", "forward_headers": ["x-a"]})
            ),
            "sink option `forward_headers`: `mode: publish` sends the body alone; headers travel as stream fields"
        );
        assert_eq!(
            err(
                serde_json::json!({"url": "redis://127.0.0.1:6379", "stream": "s", "forward_headers": ["body"]})
            ),
            "sink option `forward_headers`: \"body\" is a name the redis sink uses itself"
        );
    }

    #[test]
    fn reads_stream_and_publish_options() {
        let c = RedisSinkConfig::from_options(&opts(serde_json::json!({
            "url": "redis://127.0.0.1:6379/2", "stream": "h:{tenant}:{source}", "maxlen": 1000, "timeout_ms": 500
        })))
        .expect("valid");
        assert_eq!(c.mode, RedisMode::Stream);
        assert_eq!(c.target, "h:{tenant}:{source}");
        assert_eq!(c.maxlen, Some(1000));
        assert_eq!(c.timeout_ms, 500);
        let c = RedisSinkConfig::from_options(&opts(serde_json::json!({
            "url": "redis://127.0.0.1", "mode": "publish", "channel": "c:{source}"
        })))
        .expect("valid");
        assert_eq!(c.mode, RedisMode::Publish);
        assert_eq!(c.target, "c:{source}");
        assert_eq!(c.timeout_ms, DEFAULT_TIMEOUT_MS);
    }

    #[test]
    fn every_error_names_its_option() {
        assert!(err(serde_json::json!({"stream": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": "http://x", "stream": "s"})).contains("`url`"));
        let leak = err(serde_json::json!({"url": "rediss://:s3cr3t@h:6379", "stream": "s"}));
        assert!(
            leak.contains("`rediss://:***@h:6379`") && !leak.contains("s3cr3t"),
            "{leak}"
        );
        assert!(err(serde_json::json!({"url": "rediss://x", "stream": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": "redis://[::1", "stream": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": "redis://x"})).contains("`stream`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": ""})).contains("`stream`"));
        assert!(
            err(serde_json::json!({"url": "redis://x", "stream": "a:{tenat}"}))
                .contains("`stream`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "stream": "a:{tenant"}))
                .contains("`stream`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "stream": "s", "maxlen": 0}))
                .contains("`maxlen`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "stream": "s", "maxlen": "10"}))
                .contains("`maxlen`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "stream": "s", "mode": "xadd"}))
                .contains("`mode`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "stream": "s", "timeout_ms": 0}))
                .contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "stream": "s", "strem": 1}))
                .contains("`strem`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "mode": "publish"})).contains("`channel`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "mode": "publish", "channel": "c", "maxlen": 5}))
                .contains("`maxlen`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "mode": "publish", "stream": "s"}))
                .contains("`stream`")
        );
    }

    /// Every problem `from_options` reports for `v`, as its text.
    fn problems(v: serde_json::Value) -> Vec<String> {
        crate::test_support::problems_of(RedisSinkConfig::from_options, v)
    }

    #[test]
    fn every_problem_is_reported_in_one_run() {
        // The tester's example: three mistakes, three problems, in option order.
        let e = RedisSinkConfig::from_options(&opts(serde_json::json!({
            "url": "http://x", "stream": "", "strem": 1
        })))
        .expect_err("three problems");
        assert!(
            matches!(&e, SinkError::Options(all) if all.len() == 3),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "3 problems: sink option `stream`: must not be empty; \
             unknown sink option `strem` (valid: url, mode, stream, channel, maxlen, timeout_ms, forward_headers); \
             sink option `url`: `http://x` is not a redis:// URL (this build has no TLS for rediss://)"
        );
        // A wrong mode: stream and channel are each checked as names, neither
        // is required, and the rules of the mode are not applied.
        assert_eq!(
            problems(serde_json::json!({
                "url": "redis://x", "mode": "xadd", "channel": "c:{nope}", "maxlen": 0, "timeout_ms": "1"
            })),
            [
                "sink option `channel`: `{nope}` is not a placeholder (only `{tenant}` and `{source}`)",
                "sink option `maxlen`: must be more than 0",
                "sink option `mode`: `xadd` is not `stream` or `publish`",
                "sink option `timeout_ms`: must be a whole number of milliseconds",
            ]
        );
        // Publish mode: every option of the other mode, and the missing channel.
        assert_eq!(
            problems(
                serde_json::json!({"url": "redis://x", "mode": "publish", "stream": "s", "maxlen": 5})
            ),
            [
                "sink option `maxlen`: trims a stream; `mode: publish` has none",
                "sink option `stream`: is for stream mode; `mode: publish` publishes to `channel`",
                "sink option `channel` is required",
            ]
        );
        // A url of the wrong type is one problem, not also "required".
        assert_eq!(
            problems(serde_json::json!({"url": 5, "mode": "stream", "channel": "c"})),
            [
                "sink option `channel`: is for `mode: publish`; stream mode writes to `stream`",
                "sink option `url`: must be a string",
                "sink option `stream` is required",
            ]
        );
        // One problem keeps its own variant and text.
        let e = RedisSinkConfig::from_options(&opts(
            serde_json::json!({"url": "redis://x", "stream": "s", "maxlen": 0}),
        ))
        .expect_err("one problem");
        assert_eq!(e.to_string(), "sink option `maxlen`: must be more than 0");
        // A config built in code: every problem too.
        let mut c = RedisSinkConfig::publish("http://x", "");
        c.maxlen = Some(3);
        c.timeout_ms = 0;
        let e = c.validate().expect_err("four problems");
        let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
        assert_eq!(names, ["url", "channel", "maxlen", "timeout_ms"]);
    }

    #[test]
    fn templates_render_tenant_and_source() {
        assert_eq!(
            render("h:{tenant}:{source}:{tenant}", "acme", "stripe"),
            "h:acme:stripe:acme"
        );
        assert_eq!(render("plain", "a", "b"), "plain");
    }
}
