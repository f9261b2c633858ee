//! `ankusa store check DATA_DIR [--repair-counters] [--store rocksdb|fjall]`:
//! runs the invariant checker (`ankusa_queue::check_store`, docs/design.md
//! section 4) on a stopped store and prints every violation.
//!
//! `DATA_DIR` is a relay's `node.data_dir` (which holds `store-rocksdb/`,
//! `store-fjall/` or both: `serve` names the store directory after its
//! backend) or a store directory itself (RocksDB's `CURRENT` and `IDENTITY`,
//! fjall's `version` and `keyspaces/`). Every store found is checked, or the
//! one `--store` names. The store is opened for writing, as the relay opens
//! it, so the engine's lock tells a store that a running relay holds (refused,
//! naming that) from a stopped one; RocksDB's lock is asked first, without
//! opening (`F_GETLK`), so a running relay's store is not touched. The check
//! itself writes no key; the open does the engine's own recovery as `serve`
//! would (RocksDB: a new MANIFEST, OPTIONS file and info LOG, its WAL flushed;
//! fjall: its journal replayed, truncated at the first entry that does not
//! decode).
//!
//! `--repair-counters` then sets every maintained counter to what the keys
//! call for (`CheckReport::counter_fixes`), in one `Sync` batch, prints each
//! old and new value, and checks again. Other violations are left as they are.
//!
//! Exit codes: 0 clean (after the repair, with `--repair-counters`), 1 a
//! violation, 2 usage (no store at `DATA_DIR`), 3 the store cannot be opened
//! (in use by a running relay, a newer store format, an engine error).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ankusa_engine::{Cf, Durability, Kv, hex};
use ankusa_keys::meta::decode_format;
use ankusa_keys::{FORMAT_KEY, STORE_FORMAT, TenantOrd};
use ankusa_queue::{CheckReport, CounterFix, Registry, RowId, Violation, check_store, counter_fix_batch};

/// A store backend `store check` can open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// RocksDB (`store-rocksdb/`).
    Rocksdb,
    /// fjall (`store-fjall/`).
    Fjall,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Rocksdb => "rocksdb",
            Backend::Fjall => "fjall",
        }
    }

    /// True when `dir` holds this backend's files (it wrote them).
    fn wrote(self, dir: &Path) -> bool {
        match self {
            Backend::Rocksdb => dir.join("CURRENT").is_file() && dir.join("IDENTITY").is_file(),
            Backend::Fjall => dir.join("version").is_file() && dir.join("keyspaces").is_dir(),
        }
    }
}

/// The arguments of `ankusa store check`.
pub struct Args<'a> {
    /// The relay's data_dir, or a store directory.
    pub dir: &'a Path,
    /// Only this backend's store.
    pub store: Option<Backend>,
    /// Set the counters to what the keys call for, then check again.
    pub repair_counters: bool,
}

/// A failure that ends the command: its message and exit code.
struct Fail(u8, String);

pub fn main(args: &Args<'_>) -> ExitCode {
    let stores = match find(args.dir, args.store) {
        Ok(s) => s,
        Err(Fail(code, msg)) => {
            eprintln!("ankusa store check: {msg}");
            return ExitCode::from(code);
        }
    };
    let mut worst = 0u8;
    for (backend, dir) in stores {
        let code = match check_one(backend, &dir, args.repair_counters) {
            Ok(clean) => u8::from(!clean),
            Err(Fail(code, msg)) => {
                eprintln!("ankusa store check: {}: {msg}", dir.display());
                code
            }
        };
        worst = worst.max(code);
    }
    ExitCode::from(worst)
}

