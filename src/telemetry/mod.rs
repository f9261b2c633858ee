//! What `ankusa serve` tells the outside about itself through `tracing`
//! (README, "Logs: text or JSON, and what `RUST_LOG` selects"): the log lines
//! on stdout and, in a binary built with the cargo feature `otel`, the
//! OpenTelemetry export of the `ingest` and `delivery` spans.
//!
//! - Log lines: `RUST_LOG`'s directives (default `info`; `async_nats` stays
//!   at `info` unless named: it logs its connect options, password included,
//!   at debug), text or JSON ([`LogFormat`]). The two spans (debug) are
//!   written once each, when they close, with all their fields
//!   (`FmtSpan::CLOSE`); events inside them carry them too. In JSON a line is
//!   `{"timestamp","level","fields":{"message",...},"target","span":{...},"spans":[...]}`.
//! - OTel export (`otel.rs`, `otlp.rs`): its own filter (`node.otel.filter`,
//!   default `ankusa=debug`), so the spans are exported while the log lines
//!   stay at `info`. Each filter is a per-layer filter of one subscriber: a
//!   span neither wants costs one check of the filters' interest.
//! - A build without `otel` refuses `node.otel` at load ([`check`], so
//!   `check-config` says it too) and warns at start about an
//!   `OTEL_EXPORTER_OTLP_*ENDPOINT` it ignores.

#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "otel")]
mod otlp;

use ankusa_config::{LogFormat, Node, Problem, Scope};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// A layer of the one subscriber (`Registry` with per-layer filters).
type BoxedLayer = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

/// The environment variables that turn the export on without a `node.otel`
/// section (the OTLP exporter specification's): the traces endpoint as is,
/// or the base endpoint (`/v1/traces` appended).
pub const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// What [`init`] set up beyond the log lines: the OTel export, which
/// [`Telemetry::shutdown`] flushes.
pub struct Telemetry {
    export: Option<Export>,
}

#[cfg(feature = "otel")]
use otel::Export;

/// A build without `otel` has no export: no value of this type exists.
#[cfg(not(feature = "otel"))]
enum Export {}

#[cfg(not(feature = "otel"))]
impl Export {
    fn announce(&self) {
        match *self {}
    }

    fn shutdown(self) {
        match self {}
    }
}

impl Telemetry {
    /// Exports the spans still pending (the batch processor's queue) and
    /// stops the export, waiting at most the exporter's timeout plus 5 s;
    /// call it while the runtime that [`init`] was given still runs. A
    /// warning says what could not be flushed. Without an export, nothing.
    pub fn shutdown(self) {
        if let Some(e) = self.export {
            e.shutdown();
        }
    }
}

/// What the OTel side of [`init`] found ([`start_export`]).
enum Started {
    /// Nothing asks for an export.
    Off,
    /// Something asks for one and there is none: the line that says why
    /// (`OTEL_SDK_DISABLED=true`, an info line; a build without `otel`, a
    /// warning), written once the subscriber is installed.
    Not { warn: bool, why: String },
    /// The export, and the layer that feeds it.
    #[cfg(feature = "otel")]
    Export(Export, BoxedLayer),
}

/// A build with `otel`: [`otel::start`] on `rt` (no runtime: no export;
/// the caller reports why there is none).
#[cfg(feature = "otel")]
fn start_export(node: &Node, rt: Option<&tokio::runtime::Handle>) -> Result<Started, String> {
    rt.map_or(Ok(Started::Off), |rt| otel::start(node, rt))
}

/// A build without `otel`: nothing to start (`node.otel` was refused at
/// load, [`check`]); an endpoint variable in the environment gets a warning.
#[cfg(not(feature = "otel"))]
fn start_export(_node: &Node, _rt: Option<&tokio::runtime::Handle>) -> Result<Started, String> {
    Ok(
        match ENDPOINT_VARS
            .iter()
            .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
        {
            Some(var) => Started::Not {
                warn: true,
                why: format!(
                    "{var} is set, but this build has no OTel export (ankusa was built without the cargo feature `otel`): no spans are exported"
                ),
            },
            None => Started::Off,
        },
    )
}

