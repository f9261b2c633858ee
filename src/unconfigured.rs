//! Unconfigured sources and sinks (docs/design.md section 5): before `ankusa
//! serve` starts anything, it looks for queued deliveries of sources and sink
//! entries that are no longer in the configuration, and refuses to start,
//! naming each with its pending count, unless `--drop-unconfigured` is given
//! (then they are dead-lettered, lane by lane, members before heads).
//!
//! What it reads, and why that is cheap in the usual case:
//! - the source registry (`meta`: every source the store ever had) and each
//!   source's sink list as of the last start that passed this check
//!   (`meta` `source/sinks/<id>`): point gets, no scan;
//! - only when a registered source is missing from the configuration (and was
//!   not cleared before), or a configured source has fewer sink entries than
//!   its stored list (or no stored list yet), and the node's `pending`
//!   counter is above zero: the pending index keys (?D, ?F, ?O) of each
//!   tenant whose `pending` counter is above zero, with one envelope read per
//!   pending hook whose sink index cannot be ruled out from the key alone
//!   (`ankusa_queue::pending_rows`). Nothing else is read; no full scan of the
//!   store.
//!
//! After the check passes, every configured source's sink list is stored, and
//! a removed source with nothing left gets an empty list, so the next start
//! reads only `meta` again.

use std::collections::{BTreeMap, BTreeSet};

use ankusa_config::Config;
use ankusa_engine::{Cf, Durability, Kv};
use ankusa_keys::meta::{decode_sink_names, encode_sink_names, source_sinks_key};
use ankusa_keys::{CounterField, SinkIx, SourceId, TenantOrd, counter_key};
use ankusa_queue::Registry;
use anyhow::Context;
use tracing::{info, warn};

/// The reason a `--drop-unconfigured` start dead-letters a removed source's rows with.
pub const SOURCE_REMOVED: &str = "source removed from the config";
/// The reason for a removed sink entry's rows.
pub const SINK_REMOVED: &str = "sink removed from the config";

/// Queued deliveries of one source (or one sink entry) not in the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unconfigured {
    /// The source's name (from the store's registry).
    pub source_name: String,
    /// Its id.
    pub source: SourceId,
    /// `false`: the source is configured and only this sink entry is gone.
    pub source_removed: bool,
    /// The sink index.
    pub sink: SinkIx,
    /// The entry's name at the last start, when the store knows it.
    pub sink_name: Option<String>,
    /// Its pending rows, all tenants.
    pub pending: u64,
    /// The tenants that hold them.
    pub tenants: BTreeSet<TenantOrd>,
}

fn sink_lists<K: Kv>(
    kv: &K,
    registry: &Registry,
) -> anyhow::Result<BTreeMap<SourceId, Vec<String>>> {
    let mut out = BTreeMap::new();
    for id in registry.sources.values() {
        if let Some(v) = kv.get(Cf::Meta, &source_sinks_key(*id))? {
            out.insert(
                *id,
                decode_sink_names(&v)
                    .with_context(|| format!("the stored sink list of source {}", id.0))?,
            );
        }
    }
    Ok(out)
}

/// Finds the pending deliveries of unconfigured sources and sink entries
/// (see the module docs for what it reads).
///
/// # Errors
/// Store read and decode errors.
pub fn find<K: Kv>(kv: &K, cfg: &Config, registry: &Registry) -> anyhow::Result<Vec<Unconfigured>> {
    let stored = sink_lists(kv, registry)?;
    let configured: BTreeMap<SourceId, usize> = cfg
        .sources
        .iter()
        .filter_map(|s| Some((*registry.sources.get(&s.name)?, s.sinks.len())))
        .collect();
    // A configured source's sink names that moved: a sink index is a position,
    // so its queued rows now go to the entry at that position.
    for s in &cfg.sources {
        let Some(id) = registry.sources.get(&s.name) else {
            continue;
        };
        if let Some(old) = stored.get(id) {
            for (i, (was, now)) in old.iter().zip(s.sinks.iter().map(|e| &e.name)).enumerate() {
                if was != now {
                    warn!(
                        source = %s.name,
                        index = i,
                        was = %was,
                        now = %now,
                        "sink index {i} of source {} was named {was:?} at the last start and is {now:?} now: its queued deliveries go to {now:?} (sink indexes are positions; add new sinks at the end)",
                        s.name
                    );
                }
            }
        }
    }
    let removed: BTreeSet<SourceId> = registry
        .sources
        .values()
        .filter(|id| !configured.contains_key(id))
        // A removed source cleared at an earlier start has an empty list.
        .filter(|id| stored.get(id).is_none_or(|l| !l.is_empty()))
        .copied()
        .collect();
    // Configured sources that may have lost sink entries: their lowest index
    // that is gone (a source without a stored list: unknown, so from its count).
    let shrunk: BTreeMap<SourceId, usize> = configured
        .iter()
        .filter(|(id, n)| stored.get(id).is_none_or(|l| l.len() > **n))
        .map(|(id, n)| (*id, *n))
        .collect();
    if removed.is_empty() && shrunk.is_empty() {
        return Ok(Vec::new());
    }
    if kv.counter(&counter_key(TenantOrd::NODE, CounterField::Pending))? <= 0 {
        return Ok(Vec::new());
    }
    let min_gone = shrunk.values().copied().min().unwrap_or(usize::MAX);
    let mut counts: BTreeMap<(SourceId, SinkIx), (u64, BTreeSet<TenantOrd>)> = BTreeMap::new();
    for tenant in registry.tenants.values() {
        if kv.counter(&counter_key(*tenant, CounterField::Pending))? <= 0 {
            continue;
        }
        let found = ankusa_queue::pending_rows(
            kv,
            *tenant,
            // Without a removed source, only an index past some source's
            // configured count can be unconfigured: no envelope read for the rest.
            |k| !removed.is_empty() || usize::from(k.0) >= min_gone,
            |s, k| match configured.get(&s) {
                Some(n) => usize::from(k.0) >= *n,
                None => true,
            },
            1024,
        )?;
        for (key, n) in found {
            let e = counts.entry(key).or_default();
            e.0 += n;
            e.1.insert(*tenant);
        }
    }
    Ok(counts
        .into_iter()
        .map(|((source, sink), (pending, tenants))| Unconfigured {
            source_name: registry.source_name(source).unwrap_or("?").to_owned(),
            source,
            source_removed: !configured.contains_key(&source),
            sink,
            sink_name: stored
                .get(&source)
                .and_then(|l| l.get(usize::from(sink.0)).cloned()),
            pending,
            tenants,
        })
        .collect())
}

