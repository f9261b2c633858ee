//! The NATS sink's options.

use std::str::FromStr as _;

use crate::forward::{self, ForwardHeaders, Medium};
use crate::{OptionProblems, Options, SinkError, template};

/// The options of a nats sink.
const OPTIONS: &[&str] = &["url", "subject", "mode", "timeout_ms", "forward_headers"];

/// What a message carries of the provider's headers (`forward_headers`,
/// [`crate::forward`]): NATS headers named as the lower-case header, values
/// UTF-8 without CR or LF; never an `ankusa_*` name, `content_type`, nor a
/// `nats-*` one (JetStream reads `Nats-Msg-Id`, `Nats-Expected-*`,
/// `Nats-Rollup`, `Nats-TTL` ... from a published message); at most 64 of
/// them, a value at most 4 KiB, 32 KiB in all (headers count against the
/// server's `max_payload`).
pub const FORWARD_MEDIUM: Medium = Medium {
    kind: "nats",
    max_headers: 64,
    max_name_bytes: 256,
    max_value_bytes: 4 * 1024,
    overhead_bytes: 0,
    max_total_bytes: 32 * 1024,
    reserved: &["content_type"],
    reserved_prefixes: &["ankusa_", "nats-"],
    name_rule: forward::any_name,
    value_ok: forward::text_value,
};

/// `timeout_ms` when the option is absent: 10 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// How the sink publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatsMode {
    /// JetStream publish, the stream's ack awaited (the default).
    JetStream,
    /// Core NATS publish and a flush: at-most-once past the broker (module
    /// docs: [`crate::nats`]).
    Core,
}

/// The NATS sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: nats
///     url: nats://127.0.0.1:4222           # required: nats:// or tls:// (user:pass@ allowed)
///     subject: "hooks.{tenant}.{source}"   # required, a template
///     # mode: core                         # optional: `jetstream` (default) or `core`
///     timeout_ms: 5000                     # optional, > 0, default 10000
///     # forward_headers: [x-github-event]  # optional: stored headers as NATS headers
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct NatsSinkConfig {
    /// The server: a `nats://` or `tls://` URL (credentials may be in it).
    pub url: String,
    /// JetStream or core NATS.
    pub mode: NatsMode,
    /// The subject, a template in which `{tenant}` and `{source}` are
    /// replaced; no other `{...}`, no wildcard, no whitespace.
    pub subject: String,
    /// The bound on one delivery (connecting at start, the publish, the
    /// JetStream ack or the flush), milliseconds; more than 0.
    pub timeout_ms: u64,
    /// The stored headers each message carries as NATS headers
    /// ([`FORWARD_MEDIUM`]). Default none.
    pub forward_headers: ForwardHeaders,
}

impl std::fmt::Debug for NatsSinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("NatsSinkConfig")
            .field("mode", &self.mode)
            .field("subject", &self.subject)
            .field("timeout_ms", &self.timeout_ms)
            .field("forward_headers", &self.forward_headers)
            .finish_non_exhaustive()
    }
}

