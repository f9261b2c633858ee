//! `ankusa`: the relay binary. CLI wiring only (docs/design.md section 1): the
//! commands parse their arguments and call the crates.
//!
//! - `ankusa serve [--config FILE] [--drop-unconfigured]`: runs the relay (without `--config`, the
//!   embedded demo configuration: RocksDB under `./data`, ingest on
//!   127.0.0.1:8080, admin on 127.0.0.1:8081, source `/hooks/demo` delivering
//!   to `./deliveries.ndjson` ordered by `x-entity-id`).
//! - `ankusa send FILE...`: posts corpus files to a running relay.
//! - `ankusa check-config FILE`: loads a configuration and reports what is wrong.
//! - `ankusa tenants`, `sources`, `hooks show`, `dlq list|revive|drop`,
//!   `pause`, `resume`, `quarantine list|show|release|drop`, `replay`,
//!   `purge-tenant`, `retire-source`, `jobs`, `reload`, `transform test`: the operator's
//!   commands, over the admin API of a running relay (`admin_cli`).
//! - `ankusa cluster status|move|drain|undrain|forfeit --config FILE`: cluster mode's catalog
//!   in etcd, read and changed directly (`cluster_cli`).
//! - `ankusa top [--once] [--interval-ms N]`: a terminal view of a running
//!   relay, refreshed every N ms, over the same admin API (`top`).
//! - `ankusa store check DATA_DIR [--repair-counters]`: the invariant checker
//!   on a stopped store (`store`).
//! - `ankusa store export DATA_DIR FILE`, `ankusa store import FILE DATA_DIR
//!   --store B`: a stopped store to and from a backend-neutral dump (`store`);
//!   `ankusa store backup FILE`: the same dump of a running relay's store,
//!   through its admin API (`admin_cli`).
//! - `ankusa fixture --format N OUT_FILE`: the checked-in store fixture of a
//!   format, built deterministically (`fixture`).
//! - `ankusa store migrate DATA_DIR [--dry-run]`: the store format migrations
//!   on a stopped store (`migrate`).

