//! Cluster mode (docs/design.md section 11; README, "Running a cluster"):
//! this node's membership in the catalog in etcd, its lease and the deadline
//! it fences itself with, its view of who owns each tenant, and the
//! controller's work when it is elected.
//!
//! - **The lease.** Renewed every third of its TTL. The deadline is the time
//!   a keep-alive was *sent* plus the TTL etcd answered minus a margin, by
//!   this process's monotonic clock: etcd counts the TTL from when it
//!   *received* the keep-alive, so the deadline passes before etcd can expire
//!   the lease. Past it the node acknowledges and claims nothing for the
//!   tenants it owns until a renewal and a read of the catalog under it. A
//!   lease that expired anyway (etcd unreachable past the TTL) is granted
//!   again and the node record put back; by then the controller may have
//!   moved the tenants, which the next read shows.
//! - **The view.** The whole catalog is read every [`POLL`]; each read is
//!   tagged with the lease it was read under, and only a read under the
//!   current lease can make this node the owner of anything
//!   ([`Member::fresh`]).
//! - **The controller.** Every node campaigns every [`CONTROL`]; the one
//!   holding the key assigns each tenant that has no live owner
//!   ([`ankusa_catalog::cluster::assign`]), one transaction per tenant
//!   compared on its record's revision.
//! - **Drains.** A node that is the first of a tenant's drains and no longer
//!   its owner delivers what it holds of the tenant (the pipeline claims all
//!   of it: [`Member::claims`]) and, once the tenant has no pending row here,
//!   removes its drains from the record: the owner's barrier lifts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ankusa_catalog::Etcd;
use ankusa_catalog::cluster::{
    Barrier, Catalog, ConfigRecord, JoinError, NodeRecord, Numbered, Snapshot, TenantRecord, assign,
};
use ankusa_edge::server::owners::{Admitted, Answer, Forward, Owners, Pending, Placement};
use ankusa_keys::{LaneId, TenantOrd};
use ankusa_pipeline::TenantClaims;
use anyhow::Context as _;
use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// How often the catalog is read.
pub const POLL: Duration = Duration::from_millis(200);
/// How often every node campaigns for controller, and the controller
/// assigns.
pub const CONTROL: Duration = Duration::from_millis(500);
/// How often a node says what it holds of its tenants (when it changed).
pub const REPORT: Duration = Duration::from_secs(1);
/// The most one call to etcd may take (each endpoint in turn).
const ETCD_CALL: Duration = Duration::from_secs(1);

/// The catalog's record of a configuration file: each shared part's
/// SHA-256 ([`ankusa_config::shared_sections`]) and the SHA-256 of them all.
///
/// # Errors
/// A file that does not parse.
pub fn config_record(text: &[u8]) -> anyhow::Result<ConfigRecord> {
    let text = std::str::from_utf8(text).context("the configuration file is not UTF-8")?;
    let sections = ankusa_config::shared_sections(text)?;
    let mut all = Sha256::new();
    let mut parts = BTreeMap::new();
    for (name, canonical) in sections {
        let digest = ankusa_engine::hex(&Sha256::digest(canonical.as_bytes()));
        all.update(format!("{name}={digest}\n").as_bytes());
        parts.insert(name, digest);
    }
    Ok(ConfigRecord {
        hash: ankusa_engine::hex(&all.finalize()),
        parts,
    })
}

/// The cluster's numbers of a configuration's names: tenant ordinals and
/// source ids, by name ([`Member::number`]).
pub type Numbers = (BTreeMap<String, u32>, BTreeMap<String, u32>);

/// What the cluster runtime counts (`/metrics`: `ankusa_cluster_*`).
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Tenants this node gained or lost.
    pub ownership_changes: AtomicU64,
    /// Keep-alives answered, and their total time in microseconds.
    pub renewals: AtomicU64,
    /// The sum of the keep-alives' round trips, microseconds.
    pub renew_us: AtomicU64,
    /// The last keep-alive's round trip, microseconds.
    pub renew_last_us: AtomicU64,
    /// Keep-alives that failed (etcd unreachable) or found the lease gone.
    pub renew_failures: AtomicU64,
    /// Drains this node finished (an earlier epoch of a tenant delivered).
    pub drains: AtomicU64,
    /// Hooks of this node's remains handed to their tenant's owner.
    pub handed_over: AtomicU64,
    /// The ordered rows this node holds behind an epoch barrier (a gauge,
    /// read at each report round).
    pub barrier_held: AtomicU64,
}

/// The catalog as last read, and the lease it was read under.
#[derive(Debug, Default)]
struct View {
    snap: Snapshot,
    lease: i64,
    /// Per tenant this node owns behind a planned move's barrier, the lanes
    /// held back ([`Barrier::Lanes`], parsed once per read).
    held_lanes: HashMap<String, Arc<BTreeSet<LaneId>>>,
}

