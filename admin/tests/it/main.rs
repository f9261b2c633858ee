//! The admin crate's integration tests: the job engine driven without HTTP,
//! over the in-memory store; the router's routes, the answer types and the
//! OpenAPI document held together. One test binary (docs/contributing.md, "One
//! integration-test binary per crate").

mod answers;
mod jobs;
mod layering;
mod openapi;
