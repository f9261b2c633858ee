//! Takeover (docs/design.md section 5, "Takeover"): `ankusa serve --takeover`
//! replaces the process serving a data_dir (a new binary, for an upgrade)
//! without refusing a connection.
//!
//! The two processes talk over a UNIX socket in the data_dir
//! ([`socket_path`], mode 0600): only a process that may read the store may
//! ask for it, and a listening socket can only be passed over a UNIX socket
//! (`SCM_RIGHTS`). Passing the sockets, rather than binding beside them with
//! `SO_REUSEPORT`, keeps one accept queue: a `SO_REUSEPORT` listener that
//! closes resets the connections queued on it, which are exactly the ones a
//! takeover must not lose.
//!
//! One JSON object a line ([`Msg`]), in this order:
//! 1. new → old `ask`; old → new `offer` with the ingest and admin listening
//!    sockets attached (or `refuse`, saying why).
//! 2. The new process checks the offer against its configuration (the same
//!    listener addresses and store backend), starts accepting on the ingest
//!    socket and holds what it accepts (`ankusa_edge::server::hold`), then
//!    sends `stop` (or `failed`, and the old one goes on serving).
//! 3. The old process stops like on SIGTERM (no new hooks, the requests it has
//!    answered, its commits made, its sink calls finished or left claimed for
//!    the new process to make again), closes the store and sends `released`.
//! 4. The new process opens the store and serves, the held connections first,
//!    and sends `serving`; the old process exits. If the new one cannot serve
//!    (a store it cannot open, queued work its configuration does not route)
//!    it answers its held connections 503 with `Retry-After`, sends `failed`,
//!    and exits non-zero; the old one opens the store again and serves. If it
//!    dies instead, the old one sees the socket close and does the same.
//!
//! The store's lock decides, whatever happens in between: a process that
//! cannot take it does not serve, so at most one process serves the store.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tracing::{error, info, warn};

/// The takeover socket's name in the data_dir.
pub const SOCKET: &str = "takeover.sock";

/// How long either side waits for the other's next message during the
/// handshake (steps 1 and 2), which needs no I/O but the socket's.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// How long the new process waits for `released`: the old one's stop
/// (requests in progress, the Writer's queue, at most [`PIPELINE_WAIT`] for
/// sink calls, the store's close). Past it the takeover fails and the old
/// process, once it gets there, serves again.
const RELEASE: Duration = Duration::from_secs(60);

/// How long the old process waits, after `released`, for the new one to say
/// it serves (its store open and recovery). Past it the old process tries
/// the store again: the lock tells which of the two serves.
const SERVING: Duration = Duration::from_secs(120);

/// How long the old process waits for the sink calls in flight when it
/// hands over: the new process's held requests wait meanwhile, and a call
/// still out is left claimed and made again by the new process
/// (at-least-once; docs/design.md section 5, "Takeover").
pub const PIPELINE_WAIT: Duration = Duration::from_secs(2);

/// How long the old process gives the ingest requests in progress when it
/// hands over (a body still arriving after it is cut, unanswered: the client
/// sends it again, to the new process), for the same reason.
pub const INGEST_WAIT: Duration = Duration::from_secs(2);

/// The takeover socket of a data_dir.
#[must_use]
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET)
}

/// One line of the takeover protocol (see the module docs).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
enum Msg {
    Ask {
        pid: u32,
        version: String,
    },
    /// Sent with the ingest and admin listening sockets attached.
    Offer {
        pid: u32,
        version: String,
        store: String,
        ingest: SocketAddr,
        admin: SocketAddr,
    },
    Refuse {
        why: String,
    },
    Stop,
    Released,
    /// The old process could not close the store (it serves on).
    Abort {
        why: String,
    },
    Serving,
    Failed {
        why: String,
    },
}

fn send(stream: &mut UnixStream, msg: &Msg) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)
}