/// What the cluster runtime reads and writes of this node's store
/// (`serve` implements it over the relay's `Kv`).
pub trait NodeStore: Send + Sync {
    /// The tenant's pending rows here (`None`: the store cannot be read).
    fn pending(&self, tenant: TenantOrd) -> Option<u64>;
    /// Their bytes.
    fn pending_bytes(&self, tenant: TenantOrd) -> Option<u64>;
    /// The ordered lanes (hex lane ids) holding rows of the tenant here, for
    /// a planned move's fence; `None` past
    /// [`ankusa_catalog::cluster::MAX_DRAIN_LANES`] or when the store cannot
    /// be read (the drain then holds every ordered lane on the target).
    fn busy_lanes(&self, tenant: TenantOrd) -> Option<Vec<String>>;
    /// The ordered rows (lane heads and members) of the tenant held here
    /// behind an epoch barrier: of every lane (`None`) or of the listed
    /// ones.
    fn held_rows(&self, tenant: TenantOrd, lanes: Option<&BTreeSet<LaneId>>) -> u64;
    /// Whether the store holds anything a hand-over carries of the tenant.
    ///
    /// # Errors
    /// The store's, as text.
    fn holds_remains(&self, tenant: TenantOrd) -> Result<bool, String>;
    /// The next page of the tenant's remains from hook `from`, as a dump
    /// (`ankusa_queue::handover::handover_page`), with the page itself.
    ///
    /// # Errors
    /// The store's, or a hook with a row still to deliver, as text.
    fn handover_page(
        &self,
        tenant: TenantOrd,
        from: ankusa_keys::Seq,
    ) -> Result<(Vec<u8>, ankusa_queue::handover::HandoverPage), String>;
    /// Deletes a page the owner committed (`ankusa_queue::handover::handed_over`),
    /// `Sync`.
    ///
    /// # Errors
    /// The store's, as text.
    fn handed_over(
        &self,
        page: &ankusa_queue::handover::HandoverPage,
        tenant: TenantOrd,
    ) -> Result<(), String>;
}

/// How long a tenant's hand-over waits after the owner refused a page
/// (a sink entry its configuration lacks: a reload may fix it).
const HANDOVER_BACKOFF: Duration = Duration::from_secs(30);

/// How long a hand-over page may take to be answered (read, committed
/// `Sync`, answered) before the round gives up on it; the owner may have
/// committed it, so it is sent again (at-least-once).
const HANDOVER_PAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// The most pages one round of the hand-over task sends (it goes on at the
/// next round).
const HANDOVER_PAGES_PER_ROUND: usize = 8;

/// This node in the cluster.
pub struct Member {
    id: String,
    record: Mutex<NodeRecord>,
    catalog: Catalog,
    ttl: Duration,
    hold: Duration,
    lease: AtomicI64,
    /// The lease's deadline by this process's clock; `None` when there is no
    /// fresh lease.
    deadline: Mutex<Option<Instant>>,
    view: ArcSwap<View>,
    /// Bumped after every read of the catalog (held requests look again).
    changed: watch::Sender<u64>,
    /// Tenant names by ordinal, for the pipeline's fencing.
    names: ArcSwap<BTreeMap<TenantOrd, String>>,
    forwarder: reqwest::Client,
    stopping: AtomicBool,
    /// Hooks admitted for commit and not answered yet, by tenant.
    inflight: Mutex<BTreeMap<String, usize>>,
    /// Tenants whose hand-over waits after a refused page, until when.
    handover_backoff: Mutex<HashMap<String, Instant>>,
    /// What the runtime counts.
    pub stats: ClusterStats,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The margin the deadline keeps below the TTL: a sixth of it, at least
/// 300 ms (the two clocks' rates may differ that much over one TTL).
fn margin(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_millis(300))
}

