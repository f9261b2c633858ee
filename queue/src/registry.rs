//! The tenant and source registries (docs/design.md section 3, cf `meta`): stable
//! numbers for the names the configuration uses. Tenant ordinals and source ids
//! are part of every key, so a name keeps its number for the life of the store,
//! whatever the configuration later says; a removed name keeps its entry.

use std::collections::BTreeMap;

use ankusa_engine::{Batch, Cf, Direction, Read, scan_pages};
use ankusa_keys::meta::{
    decode_source_id, decode_tenant_ord, encode_source_id, encode_tenant_ord, source_by_id_key,
    source_by_name_key, source_names_range, tenant_by_name_key, tenant_by_ord_key,
    tenant_names_range,
};
use ankusa_keys::{SourceId, TenantOrd};

use crate::QueueError;

/// The names the store knows and their numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registry {
    /// Tenant name -> ordinal.
    pub tenants: BTreeMap<String, TenantOrd>,
    /// Source name -> id.
    pub sources: BTreeMap<String, SourceId>,
}

impl Registry {
    /// Reads both registries.
    ///
    /// # Errors
    /// Engine and decode errors.
    pub fn read(read: &impl Read) -> Result<Registry, QueueError> {
        let mut reg = Registry::default();
        for kv in scan_pages(
            read,
            Cf::Meta,
            tenant_names_range(),
            Direction::Forward,
            256,
        ) {
            let (k, v) = kv?;
            let name = String::from_utf8_lossy(&k[tenant_names_range().start.len()..]).into_owned();
            reg.tenants.insert(name, decode_tenant_ord(&v)?);
        }
        for kv in scan_pages(
            read,
            Cf::Meta,
            source_names_range(),
            Direction::Forward,
            256,
        ) {
            let (k, v) = kv?;
            let name = String::from_utf8_lossy(&k[source_names_range().start.len()..]).into_owned();
            reg.sources.insert(name, decode_source_id(&v)?);
        }
        Ok(reg)
    }

    /// The tenant's name by ordinal.
    pub fn tenant_name(&self, tenant: TenantOrd) -> Option<&str> {
        self.tenants
            .iter()
            .find(|(_, o)| **o == tenant)
            .map(|(n, _)| n.as_str())
    }

    /// The source's name by id.
    pub fn source_name(&self, source: SourceId) -> Option<&str> {
        self.sources
            .iter()
            .find(|(_, s)| **s == source)
            .map(|(n, _)| n.as_str())
    }
}

/// Registers every name of `tenants` and `sources` the store does not know yet,
/// giving each the next free number (tenants from 1, sources from 1), and
/// returns the batch (both directions of each new entry) and the registry as it
/// will be once the batch commits. Known names keep their numbers.
///
/// # Errors
/// Engine and decode errors; [`QueueError::RegistryFull`] past the last ordinal.
pub fn register<'a>(
    read: &impl Read,
    tenants: impl IntoIterator<Item = &'a str>,
    sources: impl IntoIterator<Item = &'a str>,
) -> Result<(Batch, Registry), QueueError> {
    let mut reg = Registry::read(read)?;
    let mut batch = Batch::new();
    let mut next_ord = reg.tenants.values().map(|o| o.0).max().unwrap_or(0);
    for name in tenants {
        if reg.tenants.contains_key(name) {
            continue;
        }
        let ord = TenantOrd(next_ord)
            .next()
            .ok_or(QueueError::RegistryFull { what: "tenant" })?;
        next_ord = ord.0;
        batch.put(Cf::Meta, tenant_by_name_key(name), encode_tenant_ord(ord));
        batch.put(Cf::Meta, tenant_by_ord_key(ord), name.as_bytes());
        reg.tenants.insert(name.to_owned(), ord);
    }
    let mut next_id = reg.sources.values().map(|s| s.0).max().unwrap_or(0);
    for name in sources {
        if reg.sources.contains_key(name) {
            continue;
        }
        next_id = next_id
            .checked_add(1)
            .ok_or(QueueError::RegistryFull { what: "source" })?;
        let id = SourceId(next_id);
        batch.put(Cf::Meta, source_by_name_key(name), encode_source_id(id));
        batch.put(Cf::Meta, source_by_id_key(id), name.as_bytes());
        reg.sources.insert(name.to_owned(), id);
    }
    Ok((batch, reg))
}

