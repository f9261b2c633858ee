//! Small, edge-biased value spaces, so that equal prefixes (and so the later
//! fields' order) and the ordinal edges come up often.

use ankusa_keys::{LaneId, Seq, SinkIx, SourceId, TenantOrd};
use proptest::collection::vec;
use proptest::prelude::*;

/// A real tenant ordinal (1..=u32::MAX - 1), edges included.
pub fn tenant() -> impl Strategy<Value = TenantOrd> {
    prop_oneof![
        1..4u32,
        Just(u32::MAX - 1),
        Just(u32::MAX - 2),
        Just(0x00ff_ffff),
        Just(0x0100_0000),
        1..u32::MAX,
    ]
    .prop_map(TenantOrd)
}

/// A counter ordinal: the node aggregate (0) or a real tenant.
pub fn counter_tenant() -> impl Strategy<Value = TenantOrd> {
    prop_oneof![Just(TenantOrd::NODE), tenant()]
}

/// A `u64` (times, seqs), edges included.
pub fn u64s() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..3u64,
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(255),
        Just(256),
        any::<u64>()
    ]
}

pub fn seq() -> impl Strategy<Value = Seq> {
    u64s().prop_map(Seq)
}

pub fn sink() -> impl Strategy<Value = SinkIx> {
    prop_oneof![0..3u16, Just(u16::MAX), Just(255), Just(256), any::<u16>()].prop_map(SinkIx)
}

pub fn source() -> impl Strategy<Value = SourceId> {
    prop_oneof![0..3u32, Just(u32::MAX), any::<u32>()].prop_map(SourceId)
}

pub fn lane() -> impl Strategy<Value = LaneId> {
    prop_oneof![
        Just([0u8; 16]),
        Just([0xff; 16]),
        Just([1u8; 16]),
        Just([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        any::<[u8; 16]>(),
    ]
    .prop_map(LaneId)
}

/// Bytes from a tiny alphabet (so prefixes collide) or arbitrary.
pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![vec(0..3u8, 0..4), vec(any::<u8>(), 0..max)]
}
