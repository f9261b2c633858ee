//! The OTel export of a build with the cargo feature `otel` (README, "Logs:
//! text or JSON, and what `RUST_LOG` selects"): tracing-opentelemetry turns
//! each span that passes the export filter into an OpenTelemetry span (its
//! fields are its attributes, the events inside it its events), the SDK's batch
//! span processor queues the closed ones and exports them from a task on the
//! relay's tokio runtime through [`OtlpExporter`] (OTLP/HTTP, protobuf).
//!
//! Never on the ingest path: closing a span puts it on the processor's
//! bounded queue without waiting (`OTEL_BSP_MAX_QUEUE_SIZE`, 2,048; full:
//! the span is dropped and the SDK warns once); the export runs on its own
//! task. A collector that does not answer costs a warning and the spans of
//! the batches it did not take, nothing else.
//!
//! When: `node.otel` in the file, or an `OTEL_EXPORTER_OTLP_*ENDPOINT` in the
//! environment ([`super::ENDPOINT_VARS`]); `OTEL_SDK_DISABLED=true` turns it
//! off. Each `node.otel` option wins over its standard variable.

use std::time::Duration;

use ankusa_config::Node;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing_subscriber::{EnvFilter, Layer};

use super::Started;
use super::otlp::{OtlpExporter, Target};

/// The exporter's own crates (and the HTTP client it posts with): off in the
/// export filter unless it names them, so an export never exports spans of
/// itself (`hyper` covers `hyper_util`, `opentelemetry` the SDK).
const EXPORTER_TARGETS: [&str; 6] = [
    "opentelemetry",
    "tracing_opentelemetry",
    "reqwest",
    "hyper",
    "h2",
    "rustls",
];

/// The default timeout of one export, as the specification's
/// (`OTEL_EXPORTER_OTLP_TIMEOUT`).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The collector the specification's exporters post to when nothing names one.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// What [`settings`] resolved.
#[derive(Debug, PartialEq)]
pub(crate) enum Plan {
    /// Nothing asks for an export.
    Off,
    /// `OTEL_SDK_DISABLED=true` while something asked for one.
    Disabled,
    /// Export with these settings.
    Export(Box<Settings>),
}

/// The export's settings, from `node.otel` and the environment.
#[derive(Debug, PartialEq)]
pub(crate) struct Settings {
    /// Where to post, and the extra headers.
    pub target: Target,
    /// Which setting gave the endpoint (`node.otel.endpoint`, a variable's
    /// name, or `the default`), for the start-up line.
    pub endpoint_from: String,
    /// `service.name` given by `node.otel.service_name` or
    /// `OTEL_SERVICE_NAME`; `None`: the resource's own (from
    /// `OTEL_RESOURCE_ATTRIBUTES`), else `ankusa`.
    pub service_name: Option<String>,
    /// The export filter's directives as given (`node.otel.filter`).
    pub filter: String,
    /// The batch span processor's settings (`OTEL_BSP_*`).
    pub batching: Batching,
}

/// The batch span processor's settings: the specification's `OTEL_BSP_*`
/// variables, each a whole number above 0 (unset or empty: the default),
/// read and checked here so that a value the SDK would ignore silently, or
/// panic on (a queue of 0), is refused by name instead.
#[derive(Debug, PartialEq)]
pub(crate) struct Batching {
    /// Spans queued at most between the ingest path and the export task
    /// (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2,048, at most [`MAX_QUEUE`]).
    pub max_queue_size: usize,
    /// Time between two exports of what is queued
    /// (`OTEL_BSP_SCHEDULE_DELAY`, ms, default 5,000).
    pub scheduled_delay: Duration,
    /// Spans per export at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, default
    /// 512; above the queue size it is the queue size, as the specification
    /// says).
    pub max_export_batch_size: usize,
    /// The processor's own bound on one export (`OTEL_BSP_EXPORT_TIMEOUT`,
    /// ms, default 30,000); the exporter's is `OTEL_EXPORTER_OTLP_TIMEOUT`.
    pub max_export_timeout: Duration,
    /// Exports running at once (`OTEL_BSP_MAX_CONCURRENT_EXPORTS`, the
    /// SDK's variable, default 1).
    pub max_concurrent_exports: usize,
}

/// The largest `OTEL_BSP_MAX_QUEUE_SIZE` taken: about a gigabyte of spans
/// (a queue this long is memory, not a buffer against a slow collector).
pub(crate) const MAX_QUEUE: u64 = 1 << 20;

