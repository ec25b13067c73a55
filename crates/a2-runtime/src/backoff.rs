//! Retry backoff: exponential, capped, with jitter.

use std::time::Duration;

/// How long a failed event waits before its next attempt (F6 `retry_at`).
///
/// The `n`-th failure waits `min(max, initial × multiplierⁿ⁻¹)`, shortened by
/// a random fraction of up to `jitter` of itself so that events failing
/// together do not retry together. The wait is added to the *store* clock
/// when the failure is recorded, so it holds across processes and under a
/// manual clock.
///
/// ```
/// use std::time::Duration;
/// use a2_runtime::Backoff;
/// let backoff = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1))
///     .with_jitter(0.0);
/// assert_eq!(backoff.delay(1), Duration::from_millis(100));
/// assert_eq!(backoff.delay(3), Duration::from_millis(400));
/// assert_eq!(backoff.delay(10), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Backoff {
    /// The wait after the first failure.
    pub initial: Duration,
    /// The longest wait (the cap).
    pub max: Duration,
    /// Growth per failure (≥ 1).
    pub multiplier: f64,
    /// Fraction of the wait that is random, in `0.0..=1.0`.
    pub jitter: f64,
}

impl Default for Backoff {
    /// 500 ms, doubling, capped at 60 s, 20 % jitter.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(60),
            multiplier: 2.0,
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// Retry at once, without waiting.
    pub fn none() -> Self {
        Self {
            initial: Duration::ZERO,
            max: Duration::ZERO,
            multiplier: 1.0,
            jitter: 0.0,
        }
    }

    /// Doubling from `initial` up to `max`, with the default jitter.
    pub fn exponential(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            ..Self::default()
        }
    }

    /// Sets the random fraction (clamped to `0.0..=1.0`).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter.clamp(0.0, 1.0);
        self
    }

    /// Sets the growth per failure (at least 1).
    pub fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier.max(1.0);
        self
    }

    /// The wait after the `failure`-th failure (counting from 1), with a
    /// fresh random jitter.
    pub fn delay(&self, failure: u32) -> Duration {
        self.delay_with(failure, fastrand::f64())
    }

    /// The wait after the `failure`-th failure with the jitter drawn as
    /// `random` in `0.0..1.0` (0 means no shortening).
    pub fn delay_with(&self, failure: u32, random: f64) -> Duration {
        let exponent = failure.saturating_sub(1).min(1_000) as i32;
        let grown = self.initial.as_secs_f64() * self.multiplier.max(1.0).powi(exponent);
        let capped = grown.min(self.max.as_secs_f64());
        let jitter = self.jitter.clamp(0.0, 1.0) * random.clamp(0.0, 1.0);
        let secs = capped * (1.0 - jitter);
        if secs.is_finite() && secs > 0.0 {
            Duration::from_secs_f64(secs).min(self.max)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_caps_and_jitter_only_shortens() {
        let b = Backoff::exponential(Duration::from_millis(100), Duration::from_millis(350));
        assert_eq!(b.delay_with(1, 0.0), Duration::from_millis(100));
        assert_eq!(b.delay_with(2, 0.0), Duration::from_millis(200));
        assert_eq!(b.delay_with(3, 0.0), Duration::from_millis(350));
        assert_eq!(b.delay_with(u32::MAX, 0.0), Duration::from_millis(350));
        for _ in 0..100 {
            let d = b.delay(2);
            assert!(d <= Duration::from_millis(200) && d >= Duration::from_millis(160));
        }
        assert_eq!(Backoff::none().delay(7), Duration::ZERO);
    }
}
