//! Pause and resume (docs/design.md section 5, "Pause"): the held band of ?D and
//! the runtime pause registry in `meta`.
//!
//! A paused source or sink entry still takes hooks (the edge commits them as
//! usual); what it stops is delivery. The pipeline does not claim a paused
//! sink's due rows: it moves each one it meets into the *held band* of ?D
//! ([`hold`]: the same key with [`ankusa_keys::HELD_DUE_BIT`] set in its due
//! time), where no due scan reads it again and where it does not keep its
//! tenant active, so a paused sink's backlog costs the other sinks of the
//! tenant nothing after it was held once. A held lane head stays its lane's
//! head (?H names it, its members stay in ?O), so the lane keeps its order and
//! nothing behind it moves. A resume ([`unhold`]) moves the held rows of the
//! sinks no longer paused back to the due time they had, with the tenant's ?A.
//!
//! The runtime control (the admin API) persists its pauses in `meta`
//! ([`set_pause`], [`clear_pause`], [`read_pauses`]) so a pause survives a
//! restart; the configuration's `paused: true` is the other source of pauses,
//! and a sink is paused when either says so.

use std::collections::{BTreeMap, HashMap};

use ankusa_engine::{Batch, Cf, Direction, Read, scan_pages};
use ankusa_keys::meta::{MetaKey, PauseTarget, PausedValue, paused_key, paused_range};
use ankusa_keys::{
    DueKey, DueValue, EMPTY_VALUE, Envelope, Seq, SinkIx, SourceId, TenantOrd, active_key, due_key,
    held_due_ms, held_due_range, hook_key,
};

use crate::{Cursor, Page, QueueError, RowId};

/// The runtime pauses the store holds: what is paused, since when and why.
pub type PauseMap = BTreeMap<PauseTarget, PausedValue>;

/// Hold (docs/design.md section 5, "Pause"): moves the ?D key `due` of a row whose
/// source or sink is paused into the held band (`due_ms` with
/// [`ankusa_keys::HELD_DUE_BIT`] set, the time kept), with the same value.
/// Nothing else changes: the row stays `Due`, a lane head stays its lane's head
/// and its members stay, and no counter moves (a kind 3 head still counts in
/// lanes_blocked: it is still blocked).
///
/// Precondition: `due` is in ?D and not held (debug-asserted). Keeps every
/// invariant: the row is still in exactly one place (?D), its lane still has
/// one row in ?D/?F, and invariant 4 asks an ?A only for rows that are not
/// held.
///
/// # Errors
/// [`QueueError::NotInState`] when `due` is not in ?D; engine and decode
/// errors.
pub fn hold(read: &impl Read, due: DueKey) -> Result<Batch, QueueError> {
    debug_assert!(!due.is_held(), "hold of a held row {due:?}");
    let key = due.encode();
    let raw = read.get(Cf::Index, &key)?.ok_or(QueueError::NotInState {
        row: RowId::new(due.tenant, due.seq, due.sink),
        expected: "due",
    })?;
    DueValue::decode(&raw)?;
    let mut batch = Batch::new();
    batch.delete(Cf::Index, key);
    batch.put(
        Cf::Index,
        due_key(due.tenant, held_due_ms(due.due_ms), due.seq, due.sink),
        raw.to_vec(),
    );
    Ok(batch)
}

/// Resume (docs/design.md section 5, "Pause"): examines up to `limit` of `tenant`'s
/// held rows (in the order of their kept due time), and moves each whose
/// `(source, sink)` `still_paused` refuses back to the due time it had, with
/// the tenant's ?A; resumable through [`Page::next`]. A held row whose envelope
/// is gone is moved back too (the pipeline then dead-letters it as an orphan).
/// The source of a row is read from its envelope (once per hook per call).
///
/// Precondition: none beyond the pipeline being the only task that moves ?D
/// rows. Keeps every invariant (each moved row gets its ?A: invariant 4).
///
/// # Errors
/// Engine and decode errors.
pub fn unhold(
    read: &impl Read,
    tenant: TenantOrd,
    still_paused: impl Fn(SourceId, SinkIx) -> bool,
    cursor: Option<&Cursor>,
    limit: usize,
) -> Result<Page, QueueError> {
    let mut range = held_due_range(tenant);
    if let Some(c) = cursor
        && c.key.as_slice() > range.start.as_slice()
    {
        range.start.clone_from(&c.key);
    }
    let mut page = Page::default();
    if limit == 0 {
        page.next = Some(Cursor {
            phase: 0,
            key: range.start,
        });
        return Ok(page);
    }
    let entries = read.scan(Cf::Index, &range, Direction::Forward, limit)?;
    let mut sources: HashMap<Seq, Option<SourceId>> = HashMap::new();
    for (k, v) in &entries {
        let dk = DueKey::decode(k)?;
        let source = held_source(read, tenant, dk.seq, &mut sources)?;
        if source.is_some_and(|s| still_paused(s, dk.sink)) {
            continue;
        }
        page.batch.delete(Cf::Index, k.to_vec());
        page.batch.put(
            Cf::Index,
            due_key(tenant, dk.unheld_due_ms(), dk.seq, dk.sink),
            v.to_vec(),
        );
        page.moved += 1;
    }
    if page.moved > 0 {
        page.batch.put(Cf::Index, active_key(tenant), EMPTY_VALUE);
    }
    page.next = match entries.last() {
        Some((last, _)) if entries.len() == limit => {
            let mut key = last.to_vec();
            key.push(0);
            Some(Cursor { phase: 0, key })
        }
        _ => None,
    };
    Ok(page)
}

