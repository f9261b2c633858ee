//! Pending work of sources and sink entries the configuration no longer has
//! (docs/design.md section 5, "Unconfigured sources and sinks"): the read
//! `ankusa serve` makes before it starts.
//!
//! # What the read costs
//! The pending index keys name their row's sink index (?D `.., seq, sink`, ?F
//! `.., seq, sink`, ?O `.., lane, seq, sink`) but not its source: that is only
//! in the envelope. So counting a source's pending rows is a scan of the
//! tenant's ?D, ?F and ?O keys (small keys, small values) plus one envelope
//! read per distinct pending hook whose sink index the caller cannot rule out
//! by itself. The caller keeps that rare: it scans only when a registered
//! source is missing from the configuration or a configured source has fewer
//! sink entries than at the last start (both known from `meta` without a
//! scan), only tenants whose `pending` counter is above zero, and with a sink
//! filter that skips the envelope read of every row whose sink index is still
//! configured for every source (`maybe`).

use std::collections::{BTreeMap, HashMap};

use ankusa_engine::{Cf, Direction, Read, scan_pages};
use ankusa_keys::{
    DueKey, Envelope, Family, InFlightKey, LaneMemberKey, Seq, SinkIx, SourceId, TenantOrd,
    hook_key, tenant_range,
};

use crate::QueueError;

/// Pending rows (in ?D, held ones included, ?F or ?O) of `tenant`, counted
/// per `(source, sink)` for the rows `select` picks. `maybe` sees only the
/// sink index, before any envelope is read: a row it refuses is not counted
/// and costs no envelope read. Rows whose envelope is gone are not counted
/// (the pipeline dead-letters them as orphans). Reads every pending index key
/// of the tenant in pages of `page` entries; holds one entry per distinct
/// hook whose envelope it read.
///
/// # Errors
/// Engine and decode errors.
pub fn pending_rows(
    read: &impl Read,
    tenant: TenantOrd,
    maybe: impl Fn(SinkIx) -> bool,
    select: impl Fn(SourceId, SinkIx) -> bool,
    page: usize,
) -> Result<BTreeMap<(SourceId, SinkIx), u64>, QueueError> {
    let mut out: BTreeMap<(SourceId, SinkIx), u64> = BTreeMap::new();
    let mut sources: HashMap<Seq, Option<SourceId>> = HashMap::new();
    for family in [Family::Due, Family::InFlight, Family::LaneMember] {
        let range = tenant_range(family, tenant);
        for kv in scan_pages(read, Cf::Index, range, Direction::Forward, page.max(1)) {
            let (k, _) = kv?;
            let (seq, sink) = match family {
                Family::Due => {
                    let d = DueKey::decode(&k)?;
                    (d.seq, d.sink)
                }
                Family::InFlight => {
                    let f = InFlightKey::decode(&k)?;
                    (f.seq, f.sink)
                }
                _ => {
                    let m = LaneMemberKey::decode(&k)?;
                    (m.seq, m.sink)
                }
            };
            if !maybe(sink) {
                continue;
            }
            let source = match sources.get(&seq) {
                Some(s) => *s,
                None => {
                    let s = match read.get(Cf::Hooks, &hook_key(tenant, seq))? {
                        Some(raw) => Some(Envelope::decode(&raw)?.source),
                        None => None,
                    };
                    sources.insert(seq, s);
                    s
                }
            };
            if let Some(source) = source
                && select(source, sink)
            {
                *out.entry((source, sink)).or_default() += 1;
            }
        }
    }
    Ok(out)
}
