//! The queue's builders on the memory engine, through the crate's public API:
//! for each transition the exact counter deltas and index keys after commit,
//! and a clean [`ankusa_queue::check_invariants`]. One module per transition
//! family or behaviour; one test binary (docs/contributing.md, "One
//! integration-test binary per crate").

mod support;

mod admission;
mod attempt_log;
mod check;
mod claim_retry_park;
mod dead_letter;
mod delivered;
mod drop_dead;
mod handover;
mod held_lane;
mod ingest;
mod markers;
#[cfg(feature = "mutations")]
mod mutations;
mod orphan;
mod pause;
mod purge;
mod quarantine;
mod recovery;
mod replay;
mod retention;
mod revive;
mod unconfigured;
