//! Outbound signing of the HTTP sink (docs/design.md section 6): the sink
//! option `signing`, validated, and the headers one delivery carries.
//!
//! Two schemes, chosen by `signing.type` (the names of the edge's
//! `verification` types, so a relay can verify and sign with the same words):
//!
//! | `type` | headers sent | signed bytes | value |
//! | --- | --- | --- | --- |
//! | `standard_webhooks` | `webhook-id`, `webhook-timestamp`, `webhook-signature` | `{id}.{timestamp}.{body}` | `v1,<base64 HMAC-SHA256>` per `whsec_` secret and `v1a,<base64 Ed25519>` per `whsk_` key, space-separated |
//! | `hmac` | `signing.header` (default `x-ankusa-signature`) | the body | `prefix` + hex or base64 HMAC-SHA256 (or SHA-512) |
//!
//! Standard Webhooks (<https://www.standardwebhooks.com>): the id is the
//! hook's idempotency key ([`crate::DeliveryCtx::idempotency_key`]), so every
//! redelivery and replay of a hook carries the same `webhook-id` and a
//! receiver can drop the duplicate; the timestamp is the attempt's, unix
//! seconds. Each entry of `secrets` is one of the scheme's two kinds of key,
//! told apart by its prefix as the scheme means them to be (its "secret
//! serialization": a key says which scheme it is for, so no other option
//! is needed):
//! - `whsec_` (optional) followed by the padded standard base64 of an HMAC
//!   key (as the scheme's libraries decode it): a symmetric `v1` signature,
//!   HMAC-SHA256.
//! - `whsk_` followed by the padded standard base64 of an Ed25519 secret key
//!   (its 32-byte seed, as the scheme's Go library reads it, or the 64 bytes
//!   of seed and public key that libsodium and tweetnacl write, whose public
//!   half must match the seed): an asymmetric `v1a` signature (RFC 8032
//!   Ed25519, ring's). The receiver verifies it with the public key,
//!   `whpk_` and its base64 ([`Ed25519Key::public_key`]), and cannot sign:
//!   use it when the receiver is not trusted with a secret. A `whpk_` in
//!   `secrets` is refused (the sink signs; a public key cannot).
//!
//! Several keys sign side by side (rotation, or an HMAC and an Ed25519
//! signature for receivers of either kind), in the order of `secrets`: a
//! receiver that knows any one of them verifies, and each skips the entries
//! of a version it does not know (`v1a` beside `v1`, as the scheme says).
//!
//! The body signed is the body sent: the stored envelope's bytes, untouched.
//! The signature headers belong to the sink: the configured `headers` cannot
//! set them (refused at load) and a provider's stored header of the same name
//! is replaced, never forwarded beside ours.
//!
//! Keys never reach a log or an error: [`SigningKey`]'s `Debug` shows only
//! its length, an [`Ed25519Key`]'s only its public key, and no error message
//! quotes a secret.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::{HeaderName, HeaderValue};
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use serde_json::Value;

use crate::{OptionProblems, SinkError};

/// The most secrets a `standard_webhooks` signing takes: a rotation needs
/// two or three; each one adds about 50 bytes (`v1a`: 93) to
/// `webhook-signature`.
pub const MAX_SECRETS: usize = 10;

/// The least a Standard Webhooks key decodes to, bytes: the scheme asks for
/// 24 to 64 random bytes (`whsec_` and 32 base64 characters).
pub const MIN_STANDARD_WEBHOOKS_KEY_BYTES: usize = 24;

/// The header an `hmac` signing writes when `signing.header` is absent.
pub const DEFAULT_HMAC_HEADER: &str = "x-ankusa-signature";

/// The longest `signing.prefix`, characters.
const MAX_PREFIX_CHARS: usize = 64;

/// The Standard Webhooks headers.
const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// The keys of `signing` for each type (as [`SinkError::UnknownOption`]
/// lists them).
const STANDARD_KEYS: &[&str] = &["signing.type", "signing.secrets"];
const HMAC_KEYS: &[&str] = &[
    "signing.type",
    "signing.secret",
    "signing.header",
    "signing.algorithm",
    "signing.encoding",
    "signing.prefix",
];
const TYPE_KEYS: &[&str] = &["signing.type"];

/// Headers an `hmac` signing may not write: the sink sets them itself.
const RESERVED: &[&str] = &[
    "content-type",
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
];

/// An HMAC key. Its `Debug` shows the length only.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Vec<u8>);

