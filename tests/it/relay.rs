//! The real `ankusa` binary as a child process: a YAML config written into a
//! temporary directory (the store's data_dir is there too), listeners on free
//! 127.0.0.1 ports, readiness from the admin listener's `/readyz`, and hooks
//! posted with a plain HTTP client. The child is killed when the `Relay` is
//! dropped.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_ankusa");

/// An answer of the ingest listener.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: serde_json::Value,
}

impl Answer {
    /// The `id` of a 200 (the hook's idempotency key).
    pub fn id(&self) -> String {
        assert_eq!(self.status, 200, "expected 200, got {self:?}");
        self.body["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no id in {self:?}"))
            .to_owned()
    }
}

pub struct Relay {
    pub dir: TempDir,
    /// The YAML with `{INGEST}`, `{ADMIN}`, `{DATA}` and `{DIR}` (the
    /// temporary directory that holds the data_dir, for a file sink's path:
    /// none may be inside the data_dir) still in it.
    template: String,
    pub ingest: SocketAddr,
    pub admin: SocketAddr,
    child: Option<Child>,
    client: reqwest::Client,
    runs: usize,
    /// Extra environment variables of the child (AWS credentials for the SQS
    /// sink's standard chain, ...).
    env: Vec<(String, String)>,
    /// Extra arguments of `serve` (`--drop-unconfigured`).
    args: Vec<String>,
    /// The child's `RLIMIT_NOFILE`, soft and hard (set before it execs), or
    /// the test process's own.
    nofile: Option<u64>,
}

/// Two distinct free ports (bound together, then released).
fn free_ports() -> (SocketAddr, SocketAddr) {
    let a = TcpListener::bind("127.0.0.1:0").expect("bind");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind");
    (a.local_addr().expect("addr"), b.local_addr().expect("addr"))
}

