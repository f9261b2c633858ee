//! Reload (docs/design.md section 5, "Reload"): SIGHUP, `ankusa reload` and
//! `POST /v1/reload` re-read the configuration file, run every check of
//! `check-config`, and apply the new configuration while ingest and delivery
//! go on, or change nothing and say why.
//!
//! One reload at a time runs on the reload task ([`Reloader::run`]); the
//! admin API reaches it through a [`ReloadHandle`]. A reload:
//! 1. loads the file as `serve` and `check-config` do (every problem: 422);
//! 2. refuses what cannot change live, each named (409): the listeners,
//!    `node.data_dir`, `node.store`, `node.name`, the log format, the OTel
//!    export, `node.attempt_log`, `listeners.body_budget_bytes`, `retention`, turning the admin
//!    token on or off, and sinks that need more file descriptors than the
//!    start kept for them;
//! 3. registers new tenants and sources, gives every sink entry the slot its
//!    name has (`crate::unconfigured::assign_slots`) and refuses (409) when a
//!    removed source or sink entry still has queued deliveries, as a start
//!    does (a reload never drops them: put it back paused, or restart with
//!    `--drop-unconfigured`); new names' slots are stored before any hook can
//!    use them;
//! 4. builds the pipeline's routes (the sink clients of unchanged entries are
//!    kept) and the edge's routes, and only then applies them, the pipeline
//!    first (it can deliver what the new edge routes to), then the admin
//!    API's configuration, then the edge. A hook is routed by one
//!    configuration: the edge reads its routes once per request. Calls in
//!    flight finish with the route that claimed them. An entry the reload
//!    removed stays in the pipeline's routes until the next start, so a hook
//!    the old routes took while the reload ran is still delivered.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ankusa_admin::{ConfigStatus, Context, ReloadControl, ReloadDone, ReloadFailure};
use ankusa_config::{Config, LogFormat};
use ankusa_edge::server::{Edge, IngestRoutes};
use ankusa_engine::{Durability, Kv};
use ankusa_pipeline::{PipelineHandle, Reconfiguration, Routes};
use ankusa_queue::Registry;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::settings::Pipelined;

/// A reload asked through the admin API, with where to send its outcome.
type Ask = oneshot::Sender<Result<ReloadDone, ReloadFailure>>;

/// The admin API's way to the reload task, and the status it shows.
pub struct ReloadHandle {
    asks: mpsc::Sender<Ask>,
    status: Arc<Mutex<ConfigStatus>>,
}

