//! Sentinels (docs/design.md section 3; ADR 0004 section 3 adds those of ?O, ?H, ?P).
//!
//! Each scanned family has one key above every real key of the family, written
//! (with an empty value) when a store is created and never deleted. A bounded
//! scan over a family whose tail is all tombstones (a queue's deleted heads, as
//! in ?D and ?O) then stops on a live key instead of walking the tombstones into
//! the next family.
//!
//! A sentinel carries the reserved ordinal `u32::MAX` followed by `0xff` up to
//! the family's full key width, so it sorts above every real key (whose ordinal
//! is at most `u32::MAX - 1`) and below the next family byte. Every range this
//! crate builds ends at or below `family, u32::MAX`, so no range contains a
//! sentinel, and every decoder refuses the reserved ordinal.
//!
//! Sentinels exist for every index family but ?C (counters are read by point
//! gets and are deleted only by a tenant purge's range delete: no tombstone
//! tail; and a sentinel there would be a counter key whose value is not an
//! `i64`) and ?L (the attempt log is read only within one hook's or one row's
//! prefix, whose end bounds the scan, a row's newest entries first; no scan
//! walks the family as a queue; and a store made before the family has no
//! sentinel for it), and for cfs `hooks`, `deliveries` and `archive`. cf
//! `meta` has none.

use ankusa_engine::Cf;

use crate::index::Family;
use crate::rows::{ARCHIVE_KEY_LEN, DELIVERY_KEY_LEN, HOOK_KEY_LEN};

/// The value stored under every sentinel: empty.
pub const SENTINEL_VALUE: [u8; 0] = [];

/// The index families that have a sentinel: all but ?C, ?S and ?L (read by
/// point gets or by the ranges of one hook only).
pub const SENTINEL_FAMILIES: [Family; 9] = [
    Family::Due,
    Family::InFlight,
    Family::Active,
    Family::LaneMember,
    Family::LaneHead,
    Family::LaneMarker,
    Family::DeadLetter,
    Family::Quarantined,
    Family::Dedupe,
];

/// The sentinel of an index family: the family byte, then `0xff` for the rest
/// of the family's key width (for ?K, its fixed part: ordinal and source).
/// `None` for ?C, ?S and ?L, which have none.
pub fn family_sentinel(family: Family) -> Option<Vec<u8>> {
    if !SENTINEL_FAMILIES.contains(&family) {
        return None;
    }
    let mut key = vec![0xff; family.key_len()];
    key[0] = family.as_byte();
    Some(key)
}

/// Every sentinel a new store holds, as `(cf, key)`; write each with
/// [`SENTINEL_VALUE`] in the batch that creates the store.
pub fn sentinels() -> Vec<(Cf, Vec<u8>)> {
    let mut all: Vec<(Cf, Vec<u8>)> = SENTINEL_FAMILIES
        .into_iter()
        .filter_map(family_sentinel)
        .map(|key| (Cf::Index, key))
        .collect();
    all.push((Cf::Hooks, vec![0xff; HOOK_KEY_LEN]));
    all.push((Cf::Deliveries, vec![0xff; DELIVERY_KEY_LEN]));
    all.push((Cf::Archive, vec![0xff; ARCHIVE_KEY_LEN]));
    all
}

/// True when `key` in `cf` is one of the [`sentinels`] (for tools that walk a
/// whole column family, such as export and the store check).
pub fn is_sentinel(cf: Cf, key: &[u8]) -> bool {
    match cf {
        Cf::Meta => false,
        Cf::Hooks => key == [0xff; HOOK_KEY_LEN],
        Cf::Deliveries => key == [0xff; DELIVERY_KEY_LEN],
        Cf::Archive => key == [0xff; ARCHIVE_KEY_LEN],
        Cf::Index => key
            .first()
            .and_then(|b| Family::from_byte(*b).ok())
            .and_then(family_sentinel)
            .is_some_and(|s| s == key),
    }
}
