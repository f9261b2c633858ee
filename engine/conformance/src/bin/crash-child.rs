//! The child process of the crash test (`tests/crash.rs`).
//!
//! `crash-child BACKEND DIR` opens the store, finds how many batches it already
//! holds, then commits batch after batch with `Durability::Sync` (or a Buffered
//! write and `Kv::sync`, every other batch) and prints each batch's number on
//! stdout once it is durable (its acknowledgement),
//! until it is killed or has written `MAX_BATCHES`.
//!
//! Batch `i` puts `crash/<i>` in every column family (256 bytes of `i % 251`)
//! and adds 1 to the counter `crash/batches`, so a reader can tell a whole batch
//! from a torn one.

use std::io::Write;
use std::path::Path;

use ankusa_engine::{Batch, Cf, Durability, Kv};
use ankusa_engine_conformance::backends;

const MAX_BATCHES: i64 = 1_000_000;

fn run<K: Kv>(kv: K) {
    let mut next = kv
        .counter(ankusa_engine_conformance::CRASH_COUNTER)
        .expect("read counter");
    let mut out = std::io::stdout().lock();
    writeln!(out, "open {next}").expect("stdout");
    out.flush().expect("stdout");
    while next < MAX_BATCHES {
        let mut w = Batch::new();
        for cf in Cf::ALL {
            w.put(
                cf,
                ankusa_engine_conformance::crash_key(next),
                vec![(next % 251) as u8; 256],
            );
        }
        w.counter_add(ankusa_engine_conformance::CRASH_COUNTER, 1);
        // Odd batches take the split form the Writer uses (write Buffered,
        // then `Kv::sync`), even ones `Durability::Sync`: both acknowledge
        // only once durable, and the check below holds for both.
        if next % 2 == 0 {
            kv.write(w, Durability::Sync).expect("commit");
        } else {
            kv.write(w, Durability::Buffered).expect("commit");
            kv.sync().expect("sync");
        }
        writeln!(out, "{next}").expect("stdout");
        out.flush().expect("stdout");
        next += 1;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, backend, dir] = args.as_slice() else {
        eprintln!("usage: crash-child rocksdb|fjall DIR");
        std::process::exit(2);
    };
    let dir = Path::new(dir);
    match backend.as_str() {
        "rocksdb" => run(backends::rocksdb(dir)),
        "fjall" => run(backends::fjall(dir)),
        other => {
            eprintln!("crash-child: unknown backend {other:?}");
            std::process::exit(2);
        }
    }
}
