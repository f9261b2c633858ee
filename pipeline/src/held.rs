//! Sink entries whose backlog a visit held back (docs/design.md section 5,
//! "A sink's backlog held back"): their rows wait in the held band and come
//! back, oldest first, in each pass ([`HeldBacklogs::pass`]), as many as keep
//! the entry's live backlog at [`OVERFLOW_SKIPPED`] pages. Not persisted: a
//! restart moves every held row of an entry that is not paused back (the
//! start-up's resume of every tenant).

use std::collections::{BTreeSet, HashMap};

use ankusa_engine::Kv;
use ankusa_keys::TenantOrd;
use tracing::info;

use crate::PipelineError;
use crate::breaker::BreakerKey;
use crate::cursor::Cursors;
use crate::env::{Env, SCAN_PAGES};
use crate::pauses::Pauses;

/// Pages of `dispatch.batch` rows of one saturated sink entry a visit skips
/// before it holds the entry's further rows back: the rows of a slow or
/// rate-limited sink never stand between a visit and the rows of the
/// tenant's other sinks.
pub(crate) const OVERFLOW_SKIPPED: usize = 1;

/// One sink entry's held-back backlog.
#[derive(Debug, Default)]
struct Overflow {
    /// Where the next release page starts in the tenant's held band.
    from: Option<Vec<u8>>,
    /// The entry's rows the last visit that read past them skipped (left
    /// due): its live backlog.
    live: usize,
}

/// The entries with held-back rows.
#[derive(Default)]
pub(crate) struct HeldBacklogs {
    entries: HashMap<BreakerKey, Overflow>,
}

impl HeldBacklogs {
    /// `tenant` is quiet (being purged): its entries are forgotten.
    pub(crate) fn forget_tenant(&mut self, tenant: TenantOrd) {
        self.entries.retain(|k, _| k.0 != tenant);
    }

    /// A visit held back rows of `key`.
    pub(crate) fn held(&mut self, key: BreakerKey) {
        self.entries.entry(key).or_insert_with(|| {
            info!(
                tenant = key.0.0,
                source = key.1.0,
                sink = key.2.0,
                "a sink's backlog is deeper than a visit skips while the sink is saturated: its further rows are held back until it frees slots, so the tenant's other sinks go on"
            );
            Overflow::default()
        });
    }

    /// A visit of `tenant` that read past its entries' rows (not one stopped
    /// with every entry saturated) skipped `skipped` of each: their live
    /// backlogs.
    pub(crate) fn set_live(&mut self, tenant: TenantOrd, skipped: &HashMap<BreakerKey, usize>) {
        for (key, o) in self.entries.iter_mut() {
            if key.0 == tenant {
                o.live = skipped.get(key).copied().unwrap_or(0);
            }
        }
    }

    /// Releases held-back backlogs: for each entry, its oldest held rows go
    /// back to due ([`ankusa_queue::unhold_sink`]), as many as bring its live
    /// backlog (what the last visit skipped) back to [`OVERFLOW_SKIPPED`]
    /// pages, and the tenant's low-water cursor is lowered to them. Oldest
    /// first: a held-back backlog is delivered in due order behind at most
    /// those pages. An entry with no held row left is dropped; a paused one
    /// waits for its resume.
    pub(crate) fn pass<K: Kv>(
        &mut self,
        env: &Env<K>,
        quiet: &BTreeSet<TenantOrd>,
        pauses: &Pauses,
        cursors: &mut Cursors,
    ) -> Result<(), PipelineError> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let keys: Vec<BreakerKey> = self.entries.keys().copied().collect();
        let examine = env.page_len() * SCAN_PAGES;
        let mut done = Vec::new();
        for key in keys {
            let (tenant, source, sink) = key;
            let Some(o) = self.entries.get_mut(&key) else {
                continue;
            };
            let budget = (OVERFLOW_SKIPPED * env.page_len()).saturating_sub(o.live);
            let from = o.from.clone();
            if budget == 0 || quiet.contains(&tenant) || pauses.is_paused(source, sink) {
                continue;
            }
            if !env.routes.sinks.contains_key(&(source, sink)) {
                // Not configured any more: the start-up release and the
                // visits dead-letter its rows.
                done.push(key);
                continue;
            }
            let page = ankusa_queue::unhold_sink(
                &*env.kv,
                tenant,
                (source, sink),
                from.as_deref(),
                examine,
                budget,
            )?;
            if let Some(min) = page.min_due_ms {
                cursors.lower(tenant, min);
            }
            let moved = page.moved;
            env.write(page.batch)?;
            if let Some(o) = self.entries.get_mut(&key) {
                // Counted live until a visit reads past them.
                o.live += moved;
            }
            match page.next {
                Some(next) => {
                    if let Some(o) = self.entries.get_mut(&key) {
                        o.from = Some(next);
                    }
                }
                // From the band's start with nothing moved: nothing of the
                // entry is held any more.
                None if moved == 0 && from.is_none() => done.push(key),
                None => {
                    if let Some(o) = self.entries.get_mut(&key) {
                        o.from = None;
                    }
                }
            }
        }
        for key in done {
            self.entries.remove(&key);
            info!(
                tenant = key.0.0,
                source = key.1.0,
                sink = key.2.0,
                "a sink's held-back backlog is back in dispatch"
            );
        }
        Ok(())
    }
}