/// The SDK's variable for concurrent exports (its constant is private).
const OTEL_BSP_MAX_CONCURRENT_EXPORTS: &str = "OTEL_BSP_MAX_CONCURRENT_EXPORTS";

/// `OTEL_BSP_*` from `env` ([`Batching`]).
///
/// # Errors
/// A variable that is not a whole number above 0 (or a queue above
/// [`MAX_QUEUE`]), named with its value and what it sets.
fn batching(env: Env<'_>) -> Result<Batching, String> {
    use opentelemetry_sdk::trace as sdk;
    let positive = |var: &'static str, what: &str, default: u64, max: u64| -> Result<u64, String> {
        let Some((_, v)) = first_var(env, &[var]) else {
            return Ok(default);
        };
        match v.parse::<u64>() {
            Ok(n) if n > 0 && n <= max => Ok(n),
            _ if max < u64::MAX => Err(format!(
                "{var}={v}: expected {what}, a whole number from 1 to {max}"
            )),
            _ => Err(format!(
                "{var}={v}: expected {what}, a whole number above 0"
            )),
        }
    };
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let max_queue_size = as_usize(positive(
        sdk::OTEL_BSP_MAX_QUEUE_SIZE,
        "the spans queued at most",
        sdk::OTEL_BSP_MAX_QUEUE_SIZE_DEFAULT as u64,
        MAX_QUEUE,
    )?);
    let scheduled_delay = Duration::from_millis(positive(
        sdk::OTEL_BSP_SCHEDULE_DELAY,
        "the milliseconds between two exports",
        ms(sdk::OTEL_BSP_SCHEDULE_DELAY_DEFAULT),
        u64::MAX,
    )?);
    let batch = as_usize(positive(
        sdk::OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
        "the spans of one export at most",
        sdk::OTEL_BSP_MAX_EXPORT_BATCH_SIZE_DEFAULT as u64,
        u64::MAX,
    )?);
    let max_export_timeout = Duration::from_millis(positive(
        sdk::OTEL_BSP_EXPORT_TIMEOUT,
        "the milliseconds one export may take",
        ms(sdk::OTEL_BSP_EXPORT_TIMEOUT_DEFAULT),
        u64::MAX,
    )?);
    let max_concurrent_exports = as_usize(positive(
        OTEL_BSP_MAX_CONCURRENT_EXPORTS,
        "the exports running at once",
        1,
        u64::MAX,
    )?);
    Ok(Batching {
        max_queue_size,
        scheduled_delay,
        max_export_batch_size: batch.min(max_queue_size),
        max_export_timeout,
        max_concurrent_exports,
    })
}

/// Reads a variable; unset and empty are the same (the specification's).
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The first of `vars` that is set (not empty), with its value.
fn first_var(env: Env<'_>, vars: &[&'static str]) -> Option<(&'static str, String)> {
    vars.iter().find_map(|v| {
        env(v)
            .filter(|x| !x.trim().is_empty())
            .map(|x| (*v, x.trim().to_owned()))
    })
}

