//! Retention (docs/design.md section 5, "Retention"): delivered hooks and
//! their space are reclaimed, and a resend after that is a duplicate with a
//! null id.

use std::time::Duration;

use ankusa_engine::{Cf, Direction, Kv, Read};
use ankusa_engine_rocksdb::RocksKv;
use ankusa_keys::TenantOrd;

use crate::keyed::stop;
use crate::relay::{Relay, config};
use crate::sink::{Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(90);

const JSON: (&str, &str) = ("content-type", "application/json");

fn store_path(relay: &Relay) -> std::path::PathBuf {
    relay.data_dir().join("store-rocksdb")
}

/// Keys of `cf` in tenant 1's range of the store at `path`.
fn count_keys(kv: &RocksKv, cf: Cf) -> usize {
    let range = match cf {
        Cf::Hooks => ankusa_keys::hooks_tenant_range(TenantOrd(1)),
        Cf::Archive => ankusa_keys::archive_tenant_range(TenantOrd(1)),
        _ => ankusa_keys::deliveries_tenant_range(TenantOrd(1)),
    };
    kv.scan(cf, &range, Direction::Forward, 100_000)
        .expect("scan")
        .len()
}

/// The SST bytes of `hooks` and `archive` after a full manual compaction.
fn compacted_sst_bytes(path: &std::path::Path) -> (u64, u64) {
    let kv = RocksKv::open(path).expect("open the store");
    kv.compact_all().expect("compact");
    (
        kv.sst_bytes(Cf::Hooks).expect("sst"),
        kv.sst_bytes(Cf::Archive).expect("sst"),
    )
}

/// With `retention.keep_ms: 2000`, every delivered hook's envelope and archive
/// entry is gone once the sweep has run past it: the store, opened after the
/// relay stopped, holds no key of them in `hooks` or `archive`, and after a
/// full compaction those column families take what an empty store's take
/// (within 10%).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_reclaims_delivered_hooks_and_their_space() {
    let sink = Sink::ok().await;
    let yaml = config(
        "rocksdb",
        &format!(
            "
retention: {{keep_ms: 2000, interval_ms: 200}}
sources:
  - name: s
    sinks: [{{type: http, url: '{}'}}]
",
            sink.url()
        ),
    );
    // The empty store: the same configuration, no hook.
    let mut empty = Relay::start(&yaml).await;
    stop(&mut empty).await;
    let empty_bytes = compacted_sst_bytes(&store_path(&empty));

    let mut relay = Relay::start(&yaml).await;
    let big = "x".repeat(8 * 1024);
    for i in 0..50 {
        relay
            .post(
                "/hooks/s",
                &[JSON],
                format!("{{\"i\":{i},\"pad\":\"{big}\"}}"),
            )
            .await
            .id();
    }
    until(
        "50 delivered, and their envelopes reclaimed by the sweep",
        WAIT,
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_delivered_total"] == 50.0
                && m["ankusa_retention_hooks_deleted_total"] == 50.0)
                .then_some(())
        },
    )
    .await;
    stop(&mut relay).await;
    {
        let kv = RocksKv::open(store_path(&relay)).expect("open the store");
        assert_eq!(
            count_keys(&kv, Cf::Hooks),
            0,
            "delivered envelopes left in hooks"
        );
        assert_eq!(count_keys(&kv, Cf::Archive), 0, "archive entries left");
        assert_eq!(count_keys(&kv, Cf::Deliveries), 0);
        assert_eq!(
            ankusa_queue::check_invariants(&kv.snapshot()).expect("check"),
            vec![]
        );
    }
    let (hooks, archive) = compacted_sst_bytes(&store_path(&relay));
    let within = |got: u64, base: u64| got <= base + base / 10 + 1;
    assert!(
        within(hooks, empty_bytes.0),
        "hooks: {hooks} SST bytes, the empty store's {}",
        empty_bytes.0
    );
    assert!(
        within(archive, empty_bytes.1),
        "archive: {archive} SST bytes, the empty store's {}",
        empty_bytes.1
    );
}

/// With retention shorter than the dedupe lifetime, a provider's resend
/// after the first hook's envelope was deleted is still a duplicate (200,
/// nothing stored), and its `id` is `null`, not an empty string: the dedupe
/// record keeps only the seq, so the first hook's idempotency key is not
/// known any more (docs/design.md section 5, "Edge", step 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_after_retention_deleted_the_hook_is_a_duplicate_with_a_null_id() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
retention: {{keep_ms: 2000, interval_ms: 200}}
sources:
  - name: s
    dedupe: {{header: x-delivery}}
    sinks: [{{type: http, url: '{}'}}]
",
            sink.url()
        ),
    ))
    .await;
    let headers = [JSON, ("x-delivery", "evt_1")];
    let first = relay.post("/hooks/s", &headers, "{\"i\":1}").await.id();
    let dup = relay.post("/hooks/s", &headers, "{\"i\":1}").await;
    assert_eq!(
        (
            dup.status,
            dup.body["duplicate"].as_bool(),
            dup.body["id"].as_str()
        ),
        (200, Some(true), Some(first.as_str())),
        "{dup:?}"
    );
    until(
        "the hook delivered and its envelope deleted by retention",
        WAIT,
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_delivered_total"] == 1.0
                && m["ankusa_retention_hooks_deleted_total"] == 1.0)
                .then_some(())
        },
    )
    .await;
    let late = relay.post("/hooks/s", &headers, "{\"i\":1}").await;
    assert_eq!(late.status, 200, "{late:?}");
    let obj = late.body.as_object().expect("a JSON object");
    assert_eq!(
        obj.get("duplicate"),
        Some(&serde_json::Value::Bool(true)),
        "{late:?}"
    );
    assert_eq!(obj.get("id"), Some(&serde_json::Value::Null), "{late:?}");
    let m = relay.metrics().await;
    assert_eq!(
        (
            m["ankusa_ingest_accepted_total"],
            m["ankusa_ingest_duplicates_total"]
        ),
        (1.0, 2.0),
        "{m:?}"
    );
    assert_eq!(sink.requests().len(), 1, "a duplicate was delivered");
}
