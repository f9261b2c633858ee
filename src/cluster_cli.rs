//! `ankusa cluster ...` (status, move, drain, undrain, forfeit): the
//! operator's commands of cluster mode (README,
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
use ankusa_catalog::cluster::{Catalog, ForfeitError, MoveError, Snapshot};
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
    /// Move a tenant to another node (planned): its owner stops taking its
    /// hooks, the tenant goes to NODE at the next epoch, and the old owner
    /// delivers what it holds in place (NODE's ordered lanes of the tenant
    /// wait for that). Hooks meanwhile are held, not refused.
    Move {
        #[command(flatten)]
        target: Target,
        /// The tenant.
        tenant: String,
        /// The node it goes to.
        #[arg(long)]
        to: String,
        /// Wait until the old owner has delivered what it held.
        #[arg(long)]
        wait: bool,
    },
    /// Move every tenant off NODE, one at a time, and give it no other (for
    /// an upgrade or a restart); it stays drained, across its restarts,
    /// until `undrain`.
    Drain {
        #[command(flatten)]
        target: Target,
        /// The node.
        node: String,
        /// Wait until the node has delivered what it held of each tenant.
        #[arg(long)]
        wait: bool,
    },
    /// Let a drained node take tenants again (tenants without a live owner;
    /// no tenant is moved back on its own).
    Undrain {
        #[command(flatten)]
        target: Target,
        /// The node.
        node: String,
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
    // The cluster commands read only the `cluster` section and etcd: the
    // file's secrets (`env:NAME`) need not be set where an operator runs
    // them. An unset one reads as a stand-in; a set one as its value.
    let stand_in = |name: &str| {
        ankusa_config::process_env(name)
            .or_else(|| Some("set-only-where-the-relay-runs-0123456789".into()))
    };
    let cfg = match ankusa_config::Config::load_with_env(&target.config, &stand_in) {
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
        ClusterCmd::Move {
            target,
            tenant,
            to,
            wait,
        } => {
            let (cat, _) = match catalog(&target) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match move_one(&cat, &tenant, &to, wait).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(code) => code,
            }
        }
        ClusterCmd::Drain { target, node, wait } => {
            let (cat, _) = match catalog(&target) {
                Ok(c) => c,
                Err(code) => return code,
            };
            // A node the catalog does not know is a typo: nothing is marked.
            let snap = match cat.snapshot().await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(3);
                }
            };
            let known = snap.nodes.contains_key(&node)
                || snap.tenants.values().any(|(t, _)| {
                    t.owner.as_deref() == Some(node.as_str())
                        || t.drains.iter().any(|d| d.node == node)
                });
            if !known {
                eprintln!("error: no node {node} in the cluster (see ankusa cluster status)");
                return ExitCode::from(1);
            }
            let owns = snap
                .tenants
                .values()
                .any(|(t, _)| t.owner.as_deref() == Some(node.as_str()));
            if owns && snap.nodes.contains_key(&node) && least_loaded(&snap, &node).is_none() {
                eprintln!(
                    "error: no other live node takes tenants, so {node}'s cannot move: nothing was changed"
                );
                return ExitCode::from(1);
            }
            if let Err(e) = cat.set_draining(&node, true).await {
                eprintln!("error: {e}");
                return ExitCode::from(3);
            }
            println!("node {node} is drained: it is given no tenant");
            loop {
                let snap = match cat.snapshot().await {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(3);
                    }
                };
                let Some(tenant) = snap
                    .tenants
                    .iter()
                    .find(|(_, (t, _))| t.owner.as_deref() == Some(node.as_str()))
                    .map(|(n, _)| n.clone())
                else {
                    break;
                };
                if !snap.nodes.contains_key(&node) {
                    println!("node {node} is not alive: a failover moves its tenants");
                    break;
                }
                let Some(to) = least_loaded(&snap, &node) else {
                    eprintln!("error: no other live node takes tenants: {tenant} stays on {node}");
                    return ExitCode::from(1);
                };
                if let Err(code) = move_one(&cat, &tenant, &to, wait).await {
                    return code;
                }
            }
            println!("node {node} owns no tenant");
            ExitCode::SUCCESS
        }
        ClusterCmd::Undrain { target, node } => {
            let (cat, _) = match catalog(&target) {
                Ok(c) => c,
                Err(code) => return code,
            };
            // Only a node that is drained can be undrained: anything else is
            // a typo, and saying "takes tenants again" would mislead.
            let snap = match cat.snapshot().await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(3);
                }
            };
            if !snap.draining.contains(&node) {
                eprintln!(
                    "error: node {node} is not drained (see ankusa cluster status): nothing was changed"
                );
                return ExitCode::from(1);
            }
            match cat.set_draining(&node, false).await {
                Ok(()) => {
                    println!("node {node} takes tenants again");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(3)
                }
            }
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
                            "{} deliveries of acknowledged hooks not made (one per hook and sink; its last report, {} s before now)",
                            r.pending,
                            crate::serve::now_ms().saturating_sub(r.at_ms) / 1000
                        ),
                        None => "an unknown number of deliveries of acknowledged hooks (it made no report at that epoch)".to_owned(),
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

