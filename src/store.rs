//! `ankusa store check DATA_DIR [--repair-counters] [--store rocksdb|fjall]`:
//! runs the invariant checker (`ankusa_queue::check_store`, docs/design.md
//! section 4) on a stopped store and prints every violation.
//!
//! `DATA_DIR` is a relay's `node.data_dir` (which holds `store-rocksdb/`,
//! `store-fjall/` or both: `serve` names the store directory after its
//! backend) or a store directory itself (RocksDB's `CURRENT` and `IDENTITY`,
//! fjall's `version` and `keyspaces/`). Every store found is checked, or the
//! one `--store` names.
//!
//! RocksDB: a running relay's lock is refused first, asked without opening
//! (`F_GETLK`); the store is then opened read-only
//! (`RocksKv::open_read_only`): no byte of the directory is written (no lock,
//! no info log, no MANIFEST, its WAL replayed in memory, not flushed), so the
//! check runs on a full or read-only disk and cannot make a cut of the WAL
//! permanent. The WAL must verify to its last record
//! (`WalRecovery::Absolute`); when only its end does not (a write a crash
//! cut short, which `serve` drops too, or damage in its last 32 KiB block:
//! RocksDB cannot tell them apart) the check says so in a `note:` line and
//! checks what precedes it; a WAL damaged before its end is exit 3 naming
//! RocksDB's corruption, as `serve` refuses it.
//!
//! fjall has no read-only open and no recovery mode but its own (3.1): the
//! store is opened for writing as the relay opens it (its lock refuses a
//! running relay's store), and the open recovers the journal as a start
//! does, cutting it at the first entry that does not decode, for good. To
//! keep a store as it is, check a copy (`cp -a`).
//!
//! A store with data files but no format stamp (damaged, or its journal/WAL
//! cut at an open) is exit 3 with what to do ([`OpenError::NoStamp`]), as
//! `serve` refuses it; one whose first start was interrupted before the stamp
//! (its creation marker, [`crate::open::creating_marker`], is still there) is
//! exit 2. Finding and opening the store, and every refusal of it, are
//! [`crate::open`]'s.
//!
//! `--repair-counters` then sets every maintained counter to what the keys
//! call for (`CheckReport::counter_fixes`), in one `Sync` batch, prints each
//! old and new value, and checks again. Other violations are left as they are.
//!
//! `--repair-counters` opens the store for writing (RocksDB as `serve` does:
//! a torn last record dropped, a WAL damaged before its end refused).
//!
//! Exit codes: 0 clean (after the repair, with `--repair-counters`), 1 a
//! violation, 2 usage (no store at `DATA_DIR`), 3 the store cannot be opened
//! (in use by a running relay, a damaged WAL, no format stamp, a newer store
//! format, an engine error). A
//! newer store format gets the message `serve` refuses it with
//! (`StoreFormatNewer { found, supported }` and what to do; src/open/stamp.rs).
//!
//! `ankusa store export DATA_DIR FILE [--store B]` and `ankusa store import
//! FILE DATA_DIR --store B` move a stopped store between backends through the
//! backend-neutral dump of `ankusa_engine::dump` (docs/design.md section 8):
//! the export opens RocksDB read-only (a torn last record of the WAL
//! dropped, a WAL damaged before its end refused), writes FILE beside itself and renames it into place when
//! complete; the import loads into a new directory beside the target and
//! renames it into place only when the whole dump verified, so a refused dump
//! leaves the target as it was. Both show a progress bar on a terminal.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ankusa_engine::{Cf, Durability, Kv, hex};
use ankusa_keys::meta::decode_format;
use ankusa_keys::{FORMAT_KEY, ORIGIN_KEY, TenantOrd};
use ankusa_queue::migrate::{check_readable, read_format, read_progress};
use ankusa_queue::{
    CheckReport, CounterFix, Registry, RowId, Violation, check_store, counter_fix_batch,
};

