//! Scan and claim (docs/design.md section 5): a visit of one tenant reads its
//! due index from the low-water cursor, decides for each due row (hold,
//! dead-letter, skip a saturated sink, park under an open breaker, keep for a
//! half-open trial, wait out a rate limit, or claim), commits the claims, and
//! hands the claimed rows to the calls stage as [`Start`]s.

use std::collections::{HashMap, HashSet};

use ankusa_engine::{Batch, Bytes, Cf, Direction, Kv};
use ankusa_keys::{
    DeliveryRow, DueKey, DueValue, Envelope, Family, Seq, SinkIx, SourceId, TenantOrd,
    delivery_key, due_key, due_range_until, family_range, hook_key,
};
use ankusa_queue::{Origin, QueueError, RowId};
use tracing::{debug, warn};

use crate::breaker::{BreakerBook, BreakerKey, Site};
use crate::cursor::{Cursors, Entries};
use crate::env::{Env, SCAN_PAGES, wake_at};
use crate::events::PipelineEvents;
use crate::held::{HeldBacklogs, OVERFLOW_SKIPPED};
use crate::pauses::Pauses;
use crate::retire::Retirements;
use crate::slots::Slots;
use crate::{PipelineError, Route};

/// The scan's own state, per tenant: its cursors and met entries
/// ([`Cursors`]), where a visit stopped by saturated sinks resumes, its
/// shallow visits since the last deep one, the sources of the hooks it read,
/// the tenant the last pass visited first, and the sink entries each
/// tenant's rows may be for.
pub(crate) struct Scanner {
    cursors: Cursors,
    /// Per tenant, where the last visit stopped reading the due index when it
    /// hit [`SCAN_PAGES`] with saturated sinks' rows in front: the next visit
    /// reads its first page from the top (new and retried rows, the head of
    /// every sink) and its other pages from here, so rows behind more than
    /// `SCAN_PAGES` pages of a slow sink's backlog are reached too. Dropped when
    /// a visit reads to the end of what is due.
    resume: HashMap<TenantOrd, Vec<u8>>,
    /// Per tenant, the shallow visits since its last deep one.
    shallow_visits: HashMap<TenantOrd, u32>,
    /// The source of each hook a visit read the envelope of (at most
    /// [`SOURCES_KEPT`]): a row met again, its sink saturated, is skipped
    /// without reading its envelope again (in the 1,000-key load run, a
    /// tenant with an idle second source read 125 envelopes per hook
    /// delivered, half of the relay's CPU).
    sources: HashMap<(TenantOrd, Seq), SourceId>,
    /// The tenant the last pass visited first: the next pass starts after it,
    /// so the tenants take turns at the room a step frees (fair share).
    first_visited: Option<TenantOrd>,
    /// Per tenant, the sink entries its rows may be for (its sources' and
    /// those of the sources [`crate::Routes::source_tenants`] does not bind):
    /// a visit reads a first page no larger than their free call slots, and
    /// stops reading when it has found all of them saturated.
    tenant_routes: HashMap<TenantOrd, Vec<(SourceId, SinkIx)>>,
    /// Visits so far (the bench gate reports the batches per visit).
    #[cfg(test)]
    visits: u64,
}

/// The state of the other stages a visit reads (slots, breakers, pauses) and
/// changes (the held-back backlogs, the retirements' counts, the wake time).
pub(crate) struct VisitStages<'a> {
    pub(crate) slots: &'a Slots,
    pub(crate) breakers: &'a BreakerBook,
    pub(crate) pauses: &'a Pauses,
    pub(crate) held: &'a mut HeldBacklogs,
    pub(crate) retire: &'a mut Retirements,
    pub(crate) wake: &'a mut Option<u64>,
    /// Behind a cluster's epoch barrier ([`crate::TenantClaims::Unordered`],
    /// [`crate::TenantClaims::AllBut`]): the rows of ordered sink entries
    /// (of the listed lanes only, for `AllBut`) are left due, unclaimed.
    pub(crate) claims: &'a crate::TenantClaims,
    /// The notifications' reports: the rows a visit dead-letters past their
    /// retry horizon are counted there (docs/design.md section 5,
    /// "Notifications").
    pub(crate) events: &'a PipelineEvents,
}

/// What a visit hands on: the rows it claimed, and whether it stopped at its
/// claim budget with rows left (step again at once).
pub(crate) struct Visited {
    pub(crate) starts: Vec<Start>,
    pub(crate) more: bool,
}

/// A claimed row on its way to its sink: the boundary between scan and claim
/// and the calls stage.
pub(crate) struct Start {
    pub(crate) row_id: RowId,
    pub(crate) key: BreakerKey,
    pub(crate) site: Site,
    pub(crate) route: Route,
    pub(crate) envelope: Envelope,
    pub(crate) row: DeliveryRow,
    pub(crate) size: u64,
    pub(crate) trial: bool,
}

