//! Loading YAML with a fixed environment, and reading a rejection's problems.

use std::collections::HashMap;
use std::ffi::OsString;

use ankusa_config::{Config, ConfigError};

/// Loads `yaml` with an empty environment.
pub fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_yaml(yaml, &|_| None)
}

/// Loads `yaml` with exactly the variables `vars`.
pub fn load_env(yaml: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<String, OsString> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
        .collect();
    Config::from_yaml(yaml, &move |name| map.get(name).cloned())
}

/// Loads `yaml`, which must load.
pub fn ok(yaml: &str) -> Config {
    match load(yaml) {
        Ok(c) => c,
        Err(e) => panic!("expected the config to load, got: {e}\n---\n{yaml}"),
    }
}

/// The problems of a config that must be refused as invalid, displayed.
pub fn problems(result: Result<Config, ConfigError>) -> Vec<String> {
    match result {
        Ok(_) => panic!("expected the config to be refused"),
        Err(e @ ConfigError::Invalid { .. }) => {
            e.problems().iter().map(ToString::to_string).collect()
        }
        Err(e) => panic!("expected validation problems, got: {e}"),
    }
}

/// The one problem of a config that must be refused for exactly one reason.
pub fn one(yaml: &str) -> String {
    let p = problems(load(yaml));
    assert_eq!(p.len(), 1, "expected one problem, got {p:#?}\n---\n{yaml}");
    p.into_iter().next().unwrap_or_default()
}

/// A config with one source `stripe` (tenant `default`) whose only sink is
/// `sink`, a YAML flow mapping.
pub fn with_sink(sink: &str) -> String {
    format!("sources:\n  - name: stripe\n    sinks:\n      - {sink}\n")
}

/// The same, with extra source options (`extra` is indented YAML lines).
pub fn with_sink_and(extra: &str, sink: &str) -> String {
    format!("sources:\n  - name: stripe\n{extra}    sinks:\n      - {sink}\n")
}
