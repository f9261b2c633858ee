//! One sink entry: the core keys (`type`, `name`, `ordered`, `ordering_key`)
//! and the rejections of ADR 0004 sections 1-2, the sink's own options (with
//! `env:` resolved), and the typed options of `http` and `file`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml_ng::{Mapping, Value};

use crate::defaults as d;
use crate::error::{Problems, Scope};
use crate::model::{
    DeadLetterLane, FileSink, FilterCondition, FilterTest, HeaderAction, HeaderPolicy, HttpSink,
    KeySource, Order, OrderingKey, RateLimit, Retry, SinkEntry, SinkKind, SinkRetry, TypedOptions,
};
use crate::secret::{self, EnvLookup, Secret, SecretOrigin};
use crate::validate::{check_header_name, check_name, json_path};

/// What a sink entry needs to know of its source.
pub(crate) struct SourceCtx<'a> {
    pub source_name: &'a str,
    /// The effective store_headers policy.
    pub store_headers: &'a HeaderPolicy,
    /// Whether that policy is the source's own override.
    pub overridden: bool,
    pub env: EnvLookup<'a>,
    /// The global `retry` section, which a sink entry's `retry:` overrides.
    pub retry: &'a Retry,
}

pub(crate) fn scope_of(source_name: &str, sink: &str, kind: &str) -> Scope {
    Scope::Sink {
        source_name: source_name.to_owned(),
        sink: sink.to_owned(),
        kind: kind.to_owned(),
    }
}

/// The keys of a sink entry that core reads itself (docs/design.md section
/// 7); every other key is the adapter's own option.
pub const CORE_KEYS: [&str; 11] = [
    "type",
    "name",
    "ordered",
    "ordering_key",
    "paused",
    "retry",
    "filter",
    "rate_limit",
    "transform",
    "auto_pause_after_ms",
    "dead_letter",
];
const KEY_FORMS: &str = "{header: NAME} or {json: a.b.c}";

/// Builds entry `index` of a source's `sinks`; `None` when it is too broken
/// to have a type (the problems say why).
pub(crate) fn entry(
    ctx: &SourceCtx<'_>,
    index: u16,
    raw: &Mapping,
    p: &mut Problems,
) -> Option<SinkEntry> {
    // `<<: *anchor` merge keys: one entry can reuse another's options.
    let mut merged = Value::Mapping(raw.clone());
    if let Err(e) = merged.apply_merge() {
        let scope = scope_of(ctx.source_name, &format!("sink-{index}"), "?");
        p.push(&scope, "<<", format!("cannot merge: {e}"));
        return None;
    }
    let raw = merged.as_mapping().unwrap_or(raw);
    let type_text = match raw.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        _ => None,
    };
    let kind = type_text.and_then(SinkKind::parse);
    let kind_text = type_text.unwrap_or("?");
    let given_name = raw.get("name");
    let name = match given_name {
        Some(Value::String(n)) => n.clone(),
        _ => format!("{}-{index}", kind.map_or("sink", SinkKind::as_str)),
    };
    let scope = scope_of(ctx.source_name, &name, kind_text);

    match (raw.get("type"), kind) {
        (None, _) => p.push(&scope, "type", format!("required: one of {}", kinds_list())),
        (Some(_), None) => p.push(
            &scope,
            "type",
            format!(
                "unknown sink type {}: one of {}",
                show(raw.get("type")),
                kinds_list()
            ),
        ),
        (Some(_), Some(_)) => {}
    }
    match given_name {
        None => {}
        Some(Value::String(n)) => {
            if let Err(m) = check_name(n) {
                p.push(&scope, "name", m);
            }
        }
        Some(other) => p.push(
            &scope,
            "name",
            format!("must be a string, found {}", show(Some(other))),
        ),
    }
    for k in raw.keys() {
        if !matches!(k, Value::String(_)) {
            p.push(&scope, key_text(k), "option names must be strings");
        }
    }
    let kind = kind?;

    let order = order(ctx, kind, raw, &scope, p);
    let paused = match raw.get("paused") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            p.push(
                &scope,
                "paused",
                format!("must be true or false, found {}", show(Some(other))),
            );
            false
        }
    };
    let rate_limit = raw.get("rate_limit").and_then(|v| rate_limit(v, &scope, p));
    let auto_pause_after_ms = raw
        .get("auto_pause_after_ms")
        .and_then(|v| auto_pause_after(v, &scope, p));
    let dead_letter = raw.get("dead_letter").map_or(DeadLetterLane::Release, |v| {
        dead_letter(v, order.is_ordered(), &scope, p)
    });
    let filter = match raw.get("filter") {
        None => Vec::new(),
        Some(v) => filter(ctx, v, &scope, p),
    };
    let transform = raw.get("transform").and_then(|v| transform(v, &scope, p));
    let keep_legacy_key = kind == SinkKind::Pubsub && !order.is_ordered();
    let retry = retry(ctx.retry, kind, raw, &scope, p);

    // The sink's own options: the entry less the keys core reads, `env:`
    // resolved everywhere.
    let mut options = Mapping::new();
    for (k, v) in raw {
        let key = key_text(k);
        let core = CORE_KEYS.contains(&key.as_str()) && !(keep_legacy_key && key == "ordering_key");
        if core {
            continue;
        }
        // A map option (http headers, kafka properties, the http sink's
        // `auth`) resolves entry by entry, at every depth: an unset secret
        // is named by its path (`headers.<entry>`,
        // `auth.basic.password`), and the other entries still reach the
        // sink's own checks.
        if let Value::Mapping(entries) = v {
            let mut resolved = Mapping::new();
            for (ek, ev) in entries {
                let path = format!("{key}.{}", key_text(ek));
                if let Some(ev) = resolve_entry(ev, &path, ctx.env, &scope, p) {
                    resolved.insert(ek.clone(), ev);
                }
            }
            options.insert(k.clone(), Value::Mapping(resolved));
            continue;
        }
        match resolve_env(v, ctx.env) {
            Ok(v) => {
                options.insert(k.clone(), v);
            }
            Err(m) => p.push(&scope, key, m),
        }
    }

    // A queue_url whose env: failed to resolve is already reported.
    let unresolved = raw.get("queue_url").is_some() && options.get("queue_url").is_none();
    if kind == SinkKind::Sqs && order.is_ordered() && !unresolved {
        let fifo =
            matches!(options.get("queue_url"), Some(Value::String(u)) if u.ends_with(".fifo"));
        if !fifo {
            let found = match options.get("queue_url") {
                None => ", and queue_url is missing".to_owned(),
                Some(Value::String(u)) => format!("; queue_url is \"{}\"", secret::redact_url(u)),
                Some(other) => format!("; queue_url is {}", show(Some(other))),
            };
            p.push(
                &scope,
                "ordered",
                format!("requires a FIFO queue (queue_url must end in .fifo){found}"),
            );
        }
    }

    if !matches!(kind, SinkKind::Http | SinkKind::File) {
        forward_headers_kept(ctx, &options, &scope, p);
    }
    numbers_bounded(kind, &options, &scope, p);

    let typed = match kind {
        SinkKind::Http => http(raw, &options, &scope, p).map(TypedOptions::Http),
        SinkKind::File => file(&options, &scope, p).map(TypedOptions::File),
        _ => Some(TypedOptions::Unchecked),
    }
    .unwrap_or(TypedOptions::Unchecked);

    Some(SinkEntry {
        name,
        kind,
        index,
        order,
        paused,
        rate_limit,
        retry,
        options,
        typed,
        filter,
        transform,
        auto_pause_after_ms,
        dead_letter,
    })
}

