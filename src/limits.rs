//! The process limits of `serve` (README, "Limits"; docs/design.md section 5,
//! "Limits"): its file descriptors, and how the allocator gives back the memory
//! of large request bodies ([`return_large_blocks`]).
//!
//! # File descriptors
//! At start `serve` raises its `RLIMIT_NOFILE` soft
//! limit to the hard limit ([`raise_nofile`]) and splits what it got
//! ([`budget`]) so that no number of client connections can take a file
//! descriptor the store needs: a store write that fails with "Too many open
//! files" poisons the store and stops the node, while a connection refused
//! costs a provider one retry.
//!
//! The split, of the soft limit `N` less a fixed [`RESERVED`] (stdio, the
//! runtime's epoll and wakers, the two listening sockets, signal pipes, the
//! data_dir lock, a connection being refused, a DNS lookup):
//! - the store: a quarter, at least [`MIN_STORE_FILES`] and at most
//!   [`MAX_STORE_FILES`] (RocksDB's `max_open_files`, fjall's file cache, each
//!   less what their WAL, journal and compactions need);
//! - the sinks: an eighth, or what the configuration's sinks can hold open at
//!   once if that is more ([`sink_fds`]);
//! - the listeners: the rest, an eighth of it to the admin listener (4 to
//!   [`MAX_ADMIN_CONNECTIONS`]) and the remainder to ingest (at most
//!   [`MAX_CONNECTIONS`]).
//!
//! With the common soft limit of 1,024 (and a hard limit as low) that is 240
//! store files, 120 for the sinks, 75 admin and 525 ingest connections.
//!
//! `libc` (already a dependency of the binary, for SIGPIPE) makes the
//! calls: rustix would need its `process` feature turned on (a feature
//! change of a crate fjall's build shares), and the `rlimit` crate would be
//! a new dependency for two system calls.
//!
//! # Memory of large bodies
//! A request body is read whole into one buffer (25 MiB at the default
//! `body_limit_bytes`), and the node-wide body budget bounds their sum. glibc's
//! malloc gives a block of at least its mmap threshold its own mapping,
//! returned to the OS when freed, but the threshold is dynamic: each such block
//! freed raises it (up to 32 MiB), after which bodies come from the heap
//! arenas, which keep the memory once freed (a relay was measured at 1.57 GB
//! resident, idle, after a burst of 25 MiB bodies). Setting the threshold fixes
//! it (and turns the adjustment off): every block of [`MMAP_THRESHOLD_BYTES`]
//! or more is mapped and unmapped on its own.

use ankusa_admin::MAX_ADMIN_CONNECTIONS;
use ankusa_config::{Config, SinkKind, TenantBinding};
use ankusa_edge::server::MAX_CONNECTIONS;

/// File descriptors kept out of every share (see the module docs).
pub const RESERVED: usize = 64;
/// The fewest file descriptors the store gets.
pub const MIN_STORE_FILES: usize = 64;
/// The most file descriptors the store gets (RocksDB's default keeps every
/// SST file open; this is far above what a relay's store holds).
pub const MAX_STORE_FILES: usize = 65_536;
/// The fewest ingest connections a relay starts with: below it `serve`
/// refuses to start and says how many file descriptors it needs.
pub const MIN_INGEST_CONNECTIONS: usize = 16;
/// The fewest admin connections.
pub const MIN_ADMIN_CONNECTIONS: usize = 4;
/// The soft limit assumed where the hard limit is unlimited (not on Linux,
/// whose hard limit is at most `fs.nr_open`).
const UNLIMITED_AS: u64 = 1 << 20;

