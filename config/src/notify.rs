//! `notify`: the relay's own notifications (docs/design.md section 5,
//! "Notifications", and section 7): where they go, which events each
//! destination wants, the window and thresholds, and the internal tenant and
//! sources that deliver them.
//!
//! A notification is a hook of the relay's own: each destination is an
//! internal source (`_notify-<name>`, one `http` sink entry named after the
//! destination) of the internal tenant [`NOTIFY_TENANT`], so the Writer
//! commits it durably and the pipeline delivers it with the retry policy, the
//! breaker, the dead-letter queue and the restart recovery of any hook. The
//! internal names start with `_`, which no configured name may (they are
//! `A-Z a-z 0-9 _ -` starting with a letter or digit), so they never clash
//! with the file's, and the edge serves no route for them.

use std::collections::{BTreeSet, HashSet};

use serde_yaml_ng::{Mapping, Value};

use crate::defaults as d;
use crate::error::{Problems, Scope};
use crate::limits as max;
use crate::model::{
    HeaderPolicy, OnInvalidSignature, Retry, SinkEntry, Source, Tenant, TenantBinding, Verification,
};
use crate::raw::{RawDestination, RawNotify};
use crate::secret::EnvLookup;
use crate::sink;
use crate::validate::check_name;

/// The internal tenant whose hooks are the relay's notifications.
pub const NOTIFY_TENANT: &str = "_ankusa";

/// The longest destination name: its source, `_notify-<name>`, stays within
/// the 64 characters of every other name.
const DESTINATION_NAME_MAX: usize = 56;

/// Whether `name` (a tenant's or a source's) is one the relay made for itself:
/// it starts with `_`, which no configured name may.
pub fn is_internal(name: &str) -> bool {
    name.starts_with('_')
}

/// The internal source that delivers the notifications of destination
/// `destination`.
pub fn notify_source_name(destination: &str) -> String {
    format!("_notify-{destination}")
}

/// What a destination can be told about (`events:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotifyEvent {
    /// `breaker_opened`: a sink entry's breaker opened for a tenant.
    BreakerOpened,
    /// `breaker_closed`: it closed again (a delivery got through).
    BreakerClosed,
    /// `dead_lettered`: rows of a sink entry were dead-lettered; one summary
    /// per sink entry and tenant per `dead_letter_window_ms`, with the count
    /// and a few samples, never one message per hook.
    DeadLettered,
    /// `tenant_bounds`: a tenant's pending rows or bytes passed
    /// `tenant_bounds_percent` of its queue bounds.
    TenantBounds,
    /// `sink_failing`: every attempt of a sink entry has failed for
    /// `sink_failing_after_ms`.
    SinkFailing,
    /// `sink_auto_paused`: a sink entry was paused by its
    /// `auto_pause_after_ms`.
    SinkAutoPaused,
}

impl NotifyEvent {
    /// Every event, in the order of the docs.
    pub const ALL: [NotifyEvent; 6] = [
        NotifyEvent::BreakerOpened,
        NotifyEvent::BreakerClosed,
        NotifyEvent::DeadLettered,
        NotifyEvent::TenantBounds,
        NotifyEvent::SinkFailing,
        NotifyEvent::SinkAutoPaused,
    ];

    /// The name as written in the file (and the `event` of a JSON
    /// notification).
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::BreakerOpened => "breaker_opened",
            NotifyEvent::BreakerClosed => "breaker_closed",
            NotifyEvent::DeadLettered => "dead_lettered",
            NotifyEvent::TenantBounds => "tenant_bounds",
            NotifyEvent::SinkFailing => "sink_failing",
            NotifyEvent::SinkAutoPaused => "sink_auto_paused",
        }
    }

    /// The event named `name`.
    pub fn parse(name: &str) -> Option<NotifyEvent> {
        NotifyEvent::ALL.into_iter().find(|e| e.as_str() == name)
    }
}

/// How a destination's notifications are written (`format:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NotifyFormat {
    /// `json` (the default): one JSON object, its fields named by event
    /// (README, "Notifications").
    #[default]
    Json,
    /// `slack`: a Slack incoming webhook's `{"text": ...}` (Mattermost,
    /// Rocket.Chat and Discord's `/slack` endpoint take it too).
    Slack,
}

impl NotifyFormat {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyFormat::Json => "json",
            NotifyFormat::Slack => "slack",
        }
    }
}

/// One entry of `notify.destinations`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyDestination {
    /// Unique among the destinations; its internal source is
    /// [`notify_source_name`] of it, whose one sink entry has this name.
    pub name: String,
    /// The internal source that delivers to it (its `http` sink entry holds
    /// the URL, the headers and the timeout).
    pub source: String,
    /// How its notifications are written.
    pub format: NotifyFormat,
    /// What it is told about (at least one).
    pub events: BTreeSet<NotifyEvent>,
}

