//! What the broker tests share: a broker of a test's own as a child process
//! on a free port ([`ChildServer`], [`free_port`]), names no other run uses
//! ([`unique`]), and waiting for the relay to deliver everything
//! ([`drained`]).

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::relay::Relay;
use crate::sink::until;

/// A server process of one test's own (a private `redis-server`,
/// `nats-server`...) listening on 127.0.0.1:[`ChildServer::port`]: killing it
/// disturbs no other test. Dropping it kills it.
pub struct ChildServer {
    child: Option<Child>,
    port: u16,
}

impl ChildServer {
    /// Runs `command` (its stdout and stderr discarded), which must make the
    /// server listen on 127.0.0.1:`port`, and waits until it accepts a TCP
    /// connection.
    ///
    /// # Panics
    /// When `command` cannot run ("cannot run `name`", with where `.ci/run`
    /// installs it) or nothing listens on `port` within `within` ("private
    /// `name` on `port` did not listen"; the child is killed).
    pub fn start(name: &str, command: &mut Command, port: u16, within: Duration) -> ChildServer {
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {name} ({e}); `.ci/run` installs it"));
        let server = ChildServer {
            child: Some(child),
            port,
        };
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < within,
                "private {name} on {port} did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL) and reaps it; nothing if it is already
    /// killed.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port of 127.0.0.1 nothing listens on (just now).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A stream, queue, subject or topic name no other run uses:
/// `ankusa-it-<what>-<pid>-<nanos>`, letters, digits and `-` only when `what`
/// is, so every broker takes it (NATS stream names have no `.`, Pub/Sub topic
/// ids start with a letter, Kafka topics are `a-z A-Z 0-9 . _ -`).
pub fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("ankusa-it-{what}-{}-{nanos}", std::process::id())
}

/// Waits until every accepted hook is settled (nothing pending) and returns
/// the metrics then; fails the test after `within`.
pub async fn drained(relay: &Relay, within: Duration) -> HashMap<String, f64> {
    until("the relay's queue drained", within, async || {
        let m = relay.metrics().await;
        (m["ankusa_queue_pending"] == 0.0).then_some(m)
    })
    .await
}
