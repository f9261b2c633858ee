//! The posting side: `--connections` tasks, each owning one keep-alive
//! HTTP/1.1 connection (hyper's `client::conn::http1`, no pool) and doing one
//! request at a time, closed loop or at a fixed rate.
//!
//! Every hook gets the next load id (0, 1, 2, ...), a key, and carries
//! `x-load-id`, `x-load-sent-us` (unix µs) and the key header; a generated
//! body is `{"load_id":N,"key":"key-K","sent_us":T,"pad":"xxx..."}` of exactly
//! `--body-bytes`. A failed request is not retried (its id stays failed); the
//! connection is opened again for the next one, and a refused connect is
//! retried every 50 ms (a restarting relay) and counted.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::Zipf;

use crate::{Args, Clock, KeyDist, Stop};

/// The header carrying a hook's load id (the HTTP sink forwards it: stored
/// provider headers travel, `sinks::meta::never_forwarded` aside).
pub const LOAD_ID_HEADER: &str = "x-load-id";
/// The header carrying a hook's send time, unix microseconds.
pub const SENT_US_HEADER: &str = "x-load-sent-us";

/// What one request ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An HTTP answer with this status.
    Status(u16),
    /// No answer within `--timeout-s`.
    Timeout,
    /// The connection failed while the request was out (reset, closed).
    Io,
}

/// One hook posted.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    /// Its load id.
    pub id: u64,
    /// Its key's index (`key-<index>`).
    pub key: u32,
    /// When its request started, µs since the start.
    pub send_us: u64,
    /// When it was due (open loop only), µs since the start.
    pub due_us: Option<u64>,
    /// When the whole answer was read, µs since the start.
    pub ack_us: Option<u64>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Sent {
    /// Whether the relay answered 2xx: committed.
    pub fn acked(&self) -> bool {
        matches!(self.outcome, Outcome::Status(s) if (200..300).contains(&s))
    }
}

/// Counters the progress lines read while posting.
#[derive(Debug, Default)]
pub struct Live {
    /// Hooks answered 2xx.
    pub acked: AtomicU64,
    /// Hooks answered otherwise, or not at all.
    pub failed: AtomicU64,
    /// Connects that failed (refused, timed out), each retried after 50 ms.
    pub connect_failures: AtomicU64,
}

/// The request target: where to connect and what to send.
#[derive(Debug)]
struct Target {
    host: String,
    port: u16,
    authority: HeaderValue,
    path: String,
}

fn target(url: &str) -> Result<Target, String> {
    let uri: Uri = url.parse().map_err(|e| format!("--target {url:?}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "--target {url:?}: only http:// URLs (everything here is on loopback)"
        ));
    }
    let auth = uri
        .authority()
        .ok_or_else(|| format!("--target {url:?}: no host"))?;
    let port = auth.port_u16().unwrap_or(80);
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    Ok(Target {
        host: auth
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
        authority: HeaderValue::from_str(auth.as_str())
            .map_err(|e| format!("--target {url:?}: {e}"))?,
        path,
    })
}

/// One hook of a corpus file: its provider headers and its body.
#[derive(Debug)]
struct CorpusHook {
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

/// What the bodies are.
#[derive(Debug)]
enum Bodies {
    /// Generated JSON of this many bytes.
    Generated(usize),
    /// The corpus' hooks, in turn (load id modulo their count).
    Corpus(Vec<CorpusHook>),
}

/// Headers of a corpus file the tool never sends: framing (hyper sets its
/// own), and the tool's own.
fn skipped_corpus_header(name: &str, key_header: &str) -> bool {
    matches!(
        name,
        "host"
            | "content-length"
            | "connection"
            | "transfer-encoding"
            | "keep-alive"
            | "expect"
            | "te"
            | "upgrade"
    ) || name == key_header
        || name.starts_with("x-load-")
}

/// Reads every `*.json` file under `dir` (recursively, sorted by path) that
/// has the corpus' shape (`{"headers": [[name, value], ...], "body": "..."}`;
/// `fixtures/corpus/README.md`); `index.json` and other files are skipped.
fn read_corpus(dir: &Path, key_header: &str) -> Result<Vec<CorpusHook>, String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| format!("--corpus {}: {e}", d.display()))?;
        for entry in rd {
            let p = entry
                .map_err(|e| format!("--corpus {}: {e}", d.display()))?
                .path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut hooks = Vec::new();
    for p in files {
        let text = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) else {
            continue;
        };
        let (Some(body), Some(hs)) = (
            v.get("body").and_then(|b| b.as_str()),
            v.get("headers").and_then(|h| h.as_array()),
        ) else {
            continue;
        };
        let mut headers = Vec::new();
        for pair in hs {
            let (Some(n), Some(val)) = (
                pair.get(0).and_then(|x| x.as_str()),
                pair.get(1).and_then(|x| x.as_str()),
            ) else {
                continue;
            };
            let Ok(name) = HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()) else {
                continue;
            };
            if skipped_corpus_header(name.as_str(), key_header) {
                continue;
            }
            if let Ok(value) = HeaderValue::from_str(val) {
                headers.push((name, value));
            }
        }
        hooks.push(CorpusHook {
            headers,
            body: Bytes::from(body.to_string()),
        });
    }
    if hooks.is_empty() {
        return Err(format!(
            "--corpus {}: no corpus file (JSON with headers and body) found",
            dir.display()
        ));
    }
    Ok(hooks)
}

