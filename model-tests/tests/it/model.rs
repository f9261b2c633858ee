//! The reference model: plain maps and sets that say where every row must be,
//! what every lane holds, and what may be delivered next. It is written from
//! docs/design.md section 4 and ADR 0004 sections 4.1-4.9 directly, shares no code with
//! `lanes` or `queue`, and is compared with the store ([`crate::view::View`])
//! after every step.

use std::collections::{BTreeMap, BTreeSet};

use ankusa_keys::{CounterField, DueKind, LaneId, RowState, SinkIx, SourceId};

use crate::steps::Hook;
use crate::view::{LaneKey, RowId, View};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MState {
    Due { due_ms: u64, kind: DueKind },
    InFlight { kind: DueKind },
    Member,
    Dead,
}

#[derive(Clone, Debug)]
pub struct MRow {
    pub lane: Option<LaneId>,
    pub state: MState,
    pub size: u32,
    pub src: u8,
    pub attempts: u32,
    pub first_attempt_ms: Option<u64>,
    /// When the row was last claimed (the ?F value's claimed_at).
    pub claimed_at_ms: Option<u64>,
    /// The ?X value: dead_at and reason.
    pub dead: Option<(u64, String)>,
}

#[derive(Clone, Debug, Default)]
pub struct MLane {
    /// The row in ?D or ?F, if the lane is busy.
    pub head: Option<RowId>,
    /// Members, lowest seq first (a `RowId` of one lane orders by seq).
    pub members: BTreeSet<RowId>,
    /// ?P.
    pub marker: bool,
}

impl MLane {
    fn is_empty(&self) -> bool {
        self.head.is_none() && self.members.is_empty() && !self.marker
    }
}

/// The ordering key of key number `key` (0 = no key: the keyless lane).
pub fn key_bytes(key: u8) -> Option<&'static [u8]> {
    match key {
        0 => None,
        1 => Some(b"cus_a"),
        _ => Some(b"cus_b"),
    }
}

/// The lane of a laned row of source `src`, sink `sink`, key number `key`.
pub fn lane_of(src: u8, sink: u16, key: u8) -> LaneId {
    ankusa_lanes::lane_id(SinkIx(sink), SourceId(u32::from(src)), key_bytes(key))
}

/// The rows a hook makes: `(sink, lane)`.
pub fn hook_rows(hk: &Hook) -> Vec<(u16, Option<LaneId>)> {
    (0..2u16)
        .filter(|s| hk.sinks & (1 << s) != 0)
        .map(|s| {
            let ordered = hk.sinks & (1 << (s + 2)) != 0;
            (s, ordered.then(|| lane_of(hk.src, s, hk.key)))
        })
        .collect()
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub now: u64,
    pub next_seq: u64,
    pub rows: BTreeMap<RowId, MRow>,
    pub lanes: BTreeMap<LaneKey, MLane>,
    /// Per tenant: delivered_total and dead_lettered_total.
    pub delivered_total: BTreeMap<u32, i64>,
    pub dead_total: BTreeMap<u32, i64>,
    pub retries_total: BTreeMap<u32, i64>,
    /// Envelopes in `hooks`: received_at.
    pub hooks: BTreeMap<(u32, u64), u64>,
    /// Quarantined hooks (?Q): the hook and its size, for the release.
    pub quarantined: BTreeMap<(u32, u64), (Hook, u32)>,
    /// Every lane ever used: its source, sink and key number (for racing
    /// writers that join a given lane).
    pub lane_info: BTreeMap<LaneKey, (u8, u16, u8)>,
    /// The tenants that ever had a hook (and not purged since).
    pub tenants: BTreeSet<u32>,

    // ---- order checks (the spec's sentences, checked on the store's moves) ----
    /// Per lane: the seq of the last delivered row that was never revived.
    /// Rows that were never revived leave a lane in seq order.
    pub last_delivered: BTreeMap<LaneKey, u64>,
    /// Rows revived at least once.
    pub revived: BTreeSet<RowId>,
    /// A revived member below the head it was revived behind: it may wait in
    /// ?O while that head runs (ADR 4.8), and only while that one does.
    pub behind: BTreeMap<RowId, RowId>,
    /// After a restart: the head each lane must claim next (ADR 4.7).
    pub reclaim: BTreeMap<LaneKey, RowId>,
}