impl ReloadControl for ReloadHandle {
    fn reload(&self) -> ankusa_admin::BoxFuture<'_, Result<ReloadDone, ReloadFailure>> {
        Box::pin(async move {
            let stopped = || ReloadFailure::Unavailable("the relay is stopping".to_owned());
            let (tx, rx) = oneshot::channel();
            self.asks.send(tx).await.map_err(|_| stopped())?;
            rx.await.map_err(|_| stopped())?
        })
    }

    fn status(&self) -> ConfigStatus {
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The handle the admin API reloads through (showing `status`), and the
/// receiver of its requests for [`Reloader::run`].
pub fn channel(status: Arc<Mutex<ConfigStatus>>) -> (ReloadHandle, mpsc::Receiver<Ask>) {
    let (asks, rx) = mpsc::channel(8);
    (ReloadHandle { asks, status }, rx)
}

/// What the running relay was built from: the configuration (with its sink
/// entries' slots) and the pipeline's routes (with the entries a reload
/// removed).
pub struct Running {
    /// The configuration, slots assigned.
    pub cfg: Arc<Config>,
    /// The pipeline's routing table as last given to it.
    pub routes: Routes,
}

/// The parts of the running relay a reload replaces, and what it must not
/// change.
pub struct Reloader<K: Kv> {
    /// The configuration file (`None`: the embedded demo, which never
    /// changes).
    pub file: Option<PathBuf>,
    /// `serve --log-format`, which wins over the file's.
    pub log_format_flag: Option<LogFormat>,
    /// The store.
    pub kv: Arc<K>,
    /// The ingest edge (its routes).
    pub edge: Arc<Edge<K>>,
    /// The admin API's context (its configuration and registry).
    pub admin: Arc<Context<K>>,
    /// The pipeline.
    pub pipeline: PipelineHandle,
    /// File descriptors the start kept for the sinks.
    pub sink_fds: usize,
    /// What runs now.
    pub running: Running,
    /// Shown by `GET /v1/config` and `/metrics`.
    pub status: Arc<Mutex<ConfigStatus>>,
    /// Cluster mode: the catalog numbers the new names and keeps the
    /// configuration every node follows (docs/design.md section 11).
    pub member: Option<Arc<crate::cluster::Member>>,
}

/// The largest configuration file a reload reads, bytes (a configuration of
/// thousands of sources is a few MiB).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;
/// How long a reload waits for the configuration file's bytes: a file on a
/// mount that hangs must not hold the reload task (nor, through it, a stop).
pub const CONFIG_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// SHA-256 of `bytes`, hex.
pub fn config_hash(bytes: &[u8]) -> String {
    ankusa_engine::hex(&Sha256::digest(bytes))
}

/// The bytes of the configuration file (of the embedded demo configuration
/// without one), read on a blocking thread within [`CONFIG_READ_TIMEOUT`]:
/// only a regular file of at most [`MAX_CONFIG_BYTES`] (a FIFO would block
/// the read until someone writes to it, `/dev/zero` would never end).
///
/// # Errors
/// Why the file cannot be read, naming it.
pub async fn read_config(file: Option<&std::path::Path>) -> Result<Vec<u8>, String> {
    let Some(path) = file.map(std::path::Path::to_path_buf) else {
        return Ok(ankusa_config::DEFAULT_YAML.as_bytes().to_vec());
    };
    let shown = path.display().to_string();
    let read = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
        use std::io::Read as _;
        let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read it: {e}"))?;
        if !meta.is_file() {
            return Err(
                "is not a regular file (a directory, a FIFO or a device): write the configuration to a file"
                    .to_owned(),
            );
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| format!("cannot read it: {e}"))?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(format!("is over {} MiB", MAX_CONFIG_BYTES >> 20));
        }
        Ok(bytes)
    });
    match tokio::time::timeout(CONFIG_READ_TIMEOUT, read).await {
        Ok(Ok(Ok(bytes))) => Ok(bytes),
        Ok(Ok(Err(why))) => Err(format!("{shown}: {why}")),
        Ok(Err(e)) => Err(format!("{shown}: the read failed: {e}")),
        Err(_) => Err(format!(
            "{shown}: could not be read within {} s (a hung mount?)",
            CONFIG_READ_TIMEOUT.as_secs()
        )),
    }
}

