//! The sink adapters this binary is built with (docs/design.md section 6): one arm
//! per kind, each behind the root package's cargo feature of the same name
//! (`http` and `file` are always in). `check` is what `check-config` and
//! `serve` run before opening the store; `build` makes the sink at start.

use std::sync::Arc;

use ankusa_config::{SinkEntry, SinkKind};
use ankusa_sinks::{Options, Sink, SinkError};
use anyhow::anyhow;

/// The kinds this binary has, for the error naming a missing one.
const BUILT: &[&str] = &[
    "http",
    "file",
    #[cfg(feature = "redis")]
    "redis",
    #[cfg(feature = "rabbitmq")]
    "rabbitmq",
    #[cfg(feature = "nats")]
    "nats",
    #[cfg(feature = "sqs")]
    "sqs",
    #[cfg(feature = "pubsub")]
    "pubsub",
    #[cfg(feature = "kafka")]
    "kafka",
];

fn not_built(kind: SinkKind) -> String {
    format!(
        "sink type {} is not built into this binary (this build has {}; rebuild with the cargo feature `{}`)",
        kind.as_str(),
        BUILT.join(", "),
        kind.as_str()
    )
}

/// The options core reads from every sink entry (the config crate removes
/// them before the adapter sees the rest; the sqs and pubsub adapters read
/// `ordered` / a legacy `ordering_key` too, so their lists name them).
const CORE_OPTIONS: &[&str] = &ankusa_config::SINK_CORE_KEYS;

/// Validates one sink entry's options as its adapter reads them (each
/// `from_options` validates), without connecting anywhere. The error is every
/// problem the adapter found, each the option and what is wrong with it (the
/// caller adds the source and sink), in the adapter's order; a sink type this
/// binary was built without is one problem of the option `type`.
pub fn check(kind: SinkKind, options: &Options) -> Result<(), Vec<(String, String)>> {
    let checked: Result<(), SinkError> = match kind {
        SinkKind::Http => ankusa_sinks::http::HttpSinkConfig::from_options(options).map(|_| ()),
        // The one check that looks at the machine: a path that is a
        // directory would only fail at start, after the store was created.
        SinkKind::File => ankusa_sinks::file::FileSinkConfig::from_options(options).and_then(|c| {
            if c.path.is_dir() {
                Err(SinkError::invalid(
                    "path",
                    format!("{} is a directory, not a file", c.path.display()),
                ))
            } else {
                Ok(())
            }
        }),
        #[cfg(feature = "redis")]
        SinkKind::Redis => ankusa_sinks::redis::RedisSinkConfig::from_options(options).map(|_| ()),
        #[cfg(feature = "rabbitmq")]
        SinkKind::Rabbitmq => {
            ankusa_sinks::rabbitmq::RabbitMqSinkConfig::from_options(options).map(|_| ())
        }
        #[cfg(feature = "nats")]
        SinkKind::Nats => ankusa_sinks::nats::NatsSinkConfig::from_options(options).map(|_| ()),
        #[cfg(feature = "pubsub")]
        SinkKind::Pubsub => {
            ankusa_sinks::pubsub::PubSubSinkConfig::from_options(options).map(|_| ())
        }
        #[cfg(feature = "kafka")]
        SinkKind::Kafka => ankusa_sinks::kafka::KafkaSinkConfig::from_options(options).map(|_| ()),
        // `ordered` is core's option (removed from `options`); the config
        // crate has already refused it on a queue URL not ending `.fifo`.
        #[cfg(feature = "sqs")]
        SinkKind::Sqs => ankusa_sinks::sqs::SqsSinkConfig::from_options(options).map(|_| ()),
        #[allow(unreachable_patterns)]
        other => return Err(vec![("type".to_owned(), not_built(other))]),
    };
    checked.map_err(|e| {
        e.into_problems()
            .into_iter()
            .map(|p| problem(kind, p))
            .collect()
    })
}

/// One problem of an adapter as (option, message), in the config crate's
/// words: "required", and for an unknown option the options of the sink
/// (or of the map option it was written in).
fn problem(kind: SinkKind, e: SinkError) -> (String, String) {
    match e {
        SinkError::MissingOption { option } => (option.to_owned(), "required".to_owned()),
        SinkError::UnknownOption { option, known } => {
            let message = if known.iter().any(|k| k.contains('.')) {
                // A key of a map option (`declare.auto_delete`).
                format!("unknown option (its options: {})", known.join(", "))
            } else {
                let own: Vec<&str> = known
                    .iter()
                    .copied()
                    .filter(|k| !CORE_OPTIONS.contains(k))
                    .collect();
                format!(
                    "unknown option of a {} sink (its options: {}; every sink: {})",
                    kind.as_str(),
                    own.join(", "),
                    CORE_OPTIONS.join(", ")
                )
            };
            (option, message)
        }
        SinkError::InvalidOption { option, reason } => (option, reason),
        other => ("type".to_owned(), other.to_string()),
    }
}

