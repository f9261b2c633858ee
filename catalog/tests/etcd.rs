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
