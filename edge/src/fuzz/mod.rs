//! The edge's fuzz targets (README, "Fuzzing the edge"): one per verifier
//! ([`verify`], a [`Scheme`] each), one per key resolver ([`key`], `{json}` and
//! `{header}`) and one for the whole request path ([`request`], with the
//! `server` feature). Each takes arbitrary bytes, reads them as a [`Case`],
//! runs the edge's own code on it and panics when that code breaks a promise: a
//! panic of its own, a verdict that disagrees with an independent
//! recomputation, a 5xx from a request path whose store cannot fail, a refused
//! request that stored something.
//!
//! One definition, two drivers: cargo-fuzz (`fuzz/`, nightly, libFuzzer's
//! mutator; `fuzz/run.sh`) and the bounded, seeded mutation run of
//! `cargo test` (`edge/tests/it/fuzz.rs`). Both start from the real provider
//! payloads of `fixtures/corpus` written as cases ([`Case::encode`]).
//!
//! # The case format
//! Text shaped like an HTTP request, so a seed can be read and a crash
//! replayed by hand:
//!
//! ```text
//! POST /hooks/github now=1721948600 sign
//! X-GitHub-Event: push
//! X-Hub-Signature-256: sha256=...
//!
//! {"ref": "refs/heads/main", ...}
//! ```
//!
//! The first line is the control line: whitespace-separated words. The
//! request target reads its first word as the method and its second as the
//! path (with the query); every target reads these words, wherever they are
//! (unknown words are ignored):
//! - `now=S`: the clock, unix seconds (default [`DEFAULT_NOW_S`]).
//! - `sign`: before the target runs, the case is signed for its scheme with
//!   the corpus test secret at timestamp `now` (the signature headers go
//!   first, so they are the ones read): the edge must then accept it.
//! - `tamper` (with `sign`): one byte is appended to the body after signing:
//!   the edge must refuse it.
//! - `stale` (with `sign`): the clock runs one second past the tolerance:
//!   a timestamped scheme must answer [`VerifyError::StaleTimestamp`].
//! - `url=U`: Twilio's configured URL (default [`TWILIO_URL`]).
//! - `json=a.b` / `header=NAME`: an extra key spec for [`key`].
//!
//! Then one header per line, `Name: value` (one space after the colon is
//! dropped; a line without a colon is a name with an empty value), an empty
//! line, and the body: every byte after it, as is. A trailing CR is dropped
//! from the control line and from each header line. [`Case::parse`] reads
//! any bytes (it cannot fail); `Case::parse(&c.encode()) == c` for cases
//! whose control line has no LF and does not end in CR, whose header names have
//! no `:`, CR or LF and whose values have no CR or LF.
//!
//! # Secrets
//! The verifiers use the test secrets of `fixtures/corpus/README.md` (none
//! is real), so the corpus files verify as they are; the edge's tests check
//! these constants against `fixtures/corpus/index.json`.

use sha2::{Digest, Sha256};

use crate::{
    DEFAULT_TOLERANCE_MS, Header, HmacAlgorithm, HmacHeader, JSON_KEY_MAX_BYTES, KeySpec,
    ParsedBody, Secret, SignatureEncoding, Verified, Verifier, VerifyError, dedupe, filter, hex,
    ordering, sign, slack,
};

#[cfg(feature = "server")]
mod request;
#[cfg(feature = "server")]
pub use request::{HARNESS_BODY_LIMIT_BYTES, HARNESS_CONFIG, request};

/// GitHub's test secret (`GITHUB_SECRET` of the corpus; GitHub's docs value).
pub const GITHUB_SECRET: &str = "It's a Secret to Everybody";
/// Stripe's current endpoint secret (`STRIPE_SECRET`).
pub const STRIPE_SECRET: &str = "whsec_corpus_test_secret_0001";
/// Stripe's previous endpoint secret (`STRIPE_SECRET_OLD`: the rotation case).
pub const STRIPE_SECRET_OLD: &str = "whsec_corpus_test_secret_0000";
/// Shopify's client secret (`SHOPIFY_SECRET`).
pub const SHOPIFY_SECRET: &str = "shpss_corpus_test_secret_0001";
/// Slack's signing secret (`SLACK_SECRET`; Slack's docs value).
pub const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
/// Twilio's auth token (`TWILIO_TOKEN`; Twilio's docs value).
pub const TWILIO_TOKEN: &str = "12345";
/// The Standard Webhooks secret (`STDWH_SECRET`; the spec's test key).
pub const STDWH_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Twilio's configured URL when the case names none (`url=`): the one of
/// Twilio's docs vector (`twilio/voice_docs_vector.json`).
pub const TWILIO_URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
/// The clock when the case names none (`now=`), unix seconds: 2024-07-25,
/// the time the corpus pins for schemes without a timestamp.
pub const DEFAULT_NOW_S: u64 = 1_721_948_600;
/// The latest `now=` taken as is (9999-12-31T23:59:59Z); a larger one is
/// reduced modulo it, so a signed timestamp always parses.
pub const MAX_NOW_S: u64 = 253_402_300_799;

