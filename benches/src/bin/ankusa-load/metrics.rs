//! The relay's `/metrics`, read once before posting, every second while the
//! tool runs, at the end of posting and at the end: the backlog
//! (`ankusa_queue_pending`: deliveries due, in flight or waiting in a lane)
//! and the counters that cross-check the receiver's own count.
//!
//! The names are the admin listener's (admin/src/http/mod.rs,
//! `STORE_METRICS` and the edge's counters; docs/design.md section 5, "Admin
//! API"); counters carry OpenMetrics' `_total` suffix.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::admin::Admin;
use crate::{Clock, Stop};

/// When a sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the first post.
    Start,
    /// While posting (the 1 s samples).
    Posting,
    /// Right after the last answer.
    PostEnd,
    /// While waiting for deliveries (the 1 s samples).
    Draining,
    /// At the end.
    End,
}

/// The series the tool reads; `None`: not in that scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gauges {
    /// `ankusa_queue_pending`: the backlog.
    pub pending: Option<f64>,
    /// `ankusa_dispatch_in_flight`.
    pub in_flight: Option<f64>,
    /// `ankusa_dispatch_lane_members`.
    pub lane_members: Option<f64>,
    /// `ankusa_dispatch_lanes`.
    pub lanes: Option<f64>,
    /// `ankusa_ingest_accepted_total`.
    pub accepted: Option<f64>,
    /// `ankusa_dispatch_delivered_total`.
    pub delivered: Option<f64>,
    /// `ankusa_dispatch_retries_total`.
    pub retries: Option<f64>,
    /// `ankusa_dispatch_dead_lettered_total`.
    pub dead_lettered: Option<f64>,
    /// `ankusa_ingest_throttled_total` (429s).
    pub throttled: Option<f64>,
    /// `ankusa_ingest_unavailable_total` (503s).
    pub unavailable: Option<f64>,
}

/// Reads the series of [`Gauges`] from an OpenMetrics text.
pub fn parse(text: &str) -> Gauges {
    let mut g = Gauges::default();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        let Ok(v) = value.trim().parse::<f64>() else {
            continue;
        };
        let slot = match name {
            "ankusa_queue_pending" => &mut g.pending,
            "ankusa_dispatch_in_flight" => &mut g.in_flight,
            "ankusa_dispatch_lane_members" => &mut g.lane_members,
            "ankusa_dispatch_lanes" => &mut g.lanes,
            "ankusa_ingest_accepted_total" => &mut g.accepted,
            "ankusa_dispatch_delivered_total" => &mut g.delivered,
            "ankusa_dispatch_retries_total" => &mut g.retries,
            "ankusa_dispatch_dead_lettered_total" => &mut g.dead_lettered,
            "ankusa_ingest_throttled_total" => &mut g.throttled,
            "ankusa_ingest_unavailable_total" => &mut g.unavailable,
            _ => continue,
        };
        *slot = Some(v);
    }
    g
}

/// One scrape.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When, µs since the start.
    pub at_us: u64,
    /// In which phase.
    pub phase: Phase,
    /// What it read.
    pub gauges: Gauges,
}

#[derive(Debug)]
struct Inner {
    admin: Arc<Admin>,
    clock: Clock,
    samples: Mutex<Vec<Sample>>,
    stopped: AtomicBool,
    /// Scrape failures (the relay down, a restart); the first is printed.
    failures: Mutex<u64>,
}

/// Scrapes `/metrics` every second (cheap to clone).
#[derive(Debug, Clone)]
pub struct Sampler {
    inner: Arc<Inner>,
}

impl Sampler {
    /// Starts the 1 s scrapes.
    pub fn start(admin: Arc<Admin>, clock: Clock, stop: Arc<Stop>) -> Sampler {
        let inner = Arc::new(Inner {
            admin,
            clock,
            samples: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            failures: Mutex::new(0),
        });
        let s = Sampler { inner };
        let me = s.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            while !me.inner.stopped.load(Ordering::Relaxed) {
                tick.tick().await;
                let phase = if stop.posted() {
                    Phase::Draining
                } else {
                    Phase::Posting
                };
                me.scrape_now(phase).await;
            }
        });
        s
    }

    async fn scrape(&self) -> Option<Gauges> {
        match self.inner.admin.metrics().await {
            Ok(text) => Some(parse(&text)),
            Err(e) => {
                if let Ok(mut f) = self.inner.failures.lock() {
                    *f += 1;
                    if *f == 1 {
                        eprintln!("ankusa-load: /metrics: {e}");
                    }
                }
                None
            }
        }
    }

    /// Scrapes now and keeps the sample (a failed scrape keeps nothing).
    pub async fn scrape_now(&self, phase: Phase) {
        if let Some(gauges) = self.scrape().await {
            let at_us = self.inner.clock.now_us();
            if let Ok(mut s) = self.inner.samples.lock() {
                s.push(Sample {
                    at_us,
                    phase,
                    gauges,
                });
            }
        }
    }

    /// Whether the relay has nothing pending and nothing in flight (a fresh
    /// scrape; `false` when it fails).
    pub async fn relay_idle(&self) -> bool {
        self.scrape()
            .await
            .is_some_and(|g| g.pending == Some(0.0) && g.in_flight.is_none_or(|f| f == 0.0))
    }

    /// The last sample.
    pub fn last_sample(&self) -> Option<Sample> {
        self.inner
            .samples
            .lock()
            .ok()
            .and_then(|s| s.last().copied())
    }

    /// The last backlog read.
    pub fn last_pending(&self) -> Option<f64> {
        self.inner
            .samples
            .lock()
            .ok()
            .and_then(|s| s.last().and_then(|x| x.gauges.pending))
    }

    /// Ends the 1 s scrapes.
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::Relaxed);
    }

    /// Every sample, in time order.
    pub fn samples(&self) -> Vec<Sample> {
        let mut v = self
            .inner
            .samples
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        v.sort_by_key(|s| s.at_us);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relays_series_parse() {
        let text = "# TYPE ankusa_queue_pending gauge\nankusa_queue_pending 1234\nankusa_dispatch_in_flight 8\n\
                    ankusa_dispatch_delivered_total 99\nankusa_ingest_accepted_total 1333\n\
                    ankusa_dispatch_lane_key_missing_total{sink=\"http\"} 5\n# EOF\n";
        let g = parse(text);
        assert_eq!(g.pending, Some(1234.0));
        assert_eq!(g.in_flight, Some(8.0));
        assert_eq!(g.delivered, Some(99.0));
        assert_eq!(g.accepted, Some(1333.0));
        assert_eq!(g.retries, None);
    }
}
