//! Keeping credentials out of errors and logs: a sink URL may carry a
//! password (`redis://:pw@host`, `amqp://user:pw@host/vhost`), often from an
//! `env:` secret, and an error that names the option must not print it.

/// `url` with the password of its userinfo replaced by `***`
/// (`amqp://guest:***@h/vhost`, `redis://:***@h:6379`); a URL without one is
/// returned as it is.
pub(crate) fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((userinfo, host)) = rest.rsplit_once('@')
        && let Some((user, _)) = userinfo.split_once(':')
    {
        return format!("{scheme}://{user}:***@{host}");
    }
    url.to_owned()
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_replaced() {
        assert_eq!(redact_url("amqp://guest:guest@h:5672/%2f"), "amqp://guest:***@h:5672/%2f");
        assert_eq!(redact_url("redis://:s3cr3t@redis.internal:6379/0"), "redis://:***@redis.internal:6379/0");
        // An `@` inside the password: everything up to the last `@` is userinfo.
        assert_eq!(redact_url("redis://u:p@ss@h"), "redis://u:***@h");
        assert_eq!(redact_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact_url("redis://user@h"), "redis://user@h");
        assert_eq!(redact_url("not a url"), "not a url");
    }
}
