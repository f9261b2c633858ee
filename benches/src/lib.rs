//! Shared set-up for the criterion benches (`benches/`): the three backends
//! behind one enum so every bench runs them side by side.
//!
//! Run with `CARGO_TARGET_DIR=/var/cache/ankusa/bench-target cargo bench -p ankusa-benches`
//! (an optimised build is a second RocksDB compile; keep it out of the test target dir).
#![deny(missing_docs)]

use std::path::Path;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Durability, EngineError, Kv};
use ankusa_engine_fjall::FjallKv;
#[cfg(feature = "rocksdb")]
use ankusa_engine_rocksdb::RocksKv;

/// The backends, by the name benches print.
pub const BACKENDS: [&str; 3] = ["memory", "rocksdb", "fjall"];

/// Opens backend `name` in `dir`, hands it to `f`.
///
/// # Panics
/// On an unknown name or a store that does not open.
pub fn with_backend<R>(name: &str, dir: &Path, f: impl FnOnce(&dyn DynKv) -> R) -> R {
    match name {
        "memory" => f(&MemoryKv::new()),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => f(&RocksKv::open(dir).expect("open rocksdb")),
        #[cfg(not(feature = "rocksdb"))]
        "rocksdb" => panic!("ankusa-benches was built without its rocksdb feature"),
        "fjall" => f(&FjallKv::open(dir).expect("open fjall")),
        other => panic!("unknown backend {other}"),
    }
}

/// The object-safe part of [`Kv`] the benches need.
pub trait DynKv {
    /// [`Kv::write`].
    ///
    /// # Errors
    /// As [`Kv::write`].
    fn write(&self, batch: Batch, durability: Durability) -> Result<(), EngineError>;
    /// The store as [`ankusa_engine::Read`].
    fn read(&self) -> &dyn ReadDyn;
    /// [`Kv::stats`].
    fn stats(&self) -> ankusa_engine::OpStats;
}

/// Object-safe [`ankusa_engine::Read`] (the trait itself is object safe; this
/// alias keeps bench signatures short).
pub trait ReadDyn: ankusa_engine::Read {}
impl<T: ankusa_engine::Read> ReadDyn for T {}

impl<K: Kv> DynKv for K {
    fn write(&self, batch: Batch, durability: Durability) -> Result<(), EngineError> {
        Kv::write(self, batch, durability)
    }
    fn read(&self) -> &dyn ReadDyn {
        self
    }
    fn stats(&self) -> ankusa_engine::OpStats {
        Kv::stats(self)
    }
}
