//! [`Batch`]: a plain value listing the ops of one atomic write.

use crate::{Cf, EngineError, KeyRange};

/// The longest key any backend stores (fjall's limit, 2^16 - 1 bytes).
pub const MAX_KEY_BYTES: usize = u16::MAX as usize;

/// The longest value any backend stores (fjall's limit, 2^32 - 1 bytes).
pub const MAX_VALUE_BYTES: u64 = u32::MAX as u64;

/// One operation of a [`Batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Sets `key` to `value` in `cf`.
    Put {
        /// Column family.
        cf: Cf,
        /// Key bytes.
        key: Vec<u8>,
        /// Value bytes.
        value: Vec<u8>,
    },
    /// Removes `key` from `cf` (nothing happens when it is absent).
    Delete {
        /// Column family.
        cf: Cf,
        /// Key bytes.
        key: Vec<u8>,
    },
    /// Removes every key of `cf` in `range` (`[start, end)`).
    DeleteRange {
        /// Column family.
        cf: Cf,
        /// The keys to remove.
        range: KeyRange,
    },
    /// Adds `delta` to the counter under `key` in [`crate::COUNTER_CF`]: blind
    /// and commutative, the writer never reads the counter.
    CounterAdd {
        /// Counter key.
        key: Vec<u8>,
        /// Signed amount to add.
        delta: i64,
    },
}

impl Op {
    /// Bytes this op writes: key + value for a put, the key for a delete, both
    /// bounds for a range delete, key + 8 for a counter add.
    pub fn size_bytes(&self) -> u64 {
        (match self {
            Op::Put { key, value, .. } => key.len() + value.len(),
            Op::Delete { key, .. } => key.len(),
            Op::DeleteRange { range, .. } => range.start.len() + range.end.len(),
            Op::CounterAdd { key, .. } => key.len() + 8,
        }) as u64
    }
}

