//! The cluster's records in etcd and the transactions that change them
//! (docs/design.md section 11, "The catalog"). Every key is under
//! `/ankusa/<cluster>/`:
//!
//! | key | value | lease |
//! |---|---|---|
//! | `nodes/<node_id>` | [`NodeRecord`] | the node's |
//! | `config` | [`ConfigRecord`]: the shared parts' digests | none |
//! | `tenants/<name>` | [`TenantRecord`]: number, owner, epoch, drain | none |
//! | `numbers/tenant/<n>` | the tenant's name: `n` is taken | none |
//! | `sources/<name>` | the source's id (decimal) | none |
//! | `numbers/source/<n>` | the source's name | none |
//! | `controller` | the controller's node id | the controller's |
//! | `draining/<node_id>` | empty: the node is drained | none |
//! | `reports/<tenant>/<node_id>` | [`PendingReport`]: what the node holds of it | none |
//! | `handovers/<tenant>/<node_id>` | [`HandoverOffer`]: the node hands its remains of the tenant to the owner | the node's |
//!
//! Tenant numbers and source ids are global: lane ids hash the source id,
//! so a tenant that moves keeps each key's lane. A number is taken in the
//! same transaction as its name (both compared absent), so two nodes never
//! give one number to two names. Ownership changes are transactions compared
//! on the tenant record's revision; [`assign`], a pure function of a
//! [`Snapshot`], decides them for the controller.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::{CatalogError, Compare, Entry, Etcd, Op};

/// A node's record (`nodes/<node_id>`), under its lease: it is there while
/// the node is alive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Where the other nodes forward the hooks of its tenants (`host:port`).
    pub addr: String,
    /// A draining node is given no tenant by the controller.
    #[serde(default)]
    pub draining: bool,
    /// The digest of its configuration's shared parts ([`ConfigRecord::hash`]).
    pub config: String,
    /// The tenants its configuration has: the controller gives it no other
    /// (a node that has not reloaded a file with a new tenant cannot take
    /// its hooks). Empty: not said (any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<String>,
}

impl NodeRecord {
    /// Whether the node's configuration has `tenant` (or does not say).
    pub fn has(&self, tenant: &str) -> bool {
        self.tenants.is_empty() || self.tenants.iter().any(|t| t == tenant)
    }
}

/// The configuration every node must have alike (`config`): the digest of
/// each shared part (`ankusa_config::shared_sections`) and of all of them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRecord {
    /// The digest of every part together.
    pub hash: String,
    /// Each part's digest, by the part's name (`sources.stripe`).
    pub parts: BTreeMap<String, String>,
}

impl ConfigRecord {
    /// The names of the parts that differ between `self` and `other`: in
    /// one and not the other, or with another digest.
    pub fn differences(&self, other: &ConfigRecord) -> Vec<String> {
        let mut names: Vec<String> = self
            .parts
            .keys()
            .chain(other.parts.keys())
            .filter(|k| self.parts.get(*k) != other.parts.get(*k))
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// A tenant's record (`tenants/<name>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// Its number in every node's store (the key families' tenant ordinal).
    pub ord: u32,
    /// The node that owns it at `epoch`; `None` before the controller first
    /// assigned it.
    #[serde(default)]
    pub owner: Option<String>,
    /// Its epoch: 0 before its first owner, then + 1 at every change of
    /// owner.
    #[serde(default)]
    pub epoch: u64,
    /// The earlier epochs whose rows are still to be delivered by the
    /// nodes that held them (a failover's epoch barrier), oldest first: only
    /// the first is drained at a time, so the epochs go out in their order.
    /// Empty when there is no barrier.
    #[serde(default)]
    pub drains: Vec<Drain>,
    /// A planned move in progress (`ankusa cluster move`, `cluster
    /// drain`): the owner stops taking the tenant's hooks and says so
    /// (`fenced`), then the controller gives the tenant to `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving: Option<Move>,
}

/// A planned move of a tenant (docs/design.md section 11, "Planned
/// moves"): fence, flip, then drain in place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The node the tenant goes to.
    pub to: String,
    /// Set by the owner once it takes no more hook of the tenant: the
    /// controller may flip.
    #[serde(default)]
    pub fenced: bool,
    /// Set with `fenced`: the ordered lanes (hex lane ids) in which the owner
    /// still held rows when it fenced the tenant, the only lanes its drain
    /// holds back on the target ([`Drain::lanes`]); `None` when it held more
    /// than [`MAX_DRAIN_LANES`] (the drain then holds every ordered lane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lanes: Option<Vec<String>>,
}

/// The most lanes a planned move lists in its drain: past this many the
/// drain holds every ordered lane of the tenant, as a failover's does (the
/// tenant record stays small: every node reads the whole catalog at each
/// poll).
pub const MAX_DRAIN_LANES: usize = 4096;

/// An epoch still to be drained: its node delivers what it holds of the
/// tenant, in lane order, once every older epoch is drained, and then
/// removes it from [`TenantRecord::drains`]; until then the owner's
/// ordered lanes of the tenant hold their new hooks (docs/design.md section
/// 11, "Failover").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// The node that held the epoch.
    pub node: String,
    /// The epoch.
    pub epoch: u64,
    /// The ordered lanes (hex lane ids) the drain holds back on the owner:
    /// after a planned move, those in which the old owner held rows when it
    /// fenced the tenant (every other key's earlier hooks are already
    /// delivered, so its new hooks need not wait); `None`, every ordered
    /// lane of the tenant: after a failover the new owner cannot know which
    /// keys the old epoch holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lanes: Option<Vec<String>>,
}

/// What a tenant's drains hold back on a node that owns it
/// ([`TenantRecord::barrier`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Barrier {
    /// Nothing: no other node's earlier epoch is undrained.
    Open,
    /// The listed ordered lanes (hex lane ids): every drain left is a
    /// planned move's with its lanes.
    Lanes(BTreeSet<String>),
    /// Every ordered lane of the tenant: some drain left is a failover's.
    All,
}

impl TenantRecord {
    /// What the tenant's drains hold back on `node` as its owner
    /// (docs/design.md section 11, "Planned moves"): the union of the lanes
    /// of the other nodes' drains, or every ordered lane when one of them
    /// lists none. `node`'s own drains hold nothing back: its store's lanes
    /// order its own epochs already.
    pub fn barrier(&self, node: &str) -> Barrier {
        let mut lanes = BTreeSet::new();
        let mut any = false;
        for d in self.drains.iter().filter(|d| d.node != node) {
            any = true;
            match &d.lanes {
                Some(l) => lanes.extend(l.iter().cloned()),
                None => return Barrier::All,
            }
        }
        if any {
            Barrier::Lanes(lanes)
        } else {
            Barrier::Open
        }
    }
}

