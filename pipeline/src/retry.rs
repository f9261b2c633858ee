//! The retry policy of a sink entry (docs/design.md section 5, "Retry
//! policy"): which HTTP error statuses are retried, the grace period during
//! which every 4xx is, the backoff, the cap on a Retry-After and the retry
//! horizon. The global `retry` section with the entry's own `retry:`
//! overrides applied, field by field.
//!
//! Pure: every decision takes the row's first attempt time and `now_ms` (and,
//! for the backoff's jitter, a random source); the pipeline reads them from
//! the store and commits what the `ankusa_queue` builders make of the answer
//! (docs/contributing.md, "Pure transitions, time passed in").

use std::time::Duration;

use ankusa_sinks::Outcome;
use rand::Rng;

/// The statuses retried under every policy: 408 Request Timeout, 425 Too Early
/// and 429 Too Many Requests mean "later" by definition, so a
/// `retry.retry_statuses` list that leaves them out still retries them (with
/// their Retry-After). Dead-lettering a 429 at its first attempt would turn a
/// receiver's request to slow down into lost deliveries.
pub const ALWAYS_RETRIED: [u16; 3] = [408, 425, 429];

/// A set of HTTP error statuses (400-599): the ones a sink entry retries
/// (`retry.retry_statuses`, plus [`ALWAYS_RETRIED`]). [`RetryStatuses::default`]
/// is the default list: 408, 425, 429 and every 5xx
/// ([`Outcome::retried_by_default`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RetryStatuses {
    /// Bit `s - 400` for status `s`.
    bits: [u64; 4],
}

impl RetryStatuses {
    /// No status.
    pub const fn none() -> RetryStatuses {
        RetryStatuses { bits: [0; 4] }
    }

    /// The statuses of `list` and [`ALWAYS_RETRIED`]. A status outside
    /// 400-599 is not an HTTP error status and is left out (the configuration
    /// refuses it at load).
    pub fn from_statuses(list: impl IntoIterator<Item = u16>) -> RetryStatuses {
        let mut set = RetryStatuses::none();
        for s in list.into_iter().chain(ALWAYS_RETRIED) {
            if (400..=599).contains(&s) {
                let i = usize::from(s - 400);
                set.bits[i / 64] |= 1 << (i % 64);
            }
        }
        set
    }

    /// Whether `status` is in the set.
    pub fn contains(&self, status: u16) -> bool {
        if !(400..=599).contains(&status) {
            return false;
        }
        let i = usize::from(status - 400);
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    /// The statuses, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (400..=599).filter(|s| self.contains(*s))
    }
}

impl Default for RetryStatuses {
    /// 408, 425, 429 and 500-599.
    fn default() -> RetryStatuses {
        RetryStatuses::from_statuses((400..=599).filter(|s| Outcome::retried_by_default(*s)))
    }
}

impl std::fmt::Debug for RetryStatuses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// A sink entry's retry policy (docs/design.md section 5, "Retry policy").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First backoff cap, milliseconds.
    pub base_ms: u64,
    /// Largest backoff cap, milliseconds.
    pub max_ms: u64,
    /// The retry horizon: no attempt is scheduled more than this long after a
    /// row's first attempt (but see [`RetryPolicy::next_attempt`] for a
    /// Retry-After), ms.
    pub max_elapsed_ms: u64,
    /// The longest a Retry-After holds a row, ms; `None` is `max_ms`, 0 lets
    /// no Retry-After hold a row longer than the backoff would.
    pub retry_after_max_ms: Option<u64>,
    /// For this long after a row's first attempt every 4xx answer is retried
    /// (a receiver that misbehaves while it deploys), ms; 0 is no grace.
    pub grace_ms: u64,
    /// The HTTP error statuses retried after the grace period (and the 5xx
    /// within it).
    pub statuses: RetryStatuses,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base_ms: 1_000,
            max_ms: 300_000,
            max_elapsed_ms: 24 * 3600 * 1000,
            retry_after_max_ms: None,
            grace_ms: 0,
            statuses: RetryStatuses::default(),
        }
    }
}

impl RetryPolicy {
    /// The cap on a Retry-After, ms: `retry_after_max_ms`, else `max_ms`.
    pub fn retry_after_cap_ms(&self) -> u64 {
        self.retry_after_max_ms.unwrap_or(self.max_ms)
    }

