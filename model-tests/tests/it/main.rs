//! The model tests of `queue` and `lanes` (docs/design.md section 4; README,
//! "Model checks"), in one test binary so the RocksDB and fjall backends are
//! linked once.

mod equivalence;
mod machine;
mod model;
mod mutations;
mod purge;
mod regressions;
mod steps;
mod view;
