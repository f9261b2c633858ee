//! systemd's service notifications (sd_notify(3)): under `Type=notify`
//! (`deploy/systemd/ankusa.service`) the relay says `READY=1` once it takes
//! hooks (its store open, the previous run's claimed rows recovered), so
//! `systemctl start` returns only then and `systemctl reload` never reaches a
//! relay that is still starting; `RELOADING=1` and `READY=1` around each
//! reload and `STOPPING=1` when it begins to stop. Without `NOTIFY_SOCKET`
//! (not under systemd) it does nothing. A datagram to the socket systemd
//! names, no library: the protocol is one line of text.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (`READY=1`, ...) to systemd's notification socket, when
/// the relay runs under one (`NOTIFY_SOCKET`); whether it was sent. A
/// failure is logged at debug level and is not the relay's to act on.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let sent = UnixDatagram::unbound().and_then(|sock| {
        let bytes = path.as_bytes();
        match bytes.strip_prefix(b"@") {
            // An abstract socket (systemd's default for containers).
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(state.as_bytes(), &addr)
            }
            None => sock.send_to(state.as_bytes(), &path),
        }
    });
    match sent {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(error = %e, state, "could not notify systemd (NOTIFY_SOCKET)");
            false
        }
    }
}

/// `RELOADING=1` with the monotonic clock's time, as systemd asks of a
/// service that says it reloads (sd_notify(3), `MONOTONIC_USEC`).
pub fn reloading() -> bool {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the local struct it is given.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    let usec = u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"))
}