use crate::open::stamp::Supported;
use crate::open::{Backend, OpenError, Opener, find, store_dir};

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
pub(crate) struct Fail(pub(crate) u8, pub(crate) String);

impl From<OpenError> for Fail {
    fn from(e: OpenError) -> Fail {
        Fail(e.exit_code(), e.to_string())
    }
}

pub fn main(args: &Args<'_>) -> ExitCode {
    let stores = match find(args.dir, args.store).map_err(Fail::from) {
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

/// Checks (and with `repair`, repairs the counters of) one store; `Ok(true)`
/// when it ends clean.
fn check_one(backend: Backend, dir: &Path, repair: bool) -> Result<bool, Fail> {
    match backend {
        #[cfg(feature = "rocksdb")]
        Backend::Rocksdb => {
            use crate::open::Access;
            use ankusa_engine_rocksdb::WalRecovery;
            if repair {
                let kv = crate::open::rocksdb(dir, Access::Write)?;
                return run(&kv, backend, dir, repair);
            }
            let kv = match crate::open::rocksdb(dir, Access::ReadOnly(WalRecovery::Absolute)) {
                Ok(kv) => kv,
                Err(OpenError::Damaged { cause: strict, .. }) => {
                    // Is it only the WAL's end? Then check what precedes it.
                    let kv = crate::open::rocksdb(dir, Access::ReadOnly(WalRecovery::TornTail))?;
                    println!(
                        "{}: note: the end of the WAL does not verify ({strict}): a write a crash cut short (never acknowledged; serve drops it too), or damage in the WAL's last 32 KiB block; checked without it (read-only: nothing was changed)",
                        dir.display()
                    );
                    kv
                }
                Err(e) => return Err(e.into()),
            };
            run(&kv, backend, dir, repair)
        }
        #[cfg(not(feature = "rocksdb"))]
        Backend::Rocksdb => Err(Fail(
            3,
            "a rocksdb store, but this binary was built without the `rocksdb` feature".into(),
        )),
        Backend::Fjall => {
            let kv = crate::open::fjall(dir)?;
            run(&kv, backend, dir, repair)
        }
    }
}

fn store_err(e: impl std::fmt::Display) -> Fail {
    Fail(3, format!("the store failed: {e}"))
}

fn run<K: Kv>(kv: &K, backend: Backend, dir: &Path, repair: bool) -> Result<bool, Fail> {
    // The refusals of `serve` and `store migrate`, word for word (and the
    // same test setting: src/open/stamp.rs).
    let Some(format) = read_format(kv).map_err(OpenError::Format)? else {
        return Err(OpenError::no_stamp(dir, backend).into());
    };
    let supported = Supported::from_env(Opener::Command)?.format;
    let progress = read_progress(kv).map_err(OpenError::Format)?;
    check_readable(format, progress.as_ref(), supported).map_err(OpenError::Format)?;
    let names = Registry::read(kv).map_err(store_err)?;
    let what = format!("{} ({}, format {format})", dir.display(), backend.name());
    let snapshot = kv.snapshot();
    let mut report = check_store(&snapshot).map_err(store_err)?;
    // Invariant 6, which the model checker leaves out (its stores have no
    // seq high-water mark): a real store must keep it.
    if let Some(v) = ankusa_queue::seq_above_high_water(&snapshot).map_err(store_err)? {
        report.violations.push(Violation::SeqAboveHighWater(v));
    }
    drop(snapshot);
    if !repair {
        return Ok(print_report(&what, &report, &names));
    }
    if report.counter_fixes.is_empty() {
        println!("{what}: no counter to repair");
        return Ok(print_report(&what, &report, &names));
    }
    for v in report
        .violations
        .iter()
        .filter(|v| !matches!(v, Violation::CounterMismatch { .. }))
    {
        println!("{what}: left as it is: {}", describe(v, &names));
    }
    kv.write(counter_fix_batch(&report.counter_fixes), Durability::Sync)
        .map_err(store_err)?;
    println!(
        "{what}: repaired {} in one batch:",
        plural(report.counter_fixes.len(), "counter", "counters")
    );
    for f in &report.counter_fixes {
        println!("  {}", describe_fix(f, &names));
    }
    let snapshot = kv.snapshot();
    let mut again = check_store(&snapshot).map_err(store_err)?;
    if let Some(v) = ankusa_queue::seq_above_high_water(&snapshot).map_err(store_err)? {
        again.violations.push(Violation::SeqAboveHighWater(v));
    }
    Ok(print_report(&what, &again, &names))
}

/// Prints every violation and a count, or the one-line summary of a clean
/// store; true when clean.
fn print_report(what: &str, report: &CheckReport, names: &Registry) -> bool {
    if report.violations.is_empty() {
        let c = &report.census;
        // Held lanes (ADR 0004 section 8) are named only when there are any.
        let held = if c.lanes_held > 0 {
            format!(" ({} held)", c.lanes_held)
        } else {
            String::new()
        };
        println!(
            "{what}: clean ({}, {}; {} ({} in flight, {}), {}{held}, {} dead, {} quarantined)",
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
    println!(
        "{what}: {}",
        plural(report.violations.len(), "violation", "violations")
    );
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
        Violation::Undecodable { cf, key, error } => {
            format!("cf {} key {} does not decode: {error}", cf.name(), hex(key))
        }
        Violation::RowUnplaced { row: r, state } => {
            format!(
                "row {} is in no index (its state says {}) (invariant 1)",
                row(*r, names),
                place(*state)
            )
        }
        Violation::RowInManyPlaces { row: r, places } => {
            let places: Vec<&str> = places.iter().map(|p| place(*p)).collect();
            format!(
                "row {} is in more than one place: {} (invariant 1)",
                row(*r, names),
                places.join(", ")
            )
        }
        Violation::StateMismatch {
            row: r,
            state,
            place: p,
        } => format!(
            "row {} is {} but its state says {} (invariant 1)",
            row(*r, names),
            place(*p),
            place(*state)
        ),
        Violation::IndexWithoutRow { row: r, place: p } => {
            format!(
                "an index entry puts row {} {}, but the row does not exist (orphan key, invariant 1)",
                row(*r, names),
                place(*p)
            )
        }
        Violation::MemberStranded { row: r, lane } => {
            format!(
                "lane member {} of lane {lane} has neither a head (?H) nor a marker (?P) (invariant 2)",
                row(*r, names)
            )
        }
        Violation::MemberLaneMismatch {
            row: r,
            lane,
            row_lane,
        } => format!(
            "lane member {} is in lane {lane} but its row says {} (invariant 2)",
            row(*r, names),
            row_lane.map_or_else(|| "no lane".to_owned(), |l| format!("lane {l}"))
        ),
        Violation::HeadNotLive {
            tenant: t,
            lane,
            head,
        } => format!(
            "the head (?H) of lane {lane} of {} names row {}, which is not due or in flight (invariant 2)",
            tenant(*t, names),
            row(*head, names)
        ),
        Violation::LaneManyLive {
            tenant: t,
            lane,
            rows,
        } => {
            let mut list = String::new();
            for (i, r) in rows.iter().enumerate() {
                let _ = write!(list, "{}{}", if i > 0 { ", " } else { "" }, row(*r, names));
            }
            format!(
                "lane {lane} of {} has more than one row due or in flight: {list} (invariant 2)",
                tenant(*t, names)
            )
        }
        Violation::LiveRowNotHead { row: r, lane } => {
            format!(
                "row {} of lane {lane} is due or in flight but is not its lane's head (invariant 2)",
                row(*r, names)
            )
        }
        Violation::KindMismatch {
            row: r,
            kind,
            laned,
        } => format!(
            "row {} has a due entry of kind {} but is {} (invariant 2)",
            row(*r, names),
            kind.as_u8(),
            if *laned { "laned" } else { "not laned" }
        ),
        Violation::LaneSeqWrong {
            row: r,
            lane,
            lane_seq,
            last,
            shared,
        } => {
            if *shared {
                format!(
                    "row {} of lane {lane} has lane position {lane_seq}, which another row of the lane has too (invariant 2)",
                    row(*r, names)
                )
            } else {
                format!(
                    "row {} of lane {lane} has lane position {lane_seq}, above the last one the lane gave out ({last}, ?S) (invariant 2)",
                    row(*r, names)
                )
            }
        }
        Violation::CounterMismatch {
            tenant: t,
            field,
            stored,
            expected,
        } => format!(
            "counter {} of {} holds {stored}, its keys add up to {expected} (invariant 3; --repair-counters sets it)",
            field.name(),
            tenant(*t, names)
        ),
        Violation::DueWithoutActive { tenant: t } => {
            format!(
                "{} has a due row but no active marker (?A) (invariant 4)",
                tenant(*t, names)
            )
        }
        Violation::EnvelopeMissing { row: r } => format!(
            "row {} has no envelope in cf hooks (invariant 5)",
            row(*r, names)
        ),
        Violation::AttemptLogWithoutEnvelope { row: r, attempt } => format!(
            "attempt {attempt} of row {} is in the attempt log (?L) but its hook has no envelope in cf hooks (invariant 7)",
            row(*r, names)
        ),
        Violation::AttemptLogAhead {
            row: r,
            attempt,
            logged,
        } => format!(
            "attempt {attempt} of row {} is in the attempt log (?L) but the row counts {logged} logged attempts (invariant 8)",
            row(*r, names)
        ),
        Violation::SeqAboveHighWater(v) => format!(
            "{} stores hook seq {} above the seq high-water mark {}: new hooks would overwrite stored ones (invariant 6)",
            tenant(v.tenant, names),
            v.seq.0,
            v.high_water.0
        ),
    }
}

fn describe_fix(f: &CounterFix, names: &Registry) -> String {
    format!(
        "{} of {}: {} -> {}",
        f.field.name(),
        tenant(f.tenant, names),
        f.stored,
        f.expected
    )
}

// ---- export / import (docs/design.md section 8, "Dumps") -------------------

/// The arguments of `ankusa store export`.
pub struct ExportArgs<'a> {
    /// The relay's data_dir, or a store directory.
    pub dir: &'a Path,
    /// The dump file to write (must not exist).
    pub file: &'a Path,
    /// Which store, when `dir` holds both.
    pub store: Option<Backend>,
}

/// The arguments of `ankusa store import`.
pub struct ImportArgs<'a> {
    /// The dump file.
    pub file: &'a Path,
    /// The relay's data_dir to create the store in (`store-<backend>/`).
    pub dir: &'a Path,
    /// The backend to load it into.
    pub store: Backend,
}

/// A progress bar on stderr when it is a terminal, hidden otherwise.
fn progress_bar(len: Option<u64>, template: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let pb = match len {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    if std::io::stderr().is_terminal() {
        pb.set_style(
            indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
    } else {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    pb
}

/// The exit of a `store` command run once: 0, or the failure's message on
/// stderr (`ankusa store <command>: ...`) and its code.
fn exit_with(command: &str, result: Result<(), Fail>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            eprintln!("ankusa store {command}: {msg}");
            ExitCode::from(code)
        }
    }
}

/// `ankusa store export DATA_DIR FILE [--store B]`: exit 0 written, 2 usage
/// (no store, two stores and no `--store`, FILE exists), 3 the store cannot
/// be opened or read, 4 FILE cannot be written.
pub fn export_main(args: &ExportArgs<'_>) -> ExitCode {
    exit_with("export", export(args))
}

fn export(args: &ExportArgs<'_>) -> Result<(), Fail> {
    let mut stores = find(args.dir, args.store)?;
    if stores.len() > 1 {
        return Err(Fail(
            2,
            format!(
                "{}: holds a rocksdb and a fjall store; say which with --store",
                args.dir.display()
            ),
        ));
    }
    let Some((backend, dir)) = stores.pop() else {
        return Err(Fail(
            2,
            format!("{}: no ankusa store here", args.dir.display()),
        ));
    };
    if args.file.exists() {
        return Err(Fail(
            2,
            format!(
                "{}: exists; export writes a new file (remove it or give another name)",
                args.file.display()
            ),
        ));
    }
    match backend {
        #[cfg(feature = "rocksdb")]
        Backend::Rocksdb => {
            // Read-only, with its small block cache: the export reads every
            // block once, so a large cache would only grow the process (the
            // export of a store of any size stays in bounded memory;
            // tests/it/dump.rs measures it), and it writes nothing in the store.
            let kv = crate::open::rocksdb(
                &dir,
                crate::open::Access::ReadOnly(ankusa_engine_rocksdb::WalRecovery::TornTail),
            )?;
            export_from(&kv, backend, &dir, args.file)
        }
        #[cfg(not(feature = "rocksdb"))]
        Backend::Rocksdb => Err(Fail(
            3,
            "a rocksdb store, but this binary was built without the `rocksdb` feature".into(),
        )),
        Backend::Fjall => {
            let kv = crate::open::fjall(&dir)?;
            export_from(&kv, backend, &dir, args.file)
        }
    }
}

/// A temporary name beside `path`: `.<name>.<what>-<pid>`.
pub(crate) fn beside(path: &Path, what: &str) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "ankusa".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{what}-{}", std::process::id()))
}

/// Removes what a killed export or import left beside `path`
/// (`.<name>.<what>-<pid>` of a process that no longer runs, [`beside`]),
/// saying so on stderr: a SIGKILL mid-import can leave a store-sized
/// directory that nothing else would ever remove. Best effort.
pub(crate) fn remove_leftovers(path: &Path, what: &str) {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let prefix = format!(".{name}.{what}-");
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let file_name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = file_name
            .strip_prefix(&prefix)
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 sends nothing; it asks whether `pid` exists.
        let alive = pid == std::process::id() as i32
            || unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive {
            continue;
        }
        let p = e.path();
        let removed = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        if removed.is_ok() {
            eprintln!(
                "removed {}, left by an {what} (process {pid}) that did not finish",
                p.display()
            );
        }
    }
}