/// Reads one line, a byte at a time (a handful of short lines: nothing is
/// read past the line, so a message carrying sockets is never half read by
/// a buffer). `None` at end of file.
fn receive(stream: &mut UnixStream) -> std::io::Result<Option<Msg>> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte) {
            Ok(0) if line.is_empty() => return Ok(None),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => {
                line.push(byte[0]);
                if line.len() > 64 * 1024 {
                    return Err(std::io::Error::other("a takeover message over 64 KiB"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    serde_json::from_slice(&line)
        .map(Some)
        .map_err(|e| std::io::Error::other(format!("a takeover message that does not parse: {e}")))
}

/// [`receive`] on a tokio stream: cancellable.
async fn receive_async(stream: &mut tokio::net::UnixStream) -> std::io::Result<Option<Msg>> {
    use tokio::io::AsyncReadExt;
    let mut line = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await? {
            0 if line.is_empty() => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ if byte[0] == b'\n' => break,
            _ => {
                line.push(byte[0]);
                if line.len() > 64 * 1024 {
                    return Err(std::io::Error::other("a takeover message over 64 KiB"));
                }
            }
        }
    }
    serde_json::from_slice(&line)
        .map(Some)
        .map_err(|e| std::io::Error::other(format!("a takeover message that does not parse: {e}")))
}

/// Sends `msg` with `fds` attached (`SCM_RIGHTS`).
fn send_with_fds(
    stream: &UnixStream,
    msg: &Msg,
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("no room for the sockets"));
    }
    let sent = sendmsg(
        stream,
        &[IoSlice::new(&line)],
        &mut control,
        SendFlags::empty(),
    )?;
    if sent == line.len() {
        Ok(())
    } else {
        // A UNIX stream socket takes a short line whole; the sockets went
        // with its first byte, so the rest can follow plainly.
        (&*stream).write_all(&line[sent..])
    }
}

/// Receives one line whose first bytes carry sockets: the message and the
/// sockets (closed on exec).
fn receive_with_fds(stream: &mut UnixStream) -> std::io::Result<(Option<Msg>, Vec<OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut buf = [0u8; 4096];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match recvmsg(
            &*stream,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(got) => break got,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = m {
            fds.extend(received);
        }
    }
    if got.bytes == 0 {
        return Ok((None, fds));
    }
    let mut line = buf[..got.bytes].to_vec();
    // The rest of the line, if it came apart.
    while line.last() != Some(&b'\n') {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if line.len() > 64 * 1024 {
            return Err(std::io::Error::other("a takeover message over 64 KiB"));
        }
    }
    line.pop();
    let msg = serde_json::from_slice(&line).map_err(|e| {
        std::io::Error::other(format!("a takeover message that does not parse: {e}"))
    })?;
    Ok((Some(msg), fds))
}

// --- the serving (old) process --------------------------------------------

/// What a serving process offers to a takeover: its listening sockets and
/// store backend.
pub struct Offer {
    pub ingest: TcpListener,
    pub admin: TcpListener,
    /// `node.store` (`None`: the memory store, which a takeover would lose).
    pub store: Option<&'static str>,
}

/// The takeover socket of a serving process: removed when dropped, unless
/// another process has put its own in its place meanwhile.
pub struct Offers {
    listener: tokio::net::UnixListener,
    path: PathBuf,
    inode: (u64, u64),
}

impl Offers {
    /// Binds the takeover socket in `data_dir` (replacing a leftover one:
    /// the caller holds the store's lock, so no other relay serves there).
    ///
    /// # Errors
    /// The socket cannot be made (its path over the 107 bytes a UNIX
    /// socket's path may have, a read-only directory).
    pub fn bind(data_dir: &Path) -> std::io::Result<Self> {
        let path = socket_path(data_dir);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_socket() => std::fs::remove_file(&path)?,
            Ok(_) => {
                return Err(std::io::Error::other(format!(
                    "{} exists and is not a socket",
                    path.display()
                )));
            }
            Err(_) => {}
        }
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let m = std::fs::metadata(&path)?;
        Ok(Self {
            listener,
            path,
            inode: (m.dev(), m.ino()),
        })
    }

    /// Answers takeovers until one asks to `stop` this process: that
    /// connection is returned (the caller stops, closes the store and calls
    /// [`Handover::released`]). A takeover that fails its handshake is
    /// logged; this process serves on.
    pub async fn next(&self, offer: std::sync::Arc<Offer>) -> Handover {
        // Each handshake on its own blocking thread, with its deadlines: a
        // client that connects and says nothing holds up no other. The first
        // to ask this process to stop takes it; any later one is told so.
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Handover>(1);
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let stream = match accepted {
                        Ok((s, _)) => s,
                        Err(e) => {
                            warn!(error = %e, "the takeover socket's accept failed");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    };
                    let (offer, taken, tx) = (std::sync::Arc::clone(&offer), std::sync::Arc::clone(&taken), tx.clone());
                    tokio::task::spawn_blocking(move || {
                        let handshake = stream.into_std().and_then(|s| {
                            s.set_nonblocking(false)?;
                            offers_handshake(s, &offer, &taken)
                        });
                        match handshake {
                            // If this run has ended meanwhile, the handover is
                            // dropped and its socket closed: the new process
                            // takes the store once this one has let it go.
                            Ok(Some(h)) => drop(tx.blocking_send(h)),
                            Ok(None) => {}
                            Err(e) => warn!(error = %e, "a takeover's handshake failed; serving on"),
                        }
                    });
                }
                Some(h) = rx.recv() => return h,
            }
        }
    }
}

