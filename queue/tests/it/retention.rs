//! Retention: unreferenced envelopes before the cutoff, a hook no sink took,
//! and expired dedupe records, in pages.

use crate::support::*;

#[test]
fn retention_deletes_only_unreferenced_envelopes_before_the_cutoff() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]); // delivered below
    ingest(&kv, T1, 2, &[plain(S0)]); // still pending
    let env = envelope(SRC, "q", None);
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(3),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        "r",
    );
    commit(&kv, b);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(&kv, delivered(&kv, id(T1, 1, S0), NOW).expect("delivered"));

    // Nothing is older than a cutoff at receive time.
    let p = retention(&kv, T1, NOW - 10, None, 10).expect("retention");
    assert_eq!(
        (p.moved, p.batch.is_empty(), p.next.is_none()),
        (0, true, true)
    );

    let mut cursor = None;
    let mut moved = 0;
    loop {
        let p = retention(&kv, T1, NOW, cursor.as_ref(), 1).expect("retention");
        moved += p.moved;
        commit(&kv, p.batch);
        match p.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(moved, 1);
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(1)))
            .expect("get")
            .is_none()
    );
    assert!(
        kv.get(Cf::Archive, &archive_key(T1, NOW - 10, Seq(1)))
            .expect("get")
            .is_none()
    );
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(2)))
            .expect("get")
            .is_some()
    );
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(3)))
            .expect("get")
            .is_some()
    );
    clean(&kv);
}

/// A hook no sink's filter took (docs/design.md section 10, "Filters per
/// sink"): the edge passes no row. Its envelope, archive entry and dedupe
/// record are committed, no counter moves but none is wrong, and retention
/// deletes it like a delivered hook. A release with no row only ends the
/// quarantine.
#[test]
fn a_hook_with_no_row_is_stored_deduped_and_reclaimed_by_retention() {
    let kv = store();
    ingest_dedupe(&kv, 1, "evt_filtered", &[]);
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(1)))
            .expect("get")
            .is_some()
    );
    assert!(
        kv.get(Cf::Archive, &archive_key(T1, NOW - 10, Seq(1)))
            .expect("get")
            .is_some()
    );
    let d = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt_filtered"))
        .expect("get")
        .expect("?K");
    assert_eq!(DedupeValue::decode(&d).expect("decode").seq, Seq(1));
    assert!(
        counters(&kv, T1).values().all(|v| *v == 0),
        "{:?}",
        counters(&kv, T1)
    );
    assert!(
        keys(&kv, Family::Active, T1).is_empty(),
        "no ?A without a due row"
    );
    clean(&kv);

    let env = envelope(SRC, "q", None);
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(2),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        "r",
    );
    commit(&kv, b);
    let d = commit_delta(
        &kv,
        T1,
        release(&kv, T1, Seq(2), &[], NOW).expect("release"),
    );
    assert_eq!(d, map(&[(F::Quarantined, -1)]));
    clean(&kv);

    let p = retention(&kv, T1, NOW, None, 10).expect("retention");
    assert_eq!(p.moved, 2);
    commit(&kv, p.batch);
    for seq in [1, 2] {
        assert!(
            kv.get(Cf::Hooks, &hook_key(T1, Seq(seq)))
                .expect("get")
                .is_none()
        );
        assert!(
            kv.get(Cf::Archive, &archive_key(T1, NOW - 10, Seq(seq)))
                .expect("get")
                .is_none()
        );
    }
    clean(&kv);
}

#[test]
fn expire_dedupe_deletes_only_expired_records_in_pages() {
    let kv = store();
    let mut b = Batch::new();
    for (i, expires) in [NOW - 1, NOW, NOW + 1, NOW - 5].into_iter().enumerate() {
        b.put(
            Cf::Index,
            dedupe_key(T1, SRC, format!("evt_{i}").as_bytes()),
            ankusa_keys::DedupeValue {
                seq: Seq(i as u64),
                expires_at_ms: expires,
            }
            .encode(),
        );
    }
    b.put(
        Cf::Index,
        dedupe_key(T2, SRC, b"evt_0"),
        ankusa_keys::DedupeValue {
            seq: Seq(9),
            expires_at_ms: 0,
        }
        .encode(),
    );
    commit(&kv, b);
    let mut cursor = None;
    let mut deleted = 0;
    for _ in 0..10 {
        let p = expire_dedupe(&kv, T1, NOW, cursor.as_ref(), 1).expect("expire");
        deleted += p.moved;
        commit(&kv, p.batch);
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(deleted, 3);
    assert_eq!(
        keys(&kv, Family::Dedupe, T1).len(),
        1,
        "the unexpired record stays"
    );
    assert!(
        kv.get(Cf::Index, &dedupe_key(T1, SRC, b"evt_2"))
            .expect("get")
            .is_some()
    );
    assert_eq!(
        keys(&kv, Family::Dedupe, T2).len(),
        1,
        "another tenant's records stay"
    );
}
