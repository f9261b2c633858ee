//! The admin listener (docs/design.md section 5, "Admin API"): `/metrics`
//! (Prometheus text through `prometheus-client`, the Prometheus project's own
//! Rust client), `/healthz`, `/readyz`, the operator's JSON API under
//! `/v1/` ([`routes`], described by the OpenAPI 3.1 document served at
//! `/v1/openapi.json`, `openapi.json` beside this file), and the operator
//! console, a web page over that API at `/console` ([`console`]).
//!
//! # Access
//! - With `listeners.admin_token`, every route but `/healthz`, `/readyz` and
//!   the operator console's static files ([`console`]) needs
//!   `Authorization: Bearer <token>` (`/metrics` only with
//!   `listeners.metrics_require_token`); the token is compared in constant
//!   time (SHA-256 of both sides, then `subtle`), and a missing or wrong one
//!   is 401 `unauthorized` with nothing changed. Wrong tokens are counted
//!   and logged, and a client address that keeps sending them is answered
//!   429 for a while ([`auth`]).
//! - Without a token the configuration only binds loopback (a load rule) and
//!   [`serve_admin`] logs at start that the API is open. A browser on that
//!   machine reaches loopback for every page it shows, so such a relay
//!   refuses (403 `forbidden`, [`browser_guard`]) a request whose `Origin`
//!   is another site (a cross-site form or `fetch`: CSRF) and a `/v1/`
//!   or `/metrics` request whose `Host` is a name other than `localhost`
//!   (DNS rebinding).
//!   Clients that are not browsers send no `Origin`; the console sends its
//!   own.
//! - At most [`AdminState::max_connections`] connections (the relay derives
//!   it from its file-descriptor limit, at most [`MAX_ADMIN_CONNECTIONS`]); at
//!   the cap a new connection closes the oldest idle one, and only when every
//!   connection is inside a request is it answered 503 and closed ([`conns`]:
//!   idle connections must not keep the probes out); a request's headers within
//!   [`ADMIN_HEADER_READ_TIMEOUT`] (a connection that sends half a request, or
//!   stays idle that long, is closed); request bodies at most
//!   [`ADMIN_BODY_LIMIT_BYTES`] (413) within [`ADMIN_BODY_READ_TIMEOUT`].
//!
//! # Errors
//! Every error is `{"error": {"code", "message"}}` ([`api::ApiError`]); no
//! input is a 5xx or a panic: only a store failure is (503 `store_failed`).
//!
//! # Mutations
//! One at a time ([`Context::writes`]), each one batch built by a pure
//! builder of `queue`, written `Durability::Sync`; a revive wakes the
//! pipeline. Writes that must be serialised with ingest (a quarantine
//! release or drop, an archive replay, a tenant's purge mark) go through the
//! Writer ([`Context::ingest`]); writes that move rows the pipeline moves
//! (a purge page, a retired source's dead letters) and pauses go through the
//! pipeline ([`Context::pipeline`], [`crate::PipelineControl`]). Bulk work
//! is a job ([`crate::jobs`]) that survives a restart. The mutations and the
//! jobs are the domain's ([`crate::dlq`], [`crate::quarantine`],
//! [`crate::jobs`]); the handlers here parse a request, call them and write
//! the answer (a [`crate::JobError`] becomes an [`api::ApiError`]).
//!
//! Gauges of `/metrics` come from the store's maintained counters of the node
//! aggregate, read at scrape time, never from scans (ADR 0004 section 7); no
//! label comes from a key, a tenant or a lane, so the series count is fixed.

pub mod api;
pub mod auth;
pub mod backup;
mod config;
mod conns;
pub mod console;
mod dlq;
pub mod jobs;
mod metrics;
mod pause;
mod quarantine;
mod transform;
mod views;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ankusa_engine::Kv;
use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::metrics::{DeliveryMetrics, WriterMetrics};
use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::header::{
    ALLOW, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderValue, ORIGIN, RETRY_AFTER,
    WWW_AUTHENTICATE,
};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry as MetricsRegistry;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use ankusa_edge::server::{EdgeStats, limits};
use api::{ApiError, Query};
pub use dlq::{LIST_SCAN_BUDGET, filter_from_query};
use metrics::StoreCollector;
pub use views::BreakerReport;

use crate::context::Context;

/// The most admin connections a relay holds open at once, whatever its
/// file-descriptor limit ([`AdminState::max_connections`] is derived from that
/// limit, at most this); at the cap a new connection takes the place of the
/// oldest idle one, or is answered 503 and closed when all are busy, so idle
/// sockets can exhaust neither file descriptors nor the probes' room.
pub const MAX_ADMIN_CONNECTIONS: usize = 256;
/// How long a connection may take to send a request's headers (and the idle
/// time allowed between keep-alive requests).
pub const ADMIN_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take to send its body (408 past it).
pub const ADMIN_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request body the API reads (413 above): its bodies are small
/// JSON objects.
pub const ADMIN_BODY_LIMIT_BYTES: usize = 64 * 1024;

