//! The file sink's options.

use std::path::PathBuf;

use crate::{Options, SinkError};

/// The file sink's options, validated.
///
/// ```yaml
/// sinks:
///   - type: file
///     path: ./data/deliveries.ndjson   # required; created (with its directory) if missing
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
    /// Every error names the option.
    pub fn from_options(options: &Options) -> Result<FileSinkConfig, SinkError> {
        let mut path = None;
        for (name, value) in options {
            match name.as_str() {
                "path" => {
                    let p = value
                        .as_str()
                        .ok_or_else(|| SinkError::invalid("path", "must be a string"))?;
                    path = Some(PathBuf::from(p));
                }
                _ => {
                    return Err(SinkError::UnknownOption {
                        option: name.clone(),
                    });
                }
            }
        }
        let config = FileSinkConfig {
            path: path.ok_or(SinkError::MissingOption { option: "path" })?,
        };
        config.validate()?;
        Ok(config)
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