/// How keys are drawn.
#[derive(Debug)]
enum KeyDraw {
    /// Uniform over `n` keys.
    Uniform(u32),
    /// Zipf over `n` keys.
    Zipf(Zipf<f64>, u32),
}

impl KeyDraw {
    fn pick(&self, rng: &mut SmallRng) -> u32 {
        match self {
            KeyDraw::Uniform(1) => 0,
            KeyDraw::Uniform(n) => rng.random_range(0..*n),
            // Zipf samples are ranks 1..=n (as floats); rank 1 is key 0.
            KeyDraw::Zipf(z, n) => ((rng.sample(z) as u32).max(1) - 1).min(n - 1),
        }
    }
}

/// Everything the connection tasks share.
#[derive(Debug)]
pub struct Plan {
    target: Target,
    clock: Clock,
    connections: u32,
    hooks: Option<u64>,
    /// How long to post, µs.
    duration_us: Option<u64>,
    /// Posting ends here, µs since the start (closed loop: no new request
    /// after it; open loop: no hook due at or after it); set when posting
    /// starts, `u64::MAX` for none.
    deadline_us: AtomicU64,
    rate: Option<f64>,
    bodies: Bodies,
    key_header: HeaderName,
    key_values: Vec<HeaderValue>,
    draw: KeyDraw,
    seed: u64,
    timeout: Duration,
    next: AtomicU64,
    /// The counters of the progress lines.
    pub live: Arc<Live>,
}

/// The name of key `i`.
pub fn key_name(i: u32) -> String {
    format!("key-{i}")
}

/// The generated body of hook `id`, exactly `bytes` long when `bytes` is at
/// least its fields' length.
pub fn generated_body(id: u64, key: &str, sent_unix_us: u64, bytes: usize) -> Vec<u8> {
    let mut s =
        format!("{{\"load_id\":{id},\"key\":\"{key}\",\"sent_us\":{sent_unix_us},\"pad\":\"");
    let tail = "\"}";
    let pad = bytes.saturating_sub(s.len() + tail.len());
    s.reserve(pad + tail.len());
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str(tail);
    s.into_bytes()
}

impl Plan {
    /// The plan of `args`, starting now.
    pub fn new(args: &Args, clock: Clock) -> Result<Arc<Plan>, String> {
        let target = target(&args.target)?;
        let key_header = HeaderName::from_bytes(args.key_header.to_ascii_lowercase().as_bytes())
            .map_err(|e| format!("--key-header: {e}"))?;
        let bodies = match &args.corpus {
            Some(dir) => Bodies::Corpus(read_corpus(dir, key_header.as_str())?),
            None => Bodies::Generated(args.body_bytes),
        };
        let draw = match args.key_dist {
            KeyDist::Uniform => KeyDraw::Uniform(args.keys),
            KeyDist::Zipf => KeyDraw::Zipf(
                Zipf::new(f64::from(args.keys), args.zipf_s)
                    .map_err(|e| format!("--zipf-s {}: {e}", args.zipf_s))?,
                args.keys,
            ),
        };
        let key_values = (0..args.keys)
            .map(|i| HeaderValue::from_str(&key_name(i)).map_err(|e| format!("{e}")))
            .collect::<Result<_, _>>()?;
        let duration_s = match (args.duration_s, args.hooks) {
            (Some(d), _) => Some(d),
            (None, Some(_)) => None,
            (None, None) => Some(10.0),
        };
        Ok(Arc::new(Plan {
            target,
            clock,
            connections: args.connections,
            hooks: args.hooks,
            duration_us: duration_s.map(|d| (d * 1e6) as u64),
            deadline_us: AtomicU64::new(u64::MAX),
            rate: args.rate,
            bodies,
            key_header,
            key_values,
            draw,
            seed: args.seed,
            timeout: Duration::from_secs_f64(args.timeout_s),
            next: AtomicU64::new(0),
            live: Arc::new(Live::default()),
        }))
    }

