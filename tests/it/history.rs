//! The history checker of the cluster tests: what a run's client was told
//! (acks, refusals) and what its sinks received ([`History`]), checked
//! against what the relay promises an acknowledged hook. Every acked hook
//! reaches every sink; on an ordered sink each key's hooks arrive in ack
//! order, and a duplicate only repeats the lane's latest head
//! (docs/design.md section 11, "Why each key's order holds across owners";
//! ADR 0004, Consequences). [`History::check`] names each broken promise
//! ([`Violation`]) or counts what the run did ([`Summary`]).
//!
//! What the checker takes as given, and why:
//! - Ack order is the order the relay owes. A test sends a key's next hook
//!   only after the answer to the previous one, so a key's ack order is the
//!   order its provider sent, and an acknowledgement at epoch e comes before
//!   any at e + 1 (section 11, steps 2 and 3).
//! - A refused hook (answered non-2xx) may still be delivered: an owner past
//!   its deadline answers 503 for a hook it had already committed, and its
//!   drain delivers that copy (section 11, "Fencing"). So a refused hook is
//!   neither lost nor a phantom, and it takes no place in ack order. If the
//!   provider sends it again and the new owner acks it, it is an acked hook
//!   from that ack on.
//! - Delivery is at least once (ADR 0004, Consequences): a sink may receive a
//!   hook twice. On an ordered sink the only duplicate the design allows is
//!   the lane's latest head sent again: a restart's recovered head
//!   (ADR 4.7), or a paused old owner's call completing late (section 11,
//!   step 6). A hook sent again after a later hook of its key has been
//!   delivered means the lane went back.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Mutex;

/// How many violations the `Display` of [`Violations`] writes out before it
/// only counts the rest: enough to see the pattern, short enough to read.
const SHOWN: usize = 20;

/// A test run's record, from both ends. `&self` throughout (one lock inside),
/// so the tasks that post hooks (one per key, each waiting for its answers)
/// can share it behind an `Arc` and record as they go.
#[derive(Debug, Default)]
pub struct History {
    records: Mutex<Records>,
}

#[derive(Debug, Default)]
struct Records {
    /// Each acked hook's id and key, at its first ack, in the order the
    /// client saw the answers.
    acks: Vec<(String, Option<String>)>,
    /// Hook id to its index in `acks`.
    acked: HashMap<String, usize>,
    /// Every hook answered non-2xx at least once (acked later or not).
    refused: HashSet<String>,
    /// Every delivery, in recording order: per sink, the order that sink
    /// received them.
    deliveries: Vec<Delivery>,
}

#[derive(Debug)]
struct Delivery {
    sink: String,
    id: String,
    key: Option<String>,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// Hook `id` (its idempotency key) was answered 2xx, with ordering key
    /// `key` as its lane knows it: the normalised key, or `<tenant>/<source>`
    /// for the keyless lane (ADR 0004 section 2), so that it matches what an
    /// ordered sink receives. `None`: the hook is ordered on no sink.
    ///
    /// Record a key's acks in the order the client got them. A hook acked
    /// again (a provider's retry, a dedupe hit) keeps its first place: that is
    /// when the relay took it.
    ///
    /// Panics if the hook was acked before with another key: one hook has
    /// one key, so that is the test's mistake.
    pub fn ack(&self, id: &str, key: Option<&str>) {
        let mut r = self.records.lock().expect("lock");
        if let Some(&i) = r.acked.get(id) {
            let first = r.acks[i].1.as_deref();
            assert!(
                first == key,
                "hook {id} acked with {} and again with {}: one hook has one key",
                Key(first),
                Key(key),
            );
            return;
        }
        let i = r.acks.len();
        r.acks.push((id.to_owned(), key.map(str::to_owned)));
        r.acked.insert(id.to_owned(), i);
    }

    /// Hook `id` was answered non-2xx: not acknowledged. The relay may
    /// deliver it or not (a 503 after its commit); either is allowed.
    pub fn refused(&self, id: &str) {
        let mut r = self.records.lock().expect("lock");
        r.refused.insert(id.to_owned());
    }

    /// `sink` received hook `id` with ordering key `key` (on the http sink
    /// the `x-ankusa-ordering-key` header, absent on an unordered sink).
    /// Record each sink's deliveries in the order it received them (what
    /// `crate::sink::Sink::delivered` lists: the requests it answered 2xx),
    /// duplicates included.
    pub fn delivered(&self, sink: &str, id: &str, key: Option<&str>) {
        let mut r = self.records.lock().expect("lock");
        r.deliveries.push(Delivery {
            sink: sink.to_owned(),
            id: id.to_owned(),
            key: key.map(str::to_owned),
        });
    }

