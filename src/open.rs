//! Opening a store: every step between a data_dir and a store a command may
//! use, for `serve` and the `store` commands alike (docs/design.md section 8;
//! README, "Store damage").
//!
//! - Where the store is: `<data_dir>/store-<backend>` ([`store_dir`]), or the
//!   stores a `store` command finds in the directory it is given ([`find`]).
//! - Before the engine opens it (`serve`): a store directory that holds
//!   files is used only with its engine's record of what it holds
//!   (RocksDB's `CURRENT`, fjall's `version`): without it the engine's open
//!   would start a new, empty database there (RocksDB then deletes every
//!   table file the new MANIFEST does not name), so it is refused before the
//!   open, nothing changed ([`Creation::before_open`]). A new store gets its
//!   creation marker ([`creating_marker`]) first.
//! - The lock: one process per store. The engines take it at the open
//!   (RocksDB's `LOCK`, fjall's lock file); the `store` commands also ask
//!   RocksDB's without taking it before they open ([`rocksdb`]), because
//!   RocksDB renames a running relay's info log before it fails on the lock.
//! - The engine's own refusals by their kind ([`ankusa_engine::ErrorKind`]):
//!   a held lock is another process on the store, a corruption is a damaged
//!   store, refused with what to do ([`DAMAGED_ADVICE`]).
//! - The format stamp and the migrations: [`stamp`].
//!
//! Every refusal is an [`OpenError`]: its `Display` is the message a user
//! reads, [`OpenError::exit_code`] the command's exit status.

pub mod stamp;

use std::path::{Path, PathBuf};

use ankusa_engine::{EngineError, ErrorKind};
use ankusa_queue::migrate::MigrateError;

/// A store backend a `store` command opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// RocksDB (`store-rocksdb/`).
    Rocksdb,
    /// fjall (`store-fjall/`).
    Fjall,
}

impl Backend {
    /// Both, in the order they are looked for.
    pub const ALL: [Backend; 2] = [Backend::Rocksdb, Backend::Fjall];

    /// `rocksdb`, `fjall`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Rocksdb => "rocksdb",
            Backend::Fjall => "fjall",
        }
    }

    /// True when `dir` holds this backend's files (it wrote them).
    pub fn wrote(self, dir: &Path) -> bool {
        match self {
            Backend::Rocksdb => dir.join("CURRENT").is_file() && dir.join("IDENTITY").is_file(),
            Backend::Fjall => dir.join("version").is_file() && dir.join("keyspaces").is_dir(),
        }
    }

    /// The file that holds the engine's record of what the store holds:
    /// RocksDB's `CURRENT` (the name of its MANIFEST), fjall's `version`.
    fn record(self) -> &'static str {
        match self {
            Backend::Rocksdb => "CURRENT",
            Backend::Fjall => "version",
        }
    }
}

/// Who opens the store: the relay, or a `store` command on a stopped store.
/// They say the same refusal in their own words (a relay's data_dir, a
/// command's stopped store) and exit with their own codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opener {
    /// `ankusa serve`.
    Serve,
    /// `ankusa store check`, `migrate`, `export`, `import`.
    Command,
}

/// What to do about a store whose files do not verify (RocksDB's
/// `Corruption` at open), said by `serve` and the `store` commands.
pub const DAMAGED_ADVICE: &str = "Nothing was changed: a WAL damaged before its end is refused, not cut (every batch after the damage would be lost without a word). \
     Restore a backup dump with `ankusa store import`, or keep what precedes the damage: start the relay once with \
     ANKUSA_ROCKSDB_WAL_RECOVERY=point-in-time (the WAL is cut at the damage, for good; check the store after with `ankusa store check`)";

