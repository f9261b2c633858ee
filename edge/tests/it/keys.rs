//! Dedupe and ordering keys against the corpus (ADR 0004 section 2,
//! docs/design.md section 10).

use ankusa_edge::dedupe::{DEDUPE_KEY_MAX_BYTES, dedupe_key};
use ankusa_edge::ordering::{ORDERING_KEY_MAX_BYTES, ordering_key};
use ankusa_edge::{JSON_KEY_MAX_BYTES, KeySpec, KeySpecError, ParsedBody};

use crate::corpus;

fn json(path: &str) -> KeySpec {
    KeySpec::json(path).expect("valid path")
}

fn header(name: &str) -> KeySpec {
    KeySpec::header(name).expect("valid name")
}

fn key(s: &str) -> Option<Vec<u8>> {
    Some(s.as_bytes().to_vec())
}

/// Every `ordering_key_expectations` entry of `index.json` (json paths and
/// headers, 1 MiB boundary, 128/129 bytes, multibyte, Shopify escapes,
/// non-strings, missing members, form/XML/text bodies).
#[test]
fn ordering_keys_match_every_expectation_of_the_corpus_index() {
    let mut checked = 0;
    let mut none = 0;
    for hook in corpus::all() {
        let expectations = hook.entry["ordering_key_expectations"]
            .as_object()
            .expect("expectations")
            .clone();
        let headers = hook.headers();
        let body = ParsedBody::new(&hook.body);
        for (spec, expected) in expectations {
            let spec = match spec.split_once(':') {
                Some(("json", path)) => json(path),
                Some(("header", name)) => header(name),
                _ => panic!("{}: spec {spec}", hook.file),
            };
            let expected = expected.as_str().map(|s| s.as_bytes().to_vec());
            none += usize::from(expected.is_none());
            assert_eq!(
                ordering_key(&spec, &headers, &body),
                expected,
                "{}: {spec:?}",
                hook.file
            );
            checked += 1;
        }
        // The decode never changes what is stored.
        assert_eq!(body.bytes(), hook.body.as_slice());
    }
    assert_eq!((checked, none), (223, 92));
}

#[test]
fn stripe_keys_on_real_bodies() {
    let customer = json("data.object.customer");
    let id = json("id");
    let cases = [
        (
            "stripe/customer_subscription_created.json",
            Some("cus_QXg1o8vcGmoR32"),
            "evt_1Pgc02B7WZ01zgkWcorpus0002",
        ),
        (
            "stripe/invoice_paid.json",
            Some("cus_QXg1o8vcGmoR32"),
            "evt_1Pgc05B7WZ01zgkWcorpus0005",
        ),
        // data.object is the customer: no customer member.
        (
            "stripe/customer_created.json",
            None,
            "evt_1Pgc00B7WZ01zgkWcorpus0000",
        ),
        // customer is JSON null: not a string.
        (
            "stripe/charge_succeeded_guest.json",
            None,
            "evt_1Pgc07B7WZ01zgkWcorpus0007",
        ),
        (
            "stripe/charge_dispute_created.json",
            None,
            "evt_1Pgc08B7WZ01zgkWcorpus0008",
        ),
    ];
    for (file, cus, evt) in cases {
        let hook = corpus::hook(file);
        let body = ParsedBody::new(&hook.body);
        let h = hook.headers();
        assert_eq!(
            ordering_key(&customer, &h, &body),
            cus.and_then(key),
            "{file}"
        );
        assert_eq!(dedupe_key(&id, &h, &body), key(evt), "{file}");
        assert_eq!(ordering_key(&id, &h, &body), key(evt), "{file}");
    }
    // A provider retry (later t, different body) has the same dedupe key.
    let first = corpus::hook("stripe/invoice_paid.json");
    let retry = corpus::hook("stripe/invoice_paid_provider_retry.json");
    assert_ne!(first.body, retry.body);
    assert_eq!(
        dedupe_key(&id, &first.headers(), &ParsedBody::new(&first.body)),
        dedupe_key(&id, &retry.headers(), &ParsedBody::new(&retry.body)),
    );
    // Non-string values: a number, an object, a boolean.
    let hook = corpus::hook("stripe/invoice_paid.json");
    let body = ParsedBody::new(&hook.body);
    for path in [
        "created",
        "data.object",
        "livemode",
        "data.object.lines.data",
    ] {
        assert_eq!(ordering_key(&json(path), &[], &body), None, "{path}");
        assert_eq!(dedupe_key(&json(path), &[], &body), None, "{path}");
    }
    // Dot paths never index arrays; missing members at any depth.
    for path in [
        "data.object.lines.data.0.id",
        "data.object.nope",
        "nope.id",
        "id.more",
    ] {
        assert_eq!(ordering_key(&json(path), &[], &body), None, "{path}");
    }
}

