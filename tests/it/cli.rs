//! The operator's CLI: JSON output, drops refused without `--yes`, and its
//! exit codes.

use std::time::Duration;

use serde_json::Value;

use crate::admin::{Admin, cli, two_sources};
use crate::relay::{BIN, Relay};
use crate::sink::{Reply, Sink, until};

const LONG: Duration = Duration::from_secs(120);

/// The CLI: `--json` parses, tables print, a drop without `--yes` is refused
/// and changes nothing, and the exit codes say what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_json_refuses_drops_without_yes_and_exits_with_its_codes() {
    const TOKEN: &str = "cli-token-8e2f4a7b";
    let sink = Sink::start(|_| Reply::Status(400)).await;
    let yaml = two_sources(&sink, "memory", "").replace(
        "listeners: {ingest: '{INGEST}', admin: '{ADMIN}'}",
        &format!("listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}', admin_token: '{TOKEN}'}}"),
    );
    let relay = Relay::start(&yaml).await;
    let api = Admin::new(&relay, Some(TOKEN));
    let id = relay.post("/hooks/spare", &[], "{\"i\":1}").await.id();
    until("the hook dead", LONG, async || {
        (api.tenant("other").await["counters"]["dead"] == 1).then_some(())
    })
    .await;
    let admin = format!("http://{}", relay.admin);
    let a = admin.as_str();

    let (code, out, err) = cli(&["tenants", "--admin", a, "--json"], Some(TOKEN));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("tenants --json is JSON");
    let other = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|t| t["name"] == "other")
        .expect("tenant other")
        .clone();
    assert_eq!(other["counters"]["dead"], 1);

    let (code, out, _) = cli(
        &["dlq", "list", "--admin", a, "--json", "--tenant", "other"],
        Some(TOKEN),
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).expect("dlq list --json");
    assert_eq!(v["items"][0]["id"], "other.1.0");
    assert_eq!(v["items"][0]["idempotency_key"].as_str(), Some(id.as_str()));
    let (code, out, _) = cli(
        &["dlq", "list", "--admin", a, "--reason", "permanent"],
        Some(TOKEN),
    );
    assert_eq!(code, 0);
    assert!(out.contains("other.1.0") && out.contains("REASON"), "{out}");
    let (code, out, _) = cli(&["hooks", "show", &id, "--admin", a, "--json"], Some(TOKEN));
    assert_eq!(code, 0);
    let hook: Value = serde_json::from_str(&out).expect("hooks show --json");
    // The same hook by <tenant>.<seq> and by its row id.
    for by in ["other.1", "other.1.0"] {
        let (code, same, err) = cli(&["hooks", "show", by, "--admin", a, "--json"], Some(TOKEN));
        assert_eq!(code, 0, "{by}: {err}");
        assert_eq!(
            serde_json::from_str::<Value>(&same).expect("hooks show --json"),
            hook,
            "{by}"
        );
    }
    assert_eq!(
        cli(&["hooks", "show", "other.x", "--admin", a], Some(TOKEN)).0,
        2
    );
    assert_eq!(hook["seq"], 1);
    // Dead on its first attempt's 400: that attempt is counted and its error
    // kept (it showed attempts 0 and no error).
    let row = &hook["deliveries"][0];
    assert_eq!(
        (row["state"].as_str(), row["attempts"].as_u64()),
        (Some("dead"), Some(1)),
        "{row}"
    );
    assert!(
        row["last_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("permanent: HTTP 400")),
        "{row}"
    );
    let (code, out, _) = cli(&["sources", "--admin", a], Some(TOKEN));
    assert_eq!(code, 0);
    // The address from ANKUSA_ADMIN, as from --admin.
    let by_env = std::process::Command::new(BIN)
        .args(["sources"])
        .env("ANKUSA_ADMIN", a)
        .env("ANKUSA_ADMIN_TOKEN", TOKEN)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()
        .expect("run ankusa");
    assert_eq!(
        by_env.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&by_env.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&by_env.stdout), out);
    assert!(
        out.contains("orders") && out.contains("web#0") && out.contains("header:x-entity-id"),
        "{out}"
    );

    // Destructive without --yes: refused (2), nothing dropped.
    for args in [
        vec!["dlq", "drop", "other.1.0", "--admin", a],
        vec!["dlq", "drop", "--all", "--admin", a],
    ] {
        let (code, _, err) = cli(&args, Some(TOKEN));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("--yes"), "{err}");
    }
    assert_eq!(api.dead("").await.len(), 1);
    // No token, a wrong token: 4. Nothing listening: 3. Usage: 2.
    assert_eq!(cli(&["tenants", "--admin", a], None).0, 4);
    assert_eq!(
        cli(&["dlq", "revive", "other.1.0", "--admin", a], Some("nope")).0,
        4
    );
    assert_eq!(
        api.dead("").await.len(),
        1,
        "an unauthorized revive changed something"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    assert_eq!(
        cli(
            &["tenants", "--admin", &format!("http://{closed}")],
            Some(TOKEN)
        )
        .0,
        3
    );
    assert_eq!(cli(&["dlq", "revive", "--admin", a], Some(TOKEN)).0, 2);
    assert_eq!(cli(&["jobs", "cancel", "x"], Some(TOKEN)).0, 2);
    // An empty filter value, an address that is not http(s), a token HTTP
    // cannot carry: usage errors (2), nothing sent (break-it pass).
    assert_eq!(
        cli(
            &["dlq", "drop", "--tenant", "", "--yes", "--admin", a],
            Some(TOKEN)
        )
        .0,
        2
    );
    assert_eq!(
        cli(&["tenants", "--admin", "ftp://127.0.0.1:1"], Some(TOKEN)).0,
        2
    );
    assert_eq!(cli(&["tenants", "--admin", a], Some("cli-token\n")).0, 2);
    // What is not a row id never leaves the CLI (`../jobs/..` reaches no other
    // route; the API's own refusal is tested on the API).
    for bad in [
        "../jobs/1/cancel#",
        "other.1",
        "other.x.0",
        "other.01.0",
        "",
        "other.99999999999999999999.0",
        "other.1.65536",
    ] {
        let (code, _, err) = cli(&["dlq", "revive", bad, "--admin", a], Some(TOKEN));
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(err.contains("not a row id"), "{err}");
    }
    assert_eq!(api.dead("").await.len(), 1);
    // The API refuses: 1.
    let (code, _, err) = cli(&["dlq", "revive", "other.9.0", "--admin", a], Some(TOKEN));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("409") && err.contains("not in the dead-letter queue"),
        "{err}"
    );

    // Drop by filter as a job, waited for: 0, and the row is gone.
    let (code, out, err) = cli(
        &[
            "dlq", "drop", "--tenant", "other", "--yes", "--wait", "--json", "--admin", a,
        ],
        Some(TOKEN),
    );
    assert_eq!(code, 0, "{err}");
    let job: Value = serde_json::from_str(&out).expect("job --json");
    assert_eq!(
        (
            job["kind"].as_str(),
            job["state"].as_str(),
            job["done"].as_u64()
        ),
        (Some("drop"), Some("done"), Some(1))
    );
    assert_eq!(api.dead("").await.len(), 0);
    let t = api.tenant("other").await;
    assert_eq!(
        (
            t["counters"]["dead"].as_i64(),
            t["counters"]["dead_bytes"].as_i64()
        ),
        (Some(0), Some(0))
    );
    // The same filter again matches nothing: done with 0, and it says so
    // (README "Filters"; a new user saw only the table row).
    let (code, out, err) = cli(
        &[
            "dlq", "drop", "--tenant", "other", "--yes", "--wait", "--admin", a,
        ],
        Some(TOKEN),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("drop") && out.contains("done"), "{out}");
    assert!(
        err.contains("matched nothing") && err.contains("--reason is a prefix"),
        "{err}"
    );
    let (code, _, _) = cli(&["hooks", "show", &id, "--admin", a], Some(TOKEN));
    assert_eq!(code, 1, "the dropped hook's envelope is gone");
    let (code, out, _) = cli(&["jobs", "--admin", a], Some(TOKEN));
    assert_eq!(code, 0);
    assert!(out.contains("drop") && out.contains("done"), "{out}");
    let (code, _, err) = cli(&["jobs", "cancel", "1", "--admin", a], Some(TOKEN));
    assert_eq!(code, 1, "cancel of a finished job: {err}");
    // A token that is not UTF-8 is a usage error, not an unset token (4).
    let odd = std::process::Command::new(BIN)
        .args(["tenants", "--admin", a])
        .env(
            "ANKUSA_ADMIN_TOKEN",
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"t\xffk"),
        )
        .output()
        .expect("run ankusa");
    assert_eq!(
        odd.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&odd.stderr)
    );
    assert!(
        String::from_utf8_lossy(&odd.stderr).contains("ANKUSA_ADMIN_TOKEN has"),
        "{}",
        String::from_utf8_lossy(&odd.stderr)
    );
}