/// The refusal: each source and sink with its pending count, and the two ways
/// out.
pub fn refusal(found: &[Unconfigured]) -> String {
    let mut lines = vec![
        "the store has queued deliveries for sources or sinks that are not in the configuration:"
            .to_owned(),
    ];
    let mut by_source: BTreeMap<(&str, SourceId, bool), Vec<&Unconfigured>> = BTreeMap::new();
    for u in found {
        by_source
            .entry((u.source_name.as_str(), u.source, u.source_removed))
            .or_default()
            .push(u);
    }
    for ((name, _, removed), sinks) in by_source {
        let total: u64 = sinks.iter().map(|u| u.pending).sum();
        if removed {
            lines.push(format!(
                "  source \"{name}\" (not in the configuration): {total} pending"
            ));
        }
        for u in sinks {
            let sink = match &u.sink_name {
                Some(n) => format!("sink \"{n}\" (index {})", u.sink.0),
                None => format!("sink index {}", u.sink.0),
            };
            let tail = if removed {
                ""
            } else {
                ", not in the configuration"
            };
            lines.push(format!(
                "  {}source \"{name}\", {sink}{tail}: {} pending",
                if removed { "  " } else { "" },
                u.pending
            ));
        }
    }
    lines.push(
        "Nothing was changed. Either put each one back in the configuration with `paused: true` \
         (a removed source with its sinks, a removed sink entry at its old position) so its \
         deliveries wait, or start with `ankusa serve --drop-unconfigured` to dead-letter them \
         (reason \"source removed from the config\" or \"sink removed from the config\"; they stay \
         in the dead-letter queue)."
            .to_owned(),
    );
    lines.join("\n")
}

/// `--drop-unconfigured`: the claims of the previous run go back to ?D
/// (`recover_inflight`: nothing runs yet), then each unconfigured source's or
/// sink's rows are dead-lettered per tenant with `dead_letter_sinks` (members
/// before heads, lane by lane), in bounded pages, each committed `Sync`.
///
/// # Errors
/// Store errors.
pub fn drop_all<K: Kv>(kv: &K, found: &[Unconfigured], now_ms: u64) -> anyhow::Result<u64> {
    loop {
        let page = ankusa_queue::recover_inflight(kv, 1024, now_ms)?;
        let more = page.next.is_some();
        if !page.batch.is_empty() {
            kv.write(page.batch, Durability::Sync)?;
        }
        if !more {
            break;
        }
    }
    let mut groups: BTreeMap<(TenantOrd, SourceId, bool), BTreeSet<SinkIx>> = BTreeMap::new();
    for u in found {
        for t in &u.tenants {
            groups
                .entry((*t, u.source, u.source_removed))
                .or_default()
                .insert(u.sink);
        }
    }
    let mut moved = 0;
    for ((tenant, source, removed), sinks) in groups {
        let reason = if removed {
            SOURCE_REMOVED
        } else {
            SINK_REMOVED
        };
        let mut cursor = None;
        loop {
            let page = ankusa_queue::dead_letter_sinks(
                kv,
                tenant,
                source,
                |k| sinks.contains(&k),
                reason,
                cursor.as_ref(),
                1024,
                now_ms,
            )?;
            moved += page.moved as u64;
            if !page.batch.is_empty() {
                kv.write(page.batch, Durability::Sync)?;
            }
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
    }
    info!(
        rows = moved,
        "--drop-unconfigured: dead-lettered the deliveries of unconfigured sources and sinks"
    );
    Ok(moved)
}

/// After the check passed: stores every configured source's sink list, and an
/// empty list for each removed source (nothing of it is left queued), in one
/// `Sync` batch when anything changed.
///
/// # Errors
/// Store errors.
pub fn remember<K: Kv>(kv: &K, cfg: &Config, registry: &Registry) -> anyhow::Result<()> {
    let stored = sink_lists(kv, registry)?;
    let mut batch = ankusa_engine::Batch::new();
    for (name, id) in &registry.sources {
        let names: Vec<String> = cfg
            .source(name)
            .map(|s| s.sinks.iter().map(|e| e.name.clone()).collect())
            .unwrap_or_default();
        if stored.get(id) != Some(&names) {
            batch.put(Cf::Meta, source_sinks_key(*id), encode_sink_names(&names));
        }
    }
    if !batch.is_empty() {
        kv.write(batch, Durability::Sync)?;
    }
    Ok(())
}