    /// The acked hooks' ids, in ack order: what a test waits to see at its
    /// sinks before it calls [`History::check`].
    pub fn acked(&self) -> Vec<String> {
        let r = self.records.lock().expect("lock");
        r.acks.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Checks the run against the relay's promises: every acked hook reached
    /// every sink of `all_sinks` ([`Violation::Lost`]); every delivered hook
    /// was sent ([`Violation::Phantom`]); and on each sink of
    /// `ordered_sinks`, each key's acked hooks were first delivered in ack
    /// order ([`Violation::Reordered`]), with the key they were acked with
    /// ([`Violation::WrongKey`]), and a hook delivered again only while it
    /// was still its key's latest delivery ([`Violation::BadDuplicate`]).
    ///
    /// Order is judged among acked hooks only: a refused hook delivered
    /// between two of them breaks nothing. It is a delivery of its key all
    /// the same, so a hook sent again after it is a bad duplicate: the
    /// refused hook was the lane's head after it.
    ///
    /// Panics if an ordered sink is not in `all_sinks` (an ordered sink is a
    /// sink: every acked hook must reach it).
    pub fn check(&self, ordered_sinks: &[&str], all_sinks: &[&str]) -> Result<Summary, Violations> {
        for s in ordered_sinks {
            assert!(
                all_sinks.contains(s),
                "ordered sink {s} is not in all_sinks: every acked hook must reach it too"
            );
        }
        let r = self.records.lock().expect("lock");

        // Each acked hook's key and its place among that key's acks.
        let mut per_key: HashMap<&str, usize> = HashMap::new();
        let mut place: HashMap<&str, (Option<&str>, usize)> = HashMap::new();
        for (id, key) in &r.acks {
            let key = key.as_deref();
            let n = key.map_or(0, |k| {
                let n = per_key.entry(k).or_default();
                *n += 1;
                *n - 1
            });
            place.insert(id, (key, n));
        }

        // The sinks to walk: `all_sinks` first, in the caller's order, then
        // any other sink that received something (checked for phantoms).
        let mut sinks: Vec<&str> = all_sinks.to_vec();
        for d in &r.deliveries {
            if !sinks.contains(&d.sink.as_str()) {
                sinks.push(&d.sink);
            }
        }

        let mut found = Vec::new();
        let mut counts = Vec::new();
        let mut delivered_anywhere: HashSet<&str> = HashSet::new();
        for &sink in &sinks {
            let ordered = ordered_sinks.contains(&sink);
            let (seen, deliveries) = walk_sink(&r, &place, sink, ordered, &mut found);
            if all_sinks.contains(&sink) {
                for (id, key) in &r.acks {
                    if !seen.contains(id.as_str()) {
                        found.push(Violation::Lost {
                            sink: sink.to_owned(),
                            id: id.clone(),
                            key: key.clone(),
                        });
                    }
                }
            }
            counts.push(SinkCounts {
                sink: sink.to_owned(),
                deliveries,
                hooks: seen.len(),
                duplicates: deliveries - seen.len(),
            });
            delivered_anywhere.extend(seen);
        }

        let unacked: Vec<&str> = r
            .refused
            .iter()
            .map(String::as_str)
            .filter(|id| !r.acked.contains_key(*id))
            .collect();
        let summary = Summary {
            acked: r.acks.len(),
            keys: per_key.len(),
            refused: unacked.len(),
            refused_delivered: unacked
                .iter()
                .filter(|id| delivered_anywhere.contains(*id))
                .count(),
            sinks: counts,
        };
        if found.is_empty() {
            return Ok(summary);
        }
        // The worst first (a loss, then order), each kind in the order found.
        found.sort_by_key(Violation::rank);
        Err(Violations { found, summary })
    }

    /// [`History::check`], panicking with the readable report: what a
    /// cluster test calls once its sinks have everything.
    pub fn assert_kept(&self, ordered_sinks: &[&str], all_sinks: &[&str]) -> Summary {
        self.check(ordered_sinks, all_sinks)
            .unwrap_or_else(|v| panic!("{v}"))
    }
}

/// Walks `sink`'s deliveries in the order it received them, pushing what
/// breaks a promise onto `found`: a phantom on any sink; on an ordered sink,
/// a wrong key, a reordering and a bad duplicate ([`History::check`]).
/// `place` is each acked hook's key and place in that key's ack order.
/// Returns the hooks the sink received and its count of deliveries.
fn walk_sink<'r>(
    r: &'r Records,
    place: &HashMap<&str, (Option<&'r str>, usize)>,
    sink: &str,
    ordered: bool,
    found: &mut Vec<Violation>,
) -> (HashSet<&'r str>, usize) {
    // Hooks this sink has received so far.
    let mut seen: HashSet<&str> = HashSet::new();
    // Per key: the latest-acked hook first delivered so far, and its place in
    // the key's ack order.
    let mut furthest: HashMap<&str, (usize, &str)> = HashMap::new();
    // Per key as delivered: the latest hook delivered, the lane's head as this
    // sink last saw it.
    let mut latest: HashMap<&str, &str> = HashMap::new();
    let mut wrong_key: HashSet<&str> = HashSet::new();
    let mut deliveries = 0;
    for d in r.deliveries.iter().filter(|d| d.sink == sink) {
        deliveries += 1;
        let id = d.id.as_str();
        let first = seen.insert(id);
        let acked = place.get(id).copied();
        if acked.is_none() && !r.refused.contains(id) {
            if first {
                found.push(Violation::Phantom {
                    sink: sink.to_owned(),
                    id: id.to_owned(),
                    key: d.key.clone(),
                });
            }
            // Part of no lane the test knows: judging the deliveries around
            // it by it would only repeat this.
            continue;
        }
        if !ordered {
            continue;
        }
        if let Some((key, n)) = acked {
            if key != d.key.as_deref() && wrong_key.insert(id) {
                found.push(Violation::WrongKey {
                    sink: sink.to_owned(),
                    id: id.to_owned(),
                    acked: key.map(str::to_owned),
                    delivered: d.key.clone(),
                });
            }
            if let Some(k) = key
                && first
            {
                let far = furthest.entry(k).or_insert((n, id));
                if n < far.0 {
                    found.push(Violation::Reordered {
                        sink: sink.to_owned(),
                        key: k.to_owned(),
                        id: id.to_owned(),
                        after: far.1.to_owned(),
                    });
                } else {
                    *far = (n, id);
                }
            }
        }
        if let Some(k) = d.key.as_deref()
            && let Some(before) = latest.insert(k, id)
            && !first
            && before != id
        {
            found.push(Violation::BadDuplicate {
                sink: sink.to_owned(),
                key: k.to_owned(),
                id: id.to_owned(),
                after: before.to_owned(),
            });
        }
    }
    (seen, deliveries)
}

/// What a run did, for a test to print beside its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Hooks acked.
    pub acked: usize,
    /// Distinct ordering keys among them.
    pub keys: usize,
    /// Hooks refused and never acked.
    pub refused: usize,
    /// Of those, how many reached at least one sink (allowed; a 503 after
    /// the commit).
    pub refused_delivered: usize,
    /// Per sink: `all_sinks` in the caller's order, then any other sink that
    /// received something.
    pub sinks: Vec<SinkCounts>,
}