    /// The length of every generated body (what the receiver expects back);
    /// `None` for corpus bodies, or when `--body-bytes` is below the fields'
    /// widest length (the bodies' lengths then vary).
    pub fn generated_len(&self) -> Option<usize> {
        let Bodies::Generated(n) = self.bodies else {
            return None;
        };
        let widest = generated_body(u64::MAX, &key_name(u32::MAX), u64::MAX, 0).len();
        (n >= widest).then_some(n)
    }

    fn past_deadline(&self, now_us: u64) -> bool {
        now_us >= self.deadline_us.load(Ordering::Relaxed)
    }
}

/// What the posting phase did.
#[derive(Debug)]
pub struct Posted {
    /// Every hook whose request was sent, by load id.
    pub sent: Vec<Sent>,
    /// When posting started and ended (the last answer), µs since the start.
    pub start_us: u64,
    /// See `start_us`.
    pub end_us: u64,
}

/// Runs the connection tasks until the plan's end (or a Ctrl-C).
pub async fn run(plan: Arc<Plan>, stop: Arc<Stop>) -> Posted {
    let start_us = plan.clock.now_us();
    if let Some(d) = plan.duration_us {
        plan.deadline_us.store(start_us + d, Ordering::Relaxed);
    }
    let mut tasks = Vec::new();
    for ix in 0..plan.connections {
        let (plan, stop) = (Arc::clone(&plan), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            connection(ix, &plan, &stop, start_us).await
        }));
    }
    let mut sent = Vec::new();
    for t in tasks {
        match t.await {
            Ok(mut s) => sent.append(&mut s),
            Err(e) => eprintln!("ankusa-load: a connection task failed: {e}"),
        }
    }
    sent.sort_by_key(|s| s.id);
    Posted {
        sent,
        start_us,
        end_us: plan.clock.now_us(),
    }
}