// ---- the case format --------------------------------------------------------

/// One fuzz input, read from bytes by [`Case::parse`] (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Case {
    /// The control line, without its line end.
    pub control: Vec<u8>,
    /// The headers in order, as `(name, value)` bytes.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body, exactly as given.
    pub body: Vec<u8>,
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

impl Case {
    /// Reads any bytes as a case; never fails.
    pub fn parse(data: &[u8]) -> Case {
        let mut case = Case::default();
        let Some(nl) = data.iter().position(|&b| b == b'\n') else {
            case.control = strip_cr(data).to_vec();
            return case;
        };
        case.control = strip_cr(&data[..nl]).to_vec();
        let mut rest = &data[nl + 1..];
        loop {
            let (line, after, ended) = match rest.iter().position(|&b| b == b'\n') {
                Some(nl) => (strip_cr(&rest[..nl]), &rest[nl + 1..], false),
                None => (strip_cr(rest), &rest[rest.len()..], true),
            };
            if line.is_empty() {
                if !ended {
                    case.body = after.to_vec();
                }
                return case;
            }
            let (name, value) = match line.iter().position(|&b| b == b':') {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &line[line.len()..]),
            };
            case.headers.push((name.to_vec(), value.to_vec()));
            if ended {
                return case;
            }
            rest = after;
        }
    }

    /// The bytes [`Case::parse`] reads back as this case (module docs: when
    /// the parts hold no line ends).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.control.len()
                + self.body.len()
                + 2
                + self
                    .headers
                    .iter()
                    .map(|(n, v)| n.len() + v.len() + 3)
                    .sum::<usize>(),
        );
        out.extend_from_slice(&self.control);
        out.push(b'\n');
        for (name, value) in &self.headers {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.push(b'\n');
        }
        out.push(b'\n');
        out.extend_from_slice(&self.body);
        out
    }

    /// A case from a request's parts: the control line `METHOD PATH` and
    /// `extra` words (`now=...`), the headers and the body. Line ends in a
    /// header are replaced by spaces (a received header cannot hold them).
    pub fn from_request(
        method: &str,
        path: &str,
        extra: &[&str],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Case {
        let mut control = format!("{method} {path}");
        for w in extra {
            control.push(' ');
            control.push_str(w);
        }
        let clean = |s: &str| s.replace(['\r', '\n'], " ").into_bytes();
        Case {
            control: control.into_bytes(),
            headers: headers.iter().map(|(n, v)| (clean(n), clean(v))).collect(),
            body: body.to_vec(),
        }
    }

    /// This case with `control` as its control line.
    pub fn with_control(mut self, control: &str) -> Case {
        self.control = control.as_bytes().to_vec();
        self
    }

    /// The header list as the edge takes it.
    pub fn header_list(&self) -> Vec<Header<'_>> {
        self.headers
            .iter()
            .map(|(n, v)| (n.as_slice(), v.as_slice()))
            .collect()
    }

    /// The control line's words.
    pub fn words(&self) -> Vec<&[u8]> {
        self.control
            .split(u8::is_ascii_whitespace)
            .filter(|w| !w.is_empty())
            .collect()
    }

    /// Whether the control line holds the word `flag`.
    pub fn flag(&self, flag: &str) -> bool {
        self.words().contains(&flag.as_bytes())
    }

    /// The values of the control words `key=...`, in order.
    pub fn values(&self, key: &str) -> Vec<&[u8]> {
        self.words()
            .into_iter()
            .filter_map(|w| w.strip_prefix(key.as_bytes())?.strip_prefix(b"="))
            .collect()
    }

    /// The clock of the case in unix seconds: `now=S` (decimal digits; a
    /// value past [`MAX_NOW_S`] is taken modulo it plus one), else
    /// [`DEFAULT_NOW_S`].
    pub fn now_s(&self) -> u64 {
        self.values("now")
            .first()
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
            .map(|s| {
                if s > MAX_NOW_S {
                    s % (MAX_NOW_S + 1)
                } else {
                    s
                }
            })
            .unwrap_or(DEFAULT_NOW_S)
    }

    /// Puts a header first (the edge reads the first value of a name).
    fn put_first(&mut self, name: &str, value: Vec<u8>) {
        self.headers.insert(0, (name.as_bytes().to_vec(), value));
    }
}