/// A node's offer to hand its remains of a tenant to the owner
/// (`handovers/<tenant>/<node>`, under the node's lease; docs/design.md
/// section 11, "Hand-over").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoverOffer {
    /// The owner it is offered to.
    pub to: String,
    /// The owner's epoch of the tenant when offered.
    pub epoch: u64,
    /// A random token each page carries (`authorization: Bearer`): the
    /// owner takes a page only with the token of an offer in the catalog.
    pub token: String,
}

/// What a node last said it holds of a tenant (`reports/<tenant>/<node>`): its
/// pending rows, at the epoch it owned or drains. Kept after the node is
/// gone, so a forfeit can say what it gives up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReport {
    /// The node.
    pub node: String,
    /// The tenant's epoch that node held.
    pub epoch: u64,
    /// Its pending rows of the tenant (ADR 0004's pending: due, in flight,
    /// lane members, held).
    pub pending: u64,
    /// Their bytes (the sizes counted against the tenant's bounds): the
    /// controller balances tenants by them after their count.
    #[serde(default)]
    pub bytes: u64,
    /// When it said so, unix ms.
    pub at_ms: u64,
    /// The rows are of an epoch of the tenant the node no longer owns nor
    /// drains (forfeited while the node was away): they are not delivered,
    /// and the node may not own the tenant again while it holds them (they
    /// would go out after newer hooks).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
}

impl Snapshot {
    /// The stale rows `node` holds of `tenant` ([`PendingReport::stale`]).
    pub fn stale_rows(&self, tenant: &str, node: &str) -> u64 {
        self.reports
            .get(tenant)
            .and_then(|r| r.get(node))
            .filter(|r| r.stale)
            .map_or(0, |r| r.pending)
    }
}

/// What a forfeit gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forfeited {
    /// The node that held the epoch.
    pub node: String,
    /// Its last report of the tenant, if it made one at that epoch.
    pub report: Option<PendingReport>,
    /// The drains left (the barrier lifts when none is left).
    pub left: Vec<Drain>,
}

/// Why a planned move was refused.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// etcd failed or could not be reached.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The tenant is not in the catalog.
    #[error("no tenant {0} in the cluster")]
    NoTenant(String),
    /// The target is not a live node, or is drained.
    #[error("node {0} is not a live node that takes tenants (see `ankusa cluster status`)")]
    BadTarget(String),
    /// The tenant's owner is not alive: a failover moves it.
    #[error("tenant {tenant} has no live owner: a failover gives it to a live node")]
    NoOwner {
        /// The tenant.
        tenant: String,
    },
    /// The tenant is on the target already.
    #[error("tenant {tenant} is owned by {node} already")]
    Already {
        /// The tenant.
        tenant: String,
        /// Its owner.
        node: String,
    },
    /// Another move involves the owner or the target (one per node at a
    /// time), or the tenant is moving.
    #[error("{0}: one move per node at a time; wait for it (ankusa cluster status)")]
    Busy(String),
    /// The target holds rows of a forfeited epoch of the tenant.
    #[error(
        "node {node} holds {rows} undelivered rows of tenant {tenant} from an epoch that was forfeited: it cannot own the tenant again (they would go out after newer hooks); purge the tenant on that node first"
    )]
    Stale {
        /// The tenant.
        tenant: String,
        /// The target.
        node: String,
        /// Its stale rows.
        rows: u64,
    },
    /// The target may not own the tenant yet: an earlier epoch of its
    /// comes before another node's in the tenant's barrier.
    #[error("node {node} cannot own tenant {tenant} until the tenant's earlier epochs are drained")]
    Barrier {
        /// The tenant.
        tenant: String,
        /// The target.
        node: String,
    },
}

/// Why a forfeit was refused.
#[derive(Debug, thiserror::Error)]
pub enum ForfeitError {
    /// etcd failed or could not be reached.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The tenant is not in the catalog.
    #[error("no tenant {0} in the cluster")]
    NoTenant(String),
    /// The tenant has no undrained epoch `epoch`.
    #[error("tenant {tenant} has no undrained epoch {epoch} (its barrier: {barrier})")]
    NoSuchEpoch {
        /// The tenant.
        tenant: String,
        /// The epoch asked for.
        epoch: u64,
        /// Its drains, `node@epoch`, or `none`.
        barrier: String,
    },
    /// The node that holds the epoch is alive: it drains on its own.
    #[error(
        "node {node}, which holds epoch {epoch} of tenant {tenant}, is alive: it delivers what it holds and lifts the barrier itself (a forfeit is for a node gone for good)"
    )]
    Alive {
        /// The tenant.
        tenant: String,
        /// The epoch.
        epoch: u64,
        /// The live node.
        node: String,
    },
}

/// The catalog at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The etcd revision it was read at.
    pub revision: i64,
    /// Live nodes, by id, with the lease each lives under.
    pub nodes: BTreeMap<String, (NodeRecord, i64)>,
    /// Tenants by name, with each record's modification revision.
    pub tenants: BTreeMap<String, (TenantRecord, i64)>,
    /// Source ids by name.
    pub sources: BTreeMap<String, u32>,
    /// The controller's node id, if one is elected.
    pub controller: Option<String>,
    /// The shared configuration, once the first node published it.
    pub config: Option<ConfigRecord>,
    /// Nodes an operator drains (`draining/<node_id>`, no lease: a drained
    /// node stays drained across its restarts until `undrain`).
    pub draining: std::collections::BTreeSet<String>,
    /// The last [`PendingReport`] of each node of each tenant, by tenant
    /// then node.
    pub reports: BTreeMap<String, BTreeMap<String, PendingReport>>,
    /// The hand-overs offered, by tenant then sending node.
    pub handovers: BTreeMap<String, BTreeMap<String, HandoverOffer>>,
}

impl Snapshot {
    /// The node that owns `tenant` and is alive, with its address.
    pub fn live_owner(&self, tenant: &str) -> Option<(&str, &NodeRecord)> {
        let (t, _) = self.tenants.get(tenant)?;
        let owner = t.owner.as_deref()?;
        self.nodes.get(owner).map(|(n, _)| (owner, n))
    }
}

