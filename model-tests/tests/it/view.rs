//! What the store holds, decoded with `ankusa-keys` only: the side of the
//! comparison that does not trust `lanes` or `queue`.

use std::collections::{BTreeMap, BTreeSet};

use ankusa_engine::{Cf, Direction, Read, scan_pages};
use ankusa_keys::index::{
    ActiveKey, DeadLetterKey, DueKey, InFlightKey, LaneHeadKey, LaneMarkerKey, LaneMemberKey,
};
use ankusa_keys::{
    CounterField, CounterKey, DeliveryKey, DeliveryRow, DueValue, Family, InFlightValue,
    LaneHeadValue, LaneId, LaneMemberValue, family_range, is_sentinel,
};

/// A delivery row: `(tenant, seq, sink)`.
pub type RowId = (u32, u64, u16);
/// A lane: `(tenant, lane)`.
pub type LaneKey = (u32, LaneId);

/// The decoded contents of every family the model compares.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct View {
    pub rows: BTreeMap<RowId, DeliveryRow>,
    /// ?D: row -> (due_ms, value)
    pub due: BTreeMap<RowId, (u64, DueValue)>,
    pub inflight: BTreeMap<RowId, InFlightValue>,
    /// ?O: lane -> members (seq, sink) -> value
    pub members: BTreeMap<LaneKey, BTreeMap<(u64, u16), LaneMemberValue>>,
    pub heads: BTreeMap<LaneKey, RowId>,
    pub markers: BTreeSet<LaneKey>,
    /// ?X: row -> (dead_at_ms, reason)
    pub dead: BTreeMap<RowId, (u64, String)>,
    pub active: BTreeSet<u32>,
    pub hooks: BTreeSet<(u32, u64)>,
    pub quarantined: BTreeSet<(u32, u64)>,
    pub counters: BTreeMap<(u32, CounterField), i64>,
}

fn index_family(read: &impl Read, family: Family) -> Vec<(Vec<u8>, Vec<u8>)> {
    scan_pages(
        read,
        Cf::Index,
        family_range(family),
        Direction::Forward,
        64,
    )
    .map(|kv| kv.expect("scan"))
    .filter(|(k, _)| !is_sentinel(Cf::Index, k))
    .map(|(k, v)| (k.to_vec(), v.to_vec()))
    .collect()
}

fn all_of(read: &impl Read, cf: Cf) -> Vec<(Vec<u8>, Vec<u8>)> {
    scan_pages(
        read,
        cf,
        ankusa_engine::KeyRange::new(vec![0u8], vec![0xffu8; 32]),
        Direction::Forward,
        64,
    )
    .map(|kv| kv.expect("scan"))
    .filter(|(k, _)| !is_sentinel(cf, k))
    .map(|(k, v)| (k.to_vec(), v.to_vec()))
    .collect()
}

impl View {
    pub fn read(read: &impl Read) -> View {
        let mut v = View::default();
        for (k, val) in all_of(read, Cf::Deliveries) {
            let key = DeliveryKey::decode(&k).expect("delivery key");
            let row = DeliveryRow::decode(&val).expect("delivery row");
            v.rows.insert((key.tenant.0, key.seq.0, key.sink.0), row);
        }
        for (k, _) in all_of(read, Cf::Hooks) {
            let key = ankusa_keys::HookKey::decode(&k).expect("hook key");
            v.hooks.insert((key.tenant.0, key.seq.0));
        }
        for (k, val) in index_family(read, Family::Due) {
            let key = DueKey::decode(&k).expect("?D key");
            let dv = DueValue::decode(&val).expect("?D value");
            v.due
                .insert((key.tenant.0, key.seq.0, key.sink.0), (key.due_ms, dv));
        }
        for (k, val) in index_family(read, Family::InFlight) {
            let key = InFlightKey::decode(&k).expect("?F key");
            let fv = InFlightValue::decode(&val).expect("?F value");
            v.inflight.insert((key.tenant.0, key.seq.0, key.sink.0), fv);
        }
        for (k, val) in index_family(read, Family::LaneMember) {
            let key = LaneMemberKey::decode(&k).expect("?O key");
            let mv = LaneMemberValue::decode(&val).expect("?O value");
            v.members
                .entry((key.tenant.0, key.lane))
                .or_default()
                .insert((key.seq.0, key.sink.0), mv);
        }
        for (k, val) in index_family(read, Family::LaneHead) {
            let key = LaneHeadKey::decode(&k).expect("?H key");
            let hv = LaneHeadValue::decode(&val).expect("?H value");
            v.heads.insert(
                (key.tenant.0, key.lane),
                (key.tenant.0, hv.seq.0, hv.sink.0),
            );
        }
        for (k, _) in index_family(read, Family::LaneMarker) {
            let key = LaneMarkerKey::decode(&k).expect("?P key");
            v.markers.insert((key.tenant.0, key.lane));
        }
        for (k, val) in index_family(read, Family::DeadLetter) {
            let key = DeadLetterKey::decode(&k).expect("?X key");
            let dv = ankusa_keys::DeadLetterValue::decode(&val).expect("?X value");
            v.dead.insert(
                (key.tenant.0, key.seq.0, key.sink.0),
                (dv.dead_at_ms, dv.reason),
            );
        }
        for (k, _) in index_family(read, Family::Quarantined) {
            let key = ankusa_keys::QuarantinedKey::decode(&k).expect("?Q key");
            v.quarantined.insert((key.tenant.0, key.seq.0));
        }
        for (k, _) in index_family(read, Family::Active) {
            v.active
                .insert(ActiveKey::decode(&k).expect("?A key").tenant.0);
        }
        for (k, val) in index_family(read, Family::Counter) {
            let key = CounterKey::decode(&k).expect("?C key");
            let n = ankusa_keys::decode_counter_value(&val).expect("?C value");
            if n != 0 {
                v.counters.insert((key.tenant.0, key.field), n);
            }
        }
        v
    }

    /// Every row in ?D or ?F of `lane`, from the index families (not from ?H).
    pub fn lane_busy_rows(&self, lane: &LaneKey) -> Vec<RowId> {
        let in_lane =
            |id: &RowId| id.0 == lane.0 && self.rows.get(id).and_then(|r| r.lane) == Some(lane.1);
        self.due
            .keys()
            .chain(self.inflight.keys())
            .filter(|id| in_lane(id))
            .copied()
            .collect()
    }
}