fn export_from<K: Kv>(kv: &K, backend: Backend, dir: &Path, file: &Path) -> Result<(), Fail> {
    let format = match kv.get(Cf::Meta, FORMAT_KEY).map_err(store_err)? {
        None => {
            let Fail(code, msg) = OpenError::no_stamp(dir, backend).into();
            return Err(Fail(code, format!("{}: {msg}", dir.display())));
        }
        Some(v) => decode_format(&v).map_err(|e| {
            Fail(
                3,
                format!(
                    "{}: the store format stamp (meta key `format`) does not decode: {e}",
                    dir.display()
                ),
            )
        })?,
    };
    // Written beside FILE and renamed into place when complete: an export
    // that fails leaves no partial dump under FILE's name.
    remove_leftovers(file, "partial");
    let tmp = beside(file, "partial");
    let out = std::fs::File::create(&tmp).map_err(|e| {
        Fail(
            4,
            format!(
                "{}: cannot be written (creating {} beside it): {e}",
                file.display(),
                tmp.display()
            ),
        )
    })?;
    let pb = progress_bar(None, "{spinner} exporting: {pos} records, {msg}");
    let snapshot = kv.snapshot();
    let result = ankusa_engine::dump::export(
        &snapshot,
        kv.backend(),
        format,
        ORIGIN_KEY,
        std::io::BufWriter::with_capacity(1 << 20, &out),
        &mut |records, bytes| {
            pb.set_position(records);
            pb.set_message(bytes_text(bytes));
        },
    )
    .and_then(|s| {
        out.sync_all()
            .map_err(|source| ankusa_engine::dump::DumpError::Io {
                what: "writing the dump",
                source,
            })?;
        Ok(s)
    });
    pb.finish_and_clear();
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            // A failed write names FILE (exit 4), a failed read the store (3).
            return Err(if matches!(e, ankusa_engine::dump::DumpError::Io { .. }) {
                Fail(
                    4,
                    format!("{}: {e} (nothing written under this name)", file.display()),
                )
            } else {
                Fail(3, format!("{}: {e}", dir.display()))
            });
        }
    };
    publish(&tmp, file)?;
    sync_parent(file);
    println!(
        "{}: exported {} ({}) of {} (format {}, origin {}) to {}",
        dir.display(),
        plural(summary.records() as usize, "record", "records"),
        bytes_text(summary.file_bytes),
        kv.backend(),
        summary.header.store_format,
        summary.header.backend,
        file.display()
    );
    Ok(())
}

