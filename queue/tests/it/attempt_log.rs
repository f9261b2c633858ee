//! The attempt log (docs/design.md section 3, "The attempt log"): each
//! attempt's ?L entry in its outcome's batch, the last `keep` kept per row by
//! a blind delete, the log outliving the delivered row and going with the
//! envelope (retention, drop, purge, hand-over), a revive continuing it, the
//! invariants 7 and 8 holding after every step and caught when broken, and a
//! dump carrying it.

use ankusa_engine::Op;
use ankusa_engine::dump::{export, import};
use ankusa_keys::{AttemptLogKey, AttemptRecord, attempt_log_key};

use crate::support::*;

/// What an attempt came to, as the pipeline hands it over.
#[derive(Clone, Copy)]
enum End {
    Retry,
    Delivered,
    Dead,
}

fn record(end: End, at_ms: u64, status: u16, body: &str) -> AttemptRecord {
    let outcome = match end {
        End::Retry => "retry",
        End::Delivered => "delivered",
        End::Dead => "permanent",
    };
    AttemptRecord {
        at_ms,
        duration_ms: 7,
        outcome: outcome.into(),
        status: Some(status),
        error: (!matches!(end, End::Delivered)).then(|| format!("HTTP {status}")),
        headers: vec![(b"content-type".to_vec(), b"text/plain".to_vec())],
        body: body.as_bytes().to_vec(),
        body_truncated: false,
    }
}

/// Claims `id` (due at `due`) at `now` and ends its attempt as `end` (the
/// answer's status and body) with its record in the log (keeping `keep`); returns the outcome's batch as
/// committed. A retry is due at `now + 1`.
fn attempt(
    kv: &MemoryKv,
    id: RowId,
    due: u64,
    now: u64,
    (end, status, body): (End, u16, &str),
    keep: u32,
) -> Batch {
    commit(
        kv,
        claim(kv, dk(id.tenant, due, id.seq.0, id.sink), now).expect("claim"),
    );
    clean(kv);
    let rec = record(end, now, status, body);
    let log = Some(LogAttempt { record: &rec, keep });
    let batch = match end {
        End::Retry => retry_logged(kv, id, now + 1, &format!("HTTP {status}"), now, log),
        End::Delivered => delivered_logged(kv, id, now, log),
        End::Dead => dead_letter_logged(
            kv,
            id,
            &format!("permanent: HTTP {status}"),
            now,
            log,
            ankusa_lanes::OnDeadHead::Release,
        ),
    }
    .expect("outcome");
    commit(kv, batch.clone());
    clean(kv);
    batch
}

/// The ?L entries of `tenant`: (seq, sink, attempt).
fn entries(kv: &MemoryKv, tenant: TenantOrd) -> Vec<(u64, u16, u32)> {
    keys(kv, Family::AttemptLog, tenant)
        .iter()
        .map(|k| {
            let k = AttemptLogKey::decode(k).expect("an ?L key");
            (k.seq.0, k.sink.0, k.attempt)
        })
        .collect()
}

/// Two 503s, then a 200: three entries with their statuses, bodies and
/// times, in the batches of the retry, retry and delivered transitions; the
/// log outlives the delivered row.
#[test]
fn three_attempts_leave_three_entries_that_outlive_the_delivery() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0), plain(S1)]);
    let r = id(T1, 1, S0);
    let b1 = attempt(&kv, r, NOW, NOW, (End::Retry, 503, "busy 1"), 20);
    // The entry and the row (logged_attempts 1) in the retry's own batch.
    assert!(b1.ops().iter().any(|op| matches!(op,
        Op::Put { cf: Cf::Index, key, .. } if key.as_slice() == attempt_log_key(T1, Seq(1), S0, 1)
    )));
    assert_eq!(row(&kv, r).expect("row").logged_attempts, 1);
    attempt(&kv, r, NOW + 1, NOW + 100, (End::Retry, 503, "busy 2"), 20);
    attempt(
        &kv,
        r,
        NOW + 101,
        NOW + 300,
        (End::Delivered, 200, "ok"),
        20,
    );
    assert!(row(&kv, r).is_none(), "the delivered row is gone");
    let log = row_attempts(&kv, r, 20).expect("log");
    type Seen<'a> = (u32, u64, Option<u16>, &'a str, &'a [u8], Option<&'a str>);
    let got: Vec<Seen<'_>> = log
        .iter()
        .map(|(n, a)| {
            (
                *n,
                a.at_ms,
                a.status,
                a.outcome.as_str(),
                a.body.as_slice(),
                a.error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, NOW, Some(503), "retry", &b"busy 1"[..], Some("HTTP 503")),
            (
                2,
                NOW + 100,
                Some(503),
                "retry",
                &b"busy 2"[..],
                Some("HTTP 503")
            ),
            (3, NOW + 300, Some(200), "delivered", &b"ok"[..], None),
        ]
    );
    // The hook's view: only S0 has a log; S1 was never attempted.
    let hook = hook_attempts(&kv, T1, Seq(1), 20).expect("hook log");
    assert_eq!(hook.keys().copied().collect::<Vec<_>>(), vec![S0]);
    assert_eq!(hook[&S0], log);
    // The unlogged builders write no entry (the model tests', the fixtures').
    commit(&kv, claim(&kv, dk(T1, NOW, 1, S1), NOW).expect("claim"));
    commit(
        &kv,
        retry(&kv, id(T1, 1, S1), NOW + 1, "x", NOW).expect("retry"),
    );
    assert_eq!(entries(&kv, T1).len(), 3);
    assert_eq!(row(&kv, id(T1, 1, S1)).expect("row").logged_attempts, 0);
    clean(&kv);
}

