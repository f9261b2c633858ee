//! The owner's side of a cluster hand-over (docs/design.md section 11,
//! "Hand-over"): `POST /_ankusa/handover/<tenant>` on the ingest listener
//! carries a page of another node's remains of the tenant (dead letters,
//! quarantined hooks, the archive, dedupe records) in the dump format
//! (`engine::dump`), with the sending node's id in
//! [`HANDOVER_FROM`] and its offer's token as a bearer token. The page is
//! stored only when the catalog holds that node's offer of the tenant to
//! this node with that token ([`Owners::accept_handover`]): writing to etcd
//! is the credential, so a provider that reaches the ingest listener cannot
//! write dead letters. The Writer stores every hook under a new seq of this
//! store (`ankusa_queue::handover::adopt`), `Sync`, before the answer.

use std::sync::atomic::Ordering;

use ankusa_engine::Kv;
use ankusa_engine::dump::read_records;
use ankusa_queue::writer::WriteError;
use hyper::header::AUTHORIZATION;
use hyper::{Method, Request, StatusCode};
use tracing::{debug, info, warn};

use super::owners::Owners;
use super::{BODY_READ_TIMEOUT, Edge, Resp, error, json, limits, retry_after};

/// The path prefix of a hand-over page; the tenant's name follows. No
/// source may have a route under `/_ankusa/` (the configuration refuses it).
pub const HANDOVER_PATH: &str = "/_ankusa/handover/";

/// The header naming the node a hand-over page comes from.
pub const HANDOVER_FROM: &str = "x-ankusa-handover-from";

/// The largest hand-over page taken, bytes. A sender's pages stay far below
/// it (a few MiB: `ankusa_queue::handover` pages of hooks); a single hook
/// (at most `listeners.body_limit_bytes` of body) always fits one page.
pub const HANDOVER_MAX_BYTES: u64 = 64 << 20;

impl<K: Kv> Edge<K> {
    /// Answers a hand-over page (the path starts with [`HANDOVER_PATH`]):
    /// 200 with what was stored, 403 without a matching offer, 400 for a
    /// page that is not a well-formed dump, 422 for one the store refuses
    /// (another tenant's records, a sink entry this node does not have),
    /// 503 while the tenant is purged or the node stops.
    pub(crate) async fn receive_handover<B>(
        &self,
        owners: &dyn Owners,
        tenant: &str,
        req: Request<B>,
    ) -> Resp
    where
        B: hyper::body::Body<Data = bytes::Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if req.method() != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "hand-over pages are POSTed");
        }
        let header = |name| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let from = header(HANDOVER_FROM);
        let auth = header(AUTHORIZATION.as_str());
        let token = auth.strip_prefix("Bearer ").unwrap_or("");
        let Some(ord) = owners.accept_handover(tenant, &from, token) else {
            // debug, not warn: anyone who reaches the ingest listener can
            // send these, and the 403 says why.
            debug!(%tenant, %from, "a hand-over page without an offer in the catalog for this node: refused");
            return error(
                StatusCode::FORBIDDEN,
                format!(
                    "no hand-over of tenant {tenant} from node {from:?} to this node is offered with this token (or this node does not own the tenant now)"
                ),
            );
        };
        let mut permit = self.stats.body_budget.empty_permit();
        let read = limits::read_body(req.into_body(), HANDOVER_MAX_BYTES, None, &mut permit);
        let body = match tokio::time::timeout(BODY_READ_TIMEOUT * 4, read).await {
            Ok(Ok(b)) => b,
            Ok(Err(limits::BodyReadError::TooLarge)) => {
                return error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("a hand-over page is over {HANDOVER_MAX_BYTES} bytes"),
                );
            }
            Ok(Err(limits::BodyReadError::Budget)) => {
                return retry_after(
                    error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "the node's body budget is spent; send the page again later",
                    ),
                    1,
                );
            }
            Ok(Err(limits::BodyReadError::Read(e))) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("could not read the page: {e}"),
                );
            }
            Err(_) => {
                return error(
                    StatusCode::REQUEST_TIMEOUT,
                    "the page did not arrive in time",
                );
            }
        };
        let mut records = Vec::new();
        if let Err(e) = read_records(body.as_slice(), ankusa_keys::ORIGIN_KEY, &mut |r| {
            records.push((r.cf, r.key.to_vec(), r.value.to_vec()));
            Ok(())
        }) {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the hand-over page is not a well-formed dump: {e}"),
            );
        }
        drop(permit);
        match self.writer.adopt(ord, records).await {
            Ok(a) => {
                self.stats.adopted.fetch_add(a.hooks, Ordering::Relaxed);
                info!(%tenant, %from, hooks = a.hooks, dead = a.dead, quarantined = a.quarantined, dedupe = a.dedupe, "cluster: took a page of another node's remains of the tenant");
                json(
                    StatusCode::OK,
                    serde_json::json!({
                        "hooks": a.hooks,
                        "dead": a.dead,
                        "quarantined": a.quarantined,
                        "dedupe": a.dedupe,
                    }),
                )
            }
            Err(WriteError::Refused(msg)) => {
                warn!(%tenant, %from, error = %msg, "cluster: refused a hand-over page");
                error(StatusCode::UNPROCESSABLE_ENTITY, msg)
            }
            Err(WriteError::TenantPurging { .. }) => self.purging(tenant),
            Err(WriteError::Store(msg)) => self.store_failed(msg),
            Err(e @ (WriteError::Stopped | WriteError::NotQuarantined { .. })) => {
                self.unavailable(e.to_string())
            }
        }
    }
}