/// The source of held row `seq`'s hook, from its envelope (read once per hook
/// per call: `seen`); `None` when the envelope is gone.
fn held_source(
    read: &impl Read,
    tenant: TenantOrd,
    seq: Seq,
    seen: &mut HashMap<Seq, Option<SourceId>>,
) -> Result<Option<SourceId>, QueueError> {
    if let Some(s) = seen.get(&seq) {
        return Ok(*s);
    }
    let s = match read.get(Cf::Hooks, &hook_key(tenant, seq))? {
        Some(raw) => Some(Envelope::peek_source(&raw)?),
        None => None,
    };
    seen.insert(seq, s);
    Ok(s)
}

/// One page of [`unhold_sink`]: the batch, the rows it moves back and where
/// the next page starts.
#[derive(Debug, Default)]
pub struct SinkUnhold {
    /// Deletes of the held keys and puts of the due keys (with the tenant's ?A
    /// when a row moves).
    pub batch: Batch,
    /// Rows moved back to due.
    pub moved: usize,
    /// The lowest due time (unix ms) of a moved row: the dispatcher lowers its
    /// low-water cursor to it (the rows come back at the due times they had).
    pub min_due_ms: Option<u64>,
    /// Where the next page starts (the key after the last row moved, or after
    /// the last entry examined); `None` when the held band ended.
    pub next: Option<Vec<u8>>,
}

/// Overflow release (docs/design.md section 5, "A sink's backlog held back"):
/// moves back to due at most `budget` of `tenant`'s held rows of sink entry
/// `(source, sink)`, examining at most `examine` held entries from `from`
/// (the band's start when `None`), in the order of their kept due time.
/// Rows of other sink entries (a pause's, another entry's overflow) stay held.
/// The source of a row is read from its envelope; a held row whose envelope is
/// gone stays for [`unhold`] (which moves it back for the orphan check).
///
/// Precondition: the entry is not paused (the caller checks). Keeps every
/// invariant, as [`unhold`] does (each moved row gets its tenant's ?A).
///
/// # Errors
/// Engine and decode errors.
pub fn unhold_sink(
    read: &impl Read,
    tenant: TenantOrd,
    entry: (SourceId, SinkIx),
    from: Option<&[u8]>,
    examine: usize,
    budget: usize,
) -> Result<SinkUnhold, QueueError> {
    let mut range = held_due_range(tenant);
    if let Some(k) = from
        && k > range.start.as_slice()
    {
        range.start = k.to_vec();
    }
    let mut out = SinkUnhold::default();
    if budget == 0 || examine == 0 {
        out.next = Some(range.start);
        return Ok(out);
    }
    let entries = read.scan(Cf::Index, &range, Direction::Forward, examine)?;
    let mut sources: HashMap<Seq, Option<SourceId>> = HashMap::new();
    let mut last_examined: Option<&[u8]> = None;
    for (k, v) in &entries {
        last_examined = Some(k);
        let dk = DueKey::decode(k)?;
        if dk.sink != entry.1 {
            continue;
        }
        if held_source(read, tenant, dk.seq, &mut sources)? != Some(entry.0) {
            continue;
        }
        let due_ms = dk.unheld_due_ms();
        out.batch.delete(Cf::Index, k.to_vec());
        out.batch.put(
            Cf::Index,
            due_key(tenant, due_ms, dk.seq, dk.sink),
            v.to_vec(),
        );
        out.moved += 1;
        out.min_due_ms = Some(out.min_due_ms.map_or(due_ms, |m| m.min(due_ms)));
        if out.moved == budget {
            break;
        }
    }
    if out.moved > 0 {
        out.batch.put(Cf::Index, active_key(tenant), EMPTY_VALUE);
    }
    out.next = match last_examined {
        Some(last) if out.moved == budget || entries.len() == examine => {
            let mut key = last.to_vec();
            key.push(0);
            Some(key)
        }
        _ => None,
    };
    Ok(out)
}

/// A runtime pause of `target` (the admin API's), persisted in `meta` so it
/// survives a restart: the batch puts `pause/...` with when and why. Blind put;
/// pausing what is paused replaces the reason and time.
pub fn set_pause(target: PauseTarget, since_ms: u64, reason: &str) -> Batch {
    let mut batch = Batch::new();
    batch.put(
        Cf::Meta,
        paused_key(target),
        PausedValue {
            since_ms,
            reason: reason.to_owned(),
        }
        .encode(),
    );
    batch
}

/// The end of a runtime pause of `target`: the batch deletes `pause/...`. A
/// pause the configuration sets (`paused: true`) is not in the store and stays.
pub fn clear_pause(target: PauseTarget) -> Batch {
    let mut batch = Batch::new();
    batch.delete(Cf::Meta, paused_key(target));
    batch
}

/// Every runtime pause the store holds.
///
/// # Errors
/// Engine and decode errors.
pub fn read_pauses(read: &impl Read) -> Result<PauseMap, QueueError> {
    let mut out = PauseMap::new();
    for kv in scan_pages(read, Cf::Meta, paused_range(), Direction::Forward, 256) {
        let (k, v) = kv?;
        let MetaKey::Paused(target) = MetaKey::decode(&k)? else {
            continue;
        };
        out.insert(target, PausedValue::decode(&v)?);
    }
    Ok(out)
}
