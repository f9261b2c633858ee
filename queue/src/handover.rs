//! The hand-over of a drained epoch's remains between cluster nodes
//! (docs/design.md section 11, "Hand-over"): once a node has delivered every
//! row it held of a tenant it no longer owns, what is left of the tenant in
//! its store (dead letters, quarantined hooks, the archive, dedupe records)
//! goes to the tenant's owner, a page of hooks at a time, as records of the
//! store's own families in the dump format (`engine::dump`), and is then
//! deleted here.
//!
//! Seqs are each node's own (the Writer's high-water mark), so the owner
//! stores every handed hook under a new seq of its own ([`adopt`]); the
//! sink slots of a source are each store's own too (retired slots differ),
//! so a page carries its sources' slot names (`meta` `source/sinks/<id>`)
//! and the owner maps each row to its slot of that name. Tenant ordinals
//! and source ids are the cluster's, the same in every store.
//!
//! Three pure functions: [`handover_page`] reads a page on the old node,
//! [`adopt`] builds the owner's batch, [`handed_over`] builds the old node's
//! deletion of the page once the owner committed it.

use std::collections::{BTreeMap, BTreeSet};

use ankusa_engine::{Batch, Cf, Direction, Read};
use ankusa_keys::meta::{decode_sink_names, source_sinks_key};
use ankusa_keys::{
    ArchiveKey, CounterField, DeadLetterKey, DedupeKey, DedupeValue, DeliveryKey, DeliveryRow,
    Envelope, Family, HookKey, MetaKey, QuarantinedKey, RowState, Seq, SinkIx, SourceId, TenantOrd,
    archive_key, dead_letter_key, dedupe_key, deliveries_of_hook_range, delivery_key, hook_key,
    hooks_tenant_range, quarantined_key, tenant_range,
};

use crate::{QueueError, count};

/// One column family's record of a page: `(cf, key, value)`.
pub type Record = (Cf, Vec<u8>, Vec<u8>);

/// A page of a tenant's remains read by [`handover_page`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HandoverPage {
    /// Its records, in dump order ([`Cf::ALL`], then key order).
    pub records: Vec<Record>,
    /// The hooks it carries (this store's seqs), ascending.
    pub seqs: Vec<Seq>,
    /// The dedupe records it carries whose hook it does not carry (their
    /// hook is gone: retention removed it before the record expired).
    pub dedupe: Vec<Vec<u8>>,
    /// Where the next page starts; `None`: this is the last.
    pub next: Option<Seq>,
}

/// A page's records as [`handover_page`] gathers them, in dump order, and
/// their bytes.
#[derive(Default)]
struct Collected {
    records: BTreeMap<(usize, Vec<u8>), Vec<u8>>,
    bytes: usize,
}

impl Collected {
    fn put(&mut self, cf: Cf, k: &[u8], v: &[u8]) {
        self.bytes += k.len() + v.len();
        self.records.insert((cf.index(), k.to_vec()), v.to_vec());
    }
}

/// Why a page cannot be handed over or adopted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandoverError {
    /// A hook of the tenant still has a row to deliver here: the old node
    /// hands over only once it has drained the tenant.
    #[error("hook {seq} of tenant {tenant} still has a row to deliver ({state})")]
    Pending {
        /// The tenant.
        tenant: TenantOrd,
        /// The hook.
        seq: Seq,
        /// The row's state.
        state: &'static str,
    },
    /// A record of another tenant, or of a family a hand-over does not
    /// carry.
    #[error("record {index} of the page: {why}")]
    Foreign {
        /// Its index in the page.
        index: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A row of a sink entry the owner's store does not have.
    #[error(
        "source {source_id} has no sink entry {sink:?} here (the page's hook {seq} has a row of it): the two nodes' configurations differ"
    )]
    UnknownSink {
        /// The source.
        source_id: SourceId,
        /// The entry's name on the old node.
        sink: String,
        /// The hook, on the old node.
        seq: Seq,
    },
}

/// A row's state in words, for [`HandoverError::Pending`].
fn state_name(state: RowState) -> &'static str {
    match state {
        RowState::Due => "due",
        RowState::InFlight => "in flight",
        RowState::Member => "a lane member",
        RowState::Dead => "a dead letter without its ?X record",
    }
}

