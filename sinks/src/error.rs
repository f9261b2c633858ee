//! Errors of building a sink from its options, and of flushing it; and
//! [`OptionProblems`], the collector every adapter's `from_options` reports
//! all its problems through.

use crate::Options;

/// An error of this crate: a sink that cannot be built from its options, or a
/// flush that failed. Delivery failures are not errors: they are
/// [`crate::Outcome`]s.
///
/// A `from_options` (or `validate`) that finds one problem returns it as its
/// own variant ([`SinkError::MissingOption`], [`SinkError::UnknownOption`],
/// [`SinkError::InvalidOption`]); one that finds several returns them all in
/// one [`SinkError::Options`]. [`SinkError::problems`] lists them either way.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A required option is missing.
    #[error("sink option `{option}` is required")]
    MissingOption {
        /// The option's name, as in the configuration.
        option: &'static str,
    },
    /// An option the sink does not know (a typo must not be silently ignored).
    #[error("unknown sink option `{option}` (valid: {})", known.join(", "))]
    UnknownOption {
        /// The option's name, as written (`declare.<name>` for one key of a
        /// map option).
        option: String,
        /// The option names valid where it was written (the sink's options;
        /// `declare.type`, `declare.durable` for a key of `declare`).
        known: &'static [&'static str],
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
    /// Every problem of a sink's options, when there are two or more: each
    /// one a [`SinkError::MissingOption`], [`SinkError::UnknownOption`] or
    /// [`SinkError::InvalidOption`], in the order of the options (see
    /// [`OptionProblems::sort_as_written`]). Built by [`OptionProblems`],
    /// which never nests one in another nor makes one of a single problem.
    #[error("{} problems: {}", .0.len(), listed(.0))]
    Options(Vec<SinkError>),
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

