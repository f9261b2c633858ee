//! A real HTTP/1.1 server (hyper 1.x) on 127.0.0.1:0 that records every
//! request and answers what the test's function says; in the clear, or
//! behind rustls (`start_tls`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lower-case names, raw value bytes, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    /// The client's address: the same for requests on one connection.
    pub peer: SocketAddr,
    /// Behind TLS, the certificate the client presented (DER), if any.
    pub client_cert: Option<Vec<u8>>,
}

impl Recorded {
    /// Every value of header `name`.
    pub fn all(&self, name: &str) -> Vec<&[u8]> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
            .collect()
    }

    /// The single value of header `name` as text; `None` when absent.
    ///
    /// # Panics
    /// When it appears more than once or is not UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        let all = self.all(name);
        assert!(all.len() <= 1, "header {name} sent {} times", all.len());
        all.first()
            .map(|v| std::str::from_utf8(v).expect("utf-8 header"))
    }
}

/// What to answer.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Hold the request this long before answering.
    pub delay: Option<Duration>,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: None,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(mut self, body: &str) -> Reply {
        self.body = body.into();
        self
    }

    pub fn delay(mut self, d: Duration) -> Reply {
        self.delay = Some(d);
        self
    }
}

type ReplyFn = dyn Fn(&Recorded) -> Reply + Send + Sync;

pub struct Server {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    handshakes_failed: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl Server {
    /// Starts a server answering every request with `reply(request)`.
    pub async fn start(reply: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Server {
        Server::listen(None, reply).await
    }

    /// [`Server::start`] behind TLS with `tls` (a rustls server config,
    /// e.g. one requiring a client certificate): every connection's
    /// handshake must succeed before a request is read, and a request
    /// records the client's certificate.
    pub async fn start_tls(
        tls: Arc<rustls::ServerConfig>,
        reply: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> Server {
        Server::listen(Some(tokio_rustls::TlsAcceptor::from(tls)), reply).await
    }

    async fn listen(
        tls: Option<tokio_rustls::TlsAcceptor>,
        reply: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handshakes_failed = Arc::new(AtomicUsize::new(0));
        let reply: Arc<ReplyFn> = Arc::new(reply);
        let recorded = requests.clone();
        let failed = handshakes_failed.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    return;
                };
                let recorded = recorded.clone();
                let reply = reply.clone();
                let tls = tls.clone();
                let failed = failed.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve(TokioIo::new(stream), peer, None, recorded, reply).await,
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(stream) => {
                                let cert = stream
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|c| c.first())
                                    .map(|c| c.as_ref().to_vec());
                                serve(TokioIo::new(stream), peer, cert, recorded, reply).await;
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::SeqCst);
                            }
                        },
                    }
                });
            }
        });
        Server {
            addr,
            requests,
            handshakes_failed,
            accept,
        }
    }

    /// TLS handshakes the server refused (or that broke off) so far.
    pub fn handshakes_failed(&self) -> usize {
        self.handshakes_failed.load(Ordering::SeqCst)
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("lock").clone()
    }
}

/// Serves HTTP/1.1 on one connection, recording each request.
async fn serve<I>(
    io: I,
    peer: SocketAddr,
    client_cert: Option<Vec<u8>>,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    reply: Arc<ReplyFn>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        let recorded = recorded.clone();
        let reply = reply.clone();
        let client_cert = client_cert.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes());
            let r = Recorded {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                headers: parts
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                    .collect(),
                body: body.map(|b| b.to_vec()).unwrap_or_default(),
                peer,
                client_cert,
            };
            let answer = reply(&r);
            recorded.lock().expect("lock").push(r);
            if let Some(d) = answer.delay {
                tokio::time::sleep(d).await;
            }
            let mut resp = Response::builder().status(answer.status);
            for (n, v) in &answer.headers {
                resp = resp.header(n, v);
            }
            Ok::<_, Infallible>(
                resp.body(Full::new(Bytes::from(answer.body)))
                    .expect("response"),
            )
        }
    });
    let _ = http1::Builder::new().serve_connection(io, service).await;
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