/// `dead_letter: release | hold` (ADR 0004 section 8): only on an ordered
/// entry, whose lanes it is about.
fn dead_letter(v: &Value, ordered: bool, scope: &Scope, p: &mut Problems) -> DeadLetterLane {
    let mode = match v.as_str() {
        Some("release") => DeadLetterLane::Release,
        Some("hold") => DeadLetterLane::Hold,
        _ => {
            p.push(
                scope,
                "dead_letter",
                format!(
                    "must be release (a dead-lettered hook frees its ordering key) or hold (the key's later hooks wait until it is revived or dropped), found {}",
                    show(Some(v))
                ),
            );
            return DeadLetterLane::Release;
        }
    };
    if !ordered && mode == DeadLetterLane::Hold {
        p.push(
            scope,
            "dead_letter",
            "hold requires ordered: true (it holds an ordering key's lane; an unordered sink has none)",
        );
    }
    mode
}

/// `auto_pause_after_ms` (docs/design.md section 5, "Notifications"): whole
/// milliseconds within [`crate::limits::AUTO_PAUSE_AFTER_MS`]. Under a
/// second a blip would pause a sink; past the most, a unit mistake (a sink
/// failing every attempt for a month is a pause that came too late).
fn auto_pause_after(v: &Value, scope: &Scope, p: &mut Problems) -> Option<u64> {
    let (least, most) = crate::limits::AUTO_PAUSE_AFTER_MS;
    match v.as_u64() {
        Some(n) if (least..=most).contains(&n) => Some(n),
        _ => {
            p.push(
                scope,
                "auto_pause_after_ms",
                format!(
                    "must be whole milliseconds from {least} (1 s) to {most} (30 days): how long every attempt must fail before the sink is paused, found {}",
                    show(Some(v))
                ),
            );
            None
        }
    }
}

/// The numeric options of the sinks' own that have an upper bound
/// ([`crate::limits`]), by kind: `timeout_ms` of every kind that takes one,
/// a redis sink's `maxlen`, an sqs sink's `max_message_bytes`. Their other
/// checks (a whole number, the lower bounds) are the sinks crate's, through
/// the load check; only a whole number above its bound is refused here, so
/// `check-config` and `serve` refuse it by name even without that check.
fn numbers_bounded(kind: SinkKind, options: &Mapping, scope: &Scope, p: &mut Problems) {
    let bounded: &[(&str, u64)] = match kind {
        SinkKind::File => &[],
        SinkKind::Redis => &[
            ("timeout_ms", crate::limits::SINK_TIMEOUT_MS),
            ("maxlen", crate::limits::REDIS_MAXLEN),
        ],
        SinkKind::Sqs => &[
            ("timeout_ms", crate::limits::SINK_TIMEOUT_MS),
            ("max_message_bytes", crate::limits::SQS_MAX_MESSAGE_BYTES),
        ],
        _ => &[("timeout_ms", crate::limits::SINK_TIMEOUT_MS)],
    };
    for (option, limit) in bounded {
        if let Some(n) = options.get(*option).and_then(Value::as_u64)
            && n > *limit
        {
            crate::validate::above(scope, option, n, limit, p);
        }
    }
}

/// The most `rate_limit.per_second` and `rate_limit.burst` may be.
const RATE_LIMIT_MAX: u32 = 1_000_000;
/// The least `rate_limit.per_second` may be: one hook in 1,000 s. A slower
/// rate times the largest burst would not fit the limiter's nanosecond
/// arithmetic (584 years), and is a paused sink in all but name.
const RATE_LIMIT_MIN: f64 = 0.001;