/// What one tenant visit has decided so far (the batches it commits at its
/// end and the rows it claimed).
struct Visit {
    tenant: TenantOrd,
    now: u64,
    claims: Batch,
    starts: Vec<Start>,
    /// Rows to park unclaimed until the breaker's open time.
    parks: Vec<(DueKey, u64)>,
    dead: Batch,
    holds: Batch,
    /// Sink entries at their concurrency, waiting for a trial, or over their
    /// rate: their further rows are skipped.
    saturated: HashSet<BreakerKey>,
    /// Rows of each saturated entry this visit skipped: past
    /// [`OVERFLOW_SKIPPED`] pages of them, the entry's further rows are held
    /// back ([`HeldBacklogs`]).
    skipped: HashMap<BreakerKey, usize>,
    /// The entries whose rows this visit held back as overflow.
    overflowed: HashSet<BreakerKey>,
    /// A deep visit's copy of the entries recent visits met (a shallow one
    /// has them in `busy`): an entry with rows further down that is not
    /// saturated is what makes a saturated entry's backlog worth holding back.
    recent: Option<Entries>,
    start_bytes: u64,
    /// Rows claimed only to be dead-lettered: their retry horizon passed
    /// (with their source, for the notifications' count).
    horizon: Vec<(RowId, SourceId)>,
    /// Per half-open breaker, the best trial candidate the scan met among
    /// rows of lanes that failed in the breaker's current run (the lane that
    /// failed last ranks worst): taken as the trial only if no row of another
    /// lane of the sink is.
    deferred: HashMap<BreakerKey, (u8, DueKey, Start)>,
    /// The visit met a row of a sink entry that is not one of the tenant's
    /// (`Scanner::tenant_routes`: a source since bound to another tenant
    /// left rows of this one): the tenant's free slots and saturated entries
    /// no longer tell what lies further down, so the visit reads on as if
    /// neither were known.
    unlisted: bool,
    /// The sink entries whose rows this visit met (in any state).
    met: Entries,
    /// The entries a shallow visit takes as the tenant's busy ones
    /// (`Cursors::take_met`); `None` for a deep visit (every entry of the
    /// tenant counts, as the free slots and saturation checks always did).
    busy: Option<Entries>,
}

impl Visit {
    /// Whether an entry of the tenant other than `key`, met by this visit or
    /// by recent ones, is not saturated: its rows may lie behind `key`'s
    /// backlog. (An idle sibling source has no rows to reach: holding back
    /// a backlog for it would only cost writes.)
    fn other_entry_waits(&self, key: BreakerKey) -> bool {
        let open = |e: &(SourceId, SinkIx)| {
            *e != (key.1, key.2) && !self.saturated.contains(&(self.tenant, e.0, e.1))
        };
        self.met.iter().any(open)
            || self
                .busy
                .as_ref()
                .or(self.recent.as_ref())
                .is_some_and(|r| r.iter().any(open))
    }

    fn new(tenant: TenantOrd, now: u64) -> Visit {
        Visit {
            met: HashSet::new(),
            busy: None,
            tenant,
            now,
            claims: Batch::new(),
            starts: Vec::new(),
            parks: Vec::new(),
            dead: Batch::new(),
            holds: Batch::new(),
            saturated: HashSet::new(),
            skipped: HashMap::new(),
            overflowed: HashSet::new(),
            recent: None,
            start_bytes: 0,
            horizon: Vec::new(),
            deferred: HashMap::new(),
            unlisted: false,
        }
    }
}

/// Whether a visit reads on after a due entry.
enum Flow {
    Next,
    Stop,
    /// Every sink entry of the tenant is saturated: a later visit may go on
    /// from this entry (inclusive) after its first page.
    Saturated,
}

/// Where a visit reads the due index and how its reading ended: the cursor
/// policy's answer ([`Scanner::begin`]), moved on by the page loop
/// ([`Scanner::read_pages`]), kept by the bookkeeping ([`Scanner::keep`]).
struct Scan {
    /// What is left to read of the tenant's due range.
    range: ankusa_engine::KeyRange,
    /// The visit started at a low-water cursor.
    had_cursor: bool,
    /// Where the last visit stopped, for the pages after the first (taken
    /// when used).
    resume: Option<Vec<u8>>,
    /// The free call slots of the tenant's sink entries (`None`: a tenant
    /// the routes do not name).
    free: Option<usize>,
    /// The first page's length: no more than the free slots.
    first_len: usize,
    /// Pages read.
    pages: usize,
    /// The visit read to the end of what is due.
    reached_end: bool,
    /// Where a visit stopped past its first page with every entry saturated.
    saturated_at: Option<Vec<u8>>,
    /// The visit stopped because every entry was saturated: it did not read
    /// on past them, so it says nothing of their live backlog.
    stopped_saturated: bool,
}