impl SigningKey {
    /// A key of these bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> SigningKey {
        SigningKey(bytes.into())
    }

    /// A Standard Webhooks secret: `whsec_` (optional) and the padded
    /// standard base64 of at least [`MIN_STANDARD_WEBHOOKS_KEY_BYTES`] bytes.
    /// The error says what is wrong without quoting the secret.
    pub fn standard_webhooks(secret: &str) -> Result<SigningKey, String> {
        let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
        let key = BASE64.decode(b64).map_err(|_| {
            "is not a Standard Webhooks secret: expected whsec_ followed by (padded, standard) base64"
                .to_owned()
        })?;
        if key.len() < MIN_STANDARD_WEBHOOKS_KEY_BYTES {
            return Err(format!(
                "decodes to {} bytes; a Standard Webhooks key is {MIN_STANDARD_WEBHOOKS_KEY_BYTES} to 64 random bytes (e.g. whsec_ followed by `openssl rand -base64 32`)",
                key.len()
            ));
        }
        Ok(SigningKey(key))
    }

    /// The key's length, bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the key has no bytes (never, for a key this module built).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({} bytes)", self.0.len())
    }
}

/// The prefix of a Standard Webhooks Ed25519 secret key.
pub const ED25519_SECRET_PREFIX: &str = "whsk_";
/// The prefix of a Standard Webhooks Ed25519 public key.
pub const ED25519_PUBLIC_PREFIX: &str = "whpk_";

/// A Standard Webhooks Ed25519 secret key (`whsk_`, module docs): signs
/// `v1a` signatures. Its `Debug` shows its public key (`whpk_...`), never
/// the secret; two keys are equal when their public keys are.
#[derive(Clone)]
pub struct Ed25519Key {
    /// ring's key pair (not `Clone`: shared).
    pair: Arc<Ed25519KeyPair>,
}

impl Ed25519Key {
    /// A `whsk_` secret key: the prefix, then the padded standard base64 of
    /// the 32-byte seed, or of the seed and its public key (64 bytes, whose
    /// second half must be the seed's public key). The error says what is
    /// wrong without quoting the key.
    pub fn standard_webhooks(secret: &str) -> Result<Ed25519Key, String> {
        let b64 = secret.strip_prefix(ED25519_SECRET_PREFIX).ok_or_else(|| {
            format!(
                "is not an Ed25519 secret key: expected {ED25519_SECRET_PREFIX} followed by base64"
            )
        })?;
        let bytes = BASE64.decode(b64).map_err(|_| {
            format!(
                "is not a Standard Webhooks Ed25519 secret key: expected {ED25519_SECRET_PREFIX} followed by (padded, standard) base64"
            )
        })?;
        let pair = match bytes.len() {
            32 => Ed25519KeyPair::from_seed_unchecked(&bytes),
            64 => Ed25519KeyPair::from_seed_and_public_key(&bytes[..32], &bytes[32..]),
            n => {
                return Err(format!(
                    "decodes to {n} bytes; an Ed25519 secret key is its 32-byte seed (or 64 bytes: the seed and its public key)"
                ));
            }
        }
        .map_err(|_| {
            "holds a public key that is not the seed's: an Ed25519 secret key of 64 bytes is the seed and then its own public key"
                .to_owned()
        })?;
        Ok(Ed25519Key {
            pair: Arc::new(pair),
        })
    }

    /// The public key a receiver verifies with, as the scheme writes it:
    /// `whpk_` and the padded standard base64 of its 32 bytes.
    pub fn public_key(&self) -> String {
        format!(
            "{ED25519_PUBLIC_PREFIX}{}",
            BASE64.encode(self.pair.public_key().as_ref())
        )
    }

    /// The Ed25519 signature (RFC 8032, 64 bytes) of `message`.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }
}

impl PartialEq for Ed25519Key {
    fn eq(&self, other: &Ed25519Key) -> bool {
        self.pair.public_key().as_ref() == other.pair.public_key().as_ref()
    }
}

impl Eq for Ed25519Key {}

impl std::fmt::Debug for Ed25519Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ed25519Key({})", self.public_key())
    }
}

/// One key of a `standard_webhooks` signing: which one is told by its
/// prefix (module docs). Its `Debug` is the key's own.
#[derive(Clone, PartialEq, Eq)]
pub enum StandardKey {
    /// A `whsec_` secret: a `v1` signature, HMAC-SHA256.
    Hmac(SigningKey),
    /// A `whsk_` secret key: a `v1a` signature, Ed25519.
    Ed25519(Ed25519Key),
}

impl StandardKey {
    /// An entry of `signing.secrets`: `whsk_...` is an Ed25519 key, anything
    /// else a `whsec_` HMAC secret ([`SigningKey::standard_webhooks`]); a
    /// `whpk_` public key is refused. The error never quotes the key.
    pub fn parse(secret: &str) -> Result<StandardKey, String> {
        if secret.starts_with(ED25519_PUBLIC_PREFIX) {
            return Err(format!(
                "is an Ed25519 public key ({ED25519_PUBLIC_PREFIX}): the sink signs with the secret key ({ED25519_SECRET_PREFIX}...), and the receiver verifies with the public one"
            ));
        }
        if secret.starts_with(ED25519_SECRET_PREFIX) {
            return Ed25519Key::standard_webhooks(secret).map(StandardKey::Ed25519);
        }
        SigningKey::standard_webhooks(secret).map(StandardKey::Hmac)
    }

