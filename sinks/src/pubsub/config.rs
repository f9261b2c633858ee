//! The Pub/Sub sink's options.

use std::path::PathBuf;
use std::sync::Arc;

use crate::forward::{self, ForwardHeaders, Medium};
use crate::{Envelope, OptionProblems, Options, SinkError, template};

/// The options of a pubsub sink (`ordering_key` in its legacy string form,
/// which the config crate leaves to an unordered sink).
const OPTIONS: &[&str] = &[
    "project",
    "topic",
    "endpoint",
    "credentials",
    "emulator_host",
    "timeout_ms",
    "ordering_key",
    "forward_headers",
];

/// The most attributes Pub/Sub takes on one message.
pub const MAX_ATTRIBUTES: usize = 100;

/// What a message carries of the provider's headers (`forward_headers`,
/// [`crate::forward`]): attributes named as the lower-case header (a key of
/// at most 256 bytes, not starting `goog`, which Google reserves), UTF-8
/// values of at most 1,024 bytes (Pub/Sub's limits); never an `ankusa_*` name
/// or `content_type`. The count is what is left of Pub/Sub's 100 attributes
/// after the sink's own (5 to 7); 64 KiB in all.
pub const FORWARD_MEDIUM: Medium = Medium {
    kind: "pubsub",
    max_headers: MAX_ATTRIBUTES - 5,
    max_name_bytes: 256,
    max_value_bytes: 1024,
    max_total_bytes: 64 * 1024,
    overhead_bytes: 0,
    reserved: &["content_type"],
    reserved_prefixes: &["ankusa_", "goog"],
    name_rule: forward::any_name,
    value_ok: forward::text_value,
};

/// `endpoint` when the option is absent: Google's global endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://pubsub.googleapis.com";
/// `timeout_ms` when the option is absent: 10 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// The environment variable Google's own clients read: when set (and not
/// empty), `http://$PUBSUB_EMULATOR_HOST` is the endpoint and no credentials
/// are sent.
pub const EMULATOR_HOST_ENV: &str = "PUBSUB_EMULATOR_HOST";
/// The longest ordering key Pub/Sub accepts, bytes.
pub const MAX_ORDERING_KEY_BYTES: usize = 1024;

/// A function giving the legacy ordering key of a hook (ADR 0004 section 1:
/// the MFA form). Only the library API can set one; YAML has the string form.
/// `None` or `Some("")` sends no ordering key; a panic is caught and counts as
/// `None`.
pub type OrderingKeyFn = Arc<dyn Fn(&Envelope) -> Option<String> + Send + Sync>;

/// The legacy `ordering_key` of an unordered Pub/Sub sink (ADR 0004 section
/// 1): sent as `orderingKey` on every message, without lanes. With
/// `ordered: true` the key is core's and the sink sends
/// [`crate::DeliveryCtx::ordering_key_text`] instead.
#[derive(Clone)]
pub enum LegacyOrderingKey {
    /// A fixed key (YAML `ordering_key: some-string` without `ordered`).
    Fixed(String),
    /// A function of the hook (library API only).
    Fn(OrderingKeyFn),
}

impl std::fmt::Debug for LegacyOrderingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LegacyOrderingKey::Fixed(k) => f.debug_tuple("Fixed").field(k).finish(),
            LegacyOrderingKey::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

