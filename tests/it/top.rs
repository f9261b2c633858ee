//! `ankusa top` through the real binary (README, "`ankusa top`"): a relay with
//! two tenants, five sources and two sink kinds is driven to a settled state
//! (hooks delivered, one dead-lettered, a blocked lane with a member behind its
//! head and an open breaker, a paused sink holding a hook, a path no source
//! has), then `ankusa top --once` prints one plain-text frame whose every
//! figure is asserted; `ankusa top` with stdout piped prints the same frame.
//! Its exit codes: 2 usage (`--interval-ms 0`), 3 unreachable, 4 unauthorized.
//!
//! No timing assertion: every figure is waited for (all of them final: the
//! blocked lane's head is due again in an hour, the breaker stays open for
//! an hour) before `top` reads it, so its rates over the window are 0.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::admin::{Admin, cli};
use crate::relay::{Relay, config};
use crate::sink::{Reply, Sink, until};

const LONG: Duration = Duration::from_secs(120);
const TOKEN: &str = "top-token-3b9d1c6e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_shows_every_figure_of_a_settled_relay() {
    // One receiver: /ok delivers, /refuse is refused for good, /busy asks
    // to come back in 10 minutes.
    let sink = Sink::start(|r| match r.path.as_str() {
        "/refuse" => Reply::Status(422),
        "/busy" => Reply::RetryAfter(503, "600"),
        _ => Reply::Status(200),
    })
    .await;
    let url = |path: &str| format!("http://{}{path}", sink.addr);
    let yaml = config(
        "memory",
        &format!(
            "
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 1, open_ms: 3600000}}
tenants: [{{name: acme}}, {{name: beta}}]
sources:
  - name: orders
    tenant: acme
    sinks: [{{type: http, name: web, url: '{ok}'}}]
  - name: bad
    tenant: acme
    sinks: [{{type: http, name: web, url: '{refuse}'}}]
  - name: lanes
    tenant: beta
    sinks: [{{type: http, name: web, url: '{busy}', ordered: true, ordering_key: {{header: x-entity-id}}, retry: {{base_ms: 3600000, max_ms: 3600000}}}}]
  - name: files
    tenant: beta
    sinks: [{{type: file, name: log, path: '{{DIR}}/deliveries.ndjson'}}]
  - name: held
    tenant: beta
    sinks: [{{type: http, name: web, url: '{ok}', paused: true}}]