/// The OpenAPI 3.1 document of the API (served at `/v1/openapi.json`).
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// Every route of the admin listener: `(method, path pattern, handler)`;
/// `{name}` matches one path segment. The router matches requests against
/// this table only and runs the route's handler (an exhaustive match), so a
/// path and method are served exactly when they are here; a test holds the
/// table ([`routes`]) equal to the OpenAPI document's paths.
const ROUTES: &[(&str, &str, Handler)] = &[
    ("GET", "/healthz", Handler::Healthz),
    ("GET", "/readyz", Handler::Readyz),
    ("GET", "/metrics", Handler::Metrics),
    ("GET", "/v1/openapi.json", Handler::OpenApi),
    ("GET", console::PAGE, Handler::Console),
    ("GET", console::SCRIPT, Handler::Console),
    ("GET", console::STYLE, Handler::Console),
    ("GET", "/v1/tenants", Handler::Api(ApiRoute::ListTenants)),
    (
        "GET",
        "/v1/tenants/{tenant}",
        Handler::Api(ApiRoute::GetTenant),
    ),
    (
        "GET",
        "/v1/tenants/{tenant}/hooks/{seq}",
        Handler::Api(ApiRoute::GetHook),
    ),
    (
        "GET",
        "/v1/hooks/{idempotency_key}",
        Handler::Api(ApiRoute::FindHook),
    ),
    ("GET", "/v1/sources", Handler::Api(ApiRoute::ListSources)),
    (
        "GET",
        "/v1/sources/{source}",
        Handler::Api(ApiRoute::GetSource),
    ),
    (
        "GET",
        "/v1/dead-letters",
        Handler::Api(ApiRoute::ListDeadLetters),
    ),
    (
        "GET",
        "/v1/dead-letters/{id}",
        Handler::Api(ApiRoute::GetDeadLetter),
    ),
    (
        "DELETE",
        "/v1/dead-letters/{id}",
        Handler::Api(ApiRoute::DropDeadLetter),
    ),
    (
        "POST",
        "/v1/dead-letters/{id}/revive",
        Handler::Api(ApiRoute::ReviveDeadLetter),
    ),
    (
        "POST",
        "/v1/sources/{source}/pause",
        Handler::Api(ApiRoute::PauseSource),
    ),
    (
        "POST",
        "/v1/sources/{source}/resume",
        Handler::Api(ApiRoute::ResumeSource),
    ),
    (
        "POST",
        "/v1/sources/{source}/sinks/{sink}/pause",
        Handler::Api(ApiRoute::PauseSink),
    ),
    (
        "POST",
        "/v1/sources/{source}/sinks/{sink}/resume",
        Handler::Api(ApiRoute::ResumeSink),
    ),
    (
        "GET",
        "/v1/tenants/{tenant}/quarantine",
        Handler::Api(ApiRoute::ListQuarantined),
    ),
    (
        "GET",
        "/v1/tenants/{tenant}/quarantine/{seq}",
        Handler::Api(ApiRoute::GetQuarantined),
    ),
    (
        "DELETE",
        "/v1/tenants/{tenant}/quarantine/{seq}",
        Handler::Api(ApiRoute::DropQuarantined),
    ),
    (
        "POST",
        "/v1/tenants/{tenant}/quarantine/{seq}/release",
        Handler::Api(ApiRoute::ReleaseQuarantined),
    ),
    ("GET", "/v1/jobs", Handler::Api(ApiRoute::ListJobs)),
    ("POST", "/v1/jobs", Handler::Api(ApiRoute::CreateJob)),
    ("GET", "/v1/jobs/{id}", Handler::Api(ApiRoute::GetJob)),
    (
        "POST",
        "/v1/jobs/{id}/cancel",
        Handler::Api(ApiRoute::CancelJob),
    ),
    ("GET", "/v1/config", Handler::Api(ApiRoute::GetConfig)),
    ("GET", backup::PATH, Handler::Backup),
    ("POST", "/v1/reload", Handler::Api(ApiRoute::Reload)),
    (
        "POST",
        "/v1/transform/test",
        Handler::Api(ApiRoute::TestTransform),
    ),
];

/// Every route of the admin listener as `(method, path pattern)`: the
/// router's own table without its handlers.
pub fn routes() -> impl Iterator<Item = (&'static str, &'static str)> {
    ROUTES.iter().map(|(method, path, _)| (*method, *path))
}

