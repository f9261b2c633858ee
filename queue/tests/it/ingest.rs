//! init_store and ingest: the format and sentinels of a new store, and the rows,
//! members, markers and counters an ingest writes, unordered, ordered and keyless.

use crate::support::*;

#[test]
fn init_store_writes_sentinels_and_the_format() {
    let kv = store();
    for (cf, key) in sentinels() {
        assert!(
            kv.get(cf, &key).expect("get").is_some(),
            "sentinel {cf:?} missing"
        );
    }
    let raw = kv
        .get(Cf::Meta, ankusa_keys::FORMAT_KEY)
        .expect("get")
        .expect("format");
    assert_eq!(ankusa_keys::meta::decode_format(&raw).expect("decode"), 2);
    clean(&kv);
}

#[test]
fn ingest_of_unordered_sinks_puts_rows_due_now_with_the_active_marker() {
    let kv = store();
    let env = envelope(SRC, "hello", Some("evt_1"));
    let size = hook_size(&env);
    assert_eq!(size as usize, env.encode().len());
    let mut b = Batch::new();
    new_ops(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(1),
            envelope: &env,
            dedupe_expires_at_ms: NOW + 5,
        },
        &[plain(S0), plain(S1)],
        NOW,
    );
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d, map(&[(F::Pending, 2), (F::Bytes, 2 * i64::from(size))]));
    assert_eq!(
        keys(&kv, Family::Due, T1),
        vec![
            due_key(T1, NOW, Seq(1), S0).to_vec(),
            due_key(T1, NOW, Seq(1), S1).to_vec()
        ]
    );
    assert_eq!(
        due_value(&kv, T1, NOW, id(T1, 1, S0)),
        Some(DueValue {
            size,
            kind: DueKind::First
        })
    );
    assert_eq!(keys(&kv, Family::Active, T1), vec![active_key(T1).to_vec()]);
    assert!(keys(&kv, Family::LaneMember, T1).is_empty());
    let r = row(&kv, id(T1, 1, S1)).expect("row");
    assert_eq!(
        (r.state, r.size, r.attempts, r.lane),
        (RowState::Due, size, 0, None)
    );
    assert_eq!(
        Envelope::decode(
            &kv.get(Cf::Hooks, &hook_key(T1, Seq(1)))
                .expect("get")
                .expect("env")
        )
        .expect("decode"),
        env
    );
    assert!(
        kv.get(Cf::Archive, &archive_key(T1, NOW - 10, Seq(1)))
            .expect("get")
            .is_some()
    );
    let dd = kv
        .get(Cf::Index, &dedupe_key(T1, SRC, b"evt_1"))
        .expect("get")
        .expect("dedupe");
    assert_eq!(
        ankusa_keys::DedupeValue::decode(&dd).expect("decode"),
        ankusa_keys::DedupeValue {
            seq: Seq(1),
            expires_at_ms: NOW + 5
        }
    );
    clean(&kv);
}

#[test]
fn ingest_of_an_ordered_sink_makes_a_member_with_its_marker_and_no_due_row() {
    let kv = store();
    let env = envelope(SRC, "x", None);
    let mut b = Batch::new();
    new_ops(
        &mut b,
        &Hook {
            tenant: T1,
            seq: Seq(1),
            envelope: &env,
            dedupe_expires_at_ms: NOW,
        },
        &[laned(S0, "cust_1"), plain(S1)],
        NOW,
    );
    let size = i64::from(hook_size(&env));
    let d = commit_delta(&kv, T1, b);
    assert_eq!(
        d,
        map(&[(F::Pending, 2), (F::Bytes, 2 * size), (F::LaneMembers, 1)])
    );
    let lane = lane_of(S0, "cust_1");
    assert_eq!(
        keys(&kv, Family::LaneMember, T1),
        vec![lane_member_key(T1, lane, Seq(1), S0).to_vec()]
    );
    assert_eq!(
        keys(&kv, Family::LaneMarker, T1),
        vec![lane_marker_key(T1, lane).to_vec()]
    );
    assert_eq!(
        keys(&kv, Family::Due, T1),
        vec![due_key(T1, NOW, Seq(1), S1).to_vec()]
    );
    assert!(keys(&kv, Family::LaneHead, T1).is_empty());
    let r = row(&kv, id(T1, 1, S0)).expect("row");
    assert_eq!(r.state, RowState::Member);
    assert_eq!(r.lane, Some(lane));
    assert_eq!(r.ordering_key, Some(b"cust_1".to_vec()));
    clean(&kv);
}

#[test]
fn keyless_rows_share_the_sinks_keyless_lane_and_run_in_seq_order() {
    let kv = store();
    let keyless = || NewRow {
        sink: S0,
        lane: Some(assign(S0, SRC, None)),
    };
    let empty = NewRow {
        sink: S0,
        lane: Some(assign(S0, SRC, Some(b""))),
    };
    assert_eq!(keyless(), empty);
    let lane = ankusa_lanes::lane_id(S0, SRC, None);
    // Two hooks in one batch, as the Writer's group commit builds them.
    let (e1, e2) = (envelope(SRC, "a", None), envelope(SRC, "b", None));
    let mut b = Batch::new();
    for (seq, env) in [(1, &e1), (2, &e2)] {
        new_ops(
            &mut b,
            &Hook {
                tenant: T1,
                seq: Seq(seq),
                envelope: env,
                dedupe_expires_at_ms: NOW,
            },
            &[keyless()],
            NOW,
        );
    }
    let d = commit_delta(&kv, T1, b);
    assert_eq!(d.get(&F::LaneMembers), Some(&2));
    assert_eq!(row(&kv, id(T1, 1, S0)).expect("row").ordering_key, None);
    assert_eq!(row(&kv, id(T1, 2, S0)).expect("row").lane, Some(lane));
    assert_eq!(sweep(&kv, T1, NOW), 1);
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 1, S0)));
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S0), NOW).expect("claim"));
    commit(
        &kv,
        delivered(&kv, id(T1, 1, S0), NOW + 1).expect("delivered"),
    );
    assert_eq!(head_of(&kv, T1, lane), Some(id(T1, 2, S0)));
    clean(&kv);
}
