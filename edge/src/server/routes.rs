//! From the configuration model to what the ingest handler reads per request:
//! verifiers, key specs, header policies, tenant bounds, ordinals and ids.

use std::collections::BTreeMap;

use ankusa_config::{
    Config, HeaderAction, HeaderPolicy, KeySource, OnInvalidSignature, Order, OrderingKey, Problem,
    Scope, SinkEntry, Source, TenantBinding, Verification,
};
use ankusa_keys::{SinkIx, SourceId, TenantOrd};
use ankusa_queue::{NewRow, Registry, lanes};
use sha2::{Digest, Sha256};

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
    /// `None`: unordered. `Some(None)`: ordered, keyless lane only.
    /// `Some(Some(spec))`: ordered by that key.
    pub ordered: Option<Option<KeySpec>>,
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
    /// The delivery rows of a hook of this source: one per sink entry, with
    /// its lane for an ordered sink, the key resolved from `headers` and `body`
    /// by [`ordering::ordering_key`] (ADR 0004 section 2). The one function
    /// both ingest (the request's headers) and a quarantine release (the
    /// stored envelope's headers, which keep every header a key names: the
    /// configuration enforces it) resolve rows with. Also returns the kind of
    /// each ordered sink that resolved no key (the keyless lane), for
    /// `ankusa_dispatch_lane_key_missing_total{sink}`.
    pub fn rows_for(&self, headers: &[Header<'_>], body: &ParsedBody<'_>) -> (Vec<NewRow>, Vec<&'static str>) {
        let mut keyless = Vec::new();
        let rows = self
            .sinks
            .iter()
            .map(|s| NewRow {
                sink: s.index,
                lane: s.ordered.as_ref().map(|spec| {
                    let key = spec.as_ref().and_then(|spec| ordering::ordering_key(spec, headers, body));
                    if key.is_none() {
                        keyless.push(s.kind);
                    }
                    lanes::assign(s.index, self.id, key.as_deref())
                }),
            })
            .collect();
        (rows, keyless)
    }

    /// The headers to store, after the policy: kept as received, dropped, or
    /// replaced by `sha256:<hex>` of the value.
    pub fn store_headers(&self, headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        headers
            .iter()
            .filter_map(|(n, v)| match self.policy.action(&String::from_utf8_lossy(n)) {
                HeaderAction::Keep => Some((n.clone(), v.clone())),
                HeaderAction::Drop => None,
                HeaderAction::Hash => {
                    let digest = Sha256::digest(v);
                    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                    Some((n.clone(), format!("sha256:{hex}").into_bytes()))
                }
            })
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
    r.map_err(|e| RouteError::Unsupported { source_name: source.into(), option: option.into(), message: e.to_string() })
}

fn secrets(list: &[ankusa_config::Secret]) -> Vec<Secret> {
    list.iter().map(|s| Secret::new(s.expose().as_bytes().to_vec())).collect()
}

fn verifier(source: &str, v: &Verification) -> Result<Verifier, RouteError> {
    Ok(match v {
        Verification::None => Verifier::None,
        Verification::Github { secrets: s } => Verifier::GitHub { secrets: secrets(s) },
        Verification::Stripe { secrets: s, tolerance_ms } => Verifier::Stripe { secrets: secrets(s), tolerance_ms: *tolerance_ms },
        Verification::Shopify { secrets: s } => Verifier::Shopify { secrets: secrets(s) },
        Verification::Slack { secrets: s, tolerance_ms } => Verifier::Slack { secrets: secrets(s), tolerance_ms: *tolerance_ms },
        Verification::StandardWebhooks { secrets: s, tolerance_ms } => Verifier::StandardWebhooks {
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
        Verification::Hmac { header, algorithm, encoding, prefix, secrets: s } => Verifier::Hmac(HmacHeader {
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

/// An entry's ordering as ingest resolves it: `None` unordered, `Some(None)`
/// ordered with every hook in the keyless lane, `Some(Some(spec))` keyed.
fn sink_order(source: &str, e: &SinkEntry) -> Result<Option<Option<KeySpec>>, RouteError> {
    Ok(match &e.order {
        Order::Unordered => None,
        Order::Ordered { key: None } => Some(None),
        Order::Ordered { key: Some(OrderingKey::Header(h)) } => {
            Some(Some(spec(source, "ordering_key", &KeySource::Header(h.clone()))?))
        }
        Order::Ordered { key: Some(OrderingKey::Json(p)) } => {
            Some(Some(spec(source, "ordering_key", &KeySource::Json(p.clone()))?))
        }
        Order::Ordered { key: Some(OrderingKey::Func(_)) } => {
            return Err(RouteError::Unsupported {
                source_name: source.into(),
                option: "ordering_key".into(),
                message: "function keys are not wired into the edge yet".into(),
            });
        }
    })
}

/// Every option of `source` that the edge cannot serve, as configuration
/// problems (empty: the edge can serve it). The binary runs this on each
/// source while the file loads (`ankusa_config::Config::load_checked`), so
/// `check-config` and `serve` report these with the file's other problems in
/// one run; [`build_routes`] refuses the same options later, at the first.
pub fn check_source(source: &Source) -> Vec<Problem> {
    let problem = |scope: Scope, e: RouteError| {
        let RouteError::Unsupported { option, message, .. } = e;
        Problem { scope, option, message }
    };
    let source_scope = || Scope::Source { source_name: source.name.clone() };
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
        if let Err(err) = sink_order(&source.name, e) {
            let scope = Scope::Sink {
                source_name: source.name.clone(),
                sink: e.name.clone(),
                kind: e.kind.as_str().to_owned(),
            };
            out.push(problem(scope, err));
        }
    }
    out
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
    for s in &config.sources {
        let missing = |what: &str| RouteError::Unsupported {
            source_name: s.name.clone(),
            option: what.into(),
            message: "not registered in the store".into(),
        };
        let id = *registry.sources.get(&s.name).ok_or_else(|| missing("name"))?;
        let (tenant, path_tenants) = match &s.tenant {
            TenantBinding::Fixed(t) => (Some(tenant_route(t).ok_or_else(|| missing("tenant"))?), BTreeMap::new()),
            TenantBinding::Path => (
                None,
                config.tenants.iter().filter_map(|t| Some((t.name.clone(), tenant_route(&t.name)?))).collect(),
            ),
        };
        let mut sinks = Vec::new();
        for e in &s.sinks {
            let ordered = sink_order(&s.name, e)?;
            sinks.push(SinkRoute { index: SinkIx(e.index), kind: e.kind.as_str(), ordered });
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
                token: c.token.as_ref().map(|(q, t)| (q.clone(), t.expose().as_bytes().to_vec())),
            }),
            quarantine: s.quarantine,
            on_invalid_signature: s.on_invalid_signature,
        });
    }
    Ok(out)
}
