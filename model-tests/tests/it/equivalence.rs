//! Backend equivalence: the same step sequences on memory, RocksDB and fjall
//! leave byte-identical stores after every step (the model and the invariant
//! checker run on each backend too).

use ankusa_engine::{Cf, KeyValue, Kv};
use ankusa_engine_conformance::dump;
use proptest::prelude::*;

use crate::machine::{MAX_STEPS, Machine, cases, config};
use crate::steps::{Step, steps};

type Dump = Vec<(Cf, Vec<KeyValue>)>;

fn dumps<K: Kv>(kv: &K, steps: &[Step]) -> Result<Vec<Dump>, String> {
    let mut out = Vec::with_capacity(steps.len());
    Machine::new(kv)?.run(steps, |_, kv| out.push(dump(kv)))?;
    Ok(out)
}

fn first_difference(a: &Dump, b: &Dump) -> String {
    for ((cf, xs), (_, ys)) in a.iter().zip(b) {
        if xs != ys {
            let i = xs
                .iter()
                .zip(ys)
                .position(|(x, y)| x != y)
                .unwrap_or(xs.len().min(ys.len()));
            return format!(
                "cf {}: entry {i}: {:?} vs {:?} ({} vs {} entries)",
                cf.name(),
                xs.get(i),
                ys.get(i),
                xs.len(),
                ys.len()
            );
        }
    }
    "no difference".into()
}

/// Runs `steps` on all three backends and compares the dumps after each step.
pub fn equivalent(steps: &[Step]) -> Result<(), String> {
    let memory = dumps(&ankusa_engine::memory::MemoryKv::new(), steps)
        .map_err(|e| format!("memory: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rocks = ankusa_engine_rocksdb::RocksKv::open(dir.path().join("rocksdb"))
        .map_err(|e| e.to_string())?;
    let fjall =
        ankusa_engine_fjall::FjallKv::open(dir.path().join("fjall")).map_err(|e| e.to_string())?;
    for (name, got) in [
        (
            "rocksdb",
            dumps(&rocks, steps).map_err(|e| format!("rocksdb: {e}"))?,
        ),
        (
            "fjall",
            dumps(&fjall, steps).map_err(|e| format!("fjall: {e}"))?,
        ),
    ] {
        if got.len() != memory.len() {
            return Err(format!(
                "{name} ran {} steps, memory {}",
                got.len(),
                memory.len()
            ));
        }
        for (i, (m, g)) in memory.iter().zip(&got).enumerate() {
            if m != g {
                return Err(format!(
                    "{name} differs from memory after step {i} {:?}: {}",
                    steps[i],
                    first_difference(m, g)
                ));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(cases(32).min(256)))]

    /// Memory, RocksDB and fjall hold the same bytes after every step.
    #[test]
    fn backends_hold_identical_bytes(steps in steps(MAX_STEPS)) {
        equivalent(&steps).map_err(TestCaseError::fail)?;
    }
}

/// The comparison itself can fail: two stores that differ by one op are told apart.
#[test]
fn dumps_that_differ_are_told_apart() {
    use ankusa_engine::{Batch, Durability};
    let a = ankusa_engine::memory::MemoryKv::new();
    let b = ankusa_engine::memory::MemoryKv::new();
    let mut w = Batch::new();
    w.put(Cf::Index, "k", "v");
    a.write(w.clone(), Durability::Sync).unwrap();
    w.put(Cf::Archive, "k", "v");
    b.write(w, Durability::Sync).unwrap();
    assert_ne!(dump(&a), dump(&b));
    assert!(first_difference(&dump(&a), &dump(&b)).starts_with("cf archive"));
}
