//! Issue 14, the crash test of the relay (ADR 0004's `test:crash`): the real
//! binary under load over 50 ordering keys and two unordered clients, through
//! an ordered and an unordered HTTP sink whose receiver answers every 7th
//! request 500 and records every request; SIGKILL at random moments, restart
//! on the same data dir, at least 20 times (`ANKUSA_CRASH_KILLS` for a soak;
//! `ANKUSA_CRASH_SEED` repeats a run: the seed is printed).
//!
//! The kill moments come from a seeded RNG and are conditions, not clock
//! times: after the relay has acknowledged a random number of new hooks while
//! the clients post (group commits in flight), or after the receiver has seen
//! a random number of new requests while the clients are held (outcome
//! flushes in flight), or after both, then optionally a few random
//! milliseconds more. Correctness never depends on timing: the assertions
//! are on the recorded data.
//!
//! At the end (a final restart, drain, SIGTERM):
//! - every hook that got a 200 was delivered (a 2xx of the receiver) at least once;
//! - per key, the requests in arrival order only ever repeat the lane's most
//!   recent head or go on to a later hook, so the first deliveries are in
//!   commit order, which is the ack order;
//! - `ankusa store check` (the binary's subcommand) passes on the final store,
//!   and on the store after some of the kills, and the store holds exactly
//!   the hooks the receiver got (every committed hook was delivered, even one
//!   whose 200 the client never read);
//! - it prints kills, acked, delivered, duplicates, violations.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::relay::{Relay, config};
use crate::sink::{Reply, Req, Sink, until};
use crate::store::store_check;

const JSON: (&str, &str) = ("content-type", "application/json");
/// Ordering keys, spread over the ordered clients (each key is posted by one
/// client, one hook at a time: its post order is its commit order).
const KEYS: usize = 50;
const ORDERED_CLIENTS: usize = 5;
const UNORDERED_CLIENTS: usize = 2;
/// Every this many requests (by arrival at the receiver), one is answered 500.
const FAIL_EVERY: usize = 7;
/// The store is checked (`ankusa store check`) on the killed store every
/// this many kills, before the relay restarts on it; the other restarts
/// recover from what the kill left, untouched.
const CHECK_EVERY: usize = 5;

/// splitmix64: a small seeded generator (the kill moments).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One hook the relay answered 200: its key, its number within the key, its id.
#[derive(Clone, Debug)]
struct Ack {
    key: String,
    i: u64,
    id: String,
}

/// What the clients share with the test's driver.
#[derive(Default)]
struct Load {
    /// `http://<ingest>`: the relay's address after its latest start.
    base: Mutex<String>,
    /// The clients post only while this is set.
    posting: AtomicBool,
    /// Cleared just before a kill, set once the restarted relay is ready: a
    /// client whose post failed waits for it.
    up: AtomicBool,
    stop: AtomicBool,
    acked: Mutex<Vec<Ack>>,
    /// Posts that got no answer (the relay was killed under them).
    unanswered: AtomicUsize,
    /// Posts answered 429 or 503 (a queue bound): not acknowledged.
    refused: AtomicUsize,
}

fn body(key: &str, i: u64) -> String {
    format!("{{\"key\":\"{key}\",\"i\":{i}}}")
}

/// The hook a request carries, from its body: `None` for a request cut short
/// by the kill (the receiver recorded what arrived).
fn label(r: &Req) -> Option<(String, u64)> {
    let j = r.json();
    Some((j["key"].as_str()?.to_owned(), j["i"].as_u64()?))
}