// ---- verifiers --------------------------------------------------------------

/// A verification scheme with the corpus test secrets: one fuzz target each
/// (`verify_<name>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `X-Hub-Signature-256`.
    GitHub,
    /// `Stripe-Signature`, two secrets (rotation).
    Stripe,
    /// `X-Shopify-Hmac-Sha256`.
    Shopify,
    /// `X-Slack-Signature` and `X-Slack-Request-Timestamp`.
    Slack,
    /// `webhook-*` / `svix-*`.
    StandardWebhooks,
    /// `X-Twilio-Signature` over the URL and the sorted form parameters.
    Twilio,
    /// The generic HMAC header, set up as GitHub's legacy
    /// `X-Hub-Signature: sha1=<hex HMAC-SHA1>` (the GitHub corpus files
    /// carry it, so they verify under it too).
    Hmac,
}

impl Scheme {
    /// Every scheme.
    pub const ALL: [Scheme; 7] = [
        Scheme::GitHub,
        Scheme::Stripe,
        Scheme::Shopify,
        Scheme::Slack,
        Scheme::StandardWebhooks,
        Scheme::Twilio,
        Scheme::Hmac,
    ];

    /// The scheme's name in target names (`verify_github`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Scheme::GitHub => "github",
            Scheme::Stripe => "stripe",
            Scheme::Shopify => "shopify",
            Scheme::Slack => "slack",
            Scheme::StandardWebhooks => "standard_webhooks",
            Scheme::Twilio => "twilio",
            Scheme::Hmac => "hmac",
        }
    }

    /// Whether the scheme signs a timestamp (and so checks its freshness).
    pub fn timestamped(self) -> bool {
        matches!(
            self,
            Scheme::Stripe | Scheme::Slack | Scheme::StandardWebhooks
        )
    }

    fn secrets(self) -> Vec<Secret> {
        let s = |v: &str| Secret::new(v);
        match self {
            Scheme::GitHub | Scheme::Hmac => vec![s(GITHUB_SECRET)],
            Scheme::Stripe => vec![s(STRIPE_SECRET), s(STRIPE_SECRET_OLD)],
            Scheme::Shopify => vec![s(SHOPIFY_SECRET)],
            Scheme::Slack => vec![s(SLACK_SECRET)],
            Scheme::StandardWebhooks => {
                vec![
                    Secret::standard_webhooks(STDWH_SECRET)
                        .expect("the corpus secret is whsec_ + base64"),
                ]
            }
            Scheme::Twilio => vec![s(TWILIO_TOKEN)],
        }
    }

    /// The verifier with the corpus test secrets; `twilio_url` is Twilio's
    /// configured URL (the other schemes ignore it).
    pub fn verifier(self, twilio_url: &str) -> Verifier {
        let secrets = self.secrets();
        let tolerance_ms = DEFAULT_TOLERANCE_MS;
        match self {
            Scheme::GitHub => Verifier::GitHub { secrets },
            Scheme::Stripe => Verifier::Stripe {
                secrets,
                tolerance_ms,
            },
            Scheme::Shopify => Verifier::Shopify { secrets },
            Scheme::Slack => Verifier::Slack {
                secrets,
                tolerance_ms,
            },
            Scheme::StandardWebhooks => Verifier::StandardWebhooks {
                keys: secrets,
                tolerance_ms,
            },
            Scheme::Twilio => Verifier::Twilio {
                tokens: secrets,
                url: twilio_url.to_owned(),
            },
            Scheme::Hmac => Verifier::Hmac(HmacHeader {
                header: "X-Hub-Signature".into(),
                algorithm: HmacAlgorithm::Sha1,
                encoding: SignatureEncoding::Hex,
                prefix: "sha1=".into(),
                secrets,
            }),
        }
    }

    /// Signs `case` as the provider would with its first secret at unix
    /// second `ts`: the signature headers (and the timestamp and id headers
    /// the scheme signs) are put first. A Standard Webhooks id is the case's
    /// first non-empty `webhook-id` (else `svix-id`, else `msg_fuzz`).
    pub fn sign(self, case: &mut Case, ts: u64, twilio_url: &str) {
        let secret = self.secrets().remove(0);
        let body = case.body.clone();
        match self {
            Scheme::GitHub => {
                case.put_first("X-Hub-Signature-256", sign::github(&secret, &body).into());
            }
            Scheme::Hmac => {
                case.put_first("X-Hub-Signature", sign::github_sha1(&secret, &body).into());
            }
            Scheme::Shopify => {
                case.put_first(
                    "X-Shopify-Hmac-Sha256",
                    sign::shopify(&secret, &body).into(),
                );
            }
            Scheme::Stripe => {
                case.put_first("Stripe-Signature", sign::stripe(&secret, ts, &body).into());
            }
            Scheme::Slack => {
                case.put_first("X-Slack-Signature", sign::slack(&secret, ts, &body).into());
                case.put_first("X-Slack-Request-Timestamp", ts.to_string().into());
            }
            Scheme::StandardWebhooks => {
                let id = ["webhook-id", "svix-id"]
                    .iter()
                    .find_map(|n| {
                        case.headers
                            .iter()
                            .find(|(h, v)| h.eq_ignore_ascii_case(n.as_bytes()) && !v.is_empty())
                            .map(|(_, v)| v.clone())
                    })
                    .unwrap_or_else(|| b"msg_fuzz".to_vec());
                let signature = sign::standard_webhooks(&secret, &id, ts, &body);
                case.put_first("webhook-signature", signature.into());
                case.put_first("webhook-timestamp", ts.to_string().into());
                case.put_first("webhook-id", id);
            }
            Scheme::Twilio => {
                let signature = sign::twilio(&secret, twilio_url, &body);
                case.put_first("X-Twilio-Signature", signature.into());
            }
        }
    }
}

