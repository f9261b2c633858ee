//! The invariant checker (docs/design.md section 4): run by the model tests after every
//! step and by `ankusa store check` on a real store.

use std::collections::{BTreeMap, BTreeSet};

use ankusa_engine::{Batch, COUNTER_CF, Cf, Direction, KeyRange, Read, encode_counter, scan_pages};
use ankusa_keys::meta::{SEQ_HIGH_WATER_KEY, decode_seq_high_water};
use ankusa_keys::{
    ActiveKey, AttemptLogKey, AttemptRecord, CounterField, CounterKey, DeadLetterKey,
    DeadLetterValue, DedupeKey, DedupeValue, DeliveryKey, DeliveryRow, DueKey, DueKind, DueValue,
    Family, HookKey, InFlightKey, InFlightValue, LaneHeadKey, LaneHeadValue, LaneId, LaneMarkerKey,
    LaneMemberKey, LaneMemberValue, LaneSeqKey, LaneSeqValue, QuarantinedKey, QuarantinedValue,
    RowState, Seq, TenantOrd, counter_key, decode_counter_value, decode_empty_value,
    deliveries_range, family_range, hooks_range, is_sentinel,
};

use crate::{QueueError, RowId};

const PAGE: usize = 1024;

/// One broken invariant, with what was found. The number in each variant's doc
/// is the invariant's (docs/design.md section 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// A key or value that does not decode.
    Undecodable {
        /// The column family.
        cf: Cf,
        /// The key's bytes.
        key: Vec<u8>,
        /// The decode error.
        error: String,
    },
    /// 1: a row in none of ?D, ?F, ?O, ?X.
    RowUnplaced {
        /// The row.
        row: RowId,
        /// Its state field.
        state: RowState,
    },
    /// 1: a row in more than one of ?D, ?F, ?O, ?X (?D counted once per key).
    RowInManyPlaces {
        /// The row.
        row: RowId,
        /// Every place it is in.
        places: Vec<RowState>,
    },
    /// 1: a row in one place whose state field names another.
    StateMismatch {
        /// The row.
        row: RowId,
        /// Its state field.
        state: RowState,
        /// Where it is.
        place: RowState,
    },
    /// 1: an index entry (?D, ?F, ?O, ?X) whose delivery row does not exist.
    IndexWithoutRow {
        /// The row named.
        row: RowId,
        /// The family it is in.
        place: RowState,
    },
    /// 2: an ?O member with neither ?H nor ?P for its lane.
    MemberStranded {
        /// The member's row.
        row: RowId,
        /// Its lane.
        lane: LaneId,
    },
    /// 2: an ?O member in a lane other than its row's lane field.
    MemberLaneMismatch {
        /// The member's row.
        row: RowId,
        /// The lane of the ?O key.
        lane: LaneId,
        /// The row's lane field.
        row_lane: Option<LaneId>,
    },
    /// 2: an ?H whose named row is not in ?D or ?F, nor in ?X (a held lane,
    /// ADR 0004 section 8), or is in another lane.
    HeadNotLive {
        /// The tenant.
        tenant: TenantOrd,
        /// The lane.
        lane: LaneId,
        /// The row ?H names.
        head: RowId,
    },
    /// 2: a lane with more than one row in ?D or ?F.
    LaneManyLive {
        /// The tenant.
        tenant: TenantOrd,
        /// The lane.
        lane: LaneId,
        /// Its rows in ?D or ?F.
        rows: Vec<RowId>,
    },
    /// 2: a laned row in ?D or ?F that its lane's ?H does not name.
    LiveRowNotHead {
        /// The row.
        row: RowId,
        /// Its lane.
        lane: LaneId,
    },
    /// 2: a ?D/?F entry whose kind disagrees with the row (kind 2/3 for an
    /// unlaned row, 0/1 for a laned one).
    KindMismatch {
        /// The row.
        row: RowId,
        /// The kind found.
        kind: DueKind,
        /// Whether the row has a lane.
        laned: bool,
    },
    /// 2: a laned row whose lane position is above its lane's ?S (the last
    /// position given out), or that shares its position with another row of
    /// its lane (ADR 0004 section 6, "The lane sequence").
    LaneSeqWrong {
        /// The row.
        row: RowId,
        /// Its lane.
        lane: LaneId,
        /// Its position.
        lane_seq: u64,
        /// The lane's ?S value (0 when there is none).
        last: u64,
        /// Whether another row of the lane has the same position.
        shared: bool,
    },
    /// 3: a counter that does not equal its keys' count or byte sum
    /// ([`TenantOrd::NODE`]: the aggregate, which must equal the sum over
    /// tenants).
    CounterMismatch {
        /// The tenant, or the node aggregate.
        tenant: TenantOrd,
        /// The field.
        field: CounterField,
        /// The stored value.
        stored: i64,
        /// What the keys (or the tenants) add up to.
        expected: i64,
    },
    /// 4: a tenant with a ?D row that is not held and no ?A.
    DueWithoutActive {
        /// The tenant.
        tenant: TenantOrd,
    },
    /// 5: a delivery row whose envelope is not in `hooks`.
    EnvelopeMissing {
        /// The row.
        row: RowId,
    },
    /// 7: an attempt log entry (?L) whose hook has no envelope in `hooks`
    /// (the log goes with the envelope: retention, a drop, a purge, a
    /// hand-over).
    AttemptLogWithoutEnvelope {
        /// The row the entry is of.
        row: RowId,
        /// Its attempt number.
        attempt: u32,
    },
    /// 8: an attempt log entry of a row that exists, numbered above the
    /// row's `logged_attempts` (the next attempt would write over it).
    AttemptLogAhead {
        /// The row.
        row: RowId,
        /// The entry's attempt number.
        attempt: u32,
        /// The row's `logged_attempts`.
        logged: u32,
    },
    /// 6: a hook (or delivery row) stored above the seq high-water mark.
    /// Not among [`check_store`]'s: the pure builders' model stores have no
    /// mark (the Writer alone writes it); [`seq_above_high_water`] checks it,
    /// for `ankusa store check`, `store import` and the Writer's start.
    SeqAboveHighWater(SeqAboveHighWater),
}

