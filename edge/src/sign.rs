//! The provider's side of the schemes [`crate::verify`] checks: the signature
//! header values a provider writes ([`github`], [`stripe`], ...), and
//! [`resign`], which gives a saved request (a corpus file's header list, for
//! `ankusa send --resign`) a signature made now with another secret.
//!
//! | [`Scheme`] | headers [`resign`] rewrites | timestamp |
//! | --- | --- | --- |
//! | `GitHub` | `X-Hub-Signature-256` and, when present, `X-Hub-Signature` (SHA-1) | none |
//! | `Stripe` | `Stripe-Signature` (becomes `t=<now>,v1=<hex>`: other `v1` and `v0` entries go) | `t=` |
//! | `Shopify` | `X-Shopify-Hmac-Sha256` | none |
//! | `Slack` | `X-Slack-Request-Timestamp`, `X-Slack-Signature` | its header |
//! | `StandardWebhooks` | `webhook-timestamp`, `webhook-signature` and their `svix-` names (one `v1,` entry) | its header |
//! | `Twilio` | `X-Twilio-Signature`, over the URL the request is posted to | none |
//!
//! # Invariants it keeps
//! - What a function here signs, [`Verifier::verify`](crate::Verifier) of the
//!   same scheme and secret accepts (the edge's tests check each scheme with
//!   the verifier, and the fuzz targets sign their cases with these
//!   functions).
//! - [`resign`] changes header values only: every header keeps its place,
//!   its name as written and its other values; the body is never touched.
//!
//! Pure: the time is passed in ([`resign`]'s `now_s`), nothing is read or
//! printed, and secrets never appear in an error.

use base64::Engine as _;

use crate::verify::{BASE64, mac, twilio_params, twilio_parts};
use crate::{Header, HmacAlgorithm, Secret, SecretError, first_header, hex};

/// A provider scheme that can be signed; named as the config's
/// `verification.type` names it ([`Scheme::name`]; the config has no
/// `twilio` type yet, the edge's [`Verifier`](crate::Verifier) has).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scheme {
    /// GitHub: `X-Hub-Signature-256` (and the legacy SHA-1 `X-Hub-Signature`).
    GitHub,
    /// Stripe: `Stripe-Signature`.
    Stripe,
    /// Shopify: `X-Shopify-Hmac-Sha256`.
    Shopify,
    /// Slack: `X-Slack-Signature` with `X-Slack-Request-Timestamp`.
    Slack,
    /// Standard Webhooks / Svix: `webhook-*` (or `svix-*`).
    StandardWebhooks,
    /// Twilio: `X-Twilio-Signature`.
    Twilio,
}

/// Why [`resign`] cannot sign a request whose scheme it detected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResignError {
    /// The request carries the scheme's signature header but not a header
    /// the signature covers (Slack's timestamp, a Standard Webhooks id or
    /// timestamp).
    #[error("it has {present} but no {missing} header")]
    MissingHeader {
        /// The signature header found.
        present: &'static str,
        /// The header the scheme needs beside it.
        missing: &'static str,
    },
}

impl Scheme {
    /// Every scheme, in the order [`Scheme::detect`] tries them.
    pub const ALL: [Scheme; 6] = [
        Scheme::GitHub,
        Scheme::Stripe,
        Scheme::Shopify,
        Scheme::Slack,
        Scheme::StandardWebhooks,
        Scheme::Twilio,
    ];

    /// The scheme's name: the config's `verification.type` (`github`,
    /// `stripe`, `shopify`, `slack`, `standard_webhooks`), and `twilio`.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::GitHub => "github",
            Scheme::Stripe => "stripe",
            Scheme::Shopify => "shopify",
            Scheme::Slack => "slack",
            Scheme::StandardWebhooks => "standard_webhooks",
            Scheme::Twilio => "twilio",
        }
    }

    /// The scheme called `name` ([`Scheme::name`], exactly).
    pub fn from_name(name: &str) -> Option<Scheme> {
        Scheme::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The headers that carry this scheme's signature, the main one first:
    /// a request with any of them is this scheme's ([`Scheme::detect`]).
    pub fn signature_headers(self) -> &'static [&'static str] {
        match self {
            Scheme::GitHub => &["X-Hub-Signature-256", "X-Hub-Signature"],
            Scheme::Stripe => &["Stripe-Signature"],
            Scheme::Shopify => &["X-Shopify-Hmac-Sha256"],
            Scheme::Slack => &["X-Slack-Signature"],
            Scheme::StandardWebhooks => &["webhook-signature", "svix-signature"],
            Scheme::Twilio => &["X-Twilio-Signature"],
        }
    }

    /// The scheme whose signature header the request carries (names matched
    /// ASCII case-insensitively; [`Scheme::signature_headers`]), trying
    /// [`Scheme::ALL`] in order. `None` for a request with none of them (an
    /// unsigned provider: Salesforce).
    pub fn detect(headers: &[Header<'_>]) -> Option<Scheme> {
        Scheme::ALL.into_iter().find(|s| {
            s.signature_headers()
                .iter()
                .any(|name| first_header(headers, name).is_some())
        })
    }

    /// The signing secret of this scheme from its text: a Standard Webhooks
    /// `whsec_` secret decodes to its key ([`Secret::standard_webhooks`]);
    /// every other scheme's key is the text's bytes. An empty secret is
    /// refused.
    pub fn secret(self, text: &str) -> Result<Secret, SecretError> {
        match self {
            Scheme::StandardWebhooks => Secret::standard_webhooks(text),
            _ if text.is_empty() => Err(SecretError::Empty),
            _ => Ok(Secret::new(text)),
        }
    }
}

