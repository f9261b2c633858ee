//! The OAuth2 client-credentials exchange of an http sink with
//! `auth.oauth2` ([`super::auth`]; docs/design.md section 6): one token per
//! sink, fetched when first needed, shared by every delivery and renewed
//! before it expires.
//!
//! # The exchange (RFC 6749 section 4.4)
//! `POST token_url` with `content-type: application/x-www-form-urlencoded`,
//! the body `grant_type=client_credentials` (and `scope=...` when
//! configured), the client authenticated by `client_secret_basic` (the
//! default: `authorization: Basic` of the form-urlencoded id and secret,
//! section 2.3.1) or `client_secret_post` (`client_id` and `client_secret`
//! in the body). A 2xx answer's JSON `access_token` is the token; its
//! `token_type` must be `Bearer` (any case; absent is taken as Bearer) and
//! its `expires_in` (seconds, a number or a numeric string) says how long it
//! lives. Redirects are not followed (the secret would go with the POST).
//!
//! Hand-written over reqwest rather than the `oauth2` crate: one grant, one
//! form POST and one JSON field, where that crate brings every flow (PKCE,
//! device codes, token introspection, its own HTTP client traits) and its
//! own reqwest dependency tree to keep in step with ours.
//!
//! # Caching and sharing
//! - The token is kept per sink and used until `expires_in − margin`, the
//!   margin being 30 s or a tenth of the lifetime, whichever is less (a
//!   token of an hour is renewed at 59:30, one of 60 s at 54 s), so a
//!   delivery never starts with a token about to lapse. Without `expires_in`
//!   (or with one under a second: 0, a fraction, a negative, which would
//!   mean a fetch per delivery) it is kept until a receiver refuses it.
//! - One fetch at a time: a delivery that needs a token holds the sink's
//!   token lock while it fetches, and the deliveries that asked meanwhile
//!   wait for that fetch and take its result, success or failure. No
//!   stampede on the token endpoint when a token expires under load.
//! - If renewing fails inside the margin, the old token is used until it
//!   really expires.
//!
//! # A 401 from the receiver
//! The receiver may have revoked the token, or its clock may disagree: the
//! sink forgets that token (unless another delivery already replaced it),
//! gets a new one and posts the hook once more **within the same
//! attempt** (same `x-ankusa-attempt`, same signature timestamp): the first
//! request was refused before it was processed, and a retry of the row
//! would wait out a backoff for nothing. A second 401 is the answer, an
//! [`Outcome::HttpStatus`] that the entry's retry policy resolves, its
//! reason saying a new token was tried.
//!
//! Each request (a token request, a post) is bounded by the sink's
//! `timeout_ms`, so one delivery with `auth.oauth2` takes at most four of
//! them (a token, the post, a new token after a 401, the post again), and
//! usually one.
//!
//! # A failing token endpoint
//! Unreachable, timed out, an error status, an answer without a usable
//! token: the delivery is [`Outcome::Retry`] with a reason that starts
//! `OAuth2 token endpoint <url>:` (the URL redacted), and `after` from the
//! endpoint's Retry-After. Never a dead letter on its own: the hook was not
//! refused, the relay could not ask. The retry horizon still applies.
//!
//! The token and the secret never reach a log, an error or a reason.

use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use tokio::sync::Mutex;

use super::auth::{ClientAuthMethod, OAuth2};
use super::sink::{excerpt, request_failure};
use crate::Outcome;

/// The most of a token endpoint's answer that is read, bytes: a token
/// answer is a few hundred bytes (a JWT a few KB).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The longest margin before a token's expiry at which it is renewed.
pub const MAX_RENEW_MARGIN: Duration = Duration::from_secs(30);

/// How long before its expiry a token of `lifetime` is renewed: 30 s, or a
/// tenth of the lifetime when that is less (module docs).
pub fn renew_margin(lifetime: Duration) -> Duration {
    MAX_RENEW_MARGIN.min(lifetime / 10)
}

/// One access token, as the `authorization` header it makes.
#[derive(Clone)]
pub(crate) struct Token {
    /// `Bearer <token>`, marked sensitive.
    pub(crate) header: HeaderValue,
    /// Which fetch it came from (a 401 forgets only this one).
    serial: u64,
    /// When to fetch a new one; `None`: not before a 401.
    renew_at: Option<Instant>,
    /// When it lapses; `None`: not said.
    expires_at: Option<Instant>,
}

impl Token {
    fn fresh(&self, now: Instant) -> bool {
        self.renew_at.is_none_or(|at| now < at)
    }

    fn usable(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }
}

#[derive(Default)]
struct State {
    token: Option<Token>,
    /// The last fetch's failure and when it ended: shared with the
    /// deliveries that were waiting for that fetch.
    failure: Option<(Instant, Outcome)>,
    fetches: u64,
}

