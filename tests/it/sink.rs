//! The HTTP sink's destination: a real hyper 1.x server on 127.0.0.1:0 that
//! records every request in arrival order (method, headers, body), tracks how
//! many requests of each ordering key are open at once, and answers what the
//! test's script says (a status, a Retry-After, or hold the request open).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One request as the sink received it.
#[derive(Clone, Debug)]
pub struct Req {
    /// Arrival index (0 for the first request this server saw).
    pub n: usize,
    pub method: String,
    pub path: String,
    /// Lower-case names, raw values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Req {
    /// The first value of header `name` (lower case), as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// How many times header `name` was sent.
    pub fn header_count(&self, name: &str) -> usize {
        self.headers.iter().filter(|(n, _)| n == name).count()
    }

    /// `x-ankusa-ordering-key`.
    pub fn key(&self) -> Option<String> {
        self.header("x-ankusa-ordering-key")
    }

    /// `x-ankusa-idempotency-key` (every delivery has one).
    pub fn id(&self) -> String {
        self.header("x-ankusa-idempotency-key")
            .unwrap_or_else(|| panic!("request {} has no x-ankusa-idempotency-key", self.n))
    }

    /// `x-ankusa-attempt`.
    pub fn attempt(&self) -> u32 {
        self.header("x-ankusa-attempt")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("request {} has no numeric x-ankusa-attempt", self.n))
    }

    /// The body as JSON (the tests' own hooks are JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// What to answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// This status, no body.
    Status(u16),
    /// This status with `Retry-After: <value>`.
    RetryAfter(u16, &'static str),
    /// Hold the request open until [`Sink::release`] (then 200), or until the
    /// relay gives up on it (its timeout, or it was killed).
    Hold,
    /// Like [`Reply::Hold`], answering this status when released.
    HoldThen(u16),
    /// This status after this long.
    Delay(Duration, u16),
    /// This status with this body (`text/plain`).
    Body(u16, String),
}

pub type Script = Arc<dyn Fn(&Req) -> Reply + Send + Sync>;

struct State {
    reqs: Mutex<Vec<Req>>,
    /// (arrival index, status) of every answer given.
    answers: Mutex<Vec<(usize, u16)>>,
    /// Open requests per lane ([`lane`]: tenant, source, ordering key), and
    /// the most seen at once.
    open: Mutex<HashMap<String, (usize, usize)>>,
    script: RwLock<Script>,
    release: watch::Sender<bool>,
    /// Connections `accept` failed on (and went past).
    accept_errors: std::sync::atomic::AtomicUsize,
}

/// Decrements the open count of its key when the request ends, however it ends
/// (answered, or dropped because the relay closed the connection).
struct OpenGuard {
    state: Arc<State>,
    key: String,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let mut open = self.state.open.lock().expect("lock");
        if let Some(e) = open.get_mut(&self.key) {
            e.0 = e.0.saturating_sub(1);
        }
    }
}

