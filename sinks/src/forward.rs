//! Provider headers on broker and cloud sinks: the `forward_headers` option
//! (docs/design.md section 6, "Provider headers").
//!
//! The stored envelope's headers (what the source's `store_headers` policy
//! kept) travel beside the `ankusa_*` metadata as the medium's message
//! attributes, headers or stream fields, so a consumer can tell
//! `X-GitHub-Event: push` from `issues` or read `X-Shopify-Topic`.
//!
//! ```yaml
//! sinks:
//!   - type: sqs
//!     queue_url: https://sqs.us-east-1.amazonaws.com/123456789012/hooks
//!     forward_headers: [x-github-event, x-github-delivery]   # these, if stored
//!   - type: kafka
//!     brokers: 127.0.0.1:9092
//!     topic: hooks
//!     forward_headers: all                                  # every stored header
//! ```
//!
//! - Absent (the default): nothing but the metadata, as before.
//! - A list of header names (matched case-insensitively, sent lower-case):
//!   those of them the hook has, in the list's order. Two values of one
//!   header travel as one, joined with `", "` (RFC 9110 section 5.3).
//! - `all`: every stored header, in the order received, except the ones no
//!   sink forwards ([`NEVER_FORWARDED`]: hop-by-hop, framing, the content type
//!   the sink already carries, `proxy-*`, `x-ankusa-*`). A header the policy
//!   hashes travels as its stored `sha256:<hex>` value, as the HTTP sink
//!   sends it.
//!
//! Each medium ([`Medium`]) has limits: how many headers, how long a name and
//! a value, how many bytes in all, which names it reserves for itself
//! (`ankusa_*`, `content_type`, ...), which characters a name and a value may
//! have. At load, a listed name the medium can never carry is an error naming
//! the option ([`ForwardHeaders::check`]); the config crate adds the rule that
//! a listed header must be kept by the source's store_headers policy. At
//! delivery, a header that does not fit (too many, too long, a value the
//! medium cannot carry) is dropped, never failing the hook: the drop is
//! counted in [`dropped_totals`] (the `ankusa_forwarded_headers_dropped_total`
//! counter, by sink kind) and logged at debug.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{DeliveryCtx, Envelope, OptionProblems, SinkError};

/// The option's name in a sink entry.
pub const OPTION: &str = "forward_headers";

pub use crate::meta::{NEVER_FORWARDED, NEVER_FORWARDED_PREFIXES, never_forwarded};

/// Which stored headers a sink forwards: the parsed `forward_headers` option.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ForwardHeaders {
    /// The option is absent: only the metadata travels.
    #[default]
    None,
    /// `all`: every stored header but [`NEVER_FORWARDED`] ones.
    All,
    /// These header names, lower-case, without repeats, in the order written.
    Listed(Vec<String>),
}

/// What a medium can carry besides the sink's own metadata; one constant per
/// adapter (`MEDIUM` in its sink module).
#[derive(Clone, Copy, Debug)]
pub struct Medium {
    /// The sink kind, the metric's `sink` label (`"sqs"`, ...).
    pub kind: &'static str,
    /// Most forwarded headers per message, whatever the hook: for media that
    /// count attributes (SQS, Pub/Sub) their limit less the fewest the sink
    /// sends itself; [`Room::count`] narrows it per message. Listing more is a
    /// load error.
    pub max_headers: usize,
    /// The longest name, bytes.
    pub max_name_bytes: usize,
    /// The longest value, bytes; a longer one is dropped.
    pub max_value_bytes: usize,
    /// Names and values of the forwarded headers together, bytes at most;
    /// [`Room::bytes`] narrows it per message.
    pub max_total_bytes: usize,
    /// Bytes a header costs beyond its name and value, as the medium counts
    /// a message's size (SQS counts each attribute's data type, `String`).
    pub overhead_bytes: usize,
    /// Names the sink uses itself (lower-case): never forwarded under them.
    pub reserved: &'static [&'static str],
    /// Name prefixes the sink or the medium uses itself (`ankusa_`,
    /// NATS's `nats-`).
    pub reserved_prefixes: &'static [&'static str],
    /// The medium's own rule on a (lower-case, valid HTTP) name, e.g. SQS's
    /// attribute name characters; `Err` says why.
    pub name_rule: fn(&str) -> Result<(), String>,
    /// Whether the medium carries this value (e.g. UTF-8 only).
    pub value_ok: fn(&[u8]) -> bool,
}

