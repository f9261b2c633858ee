//! The HTTP sink's `auth` option (docs/design.md section 6): how the sink
//! authenticates to a receiver that sits behind authentication, with the
//! `authorization` header it sets on every delivery.
//!
//! ```yaml
//! auth:
//!   basic: {username: relay, password: env:RECEIVER_PASSWORD}
//! # or
//! auth:
//!   oauth2:
//!     token_url: https://idp.example.com/oauth2/token
//!     client_id: ankusa-relay
//!     client_secret: env:RELAY_CLIENT_SECRET
//!     scope: hooks.write                    # optional: a string, or a list
//!     auth_method: client_secret_basic      # optional; or client_secret_post
//! ```
//!
//! - `basic`: `authorization: Basic <base64 of username:password>`, UTF-8
//!   (RFC 7617). The user name may not contain `:` (the scheme cannot carry
//!   it); neither may hold a control character.
//! - `oauth2`: the client-credentials grant (RFC 6749 section 4.4), then
//!   `authorization: Bearer <access token>` (RFC 6750) on each delivery. How
//!   the token is fetched, cached, shared and refreshed, and what a failure
//!   of the token endpoint comes to, is [`crate::http::oauth2`]'s.
//! - `password` and `client_secret` (any string of the options, in fact)
//!   may be written `env:NAME`: the config crate resolves them at load.
//! - A configured `headers.authorization` beside `auth` is refused at load
//!   (two credentials, one header), and a provider's stored `Authorization`
//!   header is never forwarded beside the sink's.
//!
//! Secrets never reach a log or an error: [`Auth`]'s `Debug` shows the user
//! name, the token URL and the client id only, and no message quotes a
//! password or secret.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::header::HeaderValue;
use serde_json::Value;

use crate::{OptionProblems, SinkError};

/// The keys of `auth`, of `auth.basic` and of `auth.oauth2` (as
/// [`SinkError::UnknownOption`] lists them).
const KEYS: &[&str] = &["auth.basic", "auth.oauth2"];
const BASIC_KEYS: &[&str] = &["auth.basic.username", "auth.basic.password"];
const OAUTH2_KEYS: &[&str] = &[
    "auth.oauth2.token_url",
    "auth.oauth2.client_id",
    "auth.oauth2.client_secret",
    "auth.oauth2.scope",
    "auth.oauth2.auth_method",
];

/// The `auth` option of an http sink, validated (module docs).
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `auth.basic`: one fixed `authorization: Basic ...` header.
    Basic(BasicAuth),
    /// `auth.oauth2`: a client-credentials token, as a Bearer header.
    OAuth2(OAuth2),
}

/// `auth.basic`, validated. Its `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuth {
    username: String,
    password: String,
}

/// How the client authenticates to the token endpoint (RFC 6749 section
/// 2.3.1; the names are OpenID Connect's `token_endpoint_auth_method`s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuthMethod {
    /// `client_secret_basic`, the default: the client id and secret, each
    /// form-urlencoded, as HTTP Basic credentials (the method every
    /// authorization server must support).
    ClientSecretBasic,
    /// `client_secret_post`: `client_id` and `client_secret` in the form
    /// body, for a server that only takes them there.
    ClientSecretPost,
}

/// `auth.oauth2`, validated. Its `Debug` hides the client secret.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuth2 {
    token_url: String,
    client_id: String,
    client_secret: String,
    scope: Option<String>,
    method: ClientAuthMethod,
}

impl Auth {
    /// Reads the value of the option `auth`. Every problem names its option
    /// (`auth.basic.username`, `auth.oauth2.token_url`, ...); all of them are
    /// reported ([`SinkError::Options`] when there are several).
    pub fn from_option(value: &Value) -> Result<Auth, SinkError> {
        let mut p = OptionProblems::new();
        let a = parse(value, &mut p);
        match (p.finish(()), a) {
            (Ok(()), Some(a)) => Ok(a),
            (Err(e), _) => Err(e),
            (Ok(()), None) => Err(SinkError::invalid("auth", "is not an auth")),
        }
    }

