//! A running admin listener's answers: [`answers`] serves the API over a
//! store with dead letters, a quarantined hook and a finished job, with a
//! pipeline that only keeps pauses ([`Pauses`]), and asks every kind of
//! question once (lists, one item, mutations, errors). `openapi.rs` holds
//! every answer it gets to the OpenAPI document and the answer types.

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ankusa_admin::{
    AdminState, BoxFuture, Context, ControlFailure, PipelineControl, PipelineWork, serve_admin,
};
use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Durability, Kv};
use ankusa_keys::meta::PauseTarget;
use ankusa_keys::{Envelope, Seq, SourceId, TenantOrd};

use crate::jobs::{NOW, store_with_dead_letters};

/// A pipeline that keeps the runtime pauses in the store, as the relay's
/// does, and has nothing else (its other controls answer unavailable).
struct Pauses(Arc<MemoryKv>);

impl PipelineControl for Pauses {
    fn set_pause(
        &self,
        target: PauseTarget,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<(), ControlFailure>> {
        let batch = match &reason {
            Some(r) => ankusa_queue::set_pause(target, NOW, r),
            None => ankusa_queue::clear_pause(target),
        };
        let done = self
            .0
            .write(batch, Durability::Sync)
            .map_err(|e| ControlFailure::Unavailable(e.to_string()));
        Box::pin(async move { done })
    }
    fn quiesce(&self, _: TenantOrd, _: bool) -> BoxFuture<'_, Result<(), ControlFailure>> {
        Box::pin(async { Err(ControlFailure::Unavailable("no pipeline".into())) })
    }
    fn retire(
        &self,
        _: SourceId,
        _: Option<String>,
    ) -> BoxFuture<'_, Result<(usize, u64), ControlFailure>> {
        Box::pin(async { Err(ControlFailure::Unavailable("no pipeline".into())) })
    }
    fn exclusive(&self, _: PipelineWork) -> BoxFuture<'_, Result<(), ControlFailure>> {
        Box::pin(async { Err(ControlFailure::Unavailable("no pipeline".into())) })
    }
    fn wake(&self) {}
}

/// The idempotency key of the quarantined hook: a UUIDv7 whose time is its
/// `received_at_ms`, as the edge makes them.
fn quarantined_key() -> [u8; 16] {
    let ms = NOW.to_be_bytes();
    let mut key = [0x11; 16];
    key[..6].copy_from_slice(&ms[2..]);
    key[6] = 0x70;
    key[8] = 0x80;
    key
}

/// `bytes` as hyphenated hex.
fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// One question and its answer.
pub(crate) struct Answer {
    /// The request's method.
    pub method: &'static str,
    /// The request's path and query.
    pub target: String,
    /// The answer's status.
    pub status: u16,
    /// Its `Content-Type`.
    pub content_type: String,
    /// Its body.
    pub body: String,
}

/// `method target` with `body` to the listener at `addr`, over HTTP/1.1 on
/// a connection of its own.
fn ask(addr: std::net::SocketAddr, method: &'static str, target: &str, body: &str) -> Answer {
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        conn,
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut raw = String::new();
    conn.read_to_string(&mut raw).expect("answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_owned)
        })
        .unwrap_or_default();
    Answer {
        method,
        target: target.to_owned(),
        status,
        content_type,
        body: body.to_owned(),
    }
}

