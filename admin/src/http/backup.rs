//! Online backup (docs/design.md section 8, "Online backup"): `GET
//! /v1/backup` streams the dump of `ankusa store export` (the same format,
//! `ankusa_engine::dump`) from a snapshot of the running store, while ingest
//! and delivery go on. The dump is written on a blocking thread from one
//! snapshot (every record as of one moment) into a bounded channel the
//! answer's body reads, so a slow client holds the export back rather than
//! the relay's memory. One backup at a time (409 while one runs).
//!
//! A failure mid-way (the store, the client gone) ends the answer's body
//! with an error: the connection is cut, and the client never sees a
//! complete dump (its trailer, with the record counts and the checksum, is
//! written last; `store import` refuses a dump without it).

use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use ankusa_engine::{Cf, Kv};
use ankusa_keys::meta::decode_format;
use ankusa_keys::{FORMAT_KEY, ORIGIN_KEY};
use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{CONTENT_DISPOSITION, CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::AdminState;
use super::api::ApiError;

/// The path of the backup route.
pub const PATH: &str = "/v1/backup";

/// Chunks of the dump in flight between the export and the body.
const CHUNKS: usize = 8;
/// The size of a chunk, bytes.
const CHUNK_BYTES: usize = 256 * 1024;

/// Set while a backup runs (one at a time per process).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// The answer's body: the dump's chunks as the export writes them.
#[derive(Debug)]
pub struct DumpBody {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

impl Body for DumpBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.rx
            .poll_recv(cx)
            .map(|c| c.map(|chunk| chunk.map(Frame::data)))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Sends what the export writes to the body, a chunk at a time; a closed
/// body (the client went away) is a broken pipe, which ends the export.
struct ChunkWriter {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
    sent: u64,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK_BYTES),
        ));
        self.sent += chunk.len() as u64;
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the client closed the connection",
            )
        })
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Whether a request is for the backup route (the listener streams its
/// answer instead of building it).
pub fn is_backup(method: &hyper::Method, path: &str) -> bool {
    method == hyper::Method::GET && path == PATH
}

/// Starts a backup: the answer whose body is the dump, or the error to
/// answer (409 while another runs, 503 for a store without a format stamp
/// or that fails the first read).
pub fn start<K: Kv>(state: &Arc<AdminState<K>>) -> Result<Response<DumpBody>, ApiError> {
    let format = match state.kv.get(Cf::Meta, FORMAT_KEY)? {
        Some(v) => decode_format(&v).map_err(ApiError::store)?,
        None => {
            return Err(ApiError::unavailable(
                "the store has no format stamp (meta key `format`): nothing to back up",
            ));
        }
    };
    if RUNNING.swap(true, Ordering::SeqCst) {
        return Err(ApiError::conflict(
            "a backup is running; one at a time (retry when it is done)",
        ));
    }
    let (tx, rx) = mpsc::channel(CHUNKS);
    let kv = Arc::clone(&state.kv);
    let started = (state.clock)();
    let name = format!("ankusa-{}-{started}.dump", kv.backend());
    tokio::task::spawn_blocking(move || {
        let writer = ChunkWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK_BYTES),
            sent: 0,
        };
        let snapshot = kv.snapshot();
        let mut out = writer;
        let result = ankusa_engine::dump::export(
            &snapshot,
            kv.backend(),
            format,
            ORIGIN_KEY,
            &mut out,
            &mut |_, _| {},
        )
        .and_then(|summary| {
            out.flush()
                .map_err(|source| ankusa_engine::dump::DumpError::Io {
                    what: "sending the backup",
                    source,
                })?;
            Ok(summary)
        });
        drop(snapshot);
        match result {
            Ok(summary) => info!(
                records = summary.records(),
                bytes = out.sent,
                format,
                "backup sent (GET /v1/backup): a dump of the store as of its start"
            ),
            Err(e) => {
                warn!(error = %e, bytes = out.sent, "backup failed (GET /v1/backup): the answer was cut");
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
            }
        }
        RUNNING.store(false, Ordering::SeqCst);
    });
    let mut r = Response::new(DumpBody { rx });
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        r.headers_mut().insert(CONTENT_DISPOSITION, v);
    }
    Ok(r)
}