    /// The scheme as written in the configuration: `basic` or `oauth2`.
    pub fn scheme(&self) -> &'static str {
        match self {
            Auth::Basic(_) => "basic",
            Auth::OAuth2(_) => "oauth2",
        }
    }
}

impl BasicAuth {
    /// The user name.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// `Basic <base64 of username:password>` (RFC 7617, UTF-8), marked
    /// sensitive so an `HeaderMap`'s `Debug` does not show it.
    pub(crate) fn header(&self) -> HeaderValue {
        let credentials = BASE64.encode(format!("{}:{}", self.username, self.password));
        let mut v = HeaderValue::from_str(&format!("Basic {credentials}"))
            .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
        v.set_sensitive(true);
        v
    }
}

impl OAuth2 {
    /// The token endpoint, as configured (print it through
    /// [`crate::http::HttpSinkConfig::target`]'s redaction: it may carry a
    /// secret in its query).
    pub fn token_url(&self) -> &str {
        &self.token_url
    }

    /// The client id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    pub(crate) fn client_secret(&self) -> &str {
        &self.client_secret
    }

    /// The scopes asked for, space-separated; `None`: none is sent (the
    /// server's default).
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// How the client authenticates to the token endpoint.
    pub fn method(&self) -> ClientAuthMethod {
        self.method
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Basic(b) => f
                .debug_struct("Basic")
                .field("username", &b.username)
                .field("password", &"***")
                .finish(),
            Auth::OAuth2(o) => f
                .debug_struct("OAuth2")
                .field("token_url", &crate::secret::redact_url(&o.token_url))
                .field("client_id", &o.client_id)
                .field("client_secret", &"***")
                .field("scope", &o.scope)
                .field("method", &o.method)
                .finish(),
        }
    }
}

/// The scheme a value of `auth` names (`basic` or `oauth2`) when it names
/// exactly one, read from the value alone, so a configured
/// `headers.authorization` is reported beside an `auth` with problems of
/// its own.
pub(crate) fn scheme_of(value: &Value) -> &'static str {
    match value.as_object() {
        Some(m) if m.len() == 1 && m.contains_key("basic") => "basic",
        Some(m) if m.len() == 1 && m.contains_key("oauth2") => "oauth2",
        _ => "auth",
    }
}

/// Reads `auth`, recording every problem in `p`; `None` when it has one.
pub(crate) fn parse(value: &Value, p: &mut OptionProblems) -> Option<Auth> {
    const FORM: &str =
        "{basic: {username, password}} or {oauth2: {token_url, client_id, client_secret, scope}}";
    let before = p.len();
    let Some(map) = value.as_object() else {
        p.invalid("auth", format!("must be a map: {FORM}"));
        return None;
    };
    for k in map.keys() {
        let option = format!("auth.{k}");
        if !KEYS.contains(&option.as_str()) {
            p.unknown(option, KEYS);
        }
    }
    let auth = match (map.get("basic"), map.get("oauth2")) {
        (Some(_), Some(_)) => {
            p.invalid("auth", "names both basic and oauth2: choose one");
            None
        }
        (Some(b), None) => basic(b, p).map(Auth::Basic),
        (None, Some(o)) => oauth2(o, p).map(Auth::OAuth2),
        (None, None) => {
            if map.is_empty() {
                p.invalid("auth", format!("names no scheme: {FORM}"));
            }
            None
        }
    };
    (p.len() == before).then_some(auth).flatten()
}

/// The keys of the map `value` of `option` not in `known`, each one
/// problem; the map, or `None` after "must be a map".
fn section<'a>(
    value: &'a Value,
    option: &str,
    form: &str,
    known: &'static [&'static str],
    p: &mut OptionProblems,
) -> Option<&'a serde_json::Map<String, Value>> {
    let Some(map) = value.as_object() else {
        p.invalid(option, format!("must be a map: {form}"));
        return None;
    };
    for k in map.keys() {
        let key = format!("{option}.{k}");
        if !known.contains(&key.as_str()) {
            p.unknown(key, known);
        }
    }
    Some(map)
}

