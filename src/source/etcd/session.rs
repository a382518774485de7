//! The tries of a session with etcd, as the follower, the fleet's rollout driver and the
//! sharing of the view each keep one: the wait before the next try, doubling from a first
//! to a longest, started over once a session lasted (its end was not the failure the waits
//! were for); and whether etcd is away, so that an outage is said once when it begins and
//! once when it ends, never on every try.
//!
//! Must not: talk to etcd, or say anything itself (each holder has its own words).

use std::time::Duration;

use tokio::time::Instant;

use crate::shutdown::Shutdown;

/// How long a session must have lasted for its end to start the waits over.
const LASTED: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct Retry {
    first: Duration,
    max: Duration,
    wait: Duration,
    away: bool,
    began: Option<Instant>,
}

impl Retry {
    pub fn new(first: Duration, max: Duration) -> Retry {
        Retry {
            first,
            max,
            wait: first,
            away: false,
            began: None,
        }
    }

    /// A session began (etcd answered). `true` when etcd was away: time to say it is back.
    /// The waits go on from where they were until the session has lasted (an etcd that
    /// answers and fails at once is not asked faster).
    pub fn began(&mut self) -> bool {
        self.began = Some(Instant::now());
        std::mem::replace(&mut self.away, false)
    }

    /// The session ended, or could not begin. `true` when this begins an outage: time to
    /// say so (once).
    pub fn failed(&mut self) -> bool {
        if self.began.take().is_some_and(|at| at.elapsed() >= LASTED) {
            self.wait = self.first;
        }
        !std::mem::replace(&mut self.away, true)
    }

    /// Wait before the next try, each longer up to the longest: `false` if `shutdown` came
    /// first. `at_least` lengthens this one wait (a cause that waiting hardly mends).
    pub async fn wait(&mut self, shutdown: &mut Shutdown, at_least: Duration) -> bool {
        let wait = self.wait.max(at_least);
        self.wait = (self.wait * 2).min(self.max);
        tokio::select! {
            _ = shutdown.wait() => false,
            _ = tokio::time::sleep(wait) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits double up to the longest; an outage is said once as it begins and once as it
    /// ends; a session that fails at once goes on waiting long, one that lasted starts the
    /// waits over.
    #[tokio::test(start_paused = true)]
    async fn waits_double_an_outage_is_said_once_and_a_lasting_session_starts_over() {
        let (_trigger, mut shutdown) = crate::shutdown::channel();
        let mut retry = Retry::new(Duration::from_millis(500), Duration::from_secs(2));
        let mut waited = Vec::new();
        for i in 0..4 {
            assert_eq!(
                retry.failed(),
                i == 0,
                "an outage is said once, as it begins"
            );
            let before = Instant::now();
            assert!(retry.wait(&mut shutdown, Duration::ZERO).await);
            waited.push(before.elapsed());
        }
        assert_eq!(
            waited,
            [500, 1000, 2000, 2000].map(Duration::from_millis).to_vec()
        );
        assert!(retry.began(), "etcd back: said once");
        assert!(!retry.began());
        // Failed at once: the waits go on as long.
        assert!(retry.failed());
        let before = Instant::now();
        assert!(retry.wait(&mut shutdown, Duration::ZERO).await);
        assert_eq!(before.elapsed(), Duration::from_secs(2));
        // A session that lasted: its end starts the waits over.
        assert!(retry.began());
        tokio::time::advance(LASTED).await;
        assert!(retry.failed());
        let before = Instant::now();
        assert!(retry.wait(&mut shutdown, Duration::ZERO).await);
        assert_eq!(before.elapsed(), Duration::from_millis(500));
    }
}
