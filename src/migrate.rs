//! Store format migrations at run time (docs/design.md section 8): the boot
//! step of `ankusa serve` and the command `ankusa store migrate DATA_DIR
//! [--store B] [--dry-run]` on a stopped store.
//!
//! The registry and each batch are `ankusa_queue::migrate`'s (pure); this
//! module reads the store's stamp, resolves the chain, commits each batch
//! (`Sync`), and logs one line per migration: from, to, batches, rows.
//!
//! A store newer than this binary is refused before anything is written,
//! with `StoreFormatNewer { found, supported }` and what to do (run an
//! ankusa that reads that format): `serve` exits 3, `store check` and
//! `store migrate` exit 3. So is a store in the middle of a migration to a
//! newer format (a newer binary started it, then stopped): its stamp is
//! still old, its rows may not be.
//!
//! # Test settings (hidden; read only here, for tests/it/migrate.rs)
//! - `ANKUSA_TEST_SUPPORTED_FORMAT=1`: the binary reads formats up to 1 (as
//!   a binary built before ADR 0004 did): it refuses a format 2 store.
//! - `ANKUSA_TEST_SUPPORTED_FORMAT=3`: it reads up to
//!   `ankusa_queue::migrate::TEST_FORMAT`, and its registry has the test-only
//!   migration 2 -> 3, which rewrites rows in batches of 8.
//! - `ANKUSA_TEST_MIGRATION_PAUSE_AFTER=K`: after the K-th batch this process
//!   commits, it logs `test setting: migration paused after K batches` and
//!   sleeps until it is killed (the crash test SIGKILLs it there).
//!
//! Any other value of either is refused by name.

use std::path::Path;
use std::process::ExitCode;

use ankusa_engine::{Durability, Kv};
use ankusa_keys::STORE_FORMAT;
use ankusa_queue::migrate::{
    MigrateError, Migration, REGISTRY, TEST_FORMAT, TEST_MIGRATION, check_readable, next_batch,
    plan, read_format, read_progress,
};
use tracing::info;

use crate::store::{Backend, Fail};

/// The formats this process reads and the migrations it may run.
pub struct Supported {
    /// The newest store format it reads (`STORE_FORMAT`, or the test setting's).
    pub format: u32,
    /// The registry it runs.
    pub registry: Vec<Migration>,
    /// The test setting `ANKUSA_TEST_MIGRATION_PAUSE_AFTER`.
    pause_after: Option<u64>,
}

impl Supported {
    /// `STORE_FORMAT` and `ankusa_queue::migrate::REGISTRY`, or what the
    /// hidden test settings (module docs) say.
    ///
    /// # Errors
    /// A test setting with a value it does not take, naming it.
    pub fn from_env() -> Result<Supported, String> {
        let mut s = Supported {
            format: STORE_FORMAT,
            registry: REGISTRY.to_vec(),
            pause_after: None,
        };
        match std::env::var("ANKUSA_TEST_SUPPORTED_FORMAT")
            .ok()
            .as_deref()
        {
            None => {}
            Some("1") => {
                s.format = 1;
                s.registry.retain(|m| m.to <= 1);
            }
            Some(v) if v == TEST_FORMAT.to_string() => {
                s.format = TEST_FORMAT;
                s.registry.push(TEST_MIGRATION);
            }
            Some(v) => {
                return Err(format!(
                    "ANKUSA_TEST_SUPPORTED_FORMAT={v}: a test setting that takes 1 or {TEST_FORMAT}"
                ));
            }
        }
        if let Ok(v) = std::env::var("ANKUSA_TEST_MIGRATION_PAUSE_AFTER") {
            let k = v
                .parse::<u64>()
                .ok()
                .filter(|k| *k > 0)
                .ok_or_else(|| format!("ANKUSA_TEST_MIGRATION_PAUSE_AFTER={v}: a test setting that takes a number of batches above 0"))?;
            s.pause_after = Some(k);
        }
        Ok(s)
    }
}

/// One migration step run to its end.
#[derive(Clone, Copy, Debug)]
pub struct Ran {
    /// The format it left.
    pub from: u32,
    /// The format it stamped.
    pub to: u32,
    /// Its batches, those of earlier runs included (a resumed step).
    pub batches: u64,
    /// Its rows, earlier runs included.
    pub rows: u64,
    /// True when it resumed a step an earlier run left in the middle.
    pub resumed: bool,
}

