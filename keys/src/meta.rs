//! Keys and values of the `meta` column family (docs/design.md sections 3 and 8): the
//! store format, the node id, the seq high-water mark, and the two registries.
//!
//! | key | value |
//! | --- | --- |
//! | [`FORMAT_KEY`] `format` | store format, `u32` ([`STORE_FORMAT`] for a store this binary writes) |
//! | [`MIGRATION_KEY`] `migration` | present only while a format migration is in the middle: where it stopped ([`MigrationProgress`]; docs/design.md section 8) |
//! | [`NODE_ID_KEY`] `node_id` | the node id, 16 bytes, fixed when the store is created |
//! | [`SEQ_HIGH_WATER_KEY`] `seq_high_water` | the highest seq assigned, `u64` (written in the Writer's batch) |
//! | [`ORIGIN_KEY`] `origin` | the backend a store loaded from a dump was first exported from, ASCII (`ankusa store import` writes it; a dump's header carries it instead of a record: docs/design.md section 8) |
//! | `tenant/name/` name | the tenant's ordinal, `u32` |
//! | `tenant/ord/` ord:32 | the tenant's name, UTF-8 |
//! | `source/name/` name | the source's number ([`SourceId`]), `u32` |
//! | `source/id/` id:32 | the source's name (its id in the configuration), UTF-8 |
//! | `source/sinks/` id:32 | the names of the source's sink entries by slot (the `sink:16` of its rows), `~name` for a retired slot ([`encode_sink_names`]; docs/design.md section 5, "Unconfigured sources and sinks") |
//! | `pause/` id:32 | the source is paused by the runtime control (the admin API): [`PausedValue`] |
//! | `pause/` id:32, sink:16 | one sink entry of the source is paused by the runtime control: [`PausedValue`] |
//! | `job/` id:64 | an admin job (docs/design.md section 5, "Admin API"): its state, versioned JSON written and read by `ankusa_admin::jobs` |
//! | `purge/` ord:32 | the tenant is being purged by admin job `job:64` ([`encode_purge`]): the Writer refuses its hooks and the pipeline leaves it alone until the job ends (docs/design.md section 5, "Purge a tenant") |
//!
//! Meta keys are readable text prefixes (a dump shows what they are); the
//! ordinals and source numbers in them are big endian like every other key, so
//! the `.../ord/` and `.../id/` ranges list in number order. Meta is small and
//! read by point gets and whole-registry scans at boot; it has no sentinels.

use ankusa_engine::KeyRange;

use crate::codec::value_len;
use crate::error::{KeyError, ValueError};
use crate::ids::{Seq, SinkIx, SourceId, TenantOrd};

/// The store format this binary writes (docs/design.md section 8: format 2 adds ADR
/// 0004's kind 2/3 due values and ?O/?H/?P).
pub const STORE_FORMAT: u32 = 2;

/// Key of the store format stamp; the value is a `u32` ([`encode_format`]).
pub const FORMAT_KEY: &[u8] = b"format";
/// Key of a format migration's progress (docs/design.md section 8): present
/// only between the first and the last batch of a migration step, written in
/// the same batch as each of the step's changes, deleted in the batch that
/// moves [`FORMAT_KEY`]. The value is a [`MigrationProgress`].
pub const MIGRATION_KEY: &[u8] = b"migration";
/// Key of the node id; the value is the id's 16 bytes ([`decode_node_id`]).
pub const NODE_ID_KEY: &[u8] = b"node_id";
/// Key of the seq high-water mark; the value is a `u64` ([`encode_seq_high_water`]).
pub const SEQ_HIGH_WATER_KEY: &[u8] = b"seq_high_water";
/// Key of the origin backend of an imported store; the value is the backend's
/// name (`ankusa_engine::dump`: the dump's header carries it, not a record).
pub const ORIGIN_KEY: &[u8] = b"origin";

const TENANT_BY_NAME: &[u8] = b"tenant/name/";
const TENANT_BY_ORD: &[u8] = b"tenant/ord/";
const SOURCE_BY_NAME: &[u8] = b"source/name/";
const SOURCE_BY_ID: &[u8] = b"source/id/";
const SOURCE_SINKS: &[u8] = b"source/sinks/";
const PAUSE: &[u8] = b"pause/";
const JOB: &[u8] = b"job/";
const PURGE: &[u8] = b"purge/";