    /// The entry of `webhook-signature` this key writes for the signed
    /// bytes `{id}.{timestamp}.{body}` (given in parts): `v1,<base64>` or
    /// `v1a,<base64>`.
    fn signature(&self, parts: &[&[u8]]) -> String {
        match self {
            StandardKey::Hmac(k) => {
                let mac = mac(HmacAlgorithm::Sha256, &k.0, parts);
                format!("v1,{}", BASE64.encode(mac))
            }
            StandardKey::Ed25519(k) => {
                // Ed25519 reads the message twice (RFC 8032 section 5.1.6):
                // it needs the bytes in one piece.
                let signed = parts.concat();
                format!("v1a,{}", BASE64.encode(k.sign(&signed)))
            }
        }
    }
}

impl std::fmt::Debug for StandardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StandardKey::Hmac(k) => k.fmt(f),
            StandardKey::Ed25519(k) => k.fmt(f),
        }
    }
}

/// The digest of an `hmac` signing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HmacAlgorithm {
    /// HMAC-SHA256 (the default).
    Sha256,
    /// HMAC-SHA512.
    Sha512,
}

/// How an `hmac` signing writes the digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestEncoding {
    /// Lower-case hex (the default; GitHub's `X-Hub-Signature-256` form).
    Hex,
    /// Padded standard base64 (Shopify's form).
    Base64,
}

/// An `hmac` signing: one header whose value is `prefix` and the encoded
/// HMAC of the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HmacSigning {
    /// The header written (lower case). Not `x-ankusa-*` other than
    /// [`DEFAULT_HMAC_HEADER`], nor a header the sink sets itself.
    pub header: HeaderName,
    /// The digest.
    pub algorithm: HmacAlgorithm,
    /// How the digest is written.
    pub encoding: DigestEncoding,
    /// Text before the digest (`sha256=`); legal in a header value.
    pub prefix: String,
    /// The key: the secret's bytes as written.
    pub key: SigningKey,
}

/// The `signing` option of an http sink, validated (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signing {
    /// `type: standard_webhooks`: one signature per key, in the order of
    /// `secrets`.
    StandardWebhooks {
        /// One to [`MAX_SECRETS`] keys, distinct: HMAC (`whsec_`) and
        /// Ed25519 (`whsk_`) keys in any mix.
        keys: Vec<StandardKey>,
    },
    /// `type: hmac`.
    Hmac(HmacSigning),
}

impl Signing {
    /// Reads the value of the option `signing`. Every problem names its
    /// option (`signing.type`, `signing.secrets[1]`, ...); all of them are
    /// reported ([`SinkError::Options`] when there are several).
    pub fn from_option(value: &Value) -> Result<Signing, SinkError> {
        let mut p = OptionProblems::new();
        let s = parse(value, &mut p);
        match (p.finish(()), s) {
            (Ok(()), Some(s)) => Ok(s),
            (Err(e), _) => Err(e),
            (Ok(()), None) => Err(SinkError::invalid("signing", "is not a signing")),
        }
    }

    /// The headers this signing owns: the configured `headers` may not name
    /// them, and a provider's stored header of the same name is not
    /// forwarded.
    pub fn owned_headers(&self) -> Vec<HeaderName> {
        match self {
            Signing::StandardWebhooks { .. } => {
                vec![WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE]
            }
            Signing::Hmac(h) => vec![h.header.clone()],
        }
    }

    /// The type as written in the configuration.
    pub fn type_name(&self) -> &'static str {
        match self {
            Signing::StandardWebhooks { .. } => "standard_webhooks",
            Signing::Hmac(_) => "hmac",
        }
    }

    /// The headers of one delivery of `body`: for Standard Webhooks
    /// `webhook-id: <id>`, `webhook-timestamp: <timestamp_s>` and
    /// `webhook-signature`, the signature of `{id}.{timestamp_s}.{body}`
    /// under each key (`v1,` HMAC-SHA256 or `v1a,` Ed25519); for `hmac` the one header of the HMAC of `body` (`id` and
    /// `timestamp_s` unused). Pure: the time is passed in.
    ///
    /// `id` must be a legal header value (the sink passes the idempotency
    /// key, a UUID's text); one that is not is replaced by `invalid-id` in
    /// both the header and the signed text, so what is signed is always what
    /// is sent.
    pub fn headers(
        &self,
        id: &str,
        timestamp_s: u64,
        body: &[u8],
    ) -> Vec<(HeaderName, HeaderValue)> {
        match self {
            Signing::StandardWebhooks { keys } => {
                let id_value = HeaderValue::from_str(id)
                    .unwrap_or_else(|_| HeaderValue::from_static("invalid-id"));
                let id = id_value.to_str().unwrap_or("invalid-id");
                let ts = timestamp_s.to_string();
                let signature = keys
                    .iter()
                    .map(|k| k.signature(&[id.as_bytes(), b".", ts.as_bytes(), b".", body]))
                    .collect::<Vec<_>>()
                    .join(" ");
                vec![
                    (WEBHOOK_ID, id_value.clone()),
                    (WEBHOOK_TIMESTAMP, ascii_value(ts)),
                    (WEBHOOK_SIGNATURE, ascii_value(signature)),
                ]
            }
            Signing::Hmac(h) => {
                let digest = mac(h.algorithm, &h.key.0, &[body]);
                let encoded = match h.encoding {
                    DigestEncoding::Hex => hex(&digest),
                    DigestEncoding::Base64 => BASE64.encode(digest),
                };
                vec![(
                    h.header.clone(),
                    ascii_value(format!("{}{encoded}", h.prefix)),
                )]
            }
        }
    }
}

