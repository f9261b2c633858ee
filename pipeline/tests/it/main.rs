//! The pipeline's integration tests through its public API, on the memory
//! engine with in-process sinks. One test binary (docs/contributing.md, "One
//! integration-test binary per crate").

mod concurrency;
mod dispatch;
mod faults;
