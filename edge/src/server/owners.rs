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

use ankusa_keys::TenantOrd;
use bytes::Bytes;

/// The header a forwarded request carries: the ids of the nodes that
/// forwarded it, comma-separated. A node in the list never forwards it
/// again, and it is forwarded at most [`MAX_HOPS`] times, so nodes whose
/// views of the catalog differ for a moment cannot pass a hook around; a
/// node that cannot forward it holds it.
pub const FORWARDED_BY: &str = "x-ankusa-forwarded-by";

/// The header of a 503 that means "not here, now": this node is stopping,
/// or cannot take the tenant's hooks (its lease lapsed, a move fenced it,
/// no owner within the hold). A node that forwarded the hook places it
/// again instead of passing the 503 on.
pub const PLACE_AGAIN: &str = "x-ankusa-place-again";

/// The most times a hook is forwarded (an owner that lost the tenant while
/// the hook was on its way forwards it on to the new owner).
pub const MAX_HOPS: usize = 3;

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
    /// Its headers worth passing on (`content-type`, `retry-after`,
    /// [`PLACE_AGAIN`]).
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
    /// Admits a hook of `tenant` for commit if this node may acknowledge
    /// it now (it owns the tenant, its lease is fresh by its own clock, and
    /// no planned move has fenced the tenant): the [`Admitted`] guard counts
    /// the hook as in flight until dropped (a planned move's fence waits
    /// for none), and is asked again before the answer (docs/design.md
    /// section 11, "Fencing"). `None`: answer 503.
    fn admit(&self, tenant: &str) -> Option<Box<dyn Admitted + '_>>;
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
    /// The tenant's ordinal when a hand-over page of `tenant` from node
    /// `from` carrying `token` may be stored here: this node owns the tenant
    /// and the catalog holds `from`'s offer of it to this node with that
    /// token (docs/design.md section 11, "Hand-over"). `None`: refuse it.
    fn accept_handover(&self, tenant: &str, from: &str, token: &str) -> Option<TenantOrd>;
}

/// A hook admitted for commit ([`Owners::admit`]); dropped when answered.
pub trait Admitted: Send + Sync {
    /// Whether the committed hook may be acknowledged: this node still owns
    /// the tenant and its lease is still fresh (a planned move that fenced
    /// the tenant meanwhile waited for this hook, so it does not count).
    fn may_acknowledge(&self) -> bool;
}
