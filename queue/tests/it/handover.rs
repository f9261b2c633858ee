//! A cluster's hand-over of a drained tenant's remains (docs/design.md
//! section 11, "Hand-over"): pages read on the old node, written and read
//! back in the dump format, adopted by the owner under its own seqs and sink
//! slots, then deleted on the old node; both stores clean after every page.

use ankusa_engine::dump::{DumpWriter, Header, read_records};
use ankusa_keys::meta::{encode_sink_names, source_sinks_key};
use ankusa_queue::handover::{
    Adopted, HandoverError, Record, adopt, handed_over, handover_page, holds_remains,
};

use crate::support::*;

fn sinks(kv: &MemoryKv, names: &[&str]) {
    let mut b = Batch::new();
    b.put(Cf::Meta, source_sinks_key(SRC), encode_sink_names(names));
    commit(kv, b);
}

/// The page's records through the dump format, as the owner reads them off
/// the wire.
fn through_dump(records: &[Record]) -> Vec<Record> {
    let mut bytes = Vec::new();
    let mut w = DumpWriter::new(
        Header {
            dump_version: ankusa_engine::dump::DUMP_VERSION,
            store_format: 2,
            backend: "memory".into(),
        },
        &mut bytes,
    )
    .expect("header");
    for (cf, k, v) in records {
        w.record(*cf, k, v).expect("record");
    }
    w.finish().expect("trailer");
    let mut back = Vec::new();
    read_records(bytes.as_slice(), b"origin", &mut |r| {
        back.push((r.cf, r.key.to_vec(), r.value.to_vec()));
        Ok(())
    })
    .expect("the dump reads back");
    back
}

/// The old node's store: hook 1 with dedupe key `d1` delivered (archive
/// only), 2 with dedupe key `d2` dead-lettered on `u`, 3 dead-lettered as
/// the head of key k3's lane on `o`, 4 quarantined (no dedupe record, as
/// quarantine writes none), and a dedupe record `gone` whose hook retention
/// removed.
fn old_node() -> MemoryKv {
    let kv = store();
    sinks(&kv, &["o", "u"]);
    ingest_dedupe(&kv, 1, "d1", &[plain(S1)]);
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S1), NOW).expect("claim"));
    commit(&kv, delivered(&kv, id(T1, 1, S1), NOW).expect("delivered"));
    ingest_dedupe(&kv, 2, "d2", &[plain(S1)]);
    kill(&kv, 2, S1);
    ingest(&kv, T1, 3, &[laned(S0, "k3")]);
    sweep(&kv, T1, NOW);
    commit(&kv, claim(&kv, dk(T1, NOW, 3, S0), NOW).expect("claim"));
    commit(
        &kv,
        dead_letter(&kv, id(T1, 3, S0), Origin::InFlight, "HTTP 422", NOW).expect("dead"),
    );
    hold_in_quarantine(&kv, T1, 4, "bad signature");
    let mut b = Batch::new();
    b.put(
        Cf::Index,
        dedupe_key(T1, SRC, b"gone"),
        DedupeValue {
            seq: Seq(99),
            expires_at_ms: NOW + 5_000,
        }
        .encode()
        .to_vec(),
    );
    commit(&kv, b);
    clean(&kv);
    kv
}

/// The owner's store: its own hooks 1..=3 of the tenant (the seqs collide
/// with the old node's), its own record for `d2`, and a retired slot before
/// `o` and `u` (its slots differ from the old node's).
fn owner() -> MemoryKv {
    let kv = store();
    sinks(&kv, &["~old", "o", "u"]);
    ingest_dedupe(&kv, 1, "d2", &[plain(SinkIx(2))]);
    ingest(&kv, T1, 2, &[plain(SinkIx(2))]);
    ingest(&kv, T1, 3, &[plain(SinkIx(2))]);
    kv
}