fn join(prefix: &[u8], tail: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + tail.len());
    key.extend_from_slice(prefix);
    key.extend_from_slice(tail);
    key
}

/// Key of the tenant registry's name -> ordinal entry: `tenant/name/` + name.
pub fn tenant_by_name_key(name: &str) -> Vec<u8> {
    join(TENANT_BY_NAME, name.as_bytes())
}

/// Key of the tenant registry's ordinal -> name entry: `tenant/ord/` + ord:32.
///
/// # Panics
/// On a reserved ordinal (0 or `u32::MAX`): the registry holds tenants only.
pub fn tenant_by_ord_key(tenant: TenantOrd) -> Vec<u8> {
    assert!(
        tenant.is_tenant(),
        "tenant registry key built with reserved ordinal {}",
        tenant.0
    );
    join(TENANT_BY_ORD, &tenant.0.to_be_bytes())
}

/// Key of the source registry's name -> number entry: `source/name/` + name
/// (the source's id as the configuration spells it).
pub fn source_by_name_key(name: &str) -> Vec<u8> {
    join(SOURCE_BY_NAME, name.as_bytes())
}

/// Key of the source registry's number -> name entry: `source/id/` + id:32.
pub fn source_by_id_key(source: SourceId) -> Vec<u8> {
    join(SOURCE_BY_ID, &source.0.to_be_bytes())
}

/// Every tenant registry entry by name, in name byte order.
pub fn tenant_names_range() -> KeyRange {
    KeyRange::prefix(TENANT_BY_NAME)
}

/// Every tenant registry entry by ordinal, in ordinal order.
pub fn tenant_ords_range() -> KeyRange {
    KeyRange::new(
        join(TENANT_BY_ORD, &TenantOrd::FIRST.0.to_be_bytes()),
        join(TENANT_BY_ORD, &TenantOrd::RESERVED.to_be_bytes()),
    )
}

/// Every source registry entry by name, in name byte order.
pub fn source_names_range() -> KeyRange {
    KeyRange::prefix(SOURCE_BY_NAME)
}

/// Every source registry entry by number, in number order.
pub fn source_ids_range() -> KeyRange {
    KeyRange::prefix(SOURCE_BY_ID)
}

/// Key of a source's sink slots: `source/sinks/` + id:32. The value is the
/// names of its sink entries by slot, the `sink:16` of their rows
/// ([`encode_sink_names`]; `~name` for a retired slot): a start gives each
/// configured entry the slot of its name, and compares the slots with the
/// configuration to learn, without a scan, whether a sink entry may have
/// been removed (docs/design.md section 5, "Unconfigured sources and sinks").
pub fn source_sinks_key(source: SourceId) -> Vec<u8> {
    join(SOURCE_SINKS, &source.0.to_be_bytes())
}

/// Every source's sink list, in source number order.
pub fn source_sinks_range() -> KeyRange {
    KeyRange::prefix(SOURCE_SINKS)
}

/// What a runtime pause applies to (docs/design.md section 5, "Pause").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PauseTarget {
    /// Every sink entry of the source.
    Source(SourceId),
    /// One sink entry of the source.
    Sink(SourceId, SinkIx),
}

impl PauseTarget {
    /// The source the target belongs to.
    pub const fn source(self) -> SourceId {
        match self {
            PauseTarget::Source(s) | PauseTarget::Sink(s, _) => s,
        }
    }
}

/// Key of a runtime pause: `pause/` + source:32 for a source, `pause/` +
/// source:32 + sink:16 for one sink entry. A source's pause sorts right before
/// its sinks' pauses.
pub fn paused_key(target: PauseTarget) -> Vec<u8> {
    match target {
        PauseTarget::Source(s) => join(PAUSE, &s.0.to_be_bytes()),
        PauseTarget::Sink(s, k) => {
            let mut tail = [0u8; 6];
            tail[..4].copy_from_slice(&s.0.to_be_bytes());
            tail[4..].copy_from_slice(&k.0.to_be_bytes());
            join(PAUSE, &tail)
        }
    }
}