/// Reads the page of `tenant`'s remains that starts at hook `from`: at most
/// `limit` hooks and about `max_bytes` of records, each hook with its envelope, its rows and their ?X records, its
/// ?Q record, its archive entry and its own ?K record; then, on the last
/// page, every other ?K record of the tenant; and the `source/sinks/<id>`
/// record of every source the page names. A hook with a row that is not a
/// dead letter refuses the page ([`HandoverError::Pending`]): the caller
/// hands over only a tenant with nothing pending here.
///
/// # Errors
/// [`QueueError`] from the engine or a record that does not decode; a
/// [`HandoverError`] inside [`QueueError::Handover`].
pub fn handover_page(
    read: &impl Read,
    tenant: TenantOrd,
    from: Seq,
    limit: usize,
    max_bytes: usize,
) -> Result<HandoverPage, QueueError> {
    let limit = limit.max(1);
    let mut range = hooks_tenant_range(tenant);
    range.start = hook_key(tenant, from).to_vec();
    let hooks = read.scan(Cf::Hooks, &range, Direction::Forward, limit + 1)?;
    let mut next = hooks
        .get(limit)
        .map(|(k, _)| HookKey::decode(k).map(|h| h.seq))
        .transpose()?;
    let mut out = Collected::default();
    let mut sources = BTreeSet::new();
    let mut seqs = Vec::new();
    let mut carried = BTreeSet::new();
    for (k, v) in hooks.iter().take(limit) {
        let seq = HookKey::decode(k)?.seq;
        // The page ends before the hook that would take it past `max_bytes`
        // (it always holds one hook, whatever its size).
        if !seqs.is_empty() && out.bytes + k.len() + v.len() > max_bytes {
            next = Some(seq);
            break;
        }
        let env = Envelope::decode(v)?;
        out.put(Cf::Hooks, k, v);
        sources.insert(env.source);
        for (rk, rv) in read.scan(
            Cf::Deliveries,
            &deliveries_of_hook_range(tenant, seq),
            Direction::Forward,
            usize::from(u16::MAX) + 1,
        )? {
            let row = DeliveryRow::decode(&rv)?;
            if row.state != RowState::Dead {
                return Err(HandoverError::Pending {
                    tenant,
                    seq,
                    state: state_name(row.state),
                }
                .into());
            }
            let sink = DeliveryKey::decode(&rk)?.sink;
            let xk = dead_letter_key(tenant, seq, sink);
            if let Some(xv) = read.get(Cf::Index, &xk)? {
                out.put(Cf::Index, &xk, &xv);
            }
            out.put(Cf::Deliveries, &rk, &rv);
        }
        let qk = quarantined_key(tenant, seq);
        if let Some(qv) = read.get(Cf::Index, &qk)? {
            out.put(Cf::Index, &qk, &qv);
        }
        let ak = archive_key(tenant, env.received_at_ms, seq);
        if let Some(av) = read.get(Cf::Archive, &ak)? {
            out.put(Cf::Archive, &ak, &av);
        }
        if let Some(dk) = &env.dedupe_key {
            let kk = dedupe_key(tenant, env.source, dk);
            if let Some(kv) = read.get(Cf::Index, &kk)?
                && DedupeValue::decode(&kv).is_ok_and(|d| d.seq == seq)
            {
                out.put(Cf::Index, &kk, &kv);
                carried.insert(kk);
            }
        }
        seqs.push(seq);
    }
    // The last page: the dedupe records whose hook is gone. Their hooks
    // were on earlier pages or are gone; a record of a hook still here is
    // carried with it.
    let mut dedupe = Vec::new();
    if next.is_none() {
        for entry in ankusa_engine::scan_pages(
            read,
            Cf::Index,
            tenant_range(Family::Dedupe, tenant),
            Direction::Forward,
            1024,
        ) {
            let (kk, kv) = entry?;
            if carried.contains(kk.as_ref()) {
                continue;
            }
            let d = DedupeValue::decode(&kv)?;
            if read.get(Cf::Hooks, &hook_key(tenant, d.seq))?.is_some() {
                continue;
            }
            sources.insert(DedupeKey::decode(&kk)?.source);
            out.put(Cf::Index, &kk, &kv);
            dedupe.push(kk.to_vec());
        }
    }
    for s in sources {
        let sk = source_sinks_key(s);
        if let Some(v) = read.get(Cf::Meta, &sk)? {
            out.put(Cf::Meta, &sk, &v);
        }
    }
    let records = out
        .records
        .into_iter()
        .map(|((cf, k), v)| (Cf::ALL[cf], k, v))
        .collect();
    Ok(HandoverPage {
        records,
        seqs,
        dedupe,
        next,
    })
}