/// A stored seq above the seq high-water mark (invariant 6, docs/design.md
/// section 4): the Writer gives out seqs from the mark up, so new hooks would
/// overwrite stored ones. Only a store not written by the relay itself has
/// one (a dump edited or cut by hand, a copy of files from two stores).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqAboveHighWater {
    /// The tenant of the highest stored seq.
    pub tenant: TenantOrd,
    /// The highest seq a hook or a delivery row of the store has.
    pub seq: Seq,
    /// The stored mark (0 when there is none).
    pub high_water: Seq,
}

impl std::fmt::Display for SeqAboveHighWater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the store holds hook seq {} (tenant ordinal {}) above its seq high-water mark {} \
             (meta key `seq_high_water`): new hooks would take seqs from {} on and overwrite stored ones",
            self.seq.0,
            self.tenant.0,
            self.high_water.0,
            self.high_water.0 + 1
        )
    }
}

/// The highest seq under any tenant of `cf` (keys `ord:32, seq:64, ...`):
/// one reverse seek per tenant present, never a scan of the rows. A key
/// that does not decode is passed over (it is [`check_store`]'s to report).
fn highest_seq(
    read: &impl Read,
    cf: Cf,
    whole: KeyRange,
    decode: impl Fn(&[u8]) -> Option<(TenantOrd, Seq)>,
) -> Result<Option<(TenantOrd, Seq)>, QueueError> {
    let mut best: Option<(TenantOrd, Seq)> = None;
    let mut end = whole.end.clone();
    loop {
        let range = KeyRange::new(whole.start.clone(), end);
        let Some((k, _)) = read
            .scan(cf, &range, Direction::Reverse, 1)?
            .into_iter()
            .next()
        else {
            return Ok(best);
        };
        end = match decode(&k) {
            Some((tenant, seq)) => {
                if best.is_none_or(|(_, b)| seq > b) {
                    best = Some((tenant, seq));
                }
                // Next: below this tenant's first key.
                tenant.0.to_be_bytes().to_vec()
            }
            None => k.to_vec(),
        };
    }
}

