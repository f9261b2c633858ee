//! The output of a run as the delivered body: compact JSON, written under
//! the output bound while it is produced (docs/design.md section 6,
//! "Transforms").
//!
//! jaq's own printer writes a superset of JSON (NaN, byte strings, objects
//! with non-string keys); a body a receiver reads must be JSON, so those are
//! refused here by name. Numbers are written as jq writes them: integers in
//! full, other numbers in the shortest form that reads back the same `f64`.
//! Text strings jaq holds as bytes that are not UTF-8 are written with U+FFFD
//! in place of each bad sequence, as jq does.

use std::fmt::Write as _;

use jaq_json::{Num, Val};

/// How deep an output may nest: deeper is no JSON most receivers read
/// (serde_json stops at 128).
pub(crate) const MAX_DEPTH: usize = 512;

/// Why an output is not a body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WriteError {
    /// More bytes than the bound.
    TooLarge,
    /// Something JSON cannot say, named.
    NotJson(String),
}

/// `v` as compact JSON of at most `max` bytes.
pub(crate) fn write(v: &Val, max: usize) -> Result<Vec<u8>, WriteError> {
    let mut out = Out {
        buf: Vec::new(),
        max,
    };
    value(&mut out, v, 0)?;
    Ok(out.buf)
}

struct Out {
    buf: Vec<u8>,
    max: usize,
}

impl Out {
    fn push(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        if self.buf.len() + bytes.len() > self.max {
            return Err(WriteError::TooLarge);
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }
}

fn value(out: &mut Out, v: &Val, depth: usize) -> Result<(), WriteError> {
    if depth > MAX_DEPTH {
        return Err(WriteError::NotJson(format!(
            "it nests deeper than {MAX_DEPTH} levels"
        )));
    }
    match v {
        Val::Null => out.push(b"null"),
        Val::Bool(true) => out.push(b"true"),
        Val::Bool(false) => out.push(b"false"),
        Val::Num(n) => number(out, n),
        Val::TStr(s) => string(out, s),
        Val::BStr(_) => Err(WriteError::NotJson(
            "it holds a byte string (from tobytes or @base64d on bytes)".to_owned(),
        )),
        Val::Arr(items) => {
            out.push(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b",")?;
                }
                value(out, item, depth + 1)?;
            }
            out.push(b"]")
        }
        Val::Obj(entries) => {
            out.push(b"{")?;
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(b",")?;
                }
                let Val::TStr(key) = k else {
                    return Err(WriteError::NotJson(format!(
                        "it has an object key that is not a string: {}",
                        short(k)
                    )));
                };
                string(out, key)?;
                out.push(b":")?;
                value(out, item, depth + 1)?;
            }
            out.push(b"}")
        }
    }
}

fn number(out: &mut Out, n: &Num) -> Result<(), WriteError> {
    let float = |out: &mut Out, f: f64| match serde_json::Number::from_f64(f) {
        Some(n) => out.push(n.to_string().as_bytes()),
        None => Err(WriteError::NotJson(format!(
            "it holds the number {f} (JSON has no NaN or infinity)"
        ))),
    };
    match n {
        Num::Int(i) => out.push(i.to_string().as_bytes()),
        Num::BigInt(b) => {
            // Its digits are about bits × log10(2); a number that cannot fit
            // is refused before it is printed (printing is quadratic).
            let digits = b.bits().saturating_mul(30_103) / 100_000;
            if digits > (out.max - out.buf.len().min(out.max)) as u64 {
                return Err(WriteError::TooLarge);
            }
            out.push(b.to_string().as_bytes())
        }
        Num::Float(f) => float(out, *f),
        Num::Dec(text) => float(out, text.parse::<f64>().unwrap_or(f64::NAN)),
    }
}

fn string(out: &mut Out, bytes: &[u8]) -> Result<(), WriteError> {
    let text = String::from_utf8_lossy(bytes);
    out.push(b"\"")?;
    let mut plain = 0;
    let raw = text.as_bytes();
    for (i, &c) in raw.iter().enumerate() {
        let escaped: Option<&[u8]> = match c {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push(&raw[plain..i])?;
        match escaped {
            Some(e) => out.push(e)?,
            None => {
                let mut u = String::with_capacity(6);
                let _ = write!(u, "\\u{c:04x}");
                out.push(u.as_bytes())?;
            }
        }
        plain = i + 1;
    }
    out.push(&raw[plain..])?;
    out.push(b"\"")
}

/// A value, shortened for a message.
pub(crate) fn short(v: &Val) -> String {
    let mut s = v.to_string();
    if s.len() > 80 {
        let mut end = 77;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}
