//! Tests of `ankusa-config`.

