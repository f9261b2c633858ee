//! The edge in a cluster (docs/design.md section 11, "Ingest on any node"):
//! which node takes a tenant's hooks. The relay's cluster runtime answers
//! ([`Owners`]); the edge acts on the answer: it commits a hook of a tenant
//! this node owns, forwards one of a tenant another node owns to that node
//! (its headers and body as received, the owner's answer returned), and holds
//! one of a tenant that has no live owner (a failover in progress) until it
//! has one, at most [`Owners::hold`], then answers 503 with `Retry-After`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

/// The header a forwarded request carries (the forwarding node's id): the
/// node it reaches never forwards it again, so two nodes whose views of the
/// catalog differ for a moment cannot pass a hook back and forth.
pub const FORWARDED_BY: &str = "x-ankusa-forwarded-by";

/// Where a tenant's hooks go now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// This node owns the tenant and its lease is fresh: commit here.
    Local,
    /// Another live node owns it: forward to its address (`host:port`).
    Remote(String),
    /// No live owner this node can act for: hold, then 503.
    Unowned,
}

/// A request to forward, as received.
#[derive(Debug)]
pub struct Forward<'a> {
    /// The owner's `host:port`.
    pub addr: &'a str,
    /// The method.
    pub method: &'a str,
    /// The path and query.
    pub path_and_query: &'a str,
    /// Every header as received.
    pub headers: &'a [(Vec<u8>, Vec<u8>)],
    /// The body.
    pub body: Bytes,
}

/// The owner's answer to a forwarded request.
#[derive(Debug)]
pub struct Answer {
    /// Its status code.
    pub status: u16,
    /// Its headers worth passing on (`content-type`, `retry-after`).
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Bytes,
}

/// A boxed future of this module's calls.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The cluster runtime's side of the edge.
pub trait Owners: Send + Sync {
    /// Where `tenant`'s hooks go now.
    fn place(&self, tenant: &str) -> Placement;
    /// Whether this node may still acknowledge a hook of `tenant`: it owns
    /// it and its lease is fresh by its own clock. Asked before a hook's
    /// commit and again before its answer (docs/design.md section 11,
    /// "Fencing").
    fn fresh(&self, tenant: &str) -> bool;
    /// How long a hook of a tenant without a live owner is held.
    fn hold(&self) -> Duration;
    /// Resolves when the catalog's view may have changed (or after a short
    /// while): a held request looks again.
    fn changed(&self) -> Pending<'_, ()>;
    /// Sends `forward` to its owner; `Err` when the owner could not be
    /// reached or did not answer (the request is then held and placed
    /// again).
    fn forward<'a>(&'a self, forward: Forward<'a>) -> Pending<'a, Result<Answer, String>>;
    /// This node's id (the [`FORWARDED_BY`] value).
    fn node_id(&self) -> &str;
}