/// Invariant 6 (docs/design.md section 4): `Some` when a hook or a delivery
/// row is stored above the seq high-water mark. Reads the mark and, per
/// tenant, the last key of cf `hooks` and of cf `deliveries`: cheap enough
/// for every start (the Writer refuses such a store) and every import.
///
/// # Errors
/// Engine errors; a key or a mark that does not decode.
pub fn seq_above_high_water(read: &impl Read) -> Result<Option<SeqAboveHighWater>, QueueError> {
    let high_water = match read.get(Cf::Meta, SEQ_HIGH_WATER_KEY)? {
        Some(v) => decode_seq_high_water(&v)?,
        None => Seq(0),
    };
    let hooks = highest_seq(read, Cf::Hooks, hooks_range(), |k| {
        HookKey::decode(k).ok().map(|h| (h.tenant, h.seq))
    })?;
    let rows = highest_seq(read, Cf::Deliveries, deliveries_range(), |k| {
        DeliveryKey::decode(k).ok().map(|d| (d.tenant, d.seq))
    })?;
    Ok(hooks
        .into_iter()
        .chain(rows)
        .max_by_key(|(_, seq)| *seq)
        .filter(|(_, seq)| *seq > high_water)
        .map(|(tenant, seq)| SeqAboveHighWater {
            tenant,
            seq,
            high_water,
        }))
}

/// Checks invariants 1 to 5, 7 and 8 of docs/design.md section 4 over everything `read` sees
/// (pass a snapshot for a consistent answer) and returns every violation found,
/// not just the first: empty when the store is consistent. Sentinels are
/// skipped. Counters checked per tenant: pending, bytes, in_flight, dead,
/// dead_bytes, quarantined, lanes, lanes_blocked, lane_members, lanes_held (the `_total`
/// fields are monotonic and have no keys); the aggregate is checked against the
/// sum over tenants for all thirteen.
///
/// Reads the whole store in pages; holds one entry per row in memory.
///
/// # Errors
/// Engine errors. (A value that does not decode is a [`Violation`], not an
/// error.)
pub fn check_invariants(read: &impl Read) -> Result<Vec<Violation>, QueueError> {
    Ok(check_store(read)?.violations)
}

/// What one pass of [`check_store`] found: every violation, what the store
/// holds, and the counter values its keys call for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Every broken invariant, as [`check_invariants`] returns them.
    pub violations: Vec<Violation>,
    /// What the store holds, counted from its keys.
    pub census: Census,
    /// Every counter whose stored value differs from what the keys call for
    /// (invariant 3), with the value to give it: what `ankusa store check
    /// --repair-counters` writes ([`counter_fix_batch`]).
    pub counter_fixes: Vec<CounterFix>,
}

/// What a store holds, counted from its keys (not from its counters), over
/// every tenant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Tenants with a key or a counter.
    pub tenants: u64,
    /// Envelopes in cf `hooks` (delivered hooks too, until retention deletes
    /// them; quarantined ones too).
    pub hooks: u64,
    /// Delivery rows in cf `deliveries`.
    pub rows: u64,
    /// Rows in ?D, ?F or ?O.
    pub pending: u64,
    /// Rows in ?F.
    pub in_flight: u64,
    /// Rows in ?O.
    pub lane_members: u64,
    /// Lane heads (?H).
    pub lanes: u64,
    /// Of them, held lanes: a head that is a dead letter of its lane
    /// (ADR 0004 section 8).
    pub lanes_held: u64,
    /// Rows in ?X.
    pub dead: u64,
    /// Hooks in ?Q.
    pub quarantined: u64,
}

