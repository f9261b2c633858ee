//! Wrong bearer tokens (docs/design.md section 5, "Admin API"): each one is
//! counted (`ankusa_admin_auth_failures_total`), logged at most once per
//! [`LOG_EVERY`] with the number since the last line, and a client address
//! that keeps sending them is slowed down.
//!
//! The slowing is a token bucket per client IP address: [`FREE_FAILURES`]
//! wrong tokens at once, then one more per [`REFILL`]. While an address's
//! bucket is empty, every request of it that needs the token is answered 429
//! with `Retry-After` before the token is compared, the right token included:
//! otherwise a guesser would still learn, at full speed, which guess was right.
//! A client that sends the right token never fills its bucket; an operator
//! who mistyped the token a few times is not slowed at all.
//!
//! Pure apart from its lock: every call takes `now`, so the tests drive the
//! clock.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Wrong tokens a client address may send before it is slowed down: enough
/// for an operator's typos and a scraper with a stale token (one scrape per
/// 15 s refills faster than it fails), far too few to guess a token of
/// `MIN_ADMIN_TOKEN_LEN` characters.
pub const FREE_FAILURES: u32 = 30;
/// One more wrong token is allowed per this much time, once the free ones
/// are spent: a guesser gets one guess a second per address.
pub const REFILL: Duration = Duration::from_secs(1);
/// At most one log line about wrong tokens per this much time.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// Client addresses tracked at once. Past it the addresses whose buckets
/// have refilled are forgotten; if none has, every address is (memory stays
/// bounded whatever the number of addresses a guesser uses).
pub const TRACKED_CLIENTS: usize = 4096;

/// One client address's allowance of wrong tokens.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Wrong tokens it may still send at `at`, in units of 1/1000.
    milli: u64,
    /// When `milli` was computed.
    at: Instant,
}

impl Bucket {
    const FULL: u64 = FREE_FAILURES as u64 * 1000;

    /// The allowance at `now`: refilled by the time since `at`.
    fn at(self, now: Instant) -> Bucket {
        let since = now.saturating_duration_since(self.at);
        let gained = since.as_millis() * 1000 / REFILL.as_millis().max(1);
        let milli = u64::try_from(u128::from(self.milli) + gained)
            .unwrap_or(u64::MAX)
            .min(Bucket::FULL);
        Bucket { milli, at: now }
    }

    /// How long until one wrong token is allowed again (zero if it is now).
    fn wait(self) -> Duration {
        if self.milli >= 1000 {
            Duration::ZERO
        } else {
            REFILL.mul_f64((1000 - self.milli) as f64 / 1000.0)
        }
    }
}

/// What the admin listener knows of wrong tokens; one per listener.
#[derive(Debug)]
pub struct AuthFailures {
    inner: Mutex<Inner>,
    /// Wrong or missing tokens on routes that need one
    /// (`ankusa_admin_auth_failures_total`).
    pub failed: AtomicU64,
    /// Requests answered 429 because their address kept failing
    /// (`ankusa_admin_auth_throttled_total`).
    pub throttled: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    clients: HashMap<IpAddr, Bucket>,
    /// When the last log line was written.
    logged_at: Option<Instant>,
    /// Wrong tokens since the last log line.
    unlogged: u64,
}

/// A log line to write about wrong tokens: `failures` since the last line,
/// the latest from `client`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailureLog {
    /// Wrong tokens since the last line (this one included).
    pub failures: u64,
    /// The address of the latest.
    pub client: IpAddr,
}

impl Default for AuthFailures {
    fn default() -> AuthFailures {
        AuthFailures {
            inner: Mutex::new(Inner::default()),
            failed: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
        }
    }
}

impl AuthFailures {
    /// Whether `client` may have its token checked at `now`: `Err` with the
    /// time to wait while it has spent its wrong tokens (the request is
    /// answered 429 with that `Retry-After`, and counted).
    pub fn admit(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut inner = self.lock();
        let Some(bucket) = inner.clients.get(&client).copied() else {
            return Ok(());
        };
        let bucket = bucket.at(now);
        if bucket.milli >= 1000 {
            return Ok(());
        }
        inner.clients.insert(client, bucket);
        drop(inner);
        self.throttled.fetch_add(1, Ordering::Relaxed);
        Err(bucket.wait())
    }