/// A name rule that takes every valid HTTP header name.
pub fn any_name(_: &str) -> Result<(), String> {
    Ok(())
}

/// A value rule that takes any bytes.
pub fn any_value(_: &[u8]) -> bool {
    true
}

/// A value rule for text media: UTF-8 without CR, LF or NUL (what a header
/// line or a JSON string attribute carries unchanged).
pub fn text_value(v: &[u8]) -> bool {
    std::str::from_utf8(v).is_ok() && !v.iter().any(|b| matches!(b, b'\r' | b'\n' | 0))
}

/// Room left in one message, after what the sink sends itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Headers that may still be added.
    pub count: usize,
    /// Bytes (names, values and [`Medium::overhead_bytes`]) that may still
    /// be added.
    pub bytes: usize,
}

impl Room {
    /// No limit of the message's own beyond the medium's.
    pub const UNLIMITED: Room = Room {
        count: usize::MAX,
        bytes: usize::MAX,
    };
}

/// Why a header was dropped at delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The medium cannot carry the name (reserved, characters, length).
    Name,
    /// The medium cannot carry the value (characters, encoding).
    Value,
    /// The value is longer than [`Medium::max_value_bytes`].
    ValueTooLong,
    /// No attribute or header left in the message.
    Count,
    /// Not enough bytes left in the message.
    Size,
}

impl DropReason {
    /// For the debug line.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Name => "name not allowed by the medium",
            DropReason::Value => "value not allowed by the medium",
            DropReason::ValueTooLong => "value too long",
            DropReason::Count => "no attribute left",
            DropReason::Size => "no bytes left",
        }
    }
}

/// What [`ForwardHeaders::plan`] chose for one message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forwarded {
    /// `(lower-case name, value)` to send, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// `(lower-case name, why)` of every header that did not fit.
    pub dropped: Vec<(String, DropReason)>,
}

/// Whether `name` is a valid HTTP header name (RFC 9110 section 5.6.2 token).
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl Medium {
    /// Why the medium cannot carry a header named `name` (lower-case, a valid
    /// header name), if it cannot.
    pub fn name_problem(&self, name: &str) -> Option<String> {
        if self.reserved.contains(&name)
            || self.reserved_prefixes.iter().any(|p| name.starts_with(p))
        {
            return Some(format!(
                "\"{name}\" is a name the {} sink uses itself",
                self.kind
            ));
        }
        if name.len() > self.max_name_bytes {
            return Some(format!(
                "\"{name}\" is {} bytes, more than the {} of a {} name",
                name.len(),
                self.max_name_bytes,
                self.kind
            ));
        }
        (self.name_rule)(name).err()
    }
}

impl ForwardHeaders {
    /// Reads the option's value: `"all"`, or a list of header names (`[]` is
    /// none). Records a problem of the option for anything else: a value
    /// that is neither (answering [`ForwardHeaders::None`]), and each entry
    /// of a list that is not a string, not a valid header name, or a name
    /// listed twice (answering the list's other names, for
    /// [`ForwardHeaders::check`] to report their problems in the same run).
    pub fn read(value: &serde_json::Value, p: &mut OptionProblems) -> ForwardHeaders {
        const SHAPE: &str = "must be `all` or a list of header names";
        match value {
            serde_json::Value::String(s) if s == "all" => ForwardHeaders::All,
            serde_json::Value::String(s) => {
                p.invalid(
                    OPTION,
                    format!("{SHAPE}, found \"{s}\" (a single header is written [{s}])"),
                );
                ForwardHeaders::None
            }
            serde_json::Value::Array(items) => {
                let mut names: Vec<String> = Vec::with_capacity(items.len());
                for item in items {
                    let Some(name) = item.as_str() else {
                        p.invalid(OPTION, format!("{SHAPE}; {item} is not a header name"));
                        continue;
                    };
                    if !is_header_name(name) {
                        p.invalid(
                            OPTION,
                            format!("\"{name}\" is not a valid HTTP header name"),
                        );
                        continue;
                    }
                    let lower = name.to_ascii_lowercase();
                    if names.contains(&lower) {
                        p.invalid(
                            OPTION,
                            format!(
                                "header \"{lower}\" is listed twice (names are case-insensitive)"
                            ),
                        );
                        continue;
                    }
                    names.push(lower);
                }
                // The good names are kept (the bad ones have their problem),
                // so the medium's checks still report theirs in this run.
                if names.is_empty() {
                    ForwardHeaders::None
                } else {
                    ForwardHeaders::Listed(names)
                }
            }
            other => {
                let found = match other {
                    serde_json::Value::Null => "nothing".to_owned(),
                    serde_json::Value::Object(_) => "a map".to_owned(),
                    v => v.to_string(),
                };
                p.invalid(OPTION, format!("{SHAPE}, found {found}"));
                ForwardHeaders::None
            }
        }
    }