/// 25 attempts: the log keeps the last 20 (6..=25); the entry `keep` back is
/// deleted blindly in the batch of the attempt that pushes it out.
#[test]
fn twenty_five_attempts_keep_the_last_twenty() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    let r = id(T1, 1, S0);
    let mut due = NOW;
    for n in 1..=24u64 {
        let now = NOW + 10 * n;
        let b = attempt(&kv, r, due, now, (End::Retry, 500, &format!("try {n}")), 20);
        let deletes: Vec<Vec<u8>> = b
            .ops()
            .iter()
            .filter_map(|op| match op {
                Op::Delete { cf: Cf::Index, key } if key[0] == b'L' => Some(key.clone()),
                _ => None,
            })
            .collect();
        if n > 20 {
            let gone = u32::try_from(n - 20).expect("small");
            assert_eq!(
                deletes,
                vec![attempt_log_key(T1, Seq(1), S0, gone).to_vec()]
            );
        } else {
            assert!(deletes.is_empty(), "attempt {n}: {deletes:?}");
        }
        due = now + 1;
    }
    attempt(&kv, r, due, NOW + 1000, (End::Dead, 400, "no"), 20);
    let log = row_attempts(&kv, r, 20).expect("log");
    assert_eq!(
        log.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        (6..=25).collect::<Vec<u32>>()
    );
    assert_eq!(log[0].1.body, b"try 6");
    assert_eq!(
        (log[19].1.outcome.as_str(), log[19].1.status),
        ("permanent", Some(400))
    );
    assert_eq!(entries(&kv, T1).len(), 20);
    let dead = row(&kv, r).expect("dead row");
    assert_eq!(
        (dead.state, dead.attempts, dead.logged_attempts),
        (RowState::Dead, 25, 25)
    );
    // A smaller limit reads the newest.
    let newest = row_attempts(&kv, r, 2).expect("log");
    assert_eq!(
        newest.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        vec![24, 25]
    );
}

/// A revive restarts the row's attempts, not its log: the next attempt is
/// numbered after the ones before the revive, which stay.
#[test]
fn a_revived_row_logs_after_its_earlier_attempts() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    let r = id(T1, 1, S0);
    attempt(&kv, r, NOW, NOW, (End::Retry, 503, "a"), 20);
    attempt(&kv, r, NOW + 1, NOW + 5, (End::Dead, 404, "b"), 20);
    commit(&kv, revive(&kv, r, NOW + 10).expect("revive"));
    clean(&kv);
    let revived = row(&kv, r).expect("row");
    assert_eq!((revived.attempts, revived.logged_attempts), (0, 2));
    attempt(&kv, r, NOW + 10, NOW + 20, (End::Delivered, 204, ""), 20);
    let log = row_attempts(&kv, r, 20).expect("log");
    assert_eq!(
        log.iter()
            .map(|(n, a)| (*n, a.status, a.outcome.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (1, Some(503), "retry"),
            (2, Some(404), "permanent"),
            (3, Some(204), "delivered")
        ]
    );
}

