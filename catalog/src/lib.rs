//! The cluster's catalog in etcd (docs/design.md section 11, "planned, not
//! built"): the client the cluster's ownership is built on. It speaks etcd's
//! v3 JSON gateway (`POST /v3/...` on a member's client URL): leases (a
//! node's record lives under one), reads of a key or a prefix, and the
//! compare-and-put transaction every change of ownership is (compared on the
//! record's modification revision, so two controllers never both win).
//!
//! Each call goes to the endpoints in turn until one answers: a member that
//! is down costs a connection error, not the call. Numbers come back from the
//! gateway as JSON strings (int64 in proto3 JSON); keys and values as base64.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde_json::{Value, json};

pub mod cluster;

/// What a catalog call failed with.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// No endpoint answered (each one's error, in order).
    #[error("no etcd endpoint answered: {0}")]
    Unreachable(String),
    /// An endpoint answered with an error (status and etcd's message).
    #[error("etcd answered {status}: {message}")]
    Etcd {
        /// The HTTP status.
        status: u16,
        /// etcd's error text.
        message: String,
    },
    /// An answer that does not decode as the gateway's JSON.
    #[error("an answer from etcd that does not decode: {0}")]
    Decode(String),
}

/// A key and its value as etcd holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// The revision of its creation.
    pub create_revision: i64,
    /// The revision of its last change: what [`Etcd::put_if`] compares.
    pub mod_revision: i64,
    /// The lease it lives under (0: none).
    pub lease: i64,
}

/// A lease: a key put under it is deleted when it expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Its id.
    pub id: i64,
    /// Its time to live, seconds, as etcd granted it.
    pub ttl_s: i64,
}

/// A client of the etcd members at `endpoints`.
#[derive(Clone, Debug)]
pub struct Etcd {
    endpoints: Vec<String>,
    http: reqwest::Client,
}

/// An int64 of the gateway's JSON: a string, or absent (0).
fn int(v: &Value) -> Result<i64, CatalogError> {
    match v {
        Value::Null => Ok(0),
        Value::String(s) => s
            .parse()
            .map_err(|_| CatalogError::Decode(format!("not an int64: {s:?}"))),
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| CatalogError::Decode(format!("not an int64: {n}"))),
        other => Err(CatalogError::Decode(format!("not an int64: {other}"))),
    }
}

fn bytes(v: &Value) -> Result<Vec<u8>, CatalogError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::String(s) => B64
            .decode(s)
            .map_err(|e| CatalogError::Decode(format!("not base64: {e}"))),
        other => Err(CatalogError::Decode(format!("not base64: {other}"))),
    }
}

fn entry(v: &Value) -> Result<Entry, CatalogError> {
    Ok(Entry {
        key: bytes(&v["key"])?,
        value: bytes(&v["value"])?,
        create_revision: int(&v["create_revision"])?,
        mod_revision: int(&v["mod_revision"])?,
        lease: int(&v["lease"])?,
    })
}

fn entries(v: &Value) -> Result<Vec<Entry>, CatalogError> {
    match &v["kvs"] {
        Value::Null => Ok(Vec::new()),
        Value::Array(kvs) => kvs.iter().map(entry).collect(),
        other => Err(CatalogError::Decode(format!("kvs is not a list: {other}"))),
    }
}

/// The key just past every key that begins with `prefix` (etcd's
/// `range_end` for a prefix); `[0]` (every key) for an empty prefix or one
/// of 0xff bytes only.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[derive(Deserialize)]
struct GatewayError {
    #[serde(default)]
    error: String,
    #[serde(default)]
    message: String,
}

