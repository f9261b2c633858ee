//! The scan's memory of a tenant's due index (docs/design.md section 5,
//! "Low-water cursor" and "Shallow and deep visits"): per tenant the
//! low-water cursor and the sink entries recent visits met. Both are dropped
//! together (each second, on a control call, when held rows come back), and
//! lowered when rows come back below a cursor ([`Cursors::lower`]).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use ankusa_keys::{SinkIx, SourceId, TenantOrd};

/// How often the due scan's low-water cursors are dropped, so a row a clock
/// step put below a cursor waits at most this long.
pub(crate) const LOW_WATER_RESET: Duration = Duration::from_secs(1);

/// A tenant's sink entries, as the scan counts them.
pub(crate) type Entries = HashSet<(SourceId, SinkIx)>;

/// The low-water cursors and the met entries of every tenant.
pub(crate) struct Cursors {
    /// Per tenant, the due time (unix ms) of the first live due entry the
    /// last visit read: the next visit starts its scan there instead of at
    /// the top of the tenant's due range, past the deletes of every row
    /// claimed before it.
    low_water: HashMap<TenantOrd, u64>,
    /// Per tenant, the sink entries whose rows its recent visits met: a
    /// shallow visit sizes its first page by their free slots and stops when
    /// they are saturated, so an entry with no rows (an idle source of the
    /// tenant) does not make every visit read `SCAN_PAGES` pages (before: 137
    /// due entries read per hook delivered in a load run). Replaced by each
    /// deep visit (every [`crate::scan::SHALLOW_VISITS`]-th, and the first
    /// after the entries were dropped).
    met: HashMap<TenantOrd, Entries>,
    /// When the cursors were last dropped (every `reset` a visit reads from
    /// the top again).
    since: Instant,
    /// [`LOW_WATER_RESET`]; the bench gate turns it off (its counts must not
    /// depend on how long a run takes).
    reset: Duration,
}

impl Cursors {
    pub(crate) fn new() -> Cursors {
        Cursors {
            low_water: HashMap::new(),
            met: HashMap::new(),
            since: Instant::now(),
            reset: LOW_WATER_RESET,
        }
    }

    /// Every cursor and met entry dropped: the next visits read from the top
    /// and are deep.
    pub(crate) fn drop_all(&mut self) {
        self.low_water.clear();
        self.met.clear();
    }

    /// `tenant`'s cursor and met entries dropped (its held rows came back, at
    /// their own due times and maybe for entries no recent visit met).
    pub(crate) fn drop_tenant(&mut self, tenant: TenantOrd) {
        self.low_water.remove(&tenant);
        self.met.remove(&tenant);
    }

    /// Drops every cursor once a reset period has passed since the last
    /// drop; whether it did.
    pub(crate) fn reset_due(&mut self) -> bool {
        if self.since.elapsed() >= self.reset {
            self.drop_all();
            self.since = Instant::now();
            return true;
        }
        false
    }

    /// The reset period ([`LOW_WATER_RESET`]; the tests turn it off).
    #[cfg(test)]
    pub(crate) fn set_reset(&mut self, reset: Duration) {
        self.reset = reset;
    }

    /// Lowers every cursor to `floor` (the Writer's due floor).
    pub(crate) fn lower_all(&mut self, floor: u64) {
        for cursor in self.low_water.values_mut() {
            *cursor = (*cursor).min(floor);
        }
    }

    /// Lowers `tenant`'s cursor, if it has one, to `due_ms`.
    pub(crate) fn lower(&mut self, tenant: TenantOrd, due_ms: u64) {
        if let Some(low) = self.low_water.get_mut(&tenant) {
            *low = (*low).min(due_ms);
        }
    }

    /// `tenant`'s cursor.
    pub(crate) fn low_water(&self, tenant: TenantOrd) -> Option<u64> {
        self.low_water.get(&tenant).copied()
    }

    /// Sets `tenant`'s cursor to the due time of the first live entry read.
    pub(crate) fn set_low_water(&mut self, tenant: TenantOrd, due_ms: u64) {
        self.low_water.insert(tenant, due_ms);
    }

    /// Takes `tenant`'s met entries (a visit puts them back when it ends).
    pub(crate) fn take_met(&mut self, tenant: TenantOrd) -> Option<Entries> {
        self.met.remove(&tenant)
    }

    /// Puts back `tenant`'s met entries.
    pub(crate) fn put_met(&mut self, tenant: TenantOrd, met: Entries) {
        self.met.insert(tenant, met);
    }
}
