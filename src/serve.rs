//! `ankusa serve`: open the store, register the configuration's names, build
//! the sinks, start the Writer, the pipeline, the ingest and admin listeners,
//! and stop cleanly on SIGTERM/SIGINT (docs/design.md section 5).
//!
//! Shutdown order: the ingest listener stops accepting and answers 503 to new
//! hooks, requests in progress finish (their commits included), the Writer
//! drains and stops, the pipeline finishes the calls in flight and flushes
//! their outcomes (waiting at most `ankusa_pipeline::SHUTDOWN_WAIT_MS` for a
//! destination that does not answer: those rows stay claimed and are
//! delivered again after the next start), then the process exits 0. Nothing acknowledged is lost: it
//! was committed `Sync` before its 200.
//!
//! Limits (docs/design.md section 5, "Limits"; [`crate::limits`]): before
//! anything else `serve` fixes the allocator's mmap threshold, raises its
//! file-descriptor soft limit to the hard limit and splits it between the
//! store, the sinks and the two listeners' connection caps (one log line gives
//! the limit and the caps; a limit too low for the configuration refuses the
//! start, saying how many it needs). The body budget is
//! `listeners.body_budget_bytes`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ankusa_admin::{
    AdminState, BoxFuture, BreakerReport, ControlFailure, PipelineControl, PipelineWork,
    serve_admin,
};
use ankusa_config::{Config, LogFormat, StoreBackend};
use ankusa_edge::server::{Edge, EdgeStats, IngestRoutes};
use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{CounterMirror, Durability, Kv};
use ankusa_keys::index::{CounterField, counter_key};
use ankusa_keys::meta::PauseTarget;
use ankusa_keys::{LaneId, SourceId, TenantOrd};
use ankusa_pipeline::retention::{RetentionConfig, RetentionStats};
use ankusa_pipeline::{BreakerState, ControlError, Pipeline, PipelineHandle};
use ankusa_queue::writer::{Writer, WriterConfig};
use anyhow::{Context, bail};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::open::store_dir;

pub fn main(
    config: Option<PathBuf>,
    drop_unconfigured: bool,
    log_format: Option<LogFormatArg>,
    takeover: Option<std::time::Duration>,
) -> ExitCode {
    // SIGHUP is ignored since `main`'s first line, and a reload once the
    // reload task's handler is installed (on the runtime, below).
    // Before any thread exists (mallopt is not for a running program).
    let large_blocks_returned = crate::limits::return_large_blocks();
    // The binary's path now, before an upgrade can replace the file: SIGUSR2
    // starts the successor from that path (crate::takeover::Successor).
    let successor = crate::takeover::Successor::of_this_process();
    // Nothing logs through tracing before the config is loaded (its errors
    // go to stderr as one line), so the format can come from the file.
    let mut cfg = match load(config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let file = config.as_ref().map_or_else(
                || "the embedded demo config".to_owned(),
                |p| p.display().to_string(),
            );
            eprintln!("ankusa: {file}: {e}");
            return ExitCode::from(2);
        }
    };
    // The flag wins; what runs is in `cfg` for the lines written below.
    cfg.node.log_format = log_format.map_or(cfg.node.log_format, LogFormatArg::format);
    let json = cfg.node.log_format == LogFormat::Json;
    // The runtime before the log subscriber: the OTel export's batch
    // processor (a build with `otel`) runs its task on it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let telemetry = match crate::telemetry::init(
        cfg.node.log_format,
        &cfg.node,
        rt.as_ref().ok().map(|rt| rt.handle()),
    ) {
        Ok(t) => t,
        Err(e) => {
            // An OTel setting the export cannot run with: a configuration
            // error, like a file that does not load.
            fatal(json, &e);
            return ExitCode::from(2);
        }
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            fatal(json, &format!("cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let fds = match file_descriptors(&cfg) {
        Ok(b) => b,
        Err(e) => {
            fatal(json, &e);
            telemetry.shutdown();
            return ExitCode::FAILURE;
        }
    };
    if !large_blocks_returned {
        tracing::debug!(
            "the C library's mmap threshold is its own: large freed blocks may stay resident"
        );
    }
    let reload = ReloadStart {
        file: config.clone(),
        log_format_flag: log_format.map(LogFormatArg::format),
    };
    let result = rt.block_on(async move {
        // SIGHUP is a reload (docs/design.md section 5, "Reload"), never the
        // signal's default action (the end of the process): its handler is
        // installed first, and one that arrives while the relay starts is
        // taken by the reload task once it runs.
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        other_stores(&cfg)?;
        // Before a takeover begins: a setting the store cannot be opened
        // with must not stop the serving process first.
        #[cfg(feature = "rocksdb")]
        let recovery = match cfg.node.store {
            StoreBackend::RocksDb => wal_recovery()?,
            _ => ankusa_engine_rocksdb::WalRecovery::TornTail,
        };
        // The listeners before the store: a port in use refuses the start
        // without leaving a new, empty store behind (a new user's report).
        // A takeover gets them from the process serving the data_dir, holds
        // what it accepts, and has that process close the store.
        let (listeners, taking, stop) = match takeover {
            None => (Listeners::bind(&cfg).await?, None, None),
            Some(hold) => {
                let mut stop: Stop = Box::pin(shutdown_signal());
                let (listeners, t) =
                    take_over(&cfg, hold, fds.ingest_connections, &mut stop).await?;
                (listeners, Some(t), Some(stop))
            }
        };
        std::fs::create_dir_all(&cfg.node.data_dir)
            .with_context(|| format!("creating data_dir {}", cfg.node.data_dir.display()))?;
        let store_dir = store_dir(&cfg.node.data_dir, cfg.node.store.as_str());
        let backend = cfg.node.store;
        let start = Start {
            cfg,
            drop_unconfigured,
            fds,
            listeners,
            reload,
            hangup,
            taking,
            successor,
            stop,
        };
        match backend {
            #[cfg(feature = "rocksdb")]
            StoreBackend::RocksDb => {
                serve_store(start, || {
                    let opened = crate::open::serve_rocksdb(&store_dir, fds.store_files, recovery)?;
                    if recovery == ankusa_engine_rocksdb::WalRecovery::PointInTime {
                        warn!(dir = %store_dir.display(), "ANKUSA_ROCKSDB_WAL_RECOVERY=point-in-time: the WAL was replayed up to its first record that does not verify, and the rest dropped for good");
                    }
                    Ok(opened)
                })
                .await
            }
            #[cfg(not(feature = "rocksdb"))]
            StoreBackend::RocksDb => {
                let e = anyhow::anyhow!(
                    "node.store is rocksdb, but this binary was built without the `rocksdb` feature \
                     (cargo build --no-default-features): build it with the feature, or set node.store: fjall"
                );
                if let Some(t) = start.taking {
                    t.fail(&e).await;
                }
                Err(e)
            }
            StoreBackend::Fjall => {
                serve_store(start, || Ok(crate::open::serve_fjall(&store_dir, fds.store_files)?)).await
            }
            StoreBackend::Memory => {
                serve_store(start, || Ok((MemoryKv::new(), crate::open::Creation::memory()))).await
            }
        }
    });
    // The spans still queued go out while the runtime still runs.
    telemetry.shutdown();
    // Blocking work still running does not hold the exit: a takeover's
    // handshake with a client that says nothing (its deadlines), a backup's
    // stream to a client that went away. The store is closed by now.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            fatal(json, &format!("{e:#}"));
            // A refusal of the store has its own code (3: restarting the
            // same binary on the same store cannot help).
            ExitCode::from(
                e.downcast_ref::<crate::open::OpenError>()
                    .map_or(1, crate::open::OpenError::exit_code),
            )
        }
    }
}

