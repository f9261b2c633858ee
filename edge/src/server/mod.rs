//! The ingest listener (docs/design.md section 5, "Edge"): hyper 1.x, HTTP/1.1.
//!
//! `POST {path}` (and `{path}/{tenant}` for a TenantPath source) goes through,
//! in order: route (404), method (405), body limit (413), the node's body
//! budget (503 + Retry-After, as the body's bytes arrive), verification (401,
//! or, with `on_invalid_signature: quarantine`, held in quarantine and 202),
//! Slack's url_verification handshake (answered here, nothing stored), a
//! `quarantine: true` source's hold (202), a tenant being purged (503 +
//! Retry-After 30, before dedupe and before a hold), dedupe (a hit answers 200 with the
//! first hook's id and writes nothing), the sinks' filters and ordering keys
//! (the rows), tenant bounds (429 + Retry-After), node
//! bounds / shutting down (503 + Retry-After), then the Writer's `Sync` commit,
//! then `200 {"id": idempotency_key}`. A hook no sink's filter takes is
//! committed all the same (envelope, archive entry, dedupe record) with no
//! delivery row, and answered 200 like any other. A store failure is 503; no input makes
//! the edge panic or answer another 5xx.
//!
//! Quarantine (docs/design.md section 5, "Quarantine"): a held hook is committed
//! `Sync` through the Writer (it gets a seq; envelope, archive entry and ?Q)
//! before its answer, `202 {"id", "quarantined": true}`: every provider takes
//! a 2xx as delivered, and 202 says "accepted, not processed" to a human
//! reading a provider's delivery log. It is not delivered, takes no part in
//! dedupe, counts `quarantined` (and `ankusa_ingest_quarantined_total`), and
//! a tenant holds at most its `max_pending` of them (then 429, or 401 for a
//! bad signature). Their release and drop are the operator's (the admin
//! crate, `ankusa_admin::quarantine`).
//!
//! In a cluster ([`owners`]; docs/design.md section 11), once the body is
//! read: a hook of a tenant another node owns is forwarded to it and its
//! answer returned; one of a tenant without a live owner is held (then 503 +
//! Retry-After); this node commits only a tenant it owns while its lease is
//! fresh, checked before the commit and again before the answer (a hook
//! committed past the deadline is answered 503: the provider sends it again,
//! to the new owner, and the committed copy is drained with its epoch).
//!
//! Nothing here blocks: the Writer commits on a blocking thread and the
//! handler awaits its answer.
//!
//! Limits (docs/design.md section 5, "Limits"; [`limits`]): at most
//! [`Edge::max_connections`] connections (the relay derives it from its
//! file-descriptor limit; past it a connection is answered 503 and closed),
//! headers within [`HEADER_READ_TIMEOUT`], a body within [`BODY_READ_TIMEOUT`],
//! and the node-wide body budget ([`limits::BodyBudget`],
//! `listeners.body_budget_bytes`): it bounds the body bytes received and held
//! in memory, all connections together. Each chunk's bytes are taken from it as
//! they arrive (a `Content-Length` takes nothing ahead of them, so a client
//! declaring a large body holds only what it has sent); a chunk that does not
//! fit is answered 503 with `Retry-After` and `Connection: close`, and no more
//! of that body is read. A body is read into one buffer and held until its
//! request is answered. There is no minimum rate: holding budget costs a client
//! the bytes it holds, re-sent at least every [`BODY_READ_TIMEOUT`].

pub mod handover;
pub mod hold;
pub mod limits;
pub mod metrics;
pub mod owners;
mod routes;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ankusa_config::OnInvalidSignature;
use ankusa_engine::{Cf, Kv};
use ankusa_keys::{CounterField, Envelope, Seq, TenantOrd, counter_key, hook_key};
use ankusa_queue::QueueError;
use ankusa_queue::writer::{IngestRequest, Ingested, QuarantineRequest, WriteError, WriterHandle};
use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{Instrument, debug, info, warn};

pub use routes::{
    ChallengeRoute, IngestRoutes, Resolved, RouteError, SinkRoute, SourceRoute, TenantRoute,
    build_routes, check_source,
};

use crate::{Header, ParsedBody, dedupe, slack};

/// Counters the edge keeps for `/metrics`.
#[derive(Debug, Default)]
pub struct EdgeStats {
    /// Hooks committed.
    pub accepted: AtomicU64,
    /// Provider retries answered from the dedupe record.
    pub duplicates: AtomicU64,
    /// Requests refused by status class: 401.
    pub unauthorized: AtomicU64,
    /// 413.
    pub too_large: AtomicU64,
    /// 429.
    pub throttled: AtomicU64,
    /// 503.
    pub unavailable: AtomicU64,
    /// Hooks held in quarantine (202): a `quarantine: true` source, or a bad
    /// signature with `on_invalid_signature: quarantine`.
    pub quarantined: AtomicU64,
    /// Ordered rows that resolved no key (the keyless lane), by sink kind
    /// (`http`, `file`, ...): `ankusa_dispatch_lane_key_missing_total{sink}`,
    /// ADR 0004 section 7.
    pub lane_key_missing: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// Rows not made because the sink entry's `filter` did not match the
    /// hook, by (source, sink entry) name: `ankusa_ingest_filtered_total`
    /// (committed hooks and quarantine releases).
    pub filtered: std::sync::Mutex<std::collections::BTreeMap<(String, String), u64>>,
    /// Hooks committed with no delivery row at all: no sink's filter matched
    /// (they are stored, archived and deduped like any hook, answered 200,
    /// and deleted by retention), at ingest or at a quarantine release (one
    /// hook or a job's): `ankusa_ingest_unmatched_total`.
    pub unmatched: AtomicU64,
    /// Hooks forwarded to the tenant's owner and answered by it (cluster
    /// mode): `ankusa_cluster_forwarded_total`.
    pub forwarded: AtomicU64,
    /// Hooks held because their tenant had no live owner (cluster mode):
    /// `ankusa_cluster_held_total`.
    pub held: AtomicU64,
    /// Held hooks answered 503 once the hold passed with no owner:
    /// `ankusa_cluster_held_refused_total`.
    pub held_out: AtomicU64,
    /// Hooks of another node's remains taken by a hand-over (cluster mode,
    /// docs/design.md section 11, "Hand-over"):
    /// `ankusa_cluster_adopted_total`.
    pub adopted: AtomicU64,
    /// The node's budget of request body bytes being read, verified and
    /// committed at once (`listeners.body_budget_bytes`); its bytes in use
    /// and its refusals are on `/metrics`.
    pub body_budget: limits::BodyBudget,
    /// The ingest listener's connections: open, cap, refused.
    pub ingest_connections: limits::ConnStats,
    /// Requests by source and status code, the ack latency and the body size
    /// (`ankusa_ingest_requests_total`, `ankusa_ingest_ack_seconds`,
    /// `ankusa_ingest_body_bytes`).
    pub ingest: metrics::IngestMetrics,
}