/// Every secret a scheme may print by mistake, as text.
/// (Twilio's `12345` is too short to tell apart from a number in a message.)
const SECRET_TEXTS: [&str; 7] = [
    GITHUB_SECRET,
    STRIPE_SECRET,
    STRIPE_SECRET_OLD,
    SHOPIFY_SECRET,
    SLACK_SECRET,
    STDWH_SECRET,
    "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
];

/// The verifier target of `scheme`: [`Verifier::verify`] on the case, and
/// - it never panics and gives the same verdict twice;
/// - a verdict `Ok` names a secret of the list (and a timestamp exactly for
///   the timestamped schemes), and the same headers over the body with one
///   byte more do not verify (the signature covers every byte);
/// - a case with `sign` verifies (with the first secret), unless `tamper`
///   ([`VerifyError::BadSignature`]) or `stale` on a timestamped scheme
///   ([`VerifyError::StaleTimestamp`]);
/// - no error text shows a secret.
///
/// Returns the verdict (the bounded run counts them).
///
/// # Panics
/// When a promise above is broken (that is the finding).
pub fn verify(scheme: Scheme, data: &[u8]) -> Result<Verified, VerifyError> {
    let mut case = Case::parse(data);
    let url = case
        .values("url")
        .first()
        .map(|u| String::from_utf8_lossy(u).into_owned())
        .unwrap_or_else(|| TWILIO_URL.to_owned());
    let verifier = scheme.verifier(&url);
    let now_s = case.now_s();
    let (sign, tamper, stale) = (case.flag("sign"), case.flag("tamper"), case.flag("stale"));
    if sign {
        scheme.sign(&mut case, now_s, &url);
        if tamper {
            case.body.push(b'X');
        }
    }
    let skew_s = if sign && stale {
        DEFAULT_TOLERANCE_MS / 1000 + 1
    } else {
        0
    };
    let now_ms = (now_s + skew_s).saturating_mul(1000);
    let headers = case.header_list();
    let got = verifier.verify(&headers, &case.body, now_ms);
    assert_eq!(
        got,
        verifier.verify(&headers, &case.body, now_ms),
        "{scheme:?}: the verdict changed"
    );
    match &got {
        Ok(Verified {
            secret_ix,
            timestamp_s,
        }) => {
            let n = scheme.secrets().len();
            assert!(
                secret_ix.is_some_and(|i| i < n),
                "{scheme:?}: verified by secret {secret_ix:?} of {n}"
            );
            assert_eq!(
                timestamp_s.is_some(),
                scheme.timestamped(),
                "{scheme:?}: timestamp {timestamp_s:?}"
            );
            let mut longer = case.body.clone();
            longer.push(b'X');
            assert_eq!(
                verifier.verify(&headers, &longer, now_ms),
                Err(VerifyError::BadSignature),
                "{scheme:?}: a body one byte longer verifies too"
            );
        }
        Err(e) => {
            let text = e.to_string();
            assert!(!text.is_empty());
            for s in SECRET_TEXTS {
                assert!(
                    !text.contains(s),
                    "{scheme:?}: the error shows a secret: {text}"
                );
            }
        }
    }
    if sign {
        match (tamper, stale && scheme.timestamped()) {
            (true, _) => assert_eq!(
                got,
                Err(VerifyError::BadSignature),
                "{scheme:?}: a tampered body"
            ),
            (false, true) => assert!(
                matches!(got, Err(VerifyError::StaleTimestamp { skew_s: s, .. }) if s == (skew_s as i64)),
                "{scheme:?}: a stale signature: {got:?}"
            ),
            (false, false) => assert_eq!(
                got.as_ref().map(|v| v.secret_ix),
                Ok(Some(0)),
                "{scheme:?}: a case signed with the first secret"
            ),
        }
    }
    got
}

