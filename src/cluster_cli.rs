//! `ankusa cluster ...`: the operator's commands of cluster mode (README,
//! "Running a cluster"; docs/design.md section 11). They read and change the
//! catalog in etcd directly, with the etcd endpoints and the cluster's name
//! of a node's configuration file, so they work from any machine that
//! reaches etcd, whichever nodes are up. Exit codes: 0 ok; 1 refused (the
//! reason is printed); 2 usage, or a destructive command without `--yes`;
//! 3 etcd cannot be reached.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ankusa_catalog::Etcd;
use ankusa_catalog::cluster::{Catalog, ForfeitError, Snapshot};
use clap::{Args, Subcommand};
use serde_json::json;

/// The exit codes of `ankusa cluster`.
pub const EXIT_CODES: &str = "Exit codes: 0 ok; 1 refused (the reason is printed); 2 usage error, or forfeit without --yes; 3 cannot reach etcd.";

/// Which cluster: a node's configuration file.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// A node's configuration file: its `cluster.etcd` and `cluster.name`
    /// say which catalog to read.
    #[arg(long, short)]
    config: PathBuf,
}

/// `ankusa cluster ...`.
#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// The nodes (id, address, alive, lease age, draining, configuration)
    /// and the tenants (owner, epoch, barrier, pending).
    Status {
        #[command(flatten)]
        target: Target,
        /// One JSON object: `nodes` and `tenants` arrays.
        #[arg(long)]
        json: bool,
    },
    /// Lift a tenant's epoch barrier held by a node that is gone for good:
    /// the hooks that node acknowledged and had not delivered are given up
    /// (counted from its last report). Refused while the node is alive.
    Forfeit {
        #[command(flatten)]
        target: Target,
        /// The tenant.
        tenant: String,
        /// The epoch to give up (see `ankusa cluster status`).
        #[arg(long)]
        epoch: u64,
        /// Confirm: acknowledged hooks are given up.
        #[arg(long)]
        yes: bool,
    },
}

/// Runs one command.
pub fn main(cmd: ClusterCmd) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(run(cmd))
}

fn catalog(target: &Target) -> Result<(Catalog, ankusa_config::Cluster), ExitCode> {
    let cfg = match ankusa_config::Config::load(&target.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}: {e}", target.config.display());
            return Err(ExitCode::from(2));
        }
    };
    let Some(cluster) = cfg.cluster else {
        eprintln!(
            "error: {} has no cluster section: it is a standalone relay's",
            target.config.display()
        );
        return Err(ExitCode::from(2));
    };
    match Etcd::new(&cluster.etcd, Duration::from_secs(3)) {
        Ok(etcd) => Ok((Catalog::new(etcd, &cluster.name), cluster)),
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(3))
        }
    }
}

