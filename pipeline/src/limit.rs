//! Per sink entry rate limits (docs/design.md section 5, "Rate limit"): a GCRA
//! limiter on the pipeline's clock, checked by the scan before a claim
//! ([`crate::scan`]); it never sleeps.

use std::sync::Arc;
use std::time::Duration;

/// A sink entry's rate limit (docs/design.md section 5, "Rate limit"): at
/// most `per_second` calls a second on average, `burst` at once after a quiet
/// spell. Shared by every tenant of the source (it limits what reaches one
/// destination).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Calls per second, on average (> 0; a fraction is allowed: 0.5 is one
    /// call every 2 s).
    pub per_second: f64,
    /// Calls that may start back to back after the sink was idle (>= 1).
    pub burst: u32,
}

/// The pipeline's clock (unix ms) as a `governor` clock, so a rate limit
/// counts time as the rest of dispatch does (and a test's clock drives both).
#[derive(Clone)]
pub(crate) struct LimiterClock(pub(crate) Arc<dyn Fn() -> u64 + Send + Sync>);

impl governor::clock::Clock for LimiterClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        Duration::from_millis((self.0)())
    }
}

pub(crate) type Limiter = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    LimiterClock,
    governor::middleware::NoOpMiddleware<Duration>,
>;

/// A GCRA limiter for `limit` on `clock`; `None` for a rate no quota can
/// express (not above 0, not finite: the configuration refuses them).
pub(crate) fn limiter(limit: RateLimit, clock: &LimiterClock) -> Option<Limiter> {
    if !(limit.per_second.is_finite() && limit.per_second > 0.0) {
        return None;
    }
    let period = Duration::try_from_secs_f64(1.0 / limit.per_second).ok()?;
    let burst = std::num::NonZeroU32::new(limit.burst.max(1))?;
    // governor keeps period x burst in u64 nanoseconds and panics past it;
    // the configuration's bounds keep far below (1000 s x 10^6 = 10^18 ns).
    let span_ns = period.as_nanos().checked_mul(u128::from(burst.get()))?;
    if span_ns >= u128::from(u64::MAX / 2) {
        return None;
    }
    let quota = governor::Quota::with_period(period)?.allow_burst(burst);
    Some(governor::RateLimiter::direct_with_clock(
        quota,
        clock.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn the_rate_limit_counts_on_the_pipeline_clock() {
        let now = Arc::new(AtomicU64::new(1_000_000));
        let n = Arc::clone(&now);
        let clock = LimiterClock(Arc::new(move || n.load(Ordering::SeqCst)));
        let l = limiter(
            RateLimit {
                per_second: 20.0,
                burst: 20,
            },
            &clock,
        )
        .expect("a quota");
        for _ in 0..20 {
            assert!(l.check().is_ok(), "the burst");
        }
        let next = l.check().expect_err("over the rate").earliest_possible();
        assert!(
            next > Duration::from_millis(1_000_000) && next <= Duration::from_millis(1_000_050),
            "{next:?}"
        );
        now.store(1_000_049, Ordering::SeqCst);
        assert!(l.check().is_err());
        now.store(1_000_050, Ordering::SeqCst);
        assert!(l.check().is_ok(), "one every 50 ms");
        assert!(l.check().is_err());
        // A fraction: one every 2 s.
        let slow = limiter(
            RateLimit {
                per_second: 0.5,
                burst: 1,
            },
            &clock,
        )
        .expect("a quota");
        assert!(slow.check().is_ok());
        now.store(1_002_049, Ordering::SeqCst);
        assert!(slow.check().is_err());
        now.store(1_002_050, Ordering::SeqCst);
        assert!(slow.check().is_ok());
        // Rates no quota can express are refused, not a panic.
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                limiter(
                    RateLimit {
                        per_second: bad,
                        burst: 1
                    },
                    &clock
                )
                .is_none(),
                "{bad}"
            );
        }
    }
}