/// `rate_limit: {per_second: N, burst: M}` (docs/design.md section 5, "Rate
/// limit"); every problem reported, `None` when any.
fn rate_limit(v: &Value, scope: &Scope, p: &mut Problems) -> Option<RateLimit> {
    const FORM: &str = "{per_second: N, burst: M} (hooks per second, burst optional)";
    let Value::Mapping(m) = v else {
        p.push(
            scope,
            "rate_limit",
            format!("must be {FORM}, found {}", show(Some(v))),
        );
        return None;
    };
    let mut ok = true;
    for k in m.keys() {
        let key = key_text(k);
        if key != "per_second" && key != "burst" {
            p.push(
                scope,
                format!("rate_limit.{key}"),
                "unknown option of rate_limit (its options: per_second, burst)",
            );
            ok = false;
        }
    }
    let per_second = match m.get("per_second") {
        None => {
            p.push(
                scope,
                "rate_limit.per_second",
                format!("required: hooks per second, from {RATE_LIMIT_MIN} to {RATE_LIMIT_MAX}"),
            );
            None
        }
        Some(x) => match x.as_f64() {
            Some(n)
                if n.is_finite() && (RATE_LIMIT_MIN..=f64::from(RATE_LIMIT_MAX)).contains(&n) =>
            {
                Some(n)
            }
            _ => {
                p.push(
                    scope,
                    "rate_limit.per_second",
                    format!("must be a number of hooks per second from {RATE_LIMIT_MIN} (one in 1000 s; pause the sink to stop it) to {RATE_LIMIT_MAX}, found {}", show(Some(x))),
                );
                None
            }
        },
    };
    let burst = match m.get("burst") {
        None => per_second.map(|n| n.ceil().max(1.0) as u32),
        Some(x) => match x.as_u64() {
            Some(n) if (1..=u64::from(RATE_LIMIT_MAX)).contains(&n) => u32::try_from(n).ok(),
            _ => {
                p.push(
                    scope,
                    "rate_limit.burst",
                    format!(
                        "must be a whole number of hooks from 1 to {RATE_LIMIT_MAX}, found {}",
                        show(Some(x))
                    ),
                );
                None
            }
        },
    };
    match (ok, per_second, burst) {
        (true, Some(per_second), Some(burst)) => Some(RateLimit { per_second, burst }),
        _ => None,
    }
}

/// The options of a sink entry's `transform:`.
const TRANSFORM_OPTIONS: [&str; 3] = ["jq", "timeout_ms", "max_output_bytes"];

/// `transform: {jq: PROGRAM, timeout_ms: N, max_output_bytes: N}`
/// (docs/design.md section 6, "Transforms"): the program compiled here, so
/// one that does not compile is refused with jaq's words, as
/// `transform.jq`; every problem reported, `None` when any.
fn transform(
    v: &Value,
    scope: &Scope,
    p: &mut Problems,
) -> Option<std::sync::Arc<ankusa_transform::Program>> {
    use ankusa_transform as t;
    const FORM: &str = "{jq: PROGRAM} (optionally timeout_ms, max_output_bytes)";
    let Value::Mapping(m) = v else {
        p.push(
            scope,
            "transform",
            format!("must be {FORM}, found {}", show(Some(v))),
        );
        return None;
    };
    let before = p.0.len();
    for k in m.keys() {
        let key = key_text(k);
        if !TRANSFORM_OPTIONS.contains(&key.as_str()) {
            p.push(
                scope,
                format!("transform.{key}"),
                format!(
                    "unknown option of transform (its options: {})",
                    TRANSFORM_OPTIONS.join(", ")
                ),
            );
        }
    }
    let mut bounded = |option: &str, default: u64, max: u64, unit: &str| match m.get(option) {
        None => default,
        Some(x) => match x.as_u64() {
            Some(n) if (1..=max).contains(&n) => n,
            _ => {
                p.push(
                    scope,
                    format!("transform.{option}"),
                    format!(
                        "must be a whole number of {unit} from 1 to {max}, found {}",
                        show(Some(x))
                    ),
                );
                default
            }
        },
    };
    let limits = t::Limits {
        timeout_ms: bounded(
            "timeout_ms",
            t::DEFAULT_TIMEOUT_MS,
            t::MAX_TIMEOUT_MS,
            "milliseconds",
        ),
        max_output_bytes: bounded(
            "max_output_bytes",
            t::DEFAULT_MAX_OUTPUT_BYTES,
            t::MAX_OUTPUT_BYTES,
            "bytes",
        ),
    };
    let program = match m.get("jq") {
        None => {
            p.push(
                scope,
                "transform.jq",
                "required: the jq program whose one output is the body this sink gets",
            );
            None
        }
        Some(Value::String(text)) if text.trim().is_empty() => {
            p.push(
                scope,
                "transform.jq",
                "is empty: write a jq program, or omit transform to deliver the body as received",
            );
            None
        }
        Some(Value::String(text)) => match t::Program::compile(text, limits) {
            Ok(program) => Some(std::sync::Arc::new(program)),
            Err(e) => {
                p.push(scope, "transform.jq", format!("does not compile: {e}"));
                None
            }
        },
        Some(other) => {
            p.push(
                scope,
                "transform.jq",
                format!(
                    "must be a jq program (a string), found {}",
                    show(Some(other))
                ),
            );
            None
        }
    };
    if p.0.len() > before {
        return None;
    }
    program
}

/// The options of a sink entry's `retry:` (docs/design.md section 5, "Retry
/// policy").
const RETRY_OPTIONS: [&str; 6] = [
    "base_ms",
    "max_ms",
    "max_elapsed_ms",
    "retry_after_max_ms",
    "retry_statuses",
    "grace_ms",
];
/// The longest duration a `retry:` option takes: a year, in ms (a larger one
/// is a unit mistake, and sums of times stay far from overflowing).
const RETRY_MS_LIMIT: u64 = crate::limits::RETRY_MS;

