//! From the configuration model to what the ingest handler reads per request:
//! verifiers, key specs, header policies, tenant bounds, ordinals and ids.

use std::collections::BTreeMap;

use ankusa_config::{
    Config, FilterTest, HeaderAction, HeaderPolicy, KeySource, OnInvalidSignature, Order,
    OrderingKey, Problem, Scope, SinkEntry, Source, TenantBinding, Verification,
};
use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::{NewRow, Registry, lanes};
use sha2::{Digest, Sha256};

use crate::filter::{Condition, Filter, Test};
use crate::{
    Header, HmacAlgorithm, HmacHeader, KeySpec, ParsedBody, Secret, SignatureEncoding, Verifier,
    ordering,
};

/// A tenant as the edge sees it: ordinal, name, queue bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantRoute {
    /// Ordinal in the store.
    pub ord: TenantOrd,
    /// Name.
    pub name: String,
    /// Pending rows bound (429 past it).
    pub max_pending: u64,
    /// Pending bytes bound (429 past it).
    pub max_pending_bytes: u64,
}

/// One sink entry of a source, as ingest needs it.
#[derive(Clone, Debug)]
pub struct SinkRoute {
    /// Index in the source's list.
    pub index: SinkIx,
    /// The sink's kind (`http`, `file`, ...), the label of
    /// `ankusa_dispatch_lane_key_missing_total{sink}`.
    pub kind: &'static str,
    /// `None`: unordered. `Some([])`: ordered, keyless lane only.
    /// `Some(specs)`: ordered by the first of `specs` that holds a key (ADR
    /// 0004 section 1: one place, or a list of places tried in order).
    pub ordered: Option<Vec<KeySpec>>,
    /// The entry's name, the `sink_name` label of `ankusa_ingest_filtered_total`.
    pub name: String,
    /// The entry's `filter`: a hook that does not match gets no row for this
    /// sink (empty: every hook).
    pub filter: Filter,
}

/// What [`SourceRoute::resolve`] decided for one hook.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// The delivery rows: one per sink entry whose filter the hook matches,
    /// in entry order.
    pub rows: Vec<NewRow>,
    /// The kind of each ordered sink (of those rows) that resolved no key,
    /// for `ankusa_dispatch_lane_key_missing_total{sink}`.
    pub keyless: Vec<&'static str>,
    /// The name of each sink entry whose filter the hook did not match (no
    /// row), for `ankusa_ingest_filtered_total{source,sink_name}`.
    pub filtered: Vec<&'a str>,
}

/// One source, as ingest needs it.
#[derive(Debug)]
pub struct SourceRoute {
    /// Name.
    pub name: String,
    /// Id in the store.
    pub id: SourceId,
    /// Exact path.
    pub path: String,
    /// Fixed tenant, or `None` for TenantPath.
    pub tenant: Option<TenantRoute>,
    /// Tenants a TenantPath source accepts, by name.
    pub path_tenants: BTreeMap<String, TenantRoute>,
    /// Verification.
    pub verifier: Verifier,
    /// Whether Slack's url_verification is answered here.
    pub slack_handshake: bool,
    /// Dedupe key spec and record lifetime (ms).
    pub dedupe: Option<(KeySpec, u64)>,
    /// The effective store_headers policy.
    pub policy: HeaderPolicy,
    /// Sink entries.
    pub sinks: Vec<SinkRoute>,
    /// The GET handshake, when the source configures one.
    pub challenge: Option<ChallengeRoute>,
    /// `quarantine: true`: every verified hook is held in quarantine.
    pub quarantine: bool,
    /// What a failed signature does (401, or quarantine).
    pub on_invalid_signature: OnInvalidSignature,
    /// This source's requests by status code (`ankusa_ingest_requests_total`,
    /// made visible by [`super::metrics::IngestMetrics::register_sources`]).
    pub requests: std::sync::Arc<super::metrics::RequestCounts>,
}