/// Brings the store from its stamp to `supported.format`, one registry
/// step after the other, each batch committed `Sync`; logs a line per
/// step. A store already at `supported.format` is left as it is (nothing
/// written); a newer one is refused before anything is written.
///
/// Precondition: the store has a stamp (a new store is stamped by
/// `ankusa_queue::init_store` first).
///
/// # Errors
/// [`MigrateError::StoreFormatNewer`], [`MigrateError::NoPath`], the store's
/// errors (a batch that failed is not committed: the next start resumes
/// after the last one that was).
pub fn run<K: Kv>(kv: &K, supported: &Supported) -> Result<Vec<Ran>, MigrateError> {
    let found = read_format(kv)?.ok_or(MigrateError::NoStamp)?;
    check_readable(found, read_progress(kv)?.as_ref(), supported.format)?;
    let chain = plan(&supported.registry, found, supported.format)?;
    let mut out = Vec::with_capacity(chain.len());
    let mut committed = 0u64;
    for m in &chain {
        let mut first_resumed = None;
        let ran = loop {
            let p = next_batch(kv, m)?;
            let resumed = *first_resumed.get_or_insert(p.resumed);
            let (done, batches, rows) = (p.done, p.batches_total, p.rows_total);
            kv.write(p.batch, Durability::Sync)?;
            committed += 1;
            tracing::debug!(
                from = m.from,
                to = m.to,
                batches,
                rows,
                "store migration batch committed"
            );
            if supported.pause_after == Some(committed) {
                info!(
                    from = m.from,
                    to = m.to,
                    batches,
                    rows,
                    "test setting: migration paused after {committed} batches"
                );
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                }
            }
            if done {
                break Ran {
                    from: m.from,
                    to: m.to,
                    batches,
                    rows,
                    resumed,
                };
            }
        };
        info!(
            from = ran.from,
            to = ran.to,
            batches = ran.batches,
            rows = ran.rows,
            resumed = ran.resumed,
            "store format migrated {} -> {}: {}",
            ran.from,
            ran.to,
            summary(&ran, m),
        );
        out.push(ran);
    }
    Ok(out)
}

/// `1 batch, 0 rows (stamp only)`, `3 batches, 20 rows (resumed: an earlier
/// run committed some of them)`.
fn summary(r: &Ran, m: &Migration) -> String {
    let mut s = format!(
        "{}, {}",
        plural(r.batches, "batch", "batches"),
        plural(r.rows, "row", "rows")
    );
    if m.stamp_only {
        s.push_str(" (stamp only)");
    }
    if r.resumed {
        s.push_str(" (resumed: an earlier run committed some of them)");
    }
    s
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The arguments of `ankusa store migrate`.
pub struct Args<'a> {
    /// The relay's data_dir, or a store directory.
    pub dir: &'a Path,
    /// Only this backend's store.
    pub store: Option<Backend>,
    /// Print what would run; write nothing.
    pub dry_run: bool,
}

/// `ankusa store migrate DATA_DIR [--store B] [--dry-run]`: each store found
/// ([`crate::store::find`]), opened for writing as the relay opens it (a
/// running relay's lock is refused by name), brought to the format this
/// binary reads, or with `--dry-run` only described.
///
/// Exit codes: 0 migrated, nothing to do, or the dry run printed; 1 a batch
/// failed (the store is left at the last committed batch, and the next run
/// or start resumes there); 2 usage (no store at `DATA_DIR`, a new store
/// whose first start was interrupted before its stamp); 3 the store cannot
/// be opened or this binary cannot migrate it (in use by a running relay, a
/// damaged WAL, data files but no format stamp, a newer store format, no
/// migration from its format, a stamp that does not decode, an engine
/// error).
pub fn main(args: &Args<'_>) -> ExitCode {
    let supported = match Supported::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ankusa store migrate: {e}");
            return ExitCode::from(2);
        }
    };
    let stores = match crate::store::find(args.dir, args.store) {
        Ok(s) => s,
        Err(Fail(code, msg)) => {
            eprintln!("ankusa store migrate: {msg}");
            return ExitCode::from(code);
        }
    };
    let mut worst = 0u8;
    for (backend, dir) in stores {
        if let Err(Fail(code, msg)) = migrate_one(backend, &dir, &supported, args.dry_run) {
            eprintln!("ankusa store migrate: {}: {msg}", dir.display());
            worst = worst.max(code);
        }
    }
    ExitCode::from(worst)
}

