//! Unconfigured sources and sinks, and the sink entries' slots
//! (docs/design.md section 5, "Unconfigured sources and sinks").
//!
//! A queued row names its sink entry by a `sink:16` slot. Slots follow the
//! entries' names, not their positions in the list: the store keeps, per
//! source, the names by slot (`meta` `source/sinks/<id>`), and before `ankusa
//! serve` starts anything it gives every configured entry the slot its name
//! has there ([`assign_slots`]; a new name takes the next free slot), so
//! removing an entry from the middle of a list, or reordering it, never sends
//! one entry's queued hooks to another. A slot is never reused for another
//! name: an entry that was removed keeps its slot, marked retired (`~name`)
//! once nothing of it is queued, and gets it back if it returns.
//!
//! Then it looks for queued deliveries of sources and slots that are no
//! longer in the configuration, and refuses to start, naming each with its
//! pending count, unless `--drop-unconfigured` is given (then they are
//! dead-lettered, lane by lane, members before heads).
//!
//! What it reads, and why that is cheap in the usual case:
//! - the source registry (`meta`: every source the store ever had) and each
//!   source's slots (`meta` `source/sinks/<id>`): point gets, no scan;
//! - only when a registered source is missing from the configuration, or a
//!   configured source's stored slots hold a name the configuration no
//!   longer has (not retired), or a configured source has no stored slots
//!   yet, and the node's `pending` counter is above zero: the pending index
//!   keys (?D, ?F, ?O) of each tenant whose `pending` counter is above zero,
//!   with one envelope read per pending hook whose slot cannot be ruled out
//!   from the key alone (`ankusa_queue::pending_rows`). Nothing else is read;
//!   no full scan of the store.
//!
//! After the check passes, every source's slots are stored (the names
//! configured, and the others retired), so the next start reads only `meta`
//! again.

use std::collections::{BTreeMap, BTreeSet};

use ankusa_config::Config;
use ankusa_engine::{Cf, Durability, Kv};
use ankusa_keys::meta::{decode_sink_names, encode_sink_names, source_sinks_key};
use ankusa_keys::{CounterField, SinkIx, SourceId, TenantOrd, counter_key};
use ankusa_queue::Registry;
use anyhow::Context;
use tracing::info;

/// The reason a `--drop-unconfigured` start dead-letters a removed source's rows with.
pub const SOURCE_REMOVED: &str = "source removed from the config";
/// The reason for a removed sink entry's rows.
pub const SINK_REMOVED: &str = "sink removed from the config";

/// How a stored slot's name says the entry is retired: removed from the
/// configuration with nothing of it left queued. Configured names start with
/// a letter or digit, so no configured name starts with it.
const RETIRED: char = '~';

/// Queued deliveries of one source (or one sink entry) not in the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unconfigured {
    /// The source's name (from the store's registry).
    pub source_name: String,
    /// Its id.
    pub source: SourceId,
    /// `false`: the source is configured and only this sink entry is gone.
    pub source_removed: bool,
    /// The sink entry's slot.
    pub sink: SinkIx,
    /// The entry's name, when the store knows it.
    pub sink_name: Option<String>,
    /// Its pending rows, all tenants.
    pub pending: u64,
    /// The tenants that hold them.
    pub tenants: BTreeSet<TenantOrd>,
}

impl Unconfigured {
    /// One line naming it, its slot and its pending count (a reload's
    /// refusal; a start's groups them by source: [`refusal`]).
    pub fn line(&self) -> String {
        let sink = self.sink_name.as_ref().map_or_else(
            || format!("slot {}", self.sink.0),
            |n| format!("\"{n}\" (slot {})", self.sink.0),
        );
        if self.source_removed {
            format!(
                "source \"{}\" is not in the configuration and its sink {sink} has {} queued deliveries",
                self.source_name, self.pending
            )
        } else {
            format!(
                "source \"{}\", sink {sink} is not in the configuration and has {} queued deliveries",
                self.source_name, self.pending
            )
        }
    }
}