/// Why a store is not opened (or not used once open): each refusal with what
/// its message needs. `Display` is the message; [`OpenError::exit_code`] the
/// exit status.
#[derive(Debug)]
pub enum OpenError {
    /// The directory a `store` command was given is not one (exit 2).
    NotADirectory {
        /// The directory given.
        dir: PathBuf,
        /// Something else is there.
        exists: bool,
    },
    /// A directory that exists but cannot be read (permissions, a symlink
    /// loop, an I/O error) may hide a store (exit 3).
    Unreadable {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// No store of the backend `--store` names, but another's (exit 2).
    NoStoreOf {
        /// The directory given.
        dir: PathBuf,
        /// The backend `--store` names.
        wanted: Backend,
        /// The backends whose stores are there.
        found: Vec<Backend>,
    },
    /// No store at all in the directory given (exit 2).
    NoStore {
        /// The directory given.
        dir: PathBuf,
    },
    /// A store directory with files but not its engine's record of what the
    /// store holds: the engine's open would start a new, empty store there
    /// and drop the data files (exit 3). Nothing was changed.
    NoEngineRecord {
        /// The store directory.
        dir: PathBuf,
        /// Its backend.
        backend: Backend,
    },
    /// Another process holds the RocksDB store's `LOCK`, asked without
    /// taking it (exit 3).
    #[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
    HeldBy {
        /// The store's `LOCK` file.
        lock: PathBuf,
        /// The process that holds it.
        pid: i32,
    },
    /// The engine's open failed on the store's lock ([`ErrorKind::Locked`]):
    /// another relay (or a leftover process) uses the store (`serve`: exit 1;
    /// a command: exit 3).
    Locked {
        /// The store directory.
        dir: PathBuf,
        /// Who opened it.
        opener: Opener,
        /// The engine's error.
        cause: EngineError,
    },
    /// The store's files do not verify ([`ErrorKind::Corruption`]: a WAL
    /// damaged before its end), refused with what to do (exit 3).
    Damaged {
        /// The store directory.
        dir: PathBuf,
        /// Who opened it.
        opener: Opener,
        /// The engine's error.
        cause: EngineError,
    },
    /// Any other failure of the engine's open (`serve`: exit 1; a command:
    /// exit 3).
    CannotOpen {
        /// The store directory.
        dir: PathBuf,
        /// Who opened it.
        opener: Opener,
        /// The engine's error.
        cause: EngineError,
    },
    /// A store with the engine's data files and no format stamp: damaged, or
    /// its journal/WAL cut at an open. Never taken for a new, empty store
    /// (exit 3).
    NoStamp {
        /// The store directory.
        dir: PathBuf,
        /// Its backend.
        backend: Backend,
        /// Who opened it.
        opener: Opener,
    },
    /// A store whose first start was interrupted before its stamp (its
    /// creation marker is still there): it holds no hooks, and the next
    /// `serve` stamps it (a command: exit 2).
    FirstStartInterrupted,
    /// A hidden test setting of the migrations with a value it does not
    /// take (`serve`: exit 1; a command: exit 2).
    TestSetting {
        /// Who read it.
        opener: Opener,
        /// What is wrong, naming the setting.
        message: String,
    },
    /// A new store under a test setting that reads only older formats: this
    /// binary creates none (exit 1).
    CreatesNone {
        /// The newest format this process reads.
        format: u32,
    },
    /// The stamp or the migration progress refuses the store, as the
    /// `store check` reads it: a newer format, a stamp that does not decode,
    /// a read that failed (exit 3).
    Format(MigrateError),
    /// `serve`'s migration at open failed or refused the store: exit 3 when
    /// the same binary cannot ever use it (a newer format or migration, a
    /// stamp that does not decode), else 1. Its message is the migration's.
    Migration(MigrateError),
    /// The store failed a read or the stamp's write at `serve`'s open
    /// (exit 1). Its message is the engine's.
    Engine(EngineError),
    /// A file of the open (the creation marker, the store directory) could
    /// not be read or written (exit 1): what was being done, and the OS
    /// error as the cause.
    Io {
        /// What was being done: `creating <marker>`, ...
        doing: String,
        /// The OS error.
        error: std::io::Error,
    },
}

impl OpenError {
    /// The exit status of the command the refusal ends.
    pub fn exit_code(&self) -> u8 {
        match self {
            OpenError::NotADirectory { .. }
            | OpenError::NoStoreOf { .. }
            | OpenError::NoStore { .. }
            | OpenError::FirstStartInterrupted => 2,
            OpenError::Unreadable { .. }
            | OpenError::NoEngineRecord { .. }
            | OpenError::HeldBy { .. }
            | OpenError::Damaged { .. }
            | OpenError::NoStamp { .. }
            | OpenError::Format(_) => 3,
            OpenError::Locked { opener, .. } | OpenError::CannotOpen { opener, .. } => match opener
            {
                Opener::Serve => 1,
                Opener::Command => 3,
            },
            OpenError::TestSetting { opener, .. } => match opener {
                Opener::Serve => 1,
                Opener::Command => 2,
            },
            // Restarting the same binary cannot help.
            OpenError::Migration(
                MigrateError::StoreFormatNewer { .. }
                | MigrateError::MigrationNewer { .. }
                | MigrateError::Undecodable { .. },
            ) => 3,
            OpenError::Migration(_)
            | OpenError::CreatesNone { .. }
            | OpenError::Engine(_)
            | OpenError::Io { .. } => 1,
        }
    }

