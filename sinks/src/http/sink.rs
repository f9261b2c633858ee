//! The HTTP sink's delivery: request building and the answer's [`Outcome`].

use std::error::Error as _;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::StatusCode;
use reqwest::header::{
    AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER,
};
use sha2::{Digest, Sha256};

use super::auth::Auth;
use super::config::HttpSinkConfig;
use super::oauth2::{Token, Tokens};
use super::signing::Signing;
use crate::{Attempted, DeliveryCtx, Envelope, Outcome, Response, Sink, SinkError, meta};

/// How much of an answer's body is read so its connection can be reused;
/// also the most the attempt log can keep of it
/// (`node.attempt_log.max_body_bytes` is at most this).
pub const DRAIN_MAX_BYTES: usize = 64 * 1024;
/// How much of a rejection's body goes into the outcome's reason.
const EXCERPT_MAX_CHARS: usize = 200;

/// POSTs each hook to one URL (module docs: [`crate::http`]).
#[derive(Debug)]
pub struct HttpSink {
    /// One client per sink: its own connection pool.
    client: reqwest::Client,
    url: reqwest::Url,
    /// The configured extra headers, validated.
    headers: HeaderMap,
    timeout_ms: u64,
    /// How each delivery is signed, if it is (its keys' `Debug` shows only
    /// their length).
    signing: Option<Signing>,
    /// `auth.oauth2`'s token source (`auth.basic` is a fixed header in
    /// `headers`, marked sensitive).
    tokens: Option<Tokens>,
}

/// What a receiver answered: the parts an [`Outcome`] is made of.
struct Answer {
    status: StatusCode,
    retry_after: Option<HeaderValue>,
    location: Option<HeaderValue>,
    /// The start of the body (up to 64 KiB).
    body: Vec<u8>,
    /// Whether `body` is all of it (the stream ended before the bound).
    ended: bool,
    /// The answer's headers as the attempt log keeps them ([`answer_headers`]).
    headers: Vec<(String, Vec<u8>)>,
}

