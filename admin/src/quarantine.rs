//! One quarantined hook as the operator acts on it (docs/design.md section
//! 5, "Quarantine"): why it is held ([`reason`]), its release ([`release`]:
//! its rows resolved from the stored envelope with its source's current
//! configuration by the ingest path's own function, committed through the
//! Writer) and its drop ([`drop_one`]), each checked under the admin write
//! lock; [`release_quarantined`] and [`drop_quarantined`] are the Writer
//! calls themselves, on the edge. Release or drop of every hook a filter
//! takes is a job (`jobs::quarantine`).

use ankusa_edge::server::{Edge, Resolved, StoreReadError};
use ankusa_edge::{Header, ParsedBody};
use ankusa_engine::{Cf, Kv};
use ankusa_keys::{
    Envelope, QuarantinedValue, Seq, SourceId, TenantOrd, hook_key, quarantined_key,
};
use ankusa_queue::writer::WriteError;
use tracing::info;

use crate::context::{Context, block, read_envelope};
use crate::error::JobError;

/// What a release did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// The hook's source.
    pub source: String,
    /// Delivery rows made (one per sink entry of the source whose filter
    /// the hook matches).
    pub rows: usize,
}

/// The reason hook `seq` of `tenant` (named `name`) is held.
///
/// # Errors
/// Not found for no such hook; a conflict for a hook that is not
/// quarantined; a store failure.
pub fn reason<K: Kv>(
    state: &Context<K>,
    name: &str,
    tenant: TenantOrd,
    seq: Seq,
) -> Result<String, JobError> {
    match state.kv.get(Cf::Index, &quarantined_key(tenant, seq))? {
        Some(v) => Ok(QuarantinedValue::decode(&v)
            .map_err(JobError::store)?
            .reason),
        None if read_envelope(&*state.kv, tenant, seq)?.is_some() => Err(JobError::conflict(
            format!("hook {} of tenant {name:?} is not quarantined", seq.0),
        )),
        None => Err(JobError::not_found(format!(
            "tenant {name:?} has no hook {} (never stored, dropped, or removed by retention)",
            seq.0
        ))),
    }
}

/// Why a release or drop of a quarantined hook failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseError {
    /// The hook is not (or no longer) quarantined.
    #[error("hook {tenant}/{seq} is not quarantined")]
    NotQuarantined {
        /// The tenant.
        tenant: TenantOrd,
        /// The hook.
        seq: Seq,
    },
    /// The hook's source is not in the configuration any more.
    #[error("source {source_id} of the hook is not configured")]
    SourceNotConfigured {
        /// The source's id in the store.
        source_id: SourceId,
    },
    /// The Writer refused or failed the commit.
    #[error(transparent)]
    Write(WriteError),
    /// A store read failed, or the envelope does not decode.
    #[error("store: {0}")]
    Store(StoreReadError),
}

/// A failed release or drop of hook `seq` of tenant `name` as the operator
/// reads it.
fn release_error(name: &str, seq: Seq, e: ReleaseError) -> JobError {
    match e {
        ReleaseError::NotQuarantined { .. } => JobError::conflict(format!(
            "hook {} of tenant {name:?} is not quarantined",
            seq.0
        )),
        ReleaseError::SourceNotConfigured { source_id } => JobError::conflict(format!(
            "the hook's source (number {source_id}) is not in the configuration: nothing to deliver it to; drop it instead"
        )),
        ReleaseError::Write(WriteError::TenantPurging { .. }) => {
            JobError::conflict(format!("tenant {name:?} is being purged"))
        }
        ReleaseError::Write(WriteError::Stopped) => {
            JobError::unavailable("the Writer has stopped (the relay is stopping)")
        }
        ReleaseError::Write(e) => JobError::store(e),
        ReleaseError::Store(m) => JobError::store(m),
    }
}

/// Checks, under the write lock, that hook `seq` of `tenant` (named `name`)
/// is held and its tenant is not being purged.
fn held<K: Kv>(
    state: &Context<K>,
    name: &str,
    tenant: TenantOrd,
    seq: Seq,
) -> Result<(), JobError> {
    reason(state, name, tenant, seq)?;
    if state.purging(tenant)? {
        return Err(JobError::conflict(format!(
            "tenant {name:?} is being purged"
        )));
    }
    Ok(())
}

/// Releases quarantined hook `seq` of `tenant` (named `name`; see
/// [`release_quarantined`]) once it is checked under the write lock: it is
/// held and its tenant is not being purged.
///
/// # Errors
/// Not found for no such hook; a conflict for a hook not quarantined, a
/// tenant being purged, or a source no longer configured (nothing to
/// deliver to); unavailable when the Writer is not running; a store failure.
pub fn release<K: Kv>(
    state: &Context<K>,
    name: &str,
    tenant: TenantOrd,
    seq: Seq,
) -> Result<Released, JobError> {
    let _writes = state.writes.blocking_lock();
    held(state, name, tenant, seq)?;
    let edge = state
        .edge()
        .ok_or_else(|| JobError::unavailable("the Writer is not running"))?;
    block(release_quarantined(&edge, tenant, seq)).map_err(|e| release_error(name, seq, e))
}

