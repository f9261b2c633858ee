//! What the relay and a transform worker process say to each other over the
//! worker's stdin and stdout (docs/design.md section 6, "Transforms"): one
//! request, one answer, in turn.
//!
//! - A request: the program's text, its `timeout_ms` and
//!   `max_output_bytes`, and the body, each length a little-endian `u64`
//!   before its bytes.
//! - An answer: a tag byte (0 a body, else which [`RunError`]), a
//!   little-endian `u64` (a count the error carries, or 0) and the bytes of
//!   the body or of the error's words, length first.
//!
//! Both ends are the same executable (the relay starts its own file), so
//! the format needs no version; a malformed message means the other end is
//! broken, and that end is ended.

use std::io::{self, Read, Write};

use crate::{Limits, RunError};

/// The longest program text a worker reads: 1 MiB (a transform is a few
/// lines).
pub(crate) const MAX_PROGRAM_BYTES: u64 = 1 << 20;
/// The longest body a worker reads: 1 GiB, far above any body the edge takes.
pub(crate) const MAX_BODY_BYTES: u64 = 1 << 30;
/// The longest error words in an answer: a jaq message is shortened to
/// 1 KiB; this leaves room for the rest.
pub(crate) const MAX_WORDS_BYTES: u64 = 64 << 10;

/// One run asked of a worker.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) text: String,
    pub(crate) limits: Limits,
    pub(crate) body: Vec<u8>,
}

/// The request for a run of `text` under `limits` on `body`, as bytes.
pub(crate) fn request(text: &str, limits: Limits, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + text.len() + 32);
    put_bytes(&mut out, text.as_bytes());
    out.extend_from_slice(&limits.timeout_ms.to_le_bytes());
    out.extend_from_slice(&limits.max_output_bytes.to_le_bytes());
    put_bytes(&mut out, body);
    out
}

/// The next request on `input`; `None` at its end (the relay is gone).
///
/// # Errors
/// A request cut short or over its bounds.
pub(crate) fn read_request(input: &mut impl Read) -> io::Result<Option<Request>> {
    let mut first = [0u8; 8];
    match input.read(&mut first[..1])? {
        0 => return Ok(None),
        _ => input.read_exact(&mut first[1..])?,
    }
    let text_len = u64::from_le_bytes(first);
    let text = String::from_utf8(read_exactly(input, text_len, MAX_PROGRAM_BYTES)?)
        .map_err(|_| malformed("a program that is not UTF-8"))?;
    let timeout_ms = read_u64(input)?;
    let max_output_bytes = read_u64(input)?;
    let body_len = read_u64(input)?;
    let body = read_exactly(input, body_len, MAX_BODY_BYTES)?;
    Ok(Some(Request {
        text,
        limits: Limits {
            timeout_ms,
            max_output_bytes,
        },
        body,
    }))
}

/// `answer` written to `output`.
///
/// # Errors
/// The write's.
pub(crate) fn write_answer(
    output: &mut impl Write,
    answer: &Result<Vec<u8>, RunError>,
) -> io::Result<()> {
    let (tag, n, bytes): (u8, u64, &[u8]) = match answer {
        Ok(body) => (0, 0, body),
        Err(RunError::BodyNotJson(s)) => (1, 0, s.as_bytes()),
        Err(RunError::Program(s)) => (2, 0, s.as_bytes()),
        Err(RunError::NoOutput) => (3, 0, b""),
        Err(RunError::ManyOutputs) => (4, 0, b""),
        Err(RunError::Timeout(ms)) => (5, *ms, b""),
        Err(RunError::TooDeep) => (6, 0, b""),
        Err(RunError::OutputTooLarge(max)) => (7, *max, b""),
        Err(RunError::OutputNotJson(s)) => (8, 0, s.as_bytes()),
        // The exit code's bits, read back as an i32.
        Err(RunError::Halted(code)) => (9, u64::from(code.cast_unsigned()), b""),
        Err(RunError::Failed(s)) => (10, 0, s.as_bytes()),
        Err(RunError::Unavailable(s)) => (11, 0, s.as_bytes()),
    };
    let mut head = [0u8; 17];
    head[0] = tag;
    head[1..9].copy_from_slice(&n.to_le_bytes());
    head[9..].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
    output.write_all(&head)?;
    output.write_all(bytes)?;
    output.flush()
}

/// The length of an answer's bytes, from its 17-byte head, refused when it
/// is over what a run under `limits` can answer.
///
/// # Errors
/// A head over the bound.
pub(crate) fn answer_len(head: &[u8; 17], limits: Limits) -> io::Result<u64> {
    let len = u64::from_le_bytes(
        head[9..]
            .try_into()
            .map_err(|_| malformed("a short head"))?,
    );
    let max = if head[0] == 0 {
        limits.max_output_bytes
    } else {
        MAX_WORDS_BYTES
    };
    if len > max {
        return Err(malformed("an answer longer than its bound"));
    }
    Ok(len)
}