/// Installs ring as the process's rustls crypto provider unless one is
/// installed already (then reqwest uses that one). Every reqwest client of
/// this build (the sink's, `ankusa send`'s) needs it before it is built.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl HttpSink {
    /// Validates `config` and builds the sink's client. Installs ring as the
    /// process's rustls crypto provider if none is installed yet (module docs).
    pub fn new(config: &HttpSinkConfig) -> Result<HttpSink, SinkError> {
        config.validate()?;
        let url = config.parsed_url()?;
        let mut headers = HeaderMap::new();
        for (n, v) in config.parsed_headers()? {
            headers.append(n, v);
        }
        let timeout = Duration::from_millis(config.timeout_ms);
        let mut builder = client_builder(timeout);
        if let Some(tls) = &config.tls {
            builder = tls.apply(builder)?;
        }
        let client = builder
            .build()
            .map_err(|e| SinkError::Setup(format!("HTTP client: {e}")))?;
        let tokens = match &config.auth {
            None => None,
            Some(Auth::Basic(b)) => {
                // `headers` has no authorization (refused beside `auth`).
                headers.insert(AUTHORIZATION, b.header());
                None
            }
            Some(Auth::OAuth2(o)) => {
                let url = reqwest::Url::parse(o.token_url())
                    .map_err(|_| SinkError::invalid("auth.oauth2.token_url", "is not a URL"))?;
                // The token endpoint is another server than the receiver,
                // usually a public identity provider: its own client, with
                // the platform's roots and the sink's `tls.ca` beside them
                // (an endpoint on the same private PKI), and no client
                // certificate (the client authenticates with its secret).
                let mut builder = client_builder(timeout);
                if let Some(tls) = &config.tls
                    && !tls.ca_certificates().is_empty()
                {
                    builder =
                        builder.tls_certs_merge(super::tls::certificates(tls.ca_certificates())?);
                }
                let client = builder
                    .build()
                    .map_err(|e| SinkError::Setup(format!("OAuth2 token client: {e}")))?;
                Some(Tokens::new(o, client, url, config.timeout_ms))
            }
        };
        Ok(HttpSink {
            client,
            url,
            headers,
            timeout_ms: config.timeout_ms,
            signing: config.signing.clone(),
            tokens,
        })
    }

    /// The headers of one delivery: extra headers, content type, metadata,
    /// and the signature headers of `signing` for `timestamp_s` (unix
    /// seconds), which replace any provider header of the same name.
    fn request_headers(&self, hook: &Envelope, ctx: &DeliveryCtx, timestamp_s: u64) -> HeaderMap {
        let mut h = self.headers.clone();
        // The provider's own headers as stored (after the store_headers
        // policy), so the destination sees `X-GitHub-Event`, `Stripe-Signature`
        // and the like: configured headers win, and hop-by-hop, framing and
        // our own `x-ankusa-*` names are never forwarded.
        for (name, value) in &hook.headers {
            let Ok(name) = HeaderName::from_bytes(name) else {
                continue;
            };
            // The list every sink shares ([`crate::meta::NEVER_FORWARDED`]).
            if crate::meta::never_forwarded(name.as_str()) || self.headers.contains_key(&name) {
                continue;
            }
            if let Ok(v) = HeaderValue::from_bytes(value) {
                h.append(name, v);
            }
        }
        let content_type = ctx.content_type.as_deref().map(str::as_bytes).or_else(|| {
            hook.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
                .map(|(_, v)| v.as_slice())
        });
        if let Some(ct) = content_type.and_then(|v| HeaderValue::from_bytes(v).ok()) {
            h.insert(CONTENT_TYPE, ct);
        }
        let mut put = |name: &'static str, value: &[u8]| {
            h.insert(HeaderName::from_static(name), header_value(value));
        };
        put(
            meta::MESSAGE_VERSION_HEADER,
            meta::MESSAGE_VERSION.as_bytes(),
        );
        put(meta::IDEMPOTENCY_KEY_HEADER, ctx.idempotency_key.as_bytes());
        put(meta::TENANT_HEADER, ctx.tenant.as_bytes());
        put(meta::SOURCE_HEADER, ctx.source.as_bytes());
        put(
            meta::RECEIVED_AT_HEADER,
            ctx.received_at_ms.to_string().as_bytes(),
        );
        put(meta::ATTEMPT_HEADER, ctx.attempt.to_string().as_bytes());
        put(meta::SEQ_HEADER, ctx.seq.0.to_string().as_bytes());
        if let Some(key) = ctx.ordering_key() {
            put(meta::ORDERING_KEY_HEADER, key);
        }
        if let Some(n) = ctx.lane_seq() {
            put(meta::LANE_SEQ_HEADER, n.to_string().as_bytes());
        }
        if let Some(signing) = &self.signing {
            // The body signed is the body sent: `hook.body`, as stored.
            for (name, value) in signing.headers(&ctx.idempotency_key, timestamp_s, &hook.body) {
                // `insert` drops every forwarded value of the name first.
                h.insert(name, value);
            }
        }
        h
    }
}

#[async_trait]
impl Sink for HttpSink {
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome {
        self.attempt(hook, ctx).await.outcome
    }

    async fn attempt(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Attempted {
        let timestamp_s = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let headers = self.request_headers(hook, ctx, timestamp_s);
        let Some(tokens) = &self.tokens else {
            return match self.post(headers, hook).await {
                Ok(answer) => attempted(answer, ctx),
                Err(o) => o.into(),
            };
        };
        // `auth.oauth2` (module docs of `oauth2`): a 401 forgets the token
        // and the hook is posted once more, in this attempt, with a new one.
        let token = match tokens.get().await {
            Ok(t) => t,
            Err(o) => return o.into(),
        };
        let answer = match self.post(bearer(headers.clone(), &token), hook).await {
            Ok(a) => a,
            Err(o) => return o.into(),
        };
        if answer.status != StatusCode::UNAUTHORIZED {
            return attempted(answer, ctx);
        }
        tokens.forget(&token).await;
        let token = match tokens.get().await {
            Ok(t) => t,
            Err(o) => return o.into(),
        };
        match self.post(bearer(headers, &token), hook).await {
            Ok(a) => {
                let mut done = attempted(a, ctx);
                if let Outcome::HttpStatus {
                    status: 401,
                    reason,
                    ..
                } = &mut done.outcome
                {
                    reason.push_str(" (again with a new OAuth2 token)");
                }
                done
            }
            Err(o) => o.into(),
        }
    }

    fn kind(&self) -> &'static str {
        "http"
    }
}