/// One sink's deliveries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkCounts {
    pub sink: String,
    /// Requests received, duplicates included.
    pub deliveries: usize,
    /// Distinct hooks among them.
    pub hooks: usize,
    /// `deliveries - hooks`: what at-least-once cost.
    pub duplicates: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} hooks acked over {} keys, {} refused and never acked ({} of them delivered)",
            self.acked, self.keys, self.refused, self.refused_delivered
        )?;
        for s in &self.sinks {
            write!(
                f,
                "; sink {}: {} deliveries of {} hooks ({} duplicates)",
                s.sink, s.deliveries, s.hooks, s.duplicates
            )?;
        }
        Ok(())
    }
}

/// One broken promise, naming the sink, the hook and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// An acked hook that `sink` never received.
    Lost {
        sink: String,
        id: String,
        key: Option<String>,
    },
    /// On an ordered sink, hook `id` was first delivered after hook `after`
    /// of the same key, though `id` was acked before it.
    Reordered {
        sink: String,
        key: String,
        id: String,
        after: String,
    },
    /// On an ordered sink, hook `id` was delivered again after `after`, a
    /// hook of the same key: it was no longer the lane's latest head.
    BadDuplicate {
        sink: String,
        key: String,
        id: String,
        after: String,
    },
    /// On an ordered sink, an acked hook arrived with another ordering key
    /// than it was acked with: it went to another lane. Reported once per
    /// sink and hook.
    WrongKey {
        sink: String,
        id: String,
        acked: Option<String>,
        delivered: Option<String>,
    },
    /// A hook the client never sent (neither acked nor refused). Reported
    /// once per sink and hook.
    Phantom {
        sink: String,
        id: String,
        key: Option<String>,
    },
}