// ---- key resolvers ----------------------------------------------------------

/// Where the key specs of a [`key`] target read from: one target each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyFrom {
    /// `{json: dot.path}` specs (`key_json`).
    Json,
    /// `{header: NAME}` specs (`key_header`).
    Header,
}

/// JSON paths every `key_json` case is resolved with (the corpus's ordering
/// and dedupe keys), besides its `json=` words.
pub const JSON_PATHS: [&str; 9] = [
    "id",
    "type",
    "data.object.customer",
    "data.object.id",
    "repository.full_name",
    "ref",
    "event.channel",
    "challenge",
    "a.b.c.d.e.f.g.h",
];

/// Header names every `key_header` case is resolved with, besides its
/// `header=` words.
pub const HEADER_NAMES: [&str; 6] = [
    "x-github-delivery",
    "X-Entity-Id",
    "webhook-id",
    "Stripe-Signature",
    "x-shopify-product-id",
    "content-type",
];

/// `key` as the lanes keep it (ADR 0004 section 2), recomputed here: empty is
/// none, over `max` bytes it is `sha256:` and 64 lower-case hex digits.
fn expected_key(raw: &[u8], max: usize) -> Option<Vec<u8>> {
    if raw.is_empty() {
        return None;
    }
    if raw.len() <= max {
        return Some(raw.to_vec());
    }
    Some(format!("sha256:{}", hex::encode(&Sha256::digest(raw))).into_bytes())
}

/// The value at `path`, decoded separately from [`ParsedBody`] (the oracle).
fn json_at<'v>(
    root: Option<&'v serde_json::Value>,
    path: &[String],
) -> Option<&'v serde_json::Value> {
    let mut v = root?;
    for seg in path {
        v = v.as_object()?.get(seg)?;
    }
    Some(v)
}