/// A tenant's visits between two deep ones ([`Cursors`]' met entries): a shallow
/// visit counts only the sink entries that recent visits met rows of.
pub(crate) const SHALLOW_VISITS: u32 = 16;

/// Hooks whose source the scan keeps (`Scanner::sources`): about
/// 2 MiB at this size.
pub(crate) const SOURCES_KEPT: usize = 65_536;

impl Scanner {
    /// A reload's tenants' sink entries ([`crate::tenant_routes_of`]).
    pub(crate) fn set_tenant_routes(
        &mut self,
        tenant_routes: HashMap<TenantOrd, Vec<(SourceId, SinkIx)>>,
    ) {
        self.tenant_routes = tenant_routes;
        // What recent visits met was of the old entries.
        self.shallow_visits.clear();
    }

    pub(crate) fn new(tenant_routes: HashMap<TenantOrd, Vec<(SourceId, SinkIx)>>) -> Scanner {
        Scanner {
            cursors: Cursors::new(),
            resume: HashMap::new(),
            shallow_visits: HashMap::new(),
            sources: HashMap::new(),
            first_visited: None,
            tenant_routes,
            #[cfg(test)]
            visits: 0,
        }
    }

    /// Visits so far.
    #[cfg(test)]
    pub(crate) fn visits(&self) -> u64 {
        self.visits
    }

    /// The low-water cursors and met entries (the resume work, the
    /// held-back backlogs' release and the step lower or drop them).
    pub(crate) fn cursors_mut(&mut self) -> &mut Cursors {
        &mut self.cursors
    }

    /// `tenant` is quiet (being purged): where its last visit stopped is
    /// forgotten.
    pub(crate) fn forget_resume(&mut self, tenant: TenantOrd) {
        self.resume.remove(&tenant);
    }

    /// The tenants a pass visits: every tenant with an ?A marker, in key
    /// order, starting one tenant further than the last pass (fair share:
    /// the tenant visited first takes the room the last step freed, and a
    /// tenant later in key order would otherwise wait for the others'
    /// backlogs).
    pub(crate) fn tenants<K: Kv>(&mut self, env: &Env<K>) -> Result<Vec<TenantOrd>, PipelineError> {
        let active = env.kv.scan(
            Cf::Index,
            &family_range(Family::Active),
            Direction::Forward,
            4096,
        )?;
        let mut tenants = Vec::with_capacity(active.len());
        for (k, _) in active {
            tenants.push(
                ankusa_keys::ActiveKey::decode(&k)
                    .map_err(QueueError::from)?
                    .tenant,
            );
        }
        let start = self
            .first_visited
            .map_or(0, |t| tenants.iter().position(|x| *x > t).unwrap_or(0));
        tenants.rotate_left(start);
        self.first_visited = tenants.first().copied();
        Ok(tenants)
    }

    /// Scan and claim of one tenant (its lane sweep ran before:
    /// [`crate::sweep::LaneSweep::sweep`]), in named steps: the cursor
    /// policy ([`Scanner::begin`]), the page loop ([`Scanner::read_pages`]),
    /// the bookkeeping of what the visit met ([`Scanner::keep`]), the
    /// half-open trials kept in reserve ([`Scanner::deferred_trials`]), and
    /// the visit's writes ([`write_decisions`]). Hands on the rows it claimed.
    pub(crate) fn visit<K: Kv>(
        &mut self,
        env: &Env<K>,
        st: &mut VisitStages<'_>,
        tenant: TenantOrd,
        now: u64,
    ) -> Result<Visited, PipelineError> {
        #[cfg(test)]
        {
            self.visits += 1;
        }
        let (mut v, mut scan) = self.begin(env, st.slots, tenant, now);
        if !self.read_pages(env, st, &mut v, &mut scan)? {
            self.nothing_due(env, &mut v, scan.had_cursor)?;
            return Ok(Visited {
                starts: Vec::new(),
                more: false,
            });
        }
        self.keep(st.held, &mut v, scan);
        Self::deferred_trials(env, st, &mut v)?;
        // Stopped at the claim budget, not at the end of what is due.
        let more = v.starts.len() + v.parks.len() >= env.page_len();
        let starts = write_decisions(env, st.wake, st.events, v)?;
        Ok(Visited { starts, more })
    }

