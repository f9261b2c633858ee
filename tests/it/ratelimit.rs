//! A per-sink rate limit (`rate_limit: {per_second, burst}`, docs/design.md
//! section 5, "Rate limit") through the real binary. A sink limited to 20
//! hooks/s (burst 20) takes 100 hooks in about 4 s after its first (20 at once,
//! then one every 50 ms), in order per key, while the source's other sink,
//! unlimited, takes the same 100 hooks as fast as it can. Only counts, order
//! and a generous lower bound on the limited sink's elapsed time are asserted;
//! the figures are printed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::relay::{Relay, config};
use crate::sink::{Req, Sink, until};

const HOOKS: usize = 100;
const KEYS: usize = 5;

fn index(r: &Req) -> u64 {
    r.json()["i"]
        .as_u64()
        .unwrap_or_else(|| panic!("request {} has no i", r.n))
}

/// The hook indexes each ordering key's requests carried, in arrival order.
fn per_key(reqs: &[Req]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in reqs {
        out.entry(r.key().unwrap_or_default())
            .or_default()
            .push(index(r));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_sink_takes_its_rate_and_the_other_sink_is_not_slowed() {
    let limited = Sink::ok().await;
    let free = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
sources:
  - name: s
    sinks:
      - {{type: http, name: limited, url: '{}', ordered: true, ordering_key: {{header: x-entity-id}}, rate_limit: {{per_second: 20, burst: 20}}}}
      - {{type: http, name: free, url: '{}'}}
",
            limited.url(),
            free.url()
        ),
    ))
    .await;
    assert!(
        relay.log().contains("[at most 20/s, burst 20]"),
        "{}",
        relay.log()
    );
    let start = Instant::now();
    for i in 0..HOOKS {
        let key = format!("k{}", i % KEYS);
        relay
            .post(
                "/hooks/s",
                &[("x-entity-id", key.as_str())],
                format!("{{\"i\":{i}}}"),
            )
            .await
            .id();
    }
    let posted = start.elapsed();
    let free_reqs = until(
        "the free sink took all 100",
        Duration::from_secs(120),
        async || {
            let r = free.requests();
            (r.len() >= HOOKS).then_some(r)
        },
    )
    .await;
    let free_done = start.elapsed();
    let limited_reqs = until(
        "the limited sink took all 100",
        Duration::from_secs(120),
        async || {
            let r = limited.requests();
            (r.len() >= HOOKS).then_some(r)
        },
    )
    .await;
    let limited_done = start.elapsed();
    let m = until(
        "every delivery committed",
        Duration::from_secs(60),
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_delivered_total"] == 2.0 * HOOKS as f64).then_some(m)
        },
    )
    .await;

    // Counts: each sink got each hook once (no retry: every answer was 200).
    assert_eq!((free_reqs.len(), limited_reqs.len()), (HOOKS, HOOKS));
    assert_eq!(m["ankusa_dispatch_retries_total"], 0.0, "{m:?}");
    assert_eq!(m["ankusa_dispatch_dead_lettered_total"], 0.0, "{m:?}");
    // Order: the limited sink is ordered per key.
    let want: BTreeMap<String, Vec<u64>> = (0..KEYS)
        .map(|k| {
            (
                format!("k{k}"),
                (0..HOOKS as u64)
                    .filter(|i| *i as usize % KEYS == k)
                    .collect(),
            )
        })
        .collect();
    assert_eq!(per_key(&limited_reqs), want);
    let mut free_seen: Vec<u64> = free_reqs.iter().map(index).collect();
    free_seen.sort_unstable();
    assert_eq!(free_seen, (0..HOOKS as u64).collect::<Vec<_>>());

    // The rate: after its burst of 20, the limited sink takes one hook per
    // 50 ms, so its 100th arrives at least 4 s after its first (asserted: 3 s).
    let spread = |r: &[Req]| r[r.len() - 1].at.duration_since(r[0].at);
    let (limited_spread, free_spread) = (spread(&limited_reqs), spread(&free_reqs));
    println!(
        "rate limit figures: 100 hooks posted in {posted:?}; free sink: all 100 by {free_done:?} after the first post \
         (first to last arrival {free_spread:?}); limited sink (20/s, burst 20): all 100 by {limited_done:?} \
         (first to last arrival {limited_spread:?})"
    );
    assert!(
        limited_spread >= Duration::from_secs(3),
        "limited sink took 100 hooks in {limited_spread:?}"
    );
}