#[test]
fn one_decode_is_shared_by_dedupe_and_ordering() {
    let hook = corpus::hook("slack/event_callback_app_mention.json");
    let body = ParsedBody::new(&hook.body);
    let h = hook.headers();
    assert!(!body.is_decoded());
    // A header key does not decode the body.
    assert_eq!(
        dedupe_key(&header("X-Slack-Request-Timestamp"), &h, &body),
        key("1531420700")
    );
    assert!(!body.is_decoded());
    assert_eq!(dedupe_key(&json("event_id"), &h, &body), key("Ev123ABC456"));
    assert!(body.is_decoded());
    assert_eq!(
        ordering_key(&json("event.channel"), &h, &body),
        key("C123ABC456")
    );
    assert_eq!(ordering_key(&json("team_id"), &h, &body), key("T123ABC456"));
    // The Slack retry has the same dedupe key.
    let retry = corpus::hook("slack/event_callback_app_mention_retry1.json");
    assert_eq!(retry.header("X-Slack-Retry-Num"), "1");
    assert_eq!(
        dedupe_key(
            &json("event_id"),
            &retry.headers(),
            &ParsedBody::new(&retry.body)
        ),
        key("Ev123ABC456")
    );
}

#[test]
fn empty_values_are_no_key() {
    // An empty JSON string is the keyless lane (docs/design.md section 10). The index
    // says issue.body is "" in this file, but the bytes carry `"body":null`
    // (also no key); GitHub's `gravatar_id` is a real "".
    let hook = corpus::hook("github/issues_opened_empty_body.json");
    let body = ParsedBody::new(&hook.body);
    let text = String::from_utf8_lossy(&hook.body);
    assert!(text.contains(r#""body":null"#) && text.contains(r#""gravatar_id":"""#));
    for path in ["issue.body", "issue.user.gravatar_id", "sender.gravatar_id"] {
        assert_eq!(
            ordering_key(&json(path), &hook.headers(), &body),
            None,
            "{path}"
        );
        assert_eq!(
            dedupe_key(&json(path), &hook.headers(), &body),
            None,
            "{path}"
        );
    }
    assert_eq!(
        ordering_key(&json("issue.user.login"), &hook.headers(), &body),
        key("Codertocat")
    );
    // An empty header value, even before a non-empty one of the same name.
    let h: Vec<(&[u8], &[u8])> = vec![(b"X-Entity-Id", b""), (b"x-entity-id", b"cus_1")];
    let empty = ParsedBody::new(b"");
    assert_eq!(ordering_key(&header("x-entity-id"), &h, &empty), None);
    assert_eq!(dedupe_key(&header("X-ENTITY-ID"), &h, &empty), None);
    // A missing header.
    assert_eq!(ordering_key(&header("x-other"), &h, &empty), None);
}

#[test]
fn duplicate_headers_take_the_first_value_with_any_case() {
    let h: Vec<(&[u8], &[u8])> = vec![
        (b"Content-Type", b"application/json"),
        (b"X-Entity-Id", b"first"),
        (b"x-entity-id", b"second"),
        (b"X-ENTITY-ID", b"third"),
    ];
    let body = ParsedBody::new(b"{}");
    for name in ["x-entity-id", "X-Entity-Id", "X-ENTITY-ID"] {
        assert_eq!(ordering_key(&header(name), &h, &body), key("first"));
        assert_eq!(dedupe_key(&header(name), &h, &body), key("first"));
    }
    // The corpus' lower-case file under its canonical names.
    let hook = corpus::hook("github/pull_request_synchronize_lowercase_headers.json");
    let body = ParsedBody::new(&hook.body);
    assert_eq!(
        dedupe_key(&header("X-GitHub-Delivery"), &hook.headers(), &body),
        key("0188a4ae-d2c0-50f0-ba65-e8c249c3e8d7")
    );
}

#[test]
fn header_keys_are_the_bytes_received() {
    // Two different invalid-UTF-8 values never merge, and are not re-encoded.
    let body = ParsedBody::new(b"");
    let a: Vec<(&[u8], &[u8])> = vec![(b"x-entity-id", b"\xff\x01")];
    let b: Vec<(&[u8], &[u8])> = vec![(b"x-entity-id", b"\xfe\x01")];
    assert_eq!(
        ordering_key(&header("x-entity-id"), &a, &body),
        Some(b"\xff\x01".to_vec())
    );
    assert_eq!(
        ordering_key(&header("x-entity-id"), &b, &body),
        Some(b"\xfe\x01".to_vec())
    );
    // Over 128 bytes, invalid UTF-8 included: hashed over the raw bytes.
    let long = b"\xff\xfe".repeat(70);
    let h: Vec<(&[u8], &[u8])> = vec![(b"x-entity-id", &long)];
    assert_eq!(
        ordering_key(&header("x-entity-id"), &h, &body),
        key("sha256:fdc34fbb4df3ae0d3c1c5c6823aafdc974c75af68eaffd04072c61ce478e14fa")
    );
    // Spaces are part of the value too.
    let h: Vec<(&[u8], &[u8])> = vec![(b"x-entity-id", b" a ")];
    assert_eq!(ordering_key(&header("x-entity-id"), &h, &body), key(" a "));
}

#[test]
fn long_keys_are_hashed_at_128_for_ordering_and_200_for_dedupe() {
    assert_eq!(ORDERING_KEY_MAX_BYTES, 128);
    assert_eq!(DEDUPE_KEY_MAX_BYTES, 200);
    let body = ParsedBody::new(b"");
    let at = |v: &[u8]| -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let h: Vec<(&[u8], &[u8])> = vec![(b"x-key", v)];
        (
            ordering_key(&header("x-key"), &h, &body),
            dedupe_key(&header("x-key"), &h, &body),
        )
    };
    let k128 = b"k".repeat(128);
    assert_eq!(at(&k128), (Some(k128.clone()), Some(k128.clone())));
    let k129 = b"k".repeat(129);
    assert_eq!(
        at(&k129),
        (
            key("sha256:9094034fb2d0ce2e407c9b260f2806ab2efb352e200722fd6296d9cf1cf7e6f5"),
            Some(k129.clone())
        )
    );
    let a200 = b"a".repeat(200);
    assert_eq!(at(&a200).1, Some(a200.clone()));
    assert_eq!(
        at(&b"a".repeat(201)).1,
        key("sha256:a92efd82109373e58f9a2056dee01e807e216ce6075f7051207c0a9f7d666e50")
    );
    // The corpus' 129-byte ref: the same hash from the body and from a header.
    let hook = corpus::hook("github/push_ref_129_bytes.json");
    let body129 = ParsedBody::new(&hook.body);
    let expected = key("sha256:eb8bfe20b818133f9c835ec11378833dccdf2eaa71c191630183cd7fd79b2340");
    assert_eq!(ordering_key(&json("ref"), &[], &body129), expected);
    let v: serde_json::Value = serde_json::from_slice(&hook.body).expect("json");
    let raw = v["ref"].as_str().expect("ref");
    assert_eq!(raw.len(), 129);
    let h: Vec<(&[u8], &[u8])> = vec![(b"X-Ref", raw.as_bytes())];
    assert_eq!(ordering_key(&header("x-ref"), &h, &body), expected);
    // As a dedupe key 129 bytes is verbatim.
    assert_eq!(dedupe_key(&json("ref"), &[], &body129), key(raw));
}

#[test]
fn bodies_over_1_mib_are_not_decoded() {
    assert_eq!(JSON_KEY_MAX_BYTES, 1_048_576);
    let exact = corpus::hook("github/push_body_exactly_1MiB.json");
    let over = corpus::hook("github/push_body_1MiB_plus_1.json");
    assert_eq!(exact.body.len(), JSON_KEY_MAX_BYTES);
    assert_eq!(over.body.len(), JSON_KEY_MAX_BYTES + 1);
    let pusher = json("pusher.name");
    assert_eq!(
        ordering_key(&pusher, &[], &ParsedBody::new(&exact.body)),
        key("Codertocat")
    );
    assert_eq!(
        dedupe_key(&pusher, &[], &ParsedBody::new(&exact.body)),
        key("Codertocat")
    );
    let body = ParsedBody::new(&over.body);
    assert_eq!(ordering_key(&pusher, &[], &body), None);
    assert_eq!(dedupe_key(&pusher, &[], &body), None);
    // A header key still works on a large body.
    assert_eq!(
        dedupe_key(&header("X-GitHub-Event"), &over.headers(), &body),
        key("push")
    );
}

#[test]
fn bodies_that_are_not_json_give_no_key() {
    for file in [
        "github/ping_form_encoded.json",
        "github/docs_signature_test_vector.json",
        "salesforce/opportunity_outbound_message.json",
        "twilio/sms_incoming.json",
        "slack/slash_command_docs_vector.json",
    ] {
        let hook = corpus::hook(file);
        let body = ParsedBody::new(&hook.body);
        for path in [
            "id",
            "team_id",
            "repository.full_name",
            "sObject.Id",
            "From",
        ] {
            assert_eq!(ordering_key(&json(path), &[], &body), None, "{file} {path}");
            assert_eq!(dedupe_key(&json(path), &[], &body), None, "{file} {path}");
        }
        assert!(body.is_decoded());
    }
    // Invalid UTF-8, truncated JSON, trailing garbage, a bare string, too deep.
    let deep = "[".repeat(200) + &"]".repeat(200);
    for raw in [
        &b"{\"id\":\"\xff\"}"[..],
        b"{\"id\":\"evt_1\"",
        b"{\"id\":\"evt_1\"} x",
        b"\"evt_1\"",
        deep.as_bytes(),
    ] {
        assert_eq!(ordering_key(&json("id"), &[], &ParsedBody::new(raw)), None);
    }
}

#[test]
fn json_strings_are_unescaped_and_large_integers_left_alone() {
    // Shopify: escaped slashes decode to '/', ids above 2^53 are numbers (no key).
    let hook = corpus::hook("shopify/products_update.json");
    let body = ParsedBody::new(&hook.body);
    assert_eq!(
        ordering_key(&json("admin_graphql_api_id"), &[], &body),
        key("gid://shopify/Product/788032119674292922")
    );
    assert_eq!(ordering_key(&json("id"), &[], &body), None);
    // The stored bytes still have the escapes.
    assert!(String::from_utf8_lossy(body.bytes()).contains(r"gid:\/\/shopify"));
    // Unicode escapes decode to UTF-8 bytes.
    let raw = br#"{"k":"caf\u00e9 \ud83d\ude00"}"#;
    assert_eq!(
        ordering_key(&json("k"), &[], &ParsedBody::new(raw)),
        key("café 😀")
    );
    // Non-ASCII ref of 128 bytes is verbatim, 130 bytes hashed (bytes, not chars).
    let h128 = corpus::hook("github/push_ref_multibyte_128_bytes.json");
    let k = ordering_key(&json("ref"), &[], &ParsedBody::new(&h128.body)).expect("key");
    assert_eq!(
        (
            k.len(),
            String::from_utf8(k).expect("utf-8").chars().count()
        ),
        (128, 74)
    );
    let h130 = corpus::hook("github/push_ref_multibyte_130_bytes.json");
    assert_eq!(
        ordering_key(&json("ref"), &[], &ParsedBody::new(&h130.body)),
        key("sha256:89494f82a9f113ed7c380ed22a4fd9ee6f89aca31ff40beb99bb1ed65617f6d2")
    );
}

#[test]
fn key_specs() {
    assert_eq!(
        KeySpec::json("data.object.customer"),
        Ok(KeySpec::Json(vec![
            "data".into(),
            "object".into(),
            "customer".into()
        ]))
    );
    assert_eq!(KeySpec::json("id"), Ok(KeySpec::Json(vec!["id".into()])));
    for bad in ["", "a..b", ".a", "a."] {
        assert_eq!(
            KeySpec::json(bad),
            Err(KeySpecError::EmptySegment { path: bad.into() })
        );
    }
    assert_eq!(
        KeySpec::header("X-Entity-Id"),
        Ok(KeySpec::Header("X-Entity-Id".into()))
    );
    assert_eq!(KeySpec::header(""), Err(KeySpecError::EmptyHeader));
}