/// Every runtime pause, in (source, sink) order.
pub fn paused_range() -> KeyRange {
    KeyRange::prefix(PAUSE)
}

/// Key of admin job `id`: `job/` + id:64 (big endian, so the job range lists
/// in id order and its last entry is the newest job). The value is the job's
/// state, versioned JSON owned by the admin API (`ankusa_admin::jobs`): the
/// job's cursor is advanced in the same batch as the rows it revives or drops,
/// so a crash never repeats a step (docs/design.md section 5, "Admin API").
pub fn job_key(id: u64) -> Vec<u8> {
    join(JOB, &id.to_be_bytes())
}

/// Every admin job entry, in id order.
pub fn jobs_range() -> KeyRange {
    KeyRange::prefix(JOB)
}

/// Key of a tenant's purge mark: `purge/` + ord:32. Present while an admin
/// job purges the tenant (docs/design.md section 5, "Purge a tenant"); the
/// value names the job ([`encode_purge`]).
///
/// # Panics
/// On a reserved ordinal (0 or `u32::MAX`).
pub fn purge_key(tenant: TenantOrd) -> Vec<u8> {
    assert!(
        tenant.is_tenant(),
        "purge mark built with reserved ordinal {}",
        tenant.0
    );
    join(PURGE, &tenant.0.to_be_bytes())
}

/// Every purge mark, in ordinal order.
pub fn purges_range() -> KeyRange {
    KeyRange::prefix(PURGE)
}

/// A decoded key of cf `meta`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MetaKey {
    /// [`FORMAT_KEY`].
    Format,
    /// [`MIGRATION_KEY`].
    Migration,
    /// [`NODE_ID_KEY`].
    NodeId,
    /// [`SEQ_HIGH_WATER_KEY`].
    SeqHighWater,
    /// [`ORIGIN_KEY`].
    Origin,
    /// The tenant registry's entry for this name.
    TenantByName(String),
    /// The tenant registry's entry for this ordinal.
    TenantByOrd(TenantOrd),
    /// The source registry's entry for this name.
    SourceByName(String),
    /// The source registry's entry for this number.
    SourceById(SourceId),
    /// The sink list of this source ([`source_sinks_key`]).
    SourceSinks(SourceId),
    /// A runtime pause ([`paused_key`]).
    Paused(PauseTarget),
    /// Admin job `id` ([`job_key`]).
    Job(u64),
    /// The purge mark of this tenant ([`purge_key`]).
    Purge(TenantOrd),
}

impl MetaKey {
    /// The key bytes.
    ///
    /// # Panics
    /// As [`tenant_by_ord_key`].
    pub fn encode(&self) -> Vec<u8> {
        match self {
            MetaKey::Format => FORMAT_KEY.to_vec(),
            MetaKey::Migration => MIGRATION_KEY.to_vec(),
            MetaKey::NodeId => NODE_ID_KEY.to_vec(),
            MetaKey::SeqHighWater => SEQ_HIGH_WATER_KEY.to_vec(),
            MetaKey::Origin => ORIGIN_KEY.to_vec(),
            MetaKey::TenantByName(name) => tenant_by_name_key(name),
            MetaKey::TenantByOrd(tenant) => tenant_by_ord_key(*tenant),
            MetaKey::SourceByName(name) => source_by_name_key(name),
            MetaKey::SourceById(source) => source_by_id_key(*source),
            MetaKey::SourceSinks(source) => source_sinks_key(*source),
            MetaKey::Paused(target) => paused_key(*target),
            MetaKey::Job(id) => job_key(*id),
            MetaKey::Purge(tenant) => purge_key(*tenant),
        }
    }

