//! The versioned values: the envelope (cf `hooks`), the delivery row (cf
//! `deliveries`) and the attempt record (?L in cf `index`), docs/design.md
//! section 3 ("versioned, additive fields").
//!
//! # Encoding
//! `version:8`, then fields, each `tag:8, len:32, bytes[len]` (big endian) in
//! ascending tag order, then the end tag `0:8`. The end tag makes a value cut
//! short at a field boundary as detectable as one cut inside a field. A decoder:
//! - refuses a version byte it does not know ([`ValueError::UnknownVersion`]);
//!   the version changes only for an incompatible layout;
//! - skips a tag it does not know, so a later binary can add a field without a
//!   version change and an earlier one still reads the value;
//! - refuses a value that ends before its end tag ([`ValueError::Truncated`]),
//!   bytes after the end tag ([`ValueError::TrailingBytes`]), a required field
//!   that is missing, a single-valued field given twice, and a field whose
//!   bytes are not what it holds ([`ValueError::InvalidField`]).
//!
//! Optional fields are written only when present; an absent tag decodes as
//! `None`. Encoding is deterministic: `encode(decode(v)) == v` for every value
//! this crate wrote.
//!
//! Envelope tags (version [`ENVELOPE_VERSION`]): 1 source (`u32`), 2
//! received_at_ms (`u64`), 3 method (UTF-8), 4 path (UTF-8), 5 query (UTF-8,
//! optional), 6 header (repeated, in order: `name_len:32, name, value`), 7 body,
//! 8 dedupe key (optional), 9 idempotency key (16 bytes), 10 replay_of (`u64`,
//! optional: the seq of the hook an archive replay copied, docs/design.md
//! section 5, "Replayer"). Required: 1, 2, 3, 4, 7, 9.
//!
//! Delivery row tags (version [`DELIVERY_ROW_VERSION`]): 1 state (`u8`), 2 size
//! (`u32`), 3 attempts (`u32`), 4 first_attempt_at_ms (`u64`, optional), 5
//! last_error (UTF-8, optional), 6 lane (16 bytes, optional; ADR 0004 section
//! 2), 7 ordering_key (at most [`ORDERING_KEY_MAX_BYTES`], optional), 8 lane_seq
//! (`u64`, optional; ADR 0004 section 6, "The lane sequence"), 9
//! logged_attempts (`u32`, written when above 0: the attempts the row's
//! attempt log has numbered, docs/design.md section 3, "The attempt log").
//! Required: 1, 2, 3.
//!
//! Attempt record tags (version [`ATTEMPT_RECORD_VERSION`]): 1 at_ms (`u64`),
//! 2 duration_ms (`u64`), 3 outcome (UTF-8, the label of
//! `ankusa_dispatch_attempts_total`), 4 status (`u16`, optional), 5 error
//! (UTF-8, optional), 6 response header (repeated, in order: `name_len:32,
//! name, value`), 7 response body (optional: the first bytes kept), 8
//! body_truncated (`u8` 1, written only when the body kept is not all of
//! it). Required: 1, 2, 3.

use crate::codec::Take;
use crate::error::ValueError;
use crate::ids::{LaneId, SourceId};

/// The version byte of envelopes this binary writes and reads.
pub const ENVELOPE_VERSION: u8 = 1;
/// The version byte of delivery rows this binary writes and reads.
pub const DELIVERY_ROW_VERSION: u8 = 1;
/// The version byte of attempt records (?L values) this binary writes and
/// reads.
pub const ATTEMPT_RECORD_VERSION: u8 = 1;
/// The longest ordering key a delivery row holds (the SQS group id limit; a
/// longer key is hashed at ingest, ADR 0004 section 2).
pub const ORDERING_KEY_MAX_BYTES: usize = 128;

/// The tag that ends a versioned value (no length, no bytes).
const END: u8 = 0;

