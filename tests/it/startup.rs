//! Start-up refusals: a port in use refuses the start and creates no store.

use std::time::Duration;

use crate::keyed::stop;
use crate::relay::{Relay, config};
use crate::sink::Sink;

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(90);

/// A port in use refuses the start before the store is opened: the error
/// names `listeners.ingest`, and no new, empty store is left behind (a new
/// user's report: the store was created, then the bind failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_refuses_the_start_and_creates_no_store() {
    let sink = Sink::ok().await;
    let yaml = config(
        "rocksdb",
        &format!(
            "\nsources:\n  - name: s\n    sinks: [{{type: http, url: '{}'}}]\n",
            sink.url()
        ),
    );
    let mut relay = Relay::start(&yaml).await;
    stop(&mut relay).await;
    std::fs::remove_dir_all(relay.data_dir()).expect("remove the data_dir");
    let ingest = relay
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let _taken = std::net::TcpListener::bind(&ingest).expect("hold the relay's ingest port");
    let (status, log) = relay.restart_refused().await;
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains(&format!("listeners.ingest: cannot bind {ingest}")),
        "{log}"
    );
    assert!(
        !relay.data_dir().exists(),
        "a refused start made {}:\n{log}",
        relay.data_dir().display()
    );
}