/// A source's GET handshake (docs/design.md section 5).
#[derive(Debug, Clone)]
pub struct ChallengeRoute {
    /// The query parameter whose value is echoed back.
    pub param: String,
    /// The query parameter that carries the token, and the token's bytes.
    pub token: Option<(String, Vec<u8>)>,
}

impl SourceRoute {
    /// The delivery rows of a hook of this source: one per sink entry whose
    /// `filter` the hook matches ([`Filter::matches`]), with its lane for an
    /// ordered sink, the key resolved from `headers` and `body` by
    /// [`ordering::ordering_key`] (ADR 0004 section 2). The one function
    /// ingest (the request's headers), a quarantine release and an archive
    /// replay (the stored envelope's headers, which keep every header a key
    /// or a filter names: the configuration enforces it) resolve rows with.
    /// Filters, ordering keys and the dedupe key of a hook share `body`'s one
    /// JSON decode. A sink that filters the hook out resolves no key (it is
    /// not counted keyless).
    pub fn resolve<'a>(&'a self, headers: &[Header<'_>], body: &ParsedBody<'_>) -> Resolved<'a> {
        let mut out = Resolved::default();
        for s in &self.sinks {
            if !s.filter.matches(headers, body) {
                out.filtered.push(s.name.as_str());
                continue;
            }
            let lane = s.ordered.as_ref().map(|specs| {
                let key = specs
                    .iter()
                    .find_map(|spec| ordering::ordering_key(spec, headers, body));
                if key.is_none() {
                    out.keyless.push(s.kind);
                }
                lanes::assign(s.index, self.id, key.as_deref())
            });
            out.rows.push(NewRow {
                sink: s.index,
                lane,
            });
        }
        out
    }

    /// [`SourceRoute::resolve`]'s rows and keyless sink kinds (filters
    /// applied).
    pub fn rows_for(
        &self,
        headers: &[Header<'_>],
        body: &ParsedBody<'_>,
    ) -> (Vec<NewRow>, Vec<&'static str>) {
        let r = self.resolve(headers, body);
        (r.rows, r.keyless)
    }

    /// The headers to store, after the policy: kept as received, dropped, or
    /// replaced by `sha256:<hex>` of the value.
    pub fn store_headers(&self, headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        headers
            .iter()
            .filter_map(
                |(n, v)| match self.policy.action(&String::from_utf8_lossy(n)) {
                    HeaderAction::Keep => Some((n.clone(), v.clone())),
                    HeaderAction::Drop => None,
                    HeaderAction::Hash => {
                        let digest = Sha256::digest(v);
                        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                        Some((n.clone(), format!("sha256:{hex}").into_bytes()))
                    }
                },
            )
            .collect()
    }
}

/// A configuration the edge cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// An option the edge does not support yet, named.
    #[error("source {source_name:?}: option {option:?}: {message}")]
    Unsupported {
        /// The source.
        source_name: String,
        /// The option.
        option: String,
        /// Why.
        message: String,
    },
}

fn spec(source: &str, option: &str, key: &KeySource) -> Result<KeySpec, RouteError> {
    let r = match key {
        KeySource::Header(h) => KeySpec::header(h),
        KeySource::Json(p) => KeySpec::json(&p.dotted),
    };
    r.map_err(|e| RouteError::Unsupported {
        source_name: source.into(),
        option: option.into(),
        message: e.to_string(),
    })
}

fn secrets(list: &[ankusa_config::Secret]) -> Vec<Secret> {
    list.iter()
        .map(|s| Secret::new(s.expose().as_bytes().to_vec()))
        .collect()
}