mod admin_cli;
mod cluster;
mod cluster_cli;
mod fixture;
mod limits;
mod migrate;
mod notifications;
mod notify;
mod open;
mod reload;
mod send;
mod serve;
mod settings;
mod sinks;
mod store;
mod takeover;
mod telemetry;
mod top;
mod unconfigured;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Ankusa: a self-hosted webhook relay.
#[derive(Parser)]
#[command(version, about, after_help = admin_cli::EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the relay.
    Serve {
        /// The YAML configuration (config/ankusa.example.yaml documents every
        /// option). Without it, the embedded demo configuration.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Dead-letter, at start, the queued deliveries of sources and sink
        /// entries that are no longer in the configuration (reason "source
        /// removed from the config" / "sink removed from the config"). Without
        /// it, such deliveries stop the start, naming each source and sink.
        #[arg(long)]
        drop_unconfigured: bool,
        /// The format of the log lines: `text` (human-readable) or `json`
        /// (one JSON object a line, tracing-subscriber's JSON formatter).
        /// Overrides `node.log_format`; without either, `text`. `RUST_LOG`
        /// filters both (README, "Logs").
        #[arg(long, value_enum)]
        log_format: Option<serve::LogFormatArg>,
        /// Take over from the relay serving the same data_dir without
        /// refusing a connection (an upgrade to a new binary, a change a
        /// reload refuses): this process takes its listening sockets, holds
        /// the connections it accepts while that relay stops and closes the
        /// store, then serves them. If this process cannot serve, the old one
        /// serves again and this one exits non-zero saying why (README,
        /// "Changing a running relay").
        #[arg(long)]
        takeover: bool,
        /// With --takeover: how long a held connection waits for this
        /// process to serve before it is answered 503 with Retry-After, in
        /// seconds (1 to 60). A store that takes longer to open (a large fjall
        /// journal) needs more.
        #[arg(long, value_name = "SECONDS", default_value_t = 5, requires = "takeover", value_parser = clap::value_parser!(u64).range(1..=60))]
        takeover_hold: u64,
    },
    /// POST provider webhooks saved in the corpus format to a running relay.
    Send {
        /// Corpus files (`{"method", "path_hint", "headers", "body"}`).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The relay's ingest address.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Post to this path instead of each file's `path_hint`.
        #[arg(long)]
        path: Option<String>,
        /// Send the files that load even if others cannot be read or parsed,
        /// and go on after a request that got no answer.
        #[arg(long)]
        keep_going: bool,
        /// The most one request may take, in milliseconds.
        #[arg(long, default_value_t = send::DEFAULT_TIMEOUT_MS)]
        timeout_ms: u64,
        /// Sign every file again before it is posted, with this secret for
        /// its scheme and the current time (the corpus's timestamps are
        /// years old, so a source that checks freshness refuses them as
        /// stored). SCHEME is github, stripe, shopify, slack or
        /// standard_webhooks (the config's verification types), or twilio;
        /// SECRET is the secret itself or env:NAME. Repeat the option for
        /// each scheme, e.g. `--resign stripe=whsec_... --resign
        /// github=env:GH_SECRET`. Each file's scheme is found from its
        /// signature headers; its timestamp becomes now and its signature is
        /// computed over the exact body (headers keep their order and
        /// names; Twilio signs the URL posted to). A signed file whose scheme
        /// has no --resign is an error, and nothing is sent; files without a
        /// signature header are sent as stored.
        #[arg(long, value_name = "SCHEME=SECRET")]
        resign: Vec<String>,
    },
    /// The store: `store check DATA_DIR` runs the invariant checker on a
    /// stopped relay's store, `store migrate DATA_DIR` brings it to this
    /// ankusa's store format, `store export` and `store import` move it
    /// between backends through a backend-neutral dump, and `store backup
    /// FILE` writes that dump of a running relay's store.
    #[command(subcommand)]
    Store(StoreCmd),
    /// Write the store fixture of a store format (a dump of a scripted
    /// scenario, the same bytes every run; fixtures/README.md): exit 0
    /// written, 2 an unknown format or OUT_FILE cannot be written.
    Fixture {
        /// The store format: 1 (no lanes) or 2 (ordering lanes).
        #[arg(long)]
        format: u32,
        /// The dump to write.
        out_file: PathBuf,
    },
    /// Load a configuration file and report every problem in it.
    CheckConfig {
        /// The YAML configuration.
        file: PathBuf,
    },
    /// A transform worker process (docs/design.md section 6, "Transforms"):
    /// the relay starts these itself and talks to them over stdin and
    /// stdout. Not for operators.
    #[command(hide = true)]
    TransformWorker,
    /// Every tenant: pending, dead, lanes, the oldest due hook's age, bounds.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Tenants {
        #[command(flatten)]
        conn: admin_cli::Conn,
    },
    /// A live view of a running relay, refreshed every --interval-ms: ingest
    /// and delivery rates per source and sink kind, pending, in flight,
    /// lanes, blocked lanes, dead letters, the oldest due age, per tenant.
    /// q, Esc or Ctrl-C quit. With --once, or when stdout is not a terminal,
    /// one plain-text frame.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Top(top::Args),
    /// Cluster mode (README, "Running a cluster"): `cluster status` shows
    /// the nodes and who owns each tenant; `move`, `drain` and `undrain`
    /// move tenants between nodes (an upgrade); `forfeit` lifts the epoch
    /// barrier of a node gone for good. They read and change the catalog in
    /// etcd, named by a node's configuration file.
    #[command(subcommand, after_help = cluster_cli::EXIT_CODES)]
    Cluster(cluster_cli::ClusterCmd),
    /// Every source: its sinks, how they are ordered, their breakers.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Sources {
        #[command(flatten)]
        conn: admin_cli::Conn,
    },
    /// Hooks: `hooks show ID` or `hooks show --tenant T --seq N`.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Hooks {
        #[command(flatten)]
        conn: admin_cli::Conn,
        #[command(subcommand)]
        cmd: admin_cli::HooksCmd,
    },
    /// The dead-letter queue: list, revive, drop.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Dlq {
        #[command(flatten)]
        conn: admin_cli::Conn,
        #[command(subcommand)]
        cmd: admin_cli::DlqCmd,
    },
    /// Pause a source, or one sink entry of it (--sink): its hooks are still
    /// accepted and committed, none is delivered to it until `resume`.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Pause {
        #[command(flatten)]
        conn: admin_cli::Conn,
        /// The source's name.
        source: String,
        /// Only this sink entry of the source.
        #[arg(long)]
        sink: Option<String>,
        /// Why (shown with the pause).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Lift a pause made with `pause` (a pause set by the configuration
    /// stays until the configuration changes and the relay restarts).
    #[command(after_help = admin_cli::EXIT_CODES)]
    Resume {
        #[command(flatten)]
        conn: admin_cli::Conn,
        /// The source's name.
        source: String,
        /// Only this sink entry of the source.
        #[arg(long)]
        sink: Option<String>,
    },
    /// Make the running relay re-read its configuration file and apply it
    /// without a restart (the same as SIGHUP): tenants, sources, sinks,
    /// secrets, retry, breaker and bounds change live; a file that does not
    /// load, or a change that needs a restart, changes nothing and is
    /// printed (exit 1).
    #[command(after_help = admin_cli::EXIT_CODES)]
    Reload {
        #[command(flatten)]
        conn: admin_cli::Conn,
    },
    /// Sink entries' transforms (jq programs): `test` runs one on a sample
    /// body and prints what the sink would get.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Transform {
        #[command(flatten)]
        conn: admin_cli::Conn,
        #[command(subcommand)]
        cmd: admin_cli::TransformCmd,
    },
    /// Quarantined hooks: list, show, release, drop.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Quarantine {
        #[command(flatten)]
        conn: admin_cli::Conn,
        #[command(subcommand)]
        cmd: admin_cli::QuarantineCmd,
    },
    /// Replay a source's archived hooks received in a time range, as new
    /// hooks with their original idempotency keys (a job).
    #[command(after_help = admin_cli::EXIT_CODES)]
    Replay {
        #[command(flatten)]
        conn: admin_cli::Conn,
        #[command(flatten)]
        args: admin_cli::ReplayArgs,
    },
    /// Delete every hook, delivery, dead letter and quarantined hook of a
    /// tenant (a job; needs --yes). Its hooks are refused meanwhile.
    #[command(name = "purge-tenant", after_help = admin_cli::EXIT_CODES)]
    PurgeTenant {
        #[command(flatten)]
        conn: admin_cli::Conn,
        /// The tenant's name.
        tenant: String,
        /// Confirm: the tenant's data is gone for good.
        #[arg(long)]
        yes: bool,
        /// Wait for the job with a progress bar.
        #[arg(long)]
        wait: bool,
    },
    /// Dead-letter every queued delivery of a source (a retired source; a
    /// job; needs --yes).
    #[command(name = "retire-source", after_help = admin_cli::EXIT_CODES)]
    RetireSource {
        #[command(flatten)]
        conn: admin_cli::Conn,
        /// The source's name.
        source: String,
        /// Only this tenant's deliveries.
        #[arg(long)]
        tenant: Option<String>,
        /// The dead-letter reason (default "source retired through the admin API").
        #[arg(long)]
        reason: Option<String>,
        /// Confirm.
        #[arg(long)]
        yes: bool,
        /// Wait for the job with a progress bar.
        #[arg(long)]
        wait: bool,
    },
    /// Admin jobs: list them, show one (--wait: until it ends), cancel one.
    #[command(after_help = admin_cli::EXIT_CODES, args_conflicts_with_subcommands = true)]
    Jobs {
        #[command(flatten)]
        conn: admin_cli::Conn,
        /// A job's id.
        id: Option<u64>,
        /// Wait until the job ends, with a progress bar.
        #[arg(long, requires = "id")]
        wait: bool,
        #[command(subcommand)]
        cmd: Option<admin_cli::JobsCmd>,
    },
}