    /// The cursor policy of a visit: where its scan starts (the low-water
    /// cursor; where a visit stopped by saturated sinks resumes after the
    /// first page), whether it is deep or shallow, and how long its first
    /// page is.
    fn begin<K: Kv>(
        &mut self,
        env: &Env<K>,
        slots: &Slots,
        tenant: TenantOrd,
        now: u64,
    ) -> (Visit, Scan) {
        let mut range = due_range_until(tenant, now);
        // Low-water cursor: the first live due entry of the last visit. Every
        // row that becomes due later is due at or after it (ingest, a
        // promote, a recovery and a revive are due "now"; a retry or a park
        // later), so the scan skips the deleted entries of every row claimed
        // before it instead of walking their tombstones again.
        let had_cursor = self.cursors.low_water(tenant).is_some();
        if let Some(low) = self.cursors.low_water(tenant) {
            let from = due_key(tenant, low, Seq(0), SinkIx(0));
            if from.as_slice() > range.start.as_slice() && from.as_slice() < range.end.as_slice() {
                range.start = from.to_vec();
            }
        }
        let resume = self.resume.remove(&tenant);
        let page_len = env.page_len();
        let mut v = Visit::new(tenant, now);
        // Deep or shallow: a shallow visit sizes its reading by the sink
        // entries recent visits met rows of, so an entry of the tenant that
        // has no rows (an idle source) does not keep every visit reading
        // SCAN_PAGES pages for it. Every SHALLOW_VISITS-th visit, and the
        // first after the met entries were dropped, is deep.
        let shallow = self.shallow_visits.get(&tenant).copied().unwrap_or(0);
        // The visit takes the met entries and puts them back (with what it
        // met) when it ends.
        let met = self.cursors.take_met(tenant);
        if shallow < SHALLOW_VISITS && met.is_some() {
            v.busy = met;
            self.shallow_visits.insert(tenant, shallow + 1);
        } else {
            v.recent = met;
            self.shallow_visits.insert(tenant, 0);
        }
        // The first page is no larger than the free call slots: in the steady
        // state a visit reads the rows it claims and no more.
        let free = self.free_slots(env, slots, tenant, v.busy.as_ref());
        let first_len = free.map_or(page_len, |f| f.clamp(1, page_len));
        let scan = Scan {
            range,
            had_cursor,
            resume,
            free,
            first_len,
            pages: 0,
            reached_end: false,
            saturated_at: None,
            stopped_saturated: false,
        };
        (v, scan)
    }

    /// The page loop: reads the due index in pages from `scan.range` and
    /// decides each entry ([`Scanner::consider`]) until the claim budget,
    /// [`SCAN_PAGES`], the free slots, the admission window or the
    /// saturation of every sink entry stops it. `false` when the first page
    /// was empty (nothing due).
    fn read_pages<K: Kv>(
        &mut self,
        env: &Env<K>,
        st: &mut VisitStages<'_>,
        v: &mut Visit,
        scan: &mut Scan,
    ) -> Result<bool, PipelineError> {
        let page_len = env.page_len();
        // Rows of a saturated sink are skipped, not claimed, so a visit reads on
        // past them (up to SCAN_PAGES pages) to reach other sinks' rows: one
        // slow sink does not starve the tenant's other sinks.
        'pages: while v.starts.len() + v.parks.len() < page_len
            && scan.pages < SCAN_PAGES
            && (v.unlisted || scan.free.is_none_or(|f| v.starts.len() < f.max(1)))
        {
            // After the first page, jump to where the last visit stopped.
            if scan.pages == 1
                && let Some(at) = scan.resume.take()
                && at > scan.range.start
                && at < scan.range.end
            {
                scan.range.start = at;
            }
            let len = if scan.pages == 0 {
                scan.first_len
            } else {
                page_len
            };
            let due = env
                .kv
                .scan(Cf::Index, &scan.range, Direction::Forward, len)?;
            scan.pages += 1;
            if scan.pages == 1
                && let Some((first, _)) = due.first()
            {
                let first = DueKey::decode(first).map_err(QueueError::from)?;
                self.cursors.set_low_water(v.tenant, first.due_ms);
            }
            if due.is_empty() {
                if scan.pages == 1 {
                    return Ok(false);
                }
                scan.reached_end = true;
                break;
            }
            let full_page = due.len() == len;
            if let Some((last, _)) = due.last() {
                let mut next = last.to_vec();
                next.push(0);
                scan.range.start = next;
            }
            for (k, val) in due {
                match self.consider(env, st, v, &k, &val)? {
                    Flow::Next => {}
                    Flow::Stop => break 'pages,
                    Flow::Saturated => {
                        scan.stopped_saturated = true;
                        // Stopped past the first page with every sink entry
                        // saturated: the next visit reads its first page from
                        // the top and goes on from here, instead of walking
                        // again what this one skipped (as at the page limit).
                        if scan.pages >= 2 {
                            scan.saturated_at = Some(k.to_vec());
                        }
                        break 'pages;
                    }
                }
            }
            if !full_page {
                scan.reached_end = true;
                break;
            }
        }
        Ok(true)
    }