impl Etcd {
    /// A client of `endpoints` (`http://host:port`, a member's client URL),
    /// each call bounded by `timeout`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<Self, CatalogError> {
        // reqwest panics at `build` without a provider when the build has its
        // `rustls-no-provider` feature (see Cargo.toml); one already
        // installed stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .build()
            .map_err(|e| CatalogError::Unreachable(format!("the HTTP client: {e}")))?;
        Ok(Self {
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_owned())
                .collect(),
            http,
        })
    }

    /// `POST /v3/{path}` with `body` to the first endpoint that answers.
    async fn call(&self, path: &str, body: Value) -> Result<Value, CatalogError> {
        let body = serde_json::to_vec(&body).map_err(|e| CatalogError::Decode(e.to_string()))?;
        let mut failures = Vec::new();
        for endpoint in &self.endpoints {
            let sent = self
                .http
                .post(format!("{endpoint}/v3/{path}"))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await;
            let resp = match sent {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{endpoint}: {e}"));
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let text = match resp.bytes().await {
                Ok(b) => b,
                Err(e) => {
                    failures.push(format!("{endpoint}: {e}"));
                    continue;
                }
            };
            if status != 200 {
                let e: GatewayError = serde_json::from_slice(&text).unwrap_or(GatewayError {
                    error: String::from_utf8_lossy(&text).into_owned(),
                    message: String::new(),
                });
                return Err(CatalogError::Etcd {
                    status,
                    message: if e.message.is_empty() {
                        e.error
                    } else {
                        e.message
                    },
                });
            }
            return serde_json::from_slice(&text).map_err(|e| CatalogError::Decode(e.to_string()));
        }
        Err(CatalogError::Unreachable(failures.join("; ")))
    }

    /// Grants a lease of `ttl_s` seconds.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn grant(&self, ttl_s: i64) -> Result<Lease, CatalogError> {
        let v = self.call("lease/grant", json!({ "TTL": ttl_s })).await?;
        Ok(Lease {
            id: int(&v["ID"])?,
            ttl_s: int(&v["TTL"])?,
        })
    }

    /// Renews `lease`: its time to live again, or `None` when it has expired
    /// (its keys are gone).
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn keep_alive(&self, lease: i64) -> Result<Option<i64>, CatalogError> {
        let v = self
            .call("lease/keepalive", json!({ "ID": lease.to_string() }))
            .await?;
        let ttl = int(&v["result"]["TTL"])?;
        Ok((ttl > 0).then_some(ttl))
    }

    /// The time `lease` has left and the TTL it was granted, seconds; `None`
    /// when it has expired.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn time_to_live(&self, lease: i64) -> Result<Option<(i64, i64)>, CatalogError> {
        let v = self
            .call("lease/timetolive", json!({ "ID": lease.to_string() }))
            .await?;
        // The gateway leaves a zero out: a lease in its last second has no
        // `TTL`; an expired one has -1.
        let ttl = int(&v["TTL"])?;
        let granted = int(&v["grantedTTL"])?;
        Ok((ttl >= 0 && granted > 0).then_some((ttl, granted)))
    }

    /// Revokes `lease` (its keys are deleted at once).
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn revoke(&self, lease: i64) -> Result<(), CatalogError> {
        self.call("lease/revoke", json!({ "ID": lease.to_string() }))
            .await
            .map(|_| ())
    }

    /// The entry at `key`, if any.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn get(&self, key: &[u8]) -> Result<Option<Entry>, CatalogError> {
        let v = self
            .call("kv/range", json!({ "key": B64.encode(key) }))
            .await?;
        Ok(entries(&v)?.into_iter().next())
    }

    /// Every entry whose key begins with `prefix`, in key order.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn prefix(&self, prefix: &[u8]) -> Result<Vec<Entry>, CatalogError> {
        let v = self
            .call(
                "kv/range",
                json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) }),
            )
            .await?;
        entries(&v)
    }

    /// Puts `value` at `key` (under `lease`, if any): the store's revision
    /// after it.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn put(
        &self,
        key: &[u8],
        value: &[u8],
        lease: Option<i64>,
    ) -> Result<i64, CatalogError> {
        let mut put = json!({ "key": B64.encode(key), "value": B64.encode(value) });
        if let Some(l) = lease {
            put["lease"] = json!(l.to_string());
        }
        let v = self.call("kv/put", put).await?;
        int(&v["header"]["revision"])
    }

    /// Puts `value` at `key` only if the key's modification revision is still
    /// `expected` (0: the key does not exist): one change of ownership.
    /// `Ok(Some(revision))` when it was put; `Ok(None)` when the key had
    /// changed meanwhile (another writer won; nothing was written).
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn put_if(
        &self,
        key: &[u8],
        value: &[u8],
        expected: i64,
        lease: Option<i64>,
    ) -> Result<Option<i64>, CatalogError> {
        let k = B64.encode(key);
        let mut put = json!({ "key": k, "value": B64.encode(value) });
        if let Some(l) = lease {
            put["lease"] = json!(l.to_string());
        }
        let v = self
            .call(
                "kv/txn",
                json!({
                    "compare": [{
                        "key": k,
                        "target": "MOD",
                        "result": "EQUAL",
                        "mod_revision": expected.to_string(),
                    }],
                    "success": [{ "request_put": put }],
                }),
            )
            .await?;
        if v["succeeded"].as_bool() == Some(true) {
            Ok(Some(int(&v["header"]["revision"])?))
        } else {
            Ok(None)
        }
    }
}

/// A condition of [`Etcd::txn`]: the key's modification revision is
/// `mod_revision` (0: the key does not exist).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    /// The key.
    pub key: Vec<u8>,
    /// Its expected modification revision.
    pub mod_revision: i64,
}

/// A write of [`Etcd::txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Put the value at the key, under the lease if any.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// The lease (`None`: no lease).
        lease: Option<i64>,
    },
    /// Delete the key.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
}

impl Etcd {
    /// Makes every write of `ops` in one etcd transaction if every
    /// condition of `compares` holds; nothing otherwise. `Ok(true)` when the
    /// writes were made.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn txn(&self, compares: &[Compare], ops: &[Op]) -> Result<bool, CatalogError> {
        let compare: Vec<Value> = compares
            .iter()
            .map(|c| {
                json!({
                    "key": B64.encode(&c.key),
                    "target": "MOD",
                    "result": "EQUAL",
                    "mod_revision": c.mod_revision.to_string(),
                })
            })
            .collect();
        let success: Vec<Value> = ops
            .iter()
            .map(|op| match op {
                Op::Put { key, value, lease } => {
                    let mut put = json!({ "key": B64.encode(key), "value": B64.encode(value) });
                    if let Some(l) = lease {
                        put["lease"] = json!(l.to_string());
                    }
                    json!({ "request_put": put })
                }
                Op::Delete { key } => json!({ "request_delete_range": { "key": B64.encode(key) } }),
            })
            .collect();
        let v = self
            .call("kv/txn", json!({ "compare": compare, "success": success }))
            .await?;
        Ok(v["succeeded"].as_bool() == Some(true))
    }

    /// Every entry whose key begins with `prefix`, and the store's revision
    /// they were read at (one read: a consistent view).
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn prefix_at(&self, prefix: &[u8]) -> Result<(Vec<Entry>, i64), CatalogError> {
        let v = self
            .call(
                "kv/range",
                json!({ "key": B64.encode(prefix), "range_end": B64.encode(prefix_end(prefix)) }),
            )
            .await?;
        Ok((entries(&v)?, int(&v["header"]["revision"])?))
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_ends_just_past_its_last_key() {
        assert_eq!(prefix_end(b"tenants/"), b"tenants0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