async fn wait_up(load: &Load) {
    while !load.up.load(Ordering::SeqCst) && !load.stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A client posting `keys` round robin to `path`, one hook at a time.
async fn client(load: Arc<Load>, path: &'static str, keys: Vec<String>, ordered: bool) {
    let http = crate::relay::client();
    let mut next: HashMap<String, u64> = HashMap::new();
    let mut turn = 0usize;
    loop {
        if load.stop.load(Ordering::SeqCst) {
            return;
        }
        if !load.posting.load(Ordering::SeqCst) || !load.up.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        let key = &keys[turn % keys.len()];
        turn += 1;
        let n = next.entry(key.clone()).or_default();
        let i = *n;
        *n += 1;
        let url = format!("{}{path}", load.base.lock().expect("lock"));
        let mut headers = vec![JSON];
        if ordered {
            headers.push(("x-entity-id", key.as_str()));
        }
        match crate::relay::post(&http, &url, &headers, body(key, i).into_bytes()).await {
            Ok(a) if a.status == 200 => {
                assert!(a.body.get("duplicate").is_none(), "no dedupe here: {a:?}");
                load.acked.lock().expect("lock").push(Ack { key: key.clone(), i, id: a.id() });
            }
            Ok(a) if a.status == 429 || a.status == 503 => {
                load.refused.fetch_add(1, Ordering::SeqCst);
            }
            Ok(a) => panic!("unexpected answer to {key}/{i}: {a:?}"),
            Err(_) => {
                load.unanswered.fetch_add(1, Ordering::SeqCst);
                wait_up(&load).await;
            }
        }
    }
}

fn kills() -> usize {
    std::env::var("ANKUSA_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20).max(1)
}

fn seed() -> u64 {
    std::env::var("ANKUSA_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    })
}

/// The `N hooks` of `store check`'s clean summary.
fn hooks_in(summary: &str) -> usize {
    let (_, rest) = summary.split_once(": clean (").unwrap_or_else(|| panic!("not a clean summary: {summary}"));
    let hooks = rest.split(", ").nth(1).and_then(|s| s.split(' ').next()).unwrap_or_else(|| panic!("{summary}"));
    hooks.parse().unwrap_or_else(|_| panic!("{summary}"))
}

/// The figures a run prints, and what it found wrong.
#[derive(Debug, Default)]
struct Figures {
    kills: usize,
    acked: usize,
    delivered: usize,
    duplicates: usize,
    violations: Vec<String>,
}

async fn crash_run(backend: &str) {
    let seed = seed();
    let kills = kills();
    println!("crash test on {backend}: seed {seed} (ANKUSA_CRASH_SEED={seed} repeats it), {kills} kills");
    let mut rng = Rng(seed);
    let sink = Sink::start(|r| if r.n % FAIL_EVERY == FAIL_EVERY - 1 { Reply::Status(500) } else { Reply::Status(200) }).await;
    let mut relay = Relay::start(&config(
        backend,
        &format!(
            "
retry: {{base_ms: 10, max_ms: 100}}
breaker: {{open_ms: 1000}}
sources:
  - name: o
    sinks: [{{type: http, url: '{url}', timeout_ms: 10000, ordered: true, ordering_key: {{header: x-entity-id}}}}]
  - name: u
    sinks: [{{type: http, url: '{url}', timeout_ms: 10000}}]
",
            url = sink.url()
        ),
    ))
    .await;
    let data = relay.data_dir();
    let load = Arc::new(Load::default());
    *load.base.lock().expect("lock") = format!("http://{}", relay.ingest);
    load.up.store(true, Ordering::SeqCst);
    let mut clients = Vec::new();
    for c in 0..ORDERED_CLIENTS {
        let keys: Vec<String> = (0..KEYS).filter(|k| k % ORDERED_CLIENTS == c).map(|k| format!("k{k}")).collect();
        clients.push(tokio::spawn(client(Arc::clone(&load), "/hooks/o", keys, true)));
    }
    for c in 0..UNORDERED_CLIENTS {
        clients.push(tokio::spawn(client(Arc::clone(&load), "/hooks/u", vec![format!("u{c}")], false)));
    }

    let mut fig = Figures::default();
    let started = Instant::now();
    let mut moments: BTreeMap<&str, usize> = BTreeMap::new();
    for k in 0..kills {
        // 0: while posting (group commits); 1: while delivering only
        // (outcome flushes); 2: both.
        let mode = rng.below(3);
        load.posting.store(mode != 1, Ordering::SeqCst);
        let acked0 = load.acked.lock().expect("lock").len();
        let reqs0 = sink.requests().len();
        let want_acks = acked0 + 1 + rng.below(60) as usize;
        let want_reqs = reqs0 + 1 + rng.below(40) as usize;
        match mode {
            0 | 2 => {
                until("hooks acknowledged before the kill", Duration::from_secs(120), async || {
                    (load.acked.lock().expect("lock").len() >= want_acks).then_some(())
                })
                .await;
                if mode == 2 {
                    until("requests delivered before the kill", Duration::from_secs(120), async || {
                        (sink.requests().len() >= want_reqs).then_some(())
                    })
                    .await;
                }
            }
            _ => {
                // With nothing pending there is nothing to deliver: kill anyway.
                until("requests delivered before the kill", Duration::from_secs(120), async || {
                    if sink.requests().len() >= want_reqs {
                        return Some(());
                    }
                    let m = relay.metrics().await;
                    (m.get("ankusa_queue_pending") == Some(&0.0)).then_some(())
                })
                .await;
            }
        }
        let extra_ms = if rng.below(2) == 0 { rng.below(30) } else { 0 };
        if extra_ms > 0 {
            // Only to vary the moment; nothing is asserted about it.
            tokio::time::sleep(Duration::from_millis(extra_ms)).await;
        }
        *moments.entry(["posting", "delivering", "posting+delivering"][mode as usize]).or_default() += 1;
        load.up.store(false, Ordering::SeqCst);
        relay.kill();
        fig.kills += 1;
        if (k + 1) % CHECK_EVERY == 0 {
            let (status, out) = store_check(&data, &[]);
            if status.code() != Some(0) {
                fig.violations.push(format!("store check after kill {}: {status}: {out}", k + 1));
            }
        }
        relay.restart().await;
        *load.base.lock().expect("lock") = format!("http://{}", relay.ingest);
        load.up.store(true, Ordering::SeqCst);
    }
    load.posting.store(false, Ordering::SeqCst);
    load.stop.store(true, Ordering::SeqCst);
    for c in clients {
        tokio::time::timeout(Duration::from_secs(120), c).await.expect("client stopped").expect("client ok");
    }
    let acked = load.acked.lock().expect("lock").clone();
    fig.acked = acked.len();
    let want: HashSet<(String, u64)> = acked.iter().map(|a| (a.key.clone(), a.i)).collect();
    assert_eq!(want.len(), acked.len(), "a hook acknowledged twice");

    // Drain: every acknowledged hook delivered and nothing pending.
    until("every acknowledged hook delivered and the queue empty", Duration::from_secs(300), async || {
        let got: HashSet<(String, u64)> = sink.delivered().iter().filter_map(label).collect();
        if !want.is_subset(&got) {
            return None;
        }
        let m = relay.metrics().await;
        (m.get("ankusa_queue_pending") == Some(&0.0)).then_some(())
    })
    .await;
    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(120)).await;
    assert!(status.success(), "final exit: {status}\n{}", relay.log());

    let reqs = sink.requests();
    let delivered = sink.delivered();
    let mut per_hook: HashMap<(String, u64), usize> = HashMap::new();
    for r in &delivered {
        if let Some(l) = label(r) {
            *per_hook.entry(l).or_default() += 1;
        }
    }
    fig.delivered = per_hook.len();
    fig.duplicates = per_hook.values().map(|n| n - 1).sum();
    for a in &acked {
        if !per_hook.contains_key(&(a.key.clone(), a.i)) {
            fig.violations.push(format!("acknowledged {}/{} (id {}) never delivered", a.key, a.i, a.id));
        }
    }
    // Per ordered key, every request in arrival order: the same hook as the
    // one before it (a repeat of the lane's most recent head) or a later one.
    let mut by_key: BTreeMap<String, Vec<(u64, usize)>> = BTreeMap::new();
    let mut ids: HashMap<(String, u64), HashSet<String>> = HashMap::new();
    for r in &reqs {
        let Some((key, i)) = label(r) else { continue };
        ids.entry((key.clone(), i)).or_default().insert(r.id());
        if key.starts_with('k') {
            assert_eq!(r.key().as_deref(), Some(key.as_str()), "ordering key of {key}/{i}");
            by_key.entry(key).or_default().push((i, r.n));
        }
    }
    for (key, seq) in &by_key {
        for w in seq.windows(2) {
            let ((a, _), (b, n)) = (w[0], w[1]);
            if b < a {
                fig.violations.push(format!("{key}: request {n} carries hook {b} after hook {a} (not the lane's most recent head)"));
            }
        }
        let firsts: Vec<u64> = {
            let ok: HashSet<usize> = delivered.iter().map(|r| r.n).collect();
            let mut seen = HashSet::new();
            seq.iter().filter(|(_, n)| ok.contains(n)).map(|(i, _)| *i).filter(|i| seen.insert(*i)).collect()
        };
        let acked_order: Vec<u64> = acked.iter().filter(|a| &a.key == key).map(|a| a.i).collect();
        let firsts_acked: Vec<u64> = firsts.iter().copied().filter(|i| acked_order.contains(i)).collect();
        if firsts_acked != acked_order {
            fig.violations.push(format!("{key}: delivered {firsts_acked:?}, acknowledged {acked_order:?}"));
        }
    }
    for ((key, i), set) in &ids {
        if set.len() != 1 {
            fig.violations.push(format!("{key}/{i} went out under {} idempotency keys: {set:?}", set.len()));
        }
    }
    // The final store: clean, nothing pending or dead, and exactly the hooks
    // the receiver got (a committed hook whose 200 was never read included).
    let (status, out) = store_check(&data, &[]);
    if status.code() == Some(0) {
        let stored = hooks_in(&out);
        if stored != fig.delivered {
            fig.violations.push(format!("the store holds {stored} hooks, the receiver got {}", fig.delivered));
        }
        if !out.contains("; 0 pending rows (0 in flight, 0 lane members), 0 busy lanes, 0 dead, 0 quarantined)") {
            fig.violations.push(format!("the final store is not drained: {out}"));
        }
    } else {
        fig.violations.push(format!("final store check: {status}: {out}"));
    }
    println!(
        "crash test on {backend} (seed {seed}): kills {}, acked {}, delivered {}, duplicates {}, violations {} \
         ({} posts unanswered, {} refused, {} requests, kill moments {moments:?}, {:.0} s)",
        fig.kills,
        fig.acked,
        fig.delivered,
        fig.duplicates,
        fig.violations.len(),
        load.unanswered.load(Ordering::SeqCst),
        load.refused.load(Ordering::SeqCst),
        reqs.len(),
        started.elapsed().as_secs_f64(),
    );
    for v in &fig.violations {
        println!("violation: {v}");
    }
    assert!(fig.violations.is_empty(), "{} violations (seed {seed}): {:#?}", fig.violations.len(), fig.violations);
    assert!(fig.kills >= kills && fig.acked > 0 && fig.delivered >= fig.acked, "{fig:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_and_reorders_nothing_on_rocksdb() {
    crash_run("rocksdb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_and_reorders_nothing_on_fjall() {
    crash_run("fjall").await;
}