    /// Whether nothing is forwarded.
    pub fn is_none(&self) -> bool {
        matches!(self, ForwardHeaders::None)
    }

    /// Records a problem for every listed name that `medium` can never carry:
    /// one no sink forwards, one the sink uses itself, one the medium's name
    /// rule refuses, and more names than the medium has room for.
    pub fn check(&self, medium: &Medium, p: &mut OptionProblems) {
        let ForwardHeaders::Listed(names) = self else {
            return;
        };
        for name in names {
            if !is_header_name(name) || name.bytes().any(|b| b.is_ascii_uppercase()) {
                p.invalid(
                    OPTION,
                    format!("\"{name}\" is not a lower-case HTTP header name"),
                );
            } else if never_forwarded(name) {
                let why = if name == "content-type" {
                    "the sink carries the content type already"
                } else {
                    "a hop-by-hop, framing or relay header, never forwarded"
                };
                p.invalid(OPTION, format!("\"{name}\": {why}"));
            } else if let Some(why) = medium.name_problem(name) {
                p.invalid(OPTION, why);
            }
        }
        if names.len() > medium.max_headers {
            p.invalid(
                OPTION,
                format!(
                    "{} headers listed; a {} message carries at most {} besides the sink's own",
                    names.len(),
                    medium.kind,
                    medium.max_headers
                ),
            );
        }
    }

    /// [`ForwardHeaders::check`] alone, as an error (for a config's
    /// `validate`).
    pub fn validate(&self, medium: &Medium) -> Result<(), SinkError> {
        let mut p = OptionProblems::new();
        self.check(medium, &mut p);
        p.into_result()
    }

    /// The headers of `stored` (the envelope's headers) to send on `medium`
    /// within `room`: pure, for the adapters' tests; adapters call
    /// [`ForwardHeaders::select`].
    ///
    /// Headers are taken in the list's order (`all`: the order received,
    /// repeated names at their first place), each one whole or not at all: a
    /// header that does not fit is dropped and the next ones are still
    /// tried, so a long value does not cost the short ones behind it.
    pub fn plan(&self, medium: &Medium, stored: &[(Vec<u8>, Vec<u8>)], room: Room) -> Forwarded {
        let mut out = Forwarded::default();
        if self.is_none() {
            return out;
        }
        // Candidates: (lower-case name, values in order).
        let mut candidates: Vec<(String, Vec<&[u8]>)> = Vec::new();
        match self {
            ForwardHeaders::None => {}
            ForwardHeaders::Listed(names) => {
                for name in names {
                    let values: Vec<&[u8]> = stored
                        .iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
                        .map(|(_, v)| v.as_slice())
                        .collect();
                    if !values.is_empty() {
                        candidates.push((name.clone(), values));
                    }
                }
            }
            ForwardHeaders::All => {
                for (n, v) in stored {
                    let Ok(name) = std::str::from_utf8(n) else {
                        continue;
                    };
                    let name = name.to_ascii_lowercase();
                    if !is_header_name(&name) || never_forwarded(&name) {
                        continue;
                    }
                    match candidates.iter_mut().find(|(c, _)| *c == name) {
                        Some((_, values)) => values.push(v),
                        None => candidates.push((name, vec![v])),
                    }
                }
            }
        }
        let max_count = medium.max_headers.min(room.count);
        let mut bytes_left = medium.max_total_bytes.min(room.bytes);
        for (name, values) in candidates {
            let value = values.join(&b", "[..]);
            let reason = if medium.name_problem(&name).is_some() {
                Some(DropReason::Name)
            } else if !(medium.value_ok)(&value) {
                Some(DropReason::Value)
            } else if value.len() > medium.max_value_bytes {
                Some(DropReason::ValueTooLong)
            } else if out.headers.len() >= max_count {
                Some(DropReason::Count)
            } else if name.len() + value.len() + medium.overhead_bytes > bytes_left {
                Some(DropReason::Size)
            } else {
                None
            };
            match reason {
                Some(r) => out.dropped.push((name, r)),
                None => {
                    bytes_left -= name.len() + value.len() + medium.overhead_bytes;
                    out.headers.push((name, value));
                }
            }
        }
        out
    }

