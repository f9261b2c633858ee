//! The relay's own notifications (docs/design.md section 5, "Notifications";
//! README, "Notifications"): the notifier task turns what the pipeline
//! reports ([`PipelineEvents`]: breakers opened and closed, dead letters,
//! failing and auto-paused sink entries) and what it reads of the tenants'
//! counters (queue bounds) into notifications, and commits each one through
//! the Writer as a hook of the destination's internal source (the internal
//! tenant `_ankusa`, `ankusa_config::NOTIFY_TENANT`). From that commit on a
//! notification is a hook like any other: durable (`Sync`), delivered by
//! the pipeline's http sink with the retry policy, the breaker and the
//! dead-letter queue, and delivered after a restart if it was not yet.
//!
//! What it never does: wait on a destination (it only commits), notify about
//! the internal tenant or its sources (no loops: a notification about a
//! notification that failed would fail the same way), or let a notification
//! hold a hook back (the pipeline records its reports in memory, bounded, and
//! never waits on this task). What it reads in memory (an event not yet
//! committed, dead letters of the current window) is lost by a stop; the
//! notifier commits what it has when the relay stops.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ankusa_admin::Context;
use ankusa_config::{Config, Notify, NotifyEvent, NotifyFormat, is_internal};
use ankusa_engine::Kv;
use ankusa_keys::{CounterField, Envelope, SinkIx, SourceId, TenantOrd, counter_key};
use ankusa_pipeline::{DeadLetterTally, PipelineEvent, PipelineEvents};
use ankusa_queue::writer::{IngestRequest, WriterHandle};
use ankusa_queue::{NewRow, Registry};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tracing::{debug, warn};

/// How often the notifier looks at the dead-letter window, the failing sink
/// entries and the tenants' counters when the pipeline reports nothing.
const TICK: Duration = Duration::from_millis(250);

/// The notifier's counters (`/metrics`, `ankusa_notify_*_total`).
#[derive(Debug, Default)]
pub struct NotifyStats {
    /// Notifications committed to the queue.
    pub queued: AtomicU64,
    /// Notifications not queued: over `notify.max_pending`, or the Writer
    /// refused them (a stop, a store failure).
    pub dropped: AtomicU64,
}

/// The notifications' counters for `/metrics` (name without `_total`, help,
/// value): what the notifier queued and dropped, what the pipeline delivered
/// and dead-lettered of them (the internal tenant's counters), and the sink
/// entries the pipeline auto-paused. Each family is there only when the
/// configuration uses it (a `notify` section; a sink entry with
/// `auto_pause_after_ms`, or a pause it made), as cluster mode's are: a relay
/// without them shows the series it always had.
pub fn metrics<K: Kv>(
    stats: &NotifyStats,
    events: &PipelineEvents,
    ctx: &Context<K>,
) -> Vec<(&'static str, &'static str, u64)> {
    let cfg = ctx.config.load();
    let mut out = Vec::new();
    let auto_pause = cfg
        .sources
        .iter()
        .flat_map(|s| &s.sinks)
        .any(|e| e.auto_pause_after_ms.is_some());
    if auto_pause || events.auto_paused_total() > 0 {
        out.push((
            "ankusa_dispatch_auto_paused",
            "Sink entries paused because every attempt failed for their auto_pause_after_ms",
            events.auto_paused_total(),
        ));
    }
    if cfg.notify.is_none() {
        return out;
    }
    let tenant = ctx
        .registry
        .load()
        .tenants
        .get(ankusa_config::NOTIFY_TENANT)
        .copied();
    let read = |f| {
        tenant
            .and_then(|t| ctx.kv.counter(&counter_key(t, f)).ok())
            .map_or(0, |v| u64::try_from(v).unwrap_or(0))
    };
    out.extend([
        (
            "ankusa_notify_queued",
            "Notifications committed to the relay's queue (hooks of tenant _ankusa), one per destination",
            stats.queued.load(Ordering::Relaxed),
        ),
        (
            "ankusa_notify_dropped",
            "Notifications not queued: notify.max_pending were queued already, or the store refused them",
            stats.dropped.load(Ordering::Relaxed),
        ),
        (
            "ankusa_notify_delivered",
            "Notifications delivered to their destination",
            read(CounterField::DeliveredTotal),
        ),
        (
            "ankusa_notify_failed",
            "Notifications dead-lettered (their destination refused them for good, or their retry horizon passed)",
            read(CounterField::DeadLetteredTotal),
        ),
    ]);
    out
}

