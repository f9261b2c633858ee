//! Quarantine: a held hook, its release into rows (a laned hook behind its
//! lane's head), its drop, and the paged list.

use crate::support::*;

#[test]
fn quarantine_holds_the_hook_and_release_builds_its_rows() {
    let kv = store();
    let env = envelope(SRC, "q", Some("evt_q"));
    let size = i64::from(hook_size(&env));
    let mut b = Batch::new();
    quarantine(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(4),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        "schema",
    );
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d, map(&[(F::Quarantined, 1)]));
    assert!(
        kv.get(Cf::Index, &quarantined_key(T1, Seq(4)))
            .expect("get")
            .is_some()
    );
    // A quarantined hook takes no part in dedupe: no ?K for its dedupe key.
    assert!(
        kv.get(Cf::Index, &dedupe_key(T1, SRC, b"evt_q"))
            .expect("get")
            .is_none()
    );
    assert!(row(&kv, id(T1, 4, S0)).is_none());
    clean(&kv);

    let b = release(&kv, T1, Seq(4), &[plain(S0), laned(S1, "k")], NOW + 1).expect("release");
    let d = commit_delta(&kv, T1, b);
    assert_eq!(
        d,
        map(&[
            (F::Quarantined, -1),
            (F::Pending, 2),
            (F::Bytes, 2 * size),
            (F::LaneMembers, 1)
        ])
    );
    assert_eq!(
        due_value(&kv, T1, NOW + 1, id(T1, 4, S0)).map(|v| v.size as i64),
        Some(size)
    );
    assert_eq!(
        row(&kv, id(T1, 4, S1)).expect("row").state,
        RowState::Member
    );
    clean(&kv);
    let err = release(&kv, T1, Seq(4), &[plain(S0)], NOW).expect_err("released");
    assert!(matches!(
        err,
        QueueError::NotQuarantined {
            tenant: T1,
            seq: Seq(4)
        }
    ));
}

#[test]
fn drop_quarantined_deletes_the_hook_and_list_quarantined_pages_in_seq_order() {
    let kv = store();
    for seq in [3, 5, 8] {
        hold_in_quarantine(&kv, T1, seq, &format!("reason {seq}"));
    }
    hold_in_quarantine(&kv, T2, 4, "other tenant");
    clean(&kv);
    let p = list_quarantined(&kv, T1, None, 2).expect("list");
    assert_eq!(
        p.hooks.iter().map(|h| h.seq.0).collect::<Vec<_>>(),
        vec![3, 5]
    );
    assert_eq!(p.next, Some(Seq(5)));
    assert_eq!(p.hooks[0].reason, "reason 3");
    assert_eq!(p.hooks[0].source, Some(SRC));
    assert_eq!(p.hooks[0].received_at_ms, Some(NOW - 97));
    assert_eq!(p.hooks[0].idempotency_key, Some([7; 16]));
    assert!(p.hooks[0].size_bytes > 0);
    let p = list_quarantined(&kv, T1, p.next, 2).expect("list");
    assert_eq!(p.hooks.iter().map(|h| h.seq.0).collect::<Vec<_>>(), vec![8]);
    assert_eq!(p.next, None);
    assert!(
        list_quarantined(&kv, T1, Some(Seq(u64::MAX)), 2)
            .expect("list")
            .hooks
            .is_empty()
    );

    let d = commit_delta(&kv, T1, drop_quarantined(&kv, T1, Seq(5)).expect("drop"));
    assert_eq!(d, map(&[(F::Quarantined, -1)]));
    assert!(
        kv.get(Cf::Hooks, &hook_key(T1, Seq(5)))
            .expect("get")
            .is_none()
    );
    assert!(
        kv.get(Cf::Archive, &archive_key(T1, NOW - 95, Seq(5)))
            .expect("get")
            .is_none()
    );
    assert!(
        kv.get(Cf::Index, &quarantined_key(T1, Seq(5)))
            .expect("get")
            .is_none()
    );
    clean(&kv);
    assert!(matches!(
        drop_quarantined(&kv, T1, Seq(5)),
        Err(QueueError::NotQuarantined {
            tenant: T1,
            seq: Seq(5)
        })
    ));
    assert!(matches!(
        release(&kv, T1, Seq(5), &[plain(S0)], NOW),
        Err(QueueError::NotQuarantined { .. })
    ));
    // A released hook cannot be dropped; its envelope stays for its rows.
    commit(
        &kv,
        release(&kv, T1, Seq(3), &[plain(S0)], NOW).expect("release"),
    );
    assert!(matches!(
        drop_quarantined(&kv, T1, Seq(3)),
        Err(QueueError::NotQuarantined { .. })
    ));
    clean(&kv);
    assert_eq!(
        list_quarantined(&kv, T1, None, 10)
            .expect("list")
            .hooks
            .len(),
        1
    );
    assert_eq!(
        list_quarantined(&kv, T2, None, 10)
            .expect("list")
            .hooks
            .len(),
        1
    );
}

/// A released laned hook keeps its seq and joins its lane as a member behind
/// the current head (ADR 4.8), before a later member still waiting.
#[test]
fn a_released_laned_hook_joins_its_lane_behind_the_head_before_later_members() {
    let kv = store();
    hold_in_quarantine(&kv, T1, 2, "source under quarantine");
    ingest(&kv, T1, 1, &[laned(S0, "k")]);
    ingest(&kv, T1, 3, &[laned(S0, "k")]);
    ingest(&kv, T1, 4, &[laned(S0, "k")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        release(&kv, T1, Seq(2), &[laned(S0, "k")], NOW).expect("release"),
    );
    clean(&kv);
    commit(&kv, delivered(&kv, id(T1, 1, S0), NOW).expect("delivered"));
    assert_eq!(head_of(&kv, T1, lane_of(S0, "k")), Some(id(T1, 2, S0)));
    clean(&kv);
}