    /// When the retry horizon of a row first attempted at `first_ms` ends
    /// (unix ms; saturates).
    pub fn horizon_ms(&self, first_ms: u64) -> u64 {
        first_ms.saturating_add(self.max_elapsed_ms)
    }

    /// Whether an HTTP error `status` answered at `now_ms` to a row first
    /// attempted at `first_ms` is retried: it is in `statuses`, or it is a
    /// 4xx answered within `grace_ms` of the first attempt (the bound
    /// included).
    pub fn retries_status(&self, status: u16, first_ms: u64, now_ms: u64) -> bool {
        self.statuses.contains(status)
            || ((400..=499).contains(&status)
                && self.grace_ms > 0
                && now_ms.saturating_sub(first_ms) <= self.grace_ms)
    }

    /// `outcome` with an [`Outcome::HttpStatus`] resolved by
    /// [`RetryPolicy::retries_status`] ([`Outcome::resolve_status`]: retry,
    /// else sink gone for 410, else permanent); any other outcome unchanged.
    pub fn resolve(&self, outcome: Outcome, first_ms: u64, now_ms: u64) -> Outcome {
        outcome.resolve_status(|s| self.retries_status(s, first_ms, now_ms))
    }

    /// The wait before attempt `attempts + 1`, after `attempts` failed ones
    /// (>= 1): full jitter, uniform in `[0, min(max_ms, base_ms * 2^(attempts-1))]`;
    /// at least `after` when the sink said how long (Retry-After), `after`
    /// capped at [`RetryPolicy::retry_after_cap_ms`].
    pub fn delay_ms(&self, attempts: u32, after: Option<Duration>, rng: &mut impl Rng) -> u64 {
        let exp = attempts.saturating_sub(1).min(40);
        let cap = self.base_ms.saturating_mul(1u64 << exp).min(self.max_ms);
        let jitter = rng.random_range(0..=cap);
        let floor = after.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        jitter.max(floor.min(self.retry_after_cap_ms()))
    }

    /// When the next attempt is due (unix ms) after attempt `attempts` (>= 1)
    /// of a row first attempted at `first_ms` failed at `now_ms` with the
    /// Retry-After `after`; `None` dead-letters the row (the horizon has
    /// passed).
    ///
    /// - The wait is [`RetryPolicy::delay_ms`]; a due time within the
    ///   horizon ([`RetryPolicy::horizon_ms`], the bound included) is kept.
    /// - A Retry-After never dead-letters a row: when the wait would end past
    ///   the horizon and the failed attempt came with a Retry-After, the next
    ///   attempt is due at the horizon instead, as long as the horizon has
    ///   not passed yet, and always after a first attempt (then at `now_ms`
    ///   at the latest). That attempt is the last: if it fails the horizon
    ///   has passed. [`RetryPolicy::dead_at_claim`] lets it run.
    /// - Otherwise a wait past the horizon dead-letters the row now.
    pub fn next_attempt(
        &self,
        attempts: u32,
        after: Option<Duration>,
        first_ms: u64,
        now_ms: u64,
        rng: &mut impl Rng,
    ) -> Option<u64> {
        let due = now_ms.saturating_add(self.delay_ms(attempts, after, rng));
        let horizon = self.horizon_ms(first_ms);
        if due <= horizon {
            return Some(due);
        }
        if after.is_some() && (now_ms < horizon || attempts <= 1) {
            return Some(horizon.max(now_ms));
        }
        None
    }