/// `notify`: the destinations and the settings of the events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notify {
    /// Where notifications go (1 to [`crate::limits::NOTIFY_DESTINATIONS`]).
    pub destinations: Vec<NotifyDestination>,
    /// One `dead_lettered` summary per sink entry and tenant per window, ms.
    /// Default 60 s.
    pub dead_letter_window_ms: u64,
    /// The dead letters a summary names (row id and reason). Default 5.
    pub dead_letter_samples: u32,
    /// `sink_failing` once every attempt of a sink entry has failed this
    /// long, ms. Default 5 min.
    pub sink_failing_after_ms: u64,
    /// `tenant_bounds` once a tenant's pending rows or bytes pass this share
    /// of its `max_pending` or `max_pending_bytes`, percent (1 to 100).
    /// Default 80.
    pub tenant_bounds_percent: u32,
    /// Notifications queued at once (the internal tenant's `max_pending`):
    /// past it a new one is dropped and counted, so a destination down for
    /// days cannot fill the store. Default 10,000.
    pub max_pending: u64,
}

impl Notify {
    /// The destinations that want `event`.
    pub fn wanting(&self, event: NotifyEvent) -> impl Iterator<Item = &NotifyDestination> {
        self.destinations
            .iter()
            .filter(move |d| d.events.contains(&event))
    }
}

/// What `notify` adds to a configuration: the section's model, the internal
/// tenant and one internal source per destination.
pub(crate) struct Built {
    pub(crate) notify: Notify,
    pub(crate) tenant: Tenant,
    pub(crate) sources: Vec<Source>,
}

/// Validates `notify` (every problem named `notify: option
/// "destinations[i].<option>"`) and builds the internal tenant and sources;
/// `None` when the section has problems (they are in `p`). `cluster`: the
/// file has a `cluster` section, which notifications do not support yet.
pub(crate) fn notify(
    raw: &RawNotify,
    cluster: bool,
    retry: &Retry,
    env: EnvLookup<'_>,
    p: &mut Problems,
) -> Option<Built> {
    let scope = Scope::Section("notify");
    let before = p.0.len();
    if cluster {
        p.push(
            &scope,
            "",
            "notifications in cluster mode are planned, not built (each node would queue its own under a \
             tenant the cluster places on one node): remove notify, or the cluster section",
        );
    }
    if raw.destinations.is_empty() {
        p.push(
            &scope,
            "destinations",
            "at least one destination is required (a notify section sends nothing without one)",
        );
    }
    if raw.destinations.len() > max::NOTIFY_DESTINATIONS {
        p.push(
            &scope,
            "destinations",
            format!("at most {} destinations", max::NOTIFY_DESTINATIONS),
        );
    }
    let window = raw
        .dead_letter_window_ms
        .unwrap_or(d::NOTIFY_DEAD_LETTER_WINDOW_MS);
    within(
        window,
        max::NOTIFY_DEAD_LETTER_WINDOW_MS,
        "dead_letter_window_ms",
        &scope,
        p,
    );
    let failing = raw
        .sink_failing_after_ms
        .unwrap_or(d::NOTIFY_SINK_FAILING_AFTER_MS);
    within(
        failing,
        max::NOTIFY_SINK_FAILING_AFTER_MS,
        "sink_failing_after_ms",
        &scope,
        p,
    );
    let samples = raw
        .dead_letter_samples
        .unwrap_or(d::NOTIFY_DEAD_LETTER_SAMPLES);
    if samples > max::NOTIFY_DEAD_LETTER_SAMPLES {
        crate::validate::above(
            &scope,
            "dead_letter_samples",
            samples,
            max::NOTIFY_DEAD_LETTER_SAMPLES,
            p,
        );
    }
    let percent = raw
        .tenant_bounds_percent
        .unwrap_or(d::NOTIFY_TENANT_BOUNDS_PERCENT);
    if !(1..=100).contains(&percent) {
        p.push(
            &scope,
            "tenant_bounds_percent",
            format!("{percent} is not a share of the bounds: a percent from 1 to 100"),
        );
    }
    let max_pending = crate::validate::bounded(
        raw.max_pending,
        d::NOTIFY_MAX_PENDING,
        max::NOTIFY_MAX_PENDING,
        &scope,
        "max_pending",
        p,
    );

    let policy = HeaderPolicy::default();
    let mut names = HashSet::new();
    let mut destinations = Vec::with_capacity(raw.destinations.len());
    let mut sources = Vec::with_capacity(raw.destinations.len());
    for (i, rd) in raw.destinations.iter().enumerate() {
        let at = |option: &str| format!("destinations[{i}].{option}");
        let name = match &rd.name {
            None => {
                p.push(
                    &scope,
                    at("name"),
                    "required: the destination's name (its notifications are queued under it, so it must not change)",
                );
                continue;
            }
            Some(n) => n.clone(),
        };
        if let Err(m) = check_name(&name) {
            p.push(&scope, at("name"), m);
            continue;
        }
        if name.len() > DESTINATION_NAME_MAX {
            p.push(
                &scope,
                at("name"),
                format!("\"{name}\" is longer than {DESTINATION_NAME_MAX} characters"),
            );
            continue;
        }
        if !names.insert(name.clone()) {
            p.push(
                &scope,
                at("name"),
                format!("duplicate destination name \"{name}\""),
            );
            continue;
        }
        let format = match rd.format.as_deref() {
            None | Some("json") => NotifyFormat::Json,
            Some("slack") => NotifyFormat::Slack,
            Some(other) => {
                p.push(
                    &scope,
                    at("format"),
                    format!("unknown format \"{other}\": json (the default) or slack"),
                );
                NotifyFormat::Json
            }
        };
        let events = events(rd, &scope, &at("events"), p);
        let entry = destination_entry(rd, &name, retry, env, &scope, i, p);
        let source = notify_source_name(&name);
        destinations.push(NotifyDestination {
            name,
            source: source.clone(),
            format,
            events,
        });
        if let Some(entry) = entry {
            sources.push(Source {
                path: format!("/_ankusa/notify/{}", entry.name),
                name: source,
                tenant: TenantBinding::Fixed(NOTIFY_TENANT.to_owned()),
                verification: Verification::None,
                dedupe: None,
                challenge: None,
                store_headers: policy.clone(),
                store_headers_overridden: false,
                sinks: vec![entry],
                paused: false,
                quarantine: false,
                on_invalid_signature: OnInvalidSignature::Reject,
            });
        }
    }
    if p.0.len() > before {
        return None;
    }
    Some(Built {
        notify: Notify {
            destinations,
            dead_letter_window_ms: window,
            dead_letter_samples: samples,
            sink_failing_after_ms: failing,
            tenant_bounds_percent: percent,
            max_pending,
        },
        tenant: Tenant {
            name: NOTIFY_TENANT.to_owned(),
            max_pending,
            max_pending_bytes: d::TENANT_MAX_PENDING_BYTES,
        },
        sources,
    })
}