/// Moves the complete dump `tmp` to `file` without ever replacing a file:
/// a hard link fails when `file` exists (one that appeared while the export
/// ran, checked at the start), then `tmp` goes. A `rename` would overwrite it.
/// Exit 2 when `file` exists (the dump stays at `tmp`, named), 4 when it
/// cannot be linked.
pub(crate) fn publish(tmp: &Path, file: &Path) -> Result<(), Fail> {
    match std::fs::hard_link(tmp, file) {
        Ok(()) => {
            let _ = std::fs::remove_file(tmp);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Fail(
            2,
            format!(
                "{}: appeared while the export ran; it is left as it is, and the dump is at {}",
                file.display(),
                tmp.display()
            ),
        )),
        Err(e) => {
            let _ = std::fs::remove_file(tmp);
            Err(Fail(
                4,
                format!(
                    "{}: cannot move {} into place: {e}",
                    file.display(),
                    tmp.display()
                ),
            ))
        }
    }
}

/// `12.3 MiB`.
fn bytes_text(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    }
}

/// fsyncs the directory that holds `path` (a rename is durable only then).
pub(crate) fn sync_parent(path: &Path) {
    if let Some(parent) = path.parent() {
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        if let Ok(d) = std::fs::File::open(parent) {
            let _ = d.sync_all();
        }
    }
}