fn verifier(source: &str, v: &Verification) -> Result<Verifier, RouteError> {
    Ok(match v {
        Verification::None => Verifier::None,
        Verification::Github { secrets: s } => Verifier::GitHub {
            secrets: secrets(s),
        },
        Verification::Stripe {
            secrets: s,
            tolerance_ms,
        } => Verifier::Stripe {
            secrets: secrets(s),
            tolerance_ms: *tolerance_ms,
        },
        Verification::Shopify { secrets: s } => Verifier::Shopify {
            secrets: secrets(s),
        },
        Verification::Slack {
            secrets: s,
            tolerance_ms,
        } => Verifier::Slack {
            secrets: secrets(s),
            tolerance_ms: *tolerance_ms,
        },
        Verification::StandardWebhooks {
            secrets: s,
            tolerance_ms,
        } => Verifier::StandardWebhooks {
            keys: s
                .iter()
                .map(|k| Secret::standard_webhooks(k.expose()))
                .collect::<Result<_, _>>()
                .map_err(|e| RouteError::Unsupported {
                    source_name: source.into(),
                    option: "verification.secrets".into(),
                    message: format!("not a whsec_ secret: {e}"),
                })?,
            tolerance_ms: *tolerance_ms,
        },
        Verification::Hmac {
            header,
            algorithm,
            encoding,
            prefix,
            secrets: s,
        } => Verifier::Hmac(HmacHeader {
            header: header.clone(),
            algorithm: match algorithm {
                ankusa_config::HmacAlgorithm::Sha256 => HmacAlgorithm::Sha256,
                ankusa_config::HmacAlgorithm::Sha1 => HmacAlgorithm::Sha1,
                ankusa_config::HmacAlgorithm::Sha512 => HmacAlgorithm::Sha512,
            },
            encoding: match encoding {
                ankusa_config::SignatureEncoding::Hex => SignatureEncoding::Hex,
                ankusa_config::SignatureEncoding::Base64 => SignatureEncoding::Base64,
            },
            prefix: prefix.clone(),
            secrets: secrets(s),
        }),
    })
}

/// An entry's ordering as ingest resolves it: `None` unordered, `Some([])`
/// ordered with every hook in the keyless lane, `Some(specs)` keyed by the
/// first of `specs` that holds a key.
fn sink_order(source: &str, e: &SinkEntry) -> Result<Option<Vec<KeySpec>>, RouteError> {
    Ok(match &e.order {
        Order::Unordered => None,
        Order::Ordered { key: None } => Some(Vec::new()),
        Order::Ordered { key: Some(k) } => Some(key_places(source, k)?),
    })
}

/// The places of one ordering key, in the order they are tried.
fn key_places(source: &str, k: &OrderingKey) -> Result<Vec<KeySpec>, RouteError> {
    match k {
        OrderingKey::Header(h) => Ok(vec![spec(
            source,
            "ordering_key",
            &KeySource::Header(h.clone()),
        )?]),
        OrderingKey::Json(p) => Ok(vec![spec(
            source,
            "ordering_key",
            &KeySource::Json(p.clone()),
        )?]),
        OrderingKey::FirstOf(places) => {
            let mut out = Vec::with_capacity(places.len());
            for place in places {
                out.extend(key_places(source, place)?);
            }
            Ok(out)
        }
        OrderingKey::Func(_) => Err(RouteError::Unsupported {
            source_name: source.into(),
            option: "ordering_key".into(),
            message: "function keys are not wired into the edge yet".into(),
        }),
    }
}

/// An entry's `filter` as ingest evaluates it (values as bytes).
fn sink_filter(source: &str, e: &SinkEntry) -> Result<Filter, RouteError> {
    let bytes = |s: &String| s.as_bytes().to_vec();
    let mut conditions = Vec::with_capacity(e.filter.len());
    for c in &e.filter {
        conditions.push(Condition {
            on: spec(source, "filter", &c.on)?,
            test: match &c.test {
                FilterTest::Equals(v) => Test::Equals(bytes(v)),
                FilterTest::OneOf(vs) => Test::OneOf(vs.iter().map(bytes).collect()),
                FilterTest::Prefix(v) => Test::Prefix(bytes(v)),
                FilterTest::Exists(b) => Test::Exists(*b),
            },
        });
    }
    Ok(Filter::new(conditions))
}

