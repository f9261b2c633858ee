//! The file sink's options.

use std::path::PathBuf;

use crate::{OptionProblems, Options, SinkError};

/// The options of a file sink.
const OPTIONS: &[&str] = &["path"];

/// The file sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: file
///     path: ./deliveries.ndjson   # required; created (with its directory) if missing; not inside node.data_dir
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSinkConfig {
    /// The NDJSON file lines are appended to. A relative path is relative to
    /// the process's working directory.
    pub path: PathBuf,
}

impl FileSinkConfig {
    /// Where this sink delivers, for the relay's start-up lines and logs
    /// (a URL's password replaced by `***`; templates as configured).
    pub fn target(&self) -> String {
        self.path.display().to_string()
    }

    /// Reads and validates the option `path`; any other option is an error.
    /// Every error names the option, and every problem of `options` is
    /// reported ([`SinkError::Options`] when there are several).
    pub fn from_options(options: &Options) -> Result<FileSinkConfig, SinkError> {
        let mut p = OptionProblems::new();
        let mut path = None;
        for (name, value) in options {
            match name.as_str() {
                "path" => path = p.string("path", value).map(PathBuf::from),
                _ => p.unknown(name.clone(), OPTIONS),
            }
        }
        if path.is_none() && p.ok("path") {
            p.missing("path");
        }
        let config = FileSinkConfig {
            path: path.unwrap_or_default(),
        };
        if p.ok("path") {
            p.take(config.validate());
        }
        p.sort_as_written(options);
        p.finish(config)
    }

    /// Checks the path is not empty and does not name a directory by its form
    /// (`dir/`).
    pub fn validate(&self) -> Result<(), SinkError> {
        let s = self.path.as_os_str();
        if s.is_empty() {
            return Err(SinkError::invalid("path", "must not be empty"));
        }
        if s.as_encoded_bytes().ends_with(b"/") {
            return Err(SinkError::invalid("path", "names a directory, not a file"));
        }
        Ok(())
    }
}
