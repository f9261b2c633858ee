//! Store format migrations (docs/design.md section 8): the registry of
//! `(from, to, migration)` entries, the resolution of the chain from a
//! store's format to the one a binary reads, and the pure builder of each
//! migration batch.
//!
//! # What it owns
//! The meta keys [`FORMAT_KEY`] (moved here, and by [`crate::init_store`]) and
//! [`MIGRATION_KEY`] (a step's progress), and whatever a step rewrites.
//!
//! # Shape
//! A [`Migration`] is one forward step `from -> to` whose [`StepFn`] takes a
//! reader and the cursor where the step stopped, and returns the next bounded
//! batch (at most [`Migration::batch_rows`] rows) and the cursor after it, or
//! `None` when the step is done. [`next_batch`] wraps it: it reads the stamp
//! and the progress key, calls the step, and adds to the step's batch either
//! the new progress ([`MigrationProgress`], while the step is not done) or the
//! new stamp and the deletion of the progress key (its last batch). The
//! caller commits each batch as it is, all or nothing, so:
//!
//! - a crash between two batches leaves the stamp at `from` and the progress
//!   key where the last committed batch put it: the next start resumes there,
//!   and no batch's rows are rewritten twice;
//! - the stamp moves only in a step's last batch: a binary that reads only
//!   `from` still reads a store in the middle of the step (it refuses nothing
//!   it would otherwise read; it does not resume the step, and the next start
//!   of the newer binary does).
//!
//! No clock, no I/O: the runtime (the binary's `src/open/stamp.rs`) reads, calls
//! [`next_batch`] and commits.
//!
//! # Invariants
//! - Forward only: every entry has `to > from`, and at most one entry leaves a
//!   format ([`check_registry`]); there are no down migrations. The rollback
//!   boundary of a format is the first start of a binary that writes it.
//! - [`FORMAT_KEY`] is `from` while [`MIGRATION_KEY`] is present, and the
//!   progress names the step `from -> to` ([`next_batch`] refuses anything else).

use ankusa_engine::{Batch, Cf, EngineError, KeyRange, Op, Read};
use ankusa_keys::meta::{decode_format, encode_format};
use ankusa_keys::{FORMAT_KEY, MIGRATION_KEY, MigrationProgress, ValueError, hooks_range};

use crate::QueueError;

/// The most rows one batch of a real migration step rewrites: a step's batch
/// stays small whatever the store's size (docs/design.md section 8).
pub const MIGRATION_BATCH_ROWS: usize = 1_000;

/// One batch of a migration step, as its [`StepFn`] builds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepBatch {
    /// The step's own writes (it must not touch [`FORMAT_KEY`] or
    /// [`MIGRATION_KEY`]: [`next_batch`] writes those).
    pub batch: Batch,
    /// Rows this batch rewrites; at most the `limit` the step was given.
    pub rows: u64,
    /// Where the next batch starts (non-empty), or `None` when this is the
    /// step's last batch.
    pub next: Option<Vec<u8>>,
}

/// A migration step's batch builder: `(reader, cursor, limit)` → the next
/// batch of at most `limit` rows. `cursor` is `None` at the start of the
/// step, else the `next` of the last committed batch. A step must be
/// idempotent per batch from a given cursor (a batch is built again after a
/// crash that lost it).
///
/// # Errors
/// The reader's errors, and values that do not decode.
pub type StepFn =
    fn(read: &dyn Read, cursor: Option<&[u8]>, limit: usize) -> Result<StepBatch, QueueError>;

/// One `(from, to, migration)` entry of the registry.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// The store format it reads.
    pub from: u32,
    /// The store format it leaves (above `from`).
    pub to: u32,
    /// What it rewrites, in words, from `rewrites ...` (`ankusa store
    /// migrate --dry-run` prints it).
    pub rewrites: &'static str,
    /// True when it rewrites nothing and only moves the stamp.
    pub stamp_only: bool,
    /// The most rows one of its batches rewrites.
    pub batch_rows: usize,
    /// Its batch builder.
    pub step: StepFn,
}