impl PartialEq for LegacyOrderingKey {
    fn eq(&self, other: &LegacyOrderingKey) -> bool {
        match (self, other) {
            (LegacyOrderingKey::Fixed(a), LegacyOrderingKey::Fixed(b)) => a == b,
            (LegacyOrderingKey::Fn(a), LegacyOrderingKey::Fn(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for LegacyOrderingKey {}

/// The Pub/Sub sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: pubsub
///     project: my-project                       # required
///     topic: "hooks-{tenant}-{source}"          # required, a template
///     endpoint: https://us-east1-pubsub.googleapis.com  # optional; regional for ordered mode
///     credentials: /etc/ankusa/pubsub-sa.json   # optional; default: Application Default Credentials
///     timeout_ms: 5000                          # optional, > 0, default 10000
///     # emulator_host: 127.0.0.1:8085           # optional, like PUBSUB_EMULATOR_HOST
///     # ordering_key: fixed-key                 # legacy form, only without ordered: true
///     # forward_headers: [x-github-event]       # optional: stored headers as attributes
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PubSubSinkConfig {
    /// The Google Cloud project id of the topic.
    pub project: String,
    /// The topic id (not the `projects/..` path), a template in which
    /// `{tenant}` and `{source}` are replaced; no other `{...}`.
    pub topic: String,
    /// The API's base URL: `https` (or `http` for a local peer), a host, an
    /// optional port, no path. Default [`DEFAULT_ENDPOINT`]; ordered mode
    /// needs a regional one (module docs: [`crate::pubsub`]).
    pub endpoint: String,
    /// A service-account key file (JSON) to sign token requests with; `None`
    /// uses the Application Default Credentials chain. Ignored (no
    /// credentials are sent) when [`PubSubSinkConfig::emulator_host`] is set.
    pub credentials: Option<PathBuf>,
    /// `host:port` of an emulator: when set, the endpoint is
    /// `http://<emulator_host>` and no credentials are sent. From the
    /// `emulator_host` option, else the `PUBSUB_EMULATOR_HOST` environment
    /// variable ([`PubSubSinkConfig::from_options_with_env`]).
    pub emulator_host: Option<String>,
    /// The bound on one token fetch and on one publish request, milliseconds;
    /// more than 0.
    pub timeout_ms: u64,
    /// The legacy ordering key of an unordered sink, if any.
    pub legacy_ordering_key: Option<LegacyOrderingKey>,
    /// The stored headers each message carries as attributes
    /// ([`FORWARD_MEDIUM`]), as many as fit. Default none.
    pub forward_headers: ForwardHeaders,
}

impl PubSubSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        format!("projects/{}/topics/{}", self.project, self.topic)
    }

    /// A config for `project`/`topic` on the global endpoint with Application
    /// Default Credentials, the default timeout, no emulator and no legacy
    /// key.
    pub fn new(project: impl Into<String>, topic: impl Into<String>) -> PubSubSinkConfig {
        PubSubSinkConfig {
            project: project.into(),
            topic: topic.into(),
            endpoint: DEFAULT_ENDPOINT.to_owned(),
            credentials: None,
            emulator_host: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            legacy_ordering_key: None,
            forward_headers: ForwardHeaders::None,
        }
    }

    /// [`PubSubSinkConfig::from_options_with_env`] with the process's
    /// environment: the one place the sink reads `PUBSUB_EMULATOR_HOST`.
    pub fn from_options(options: &Options) -> Result<PubSubSinkConfig, SinkError> {
        PubSubSinkConfig::from_options_with_env(options, |name| std::env::var(name).ok())
    }

    /// Reads and validates the options `project`, `topic`, `endpoint`,
    /// `credentials`, `timeout_ms`, `emulator_host` and `ordering_key` (the
    /// legacy string form the config crate leaves in an unordered sink's
    /// options); any other option is an error, as is a wrong type or value.
    /// Every error names the option, and every problem of `options` is
    /// reported, in the order of the options ([`SinkError::Options`] when
    /// there are several). Without an `emulator_host` option,
    /// `env("PUBSUB_EMULATOR_HOST")` is used when it is set and not empty. A
    /// `credentials` file is read and checked here (no network).
    pub fn from_options_with_env(
        options: &Options,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<PubSubSinkConfig, SinkError> {
        let mut p = OptionProblems::new();
        let mut config = PubSubSinkConfig::new(String::new(), String::new());
        let (mut project, mut topic) = (None, None);
        for (name, value) in options {
            match name.as_str() {
                "project" => project = p.string("project", value),
                "topic" => topic = p.string("topic", value),
                "endpoint" => {
                    if let Some(e) = p.string("endpoint", value) {
                        config.endpoint = e;
                    }
                }
                "credentials" => {
                    config.credentials = p.string("credentials", value).map(PathBuf::from)
                }
                "emulator_host" => config.emulator_host = p.string("emulator_host", value),
                forward::OPTION => config.forward_headers = ForwardHeaders::read(value, &mut p),
                "timeout_ms" => {
                    if let Some(ms) = p.whole("timeout_ms", value, "milliseconds") {
                        config.timeout_ms = ms;
                    }
                }
                "ordering_key" => match value.as_str() {
                    Some(key) => {
                        config.legacy_ordering_key = Some(LegacyOrderingKey::Fixed(key.to_owned()));
                    }
                    None => p.invalid(
                        "ordering_key",
                        "without ordered: true must be a string (the legacy fixed key)",
                    ),
                },
                _ => p.unknown(name.clone(), OPTIONS),
            }
        }
        match project {
            Some(project) => config.project = project,
            None if p.ok("project") => p.missing("project"),
            None => {}
        }
        match topic {
            Some(topic) => config.topic = topic,
            None if p.ok("topic") => p.missing("topic"),
            None => {}
        }
        // An `emulator_host` option that is not a string is not replaced by
        // the variable: whether an emulator is meant is unknown.
        if config.emulator_host.is_none() && p.ok("emulator_host") {
            config.emulator_host = env(EMULATOR_HOST_ENV).filter(|h| !h.is_empty());
            if let Some(host) = &config.emulator_host
                && let Err(reason) = check_emulator_host(host)
            {
                p.invalid(
                    "emulator_host",
                    format!("from the environment variable {EMULATOR_HOST_ENV}: {reason}"),
                );
            }
        }
        config.check(&mut p);
        p.sort_as_written(options);
        p.finish(config)
    }

    /// Checks every field, and reads the `credentials` file (unless an
    /// emulator is set) to check it is a service-account key; no network.
    /// Reports every problem. [`crate::pubsub::PubSubSink::new`] calls it
    /// too, so a config built in code is held to the same rules.
    pub fn validate(&self) -> Result<(), SinkError> {
        let mut p = OptionProblems::new();
        self.check(&mut p);
        p.into_result()
    }

    /// Records the problems of every field whose value is real
    /// ([`OptionProblems::ok`]); the `credentials` file is read only when
    /// whether an emulator is used is known.
    fn check(&self, p: &mut OptionProblems) {
        if p.ok("project")
            && let Err(reason) = check_project(&self.project)
        {
            p.invalid("project", reason);
        }
        if p.ok("topic")
            && let Err(reason) = check_topic(&self.topic)
        {
            p.invalid("topic", reason);
        }
        if p.ok("endpoint") {
            p.take(parse_endpoint(&self.endpoint));
        }
        if p.ok("emulator_host")
            && let Some(host) = &self.emulator_host
            && let Err(reason) = check_emulator_host(host)
        {
            p.invalid("emulator_host", reason);
        }
        if p.ok("timeout_ms") && self.timeout_ms == 0 {
            p.invalid("timeout_ms", "must be more than 0");
        }
        self.forward_headers.check(&FORWARD_MEDIUM, p);
        if let Some(LegacyOrderingKey::Fixed(key)) = &self.legacy_ordering_key {
            if key.is_empty() {
                p.invalid("ordering_key", "must not be empty");
            } else if key.len() > MAX_ORDERING_KEY_BYTES {
                p.invalid(
                    "ordering_key",
                    format!(
                        "is {} bytes; Pub/Sub takes at most {MAX_ORDERING_KEY_BYTES}",
                        key.len()
                    ),
                );
            }
        }
        if self.emulator_host.is_none()
            && p.ok("emulator_host")
            && let Some(path) = &self.credentials
        {
            p.take(check_credentials(path));
        }
    }

    /// The base URL requests go to: `http://<emulator_host>` when an emulator
    /// is set, else [`PubSubSinkConfig::endpoint`]; no trailing `/`.
    pub fn base_url(&self) -> Result<reqwest::Url, SinkError> {
        match &self.emulator_host {
            Some(host) => reqwest::Url::parse(&format!("http://{host}")).map_err(|e| {
                SinkError::invalid("emulator_host", format!("`{host}` is not host:port: {e}"))
            }),
            None => parse_endpoint(&self.endpoint),
        }
    }
}

/// A project id: what Google allows (lower-case letters, digits, `-`, and the
/// `domain.com:` prefix of domain-scoped projects), checked loosely: no byte
/// that would change the request path.
fn check_project(project: &str) -> Result<(), String> {
    if project.is_empty() {
        return Err("must not be empty".into());
    }
    if let Some(c) = project
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '_')))
    {
        return Err(format!(
            "`{project}` has `{c}`: a project id is letters, digits, `-`, `.` and `:`"
        ));
    }
    Ok(())
}

/// A topic template: `{tenant}` and `{source}` placeholders, and otherwise
/// the characters of a topic id (letters, digits, `-_.~+%`), 255 at most, not
/// starting with `goog`.
fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("must not be empty".into());
    }
    template::check(topic, &["tenant", "source"])?;
    let literal = render(topic, "", "");
    if let Some(c) = literal
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+' | '%')))
    {
        return Err(format!(
            "has `{c}`: a topic id is letters, digits and `-_.~+%` (the topic id, not its projects/.. path)"
        ));
    }
    if literal.len() > 255 {
        return Err("is longer than 255 characters".into());
    }
    if topic.starts_with("goog") {
        return Err("must not start with `goog` (reserved by Google)".into());
    }
    Ok(())
}