/// Appends one field: `tag:8, len:32, bytes`.
///
/// # Panics
/// When `bytes` is 4 GiB or more (no hook is).
fn put_field(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    assert!(
        u32::try_from(bytes.len()).is_ok(),
        "field {tag} of {} bytes does not fit a u32 length",
        bytes.len()
    );
    out.push(tag);
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Checks the version byte and returns a reader over the fields.
fn open<'a>(value: &'a [u8], what: &'static str, version: u8) -> Result<Fields<'a>, ValueError> {
    match value.split_first() {
        Some((&v, rest)) if v == version => Ok(Fields {
            t: Take::new(rest, what),
            what,
            done: false,
        }),
        found => Err(ValueError::UnknownVersion {
            what,
            found: found.map(|(v, _)| *v),
            supported: version,
        }),
    }
}

/// The fields of a versioned value, in the order written, up to the end tag.
struct Fields<'a> {
    t: Take<'a>,
    what: &'static str,
    done: bool,
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<Option<(u8, &'a [u8])>, ValueError> {
        let tag = self.t.u8()?;
        if tag == END {
            if !self.t.is_empty() {
                return Err(ValueError::TrailingBytes { what: self.what });
            }
            return Ok(None);
        }
        let len = self.t.u32()? as usize;
        Ok(Some((tag, self.t.bytes(len)?)))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u8, &'a [u8]), ValueError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let field = self.field();
        // After the end tag or a broken field there is nothing more to read.
        self.done = !matches!(field, Ok(Some(_)));
        field.transpose()
    }
}

/// Stores `v` in a single-valued field's slot.
fn set<T>(
    slot: &mut Option<T>,
    v: T,
    what: &'static str,
    field: &'static str,
) -> Result<(), ValueError> {
    if slot.replace(v).is_some() {
        return Err(ValueError::DuplicateField { what, field });
    }
    Ok(())
}

fn required<T>(slot: Option<T>, what: &'static str, field: &'static str) -> Result<T, ValueError> {
    slot.ok_or(ValueError::MissingField { what, field })
}

fn fixed<const N: usize>(
    bytes: &[u8],
    what: &'static str,
    field: &'static str,
) -> Result<[u8; N], ValueError> {
    bytes.try_into().map_err(|_| ValueError::InvalidField {
        what,
        field,
        reason: format!("{} bytes, expected {N}", bytes.len()),
    })
}

fn text(bytes: &[u8], what: &'static str, field: &'static str) -> Result<String, ValueError> {
    String::from_utf8(bytes.to_vec()).map_err(|e| ValueError::InvalidField {
        what,
        field,
        reason: e.to_string(),
    })
}

// ---- envelope -----------------------------------------------------------

const ENV_SOURCE: u8 = 1;
const ENV_RECEIVED_AT: u8 = 2;
const ENV_METHOD: u8 = 3;
const ENV_PATH: u8 = 4;
const ENV_QUERY: u8 = 5;
const ENV_HEADER: u8 = 6;
const ENV_BODY: u8 = 7;
const ENV_DEDUPE_KEY: u8 = 8;
const ENV_IDEMPOTENCY_KEY: u8 = 9;
const ENV_REPLAY_OF: u8 = 10;

/// A stored hook (cf `hooks`, key `ord:32, seq:64`): what the provider sent,
/// after verification and the source's `store_headers` policy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// The source it came in on.
    pub source: SourceId,
    /// When it was received, unix milliseconds.
    pub received_at_ms: u64,
    /// The HTTP method, e.g. `POST`.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The query string without `?`; `None` when the URI had none.
    pub query: Option<String>,
    /// The stored headers, in the order received: `(name, value)` as bytes.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body's bytes.
    pub body: Vec<u8>,
    /// The dedupe key resolved at ingest, if the source dedupes and one was found.
    pub dedupe_key: Option<Vec<u8>>,
    /// The idempotency key: a UUIDv7's 16 bytes given at ingest, carried by
    /// every redelivery and replay of the hook.
    pub idempotency_key: [u8; 16],
    /// `Some(seq)` for a copy an archive replay made of hook `seq` of the same
    /// tenant (docs/design.md section 5, "Replayer"): the copy has its own seq
    /// and the original's idempotency key. `None` for a hook a provider sent.
    /// Tag 10, added without a version change (an earlier binary skips it).
    pub replay_of: Option<crate::ids::Seq>,
}

