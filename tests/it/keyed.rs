//! What the operator tests share (pause, quarantine, replay, purge, retire,
//! retention, unconfigured work, shutdown and start-up): keyed JSON bodies
//! and their labels, each key's arrival order, a clean stop, and a look at
//! the stopped store's invariants.

use std::collections::BTreeMap;
use std::time::Duration;

use ankusa_engine::Kv;

use crate::relay::Relay;
use crate::sink::Req;

/// How long a clean stop may take: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(180);

/// The ordering keys the tests' hooks take turns over.
pub(crate) const KEYS: [&str; 4] = ["cus_a", "cus_b", "cus_c", "cus_d"];

pub(crate) fn body(key: &str, i: usize) -> String {
    format!("{{\"key\":\"{key}\",\"i\":{i}}}")
}

pub(crate) fn label(r: &Req) -> (String, u64) {
    let j = r.json();
    (
        j["key"].as_str().unwrap_or("?").to_owned(),
        j["i"].as_u64().unwrap_or(u64::MAX),
    )
}

/// The `i`s of each key's requests, in arrival order.
pub(crate) fn by_key(reqs: &[Req]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in reqs {
        let (k, i) = label(r);
        out.entry(k).or_default().push(i);
    }
    out
}

/// What each key's hooks `from..to` are, in the order they were posted.
pub(crate) fn want(from: usize, to: usize) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for i in from..to {
        out.entry(KEYS[i % KEYS.len()].to_owned())
            .or_default()
            .push(i as u64);
    }
    out
}

pub(crate) async fn stop(relay: &mut Relay) {
    relay.sigterm();
    let status = relay.wait_exit(WAIT).await;
    assert!(
        status.success(),
        "the relay did not stop cleanly: {status}\n{}",
        relay.log()
    );
}

pub(crate) fn open_store(relay: &Relay) -> ankusa_engine_rocksdb::RocksKv {
    ankusa_engine_rocksdb::RocksKv::open(relay.data_dir().join("store-rocksdb"))
        .expect("open the store")
}

pub(crate) fn assert_clean(kv: &ankusa_engine_rocksdb::RocksKv) {
    let violations = ankusa_queue::check_invariants(&kv.snapshot()).expect("check");
    assert!(violations.is_empty(), "{violations:#?}");
}