impl<K: Kv> Reloader<K> {
    /// Serves reloads until `shutdown`: on SIGHUP (`hangup`, logged) and on
    /// each request of the admin API (answered), one at a time.
    pub async fn run(
        mut self,
        mut asks: mpsc::Receiver<Ask>,
        mut hangup: Option<tokio::signal::unix::Signal>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            let hup = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(_) = hup => {
                    info!("SIGHUP: reloading the configuration");
                    let _ = self.reload().await;
                }
                Some(reply) = asks.recv() => {
                    let outcome = self.reload().await;
                    let _ = reply.send(outcome);
                }
                _ = shutdown.changed() => {
                    if *shutdown.borrow() {
                        return;
                    }
                }
            }
        }
    }

    /// One reload: applied, or nothing changed. Counted and logged either way.
    pub async fn reload(&mut self) -> Result<ReloadDone, ReloadFailure> {
        crate::notify::reloading();
        let outcome = self.apply().await;
        crate::notify::notify("READY=1");
        let mut st = self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &outcome {
            Ok(done) => {
                st.reloads_applied += 1;
                st.hash.clone_from(&done.status.hash);
                st.loaded_at_ms = done.status.loaded_at_ms;
                info!(
                    hash = %st.hash,
                    changes = done.changes.len(),
                    "configuration reloaded{}",
                    if done.changes.is_empty() {
                        ": nothing changed".to_owned()
                    } else {
                        format!(": {}", done.changes.join("; "))
                    }
                );
            }
            Err(e) => {
                st.reloads_refused += 1;
                let (kind, lines) = match e {
                    ReloadFailure::Invalid(p) => ("the file does not load", p.clone()),
                    ReloadFailure::Refused(r) => ("it cannot be applied live", r.clone()),
                    ReloadFailure::Unavailable(w) => {
                        ("the relay cannot reload now", vec![w.clone()])
                    }
                };
                warn!(
                    problems = %lines.join("; "),
                    "configuration reload refused ({kind}); the running configuration stays"
                );
            }
        }
        let status = st.clone();
        drop(st);
        outcome.map(|done| ReloadDone { status, ..done })
    }

    async fn apply(&mut self) -> Result<ReloadDone, ReloadFailure> {
        // Read once: the hash and the configuration are of the same bytes.
        let bytes = read_config(self.file.as_deref())
            .await
            .map_err(|why| ReloadFailure::Invalid(vec![why]))?;
        let hash = config_hash(&bytes);
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            ReloadFailure::Invalid(vec![format!("the configuration file is not UTF-8: {e}")])
        })?;
        let mut new = crate::serve::load_text(text).map_err(|e| {
            let problems = e.problems();
            ReloadFailure::Invalid(if problems.is_empty() {
                vec![e.to_string()]
            } else {
                problems.iter().map(ToString::to_string).collect()
            })
        })?;
        if let Some(f) = self.log_format_flag {
            new.node.log_format = f;
        }
        let old = Arc::clone(&self.running.cfg);
        let mut refused = fixed_changes(&old, &new);
        // Cluster mode: the catalog numbers the file's new names for every
        // node (a name's number is the cluster's), before the store's part.
        let mut numbered = None;
        let mut record = None;
        if let Some(m) = &self.member
            && refused.is_empty()
        {
            let r = crate::cluster::config_record(&bytes)
                .map_err(|e| ReloadFailure::Invalid(vec![format!("{e:#}")]))?;
            let local = Registry::read(&*self.kv).map_err(|e| store_failed(&e))?;
            numbered = Some(
                m.number(&new, &local)
                    .await
                    .map_err(|e| ReloadFailure::Refused(vec![format!("{e:#}")]))?,
            );
            record = Some(r);
        }
        let need = crate::limits::sink_fds(&new);
        if need > self.sink_fds {
            refused.push(format!(
                "sinks: the configuration's sinks need {need} file descriptors, the start kept {} for them \
                 (the split of the file-descriptor limit is made at start): restart to apply it",
                self.sink_fds
            ));
        }
        // The store's part, read only: the names the file adds, each sink
        // entry's slot, queued work of what it removes. Every refusal is
        // named together; nothing is written before everything is built.
        let kv = Arc::clone(&self.kv);
        let plan = tokio::task::spawn_blocking(move || plan(&*kv, new, numbered.as_ref()))
            .await
            .map_err(|e| {
                ReloadFailure::Unavailable(format!("the reload's store work failed: {e}"))
            })??;
        refused.extend(plan.queued);
        if !refused.is_empty() {
            return Err(ReloadFailure::Refused(refused));
        }
        let (new, registry) = (plan.cfg, plan.registry);
        let built = Pipelined::build(&new, &registry, Some((&old, &self.running.routes)))
            .await
            .map_err(|e| ReloadFailure::Refused(vec![format!("{e:#}")]))?;
        let ingest = IngestRoutes::build(&new, &registry, Some(&self.edge.routes.load()))
            .map_err(|e| ReloadFailure::Refused(vec![e.to_string()]))?;
        // Everything is built: the new names and slots go to the store (Sync)
        // before any hook can use them.
        let kv = Arc::clone(&self.kv);
        let (cfg, reg) = (new.clone(), registry.clone());
        let names = plan.names;
        tokio::task::spawn_blocking(move || commit_names(&*kv, names, &cfg, &reg, &plan.stored))
            .await
            .map_err(|e| {
                ReloadFailure::Unavailable(format!("the reload's store work failed: {e}"))
            })??;
        let changes = changes(&old, &new);
        let routes = with_leaving(built.routes, &self.running.routes);
        let sinks: Vec<String> = built.destinations;
        // Apply: the pipeline first (it can deliver whatever the new edge
        // routes), then the admin API, then the edge.
        self.pipeline
            .reconfigure(Reconfiguration {
                routes: routes.clone(),
                dispatch: built.dispatch,
                retry: built.retry,
                breaker: built.breaker,
            })
            .await
            .map_err(|e| ReloadFailure::Unavailable(format!("the pipeline: {e}")))?;
        let new = Arc::new(new);
        self.admin.reconfigure(Arc::clone(&new), registry.clone());
        let ingest = Arc::new(ingest);
        self.edge.stats.ingest.register_sources(&ingest.sources);
        self.edge.routes.store(ingest);
        for d in &sinks {
            tracing::debug!(destination = %d, "after the reload");
        }
        self.running = Running { cfg: new, routes };
        if let (Some(m), Some(r)) = (&self.member, &record) {
            m.set_names(&registry);
            m.follow(&self.running.cfg, r).await;
        }
        Ok(ReloadDone {
            status: ConfigStatus {
                hash,
                loaded_at_ms: crate::serve::now_ms(),
                ..ConfigStatus::default()
            },
            changes,
        })
    }
}

