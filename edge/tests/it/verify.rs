//! Signature verification against the corpus.

use std::collections::BTreeMap;

use ankusa_edge::{
    DEFAULT_TOLERANCE_MS, HmacAlgorithm, HmacHeader, Secret, SecretError, SignatureEncoding,
    Verified, Verifier, VerifyError,
};

use crate::corpus::{self, Hook, secret};

fn flip(body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    let i = b.len() / 2;
    b[i] ^= 0x01;
    b
}

fn with_header(hook: &Hook, name: &str, value: &str) -> Vec<(String, String)> {
    hook.headers
        .iter()
        .map(|(n, v)| {
            if n.eq_ignore_ascii_case(name) {
                (n.clone(), value.to_owned())
            } else {
                (n.clone(), v.clone())
            }
        })
        .collect()
}

fn as_headers(h: &[(String, String)]) -> Vec<(&[u8], &[u8])> {
    h.iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect()
}

#[test]
fn every_corpus_file_verifies_with_its_providers_secret() {
    let mut verified: BTreeMap<String, usize> = BTreeMap::new();
    let mut unsigned = Vec::new();
    for hook in corpus::all() {
        let Some(v) = hook.verifier() else {
            unsigned.push(hook.file.clone());
            continue;
        };
        let got = v.verify(&hook.headers(), &hook.body, hook.now_ms());
        let ok = got.unwrap_or_else(|e| panic!("{}: {e}", hook.file));
        assert_eq!(ok.secret_ix, Some(0), "{}", hook.file);
        *verified.entry(hook.provider.clone()).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = [
        ("github", 27),
        ("shopify", 3),
        ("slack", 4),
        ("standard-webhooks", 3),
        ("stripe", 11),
        ("twilio", 2),
    ]
    .into_iter()
    .map(|(p, n)| (p.to_owned(), n))
    .collect();
    assert_eq!(verified, expected);
    assert_eq!(
        unsigned,
        [
            "salesforce/opportunity_outbound_message.json",
            "salesforce/opportunity_outbound_message_batch2.json"
        ]
    );
}

#[test]
fn official_vectors_carry_the_expected_signature_and_verify() {
    for (file, header) in [
        (
            "github/docs_signature_test_vector.json",
            "X-Hub-Signature-256",
        ),
        ("slack/slash_command_docs_vector.json", "X-Slack-Signature"),
        ("twilio/voice_docs_vector.json", "X-Twilio-Signature"),
        (
            "standard-webhooks/spec_test_vector.json",
            "webhook-signature",
        ),
    ] {
        let hook = corpus::hook(file);
        assert_eq!(
            Some(hook.header(header)),
            hook.entry["signing"]["expected"].as_str(),
            "{file}"
        );
        let v = hook.verifier().expect("signed");
        assert!(
            v.verify(&hook.headers(), &hook.body, hook.now_ms()).is_ok(),
            "{file}"
        );
    }
    // GitHub's docs vector: "Hello, World!" with "It's a Secret to Everybody".
    let hook = corpus::hook("github/docs_signature_test_vector.json");
    assert_eq!(hook.body, b"Hello, World!");
}

#[test]
fn a_flipped_body_byte_is_a_bad_signature_for_every_signed_file() {
    let mut n = 0;
    for hook in corpus::all() {
        let Some(v) = hook.verifier() else { continue };
        let body = flip(&hook.body);
        assert_eq!(
            v.verify(&hook.headers(), &body, hook.now_ms()),
            Err(VerifyError::BadSignature),
            "{}",
            hook.file
        );
        n += 1;
    }
    assert_eq!(n, 50);
}

#[test]
fn a_wrong_secret_is_a_bad_signature_for_every_signed_file() {
    let mut n = 0;
    for hook in corpus::all() {
        let wrong = if hook.scheme().starts_with("standard-webhooks") {
            // Another valid whsec_ key (base64 of 24 bytes).
            "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned()
        } else {
            "not-the-secret".to_owned()
        };
        let Some(v) = hook.verifier_with(&wrong) else {
            continue;
        };
        assert_eq!(
            v.verify(&hook.headers(), &hook.body, hook.now_ms()),
            Err(VerifyError::BadSignature),
            "{}",
            hook.file
        );
        n += 1;
    }
    assert_eq!(n, 50);
}

#[test]
fn stale_timestamps_fail_in_both_directions_and_the_boundary_passes() {
    let files = [
        "stripe/customer_created.json",
        "stripe/invoice_paid_provider_retry.json",
        "slack/event_callback_app_mention.json",
        "slack/slash_command_docs_vector.json",
        "standard-webhooks/spec_test_vector.json",
        "standard-webhooks/contact_created_multi_signature.json",
        "standard-webhooks/contact_created_full_svix_headers.json",
    ];
    for file in files {
        let hook = corpus::hook(file);
        let v = hook.verifier().expect("signed");
        let at = hook.now_ms();
        let ts = i64::try_from(at / 1000).expect("fits");
        let verify = |now_ms: u64| v.verify(&hook.headers(), &hook.body, now_ms);
        assert_eq!(
            verify(at + 301_000),
            Err(VerifyError::StaleTimestamp {
                skew_s: 301,
                tolerance_ms: 300_000
            }),
            "{file}: old"
        );
        assert_eq!(
            verify(at - 301_000),
            Err(VerifyError::StaleTimestamp {
                skew_s: -301,
                tolerance_ms: 300_000
            }),
            "{file}: future"
        );
        for now in [at + 300_999, at - 300_000, at] {
            assert_eq!(
                verify(now),
                Ok(Verified {
                    secret_ix: Some(0),
                    timestamp_s: Some(ts)
                }),
                "{file}: within tolerance at {now}"
            );
        }
        // Stale and tampered: the signature is checked first.
        assert_eq!(
            v.verify(&hook.headers(), &flip(&hook.body), at + 301_000),
            Err(VerifyError::BadSignature),
            "{file}"
        );
    }
    // A wall clock of today against a 2024 signature.
    let hook = corpus::hook("stripe/invoice_paid.json");
    let v = hook.verifier().expect("signed");
    assert!(matches!(
        v.verify(&hook.headers(), &hook.body, 1_795_000_000_000),
        Err(VerifyError::StaleTimestamp { skew_s, tolerance_ms: 300_000 }) if skew_s == 1_795_000_000 - 1_721_948_651
    ));
    // A custom tolerance.
    let v = Verifier::Stripe {
        secrets: vec![Secret::new(secret("STRIPE_SECRET"))],
        tolerance_ms: 10_000,
    };
    assert!(
        v.verify(&hook.headers(), &hook.body, hook.now_ms() + 10_000)
            .is_ok()
    );
    assert_eq!(
        v.verify(&hook.headers(), &hook.body, hook.now_ms() + 11_000),
        Err(VerifyError::StaleTimestamp {
            skew_s: 11,
            tolerance_ms: 10_000
        })
    );
}

#[test]
fn stripe_rotation_any_v1_and_any_secret_may_match_and_v0_is_ignored() {
    let hook = corpus::hook("stripe/invoice_finalized.json");
    let sig = hook.header("Stripe-Signature");
    assert_eq!(sig.matches("v1=").count(), 2, "{sig}");
    let stripe = |secrets: &[&str]| Verifier::Stripe {
        secrets: secrets.iter().map(|s| Secret::new(*s)).collect(),
        tolerance_ms: DEFAULT_TOLERANCE_MS,
    };
    let new = secret("STRIPE_SECRET");
    let old = secret("STRIPE_SECRET_OLD");
    let at = hook.now_ms();
    for (secrets, ix) in [
        (vec![new.as_str()], 0),
        (vec![old.as_str()], 0),
        (vec!["wrong", old.as_str()], 1),
        (vec!["wrong", "wrong2", new.as_str()], 2),
    ] {
        assert_eq!(
            stripe(&secrets)
                .verify(&hook.headers(), &hook.body, at)
                .map(|v| v.secret_ix),
            Ok(Some(ix))
        );
    }
    assert_eq!(
        stripe(&["wrong", "wrong2"]).verify(&hook.headers(), &hook.body, at),
        Err(VerifyError::BadSignature)
    );

    // invoice_created carries a v0 signed with STRIPE_V0_SECRET: never accepted.
    let hook = corpus::hook("stripe/invoice_created.json");
    assert!(hook.header("Stripe-Signature").contains("v0="));
    assert_eq!(
        stripe(&[&secret("STRIPE_V0_SECRET")]).verify(&hook.headers(), &hook.body, hook.now_ms()),
        Err(VerifyError::BadSignature)
    );
    assert!(
        stripe(&[&new])
            .verify(&hook.headers(), &hook.body, hook.now_ms())
            .is_ok()
    );

    // The v1 entries in the other order, a junk v1 among them, spaces after commas.
    let hook = corpus::hook("stripe/invoice_finalized.json");
    let parts: Vec<&str> = sig.split(',').collect();
    let reordered = format!("{}, v1=zz, {}, {}", parts[0], parts[2], parts[1]);
    let h = with_header(&hook, "Stripe-Signature", &reordered);
    assert_eq!(
        stripe(&[&old])
            .verify(&as_headers(&h), &hook.body, at)
            .map(|v| v.secret_ix),
        Ok(Some(0))
    );
}

#[test]
fn stripe_malformed_headers() {
    let hook = corpus::hook("stripe/customer_created.json");
    let v = hook.verifier().expect("signed");
    let at = hook.now_ms();
    let sig = hook.header("Stripe-Signature").to_owned();
    let v1 = sig.split(',').nth(1).expect("v1").to_owned();
    for (value, reason) in [
        (v1.clone(), "no t="),
        ("t=abc,".to_owned() + &v1, "t is not unix seconds"),
        ("t=-1721948601,".to_owned() + &v1, "t is not unix seconds"),
        ("t=1721948601".to_owned(), "no v1 signature"),
        ("t=1721948601,v1=xyz".to_owned(), "no v1 signature"),
    ] {
        let h = with_header(&hook, "Stripe-Signature", &value);
        assert_eq!(
            v.verify(&as_headers(&h), &hook.body, at),
            Err(VerifyError::MalformedHeader {
                header: "Stripe-Signature".into(),
                reason
            }),
            "{value}"
        );
    }
    let h = with_header(&hook, "Stripe-Signature", "");
    assert!(matches!(
        v.verify(&as_headers(&h), &hook.body, at),
        Err(VerifyError::MalformedHeader {
            reason: "empty",
            ..
        })
    ));
    let none: Vec<(&[u8], &[u8])> = hook
        .headers()
        .into_iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case(b"stripe-signature"))
        .collect();
    assert_eq!(
        v.verify(&none, &hook.body, at),
        Err(VerifyError::MissingHeader {
            header: "Stripe-Signature".into()
        })
    );
}