/// Retention deletes a hook's log with its envelope, and only then: a hook
/// that still has a row keeps its log.
#[test]
fn retention_removes_the_log_with_the_hook() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    ingest(&kv, T1, 2, &[plain(S0)]);
    ingest(&kv, T2, 3, &[plain(S0)]);
    attempt(&kv, id(T1, 1, S0), NOW, NOW, (End::Retry, 503, "x"), 20);
    attempt(
        &kv,
        id(T1, 1, S0),
        NOW + 1,
        NOW + 2,
        (End::Delivered, 200, "y"),
        20,
    );
    attempt(&kv, id(T1, 2, S0), NOW, NOW, (End::Retry, 503, "z"), 20);
    attempt(&kv, id(T2, 3, S0), NOW, NOW, (End::Delivered, 200, "w"), 20);
    let mut cursor = None;
    loop {
        let p = retention(&kv, T1, NOW, cursor.as_ref(), 1).expect("retention");
        commit(&kv, p.batch);
        clean(&kv);
        cursor = p.next;
        if cursor.is_none() {
            break;
        }
    }
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert_eq!(
        entries(&kv, T1),
        vec![(2, 0, 1)],
        "hook 2 still has its row"
    );
    assert_eq!(
        entries(&kv, T2),
        vec![(3, 0, 1)],
        "another tenant's log stays"
    );
    // Hook 2 delivered: its log goes at the next round.
    attempt(
        &kv,
        id(T1, 2, S0),
        NOW + 1,
        NOW + 3,
        (End::Delivered, 200, "v"),
        20,
    );
    let p = retention(&kv, T1, NOW, None, 10).expect("retention");
    assert_eq!(p.moved, 1);
    commit(&kv, p.batch);
    clean(&kv);
    assert!(entries(&kv, T1).is_empty());
}

/// A drop of a dead row deletes its log; a drop of a hook's last row
/// deletes the log of its delivered rows too.
#[test]
fn drop_removes_the_dead_rows_log_and_with_the_hook_every_rows() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0), plain(S1)]);
    ingest(&kv, T1, 2, &[plain(S0), plain(S1)]);
    // Hook 1: S0 delivered, S1 dead. Hook 2: both dead.
    attempt(
        &kv,
        id(T1, 1, S0),
        NOW,
        NOW,
        (End::Delivered, 200, "ok"),
        20,
    );
    attempt(&kv, id(T1, 1, S1), NOW, NOW, (End::Dead, 400, "bad"), 20);
    attempt(&kv, id(T1, 2, S0), NOW, NOW, (End::Dead, 400, "bad"), 20);
    attempt(&kv, id(T1, 2, S1), NOW, NOW, (End::Retry, 503, "busy"), 20);
    attempt(
        &kv,
        id(T1, 2, S1),
        NOW + 1,
        NOW + 1,
        (End::Dead, 400, "bad"),
        20,
    );
    // Dropping one of hook 2's rows: that row's log goes, the other's stays.
    commit(&kv, drop_dead(&kv, &[id(T1, 2, S0)], NOW).expect("drop"));
    clean(&kv);
    assert_eq!(
        entries(&kv, T1),
        vec![(1, 0, 1), (1, 1, 1), (2, 1, 1), (2, 1, 2)]
    );
    // Dropping hook 1's last row: the hook goes, with S0's delivery log.
    commit(&kv, drop_dead(&kv, &[id(T1, 1, S1)], NOW).expect("drop"));
    clean(&kv);
    assert!(!has(&kv, Cf::Hooks, &hook_key(T1, Seq(1))));
    assert_eq!(entries(&kv, T1), vec![(2, 1, 1), (2, 1, 2)]);
    commit(&kv, drop_dead(&kv, &[id(T1, 2, S1)], NOW).expect("drop"));
    clean(&kv);
    assert!(entries(&kv, T1).is_empty());
}

/// A paged purge deletes the tenant's log with its envelopes, the invariants
/// holding after every page; another tenant's log stays.
#[test]
fn a_paged_purge_removes_the_log_with_the_envelopes() {
    let kv = store();
    for seq in 1..=7 {
        ingest(&kv, T1, seq, &[plain(S0), plain(S1)]);
        attempt(&kv, id(T1, seq, S0), NOW, NOW, (End::Retry, 503, "a"), 20);
        attempt(
            &kv,
            id(T1, seq, S1),
            NOW,
            NOW,
            (End::Delivered, 200, "b"),
            20,
        );
        if seq % 2 == 0 {
            attempt(
                &kv,
                id(T1, seq, S0),
                NOW + 1,
                NOW + 2,
                (End::Delivered, 200, "c"),
                20,
            );
        }
    }
    ingest(&kv, T2, 8, &[plain(S0)]);
    attempt(&kv, id(T2, 8, S0), NOW, NOW, (End::Delivered, 200, "d"), 20);
    assert_eq!(entries(&kv, T1).len(), 7 * 2 + 3);
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let p = purge_tenant_page(&kv, T1, cursor.as_ref(), 2).expect("page");
        commit(&kv, p.batch);
        clean(&kv);
        pages += 1;
        match p.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(pages < 100, "the purge ends");
    }
    assert!(entries(&kv, T1).is_empty());
    assert_eq!(entries(&kv, T2), vec![(8, 0, 1)]);
    // The one-batch purge too.
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    attempt(&kv, id(T1, 1, S0), NOW, NOW, (End::Retry, 503, "a"), 20);
    commit(&kv, purge_tenant(&kv, T1).expect("purge"));
    clean(&kv);
    assert!(entries(&kv, T1).is_empty());
}