/// The problems of a [`SinkError::Options`], one after the other.
fn listed(problems: &[SinkError]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl SinkError {
    /// An [`SinkError::InvalidOption`].
    pub fn invalid(option: impl Into<String>, reason: impl Into<String>) -> SinkError {
        SinkError::InvalidOption {
            option: option.into(),
            reason: reason.into(),
        }
    }

    /// The problems this error stands for: those of a
    /// [`SinkError::Options`], else the error itself.
    pub fn problems(&self) -> &[SinkError] {
        match self {
            SinkError::Options(all) => all,
            one => std::slice::from_ref(one),
        }
    }

    /// [`SinkError::problems`], owned.
    pub fn into_problems(self) -> Vec<SinkError> {
        match self {
            SinkError::Options(all) => all,
            one => vec![one],
        }
    }

    /// The option a [`SinkError::MissingOption`], [`SinkError::UnknownOption`]
    /// or [`SinkError::InvalidOption`] names; `None` for any other error.
    pub fn option(&self) -> Option<&str> {
        match self {
            SinkError::MissingOption { option } => Some(option),
            SinkError::UnknownOption { option, .. } | SinkError::InvalidOption { option, .. } => {
                Some(option)
            }
            _ => None,
        }
    }
}

/// The problems of one sink's options, collected so that `from_options`
/// reports every one of them in one run instead of stopping at the first.
///
/// An adapter reads every option, [`push`](OptionProblems::push)ing a problem
/// and keeping a placeholder for a value it could not read; it then checks
/// each value (and each rule between options) only when
/// [`ok`](OptionProblems::ok) says its inputs are real, so a broken option is
/// reported once and never causes a second, spurious problem elsewhere.
/// [`finish`](OptionProblems::finish) returns the config when there is no
/// problem, the problem itself when there is one, and a
/// [`SinkError::Options`] when there are more.
#[derive(Debug, Default)]
pub struct OptionProblems {
    problems: Vec<SinkError>,
    /// Options whose value in the config being built is a placeholder
    /// without a problem of their own (a target whose mode is unknown).
    placeholders: Vec<String>,
}

impl OptionProblems {
    /// No problems yet.
    pub fn new() -> OptionProblems {
        OptionProblems::default()
    }

    /// Records `e`: each problem of a [`SinkError::Options`], else `e` itself.
    pub fn push(&mut self, e: SinkError) {
        self.problems.extend(e.into_problems());
    }

    /// Records a [`SinkError::InvalidOption`].
    pub fn invalid(&mut self, option: impl Into<String>, reason: impl Into<String>) {
        self.push(SinkError::invalid(option, reason));
    }

    /// Records a [`SinkError::MissingOption`].
    pub fn missing(&mut self, option: &'static str) {
        self.push(SinkError::MissingOption { option });
    }

    /// Records a [`SinkError::UnknownOption`]: `option` is not one of
    /// `known`.
    pub fn unknown(&mut self, option: impl Into<String>, known: &'static [&'static str]) {
        self.push(SinkError::UnknownOption {
            option: option.into(),
            known,
        });
    }

    /// The value of `r`, or `None` after recording its error.
    pub fn take<T>(&mut self, r: Result<T, SinkError>) -> Option<T> {
        r.map_err(|e| self.push(e)).ok()
    }

    /// Records that the config being built holds a placeholder for
    /// `option`, though the option itself has no problem (another option it
    /// depends on is broken): [`OptionProblems::ok`] is then false for it.
    pub fn placeholder(&mut self, option: impl Into<String>) {
        self.placeholders.push(option.into());
    }

    /// Whether `option`'s value is real: no problem names it and it is no
    /// [`placeholder`](OptionProblems::placeholder). A check of an option (or
    /// a rule between options) runs only when this holds for its inputs.
    pub fn ok(&self, option: &str) -> bool {
        !self.problems.iter().any(|e| e.option() == Some(option))
            && !self.placeholders.iter().any(|p| p == option)
    }

    /// Whether no problem is recorded.
    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// How many problems are recorded.
    pub fn len(&self) -> usize {
        self.problems.len()
    }

    /// `value` as a string, or `None` after recording "must be a string".
    pub fn string(&mut self, option: &str, value: &serde_json::Value) -> Option<String> {
        match value.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                self.invalid(option, "must be a string");
                None
            }
        }
    }

    /// `value` as a whole number, or `None` after recording "must be a whole
    /// number of `unit`".
    pub fn whole(&mut self, option: &str, value: &serde_json::Value, unit: &str) -> Option<u64> {
        let n = value.as_u64();
        if n.is_none() {
            self.invalid(option, format!("must be a whole number of {unit}"));
        }
        n
    }

    /// `value` as a boolean, or `None` after recording "must be true or
    /// false".
    pub fn boolean(&mut self, option: &str, value: &serde_json::Value) -> Option<bool> {
        let b = value.as_bool();
        if b.is_none() {
            self.invalid(option, "must be true or false");
        }
        b
    }

    /// Orders the problems as their options are in `options` (the map's
    /// order, then for one entry of a map option the entry's order in that
    /// map); problems of options not in it (missing ones) come last. The sort
    /// is stable: problems of one option keep the order they were found in.
    pub fn sort_as_written(&mut self, options: &Options) {
        let position = |e: &SinkError| -> (usize, usize) {
            let Some(option) = e.option() else {
                return (usize::MAX, usize::MAX);
            };
            for (i, (name, value)) in options.iter().enumerate() {
                if option == name {
                    return (i, 0);
                }
                if let Some(entry) = option
                    .strip_prefix(name.as_str())
                    .and_then(|rest| rest.strip_prefix('.'))
                {
                    let j = value
                        .as_object()
                        .and_then(|m| m.keys().position(|k| k == entry))
                        .map_or(usize::MAX, |j| j + 1);
                    return (i, j);
                }
            }
            (usize::MAX, 0)
        };
        self.problems.sort_by_key(position);
    }

    /// `Ok(())` without problems, else the one problem, else every problem as
    /// a [`SinkError::Options`].
    pub fn into_result(self) -> Result<(), SinkError> {
        self.finish(())
    }

    /// `Ok(value)` without problems, else the one problem, else every problem
    /// as a [`SinkError::Options`].
    pub fn finish<T>(mut self, value: T) -> Result<T, SinkError> {
        match self.problems.len() {
            0 => Ok(value),
            1 => Err(self.problems.remove(0)),
            _ => Err(SinkError::Options(self.problems)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_problem_is_itself_and_several_are_listed_in_option_order() {
        let mut p = OptionProblems::new();
        assert!(p.ok("url"));
        p.missing("url");
        assert!(!p.ok("url"));
        let e = p.finish(()).expect_err("a problem");
        assert!(matches!(e, SinkError::MissingOption { option: "url" }));
        assert_eq!(e.to_string(), "sink option `url` is required");

        let options = match serde_json::json!({"b": 1, "a": 2, "h": {"y": "1", "x": "2"}}) {
            serde_json::Value::Object(m) => m,
            _ => unreachable!(),
        };
        let mut p = OptionProblems::new();
        p.missing("url");
        p.invalid("h.x", "bad x");
        p.unknown("b", &["a", "h"]);
        p.invalid("h.y", "bad y");
        p.push(SinkError::Options(vec![
            SinkError::invalid("a", "bad a"),
            SinkError::invalid("h", "bad h"),
        ]));
        assert_eq!(p.len(), 6);
        p.sort_as_written(&options);
        let e = p.finish(()).expect_err("problems");
        let names: Vec<_> = e.problems().iter().filter_map(SinkError::option).collect();
        // serde_json's map is ordered by name.
        assert_eq!(names, ["a", "b", "h", "h.x", "h.y", "url"]);
        assert_eq!(
            e.to_string(),
            "6 problems: sink option `a`: bad a; unknown sink option `b` (valid: a, h); \
             sink option `h`: bad h; sink option `h.x`: bad x; sink option `h.y`: bad y; \
             sink option `url` is required"
        );
        assert_eq!(e.into_problems().len(), 6);
    }

    #[test]
    fn placeholders_are_not_ok_and_readers_record_type_errors() {
        let mut p = OptionProblems::new();
        p.placeholder("stream");
        assert!(!p.ok("stream"));
        assert!(p.is_empty());
        assert_eq!(p.string("s", &serde_json::json!(1)), None);
        assert_eq!(p.whole("n", &serde_json::json!(-1), "bytes"), None);
        assert_eq!(p.whole("n2", &serde_json::json!(3), "bytes"), Some(3));
        assert_eq!(p.boolean("b", &serde_json::json!("no")), None);
        assert_eq!(p.take::<()>(Err(SinkError::invalid("t", "bad"))), None);
        let e = p.into_result().expect_err("four problems");
        let texts: Vec<String> = e.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "sink option `s`: must be a string",
                "sink option `n`: must be a whole number of bytes",
                "sink option `b`: must be true or false",
                "sink option `t`: bad",
            ]
        );
    }
}