    /// A visit whose first page was empty: nothing due. The tenant's ?A may
    /// go, checked (and rechecked) over its whole live due range, from its
    /// start, so over the deleted entry of every row since claimed or held.
    /// Only in a visit without a low-water cursor (the first after start-up,
    /// a control call or the once-a-second reset): a stale ?A costs a visit
    /// one scan from the cursor, while this check in every visit of a tenant
    /// whose rows are held (a paused sink) was 24% of the relay's CPU at
    /// 19,000 ingested hooks/s in a load run. ?A present with no ?D breaks no
    /// invariant; ?D without ?A would. Two writes: the recheck reads the
    /// store the sweep's batch was written to (an ingest between the two
    /// puts the marker back).
    fn nothing_due<K: Kv>(
        &mut self,
        env: &Env<K>,
        v: &mut Visit,
        had_cursor: bool,
    ) -> Result<(), PipelineError> {
        if !had_cursor {
            let b = ankusa_queue::sweep_markers(&*env.kv, v.tenant)?;
            if !b.is_empty() {
                env.write(b)?;
                let again = ankusa_queue::sweep_markers_recheck(&*env.kv, v.tenant)?;
                env.write(again)?;
            }
        }
        if let Some(busy) = v.busy.take() {
            self.cursors.put_met(v.tenant, busy);
        }
        Ok(())
    }

    /// The bookkeeping of a visit that read something: where the next one
    /// resumes, the entries whose backlog it held back and the live backlog
    /// of the tenant's held-back entries, and the entries it met.
    fn keep(&mut self, held: &mut HeldBacklogs, v: &mut Visit, scan: Scan) {
        let tenant = v.tenant;
        // Stopped at the page limit with saturated sinks' rows skipped: the
        // next visit goes on from here (after its first page) instead of
        // re-reading the same backlog and never reaching what lies behind it.
        if let Some(at) = scan.saturated_at {
            self.resume.insert(tenant, at);
        } else if !scan.reached_end && scan.pages >= SCAN_PAGES && !v.saturated.is_empty() {
            self.resume.insert(tenant, scan.range.start);
        } else if let Some(at) = scan.resume
            && !scan.reached_end
        {
            // A visit that stopped on its first page (its claim budget, every
            // entry saturated) did not use the point: the next one may.
            self.resume.insert(tenant, at);
        }
        // The overflow: entries whose rows this visit held back, and for each
        // entry of the tenant with rows held, whether this visit found it
        // saturated (its rows come back only when it was not).
        for key in v.overflowed.drain() {
            held.held(key);
        }
        if !scan.stopped_saturated {
            held.set_live(tenant, &v.skipped);
        }
        // What this visit met: a deep visit's view replaces the tenant's met
        // entries, a shallow one adds to them.
        let met = match v.busy.take() {
            Some(mut busy) => {
                busy.extend(v.met.drain());
                busy
            }
            None => std::mem::take(&mut v.met),
        };
        self.cursors.put_met(tenant, met);
    }

    /// A half-open sink whose due rows the scan met are all of lanes that
    /// failed in the breaker's current run: the best ranked is the trial
    /// (claimed into the visit's claims, built before any write of it).
    fn deferred_trials<K: Kv>(
        env: &Env<K>,
        st: &mut VisitStages<'_>,
        v: &mut Visit,
    ) -> Result<(), PipelineError> {
        for (key, (_, dk, start)) in std::mem::take(&mut v.deferred) {
            let trial_taken = v.starts.iter().any(|s| s.key == key && s.trial);
            if trial_taken || st.slots.total() + v.starts.len() >= env.dispatch.window {
                continue;
            }
            if let Some(at) = st.slots.rate_limited((key.1, key.2), v.now) {
                wake_at(st.wake, at);
                continue;
            }
            v.claims.extend(ankusa_queue::claim(&*env.kv, dk, v.now)?);
            v.starts.push(start);
        }
        Ok(())
    }

