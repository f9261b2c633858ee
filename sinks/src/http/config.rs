//! The HTTP sink's options.

use reqwest::header::{HeaderName, HeaderValue};

use crate::{Options, SinkError};

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

/// The HTTP sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: http
///     url: https://example.com/hooks      # required, http or https
///     timeout_ms: 5000                    # optional, > 0, default 10000
///     headers: { authorization: "Bearer ..." }  # optional extra headers
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
        }
    }

    /// Reads and validates the options `url`, `timeout_ms` and `headers`; any
    /// other option is an error, as is a wrong type or value. Every error names
    /// the option.
    pub fn from_options(options: &Options) -> Result<HttpSinkConfig, SinkError> {
        let mut config = HttpSinkConfig::new(String::new());
        let mut url = None;
        for (name, value) in options {
            match name.as_str() {
                "url" => {
                    url = Some(
                        value
                            .as_str()
                            .ok_or_else(|| SinkError::invalid("url", "must be a string"))?
                            .to_owned(),
                    );
                }
                "timeout_ms" => {
                    config.timeout_ms = value.as_u64().ok_or_else(|| {
                        SinkError::invalid("timeout_ms", "must be a whole number of milliseconds")
                    })?;
                }
                "headers" => {
                    let map = value.as_object().ok_or_else(|| {
                        SinkError::invalid("headers", "must be a map of header name to value")
                    })?;
                    for (h, v) in map {
                        let v = v.as_str().ok_or_else(|| {
                            SinkError::invalid(format!("headers.{h}"), "must be a string")
                        })?;
                        config.headers.push((h.clone(), v.to_owned()));
                    }
                }
                _ => {
                    return Err(SinkError::UnknownOption {
                        option: name.clone(),
                    });
                }
            }
        }
        config.url = url.ok_or(SinkError::MissingOption { option: "url" })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every field; [`crate::http::HttpSink::new`] calls it too, so a
    /// config built in code is held to the same rules.
    pub fn validate(&self) -> Result<(), SinkError> {
        self.parsed_url()?;
        if self.timeout_ms == 0 {
            return Err(SinkError::invalid("timeout_ms", "must be more than 0"));
        }
        self.parsed_headers()?;
        Ok(())
    }

    pub(crate) fn parsed_url(&self) -> Result<reqwest::Url, SinkError> {
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| SinkError::invalid("url", format!("`{}` is not a URL: {e}", self.url)))?;
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

    pub(crate) fn parsed_headers(&self) -> Result<Vec<(HeaderName, HeaderValue)>, SinkError> {
        self.headers
            .iter()
            .map(|(name, value)| {
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
            })
            .collect()
    }
}