    /// The engine's open error `cause` for the store in `dir`, by its kind:
    /// a held lock, a corruption, or a store that cannot be opened. Only the
    /// engines' own lock errors are a held lock: any other error, even one
    /// whose text has "lock" in it (a `block checksum mismatch`, a path such
    /// as `/srv/blocks/`), is a store that cannot be opened.
    pub fn from_open(dir: &Path, opener: Opener, cause: EngineError) -> OpenError {
        let dir = dir.to_path_buf();
        match cause.kind() {
            Some(ErrorKind::Locked) => OpenError::Locked { dir, opener, cause },
            Some(ErrorKind::Corruption) => OpenError::Damaged { dir, opener, cause },
            _ => OpenError::CannotOpen { dir, opener, cause },
        }
    }

    /// The refusal of a `store` command's store that has no format stamp:
    /// [`OpenError::FirstStartInterrupted`] when its creation marker says
    /// its first start was interrupted before the stamp, else
    /// [`OpenError::NoStamp`].
    pub fn no_stamp(dir: &Path, backend: Backend) -> OpenError {
        if creating_marker(dir).exists() {
            return OpenError::FirstStartInterrupted;
        }
        OpenError::NoStamp {
            dir: dir.to_path_buf(),
            backend,
            opener: Opener::Command,
        }
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NotADirectory { dir, exists } => {
                let what = if *exists {
                    "not a directory"
                } else {
                    "not a directory (it does not exist)"
                };
                write!(
                    f,
                    "{}: {what}; give the relay's node.data_dir, or a store directory in it",
                    dir.display()
                )
            }
            OpenError::Unreadable { dir, error } => {
                let hint = if error.kind() == std::io::ErrorKind::PermissionDenied {
                    "; run store check as the relay's user"
                } else {
                    ""
                };
                write!(f, "{}: cannot read it ({error}){hint}", dir.display())
            }
            OpenError::NoStoreOf { dir, wanted, found } => {
                let found: Vec<&str> = found.iter().map(|b| b.name()).collect();
                write!(
                    f,
                    "{}: no {} store (found: {})",
                    dir.display(),
                    wanted.name(),
                    found.join(", ")
                )
            }
            OpenError::NoStore { dir } => write!(
                f,
                "{}: no ankusa store here (a relay's data_dir holds store-rocksdb/ or store-fjall/; a store directory holds RocksDB's CURRENT or fjall's version file)",
                dir.display()
            ),
            OpenError::NoEngineRecord { dir, backend } => {
                let repair = match backend {
                    Backend::Rocksdb => {
                        "RocksDB's repair can rebuild it from the table files (`ldb repair --db=DIR`, from RocksDB's tools, on a copy); "
                    }
                    Backend::Fjall => "",
                };
                write!(
                    f,
                    "the store directory {dir} holds files but no {record} ({backend}'s record of what the store holds): it is damaged. \
                     Nothing was changed: opening it would start a new, empty store there and drop the data files. \
                     {repair}or restore a backup dump with `ankusa store import DUMP DATA_DIR --store {backend}` (into a data_dir without this store), \
                     or move {dir} away to start with an empty store",
                    dir = dir.display(),
                    record = backend.record(),
                    backend = backend.name(),
                )
            }
            OpenError::HeldBy { lock, pid } => {
                in_use(f, &format!("process {pid} holds {}", lock.display()))
            }
            OpenError::Locked { dir, opener, cause } => match opener {
                // The cause follows as the error's source (`{:#}`).
                Opener::Serve => write!(
                    f,
                    "the store at {} is in use: is another relay running on this data_dir?",
                    dir.display()
                ),
                Opener::Command => in_use(f, &cause.to_string()),
            },
            OpenError::Damaged { dir, opener, cause } => match opener {
                Opener::Serve => write!(
                    f,
                    "the store at {} is damaged: {cause}. {DAMAGED_ADVICE}",
                    dir.display()
                ),
                Opener::Command => write!(
                    f,
                    "cannot open the store at {}: it is damaged: {cause}. {DAMAGED_ADVICE}",
                    dir.display()
                ),
            },
            OpenError::CannotOpen { dir, opener, cause } => match opener {
                // The cause follows as the error's source (`{:#}`).
                Opener::Serve => write!(f, "opening the store at {}", dir.display()),
                Opener::Command => {
                    write!(f, "cannot open the store at {}: {cause}", dir.display())
                }
            },
            OpenError::NoStamp {
                dir,
                backend,
                opener,
            } => {
                if *opener == Opener::Serve {
                    write!(f, "{}: ", dir.display())?;
                }
                write!(
                    f,
                    "the store has data files but no format stamp: it is damaged, or its journal/WAL was cut when it was opened \
                     (an engine drops a journal or WAL from its first entry that does not verify, and the stamp is in the first batch a relay writes), \
                     so the hooks it held are not all there. Refusing to use it as a new, empty store. Restore a backup dump with \
                     `ankusa store import DUMP DATA_DIR --store {backend}` (into a data_dir without this store), or move {dir} away to start with an empty store",
                    backend = backend.name(),
                    dir = dir.display()
                )
            }
            OpenError::FirstStartInterrupted => f.write_str(
                "no store format stamp: a relay's first start was interrupted before it stamped this new store; it holds no hooks, and the next `ankusa serve` stamps it",
            ),
            OpenError::TestSetting { message, .. } => f.write_str(message),
            OpenError::CreatesNone { format } => write!(
                f,
                "a new store: this ankusa reads store formats up to {format} (a test setting) and creates none"
            ),
            OpenError::Format(e) | OpenError::Migration(e) => e.fmt(f),
            OpenError::Engine(e) => e.fmt(f),
            OpenError::Io { doing, .. } => f.write_str(doing),
        }
    }
}