/// The stores under `dir`: `dir` itself when a backend wrote it, else its
/// `store-<backend>` directories that one did.
fn find(dir: &Path, only: Option<Backend>) -> Result<Vec<(Backend, PathBuf)>, Fail> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Err(e) if !absent(&e) => return Err(unreadable(dir, &e)),
        _ => {
            return Err(Fail(2, format!("{}: not a directory (give the relay's node.data_dir, or a store directory in it)", dir.display())));
        }
    }
    let wanted = |b: Backend| only.is_none_or(|o| o == b);
    let backends = [Backend::Rocksdb, Backend::Fjall];
    let mut out: Vec<(Backend, PathBuf)> = backends.into_iter().filter(|b| b.wrote(dir)).map(|b| (b, dir.to_path_buf())).collect();
    if out.is_empty() {
        out = backends
            .into_iter()
            .map(|b| (b, crate::serve::store_dir(dir, b.name())))
            .filter(|(b, d)| b.wrote(d))
            .collect();
    }
    if out.is_empty() {
        // A directory it may not read hides a store: that is not "no store".
        let dirs = std::iter::once(dir.to_path_buf()).chain(backends.iter().map(|b| crate::serve::store_dir(dir, b.name())));
        for d in dirs {
            if let Err(e) = std::fs::read_dir(&d)
                && !absent(&e)
            {
                return Err(unreadable(&d, &e));
            }
        }
    }
    let found: Vec<&str> = out.iter().map(|(b, _)| b.name()).collect();
    out.retain(|(b, _)| wanted(*b));
    if out.is_empty() {
        let msg = match (only, found.is_empty()) {
            (Some(b), false) => format!("{}: no {} store (found: {})", dir.display(), b.name(), found.join(", ")),
            _ => format!(
                "{}: no ankusa store here (a relay's data_dir holds store-rocksdb/ or store-fjall/; a store directory holds RocksDB's CURRENT or fjall's version file)",
                dir.display()
            ),
        };
        return Err(Fail(2, msg));
    }
    Ok(out)
}

/// True for an error that means nothing is there: no such file, or a file
/// where a directory was looked for.
fn absent(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory)
}

/// Exit 3 for a directory that exists but cannot be read (permissions, a
/// symlink loop, an I/O error), naming it and the OS error.
fn unreadable(dir: &Path, e: &std::io::Error) -> Fail {
    let hint = if e.kind() == std::io::ErrorKind::PermissionDenied { "; run store check as the relay's user" } else { "" };
    Fail(3, format!("{}: cannot read it ({e}){hint}", dir.display()))
}

/// Checks (and with `repair`, repairs the counters of) one store; `Ok(true)`
/// when it ends clean.
fn check_one(backend: Backend, dir: &Path, repair: bool) -> Result<bool, Fail> {
    match backend {
        #[cfg(feature = "rocksdb")]
        Backend::Rocksdb => {
            if let Some(pid) = rocksdb_lock_holder(dir) {
                return Err(in_use(&format!("process {pid} holds {}", dir.join("LOCK").display())));
            }
            let kv = ankusa_engine_rocksdb::RocksKv::open(dir).map_err(|e| open_failed(dir, &e))?;
            run(&kv, backend, dir, repair)
        }
        #[cfg(not(feature = "rocksdb"))]
        Backend::Rocksdb => Err(Fail(3, "a rocksdb store, but this binary was built without the `rocksdb` feature".into())),
        Backend::Fjall => {
            let kv = ankusa_engine_fjall::FjallKv::open(dir).map_err(|e| open_failed(dir, &e))?;
            run(&kv, backend, dir, repair)
        }
    }
}

/// The process that holds RocksDB's `LOCK` file in `dir` (a running relay),
/// if another one does. RocksDB takes it with `fcntl(F_SETLK)`; `F_GETLK`
/// asks without taking it or writing anything. Asked before the open, because
/// RocksDB creates its info log before it takes the lock: an open that then
/// fails on the lock has already renamed the running relay's `LOG` to
/// `LOG.old.<time>` (the relay goes on writing to the renamed file).
#[cfg(feature = "rocksdb")]
fn rocksdb_lock_holder(dir: &Path) -> Option<libc::pid_t> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(dir.join("LOCK")).ok()?;
    // SAFETY: `flock` is plain data; all-zero is a valid value of it.
    let mut query: libc::flock = unsafe { std::mem::zeroed() };
    query.l_type = libc::F_WRLCK as libc::c_short;
    query.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: F_GETLK reads and writes the `flock` it is given, a valid
    // local, on a descriptor that stays open for the call.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut query) };
    (rc == 0 && query.l_type != libc::F_UNLCK as libc::c_short).then_some(query.l_pid)
}