impl Member {
    /// Joins the cluster of `cluster`: a lease, this node's record under it
    /// (waiting up to the TTL and 2 s for a record of its id left by an
    /// earlier run to expire), and the configuration compared with the
    /// cluster's. The lease is renewed from here on.
    ///
    /// # Errors
    /// etcd unreachable, another live node with this id, a configuration
    /// that differs (naming the parts).
    pub async fn join(
        cfg: &ankusa_config::Config,
        cluster: &ankusa_config::Cluster,
        config: &ConfigRecord,
    ) -> anyhow::Result<Arc<Member>> {
        let etcd = Etcd::new(&cluster.etcd, ETCD_CALL)?;
        let catalog = Catalog::new(etcd, &cluster.name);
        catalog.check_config(config).await.map_err(|e| match e {
            JoinError::Catalog(c) => anyhow::anyhow!(
                "cluster: cannot reach etcd at {}: {c}",
                cluster.etcd.join(", ")
            ),
            other => anyhow::anyhow!("cluster: {other}"),
        })?;
        let ttl = Duration::from_millis(cluster.lease_ttl_ms);
        let record = NodeRecord {
            addr: cluster.advertise.clone(),
            draining: false,
            config: config.hash.clone(),
            tenants: cfg.tenants.iter().map(|t| t.name.clone()).collect(),
        };
        let sent = Instant::now();
        let lease = catalog
            .etcd()
            .grant(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX))
            .await
            .context("cluster: granting this node's lease in etcd")?;
        let member = Arc::new(Member {
            id: cluster.node_id.clone(),
            record: Mutex::new(record.clone()),
            catalog,
            ttl,
            hold: Duration::from_millis(cluster.hold_ms),
            lease: AtomicI64::new(lease.id),
            deadline: Mutex::new(Some(sent + granted(lease.ttl_s) - margin(ttl))),
            view: ArcSwap::default(),
            changed: watch::channel(0).0,
            names: ArcSwap::default(),
            forwarder: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_millis(cluster.hold_ms))
                .build()
                .context("cluster: the forwarding HTTP client")?,
            stopping: AtomicBool::new(false),
            inflight: Mutex::new(BTreeMap::new()),
            handover_backoff: Mutex::new(HashMap::new()),
            stats: ClusterStats::default(),
        });
        // The lease is renewed from now on: the rest of the start (the
        // store's checks, the sinks' connections) may take longer than it.
        tokio::spawn(Arc::clone(&member).renew());
        let until = Instant::now() + ttl + Duration::from_secs(2);
        let mut waited = false;
        loop {
            let lease = member.lease.load(Ordering::SeqCst);
            match member.catalog.join(&member.id, &record, lease).await {
                Ok(()) => break,
                Err(JoinError::NodeIdInUse { addr, .. }) if Instant::now() < until => {
                    if !waited {
                        info!(%addr, "cluster: a live record has this node's id (an earlier run's, whose lease has not expired yet?): waiting up to the lease TTL and 2 s");
                        waited = true;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => {
                    member.stopping.store(true, Ordering::SeqCst);
                    let _ = member.catalog.etcd().revoke(lease).await;
                    return Err(anyhow::anyhow!("cluster: {e}"));
                }
            }
        }
        member
            .read()
            .await
            .context("cluster: reading the catalog")?;
        info!(
            node_id = %member.id,
            advertise = %cluster.advertise,
            lease_ttl_ms = cluster.lease_ttl_ms,
            cluster = %cluster.name,
            "joined the cluster"
        );
        Ok(member)
    }

    /// The cluster's numbers for the configuration's tenants and sources,
    /// new names numbered; `local` is what this node's store numbers.
    ///
    /// # Errors
    /// A number of this store's that is another name's in the cluster, or
    /// a name numbered otherwise there (naming both).
    pub async fn number(
        &self,
        cfg: &ankusa_config::Config,
        local: &ankusa_queue::Registry,
    ) -> anyhow::Result<Numbers> {
        let tenants: Vec<String> = cfg.tenants.iter().map(|t| t.name.clone()).collect();
        let sources: Vec<String> = cfg.sources.iter().map(|s| s.name.clone()).collect();
        let local_tenants = local
            .tenants
            .iter()
            .map(|(n, o)| (n.clone(), o.0))
            .collect();
        let local_sources = local
            .sources
            .iter()
            .map(|(n, s)| (n.clone(), s.0))
            .collect();
        let t = self
            .catalog
            .number(Numbered::Tenant, &tenants, &local_tenants)
            .await
            .map_err(|e| anyhow::anyhow!("cluster: {e}"))?;
        let s = self
            .catalog
            .number(Numbered::Source, &sources, &local_sources)
            .await
            .map_err(|e| anyhow::anyhow!("cluster: {e}"))?;
        Ok((t, s))
    }

    /// After a reload applied the configuration `record`: this node's record
    /// says it runs it, and the cluster's becomes it when it differs (the
    /// first node to reload a new file validated it and publishes it; the
    /// others follow with the same file, and `ankusa cluster status` shows
    /// the nodes still on another). A failure is logged: the reload stands.
    pub async fn follow(&self, cfg: &ankusa_config::Config, record: &ConfigRecord) {
        let node = {
            let mut r = self
                .record
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            r.config.clone_from(&record.hash);
            r.tenants = cfg.tenants.iter().map(|t| t.name.clone()).collect();
            r.clone()
        };
        let lease = self.lease.load(Ordering::SeqCst);
        if let Err(e) = self.catalog.update_node(&self.id, &node, lease).await {
            warn!(error = %e, "cluster: cannot record this node's new configuration in the catalog");
        }
        let current = self.view.load().snap.config.clone();
        if current.as_ref().is_none_or(|c| c.hash != record.hash) {
            match self.catalog.publish_config(record).await {
                Ok(()) => info!(
                    hash = %record.hash,
                    changed = ?current.map(|c| c.differences(record)).unwrap_or_default(),
                    "cluster: published the reloaded configuration; the other nodes follow when they reload the same file"
                ),
                Err(e) => warn!(error = %e, "cluster: cannot publish the reloaded configuration"),
            }
        }
    }

    /// The tenants of this node's store by ordinal (the pipeline's fencing
    /// asks by ordinal).
    pub fn set_names(&self, registry: &ankusa_queue::Registry) {
        self.names.store(Arc::new(
            registry
                .tenants
                .iter()
                .map(|(n, o)| (*o, n.clone()))
                .collect(),
        ));
    }

    /// Whether an operator drained this node (`ankusa cluster drain`):
    /// `/readyz` then answers 503, so a load balancer sends it nothing.
    pub fn drained(&self) -> bool {
        self.view.load().snap.draining.contains(&self.id)
    }

    /// This node's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the lease is within its deadline.
    pub fn lease_fresh(&self) -> bool {
        self.deadline
            .lock()
            .map(|d| d.is_some_and(|d| Instant::now() < d))
            .unwrap_or(false)
    }

    /// Whether this node owns `tenant` now: a fresh lease, and a view read
    /// under it that names this node.
    fn owns(&self, tenant: &str) -> bool {
        let view = self.view.load();
        view.lease == self.lease.load(Ordering::SeqCst)
            && view
                .snap
                .tenants
                .get(tenant)
                .is_some_and(|(t, _)| t.owner.as_deref() == Some(self.id.as_str()))
            && self.lease_fresh()
    }

    /// Whether this node may acknowledge a hook of `tenant` now: it owns it
    /// ([`Member::owns`]) and the tenant is not being moved (a planned move
    /// fences it first).
    pub fn fresh(&self, tenant: &str) -> bool {
        self.owns(tenant)
            && self
                .view
                .load()
                .snap
                .tenants
                .get(tenant)
                .is_some_and(|(t, _)| t.moving.is_none())
    }

    /// Which of `tenant`'s rows this node's pipeline may claim (docs/design.md
    /// section 11): all of a tenant it owns with no earlier epoch of another
    /// node undrained; behind such a barrier, all but the held lanes' rows
    /// when every drain left is a planned move's that listed its lanes, its
    /// unordered rows only otherwise; all of
    /// a tenant whose first drain is this node's (it delivers its earlier
    /// epoch, owner or not, fresh or not: nothing new joins it); nothing
    /// otherwise.
    pub fn claims(&self, tenant: TenantOrd) -> TenantClaims {
        let names = self.names.load();
        let Some(name) = names.get(&tenant) else {
            return TenantClaims::Nothing;
        };
        let view = self.view.load();
        let Some((t, _)) = view.snap.tenants.get(name) else {
            return TenantClaims::Nothing;
        };
        let me = self.id.as_str();
        if t.owner.as_deref() == Some(me) {
            // A tenant being moved off this node is still delivered here:
            // what it holds goes out in place.
            if !self.owns(name) {
                return TenantClaims::Nothing;
            }
            return match t.barrier(me) {
                Barrier::Open => TenantClaims::All,
                Barrier::All => TenantClaims::Unordered,
                // A lane id that does not parse is left out of the set, so
                // hold everything rather than let its key through.
                Barrier::Lanes(l) => match view.held_lanes.get(name) {
                    Some(held) if held.len() == l.len() => TenantClaims::AllBut(Arc::clone(held)),
                    _ => TenantClaims::Unordered,
                },
            };
        }
        if t.drains.first().is_some_and(|d| d.node == me) {
            return TenantClaims::All;
        }
        TenantClaims::Nothing
    }

    /// Renews the lease every third of its TTL until the node stops.
    async fn renew(self: Arc<Self>) {
        let every = self.ttl / 3;
        let mut failing = false;
        while !self.stopping.load(Ordering::SeqCst) {
            tokio::time::sleep(if failing {
                Duration::from_millis(250)
            } else {
                every
            })
            .await;
            if self.stopping.load(Ordering::SeqCst) {
                break;
            }
            let lease = self.lease.load(Ordering::SeqCst);
            let sent = Instant::now();
            match self.catalog.etcd().keep_alive(lease).await {
                Ok(Some(ttl_s)) => {
                    let took = sent.elapsed();
                    let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
                    self.stats.renewals.fetch_add(1, Ordering::Relaxed);
                    self.stats.renew_us.fetch_add(us, Ordering::Relaxed);
                    self.stats.renew_last_us.store(us, Ordering::Relaxed);
                    if let Ok(mut d) = self.deadline.lock() {
                        *d = Some(sent + granted(ttl_s) - margin(self.ttl));
                    }
                    if failing {
                        info!("cluster: lease renewed again");
                    }
                    failing = false;
                }
                Ok(None) => {
                    self.stats.renew_failures.fetch_add(1, Ordering::Relaxed);
                    warn!(
                        "cluster: this node's lease expired in etcd; its tenants may have moved. Joining again"
                    );
                    if let Ok(mut d) = self.deadline.lock() {
                        *d = None;
                    }
                    failing = !self.rejoin().await;
                }
                Err(e) => {
                    self.stats.renew_failures.fetch_add(1, Ordering::Relaxed);
                    if !failing {
                        warn!(error = %e, "cluster: cannot renew the lease; this node stops acknowledging its tenants' hooks at its deadline");
                    }
                    failing = true;
                }
            }
        }
    }

    /// A new lease and this node's record under it, after the old lease
    /// expired. `false` when etcd did not allow it (tried again later).
    async fn rejoin(&self) -> bool {
        let sent = Instant::now();
        let lease = match self
            .catalog
            .etcd()
            .grant(i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX))
            .await
        {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "cluster: cannot grant a new lease");
                return false;
            }
        };
        let record = self
            .record
            .lock()
            .map(|r| r.clone())
            .unwrap_or_else(|e| e.into_inner().clone());
        match self.catalog.join(&self.id, &record, lease.id).await {
            Ok(()) => {
                self.lease.store(lease.id, Ordering::SeqCst);
                if let Ok(mut d) = self.deadline.lock() {
                    *d = Some(sent + granted(lease.ttl_s) - margin(self.ttl));
                }
                info!("cluster: joined again under a new lease");
                true
            }
            Err(e) => {
                warn!(error = %e, "cluster: cannot put this node's record back");
                let _ = self.catalog.etcd().revoke(lease.id).await;
                false
            }
        }
    }

    /// Reads the catalog and makes it the view (tagged with the lease it was
    /// read under).
    async fn read(&self) -> Result<(), ankusa_catalog::CatalogError> {
        let lease = self.lease.load(Ordering::SeqCst);
        let snap = self.catalog.snapshot().await?;
        let old = self.view.load();
        let me = self.id.as_str();
        for (name, (t, _)) in &snap.tenants {
            let was = old
                .snap
                .tenants
                .get(name)
                .and_then(|(o, _)| o.owner.as_deref())
                == Some(me);
            let is = t.owner.as_deref() == Some(me);
            if was != is {
                self.stats.ownership_changes.fetch_add(1, Ordering::Relaxed);
                if is {
                    info!(tenant = %name, epoch = t.epoch, drains = t.drains.len(), "cluster: this node owns the tenant now");
                } else {
                    info!(tenant = %name, owner = ?t.owner, epoch = t.epoch, "cluster: the tenant moved to another node");
                }
            }
        }
        let held_lanes = snap
            .tenants
            .iter()
            .filter(|(_, (t, _))| t.owner.as_deref() == Some(me))
            .filter_map(|(name, (t, _))| match t.barrier(me) {
                Barrier::Lanes(l) => Some((
                    name.clone(),
                    Arc::new(l.iter().filter_map(|h| LaneId::from_hex(h)).collect()),
                )),
                Barrier::Open | Barrier::All => None,
            })
            .collect();
        self.view.store(Arc::new(View {
            snap,
            lease,
            held_lanes,
        }));
        self.changed.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Reads the catalog every [`POLL`], wakes the pipeline, and finishes
    /// this node's drains; campaigns for controller every [`CONTROL`] and
    /// assigns when elected. Ends when the node stops.
    pub async fn run(
        self: Arc<Self>,
        wake: Box<dyn Fn() + Send + Sync>,
        store: Arc<dyn NodeStore>,
    ) {
        // The hand-over runs on its own task: a page the owner is slow to
        // answer (paused, overloaded) must not hold back the catalog reads,
        // the fencing and the controller of this loop.
        tokio::spawn(Arc::clone(&self).hand_overs(Arc::clone(&store)));
        let pending = |t: TenantOrd| store.pending(t);
        let lanes = |t: TenantOrd| store.busy_lanes(t);
        let mut last_control = Instant::now();
        let mut last_report = Instant::now();
        let mut reported: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut controller = false;
        let mut unreachable = false;
        while !self.stopping.load(Ordering::SeqCst) {
            match self.read().await {
                Ok(()) => {
                    if unreachable {
                        info!("cluster: the catalog answers again");
                    }
                    unreachable = false;
                    wake();
                    self.fence_moves(&lanes).await;
                    self.finish_drains(&pending).await;
                }
                Err(e) => {
                    if !unreachable {
                        warn!(error = %e, "cluster: cannot read the catalog");
                    }
                    unreachable = true;
                }
            }
            if last_control.elapsed() >= CONTROL {
                last_control = Instant::now();
                controller = self.control(controller).await;
            }
            if last_report.elapsed() >= REPORT {
                last_report = Instant::now();
                self.report(&*store, &mut reported).await;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Confirms the planned moves of this node's tenants: the view that
    /// shows the move is in place (so no hook of the tenant is acknowledged
    /// from here on: [`Member::fresh`]); the controller may flip. With the
    /// fence go the ordered lanes in which this node still holds rows of the
    /// tenant (`lanes`: hex lane ids, `None` for too many to list): the only
    /// lanes whose new hooks wait on the target. No hook joins a lane here
    /// after the fence, so the list can only shrink as this node drains.
    async fn fence_moves(&self, lanes: &(dyn Fn(TenantOrd) -> Option<Vec<String>> + Send + Sync)) {
        let view = self.view.load_full();
        let names = self.names.load();
        let me = self.id.as_str();
        for (name, (t, rev)) in &view.snap.tenants {
            let Some(m) = &t.moving else { continue };
            if m.fenced || t.owner.as_deref() != Some(me) {
                continue;
            }
            // The view that shows the move is in place (`read` stored it
            // before this): a hook admitted from now on is refused, and the
            // ones admitted before it are answered first.
            let busy = self
                .inflight
                .lock()
                .map(|i| i.get(name).copied().unwrap_or(0))
                .unwrap_or(1);
            if busy > 0 {
                debug!(tenant = %name, busy, "cluster: a planned move waits for hooks being committed");
                continue;
            }
            let held = names
                .iter()
                .find(|(_, n)| *n == name)
                .and_then(|(ord, _)| lanes(*ord));
            let listed = held.as_ref().map(Vec::len);
            let mut record = t.clone();
            record.moving = Some(ankusa_catalog::cluster::Move {
                to: m.to.clone(),
                fenced: true,
                lanes: held,
            });
            match self.catalog.set_tenant(name, &record, *rev).await {
                Ok(true) => {
                    info!(tenant = %name, to = %m.to, lanes_held = ?listed, "cluster: fenced for a planned move: no more hooks of the tenant here; the target holds back only the lanes listed (every ordered lane when none are)")
                }
                Ok(false) => {
                    debug!(tenant = %name, "cluster: the tenant changed first; fencing at the next read")
                }
                Err(e) => {
                    debug!(tenant = %name, error = %e, "cluster: cannot confirm the fence yet")
                }
            }
        }
    }

    /// Says in the catalog what this node holds of each tenant it owns or
    /// drains ([`ankusa_catalog::cluster::PendingReport`]) when it changed
    /// since the last report: `ankusa cluster status` shows it, and a forfeit
    /// of this node's epoch says what it gives up.
    async fn report(&self, store: &dyn NodeStore, reported: &mut BTreeMap<String, (u64, u64)>) {
        let view = self.view.load_full();
        let names = self.names.load();
        let me = self.id.as_str();
        // The barrier-held gauge: what this node's ordered lanes hold back
        // of the tenants it owns behind another node's undrained epoch.
        let mut held = 0u64;
        for (ord, name) in names.iter() {
            let Some((t, _)) = view.snap.tenants.get(name) else {
                continue;
            };
            if t.owner.as_deref() != Some(me) {
                continue;
            }
            held += match t.barrier(me) {
                Barrier::Open => 0,
                Barrier::All => store.held_rows(*ord, None),
                Barrier::Lanes(_) => match view.held_lanes.get(name) {
                    Some(l) => store.held_rows(*ord, Some(l)),
                    None => store.held_rows(*ord, None),
                },
            };
        }
        self.stats.barrier_held.store(held, Ordering::Relaxed);
        for (ord, name) in names.iter() {
            let Some((t, _)) = view.snap.tenants.get(name) else {
                continue;
            };
            let Some(n) = store.pending(*ord) else {
                continue;
            };
            // Rows of a tenant this node neither owns nor drains: an epoch
            // forfeited while it was away. Never delivered from here.
            let (epoch, stale) = if t.owner.as_deref() == Some(me) {
                (t.epoch, false)
            } else if let Some(d) = t.drains.iter().find(|d| d.node == me) {
                (d.epoch, false)
            } else if n > 0 {
                (0, true)
            } else if view.snap.stale_rows(name, me) > 0 {
                (0, false)
            } else {
                continue;
            };
            if reported.get(name) == Some(&(epoch, n)) {
                continue;
            }
            if stale {
                warn!(tenant = %name, rows = n, "cluster: this node holds rows of the tenant from an epoch that was forfeited while it was away: they are not delivered, and the node cannot own the tenant again until they are gone (ankusa purge-tenant on this node)");
            }
            let report = ankusa_catalog::cluster::PendingReport {
                node: self.id.clone(),
                epoch,
                pending: n,
                bytes: store.pending_bytes(*ord).unwrap_or(0),
                at_ms: crate::serve::now_ms(),
                stale,
            };
            if self.catalog.report(name, &report).await.is_ok() {
                reported.insert(name.clone(), (epoch, n));
            }
        }
    }

    /// Runs [`Member::hand_over`] every [`REPORT`] until the node stops.
    async fn hand_overs(self: Arc<Self>, store: Arc<dyn NodeStore>) {
        while !self.stopping.load(Ordering::SeqCst) {
            tokio::time::sleep(REPORT).await;
            self.hand_over(&*store).await;
        }
    }

    /// Hands this node's remains of each tenant it neither owns nor drains
    /// (dead letters, quarantined hooks, the archive, dedupe records) to the
    /// tenant's live owner, then deletes them here (docs/design.md section
    /// 11, "Hand-over"): an offer with a fresh token under this node's
    /// lease, then pages of the tenant's remains in the dump format, each
    /// deleted here once the owner answered that it committed it. At most
    /// [`HANDOVER_PAGES_PER_ROUND`] pages per round; a refused page stops
    /// the tenant's hand-over until the next round (an owner that has not
    /// read the offer yet answers 403).
    async fn hand_over(&self, store: &dyn NodeStore) {
        let view = self.view.load_full();
        let names = self.names.load_full();
        let me = self.id.as_str();
        let mut pages = 0usize;
        for (ord, name) in names.iter() {
            let Some((t, _)) = view.snap.tenants.get(name) else {
                continue;
            };
            let offered = view.snap.handovers.get(name).and_then(|h| h.get(me));
            // Only an epoch this node has finished: it neither owns the
            // tenant nor has a drain of it, and holds no row to deliver.
            let owner = t.owner.as_deref().filter(|o| *o != me);
            let owner_addr = owner
                .and_then(|o| view.snap.nodes.get(o))
                .map(|(n, _)| n.addr.clone());
            let done_here = t.owner.as_deref() != Some(me)
                && !t.drains.iter().any(|d| d.node == me)
                && store.pending(*ord) == Some(0);
            let remains = done_here && store.holds_remains(*ord).unwrap_or(false);
            if !remains {
                if offered.is_some() {
                    let _ = self.catalog.withdraw_handover(name, me).await;
                }
                continue;
            }
            if self
                .handover_backoff
                .lock()
                .ok()
                .and_then(|b| b.get(name).copied())
                .is_some_and(|until| Instant::now() < until)
            {
                continue;
            }
            let (Some(owner), Some(addr)) = (owner, owner_addr) else {
                continue;
            };
            let offer = match offered {
                Some(o) if o.to == owner && o.epoch == t.epoch => o.clone(),
                _ => {
                    let token: [u8; 32] = rand::random();
                    let offer = ankusa_catalog::cluster::HandoverOffer {
                        to: owner.to_owned(),
                        epoch: t.epoch,
                        token: ankusa_engine::hex(&token),
                    };
                    let lease = self.lease.load(Ordering::SeqCst);
                    if let Err(e) = self.catalog.offer_handover(name, me, &offer, lease).await {
                        debug!(tenant = %name, error = %e, "cluster: cannot offer the hand-over yet");
                        continue;
                    }
                    info!(tenant = %name, to = %owner, "cluster: offering this node's remains of the tenant (dead letters, quarantine, archive, dedupe records) to its owner");
                    // The owner takes pages once its view shows the offer.
                    continue;
                }
            };
            let mut from = ankusa_keys::Seq(0);
            let mut sent = 0u64;
            loop {
                if pages >= HANDOVER_PAGES_PER_ROUND || self.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let (dump, page) = match store.handover_page(*ord, from) {
                    Ok(p) => p,
                    Err(e) => {
                        warn!(tenant = %name, error = %e, "cluster: cannot read the tenant's remains for the hand-over; trying again in {} s", HANDOVER_BACKOFF.as_secs());
                        if let Ok(mut b) = self.handover_backoff.lock() {
                            b.insert(name.clone(), Instant::now() + HANDOVER_BACKOFF);
                        }
                        break;
                    }
                };
                if page.seqs.is_empty() && page.dedupe.is_empty() {
                    break;
                }
                pages += 1;
                let answer = self
                    .forwarder
                    .post(format!(
                        "http://{addr}{}{name}",
                        ankusa_edge::server::handover::HANDOVER_PATH
                    ))
                    .timeout(HANDOVER_PAGE_TIMEOUT)
                    .header(ankusa_edge::server::handover::HANDOVER_FROM, me)
                    .bearer_auth(&offer.token)
                    .header("content-type", "application/octet-stream")
                    .body(dump)
                    .send()
                    .await;
                match answer {
                    Ok(r) if r.status().is_success() => {}
                    Ok(r) => {
                        let status = r.status();
                        let text = r.text().await.unwrap_or_default();
                        if status == reqwest::StatusCode::FORBIDDEN {
                            debug!(tenant = %name, %text, "cluster: the owner has not seen the hand-over offer yet");
                        } else {
                            warn!(tenant = %name, to = %owner, %status, %text, "cluster: the owner refused a hand-over page; this node keeps it and tries again in {} s", HANDOVER_BACKOFF.as_secs());
                            if let Ok(mut b) = self.handover_backoff.lock() {
                                b.insert(name.clone(), Instant::now() + HANDOVER_BACKOFF);
                            }
                        }
                        break;
                    }
                    Err(e) => {
                        debug!(tenant = %name, error = %e, "cluster: a hand-over page did not reach the owner");
                        break;
                    }
                }
                if let Err(e) = store.handed_over(&page, *ord) {
                    warn!(tenant = %name, error = %e, "cluster: the owner took a page this node cannot delete: it may be handed over again");
                    break;
                }
                sent += page.seqs.len() as u64;
                self.stats
                    .handed_over
                    .fetch_add(page.seqs.len() as u64, Ordering::Relaxed);
                match page.next {
                    Some(n) => from = n,
                    None => {
                        info!(tenant = %name, to = %owner, hooks = sent, "cluster: handed this node's remains of the tenant to its owner and deleted them here");
                        let _ = self.catalog.withdraw_handover(name, me).await;
                        break;
                    }
                }
            }
        }
    }

    /// Removes this node's drains from the tenants whose first drain is
    /// this node's once it holds no pending row of the tenant; and its own
    /// drains from a tenant it owns (its lanes order them already).
    async fn finish_drains(&self, pending: &(dyn Fn(TenantOrd) -> Option<u64> + Send + Sync)) {
        let view = self.view.load_full();
        let names = self.names.load();
        let me = self.id.as_str();
        for (name, (t, rev)) in &view.snap.tenants {
            if !t.drains.iter().any(|d| d.node == me) {
                continue;
            }
            let owner = t.owner.as_deref() == Some(me);
            let drains = if owner {
                if !t.drains.iter().all(|d| d.node == me) {
                    continue;
                }
                Vec::new()
            } else {
                if t.drains.first().is_none_or(|d| d.node != me) {
                    continue;
                }
                let ord = names.iter().find(|(_, n)| *n == name).map(|(o, _)| *o);
                let left = ord.and_then(pending);
                if left != Some(0) && ord.is_some() {
                    continue;
                }
                t.drains
                    .iter()
                    .skip_while(|d| d.node == me)
                    .cloned()
                    .collect()
            };
            let epochs: Vec<u64> = t
                .drains
                .iter()
                .filter(|d| d.node == me)
                .map(|d| d.epoch)
                .collect();
            let record = TenantRecord {
                drains,
                ..t.clone()
            };
            match self.catalog.set_tenant(name, &record, *rev).await {
                Ok(true) => {
                    self.stats.drains.fetch_add(1, Ordering::Relaxed);
                    info!(tenant = %name, ?epochs, barrier_left = record.drains.len(), "cluster: drained this node's earlier epochs of the tenant");
                }
                Ok(false) => {
                    debug!(tenant = %name, "cluster: the tenant's record changed first; the drain is recorded at the next read")
                }
                Err(e) => {
                    debug!(tenant = %name, error = %e, "cluster: cannot record the drain yet")
                }
            }
        }
    }

    /// One round of the controller: campaign, and assign when elected.
    /// Returns whether this node is the controller.
    async fn control(&self, was: bool) -> bool {
        if !self.lease_fresh() {
            return false;
        }
        let lease = self.lease.load(Ordering::SeqCst);
        let is = match self.catalog.campaign(&self.id, lease).await {
            Ok(is) => is,
            Err(e) => {
                debug!(error = %e, "cluster: cannot campaign for controller");
                return false;
            }
        };
        if is && !was {
            info!("cluster: this node is the controller");
        }
        if !is {
            return false;
        }
        let snap = match self.catalog.snapshot().await {
            Ok(s) => s,
            Err(e) => {
                debug!(error = %e, "cluster: the controller cannot read the catalog");
                return true;
            }
        };
        for a in assign(&snap) {
            match self
                .catalog
                .set_tenant(&a.tenant, &a.record, a.mod_revision)
                .await
            {
                Ok(true) => info!(
                    tenant = %a.tenant,
                    owner = a.record.owner.as_deref().unwrap_or("-"),
                    epoch = a.record.epoch,
                    barrier = %a.record.drains.iter().map(|d| format!("{}@{}", d.node, d.epoch)).collect::<Vec<_>>().join(","),
                    "cluster: tenant assigned"
                ),
                Ok(false) => {
                    debug!(tenant = %a.tenant, "cluster: the tenant changed first; assigned at the next round")
                }
                Err(e) => {
                    debug!(tenant = %a.tenant, error = %e, "cluster: cannot assign the tenant yet")
                }
            }
        }
        true
    }

    /// Leaves the cluster at a clean stop, after the pipeline stopped: every
    /// tenant it owns with nothing pending here is released (its next owner
    /// needs no barrier for it), and the lease is revoked so the others take
    /// its tenants at once instead of after the TTL.
    pub async fn leave(&self, pending: &(dyn Fn(TenantOrd) -> Option<u64> + Send + Sync)) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Ok(snap) = self.catalog.snapshot().await {
            let names = self.names.load();
            for (name, (t, rev)) in &snap.tenants {
                if t.owner.as_deref() != Some(self.id.as_str()) {
                    continue;
                }
                let ord = names.iter().find(|(_, n)| *n == name).map(|(o, _)| *o);
                if ord.and_then(pending) != Some(0) {
                    continue;
                }
                let record = TenantRecord {
                    owner: None,
                    ..t.clone()
                };
                if let Ok(true) = self.catalog.set_tenant(name, &record, *rev).await {
                    debug!(tenant = %name, "cluster: released (nothing pending here)");
                }
            }
        }
        let lease = self.lease.load(Ordering::SeqCst);
        match self.catalog.etcd().revoke(lease).await {
            Ok(()) => {
                info!("cluster: left (lease revoked); the other nodes take this node's tenants")
            }
            Err(e) => warn!(error = %e, "cluster: cannot revoke the lease; it expires on its own"),
        }
    }

    /// The counters of `/metrics` (`ankusa_cluster_*_total`): this
    /// runtime's and the edge's forwarded and held hooks.
    pub fn metrics(
        &self,
        edge: &ankusa_edge::server::EdgeStats,
    ) -> Vec<(&'static str, &'static str, u64)> {
        let s = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            (
                "ankusa_cluster_ownership_changes",
                "Tenants this node gained or lost",
                get(&s.ownership_changes),
            ),
            (
                "ankusa_cluster_forwarded",
                "Hooks forwarded to their tenant's owner and answered by it",
                get(&edge.forwarded),
            ),
            (
                "ankusa_cluster_held",
                "Hooks held because their tenant had no live owner (a failover in progress)",
                get(&edge.held),
            ),
            (
                "ankusa_cluster_held_refused",
                "Held hooks answered 503 when the hold passed with no owner",
                get(&edge.held_out),
            ),
            (
                "ankusa_cluster_lease_renewals",
                "Keep-alives of this node's lease answered by etcd",
                get(&s.renewals),
            ),
            (
                "ankusa_cluster_lease_renew_microseconds",
                "The keep-alives' round trips, summed (divide by the renewals for the mean)",
                get(&s.renew_us),
            ),
            (
                "ankusa_cluster_lease_renew_failures",
                "Keep-alives that failed or found the lease expired",
                get(&s.renew_failures),
            ),
            (
                "ankusa_cluster_handed_over",
                "Hooks of this node's remains of tenants it no longer holds (dead letters, quarantine, archive) handed to their owner",
                get(&s.handed_over),
            ),
            (
                "ankusa_cluster_adopted",
                "Hooks of other nodes' remains this node took as a tenant's owner",
                get(&edge.adopted),
            ),
            (
                "ankusa_cluster_drains",
                "Earlier epochs of a tenant this node delivered and recorded drained",
                get(&s.drains),
            ),
        ]
    }

    /// The gauges of `/metrics` (`ankusa_cluster_*`).
    pub fn gauges(&self) -> Vec<(&'static str, &'static str, i64)> {
        vec![(
            "ankusa_cluster_barrier_held_rows",
            "Ordered rows (lane heads and members) this node holds behind another node's undrained epoch of their tenant (the epoch barrier)",
            i64::try_from(self.stats.barrier_held.load(Ordering::Relaxed)).unwrap_or(i64::MAX),
        )]
    }

    /// Stops the runtime's tasks without leaving (a fail-stop: the lease
    /// expires on its own).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
}

/// A hook of a tenant admitted for commit: counted in flight until it is
/// answered (a planned move confirms its fence only when none is).
struct Admission<'a> {
    member: &'a Member,
    tenant: String,
}

