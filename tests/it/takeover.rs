//! Takeover (README, "Changing a running relay"; docs/design.md section 5,
//! "Takeover"): `ankusa serve --takeover` replaces the process serving a
//! data_dir while hooks keep coming, each on a new connection (as a provider
//! sends them). No connection may be refused; a hook may get the documented
//! 503 with `Retry-After` only when a held request waited past the bound.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::relay::{Outcomes, Relay, config, load, more_hooks};
use crate::sink::{Reply, Sink, until};
use crate::store::store_check;

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(120);

/// One source whose hooks go to an ordered sink keyed by `x-entity-id`
/// (the load's keys) and to an unordered one.
fn ordered_and_not(sink: &Sink) -> String {
    with_sinks(sink, true)
}

/// [`ordered_and_not`], with or without the ordered sink entry.
fn with_sinks(sink: &Sink, lanes: bool) -> String {
    let base = sink.url();
    let lanes = if lanes {
        format!(
            "      - {{type: http, name: lanes, url: '{base}/lanes', ordered: true, ordering_key: {{header: x-entity-id}}}}\n"
        )
    } else {
        String::new()
    };
    config(
        "rocksdb",
        &format!(
            "retry: {{base_ms: 50, max_ms: 200}}\nsources:\n  - name: orders\n    sinks:\n{lanes}      \
             - {{type: http, name: web, url: '{base}/web'}}\n"
        ),
    )
}

/// What the load's hooks got, split: the ids of those answered 200, and
/// every other outcome. A 503 that says the relay is handing over (a held
/// request past the bound, with `Retry-After`) is the one other answer a
/// takeover may give; it is returned apart.
fn outcomes(out: &Outcomes) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut ids, mut busy, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for o in out.lock().expect("lock").iter() {
        match o {
            Ok(id) => ids.push(id.clone()),
            Err(e) if e.starts_with("status 503") && e.contains("handing over") => {
                busy.push(e.clone())
            }
            Err(e) => failed.push(e.clone()),
        }
    }
    (ids, busy, failed)
}

/// The ids of the load's hooks answered 200, once it is checked that none
/// was refused or failed. On a loaded machine a held request may wait past
/// the 5 s bound and get the documented 503 (never a refusal): at most 3 do;
/// more means the handover itself took seconds.
fn accepted(out: &Outcomes) -> Vec<String> {
    let (ids, busy, failed) = outcomes(out);
    assert!(
        failed.is_empty(),
        "{} of {} hooks refused or failed: {:?}",
        failed.len(),
        ids.len() + busy.len() + failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(
        busy.len() <= 3,
        "{} hooks answered 503 while held: {busy:?}",
        busy.len()
    );
    ids
}

/// The load's hook number (`{"n": N}`) of each request the sink took at
/// `path`, in the order it took them.
fn numbers_at(sink: &Sink, path: &str) -> Vec<(String, u64)> {
    sink.delivered()
        .iter()
        .filter(|r| r.path == path)
        .map(|r| {
            let key = r.header("x-entity-id").unwrap_or_default();
            let n = r.json()["n"]
                .as_u64()
                .unwrap_or_else(|| panic!("no n in {:?}", r.json()));
            (key, n)
        })
        .collect()
}

/// Three takeovers by the same binary in a row, under a steady load of new
/// connections: each old process exits 0 having handed over, no connection
/// is refused and no hook answered anything but 200, every hook is delivered
/// to both sinks, and the ordered sink took each key's hooks in the order
/// they were accepted (a hook the old process had in flight may come again,
/// never after a later one of its key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeovers_under_load_refuse_no_connection_and_keep_each_keys_order() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let mut relay = Relay::start(&ordered_and_not(&sink)).await;
    let (stop, out): (Arc<AtomicBool>, Outcomes) = Default::default();
    let task = load(
        relay.url("/hooks/orders"),
        Arc::clone(&stop),
        Arc::clone(&out),
    );
    for round in 1..=3 {
        more_hooks(&out, 40, &format!("40 more hooks before takeover {round}")).await;
        let (status, old_log) = relay.take_over().await;
        assert!(
            status.success(),
            "takeover {round}: the old process exited with {status}:\n{old_log}"
        );
        assert!(
            old_log.contains("takeover done"),
            "takeover {round}: the old log does not say it handed over:\n{old_log}"
        );
        assert!(
            relay.log().contains("takeover: serving"),
            "takeover {round}: the new log does not say it serves:\n{}",
            relay.log()
        );
    }
    more_hooks(&out, 40, "40 hooks after the last takeover").await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("load task");

    let ids = accepted(&out);
    for path in ["/in/lanes", "/in/web"] {
        until(
            &format!("every accepted hook delivered to {path}"),
            WAIT,
            async || {
                let got = sink.ids_at(path);
                ids.iter().all(|id| got.contains(id)).then_some(())
            },
        )
        .await;
    }
    // Per key, the first delivery of each hook follows the load's order.
    let mut seen: BTreeMap<String, (u64, BTreeSet<u64>)> = BTreeMap::new();
    for (key, n) in numbers_at(&sink, "/in/lanes") {
        let (last, all) = seen.entry(key.clone()).or_default();
        if all.insert(n) {
            assert!(
                all.len() == 1 || n > *last,
                "key {key}: hook {n} delivered after hook {last}"
            );
            *last = n;
        }
    }
    assert_eq!(seen.len(), 7, "the load's 7 keys: {:?}", seen.keys());
}