/// Raises the file-descriptor soft limit to the hard limit and splits it
/// ([`crate::limits::budget`]); logs the limit and the shares in one line.
///
/// # Errors
/// The limit is too low for `cfg` (the message says how many it needs).
fn file_descriptors(cfg: &Config) -> Result<crate::limits::FdBudget, String> {
    let nofile = match crate::limits::raise_nofile() {
        Ok(n) => n,
        Err((e, Some(n))) => {
            warn!(error = %e, soft = n.soft, hard = n.hard, "could not raise the file-descriptor soft limit to the hard limit");
            n
        }
        Err((e, None)) => {
            return Err(format!(
                "cannot read the file-descriptor limit (getrlimit): {e}"
            ));
        }
    };
    let b = crate::limits::budget(nofile.soft, crate::limits::sink_fds(cfg))?;
    info!(
        nofile = b.nofile,
        soft_at_start = nofile.before,
        hard = nofile.hard,
        store_files = b.store_files,
        sink_fds = b.sink_fds,
        ingest_connections = b.ingest_connections,
        admin_connections = b.admin_connections,
        body_budget_bytes = cfg.listeners.body_budget_bytes,
        "file-descriptor limit {} (soft limit at start {}): store {} files, sinks {}, ingest {} connections, admin {} connections",
        b.nofile,
        nofile.before,
        b.store_files,
        b.sink_fds,
        b.ingest_connections,
        b.admin_connections,
    );
    Ok(b)
}

/// `ANKUSA_ROCKSDB_WAL_RECOVERY`: unset or `torn-tail` (the default: a
/// record torn at the WAL's end by a crash is dropped, a WAL damaged before
/// its end refuses the start), or `point-in-time` (an operator's choice for
/// one start: keep what precedes the damage, drop the rest for good).
#[cfg(feature = "rocksdb")]
fn wal_recovery() -> anyhow::Result<ankusa_engine_rocksdb::WalRecovery> {
    use ankusa_engine_rocksdb::WalRecovery;
    match std::env::var("ANKUSA_ROCKSDB_WAL_RECOVERY").as_deref() {
        Err(_) | Ok("" | "torn-tail") => Ok(WalRecovery::TornTail),
        Ok("point-in-time") => Ok(WalRecovery::PointInTime),
        Ok(other) => bail!(
            "ANKUSA_ROCKSDB_WAL_RECOVERY={other}: expected torn-tail (the default) or point-in-time"
        ),
    }
}

/// A fatal error of `serve` once the logs are set up: `ankusa: <message>` on
/// stderr, or in a JSON log an `error` event (every line stays JSON).
fn fatal(json: bool, message: &str) {
    if json {
        error!("{message}");
    } else {
        eprintln!("ankusa: {message}");
    }
}

/// `serve --log-format`: overrides `node.log_format`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