pub type Check = Result<(), String>;

impl Model {
    pub fn new(now: u64) -> Model {
        Model {
            now,
            next_seq: 1,
            ..Model::default()
        }
    }

    pub fn lane_key(&self, id: &RowId) -> Option<LaneKey> {
        self.rows.get(id).and_then(|r| r.lane).map(|l| (id.0, l))
    }

    pub fn row(&self, id: &RowId) -> &MRow {
        self.rows
            .get(id)
            .unwrap_or_else(|| panic!("model has no row {id:?}"))
    }

    fn row_mut(&mut self, id: &RowId) -> &mut MRow {
        self.rows
            .get_mut(id)
            .unwrap_or_else(|| panic!("model has no row {id:?}"))
    }

    fn prune(&mut self, lane: &LaneKey) {
        if self.lanes.get(lane).is_some_and(MLane::is_empty) {
            self.lanes.remove(lane);
        }
    }

    /// ADR 4.1: rows of a hook; laned ones become members with a marker.
    pub fn ingest(&mut self, seq: u64, hk: &Hook, size: u32) {
        let t = u32::from(hk.t);
        self.hooks.insert((t, seq), self.now);
        self.add_rows(seq, hk, size, false);
    }

    /// Quarantine: the envelope and ?Q, no rows.
    pub fn quarantine(&mut self, seq: u64, hk: &Hook, size: u32) {
        let t = u32::from(hk.t);
        self.tenants.insert(t);
        self.hooks.insert((t, seq), self.now);
        self.quarantined.insert((t, seq), (*hk, size));
    }

    /// Release of a quarantined hook: its rows take the ingest path with the
    /// hook's old seq, so, like a revived row, a laned one may sit below the
    /// lane's head and below rows already delivered.
    pub fn release_quarantined(&mut self, t: u32, seq: u64) {
        let (hk, size) = self.quarantined.remove(&(t, seq)).expect("quarantined");
        self.add_rows(seq, &hk, size, true);
    }

    /// Retention: envelopes received before `cutoff` with no row and no ?Q go.
    pub fn retention(&mut self, t: u32, cutoff: u64) {
        let referenced: std::collections::BTreeSet<(u32, u64)> = self
            .rows
            .keys()
            .map(|id| (id.0, id.1))
            .chain(self.quarantined.keys().copied())
            .collect();
        self.hooks
            .retain(|k, at| !(k.0 == t && *at < cutoff && !referenced.contains(k)));
    }

    fn add_rows(&mut self, seq: u64, hk: &Hook, size: u32, late: bool) {
        let t = u32::from(hk.t);
        self.tenants.insert(t);
        for (sink, lane) in hook_rows(hk) {
            let id = (t, seq, sink);
            let state = match lane {
                Some(lane) => {
                    self.lane_info.insert((t, lane), (hk.src, sink, hk.key));
                    let l = self.lanes.entry((t, lane)).or_default();
                    l.members.insert(id);
                    l.marker = true;
                    if late {
                        self.revived.insert(id);
                        if let Some(head) = l.head
                            && head.1 > seq
                        {
                            self.behind.insert(id, head);
                        }
                    }
                    MState::Member
                }
                None => MState::Due {
                    due_ms: self.now,
                    kind: DueKind::First,
                },
            };
            self.rows.insert(
                id,
                MRow {
                    lane,
                    state,
                    size,
                    src: hk.src,
                    attempts: 0,
                    first_attempt_ms: None,
                    claimed_at_ms: None,
                    dead: None,
                },
            );
        }
    }

