//! The signers of `ankusa_edge::sign` (what `ankusa send --resign` writes)
//! against the corpus: each is checked with the edge's own verifier of its
//! scheme, and against the signatures the corpus was built with (its
//! official vectors among them), never with itself.

use ankusa_edge::sign::{self, ResignError, Scheme};
use ankusa_edge::{DEFAULT_TOLERANCE_MS, HmacAlgorithm, HmacHeader, SignatureEncoding, Verifier};
use ankusa_edge::{Secret, VerifyError};

use crate::corpus::{self, Hook, secret};

/// The clock of a re-signing: 2033-05-18, years after every corpus
/// timestamp (so a signature kept from the corpus is stale at it).
const NOW_S: u64 = 2_000_000_000;

/// A secret of each scheme that is not the corpus's (for Standard Webhooks
/// `whsec_` and the base64 of 34 bytes).
fn new_secret(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::GitHub => "resign-test github secret",
        Scheme::Stripe => "whsec_resign_test_stripe",
        Scheme::Shopify => "shpss_resign_test_shopify",
        Scheme::Slack => "resign-test-slack-signing-secret",
        Scheme::StandardWebhooks => "whsec_YW5rdXNhIHJlc2lnbiB0ZXN0IGtleSwgbm90IHJlYWwhIQ==",
        Scheme::Twilio => "resign-test-twilio-token",
    }
}

/// The scheme `index.json` gives the file (`signing.scheme`), as a [`Scheme`].
fn indexed_scheme(hook: &Hook) -> Option<Scheme> {
    let s = hook.scheme();
    [
        ("github", Scheme::GitHub),
        ("stripe", Scheme::Stripe),
        ("shopify", Scheme::Shopify),
        ("slack", Scheme::Slack),
        ("standard-webhooks", Scheme::StandardWebhooks),
        ("twilio", Scheme::Twilio),
    ]
    .into_iter()
    .find(|(prefix, _)| s.starts_with(prefix))
    .map(|(_, scheme)| scheme)
}