/// Exit 3 for a store another process has open; `why` is what says so.
fn in_use(why: &str) -> Fail {
    Fail(
        3,
        format!("the store is in use: a running relay (or another ankusa process) has it open; stop the relay first, store check reads a stopped store ({why})"),
    )
}

/// The engine's open error; a held lock is a running relay. Only the
/// engines' own lock errors say so (RocksDB's `While lock file: .../LOCK` or
/// `lock hold by current process`, fjall's `Locked`): any other error, even
/// one whose text has "lock" in it (a `block checksum mismatch`, a path such
/// as `/srv/blocks/`), is a store that cannot be opened.
fn open_failed(dir: &Path, e: &ankusa_engine::EngineError) -> Fail {
    let text = e.to_string();
    let locked = ["While lock file", "lock hold by current process", "FjallError: Locked"].iter().any(|m| text.contains(m));
    if locked {
        in_use(&text)
    } else {
        Fail(3, format!("cannot open the store at {}: {text}", dir.display()))
    }
}

fn store_err(e: impl std::fmt::Display) -> Fail {
    Fail(3, format!("the store failed: {e}"))
}

fn run<K: Kv>(kv: &K, backend: Backend, dir: &Path, repair: bool) -> Result<bool, Fail> {
    let format = match kv.get(Cf::Meta, FORMAT_KEY).map_err(store_err)? {
        None => return Err(Fail(2, "no store format stamp: not a store a relay has opened".into())),
        Some(v) => decode_format(&v).map_err(|e| Fail(3, format!("store format stamp: {e}")))?,
    };
    if format > STORE_FORMAT {
        return Err(Fail(3, format!("store format {format}, written by a newer ankusa (this one reads up to {STORE_FORMAT})")));
    }
    let names = Registry::read(kv).map_err(store_err)?;
    let what = format!("{} ({}, format {format})", dir.display(), backend.name());
    let report = check_store(&kv.snapshot()).map_err(store_err)?;
    if !repair {
        return Ok(print_report(&what, &report, &names));
    }
    if report.counter_fixes.is_empty() {
        println!("{what}: no counter to repair");
        return Ok(print_report(&what, &report, &names));
    }
    for v in report.violations.iter().filter(|v| !matches!(v, Violation::CounterMismatch { .. })) {
        println!("{what}: left as it is: {}", describe(v, &names));
    }
    kv.write(counter_fix_batch(&report.counter_fixes), Durability::Sync).map_err(store_err)?;
    println!("{what}: repaired {} in one batch:", plural(report.counter_fixes.len(), "counter", "counters"));
    for f in &report.counter_fixes {
        println!("  {}", describe_fix(f, &names));
    }
    let again = check_store(&kv.snapshot()).map_err(store_err)?;
    Ok(print_report(&what, &again, &names))
}

/// Prints every violation and a count, or the one-line summary of a clean
/// store; true when clean.
fn print_report(what: &str, report: &CheckReport, names: &Registry) -> bool {
    if report.violations.is_empty() {
        let c = &report.census;
        println!(
            "{what}: clean ({}, {}; {} ({} in flight, {}), {}, {} dead, {} quarantined)",
            plural(c.tenants as usize, "tenant", "tenants"),
            plural(c.hooks as usize, "hook", "hooks"),
            plural(c.pending as usize, "pending row", "pending rows"),
            c.in_flight,
            plural(c.lane_members as usize, "lane member", "lane members"),
            plural(c.lanes as usize, "busy lane", "busy lanes"),
            c.dead,
            c.quarantined,
        );
        return true;
    }
    for v in &report.violations {
        println!("{what}: violation: {}", describe(v, names));
    }
    println!("{what}: {}", plural(report.violations.len(), "violation", "violations"));
    false
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `tenant acme`, `the node aggregate`, or `tenant #7` for an ordinal the
/// registry does not name.
fn tenant(t: TenantOrd, names: &Registry) -> String {
    if t == TenantOrd::NODE {
        return "the node aggregate".to_owned();
    }
    match names.tenant_name(t) {
        Some(n) => format!("tenant {n}"),
        None => format!("tenant #{t}"),
    }
}

/// A row as the admin CLI names it: `<tenant>.<seq>.<sink>`.
fn row(r: RowId, names: &Registry) -> String {
    match names.tenant_name(r.tenant) {
        Some(n) => format!("{n}.{}.{}", r.seq, r.sink),
        None => format!("#{}.{}.{}", r.tenant, r.seq, r.sink),
    }
}

fn place(s: ankusa_keys::RowState) -> &'static str {
    use ankusa_keys::RowState as S;
    match s {
        S::Due => "due (?D)",
        S::InFlight => "in flight (?F)",
        S::Member => "a lane member (?O)",
        S::Dead => "dead (?X)",
    }
}

