//! The Redis sink's delivery: the command and the answer's [`Outcome`].

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::config::{FORWARD_MEDIUM, RedisMode, RedisSinkConfig, render};
use crate::forward::{ForwardHeaders, Room};
use crate::{DeliveryCtx, Envelope, Outcome, Sink, SinkError};

/// The stream field holding the body.
const BODY_FIELD: &str = "body";
/// The stream field holding the provider's content type.
const CONTENT_TYPE_FIELD: &str = "content_type";

/// XADDs or PUBLISHes each hook (module docs: [`crate::redis`]).
pub struct RedisSink {
    /// One multiplexed connection, reconnected by the manager; cloning it
    /// shares the connection.
    conn: ConnectionManager,
    mode: RedisMode,
    target: String,
    maxlen: Option<u64>,
    timeout: Duration,
    forward: ForwardHeaders,
}

impl std::fmt::Debug for RedisSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("RedisSink")
            .field("mode", &self.mode)
            .field("target", &self.target)
            .field("maxlen", &self.maxlen)
            .field("timeout", &self.timeout)
            .field("forward", &self.forward)
            .finish_non_exhaustive()
    }
}

impl RedisSink {
    /// Validates `config` and builds the sink's connection manager. It does
    /// not connect: the first delivery does (module docs), so this works while
    /// Redis is down. Must be called inside a tokio runtime.
    pub fn new(config: &RedisSinkConfig) -> Result<RedisSink, SinkError> {
        config.validate()?;
        let client = config.client()?;
        let timeout = Duration::from_millis(config.timeout_ms);
        // Few, short reconnect attempts inside one call: the pipeline owns
        // retrying (backoff with jitter, the retry horizon).
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(1));
        let conn = client
            .get_connection_manager_lazy(manager_config)
            .map_err(|e| SinkError::Setup(format!("Redis connection manager: {e}")))?;
        Ok(RedisSink {
            conn,
            mode: config.mode,
            target: config.target.clone(),
            maxlen: config.maxlen,
            timeout,
            forward: config.forward_headers.clone(),
        })
    }

    /// The command for one delivery.
    fn command(&self, hook: &Envelope, ctx: &DeliveryCtx) -> redis::Cmd {
        let target = render(&self.target, &ctx.tenant, &ctx.source);
        match self.mode {
            RedisMode::Publish => {
                let mut cmd = redis::cmd("PUBLISH");
                cmd.arg(target).arg(hook.body.as_slice());
                cmd
            }
            RedisMode::Stream => {
                let mut cmd = redis::cmd("XADD");
                cmd.arg(target);
                if let Some(n) = self.maxlen {
                    cmd.arg("MAXLEN").arg("~").arg(n);
                }
                cmd.arg("*").arg(BODY_FIELD).arg(hook.body.as_slice());
                for (name, value) in ctx.attributes() {
                    cmd.arg(name).arg(value);
                }
                let content_type = ctx.content_type.as_deref().map(str::as_bytes).or_else(|| {
                    hook.headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
                        .map(|(_, v)| v.as_slice())
                });
                if let Some(ct) = content_type {
                    cmd.arg(CONTENT_TYPE_FIELD).arg(ct);
                }
                // The chosen provider headers, after the sink's own fields
                // (whose names they never take).
                for (name, value) in
                    self.forward
                        .select(&FORWARD_MEDIUM, hook, ctx, Room::UNLIMITED)
                {
                    cmd.arg(name).arg(value);
                }
                cmd
            }
        }
    }
}

#[async_trait]
impl Sink for RedisSink {
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome {
        let cmd = self.command(hook, ctx);
        let mut conn = self.conn.clone();
        let what = match self.mode {
            RedisMode::Stream => "XADD",
            RedisMode::Publish => "PUBLISH",
        };
        // The manager's own timeouts bound connecting and the answer; this
        // bounds the whole call (reconnect attempts included) as well.
        let answer = tokio::time::timeout(
            self.timeout.saturating_mul(2),
            cmd.query_async::<redis::Value>(&mut conn),
        )
        .await;
        match answer {
            Err(_) => Outcome::retry(format!(
                "Redis {what}: no answer within {} ms",
                self.timeout.saturating_mul(2).as_millis()
            )),
            Ok(Ok(_)) => Outcome::Ok,
            Ok(Err(e)) => classify(what, &e),
        }
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn pipelined(&self) -> bool {
        true
    }
}

/// The outcome of a failed command.
fn classify(what: &str, e: &redis::RedisError) -> Outcome {
    let reason = format!("Redis {what}: {e}");
    if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped() {
        return Outcome::retry(reason);
    }
    match e.code() {
        Some(code) => match classify_server_code(code) {
            true => Outcome::retry(reason),
            false => Outcome::permanent(reason),
        },
        // No server error code: a client-side failure (authentication,
        // protocol, connection setup); nothing says the hook is at fault.
        None => Outcome::retry(reason),
    }
}

/// Whether a Redis error code (the first word of an error reply) is worth
/// retrying: the server is loading, busy with a script, failing over, out of
/// memory or asks to try again. Every other code (`WRONGTYPE`, `ERR`,
/// `NOPERM`, ...) rejects the command itself and would again: permanent.
pub fn classify_server_code(code: &str) -> bool {
    matches!(
        code,
        "LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "CLUSTERDOWN" | "READONLY" | "OOM"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_codes() {
        for code in [
            "LOADING",
            "BUSY",
            "TRYAGAIN",
            "MASTERDOWN",
            "CLUSTERDOWN",
            "READONLY",
            "OOM",
        ] {
            assert!(classify_server_code(code), "{code}");
        }
        for code in ["WRONGTYPE", "ERR", "NOPERM", "NOSCRIPT"] {
            assert!(!classify_server_code(code), "{code}");
        }
    }

    #[test]
    fn io_errors_retry() {
        let e =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(classify("XADD", &e), Outcome::Retry { .. }));
        let e = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(matches!(classify("XADD", &e), Outcome::Retry { .. }));
    }
}
