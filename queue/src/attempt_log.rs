//! The attempt log (docs/design.md section 3, "The attempt log"): every
//! attempt of a delivery row, kept as one ?L entry under
//! `?L, ord:32, seq:64, sink:16, attempt:32` with its [`AttemptRecord`], so
//! an operator sees what the destination answered, on a success too.
//!
//! # What it keeps
//! - An attempt's entry is written in the batch of the transition its
//!   outcome makes (retry, delivered, dead-letter, orphan), never alone: an
//!   outcome that is dropped (its row moved on while the call ran) leaves no
//!   entry, and a lost batch loses the entry with the transition.
//! - Each row keeps its last `keep` attempts: the entry of attempt `n` goes in
//!   with the delete of attempt `n - keep`, a blind delete in the same batch
//!   (no read). The number comes from the row's `logged_attempts`, which a
//!   revive does not reset.
//! - A hook's log goes with its envelope: retention, a drop of its last dead
//!   row, a tenant purge and a cluster hand-over delete it; a drop of one dead
//!   row deletes that row's log ([`crate::check_invariants`], invariants 7
//!   and 8).

use std::collections::BTreeMap;

use ankusa_engine::{Batch, Cf, Direction, Read, scan_pages};
use ankusa_keys::{
    AttemptLogKey, AttemptRecord, DeliveryRow, Seq, SinkIx, TenantOrd, attempt_log_hook_range,
    attempt_log_key, attempt_log_row_range,
};

use crate::{QueueError, RowId};

/// Entries a page of a scan of the log reads.
const PAGE: usize = 256;

/// One attempt for the attempt log, as the pipeline hands it to a transition
/// ([`crate::retry_logged`], [`crate::delivered_logged`],
/// [`crate::dead_letter_logged`], [`crate::orphan_logged`]).
#[derive(Clone, Copy, Debug)]
pub struct LogAttempt<'a> {
    /// What the attempt came to.
    pub record: &'a AttemptRecord,
    /// How many of the row's attempts the log keeps
    /// (`node.attempt_log.max_attempts`, at least 1): the entry `keep`
    /// attempts back is deleted in the same batch.
    pub keep: u32,
}

/// Appends attempt `row.logged_attempts + 1` of `id` to `batch` and deletes
/// the entry `log.keep` attempts before it; counts it in the row's
/// `logged_attempts`. The caller puts (or deletes) `row` in the same batch.
pub(crate) fn log_into(batch: &mut Batch, id: RowId, row: &mut DeliveryRow, log: LogAttempt<'_>) {
    // At u32::MAX the last entry is written over: four billion attempts of
    // one row is no real row (the retry horizon ends it long before).
    let n = row.logged_attempts.saturating_add(1);
    row.logged_attempts = n;
    batch.put(
        Cf::Index,
        attempt_log_key(id.tenant, id.seq, id.sink, n),
        log.record.encode(),
    );
    let keep = log.keep.max(1);
    if let Some(old) = n.checked_sub(keep)
        && old > 0
    {
        batch.delete(Cf::Index, attempt_log_key(id.tenant, id.seq, id.sink, old));
    }
}

/// The newest `limit` attempts of row `id`, oldest first, each with its
/// number: one reverse scan of the row's prefix, which stops at the newest
/// entries and never reaches the deleted older ones.
///
/// # Errors
/// Engine errors; a key or a record that does not decode.
pub fn row_attempts(
    read: &impl Read,
    id: RowId,
    limit: usize,
) -> Result<Vec<(u32, AttemptRecord)>, QueueError> {
    let entries = read.scan(
        Cf::Index,
        &attempt_log_row_range(id.tenant, id.seq, id.sink),
        Direction::Reverse,
        limit,
    )?;
    let mut out = entries
        .iter()
        .map(|(k, v)| Ok((AttemptLogKey::decode(k)?.attempt, AttemptRecord::decode(v)?)))
        .collect::<Result<Vec<_>, QueueError>>()?;
    out.reverse();
    Ok(out)
}

/// The attempt logs of every row of hook `seq` of `tenant` (the rows still
/// in the store and the delivered ones, whose log outlives them): per sink,
/// its newest `limit` attempts, oldest first.
///
/// # Errors
/// Engine errors; a key or a record that does not decode.
pub fn hook_attempts(
    read: &impl Read,
    tenant: TenantOrd,
    seq: Seq,
    limit: usize,
) -> Result<BTreeMap<SinkIx, Vec<(u32, AttemptRecord)>>, QueueError> {
    let mut out: BTreeMap<SinkIx, Vec<(u32, AttemptRecord)>> = BTreeMap::new();
    for kv in scan_pages(
        read,
        Cf::Index,
        attempt_log_hook_range(tenant, seq),
        Direction::Reverse,
        PAGE,
    ) {
        let (k, v) = kv?;
        let key = AttemptLogKey::decode(&k)?;
        let row = out.entry(key.sink).or_default();
        if row.len() < limit {
            row.push((key.attempt, AttemptRecord::decode(&v)?));
        }
    }
    for row in out.values_mut() {
        row.reverse();
    }
    Ok(out)
}

/// Appends the delete of every ?L entry of hook `seq` of `tenant` (all its
/// rows') to `batch`: what goes with the hook's envelope. Point deletes of
/// the entries read, so no range tombstone is left per hook. Returns how
/// many.
///
/// # Errors
/// Engine errors.
pub(crate) fn delete_hook_log(
    read: &impl Read,
    batch: &mut Batch,
    tenant: TenantOrd,
    seq: Seq,
) -> Result<usize, QueueError> {
    delete_all(read, batch, attempt_log_hook_range(tenant, seq))
}

/// Appends the delete of every ?L entry of row `id` to `batch` (a drop of a
/// dead row whose hook keeps other rows). Returns how many.
///
/// # Errors
/// Engine errors.
pub(crate) fn delete_row_log(
    read: &impl Read,
    batch: &mut Batch,
    id: RowId,
) -> Result<usize, QueueError> {
    delete_all(
        read,
        batch,
        attempt_log_row_range(id.tenant, id.seq, id.sink),
    )
}

fn delete_all(
    read: &impl Read,
    batch: &mut Batch,
    range: ankusa_engine::KeyRange,
) -> Result<usize, QueueError> {
    let mut n = 0;
    for kv in scan_pages(read, Cf::Index, range, Direction::Forward, PAGE) {
        let (k, _) = kv?;
        batch.delete(Cf::Index, k.to_vec());
        n += 1;
    }
    Ok(n)
}