#[test]
fn a_drained_tenants_remains_move_to_the_owner_under_its_seqs_and_slots() {
    let old = old_node();
    let new = owner();
    let before = counters(&new, T1);
    let mut next = 4u64;
    let mut from = Seq(0);
    let mut total = Adopted::default();
    let mut pages = 0;
    loop {
        let page = handover_page(&old, T1, from, 2, 1 << 20).expect("page");
        pages += 1;
        let mut b = Batch::new();
        let got = adopt(&new, &mut b, T1, &through_dump(&page.records), &mut next).expect("adopt");
        commit(&new, b);
        clean(&new);
        commit(
            &old,
            handed_over(&old, T1, &page.seqs, &page.dedupe).expect("delete"),
        );
        clean(&old);
        total.hooks += got.hooks;
        total.dead += got.dead;
        total.quarantined += got.quarantined;
        total.dedupe += got.dedupe;
        match page.next {
            Some(s) => from = s,
            None => break,
        }
    }
    assert_eq!(pages, 2, "four hooks in pages of two");
    // A byte bound of one byte: one hook per page, whatever the limit.
    let again = old_node();
    let page = handover_page(&again, T1, Seq(0), 100, 1).expect("page");
    assert_eq!(
        (page.seqs.as_slice(), page.next),
        (&[Seq(1)][..], Some(Seq(2)))
    );
    assert_eq!(
        total,
        Adopted {
            hooks: 4,
            dead: 2,
            quarantined: 1,
            // d1 (with its hook) and gone (without); d2 was the owner's.
            dedupe: 2,
        }
    );
    assert_eq!(next, 8, "the owner's seqs 4..=7");
    // Nothing of the tenant is left on the old node.
    assert!(!holds_remains(&old, T1).expect("read"));
    let left = counters(&old, T1);
    for f in [F::Pending, F::Dead, F::DeadBytes, F::Quarantined] {
        assert_eq!(left.get(&f).copied().unwrap_or(0), 0, "{f:?}");
    }
    // The owner: the dead letters under its seqs and its slots of `u`
    // (slot 2) and `o` (slot 1), k3's lane recomputed for its slot.
    let after = counters(&new, T1);
    let moved = |f: F| after.get(&f).copied().unwrap_or(0) - before.get(&f).copied().unwrap_or(0);
    assert_eq!(moved(F::Dead), 2);
    assert_eq!(moved(F::Quarantined), 1);
    assert_eq!(moved(F::Pending), 0, "nothing new to deliver");
    assert!(has(
        &new,
        Cf::Index,
        &dead_letter_key(T1, Seq(5), SinkIx(2))
    ));
    assert!(has(
        &new,
        Cf::Index,
        &dead_letter_key(T1, Seq(6), SinkIx(1))
    ));
    let k3 = row(&new, id(T1, 6, SinkIx(1))).expect("row");
    assert_eq!(k3.state, RowState::Dead);
    assert_eq!(
        k3.lane,
        Some(ankusa_lanes::lane_id(SinkIx(1), SRC, Some(b"k3")))
    );
    assert_eq!(k3.last_error, row_error_of_k3());
    assert!(has(&new, Cf::Index, &quarantined_key(T1, Seq(7))));
    for seq in 4..=7 {
        assert!(has(&new, Cf::Hooks, &hook_key(T1, Seq(seq))), "hook {seq}");
    }
    assert_eq!(keys(&new, Family::DeadLetter, T1).len(), 2);
    // The dedupe records: the owner's own d2 kept, d1 names its hook's new
    // seq, gone names none.
    let dedupe = |k: &[u8]| {
        DedupeValue::decode(
            &new.get(Cf::Index, &dedupe_key(T1, SRC, k))
                .expect("get")
                .expect("record"),
        )
        .expect("decode")
        .seq
    };
    assert_eq!(dedupe(b"d2"), Seq(1));
    assert_eq!(dedupe(b"d1"), Seq(4));
    assert_eq!(dedupe(b"gone"), Seq(0));
    // A revive on the owner puts k3's dead head back in its key's lane.
    commit(
        &new,
        revive(&new, id(T1, 6, SinkIx(1)), NOW).expect("revive"),
    );
    sweep(&new, T1, NOW);
    assert_eq!(
        head_of(&new, T1, ankusa_lanes::lane_id(SinkIx(1), SRC, Some(b"k3"))),
        Some(id(T1, 6, SinkIx(1)))
    );
    clean(&new);
}

/// The reason the old node's k3 head was dead-lettered with, as its row
/// keeps it.
fn row_error_of_k3() -> Option<String> {
    let old = old_node();
    row(&old, id(T1, 3, S0)).expect("row").last_error
}

#[test]
fn a_tenant_with_a_row_to_deliver_is_not_handed_over() {
    let old = old_node();
    ingest(&old, T1, 5, &[plain(S1)]);
    let err = handover_page(&old, T1, Seq(0), 100, 1 << 20).expect_err("a pending row");
    let QueueError::Handover(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(
        e,
        HandoverError::Pending {
            tenant: T1,
            seq: Seq(5),
            state: "due",
        }
    );
}

#[test]
fn a_page_the_owner_cannot_map_or_of_another_tenant_writes_nothing() {
    let old = old_node();
    let page = handover_page(&old, T1, Seq(0), 100, 1 << 20).expect("page");
    assert_eq!(page.next, None);
    // An owner without `u`: refused by name.
    let new = store();
    sinks(&new, &["o"]);
    let mut b = Batch::new();
    let mut next = 1;
    let err = adopt(&new, &mut b, T1, &page.records, &mut next).expect_err("no sink u");
    assert!(
        matches!(&err, QueueError::Handover(HandoverError::UnknownSink { sink, .. }) if sink == "u"),
        "{err:?}"
    );
    assert_eq!(next, 1, "no seq used");
    // A row that is not a dead letter (a peer's bug, or a forged page):
    // refused, however well-formed the rest.
    let new = store();
    sinks(&new, &["o", "u"]);
    let forged: Vec<Record> = page
        .records
        .iter()
        .map(|(cf, k, v)| {
            if *cf == Cf::Deliveries {
                let mut row = DeliveryRow::decode(v).expect("row");
                row.state = RowState::Due;
                (*cf, k.clone(), row.encode())
            } else {
                (*cf, k.clone(), v.clone())
            }
        })
        .collect();
    let mut b = Batch::new();
    let err = adopt(&new, &mut b, T1, &forged, &mut next).expect_err("a due row");
    assert!(
        matches!(&err, QueueError::Handover(HandoverError::Foreign { why, .. }) if why.contains("not a dead letter")),
        "{err:?}"
    );
    assert_eq!(next, 1);
    // Adopted as another tenant's: refused.
    let new = store();
    sinks(&new, &["o", "u"]);
    let mut b = Batch::new();
    let err = adopt(&new, &mut b, T2, &page.records, &mut next).expect_err("tenant 1's records");
    assert!(
        matches!(err, QueueError::Handover(HandoverError::Foreign { .. })),
        "{err:?}"
    );
    assert_eq!(next, 1);
}
