//! The two errors of this layer: a key that is not a key of the family it was
//! decoded as ([`KeyError`]), and a value that does not have its layout
//! ([`ValueError`]). Both mean a corrupt store (or a caller that decoded the wrong
//! family); callers wrap them in their own layer's error.

use crate::index::Family;

/// A key that does not decode as the family it was read as.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A fixed-width key of the wrong length.
    #[error("{what} key is {found} bytes, expected {expected}")]
    WrongLength {
        /// The key family, e.g. `?D due`, `hooks`.
        what: &'static str,
        /// The family's key width in bytes.
        expected: usize,
        /// The length found.
        found: usize,
    },
    /// A variable-width key shorter than its fixed part.
    #[error("{what} key is truncated")]
    Truncated {
        /// The key family.
        what: &'static str,
    },
    /// An index key whose first byte is another family's (or no family's).
    #[error("index key of family {found:#04x} read as {expected:?}")]
    WrongFamily {
        /// The family the caller decoded as.
        expected: Family,
        /// The first byte of the key.
        found: u8,
    },
    /// A byte that names no index family.
    #[error("{0:#04x} is not an index family byte")]
    UnknownFamily(u8),
    /// A meta key that does not begin with the prefix of its kind.
    #[error("meta key does not begin with the {what} prefix")]
    WrongPrefix {
        /// The meta key kind, e.g. `tenant by name`.
        what: &'static str,
    },
    /// A key carrying an ordinal no key of its family may carry: `u32::MAX`
    /// (reserved for sentinels, docs/design.md section 3) anywhere, or 0 (the node
    /// aggregate) outside the counter family.
    #[error("{what} key carries the reserved tenant ordinal {ord}")]
    ReservedOrdinal {
        /// The key family.
        what: &'static str,
        /// The ordinal found.
        ord: u32,
    },
    /// A counter key whose field byte is not one of 1..=13.
    #[error("counter field {0} is unknown (fields are 1..=13)")]
    UnknownCounterField(u8),
    /// A name in a meta registry key that is not UTF-8.
    #[error("{what} key holds a name that is not UTF-8")]
    NotUtf8 {
        /// The meta key kind.
        what: &'static str,
    },
}

/// A value that does not have the layout of its family (docs/design.md section 3).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// A fixed-width value of the wrong length.
    #[error("{what} value is {found} bytes, expected {expected}")]
    WrongLength {
        /// The value kind, e.g. `?D due`.
        what: &'static str,
        /// The layout's width in bytes.
        expected: usize,
        /// The length found.
        found: usize,
    },
    /// A value that ends inside a field (a versioned value cut short, or a
    /// variable-width value shorter than its fixed part).
    #[error("{what} value is truncated")]
    Truncated {
        /// The value kind.
        what: &'static str,
    },
    /// A versioned value with bytes after its end tag.
    #[error("{what} value has bytes after its end tag")]
    TrailingBytes {
        /// The value kind.
        what: &'static str,
    },
    /// An empty value, or a version byte this binary does not know.
    #[error("{what} value has version {found:?}, this binary reads version {supported}")]
    UnknownVersion {
        /// The value kind.
        what: &'static str,
        /// The version byte found (`None` for an empty value).
        found: Option<u8>,
        /// The version this binary writes and reads.
        supported: u8,
    },
    /// A versioned value without one of its required fields.
    #[error("{what} value lacks its required field {field}")]
    MissingField {
        /// The value kind.
        what: &'static str,
        /// The field's name.
        field: &'static str,
    },
    /// A versioned value holding a single-valued field twice.
    #[error("{what} value holds field {field} more than once")]
    DuplicateField {
        /// The value kind.
        what: &'static str,
        /// The field's name.
        field: &'static str,
    },
    /// A field whose bytes are not what the field holds (wrong width, not
    /// UTF-8, an enum byte out of range, a length over its bound).
    #[error("{what} value: field {field} is invalid: {reason}")]
    InvalidField {
        /// The value kind.
        what: &'static str,
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}
