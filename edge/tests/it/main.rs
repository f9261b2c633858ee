//! The edge core's integration tests, driven by the webhook corpus
//! (`fixtures/corpus`). One test binary (docs/contributing.md, "One
//! integration-test binary per crate").

mod corpus;
mod fuzz;
mod keys;
mod sign;
mod slack;
mod verify;