/// `value` of `option` within `(least, most)`, else a problem.
fn within(value: u64, (least, most): (u64, u64), option: &str, scope: &Scope, p: &mut Problems) {
    if !(least..=most).contains(&value) {
        p.push(
            scope,
            option,
            format!("{value} is not from {least} to {most} (milliseconds)"),
        );
    }
}

/// A destination's `events`: at least one, each a known name, none twice.
fn events(
    rd: &RawDestination,
    scope: &Scope,
    option: &str,
    p: &mut Problems,
) -> BTreeSet<NotifyEvent> {
    let known = || NotifyEvent::ALL.map(NotifyEvent::as_str).join(", ");
    let mut out = BTreeSet::new();
    let list = rd.events.as_deref().unwrap_or_default();
    if list.is_empty() {
        p.push(
            scope,
            option,
            format!("at least one event is required: {}", known()),
        );
    }
    for (j, name) in list.iter().enumerate() {
        match NotifyEvent::parse(name) {
            Some(e) => {
                if !out.insert(e) {
                    p.push(
                        scope,
                        format!("{option}[{j}]"),
                        format!("\"{name}\" is listed twice"),
                    );
                }
            }
            None => p.push(
                scope,
                format!("{option}[{j}]"),
                format!("unknown event \"{name}\": one of {}", known()),
            ),
        }
    }
    out
}

/// The destination's `http` sink entry, built as a sink entry of the file
/// is (the URL's, the headers' and the timeout's checks, `env:` resolved),
/// its problems named as the destination's options. The global `retry`
/// applies to it.
fn destination_entry(
    rd: &RawDestination,
    name: &str,
    retry: &Retry,
    env: EnvLookup<'_>,
    scope: &Scope,
    i: usize,
    p: &mut Problems,
) -> Option<SinkEntry> {
    let mut raw = Mapping::new();
    raw.insert("type".into(), "http".into());
    raw.insert("name".into(), name.into());
    if let Some(u) = &rd.url {
        raw.insert("url".into(), u.as_str().into());
    }
    if let Some(h) = &rd.headers {
        raw.insert("headers".into(), Value::Mapping(h.clone()));
    }
    if let Some(t) = rd.timeout_ms {
        raw.insert("timeout_ms".into(), t.into());
    }
    let policy = HeaderPolicy::default();
    let source_name = notify_source_name(name);
    let ctx = sink::SourceCtx {
        source_name: &source_name,
        store_headers: &policy,
        overridden: false,
        env,
        retry,
    };
    let mut own = Problems::default();
    let entry = sink::entry(&ctx, 0, &raw, &mut own);
    let ok = own.0.is_empty();
    for problem in own.0 {
        p.push(
            scope,
            format!("destinations[{i}].{}", problem.option),
            problem.message,
        );
    }
    entry.filter(|_| ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_round_trip() {
        for e in NotifyEvent::ALL {
            assert_eq!(NotifyEvent::parse(e.as_str()), Some(e));
        }
        assert_eq!(NotifyEvent::parse("breaker_open"), None);
    }

    #[test]
    fn internal_names_are_no_configured_names() {
        assert!(is_internal(NOTIFY_TENANT));
        assert!(is_internal(&notify_source_name("ops")));
        assert!(check_name(NOTIFY_TENANT).is_err());
        assert!(check_name(&notify_source_name("ops")).is_err());
    }
}
