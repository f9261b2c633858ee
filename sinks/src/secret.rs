//! Keeping credentials out of errors and logs: a sink URL may carry a
//! password (`redis://:pw@host`, `amqp://user:pw@host/vhost`), often from an
//! `env:` secret, and an error that names the option must not print it.

/// `url` with the secret part of its userinfo replaced by `***`: the
/// configuration crate's [`ankusa_config::redact_url`], so a URL reads the same
/// in a load error, a sink's error and the start-up lines. (Unused in a build
/// with only the `file` sink.)
#[allow(unused_imports)]
pub(crate) use ankusa_config::redact_url;

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_replaced() {
        assert_eq!(
            redact_url("amqp://guest:guest@h:5672/%2f"),
            "amqp://guest:***@h:5672/%2f"
        );
        assert_eq!(
            redact_url("redis://:s3cr3t@redis.internal:6379/0"),
            "redis://:***@redis.internal:6379/0"
        );
        // An `@` inside the password: everything up to the last `@` is userinfo.
        assert_eq!(redact_url("redis://u:p@ss@h"), "redis://u:***@h");
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        // A user name alone may be a token (NATS token auth, a GitHub token).
        assert_eq!(redact_url("redis://user@h"), "redis://***@h");
        assert_eq!(
            redact_url("nats://natstoken123@127.0.0.1:4222"),
            "nats://***@127.0.0.1:4222"
        );
        // Only the authority: an `@` in the path is not userinfo.
        assert_eq!(
            redact_url("http://127.0.0.1:18099/a@b"),
            "http://127.0.0.1:18099/a@b"
        );
        assert_eq!(
            redact_url("amqp://u:p%40ss@h:5672/%2f"),
            "amqp://u:***@h:5672/%2f"
        );
        assert_eq!(redact_url("not a url"), "not a url");
    }
}