    /// ADR 4.2: the lowest member becomes the head, due now (kind 2); ?P goes.
    fn promote(&mut self, lane: &LaneKey) {
        let now = self.now;
        let l = self.lanes.get_mut(lane).expect("lane");
        debug_assert!(l.head.is_none());
        let m = l.members.pop_first().expect("a member to promote");
        l.head = Some(m);
        l.marker = false;
        self.row_mut(&m).state = MState::Due {
            due_ms: now,
            kind: DueKind::HeadFirst,
        };
    }

    /// What a release decides, from the lane as read: promote, or drop the head.
    pub fn release_plan(&self, lane: &LaneKey) -> bool {
        self.lanes.get(lane).is_some_and(|l| !l.members.is_empty())
    }

    /// ADR 4.4, applied as planned (`promote` as read before a racing writer).
    fn release(&mut self, lane: &LaneKey, promote: bool) {
        let l = self.lanes.get_mut(lane).expect("lane");
        l.head = None;
        if promote {
            self.promote(lane);
        }
        self.prune(lane);
    }

    /// ?D -> ?F.
    pub fn claim(&mut self, id: &RowId) -> Check {
        let row = self.row(id).clone();
        let MState::Due { kind, .. } = row.state else {
            return Err(format!(
                "claim of {id:?}, which the model has in {:?}",
                row.state
            ));
        };
        if let Some(lane) = self.lane_key(id)
            && let Some(want) = self.reclaim.remove(&lane)
            && want != *id
        {
            return Err(format!(
                "after a restart lane {lane:?} claims {id:?} before its claimed head {want:?} (ADR 4.7)"
            ));
        }
        let now = self.now;
        let row = self.row_mut(id);
        row.state = MState::InFlight { kind };
        row.first_attempt_ms.get_or_insert(now);
        row.claimed_at_ms = Some(now);
        Ok(())
    }

    /// The store's members of `id`'s lane that a claim of `id` would pass over.
    pub fn check_claim_order(&self, id: &RowId, view: &View) -> Check {
        let Some(lane) = self.lane_key(id) else {
            return Ok(());
        };
        for &(seq, sink) in view
            .members
            .get(&lane)
            .map(|m| m.keys().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            let m = (lane.0, seq, sink);
            if seq < id.1 && self.behind.get(&m) != Some(id) {
                return Err(format!(
                    "claim of {id:?} passes over member {m:?} of its lane {lane:?}: deliveries out of seq order"
                ));
            }
        }
        Ok(())
    }

    /// ?F -> ?D later (a retry): kind 1, or 3 for a head; an attempt counted.
    pub fn retry(&mut self, id: &RowId, delay: u64) {
        let due_ms = self.now + delay;
        *self.retries_total.entry(id.0).or_default() += 1;
        let row = self.row_mut(id);
        row.attempts += 1;
        let MState::InFlight { kind } = row.state else {
            panic!("retry of {id:?} not in flight")
        };
        row.state = MState::Due {
            due_ms,
            kind: kind.as_retry(),
        };
    }

    /// A breaker park: ?D -> ?D later, unclaimed: kind 1, or 3 for a head; no
    /// attempt counted and first_attempt_ms untouched (a park is no attempt:
    /// the retry horizon starts at the first real attempt).
    pub fn park(&mut self, id: &RowId, delay: u64) {
        let due_ms = self.now + delay;
        let row = self.row_mut(id);
        let MState::Due { kind, .. } = row.state else {
            panic!("park of {id:?} not due")
        };
        row.state = MState::Due {
            due_ms,
            kind: kind.as_retry(),
        };
    }