/// Why a node may not join (each names what is in the way).
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// etcd failed or could not be reached.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// A live node has this node's id.
    #[error("node_id {node} is in use by a live node at {addr}: each node needs its own node_id")]
    NodeIdInUse {
        /// The id.
        node: String,
        /// The live node's address.
        addr: String,
    },
    /// This node's configuration differs from the cluster's.
    #[error(
        "this node's configuration differs from the cluster's in {}: every section but node and listeners must be the same on every node (and cluster but node_id and advertise)",
        parts.join(", ")
    )]
    ConfigDiffers {
        /// The names of the parts that differ.
        parts: Vec<String>,
    },
    /// A name's number in this node's store is not its number in the
    /// cluster, or is another name's there.
    #[error("{0}")]
    Numbering(String),
}

/// A record that does not decode is a catalog this relay did not write.
fn decode<T: for<'de> Deserialize<'de>>(e: &Entry) -> Result<T, CatalogError> {
    serde_json::from_slice(&e.value).map_err(|err| {
        CatalogError::Decode(format!(
            "the record at {}: {err}",
            String::from_utf8_lossy(&e.key)
        ))
    })
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Records are plain structs of strings and numbers: they always encode.
    serde_json::to_vec(v).unwrap_or_default()
}

/// What a name is numbered for: tenants (ordinals) or sources (ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Numbered {
    /// `tenants/<name>`, `numbers/tenant/<n>`.
    Tenant,
    /// `sources/<name>`, `numbers/source/<n>`.
    Source,
}

impl Numbered {
    fn word(self) -> &'static str {
        match self {
            Numbered::Tenant => "tenant",
            Numbered::Source => "source",
        }
    }
}

/// The catalog of one cluster: an etcd client and the cluster's prefix.
#[derive(Clone, Debug)]
pub struct Catalog {
    etcd: Etcd,
    prefix: String,
}

impl Catalog {
    /// The catalog of the cluster `name` on `etcd`.
    pub fn new(etcd: Etcd, name: &str) -> Catalog {
        Catalog {
            etcd,
            prefix: format!("/ankusa/{name}/"),
        }
    }