/// `host:port` (or a bare host), as `PUBSUB_EMULATOR_HOST` holds it.
fn check_emulator_host(host: &str) -> Result<(), String> {
    if host.contains("://") || host.contains('/') {
        return Err(format!(
            "`{host}` must be host:port, without a scheme or path"
        ));
    }
    let url = reqwest::Url::parse(&format!("http://{host}"))
        .map_err(|e| format!("`{host}` is not host:port: {e}"))?;
    if url.host_str().is_none_or(str::is_empty) || url.path() != "/" || url.query().is_some() {
        return Err(format!("`{host}` is not host:port"));
    }
    Ok(())
}

/// The endpoint as a URL: http(s), a host, no path, query or user info.
pub(crate) fn parse_endpoint(endpoint: &str) -> Result<reqwest::Url, SinkError> {
    let bad = |reason: String| SinkError::invalid("endpoint", reason);
    let url = reqwest::Url::parse(endpoint).map_err(|e| {
        let shown = crate::secret::redact_url(endpoint);
        bad(format!("`{shown}` is not a URL: {e}"))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!(
            "scheme `{}` is not https or http",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad(format!("`{endpoint}` has no host")));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(bad(format!(
            "`{endpoint}` must be a base URL without a path (the sink adds /v1/projects/..)"
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not hold user info".into()));
    }
    Ok(url)
}

/// Reads a service-account key file and checks the fields the token request
/// needs, so a wrong path or file is a load error rather than a retry loop.
fn check_credentials(path: &std::path::Path) -> Result<(), SinkError> {
    let bad = |reason: String| SinkError::invalid("credentials", reason);
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read `{shown}`: {e}")))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("`{shown}` is not JSON: {e}")))?;
    match json.get("type").and_then(serde_json::Value::as_str) {
        None | Some("service_account") => {}
        Some(other) => {
            return Err(bad(format!(
                "`{shown}` is a `{other}` credentials file, not a service-account key; \
                 leave `credentials` out to use Application Default Credentials"
            )));
        }
    }
    for field in ["private_key", "client_email", "token_uri"] {
        if !json.get(field).is_some_and(serde_json::Value::is_string) {
            return Err(bad(format!(
                "`{shown}` is not a service-account key: no `{field}`"
            )));
        }
    }
    Ok(())
}

/// The topic template with `{tenant}` and `{source}` replaced (in one pass).
pub(crate) fn render(topic: &str, tenant: &str, source: &str) -> String {
    template::render(topic, &[("tenant", tenant), ("source", source)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{error_of, opts};

    /// The test key shipped for the integration tests (a throwaway key).
    const KEY_FILE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/data/pubsub-test-service-account.json"
    );

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn err(v: serde_json::Value) -> String {
        error_of(
            |o: &Options| PubSubSinkConfig::from_options_with_env(o, no_env),
            v,
        )
    }

    #[test]
    fn reads_every_option() {
        let c = PubSubSinkConfig::from_options_with_env(
            &opts(serde_json::json!({
                "project": "my-project", "topic": "hooks-{tenant}-{source}",
                "endpoint": "https://us-east1-pubsub.googleapis.com/",
                "credentials": KEY_FILE, "timeout_ms": 500, "ordering_key": "fixed"
            })),
            no_env,
        )
        .expect("valid");
        assert_eq!(c.project, "my-project");
        assert_eq!(c.topic, "hooks-{tenant}-{source}");
        assert_eq!(c.endpoint, "https://us-east1-pubsub.googleapis.com/");
        assert_eq!(
            c.base_url().expect("url").as_str(),
            "https://us-east1-pubsub.googleapis.com/"
        );
        assert_eq!(c.credentials, Some(PathBuf::from(KEY_FILE)));
        assert_eq!(c.emulator_host, None);
        assert_eq!(c.timeout_ms, 500);
        assert_eq!(
            c.legacy_ordering_key,
            Some(LegacyOrderingKey::Fixed("fixed".into()))
        );
        let c = PubSubSinkConfig::from_options_with_env(
            &opts(serde_json::json!({"project": "p1", "topic": "t1"})),
            no_env,
        )
        .expect("valid");
        assert_eq!(c, PubSubSinkConfig::new("p1", "t1"));
        assert_eq!(c.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(c.timeout_ms, DEFAULT_TIMEOUT_MS);
    }

    #[test]
    fn the_emulator_env_var_sets_the_endpoint_and_drops_credentials() {
        let env = |name: &str| (name == EMULATOR_HOST_ENV).then(|| "127.0.0.1:8085".to_owned());
        let c = PubSubSinkConfig::from_options_with_env(
            &opts(serde_json::json!({"project": "p", "topic": "t", "credentials": "/nonexistent/key.json"})),
            env,
        )
        .expect("an emulator ignores credentials");
        assert_eq!(c.emulator_host.as_deref(), Some("127.0.0.1:8085"));
        assert_eq!(
            c.base_url().expect("url").as_str(),
            "http://127.0.0.1:8085/"
        );
        // The option wins over the variable; an empty variable is unset.
        let c = PubSubSinkConfig::from_options_with_env(
            &opts(serde_json::json!({"project": "p", "topic": "t", "emulator_host": "localhost:9000"})),
            env,
        )
        .expect("valid");
        assert_eq!(c.emulator_host.as_deref(), Some("localhost:9000"));
        let c = PubSubSinkConfig::from_options_with_env(
            &opts(serde_json::json!({"project": "p", "topic": "t"})),
            |_| Some(String::new()),
        )
        .expect("valid");
        assert_eq!(c.emulator_host, None);
        let e = PubSubSinkConfig::from_options_with_env(
            &opts(serde_json::json!({"project": "p", "topic": "t"})),
            |_| Some("http://127.0.0.1:8085".to_owned()),
        )
        .map(|_| ())
        .expect_err("a scheme in the variable");
        assert!(e.to_string().contains("`emulator_host`"), "{e}");
        assert!(e.to_string().contains(EMULATOR_HOST_ENV), "{e}");
    }

    #[test]
    fn every_error_names_its_option() {
        assert!(err(serde_json::json!({"topic": "t"})).contains("`project`"));
        assert!(err(serde_json::json!({"project": "p"})).contains("`topic`"));
        assert!(err(serde_json::json!({"project": "", "topic": "t"})).contains("`project`"));
        assert!(err(serde_json::json!({"project": "a/b", "topic": "t"})).contains("`project`"));
        assert!(err(serde_json::json!({"project": 7, "topic": "t"})).contains("`project`"));
        assert!(err(serde_json::json!({"project": "p", "topic": ""})).contains("`topic`"));
        assert!(
            err(serde_json::json!({"project": "p", "topic": "projects/p/topics/t"}))
                .contains("`topic`")
        );
        assert!(err(serde_json::json!({"project": "p", "topic": "t-{tenat}"})).contains("`topic`"));
        assert!(err(serde_json::json!({"project": "p", "topic": "t-{tenant"})).contains("`topic`"));
        assert!(err(serde_json::json!({"project": "p", "topic": "google-t"})).contains("`topic`"));
        assert!(err(serde_json::json!({"project": "p", "topic": "t", "endpoint": "pubsub.googleapis.com"})).contains("`endpoint`"));
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "endpoint": "ftp://x"}))
                .contains("`endpoint`")
        );
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "endpoint": "https://x/v1"}))
                .contains("`endpoint`")
        );
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "endpoint": "https://"}))
                .contains("`endpoint`")
        );
        assert!(err(serde_json::json!({"project": "p", "topic": "t", "credentials": "/nonexistent/sa.json"})).contains("`credentials`"));
        assert!(err(serde_json::json!({"project": "p", "topic": "t", "credentials": env!("CARGO_MANIFEST_DIR")})).contains("`credentials`"));
        assert!(err(serde_json::json!({"project": "p", "topic": "t", "credentials": concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")})).contains("`credentials`"));
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "timeout_ms": 0}))
                .contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "timeout_ms": "5"}))
                .contains("`timeout_ms`")
        );
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "ordering_key": {"json": "a.b"}}))
                .contains("`ordering_key`")
        );
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "ordering_key": ""}))
                .contains("`ordering_key`")
        );
        assert!(
            err(
                serde_json::json!({"project": "p", "topic": "t", "ordering_key": "k".repeat(1025)})
            )
            .contains("`ordering_key`")
        );
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "emulator_host": "http://h:1"}))
                .contains("`emulator_host`")
        );
        assert!(
            err(serde_json::json!({"project": "p", "topic": "t", "topik": "x"}))
                .contains("`topik`")
        );
    }

    #[test]
    fn a_credentials_file_of_another_type_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("adc.json");
        std::fs::write(
            &path,
            r#"{"type":"authorized_user","client_id":"x","client_secret":"y","refresh_token":"z"}"#,
        )
        .expect("write");
        let e = err(
            serde_json::json!({"project": "p", "topic": "t", "credentials": path.to_str().expect("utf-8 path")}),
        );
        assert!(
            e.contains("`credentials`") && e.contains("authorized_user"),
            "{e}"
        );
    }

    /// Every problem `from_options_with_env` reports for `v` (no
    /// environment), as its text.
    fn problems(v: serde_json::Value) -> Vec<String> {
        crate::test_support::problems_of(|o| PubSubSinkConfig::from_options_with_env(o, no_env), v)
    }

    #[test]
    fn every_problem_is_reported_in_one_run() {
        assert_eq!(
            problems(serde_json::json!({
                "project": "a/b", "topic": "google-x", "endpoint": "ftp://x", "timeout_ms": 0,
                "ordering_key": "", "topik": 1, "credentials": "/nonexistent/sa.json"
            })),
            [
                "sink option `credentials`: cannot read `/nonexistent/sa.json`: No such file or directory (os error 2)",
                "sink option `endpoint`: scheme `ftp` is not https or http",
                "sink option `ordering_key`: must not be empty",
                "sink option `project`: `a/b` has `/`: a project id is letters, digits, `-`, `.` and `:`",
                "sink option `timeout_ms`: must be more than 0",
                "sink option `topic`: must not start with `goog` (reserved by Google)",
                "unknown sink option `topik` (valid: project, topic, endpoint, credentials, emulator_host, timeout_ms, ordering_key, forward_headers)",
            ]
        );
        // Whether an emulator is used is unknown: the credentials file is not read.
        assert_eq!(
            problems(
                serde_json::json!({"emulator_host": 5, "credentials": "/nonexistent/sa.json"})
            ),
            [
                "sink option `emulator_host`: must be a string",
                "sink option `project` is required",
                "sink option `topic` is required",
            ]
        );
    }

    #[test]
    fn templates_render_tenant_and_source() {
        assert_eq!(
            render("h-{tenant}-{source}-{tenant}", "acme", "stripe"),
            "h-acme-stripe-acme"
        );
        assert_eq!(render("plain", "a", "b"), "plain");
    }
}