impl EdgeStats {
    /// Counts one ordered row that resolved no key (the keyless lane) for
    /// each sink kind in `keyless`: `ankusa_dispatch_lane_key_missing_total`.
    /// Called once the hook's rows are committed (ingest, quarantine
    /// release).
    pub fn count_keyless(&self, keyless: &[&'static str]) {
        if !keyless.is_empty() {
            let mut m = self
                .lane_key_missing
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for kind in keyless {
                *m.entry(*kind).or_default() += 1;
            }
        }
    }

    /// Counts one row not made for each sink entry named in `sinks` (of
    /// source `source`) because its filter did not match:
    /// `ankusa_ingest_filtered_total{source,sink_name}`. Called once the hook's
    /// rows are committed (ingest, quarantine release).
    pub fn count_filtered<'a>(&self, source: &str, sinks: impl IntoIterator<Item = &'a str>) {
        let mut sinks = sinks.into_iter().peekable();
        if sinks.peek().is_none() {
            return;
        }
        let mut m = self.filtered.lock().unwrap_or_else(|p| p.into_inner());
        for sink in sinks {
            *m.entry((source.to_owned(), sink.to_owned())).or_default() += 1;
        }
    }
}

/// Everything the ingest handler reads.
pub struct Edge<K: Kv> {
    /// The store (dedupe pre-check, counters for the bounds).
    pub kv: Arc<K>,
    /// The Writer.
    pub writer: WriterHandle,
    /// Called after each commit (wakes the pipeline).
    pub on_commit: Box<dyn Fn() + Send + Sync>,
    /// What the ingest path routes by: one configuration's sources and
    /// limits, replaced whole by a reload. Each request reads it once, so a
    /// hook is routed by one configuration, never a mix (docs/design.md
    /// section 5, "Reload").
    pub routes: ArcSwap<IngestRoutes>,
    /// Most ingest connections open at once (at most [`MAX_CONNECTIONS`]);
    /// the relay derives it from its file-descriptor limit. Past it a new
    /// connection is answered 503 (`Retry-After`) and closed.
    pub max_connections: usize,
    /// Set when shutting down: new hooks get 503, `/readyz` answers 503 (the
    /// admin listener shares it and outlives the ingest listener).
    pub shutting_down: Arc<AtomicBool>,
    /// Hooks admitted and not yet committed (see `reserve`).
    pub reservations: std::sync::Mutex<Reservations>,
    /// Counters (shared with the admin listener's `/metrics`, which outlives
    /// the edge during shutdown).
    pub stats: Arc<EdgeStats>,
    /// Unix ms.
    pub clock: Box<dyn Fn() -> u64 + Send + Sync>,
    /// The cluster runtime ([`owners`]): `None` in a standalone relay,
    /// which takes every tenant's hooks.
    pub owners: Option<Arc<dyn owners::Owners>>,
}

impl<K: Kv> std::fmt::Debug for Edge<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Edge")
            .field("sources", &self.routes.load().sources.len())
            .finish_non_exhaustive()
    }
}

type Resp = Response<Full<Bytes>>;

/// The most ingest connections a relay holds open at once, whatever its
/// file-descriptor limit ([`Edge::max_connections`] is derived from that limit,
/// at most this). Past the cap a connection is answered 503 and closed, so
/// idle sockets can not exhaust the process's file descriptors and starve the
/// store or the admin listener.
pub const MAX_CONNECTIONS: usize = 4096;
/// How long a connection may take to send a request's headers (also the idle
/// time allowed between keep-alive requests).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take to send its body: past it, 408 and nothing
/// stored.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for requests in progress before ending their
/// connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// How long a stop lets connections end on their own, each answer saying
/// `Connection: close`, before it closes the idle ones (see
/// [`Edge::serve_with`]); bounded by the stop's grace.
pub const CONNECTION_DRAIN: Duration = Duration::from_secs(1);

fn json(status: StatusCode, body: serde_json::Value) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error(status: StatusCode, message: impl Into<String>) -> Resp {
    json(status, serde_json::json!({ "error": message.into() }))
}

/// The body text of an ingest 503 when the store failed a read or a write
/// (`{"error": STORE_FAILED}`, with `Retry-After: 5`). It never carries the
/// store's error, which can name its files and so the data_dir (docs/design.md
/// section 7, "Secrets in output"): that goes to the log.
pub const STORE_FAILED: &str =
    "store_failed: the relay could not read or write its store; retry later";

/// The answer to a store failure on ingest; logs `detail`.
fn store_failure(detail: &dyn std::fmt::Display) -> Resp {
    warn!(error = %detail, "the store failed: answered 503 store_failed");
    retry_after(error(StatusCode::SERVICE_UNAVAILABLE, STORE_FAILED), 5)
}

/// `r` marked [`owners::PLACE_AGAIN`].
fn place_again(mut r: Resp) -> Resp {
    r.headers_mut()
        .insert(owners::PLACE_AGAIN, HeaderValue::from_static("1"));
    r
}

/// The owner's answer to a forwarded hook, passed on: its status, body,
/// `content-type` and `retry-after`.
fn forwarded_answer(a: owners::Answer) -> Resp {
    let mut r = Response::new(Full::new(a.body));
    *r.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in a.headers {
        if let (Ok(n), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            r.headers_mut().insert(n, v);
        }
    }
    r
}

fn retry_after(mut r: Resp, seconds: u64) -> Resp {
    if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
        r.headers_mut().insert(RETRY_AFTER, v);
    }
    r
}

