//! `ankusa store migrate DATA_DIR [--store B] [--dry-run]`: the store format
//! migrations (docs/design.md section 8) on a stopped store. The steps are
//! those `serve` runs at its open ([`crate::open::stamp`], where the hidden
//! test settings are read too).

use std::path::Path;
use std::process::ExitCode;

use ankusa_engine::Kv;
use ankusa_queue::migrate::{MigrateError, check_readable, plan, read_format, read_progress};

use crate::open::stamp::{Supported, plural, run, summary};
use crate::open::{Backend, OpenError, Opener};
use crate::store::Fail;

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
/// ([`crate::open::find`]), opened for writing as the relay opens it (a
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
    let supported = match Supported::from_env(Opener::Command) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ankusa store migrate: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let stores = match crate::open::find(args.dir, args.store) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ankusa store migrate: {e}");
            return ExitCode::from(e.exit_code());
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
            let kv = crate::open::rocksdb(dir, crate::open::Access::Write)?;
            migrate_store(&kv, backend, dir, supported, dry_run)
        }
        #[cfg(not(feature = "rocksdb"))]
        Backend::Rocksdb => Err(Fail(
            3,
            "a rocksdb store, but this binary was built without the `rocksdb` feature".into(),
        )),
        Backend::Fjall => {
            let kv = crate::open::fjall(dir)?;
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
        .ok_or_else(|| OpenError::no_stamp(dir, backend))?;
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