    /// Decodes a key of cf `meta`.
    ///
    /// # Errors
    /// [`KeyError::WrongPrefix`] for a key of no kind, [`KeyError::NotUtf8`] for
    /// a name that is not UTF-8, [`KeyError::WrongLength`] for a number that is
    /// not 4 bytes (a job id not 8), [`KeyError::ReservedOrdinal`].
    pub fn decode(key: &[u8]) -> Result<MetaKey, KeyError> {
        if key == FORMAT_KEY {
            return Ok(MetaKey::Format);
        }
        if key == MIGRATION_KEY {
            return Ok(MetaKey::Migration);
        }
        if key == NODE_ID_KEY {
            return Ok(MetaKey::NodeId);
        }
        if key == SEQ_HIGH_WATER_KEY {
            return Ok(MetaKey::SeqHighWater);
        }
        if key == ORIGIN_KEY {
            return Ok(MetaKey::Origin);
        }
        if let Some(name) = key.strip_prefix(TENANT_BY_NAME) {
            return name_of(name, "tenant by name").map(MetaKey::TenantByName);
        }
        if let Some(ord) = key.strip_prefix(TENANT_BY_ORD) {
            let ord = u32::from_be_bytes(number(ord, "tenant by ordinal")?);
            return TenantOrd::checked(ord)
                .map(MetaKey::TenantByOrd)
                .map_err(|_| KeyError::ReservedOrdinal {
                    what: "tenant by ordinal",
                    ord,
                });
        }
        if let Some(name) = key.strip_prefix(SOURCE_BY_NAME) {
            return name_of(name, "source by name").map(MetaKey::SourceByName);
        }
        if let Some(id) = key.strip_prefix(SOURCE_BY_ID) {
            return Ok(MetaKey::SourceById(SourceId(u32::from_be_bytes(number(
                id,
                "source by id",
            )?))));
        }
        if let Some(id) = key.strip_prefix(SOURCE_SINKS) {
            return Ok(MetaKey::SourceSinks(SourceId(u32::from_be_bytes(number(
                id,
                "source sinks",
            )?))));
        }
        if let Some(tail) = key.strip_prefix(PAUSE) {
            return match tail.len() {
                4 => Ok(MetaKey::Paused(PauseTarget::Source(SourceId(
                    u32::from_be_bytes(number(tail, "pause")?),
                )))),
                6 => {
                    let (s, k) = tail.split_at(4);
                    Ok(MetaKey::Paused(PauseTarget::Sink(
                        SourceId(u32::from_be_bytes(number(s, "pause")?)),
                        SinkIx(u16::from_be_bytes([k[0], k[1]])),
                    )))
                }
                found => Err(KeyError::WrongLength {
                    what: "pause",
                    expected: 6,
                    found,
                }),
            };
        }
        if let Some(id) = key.strip_prefix(JOB) {
            let id: [u8; 8] = id.try_into().map_err(|_| KeyError::WrongLength {
                what: "job",
                expected: 8,
                found: id.len(),
            })?;
            return Ok(MetaKey::Job(u64::from_be_bytes(id)));
        }
        if let Some(ord) = key.strip_prefix(PURGE) {
            let ord = u32::from_be_bytes(number(ord, "purge")?);
            return TenantOrd::checked(ord)
                .map(MetaKey::Purge)
                .map_err(|_| KeyError::ReservedOrdinal { what: "purge", ord });
        }
        Err(KeyError::WrongPrefix { what: "meta" })
    }
}

fn name_of(bytes: &[u8], what: &'static str) -> Result<String, KeyError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| KeyError::NotUtf8 { what })
}

fn number(bytes: &[u8], what: &'static str) -> Result<[u8; 4], KeyError> {
    bytes.try_into().map_err(|_| KeyError::WrongLength {
        what,
        expected: 4,
        found: bytes.len(),
    })
}

/// The value under [`FORMAT_KEY`]: `format:32`.
pub fn encode_format(format: u32) -> [u8; 4] {
    format.to_be_bytes()
}

/// Decodes the value under [`FORMAT_KEY`].
///
/// # Errors
/// [`ValueError::WrongLength`].
pub fn decode_format(value: &[u8]) -> Result<u32, ValueError> {
    Ok(u32::from_be_bytes(value_len(value, "store format")?))
}