/// Registers each name of `tenants` and `sources` with the number given
/// (a cluster's catalog numbers names for every node: docs/design.md section
/// 11, "The catalog"), and returns the batch and the registry as it will be
/// once the batch commits. A name the store already numbers the same is
/// left alone.
///
/// # Errors
/// Engine and decode errors; [`QueueError::RegistryConflict`] when the store
/// numbers a name otherwise or gives its number to another name (the store
/// is left unchanged).
pub fn register_numbered(
    read: &impl Read,
    tenants: &BTreeMap<String, u32>,
    sources: &BTreeMap<String, u32>,
) -> Result<(Batch, Registry), QueueError> {
    let mut reg = Registry::read(read)?;
    let mut batch = Batch::new();
    for (name, n) in tenants {
        let ord = TenantOrd(*n);
        if ord == TenantOrd::NODE {
            return Err(QueueError::RegistryConflict {
                what: "tenant",
                name: name.clone(),
                number: *n,
                detail: "0 is the node aggregate's number".into(),
            });
        }
        if let Some(conflict) = conflict(
            "tenant",
            name,
            *n,
            reg.tenants.get(name).map(|o| o.0),
            reg.tenant_name(ord),
        ) {
            return Err(conflict);
        }
        if reg.tenants.contains_key(name) {
            continue;
        }
        batch.put(Cf::Meta, tenant_by_name_key(name), encode_tenant_ord(ord));
        batch.put(Cf::Meta, tenant_by_ord_key(ord), name.as_bytes());
        reg.tenants.insert(name.clone(), ord);
    }
    for (name, n) in sources {
        let id = SourceId(*n);
        if let Some(conflict) = conflict(
            "source",
            name,
            *n,
            reg.sources.get(name).map(|s| s.0),
            reg.source_name(id),
        ) {
            return Err(conflict);
        }
        if reg.sources.contains_key(name) {
            continue;
        }
        batch.put(Cf::Meta, source_by_name_key(name), encode_source_id(id));
        batch.put(Cf::Meta, source_by_id_key(id), name.as_bytes());
        reg.sources.insert(name.clone(), id);
    }
    Ok((batch, reg))
}

/// A name's given number against the store's: its own number there
/// (`mine`) and the name that has the number there (`holder`).
fn conflict(
    what: &'static str,
    name: &str,
    number: u32,
    mine: Option<u32>,
    holder: Option<&str>,
) -> Option<QueueError> {
    let detail = match (mine, holder) {
        (Some(m), _) if m != number => format!("number {m}"),
        (_, Some(h)) if h != name => format!("{what} {h}'s number"),
        _ => return None,
    };
    Some(QueueError::RegistryConflict {
        what,
        name: name.to_owned(),
        number,
        detail,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use ankusa_engine::memory::MemoryKv;
    use ankusa_engine::{Durability, Kv};

    use super::*;

    #[test]
    fn names_keep_their_numbers() {
        let kv = MemoryKv::new();
        let (b, reg) = register(&kv, ["acme", "globex"], ["stripe", "github"]).unwrap();
        kv.write(b, Durability::Sync).unwrap();
        assert_eq!(reg.tenants["acme"], TenantOrd(1));
        assert_eq!(reg.tenants["globex"], TenantOrd(2));
        assert_eq!(reg.sources["stripe"], SourceId(1));
        assert_eq!(reg.sources["github"], SourceId(2));
        // A later config drops globex and adds initech: acme keeps 1, initech gets 3.
        let (b, reg) = register(&kv, ["initech", "acme"], ["shopify"]).unwrap();
        kv.write(b, Durability::Sync).unwrap();
        assert_eq!(reg.tenants["acme"], TenantOrd(1));
        assert_eq!(reg.tenants["initech"], TenantOrd(3));
        assert_eq!(reg.sources["shopify"], SourceId(3));
        assert_eq!(Registry::read(&kv).unwrap(), reg);
        assert_eq!(reg.tenant_name(TenantOrd(3)), Some("initech"));
        assert_eq!(reg.source_name(SourceId(2)), Some("github"));
        // Nothing new: an empty batch.
        let (b, _) = register(&kv, ["acme"], ["stripe"]).unwrap();
        assert!(b.is_empty());
    }

    #[test]
    fn numbered_names_take_the_numbers_given_or_are_refused() {
        let kv = MemoryKv::new();
        let (b, _) = register(&kv, ["acme"], ["stripe"]).unwrap();
        kv.write(b, Durability::Sync).unwrap();
        let t: BTreeMap<String, u32> = [("acme".into(), 1), ("globex".into(), 9)].into();
        let s: BTreeMap<String, u32> = [("stripe".into(), 1), ("github".into(), 4)].into();
        let (b, reg) = register_numbered(&kv, &t, &s).unwrap();
        kv.write(b, Durability::Sync).unwrap();
        assert_eq!(reg.tenants["globex"], TenantOrd(9));
        assert_eq!(reg.sources["github"], SourceId(4));
        assert_eq!(Registry::read(&kv).unwrap(), reg);
        // A name numbered otherwise here, and a number that is another
        // name's here: refused, naming both.
        let t: BTreeMap<String, u32> = [("acme".into(), 2)].into();
        let e = register_numbered(&kv, &t, &BTreeMap::new()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tenant acme is number 2 in the cluster, but number 1 in this store"
        );
        let s: BTreeMap<String, u32> = [("shopify".into(), 4)].into();
        let e = register_numbered(&kv, &BTreeMap::new(), &s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "source shopify is number 4 in the cluster, but source github's number in this store"
        );
        let t: BTreeMap<String, u32> = [("zero".into(), 0)].into();
        assert!(matches!(
            register_numbered(&kv, &t, &BTreeMap::new()),
            Err(QueueError::RegistryConflict { .. })
        ));
    }
}