    /// The etcd client.
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}{rest}", self.prefix).into_bytes()
    }

    /// Puts `record` (JSON) at `rest` under the cluster's prefix, under
    /// `lease` if any.
    async fn put_record<T: Serialize>(
        &self,
        rest: &str,
        record: &T,
        lease: Option<i64>,
    ) -> Result<(), CatalogError> {
        self.etcd
            .put(&self.key(rest), &encode(record), lease)
            .await
            .map(|_| ())
    }

    /// The whole catalog in one read.
    ///
    /// # Errors
    /// [`CatalogError`], and a record that does not decode.
    pub async fn snapshot(&self) -> Result<Snapshot, CatalogError> {
        let (entries, revision) = self.etcd.prefix_at(self.prefix.as_bytes()).await?;
        let mut snap = Snapshot {
            revision,
            ..Snapshot::default()
        };
        for e in &entries {
            let rest = String::from_utf8_lossy(&e.key[self.prefix.len()..]).into_owned();
            if let Some(id) = rest.strip_prefix("nodes/") {
                snap.nodes.insert(id.to_owned(), (decode(e)?, e.lease));
            } else if let Some(name) = rest.strip_prefix("tenants/") {
                snap.tenants
                    .insert(name.to_owned(), (decode(e)?, e.mod_revision));
            } else if let Some(name) = rest.strip_prefix("sources/") {
                snap.sources.insert(name.to_owned(), decode(e)?);
            } else if let Some(node) = rest.strip_prefix("draining/") {
                snap.draining.insert(node.to_owned());
            } else if rest == "controller" {
                snap.controller = Some(String::from_utf8_lossy(&e.value).into_owned());
            } else if rest == "config" {
                snap.config = Some(decode(e)?);
            } else if let Some((tenant, node)) = rest
                .strip_prefix("reports/")
                .and_then(|r| r.split_once('/'))
            {
                snap.reports
                    .entry(tenant.to_owned())
                    .or_default()
                    .insert(node.to_owned(), decode(e)?);
            } else if let Some((tenant, node)) = rest
                .strip_prefix("handovers/")
                .and_then(|r| r.split_once('/'))
            {
                snap.handovers
                    .entry(tenant.to_owned())
                    .or_default()
                    .insert(node.to_owned(), decode(e)?);
            }
        }
        Ok(snap)
    }

    /// Puts this node's record under `lease` if no live node has its id.
    ///
    /// # Errors
    /// [`JoinError::NodeIdInUse`] naming the live node's address.
    pub async fn join(&self, node: &str, record: &NodeRecord, lease: i64) -> Result<(), JoinError> {
        let key = self.key(&format!("nodes/{node}"));
        let put = Op::Put {
            key: key.clone(),
            value: encode(record),
            lease: Some(lease),
        };
        if self
            .etcd
            .txn(
                &[Compare {
                    key: key.clone(),
                    mod_revision: 0,
                }],
                &[put],
            )
            .await?
        {
            return Ok(());
        }
        let addr = match self.etcd.get(&key).await? {
            Some(e) if e.lease == lease => return Ok(()),
            Some(e) => decode::<NodeRecord>(&e)?.addr,
            None => String::from("(gone since)"),
        };
        Err(JoinError::NodeIdInUse {
            node: node.to_owned(),
            addr,
        })
    }

    /// Rewrites this node's record (its `draining` flag, its configuration)
    /// under the same lease.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn update_node(
        &self,
        node: &str,
        record: &NodeRecord,
        lease: i64,
    ) -> Result<(), CatalogError> {
        self.put_record(&format!("nodes/{node}"), record, Some(lease))
            .await
    }

    /// Publishes `mine` as the cluster's configuration if there is none yet;
    /// otherwise compares.
    ///
    /// # Errors
    /// [`JoinError::ConfigDiffers`] naming the parts that differ.
    pub async fn check_config(&self, mine: &ConfigRecord) -> Result<(), JoinError> {
        let key = self.key("config");
        loop {
            match self.etcd.get(&key).await? {
                Some(e) => {
                    let theirs: ConfigRecord = decode(&e)?;
                    if theirs.hash == mine.hash {
                        return Ok(());
                    }
                    return Err(JoinError::ConfigDiffers {
                        parts: theirs.differences(mine),
                    });
                }
                None => {
                    if self
                        .etcd
                        .put_if(&key, &encode(mine), 0, None)
                        .await?
                        .is_some()
                    {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Replaces the cluster's configuration record (a reload that every node
    /// is to follow).
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn publish_config(&self, record: &ConfigRecord) -> Result<(), CatalogError> {
        self.etcd
            .put(&self.key("config"), &encode(record), None)
            .await
            .map(|_| ())
    }

    /// The cluster's number of each name of `names` (tenants or sources),
    /// numbering the new ones. `local` is what this node's store already
    /// numbered (every name it ever knew, with its number): a name the
    /// cluster knows must have the same number here, and a name new to the
    /// cluster keeps its local number if no other name has it there (a
    /// standalone store joining). New names with no local number get the
    /// next number free in both.
    ///
    /// # Errors
    /// [`JoinError::Numbering`] naming the name and both numbers.
    pub async fn number(
        &self,
        what: Numbered,
        names: &[String],
        local: &BTreeMap<String, u32>,
    ) -> Result<BTreeMap<String, u32>, JoinError> {
        let word = what.word();
        let plural = format!("{word}s/");
        let numbers = format!("numbers/{word}/");
        'again: loop {
            let (entries, _) = self.etcd.prefix_at(self.prefix.as_bytes()).await?;
            let mut by_name: BTreeMap<String, u32> = BTreeMap::new();
            let mut by_number: BTreeMap<u32, String> = BTreeMap::new();
            for e in &entries {
                let rest = String::from_utf8_lossy(&e.key[self.prefix.len()..]).into_owned();
                if let Some(name) = rest.strip_prefix(&plural) {
                    let n = match what {
                        Numbered::Tenant => decode::<TenantRecord>(e)?.ord,
                        Numbered::Source => decode::<u32>(e)?,
                    };
                    by_name.insert(name.to_owned(), n);
                } else if let Some(n) = rest.strip_prefix(&numbers) {
                    let n: u32 = n.parse().map_err(|_| {
                        CatalogError::Decode(format!("a number that is not one: {rest}"))
                    })?;
                    by_number.insert(n, String::from_utf8_lossy(&e.value).into_owned());
                }
            }
            // Every local number must mean the same name in the cluster, or
            // be free there.
            for (name, n) in local {
                match (by_name.get(name), by_number.get(n)) {
                    (Some(theirs), _) if theirs != n => {
                        return Err(JoinError::Numbering(format!(
                            "{word} {name} is number {n} in this node's store and number {theirs} in the cluster: \
                             a store joins a cluster only if its numbers are free there (start this node with an empty data_dir, or export and import its hooks)"
                        )));
                    }
                    (_, Some(other)) if other != name => {
                        return Err(JoinError::Numbering(format!(
                            "{word} {name} is number {n} in this node's store, which is {word} {other}'s in the cluster: \
                             a store joins a cluster only if its numbers are free there (start this node with an empty data_dir, or export and import its hooks)"
                        )));
                    }
                    _ => {}
                }
            }
            let mut out = BTreeMap::new();
            let mut next = by_number
                .keys()
                .chain(local.values())
                .max()
                .copied()
                .unwrap_or(0);
            for name in names {
                if let Some(n) = by_name.get(name) {
                    out.insert(name.clone(), *n);
                    continue;
                }
                let n = if let Some(n) = local.get(name) {
                    *n
                } else {
                    next = next
                        .checked_add(1)
                        .ok_or_else(|| JoinError::Numbering(format!("no {word} number is left")))?;
                    next
                };
                let name_key = self.key(&format!("{plural}{name}"));
                let number_key = self.key(&format!("{numbers}{n}"));
                let value = match what {
                    Numbered::Tenant => encode(&TenantRecord {
                        ord: n,
                        owner: None,
                        epoch: 0,
                        drains: Vec::new(),
                        moving: None,
                    }),
                    Numbered::Source => encode(&n),
                };
                let taken = self
                    .etcd
                    .txn(
                        &[
                            Compare {
                                key: name_key.clone(),
                                mod_revision: 0,
                            },
                            Compare {
                                key: number_key.clone(),
                                mod_revision: 0,
                            },
                        ],
                        &[
                            Op::Put {
                                key: name_key,
                                value,
                                lease: None,
                            },
                            Op::Put {
                                key: number_key,
                                value: name.clone().into_bytes(),
                                lease: None,
                            },
                        ],
                    )
                    .await?;
                if !taken {
                    // Another node numbered a name meanwhile: read again.
                    continue 'again;
                }
                out.insert(name.clone(), n);
            }
            return Ok(out);
        }
    }

    /// Becomes the controller if there is none (the key lives under this
    /// node's lease, so it is freed when the node dies). `true` when this
    /// node is the controller.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn campaign(&self, node: &str, lease: i64) -> Result<bool, CatalogError> {
        let key = self.key("controller");
        if self
            .etcd
            .put_if(&key, node.as_bytes(), 0, Some(lease))
            .await?
            .is_some()
        {
            return Ok(true);
        }
        Ok(self
            .etcd
            .get(&key)
            .await?
            .is_some_and(|e| e.value == node.as_bytes() && e.lease == lease))
    }

    /// Writes `record` at `tenant` if its record is still at `mod_revision`:
    /// one change of ownership. `false` when another writer changed it first.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn set_tenant(
        &self,
        tenant: &str,
        record: &TenantRecord,
        mod_revision: i64,
    ) -> Result<bool, CatalogError> {
        Ok(self
            .etcd
            .put_if(
                &self.key(&format!("tenants/{tenant}")),
                &encode(record),
                mod_revision,
                None,
            )
            .await?
            .is_some())
    }
}

impl Catalog {
    /// Says what this node holds of `tenant` ([`PendingReport`]).
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn report(&self, tenant: &str, report: &PendingReport) -> Result<(), CatalogError> {
        self.put_record(&format!("reports/{tenant}/{}", report.node), report, None)
            .await
    }

    /// Offers the hand-over of this node's remains of `tenant` to its owner
    /// (docs/design.md section 11, "Hand-over"), under the node's lease: the
    /// owner takes pages of it that carry `offer.token`, and only while the
    /// offer is in the catalog (so only from a live member of the cluster:
    /// writing to etcd is the credential).
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn offer_handover(
        &self,
        tenant: &str,
        node: &str,
        offer: &HandoverOffer,
        lease: i64,
    ) -> Result<(), CatalogError> {
        self.put_record(&format!("handovers/{tenant}/{node}"), offer, Some(lease))
            .await
    }

    /// Withdraws this node's hand-over offer of `tenant` (done, or given up).
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn withdraw_handover(&self, tenant: &str, node: &str) -> Result<(), CatalogError> {
        let key = self.key(&format!("handovers/{tenant}/{node}"));
        self.etcd.txn(&[], &[Op::Delete { key }]).await.map(|_| ())
    }

    /// Starts a planned move of `tenant` to `to` (docs/design.md section
    /// 11): the owner fences the tenant, then the controller flips it.
    /// Returns the tenant's epoch before the move.
    ///
    /// # Errors
    /// [`MoveError`].
    pub async fn request_move(&self, tenant: &str, to: &str) -> Result<u64, MoveError> {
        loop {
            let snap = self.snapshot().await?;
            let Some((t, rev)) = snap.tenants.get(tenant) else {
                return Err(MoveError::NoTenant(tenant.to_owned()));
            };
            let Some(owner) = t.owner.clone().filter(|o| snap.nodes.contains_key(o)) else {
                return Err(MoveError::NoOwner {
                    tenant: tenant.to_owned(),
                });
            };
            let target_ok = snap
                .nodes
                .get(to)
                .is_some_and(|(n, _)| !n.draining && !snap.draining.contains(to));
            if !target_ok {
                return Err(MoveError::BadTarget(to.to_owned()));
            }
            if owner == to {
                return Err(MoveError::Already {
                    tenant: tenant.to_owned(),
                    node: owner,
                });
            }
            for (other, (o, _)) in &snap.tenants {
                if let Some(m) = &o.moving {
                    let from = o.owner.as_deref().unwrap_or("");
                    if other == tenant
                        || [from, m.to.as_str()]
                            .iter()
                            .any(|n| *n == owner || *n == to)
                    {
                        return Err(MoveError::Busy(format!(
                            "tenant {other} is moving from {from} to {}",
                            m.to
                        )));
                    }
                }
            }
            let mut drains = t.drains.clone();
            drains.push(Drain {
                node: owner.clone(),
                epoch: t.epoch,
                lanes: None,
            });
            let stale = snap.stale_rows(tenant, to);
            if stale > 0 {
                return Err(MoveError::Stale {
                    tenant: tenant.to_owned(),
                    node: to.to_owned(),
                    rows: stale,
                });
            }
            if !may_own(&drains, to) {
                return Err(MoveError::Barrier {
                    tenant: tenant.to_owned(),
                    node: to.to_owned(),
                });
            }
            let record = TenantRecord {
                moving: Some(Move {
                    to: to.to_owned(),
                    fenced: false,
                    lanes: None,
                }),
                ..t.clone()
            };
            if self.set_tenant(tenant, &record, *rev).await? {
                return Ok(t.epoch);
            }
        }
    }

    /// Marks `node` drained (`true`: the controller gives it no tenant, and
    /// `ankusa cluster drain` moves its tenants off) or takes the mark off.
    ///
    /// # Errors
    /// [`CatalogError`].
    pub async fn set_draining(&self, node: &str, draining: bool) -> Result<(), CatalogError> {
        let key = self.key(&format!("draining/{node}"));
        if draining {
            self.etcd.put(&key, b"", None).await.map(|_| ())
        } else {
            self.etcd.txn(&[], &[Op::Delete { key }]).await.map(|_| ())
        }
    }

    /// Gives up epoch `epoch` of `tenant`: removes it from the tenant's
    /// drains (the operator's act for a node gone for good; docs/design.md
    /// section 11). Refused while the node that holds it is alive.
    ///
    /// # Errors
    /// [`ForfeitError`].
    pub async fn forfeit(&self, tenant: &str, epoch: u64) -> Result<Forfeited, ForfeitError> {
        loop {
            let snap = self.snapshot().await?;
            let Some((t, rev)) = snap.tenants.get(tenant) else {
                return Err(ForfeitError::NoTenant(tenant.to_owned()));
            };
            let Some(i) = t.drains.iter().position(|d| d.epoch == epoch) else {
                let barrier = if t.drains.is_empty() {
                    "none".to_owned()
                } else {
                    t.drains
                        .iter()
                        .map(|d| format!("{}@{}", d.node, d.epoch))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(ForfeitError::NoSuchEpoch {
                    tenant: tenant.to_owned(),
                    epoch,
                    barrier,
                });
            };
            let node = t.drains[i].node.clone();
            if snap.nodes.contains_key(&node) {
                return Err(ForfeitError::Alive {
                    tenant: tenant.to_owned(),
                    epoch,
                    node,
                });
            }
            let mut record = t.clone();
            record.drains.remove(i);
            if self.set_tenant(tenant, &record, *rev).await? {
                let report = snap
                    .reports
                    .get(tenant)
                    .and_then(|r| r.get(&node))
                    .filter(|r| r.epoch == epoch)
                    .cloned();
                return Ok(Forfeited {
                    node,
                    report,
                    left: record.drains,
                });
            }
        }
    }
}

/// One change the controller makes: `tenant`'s record becomes `record` if it
/// is still at `mod_revision`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The tenant.
    pub tenant: String,
    /// Its new record.
    pub record: TenantRecord,
    /// The revision its record must still have.
    pub mod_revision: i64,
}

/// The controller's decisions on `snap` (docs/design.md section 11,
/// "Failover"): every tenant without a live owner goes to a live node that
/// is not draining, the one that owns the fewest tenants (ties by the
/// pending bytes of its last reports, then by id) among
/// those running the cluster's configuration if any can take it, at the next
/// epoch. A tenant that had an owner (now dead) gets that epoch
/// appended to its drains, so its ordered lanes hold new hooks until every
/// earlier epoch's node delivered what it holds, oldest epoch first.
///
/// A node's own drains at the end of the list need no barrier on it: its
/// store's lanes already hold its older epochs' hooks of a key before its
/// new ones (seq order), so they are dropped when it becomes the owner. For
/// the same reason a node whose drain comes before another node's cannot
/// own the tenant (it could not deliver its older hooks without its newer
/// ones, which must wait for the other node's): it is passed over, and a
/// tenant no live node can own stays unowned (503 after the hold) until the
/// other node returns or its epoch is forfeited. A tenant whose owner is
/// alive is never moved here: planned moves are explicit.
pub fn assign(snap: &Snapshot) -> Vec<Assignment> {
    let mut load: BTreeMap<&str, usize> = snap
        .nodes
        .iter()
        .filter(|(id, (n, _))| !n.draining && !snap.draining.contains(*id))
        .map(|(id, _)| (id.as_str(), 0))
        .collect();
    for (t, _) in snap.tenants.values() {
        if let Some(o) = t.owner.as_deref()
            && let Some(n) = load.get_mut(o)
        {
            *n += 1;
        }
    }
    // Each live node's pending bytes, from its last reports: the second
    // measure of its load, after its tenant count.
    let mut bytes: BTreeMap<&str, u64> = BTreeMap::new();
    for by_node in snap.reports.values() {
        for (node, r) in by_node {
            if !r.stale {
                *bytes.entry(node.as_str()).or_default() += r.bytes;
            }
        }
    }
    let mut out = Vec::new();
    for (name, (t, rev)) in &snap.tenants {
        let owner_alive = t
            .owner
            .as_deref()
            .is_some_and(|o| snap.nodes.contains_key(o));
        if owner_alive {
            if let Some(m) = &t.moving
                && let Some(a) = flip(name, t, *rev, m, snap)
            {
                out.push(a);
            }
            continue;
        }
        let mut drains = t.drains.clone();
        if let Some(old) = &t.owner {
            drains.push(Drain {
                node: old.clone(),
                epoch: t.epoch,
                lanes: None,
            });
        }
        // Nodes on the cluster's configuration first: a node still on an
        // older file may not have the tenant at all.
        let current = |id: &str| {
            snap.config
                .as_ref()
                .is_none_or(|c| snap.nodes.get(id).is_some_and(|(n, _)| n.config == c.hash))
        };
        let has = |id: &str| {
            snap.nodes.get(id).is_some_and(|(n, _)| n.has(name)) && snap.stale_rows(name, id) == 0
        };
        let Some((&to, _)) = load
            .iter()
            .filter(|(id, _)| may_own(&drains, id) && has(id))
            .min_by_key(|(id, n)| {
                (
                    !current(id),
                    **n,
                    bytes.get(**id).copied().unwrap_or(0),
                    **id,
                )
            })
        else {
            continue;
        };
        *load.entry(to).or_default() += 1;
        while drains.last().is_some_and(|d| d.node == to) {
            drains.pop();
        }
        out.push(Assignment {
            tenant: name.clone(),
            record: TenantRecord {
                ord: t.ord,
                owner: Some(to.to_owned()),
                epoch: t.epoch + 1,
                drains,
                moving: None,
            },
            mod_revision: *rev,
        });
    }
    out
}

/// A planned move's next step for the controller: once the owner has
/// fenced the tenant, the tenant goes to the target at epoch + 1 behind the
/// owner's epoch (drained in place by the owner); a move whose target is
/// gone or may not own the tenant is called off (the owner takes hooks
/// again).
fn flip(name: &str, t: &TenantRecord, rev: i64, m: &Move, snap: &Snapshot) -> Option<Assignment> {
    let owner = t.owner.clone()?;
    let target_ok =
        snap.nodes.contains_key(&m.to) && m.to != owner && snap.stale_rows(name, &m.to) == 0;
    let mut drains = t.drains.clone();
    drains.push(Drain {
        node: owner,
        epoch: t.epoch,
        lanes: m.lanes.clone(),
    });
    if !target_ok || !may_own(&drains, &m.to) {
        return Some(Assignment {
            tenant: name.to_owned(),
            record: TenantRecord {
                moving: None,
                ..t.clone()
            },
            mod_revision: rev,
        });
    }
    if !m.fenced {
        return None;
    }
    while drains.last().is_some_and(|d| d.node == m.to) {
        drains.pop();
    }
    Some(Assignment {
        tenant: name.to_owned(),
        record: TenantRecord {
            ord: t.ord,
            owner: Some(m.to.clone()),
            epoch: t.epoch + 1,
            drains,
            moving: None,
        },
        mod_revision: rev,
    })
}

/// Whether `node` may own a tenant with `drains`: none of its drains comes
/// before another node's.
fn may_own(drains: &[Drain], node: &str) -> bool {
    let first_mine = drains.iter().position(|d| d.node == node);
    first_mine.is_none_or(|i| drains[i..].iter().all(|d| d.node == node))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(draining: bool) -> (NodeRecord, i64) {
        (
            NodeRecord {
                addr: "127.0.0.1:1".into(),
                draining,
                config: "h".into(),
                tenants: Vec::new(),
            },
            7,
        )
    }

    fn tenant(ord: u32, owner: Option<&str>, epoch: u64) -> (TenantRecord, i64) {
        (
            TenantRecord {
                ord,
                owner: owner.map(str::to_owned),
                epoch,
                drains: Vec::new(),
                moving: None,
            },
            100 + i64::from(ord),
        )
    }

    #[test]
    fn unowned_tenants_go_to_the_least_loaded_live_nodes() {
        let mut snap = Snapshot::default();
        snap.nodes.insert("n1".into(), node(false));
        snap.nodes.insert("n2".into(), node(false));
        snap.nodes.insert("n3".into(), node(true));
        snap.tenants.insert("a".into(), tenant(1, Some("n1"), 1));
        snap.tenants.insert("b".into(), tenant(2, None, 0));
        snap.tenants.insert("c".into(), tenant(3, None, 0));
        let got = assign(&snap);
        // n2 has none, so b goes there; then both have one and c goes to n1
        // (ties by id); the draining n3 gets nothing.
        assert_eq!(
            got.iter()
                .map(|a| (
                    a.tenant.as_str(),
                    a.record.owner.as_deref(),
                    a.record.epoch,
                    a.mod_revision
                ))
                .collect::<Vec<_>>(),
            [("b", Some("n2"), 1, 102), ("c", Some("n1"), 1, 103)]
        );
        assert!(got.iter().all(|a| a.record.drains.is_empty()));
    }

    #[test]
    fn a_dead_owners_tenant_moves_at_epoch_plus_one_behind_a_drain() {
        let mut snap = Snapshot::default();
        snap.nodes.insert("n2".into(), node(false));
        snap.tenants.insert("a".into(), tenant(1, Some("n1"), 4));
        let got = assign(&snap);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].record,
            TenantRecord {
                ord: 1,
                owner: Some("n2".into()),
                epoch: 5,
                drains: vec![Drain {
                    node: "n1".into(),
                    epoch: 4,
                    lanes: None,
                }],
                moving: None,
            }
        );
        // n2 dies too before n1 drained: the tenant moves on to n3 at 6
        // behind both epochs, n1's 4 first (n2's epoch-5 hooks of a key came
        // after n1's).
        let mut snap = Snapshot::default();
        snap.nodes.insert("n3".into(), node(false));
        snap.tenants
            .insert("a".into(), (got[0].record.clone(), 200));
        let again = assign(&snap);
        assert_eq!(again[0].record.owner.as_deref(), Some("n3"));
        assert_eq!(again[0].record.epoch, 6);
        assert_eq!(
            again[0].record.drains,
            [
                Drain {
                    node: "n1".into(),
                    epoch: 4,
                    lanes: None,
                },
                Drain {
                    node: "n2".into(),
                    epoch: 5,
                    lanes: None,
                }
            ]
        );
    }

    #[test]
    fn a_node_with_an_undrained_epoch_before_another_nodes_is_passed_over() {
        let drain = |node: &str, epoch| Drain {
            node: node.into(),
            epoch,
            lanes: None,
        };
        // n1 owned epoch 1, n2 epoch 2, and n2 died before n1 drained: n1
        // cannot own it (its epoch-1 hooks would go out with its epoch-3
        // ones before n2's epoch-2), n3 can.
        let mut snap = Snapshot::default();
        snap.nodes.insert("n1".into(), node(false));
        snap.nodes.insert("n3".into(), node(false));
        snap.tenants.insert(
            "a".into(),
            (
                TenantRecord {
                    ord: 1,
                    owner: Some("n2".into()),
                    epoch: 2,
                    drains: vec![drain("n1", 1)],
                    moving: None,
                },
                9,
            ),
        );
        snap.tenants.insert("b".into(), tenant(2, Some("n3"), 1));
        snap.tenants.insert("c".into(), tenant(3, Some("n3"), 1));
        let got = assign(&snap);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].record.owner.as_deref(), Some("n3"));
        assert_eq!(got[0].record.drains, [drain("n1", 1), drain("n2", 2)]);
        // With n1 alone alive, nobody may own it: it waits (b and c, whose
        // owner n3 is gone, go to n1).
        snap.nodes.remove("n3");
        let got = assign(&snap);
        assert_eq!(
            got.iter().map(|a| a.tenant.as_str()).collect::<Vec<_>>(),
            ["b", "c"]
        );
        // The old owner itself back under a new lease (a restart): its own
        // epoch needs no barrier on it; n1's earlier one still does.
        let mut snap = Snapshot::default();
        snap.nodes.insert("n2".into(), node(false));
        snap.tenants.insert(
            "a".into(),
            (
                TenantRecord {
                    ord: 1,
                    owner: Some("n2-old".into()),
                    epoch: 2,
                    drains: vec![drain("n1", 1), drain("n2", 0)],
                    moving: None,
                },
                9,
            ),
        );
        // (n2-old stands for a dead owner; n2's own drain is last but one.)
        let got = assign(&snap);
        assert_eq!(got, []);
        let mut snap = Snapshot::default();
        snap.nodes.insert("n2".into(), node(false));
        snap.tenants.insert(
            "a".into(),
            (
                TenantRecord {
                    ord: 1,
                    owner: Some("n2".into()),
                    epoch: 2,
                    drains: vec![drain("n1", 1)],
                    moving: None,
                },
                9,
            ),
        );
        // n2's record is alive again: nothing to do (its lease was renewed
        // in time, or it re-joined before the controller looked).
        assert_eq!(assign(&snap), []);
        snap.nodes.clear();
        snap.nodes.insert("n2".into(), node(false));
        snap.tenants.get_mut("a").expect("a").0.owner = Some("gone".into());
        snap.tenants.get_mut("a").expect("a").0.drains = vec![drain("n1", 1), drain("n2", 2)];
        // n2's drain would come before the dead owner's: n2 may not own.
        assert_eq!(assign(&snap), []);
    }

    #[test]
    fn a_restarted_owner_gets_its_tenant_back_without_a_barrier() {
        let mut snap = Snapshot::default();
        // n1 died and came back under a new lease before the controller
        // moved its tenant; while its record was gone the controller saw
        // the tenant's owner dead. Now n1 is the only node.
        snap.nodes.insert("n1".into(), node(false));
        snap.tenants.insert("a".into(), tenant(1, Some("n0"), 3));
        let got = assign(&snap);
        assert_eq!(
            got[0].record.drains.len(),
            1,
            "n0's epoch is another node's"
        );
        let mut snap = Snapshot::default();
        snap.tenants.insert("a".into(), tenant(1, Some("n1"), 3));
        // n1's record gone (its lease expired), n1 back as the only node:
        // its own epoch 3 needs no barrier.
        let plan_without = assign(&snap);
        assert_eq!(plan_without, [], "no live node");
        snap.nodes.insert("n1".into(), node(false));
        // The tenant says n1 and n1 is alive: nothing to move.
        assert_eq!(assign(&snap), []);
        snap.nodes.clear();
        snap.nodes.insert("n2".into(), node(false));
        let got = assign(&snap);
        assert_eq!(
            got[0].record.drains,
            [Drain {
                node: "n1".into(),
                epoch: 3,
                lanes: None,
            }]
        );
        // n2 dies too and n1 returns: n1's epoch 3 then n2's 4; n1 may
        // not own (its 3 comes before n2's 4).
        let mut snap = Snapshot::default();
        snap.nodes.insert("n1".into(), node(false));
        snap.tenants.insert("a".into(), (got[0].record.clone(), 50));
        assert_eq!(assign(&snap), []);
    }

    #[test]
    fn a_tenant_goes_only_to_a_node_whose_file_has_it() {
        let mut snap = Snapshot::default();
        let mut n1 = node(false);
        n1.0.tenants = vec!["a".into()];
        let mut n2 = node(false);
        n2.0.tenants = vec!["a".into(), "b".into()];
        snap.nodes.insert("n1".into(), n1);
        snap.nodes.insert("n2".into(), n2);
        snap.tenants.insert("a".into(), tenant(1, Some("n2"), 1));
        snap.tenants.insert("b".into(), tenant(2, None, 0));
        // n1 owns nothing, but its file has no b.
        assert_eq!(assign(&snap)[0].record.owner.as_deref(), Some("n2"));
        snap.nodes.remove("n2");
        assert_eq!(
            assign(&snap)
                .iter()
                .map(|a| (a.tenant.as_str(), a.record.owner.as_deref()))
                .collect::<Vec<_>>(),
            [("a", Some("n1"))],
            "b waits for a node whose file has it"
        );
    }

    #[test]
    fn a_node_on_the_clusters_configuration_is_preferred() {
        let mut snap = Snapshot {
            config: Some(ConfigRecord {
                hash: "new".into(),
                parts: BTreeMap::new(),
            }),
            ..Snapshot::default()
        };
        snap.nodes.insert("n1".into(), node(false));
        let mut n2 = node(false);
        n2.0.config = "new".into();
        snap.nodes.insert("n2".into(), n2);
        snap.tenants.insert("a".into(), tenant(1, Some("n2"), 1));
        snap.tenants.insert("b".into(), tenant(2, None, 0));
        // n1 owns nothing, but runs an older file: b goes to n2.
        assert_eq!(assign(&snap)[0].record.owner.as_deref(), Some("n2"));
        // With n2 gone, n1 is all there is.
        snap.nodes.remove("n2");
        assert_eq!(
            assign(&snap)
                .iter()
                .map(|a| a.record.owner.as_deref())
                .collect::<Vec<_>>(),
            [Some("n1"), Some("n1")]
        );
    }

    #[test]
    fn nothing_moves_while_owners_live_or_no_node_can_take() {
        let mut snap = Snapshot::default();
        snap.nodes.insert("n1".into(), node(false));
        snap.tenants.insert("a".into(), tenant(1, Some("n1"), 1));
        assert_eq!(assign(&snap), []);
        let mut snap = Snapshot::default();
        snap.nodes.insert("n1".into(), node(true));
        snap.tenants.insert("a".into(), tenant(1, None, 0));
        assert_eq!(assign(&snap), []);
    }

    #[test]
    fn config_differences_name_each_part() {
        let a = ConfigRecord {
            hash: "x".into(),
            parts: [
                ("retry".into(), "1".into()),
                ("sources.s".into(), "2".into()),
            ]
            .into(),
        };
        let b = ConfigRecord {
            hash: "y".into(),
            parts: [
                ("retry".into(), "1".into()),
                ("sources.s".into(), "3".into()),
                ("tenants.t".into(), "4".into()),
            ]
            .into(),
        };
        assert_eq!(a.differences(&b), ["sources.s", "tenants.t"]);
    }

    #[test]
    fn a_fenced_move_flips_behind_a_drain_of_the_lanes_the_owner_listed() {
        let lanes = vec!["aa".to_owned(), "bb".to_owned()];
        let mut snap = Snapshot::default();
        snap.nodes.insert("n1".into(), node(false));
        snap.nodes.insert("n2".into(), node(false));
        let (mut t, rev) = tenant(1, Some("n1"), 3);
        t.moving = Some(Move {
            to: "n2".into(),
            fenced: false,
            lanes: None,
        });
        snap.tenants.insert("a".into(), (t.clone(), rev));
        // Not fenced yet: the controller waits.
        assert_eq!(assign(&snap), []);
        t.moving = Some(Move {
            to: "n2".into(),
            fenced: true,
            lanes: Some(lanes.clone()),
        });
        snap.tenants.insert("a".into(), (t, rev));
        let got = assign(&snap);
        assert_eq!(got.len(), 1);
        let flipped = &got[0].record;
        assert_eq!((flipped.owner.as_deref(), flipped.epoch), (Some("n2"), 4));
        assert_eq!(
            flipped.drains,
            [Drain {
                node: "n1".into(),
                epoch: 3,
                lanes: Some(lanes.clone()),
            }]
        );
        assert_eq!(
            flipped.barrier("n2"),
            Barrier::Lanes(lanes.iter().cloned().collect())
        );
    }

    #[test]
    fn a_barrier_is_every_lane_when_a_failover_drain_is_left_and_nothing_for_its_own_drains() {
        let drain = |node: &str, epoch, lanes: Option<&[&str]>| Drain {
            node: node.into(),
            epoch,
            lanes: lanes.map(|l| l.iter().map(|s| (*s).to_owned()).collect()),
        };
        let (mut t, _) = tenant(1, Some("n3"), 5);
        t.drains = vec![
            drain("n1", 3, Some(&["aa"])),
            drain("n2", 4, Some(&["bb", "aa"])),
        ];
        assert_eq!(
            t.barrier("n3"),
            Barrier::Lanes(["aa".to_owned(), "bb".to_owned()].into_iter().collect())
        );
        // n2's own drain holds nothing back on n2.
        assert_eq!(
            t.barrier("n2"),
            Barrier::Lanes(["aa".to_owned()].into_iter().collect())
        );
        t.drains.push(drain("n4", 4, None));
        assert_eq!(t.barrier("n3"), Barrier::All);
        t.drains = vec![drain("n3", 4, None)];
        assert_eq!(t.barrier("n3"), Barrier::Open);
        t.drains.clear();
        assert_eq!(t.barrier("n3"), Barrier::Open);
        // A drain without `lanes` reads as every lane (a record written
        // before lanes were listed).
        let old: Drain = serde_json::from_str(r#"{"node":"n1","epoch":2}"#).expect("decodes");
        assert_eq!(old.lanes, None);
    }

    #[test]
    fn among_nodes_with_as_many_tenants_the_one_with_fewer_pending_bytes_is_given_the_tenant() {
        let mut snap = Snapshot::default();
        snap.nodes.insert("n1".into(), node(false));
        snap.nodes.insert("n2".into(), node(false));
        snap.tenants.insert("a".into(), tenant(1, Some("n1"), 1));
        snap.tenants.insert("b".into(), tenant(2, Some("n2"), 1));
        snap.tenants.insert("c".into(), tenant(3, None, 0));
        let report = |node: &str, bytes| PendingReport {
            node: node.into(),
            epoch: 1,
            pending: 1,
            bytes,
            at_ms: 0,
            stale: false,
        };
        snap.reports
            .entry("a".into())
            .or_default()
            .insert("n1".into(), report("n1", 5_000_000));
        snap.reports
            .entry("b".into())
            .or_default()
            .insert("n2".into(), report("n2", 10));
        let got = assign(&snap);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].record.owner.as_deref(), Some("n2"));
        // The count comes first: n2 with two tenants loses to n1 with one,
        // whatever the bytes.
        snap.tenants.insert("d".into(), tenant(4, Some("n2"), 1));
        assert_eq!(assign(&snap)[0].record.owner.as_deref(), Some("n1"));
    }
}