/// A sink entry's `retry:`: the global section's values with the entry's
/// overrides, field by field. Every problem is reported as `retry.<option>`.
fn retry(
    global: &Retry,
    kind: SinkKind,
    raw: &Mapping,
    scope: &Scope,
    p: &mut Problems,
) -> SinkRetry {
    let mut r = SinkRetry::from_global(global);
    let Some(v) = raw.get("retry") else {
        return r;
    };
    r.overridden = true;
    let Value::Mapping(m) = v else {
        p.push(
            scope,
            "retry",
            format!(
                "must be a map of retry options ({}), found {}",
                RETRY_OPTIONS.join(", "),
                show(Some(v))
            ),
        );
        return r;
    };
    let (mut base_set, mut max_set, mut after_set) = (false, false, false);
    for (k, val) in m {
        let key = key_text(k);
        let option = format!("retry.{key}");
        match key.as_str() {
            "base_ms" => {
                if let Some(n) = retry_ms(val, &option, false, scope, p) {
                    r.base_ms = n;
                    base_set = true;
                }
            }
            "max_ms" => {
                if let Some(n) = retry_ms(val, &option, false, scope, p) {
                    r.max_ms = n;
                    max_set = true;
                }
            }
            "max_elapsed_ms" => {
                if let Some(n) = retry_ms(val, &option, false, scope, p) {
                    r.max_elapsed_ms = n;
                }
            }
            "retry_after_max_ms" => {
                if let Some(n) = retry_ms(val, &option, true, scope, p) {
                    r.retry_after_max_ms = n;
                    after_set = true;
                }
            }
            "grace_ms" => {
                if kind != SinkKind::Http {
                    p.push(scope, option, http_only(kind));
                } else if let Some(n) = retry_ms(val, &option, true, scope, p) {
                    r.grace_ms = (n > 0).then_some(n);
                }
            }
            "retry_statuses" => {
                if kind != SinkKind::Http {
                    p.push(scope, option, http_only(kind));
                } else {
                    r.retry_statuses = retry_statuses(val, &option, scope, p);
                }
            }
            _ => p.push(
                scope,
                option,
                format!(
                    "unknown retry option (the options: {})",
                    RETRY_OPTIONS.join(", ")
                ),
            ),
        }
    }
    if !after_set {
        r.retry_after_max_ms = global.retry_after_max_ms.unwrap_or(r.max_ms);
    }
    if (base_set || max_set) && r.base_ms > r.max_ms {
        let global_of = |set: bool, name: &str| {
            if set {
                String::new()
            } else {
                format!(" (the global retry.{name})")
            }
        };
        let option = if base_set {
            "retry.base_ms"
        } else {
            "retry.max_ms"
        };
        p.push(
            scope,
            option,
            format!(
                "base_ms {}{} is greater than max_ms {}{}: the first backoff cannot exceed the largest",
                r.base_ms,
                global_of(base_set, "base_ms"),
                r.max_ms,
                global_of(max_set, "max_ms"),
            ),
        );
    }
    if let Some(g) = r.grace_ms
        && g > r.max_elapsed_ms
    {
        p.push(
            scope,
            "retry.grace_ms",
            format!(
                "{g} is longer than the retry horizon max_elapsed_ms ({}): the horizon dead-letters a row before its grace period ends",
                r.max_elapsed_ms
            ),
        );
    }
    r
}

fn http_only(kind: SinkKind) -> String {
    format!(
        "only an http sink takes it (HTTP statuses); a {} sink's failures are retried by their kind",
        kind.as_str()
    )
}

/// A duration of `retry:` in ms: a whole number, above 0 unless `zero_ok`, at
/// most [`RETRY_MS_LIMIT`].
fn retry_ms(
    v: &Value,
    option: &str,
    zero_ok: bool,
    scope: &Scope,
    p: &mut Problems,
) -> Option<u64> {
    let above = if zero_ok { "0 or more" } else { "above 0" };
    match v.as_u64() {
        Some(0) if !zero_ok => {
            p.push(scope, option, "must be greater than 0");
            None
        }
        Some(n) if n > RETRY_MS_LIMIT => {
            p.push(
                scope,
                option,
                format!("{n} is more than a year ({RETRY_MS_LIMIT} ms): write milliseconds"),
            );
            None
        }
        Some(n) => Some(n),
        None => {
            p.push(
                scope,
                option,
                format!(
                    "must be a whole number of milliseconds, {above}, found {}",
                    show(Some(v))
                ),
            );
            None
        }
    }
}

