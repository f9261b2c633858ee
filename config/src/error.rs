//! The one error type of this layer: a file that cannot be read, YAML that
//! does not parse into the schema (with line and column), or a configuration
//! that parses but is invalid (every problem found, each naming where it is and
//! which option).

use std::fmt;
use std::path::PathBuf;

/// Why a configuration was refused. An invalid file never starts the node
/// (docs/design.md section 7).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The YAML is malformed, or does not fit the schema: a syntax error, a
    /// value of the wrong type, a missing required field, or an unknown
    /// option (`deny_unknown_fields`). The message is the parser's, which
    /// names the path (`sources[0].dedupe: unknown field ...`) and the
    /// position.
    #[error("invalid config: {message}")]
    Yaml {
        /// The parser's message, with its path and position.
        message: String,
        /// 1-based line of the mistake, when the parser knows it.
        line: Option<usize>,
        /// 1-based column of the mistake, when the parser knows it.
        column: Option<usize>,
    },
    /// The YAML parses but the configuration is invalid. Every problem found
    /// is listed, in file order.
    #[error("{}", ProblemList(problems))]
    Invalid {
        /// What is wrong, at least one.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The problems of an [`ConfigError::Invalid`]; empty for the other kinds.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid { problems } => problems,
            _ => &[],
        }
    }

    pub(crate) fn from_yaml(err: &serde_yaml_ng::Error) -> ConfigError {
        let location = err.location();
        ConfigError::Yaml {
            message: plain_type_names(&err.to_string()),
            line: location.as_ref().map(serde_yaml_ng::Location::line),
            column: location.as_ref().map(serde_yaml_ng::Location::column),
        }
    }
}

/// The parser names this crate's private types (`expected struct
/// RawSource`); a user wrote a mapping: say so.
fn plain_type_names(message: &str) -> String {
    const NAMES: [(&str, &str); 17] = [
        (
            "struct RawConfig",
            "a mapping of top-level sections (node, listeners, tenants, sources, ...)",
        ),
        ("struct RawNode", "a mapping (the node section)"),
        (
            "struct RawCluster",
            "a mapping (the cluster section: node_id, etcd, advertise, lease_ttl_ms, hold_ms, name)",
        ),
        (
            "struct RawOtel",
            "a mapping (node.otel: endpoint, service_name, filter)",
        ),
        ("struct RawListeners", "a mapping (the listeners section)"),
        (
            "struct RawHeaderPolicy",
            "a mapping (a store_headers policy)",
        ),
        ("struct RawDispatch", "a mapping (the dispatch section)"),
        ("struct RawRetry", "a mapping (the retry section)"),
        ("struct RawBreaker", "a mapping (the breaker section)"),
        ("struct RawRetention", "a mapping (the retention section)"),
        ("struct RawTenant", "a mapping (a tenant)"),
        ("struct RawSource", "a mapping (a source)"),
        ("struct RawVerification", "a mapping (a verification)"),
        ("struct RawDedupe", "a mapping (a dedupe key)"),
        ("struct RawChallenge", "a mapping (a challenge)"),
        (
            "struct RawNotify",
            "a mapping (the notify section: destinations, dead_letter_window_ms, dead_letter_samples, sink_failing_after_ms, tenant_bounds_percent, max_pending)",
        ),
        (
            "struct RawDestination",
            "a mapping (a notify destination: name, url, format, headers, timeout_ms, events)",
        ),
    ];
    let mut out = message.to_owned();
    for (from, to) in NAMES {
        out = out.replace(from, to);
    }
    out
}

struct ProblemList<'a>(&'a [Problem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} problems in the config:", many.len())?;
                for p in many {
                    write!(f, "\n  - {p}")?;
                }
                Ok(())
            }
        }
    }
}

/// One thing wrong with a configuration: where, which option, and why.
///
/// Displays as `source "stripe", sink "orders" (sqs): option "ordered":
/// requires a FIFO queue (queue_url must end in .fifo)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The part of the file it is in.
    pub scope: Scope,
    /// The option, as written in the file; nested options are dotted
    /// (`verification.secrets`, `store_headers.headers.x-entity-id`).
    pub option: String,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.option.is_empty() {
            return write!(f, "{}: {}", self.scope, self.message);
        }
        write!(
            f,
            "{}: option \"{}\": {}",
            self.scope, self.option, self.message
        )
    }
}

/// Where in the file a [`Problem`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A top-level section (`node`, `listeners`, `store_headers`, `dispatch`,
    /// `retry`, `breaker`, `tenants`, `sources`).
    Section(&'static str),
    /// A tenant entry.
    Tenant {
        /// The tenant's name.
        tenant: String,
    },
    /// A source entry (its own options).
    Source {
        /// The source's name.
        source_name: String,
    },
    /// The file as a whole (an unknown top-level section).
    File,
    /// An element of a list section that has no name to call it by
    /// (`sources[2]`).
    Element {
        /// The section (`sources`, `tenants`).
        section: &'static str,
        /// Its position, from 0.
        index: usize,
    },
    /// A sink entry of a source.
    Sink {
        /// The source's name.
        source_name: String,
        /// The sink's name (given, or the default `<type>-<index>`).
        sink: String,
        /// The sink's type as written (`sqs`, `http`, ...).
        kind: String,
    },
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Section(name) => f.write_str(name),
            Scope::File => f.write_str("the file"),
            Scope::Element { section, index } => write!(f, "{section}[{index}]"),
            Scope::Tenant { tenant } => write!(f, "tenant \"{tenant}\""),
            Scope::Source { source_name } => write!(f, "source \"{source_name}\""),
            Scope::Sink {
                source_name,
                sink,
                kind,
            } => write!(f, "source \"{source_name}\", sink \"{sink}\" ({kind})"),
        }
    }
}

/// Collects problems in file order while a configuration is validated.
#[derive(Default)]
pub(crate) struct Problems(pub(crate) Vec<Problem>);

impl Problems {
    pub(crate) fn push(
        &mut self,
        scope: &Scope,
        option: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(Problem {
            scope: scope.clone(),
            option: option.into(),
            message: message.into(),
        });
    }
}
