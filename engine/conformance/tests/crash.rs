//! Crash atomicity and durability of the two durable backends.
//!
//! A child process (`crash-child`) commits `Sync` batches in a loop and is killed
//! with SIGKILL at a random moment, `KILLS` times per backend. After every kill
//! the store is opened again and checked: every batch is all or nothing across
//! the five column families, the counter agrees with the batches, and every
//! batch whose commit had returned (the child printed it) is present.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::Rng;

/// At least 20 kills per backend (the crash test of docs/design.md section 2),
/// so that many land between a commit and its acknowledgement (the run prints
/// how many did).
const KILLS: usize = 24;

fn crash_loop(backend: &str, reopen_check: impl Fn(&std::path::Path, Option<i64>) -> i64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rng();
    let mut mid_write_kills = 0;
    let mut total = 0;
    for kill in 0..KILLS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash-child"))
            .arg(backend)
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait until the child has opened the store, then let it commit for a
        // random time before the kill.
        let open = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("child did not open the store");
        assert!(open.starts_with("open "), "{open}");
        let started_at: i64 = open[5..].parse().unwrap();
        assert_eq!(
            started_at, total,
            "the child resumed at {started_at}, expected {total}"
        );
        let deadline = Instant::now() + Duration::from_millis(rng.random_range(5..120));
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        reader.join().unwrap();
        let acked: Vec<i64> = rx.try_iter().map(|l| l.parse().unwrap()).collect();
        let last_acked = acked.last().copied();
        let n = reopen_check(dir.path(), last_acked);
        if n > started_at + acked.len() as i64 {
            // The kill landed after a commit and before its acknowledgement.
            mid_write_kills += 1;
        }
        total = n;
        eprintln!(
            "{backend}: kill {kill}: {} acked this run, store holds {n}",
            acked.len()
        );
    }
    eprintln!(
        "{backend}: {KILLS} kills, {total} batches, {mid_write_kills} kills between a commit and its ack"
    );
    assert!(
        total > KILLS as i64,
        "the child made almost no progress: {total} batches"
    );
}

#[test]
fn rocksdb_survives_sigkill() {
    crash_loop("rocksdb", |dir, acked| {
        let kv = ankusa_engine_conformance::backends::rocksdb(dir);
        ankusa_engine_conformance::check_crashed_store(&kv, acked)
    });
}

#[test]
fn fjall_survives_sigkill() {
    crash_loop("fjall", |dir, acked| {
        let kv = ankusa_engine_conformance::backends::fjall(dir);
        ankusa_engine_conformance::check_crashed_store(&kv, acked)
    });
}
