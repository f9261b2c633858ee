//! What the ingest path reads before a commit (`ankusa_queue::is_purging`,
//! `live_dedupe`, `hook_size`): the edge's pre-check and the Writer's decision
//! read through these, so both follow one rule.

use crate::support::*;

#[test]
fn a_purge_mark_is_read_for_its_tenant_only() {
    let kv = store();
    assert!(!is_purging(&kv, T1).expect("read"));
    let mut b = Batch::new();
    set_purge(&mut b, T1, 7);
    commit(&kv, b);
    assert!(is_purging(&kv, T1).expect("read"));
    assert!(!is_purging(&kv, T2).expect("read"));
    let mut b = Batch::new();
    clear_purge(&mut b, T1);
    commit(&kv, b);
    assert!(!is_purging(&kv, T1).expect("read"));
}

#[test]
fn a_dedupe_record_is_live_until_it_expires() {
    let kv = store();
    let env = envelope(SRC, "body", Some("evt_1"));
    assert_eq!(
        live_dedupe(&kv, T1, SRC, b"evt_1", NOW).expect("read"),
        None
    );
    let mut b = Batch::new();
    new_ops(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(3),
            envelope: &env,
            dedupe_expires_at_ms: NOW + 10,
        },
        &[plain(S0)],
        NOW,
    );
    commit(&kv, b);
    assert_eq!(
        live_dedupe(&kv, T1, SRC, b"evt_1", NOW + 9).expect("read"),
        Some(Seq(3))
    );
    // It expires at its `expires_at_ms`: a hook then is a new hook.
    assert_eq!(
        live_dedupe(&kv, T1, SRC, b"evt_1", NOW + 10).expect("read"),
        None
    );
    // Another key, source or tenant is not a hit.
    assert_eq!(
        live_dedupe(&kv, T1, SRC, b"evt_2", NOW).expect("read"),
        None
    );
    assert_eq!(
        live_dedupe(&kv, T1, SourceId(11), b"evt_1", NOW).expect("read"),
        None
    );
    assert_eq!(
        live_dedupe(&kv, T2, SRC, b"evt_1", NOW).expect("read"),
        None
    );
}

#[test]
fn a_dedupe_record_that_does_not_decode_is_an_error_not_a_new_hook() {
    let kv = store();
    let mut b = Batch::new();
    b.put(Cf::Index, dedupe_key(T1, SRC, b"evt_1"), vec![1, 2, 3]);
    commit(&kv, b);
    assert!(matches!(
        live_dedupe(&kv, T1, SRC, b"evt_1", NOW),
        Err(QueueError::Value(_))
    ));
}

#[test]
fn the_size_a_row_counts_is_the_stored_envelope_length() {
    let env = envelope(SRC, "a body of some length", Some("evt_1"));
    let size = hook_size(&env);
    assert_eq!(size as usize, env.encode().len());
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0), plain(S1)]);
    let stored = kv
        .get(Cf::Hooks, &hook_key(T1, Seq(1)))
        .expect("get")
        .expect("envelope");
    // Each of the hook's two rows counts the stored envelope's length.
    assert_eq!(counters(&kv, T1)[&F::Bytes], 2 * stored.len() as i64);
}