/// Every migration this code knows, in `from` order: what `ankusa serve` runs
/// at boot and `ankusa store migrate` runs on a stopped store.
pub const REGISTRY: &[Migration] = &[Migration {
    from: 1,
    to: 2,
    rewrites: "rewrites nothing: format 2 adds ordering lanes (ADR 0004 section 5), and no lane can exist in a format 1 store; stamps format 2",
    stamp_only: true,
    batch_rows: MIGRATION_BATCH_ROWS,
    step: stamp_only,
}];

/// The step of a stamp-only migration: one empty batch, done.
///
/// # Errors
/// None.
pub fn stamp_only(
    _read: &dyn Read,
    _cursor: Option<&[u8]>,
    _limit: usize,
) -> Result<StepBatch, QueueError> {
    Ok(StepBatch::default())
}

/// The format of the test-only migration [`TEST_MIGRATION`] leads to. No
/// real binary writes it: a binary runs [`TEST_MIGRATION`] only under its
/// test setting (`ANKUSA_TEST_SUPPORTED_FORMAT=3`, src/open/stamp.rs).
pub const TEST_FORMAT: u32 = 3;

/// A test-only migration `2 -> 3` that really rewrites rows, in batches of 8:
/// for every envelope of cf `hooks` it adds 1 to a count under
/// [`test_mark_key`] in cf `meta` (read, then written). A row rewritten twice
/// (a batch applied again after a crash) would count 2: the migration's crash
/// test checks every count is exactly 1.
pub const TEST_MIGRATION: Migration = Migration {
    from: 2,
    to: TEST_FORMAT,
    rewrites: "rewrites a test mark per envelope of cf hooks (test only): adds 1 to meta key migration-test/<hook key>",
    stamp_only: false,
    batch_rows: 8,
    step: test_step,
};

const TEST_MARK: &[u8] = b"migration-test/";

/// The meta key [`TEST_MIGRATION`] counts a hook under: `migration-test/` +
/// the hook's key in cf `hooks`. Its value is the count, `u32` big endian.
pub fn test_mark_key(hook_key: &[u8]) -> Vec<u8> {
    let mut k = TEST_MARK.to_vec();
    k.extend_from_slice(hook_key);
    k
}

/// Every key [`TEST_MIGRATION`] wrote.
pub fn test_marks_range() -> KeyRange {
    KeyRange::prefix(TEST_MARK)
}

fn test_step(
    read: &dyn Read,
    cursor: Option<&[u8]>,
    limit: usize,
) -> Result<StepBatch, QueueError> {
    let mut range = hooks_range();
    if let Some(c) = cursor {
        let mut start = c.to_vec();
        start.push(0);
        range.start = start;
    }
    let page = read.scan(Cf::Hooks, &range, ankusa_engine::Direction::Forward, limit)?;
    let mut batch = Batch::new();
    for (key, _) in &page {
        let mark = test_mark_key(key);
        let count = match read.get(Cf::Meta, &mark)? {
            Some(v) => {
                u32::from_be_bytes(v.as_ref().try_into().map_err(|_| ValueError::WrongLength {
                    what: "migration test mark",
                    expected: 4,
                    found: v.len(),
                })?)
            }
            None => 0,
        };
        batch.put(Cf::Meta, mark, (count + 1).to_be_bytes());
    }
    let next = if page.len() < limit {
        None
    } else {
        page.last().map(|(k, _)| k.to_vec())
    };
    Ok(StepBatch {
        batch,
        rows: page.len() as u64,
        next,
    })
}