/// The stored slots of a source: each slot's name, `~name` when retired.
pub type SlotNames = Vec<String>;

/// Every registered source's stored slots (a source without any has none:
/// a new source, or a store written before slots were stored).
///
/// # Errors
/// Store read and decode errors.
pub fn stored_slots<K: Kv>(
    kv: &K,
    registry: &Registry,
) -> anyhow::Result<BTreeMap<SourceId, SlotNames>> {
    let mut out = BTreeMap::new();
    for id in registry.sources.values() {
        if let Some(v) = kv.get(Cf::Meta, &source_sinks_key(*id))? {
            out.insert(
                *id,
                decode_sink_names(&v)
                    .with_context(|| format!("the stored sink slots of source {}", id.0))?,
            );
        }
    }
    Ok(out)
}

/// The name a stored slot holds, retired or not.
fn slot_name(stored: &str) -> &str {
    stored.strip_prefix(RETIRED).unwrap_or(stored)
}

/// Gives every configured sink entry of a source with stored slots the slot
/// of its name ([`ankusa_config::SinkEntry::index`]); a name the store does
/// not know takes the next slot after the stored ones, in list order. A
/// source without stored slots keeps the positions (its first start: they
/// become its slots). Pure: the stored slots come from [`stored_slots`].
///
/// # Errors
/// A source whose slots would pass 65,536 (each name ever configured keeps
/// its slot), named.
pub fn assign_slots(
    cfg: &mut Config,
    registry: &Registry,
    stored: &BTreeMap<SourceId, SlotNames>,
) -> anyhow::Result<()> {
    for s in &mut cfg.sources {
        let Some(slots) = registry.sources.get(&s.name).and_then(|id| stored.get(id)) else {
            continue;
        };
        let mut next = slots.len();
        for e in &mut s.sinks {
            let slot = match slots.iter().position(|n| slot_name(n) == e.name) {
                Some(at) => at,
                None => {
                    next += 1;
                    next - 1
                }
            };
            e.index = u16::try_from(slot).map_err(|_| {
                anyhow::anyhow!(
                    "source \"{}\", sink \"{}\": the source has had 65,536 differently named sink entries, and each keeps its slot in the store; reuse a former name",
                    s.name,
                    e.name
                )
            })?;
        }
    }
    Ok(())
}