    /// A claimed row delivered: gone; its lane released (promote as planned).
    pub fn delivered(&mut self, id: &RowId, promote: bool) -> Check {
        let row = self.rows.remove(id).expect("row");
        *self.delivered_total.entry(id.0).or_default() += 1;
        if let Some(lane) = row.lane.map(|l| (id.0, l)) {
            if !self.revived.contains(id) {
                let last = self.last_delivered.insert(lane, id.1);
                if let Some(last) = last
                    && last >= id.1
                {
                    return Err(format!(
                        "lane {lane:?} delivered seq {} after seq {last}: not in seq order",
                        id.1
                    ));
                }
            }
            self.revived.remove(id);
            self.behind.remove(id);
            self.release(&lane, promote);
        }
        Ok(())
    }

    /// A claimed row dead-lettered (policy, horizon, permanent, sink gone,
    /// orphan): to ?X; a head releases its lane (ADR 4.4).
    pub fn dead(&mut self, id: &RowId, promote: bool, reason: &str) {
        *self.dead_total.entry(id.0).or_default() += 1;
        let now = self.now;
        let row = self.row_mut(id);
        row.state = MState::Dead;
        row.dead = Some((now, reason.to_owned()));
        let lane = row.lane.map(|l| (id.0, l));
        self.behind.remove(id);
        if let Some(lane) = lane {
            if self.reclaim.get(&lane) == Some(id) {
                self.reclaim.remove(&lane);
            }
            self.release(&lane, promote);
        }
    }

    /// ADR 0004 section 8: a claimed row dead-lettered by a `dead_letter:
    /// hold` entry (its attempt counted): to ?X; a head keeps its lane, whose
    /// members wait behind it.
    pub fn dead_holding(&mut self, id: &RowId, reason: &str) {
        *self.dead_total.entry(id.0).or_default() += 1;
        let now = self.now;
        let row = self.row_mut(id);
        row.state = MState::Dead;
        row.attempts += 1;
        row.dead = Some((now, reason.to_owned()));
        let lane = row.lane.map(|l| (id.0, l));
        self.behind.remove(id);
        if let Some(lane) = lane
            && self.reclaim.get(&lane) == Some(id)
        {
            self.reclaim.remove(&lane);
        }
    }

    /// True when `id` is a dead letter that holds its lane (the lane's head).
    pub fn holds_lane(&self, id: &RowId) -> bool {
        self.rows.get(id).is_some_and(|r| r.state == MState::Dead)
            && self
                .lane_key(id)
                .and_then(|l| self.lanes.get(&l))
                .is_some_and(|l| l.head == Some(*id))
    }

    /// `queue::drop_dead`: the dead row goes; its hook's envelope goes with
    /// its last row; a held lane's head releases its lane (ADR 0004 section
    /// 7). True when the envelope went.
    pub fn drop_dead(&mut self, id: &RowId) -> bool {
        if self.holds_lane(id) {
            let lane = self.lane_key(id).expect("a held head's lane");
            let promote = self.release_plan(&lane);
            self.release(&lane, promote);
            if !promote {
                // The drop puts the marker back (`lanes::release_held_head`:
                // a sweep may have deleted a racing member's).
                self.lanes.entry(lane).or_default().marker = true;
            }
        }
        self.rows.remove(id);
        self.revived.remove(id);
        self.behind.remove(id);
        let left = self.rows.keys().any(|r| r.0 == id.0 && r.1 == id.1);
        !left && self.hooks.remove(&(id.0, id.1)).is_some()
    }