/// One counter to set: `field` of `tenant` (or of [`TenantOrd::NODE`], the
/// aggregate) holds `stored`; its keys (for the aggregate: the tenants'
/// values, once fixed) add up to `expected`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterFix {
    /// The tenant, or the node aggregate.
    pub tenant: TenantOrd,
    /// The field.
    pub field: CounterField,
    /// The value stored now (0 when the counter was never written).
    pub stored: i64,
    /// The value the keys call for.
    pub expected: i64,
}

/// Runs the checker of [`check_invariants`] and also returns what the store
/// holds ([`Census`]) and the counter values the keys call for
/// ([`CounterFix`]): per tenant, each keyed field (pending, bytes, in_flight,
/// dead, dead_bytes, quarantined, lanes, lanes_blocked, lane_members, lanes_held) is its
/// keys' count or byte sum, and the `_total` fields keep their stored value
/// (they have no keys); the aggregate of every field is the sum of the
/// tenants' values once fixed. Reads as [`check_invariants`] does.
///
/// # Errors
/// Engine errors.
pub fn check_store(read: &impl Read) -> Result<CheckReport, QueueError> {
    let mut c = Checker::default();
    for family in Family::ALL {
        for kv in scan_pages(
            read,
            Cf::Index,
            family_range(family),
            Direction::Forward,
            PAGE,
        ) {
            let (k, v) = kv?;
            if is_sentinel(Cf::Index, &k) {
                continue;
            }
            if let Err(error) = c.index_entry(family, &k, &v) {
                c.out.push(Violation::Undecodable {
                    cf: Cf::Index,
                    key: k.to_vec(),
                    error,
                });
            }
        }
    }
    for kv in scan_pages(read, Cf::Hooks, hooks_range(), Direction::Forward, PAGE) {
        let (k, _) = kv?;
        match HookKey::decode(&k) {
            Ok(h) => {
                c.hooks.insert((h.tenant, h.seq.0));
            }
            Err(e) => c.undecodable(Cf::Hooks, &k, e.to_string()),
        }
    }
    let mut rows: BTreeMap<RowId, DeliveryRow> = BTreeMap::new();
    for kv in scan_pages(
        read,
        Cf::Deliveries,
        deliveries_range(),
        Direction::Forward,
        PAGE,
    ) {
        let (k, v) = kv?;
        let decoded = DeliveryKey::decode(&k)
            .map_err(|e| e.to_string())
            .and_then(|dk| Ok((dk, DeliveryRow::decode(&v).map_err(|e| e.to_string())?)));
        match decoded {
            Ok((dk, row)) => {
                rows.insert(RowId::new(dk.tenant, dk.seq, dk.sink), row);
            }
            Err(e) => c.undecodable(Cf::Deliveries, &k, e),
        }
    }
    c.rows(&rows);
    c.lanes(&rows);
    c.attempt_log(&rows);
    c.counters();
    c.active();
    let census = c.census(rows.len());
    let counter_fixes = c.counter_fixes();
    Ok(CheckReport {
        violations: c.out,
        census,
        counter_fixes,
    })
}

/// The batch that sets every counter of `fixes` to its expected value (a put
/// of the value, not an add: it is right whatever the counter held). For a
/// stopped store only: a counter add committed by a running relay between the
/// check and this batch would be overwritten.
pub fn counter_fix_batch(fixes: &[CounterFix]) -> Batch {
    let mut batch = Batch::new();
    for f in fixes {
        batch.put(
            COUNTER_CF,
            counter_key(f.tenant, f.field).to_vec(),
            encode_counter(f.expected).to_vec(),
        );
    }
    batch
}

/// Per-tenant tallies of what the keys add up to (invariant 3).
#[derive(Default)]
struct Tally {
    counts: BTreeMap<CounterField, i64>,
    has_due: bool,
    has_active: bool,
}

impl Tally {
    fn add(&mut self, field: CounterField, delta: i64) {
        *self.counts.entry(field).or_default() += delta;
    }
}