/// The value under [`MIGRATION_KEY`]: where a format migration step stopped
/// (docs/design.md section 8). Layout: `from:32, to:32, batches:64, rows:64`,
/// then the step's cursor (opaque to this crate, possibly empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationProgress {
    /// The store format the step migrates from (the stamp still in [`FORMAT_KEY`]).
    pub from: u32,
    /// The store format the step migrates to.
    pub to: u32,
    /// Batches of the step committed so far (this one included).
    pub batches: u64,
    /// Rows the step has rewritten so far.
    pub rows: u64,
    /// Where the step's next batch starts (the step's own encoding).
    pub cursor: Vec<u8>,
}

impl MigrationProgress {
    const FIXED: usize = 4 + 4 + 8 + 8;

    /// The value bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::FIXED + self.cursor.len());
        out.extend_from_slice(&self.from.to_be_bytes());
        out.extend_from_slice(&self.to.to_be_bytes());
        out.extend_from_slice(&self.batches.to_be_bytes());
        out.extend_from_slice(&self.rows.to_be_bytes());
        out.extend_from_slice(&self.cursor);
        out
    }

    /// Decodes the value under [`MIGRATION_KEY`].
    ///
    /// # Errors
    /// [`ValueError::Truncated`] when it is shorter than its fixed fields.
    pub fn decode(value: &[u8]) -> Result<MigrationProgress, ValueError> {
        const WHAT: &str = "migration progress";
        if value.len() < Self::FIXED {
            return Err(ValueError::Truncated { what: WHAT });
        }
        let (fixed, cursor) = value.split_at(Self::FIXED);
        let u32_at =
            |i: usize| u32::from_be_bytes([fixed[i], fixed[i + 1], fixed[i + 2], fixed[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&fixed[i..i + 8]);
            u64::from_be_bytes(b)
        };
        Ok(MigrationProgress {
            from: u32_at(0),
            to: u32_at(4),
            batches: u64_at(8),
            rows: u64_at(16),
            cursor: cursor.to_vec(),
        })
    }
}

/// Decodes the value under [`NODE_ID_KEY`].
///
/// # Errors
/// [`ValueError::WrongLength`].
pub fn decode_node_id(value: &[u8]) -> Result<[u8; 16], ValueError> {
    value_len(value, "node id")
}

/// The value under [`SEQ_HIGH_WATER_KEY`]: `seq:64`.
pub fn encode_seq_high_water(seq: Seq) -> [u8; 8] {
    seq.0.to_be_bytes()
}

/// Decodes the value under [`SEQ_HIGH_WATER_KEY`].
///
/// # Errors
/// [`ValueError::WrongLength`].
pub fn decode_seq_high_water(value: &[u8]) -> Result<Seq, ValueError> {
    Ok(Seq(u64::from_be_bytes(value_len(value, "seq high-water")?)))
}

/// The value of a purge mark ([`purge_key`]): the id of the admin job that
/// purges the tenant, `job:64`.
pub fn encode_purge(job: u64) -> [u8; 8] {
    job.to_be_bytes()
}

/// Decodes the value of a purge mark.
///
/// # Errors
/// [`ValueError::WrongLength`].
pub fn decode_purge(value: &[u8]) -> Result<u64, ValueError> {
    Ok(u64::from_be_bytes(value_len(value, "purge mark")?))
}

/// The value of a tenant-by-name entry: `ord:32`.
pub fn encode_tenant_ord(tenant: TenantOrd) -> [u8; 4] {
    tenant.0.to_be_bytes()
}

/// Decodes the value of a tenant-by-name entry.
///
/// # Errors
/// [`ValueError::WrongLength`]; [`ValueError::InvalidField`] for a reserved
/// ordinal.
pub fn decode_tenant_ord(value: &[u8]) -> Result<TenantOrd, ValueError> {
    let ord = u32::from_be_bytes(value_len(value, "tenant by name")?);
    TenantOrd::checked(ord).map_err(|_| ValueError::InvalidField {
        what: "tenant by name",
        field: "ord",
        reason: format!("{ord} is a reserved ordinal"),
    })
}

/// The value of a source-by-name entry: `id:32`.
pub fn encode_source_id(source: SourceId) -> [u8; 4] {
    source.0.to_be_bytes()
}

