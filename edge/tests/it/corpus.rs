//! The webhook corpus (`fixtures/corpus` at the top of the repository, README
//! there): real provider payloads with headers and valid signatures. Missing
//! corpus = failed test.

use std::path::PathBuf;

use ankusa_edge::{DEFAULT_TOLERANCE_MS, Header, Secret, Verifier};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The corpus directory: `<repo>/fixtures/corpus`.
pub fn dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/corpus");
    assert!(
        dir.join("index.json").is_file(),
        "webhook corpus not found at {} (it is required, not optional)",
        dir.display()
    );
    dir
}

fn read_json(path: PathBuf) -> Value {
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// `index.json`.
pub fn index() -> Value {
    read_json(dir().join("index.json"))
}

/// A test secret of the README's table, by name.
pub fn secret(name: &str) -> String {
    index()["secrets"][name]
        .as_str()
        .unwrap_or_else(|| panic!("no secret {name} in index.json"))
        .to_owned()
}

/// One corpus file with its index entry.
#[derive(Debug)]
pub struct Hook {
    /// Its path under the corpus, e.g. `stripe/invoice_paid.json`.
    pub file: String,
    /// `provider`.
    pub provider: String,
    /// The headers in send order, original casing.
    pub headers: Vec<(String, String)>,
    /// The exact body bytes.
    pub body: Vec<u8>,
    /// Its entry of `index.json`.
    pub entry: Value,
}

impl Hook {
    /// The header list as the edge sees it.
    pub fn headers(&self) -> Vec<Header<'_>> {
        self.headers
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect()
    }

    /// The first value of a header (case-insensitive), as a string.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{}: no header {name}", self.file))
    }

    /// `signing.scheme`.
    pub fn scheme(&self) -> &str {
        self.entry["signing"]["scheme"].as_str().unwrap_or_default()
    }

    /// The pinned clock for this file (unix ms): the signing time the index
    /// gives (`t`, `ts`), else the timestamp header, else a fixed 2024 time
    /// (schemes without a timestamp ignore it).
    pub fn now_ms(&self) -> u64 {
        let signing = &self.entry["signing"];
        let s = signing["t"]
            .as_u64()
            .or(signing["ts"].as_u64())
            .unwrap_or_else(|| {
                self.headers
                    .iter()
                    .find(|(n, _)| {
                        n.eq_ignore_ascii_case("webhook-timestamp")
                            || n.eq_ignore_ascii_case("svix-timestamp")
                    })
                    .map(|(_, v)| {
                        v.parse()
                            .unwrap_or_else(|e| panic!("{}: timestamp {v}: {e}", self.file))
                    })
                    .unwrap_or(1_721_948_600)
            });
        s * 1000
    }

    /// The verifier of this file's provider with `secret` in place of its
    /// own; `None` for an unsigned provider (Salesforce).
    pub fn verifier_with(&self, secret: &str) -> Option<Verifier> {
        let scheme = self.scheme();
        let s = vec![Secret::new(secret)];
        Some(if scheme.starts_with("github") {
            Verifier::GitHub { secrets: s }
        } else if scheme == "stripe-v1" {
            Verifier::Stripe {
                secrets: s,
                tolerance_ms: DEFAULT_TOLERANCE_MS,
            }
        } else if scheme.starts_with("shopify") {
            Verifier::Shopify { secrets: s }
        } else if scheme == "slack-v0" {
            Verifier::Slack {
                secrets: s,
                tolerance_ms: DEFAULT_TOLERANCE_MS,
            }
        } else if scheme.starts_with("standard-webhooks") {
            Verifier::StandardWebhooks {
                keys: vec![
                    Secret::standard_webhooks(secret).unwrap_or_else(|e| panic!("{secret}: {e}")),
                ],
                tolerance_ms: DEFAULT_TOLERANCE_MS,
            }
        } else if scheme.starts_with("twilio") {
            Verifier::Twilio {
                tokens: s,
                url: self.entry["signing"]["url"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}: no signing.url", self.file))
                    .to_owned(),
            }
        } else if scheme.starts_with("none") {
            return None;
        } else {
            panic!("{}: unknown scheme {scheme}", self.file)
        })
    }

    /// The verifier of this file's provider with the secret the index names.
    pub fn verifier(&self) -> Option<Verifier> {
        let name = self.entry["signing"]["secret"].as_str()?;
        self.verifier_with(&secret(name))
    }
}

/// One corpus file by its path under the corpus.
pub fn hook(file: &str) -> Hook {
    let index = index();
    let entry = index["files"]
        .as_array()
        .and_then(|files| files.iter().find(|f| f["file"] == file))
        .unwrap_or_else(|| panic!("{file} is not in index.json"))
        .clone();
    load(entry)
}

/// Every corpus file of `index.json`, in its order.
pub fn all() -> Vec<Hook> {
    let index = index();
    let files = index["files"]
        .as_array()
        .expect("index.json has files")
        .clone();
    assert_eq!(files.len(), 52, "corpus files in index.json");
    files.into_iter().map(load).collect()
}

fn load(entry: Value) -> Hook {
    let file = entry["file"].as_str().expect("entry has file").to_owned();
    let v = read_json(dir().join(&file));
    let headers = v["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|h| {
            (
                h[0].as_str().expect("header name").to_owned(),
                h[1].as_str().expect("header value").to_owned(),
            )
        })
        .collect();
    let body = v["body"].as_str().expect("body").as_bytes().to_vec();
    // The bytes we test are the bytes the index describes.
    assert_eq!(
        Some(body.len() as u64),
        entry["body_bytes"].as_u64(),
        "{file}: body_bytes"
    );
    let sha = Sha256::digest(&body);
    let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        Some(hex.as_str()),
        entry["body_sha256"].as_str(),
        "{file}: body_sha256"
    );
    Hook {
        file,
        provider: v["provider"].as_str().expect("provider").to_owned(),
        headers,
        body,
        entry,
    }
}
