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
//!
//! `--resign SCHEME=SECRET` (one per scheme, named as the config's
//! `verification.type`, or `twilio`; SECRET the text or `env:NAME`, as the
//! config reads secrets) signs each file again just before it
//! is posted, so a source that checks freshness, or one with a secret of its
//! own, accepts the corpus: the file's scheme is found from its signature
//! headers ([`ankusa_edge::sign::Scheme::detect`]), its timestamp becomes
//! now and its signature is computed over the exact body with that secret
//! ([`ankusa_edge::sign::resign`]: values change, headers keep their order
//! and names). A malformed `--resign` stops the run before any file is read;
//! a signed file whose scheme has no `--resign` (when any is given) is a
//! load error naming the file and the option, so nothing is posted. Files
//! with no signature header (Salesforce) are posted as stored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ankusa_edge::sign::{self, Scheme};
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
    /// The full URL: `--url` and the path.
    target: String,
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
    /// The `--resign` values, `SCHEME=SECRET` each (module docs); empty:
    /// every file is posted as stored.
    pub resign: &'a [String],
}

/// The secrets of `--resign`, one per scheme.
type Keys = BTreeMap<Scheme, ankusa_edge::Secret>;

/// Reads the `--resign` values (module docs). The error names the value by
/// its scheme (never quoting a secret) and says what is wrong.
fn resign_keys(values: &[String]) -> Result<Keys, String> {
    let schemes = || {
        Scheme::ALL
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut keys = Keys::new();
    for (i, value) in values.iter().enumerate() {
        let Some((name, text)) = value.split_once('=') else {
            return Err(match Scheme::from_name(value) {
                Some(_) => format!(
                    "--resign {value}: no secret; expected {value}=SECRET (or {value}=env:NAME)"
                ),
                // Not quoted: it may be a secret given without its scheme.
                None => format!(
                    "--resign value {} of {}: expected SCHEME=SECRET (SCHEME one of {}), found no '='",
                    i + 1,
                    values.len(),
                    schemes()
                ),
            });
        };
        let scheme = Scheme::from_name(name).ok_or_else(|| {
            format!(
                "--resign {name}=...: unknown scheme {name:?}; one of {}",
                schemes()
            )
        })?;
        let secret = ankusa_config::resolve_secret(text, &ankusa_config::process_env)
            .map_err(|m| format!("--resign {name}=...: {m}"))?;
        let key = scheme
            .secret(secret.expose())
            .map_err(|e| format!("--resign {name}=...: {e}"))?;
        if keys.insert(scheme, key).is_some() {
            return Err(format!(
                "--resign {name}=... is given twice: one secret per scheme"
            ));
        }
    }
    Ok(keys)
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
    let keys = match resign_keys(args.resign) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("ankusa send: {e}; nothing sent");
            return ExitCode::FAILURE;
        }
    };
    let mut loaded = Vec::with_capacity(args.files.len());
    let mut unreadable = 0usize;
    for f in args.files {
        match load(f, args, &keys) {
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
            // ... and signed again now (with --resign), just before it goes.
            let posted = match load(f, args, &keys) {
                Ok(req) => send_one(&client, req).await,
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

/// Reads and parses one corpus file and, when `keys` has any, signs it again
/// at the current time; the error says what was wrong with it.
fn load(file: &Path, args: &Args<'_>, keys: &Keys) -> anyhow::Result<Request> {
    let text = std::fs::read_to_string(file).context("cannot read it")?;
    let hook: CorpusFile =
        serde_json::from_str(&text).context("not a corpus file (fixtures/corpus/README.md)")?;
    let path = args
        .path
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
    let target = format!("{}{path}", args.url.trim_end_matches('/'));
    let mut headers = hook.headers;
    let body = hook.body.into_bytes();
    if !keys.is_empty() {
        resign(&mut headers, &body, keys, &target)?;
    }
    Ok(Request {
        method,
        target,
        headers,
        body,
    })
}

/// Signs a file's request again with the `--resign` secret of its scheme at
/// the current time (module docs); a file with no signature header is left
/// as it is.
fn resign(
    headers: &mut [(String, String)],
    body: &[u8],
    keys: &Keys,
    target: &str,
) -> anyhow::Result<()> {
    let list: Vec<ankusa_edge::Header<'_>> = headers
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect();
    let Some(scheme) = Scheme::detect(&list) else {
        return Ok(());
    };
    let key = keys.get(&scheme).ok_or_else(|| {
        let header = scheme
            .signature_headers()
            .iter()
            .find(|name| ankusa_edge::first_header(&list, name).is_some())
            .unwrap_or(&"");
        anyhow!(
            "signed with {} ({header}), but no --resign {}=SECRET was given",
            scheme.name(),
            scheme.name()
        )
    })?;
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_secs();
    sign::resign(scheme, headers, body, key, now_s, target)
        .with_context(|| format!("cannot re-sign it as {}", scheme.name()))
}

async fn send_one(
    client: &reqwest::Client,
    hook: Request,
) -> anyhow::Result<(reqwest::StatusCode, String)> {
    let target = hook.target;
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