/// A takeover whose new process cannot serve leaves the old one serving,
/// under load, with nothing refused: a new binary that cannot open the store
/// (one that supports an older store format only: a downgrade) exits
/// non-zero after the old process closed the store, which then opens it
/// again; one whose configuration names other listeners is turned away
/// before anything stops. `--takeover` without a serving relay says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_that_cannot_serve_leaves_the_old_process_serving() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let template = ordered_and_not(&sink);
    let mut relay = Relay::start(&template).await;
    let old_pid = relay.pid();
    let (stop, out): (Arc<AtomicBool>, Outcomes) = Default::default();
    let task = load(
        relay.url("/hooks/orders"),
        Arc::clone(&stop),
        Arc::clone(&out),
    );
    more_hooks(&out, 40, "40 hooks before the takeover").await;

    // A downgrade: the store is newer than the new binary supports.
    let (status, log) = relay
        .take_over_refused(&[("ANKUSA_TEST_SUPPORTED_FORMAT", "1")])
        .await;
    // 3: the store's refusal, as at a start.
    assert_eq!(status.code(), Some(3), "{log}");
    assert!(log.contains("takeover failed"), "{log}");
    assert!(
        log.contains("format"),
        "the refusal does not name the store's format:\n{log}"
    );
    until("the old process serves again", WAIT, async || {
        relay.readyz().await.filter(|(s, _)| *s == 200)
    })
    .await;
    assert!(relay.running(), "the old process ended:\n{}", relay.log());
    assert_eq!(relay.pid(), old_pid);
    assert!(
        relay.log().contains("opening the store again and serving"),
        "{}",
        relay.log()
    );
    more_hooks(&out, 40, "40 hooks after the failed takeover").await;

    // A configuration without a sink entry that still has queued hooks: the
    // new process refuses after it opened the store, and closes it before
    // it says so (the old process then takes the lock back; before, it
    // tried once, found it held and exited, and nothing served).
    sink.set_script(|r| {
        if r.path == "/in/lanes" {
            Reply::Status(500)
        } else {
            Reply::Status(200)
        }
    });
    until("hooks queued for the lanes sink", WAIT, async || {
        (relay.metrics().await["ankusa_queue_pending"] >= 5.0).then_some(())
    })
    .await;
    relay.set_template(&with_sinks(&sink, false));
    let (status, log) = relay.take_over_refused(&[]).await;
    relay.set_template(&template);
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("sink \"lanes\""),
        "the refusal does not name the sink:\n{log}"
    );
    until("the old process serves again", WAIT, async || {
        relay.readyz().await.filter(|(s, _)| *s == 200)
    })
    .await;
    assert!(relay.running(), "the old process ended:\n{}", relay.log());
    sink.set_script(|_| Reply::Status(200));
    more_hooks(&out, 40, "40 hooks after the second failed takeover").await;

    // Other listeners: refused before the old process stops anything.
    let other = template.replace(
        "listeners: {ingest: '{INGEST}'",
        "listeners: {ingest: '127.0.0.1:1'",
    );
    assert_ne!(other, template);
    relay.set_template(&other);
    let (status, log) = relay.take_over_refused(&[]).await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("listeners.ingest is 127.0.0.1:1"), "{log}");
    assert!(
        log.contains(&format!("Process {old_pid} serves on")),
        "{log}"
    );
    relay.set_template(&template);
    more_hooks(&out, 40, "40 more hooks").await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("load task");

    let ids = accepted(&out);
    until("every accepted hook delivered", WAIT, async || {
        let got: BTreeSet<String> = sink.delivered_ids().into_iter().collect();
        ids.iter().all(|id| got.contains(id)).then_some(())
    })
    .await;

    // Nothing serves the data_dir: --takeover says so and exits non-zero.
    relay.sigterm();
    assert!(relay.wait_exit(WAIT).await.success());
    let (status, log) = relay.take_over_refused(&[]).await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("no relay serves this data_dir"), "{log}");
}

