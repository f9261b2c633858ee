//! The receiver: the HTTP/1.1 server (hyper) the relay's HTTP sink delivers
//! to. It records every delivery (load id, ordering key, seq if the relay
//! sends one, idempotency key, attempt, arrival time), then answers 200, at
//! once or after `--sink-delay-ms`.
//!
//! What the HTTP sink sends (sinks/src/http/sink.rs, sinks::meta): the body
//! as received, the provider's stored headers (so `x-load-id` and the key
//! header come back), and `x-ankusa-message-version`,
//! `x-ankusa-idempotency-key`, `x-ankusa-tenant`, `x-ankusa-source`,
//! `x-ankusa-received-at`, `x-ankusa-attempt` and, from an ordered sink only,
//! `x-ankusa-ordering-key`. It sends no seq; `x-ankusa-seq` is read in case
//! a later relay does.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;

use crate::Clock;
use crate::post::LOAD_ID_HEADER;

/// The relay's ordering key header (`sinks::meta::ORDERING_KEY_HEADER`).
const ORDERING_KEY_HEADER: &str = "x-ankusa-ordering-key";
/// The relay's idempotency key header (`sinks::meta::IDEMPOTENCY_KEY_HEADER`).
const IDEMPOTENCY_KEY_HEADER: &str = "x-ankusa-idempotency-key";
/// The relay's attempt header (`sinks::meta::ATTEMPT_HEADER`).
const ATTEMPT_HEADER: &str = "x-ankusa-attempt";
/// A seq header the relay does not send today (read if a later one does).
const SEQ_HEADER: &str = "x-ankusa-seq";

/// One delivery the receiver took.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The hook's load id (`x-load-id`, else the generated body's `load_id`);
    /// `None`: neither (not a hook of this tool).
    pub id: Option<u64>,
    /// `x-ankusa-ordering-key`: set for deliveries of an ordered sink.
    pub ordering_key: Option<Box<str>>,
    /// `x-ankusa-seq`, if the relay sends it.
    pub seq: Option<u64>,
    /// `x-ankusa-idempotency-key` as a number (the UUID's 128 bits).
    pub idempotency_key: Option<u128>,
    /// `x-ankusa-attempt` (0 when missing).
    pub attempt: u32,
    /// When its body had been read, µs since the start.
    pub at_us: u64,
}

#[derive(Debug)]
struct Inner {
    deliveries: Mutex<Vec<Delivery>>,
    delay: Duration,
    /// The length every body must have (generated bodies), if known.
    expect_bytes: Option<usize>,
    /// Deliveries whose body did not have that length, or whose body's id
    /// is not their header's.
    corrupt: AtomicU64,
    clock: Clock,
    /// Deliveries still to be refused with 400 (`--sink-reject-first`).
    reject_left: AtomicU64,
    /// Deliveries refused so (not recorded: the relay dead-letters them).
    rejected: AtomicU64,
    /// Bumped to close every open connection (an outage, the end).
    kill: watch::Sender<u64>,
    stopped: AtomicBool,
}

/// A running receiver (cheap to clone).
#[derive(Debug, Clone)]
pub struct Receiver {
    inner: Arc<Inner>,
    addr: SocketAddr,
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // The outage closes the listener and binds the same port again.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

impl Receiver {
    /// Binds `listen` and serves until [`Receiver::stop`]. `outage`: at that
    /// time (µs since the start) the receiver closes its listener and every
    /// connection, and listens again after the duration.
    pub async fn start(
        listen: SocketAddr,
        delay: Duration,
        outage: Option<(u64, Duration)>,
        expect_bytes: Option<usize>,
        reject_first: u64,
        clock: Clock,
    ) -> std::io::Result<Receiver> {
        let listener = bind(listen)?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            deliveries: Mutex::new(Vec::new()),
            delay,
            expect_bytes,
            corrupt: AtomicU64::new(0),
            reject_left: AtomicU64::new(reject_first),
            rejected: AtomicU64::new(0),
            clock,
            kill: watch::channel(0).0,
            stopped: AtomicBool::new(false),
        });
        tokio::spawn(serve(Arc::clone(&inner), listener, addr, outage));
        Ok(Receiver { inner, addr })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Deliveries taken so far.
    pub fn count(&self) -> usize {
        self.inner.deliveries.lock().map_or(0, |d| d.len())
    }

    /// Calls `f` on every delivery from index `from` on; returns the index
    /// after the last one.
    pub fn scan_from(&self, from: usize, mut f: impl FnMut(&Delivery)) -> usize {
        let Ok(d) = self.inner.deliveries.lock() else {
            return from;
        };
        for x in d.iter().skip(from) {
            f(x);
        }
        d.len().max(from)
    }

    /// Deliveries whose body was not what was sent.
    pub fn corrupt(&self) -> u64 {
        self.inner.corrupt.load(Ordering::Relaxed)
    }

    /// Deliveries refused with 400 (`--sink-reject-first`).
    pub fn rejected(&self) -> u64 {
        self.inner.rejected.load(Ordering::Relaxed)
    }

