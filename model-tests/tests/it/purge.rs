//! The bounded tenant purge (`queue::purge_tenant_page`, docs/design.md
//! section 4; ADR 0004 section 4.9) on the states the state machine reaches:
//! after a random run of every transition on two tenants, tenant 1 is purged
//! page by page with a random page size. After every page
//! `queue::check_invariants` is clean (the node aggregate is the sum over
//! tenants); at the end no key of tenant 1 is left in any column family, the
//! aggregate equals tenant 2's counters, and tenant 2's keys and values are
//! byte for byte what they were.

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Cf, Direction, Durability, Kv, Read};
use ankusa_keys::{CounterField, TenantOrd, counter_key, tenant_ranges};
use ankusa_queue as queue;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::machine::{MAX_STEPS, Machine, cases, config};
use crate::steps::{Step, steps};

fn state(kv: &MemoryKv, tenant: TenantOrd) -> Vec<(Cf, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for (cf, range) in tenant_ranges(tenant) {
        for (k, v) in kv
            .scan(cf, &range, Direction::Forward, usize::MAX)
            .expect("scan")
        {
            out.push((cf, k.to_vec(), v.to_vec()));
        }
    }
    out
}

fn counters(kv: &MemoryKv, tenant: TenantOrd) -> Vec<i64> {
    CounterField::ALL
        .into_iter()
        .map(|f| kv.counter(&counter_key(tenant, f)).expect("counter"))
        .collect()
}

pub(crate) fn purge_after(steps: &[Step], limit: usize) -> Result<(), String> {
    let kv = MemoryKv::new();
    Machine::new(&kv)?.run(steps, |_, _| {})?;
    let (t1, t2) = (TenantOrd(1), TenantOrd(2));
    let other = state(&kv, t2);
    let mut cursor: Option<queue::Cursor> = None;
    for page_no in 0.. {
        if page_no > 10_000 {
            return Err("the purge does not end".into());
        }
        let page = queue::purge_tenant_page(&kv, t1, cursor.as_ref(), limit)
            .map_err(|e| format!("page {page_no}: {e}"))?;
        kv.write(page.batch, Durability::Buffered)
            .map_err(|e| format!("page {page_no}: write: {e}"))?;
        let v = queue::check_invariants(&kv.snapshot()).map_err(|e| e.to_string())?;
        if !v.is_empty() {
            return Err(format!(
                "after page {page_no} ({}): {v:?}",
                queue::purge_phase(cursor.as_ref())
            ));
        }
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    let left = state(&kv, t1);
    if !left.is_empty() {
        return Err(format!("tenant 1 left {} keys: {left:?}", left.len()));
    }
    if counters(&kv, TenantOrd::NODE) != counters(&kv, t2) {
        return Err(format!(
            "aggregate {:?} is not tenant 2's {:?}",
            counters(&kv, TenantOrd::NODE),
            counters(&kv, t2)
        ));
    }
    if state(&kv, t2) != other {
        return Err("tenant 2's state changed".into());
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(cases(256)))]

    #[test]
    fn a_paged_purge_keeps_every_invariant_and_leaves_nothing_of_the_tenant(
        steps in steps(MAX_STEPS),
        limit in prop_oneof![1..4usize, 4..64usize],
    ) {
        purge_after(&steps, limit).map_err(TestCaseError::fail)?;
    }
}
