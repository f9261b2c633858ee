//! The conformance suite on every backend.

mod memory {
    ankusa_engine_conformance::conformance_suite!(ankusa_engine_conformance::backends::memory);

    use ankusa_engine::{Batch, Cf, Durability, EngineError, Kv, Read};

    /// A failed commit applies nothing and poisons the handle: later writes are
    /// refused, reads still answer. (The durable backends cannot be made to fail
    /// a commit on demand; they share the same `Poison` flag.)
    #[test]
    fn failed_commit_poisons() {
        let kv = ankusa_engine::memory::MemoryKv::new();
        let mut w = Batch::new();
        w.put(Cf::Meta, "a", "1");
        kv.write(w.clone(), Durability::Sync).unwrap();
        kv.inject_write_failure();
        let mut w2 = Batch::new();
        w2.put(Cf::Meta, "b", "2");
        assert!(matches!(
            kv.write(w2.clone(), Durability::Sync),
            Err(EngineError::Backend { op: "write", .. })
        ));
        // The refusal names the failure that poisoned the handle.
        let refused = kv.write(w2, Durability::Sync).unwrap_err();
        assert!(
            matches!(&refused, EngineError::Poisoned { backend: "memory", cause } if cause == "memory: write failed: injected write failure"),
            "{refused}"
        );
        assert!(matches!(
            kv.sync(),
            Err(EngineError::Poisoned {
                backend: "memory",
                ..
            })
        ));
        assert_eq!(kv.get(Cf::Meta, b"b").unwrap(), None);
        assert_eq!(kv.get(Cf::Meta, b"a").unwrap().as_deref(), Some(&b"1"[..]));
    }

    /// A counter holding a value that is not 8 bytes fails the batch that adds
    /// to it, and the batch's other ops are rolled back.
    #[test]
    fn corrupt_counter_rolls_back_batch() {
        let kv = ankusa_engine::memory::MemoryKv::new();
        let mut w = Batch::new();
        w.put(Cf::Index, "ctr", "not a counter");
        kv.write(w, Durability::Sync).unwrap();
        let mut w = Batch::new();
        w.put(Cf::Hooks, "x", "1").counter_add("ctr", 1);
        assert!(matches!(
            kv.write(w, Durability::Sync),
            Err(EngineError::Corrupt { .. })
        ));
        assert_eq!(kv.get(Cf::Hooks, b"x").unwrap(), None);
        assert!(matches!(
            kv.counter(b"ctr"),
            Err(EngineError::Corrupt { .. })
        ));
    }
}

mod rocksdb {
    ankusa_engine_conformance::conformance_suite!(
        ankusa_engine_conformance::backends::rocksdb,
        durable
    );

    /// A second handle on a directory that is open is refused with RocksDB's
    /// lock error, not a panic.
    #[test]
    fn second_open_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _kv = ankusa_engine_rocksdb::RocksKv::open(dir.path()).unwrap();
        let err = ankusa_engine_rocksdb::RocksKv::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("rocksdb: open failed"), "{err}");
    }
}

mod fjall {
    ankusa_engine_conformance::conformance_suite!(
        ankusa_engine_conformance::backends::fjall,
        durable
    );

    /// fjall 3.1.13 publishes a flush's new version with a sequence number
    /// past a batch still being applied, so a read could find a batch's index
    /// entry and then not its hook (the relay dead-lettered committed hooks as
    /// "envelope missing" in an ingest run of 2026-12-03); `FjallKv` takes no
    /// snapshot while a commit runs. Memtables of 256 KiB turn over every ~120
    /// batches; without the gate, 30,000 batches missed 4-15 hooks a run.
    #[test]
    fn a_batch_is_seen_whole_while_memtables_flush() {
        let dir = tempfile::tempdir().unwrap();
        let kv =
            ankusa_engine_fjall::FjallKv::open_with_memtable_bytes(dir.path(), 256 << 10).unwrap();
        let r = ankusa_engine_conformance::batch_whole_while_memtables_turn_over(&kv, 30_000);
        assert_eq!(r.met, 30_000, "{r:?}");
        assert!(
            r.hook_missing_live.is_empty(),
            "index entries met without their hook: {r:?}"
        );
    }

    #[test]
    fn second_open_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _kv = ankusa_engine_fjall::FjallKv::open(dir.path()).unwrap();
        let err = ankusa_engine_fjall::FjallKv::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("fjall: open failed"), "{err}");
    }
}

mod rocksdb_counters {
    use ankusa_engine::{Batch, Durability, Kv, Read};

    /// A counter added to 20,000 times (well past `max_successive_merges`,
    /// where writes fold the merge operands) reads its exact sum, live and
    /// through a snapshot taken halfway. The read cost is measured by the
    /// `counter_read_after_adds` bench, not here.
    #[test]
    fn hot_counter_folds_keep_the_exact_sum() {
        let dir = tempfile::tempdir().unwrap();
        let kv = ankusa_engine_rocksdb::RocksKv::open(dir.path()).unwrap();
        let mut snap_at = None;
        for i in 0..20_000i64 {
            let mut w = Batch::new();
            w.counter_add("hot", if i % 3 == 0 { -1 } else { 2 });
            kv.write(w, Durability::Buffered).unwrap();
            if i == 9_999 {
                snap_at = Some(kv.counter(b"hot").unwrap());
            }
        }
        // 6,667 adds of -1 and 13,333 of +2.
        assert_eq!(kv.counter(b"hot").unwrap(), 13_333 * 2 - 6_667);
        assert_eq!(snap_at, Some(6_666 * 2 - 3_334));
    }
}
