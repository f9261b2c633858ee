//! What the pipeline runs by, built from one configuration ([`Pipelined`]):
//! the routing table (each sink entry's sink client, names, retry policy,
//! rate limit, transform and configured pause; each source's tenant), the dispatch,
//! retry and breaker settings, and the start-up lines that name each
//! destination. `ankusa serve` builds it at start and a reload builds it
//! again (docs/design.md section 5, "Reload"), keeping the sink clients of
//! the entries that did not change, so their connections and pools carry on.

use std::sync::Arc;

use ankusa_config::{Config, SinkEntry, Source};
use ankusa_keys::meta::PauseTarget;
use ankusa_keys::{SinkIx, SourceId};
use ankusa_pipeline::{
    BreakerPolicy, DispatchConfig, RateLimit, RetryPolicy, RetryStatuses, Route, Routes, Transform,
};
use ankusa_queue::Registry;
use ankusa_sinks::Sink;

/// The pipeline's routes and settings of one configuration.
pub struct Pipelined {
    /// The routing table.
    pub routes: Routes,
    /// `dispatch`.
    pub dispatch: DispatchConfig,
    /// The global `retry` policy.
    pub retry: RetryPolicy,
    /// `breaker`.
    pub breaker: BreakerPolicy,
    /// One line per sink entry: its path, kind, name and destination (the
    /// start-up banner).
    pub destinations: Vec<String>,
}

impl Pipelined {
    /// Builds the pipeline's routes of `cfg` (whose sink entries carry their
    /// slots, `crate::unconfigured::assign_slots`), with the numbers of
    /// `registry`. A sink entry that `previous` (the configuration running,
    /// and what was built from it) has under the same source and name, of the
    /// same kind with the same options and order, keeps its sink client.
    ///
    /// # Errors
    /// A sink client that cannot be built (named: source, sink, kind).
    pub async fn build(
        cfg: &Config,
        registry: &Registry,
        previous: Option<(&Config, &Routes)>,
    ) -> anyhow::Result<Pipelined> {
        let mut routes = Routes::default();
        for (name, ord) in &registry.tenants {
            routes.tenants.insert(*ord, name.clone());
        }
        let mut destinations = Vec::new();
        for s in &cfg.sources {
            let id = registry.sources[&s.name];
            // A source bound to one tenant; a `{tenant}` path source may carry
            // any tenant's hooks and is left out (Routes::source_tenants).
            if let ankusa_config::TenantBinding::Fixed(t) = &s.tenant
                && let Some(ord) = registry.tenants.get(t)
            {
                routes.source_tenants.insert(id, *ord);
            }
            if s.paused {
                routes.paused.insert(PauseTarget::Source(id));
            }
            for e in &s.sinks {
                let key = (id, SinkIx(e.index));
                if e.paused {
                    routes.paused.insert(PauseTarget::Sink(id, SinkIx(e.index)));
                }
                if e.order.is_ordered() {
                    routes.ordered.insert(key);
                }
                if let Some(rl) = e.rate_limit {
                    routes.rate_limits.insert(
                        key,
                        RateLimit {
                            per_second: rl.per_second,
                            burst: rl.burst,
                        },
                    );
                }
                if e.retry.overridden {
                    routes.retry.insert(key, sink_retry_policy(&e.retry));
                }
                if let Some(program) = &e.transform {
                    // The source's own `hmac` header signs the body as
                    // received, like the providers' (docs/design.md section
                    // 6, "Transforms").
                    let hmac_header = match &s.verification {
                        ankusa_config::Verification::Hmac { header, .. } => Some(header.as_str()),
                        _ => None,
                    };
                    routes
                        .transforms
                        .insert(key, Transform::new(Arc::clone(program), hmac_header));
                }
                if let Some(ms) = e.auto_pause_after_ms {
                    routes.auto_pause.insert(key, ms);
                }
                if e.dead_letter == ankusa_config::DeadLetterLane::Hold {
                    routes.held.insert(key);
                }
                let sink = match previous.and_then(|p| kept_sink(p, s, e, key)) {
                    Some(sink) => sink,
                    None => crate::sinks::build(&s.name, e).await?,
                };
                destinations.push(destination(s, e));
                routes.sinks.insert(
                    key,
                    Route {
                        sink,
                        sink_name: e.name.clone(),
                        source_name: s.name.clone(),
                    },
                );
            }
        }
        let d = &cfg.dispatch;
        Ok(Pipelined {
            routes,
            dispatch: DispatchConfig {
                batch: d.batch as usize,
                sink_concurrency: d.sink_concurrency as usize,
                pipelined_concurrency: d.pipelined_concurrency as usize,
                window: d.admission_window as usize,
                window_bytes: d.admission_window_bytes,
                flush_interval_ms: d.flush_interval_ms,
                ..DispatchConfig::default()
            },
            retry: sink_retry_policy(&ankusa_config::SinkRetry::from_global(&cfg.retry)),
            breaker: BreakerPolicy {
                failures: cfg.breaker.failures,
                distinct: cfg.breaker.distinct,
                open_ms: cfg.breaker.open_ms,
            },
            destinations,
        })
    }
}