/// What [`adopt`] stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Adopted {
    /// Hooks, each under a new seq.
    pub hooks: u64,
    /// Dead letters.
    pub dead: u64,
    /// Quarantined hooks.
    pub quarantined: u64,
    /// Dedupe records written (one already here for its key is kept).
    pub dedupe: u64,
}

/// The owner's side of a page ([`handover_page`]'s records, as read from
/// the dump): appends to `batch` every hook under a new seq of this store,
/// from `next_seq` up (advanced past the last one used), with its archive
/// entry, its dead letters (row, ?X, `dead` and `dead_bytes`) under this
/// store's slot of the same sink entry name, its ?Q (`quarantined`); and
/// each dedupe record not already here, naming the hook's new seq (or seq
/// 0, no hook, for a record whose hook was not handed over: a duplicate is
/// then answered without an id, as after retention). A dead letter keeps its
/// attempts, reason and lane (recomputed when its sink's slot differs here),
/// so a revive puts it back in its key's lane.
///
/// Reads this store for the sink slots and the dedupe records; writes
/// nothing of its own. Keeps invariants 1 to 5.
///
/// # Errors
/// [`QueueError::Handover`] for a record of another tenant or family, or a
/// sink entry this store does not have; decode errors.
pub fn adopt(
    read: &impl Read,
    batch: &mut Batch,
    tenant: TenantOrd,
    records: &[Record],
    next_seq: &mut u64,
) -> Result<Adopted, QueueError> {
    let foreign =
        |index: usize, why: String| QueueError::from(HandoverError::Foreign { index, why });
    let mut hooks: BTreeMap<Seq, Vec<u8>> = BTreeMap::new();
    let mut rows: BTreeMap<(Seq, SinkIx), Vec<u8>> = BTreeMap::new();
    let mut dead: BTreeMap<(Seq, SinkIx), Vec<u8>> = BTreeMap::new();
    let mut quarantined: BTreeMap<Seq, Vec<u8>> = BTreeMap::new();
    let mut dedupe: Vec<(DedupeKey, DedupeValue)> = Vec::new();
    let mut names: BTreeMap<SourceId, Vec<String>> = BTreeMap::new();
    for (i, (cf, k, v)) in records.iter().enumerate() {
        let mine = |t: TenantOrd| {
            if t == tenant {
                Ok(())
            } else {
                Err(foreign(i, format!("a record of tenant {t}, not {tenant}")))
            }
        };
        match cf {
            Cf::Hooks => {
                let h = HookKey::decode(k)?;
                mine(h.tenant)?;
                hooks.insert(h.seq, v.clone());
            }
            Cf::Deliveries => {
                let d = DeliveryKey::decode(k)?;
                mine(d.tenant)?;
                rows.insert((d.seq, d.sink), v.clone());
            }
            Cf::Archive => mine(ArchiveKey::decode(k)?.tenant)?,
            Cf::Index => match k.first().and_then(|b| Family::from_byte(*b).ok()) {
                Some(Family::DeadLetter) => {
                    let x = DeadLetterKey::decode(k)?;
                    mine(x.tenant)?;
                    dead.insert((x.seq, x.sink), v.clone());
                }
                Some(Family::Quarantined) => {
                    let q = QuarantinedKey::decode(k)?;
                    mine(q.tenant)?;
                    quarantined.insert(q.seq, v.clone());
                }
                Some(Family::Dedupe) => {
                    let d = DedupeKey::decode(k)?;
                    mine(d.tenant)?;
                    dedupe.push((d, DedupeValue::decode(v)?));
                }
                _ => {
                    return Err(foreign(
                        i,
                        "an index record a hand-over does not carry".into(),
                    ));
                }
            },
            Cf::Meta => match MetaKey::decode(k)? {
                MetaKey::SourceSinks(s) => {
                    names.insert(s, decode_sink_names(v)?);
                }
                _ => {
                    return Err(foreign(
                        i,
                        "a meta record other than a source's sinks".into(),
                    ));
                }
            },
        }
    }
    let mut here: BTreeMap<SourceId, Vec<String>> = BTreeMap::new();
    let mut slot_here = |source: SourceId, sink: SinkIx, seq: Seq| -> Result<SinkIx, QueueError> {
        let name = names
            .get(&source)
            .and_then(|n| n.get(usize::from(sink.0)))
            .cloned()
            .ok_or_else(|| HandoverError::UnknownSink {
                source_id: source,
                sink: format!("slot {}", sink.0),
                seq,
            })?;
        let mine = match here.entry(source) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(match read.get(Cf::Meta, &source_sinks_key(source))? {
                    Some(v) => decode_sink_names(&v)?,
                    None => Vec::new(),
                })
            }
        };
        mine.iter()
            .position(|n| *n == name)
            .and_then(|p| u16::try_from(p).ok())
            .map(SinkIx)
            .ok_or_else(|| {
                HandoverError::UnknownSink {
                    source_id: source,
                    sink: name,
                    seq,
                }
                .into()
            })
    };
    let mut out = Adopted::default();
    let mut new_seqs: BTreeMap<Seq, Seq> = BTreeMap::new();
    let mut next = *next_seq;
    for (old, raw) in &hooks {
        let env = Envelope::decode(raw)?;
        let seq = Seq(next);
        next += 1;
        new_seqs.insert(*old, seq);
        batch.put(Cf::Hooks, hook_key(tenant, seq).to_vec(), raw.clone());
        batch.put(
            Cf::Archive,
            archive_key(tenant, env.received_at_ms, seq).to_vec(),
            Vec::new(),
        );
        for ((_, sink), rv) in rows.range((*old, SinkIx(0))..=(*old, SinkIx(u16::MAX))) {
            let mut row = DeliveryRow::decode(rv)?;
            // Only dead letters are handed over: a row in any other state
            // would be listed in the DLQ while not being one (invariant 1).
            if row.state != RowState::Dead {
                return Err(foreign(
                    0,
                    format!(
                        "the row ({old}, {}) is {}, not a dead letter",
                        sink.0,
                        state_name(row.state)
                    ),
                ));
            }
            let Some(xv) = dead.get(&(*old, *sink)) else {
                return Err(HandoverError::Pending {
                    tenant,
                    seq: *old,
                    state: state_name(row.state),
                }
                .into());
            };
            let to = slot_here(env.source, *sink, *old)?;
            if to != *sink && row.lane.is_some() {
                row.lane = Some(crate::lanes::lane_id(
                    to,
                    env.source,
                    row.ordering_key.as_deref(),
                ));
            }
            // A lane position counts in the old node's lane (its ?S is not
            // handed over): a revive here numbers the row in this node's
            // lane (ADR 0004 section 6, "The lane sequence").
            row.lane_seq = None;
            batch.put(
                Cf::Deliveries,
                delivery_key(tenant, seq, to).to_vec(),
                row.encode(),
            );
            batch.put(
                Cf::Index,
                dead_letter_key(tenant, seq, to).to_vec(),
                xv.clone(),
            );
            count(batch, tenant, CounterField::Dead, 1);
            count(batch, tenant, CounterField::DeadBytes, i64::from(row.size));
            out.dead += 1;
        }
        if let Some(qv) = quarantined.get(old) {
            batch.put(Cf::Index, quarantined_key(tenant, seq).to_vec(), qv.clone());
            count(batch, tenant, CounterField::Quarantined, 1);
            out.quarantined += 1;
        }
        out.hooks += 1;
    }
    for (seq, sink) in rows.keys() {
        if !hooks.contains_key(seq) {
            return Err(foreign(
                0,
                format!("a row ({seq}, {}) without its hook", sink.0),
            ));
        }
    }
    for (k, mut v) in dedupe {
        let key = dedupe_key(tenant, k.source, &k.dedupe_key);
        if read.get(Cf::Index, &key)?.is_some() {
            continue;
        }
        v.seq = new_seqs.get(&v.seq).copied().unwrap_or(Seq(0));
        batch.put(Cf::Index, key, v.encode().to_vec());
        out.dedupe += 1;
    }
    *next_seq = next;
    Ok(out)
}