impl std::error::Error for OpenError {
    /// The cause `serve` prints after the message (`{:#}`): the engine's
    /// error of a held lock or a failed open, the OS error of a file; the
    /// migration's and the engine's own (their message is this one's).
    /// Every other message is whole.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Locked {
                opener: Opener::Serve,
                cause,
                ..
            }
            | OpenError::CannotOpen {
                opener: Opener::Serve,
                cause,
                ..
            } => Some(cause),
            OpenError::Io { error, .. } => Some(error),
            OpenError::Format(e) | OpenError::Migration(e) => e.source(),
            OpenError::Engine(e) => e.source(),
            _ => None,
        }
    }
}

/// A command's refusal of a store another process has open; `why` is what
/// says so.
fn in_use(f: &mut std::fmt::Formatter<'_>, why: &str) -> std::fmt::Result {
    write!(
        f,
        "the store is in use: a running relay (or another ankusa process) has it open; stop the relay first, this command reads a stopped store ({why})"
    )
}

/// The directory of the `backend` store (`rocksdb`, `fjall`) inside a
/// relay's data_dir: `<data_dir>/store-<backend>` (what `ankusa store check`
/// looks for).
pub fn store_dir(data_dir: &Path, backend: &str) -> PathBuf {
    data_dir.join(format!("store-{backend}"))
}

