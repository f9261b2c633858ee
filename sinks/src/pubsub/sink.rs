//! The Pub/Sub sink's delivery: the `:publish` request, the token, and the
//! answer's [`Outcome`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use base64::Engine as _;
use gcp_auth::TokenProvider;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};

use super::config::{FORWARD_MEDIUM, LegacyOrderingKey, MAX_ATTRIBUTES, PubSubSinkConfig, render};
use crate::forward::{ForwardHeaders, Room};
use crate::http::{client, retry_after};
use crate::{DeliveryCtx, Envelope, Outcome, Sink, SinkError};

/// The OAuth2 scope of the tokens the sink asks for.
pub const PUBSUB_SCOPE: &str = "https://www.googleapis.com/auth/pubsub";
/// The message attribute holding the provider's content type.
pub const CONTENT_TYPE_ATTR: &str = "content_type";

/// How much of an answer's body is read (its error, and so the connection can
/// be reused).
const DRAIN_MAX_BYTES: usize = 64 * 1024;
/// How much of an error message goes into the outcome's reason.
const EXCERPT_MAX_CHARS: usize = 500;

/// Where the bearer token comes from.
enum Auth {
    /// An emulator: no credentials are sent.
    Emulator,
    /// A service-account key (the `credentials` option): built at start from
    /// the file, no network until the first token.
    Provider(Arc<dyn TokenProvider>),
    /// The Application Default Credentials chain, found on the first delivery
    /// (it may probe the network); a failure is not kept, the next delivery
    /// looks again.
    Default(tokio::sync::OnceCell<Arc<dyn TokenProvider>>),
}

/// Publishes each hook to a Pub/Sub topic (module docs: [`crate::pubsub`]).
pub struct PubSubSink {
    /// One client per sink: its own connection pool.
    client: reqwest::Client,
    /// The endpoint (or `http://<emulator_host>`), no path.
    base: reqwest::Url,
    project: String,
    /// The topic template.
    topic: String,
    auth: Auth,
    timeout: Duration,
    legacy_key: Option<LegacyOrderingKey>,
    /// The stored headers each message carries (`forward_headers`).
    forward: ForwardHeaders,
}

impl std::fmt::Debug for PubSubSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match self.auth {
            Auth::Emulator => "emulator (none)",
            Auth::Provider(_) => "service-account key",
            Auth::Default(_) => "application default credentials",
        };
        f.debug_struct("PubSubSink")
            .field("base", &self.base.as_str())
            .field("project", &self.project)
            .field("topic", &self.topic)
            .field("auth", &auth)
            .field("timeout", &self.timeout)
            .field("legacy_key", &self.legacy_key)
            .finish_non_exhaustive()
    }
}

impl PubSubSink {
    /// Validates `config` (reading the `credentials` file, if any) and builds
    /// the sink's HTTP client and token source. It makes no request: the
    /// first delivery fetches the first token (module docs), so this works
    /// while Google (or the emulator) is unreachable. Installs ring as the
    /// process's rustls provider if none is installed yet. Errors: an invalid
    /// option, a key file gcp_auth cannot load (named `credentials`), or a
    /// client that cannot be built ([`SinkError::Setup`]).
    pub async fn new(config: &PubSubSinkConfig) -> Result<PubSubSink, SinkError> {
        config.validate()?;
        let base = config.base_url()?;
        let timeout = Duration::from_millis(config.timeout_ms);
        let client = client(timeout)?;
        let auth = match (&config.emulator_host, &config.credentials) {
            (Some(_), _) => Auth::Emulator,
            (None, Some(path)) => {
                let sa = gcp_auth::CustomServiceAccount::from_file(path).map_err(|e| {
                    SinkError::invalid(
                        "credentials",
                        format!("`{}`: {}", path.display(), error_chain(&e)),
                    )
                })?;
                Auth::Provider(Arc::new(sa))
            }
            (None, None) => Auth::Default(tokio::sync::OnceCell::new()),
        };
        Ok(PubSubSink {
            client,
            base,
            project: config.project.clone(),
            topic: config.topic.clone(),
            auth,
            timeout,
            legacy_key: config.legacy_ordering_key.clone(),
            forward: config.forward_headers.clone(),
        })
    }

