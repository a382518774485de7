//! A lease this replica holds in etcd (its summary's, its canaries' verdict's, an apply's
//! switch), kept alive by a task of its own, so that nothing the holder awaits (a load, a
//! copy, a slow etcd call) can hold its renewals up. The holder polls [`Kept`] beside its
//! work: it resolves, once, with [`Lapsed`] when the lease can no longer be trusted, and the
//! holder takes a new lease, writing again what the lapsed one carried before anything
//! trusts it.
//!
//! A lease is renewed every third of its time, so two renewals can fail before it runs out.
//! A renewal that fails (etcd does not answer, the renewals' stream broke, the channel was
//! closed) is tried again, on a new stream, until the time etcd last granted truly runs out:
//! only then, or when etcd answers that the lease is gone, has it lapsed. An etcd stall
//! shorter than what is left of the lease (a leader election, a paused member) changes
//! nothing. The time left is counted from when the last answered renewal was sent (or the
//! lease asked for), less [`MARGIN`], so it never outlasts etcd's own count.
//!
//! Must not: write or read keys (the holders do).

use std::time::Duration;

use switchyard_etcd::Client;
use tokio::time::Instant;

/// Why a lease can no longer be trusted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lapsed {
    /// etcd answered a renewal with no time left: it did not hear from this replica within
    /// the lease's time (a pause, a partition), and deleted what the lease carried.
    #[error("{what} lapsed: etcd did not hear from this replica within its {ttl} s, and deleted what it carried")]
    Ended { what: &'static str, ttl: i64 },
    /// No renewal was answered before the time etcd granted ran out.
    #[error("{what} cannot be renewed: {why}")]
    NotRenewed { what: &'static str, why: String },
}

/// What is kept off the time etcd granted, so that this replica never trusts a lease past
/// etcd's own count (the grant's answer travelled, clocks tick apart).
pub const MARGIN: Duration = Duration::from_secs(1);

/// The wait before a renewal that failed is tried again.
const RETRY: Duration = Duration::from_millis(500);

/// A lease's renewals on their own task; resolves with why they stopped. Dropping it stops
/// the task (the lease then ends within its time unless revoked).
pub struct Kept {
    ended: tokio::sync::oneshot::Receiver<Lapsed>,
    task: tokio::task::JoinHandle<()>,
    what: &'static str,
}

impl Kept {
    /// Renew lease `id` of `ttl` seconds, asked for at `granted` (before the grant was
    /// sent), every third of it, each answer awaited at most `timeout`; failed renewals are
    /// tried again until the time runs out. `what` names it in words ("the summary's
    /// lease").
    pub fn spawn(
        client: Client,
        id: i64,
        ttl: i64,
        granted: Instant,
        timeout: Duration,
        what: &'static str,
    ) -> Kept {
        let (tx, ended) = tokio::sync::oneshot::channel();
        let renewals = Renewals {
            client,
            id,
            stream: None,
        };
        let task = tokio::spawn(async move {
            let lapsed = keep(renewals, ttl, granted, timeout, what).await;
            let _ = tx.send(lapsed);
        });
        Kept { ended, task, what }
    }

    /// Whether it has lapsed by now (without waiting).
    pub fn lapsed(&mut self) -> Option<Lapsed> {
        self.ended.try_recv().ok()
    }
}

/// One renewal's outcome: the time etcd granted (seconds; 0 or less: the lease is gone), or
/// why no answer came.
pub(crate) trait Renew: Send {
    fn renew(&mut self) -> impl std::future::Future<Output = Result<i64, String>> + Send;
}

/// A lease's renewals over etcd's keep-alive stream, opened again after it failed.
struct Renewals {
    client: Client,
    id: i64,
    stream: Option<(
        switchyard_etcd::LeaseKeeper,
        switchyard_etcd::LeaseKeepAliveStream,
    )>,
}

impl Renew for Renewals {
    async fn renew(&mut self) -> Result<i64, String> {
        // Taken out: a renewal that fails or is given up on leaves no stream, and the next
        // opens a new one.
        let (mut keeper, mut answers) = match self.stream.take() {
            Some(stream) => stream,
            None => self
                .client
                .lease_keep_alive(self.id)
                .await
                .map_err(|e| super::words(&e))?,
        };
        keeper.keep_alive().await.map_err(|e| super::words(&e))?;
        match answers.message().await {
            Ok(Some(answer)) => {
                self.stream = Some((keeper, answers));
                Ok(answer.ttl())
            }
            Ok(None) => Err("the renewals' stream ended".into()),
            Err(e) if gone(&e) => Ok(0),
            Err(e) => Err(super::words(&e)),
        }
    }
}

/// Renew with `renewals` every third of `ttl` from `granted` until the lease is gone or the
/// time granted runs out with no renewal answered: why it lapsed.
pub(crate) async fn keep(
    mut renewals: impl Renew,
    ttl: i64,
    granted: Instant,
    timeout: Duration,
    what: &'static str,
) -> Lapsed {
    let seconds = |ttl: i64| Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
    let every = seconds(ttl / 3).max(Duration::from_secs(1));
    // Until when etcd keeps the lease, as far as this replica can tell.
    let mut until = granted + seconds(ttl).saturating_sub(MARGIN);
    let mut next = granted + every;
    let mut failure: Option<String> = None;
    loop {
        tokio::time::sleep_until(next.min(until)).await;
        let sent = Instant::now();
        if sent >= until {
            let why = format!(
                "no renewal was answered within its {ttl} s{}",
                failure.map(|f| format!(" ({f})")).unwrap_or_default()
            );
            return Lapsed::NotRenewed { what, why };
        }
        let budget = timeout.min(until - sent);
        match tokio::time::timeout(budget, renewals.renew()).await {
            Ok(Ok(granted)) if granted > 0 => {
                until = sent + seconds(granted).saturating_sub(MARGIN);
                next = sent + every;
                if let Some(f) = failure.take() {
                    tracing::debug!(what, after = %f, "A lease was renewed again after a renewal failed.");
                }
            }
            Ok(Ok(_)) => return Lapsed::Ended { what, ttl },
            Ok(Err(why)) => {
                failure = Some(why);
                next = Instant::now() + RETRY;
            }
            Err(_) => {
                failure = Some(no_answer(budget));
                next = Instant::now();
            }
        }
    }
}

/// Whether etcd refused a write on a lease because the lease is gone (etcd's `NotFound`:
/// "requested lease not found"): the lease lapsed, whatever the renewals said yet.
pub fn gone(e: &switchyard_etcd::Error) -> bool {
    matches!(e, switchyard_etcd::Error::GRpcStatus(s) if s.code() == tonic::Code::NotFound)
}

/// A write on lease `what` that etcd refused, in words: a lapse said as one.
pub fn write_failed(what: &'static str, ttl: i64, e: &switchyard_etcd::Error) -> String {
    if gone(e) {
        Lapsed::Ended { what, ttl }.to_string()
    } else {
        super::words(e)
    }
}

fn no_answer(timeout: Duration) -> String {
    format!(
        "etcd did not answer within {}",
        humantime::format_duration(timeout)
    )
}

impl std::future::Future for Kept {
    type Output = Lapsed;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Lapsed> {
        let what = self.what;
        std::pin::Pin::new(&mut self.ended).poll(cx).map(|r| {
            r.unwrap_or_else(|_| Lapsed::NotRenewed {
                what,
                why: "its keeper stopped".into(),
            })
        })
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renewals by a script: each call takes the next step (answer with a TTL, fail with
    /// words, or hang until given up), after the last the last again.
    struct Script {
        steps: Vec<Step>,
        calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        started: Instant,
    }

    #[derive(Clone, Copy)]
    enum Step {
        Answer(i64),
        Fail,
        /// No answer until this long after the script started (then the TTL).
        SilentUntil(Duration, i64),
    }

    impl Renew for Script {
        async fn renew(&mut self) -> Result<i64, String> {
            let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let step = self.steps[n.min(self.steps.len() - 1)];
            match step {
                Step::Answer(ttl) => Ok(ttl),
                Step::Fail => Err("the call to etcd was cancelled".into()),
                Step::SilentUntil(until, ttl) => {
                    tokio::time::sleep_until(self.started + until).await;
                    Ok(ttl)
                }
            }
        }
    }

    fn script(steps: Vec<Step>) -> Script {
        Script {
            steps,
            calls: Default::default(),
            started: Instant::now(),
        }
    }

    /// Renewals answered keep the lease for good (ten of its times, then given up here).
    #[tokio::test(start_paused = true)]
    async fn renewals_answered_keep_the_lease() {
        let kept = keep(
            script(vec![Step::Answer(15)]),
            15,
            Instant::now(),
            Duration::from_secs(5),
            "a lease",
        );
        assert!(
            tokio::time::timeout(Duration::from_secs(150), kept)
                .await
                .is_err(),
            "never lapses"
        );
    }

    /// An etcd stall shorter than what is left of the lease changes nothing: renewals that
    /// fail, then one that gets no answer for 6 s (etcd paused), then answers again; the
    /// lease lives on.
    #[tokio::test(start_paused = true)]
    async fn a_stall_shorter_than_the_lease_changes_nothing() {
        let steps = vec![
            Step::Answer(15),
            Step::Fail,
            Step::Fail,
            Step::SilentUntil(Duration::from_secs(16), 15),
            Step::Answer(15),
        ];
        let renewals = script(steps);
        let calls = std::sync::Arc::clone(&renewals.calls);
        let kept = keep(
            renewals,
            15,
            Instant::now(),
            Duration::from_secs(5),
            "a lease",
        );
        assert!(
            tokio::time::timeout(Duration::from_secs(100), kept)
                .await
                .is_err(),
            "never lapses"
        );
        assert!(calls.load(std::sync::atomic::Ordering::SeqCst) > 5);
    }

    /// With no renewal answered, the lease lapses when the time etcd last granted runs out
    /// (less the margin), never before; the words say why, with the last failure.
    #[tokio::test(start_paused = true)]
    async fn a_lease_lapses_only_when_its_time_runs_out() {
        let started = Instant::now();
        let lapsed = keep(
            script(vec![Step::Answer(15), Step::Fail]),
            15,
            started,
            Duration::from_secs(5),
            "the summary's lease",
        )
        .await;
        // Renewed at 5 s for 15 s: runs out at 20 s, less the margin.
        assert_eq!(started.elapsed(), Duration::from_secs(19));
        assert_eq!(
            lapsed.to_string(),
            "the summary's lease cannot be renewed: no renewal was answered within its 15 s \
             (the call to etcd was cancelled)"
        );
        // Silent from the start: given up when the granted time runs out.
        let started = Instant::now();
        let lapsed = keep(
            script(vec![Step::SilentUntil(Duration::from_secs(3600), 15)]),
            15,
            started,
            Duration::from_secs(5),
            "a lease",
        )
        .await;
        assert_eq!(started.elapsed(), Duration::from_secs(14));
        assert!(matches!(lapsed, Lapsed::NotRenewed { .. }), "{lapsed:?}");
    }

    /// etcd answers that the lease is gone (no time left): lapsed at once.
    #[tokio::test(start_paused = true)]
    async fn a_lease_etcd_says_is_gone_lapses_at_once() {
        let started = Instant::now();
        let lapsed = keep(
            script(vec![Step::Answer(0)]),
            15,
            started,
            Duration::from_secs(5),
            "a lease",
        )
        .await;
        assert_eq!(
            lapsed,
            Lapsed::Ended {
                what: "a lease",
                ttl: 15
            }
        );
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }
}