/// Builds the sink of one entry of `source`'s sink list. Errors name the
/// source, the sink and its kind.
pub async fn build(source: &str, entry: &SinkEntry) -> anyhow::Result<Arc<dyn Sink>> {
    let options = entry.options_json();
    let named = |e: SinkError| {
        anyhow!(
            "source {source:?}, sink {:?} ({}): {e}",
            entry.name,
            entry.kind.as_str()
        )
    };
    Ok(match entry.kind {
        SinkKind::Http => {
            let c = ankusa_sinks::http::HttpSinkConfig::from_options(&options).map_err(named)?;
            Arc::new(ankusa_sinks::http::HttpSink::new(&c).map_err(named)?)
        }
        SinkKind::File => {
            let c = ankusa_sinks::file::FileSinkConfig::from_options(&options).map_err(named)?;
            Arc::new(
                ankusa_sinks::file::FileSink::open(&c)
                    .await
                    .map_err(named)?,
            )
        }
        #[cfg(feature = "redis")]
        SinkKind::Redis => {
            let c = ankusa_sinks::redis::RedisSinkConfig::from_options(&options).map_err(named)?;
            Arc::new(ankusa_sinks::redis::RedisSink::new(&c).map_err(named)?)
        }
        #[cfg(feature = "rabbitmq")]
        SinkKind::Rabbitmq => {
            let c = ankusa_sinks::rabbitmq::RabbitMqSinkConfig::from_options(&options)
                .map_err(named)?;
            Arc::new(
                ankusa_sinks::rabbitmq::RabbitMqSink::new(&c)
                    .await
                    .map_err(named)?,
            )
        }
        #[cfg(feature = "nats")]
        SinkKind::Nats => {
            let c = ankusa_sinks::nats::NatsSinkConfig::from_options(&options).map_err(named)?;
            Arc::new(ankusa_sinks::nats::NatsSink::new(&c).await.map_err(named)?)
        }
        #[cfg(feature = "pubsub")]
        SinkKind::Pubsub => {
            let c =
                ankusa_sinks::pubsub::PubSubSinkConfig::from_options(&options).map_err(named)?;
            Arc::new(
                ankusa_sinks::pubsub::PubSubSink::new(&c)
                    .await
                    .map_err(named)?,
            )
        }
        #[cfg(feature = "kafka")]
        SinkKind::Kafka => {
            let c = ankusa_sinks::kafka::KafkaSinkConfig::from_options(&options).map_err(named)?;
            Arc::new(
                ankusa_sinks::kafka::KafkaSink::new(&c)
                    .await
                    .map_err(named)?,
            )
        }
        #[cfg(feature = "sqs")]
        SinkKind::Sqs => {
            let mut c = ankusa_sinks::sqs::SqsSinkConfig::from_options(&options).map_err(named)?;
            // The sink's own check of `ordered` (a FIFO queue), as the config crate's.
            c.ordered = entry.order.is_ordered();
            Arc::new(ankusa_sinks::sqs::SqsSink::new(&c).await.map_err(named)?)
        }
        #[allow(unreachable_patterns)]
        other => {
            return Err(anyhow!(
                "source {source:?}, sink {:?}: {}",
                entry.name,
                not_built(other)
            ));
        }
    })
}

/// Where one sink entry delivers, for the start-up lines: the adapter's own
/// [`target`](ankusa_sinks::http::HttpSinkConfig::target) (a URL's password
/// replaced by `***`). Empty when the options do not load (they did at
/// [`check`]).
pub fn target(entry: &SinkEntry) -> String {
    let options = entry.options_json();
    let target: Result<String, SinkError> = match entry.kind {
        SinkKind::Http => {
            ankusa_sinks::http::HttpSinkConfig::from_options(&options).map(|c| c.target())
        }
        SinkKind::File => {
            ankusa_sinks::file::FileSinkConfig::from_options(&options).map(|c| c.target())
        }
        #[cfg(feature = "redis")]
        SinkKind::Redis => {
            ankusa_sinks::redis::RedisSinkConfig::from_options(&options).map(|c| c.target())
        }
        #[cfg(feature = "rabbitmq")]
        SinkKind::Rabbitmq => {
            ankusa_sinks::rabbitmq::RabbitMqSinkConfig::from_options(&options).map(|c| c.target())
        }
        #[cfg(feature = "nats")]
        SinkKind::Nats => {
            ankusa_sinks::nats::NatsSinkConfig::from_options(&options).map(|c| c.target())
        }
        #[cfg(feature = "pubsub")]
        SinkKind::Pubsub => {
            ankusa_sinks::pubsub::PubSubSinkConfig::from_options(&options).map(|c| c.target())
        }
        #[cfg(feature = "kafka")]
        SinkKind::Kafka => {
            ankusa_sinks::kafka::KafkaSinkConfig::from_options(&options).map(|c| c.target())
        }
        #[cfg(feature = "sqs")]
        SinkKind::Sqs => {
            ankusa_sinks::sqs::SqsSinkConfig::from_options(&options).map(|c| c.target())
        }
        #[allow(unreachable_patterns)]
        _ => Ok(String::new()),
    };
    target.unwrap_or_default()
}

/// Provider headers the broker sinks of this binary dropped at delivery, by
/// kind (`ankusa_forwarded_headers_dropped_total{sink}`); none without a
/// broker sink built in.
pub fn forwarded_headers_dropped() -> Vec<(&'static str, u64)> {
    #[cfg(any(
        feature = "redis",
        feature = "nats",
        feature = "rabbitmq",
        feature = "kafka",
        feature = "pubsub",
        feature = "sqs"
    ))]
    {
        ankusa_sinks::forward::dropped_totals()
    }
    #[cfg(not(any(
        feature = "redis",
        feature = "nats",
        feature = "rabbitmq",
        feature = "kafka",
        feature = "pubsub",
        feature = "sqs"
    )))]
    {
        Vec::new()
    }
}
