//! The operator console (docs/design.md section 5, "Operator console") in a
//! real browser: headless Chromium driven through chromedriver (W3C
//! WebDriver, [`crate::webdriver`]) against the real relay with an admin
//! token. A hook
//! is dead-lettered (the sink answers 422), the console asks for the token
//! (a wrong one is refused and asked again), shows the tenant's counters as
//! the API has them, the sources with a runtime pause whose reason holds
//! markup (shown as text), the dead letter, a quarantined hook, a replay
//! job and live rates from `/metrics`; a click on the dead letter's Attempts
//! button shows its attempt log (the 422), and one on its Revive button (the
//! sink now answers 200) delivers the hook.
//!
//! Without `chromium` and `chromedriver` on PATH the test prints a banner
//! saying it did not run and passes (`.ci/run` installs both:
//! `apt-get install -y chromium chromium-driver`). With
//! `ANKUSA_CONSOLE_SCREENSHOT=path` it writes a PNG of the console with its
//! data to `path` (docs/console.png is one).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use serde_json::{Value, json};

use crate::admin::Admin;
use crate::relay::{Relay, client, config};
use crate::sink::{Reply, Sink, until};
use crate::webdriver::Session;

const TOKEN: &str = "console-test-token-5f1c9a";
/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(120);
const JSON: (&str, &str) = ("content-type", "application/json");
/// The pause reason the sources table must show as text, not as markup.
const MARKUP_REASON: &str = "<b>review</b> of the new provider <img src=x>";

/// `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// chromedriver on a free loopback port, killed (and reaped) on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    async fn start(bin: &Path, log: &Path) -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let out = std::fs::File::create(log).expect("chromedriver log");
        let child = Command::new(bin)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("run chromedriver");
        let mut d = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = client();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = d.child.try_wait().expect("try_wait") {
                panic!(
                    "chromedriver exited with {status}:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            if let Ok(r) = http.get(format!("{}/status", d.url)).send().await
                && let Ok(body) = r.text().await
                && serde_json::from_str::<Value>(&body).is_ok_and(|v| v["value"]["ready"] == true)
            {
                return d;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver not ready after {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 100 ms until it returns `Some`, or panics naming `what`
/// (and the last value seen) after [`WAIT`].
async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out after {WAIT:?} waiting for {what}; last seen: {last}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of the first element `selector` matches (`None`: no such
/// element), read in the page in one step (the console replaces its tables
/// at each refresh, so a held element reference may go stale).
async fn text(b: &Session, selector: &str) -> Option<String> {
    let v = b
        .execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(selector)],
        )
        .await
        .unwrap_or_else(|e| panic!("reading {selector}: {e}"));
    v.as_str().map(|s| s.trim().to_owned())
}

/// How many elements `selector` matches.
async fn count(b: &Session, selector: &str) -> u64 {
    let v = b
        .execute(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(selector)],
        )
        .await
        .unwrap_or_else(|e| panic!("counting {selector}: {e}"));
    v.as_u64().expect("a count")
}

/// Clicks the Revive `button`, waits until the hook `poison` reaches `sink`
/// and returns the page's notice about `row`. The table is redrawn at each
/// refresh: a reference gone stale is looked up again.
async fn revive(b: &Session, button: &str, sink: &Sink, poison: &str, row: &str) -> String {
    eventually("a click on Revive", async || {
        b.click(&b.find(button).await?).await
    })
    .await;
    until("the revived hook delivered", WAIT, async || {
        sink.delivered()
            .iter()
            .any(|r| r.id() == poison)
            .then_some(())
    })
    .await;
    eventually("the revive's notice", async || {
        match text(b, "#notice:not([hidden])").await {
            Some(t) if t.starts_with(&format!("Revived {row}")) => Ok(t),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// Types `value` into the token field and submits the form (a real click).
async fn sign_in(b: &Session, value: &str) {
    let input = eventually("the token field", async || {
        b.find("#login:not([hidden]) #token").await
    })
    .await;
    b.clear(&input).await.expect("clear the token field");
    b.send_keys(&input, value).await.expect("type the token");
    let submit = b.find("#login-submit").await.expect("the submit button");
    b.click(&submit).await.expect("submit");
}

fn relay_config(sink: &Sink) -> String {
    config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
tenants: [{{name: acme, max_pending: 10000}}]
sources:
  - name: orders
    tenant: acme
    sinks:
      - {{type: http, name: web, url: '{url}', timeout_ms: 60000, ordered: true, ordering_key: {{header: x-entity-id}}}}
  - name: billing
    tenant: acme
    sinks:
      - {{type: http, name: ledger, url: '{url}', timeout_ms: 60000}}
  - name: review
    tenant: acme
    quarantine: true
    sinks:
      - {{type: http, name: web, url: '{url}', timeout_ms: 60000}}
",
            url = sink.url()
        ),
    )
    .replace(
        "listeners: {ingest: '{INGEST}', admin: '{ADMIN}'}",
        &format!("listeners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}', admin_token: '{TOKEN}'}}"),
    )
}

/// Chromium and chromedriver, or a banner on stderr saying the console test
/// `name` did not run.
fn browser_tools(name: &str) -> Option<(PathBuf, PathBuf)> {
    if let (Some(chromium), Some(chromedriver)) = (on_path("chromium"), on_path("chromedriver")) {
        return Some((chromium, chromedriver));
    }
    use std::io::Write as _;
    let missing = |tool: &str| {
        if on_path(tool).is_some() {
            "found"
        } else {
            "MISSING"
        }
    };
    let _ = writeln!(
        std::io::stderr(),
        "\n##########################  THE CONSOLE TEST DID NOT RUN  ##########################\n\
         console::{name} needs Chromium and chromedriver on PATH\n\
         (chromium: {}, chromedriver: {}). Install them (Debian; .ci/run does):\n\
         \x20   apt-get install -y chromium chromium-driver\n\
         This run has NOT tested the operator console.\n\
         #####################################################################################\n",
        missing("chromium"),
        missing("chromedriver"),
    );
    None
}

/// A headless Chromium session on a new empty profile under `profile`.
async fn browser(chromium: &Path, chromedriver: &Path, profile: &Path) -> (Driver, Session) {
    let driver = Driver::start(chromedriver, &profile.join("chromedriver.log")).await;
    let user_data = profile.join("user-data");
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1400,1000", "--hide-scrollbars",
                format!("--user-data-dir={}", user_data.display()),
            ],
        },
    });
    let session = Session::start(&driver.url, caps)
        .await
        .expect("a WebDriver session");
    (driver, session)
}

