//! Unconfigured sources and sinks (docs/design.md section 5): a source or
//! sink removed from the configuration with hooks still queued stops the
//! start until they are dropped; a sink entry's queued hooks follow its name,
//! wherever it stands in the list.

use std::collections::BTreeMap;
use std::time::Duration;

use ankusa_engine::{Cf, Direction, Kv, Read};
use ankusa_engine_rocksdb::RocksKv;
use ankusa_keys::{DeadLetterValue, Family, TenantOrd, tenant_range};

use crate::keyed::{KEYS, body, stop};
use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, until};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(90);

const JSON: (&str, &str) = ("content-type", "application/json");

fn store_path(relay: &Relay) -> std::path::PathBuf {
    relay.data_dir().join("store-rocksdb")
}

fn before_removal(url: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "
breaker: {{failures: 1000}}
retry: {{base_ms: 50, max_ms: 200}}
sources:
  - name: keep
    sinks:
      - {{type: http, name: main, url: '{url}'}}
      - {{type: http, name: audit, url: '{url}down'}}
  - name: gone
    sinks:
      - {{type: http, name: ordered, url: '{url}down', ordered: true, ordering_key: {{header: x-entity-id}}}}
"
        ),
    )
}

fn after_removal(url: &str) -> String {
    config(
        "rocksdb",
        &format!(
            "
sources:
  - name: keep
    sinks:
      - {{type: http, name: main, url: '{url}'}}
"
        ),
    )
}

/// The dead letters of tenant 1 in the store at `path`: reason -> count.
fn dead_letters(path: &std::path::Path) -> BTreeMap<String, usize> {
    let kv = RocksKv::open(path).expect("open the store");
    let mut out = BTreeMap::new();
    for (_, v) in kv
        .scan(
            Cf::Index,
            &tenant_range(Family::DeadLetter, TenantOrd(1)),
            Direction::Forward,
            10_000,
        )
        .expect("scan")
    {
        *out.entry(DeadLetterValue::decode(&v).expect("?X value").reason)
            .or_default() += 1;
    }
    out
}