impl NatsSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        match self.mode {
            NatsMode::JetStream => format!(
                "{} subject {}",
                crate::secret::redact_url(&self.url),
                self.subject
            ),
            NatsMode::Core => format!(
                "{} subject {} (core)",
                crate::secret::redact_url(&self.url),
                self.subject
            ),
        }
    }

    /// A JetStream config with the default timeout.
    pub fn jetstream(url: impl Into<String>, subject: impl Into<String>) -> NatsSinkConfig {
        NatsSinkConfig {
            url: url.into(),
            mode: NatsMode::JetStream,
            subject: subject.into(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            forward_headers: ForwardHeaders::None,
        }
    }

    /// A core-NATS config with the default timeout.
    pub fn core(url: impl Into<String>, subject: impl Into<String>) -> NatsSinkConfig {
        NatsSinkConfig {
            mode: NatsMode::Core,
            ..NatsSinkConfig::jetstream(url, subject)
        }
    }

    /// Reads and validates the options `url`, `subject`, `mode` and
    /// `timeout_ms`; any other option is an error, as is a wrong type or
    /// value. Every error names the option, and every problem of `options`
    /// is reported, in the order of the options ([`SinkError::Options`] when
    /// there are several).
    pub fn from_options(options: &Options) -> Result<NatsSinkConfig, SinkError> {
        let mut p = OptionProblems::new();
        let (mut url, mut subject, mut mode) = (None, None, NatsMode::JetStream);
        let mut timeout_ms = DEFAULT_TIMEOUT_MS;
        let mut forward_headers = ForwardHeaders::None;
        for (name, value) in options {
            match name.as_str() {
                "url" => url = p.string("url", value),
                "subject" => subject = p.string("subject", value),
                forward::OPTION => forward_headers = ForwardHeaders::read(value, &mut p),
                "mode" => match p.string("mode", value).as_deref() {
                    Some("jetstream") => mode = NatsMode::JetStream,
                    Some("core") => mode = NatsMode::Core,
                    Some(other) => {
                        p.invalid("mode", format!("`{other}` is not `jetstream` or `core`"));
                    }
                    None => {}
                },
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
        if subject.is_none() && p.ok("subject") {
            p.missing("subject");
        }
        let config = NatsSinkConfig {
            url: url.unwrap_or_default(),
            mode,
            subject: subject.unwrap_or_default(),
            timeout_ms,
            forward_headers,
        };
        config.check(&mut p);
        p.sort_as_written(options);
        p.finish(config)
    }

    /// Checks every field, reporting every problem;
    /// [`crate::nats::NatsSink::new`] calls it too, so a config built in code
    /// is held to the same rules.
    pub fn validate(&self) -> Result<(), SinkError> {
        let mut p = OptionProblems::new();
        self.check(&mut p);
        p.into_result()
    }

    /// Records the problems of every field whose value is real
    /// ([`OptionProblems::ok`]).
    fn check(&self, p: &mut OptionProblems) {
        if p.ok("url") {
            p.take(self.server_addr());
        }
        if p.ok("subject")
            && let Err(reason) = check_subject_template(&self.subject)
        {
            p.invalid("subject", reason);
        }
        if p.ok("timeout_ms") && self.timeout_ms == 0 {
            p.invalid("timeout_ms", "must be more than 0");
        }
        self.forward_headers.check(&FORWARD_MEDIUM, p);
    }

    /// The server address of [`NatsSinkConfig::url`] (parsing only; no
    /// connection).
    pub(crate) fn server_addr(&self) -> Result<async_nats::ServerAddr, SinkError> {
        // The URL is not echoed back: it may hold a password.
        let scheme = self.url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("nats" | "tls")) {
            return Err(SinkError::invalid(
                "url",
                "must be a nats:// or tls:// URL (e.g. nats://127.0.0.1:4222)",
            ));
        }
        let addr = async_nats::ServerAddr::from_str(&self.url)
            .map_err(|e| SinkError::invalid("url", format!("is not a NATS server URL: {e}")))?;
        if addr.host().is_empty() {
            return Err(SinkError::invalid("url", "has no host"));
        }
        Ok(addr)
    }
}

/// Checks a subject template: not empty; every `{...}` is `{tenant}` or
/// `{source}`; and the subject with placeholders filled in is a valid publish
/// subject (dot-separated non-empty tokens, no whitespace, no `*` or `>`
/// wildcard).
fn check_subject_template(template: &str) -> Result<(), String> {
    if template.is_empty() {
        return Err("must not be empty".into());
    }
    template::check(template, &["tenant", "source"])?;
    check_subject(&render(template, "t", "s"))
}

/// Checks a concrete publish subject (see [`check_subject_template`]).
pub(crate) fn check_subject(subject: &str) -> Result<(), String> {
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "`{subject}` holds whitespace or a control character"
        ));
    }
    for token in subject.split('.') {
        if token.is_empty() {
            return Err(format!(
                "`{subject}` has an empty token (a leading, trailing or doubled `.`)"
            ));
        }
        if token == "*" || token == ">" {
            return Err(format!(
                "`{subject}` has the wildcard `{token}`: one publishes to a concrete subject"
            ));
        }
    }
    Ok(())
}

