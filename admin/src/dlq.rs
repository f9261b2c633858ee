//! The dead-letter queue as the operator acts on it (docs/design.md section
//! 5, "Admin API"; the ?X family of section 3): which dead letters a filter
//! takes ([`DlqFilter`], [`scan`]), revive one row, drop one row. A list and a
//! view of them are the HTTP layer's (`http::dlq`); a revive or drop by
//! filter is a job (`jobs::dlq`).
//!
//! Every mutation is one batch built by a pure builder of `queue`
//! (`queue::revive`, ADR 0004 section 4.8: a laned row re-enters as a member
//! plus its ?P marker and waits behind the lane's current head;
//! `queue::drop_dead`), written `Durability::Sync` under the admin write lock,
//! then the pipeline is woken.

use std::collections::HashMap;

use ankusa_engine::{Cf, Direction, KeyRange, Kv, Read};
use ankusa_keys::{
    DeadLetterKey, DeadLetterValue, DeliveryRow, Envelope, Family, Seq, SourceId, TenantOrd,
    delivery_key, family_range, hook_key, tenant_range,
};
use ankusa_queue::{QueueError, RowId};
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::error::JobError;

/// Which dead letters a list or a job takes. Every field narrows; all names
/// are the configuration's. Stored in a job's state as it was given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DlqFilter {
    /// Tenant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Source name (the hook's source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Sink entry name (of the hook's source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<String>,
    /// The dead-letter reason starts with this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// dead_at_ms at or after this, unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// dead_at_ms before this, unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
}

impl DlqFilter {
    /// Checks the filter against the store and the configuration.
    ///
    /// # Errors
    /// 400 for an inverted time range; 404 for a tenant, source or sink name
    /// nobody has.
    pub fn check<K: Kv>(&self, state: &Context<K>) -> Result<(), JobError> {
        if let (Some(s), Some(u)) = (self.since_ms, self.until_ms)
            && s >= u
        {
            return Err(JobError::Invalid(format!(
                "the time range is empty or inverted: since {s} is not before until {u}"
            )));
        }
        if let Some(t) = &self.tenant {
            state.tenant_ord(t)?;
        }
        if let Some(s) = &self.source
            && !state.registry.load().sources.contains_key(s)
        {
            return Err(JobError::NotFound(format!("no source {s:?}")));
        }
        if let Some(name) = &self.sink {
            let config = state.config.load();
            let sources: Vec<&ankusa_config::Source> = match &self.source {
                Some(s) => config.source(s).into_iter().collect(),
                None => config.sources.iter().collect(),
            };
            if !sources
                .iter()
                .any(|s| s.sinks.iter().any(|e| &e.name == name))
            {
                return Err(JobError::NotFound(format!(
                    "no sink {name:?} in {}",
                    self.source
                        .as_deref()
                        .map_or("any source".to_owned(), |s| format!("source {s:?}"))
                )));
            }
        }
        Ok(())
    }

    /// The ?X range the filter covers.
    fn range<K: Kv>(&self, state: &Context<K>) -> Result<KeyRange, JobError> {
        Ok(match &self.tenant {
            Some(t) => tenant_range(Family::DeadLetter, state.tenant_ord(t)?),
            None => family_range(Family::DeadLetter),
        })
    }

    fn needs_envelope(&self) -> bool {
        self.source.is_some() || self.sink.is_some()
    }
}

/// One ?X entry, decoded, with its hook's envelope when it was read.
pub struct Dead {
    /// The row.
    pub row: RowId,
    /// Its ?X value (when, why).
    pub value: DeadLetterValue,
    /// Its hook's envelope, when the scan read it (a filter by source or
    /// sink).
    pub envelope: Option<Envelope>,
}

/// Reads envelopes once per hook.
#[derive(Default)]
pub struct Envelopes {
    seen: HashMap<(TenantOrd, Seq), Option<Envelope>>,
}