/// An answer as the attempt reports it: its outcome and, for the attempt log,
/// the status, the headers and the first
/// [`DeliveryCtx::response_body_max_bytes`] of the body (docs/design.md
/// section 3, "The attempt log").
fn attempted(answer: Answer, ctx: &DeliveryCtx) -> Attempted {
    let outcome = outcome(&answer);
    let Answer {
        status,
        mut body,
        ended,
        headers,
        ..
    } = answer;
    let keep = ctx.response_body_max_bytes.min(DRAIN_MAX_BYTES);
    let body_truncated = body.len() > keep || !ended;
    body.truncate(keep);
    Attempted {
        outcome,
        response: Some(Response {
            status: status.as_u16(),
            headers,
            body,
            body_truncated,
        }),
    }
}

/// The headers of an answer as the attempt log keeps them: the first
/// [`Response::MAX_HEADERS`], each value cut to
/// [`Response::MAX_HEADER_VALUE_BYTES`], so one answer cannot make the log's
/// entry large.
fn answer_headers(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .take(Response::MAX_HEADERS)
        .map(|(n, v)| {
            let v = v.as_bytes();
            (
                n.as_str().to_owned(),
                v[..v.len().min(Response::MAX_HEADER_VALUE_BYTES)].to_vec(),
            )
        })
        .collect()
}

/// `headers` with `authorization: Bearer <token>`.
fn bearer(mut headers: HeaderMap, token: &Token) -> HeaderMap {
    headers.insert(AUTHORIZATION, token.header.clone());
    headers
}

impl HttpSink {
    /// POSTs the hook's body with `headers`: the receiver's answer, or the
    /// outcome of a request that got none.
    async fn post(&self, headers: HeaderMap, hook: &Envelope) -> Result<Answer, Outcome> {
        let request = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(hook.body.clone());
        let mut response = request
            .send()
            .await
            .map_err(|e| Outcome::retry(request_failure(&e, self.timeout_ms)))?;
        let status = response.status();
        let retry_after = response.headers().get(RETRY_AFTER).cloned();
        let location = response.headers().get(reqwest::header::LOCATION).cloned();
        let headers = answer_headers(response.headers());
        // Read (part of) the answer: an excerpt for a rejection's reason and
        // the attempt log, and a drained body lets the connection go back to
        // the pool. A failure while reading changes nothing: the status has
        // been given.
        let mut body = Vec::new();
        let mut ended = false;
        while body.len() < DRAIN_MAX_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => {
                    ended = true;
                    break;
                }
                Err(_) => break,
            }
        }
        Ok(Answer {
            status,
            retry_after,
            location,
            body,
            ended,
            headers,
        })
    }
}

/// The outcome of a receiver's answer ([`classify`], and the target of a
/// redirect that was not followed).
fn outcome(answer: &Answer) -> Outcome {
    let mut outcome = classify(
        answer.status,
        answer.retry_after.as_ref().map(HeaderValue::as_bytes),
        &answer.body,
        SystemTime::now(),
    );
    if let (Outcome::Permanent { reason }, Some(loc)) = (&mut outcome, &answer.location)
        && answer.status.is_redirection()
    {
        reason.push_str(&format!(
            " (redirect to {} not followed)",
            String::from_utf8_lossy(loc.as_bytes())
        ));
    }
    outcome
}

