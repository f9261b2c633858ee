//! Real etcd members for the cluster tests (Debian's `etcd-server`, which
//! `.ci/run` installs): `n` members on free loopback ports, each in its own
//! directory, killed when the [`Etcd`] is dropped. A member can be killed
//! (SIGKILL), stopped (SIGSTOP), continued and started again on its data.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// One member's ports, data and process.
struct Member {
    name: String,
    client: String,
    peer: String,
    data: PathBuf,
    child: Option<Child>,
}

/// An etcd cluster of its own.
pub struct Etcd {
    members: Vec<Member>,
    initial: String,
    _dir: TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Etcd {
    /// Starts `n` members and waits until the cluster answers a write.
    pub async fn start(n: usize) -> Etcd {
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("e{i}"),
                client: format!("http://127.0.0.1:{}", free_port()),
                peer: format!("http://127.0.0.1:{}", free_port()),
                data: dir.path().join(format!("e{i}")),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Etcd {
            members,
            initial,
            _dir: dir,
        };
        for i in 0..n {
            etcd.spawn(i);
        }
        etcd.wait_writable().await;
        etcd
    }

    fn spawn(&mut self, i: usize) {
        let initial = self.initial.clone();
        let m = &mut self.members[i];
        let child = Command::new("etcd")
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&m.data)
            .arg("--listen-client-urls")
            .arg(&m.client)
            .arg("--advertise-client-urls")
            .arg(&m.client)
            .arg("--listen-peer-urls")
            .arg(&m.peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&m.peer)
            .arg("--initial-cluster")
            .arg(&initial)
            .arg("--initial-cluster-state")
            .arg("new")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd (Debian's etcd-server; `bash .ci/run` installs it)");
        m.child = Some(child);
    }

    /// The client URLs, for a relay's `cluster.etcd`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    /// The endpoints as a YAML flow list.
    pub fn yaml_list(&self) -> String {
        format!("[{}]", self.endpoints().join(", "))
    }

    /// A catalog client of this cluster.
    pub fn client(&self) -> ankusa_catalog::Etcd {
        ankusa_catalog::Etcd::new(&self.endpoints(), Duration::from_secs(2)).expect("client")
    }

    /// Waits (within 60 s) until a write through any member succeeds.
    pub async fn wait_writable(&self) {
        let etcd = self.client();
        let deadline = Instant::now() + Duration::from_secs(60);
        while etcd.put(b"/ready", b"1", None).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "etcd did not take a write within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The index of the member that is the raft leader now, if one answers.
    pub async fn leader(&self) -> Option<usize> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        for (i, m) in self.members.iter().enumerate() {
            let Ok(r) = client
                .post(format!("{}/v3/maintenance/status", m.client))
                .body("{}")
                .send()
                .await
            else {
                continue;
            };
            let Ok(body) = r.bytes().await else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
                continue;
            };
            if v["header"]["member_id"] == v["leader"] && !v["leader"].is_null() {
                return Some(i);
            }
        }
        None
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        self.spawn(i);
    }

    /// Sends `signal` (`STOP`, `CONT`) to member `i`.
    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.members[i].child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            // A stopped member would not die of SIGKILL's reaping otherwise.
            if let Some(c) = &self.members[i].child {
                let _ = Command::new("kill")
                    .arg("-CONT")
                    .arg(c.id().to_string())
                    .status();
            }
            self.kill(i);
        }
    }
}