/// The stores under `dir`, for a `store` command: `dir` itself when a
/// backend wrote it, else its `store-<backend>` directories that one did;
/// only `only`'s when given.
///
/// # Errors
/// [`OpenError::NotADirectory`], [`OpenError::Unreadable`] (a directory it
/// may not read hides a store: that is not "no store"),
/// [`OpenError::NoStoreOf`], [`OpenError::NoStore`].
pub fn find(dir: &Path, only: Option<Backend>) -> Result<Vec<(Backend, PathBuf)>, OpenError> {
    let unreadable = |dir: &Path, error| OpenError::Unreadable {
        dir: dir.to_path_buf(),
        error,
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Err(e) if !absent(&e) => return Err(unreadable(dir, e)),
        _ => {
            return Err(OpenError::NotADirectory {
                dir: dir.to_path_buf(),
                exists: dir.exists(),
            });
        }
    }
    let mut out: Vec<(Backend, PathBuf)> = Backend::ALL
        .into_iter()
        .filter(|b| b.wrote(dir))
        .map(|b| (b, dir.to_path_buf()))
        .collect();
    if out.is_empty() {
        out = Backend::ALL
            .into_iter()
            .map(|b| (b, store_dir(dir, b.name())))
            .filter(|(b, d)| b.wrote(d))
            .collect();
    }
    if out.is_empty() {
        let dirs = std::iter::once(dir.to_path_buf())
            .chain(Backend::ALL.iter().map(|b| store_dir(dir, b.name())));
        for d in dirs {
            if let Err(e) = std::fs::read_dir(&d)
                && !absent(&e)
            {
                return Err(unreadable(&d, e));
            }
        }
    }
    let found: Vec<Backend> = out.iter().map(|(b, _)| *b).collect();
    out.retain(|(b, _)| only.is_none_or(|o| o == *b));
    if out.is_empty() {
        return Err(match (only, found.is_empty()) {
            (Some(wanted), false) => OpenError::NoStoreOf {
                dir: dir.to_path_buf(),
                wanted,
                found,
            },
            _ => OpenError::NoStore {
                dir: dir.to_path_buf(),
            },
        });
    }
    Ok(out)
}

/// True for an error that means nothing is there: no such file, or a file
/// where a directory was looked for.
fn absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// The file beside the store directory `dir` (`<parent>/.<name>.creating`)
/// that `serve` writes before it creates a new store there and removes once
/// the store's format stamp is durable: a store without a stamp and with
/// this marker is one whose first start was interrupted (it holds no hooks);
/// without it, a damaged one ([`OpenError::NoStamp`]).
pub fn creating_marker(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map_or_else(|| "store".into(), |n| n.to_string_lossy().into_owned());
    dir.with_file_name(format!(".{name}.creating"))
}

/// True when `dir` is missing or holds nothing (a `lost+found` of a fresh
/// filesystem mounted there aside): the only store directory `serve` may
/// create a new store in.
///
/// # Errors
/// The directory exists but cannot be read.
fn is_new_store_dir(dir: &Path) -> std::io::Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for e in entries {
                if e?.file_name() != "lost+found" {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Err(e) if absent(&e) => Ok(true),
        Err(e) => Err(e),
    }
}

/// Whether `serve` may stamp a store that has no format stamp, decided
/// before the engine's open creates anything (docs: README, "Store
/// damage"): only a missing or empty store directory is a new store, or one
/// whose creation marker ([`creating_marker`]) says its first start was
/// interrupted before the stamp was durable. A directory with the engine's
/// files and no stamp is refused ([`OpenError::NoStamp`]).
#[derive(Clone)]
pub struct Creation {
    /// The store directory and its backend (`None`: the memory store).
    dir: Option<(PathBuf, Backend)>,
    /// A store without a stamp is new: stamp it.
    may_create: bool,
}

impl Creation {
    /// Looks at `dir` before the open; for a new store, writes the creation
    /// marker (synced, with its directory) so a kill before the stamp is
    /// durable leaves a store the next start knows to be new.
    ///
    /// # Errors
    /// [`OpenError::NoEngineRecord`]: files, no creation marker, and not the
    /// engine's own record of what it holds (an open would start a new,
    /// empty database there: RocksDB then deletes the table files it does
    /// not know), refused before the engine touches anything;
    /// [`OpenError::Io`] when the directory or the marker cannot be read or
    /// written.
    pub fn before_open(dir: &Path, backend: Backend) -> Result<Creation, OpenError> {
        let marker = creating_marker(dir);
        let fresh = is_new_store_dir(dir)
            .map_err(|e| io(format!("reading the store directory {}", dir.display()), e))?;
        if !fresh && !marker.exists() && !dir.join(backend.record()).is_file() {
            return Err(OpenError::NoEngineRecord {
                dir: dir.to_path_buf(),
                backend,
            });
        }
        if fresh {
            let f = std::fs::File::create(&marker)
                .map_err(|e| io(format!("creating {}", marker.display()), e))?;
            f.sync_all()
                .map_err(|e| io(format!("syncing {}", marker.display()), e))?;
            sync_dir_of(&marker)?;
        }
        Ok(Creation {
            dir: Some((dir.to_path_buf(), backend)),
            may_create: fresh || marker.exists(),
        })
    }

