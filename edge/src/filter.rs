//! Filters per sink (docs/design.md section 10, "Filters per sink"; section 5,
//! "Edge", step 9): whether a hook gets a delivery row for a sink at all,
//! decided at ingest beside the ordering keys, from the same header list and
//! the same lazy JSON decode ([`ParsedBody`]), so a hook's body is decoded at
//! most once for its dedupe key, its ordering keys and its filters together.
//!
//! A quarantine release and an archive replay decide again, with the stored
//! headers and body (the configuration keeps every header a filter reads:
//! `ankusa_config` refuses a filter on a header the store does not keep).

use serde_json::Value;

use crate::{Header, KeySpec, ParsedBody, first_header};

/// The test of a [`Condition`] (`ankusa_config::FilterTest`, as bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    /// The value is exactly these bytes.
    Equals(Vec<u8>),
    /// The value is exactly one of these.
    OneOf(Vec<Vec<u8>>),
    /// The value starts with these bytes.
    Prefix(Vec<u8>),
    /// `true`: the header is present (any value, empty included), or the JSON
    /// path holds a value other than null. `false`: the opposite (a body with
    /// no JSON view included).
    Exists(bool),
}

/// One condition: where the value comes from, and its test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// The first value of a header (name ASCII case-insensitive, the bytes as
    /// received), or the value at a JSON dot path (object members only).
    pub on: KeySpec,
    /// What the value must pass.
    pub test: Test,
}

impl Condition {
    /// Whether the hook meets the condition. `Equals`, `OneOf` and `Prefix`
    /// compare strings only: an absent header, a body with no JSON view
    /// ([`ParsedBody::str_at`]: not JSON, over
    /// [`crate::JSON_KEY_MAX_BYTES`]), a missing member or a JSON value that
    /// is not a string fails them. A JSON string is compared as its
    /// unescaped UTF-8; a header value as the bytes received.
    pub fn matches(&self, headers: &[Header<'_>], body: &ParsedBody<'_>) -> bool {
        match &self.test {
            Test::Exists(want) => self.present(headers, body) == *want,
            test => {
                let Some(value) = self.on.raw(headers, body) else {
                    return false;
                };
                match test {
                    Test::Equals(v) => value == v.as_slice(),
                    Test::OneOf(vs) => vs.iter().any(|v| value == v.as_slice()),
                    Test::Prefix(p) => value.starts_with(p),
                    Test::Exists(_) => false, // handled above
                }
            }
        }
    }

    fn present(&self, headers: &[Header<'_>], body: &ParsedBody<'_>) -> bool {
        match &self.on {
            KeySpec::Header(name) => first_header(headers, name).is_some(),
            KeySpec::Json(path) => body
                .value_at(path)
                .is_some_and(|v| !matches!(v, Value::Null)),
        }
    }
}

/// A sink entry's filter: conditions that must all match. Empty (the
/// default): every hook matches, and nothing is read or decoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The conditions, all required.
    pub conditions: Vec<Condition>,
}

impl Filter {
    /// A filter of these conditions (all required).
    pub fn new(conditions: Vec<Condition>) -> Filter {
        Filter { conditions }
    }