/// Opens one connection to the target; retries every 50 ms while it is
/// refused, until posting must stop.
async fn connect(plan: &Plan, stop: &Stop) -> Option<SendRequest<Full<Bytes>>> {
    loop {
        if stop.posting() || plan.past_deadline(plan.clock.now_us()) {
            return None;
        }
        let attempt = async {
            let stream =
                tokio::net::TcpStream::connect((plan.target.host.as_str(), plan.target.port))
                    .await?;
            stream.set_nodelay(true)?;
            hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(std::io::Error::other)
        };
        match tokio::time::timeout(plan.timeout, attempt).await {
            Ok(Ok((sender, conn))) => {
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                return Some(sender);
            }
            Ok(Err(e)) => {
                // Printed once per run; the report counts them all.
                if plan.live.connect_failures.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!(
                        "ankusa-load: connect to {}:{} failed: {e}; retrying every 50 ms",
                        plan.target.host, plan.target.port
                    );
                }
            }
            Err(_) => {
                plan.live.connect_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn connection(ix: u32, plan: &Plan, stop: &Stop, start_us: u64) -> Vec<Sent> {
    let mut rng = SmallRng::seed_from_u64(
        plan.seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(u64::from(ix)),
    );
    let mut out = Vec::new();
    let mut conn: Option<SendRequest<Full<Bytes>>> = None;
    let interval_us = plan.rate.map(|r| 1e6 / r);
    loop {
        if stop.posting() || (plan.rate.is_none() && plan.past_deadline(plan.clock.now_us())) {
            break;
        }
        let id = plan.next.fetch_add(1, Ordering::Relaxed);
        if plan.hooks.is_some_and(|n| id >= n) {
            break;
        }
        let due_us = interval_us.map(|i| start_us + (id as f64 * i) as u64);
        if let Some(due) = due_us {
            if plan.past_deadline(due) {
                break;
            }
            tokio::time::sleep_until(plan.clock.at(due).into()).await;
        }
        let kept = match conn.take() {
            Some(mut s) => s.ready().await.is_ok().then_some(s),
            None => None,
        };
        let mut sender = match kept {
            Some(s) => s,
            None => match connect(plan, stop).await {
                Some(mut s) => {
                    if s.ready().await.is_err() {
                        continue;
                    }
                    s
                }
                None => break,
            },
        };
        let key = plan.draw.pick(&mut rng);
        let req = request(plan, id, key);
        let send_us = plan.clock.now_us();
        let answer = tokio::time::timeout(plan.timeout, async {
            let resp = sender.send_request(req).await?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await;
            Ok::<_, hyper::Error>((status, body.is_ok()))
        })
        .await;
        let ack_us = plan.clock.now_us();
        let (outcome, keep) = match answer {
            Ok(Ok((status, body_ok))) => (Outcome::Status(status), body_ok),
            Ok(Err(_)) => (Outcome::Io, false),
            Err(_) => (Outcome::Timeout, false),
        };
        let s = Sent {
            id,
            key,
            send_us,
            due_us,
            ack_us: matches!(outcome, Outcome::Status(_)).then_some(ack_us),
            outcome,
        };
        if s.acked() {
            plan.live.acked.fetch_add(1, Ordering::Relaxed);
        } else {
            plan.live.failed.fetch_add(1, Ordering::Relaxed);
        }
        out.push(s);
        if keep {
            conn = Some(sender);
        }
    }
    out
}

/// The request of hook `id` with key `key`.
fn request(plan: &Plan, id: u64, key: u32) -> Request<Full<Bytes>> {
    let sent_unix_us = plan.clock.unix_us(plan.clock.now_us());
    let mut req = Request::new(Full::new(Bytes::new()));
    *req.method_mut() = Method::POST;
    // Origin-form: the path; the authority goes in Host.
    if let Ok(uri) = plan.target.path.parse() {
        *req.uri_mut() = uri;
    }
    let h = req.headers_mut();
    h.insert(HOST, plan.target.authority.clone());
    let body = match &plan.bodies {
        Bodies::Generated(n) => {
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Bytes::from(generated_body(id, &key_name(key), sent_unix_us, *n))
        }
        Bodies::Corpus(hooks) => {
            let hook = &hooks[(id % hooks.len() as u64) as usize];
            for (n, v) in &hook.headers {
                h.append(n.clone(), v.clone());
            }
            hook.body.clone()
        }
    };
    h.insert(
        HeaderName::from_static(LOAD_ID_HEADER),
        HeaderValue::from(id),
    );
    h.insert(
        HeaderName::from_static(SENT_US_HEADER),
        HeaderValue::from(sent_unix_us),
    );
    if let Some(v) = plan.key_values.get(key as usize) {
        h.insert(plan.key_header.clone(), v.clone());
    }
    *req.body_mut() = Full::new(body);
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_bodies_have_the_asked_length_and_parse() {
        for n in [0, 10, 100, 2048, 65536] {
            let b = generated_body(123_456, "key-42", 1_700_000_000_000_000, n);
            if n >= 100 {
                assert_eq!(b.len(), n);
            }
            let v: serde_json::Value = serde_json::from_slice(&b).expect("JSON");
            assert_eq!(v["load_id"], 123_456);
            assert_eq!(v["key"], "key-42");
            assert_eq!(v["sent_us"], 1_700_000_000_000_000u64);
        }
    }

    #[test]
    fn zipf_keys_stay_in_range_and_favour_key_0() {
        let draw = KeyDraw::Zipf(Zipf::new(10.0, 1.0).expect("zipf"), 10);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = [0u32; 10];
        for _ in 0..10_000 {
            counts[draw.pick(&mut rng) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
        assert!(counts[0] > 2 * counts[9], "{counts:?}");
        let one = KeyDraw::Uniform(1);
        assert_eq!(one.pick(&mut rng), 0);
    }

    #[test]
    fn targets_parse() {
        let t = target("http://127.0.0.1:8080/hooks/load").expect("target");
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8080, "/hooks/load")
        );
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert!(target("https://x/").is_err());
    }

    #[test]
    fn the_corpus_reads_with_its_headers() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/corpus");
        let hooks = read_corpus(&dir, "x-entity-id").expect("corpus");
        assert!(hooks.len() > 30, "{}", hooks.len());
        assert!(hooks.iter().all(|h| {
            h.headers
                .iter()
                .all(|(n, _)| n != "content-length" && n != "host")
        }));
        assert!(
            hooks
                .iter()
                .any(|h| h.headers.iter().any(|(n, _)| n == "x-github-event"))
        );
    }
}
