//! Every shrunk failure the state machine found, as a named test (STYLE.md,
//! "Checking"). Each has a three-line postmortem: what failed, why, the fix.

#[allow(unused_imports)]
use crate::machine::run_memory;
#[allow(unused_imports)]
use crate::steps::{At, Race, Step::*, Why, h};
