//! The process counters of transform failures: how many deliveries each
//! sink entry's program failed, by source and sink entry name (the
//! `ankusa_transform_failed_total{source,sink}` counter of `/metrics`, which
//! the admin listener reads at scrape time). The names are the
//! configuration's, so the series are as many as its transforms.

use std::collections::BTreeMap;
use std::sync::Mutex;

static FAILED: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());

/// Counts one failed run of sink entry `sink` of source `source`.
pub fn record_failure(source: &str, sink: &str) {
    let mut map = FAILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *map.entry((source.to_owned(), sink.to_owned())).or_insert(0) += 1;
}

/// Every (source, sink entry) with a failure since the process started, and
/// how many, in name order.
pub fn failures() -> Vec<(String, String, u64)> {
    FAILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .map(|((source, sink), n)| (source.clone(), sink.clone(), *n))
        .collect()
}