    /// The memory store: always new.
    pub fn memory() -> Creation {
        Creation {
            dir: None,
            may_create: true,
        }
    }

    /// The store is stamped (durably): its creation marker goes.
    fn stamped(&self) -> Result<(), OpenError> {
        if let Some((dir, _)) = &self.dir {
            let marker = creating_marker(dir);
            match std::fs::remove_file(&marker) {
                Ok(()) => sync_dir_of(&marker)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(format!("removing {}", marker.display()), e)),
            }
        }
        Ok(())
    }
}

fn io(doing: String, error: std::io::Error) -> OpenError {
    OpenError::Io { doing, error }
}

/// fsyncs the directory that holds `path` (a create or a remove is durable
/// only then).
fn sync_dir_of(path: &Path) -> Result<(), OpenError> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(format!("syncing the directory {}", parent.display()), e))
}

/// How `serve` opens a RocksDB store: [`Creation::before_open`], then the
/// engine's open with at most `max_files` file descriptors and the WAL
/// recovered as `recovery` says.
///
/// # Errors
/// As [`Creation::before_open`]; the engine's refusal
/// ([`OpenError::from_open`]).
#[cfg(feature = "rocksdb")]
pub fn serve_rocksdb(
    dir: &Path,
    max_files: usize,
    recovery: ankusa_engine_rocksdb::WalRecovery,
) -> Result<(ankusa_engine_rocksdb::RocksKv, Creation), OpenError> {
    let creation = Creation::before_open(dir, Backend::Rocksdb)?;
    let kv = ankusa_engine_rocksdb::RocksKv::open_with_recovery(dir, Some(max_files), recovery)
        .map_err(|e| OpenError::from_open(dir, Opener::Serve, e))?;
    Ok((kv, creation))
}

/// How `serve` opens a fjall store: [`Creation::before_open`], then the
/// engine's open with at most `max_files` file descriptors.
///
/// # Errors
/// As [`Creation::before_open`]; the engine's refusal
/// ([`OpenError::from_open`]).
pub fn serve_fjall(
    dir: &Path,
    max_files: usize,
) -> Result<(ankusa_engine_fjall::FjallKv, Creation), OpenError> {
    let creation = Creation::before_open(dir, Backend::Fjall)?;
    let kv = ankusa_engine_fjall::FjallKv::open_with_file_limit(dir, max_files)
        .map_err(|e| OpenError::from_open(dir, Opener::Serve, e))?;
    Ok((kv, creation))
}

/// How a `store` command opens a RocksDB store.
#[cfg(feature = "rocksdb")]
#[derive(Clone, Copy, Debug)]
pub enum Access {
    /// For writing, as the relay opens it (a torn last record of the WAL
    /// dropped, a WAL damaged before its end refused).
    Write,
    /// Read-only (`RocksKv::open_read_only`): no byte of the directory is
    /// written; the WAL recovered in memory as it says.
    ReadOnly(ankusa_engine_rocksdb::WalRecovery),
}

/// A `store` command's open of the RocksDB store in `dir`: a running
/// relay's lock is refused first, asked without taking it
/// ([`rocksdb_lock_holder`]), then the engine opens it as `access` says.
///
/// # Errors
/// [`OpenError::HeldBy`]; the engine's refusal ([`OpenError::from_open`]).
#[cfg(feature = "rocksdb")]
pub fn rocksdb(dir: &Path, access: Access) -> Result<ankusa_engine_rocksdb::RocksKv, OpenError> {
    use ankusa_engine_rocksdb::RocksKv;
    if let Some(pid) = rocksdb_lock_holder(dir) {
        return Err(OpenError::HeldBy {
            lock: dir.join("LOCK"),
            pid,
        });
    }
    match access {
        Access::Write => RocksKv::open(dir),
        Access::ReadOnly(recovery) => RocksKv::open_read_only(dir, recovery),
    }
    .map_err(|e| OpenError::from_open(dir, Opener::Command, e))
}

