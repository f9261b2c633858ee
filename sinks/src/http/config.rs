//! The HTTP sink's options.

use reqwest::header::{HeaderName, HeaderValue};

use super::auth::{self, Auth};
use super::signing::{self, Signing};
use super::tls::{self, TlsOptions};
use crate::{OptionProblems, Options, SinkError};

/// `timeout_ms` when the option is absent: 10 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// Headers an extra header may not set: the sink owns them (the body's
/// framing, the original content type, the metadata).
const RESERVED: &[&str] = &[
    "content-type",
    "content-length",
    "transfer-encoding",
    "host",
];

/// The options of an http sink.
const OPTIONS: &[&str] = &["url", "timeout_ms", "headers", "signing", "tls", "auth"];

/// One extra header, parsed: a name the sink does not own and a legal value.
/// The error names `headers.<name>`.
fn parsed_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), SinkError> {
    let option = || format!("headers.{name}");
    let n = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| SinkError::invalid(option(), "is not a valid header name"))?;
    if n.as_str().starts_with("x-ankusa-") || RESERVED.contains(&n.as_str()) {
        return Err(SinkError::invalid(
            option(),
            "is set by the sink and cannot be configured",
        ));
    }
    let v = HeaderValue::from_str(value).map_err(|_| {
        SinkError::invalid(option(), "is not a valid header value (control character)")
    })?;
    Ok((n, v))
}

/// The HTTP sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: http
///     url: https://example.com/hooks      # required, http or https
///     timeout_ms: 5000                    # optional, > 0, default 10000
///     headers: { authorization: "Bearer ..." }  # optional extra headers
///     signing:                            # optional (crate::http::signing)
///       type: standard_webhooks           # or hmac (secret, header, algorithm, encoding, prefix)
///       secrets: [whsec_..., env:OLD_SECRET, whsk_...]
///     tls:                                # optional (crate::http::tls), https only
///       client_cert: /etc/ankusa/relay.crt
///       client_key: /etc/ankusa/relay.key
///       ca: /etc/ankusa/internal-ca.pem
///     auth:                               # optional (crate::http::auth): one of
///       basic: {username: relay, password: env:RECEIVER_PASSWORD}
///       # oauth2: {token_url: https://..., client_id: ..., client_secret: env:..., scope: ...}
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSinkConfig {
    /// Where to POST: an absolute `http` or `https` URL with a host.
    pub url: String,
    /// The bound on one request, milliseconds (connect, send, read the answer);
    /// more than 0.
    pub timeout_ms: u64,
    /// Extra headers sent with every hook, in order. Names are case-insensitive
    /// and may not be `x-ankusa-*`, `content-type`, `content-length`,
    /// `transfer-encoding` or `host`. Secrets (`env:NAME`) are resolved by the
    /// config crate before the sink sees them.
    pub headers: Vec<(String, String)>,
    /// How each delivery is signed ([`Signing`], docs of
    /// [`crate::http::signing`]); `None`: not signed. The headers it writes
    /// may not be among [`HttpSinkConfig::headers`].
    pub signing: Option<Signing>,
    /// A client certificate and a private CA for an `https` receiver
    /// ([`TlsOptions`], docs of [`crate::http::tls`]), their files already
    /// read and checked; `None`: the platform's roots, no client
    /// certificate.
    pub tls: Option<TlsOptions>,
    /// How the sink authenticates to the receiver ([`Auth`], docs of
    /// [`crate::http::auth`]): Basic, or an OAuth2 client-credentials token;
    /// `None`: not at all (or by a configured header). `headers` may not set
    /// `authorization` beside it.
    pub auth: Option<Auth>,
}