/// The notifier task: build it in `serve`, run it with [`Notifier::run`].
pub struct Notifier<K: Kv> {
    /// The store (the tenants' counters, the internal tenant's).
    pub kv: Arc<K>,
    /// Where notifications are committed.
    pub writer: WriterHandle,
    /// The running configuration and registry (a reload replaces both).
    pub ctx: Arc<Context<K>>,
    /// What the pipeline reports.
    pub events: PipelineEvents,
    /// The counters it keeps.
    pub stats: Arc<NotifyStats>,
    /// Wakes the pipeline after a commit (as the edge does).
    pub wake: Box<dyn Fn() + Send + Sync>,
    /// Unix ms.
    pub clock: fn() -> u64,
}

/// One notification before it is written for a destination.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    /// What happened.
    pub event: NotifyEvent,
    /// The tenant, source and sink entry it is about (names), when it is
    /// about one.
    pub tenant: Option<String>,
    /// The source.
    pub source: Option<String>,
    /// The sink entry.
    pub sink: Option<String>,
    /// One sentence for a person (the whole of a `slack` message).
    pub text: String,
    /// The event's own fields (README, "Notifications").
    pub fields: Map<String, Value>,
    /// When, unix ms.
    pub at_ms: u64,
}

/// The body of `note` for a destination of `format`, from relay `relay`
/// (`node.name`).
pub fn body(note: &Note, format: NotifyFormat, relay: &str) -> Vec<u8> {
    let v = match format {
        NotifyFormat::Slack => json!({ "text": format!("[ankusa {relay}] {}", note.text) }),
        NotifyFormat::Json => {
            let mut m = Map::new();
            m.insert("event".into(), note.event.as_str().into());
            m.insert("relay".into(), relay.into());
            m.insert("at_ms".into(), note.at_ms.into());
            for (k, v) in [
                ("tenant", &note.tenant),
                ("source", &note.source),
                ("sink", &note.sink),
            ] {
                m.insert(k.into(), v.clone().map_or(Value::Null, Value::String));
            }
            m.insert("text".into(), note.text.clone().into());
            for (k, v) in &note.fields {
                m.insert(k.clone(), v.clone());
            }
            Value::Object(m)
        }
    };
    v.to_string().into_bytes()
}

/// What the notifier remembers between two rounds.
#[derive(Debug, Default)]
struct Memory {
    /// The dead letters of the current window, per (tenant, source, sink
    /// entry).
    dead: BTreeMap<(TenantOrd, SourceId, SinkIx), DeadLetterTally>,
    /// When the current window began (its first dead letter).
    window_since_ms: Option<u64>,
    /// The failing runs already told about: (entry, the run's start).
    failing_told: HashSet<((SourceId, SinkIx), u64)>,
    /// Tenants past `tenant_bounds_percent` already told about (in memory:
    /// a restart tells again about a tenant still past it).
    tenants_over: HashSet<TenantOrd>,
}

impl Memory {
    /// Adds the dead letters just taken to the window (starting it at `now`
    /// when it is new), and hands back the window's tallies when it has
    /// lasted `window_ms` or `last` (the relay stops): one summary each.
    fn window(
        &mut self,
        taken: BTreeMap<(TenantOrd, SourceId, SinkIx), DeadLetterTally>,
        now: u64,
        window_ms: u64,
        last: bool,
    ) -> BTreeMap<(TenantOrd, SourceId, SinkIx), DeadLetterTally> {
        for (key, t) in taken {
            let w = self.dead.entry(key).or_default();
            w.count += t.count;
            let room = ankusa_pipeline::DEAD_LETTER_SAMPLES_KEPT.saturating_sub(w.samples.len());
            w.samples.extend(t.samples.into_iter().take(room));
        }
        if self.dead.is_empty() {
            self.window_since_ms = None;
            return BTreeMap::new();
        }
        let since = *self.window_since_ms.get_or_insert(now);
        if last || now.saturating_sub(since) >= window_ms {
            self.window_since_ms = None;
            return std::mem::take(&mut self.dead);
        }
        BTreeMap::new()
    }
}

/// Names of the store's numbers, from the running registry.
struct Names {
    tenants: HashMap<TenantOrd, String>,
    sources: HashMap<SourceId, String>,
}

