//! `ankusa send FILE...`: posts webhooks saved in the corpus format
//! (`fixtures/corpus/README.md`: `{"method", "path_hint", "headers": [[name,
//! value], ...], "body"}`) to a running relay, headers in their original order
//! and the body as its exact UTF-8 bytes, and prints each answer.
//!
//! Every file is read and parsed before anything is posted: a file that cannot
//! be read, is not a corpus file or has no path (no `path_hint` and no
//! `--path`) is an error naming the file, and then nothing is posted unless
//! `--keep-going` (which posts the files that loaded and skips the others). A
//! request that gets no answer (the relay is not listening, the connection
//! broke) stops the run the same way. The summary counts only what was posted:
//! `N sent, M not accepted` (not accepted: an answer other than 2xx), plus how
//! many files were skipped or could not be sent. Exit status: 0 when every
//! file was posted and accepted, 1 otherwise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow};
use serde::Deserialize;

#[derive(Deserialize)]
struct CorpusFile {
    #[serde(default = "post")]
    method: String,
    path_hint: Option<String>,
    headers: Vec<(String, String)>,
    body: String,
}

fn post() -> String {
    "POST".into()
}

/// A file ready to post: where, how, and what.
struct Request {
    method: reqwest::Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// The most a request may take, connecting included, by default: 30 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// What `ankusa send` was asked to do.
pub struct Args<'a> {
    pub files: &'a [PathBuf],
    /// The relay's ingest address, e.g. `http://127.0.0.1:8080`.
    pub url: &'a str,
    /// Post to this path instead of each file's `path_hint`.
    pub path: Option<&'a str>,
    /// Post the files that loaded even if others did not, and go on after a
    /// request that got no answer.
    pub keep_going: bool,
    /// The most one request may take, milliseconds (no answer by then: not
    /// sent).
    pub timeout_ms: u64,
}

pub fn main(args: &Args<'_>) -> ExitCode {
    // Check everything first: a typo in the fifth file must not leave four
    // hooks posted and the rest not. Bodies are read again when posted, so
    // many large files do not sit in memory together.
    match reqwest::Url::parse(args.url) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.query().is_none()
                && u.fragment().is_none() => {}
        _ => {
            eprintln!(
                "ankusa send: --url {:?} is not an http:// or https:// address without a query (e.g. http://127.0.0.1:8080)",
                ankusa_config::redact_url(args.url)
            );
            return ExitCode::FAILURE;
        }
    }
    if let Some(p) = args.path
        && !p.starts_with('/')
    {
        eprintln!("ankusa send: --path {p:?} does not start with '/'");
        return ExitCode::FAILURE;
    }
    let mut loaded = Vec::with_capacity(args.files.len());
    let mut unreadable = 0usize;
    for f in args.files {
        match load(f, args.path) {
            Ok(_) => loaded.push(f),
            Err(e) => {
                eprintln!("ankusa send: {}: {e:#}", f.display());
                unreadable += 1;
            }
        }
    }
    if unreadable > 0 && !args.keep_going {
        let n = args.files.len();
        eprintln!(
            "ankusa send: {unreadable} of {n} {} could not be loaded; nothing sent (--keep-going sends the others)",
            if n == 1 { "file" } else { "files" }
        );
        return ExitCode::FAILURE;
    }

    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ankusa send: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async {
        ankusa_sinks::http::install_crypto_provider();
        // No redirects: a 3xx is the relay's (or a proxy's) answer, shown and
        // counted as not accepted, never a POST silently turned into a GET.
        let client = match reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_millis(args.timeout_ms))
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("ankusa send: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (mut sent, mut not_accepted, mut unsent) = (0usize, 0usize, 0usize);
        let total = loaded.len();
        for (i, f) in loaded.into_iter().enumerate() {
            // Read again: the file was checked above; one that changed since
            // is reported like any other error.
            let posted = match load(f, args.path) {
                Ok(req) => send_one(&client, args.url, req).await,
                Err(e) => Err(e),
            };
            match posted {
                Ok((status, body)) => {
                    sent += 1;
                    println!("{} -> {status} {body}", f.display());
                    if !status.is_success() {
                        not_accepted += 1;
                    }
                }
                Err(e) => {
                    eprintln!("ankusa send: {}: {e:#}", f.display());
                    unsent += 1;
                    if !args.keep_going {
                        unsent += total - i - 1;
                        break;
                    }
                }
            }
        }
        let mut summary = format!("{sent} sent, {not_accepted} not accepted");
        if unsent > 0 {
            summary.push_str(&format!(", {unsent} not sent"));
        }
        if unreadable > 0 {
            summary.push_str(&format!(", {unreadable} skipped (could not be loaded)"));
        }
        println!("{summary}");
        if not_accepted == 0 && unsent == 0 && unreadable == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}

/// Reads and parses one corpus file; the error says what was wrong with it.
fn load(file: &Path, path: Option<&str>) -> anyhow::Result<Request> {
    let text = std::fs::read_to_string(file).context("cannot read it")?;
    let hook: CorpusFile =
        serde_json::from_str(&text).context("not a corpus file (fixtures/corpus/README.md)")?;
    let path = path
        .map(str::to_owned)
        .or(hook.path_hint)
        .ok_or_else(|| anyhow!("the file has no path_hint; pass --path"))?;
    if !path.starts_with('/') {
        return Err(anyhow!("its path_hint {path:?} does not start with '/'"));
    }
    let method = reqwest::Method::from_bytes(hook.method.as_bytes())
        .map_err(|_| anyhow!("{:?} is not an HTTP method", hook.method))?;
    for (name, value) in &hook.headers {
        reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| anyhow!("{name:?} is not a valid header name"))?;
        reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| anyhow!("the value of header {name} is not a valid header value"))?;
    }
    Ok(Request {
        method,
        path,
        headers: hook.headers,
        body: hook.body.into_bytes(),
    })
}

async fn send_one(
    client: &reqwest::Client,
    url: &str,
    hook: Request,
) -> anyhow::Result<(reqwest::StatusCode, String)> {
    let target = format!("{}{}", url.trim_end_matches('/'), hook.path);
    let mut req = client.request(hook.method, &target);
    for (name, value) in &hook.headers {
        // The client sets these from the connection and the body.
        if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("host") {
            continue;
        }
        req = req.header(name, value);
    }
    let resp = req
        .body(hook.body)
        .send()
        .await
        .map_err(reqwest::Error::without_url)
        .with_context(|| format!("posting to {}", ankusa_config::redact_url(&target)))?;
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    Ok((status, body))
}