/// A header value of text this module built from visible ASCII (digits,
/// base64, hex, a checked prefix).
fn ascii_value(s: String) -> HeaderValue {
    HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The HMAC of the concatenated `parts`.
fn mac(algorithm: HmacAlgorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        // HMAC takes a key of any length: new_from_slice cannot fail.
        #[allow(clippy::expect_used)]
        let mut m = <M as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    match algorithm {
        HmacAlgorithm::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
        HmacAlgorithm::Sha512 => run::<Hmac<sha2::Sha512>>(key, parts),
    }
}

/// The type and headers a `signing` value would own, read from the value
/// alone (its type, and an `hmac` signing's `header` when that is a legal
/// name), so a configured header that clashes with them is reported even
/// when the signing has problems of its own. `None` when the type is not
/// known.
pub(crate) fn owned_headers_of(value: &Value) -> Option<(&'static str, Vec<HeaderName>)> {
    match value.get("type")?.as_str()? {
        "standard_webhooks" => Some((
            "standard_webhooks",
            vec![WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE],
        )),
        "hmac" => {
            let header = match value.get("header") {
                None => HeaderName::from_static(DEFAULT_HMAC_HEADER),
                Some(h) => hmac_header(h.as_str()?).ok()?,
            };
            Some(("hmac", vec![header]))
        }
        _ => None,
    }
}

/// Reads `signing`, recording every problem in `p`; `None` when it has one.
pub(crate) fn parse(value: &Value, p: &mut OptionProblems) -> Option<Signing> {
    let before = p.len();
    let Some(map) = value.as_object() else {
        p.invalid(
            "signing",
            "must be a map: {type: standard_webhooks, secrets: [whsec_...]} or {type: hmac, secret: ...}",
        );
        return None;
    };
    let signing = match map.get("type").map(Value::as_str) {
        None => {
            p.invalid("signing.type", "is required: standard_webhooks or hmac");
            unknown_keys(map, TYPE_KEYS, p);
            None
        }
        Some(Some("standard_webhooks")) => {
            unknown_keys(map, STANDARD_KEYS, p);
            if map.contains_key("secret") {
                p.invalid(
                    "signing.secret",
                    "type standard_webhooks takes a list: secrets: [whsec_...]",
                );
            }
            standard_webhooks(map, p)
        }
        Some(Some("hmac")) => {
            unknown_keys(map, HMAC_KEYS, p);
            if map.contains_key("secrets") {
                p.invalid(
                    "signing.secrets",
                    "type hmac signs with one `secret` (a receiver checks one header value); for rotation use type standard_webhooks, whose webhook-signature carries one signature per secret",
                );
            }
            hmac_signing(map, p)
        }
        Some(other) => {
            let found = match other {
                Some(s) => format!("\"{s}\""),
                None => "not a string".to_owned(),
            };
            p.invalid(
                "signing.type",
                format!("must be standard_webhooks or hmac, found {found}"),
            );
            None
        }
    };
    (p.len() == before).then_some(signing).flatten()
}

/// Keys of `map` not in `known` (`signing.<key>` names), each one problem.
fn unknown_keys(
    map: &serde_json::Map<String, Value>,
    known: &'static [&'static str],
    p: &mut OptionProblems,
) {
    for k in map.keys() {
        let option = format!("signing.{k}");
        // `secret`/`secrets` under the other type get their own message.
        if !known.contains(&option.as_str()) && k != "secret" && k != "secrets" {
            p.unknown(option, known);
        }
    }
}