    /// `{base}/v1/projects/{project}/topics/{topic}:publish`, the topic
    /// rendered for this hook's tenant and source (each segment
    /// percent-encoded where needed).
    fn publish_url(&self, topic: &str) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend([
                "v1",
                "projects",
                self.project.as_str(),
                "topics",
                &format!("{topic}:publish"),
            ]);
        }
        url
    }

    /// The ordering key to send: the lane's key in ordered mode, else the
    /// legacy key (fixed, or the function's answer), else none.
    fn ordering_key(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Option<String> {
        if let Some(key) = ctx.ordering_key_text() {
            return Some(key.into_owned());
        }
        match &self.legacy_key {
            None => None,
            Some(LegacyOrderingKey::Fixed(key)) => Some(key.clone()),
            // A panic or no answer is "no key" (ADR 0004 section 2: a
            // function key runs under catch_unwind).
            Some(LegacyOrderingKey::Fn(f)) => {
                std::panic::catch_unwind(AssertUnwindSafe(|| f(hook)))
                    .ok()
                    .flatten()
                    .filter(|k| !k.is_empty())
            }
        }
    }

    /// The JSON body of one `:publish` call: one message with the body in
    /// base64, the metadata attributes, the content type and the ordering key.
    fn request_body(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Vec<u8> {
        let mut attributes = serde_json::Map::new();
        for (name, value) in ctx.attributes() {
            attributes.insert(name.to_owned(), serde_json::Value::String(value));
        }
        let content_type = ctx.content_type.as_deref().map(str::as_bytes).or_else(|| {
            hook.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
                .map(|(_, v)| v.as_slice())
        });
        if let Some(ct) = content_type {
            attributes.insert(
                CONTENT_TYPE_ATTR.to_owned(),
                serde_json::Value::String(String::from_utf8_lossy(ct).into_owned()),
            );
        }
        // The chosen provider headers, in what is left of Pub/Sub's 100
        // attributes; the medium takes UTF-8 values only.
        let room = Room {
            count: MAX_ATTRIBUTES.saturating_sub(attributes.len()),
            bytes: usize::MAX,
        };
        for (name, value) in self.forward.select(&FORWARD_MEDIUM, hook, ctx, room) {
            if let Ok(value) = String::from_utf8(value) {
                attributes.insert(name, serde_json::Value::String(value));
            }
        }
        let mut message = serde_json::Map::new();
        message.insert(
            "data".to_owned(),
            serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(&hook.body)),
        );
        message.insert(
            "attributes".to_owned(),
            serde_json::Value::Object(attributes),
        );
        if let Some(key) = self.ordering_key(hook, ctx) {
            message.insert("orderingKey".to_owned(), serde_json::Value::String(key));
        }
        let body = serde_json::json!({ "messages": [serde_json::Value::Object(message)] });
        // Serializing a Value of strings and maps cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The bearer token for the next request; `None` for an emulator.
    async fn token(&self) -> Result<Option<String>, String> {
        let provider = match &self.auth {
            Auth::Emulator => return Ok(None),
            Auth::Provider(p) => p.clone(),
            Auth::Default(cell) => cell
                .get_or_try_init(|| async {
                    gcp_auth::provider().await.map_err(|e| {
                        format!("no Application Default Credentials: {}", error_chain(&e))
                    })
                })
                .await?
                .clone(),
        };
        let token = provider
            .token(&[PUBSUB_SCOPE])
            .await
            .map_err(|e| format!("token request failed: {}", error_chain(&e)))?;
        Ok(Some(token.as_str().to_owned()))
    }
}

#[async_trait]
impl Sink for PubSubSink {
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome {
        let topic = render(&self.topic, &ctx.tenant, &ctx.source);
        let what = format!(
            "Pub/Sub publish to projects/{}/topics/{topic}",
            self.project
        );
        let token = match tokio::time::timeout(self.timeout, self.token()).await {
            Err(_) => {
                return Outcome::retry(format!(
                    "{what}: no token within {} ms",
                    self.timeout.as_millis()
                ));
            }
            Ok(Err(e)) => return Outcome::retry(format!("{what}: {e}")),
            Ok(Ok(token)) => token,
        };
        let mut request = self
            .client
            .post(self.publish_url(&topic))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(self.request_body(hook, ctx));
        if let Some(token) = token {
            match HeaderValue::from_str(&format!("Bearer {token}")) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    request = request.header(AUTHORIZATION, v);
                }
                Err(_) => {
                    return Outcome::retry(format!("{what}: the token is not a header value"));
                }
            }
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let reason = if e.is_timeout() {
                    format!("timed out after {} ms", self.timeout.as_millis())
                } else if e.is_connect() {
                    format!("connection failed: {}", error_chain(&e))
                } else {
                    format!("request failed: {}", error_chain(&e))
                };
                return Outcome::retry(format!("{what}: {reason}"));
            }
        };
        let status = response.status();
        let retry_after_header = response.headers().get(RETRY_AFTER).cloned();
        let mut body = Vec::new();
        while body.len() < DRAIN_MAX_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(e) if status.is_success() => {
                    // The answer was cut off: no message id seen.
                    return Outcome::retry(format!(
                        "{what}: reading the answer: {}",
                        error_chain(&e)
                    ));
                }
                Err(_) => break,
            }
        }
        match classify(
            status,
            retry_after_header.as_ref().map(HeaderValue::as_bytes),
            &body,
            SystemTime::now(),
        ) {
            Outcome::Ok => Outcome::Ok,
            Outcome::Retry { reason, after } => Outcome::Retry {
                reason: format!("{what}: {reason}"),
                after,
            },
            Outcome::Permanent { reason } => Outcome::permanent(format!("{what}: {reason}")),
            Outcome::SinkGone { reason } => Outcome::SinkGone {
                reason: format!("{what}: {reason}"),
            },
            other @ (Outcome::SourceGone { .. } | Outcome::HttpStatus { .. }) => other,
        }
    }

    fn kind(&self) -> &'static str {
        "pubsub"
    }

    fn pipelined(&self) -> bool {
        true
    }
}

