//! Provider signature verification (docs/design.md sections 5 and 10). The edge
//! answers 401 on any [`VerifyError`], before anything is stored, and the hook
//! takes no seq.
//!
//! # Schemes
//! | [`Verifier`] | header(s) | signed bytes | signature |
//! | --- | --- | --- | --- |
//! | `GitHub` | `X-Hub-Signature-256` | body | `sha256=` hex HMAC-SHA256 |
//! | `Stripe` | `Stripe-Signature: t=..,v1=..[,v1=..]` | `{t}.{body}` | any `v1` hex HMAC-SHA256; `v0` and other schemes ignored |
//! | `Shopify` | `X-Shopify-Hmac-Sha256` | body | base64 HMAC-SHA256 |
//! | `Slack` | `X-Slack-Signature`, `X-Slack-Request-Timestamp` | `v0:{ts}:{body}` | `v0=` hex HMAC-SHA256 |
//! | `StandardWebhooks` | `webhook-id`, `webhook-timestamp`, `webhook-signature` (or `svix-*`) | `{id}.{ts}.{body}` | any space-separated `v1,` base64 HMAC-SHA256; `v1a` etc. ignored |
//! | `Twilio` | `X-Twilio-Signature` | configured URL + sorted form params | base64 HMAC-SHA1 |
//! | `Hmac` | configurable | body | configurable: SHA-256/SHA-1, hex/base64, prefix |
//!
//! # Rules common to every scheme
//! - Header names match ASCII case-insensitively; a header that appears more
//!   than once counts by its first value (docs/design.md section 10).
//! - A source has one or more secrets (rotation): a request verifies when any
//!   secret matches any signature it carries. [`Verified::secret_ix`] says
//!   which secret, so an operator can see when the old one stops being used.
//! - Tags are compared in constant time (`subtle`); which candidate matched is
//!   not secret.
//! - Timestamped schemes (Stripe, Slack, Standard Webhooks) check the
//!   signature first and then the timestamp against the tolerance in both
//!   directions (docs/design.md section 10, default [`DEFAULT_TOLERANCE_MS`]); so
//!   [`VerifyError::StaleTimestamp`] means "genuine but too old (a replay) or
//!   from a skewed clock", which is what an operator needs to tell apart
//!   from a wrong secret.
//! - The secrets are never printed ([`Secret`]'s `Debug` is redacted).
//!
//! # Not supported yet
//! - Twilio requests with a JSON body (signed through a `bodySHA256` query
//!   parameter), and Twilio's port variants (its libraries also try the URL
//!   with `:443`/`:80` added or removed): the configured URL must be the one
//!   set in Twilio's console, byte for byte.
//! - GitHub's legacy `X-Hub-Signature` (SHA-1) is not checked by `GitHub`; a
//!   source that needs it can use `Hmac` with `sha1=`.
//! - Asymmetric signatures (Standard Webhooks `v1a`, ed25519).

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit, Mac};
use subtle::ConstantTimeEq;

use crate::{Header, first_header, hex};

/// Standard base64 (`+/`); trailing `=` padding optional when decoding.
pub(crate) const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The default timestamp tolerance, both directions: 300 s (docs/design.md section 10),
/// in milliseconds like every duration of the config.
pub const DEFAULT_TOLERANCE_MS: u64 = 300_000;

/// A signing secret (or the raw HMAC key a `whsec_` secret decodes to). Its
/// `Debug` output does not show the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A secret whose bytes are the HMAC key as is: GitHub, Stripe (the whole
    /// `whsec_...` string is the key), Shopify, Slack, Twilio (the auth
    /// token), the generic header.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// A Standard Webhooks / Svix secret: `whsec_` (optional) followed by the
    /// base64 of the key, which is what the HMAC uses.
    pub fn standard_webhooks(secret: &str) -> Result<Secret, SecretError> {
        let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
        let key = BASE64.decode(b64).map_err(|_| SecretError::NotBase64)?;
        if key.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Secret(key))
    }

    pub(crate) fn key(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// A secret that cannot be used (a config load error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// A Standard Webhooks secret whose part after `whsec_` is not base64.
    #[error("secret is not whsec_ followed by base64")]
    NotBase64,
    /// A secret that decodes to no bytes.
    #[error("secret is empty")]
    Empty,
}

/// The hash of a generic HMAC header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HmacAlgorithm {
    /// HMAC-SHA256.
    Sha256,
    /// HMAC-SHA1 (legacy providers only).
    Sha1,
    /// HMAC-SHA512.
    Sha512,
}

