//! Model tests of the queue and its ordering lanes (docs/design.md sections 4 and
//! the ADR 0004 proof): everything lives in the integration test binary
//! `tests/it` (one binary, so RocksDB is linked once):
//!
//! - `machine`: a proptest state machine over random interleavings of every
//!   transition, checked after each step against `queue::check_invariants` and
//!   a reference model. `ANKUSA_SOAK_CASES=N` raises the case count and
//!   `ANKUSA_MODEL_BACKEND=rocksdb|fjall` runs it on that store (a fresh one
//!   per case) instead of memory.
//! - `equivalence`: the same step sequences on memory, RocksDB and fjall give
//!   byte-identical dumps.
//! - `mutations`: every planted bug of `ankusa_lanes::mutation` is caught.
//! - `regressions`: every shrunk failure found so far, by name.
//!
//! The loom model of ADR 0004 sections 4.5-4.6 is the separate crate
//! `model-tests/loom` (`ankusa-loom-model`).
//!
//! `check.sh` runs them the ways a user does (the README's "Model checks"):
//! `quick`, `soak --cases N --backend B`, `loom --preemptions N`,
//! `mutation NAME`.