impl Envelope {
    /// The versioned encoding (see the module docs).
    ///
    /// # Panics
    /// When a field is 4 GiB or more.
    pub fn encode(&self) -> Vec<u8> {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| 9 + n.len() + v.len())
            .sum();
        let mut out = Vec::with_capacity(
            80 + self.method.len() + self.path.len() + headers + self.body.len(),
        );
        out.push(ENVELOPE_VERSION);
        put_field(&mut out, ENV_SOURCE, &self.source.0.to_be_bytes());
        put_field(
            &mut out,
            ENV_RECEIVED_AT,
            &self.received_at_ms.to_be_bytes(),
        );
        put_field(&mut out, ENV_METHOD, self.method.as_bytes());
        put_field(&mut out, ENV_PATH, self.path.as_bytes());
        if let Some(q) = &self.query {
            put_field(&mut out, ENV_QUERY, q.as_bytes());
        }
        for (name, value) in &self.headers {
            let mut h = Vec::with_capacity(4 + name.len() + value.len());
            assert!(u32::try_from(name.len()).is_ok(), "header name of 4 GiB");
            h.extend_from_slice(&(name.len() as u32).to_be_bytes());
            h.extend_from_slice(name);
            h.extend_from_slice(value);
            put_field(&mut out, ENV_HEADER, &h);
        }
        put_field(&mut out, ENV_BODY, &self.body);
        if let Some(k) = &self.dedupe_key {
            put_field(&mut out, ENV_DEDUPE_KEY, k);
        }
        put_field(&mut out, ENV_IDEMPOTENCY_KEY, &self.idempotency_key);
        if let Some(seq) = self.replay_of {
            put_field(&mut out, ENV_REPLAY_OF, &seq.0.to_be_bytes());
        }
        out.push(END);
        out
    }

    /// The length of [`Envelope::encode`]'s output, bytes, computed without
    /// encoding: what the hook counts against its tenant's byte bound
    /// (`ankusa_queue::hook_size`), which the edge checks before the Writer
    /// encodes it (docs/design.md section 5, "Edge", step 8).
    pub fn encoded_len(&self) -> usize {
        // A field is its tag, a u32 length and its bytes.
        let field = |len: usize| 5 + len;
        1 + field(4)
            + field(8)
            + field(self.method.len())
            + field(self.path.len())
            + self.query.as_ref().map_or(0, |q| field(q.len()))
            + self
                .headers
                .iter()
                .map(|(n, v)| field(4 + n.len() + v.len()))
                .sum::<usize>()
            + field(self.body.len())
            + self.dedupe_key.as_ref().map_or(0, |k| field(k.len()))
            + field(16)
            + self.replay_of.map_or(0, |_| field(8))
            + 1
    }

    /// The source of a stored envelope, read without decoding the rest
    /// (the dispatcher's scan needs only the source until it claims a row:
    /// docs/design.md section 5, "Scan and claim"). The fields are walked up
    /// to the source's (the first one [`Envelope::encode`] writes); a value
    /// [`Envelope::decode`] refuses may still give its source here, and the
    /// claim decodes it in full.
    ///
    /// # Errors
    /// [`ValueError::UnknownVersion`], [`ValueError::Truncated`],
    /// [`ValueError::MissingField`], [`ValueError::InvalidField`].
    pub fn peek_source(value: &[u8]) -> Result<SourceId, ValueError> {
        const WHAT: &str = "envelope";
        for field in open(value, WHAT, ENVELOPE_VERSION)? {
            let (tag, bytes) = field?;
            if tag == ENV_SOURCE {
                return Ok(SourceId(u32::from_be_bytes(fixed(bytes, WHAT, "source")?)));
            }
        }
        Err(ValueError::MissingField {
            what: WHAT,
            field: "source",
        })
    }

    /// Decodes a stored envelope.
    ///
    /// # Errors
    /// [`ValueError::UnknownVersion`], [`ValueError::Truncated`],
    /// [`ValueError::TrailingBytes`], [`ValueError::MissingField`], [`ValueError::DuplicateField`],
    /// [`ValueError::InvalidField`].
    pub fn decode(value: &[u8]) -> Result<Envelope, ValueError> {
        const WHAT: &str = "envelope";
        let (mut source, mut received_at_ms, mut method, mut path, mut query) =
            (None, None, None, None, None);
        let (mut body, mut dedupe_key, mut idempotency_key, mut replay_of) =
            (None, None, None, None);
        let mut headers = Vec::new();
        for field in open(value, WHAT, ENVELOPE_VERSION)? {
            let (tag, bytes) = field?;
            match tag {
                ENV_SOURCE => set(
                    &mut source,
                    SourceId(u32::from_be_bytes(fixed(bytes, WHAT, "source")?)),
                    WHAT,
                    "source",
                )?,
                ENV_RECEIVED_AT => set(
                    &mut received_at_ms,
                    u64::from_be_bytes(fixed(bytes, WHAT, "received_at_ms")?),
                    WHAT,
                    "received_at_ms",
                )?,
                ENV_METHOD => set(&mut method, text(bytes, WHAT, "method")?, WHAT, "method")?,
                ENV_PATH => set(&mut path, text(bytes, WHAT, "path")?, WHAT, "path")?,
                ENV_QUERY => set(&mut query, text(bytes, WHAT, "query")?, WHAT, "query")?,
                ENV_HEADER => {
                    let mut t = Take::new(bytes, WHAT);
                    let name_len = t.u32()? as usize;
                    let name = t.bytes(name_len)?.to_vec();
                    headers.push((name, t.rest().to_vec()));
                }
                ENV_BODY => set(&mut body, bytes.to_vec(), WHAT, "body")?,
                ENV_DEDUPE_KEY => set(&mut dedupe_key, bytes.to_vec(), WHAT, "dedupe_key")?,
                ENV_IDEMPOTENCY_KEY => set(
                    &mut idempotency_key,
                    fixed(bytes, WHAT, "idempotency_key")?,
                    WHAT,
                    "idempotency_key",
                )?,
                ENV_REPLAY_OF => set(
                    &mut replay_of,
                    crate::ids::Seq(u64::from_be_bytes(fixed(bytes, WHAT, "replay_of")?)),
                    WHAT,
                    "replay_of",
                )?,
                _ => {} // a field of a later binary
            }
        }
        Ok(Envelope {
            source: required(source, WHAT, "source")?,
            received_at_ms: required(received_at_ms, WHAT, "received_at_ms")?,
            method: required(method, WHAT, "method")?,
            path: required(path, WHAT, "path")?,
            query,
            headers,
            body: required(body, WHAT, "body")?,
            dedupe_key,
            idempotency_key: required(idempotency_key, WHAT, "idempotency_key")?,
            replay_of,
        })
    }
}