/// How a generic HMAC header writes the tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignatureEncoding {
    /// Hex, either case.
    Hex,
    /// Standard base64 (`+/`), padding optional.
    Base64,
}

/// A generic HMAC header: `header: prefix + encode(HMAC(secret, body))`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HmacHeader {
    /// The header name (matched ASCII case-insensitively).
    pub header: String,
    /// The hash.
    pub algorithm: HmacAlgorithm,
    /// How the tag is written.
    pub encoding: SignatureEncoding,
    /// What the value starts with before the tag (`"sha256="`), matched
    /// exactly; empty for none.
    pub prefix: String,
    /// The secrets; any may match.
    pub secrets: Vec<Secret>,
}

/// How a source verifies its hooks. Every list of secrets is tried in order
/// and any may match (rotation); an empty list rejects every request, so the
/// config should refuse it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verifier {
    /// No verification (Salesforce outbound messages are not signed: use a
    /// secret path, TLS client certificates or an IP allow-list).
    None,
    /// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`.
    GitHub {
        /// The webhook secrets.
        secrets: Vec<Secret>,
    },
    /// Stripe: `Stripe-Signature: t=<unix s>,v1=<hex>,...`, the HMAC-SHA256 of
    /// `"{t}.{body}"`; any `v1` may match, other schemes (`v0`) are ignored.
    Stripe {
        /// The endpoint secrets (`whsec_...`, used as is).
        secrets: Vec<Secret>,
        /// Allowed distance of `t` from now, both directions, in milliseconds.
        tolerance_ms: u64,
    },
    /// Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(secret, body)>`.
    Shopify {
        /// The app's client secrets.
        secrets: Vec<Secret>,
    },
    /// Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256(secret, "v0:{ts}:{body}")>`
    /// with `ts` from `X-Slack-Request-Timestamp`.
    Slack {
        /// The app's signing secrets.
        secrets: Vec<Secret>,
        /// Allowed distance of `ts` from now, both directions, in milliseconds.
        tolerance_ms: u64,
    },
    /// Standard Webhooks and Svix: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature` (each falling back to its `svix-` name), the
    /// HMAC-SHA256 of `"{id}.{ts}.{body}"`; the signature header holds
    /// space-separated `v1,<base64>` entries, any of which may match.
    StandardWebhooks {
        /// The keys, decoded from `whsec_` secrets by
        /// [`Secret::standard_webhooks`].
        keys: Vec<Secret>,
        /// Allowed distance of the timestamp from now, both directions, in
        /// milliseconds.
        tolerance_ms: u64,
    },
    /// Twilio: `X-Twilio-Signature: <base64 HMAC-SHA1(token, url + params)>`,
    /// where params are the form-encoded body's name/value pairs, decoded,
    /// sorted by name (then value) and concatenated with nothing between.
    Twilio {
        /// The account auth tokens.
        tokens: Vec<Secret>,
        /// The full URL configured in Twilio (scheme, host, port if any, path,
        /// query), byte for byte: behind a proxy the edge cannot rebuild it.
        url: String,
    },
    /// A generic HMAC header over the body.
    Hmac(HmacHeader),
}

/// A request that verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Verified {
    /// The index of the secret that matched; `None` for [`Verifier::None`].
    pub secret_ix: Option<usize>,
    /// The signature's timestamp (unix seconds) for the timestamped schemes.
    pub timestamp_s: Option<i64>,
}

/// Why a request did not verify. Every variant is a 401.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A header the scheme needs is absent.
    #[error("missing header {header}")]
    MissingHeader {
        /// The header's name.
        header: String,
    },
    /// A header is there but cannot be read (empty, no `t=`, no `v1`, a
    /// timestamp that is not an integer, a missing prefix, a tag that does not
    /// decode).
    #[error("malformed header {header}: {reason}")]
    MalformedHeader {
        /// The header's name.
        header: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No secret produces any of the signatures given.
    #[error("no signature matches")]
    BadSignature,
    /// The signature matches but its timestamp is too far from now.
    #[error("{}", stale_message(*skew_s, *tolerance_ms))]
    StaleTimestamp {
        /// now − timestamp, in seconds: positive for an old signature,
        /// negative for one from the future.
        skew_s: i64,
        /// The tolerance it exceeded, in milliseconds.
        tolerance_ms: u64,
    },
}