    /// [`ForwardHeaders::plan`] for one delivery, counting and logging (debug)
    /// what was dropped: the headers to send.
    pub fn select(
        &self,
        medium: &Medium,
        hook: &Envelope,
        ctx: &DeliveryCtx,
        room: Room,
    ) -> Vec<(String, Vec<u8>)> {
        let f = self.plan(medium, &hook.headers, room);
        if !f.dropped.is_empty() {
            count_dropped(medium.kind, f.dropped.len() as u64);
            tracing::debug!(
                sink = medium.kind,
                source = %ctx.source,
                sink_name = %ctx.sink_name,
                idempotency_key = %ctx.idempotency_key,
                dropped = ?f.dropped.iter().map(|(n, r)| format!("{n}: {}", r.as_str())).collect::<Vec<_>>(),
                "forward_headers: {} header(s) did not fit the message and were not sent",
                f.dropped.len()
            );
        }
        f.headers
    }
}

/// The sink kinds with a [`Medium`], in the docs' order: the series of
/// [`dropped_totals`].
pub const KINDS: [&str; 6] = ["sqs", "pubsub", "kafka", "rabbitmq", "nats", "redis"];

/// Headers dropped since the process started, by [`KINDS`] index.
static DROPPED: [AtomicU64; 6] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

fn count_dropped(kind: &str, n: u64) {
    if let Some(i) = KINDS.iter().position(|k| *k == kind) {
        DROPPED[i].fetch_add(n, Ordering::Relaxed);
    }
}