    /// Whether claiming at `now_ms` a row due at `due_ms` and first attempted
    /// at `first_ms` dead-letters it for the horizon instead of attempting it
    /// (the claim-time check of docs/design.md section 5): it is past its
    /// horizon, and it was due before the horizon (a retry the pipeline
    /// reached late, a held row). A row due at or past its horizon (the last
    /// attempt a Retry-After asked for, a breaker park or a restart that
    /// ended past it) gets that attempt.
    pub fn dead_at_claim(&self, first_ms: u64, due_ms: u64, now_ms: u64) -> bool {
        let horizon = self.horizon_ms(first_ms);
        now_ms > horizon && due_ms < horizon
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            base_ms: 100,
            max_ms: 1_000,
            max_elapsed_ms: 10_000,
            ..RetryPolicy::default()
        }
    }

    fn status(code: u16) -> Outcome {
        Outcome::HttpStatus {
            status: code,
            reason: format!("HTTP {code}"),
            after: None,
        }
    }

    #[test]
    fn default_statuses_are_408_425_429_and_5xx() {
        let d = RetryStatuses::default();
        let listed: Vec<u16> = d.iter().filter(|s| *s < 500).collect();
        assert_eq!(listed, [408, 425, 429]);
        assert!((500..=599).all(|s| d.contains(s)));
        assert!(!d.contains(404) && !d.contains(410) && !d.contains(200) && !d.contains(600));
        assert_eq!(d.iter().count(), 103);
        // A list keeps 408, 425 and 429 ("later" by definition) and drops
        // what is not an HTTP error status.
        let s = RetryStatuses::from_statuses([404, 409, 599, 200, 600, 399]);
        assert_eq!(s.iter().collect::<Vec<_>>(), [404, 408, 409, 425, 429, 599]);
        assert_eq!(format!("{s:?}"), "{404, 408, 409, 425, 429, 599}");
    }

    #[test]
    fn statuses_resolve_by_the_list() {
        let p = RetryPolicy {
            statuses: RetryStatuses::from_statuses([404, 409, 503]),
            ..policy()
        };
        assert!(matches!(
            p.resolve(status(404), 0, 50_000),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            p.resolve(status(409), 0, 0),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            p.resolve(status(503), 0, 0),
            Outcome::Retry { .. }
        ));
        // Left off the list: 500 is permanent, 410 the sink gone.
        assert_eq!(
            p.resolve(status(500), 0, 0),
            Outcome::Permanent {
                reason: "HTTP 500".into()
            }
        );
        assert_eq!(
            p.resolve(status(410), 0, 0),
            Outcome::SinkGone {
                reason: "HTTP 410".into()
            }
        );
        assert_eq!(
            p.resolve(status(400), 0, 0),
            Outcome::Permanent {
                reason: "HTTP 400".into()
            }
        );
        // Other outcomes pass through.
        assert_eq!(p.resolve(Outcome::Ok, 0, 0), Outcome::Ok);
        assert_eq!(
            p.resolve(Outcome::permanent("x"), 0, 0),
            Outcome::permanent("x")
        );
        // The default list.
        let d = policy();
        assert!(matches!(
            d.resolve(status(429), 0, 0),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            d.resolve(status(404), 0, 0),
            Outcome::Permanent { .. }
        ));
    }

    #[test]
    fn a_grace_period_retries_every_4xx_from_the_first_attempt() {
        let p = RetryPolicy {
            grace_ms: 5_000,
            ..policy()
        };
        let first = 1_000_000;
        for code in [400, 401, 403, 404, 409, 410, 422, 499] {
            assert!(p.retries_status(code, first, first), "{code} at once");
            assert!(
                p.retries_status(code, first, first + 5_000),
                "{code} at the bound"
            );
            assert!(
                !p.retries_status(code, first, first + 5_001),
                "{code} past the grace"
            );
        }
        assert!(matches!(
            p.resolve(status(404), first, first + 4_999),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            p.resolve(status(404), first, first + 5_001),
            Outcome::Permanent { .. }
        ));
        assert!(matches!(
            p.resolve(status(410), first, first + 5_001),
            Outcome::SinkGone { .. }
        ));
        // The default list still holds after the grace period; a 5xx left
        // off the list is not retried by the grace (it is 4xx only).
        assert!(p.retries_status(429, first, first + 60_000));
        let q = RetryPolicy {
            statuses: RetryStatuses::from_statuses([429]),
            ..p
        };
        assert!(!q.retries_status(503, first, first));
        // No grace: a 404 is permanent at once.
        assert!(!policy().retries_status(404, first, first));
    }

    #[test]
    fn a_retry_after_is_capped() {
        let mut r = rng();
        let p = RetryPolicy {
            retry_after_max_ms: Some(2_000),
            ..policy()
        };
        let day = Some(Duration::from_secs(86_400));
        for attempts in 1..10 {
            assert_eq!(p.delay_ms(attempts, day, &mut r), 2_000);
        }
        // Below the cap it is obeyed (and the jitter is at most max_ms).
        assert_eq!(
            p.delay_ms(1, Some(Duration::from_millis(1_500)), &mut r),
            1_500
        );
        // The default cap is max_ms.
        assert_eq!(policy().retry_after_cap_ms(), 1_000);
        assert_eq!(policy().delay_ms(3, day, &mut r), 1_000);
        // 0: a Retry-After holds nothing past the backoff.
        let z = RetryPolicy {
            retry_after_max_ms: Some(0),
            ..policy()
        };
        for attempts in 1..10 {
            assert!(z.delay_ms(attempts, day, &mut r) <= 1_000);
        }
        // A huge value saturates instead of overflowing.
        let big = RetryPolicy {
            retry_after_max_ms: Some(u64::MAX),
            ..policy()
        };
        assert_eq!(big.delay_ms(1, Some(Duration::MAX), &mut r), u64::MAX);
    }

    #[test]
    fn backoff_stays_within_its_cap() {
        let mut r = rng();
        let p = policy();
        for _ in 0..200 {
            assert!(p.delay_ms(1, None, &mut r) <= 100);
            assert!(p.delay_ms(3, None, &mut r) <= 400);
            assert!(p.delay_ms(30, None, &mut r) <= 1_000);
        }
    }

    #[test]
    fn the_horizon_dead_letters_a_plain_retry() {
        let mut r = rng();
        let p = policy();
        let first = 5_000;
        // Inside the horizon: due within the backoff.
        let due = p
            .next_attempt(2, None, first, first + 1_000, &mut r)
            .expect("due");
        assert!((first + 1_000..=first + 1_200).contains(&due), "{due}");
        // The wait would pass the horizon (any jitter): dead.
        let p = RetryPolicy {
            base_ms: 1_000,
            max_ms: 1_000,
            ..policy()
        };
        let mut dead = 0;
        for _ in 0..100 {
            if p.next_attempt(5, None, first, first + 9_999, &mut r)
                .is_none()
            {
                dead += 1;
            }
        }
        assert!(dead > 0, "a wait past the horizon was never dead-lettered");
        assert_eq!(p.next_attempt(5, None, first, first + 10_001, &mut r), None);
    }

    #[test]
    fn a_retry_after_never_dead_letters_a_first_attempt() {
        let mut r = rng();
        // The cap (max_ms by default, 60 s) is past the 10 s horizon.
        let p = RetryPolicy {
            base_ms: 100,
            max_ms: 60_000,
            max_elapsed_ms: 10_000,
            ..RetryPolicy::default()
        };
        let first = 1_000;
        let day = Some(Duration::from_secs(86_400));
        // First attempt, answered at once: the next attempt at the horizon.
        assert_eq!(
            p.next_attempt(1, day, first, first + 20, &mut r),
            Some(first + 10_000)
        );
        // The first attempt's call outlasted the horizon: at once.
        assert_eq!(
            p.next_attempt(1, day, first, first + 12_000, &mut r),
            Some(first + 12_000)
        );
        // A later attempt before the horizon: the horizon is its last chance.
        assert_eq!(
            p.next_attempt(3, day, first, first + 9_000, &mut r),
            Some(first + 10_000)
        );
        // That last attempt failed too (at or after the horizon): dead.
        assert_eq!(p.next_attempt(4, day, first, first + 10_000, &mut r), None);
        assert_eq!(p.next_attempt(4, day, first, first + 10_050, &mut r), None);
        // Within the horizon, the capped Retry-After is the wait.
        let capped = RetryPolicy {
            retry_after_max_ms: Some(2_000),
            ..p
        };
        assert_eq!(
            capped.next_attempt(1, day, first, first + 20, &mut r),
            Some(first + 2_020)
        );
    }

    #[test]
    fn a_claim_dead_letters_only_rows_due_before_their_horizon() {
        let p = policy();
        let first = 100;
        let horizon = first + 10_000;
        // Due inside, claimed inside: attempted.
        assert!(!p.dead_at_claim(first, horizon - 5, horizon));
        // Due inside, claimed late: dead.
        assert!(p.dead_at_claim(first, horizon - 5, horizon + 1));
        // Due at the horizon (a Retry-After's last attempt), claimed late:
        // attempted; due past it (a park that ended later): attempted.
        assert!(!p.dead_at_claim(first, horizon, horizon + 50));
        assert!(!p.dead_at_claim(first, horizon + 7, horizon + 50));
        // No overflow with an unbounded horizon.
        let forever = RetryPolicy {
            max_elapsed_ms: u64::MAX,
            ..p
        };
        assert!(!forever.dead_at_claim(first, 0, u64::MAX));
    }
}
