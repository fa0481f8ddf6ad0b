//! Pauses between attempts on a busy lock: jittered, exponential, capped.

use std::time::Duration;

/// First and largest pause between acquire attempts on a busy lock.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(10);
pub const BACKOFF_CAP: Duration = Duration::from_millis(250);

/// Jittered exponential backoff for a busy lock: quick first retries, capped.
pub struct Backoff {
    step: Duration,
    rng: u64,
}

impl Backoff {
    /// `seed` should differ between wrappers (random bits of the token), so that wrappers
    /// started together do not retry in step.
    pub fn new(seed: u64) -> Backoff {
        // xorshift64 must not start at 0.
        let rng = seed | 1;
        Backoff {
            step: BACKOFF_FIRST,
            rng,
        }
    }

    /// Somewhere between half and all of the current step; the step doubles up to the cap.
    pub fn pause(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(BACKOFF_CAP);
        let half = step / 2;
        half + self.spread(half)
    }

    /// Somewhere between zero and `max`, from the same random sequence.
    pub fn spread(&mut self, max: Duration) -> Duration {
        // xorshift64: spreads wrappers that started together; not for secrets.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        Duration::from_nanos(self.rng % (max.as_nanos() as u64 + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_starts_quick_and_is_capped() {
        let mut b = Backoff::new(0x0123_4567_89ab_cdef);
        let first = b.pause();
        assert!(
            first >= BACKOFF_FIRST / 2 && first <= BACKOFF_FIRST,
            "{first:?}"
        );
        for _ in 0..20 {
            let d = b.pause();
            assert!(d <= BACKOFF_CAP, "{d:?}");
        }
        assert!(b.pause() >= BACKOFF_CAP / 2);
    }
}