impl HttpSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        crate::secret::redact_url(&self.url)
    }

    /// A config with the default timeout and no extra headers.
    pub fn new(url: impl Into<String>) -> HttpSinkConfig {
        HttpSinkConfig {
            url: url.into(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            headers: Vec::new(),
            signing: None,
            tls: None,
            auth: None,
        }
    }

    /// Reads and validates the options `url`, `timeout_ms`, `headers`,
    /// `signing` (`signing.<key>` in its errors), `tls` (whose files are
    /// read and checked here: `tls.<key>`) and `auth` (`auth.<scheme>.<key>`);
    /// any
    /// other option is an error, as is a wrong type or value. Every error names
    /// the option (`headers.<name>` for one header), and every problem of
    /// `options` is reported, in the order of the options
    /// ([`SinkError::Options`] when there are several).
    pub fn from_options(options: &Options) -> Result<HttpSinkConfig, SinkError> {
        let mut p = OptionProblems::new();
        let mut config = HttpSinkConfig::new(String::new());
        let mut url = None;
        for (name, value) in options {
            match name.as_str() {
                "url" => url = p.string("url", value),
                "timeout_ms" => {
                    if let Some(ms) = p.whole("timeout_ms", value, "milliseconds") {
                        config.timeout_ms = ms;
                    }
                }
                "headers" => match value.as_object() {
                    None => p.invalid("headers", "must be a map of header name to value"),
                    Some(map) => {
                        for (h, v) in map {
                            // A header whose value is not a string is left
                            // out: it has its problem.
                            if let Some(v) = p.string(&format!("headers.{h}"), v) {
                                config.headers.push((h.clone(), v));
                            }
                        }
                    }
                },
                "signing" => config.signing = signing::parse(value, &mut p),
                "tls" => {
                    config.tls = tls::parse(value, &mut p);
                    if config.tls.is_none() {
                        p.placeholder("tls");
                    }
                }
                "auth" => config.auth = auth::parse(value, &mut p),
                _ => p.unknown(name.clone(), OPTIONS),
            }
        }
        match url {
            Some(url) => config.url = url,
            None if p.ok("url") => p.missing("url"),
            None => {}
        }
        config.check(&mut p);
        // A signing with problems of its own still owns its headers: a
        // configured one of them is reported in the same run.
        if config.signing.is_none()
            && let Some(owned) = options.get("signing").and_then(signing::owned_headers_of)
        {
            config.check_owned(Some(owned), &mut p);
        }
        // So does an auth with problems of its own: `authorization`.
        if config.auth.is_none()
            && let Some(value) = options.get("auth")
        {
            config.check_authorization(auth::scheme_of(value), &mut p);
        }
        p.sort_as_written(options);
        p.finish(config)
    }

    /// Checks every field, reporting every problem;
    /// [`crate::http::HttpSink::new`] calls it too, so a config built in code
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
            p.take(self.parsed_url());
        }
        if p.ok("timeout_ms") && self.timeout_ms == 0 {
            p.invalid("timeout_ms", "must be more than 0");
        }
        // A client certificate or a CA only means something to TLS.
        if self.tls.is_some()
            && p.ok("url")
            && p.ok("tls")
            && self
                .url
                .get(..7)
                .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        {
            p.invalid(
                "tls",
                "applies to an https:// receiver; url is http:// (no TLS, so no certificate is checked or presented)",
            );
        }
        for (name, value) in &self.headers {
            p.take(parsed_header(name, value));
        }
        self.check_owned(
            self.signing
                .as_ref()
                .map(|s| (s.type_name(), s.owned_headers())),
            p,
        );
        if let Some(a) = &self.auth {
            self.check_authorization(a.scheme(), p);
        }
    }

    /// With `auth` (whose scheme is `scheme`), a configured `authorization`
    /// header would be a second credential in the same header: refused.
    fn check_authorization(&self, scheme: &str, p: &mut OptionProblems) {
        for (name, value) in &self.headers {
            if let Ok((n, _)) = parsed_header(name, value)
                && n == reqwest::header::AUTHORIZATION
            {
                p.invalid(
                    format!("headers.{name}"),
                    format!("is written by the sink's auth ({scheme}) and cannot be configured beside it"),
                );
            }
        }
    }

    /// The signature headers are the signing's (`owned`: its type and
    /// headers): a configured header of the same name would be a second,
    /// wrong signature. Headers with a problem of their own are skipped.
    fn check_owned(&self, owned: Option<(&'static str, Vec<HeaderName>)>, p: &mut OptionProblems) {
        let Some((kind, owned)) = owned else { return };
        for (name, value) in &self.headers {
            if let Ok((n, _)) = parsed_header(name, value)
                && owned.contains(&n)
            {
                p.invalid(
                    format!("headers.{name}"),
                    format!(
                        "is written by the sink's signing (type {kind}) and cannot be configured"
                    ),
                );
            }
        }
    }

    pub(crate) fn parsed_url(&self) -> Result<reqwest::Url, SinkError> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| {
            // The URL may carry a password or a token: never echoed whole.
            let shown = crate::secret::redact_url(&self.url);
            SinkError::invalid("url", format!("`{shown}` is not a URL: {e}"))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(SinkError::invalid(
                "url",
                format!("scheme `{}` is not http or https", url.scheme()),
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(SinkError::invalid("url", "has no host"));
        }
        Ok(url)
    }

    /// Every header parsed, or the problems of every header that does not.
    pub(crate) fn parsed_headers(&self) -> Result<Vec<(HeaderName, HeaderValue)>, SinkError> {
        let mut p = OptionProblems::new();
        let parsed = self
            .headers
            .iter()
            .filter_map(|(name, value)| p.take(parsed_header(name, value)))
            .collect();
        p.finish(parsed)
    }
}