/// The key resolver target: every spec of the case (its `json=` or
/// `header=` words and [`JSON_PATHS`] / [`HEADER_NAMES`]) resolved by the
/// dedupe key, the ordering key and the sink filters over one shared
/// [`ParsedBody`], and
/// - [`KeySpec::json`] refuses a path exactly when a segment is empty;
/// - each result equals the one recomputed here from a separate JSON decode
///   (or a separate header lookup): the ordering key normalised as the lanes
///   do (at most 128 bytes), the dedupe key hashed past 200 bytes;
/// - a filter `equals`/`prefix`/`one_of` on the resolved value matches, and
///   `exists` agrees with the lookup;
/// - Slack's `url_verification` challenge, when there is one, is echoed as
///   `{"challenge": ...}` exactly;
/// - the body is decoded at most once, and only for a `{json}` spec.
///
/// Returns how many specs resolved an ordering key (the bounded run counts
/// them).
///
/// # Panics
/// When a promise above is broken (that is the finding).
pub fn key(from: KeyFrom, data: &[u8]) -> usize {
    let case = Case::parse(data);
    let headers = case.header_list();
    let parsed = ParsedBody::new(&case.body);
    let mut specs = Vec::new();
    match from {
        KeyFrom::Json => {
            for p in case.values("json") {
                let path = String::from_utf8_lossy(p);
                let spec = KeySpec::json(&path);
                assert_eq!(
                    spec.is_err(),
                    path.split('.').any(str::is_empty),
                    "KeySpec::json({path:?}): {spec:?}"
                );
                specs.extend(spec);
            }
            specs.extend(
                JSON_PATHS
                    .iter()
                    .map(|p| KeySpec::json(p).expect("a valid path")),
            );
        }
        KeyFrom::Header => {
            for n in case.values("header") {
                let name = String::from_utf8_lossy(n);
                let spec = KeySpec::header(&name);
                assert_eq!(spec.is_err(), name.is_empty());
                specs.extend(spec);
            }
            specs.extend(
                HEADER_NAMES
                    .iter()
                    .map(|n| KeySpec::header(n).expect("a valid name")),
            );
        }
    }
    let mut resolved = 0;
    let decoded: Option<serde_json::Value> = if case.body.len() <= JSON_KEY_MAX_BYTES {
        serde_json::from_slice(&case.body).ok()
    } else {
        None
    };
    for spec in &specs {
        let (raw, present): (Option<&[u8]>, bool) = match spec {
            KeySpec::Header(name) => {
                let v = case
                    .headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
                    .map(|(_, v)| v.as_slice());
                (v, v.is_some())
            }
            KeySpec::Json(path) => {
                let v = json_at(decoded.as_ref(), path);
                (
                    v.and_then(|v| v.as_str()).map(str::as_bytes),
                    v.is_some_and(|v| !v.is_null()),
                )
            }
        };
        let ordering = ordering::ordering_key(spec, &headers, &parsed);
        resolved += usize::from(ordering.is_some());
        assert_eq!(
            ordering,
            raw.and_then(|r| expected_key(r, ordering::ORDERING_KEY_MAX_BYTES)),
            "ordering key of {spec:?}"
        );
        assert!(
            ordering
                .as_ref()
                .is_none_or(|k| !k.is_empty() && k.len() <= ordering::ORDERING_KEY_MAX_BYTES)
        );
        let dk = dedupe::dedupe_key(spec, &headers, &parsed);
        assert_eq!(
            dk,
            raw.and_then(|r| expected_key(r, dedupe::DEDUPE_KEY_MAX_BYTES)),
            "dedupe key of {spec:?}"
        );
        let cond = |test| filter::Condition {
            on: spec.clone(),
            test,
        };
        let exists = cond(filter::Test::Exists(true)).matches(&headers, &parsed);
        assert_eq!(exists, present, "exists: true of {spec:?}");
        assert_eq!(
            cond(filter::Test::Exists(false)).matches(&headers, &parsed),
            !present
        );
        if let Some(raw) = raw {
            assert!(
                cond(filter::Test::Equals(raw.to_vec())).matches(&headers, &parsed),
                "equals of {spec:?}"
            );
            assert!(
                cond(filter::Test::Prefix(raw[..raw.len() / 2].to_vec()))
                    .matches(&headers, &parsed)
            );
            assert!(
                cond(filter::Test::OneOf(vec![b"\xff".to_vec(), raw.to_vec()]))
                    .matches(&headers, &parsed)
            );
            let mut other = raw.to_vec();
            other.push(0);
            assert!(
                !cond(filter::Test::Equals(other)).matches(&headers, &parsed),
                "equals of a longer value, {spec:?}"
            );
        } else {
            assert!(
                !cond(filter::Test::Prefix(Vec::new())).matches(&headers, &parsed),
                "prefix of no value, {spec:?}"
            );
        }
    }
    // One lazy decode, shared: a `{header}` spec never decodes the body.
    assert_eq!(
        parsed.is_decoded(),
        from == KeyFrom::Json,
        "decoded for {from:?}"
    );
    let challenge = slack::url_verification_challenge(&parsed);
    assert!(parsed.is_decoded(), "the Slack check reads the body");
    let expected = match json_at(decoded.as_ref(), &["type".into()]).and_then(|t| t.as_str()) {
        Some("url_verification") => {
            json_at(decoded.as_ref(), &["challenge".into()]).and_then(|c| c.as_str())
        }
        _ => None,
    };
    assert_eq!(challenge, expected, "the Slack challenge");
    if let Some(c) = challenge {
        let answer: serde_json::Value = serde_json::from_slice(&slack::challenge_response(c))
            .expect("the challenge answer is JSON");
        assert_eq!(answer, serde_json::json!({ "challenge": c }));
    }
    resolved
}
