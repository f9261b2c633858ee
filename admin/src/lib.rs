//! The operator surface (docs/design.md section 5, "Admin API", "Operator
//! console"): what an operator does to a running relay, and the admin
//! listener that serves it.
//!
//! # What it owns
//! - The domain, which knows nothing of HTTP:
//!   - [`context`]: what an action and a job's step work with ([`Context`]:
//!     the store, the configuration, the clock, the write lock, the edge's
//!     Writer and routes, the pipeline's controls, [`PipelineControl`]);
//!   - [`jobs`]: the durable jobs (one commit per step, resumed at start), the
//!     job model and the runner, one module per kind (revive and drop by
//!     filter, replay, purge, retire, quarantine release and drop);
//!   - [`dlq`] and [`quarantine`]: one dead letter or one quarantined hook
//!     (revive, drop, release), and which dead letters a filter takes;
//!   - [`error`]: [`JobError`], why an action did not happen.
//! - [`api_types`]: the API's answers as serde types, the listener's and its
//!   clients' (the CLI, `ankusa top`) one spelling of them.
//! - [`http`]: the admin listener on top of it: `/metrics`, `/healthz`,
//!   `/readyz`, the JSON API under `/v1/` (its routes, views and OpenAPI
//!   document) and the operator console. Its `ApiError` converts from
//!   [`JobError`].
//!
//! The domain modules never import [`http`]; the job kinds' modules depend on
//! the job model, never on each other.
//!
//! # What it does not own
//! The ingest path is the edge's (`ankusa_edge`): this crate acts through the
//! edge's Writer handle and routes, and reads its counters; the edge knows
//! nothing of it. The pipeline is reached through [`PipelineControl`], which
//! the relay (`src/serve.rs`) implements over the pipeline's handle, so this
//! crate does not depend on the pipeline.
#![deny(missing_docs, clippy::unwrap_used)]

pub mod api_types;
pub mod context;
pub mod dlq;
pub mod error;
pub mod http;
pub mod jobs;
pub mod quarantine;

pub use context::{
    BoxFuture, ConfigStatus, Context, ControlFailure, PipelineControl, PipelineWork, ReloadControl,
    ReloadDone, ReloadFailure,
};
pub use error::{JobError, STORE_FAILED_MESSAGE};
pub use http::{AdminState, BreakerFn, BreakerReport, MAX_ADMIN_CONNECTIONS, serve_admin};