/// The answer of a 17-byte head and its bytes.
///
/// # Errors
/// An unknown tag or words that are not UTF-8.
pub(crate) fn answer(head: &[u8; 17], bytes: Vec<u8>) -> io::Result<Result<Vec<u8>, RunError>> {
    let n = u64::from_le_bytes(
        head[1..9]
            .try_into()
            .map_err(|_| malformed("a short head"))?,
    );
    let words = || String::from_utf8(bytes.clone()).map_err(|_| malformed("words not UTF-8"));
    Ok(Err(match head[0] {
        0 => return Ok(Ok(bytes)),
        1 => RunError::BodyNotJson(words()?),
        2 => RunError::Program(words()?),
        3 => RunError::NoOutput,
        4 => RunError::ManyOutputs,
        5 => RunError::Timeout(n),
        6 => RunError::TooDeep,
        7 => RunError::OutputTooLarge(n),
        8 => RunError::OutputNotJson(words()?),
        9 => RunError::Halted(u32::try_from(n).unwrap_or(u32::MAX).cast_signed()),
        10 => RunError::Failed(words()?),
        11 => RunError::Unavailable(words()?),
        _ => return Err(malformed("an unknown answer tag")),
    }))
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn read_u64(input: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    input.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_exactly(input: &mut impl Read, len: u64, max: u64) -> io::Result<Vec<u8>> {
    if len > max {
        return Err(malformed("a length over its bound"));
    }
    let mut buf = Vec::new();
    input.take(len).read_to_end(&mut buf)?;
    if buf.len() as u64 != len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(buf)
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("a malformed transform message: {what}"),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn round_trip(a: Result<Vec<u8>, RunError>) -> Result<Vec<u8>, RunError> {
        let mut out = Vec::new();
        write_answer(&mut out, &a).unwrap();
        let head: [u8; 17] = out[..17].try_into().unwrap();
        let limits = Limits::default();
        assert_eq!(answer_len(&head, limits).unwrap() as usize, out.len() - 17);
        answer(&head, out[17..].to_vec()).unwrap()
    }

    #[test]
    fn every_answer_reads_back_as_written() {
        let all = [
            Ok(b"{\"a\":1}".to_vec()),
            Ok(Vec::new()),
            Err(RunError::BodyNotJson("expected value at line 1".into())),
            Err(RunError::Program("no customer".into())),
            Err(RunError::NoOutput),
            Err(RunError::ManyOutputs),
            Err(RunError::Timeout(250)),
            Err(RunError::TooDeep),
            Err(RunError::OutputTooLarge(1024)),
            Err(RunError::OutputNotJson("NaN".into())),
            Err(RunError::Halted(5)),
            Err(RunError::Halted(-1)),
            Err(RunError::Failed("a panic".into())),
            Err(RunError::Unavailable("no thread".into())),
        ];
        for a in all {
            assert_eq!(round_trip(a.clone()), a);
        }
    }

    #[test]
    fn a_request_reads_back_and_the_end_is_none() {
        let limits = Limits {
            timeout_ms: 7,
            max_output_bytes: 99,
        };
        let mut bytes = request(".a", limits, b"{\"a\":1}");
        bytes.extend(request("é", Limits::default(), b""));
        let mut input = &bytes[..];
        assert_eq!(
            read_request(&mut input).unwrap(),
            Some(Request {
                text: ".a".into(),
                limits,
                body: b"{\"a\":1}".to_vec()
            })
        );
        assert_eq!(
            read_request(&mut input).unwrap(),
            Some(Request {
                text: "é".into(),
                limits: Limits::default(),
                body: Vec::new()
            })
        );
        assert_eq!(read_request(&mut input).unwrap(), None);
    }

    #[test]
    fn a_cut_or_oversized_message_is_refused() {
        let bytes = request(".", Limits::default(), b"{}");
        let mut cut = &bytes[..bytes.len() - 1];
        assert_eq!(
            read_request(&mut cut).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        let mut huge = Vec::new();
        huge.extend_from_slice(&(MAX_PROGRAM_BYTES + 1).to_le_bytes());
        assert_eq!(
            read_request(&mut &huge[..]).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // A body answer longer than the run's output bound.
        let mut out = Vec::new();
        write_answer(&mut out, &Ok(vec![b'1'; 11])).unwrap();
        let head: [u8; 17] = out[..17].try_into().unwrap();
        let small = Limits {
            timeout_ms: 1,
            max_output_bytes: 10,
        };
        assert!(answer_len(&head, small).is_err());
        let mut bad = head;
        bad[0] = 200;
        assert!(answer(&bad, Vec::new()).is_err());
    }
}