// ---- delivery row -------------------------------------------------------

const ROW_STATE: u8 = 1;
const ROW_SIZE: u8 = 2;
const ROW_ATTEMPTS: u8 = 3;
const ROW_FIRST_ATTEMPT_AT: u8 = 4;
const ROW_LAST_ERROR: u8 = 5;
const ROW_LANE: u8 = 6;
const ROW_ORDERING_KEY: u8 = 7;
const ROW_LANE_SEQ: u8 = 8;
const ROW_LOGGED_ATTEMPTS: u8 = 9;

/// Where a delivery row is (docs/design.md section 4, invariant 1: exactly one of ?D,
/// ?F, ?O or ?X holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum RowState {
    /// In ?D: waiting for an attempt (a lane head too, with kind 2 or 3).
    Due = 0,
    /// In ?F: claimed, its attempt running.
    InFlight = 1,
    /// In ?O: a lane member waiting its turn (ADR 0004 section 3).
    Member = 2,
    /// In ?X: a dead letter.
    Dead = 3,
}

impl RowState {
    /// Every state, by byte.
    pub const ALL: [RowState; 4] = [
        RowState::Due,
        RowState::InFlight,
        RowState::Member,
        RowState::Dead,
    ];

    /// The state byte (0..=3).
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The state whose byte is `byte`, or `None` outside 0..=3.
    pub fn from_u8(byte: u8) -> Option<RowState> {
        RowState::ALL.into_iter().find(|s| s.as_u8() == byte)
    }
}

