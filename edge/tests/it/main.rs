//! The edge core's integration tests, driven by the shared webhook corpus
//! (`../shared/corpus`). One test binary (BUILD-NOTES: link size).

mod corpus;
mod keys;
mod slack;
mod verify;
