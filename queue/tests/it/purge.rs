//! Purging a tenant: purge_tenant in one batch and purge_tenant_page page by
//! page, every family and counter gone and the aggregate fixed.

use crate::support::*;

#[test]
fn purge_tenant_removes_every_family_and_counter_and_fixes_the_aggregate() {
    let kv = store();
    // Tenant 1: a busy lane with a blocked head and members, an unordered row, a
    // dead row, a quarantined hook, a dedupe record.
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k"), plain(S1)]);
    ingest(&kv, T1, 3, &[laned(S0, "j")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 5, "x", NOW).expect("retry"),
    );
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S1), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 2, S1), Origin::InFlight, "x", NOW).expect("dead"),
    );
    let env = envelope(SRC, "q", Some("evt"));
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(9),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        "r",
    );
    commit(&kv, b);
    // Tenant 2: one unordered row.
    ingest(&kv, T2, 5, &[plain(S0)]);
    clean(&kv);
    let c1 = counters(&kv, T1);
    assert_eq!(c1.get(&F::Lanes), Some(&2));
    assert_eq!(c1.get(&F::LanesBlocked), Some(&1));
    assert_eq!(c1.get(&F::LaneMembers), Some(&1));

    commit(&kv, purge_tenant(&kv, T1).expect("purge"));
    for family in Family::ALL {
        assert!(
            keys(&kv, family, T1).is_empty(),
            "{family:?} of tenant 1 survived"
        );
    }
    for (cf, range) in ankusa_keys::tenant_ranges(T1) {
        assert!(
            kv.scan(cf, &range, Direction::Forward, 1)
                .expect("scan")
                .is_empty(),
            "{cf:?}"
        );
    }
    assert!(counters(&kv, T1).is_empty());
    assert_eq!(counters(&kv, TenantOrd::NODE), counters(&kv, T2));
    assert_eq!(keys(&kv, Family::Due, T2).len(), 1);
    // Sentinels survive.
    for (cf, key) in sentinels() {
        assert!(kv.get(cf, &key).expect("get").is_some());
    }
    clean(&kv);
}

/// Every key and value of `tenant` in every column family.
fn tenant_state(kv: &MemoryKv, tenant: TenantOrd) -> Vec<(Cf, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for (cf, range) in ankusa_keys::tenant_ranges(tenant) {
        for (k, v) in kv
            .scan(cf, &range, Direction::Forward, 100_000)
            .expect("scan")
        {
            out.push((cf, k.to_vec(), v.to_vec()));
        }
    }
    out
}

/// Tenant 1 with every kind of state: a lane with a blocked head and a
/// member, a lane whose head is in flight with a member behind it, a held
/// row (paused sink), an unordered due row, a dead row, a quarantined hook,
/// dedupe records; tenant 2 with an unordered row and a dead one.
fn busy_store() -> MemoryKv {
    let kv = store();
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 2, &[laned(S0, "k"), plain(S1)]);
    ingest(&kv, T1, 3, &[laned(S0, "j")]);
    ingest(&kv, T1, 4, &[laned(S0, "j")]);
    ingest_dedupe(&kv, 5, "evt_5", &[plain(S0), plain(S1)]);
    sweep(&kv, T1, NOW);
    // Lane k: head 1 retried (kind 3, blocked), member 2.
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S0), NOW + 5, "x", NOW).expect("retry"),
    );
    // Lane j: head 3 in flight, member 4.
    commit(&kv, claim(&kv, dk(T1, NOW, 3, S0), NOW).expect("claim"));
    // Hook 2's unordered row dead; hook 5's row for S1 held.
    commit(&kv, claim(&kv, dk(T1, NOW, 2, S1), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 2, S1), Origin::InFlight, "x", NOW).expect("dead"),
    );
    commit(&kv, hold(&kv, dk(T1, NOW, 5, S1)).expect("hold"));
    hold_in_quarantine(&kv, T1, 9, "source under quarantine");
    ingest(&kv, T2, 6, &[plain(S0)]);
    ingest(&kv, T2, 7, &[plain(S1)]);
    commit(&kv, claim(&kv, dk(T2, NOW, 7, S1), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T2, 7, S1), Origin::InFlight, "x", NOW).expect("dead"),
    );
    clean(&kv);
    kv
}

/// The bounded purge, one page at a time with pages of 1, 2, 3 and 1000
/// entries: check_invariants is clean and the aggregate is the sum over
/// tenants after every page; at the end no key of tenant 1 is left in any
/// column family, the aggregate equals tenant 2's counters, and tenant 2's
/// state is byte for byte what it was.
#[test]
fn purge_tenant_page_keeps_every_invariant_after_each_page_and_leaves_nothing() {
    for limit in [1, 2, 3, 1000] {
        let kv = busy_store();
        let c1 = counters(&kv, T1);
        assert_eq!(
            (
                c1.get(&F::Lanes),
                c1.get(&F::LanesBlocked),
                c1.get(&F::LaneMembers),
                c1.get(&F::InFlight)
            ),
            (Some(&2), Some(&1), Some(&2), Some(&1)),
            "{c1:?}"
        );
        let other = tenant_state(&kv, T2);
        let mut cursor: Option<Cursor> = None;
        let mut pages = 0;
        let mut moved = 0;
        let mut phases = Vec::new();
        loop {
            phases.push(purge_phase(cursor.as_ref()));
            let page = purge_tenant_page(&kv, T1, cursor.as_ref(), limit).expect("page");
            moved += page.moved;
            assert!(
                page.moved <= limit,
                "a page of {limit} moved {}",
                page.moved
            );
            commit(&kv, page.batch);
            pages += 1;
            clean(&kv);
            // The round trip an admin job's state makes.
            cursor = page
                .next
                .map(|c| Cursor::from_bytes(&c.to_bytes()).expect("cursor"));
            if cursor.is_none() {
                break;
            }
            assert!(pages < 500, "the purge does not end");
        }
        // 6 pending rows (2 members, 1 in flight, 3 due, the held one
        // included) + 1 dead + 1 quarantined hook.
        assert_eq!(moved, 8, "limit {limit}");
        assert_eq!(phases.first(), Some(&"lane members"));
        assert_eq!(phases.last(), Some(&"counters"));
        assert!(
            tenant_state(&kv, T1).is_empty(),
            "limit {limit}: {:?}",
            tenant_state(&kv, T1)
        );
        assert!(counters(&kv, T1).is_empty());
        assert_eq!(counters(&kv, TenantOrd::NODE), counters(&kv, T2));
        assert_eq!(tenant_state(&kv, T2), other, "tenant 2 changed");
        for (cf, key) in sentinels() {
            assert!(kv.get(cf, &key).expect("get").is_some(), "a sentinel went");
        }
    }
}