/// `ankusa store import FILE DATA_DIR --store B`: exit 0 loaded, 1 the dump
/// does not verify (a CRC, a count, the digest, cut short: the record is
/// named), 2 usage (FILE missing, the target store exists, DATA_DIR is a file), 3 the new store
/// cannot be created or written, 4 FILE cannot be read.
pub fn import_main(args: &ImportArgs<'_>) -> ExitCode {
    exit_with("import", import(args))
}

fn import(args: &ImportArgs<'_>) -> Result<(), Fail> {
    let file = std::fs::File::open(args.file)
        .map_err(|e| Fail(2, format!("{}: cannot open: {e}", args.file.display())))?;
    let len = file.metadata().map(|m| m.len()).ok();
    let dir = args.dir;
    for b in Backend::ALL {
        if b.wrote(dir) {
            return Err(Fail(
                2,
                format!(
                    "{}: is a {} store directory; give the relay's data_dir (the store is created in store-{}/ inside it)",
                    dir.display(),
                    b.name(),
                    args.store.name()
                ),
            ));
        }
    }
    if dir.exists() && !dir.is_dir() {
        return Err(Fail(
            2,
            format!(
                "{}: exists and is not a directory (DATA_DIR is the relay's node.data_dir, created when missing)",
                dir.display()
            ),
        ));
    }
    // DATA_DIR is the relay's data_dir: a store directory given instead would
    // get the store nested in it, where neither `serve` nor `store check`
    // looks (the new user's report).
    let named_like_a_store = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == "store-rocksdb" || n == "store-fjall");
    if named_like_a_store || Backend::ALL.into_iter().any(|b| b.wrote(dir)) {
        return Err(Fail(
            2,
            format!(
                "{}: a store directory; import takes the relay's node.data_dir and creates store-{} in it (give its parent)",
                dir.display(),
                args.store.name()
            ),
        ));
    }
    let target = store_dir(dir, args.store.name());
    if target.exists() && std::fs::read_dir(&target).map_or(true, |mut d| d.next().is_some()) {
        return Err(Fail(
            2,
            format!(
                "{}: exists and is not empty; import creates a new store (move it away first)",
                target.display()
            ),
        ));
    }
    // Everything is written into a new directory beside the target and
    // renamed into place only when the dump verified and its last batch is
    // synced: a refused or failed import leaves the target as it was.
    let (staging, store_in_staging, rename_to) = if dir.is_dir() {
        let s = beside(&target, "import");
        (s.clone(), s, target.clone())
    } else {
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            let what = if parent.exists() {
                "not a directory"
            } else {
                "does not exist"
            };
            return Err(Fail(
                2,
                format!(
                    "{}: {what} (import creates DATA_DIR, not its parents: the parent of DATA_DIR must exist)",
                    parent.display()
                ),
            ));
        }
        let s = beside(dir, "import");
        (
            s.clone(),
            store_dir(&s, args.store.name()),
            dir.to_path_buf(),
        )
    };
    remove_leftovers(if dir.is_dir() { &target } else { dir }, "import");
    let _ = std::fs::remove_dir_all(&staging);
    let result = import_into(args.store, &store_in_staging, file, len);
    let summary = match result {
        Ok(s) => s,
        Err(f) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(f);
        }
    };
    if target.is_dir() {
        // An empty directory (checked above) is replaced.
        let _ = std::fs::remove_dir(&target);
    }
    if let Err(e) = std::fs::rename(&staging, &rename_to) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(Fail(
            3,
            format!(
                "cannot rename {} to {}: {e}",
                staging.display(),
                rename_to.display()
            ),
        ));
    }
    sync_parent(&rename_to);
    println!(
        "{}: imported {} (format {}, origin {}) into {} ({})",
        args.file.display(),
        plural(summary.records() as usize, "record", "records"),
        summary.header.store_format,
        summary.header.backend,
        target.display(),
        args.store.name()
    );
    Ok(())
}