/// Forwarded headers dropped at delivery since the process started, by sink
/// kind (every kind of [`KINDS`], zeros included, so the series count is
/// fixed): the admin listener's `ankusa_forwarded_headers_dropped_total{sink}`.
pub fn dropped_totals() -> Vec<(&'static str, u64)> {
    KINDS
        .iter()
        .zip(DROPPED.iter())
        .map(|(k, n)| (*k, n.load(Ordering::Relaxed)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: Medium = Medium {
        kind: "kafka",
        max_headers: 3,
        max_name_bytes: 20,
        max_value_bytes: 10,
        max_total_bytes: 40,
        overhead_bytes: 0,
        reserved: &["content_type", "body"],
        reserved_prefixes: &["ankusa_"],
        name_rule: |n| {
            if n.contains('!') {
                Err(format!("\"{n}\" has a `!`"))
            } else {
                Ok(())
            }
        },
        value_ok: text_value,
    };

    fn read(v: serde_json::Value) -> Result<ForwardHeaders, Vec<String>> {
        let mut p = OptionProblems::new();
        let f = ForwardHeaders::read(&v, &mut p);
        f.check(&TEST, &mut p);
        p.finish(f)
            .map_err(|e| e.problems().iter().map(ToString::to_string).collect())
    }

    fn h(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn names(f: &Forwarded) -> Vec<(&str, &str)> {
        f.headers
            .iter()
            .map(|(n, v)| (n.as_str(), std::str::from_utf8(v).unwrap_or("?")))
            .collect()
    }

    #[test]
    fn reads_all_and_lists_lower_cased() {
        assert_eq!(read(serde_json::json!("all")), Ok(ForwardHeaders::All));
        assert_eq!(
            read(serde_json::json!(["X-GitHub-Event", "x-shopify-topic"])),
            Ok(ForwardHeaders::Listed(vec![
                "x-github-event".into(),
                "x-shopify-topic".into()
            ]))
        );
        assert_eq!(read(serde_json::json!([])), Ok(ForwardHeaders::None));
        assert!(ForwardHeaders::default().is_none());
    }

    #[test]
    fn rejects_every_bad_shape_and_name_in_one_run() {
        let shape = "sink option `forward_headers`: must be `all` or a list of header names";
        assert_eq!(
            read(serde_json::json!("some")),
            Err(vec![format!(
                "{shape}, found \"some\" (a single header is written [some])"
            )])
        );
        assert_eq!(
            read(serde_json::json!(true)),
            Err(vec![format!("{shape}, found true")])
        );
        assert_eq!(
            read(serde_json::json!({"a": 1})),
            Err(vec![format!("{shape}, found a map")])
        );
        assert_eq!(
            read(serde_json::json!(null)),
            Err(vec![format!("{shape}, found nothing")])
        );
        assert_eq!(
            read(serde_json::json!(["x-a", 3, "bad name", "X-A"])),
            Err(vec![
                format!("{shape}; 3 is not a header name"),
                "sink option `forward_headers`: \"bad name\" is not a valid HTTP header name".to_owned(),
                "sink option `forward_headers`: header \"x-a\" is listed twice (names are case-insensitive)".to_owned(),
            ])
        );
        let e = read(serde_json::json!([
            "host",
            "content-type",
            "ankusa_tenant",
            "Content_Type",
            "a!b",
            "x-ankusa-tenant",
            "proxy-authorization"
        ]))
        .expect_err("problems");
        assert_eq!(
            e,
            [
                "sink option `forward_headers`: \"host\": a hop-by-hop, framing or relay header, never forwarded",
                "sink option `forward_headers`: \"content-type\": the sink carries the content type already",
                "sink option `forward_headers`: \"ankusa_tenant\" is a name the kafka sink uses itself",
                "sink option `forward_headers`: \"content_type\" is a name the kafka sink uses itself",
                "sink option `forward_headers`: \"a!b\" has a `!`",
                "sink option `forward_headers`: \"x-ankusa-tenant\": a hop-by-hop, framing or relay header, never forwarded",
                "sink option `forward_headers`: \"proxy-authorization\": a hop-by-hop, framing or relay header, never forwarded",
                "sink option `forward_headers`: 7 headers listed; a kafka message carries at most 3 besides the sink's own",
            ]
        );
        let long = "x".repeat(21);
        assert_eq!(
            read(serde_json::json!([long])),
            Err(vec![format!(
                "sink option `forward_headers`: \"{long}\" is 21 bytes, more than the 20 of a kafka name"
            )])
        );
    }

    #[test]
    fn listed_headers_in_list_order_case_insensitive_and_joined() {
        let stored = h(&[
            ("X-GitHub-Event", "push"),
            ("X-Other", "o"),
            ("x-github-delivery", "d1"),
            ("Via", "a"),
            ("via", "b"),
        ]);
        let f = ForwardHeaders::Listed(vec![
            "via".into(),
            "x-github-event".into(),
            "x-missing".into(),
        ])
        .plan(&TEST, &stored, Room::UNLIMITED);
        assert_eq!(names(&f), [("via", "a, b"), ("x-github-event", "push")]);
        assert!(f.dropped.is_empty());
        assert_eq!(
            ForwardHeaders::None.plan(&TEST, &stored, Room::UNLIMITED),
            Forwarded::default()
        );
    }

    #[test]
    fn all_skips_never_forwarded_and_drops_what_the_medium_refuses() {
        let stored = h(&[
            ("Host", "relay"),
            ("Content-Type", "application/json"),
            ("Content-Length", "12"),
            ("X-Ankusa-Tenant", "t"),
            ("Proxy-Authorization", "p"),
            ("X-Topic", "apps/grant"),
            ("ankusa_tenant", "spoof"),
            ("a!b", "x"),
            ("x-bin", "\u{1}\r\n"),
            ("x-long", "12345678901"),
            ("X-Test", "true"),
        ]);
        let f = ForwardHeaders::All.plan(&TEST, &stored, Room::UNLIMITED);
        assert_eq!(names(&f), [("x-topic", "apps/grant"), ("x-test", "true")]);
        assert_eq!(
            f.dropped,
            [
                ("ankusa_tenant".to_owned(), DropReason::Name),
                ("a!b".to_owned(), DropReason::Name),
                ("x-bin".to_owned(), DropReason::Value),
                ("x-long".to_owned(), DropReason::ValueTooLong),
            ]
        );
        let bad_utf8 = vec![(b"x-v".to_vec(), vec![0xff, 0xfe])];
        assert_eq!(
            ForwardHeaders::All
                .plan(&TEST, &bad_utf8, Room::UNLIMITED)
                .dropped,
            [("x-v".to_owned(), DropReason::Value)]
        );
        let mut bytes_medium = TEST;
        bytes_medium.value_ok = any_value;
        assert_eq!(
            ForwardHeaders::All
                .plan(&bytes_medium, &bad_utf8, Room::UNLIMITED)
                .headers,
            [("x-v".to_owned(), vec![0xff, 0xfe])]
        );
    }

    #[test]
    fn count_and_bytes_limits_drop_and_later_small_headers_still_fit() {
        let stored = h(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]);
        // The medium's count (3).
        let f = ForwardHeaders::All.plan(&TEST, &stored, Room::UNLIMITED);
        assert_eq!(names(&f), [("a", "1"), ("b", "2"), ("c", "3")]);
        assert_eq!(f.dropped, [("d".to_owned(), DropReason::Count)]);
        // The message's room.
        let f = ForwardHeaders::All.plan(
            &TEST,
            &stored,
            Room {
                count: 1,
                bytes: usize::MAX,
            },
        );
        assert_eq!(names(&f), [("a", "1")]);
        assert_eq!(f.dropped.len(), 3);
        let stored = h(&[("x-big", "0123456789"), ("x-s", "1"), ("x-t", "2")]);
        // 15 bytes of room: x-big (15) fits alone; with 14, x-s and x-t do.
        let f = ForwardHeaders::All.plan(
            &TEST,
            &stored,
            Room {
                count: 9,
                bytes: 15,
            },
        );
        assert_eq!(names(&f), [("x-big", "0123456789")]);
        assert_eq!(
            f.dropped,
            [
                ("x-s".to_owned(), DropReason::Size),
                ("x-t".to_owned(), DropReason::Size)
            ]
        );
        let f = ForwardHeaders::All.plan(
            &TEST,
            &stored,
            Room {
                count: 9,
                bytes: 14,
            },
        );
        assert_eq!(names(&f), [("x-s", "1"), ("x-t", "2")]);
        assert_eq!(f.dropped, [("x-big".to_owned(), DropReason::Size)]);
        // The medium's total (40 bytes).
        let stored = h(&[
            ("x-11", "0123456789"),
            ("x-22", "0123456789"),
            ("x-33", "0123456789"),
        ]);
        let f = ForwardHeaders::All.plan(&TEST, &stored, Room::UNLIMITED);
        assert_eq!(f.headers.len(), 2, "{f:?}");
        assert_eq!(f.dropped, [("x-33".to_owned(), DropReason::Size)]);
    }

    #[test]
    fn select_counts_drops_by_kind() {
        let before = dropped_totals();
        assert_eq!(before.iter().map(|(k, _)| *k).collect::<Vec<_>>(), KINDS);
        let hook = Envelope {
            source: ankusa_keys::SourceId(1),
            received_at_ms: 0,
            method: "POST".into(),
            path: "/hooks/x".into(),
            query: None,
            headers: h(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")]),
            body: Vec::new(),
            dedupe_key: None,
            idempotency_key: [0; 16],
            replay_of: None,
        };
        let ctx = DeliveryCtx {
            tenant: "t".into(),
            source: "s".into(),
            sink_name: "k".into(),
            sink: ankusa_keys::SinkIx(0),
            seq: ankusa_keys::Seq(1),
            attempt: 1,
            idempotency_key: crate::uuid_text(&[0; 16]),
            ordering_key: None,
            lane_hex: None,
            lane_seq: None,
            ordered: false,
            received_at_ms: 0,
            content_type: None,
            response_body_max_bytes: 0,
        };
        let sent = ForwardHeaders::All.select(&TEST, &hook, &ctx, Room::UNLIMITED);
        assert_eq!(sent.len(), 3);
        let after = dropped_totals();
        let kafka =
            |t: &[(&str, u64)]| t.iter().find(|(k, _)| *k == "kafka").map_or(0, |(_, n)| *n);
        // Other tests of this binary may count kafka drops at the same time.
        assert!(
            kafka(&after) >= kafka(&before) + 2,
            "{before:?} -> {after:?}"
        );
    }
}