/// Resolves the export's settings from `node.otel` (already validated by
/// the configuration crate, its filter by [`super::check`]) and `env`.
///
/// # Errors
/// A variable the export cannot run with, named with what it accepts:
/// an endpoint that is not an http(s) URL, a protocol other than
/// `http/protobuf`, a compression other than `none`, a timeout that is not a
/// whole number of milliseconds, headers that are not `name=value,...`, an
/// `OTEL_BSP_*` that is not a whole number above 0 ([`Batching`]).
/// Header values are never in a message.
pub(crate) fn settings(node: &Node, env: Env<'_>) -> Result<Plan, String> {
    let otel = node.otel.as_ref();
    let endpoint_var = first_var(env, &super::ENDPOINT_VARS);
    if otel.is_none() && endpoint_var.is_none() {
        return Ok(Plan::Off);
    }
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(Plan::Disabled);
    }
    let (url, endpoint_from) = match (otel.and_then(|o| o.endpoint.as_deref()), endpoint_var) {
        (Some(e), _) => (traces_url(e), "node.otel.endpoint".to_owned()),
        (None, Some((var @ "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", v))) => (v, var.to_owned()),
        (None, Some((var, v))) => (traces_url(&v), var.to_owned()),
        (None, None) => (traces_url(DEFAULT_ENDPOINT), "the default".to_owned()),
    };
    let url = match reqwest::Url::parse(&url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => u,
        _ => {
            return Err(format!(
                "{endpoint_from}: \"{}\" is not an OTLP/HTTP endpoint (an http:// or https:// URL of the collector)",
                ankusa_config::redact_url(&url)
            ));
        }
    };
    if let Some((var, v)) = first_var(
        env,
        &[
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ],
    ) && v != "http/protobuf"
    {
        return Err(format!(
            "{var}={v}: this build exports OTLP over HTTP with protobuf only (http/protobuf, the collector's port 4318)"
        ));
    }
    if let Some((var, v)) = first_var(
        env,
        &[
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ],
    ) && v != "none"
    {
        return Err(format!(
            "{var}={v}: this build sends its exports uncompressed (none)"
        ));
    }
    let timeout = match first_var(
        env,
        &[
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ],
    ) {
        None => DEFAULT_TIMEOUT,
        Some((var, v)) => match v.parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                return Err(format!(
                    "{var}={v}: expected the export's timeout in milliseconds, above 0"
                ));
            }
        },
    };
    let headers = match first_var(
        env,
        &[
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ],
    ) {
        None => Vec::new(),
        Some((var, v)) => headers(&v).map_err(|e| format!("{var}: {e}"))?,
    };
    let service_name = otel
        .and_then(|o| o.service_name.clone())
        .or_else(|| env("OTEL_SERVICE_NAME").filter(|v| !v.trim().is_empty()));
    let batching = batching(env)?;
    Ok(Plan::Export(Box::new(Settings {
        target: Target {
            url,
            headers,
            timeout,
        },
        endpoint_from,
        service_name,
        filter: otel.map_or_else(
            || ankusa_config::defaults::OTEL_FILTER.to_owned(),
            |o| o.filter.clone(),
        ),
        batching,
    })))
}

/// A base endpoint with the traces path appended (the specification's rule
/// for `OTEL_EXPORTER_OTLP_ENDPOINT`).
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `name=value` pairs separated by commas,
/// values percent-decoded (the W3C Baggage form the specification names).
fn headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, pair) in text
        .split(',')
        .enumerate()
        .filter(|(_, p)| !p.trim().is_empty())
    {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(format!(
                "entry {} has no `=` (expected name=value,...)",
                i + 1
            ));
        };
        let name = name.trim();
        let value = percent_decode(value.trim())
            .ok_or_else(|| format!("the value of {name} is not percent-encoded UTF-8"))?;
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("\"{name}\" is not a header name"));
        }
        if reqwest::header::HeaderValue::from_str(&value).is_err() {
            return Err(format!("the value of {name} is not a valid header value"));
        }
        out.push((name.to_owned(), value));
    }
    Ok(out)
}

/// `%XX` sequences decoded; `None` for a broken sequence or bytes that are
/// not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The export filter: `directives` with the exporter's own crates off unless
/// named ([`EXPORTER_TARGETS`]).
///
/// # Errors
/// The directives do not parse: the message quotes them and says why.
pub(crate) fn export_filter(directives: &str) -> Result<EnvFilter, String> {
    let mut all = directives.trim().to_owned();
    for t in EXPORTER_TARGETS {
        if !directives.contains(t) {
            all.push_str(&format!(",{t}=off"));
        }
    }
    EnvFilter::builder()
        .with_regex(false)
        .parse(&all)
        .map_err(|e| format!("\"{directives}\" does not parse: {e} (RUST_LOG's syntax: ankusa=debug, ankusa_pipeline=debug,ankusa_edge=info, off)"))
}

/// A running export: the provider its layer feeds, and what the start-up
/// line says.
pub(crate) struct Export {
    provider: SdkTracerProvider,
    /// The endpoint, redacted, and which setting gave it.
    endpoint: String,
    endpoint_from: String,
    service_name: String,
    filter: String,
    /// One export's timeout: what the shutdown waits, plus a margin.
    timeout: Duration,
}