fn migrate_one(
    backend: Backend,
    dir: &Path,
    supported: &Supported,
    dry_run: bool,
) -> Result<(), Fail> {
    match backend {
        #[cfg(feature = "rocksdb")]
        Backend::Rocksdb => {
            crate::store::refuse_if_locked(dir)?;
            let kv = ankusa_engine_rocksdb::RocksKv::open(dir)
                .map_err(|e| crate::store::open_failed(dir, &e))?;
            migrate_store(&kv, backend, dir, supported, dry_run)
        }
        #[cfg(not(feature = "rocksdb"))]
        Backend::Rocksdb => Err(Fail(
            3,
            "a rocksdb store, but this binary was built without the `rocksdb` feature".into(),
        )),
        Backend::Fjall => {
            let kv = ankusa_engine_fjall::FjallKv::open(dir)
                .map_err(|e| crate::store::open_failed(dir, &e))?;
            migrate_store(&kv, backend, dir, supported, dry_run)
        }
    }
}

/// The exit code of a migration error: 3 when this binary cannot migrate
/// the store at all (newer, no path, a stamp or progress that does not
/// decode: running it again cannot help), 1 when a batch failed on the way.
fn failed(e: MigrateError) -> Fail {
    match e {
        MigrateError::StoreFormatNewer { .. }
        | MigrateError::MigrationNewer { .. }
        | MigrateError::NoPath { .. }
        | MigrateError::Undecodable { .. }
        | MigrateError::Registry(_) => Fail(3, e.to_string()),
        MigrateError::NoStamp => Fail(2, e.to_string()),
        e => Fail(
            1,
            format!(
                "the migration stopped: {e} (the store is at its last committed batch; run store migrate again to resume)"
            ),
        ),
    }
}

fn migrate_store<K: Kv>(
    kv: &K,
    backend: Backend,
    dir: &Path,
    supported: &Supported,
    dry_run: bool,
) -> Result<(), Fail> {
    let found = read_format(kv)
        .map_err(failed)?
        .ok_or_else(|| crate::store::no_stamp(dir, backend))?;
    let what = format!("{} ({}, format {found})", dir.display(), backend.name());
    let progress = read_progress(kv).map_err(failed)?;
    check_readable(found, progress.as_ref(), supported.format).map_err(failed)?;
    let chain = plan(&supported.registry, found, supported.format).map_err(failed)?;
    if chain.is_empty() {
        println!(
            "{what}: nothing to do (this ankusa reads store format {})",
            supported.format
        );
        return Ok(());
    }
    if dry_run {
        println!(
            "{what}: would migrate to format {} in {} (--dry-run: nothing written)",
            supported.format,
            plural(chain.len() as u64, "step", "steps")
        );
        for m in &chain {
            let how = if m.stamp_only {
                "stamp only".to_owned()
            } else {
                format!("rewrites rows, at most {} per batch", m.batch_rows)
            };
            println!("  {} -> {} ({how}): {}", m.from, m.to, m.rewrites);
        }
        if let Some(p) = progress {
            println!(
                "  {} -> {} is in the middle: {} and {} committed by an earlier run; it resumes there",
                p.from,
                p.to,
                plural(p.batches, "batch", "batches"),
                plural(p.rows, "row", "rows")
            );
        }
        return Ok(());
    }
    let chain_by_from = |from: u32| chain.iter().find(|m| m.from == from);
    for r in run(kv, supported).map_err(failed)? {
        let Some(m) = chain_by_from(r.from) else {
            continue;
        };
        println!(
            "{what}: migrated {} -> {}: {}",
            r.from,
            r.to,
            summary(&r, m)
        );
    }
    println!("{what}: now format {}", supported.format);
    Ok(())
}
