//! `/metrics` of the admin listener (docs/design.md section 5, "Admin API"):
//! Prometheus text through `prometheus-client`, the Prometheus project's own
//! Rust client. Gauges come from the store's maintained counters of the node
//! aggregate, read at scrape time, never from scans (ADR 0004 section 7); no
//! label comes from a key, a tenant or a lane, so the series count is fixed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ankusa_edge::server::limits;
use ankusa_engine::Kv;
use ankusa_keys::{CounterField, TenantOrd, counter_key};
use ankusa_queue::metrics::{AttemptOutcome, Histogram};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::AdminState;

/// The collector of `/metrics`: every figure read at scrape time.
pub(super) struct StoreCollector<K: Kv> {
    /// What it reads.
    pub(super) state: Arc<AdminState<K>>,
}

impl<K: Kv> std::fmt::Debug for StoreCollector<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreCollector")
    }
}

/// (metric name, help, field, is a monotonic total)
const STORE_METRICS: &[(&str, &str, CounterField, bool)] = &[
    (
        "ankusa_queue_pending",
        "Pending deliveries (due, in flight, lane members)",
        CounterField::Pending,
        false,
    ),
    (
        "ankusa_queue_pending_bytes",
        "Bytes of pending deliveries",
        CounterField::Bytes,
        false,
    ),
    (
        "ankusa_dispatch_in_flight",
        "Deliveries claimed and not yet settled",
        CounterField::InFlight,
        false,
    ),
    (
        "ankusa_dlq_dead",
        "Rows in the dead-letter queue",
        CounterField::Dead,
        false,
    ),
    (
        "ankusa_dlq_dead_bytes",
        "Bytes of rows in the dead-letter queue",
        CounterField::DeadBytes,
        false,
    ),
    (
        "ankusa_quarantined",
        "Hooks held in quarantine",
        CounterField::Quarantined,
        false,
    ),
    (
        "ankusa_dispatch_delivered",
        "Deliveries completed",
        CounterField::DeliveredTotal,
        true,
    ),
    (
        "ankusa_dispatch_dead_lettered",
        "Rows dead-lettered",
        CounterField::DeadLetteredTotal,
        true,
    ),
    (
        "ankusa_dispatch_retries",
        "Delivery attempts that will be retried",
        CounterField::RetriesTotal,
        true,
    ),
    (
        "ankusa_dispatch_lanes",
        "Busy ordering lanes (lanes with a head)",
        CounterField::Lanes,
        false,
    ),
    (
        "ankusa_dispatch_lanes_blocked",
        "Lane heads waiting out a retry or a breaker park",
        CounterField::LanesBlocked,
        false,
    ),
    (
        "ankusa_dispatch_lane_members",
        "Hooks waiting in ordering lanes behind their head",
        CounterField::LaneMembers,
        false,
    ),
    (
        "ankusa_dispatch_lanes_held",
        "Ordering lanes held by a dead-lettered head until it is revived or dropped (dead_letter: hold)",
        CounterField::LanesHeld,
        false,
    ),
];

