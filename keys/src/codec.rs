//! Private byte helpers: a writer of fixed-width big-endian arrays and a reader
//! that never panics (every read of a too-short input is a [`Short`]).

use crate::error::{KeyError, ValueError};

/// Writes big-endian fields into a fixed array of `N` bytes.
pub(crate) struct Put<const N: usize> {
    buf: [u8; N],
    at: usize,
}

impl<const N: usize> Put<N> {
    pub(crate) fn new() -> Self {
        Put { buf: [0; N], at: 0 }
    }

    pub(crate) fn bytes(mut self, bytes: &[u8]) -> Self {
        self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
        self
    }

    pub(crate) fn u8(self, v: u8) -> Self {
        self.bytes(&[v])
    }

    pub(crate) fn u16(self, v: u16) -> Self {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn u32(self, v: u32) -> Self {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn u64(self, v: u64) -> Self {
        self.bytes(&v.to_be_bytes())
    }

    /// The array; every byte must have been written.
    pub(crate) fn done(self) -> [u8; N] {
        debug_assert_eq!(self.at, N, "a fixed-width layout was not filled");
        self.buf
    }
}

/// A read past the end of the input; `what` names the key or value kind.
#[derive(Debug)]
pub(crate) struct Short {
    pub(crate) what: &'static str,
}

impl From<Short> for KeyError {
    fn from(s: Short) -> Self {
        KeyError::Truncated { what: s.what }
    }
}

impl From<Short> for ValueError {
    fn from(s: Short) -> Self {
        ValueError::Truncated { what: s.what }
    }
}

/// Reads big-endian fields from the front of a byte slice.
pub(crate) struct Take<'a> {
    rest: &'a [u8],
    what: &'static str,
}

impl<'a> Take<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Take { rest: bytes, what }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let (head, rest) = self
            .rest
            .split_first_chunk::<N>()
            .ok_or(Short { what: self.what })?;
        self.rest = rest;
        Ok(*head)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], Short> {
        let (head, rest) = self
            .rest
            .split_at_checked(n)
            .ok_or(Short { what: self.what })?;
        self.rest = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Short> {
        Ok(u8::from_be_bytes(self.array()?))
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Short> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Everything not read yet.
    pub(crate) fn rest(self) -> &'a [u8] {
        self.rest
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

/// Checks that `bytes` is exactly `N` long, for a fixed-width key.
pub(crate) fn key_len<const N: usize>(bytes: &[u8], what: &'static str) -> Result<(), KeyError> {
    if bytes.len() == N {
        Ok(())
    } else {
        Err(KeyError::WrongLength {
            what,
            expected: N,
            found: bytes.len(),
        })
    }
}

/// Checks that `bytes` is exactly `N` long, for a fixed-width value.
pub(crate) fn value_len<const N: usize>(
    bytes: &[u8],
    what: &'static str,
) -> Result<[u8; N], ValueError> {
    bytes.try_into().map_err(|_| ValueError::WrongLength {
        what,
        expected: N,
        found: bytes.len(),
    })
}
