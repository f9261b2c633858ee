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

/// A secret as the configuration writes it: `env:NAME` (the variable's
/// value, looked up in `env`) or the text itself. The error says why it
/// cannot be resolved (no such variable, an empty value, ...) without
/// quoting a value; the config's loader turns it into a [`crate::Problem`]
/// naming the option, `ankusa send --resign` into an error naming its
/// argument.
pub fn resolve(raw: &str, env: EnvLookup<'_>) -> Result<Secret, String> {
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
/// used as the user name: `nats://***@h:4222`), and the value of every query
/// parameter whose name looks like a secret replaced by `***`
/// (`https://h/in?token=***&v=2`: see [`secret_param`]). An `@` in the path
/// stays; the fragment is kept as it is; a text without `://` is returned as
/// it is. The sinks use the same function for their errors and start-up
/// lines, the binary for its banner.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        None => authority.to_owned(),
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("***@{host}"),
        },
    };
    format!("{scheme}://{authority}{}", redact_query(tail))
}

/// The path, query and fragment of a URL with the values of secret-looking
/// query parameters replaced by `***`.
fn redact_query(tail: &str) -> String {
    let (before_fragment, fragment) = match tail.find('#') {
        Some(i) => tail.split_at(i),
        None => (tail, ""),
    };
    let Some((path, query)) = before_fragment.split_once('?') else {
        return tail.to_owned();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, value)) if secret_param(name) && !value.is_empty() => format!("{name}=***"),
            _ => param.to_owned(),
        })
        .collect();
    format!("{path}?{}{fragment}", params.join("&"))
}

/// Whether a query parameter of this name carries a secret, by its name,
/// case-insensitive: it contains `token`, `key`, `secret`, `pass`, `pwd`,
/// `sig` (`sig`, `signature`, `X-Amz-Signature`), `auth` or `credential`
/// (`access_token`, `api_key`, `apikey`, `client_secret`, `password`, ...).
/// A false positive only hides a harmless value.
pub fn secret_param(name: &str) -> bool {
    const WORDS: [&str; 8] = [
        "token",
        "key",
        "secret",
        "pass",
        "pwd",
        "sig",
        "auth",
        "credential",
    ];
    let lower = name.to_ascii_lowercase();
    WORDS.iter().any(|w| lower.contains(w))
}

#[cfg(test)]
mod redaction_tests {
    use super::redact_url as redacted_url;

    #[test]
    fn userinfo_is_hidden_and_nothing_else() {
        assert_eq!(
            redacted_url("https://u:pw@h.example/x"),
            "https://u:***@h.example/x"
        );
        assert_eq!(
            redacted_url("https://ghp_token@h.example/"),
            "https://***@h.example/"
        );
        // An `@` after the authority is part of the path, not userinfo.
        assert_eq!(
            redacted_url("http://127.0.0.1:18099/a@b"),
            "http://127.0.0.1:18099/a@b"
        );
        assert_eq!(redacted_url("gopher://u:s@x/"), "gopher://u:***@x/");
        assert_eq!(redacted_url("not a url"), "not a url");
    }

    #[test]
    fn secret_query_parameters_are_hidden() {
        assert_eq!(
            redacted_url("https://u:pw@h.example/in?token=t0k&v=2&API_Key=k1#frag"),
            "https://u:***@h.example/in?token=***&v=2&API_Key=***#frag"
        );
        assert_eq!(
            redacted_url("https://h/x?sig=a&Signature=b&access_token=c&password=d&secret=e&page=3"),
            "https://h/x?sig=***&Signature=***&access_token=***&password=***&secret=***&page=3"
        );
        // No query, an empty value, a name without a value: unchanged.
        assert_eq!(
            redacted_url("https://h/x?token=&flag"),
            "https://h/x?token=&flag"
        );
        assert_eq!(
            redacted_url("https://h/x#token=abc"),
            "https://h/x#token=abc"
        );
        assert_eq!(redacted_url("http://h?key=v"), "http://h?key=***");
    }
}