impl Names {
    fn of(registry: &Registry) -> Names {
        Names {
            tenants: registry
                .tenants
                .iter()
                .map(|(n, o)| (*o, n.clone()))
                .collect(),
            sources: registry
                .sources
                .iter()
                .map(|(n, s)| (*s, n.clone()))
                .collect(),
        }
    }

    fn tenant(&self, t: TenantOrd) -> String {
        self.tenants
            .get(&t)
            .cloned()
            .unwrap_or_else(|| format!("#{}", t.0))
    }

    fn source(&self, s: SourceId) -> String {
        self.sources
            .get(&s)
            .cloned()
            .unwrap_or_else(|| format!("#{}", s.0))
    }
}

/// The name of sink entry `sink` of source `source` in `cfg` (its slot's
/// number when it is no longer configured).
fn sink_name(cfg: &Config, source: &str, sink: SinkIx) -> String {
    cfg.source(source)
        .and_then(|s| s.sinks.iter().find(|e| e.index == sink.0))
        .map_or_else(|| format!("slot {}", sink.0), |e| e.name.clone())
}

/// `ms` as a person reads it: `600 s`, `1.5 s`.
fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// `sink "invoices" of source "stripe"`, with `(tenant "acme")` when given.
fn entry_words(source: &str, sink: &str, tenant: Option<&str>) -> String {
    match tenant {
        Some(t) => format!("sink \"{sink}\" of source \"{source}\" (tenant \"{t}\")"),
        None => format!("sink \"{sink}\" of source \"{source}\""),
    }
}