/// Resolves the settings ([`settings`], from the process environment) and,
/// when there is an export, builds it on `rt`: the exporter, the batch span
/// processor (its task spawned on `rt`; `OTEL_BSP_*` read by the SDK), the
/// provider with the resource (`service.name`, `service.version`, and
/// `OTEL_RESOURCE_ATTRIBUTES`) and the tracing layer behind its filter.
///
/// # Errors
/// [`settings`]' errors, a filter that does not parse, or a client that
/// cannot be built.
pub(super) fn start(node: &Node, rt: &tokio::runtime::Handle) -> Result<Started, String> {
    let s = match settings(node, &|v| std::env::var(v).ok())? {
        Plan::Off => return Ok(Started::Off),
        Plan::Disabled => {
            return Ok(Started::Not {
                warn: false,
                why: "OTEL_SDK_DISABLED=true: no spans are exported".to_owned(),
            });
        }
        Plan::Export(s) => *s,
    };
    let filter = export_filter(&s.filter).map_err(|e| format!("node.otel.filter: {e}"))?;
    let endpoint = ankusa_config::redact_url(s.target.url.as_str());
    let timeout = s.target.timeout;
    let exporter = OtlpExporter::new(s.target)?;
    let detected = Resource::builder().build();
    let service_name = match (
        &s.service_name,
        detected.get(&opentelemetry::Key::from_static_str("service.name")),
    ) {
        (Some(n), _) => n.clone(),
        (None, Some(v)) if !v.as_str().starts_with("unknown_service") => v.as_str().into_owned(),
        (None, _) => "ankusa".to_owned(),
    };
    let resource = Resource::builder()
        .with_service_name(service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    // The settings as checked by [`batching`], not as the SDK would read
    // the variables again.
    let b = &s.batching;
    let config = opentelemetry_sdk::trace::BatchConfigBuilder::default()
        .with_max_queue_size(b.max_queue_size)
        .with_scheduled_delay(b.scheduled_delay)
        .with_max_export_batch_size(b.max_export_batch_size)
        .with_max_export_timeout(b.max_export_timeout)
        .with_max_concurrent_exports(b.max_concurrent_exports)
        .build();
    // The processor spawns its task with `tokio::spawn`: in `rt`'s context.
    let processor = {
        let _entered = rt.enter();
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio)
            .with_batch_config(config)
            .build()
    };
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let scope = InstrumentationScope::builder("ankusa")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer_with_scope(scope))
        // The attributes are the span's fields, nothing else.
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(filter)
        .boxed();
    let export = Export {
        provider,
        endpoint,
        endpoint_from: s.endpoint_from,
        service_name,
        filter: s.filter,
        timeout,
    };
    Ok(Started::Export(export, layer))
}

impl Export {
    /// The start-up line: where the spans go, as which service, which spans.
    pub(crate) fn announce(&self) {
        tracing::info!(
            endpoint = %self.endpoint,
            service_name = %self.service_name,
            filter = %self.filter,
            "OTel export of spans ({}) to {} ({}) as service {}",
            self.filter,
            self.endpoint,
            self.endpoint_from,
            self.service_name,
        );
    }