",
            ok = url("/ok"),
            refuse = url("/refuse"),
            busy = url("/busy"),
        ),
    )
    .replace("admin: '{ADMIN}'}", &format!("admin: '{{ADMIN}}', admin_token: '{TOKEN}'}}"));
    let relay = Relay::start(&yaml).await;
    let api = Admin::new(&relay, Some(TOKEN));

    for n in 0..3 {
        relay
            .post("/hooks/orders", &[], format!(r#"{{"n":{n}}}"#))
            .await
            .id();
    }
    relay.post("/hooks/bad", &[], "{}").await.id();
    // Lane k1: its head is attempted (503, back in an hour), then a member.
    relay
        .post("/hooks/lanes", &[("x-entity-id", "k1")], r#"{"n":1}"#)
        .await
        .id();
    until("k1's head attempted", LONG, async || {
        (sink.requests().iter().any(|r| r.path == "/busy")).then_some(())
    })
    .await;
    relay
        .post("/hooks/lanes", &[("x-entity-id", "k1")], r#"{"n":2}"#)
        .await
        .id();
    for n in 0..2 {
        relay
            .post("/hooks/files", &[], format!(r#"{{"n":{n}}}"#))
            .await
            .id();
    }
    relay.post("/hooks/held", &[], "{}").await.id();
    let posted_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let r = crate::relay::client()
        .post(relay.url("/hooks/nobody"))
        .body("{}")
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 404);

    // Settled: every figure final.
    let settled: [(&str, f64); 10] = [
        ("ankusa_dispatch_delivered_total", 5.0),
        ("ankusa_dispatch_dead_lettered_total", 1.0),
        ("ankusa_dispatch_retries_total", 1.0),
        ("ankusa_dispatch_in_flight", 0.0),
        ("ankusa_queue_pending", 3.0),
        ("ankusa_dispatch_lanes_blocked", 1.0),
        ("ankusa_dispatch_lane_members", 1.0),
        ("ankusa_dispatch_paused", 1.0),
        (r#"ankusa_dispatch_breakers{sink="http",state="open"}"#, 1.0),
        (
            r#"ankusa_ingest_requests_total{source="_none",code="404"}"#,
            1.0,
        ),
    ];
    until("the relay settled", LONG, async || {
        let m = relay.metrics().await;
        settled
            .iter()
            .all(|(k, v)| m.get(*k) == Some(v))
            .then_some(())
    })
    .await;
    // The paused sink's hook is held: beta's oldest live due row is then the
    // lane head, due again in an hour (so nothing is due now).
    until("the paused sink's hook held", LONG, async || {
        (api.tenant("beta").await["oldest_due_at_ms"]
            .as_u64()
            .is_some_and(|d| d > posted_ms + 60_000))
        .then_some(())
    })
    .await;

    let admin = format!("http://{}", relay.admin);
    let (code, out, err) = cli(
        &["top", "--once", "--interval-ms", "300", "--admin", &admin],
        Some(TOKEN),
    );
    assert_eq!(code, 0, "{err}");
    let expected = [
        format!("ankusa top  {admin}  every 300 ms"),
        "relay: live".into(),
        "rows:  pending 3  in flight 0  dead 1  quarantined 0  oldest due 0.0s".into(),
        "lanes: 1 busy  1 blocked  0 held  1 members   sinks: 1 paused  1 open breakers".into(),
        "per s: accepted 0.0  delivered 0.0  retries 0.0  dead-lettered 0.0".into(),
        String::new(),
        "SOURCE              REQ/S    2XX/S    4XX/S    5XX/S       2XX       4XX       5XX".into(),
        "bad                   0.0      0.0      0.0      0.0         1         0         0".into(),
        "files                 0.0      0.0      0.0      0.0         2         0         0".into(),
        "held                  0.0      0.0      0.0      0.0         1         0         0".into(),
        "lanes                 0.0      0.0      0.0      0.0         2         0         0".into(),
        "orders                0.0      0.0      0.0      0.0         3         0         0".into(),
        "_none                 0.0      0.0      0.0      0.0         0         1         0".into(),
        String::new(),
        "SINK KIND  ENTRIES PAUSED  DELIV/S  RETRY/S   DEAD/S DELIVERED   RETRIES      DEAD OPEN BRK".into(),
        "file             1      0      0.0      0.0      0.0         2         0         0        0".into(),
        "http             4      1      0.0      0.0      0.0         3         1         1        1".into(),
        String::new(),
        "TENANT             PENDING IN FLIGHT   LANES BLOCKED  HELD      DEAD QUARANTINED OLDEST DUE  DELIV/S".into(),
        "acme                     0         0       0       0     0         1           0          -      0.0".into(),
        "beta                     3         0       1       1     0         0           0       0.0s      0.0".into(),
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), expected, "{out}");

    // Without --once, stdout a pipe (`ankusa top | cat`): the same frame,
    // and the address from ANKUSA_ADMIN.
    let piped = std::process::Command::new(crate::relay::BIN)
        .args(["top", "--interval-ms", "300"])
        .env("ANKUSA_ADMIN", &admin)
        .env("ANKUSA_ADMIN_TOKEN", TOKEN)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run ankusa top");
    assert_eq!(
        piped.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&piped.stdout), out);

    // The exit codes: no token 4, nothing listening 3, usage 2.
    let (code, out, err) = cli(&["top", "--once", "--admin", &admin], None);
    assert_eq!((code, out.as_str()), (4, ""), "{err}");
    assert!(
        err.contains("401") && err.contains("ANKUSA_ADMIN_TOKEN"),
        "{err}"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let (code, out, err) = cli(
        &["top", "--once", "--admin", &format!("http://{closed}")],
        Some(TOKEN),
    );
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    assert!(
        err.contains("cannot reach the admin listener") && err.contains("refused"),
        "{err}"
    );
    let (code, _, err) = cli(
        &["top", "--once", "--interval-ms", "0", "--admin", &admin],
        Some(TOKEN),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--interval-ms") && err.contains("must be at least 1"),
        "{err}"
    );
    assert_eq!(
        cli(
            &["top", "--once", "--admin", "ftp://127.0.0.1:1"],
            Some(TOKEN)
        )
        .0,
        2
    );
}

/// What [`NotTheRelay`] answers to a path: a status and a body of `len`
/// bytes, `head` then `fill` repeated.
struct Canned {
    status: u16,
    head: Vec<u8>,
    fill: u8,
    len: usize,
}

impl Canned {
    fn json(body: &str) -> Canned {
        Canned {
            status: 200,
            head: body.as_bytes().to_vec(),
            fill: b' ',
            len: body.len(),
        }
    }
}

/// A plain TCP server on loopback standing in for an admin listener that is
/// not Ankusa's (or is broken): every request gets `answer(path)`, written
/// in 1 MiB pieces, then the connection closes. Its thread ends with the
/// test process.
struct NotTheRelay {
    addr: std::net::SocketAddr,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl NotTheRelay {
    fn start(answer: impl Fn(&str) -> Canned + Send + Sync + 'static) -> NotTheRelay {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = std::sync::Arc::clone(&requests);
        let answer = std::sync::Arc::new(answer);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let answer = std::sync::Arc::clone(&answer);
                let count = std::sync::Arc::clone(&count);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    let path = line
                        .split(' ')
                        .nth(1)
                        .unwrap_or("/")
                        .split('?')
                        .next()
                        .unwrap_or("/")
                        .to_owned();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                            break;
                        }
                    }
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let c = answer(&path);
                    let mut out = stream;
                    let head = format!(
                        "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        c.status, c.len
                    );
                    if out.write_all(head.as_bytes()).is_err() || out.write_all(&c.head).is_err() {
                        return;
                    }
                    let piece = vec![c.fill; 1 << 20];
                    let mut left = c.len.saturating_sub(c.head.len());
                    while left > 0 {
                        let n = left.min(piece.len());
                        if out.write_all(&piece[..n]).is_err() {
                            return;
                        }
                        left -= n;
                    }
                });
            }
        });
        NotTheRelay { addr, requests }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

