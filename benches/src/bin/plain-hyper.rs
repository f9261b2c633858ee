//! A plain hyper 1.x server that answers 200 to every POST: the baseline the
//! load run (`benches/load/run.sh`) puts next to the relay.
//!
//! It does what the relay's edge does on the wire and nothing else: HTTP/1.1
//! keep-alive connections on a multi-thread tokio runtime, the whole body read
//! through `Limited` (the relay's 25 MiB default `body_limit_bytes`), and a
//! small JSON answer. No verification, no store, no fsync: the gap between
//! this and the relay is the cost of durability and routing.
//!
//! Usage: `plain-hyper [ADDR]` (default 127.0.0.1:8090).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// The relay's default `body_limit_bytes`.
const BODY_LIMIT: usize = 25 * 1024 * 1024;

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::POST {
        let mut r = Response::new(Full::new(Bytes::from_static(b"hooks are POSTed\n")));
        *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        return Ok(r);
    }
    // Read the whole body, as the relay does before it verifies and commits.
    let status = match Limited::new(req.into_body(), BODY_LIMIT).collect().await {
        Ok(body) => {
            std::hint::black_box(body.to_bytes());
            StatusCode::OK
        }
        Err(_) => StatusCode::BAD_REQUEST,
    };
    let mut r = Response::new(Full::new(Bytes::from_static(b"{\"ok\":true}")));
    *r.status_mut() = status;
    Ok(r)
}

fn main() -> ExitCode {
    let addr: SocketAddr = match std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:8090")
        .parse()
    {
        Ok(a) => a,
        Err(e) => {
            eprintln!("plain-hyper: bad listen address: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plain-hyper: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("plain-hyper: cannot listen on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        };
        eprintln!("plain-hyper: listening on {addr}");
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("plain-hyper: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(handle))
                    .await;
            });
        }
    })
}