    /// Flushes the spans still queued and stops the processor's task. The
    /// SDK waits on a channel the task answers, so it runs on its own thread
    /// and is waited for at most one export's timeout plus 5 s (the task
    /// runs on the runtime, which must still be running).
    pub(crate) fn shutdown(self) {
        let (tx, rx) = std::sync::mpsc::channel();
        let provider = self.provider;
        let spawned = std::thread::Builder::new()
            .name("otel-shutdown".into())
            .spawn(move || {
                let _ = tx.send(provider.shutdown());
            });
        if spawned.is_err() {
            tracing::warn!(
                "OTel export: cannot start the shutdown thread; the spans still queued are dropped"
            );
            return;
        }
        let wait = self.timeout + Duration::from_secs(5);
        match rx.recv_timeout(wait) {
            Ok(Ok(())) => tracing::debug!("OTel export flushed and stopped"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "OTel export: the shutdown failed; spans still queued may be lost")
            }
            Err(_) => tracing::warn!(
                wait_s = wait.as_secs(),
                "OTel export: the spans still queued were not flushed within {} s; they are dropped",
                wait.as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashMap;

    use super::*;

    fn node(otel: Option<(&str, Option<&str>, Option<&str>)>) -> Node {
        let mut c = ankusa_config::Config::from_yaml("sources: []\n", &|_| None).unwrap();
        c.node.otel = otel.map(|(filter, endpoint, service)| ankusa_config::Otel {
            endpoint: endpoint.map(str::to_owned),
            service_name: service.map(str::to_owned),
            filter: filter.to_owned(),
        });
        c.node
    }

    fn plan(node: &Node, vars: &[(&str, &str)]) -> Result<Plan, String> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        settings(node, &|k| env.get(k).cloned())
    }

    fn export(p: Result<Plan, String>) -> Settings {
        match p {
            Ok(Plan::Export(s)) => *s,
            other => panic!("expected an export, got {other:?}"),
        }
    }

    /// Off unless the file or an endpoint variable asks; OTEL_SDK_DISABLED
    /// wins over both.
    #[test]
    fn what_turns_the_export_on() {
        assert_eq!(plan(&node(None), &[]), Ok(Plan::Off));
        assert_eq!(
            plan(
                &node(None),
                &[
                    ("OTEL_SERVICE_NAME", "x"),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", " ")
                ]
            ),
            Ok(Plan::Off)
        );
        let s = export(plan(
            &node(None),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")],
        ));
        assert_eq!(s.target.url.as_str(), "http://c:4318/v1/traces");
        assert_eq!(s.endpoint_from, "OTEL_EXPORTER_OTLP_ENDPOINT");
        assert_eq!(s.filter, "ankusa=debug");
        assert_eq!(s.target.timeout, Duration::from_secs(10));
        let s = export(plan(&node(Some(("ankusa=debug", None, None))), &[]));
        assert_eq!(s.target.url.as_str(), "http://localhost:4318/v1/traces");
        assert_eq!(s.endpoint_from, "the default");
        assert_eq!(s.service_name, None);
        for on in [&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")][..], &[]] {
            let mut vars = on.to_vec();
            vars.push(("OTEL_SDK_DISABLED", "TRUE"));
            assert_eq!(
                plan(&node(Some(("ankusa=debug", None, None))), &vars),
                Ok(Plan::Disabled)
            );
        }
    }

    /// The file wins over the variables; the traces variable is taken as is
    /// and wins over the base one, which gets `/v1/traces`.
    #[test]
    fn endpoint_and_service_name_precedence() {
        let both = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://traces:4318/custom/path",
            ),
            ("OTEL_SERVICE_NAME", "from-env"),
        ];
        let s = export(plan(&node(None), &both));
        assert_eq!(s.target.url.as_str(), "https://traces:4318/custom/path");
        assert_eq!(s.endpoint_from, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        assert_eq!(s.service_name.as_deref(), Some("from-env"));
        let s = export(plan(
            &node(Some((
                "ankusa_pipeline=debug",
                Some("http://file:4318"),
                Some("from-file"),
            ))),
            &both,
        ));
        assert_eq!(s.target.url.as_str(), "http://file:4318/v1/traces");
        assert_eq!(s.endpoint_from, "node.otel.endpoint");
        assert_eq!(s.service_name.as_deref(), Some("from-file"));
        assert_eq!(s.filter, "ankusa_pipeline=debug");
    }