/// What a reload found in the store, before it writes anything: the
/// configuration with its sink entries' slots, the registry with the file's
/// new names (their batch not written yet), the stored slots, and why queued
/// work refuses it (empty: nothing does).
struct Plan {
    cfg: Config,
    registry: Registry,
    names: ankusa_engine::Batch,
    stored: std::collections::BTreeMap<ankusa_keys::SourceId, crate::unconfigured::SlotNames>,
    queued: Vec<String>,
}

fn store_failed(e: &dyn std::fmt::Display) -> ReloadFailure {
    warn!(error = %e, "a reload: the store failed");
    ReloadFailure::Unavailable(ankusa_admin::STORE_FAILED_MESSAGE.to_owned())
}

/// The store's part of a reload, read only, on a blocking thread: the
/// registry the file needs (its new names numbered, not written), every
/// sink entry's slot, and the queued deliveries of a removed source or sink
/// entry, each named (a reload never dead-letters them).
fn plan<K: Kv>(
    kv: &K,
    mut new: Config,
    numbered: Option<&crate::cluster::Numbers>,
) -> Result<Plan, ReloadFailure> {
    let before = Registry::read(kv).map_err(|e| store_failed(&e))?;
    let (names, registry) = match numbered {
        Some((tenants, sources)) => {
            ankusa_queue::register_numbered(kv, tenants, sources).map_err(|e| match e {
                e @ ankusa_queue::QueueError::RegistryConflict { .. } => {
                    ReloadFailure::Refused(vec![format!("cluster: {e}")])
                }
                e => store_failed(&e),
            })?
        }
        None => ankusa_queue::register(
            kv,
            new.tenants.iter().map(|t| t.name.as_str()),
            new.sources.iter().map(|s| s.name.as_str()),
        )
        .map_err(|e| store_failed(&e))?,
    };
    let mut stored =
        crate::unconfigured::stored_slots(kv, &registry).map_err(|e| store_failed(&e))?;
    // A source this reload registers has no row in the store: its slots
    // start empty (no pending scan looks for its rows), as after a start.
    for (name, id) in &registry.sources {
        if !before.sources.contains_key(name) {
            stored.entry(*id).or_default();
        }
    }
    crate::unconfigured::assign_slots(&mut new, &registry, &stored)
        .map_err(|e| ReloadFailure::Refused(vec![format!("{e:#}")]))?;
    let found =
        crate::unconfigured::find(kv, &new, &registry, &stored).map_err(|e| store_failed(&e))?;
    let mut queued: Vec<String> = found
        .iter()
        .map(crate::unconfigured::Unconfigured::line)
        .collect();
    if !queued.is_empty() {
        queued.push(
            "put each back with `paused: true` (a sink entry under its name, anywhere in its list) so its deliveries wait, \
             or restart with `ankusa serve --drop-unconfigured` to dead-letter them (a reload never drops queued hooks)"
                .to_owned(),
        );
    }
    Ok(Plan {
        cfg: new,
        registry,
        names,
        stored,
        queued,
    })
}

/// Writes a planned reload's new names and its new entries' slots (`Sync`),
/// before the new routes can route a hook to them.
fn commit_names<K: Kv>(
    kv: &K,
    names: ankusa_engine::Batch,
    cfg: &Config,
    registry: &Registry,
    stored: &std::collections::BTreeMap<ankusa_keys::SourceId, crate::unconfigured::SlotNames>,
) -> Result<(), ReloadFailure> {
    if !names.is_empty() {
        kv.write(names, Durability::Sync)
            .map_err(|e| store_failed(&e))?;
    }
    crate::unconfigured::remember_added(kv, cfg, registry, stored).map_err(|e| store_failed(&e))
}

