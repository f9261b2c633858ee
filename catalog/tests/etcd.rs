//! The catalog client against a real etcd member (Debian's `etcd-server`,
//! which `.ci/run` installs), started by each test on free loopback ports in
//! its own directory and killed when the test ends.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ankusa_catalog::{CatalogError, Etcd};

/// Every wait of this file: generous, never a measure of speed.
const WAIT: Duration = Duration::from_secs(60);

/// One etcd member of its own.
struct Member {
    child: Child,
    client: String,
    _dir: tempfile::TempDir,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Member {
    async fn start() -> Member {
        let dir = tempfile::tempdir().expect("tempdir");
        let (client_port, peer_port) = (free_port(), free_port());
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let child = Command::new("etcd")
            .arg("--name")
            .arg("m1")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("m1={peer}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd (Debian's etcd-server; `bash .ci/run` installs it)");
        let member = Member {
            child,
            client,
            _dir: dir,
        };
        let etcd = member.etcd();
        let deadline = Instant::now() + WAIT;
        while etcd.get(b"ready?").await.is_err() {
            assert!(
                Instant::now() < deadline,
                "etcd did not answer within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        member
    }

    fn etcd(&self) -> Etcd {
        Etcd::new(std::slice::from_ref(&self.client), Duration::from_secs(10)).expect("client")
    }
}

/// Put, get and a prefix read give back what was put, in key order, with
/// the revisions etcd assigned; a prefix read stops at the prefix's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_and_prefix_read_what_was_put() {
    let m = Member::start().await;
    let etcd = m.etcd();
    assert_eq!(etcd.get(b"tenants/acme").await.expect("get"), None);
    let r1 = etcd.put(b"tenants/acme", b"n1", None).await.expect("put");
    let r2 = etcd.put(b"tenants/beta", b"n2", None).await.expect("put");
    etcd.put(b"tenants0", b"past the prefix", None)
        .await
        .expect("put");
    assert!(r2 > r1, "revisions {r1} then {r2}");
    let acme = etcd.get(b"tenants/acme").await.expect("get").expect("acme");
    assert_eq!(
        (acme.value.as_slice(), acme.mod_revision, acme.lease),
        (&b"n1"[..], r1, 0)
    );
    let all = etcd.prefix(b"tenants/").await.expect("prefix");
    let keys: Vec<&[u8]> = all.iter().map(|e| e.key.as_slice()).collect();
    assert_eq!(keys, [&b"tenants/acme"[..], &b"tenants/beta"[..]]);
}

/// `put_if` is one change of ownership: it creates a key only if absent,
/// replaces it only at the revision the writer read, and a writer holding a
/// stale revision loses and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_if_lets_exactly_one_of_two_writers_win() {
    let m = Member::start().await;
    let etcd = m.etcd();
    let created = etcd
        .put_if(b"tenants/acme", b"owner=n1 epoch=1", 0, None)
        .await
        .expect("txn");
    let created = created.expect("the first create wins");
    assert_eq!(
        etcd.put_if(b"tenants/acme", b"owner=n2 epoch=1", 0, None)
            .await
            .expect("txn"),
        None,
        "a second create must lose"
    );
    // Two controllers read the same revision; the first to write wins.
    let read = etcd
        .get(b"tenants/acme")
        .await
        .expect("get")
        .expect("entry");
    assert_eq!(read.mod_revision, created);
    let won = etcd
        .put_if(
            b"tenants/acme",
            b"owner=n2 epoch=2",
            read.mod_revision,
            None,
        )
        .await
        .expect("txn");
    assert!(won.is_some());
    let lost = etcd
        .put_if(
            b"tenants/acme",
            b"owner=n3 epoch=2",
            read.mod_revision,
            None,
        )
        .await
        .expect("txn");
    assert_eq!(lost, None);
    let now = etcd
        .get(b"tenants/acme")
        .await
        .expect("get")
        .expect("entry");
    assert_eq!(now.value, b"owner=n2 epoch=2");
    assert_eq!(Some(now.mod_revision), won);
}

/// A node's record lives under its lease: renewing keeps it, revoking
/// deletes it at once, and a lease left to expire deletes its keys and can
/// no longer be renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_keeps_its_keys_until_revoked_or_expired() {
    let m = Member::start().await;
    let etcd = m.etcd();
    let lease = etcd.grant(2).await.expect("grant");
    assert!(lease.ttl_s >= 2, "{lease:?}");
    etcd.put(b"nodes/n1", b"127.0.0.1:8080", Some(lease.id))
        .await
        .expect("put");
    assert_eq!(
        etcd.get(b"nodes/n1")
            .await
            .expect("get")
            .expect("record")
            .lease,
        lease.id
    );
    assert!(etcd.keep_alive(lease.id).await.expect("renew").is_some());
    etcd.revoke(lease.id).await.expect("revoke");
    assert_eq!(etcd.get(b"nodes/n1").await.expect("get"), None);

