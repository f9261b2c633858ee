//! A file whose YAML does not fit the schema (an unknown option, a value of
//! the wrong type) still gets every problem reported in one run: the parser
//! stops at its first error, so each top-level section, and each element of a
//! list section (`sources`, `tenants`), is parsed on its own; the parts that
//! fit are then validated as usual, and their problems join the parser's.
//! With exactly one problem in all, the parser's own error (with its line and
//! column) is returned as it is.

use serde_yaml_ng::{Mapping, Value};

use crate::error::{ConfigError, Problem, Scope};
use crate::raw::RawConfig;
use crate::secret::EnvLookup;
use crate::{SourceCheck, validate};

/// The top-level sections, for [`Scope::Section`].
const SECTIONS: [&str; 10] = [
    "node",
    "listeners",
    "store_headers",
    "dispatch",
    "retry",
    "breaker",
    "retention",
    "tenants",
    "sources",
    "notify",
];

/// Every problem of `text`, which the parser refused with `first`.
pub(crate) fn every_problem(
    text: &str,
    first: &serde_yaml_ng::Error,
    env: EnvLookup<'_>,
    check: SourceCheck<'_>,
) -> ConfigError {
    let first_error = ConfigError::from_yaml(first);
    let Ok(Value::Mapping(top)) = serde_yaml_ng::from_str::<Value>(text) else {
        return first_error;
    };
    let mut problems = Vec::new();
    let mut kept = Mapping::new();
    for (key, value) in &top {
        if fits(key, value) {
            kept.insert(key.clone(), value.clone());
            continue;
        }
        let Value::Sequence(list) = value else {
            problems.push(problem(key, None, value, value));
            // A mapping section: keep its options that fit alone, so the
            // checks that read them (sink paths against node.data_dir) see
            // the file's values, not the defaults: one bad option is one
            // problem.
            if let Value::Mapping(options) = value {
                let fitting: Mapping = options
                    .iter()
                    .filter(|(k, v)| {
                        let mut one = Mapping::new();
                        one.insert((*k).clone(), (*v).clone());
                        fits(key, &Value::Mapping(one))
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !fitting.is_empty() && fits(key, &Value::Mapping(fitting.clone())) {
                    kept.insert(key.clone(), Value::Mapping(fitting));
                }
            }
            continue;
        };
        // A list section: keep the elements that fit, report the others.
        let mut good = Vec::new();
        for (i, element) in list.iter().enumerate() {
            let one = Value::Sequence(vec![element.clone()]);
            if fits(key, &one) {
                good.push(element.clone());
            } else {
                problems.push(problem(key, Some(i), element, &one));
            }
        }
        kept.insert(key.clone(), Value::Sequence(good));
    }
    if problems.is_empty() {
        return first_error;
    }
    // The parser's first error, from the whole text, has the full path and
    // the line: it is the first problem found above (sections and elements
    // are tried in file order), so let it say where.
    if let Some((path, what)) = split_path(&first.to_string()) {
        let p0 = &mut problems[0];
        let inner = path
            .split_once('.')
            .map(|(_, rest)| rest.to_owned())
            .unwrap_or_default();
        if p0.option.is_empty() || inner.ends_with(p0.option.as_str()) {
            p0.option = inner;
            p0.message = what;
        }
    }
    match serde_yaml_ng::from_value::<RawConfig>(Value::Mapping(kept)) {
        Ok(raw) => {
            if let Err(ConfigError::Invalid { problems: more }) = validate::config(raw, env, check)
            {
                problems.extend(more);
            }
        }
        Err(_) => return first_error,
    }
    if problems.len() == 1 {
        return first_error;
    }
    ConfigError::Invalid { problems }
}

/// Whether `{key: value}` alone parses.
fn fits(key: &Value, value: &Value) -> bool {
    let mut one = Mapping::new();
    one.insert(key.clone(), value.clone());
    serde_yaml_ng::from_value::<RawConfig>(Value::Mapping(one)).is_ok()
}

/// The parser's complaint about `{key: value}` (element `index` of a list
/// section when given), as a [`Problem`] that names where it is: the section,
/// or the source/tenant by its name.
fn problem(key: &Value, index: Option<usize>, element: &Value, value: &Value) -> Problem {
    let mut one = Mapping::new();
    one.insert(key.clone(), value.clone());
    let message = match serde_yaml_ng::from_value::<RawConfig>(Value::Mapping(one)) {
        Err(e) => e.to_string(),
        Ok(_) => String::from("does not fit the schema"),
    };
    let key_text = key.as_str().unwrap_or("?");
    // The parser's path: `sources[0].verification: unknown field ...`; the
    // element was parsed alone, so its index is 0: put the real one back.
    let (path, what) = split_path(&message).unwrap_or_else(|| (String::new(), message.clone()));
    let inner = path
        .strip_prefix(key_text)
        .map(|rest| rest.strip_prefix("[0]").unwrap_or(rest))
        .map(|rest| rest.trim_start_matches('.').to_owned())
        .unwrap_or_default();
    let name = element
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let scope = match (key_text, name, index) {
        ("sources", Some(source_name), _) => Scope::Source { source_name },
        ("tenants", Some(tenant), _) => Scope::Tenant { tenant },
        (_, _, Some(i)) => Scope::Element {
            section: section(key_text),
            index: i,
        },
        _ => match SECTIONS.iter().find(|s| **s == key_text) {
            Some(s) => Scope::Section(s),
            None => Scope::File,
        },
    };
    Problem {
        scope,
        option: inner,
        message: what,
    }
}

fn section(key: &str) -> &'static str {
    SECTIONS.iter().find(|s| **s == key).copied().unwrap_or("?")
}

/// `sources[0].verification: unknown field ...` as its path and the rest;
/// `None` when the message has no path.
fn split_path(message: &str) -> Option<(String, String)> {
    let (path, what) = message.split_once(": ")?;
    (!path.contains(' ')).then(|| (path.to_owned(), what.to_owned()))
}