pub struct Sink {
    pub addr: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl Sink {
    /// A sink answering every request with `script(request)`.
    pub async fn start(script: impl Fn(&Req) -> Reply + Send + Sync + 'static) -> Sink {
        Sink::start_at("127.0.0.1:0".parse().expect("address"), script).await
    }

    /// [`Sink::start`] on `addr` (a destination that comes up where the
    /// relay has been failing to reach it).
    pub async fn start_at(
        addr: SocketAddr,
        script: impl Fn(&Req) -> Reply + Send + Sync + 'static,
    ) -> Sink {
        let listener = TcpListener::bind(addr).await.expect("bind the sink");
        let addr = listener.local_addr().expect("sink address");
        let (release, _) = watch::channel(false);
        let state = Arc::new(State {
            reqs: Mutex::new(Vec::new()),
            answers: Mutex::new(Vec::new()),
            open: Mutex::new(HashMap::new()),
            script: RwLock::new(Arc::new(script)),
            release,
            accept_errors: Default::default(),
        });
        let st = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    // A connection aborted before it was accepted (a relay
                    // SIGKILLed while it connects, as the crash test does
                    // hundreds of times). The receiver keeps listening: an
                    // accept loop that ended on it would free the port for
                    // any other server. Counted (`accept_errors`); none seen
                    // so far.
                    Err(_) => {
                        st.accept_errors
                            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                };
                let st = Arc::clone(&st);
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let st = Arc::clone(&st);
                        async move { Ok::<_, Infallible>(handle(st, req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Sink {
            addr,
            state,
            accept,
        }
    }

    /// A sink answering 200 to everything.
    pub async fn ok() -> Sink {
        Sink::start(|_| Reply::Status(200)).await
    }

    pub fn url(&self) -> String {
        format!("http://{}/in", self.addr)
    }

    /// Replaces the script (requests already being answered keep theirs).
    pub fn set_script(&self, script: impl Fn(&Req) -> Reply + Send + Sync + 'static) {
        *self.state.script.write().expect("lock") = Arc::new(script);
    }

    /// Answers every held request (and every later `Hold`) with 200.
    pub fn release(&self) {
        self.state.release.send_replace(true);
    }

    /// How many requests arrived so far (without copying them).
    pub fn request_count(&self) -> usize {
        self.state.reqs.lock().expect("lock").len()
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Req> {
        self.state.reqs.lock().expect("lock").clone()
    }

    /// Every request answered 2xx so far (a delivery the relay may count as
    /// done), in arrival order.
    pub fn delivered(&self) -> Vec<Req> {
        let ok: std::collections::HashSet<usize> = self
            .state
            .answers
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, s)| (200..300).contains(s))
            .map(|(n, _)| *n)
            .collect();
        self.requests()
            .into_iter()
            .filter(|r| ok.contains(&r.n))
            .collect()
    }

    /// The `x-ankusa-idempotency-key` of every request answered 2xx so far,
    /// in arrival order (no copy of the bodies: for large hooks).
    /// The ids (`x-ankusa-idempotency-key`) of the requests answered 2xx at
    /// `path`.
    pub fn ids_at(&self, path: &str) -> std::collections::BTreeSet<String> {
        self.delivered()
            .iter()
            .filter(|r| r.path == path)
            .map(Req::id)
            .collect()
    }

    pub fn delivered_ids(&self) -> Vec<String> {
        let ok: std::collections::HashSet<usize> = self
            .state
            .answers
            .lock()
            .expect("lock")
            .iter()
            .filter(|(_, s)| (200..300).contains(s))
            .map(|(n, _)| *n)
            .collect();
        self.state
            .reqs
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| ok.contains(&r.n))
            .map(Req::id)
            .collect()
    }

    /// The status this sink answered request `n` with, if it answered.
    pub fn answer_of(&self, n: usize) -> Option<u16> {
        self.state
            .answers
            .lock()
            .expect("lock")
            .iter()
            .find(|(i, _)| *i == n)
            .map(|(_, s)| *s)
    }

    /// How many connections `accept` failed on (the receiver went on
    /// listening).
    pub fn accept_errors(&self) -> usize {
        self.state
            .accept_errors
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Requests of lane `key` ([`lane`]) open right now.
    pub fn open(&self, key: &str) -> usize {
        self.state
            .open
            .lock()
            .expect("lock")
            .get(key)
            .map_or(0, |e| e.0)
    }

    /// The most requests of each lane ([`lane`]) that were open at once.
    pub fn max_open(&self) -> HashMap<String, usize> {
        self.state
            .open
            .lock()
            .expect("lock")
            .iter()
            .map(|(k, e)| (k.clone(), e.1))
            .collect()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn handle(st: Arc<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let headers: Vec<(String, Vec<u8>)> = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect();
    let h = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let key = lane(
        &h("x-ankusa-tenant"),
        &h("x-ankusa-source"),
        &h("x-ankusa-ordering-key"),
    );
    let (r, _guard) = {
        let mut reqs = st.reqs.lock().expect("lock");
        let r = Req {
            n: reqs.len(),
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            headers,
            body,
            at: Instant::now(),
        };
        reqs.push(r.clone());
        let mut open = st.open.lock().expect("lock");
        let e = open.entry(key.clone()).or_insert((0, 0));
        e.0 += 1;
        e.1 = e.1.max(e.0);
        (
            r,
            OpenGuard {
                state: Arc::clone(&st),
                key,
            },
        )
    };
    let script = Arc::clone(&st.script.read().expect("lock"));
    let mut body = Bytes::new();
    let (status, retry_after) = match script(&r) {
        Reply::Status(s) => (s, None),
        Reply::Body(s, text) => {
            body = Bytes::from(text);
            (s, None)
        }
        Reply::RetryAfter(s, v) => (s, Some(v)),
        Reply::Delay(d, s) => {
            tokio::time::sleep(d).await;
            (s, None)
        }
        Reply::Hold => {
            let mut rx = st.release.subscribe();
            let _ = rx.wait_for(|released| *released).await;
            (200, None)
        }
        Reply::HoldThen(status) => {
            let mut rx = st.release.subscribe();
            let _ = rx.wait_for(|released| *released).await;
            (status, None)
        }
    };
    st.answers.lock().expect("lock").push((r.n, status));
    let mut resp = Response::builder().status(status);
    if let Some(v) = retry_after {
        resp = resp.header("retry-after", v);
    }
    if !body.is_empty() {
        resp = resp.header("content-type", "text/plain");
    }
    resp.body(Full::new(body)).expect("response")
}

/// The name the sink tracks open requests under: `<tenant>/<source>:<ordering
/// key>` (a lane is per tenant, source and key; the key is empty when the
/// sink is not ordered).
pub fn lane(tenant: &str, source: &str, key: &str) -> String {
    format!("{tenant}/{source}:{key}")
}

/// Polls `f` every 10 ms until it returns `Some`, or panics naming `what`
/// after `within`.
pub async fn until<T>(what: &str, within: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