/// A sink's token source: the exchange, the cached token, the lock that
/// makes one fetch at a time (module docs).
pub(crate) struct Tokens {
    /// The token endpoint's own client (its own pool; see
    /// [`crate::http::HttpSink::new`] for its TLS).
    client: reqwest::Client,
    url: reqwest::Url,
    /// The URL as reasons show it (password and secret parameters hidden).
    shown: String,
    /// The form body sent (it holds the secret with `client_secret_post`).
    form: String,
    /// `client_secret_basic`'s header.
    basic: Option<HeaderValue>,
    timeout_ms: u64,
    state: Mutex<State>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").field("url", &self.shown).finish()
    }
}

/// One value of `application/x-www-form-urlencoded`.
fn form_encoded(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

impl Tokens {
    /// The token source of `config`, fetching through `client` (whose
    /// timeout, `timeout_ms`, bounds each fetch).
    pub(crate) fn new(
        config: &OAuth2,
        client: reqwest::Client,
        url: reqwest::Url,
        timeout_ms: u64,
    ) -> Tokens {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(scope) = config.scope() {
            form.append_pair("scope", scope);
        }
        let basic = match config.method() {
            ClientAuthMethod::ClientSecretBasic => {
                // RFC 6749 section 2.3.1: each form-urlencoded, then Basic.
                let credentials = format!(
                    "{}:{}",
                    form_encoded(config.client_id()),
                    form_encoded(config.client_secret())
                );
                let mut v = HeaderValue::from_str(&format!("Basic {}", BASE64.encode(credentials)))
                    .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
                v.set_sensitive(true);
                Some(v)
            }
            ClientAuthMethod::ClientSecretPost => {
                form.append_pair("client_id", config.client_id());
                form.append_pair("client_secret", config.client_secret());
                None
            }
        };
        Tokens {
            client,
            shown: crate::secret::redact_url(url.as_str()),
            url,
            form: form.finish(),
            basic,
            timeout_ms,
            state: Mutex::new(State::default()),
        }
    }

    /// The token to deliver with: the cached one while it is fresh, else
    /// one fetched now (or by the delivery this one waited for). `Err` is
    /// the delivery's outcome: the token endpoint's failure, a
    /// [`Outcome::Retry`] naming it.
    pub(crate) async fn get(&self) -> Result<Token, Outcome> {
        let asked = Instant::now();
        let mut state = self.state.lock().await;
        let now = Instant::now();
        if let Some(t) = state.token.as_ref().filter(|t| t.fresh(now)) {
            return Ok(t.clone());
        }
        // A fetch that ended while this delivery waited for the lock: its
        // failure is this delivery's too (one fetch, not one per waiter).
        if let Some((ended, outcome)) = &state.failure
            && *ended >= asked
        {
            return match state.token.as_ref().filter(|t| t.usable(now)) {
                Some(t) => Ok(t.clone()),
                None => Err(outcome.clone()),
            };
        }
        let sent = Instant::now();
        match self.fetch().await {
            Ok((value, lifetime)) => {
                state.fetches += 1;
                let token = Token {
                    header: value,
                    serial: state.fetches,
                    renew_at: lifetime.and_then(|l| sent.checked_add(l - renew_margin(l))),
                    expires_at: lifetime.and_then(|l| sent.checked_add(l)),
                };
                state.token = Some(token.clone());
                state.failure = None;
                Ok(token)
            }
            Err(outcome) => {
                let now = Instant::now();
                state.failure = Some((now, outcome.clone()));
                // Inside the renewal margin the old token still works.
                match state.token.as_ref().filter(|t| t.usable(now)) {
                    Some(t) => Ok(t.clone()),
                    None => Err(outcome),
                }
            }
        }
    }

    /// Forgets `token` after a receiver refused it (401), unless a newer
    /// one has replaced it already: the next [`Tokens::get`] fetches.
    pub(crate) async fn forget(&self, token: &Token) {
        let mut state = self.state.lock().await;
        if state
            .token
            .as_ref()
            .is_some_and(|t| t.serial == token.serial)
        {
            state.token = None;
        }
    }

    /// One exchange: the `Bearer` header and the token's lifetime, or the
    /// delivery's outcome.
    async fn fetch(&self) -> Result<(HeaderValue, Option<Duration>), Outcome> {
        let mut request = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .body(self.form.clone());
        if let Some(basic) = &self.basic {
            request = request.header(AUTHORIZATION, basic.clone());
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| self.failed(request_failure(&e, self.timeout_ms), None))?;
        let status = response.status();
        let after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| super::retry_after(v.as_bytes(), SystemTime::now()));
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk);
                    if body.len() > MAX_ANSWER_BYTES {
                        return Err(self
                            .failed(format!("answered more than {MAX_ANSWER_BYTES} bytes"), None));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(self.failed(
                        format!("answer cut off: {}", request_failure(&e, self.timeout_ms)),
                        None,
                    ));
                }
            }
        }
        if !status.is_success() {
            let what = match status.canonical_reason() {
                Some(r) => format!("HTTP {} {r}", status.as_u16()),
                None => format!("HTTP {}", status.as_u16()),
            };
            let e = excerpt(&body);
            let reason = if e.is_empty() {
                format!("answered {what}")
            } else {
                format!("answered {what}: {e}")
            };
            return Err(self.failed(reason, after));
        }
        token_of(&body).map_err(|m| self.failed(m, None))
    }

    fn failed(&self, what: String, after: Option<Duration>) -> Outcome {
        Outcome::Retry {
            reason: format!("OAuth2 token endpoint {}: {what}", self.shown),
            after,
        }
    }
}