/// A client that never goes through a proxy and keeps no idle connections
/// (each hook on its own connection, so a killed relay leaves none stale).
pub fn client() -> reqwest::Client {
    ankusa_sinks::http::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

impl Relay {
    /// Starts the relay on `template` (placeholders `{INGEST}`, `{ADMIN}`,
    /// `{DATA}`) in a new temporary directory and waits until it is ready.
    pub async fn start(template: &str) -> Relay {
        Relay::start_with_env(template, &[]).await
    }

    /// [`Relay::start`] with extra environment variables for the child (kept
    /// across [`Relay::restart`]).
    pub async fn start_with_env(template: &str, env: &[(&str, &str)]) -> Relay {
        Relay::start_as(template, env, None, &|_| {}).await
    }

    /// [`Relay::start`] with the child's file-descriptor limit, soft and hard,
    /// set to `nofile` (as `prlimit --nofile=N:N` would) before it execs.
    pub async fn start_with_nofile(template: &str, nofile: u64) -> Relay {
        Relay::start_as(template, &[], Some(nofile), &|_| {}).await
    }

    /// [`Relay::start`] after `prepare` has run on the data_dir path (which
    /// does not exist yet): a test that loads a store into it first.
    pub async fn start_prepared(template: &str, prepare: &dyn Fn(&Path)) -> Relay {
        Relay::start_as(template, &[], None, prepare).await
    }

    /// The one constructor: a new temporary directory, free ports, the
    /// child's environment and file-descriptor limit, `prepare` run on the
    /// data_dir path; waits until ready.
    async fn start_as(
        template: &str,
        env: &[(&str, &str)],
        nofile: Option<u64>,
        prepare: &dyn Fn(&Path),
    ) -> Relay {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ingest, admin) = free_ports();
        let mut r = Relay {
            dir,
            template: template.to_owned(),
            ingest,
            admin,
            child: None,
            client: client(),
            runs: 0,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            args: Vec::new(),
            nofile,
        };
        prepare(&r.data_dir());
        r.boot().await;
        r
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The configuration file of the current (or last) run.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("relay.yaml")
    }

    /// Starts the process again on the same data_dir (after [`Relay::kill`] or
    /// an exit) and waits until it is ready.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a running relay");
        self.boot().await;
    }

    /// The configuration the next [`Relay::restart`] runs (placeholders as
    /// in [`Relay::start`]).
    pub fn set_template(&mut self, template: &str) {
        template.clone_into(&mut self.template);
    }

    /// The extra environment variables of the next runs (in place of those
    /// given at start).
    pub fn set_env(&mut self, env: &[(&str, &str)]) {
        self.env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
    }

    /// Starts the process on the same data_dir and returns at once: the test
    /// waits for what it needs in [`Relay::log`] (then kills it, or waits for
    /// its exit).
    pub fn spawn_detached(&mut self) {
        assert!(self.child.is_none(), "spawn of a running relay");
        let child = self.spawn();
        self.child = Some(child);
    }

    /// Extra arguments of `serve` for the next [`Relay::restart`].
    pub fn set_args(&mut self, args: &[&str]) {
        self.args = args.iter().map(|a| (*a).to_owned()).collect();
    }

    /// Starts the process on the same data_dir and waits for it to exit
    /// without becoming ready (a refused start): its status and its log.
    pub async fn restart_refused(&mut self) -> (ExitStatus, String) {
        match self.restart_ready_or_exit().await {
            Some(exited) => exited,
            None => panic!("the relay started, expected a refusal:\n{}", self.log()),
        }
    }

    /// Starts the process on the same data_dir and waits until it is ready
    /// (`None`) or has exited without becoming ready (its status and log).
    pub async fn restart_ready_or_exit(&mut self) -> Option<(ExitStatus, String)> {
        assert!(self.child.is_none(), "restart of a running relay");
        let child = self.spawn();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().expect("try_wait"))
            {
                self.child = None;
                return Some((status, self.log()));
            }
            let ready = self
                .client
                .get(format!("http://{}/readyz", self.admin))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ready {
                return None;
            }
            assert!(
                Instant::now() < deadline,
                "relay neither ready nor exited after 120 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The template with its placeholders filled.
    fn render(&self) -> String {
        self.template
            .replace("{INGEST}", &self.ingest.to_string())
            .replace("{ADMIN}", &self.admin.to_string())
            .replace("{DATA}", &self.data_dir().display().to_string())
            .replace("{DIR}", &self.dir.path().display().to_string())
    }

    /// Writes `template` (placeholders as in [`Relay::start`]) to the
    /// running relay's configuration file: what its next reload reads, and
    /// its next restart runs.
    pub fn rewrite_config(&mut self, template: &str) {
        self.set_template(template);
        std::fs::write(self.config_path(), self.render()).expect("write config");
    }

    /// Sends SIGHUP (a reload).
    pub fn sighup(&self) {
        let status = Command::new("kill")
            .arg("-HUP")
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -HUP failed");
    }

    /// Whether the process is still running (not exited).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().expect("try_wait").is_none())
    }

    fn spawn(&mut self) -> Child {
        self.spawn_with(&[], &[])
    }

    /// [`Relay::spawn`] with more arguments of `serve` and more environment
    /// variables for this run only.
    fn spawn_with(&mut self, more_args: &[&str], more_env: &[(&str, &str)]) -> Child {
        std::fs::write(self.config_path(), self.render()).expect("write config");
        self.runs += 1;
        let log = self.dir.path().join(format!("relay-{}.log", self.runs));
        let out = File::create(&log).expect("log file");
        let mut command = Command::new(BIN);
        if let Some(n) = self.nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe, and the closure touches
            // nothing else of the parent's state.
            unsafe {
                command.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n as libc::rlim_t,
                        rlim_max: n as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        command
            .arg("serve")
            .arg("--config")
            .arg(self.config_path())
            .args(&self.args)
            .args(more_args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(more_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("spawn ankusa")
    }

    async fn boot(&mut self) {
        for _try in 0..5 {
            let child = self.spawn();
            let log = self.dir.path().join(format!("relay-{}.log", self.runs));
            self.child = Some(child);
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                if let Some(status) = self
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().expect("try_wait"))
                {
                    self.child = None;
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    if text.contains("cannot bind") {
                        // A port taken between our pick and its bind: new ports.
                        (self.ingest, self.admin) = free_ports();
                        break;
                    }
                    panic!("ankusa serve exited with {status} before it was ready:\n{text}");
                }
                let ready = self
                    .client
                    .get(format!("http://{}/readyz", self.admin))
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200);
                if ready {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "relay not ready after 120 s:\n{}",
                    self.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("could not start the relay on free ports after 5 tries");
    }

    /// `serve --takeover` on the same configuration file and data_dir
    /// (docs/design.md section 5, "Takeover"): waits until the serving
    /// process has exited and the new one is ready, which is then the one
    /// this `Relay` runs. Returns the old process's exit status and log.
    pub async fn take_over(&mut self) -> (ExitStatus, String) {
        let mut old = self
            .child
            .take()
            .expect("a running relay to take over from");
        let old_log = self.log();
        let new = self.spawn_with(&["--takeover"], &[]);
        self.child = Some(new);
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = old.try_wait().expect("try_wait") {
                break status;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().expect("try_wait"))
            {
                let _ = old.kill();
                let _ = old.wait();
                panic!(
                    "the takeover exited with {status}:\n{}\nthe old process:\n{}",
                    self.log(),
                    std::fs::read_to_string(
                        self.dir.path().join(format!("relay-{}.log", self.runs - 1))
                    )
                    .unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the old process still runs 120 s into the takeover:\n{}\nthe new one:\n{}",
                old_log,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let old_log =
            std::fs::read_to_string(self.dir.path().join(format!("relay-{}.log", self.runs - 1)))
                .unwrap_or_default();
        until_ready(self, deadline).await;
        (status, old_log)
    }

    /// `serve --takeover` (with `env` for it) that is expected to fail: waits
    /// for it to exit and returns its status and log. The serving process (if
    /// any) stays this `Relay`'s.
    pub async fn take_over_refused(&mut self, env: &[(&str, &str)]) -> (ExitStatus, String) {
        let mut new = self.spawn_with(&["--takeover"], env);
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = new.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the takeover still runs after 120 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let log = self.log();
        // The serving process's log is the current one again.
        self.runs -= 1;
        (status, log)
    }

    /// Starts `serve --takeover` and returns at once (the test kills either
    /// process when it likes): the new child; the old one is returned too,
    /// and neither is this `Relay`'s until the test gives one back with
    /// [`Relay::adopt`].
    pub fn spawn_takeover(&mut self) -> (Child, Child) {
        let old = self
            .child
            .take()
            .expect("a running relay to take over from");
        let new = self.spawn_with(&["--takeover"], &[]);
        (old, new)
    }

    /// After a [`Relay::spawn_takeover`] whose new process ended: the log of
    /// the run before it is the current one again.
    pub fn forget_last_run(&mut self) {
        self.runs -= 1;
    }

    /// Makes `child` (a process on this relay's data_dir) this `Relay`'s.
    pub fn adopt(&mut self, child: Child) {
        assert!(self.child.is_none(), "adopt while a child is this relay's");
        self.child = Some(child);
    }

    /// The log of the current (or last) run.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("relay-{}.log", self.runs)))
            .unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL, and reap the process.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `/readyz` of the admin listener: its status and body, or `None` when
    /// nothing answers.
    pub async fn readyz(&self) -> Option<(u16, String)> {
        let r = self
            .client
            .get(format!("http://{}/readyz", self.admin))
            .send()
            .await
            .ok()?;
        let status = r.status().as_u16();
        Some((status, r.text().await.unwrap_or_default()))
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Sends SIGTERM (the process keeps running until it has stopped cleanly).
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            let c = self.child.as_mut().expect("running");
            if let Some(status) = c.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "relay still running {within:?} after SIGTERM:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.ingest)
    }

    /// POSTs `body` with `headers` to `path` on the ingest listener.
    pub async fn post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Answer {
        self.try_post(path, headers, body)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// Like [`Relay::post`], with the transport error instead of a panic.
    pub async fn try_post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Result<Answer, reqwest::Error> {
        post(&self.client, &self.url(path), headers, body.into()).await
    }

    /// The admin listener's `/metrics`, as `name -> value` of every sample.
    pub async fn metrics(&self) -> std::collections::HashMap<String, f64> {
        let text = self
            .client
            .get(format!("http://{}/metrics", self.admin))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics body");
        // Every sample by its full name (`name{labels}`), and a labelled
        // family also summed under its bare name.
        let mut out = std::collections::HashMap::new();
        for l in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let Some((name, value)) = l.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if let Some((bare, _)) = name.split_once('{') {
                *out.entry(bare.to_owned()).or_insert(0.0) += value;
            }
            out.insert(name.to_owned(), value);
        }
        out
    }

    /// One sample of `/metrics`; panics if it is not there.
    pub async fn metric(&self, name: &str) -> f64 {
        let m = self.metrics().await;
        *m.get(name)
            .unwrap_or_else(|| panic!("no metric {name} in {m:?}"))
    }
}

/// Waits until `relay`'s admin listener answers `/readyz` 200.
async fn until_ready(relay: &mut Relay, deadline: Instant) {
    loop {
        if let Some(status) = relay
            .child
            .as_mut()
            .and_then(|c| c.try_wait().expect("try_wait"))
        {
            panic!(
                "ankusa serve exited with {status} before it was ready:\n{}",
                relay.log()
            );
        }
        if relay.readyz().await.is_some_and(|(s, _)| s == 200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "relay not ready in time:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
    }
}

pub async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Answer, reqwest::Error> {
    let mut req = client.post(url);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = req.body(body).send().await?;
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap_or("?").to_owned());
    let bytes = resp.bytes().await?;
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
    });
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

/// Runs `ankusa <args>` to completion (killed after 20 s): (exit status,
/// stdout + stderr).
pub fn run_cli(args: &[&std::ffi::OsStr], cwd: &Path) -> (ExitStatus, String) {
    run_cli_env(args, cwd, &[])
}

/// [`run_cli`] with extra environment variables.
pub fn run_cli_env(
    args: &[&std::ffi::OsStr],
    cwd: &Path,
    env: &[(&str, &str)],
) -> (ExitStatus, String) {
    let log = cwd.join(format!("cli-{}.log", std::process::id()));
    let out = File::create(&log).expect("log file");
    let mut child = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("run ankusa");
    // Generous: on a loaded machine a CLI run that posts a 1 MiB hook and
    // waits for fsyncs can take far longer than it does idle.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "ankusa {args:?} still running after 120 s:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    (status, text)
}

/// A config template: memory/rocksdb/fjall store under `{DATA}`, listeners on
/// the placeholders, then `rest` (tenants, sources, dispatch, retry...).
pub fn config(store: &str, rest: &str) -> String {
    format!(
        "node: {{data_dir: '{{DATA}}', store: {store}}}\nlisteners: {{ingest: '{{INGEST}}', admin: '{{ADMIN}}'}}\n{rest}"
    )
}

/// GitHub's `X-Hub-Signature-256` of `body` under `secret`:
/// `sha256=<hex HMAC-SHA256>`.
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    use hmac::{Hmac, KeyInit, Mac};
    let mut mac =
        <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(body);
    format!(
        "sha256={}",
        ankusa_engine::hex(&mac.finalize().into_bytes())
    )
}

/// What each hook of a [`load`] got: its id (200), or what else happened.
pub type Outcomes = std::sync::Arc<std::sync::Mutex<Vec<Result<String, String>>>>;

/// Posts hooks to `url` one after another until `stop`, each on a new
/// connection (as a provider sends them), every outcome in `out`. Hook `n`
/// has the JSON body `{"n": n}` and the ordering key `x-entity-id: k<n % 7>`.
pub fn load(
    url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    out: Outcomes,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // A new connection per hook: no idle connection is kept.
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            let body = format!("{{\"n\":{n}}}").into_bytes();
            let key = format!("k{}", n % 7);
            let headers = [
                ("content-type", "application/json"),
                ("x-entity-id", key.as_str()),
            ];
            let got = match post(&client, &url, &headers, body).await {
                Ok(a) if a.status == 200 => Ok(a.id()),
                Ok(a) => Err(format!("status {}: {}", a.status, a.body)),
                Err(e) => Err(format!("transport: {e}")),
            };
            out.lock().expect("lock").push(got);
            n += 1;
        }
    })
}

/// Hooks a [`load`] has had an answer (or an error) for so far.
pub fn acked(out: &Outcomes) -> usize {
    out.lock().expect("lock").len()
}

/// Waits (within a generous deadline) until a [`load`] has had `n` more
/// answers than it has now: `what` names the wait in a failure.
pub async fn more_hooks(out: &Outcomes, n: usize, what: &str) {
    let mark = acked(out);
    crate::sink::until(what, Duration::from_secs(120), async || {
        (acked(out) >= mark + n).then_some(())
    })
    .await;
}