    /// Whether the filter takes every hook (no condition).
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// Whether the hook meets every condition (in order, stopping at the
    /// first that fails; the body is decoded only if a JSON condition is
    /// reached, and then once for the hook: [`ParsedBody`]).
    pub fn matches(&self, headers: &[Header<'_>], body: &ParsedBody<'_>) -> bool {
        self.conditions.iter().all(|c| c.matches(headers, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(path: &str) -> KeySpec {
        KeySpec::json(path).expect("path")
    }

    fn header(name: &str) -> KeySpec {
        KeySpec::header(name).expect("name")
    }

    fn cond(on: KeySpec, test: Test) -> Filter {
        Filter::new(vec![Condition { on, test }])
    }

    fn eq(s: &str) -> Test {
        Test::Equals(s.as_bytes().to_vec())
    }

    fn one_of(list: &[&str]) -> Test {
        Test::OneOf(list.iter().map(|s| s.as_bytes().to_vec()).collect())
    }

    fn prefix(s: &str) -> Test {
        Test::Prefix(s.as_bytes().to_vec())
    }

    const STRIPE: &[u8] = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"status":"paid","amount":500,"customer":null,"lines":{"a":1}}},"livemode":false}"#;

    #[test]
    fn json_tests_compare_strings_at_the_path() {
        let b = ParsedBody::new(STRIPE);
        assert!(cond(json("type"), prefix("invoice.")).matches(&[], &b));
        assert!(!cond(json("type"), prefix("charge.")).matches(&[], &b));
        assert!(cond(json("type"), eq("invoice.paid")).matches(&[], &b));
        assert!(
            !cond(json("type"), eq("invoice.PAID")).matches(&[], &b),
            "case-sensitive"
        );
        assert!(!cond(json("type"), eq("invoice.pai")).matches(&[], &b));
        assert!(cond(json("data.object.status"), one_of(&["open", "paid"])).matches(&[], &b));
        assert!(!cond(json("data.object.status"), one_of(&["open", "void"])).matches(&[], &b));
        // Not a string: a number, a boolean, null, an object never pass.
        assert!(!cond(json("data.object.amount"), eq("500")).matches(&[], &b));
        assert!(!cond(json("livemode"), eq("false")).matches(&[], &b));
        assert!(!cond(json("data.object.customer"), eq("null")).matches(&[], &b));
        assert!(!cond(json("data.object.lines"), prefix("{")).matches(&[], &b));
        // A missing member, a step that is not an object.
        assert!(!cond(json("data.nothing"), eq("x")).matches(&[], &b));
        assert!(!cond(json("type.inner"), eq("x")).matches(&[], &b));
    }

    #[test]
    fn exists_is_present_and_not_null() {
        let b = ParsedBody::new(STRIPE);
        let exists = |path: &str, want: bool| cond(json(path), Test::Exists(want)).matches(&[], &b);
        assert!(exists("data.object.amount", true));
        assert!(exists("livemode", true), "a boolean exists");
        assert!(exists("data.object.lines", true), "an object exists");
        assert!(!exists("data.object.customer", true), "null does not exist");
        assert!(exists("data.object.customer", false));
        assert!(!exists("data.object.nothing", true));
        assert!(exists("data.object.nothing", false));
        assert!(!exists("type", false));
    }

    #[test]
    fn a_body_that_is_not_json_matches_only_exists_false() {
        for body in [
            &b"type=invoice.paid"[..],
            b"",
            b"\xff\xfe",
            b"{\"type\":\"invoice.paid\"",
        ] {
            let b = ParsedBody::new(body);
            assert!(!cond(json("type"), prefix("invoice.")).matches(&[], &b));
            assert!(!cond(json("type"), Test::Exists(true)).matches(&[], &b));
            assert!(cond(json("type"), Test::Exists(false)).matches(&[], &b));
        }
        // Over the JSON key limit: no JSON view either.
        let mut big = br#"{"type":"invoice.paid","pad":""#.to_vec();
        big.resize(crate::JSON_KEY_MAX_BYTES + 10, b'a');
        big.extend_from_slice(b"\"}");
        let b = ParsedBody::new(&big);
        assert!(!cond(json("type"), prefix("invoice.")).matches(&[], &b));
        assert!(cond(json("type"), Test::Exists(false)).matches(&[], &b));
    }

    #[test]
    fn header_tests_use_the_first_value_case_insensitive_name() {
        let hs: Vec<Header<'_>> = vec![
            (&b"X-GitHub-Event"[..], &b"push"[..]),
            (&b"x-github-event"[..], &b"issues"[..]),
            (&b"X-Empty"[..], &b""[..]),
            (&b"X-Bytes"[..], &b"\xffabc"[..]),
        ];
        let b = ParsedBody::new(b"not json");
        let f = |name: &str, t: Test| cond(header(name), t).matches(&hs, &b);
        assert!(f("x-github-event", one_of(&["push", "pull_request"])));
        assert!(
            !f("x-github-event", eq("issues")),
            "only the first value counts"
        );
        assert!(f("X-GITHUB-EVENT", eq("push")));
        assert!(!f("x-github-event", eq("Push")));
        assert!(f("x-empty", Test::Exists(true)), "an empty header exists");
        assert!(f("x-empty", eq("")));
        assert!(!f("x-empty", prefix("a")));
        assert!(f("x-absent", Test::Exists(false)));
        assert!(!f("x-absent", Test::Exists(true)));
        assert!(!f("x-absent", eq("")));
        assert!(f("x-bytes", Test::Prefix(b"\xff".to_vec())), "raw bytes");
        assert!(!b.is_decoded(), "header conditions never decode the body");
    }

    #[test]
    fn every_condition_must_match_and_the_body_is_decoded_once() {
        let hs: Vec<Header<'_>> = vec![(&b"stripe-signature"[..], &b"t=1,v1=00"[..])];
        let b = ParsedBody::new(STRIPE);
        let all = Filter::new(vec![
            Condition {
                on: header("stripe-signature"),
                test: Test::Exists(true),
            },
            Condition {
                on: json("type"),
                test: prefix("invoice."),
            },
            Condition {
                on: json("data.object.status"),
                test: eq("paid"),
            },
        ]);
        assert!(all.matches(&hs, &b));
        assert!(b.is_decoded());
        let mut one_fails = all.clone();
        one_fails.conditions[2].test = eq("open");
        assert!(!one_fails.matches(&hs, &b));
        assert!(
            Filter::default().matches(&[], &ParsedBody::new(b"\xff")),
            "no condition: every hook"
        );
        assert!(Filter::default().is_empty());
    }
}