    let lease = etcd.grant(2).await.expect("grant");
    etcd.put(b"nodes/n2", b"127.0.0.1:8082", Some(lease.id))
        .await
        .expect("put");
    let deadline = Instant::now() + WAIT;
    while etcd.get(b"nodes/n2").await.expect("get").is_some() {
        assert!(
            Instant::now() < deadline,
            "the lease's key outlived {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(etcd.keep_alive(lease.id).await.expect("renew"), None);
}

/// A member that does not answer costs its connection error, not the call:
/// the next endpoint answers. With none answering, the error names each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_is_passed_over_and_none_answering_is_unreachable() {
    let m = Member::start().await;
    let dead = format!("http://127.0.0.1:{}", free_port());
    let etcd =
        Etcd::new(&[dead.clone(), m.client.clone()], Duration::from_secs(10)).expect("client");
    etcd.put(b"k", b"v", None)
        .await
        .expect("the live member answers");
    assert_eq!(
        etcd.get(b"k").await.expect("get").expect("entry").value,
        b"v"
    );
    let none = Etcd::new(std::slice::from_ref(&dead), Duration::from_secs(10)).expect("client");
    match none.get(b"k").await {
        Err(CatalogError::Unreachable(why)) => assert!(why.contains(&dead), "{why}"),
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

mod cluster {
    use std::collections::BTreeMap;

    use ankusa_catalog::cluster::{
        Catalog, ConfigRecord, JoinError, NodeRecord, Numbered, TenantRecord, assign,
    };

    use super::Member;

    fn record(addr: &str) -> NodeRecord {
        NodeRecord {
            addr: addr.into(),
            draining: false,
            config: "h1".into(),
            tenants: Vec::new(),
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A node id is one live node's; a second node with it is refused,
    /// naming the first one's address; once the first's lease is gone the
    /// id is free again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_id_belongs_to_one_live_node() {
        let m = Member::start().await;
        let cat = Catalog::new(m.etcd(), "c1");
        let l1 = cat.etcd().grant(30).await.expect("lease").id;
        let l2 = cat.etcd().grant(30).await.expect("lease").id;
        cat.join("n1", &record("127.0.0.1:1"), l1)
            .await
            .expect("joins");
        // The same node again (its own lease): fine.
        cat.join("n1", &record("127.0.0.1:1"), l1)
            .await
            .expect("again");
        let e = cat
            .join("n1", &record("127.0.0.1:2"), l2)
            .await
            .expect_err("taken");
        assert_eq!(
            e.to_string(),
            "node_id n1 is in use by a live node at 127.0.0.1:1: each node needs its own node_id"
        );
        cat.etcd().revoke(l1).await.expect("revoke");
        cat.join("n1", &record("127.0.0.1:2"), l2)
            .await
            .expect("free again");
        let snap = cat.snapshot().await.expect("snapshot");
        assert_eq!(snap.nodes["n1"], (record("127.0.0.1:2"), l2));
        // Another cluster's name is another prefix: nothing shared.
        let other = Catalog::new(m.etcd(), "c2");
        assert!(other.snapshot().await.expect("snapshot").nodes.is_empty());
    }

    /// The first node publishes the configuration; one with another is
    /// refused naming the parts that differ.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_with_another_configuration_is_refused_by_part() {
        let m = Member::start().await;
        let cat = Catalog::new(m.etcd(), "c1");
        let mine = ConfigRecord {
            hash: "A".into(),
            parts: [
                ("retry".into(), "r1".into()),
                ("sources.s".into(), "s1".into()),
            ]
            .into(),
        };
        cat.check_config(&mine).await.expect("first publishes");
        cat.check_config(&mine).await.expect("same passes");
        let theirs = ConfigRecord {
            hash: "B".into(),
            parts: [
                ("retry".into(), "r1".into()),
                ("sources.s".into(), "s2".into()),
            ]
            .into(),
        };
        let e = cat.check_config(&theirs).await.expect_err("differs");
        assert!(
            matches!(&e, JoinError::ConfigDiffers { parts } if parts == &["sources.s"]),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("this node's configuration differs from the cluster's in sources.s:")
        );
    }

    /// Numbers are global: the first node numbers its names; a second one
    /// gets the same numbers; a standalone store joins if its numbers are
    /// free, and is refused by name when one is another name's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn names_get_one_number_in_the_whole_cluster() {
        let m = Member::start().await;
        let cat = Catalog::new(m.etcd(), "c1");
        let none = BTreeMap::new();
        let got = cat
            .number(Numbered::Tenant, &names(&["acme", "globex"]), &none)
            .await
            .expect("numbers");
        assert_eq!(got, [("acme".into(), 1), ("globex".into(), 2)].into());
        let again = cat
            .number(Numbered::Tenant, &names(&["globex", "acme"]), &none)
            .await
            .expect("numbers");
        assert_eq!(again, got);
        // A store that already has initech as 7: it keeps 7; the next new
        // name gets 8.
        let local: BTreeMap<String, u32> = [("initech".into(), 7)].into();
        let got = cat
            .number(Numbered::Tenant, &names(&["initech", "hooli"]), &local)
            .await
            .expect("numbers");
        assert_eq!(got, [("initech".into(), 7), ("hooli".into(), 8)].into());
        // A store where acme is 2 (globex's in the cluster).
        let local: BTreeMap<String, u32> = [("acme".into(), 2)].into();
        let e = cat
            .number(Numbered::Tenant, &names(&["acme"]), &local)
            .await
            .expect_err("conflict");
        assert!(
            e.to_string().starts_with(
                "tenant acme is number 2 in this node's store and number 1 in the cluster"
            ),
            "{e}"
        );
        // A store where umbrella is 1 (acme's in the cluster).
        let local: BTreeMap<String, u32> = [("umbrella".into(), 1)].into();
        let e = cat
            .number(Numbered::Tenant, &names(&["umbrella"]), &local)
            .await
            .expect_err("conflict");
        assert!(
            e.to_string().starts_with(
                "tenant umbrella is number 1 in this node's store, which is tenant acme's in the cluster"
            ),
            "{e}"
        );
        // Sources are numbered apart from tenants.
        let s = cat
            .number(Numbered::Source, &names(&["stripe"]), &none)
            .await
            .expect("numbers");
        assert_eq!(s, [("stripe".into(), 1)].into());
        let snap = cat.snapshot().await.expect("snapshot");
        assert_eq!(snap.sources, [("stripe".into(), 1)].into());
        assert_eq!(snap.tenants["hooli"].0.ord, 8);
    }

    /// One controller at a time, freed with its node's lease; its
    /// assignments are compared on the tenant's revision, so a stale one
    /// writes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_controller_assigns_and_a_stale_assignment_writes_nothing() {
        let m = Member::start().await;
        let cat = Catalog::new(m.etcd(), "c1");
        let l1 = cat.etcd().grant(30).await.expect("lease").id;
        let l2 = cat.etcd().grant(30).await.expect("lease").id;
        cat.join("n1", &record("127.0.0.1:1"), l1)
            .await
            .expect("joins");
        cat.join("n2", &record("127.0.0.1:2"), l2)
            .await
            .expect("joins");
        assert!(cat.campaign("n1", l1).await.expect("campaign"));
        assert!(!cat.campaign("n2", l2).await.expect("campaign"));
        assert!(cat.campaign("n1", l1).await.expect("still"));
        cat.number(Numbered::Tenant, &names(&["a", "b"]), &BTreeMap::new())
            .await
            .expect("numbers");
        let snap = cat.snapshot().await.expect("snapshot");
        assert_eq!(snap.controller.as_deref(), Some("n1"));
        let plan = assign(&snap);
        assert_eq!(plan.len(), 2);
        for a in &plan {
            assert!(
                cat.set_tenant(&a.tenant, &a.record, a.mod_revision)
                    .await
                    .expect("set")
            );
        }
        // The same plan again is stale: nothing written.
        assert!(
            !cat.set_tenant(&plan[0].tenant, &plan[0].record, plan[0].mod_revision)
                .await
                .expect("set")
        );
        let snap = cat.snapshot().await.expect("snapshot");
        let owners: Vec<(&str, Option<&str>, u64)> = snap
            .tenants
            .iter()
            .map(|(n, (t, _))| (n.as_str(), t.owner.as_deref(), t.epoch))
            .collect();
        assert_eq!(owners, [("a", Some("n1"), 1), ("b", Some("n2"), 1)]);
        // n1 dies: the controller key goes with its lease; n2 is elected and
        // moves a to itself at epoch 2 behind n1's epoch 1.
        cat.etcd().revoke(l1).await.expect("revoke");
        assert!(cat.campaign("n2", l2).await.expect("campaign"));
        let snap = cat.snapshot().await.expect("snapshot");
        let plan = assign(&snap);
        assert_eq!(plan.len(), 1);
        assert!(
            cat.set_tenant(&plan[0].tenant, &plan[0].record, plan[0].mod_revision)
                .await
                .expect("set")
        );
        let (a, _) = &cat.snapshot().await.expect("snapshot").tenants["a"];
        assert_eq!(
            a,
            &TenantRecord {
                ord: 1,
                owner: Some("n2".into()),
                epoch: 2,
                drains: vec![ankusa_catalog::cluster::Drain {
                    node: "n1".into(),
                    epoch: 1,
                    lanes: None,
                }],
                moving: None,
            }
        );
    }
}
