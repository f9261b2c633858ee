//! Errors of building a sink from its options, and of flushing it.

/// An error of this crate: a sink that cannot be built from its options, or a
/// flush that failed. Delivery failures are not errors: they are
/// [`crate::Outcome`]s.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A required option is missing.
    #[error("sink option `{option}` is required")]
    MissingOption {
        /// The option's name, as in the configuration.
        option: &'static str,
    },
    /// An option the sink does not know (a typo must not be silently ignored).
    #[error("unknown sink option `{option}`")]
    UnknownOption {
        /// The option's name, as written.
        option: String,
    },
    /// An option whose value is wrong.
    #[error("sink option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name, as in the configuration (`headers.<name>` for one
        /// entry of a map).
        option: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The sink's client could not be built (TLS setup, a file that cannot be
    /// opened).
    #[error("sink could not be built: {0}")]
    Setup(String),
    /// An I/O error of a sink that writes locally (the file sink), e.g. a
    /// failed fsync on flush.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl SinkError {
    /// An [`SinkError::InvalidOption`].
    pub fn invalid(option: impl Into<String>, reason: impl Into<String>) -> SinkError {
        SinkError::InvalidOption {
            option: option.into(),
            reason: reason.into(),
        }
    }
}