impl Verifier {
    /// Verifies one request: its headers in arrival order, its body as
    /// received and the clock in unix milliseconds (used by the timestamped
    /// schemes only). Pure; never panics on any input.
    pub fn verify(
        &self,
        headers: &[Header<'_>],
        body: &[u8],
        now_ms: u64,
    ) -> Result<Verified, VerifyError> {
        match self {
            Verifier::None => Ok(Verified {
                secret_ix: None,
                timestamp_s: None,
            }),
            Verifier::GitHub { secrets } => body_hmac(
                headers,
                body,
                "X-Hub-Signature-256",
                HmacAlgorithm::Sha256,
                SignatureEncoding::Hex,
                "sha256=",
                secrets,
            ),
            Verifier::Shopify { secrets } => body_hmac(
                headers,
                body,
                "X-Shopify-Hmac-Sha256",
                HmacAlgorithm::Sha256,
                SignatureEncoding::Base64,
                "",
                secrets,
            ),
            Verifier::Hmac(h) => body_hmac(
                headers,
                body,
                &h.header,
                h.algorithm,
                h.encoding,
                &h.prefix,
                &h.secrets,
            ),
            Verifier::Stripe {
                secrets,
                tolerance_ms,
            } => stripe(headers, body, now_ms, secrets, *tolerance_ms),
            Verifier::Slack {
                secrets,
                tolerance_ms,
            } => slack(headers, body, now_ms, secrets, *tolerance_ms),
            Verifier::StandardWebhooks { keys, tolerance_ms } => {
                standard_webhooks(headers, body, now_ms, keys, *tolerance_ms)
            }
            Verifier::Twilio { tokens, url } => twilio(headers, body, tokens, url),
        }
    }
}

// ---- schemes ----------------------------------------------------------------

fn body_hmac(
    headers: &[Header<'_>],
    body: &[u8],
    name: &str,
    algorithm: HmacAlgorithm,
    encoding: SignatureEncoding,
    prefix: &str,
    secrets: &[Secret],
) -> Result<Verified, VerifyError> {
    let value = required(headers, name)?;
    let tag = value
        .strip_prefix(prefix.as_bytes())
        .ok_or_else(|| malformed(name, "missing prefix"))?;
    let tag = match encoding {
        SignatureEncoding::Hex => hex::decode(tag).ok_or_else(|| malformed(name, "not hex"))?,
        SignatureEncoding::Base64 => BASE64
            .decode(tag)
            .map_err(|_| malformed(name, "not base64"))?,
    };
    let ix =
        matching_secret(algorithm, secrets, &[body], &[tag]).ok_or(VerifyError::BadSignature)?;
    Ok(Verified {
        secret_ix: Some(ix),
        timestamp_s: None,
    })
}

fn stripe(
    headers: &[Header<'_>],
    body: &[u8],
    now_ms: u64,
    secrets: &[Secret],
    tolerance_ms: u64,
) -> Result<Verified, VerifyError> {
    const NAME: &str = "Stripe-Signature";
    let value = required(headers, NAME)?;
    let mut t: Option<&[u8]> = None;
    let mut v1 = Vec::new();
    for item in value.split(|&b| b == b',') {
        let item = item.trim_ascii();
        let Some(eq) = item.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (k, v) = (&item[..eq], &item[eq + 1..]);
        match k {
            b"t" if t.is_none() => t = Some(v),
            // A v1 that is not hex cannot match; another v1 still may.
            b"v1" => v1.extend(hex::decode(v)),
            _ => {}
        }
    }
    let t = t.ok_or_else(|| malformed(NAME, "no t="))?;
    let ts = parse_timestamp(t).ok_or_else(|| malformed(NAME, "t is not unix seconds"))?;
    if v1.is_empty() {
        return Err(malformed(NAME, "no v1 signature"));
    }
    let ix = matching_secret(HmacAlgorithm::Sha256, secrets, &[t, b".", body], &v1)
        .ok_or(VerifyError::BadSignature)?;
    fresh(ts, now_ms, tolerance_ms)?;
    Ok(Verified {
        secret_ix: Some(ix),
        timestamp_s: Some(ts),
    })
}

fn slack(
    headers: &[Header<'_>],
    body: &[u8],
    now_ms: u64,
    secrets: &[Secret],
    tolerance_ms: u64,
) -> Result<Verified, VerifyError> {
    const SIG: &str = "X-Slack-Signature";
    const TS: &str = "X-Slack-Request-Timestamp";
    let signature = required(headers, SIG)?;
    let t = required(headers, TS)?;
    let ts = parse_timestamp(t).ok_or_else(|| malformed(TS, "not unix seconds"))?;
    let tag = signature
        .strip_prefix(b"v0=")
        .ok_or_else(|| malformed(SIG, "missing v0="))?;
    let tag = hex::decode(tag).ok_or_else(|| malformed(SIG, "not hex"))?;
    let ix = matching_secret(
        HmacAlgorithm::Sha256,
        secrets,
        &[b"v0:", t, b":", body],
        &[tag],
    )
    .ok_or(VerifyError::BadSignature)?;
    fresh(ts, now_ms, tolerance_ms)?;
    Ok(Verified {
        secret_ix: Some(ix),
        timestamp_s: Some(ts),
    })
}

fn standard_webhooks(
    headers: &[Header<'_>],
    body: &[u8],
    now_ms: u64,
    keys: &[Secret],
    tolerance_ms: u64,
) -> Result<Verified, VerifyError> {
    let (id_name, id) = webhook_header(headers, "id")?;
    let (ts_name, t) = webhook_header(headers, "timestamp")?;
    let (sig_name, signature) = webhook_header(headers, "signature")?;
    if id.is_empty() {
        return Err(malformed(id_name, "empty"));
    }
    let ts = parse_timestamp(t).ok_or_else(|| malformed(ts_name, "not unix seconds"))?;
    let v1: Vec<Vec<u8>> = signature
        .split(|&b| b == b' ')
        .filter_map(|entry| entry.strip_prefix(b"v1,"))
        // An entry that is not base64 cannot match; another one still may.
        .filter_map(|tag| BASE64.decode(tag).ok())
        .collect();
    if v1.is_empty() {
        return Err(malformed(sig_name, "no v1 signature"));
    }
    let ix = matching_secret(HmacAlgorithm::Sha256, keys, &[id, b".", t, b".", body], &v1)
        .ok_or(VerifyError::BadSignature)?;
    fresh(ts, now_ms, tolerance_ms)?;
    Ok(Verified {
        secret_ix: Some(ix),
        timestamp_s: Some(ts),
    })
}

/// `webhook-{suffix}`, or `svix-{suffix}` when that is absent: the name found
/// and its first value.
fn webhook_header<'a>(
    headers: &[Header<'a>],
    suffix: &'static str,
) -> Result<(&'static str, &'a [u8]), VerifyError> {
    let (standard, svix) = match suffix {
        "id" => ("webhook-id", "svix-id"),
        "timestamp" => ("webhook-timestamp", "svix-timestamp"),
        _ => ("webhook-signature", "svix-signature"),
    };
    if let Some(v) = first_header(headers, standard) {
        return Ok((standard, v));
    }
    if let Some(v) = first_header(headers, svix) {
        return Ok((svix, v));
    }
    Err(VerifyError::MissingHeader {
        header: standard.to_owned(),
    })
}

fn twilio(
    headers: &[Header<'_>],
    body: &[u8],
    tokens: &[Secret],
    url: &str,
) -> Result<Verified, VerifyError> {
    const NAME: &str = "X-Twilio-Signature";
    let value = required(headers, NAME)?;
    let tag = BASE64
        .decode(value)
        .map_err(|_| malformed(NAME, "not base64"))?;
    let params = twilio_params(body);
    let ix = matching_secret(
        HmacAlgorithm::Sha1,
        tokens,
        &twilio_parts(url, &params),
        &[tag],
    )
    .ok_or(VerifyError::BadSignature)?;
    Ok(Verified {
        secret_ix: Some(ix),
        timestamp_s: None,
    })
}

/// What Twilio signs, in parts: `url`, then each of `params` (the form
/// body's [`twilio_params`]) name and value, with nothing between. Shared
/// with the signer ([`crate::sign::twilio`]).
pub(crate) fn twilio_parts<'a>(url: &'a str, params: &'a [(Vec<u8>, Vec<u8>)]) -> Vec<&'a [u8]> {
    let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + 2 * params.len());
    parts.push(url.as_bytes());
    for (k, v) in params {
        parts.push(k);
        parts.push(v);
    }
    parts
}

/// The name/value pairs of a form-encoded Twilio body, decoded and sorted by
/// name (then value): what Twilio signs after the URL.
pub(crate) fn twilio_params(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut params: Vec<(Vec<u8>, Vec<u8>)> = body
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.iter().position(|&b| b == b'=') {
            Some(eq) => (form_decode(&pair[..eq]), form_decode(&pair[eq + 1..])),
            None => (form_decode(pair), Vec::new()),
        })
        .collect();
    params.sort();
    params
}

// ---- helpers ----------------------------------------------------------------

/// The first value of `name`; missing, or empty, is an error.
fn required<'a>(headers: &[Header<'a>], name: &str) -> Result<&'a [u8], VerifyError> {
    let value = first_header(headers, name).ok_or_else(|| VerifyError::MissingHeader {
        header: name.to_owned(),
    })?;
    if value.is_empty() {
        return Err(malformed(name, "empty"));
    }
    Ok(value)
}

fn malformed(name: &str, reason: &'static str) -> VerifyError {
    VerifyError::MalformedHeader {
        header: name.to_owned(),
        reason,
    }
}

/// Unix seconds: ASCII digits only (no sign, no spaces), fitting an i64.
fn parse_timestamp(text: &[u8]) -> Option<i64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// [`VerifyError::StaleTimestamp`]'s text: which way the timestamp is off.
fn stale_message(skew_s: i64, tolerance_ms: u64) -> String {
    let tolerance = if tolerance_ms.is_multiple_of(1000) {
        format!("{} s", tolerance_ms / 1000)
    } else {
        format!("{tolerance_ms} ms")
    };
    if skew_s >= 0 {
        format!("signature timestamp is {skew_s} s old (tolerance {tolerance})")
    } else {
        format!(
            "signature timestamp is {} s in the future (tolerance {tolerance})",
            skew_s.unsigned_abs()
        )
    }
}

/// `ts` (whole seconds) within `tolerance_ms` of now, either side, comparing
/// whole seconds: `now_s = floor(now_ms / 1000)` and the boundary is accepted.
fn fresh(ts: i64, now_ms: u64, tolerance_ms: u64) -> Result<(), VerifyError> {
    let now_s = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
    // ts >= 0 (digits only) and now_s >= 0, so this cannot overflow.
    let skew_s = now_s - ts;
    if skew_s.unsigned_abs().saturating_mul(1000) > tolerance_ms {
        return Err(VerifyError::StaleTimestamp {
            skew_s,
            tolerance_ms,
        });
    }
    Ok(())
}

/// The index of the first secret whose HMAC of the concatenated `parts`
/// equals one of `candidates` (compared in constant time).
fn matching_secret(
    algorithm: HmacAlgorithm,
    secrets: &[Secret],
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> Option<usize> {
    secrets.iter().position(|secret| {
        let tag = mac(algorithm, secret.key(), parts);
        // `|` rather than `any`: every candidate is compared.
        candidates
            .iter()
            .fold(subtle::Choice::from(0), |acc, c| {
                acc | tag.as_slice().ct_eq(c)
            })
            .into()
    })
}

pub(crate) fn mac(algorithm: HmacAlgorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        // HMAC takes a key of any length: new_from_slice cannot fail.
        let mut m = <M as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    match algorithm {
        HmacAlgorithm::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
        HmacAlgorithm::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts),
        HmacAlgorithm::Sha512 => run::<Hmac<sha2::Sha512>>(key, parts),
    }
}

/// `application/x-www-form-urlencoded` decoding of one name or value: `+` is a
/// space, `%XX` a byte; a `%` not followed by two hex digits stays as is.
fn form_decode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' => {
                if let Some(b) = text.get(i + 1..i + 3).and_then(hex::decode) {
                    out.extend(b);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_decoding() {
        assert_eq!(form_decode(b"Caf%C3%A9+%26+x"), "Café & x".as_bytes());
        assert_eq!(form_decode(b"100%"), b"100%");
        assert_eq!(form_decode(b"%zz%4"), b"%zz%4");
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp(b"1531420618"), Some(1_531_420_618));
        assert_eq!(parse_timestamp(b"+1"), None);
        assert_eq!(parse_timestamp(b"-1"), None);
        assert_eq!(parse_timestamp(b""), None);
        assert_eq!(parse_timestamp(b"99999999999999999999"), None);
        assert_eq!(fresh(1000, 1_300_000, 300_000), Ok(()));
        assert_eq!(fresh(1000, 700_000, 300_000), Ok(()));
        assert_eq!(
            fresh(1000, 1_301_000, 300_000),
            Err(VerifyError::StaleTimestamp {
                skew_s: 301,
                tolerance_ms: 300_000
            })
        );
        assert_eq!(
            VerifyError::StaleTimestamp {
                skew_s: 301,
                tolerance_ms: 300_000
            }
            .to_string(),
            "signature timestamp is 301 s old (tolerance 300 s)"
        );
        assert_eq!(
            VerifyError::StaleTimestamp {
                skew_s: -600,
                tolerance_ms: 300_000
            }
            .to_string(),
            "signature timestamp is 600 s in the future (tolerance 300 s)"
        );
        assert_eq!(
            fresh(i64::MAX, 0, 300_000),
            Err(VerifyError::StaleTimestamp {
                skew_s: -i64::MAX,
                tolerance_ms: 300_000
            })
        );
    }
}