/// The old node's side, once the owner committed a page: deletes the
/// page's hooks (`seqs`: envelope, archive entry, attempt log, rows and
/// their ?X, ?Q, the hook's own ?K) and the dedupe records `dedupe` the page carried
/// without their hook, with the counters they held. Only dead letters are
/// deleted (a hook with another row is left whole: [`handover_page`]
/// refused it).
///
/// # Errors
/// Engine and decode errors.
pub fn handed_over(
    read: &impl Read,
    tenant: TenantOrd,
    seqs: &[Seq],
    dedupe: &[Vec<u8>],
) -> Result<Batch, QueueError> {
    let mut batch = Batch::new();
    for &seq in seqs {
        let rows = read.scan(
            Cf::Deliveries,
            &deliveries_of_hook_range(tenant, seq),
            Direction::Forward,
            usize::from(u16::MAX) + 1,
        )?;
        let decoded = rows
            .iter()
            .map(|(k, v)| Ok((DeliveryKey::decode(k)?.sink, DeliveryRow::decode(v)?)))
            .collect::<Result<Vec<_>, QueueError>>()?;
        if decoded.iter().any(|(_, r)| r.state != RowState::Dead) {
            continue;
        }
        for (sink, row) in decoded {
            batch.delete(Cf::Deliveries, delivery_key(tenant, seq, sink).to_vec());
            batch.delete(Cf::Index, dead_letter_key(tenant, seq, sink).to_vec());
            count(&mut batch, tenant, CounterField::Dead, -1);
            count(
                &mut batch,
                tenant,
                CounterField::DeadBytes,
                -i64::from(row.size),
            );
        }
        let qk = quarantined_key(tenant, seq);
        if read.get(Cf::Index, &qk)?.is_some() {
            batch.delete(Cf::Index, qk.to_vec());
            count(&mut batch, tenant, CounterField::Quarantined, -1);
        }
        let hk = hook_key(tenant, seq);
        let Some(raw) = read.get(Cf::Hooks, &hk)? else {
            continue;
        };
        let env = Envelope::decode(&raw)?;
        batch.delete(Cf::Hooks, hk.to_vec());
        // The attempt log stays behind and goes with the envelope
        // (docs/design.md section 3, "The attempt log"): the owner stores the
        // hook under a seq of its own, and its rows start a log of their own.
        crate::attempt_log::delete_hook_log(read, &mut batch, tenant, seq)?;
        batch.delete(
            Cf::Archive,
            archive_key(tenant, env.received_at_ms, seq).to_vec(),
        );
        if let Some(dk) = &env.dedupe_key {
            let kk = dedupe_key(tenant, env.source, dk);
            if let Some(v) = read.get(Cf::Index, &kk)?
                && DedupeValue::decode(&v).is_ok_and(|d| d.seq == seq)
            {
                batch.delete(Cf::Index, kk);
            }
        }
    }
    for kk in dedupe {
        batch.delete(Cf::Index, kk.clone());
    }
    Ok(batch)
}

/// Whether `tenant` has anything a hand-over carries in this store: a hook
/// (the envelopes cover dead letters, quarantine and the archive) or a
/// dedupe record.
///
/// # Errors
/// Engine errors.
pub fn holds_remains(read: &impl Read, tenant: TenantOrd) -> Result<bool, QueueError> {
    Ok(read
        .first(Cf::Hooks, &hooks_tenant_range(tenant), Direction::Forward)?
        .is_some()
        || read
            .first(
                Cf::Index,
                &tenant_range(Family::Dedupe, tenant),
                Direction::Forward,
            )?
            .is_some())
}