/// A place an index entry puts a row in, with what the entry says.
#[derive(Clone, Copy)]
struct Placed {
    place: RowState,
    kind: Option<DueKind>,
    lane: Option<LaneId>,
}

#[derive(Default)]
struct Checker {
    out: Vec<Violation>,
    tallies: BTreeMap<TenantOrd, Tally>,
    places: BTreeMap<RowId, Vec<Placed>>,
    heads: BTreeMap<(TenantOrd, LaneId), RowId>,
    markers: BTreeSet<(TenantOrd, LaneId)>,
    members: Vec<(RowId, LaneId)>,
    counters: BTreeMap<(TenantOrd, CounterField), i64>,
    hooks: BTreeSet<(TenantOrd, u64)>,
    lane_seqs: BTreeMap<(TenantOrd, LaneId), u64>,
    /// Every ?L entry: its row and attempt number.
    attempts: Vec<(RowId, u32)>,
}

/// The counter fields whose value is a function of the keys (the `_total`
/// fields are monotonic and are checked only in the aggregate).
const KEYED_FIELDS: [CounterField; 10] = [
    CounterField::Pending,
    CounterField::Bytes,
    CounterField::InFlight,
    CounterField::Dead,
    CounterField::DeadBytes,
    CounterField::Quarantined,
    CounterField::Lanes,
    CounterField::LanesBlocked,
    CounterField::LaneMembers,
    CounterField::LanesHeld,
];

fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

impl Checker {
    fn undecodable(&mut self, cf: Cf, key: &[u8], error: String) {
        self.out.push(Violation::Undecodable {
            cf,
            key: key.to_vec(),
            error,
        });
    }

    fn tally(&mut self, tenant: TenantOrd) -> &mut Tally {
        self.tallies.entry(tenant).or_default()
    }

    fn place(&mut self, row: RowId, placed: Placed) {
        self.places.entry(row).or_default().push(placed);
    }