impl LogFormatArg {
    fn format(self) -> LogFormat {
        match self {
            LogFormatArg::Text => LogFormat::Text,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
}

/// The checks of the layers the configuration crate does not know, run on
/// each source while the file loads: each sink's options as its adapter reads
/// them (without connecting anywhere), sink types this binary was built
/// without, and what the edge cannot serve. Their problems are reported with
/// the file's own, so one run of `check-config` (or a refused `serve`) lists
/// every problem of the file.
pub fn check_source(s: &ankusa_config::Source) -> Vec<ankusa_config::Problem> {
    let mut out = Vec::new();
    for e in &s.sinks {
        if let Err(problems) = crate::sinks::check(e.kind, &e.options_json()) {
            for (option, message) in problems {
                let scope = ankusa_config::Scope::Sink {
                    source_name: s.name.clone(),
                    sink: e.name.clone(),
                    kind: e.kind.as_str().to_owned(),
                };
                out.push(ankusa_config::Problem {
                    scope,
                    option,
                    message,
                });
            }
        }
    }
    out.extend(ankusa_edge::server::check_source(s));
    out
}

/// Loads the configuration `serve` and `check-config` run: the file, or the
/// embedded demo without one, with every check `serve` would otherwise only
/// make after opening the store ([`check_source`]), and the checks of
/// `node.otel` this build makes ([`crate::telemetry::check`]).
pub fn load(path: Option<&std::path::Path>) -> Result<Config, ankusa_config::ConfigError> {
    let cfg = match path {
        Some(path) => Config::load_checked(path, &check_source)?,
        None => Config::from_yaml_checked(ankusa_config::DEFAULT_YAML, &|_| None, &check_source)?,
    };
    checked_telemetry(cfg)
}

/// [`load`] of a file's text already read (a reload reads it once, for its
/// hash and its configuration alike: `crate::reload`).
pub fn load_text(text: &str) -> Result<Config, ankusa_config::ConfigError> {
    let cfg = Config::from_yaml_checked(text, &ankusa_config::process_env, &check_source)?;
    checked_telemetry(cfg)
}

fn checked_telemetry(cfg: Config) -> Result<Config, ankusa_config::ConfigError> {
    // `node.otel` as this build reads it (its filter; or no OTel export at
    // all): once the rest of the file is valid.
    let problems = crate::telemetry::check(&cfg.node);
    if !problems.is_empty() {
        return Err(ankusa_config::ConfigError::Invalid { problems });
    }
    Ok(cfg)
}

/// A store of another backend in `data_dir`. When this backend has no store
/// there yet, the start is refused: a switched `node.store` would start an
/// empty store and leave the other one's hooks undelivered, most likely a
/// store that was meant to be moved (`ankusa store import`) first. An empty
/// `store-<backend>` directory made on purpose is a new store and starts.
/// When both exist, a warning says the other one's pending hooks wait.
fn other_stores(cfg: &Config) -> anyhow::Result<()> {
    let this = cfg.node.store.as_str();
    if this == "memory" {
        // Tests and demos: said at every start, with any store it leaves
        // aside (a new user's report: nothing told them).
        tracing::warn!(
            "node.store is memory: every hook it takes is lost when the relay stops (a 200 is not durable); use rocksdb or fjall for hooks that matter"
        );
        for other in ["rocksdb", "fjall"] {
            if store_dir(&cfg.node.data_dir, other).exists() {
                tracing::warn!(
                    data_dir = %cfg.node.data_dir.display(),
                    other,
                    "data_dir holds a {other} store; its pending hooks are not delivered by this memory store"
                );
            }
        }
        return Ok(());
    }
    let own = store_dir(&cfg.node.data_dir, this);
    for other in ["rocksdb", "fjall"] {
        if other == this || !store_dir(&cfg.node.data_dir, other).exists() {
            continue;
        }
        if !own.exists() {
            bail!(
                "node.store is {this}, and data_dir {} holds a {other} store but no {this} store: starting would create an empty \
                 {this} store and leave the {other} store's hooks undelivered. To move the store: stop, `ankusa store export {} FILE --store {other}`, \
                 `ankusa store import FILE {} --store {this}` (README, \"Moving a store between backends\"). To start an empty {this} store beside it \
                 on purpose: `mkdir {}`. Or set node.store back to {other}",
                cfg.node.data_dir.display(),
                cfg.node.data_dir.display(),
                cfg.node.data_dir.display(),
                own.display()
            );
        }
        tracing::warn!(
            data_dir = %cfg.node.data_dir.display(),
            other,
            "data_dir also holds a {other} store; its pending hooks are not delivered by this {this} store"
        );
    }
    Ok(())
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The ingest and admin listening sockets, bound before the store is opened
/// (or passed by the process a takeover replaces). They are kept for the
/// whole process: each run of the relay serves duplicates of them, so a
/// takeover that fails finds them still open (docs/design.md section 5,
/// "Takeover").
struct Listeners {
    ingest: std::net::TcpListener,
    admin: std::net::TcpListener,
}

impl Listeners {
    /// Binds `listeners.ingest` and `listeners.admin`; an address in use (or
    /// not this machine's) is an error naming the option.
    async fn bind(cfg: &Config) -> anyhow::Result<Self> {
        let ingest = tokio::net::TcpListener::bind(cfg.listeners.ingest)
            .await
            .with_context(|| format!("listeners.ingest: cannot bind {}", cfg.listeners.ingest))?;
        let admin = tokio::net::TcpListener::bind(cfg.listeners.admin)
            .await
            .with_context(|| format!("listeners.admin: cannot bind {}", cfg.listeners.admin))?;
        Ok(Self {
            ingest: ingest.into_std()?,
            admin: admin.into_std()?,
        })
    }

    /// A duplicate of one of them for a tokio task (the same socket and
    /// accept queue).
    fn serve(l: &std::net::TcpListener) -> anyhow::Result<tokio::net::TcpListener> {
        Ok(tokio::net::TcpListener::from_std(l.try_clone()?)?)
    }
}

/// A takeover in progress on the new process's side: the old process has
/// closed the store, and the ingest connections accepted meanwhile are held.
struct TakeoverStart {
    taking: crate::takeover::Taking,
    holding: ankusa_edge::server::hold::Holding,
}

impl TakeoverStart {
    /// This process cannot serve: its held connections are answered 503 with
    /// `Retry-After`, and the old process serves again.
    async fn fail(self, e: &anyhow::Error) {
        let held = self.holding.refuse_all().await;
        error!(
            old_pid = self.taking.old_pid,
            held,
            "takeover failed: process {} opens the store again and serves; the {held} connection(s) held here were answered 503 with Retry-After",
            self.taking.old_pid
        );
        self.taking.failed(format!("{e:#}")).await;
    }
}

/// Steps 1 to 3 of a takeover (crate::takeover): the old process's
/// listening sockets, held connections from now on, the store closed.
async fn take_over(
    cfg: &Config,
    hold: std::time::Duration,
    cap: usize,
    stop: &mut Stop,
) -> anyhow::Result<(Listeners, TakeoverStart)> {
    info!(
        socket = %crate::takeover::socket_path(&cfg.node.data_dir).display(),
        "takeover: asking the relay serving this data_dir for its listeners"
    );
    // A SIGTERM meanwhile ends this process, not the old one (which serves
    // on: a handshake that stops halfway changes nothing there).
    let (mut taking, passed) = tokio::select! {
        r = crate::takeover::ask(cfg) => r?,
        () = &mut *stop => bail!("--takeover: interrupted by SIGTERM or SIGINT before the handover began; the serving relay serves on"),
    };
    let holding =
        ankusa_edge::server::hold::Holding::start(Listeners::serve(&passed.ingest)?, hold, cap);
    info!(
        old_pid = taking.old_pid,
        old_version = %taking.old_version,
        hold_ms = hold.as_millis() as u64,
        "takeover: holding ingest connections while process {} stops and closes the store",
        taking.old_pid
    );
    // Likewise while the old process stops: the wait is dropped (its socket
    // closed), and the old process serves again.
    let stopped = tokio::select! {
        r = taking.stop_old() => r,
        () = stop => Err(anyhow::anyhow!(
            "interrupted by SIGTERM or SIGINT; process {} serves again",
            taking.old_pid
        )),
    };
    match stopped {
        Ok(true) => info!(
            old_pid = taking.old_pid,
            "takeover: the old process closed the store"
        ),
        Ok(false) => warn!(
            old_pid = taking.old_pid,
            "takeover: the old process ended before it said it closed the store; taking the store"
        ),
        Err(e) => {
            let held = holding.refuse_all().await;
            bail!("--takeover: {e:#} ({held} held connection(s) answered 503 with Retry-After)");
        }
    }
    Ok((
        Listeners {
            ingest: passed.ingest,
            admin: passed.admin,
        },
        TakeoverStart { taking, holding },
    ))
}

/// The stop on SIGTERM or SIGINT ([`shutdown_signal`]).
type Stop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Everything a run of the relay starts from, kept across the runs of one
/// process (a takeover that fails makes the old process run again).
struct Start {
    cfg: Config,
    drop_unconfigured: bool,
    fds: crate::limits::FdBudget,
    listeners: Listeners,
    reload: ReloadStart,
    hangup: Option<tokio::signal::unix::Signal>,
    taking: Option<TakeoverStart>,
    successor: Option<crate::takeover::Successor>,
    /// A takeover's stop, installed before it began (a SIGTERM during the
    /// handover must not take the default action), for its first run.
    stop: Option<Stop>,
}

/// How a run of the relay ended.
enum Ended {
    /// SIGTERM or SIGINT: the process exits.
    Stopped,
    /// A takeover asked this process to stop: it closes the store and hands
    /// over; `running` is the configuration it ran (reloads included), to run
    /// again if the takeover fails.
    HandingOver {
        handover: crate::takeover::Handover,
        running: Box<Config>,
    },
}

/// How long a process that hands over waits for the last other holder of
/// the store (an admin job's step, a backup's stream) to let it go.
const STORE_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a takeover retries the store's lock, which the old process's
/// end releases a moment after its socket closes.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens the store and runs the relay on it; when a takeover asks, closes
/// the store and hands over, and runs again if the new process does not
/// take over (docs/design.md section 5, "Takeover").
async fn serve_store<K: Kv>(
    mut start: Start,
    open: impl Fn() -> anyhow::Result<(K, crate::open::Creation)>,
) -> anyhow::Result<()> {
    let mut cfg = start.cfg.clone();
    let mut hangup = start.hangup.take();
    let mut kept: Option<(Arc<K>, crate::open::Creation)> = None;
    // After a takeover that failed, the new process may still be letting the
    // store's lock go: it is retried, as by a takeover.
    let mut taken_back = false;
    loop {
        let opened = match kept.take() {
            Some(k) => Ok(k),
            None => open_store(&open, start.taking.is_some() || taken_back)
                .await
                .map(|(kv, c)| (Arc::new(kv), c)),
        };
        let (kv, creation) = match opened {
            Ok(k) => k,
            // The new process said nothing in time but holds the store: it
            // serves, and this process has nothing left to do.
            Err(e) if taken_back && locked(&e) => {
                warn!(
                    "the store's lock is held by another process after the takeover ({e:#}): it serves the store; this process exits"
                );
                return Ok(());
            }
            Err(e) => {
                if let Some(t) = start.taking.take() {
                    t.fail(&e).await;
                }
                return Err(e);
            }
        };
        let ended = run(
            Arc::clone(&kv),
            cfg.clone(),
            creation.clone(),
            hangup.take(),
            &mut start,
        )
        .await;
        // A run that fails before it serves fails the takeover it began,
        // once the store is closed here: the old process opens it next.
        if let (Err(e), Some(t)) = (&ended, start.taking.take()) {
            if close_store(kv).await.is_some() {
                warn!(
                    "the store is still open here after {} s; the old process waits for its lock",
                    STORE_CLOSE_WAIT.as_secs()
                );
            }
            t.fail(e).await;
            return ended.map(|_| ());
        }
        let (handover, running) = match ended? {
            Ended::Stopped => return Ok(()),
            Ended::HandingOver { handover, running } => (handover, running),
        };
        cfg = *running;
        hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let new_pid = handover.new_pid;
        if let Some(kv) = close_store(kv).await {
            // Still held: this process serves on, on the store it has open.
            error!(
                new_pid,
                wait_s = STORE_CLOSE_WAIT.as_secs(),
                "takeover abandoned: the store is still in use here after the wait; serving again"
            );
            handover
                .abort(format!(
                    "the store was still in use after {} s",
                    STORE_CLOSE_WAIT.as_secs()
                ))
                .await;
            kept = Some((kv, creation));
            continue;
        }
        info!(
            new_pid,
            "takeover: the store is closed; process {new_pid} opens it"
        );
        match handover.released().await {
            crate::takeover::Handed::Taken => {
                info!(
                    new_pid,
                    "takeover done: process {new_pid} serves; this process exits"
                );
                return Ok(());
            }
            crate::takeover::Handed::Back(why) => {
                warn!(
                    new_pid,
                    "takeover failed ({why}): opening the store again and serving"
                );
                taken_back = true;
            }
        }
    }
}

/// Opens the store; in a takeover, waits out a lock the old process's end
/// has not released yet.
async fn open_store<K>(
    open: &impl Fn() -> anyhow::Result<(K, crate::open::Creation)>,
    retry_lock: bool,
) -> anyhow::Result<(K, crate::open::Creation)> {
    let deadline = std::time::Instant::now() + LOCK_RETRY;
    loop {
        match open() {
            Err(e) if retry_lock && std::time::Instant::now() < deadline && locked(&e) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

/// Whether `e` is the store's lock held by another process.
fn locked(e: &anyhow::Error) -> bool {
    e.downcast_ref::<crate::open::OpenError>().is_some_and(|o| {
        matches!(
            o,
            crate::open::OpenError::Locked { .. } | crate::open::OpenError::HeldBy { .. }
        )
    })
}

/// Lets the store go once this is its last holder: `None` when it is, after
/// the engine has closed it; the store back when something still holds it
/// after [`STORE_CLOSE_WAIT`].
async fn close_store<K: Kv>(kv: Arc<K>) -> Option<Arc<K>> {
    let deadline = tokio::time::Instant::now() + STORE_CLOSE_WAIT;
    while Arc::strong_count(&kv) > 1 {
        if tokio::time::Instant::now() >= deadline {
            return Some(kv);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The engine's close (RocksDB's flush of nothing, its lock's release) on
    // a blocking thread.
    let _ = tokio::task::spawn_blocking(move || drop(kv)).await;
    None
}

/// What a reload needs from the start: the file, `--log-format`.
#[derive(Clone)]
struct ReloadStart {
    file: Option<PathBuf>,
    log_format_flag: Option<LogFormat>,
}

async fn run<K: Kv>(
    kv: Arc<K>,
    mut cfg: Config,
    creation: crate::open::Creation,
    hangup: Option<tokio::signal::unix::Signal>,
    start: &mut Start,
) -> anyhow::Result<Ended> {
    let (drop_unconfigured, fds, reload) =
        (start.drop_unconfigured, start.fds, start.reload.clone());
    let (listeners, taking) = (&start.listeners, &mut start.taking);
    // Migrations first, before the signal handlers: a SIGTERM (or a crash)
    // in the middle of one ends the process, and the next start resumes it
    // after its last committed batch (docs/design.md section 8).
    crate::open::stamp::prepare(&*kv, &creation)?;
    // Invariant 6 (docs/design.md section 4), before anything is written: a
    // store holding a hook above its seq high-water mark would have it
    // overwritten by the next hook (the Writer refuses it too).
    if let Some(v) = ankusa_queue::seq_above_high_water(&*kv)? {
        bail!(
            "{v}. Nothing was changed; `ankusa store check` reports it. The store was not written by a relay alone \
             (an edited or cut dump?): import the dump it came from again, or restore another backup"
        );
    }
    // A SIGTERM from here on is a clean shutdown (shutdown_signal).
    let mut shutdown = start
        .stop
        .take()
        .unwrap_or_else(|| Box::pin(shutdown_signal()));
    // Cluster mode (docs/design.md section 11): join before the names are
    // numbered, which the catalog does for the whole cluster.
    let member = match &cfg.cluster {
        Some(c) => {
            let text = crate::reload::read_config(reload.file.as_deref())
                .await
                .map_err(|e| anyhow::anyhow!("cluster: the configuration file {e}"))?;
            let record = crate::cluster::config_record(&text)?;
            Some(crate::cluster::Member::join(&cfg, c, &record).await?)
        }
        None => None,
    };
    // A run that ends, however, stops the member's tasks (a clean stop
    // leaves the cluster first: below).
    let _member_stops = member.clone().map(MemberStops);
    let (batch, registry) = match &member {
        Some(m) => {
            let local = ankusa_queue::Registry::read(&*kv)?;
            let (tenants, sources) = m.number(&cfg, &local).await?;
            ankusa_queue::register_numbered(&*kv, &tenants, &sources)
                .map_err(|e| anyhow::anyhow!("cluster: {e}"))?
        }
        None => ankusa_queue::register(
            &*kv,
            cfg.tenants.iter().map(|t| t.name.as_str()),
            cfg.sources.iter().map(|s| s.name.as_str()),
        )?,
    };
    if let Some(m) = &member {
        m.set_names(&registry);
    }
    if !batch.is_empty() {
        kv.write(batch, Durability::Sync)?;
    }
    // Each sink entry's slot follows its name, then queued work of sources
    // and sink entries no longer configured: refuse to start, or dead-letter
    // it with --drop-unconfigured (docs/design.md section 5, "Unconfigured
    // sources and sinks").
    let stored_slots = crate::unconfigured::stored_slots(&*kv, &registry)?;
    crate::unconfigured::assign_slots(&mut cfg, &registry, &stored_slots)?;
    let found = crate::unconfigured::find(&*kv, &cfg, &registry, &stored_slots)?;
    if !found.is_empty() {
        if !drop_unconfigured {
            bail!("{}", crate::unconfigured::refusal(&found));
        }
        for u in &found {
            warn!(source = %u.source_name, sink = u.sink.0, pending = u.pending, "--drop-unconfigured: dead-lettering the queued deliveries of an unconfigured source or sink");
        }
        crate::unconfigured::drop_all(&*kv, &found, now_ms())?;
    }
    crate::unconfigured::remember(&*kv, &cfg, &registry, &stored_slots)?;
    // The start-up writes are done: from here every write goes through the
    // mirror of the queue bounds' counters (each tenant's and the node's
    // pending rows and bytes), so the edge's check of the bounds on every hook
    // reads memory, not the store (ankusa_engine::CounterMirror says why).
    let bound_counters = registry
        .tenants
        .values()
        .copied()
        .chain([TenantOrd::NODE])
        .flat_map(|t| {
            [CounterField::Pending, CounterField::Bytes].map(|f| counter_key(t, f).to_vec())
        });
    let kv = Arc::new(CounterMirror::new(kv, bound_counters)?);
    let built = crate::settings::Pipelined::build(&cfg, &registry, None).await?;
    let running_routes = built.routes.clone();
    let destinations = built.destinations.clone();
    let edge_routes = IngestRoutes::build(&cfg, &registry, None)?;

    let (writer, writer_handle) = Writer::new(Arc::clone(&kv), WriterConfig::default(), now_ms)?;
    let retention_writer = writer_handle.clone();
    let notify_writer = writer_handle.clone();
    let (pipeline, pipeline_handle) = Pipeline::new(
        Arc::clone(&kv),
        built.routes,
        built.dispatch,
        built.retry,
        built.breaker,
        now_ms,
    );
    let attempt_log = cfg.node.attempt_log;
    let pipeline = pipeline
        .due_floor(writer_handle.due_floor())
        .lane_rows(writer_handle.lane_rows())
        .attempt_log(ankusa_pipeline::AttemptLogConfig {
            enabled: attempt_log.enabled,
            max_attempts: attempt_log.max_attempts,
            max_body_bytes: attempt_log.max_body_bytes as usize,
        });
    let pipeline = match &member {
        Some(m) => {
            let m = Arc::clone(m);
            pipeline.fencing(Arc::new(move |t| m.claims(t)))
        }
        None => pipeline,
    };

    let wake = pipeline_handle.clone();
    let shutting_down = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(EdgeStats {
        body_budget: ankusa_edge::server::limits::BodyBudget::new(cfg.listeners.body_budget_bytes),
        ..EdgeStats::default()
    });
    stats.ingest.register_sources(&edge_routes.sources);
    let writer_metrics = writer_handle.metrics();
    let edge = Arc::new(Edge {
        kv: Arc::clone(&kv),
        writer: writer_handle,
        on_commit: Box::new(move || wake.wake()),
        routes: arc_swap::ArcSwap::from_pointee(edge_routes),
        max_connections: fds.ingest_connections,
        shutting_down: Arc::clone(&shutting_down),
        reservations: Default::default(),
        stats: Arc::clone(&stats),
        clock: Box::new(now_ms),
        owners: member
            .clone()
            .map(|m| m as Arc<dyn ankusa_edge::server::owners::Owners>),
    });
    let retention_stats = RetentionStats::default();
    let mut admin_ctx = ankusa_admin::Context::new(
        Arc::clone(&kv),
        Arc::clone(&pipeline_handle.ready),
        Arc::clone(&shutting_down),
        Arc::new(cfg.clone()),
        registry.clone(),
    );
    admin_ctx.clock = now_ms;
    if let Some(m) = &member {
        let m = Arc::clone(m);
        admin_ctx.unready = Some(Box::new(move || {
            if m.drained() {
                Some("drained (ankusa cluster undrain takes it back)".to_owned())
            } else if !m.lease_fresh() {
                // It can acknowledge no hook until etcd renews its lease: a
                // load balancer sends the providers elsewhere meanwhile.
                Some("the cluster lease is past its deadline (etcd not answering?)".to_owned())
            } else {
                None
            }
        }));
    }
    admin_ctx.pipeline = Some(Box::new(Control(pipeline_handle.clone())));
    let config_status = Arc::new(std::sync::Mutex::new(ankusa_admin::ConfigStatus {
        file: reload.file.as_ref().map(|p| p.display().to_string()),
        hash: crate::reload::config_hash(
            &crate::reload::read_config(reload.file.as_deref())
                .await
                .unwrap_or_default(),
        ),
        loaded_at_ms: now_ms(),
        ..ankusa_admin::ConfigStatus::default()
    }));
    let (reload_handle, reload_asks) = crate::reload::channel(Arc::clone(&config_status));
    admin_ctx.reload = Some(Box::new(reload_handle));
    admin_ctx.attach_edge(Arc::clone(&edge));
    let mut admin_state = AdminState::new(Arc::new(admin_ctx), stats);
    admin_state.max_connections = fds.admin_connections;
    admin_state.paused_sinks = Arc::clone(&pipeline_handle.paused_sinks);
    admin_state.retention_hooks_deleted = Arc::clone(&retention_stats.hooks_deleted);
    admin_state.retention_dedupe_expired = Arc::clone(&retention_stats.dedupe_expired);
    admin_state.forwarded_headers_dropped = Box::new(crate::sinks::forwarded_headers_dropped);
    if let Some(m) = &member {
        let (m, edge_stats) = (Arc::clone(m), Arc::clone(&edge.stats));
        let g = Arc::clone(&m);
        admin_state.cluster = Box::new(move || m.metrics(&edge_stats));
        admin_state.cluster_gauges = Box::new(move || g.gauges());
    }
    admin_state.writer = writer_metrics;
    let notify_stats = Arc::new(crate::notifications::NotifyStats::default());
    admin_state.notify = {
        let (stats, events, ctx) = (
            Arc::clone(&notify_stats),
            pipeline_handle.events.clone(),
            Arc::clone(&admin_state.ctx),
        );
        Box::new(move || crate::notifications::metrics(&stats, &events, &ctx))
    };
    admin_state.version = env!("CARGO_PKG_VERSION");
    admin_state.delivery = pipeline_handle.status.delivery();
    let status = pipeline_handle.status.clone();
    admin_state.breakers_by_kind = Box::new(move |now| {
        status
            .breakers_by_kind(now)
            .into_iter()
            .map(|(kind, c)| (kind, c.open, c.half_open))
            .collect()
    });
    let status = pipeline_handle.status.clone();
    admin_state.breakers = Box::new(move |tenant, source, sink, now| {
        match status.breaker(tenant, source, sink, now) {
            BreakerState::Closed { failures } => BreakerReport::Closed { failures },
            BreakerState::Open { until_ms } => BreakerReport::Open { until_ms },
            BreakerState::HalfOpen => BreakerReport::HalfOpen,
        }
    });
    let admin_state = Arc::new(admin_state);
    let reloader = crate::reload::Reloader {
        file: reload.file,
        log_format_flag: reload.log_format_flag,
        kv: Arc::clone(&kv),
        edge: Arc::clone(&edge),
        admin: Arc::clone(&admin_state.ctx),
        pipeline: pipeline_handle.clone(),
        sink_fds: fds.sink_fds,
        running: crate::reload::Running {
            cfg: Arc::new(cfg.clone()),
            routes: running_routes,
        },
        status: config_status,
        member: member.clone(),
    };
    let admin_hold = Arc::clone(&admin_state);
    // The ingest listener stops first; the admin listener answers until the
    // end (`/readyz` 503 "shutting down", `/metrics` while the pipeline drains).
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (admin_shutdown_tx, admin_shutdown_rx) = watch::channel(false);
    // The edge's stop carries how long its requests in progress get.
    let (edge_stop_tx, edge_stop_rx) = watch::channel(None::<std::time::Duration>);

    // The banner before the tasks start: a client that sees the node ready
    // (`/readyz`) has its whole banner too (the listeners are bound already;
    // a test read the log between the ready answer and the destinations).
    if cfg.node.log_format == LogFormat::Json {
        // Every line of a JSON log is JSON: the banner is one event.
        info!(
            version = env!("CARGO_PKG_VERSION"),
            store = cfg.node.store.as_str(),
            data_dir = %cfg.node.data_dir.display(),
            ingest = %cfg.listeners.ingest,
            admin = %cfg.listeners.admin,
            destinations = ?destinations,
            "started"
        );
    } else {
        println!(
            "ankusa {} ({} store at {})",
            env!("CARGO_PKG_VERSION"),
            cfg.node.store.as_str(),
            cfg.node.data_dir.display()
        );
        println!(
            "ingest: http://{}  admin: http://{} (/console, /v1/ API, /metrics, /healthz, /readyz)",
            cfg.listeners.ingest, cfg.listeners.admin
        );
        for d in &destinations {
            println!("  {d}");
        }
        if let (Some(m), Some(c)) = (&member, &cfg.cluster) {
            println!(
                "cluster {}: node {} (forwarded to at {}), etcd {}",
                c.name,
                m.id(),
                c.advertise,
                c.etcd.join(", ")
            );
        }
    }

    // systemd's READY=1 once the relay takes hooks and has recovered the
    // previous run's claims (`/readyz` answers 200 from the same moment).
    let ready = Arc::clone(&pipeline_handle.ready);
    tokio::spawn(async move {
        while !ready.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        crate::notify::notify("READY=1");
    });
    // SIGUSR2 starts a successor that takes over (an upgrade under a
    // supervisor: docs/design.md section 5, "Takeover").
    tokio::spawn(crate::takeover::successor_on_signal(
        start.successor.clone(),
        cfg.node.store == StoreBackend::Memory,
        shutdown_rx.clone(),
    ));
    // A takeover's new process stopped (SIGTERM, SIGINT) while it opened the
    // store: it must not tell the old process it serves and then stop, which
    // would leave nothing serving. It gives up the takeover instead (its
    // caller closes the store and the old process serves again); nothing has
    // run on the store yet.
    if taking.is_some()
        && shutdown
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
            .is_ready()
    {
        bail!(
            "--takeover: interrupted by SIGTERM or SIGINT while the store opened; the old process serves again"
        );
    }
    // The takeover socket: a new process (`serve --takeover`) asks through
    // it for the listeners and for this run's end (crate::takeover). Without
    // it the relay serves all the same, and says so.
    let offers = match crate::takeover::Offers::bind(&cfg.node.data_dir) {
        Ok(o) => Some(o),
        Err(e) => {
            warn!(
                error = %e,
                path = %crate::takeover::socket_path(&cfg.node.data_dir).display(),
                "no takeover socket: `serve --takeover` cannot replace this process (a restart can)"
            );
            None
        }
    };
    let offer = Arc::new(crate::takeover::Offer {
        ingest: listeners.ingest.try_clone()?,
        admin: listeners.admin.try_clone()?,
        store: (cfg.node.store != StoreBackend::Memory).then(|| cfg.node.store.as_str()),
    });
    let mut handover = Box::pin(async {
        match &offers {
            Some(o) => o.next(offer).await,
            None => std::future::pending().await,
        }
    });
    let writer_task = tokio::spawn(writer.run());
    let pipeline_task = tokio::spawn(pipeline.run());
    let node_store: Arc<dyn crate::cluster::NodeStore> = Arc::new(NodeStoreOf(Arc::clone(&kv)));
    if let Some(m) = &member {
        let wake = pipeline_handle.clone();
        tokio::spawn(Arc::clone(m).run(Box::new(move || wake.wake()), Arc::clone(&node_store)));
    }
    // The relay's own notifications (docs/design.md section 5,
    // "Notifications"): committed through the Writer like hooks, so the task
    // stops with the ingest listener (it holds a Writer handle).
    let notify_task = tokio::spawn(
        crate::notifications::Notifier {
            kv: Arc::clone(&kv),
            writer: notify_writer,
            ctx: Arc::clone(&admin_hold.ctx),
            events: pipeline_handle.events.clone(),
            stats: notify_stats,
            wake: {
                let wake = pipeline_handle.clone();
                Box::new(move || wake.wake())
            },
            clock: now_ms,
        }
        .run(shutdown_rx.clone()),
    );
    // The retention sweep stops with the ingest listener: it holds a Writer
    // handle, and the Writer stops only when every handle is gone.
    let retention_task = tokio::spawn(ankusa_pipeline::retention::run(
        Arc::clone(&kv),
        retention_writer,
        RetentionConfig::new(cfg.retention.keep_ms, cfg.retention.interval_ms),
        now_ms,
        retention_stats,
        shutdown_rx.clone(),
    ));
    // Reloads stop with the ingest listener (a reload needs the edge, and
    // holds it: the Writer stops only when every handle is gone).
    let reload_task = tokio::spawn(reloader.run(reload_asks, hangup, shutdown_rx.clone()));
    let edge_task = match taking.take() {
        // A takeover: the connections held while the store moved first.
        Some(TakeoverStart { taking, holding }) => {
            let released = holding.release().await;
            let task = tokio::spawn(Arc::clone(&edge).serve_with(
                released.listener,
                released.held,
                edge_stop_rx.clone(),
            ));
            let old_pid = taking.old_pid;
            // Under systemd this process is the service's main process from
            // now on, before the old one exits (an exit of the main process
            // would end the service; NotifyAccess=all lets a process that is
            // not the main one say so). READY=1 follows once it is ready.
            crate::notify::notify(&format!("MAINPID={}", std::process::id()));
            taking.serving().await;
            info!(old_pid, "takeover: serving; process {old_pid} exits");
            task
        }
        None => tokio::spawn(Arc::clone(&edge).serve_with(
            Listeners::serve(&listeners.ingest)?,
            Vec::new(),
            edge_stop_rx.clone(),
        )),
    };
    let admin_task = tokio::spawn(serve_admin(
        admin_state,
        Listeners::serve(&listeners.admin)?,
        admin_shutdown_rx,
    ));

    let mut pipeline_task = pipeline_task;
    let mut writer_task = writer_task;
    let mut retention_task = retention_task;
    let mut handing_over = None;
    let failed = tokio::select! {
        r = &mut retention_task => Some(("the retention sweep", ended(r))),
        _ = &mut shutdown => {
            info!("shutting down: no new hooks; finishing commits and deliveries in flight");
            crate::notify::notify("STOPPING=1");
            None
        }
        h = &mut handover => {
            info!(
                new_pid = h.new_pid,
                "takeover: handing over to process {}: no new hooks here; finishing commits, and deliveries in flight for up to {} s",
                h.new_pid,
                crate::takeover::PIPELINE_WAIT.as_secs()
            );
            handing_over = Some(h);
            None
        }
        r = &mut pipeline_task => Some(("the pipeline", ended(r))),
        r = &mut writer_task => Some(("the Writer", ended(r))),
    };
    if let Some((task, why)) = failed {
        // Fail-stop (docs/design.md section 5, "A store failure"): a failed
        // commit or sync poisoned the store handle, or a task met a store it
        // cannot carry on with (or panicked). Nothing more is committed or
        // acknowledged; the requests in progress get their 503 before the
        // process exits.
        error!(
            error = %why,
            "{task} stopped; stopping the node (fail-stop, exit status 1). \
             Every hook answered 200 was committed before its answer and is delivered after a restart; \
             if the store failed, restart once it can be written again (a full disk: free space first)"
        );
        shutting_down.store(true, Ordering::SeqCst);
        admin_hold.detach_edge();
        let _ = shutdown_tx.send(true);
        let _ = edge_stop_tx.send(Some(FAIL_STOP_GRACE));
        if tokio::time::timeout(FAIL_STOP_GRACE, edge_task)
            .await
            .is_err()
        {
            warn!(
                grace_s = FAIL_STOP_GRACE.as_secs(),
                "ingest requests still open at the fail-stop; closing them"
            );
        }
        bail!("{task} stopped: {why}");
    }
    // On SIGTERM the hooks still being read are answered 503 (the clients
    // retry elsewhere); a process handing over commits and answers them, and
    // its held successor takes the next ones.
    if handing_over.is_none() {
        shutting_down.store(true, Ordering::SeqCst);
    }
    // The admin API's hold on the edge keeps the Writer alive: let it go.
    admin_hold.detach_edge();
    let _ = shutdown_tx.send(true);
    // A takeover's held requests wait for this stop: the ones in progress
    // here get a short grace (a slow client's are closed unanswered, and it
    // sends again to the new process).
    let _ = edge_stop_tx.send(Some(if handing_over.is_some() {
        crate::takeover::INGEST_WAIT
    } else {
        ankusa_edge::server::SHUTDOWN_GRACE
    }));
    let _ = edge_task.await;
    shutting_down.store(true, Ordering::SeqCst);
    // A reload in progress ends within its read deadline; past a grace it is
    // dropped (it holds the edge, and so the Writer).
    let mut reload_task = reload_task;
    if tokio::time::timeout(std::time::Duration::from_secs(15), &mut reload_task)
        .await
        .is_err()
    {
        warn!(
            "a configuration reload was still running at the stop; it was abandoned (the relay stops anyway)"
        );
        reload_task.abort();
        let _ = reload_task.await;
    }
    match retention_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!("the retention sweep failed: {e}"),
        Err(e) => error!("the retention sweep stopped: {e}"),
    }
    if let Err(e) = notify_task.await {
        error!("the notifier stopped: {e}");
    }
    // The edge's Writer handle goes with the edge; the Writer finishes its
    // queue and stops.
    drop(edge);
    writer_task.await.context("writer task")??;
    if handing_over.is_some() {
        pipeline_handle.shutdown_within(crate::takeover::PIPELINE_WAIT);
    } else {
        pipeline_handle.shutdown();
    }
    pipeline_task.await.context("pipeline task")??;
    if let Some(m) = &member {
        m.leave(&|t| node_store.pending(t)).await;
    }
    let _ = admin_shutdown_tx.send(true);
    let _ = admin_task.await;
    drop(handover);
    drop(offers);
    match handing_over {
        Some(handover) => {
            let running = Box::new(Config::clone(&admin_hold.ctx.config.load()));
            info!("stopped cleanly for the takeover");
            Ok(Ended::HandingOver { handover, running })
        }
        None => {
            info!("stopped cleanly");
            Ok(Ended::Stopped)
        }
    }
}

/// Stops the cluster member's tasks when a run ends (its lease then
/// expires on its own unless the run left the cluster first).
struct MemberStops(Arc<crate::cluster::Member>);

impl Drop for MemberStops {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// How long a failing node lets the ingest requests in progress get their
/// answers (503: the Writer is gone or the store poisoned) before it exits.
const FAIL_STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What a task that must not end on its own (the Writer, the pipeline, the
/// retention sweep) ended with, for the fail-stop's log line and exit error.
fn ended<E: std::fmt::Display>(r: Result<Result<(), E>, tokio::task::JoinError>) -> String {
    match r {
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(())) => "it returned while the node was running".to_owned(),
        Err(e) => format!("its task failed: {e}"),
    }
}

/// The pipeline's controls as the admin API calls them (docs/design.md
/// section 5, "Pause", "Purge a tenant", "Retire a source").
struct Control(PipelineHandle);

fn failure(e: ControlError) -> ControlFailure {
    match e {
        ControlError::NotConfigured(_) => ControlFailure::NotConfigured,
        ControlError::Work(m) => ControlFailure::Refused(m),
        // The store's error may name its files (so the data_dir): logged, never
        // answered (docs/design.md section 7, "Secrets in output").
        ControlError::Store(m) => {
            warn!(error = %m, "a control request: the store failed (answered 503)");
            ControlFailure::Unavailable(ankusa_admin::STORE_FAILED_MESSAGE.to_owned())
        }
        ControlError::Stopped => ControlFailure::Unavailable("the pipeline has stopped".into()),
    }
}

impl PipelineControl for Control {
    fn set_pause(
        &self,
        target: PauseTarget,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<(), ControlFailure>> {
        Box::pin(async move {
            match reason {
                Some(r) => self.0.pause(target, &r).await.map(|_| ()),
                None => self.0.resume(target).await.map(|_| ()),
            }
            .map_err(failure)
        })
    }

    fn quiesce(&self, tenant: TenantOrd, quiet: bool) -> BoxFuture<'_, Result<(), ControlFailure>> {
        Box::pin(async move { self.0.quiesce(tenant, quiet).await.map_err(failure) })
    }

    fn retire(
        &self,
        source: SourceId,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<(usize, u64), ControlFailure>> {
        Box::pin(async move {
            self.0
                .retire(source, reason)
                .await
                .map(|r| (r.in_flight, r.dead_lettered))
                .map_err(failure)
        })
    }

    fn exclusive(&self, work: PipelineWork) -> BoxFuture<'_, Result<(), ControlFailure>> {
        Box::pin(async move { self.0.exclusive(work).await.map_err(failure) })
    }

    fn wake(&self) {
        self.0.wake();
    }
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this is
/// called, not when the future is first polled: `run` calls it before it
/// binds its listeners, so a SIGTERM that arrives as soon as the ports answer
/// (an orchestrator, a test) is a clean shutdown, not the default action of
/// the signal (the stress run caught a relay killed by a SIGTERM sent while it
/// was still starting its tasks).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            // Without signal handlers the process still stops on SIGKILL.
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

/// The cluster runtime's view of this node's store (`cluster::NodeStore`).
struct NodeStoreOf<K>(Arc<K>);

/// A hand-over page's bounds: hooks, and bytes of records (the owner takes
/// up to `edge::server::handover::HANDOVER_MAX_BYTES`).
const HANDOVER_PAGE_HOOKS: usize = 512;
const HANDOVER_PAGE_BYTES: usize = 4 << 20;

impl<K: Kv> crate::cluster::NodeStore for NodeStoreOf<K> {
    fn pending(&self, tenant: TenantOrd) -> Option<u64> {
        ankusa_pipeline::counter(&*self.0, tenant, CounterField::Pending)
            .ok()
            .and_then(|v| u64::try_from(v).ok())
    }

    fn pending_bytes(&self, tenant: TenantOrd) -> Option<u64> {
        ankusa_pipeline::counter(&*self.0, tenant, CounterField::Bytes)
            .ok()
            .and_then(|v| u64::try_from(v).ok())
    }

    fn busy_lanes(&self, tenant: TenantOrd) -> Option<Vec<String>> {
        ankusa_queue::lanes::busy_lanes(&*self.0, tenant, ankusa_catalog::cluster::MAX_DRAIN_LANES)
            .ok()
            .flatten()
            .map(|l| l.iter().map(LaneId::to_hex).collect())
    }

    fn held_rows(
        &self,
        tenant: TenantOrd,
        lanes: Option<&std::collections::BTreeSet<LaneId>>,
    ) -> u64 {
        let counter = |f| {
            ankusa_pipeline::counter(&*self.0, tenant, f)
                .ok()
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(0)
        };
        let Some(lanes) = lanes else {
            // Every ordered lane is held: its heads and its members.
            return counter(CounterField::Lanes) + counter(CounterField::LaneMembers);
        };
        let mut held = 0u64;
        for lane in lanes {
            if ankusa_queue::lanes::head(&*self.0, tenant, *lane).is_ok_and(|h| h.is_some()) {
                held += 1;
            }
            held += self
                .0
                .scan(
                    ankusa_engine::Cf::Index,
                    &ankusa_keys::lane_members_range(tenant, *lane),
                    ankusa_engine::Direction::Forward,
                    100_000,
                )
                .map_or(0, |m| m.len() as u64);
        }
        held
    }

    fn holds_remains(&self, tenant: TenantOrd) -> Result<bool, String> {
        ankusa_queue::handover::holds_remains(&*self.0, tenant).map_err(|e| e.to_string())
    }

    fn handover_page(
        &self,
        tenant: TenantOrd,
        from: ankusa_keys::Seq,
    ) -> Result<(Vec<u8>, ankusa_queue::handover::HandoverPage), String> {
        let snap = self.0.snapshot();
        let page = ankusa_queue::handover::handover_page(
            &snap,
            tenant,
            from,
            HANDOVER_PAGE_HOOKS,
            HANDOVER_PAGE_BYTES,
        )
        .map_err(|e| e.to_string())?;
        let mut dump = Vec::new();
        let mut w = ankusa_engine::dump::DumpWriter::new(
            ankusa_engine::dump::Header {
                dump_version: ankusa_engine::dump::DUMP_VERSION,
                store_format: ankusa_keys::STORE_FORMAT,
                backend: "handover".into(),
            },
            &mut dump,
        )
        .map_err(|e| e.to_string())?;
        for (cf, k, v) in &page.records {
            w.record(*cf, k, v).map_err(|e| e.to_string())?;
        }
        w.finish().map_err(|e| e.to_string())?;
        Ok((dump, page))
    }

    fn handed_over(
        &self,
        page: &ankusa_queue::handover::HandoverPage,
        tenant: TenantOrd,
    ) -> Result<(), String> {
        let batch = ankusa_queue::handover::handed_over(&*self.0, tenant, &page.seqs, &page.dedupe)
            .map_err(|e| e.to_string())?;
        self.0
            .write(batch, ankusa_engine::Durability::Sync)
            .map_err(|e| e.to_string())
    }
}