impl Drop for Offers {
    fn drop(&mut self) {
        if std::fs::metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Steps 1 and 2 of the protocol on the old side: `Some` once asked to stop.
fn offers_handshake(
    mut stream: UnixStream,
    offer: &Offer,
    taken: &std::sync::atomic::AtomicBool,
) -> std::io::Result<Option<Handover>> {
    stream.set_read_timeout(Some(HANDSHAKE))?;
    stream.set_write_timeout(Some(HANDSHAKE))?;
    let Some(Msg::Ask { pid, version }) = receive(&mut stream)? else {
        return Err(std::io::Error::other("the first message was not `ask`"));
    };
    let Some(store) = offer.store else {
        send(
            &mut stream,
            &Msg::Refuse {
                why: "node.store is memory: its hooks live in this process and a takeover would lose them; \
                      restart instead"
                    .into(),
            },
        )?;
        return Ok(None);
    };
    info!(new_pid = pid, new_version = %version, "takeover asked: offering the listeners");
    send_with_fds(
        &stream,
        &Msg::Offer {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            store: store.to_owned(),
            ingest: offer.ingest.local_addr()?,
            admin: offer.admin.local_addr()?,
        },
        &[offer.ingest.as_fd(), offer.admin.as_fd()],
    )?;
    match receive(&mut stream)? {
        Some(Msg::Stop) if taken.swap(true, std::sync::atomic::Ordering::SeqCst) => {
            warn!(
                new_pid = pid,
                "a second takeover asked to stop this process; refused (one is under way)"
            );
            send(
                &mut stream,
                &Msg::Abort {
                    why: "another takeover of this relay is under way".into(),
                },
            )?;
            Ok(None)
        }
        Some(Msg::Stop) => {
            stream.set_read_timeout(None)?;
            Ok(Some(Handover {
                stream,
                new_pid: pid,
            }))
        }
        Some(Msg::Failed { why }) => {
            warn!(
                new_pid = pid,
                "the takeover was called off by the new process ({why}); serving on"
            );
            Ok(None)
        }
        other => Err(std::io::Error::other(format!(
            "expected `stop` from process {pid}, got {other:?}"
        ))),
    }
}

/// A takeover that asked this process to stop.
pub struct Handover {
    stream: UnixStream,
    /// The new process.
    pub new_pid: u32,
}

/// How a handover ended for the old process.
pub enum Handed {
    /// The new process serves: exit.
    Taken,
    /// The new process did not take over (why): open the store again.
    Back(String),
}

impl Handover {
    /// Step 3's end and step 4 on the old side: says the store is closed and
    /// waits for the new process's word.
    pub async fn released(self) -> Handed {
        let Handover {
            mut stream,
            new_pid,
        } = self;
        let got = tokio::task::spawn_blocking(move || -> std::io::Result<Option<Msg>> {
            send(&mut stream, &Msg::Released)?;
            stream.set_read_timeout(Some(SERVING))?;
            receive(&mut stream)
        })
        .await;
        match got {
            Ok(Ok(Some(Msg::Serving))) => Handed::Taken,
            Ok(Ok(Some(Msg::Failed { why }))) => {
                Handed::Back(format!("process {new_pid} failed: {why}"))
            }
            Ok(Ok(None)) => Handed::Back(format!("process {new_pid} ended before it served")),
            Ok(Ok(Some(other))) => Handed::Back(format!("process {new_pid} said {other:?}")),
            Ok(Err(e)) => Handed::Back(format!("no word from process {new_pid}: {e}")),
            Err(e) => Handed::Back(format!("the takeover socket's task failed: {e}")),
        }
    }

    /// The store could not be closed: the new process gives up, this one
    /// serves on.
    pub async fn abort(self, why: String) {
        let Handover { mut stream, .. } = self;
        let _ = tokio::task::spawn_blocking(move || send(&mut stream, &Msg::Abort { why })).await;
    }
}

// --- the new process ---------------------------------------------------------

/// The new process's side, from the offer until it serves or fails.
pub struct Taking {
    stream: Option<UnixStream>,
    /// The process handing over.
    pub old_pid: u32,
    pub old_version: String,
}

/// What the old process passed: its listening sockets.
pub struct Passed {
    pub ingest: TcpListener,
    pub admin: TcpListener,
}

/// Step 1 and the check of step 2: asks the process serving `cfg`'s
/// data_dir for its listeners.
///
/// # Errors
/// No process serves there, it refused (a memory store), or its listeners
/// or store backend are not those of `cfg` (the old process was told and
/// serves on). Each says what to do.
pub async fn ask(cfg: &ankusa_config::Config) -> anyhow::Result<(Taking, Passed)> {
    let path = socket_path(&cfg.node.data_dir);
    let ingest_want = cfg.listeners.ingest;
    let admin_want = cfg.listeners.admin;
    let store_want = cfg.node.store.as_str();
    tokio::task::spawn_blocking(move || {
        let mut stream = UnixStream::connect(&path).map_err(|e| {
            let p = path.display();
            match e.kind() {
                std::io::ErrorKind::NotFound => anyhow::anyhow!(
                    "--takeover: there is no {p}: no relay serves this data_dir (start without --takeover), \
                     or a takeover of it is under way (retry once it is done)"
                ),
                std::io::ErrorKind::ConnectionRefused => anyhow::anyhow!(
                    "--takeover: nothing answers on {p} (a relay that ended left it): no relay serves this \
                     data_dir; start without --takeover"
                ),
                std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
                    "--takeover: {p}: permission denied: run the takeover as the user the relay runs as"
                ),
                std::io::ErrorKind::InvalidInput => anyhow::anyhow!(
                    "--takeover: {p} is longer than a UNIX socket's path may be (107 bytes), so the relay \
                     serving it has no takeover socket (its log says so): restart it instead, or give \
                     node.data_dir a shorter path"
                ),
                _ => anyhow::anyhow!("--takeover: cannot reach the relay serving this data_dir on {p}: {e}"),
            }
        })?;
        stream.set_read_timeout(Some(HANDSHAKE))?;
        stream.set_write_timeout(Some(HANDSHAKE))?;
        send(
            &mut stream,
            &Msg::Ask {
                pid: std::process::id(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
        )?;
        let (msg, mut fds) = receive_with_fds(&mut stream).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => anyhow::anyhow!(
                "--takeover: the serving relay did not offer its listeners within {} s (is it stopped, \
                 or stuck?); it serves on",
                HANDSHAKE.as_secs()
            ),
            _ => anyhow::anyhow!("--takeover: the serving relay's offer: {e}"),
        })?;
        let (old_pid, old_version, store, ingest, admin) = match msg {
            Some(Msg::Offer { pid, version, store, ingest, admin }) => (pid, version, store, ingest, admin),
            Some(Msg::Refuse { why }) => bail!("--takeover: the serving relay refused: {why}"),
            other => bail!("--takeover: the serving relay answered {other:?}, not an offer"),
        };
        let mut problems = Vec::new();
        if store != store_want {
            problems.push(format!(
                "node.store is {store_want}, but process {old_pid} serves a {store} store there: \
                 a takeover keeps the store; change the backend with store export and import"
            ));
        }
        if ingest != ingest_want {
            problems.push(format!(
                "listeners.ingest is {ingest_want}, but process {old_pid} listens on {ingest}: \
                 a takeover keeps the listening sockets; change a listener with a restart"
            ));
        }
        if admin != admin_want {
            problems.push(format!(
                "listeners.admin is {admin_want}, but process {old_pid} listens on {admin}: \
                 a takeover keeps the listening sockets; change a listener with a restart"
            ));
        }
        if fds.len() != 2 {
            problems.push(format!("process {old_pid} passed {} sockets, not 2", fds.len()));
        }
        if !problems.is_empty() {
            let why = problems.join("; ");
            let _ = send(&mut stream, &Msg::Failed { why: why.clone() });
            bail!("--takeover: {why}. Process {old_pid} serves on");
        }
        let admin_fd = fds.pop().expect("two checked");
        let ingest_fd = fds.pop().expect("two checked");
        let ingest = TcpListener::from(ingest_fd);
        let admin = TcpListener::from(admin_fd);
        ingest.set_nonblocking(true)?;
        admin.set_nonblocking(true)?;
        Ok((
            Taking {
                stream: Some(stream),
                old_pid,
                old_version,
            },
            Passed { ingest, admin },
        ))
    })
    .await
    .context("--takeover: the handshake's task")?
}

impl Taking {
    /// Step 2's end and step 3 on the new side: asks the old process to stop
    /// and waits until it has closed the store (`true`) or ended (`false`).
    /// The wait is cancellable (a SIGTERM): dropping it closes the socket,
    /// and the old process, finding it closed, serves again.
    ///
    /// # Errors
    /// The old process did not close the store within [`RELEASE`], or could
    /// not (it serves on).
    pub async fn stop_old(&mut self) -> anyhow::Result<bool> {
        let mut stream = self.stream.take().context("the takeover is over")?;
        let old_pid = self.old_pid;
        match send(&mut stream, &Msg::Stop) {
            Ok(()) => {}
            // It ended (killed?) after its offer: the store's lock went with
            // it, and this process takes the store.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        }
        stream.set_nonblocking(true)?;
        let mut tokio_stream = tokio::net::UnixStream::from_std(stream)?;
        let got = tokio::time::timeout(RELEASE, receive_async(&mut tokio_stream)).await;
        let stream = tokio_stream.into_std()?;
        stream.set_nonblocking(false)?;
        self.stream = Some(stream);
        match got {
            Ok(Ok(Some(Msg::Released))) => Ok(true),
            // It ended: the store's lock went with it.
            Ok(Ok(None)) => Ok(false),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(false),
            Ok(Ok(Some(Msg::Abort { why }))) => {
                bail!("process {old_pid} could not close the store ({why}) and serves on")
            }
            Ok(Ok(Some(other))) => bail!("process {old_pid} said {other:?}, not `released`"),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => bail!(
                "process {old_pid} did not close the store within {} s; it serves again once it has",
                RELEASE.as_secs()
            ),
        }
    }

    /// Step 4: this process serves; the old one exits.
    pub async fn serving(mut self) {
        if let Some(mut s) = self.stream.take() {
            let _ = tokio::task::spawn_blocking(move || send(&mut s, &Msg::Serving)).await;
        }
    }

    /// This process cannot serve (why): the old one opens the store again.
    pub async fn failed(mut self, why: String) {
        if let Some(mut s) = self.stream.take() {
            let _ = tokio::task::spawn_blocking(move || send(&mut s, &Msg::Failed { why })).await;
        }
    }
}

// --- the successor (SIGUSR2) -------------------------------------------------

/// How the serving process starts its own successor on SIGUSR2: the binary
/// at the path it was started from (after an upgrade, the new one installed
/// there) with its own command line and `--takeover`. Under systemd the
/// successor is then in the service's control group, and says `MAINPID=`
/// once it serves (`NotifyAccess=all`; `deploy/systemd/ankusa.service`).
#[derive(Clone, Debug)]
pub struct Successor {
    /// The path this process's binary was started from.
    pub exe: PathBuf,
    /// This process's arguments, without the program's name.
    pub args: Vec<std::ffi::OsString>,
}

impl Successor {
    /// This process's binary path and command line, read at its start
    /// (before an upgrade replaces the file at that path).
    pub fn of_this_process() -> Option<Self> {
        Some(Self {
            exe: std::env::current_exe().ok()?,
            args: std::env::args_os().skip(1).collect(),
        })
    }