    /// Stops listening and closes every connection.
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::Relaxed);
        self.inner.kill.send_modify(|e| *e += 1);
    }

    /// Every delivery taken, in arrival order.
    pub fn take(&self) -> Vec<Delivery> {
        self.inner
            .deliveries
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default()
    }
}

/// What the accept loop waits for.
enum Event {
    Accepted(std::io::Result<(tokio::net::TcpStream, SocketAddr)>),
    Outage,
    Stop,
}

async fn serve(
    inner: Arc<Inner>,
    listener: TcpListener,
    addr: SocketAddr,
    mut outage: Option<(u64, Duration)>,
) {
    let mut listener = Some(listener);
    let mut stop_rx = inner.kill.subscribe();
    while let Some(l) = listener.as_ref() {
        let clock = inner.clock;
        let outage_at = async move {
            match outage {
                Some((at, _)) => tokio::time::sleep_until(clock.at(at).into()).await,
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            accepted = l.accept() => Event::Accepted(accepted),
            () = outage_at => Event::Outage,
            _ = stop_rx.changed() => Event::Stop,
        };
        match event {
            Event::Accepted(Ok((stream, _))) => {
                let _ = stream.set_nodelay(true);
                let inner = Arc::clone(&inner);
                let mut kill = inner.kill.subscribe();
                tokio::spawn(async move {
                    let svc = {
                        let inner = Arc::clone(&inner);
                        service_fn(move |req| handle(Arc::clone(&inner), req))
                    };
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc);
                    // A kill drops the connection mid-request: what was taken
                    // and not answered yet is retried by the relay.
                    tokio::select! {
                        _ = conn => {}
                        _ = kill.changed() => {}
                    }
                });
            }
            Event::Accepted(Err(e)) => {
                eprintln!("ankusa-load: receiver accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Event::Outage => {
                let Some((_, len)) = outage.take() else {
                    continue;
                };
                listener = None;
                inner.kill.send_modify(|e| *e += 1);
                // Our own bump is not a stop.
                stop_rx.borrow_and_update();
                eprintln!(
                    "ankusa-load: receiver down for {:.1} s (--sink-outage-at-s)",
                    len.as_secs_f64()
                );
                tokio::time::sleep(len).await;
                for _ in 0..200 {
                    match bind(addr) {
                        Ok(l) => {
                            listener = Some(l);
                            break;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
                match listener {
                    Some(_) => eprintln!("ankusa-load: receiver up again on {addr}"),
                    None => {
                        eprintln!("ankusa-load: receiver cannot bind {addr} again: it stays down")
                    }
                }
            }
            Event::Stop => {
                if inner.stopped.load(Ordering::Relaxed) {
                    break;
                }
            }
        }
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The `load_id` at the start of a generated body.
pub fn body_id(body: &[u8]) -> Option<u64> {
    let rest = body.strip_prefix(b"{\"load_id\":")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// A UUID's text (hyphenated or not) as its 128 bits.
pub fn uuid_bits(text: &str) -> Option<u128> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(&hex, 16).ok()
}

async fn handle(
    inner: Arc<Inner>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        let mut r = Response::new(Full::new(Bytes::from_static(b"body not read\n")));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return Ok(r);
    };
    if inner
        .reject_left
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
    {
        // A permanent refusal: the relay dead-letters the hook, and an
        // ordered lane goes on without it (a revive then delivers it out of
        // order: ADR 0004 section 4.8).
        inner.rejected.fetch_add(1, Ordering::Relaxed);
        let mut r = Response::new(Full::new(Bytes::from_static(
            b"refused by --sink-reject-first\n",
        )));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return Ok(r);
    }
    let at_us = inner.clock.now_us();
    let h = &parts.headers;
    let header_id = header(h, LOAD_ID_HEADER).and_then(|v| v.parse().ok());
    let from_body = body_id(&body);
    if let Some(n) = inner.expect_bytes
        && (body.len() != n || (header_id.is_some() && from_body != header_id))
    {
        inner.corrupt.fetch_add(1, Ordering::Relaxed);
    }
    let d = Delivery {
        id: header_id.or(from_body),
        ordering_key: header(h, ORDERING_KEY_HEADER).map(Into::into),
        seq: header(h, SEQ_HEADER).and_then(|v| v.parse().ok()),
        idempotency_key: header(h, IDEMPOTENCY_KEY_HEADER).and_then(uuid_bits),
        attempt: header(h, ATTEMPT_HEADER)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        at_us,
    };
    if let Ok(mut all) = inner.deliveries.lock() {
        all.push(d);
    }
    if !inner.delay.is_zero() {
        tokio::time::sleep(inner.delay).await;
    }
    Ok(Response::new(Full::new(Bytes::from_static(
        b"{\"ok\":true}",
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_keys_parse() {
        assert_eq!(body_id(br#"{"load_id":42,"key":"key-1"}"#), Some(42));
        assert_eq!(body_id(br#"{"id":42}"#), None);
        let bits = uuid_bits("01a232f4-3d9f-75a4-a56e-95ca433790de").expect("uuid");
        assert_eq!(format!("{bits:032x}"), "01a232f43d9f75a4a56e95ca433790de");
        assert_eq!(uuid_bits("nope"), None);
    }
}