/// The options of `new` that differ from `old` and cannot change while the
/// relay runs, each named with why.
fn fixed_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let mut fixed = |changed: bool, option: &str, why: &str| {
        if changed {
            out.push(format!(
                "{option}: cannot change while the relay runs ({why}); restart to apply it"
            ));
        }
    };
    let (o, n) = (&old.listeners, &new.listeners);
    fixed(
        o.ingest != n.ingest,
        "listeners.ingest",
        "the listener is bound",
    );
    fixed(
        o.admin != n.admin,
        "listeners.admin",
        "the listener is bound",
    );
    fixed(
        o.body_budget_bytes != n.body_budget_bytes,
        "listeners.body_budget_bytes",
        "the node's body budget is sized at start",
    );
    fixed(
        o.admin_token.is_some() != n.admin_token.is_some(),
        "listeners.admin_token",
        "turning the token on or off changes which addresses the admin listener may bind; rotating a token is live",
    );
    fixed(
        old.cluster != new.cluster,
        "cluster",
        "the node joined its cluster with it (its etcd, its lease, its id)",
    );
    let (o, n) = (&old.node, &new.node);
    fixed(
        o.data_dir != n.data_dir,
        "node.data_dir",
        "the store is open",
    );
    fixed(o.store != n.store, "node.store", "the store is open");
    fixed(
        o.name != n.name,
        "node.name",
        "it names the node in its telemetry",
    );
    fixed(
        o.log_format != n.log_format,
        "node.log_format",
        "the log is set up at start",
    );
    fixed(
        o.otel != n.otel,
        "node.otel",
        "the export is set up at start",
    );
    fixed(
        o.attempt_log != n.attempt_log,
        "node.attempt_log",
        "the pipeline takes it at start",
    );
    fixed(
        old.retention != new.retention,
        "retention",
        "the sweep's schedule is set at start",
    );
    out
}

/// What changed from `old` to `new`, one line each.
fn changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for t in &new.tenants {
        match old.tenant(&t.name) {
            None => out.push(format!("tenant \"{}\" added", t.name)),
            Some(o) if o != t => out.push(format!("tenant \"{}\" changed", t.name)),
            Some(_) => {}
        }
    }
    for t in &old.tenants {
        if new.tenant(&t.name).is_none() {
            out.push(format!("tenant \"{}\" removed", t.name));
        }
    }
    for s in &new.sources {
        let Some(o) = old.source(&s.name) else {
            out.push(format!("source \"{}\" added", s.name));
            continue;
        };
        for e in &s.sinks {
            match o.sinks.iter().find(|x| x.name == e.name) {
                None => out.push(format!("source \"{}\", sink \"{}\" added", s.name, e.name)),
                Some(x) if x != e => {
                    out.push(format!(
                        "source \"{}\", sink \"{}\" changed",
                        s.name, e.name
                    ));
                }
                Some(_) => {}
            }
        }
        for x in &o.sinks {
            if !s.sinks.iter().any(|e| e.name == x.name) {
                out.push(format!(
                    "source \"{}\", sink \"{}\" removed",
                    s.name, x.name
                ));
            }
        }
        let mut a = o.clone();
        let mut b = s.clone();
        a.sinks.clear();
        b.sinks.clear();
        if a != b {
            out.push(format!("source \"{}\" changed", s.name));
        }
    }
    for s in &old.sources {
        if new.source(&s.name).is_none() {
            out.push(format!("source \"{}\" removed", s.name));
        }
    }
    for (section, changed) in [
        ("dispatch", old.dispatch != new.dispatch),
        ("retry", old.retry != new.retry),
        ("breaker", old.breaker != new.breaker),
        ("store_headers", old.store_headers != new.store_headers),
        (
            "node.max_pending, node.max_pending_bytes",
            old.node.max_pending != new.node.max_pending
                || old.node.max_pending_bytes != new.node.max_pending_bytes,
        ),
        (
            "listeners.body_limit_bytes",
            old.listeners.body_limit_bytes != new.listeners.body_limit_bytes,
        ),
        (
            "listeners.admin_token, listeners.metrics_require_token",
            old.listeners.admin_token != new.listeners.admin_token
                || old.listeners.metrics_require_token != new.listeners.metrics_require_token,
        ),
    ] {
        if changed {
            out.push(format!("{section} changed"));
        }
    }
    out
}

/// `routes` with the sink entries of `old` it no longer has: a hook the old
/// routes took while the reload ran is still delivered (the next start's
/// unconfigured-work check decides what is left of them).
fn with_leaving(mut routes: Routes, old: &Routes) -> Routes {
    for (key, route) in &old.sinks {
        if routes.sinks.contains_key(key) {
            continue;
        }
        routes.sinks.insert(*key, route.clone());
        if let Some(r) = old.retry.get(key) {
            routes.retry.insert(*key, *r);
        }
        if let Some(r) = old.rate_limits.get(key) {
            routes.rate_limits.insert(*key, *r);
        }
        if let Some(t) = old.transforms.get(key) {
            routes.transforms.insert(*key, t.clone());
        }
        if let Some(t) = old.source_tenants.get(&key.0) {
            routes.source_tenants.entry(key.0).or_insert(*t);
        }
        if old.ordered.contains(key) {
            routes.ordered.insert(*key);
        }
    }
    routes
}