/// Every question, in order; a job (a revive whose filter takes nothing) is
/// created, and read once it has left `running`, so each answer is the same
/// on every run (the clock is fixed).
pub(crate) async fn answers() -> Vec<Answer> {
    let (kv, registry) = store_with_dead_letters(3);
    // Hook 4 of the demo source, held in quarantine.
    let env = Envelope {
        source: registry.sources["demo"],
        received_at_ms: NOW,
        method: "POST".into(),
        path: "/hooks/demo".into(),
        query: Some("a=1".into()),
        headers: vec![
            (b"x-entity-id".to_vec(), b"cust-7".to_vec()),
            (b"x-raw".to_vec(), vec![0xff]),
        ],
        body: vec![0xff, 0xfe],
        dedupe_key: Some(b"evt-4".to_vec()),
        idempotency_key: quarantined_key(),
        replay_of: None,
    };
    let mut b = Batch::new();
    let hook = ankusa_queue::Hook {
        tenant: registry.tenants["default"],
        seq: Seq(4),
        envelope: &env,
        dedupe_expires_at_ms: 0,
    };
    ankusa_queue::quarantine(&mut b, &hook, "invalid signature");
    kv.write(b, Durability::Sync).expect("quarantine");
    let kv = Arc::new(kv);
    let mut ctx = Context::new(
        Arc::clone(&kv),
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(ankusa_config::Config::default_demo()),
        registry,
    );
    ctx.clock = || NOW + 1_000;
    ctx.pipeline = Some(Box::new(Pauses(kv)));
    let state = Arc::new(AdminState::new(Arc::new(ctx), Arc::default()));
    let by_key = format!("/v1/hooks/{}", uuid_text(&quarantined_key()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(serve_admin(state, listener, stopped));
    let asked = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        for (method, target, body) in [
            ("GET", "/v1/tenants/default/quarantine", ""),
            ("GET", "/v1/tenants/default/quarantine?limit=1", ""),
            ("GET", "/v1/tenants/default/quarantine/4", ""),
            ("GET", "/v1/tenants/default/hooks/4", ""),
            ("GET", by_key.as_str(), ""),
            ("DELETE", "/v1/tenants/default/quarantine/4", ""),
            (
                "POST",
                "/v1/sources/demo/pause",
                r#"{"reason": "maintenance"}"#,
            ),
            ("POST", "/v1/sources/demo/sinks/deliveries/pause", ""),
            ("GET", "/v1/sources", ""),
            ("POST", "/v1/sources/demo/sinks/deliveries/resume", ""),
            ("POST", "/v1/sources/demo/sinks/deliveries/resume", ""),
            ("POST", "/v1/sources/demo/resume", r#"{"reason": "x"}"#),
            ("POST", "/v1/sources/demo/resume", ""),
            ("POST", "/v1/sources/nowhere/pause", ""),
            ("POST", "/v1/sources/demo/pause", r#"{"why": "x"}"#),
            ("POST", "/v1/sources/demo/pause", "not json"),
        ] {
            out.push(ask(addr, method, target, body));
        }
        for (method, target, body) in [
            ("GET", "/v1/tenants", ""),
            ("GET", "/v1/tenants/default", ""),
            ("GET", "/v1/tenants/nobody", ""),
            ("GET", "/v1/tenants?x=1", ""),
            ("GET", "/v1/sources", ""),
            ("GET", "/v1/sources?limit=1", ""),
            ("GET", "/v1/sources/demo", ""),
            ("GET", "/v1/dead-letters", ""),
            ("GET", "/v1/dead-letters?limit=1", ""),
            ("GET", "/v1/dead-letters/default.1.0", ""),
            ("GET", "/v1/dead-letters/default.x.0", ""),
            ("GET", "/v1/tenants/default/hooks/1", ""),
            ("GET", "/v1/hooks/01890a5d-ac96-774b-bcce-b302099a8057", ""),
            ("GET", "/v1/tenants/default/quarantine", ""),
            ("GET", "/v1/tenants/default/quarantine/1", ""),
            ("POST", "/v1/tenants/default/quarantine/1/release", ""),
            ("DELETE", "/v1/tenants/default/quarantine/1", ""),
            (
                "POST",
                "/v1/sources/demo/pause",
                r#"{"reason": "maintenance"}"#,
            ),
            ("POST", "/v1/sources/demo/resume", ""),
            ("POST", "/v1/dead-letters/default.2.0/revive", ""),
            ("POST", "/v1/dead-letters/default.2.0/revive", ""),
            ("DELETE", "/v1/dead-letters/default.3.0", ""),
            (
                "POST",
                "/v1/jobs",
                r#"{"kind": "revive", "filter": {"reason": "no such reason"}}"#,
            ),
            (
                "POST",
                "/v1/jobs",
                r#"{"kind": "revive", "filter": {"reason": ""}}"#,
            ),
            ("POST", "/v1/jobs", r#"{"kind": "nope"}"#),
            ("POST", "/v1/jobs", r#"{"kind": "revive", "x": 1}"#),
            (
                "POST",
                "/v1/jobs",
                r#"{"kind": "revive", "filter": {"x": 1}}"#,
            ),
            (
                "POST",
                "/v1/jobs",
                r#"{"kind": "revive", "filter": {"since": true}}"#,
            ),
            (
                "POST",
                "/v1/jobs",
                r#"{"kind": "revive", "filter": {"until": "yesterday"}}"#,
            ),
            ("POST", "/v1/jobs", r#"{"kind": "replay", "sinks": "web"}"#),
        ] {
            out.push(ask(addr, method, target, body));
        }
        // The job once it has left `running` (a step at a time; the loop
        // only waits, it asserts nothing about time).
        loop {
            let job = ask(addr, "GET", "/v1/jobs/1", "");
            if !job.body.contains(r#""state":"running""#) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for (method, target) in [
            ("GET", "/v1/jobs"),
            ("GET", "/v1/jobs/1"),
            ("GET", "/v1/jobs/9"),
            ("POST", "/v1/jobs/1/cancel"),
            ("PATCH", "/v1/jobs"),
            ("GET", "/v1/nothing"),
        ] {
            out.push(ask(addr, method, target, ""));
        }
        out
    })
    .await
    .expect("questions");
    stop.send(true).expect("stop");
    server.await.expect("listener");
    asked
}