/// `retry_statuses`: a list of HTTP error statuses (400-599) and the classes
/// "4xx" and "5xx", as a sorted list without repeats.
fn retry_statuses(v: &Value, option: &str, scope: &Scope, p: &mut Problems) -> Option<Vec<u16>> {
    let Value::Sequence(items) = v else {
        p.push(
            scope,
            option,
            format!(
                "must be a list of HTTP statuses (400-599) or \"4xx\" / \"5xx\", e.g. [408, 425, 429, 404, \"5xx\"]; found {}",
                show(Some(v))
            ),
        );
        return None;
    };
    if items.is_empty() {
        p.push(
            scope,
            option,
            "is empty: nothing would be retried, not even a 503 or a 429; leave it out for the default [408, 425, 429, \"5xx\"]",
        );
        return None;
    }
    let mut out: Vec<u16> = Vec::new();
    // Each item listed so far, as written, with the statuses it stands for.
    let mut listed: Vec<(String, Vec<u16>)> = Vec::new();
    let mut ok = true;
    for item in items {
        let found: Result<Vec<u16>, String> = match item {
            Value::Number(n) => match n.as_u64() {
                Some(s @ 400..=599) => Ok(vec![u16::try_from(s).unwrap_or(599)]),
                Some(s @ 200..=299) => Err(format!(
                    "{s} is a success (2xx): it is delivered, never retried"
                )),
                _ => Err(format!(
                    "{} is not an HTTP error status: list statuses from 400 to 599",
                    show(Some(item))
                )),
            },
            Value::String(c) if c.eq_ignore_ascii_case("4xx") => Ok((400..=499).collect()),
            Value::String(c) if c.eq_ignore_ascii_case("5xx") => Ok((500..=599).collect()),
            other => Err(format!(
                "{} is not an HTTP error status: list statuses from 400 to 599, or \"4xx\" / \"5xx\"",
                show(Some(other))
            )),
        };
        match found {
            Ok(list) => {
                let this = show(Some(item));
                if let Some((before, _)) = listed
                    .iter()
                    .find(|(_, l)| list.iter().any(|s| l.contains(s)))
                {
                    let message = if before.eq_ignore_ascii_case(&this) {
                        format!("{this} is listed twice")
                    } else if list.len() == 1 {
                        format!("{this} is already covered by {before}")
                    } else {
                        format!("{this} covers {before}, listed before it: list one of them")
                    };
                    p.push(scope, option, message);
                    ok = false;
                }
                out.extend(list.iter().copied());
                listed.push((this, list));
            }
            Err(m) => {
                p.push(scope, option, m);
                ok = false;
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    ok.then_some(out)
}

/// The forms of a filter condition, for messages.
const FILTER_FORMS: &str = "{header: NAME} or {json: a.b.c} with one of equals: TEXT, one_of: [TEXT, ...], prefix: TEXT, exists: true|false";
const FILTER_TESTS: [&str; 4] = ["equals", "one_of", "prefix", "exists"];

/// `filter` (docs/design.md section 10, "Filters per sink"): one condition (a
/// map) or a list of conditions that must all match. Every problem is reported,
/// each under `filter` (or `filter[i]` for the i-th condition of a list).
fn filter(ctx: &SourceCtx<'_>, v: &Value, scope: &Scope, p: &mut Problems) -> Vec<FilterCondition> {
    match v {
        Value::Mapping(m) => condition(ctx, m, "filter", scope, p).into_iter().collect(),
        Value::Sequence(items) if items.is_empty() => {
            p.push(
                scope,
                "filter",
                "an empty list: omit filter to take every hook",
            );
            Vec::new()
        }
        Value::Sequence(items) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let option = format!("filter[{i}]");
                match item {
                    Value::Mapping(m) => out.extend(condition(ctx, m, &option, scope, p)),
                    other => p.push(
                        scope,
                        option,
                        format!(
                            "must be a condition, {FILTER_FORMS}; found {}",
                            show(Some(other))
                        ),
                    ),
                }
            }
            out
        }
        other => {
            p.push(
                scope,
                "filter",
                format!(
                    "must be a condition, {FILTER_FORMS}, or a list of conditions that must all match; found {}",
                    show(Some(other))
                ),
            );
            Vec::new()
        }
    }
}

/// One filter condition; `None` after reporting its problems.
fn condition(
    ctx: &SourceCtx<'_>,
    m: &Mapping,
    option: &str,
    scope: &Scope,
    p: &mut Problems,
) -> Option<FilterCondition> {
    let before = p.0.len();
    for k in m.keys() {
        let key = key_text(k);
        if !matches!(key.as_str(), "header" | "json") && !FILTER_TESTS.contains(&key.as_str()) {
            p.push(
                scope,
                option,
                format!("unknown key \"{key}\" of a filter condition: write {FILTER_FORMS}"),
            );
        }
    }
    let on = match (m.get("header"), m.get("json")) {
        (Some(_), Some(_)) => {
            p.push(
                scope,
                option,
                "has both header and json: a condition reads one (a list of conditions must all match)",
            );
            None
        }
        (None, None) => {
            p.push(
                scope,
                option,
                format!("reads nothing: write {FILTER_FORMS}"),
            );
            None
        }
        (Some(Value::String(h)), None) => match check_header_name(h) {
            Err(msg) => {
                p.push(scope, option, format!("header: {msg}"));
                None
            }
            Ok(()) => {
                let h = h.to_ascii_lowercase();
                kept_header(ctx, &h, option, "filter", scope, p);
                Some(KeySource::Header(h))
            }
        },
        (None, Some(Value::String(j))) => match json_path(j) {
            Err(msg) => {
                p.push(scope, option, format!("json: {msg}"));
                None
            }
            Ok(path) => Some(KeySource::Json(path)),
        },
        (Some(other), None) => {
            p.push(
                scope,
                option,
                format!("header: must be a header name, found {}", show(Some(other))),
            );
            None
        }
        (None, Some(other)) => {
            p.push(
                scope,
                option,
                format!("json: must be a dot path, found {}", show(Some(other))),
            );
            None
        }
    };
    let given: Vec<&str> = FILTER_TESTS
        .iter()
        .copied()
        .filter(|t| m.get(*t).is_some())
        .collect();
    let test = match given.as_slice() {
        [] => {
            p.push(
                scope,
                option,
                format!("has no test: add one of {}", FILTER_TESTS.join(", ")),
            );
            None
        }
        [one] => filter_test(one, m.get(*one).unwrap_or(&Value::Null), option, scope, p),
        many => {
            p.push(
                scope,
                option,
                format!(
                    "has {} tests ({}): give one per condition (a list of conditions must all match)",
                    many.len(),
                    many.join(", ")
                ),
            );
            None
        }
    };
    if p.0.len() > before {
        return None;
    }
    Some(FilterCondition {
        on: on?,
        test: test?,
    })
}

/// The test `name` of a filter condition, its value `v`.
fn filter_test(
    name: &str,
    v: &Value,
    option: &str,
    scope: &Scope,
    p: &mut Problems,
) -> Option<FilterTest> {
    let text = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        other => Err(format!(
            "must be a string, found {}: a filter compares header values and JSON strings (quote a number or a boolean: \"42\")",
            show(Some(other))
        )),
    };
    let r = match name {
        "equals" => text(v).map(FilterTest::Equals),
        "prefix" => text(v).and_then(|s| {
            if s.is_empty() {
                Err(
                    "is empty, so it would match every string: use exists: true, or omit filter"
                        .to_owned(),
                )
            } else {
                Ok(FilterTest::Prefix(s))
            }
        }),
        "one_of" => match v {
            Value::Sequence(items) if items.is_empty() => {
                Err("is empty, so nothing would match: list at least one value".to_owned())
            }
            Value::Sequence(items) => items
                .iter()
                .enumerate()
                .map(|(i, x)| text(x).map_err(|m| format!("value {i} {m}")))
                .collect::<Result<Vec<_>, _>>()
                .map(FilterTest::OneOf),
            other => Err(format!(
                "must be a list of strings, found {}",
                show(Some(other))
            )),
        },
        _ => match v {
            Value::Bool(b) => Ok(FilterTest::Exists(*b)),
            other => Err(format!(
                "must be true or false, found {}",
                show(Some(other))
            )),
        },
    };
    r.map_err(|m| p.push(scope, option, format!("{name} {m}")))
        .ok()
}