/// A delivery row (cf `deliveries`, key `ord:32, seq:64, sink:16`): the state of
/// one hook's delivery to one sink.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeliveryRow {
    /// Where the row is.
    pub state: RowState,
    /// The row's size in bytes, as counted against the tenant's queue bounds.
    pub size: u32,
    /// Attempts made (a breaker park does not count).
    pub attempts: u32,
    /// When the first attempt was claimed, unix milliseconds; `None` before.
    pub first_attempt_at_ms: Option<u64>,
    /// The last attempt's error, for operators.
    pub last_error: Option<String>,
    /// The row's ordering lane, fixed at ingest (ADR 0004 section 2).
    pub lane: Option<LaneId>,
    /// The row's ordering key, at most [`ORDERING_KEY_MAX_BYTES`].
    pub ordering_key: Option<Vec<u8>>,
    /// The row's position in its lane (1, 2, 3, ... per lane), given when it
    /// first becomes the lane's head and kept from then on: a retry, a
    /// redelivery after a restart and a revive carry the same number (ADR 0004
    /// section 6, "The lane sequence"). `None` for a row not yet promoted and
    /// for an unlaned row.
    pub lane_seq: Option<u64>,
    /// Attempts numbered in the row's attempt log (?L), ever: the next
    /// attempt's entry is `logged_attempts + 1`. Unlike `attempts`, a revive
    /// does not reset it, so the log of a revived row goes on after its
    /// earlier attempts instead of writing over them (docs/design.md section
    /// 3, "The attempt log"). Tag 9, written when above 0; 0 for a row of a
    /// binary before the log, or of a relay that keeps none.
    pub logged_attempts: u32,
}

impl DeliveryRow {
    /// The versioned encoding (see the module docs).
    ///
    /// # Panics
    /// When `ordering_key` is longer than [`ORDERING_KEY_MAX_BYTES`] (the edge
    /// hashes longer keys: a longer one here is a broken invariant).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.push(DELIVERY_ROW_VERSION);
        put_field(&mut out, ROW_STATE, &[self.state.as_u8()]);
        put_field(&mut out, ROW_SIZE, &self.size.to_be_bytes());
        put_field(&mut out, ROW_ATTEMPTS, &self.attempts.to_be_bytes());
        if let Some(at) = self.first_attempt_at_ms {
            put_field(&mut out, ROW_FIRST_ATTEMPT_AT, &at.to_be_bytes());
        }
        if let Some(e) = &self.last_error {
            put_field(&mut out, ROW_LAST_ERROR, e.as_bytes());
        }
        if let Some(lane) = &self.lane {
            put_field(&mut out, ROW_LANE, &lane.0);
        }
        if let Some(k) = &self.ordering_key {
            assert!(
                k.len() <= ORDERING_KEY_MAX_BYTES,
                "ordering key of {} bytes (at most {ORDERING_KEY_MAX_BYTES})",
                k.len()
            );
            put_field(&mut out, ROW_ORDERING_KEY, k);
        }
        if let Some(n) = self.lane_seq {
            put_field(&mut out, ROW_LANE_SEQ, &n.to_be_bytes());
        }
        if self.logged_attempts > 0 {
            put_field(
                &mut out,
                ROW_LOGGED_ATTEMPTS,
                &self.logged_attempts.to_be_bytes(),
            );
        }
        out.push(END);
        out
    }

    /// Decodes a stored delivery row.
    ///
    /// # Errors
    /// [`ValueError::UnknownVersion`], [`ValueError::Truncated`],
    /// [`ValueError::TrailingBytes`], [`ValueError::MissingField`], [`ValueError::DuplicateField`],
    /// [`ValueError::InvalidField`] (including an unknown state and an ordering
    /// key over [`ORDERING_KEY_MAX_BYTES`]).
    pub fn decode(value: &[u8]) -> Result<DeliveryRow, ValueError> {
        const WHAT: &str = "delivery row";
        let (mut state, mut size, mut attempts, mut first_attempt_at_ms) = (None, None, None, None);
        let (mut last_error, mut lane, mut ordering_key, mut lane_seq) = (None, None, None, None);
        let mut logged_attempts = None;
        for field in open(value, WHAT, DELIVERY_ROW_VERSION)? {
            let (tag, bytes) = field?;
            match tag {
                ROW_STATE => {
                    let [b] = fixed::<1>(bytes, WHAT, "state")?;
                    let s = RowState::from_u8(b).ok_or_else(|| ValueError::InvalidField {
                        what: WHAT,
                        field: "state",
                        reason: format!("{b} is not a row state (0..=3)"),
                    })?;
                    set(&mut state, s, WHAT, "state")?;
                }
                ROW_SIZE => set(
                    &mut size,
                    u32::from_be_bytes(fixed(bytes, WHAT, "size")?),
                    WHAT,
                    "size",
                )?,
                ROW_ATTEMPTS => set(
                    &mut attempts,
                    u32::from_be_bytes(fixed(bytes, WHAT, "attempts")?),
                    WHAT,
                    "attempts",
                )?,
                ROW_FIRST_ATTEMPT_AT => set(
                    &mut first_attempt_at_ms,
                    u64::from_be_bytes(fixed(bytes, WHAT, "first_attempt_at_ms")?),
                    WHAT,
                    "first_attempt_at_ms",
                )?,
                ROW_LAST_ERROR => set(
                    &mut last_error,
                    text(bytes, WHAT, "last_error")?,
                    WHAT,
                    "last_error",
                )?,
                ROW_LANE => set(&mut lane, LaneId(fixed(bytes, WHAT, "lane")?), WHAT, "lane")?,
                ROW_ORDERING_KEY => {
                    if bytes.len() > ORDERING_KEY_MAX_BYTES {
                        return Err(ValueError::InvalidField {
                            what: WHAT,
                            field: "ordering_key",
                            reason: format!(
                                "{} bytes, at most {ORDERING_KEY_MAX_BYTES}",
                                bytes.len()
                            ),
                        });
                    }
                    set(&mut ordering_key, bytes.to_vec(), WHAT, "ordering_key")?;
                }
                ROW_LANE_SEQ => set(
                    &mut lane_seq,
                    u64::from_be_bytes(fixed(bytes, WHAT, "lane_seq")?),
                    WHAT,
                    "lane_seq",
                )?,
                ROW_LOGGED_ATTEMPTS => set(
                    &mut logged_attempts,
                    u32::from_be_bytes(fixed(bytes, WHAT, "logged_attempts")?),
                    WHAT,
                    "logged_attempts",
                )?,
                _ => {} // a field of a later binary
            }
        }
        Ok(DeliveryRow {
            state: required(state, WHAT, "state")?,
            size: required(size, WHAT, "size")?,
            attempts: required(attempts, WHAT, "attempts")?,
            first_attempt_at_ms,
            last_error,
            lane,
            ordering_key,
            lane_seq,
            logged_attempts: logged_attempts.unwrap_or(0),
        })
    }
}