    /// Decides one due entry `(k, val)` of a visit: hold it (paused sink),
    /// dead-letter it (envelope gone, source retired or not configured, retry
    /// horizon passed), skip it (its sink saturated), park it (breaker open),
    /// keep it as a half-open trial candidate, leave it due (rate limit), or
    /// claim it into `v.starts`. [`Flow::Stop`] ends the visit's reading.
    fn consider<K: Kv>(
        &mut self,
        env: &Env<K>,
        st: &mut VisitStages<'_>,
        v: &mut Visit,
        k: &[u8],
        val: &[u8],
    ) -> Result<Flow, PipelineError> {
        let kv = &*env.kv;
        if st
            .slots
            .window_full(&env.dispatch, v.starts.len(), v.start_bytes)
        {
            return Ok(Flow::Stop);
        }
        let dk = DueKey::decode(k).map_err(QueueError::from)?;
        let size = u64::from(DueValue::decode(val).map_err(QueueError::from)?.size);
        let row_id = RowId::new(v.tenant, dk.seq, dk.sink);
        // The source decides everything up to the claim. It is read from
        // the envelope once per hook (`Scanner::sources` keeps it), so a
        // row skipped because its sink is saturated costs no read of its
        // envelope on the next visits; the whole envelope is read and
        // decoded only for a row that is claimed.
        let mut raw: Option<Bytes> = None;
        let source = match self.sources.get(&(v.tenant, dk.seq)) {
            Some(s) => *s,
            None => {
                let Some(r) = kv.get(Cf::Hooks, &hook_key(v.tenant, dk.seq))? else {
                    envelope_missing(kv, v, row_id, dk)?;
                    return Ok(Flow::Next);
                };
                let source = match Envelope::peek_source(&r) {
                    Ok(s) => s,
                    Err(e) => {
                        warn!(%row_id, error = %e, "envelope does not decode: dead-lettering the row as an orphan");
                        v.dead.extend(ankusa_queue::orphan(
                            kv,
                            row_id,
                            Origin::Due { due_ms: dk.due_ms },
                            "envelope does not decode",
                            v.now,
                        )?);
                        return Ok(Flow::Next);
                    }
                };
                self.remember_source(v.tenant, dk.seq, source);
                raw = Some(r);
                source
            }
        };
        if let Some(reason) = st.retire.reason(source) {
            debug!(%row_id, "a row of a retired source: dead-lettered");
            v.dead.extend(ankusa_queue::dead_letter(
                kv,
                row_id,
                Origin::Due { due_ms: dk.due_ms },
                reason,
                v.now,
            )?);
            st.retire.count_dead(source);
            return Ok(Flow::Next);
        }
        let key = (v.tenant, source, dk.sink);
        v.met.insert((source, dk.sink));
        if v.saturated.contains(&key) {
            // A saturated entry's backlog deeper than what the visit skips
            // is held back (the overflow), so the scan of the tenant's other
            // entries never walks it: it comes back as the entry frees slots
            // (`HeldBacklogs::pass`), oldest first.
            let skipped = v.skipped.entry(key).or_insert(0);
            *skipped += 1;
            if *skipped > OVERFLOW_SKIPPED * env.page_len() && v.other_entry_waits(key) {
                v.holds.extend(ankusa_queue::hold(kv, dk)?);
                v.overflowed.insert(key);
            }
            return Ok(Flow::Next);
        }
        let Some(route) = env.routes.sinks.get(&(source, dk.sink)).cloned() else {
            let reason = if env.routes.source_known(source) {
                "sink gone: not configured"
            } else {
                "source gone: not configured"
            };
            warn!(row = %row_id, dead_letter = %env.dlq_id(row_id), reason, "dead-lettering a row nobody can deliver");
            v.dead.extend(ankusa_queue::dead_letter(
                kv,
                row_id,
                Origin::Due { due_ms: dk.due_ms },
                reason,
                v.now,
            )?);
            return Ok(Flow::Next);
        };
        if !v.unlisted
            && !self
                .tenant_routes
                .get(&v.tenant)
                .is_some_and(|r| r.contains(&(source, dk.sink)))
        {
            v.unlisted = true;
        }
        // Behind the epoch barrier (docs/design.md section 11): an ordered
        // entry's row stays due, so its lane keeps its head and its members
        // until the earlier epochs are drained.
        let mut row = None;
        match st.claims {
            crate::TenantClaims::Unordered if env.routes.ordered.contains(&(source, dk.sink)) => {
                return Ok(Flow::Next);
            }
            crate::TenantClaims::AllBut(lanes)
                if env.routes.ordered.contains(&(source, dk.sink)) =>
            {
                let Some(r) = kv.get(Cf::Deliveries, &delivery_key(v.tenant, dk.seq, dk.sink))?
                else {
                    return Ok(Flow::Next); // as below
                };
                let r = DeliveryRow::decode(&r).map_err(QueueError::from)?;
                if r.lane.is_some_and(|l| lanes.contains(&l)) {
                    return Ok(Flow::Next);
                }
                row = Some(r);
            }
            _ => {}
        }
        // A paused sink: its row leaves the due scan until a resume
        // (a head stays its lane's head; nothing behind it moves).
        if st.pauses.is_paused(source, dk.sink) {
            v.holds.extend(ankusa_queue::hold(kv, dk)?);
            return Ok(Flow::Next);
        }
        let busy = st.slots.busy(&key) + v.starts.iter().filter(|s| s.key == key).count();
        let cap = if route.sink.pipelined() {
            env.dispatch.pipelined_concurrency
        } else {
            env.dispatch.sink_concurrency
        };
        if busy >= cap {
            v.saturated.insert(key);
            if self.all_saturated(v) {
                return Ok(Flow::Saturated);
            }
            return Ok(Flow::Next);
        }
        // Breaker: open -> park; half-open -> one trial call at a time.
        let (open, half_open, trial_busy) = match st.breakers.get(&key) {
            Some(b) => (
                b.open,
                b.open && b.open_until_ms <= v.now,
                b.trial_in_flight || v.starts.iter().any(|s| s.key == key && s.trial),
            ),
            None => (false, false, false),
        };
        if half_open && trial_busy {
            v.saturated.insert(key);
            if self.all_saturated(v) {
                return Ok(Flow::Saturated);
            }
            return Ok(Flow::Next);
        }
        let row = match row {
            Some(r) => r,
            None => {
                let Some(r) = kv.get(Cf::Deliveries, &delivery_key(v.tenant, dk.seq, dk.sink))?
                else {
                    return Ok(Flow::Next); // claim would fail the same way; the checker reports it
                };
                DeliveryRow::decode(&r).map_err(QueueError::from)?
            }
        };
        // The horizon is checked again when the row is claimed: a
        // retry due just inside it must not start an attempt outside
        // it (a row due at or past it gets its attempt: RetryPolicy::dead_at_claim).
        if let Some(first) = row.first_attempt_at_ms
            && env
                .routes
                .retry_policy(source, dk.sink, env.retry)
                .dead_at_claim(first, dk.due_ms, v.now)
        {
            v.claims.extend(ankusa_queue::claim(kv, dk, v.now)?);
            v.horizon.push((row_id, source));
            return Ok(Flow::Next);
        }
        if open && !half_open {
            // Parked unclaimed: a park is no attempt, so a row never attempted
            // keeps no first_attempt_at (its retry horizon starts at its first
            // real attempt).
            let until = st.breakers.get(&key).map_or(v.now, |b| b.open_until_ms);
            v.parks.push((dk, until));
            return Ok(Flow::Next);
        }
        let site = Site::of(row_id, &row);
        if half_open {
            let rank = st.breakers.get(&key).map_or(0, |b| b.trial_rank(site));
            if rank > 0 {
                // A lane that failed in this run: kept in reserve in
                // case no other lane of the sink has a due row.
                if v.deferred.get(&key).is_none_or(|(r, ..)| rank < *r) {
                    let Some(envelope) = envelope(kv, raw, v, row_id, dk)? else {
                        return Ok(Flow::Next);
                    };
                    v.deferred.insert(
                        key,
                        (
                            rank,
                            dk,
                            Start {
                                row_id,
                                key,
                                route,
                                envelope,
                                row,
                                size,
                                trial: true,
                                site,
                            },
                        ),
                    );
                }
                return Ok(Flow::Next);
            }
        }
        // Rate limit: a sink over its rate leaves its rows due (no
        // claim, no slot, no window room; a lane head simply waits)
        // and the loop wakes when the next call may start.
        if let Some(at) = st.slots.rate_limited((source, dk.sink), v.now) {
            v.saturated.insert(key);
            wake_at(st.wake, at);
            if self.all_saturated(v) {
                return Ok(Flow::Saturated);
            }
            return Ok(Flow::Next);
        }
        let Some(envelope) = envelope(kv, raw, v, row_id, dk)? else {
            return Ok(Flow::Next);
        };
        v.claims.extend(ankusa_queue::claim(kv, dk, v.now)?);
        v.start_bytes += size;
        v.starts.push(Start {
            row_id,
            key,
            route,
            envelope,
            row,
            size,
            trial: half_open,
            site,
        });
        Ok(Flow::Next)
    }

