//! Online backup (README, "Backing up a running relay"; docs/design.md
//! section 8, "Online backup"): `ankusa store backup FILE` of a relay that
//! takes hooks meanwhile gives a dump that `store import` loads into a store
//! that `store check` finds clean, holding every hook acknowledged before the
//! backup began; no hook is refused while it runs.

use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::admin::cli;
use crate::relay::{Outcomes, Relay, acked, config, load, run_cli};
use crate::sink::{Reply, Sink, until};

const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_imports_into_a_clean_store_with_every_earlier_hook() {
    let sink = Sink::start(|_| Reply::Status(200)).await;
    // The second sink entry is paused: its rows stay pending, so the dump
    // holds queued work, lanes and counters, not only delivered hooks.
    let relay = Relay::start(&config(
        "rocksdb",
        &format!(
            "sources:\n  - name: s\n    sinks:\n      - {{type: http, url: '{url}'}}\n      - {{type: http, name: held, url: '{url}', paused: true, ordered: true, ordering_key: {{header: x-entity-id}}}}\n",
            url = sink.url()
        ),
    ))
    .await;
    let (stop, out): (Arc<AtomicBool>, Outcomes) = Default::default();
    let task = load(relay.url("/hooks/s"), Arc::clone(&stop), Arc::clone(&out));
    until("200 hooks before the backup", WAIT, async || {
        (acked(&out) >= 200).then_some(())
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("running.dump");
    let before = acked(&out);
    let admin = format!("http://{}", relay.admin);
    let (code, stdout, stderr) = tokio::task::block_in_place(|| {
        cli(
            &[
                "store",
                "backup",
                "--admin",
                &admin,
                dump.to_str().expect("utf-8"),
            ],
            None,
        )
    });
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("backed up") && stdout.contains("origin rocksdb"),
        "{stdout}"
    );
    until("100 hooks after the backup", WAIT, async || {
        (acked(&out) >= before + 100).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("load");
    let outcomes = out.lock().expect("lock").clone();
    let failed: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "hooks not accepted while the backup ran: {failed:?}"
    );

    // A second backup to the same name is refused; the file stays.
    let len = std::fs::metadata(&dump).expect("dump").len();
    let (code, _, stderr) = tokio::task::block_in_place(|| {
        cli(
            &[
                "store",
                "backup",
                "--admin",
                &admin,
                dump.to_str().expect("utf-8"),
            ],
            None,
        )
    });
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("exists"), "{stderr}");
    assert_eq!(std::fs::metadata(&dump).expect("dump").len(), len);

    let restored = dir.path().join("restored");
    let (status, out) = run_cli(
        &[
            OsStr::new("store"),
            OsStr::new("import"),
            dump.as_os_str(),
            restored.as_os_str(),
            OsStr::new("--store"),
            OsStr::new("fjall"),
        ],
        dir.path(),
    );
    assert!(status.success(), "{out}");
    let (status, out) = crate::store::store_check(&restored, &[]);
    assert_eq!(status.code(), Some(0), "{out}");
    // "...: clean (1 tenant, N hooks; ..."
    let hooks: usize = out
        .split(" hooks;")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no hook count in {out}"));
    assert!(
        hooks >= before,
        "the backup holds {hooks} hooks; {before} were acknowledged before it began: {out}"
    );
}