/// Installs the log subscriber (stdout, `format`, `RUST_LOG`) and, when this
/// build has `otel` and `node` or the environment ask for it, the OTel
/// export's layer, whose batch processor runs on `rt`. Then writes the
/// export's start-up line, or why there is none.
///
/// # Errors
/// A message naming the setting (`node.otel.filter`, an `OTEL_*` variable)
/// that the export cannot run with. The log subscriber is installed all the
/// same (without the export), so the caller can log the error in `format`.
pub fn init(
    format: LogFormat,
    node: &Node,
    rt: Option<&tokio::runtime::Handle>,
) -> Result<Telemetry, String> {
    // A build without `otel` adds no layer and has no export.
    #[cfg_attr(not(feature = "otel"), allow(unused_mut))]
    let mut layers: Vec<BoxedLayer> = vec![log_layer(format)];
    #[cfg_attr(not(feature = "otel"), allow(unused_mut))]
    let mut export: Option<Export> = None;
    let mut not = None;
    let result = match start_export(node, rt) {
        Ok(Started::Off) => Ok(()),
        Ok(Started::Not { warn, why }) => {
            not = Some((warn, why));
            Ok(())
        }
        #[cfg(feature = "otel")]
        Ok(Started::Export(e, layer)) => {
            layers.push(layer);
            export = Some(e);
            Ok(())
        }
        Err(e) => Err(e),
    };
    let _ = tracing_subscriber::registry().with(layers).try_init();
    if let Some(e) = &export {
        e.announce();
    }
    match not {
        Some((true, why)) => tracing::warn!("{why}"),
        Some((false, why)) => tracing::info!("{why}"),
        None => {}
    }
    result.map(|()| Telemetry { export })
}

/// The log lines' layer: `RUST_LOG` (default `info`, `async_nats` at `info`
/// unless named; a directive that does not parse falls back to that
/// default), in `format`, on stdout.
fn log_layer(format: LogFormat) -> BoxedLayer {
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::format::FmtSpan;
    let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
    let directives = if directives.contains("async_nats") {
        directives
    } else {
        format!("{directives},async_nats=info")
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=info"));
    let layer = tracing_subscriber::fmt::layer().with_span_events(FmtSpan::CLOSE);
    match format {
        LogFormat::Json => layer
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => layer
            .with_target(false)
            // Colours only on a terminal: log files and journald get plain text.
            .with_ansi(std::io::stdout().is_terminal())
            .with_filter(filter)
            .boxed(),
    }
}

/// The checks of `node.otel` the configuration crate cannot make, run when
/// the file loads (`check-config` and `serve`): in a build with `otel`, the
/// filter's syntax (`otel.filter`); in one without, the section itself (this
/// build has no OTel export). Each problem names the option.
pub fn check(node: &Node) -> Vec<Problem> {
    let Some(o) = &node.otel else {
        return Vec::new();
    };
    let scope = Scope::Section("node");
    #[cfg(feature = "otel")]
    {
        match otel::export_filter(&o.filter) {
            Ok(_) => Vec::new(),
            Err(e) => vec![Problem {
                scope,
                option: "otel.filter".to_owned(),
                message: e,
            }],
        }
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = o;
        vec![Problem {
            scope,
            option: "otel".to_owned(),
            message: "this build has no OTel export (ankusa was built without the cargo feature `otel`): \
                      build it with `--features otel`, or remove node.otel"
                .to_owned(),
        }]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn node(otel: Option<ankusa_config::Otel>) -> Node {
        let mut c = ankusa_config::Config::from_yaml("sources: []\n", &|_| None).unwrap();
        c.node.otel = otel;
        c.node
    }

    /// No `node.otel`: nothing to check, in either build.
    #[test]
    fn no_section_no_problem() {
        assert!(check(&node(None)).is_empty());
    }

    /// A build without `otel` refuses the section, naming it and the feature.
    #[cfg(not(feature = "otel"))]
    #[test]
    fn a_build_without_otel_refuses_the_section() {
        let o = ankusa_config::Otel {
            endpoint: None,
            service_name: None,
            filter: "ankusa=debug".into(),
        };
        let p = check(&node(Some(o)));
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            p[0].to_string(),
            "node: option \"otel\": this build has no OTel export (ankusa was built without the cargo feature `otel`): \
             build it with `--features otel`, or remove node.otel"
        );
    }

    /// A build with `otel` checks the filter's syntax and names the option.
    #[cfg(feature = "otel")]
    #[test]
    fn a_filter_that_does_not_parse_is_named() {
        let o = |f: &str| ankusa_config::Otel {
            endpoint: None,
            service_name: None,
            filter: f.into(),
        };
        assert!(check(&node(Some(o("ankusa=debug,ankusa_edge=info")))).is_empty());
        let p = check(&node(Some(o("ankusa=loud"))));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].to_string()
                .starts_with("node: option \"otel.filter\": \"ankusa=loud\" does not parse: "),
            "{}",
            p[0]
        );
    }
}
