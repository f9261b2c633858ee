//! `ankusa send FILE...`: posts webhooks saved in the corpus format
//! (`../shared/corpus/README.md`: `{"method", "path_hint", "headers": [[name,
//! value], ...], "body"}`) to a running relay, headers in their original order
//! and the body as its exact UTF-8 bytes, and prints each answer.

use std::path::PathBuf;
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

pub fn main(files: &[PathBuf], url: &str, path: Option<&str>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ankusa send: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async {
        ankusa_sinks::http::install_crypto_provider();
        let client = match reqwest::Client::builder().build() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("ankusa send: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut failed = 0;
        for f in files {
            match send_one(&client, f, url, path).await {
                Ok((status, body)) => {
                    println!("{} -> {status} {body}", f.display());
                    if !status.is_success() {
                        failed += 1;
                    }
                }
                Err(e) => {
                    eprintln!("{}: {e:#}", f.display());
                    failed += 1;
                }
            }
        }
        println!("{} sent, {failed} not accepted", files.len());
        if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
    })
}

async fn send_one(
    client: &reqwest::Client,
    file: &PathBuf,
    url: &str,
    path: Option<&str>,
) -> anyhow::Result<(reqwest::StatusCode, String)> {
    let text = std::fs::read_to_string(file).context("reading the file")?;
    let hook: CorpusFile = serde_json::from_str(&text).context("not a corpus file")?;
    let path = path
        .map(str::to_owned)
        .or(hook.path_hint)
        .ok_or_else(|| anyhow!("the file has no path_hint; pass --path"))?;
    let method = reqwest::Method::from_bytes(hook.method.as_bytes()).context("method")?;
    let mut req = client.request(method, format!("{}{}", url.trim_end_matches('/'), path));
    for (name, value) in &hook.headers {
        // The client sets these from the connection and the body.
        if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("host") {
            continue;
        }
        req = req.header(name, value);
    }
    let resp = req.body(hook.body.into_bytes()).send().await.context("sending")?;
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    Ok((status, body))
}