impl Envelopes {
    /// The envelope of `row`'s hook (`None`: gone, or it does not decode).
    ///
    /// # Errors
    /// A store failure.
    pub fn get(&mut self, read: &impl Read, row: RowId) -> Result<Option<Envelope>, JobError> {
        if let Some(e) = self.seen.get(&(row.tenant, row.seq)) {
            return Ok(e.clone());
        }
        let env = match read.get(Cf::Hooks, &hook_key(row.tenant, row.seq))? {
            // An undecodable envelope is shown as missing, not a failure: the
            // operator can still drop the row.
            Some(raw) => Envelope::decode(&raw).ok(),
            None => None,
        };
        self.seen.insert((row.tenant, row.seq), env.clone());
        Ok(env)
    }
}

/// What [`scan`] found: the matching entries, and where the next scan
/// resumes (`None`: the range is done).
pub struct Scanned {
    /// The entries the filter takes.
    pub matched: Vec<Dead>,
    /// The entries examined.
    pub examined: usize,
    /// The key the next scan resumes at.
    pub resume: Option<Vec<u8>>,
}

/// Examines up to `budget` ?X entries of `filter`'s range from `from` (a key;
/// empty: the start), stopping early once `want` match.
///
/// # Errors
/// A store failure, an entry that does not decode.
pub fn scan<K: Kv>(
    state: &Context<K>,
    filter: &DlqFilter,
    from: &[u8],
    budget: usize,
    want: usize,
) -> Result<Scanned, JobError> {
    let mut range = filter.range(state)?;
    if from > range.start.as_slice() {
        if from >= range.end.as_slice() {
            return Ok(Scanned {
                matched: Vec::new(),
                examined: 0,
                resume: None,
            });
        }
        range.start = from.to_vec();
    }
    let source_id: Option<SourceId> = filter
        .source
        .as_ref()
        .and_then(|s| state.registry.load().sources.get(s).copied());
    let mut envelopes = Envelopes::default();
    let mut out = Scanned {
        matched: Vec::new(),
        examined: 0,
        resume: None,
    };
    const PAGE: usize = 512;
    'pages: loop {
        let page = state.kv.scan(
            Cf::Index,
            &range,
            Direction::Forward,
            PAGE.min(budget - out.examined).max(1),
        )?;
        let full = page.len() == PAGE.min(budget - out.examined).max(1);
        for (k, v) in &page {
            out.examined += 1;
            let mut next = k.to_vec();
            next.push(0);
            let key = DeadLetterKey::decode(k).map_err(JobError::store)?;
            let value = DeadLetterValue::decode(v).map_err(JobError::store)?;
            let row = RowId::new(key.tenant, key.seq, key.sink);
            let mut ok = filter
                .reason
                .as_ref()
                .is_none_or(|r| value.reason.starts_with(r.as_str()))
                && filter.since_ms.is_none_or(|s| value.dead_at_ms >= s)
                && filter.until_ms.is_none_or(|u| value.dead_at_ms < u);
            let mut envelope = None;
            if ok && filter.needs_envelope() {
                envelope = envelopes.get(&*state.kv, row)?;
                let src = envelope.as_ref().map(|e| e.source);
                if source_id.is_some() && src != source_id {
                    ok = false;
                }
                if let Some(want_sink) = &filter.sink {
                    let registry = state.registry.load();
                    let src_name = src.and_then(|s| registry.source_name(s));
                    if state.sink_name(src_name, row.sink).as_deref() != Some(want_sink.as_str()) {
                        ok = false;
                    }
                }
            }
            if ok {
                out.matched.push(Dead {
                    row,
                    value,
                    envelope,
                });
            }
            if out.matched.len() >= want || out.examined >= budget {
                out.resume = Some(next);
                break 'pages;
            }
            range.start = next;
        }
        if !full {
            break;
        }
    }
    // A resume key at the end of the range is "done".
    if out
        .resume
        .as_deref()
        .is_some_and(|r| r >= range.end.as_slice())
    {
        out.resume = None;
    }
    Ok(out)
}

/// A dead row whose source, or sink entry, is no longer in the
/// configuration would only be dead-lettered again at once (and lose its
/// reason): refused with 409, nothing changed. A row whose envelope is gone
/// is left to `queue::revive`, which refuses it.
fn refuse_unconfigured<K: Kv>(state: &Context<K>, row: RowId, id: &str) -> Result<(), JobError> {
    match unconfigured(state, row)? {
        None => Ok(()),
        Some(what) => Err(JobError::Conflict(format!(
            "row {id} cannot be revived: its {what} is no longer in the configuration (it would be dead-lettered again at once); `ankusa dlq drop {id} --yes` removes it (the head of a held lane: that releases its lane)"
        ))),
    }
}