/// GitHub's `X-Hub-Signature-256`: `sha256=<hex HMAC-SHA256(secret, body)>`.
pub fn github(secret: &Secret, body: &[u8]) -> String {
    let tag = mac(HmacAlgorithm::Sha256, secret.key(), &[body]);
    format!("sha256={}", hex::encode(&tag))
}

/// GitHub's legacy `X-Hub-Signature`: `sha1=<hex HMAC-SHA1(secret, body)>`.
pub fn github_sha1(secret: &Secret, body: &[u8]) -> String {
    let tag = mac(HmacAlgorithm::Sha1, secret.key(), &[body]);
    format!("sha1={}", hex::encode(&tag))
}

/// Shopify's `X-Shopify-Hmac-Sha256`: `base64(HMAC-SHA256(secret, body))`.
pub fn shopify(secret: &Secret, body: &[u8]) -> String {
    BASE64.encode(mac(HmacAlgorithm::Sha256, secret.key(), &[body]))
}

/// Stripe's `Stripe-Signature` at `timestamp_s` (unix seconds):
/// `t=<ts>,v1=<hex HMAC-SHA256(secret, "<ts>.<body>")>`.
pub fn stripe(secret: &Secret, timestamp_s: u64, body: &[u8]) -> String {
    let ts = timestamp_s.to_string();
    let tag = mac(
        HmacAlgorithm::Sha256,
        secret.key(),
        &[ts.as_bytes(), b".", body],
    );
    format!("t={ts},v1={}", hex::encode(&tag))
}

/// Slack's `X-Slack-Signature` for `X-Slack-Request-Timestamp: <timestamp_s>`:
/// `v0=<hex HMAC-SHA256(secret, "v0:<ts>:<body>")>`.
pub fn slack(secret: &Secret, timestamp_s: u64, body: &[u8]) -> String {
    let ts = timestamp_s.to_string();
    let tag = mac(
        HmacAlgorithm::Sha256,
        secret.key(),
        &[b"v0:", ts.as_bytes(), b":", body],
    );
    format!("v0={}", hex::encode(&tag))
}

/// One Standard Webhooks `webhook-signature` entry for `webhook-id: <id>` and
/// `webhook-timestamp: <timestamp_s>`: `v1,<base64 HMAC-SHA256(key,
/// "<id>.<ts>.<body>")>`, `key` decoded from a `whsec_` secret.
pub fn standard_webhooks(key: &Secret, id: &[u8], timestamp_s: u64, body: &[u8]) -> String {
    let ts = timestamp_s.to_string();
    let tag = mac(
        HmacAlgorithm::Sha256,
        key.key(),
        &[id, b".", ts.as_bytes(), b".", body],
    );
    format!("v1,{}", BASE64.encode(tag))
}

/// Twilio's `X-Twilio-Signature` of a request posted to `url` (scheme, host,
/// port if any, path and query, as the source's `verification.url` has it):
/// `base64(HMAC-SHA1(token, url + the form body's sorted name/value pairs))`.
pub fn twilio(token: &Secret, url: &str, body: &[u8]) -> String {
    let params = twilio_params(body);
    BASE64.encode(mac(
        HmacAlgorithm::Sha1,
        token.key(),
        &twilio_parts(url, &params),
    ))
}