    /// Every variable the export cannot run with is named with what it
    /// accepts; a header value never appears in a message.
    #[test]
    fn bad_variables_are_named() {
        let n = node(Some(("ankusa=debug", None, None)));
        let err = |vars: &[(&str, &str)]| plan(&n, vars).unwrap_err();
        assert_eq!(
            plan(
                &node(None),
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]
            )
            .unwrap_err(),
            "OTEL_EXPORTER_OTLP_ENDPOINT: \"collector:4318/v1/traces\" is not an OTLP/HTTP endpoint (an http:// or https:// URL of the collector)"
        );
        assert_eq!(
            err(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: this build exports OTLP over HTTP with protobuf only (http/protobuf, the collector's port 4318)"
        );
        assert!(
            plan(
                &n,
                &[
                    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
                ]
            )
            .is_ok()
        );
        assert_eq!(
            err(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")]),
            "OTEL_EXPORTER_OTLP_COMPRESSION=gzip: this build sends its exports uncompressed (none)"
        );
        assert_eq!(
            err(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]),
            "OTEL_EXPORTER_OTLP_TIMEOUT=10s: expected the export's timeout in milliseconds, above 0"
        );
        assert_eq!(
            export(plan(&n, &[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500")]))
                .target
                .timeout,
            Duration::from_millis(2500)
        );
        let e = err(&[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Bearer%20s3cret,broken",
        )]);
        assert_eq!(
            e,
            "OTEL_EXPORTER_OTLP_HEADERS: entry 2 has no `=` (expected name=value,...)"
        );
        let e = err(&[("OTEL_EXPORTER_OTLP_HEADERS", "x=s3cret%zz")]);
        assert_eq!(
            e,
            "OTEL_EXPORTER_OTLP_HEADERS: the value of x is not percent-encoded UTF-8"
        );
        let s = export(plan(
            &n,
            &[(
                "OTEL_EXPORTER_OTLP_HEADERS",
                " authorization = Bearer%20s3cret , x-scope=a%2Cb ",
            )],
        ));
        assert_eq!(
            s.target.headers,
            [
                ("authorization".to_owned(), "Bearer s3cret".to_owned()),
                ("x-scope".to_owned(), "a,b".to_owned())
            ]
        );
    }

    /// Regression (brk16): the SDK read `OTEL_BSP_*` itself, ignoring a
    /// value that is not a number without a word and panicking at start on
    /// `OTEL_BSP_MAX_QUEUE_SIZE=0` ("mpsc bounded channel requires buffer >
    /// 0"); a batch size or concurrency of 0 unbounded the batch or the
    /// exports. Each is now a whole number above 0 or refused by name.
    #[test]
    fn batch_processor_variables_are_checked_by_name() {
        let n = node(Some(("ankusa=debug", None, None)));
        let b = export(plan(&n, &[])).batching;
        assert_eq!(
            b,
            Batching {
                max_queue_size: 2048,
                scheduled_delay: Duration::from_millis(5000),
                max_export_batch_size: 512,
                max_export_timeout: Duration::from_millis(30_000),
                max_concurrent_exports: 1,
            }
        );
        let vars = [
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_SCHEDULE_DELAY", " 250 "),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
            ("OTEL_BSP_EXPORT_TIMEOUT", "2000"),
            ("OTEL_BSP_MAX_CONCURRENT_EXPORTS", "2"),
        ];
        let b = export(plan(&n, &vars)).batching;
        // A batch larger than the queue is the queue (the specification's rule).
        assert_eq!(
            (b.max_queue_size, b.scheduled_delay, b.max_export_batch_size),
            (100, Duration::from_millis(250), 100)
        );
        assert_eq!(
            (b.max_export_timeout, b.max_concurrent_exports),
            (Duration::from_secs(2), 2)
        );
        assert_eq!(
            export(plan(&n, &[("OTEL_BSP_MAX_QUEUE_SIZE", "")]))
                .batching
                .max_queue_size,
            2048,
            "empty is unset"
        );
        let err = |var: &str, v: &str| plan(&n, &[(var, v)]).unwrap_err();
        assert_eq!(
            err("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            "OTEL_BSP_MAX_QUEUE_SIZE=0: expected the spans queued at most, a whole number from 1 to 1048576"
        );
        assert_eq!(
            err("OTEL_BSP_MAX_QUEUE_SIZE", "18446744073709551615"),
            "OTEL_BSP_MAX_QUEUE_SIZE=18446744073709551615: expected the spans queued at most, a whole number from 1 to 1048576"
        );
        assert_eq!(
            err("OTEL_BSP_SCHEDULE_DELAY", "5s"),
            "OTEL_BSP_SCHEDULE_DELAY=5s: expected the milliseconds between two exports, a whole number above 0"
        );
        assert_eq!(
            err("OTEL_BSP_SCHEDULE_DELAY", "0"),
            "OTEL_BSP_SCHEDULE_DELAY=0: expected the milliseconds between two exports, a whole number above 0"
        );
        assert_eq!(
            err("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1"),
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=-1: expected the spans of one export at most, a whole number above 0"
        );
        assert_eq!(
            err("OTEL_BSP_EXPORT_TIMEOUT", "lots"),
            "OTEL_BSP_EXPORT_TIMEOUT=lots: expected the milliseconds one export may take, a whole number above 0"
        );
        assert_eq!(
            err("OTEL_BSP_MAX_CONCURRENT_EXPORTS", "0"),
            "OTEL_BSP_MAX_CONCURRENT_EXPORTS=0: expected the exports running at once, a whole number above 0"
        );
        // Without an export nothing is read.
        assert_eq!(
            plan(&node(None), &[("OTEL_BSP_MAX_QUEUE_SIZE", "0")]),
            Ok(Plan::Off)
        );
    }

    /// The exporter's own crates are off unless the filter names them.
    #[test]
    fn the_export_filter_keeps_the_exporter_out() {
        let f = export_filter("debug").unwrap().to_string();
        for t in EXPORTER_TARGETS {
            assert!(f.contains(&format!("{t}=off")), "{f}");
        }
        let f = export_filter("ankusa=debug,hyper=trace")
            .unwrap()
            .to_string();
        assert!(!f.contains("hyper=off") && f.contains("hyper=trace"), "{f}");
        assert!(
            export_filter("ankusa=loud")
                .unwrap_err()
                .starts_with("\"ankusa=loud\" does not parse: ")
        );
    }
}