/// The ops of one atomic write, in the order they apply.
///
/// A plain value (docs/contributing.md, "The batch is a plain value"; parity's
/// `DBTransaction`): the pure batch builders of `lanes` and `queue` return one,
/// tests compare them with `assert_eq!`, and each backend turns it into its
/// native batch in one small function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Batch::default()
    }

    /// Appends a put of `value` under `key` in `cf`.
    pub fn put(&mut self, cf: Cf, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(Op::Put {
            cf,
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// Appends a delete of `key` in `cf`.
    pub fn delete(&mut self, cf: Cf, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(Op::Delete {
            cf,
            key: key.into(),
        });
        self
    }

    /// Appends a delete of every key of `cf` in `range`.
    pub fn delete_range(&mut self, cf: Cf, range: KeyRange) -> &mut Self {
        self.ops.push(Op::DeleteRange { cf, range });
        self
    }

    /// Appends a blind add of `delta` to the counter under `key`. A zero delta
    /// is dropped: it would change nothing and cost a write.
    pub fn counter_add(&mut self, key: impl Into<Vec<u8>>, delta: i64) -> &mut Self {
        if delta != 0 {
            self.ops.push(Op::CounterAdd {
                key: key.into(),
                delta,
            });
        }
        self
    }

    /// Appends every op of `other`, after this batch's own.
    pub fn extend(&mut self, other: Batch) -> &mut Self {
        self.ops.extend(other.ops);
        self
    }

    /// The ops, in order.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Takes the ops out, in order.
    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    /// Takes the ops out, in order, with each counter's adds summed into one
    /// [`Op::CounterAdd`] at the place of its first add,
    /// when no other op of the batch touches a key some add names (a put or a
    /// delete of it, a range delete over it); otherwise exactly
    /// [`Batch::into_ops`]. The same write: adds to one key commute, and
    /// nothing else writes that key in the batch.
    ///
    /// Backends write these (a committer's batch of 64 outcomes adds to the
    /// same tenant and node counters 64 times, and RocksDB's merge of each add
    /// looked the key up in the memtable, 10-14% of the relay's CPU in the
    /// 1,000-key load run; fjall read and rewrote the counter per add).
    pub fn into_ops_coalesced(self) -> Vec<Op> {
        use std::collections::HashMap;
        use std::collections::hash_map::Entry;
        // Per counter key: the index of its first add and the sum of its adds.
        let mut first: HashMap<&[u8], (usize, i64)> = HashMap::new();
        let mut repeated = false;
        for (i, op) in self.ops.iter().enumerate() {
            if let Op::CounterAdd { key, delta } = op {
                match first.entry(key.as_slice()) {
                    Entry::Occupied(mut e) => {
                        repeated = true;
                        let sum = &mut e.get_mut().1;
                        *sum = sum.wrapping_add(*delta);
                    }
                    Entry::Vacant(e) => {
                        e.insert((i, *delta));
                    }
                }
            }
        }
        let clash = || {
            self.ops.iter().any(|op| match op {
                Op::Put { cf, key, .. } | Op::Delete { cf, key } => {
                    *cf == crate::COUNTER_CF && first.contains_key(key.as_slice())
                }
                Op::DeleteRange { cf, range } => {
                    *cf == crate::COUNTER_CF
                        && first
                            .keys()
                            .any(|k| *k >= range.start.as_slice() && *k < range.end.as_slice())
                }
                Op::CounterAdd { .. } => false,
            })
        };
        if !repeated || clash() {
            return self.ops;
        }
        // A net zero is still written: the counter exists (at 0) after it, as
        // after the adds one by one.
        let sum_at: HashMap<usize, i64> = first.into_values().collect();
        self.ops
            .into_iter()
            .enumerate()
            .filter_map(|(i, op)| match op {
                Op::CounterAdd { key, .. } => {
                    sum_at.get(&i).map(|&delta| Op::CounterAdd { key, delta })
                }
                other => Some(other),
            })
            .collect()
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when the batch holds no op.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Sum of [`Op::size_bytes`] over the ops: what `bytes_written` counts.
    pub fn size_bytes(&self) -> u64 {
        self.ops.iter().map(Op::size_bytes).sum()
    }

    /// Checks what every backend refuses before writing anything: an empty key,
    /// a key over [`MAX_KEY_BYTES`], a value over [`MAX_VALUE_BYTES`], a range
    /// delete with `start > end`. (An empty range, `start == end`, deletes
    /// nothing.) The limits are the narrowest backend's (fjall's), so a batch
    /// that one backend takes, every backend takes.
    ///
    /// # Errors
    /// [`EngineError::InvalidBatch`] naming the op.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad =
            |i: usize, what: String| Err(EngineError::InvalidBatch(format!("op {i}: {what}")));
        let check_key = |i: usize, key: &[u8]| {
            if key.is_empty() {
                return bad(i, "empty key".into());
            }
            if key.len() > MAX_KEY_BYTES {
                return bad(
                    i,
                    format!(
                        "key of {} bytes, over the {MAX_KEY_BYTES}-byte limit",
                        key.len()
                    ),
                );
            }
            Ok(())
        };
        for (i, op) in self.ops.iter().enumerate() {
            match op {
                Op::Put { key, value, .. } => {
                    check_key(i, key)?;
                    if value.len() as u64 > MAX_VALUE_BYTES {
                        return bad(i, format!("value of {} bytes, over the limit", value.len()));
                    }
                }
                Op::Delete { key, .. } | Op::CounterAdd { key, .. } => check_key(i, key)?,
                Op::DeleteRange { cf, range } if range.start > range.end => {
                    return bad(
                        i,
                        format!(
                            "range delete in {} from {} to {}: start is above end",
                            cf.name(),
                            crate::hex(&range.start),
                            crate::hex(&range.end)
                        ),
                    );
                }
                Op::DeleteRange { .. } => {}
            }
        }
        Ok(())
    }
}

impl From<Vec<Op>> for Batch {
    fn from(ops: Vec<Op>) -> Self {
        Batch { ops }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn into_ops_coalesced_sums_each_counters_adds_at_its_first_place() {
        let mut b = Batch::new();
        b.counter_add(b"pending".to_vec(), 1)
            .put(Cf::Index, b"k1".to_vec(), b"v".to_vec())
            .counter_add(b"bytes".to_vec(), 2048)
            .counter_add(b"pending".to_vec(), 1)
            .counter_add(b"inflight".to_vec(), 1)
            .delete(Cf::Index, b"k2".to_vec())
            .counter_add(b"bytes".to_vec(), 100)
            .counter_add(b"inflight".to_vec(), -1);
        assert_eq!(
            b.into_ops_coalesced(),
            vec![
                Op::CounterAdd {
                    key: b"pending".to_vec(),
                    delta: 2
                },
                Op::Put {
                    cf: Cf::Index,
                    key: b"k1".to_vec(),
                    value: b"v".to_vec()
                },
                Op::CounterAdd {
                    key: b"bytes".to_vec(),
                    delta: 2148
                },
                Op::CounterAdd {
                    key: b"inflight".to_vec(),
                    delta: 0
                },
                Op::Delete {
                    cf: Cf::Index,
                    key: b"k2".to_vec()
                },
            ],
            "inflight nets to zero and is still written"
        );
    }

    #[test]
    fn into_ops_coalesced_keeps_the_order_when_another_op_touches_the_counters() {
        let mut b = Batch::new();
        b.counter_add(b"pending".to_vec(), 1)
            .delete_range(
                crate::COUNTER_CF,
                KeyRange {
                    start: b"a".to_vec(),
                    end: b"z".to_vec(),
                },
            )
            .counter_add(b"pending".to_vec(), 1);
        let ops = b.clone().into_ops();
        assert_eq!(
            b.into_ops_coalesced(),
            ops,
            "a range delete over the counter"
        );
        let mut b = Batch::new();
        b.counter_add(b"pending".to_vec(), 1)
            .put(
                crate::COUNTER_CF,
                b"pending".to_vec(),
                7i64.to_be_bytes().to_vec(),
            )
            .counter_add(b"pending".to_vec(), 1);
        let ops = b.clone().into_ops();
        assert_eq!(b.into_ops_coalesced(), ops, "a put of the counter");
        // A range or a put beside the counter, not over it: summed.
        let mut b = Batch::new();
        b.counter_add(b"pending".to_vec(), 1)
            .delete_range(
                crate::COUNTER_CF,
                KeyRange {
                    start: b"q".to_vec(),
                    end: b"z".to_vec(),
                },
            )
            .put(crate::COUNTER_CF, b"other".to_vec(), b"v".to_vec())
            .counter_add(b"pending".to_vec(), 1);
        assert_eq!(
            b.into_ops_coalesced(),
            vec![
                Op::CounterAdd {
                    key: b"pending".to_vec(),
                    delta: 2
                },
                Op::DeleteRange {
                    cf: crate::COUNTER_CF,
                    range: KeyRange {
                        start: b"q".to_vec(),
                        end: b"z".to_vec()
                    }
                },
                Op::Put {
                    cf: crate::COUNTER_CF,
                    key: b"other".to_vec(),
                    value: b"v".to_vec()
                },
            ]
        );
    }
}
