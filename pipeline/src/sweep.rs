//! The lane sweep's state (docs/design.md section 5, "A pass" and "Lane
//! sweep"; ADR 0004 4.6): the Writer's lane hints, the lanes they named that
//! no visit has swept yet, and whether the coming pass runs the full sweep.
//! [`LaneSweep::sweep`] is the first step of a visit.

use std::collections::HashMap;
use std::sync::Arc;

use ankusa_engine::Kv;
use ankusa_keys::{CounterField, LaneId, TenantOrd, counter_key};
use ankusa_queue::QueueError;
use ankusa_queue::writer::LaneRows;

use crate::PipelineError;
use crate::env::Env;

/// The lanes to sweep.
pub(crate) struct LaneSweep {
    /// The Writer's lane hints ([`crate::Pipeline::lane_rows`]); `None`:
    /// every visit sweeps every marker.
    hints: Option<Arc<LaneRows>>,
    /// Per tenant, the lanes the Writer named that no visit has swept yet
    /// (`ankusa_lanes::sweep_lanes`: point reads of their markers).
    named: HashMap<TenantOrd, Vec<LaneId>>,
    /// Whether the visits of the coming pass run the full sweep (it is
    /// costly: a sweep walks the tombstones of every marker deleted since
    /// the memtable was flushed; in the 1,000-key load run it was 73% of the
    /// relay's CPU while nothing new came in).
    full: bool,
}

impl LaneSweep {
    /// The first pass runs the full sweep (start-up).
    pub(crate) fn new() -> LaneSweep {
        LaneSweep {
            hints: None,
            named: HashMap::new(),
            full: true,
        }
    }

    /// Takes the Writer's lane hints.
    pub(crate) fn set_hints(&mut self, hints: Arc<LaneRows>) {
        self.hints = Some(hints);
    }

    /// The coming pass runs the full sweep (a control call, the
    /// once-a-second reset, a test).
    pub(crate) fn request_full(&mut self) {
        self.full = true;
    }

    /// Before a pass: takes the lanes the Writer named since the last one
    /// (a write that named none, or too many names, asks for the full
    /// sweep; without hints every pass runs it).
    pub(crate) fn take_hints(&mut self) {
        match &self.hints {
            Some(hints) => {
                let taken = hints.take();
                if taken.all {
                    self.full = true;
                }
                for (tenant, lane) in taken.lanes {
                    self.named.entry(tenant).or_default().push(lane);
                }
                // Named lanes of tenants no visit reaches (a purge) must
                // not pile up: past the Writer's own bound, scan instead.
                if self.named.values().map(Vec::len).sum::<usize>()
                    > ankusa_queue::writer::LANE_ROWS_MAX
                {
                    self.named.clear();
                    self.full = true;
                }
            }
            None => self.full = true,
        }
    }

    /// At the start of a pass: whether its visits run the full sweep (set
    /// again by a visit whose sweep read a full budget of markers).
    pub(crate) fn begin_pass(&mut self) -> bool {
        std::mem::replace(&mut self.full, false)
    }

    /// The sweep step of a visit of `tenant` (ADR 4.6): while the node has
    /// lane members (one counter read when not), the full sweep when `full`,
    /// else point reads of the lanes the Writer named, a budget of them.
    /// Each sweep's batch and its recheck are written (two writes: the
    /// recheck reads the store after the sweep's batch). Whether the visit's
    /// step must be followed by another at once (named lanes left over).
    ///
    /// Only in a pass after lane rows may have been written: a member and its
    /// ?P come from the Writer (ingest, release, an admin job step) or a
    /// control call, and what a release promotes it promotes itself. A full
    /// sweep that read every marker of the tenant covers the named lanes; one
    /// that read a full budget leaves them to the sweeps that go on.
    pub(crate) fn sweep<K: Kv>(
        &mut self,
        env: &Env<K>,
        tenant: TenantOrd,
        full: bool,
        now: u64,
    ) -> Result<bool, PipelineError> {
        let named = self.named.remove(&tenant).unwrap_or_default();
        if env
            .kv
            .counter(&counter_key(TenantOrd::NODE, CounterField::LaneMembers))?
            == 0
        {
            return Ok(false);
        }
        if full {
            let out = ankusa_lanes::sweep(&*env.kv, tenant, env.dispatch.batch, now)
                .map_err(QueueError::from)?;
            if out.markers >= env.dispatch.batch {
                // More markers than one budget: the next pass sweeps on.
                self.full = true;
                if !named.is_empty() {
                    self.named.insert(tenant, named);
                }
            }
            commit_sweep(env, tenant, out)?;
        } else if !named.is_empty() {
            let budget = env.page_len();
            let (now_named, later) = named.split_at(named.len().min(budget));
            let out = ankusa_lanes::sweep_lanes(&*env.kv, tenant, now_named, now)
                .map_err(QueueError::from)?;
            commit_sweep(env, tenant, out)?;
            if !later.is_empty() {
                // More named lanes than one budget: step again at once.
                self.named.insert(tenant, later.to_vec());
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Commits a sweep's batch, then its recheck (ADR 4.6: the recheck is built
/// from the store the sweep's batch was written to, so they stay two writes).
fn commit_sweep<K: Kv>(
    env: &Env<K>,
    tenant: TenantOrd,
    out: ankusa_lanes::SweepOutcome,
) -> Result<(), PipelineError> {
    env.write(out.batch)?;
    if !out.recheck.is_empty() {
        let again = ankusa_lanes::sweep_recheck(&*env.kv, tenant, &out.recheck)
            .map_err(QueueError::from)?;
        env.write(again)?;
    }
    Ok(())
}