/// The string `option` of `map`: required, without control characters and
/// (unless `empty_ok`) not empty. `required` says what it is, for the
/// message of a missing one.
fn text(
    map: &serde_json::Map<String, Value>,
    option: &str,
    required: &str,
    empty_ok: bool,
    p: &mut OptionProblems,
) -> Option<String> {
    let key = option.rsplit('.').next().unwrap_or(option);
    match map.get(key) {
        None => {
            p.invalid(option, format!("is required: {required}"));
            None
        }
        Some(Value::String(s)) if s.is_empty() && !empty_ok => {
            p.invalid(option, "is empty");
            None
        }
        Some(Value::String(s)) if s.chars().any(char::is_control) => {
            p.invalid(option, "contains a control character");
            None
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            p.invalid(option, "must be a string");
            None
        }
    }
}

fn basic(value: &Value, p: &mut OptionProblems) -> Option<BasicAuth> {
    let map = section(
        value,
        "auth.basic",
        "{username: ..., password: ...}",
        BASIC_KEYS,
        p,
    )?;
    let username = text(
        map,
        "auth.basic.username",
        "the user name the receiver expects",
        false,
        p,
    )
    .and_then(|u| {
        if u.contains(':') {
            p.invalid(
                "auth.basic.username",
                "contains `:`, which Basic authentication cannot carry in a user name (RFC 7617 section 2)",
            );
            None
        } else {
            Some(u)
        }
    });
    // An empty password is a receiver's choice (a token as the user name).
    let password = text(
        map,
        "auth.basic.password",
        "the password (write env:NAME to keep it out of the file)",
        true,
        p,
    );
    Some(BasicAuth {
        username: username?,
        password: password?,
    })
}

fn oauth2(value: &Value, p: &mut OptionProblems) -> Option<OAuth2> {
    let map = section(
        value,
        "auth.oauth2",
        "{token_url: https://..., client_id: ..., client_secret: ..., scope: ...}",
        OAUTH2_KEYS,
        p,
    )?;
    let token_url = text(
        map,
        "auth.oauth2.token_url",
        "the authorization server's token endpoint (https://...)",
        false,
        p,
    )
    .and_then(|u| match token_url(&u) {
        Ok(()) => Some(u),
        Err(m) => {
            p.invalid("auth.oauth2.token_url", m);
            None
        }
    });
    let client_id = text(
        map,
        "auth.oauth2.client_id",
        "the relay's client id at the authorization server",
        false,
        p,
    );
    let client_secret = text(
        map,
        "auth.oauth2.client_secret",
        "the client's secret (write env:NAME to keep it out of the file)",
        false,
        p,
    );
    let scope = match map.get("scope") {
        None => Some(None),
        Some(v) => scope(v)
            .map(Some)
            .map_err(|m| p.invalid("auth.oauth2.scope", m))
            .ok(),
    };
    let method = match map.get("auth_method").map(Value::as_str) {
        None | Some(Some("client_secret_basic")) => Some(ClientAuthMethod::ClientSecretBasic),
        Some(Some("client_secret_post")) => Some(ClientAuthMethod::ClientSecretPost),
        Some(_) => {
            p.invalid(
                "auth.oauth2.auth_method",
                "must be client_secret_basic (the default) or client_secret_post",
            );
            None
        }
    };
    Some(OAuth2 {
        token_url: token_url?,
        client_id: client_id?,
        client_secret: client_secret?,
        scope: scope?,
        method: method?,
    })
}

/// A token endpoint: an absolute URL with a host, `https`, or `http` to a
/// loopback address (the client secret travels to it, and RFC 6749 section
/// 2.3.1 requires TLS for that; loopback is for a sidecar and for tests).
fn token_url(u: &str) -> Result<(), String> {
    let shown = crate::secret::redact_url(u);
    let url = reqwest::Url::parse(u).map_err(|e| format!("`{shown}` is not a URL: {e}"))?;
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(format!("`{shown}` has no host"));
    };
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || ip
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(format!(
            "`{shown}` is http://: the client secret would travel in the clear (RFC 6749 section 2.3.1 requires TLS); use https://, or http:// to a loopback address only"
        )),
        other => Err(format!("scheme `{other}` is not https")),
    }
}