/// A relay on the memory store refuses a takeover (it would lose the hooks
/// it holds), and serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_store_refuses_a_takeover() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let mut relay =
        Relay::start(&ordered_and_not(&sink).replace("store: rocksdb", "store: memory")).await;
    let (status, log) = relay.take_over_refused(&[]).await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("node.store is memory"), "{log}");
    let a = post_n(&relay, 1).await;
    assert_eq!(a.status, 200, "{a:?}");
}

/// The processes that hold the RocksDB store's lock (`/proc/locks`, by the
/// `LOCK` file's inode).
fn lock_holders(lock: &std::path::Path) -> BTreeSet<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(lock) else {
        return BTreeSet::new();
    };
    let inode = format!(":{}", m.ino());
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // "1: POSIX  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
            let at = f.iter().position(|x| *x == "WRITE" || *x == "READ")?;
            let (pid, file) = (f.get(at + 1)?, f.get(at + 2)?);
            file.ends_with(&inode).then(|| pid.parse().ok())?
        })
        .collect()
}

/// A small deterministic generator (xorshift): the rounds' choices differ,
/// and a failure names the seed that makes them again.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Whether `c` still runs.
fn alive(c: &mut Child) -> bool {
    c.try_wait().expect("try_wait").is_none()
}

/// Twenty takeovers under load, with a SIGKILL of the old process, of the
/// new one or of neither at a random moment of each handover. Whatever
/// happens, at most one process holds the store's lock at any time, the one
/// that serves afterwards is the one that holds it, nothing acknowledged is
/// lost (every hook answered 200 is delivered), and `ankusa store check` is
/// clean at the end. When both processes are gone, the relay is started
/// again (a restart: the kill took the node down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_takeovers_with_random_kills_lose_nothing() {
    let seed = std::env::var("ANKUSA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_7a6e_0ff5_u64);
    println!("seed {seed} (ANKUSA_TEST_SEED)");
    let mut rng = Rng(seed);
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let mut relay = Relay::start(&ordered_and_not(&sink)).await;
    let lock = relay.data_dir().join("store-rocksdb").join("LOCK");

    // The lock's holders, sampled all along: never two.
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (watching, lock) = (Arc::clone(&watching), lock.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while watching.load(Ordering::SeqCst) {
                let holders = lock_holders(&lock);
                assert!(
                    holders.len() <= 1,
                    "two processes hold the store's lock: {holders:?}"
                );
                most = most.max(holders.len());
                std::thread::sleep(Duration::from_millis(2));
            }
            most
        })
    };
    let (stop, out): (Arc<AtomicBool>, Outcomes) = Default::default();
    let task = load(
        relay.url("/hooks/orders"),
        Arc::clone(&stop),
        Arc::clone(&out),
    );
    let mut restarts = 0;
    for round in 0..20 {
        more_hooks(&out, 10, &format!("round {round}: 10 hooks")).await;
        let (mut old, mut new) = relay.spawn_takeover();
        let victim = rng.below(3);
        tokio::time::sleep(Duration::from_millis(rng.below(1500))).await;
        match victim {
            0 => {
                let _ = old.kill();
            }
            1 => {
                let _ = new.kill();
            }
            _ => {}
        }
        // Settle: one process left serving, or none.
        let deadline = Instant::now() + WAIT;
        let serving = loop {
            let (o, n) = (alive(&mut old), alive(&mut new));
            if !o && !n {
                break None;
            }
            if o != n {
                let pid = if o { old.id() } else { new.id() };
                let ready = relay.readyz().await.is_some_and(|(s, _)| s == 200);
                if ready && lock_holders(&lock) == BTreeSet::from([pid]) {
                    break Some(o);
                }
            }
            assert!(
                Instant::now() < deadline,
                "round {round} (seed {seed}, victim {victim}): old alive {o}, new alive {n}, not settled:\n{}",
                relay.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        match serving {
            Some(true) => {
                let _ = new.wait();
                relay.adopt(old);
            }
            Some(false) => {
                let _ = old.wait();
                relay.adopt(new);
            }
            None => {
                let _ = (old.wait(), new.wait());
                restarts += 1;
                relay.restart().await;
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    task.await.expect("load task");
    let (ids, _, _) = outcomes(&out);
    until("every acknowledged hook delivered", WAIT, async || {
        let got: BTreeSet<String> = sink.delivered_ids().into_iter().collect();
        ids.iter().all(|id| got.contains(id)).then_some(())
    })
    .await;
    relay.sigterm();
    assert!(relay.wait_exit(WAIT).await.success(), "{}", relay.log());
    watching.store(false, Ordering::SeqCst);
    let most = watcher.join().expect("the lock watcher found two holders");
    assert_eq!(most, 1, "the watcher never saw the lock held");
    let (status, report) = store_check(&relay.data_dir(), &[]);
    assert!(
        status.success(),
        "store check after the takeovers:\n{report}"
    );
    println!(
        "{} hooks acknowledged, {restarts} restarts after both processes were killed",
        ids.len()
    );
    assert!(ids.len() >= 200, "only {} hooks acknowledged", ids.len());
}

/// Under systemd (`NOTIFY_SOCKET`, here a datagram socket of the test's own):
/// SIGUSR2 makes the relay start its successor (the same binary and command
/// line, with `--takeover`), which takes over, says `MAINPID=<its pid>` (before
/// the old process exits: the main process's exit would end the service) and
/// then `READY=1`, and serves; the old process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr2_starts_a_successor_that_takes_over_and_says_its_pid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify.sock");
    let sock = tokio::net::UnixDatagram::bind(&path).expect("bind");
    let socket = path.display().to_string();
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let mut relay =
        Relay::start_with_env(&ordered_and_not(&sink), &[("NOTIFY_SOCKET", &socket)]).await;
    let next = async || -> String {
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(WAIT, sock.recv(&mut buf))
            .await
            .expect("a notification within the deadline")
            .expect("recv");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(next().await, "READY=1");
    let old_pid = relay.pid();
    let before = post_n(&relay, 1).await;
    assert_eq!(before.status, 200, "{before:?}");

    // SAFETY: a signal to the relay's own child process.
    assert_eq!(unsafe { libc::kill(old_pid as i32, libc::SIGUSR2) }, 0);
    let said = next().await;
    let new_pid: u32 = said
        .strip_prefix("MAINPID=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("expected MAINPID=<pid>, got {said:?}"));
    // The successor is the old process's child, then init's: stopped by pid.
    struct Successor(u32);
    impl Drop for Successor {
        fn drop(&mut self) {
            // SAFETY: a signal to the successor this test made the relay start.
            unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
        }
    }
    let successor = Successor(new_pid);
    assert_ne!(new_pid, old_pid);
    assert_eq!(
        next().await,
        "READY=1",
        "the successor's READY=1 after its MAINPID="
    );
    let status = relay.wait_exit(WAIT).await;
    assert!(
        status.success(),
        "the old process exited with {status}:\n{}",
        relay.log()
    );
    let log = relay.log();
    assert!(log.contains("SIGUSR2: started a successor"), "{log}");
    assert!(
        log.contains(&format!("takeover done: process {new_pid} serves")),
        "{log}"
    );
    assert!(
        log.contains("takeover: serving"),
        "the successor's lines (the same stdout) do not say it serves:\n{log}"
    );
    // The successor serves the same listeners and store.
    until("the successor ready", WAIT, async || {
        relay.readyz().await.filter(|(s, _)| *s == 200)
    })
    .await;
    let after = post_n(&relay, 2).await;
    assert_eq!(after.status, 200, "{after:?}");
    until("both hooks delivered to both sinks", WAIT, async || {
        let ids = sink.delivered_ids();
        [before.id(), after.id()]
            .iter()
            .all(|id| ids.iter().filter(|x| *x == id).count() >= 2)
            .then_some(())
    })
    .await;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(new_pid as i32, libc::SIGTERM) }, 0);
    until("the successor stopped", WAIT, async || {
        relay.readyz().await.is_none().then_some(())
    })
    .await;
    drop(successor);
}

/// POSTs the hook `{"n": n}` to the source `orders`.
async fn post_n(relay: &Relay, n: u64) -> crate::relay::Answer {
    relay
        .post(
            "/hooks/orders",
            &[("content-type", "application/json")],
            format!("{{\"n\":{n}}}"),
        )
        .await
}

/// `pid` sent `signal`.
fn signal(pid: u32, signal: i32) {
    // SAFETY: a signal to a process this test started.
    assert_eq!(
        unsafe { libc::kill(pid as i32, signal) },
        0,
        "kill({pid}, {signal})"
    );
}

/// What a takeover does not control does not hold it, and a SIGTERM during
/// one ends only the new process:
/// - clients connected to `takeover.sock` that say nothing do not block a
///   takeover (each handshake has its own thread and deadline);
/// - a SIGTERM to the new process while it waits for the old one (paused
///   here with SIGSTOP, so the wait cannot end first) ends the new process
///   with exit 1 and says so, and the old one serves on once resumed (before,
///   the SIGTERM's default action killed the new process and reset the
///   connections it held);
/// - an ingest request whose body never comes does not hold the old
///   process's stop past its 2 s grace: it is closed unanswered (nothing of
///   it was acknowledged) and the takeover completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_is_not_held_by_idle_clients_and_a_sigterm_ends_only_the_new_process() {
    use std::io::{Read, Write};
    let sink = Sink::start(|_| Reply::Status(200)).await;
    let mut relay = Relay::start(&ordered_and_not(&sink)).await;
    let socket = relay.data_dir().join("takeover.sock");
    let _idle: Vec<std::os::unix::net::UnixStream> = (0..3)
        .map(|_| {
            std::os::unix::net::UnixStream::connect(&socket).expect("connect to takeover.sock")
        })
        .collect();

    // SIGTERM to the new process while the old one cannot answer.
    let old_pid = relay.pid();
    signal(old_pid, libc::SIGSTOP);
    let (old, mut new) = relay.spawn_takeover();
    until("the new process asks for the listeners", WAIT, async || {
        relay
            .log()
            .contains("takeover: asking the relay")
            .then_some(())
    })
    .await;
    signal(new.id(), libc::SIGTERM);
    let status = new.wait().expect("wait");
    let log = relay.log();
    assert_eq!(
        status.code(),
        Some(1),
        "the new process ended with {status}:\n{log}"
    );
    assert!(log.contains("interrupted by SIGTERM"), "{log}");
    signal(old_pid, libc::SIGCONT);
    relay.adopt(old);
    // Its log is the current one again.
    relay.forget_last_run();
    let a = post_n(&relay, 1).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(relay.pid(), old_pid);

    // An ingest request whose body never comes, open across the takeover.
    let mut slow = std::net::TcpStream::connect(relay.ingest).expect("connect");
    slow.write_all(
        b"POST /hooks/orders HTTP/1.1\r\nhost: relay\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"n\":",
    )
    .expect("write");
    slow.set_read_timeout(Some(WAIT)).expect("timeout");
    let (status, old_log) = relay.take_over().await;
    assert!(status.success(), "{old_log}");
    assert!(
        old_log.contains("ingest requests still open after the stop's grace period"),
        "{old_log}"
    );
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).contains(" 200 "),
        "the request whose body never came was answered 200: {}",
        String::from_utf8_lossy(&answer)
    );
    let b = post_n(&relay, 2).await;
    assert_eq!(b.status, 200, "{b:?}");
    until("both hooks delivered", WAIT, async || {
        let ids = sink.delivered_ids();
        [a.id(), b.id()]
            .iter()
            .all(|id| ids.contains(id))
            .then_some(())
    })
    .await;
}