impl<K: Kv> Notifier<K> {
    /// Runs until `shutdown` turns true, then commits what it holds (the
    /// current window's dead letters, events not yet committed) and returns,
    /// giving back its Writer handle (the Writer stops only when every handle
    /// is gone).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut memory = Memory::default();
        loop {
            let last = tokio::select! {
                r = shutdown.changed() => r.is_err() || *shutdown.borrow(),
                () = self.events.changed() => false,
                () = tokio::time::sleep(TICK) => false,
            };
            self.round(&mut memory, last).await;
            if last {
                return;
            }
        }
    }

    /// One round: the pipeline's events, the dead-letter window, the
    /// failing sink entries and the tenants' bounds, each notification
    /// committed for every destination that wants it.
    async fn round(&self, memory: &mut Memory, last: bool) {
        let now = (self.clock)();
        let cfg = self.ctx.config.load_full();
        let names = Names::of(&self.ctx.registry.load());
        let (events, lost) = self.events.take();
        if lost > 0 {
            warn!(
                lost,
                "notifications: the pipeline's reports came faster than they were read; the oldest were dropped"
            );
        }
        let dead = self.events.take_dead_letters();
        let Some(notify) = cfg.notify.as_ref() else {
            // Nowhere to send them (a reload may add destinations later).
            *memory = Memory::default();
            return;
        };
        let mut notes = Vec::new();
        for e in events {
            if let Some(n) = event_note(&cfg, &names, e) {
                notes.push(n);
            }
        }
        let window = memory.window(dead, now, notify.dead_letter_window_ms, last);
        for (key, tally) in window {
            if let Some(n) = dead_letter_note(&cfg, notify, &names, key, &tally, now) {
                notes.push(n);
            }
        }
        notes.extend(self.failing_notes(&cfg, notify, &names, memory, now));
        notes.extend(self.bounds_notes(&cfg, notify, &names, memory, now));
        for note in notes {
            self.queue(&cfg, notify, &note).await;
        }
    }

    /// `sink_failing`: each run past `sink_failing_after_ms`, once.
    fn failing_notes(
        &self,
        cfg: &Config,
        notify: &Notify,
        names: &Names,
        memory: &mut Memory,
        now: u64,
    ) -> Vec<Note> {
        let runs = self.events.failing();
        let current: HashSet<((SourceId, SinkIx), u64)> =
            runs.iter().map(|(k, r)| (*k, r.since_ms)).collect();
        memory.failing_told.retain(|k| current.contains(k));
        let mut out = Vec::new();
        for (key, run) in runs {
            let failing_for = now.saturating_sub(run.since_ms);
            if failing_for < notify.sink_failing_after_ms
                || memory.failing_told.contains(&(key, run.since_ms))
            {
                continue;
            }
            memory.failing_told.insert((key, run.since_ms));
            let source = names.source(key.0);
            if is_internal(&source) {
                continue;
            }
            let sink = sink_name(cfg, &source, key.1);
            let mut fields = Map::new();
            fields.insert("failing_since_ms".into(), run.since_ms.into());
            fields.insert("failing_for_ms".into(), failing_for.into());
            fields.insert("attempts".into(), run.attempts.into());
            fields.insert("last_error".into(), run.last_error.clone().into());
            out.push(Note {
                event: NotifyEvent::SinkFailing,
                tenant: None,
                text: format!(
                    "every attempt to {} has failed for {} ({} attempts; last error: {})",
                    entry_words(&source, &sink, None),
                    seconds(failing_for),
                    run.attempts,
                    run.last_error
                ),
                source: Some(source),
                sink: Some(sink),
                fields,
                at_ms: now,
            });
        }
        out
    }

    /// `tenant_bounds`: a tenant whose pending rows or bytes passed
    /// `tenant_bounds_percent` of its bounds, once; again after it came
    /// back under nine tenths of that share.
    fn bounds_notes(
        &self,
        cfg: &Config,
        notify: &Notify,
        names: &Names,
        memory: &mut Memory,
        now: u64,
    ) -> Vec<Note> {
        if !notify.wanting(NotifyEvent::TenantBounds).any(|_| true) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let percent = u64::from(notify.tenant_bounds_percent);
        for t in cfg.tenants.iter().filter(|t| !is_internal(&t.name)) {
            let Some(ord) = names
                .tenants
                .iter()
                .find(|(_, n)| **n == t.name)
                .map(|(o, _)| *o)
            else {
                continue;
            };
            let read = |f| {
                self.kv
                    .counter(&counter_key(ord, f))
                    .map(|v| u64::try_from(v).unwrap_or(0))
            };
            let (Ok(pending), Ok(bytes)) = (read(CounterField::Pending), read(CounterField::Bytes))
            else {
                continue;
            };
            // Hundredths of a percent, so nine tenths of the share is exact.
            let share = |n: u64, of: u64| n.saturating_mul(10_000) / of.max(1);
            let used = share(pending, t.max_pending).max(share(bytes, t.max_pending_bytes));
            if used >= percent * 100 {
                if memory.tenants_over.insert(ord) {
                    let mut fields = Map::new();
                    fields.insert("pending".into(), pending.into());
                    fields.insert("max_pending".into(), t.max_pending.into());
                    fields.insert("pending_bytes".into(), bytes.into());
                    fields.insert("max_pending_bytes".into(), t.max_pending_bytes.into());
                    fields.insert("percent".into(), (used / 100).into());
                    fields.insert("threshold_percent".into(), percent.into());
                    out.push(Note {
                        event: NotifyEvent::TenantBounds,
                        tenant: Some(t.name.clone()),
                        source: None,
                        sink: None,
                        text: format!(
                            "tenant \"{}\" holds {}% of its queue bounds ({pending} of {} pending deliveries, {bytes} of {} bytes); \
                             at 100% its new hooks are refused with 429",
                            t.name,
                            used / 100,
                            t.max_pending,
                            t.max_pending_bytes
                        ),
                        fields,
                        at_ms: now,
                    });
                }
            } else if used * 10 < percent * 100 * 9 {
                memory.tenants_over.remove(&ord);
            }
        }
        out
    }

    /// Commits `note` for every destination that wants its event, each as a
    /// hook of the destination's internal source; a notification over
    /// `notify.max_pending` or refused by the Writer is dropped and counted.
    async fn queue(&self, cfg: &Config, notify: &Notify, note: &Note) {
        let registry = self.ctx.registry.load();
        let Some(tenant) = registry.tenants.get(ankusa_config::NOTIFY_TENANT).copied() else {
            return;
        };
        for dest in notify.wanting(note.event) {
            let pending = self
                .kv
                .counter(&counter_key(tenant, CounterField::Pending))
                .unwrap_or(0);
            if u64::try_from(pending).unwrap_or(0) >= notify.max_pending {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                warn!(
                    destination = %dest.name,
                    event = note.event.as_str(),
                    pending,
                    "notification dropped: notify.max_pending notifications are queued already (is the destination down?)"
                );
                continue;
            }
            let (Some(source), Some(id)) = (
                cfg.source(&dest.source),
                registry.sources.get(&dest.source).copied(),
            ) else {
                continue;
            };
            let Some(entry) = source.sinks.first() else {
                continue;
            };
            let now = (self.clock)();
            let envelope = Envelope {
                source: id,
                received_at_ms: now,
                method: "POST".into(),
                path: source.path.clone(),
                query: None,
                headers: vec![(b"content-type".to_vec(), b"application/json".to_vec())],
                body: body(note, dest.format, &cfg.node.name),
                dedupe_key: None,
                idempotency_key: idempotency_key_at(now),
                replay_of: None,
            };
            let req = IngestRequest {
                tenant,
                envelope,
                rows: vec![NewRow {
                    sink: SinkIx(entry.index),
                    lane: None,
                }],
                dedupe_ttl_ms: None,
            };
            match self.writer.ingest(req).await {
                Ok(_) => {
                    self.stats.queued.fetch_add(1, Ordering::Relaxed);
                    debug!(destination = %dest.name, event = note.event.as_str(), "notification queued");
                    (self.wake)();
                }
                Err(e) => {
                    self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                    warn!(destination = %dest.name, event = note.event.as_str(), error = %e, "notification dropped: the Writer refused it");
                }
            }
        }
    }
}