fn standard_webhooks(
    map: &serde_json::Map<String, Value>,
    p: &mut OptionProblems,
) -> Option<Signing> {
    let list = match map.get("secrets") {
        None => {
            p.invalid(
                "signing.secrets",
                "is required: a list of one or more whsec_ (HMAC) or whsk_ (Ed25519) secrets (several sign side by side, for rotation)",
            );
            return None;
        }
        Some(Value::Array(list)) => list,
        Some(_) => {
            p.invalid(
                "signing.secrets",
                "must be a list of whsec_ (HMAC) or whsk_ (Ed25519) secrets",
            );
            return None;
        }
    };
    if list.is_empty() {
        p.invalid(
            "signing.secrets",
            "is empty: name at least one whsec_ (HMAC) or whsk_ (Ed25519) secret",
        );
        return None;
    }
    if list.len() > MAX_SECRETS {
        p.invalid(
            "signing.secrets",
            format!(
                "has {} secrets; at most {MAX_SECRETS} (a rotation needs two)",
                list.len()
            ),
        );
        return None;
    }
    // (index in `secrets`, key) of every good secret.
    let mut keys: Vec<(usize, StandardKey)> = Vec::new();
    for (i, v) in list.iter().enumerate() {
        let option = format!("signing.secrets[{i}]");
        let Some(s) = v.as_str() else {
            p.invalid(option, "must be a string (whsec_... or whsk_...)");
            continue;
        };
        if s.is_empty() {
            p.invalid(option, "is empty");
            continue;
        }
        match StandardKey::parse(s) {
            Err(m) => p.invalid(option, m),
            Ok(k) => match keys.iter().find(|(_, x)| *x == k) {
                Some((j, _)) => {
                    p.invalid(option, format!("is the same key as signing.secrets[{j}]"))
                }
                None => keys.push((i, k)),
            },
        }
    }
    Some(Signing::StandardWebhooks {
        keys: keys.into_iter().map(|(_, k)| k).collect(),
    })
}

fn hmac_signing(map: &serde_json::Map<String, Value>, p: &mut OptionProblems) -> Option<Signing> {
    let key = match map.get("secret") {
        None => {
            p.invalid(
                "signing.secret",
                "is required: the HMAC key (write env:NAME to keep it out of the file)",
            );
            None
        }
        Some(Value::String(s)) if s.is_empty() => {
            p.invalid("signing.secret", "is empty");
            None
        }
        Some(Value::String(s)) => Some(SigningKey::new(s.as_bytes())),
        Some(_) => {
            p.invalid("signing.secret", "must be a string");
            None
        }
    };
    let header = match map.get("header") {
        None => Some(HeaderName::from_static(DEFAULT_HMAC_HEADER)),
        Some(Value::String(h)) => match hmac_header(h) {
            Ok(h) => Some(h),
            Err(m) => {
                p.invalid("signing.header", m);
                None
            }
        },
        Some(_) => {
            p.invalid("signing.header", "must be a string (a header name)");
            None
        }
    };
    let algorithm = match map.get("algorithm").map(Value::as_str) {
        None | Some(Some("sha256")) => Some(HmacAlgorithm::Sha256),
        Some(Some("sha512")) => Some(HmacAlgorithm::Sha512),
        Some(_) => {
            p.invalid("signing.algorithm", "must be sha256 or sha512");
            None
        }
    };
    let encoding = match map.get("encoding").map(Value::as_str) {
        None | Some(Some("hex")) => Some(DigestEncoding::Hex),
        Some(Some("base64")) => Some(DigestEncoding::Base64),
        Some(_) => {
            p.invalid("signing.encoding", "must be hex or base64");
            None
        }
    };
    let prefix = match map.get("prefix") {
        None => Some(String::new()),
        Some(Value::String(s)) => {
            if s.chars().count() > MAX_PREFIX_CHARS {
                p.invalid(
                    "signing.prefix",
                    format!("is longer than {MAX_PREFIX_CHARS} characters"),
                );
                None
            } else if !s.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
                p.invalid(
                    "signing.prefix",
                    "may hold only visible ASCII characters and spaces (it starts a header value)",
                );
                None
            } else {
                Some(s.clone())
            }
        }
        Some(_) => {
            p.invalid("signing.prefix", "must be a string");
            None
        }
    };
    Some(Signing::Hmac(HmacSigning {
        header: header?,
        algorithm: algorithm?,
        encoding: encoding?,
        prefix: prefix?,
        key: key?,
    }))
}