/// A provider's GET handshake (docs/design.md section 5): echo the value of query
/// parameter `param` as text; 403 when a configured token does not match
/// (compared in constant time), 400 when the parameter is missing.
fn challenge(query: &str, param: &str, token: Option<&(String, Vec<u8>)>) -> Resp {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if let Some((token_param, want)) = token {
        let got = get(token_param).unwrap_or("").as_bytes();
        let same = got.len() == want.len()
            && bool::from(subtle::ConstantTimeEq::ct_eq(got, want.as_slice()));
        if !same {
            return error(
                StatusCode::FORBIDDEN,
                format!("challenge refused: {token_param} does not match"),
            );
        }
    }
    match get(param) {
        Some(v) => {
            let mut r = Response::new(Full::new(Bytes::from(v.to_owned())));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
        None => error(
            StatusCode::BAD_REQUEST,
            format!("challenge: query parameter {param} missing"),
        ),
    }
}

fn uuid_text(bytes: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*bytes).hyphenated().to_string()
}

/// A hook's idempotency key: a UUIDv7 whose 48-bit timestamp is the
/// envelope's `received_at_ms` (the same clock value), so
/// `GET /v1/hooks/{idempotency_key}` finds the hook through the archive range
/// (ord, received_at_ms, *) without a key family of its own (docs/design.md
/// section 10). Ingest and quarantine both make it here.
fn idempotency_key_at(received_at_ms: u64) -> [u8; 16] {
    let ts = uuid::Timestamp::from_unix(
        uuid::NoContext,
        received_at_ms / 1000,
        ((received_at_ms % 1000) * 1_000_000) as u32,
    );
    *uuid::Uuid::new_v7(ts).as_bytes()
}