/// The outcome of a `:publish` answer (table in the [`crate::pubsub`] docs),
/// from its status, its Retry-After header and (part of) its body; `now`
/// dates an HTTP-date Retry-After.
pub fn classify(
    status: StatusCode,
    retry_after_header: Option<&[u8]>,
    body: &[u8],
    now: SystemTime,
) -> Outcome {
    let code = status.as_u16();
    if status.is_success() {
        let ids = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                v.get("messageIds")
                    .and_then(|ids| ids.as_array())
                    .map(Vec::len)
            });
        return match ids {
            Some(n) if n > 0 => Outcome::Ok,
            _ => Outcome::retry(format!(
                "HTTP {code} without a message id in the answer: {}",
                excerpt(body)
            )),
        };
    }
    let (google_status, message) = google_error(body);
    let mut reason = format!("HTTP {code}");
    if let Some(s) = &google_status {
        reason.push(' ');
        reason.push_str(s);
    }
    let detail = message.clone().unwrap_or_else(|| excerpt(body));
    if !detail.is_empty() {
        reason.push_str(": ");
        reason.push_str(&truncate(&detail));
    }
    let retry = |reason: String| Outcome::Retry {
        reason,
        after: retry_after_header.and_then(|v| retry_after(v, now)),
    };
    match code {
        400 => {
            let ordering = message.as_deref().is_some_and(is_ordering_region_error);
            if google_status.as_deref() == Some("FAILED_PRECONDITION") || ordering {
                // The topic or the endpoint must change, not the hook: an
                // ordered lane waits (docs/design.md section 10) rather than
                // dead-lettering its head and breaking the order behind it.
                retry(reason)
            } else {
                Outcome::permanent(reason)
            }
        }
        // The token was refused (expired, revoked): not the hook's fault.
        401 => retry(reason),
        404 => Outcome::SinkGone { reason },
        408 | 409 | 425 | 429 | 499 | 500..=599 => retry(reason),
        _ => Outcome::permanent(reason),
    }
}