/// The `Bearer` header and lifetime of a token answer's JSON (RFC 6749
/// section 5.1), or what is wrong with it (never quoting the token).
fn token_of(body: &[u8]) -> Result<(HeaderValue, Option<Duration>), String> {
    let json: serde_json::Value = serde_json::from_slice(body)
        .map_err(|_| "answered 2xx with a body that is not JSON".to_owned())?;
    let token = match json.get("access_token") {
        Some(serde_json::Value::String(t)) if !t.is_empty() => t,
        _ => return Err("answered 2xx without an access_token".to_owned()),
    };
    match json.get("token_type").map(serde_json::Value::as_str) {
        None => {}
        Some(Some(t)) if t.eq_ignore_ascii_case("bearer") => {}
        Some(Some(t)) => {
            let t: String = t.chars().filter(|c| !c.is_control()).take(32).collect();
            return Err(format!(
                "answered a token of type \"{t}\": only Bearer tokens are sent (RFC 6750)"
            ));
        }
        Some(None) => return Err("answered a token_type that is not a string".to_owned()),
    }
    let lifetime = match json.get("expires_in") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().map(|f| if f > 0.0 { f as u64 } else { 0 })),
        Some(serde_json::Value::String(s)) => s.trim().parse::<u64>().ok(),
        Some(_) => None,
    }
    // Under a second (0, a fraction, a negative) is no lifetime a token can
    // be used in: taken as none given, so the token is kept until a receiver
    // refuses it (a 401 renews it within the attempt) instead of a fetch
    // per delivery.
    .filter(|&secs| secs > 0)
    .map(Duration::from_secs);
    let mut header = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "answered an access_token that is not a legal header value".to_owned())?;
    header.set_sensitive(true);
    Ok((header, lifetime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_30_s_or_a_tenth() {
        assert_eq!(
            renew_margin(Duration::from_secs(3600)),
            Duration::from_secs(30)
        );
        assert_eq!(
            renew_margin(Duration::from_secs(300)),
            Duration::from_secs(30)
        );
        assert_eq!(
            renew_margin(Duration::from_secs(60)),
            Duration::from_secs(6)
        );
        assert_eq!(
            renew_margin(Duration::from_secs(1)),
            Duration::from_millis(100)
        );
        assert_eq!(renew_margin(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn token_answers() {
        let (h, l) = token_of(br#"{"access_token":"t0k","token_type":"bearer","expires_in":3600}"#)
            .expect("token");
        assert_eq!(h.to_str().expect("ascii"), "Bearer t0k");
        assert!(h.is_sensitive());
        assert_eq!(l, Some(Duration::from_secs(3600)));
        // expires_in as a string (some servers), absent, or odd.
        let l = |body: &[u8]| token_of(body).expect("token").1;
        assert_eq!(
            l(br#"{"access_token":"t","expires_in":"59"}"#),
            Some(Duration::from_secs(59))
        );
        assert_eq!(l(br#"{"access_token":"t"}"#), None);
        assert_eq!(l(br#"{"access_token":"t","expires_in":-5}"#), None);
        assert_eq!(l(br#"{"access_token":"t","expires_in":0}"#), None);
        assert_eq!(l(br#"{"access_token":"t","expires_in":0.5}"#), None);
        assert_eq!(l(br#"{"access_token":"t","expires_in":"0"}"#), None);
        assert_eq!(
            l(br#"{"access_token":"t","expires_in":2.5}"#),
            Some(Duration::from_secs(2))
        );
        let e = |body: &[u8]| token_of(body).expect_err("refused");
        assert_eq!(e(b"<html>"), "answered 2xx with a body that is not JSON");
        assert_eq!(
            e(br#"{"token":"t"}"#),
            "answered 2xx without an access_token"
        );
        assert_eq!(
            e(br#"{"access_token":""}"#),
            "answered 2xx without an access_token"
        );
        assert_eq!(
            e(br#"{"access_token":"secret-tok","token_type":"mac"}"#),
            "answered a token of type \"mac\": only Bearer tokens are sent (RFC 6750)"
        );
        assert_eq!(
            e(b"{\"access_token\":\"a\\nb\"}"),
            "answered an access_token that is not a legal header value"
        );
    }
}