fn import_into(
    backend: Backend,
    dir: &Path,
    file: std::fs::File,
    len: Option<u64>,
) -> Result<ankusa_engine::dump::Summary, Fail> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Fail(3, format!("{}: cannot create: {e}", dir.display())))?;
    match backend {
        #[cfg(feature = "rocksdb")]
        Backend::Rocksdb => {
            let kv = crate::open::rocksdb(dir, crate::open::Access::Write)?;
            import_to(&kv, file, len)
        }
        #[cfg(not(feature = "rocksdb"))]
        Backend::Rocksdb => Err(Fail(
            3,
            "--store rocksdb, but this binary was built without the `rocksdb` feature".into(),
        )),
        Backend::Fjall => {
            let kv = crate::open::fjall(dir)?;
            import_to(&kv, file, len)
        }
    }
}

fn import_to<K: Kv>(
    kv: &K,
    file: std::fs::File,
    len: Option<u64>,
) -> Result<ankusa_engine::dump::Summary, Fail> {
    use ankusa_engine::dump::DumpError;
    let pb = progress_bar(len, "importing [{bar:40}] {bytes}/{total_bytes} {msg}");
    let result = ankusa_engine::dump::import(
        kv,
        std::io::BufReader::with_capacity(1 << 20, file),
        ORIGIN_KEY,
        &mut |records, bytes| {
            pb.set_position(bytes);
            pb.set_message(format!("{records} records"));
        },
    );
    pb.finish_and_clear();
    let summary = result.map_err(|e| match e {
        DumpError::Corrupt { .. } | DumpError::Version { .. } => {
            Fail(1, format!("the dump is refused, nothing was imported: {e}"))
        }
        DumpError::Io { .. } => Fail(4, format!("{e}; nothing was imported")),
        DumpError::NotEmpty { .. } | DumpError::Engine(_) => {
            Fail(3, format!("{e}; nothing was imported"))
        }
    })?;
    // The stamp the header announced is the one the records hold (a header
    // format of 0 says the store had no stamp: then no record may hold one).
    let announced = summary.header.store_format;
    let stamped = match kv.get(Cf::Meta, FORMAT_KEY).map_err(store_err)? {
        None => None,
        Some(v) => Some(decode_format(&v).map_err(|e| {
            Fail(1, format!("the dump is refused, nothing was imported: its record of the store format stamp (meta key `format`) does not decode: {e}"))
        })?),
    };
    if stamped != (announced != 0).then_some(announced) {
        let header = if announced == 0 {
            "no store format".to_owned()
        } else {
            format!("store format {announced}")
        };
        let records = stamped.map_or_else(
            || "no store format stamp".to_owned(),
            |f| format!("a store format stamp of {f}"),
        );
        return Err(Fail(
            1,
            format!(
                "the dump is refused, nothing was imported: its header says {header}, its records hold {records}"
            ),
        ));
    }
    // Invariant 6: a dump whose seq high-water mark is below a stored seq
    // would have the relay overwrite stored hooks with new ones.
    let high = ankusa_queue::seq_above_high_water(kv).map_err(|e| match e {
        // A mark that does not decode is the dump's fault, as any bad record.
        ankusa_queue::QueueError::Value(_) | ankusa_queue::QueueError::Key(_) => Fail(
            1,
            format!("the dump is refused, nothing was imported: its seq high-water mark (meta key `seq_high_water`): {e}"),
        ),
        other => store_err(other),
    })?;
    if let Some(v) = high {
        return Err(Fail(
            1,
            format!("the dump is refused, nothing was imported: {v}"),
        ));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The break-it report: killed imports left `.store-<backend>.import-<pid>`
    /// directories (925 MB after six kills) that nothing removed. Those of
    /// processes that no longer run go; a live one's and other files stay.
    #[test]
    fn leftovers_of_dead_processes_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("store-fjall");
        // A pid above the kernel's pid_max (4,194,304 at most) never runs.
        let dead = dir.path().join(".store-fjall.import-2147483000");
        let live = dir
            .path()
            .join(format!(".store-fjall.import-{}", std::process::id()));
        let other = dir.path().join(".store-rocksdb.import-2147483000");
        for d in [&dead, &live, &other] {
            std::fs::create_dir_all(d.join("keyspaces")).expect("mkdir");
        }
        remove_leftovers(&target, "import");
        assert!(!dead.exists(), "a dead import's staging dir stays");
        assert!(
            live.exists() && other.exists(),
            "a live process's or another backend's dir went"
        );
    }

    /// The break-it report: a FILE that appeared while the export ran was
    /// overwritten by the final rename. `publish` never replaces a file.
    #[test]
    fn publish_never_replaces_a_file_that_appeared_meanwhile() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (tmp, file) = (
            dir.path().join(".out.partial-1"),
            dir.path().join("out.dump"),
        );
        std::fs::write(&tmp, b"ANKUSADP the dump").expect("write");
        std::fs::write(&file, b"precious").expect("write");
        let Err(Fail(code, msg)) = publish(&tmp, &file) else {
            panic!("a file that exists was replaced")
        };
        assert_eq!(code, 2, "{msg}");
        assert!(
            msg.contains("appeared while the export ran") && msg.contains(".out.partial-1"),
            "{msg}"
        );
        assert_eq!(std::fs::read(&file).expect("read"), b"precious");
        assert_eq!(
            std::fs::read(&tmp).expect("read"),
            b"ANKUSADP the dump",
            "the dump is kept where the message says"
        );
        std::fs::remove_file(&file).expect("rm");
        assert!(publish(&tmp, &file).is_ok());
        assert_eq!(std::fs::read(&file).expect("read"), b"ANKUSADP the dump");
        assert!(!tmp.exists(), "the temporary name is gone");
    }
}
