//! Tests of `ankusa-config` (one test binary, modules by area). Each asserts
//! the real values: the model's fields, or the exact message of a rejection
//! with its source, sink and option.

mod adr;
mod cluster;
mod defaults;
mod example;
mod filter;
mod helpers;
mod limits;
mod notify;
mod ops;
mod rejections;
mod retry;
mod secrets;
mod transform;
mod yaml;