/// The store_headers rule of ADR 0004 section 2 for a header that `option`
/// reads: it must be kept as received, or a replay or a quarantine release
/// (which resolve from the stored headers) would decide otherwise than ingest.
/// Whose store_headers policy drops or hashes a header, and which it does,
/// for the messages that refuse such a header (ordering_key, filter,
/// forward_headers).
fn policy_words(ctx: &SourceCtx<'_>, action: HeaderAction) -> (&'static str, &'static str) {
    let whose = if ctx.overridden {
        "the source's store_headers override"
    } else {
        "the instance store_headers policy"
    };
    let verb = if action == HeaderAction::Drop {
        "drops"
    } else {
        "hashes"
    };
    (whose, verb)
}

fn kept_header(
    ctx: &SourceCtx<'_>,
    h: &str,
    option: &str,
    what: &str,
    scope: &Scope,
    p: &mut Problems,
) {
    let action = ctx.store_headers.action(h);
    if action == HeaderAction::Keep {
        return;
    }
    let (whose, verb) = policy_words(ctx, action);
    p.push(
        scope,
        option,
        format!(
            "header \"{h}\" is not kept by the store: {whose} {verb} it, so a quarantine release or a replay could not apply the same {what} (docs/design.md section 5, \"Quarantine\"); set store_headers headers.{h}: keep"
        ),
    );
}