/// What of a dead row's route is no longer configured (`sink entry`, or
/// `source "NAME"`); `None` when both are, or when its envelope is gone
/// (`queue::revive` refuses that row itself). A revive job skips such rows
/// as a single revive refuses them.
pub(crate) fn unconfigured<K: Kv>(
    state: &Context<K>,
    row: RowId,
) -> Result<Option<String>, JobError> {
    let Some(raw) = state.kv.get(Cf::Hooks, &hook_key(row.tenant, row.seq))? else {
        return Ok(None);
    };
    let Ok(env) = Envelope::decode(&raw) else {
        return Ok(None);
    };
    let (registry, config) = (state.registry.load(), state.config.load());
    let name = registry.source_name(env.source);
    Ok(match name.and_then(|n| config.source(n)) {
        Some(s) if s.sinks.iter().any(|e| e.index == row.sink.0) => None,
        Some(_) => Some("sink entry".to_owned()),
        None => Some(format!("source {:?}", name.unwrap_or("?"))),
    })
}

fn not_dead(id: &str) -> JobError {
    JobError::Conflict(format!("row {id} is not in the dead-letter queue"))
}

/// A conflict for a row of a tenant being purged (its rows are the purge's).
fn refuse_purging<K: Kv>(state: &Context<K>, row: RowId) -> Result<(), JobError> {
    if state.purging(row.tenant)? {
        let registry = state.registry.load();
        let tenant = registry.tenant_name(row.tenant).unwrap_or("?");
        return Err(JobError::Conflict(format!(
            "tenant {tenant:?} is being purged"
        )));
    }
    Ok(())
}

/// Revives one row (`queue::revive`, ADR 0004 section 4.8) and wakes the
/// pipeline; `id` is the row's id as the operator wrote it (for messages).
/// Answers where the revived row is: `lane_member` (behind its lane's
/// head), `lane_head` (the head of a held lane, which goes first: ADR 0004
/// section 8) or `due`.
///
/// # Errors
/// A conflict for a row not in the DLQ (nothing changes), of a tenant being
/// purged, or whose source or sink entry is no longer configured; a store
/// failure.
pub fn revive<K: Kv>(state: &Context<K>, row: RowId, id: &str) -> Result<&'static str, JobError> {
    let _writes = state.writes.blocking_lock();
    refuse_purging(state, row)?;
    refuse_unconfigured(state, row, id)?;
    let batch = match ankusa_queue::revive(&*state.kv, row, state.now()) {
        Ok(b) => b,
        Err(QueueError::NotInDlq { .. }) => return Err(not_dead(id)),
        Err(e) => return Err(e.into()),
    };
    // Where it goes, read before the commit: once woken, the pipeline may
    // claim or deliver it before a read after. Only the admin API (under
    // this lock) moves a held lane's head (ADR 0004 section 8).
    let lane = state
        .kv
        .get(Cf::Deliveries, &delivery_key(row.tenant, row.seq, row.sink))?
        .and_then(|raw| DeliveryRow::decode(&raw).ok())
        .and_then(|r| r.lane);
    let at = match lane {
        Some(lane)
            if ankusa_queue::lanes::holds_lane(&*state.kv, row, lane)
                .map_err(QueueError::from)? =>
        {
            "lane_head"
        }
        Some(_) => "lane_member",
        None => "due",
    };
    state.commit(batch)?;
    state.wake();
    Ok(at)
}

/// Drops one row (`queue::drop_dead`); `id` as in [`revive`].
///
/// # Errors
/// A conflict for a row not in the DLQ (nothing changes) or of a tenant
/// being purged; a store failure.
pub fn drop_one<K: Kv>(state: &Context<K>, row: RowId, id: &str) -> Result<(), JobError> {
    let _writes = state.writes.blocking_lock();
    refuse_purging(state, row)?;
    let batch = match ankusa_queue::drop_dead(&*state.kv, &[row], state.now()) {
        Ok(b) => b,
        Err(QueueError::NotInDlq { .. }) => return Err(not_dead(id)),
        Err(e) => return Err(e.into()),
    };
    state.commit(batch)
}