    /// ADR 4.8: a laned dead letter re-enters as a member plus ?P; an unlaned
    /// one as ?D kind 0 due now.
    pub fn revive(&mut self, id: &RowId) {
        let now = self.now;
        let held = self.holds_lane(id);
        let lane = self.lane_key(id);
        if !held {
            // A held lane's head is delivered in its lane's order; any
            // other revived row runs after its key's later hooks.
            self.revived.insert(*id);
        }
        let row = self.row_mut(id);
        row.attempts = 0;
        row.first_attempt_ms = None;
        if held {
            // ADR 0004 section 8: the held lane's head goes first again.
            row.state = MState::Due {
                due_ms: now,
                kind: DueKind::HeadFirst,
            };
            return;
        }
        match lane {
            Some(lane) => {
                let l = self.lanes.entry(lane).or_default();
                l.members.insert(*id);
                l.marker = true;
                if let Some(head) = l.head
                    && head.1 > id.1
                {
                    self.behind.insert(*id, head);
                }
                self.row_mut(id).state = MState::Member;
            }
            None => {
                self.row_mut(id).state = MState::Due {
                    due_ms: now,
                    kind: DueKind::First,
                }
            }
        }
    }

    /// ADR 4.7: every ?F back to ?D as a first attempt, due now; ?H untouched.
    pub fn restart(&mut self) {
        let now = self.now;
        let mut reclaim = Vec::new();
        for (id, row) in self.rows.iter_mut() {
            if let MState::InFlight { kind } = row.state {
                row.state = MState::Due {
                    due_ms: now,
                    kind: kind.as_first(),
                };
                if let Some(l) = row.lane {
                    reclaim.push(((id.0, l), *id));
                }
            }
        }
        self.reclaim.extend(reclaim);
    }

    /// ADR 4.6, one marker, as read: `head` -> delete ?P; member -> promote;
    /// neither -> delete ?P (the recheck follows in [`Model::sweep_recheck`]).
    pub fn sweep_plan(&self, lane: &LaneKey) -> SweepAct {
        let l = &self.lanes[lane];
        if l.head.is_some() {
            SweepAct::HeadBusy
        } else if !l.members.is_empty() {
            SweepAct::Promote
        } else {
            SweepAct::Empty
        }
    }

    pub fn sweep_apply(&mut self, lane: &LaneKey, act: SweepAct) {
        match act {
            SweepAct::HeadBusy | SweepAct::Empty => {
                self.lanes.get_mut(lane).expect("lane").marker = false;
            }
            SweepAct::Promote => self.promote(lane),
        }
        self.prune(lane);
    }

    /// The recheck of an emptied lane: the marker is back if a member appeared.
    pub fn sweep_recheck(&mut self, lane: &LaneKey) {
        if let Some(l) = self.lanes.get_mut(lane)
            && !l.members.is_empty()
        {
            l.marker = true;
        }
    }

    pub fn purge(&mut self, t: u32) {
        self.rows.retain(|id, _| id.0 != t);
        self.lanes.retain(|k, _| k.0 != t);
        self.delivered_total.remove(&t);
        self.dead_total.remove(&t);
        self.retries_total.remove(&t);
        self.hooks.retain(|k, _| k.0 != t);
        self.quarantined.retain(|k, _| k.0 != t);
        self.tenants.remove(&t);
        self.last_delivered.retain(|k, _| k.0 != t);
        self.revived.retain(|id| id.0 != t);
        self.behind.retain(|id, _| id.0 != t);
        self.reclaim.retain(|k, _| k.0 != t);
    }

    /// A hold: the row's due time moves into the held band (kept in the low
    /// bits); nothing else changes, a head stays its lane's head.
    pub fn hold(&mut self, id: &RowId) {
        if let MState::Due { due_ms, .. } = &mut self.row_mut(id).state {
            *due_ms |= ankusa_keys::HELD_DUE_BIT;
        }
    }

    /// A resume of tenant `t`: every held row back at its due time, but those
    /// of `keep` (source, sink), still paused. Returns how many moved.
    pub fn unhold(&mut self, t: u32, keep: Option<(u8, u16)>) -> usize {
        let mut moved = 0;
        for (id, r) in self.rows.iter_mut() {
            if id.0 != t || keep == Some((r.src, id.2)) {
                continue;
            }
            if let MState::Due { due_ms, .. } = &mut r.state
                && *due_ms & ankusa_keys::HELD_DUE_BIT != 0
            {
                *due_ms &= !ankusa_keys::HELD_DUE_BIT;
                moved += 1;
            }
        }
        moved
    }

