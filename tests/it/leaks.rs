//! Secrets never leak (docs/design.md section 7, "Secrets in output"): a run of
//! the real binary whose HTTP sink URL carries `user:password@` and a
//! `?token=`: nothing it prints (the start-up banner, the log lines of a failed
//! delivery, shutdown) nor `check-config` shows the password or the token.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use crate::relay::{Relay, config, run_cli};

const PASSWORD: &str = "Pa55w0rd-LEAK";
const TOKEN: &str = "T0ken-LEAK";
const KEY: &str = "K3y-LEAK";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_url_secret_appears_in_the_output_of_a_run() {
    // Port 9 (discard) is closed on loopback: every delivery fails and is
    // retried, so the failure's log lines are in the output too.
    let url =
        format!("http://relay-user:{PASSWORD}@127.0.0.1:9/hooks?token={TOKEN}&v=1&API_KEY={KEY}");
    let template = config(
        "rocksdb",
        &format!(
            "sources:\n  - name: billing\n    tenant: default\n    sinks:\n      - {{type: http, name: web, url: '{url}', timeout_ms: 2000, retry: {{base_ms: 50, max_ms: 200}}}}\n"
        ),
    );
    let mut relay = Relay::start(&template).await;
    let answer = relay
        .post(
            "/hooks/billing",
            &[("content-type", "application/json")],
            br#"{"n":1}"#.to_vec(),
        )
        .await;
    answer.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while relay.metric("ankusa_dispatch_retries_total").await < 2.0 {
        assert!(
            Instant::now() < deadline,
            "no retry of the failing delivery within 60 s:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    relay.sigterm();
    let status = relay.wait_exit(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}\n{}", relay.log());
    let log = relay.log();
    // The banner shows the sink, its credentials and secret parameters hidden.
    assert!(
        log.contains("relay-user:***@127.0.0.1:9/hooks?token=***&v=1&API_KEY=***"),
        "the banner does not show the redacted URL:\n{log}"
    );
    for secret in [PASSWORD, TOKEN, KEY] {
        assert!(
            !log.contains(secret),
            "{secret} is in the output of serve:\n{log}"
        );
    }

    // check-config on the same file.
    let file = relay.dir.path().join("relay.yaml");
    let (status, out) = run_cli(
        &[OsStr::new("check-config"), file.as_os_str()],
        relay.dir.path(),
    );
    assert!(status.success(), "{out}");
    for secret in [PASSWORD, TOKEN, KEY] {
        assert!(
            !out.contains(secret),
            "{secret} is in the output of check-config:\n{out}"
        );
    }

    // A refused config that names the URL: the error hides them too.
    let bad = template.replace("url: 'http://", "url: 'htp://");
    let bad = bad
        .replace("{INGEST}", "127.0.0.1:0")
        .replace("{ADMIN}", "127.0.0.1:0")
        .replace("{DATA}", &relay.data_dir().display().to_string());
    let file = relay.dir.path().join("bad.yaml");
    std::fs::write(&file, &bad).expect("write");
    let (status, out) = run_cli(
        &[OsStr::new("check-config"), file.as_os_str()],
        relay.dir.path(),
    );
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("source \"billing\", sink \"web\" (http): option \"url\": \"htp://relay-user:***@127.0.0.1:9/hooks?token=***&v=1&API_KEY=***\" is not an http:// or https:// URL"),
        "{out}"
    );
    for secret in [PASSWORD, TOKEN, KEY] {
        assert!(
            !out.contains(secret),
            "{secret} is in the error of check-config:\n{out}"
        );
    }

    // An http URL the parser refuses (a port out of range): its error names
    // it masked too (found by a break-it pass: it was echoed whole).
    let bad = template.replace("127.0.0.1:9/hooks", "127.0.0.1:99999/hooks");
    let bad = bad
        .replace("{INGEST}", "127.0.0.1:0")
        .replace("{ADMIN}", "127.0.0.1:0")
        .replace("{DATA}", &relay.data_dir().display().to_string());
    std::fs::write(&file, &bad).expect("write");
    let (status, out) = run_cli(
        &[OsStr::new("check-config"), file.as_os_str()],
        relay.dir.path(),
    );
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("relay-user:***@127.0.0.1:99999/hooks?token=***&v=1&API_KEY=*** is not a URL")
            || out.contains("`http://relay-user:***@127.0.0.1:99999/hooks?token=***&v=1&API_KEY=***` is not a URL"),
        "{out}"
    );
    for secret in [PASSWORD, TOKEN, KEY] {
        assert!(
            !out.contains(secret),
            "{secret} is in the error of check-config:\n{out}"
        );
    }
}
