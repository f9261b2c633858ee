//! The file sink's appends and fsyncs.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

use super::config::FileSinkConfig;
use crate::{DeliveryCtx, Envelope, Outcome, Sink, SinkError, meta};

/// Appends one NDJSON line per hook to a file and fsyncs per batch (module
/// docs: [`crate::file`]).
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    /// The open file and what is known about it; one writer at a time, so
    /// lines never interleave.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Opened for append: every write goes to the end.
    file: tokio::fs::File,
    /// The file's length after the last complete line: where a failed write is
    /// cut back to.
    len: u64,
    /// A line was appended since the last successful fsync.
    dirty: bool,
}

impl FileSink {
    /// Opens (creating it and its directory if missing) the file for append.
    /// A file that does not end in `\n` gets one first (module docs).
    pub async fn open(config: &FileSinkConfig) -> Result<FileSink, SinkError> {
        config.validate()?;
        let path = config.path.clone();
        let p = path.clone();
        let (file, len) = tokio::task::spawn_blocking(move || open_blocking(&p))
            .await
            .map_err(|e| SinkError::Setup(format!("opening {}: {e}", path.display())))??;
        Ok(FileSink {
            path,
            state: Mutex::new(State {
                file: tokio::fs::File::from_std(file),
                len,
                dirty: false,
            }),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, what: &str, source: std::io::Error) -> SinkError {
        SinkError::Io {
            what: format!("{what} {}", self.path.display()),
            source,
        }
    }
}

fn open_blocking(path: &Path) -> Result<(std::fs::File, u64), SinkError> {
    let io = |what: &str, source| SinkError::Io {
        what: format!("{what} {}", path.display()),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| io("creating the directory of", e))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| io("opening", e))?;
    let mut len = file
        .metadata()
        .map_err(|e| io("reading metadata of", e))?
        .len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::End(-1))
            .and_then(|_| file.read_exact(&mut last))
            .map_err(|e| io("reading the end of", e))?;
        if last[0] != b'\n' {
            file.write_all(b"\n")
                .and_then(|()| file.sync_data())
                .map_err(|e| io("ending the torn last line of", e))?;
            len += 1;
        }
    }
    Ok((file, len))
}

#[async_trait]
impl Sink for FileSink {
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome {
        let mut line = match serde_json::to_vec(&Line::new(hook, ctx)) {
            Ok(l) => l,
            // Unreachable for this struct (string keys, no maps of other keys).
            Err(e) => return Outcome::permanent(format!("encoding the NDJSON line: {e}")),
        };
        line.push(b'\n');
        let mut st = self.state.lock().await;
        // `flush` waits for tokio's background write and reports its error.
        let written = match st.file.write_all(&line).await {
            Ok(()) => st.file.flush().await,
            Err(e) => Err(e),
        };
        match written {
            Ok(()) => {
                st.len += line.len() as u64;
                st.dirty = true;
                Outcome::Ok
            }
            Err(e) => {
                // Cut a partial line back so the next one starts clean.
                let len = st.len;
                let cut = st.file.set_len(len).await;
                let mut reason = format!("appending to {}: {e}", self.path.display());
                if let Err(c) = cut {
                    reason.push_str(&format!(" (and cutting back the partial line: {c})"));
                }
                Outcome::retry(reason)
            }
        }
    }

    async fn flush(&self) -> Result<(), SinkError> {
        let mut st = self.state.lock().await;
        if !st.dirty {
            return Ok(());
        }
        st.file
            .sync_data()
            .await
            .map_err(|e| self.io("fsync of", e))?;
        st.dirty = false;
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "file"
    }
}

/// Bytes in a line: a string when UTF-8, else `{"base64": ...}`.
#[derive(Serialize)]
#[serde(untagged)]
enum Bytes<'a> {
    Text(&'a str),
    Base64 { base64: String },
}

impl<'a> Bytes<'a> {
    fn new(b: &'a [u8]) -> Bytes<'a> {
        match std::str::from_utf8(b) {
            Ok(s) => Bytes::Text(s),
            Err(_) => Bytes::Base64 {
                base64: STANDARD.encode(b),
            },
        }
    }
}

/// One NDJSON line (field table in the module docs).
#[derive(Serialize)]
struct Line<'a> {
    message_version: &'static str,
    tenant: &'a str,
    source: &'a str,
    sink: &'a str,
    sink_ix: u16,
    seq: u64,
    idempotency_key: &'a str,
    attempt: u32,
    received_at_ms: u64,
    ordered: bool,
    ordering_key: Option<Bytes<'a>>,
    lane: Option<&'a str>,
    lane_seq: Option<u64>,
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    content_type: Option<&'a str>,
    headers: Vec<(Bytes<'a>, Bytes<'a>)>,
    body_base64: String,
}

impl<'a> Line<'a> {
    fn new(hook: &'a Envelope, ctx: &'a DeliveryCtx) -> Line<'a> {
        Line {
            message_version: meta::MESSAGE_VERSION,
            tenant: &ctx.tenant,
            source: &ctx.source,
            sink: &ctx.sink_name,
            sink_ix: ctx.sink.0,
            seq: ctx.seq.0,
            idempotency_key: &ctx.idempotency_key,
            attempt: ctx.attempt,
            received_at_ms: ctx.received_at_ms,
            ordered: ctx.ordered,
            ordering_key: ctx.ordering_key().map(Bytes::new),
            lane: if ctx.ordered {
                ctx.lane_hex.as_deref()
            } else {
                None
            },
            lane_seq: ctx.lane_seq(),
            method: &hook.method,
            path: &hook.path,
            query: hook.query.as_deref(),
            content_type: ctx.content_type.as_deref(),
            headers: hook
                .headers
                .iter()
                .map(|(n, v)| (Bytes::new(n), Bytes::new(v)))
                .collect(),
            body_base64: STANDARD.encode(&hook.body),
        }
    }
}