/// A `store` command's open of the fjall store in `dir`, for writing as the
/// relay opens it (fjall has no read-only open; its lock refuses a running
/// relay's store).
///
/// # Errors
/// The engine's refusal ([`OpenError::from_open`]).
pub fn fjall(dir: &Path) -> Result<ankusa_engine_fjall::FjallKv, OpenError> {
    ankusa_engine_fjall::FjallKv::open(dir)
        .map_err(|e| OpenError::from_open(dir, Opener::Command, e))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_error(kind: ErrorKind, message: &str) -> EngineError {
        EngineError::Backend {
            backend: "rocksdb",
            op: "open",
            kind,
            message: message.into(),
        }
    }

    /// The engine's open error by its kind, not its text: a corruption whose
    /// text mentions a lock (a path under `/srv/blocks/`) is damage, an I/O
    /// error whose text says "Corruption:" is not.
    #[test]
    fn an_open_error_is_sorted_by_its_kind() {
        let dir = Path::new("/srv/blocks/store-rocksdb");
        let damaged = OpenError::from_open(
            dir,
            Opener::Command,
            engine_error(ErrorKind::Corruption, "Corruption: block checksum mismatch"),
        );
        assert!(matches!(damaged, OpenError::Damaged { .. }), "{damaged}");
        assert_eq!(damaged.exit_code(), 3);
        let io = OpenError::from_open(
            dir,
            Opener::Serve,
            engine_error(ErrorKind::Io, "IO error: Corruption: in a file name"),
        );
        assert!(matches!(io, OpenError::CannotOpen { .. }), "{io}");
        assert_eq!(io.exit_code(), 1);
        let locked = engine_error(ErrorKind::Locked, "IO error: While lock file: LOCK");
        let serve = OpenError::from_open(dir, Opener::Serve, locked.clone());
        let command = OpenError::from_open(dir, Opener::Command, locked);
        assert_eq!((serve.exit_code(), command.exit_code()), (1, 3));
        assert_eq!(
            format!("{:#}", anyhow::Error::from(serve)),
            "the store at /srv/blocks/store-rocksdb is in use: is another relay running on this data_dir?: \
             rocksdb: open failed: IO error: While lock file: LOCK"
        );
        assert_eq!(
            command.to_string(),
            "the store is in use: a running relay (or another ankusa process) has it open; stop the relay first, \
             this command reads a stopped store (rocksdb: open failed: IO error: While lock file: LOCK)"
        );
    }

    /// A store directory with files and no engine record is refused before
    /// the open, and nothing is written (no creation marker).
    #[test]
    fn a_store_without_its_engine_record_is_refused_and_left_as_it_is() {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().join("store-fjall");
        std::fs::create_dir_all(dir.join("keyspaces")).expect("mkdir");
        let Err(e) = Creation::before_open(&dir, Backend::Fjall) else {
            panic!("a store without fjall's version file was taken")
        };
        assert!(matches!(e, OpenError::NoEngineRecord { .. }), "{e}");
        assert_eq!(e.exit_code(), 3);
        assert!(
            e.to_string()
                .contains("holds files but no version (fjall's record"),
            "{e}"
        );
        assert!(!creating_marker(&dir).exists());
        let names: Vec<_> = std::fs::read_dir(data.path())
            .expect("read")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["store-fjall"]);
    }

    /// A new store directory gets its creation marker; `find` says what is
    /// not there with the command's exit codes.
    #[test]
    fn a_new_store_is_marked_and_find_refuses_what_is_not_a_store() {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().join("store-fjall");
        let creation = Creation::before_open(&dir, Backend::Fjall).expect("a new store");
        assert!(creation.may_create && creation_marker_exists(&dir));
        creation.stamped().expect("stamped");
        assert!(!creation_marker_exists(&dir));

        let missing = data.path().join("nowhere");
        let e = find(&missing, None).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            format!(
                "{}: not a directory (it does not exist); give the relay's node.data_dir, or a store directory in it",
                missing.display()
            )
        );
        let e = find(data.path(), Some(Backend::Rocksdb)).unwrap_err();
        assert!(matches!(e, OpenError::NoStore { .. }), "{e}");
        assert_eq!(e.exit_code(), 2);
    }

    fn creation_marker_exists(dir: &Path) -> bool {
        creating_marker(dir).exists()
    }
}