/// One violation, in words, with the invariant it breaks (docs/design.md
/// section 4).
fn describe(v: &Violation, names: &Registry) -> String {
    match v {
        Violation::Undecodable { cf, key, error } => format!("cf {} key {} does not decode: {error}", cf.name(), hex(key)),
        Violation::RowUnplaced { row: r, state } => {
            format!("row {} is in no index (its state says {}) (invariant 1)", row(*r, names), place(*state))
        }
        Violation::RowInManyPlaces { row: r, places } => {
            let places: Vec<&str> = places.iter().map(|p| place(*p)).collect();
            format!("row {} is in more than one place: {} (invariant 1)", row(*r, names), places.join(", "))
        }
        Violation::StateMismatch { row: r, state, place: p } => format!(
            "row {} is {} but its state says {} (invariant 1)",
            row(*r, names),
            place(*p),
            place(*state)
        ),
        Violation::IndexWithoutRow { row: r, place: p } => {
            format!("an index entry puts row {} {}, but the row does not exist (orphan key, invariant 1)", row(*r, names), place(*p))
        }
        Violation::MemberStranded { row: r, lane } => {
            format!("lane member {} of lane {lane} has neither a head (?H) nor a marker (?P) (invariant 2)", row(*r, names))
        }
        Violation::MemberLaneMismatch { row: r, lane, row_lane } => format!(
            "lane member {} is in lane {lane} but its row says {} (invariant 2)",
            row(*r, names),
            row_lane.map_or_else(|| "no lane".to_owned(), |l| format!("lane {l}"))
        ),
        Violation::HeadNotLive { tenant: t, lane, head } => format!(
            "the head (?H) of lane {lane} of {} names row {}, which is not due or in flight (invariant 2)",
            tenant(*t, names),
            row(*head, names)
        ),
        Violation::LaneManyLive { tenant: t, lane, rows } => {
            let mut list = String::new();
            for (i, r) in rows.iter().enumerate() {
                let _ = write!(list, "{}{}", if i > 0 { ", " } else { "" }, row(*r, names));
            }
            format!("lane {lane} of {} has more than one row due or in flight: {list} (invariant 2)", tenant(*t, names))
        }
        Violation::LiveRowNotHead { row: r, lane } => {
            format!("row {} of lane {lane} is due or in flight but is not its lane's head (invariant 2)", row(*r, names))
        }
        Violation::KindMismatch { row: r, kind, laned } => format!(
            "row {} has a due entry of kind {} but is {} (invariant 2)",
            row(*r, names),
            kind.as_u8(),
            if *laned { "laned" } else { "not laned" }
        ),
        Violation::CounterMismatch { tenant: t, field, stored, expected } => format!(
            "counter {} of {} holds {stored}, its keys add up to {expected} (invariant 3; --repair-counters sets it)",
            field.name(),
            tenant(*t, names)
        ),
        Violation::DueWithoutActive { tenant: t } => {
            format!("{} has a due row but no active marker (?A) (invariant 4)", tenant(*t, names))
        }
        Violation::EnvelopeMissing { row: r } => format!("row {} has no envelope in cf hooks (invariant 5)", row(*r, names)),
    }
}

fn describe_fix(f: &CounterFix, names: &Registry) -> String {
    format!("{} of {}: {} -> {}", f.field.name(), tenant(f.tenant, names), f.stored, f.expected)
}
