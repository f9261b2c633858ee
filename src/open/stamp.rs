//! The format stamp and the store format migrations at open (docs/design.md
//! section 8): `serve` stamps a new store or brings an existing one to the
//! format this binary reads ([`prepare`]); `ankusa store migrate` runs the
//! same steps ([`run`]) on a stopped store (src/migrate.rs).
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

use ankusa_engine::{Cf, Durability, Kv};
use ankusa_keys::{FORMAT_KEY, STORE_FORMAT};
use ankusa_queue::migrate::{
    MigrateError, Migration, REGISTRY, TEST_FORMAT, TEST_MIGRATION, check_readable, next_batch,
    plan, read_format, read_progress,
};
use tracing::info;

use super::{Creation, OpenError, Opener};

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
    /// [`OpenError::TestSetting`]: a test setting with a value it does not
    /// take, naming it.
    pub fn from_env(opener: Opener) -> Result<Supported, OpenError> {
        Self::from_test_settings().map_err(|message| OpenError::TestSetting { opener, message })
    }

    fn from_test_settings() -> Result<Supported, String> {
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
pub fn summary(r: &Ran, m: &Migration) -> String {
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

/// `1 batch`, `2 batches`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `serve`'s step after the open: stamps a new store (only one [`Creation`]
/// allows: a store with data files and no stamp is refused,
/// [`OpenError::NoStamp`]), or brings an existing one to the format this
/// binary reads through the migration registry, logging a line per
/// migration ([`run`]); refuses a store newer than this binary before
/// anything is written (`MigrateError::StoreFormatNewer`, exit status 3).
///
/// # Errors
/// [`OpenError::TestSetting`], [`OpenError::NoStamp`],
/// [`OpenError::CreatesNone`], [`OpenError::Engine`] (the stamp's read or
/// write), [`OpenError::Io`] (the creation marker's removal),
/// [`OpenError::Migration`].
pub fn prepare<K: Kv>(kv: &K, creation: &Creation) -> Result<(), OpenError> {
    let supported = Supported::from_env(Opener::Serve)?;
    if kv
        .get(Cf::Meta, FORMAT_KEY)
        .map_err(OpenError::Engine)?
        .is_none()
    {
        if !creation.may_create
            && let Some((dir, backend)) = &creation.dir
        {
            return Err(OpenError::NoStamp {
                dir: dir.clone(),
                backend: *backend,
                opener: Opener::Serve,
            });
        }
        if supported.format < STORE_FORMAT {
            return Err(OpenError::CreatesNone {
                format: supported.format,
            });
        }
        kv.write(ankusa_queue::init_store(), Durability::Sync)
            .map_err(OpenError::Engine)?;
        info!(format = STORE_FORMAT, "new store");
    }
    creation.stamped()?;
    run(kv, &supported).map_err(OpenError::Migration)?;
    Ok(())
}