/// Finds the pending deliveries of unconfigured sources and sink entries
/// (see the module docs for what it reads), after [`assign_slots`].
///
/// # Errors
/// Store read and decode errors.
pub fn find<K: Kv>(
    kv: &K,
    cfg: &Config,
    registry: &Registry,
    stored: &BTreeMap<SourceId, SlotNames>,
) -> anyhow::Result<Vec<Unconfigured>> {
    let configured: BTreeMap<SourceId, BTreeSet<u16>> = cfg
        .sources
        .iter()
        .filter_map(|s| {
            let id = *registry.sources.get(&s.name)?;
            Some((id, s.sinks.iter().map(|e| e.index).collect()))
        })
        .collect();
    // What may be unconfigured, per source: `None` for every slot (a removed
    // source without stored slots), else the slots. A configured source
    // without stored slots (written before slots were stored) may have lost
    // entries past its configured count.
    let mut suspect: BTreeMap<SourceId, Option<BTreeSet<u16>>> = BTreeMap::new();
    for id in registry.sources.values() {
        let live = stored.get(id).map(|slots| {
            slots
                .iter()
                .enumerate()
                .filter(|(_, n)| !n.starts_with(RETIRED))
                .filter_map(|(i, _)| u16::try_from(i).ok())
                .collect::<BTreeSet<u16>>()
        });
        let gone = match (configured.get(id), live) {
            (None, None) => Some(None),
            (None, Some(live)) => (!live.is_empty()).then_some(Some(live)),
            (Some(now), Some(live)) => {
                let gone: BTreeSet<u16> = live.difference(now).copied().collect();
                (!gone.is_empty()).then_some(Some(gone))
            }
            (Some(now), None) => {
                let n = u16::try_from(now.len()).unwrap_or(u16::MAX);
                Some(Some((n..=u16::MAX).collect()))
            }
        };
        if let Some(gone) = gone {
            suspect.insert(*id, gone);
        }
    }
    if suspect.is_empty() {
        return Ok(Vec::new());
    }
    if kv.counter(&counter_key(TenantOrd::NODE, CounterField::Pending))? <= 0 {
        return Ok(Vec::new());
    }
    // A slot some source may have lost: the key has the slot, not the source,
    // so only these need the envelope read.
    let any_source: Option<BTreeSet<u16>> =
        suspect.values().try_fold(BTreeSet::new(), |mut all, gone| {
            all.extend(gone.as_ref()?.iter().copied());
            Some(all)
        });
    let is_suspect = |s: SourceId, k: SinkIx| match suspect.get(&s) {
        Some(None) => true,
        Some(Some(gone)) => gone.contains(&k.0),
        None => false,
    };
    let mut counts: BTreeMap<(SourceId, SinkIx), (u64, BTreeSet<TenantOrd>)> = BTreeMap::new();
    for tenant in registry.tenants.values() {
        if kv.counter(&counter_key(*tenant, CounterField::Pending))? <= 0 {
            continue;
        }
        let found = ankusa_queue::pending_rows(
            kv,
            *tenant,
            |k| any_source.as_ref().is_none_or(|all| all.contains(&k.0)),
            is_suspect,
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
                .and_then(|l| l.get(usize::from(sink.0)))
                .map(|n| slot_name(n).to_owned()),
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
                Some(n) => format!("sink \"{n}\" (slot {})", u.sink.0),
                None => format!("sink slot {}", u.sink.0),
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
         (a removed source with its sinks, a removed sink entry by its name, anywhere in the \
         source's list) so its deliveries wait, or start with `ankusa serve --drop-unconfigured` to dead-letter them \
         (reason \"source removed from the config\" or \"sink removed from the config\"; they stay \
         in the dead-letter queue)."
            .to_owned(),
    );
    // A notify destination's queued notifications (docs/design.md section
    // 5, "Notifications"): its internal source cannot be written back.
    if found
        .iter()
        .any(|u| ankusa_config::is_internal(&u.source_name))
    {
        lines.push(
            "A source named _notify-NAME holds the queued notifications of the notify destination NAME: \
             put the destination back in notify.destinations (its deliveries then go on), or drop them as above."
                .to_owned(),
        );
    }
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

/// After the check passed (nothing unconfigured is queued any more): stores
/// every registered source's slots, in one `Sync` batch when anything
/// changed. A configured entry's slot holds its name; every other slot the
/// store knew is retired (`~name`), so the next start finds nothing to look
/// for and a returning name gets its slot back.
///
/// # Errors
/// Store errors.
pub fn remember<K: Kv>(
    kv: &K,
    cfg: &Config,
    registry: &Registry,
    stored: &BTreeMap<SourceId, SlotNames>,
) -> anyhow::Result<()> {
    let mut batch = ankusa_engine::Batch::new();
    for (name, id) in &registry.sources {
        let old = stored.get(id).cloned().unwrap_or_default();
        let mut slots: SlotNames = old
            .iter()
            .map(|n| format!("{RETIRED}{}", slot_name(n)))
            .collect();
        for e in cfg
            .source(name)
            .map(|s| s.sinks.as_slice())
            .unwrap_or_default()
        {
            let at = usize::from(e.index);
            if slots.len() <= at {
                slots.resize(at + 1, String::from(RETIRED));
            }
            slots[at].clone_from(&e.name);
        }
        if stored.get(id) != Some(&slots) {
            batch.put(Cf::Meta, source_sinks_key(*id), encode_sink_names(&slots));
        }
    }
    if !batch.is_empty() {
        kv.write(batch, Durability::Sync)?;
    }
    Ok(())
}

/// A reload's part of [`remember`]: stores the slots of the names the store
/// does not know yet (before any hook can use them), and retires nothing. A
/// removed entry's slot stays live until the next start's check has seen
/// that nothing of it is queued (a hook the old routes took while the reload
/// ran may still be).
///
/// # Errors
/// Store errors.
pub fn remember_added<K: Kv>(
    kv: &K,
    cfg: &Config,
    registry: &Registry,
    stored: &BTreeMap<SourceId, SlotNames>,
) -> anyhow::Result<()> {
    let mut batch = ankusa_engine::Batch::new();
    for s in &cfg.sources {
        let Some(id) = registry.sources.get(&s.name) else {
            continue;
        };
        let mut slots = stored.get(id).cloned().unwrap_or_default();
        let before = slots.clone();
        for e in &s.sinks {
            let at = usize::from(e.index);
            if slots.len() <= at {
                slots.resize(at + 1, String::from(RETIRED));
            }
            if slot_name(&slots[at]) != e.name || slots[at].starts_with(RETIRED) {
                slots[at].clone_from(&e.name);
            }
        }
        if slots != before {
            batch.put(Cf::Meta, source_sinks_key(*id), encode_sink_names(&slots));
        }
    }
    if !batch.is_empty() {
        kv.write(batch, Durability::Sync)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(sinks: &[&str]) -> Config {
        let list: Vec<String> = sinks
            .iter()
            .map(|n| format!("{{type: file, name: {n}, path: /tmp/{n}.ndjson}}"))
            .collect();
        Config::from_yaml(
            &format!("sources:\n  - name: s\n    sinks: [{}]\n", list.join(", ")),
            &|_| None,
        )
        .expect("config")
    }

    fn registry() -> Registry {
        Registry {
            tenants: BTreeMap::from([("default".to_owned(), TenantOrd(1))]),
            sources: BTreeMap::from([("s".to_owned(), SourceId(7))]),
        }
    }

    fn slots(cfg: &Config) -> Vec<(String, u16)> {
        cfg.sources[0]
            .sinks
            .iter()
            .map(|e| (e.name.clone(), e.index))
            .collect()
    }

    fn stored(names: &[&str]) -> BTreeMap<SourceId, SlotNames> {
        BTreeMap::from([(SourceId(7), names.iter().map(|n| (*n).to_owned()).collect())])
    }

    #[test]
    fn slots_follow_names_and_new_names_take_the_next_free_slot() {
        let reg = registry();
        // Removed from the front, reordered, and a new one.
        let mut cfg = config(&["c", "b", "new"]);
        assign_slots(&mut cfg, &reg, &stored(&["a", "b", "c"])).expect("assign");
        assert_eq!(
            slots(&cfg),
            [("c".into(), 2), ("b".into(), 1), ("new".into(), 3)]
        );
        // A retired name comes back to its slot.
        let mut cfg = config(&["a", "b"]);
        assign_slots(&mut cfg, &reg, &stored(&["~a", "b"])).expect("assign");
        assert_eq!(slots(&cfg), [("a".into(), 0), ("b".into(), 1)]);
        // No stored slots: positions.
        let mut cfg = config(&["x", "y"]);
        assign_slots(&mut cfg, &reg, &BTreeMap::new()).expect("assign");
        assert_eq!(slots(&cfg), [("x".into(), 0), ("y".into(), 1)]);
    }

    #[test]
    fn remember_keeps_every_slot_and_retires_the_names_gone() {
        let kv = ankusa_engine::memory::MemoryKv::new();
        let reg = registry();
        let before = stored(&["a", "b", "c"]);
        let mut cfg = config(&["c", "new"]);
        assign_slots(&mut cfg, &reg, &before).expect("assign");
        remember(&kv, &cfg, &reg, &before).expect("remember");
        let after = stored_slots(&kv, &reg).expect("read");
        assert_eq!(after, stored(&["~a", "~b", "c", "new"]));
        // Nothing configured is unconfigured, and nothing is looked for.
        assert_eq!(find(&kv, &cfg, &reg, &after).expect("find"), vec![]);
        // Unchanged: no write (the same value read back).
        remember(&kv, &cfg, &reg, &after).expect("remember");
        assert_eq!(stored_slots(&kv, &reg).expect("read"), after);
    }
}