impl<K: Kv> Edge<K> {
    /// Serves ingest on `listener` until `shutdown` turns true; then stops
    /// accepting, lets requests in progress finish (their commits included),
    /// and returns.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let stop = async move {
            while shutdown.changed().await.is_ok() {
                if *shutdown.borrow() {
                    return SHUTDOWN_GRACE;
                }
            }
            std::future::pending().await
        };
        self.serve_inner(listener, Vec::new(), stop, true).await;
    }

    /// [`Edge::serve`], serving first the connections a takeover held while
    /// the store moved ([`hold::Holding`]; docs/design.md section 5,
    /// "Takeover"), then what the listener accepts, until `stop` holds a
    /// grace: it then stops accepting and gives the requests in progress that
    /// long to finish. It leaves [`Edge::shutting_down`] to the caller: a
    /// process handing over commits and answers 200 the hooks it has read (on
    /// SIGTERM the caller sets it first, and they are answered 503).
    pub async fn serve_with(
        self: Arc<Self>,
        listener: TcpListener,
        held: Vec<hold::Held>,
        mut stop: watch::Receiver<Option<Duration>>,
    ) {
        let stop = async move {
            loop {
                if let Some(grace) = *stop.borrow_and_update() {
                    return grace;
                }
                if stop.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        };
        self.serve_inner(listener, held, stop, false).await;
    }

    async fn serve_inner(
        self: Arc<Self>,
        listener: TcpListener,
        held: Vec<hold::Held>,
        stop: impl std::future::Future<Output = Duration>,
        mark_shutting_down: bool,
    ) {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        // The connection tasks, so the ones still open when the grace period
        // ends can be ended: each holds the edge (and its Writer handle),
        // which the Writer waits for before it stops.
        let mut conns = tokio::task::JoinSet::new();
        // Once stopping, every answer says `Connection: close` (see the stop
        // below).
        let closing = Arc::new(AtomicBool::new(false));
        let cap = self.max_connections.max(1);
        let counts = &self.stats.ingest_connections;
        counts.cap.store(cap as u64, Ordering::Relaxed);
        let mut accept_errors = limits::AcceptErrors::default();
        for h in held {
            self.spawn_connection(h.stream, h.peer, &graceful, &mut conns, &closing);
        }
        let mut stop = std::pin::pin!(stop);
        let grace = loop {
            counts.open.store(conns.len() as u64, Ordering::Relaxed);
            tokio::select! {
                // Reap finished connections as they end.
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        // EMFILE and the like: never the end of the listener.
                        Err(e) => {
                            tokio::time::sleep(accept_errors.failed("ingest", &e)).await;
                            continue;
                        }
                    };
                    if conns.len() >= cap {
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                        debug!(%peer, cap, "ingest connection refused: the listener holds its cap");
                        let body = serde_json::json!({ "error": limits::cap_message("ingest", cap) });
                        limits::refuse_connection(stream, &body.to_string());
                        continue;
                    }
                    self.spawn_connection(stream, peer, &graceful, &mut conns, &closing);
                }
                grace = &mut stop => break grace,
            }
        };
        if mark_shutting_down {
            self.shutting_down.store(true, Ordering::SeqCst);
        }
        drop(listener);
        // The graceful shutdown closes a connection that is between requests
        // at once, unanswered: one accepted just before the stop whose
        // request is on its way (a client sends it right after it connects),
        // or a kept-alive one whose client is sending its next. So first,
        // for a moment, every answer says `Connection: close` (200, or 503 on
        // SIGTERM) and the connections end on their own as their clients
        // send; then the ones still idle are closed.
        closing.store(true, Ordering::SeqCst);
        let drain = tokio::time::Instant::now() + CONNECTION_DRAIN.min(grace);
        while !conns.is_empty() {
            tokio::select! {
                _ = conns.join_next() => {}
                () = tokio::time::sleep_until(drain) => break,
            }
        }
        if tokio::time::timeout(grace, graceful.shutdown())
            .await
            .is_err()
        {
            warn!(
                grace_ms = grace.as_millis() as u64,
                open = conns.len(),
                "ingest requests still open after the stop's grace period; closing them (none of them was answered 200)"
            );
            conns.abort_all();
        }
        while conns.join_next().await.is_some() {}
        counts.open.store(0, Ordering::Relaxed);
    }

    /// Serves one accepted connection (HTTP/1.1) on its own task in `conns`,
    /// watched by `graceful` for the shutdown; its answers say `Connection:
    /// close` once `closing` is set.
    fn spawn_connection(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        graceful: &hyper_util::server::graceful::GracefulShutdown,
        conns: &mut tokio::task::JoinSet<()>,
        closing: &Arc<AtomicBool>,
    ) {
        let edge = Arc::clone(self);
        let closing = Arc::clone(closing);
        let svc = service_fn(move |req| {
            let (edge, closing) = (Arc::clone(&edge), Arc::clone(&closing));
            async move {
                let mut resp = edge.handle(req, peer).await;
                if closing.load(Ordering::SeqCst) {
                    resp.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, Infallible>(resp)
            }
        });
        // half_close: a client that shuts its write side after the
        // request still gets its answer (its hook may already be
        // committed; it must learn the id).
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .half_close(true)
            .serve_connection(TokioIo::new(stream), svc);
        let conn = graceful.watch(conn);
        conns.spawn(async move {
            if let Err(e) = conn.await {
                debug!(error = %e, %peer, "connection ended with an error");
            }
        });
    }

    /// Handles one request (public for tests that drive the handler directly).
    /// Generic over the body so the fuzz target of the request path
    /// (`crate::fuzz::request`, feature `fuzz`) drives it in process with a
    /// `Request<Full<Bytes>>`; the listener passes hyper's `Incoming`.
    ///
    /// Counts the answer by source and status code, and the ack latency of a
    /// POST answered 2xx ([`metrics::IngestMetrics`]).
    pub async fn handle<B>(&self, req: Request<B>, peer: SocketAddr) -> Resp
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let post = req.method() == Method::POST;
        let routes = self.routes.load_full();
        let mut routed = None;
        let span = ingest_span();
        let resp = self
            .respond(&routes, req, peer, &mut routed, &span)
            .instrument(span.clone())
            .await;
        let status = resp.status();
        let ingest = &self.stats.ingest;
        routed
            .map_or(&ingest.unrouted, |r: &SourceRoute| &*r.requests)
            .count(status.as_u16());
        let elapsed = started.elapsed();
        if post && status.is_success() {
            ingest.ack_latency.observe_duration(elapsed);
        }
        if !span.is_disabled() {
            if let Some(r) = routed {
                span.record("source", tracing::field::display(&r.name));
            }
            span.record("status", i64::from(status.as_u16()));
            span.record("duration_ms", elapsed.as_secs_f64() * 1000.0);
        }
        resp
    }

    /// [`Edge::handle`]'s answer; sets `routed` to the request's source once
    /// it is known.
    async fn respond<'s, B>(
        &self,
        routes: &'s IngestRoutes,
        req: Request<B>,
        peer: SocketAddr,
        routed: &mut Option<&'s SourceRoute>,
        span: &tracing::Span,
    ) -> Resp
    where
        B: hyper::body::Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req.uri().path().to_owned();
        if let Some(tenant) = path.strip_prefix(handover::HANDOVER_PATH)
            && let Some(o) = &self.owners
        {
            return self.receive_handover(o.as_ref(), tenant, req).await;
        }
        let Some((route, tenant)) = routes.route(&path) else {
            return error(StatusCode::NOT_FOUND, format!("no source at {path}"));
        };
        *routed = Some(route);
        let tenant = match tenant {
            Ok(t) => t,
            Err(msg) => return error(StatusCode::NOT_FOUND, msg),
        };
        span.record("tenant", tracing::field::display(&tenant.name));
        if req.method() == Method::GET
            && let Some(c) = &route.challenge
        {
            return challenge(req.uri().query().unwrap_or(""), &c.param, c.token.as_ref());
        }
        if req.method() != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "hooks are POSTed");
        }
        // hyper refuses a request whose Content-Length does not parse, and
        // ends the body at exactly that length.
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(len) = declared
            && len > routes.body_limit_bytes
        {
            self.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "body of {len} bytes is over the {} byte limit",
                    routes.body_limit_bytes
                ),
            );
        }
        // The body's bytes come out of the node's budget as they arrive (not
        // by its Content-Length ahead of them), and go back when this request
        // is answered (`_permit` lives to the end of this function).
        let mut permit = self.stats.body_budget.empty_permit();
        let (parts, body) = req.into_parts();
        let read = limits::read_body(body, routes.body_limit_bytes, declared, &mut permit);
        let body = match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
            Ok(Ok(b)) => b,
            Ok(Err(limits::BodyReadError::TooLarge)) => {
                self.stats.too_large.fetch_add(1, Ordering::Relaxed);
                return error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("body is over the {} byte limit", routes.body_limit_bytes),
                );
            }
            Ok(Err(limits::BodyReadError::Budget)) => {
                return self.body_budget_spent(&route.name, peer);
            }
            Ok(Err(limits::BodyReadError::Read(e))) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("could not read the body: {e}"),
                );
            }
            Err(_) => {
                return error(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the body did not arrive within {} s",
                        BODY_READ_TIMEOUT.as_secs()
                    ),
                );
            }
        };
        let _permit = permit;
        self.stats.ingest.body_size.observe(body.len() as u64);
        let mut owned: Vec<(Vec<u8>, Vec<u8>)> = parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        if let Some(o) = &self.owners {
            if let Some(resp) = self
                .placed(o.as_ref(), &tenant.name, &parts, &owned, &body)
                .await
            {
                return resp;
            }
            // Stored as the provider sent it: the hops it took are not part
            // of the hook (placement reads them from the request itself).
            owned.retain(|(n, _)| !n.eq_ignore_ascii_case(owners::FORWARDED_BY.as_bytes()));
        }
        let headers: Vec<Header<'_>> = owned
            .iter()
            .map(|(n, v)| (n.as_slice(), v.as_slice()))
            .collect();
        let now = (self.clock)();
        let held = |reason: String, bad_signature: bool| Hold {
            route,
            tenant: &tenant,
            method: parts.method.as_str(),
            path: &path,
            query: parts.uri.query(),
            headers: &owned,
            body: &body,
            now,
            reason,
            bad_signature,
        };
        if let Err(e) = route.verifier.verify(&headers, &body, now) {
            if route.on_invalid_signature == OnInvalidSignature::Quarantine {
                info!(source = %route.name, %peer, error = %e, "verification failed: holding the hook in quarantine");
                return self
                    .hold(held(format!("invalid signature: {e}"), true))
                    .await;
            }
            self.stats.unauthorized.fetch_add(1, Ordering::Relaxed);
            info!(source = %route.name, %peer, error = %e, "hook refused: verification failed");
            return error(
                StatusCode::UNAUTHORIZED,
                format!("verification failed: {e}"),
            );
        }
        let parsed = ParsedBody::new(&body);
        if route.slack_handshake
            && let Some(challenge) = slack::url_verification_challenge(&parsed)
        {
            let mut r = Response::new(Full::new(Bytes::from(slack::challenge_response(challenge))));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            return r;
        }
        if route.quarantine {
            return self
                .hold(held("source under quarantine".into(), false))
                .await;
        }
        // A tenant being purged refuses every hook before the dedupe check: a
        // provider's resend answered "duplicate" now would never be sent again,
        // and the purge deletes the hook it duplicates.
        match self.is_purging(tenant.ord) {
            Ok(true) => return self.purging(&tenant.name),
            Ok(false) => {}
            Err(msg) => return self.store_failed(msg),
        }
        let dedupe = route
            .dedupe
            .as_ref()
            .and_then(|(spec, _)| dedupe::dedupe_key(spec, &headers, &parsed));
        if let Some(dk) = &dedupe {
            match self.dedupe_hit(tenant.ord, route, dk, now) {
                Ok(Some(id)) => {
                    self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                    debug!(source = %route.name, "provider retry: dedupe hit");
                    return json(
                        StatusCode::OK,
                        serde_json::json!({ "id": id, "duplicate": true }),
                    );
                }
                Ok(None) => {}
                Err(msg) => return self.store_failed(msg),
            }
        }
        // The sinks' filters and ordering keys (one JSON decode, shared with
        // the dedupe key): only the rows made count against the bounds (a hook
        // with no row adds nothing to the queue and is never refused by them). The
        // keyless and filtered rows are counted only once the rows are
        // committed (not for a Writer-side duplicate, a store failure or a
        // shutdown).
        let Resolved {
            rows,
            keyless,
            filtered,
        } = route.resolve(&headers, &parsed);
        let rows_n = rows.len() as u64;
        let idempotency_key = idempotency_key_at(now);
        let stored_headers = route.store_headers(&owned);
        let envelope = Envelope {
            source: route.id,
            received_at_ms: now,
            method: parts.method.as_str().to_owned(),
            path: path.clone(),
            query: parts.uri.query().map(str::to_owned),
            headers: stored_headers,
            // The body moves into the envelope: no second copy of it.
            body,
            dedupe_key: dedupe,
            idempotency_key,
            replay_of: None,
        };
        // Each row counts the stored envelope's length against the byte
        // bounds (`ankusa_queue::hook_size`, saturated at u32::MAX), so the
        // check reserves exactly what the Writer's commit adds (a break-it
        // run: reserving the body's length let `max_pending_bytes` be
        // overshot by the envelope's headers and fields).
        let bytes_n = u64::from(ankusa_queue::hook_size(&envelope)) * rows_n;
        let reservation = match self.reserve(routes, &tenant, rows_n, bytes_n) {
            Ok(Ok(r)) => r,
            Ok(Err(resp)) => return resp,
            Err(msg) => return self.store_failed(msg),
        };
        if self.shutting_down.load(Ordering::SeqCst) {
            return self.stopping();
        }
        let admitted = match &self.owners {
            Some(o) => {
                let mut tries = 0;
                loop {
                    if let Some(a) = o.admit(&tenant.name) {
                        break Some(a);
                    }
                    // Not this node's to commit any more (a planned move
                    // fenced the tenant since it was placed, or the lease
                    // lapsed): placed again, it is held, forwarded to the
                    // new owner, or refused when the hold passes.
                    tries += 1;
                    if tries > 3 {
                        return self.not_owner(&tenant.name, false);
                    }
                    if let Some(resp) = self
                        .placed(o.as_ref(), &tenant.name, &parts, &owned, &envelope.body)
                        .await
                    {
                        return resp;
                    }
                }
            }
            None => None,
        };
        let req = IngestRequest {
            tenant: tenant.ord,
            envelope,
            rows,
            dedupe_ttl_ms: route.dedupe.as_ref().map(|(_, ttl)| *ttl),
        };
        let ingested = self.writer.ingest(req).await;
        // Committed rows are in the store's counters now; refused or failed
        // ones never counted.
        drop(reservation);
        match ingested {
            Ok(Ingested::Committed(seq)) => {
                span.record("seq", i64::try_from(seq.0).unwrap_or(i64::MAX));
                (self.on_commit)();
                // Fencing again before the answer: committed past the
                // deadline, the hook belongs to an epoch that may already be
                // another node's; unacknowledged, it is sent again to the
                // new owner and this copy goes out with the drain.
                if admitted.as_ref().is_some_and(|a| !a.may_acknowledge()) {
                    return self.not_owner(&tenant.name, true);
                }
                self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                self.count_keyless(&keyless);
                self.count_filtered(route, &filtered, rows_n == 0);
                debug!(source = %route.name, tenant = %tenant.name, seq = seq.0, rows = rows_n, "hook accepted");
                json(
                    StatusCode::OK,
                    serde_json::json!({ "id": uuid_text(&idempotency_key) }),
                )
            }
            Ok(Ingested::Duplicate(seq)) => {
                self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                // `null` when the first hook's envelope is gone (see `dedupe_hit`).
                let id = self.id_of(tenant.ord, seq);
                json(
                    StatusCode::OK,
                    serde_json::json!({ "id": id, "duplicate": true }),
                )
            }
            Err(WriteError::Stopped) => self.stopping(),
            Err(WriteError::TenantPurging { .. }) => self.purging(&tenant.name),
            Err(WriteError::Store(msg)) => self.store_failed(msg),
            // Never for an ingest: nothing was committed.
            Err(e @ (WriteError::NotQuarantined { .. } | WriteError::Refused(_))) => {
                self.unavailable(e.to_string())
            }
        }
    }

    fn count_keyless(&self, keyless: &[&'static str]) {
        self.stats.count_keyless(keyless);
    }

    fn count_filtered(&self, route: &SourceRoute, filtered: &[&str], unmatched: bool) {
        if unmatched {
            self.stats.unmatched.fetch_add(1, Ordering::Relaxed);
        }
        self.stats
            .count_filtered(&route.name, filtered.iter().copied());
    }

    /// Holds a hook in quarantine: the tenant's bound (its `max_pending`
    /// quarantined hooks: 429, or 401 for a bad signature), the Writer's `Sync`
    /// commit (no dedupe), then 202.
    async fn hold(&self, h: Hold<'_>) -> Resp {
        match self.is_purging(h.tenant.ord) {
            Ok(true) => return self.purging(&h.tenant.name),
            Ok(false) => {}
            Err(msg) => return self.store_failed(msg),
        }
        // The committed count plus the hooks being held right now, under the
        // reservations' lock, so concurrent requests never hold more than
        // the bound (a break-it run: 53 held at a bound of 50).
        let taken = {
            let mut reservations = self.reservations.lock().unwrap_or_else(|p| p.into_inner());
            self.kv
                .counter(&counter_key(h.tenant.ord, CounterField::Quarantined))
                .map(|committed| {
                    let held = committed.max(0) as u64
                        + reservations
                            .quarantine
                            .get(&h.tenant.ord)
                            .copied()
                            .unwrap_or(0);
                    if held < h.tenant.max_pending {
                        *reservations.quarantine.entry(h.tenant.ord).or_default() += 1;
                        (
                            held,
                            Some(QuarantineSlot {
                                edge_reservations: &self.reservations,
                                tenant: h.tenant.ord,
                            }),
                        )
                    } else {
                        (held, None)
                    }
                })
        };
        let (held, slot) = match taken {
            Ok(t) => t,
            Err(e) => return self.store_failed(e),
        };
        if slot.is_none() {
            info!(source = %h.route.name, tenant = %h.tenant.name, held, "hook refused: the tenant's quarantine is full");
            if h.bad_signature {
                self.stats.unauthorized.fetch_add(1, Ordering::Relaxed);
                return error(
                    StatusCode::UNAUTHORIZED,
                    format!(
                        "{}; the quarantine of tenant {} is full",
                        h.reason, h.tenant.name
                    ),
                );
            }
            self.stats.throttled.fetch_add(1, Ordering::Relaxed);
            return retry_after(
                error(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!("the quarantine of tenant {} is full", h.tenant.name),
                ),
                30,
            );
        }
        if self.shutting_down.load(Ordering::SeqCst) {
            return self.stopping();
        }
        let admitted = match &self.owners {
            Some(o) => match o.admit(&h.tenant.name) {
                Some(a) => Some(a),
                None => return self.not_owner(&h.tenant.name, false),
            },
            None => None,
        };
        let idempotency_key = idempotency_key_at(h.now);
        let envelope = Envelope {
            source: h.route.id,
            received_at_ms: h.now,
            method: h.method.to_owned(),
            path: h.path.to_owned(),
            query: h.query.map(str::to_owned),
            headers: h.route.store_headers(h.headers),
            body: h.body.to_vec(),
            // A quarantined hook takes no part in dedupe.
            dedupe_key: None,
            idempotency_key,
            replay_of: None,
        };
        let req = QuarantineRequest {
            tenant: h.tenant.ord,
            envelope,
            reason: h.reason,
        };
        let quarantined = self.writer.quarantine(req).await;
        drop(slot);
        match quarantined {
            Ok(_) if admitted.as_ref().is_some_and(|a| !a.may_acknowledge()) => {
                self.not_owner(&h.tenant.name, true)
            }
            Ok(seq) => {
                self.stats.quarantined.fetch_add(1, Ordering::Relaxed);
                info!(source = %h.route.name, tenant = %h.tenant.name, seq = seq.0, "hook held in quarantine");
                json(
                    StatusCode::ACCEPTED,
                    serde_json::json!({ "id": uuid_text(&idempotency_key), "quarantined": true }),
                )
            }
            Err(WriteError::Stopped) => self.stopping(),
            Err(WriteError::TenantPurging { .. }) => self.purging(&h.tenant.name),
            Err(WriteError::Store(msg)) => self.store_failed(msg),
            Err(e) => {
                warn!(error = %e, "the quarantine commit was refused");
                self.unavailable(e.to_string())
            }
        }
    }

    /// 503 with `Retry-After: 30`: the tenant is being purged (docs/design.md
    /// section 5, "Purge a tenant"); the provider retries after the purge.
    fn purging(&self, tenant: &str) -> Resp {
        self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
        retry_after(
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("tenant {tenant} is being purged; retry later"),
            ),
            30,
        )
    }

    /// Whether `tenant` has a purge mark in `meta` (docs/design.md section 5,
    /// "Purge a tenant"): one point get, read from the store on every hook so a
    /// purge resumed after a restart refuses hooks too. The Writer refuses the
    /// tenant's commits as well; this check answers before the edge's own
    /// dedupe pre-check (and the bounds), so a provider's resend of a hook the
    /// purge deletes is refused (503, it retries) rather than answered
    /// "duplicate".
    fn is_purging(&self, tenant: TenantOrd) -> Result<bool, QueueError> {
        ankusa_queue::is_purging(&*self.kv, tenant)
    }

    /// 503 for a store failure: the detail (a backend's error, which may
    /// name the store's files) is logged, the client gets [`STORE_FAILED`].
    fn store_failed(&self, detail: impl std::fmt::Display) -> Resp {
        self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
        store_failure(&detail)
    }

    /// 503 with `Retry-After` and `Connection: close`: the node's body budget
    /// has no room for the bytes of this body that arrived; nothing more of
    /// it is read.
    fn body_budget_spent(&self, source: &str, peer: SocketAddr) -> Resp {
        self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
        self.stats.body_budget.count_refused();
        let budget = &self.stats.body_budget;
        debug!(source, %peer, in_use = budget.in_use_bytes(), limit = budget.limit_bytes(), "hook refused: the body budget is spent");
        let mut r = retry_after(
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the relay is reading its limit of request bodies ({} bytes at once); retry later",
                    budget.limit_bytes()
                ),
            ),
            limits::BUSY_RETRY_AFTER_S,
        );
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        r
    }

    /// 503 + `Retry-After`: the relay is stopping. Marked
    /// [`owners::PLACE_AGAIN`]: a node that forwarded the hook here places it
    /// again (the tenant moves to another node) instead of passing this on.
    fn stopping(&self) -> Resp {
        place_again(self.unavailable("shutting down".into()))
    }

    /// 503 + `Retry-After: 1`: this node may no longer acknowledge a hook
    /// of `tenant` (its lease is past its deadline, or the tenant moved).
    fn not_owner(&self, tenant: &str, committed: bool) -> Resp {
        self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
        if committed {
            warn!(%tenant, "a hook committed after this node's lease deadline: answered 503; the provider sends it again and this copy is delivered with the drain of its epoch");
        } else {
            info!(%tenant, "hook refused: this node's lease is past its deadline or the tenant moved");
        }
        retry_after(
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "this node cannot take tenant {tenant}'s hooks now (cluster ownership changing); retry"
                ),
            ),
            1,
        )
    }

    /// A cluster's placement of a hook of `tenant` ([`owners`]): `None` when
    /// this node commits it; otherwise the answer (the owner's, when
    /// forwarded; 503 once the hold has passed with no owner).
    async fn placed(
        &self,
        o: &dyn owners::Owners,
        tenant: &str,
        parts: &hyper::http::request::Parts,
        headers: &[(Vec<u8>, Vec<u8>)],
        body: &[u8],
    ) -> Option<Resp> {
        let hops: Vec<&str> = parts
            .headers
            .get(owners::FORWARDED_BY)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let may_forward = hops.len() < owners::MAX_HOPS && !hops.contains(&o.node_id());
        let until = Instant::now() + o.hold();
        let mut held = false;
        loop {
            match o.place(tenant) {
                owners::Placement::Local => return None,
                owners::Placement::Remote(addr) if may_forward => {
                    let mut sent: Vec<(Vec<u8>, Vec<u8>)> = headers
                        .iter()
                        .filter(|(n, _)| !n.eq_ignore_ascii_case(owners::FORWARDED_BY.as_bytes()))
                        .cloned()
                        .collect();
                    let mut list = hops.clone();
                    list.push(o.node_id());
                    sent.push((
                        owners::FORWARDED_BY.as_bytes().to_vec(),
                        list.join(",").into_bytes(),
                    ));
                    let path_and_query = parts
                        .uri
                        .path_and_query()
                        .map_or("/", hyper::http::uri::PathAndQuery::as_str);
                    let answer = o
                        .forward(owners::Forward {
                            addr: &addr,
                            method: parts.method.as_str(),
                            path_and_query,
                            headers: &sent,
                            body: Bytes::copy_from_slice(body),
                        })
                        .await;
                    match answer {
                        // The owner stopped or lost the tenant meanwhile:
                        // placed again here, not passed on.
                        Ok(a)
                            if a.status == 503
                                && a.headers.iter().any(|(n, _)| n == owners::PLACE_AGAIN) =>
                        {
                            debug!(%tenant, owner = %addr, "the owner gave the hook back: placing it again");
                        }
                        Ok(a) => {
                            self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
                            return Some(forwarded_answer(a));
                        }
                        Err(e) => {
                            debug!(%tenant, owner = %addr, error = %e, "forward failed: holding the hook and placing it again");
                        }
                    }
                }
                // Forwarded here, and this node would send it back along
                // its path: the views of the catalog differ for a moment.
                // Given back at once, the node before places it again at
                // its next read of the catalog instead of both holding it.
                owners::Placement::Remote(_) if !hops.is_empty() => {
                    return Some(place_again(retry_after(
                        error(
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("tenant {tenant}'s owner is changing; retry"),
                        ),
                        1,
                    )));
                }
                _ => {}
            }
            if !held {
                held = true;
                self.stats.held.fetch_add(1, Ordering::Relaxed);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.shutting_down.load(Ordering::SeqCst) {
                self.stats.held_out.fetch_add(1, Ordering::Relaxed);
                self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
                info!(%tenant, "hook refused: no node could take the tenant's hooks within the hold (a failover or a move in progress, or etcd unreachable)");
                return Some(place_again(retry_after(
                    error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!(
                            "no node can take tenant {tenant}'s hooks now (a failover or a move in progress, or the cluster's etcd unreachable); retry"
                        ),
                    ),
                    1,
                )));
            }
            let _ = tokio::time::timeout(left, o.changed()).await;
        }
    }

    fn unavailable(&self, msg: String) -> Resp {
        self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
        retry_after(error(StatusCode::SERVICE_UNAVAILABLE, msg), 5)
    }

    /// The dedupe pre-check: `Some(id)` on a live record, where `id` is the
    /// first hook's idempotency key read from its envelope, or `None` when
    /// retention (whose `keep_ms` may be shorter than the dedupe lifetime)
    /// deleted that envelope: the record keeps only the seq, so the answer is
    /// `"id": null` (docs/design.md section 5, "Edge", step 7).
    fn dedupe_hit(
        &self,
        tenant: TenantOrd,
        route: &SourceRoute,
        dk: &[u8],
        now: u64,
    ) -> Result<Option<Option<String>>, QueueError> {
        Ok(
            ankusa_queue::live_dedupe(&*self.kv, tenant, route.id, dk, now)?
                .map(|seq| self.id_of(tenant, seq)),
        )
    }

    fn id_of(&self, tenant: TenantOrd, seq: Seq) -> Option<String> {
        let raw = self.kv.get(Cf::Hooks, &hook_key(tenant, seq)).ok()??;
        Envelope::decode(&raw)
            .ok()
            .map(|e| uuid_text(&e.idempotency_key))
    }

    /// Admission against the queue bounds: 429 when the tenant is over its
    /// own bounds, 503 when the node is. The check counts the store's
    /// counters plus every hook admitted and not yet committed (its
    /// reservation, held until the Writer answers), so concurrent requests
    /// cannot all pass on the same stale counter.
    fn reserve(
        &self,
        routes: &IngestRoutes,
        tenant: &TenantRoute,
        rows: u64,
        bytes: u64,
    ) -> Result<Result<Reservation<'_>, Resp>, ankusa_engine::EngineError> {
        // No row: nothing is added to the queue, so no bound can refuse it
        // (docs/design.md section 5, "Edge", step 8 counts only the rows made).
        if rows == 0 {
            return Ok(Ok(Reservation {
                edge_reservations: &self.reservations,
                tenant: tenant.ord,
                rows: 0,
                bytes: 0,
            }));
        }
        let read = |t: TenantOrd, f: CounterField| -> Result<u64, ankusa_engine::EngineError> {
            Ok(self.kv.counter(&counter_key(t, f))?.max(0) as u64)
        };
        let mut held = self.reservations.lock().unwrap_or_else(|p| p.into_inner());
        let (t_rows, t_bytes) = held.tenants.get(&tenant.ord).copied().unwrap_or((0, 0));
        let pending = read(tenant.ord, CounterField::Pending)? + t_rows;
        let pending_bytes = read(tenant.ord, CounterField::Bytes)? + t_bytes;
        if pending + rows > tenant.max_pending || pending_bytes + bytes > tenant.max_pending_bytes {
            self.stats.throttled.fetch_add(1, Ordering::Relaxed);
            info!(tenant = %tenant.name, pending, pending_bytes, "hook refused: tenant over its queue bounds");
            return Ok(Err(retry_after(
                error(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!("tenant {} is over its queue bounds", tenant.name),
                ),
                30,
            )));
        }
        let node_pending = read(TenantOrd::NODE, CounterField::Pending)? + held.node.0;
        let node_bytes = read(TenantOrd::NODE, CounterField::Bytes)? + held.node.1;
        if node_pending + rows > routes.node_max_pending
            || node_bytes + bytes > routes.node_max_pending_bytes
        {
            return Ok(Err(
                self.unavailable("the node is over its queue bounds".into())
            ));
        }
        let e = held.tenants.entry(tenant.ord).or_default();
        e.0 += rows;
        e.1 += bytes;
        held.node.0 += rows;
        held.node.1 += bytes;
        Ok(Ok(Reservation {
            edge_reservations: &self.reservations,
            tenant: tenant.ord,
            rows,
            bytes,
        }))
    }
}