#[test]
fn standard_webhooks_several_signatures_and_svix_names() {
    let hook = corpus::hook("standard-webhooks/contact_created_multi_signature.json");
    let sig = hook.header("webhook-signature").to_owned();
    let entries: Vec<&str> = sig.split(' ').collect();
    assert_eq!(entries.len(), 3);
    assert!(entries[2].starts_with("v1a,"));
    let v = hook.verifier().expect("signed");
    let at = hook.now_ms();
    let ok = Ok(Verified {
        secret_ix: Some(0),
        timestamp_s: Some(1_674_087_231),
    });
    assert_eq!(v.verify(&hook.headers(), &hook.body, at), ok);
    // Only the matching entry; the entries in reverse order.
    for value in [
        entries[1].to_owned(),
        format!("{} {} {}", entries[2], entries[1], entries[0]),
    ] {
        let h = with_header(&hook, "webhook-signature", &value);
        assert_eq!(v.verify(&as_headers(&h), &hook.body, at), ok, "{value}");
    }
    // Only the stale v1 and the v1a: no match.
    let h = with_header(
        &hook,
        "webhook-signature",
        &format!("{} {}", entries[0], entries[2]),
    );
    assert_eq!(
        v.verify(&as_headers(&h), &hook.body, at),
        Err(VerifyError::BadSignature)
    );
    // Only the v1a: nothing a symmetric verifier can check.
    let h = with_header(&hook, "webhook-signature", entries[2]);
    assert_eq!(
        v.verify(&as_headers(&h), &hook.body, at),
        Err(VerifyError::MalformedHeader {
            header: "webhook-signature".into(),
            reason: "no v1 signature"
        })
    );
    // Rotation: the right key second.
    let v2 = Verifier::StandardWebhooks {
        keys: vec![
            Secret::standard_webhooks("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").expect("valid"),
            Secret::standard_webhooks(&secret("STDWH_SECRET")).expect("valid"),
        ],
        tolerance_ms: DEFAULT_TOLERANCE_MS,
    };
    assert_eq!(
        v2.verify(&hook.headers(), &hook.body, at)
            .map(|v| v.secret_ix),
        Ok(Some(1))
    );

    // svix-* names, and the id is part of the signed content.
    let svix = corpus::hook("standard-webhooks/contact_created_full_svix_headers.json");
    assert!(svix.headers.iter().all(|(n, _)| !n.starts_with("webhook-")));
    assert!(v.verify(&svix.headers(), &svix.body, svix.now_ms()).is_ok());
    let h = with_header(&svix, "svix-id", "msg_other");
    assert_eq!(
        v.verify(&as_headers(&h), &svix.body, svix.now_ms()),
        Err(VerifyError::BadSignature)
    );
    let no_id: Vec<(&[u8], &[u8])> = svix
        .headers()
        .into_iter()
        .filter(|(n, _)| *n != b"svix-id")
        .collect();
    assert_eq!(
        v.verify(&no_id, &svix.body, svix.now_ms()),
        Err(VerifyError::MissingHeader {
            header: "webhook-id".into()
        })
    );

    // Secrets: whsec_ prefix optional, base64 required.
    assert_eq!(
        Secret::standard_webhooks("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        Secret::standard_webhooks("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    );
    assert_eq!(
        Secret::standard_webhooks("whsec_not base64!"),
        Err(SecretError::NotBase64)
    );
    assert_eq!(Secret::standard_webhooks("whsec_"), Err(SecretError::Empty));
    // The secret is never printed.
    let s = Secret::new("It's a Secret to Everybody");
    assert_eq!(format!("{s:?}"), "Secret(26 bytes)");
}

#[test]
fn header_names_match_case_insensitively() {
    // Lower-case names as over HTTP/2.
    let hook = corpus::hook("github/pull_request_synchronize_lowercase_headers.json");
    assert!(hook.headers.iter().all(|(n, _)| n == &n.to_lowercase()));
    assert!(
        hook.verifier()
            .expect("signed")
            .verify(&hook.headers(), &hook.body, 0)
            .is_ok()
    );
    // Upper-case and lower-case every name of every signed file.
    for hook in corpus::all() {
        let Some(v) = hook.verifier() else { continue };
        for case in [str::to_uppercase, str::to_lowercase] {
            let h: Vec<(String, String)> = hook
                .headers
                .iter()
                .map(|(n, v)| (case(n), v.clone()))
                .collect();
            assert!(
                v.verify(&as_headers(&h), &hook.body, hook.now_ms()).is_ok(),
                "{}",
                hook.file
            );
        }
    }
}

#[test]
fn a_duplicate_signature_header_counts_by_its_first_value() {
    let hook = corpus::hook("github/push_new_branch.json");
    let v = hook.verifier().expect("signed");
    let bogus = ("X-Hub-Signature-256".as_bytes(), "sha256=00".as_bytes());
    let mut after = hook.headers();
    after.push(bogus);
    assert!(v.verify(&after, &hook.body, 0).is_ok());
    let mut before = vec![bogus];
    before.extend(hook.headers());
    assert_eq!(
        v.verify(&before, &hook.body, 0),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn github_shopify_and_slack_malformed_and_missing() {
    let gh = corpus::hook("github/ping.json");
    let v = gh.verifier().expect("signed");
    let h = with_header(
        &gh,
        "X-Hub-Signature-256",
        "efb707933585b1b7cd22191832d8e7aadb1ff20972eb966e571b0eebd3264998",
    );
    assert_eq!(
        v.verify(&as_headers(&h), &gh.body, 0),
        Err(VerifyError::MalformedHeader {
            header: "X-Hub-Signature-256".into(),
            reason: "missing prefix"
        })
    );
    let h = with_header(&gh, "X-Hub-Signature-256", "sha256=xyz");
    assert!(matches!(
        v.verify(&as_headers(&h), &gh.body, 0),
        Err(VerifyError::MalformedHeader {
            reason: "not hex",
            ..
        })
    ));
    // Upper-case hex is still the same tag.
    let h = with_header(
        &gh,
        "X-Hub-Signature-256",
        &gh.header("X-Hub-Signature-256")
            .to_uppercase()
            .replace("SHA256=", "sha256="),
    );
    assert!(v.verify(&as_headers(&h), &gh.body, 0).is_ok());

    let shop = corpus::hook("shopify/products_update.json");
    let v = shop.verifier().expect("signed");
    let h = with_header(&shop, "X-Shopify-Hmac-Sha256", "%%%");
    assert!(matches!(
        v.verify(&as_headers(&h), &shop.body, 0),
        Err(VerifyError::MalformedHeader {
            reason: "not base64",
            ..
        })
    ));
    // Shopify's escaped slashes are signed as sent: unescaping breaks the HMAC.
    let body = String::from_utf8(shop.body.clone()).expect("utf-8");
    assert!(body.contains(r"gid:\/\/shopify\/Product\/788032119674292922"));
    assert_eq!(
        v.verify(&shop.headers(), body.replace(r"\/", "/").as_bytes(), 0),
        Err(VerifyError::BadSignature)
    );

    let slack = corpus::hook("slack/event_callback_app_mention.json");
    let v = slack.verifier().expect("signed");
    let no_ts: Vec<(&[u8], &[u8])> = slack
        .headers()
        .into_iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case(b"X-Slack-Request-Timestamp"))
        .collect();
    assert_eq!(
        v.verify(&no_ts, &slack.body, slack.now_ms()),
        Err(VerifyError::MissingHeader {
            header: "X-Slack-Request-Timestamp".into()
        })
    );
    // The timestamp is part of the signed content.
    let ts: u64 = slack
        .header("X-Slack-Request-Timestamp")
        .parse()
        .expect("digits");
    let h = with_header(&slack, "X-Slack-Request-Timestamp", &(ts + 1).to_string());
    assert_eq!(
        v.verify(&as_headers(&h), &slack.body, slack.now_ms()),
        Err(VerifyError::BadSignature)
    );
    let sig = slack.header("X-Slack-Signature").replace("v0=", "v1=");
    let h = with_header(&slack, "X-Slack-Signature", &sig);
    assert!(matches!(
        v.verify(&as_headers(&h), &slack.body, slack.now_ms()),
        Err(VerifyError::MalformedHeader {
            reason: "missing v0=",
            ..
        })
    ));
}

#[test]
fn twilio_signs_the_configured_url_and_the_sorted_decoded_params() {
    let hook = corpus::hook("twilio/voice_docs_vector.json");
    let v = hook.verifier().expect("signed");
    assert!(v.verify(&hook.headers(), &hook.body, 0).is_ok());
    // Another URL (the port variant included) does not verify.
    for url in [
        "https://mycompany.com/myapp.php?foo=1",
        "https://mycompany.com:443/myapp.php?foo=1&bar=2",
    ] {
        let v = Verifier::Twilio {
            tokens: vec![Secret::new(secret("TWILIO_TOKEN"))],
            url: url.to_owned(),
        };
        assert_eq!(
            v.verify(&hook.headers(), &hook.body, 0),
            Err(VerifyError::BadSignature),
            "{url}"
        );
    }
    // The parameter order in the body does not matter; their values do.
    let body = String::from_utf8(hook.body.clone()).expect("utf-8");
    let mut params: Vec<&str> = body.split('&').collect();
    params.reverse();
    assert!(
        v.verify(&hook.headers(), params.join("&").as_bytes(), 0)
            .is_ok()
    );
    // The SMS body has UTF-8, '&', '=' and '+' encoded.
    let sms = corpus::hook("twilio/sms_incoming.json");
    assert!(
        String::from_utf8_lossy(&sms.body)
            .contains("Body=Caf%C3%A9+%26+cr%C3%A8me+%3D+%F0%9F%98%80+%2B1")
    );
    let v = sms.verifier().expect("signed");
    assert!(v.verify(&sms.headers(), &sms.body, 0).is_ok());
}

#[test]
fn generic_hmac_header_on_githubs_legacy_sha1_and_shopifys_base64() {
    let legacy = |prefix: &str| {
        Verifier::Hmac(HmacHeader {
            header: "X-Hub-Signature".into(),
            algorithm: HmacAlgorithm::Sha1,
            encoding: SignatureEncoding::Hex,
            prefix: prefix.into(),
            secrets: vec![Secret::new(secret("GITHUB_SECRET"))],
        })
    };
    let mut n = 0;
    for hook in corpus::all()
        .into_iter()
        .filter(|h| h.scheme() == "github-hmac-sha256+sha1")
    {
        assert!(
            legacy("sha1=")
                .verify(&hook.headers(), &hook.body, 0)
                .is_ok(),
            "{}",
            hook.file
        );
        assert_eq!(
            legacy("sha1=").verify(&hook.headers(), &flip(&hook.body), 0),
            Err(VerifyError::BadSignature),
            "{}",
            hook.file
        );
        assert!(matches!(
            legacy("sha256=").verify(&hook.headers(), &hook.body, 0),
            Err(VerifyError::MalformedHeader {
                reason: "missing prefix",
                ..
            })
        ));
        n += 1;
    }
    assert_eq!(n, 26);

    let shop = corpus::hook("shopify/orders_create.json");
    let v = Verifier::Hmac(HmacHeader {
        header: "x-shopify-hmac-sha256".into(),
        algorithm: HmacAlgorithm::Sha256,
        encoding: SignatureEncoding::Base64,
        prefix: String::new(),
        secrets: vec![Secret::new("old"), Secret::new(secret("SHOPIFY_SECRET"))],
    });
    assert_eq!(
        v.verify(&shop.headers(), &shop.body, 0),
        Ok(Verified {
            secret_ix: Some(1),
            timestamp_s: None
        })
    );
    // Padding is optional.
    let unpadded = shop
        .header("X-Shopify-Hmac-Sha256")
        .trim_end_matches('=')
        .to_owned();
    let h = with_header(&shop, "X-Shopify-Hmac-Sha256", &unpadded);
    assert!(v.verify(&as_headers(&h), &shop.body, 0).is_ok());
    // The GitHub verifier and a generic sha256 hex header agree.
    let gh = corpus::hook("github/release_published.json");
    let generic = Verifier::Hmac(HmacHeader {
        header: "X-Hub-Signature-256".into(),
        algorithm: HmacAlgorithm::Sha256,
        encoding: SignatureEncoding::Hex,
        prefix: "sha256=".into(),
        secrets: vec![Secret::new(secret("GITHUB_SECRET"))],
    });
    assert!(generic.verify(&gh.headers(), &gh.body, 0).is_ok());
}

#[test]
fn no_verification_and_no_secrets() {
    let hook = corpus::hook("salesforce/opportunity_outbound_message.json");
    assert_eq!(
        Verifier::None.verify(&hook.headers(), &hook.body, 0),
        Ok(Verified {
            secret_ix: None,
            timestamp_s: None
        })
    );
    let gh = corpus::hook("github/ping.json");
    assert_eq!(
        Verifier::GitHub { secrets: vec![] }.verify(&gh.headers(), &gh.body, 0),
        Err(VerifyError::BadSignature)
    );
}

#[test]
fn hostile_header_values_never_panic() {
    let gh = corpus::hook("github/ping.json");
    let junk: [&[u8]; 6] = [
        b"",
        b"\xff\xfe",
        b"t=,v1=",
        b",,,,",
        b"v1, v1,",
        b"sha256=\xff",
    ];
    let verifiers = [
        corpus::hook("stripe/invoice_paid.json")
            .verifier()
            .expect("signed"),
        corpus::hook("slack/url_verification.json")
            .verifier()
            .expect("signed"),
        corpus::hook("standard-webhooks/spec_test_vector.json")
            .verifier()
            .expect("signed"),
        corpus::hook("twilio/sms_incoming.json")
            .verifier()
            .expect("signed"),
        gh.verifier().expect("signed"),
        corpus::hook("shopify/products_delete.json")
            .verifier()
            .expect("signed"),
    ];
    let names = [
        "Stripe-Signature",
        "X-Slack-Signature",
        "X-Slack-Request-Timestamp",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "X-Twilio-Signature",
        "X-Hub-Signature-256",
        "X-Shopify-Hmac-Sha256",
    ];
    for v in &verifiers {
        for value in junk {
            let headers: Vec<(&[u8], &[u8])> =
                names.iter().map(|n| (n.as_bytes(), value)).collect();
            assert!(v.verify(&headers, &gh.body, u64::MAX).is_err());
            assert!(v.verify(&headers, &gh.body, 0).is_err());
        }
    }
}

/// `algorithm: sha512` of a generic HMAC header, checked against RFC 4231's
/// test case 2 (key "Jefe"), hex with a prefix; a wrong tag is refused.
#[test]
fn generic_hmac_header_sha512_matches_rfc_4231() {
    let v = Verifier::Hmac(HmacHeader {
        header: "x-signature".into(),
        algorithm: HmacAlgorithm::Sha512,
        encoding: SignatureEncoding::Hex,
        prefix: "sha512=".into(),
        secrets: vec![Secret::new("Jefe")],
    });
    let body = b"what do ya want for nothing?";
    let tag = "sha512=164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737";
    let headers: Vec<(&[u8], &[u8])> = vec![(b"X-Signature", tag.as_bytes())];
    assert_eq!(
        v.verify(&headers, body, 0),
        Ok(Verified {
            secret_ix: Some(0),
            timestamp_s: None
        })
    );
    let wrong = tag.replace("737", "738");
    let headers: Vec<(&[u8], &[u8])> = vec![(b"X-Signature", wrong.as_bytes())];
    assert_eq!(v.verify(&headers, body, 0), Err(VerifyError::BadSignature));
}