/// The live node, other than `except`, that takes tenants and owns the
/// fewest (ties by id).
fn least_loaded(snap: &Snapshot, except: &str) -> Option<String> {
    snap.nodes
        .iter()
        .filter(|(id, (n, _))| *id != except && !n.draining && !snap.draining.contains(*id))
        .map(|(id, _)| {
            let owned = snap
                .tenants
                .values()
                .filter(|(t, _)| t.owner.as_deref() == Some(id.as_str()))
                .count();
            (owned, id.clone())
        })
        .min()
        .map(|(_, id)| id)
}

/// How long a move waits for each of its steps before it says so and
/// gives up waiting (the move itself goes on).
const MOVE_WAIT: Duration = Duration::from_secs(300);

/// One planned move: asked, then waited for until flipped (and, with
/// `drained`, until the old owner delivered what it held).
async fn move_one(cat: &Catalog, tenant: &str, to: &str, drained: bool) -> Result<(), ExitCode> {
    let epoch = match cat.request_move(tenant, to).await {
        Ok(e) => e,
        Err(MoveError::Catalog(e)) => {
            eprintln!("error: {e}");
            return Err(ExitCode::from(3));
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Err(ExitCode::from(1));
        }
    };
    println!("moving tenant {tenant} to {to}: its owner stops taking its hooks (held meanwhile)");
    let started = std::time::Instant::now();
    let mut from = None;
    loop {
        if started.elapsed() > MOVE_WAIT {
            eprintln!(
                "error: tenant {tenant} has not moved after {} s (ankusa cluster status)",
                MOVE_WAIT.as_secs()
            );
            return Err(ExitCode::from(1));
        }
        let snap = cat.snapshot().await.map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::from(3)
        })?;
        let Some((t, _)) = snap.tenants.get(tenant) else {
            return Err(ExitCode::from(1));
        };
        if t.epoch > epoch {
            if t.owner.as_deref() != Some(to) {
                eprintln!(
                    "error: tenant {tenant} went to {} instead (its owner died: a failover)",
                    t.owner.as_deref().unwrap_or("no node")
                );
                return Err(ExitCode::from(1));
            }
            let old = from.get_or_insert_with(|| {
                t.drains
                    .iter()
                    .find(|d| d.epoch == epoch)
                    .map(|d| d.node.clone())
            });
            if !drained || t.drains.iter().all(|d| d.epoch != epoch) {
                match (drained, old) {
                    (true, Some(o)) => {
                        println!("tenant {tenant} is on {to}; {o} delivered what it held")
                    }
                    _ => println!("tenant {tenant} is on {to} at epoch {}", t.epoch),
                }
                return Ok(());
            }
        } else if t.moving.is_none() {
            eprintln!(
                "error: the move of tenant {tenant} was called off (its target left or cannot own it)"
            );
            return Err(ExitCode::from(1));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
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
                    "draining": n.draining || snap.draining.contains(id),
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
                // `lanes`: the ordered lanes a planned move's drain holds
                // back (null: every ordered lane, as after a failover).
                "barrier": t.drains.iter().map(|d| json!({"node": d.node, "epoch": d.epoch, "lanes": d.lanes.as_ref().map(Vec::len)})).collect::<Vec<_>>(),
                "pending": pending,
                "barrier_pending": held,
                "handovers": snap.handovers.get(name).map(|h| h.iter().map(|(from, o)| json!({"from": from, "to": o.to})).collect::<Vec<_>>()).unwrap_or_default(),
            })
        })
        .collect();
    json!({
        "controller": snap.controller,
        "config": snap.config.as_ref().map(|c| c.hash.clone()),
        "nodes": nodes,
        "tenants": tenants,
        "moves": snap.tenants.iter().filter_map(|(name, (t, _))| {
            t.moving.as_ref().map(|m| json!({"tenant": name, "from": t.owner, "to": m.to, "fenced": m.fenced}))
        }).collect::<Vec<_>>(),
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
        let digest: String = text(&n["config"]).chars().take(12).collect();
        let config = match n["config_current"].as_bool() {
            Some(true) => format!("the cluster's ({digest})"),
            Some(false) => {
                format!("NOT the cluster's ({digest}): reload it with the cluster's file")
            }
            None => "-".to_owned(),
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
    for m in s["moves"].as_array().into_iter().flatten() {
        println!(
            "moving: tenant {} from {} to {} ({})",
            text(&m["tenant"]),
            text(&m["from"]),
            text(&m["to"]),
            if m["fenced"] == json!(true) {
                "fenced, flipping"
            } else {
                "fencing"
            }
        );
    }
    println!();
    println!(
        "{:<16} {:<16} {:>6} {:>8}  BARRIER (pending held)",
        "TENANT", "OWNER", "EPOCH", "PENDING"
    );
    let alive: Vec<String> = s["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["alive"] == json!(true))
        .map(|n| text(&n["id"]))
        .collect();
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
                let mut held = t["barrier_pending"].get(&at).map_or_else(
                    || "pending unknown".to_owned(),
                    |p| format!("{p} pending there"),
                );
                if let Some(n) = d["lanes"].as_u64() {
                    held.push_str(&format!(", holding {n} lanes"));
                }
                if alive.contains(&text(&d["node"])) {
                    format!("{at} ({held}, draining)")
                } else {
                    format!("{at} ({held}; node down: it drains when back, or forfeit)")
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
        for h in t["handovers"].as_array().into_iter().flatten() {
            println!(
                "{:<16} handing over from {} to {}: dead letters, quarantine, archive",
                "",
                text(&h["from"]),
                text(&h["to"])
            );
        }
    }
}
