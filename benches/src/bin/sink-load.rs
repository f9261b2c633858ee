//! Delivered hooks/s of one sink through a running relay (broker and cloud
//! sinks; benches/load/sinks.sh runs it, benches/load/SINKS-RESULTS.md): posts
//! `N` hooks to `/hooks/<source>` with `C` requests at once, then reads the
//! admin listener's `/metrics` until `ankusa_dispatch_delivered_total` has
//! grown by `N`, and prints one JSON line with the timings.
//!
//! ```text
//! sink-load --ingest 127.0.0.1:8080 --admin 127.0.0.1:9090 --source load \
//!           --hooks 10000 --concurrency 32 [--key one-lane | --keys 1000] [--body-bytes 1024]
//! ```
//! Without `--key` or `--keys` every hook carries `x-entity-id: entity-<i>`
//! (its own key; the unordered run ignores it); with `--key K` every hook
//! carries `K`, so an ordered sink keyed on that header puts all of them in
//! one lane; with `--keys N` hook `i` carries `entity-<i mod N>`: N lanes,
//! each in order.
//!
//! Printed figures: `ingest_s` (first post to last 200), `deliver_s` (first
//! post to the last delivery), `delivered_per_s` = N / deliver_s, and
//! `drain_per_s`: deliveries after the last 200 divided by the time they took,
//! i.e. the sink's rate once ingest no longer competes for the cores.
//! Non-200 answers are counted and make the run fail (exit 1).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

struct Args {
    ingest: SocketAddr,
    admin: SocketAddr,
    source: String,
    hooks: usize,
    concurrency: usize,
    key: Option<String>,
    /// `--keys N`: hook `i` carries key `entity-<i mod N>`.
    keys: Option<usize>,
    body_bytes: usize,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        ingest: "127.0.0.1:8080".parse().map_err(|e| format!("{e}"))?,
        admin: "127.0.0.1:9090".parse().map_err(|e| format!("{e}"))?,
        source: "load".into(),
        hooks: 10_000,
        concurrency: 32,
        key: None,
        keys: None,
        body_bytes: 1024,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--ingest" => a.ingest = value.parse().map_err(|e| bad(&e))?,
            "--admin" => a.admin = value.parse().map_err(|e| bad(&e))?,
            "--source" => a.source = value,
            "--hooks" => a.hooks = value.parse().map_err(|e| bad(&e))?,
            "--concurrency" => a.concurrency = value.parse().map_err(|e| bad(&e))?,
            "--key" => a.key = Some(value),
            "--keys" => a.keys = Some(value.parse().map_err(|e| bad(&e))?),
            "--body-bytes" => a.body_bytes = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.hooks == 0 || a.concurrency == 0 || a.keys == Some(0) {
        return Err("--hooks, --concurrency and --keys must be more than 0".into());
    }
    if a.key.is_some() && a.keys.is_some() {
        return Err("--key (one key) and --keys (N keys) exclude each other".into());
    }
    Ok(a)
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

async fn delivered(client: &HttpClient, admin: SocketAddr) -> Result<f64, String> {
    let uri = format!("http://{admin}/metrics");
    let resp = client
        .get(uri.parse().map_err(|e| format!("{e}"))?)
        .await
        .map_err(|e| format!("GET {uri}: {e}"))?;
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{e}"))?
        .to_bytes();
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|l| l.strip_prefix("ankusa_dispatch_delivered_total "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no ankusa_dispatch_delivered_total in /metrics".into())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sink-load: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sink-load: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sink-load: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(a: Args) -> Result<String, String> {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let before = delivered(&client, a.admin).await?;
    let padding = "x".repeat(a.body_bytes.saturating_sub(64));
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..a.concurrency {
        let (client, next, failed, padding) = (
            client.clone(),
            Arc::clone(&next),
            Arc::clone(&failed),
            padding.clone(),
        );
        let (uri, key, keys, n) = (
            format!("http://{}/hooks/{}", a.ingest, a.source),
            a.key.clone(),
            a.keys,
            a.hooks,
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let body =
                    format!("{{\"id\":\"evt_{i}\",\"type\":\"load.test\",\"pad\":\"{padding}\"}}");
                let key = key
                    .clone()
                    .unwrap_or_else(|| format!("entity-{}", keys.map_or(i, |k| i % k)));
                let req = Request::builder()
                    .method(Method::POST)
                    .uri(&uri)
                    .header("content-type", "application/json")
                    .header("x-entity-id", key)
                    .body(Full::new(Bytes::from(body)));
                let ok = match req {
                    Ok(req) => match client.request(req).await {
                        Ok(resp) => {
                            let status = resp.status();
                            let _ = resp.into_body().collect().await;
                            status.as_u16() == 200
                        }
                        Err(_) => false,
                    },
                    Err(_) => false,
                };
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for w in workers {
        w.await.map_err(|e| format!("a poster panicked: {e}"))?;
    }
    let ingest_s = t0.elapsed().as_secs_f64();
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(format!(
            "{failed} of {} posts were not answered 200",
            a.hooks
        ));
    }
    let at_ingest_end = delivered(&client, a.admin).await? - before;
    let target = a.hooks as f64;
    let deliver_s = loop {
        let d = delivered(&client, a.admin).await? - before;
        if d >= target {
            break t0.elapsed().as_secs_f64();
        }
        if t0.elapsed() > Duration::from_secs(1800) {
            return Err(format!("only {d} of {target} delivered after 30 min"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let drain_s = deliver_s - ingest_s;
    let drain_per_s = if drain_s > 0.0 && target > at_ingest_end {
        (target - at_ingest_end) / drain_s
    } else {
        f64::NAN
    };
    Ok(format!(
        "{{\"hooks\":{},\"concurrency\":{},\"one_key\":{},\"keys\":{},\"ingest_s\":{ingest_s:.3},\"deliver_s\":{deliver_s:.3},\"delivered_at_ingest_end\":{at_ingest_end},\"delivered_per_s\":{:.1},\"drain_per_s\":{drain_per_s:.1}}}",
        a.hooks,
        a.concurrency,
        a.key.is_some(),
        a.keys.map_or("null".to_string(), |k| k.to_string()),
        target / deliver_s
    ))
}
