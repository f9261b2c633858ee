//! The operator surface (docs/design.md section 5, "Admin API", "Operator
//! console"): what an operator does to a running relay, and the admin
//! listener that serves it.
//!
//! # What it owns
//! - [`http`]: the admin listener: `/metrics`, `/healthz`, `/readyz`, the
//!   JSON API under `/v1/` (its routes, views and OpenAPI document) and the
//!   operator console.
//!
//! # What it does not own
//! The ingest path is the edge's (`ankusa_edge`): this crate acts through the
//! edge's Writer handle and routes, and reads its counters; the edge knows
//! nothing of it. The pipeline is reached through [`PipelineControl`], which
//! the relay (`src/serve.rs`) implements over the pipeline's handle, so this
//! crate does not depend on the pipeline.
#![deny(missing_docs, clippy::unwrap_used)]

pub mod http;

pub use http::api::STORE_FAILED_MESSAGE;
pub use http::{
    AdminState, BoxFuture, BreakerFn, BreakerReport, ControlFailure, MAX_ADMIN_CONNECTIONS,
    PipelineControl, PipelineWork, serve_admin,
};
