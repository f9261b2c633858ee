//! The Redis sink's options.

use crate::secret::redact_url;
use crate::{Options, SinkError, template};

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
}

impl RedisSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        match self.mode {
            RedisMode::Stream => format!("{} stream {}", crate::secret::redact_url(&self.url), self.target),
            RedisMode::Publish => format!("{} channel {} (publish)", crate::secret::redact_url(&self.url), self.target),
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
    /// option.
    pub fn from_options(options: &Options) -> Result<RedisSinkConfig, SinkError> {
        let string = |name: &str, v: &serde_json::Value| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| SinkError::invalid(name, "must be a string"))
        };
        let (mut url, mut mode, mut stream, mut channel, mut maxlen) = (None, None, None, None, None);
        let mut timeout_ms = DEFAULT_TIMEOUT_MS;
        for (name, value) in options {
            match name.as_str() {
                "url" => url = Some(string("url", value)?),
                "mode" => {
                    mode = Some(match string("mode", value)?.as_str() {
                        "stream" => RedisMode::Stream,
                        "publish" => RedisMode::Publish,
                        other => {
                            return Err(SinkError::invalid(
                                "mode",
                                format!("`{other}` is not `stream` or `publish`"),
                            ));
                        }
                    });
                }
                "stream" => stream = Some(string("stream", value)?),
                "channel" => channel = Some(string("channel", value)?),
                "maxlen" => {
                    maxlen = Some(value.as_u64().ok_or_else(|| {
                        SinkError::invalid("maxlen", "must be a whole number of entries")
                    })?);
                }
                "timeout_ms" => {
                    timeout_ms = value.as_u64().ok_or_else(|| {
                        SinkError::invalid("timeout_ms", "must be a whole number of milliseconds")
                    })?;
                }
                _ => {
                    return Err(SinkError::UnknownOption {
                        option: name.clone(),
                    });
                }
            }
        }
        let url = url.ok_or(SinkError::MissingOption { option: "url" })?;
        let mode = mode.unwrap_or(RedisMode::Stream);
        let target = match mode {
            RedisMode::Stream => {
                if channel.is_some() {
                    return Err(SinkError::invalid(
                        "channel",
                        "is for `mode: publish`; stream mode writes to `stream`",
                    ));
                }
                stream.ok_or(SinkError::MissingOption { option: "stream" })?
            }
            RedisMode::Publish => {
                if stream.is_some() {
                    return Err(SinkError::invalid(
                        "stream",
                        "is for stream mode; `mode: publish` publishes to `channel`",
                    ));
                }
                if maxlen.is_some() {
                    return Err(SinkError::invalid(
                        "maxlen",
                        "trims a stream; `mode: publish` has none",
                    ));
                }
                channel.ok_or(SinkError::MissingOption { option: "channel" })?
            }
        };
        let config = RedisSinkConfig {
            url,
            mode,
            target,
            maxlen,
            timeout_ms,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks every field; [`crate::redis::RedisSink::new`] calls it too, so
    /// a config built in code is held to the same rules.
    pub fn validate(&self) -> Result<(), SinkError> {
        self.client()?;
        let option = self.target_option();
        if self.target.is_empty() {
            return Err(SinkError::invalid(option, "must not be empty"));
        }
        template::check(&self.target, &["tenant", "source"])
            .map_err(|reason| SinkError::invalid(option, reason))?;
        if self.maxlen == Some(0) {
            return Err(SinkError::invalid("maxlen", "must be more than 0"));
        }
        if self.maxlen.is_some() && self.mode == RedisMode::Publish {
            return Err(SinkError::invalid(
                "maxlen",
                "trims a stream; `mode: publish` has none",
            ));
        }
        if self.timeout_ms == 0 {
            return Err(SinkError::invalid("timeout_ms", "must be more than 0"));
        }
        Ok(())
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
        redis::Client::open(self.url.as_str())
            .map_err(|e| SinkError::invalid("url", format!("`{}` is not a Redis URL: {e}", redact_url(&self.url))))
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
        assert!(leak.contains("`rediss://:***@h:6379`") && !leak.contains("s3cr3t"), "{leak}");
        assert!(err(serde_json::json!({"url": "rediss://x", "stream": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": "redis://[::1", "stream": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": "redis://x"})).contains("`stream`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": ""})).contains("`stream`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": "a:{tenat}"})).contains("`stream`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": "a:{tenant"})).contains("`stream`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": "s", "maxlen": 0})).contains("`maxlen`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": "s", "maxlen": "10"})).contains("`maxlen`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": "s", "mode": "xadd"})).contains("`mode`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": "s", "timeout_ms": 0})).contains("`timeout_ms`"));
        assert!(err(serde_json::json!({"url": "redis://x", "stream": "s", "strem": 1})).contains("`strem`"));
        assert!(err(serde_json::json!({"url": "redis://x", "mode": "publish"})).contains("`channel`"));
        assert!(
            err(serde_json::json!({"url": "redis://x", "mode": "publish", "channel": "c", "maxlen": 5}))
                .contains("`maxlen`")
        );
        assert!(
            err(serde_json::json!({"url": "redis://x", "mode": "publish", "stream": "s"})).contains("`stream`")
        );
    }

    #[test]
    fn templates_render_tenant_and_source() {
        assert_eq!(render("h:{tenant}:{source}:{tenant}", "acme", "stripe"), "h:acme:stripe:acme");
        assert_eq!(render("plain", "a", "b"), "plain");
    }
}
