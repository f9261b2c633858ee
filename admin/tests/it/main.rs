//! The admin crate's integration tests: the job engine driven without HTTP,
//! over the in-memory store. One test binary (docs/contributing.md, "One
//! integration-test binary per crate").

mod jobs;