/// Signs a saved request again as `scheme` with `secret` at `now_s` (unix
/// seconds): the timestamp of a timestamped scheme becomes `now_s` and each
/// signature header of the scheme (table in the module docs) gets the
/// signature of the exact `body`, in place: every header of that name (ASCII
/// case-insensitive) keeps its place and its name as written, and no header
/// is added or removed. A Standard Webhooks request keeps its id (the one
/// the edge reads: `webhook-id`, else `svix-id`). `url` is where the
/// request is posted (Twilio signs it; the other schemes ignore it).
///
/// # Errors
/// [`ResignError::MissingHeader`] when a header the signature covers is
/// absent (Slack's timestamp; a Standard Webhooks id or timestamp); the
/// headers are then unchanged.
pub fn resign(
    scheme: Scheme,
    headers: &mut [(String, String)],
    body: &[u8],
    secret: &Secret,
    now_s: u64,
    url: &str,
) -> Result<(), ResignError> {
    let missing = |missing| ResignError::MissingHeader {
        present: scheme.signature_headers()[0],
        missing,
    };
    match scheme {
        Scheme::GitHub => {
            set(headers, "X-Hub-Signature-256", &github(secret, body));
            set(headers, "X-Hub-Signature", &github_sha1(secret, body));
        }
        Scheme::Stripe => set(headers, "Stripe-Signature", &stripe(secret, now_s, body)),
        Scheme::Shopify => set(headers, "X-Shopify-Hmac-Sha256", &shopify(secret, body)),
        Scheme::Slack => {
            const TS: &str = "X-Slack-Request-Timestamp";
            if !has(headers, TS) {
                return Err(missing(TS));
            }
            set(headers, TS, &now_s.to_string());
            set(headers, "X-Slack-Signature", &slack(secret, now_s, body));
        }
        Scheme::StandardWebhooks => {
            let id = ["webhook-id", "svix-id"]
                .iter()
                .find_map(|name| value(headers, name))
                .ok_or_else(|| missing("webhook-id"))?
                .to_owned();
            let timestamps = ["webhook-timestamp", "svix-timestamp"];
            if !timestamps.iter().any(|name| has(headers, name)) {
                return Err(missing("webhook-timestamp"));
            }
            let signature = standard_webhooks(secret, id.as_bytes(), now_s, body);
            for name in timestamps {
                set(headers, name, &now_s.to_string());
            }
            for name in ["webhook-signature", "svix-signature"] {
                set(headers, name, &signature);
            }
        }
        Scheme::Twilio => set(headers, "X-Twilio-Signature", &twilio(secret, url, body)),
    }
    Ok(())
}

/// The first value of `name` (ASCII case-insensitive).
fn value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn has(headers: &[(String, String)], name: &str) -> bool {
    value(headers, name).is_some()
}

/// Replaces the value of every header called `name`, in place.
fn set(headers: &mut [(String, String)], name: &str, new: &str) {
    for (n, v) in headers.iter_mut() {
        if n.eq_ignore_ascii_case(name) {
            new.clone_into(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_the_config() {
        for s in Scheme::ALL {
            assert_eq!(Scheme::from_name(s.name()), Some(s));
        }
        assert_eq!(Scheme::from_name("Stripe"), None);
        assert_eq!(Scheme::from_name("standard-webhooks"), None);
    }

    #[test]
    fn set_keeps_places_and_names() {
        let mut h = vec![
            ("A".to_owned(), "1".to_owned()),
            ("x-hub-signature".to_owned(), "old".to_owned()),
            ("B".to_owned(), "2".to_owned()),
            ("X-Hub-Signature".to_owned(), "old2".to_owned()),
        ];
        set(&mut h, "X-HUB-SIGNATURE", "new");
        assert_eq!(
            h,
            [
                ("A".to_owned(), "1".to_owned()),
                ("x-hub-signature".to_owned(), "new".to_owned()),
                ("B".to_owned(), "2".to_owned()),
                ("X-Hub-Signature".to_owned(), "new".to_owned()),
            ]
        );
    }

    #[test]
    fn slack_without_its_timestamp_is_refused_unchanged() {
        let mut h = vec![("X-Slack-Signature".to_owned(), "v0=00".to_owned())];
        let before = h.clone();
        let e = resign(Scheme::Slack, &mut h, b"x", &Secret::new("s"), 1, "");
        assert_eq!(
            e,
            Err(ResignError::MissingHeader {
                present: "X-Slack-Signature",
                missing: "X-Slack-Request-Timestamp"
            })
        );
        assert_eq!(h, before);
        assert_eq!(
            e.err().map(|e| e.to_string()).as_deref(),
            Some("it has X-Slack-Signature but no X-Slack-Request-Timestamp header")
        );
    }
}