    /// Every pending row (?D, ?F, ?O) of the source: dead; its lanes empty.
    pub fn dead_source(&mut self, t: u32, src: u8, reason: &str) {
        let now = self.now;
        let doomed: Vec<RowId> = self
            .rows
            .iter()
            .filter(|(id, r)| {
                id.0 == t && r.src == src && matches!(r.state, MState::Due { .. } | MState::Member)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in doomed {
            *self.dead_total.entry(t).or_default() += 1;
            let row = self.row_mut(&id);
            row.state = MState::Dead;
            row.dead = Some((now, reason.to_owned()));
            if let Some(lane) = row.lane.map(|l| (t, l)) {
                let l = self.lanes.get_mut(&lane).expect("lane");
                l.members.remove(&id);
                if l.head == Some(id) {
                    l.head = None;
                }
                self.reclaim.remove(&lane);
            }
            self.behind.remove(&id);
        }
    }

    /// Takes the store's ?P bit for every lane with a head (where it is free).
    pub fn adopt_markers(&mut self, v: &View) {
        for (k, l) in self.lanes.iter_mut() {
            if l.head.is_some() {
                l.marker = v.markers.contains(k);
            }
        }
    }

    /// Drops the lanes that hold nothing (after marker-only changes).
    pub fn prune_all(&mut self) {
        self.lanes.retain(|_, l| !l.is_empty());
    }

    /// Compares the store with the model: every row's place, every lane's
    /// head, members and marker, and the counters the model knows exactly.
    pub fn compare(&self, v: &View) -> Check {
        // Envelopes and quarantined hooks.
        if v.hooks.iter().ne(self.hooks.keys()) {
            return Err(format!(
                "envelopes differ: store {:?}, model {:?}",
                v.hooks,
                self.hooks.keys()
            ));
        }
        if v.quarantined.iter().ne(self.quarantined.keys()) {
            return Err(format!(
                "?Q differs: store {:?}, model {:?}",
                v.quarantined,
                self.quarantined.keys()
            ));
        }
        // Rows.
        let store_rows: BTreeSet<&RowId> = v.rows.keys().collect();
        let model_rows: BTreeSet<&RowId> = self.rows.keys().collect();
        if store_rows != model_rows {
            return Err(format!(
                "delivery rows differ: only in store {:?}, only in model {:?}",
                store_rows.difference(&model_rows).collect::<Vec<_>>(),
                model_rows.difference(&store_rows).collect::<Vec<_>>()
            ));
        }
        for (id, m) in &self.rows {
            let r = &v.rows[id];
            if r.lane != m.lane || r.size != m.size {
                return Err(format!(
                    "row {id:?}: lane/size {:?}/{} in store, {:?}/{} in model",
                    r.lane, r.size, m.lane, m.size
                ));
            }
            let state = match m.state {
                MState::Due { .. } => RowState::Due,
                MState::InFlight { .. } => RowState::InFlight,
                MState::Member => RowState::Member,
                MState::Dead => RowState::Dead,
            };
            if r.state != state
                || r.attempts != m.attempts
                || r.first_attempt_at_ms != m.first_attempt_ms
            {
                return Err(format!(
                    "row {id:?}: state/attempts/first_attempt_at {:?}/{}/{:?} in store, {state:?}/{}/{:?} in model",
                    r.state, r.attempts, r.first_attempt_at_ms, m.attempts, m.first_attempt_ms
                ));
            }
            if !v.hooks.contains(&(id.0, id.1)) {
                return Err(format!("row {id:?} has no envelope"));
            }
            let places = [
                v.due.contains_key(id),
                v.inflight.contains_key(id),
                r.lane.is_some_and(|l| {
                    v.members
                        .get(&(id.0, l))
                        .is_some_and(|ms| ms.contains_key(&(id.1, id.2)))
                }),
                v.dead.contains_key(id),
            ];
            let want = match m.state {
                MState::Due { .. } => 0,
                MState::InFlight { .. } => 1,
                MState::Member => 2,
                MState::Dead => 3,
            };
            let mut expected = [false; 4];
            expected[want] = true;
            if places != expected {
                return Err(format!(
                    "row {id:?} is in [?D ?F ?O ?X] = {places:?}, the model has it {:?}",
                    m.state
                ));
            }
            match m.state {
                MState::Due { due_ms, kind } => {
                    let (sd, sv) = v.due[id];
                    if sd != due_ms || sv.kind != kind || sv.size != m.size {
                        return Err(format!(
                            "row {id:?}: ?D due {sd} kind {:?} size {} in store, due {due_ms} kind {kind:?} size {} in model",
                            sv.kind, sv.size, m.size
                        ));
                    }
                }
                MState::InFlight { kind } => {
                    let sv = v.inflight[id];
                    if sv.kind != kind
                        || sv.size != m.size
                        || Some(sv.claimed_at_ms) != m.claimed_at_ms
                    {
                        return Err(format!(
                            "row {id:?}: ?F kind {:?} size {} claimed at {} in store, kind {kind:?} size {} claimed at {:?} in model",
                            sv.kind, sv.size, sv.claimed_at_ms, m.size, m.claimed_at_ms
                        ));
                    }
                }
                MState::Dead => {
                    if Some(&v.dead[id]) != m.dead.as_ref() {
                        return Err(format!(
                            "row {id:?}: ?X {:?} in store, {:?} in model",
                            v.dead[id], m.dead
                        ));
                    }
                }
                MState::Member => {
                    let lane = m.lane.expect("a member has a lane");
                    let sv = v.members[&(id.0, lane)][&(id.1, id.2)];
                    if sv.size != m.size {
                        return Err(format!(
                            "row {id:?}: ?O size {} in store, {} in model",
                            sv.size, m.size
                        ));
                    }
                }
            }
        }
        // Stray index keys for rows that do not exist.
        for id in v.due.keys().chain(v.inflight.keys()).chain(v.dead.keys()) {
            if !self.rows.contains_key(id) {
                return Err(format!("index key for a row that does not exist: {id:?}"));
            }
        }
        // Lanes.
        let lanes: BTreeSet<LaneKey> = self
            .lanes
            .keys()
            .chain(v.heads.keys())
            .chain(v.members.keys())
            .chain(v.markers.iter())
            .copied()
            .collect();
        for lane in &lanes {
            let empty = MLane::default();
            let m = self.lanes.get(lane).unwrap_or(&empty);
            let s_head = v.heads.get(lane).copied();
            let s_members: BTreeSet<RowId> = v
                .members
                .get(lane)
                .map(|ms| ms.keys().map(|&(seq, sink)| (lane.0, seq, sink)).collect())
                .unwrap_or_default();
            // ?P beside a head is harmless (the next sweep deletes it, ADR
            // 4.6): the marker is compared only on a lane without a head, and
            // [`Model::adopt_markers`] takes the store's bit otherwise.
            let s_marker = v.markers.contains(lane);
            let marker_ok = m.head.is_some() || s_marker == m.marker;
            if s_head != m.head || s_members != m.members || !marker_ok {
                return Err(format!(
                    "lane {lane:?}: store head {s_head:?} members {s_members:?} marker {s_marker}, \
                     model head {:?} members {:?} marker {}",
                    m.head, m.members, m.marker
                ));
            }
            // ADR 0004 section 3: at most one row of a lane in ?D/?F, and it
            // is the head; a held lane (section 8) has none, its head in ?X.
            let busy = v.lane_busy_rows(lane);
            let held = s_head.is_some_and(|h| v.dead.contains_key(&h));
            let expected = if held { None } else { s_head };
            if busy.len() > 1 || busy.first().copied() != expected {
                return Err(format!(
                    "lane {lane:?}: rows in ?D/?F {busy:?}, head {s_head:?}"
                ));
            }
        }
        // ?P and ?D need ?A (docs/design.md section 4, invariant 4; ADR 4.6 on
        // sweep_markers).
        // A held ?D row (a paused sink, docs/design.md section 5) needs none.
        let live_due = v
            .due
            .iter()
            .filter(|(_, (d, _))| d & ankusa_keys::HELD_DUE_BIT == 0)
            .map(|(id, _)| id.0);
        for t in live_due.chain(v.markers.iter().map(|l| l.0)) {
            if !v.active.contains(&t) {
                return Err(format!("tenant {t} has ?D or ?P rows and no ?A marker"));
            }
        }
        self.compare_counters(v)
    }

    fn compare_counters(&self, v: &View) -> Check {
        let mut want: BTreeMap<(u32, CounterField), i64> = BTreeMap::new();
        let mut add = |t: u32, f: CounterField, n: i64| {
            *want.entry((t, f)).or_default() += n;
            *want.entry((0, f)).or_default() += n;
        };
        for (id, r) in &self.rows {
            let size = i64::from(r.size);
            match r.state {
                MState::Dead => {
                    add(id.0, CounterField::Dead, 1);
                    add(id.0, CounterField::DeadBytes, size);
                }
                s => {
                    add(id.0, CounterField::Pending, 1);
                    add(id.0, CounterField::Bytes, size);
                    if let MState::InFlight { .. } = s {
                        add(id.0, CounterField::InFlight, 1);
                    }
                    if s == MState::Member {
                        add(id.0, CounterField::LaneMembers, 1);
                    }
                    if let MState::Due {
                        kind: DueKind::HeadRetry,
                        ..
                    } = s
                    {
                        add(id.0, CounterField::LanesBlocked, 1);
                    }
                }
            }
        }
        for (lane, l) in &self.lanes {
            if l.head.is_some() {
                add(lane.0, CounterField::Lanes, 1);
            }
        }
        for (t, n) in &self.delivered_total {
            add(*t, CounterField::DeliveredTotal, *n);
        }
        for (t, n) in &self.dead_total {
            add(*t, CounterField::DeadLetteredTotal, *n);
        }
        for (t, _) in self.quarantined.keys() {
            add(*t, CounterField::Quarantined, 1);
        }
        for (t, n) in &self.retries_total {
            add(*t, CounterField::RetriesTotal, *n);
        }
        want.retain(|_, n| *n != 0);
        let checked = [
            CounterField::Pending,
            CounterField::Bytes,
            CounterField::InFlight,
            CounterField::Dead,
            CounterField::DeadBytes,
            CounterField::DeliveredTotal,
            CounterField::DeadLetteredTotal,
            CounterField::RetriesTotal,
            CounterField::Quarantined,
            CounterField::Lanes,
            CounterField::LanesBlocked,
            CounterField::LaneMembers,
        ];
        let store: BTreeMap<(u32, CounterField), i64> = v
            .counters
            .iter()
            .filter(|(k, _)| checked.contains(&k.1))
            .map(|(k, n)| (*k, *n))
            .collect();
        if store != want {
            let diff: Vec<_> = store
                .keys()
                .chain(want.keys())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter(|k| store.get(k) != want.get(k))
                .map(|k| {
                    format!(
                        "{}:{} store {:?} model {:?}",
                        k.0,
                        k.1.name(),
                        store.get(k),
                        want.get(k)
                    )
                })
                .collect();
            return Err(format!("counters differ: {}", diff.join(", ")));
        }
        Ok(())
    }
}

/// What a sweep does with one marker it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepAct {
    HeadBusy,
    Promote,
    Empty,
}