/// `ordered` and `ordering_key` (ADR 0004 section 1), and the store_headers
/// rule of section 2.
fn order(
    ctx: &SourceCtx<'_>,
    kind: SinkKind,
    raw: &Mapping,
    scope: &Scope,
    p: &mut Problems,
) -> Order {
    let ordered = match raw.get("ordered") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            p.push(
                scope,
                "ordered",
                format!("must be true or false, found {}", show(Some(other))),
            );
            false
        }
    };
    let key = raw.get("ordering_key");
    if !ordered {
        match key {
            None => {}
            // The legacy Pub/Sub form (ADR 0004 section 1): a string, kept in
            // the sink's options and passed to the sink.
            Some(Value::String(_)) if kind == SinkKind::Pubsub => {}
            Some(_) if kind == SinkKind::Pubsub => p.push(
                scope,
                "ordering_key",
                format!(
                    "a {KEY_FORMS} key requires ordered: true; without it a pubsub ordering_key is the legacy form, a plain string passed to the sink"
                ),
            ),
            Some(_) => p.push(
                scope,
                "ordering_key",
                "requires ordered: true (only a pubsub sink takes an ordering_key without it)",
            ),
        }
        return Order::Unordered;
    }
    let Some(key) = key else {
        // No key: every hook goes to the sink's keyless lane (ADR 0004
        // section 2).
        return Order::Ordered { key: None };
    };
    let key = match key {
        Value::Sequence(places) => ordering_key_places(places),
        one => ordering_key(one),
    };
    match key {
        Err(m) => {
            p.push(scope, "ordering_key", m);
            Order::Ordered { key: None }
        }
        Ok(k) => {
            // Each header place, with the option that names it: a list's
            // place by its index.
            let headers: Vec<(String, &String)> = match &k {
                OrderingKey::Header(h) => vec![("ordering_key".to_owned(), h)],
                OrderingKey::FirstOf(places) => places
                    .iter()
                    .enumerate()
                    .filter_map(|(i, k)| match k {
                        OrderingKey::Header(h) => Some((format!("ordering_key[{i}]"), h)),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            for (option, h) in headers {
                let action = ctx.store_headers.action(h);
                if action != HeaderAction::Keep {
                    let (whose, verb) = policy_words(ctx, action);
                    p.push(
                        scope,
                        option,
                        format!(
                            "header \"{h}\" is not kept by the store: {whose} {verb} it, so a replay could not resolve the same key (docs/adr-0004-ordering-lanes.md section 2); set store_headers headers.{h}: keep"
                        ),
                    );
                }
            }
            Order::Ordered { key: Some(k) }
        }
    }
}

/// An ordering key given as a list of places tried in order (ADR 0004
/// section 1): each `{header: NAME}` or `{json: a.b.c}`, at least one and at
/// most [`d::ORDERING_KEY_PLACES`]; a list of one is that place.
fn ordering_key_places(places: &[Value]) -> Result<OrderingKey, String> {
    if places.is_empty() {
        return Err(format!(
            "an empty list; give one or more of {KEY_FORMS}, tried in order"
        ));
    }
    if places.len() > d::ORDERING_KEY_PLACES {
        return Err(format!(
            "{} places; at most {} are tried",
            places.len(),
            d::ORDERING_KEY_PLACES
        ));
    }
    let mut out = Vec::with_capacity(places.len());
    for (i, place) in places.iter().enumerate() {
        if matches!(place, Value::Sequence(_)) {
            return Err(format!("place {i} is a list; a place is {KEY_FORMS}"));
        }
        out.push(ordering_key(place).map_err(|m| format!("place {i}: {m}"))?);
    }
    Ok(if out.len() == 1 {
        out.remove(0)
    } else {
        OrderingKey::FirstOf(out)
    })
}

/// The store_headers rule of a broker sink's `forward_headers` (its shape and
/// the medium's limits are the sinks crate's checks): every header it lists
/// must be kept by the source's policy, or it could never travel (a dropped
/// header is not stored; a hashed one is stored as its hash). `all` takes
/// what the policy keeps and needs no check.
fn forward_headers_kept(ctx: &SourceCtx<'_>, options: &Mapping, scope: &Scope, p: &mut Problems) {
    let Some(Value::Sequence(names)) = options.get("forward_headers") else {
        return;
    };
    for name in names.iter().filter_map(Value::as_str) {
        if check_header_name(name).is_err() {
            continue;
        }
        let action = ctx.store_headers.action(name);
        if action == HeaderAction::Keep {
            continue;
        }
        let lower = name.to_ascii_lowercase();
        let (whose, verb) = policy_words(ctx, action);
        p.push(
            scope,
            "forward_headers",
            format!(
                "header \"{lower}\" is not kept by the store: {whose} {verb} it, so it could never travel to the sink; set store_headers headers.{lower}: keep, or leave it out"
            ),
        );
    }
}

/// The ordering key of an ordered sink: `{header: NAME}` or `{json: a.b.c}`.
fn ordering_key(v: &Value) -> Result<OrderingKey, String> {
    match v {
        Value::String(s) => Err(format!(
            "\"{s}\" is a plain string; an ordered sink takes {KEY_FORMS} (YAML cannot express a function key)"
        )),
        Value::Mapping(m) if m.len() == 1 => {
            let (k, val) = m
                .iter()
                .next()
                .ok_or_else(|| format!("must be {KEY_FORMS}"))?;
            let Value::String(text) = val else {
                return Err(format!(
                    "the {} of {KEY_FORMS} must be a string, found {}",
                    key_text(k),
                    show(Some(val))
                ));
            };
            match k.as_str() {
                Some("header") => {
                    check_header_name(text)?;
                    Ok(OrderingKey::Header(text.to_ascii_lowercase()))
                }
                Some("json") => json_path(text).map(OrderingKey::Json),
                _ => Err(format!(
                    "must be {KEY_FORMS}, found key \"{}\"",
                    key_text(k)
                )),
            }
        }
        other => Err(format!("must be {KEY_FORMS}, found {}", show(Some(other)))),
    }
}

/// The http sink's options. `signing`, `tls` and `auth` (docs/design.md
/// section 6) are checked by the sinks crate (`ankusa_sinks::http::signing`,
/// `::tls`, which reads the PEM files, and `::auth`), through the binary's
/// load check; here only `tls`'s paths are (not inside `node.data_dir`) and
/// `auth`'s `env:` secrets resolved.
const HTTP_OPTIONS: [&str; 6] = ["url", "timeout_ms", "headers", "signing", "tls", "auth"];
/// Headers the http sink sets itself (besides `x-ankusa-*`, its metadata): the
/// hook's original content type and the body's framing. The same list as the
/// sinks crate's http adapter, plus `connection`.
const RESERVED_HEADERS: [&str; 5] = [
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
];

fn http(raw: &Mapping, options: &Mapping, scope: &Scope, p: &mut Problems) -> Option<HttpSink> {
    unknown_options(options, &HTTP_OPTIONS, "http", scope, p);
    let url = match options.get("url") {
        None if raw.get("url").is_some() => None, // an unresolved env:, already reported
        None => {
            p.push(
                scope,
                "url",
                "required: the http(s) URL hooks are POSTed to",
            );
            None
        }
        Some(Value::String(u)) => match check_url(u) {
            Ok(()) => Some(u.clone()),
            Err(m) => {
                p.push(scope, "url", m);
                None
            }
        },
        Some(other) => {
            p.push(
                scope,
                "url",
                format!("must be a string, found {}", show(Some(other))),
            );
            None
        }
    };
    let timeout_ms = match options.get("timeout_ms") {
        None => d::HTTP_TIMEOUT_MS,
        Some(v) => match v.as_u64() {
            Some(0) | None => {
                p.push(
                    scope,
                    "timeout_ms",
                    format!(
                        "must be a whole number of milliseconds above 0, found {}",
                        show(Some(v))
                    ),
                );
                d::HTTP_TIMEOUT_MS
            }
            // Above its bound: reported by `numbers_bounded`.
            Some(n) if n > crate::limits::SINK_TIMEOUT_MS => d::HTTP_TIMEOUT_MS,
            Some(n) => n,
        },
    };
    let mut headers = BTreeMap::new();
    match options.get("headers") {
        None => {}
        Some(Value::Mapping(m)) => {
            let raw_headers = raw.get("headers").and_then(Value::as_mapping);
            for (k, v) in m {
                let name = key_text(k);
                let option = format!("headers.{name}");
                let lower = name.to_ascii_lowercase();
                if let Err(msg) = check_header_name(&name) {
                    p.push(scope, option, msg);
                    continue;
                }
                if lower.starts_with("x-ankusa-") || RESERVED_HEADERS.contains(&lower.as_str()) {
                    p.push(
                        scope,
                        option,
                        format!("\"{lower}\" is set by the http sink itself"),
                    );
                    continue;
                }
                let Value::String(value) = v else {
                    p.push(
                        scope,
                        option,
                        format!("must be a string, found {}", show(Some(v))),
                    );
                    continue;
                };
                // The origin is read from the entry as written (`options`
                // has the resolved value).
                let origin = match raw_headers.and_then(|h| h.get(k)).and_then(Value::as_str) {
                    Some(w) if w.starts_with("env:") => {
                        SecretOrigin::Env(w["env:".len()..].to_owned())
                    }
                    _ => SecretOrigin::Literal,
                };
                if headers
                    .insert(lower.clone(), Secret::new(value.clone(), origin))
                    .is_some()
                {
                    p.push(
                        scope,
                        option,
                        format!("header \"{lower}\" is listed twice (names are case-insensitive)"),
                    );
                }
            }
        }
        Some(other) => p.push(
            scope,
            "headers",
            format!(
                "must be a map of header name to value, found {}",
                show(Some(other))
            ),
        ),
    }
    Some(HttpSink {
        url: url?,
        timeout_ms,
        headers,
    })
}

fn file(options: &Mapping, scope: &Scope, p: &mut Problems) -> Option<FileSink> {
    unknown_options(options, &["path"], "file", scope, p);
    match options.get("path") {
        None => {
            p.push(
                scope,
                "path",
                "required: the NDJSON file hooks are appended to",
            );
            None
        }
        Some(Value::String(s)) if s.ends_with('/') => {
            p.push(
                scope,
                "path",
                format!("\"{s}\" names a directory; name the file"),
            );
            None
        }
        Some(Value::String(s)) if !s.is_empty() => Some(FileSink {
            path: PathBuf::from(s),
        }),
        Some(other) => {
            p.push(
                scope,
                "path",
                format!("must be a non-empty string, found {}", show(Some(other))),
            );
            None
        }
    }
}

fn unknown_options(options: &Mapping, known: &[&str], kind: &str, scope: &Scope, p: &mut Problems) {
    for k in options.keys() {
        let key = key_text(k);
        if key == "forward_headers" {
            // The broker sinks' option (sinks/src/forward.rs): these kinds
            // carry every stored header already.
            let carries = if kind == "http" {
                "the http sink forwards every stored header already (less hop-by-hop and framing ones)"
            } else {
                "the file sink writes every stored header in each line already"
            };
            p.push(
                scope,
                key,
                format!("is an option of the broker and cloud sinks; {carries}"),
            );
            continue;
        }
        if RETRY_OPTIONS.contains(&key.as_str()) {
            // Written beside `type` instead of under `retry:`.
            let message = format!(
                "unknown option of a {kind} sink: `{key}` is an option of the entry's `retry:` (write `retry: {{{key}: ...}}`)"
            );
            p.push(scope, key, message);
        } else if !known.contains(&key.as_str()) {
            p.push(
                scope,
                key,
                format!(
                    "unknown option of a {kind} sink (its options: {}; every sink: {})",
                    known.join(", "),
                    CORE_KEYS.join(", ")
                ),
            );
        }
    }
}

/// An `http://` or `https://` URL with a host, no whitespace. The sink's
/// client parses it fully when the sink is built.
fn check_url(u: &str) -> Result<(), String> {
    let shown = secret::redact_url(u);
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .ok_or_else(|| format!("\"{shown}\" is not an http:// or https:// URL"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("\"{shown}\" has no host"));
    }
    if u.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("\"{shown}\" contains whitespace"));
    }
    Ok(())
}