/// What a route of [`ROUTES`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handler {
    Healthz,
    Readyz,
    Metrics,
    OpenApi,
    /// One of the console's static files (the path is the file).
    Console,
    /// A route of the JSON API (its answer one of [`crate::api_types`]).
    Api(ApiRoute),
    /// The online backup: its answer is streamed ([`backup`]), outside
    /// [`handle`].
    Backup,
}

/// The routes of the JSON API under `/v1/`, each one handler of [`route`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ApiRoute {
    ListTenants,
    GetTenant,
    GetHook,
    FindHook,
    ListSources,
    GetSource,
    ListDeadLetters,
    GetDeadLetter,
    DropDeadLetter,
    ReviveDeadLetter,
    PauseSource,
    ResumeSource,
    PauseSink,
    ResumeSink,
    ListQuarantined,
    GetQuarantined,
    DropQuarantined,
    ReleaseQuarantined,
    ListJobs,
    CreateJob,
    GetJob,
    CancelJob,
    GetConfig,
    Reload,
    TestTransform,
}

/// Reads a breaker: `(tenant, source, sink index, now_ms)`.
pub type BreakerFn = Box<dyn Fn(TenantOrd, SourceId, SinkIx, u64) -> BreakerReport + Send + Sync>;

/// Open and half-open breakers of each configured sink kind at `now_ms`:
/// `(kind, open, half-open)`.
pub type BreakersByKind = Box<dyn Fn(u64) -> Vec<(&'static str, u64, u64)> + Send + Sync>;

/// What the admin routes read and write: the domain's [`Context`] (the
/// store, the configuration, the clock, the write lock, the edge and the
/// pipeline's controls; `AdminState` derefs to it) and what only the
/// listener reads (the figures of `/metrics`, the breakers of the source
/// views, its connection cap). It holds no part of the edge that keeps the
/// Writer alive, so the admin listener can answer (`/readyz` 503,
/// `/metrics`) until the relay has stopped.
pub struct AdminState<K: Kv> {
    /// What the admin actions and the jobs work with; shared with the jobs'
    /// tasks.
    pub ctx: Arc<Context<K>>,
    /// The edge's counters.
    pub stats: Arc<EdgeStats>,
    /// The pipeline's breakers, read-only.
    pub breakers: BreakerFn,
    /// Configured sink entries paused now (the pipeline keeps it:
    /// `PipelineHandle::paused_sinks`), the `ankusa_dispatch_paused` gauge.
    pub paused_sinks: Arc<AtomicU64>,
    /// Envelopes the retention sweep has deleted since the start
    /// (`ankusa_retention_hooks_deleted_total`).
    pub retention_hooks_deleted: Arc<AtomicU64>,
    /// Expired dedupe records the sweep has deleted since the start
    /// (`ankusa_retention_dedupe_expired_total`).
    pub retention_dedupe_expired: Arc<AtomicU64>,
    /// Provider headers the broker sinks dropped at delivery because they did
    /// not fit the message (`forward_headers`), by sink kind: the
    /// `ankusa_forwarded_headers_dropped_total{sink}` counter. The relay wires
    /// the sinks crate's totals; the default has none.
    pub forwarded_headers_dropped: Box<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>,
    /// Cluster mode's counters (docs/design.md section 11), each as (name
    /// without `_total`, help, value): the relay wires its cluster
    /// runtime's; a standalone relay has none.
    pub cluster: Box<dyn Fn() -> Vec<(&'static str, &'static str, u64)> + Send + Sync>,
    /// The cluster runtime's gauges (name, help, value): empty for a
    /// standalone relay.
    pub cluster_gauges: Box<dyn Fn() -> Vec<(&'static str, &'static str, i64)> + Send + Sync>,
    /// The relay's notifications' counters (docs/design.md section 5,
    /// "Notifications"), each as (name without `_total`, help, value): the
    /// relay wires its notifier's; the default has none.
    pub notify: Box<dyn Fn() -> Vec<(&'static str, &'static str, u64)> + Send + Sync>,
    /// Most admin connections open at once (default
    /// [`MAX_ADMIN_CONNECTIONS`]; the relay derives it from its
    /// file-descriptor limit).
    pub max_connections: usize,
    /// The admin listener's connections: open, cap, refused (on `/metrics`
    /// beside the ingest listener's, which are the edge's).
    pub connections: limits::ConnStats,
    /// The pipeline's delivery figures by sink kind (attempts by outcome,
    /// call and ingest-to-delivery latencies); the default has no kind.
    pub delivery: Arc<DeliveryMetrics>,
    /// Open and half-open breakers of each configured sink kind at `now_ms`
    /// (`pipeline::PipelineStatus::breakers_by_kind`); the default has none.
    pub breakers_by_kind: BreakersByKind,
    /// The Writer's group sizes and commit latencies
    /// (`WriterHandle::metrics`); the default is its own zeros.
    pub writer: Arc<WriterMetrics>,
    /// The `version` label of `ankusa_build_info` (the relay sets its own;
    /// the default is this crate's).
    pub version: &'static str,
    /// Wrong bearer tokens: counted, logged, and their senders slowed.
    pub auth_failures: auth::AuthFailures,
}

impl<K: Kv> std::ops::Deref for AdminState<K> {
    type Target = Context<K>;

    fn deref(&self) -> &Context<K> {
        &self.ctx
    }
}

impl<K: Kv> AdminState<K> {
    /// An admin state over `ctx` and the edge's counters whose breakers all
    /// read closed and whose pause and retention counters are its own zeros;
    /// set the fields to wire the pipeline and the retention task.
    pub fn new(ctx: Arc<Context<K>>, stats: Arc<EdgeStats>) -> AdminState<K> {
        AdminState {
            ctx,
            stats,
            breakers: Box::new(|_, _, _, _| BreakerReport::Closed { failures: 0 }),
            paused_sinks: Arc::new(AtomicU64::new(0)),
            retention_hooks_deleted: Arc::new(AtomicU64::new(0)),
            retention_dedupe_expired: Arc::new(AtomicU64::new(0)),
            forwarded_headers_dropped: Box::new(Vec::<(&'static str, u64)>::new),
            cluster: Box::new(Vec::new),
            cluster_gauges: Box::new(Vec::new),
            notify: Box::new(Vec::new),
            max_connections: MAX_ADMIN_CONNECTIONS,
            connections: limits::ConnStats::default(),
            delivery: Arc::new(DeliveryMetrics::default()),
            breakers_by_kind: Box::new(|_| Vec::new()),
            writer: Arc::new(WriterMetrics::default()),
            version: env!("CARGO_PKG_VERSION"),
            auth_failures: auth::AuthFailures::default(),
        }
    }
}

type Resp = Response<Full<Bytes>>;

/// An answer's body: built whole, or the backup's stream.
type AdminBody = Either<Full<Bytes>, backup::DumpBody>;

/// `GET /v1/backup`, after the access rules: the dump's stream, or the error.
fn stream_backup<K: Kv>(
    state: &Arc<AdminState<K>>,
    client: std::net::IpAddr,
    req: &Request<hyper::body::Incoming>,
) -> Response<AdminBody> {
    if let Some(refused) = admit(state, client, req) {
        return refused.map(Either::Left);
    }
    match backup::start(state) {
        Ok(r) => r.map(Either::Right),
        Err(e) => error_resp(&e).map(Either::Left),
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json_resp(status: StatusCode, body: &serde_json::Value) -> Resp {
    text(status, "application/json", body.to_string())
}

fn error_resp(e: &ApiError) -> Resp {
    let mut r = json_resp(e.status, &e.body());
    if e.status == StatusCode::UNAUTHORIZED {
        r.headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    r
}

/// True when `header` (the request's Authorization) carries `token`: SHA-256
/// of both, compared in constant time, so neither the bytes nor the length of
/// the token leak through timing. The scheme name is case-insensitive
/// (RFC 9110 section 11.1): `bearer` and `BEARER` are `Bearer`.
fn token_matches(header: Option<&HeaderValue>, token: &str) -> bool {
    let Some(given) = header
        .map(HeaderValue::as_bytes)
        .and_then(|h| (h.len() > 7 && h[..7].eq_ignore_ascii_case(b"bearer ")).then(|| &h[7..]))
    else {
        return false;
    };
    let a = Sha256::digest(given);
    let b = Sha256::digest(token.as_bytes());
    bool::from(subtle::ConstantTimeEq::ct_eq(a.as_slice(), b.as_slice()))
}

/// The 429 for a client address that has spent its wrong tokens
/// ([`auth::AuthFailures::admit`]): `Retry-After` in whole seconds, rounded up.
fn too_many_wrong_tokens(wait: Duration) -> Resp {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let secs = secs.max(1);
    let mut r = error_resp(&ApiError {
        status: StatusCode::TOO_MANY_REQUESTS,
        code: "too_many_requests",
        message: format!(
            "too many wrong bearer tokens from this address: retry in {secs} s (every request of it that needs the token waits, the right token included)"
        ),
    });
    r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    r
}

/// The browser's attacks on an admin listener without a token
/// (docs/design.md section 5, "Admin API"), checked before any route:
/// `None` to go on, or the 403 `forbidden` to answer.
///
/// - `origin` (the `Origin` header) present and not this listener's own
///   (`http://` or `https://` and the `Host` value): another site's page
///   posting to it (a form, or `fetch` with `mode: 'no-cors'`, needs no
///   preflight and so no CORS answer).
/// - For `/v1/` paths and `/metrics`, `host` (the `Host` header) naming
///   anything but an IP address or `localhost`: a page whose own name was
///   re-pointed at 127.0.0.1 (DNS rebinding) reading the API or the figures
///   (tenants' backlogs, delivery rates) as its own origin.
///
/// A request without `Host` (HTTP/1.0) or `Origin` is not a browser's and
/// goes on.
fn browser_guard(
    path: &str,
    host: Option<&HeaderValue>,
    origin: Option<&HeaderValue>,
) -> Option<ApiError> {
    let forbidden = |message: String| ApiError {
        status: StatusCode::FORBIDDEN,
        code: "forbidden",
        message,
    };
    let host = host.map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
    if let Some(origin) = origin {
        let origin = String::from_utf8_lossy(origin.as_bytes());
        let own = host.as_deref().is_some_and(|h| {
            ["http://", "https://"].iter().any(|scheme| {
                origin.len() == scheme.len() + h.len()
                    && origin.eq_ignore_ascii_case(&format!("{scheme}{h}"))
            })
        });
        if !own {
            return Some(forbidden(format!(
                "a request from another site's page (Origin {:?}) is refused: this admin listener has no listeners.admin_token, \
                 so a browser on this machine could otherwise act for any page it shows",
                origin.chars().take(100).collect::<String>()
            )));
        }
    }
    if (path.starts_with("/v1/") || path == "/metrics")
        && let Some(host) = host
    {
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default().to_owned(),
            None => match host.rsplit_once(':') {
                Some((name, port)) if port.parse::<u16>().is_ok() => name.to_owned(),
                _ => host.clone(),
            },
        };
        if name.parse::<std::net::IpAddr>().is_err() && !name.eq_ignore_ascii_case("localhost") {
            return Some(forbidden(format!(
                "Host {:?} is refused: this admin listener has no listeners.admin_token, so it answers the API and /metrics only \
                 at an IP address or localhost (a page's own name pointed at 127.0.0.1 must not read it); \
                 use http://127.0.0.1:PORT or set listeners.admin_token",
                host.chars().take(100).collect::<String>()
            )));
        }
    }
    None
}

/// Matches `path` against a route pattern of [`ROUTES`]: the captured
/// `{name}` segments in order, or `None`.
fn match_route<'p>(pattern: &str, path: &'p str) -> Option<Vec<&'p str>> {
    let mut params = Vec::new();
    let mut segs = path.split('/');
    for want in pattern.split('/') {
        let seg = segs.next()?;
        if want.starts_with('{') {
            if seg.is_empty() {
                return None;
            }
            params.push(seg);
        } else if want != seg {
            return None;
        }
    }
    segs.next().is_none().then_some(params)
}

/// Serves the admin listener until `shutdown` turns true. At start it resumes
/// the admin jobs a previous run left running (docs/design.md section 5), and
/// logs when the API is open (no `listeners.admin_token`).
pub async fn serve_admin<K: Kv>(
    state: Arc<AdminState<K>>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    if state.config.load().listeners.admin_token.is_none() {
        warn!(
            admin = %state.config.load().listeners.admin,
            "the admin API is open (no listeners.admin_token): anyone who can reach this loopback address can revive and drop dead letters"
        );
    }
    match crate::jobs::resume(&state.ctx) {
        Ok(0) => {}
        Ok(n) => info!(jobs = n, "admin jobs resumed"),
        Err(e) => warn!(error = %e.message(), "could not read the admin jobs; none resumed"),
    }
    let mut registry = MetricsRegistry::default();
    registry.register_collector(Box::new(StoreCollector {
        state: Arc::clone(&state),
    }));
    let registry = Arc::new(registry);
    let mut conns = conns::Conns::default();
    let cap = state.max_connections.max(1);
    let counts = &state.connections;
    counts.cap.store(cap as u64, Ordering::Relaxed);
    let mut accept_errors = limits::AcceptErrors::default();
    loop {
        counts.open.store(conns.len() as u64, Ordering::Relaxed);
        tokio::select! {
            () = conns.ended() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    // EMFILE and the like: never the end of the listener.
                    Err(e) => {
                        tokio::time::sleep(accept_errors.failed("admin", &e)).await;
                        continue;
                    }
                };
                // At the cap the oldest idle connection makes room (the
                // probes must get through: `conns`); only a listener whose
                // every connection is inside a request refuses.
                if conns.len() >= cap {
                    if conns.evict_idle() {
                        debug!(%peer, cap, "the admin listener holds its cap: its oldest idle connection was closed to make room");
                    } else {
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                        debug!(%peer, cap, "admin connection refused: the listener holds its cap, every connection busy");
                        let body = ApiError::unavailable(limits::cap_message("admin", cap)).body();
                        limits::refuse_connection(stream, &body.to_string());
                        continue;
                    }
                }
                let state = Arc::clone(&state);
                let registry = Arc::clone(&registry);
                let client = peer.ip();
                conns.spawn(move |busy| {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let state = Arc::clone(&state);
                        let registry = Arc::clone(&registry);
                        let guard = conns::Busy::new(&busy);
                        async move {
                            let resp: Response<AdminBody> =
                                if backup::is_backup(req.method(), req.uri().path()) {
                                    stream_backup(&state, client, &req)
                                } else {
                                    handle(state, registry, client, req).await.map(Either::Left)
                                };
                            Ok::<_, Infallible>(resp.map(|body| conns::Tracked::new(body, guard)))
                        }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(ADMIN_HEADER_READ_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), svc);
                    async move {
                        if let Err(e) = conn.await {
                            debug!(error = %e, %peer, "admin connection ended with an error");
                        }
                    }
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

/// The listener's access rules ("Access" in the module docs), before any
/// route runs: the browser guard without a token, the throttle of wrong
/// tokens, the token. `Some(answer)` refuses the request.
fn admit<K: Kv>(
    state: &AdminState<K>,
    client: std::net::IpAddr,
    req: &Request<hyper::body::Incoming>,
) -> Option<Resp> {
    let path = req.uri().path().to_owned();
    let token = state
        .config
        .load()
        .listeners
        .admin_token
        .as_ref()
        .map(|t| t.expose().to_owned());
    let open = match path.as_str() {
        "/healthz" | "/readyz" => true,
        "/metrics" => !state.config.load().listeners.metrics_require_token,
        // The console's static files hold no data; the page sends the token
        // with every API call it makes.
        p => console::is_console_path(p),
    };
    if token.is_none()
        && let Some(refused) =
            browser_guard(&path, req.headers().get(HOST), req.headers().get(ORIGIN))
    {
        return Some(error_resp(&refused));
    }
    if !open && let Some(token) = &token {
        let now = std::time::Instant::now();
        // Before the token is compared: a guesser must not learn at full
        // speed which guess was right ([`auth`]).
        if let Err(wait) = state.auth_failures.admit(client, now) {
            return Some(too_many_wrong_tokens(wait));
        }
        if !token_matches(req.headers().get(AUTHORIZATION), token) {
            let sent = req.headers().contains_key(AUTHORIZATION);
            if let Some(line) = state.auth_failures.failed(client, now) {
                warn!(
                    client = %line.client,
                    failures = line.failures,
                    path = %path.chars().take(100).collect::<String>(),
                    "admin requests refused for a missing or wrong bearer token (failures since the last such line; the latest client shown)"
                );
            }
            let why = if sent {
                "the bearer token is wrong"
            } else {
                "send Authorization: Bearer <listeners.admin_token>"
            };
            return Some(error_resp(&ApiError {
                status: StatusCode::UNAUTHORIZED,
                code: "unauthorized",
                message: why.into(),
            }));
        }
    }
    None
}

async fn handle<K: Kv>(
    state: Arc<AdminState<K>>,
    registry: Arc<MetricsRegistry>,
    client: std::net::IpAddr,
    req: Request<hyper::body::Incoming>,
) -> Resp {
    let path = req.uri().path().to_owned();
    if let Some(refused) = admit(&state, client, &req) {
        return refused;
    }
    let matched: Vec<(&str, &str, Handler, Vec<&str>)> = ROUTES
        .iter()
        .filter_map(|(m, p, h)| match_route(p, &path).map(|params| (*m, *p, *h, params)))
        .collect();
    if matched.is_empty() {
        return error_resp(&ApiError::not_found(format!("no admin route {path}")));
    }
    let method = req.method().clone();
    let Some((_, pattern, handler, params)) = matched
        .iter()
        .find(|(m, _, _, _)| *m == method.as_str())
        .cloned()
    else {
        let allow: Vec<&str> = matched.iter().map(|(m, _, _, _)| *m).collect();
        let mut r = error_resp(&ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            code: "method_not_allowed",
            message: format!("{path} answers {}", allow.join(", ")),
        });
        if let Ok(v) = HeaderValue::from_str(&allow.join(", ")) {
            r.headers_mut().insert(ALLOW, v);
        }
        return r;
    };
    let params: Vec<String> = params.into_iter().map(str::to_owned).collect();
    let api_route = match handler {
        Handler::Healthz => return text(StatusCode::OK, "text/plain", "ok\n".into()),
        Handler::Readyz => {
            return if state.shutting_down.load(Ordering::SeqCst) {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "shutting down\n".into(),
                )
            } else if let Some(why) = state.unready.as_ref().and_then(|f| f()) {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("{why}\n"),
                )
            } else if state.ready.load(Ordering::SeqCst) {
                text(StatusCode::OK, "text/plain", "ready\n".into())
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "starting\n".into(),
                )
            };
        }
        Handler::Metrics => {
            let mut out = String::new();
            return match prometheus_client::encoding::text::encode(&mut out, &registry) {
                Ok(()) => text(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    out,
                ),
                Err(e) => error_resp(&ApiError::store(e)),
            };
        }
        Handler::OpenApi => {
            return text(StatusCode::OK, "application/json", OPENAPI_JSON.to_owned());
        }
        Handler::Console => {
            return console::response(pattern).unwrap_or_else(|| {
                error_resp(&ApiError::not_found(format!("no admin route {path}")))
            });
        }
        Handler::Api(r) => r,
        // Streamed by the connection's service before `handle` (`backup`).
        Handler::Backup => {
            return error_resp(&ApiError::not_found(format!("no admin route {path}")));
        }
    };
    let query = match Query::parse(req.uri().query()) {
        Ok(q) => q,
        Err(e) => return error_resp(&e),
    };
    let body = if method == Method::POST {
        match read_body(req).await {
            Ok(b) => b,
            Err(e) => return error_resp(&e),
        }
    } else {
        Bytes::new()
    };
    let st = Arc::clone(&state);
    let answered =
        tokio::task::spawn_blocking(move || route(&st, api_route, &params, query, &body)).await;
    match answered {
        Ok(Ok((status, v))) => json_resp(status, &v),
        Ok(Err(e)) => error_resp(&e),
        Err(e) => {
            warn!(error = %e, "an admin request's handler failed");
            error_resp(&ApiError::store(format!(
                "the request's handler failed: {e}"
            )))
        }
    }
}

async fn read_body(req: Request<hyper::body::Incoming>) -> Result<Bytes, ApiError> {
    let too_large = || ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "payload_too_large",
        message: format!("the body is over {ADMIN_BODY_LIMIT_BYTES} bytes"),
    };
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > ADMIN_BODY_LIMIT_BYTES as u64
    {
        return Err(too_large());
    }
    let collected = tokio::time::timeout(
        ADMIN_BODY_READ_TIMEOUT,
        Limited::new(req.into_body(), ADMIN_BODY_LIMIT_BYTES).collect(),
    )
    .await
    .map_err(|_| ApiError {
        status: StatusCode::REQUEST_TIMEOUT,
        code: "request_timeout",
        message: format!(
            "the body did not arrive within {} s",
            ADMIN_BODY_READ_TIMEOUT.as_secs()
        ),
    })?;
    match collected {
        Ok(b) => Ok(b.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_large())
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "could not read the body: {e}"
        ))),
    }
}

