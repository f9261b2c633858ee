//! The pipeline's integration tests through its public API, on the memory
//! engine with in-process sinks, one module per behaviour. One test binary
//! (docs/contributing.md, "One integration-test binary per crate").

mod support;

mod attempt_log;
mod concurrency;
mod faults;
mod fencing;
mod lanes;
mod overflow;
mod pause;
mod restart;
mod retention;
mod transform;