/// The blocks glibc's malloc maps on their own (and unmaps when freed): 1 MiB
/// and up, so request bodies, their envelopes and RocksDB's memtable arena
/// blocks go back to the OS when freed; smaller blocks (hyper's read buffers,
/// at most about 400 KiB) stay in the arenas.
pub const MMAP_THRESHOLD_BYTES: i32 = 1 << 20;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD_BYTES`] (see the module
/// docs); true when the allocator took it. Nothing on other C libraries.
pub fn return_large_blocks() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt changes a malloc parameter; it is called once, at
        // start, before the runtime's threads exist.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// The soft limit before and after [`raise_nofile`], and the hard limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoFile {
    /// The soft limit the process started with.
    pub before: u64,
    /// The soft limit now (the hard limit, unless raising it failed).
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises the process's `RLIMIT_NOFILE` soft limit to its hard limit.
///
/// # Errors
/// The OS error of `getrlimit`, or of `setrlimit` with the limits as they
/// are (unchanged).
pub fn raise_nofile() -> Result<NoFile, (std::io::Error, Option<NoFile>)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into the struct it is given, a
    // valid local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err((std::io::Error::last_os_error(), None));
    }
    // rlim_t is u64 on 64-bit Linux and u32 on 32-bit: the conversion is
    // needed on the latter.
    #[allow(clippy::useless_conversion)]
    let as_u64 = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            UNLIMITED_AS
        } else {
            u64::from(v)
        }
    };
    let before = as_u64(lim.rlim_cur);
    let hard = as_u64(lim.rlim_max);
    if lim.rlim_cur == lim.rlim_max || before >= hard {
        return Ok(NoFile {
            before,
            soft: before,
            hard,
        });
    }
    let raised = libc::rlimit {
        rlim_cur: hard as libc::rlim_t,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads the struct it is given, a valid local.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err((
            std::io::Error::last_os_error(),
            Some(NoFile {
                before,
                soft: before,
                hard,
            }),
        ));
    }
    Ok(NoFile {
        before,
        soft: hard,
        hard,
    })
}

/// How many file descriptors the configuration's sinks can hold at once,
/// all tenants together: an `http` sink entry one connection per call in
/// flight (`dispatch.sink_concurrency` per tenant of its source), an `sqs` or
/// `pubsub` entry one per pipelined call (`dispatch.pipelined_concurrency` per
/// tenant: HTTP/1.1 clients), a `kafka` entry librdkafka's sockets and
/// wake-up pipes (32), a `file` entry 2, the multiplexed broker clients
/// (`redis`, `nats`, `rabbitmq`) 4, each plus its own few.
pub fn sink_fds(cfg: &Config) -> usize {
    let d = &cfg.dispatch;
    let mut total = 0usize;
    for s in &cfg.sources {
        let tenants = match &s.tenant {
            TenantBinding::Fixed(_) => 1,
            TenantBinding::Path => cfg.tenants.len().max(1),
        };
        for e in &s.sinks {
            let calls = |per_tenant: u32| {
                (per_tenant as usize)
                    .saturating_mul(tenants)
                    .saturating_add(4)
            };
            total = total.saturating_add(match e.kind {
                SinkKind::Http => calls(d.sink_concurrency),
                SinkKind::Sqs | SinkKind::Pubsub => calls(d.pipelined_concurrency),
                SinkKind::Kafka => 32,
                SinkKind::File => 2,
                SinkKind::Redis | SinkKind::Nats | SinkKind::Rabbitmq => 4,
            });
        }
    }
    total
}

/// How the relay spends its file descriptors (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdBudget {
    /// The soft limit the split is of.
    pub nofile: u64,
    /// The store's share ([`ankusa_engine_rocksdb::RocksKv::open_with_file_limit`],
    /// [`ankusa_engine_fjall::FjallKv::open_with_file_limit`]).
    pub store_files: usize,
    /// Kept for the sinks' connections and files.
    pub sink_fds: usize,
    /// The ingest listener's connection cap.
    pub ingest_connections: usize,
    /// The admin listener's connection cap.
    pub admin_connections: usize,
}

/// Splits soft limit `nofile` (see the module docs), `sinks` being
/// [`sink_fds`] of the configuration.
///
/// # Errors
/// When the split leaves the ingest listener fewer than
/// [`MIN_INGEST_CONNECTIONS`]: the message says how many file descriptors
/// this configuration needs.
pub fn budget(nofile: u64, sinks: usize) -> Result<FdBudget, String> {
    let n = usize::try_from(nofile).unwrap_or(usize::MAX);
    let avail = n.saturating_sub(RESERVED);
    let store_files = (avail / 4).clamp(MIN_STORE_FILES, MAX_STORE_FILES);
    let sink_fds = (avail / 8).max(sinks);
    let rest = avail.saturating_sub(store_files).saturating_sub(sink_fds);
    let admin_connections = (rest / 8).clamp(MIN_ADMIN_CONNECTIONS, MAX_ADMIN_CONNECTIONS);
    let ingest_connections = rest.saturating_sub(admin_connections).min(MAX_CONNECTIONS);
    if ingest_connections < MIN_INGEST_CONNECTIONS {
        let needed =
            RESERVED + MIN_STORE_FILES + sinks + MIN_ADMIN_CONNECTIONS + MIN_INGEST_CONNECTIONS;
        // The shares grow with the limit: find the least limit that works.
        let mut at_least = needed as u64;
        while budget_ok(at_least, sinks).is_none() {
            at_least += 16;
        }
        return Err(format!(
            "the file-descriptor limit is {nofile} (ulimit -n; raised to the hard limit already): too low for this \
             configuration, whose sinks may hold {sinks} at once; it needs at least {at_least} \
             (raise the hard limit: `ulimit -Hn`, systemd's LimitNOFILE=)"
        ));
    }
    Ok(FdBudget {
        nofile,
        store_files,
        sink_fds,
        ingest_connections,
        admin_connections,
    })
}

fn budget_ok(nofile: u64, sinks: usize) -> Option<()> {
    let n = usize::try_from(nofile).unwrap_or(usize::MAX);
    let avail = n.saturating_sub(RESERVED);
    let store = (avail / 4).clamp(MIN_STORE_FILES, MAX_STORE_FILES);
    let rest = avail
        .saturating_sub(store)
        .saturating_sub((avail / 8).max(sinks));
    let admin = (rest / 8).clamp(MIN_ADMIN_CONNECTIONS, MAX_ADMIN_CONNECTIONS);
    (rest.saturating_sub(admin) >= MIN_INGEST_CONNECTIONS).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(b: &FdBudget) -> usize {
        RESERVED + b.store_files + b.sink_fds + b.ingest_connections + b.admin_connections
    }

    /// The common soft limit: every share fits inside it, and the figures
    /// the module docs (and the README) give.
    #[test]
    fn a_limit_of_1024_gives_the_documented_split() {
        let b = budget(1024, 10).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            b,
            FdBudget {
                nofile: 1024,
                store_files: 240,
                sink_fds: 120,
                ingest_connections: 525,
                admin_connections: 75
            }
        );
        assert!(total(&b) <= 1024);
    }

    /// However large or small the limit (above the minimum) and the sinks'
    /// needs, the shares never add up past the limit, and the caps stay
    /// within their bounds.
    #[test]
    fn the_shares_never_exceed_the_limit() {
        for nofile in (200..5_000u64)
            .step_by(7)
            .chain([20_000, 65_536, 1 << 20, u64::MAX])
        {
            for sinks in [0, 10, 100, 300, 1_000] {
                let Ok(b) = budget(nofile, sinks) else {
                    continue;
                };
                assert!(total(&b) as u64 <= nofile, "{nofile} {sinks}: {b:?}");
                assert!(b.sink_fds >= sinks);
                assert!(b.store_files >= MIN_STORE_FILES && b.store_files <= MAX_STORE_FILES);
                assert!(
                    (MIN_INGEST_CONNECTIONS..=MAX_CONNECTIONS).contains(&b.ingest_connections),
                    "{b:?}"
                );
                assert!(
                    (MIN_ADMIN_CONNECTIONS..=MAX_ADMIN_CONNECTIONS).contains(&b.admin_connections),
                    "{b:?}"
                );
            }
        }
        let big = budget(1 << 20, 10).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (big.ingest_connections, big.admin_connections),
            (MAX_CONNECTIONS, MAX_ADMIN_CONNECTIONS)
        );
    }

    /// Too low a limit is an error that names the least that works.
    #[test]
    fn too_low_a_limit_is_refused_with_the_least_that_works() {
        let e = budget(150, 10).err().unwrap_or_default();
        assert!(e.contains("the file-descriptor limit is 150"), "{e}");
        let least: u64 = e
            .split("it needs at least ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{e}"));
        assert!(budget(least, 10).is_ok());
        assert!(budget(least - 16, 10).is_err());
        // The test of tests/it/limits.rs runs the relay at 256.
        assert!(budget(256, 12).is_ok());
    }

    /// The sinks' estimate follows the configuration.
    #[test]
    fn sink_fds_counts_each_entry_by_kind_and_tenants() {
        let cfg = Config::from_yaml(
            "tenants: [{name: a}, {name: b}, {name: default}]
dispatch: {sink_concurrency: 5, pipelined_concurrency: 7}
sources:
  - name: one
    sinks: [{type: http, url: 'http://127.0.0.1:9/x'}, {type: file, path: /tmp/x.ndjson}]
  - name: many
    tenant_path: true
    sinks: [{type: http, url: 'http://127.0.0.1:9/y'}]
",
            &|_| None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // one: http 5 + 4, file 2; many: http 5 x 3 tenants + 4.
        assert_eq!(sink_fds(&cfg), 9 + 2 + 19);
    }
}