/// The subject template with `{tenant}` and `{source}` replaced (in one
/// pass).
pub(crate) fn render(subject: &str, tenant: &str, source: &str) -> String {
    template::render(subject, &[("tenant", tenant), ("source", source)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{error_of, opts};

    fn err(v: serde_json::Value) -> String {
        error_of(NatsSinkConfig::from_options, v)
    }

    #[test]
    fn reads_jetstream_and_core_options() {
        let c = NatsSinkConfig::from_options(&opts(serde_json::json!({
            "url": "nats://127.0.0.1:4222", "subject": "hooks.{tenant}.{source}", "timeout_ms": 500
        })))
        .expect("valid");
        assert_eq!(c.mode, NatsMode::JetStream);
        assert_eq!(c.subject, "hooks.{tenant}.{source}");
        assert_eq!(c.timeout_ms, 500);
        let c = NatsSinkConfig::from_options(&opts(serde_json::json!({
            "url": "tls://user:secret@nats.example:4443", "subject": "s", "mode": "core"
        })))
        .expect("valid");
        assert_eq!(c.mode, NatsMode::Core);
        assert_eq!(c.timeout_ms, DEFAULT_TIMEOUT_MS);
        assert!(!format!("{c:?}").contains("secret"));
        let c = NatsSinkConfig::from_options(&opts(serde_json::json!({
            "url": "nats://h", "subject": "s", "mode": "jetstream"
        })))
        .expect("valid");
        assert_eq!(c, NatsSinkConfig::jetstream("nats://h", "s"));
    }

    #[test]
    fn every_error_names_its_option() {
        assert!(err(serde_json::json!({"subject": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": 4222, "subject": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": "http://x", "subject": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": "ws://x", "subject": "s"})).contains("`url`"));
        assert!(
            err(serde_json::json!({"url": "127.0.0.1:4222", "subject": "s"})).contains("`url`")
        );
        assert!(err(serde_json::json!({"url": "nats://[::1", "subject": "s"})).contains("`url`"));
        assert!(err(serde_json::json!({"url": "nats://x"})).contains("`subject`"));
        for bad in [
            "",
            "a..b",
            ".a",
            "a.",
            "a.*",
            "a.>",
            "a b",
            "a.{tenat}",
            "a.{tenant",
            "a}",
            "a\tb",
        ] {
            let e = err(serde_json::json!({"url": "nats://x", "subject": bad}));
            assert!(e.contains("`subject`"), "{bad:?}: {e}");
        }
        assert!(
            err(serde_json::json!({"url": "nats://x", "subject": "s", "mode": "stream"}))
                .contains("`mode`")
        );
        assert!(
            err(serde_json::json!({"url": "nats://x", "subject": "s", "timeout_ms": 0}))
                .contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"url": "nats://x", "subject": "s", "timeout_ms": "1"}))
                .contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"url": "nats://x", "subject": "s", "stream": "S"}))
                .contains("`stream`")
        );
        assert!(
            !err(serde_json::json!({"url": "http://u:secret@x", "subject": "s"}))
                .contains("secret")
        );
    }

    /// Every problem `from_options` reports for `v`, as its text.
    fn problems(v: serde_json::Value) -> Vec<String> {
        crate::test_support::problems_of(NatsSinkConfig::from_options, v)
    }

    #[test]
    fn every_problem_is_reported_in_one_run() {
        assert_eq!(
            problems(serde_json::json!({"url": "http://x", "subject": "a.*", "mode": "bogus"})),
            [
                "sink option `mode`: `bogus` is not `jetstream` or `core`",
                "sink option `subject`: `a.*` has the wildcard `*`: one publishes to a concrete subject",
                "sink option `url`: must be a nats:// or tls:// URL (e.g. nats://127.0.0.1:4222)",
            ]
        );
        assert_eq!(
            problems(serde_json::json!({"timeout_ms": 0, "stream": "S", "subject": 1})),
            [
                "unknown sink option `stream` (valid: url, subject, mode, timeout_ms, forward_headers)",
                "sink option `subject`: must be a string",
                "sink option `timeout_ms`: must be more than 0",
                "sink option `url` is required",
            ]
        );
        let mut c = NatsSinkConfig::core("nats://h", "a..b");
        c.timeout_ms = 0;
        let e = c.validate().expect_err("two problems");
        assert!(
            matches!(&e, SinkError::Options(all) if all.len() == 2),
            "{e}"
        );
    }

    #[test]
    fn templates_render_tenant_and_source() {
        assert_eq!(
            render("h.{tenant}.{source}.{tenant}", "acme", "stripe"),
            "h.acme.stripe.acme"
        );
        assert_eq!(render("plain", "a", "b"), "plain");
        assert!(check_subject("h.acme.stripe").is_ok());
        assert!(check_subject("h.acme corp.stripe").is_err());
    }
}