/// A relay without `admin_token` (loopback only) refuses requests from other
/// sites' pages and rebound host names (tests/it/admin_access.rs): its own console,
/// at `127.0.0.1` and at `localhost`, opens at once without the token form
/// and its Revive (a POST with the page's own Origin) goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_of_a_relay_without_a_token_opens_at_once_and_revives() {
    let Some((chromium, chromedriver)) =
        browser_tools("the_console_of_a_relay_without_a_token_opens_at_once_and_revives")
    else {
        return;
    };
    let fixed = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fixed);
    let sink = Sink::start(move |_| {
        if f.load(Ordering::SeqCst) {
            Reply::Status(200)
        } else {
            Reply::Status(422)
        }
    })
    .await;
    let yaml = relay_config(&sink).replace(&format!(", admin_token: '{TOKEN}'"), "");
    let relay = Relay::start(&yaml).await;
    let api = Admin::new(&relay, None);
    let poison = relay
        .post("/hooks/billing", &[JSON], "{\"poison\":true}")
        .await
        .id();
    until("the hook dead-lettered", WAIT, async || {
        (api.tenant("acme").await["counters"]["dead"] == 1).then_some(())
    })
    .await;
    let row = api.dead("").await[0]["id"].as_str().expect("id").to_owned();
    fixed.store(true, Ordering::SeqCst);

    let profile = tempfile::tempdir().expect("profile dir");
    let (driver, browser) = browser(&chromium, &chromedriver, profile.path()).await;
    let b = &browser;
    let outcome = std::panic::AssertUnwindSafe(async {
        for host in [
            format!("localhost:{}", relay.admin.port()),
            relay.admin.to_string(),
        ] {
            b.goto(&format!("http://{host}/console"))
                .await
                .expect("open the console");
            let dead = eventually("the dead letter shown", async || {
                match text(
                    b,
                    &format!("#dead tr[data-id='{row}'] td[data-field='source']"),
                )
                .await
                {
                    Some(t) if t == "billing" => Ok(t),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
            assert_eq!(dead, "billing");
            assert_eq!(
                count(b, "#login:not([hidden])").await,
                0,
                "{host}: the token form on a relay without a token"
            );
            assert_eq!(
                count(b, "#error:not([hidden])").await,
                0,
                "{host}: {:?}",
                text(b, "#error").await
            );
        }
        let notice = revive(
            b,
            &format!("#dead tr[data-id='{row}'] button[data-action='revive']"),
            &sink,
            &poison,
            &row,
        )
        .await;
        assert_eq!(notice, format!("Revived {row}: due now."));
    })
    .catch_unwind()
    .await;
    let _ = browser.close().await;
    drop(driver);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_relay_and_revives_a_dead_letter_in_a_real_browser() {
    let Some((chromium, chromedriver)) =
        browser_tools("the_console_shows_the_relay_and_revives_a_dead_letter_in_a_real_browser")
    else {
        return;
    };

    // The sink refuses the poison hook (422: permanent) until `fixed`.
    let fixed = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&fixed);
    let sink = Sink::start(move |r| {
        if r.json()["poison"] == true && !f.load(Ordering::SeqCst) {
            Reply::Status(422)
        } else {
            Reply::Status(200)
        }
    })
    .await;
    let relay = Relay::start(&relay_config(&sink)).await;
    let api = Admin::new(&relay, Some(TOKEN));

    // The console's files need no token and carry the strict policy.
    let http = client();
    for (path, kind) in [
        ("/console", "text/html"),
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let r = http
            .get(format!("http://{}{path}", relay.admin))
            .send()
            .await
            .expect(path);
        assert_eq!(r.status(), 200, "{path} without a token");
        let h = r.headers();
        assert!(
            h["content-type"].to_str().expect("ascii").starts_with(kind),
            "{path}: {h:?}"
        );
        let csp = h["content-security-policy"].to_str().expect("ascii");
        assert!(
            csp.starts_with("default-src 'self';") && !csp.contains("unsafe"),
            "{path}: {csp}"
        );
    }
    let r = http
        .get(format!("http://{}/v1/tenants", relay.admin))
        .send()
        .await
        .expect("tenants");
    assert_eq!(r.status(), 401, "the API itself still needs the token");

    // Three hooks delivered, then a replay of them (a job); the poison hook
    // dead-lettered; one hook in quarantine; the ledger paused at run time.
    let mut ids = Vec::new();
    for i in 0..3 {
        let key = format!("cus_{i}");
        ids.push(
            relay
                .post(
                    "/hooks/orders",
                    &[JSON, ("x-entity-id", &key)],
                    format!("{{\"i\":{i}}}"),
                )
                .await
                .id(),
        );
    }
    until("three hooks delivered", WAIT, async || {
        (sink.delivered().len() == 3).then_some(())
    })
    .await;
    let received = |id: &str| {
        let api = &api;
        let id = id.to_owned();
        async move {
            api.ok(
                "GET",
                "/v1/hooks/{idempotency_key}",
                &format!("/v1/hooks/{id}"),
                None,
            )
            .await["received_at_ms"]
                .as_u64()
                .expect("received_at_ms")
        }
    };
    let since = received(&ids[0]).await;
    let until_ms = received(&ids[2]).await + 1;
    until("the clock past the third hook", WAIT, async || {
        (now_ms() > until_ms).then_some(())
    })
    .await;
    let poison = relay
        .post(
            "/hooks/orders",
            &[JSON, ("x-entity-id", "cus_9")],
            "{\"poison\":true}",
        )
        .await
        .id();
    until("the poison hook dead-lettered", WAIT, async || {
        (api.tenant("acme").await["counters"]["dead"] == 1).then_some(())
    })
    .await;
    let dead = api.dead("").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let row = dead[0]["id"].as_str().expect("id").to_owned();
    let reason = dead[0]["reason"].as_str().expect("reason").to_owned();
    assert!(reason.starts_with("permanent: HTTP 422"), "{reason}");
    let job = api.ok("POST", "/v1/jobs", "/v1/jobs", Some(json!({"kind": "replay", "filter": {"source": "orders", "since": since, "until": until_ms}}))).await;
    let job_id = job["id"].as_u64().expect("job id");
    until("the replay done", WAIT, async || {
        (api.job(job_id).await["state"] == "done").then_some(())
    })
    .await;
    until("the replayed hooks delivered", WAIT, async || {
        (sink.delivered().len() == 6).then_some(())
    })
    .await;
    let held = relay.post("/hooks/review", &[JSON], "{\"review\":1}").await;
    assert_eq!(held.status, 202, "{held:?}");
    let listed = api
        .ok(
            "GET",
            "/v1/tenants/{tenant}/quarantine",
            "/v1/tenants/acme/quarantine",
            None,
        )
        .await;
    let held_id = listed["items"][0]["id"]
        .as_str()
        .expect("the quarantined hook's id")
        .to_owned();
    assert_eq!(
        listed["items"][0]["idempotency_key"], held.body["id"],
        "{listed}"
    );
    api.ok(
        "POST",
        "/v1/sources/{source}/sinks/{sink}/pause",
        "/v1/sources/billing/sinks/ledger/pause",
        Some(json!({"reason": "ledger maintenance"})),
    )
    .await;

    // The browser: a new empty profile, no network but loopback.
    let profile = tempfile::tempdir().expect("profile dir");
    let (driver, browser) = browser(&chromium, &chromedriver, profile.path()).await;
    let console = format!("http://{}/console", relay.admin);
    let b = &browser;
    let outcome = std::panic::AssertUnwindSafe(async {
        b.goto(&console).await.expect("open the console");
        // The stylesheet applied under the policy (the header's colour), and
        // the script ran: it asks for the token.
        let bg = b
            .execute(
                "return getComputedStyle(document.querySelector('.bar')).backgroundColor;",
                vec![],
            )
            .await
            .expect("style");
        assert_eq!(bg, json!("rgb(23, 32, 43)"), "console.css did not apply");
        eventually("the token form", async || {
            b.find("#login:not([hidden])").await
        })
        .await;

        // A wrong token: refused (401), the form asks again.
        sign_in(b, "not-the-token").await;
        let refused = eventually("the wrong token refused", async || {
            match text(b, "#login-error:not([hidden])").await {
                Some(t) if t.contains("refused") && t.contains("401") => Ok(t),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert!(refused.contains("the bearer token is wrong"), "{refused}");
        assert_eq!(
            count(b, "#main:not([hidden])").await,
            0,
            "the console showed data without the token"
        );

        sign_in(b, TOKEN).await;
        let token = b
            .execute(
                "return sessionStorage.getItem('ankusa.admin_token');",
                vec![],
            )
            .await
            .expect("sessionStorage");
        assert_eq!(token, json!(TOKEN));

        // The tenant's counters, as the API has them.
        let fields = [
            "pending",
            "in_flight",
            "dead",
            "quarantined",
            "delivered_total",
            "dead_lettered_total",
            "retries_total",
            "lanes",
            "lanes_blocked",
            "lanes_held",
        ];
        let shown = eventually("the tenant's counters equal the API's", async || {
            let t = api.tenant("acme").await;
            let mut got = Vec::new();
            for f in fields {
                got.push((
                    f,
                    text(b, &format!("tr[data-tenant='acme'] td[data-field='{f}']")).await,
                    t["counters"][f].to_string(),
                ));
            }
            if got
                .iter()
                .all(|(_, page, api)| page.as_deref() == Some(api.as_str()))
            {
                Ok(got)
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await;
        let at = |f: &str| {
            shown
                .iter()
                .find(|(n, _, _)| *n == f)
                .and_then(|(_, p, _)| p.clone())
                .expect("field")
        };
        assert_eq!(
            (
                at("delivered_total"),
                at("dead"),
                at("quarantined"),
                at("dead_lettered_total")
            ),
            ("6".into(), "1".into(), "1".into(), "1".into())
        );

        // The dead letter, the quarantined hook, the job, the pause.
        let dl = format!("tr[data-id='{row}']");
        assert_eq!(
            text(b, &format!("#dead {dl} td[data-field='reason']"))
                .await
                .as_deref(),
            Some(reason.as_str())
        );
        assert_eq!(
            text(b, &format!("#dead {dl} td[data-field='source']"))
                .await
                .as_deref(),
            Some("orders")
        );
        assert_eq!(
            text(b, &format!("#dead {dl} td[data-field='sink']"))
                .await
                .as_deref(),
            Some("web")
        );
        assert_eq!(
            text(
                b,
                &format!("#quarantine tr[data-id='{held_id}'] td[data-field='reason']")
            )
            .await
            .as_deref(),
            Some("source under quarantine")
        );
        assert_eq!(
            text(
                b,
                &format!("#jobs tr[data-job='{job_id}'] td[data-field='state']")
            )
            .await
            .as_deref(),
            Some("done")
        );
        let progress = text(
            b,
            &format!("#jobs tr[data-job='{job_id}'] td[data-field='progress']"),
        )
        .await
        .expect("job progress");
        assert!(progress.contains("done 3"), "{progress}");
        let pause = text(b, "#sources tr[data-sink='ledger'] td[data-field='pause']")
            .await
            .expect("the ledger's pause");
        assert!(
            pause.starts_with("paused since") && pause.ends_with("(ledger maintenance)"),
            "{pause}"
        );
        assert_eq!(
            text(
                b,
                "#sources tr[data-source='orders'] td[data-field='pause']"
            )
            .await
            .as_deref(),
            Some("delivering")
        );

        // Live rates: the totals are /metrics's; hooks posted between two
        // refreshes make a non-zero ingest rate at the next one (posted
        // again if two refreshes passed without showing it).
        let mut posted = 0;
        eventually("a non-zero ingest rate", async || {
            // How many refreshes the page has shown (console.js counts them).
            let refreshed = async || {
                b.execute(
                    "return Number(document.body.dataset.refreshed || 0);",
                    vec![],
                )
                .await
                .ok()
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
            };
            let from = refreshed().await;
            for i in 0..5 {
                relay
                    .post(
                        "/hooks/orders",
                        &[JSON, ("x-entity-id", &format!("live_{}", i % 3))],
                        format!("{{\"live\":{posted}}}"),
                    )
                    .await
                    .id();
                relay
                    .post("/hooks/billing", &[JSON], format!("{{\"live\":{posted}}}"))
                    .await
                    .id();
                posted += 1;
            }
            let mut seen = String::new();
            let stop = Instant::now() + WAIT;
            while refreshed().await < from + 3 && Instant::now() < stop {
                seen = text(b, "[data-rate='ingest'] [data-field='rate']")
                    .await
                    .unwrap_or_default();
                if seen
                    .strip_suffix("/s")
                    .and_then(|r| r.replace(',', "").parse::<f64>().ok())
                    .is_some_and(|r| r > 0.0)
                {
                    return Ok(seen);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(seen)
        })
        .await;
        let ingest_total = eventually("the ingest total equal to /metrics", async || {
            let want = relay
                .metrics()
                .await
                .get("ankusa_ingest_requests_total")
                .copied()
                .unwrap_or(-1.0);
            let shown = text(b, "[data-rate='ingest'] [data-field='total']")
                .await
                .unwrap_or_default();
            if shown == format!("{want} since the relay started") {
                Ok(want)
            } else {
                Err(format!("{shown:?} vs {want}"))
            }
        })
        .await;
        assert!(ingest_total >= 5.0 + 2.0 * posted as f64, "{ingest_total}");

        if let Some(path) = std::env::var_os("ANKUSA_CONSOLE_SCREENSHOT") {
            let h = b
                .execute("return document.documentElement.scrollHeight;", vec![])
                .await
                .expect("height")
                .as_u64()
                .expect("a height");
            b.set_window_size(1400, u32::try_from(h + 140).unwrap_or(4000).min(4000))
                .await
                .expect("resize");
            // The page at its full height, then the picture.
            let png = b.screenshot().await.expect("screenshot");
            assert!(png.starts_with(b"\x89PNG"), "not a PNG");
            std::fs::write(&path, png)
                .unwrap_or_else(|e| panic!("writing {}: {e}", Path::new(&path).display()));
            eprintln!(
                "console screenshot written to {}",
                Path::new(&path).display()
            );
        }

        // A value that holds markup is shown as text: a pause reason.
        api.ok(
            "POST",
            "/v1/sources/{source}/pause",
            "/v1/sources/review/pause",
            Some(json!({"reason": MARKUP_REASON})),
        )
        .await;
        let paused = eventually("the review source's pause shown", async || {
            match text(
                b,
                "#sources tr[data-source='review'] td[data-field='source']",
            )
            .await
            {
                Some(t) if t.contains(MARKUP_REASON) => Ok(t),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert!(
            paused.starts_with("review/hooks/reviewpaused since"),
            "{paused}"
        );
        assert_eq!(
            count(b, "#sources b, #sources img").await,
            0,
            "the reason became markup"
        );
        assert_eq!(
            text(
                b,
                "#sources tr[data-source='review'] td[data-field='pause']"
            )
            .await
            .as_deref(),
            Some("source paused")
        );

        // The dead letter's attempt log, with a click: its one attempt,
        // refused with 422, and the receiver's answer (docs/design.md
        // section 3, "The attempt log").
        eventually("a click on Attempts", async || {
            b.click(
                &b.find(&format!("#dead {dl} button[data-action='attempts']"))
                    .await?,
            )
            .await
        })
        .await;
        let shown = eventually("the attempts shown", async || {
            let row_shown = text(b, "#attempts-section:not([hidden]) #attempts-row").await;
            let status = text(
                b,
                "#attempts tbody tr[data-attempt='1'] td[data-field='status']",
            )
            .await;
            let outcome = text(
                b,
                "#attempts tbody tr[data-attempt='1'] td[data-field='outcome']",
            )
            .await;
            match (row_shown, status, outcome) {
                (Some(r), Some(s), Some(o)) => Ok((r, s, o)),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert_eq!(
            shown,
            (row.clone(), "422".to_owned(), "permanent".to_owned())
        );
        assert_eq!(count(b, "#attempts tbody tr").await, 1);

        // Revive with a click: the sink now takes it.
        fixed.store(true, Ordering::SeqCst);
        let notice = revive(
            b,
            &format!("#dead {dl} button[data-action='revive']"),
            &sink,
            &poison,
            &row,
        )
        .await;
        assert!(
            notice == format!("Revived {row}: due now.")
                || notice == format!("Revived {row}: queued in its ordering lane."),
            "{notice}"
        );
        eventually("the dead letter gone from the page", async || {
            let rows = count(b, &format!("#dead {dl}")).await;
            let dead = text(b, "tr[data-tenant='acme'] td[data-field='dead']").await;
            let empty = text(b, "#dead tbody tr.empty").await;
            if rows == 0
                && dead.as_deref() == Some("0")
                && empty.as_deref() == Some("No dead letters.")
            {
                Ok(())
            } else {
                Err(format!("{rows} {dead:?} {empty:?}"))
            }
        })
        .await;
        // Every hook but the paused ledger's delivered: the three, their
        // replays, the live ones of orders and the revived one.
        let want = 7 + posted as i64;
        until("every hook of orders delivered", WAIT, async || {
            (api.tenant("acme").await["counters"]["delivered_total"].as_i64() == Some(want))
                .then_some(())
        })
        .await;
        let t = api.tenant("acme").await;
        assert_eq!(
            (
                t["counters"]["dead"].as_i64(),
                t["counters"]["pending"].as_i64()
            ),
            (Some(0), Some(posted as i64)),
            "the ledger's hooks held: {t}"
        );
        assert!(api.dead("").await.is_empty());
    })
    .catch_unwind()
    .await;
    // The browser goes whatever happened; then the test's own outcome.
    let _ = browser.close().await;
    drop(driver);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
