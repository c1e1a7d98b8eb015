//! Requeue intervals: per state, exponential in the attempts made in that state, with ±10 %
//! jitter so objects created together drift apart (seed 000, part 3).

use std::time::Duration;

use rand::Rng;

/// `interval = min(max, base × 2^attempt)`, then ±`jitter`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequeuePolicy {
    pub base: Duration,
    pub max: Duration,
    /// Fraction of the interval, e.g. 0.1 for ±10 %.
    pub jitter: f64,
}

impl RequeuePolicy {
    pub const fn exponential(base: Duration, max: Duration) -> Self {
        Self { base, max, jitter: 0.1 }
    }

    pub const fn fixed(interval: Duration) -> Self {
        Self { base: interval, max: interval, jitter: 0.1 }
    }

    /// The interval before jitter for the given attempt (0 for the first wait in a state).
    pub fn interval(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The interval with jitter applied.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        self.jittered(self.interval(attempt), rng)
    }

    /// The interval raised to at least `floor`, then jittered: after throttling, objects that
    /// all hit the floor must still spread out instead of coming back in the same instant.
    pub fn delay_at_least(&self, attempt: u32, floor: Duration, rng: &mut impl Rng) -> Duration {
        self.jittered(self.interval(attempt).max(floor), rng)
    }

    fn jittered(&self, interval: Duration, rng: &mut impl Rng) -> Duration {
        if self.jitter <= 0.0 || interval.is_zero() {
            return interval;
        }
        let spread = rng.random_range(-self.jitter..=self.jitter);
        interval.mul_f64(1.0 + spread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const PENDING: RequeuePolicy = RequeuePolicy::exponential(Duration::from_secs(30), Duration::from_secs(300));

    #[test]
    fn interval_doubles_per_attempt_until_capped() {
        let seconds: Vec<u64> = (0..6).map(|a| PENDING.interval(a).as_secs()).collect();
        assert_eq!(seconds, [30, 60, 120, 240, 300, 300]);
    }

    #[test]
    fn huge_attempt_counts_do_not_overflow() {
        assert_eq!(PENDING.interval(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn jitter_stays_within_ten_percent_and_spreads() {
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..1000).map(|_| PENDING.delay(1, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d >= Duration::from_secs(54) && *d <= Duration::from_secs(66)));
        let distinct: std::collections::HashSet<_> = delays.iter().map(|d| d.as_millis()).collect();
        assert!(distinct.len() > 500, "jitter should spread delays, got {} distinct", distinct.len());
    }

    #[test]
    fn throttled_delay_is_clamped_to_the_floor_then_jittered() {
        let errors = RequeuePolicy::exponential(Duration::from_secs(5), Duration::from_secs(300));
        let floor = Duration::from_secs(60);
        let mut rng = StdRng::seed_from_u64(11);
        let delays: Vec<Duration> = (0..1000).map(|_| errors.delay_at_least(0, floor, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d >= Duration::from_secs(54) && *d <= Duration::from_secs(66)), "{delays:?}");
        assert!(delays.iter().any(|d| *d < floor) && delays.iter().any(|d| *d > floor), "jitter applies after the clamp");
        let distinct: std::collections::HashSet<_> = delays.iter().map(|d| d.as_millis()).collect();
        assert!(distinct.len() > 500, "throttled requeues must not all land on the floor, got {} distinct", distinct.len());
    }

    #[test]
    fn throttled_delay_above_the_floor_keeps_growing() {
        let errors = RequeuePolicy::exponential(Duration::from_secs(5), Duration::from_secs(300));
        let mut rng = StdRng::seed_from_u64(3);
        // 5 s × 2^5 = 160 s is above the 60 s floor: the backoff, not the floor, decides.
        let delay = errors.delay_at_least(5, Duration::from_secs(60), &mut rng);
        assert!(delay >= Duration::from_secs(144) && delay <= Duration::from_secs(176), "{delay:?}");
    }

    #[test]
    fn fixed_policy_ignores_attempts() {
        let ready = RequeuePolicy::fixed(Duration::from_secs(3600));
        assert_eq!(ready.interval(0), ready.interval(9));
    }
}