impl<'a> Admission<'a> {
    fn new(member: &'a Member, tenant: &str) -> Admission<'a> {
        let mut inflight = member
            .inflight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *inflight.entry(tenant.to_owned()).or_default() += 1;
        Admission {
            member,
            tenant: tenant.to_owned(),
        }
    }
}

impl Admitted for Admission<'_> {
    fn may_acknowledge(&self) -> bool {
        self.member.owns(&self.tenant)
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let mut inflight = self
            .member
            .inflight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = inflight.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inflight.remove(&self.tenant);
            }
        }
    }
}

/// A TTL etcd granted, in seconds, as a duration (at least 1 s).
fn granted(ttl_s: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl_s).unwrap_or(1).max(1))
}

/// Headers a forward does not pass on: hop-by-hop ones, and the ones the
/// client sets for the new request.
const NOT_FORWARDED: [&str; 8] = [
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
];

impl Owners for Member {
    fn place(&self, tenant: &str) -> Placement {
        let view = self.view.load();
        let Some((t, _)) = view.snap.tenants.get(tenant) else {
            return Placement::Unowned;
        };
        match t.owner.as_deref() {
            Some(o) if o == self.id => {
                if self.fresh(tenant) {
                    Placement::Local
                } else {
                    Placement::Unowned
                }
            }
            Some(o) => match view.snap.nodes.get(o) {
                Some((n, _)) => Placement::Remote(n.addr.clone()),
                None => Placement::Unowned,
            },
            None => Placement::Unowned,
        }
    }