    /// Records a wrong or missing token from `client` at `now`: counted,
    /// taken from its allowance, and a log line to write when the last one
    /// is at least [`LOG_EVERY`] old.
    pub fn failed(&self, client: IpAddr, now: Instant) -> Option<FailureLog> {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        if !inner.clients.contains_key(&client) && inner.clients.len() >= TRACKED_CLIENTS {
            inner.clients.retain(|_, b| b.at(now).milli < Bucket::FULL);
            if inner.clients.len() >= TRACKED_CLIENTS {
                inner.clients.clear();
            }
        }
        let bucket = inner
            .clients
            .get(&client)
            .copied()
            .unwrap_or(Bucket {
                milli: Bucket::FULL,
                at: now,
            })
            .at(now);
        inner.clients.insert(
            client,
            Bucket {
                milli: bucket.milli.saturating_sub(1000),
                at: now,
            },
        );
        inner.unlogged += 1;
        let due = inner
            .logged_at
            .is_none_or(|at| now.saturating_duration_since(at) >= LOG_EVERY);
        if !due {
            return None;
        }
        let failures = std::mem::take(&mut inner.unlogged);
        inner.logged_at = Some(now);
        Some(FailureLog { failures, client })
    }

    /// Client addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.lock().clients.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is a counter per address: a panic while it was held
        // leaves nothing half-written that matters.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn an_address_is_slowed_after_its_free_failures_and_others_are_not() {
        let f = AuthFailures::default();
        let t0 = Instant::now();
        for _ in 0..FREE_FAILURES {
            assert_eq!(f.admit(A, t0), Ok(()));
            f.failed(A, t0);
        }
        let wait = f.admit(A, t0).expect_err("slowed after the free failures");
        assert_eq!(wait, REFILL);
        assert_eq!(f.admit(B, t0), Ok(()), "another address is not slowed");
        // Half a refill later: still waiting, half as long.
        let half = t0 + REFILL / 2;
        assert_eq!(f.admit(A, half), Err(REFILL / 2));
        // One refill later: one more guess, then slowed again.
        let later = t0 + REFILL;
        assert_eq!(f.admit(A, later), Ok(()));
        f.failed(A, later);
        assert_eq!(f.admit(A, later), Err(REFILL));
        assert_eq!(
            f.failed.load(Ordering::Relaxed),
            u64::from(FREE_FAILURES) + 1
        );
        assert_eq!(f.throttled.load(Ordering::Relaxed), 3);
        // Long enough: the whole allowance is back.
        let rested = later + REFILL * FREE_FAILURES;
        for _ in 0..FREE_FAILURES {
            assert_eq!(f.admit(A, rested), Ok(()));
            f.failed(A, rested);
        }
        assert!(f.admit(A, rested).is_err());
    }

    #[test]
    fn wrong_tokens_are_logged_at_most_once_per_interval_with_their_count() {
        let f = AuthFailures::default();
        let t0 = Instant::now();
        assert_eq!(
            f.failed(A, t0),
            Some(FailureLog {
                failures: 1,
                client: A
            })
        );
        for _ in 0..5 {
            assert_eq!(f.failed(A, t0 + LOG_EVERY / 2), None);
        }
        assert_eq!(
            f.failed(B, t0 + LOG_EVERY),
            Some(FailureLog {
                failures: 6,
                client: B
            })
        );
    }

    #[test]
    fn the_tracked_addresses_stay_bounded() {
        let f = AuthFailures::default();
        let t0 = Instant::now();
        for i in 0..(TRACKED_CLIENTS as u32 + 10) {
            f.failed(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(f.tracked() <= TRACKED_CLIENTS, "{}", f.tracked());
        // Refilled addresses are forgotten first.
        let f = AuthFailures::default();
        for i in 0..(TRACKED_CLIENTS as u32) {
            f.failed(IpAddr::from(i.to_be_bytes()), t0);
        }
        f.failed(A, t0 + REFILL * 2);
        assert_eq!(f.tracked(), 1);
    }
}