/// Runs the handler of an API route (on a blocking thread: handlers read the
/// store and take the write lock synchronously): its status and its answer
/// ([`crate::api_types`]) as JSON.
fn route<K: Kv>(
    state: &Arc<AdminState<K>>,
    api_route: ApiRoute,
    p: &[String],
    q: Query,
    body: &[u8],
) -> Result<(StatusCode, serde_json::Value), ApiError> {
    use ApiRoute as R;
    let arg = |i: usize| p.get(i).map(String::as_str).unwrap_or_default();
    match api_route {
        R::ListTenants => ok(views::list_tenants(state, q)?),
        R::GetTenant => ok(views::get_tenant(state, arg(0), q)?),
        R::GetHook => {
            let seq = api::parse_seq(arg(1))?;
            ok(views::get_hook(state, arg(0), seq, q)?)
        }
        R::FindHook => ok(views::find_hook(state, arg(0), q)?),
        R::ListSources => ok(views::list_sources(state, q)?),
        R::GetSource => ok(views::get_source(state, arg(0), q)?),
        R::ListDeadLetters => ok(dlq::list(state, q)?),
        R::GetDeadLetter => ok(dlq::get(state, arg(0), q)?),
        R::DropDeadLetter => ok(dlq::drop_one(state, arg(0), q)?),
        R::ReviveDeadLetter => ok(dlq::revive(state, arg(0), q)?),
        R::PauseSource => ok(pause::change(state, arg(0), None, true, body, q)?),
        R::ResumeSource => ok(pause::change(state, arg(0), None, false, body, q)?),
        R::PauseSink => ok(pause::change(state, arg(0), Some(arg(1)), true, body, q)?),
        R::ResumeSink => ok(pause::change(state, arg(0), Some(arg(1)), false, body, q)?),
        R::ListQuarantined => ok(quarantine::list(state, arg(0), q)?),
        R::GetQuarantined => ok(quarantine::get(state, arg(0), arg(1), q)?),
        R::DropQuarantined => ok(quarantine::drop_one(state, arg(0), arg(1), q)?),
        R::ReleaseQuarantined => ok(quarantine::release(state, arg(0), arg(1), q)?),
        R::ListJobs => ok(jobs::list(state, q)?),
        R::CreateJob => Ok((
            StatusCode::ACCEPTED,
            api::to_json(&jobs::create(state, body, q)?),
        )),
        R::GetJob => ok(jobs::get(state, arg(0), q)?),
        R::CancelJob => ok(jobs::cancel(state, arg(0), q)?),
        R::GetConfig => ok(config::get(state, q)?),
        R::Reload => ok(config::reload(state, body, q)?),
        R::TestTransform => ok(transform::test(state, body, q)?),
    }
}