    fn admit(&self, tenant: &str) -> Option<Box<dyn Admitted + '_>> {
        // Counted first, checked second: a fence that stored its view and
        // then found no hook in flight is seen by every later check.
        let admission = Admission::new(self, tenant);
        Member::fresh(self, tenant).then(|| Box::new(admission) as Box<dyn Admitted>)
    }

    fn hold(&self) -> Duration {
        self.hold
    }

    fn changed(&self) -> Pending<'_, ()> {
        let mut rx = self.changed.subscribe();
        Box::pin(async move {
            let _ = rx.changed().await;
        })
    }

    fn forward<'a>(&'a self, f: Forward<'a>) -> Pending<'a, Result<Answer, String>> {
        Box::pin(async move {
            let method = reqwest::Method::from_bytes(f.method.as_bytes())
                .map_err(|e| format!("method {}: {e}", f.method))?;
            let mut req = self
                .forwarder
                .request(method, format!("http://{}{}", f.addr, f.path_and_query));
            for (name, value) in f.headers {
                let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
                if NOT_FORWARDED.contains(&lower.as_str()) {
                    continue;
                }
                req = req.header(name.as_slice(), value.as_slice());
            }
            let resp = req.body(f.body).send().await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let headers = [
                "content-type",
                "retry-after",
                ankusa_edge::server::owners::PLACE_AGAIN,
            ]
            .into_iter()
            .filter_map(|h| {
                resp.headers()
                    .get(h)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| (h.to_owned(), v.to_owned()))
            })
            .collect();
            let body = resp.bytes().await.map_err(|e| e.to_string())?;
            Ok(Answer {
                status,
                headers,
                body,
            })
        })
    }

    fn node_id(&self) -> &str {
        &self.id
    }

    fn accept_handover(&self, tenant: &str, from: &str, token: &str) -> Option<TenantOrd> {
        let view = self.view.load();
        let offer = view.snap.handovers.get(tenant)?.get(from)?;
        // Compared in full whatever the length (the token is random, so a
        // timing side channel would have to guess 256 bits anyway).
        let same = offer.token.len() == token.len()
            && offer
                .token
                .bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if !same || offer.to != self.id || from == self.id || !self.owns(tenant) {
            return None;
        }
        self.names
            .load()
            .iter()
            .find(|(_, n)| n.as_str() == tenant)
            .map(|(o, _)| *o)
    }
}