/// Drops quarantined hook `seq` of `tenant` (named `name`; see
/// [`drop_quarantined`]) once it is checked as for [`release`].
///
/// # Errors
/// As [`release`], but for the source.
pub fn drop_one<K: Kv>(
    state: &Context<K>,
    name: &str,
    tenant: TenantOrd,
    seq: Seq,
) -> Result<(), JobError> {
    let _writes = state.writes.blocking_lock();
    held(state, name, tenant, seq)?;
    let edge = state
        .edge()
        .ok_or_else(|| JobError::unavailable("the Writer is not running"))?;
    block(drop_quarantined(&edge, tenant, seq)).map_err(|e| release_error(name, seq, e))
}

/// Releases quarantined hook `seq` of `tenant` (docs/design.md section 5,
/// "Quarantine") through `edge`: reads its stored envelope, resolves its rows
/// with the current configuration of its source by the ingest path's own
/// function ([`ankusa_edge::server::SourceRoute::resolve`]: the sinks'
/// filters and ordering keys from the stored headers and body, ADR 0004
/// section 2; a hook no filter takes is released with no row), and commits
/// the release through the Writer (`Sync`, serialised with every other
/// release and drop of the hook). The hook keeps its seq; the pipeline is
/// woken (the edge's `on_commit`), and the edge's counters count its keyless
/// and filtered rows as at ingest.
///
/// # Errors
/// [`ReleaseError::NotQuarantined`], [`ReleaseError::SourceNotConfigured`]
/// (its source is no longer in the configuration: nothing to deliver to),
/// [`ReleaseError::Write`] (the Writer refused or failed),
/// [`ReleaseError::Store`].
pub async fn release_quarantined<K: Kv>(
    edge: &Edge<K>,
    tenant: TenantOrd,
    seq: Seq,
) -> Result<Released, ReleaseError> {
    let raw = edge
        .kv
        .get(Cf::Hooks, &hook_key(tenant, seq))
        .map_err(|e| ReleaseError::Store(e.into()))?
        .ok_or(ReleaseError::NotQuarantined { tenant, seq })?;
    let envelope = Envelope::decode(&raw).map_err(|e| ReleaseError::Store(e.into()))?;
    let routes = edge.routes.load();
    let route = routes
        .sources
        .iter()
        .find(|r| r.id == envelope.source)
        .ok_or(ReleaseError::SourceNotConfigured {
            source_id: envelope.source,
        })?;
    let headers: Vec<Header<'_>> = envelope
        .headers
        .iter()
        .map(|(n, v)| (n.as_slice(), v.as_slice()))
        .collect();
    let parsed = ParsedBody::new(&envelope.body);
    let Resolved {
        rows,
        keyless,
        filtered,
    } = route.resolve(&headers, &parsed);
    let n = rows.len();
    match edge.writer.release(tenant, seq, rows).await {
        Ok(()) => {
            (edge.on_commit)();
            edge.stats.count_keyless(&keyless);
            // A released hook no filter takes is committed with no row:
            // unmatched, as at ingest.
            if n == 0 {
                edge.stats
                    .unmatched
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            edge.stats
                .count_filtered(&route.name, filtered.iter().copied());
            info!(source = %route.name, tenant = tenant.0, seq = seq.0, rows = n, "quarantined hook released");
            Ok(Released {
                source: route.name.clone(),
                rows: n,
            })
        }
        Err(WriteError::NotQuarantined { tenant, seq }) => {
            Err(ReleaseError::NotQuarantined { tenant, seq })
        }
        Err(e) => Err(ReleaseError::Write(e)),
    }
}

/// Drops quarantined hook `seq` of `tenant` (its ?Q, envelope and archive
/// entry) through `edge`'s Writer.
///
/// # Errors
/// [`ReleaseError::NotQuarantined`]; [`ReleaseError::Write`].
pub async fn drop_quarantined<K: Kv>(
    edge: &Edge<K>,
    tenant: TenantOrd,
    seq: Seq,
) -> Result<(), ReleaseError> {
    match edge.writer.drop_quarantined(tenant, seq).await {
        Ok(()) => {
            info!(tenant = tenant.0, seq = seq.0, "quarantined hook dropped");
            Ok(())
        }
        Err(WriteError::NotQuarantined { tenant, seq }) => {
            Err(ReleaseError::NotQuarantined { tenant, seq })
        }
        Err(e) => Err(ReleaseError::Write(e)),
    }
}
