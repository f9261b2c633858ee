//! A running admin listener's answers: [`answers`] serves the API over a
//! store with dead letters and a finished job, and asks every kind of
//! question once (lists, one item, mutations, errors). `openapi.rs` holds
//! every answer it gets to the OpenAPI document and the answer types.

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::time::Duration;

use ankusa_admin::{AdminState, serve_admin};

use crate::jobs::{context, store_with_dead_letters};

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
    let ctx = context(kv, registry);
    let state = Arc::new(AdminState::new(ctx, Arc::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(serve_admin(state, listener, stopped));
    let asked = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
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
