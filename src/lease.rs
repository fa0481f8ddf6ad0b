//! The lease clock: until when this process may believe it holds the lock.
//!
//! The deadline is counted from the moment a SET or renewal was *sent*, not from its reply:
//! the server started the TTL somewhere between the two, so the send time is the safe bound.
//! From that the Redis docs' drift term is subtracted to cover clock rate differences.
//!
//! # Which clock
//! `Instant` is CLOCK_MONOTONIC, which stops while the machine is suspended. Redis' TTL does
//! not stop: after a suspend the server may have expired the key long ago while a monotonic
//! deadline still lies in the future. CLOCK_BOOTTIME counts suspended time as well, so the
//! deadline here is kept on CLOCK_BOOTTIME. (tokio's timers run on CLOCK_MONOTONIC; the
//! supervisor therefore naps in short slices and re-reads this clock after each wake-up.)

use std::time::Duration;

use nix::time::{ClockId, clock_gettime};

/// A reading of CLOCK_BOOTTIME.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(Duration);

impl Stamp {
    pub fn now() -> Stamp {
        // CLOCK_BOOTTIME exists on every Linux since 2.6.39.
        let ts =
            clock_gettime(ClockId::CLOCK_BOOTTIME).expect("clock_gettime(CLOCK_BOOTTIME) failed");
        Stamp(Duration::from(ts))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Stamp) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// Time from `self` until `later`, zero if it has passed.
    pub fn until(self, later: Stamp) -> Duration {
        later.0.saturating_sub(self.0)
    }

    pub fn checked_add(self, d: Duration) -> Option<Stamp> {
        self.0.checked_add(d).map(Stamp)
    }

    pub fn saturating_sub(self, d: Duration) -> Stamp {
        Stamp(self.0.saturating_sub(d))
    }
}

/// The clock drift allowance for a lease of `ttl`: 1% plus 2 ms.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The lease granted by a SET or renewal sent at `sent` ends at `sent + ttl - drift`.
/// `None` if the settings leave no lease at all (refused by config before we get here).
pub fn deadline(sent: Stamp, ttl: Duration) -> Option<Stamp> {
    let valid = ttl.checked_sub(drift(ttl))?;
    sent.checked_add(valid)
}

/// Where the lease stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Renewals may still fail for a while.
    Safe,
    /// Inside the grace window: the command must be told to stop now.
    Stopping,
    /// The lease may already have expired on the server: the command must be gone.
    Expired,
}

/// The lease held by this process, and when it must end.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    ttl: Duration,
    grace: Duration,
    deadline: Stamp,
}

impl Lease {
    /// A lease from a SET sent at `sent`. `None` when `ttl` leaves no lease after drift.
    pub fn granted(sent: Stamp, ttl: Duration, grace: Duration) -> Option<Lease> {
        Some(Lease {
            ttl,
            grace,
            deadline: deadline(sent, ttl)?,
        })
    }

    /// A renewal sent at `sent` succeeded. The deadline never moves backwards: a renewal whose
    /// reply was delayed cannot shorten a lease that a later one already extended.
    pub fn renewed(&mut self, sent: Stamp) {
        if let Some(d) = deadline(sent, self.ttl) {
            self.deadline = self.deadline.max(d);
        }
    }

    pub fn deadline(&self) -> Stamp {
        self.deadline
    }

    /// When the command must get SIGTERM if no renewal succeeds before.
    pub fn stop_at(&self) -> Stamp {
        self.deadline.saturating_sub(self.grace)
    }

    pub fn standing(&self, now: Stamp) -> Standing {
        if now >= self.deadline {
            Standing::Expired
        } else if now >= self.stop_at() {
            Standing::Stopping
        } else {
            Standing::Safe
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Stamp {
        Stamp(Duration::from_millis(ms))
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(30)), Duration::from_millis(302));
        assert_eq!(drift(Duration::from_secs(1)), Duration::from_millis(12));
    }

    #[test]
    fn deadline_counts_from_send_time_minus_drift() {
        let d = deadline(at(1_000), Duration::from_secs(1)).unwrap();
        assert_eq!(d, at(1_988));
    }

    #[test]
    fn deadline_refuses_overflow_and_tiny_ttls() {
        assert_eq!(deadline(at(0), Duration::from_millis(1)), None);
        assert_eq!(deadline(Stamp(Duration::MAX), Duration::from_secs(1)), None);
    }

    #[test]
    fn standing_moves_through_grace_to_expired() {
        let lease =
            Lease::granted(at(0), Duration::from_secs(1), Duration::from_millis(300)).unwrap();
        assert_eq!(lease.stop_at(), at(688));
        assert_eq!(lease.standing(at(687)), Standing::Safe);
        assert_eq!(lease.standing(at(688)), Standing::Stopping);
        assert_eq!(lease.standing(at(987)), Standing::Stopping);
        assert_eq!(lease.standing(at(988)), Standing::Expired);
    }

    #[test]
    fn renewals_extend_from_their_own_send_time_and_never_shorten() {
        let mut lease =
            Lease::granted(at(0), Duration::from_secs(1), Duration::from_millis(300)).unwrap();
        lease.renewed(at(500));
        assert_eq!(lease.deadline(), at(1_488));
        // A stale reply from an earlier send does not pull the deadline back.
        lease.renewed(at(100));
        assert_eq!(lease.deadline(), at(1_488));
    }

    #[test]
    fn boottime_advances() {
        let a = Stamp::now();
        std::thread::sleep(Duration::from_millis(5));
        let b = Stamp::now();
        assert!(b.since(a) >= Duration::from_millis(5));
        assert_eq!(a.since(b), Duration::ZERO);
    }
}