/// The sink client `previous` has for entry `e` of source `s` (at `key`),
/// when the entry is the same one (its slot) of the same kind with the same
/// options and order: the client is what those determine.
fn kept_sink(
    (old_cfg, old_routes): (&Config, &Routes),
    s: &Source,
    e: &SinkEntry,
    key: (SourceId, SinkIx),
) -> Option<Arc<dyn Sink>> {
    let was = old_cfg
        .source(&s.name)?
        .sinks
        .iter()
        .find(|o| o.name == e.name && o.index == e.index)?;
    let same = was.kind == e.kind
        && was.options_json() == e.options_json()
        && was.order.is_ordered() == e.order.is_ordered();
    same.then(|| old_routes.sinks.get(&key).map(|r| Arc::clone(&r.sink)))
        .flatten()
}

/// One start-up line for a sink entry: the path it takes hooks at, its kind,
/// name and destination, and what the configuration turned on. A notify
/// destination's line names its scheme and host only: a chat webhook's URL
/// carries its secret in the path (docs/design.md section 5,
/// "Notifications").
fn destination(s: &Source, e: &SinkEntry) -> String {
    if ankusa_config::is_internal(&s.name) {
        let host = match &e.typed {
            ankusa_config::TypedOptions::Http(h) => url_host(&h.url),
            _ => String::new(),
        };
        return format!("notify {} -> {} {host}/...", e.name, e.kind.as_str());
    }
    let paused = if s.paused || e.paused {
        " [paused]"
    } else {
        ""
    };
    let rate = e
        .rate_limit
        .map(|r| format!(" [at most {}/s, burst {}]", r.per_second, r.burst))
        .unwrap_or_default();
    // The options that change what this sink gets or how, by name, so the
    // banner shows what the configuration turned on.
    let mut set: Vec<&str> = Vec::new();
    if !e.filter.is_empty() {
        set.push("filter");
    }
    if e.retry.overridden {
        set.push("retry");
    }
    for key in ["signing", "forward_headers"] {
        if e.options.contains_key(key) {
            set.push(key);
        }
    }
    let set = if set.is_empty() {
        String::new()
    } else {
        format!(" [{}]", set.join(", "))
    };
    // A tenant_path source takes hooks at {path}/{tenant}.
    let path = match s.tenant {
        ankusa_config::TenantBinding::Path => format!("{}/{{tenant}}", s.path),
        ankusa_config::TenantBinding::Fixed(_) => s.path.clone(),
    };
    format!(
        "{path} -> {} {} {}{paused}{rate}{set}",
        e.kind.as_str(),
        e.name,
        describe(s, e)
    )
}

/// `scheme://host[:port]` of `url`, nothing of its path, query or userinfo.
fn url_host(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{host}")
}

/// One start-up line's tail for a sink entry: where it delivers and, for an
/// ordered sink, by what key. Hooks without a key share the sink's keyless
/// lane, whose ordering key (what the sink sees) is `<tenant>/<source>`
/// (ADR 0004 section 2).
fn describe(s: &ankusa_config::Source, e: &ankusa_config::SinkEntry) -> String {
    let target = crate::sinks::target(e);
    let keyless = match &s.tenant {
        ankusa_config::TenantBinding::Fixed(t) => format!("{t}/{}", s.name),
        ankusa_config::TenantBinding::Path => format!("<tenant>/{}", s.name),
    };
    let by = match &e.order {
        ankusa_config::Order::Unordered => return target,
        ankusa_config::Order::Ordered { key: None } => {
            return format!("{target} (ordered: one keyless lane, key {keyless})");
        }
        ankusa_config::Order::Ordered { key: Some(k) } => key_words(k),
    };
    format!("{target} (ordered by {by}; hooks without one: the keyless lane, key {keyless})")
}

/// An ordering key in the start-up line's words: `header x-id`, `json
/// data.object.id`, `the first of json a, json b`.
fn key_words(k: &ankusa_config::OrderingKey) -> String {
    match k {
        ankusa_config::OrderingKey::Header(h) => format!("header {h}"),
        ankusa_config::OrderingKey::Json(p) => format!("json {}", p.dotted),
        ankusa_config::OrderingKey::Func(_) => "a key function".to_owned(),
        ankusa_config::OrderingKey::FirstOf(places) => format!(
            "the first of {}",
            places.iter().map(key_words).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The pipeline's retry policy of a sink entry (docs/design.md section 5,
/// "Retry policy"): the config's effective values, the default statuses when
/// the entry lists none.
pub fn sink_retry_policy(r: &ankusa_config::SinkRetry) -> RetryPolicy {
    RetryPolicy {
        base_ms: r.base_ms,
        max_ms: r.max_ms,
        max_elapsed_ms: r.max_elapsed_ms,
        retry_after_max_ms: Some(r.retry_after_max_ms),
        grace_ms: r.grace_ms.unwrap_or(0),
        statuses: r
            .retry_statuses
            .as_ref()
            .map_or_else(RetryStatuses::default, |l| {
                RetryStatuses::from_statuses(l.iter().copied())
            }),
    }
}