/// A UUIDv7 for `received_at_ms`, as the edge gives a hook.
fn idempotency_key_at(received_at_ms: u64) -> [u8; 16] {
    let ts = uuid::Timestamp::from_unix(
        uuid::NoContext,
        received_at_ms / 1000,
        ((received_at_ms % 1000) * 1_000_000) as u32,
    );
    *uuid::Uuid::new_v7(ts).as_bytes()
}

/// The notification of one pipeline event; `None` for one about the
/// internal tenant or its sources (never a notification about a
/// notification).
fn event_note(cfg: &Config, names: &Names, e: PipelineEvent) -> Option<Note> {
    match e {
        PipelineEvent::BreakerOpened {
            tenant,
            source,
            sink,
            failures,
            open_until_ms,
            last_error,
            at_ms,
        } => {
            let (t, s) = (names.tenant(tenant), names.source(source));
            if is_internal(&t) || is_internal(&s) {
                return None;
            }
            let k = sink_name(cfg, &s, sink);
            let mut fields = Map::new();
            fields.insert("failures".into(), failures.into());
            fields.insert("open_until_ms".into(), open_until_ms.into());
            fields.insert("last_error".into(), last_error.clone().into());
            Some(Note {
                event: NotifyEvent::BreakerOpened,
                text: format!(
                    "breaker opened for {} after {failures} failed attempts: its deliveries wait, one trial every {} (last error: {last_error})",
                    entry_words(&s, &k, Some(&t)),
                    seconds(open_until_ms.saturating_sub(at_ms)),
                ),
                tenant: Some(t),
                source: Some(s),
                sink: Some(k),
                fields,
                at_ms,
            })
        }
        PipelineEvent::BreakerClosed {
            tenant,
            source,
            sink,
            at_ms,
        } => {
            let (t, s) = (names.tenant(tenant), names.source(source));
            if is_internal(&t) || is_internal(&s) {
                return None;
            }
            let k = sink_name(cfg, &s, sink);
            Some(Note {
                event: NotifyEvent::BreakerClosed,
                text: format!(
                    "breaker closed for {}: a delivery got through",
                    entry_words(&s, &k, Some(&t))
                ),
                tenant: Some(t),
                source: Some(s),
                sink: Some(k),
                fields: Map::new(),
                at_ms,
            })
        }
        PipelineEvent::SinkAutoPaused {
            source,
            sink,
            failing_since_ms,
            reason,
            at_ms,
        } => {
            let s = names.source(source);
            if is_internal(&s) {
                return None;
            }
            let k = sink_name(cfg, &s, sink);
            let mut fields = Map::new();
            fields.insert("failing_since_ms".into(), failing_since_ms.into());
            fields.insert("reason".into(), reason.clone().into());
            Some(Note {
                event: NotifyEvent::SinkAutoPaused,
                text: format!(
                    "{} was paused ({reason}); its hooks are still accepted and kept: resume it with `ankusa resume {s} --sink {k}` once it is fixed",
                    entry_words(&s, &k, None)
                ),
                source: Some(s),
                sink: Some(k),
                tenant: None,
                fields,
                at_ms,
            })
        }
    }
}