/// The reason of a request that got no answer: timed out (after
/// `timeout_ms`), a connection that failed (DNS, refused, TLS), or another
/// failure, with its causes.
pub(crate) fn request_failure(e: &reqwest::Error, timeout_ms: u64) -> String {
    if e.is_timeout() {
        format!("timed out after {timeout_ms} ms")
    } else if e.is_connect() {
        format!("connection failed: {}", chain(e))
    } else {
        format!("request failed: {}", chain(e))
    }
}

/// The outcome of an answer (table in the [`crate::http`] docs), from its
/// status, its Retry-After header and (part of) its body; `now` dates an
/// HTTP-date Retry-After.
pub fn classify(
    status: StatusCode,
    retry_after_header: Option<&[u8]>,
    body: &[u8],
    now: SystemTime,
) -> Outcome {
    let what = match status.canonical_reason() {
        Some(r) => format!("HTTP {} {r}", status.as_u16()),
        None => format!("HTTP {}", status.as_u16()),
    };
    let with_excerpt = |what: String| {
        let e = excerpt(body);
        if e.is_empty() {
            what
        } else {
            format!("{what}: {e}")
        }
    };
    match status.as_u16() {
        200..=299 => Outcome::Ok,
        // Retried or not: the sink entry's retry policy decides
        // (`Outcome::resolve_status`, applied by the pipeline).
        code @ 400..=599 => Outcome::HttpStatus {
            status: code,
            reason: with_excerpt(what),
            after: retry_after_header.and_then(|v| retry_after(v, now)),
        },
        _ => Outcome::permanent(what),
    }
}

/// The reqwest client of one HTTP-speaking sink (the HTTP sink, Pub/Sub's
/// REST calls): ring as the TLS provider (module docs), `timeout` bounding
/// connecting and the whole request, redirects not followed (a POST turned
/// into a GET would lose the hook), `ankusa/<version>` as User-Agent.
///
/// # Errors
/// [`SinkError::Setup`] when the client cannot be built (TLS setup).
pub fn client(timeout: Duration) -> Result<reqwest::Client, SinkError> {
    client_builder(timeout)
        .build()
        .map_err(|e| SinkError::Setup(format!("HTTP client: {e}")))
}

/// The builder of [`client`], for a client with more (the sink's `tls`).
pub(crate) fn client_builder(timeout: Duration) -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("ankusa/", env!("CARGO_PKG_VERSION")))
}

/// A Retry-After value (RFC 9110 section 10.2.3): delay-seconds, or an
/// HTTP date, as the time from `now` until then (zero for a date in the past).
/// `None` for anything else.
pub fn retry_after(value: &[u8], now: SystemTime) -> Option<Duration> {
    let s = std::str::from_utf8(value).ok()?.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64: far in the future, capped.
        return Some(Duration::from_secs(s.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(s).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The start of a body as one line of text for a reason: lossy UTF-8, control
/// characters as spaces, whitespace collapsed, at most 200 characters.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(4 * EXCERPT_MAX_CHARS)]);
    let mut out = String::new();
    for word in text.split(|c: char| c.is_whitespace() || c.is_control()) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if let Some((i, _)) = out.char_indices().nth(EXCERPT_MAX_CHARS) {
        out.truncate(i);
        out.push('…');
    }
    out
}

/// `value` as a header value, or `sha256:<hex>` of it when it holds a byte no
/// header value may (module docs).
fn header_value(value: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(value).unwrap_or_else(|_| {
        let digest = Sha256::digest(value);
        let mut s = String::with_capacity(7 + 64);
        s.push_str("sha256:");
        for b in digest.iter() {
            s.push_str(&format!("{b:02x}"));
        }
        HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static("sha256:"))
    })
}

/// The causes of a reqwest error, `: `-joined (reqwest's own message is terse
/// and holds the URL, which may carry a secret in its query: left out).
fn chain(e: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        next = cause.source();
    }
    if parts.is_empty() {
        // No cause: reqwest's own words, without the URL.
        let text = e.to_string();
        return match text.find(" for url (") {
            Some(i) => text[..i].to_owned(),
            None => text,
        };
    }
    parts.join(": ")
}