/// Why a store cannot be brought to the format a binary reads.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The store was written by a newer binary (docs/design.md section 8).
    /// Nothing was written.
    #[error(
        "StoreFormatNewer {{ found: {found}, supported: {supported} }}: this store is format {found}, written by a newer ankusa; \
         this ankusa reads store formats up to {supported} and changed nothing. Run an ankusa that reads format {found} on it \
         (a store cannot go back to an older format: README, \"Upgrades\")"
    )]
    StoreFormatNewer {
        /// The store's stamp.
        found: u32,
        /// The newest format this binary reads.
        supported: u32,
    },
    /// A migration to a format newer than this binary's is in the middle
    /// (a newer binary started it and stopped): the stamp is still one this
    /// binary reads, but the rows may be part rewritten. Nothing was written.
    #[error(
        "StoreFormatNewer {{ found: {to}, supported: {supported} }}: a migration of this store from format {from} to format {to} \
         is in the middle (a newer ankusa started it); this ankusa reads store formats up to {supported} and changed nothing. \
         Run an ankusa that reads format {to} on it: it resumes the migration"
    )]
    MigrationNewer {
        /// The store's stamp (the step's `from`).
        from: u32,
        /// The step's `to`.
        to: u32,
        /// The newest format this binary reads.
        supported: u32,
    },
    /// No chain of registry entries leads from the store's format to the
    /// binary's (a format below the oldest one this code can migrate).
    #[error(
        "store format {from} cannot be migrated to format {supported} by this ankusa: no migration leaves format {reached}{}",
        stopped_at(.from, .reached)
    )]
    NoPath {
        /// The store's stamp.
        from: u32,
        /// The format the chain reached before it found no entry.
        reached: u32,
        /// The newest format this binary reads.
        supported: u32,
    },
    /// A registry that is not forward-only or has two entries from one format.
    #[error("the migration registry is inconsistent: {0}")]
    Registry(String),
    /// The store has no stamp (not a store a relay has opened).
    #[error("no store format stamp: not a store a relay has opened")]
    NoStamp,
    /// A migration's batch was asked for a store whose stamp is not its `from`.
    #[error("migration {from} -> {to} on a store stamped format {found}")]
    StampMismatch {
        /// The store's stamp.
        found: u32,
        /// The migration's `from`.
        from: u32,
        /// The migration's `to`.
        to: u32,
    },
    /// The progress key names another step than the one the stamp calls for.
    #[error(
        "the store is stamped format {found} but its migration progress (meta key `migration`) is of the step {from} -> {to}: \
         not a store an ankusa migration left"
    )]
    ProgressMismatch {
        /// The store's stamp.
        found: u32,
        /// The progress's `from`.
        from: u32,
        /// The progress's `to`.
        to: u32,
    },
    /// The stamp (meta key `format`) or the progress (meta key `migration`)
    /// does not decode: not a value an ankusa wrote (a damaged store, or a
    /// hand-made dump). No migration can start from it; nothing was written.
    /// (The decode error is in the message, not a source: `{:#}` shows it
    /// once.)
    #[error(
        "the store's meta key `{key}` ({what}) does not decode: {error}; this ankusa cannot tell the store's format and changed \
         nothing (restore the store from a backup dump)"
    )]
    Undecodable {
        /// The meta key: `format` or `migration`.
        key: &'static str,
        /// What the key holds.
        what: &'static str,
        /// Why it does not decode.
        error: ValueError,
    },
    /// The engine failed a read.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A stored value does not decode.
    #[error("corrupt value: {0}")]
    Value(#[from] ValueError),
    /// A step's builder failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// The tail of [`MigrateError::NoPath`]'s message: where the chain stopped,
/// when not at the store's own format.
fn stopped_at(from: &u32, reached: &u32) -> String {
    if reached == from {
        String::new()
    } else {
        format!(" (the chain from format {from} stopped there)")
    }
}

/// Checks that `registry` is forward-only (`to > from` in every entry), has
/// at most one entry leaving each format, and bounds every step
/// (`batch_rows > 0`).
///
/// # Errors
/// [`MigrateError::Registry`] naming the first entry that breaks a rule.
pub fn check_registry(registry: &[Migration]) -> Result<(), MigrateError> {
    for (i, m) in registry.iter().enumerate() {
        if m.to <= m.from {
            return Err(MigrateError::Registry(format!(
                "{} -> {} does not go forward (there are no down migrations)",
                m.from, m.to
            )));
        }
        if m.batch_rows == 0 {
            return Err(MigrateError::Registry(format!(
                "{} -> {} has no batch bound",
                m.from, m.to
            )));
        }
        if let Some(o) = registry[..i].iter().find(|o| o.from == m.from) {
            return Err(MigrateError::Registry(format!(
                "two migrations leave format {}: to {} and to {}",
                m.from, o.to, m.to
            )));
        }
    }
    Ok(())
}

/// The chain of `registry` entries that takes a store of format `found` to
/// format `supported`, in the order to run them; empty when `found` is
/// `supported`.
///
/// # Errors
/// [`MigrateError::StoreFormatNewer`] when `found > supported`;
/// [`MigrateError::NoPath`] when some format on the way has no entry leaving
/// it, or its entry leads past `supported`; [`MigrateError::Registry`] from
/// [`check_registry`].
pub fn plan(
    registry: &[Migration],
    found: u32,
    supported: u32,
) -> Result<Vec<Migration>, MigrateError> {
    check_registry(registry)?;
    if found > supported {
        return Err(MigrateError::StoreFormatNewer { found, supported });
    }
    let mut chain = Vec::new();
    let mut at = found;
    while at < supported {
        match registry.iter().find(|m| m.from == at) {
            Some(m) if m.to <= supported => {
                chain.push(*m);
                at = m.to;
            }
            _ => {
                return Err(MigrateError::NoPath {
                    from: found,
                    reached: at,
                    supported,
                });
            }
        }
    }
    Ok(chain)
}

/// Refuses a store this binary must not touch: a stamp above `supported`
/// ([`MigrateError::StoreFormatNewer`]), or a migration in the middle whose
/// `to` is above it ([`MigrateError::MigrationNewer`]: the stamp is still
/// old, but a newer binary has rewritten part of the rows).
///
/// # Errors
/// Those two.
pub fn check_readable(
    found: u32,
    progress: Option<&MigrationProgress>,
    supported: u32,
) -> Result<(), MigrateError> {
    if found > supported {
        return Err(MigrateError::StoreFormatNewer { found, supported });
    }
    if let Some(p) = progress
        && p.to > supported
    {
        return Err(MigrateError::MigrationNewer {
            from: p.from,
            to: p.to,
            supported,
        });
    }
    Ok(())
}

/// The store's format stamp, or `None` for a store never opened by a relay.
///
/// # Errors
/// The reader's errors; [`MigrateError::Undecodable`] for a stamp that is not
/// 4 bytes.
pub fn read_format(read: &dyn Read) -> Result<Option<u32>, MigrateError> {
    match read.get(Cf::Meta, FORMAT_KEY)? {
        Some(v) => Ok(Some(decode_format(&v).map_err(|error| {
            MigrateError::Undecodable {
                key: "format",
                what: "the store format stamp",
                error,
            }
        })?)),
        None => Ok(None),
    }
}

/// The progress of a migration step in the middle, if one is.
///
/// # Errors
/// The reader's errors; [`MigrateError::Undecodable`] for a value that does
/// not decode.
pub fn read_progress(read: &dyn Read) -> Result<Option<MigrationProgress>, MigrateError> {
    match read.get(Cf::Meta, MIGRATION_KEY)? {
        Some(v) => Ok(Some(MigrationProgress::decode(&v).map_err(|error| {
            MigrateError::Undecodable {
                key: "migration",
                what: "the progress of a migration in the middle",
                error,
            }
        })?)),
        None => Ok(None),
    }
}

/// One batch of a migration step, ready to commit, and where the step stands
/// once it is committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The step's writes, plus the progress key, or (in its last batch) the
    /// new stamp and the progress key's deletion.
    pub batch: Batch,
    /// Rows this batch rewrites.
    pub rows: u64,
    /// True when this is the step's last batch (it moves the stamp).
    pub done: bool,
    /// The step's batches once this one is committed (those of earlier runs
    /// included).
    pub batches_total: u64,
    /// The step's rows once this one is committed (earlier runs included).
    pub rows_total: u64,
    /// True when the step had batches committed before this call (a step
    /// resumed after a crash or a stop).
    pub resumed: bool,
}