    /// Whether every sink entry of the visited tenant's sources is in
    /// `v.saturated` (at its concurrency, waiting for a half-open trial, or
    /// over its rate): what lies further down the due index waits for a slot
    /// anyway, so the visit stops reading (false for a tenant
    /// [`crate::Routes::tenants`] does not name, and once the visit met a row
    /// of a sink entry that is not the tenant's: `Visit::unlisted`).
    fn all_saturated(&self, v: &Visit) -> bool {
        !v.unlisted
            && self.tenant_routes.get(&v.tenant).is_some_and(|r| {
                r.iter()
                    .filter(|id| {
                        v.busy
                            .as_ref()
                            .is_none_or(|b| b.contains(id) || v.met.contains(id))
                    })
                    .all(|id| v.saturated.contains(&(v.tenant, id.0, id.1)))
            })
    }

    /// The free call slots of `tenant`'s sink entries (`None` for a tenant
    /// [`crate::Routes::tenants`] does not name): the
    /// first page of a visit reads no more due entries than that (at least
    /// 1), and the visit reads no further page once it has claimed that many,
    /// so it does not read rows it cannot claim. Later pages read
    /// `dispatch.batch`. `busy`: a shallow visit counts only these entries.
    fn free_slots<K: Kv>(
        &self,
        env: &Env<K>,
        slots: &Slots,
        tenant: TenantOrd,
        busy: Option<&Entries>,
    ) -> Option<usize> {
        let routes = self.tenant_routes.get(&tenant)?;
        let free: usize = routes
            .iter()
            .filter(|id| busy.is_none_or(|b| b.contains(id)))
            .map(|id| {
                let cap = match env.routes.sinks.get(id) {
                    Some(r) if r.sink.pipelined() => env.dispatch.pipelined_concurrency,
                    _ => env.dispatch.sink_concurrency,
                };
                cap.saturating_sub(slots.busy(&(tenant, id.0, id.1)))
            })
            .sum();
        Some(free)
    }

