//! The tries of a session with etcd, as the follower, the fleet's rollout driver and the
//! sharing of the view each keep one: the wait before the next try, doubling from a first
//! to a longest, started over once a session lasted (its end was not the failure the waits
//! were for); and whether etcd is away, so that an outage is said once when it begins and
//! once when it ends, never on every try. With a grace ([`Retry::saying_after`]), failures
//! are an outage only once they have lasted it: a stall shorter is never said.
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
    /// Since when tries fail (none began since), and how long before that is an outage.
    failing: Option<Instant>,
    grace: Duration,
}

impl Retry {
    pub fn new(first: Duration, max: Duration) -> Retry {
        Retry {
            first,
            max,
            wait: first,
            away: false,
            began: None,
            failing: None,
            grace: Duration::ZERO,
        }
    }

    /// Failures are an outage once they have lasted `grace` (until then, nothing is said).
    pub fn saying_after(self, grace: Duration) -> Retry {
        Retry { grace, ..self }
    }

    /// A session began (etcd answered). `true` when etcd was away: time to say it is back.
    /// The waits go on from where they were until the session has lasted (an etcd that
    /// answers and fails at once is not asked faster).
    pub fn began(&mut self) -> bool {
        self.began = Some(Instant::now());
        self.failing = None;
        std::mem::replace(&mut self.away, false)
    }

    /// The session ended, or could not begin. `true` when this begins an outage (the tries
    /// have failed for the grace): time to say so (once).
    pub fn failed(&mut self) -> bool {
        if self.began.take().is_some_and(|at| at.elapsed() >= LASTED) {
            self.wait = self.first;
        }
        let since = *self.failing.get_or_insert_with(Instant::now);
        if self.away || since.elapsed() < self.grace {
            return false;
        }
        self.away = true;
        true
    }

    /// The session did what it is for (a watch delivered a change): its end, however soon,
    /// is a new failure, tried again after the first wait.
    pub fn worked(&mut self) {
        self.wait = self.first;
    }

    /// Whether an outage was said and has not ended.
    pub fn away(&self) -> bool {
        self.away
    }

    /// When the failures so far become an outage, if they have not been said to be one.
    pub fn say_by(&self) -> Option<Instant> {
        self.failing
            .filter(|_| !self.away)
            .map(|since| since + self.grace)
    }

    /// `true` (once) when the failures so far have lasted the grace, with nothing since:
    /// time to say the outage, while the next try is still under way.
    pub fn overdue(&mut self) -> bool {
        match self.say_by() {
            Some(at) if Instant::now() >= at => {
                self.away = true;
                true
            }
            _ => false,
        }
    }

    /// Wait before the next try, each longer up to the longest: `false` if `shutdown` came
    /// first. `at_least` lengthens this one wait (a cause that waiting hardly mends).
    pub async fn wait(&mut self, shutdown: &mut Shutdown, at_least: Duration) -> bool {
        let mut wait = self.wait.max(at_least);
        self.wait = (self.wait * 2).min(self.max);
        // Failing within the grace: the next try comes no later than the grace's end, so an
        // outage is said as it passes.
        if let Some(since) = self.failing.filter(|_| !self.away && !self.grace.is_zero()) {
            let left = (since + self.grace).saturating_duration_since(Instant::now());
            wait = wait.min(left.max(Duration::from_millis(10)));
        }
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

    /// With a grace, failures are said as an outage only once they have lasted it; a session
    /// that begins before ends the series unsaid.
    #[tokio::test(start_paused = true)]
    async fn failures_shorter_than_the_grace_are_not_an_outage() {
        let (_trigger, mut shutdown) = crate::shutdown::channel();
        let mut retry = Retry::new(Duration::from_millis(500), Duration::from_secs(2))
            .saying_after(Duration::from_secs(5));
        for _ in 0..3 {
            assert!(!retry.failed(), "within the grace");
            assert!(retry.wait(&mut shutdown, Duration::ZERO).await);
        }
        assert!(!retry.began(), "nothing was said: nothing to end");
        // Failing for longer than the grace: said once.
        let mut said = 0;
        for _ in 0..6 {
            said += usize::from(retry.failed());
            assert!(retry.wait(&mut shutdown, Duration::ZERO).await);
        }
        assert_eq!(said, 1);
        assert!(retry.away());
        assert!(retry.began(), "said: its end is said too");
        // A try under way when the grace ends: the outage is due then, said once.
        assert!(!retry.failed());
        let due = retry.say_by().expect("failing");
        assert!(!retry.overdue(), "not yet");
        tokio::time::sleep_until(due).await;
        assert!(retry.overdue() && !retry.overdue(), "once");
        assert!(!retry.failed(), "said already");
        assert_eq!(retry.say_by(), None);
    }
}