/// The next batch of `migration` on the store `read` reads: reads the stamp
/// and the progress key, builds the step's batch from where it stopped, and
/// adds the progress (or, in the step's last batch, the stamp `to` and the
/// deletion of the progress key).
///
/// Precondition: the store is stamped `migration.from`. Invariant kept: the
/// stamp moves only in the step's last batch, with the progress key's
/// deletion, so the store is always either wholly `from` (with the progress
/// of the batches committed) or wholly `to`.
///
/// # Errors
/// [`MigrateError::NoStamp`], [`MigrateError::StampMismatch`],
/// [`MigrateError::ProgressMismatch`], and the reader's and the step's errors.
///
/// # Panics
/// When the step breaks its contract (more rows than its bound, a write of
/// the stamp or the progress key, an empty cursor): a bug of the registry.
pub fn next_batch(read: &dyn Read, migration: &Migration) -> Result<Planned, MigrateError> {
    let found = read_format(read)?.ok_or(MigrateError::NoStamp)?;
    if found != migration.from {
        return Err(MigrateError::StampMismatch {
            found,
            from: migration.from,
            to: migration.to,
        });
    }
    let progress = read_progress(read)?;
    if let Some(p) = &progress
        && (p.from, p.to) != (migration.from, migration.to)
    {
        return Err(MigrateError::ProgressMismatch {
            found,
            from: p.from,
            to: p.to,
        });
    }
    let step = (migration.step)(
        read,
        progress.as_ref().map(|p| p.cursor.as_slice()),
        migration.batch_rows,
    )?;
    assert!(
        step.rows <= migration.batch_rows as u64,
        "migration {} -> {} rewrote {} rows in one batch, its bound is {}",
        migration.from,
        migration.to,
        step.rows,
        migration.batch_rows
    );
    assert!(
        !step.batch.ops().iter().any(touches_own_keys),
        "migration {} -> {} writes the stamp or the progress key itself",
        migration.from,
        migration.to
    );
    let (batches_before, rows_before) = progress.as_ref().map_or((0, 0), |p| (p.batches, p.rows));
    let batches_total = batches_before + 1;
    let rows_total = rows_before + step.rows;
    let mut batch = step.batch;
    let done = match step.next {
        None => {
            batch.delete(Cf::Meta, MIGRATION_KEY);
            batch.put(Cf::Meta, FORMAT_KEY, encode_format(migration.to));
            true
        }
        Some(cursor) => {
            assert!(
                !cursor.is_empty(),
                "migration {} -> {} gave an empty cursor",
                migration.from,
                migration.to
            );
            let p = MigrationProgress {
                from: migration.from,
                to: migration.to,
                batches: batches_total,
                rows: rows_total,
                cursor,
            };
            batch.put(Cf::Meta, MIGRATION_KEY, p.encode());
            false
        }
    };
    Ok(Planned {
        batch,
        rows: step.rows,
        done,
        batches_total,
        rows_total,
        resumed: progress.is_some(),
    })
}