/// Resolves every string `env:NAME` in `v`, the value of the option `path`
/// inside a map option, reporting each one that cannot be resolved under its
/// own path: an entry of a map is then left out (`None`), and an item of a
/// list (the http sink's `signing.secrets`) is left as null, so the other
/// items keep their index for the sink's own checks (which then name the
/// same option, reported once).
fn resolve_entry(
    v: &Value,
    path: &str,
    env: EnvLookup<'_>,
    scope: &Scope,
    p: &mut Problems,
) -> Option<Value> {
    match v {
        Value::String(s) if s.starts_with("env:") => match secret::resolve(s, env) {
            Ok(secret) => Some(Value::String(secret.expose().to_owned())),
            Err(m) => {
                p.push(scope, path, m);
                None
            }
        },
        Value::Sequence(items) => Some(Value::Sequence(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    resolve_entry(x, &format!("{path}[{i}]"), env, scope, p).unwrap_or(Value::Null)
                })
                .collect(),
        )),
        Value::Mapping(m) => {
            let mut out = Mapping::new();
            for (k, x) in m {
                let entry = format!("{path}.{}", key_text(k));
                if let Some(x) = resolve_entry(x, &entry, env, scope, p) {
                    out.insert(k.clone(), x);
                }
            }
            Some(Value::Mapping(out))
        }
        Value::Tagged(t) => {
            let mut t = (**t).clone();
            t.value = resolve_entry(&t.value, path, env, scope, p)?;
            Some(Value::Tagged(Box::new(t)))
        }
        other => Some(other.clone()),
    }
}

/// Resolves every string `env:NAME` in a value, nested ones included.
fn resolve_env(v: &Value, env: EnvLookup<'_>) -> Result<Value, String> {
    Ok(match v {
        Value::String(s) if s.starts_with("env:") => {
            Value::String(secret::resolve(s, env)?.expose().to_owned())
        }
        Value::Sequence(seq) => Value::Sequence(
            seq.iter()
                .map(|x| resolve_env(x, env))
                .collect::<Result<_, _>>()?,
        ),
        Value::Mapping(m) => {
            let mut out = Mapping::new();
            for (k, x) in m {
                out.insert(k.clone(), resolve_env(x, env)?);
            }
            Value::Mapping(out)
        }
        Value::Tagged(t) => {
            let mut t = (**t).clone();
            t.value = resolve_env(&t.value, env)?;
            Value::Tagged(Box::new(t))
        }
        other => other.clone(),
    })
}

fn kinds_list() -> String {
    SinkKind::ALL.map(SinkKind::as_str).join(", ")
}

/// A value, short, for a message.
fn show(v: Option<&Value>) -> String {
    match v {
        None => "nothing".to_owned(),
        Some(Value::String(s)) => format!("\"{s}\""),
        Some(Value::Mapping(_)) => "a map".to_owned(),
        Some(Value::Sequence(_)) => "a list".to_owned(),
        Some(Value::Null) => "null".to_owned(),
        Some(other) => serde_yaml_ng::to_string(other)
            .map_or_else(|_| "a value".to_owned(), |s| s.trim_end().to_owned()),
    }
}

/// A mapping key as text (keys of a sink's own options are strings, checked at
/// load; a nested non-string key is written as YAML).
pub(crate) fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .map_or_else(|_| "?".to_owned(), |s| s.trim_end().to_owned()),
    }
}

/// YAML → JSON for [`SinkEntry::options_json`].
pub(crate) fn yaml_to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                J::from(i)
            } else if let Some(u) = n.as_u64() {
                J::from(u)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(J::Null, J::Number)
            }
        }
        Value::String(s) => J::String(s.clone()),
        Value::Sequence(seq) => J::Array(seq.iter().map(yaml_to_json).collect()),
        Value::Mapping(m) => J::Object(
            m.iter()
                .map(|(k, x)| (key_text(k), yaml_to_json(x)))
                .collect(),
        ),
        Value::Tagged(t) => yaml_to_json(&t.value),
    }
}
