//! The admin listener (docs/design.md section 5, "Admin API"): `/metrics` (Prometheus
//! text through `prometheus-client`, the Prometheus project's own Rust client),
//! `/healthz`, `/readyz`.
//!
//! Gauges come from the store's maintained counters of the node aggregate,
//! read at scrape time, never from scans (ADR 0004 section 7); no label comes
//! from a key, a tenant or a lane, so the series count is fixed.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ankusa_engine::Kv;
use ankusa_keys::{CounterField, TenantOrd, counter_key};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::EdgeStats;

/// What the admin routes read. It holds no part of the edge that keeps the
/// Writer alive, so the admin listener can answer (`/readyz` 503, `/metrics`)
/// until the relay has stopped.
pub struct AdminState<K: Kv> {
    /// The store (maintained counters).
    pub kv: Arc<K>,
    /// The edge's counters.
    pub edge: Arc<EdgeStats>,
    /// Ready once the store is open and the pipeline has recovered the
    /// previous run's claimed rows (the pipeline sets it).
    pub ready: Arc<AtomicBool>,
    /// Set when the relay begins to stop: `/readyz` answers 503 from then on.
    pub shutting_down: Arc<AtomicBool>,
    /// Configured sink entries paused now (the pipeline keeps it:
    /// `PipelineHandle::paused_sinks`), the `ankusa_dispatch_paused` gauge.
    pub paused_sinks: Arc<AtomicU64>,
    /// Envelopes the retention sweep has deleted since the start
    /// (`ankusa_retention_hooks_deleted_total`).
    pub retention_hooks_deleted: Arc<AtomicU64>,
    /// Expired dedupe records the sweep has deleted since the start
    /// (`ankusa_retention_dedupe_expired_total`).
    pub retention_dedupe_expired: Arc<AtomicU64>,
}

struct StoreCollector<K: Kv> {
    state: Arc<AdminState<K>>,
}

impl<K: Kv> std::fmt::Debug for StoreCollector<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreCollector")
    }
}

/// (metric name, help, field, is a monotonic total)
const STORE_METRICS: &[(&str, &str, CounterField, bool)] = &[
    ("ankusa_queue_pending", "Pending deliveries (due, in flight, lane members)", CounterField::Pending, false),
    ("ankusa_queue_pending_bytes", "Bytes of pending deliveries", CounterField::Bytes, false),
    ("ankusa_dispatch_in_flight", "Deliveries claimed and not yet settled", CounterField::InFlight, false),
    ("ankusa_dlq_dead", "Rows in the dead-letter queue", CounterField::Dead, false),
    ("ankusa_dlq_dead_bytes", "Bytes of rows in the dead-letter queue", CounterField::DeadBytes, false),
    ("ankusa_quarantined", "Hooks held in quarantine", CounterField::Quarantined, false),
    ("ankusa_dispatch_delivered", "Deliveries completed", CounterField::DeliveredTotal, true),
    ("ankusa_dispatch_dead_lettered", "Rows dead-lettered", CounterField::DeadLetteredTotal, true),
    ("ankusa_dispatch_retries", "Delivery attempts that will be retried", CounterField::RetriesTotal, true),
    ("ankusa_dispatch_lanes", "Busy ordering lanes (lanes with a head)", CounterField::Lanes, false),
    ("ankusa_dispatch_lanes_blocked", "Lane heads waiting out a retry or a breaker park", CounterField::LanesBlocked, false),
    ("ankusa_dispatch_lane_members", "Hooks waiting in ordering lanes behind their head", CounterField::LaneMembers, false),
];

impl<K: Kv> Collector for StoreCollector<K> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, field, total) in STORE_METRICS {
            // A store read failure leaves the series out of this scrape.
            let Ok(v) = self.state.kv.counter(&counter_key(TenantOrd::NODE, *field)) else { continue };
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
        let s = &*self.state.edge;
        let paused = ConstGauge::new(i64::try_from(self.state.paused_sinks.load(Ordering::Relaxed)).unwrap_or(i64::MAX));
        let m = encoder.encode_descriptor(
            "ankusa_dispatch_paused",
            "Sink entries paused (by the configuration or the runtime control); their rows wait",
            None,
            paused.metric_type(),
        )?;
        paused.encode(m)?;
        let retention: [(&str, &str, &AtomicU64); 2] = [
            ("ankusa_retention_hooks_deleted", "Delivered hooks whose envelope and archive entry the retention sweep deleted", &self.state.retention_hooks_deleted),
            ("ankusa_retention_dedupe_expired", "Expired dedupe records the retention sweep deleted", &self.state.retention_dedupe_expired),
        ];
        for (name, help, v) in retention {
            let c = ConstCounter::new(v.load(Ordering::Relaxed));
            let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)?;
        }
        let edge: [(&str, &str, &AtomicU64); 7] = [
            ("ankusa_ingest_accepted", "Hooks committed", &s.accepted),
            ("ankusa_ingest_duplicates", "Provider retries answered from the dedupe record", &s.duplicates),
            ("ankusa_ingest_unauthorized", "Hooks refused by verification (401)", &s.unauthorized),
            ("ankusa_ingest_too_large", "Hooks refused for size (413)", &s.too_large),
            ("ankusa_ingest_throttled", "Hooks refused by tenant bounds (429)", &s.throttled),
            ("ankusa_ingest_unavailable", "Hooks refused with 503 (node bounds, shutdown, store)", &s.unavailable),
            ("ankusa_ingest_quarantined", "Hooks held in quarantine (202)", &s.quarantined),
        ];
        for (name, help, v) in edge {
            let c = ConstCounter::new(v.load(Ordering::Relaxed));
            let m = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(m)?;
        }
        // Labelled by sink kind only: the series count never depends on keys,
        // tenants or lanes (ADR 0004 section 7).
        let missing = s.lane_key_missing.lock().map(|m| m.clone()).unwrap_or_default();
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
        Ok(())
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Serves the admin listener until `shutdown` turns true.
pub async fn serve_admin<K: Kv>(state: Arc<AdminState<K>>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StoreCollector { state: Arc::clone(&state) }));
    let registry = Arc::new(registry);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let state = Arc::clone(&state);
                let registry = Arc::clone(&registry);
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let state = Arc::clone(&state);
                    let registry = Arc::clone(&registry);
                    async move {
                        let resp = match req.uri().path() {
                            "/metrics" => {
                                let mut out = String::new();
                                match prometheus_client::encoding::text::encode(&mut out, &registry) {
                                    Ok(()) => text(StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", out),
                                    Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", e.to_string()),
                                }
                            }
                            "/healthz" => text(StatusCode::OK, "text/plain", "ok\n".into()),
                            "/readyz" => {
                                if state.shutting_down.load(Ordering::SeqCst) {
                                    text(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "shutting down\n".into())
                                } else if state.ready.load(Ordering::SeqCst) {
                                    text(StatusCode::OK, "text/plain", "ready\n".into())
                                } else {
                                    text(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "starting\n".into())
                                }
                            }
                            other => text(StatusCode::NOT_FOUND, "text/plain", format!("no admin route {other}\n")),
                        };
                        Ok::<_, Infallible>(resp)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
            _ = shutdown.changed() => {
                if *shutdown.borrow() {
                    return;
                }
            }
        }
    }
}