async fn run(cmd: ClusterCmd) -> ExitCode {
    match cmd {
        ClusterCmd::Status { target, json } => {
            let (cat, cluster) = match catalog(&target) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let snap = match cat.snapshot().await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: cannot read the catalog: {e}");
                    return ExitCode::from(3);
                }
            };
            let status = status(&cat, &snap).await;
            if json {
                println!("{status:#}");
            } else {
                print_status(&cluster, &status);
            }
            ExitCode::SUCCESS
        }
        ClusterCmd::Forfeit {
            target,
            tenant,
            epoch,
            yes,
        } => {
            if !yes {
                eprintln!(
                    "error: a forfeit gives up the hooks epoch {epoch} of tenant {tenant} still holds: add --yes"
                );
                return ExitCode::from(2);
            }
            let (cat, _) = match catalog(&target) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match cat.forfeit(&tenant, epoch).await {
                Ok(f) => {
                    let given_up = match &f.report {
                        Some(r) => format!(
                            "{} acknowledged hooks not delivered (its last report, {} ms before now)",
                            r.pending,
                            crate::serve::now_ms().saturating_sub(r.at_ms)
                        ),
                        None => "an unknown number of acknowledged hooks (it made no report at that epoch)".to_owned(),
                    };
                    println!(
                        "forfeited epoch {epoch} of tenant {tenant}, held by node {}: {given_up} are given up",
                        f.node
                    );
                    if f.left.is_empty() {
                        println!(
                            "the barrier is lifted: the owner delivers the tenant's ordered lanes"
                        );
                    } else {
                        println!(
                            "the barrier still waits for: {}",
                            f.left
                                .iter()
                                .map(|d| format!("{}@{}", d.node, d.epoch))
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(ForfeitError::Catalog(e)) => {
                    eprintln!("error: {e}");
                    ExitCode::from(3)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// The status as JSON: `nodes` (every live node, and every node a tenant
/// still names: its owner or a drain) and `tenants`.
async fn status(cat: &Catalog, snap: &Snapshot) -> serde_json::Value {
    let mut named: BTreeSet<&str> = snap.nodes.keys().map(String::as_str).collect();
    for (t, _) in snap.tenants.values() {
        named.extend(t.owner.as_deref());
        named.extend(t.drains.iter().map(|d| d.node.as_str()));
    }
    let mut nodes = Vec::new();
    for id in named {
        match snap.nodes.get(id) {
            Some((n, lease)) => {
                let age_ms = match cat.etcd().time_to_live(*lease).await {
                    Ok(Some((left, granted))) => Some((granted - left).max(0) * 1000),
                    _ => None,
                };
                nodes.push(json!({
                    "id": id,
                    "address": n.addr,
                    "alive": true,
                    "lease_age_ms": age_ms,
                    "draining": n.draining,
                    "config": n.config,
                    "config_current": snap.config.as_ref().is_some_and(|c| c.hash == n.config),
                }));
            }
            None => nodes.push(json!({
                "id": id,
                "address": null,
                "alive": false,
                "lease_age_ms": null,
                "draining": null,
                "config": null,
                "config_current": null,
            })),
        }
    }
    let tenants: Vec<serde_json::Value> = snap
        .tenants
        .iter()
        .map(|(name, (t, _))| {
            let reports = snap.reports.get(name);
            let pending = t
                .owner
                .as_ref()
                .and_then(|o| reports.and_then(|r| r.get(o)))
                .filter(|r| r.epoch == t.epoch)
                .map(|r| r.pending);
            let held: serde_json::Map<String, serde_json::Value> = t
                .drains
                .iter()
                .filter_map(|d| {
                    reports
                        .and_then(|r| r.get(&d.node))
                        .filter(|r| r.epoch == d.epoch)
                        .map(|r| (format!("{}@{}", d.node, d.epoch), json!(r.pending)))
                })
                .collect();
            json!({
                "name": name,
                "ord": t.ord,
                "owner": t.owner,
                "owner_alive": t.owner.as_ref().is_some_and(|o| snap.nodes.contains_key(o)),
                "epoch": t.epoch,
                "barrier": t.drains.iter().map(|d| json!({"node": d.node, "epoch": d.epoch})).collect::<Vec<_>>(),
                "pending": pending,
                "barrier_pending": held,
            })
        })
        .collect();
    json!({
        "controller": snap.controller,
        "config": snap.config.as_ref().map(|c| c.hash.clone()),
        "nodes": nodes,
        "tenants": tenants,
        "moves": [],
    })
}

fn print_status(cluster: &ankusa_config::Cluster, s: &serde_json::Value) {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    println!(
        "cluster {} (etcd {}): controller {}, configuration {}",
        cluster.name,
        cluster.etcd.join(", "),
        text(&s["controller"]),
        text(&s["config"]).chars().take(12).collect::<String>()
    );
    println!();
    println!(
        "{:<16} {:<22} {:<6} {:>9} {:<9} CONFIG",
        "NODE", "ADDRESS", "ALIVE", "LEASE AGE", "DRAINING"
    );
    for n in s["nodes"].as_array().into_iter().flatten() {
        let config = if n["config_current"] == json!(false) {
            format!(
                "{} (not the cluster's)",
                text(&n["config"]).chars().take(12).collect::<String>()
            )
        } else {
            text(&n["config"]).chars().take(12).collect()
        };
        println!(
            "{:<16} {:<22} {:<6} {:>9} {:<9} {}",
            text(&n["id"]),
            text(&n["address"]),
            if n["alive"] == json!(true) {
                "yes"
            } else {
                "no"
            },
            n["lease_age_ms"]
                .as_i64()
                .map_or("-".to_owned(), |ms| format!("{} s", ms / 1000)),
            match n["draining"].as_bool() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            },
            config
        );
    }
    println!();
    println!(
        "{:<16} {:<16} {:>6} {:>8}  BARRIER (pending held)",
        "TENANT", "OWNER", "EPOCH", "PENDING"
    );
    for t in s["tenants"].as_array().into_iter().flatten() {
        let owner = match (&t["owner"], t["owner_alive"].as_bool()) {
            (serde_json::Value::String(o), Some(false)) => format!("{o} (dead)"),
            (o, _) => text(o),
        };
        let barrier: Vec<String> = t["barrier"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                let at = format!("{}@{}", text(&d["node"]), d["epoch"]);
                match t["barrier_pending"].get(&at) {
                    Some(p) => format!("{at} ({p})"),
                    None => at,
                }
            })
            .collect();
        println!(
            "{:<16} {:<16} {:>6} {:>8}  {}",
            text(&t["name"]),
            owner,
            t["epoch"],
            text(&t["pending"]),
            if barrier.is_empty() {
                "none".to_owned()
            } else {
                barrier.join(", ")
            }
        );
    }
}