    /// Records one index entry; a decode failure is returned as text.
    fn index_entry(&mut self, family: Family, k: &[u8], v: &[u8]) -> Result<(), String> {
        use CounterField as F;
        match family {
            Family::Due => {
                let key = DueKey::decode(k).map_err(s)?;
                let val = DueValue::decode(v).map_err(s)?;
                let t = self.tally(key.tenant);
                t.add(F::Pending, 1);
                t.add(F::Bytes, i64::from(val.size));
                if val.kind == DueKind::HeadRetry {
                    t.add(F::LanesBlocked, 1);
                }
                // A held row (its sink is paused) does not make the tenant
                // active: its resume puts the ?A back (invariant 4).
                if !key.is_held() {
                    t.has_due = true;
                }
                let row = RowId::new(key.tenant, key.seq, key.sink);
                self.place(
                    row,
                    Placed {
                        place: RowState::Due,
                        kind: Some(val.kind),
                        lane: None,
                    },
                );
            }
            Family::InFlight => {
                let key = InFlightKey::decode(k).map_err(s)?;
                let val = InFlightValue::decode(v).map_err(s)?;
                let t = self.tally(key.tenant);
                t.add(F::Pending, 1);
                t.add(F::Bytes, i64::from(val.size));
                t.add(F::InFlight, 1);
                let row = RowId::new(key.tenant, key.seq, key.sink);
                self.place(
                    row,
                    Placed {
                        place: RowState::InFlight,
                        kind: Some(val.kind),
                        lane: None,
                    },
                );
            }
            Family::Active => {
                let key = ActiveKey::decode(k).map_err(s)?;
                decode_empty_value(v).map_err(s)?;
                self.tally(key.tenant).has_active = true;
            }
            Family::LaneMember => {
                let key = LaneMemberKey::decode(k).map_err(s)?;
                let val = LaneMemberValue::decode(v).map_err(s)?;
                let t = self.tally(key.tenant);
                t.add(F::Pending, 1);
                t.add(F::Bytes, i64::from(val.size));
                t.add(F::LaneMembers, 1);
                let row = RowId::new(key.tenant, key.seq, key.sink);
                self.place(
                    row,
                    Placed {
                        place: RowState::Member,
                        kind: None,
                        lane: Some(key.lane),
                    },
                );
                self.members.push((row, key.lane));
            }
            Family::LaneHead => {
                let key = LaneHeadKey::decode(k).map_err(s)?;
                let val = LaneHeadValue::decode(v).map_err(s)?;
                self.tally(key.tenant).add(F::Lanes, 1);
                self.heads.insert(
                    (key.tenant, key.lane),
                    RowId::new(key.tenant, val.seq, val.sink),
                );
            }
            Family::LaneMarker => {
                let key = LaneMarkerKey::decode(k).map_err(s)?;
                decode_empty_value(v).map_err(s)?;
                self.markers.insert((key.tenant, key.lane));
            }
            Family::DeadLetter => {
                let key = DeadLetterKey::decode(k).map_err(s)?;
                DeadLetterValue::decode(v).map_err(s)?;
                self.tally(key.tenant).add(F::Dead, 1);
                let row = RowId::new(key.tenant, key.seq, key.sink);
                self.place(
                    row,
                    Placed {
                        place: RowState::Dead,
                        kind: None,
                        lane: None,
                    },
                );
            }
            Family::Quarantined => {
                let key = QuarantinedKey::decode(k).map_err(s)?;
                QuarantinedValue::decode(v).map_err(s)?;
                self.tally(key.tenant).add(F::Quarantined, 1);
            }
            Family::Dedupe => {
                DedupeKey::decode(k).map_err(s)?;
                DedupeValue::decode(v).map_err(s)?;
            }
            Family::Counter => {
                let key = CounterKey::decode(k).map_err(s)?;
                let val = decode_counter_value(v).map_err(s)?;
                self.counters.insert((key.tenant, key.field), val);
            }
            Family::LaneSeq => {
                let key = LaneSeqKey::decode(k).map_err(s)?;
                let val = LaneSeqValue::decode(v).map_err(s)?;
                self.lane_seqs.insert((key.tenant, key.lane), val.last);
            }
            Family::AttemptLog => {
                let key = AttemptLogKey::decode(k).map_err(s)?;
                AttemptRecord::decode(v).map_err(s)?;
                self.attempts
                    .push((RowId::new(key.tenant, key.seq, key.sink), key.attempt));
            }
        }
        Ok(())
    }

    /// Invariants 7 and 8.
    fn attempt_log(&mut self, rows: &BTreeMap<RowId, DeliveryRow>) {
        for &(row, attempt) in &self.attempts {
            if !self.hooks.contains(&(row.tenant, row.seq.0)) {
                self.out
                    .push(Violation::AttemptLogWithoutEnvelope { row, attempt });
            }
            if let Some(r) = rows.get(&row)
                && attempt > r.logged_attempts
            {
                self.out.push(Violation::AttemptLogAhead {
                    row,
                    attempt,
                    logged: r.logged_attempts,
                });
            }
        }
    }

    /// Invariants 1 and 5, and the kind of each ?D/?F entry against its row.
    fn rows(&mut self, rows: &BTreeMap<RowId, DeliveryRow>) {
        for (&id, row) in rows {
            if !self.hooks.contains(&(id.tenant, id.seq.0)) {
                self.out.push(Violation::EnvelopeMissing { row: id });
            }
            let placed = self.places.get(&id).cloned().unwrap_or_default();
            match placed.as_slice() {
                [] => self.out.push(Violation::RowUnplaced {
                    row: id,
                    state: row.state,
                }),
                [one] if one.place != row.state => self.out.push(Violation::StateMismatch {
                    row: id,
                    state: row.state,
                    place: one.place,
                }),
                [_] => {}
                many => self.out.push(Violation::RowInManyPlaces {
                    row: id,
                    places: many.iter().map(|p| p.place).collect(),
                }),
            }
            for p in &placed {
                if let Some(kind) = p.kind
                    && kind.is_head() != row.lane.is_some()
                {
                    self.out.push(Violation::KindMismatch {
                        row: id,
                        kind,
                        laned: row.lane.is_some(),
                    });
                }
                if let Some(lane) = p.lane
                    && row.lane != Some(lane)
                {
                    self.out.push(Violation::MemberLaneMismatch {
                        row: id,
                        lane,
                        row_lane: row.lane,
                    });
                }
                if p.place == RowState::Dead {
                    self.tally(id.tenant)
                        .add(CounterField::DeadBytes, i64::from(row.size));
                }
            }
        }
        for (id, placed) in &self.places {
            if !rows.contains_key(id) {
                for p in placed {
                    self.out.push(Violation::IndexWithoutRow {
                        row: *id,
                        place: p.place,
                    });
                }
            }
        }
    }