/// The kinds in report order; the index is [`Violation::rank`].
const KINDS: [&str; 5] = ["lost", "reordered", "bad duplicate", "wrong key", "phantom"];

impl Violation {
    /// This violation's kind, as the report names it.
    pub fn kind(&self) -> &'static str {
        KINDS[self.rank()]
    }

    fn rank(&self) -> usize {
        match self {
            Violation::Lost { .. } => 0,
            Violation::Reordered { .. } => 1,
            Violation::BadDuplicate { .. } => 2,
            Violation::WrongKey { .. } => 3,
            Violation::Phantom { .. } => 4,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Lost { sink, id, key } => write!(
                f,
                "sink {sink}: hook {id} ({}) was acked and never received",
                Key(key.as_deref())
            ),
            Violation::Reordered {
                sink,
                key,
                id,
                after,
            } => write!(
                f,
                "sink {sink}, key {key:?}: hook {id} first delivered after {after}, \
                 though acked before it"
            ),
            Violation::BadDuplicate {
                sink,
                key,
                id,
                after,
            } => write!(
                f,
                "sink {sink}, key {key:?}: hook {id} delivered again after {after} \
                 (a duplicate may only repeat the lane's latest head)"
            ),
            Violation::WrongKey {
                sink,
                id,
                acked,
                delivered,
            } => write!(
                f,
                "sink {sink}: hook {id} acked with {} delivered with {}",
                Key(acked.as_deref()),
                Key(delivered.as_deref())
            ),
            Violation::Phantom { sink, id, key } => write!(
                f,
                "sink {sink}: hook {id} ({}) delivered but never sent",
                Key(key.as_deref())
            ),
        }
    }
}

/// Every broken promise of a run (never empty), the worst kind first, and
/// the run's counts. Its `Display` is the report: the counts per kind, then
/// at most [`SHOWN`] violations, each kind shown at least a few times so that
/// a flood of one kind does not hide another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violations {
    pub found: Vec<Violation>,
    pub summary: Summary,
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<Vec<&Violation>> = vec![Vec::new(); KINDS.len()];
        for v in &self.found {
            kinds[v.rank()].push(v);
        }
        kinds.retain(|k| !k.is_empty());
        // An equal share for each kind present, then what is left over in
        // report order.
        let share = SHOWN / kinds.len().max(1);
        let mut shown: Vec<usize> = kinds.iter().map(|k| k.len().min(share)).collect();
        let mut left = SHOWN - shown.iter().sum::<usize>();
        for (n, k) in shown.iter_mut().zip(&kinds) {
            let more = (k.len() - *n).min(left);
            *n += more;
            left -= more;
        }

        let per_kind: Vec<String> = kinds
            .iter()
            .map(|k| format!("{} {}", k.len(), k[0].kind()))
            .collect();
        writeln!(
            f,
            "{} broken promises of the relay (docs/design.md section 11): {}",
            self.found.len(),
            per_kind.join(", ")
        )?;
        writeln!(f, "run: {}", self.summary)?;
        for (k, n) in kinds.iter().zip(shown) {
            for v in &k[..n] {
                writeln!(f, "  {}: {v}", v.kind())?;
            }
            if k.len() > n {
                writeln!(f, "  ... and {} more {}", k.len() - n, k[0].kind())?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}

/// An ordering key as a report shows it: quoted, so an empty or padded key
/// is visible, or "no key".
struct Key<'a>(Option<&'a str>);