/// 200 with `answer`.
#[allow(clippy::unnecessary_wraps)]
fn ok<T: serde::Serialize>(answer: T) -> Result<(StatusCode, serde_json::Value), ApiError> {
    Ok((StatusCode::OK, api::to_json(&answer)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn routes_match_whole_segments_only() {
        assert_eq!(match_route("/v1/jobs/{id}", "/v1/jobs/7"), Some(vec!["7"]));
        assert_eq!(match_route("/v1/jobs/{id}", "/v1/jobs/"), None);
        assert_eq!(match_route("/v1/jobs/{id}", "/v1/jobs/7/cancel"), None);
        assert_eq!(match_route("/v1/jobs", "/v1/jobs/"), None);
        assert_eq!(
            match_route("/v1/tenants/{tenant}/hooks/{seq}", "/v1/tenants/a/hooks/x"),
            Some(vec!["a", "x"])
        );
    }

    /// Regression (brk16): a relay without a token took a cross-site
    /// `text/plain` POST (`curl -H 'Origin: http://evil.example'` purged a
    /// tenant through `POST /v1/jobs`) and answered the API to any `Host`
    /// (DNS rebinding). Both are refused; its own origin, IP hosts,
    /// localhost and clients without `Origin` are not.
    #[test]
    fn a_browser_guard_refuses_other_sites_and_rebound_names() {
        let h = |s: &str| HeaderValue::from_str(s).unwrap();
        let guard = |path: &str, host: Option<&str>, origin: Option<&str>| {
            browser_guard(path, host.map(h).as_ref(), origin.map(h).as_ref())
                .map(|e| (e.status.as_u16(), e.code))
        };
        for (host, origin) in [
            (Some("127.0.0.1:8081"), None),
            (Some("127.0.0.1:8081"), Some("http://127.0.0.1:8081")),
            (Some("localhost:8081"), Some("http://LOCALHOST:8081")),
            (Some("[::1]:8081"), Some("http://[::1]:8081")),
            (Some("127.0.0.1"), None),
            (Some("localhost"), None),
            (None, None),
        ] {
            assert_eq!(guard("/v1/jobs", host, origin), None, "{host:?} {origin:?}");
        }
        for (path, host, origin) in [
            (
                "/v1/jobs",
                Some("127.0.0.1:8081"),
                Some("http://evil.example"),
            ),
            ("/v1/jobs", Some("127.0.0.1:8081"), Some("null")),
            (
                "/v1/jobs",
                Some("127.0.0.1:8081"),
                Some("http://127.0.0.1:8082"),
            ),
            ("/v1/jobs", None, Some("http://127.0.0.1:8081")),
            (
                "/metrics",
                Some("127.0.0.1:8081"),
                Some("http://evil.example"),
            ),
            ("/v1/tenants", Some("evil.example:8081"), None),
            (
                "/v1/tenants",
                Some("evil.example:8081"),
                Some("http://evil.example:8081"),
            ),
            ("/v1/tenants", Some("127.0.0.1.evil.example"), None),
        ] {
            assert_eq!(
                guard(path, host, origin),
                Some((403, "forbidden")),
                "{path} {host:?} {origin:?}"
            );
        }
        // /metrics is checked as /v1/ is (a rebound page must not read the
        // figures); health and the console's files (no data) are not.
        assert_eq!(
            guard("/metrics", Some("relay-box:8081"), None),
            Some((403, "forbidden"))
        );
        assert_eq!(guard("/metrics", Some("127.0.0.1:8081"), None), None);
        assert_eq!(guard("/metrics", Some("localhost:8081"), None), None);
        assert_eq!(guard("/healthz", Some("relay-box:8081"), None), None);
        assert_eq!(guard("/console", Some("relay-box:8081"), None), None);
    }

    #[test]
    fn the_token_must_match_exactly() {
        let h = |s: &str| HeaderValue::from_str(s).unwrap();
        assert!(token_matches(Some(&h("Bearer s3cret")), "s3cret"));
        assert!(token_matches(Some(&h("bearer s3cret")), "s3cret"));
        assert!(token_matches(Some(&h("BEARER s3cret")), "s3cret"));
        for bad in [
            "Bearer s3cres",
            "Bearer s3cret ",
            "s3cret",
            "Bearer ",
            "Basic s3cret",
            "Bearers3cret",
        ] {
            assert!(!token_matches(Some(&h(bad)), "s3cret"), "{bad}");
        }
        assert!(!token_matches(None, "s3cret"));
    }
}