/// `scope`: a string of space-separated scopes, or a list of them; each
/// scope is printable ASCII without `"`, `\` or a space (RFC 6749 section
/// 3.3).
fn scope(v: &Value) -> Result<String, String> {
    let scopes: Vec<&str> = match v {
        Value::String(s) => s.split(' ').filter(|s| !s.is_empty()).collect(),
        Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().ok_or("must be a string or a list of strings"))
            .collect::<Result<_, _>>()?,
        _ => return Err("must be a string of space-separated scopes, or a list of them".into()),
    };
    if scopes.is_empty() {
        return Err("is empty: name a scope, or leave the option out".into());
    }
    for s in &scopes {
        let legal = !s.is_empty()
            && s.bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
        if !legal {
            return Err(format!(
                "\"{s}\" is not a scope: printable ASCII without spaces, `\"` or `\\` (RFC 6749 section 3.3)"
            ));
        }
    }
    Ok(scopes.join(" "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(v: Value) -> Vec<String> {
        match Auth::from_option(&v) {
            Ok(a) => vec![format!("unexpectedly valid: {a:?}")],
            Err(e) => e
                .problems()
                .iter()
                .map(|e| match e {
                    SinkError::InvalidOption { option, reason } => format!("{option}: {reason}"),
                    SinkError::UnknownOption { option, .. } => format!("{option}: unknown"),
                    other => other.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn basic_is_rfc_7617() {
        let a = Auth::from_option(
            &json!({"basic": {"username": "Aladdin", "password": "open sesame"}}),
        )
        .expect("valid");
        let Auth::Basic(b) = &a else { panic!("{a:?}") };
        // RFC 7617 section 2's example.
        assert_eq!(
            b.header().to_str().expect("ascii"),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert!(b.header().is_sensitive());
        // UTF-8 (RFC 7617 section 2.1's `test`/`123£` example).
        let a = Auth::from_option(&json!({"basic": {"username": "test", "password": "123\u{a3}"}}))
            .expect("valid");
        let Auth::Basic(b) = &a else { panic!("{a:?}") };
        assert_eq!(
            b.header().to_str().expect("ascii"),
            "Basic dGVzdDoxMjPCow=="
        );
        assert_eq!(a.scheme(), "basic");
        assert_eq!(
            format!("{a:?}"),
            "Basic { username: \"test\", password: \"***\" }"
        );
    }

    #[test]
    fn oauth2_defaults_and_choices() {
        let a = Auth::from_option(&json!({"oauth2": {
            "token_url": "https://idp.example/token?api_key=k1",
            "client_id": "relay",
            "client_secret": "s3cret-value",
        }}))
        .expect("valid");
        let Auth::OAuth2(o) = &a else { panic!("{a:?}") };
        assert_eq!(o.method(), ClientAuthMethod::ClientSecretBasic);
        assert_eq!(o.scope(), None);
        assert_eq!(o.client_secret(), "s3cret-value");
        let d = format!("{a:?}");
        assert!(!d.contains("s3cret") && !d.contains("k1"), "{d}");
        assert!(d.contains("api_key=***"), "{d}");
        let a = Auth::from_option(&json!({"oauth2": {
            "token_url": "http://127.0.0.1:9/token",
            "client_id": "relay",
            "client_secret": "s",
            "scope": ["hooks.write", "hooks:read"],
            "auth_method": "client_secret_post",
        }}))
        .expect("valid");
        let Auth::OAuth2(o) = &a else { panic!("{a:?}") };
        assert_eq!(o.scope(), Some("hooks.write hooks:read"));
        assert_eq!(o.method(), ClientAuthMethod::ClientSecretPost);
        for loopback in [
            "http://localhost/t",
            "http://[::1]:8/t",
            "http://127.9.9.9/t",
        ] {
            token_url(loopback).expect(loopback);
        }
        let a = Auth::from_option(&json!({"oauth2": {
            "token_url": "https://idp.example/token", "client_id": "c", "client_secret": "s",
            "scope": "  a  b ",
        }}))
        .expect("valid");
        let Auth::OAuth2(o) = &a else { panic!("{a:?}") };
        assert_eq!(o.scope(), Some("a b"));
    }

    #[test]
    fn every_problem_names_its_option() {
        assert_eq!(
            problems(json!("basic")),
            [
                "auth: must be a map: {basic: {username, password}} or {oauth2: {token_url, client_id, client_secret, scope}}"
            ]
        );
        assert_eq!(
            problems(json!({})),
            [
                "auth: names no scheme: {basic: {username, password}} or {oauth2: {token_url, client_id, client_secret, scope}}"
            ]
        );
        assert_eq!(problems(json!({"bearer": "x"})), ["auth.bearer: unknown"]);
        assert_eq!(
            problems(json!({"basic": {"username": "u", "password": "p"}, "oauth2": {}})),
            ["auth: names both basic and oauth2: choose one"]
        );
        assert_eq!(
            problems(json!({"basic": {"user": "u"}})),
            [
                "auth.basic.user: unknown",
                "auth.basic.username: is required: the user name the receiver expects",
                "auth.basic.password: is required: the password (write env:NAME to keep it out of the file)",
            ]
        );
        assert_eq!(
            problems(json!({"basic": {"username": "a:b", "password": "p\nq"}})),
            [
                "auth.basic.username: contains `:`, which Basic authentication cannot carry in a user name (RFC 7617 section 2)",
                "auth.basic.password: contains a control character",
            ]
        );
        assert_eq!(
            problems(json!({"basic": {"username": "", "password": 5}})),
            [
                "auth.basic.username: is empty",
                "auth.basic.password: must be a string",
            ]
        );
        assert_eq!(
            problems(
                json!({"oauth2": {"token_url": "http://idp.example/token", "client_id": "", "scope": [], "auth_method": "private_key_jwt", "audience": "x"}})
            ),
            [
                "auth.oauth2.audience: unknown",
                "auth.oauth2.token_url: `http://idp.example/token` is http://: the client secret would travel in the clear (RFC 6749 section 2.3.1 requires TLS); use https://, or http:// to a loopback address only",
                "auth.oauth2.client_id: is empty",
                "auth.oauth2.client_secret: is required: the client's secret (write env:NAME to keep it out of the file)",
                "auth.oauth2.scope: is empty: name a scope, or leave the option out",
                "auth.oauth2.auth_method: must be client_secret_basic (the default) or client_secret_post",
            ]
        );
        assert_eq!(
            problems(
                json!({"oauth2": {"token_url": "ftp://u:pw@idp/t", "client_id": "c", "client_secret": "s", "scope": "a \"b\""}})
            ),
            [
                "auth.oauth2.token_url: scheme `ftp` is not https",
                "auth.oauth2.scope: \"\"b\"\" is not a scope: printable ASCII without spaces, `\"` or `\\` (RFC 6749 section 3.3)",
            ]
        );
        assert_eq!(
            problems(
                json!({"oauth2": {"token_url": "not a url", "client_id": "c", "client_secret": "s"}})
            ),
            ["auth.oauth2.token_url: `not a url` is not a URL: relative URL without a base"]
        );
        assert_eq!(
            problems(json!({"oauth2": []})),
            [
                "auth.oauth2: must be a map: {token_url: https://..., client_id: ..., client_secret: ..., scope: ...}"
            ]
        );
        // A secret is never quoted.
        let e = problems(
            json!({"oauth2": {"token_url": "https://u:hunter2@idp/t?token=tok3n", "client_id": "c", "client_secret": "s\u{7}ecret"}}),
        );
        assert_eq!(
            e,
            ["auth.oauth2.client_secret: contains a control character"]
        );
        let e = problems(
            json!({"oauth2": {"token_url": "http://u:hunter2@idp/t?token=tok3n", "client_id": "c", "client_secret": "s"}}),
        );
        assert!(
            e.iter()
                .all(|l| !l.contains("hunter2") && !l.contains("tok3n")),
            "{e:?}"
        );
    }
}