    /// Invariant 2.
    fn lanes(&mut self, rows: &BTreeMap<RowId, DeliveryRow>) {
        for &(row, lane) in &self.members {
            let key = (row.tenant, lane);
            if !self.heads.contains_key(&key) && !self.markers.contains(&key) {
                self.out.push(Violation::MemberStranded { row, lane });
            }
        }
        // The laned rows in ?D or ?F, per lane.
        let mut live: BTreeMap<(TenantOrd, LaneId), Vec<RowId>> = BTreeMap::new();
        for (id, placed) in &self.places {
            let Some(lane) = rows.get(id).and_then(|r| r.lane) else {
                continue;
            };
            for p in placed {
                if matches!(p.place, RowState::Due | RowState::InFlight) {
                    live.entry((id.tenant, lane)).or_default().push(*id);
                }
            }
        }
        let mut held: Vec<TenantOrd> = Vec::new();
        for (&(tenant, lane), &head) in &self.heads {
            let is_live = live
                .get(&(tenant, lane))
                .is_some_and(|rs| rs.contains(&head));
            // A held lane (ADR 0004 section 8): its head is a dead letter of
            // the lane, and the lane has no row in ?D or ?F (a live row of
            // it is reported below as not its head).
            let is_held = !is_live
                && rows.get(&head).is_some_and(|r| r.lane == Some(lane))
                && self
                    .places
                    .get(&head)
                    .is_some_and(|ps| ps.iter().any(|p| p.place == RowState::Dead));
            if is_held {
                held.push(tenant);
            } else if !is_live {
                self.out.push(Violation::HeadNotLive { tenant, lane, head });
            }
        }
        for tenant in held {
            self.tally(tenant).add(CounterField::LanesHeld, 1);
        }
        // Lane positions: at most the lane's ?S, and each given once.
        let mut given: BTreeMap<(TenantOrd, LaneId, u64), Vec<RowId>> = BTreeMap::new();
        for (id, row) in rows {
            if let (Some(lane), Some(n)) = (row.lane, row.lane_seq) {
                given.entry((id.tenant, lane, n)).or_default().push(*id);
            }
        }
        for ((tenant, lane, lane_seq), ids) in given {
            let last = self.lane_seqs.get(&(tenant, lane)).copied().unwrap_or(0);
            if lane_seq > last || ids.len() > 1 {
                for row in ids.iter().copied() {
                    self.out.push(Violation::LaneSeqWrong {
                        row,
                        lane,
                        lane_seq,
                        last,
                        shared: ids.len() > 1,
                    });
                }
            }
        }
        for ((tenant, lane), rs) in live {
            if rs.len() > 1 {
                self.out.push(Violation::LaneManyLive {
                    tenant,
                    lane,
                    rows: rs.clone(),
                });
            }
            for row in rs {
                if self.heads.get(&(tenant, lane)) != Some(&row) {
                    self.out.push(Violation::LiveRowNotHead { row, lane });
                }
            }
        }
    }