/// The `dead_lettered` summary of one sink entry and tenant's window; `None`
/// for the internal tenant's.
fn dead_letter_note(
    cfg: &Config,
    notify: &Notify,
    names: &Names,
    (tenant, source, sink): (TenantOrd, SourceId, SinkIx),
    tally: &DeadLetterTally,
    now: u64,
) -> Option<Note> {
    let (t, s) = (names.tenant(tenant), names.source(source));
    if is_internal(&t) || is_internal(&s) {
        return None;
    }
    let k = sink_name(cfg, &s, sink);
    let samples: Vec<Value> = tally
        .samples
        .iter()
        .take(usize::try_from(notify.dead_letter_samples).unwrap_or(usize::MAX))
        .map(|(row, reason)| json!({ "id": format!("{t}.{}.{}", row.seq.0, row.sink.0), "reason": reason }))
        .collect();
    let example = tally
        .samples
        .first()
        .filter(|_| notify.dead_letter_samples > 0)
        .map(|(row, reason)| format!("; e.g. {t}.{}.{}: {reason}", row.seq.0, row.sink.0))
        .unwrap_or_default();
    let mut fields = Map::new();
    fields.insert("count".into(), tally.count.into());
    fields.insert("window_ms".into(), notify.dead_letter_window_ms.into());
    fields.insert("samples".into(), Value::Array(samples));
    Some(Note {
        event: NotifyEvent::DeadLettered,
        text: format!(
            "{} to {} {} dead-lettered within {}{example} (`ankusa dlq list --tenant {t} --source {s} --sink {k}`)",
            if tally.count == 1 {
                "1 delivery".to_owned()
            } else {
                format!("{} deliveries", tally.count)
            },
            entry_words(&s, &k, Some(&t)),
            if tally.count == 1 { "was" } else { "were" },
            seconds(notify.dead_letter_window_ms),
        ),
        tenant: Some(t),
        source: Some(s),
        sink: Some(k),
        fields,
        at_ms: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_keys::Seq;
    use ankusa_queue::RowId;

    const KEY: (TenantOrd, SourceId, SinkIx) = (TenantOrd(1), SourceId(1), SinkIx(0));

    fn tally(count: u64) -> BTreeMap<(TenantOrd, SourceId, SinkIx), DeadLetterTally> {
        let samples = (0..count.min(3))
            .map(|n| {
                (
                    RowId::new(KEY.0, Seq(n), KEY.2),
                    "permanent: HTTP 400".to_owned(),
                )
            })
            .collect();
        BTreeMap::from([(KEY, DeadLetterTally { count, samples })])
    }

    #[test]
    fn a_burst_within_a_window_is_one_summary() {
        let mut m = Memory::default();
        assert!(m.window(tally(10), 1_000, 60_000, false).is_empty());
        assert!(m.window(tally(20), 30_000, 60_000, false).is_empty());
        assert!(m.window(BTreeMap::new(), 60_999, 60_000, false).is_empty());
        let out = m.window(BTreeMap::new(), 61_000, 60_000, false);
        assert_eq!(out[&KEY].count, 30);
        assert_eq!(out[&KEY].samples.len(), 6);
        // The next dead letter starts a new window.
        assert!(m.window(tally(1), 70_000, 60_000, false).is_empty());
        assert_eq!(
            m.window(BTreeMap::new(), 70_001, 60_000, true)[&KEY].count,
            1
        );
        assert!(m.window(BTreeMap::new(), 200_000, 60_000, false).is_empty());
    }

    fn note() -> Note {
        Note {
            event: NotifyEvent::BreakerClosed,
            tenant: Some("acme".into()),
            source: Some("stripe".into()),
            sink: Some("invoices".into()),
            text: "breaker closed".into(),
            fields: Map::from_iter([("failures".to_owned(), Value::from(5))]),
            at_ms: 7,
        }
    }

    #[test]
    fn a_json_notification_names_its_event_and_entry() {
        let v: Value = serde_json::from_slice(&body(&note(), NotifyFormat::Json, "n1")).unwrap();
        assert_eq!(
            v,
            json!({"event": "breaker_closed", "relay": "n1", "at_ms": 7, "tenant": "acme",
                   "source": "stripe", "sink": "invoices", "text": "breaker closed", "failures": 5})
        );
    }

    #[test]
    fn a_slack_notification_is_text_only() {
        let v: Value = serde_json::from_slice(&body(&note(), NotifyFormat::Slack, "n1")).unwrap();
        assert_eq!(v, json!({"text": "[ankusa n1] breaker closed"}));
    }
}