/// Whether an error message is Pub/Sub's refusal of an ordering key on an
/// endpoint or region that cannot keep its order ("Cannot publish messages
/// that contain ordering keys to topic .. publish to an allowed region using
/// the appropriate regional Cloud Pub/Sub endpoint").
pub fn is_ordering_region_error(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("ordering") && (m.contains("region") || m.contains("endpoint"))
}

/// The `status` and `message` of a Google API error body
/// (`{"error": {"code": 400, "message": "..", "status": "FAILED_PRECONDITION"}}`).
fn google_error(body: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (None, None);
    };
    let err = &v["error"];
    let field = |name: &str| {
        err.get(name)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    (field("status"), field("message"))
}

/// The start of a body as one line of text.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(4 * EXCERPT_MAX_CHARS)]);
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    truncate(&words.join(" "))
}

/// At most [`EXCERPT_MAX_CHARS`] characters.
fn truncate(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_MAX_CHARS) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// An error and its causes, `: `-joined, repeats dropped.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if parts.last().is_none_or(|l| !l.contains(&text)) {
            parts.push(text);
        }
        next = cause.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_500_000)
    }

    fn google(code: u16, status: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "error": {"code": code, "message": message, "status": status}
        }))
        .unwrap_or_default()
    }

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT)
    }

    #[test]
    fn answers_map_to_outcomes() {
        assert_eq!(
            classify(status(200), None, br#"{"messageIds":["1"]}"#, at()),
            Outcome::Ok
        );
        assert!(matches!(
            classify(status(200), None, b"{}", at()),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            classify(status(200), None, b"<html>", at()),
            Outcome::Retry { .. }
        ));
        let regional = google(
            400,
            "FAILED_PRECONDITION",
            "Cannot publish messages that contain ordering keys to topic projects/p/topics/t due a message \
             storage policy on the topic that would require the messages to be forwarded to another region.",
        );
        assert!(matches!(
            classify(status(400), None, &regional, at()),
            Outcome::Retry { .. }
        ));
        let regional_arg = google(
            400,
            "INVALID_ARGUMENT",
            "Publishing with an ordering key requires a regional endpoint.",
        );
        assert!(matches!(
            classify(status(400), None, &regional_arg, at()),
            Outcome::Retry { .. }
        ));
        let too_big = google(
            400,
            "INVALID_ARGUMENT",
            "Request payload size exceeds the limit: 10485760 bytes.",
        );
        match classify(status(400), None, &too_big, at()) {
            Outcome::Permanent { reason } => {
                assert!(
                    reason.contains("INVALID_ARGUMENT") && reason.contains("10485760"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        let denied = google(
            403,
            "PERMISSION_DENIED",
            "User not authorized to perform this action.",
        );
        assert!(matches!(
            classify(status(403), None, &denied, at()),
            Outcome::Permanent { .. }
        ));
        let gone = google(404, "NOT_FOUND", "Resource not found (resource=t).");
        assert!(matches!(
            classify(status(404), None, &gone, at()),
            Outcome::SinkGone { .. }
        ));
        assert!(matches!(
            classify(status(401), None, b"", at()),
            Outcome::Retry { .. }
        ));
        for code in [408, 409, 429, 499, 500, 502, 503, 504] {
            assert!(
                matches!(
                    classify(status(code), None, b"", at()),
                    Outcome::Retry { .. }
                ),
                "{code}"
            );
        }
        assert_eq!(
            classify(status(429), Some(b"7"), b"", at()),
            Outcome::Retry {
                reason: "HTTP 429".into(),
                after: Some(Duration::from_secs(7))
            }
        );
        assert!(matches!(
            classify(status(413), None, b"", at()),
            Outcome::Permanent { .. }
        ));
        assert!(matches!(
            classify(status(302), None, b"", at()),
            Outcome::Permanent { .. }
        ));
    }

    #[test]
    fn ordering_region_messages() {
        assert!(is_ordering_region_error(
            "Please either change the topic's message storage policy or publish to an allowed region \
             using the appropriate regional Cloud Pub/Sub endpoint. Cannot publish messages that contain ordering keys"
        ));
        assert!(!is_ordering_region_error(
            "In a single publish request, all messages must have no ordering key or they must all have the same ordering key."
        ));
        assert!(!is_ordering_region_error("The region is down"));
    }
}