    /// Invariant 3.
    fn counters(&mut self) {
        let mut tenants: BTreeSet<TenantOrd> = self.tallies.keys().copied().collect();
        tenants.extend(
            self.counters
                .keys()
                .map(|(t, _)| *t)
                .filter(|t| t.is_tenant()),
        );
        for &tenant in &tenants {
            for field in KEYED_FIELDS {
                let expected = self
                    .tallies
                    .get(&tenant)
                    .and_then(|t| t.counts.get(&field).copied())
                    .unwrap_or(0);
                let stored = self.counters.get(&(tenant, field)).copied().unwrap_or(0);
                if stored != expected {
                    self.out.push(Violation::CounterMismatch {
                        tenant,
                        field,
                        stored,
                        expected,
                    });
                }
            }
        }
        for field in CounterField::ALL {
            let expected: i64 = tenants
                .iter()
                .map(|&t| self.counters.get(&(t, field)).copied().unwrap_or(0))
                .sum();
            let stored = self
                .counters
                .get(&(TenantOrd::NODE, field))
                .copied()
                .unwrap_or(0);
            if stored != expected {
                self.out.push(Violation::CounterMismatch {
                    tenant: TenantOrd::NODE,
                    field,
                    stored,
                    expected,
                });
            }
        }
    }

    /// The census of what the keys hold (`rows`: the delivery rows read).
    fn census(&self, rows: usize) -> Census {
        let sum = |field: CounterField| -> u64 {
            self.tallies
                .values()
                .map(|t| {
                    t.counts
                        .get(&field)
                        .copied()
                        .unwrap_or(0)
                        .max(0)
                        .unsigned_abs()
                })
                .sum()
        };
        let mut tenants: BTreeSet<TenantOrd> = self.tallies.keys().copied().collect();
        tenants.extend(self.hooks.iter().map(|(t, _)| *t));
        tenants.extend(
            self.counters
                .keys()
                .map(|(t, _)| *t)
                .filter(|t| t.is_tenant()),
        );
        Census {
            tenants: tenants.len() as u64,
            hooks: self.hooks.len() as u64,
            rows: rows as u64,
            pending: sum(CounterField::Pending),
            in_flight: sum(CounterField::InFlight),
            lane_members: sum(CounterField::LaneMembers),
            lanes: sum(CounterField::Lanes),
            lanes_held: sum(CounterField::LanesHeld),
            dead: sum(CounterField::Dead),
            quarantined: sum(CounterField::Quarantined),
        }
    }

    /// Every counter whose stored value is not what the keys call for
    /// ([`check_store`]), tenants first (in ordinal and field order), then the
    /// aggregate.
    fn counter_fixes(&self) -> Vec<CounterFix> {
        let mut tenants: BTreeSet<TenantOrd> = self.tallies.keys().copied().collect();
        tenants.extend(
            self.counters
                .keys()
                .map(|(t, _)| *t)
                .filter(|t| t.is_tenant()),
        );
        let mut out = Vec::new();
        let mut sums: BTreeMap<CounterField, i64> = BTreeMap::new();
        for &tenant in &tenants {
            for field in CounterField::ALL {
                let stored = self.counters.get(&(tenant, field)).copied().unwrap_or(0);
                let expected = if KEYED_FIELDS.contains(&field) {
                    self.tallies
                        .get(&tenant)
                        .and_then(|t| t.counts.get(&field).copied())
                        .unwrap_or(0)
                } else {
                    stored
                };
                *sums.entry(field).or_default() += expected;
                if stored != expected {
                    out.push(CounterFix {
                        tenant,
                        field,
                        stored,
                        expected,
                    });
                }
            }
        }
        for field in CounterField::ALL {
            let stored = self
                .counters
                .get(&(TenantOrd::NODE, field))
                .copied()
                .unwrap_or(0);
            let expected = sums.get(&field).copied().unwrap_or(0);
            if stored != expected {
                out.push(CounterFix {
                    tenant: TenantOrd::NODE,
                    field,
                    stored,
                    expected,
                });
            }
        }
        out
    }

    /// Invariant 4.
    fn active(&mut self) {
        for (&tenant, t) in &self.tallies {
            if t.has_due && !t.has_active {
                self.out.push(Violation::DueWithoutActive { tenant });
            }
        }
    }
}