/// A source (with ordered lanes) and a sink entry removed from the
/// configuration while their hooks are queued (their endpoint down): the node
/// refuses to start, naming each with its pending count and the two ways out,
/// and changes nothing; `--drop-unconfigured` starts it with their rows in the
/// dead-letter queue under "source removed from the config" and "sink removed
/// from the config"; the next start needs no flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_source_or_sink_with_queued_hooks_stops_the_start_until_dropped() {
    let sink = Sink::start(|r| {
        if r.path == "/indown" {
            Reply::Status(503)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let mut relay = Relay::start(&before_removal(&sink.url())).await;
    for i in 0..3 {
        relay
            .post("/hooks/keep", &[JSON], body("keep", i))
            .await
            .id();
    }
    for i in 0..5 {
        let key = KEYS[i % 2];
        relay
            .post("/hooks/gone", &[JSON, ("x-entity-id", key)], body(key, i))
            .await
            .id();
    }
    until(
        "keep's main sink delivered 3, 8 rows queued",
        WAIT,
        async || {
            let main = sink.delivered().iter().filter(|r| r.path == "/in").count();
            let m = relay.metrics().await;
            (main == 3
                && m["ankusa_queue_pending"] == 8.0
                && m["ankusa_dispatch_retries_total"] >= 1.0)
                .then_some(())
        },
    )
    .await;
    stop(&mut relay).await;

    relay.set_template(&after_removal(&sink.url()));
    let (status, log) = relay.restart_refused().await;
    assert!(!status.success(), "{log}");
    for needle in [
        "the store has queued deliveries for sources or sinks that are not in the configuration",
        "source \"gone\" (not in the configuration): 5 pending",
        "source \"gone\", sink \"ordered\" (slot 0): 5 pending",
        "source \"keep\", sink \"audit\" (slot 1), not in the configuration: 3 pending",
        "paused: true",
        "ankusa serve --drop-unconfigured",
    ] {
        assert!(
            log.contains(needle),
            "{needle:?} not in the refusal:\n{log}"
        );
    }
    assert!(
        dead_letters(&store_path(&relay)).is_empty(),
        "a refused start changed the store"
    );

    relay.set_args(&["--drop-unconfigured"]);
    relay.restart().await;
    let m = relay.metrics().await;
    assert_eq!(
        (
            m["ankusa_dlq_dead"],
            m["ankusa_queue_pending"],
            m["ankusa_dispatch_lanes"],
            m["ankusa_dispatch_lane_members"]
        ),
        (8.0, 0.0, 0.0, 0.0),
        "{m:?}"
    );
    stop(&mut relay).await;
    assert_eq!(
        dead_letters(&store_path(&relay)),
        BTreeMap::from([
            ("sink removed from the config".to_owned(), 3),
            ("source removed from the config".to_owned(), 5)
        ])
    );
    {
        let kv = RocksKv::open(store_path(&relay)).expect("open the store");
        assert_eq!(
            ankusa_queue::check_invariants(&kv.snapshot()).expect("check"),
            vec![]
        );
    }
    // Nothing unconfigured is left: a start without the flag.
    relay.set_args(&[]);
    relay.restart().await;
    assert_eq!(relay.metrics().await["ankusa_dlq_dead"], 8.0);
}

/// A source with two sinks, `first` (its receiver down) and `second`: the
/// hooks queued for `first` follow its name, not its position. Removed from
/// the front of the list (so `second` moves into its place), it stops the
/// start by name; put back after `second`, paused, its hooks wait; resumed at
/// a receiver that answers, they reach it. `second` gets each of its own hooks
/// once and none of `first`'s. Before, the entry that moved into the removed
/// one's position delivered its queued hooks (4 hooks queued for a removed
/// first sink were written to the second sink's file, 8 lines for 4 hooks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sinks_queued_hooks_follow_its_name_not_its_position() {
    let sink = Sink::start(|r| {
        if r.path == "/first-down" {
            Reply::Status(503)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let url = sink.url();
    let base = url.trim_end_matches("/in");
    let sinks = |list: &str| {
        config(
            "rocksdb",
            &format!(
                "
breaker: {{failures: 1000}}
retry: {{base_ms: 50, max_ms: 200}}
sources:
  - name: s
    sinks: [{list}]
"
            ),
        )
    };
    let first = |path: &str, paused: bool| {
        format!("{{type: http, name: first, url: '{base}/{path}', paused: {paused}}}")
    };
    let second = format!("{{type: http, name: second, url: '{base}/second'}}");
    let at = |path: &str| -> Vec<String> {
        sink.delivered()
            .iter()
            .filter(|r| r.path == path)
            .map(crate::sink::Req::id)
            .collect()
    };
    let mut relay =
        Relay::start(&sinks(&format!("{}, {second}", first("first-down", false)))).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(relay.post("/hooks/s", &[JSON], body("s", i)).await.id());
    }
    until("second delivered 4, first's 4 queued", WAIT, async || {
        let m = relay.metrics().await;
        (at("/second").len() == 4
            && m["ankusa_queue_pending"] == 4.0
            && m["ankusa_dispatch_retries_total"] >= 1.0)
            .then_some(())
    })
    .await;
    stop(&mut relay).await;

    // `first` removed from the front: refused by name.
    relay.set_template(&sinks(&second));
    let (status, log) = relay.restart_refused().await;
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("source \"s\", sink \"first\" (slot 0), not in the configuration: 4 pending"),
        "{log}"
    );

    // Put back after `second`, paused: its hooks wait; new hooks reach both.
    relay.set_template(&sinks(&format!("{second}, {}", first("first-up", true))));
    relay.restart().await;
    for i in 4..6 {
        ids.push(relay.post("/hooks/s", &[JSON], body("s", i)).await.id());
    }
    until("second delivered 6, first's 6 held", WAIT, async || {
        let m = relay.metrics().await;
        (at("/second").len() == 6 && m["ankusa_queue_pending"] == 6.0).then_some(())
    })
    .await;
    assert!(at("/first-up").is_empty());
    stop(&mut relay).await;

    // Resumed: first's six reach its receiver.
    relay.set_template(&sinks(&format!("{second}, {}", first("first-up", false))));
    relay.restart().await;
    until("first delivered its 6", WAIT, async || {
        (relay.metrics().await["ankusa_queue_pending"] == 0.0).then_some(())
    })
    .await;
    let mut got_first = at("/first-up");
    let mut got_second = at("/second");
    got_first.sort();
    got_second.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got_second, want, "second got each of its hooks once");
    assert_eq!(
        got_first, want,
        "first got each of its hooks once, after the move"
    );
    stop(&mut relay).await;
    let kv = crate::keyed::open_store(&relay);
    crate::keyed::assert_clean(&kv);
}