    /// Keeps the source of hook `seq` of `tenant` for later visits. A hook's
    /// source never changes and seqs are never reused, so an entry is never
    /// stale; the map is dropped whole at [`SOURCES_KEPT`] entries.
    fn remember_source(&mut self, tenant: TenantOrd, seq: Seq, source: SourceId) {
        if self.sources.len() >= SOURCES_KEPT {
            self.sources.clear();
        }
        self.sources.insert((tenant, seq), source);
    }
}

/// The visit's writes, built from what it decided: two batches, in this
/// order (docs/design.md section 5, "Durability": each `Buffered`).
///
/// 1. The dead letters and orphans, the holds and the claims, in that order:
///    every op of them was built against the store as the page loop read it,
///    before any write of the visit, so one batch of the three is the same
///    ops in the same order as the three writes it replaces, applied at once
///    (a crash keeps all or none of them, where it could keep a prefix).
/// 2. The dead letters of the rows claimed past their retry horizon, then the
///    parks. They stay a second write: a horizon dead letter is built from
///    the row in ?F (`Origin::InFlight`), which only batch 1's claim puts
///    there, so it must read the store after batch 1 is written. The parks
///    join it: a park reads only its own row's ?D entry, which neither batch
///    writes (a horizon dead letter's lane release promotes a member that was
///    not in ?D, and a lane has one row in ?D/?F), so built before or after
///    the dead letters it is the same ops, in the order they were written.
///
/// The rows claimed are handed on; each park lowers the wake time.
fn write_decisions<K: Kv>(
    env: &Env<K>,
    wake: &mut Option<u64>,
    events: &PipelineEvents,
    v: Visit,
) -> Result<Vec<Start>, PipelineError> {
    let Visit {
        now,
        dead,
        holds,
        claims,
        horizon,
        parks,
        starts,
        ..
    } = v;
    env.write(joined(joined(dead, holds), claims))?;
    let mut after = Batch::new();
    for (row_id, source) in &horizon {
        warn!(row = %row_id, dead_letter = %env.dlq_id(*row_id), "retry horizon passed before the next attempt: dead-lettered");
        after.extend(ankusa_queue::dead_letter(
            &*env.kv,
            *row_id,
            Origin::InFlight,
            "retry horizon passed",
            now,
        )?);
        events.dead_lettered(*source, *row_id, "retry horizon passed");
    }
    for (dk, until) in &parks {
        after.extend(ankusa_queue::park(&*env.kv, *dk, *until, now)?);
        wake_at(wake, *until);
    }
    env.write(after)?;
    Ok(starts)
}

/// `first`'s ops, then `then`'s, in one batch (no copy when `first` is
/// empty: in the steady state a visit's batch is its claims alone).
fn joined(mut first: Batch, then: Batch) -> Batch {
    if first.is_empty() {
        return then;
    }
    first.extend(then);
    first
}

/// The decoded envelope of a row about to be claimed (`raw`: its bytes
/// when this visit read them already, else they are read now); `None`,
/// and the row dead-lettered as an orphan into `v.dead`, when it is gone
/// or does not decode.
fn envelope<K: Kv>(
    kv: &K,
    raw: Option<Bytes>,
    v: &mut Visit,
    row_id: RowId,
    dk: DueKey,
) -> Result<Option<Envelope>, PipelineError> {
    let raw = match raw {
        Some(r) => r,
        None => match kv.get(Cf::Hooks, &hook_key(v.tenant, dk.seq))? {
            Some(r) => r,
            None => {
                envelope_missing(kv, v, row_id, dk)?;
                return Ok(None);
            }
        },
    };
    match Envelope::decode(&raw) {
        Ok(e) => Ok(Some(e)),
        Err(e) => {
            warn!(%row_id, error = %e, "envelope does not decode: dead-lettering the row as an orphan");
            v.dead.extend(ankusa_queue::orphan(
                kv,
                row_id,
                Origin::Due { due_ms: dk.due_ms },
                "envelope does not decode",
                v.now,
            )?);
            Ok(None)
        }
    }
}

/// A due row whose hook has no envelope: dead-lettered as an orphan.
fn envelope_missing<K: Kv>(
    kv: &K,
    v: &mut Visit,
    row_id: RowId,
    dk: DueKey,
) -> Result<(), PipelineError> {
    warn!(%row_id, "envelope missing: dead-lettering the row as an orphan");
    v.dead.extend(ankusa_queue::orphan(
        kv,
        row_id,
        Origin::Due { due_ms: dk.due_ms },
        "envelope missing",
        v.now,
    )?);
    Ok(())
}