/// A read of the store that did not give what the edge needs: the engine
/// failed it, or the value read does not decode (the dedupe pre-check, a
/// release's envelope).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreReadError {
    /// The engine failed the read.
    #[error(transparent)]
    Engine(#[from] ankusa_engine::EngineError),
    /// The value does not have its family's layout.
    #[error(transparent)]
    Value(#[from] ankusa_keys::ValueError),
}

/// A hook the edge is about to hold in quarantine.
struct Hold<'a> {
    route: &'a SourceRoute,
    tenant: &'a TenantRoute,
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    headers: &'a [(Vec<u8>, Vec<u8>)],
    body: &'a [u8],
    now: u64,
    reason: String,
    bad_signature: bool,
}

/// Rows and bytes admitted at the edge and not yet committed, per tenant and
/// for the node, and hooks being held in each tenant's quarantine.
#[derive(Debug, Default)]
pub struct Reservations {
    tenants: std::collections::HashMap<TenantOrd, (u64, u64)>,
    node: (u64, u64),
    /// Hooks each tenant is holding in quarantine, not yet committed.
    quarantine: std::collections::HashMap<TenantOrd, u64>,
}

/// A hook's place in its tenant's quarantine, released when the request ends
/// (committed: the `quarantined` counter holds it now; refused or failed: it
/// never counted).
struct QuarantineSlot<'a> {
    edge_reservations: &'a std::sync::Mutex<Reservations>,
    tenant: TenantOrd,
}