const NO_ITEMS: &str = r#"{"items": [], "next_cursor": null}"#;

/// Regression (brk16): `top` (and `ankusa tenants`, `sources`) read every
/// page while the answer named a `next_cursor`, so a listener answering the
/// same page and cursor again kept it reading forever (its memory growing),
/// and an answer of any size was read whole. Now a listing that does not end
/// and an answer over 64 MiB are exit 1 with a reason, as is a 2xx answer
/// that is not JSON (it read as a relay with nothing in it), and `/metrics`
/// that is not UTF-8 is a parse error naming the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_against_a_listener_that_is_not_the_relay_exits_with_a_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let top = |url: &str| {
        let (status, out) = crate::relay::run_cli_env(
            &[
                "top".as_ref(),
                "--once".as_ref(),
                "--interval-ms".as_ref(),
                "10".as_ref(),
                "--admin".as_ref(),
                url.as_ref(),
            ],
            dir.path(),
            &[("ANKUSA_ADMIN_TOKEN", TOKEN)],
        );
        (status.code(), out)
    };

    // The same tenant page and cursor, again and again.
    let tenant = r#"{"name": "acme", "counters": {"pending": 0, "in_flight": 0, "dead": 0, "quarantined": 0, "lanes": 0,
        "lanes_blocked": 0, "delivered_total": 0}, "oldest_due_age_ms": null}"#;
    let page = format!(r#"{{"items": [{tenant}], "next_cursor": "AAAAAQ"}}"#);
    let looping = NotTheRelay::start(move |path| match path {
        "/v1/tenants" => Canned::json(&page),
        "/v1/sources" => Canned::json(NO_ITEMS),
        _ => Canned::json("# EOF\n"),
    });
    let (code, out) = top(&looping.url());
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("ankusa: GET /v1/tenants: the listing does not end (a page names again the next_cursor \"AAAAAQ\"): is {} an Ankusa admin listener?", looping.url())),
        "{out}"
    );
    assert_eq!(
        looping.requests.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one page, then the same cursor again"
    );

    // An empty page that still names a next one.
    let empty = NotTheRelay::start(|path| match path {
        "/v1/tenants" => Canned::json(r#"{"items": [], "next_cursor": "x"}"#),
        _ => Canned::json(NO_ITEMS),
    });
    let (code, out) = top(&empty.url());
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the listing does not end (a page with no items names next_cursor \"x\")"),
        "{out}"
    );

    // A web server answering 200 and a page that is not JSON: read as the
    // API it was an empty relay.
    let html = NotTheRelay::start(|_| Canned::json("<!doctype html><p>It works!"));
    let (code, out) = top(&html.url());
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("ankusa: GET /v1/tenants: 200 with an answer that is not JSON (\"<!doctype html><p>It works!\"): is {} an Ankusa admin listener?", html.url())),
        "{out}"
    );

    // An error whose message would drive the terminal (set its title): the
    // escape sequence is printed as text.
    let escapes = NotTheRelay::start(|_| {
        let body = br#"{"error": {"code": "x", "message": "\u001b]0;pwned\u0007 boom"}}"#;
        Canned {
            status: 500,
            head: body.to_vec(),
            fill: b' ',
            len: body.len(),
        }
    });
    let (code, out) = top(&escapes.url());
    assert_eq!(code, Some(1), "{out}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(
        out.contains("GET /v1/tenants: 500 x: \\u{1b}]0;pwned\\u{7} boom"),
        "{out}"
    );

    // /metrics of 65 MiB (comment lines: it would parse).
    let huge = NotTheRelay::start(|path| match path {
        "/metrics" => Canned {
            status: 200,
            head: b"# ".to_vec(),
            fill: b'#',
            len: 65 << 20,
        },
        _ => Canned::json(NO_ITEMS),
    });
    let (code, out) = top(&huge.url());
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "ankusa: GET /metrics: the answer is over 64 MiB: not an answer of the admin API"
        ),
        "{out}"
    );

    // /metrics that is not UTF-8: the bad bytes are replaced, the line named.
    let binary = NotTheRelay::start(|path| match path {
        "/metrics" => {
            let body = b"ankusa_queue_pending 1\n\xff\xfe 1\n";
            Canned {
                status: 200,
                head: body.to_vec(),
                fill: b'\n',
                len: body.len(),
            }
        }
        _ => Canned::json(NO_ITEMS),
    });
    let (code, out) = top(&binary.url());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("ankusa: the relay's answer cannot be read: /metrics line 2: bad metric name \"\u{fffd}\u{fffd}\""), "{out}");
}