/// Every option of `source` that the edge cannot serve, as configuration
/// problems (empty: the edge can serve it). The binary runs this on each
/// source while the file loads (`ankusa_config::Config::load_checked`), so
/// `check-config` and `serve` report these with the file's other problems in
/// one run; [`build_routes`] refuses the same options later, at the first.
pub fn check_source(source: &Source) -> Vec<Problem> {
    let problem = |scope: Scope, e: RouteError| {
        let RouteError::Unsupported {
            option, message, ..
        } = e;
        Problem {
            scope,
            option,
            message,
        }
    };
    let source_scope = || Scope::Source {
        source_name: source.name.clone(),
    };
    let mut out = Vec::new();
    if let Err(e) = verifier(&source.name, &source.verification) {
        out.push(problem(source_scope(), e));
    }
    if let Some(d) = &source.dedupe
        && let Err(e) = spec(&source.name, "dedupe", &d.key)
    {
        out.push(problem(source_scope(), e));
    }
    for e in &source.sinks {
        let scope = || Scope::Sink {
            source_name: source.name.clone(),
            sink: e.name.clone(),
            kind: e.kind.as_str().to_owned(),
        };
        if let Err(err) = sink_order(&source.name, e) {
            out.push(problem(scope(), err));
        }
        if let Err(err) = sink_filter(&source.name, e) {
            out.push(problem(scope(), err));
        }
    }
    out
}

/// What the ingest path routes by: one configuration's sources and the
/// node's limits. The edge holds one at a time and a reload replaces it whole
/// ([`super::Edge::routes`]): a request reads it once, so a hook is routed by
/// one configuration, never a mix (docs/design.md section 5, "Reload").
#[derive(Debug)]
pub struct IngestRoutes {
    /// Sources by path.
    pub sources: Vec<SourceRoute>,
    /// Body limit, bytes (`listeners.body_limit_bytes`).
    pub body_limit_bytes: u64,
    /// Node-wide pending bound (rows), 503 past it (`node.max_pending`).
    pub node_max_pending: u64,
    /// Node-wide pending bytes bound, 503 past it (`node.max_pending_bytes`).
    pub node_max_pending_bytes: u64,
}

impl IngestRoutes {
    /// The routes of `config` ([`build_routes`]) and its limits. A source
    /// that `previous` also routes keeps its request counters
    /// (`ankusa_ingest_requests_total` does not restart at a reload).
    ///
    /// # Errors
    /// [`RouteError`] for an option the edge cannot serve (named).
    pub fn build(
        config: &Config,
        registry: &Registry,
        previous: Option<&IngestRoutes>,
    ) -> Result<IngestRoutes, RouteError> {
        let mut sources = build_routes(config, registry)?;
        if let Some(prev) = previous {
            for s in &mut sources {
                if let Some(p) = prev.sources.iter().find(|p| p.name == s.name) {
                    s.requests = std::sync::Arc::clone(&p.requests);
                }
            }
        }
        Ok(IngestRoutes {
            sources,
            body_limit_bytes: config.listeners.body_limit_bytes,
            node_max_pending: config.node.max_pending,
            node_max_pending_bytes: config.node.max_pending_bytes,
        })
    }

    /// The source at `path` and its tenant (or why the path names none).
    pub fn route(&self, path: &str) -> Option<(&SourceRoute, Result<TenantRoute, String>)> {
        for s in &self.sources {
            if path == s.path {
                return match &s.tenant {
                    Some(t) => Some((s, Ok(t.clone()))),
                    None => Some((
                        s,
                        Err(format!("{path} needs a tenant: POST {path}/{{tenant}}")),
                    )),
                };
            }
            if s.tenant.is_none()
                && let Some(rest) = path
                    .strip_prefix(s.path.as_str())
                    .and_then(|r| r.strip_prefix('/'))
                && !rest.is_empty()
                && !rest.contains('/')
            {
                return Some(match s.path_tenants.get(rest) {
                    Some(t) => (s, Ok(t.clone())),
                    None => (s, Err(format!("no tenant {rest:?} for source {}", s.name))),
                });
            }
        }
        None
    }
}