/// Decodes the value of a source-by-name entry.
///
/// # Errors
/// [`ValueError::WrongLength`].
pub fn decode_source_id(value: &[u8]) -> Result<SourceId, ValueError> {
    Ok(SourceId(u32::from_be_bytes(value_len(
        value,
        "source by name",
    )?)))
}

/// The value of a tenant-by-ordinal or source-by-id entry: the name's UTF-8
/// bytes (encode with `name.as_bytes()`).
///
/// # Errors
/// [`ValueError::InvalidField`] when it is not UTF-8.
pub fn decode_name(value: &[u8]) -> Result<String, ValueError> {
    String::from_utf8(value.to_vec()).map_err(|e| ValueError::InvalidField {
        what: "registry entry",
        field: "name",
        reason: e.to_string(),
    })
}

/// The value of a source's sink list ([`source_sinks_key`]): `count:16`, then
/// per name `len:16, UTF-8 bytes`, in index order.
///
/// # Panics
/// With more than 65,536 names or a name over 65,535 bytes (the configuration
/// allows neither).
pub fn encode_sink_names<S: AsRef<str>>(names: &[S]) -> Vec<u8> {
    let count = u16::try_from(names.len()).expect("at most 65536 sinks per source");
    let mut v = Vec::with_capacity(2 + names.iter().map(|n| 2 + n.as_ref().len()).sum::<usize>());
    v.extend_from_slice(&count.to_be_bytes());
    for n in names {
        let n = n.as_ref().as_bytes();
        let len = u16::try_from(n.len()).expect("a sink name under 64 KiB");
        v.extend_from_slice(&len.to_be_bytes());
        v.extend_from_slice(n);
    }
    v
}

/// Decodes a source's sink list.
///
/// # Errors
/// [`ValueError::Truncated`] when it ends inside a field,
/// [`ValueError::InvalidField`] for a name that is not UTF-8 or bytes after
/// the last name.
pub fn decode_sink_names(value: &[u8]) -> Result<Vec<String>, ValueError> {
    const WHAT: &str = "source sinks";
    let truncated = ValueError::Truncated { what: WHAT };
    let (count, mut rest) = value.split_first_chunk::<2>().ok_or(truncated.clone())?;
    let mut out = Vec::with_capacity(usize::from(u16::from_be_bytes(*count)));
    for _ in 0..u16::from_be_bytes(*count) {
        let (len, tail) = rest.split_first_chunk::<2>().ok_or(truncated.clone())?;
        let len = usize::from(u16::from_be_bytes(*len));
        if tail.len() < len {
            return Err(truncated);
        }
        let (name, tail) = tail.split_at(len);
        out.push(
            String::from_utf8(name.to_vec()).map_err(|e| ValueError::InvalidField {
                what: WHAT,
                field: "name",
                reason: e.to_string(),
            })?,
        );
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(ValueError::InvalidField {
            what: WHAT,
            field: "end",
            reason: format!("{} bytes after the last name", rest.len()),
        });
    }
    Ok(out)
}

/// The value of a runtime pause ([`paused_key`]): when and why.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PausedValue {
    /// When the pause was set, unix milliseconds.
    pub since_ms: u64,
    /// Why, for operators (UTF-8, may be empty).
    pub reason: String,
}

impl PausedValue {
    /// `since_ms:64, reason` (the reason's UTF-8 bytes run to the end).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + self.reason.len());
        v.extend_from_slice(&self.since_ms.to_be_bytes());
        v.extend_from_slice(self.reason.as_bytes());
        v
    }

    /// Decodes a pause value.
    ///
    /// # Errors
    /// [`ValueError::Truncated`] (shorter than 8 bytes),
    /// [`ValueError::InvalidField`] (a reason that is not UTF-8).
    pub fn decode(value: &[u8]) -> Result<PausedValue, ValueError> {
        const WHAT: &str = "pause";
        let (since, reason) = value
            .split_first_chunk::<8>()
            .ok_or(ValueError::Truncated { what: WHAT })?;
        Ok(PausedValue {
            since_ms: u64::from_be_bytes(*since),
            reason: String::from_utf8(reason.to_vec()).map_err(|e| ValueError::InvalidField {
                what: WHAT,
                field: "reason",
                reason: e.to_string(),
            })?,
        })
    }
}
