//! A loom model of ADR 0004 sections 4.5 and 4.6: a Writer commits a laned
//! member (blind: ?O + ?P) while the pipeline releases the lane's head (reads
//! the next member, then writes) and then sweeps the lane (delete the marker,
//! re-read, put it back). loom explores the interleavings; after both threads
//! and one more sweep, every ?O member has been promoted or has its ?H/?P, and
//! `ankusa_queue::check_invariants` finds nothing.
//!
//! The test is `tests/loom.rs`, compiled only under the private cfg
//! `ankusa_loom`. Run it in its own target directory (a RUSTFLAGS change
//! rebuilds every crate of the graph) and in release mode:
//!
//! ```sh
//! LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg ankusa_loom" \
//!   CARGO_TARGET_DIR=/var/cache/ankusa/loom-target \
//!   cargo test --release -p ankusa-loom-model -- --nocapture
//! ```
//!
//! or `bash model-tests/loom/run.sh`, which runs exactly that and fails unless
//! more than zero loom tests passed and explored more than zero interleavings
//! (the check for CI: without the cfg the crate has no test at all, so a cfg
//! typo would otherwise pass silently). The crate is in the
//! workspace's `members` but not its `default-members`, so `cargo test` at the
//! root never builds it.
