//! `cluster:` (docs/design.md section 11): defaults, every refusal by option,
//! and the shared parts the catalog compares across nodes.

use ankusa_config::shared_sections;

use crate::helpers::{load, ok, problems};

const SOURCES: &str =
    "sources:\n  - name: stripe\n    sinks: [{type: http, url: 'http://127.0.0.1:9/'}]\n";

fn with_cluster(cluster: &str) -> String {
    format!("node: {{store: rocksdb}}\ncluster:\n{cluster}{SOURCES}")
}

#[test]
fn a_relay_without_cluster_is_standalone() {
    assert_eq!(ok(SOURCES).cluster, None);
}

#[test]
fn defaults_fill_what_the_file_omits() {
    let c = ok(&with_cluster(
        "  node_id: n1\n  etcd: [http://127.0.0.1:2379, 'http://127.0.0.1:22379']\n",
    ))
    .cluster
    .expect("cluster");
    assert_eq!(c.node_id, "n1");
    assert_eq!(c.etcd, ["http://127.0.0.1:2379", "http://127.0.0.1:22379"]);
    // The ingest listener's default address.
    assert_eq!(c.advertise, "127.0.0.1:8080");
    assert_eq!(c.lease_ttl_ms, 3_000);
    assert_eq!(c.hold_ms, 4_000);
    assert_eq!(c.name, "ankusa");
}

#[test]
fn every_mistake_is_named_by_its_option() {
    let p = problems(load(&format!(
        "listeners: {{ingest: '0.0.0.0:8080'}}\ncluster:\n  etcd: ['https://x:1', 'http://']\n  lease_ttl_ms: 2500\n  hold_ms: 0\n  name: 'a b'\n{SOURCES}"
    )));
    assert_eq!(
        p,
        [
            "cluster: option \"node_id\": is required: this node's name in the cluster, unique and stable across restarts (n1)",
            "cluster: option \"etcd\": \"https://x:1\" is not an etcd client URL: http://host:port (the member's --advertise-client-urls)",
            "cluster: option \"etcd\": \"http://\" is not an etcd client URL: http://host:port (the member's --advertise-client-urls)",
            "cluster: option \"advertise\": is required when listeners.ingest (0.0.0.0:8080) is not an address the other nodes can reach: give this node's host:port",
            "cluster: option \"lease_ttl_ms\": 2500 is not a lease etcd grants: whole seconds from 2000 to 60000 (3000)",
            "cluster: option \"hold_ms\": must be greater than 0",
            "cluster: option \"name\": \"a b\" is not a valid name: 1-64 characters of A-Z a-z 0-9 _ -, starting with a letter or digit",
        ]
    );
}

#[test]
fn a_memory_store_and_a_bad_advertise_are_refused() {
    let p = problems(load(&format!(
        "node: {{store: memory}}\ncluster:\n  node_id: n1\n  etcd: [http://127.0.0.1:2379]\n  advertise: 'node1'\n{SOURCES}"
    )));
    assert_eq!(
        p,
        [
            "cluster: option \"advertise\": \"node1\" is not host:port (where the other nodes reach this node's ingest listener)",
            "cluster: a cluster node needs a store that survives a restart (node.store: memory does not): what it acknowledges must outlive it until it is delivered or drained",
        ]
    );
    let p = problems(load(&with_cluster(
        "  node_id: n1\n  etcd: []\n  lease_ttl_ms: 61000\n",
    )));
    assert_eq!(
        p,
        [
            "cluster: option \"etcd\": is required: the client URLs of the etcd members ([http://127.0.0.1:2379])",
            "cluster: option \"lease_ttl_ms\": 61000 is not a lease etcd grants: whole seconds from 2000 to 60000 (3000)",
        ]
    );
}

#[test]
fn an_unknown_cluster_option_is_named() {
    let e = load(&with_cluster(
        "  node_id: n1\n  etcd: [http://e:1]\n  ttl: 3\n",
    ))
    .expect_err("unknown option");
    let text = e.to_string();
    assert!(text.contains("cluster: unknown field `ttl`"), "{text}");
}

#[test]
fn shared_sections_leave_out_what_is_per_node() {
    let n1 = "node: {name: a, data_dir: /d1}\nlisteners: {ingest: '127.0.0.1:1'}\n\
              cluster: {node_id: n1, advertise: 'h1:1', etcd: ['http://e:1'], lease_ttl_ms: 3000}\n\
              retry: {base_ms: 5, max_ms: 10}\n\
              tenants: [{name: acme}, {name: globex, max_pending: 5}]\n\
              sources: [{name: stripe, tenant: acme}, {name: github}]\n";
    // Another node: its own node, listeners, node_id and advertise, the keys
    // of a mapping in another order.
    let n2 = "node: {name: b, data_dir: /d2}\nlisteners: {ingest: '127.0.0.1:2'}\n\
              cluster: {lease_ttl_ms: 3000, node_id: n2, advertise: 'h2:1', etcd: ['http://e:1']}\n\
              retry: {max_ms: 10, base_ms: 5}\n\
              tenants: [{name: acme}, {max_pending: 5, name: globex}]\n\
              sources: [{name: stripe, tenant: acme}, {name: github}]\n";
    let a = shared_sections(n1).expect("parses");
    assert_eq!(a, shared_sections(n2).expect("parses"));
    assert_eq!(
        a.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "cluster",
            "retry",
            "sources.github",
            "sources.stripe",
            "tenants.acme",
            "tenants.globex"
        ]
    );
    assert_eq!(a["retry"], r#"{"base_ms":5,"max_ms":10}"#);
    assert_eq!(
        a["cluster"],
        r#"{"etcd":["http://e:1"],"lease_ttl_ms":3000}"#
    );
    // A source that differs differs as that source alone.
    let n3 = n2.replace("{name: github}", "{name: github, tenant: acme}");
    let b = shared_sections(&n3).expect("parses");
    let differ: Vec<&String> = a.keys().filter(|k| a.get(*k) != b.get(*k)).collect();
    assert_eq!(differ, ["sources.github"]);
    // The same etcd members listed in another order: the same cluster.
    let three = |list: &str| {
        shared_sections(&n1.replace("['http://e:1']", list)).expect("parses")["cluster"].clone()
    };
    assert_eq!(
        three("['http://e:1', 'http://e:2', 'http://e:3']"),
        three("['http://e:3', 'http://e:1', 'http://e:2']")
    );
    assert_ne!(
        three("['http://e:1', 'http://e:2']"),
        three("['http://e:1', 'http://e:3']")
    );
}