fn touches_own_keys(op: &Op) -> bool {
    match op {
        Op::Put {
            cf: Cf::Meta, key, ..
        }
        | Op::Delete { cf: Cf::Meta, key } => key == FORMAT_KEY || key == MIGRATION_KEY,
        Op::DeleteRange {
            cf: Cf::Meta,
            range,
        } => range.contains(FORMAT_KEY) || range.contains(MIGRATION_KEY),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    //! The registry's rules (forward only, one entry per format, bounded),
    //! chain resolution from every older format and refusal of gaps and of a
    //! newer store, and the batches of the stamp-only and the test migration
    //! on the memory engine.
    #![allow(clippy::unwrap_used)]

    use ankusa_engine::memory::MemoryKv;
    use ankusa_engine::{Direction, Durability, Kv, scan_pages};
    use ankusa_keys::{STORE_FORMAT, Seq, TenantOrd, hook_key};

    use super::*;

    fn entry(from: u32, to: u32) -> Migration {
        Migration {
            from,
            to,
            rewrites: "test",
            stamp_only: true,
            batch_rows: 10,
            step: stamp_only,
        }
    }

    fn formats(chain: &[Migration]) -> Vec<(u32, u32)> {
        chain.iter().map(|m| (m.from, m.to)).collect()
    }

    /// A store stamped `format`, with `hooks` envelopes in cf `hooks`.
    fn store(format: u32, hooks: u64) -> MemoryKv {
        let kv = MemoryKv::new();
        kv.write(crate::init_store(), Durability::Sync).unwrap();
        let mut b = Batch::new();
        b.put(Cf::Meta, FORMAT_KEY, encode_format(format));
        for seq in 1..=hooks {
            b.put(
                Cf::Hooks,
                hook_key(TenantOrd(1 + (seq % 3) as u32), Seq(seq)),
                format!("envelope {seq}"),
            );
        }
        kv.write(b, Durability::Sync).unwrap();
        kv
    }

    /// Every (cf, key, value) of the store.
    fn listing(kv: &MemoryKv) -> Vec<(Cf, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for cf in Cf::ALL {
            for kv in scan_pages(
                kv,
                cf,
                KeyRange::new(Vec::new(), vec![0xff; 64]),
                Direction::Forward,
                100,
            ) {
                let (k, v) = kv.unwrap();
                out.push((cf, k.to_vec(), v.to_vec()));
            }
        }
        out
    }

    #[test]
    fn the_registry_takes_every_older_format_to_the_current_one() {
        check_registry(REGISTRY).unwrap();
        for found in 1..STORE_FORMAT {
            let chain = plan(REGISTRY, found, STORE_FORMAT).unwrap();
            assert_eq!(chain.first().map(|m| m.from), Some(found));
            assert_eq!(chain.last().map(|m| m.to), Some(STORE_FORMAT));
            assert!(
                chain.windows(2).all(|w| w[0].to == w[1].from),
                "{:?}",
                formats(&chain)
            );
        }
        assert_eq!(formats(&plan(REGISTRY, 1, 2).unwrap()), [(1, 2)]);
        assert!(REGISTRY[0].stamp_only);
        assert!(
            plan(REGISTRY, STORE_FORMAT, STORE_FORMAT)
                .unwrap()
                .is_empty()
        );
        // The test setting's registry: the real one and 2 -> 3.
        let mut with_test = REGISTRY.to_vec();
        with_test.push(TEST_MIGRATION);
        assert_eq!(
            formats(&plan(&with_test, 1, TEST_FORMAT).unwrap()),
            [(1, 2), (2, 3)]
        );
    }

    #[test]
    fn a_newer_store_is_refused_naming_both_formats() {
        let e = plan(REGISTRY, 3, 2).unwrap_err();
        assert!(
            matches!(
                e,
                MigrateError::StoreFormatNewer {
                    found: 3,
                    supported: 2
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("StoreFormatNewer { found: 3, supported: 2 }"),
            "{text}"
        );
        assert!(text.contains("Run an ankusa that reads format 3"), "{text}");
        // Under the test setting of a binary that reads only format 1.
        let e = plan(&[], 2, 1).unwrap_err();
        assert!(
            matches!(
                e,
                MigrateError::StoreFormatNewer {
                    found: 2,
                    supported: 1
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn a_migration_in_the_middle_toward_a_newer_format_is_refused() {
        let p = MigrationProgress {
            from: 2,
            to: 3,
            batches: 2,
            rows: 16,
            cursor: vec![1],
        };
        check_readable(2, Some(&p), 3).unwrap();
        check_readable(2, None, 2).unwrap();
        let e = check_readable(2, Some(&p), 2).unwrap_err();
        assert!(
            matches!(
                e,
                MigrateError::MigrationNewer {
                    from: 2,
                    to: 3,
                    supported: 2
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("a migration of this store from format 2 to format 3 is in the middle"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("Run an ankusa that reads format 3 on it: it resumes the migration"),
            "{e}"
        );
        assert!(matches!(
            check_readable(3, None, 2),
            Err(MigrateError::StoreFormatNewer {
                found: 3,
                supported: 2
            })
        ));
    }

    #[test]
    fn a_chain_resolves_in_order_and_a_gap_is_refused() {
        let reg = [entry(3, 5), entry(1, 2), entry(2, 3)];
        assert_eq!(
            formats(&plan(&reg, 1, 5).unwrap()),
            [(1, 2), (2, 3), (3, 5)]
        );
        assert_eq!(formats(&plan(&reg, 2, 5).unwrap()), [(2, 3), (3, 5)]);
        assert_eq!(formats(&plan(&reg, 1, 3).unwrap()), [(1, 2), (2, 3)]);
        // A format no entry leaves.
        assert!(matches!(
            plan(&reg, 4, 5),
            Err(MigrateError::NoPath {
                from: 4,
                reached: 4,
                supported: 5
            })
        ));
        assert!(matches!(
            plan(&reg, 0, 5),
            Err(MigrateError::NoPath {
                from: 0,
                reached: 0,
                supported: 5
            })
        ));
        // An entry that leads past the supported format is no path to it.
        assert!(matches!(
            plan(&reg, 1, 4),
            Err(MigrateError::NoPath {
                from: 1,
                reached: 3,
                supported: 4
            })
        ));
        // A gap in the middle.
        let gap = [entry(1, 2), entry(3, 4)];
        let e = plan(&gap, 1, 4).unwrap_err();
        assert!(
            matches!(
                e,
                MigrateError::NoPath {
                    from: 1,
                    reached: 2,
                    supported: 4
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "store format 1 cannot be migrated to format 4 by this ankusa: no migration leaves format 2 (the chain from format 1 stopped there)"
        );
    }

    #[test]
    fn the_registry_is_forward_only_bounded_and_has_one_entry_per_format() {
        let down = [entry(2, 1)];
        assert!(
            matches!(check_registry(&down), Err(MigrateError::Registry(m)) if m.contains("2 -> 1 does not go forward"))
        );
        let same = [entry(2, 2)];
        assert!(check_registry(&same).is_err());
        let twice = [entry(1, 2), entry(1, 3)];
        assert!(
            matches!(check_registry(&twice), Err(MigrateError::Registry(m)) if m.contains("two migrations leave format 1"))
        );
        let unbounded = [Migration {
            batch_rows: 0,
            ..entry(1, 2)
        }];
        assert!(
            matches!(check_registry(&unbounded), Err(MigrateError::Registry(m)) if m.contains("no batch bound"))
        );
        // plan refuses an inconsistent registry before anything else.
        assert!(matches!(plan(&twice, 1, 2), Err(MigrateError::Registry(_))));
    }

    #[test]
    fn format_1_to_2_rewrites_nothing_and_only_stamps() {
        let kv = store(1, 20);
        let before = listing(&kv);
        let chain = plan(REGISTRY, 1, STORE_FORMAT).unwrap();
        let p = next_batch(&kv, &chain[0]).unwrap();
        assert!(p.done);
        assert_eq!(
            (p.rows, p.batches_total, p.rows_total, p.resumed),
            (0, 1, 0, false)
        );
        let mut expected = Batch::new();
        expected.delete(Cf::Meta, MIGRATION_KEY);
        expected.put(Cf::Meta, FORMAT_KEY, encode_format(2));
        assert_eq!(p.batch, expected);
        kv.write(p.batch, Durability::Sync).unwrap();
        let after = listing(&kv);
        let changed: Vec<_> = after.iter().filter(|e| !before.contains(e)).collect();
        assert_eq!(
            changed,
            [&(Cf::Meta, FORMAT_KEY.to_vec(), vec![0, 0, 0, 2])]
        );
        assert_eq!(before.len(), after.len());
        // Once stamped, its batch is refused: the store is no longer format 1.
        assert!(matches!(
            next_batch(&kv, &chain[0]),
            Err(MigrateError::StampMismatch {
                found: 2,
                from: 1,
                to: 2
            })
        ));
    }

    /// The test migration over 20 hooks in batches of 8: 3 batches (8, 8, 4),
    /// the stamp at 2 and the progress key present until the last, which
    /// stamps 3 and deletes it; a batch built again from the same progress
    /// (a crash lost it) is the same batch; every hook counted once.
    #[test]
    fn a_step_is_bounded_per_batch_and_resumes_from_its_progress() {
        let kv = store(2, 20);
        let m = TEST_MIGRATION;
        let mut seen = Vec::new();
        loop {
            let p = next_batch(&kv, &m).unwrap();
            assert!(p.rows <= m.batch_rows as u64);
            // Lost before its commit and built again: the same batch.
            assert_eq!(next_batch(&kv, &m).unwrap(), p);
            seen.push((p.rows, p.batches_total, p.rows_total, p.resumed, p.done));
            let done = p.done;
            kv.write(p.batch, Durability::Sync).unwrap();
            if done {
                break;
            }
            assert_eq!(
                read_format(&kv).unwrap(),
                Some(2),
                "the stamp moves only in the last batch"
            );
            let progress = read_progress(&kv).unwrap().unwrap();
            assert_eq!((progress.from, progress.to), (2, 3));
        }
        assert_eq!(
            seen,
            [
                (8, 1, 8, false, false),
                (8, 2, 16, true, false),
                (4, 3, 20, true, true)
            ]
        );
        assert_eq!(read_format(&kv).unwrap(), Some(3));
        assert_eq!(read_progress(&kv).unwrap(), None);
        let marks = kv
            .scan(Cf::Meta, &test_marks_range(), Direction::Forward, 100)
            .unwrap();
        assert_eq!(marks.len(), 20);
        assert!(
            marks.iter().all(|(_, v)| v.as_ref() == [0, 0, 0, 1]),
            "{marks:?}"
        );
        // The step's own batch never writes the stamp or the progress key.
        assert!(matches!(
            next_batch(&kv, &m),
            Err(MigrateError::StampMismatch { found: 3, .. })
        ));
    }

    #[test]
    fn every_registered_step_is_bounded_on_a_store_larger_than_its_bound() {
        let mut all = REGISTRY.to_vec();
        all.push(TEST_MIGRATION);
        for m in all {
            let kv = store(m.from, 2 * m.batch_rows as u64 + 3);
            let mut batches = 0u64;
            loop {
                let p = next_batch(&kv, &m).unwrap();
                assert!(
                    p.rows <= m.batch_rows as u64,
                    "{} -> {}: {} rows",
                    m.from,
                    m.to,
                    p.rows
                );
                // Each rewritten row is a bounded number of ops (here: one),
                // plus the progress or the stamp and the progress's deletion.
                assert!(
                    p.batch.len() <= m.batch_rows + 2,
                    "{} -> {}: {} ops",
                    m.from,
                    m.to,
                    p.batch.len()
                );
                batches += 1;
                let done = p.done;
                kv.write(p.batch, Durability::Sync).unwrap();
                if done {
                    break;
                }
            }
            assert_eq!(read_format(&kv).unwrap(), Some(m.to));
            assert_eq!(
                batches,
                if m.stamp_only { 1 } else { 3 },
                "{} -> {}",
                m.from,
                m.to
            );
        }
    }

    #[test]
    fn a_progress_of_another_step_or_no_stamp_is_refused() {
        let kv = store(2, 3);
        let mut b = Batch::new();
        let p = MigrationProgress {
            from: 1,
            to: 2,
            batches: 1,
            rows: 0,
            cursor: vec![1],
        };
        b.put(Cf::Meta, MIGRATION_KEY, p.encode());
        kv.write(b, Durability::Sync).unwrap();
        let e = next_batch(&kv, &TEST_MIGRATION).unwrap_err();
        assert!(
            matches!(
                e,
                MigrateError::ProgressMismatch {
                    found: 2,
                    from: 1,
                    to: 2
                }
            ),
            "{e:?}"
        );
        let empty = MemoryKv::new();
        assert!(matches!(
            next_batch(&empty, &TEST_MIGRATION),
            Err(MigrateError::NoStamp)
        ));
    }
}
