//! Replay: an archive replay's copy under a new seq, without a dedupe record.

use crate::support::*;

/// An archive replay's copy: a new seq, the original's idempotency key and
/// received time, rows as at ingest (a laned row a member behind the lane's
/// head), and no dedupe record (the original's stays as it is).
#[test]
fn replay_copies_a_hook_under_a_new_seq_without_a_dedupe_record() {
    let kv = store();
    ingest_dedupe(&kv, 1, "evt_1", &[laned(S0, "cust_1")]);
    sweep(&kv, T1, NOW);
    let raw = kv
        .get(Cf::Hooks, &hook_key(T1, Seq(1)))
        .expect("get")
        .expect("envelope");
    let mut copy = Envelope::decode(&raw).expect("decode");
    copy.replay_of = Some(Seq(1));
    let mut b = Batch::new();
    replay(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(2),
            envelope: &copy,
            dedupe_expires_at_ms: 0,
        },
        &[laned(S0, "cust_1")],
        NOW + 1,
    );
    let d = commit_delta(&kv, T1, b);
    let size = i64::from(hook_size(&copy));
    assert_eq!(
        d,
        map(&[(F::Pending, 1), (F::Bytes, size), (F::LaneMembers, 1)])
    );
    let stored = Envelope::decode(
        &kv.get(Cf::Hooks, &hook_key(T1, Seq(2)))
            .expect("get")
            .expect("copy"),
    )
    .expect("decode");
    assert_eq!(stored, copy);
    assert!(has(
        &kv,
        Cf::Archive,
        &archive_key(T1, copy.received_at_ms, Seq(2))
    ));
    assert_eq!(
        row(&kv, id(T1, 2, S0)).expect("row").state,
        RowState::Member
    );
    let v = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt_1"))
        .expect("get")
        .expect("record");
    assert_eq!(
        DedupeValue::decode(&v).expect("decode").seq,
        Seq(1),
        "the copy rewrote the dedupe record"
    );
    clean(&kv);
}