/// Builds every source's route from `config`, with the store's numbers in
/// `registry` (every configured tenant and source must be registered).
///
/// # Errors
/// [`RouteError`] for an option the edge cannot serve (named).
pub fn build_routes(config: &Config, registry: &Registry) -> Result<Vec<SourceRoute>, RouteError> {
    let tenant_route = |name: &str| -> Option<TenantRoute> {
        let t = config.tenant(name)?;
        Some(TenantRoute {
            ord: *registry.tenants.get(name)?,
            name: name.to_owned(),
            max_pending: t.max_pending,
            max_pending_bytes: t.max_pending_bytes,
        })
    };
    let mut out = Vec::new();
    // The relay's own sources (its notifications: docs/design.md section 5,
    // "Notifications") take no hook from the network.
    for s in config.configured_sources() {
        let missing = |what: &str| RouteError::Unsupported {
            source_name: s.name.clone(),
            option: what.into(),
            message: "not registered in the store".into(),
        };
        let id = *registry
            .sources
            .get(&s.name)
            .ok_or_else(|| missing("name"))?;
        let (tenant, path_tenants) = match &s.tenant {
            TenantBinding::Fixed(t) => (
                Some(tenant_route(t).ok_or_else(|| missing("tenant"))?),
                BTreeMap::new(),
            ),
            TenantBinding::Path => (
                None,
                config
                    .tenants
                    .iter()
                    .filter(|t| !ankusa_config::is_internal(&t.name))
                    .filter_map(|t| Some((t.name.clone(), tenant_route(&t.name)?)))
                    .collect(),
            ),
        };
        let mut sinks = Vec::new();
        for e in &s.sinks {
            let ordered = sink_order(&s.name, e)?;
            let filter = sink_filter(&s.name, e)?;
            sinks.push(SinkRoute {
                index: SinkIx(e.index),
                kind: e.kind.as_str(),
                ordered,
                name: e.name.clone(),
                filter,
            });
        }
        out.push(SourceRoute {
            name: s.name.clone(),
            id,
            path: s.path.clone(),
            tenant,
            path_tenants,
            slack_handshake: matches!(s.verification, Verification::Slack { .. }),
            verifier: verifier(&s.name, &s.verification)?,
            dedupe: match &s.dedupe {
                Some(d) => Some((spec(&s.name, "dedupe", &d.key)?, d.ttl_ms)),
                None => None,
            },
            policy: s.store_headers.clone(),
            sinks,
            challenge: s.challenge.as_ref().map(|c| ChallengeRoute {
                param: c.query.clone(),
                token: c
                    .token
                    .as_ref()
                    .map(|(q, t)| (q.clone(), t.expose().as_bytes().to_vec())),
            }),
            quarantine: s.quarantine,
            on_invalid_signature: s.on_invalid_signature,
            requests: Default::default(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(yaml: &str) -> SourceRoute {
        let config = Config::from_yaml(yaml, &|_| None).unwrap_or_else(|e| panic!("{e}"));
        let registry = Registry {
            tenants: [("default".to_owned(), TenantOrd(1))].into(),
            sources: [("stripe".to_owned(), SourceId(3))].into(),
        };
        let mut routes = build_routes(&config, &registry).unwrap_or_else(|e| panic!("{e}"));
        routes.remove(0)
    }

    /// Only the sinks whose filter the hook matches get a row (in entry order,
    /// each with its own index); a filtered-out ordered sink resolves no key
    /// and is not counted keyless; its name is reported.
    #[test]
    fn resolve_makes_rows_only_for_the_sinks_whose_filter_matches() {
        let r = route(
            "sources:
  - name: stripe
    sinks:
      - {type: http, name: all, url: 'http://h/a'}
      - {type: http, name: invoices, url: 'http://h/i', ordered: true, ordering_key: {json: data.object.customer}, filter: {json: type, prefix: 'invoice.'}}
      - {type: http, name: live, url: 'http://h/l', ordered: true, ordering_key: {json: data.object.customer}, filter: [{header: x-live, exists: true}, {json: type, one_of: [charge.succeeded, invoice.paid]}]}
",
        );
        assert_eq!(
            r.sinks.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["all", "invoices", "live"]
        );
        let invoice = br#"{"type":"invoice.paid","data":{"object":{"customer":"cus_1"}}}"#;
        let body = ParsedBody::new(invoice);
        let got = r.resolve(&[], &body);
        assert_eq!(
            got.rows.iter().map(|row| row.sink).collect::<Vec<_>>(),
            [SinkIx(0), SinkIx(1)]
        );
        assert_eq!(
            got.rows[1].lane,
            Some(lanes::assign(SinkIx(1), SourceId(3), Some(b"cus_1")))
        );
        assert_eq!((got.keyless, got.filtered), (vec![], vec!["live"]));

        let headers: Vec<Header<'_>> = vec![(&b"X-Live"[..], &b"1"[..])];
        let got = r.resolve(
            &headers,
            &ParsedBody::new(br#"{"type":"charge.succeeded","data":{"object":{}}}"#),
        );
        assert_eq!(
            got.rows.iter().map(|row| row.sink).collect::<Vec<_>>(),
            [SinkIx(0), SinkIx(2)]
        );
        assert_eq!(
            (got.keyless, got.filtered),
            (vec!["http"], vec!["invoices"]),
            "live's row has no customer"
        );

        // Not JSON: only the unfiltered sink; the filtered ordered sinks are
        // not counted keyless.
        let got = r.resolve(&headers, &ParsedBody::new(b"type=invoice.paid"));
        assert_eq!(
            got.rows,
            [NewRow {
                sink: SinkIx(0),
                lane: None
            }]
        );
        assert_eq!(
            (got.keyless, got.filtered),
            (vec![], vec!["invoices", "live"])
        );
        let (rows, keyless) = r.rows_for(&headers, &ParsedBody::new(b"type=invoice.paid"));
        assert_eq!(
            (rows.len(), keyless.len()),
            (1, 0),
            "rows_for applies the filters too"
        );
    }

    /// An ordering key given as a list of places (ADR 0004 section 1): the
    /// first that holds a key gives it. Stripe's `customer.created` carries
    /// the customer id in `data.object.id` and `invoice.paid` in
    /// `data.object.customer`: with `[customer, id]` the two hooks of one
    /// customer (the repository's corpus) share a lane; a hook with neither
    /// goes to the keyless lane and is counted keyless; an empty string is
    /// no key, so the next place is tried.
    #[test]
    fn an_ordering_key_list_takes_the_first_place_that_holds_a_key() {
        let r = route(
            "sources:
  - name: stripe
    sinks:
      - {type: http, url: 'http://h/a', ordered: true, ordering_key: [{json: data.object.customer}, {json: data.object.id}]}
",
        );
        let corpus = |name: &str| -> Vec<u8> {
            let path = format!(
                "{}/../fixtures/corpus/stripe/{name}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let file: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&path).expect("corpus file"))
                    .expect("corpus JSON");
            match &file["body"] {
                serde_json::Value::String(b) => b.clone().into_bytes(),
                other => serde_json::to_vec(other).expect("body"),
            }
        };
        let lane_of = |body: &[u8]| {
            let got = r.resolve(&[], &ParsedBody::new(body));
            (got.rows[0].lane.clone(), got.keyless)
        };
        let customer = lanes::assign(SinkIx(0), SourceId(3), Some(b"cus_QXg1o8vcGmoR32"));
        assert_eq!(
            lane_of(&corpus("customer_created")),
            (Some(customer.clone()), vec![])
        );
        assert_eq!(
            lane_of(&corpus("invoice_paid")),
            (Some(customer.clone()), vec![])
        );
        assert_eq!(
            lane_of(br#"{"data":{"object":{"customer":"","id":"cus_QXg1o8vcGmoR32"}}}"#),
            (Some(customer), vec![]),
            "an empty customer is no key: the id is tried"
        );
        assert_eq!(
            lane_of(br#"{"data":{"object":{}}}"#),
            (
                Some(lanes::assign(SinkIx(0), SourceId(3), None)),
                vec!["http"]
            )
        );
    }
}