// ---- attempt record -----------------------------------------------------

const ATT_AT: u8 = 1;
const ATT_DURATION: u8 = 2;
const ATT_OUTCOME: u8 = 3;
const ATT_STATUS: u8 = 4;
const ATT_ERROR: u8 = 5;
const ATT_HEADER: u8 = 6;
const ATT_BODY: u8 = 7;
const ATT_BODY_TRUNCATED: u8 = 8;

/// One attempt of a delivery row, as its attempt log keeps it (?L in cf
/// `index`, key `?L, ord:32, seq:64, sink:16, attempt:32`; docs/design.md
/// section 3, "The attempt log"): when it started, how long the sink call
/// took, how it ended, and what the destination answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AttemptRecord {
    /// When the attempt started (its row was claimed), unix milliseconds.
    pub at_ms: u64,
    /// How long the sink call took, milliseconds.
    pub duration_ms: u64,
    /// How the attempt ended: the outcome label of
    /// `ankusa_dispatch_attempts_total` (`delivered`, `retry`,
    /// `horizon_passed`, `permanent`, `sink_gone`, `source_gone`, `retired`).
    /// Text, so a later binary's new outcome still reads.
    pub outcome: String,
    /// The HTTP status the destination answered; `None` when there was no
    /// HTTP answer (a timeout, a refused connection, a broker sink).
    pub status: Option<u16>,
    /// The outcome's reason: a failed attempt's error (for a broker sink,
    /// the broker's error text); `None` for a delivery.
    pub error: Option<String>,
    /// The answer's headers, in the order received: `(name, value)`.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The first bytes of the answer's body (`node.attempt_log.max_body_bytes`
    /// at most); empty when it had none or none was kept.
    pub body: Vec<u8>,
    /// The answer's body had more than `body` holds.
    pub body_truncated: bool,
}