impl Drop for QuarantineSlot<'_> {
    fn drop(&mut self) {
        let mut held = self
            .edge_reservations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.quarantine.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
        }
    }
}

/// A hook's admission, released when the request ends (committed: the
/// store's counters hold it now; refused or failed: it never counted).
struct Reservation<'a> {
    edge_reservations: &'a std::sync::Mutex<Reservations>,
    tenant: TenantOrd,
    rows: u64,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut held = self
            .edge_reservations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(e) = held.tenants.get_mut(&self.tenant) {
            e.0 = e.0.saturating_sub(self.rows);
            e.1 = e.1.saturating_sub(self.bytes);
        }
        held.node.0 = held.node.0.saturating_sub(self.rows);
        held.node.1 = held.node.1.saturating_sub(self.bytes);
    }
}

/// The `ingest` span of one request to the ingest listener (debug level,
/// target `ankusa_edge::server`: off under the default `info` filter, on with
/// `RUST_LOG=ankusa=debug`). Fields, recorded as they become known: `source`
/// and `tenant` (names; absent for a path no source serves), `seq` (the
/// hook's, once committed; absent for a refusal, a duplicate or a held hook),
/// `status` (the answer's HTTP status) and `duration_ms` (until the answer,
/// fractional). No header, body or ordering key. A disabled span costs one
/// check of the filter's interest per request. Integers are recorded as
/// `i64`, OpenTelemetry's integer (tracing-opentelemetry exports a `u64` as
/// its text; a build with the `otel` feature exports this span).
fn ingest_span() -> tracing::Span {
    tracing::debug_span!(
        "ingest",
        source = tracing::field::Empty,
        tenant = tracing::field::Empty,
        seq = tracing::field::Empty,
        status = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http_body_util::BodyExt;

    /// A store failure on ingest answers 503 with a generic body; the store's
    /// error, which names its files (so the data_dir), is not in it.
    #[tokio::test]
    async fn a_store_failure_on_ingest_answers_without_the_store_path() {
        let path = "/srv/ankusa/data/store-rocksdb/000012.log";
        let e = ankusa_engine::EngineError::Backend {
            backend: "rocksdb",
            op: "sync",
            kind: ankusa_engine::ErrorKind::Io,
            message: format!("IO error: No space left on device: While appending to file: {path}"),
        };
        assert!(e.to_string().contains(path));
        let r = store_failure(&e);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers().get("retry-after").unwrap(), "5");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, serde_json::json!({ "error": STORE_FAILED }));
        assert!(!body.to_string().contains("/srv/ankusa"));
    }
}
