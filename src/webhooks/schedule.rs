//! When a failed delivery is tried again: the first delay (5 s by default) doubling up
//! to the longest (1 h), each with ±20 % jitter so that receivers recovering from an
//! outage are not hit by every gateway at once; a `Retry-After` is honoured when longer.
//! Past the retry window (24 h after the event) the event becomes a dead letter.

use std::time::Duration;

/// The retry policy of a world's deliveries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    pub(crate) first: Duration,
    pub(crate) max: Duration,
    /// How long after the event it is still tried.
    pub(crate) window: Duration,
}

impl Schedule {
    /// The delay after the `attempts`-th failed attempt (1 for the first).
    pub(crate) fn delay(&self, attempts: u32, retry_after: Option<Duration>) -> Duration {
        let doublings = attempts.saturating_sub(1).min(30);
        let base = self.first.saturating_mul(1u32 << doublings).min(self.max);
        let jittered = base.mul_f64(0.8 + 0.4 * unit_random());
        match retry_after {
            Some(asked) if asked > jittered => asked.min(self.max),
            _ => jittered,
        }
    }
}

/// A number in [0, 1) from the system's randomness.
fn unit_random() -> f64 {
    let mut bytes = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_the_cap_with_jitter() {
        let schedule = Schedule {
            first: Duration::from_secs(5),
            max: Duration::from_secs(3600),
            window: Duration::from_secs(86_400),
        };
        for (attempts, base) in [
            (1, 5.0),
            (2, 10.0),
            (3, 20.0),
            (10, 2560.0),
            (11, 3600.0),
            (40, 3600.0),
        ] {
            let delay = schedule.delay(attempts, None).as_secs_f64();
            assert!(
                delay >= base * 0.8 && delay <= base * 1.2,
                "{attempts}: {delay}"
            );
        }
        let asked = schedule.delay(1, Some(Duration::from_secs(120)));
        assert_eq!(asked, Duration::from_secs(120));
    }
}
