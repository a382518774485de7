//! Admission of new streams (`--max-new-streams-per-second`): a token bucket, so that a
//! reconnect storm (thousands of proxies back at once after a restart, or when a replica
//! goes) is let in at a steady rate. The excess is answered `RESOURCE_EXHAUSTED` at once;
//! proxies back off and retry (Envoy with jittered exponential backoff), here or on another
//! replica.
//!
//! Owns: the bucket (pure: time comes in as an argument), and how often a turned-away stream
//! is logged (once a second at most, with the count since). Must not: end streams itself
//! (`server::stream` does, with the status) or count them (`telemetry`).

use std::time::{Duration, Instant};

/// The rate and burst of new streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamRate {
    /// Streams admitted per second, on average.
    pub per_second: u32,
    /// Streams admitted at once after a quiet time (the bucket's size).
    pub burst: u32,
}

/// The default: see docs/benchmarks.md ("Reconnect storms") for the measurements.
pub const DEFAULT_RATE: StreamRate = StreamRate {
    per_second: 5000,
    burst: 5000,
};

/// How often turned-away streams are logged, at most.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// A token bucket: `burst` tokens, refilled at `per_second`; a new stream takes one.
#[derive(Debug)]
pub struct Bucket {
    rate: StreamRate,
    tokens: f64,
    refilled_at: Instant,
    /// Turned away since the last log line, and when that was.
    unlogged: u64,
    logged_at: Option<Instant>,
}

/// What the bucket says of a new stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// Turned away; `Some(n)`: log it now, with the `n` turned away since the last line.
    No(Option<u64>),
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn new(rate: StreamRate, now: Instant) -> Bucket {
        Bucket {
            rate,
            tokens: f64::from(rate.burst.max(1)),
            refilled_at: now,
            unlogged: 0,
            logged_at: None,
        }
    }

    pub fn rate(&self) -> StreamRate {
        self.rate
    }

    /// Take a token for a stream opening at `now`, if there is one.
    pub fn admit(&mut self, now: Instant) -> Admit {
        let elapsed = now.saturating_duration_since(self.refilled_at);
        self.refilled_at = now.max(self.refilled_at);
        let capacity = f64::from(self.rate.burst.max(1));
        self.tokens =
            (self.tokens + elapsed.as_secs_f64() * f64::from(self.rate.per_second)).min(capacity);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Admit::Yes;
        }
        self.unlogged += 1;
        let due = self
            .logged_at
            .is_none_or(|at| now.saturating_duration_since(at) >= LOG_EVERY);
        if due {
            self.logged_at = Some(now);
            return Admit::No(Some(std::mem::take(&mut self.unlogged)));
        }
        Admit::No(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: StreamRate = StreamRate {
        per_second: 100,
        burst: 10,
    };

    fn admitted(bucket: &mut Bucket, now: Instant, tries: usize) -> usize {
        (0..tries)
            .filter(|_| bucket.admit(now) == Admit::Yes)
            .count()
    }

    #[test]
    fn a_burst_is_let_in_then_the_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(RATE, start);
        assert_eq!(admitted(&mut bucket, start, 50), 10, "the burst, at once");
        // 100 a second: 5 in 50 ms.
        let later = start + Duration::from_millis(50);
        assert_eq!(admitted(&mut bucket, later, 50), 5);
        // A quiet time refills it to the burst, no more.
        let quiet = later + Duration::from_secs(60);
        assert_eq!(admitted(&mut bucket, quiet, 50), 10);
    }

    #[test]
    fn turned_away_streams_are_logged_once_a_second_with_their_count() {
        let start = Instant::now();
        let mut bucket = Bucket::new(RATE, start);
        admitted(&mut bucket, start, 10);
        assert_eq!(
            bucket.admit(start),
            Admit::No(Some(1)),
            "the first is logged"
        );
        for _ in 0..99 {
            assert_eq!(bucket.admit(start), Admit::No(None));
        }
        // A second on, the bucket refilled: 10 in, then the next logged with the 99 before.
        let next = start + Duration::from_secs(1);
        assert_eq!(admitted(&mut bucket, next, 10), 10);
        assert_eq!(bucket.admit(next), Admit::No(Some(100)));
    }

    #[test]
    fn time_going_backwards_admits_nothing_extra() {
        let start = Instant::now() + Duration::from_secs(10);
        let mut bucket = Bucket::new(RATE, start);
        admitted(&mut bucket, start, 10);
        let earlier = start - Duration::from_secs(5);
        assert_eq!(admitted(&mut bucket, earlier, 10), 0);
    }
}