impl fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(k) => write!(f, "key {k:?}"),
            None => f.write_str("no key"),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The checker's own tests: a clean run passes, and each planted fault
    //! is named as the violation it is, and only as that.

    use super::*;

    fn s(v: &str) -> String {
        v.to_owned()
    }

    fn violations(h: &History, ordered: &[&str], all: &[&str]) -> Vec<Violation> {
        match h.check(ordered, all) {
            Ok(summary) => panic!("expected violations, the check passed: {summary}"),
            Err(v) => v.found,
        }
    }

    /// Two keys interleaved on an ordered sink `a` and an unordered sink
    /// `b`, with everything the design allows: the latest head sent again
    /// (also with another key's delivery between the two), a refused hook
    /// delivered between two acked ones, a refused hook never delivered, an
    /// unkeyed hook, and on the unordered sink any order and any duplicate.
    #[test]
    fn a_clean_history_passes() {
        let h = History::new();
        h.ack("k1-a", Some("k1"));
        h.ack("k2-a", Some("k2"));
        h.ack("k1-b", Some("k1"));
        h.refused("k1-r");
        h.refused("k2-r");
        h.ack("k1-c", Some("k1"));
        h.ack("k2-b", Some("k2"));
        h.ack("free", None);

        for (id, key) in [
            ("k1-a", Some("k1")),
            ("k2-a", Some("k2")),
            ("k1-b", Some("k1")),
            ("k2-a", Some("k2")),
            ("k1-b", Some("k1")),
            ("k1-r", Some("k1")),
            ("k1-c", Some("k1")),
            ("free", None),
            ("k1-c", Some("k1")),
            ("k2-b", Some("k2")),
        ] {
            h.delivered("a", id, key);
        }
        for id in ["k2-b", "free", "k1-c", "k1-a", "k1-b", "k2-a", "k1-a"] {
            h.delivered("b", id, None);
        }

        let summary = h.check(&["a"], &["a", "b"]).expect("a clean history");
        assert_eq!(
            summary,
            Summary {
                acked: 6,
                keys: 2,
                refused: 2,
                refused_delivered: 1,
                sinks: vec![
                    SinkCounts {
                        sink: s("a"),
                        deliveries: 10,
                        hooks: 7,
                        duplicates: 3,
                    },
                    SinkCounts {
                        sink: s("b"),
                        deliveries: 7,
                        hooks: 6,
                        duplicates: 1,
                    },
                ],
            }
        );
        assert_eq!(h.acked(), ["k1-a", "k2-a", "k1-b", "k1-c", "k2-b", "free"]);
    }

    /// Section 11, "Fencing": the old owner committed `b` past its deadline
    /// and answered 503; the provider sent it again and the new owner acked
    /// it. The drain delivers the old copy, the new epoch its own: `b` twice
    /// in a row, in its place.
    #[test]
    fn a_hook_refused_by_the_old_owner_and_acked_by_the_new_one_passes() {
        let h = History::new();
        h.ack("a", Some("k"));
        h.refused("b");
        h.ack("b", Some("k"));
        h.ack("c", Some("k"));
        for id in ["a", "b", "b", "c"] {
            h.delivered("s", id, Some("k"));
        }
        let summary = h.check(&["s"], &["s"]).expect("a clean history");
        assert_eq!((summary.acked, summary.refused), (3, 0));
        assert_eq!(summary.sinks[0].duplicates, 1);
    }

    #[test]
    fn a_planted_loss_is_named() {
        let h = History::new();
        for id in ["h1", "h2", "h3"] {
            h.ack(id, Some("k"));
        }
        h.delivered("a", "h1", Some("k"));
        h.delivered("a", "h3", Some("k"));

        let err = h.check(&["a"], &["a"]).unwrap_err();
        assert_eq!(
            err.found,
            [Violation::Lost {
                sink: s("a"),
                id: s("h2"),
                key: Some(s("k")),
            }]
        );
        let report = err.to_string();
        assert!(
            report.contains(r#"lost: sink a: hook h2 (key "k") was acked and never received"#),
            "{report}"
        );
    }

    #[test]
    fn a_loss_on_one_of_two_sinks_names_that_sink() {
        let h = History::new();
        for id in ["h1", "h2", "h3"] {
            h.ack(id, Some("k"));
            h.delivered("a", id, Some("k"));
        }
        h.delivered("b", "h3", None);
        h.delivered("b", "h1", None);

        assert_eq!(
            violations(&h, &["a"], &["a", "b"]),
            [Violation::Lost {
                sink: s("b"),
                id: s("h2"),
                key: Some(s("k")),
            }]
        );
    }

    #[test]
    fn a_planted_reordering_is_named() {
        let h = History::new();
        for id in ["h1", "h2", "h3"] {
            h.ack(id, Some("k"));
        }
        for id in ["h2", "h1", "h3"] {
            h.delivered("a", id, Some("k"));
        }

        assert_eq!(
            violations(&h, &["a"], &["a"]),
            [Violation::Reordered {
                sink: s("a"),
                key: s("k"),
                id: s("h1"),
                after: s("h2"),
            }]
        );
    }

    /// The same deliveries on an unordered sink are fine: order is promised
    /// on ordered sinks only.
    #[test]
    fn order_is_judged_on_ordered_sinks_only() {
        let h = History::new();
        for id in ["h1", "h2"] {
            h.ack(id, Some("k"));
        }
        for id in ["h2", "h1", "h2"] {
            h.delivered("a", id, None);
        }
        h.check(&[], &["a"]).expect("an unordered sink");
    }

    /// `h1` sent again once `h2`, a later hook of its key, was delivered: the
    /// lane went back. The first deliveries are in order, so this is the
    /// only violation.
    #[test]
    fn a_duplicate_of_an_older_head_is_named() {
        let h = History::new();
        for id in ["h1", "h2", "h3"] {
            h.ack(id, Some("k"));
        }
        for id in ["h1", "h2", "h1", "h3"] {
            h.delivered("a", id, Some("k"));
        }

        assert_eq!(
            violations(&h, &["a"], &["a"]),
            [Violation::BadDuplicate {
                sink: s("a"),
                key: s("k"),
                id: s("h1"),
                after: s("h2"),
            }]
        );
    }

    /// A refused hook takes no place in ack order, but once delivered it was
    /// its lane's head: an acked hook sent again after it went back.
    #[test]
    fn a_duplicate_after_a_delivered_refused_hook_is_named() {
        let h = History::new();
        h.ack("h1", Some("k"));
        h.refused("r");
        for id in ["h1", "r", "h1"] {
            h.delivered("a", id, Some("k"));
        }

        assert_eq!(
            violations(&h, &["a"], &["a"]),
            [Violation::BadDuplicate {
                sink: s("a"),
                key: s("k"),
                id: s("h1"),
                after: s("r"),
            }]
        );
    }

    #[test]
    fn a_phantom_is_named_once() {
        let h = History::new();
        h.ack("h1", Some("k"));
        for id in ["h1", "ghost", "ghost"] {
            h.delivered("a", id, Some("k"));
        }

        assert_eq!(
            violations(&h, &["a"], &["a"]),
            [Violation::Phantom {
                sink: s("a"),
                id: s("ghost"),
                key: Some(s("k")),
            }]
        );
    }

    /// A sink outside `all_sinks` owes nothing, but what it received must
    /// have been sent.
    #[test]
    fn a_phantom_on_a_sink_outside_all_sinks_is_named() {
        let h = History::new();
        h.delivered("spare", "ghost", None);

        assert_eq!(
            violations(&h, &[], &[]),
            [Violation::Phantom {
                sink: s("spare"),
                id: s("ghost"),
                key: None,
            }]
        );
    }

    #[test]
    fn a_hook_delivered_with_another_key_is_named_once() {
        let h = History::new();
        h.ack("h1", Some("k"));
        h.delivered("a", "h1", Some("j"));
        h.delivered("a", "h1", Some("j"));

        assert_eq!(
            violations(&h, &["a"], &["a"]),
            [Violation::WrongKey {
                sink: s("a"),
                id: s("h1"),
                acked: Some(s("k")),
                delivered: Some(s("j")),
            }]
        );
    }

    /// 30 losses and one reordering: the report stays at 20 violation lines,
    /// counts the rest, and still shows the reordering.
    #[test]
    fn the_report_is_bounded_and_shows_every_kind() {
        let h = History::new();
        for i in 0..32 {
            h.ack(&format!("h{i:02}"), Some("k"));
        }
        h.delivered("a", "h01", Some("k"));
        h.delivered("a", "h00", Some("k"));

        let err = h.check(&["a"], &["a"]).unwrap_err();
        assert_eq!(err.found.len(), 31);
        let report = err.to_string();
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 2 + SHOWN + 1, "{report}");
        assert_eq!(
            lines[0],
            "31 broken promises of the relay (docs/design.md section 11): 30 lost, 1 reordered",
            "{report}"
        );
        assert_eq!(lines[21], "  ... and 11 more lost", "{report}");
        assert_eq!(
            lines[22],
            r#"  reordered: sink a, key "k": hook h00 first delivered after h01, though acked before it"#,
            "{report}"
        );
    }

    #[test]
    #[should_panic(expected = "ordered sink b is not in all_sinks")]
    fn an_ordered_sink_outside_all_sinks_is_the_tests_mistake() {
        let _ = History::new().check(&["b"], &["a"]);
    }

    #[test]
    #[should_panic(expected = "hook h1 acked with key \"k\" and again with key \"j\"")]
    fn one_hook_acked_with_two_keys_is_the_tests_mistake() {
        let h = History::new();
        h.ack("h1", Some("k"));
        h.ack("h1", Some("j"));
    }
}