#[derive(Subcommand)]
enum StoreCmd {
    /// Check every invariant of a stopped store (docs/design.md section 4)
    /// and print every violation: exit 0 and a one-line summary when it is
    /// clean, 1 when there is a violation, 2 when DATA_DIR holds no store, 3
    /// when the store cannot be opened (a running relay has it open, its WAL
    /// is damaged, it has data files but no format stamp). A RocksDB store
    /// is opened read-only (nothing written: a full or read-only disk is
    /// fine); a fjall store is opened as a start opens it (fjall cuts its
    /// journal at the first entry that does not decode, for good: check a
    /// copy, `cp -a`, to keep the original as it is).
    Check {
        /// The relay's node.data_dir (with store-rocksdb/ or store-fjall/ in
        /// it), or a store directory itself. Its backend is read from its
        /// files.
        data_dir: PathBuf,
        /// Only this backend's store (when data_dir holds both).
        #[arg(long, value_enum)]
        store: Option<open::Backend>,
        /// Set every maintained counter (pending, bytes, in_flight, dead,
        /// dead_bytes, quarantined, lanes, lanes_blocked, lane_members, and
        /// the node aggregate of every field) to what the keys add up to, in
        /// one batch; print each old and new value, then check again.
        #[arg(long)]
        repair_counters: bool,
    },
    /// Write a stopped store to FILE as a backend-neutral dump (docs/design.md
    /// section 8): every key of every column family, each with a CRC32, and
    /// a trailer with counts and a digest. FILE must not exist; it appears
    /// only once complete. Exit 0 written, 2 usage (no store at DATA_DIR,
    /// two stores and no --store, FILE exists), 3 the store cannot be opened
    /// (a running relay has it open) or read, 4 FILE cannot be written.
    Export {
        /// The relay's node.data_dir, or a store directory itself.
        data_dir: PathBuf,
        /// The dump to write.
        file: PathBuf,
        /// Only this backend's store (when data_dir holds both).
        #[arg(long, value_enum)]
        store: Option<open::Backend>,
    },
    /// Write a running relay's store to FILE as the same dump `store export`
    /// writes, from one snapshot, while the relay takes and delivers hooks
    /// (its admin API, `GET /v1/backup`; docs/design.md section 8). FILE
    /// must not exist; it appears only once the whole dump arrived. Restore
    /// with `store import`. Exit 0 written, 1 the relay refused (a backup
    /// already runs) or cut the dump, 2 usage (FILE exists), 3 the admin
    /// listener cannot be reached, 4 unauthorized.
    #[command(after_help = admin_cli::EXIT_CODES)]
    Backup {
        #[command(flatten)]
        conn: admin_cli::Conn,
        /// The dump to write.
        file: PathBuf,
    },
    /// Load a dump into a new store of the backend --store names, in
    /// DATA_DIR/store-<backend>/ (DATA_DIR is created if missing; its parent must exist). Every
    /// record's CRC32, the counts and the digest are checked; the store is
    /// written into a new directory beside the target and moved into place
    /// only when all of it verified, so a refused dump leaves DATA_DIR as it
    /// was. Exit 0 loaded, 1 the dump is refused (the record and its byte
    /// offset are named), 2 usage (FILE missing, the target store exists, DATA_DIR is a file),
    /// 3 the new store cannot be created or written, 4 FILE cannot be read.
    Import {
        /// The dump.
        file: PathBuf,
        /// The relay's node.data_dir to create the store in.
        data_dir: PathBuf,
        /// The backend to load it into.
        #[arg(long, value_enum)]
        store: open::Backend,
    },
    /// Bring a stopped store to the store format this ankusa reads (what
    /// `serve` does at start; docs/design.md section 8). Forward only: a
    /// store cannot go back to an older format, so export a backup first.
    /// Exit 0 when migrated, nothing to do, or the dry run printed; 1 when a
    /// batch failed (run it again: it resumes); 2 when DATA_DIR holds no
    /// store; 3 when the store cannot be opened (a running relay has it
    /// open) or this ankusa cannot migrate it (a newer store format).
    Migrate {
        /// The relay's node.data_dir (with store-rocksdb/ or store-fjall/ in
        /// it), or a store directory itself.
        data_dir: PathBuf,
        /// Only this backend's store (when data_dir holds both).
        #[arg(long, value_enum)]
        store: Option<open::Backend>,
        /// Print each migration that would run (from -> to, what it
        /// rewrites, whether it only stamps) and write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

fn main() -> ExitCode {
    // SIGHUP: ignored from the first line of the process, so that a reload
    // sent as the relay starts (`systemctl reload` right after a start) never
    // ends it; `serve` installs its reload handler once it runs, every other
    // command goes back to the default below (a closed terminal ends it).
    // SAFETY: called once at start, before any other thread exists.
    // SIGUSR2 (start a successor that takes over) likewise.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGUSR2, libc::SIG_IGN);
    }
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve { .. }) {
        // SAFETY: as above.
        unsafe {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            libc::signal(libc::SIGUSR2, libc::SIG_DFL);
        }
        // A command whose output is piped into `head` stops quietly when the
        // pipe closes, as other command-line tools do, instead of panicking
        // on the failed write (Rust ignores SIGPIPE by default). `serve` keeps
        // ignoring it: a closed socket must be an error, not a kill.
        // SAFETY: called once at start, before any other thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match cli.command {
        Command::TransformWorker => transform_worker(),
        Command::Serve {
            config,
            drop_unconfigured,
            log_format,
            takeover,
            takeover_hold,
        } => {
            use_transform_workers();
            serve::main(
                config,
                drop_unconfigured,
                log_format,
                takeover.then(|| std::time::Duration::from_secs(takeover_hold)),
            )
        }
        Command::Send {
            files,
            url,
            path,
            keep_going,
            timeout_ms,
            resign,
        } => send::main(&send::Args {
            files: &files,
            url: &url,
            path: path.as_deref(),
            keep_going,
            timeout_ms,
            resign: &resign,
        }),
        Command::Tenants { conn } => admin_cli::main(&conn, admin_cli::Command::Tenants),
        Command::Top(args) => top::main(&args),
        Command::Cluster(cmd) => cluster_cli::main(cmd),
        Command::Sources { conn } => admin_cli::main(&conn, admin_cli::Command::Sources),
        Command::Hooks { conn, cmd } => admin_cli::main(&conn, admin_cli::Command::Hooks(cmd)),
        Command::Dlq { conn, cmd } => admin_cli::main(&conn, admin_cli::Command::Dlq(cmd)),
        Command::Jobs {
            conn,
            id,
            wait,
            cmd,
        } => admin_cli::main(&conn, admin_cli::Command::Jobs { id, wait, cmd }),
        Command::Pause {
            conn,
            source,
            sink,
            reason,
        } => admin_cli::main(
            &conn,
            admin_cli::Command::Pause {
                source,
                sink,
                reason,
                resume: false,
            },
        ),
        Command::Resume { conn, source, sink } => admin_cli::main(
            &conn,
            admin_cli::Command::Pause {
                source,
                sink,
                reason: None,
                resume: true,
            },
        ),
        Command::Quarantine { conn, cmd } => {
            admin_cli::main(&conn, admin_cli::Command::Quarantine(cmd))
        }
        Command::Reload { conn } => admin_cli::main(&conn, admin_cli::Command::Reload),
        Command::Transform { conn, cmd } => {
            admin_cli::main(&conn, admin_cli::Command::Transform(cmd))
        }
        Command::Replay { conn, args } => admin_cli::main(&conn, admin_cli::Command::Replay(args)),
        Command::PurgeTenant {
            conn,
            tenant,
            yes,
            wait,
        } => admin_cli::main(&conn, admin_cli::Command::PurgeTenant { tenant, yes, wait }),
        Command::RetireSource {
            conn,
            source,
            tenant,
            reason,
            yes,
            wait,
        } => admin_cli::main(
            &conn,
            admin_cli::Command::RetireSource {
                source,
                tenant,
                reason,
                yes,
                wait,
            },
        ),
        Command::Store(StoreCmd::Check {
            data_dir,
            store,
            repair_counters,
        }) => store::main(&store::Args {
            dir: &data_dir,
            store,
            repair_counters,
        }),
        Command::Store(StoreCmd::Export {
            data_dir,
            file,
            store,
        }) => store::export_main(&store::ExportArgs {
            dir: &data_dir,
            file: &file,
            store,
        }),
        Command::Store(StoreCmd::Backup { conn, file }) => admin_cli::backup_main(&conn, &file),
        Command::Store(StoreCmd::Import {
            file,
            data_dir,
            store,
        }) => store::import_main(&store::ImportArgs {
            file: &file,
            dir: &data_dir,
            store,
        }),
        Command::Fixture { format, out_file } => fixture::main(format, &out_file),
        Command::Store(StoreCmd::Migrate {
            data_dir,
            store,
            dry_run,
        }) => migrate::main(&migrate::Args {
            dir: &data_dir,
            store,
            dry_run,
        }),
        Command::CheckConfig { file } => match serve::load(Some(&file)) {
            Ok(c) => {
                // The file's own sources and tenants, not the internal ones
                // its notify destinations add (docs/design.md section 5,
                // "Notifications").
                let tenants = c
                    .tenants
                    .iter()
                    .filter(|t| !ankusa_config::is_internal(&t.name))
                    .count();
                let notify = c.notify.as_ref().map_or_else(String::new, |n| {
                    format!(
                        ", {}",
                        count(
                            n.destinations.len(),
                            "notify destination",
                            "notify destinations"
                        )
                    )
                });
                println!(
                    "{}: ok ({}, {}{notify})",
                    file.display(),
                    count(c.configured_sources().count(), "source", "sources"),
                    count(tenants, "tenant", "tenants")
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                ExitCode::from(2)
            }
        },
    }
}

/// `1 tenant`, `2 tenants`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Runs the relay's transforms in worker processes of this executable
/// (docs/design.md section 6, "Transforms"), so a program that overflows a
/// stack or an allocation ends a worker, not the relay. `/proc/self/exe`
/// where there is one: it starts the file this process runs even after an
/// upgrade replaced it on disk (a worker must be the relay's own version).
fn use_transform_workers() {
    let proc_exe = PathBuf::from("/proc/self/exe");
    let program = if proc_exe.exists() {
        proc_exe
    } else {
        match std::env::current_exe() {
            Ok(p) => p,
            // No path to start: the runs stay on threads of the relay.
            Err(_) => return,
        }
    };
    ankusa_transform::use_worker_processes(ankusa_transform::WorkerCommand {
        program,
        args: vec!["transform-worker".into()],
        arg0: Some("ankusa".into()),
    });
}

/// `ankusa transform-worker`: names itself `ankusa` (started as
/// `/proc/self/exe`, its process name would be `exe`: `ps -C ankusa` and
/// `pgrep ankusa` find it so), bounds its address space
/// ([`ankusa_transform::worker::ADDRESS_SPACE_BYTES`]), then serves the
/// relay that started it until its stdin ends.
fn transform_worker() -> ExitCode {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16
    // bytes, which this is; it renames this (the main) thread only.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"ankusa".as_ptr());
    }
    let bytes = libc::rlim_t::try_from(ankusa_transform::worker::ADDRESS_SPACE_BYTES)
        .unwrap_or(libc::RLIM_INFINITY);
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit reads the struct it is given and changes only this
    // process's limit; called before the worker makes any thread. A failure
    // leaves the limit as it was (the worker then runs unbounded, as the
    // relay's threads would).
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &limit);
    }
    ankusa_transform::worker::main()
}
