//! The relay's admin listener: `/metrics` (the backlog) and
//! `GET /v1/hooks/{idempotency_key}` (a hook's seq, which the HTTP sink does
//! not send). hyper's pooled client; everything is on loopback.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, HeaderValue};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A client of one relay's admin listener.
#[derive(Debug)]
pub struct Admin {
    base: String,
    auth: Option<HeaderValue>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Admin {
    /// A client of the admin listener at `url` (`http://127.0.0.1:8081`).
    pub fn new(url: &str, token: Option<String>) -> Result<Admin, String> {
        let base = url.trim_end_matches('/').to_string();
        let uri: Uri = format!("{base}/metrics")
            .parse()
            .map_err(|e| format!("--admin {url:?}: {e}"))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(format!("--admin {url:?}: an http:// URL with a host"));
        }
        let auth = match token.filter(|t| !t.is_empty()) {
            Some(t) => Some(
                HeaderValue::from_str(&format!("Bearer {t}"))
                    .map_err(|_| "--admin-token: not a header value".to_string())?,
            ),
            None => None,
        };
        Ok(Admin {
            base,
            auth,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    /// GETs `path`; the status and the body, within 10 s. A request that
    /// fails is sent once more: a pooled connection to a relay that was
    /// restarted fails once.
    async fn get(&self, path: &str) -> Result<(u16, Bytes), String> {
        match self.get_once(path).await {
            Ok(r) => Ok(r),
            Err(_) => self.get_once(path).await,
        }
    }

    async fn get_once(&self, path: &str) -> Result<(u16, Bytes), String> {
        let uri = format!("{}{path}", self.base);
        let mut req = Request::get(&uri)
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("GET {uri}: {e}"))?;
        if let Some(a) = &self.auth {
            req.headers_mut().insert(AUTHORIZATION, a.clone());
        }
        let fut = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| format!("GET {uri}: {e}"))?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("GET {uri}: {e}"))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .map_err(|_| format!("GET {uri}: no answer in 10 s"))?
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> Result<String, String> {
        match self.get("/metrics").await? {
            (200, body) => Ok(String::from_utf8_lossy(&body).into_owned()),
            (status, _) => Err(format!("GET {}/metrics: HTTP {status}", self.base)),
        }
    }

    /// The seq of each `(load id, idempotency key)`, `concurrency` requests
    /// at a time; also how many look-ups failed.
    pub async fn lookup_seqs(
        self: &Arc<Self>,
        keys: &[(u64, u128)],
        concurrency: usize,
    ) -> (HashMap<u64, u64>, usize) {
        let queue = Arc::new(Mutex::new(keys.to_vec()));
        let mut workers = Vec::new();
        for _ in 0..concurrency.max(1) {
            let (me, queue) = (Arc::clone(self), Arc::clone(&queue));
            workers.push(tokio::spawn(async move {
                let mut found = Vec::new();
                let mut failed = 0usize;
                let mut first_error = None;
                loop {
                    let next = queue.lock().ok().and_then(|mut q| q.pop());
                    let Some((id, key)) = next else { break };
                    match me.seq_of(key).await {
                        Ok(seq) => found.push((id, seq)),
                        Err(e) => {
                            failed += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                }
                (found, failed, first_error)
            }));
        }
        let mut seqs = HashMap::new();
        let mut failed = 0;
        for w in workers {
            if let Ok((found, f, e)) = w.await {
                seqs.extend(found);
                failed += f;
                if let Some(e) = e {
                    eprintln!("ankusa-load: seq look-up failed: {e}");
                }
            }
        }
        (seqs, failed)
    }

    async fn seq_of(&self, key: u128) -> Result<u64, String> {
        let text = uuid_text(key);
        let (status, body) = self.get(&format!("/v1/hooks/{text}")).await?;
        if status != 200 {
            return Err(format!(
                "GET /v1/hooks/{text}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("GET /v1/hooks/{text}: {e}"))?;
        v.get("seq")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("GET /v1/hooks/{text}: no seq in the answer"))
    }
}

/// 128 bits as a hyphenated UUID.
pub fn uuid_text(bits: u128) -> String {
    let h = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_round_trip() {
        let t = "01a232f4-3d9f-75a4-a56e-95ca433790de";
        assert_eq!(uuid_text(crate::receiver::uuid_bits(t).expect("uuid")), t);
    }
}