    /// The successor's arguments: this process's, with `--takeover`.
    #[must_use]
    pub fn arguments(&self) -> Vec<std::ffi::OsString> {
        let mut args = self.args.clone();
        if !args.iter().any(|a| a == "--takeover") {
            args.push("--takeover".into());
        }
        args
    }

    fn spawn(&self) -> std::io::Result<tokio::process::Child> {
        tokio::process::Command::new(&self.exe)
            .args(self.arguments())
            .stdin(std::process::Stdio::null())
            .spawn()
    }
}

/// Starts a successor at each SIGUSR2 (one at a time) until `stop`; logs what
/// became of it. One that exits without taking over leaves this process
/// serving, as any failed takeover does.
pub async fn successor_on_signal(
    successor: Option<Successor>,
    memory_store: bool,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Ok(mut signal) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
    else {
        warn!("SIGUSR2 cannot be handled: no successor can be started by signal");
        return;
    };
    let mut running: Option<tokio::process::Child> = None;
    loop {
        tokio::select! {
            got = signal.recv() => {
                if got.is_none() {
                    return;
                }
                if let Some(c) = &running {
                    let pid = c.id().unwrap_or(0);
                    warn!(pid, "SIGUSR2: a successor (process {pid}) is already taking over; ignored");
                    continue;
                }
                if memory_store {
                    warn!("SIGUSR2: node.store is memory: its hooks live in this process and a takeover would lose them; ignored (restart instead)");
                    continue;
                }
                let Some(s) = &successor else {
                    error!("SIGUSR2: this process's binary path is unknown; start `ankusa serve --takeover` yourself");
                    continue;
                };
                match s.spawn() {
                    Ok(child) => {
                        info!(
                            pid = child.id(),
                            exe = %s.exe.display(),
                            "SIGUSR2: started a successor to take over ({} {})",
                            s.exe.display(),
                            s.arguments().iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
                        );
                        running = Some(child);
                    }
                    Err(e) => error!(exe = %s.exe.display(), error = %e, "SIGUSR2: the successor could not be started; serving on"),
                }
            }
            status = async { running.as_mut().expect("guarded").wait().await }, if running.is_some() => {
                running = None;
                match status {
                    Ok(s) => warn!(status = %s, "the successor exited without taking over (its log says why); serving on"),
                    Err(e) => warn!(error = %e, "the successor's end could not be read; serving on"),
                }
            }
            _ = stop.changed() => {
                if *stop.borrow() {
                    // A successor taking over goes on: dropped, not killed.
                    return;
                }
            }
        }
    }
}