/// The header an `hmac` signing writes: a legal name, not one the sink sets.
fn hmac_header(name: &str) -> Result<HeaderName, String> {
    let h = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("\"{name}\" is not a valid header name"))?;
    if RESERVED.contains(&h.as_str())
        || (h.as_str().starts_with("x-ankusa-") && h.as_str() != DEFAULT_HMAC_HEADER)
    {
        return Err(format!("\"{}\" is set by the http sink itself", h.as_str()));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The problems of `signing: v`, as "option: message" lines.
    fn problems(v: Value) -> Vec<String> {
        match Signing::from_option(&v) {
            Ok(s) => vec![format!("unexpectedly valid: {s:?}")],
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

    const SECRET_A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SECRET_B: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

    #[test]
    fn standard_webhooks_reads_every_secret_in_order() {
        let s = Signing::from_option(
            &json!({"type": "standard_webhooks", "secrets": [SECRET_A, SECRET_B]}),
        )
        .expect("valid");
        let Signing::StandardWebhooks { keys } = &s else {
            panic!("{s:?}")
        };
        assert_eq!(keys.len(), 2);
        // Without the prefix the same key.
        let bare = Signing::from_option(
            &json!({"type": "standard_webhooks", "secrets": ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}),
        )
        .expect("valid");
        assert_eq!(
            bare,
            Signing::StandardWebhooks {
                keys: vec![keys[0].clone()]
            }
        );
        let StandardKey::Hmac(first) = &keys[0] else {
            panic!("{keys:?}")
        };
        assert_eq!(first.len(), 24);
        assert_eq!(
            s.owned_headers(),
            ["webhook-id", "webhook-timestamp", "webhook-signature"]
        );
        assert_eq!(s.type_name(), "standard_webhooks");
    }

    #[test]
    fn secrets_never_show_in_debug_or_errors() {
        let s = Signing::from_option(&json!({"type": "standard_webhooks", "secrets": [SECRET_A]}))
            .expect("valid");
        let d = format!("{s:?}");
        assert_eq!(d, "StandardWebhooks { keys: [SigningKey(24 bytes)] }");
        let h = Signing::from_option(&json!({"type": "hmac", "secret": "hunter2-very-secret"}))
            .expect("valid");
        let d = format!("{h:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("SigningKey(19 bytes)"), "{d}");
        // A bad secret's error does not quote it.
        let e =
            problems(json!({"type": "standard_webhooks", "secrets": ["whsec_not*base64!secret"]}));
        assert!(e.iter().all(|l| !l.contains("not*base64")), "{e:?}");
        let e = problems(json!({"type": "standard_webhooks", "secrets": ["whsec_AAAA"]}));
        assert!(e.iter().all(|l| !l.contains("AAAA")), "{e:?}");
    }

    #[test]
    fn every_problem_names_its_option() {
        assert_eq!(
            problems(
                json!({"type": "standard_webhooks", "secrets": ["whsec_%%%", SECRET_A, 5, "", SECRET_A, "whsec_AAAA"]})
            ),
            [
                "signing.secrets[0]: is not a Standard Webhooks secret: expected whsec_ followed by (padded, standard) base64",
                "signing.secrets[2]: must be a string (whsec_... or whsk_...)",
                "signing.secrets[3]: is empty",
                "signing.secrets[4]: is the same key as signing.secrets[1]",
                "signing.secrets[5]: decodes to 3 bytes; a Standard Webhooks key is 24 to 64 random bytes (e.g. whsec_ followed by `openssl rand -base64 32`)",
            ]
        );
        assert_eq!(
            problems(json!({"type": "standard_webhooks", "secrets": []})),
            [
                "signing.secrets: is empty: name at least one whsec_ (HMAC) or whsk_ (Ed25519) secret"
            ]
        );
        assert_eq!(
            problems(json!({"type": "standard_webhooks"})),
            [
                "signing.secrets: is required: a list of one or more whsec_ (HMAC) or whsk_ (Ed25519) secrets (several sign side by side, for rotation)"
            ]
        );
        assert_eq!(
            problems(json!({"type": "standard_webhooks", "secrets": SECRET_A})),
            ["signing.secrets: must be a list of whsec_ (HMAC) or whsk_ (Ed25519) secrets"]
        );
        let eleven: Vec<&str> = vec![SECRET_A; 11];
        assert_eq!(
            problems(json!({"type": "standard_webhooks", "secrets": eleven})),
            ["signing.secrets: has 11 secrets; at most 10 (a rotation needs two)"]
        );
        assert_eq!(
            problems(
                json!({"type": "standard_webhooks", "secrets": [SECRET_A], "secret": "x", "header": "h"})
            ),
            [
                "signing.header: unknown",
                "signing.secret: type standard_webhooks takes a list: secrets: [whsec_...]"
            ]
        );
        assert_eq!(
            problems(json!({"type": "svix", "secrets": [SECRET_A]})),
            ["signing.type: must be standard_webhooks or hmac, found \"svix\""]
        );
        assert_eq!(
            problems(json!({"secrets": [SECRET_A], "extra": 1})),
            [
                "signing.type: is required: standard_webhooks or hmac",
                "signing.extra: unknown"
            ]
        );
        assert_eq!(
            problems(json!("standard_webhooks")),
            [
                "signing: must be a map: {type: standard_webhooks, secrets: [whsec_...]} or {type: hmac, secret: ...}"
            ]
        );
        assert_eq!(
            problems(json!({"type": "hmac"})),
            [
                "signing.secret: is required: the HMAC key (write env:NAME to keep it out of the file)"
            ]
        );
        assert_eq!(
            problems(
                json!({"type": "hmac", "secret": "", "header": "content-type", "algorithm": "md5",
                            "encoding": "b64", "prefix": "sha256=\n", "secrets": ["a"]})
            ),
            [
                "signing.secrets: type hmac signs with one `secret` (a receiver checks one header value); for rotation use type standard_webhooks, whose webhook-signature carries one signature per secret",
                "signing.secret: is empty",
                "signing.header: \"content-type\" is set by the http sink itself",
                "signing.algorithm: must be sha256 or sha512",
                "signing.encoding: must be hex or base64",
                "signing.prefix: may hold only visible ASCII characters and spaces (it starts a header value)",
            ]
        );
        assert_eq!(
            problems(json!({"type": "hmac", "secret": "s", "header": "bad name"})),
            ["signing.header: \"bad name\" is not a valid header name"]
        );
        assert_eq!(
            problems(json!({"type": "hmac", "secret": "s", "header": "X-Ankusa-Tenant"})),
            ["signing.header: \"x-ankusa-tenant\" is set by the http sink itself"]
        );
    }

    #[test]
    fn hmac_defaults_and_choices() {
        let h = Signing::from_option(&json!({"type": "hmac", "secret": "s3cret"})).expect("valid");
        assert_eq!(
            h,
            Signing::Hmac(HmacSigning {
                header: HeaderName::from_static("x-ankusa-signature"),
                algorithm: HmacAlgorithm::Sha256,
                encoding: DigestEncoding::Hex,
                prefix: String::new(),
                key: SigningKey::new(b"s3cret".to_vec()),
            })
        );
        let h = Signing::from_option(&json!({"type": "hmac", "secret": "s3cret", "header": "X-Hub-Signature-256",
                                              "algorithm": "sha512", "encoding": "base64", "prefix": "sha512="}))
            .expect("valid");
        assert_eq!(h.owned_headers(), ["x-hub-signature-256"]);
        let Signing::Hmac(h) = h else { panic!() };
        assert_eq!(
            (h.algorithm, h.encoding, h.prefix.as_str()),
            (HmacAlgorithm::Sha512, DigestEncoding::Base64, "sha512=")
        );
    }

    /// The scheme's published test vector (the Standard Webhooks spec and
    /// its reference libraries): not computed by this code.
    #[test]
    fn standard_webhooks_matches_the_published_vector() {
        let s = Signing::from_option(&json!({"type": "standard_webhooks", "secrets": [SECRET_B]}))
            .expect("valid");
        let h = s.headers(
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            br#"{"email":"test@example.com","username":"test_user"}"#,
        );
        let h: Vec<(&str, &str)> = h
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or("?")))
            .collect();
        assert_eq!(
            h,
            [
                ("webhook-id", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"),
                ("webhook-timestamp", "1649367553"),
                (
                    "webhook-signature",
                    "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
                ),
            ]
        );
        // Two keys: two signatures, space-separated, in the order of secrets.
        let two = Signing::from_option(
            &json!({"type": "standard_webhooks", "secrets": [SECRET_A, SECRET_B]}),
        )
        .expect("valid");
        let sig = two
            .headers(
                "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                1_649_367_553,
                br#"{"email":"test@example.com","username":"test_user"}"#,
            )
            .remove(2)
            .1;
        let sig = sig.to_str().unwrap_or("?");
        let parts: Vec<&str> = sig.split(' ').collect();
        assert_eq!(parts.len(), 2, "{sig}");
        assert_eq!(parts[1], "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
        assert!(parts[0].starts_with("v1,") && parts[0] != parts[1], "{sig}");
    }

    /// RFC 4231 test case 2 (key "Jefe"), HMAC-SHA256 and HMAC-SHA512.
    #[test]
    fn hmac_matches_rfc_4231() {
        let body = b"what do ya want for nothing?";
        let sign = |extra: Value| {
            let mut o = json!({"type": "hmac", "secret": "Jefe"});
            if let (Some(o), Some(e)) = (o.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            let s = Signing::from_option(&o).expect("valid");
            let mut h = s.headers("ignored", 0, body);
            assert_eq!(h.len(), 1);
            let (n, v) = h.remove(0);
            (n.as_str().to_owned(), v.to_str().unwrap_or("?").to_owned())
        };
        assert_eq!(
            sign(json!({"prefix": "sha256="})),
            (
                "x-ankusa-signature".to_owned(),
                "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
                    .to_owned()
            )
        );
        assert_eq!(
            sign(json!({"algorithm": "sha512", "header": "x-sig"})).1,
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
        assert_eq!(
            sign(json!({"encoding": "base64"})).1,
            "W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDnexYuWTsOEM="
        );
    }

    /// RFC 8032 section 7.1, TEST 1 and TEST 2: the seed's public key and
    /// the signatures of the empty message and of the one byte 0x72 (the
    /// RFC's vectors, not computed by this code).
    const RFC8032_SEED_1: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const RFC8032_PUBLIC_1: &str =
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    const RFC8032_SIGNATURE_1: &str = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";
    const RFC8032_SEED_2: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
    const RFC8032_PUBLIC_2: &str =
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    const RFC8032_SIGNATURE_2: &str = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn whsk(bytes: &[u8]) -> String {
        format!("whsk_{}", BASE64.encode(bytes))
    }

    #[test]
    fn ed25519_keys_match_rfc_8032() {
        for (seed, public, message, signature) in [
            (
                RFC8032_SEED_1,
                RFC8032_PUBLIC_1,
                &b""[..],
                RFC8032_SIGNATURE_1,
            ),
            (
                RFC8032_SEED_2,
                RFC8032_PUBLIC_2,
                &[0x72][..],
                RFC8032_SIGNATURE_2,
            ),
        ] {
            let seed = unhex(seed);
            let k = Ed25519Key::standard_webhooks(&whsk(&seed)).expect("32-byte seed");
            assert_eq!(
                k.public_key(),
                format!("whpk_{}", BASE64.encode(unhex(public)))
            );
            assert_eq!(k.sign(message), unhex(signature));
            // libsodium's 64-byte form (seed, then public key): the same key.
            let long = [seed.clone(), unhex(public)].concat();
            assert_eq!(
                Ed25519Key::standard_webhooks(&whsk(&long)).expect("64 bytes"),
                k
            );
        }
    }

    #[test]
    fn ed25519_key_problems_name_the_entry_and_never_quote_it() {
        let seed_1 = unhex(RFC8032_SEED_1);
        let wrong_public = [seed_1.clone(), unhex(RFC8032_PUBLIC_2)].concat();
        let e = problems(json!({"type": "standard_webhooks", "secrets": [
            whsk(&seed_1),
            "whsk_not base64",
            whsk(&seed_1[..16]),
            whsk(&wrong_public),
            format!("whpk_{}", BASE64.encode(unhex(RFC8032_PUBLIC_1))),
            whsk(&[seed_1.clone(), unhex(RFC8032_PUBLIC_1)].concat()),
        ]}));
        assert_eq!(
            e,
            [
                "signing.secrets[1]: is not a Standard Webhooks Ed25519 secret key: expected whsk_ followed by (padded, standard) base64",
                "signing.secrets[2]: decodes to 16 bytes; an Ed25519 secret key is its 32-byte seed (or 64 bytes: the seed and its public key)",
                "signing.secrets[3]: holds a public key that is not the seed's: an Ed25519 secret key of 64 bytes is the seed and then its own public key",
                "signing.secrets[4]: is an Ed25519 public key (whpk_): the sink signs with the secret key (whsk_...), and the receiver verifies with the public one",
                "signing.secrets[5]: is the same key as signing.secrets[0]",
            ]
        );
        let seed_b64 = BASE64.encode(&seed_1);
        assert!(e.iter().all(|l| !l.contains(&seed_b64)), "{e:?}");
        // Debug shows the public key only.
        let s = Signing::from_option(
            &json!({"type": "standard_webhooks", "secrets": [whsk(&seed_1), SECRET_A]}),
        )
        .expect("valid");
        let d = format!("{s:?}");
        assert_eq!(
            d,
            format!(
                "StandardWebhooks {{ keys: [Ed25519Key(whpk_{}), SigningKey(24 bytes)] }}",
                BASE64.encode(unhex(RFC8032_PUBLIC_1))
            )
        );
        assert!(!d.contains(&seed_b64), "{d}");
    }

    /// An Ed25519 key writes `v1a,` beside the HMAC's `v1,`, in the order
    /// of `secrets`, over the same `{id}.{timestamp}.{body}`; the `v1`
    /// entry is still the published vector's and the `v1a` one verifies
    /// under the public key (ring's verifier over the RFC's algorithm).
    #[test]
    fn standard_webhooks_signs_v1a_beside_v1() {
        let seed = unhex(RFC8032_SEED_2);
        let s = Signing::from_option(
            &json!({"type": "standard_webhooks", "secrets": [whsk(&seed), SECRET_B]}),
        )
        .expect("valid");
        let id = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        let h = s.headers(id, 1_649_367_553, body);
        let sig = h[2].1.to_str().expect("ascii");
        let parts: Vec<&str> = sig.split(' ').collect();
        assert_eq!(parts.len(), 2, "{sig}");
        assert_eq!(parts[1], "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
        let v1a = parts[0].strip_prefix("v1a,").expect("v1a first");
        let raw = BASE64.decode(v1a).expect("base64");
        assert_eq!(raw.len(), 64);
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ED25519,
            unhex(RFC8032_PUBLIC_2),
        );
        let signed = [id.as_bytes(), b".1649367553.", body].concat();
        public.verify(&signed, &raw).expect("v1a verifies");
        assert!(public.verify(&signed[1..], &raw).is_err());
    }
}