/// The checker reports an entry whose envelope is gone (invariant 7) and an
/// entry numbered above its row's count (invariant 8).
#[test]
fn the_checker_reports_a_log_without_envelope_and_an_entry_ahead_of_its_row() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    attempt(&kv, id(T1, 1, S0), NOW, NOW, (End::Retry, 503, "a"), 20);
    let rec = record(End::Retry, NOW, 503, "planted").encode();
    let mut b = Batch::new();
    b.put(Cf::Index, attempt_log_key(T1, Seq(9), S0, 1), rec.clone());
    b.put(Cf::Index, attempt_log_key(T1, Seq(1), S0, 5), rec);
    b.put(
        Cf::Index,
        attempt_log_key(T1, Seq(1), S1, 1),
        b"not a record".to_vec(),
    );
    commit(&kv, b);
    let v = check_invariants(&kv.snapshot()).expect("check");
    assert!(
        v.contains(&Violation::AttemptLogWithoutEnvelope {
            row: id(T1, 9, S0),
            attempt: 1
        }),
        "{v:#?}"
    );
    assert!(
        v.contains(&Violation::AttemptLogAhead {
            row: id(T1, 1, S0),
            attempt: 5,
            logged: 1
        }),
        "{v:#?}"
    );
    assert!(
        v.iter().any(
            |x| matches!(x, Violation::Undecodable { cf: Cf::Index, key, .. }
        if key.as_slice() == attempt_log_key(T1, Seq(1), S1, 1))
        ),
        "{v:#?}"
    );
    assert_eq!(v.len(), 3, "{v:#?}");
}

/// A dump carries the log (it is every record of the store): an export and
/// an import give the same entries, and a clean store.
#[test]
fn a_dump_carries_the_log() {
    let kv = store();
    ingest(&kv, T1, 1, &[plain(S0)]);
    attempt(&kv, id(T1, 1, S0), NOW, NOW, (End::Retry, 503, "a"), 20);
    attempt(
        &kv,
        id(T1, 1, S0),
        NOW + 1,
        NOW + 1,
        (End::Delivered, 200, "b"),
        20,
    );
    let mut bytes = Vec::new();
    export(
        &kv.snapshot(),
        "memory",
        2,
        b"origin",
        &mut bytes,
        &mut |_, _| {},
    )
    .expect("export");
    let back = MemoryKv::new();
    import(&back, bytes.as_slice(), b"origin", &mut |_, _| {}).expect("import");
    clean(&back);
    assert_eq!(
        row_attempts(&back, id(T1, 1, S0), 20).expect("log"),
        row_attempts(&kv, id(T1, 1, S0), 20).expect("log")
    );
    assert_eq!(entries(&back, T1).len(), 2);
}

/// A cluster's hand-over carries no log: the old node deletes the handed
/// hooks' log with their envelopes, the owner's adopted dead row starts with
/// none, and both stores stay clean.
#[test]
fn a_hand_over_leaves_the_log_behind_and_deletes_it() {
    use ankusa_keys::meta::{encode_sink_names, source_sinks_key};
    use ankusa_queue::handover::{adopt, handed_over, handover_page};
    let old = store();
    let mut b = Batch::new();
    b.put(
        Cf::Meta,
        source_sinks_key(SRC),
        encode_sink_names(&["a", "b"]),
    );
    commit(&old, b);
    ingest(&old, T1, 1, &[plain(S0), plain(S1)]);
    attempt(
        &old,
        id(T1, 1, S0),
        NOW,
        NOW,
        (End::Delivered, 200, "ok"),
        20,
    );
    attempt(&old, id(T1, 1, S1), NOW, NOW, (End::Dead, 400, "bad"), 20);
    let new = store();
    let mut b = Batch::new();
    b.put(
        Cf::Meta,
        source_sinks_key(SRC),
        encode_sink_names(&["a", "b"]),
    );
    commit(&new, b);
    let page = handover_page(&old, T1, Seq(0), 10, 1 << 20).expect("page");
    assert!(
        page.records
            .iter()
            .all(|(cf, k, _)| *cf != Cf::Index || k[0] != b'L'),
        "no ?L record travels"
    );
    let mut next = 1;
    let mut b = Batch::new();
    adopt(&new, &mut b, T1, &page.records, &mut next).expect("adopt");
    commit(&new, b);
    clean(&new);
    assert!(entries(&new, T1).is_empty());
    commit(
        &old,
        handed_over(&old, T1, &page.seqs, &page.dedupe).expect("delete"),
    );
    clean(&old);
    assert!(entries(&old, T1).is_empty());
}

