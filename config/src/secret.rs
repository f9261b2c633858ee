//! Secrets (`env:NAME` or a literal) and the injectable environment lookup.

use std::ffi::OsString;
use std::fmt;

/// Looks up an environment variable by name: `None` when it is unset.
///
/// [`crate::Config::load`] uses the process environment ([`process_env`]);
/// tests pass a closure over a map, so they never touch the real environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// The process environment, for [`EnvLookup`].
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// Where a secret's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretOrigin {
    /// `env:NAME`, resolved when the file was loaded.
    Env(String),
    /// Written in the file itself (fine for tests and demos; use `env:` in
    /// production so the file can be shared).
    Literal,
}

/// A secret (a signing secret, a bearer token, a sink header value given as
/// `env:NAME`), resolved at load. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    origin: SecretOrigin,
}

impl Secret {
    /// A secret with this value and origin.
    pub fn new(value: impl Into<String>, origin: SecretOrigin) -> Secret {
        Secret {
            value: value.into(),
            origin,
        }
    }

    /// The value.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// The value's bytes (the HMAC key of most schemes).
    pub fn as_bytes(&self) -> &[u8] {
        self.value.as_bytes()
    }

    /// Where the value came from.
    pub fn origin(&self) -> &SecretOrigin {
        &self.origin
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            SecretOrigin::Env(name) => write!(f, "Secret(env:{name})"),
            SecretOrigin::Literal => write!(f, "Secret(literal, {} bytes)", self.value.len()),
        }
    }
}

/// Why a secret reference could not be resolved (turned into a
/// [`crate::Problem`] by the caller, who knows the option).
pub(crate) fn resolve(raw: &str, env: EnvLookup<'_>) -> Result<Secret, String> {
    let secret = match raw.strip_prefix("env:") {
        Some(name) => {
            if name.is_empty()
                || name.contains(|c: char| c == '=' || c == '\0' || c.is_whitespace())
            {
                return Err(format!(
                    "\"env:{name}\" does not name an environment variable"
                ));
            }
            match env(name) {
                None => return Err(format!("environment variable {name} is not set")),
                Some(v) => match v.into_string() {
                    Ok(v) => Secret::new(v, SecretOrigin::Env(name.to_owned())),
                    Err(_) => {
                        return Err(format!("environment variable {name} is not valid UTF-8"));
                    }
                },
            }
        }
        None => Secret::new(raw, SecretOrigin::Literal),
    };
    if secret.value.is_empty() {
        return Err(match secret.origin {
            SecretOrigin::Env(name) => format!("environment variable {name} is empty"),
            SecretOrigin::Literal => "the secret is empty".to_owned(),
        });
    }
    Ok(secret)
}

/// `url` as it may be shown in a message or a log line, since a URL often
/// comes from an `env:` secret: the password of its authority's
/// `user:password@` replaced by `***` (`amqp://guest:***@h/vhost`,
/// `redis://:***@h:6379`), or the whole userinfo when it has no `:` (a token
/// used as the user name: `nats://***@h:4222`). Only the authority is looked at
/// (an `@` in the path stays); anything else is returned as it is. The sinks
/// use the same function for their errors and start-up lines.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_owned() };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => format!("{scheme}://***@{host}{tail}"),
    }
}

#[cfg(test)]
mod redaction_tests {
    use super::redact_url as redacted_url;

    #[test]
    fn userinfo_is_hidden_and_nothing_else() {
        assert_eq!(redacted_url("https://u:pw@h.example/x"), "https://u:***@h.example/x");
        assert_eq!(redacted_url("https://ghp_token@h.example/"), "https://***@h.example/");
        // An `@` after the authority is part of the path, not userinfo.
        assert_eq!(redacted_url("http://127.0.0.1:18099/a@b"), "http://127.0.0.1:18099/a@b");
        assert_eq!(redacted_url("gopher://u:s@x/"), "gopher://u:***@x/");
        assert_eq!(redacted_url("not a url"), "not a url");
    }
}
