//! Keys of cfs `hooks`, `deliveries` and `archive`.

use ankusa_engine::{Cf, KeyRange};
use ankusa_keys::rows::{ARCHIVE_KEY_LEN, DELIVERY_KEY_LEN, HOOK_KEY_LEN};
use ankusa_keys::*;
use proptest::prelude::*;

use crate::strategies::*;

/// The sentinel of `cf`, from [`sentinels`].
fn sentinel(cf: Cf) -> Vec<u8> {
    let found: Vec<Vec<u8>> = sentinels()
        .into_iter()
        .filter(|(c, _)| *c == cf)
        .map(|(_, k)| k)
        .collect();
    assert_eq!(found.len(), 1, "one sentinel in {cf:?}");
    found.into_iter().next().unwrap_or_default()
}

fn with_ord(key: &[u8], ord: u32) -> Vec<u8> {
    let mut k = key.to_vec();
    k[..4].copy_from_slice(&ord.to_be_bytes());
    k
}

/// The tests every cf keyed by ordinal gets.
macro_rules! row_family {
    ($name:ident, $cf:expr, $ty:ident, $len:expr, $what:expr, $all:expr, $per_tenant:expr, $strategy:expr, $tuple:expr) => {
        mod $name {
            use super::*;

            proptest! {
                #[test]
                fn decode_of_encode_is_identity(k in $strategy) {
                    let bytes = k.encode();
                    prop_assert_eq!(bytes.len(), $len);
                    prop_assert_eq!($ty::decode(&bytes), Ok(k));
                }

                #[test]
                fn byte_order_is_tuple_order(a in $strategy, b in $strategy) {
                    let tuple = $tuple;
                    prop_assert_eq!(a.encode().cmp(&b.encode()), tuple(&a).cmp(&tuple(&b)));
                }

                #[test]
                fn tenant_range_holds_exactly_the_tenant(k in $strategy) {
                    let per_tenant: fn(TenantOrd) -> KeyRange = $per_tenant;
                    let all: fn() -> KeyRange = $all;
                    let range = per_tenant(k.tenant);
                    prop_assert!(range.contains(&k.encode()));
                    prop_assert!(all().contains(&k.encode()));
                    if k.tenant.0 > TenantOrd::FIRST.0 {
                        let before = $ty { tenant: TenantOrd(k.tenant.0 - 1), ..k };
                        prop_assert!(!range.contains(&before.encode()));
                    }
                    if k.tenant.0 < TenantOrd::LAST.0 {
                        let after = $ty { tenant: TenantOrd(k.tenant.0 + 1), ..k };
                        prop_assert!(!range.contains(&after.encode()));
                    }
                    // No key with the sentinel's ordinal is in any range.
                    let reserved = with_ord(&k.encode(), u32::MAX);
                    prop_assert!(!all().contains(&reserved));
                    prop_assert!(!range.contains(&reserved));
                    let s = sentinel($cf);
                    prop_assert!(!range.contains(&s));
                    prop_assert!(!all().contains(&s));
                    prop_assert!(k.encode().as_slice() < s.as_slice());
                }

                #[test]
                fn decode_rejects_what_is_not_a_key(k in $strategy) {
                    let key = k.encode();
                    let reserved = |ord| Err(KeyError::ReservedOrdinal { what: $what, ord });
                    prop_assert_eq!($ty::decode(&with_ord(&key, 0)), reserved(0));
                    prop_assert_eq!($ty::decode(&with_ord(&key, u32::MAX)), reserved(u32::MAX));
                    let wrong = |found| Err(KeyError::WrongLength { what: $what, expected: $len, found });
                    prop_assert_eq!($ty::decode(&key[..$len - 1]), wrong($len - 1));
                    let mut longer = key.to_vec();
                    longer.push(0);
                    prop_assert_eq!($ty::decode(&longer), wrong($len + 1));
                    prop_assert_eq!($ty::decode(&sentinel($cf)), reserved(u32::MAX));
                }
            }
        }
    };
}

row_family!(
    hook,
    Cf::Hooks,
    HookKey,
    HOOK_KEY_LEN,
    "hooks",
    hooks_range,
    hooks_tenant_range,
    (tenant(), seq()).prop_map(|(tenant, seq)| HookKey { tenant, seq }),
    |k: &HookKey| (k.tenant.0, k.seq.0)
);

row_family!(
    delivery,
    Cf::Deliveries,
    DeliveryKey,
    DELIVERY_KEY_LEN,
    "deliveries",
    deliveries_range,
    deliveries_tenant_range,
    (tenant(), seq(), sink()).prop_map(|(tenant, seq, sink)| DeliveryKey { tenant, seq, sink }),
    |k: &DeliveryKey| (k.tenant.0, k.seq.0, k.sink.0)
);

row_family!(
    archive,
    Cf::Archive,
    ArchiveKey,
    ARCHIVE_KEY_LEN,
    "archive",
    archive_range,
    archive_tenant_range,
    (tenant(), u64s(), seq()).prop_map(|(tenant, received_at_ms, seq)| ArchiveKey {
        tenant,
        received_at_ms,
        seq
    }),
    |k: &ArchiveKey| (k.tenant.0, k.received_at_ms, k.seq.0)
);

proptest! {
    #[test]
    fn a_hooks_rows_range_holds_exactly_its_rows(t in tenant(), s in seq(), sink in sink()) {
        let range = deliveries_of_hook_range(t, s);
        prop_assert!(range.contains(&delivery_key(t, s, sink)));
        prop_assert!(range.contains(&delivery_key(t, s, SinkIx(0))));
        prop_assert!(range.contains(&delivery_key(t, s, SinkIx(u16::MAX))));
        if let Some(next) = s.0.checked_add(1) {
            prop_assert!(!range.contains(&delivery_key(t, Seq(next), SinkIx(0))));
        }
        if let Some(prev) = s.0.checked_sub(1) {
            prop_assert!(!range.contains(&delivery_key(t, Seq(prev), SinkIx(u16::MAX))));
        }
        if t.0 < TenantOrd::LAST.0 {
            prop_assert!(!range.contains(&delivery_key(TenantOrd(t.0 + 1), s, sink)));
        }
        prop_assert!(!range.contains(&sentinel(Cf::Deliveries)));
    }

    #[test]
    fn archive_time_range_is_half_open(t in tenant(), from in u64s(), until in u64s(), s in seq()) {
        let range = archive_time_range(t, from, until);
        prop_assert!(range.start <= range.end);
        prop_assert_eq!(range.contains(&archive_key(t, from, s)), from < until);
        prop_assert!(!range.contains(&archive_key(t, until, Seq(0))));
        if until > from {
            prop_assert!(range.contains(&archive_key(t, until - 1, Seq(u64::MAX))));
        }
        if let Some(before) = from.checked_sub(1) {
            prop_assert!(!range.contains(&archive_key(t, before, Seq(u64::MAX))));
        }
        if t.0 < TenantOrd::LAST.0 {
            prop_assert!(!range.contains(&archive_key(TenantOrd(t.0 + 1), from, s)));
        }
    }
}

#[test]
#[should_panic(expected = "reserved tenant ordinal")]
fn building_a_hook_key_with_the_node_ordinal_panics() {
    let _ = hook_key(TenantOrd::NODE, Seq(1));
}

#[test]
#[should_panic(expected = "reserved tenant ordinal")]
fn a_deliveries_range_of_the_sentinel_ordinal_panics() {
    let _ = deliveries_tenant_range(TenantOrd(u32::MAX));
}
