//! The ingest listener's request figures for `/metrics` (README, "What to
//! watch"): requests by source and status code, the ack latency and the body
//! size. Each observation is a relaxed atomic increment with no lock and no
//! allocation: a source's counts live in its
//! [`SourceRoute`](super::SourceRoute) (`requests`), found by the routing the
//! request needs anyway.
//!
//! Labels come from the configuration only (source names, the status codes
//! the edge answers): never a key, a tenant or a lane (ADR 0004 section 7).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ankusa_queue::metrics::{BODY_BOUNDS_BYTES, Histogram};

/// Every status code the ingest listener answers (docs/design.md section 5,
/// "Edge"); any other is counted as `other`.
pub const CODES: [u16; 12] = [200, 202, 400, 401, 403, 404, 405, 408, 413, 429, 500, 503];

/// The `source` label of requests that matched no configured source (a 404
/// before any source is known): a source name starts with a letter or a
/// digit, so it cannot be this.
pub const UNROUTED: &str = "_none";

/// Requests by status code, of one source (or of no source).
#[derive(Debug, Default)]
pub struct RequestCounts {
    /// One per [`CODES`], then `other`.
    counts: [AtomicU64; CODES.len() + 1],
}

impl RequestCounts {
    /// Counts one request answered `code`.
    pub fn count(&self, code: u16) {
        let i = CODES.iter().position(|c| *c == code).unwrap_or(CODES.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    /// `(code label, requests)` of every code answered at least once, in
    /// [`CODES`] order then `other`.
    pub fn answered(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        const LABELS: [&str; CODES.len() + 1] = [
            "200", "202", "400", "401", "403", "404", "405", "408", "413", "429", "500", "503",
            "other",
        ];
        LABELS
            .iter()
            .zip(&self.counts)
            .map(|(l, c)| (*l, c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
    }
}

/// The ingest listener's figures, part of [`super::EdgeStats`].
#[derive(Debug)]
pub struct IngestMetrics {
    /// Each configured source's counts (its `SourceRoute::requests`), by
    /// name; `serve` registers them once the routes are built
    /// ([`IngestMetrics::register_sources`]).
    sources: std::sync::Mutex<Vec<(String, Arc<RequestCounts>)>>,
    /// Requests that matched no source ([`UNROUTED`]).
    pub unrouted: RequestCounts,
    /// From a hook's arrival at the handler to its answer, of every POST
    /// answered 2xx (committed, duplicate, held in quarantine, a Slack
    /// handshake), seconds: `ankusa_ingest_ack_seconds`.
    pub ack_latency: Histogram,
    /// The size of every request body read whole, bytes:
    /// `ankusa_ingest_body_bytes`.
    pub body_size: Histogram,
}

impl Default for IngestMetrics {
    fn default() -> Self {
        IngestMetrics {
            sources: std::sync::Mutex::new(Vec::new()),
            unrouted: RequestCounts::default(),
            ack_latency: Histogram::latency(),
            body_size: Histogram::new(BODY_BOUNDS_BYTES, 1.0),
        }
    }
}

impl IngestMetrics {
    /// Makes the counts of `routes` (each source's `requests`) visible on
    /// `/metrics`, replacing any registered before.
    pub fn register_sources(&self, routes: &[super::SourceRoute]) {
        let mut m = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        *m = routes
            .iter()
            .map(|r| (r.name.clone(), Arc::clone(&r.requests)))
            .collect();
    }

    /// `(source, code, requests)` of every code answered at least once, the
    /// configured sources in configuration order, then [`UNROUTED`].
    pub fn requests(&self) -> Vec<(String, &'static str, u64)> {
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut out = Vec::new();
        for (name, counts) in &sources {
            out.extend(counts.answered().map(|(code, n)| (name.clone(), code, n)));
        }
        out.extend(
            self.unrouted
                .answered()
                .map(|(code, n)| (UNROUTED.to_owned(), code, n)),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_counted_in_their_slot_and_others_together() {
        let c = RequestCounts::default();
        c.count(200);
        c.count(200);
        c.count(503);
        c.count(418);
        c.count(302);
        assert_eq!(
            c.answered().collect::<Vec<_>>(),
            vec![("200", 2), ("503", 1), ("other", 2)]
        );
    }
}