impl<K: Kv> Collector for StoreCollector<K> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, field, total) in STORE_METRICS {
            // A store read failure leaves the series out of this scrape.
            let Ok(v) = self.state.kv.counter(&counter_key(TenantOrd::NODE, *field)) else {
                continue;
            };
            if *total {
                let c = ConstCounter::new(v.max(0) as u64);
                let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
                c.encode(m)?;
            } else {
                let g = ConstGauge::new(v);
                let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
                g.encode(m)?;
            }
        }
        let s = &*self.state.stats;
        let paused = ConstGauge::new(
            i64::try_from(self.state.paused_sinks.load(Ordering::Relaxed)).unwrap_or(i64::MAX),
        );
        let m = encoder.encode_descriptor(
            "ankusa_dispatch_paused",
            "Sink entries paused (by the configuration or the runtime control); their rows wait",
            None,
            paused.metric_type(),
        )?;
        paused.encode(m)?;
        // The store's own operation counts (exact, `Kv::stats`): what the
        // bench gate counts per hook, on the live node.
        let ops = self.state.kv.stats();
        let engine: [(&str, &str, u64); 5] = [
            (
                "ankusa_engine_gets",
                "Store point reads (counter reads included)",
                ops.gets,
            ),
            ("ankusa_engine_seeks", "Store scans started", ops.seeks),
            (
                "ankusa_engine_entries_scanned",
                "Store entries returned by scans",
                ops.entries_scanned,
            ),
            (
                "ankusa_engine_batches",
                "Store batches committed",
                ops.batches,
            ),
            (
                "ankusa_engine_written_bytes",
                "Bytes of keys and values in committed store batches",
                ops.bytes_written,
            ),
        ];
        for (name, help, v) in engine {
            let c = ConstCounter::new(v);
            let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)?;
        }
        let retention: [(&str, &str, &AtomicU64); 2] = [
            (
                "ankusa_retention_hooks_deleted",
                "Delivered hooks whose envelope and archive entry the retention sweep deleted",
                &self.state.retention_hooks_deleted,
            ),
            (
                "ankusa_retention_dedupe_expired",
                "Expired dedupe records the retention sweep deleted",
                &self.state.retention_dedupe_expired,
            ),
        ];
        for (name, help, v) in retention {
            let c = ConstCounter::new(v.load(Ordering::Relaxed));
            let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)?;
        }
        let edge: [(&str, &str, &AtomicU64); 8] = [
            ("ankusa_ingest_accepted", "Hooks committed", &s.accepted),
            (
                "ankusa_ingest_unmatched",
                "Hooks committed, or released from quarantine, that no sink's filter took (no delivery row)",
                &s.unmatched,
            ),
            (
                "ankusa_ingest_duplicates",
                "Provider retries answered from the dedupe record",
                &s.duplicates,
            ),
            (
                "ankusa_ingest_unauthorized",
                "Hooks refused by verification (401)",
                &s.unauthorized,
            ),
            (
                "ankusa_ingest_too_large",
                "Hooks refused for size (413)",
                &s.too_large,
            ),
            (
                "ankusa_ingest_throttled",
                "Hooks refused by tenant bounds (429)",
                &s.throttled,
            ),
            (
                "ankusa_ingest_unavailable",
                "Hooks refused with 503 (node bounds, shutdown, store)",
                &s.unavailable,
            ),
            (
                "ankusa_ingest_quarantined",
                "Hooks held in quarantine (202)",
                &s.quarantined,
            ),
        ];
        for (name, help, v) in edge {
            let c = ConstCounter::new(v.load(Ordering::Relaxed));
            let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)?;
        }
        // The limits (docs/design.md section 5, "Limits"): the body budget and
        // each listener's connections (labelled by listener: two series each).
        let budget = &s.body_budget;
        let gauges: [(&str, &str, u64); 2] = [
            (
                "ankusa_ingest_body_budget_bytes",
                "The node's budget of request body bytes read, verified and committed at once (listeners.body_budget_bytes)",
                budget.limit_bytes(),
            ),
            (
                "ankusa_ingest_body_bytes_in_flight",
                "Request body bytes held now against the body budget",
                budget.in_use_bytes(),
            ),
        ];
        for (name, help, v) in gauges {
            let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
            let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
            g.encode(m)?;
        }
        let c = ConstCounter::new(budget.refused());
        let m = encoder.encode_descriptor(
            "ankusa_ingest_body_budget_refused",
            "Requests answered 503 because the body budget had no room for their body (also in ankusa_ingest_unavailable_total)",
            None,
            c.metric_type(),
        )?;
        c.encode(m)?;
        // The configuration's reloads (docs/design.md section 5, "Reload").
        if let Some(reload) = &self.state.reload {
            let st = reload.status();
            let mut family = encoder.encode_descriptor(
                "ankusa_config_reloads",
                "Configuration reloads since the start, by result (applied, refused)",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (result, n) in [
                ("applied", st.reloads_applied),
                ("refused", st.reloads_refused),
            ] {
                let labels = [("result", result)];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
            let g = ConstGauge::new(i64::try_from(st.loaded_at_ms / 1000).unwrap_or(i64::MAX));
            let m = encoder.encode_descriptor(
                "ankusa_config_loaded_timestamp_seconds",
                "When the configuration running was loaded (the start or the last reload applied), unix seconds",
                None,
                g.metric_type(),
            )?;
            g.encode(m)?;
        }
        let auth = &self.state.auth_failures;
        let auth: [(&str, &str, &AtomicU64); 2] = [
            (
                "ankusa_admin_auth_failures",
                "Admin requests refused 401 for a missing or wrong bearer token",
                &auth.failed,
            ),
            (
                "ankusa_admin_auth_throttled",
                "Admin requests answered 429 because their client address kept sending wrong bearer tokens",
                &auth.throttled,
            ),
        ];
        for (name, help, v) in auth {
            let c = ConstCounter::new(v.load(Ordering::Relaxed));
            let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)?;
        }
        let listeners = [
            ("ingest", &s.ingest_connections),
            ("admin", &self.state.connections),
        ];
        type Field = fn(&limits::ConnStats) -> &AtomicU64;
        let families: [(&str, &str, Field, bool); 3] = [
            (
                "ankusa_listener_connections",
                "Connections open now, by listener",
                |c| &c.open,
                false,
            ),
            (
                "ankusa_listener_connections_max",
                "The connection cap of each listener (derived from the file-descriptor limit at start)",
                |c| &c.cap,
                false,
            ),
            (
                "ankusa_listener_connections_refused",
                "Connections answered 503 and closed because the listener held its cap, by listener",
                |c| &c.refused,
                true,
            ),
        ];
        for (name, help, field, total) in families {
            let kind = if total {
                prometheus_client::metrics::MetricType::Counter
            } else {
                prometheus_client::metrics::MetricType::Gauge
            };
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (listener, conns) in listeners {
                let v = field(conns).load(Ordering::Relaxed);
                let labels = [("listener", listener)];
                let m = family.encode_family(&labels)?;
                if total {
                    ConstCounter::new(v).encode(m)?;
                } else {
                    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(m)?;
                }
            }
        }
        // Labelled by sink kind only: the series count never depends on keys,
        // tenants or lanes (ADR 0004 section 7).
        let missing = s
            .lane_key_missing
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default();
        let mut family = encoder.encode_descriptor(
            "ankusa_dispatch_lane_key_missing",
            "Ordered rows that resolved no ordering key and took the keyless lane, by sink kind",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (kind, n) in missing {
            let labels = [("sink", kind)];
            let m = family.encode_family(&labels)?;
            ConstCounter::new(n).encode(m)?;
        }
        // Labelled by source and sink entry names: bounded by the
        // configuration, never by keys or tenants.
        let filtered = s.filtered.lock().map(|m| m.clone()).unwrap_or_default();
        let mut family = encoder.encode_descriptor(
            "ankusa_ingest_filtered",
            "Delivery rows not made because the sink entry's filter did not match the hook, by source and sink entry name",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for ((source, sink), n) in &filtered {
            let labels = [("source", source.as_str()), ("sink_name", sink.as_str())];
            let m = family.encode_family(&labels)?;
            ConstCounter::new(*n).encode(m)?;
        }
        for (name, help, v) in (self.state.cluster)() {
            let c = ConstCounter::new(v);
            let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)?;
        }
        for (name, help, v) in (self.state.notify)() {
            let c = ConstCounter::new(v);
            let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)?;
        }
        for (name, help, v) in (self.state.cluster_gauges)() {
            let g = ConstGauge::new(v);
            let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
            g.encode(m)?;
        }
        // Labelled like ankusa_ingest_filtered: configured names only.
        let mut family = encoder.encode_descriptor(
            "ankusa_transform_failed",
            "Deliveries whose sink entry's transform (its jq program) failed, so they were dead-lettered, by source and sink entry name",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (source, sink, n) in ankusa_transform::metrics::failures() {
            let labels = [("source", source.as_str()), ("sink_name", sink.as_str())];
            let m = family.encode_family(&labels)?;
            ConstCounter::new(n).encode(m)?;
        }
        let dropped = (self.state.forwarded_headers_dropped)();
        let mut family = encoder.encode_descriptor(
            "ankusa_forwarded_headers_dropped",
            "Provider headers (forward_headers) a broker sink left out of a message because they did not fit the medium, by sink kind",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (kind, n) in dropped {
            let labels = [("sink", kind)];
            let m = family.encode_family(&labels)?;
            ConstCounter::new(n).encode(m)?;
        }
        self.encode_labelled_figures_and_histograms(&mut encoder)
    }
}

/// Encodes `h` as one histogram series (of a family when `labels` has any).
fn encode_histogram(
    m: &mut prometheus_client::encoding::MetricEncoder<'_>,
    h: &Histogram,
) -> Result<(), std::fmt::Error> {
    let s = h.snapshot();
    m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(s.sum, s.count, &s.buckets, None)
}

impl<K: Kv> StoreCollector<K> {
    /// The labelled figures and the histograms (README, "What to watch"):
    /// requests by source and code, ack latency and body size, delivery
    /// attempts and latencies by sink kind, breakers by kind, the oldest due
    /// age, the Writer's groups, the build. Every label is a configured name, a
    /// status code, an outcome or a state: the series count does not grow with
    /// tenants, keys or lanes (ADR 0004 section 7).
    fn encode_labelled_figures_and_histograms(
        &self,
        encoder: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let st = &*self.state;
        let ingest = &st.stats.ingest;
        let mut family = encoder.encode_descriptor(
            "ankusa_ingest_requests",
            "Requests the ingest listener answered, by source (_none: no configured source) and status code; a series appears with its first request",
            None,
            MetricType::Counter,
        )?;
        for (source, code, n) in ingest.requests() {
            let labels = [("source", source.as_str()), ("code", code)];
            ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
        }
        let hists: [(&str, &str, &Histogram); 4] = [
            (
                "ankusa_ingest_ack_seconds",
                "From a hook's arrival to its 2xx answer (committed durably, duplicate, or held in quarantine), seconds",
                &ingest.ack_latency,
            ),
            (
                "ankusa_ingest_body_bytes",
                "Size of each request body read whole, bytes",
                &ingest.body_size,
            ),
            (
                "ankusa_writer_group_hooks",
                "Hooks given a seq per Writer group commit (one observation per group written)",
                &st.writer.group_hooks,
            ),
            (
                "ankusa_writer_commit_seconds",
                "From a Writer group's write to the end of the sync that makes it durable, seconds",
                &st.writer.commit_latency,
            ),
        ];
        for (name, help, h) in hists {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
            encode_histogram(&mut m, h)?;
        }
        let kinds = st.delivery.kinds();
        let mut family = encoder.encode_descriptor(
            "ankusa_dispatch_attempts",
            "Delivery attempts by sink kind and outcome (delivered, retry; horizon_passed, permanent, sink_gone, source_gone and retired dead-letter the row)",
            None,
            MetricType::Counter,
        )?;
        for k in kinds {
            for o in AttemptOutcome::ALL {
                let labels = [("sink", k.kind), ("outcome", o.label())];
                ConstCounter::new(k.attempts(o)).encode(family.encode_family(&labels)?)?;
            }
        }
        type Pick = fn(&ankusa_queue::metrics::SinkKindMetrics) -> &Histogram;
        let per_kind: [(&str, &str, Pick); 2] = [
            (
                "ankusa_dispatch_call_seconds",
                "Duration of each sink call, from its start to the sink's answer, by sink kind, seconds",
                |k| &k.call_latency,
            ),
            (
                "ankusa_dispatch_ingest_to_delivery_seconds",
                "From a hook's receipt to the commit of its delivered row, by sink kind, seconds",
                |k| &k.ingest_to_delivery,
            ),
        ];
        for (name, help, pick) in per_kind {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for k in kinds {
                let labels = [("sink", k.kind)];
                encode_histogram(&mut family.encode_family(&labels)?, pick(k))?;
            }
        }
        let now = (st.clock)();
        let mut family = encoder.encode_descriptor(
            "ankusa_dispatch_breakers",
            "Breakers (one per tenant, source and sink entry) open or half-open now, by sink kind and state",
            None,
            MetricType::Gauge,
        )?;
        for (kind, open, half_open) in (st.breakers_by_kind)(now) {
            for (state, n) in [("open", open), ("half_open", half_open)] {
                let labels = [("sink", kind), ("state", state)];
                ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        // One seek per tenant with due rows (its ?A marker), no row scan; a
        // store read failure leaves the series out of this scrape.
        if let Ok(oldest) = ankusa_queue::oldest_due(&*st.kv, now) {
            let age = oldest.map_or(0.0, |d| now.saturating_sub(d) as f64 / 1000.0);
            let g = ConstGauge::new(age);
            let m = encoder.encode_descriptor(
                "ankusa_dispatch_oldest_due_age_seconds",
                "Age of the node's oldest row that is due and not claimed (0 when none), seconds",
                None,
                g.metric_type(),
            )?;
            g.encode(m)?;
        }
        let mut m = encoder.encode_descriptor(
            "ankusa_build",
            "The relay's build: its version",
            None,
            MetricType::Info,
        )?;
        m.encode_info(&[("version", st.version)])?;
        Ok(())
    }
}