impl AttemptRecord {
    /// The versioned encoding (see the module docs).
    ///
    /// # Panics
    /// When a field is 4 GiB or more.
    pub fn encode(&self) -> Vec<u8> {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| 9 + n.len() + v.len())
            .sum();
        let mut out = Vec::with_capacity(
            48 + self.outcome.len()
                + self.error.as_ref().map_or(0, |e| 5 + e.len())
                + headers
                + self.body.len(),
        );
        out.push(ATTEMPT_RECORD_VERSION);
        put_field(&mut out, ATT_AT, &self.at_ms.to_be_bytes());
        put_field(&mut out, ATT_DURATION, &self.duration_ms.to_be_bytes());
        put_field(&mut out, ATT_OUTCOME, self.outcome.as_bytes());
        if let Some(status) = self.status {
            put_field(&mut out, ATT_STATUS, &status.to_be_bytes());
        }
        if let Some(e) = &self.error {
            put_field(&mut out, ATT_ERROR, e.as_bytes());
        }
        for (name, value) in &self.headers {
            assert!(u32::try_from(name.len()).is_ok(), "header name of 4 GiB");
            let mut h = Vec::with_capacity(4 + name.len() + value.len());
            h.extend_from_slice(&(name.len() as u32).to_be_bytes());
            h.extend_from_slice(name);
            h.extend_from_slice(value);
            put_field(&mut out, ATT_HEADER, &h);
        }
        if !self.body.is_empty() {
            put_field(&mut out, ATT_BODY, &self.body);
        }
        if self.body_truncated {
            put_field(&mut out, ATT_BODY_TRUNCATED, &[1]);
        }
        out.push(END);
        out
    }

    /// Decodes a stored attempt record.
    ///
    /// # Errors
    /// [`ValueError::UnknownVersion`], [`ValueError::Truncated`],
    /// [`ValueError::TrailingBytes`], [`ValueError::MissingField`],
    /// [`ValueError::DuplicateField`], [`ValueError::InvalidField`].
    pub fn decode(value: &[u8]) -> Result<AttemptRecord, ValueError> {
        const WHAT: &str = "attempt record";
        let (mut at_ms, mut duration_ms, mut outcome, mut status) = (None, None, None, None);
        let (mut error, mut body, mut body_truncated) = (None, None, None);
        let mut headers = Vec::new();
        for field in open(value, WHAT, ATTEMPT_RECORD_VERSION)? {
            let (tag, bytes) = field?;
            match tag {
                ATT_AT => set(
                    &mut at_ms,
                    u64::from_be_bytes(fixed(bytes, WHAT, "at_ms")?),
                    WHAT,
                    "at_ms",
                )?,
                ATT_DURATION => set(
                    &mut duration_ms,
                    u64::from_be_bytes(fixed(bytes, WHAT, "duration_ms")?),
                    WHAT,
                    "duration_ms",
                )?,
                ATT_OUTCOME => set(&mut outcome, text(bytes, WHAT, "outcome")?, WHAT, "outcome")?,
                ATT_STATUS => set(
                    &mut status,
                    u16::from_be_bytes(fixed(bytes, WHAT, "status")?),
                    WHAT,
                    "status",
                )?,
                ATT_ERROR => set(&mut error, text(bytes, WHAT, "error")?, WHAT, "error")?,
                ATT_HEADER => {
                    let mut t = Take::new(bytes, WHAT);
                    let name_len = t.u32()? as usize;
                    let name = t.bytes(name_len)?.to_vec();
                    headers.push((name, t.rest().to_vec()));
                }
                ATT_BODY => set(&mut body, bytes.to_vec(), WHAT, "body")?,
                ATT_BODY_TRUNCATED => {
                    let [b] = fixed::<1>(bytes, WHAT, "body_truncated")?;
                    if b != 1 {
                        return Err(ValueError::InvalidField {
                            what: WHAT,
                            field: "body_truncated",
                            reason: format!("{b}, expected 1 (the tag is left out when false)"),
                        });
                    }
                    set(&mut body_truncated, true, WHAT, "body_truncated")?;
                }
                _ => {} // a field of a later binary
            }
        }
        Ok(AttemptRecord {
            at_ms: required(at_ms, WHAT, "at_ms")?,
            duration_ms: required(duration_ms, WHAT, "duration_ms")?,
            outcome: required(outcome, WHAT, "outcome")?,
            status,
            error,
            headers,
            body: body.unwrap_or_default(),
            body_truncated: body_truncated.unwrap_or(false),
        })
    }
}
