//! The file sink (cargo feature `file`, default on): one NDJSON line per
//! delivered hook, appended to one file (docs/design.md section 6; the
//! destination of the embedded demo, README, "Set up").
//!
//! # A line
//! One JSON object and `\n`; fields in this order:
//!
//! | field | value |
//! | --- | --- |
//! | `message_version` | `"1"` ([`crate::meta::MESSAGE_VERSION`]) |
//! | `tenant`, `source`, `sink` | names; `sink` is [`crate::DeliveryCtx::sink_name`] |
//! | `sink_ix`, `seq` | the delivery row's key: sink index, hook seq (commit order) |
//! | `idempotency_key` | UUID text, the same on every redelivery and replay |
//! | `attempt` | 1 for the first attempt |
//! | `received_at_ms` | unix milliseconds |
//! | `ordered` | whether the row is laned |
//! | `ordering_key` | the key when ordered, else `null` |
//! | `lane` | the lane id in hex when ordered, else `null` |
//! | `lane_seq` | the hook's position in its lane when ordered (ADR 0004 section 6, "The lane sequence"), else `null` |
//! | `method`, `path`, `query` | as received (`query` `null` when none) |
//! | `content_type` | the original content type, or `null` |
//! | `headers` | the stored headers (after the store_headers policy), in order, as `[name, value]` pairs |
//! | `body_base64` | the body, standard base64 with padding: decodes to the exact bytes received |
//!
//! Header names and values, and the ordering key, are bytes: each is a JSON
//! string when it is UTF-8 (nearly always), else `{"base64": "..."}` so no
//! byte is lost.
//!
//! # Durability: fsync per batch
//! [`FileSink::deliver`](crate::Sink::deliver) appends the line under a lock
//! (lines never interleave) and waits until the write has reached the kernel;
//! [`crate::Sink::flush`] (called by the pipeline after a batch of outcomes,
//! before it commits them) fsyncs (`fdatasync`) the file once for the whole
//! batch. So a line is on stable storage before its row is deleted; a crash
//! in between only writes the line again (at-least-once, the same idempotency
//! key). A failed fsync is an error of `flush`, and the pipeline retries the
//! batch's deliveries to this sink: they are appended again and covered by a
//! later fsync. Per-deliver fsync would cap the sink at about 300 lines/s on
//! this machine (docs/design.md section 5).
//!
//! A write that fails part-way is cut back (the file is truncated to its length
//! before the line) and answered `Retry`; a file that ends without `\n` when it
//! is opened (a torn line of an earlier crash) gets one, so the next line
//! starts clean. All I/O is tokio's (a blocking thread per operation): the
//! runtime never blocks.

mod config;
mod sink;

pub use config::FileSinkConfig;
pub use sink::FileSink;