/// Twilio's signed URL for the file (`signing.url`); empty for the others.
fn url(hook: &Hook) -> String {
    hook.entry["signing"]["url"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// GitHub's legacy header as the generic HMAC verifier checks it.
fn github_sha1(secret: &str) -> Verifier {
    Verifier::Hmac(HmacHeader {
        header: "X-Hub-Signature".into(),
        algorithm: HmacAlgorithm::Sha1,
        encoding: SignatureEncoding::Hex,
        prefix: "sha1=".into(),
        secrets: vec![Secret::new(secret)],
    })
}

fn as_headers(h: &[(String, String)]) -> Vec<(&[u8], &[u8])> {
    h.iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect()
}

fn has(h: &[(String, String)], name: &str) -> bool {
    h.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

#[test]
fn detect_finds_the_scheme_the_index_gives() {
    for hook in corpus::all() {
        assert_eq!(
            Scheme::detect(&hook.headers()),
            indexed_scheme(&hook),
            "{}",
            hook.file
        );
    }
}

/// Every signed corpus file, re-signed at [`NOW_S`] with a secret of its
/// own, verifies under the edge's verifier of its scheme with that secret
/// (timestamp [`NOW_S`], within the default tolerance), where the file as
/// stored is refused; the names and places of its headers and its body do
/// not change, and only the scheme's signature and timestamp headers do.
#[test]
fn resigned_corpus_files_verify_with_the_new_secret_now() {
    let mut resigned = 0;
    for hook in corpus::all() {
        let Some(scheme) = Scheme::detect(&hook.headers()) else {
            continue;
        };
        let text = new_secret(scheme);
        let key = scheme.secret(text).expect("a valid secret");
        let mut headers = hook.headers.clone();
        sign::resign(scheme, &mut headers, &hook.body, &key, NOW_S, &url(&hook))
            .unwrap_or_else(|e| panic!("{}: {e}", hook.file));

        let verifier = hook.verifier_with(text).expect("a signed file");
        let got = verifier.verify(&as_headers(&headers), &hook.body, NOW_S * 1000);
        let ok = got.unwrap_or_else(|e| panic!("{}: re-signed, {e}", hook.file));
        let timestamped = matches!(
            scheme,
            Scheme::Stripe | Scheme::Slack | Scheme::StandardWebhooks
        );
        assert_eq!(
            ok.timestamp_s,
            timestamped.then_some(NOW_S as i64),
            "{}",
            hook.file
        );
        assert!(
            verifier
                .verify(&hook.headers(), &hook.body, NOW_S * 1000)
                .is_err(),
            "{}: the stored signature must not verify under the new secret",
            hook.file
        );
        if scheme == Scheme::GitHub && has(&headers, "X-Hub-Signature") {
            github_sha1(text)
                .verify(&as_headers(&headers), &hook.body, NOW_S * 1000)
                .unwrap_or_else(|e| panic!("{}: X-Hub-Signature: {e}", hook.file));
        }

        let names = |h: &[(String, String)]| h.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&headers), names(&hook.headers), "{}", hook.file);
        let may_change: &[&str] = match scheme {
            Scheme::GitHub => &["X-Hub-Signature-256", "X-Hub-Signature"],
            Scheme::Stripe => &["Stripe-Signature"],
            Scheme::Shopify => &["X-Shopify-Hmac-Sha256"],
            Scheme::Slack => &["X-Slack-Signature", "X-Slack-Request-Timestamp"],
            Scheme::StandardWebhooks => &[
                "webhook-timestamp",
                "webhook-signature",
                "svix-timestamp",
                "svix-signature",
            ],
            Scheme::Twilio => &["X-Twilio-Signature"],
        };
        for ((n, new), (_, old)) in headers.iter().zip(&hook.headers) {
            if new != old {
                assert!(
                    may_change.iter().any(|m| m.eq_ignore_ascii_case(n)),
                    "{}: {n} changed",
                    hook.file
                );
            }
        }
        resigned += 1;
    }
    assert_eq!(
        resigned, 50,
        "every corpus file but the two Salesforce ones"
    );
}

/// Re-signed with the corpus's own secret at the file's own time, every
/// file gets back the signature it was built with: the stored value is the
/// re-signed one, or carries it among more entries (a Stripe `v0`, other
/// Standard Webhooks signatures). The four official vectors
/// (GitHub's, Slack's, Twilio's and the Standard Webhooks library's) are
/// among them.
#[test]
fn resigning_with_the_corpus_secret_at_the_files_time_gives_back_its_signature() {
    for hook in corpus::all() {
        let Some(scheme) = Scheme::detect(&hook.headers()) else {
            continue;
        };
        let name = hook.entry["signing"]["secret"].as_str().expect("secret");
        let key = scheme.secret(&secret(name)).expect("the corpus secret");
        let mut headers = hook.headers.clone();
        sign::resign(
            scheme,
            &mut headers,
            &hook.body,
            &key,
            hook.now_ms() / 1000,
            &url(&hook),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", hook.file));
        let entries = |v: &str| {
            v.split([' ', ','])
                .map(str::to_owned)
                .collect::<std::collections::BTreeSet<_>>()
        };
        for ((n, new), (_, old)) in headers.iter().zip(&hook.headers) {
            assert!(
                old == new || entries(new).is_subset(&entries(old)),
                "{}: {n}: stored {old:?}, re-signed {new:?}",
                hook.file
            );
        }
        if let Some(expected) = hook.entry["signing"]["expected"].as_str() {
            let header = scheme.signature_headers()[0];
            let value = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(header))
                .map(|(_, v)| v.as_str());
            assert_eq!(value, Some(expected), "{}: official vector", hook.file);
        }
    }
}

#[test]
fn a_standard_webhooks_request_without_its_id_is_refused() {
    let hook = corpus::hook("standard-webhooks/spec_test_vector.json");
    let mut headers: Vec<(String, String)> = hook
        .headers
        .iter()
        .filter(|(n, _)| n != "webhook-id")
        .cloned()
        .collect();
    let key = Scheme::StandardWebhooks
        .secret(new_secret(Scheme::StandardWebhooks))
        .expect("secret");
    let before = headers.clone();
    assert_eq!(
        sign::resign(
            Scheme::StandardWebhooks,
            &mut headers,
            &hook.body,
            &key,
            NOW_S,
            ""
        ),
        Err(ResignError::MissingHeader {
            present: "webhook-signature",
            missing: "webhook-id"
        })
    );
    assert_eq!(headers, before);
}

/// A re-signed timestamp is the one the verifier checks for freshness: at
/// [`NOW_S`] plus the tolerance it still verifies, one second later it is
/// stale.
#[test]
fn a_resigned_timestamp_is_the_one_checked_for_freshness() {
    let hook = corpus::hook("stripe/invoice_paid.json");
    let text = new_secret(Scheme::Stripe);
    let mut headers = hook.headers.clone();
    sign::resign(
        Scheme::Stripe,
        &mut headers,
        &hook.body,
        &Secret::new(text),
        NOW_S,
        "",
    )
    .expect("resign");
    let verifier = Verifier::Stripe {
        secrets: vec![Secret::new(text)],
        tolerance_ms: DEFAULT_TOLERANCE_MS,
    };
    let at = |now_ms| verifier.verify(&as_headers(&headers), &hook.body, now_ms);
    assert!(at(NOW_S * 1000 + DEFAULT_TOLERANCE_MS).is_ok());
    assert!(matches!(
        at(NOW_S * 1000 + DEFAULT_TOLERANCE_MS + 1000),
        Err(VerifyError::StaleTimestamp { .. })
    ));
}

#[test]
fn secrets_are_read_per_scheme() {
    assert!(Scheme::StandardWebhooks.secret("whsec_not*base64").is_err());
    assert!(Scheme::StandardWebhooks.secret("whsec_").is_err());
    assert!(Scheme::Stripe.secret("").is_err());
    // Stripe's key is the whole `whsec_...` text, not its decoding.
    assert_eq!(
        Scheme::Stripe.secret("whsec_abc"),
        Ok(Secret::new("whsec_abc"))
    );
}