/// A step of [`random_steps_keep_the_log_and_the_invariants`].
#[derive(Clone, Debug)]
enum Step {
    Ingest,
    Attempt { row: usize, end: u8 },
    Revive { row: usize },
    Drop { row: usize },
    Retention,
    Purge,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        2 => Just(Step::Ingest),
        8 => (0..12usize, 0..3u8).prop_map(|(row, end)| Step::Attempt { row, end }),
        2 => (0..12usize).prop_map(|row| Step::Revive { row }),
        2 => (0..12usize).prop_map(|row| Step::Drop { row }),
        1 => Just(Step::Retention),
        1 => Just(Step::Purge),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Random attempts, revives, drops, retention rounds and purges of a few
    /// hooks with two sinks each, keeping 3 attempts a row: after every step
    /// the invariants hold (7 and 8 among them), and every row's log is
    /// exactly its last `min(3, logged_attempts)` attempts.
    #[test]
    fn random_steps_keep_the_log_and_the_invariants(steps in proptest::collection::vec(step(), 1..60)) {
        const KEEP: u32 = 3;
        let kv = store();
        let mut next_seq = 1u64;
        let mut now = NOW;
        for s in steps {
            now += 10;
            let rows: Vec<RowId> = (1..next_seq)
                .flat_map(|seq| [id(T1, seq, S0), id(T1, seq, S1)])
                .collect();
            let pick = |i: usize| rows.get(i % rows.len().max(1)).copied();
            match s {
                Step::Ingest if next_seq <= 6 => {
                    ingest(&kv, T1, next_seq, &[plain(S0), plain(S1)]);
                    next_seq += 1;
                }
                Step::Ingest => {}
                Step::Attempt { row: i, end } => {
                    let Some(r) = pick(i) else { continue };
                    let Some(due) = due_keys(&kv, T1).into_iter().find(|d| d.seq == r.seq && d.sink == r.sink) else { continue };
                    let end = [End::Retry, End::Delivered, End::Dead][usize::from(end)];
                    attempt(&kv, r, due.due_ms, now.max(due.due_ms), (end, 500, "b"), KEEP);
                }
                Step::Revive { row: i } => {
                    if let Some(r) = pick(i) && has(&kv, Cf::Index, &dead_letter_key(T1, r.seq, r.sink)) {
                        commit(&kv, revive(&kv, r, now).expect("revive"));
                    }
                }
                Step::Drop { row: i } => {
                    if let Some(r) = pick(i) && has(&kv, Cf::Index, &dead_letter_key(T1, r.seq, r.sink)) {
                        commit(&kv, drop_dead(&kv, &[r], NOW).expect("drop"));
                    }
                }
                Step::Retention => {
                    let p = retention(&kv, T1, now, None, 100).expect("retention");
                    commit(&kv, p.batch);
                }
                Step::Purge => {
                    let mut cursor = None;
                    loop {
                        let p = purge_tenant_page(&kv, T1, cursor.as_ref(), 3).expect("page");
                        commit(&kv, p.batch);
                        clean(&kv);
                        cursor = p.next;
                        if cursor.is_none() {
                            break;
                        }
                    }
                    proptest::prop_assert!(entries(&kv, T1).is_empty());
                }
            }
            clean(&kv);
            for r in rows {
                if let Some(stored) = row(&kv, r) {
                    let logged = stored.logged_attempts;
                    let want: Vec<u32> = (logged.saturating_sub(KEEP) + 1..=logged).collect();
                    let got: Vec<u32> = row_attempts(&kv, r, 100).expect("log").iter().map(|(n, _)| *n).collect();
                    proptest::prop_assert_eq!(got, want, "row {}", r);
                }
            }
        }
    }
}
