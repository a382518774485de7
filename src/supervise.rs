//! Every long-running task of the daemon under one supervisor. Two kinds:
//! - tasks started again ([`Supervisor::spawn`]): the source's follower, the fleet's rollout
//!   driver, the sharing of the view, the keeper of the promoted copy, this replica's
//!   rollouts and the count of stream log lines (`telemetry::STREAM_LOG_PERIOD`). One that ends before shutdown, or panics, is logged with its cause (ERROR),
//!   counted (`switchyard_task_restarts_total`), said to be down (`/readyz`, `/status`'s
//!   `tasks_down`, `switchyard status`, the page) and started again after a wait that
//!   doubles from [`RESTART_FIRST`] to [`RESTART_MAX`] (a task that ran [`RESTART_RESET`] is
//!   started again at once, its failure being new);
//! - tasks the daemon cannot do without ([`Supervisor::critical`]): the xDS server with its
//!   accept loop and the admin server with its own. One that ends before shutdown, or
//!   panics, is logged with its cause (ERROR), said to be down for good (`/readyz` 503), and
//!   ends the daemon with an error ([`Supervisor::failed`]), for the orchestrator to start
//!   the process again: a replica that serves no xDS never says it is ready.
//!
//! Aborting a supervised task aborts what it runs. A panic anywhere under it (a connection's
//! task too, [`joined`]) is logged with its task's name, never dropped.
//!
//! Each task is started by a function that makes it anew from what it shares with the rest
//! of the daemon (its channels, the cache), so a restart loses nothing another task holds.
//!
//! [`fail_point`] is a test-only hook: with `SWITCHYARD_TEST_PANIC=NAME[*N][,...]` in its
//! environment the daemon panics at each named point (a task's start by its name, `load`,
//! `xds_accept` in the xDS port's accept loop, `xds_connection` at a connection's start)
//! the first N times it passes it (once without `*N`), as the supervision's end-to-end tests
//! need. Never set it in production.
//!
//! Must not: know what a task does, or decide shutdown (`shutdown`).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// The first wait before a task that stopped is started again, the longest, and how long a
/// task must have run for its next failure to start the waits over.
pub const RESTART_FIRST: Duration = Duration::from_secs(1);
pub const RESTART_MAX: Duration = Duration::from_secs(30);
pub const RESTART_RESET: Duration = Duration::from_secs(60);

/// A task that is down, as `/status` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskDown {
    /// Its name (`metrics::TASK_LABELS`).
    pub task: String,
    /// Why it stopped: "it panicked: ...", or "it ended".
    pub cause: String,
    /// When it stopped (RFC 3339, this replica's clock), and how many times it has.
    pub since: String,
    pub stops: u64,
    /// When it is started again (RFC 3339).
    pub restart_at: String,
}

/// The supervisor's shared record of the tasks that are down.
#[derive(Clone, Debug, Default)]
pub struct Supervisor {
    down: Arc<Mutex<BTreeMap<&'static str, TaskDown>>>,
    stops: Arc<Mutex<BTreeMap<&'static str, u64>>>,
    telemetry: Telemetry,
    /// The first critical task that ended before shutdown, told to the daemon.
    failed: Arc<tokio::sync::watch::Sender<Option<TaskDown>>>,
}

/// A task's handle that aborts it when dropped: aborting the task that holds it aborts this
/// one too.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T: Send + 'static> AbortOnDrop<T> {
    /// `run` as supervised task `task`, on a task of its own (its panic is its handle's
    /// error), past the test-only fail point of its name.
    fn spawn(task: &'static str, run: impl Future<Output = T> + Send + 'static) -> Self {
        AbortOnDrop(tokio::spawn(async move {
            fail_point(task);
            run.await
        }))
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How a task ended, in words: "it ended", "it panicked: ...", "it was cancelled".
fn ended_words<T>(ended: Result<T, tokio::task::JoinError>) -> String {
    match ended {
        Ok(_) => "it ended".to_string(),
        Err(e) if e.is_panic() => format!("it panicked: {}", panic_words(e.into_panic())),
        Err(_) => "it was cancelled".to_string(),
    }
}

/// Say a task of a set (`what`: "an xDS connection") that panicked, with its words: a task
/// of a `JoinSet` is never let go without a word.
pub fn joined(what: &'static str, ended: Option<Result<(), tokio::task::JoinError>>) {
    if let Some(Err(e)) = ended {
        if e.is_panic() {
            let cause = format!("it panicked: {}", panic_words(e.into_panic()));
            tracing::error!(task = what, cause = %cause, "A task panicked; what it served is gone, the rest goes on. Please report it with this log.");
        }
    }
}

impl Supervisor {
    pub fn new(telemetry: Telemetry) -> Supervisor {
        Supervisor {
            telemetry,
            ..Supervisor::default()
        }
    }

    /// The tasks down now, by name.
    pub fn down(&self) -> Vec<TaskDown> {
        self.down
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Run `task` (made by `make` from a shutdown signal) until `shutdown`, starting it again
    /// whenever it ends or panics before then. The handle ends at shutdown, once the running
    /// task has ended.
    pub fn spawn<F, Fut>(
        &self,
        task: &'static str,
        mut shutdown: Shutdown,
        mut make: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: FnMut(Shutdown) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let supervisor = self.clone();
        tokio::spawn(async move {
            let mut wait = RESTART_FIRST;
            loop {
                let began = Instant::now();
                let run = make(shutdown.clone());
                // Held here: aborting this task aborts the run.
                let mut running = AbortOnDrop::spawn(task, run);
                let ended = (&mut running.0).await;
                if shutdown.fired() {
                    return;
                }
                let cause = ended_words(ended);
                if began.elapsed() >= RESTART_RESET {
                    wait = RESTART_FIRST;
                }
                supervisor.stopped(task, &cause, wait);
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(RESTART_MAX);
                supervisor.restarted(task);
            }
        })
    }

    /// Run `run`, which the daemon cannot do without, until `shutdown`. Ending before it
    /// (or panicking) is logged with the task's name and cause, said down for good
    /// (`/readyz` 503), and told to the daemon ([`Supervisor::failed`]), which ends.
    pub fn critical<Fut>(
        &self,
        task: &'static str,
        shutdown: Shutdown,
        run: Fut,
    ) -> tokio::task::JoinHandle<()>
    where
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let supervisor = self.clone();
        tokio::spawn(async move {
            let mut running = AbortOnDrop::spawn(task, run);
            let ended = (&mut running.0).await;
            if shutdown.fired() {
                return;
            }
            let cause = match ended {
                Ok(Err(why)) => format!("it ended: {why}"),
                ended => ended_words(ended),
            };
            let down = TaskDown {
                task: task.to_string(),
                cause: cause.clone(),
                since: crate::fleet::format_time(SystemTime::now()),
                stops: 1,
                restart_at: "never: the process ends".into(),
            };
            supervisor
                .down
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(task, down.clone());
            supervisor.telemetry.task_failed(task, &cause);
            supervisor.failed.send_if_modified(|failed| {
                failed.is_none().then(|| *failed = Some(down)).is_some()
            });
        })
    }

    /// The first critical task that ended before shutdown, once one has.
    pub async fn failed(&self) -> TaskDown {
        let mut failed = self.failed.subscribe();
        loop {
            if let Some(down) = failed.borrow_and_update().clone() {
                return down;
            }
            if failed.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    fn stopped(&self, task: &'static str, cause: &str, wait: Duration) {
        let stops = {
            let mut stops = self.stops.lock().unwrap_or_else(|p| p.into_inner());
            let n = stops.entry(task).or_default();
            *n += 1;
            *n
        };
        let now = SystemTime::now();
        let down = {
            let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
            down.insert(
                task,
                TaskDown {
                    task: task.to_string(),
                    cause: cause.to_string(),
                    since: crate::fleet::format_time(now),
                    stops,
                    restart_at: crate::fleet::format_time(now + wait),
                },
            );
            down.len()
        };
        self.telemetry.task_down(task, cause, wait, down);
    }

    fn restarted(&self, task: &'static str) {
        let down = {
            let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
            down.remove(task);
            down.len()
        };
        self.telemetry.task_restarted(task, down);
    }
}

/// A panic's payload in words.
pub fn panic_words(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".into())
}

/// Panic here if `SWITCHYARD_TEST_PANIC` names `point` (a test-only hook; see the module's
/// documentation): `NAME` panics the first time this process passes the point, `NAME*N` the
/// first N times.
pub fn fail_point(point: &str) {
    static PASSED: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());
    let Ok(names) = std::env::var("SWITCHYARD_TEST_PANIC") else {
        return;
    };
    let Some(times) = names.split(',').find_map(|n| {
        let (name, times) = n.trim().split_once('*').unwrap_or((n.trim(), "1"));
        (name == point).then(|| times.parse::<u32>().unwrap_or(1))
    }) else {
        return;
    };
    let mut passed = PASSED.lock().unwrap_or_else(|p| p.into_inner());
    let n = passed.entry(point.to_string()).or_default();
    *n += 1;
    if *n > times {
        return;
    }
    drop(passed);
    panic!("SWITCHYARD_TEST_PANIC made {point} panic (a test-only hook)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A task that ends, then one that panics: each is said to be down with its cause,
    /// counted, and started again; once it runs, it is no longer down. Shutdown ends the
    /// supervision without a restart.
    #[tokio::test(start_paused = true)]
    async fn a_task_that_ends_or_panics_is_said_down_and_started_again() {
        let supervisor = Supervisor::new(Telemetry::default());
        let (trigger, shutdown) = crate::shutdown::channel();
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&starts);
        let handle = supervisor.spawn("keeper", shutdown, move |mut shutdown| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 => {}
                    1 => panic!("the second run panics"),
                    _ => shutdown.wait().await,
                }
            }
        });
        // The first run ended at once: down, "it ended", restarted after RESTART_FIRST.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let down = supervisor.down();
        assert_eq!(down.len(), 1, "{down:?}");
        assert_eq!(
            (down[0].task.as_str(), down[0].cause.as_str(), down[0].stops),
            ("keeper", "it ended", 1)
        );
        // The second run panics: down again, with the panic's words, the wait doubled.
        tokio::time::sleep(RESTART_FIRST + Duration::from_millis(10)).await;
        let down = supervisor.down();
        assert_eq!(down.len(), 1, "{down:?}");
        assert!(
            down[0].cause.contains("the second run panics") && down[0].stops == 2,
            "{down:?}"
        );
        // The third runs until shutdown: up.
        tokio::time::sleep(RESTART_FIRST * 2 + Duration::from_millis(10)).await;
        assert!(supervisor.down().is_empty(), "{:?}", supervisor.down());
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        trigger.fire();
        tokio::time::timeout(Duration::from_secs(5), handle)
            .await
            .expect("supervision ends at shutdown")
            .expect("joins");
        assert_eq!(
            starts.load(Ordering::SeqCst),
            3,
            "no restart after shutdown"
        );
    }

    /// Sets its flag when dropped: the future holding it was dropped (aborted, or done).
    struct Dropped(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// Aborting a supervised task aborts what it runs, whichever kind: the run is dropped.
    #[tokio::test]
    async fn aborting_a_supervised_task_aborts_what_it_runs() {
        let supervisor = Supervisor::new(Telemetry::default());
        let (_trigger, shutdown) = crate::shutdown::channel();
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&dropped);
        let handle = supervisor.spawn("keeper", shutdown.clone(), move |_| {
            let guard = Dropped(Arc::clone(&flag));
            async move {
                let _guard = guard;
                std::future::pending::<()>().await
            }
        });
        assert!(
            aborts_its_run(handle, &dropped).await,
            "the run is aborted with its task"
        );

        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let guard = Dropped(Arc::clone(&dropped));
        let handle = supervisor.critical("xds", shutdown, async move {
            let _guard = guard;
            std::future::pending::<Result<(), String>>().await
        });
        assert!(
            aborts_its_run(handle, &dropped).await,
            "the critical run is aborted with its task"
        );
    }

    /// Abort `task` once it runs: whether its run (which sets `dropped` when dropped) is
    /// dropped within 5 s.
    async fn aborts_its_run(
        task: tokio::task::JoinHandle<()>,
        dropped: &std::sync::atomic::AtomicBool,
    ) -> bool {
        tokio::task::yield_now().await;
        task.abort();
        tokio::time::timeout(Duration::from_secs(5), async {
            while !dropped.load(Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .is_ok()
    }

    /// A task the daemon cannot do without that ends (or panics) before shutdown is said
    /// down for good, with its cause, and told to the daemon; one that ends at shutdown is
    /// not.
    #[tokio::test]
    async fn a_critical_task_that_ends_is_told_to_the_daemon_with_its_cause() {
        let supervisor = Supervisor::new(Telemetry::default());
        let (trigger, shutdown) = crate::shutdown::channel();
        let mut waited = shutdown.clone();
        let calm = supervisor.critical("admin", shutdown.clone(), async move {
            waited.wait().await;
            Ok(())
        });
        supervisor.critical("xds", shutdown.clone(), async {
            Err("the xDS port accepts no more connections".to_string())
        });
        let failed = tokio::time::timeout(Duration::from_secs(5), supervisor.failed())
            .await
            .expect("told");
        assert_eq!(failed.task, "xds");
        assert_eq!(
            failed.cause,
            "it ended: the xDS port accepts no more connections"
        );
        assert!(supervisor.down().iter().any(|d| d.task == "xds"));
        let panicking = Supervisor::new(Telemetry::default());
        panicking.critical("admin", shutdown.clone(), async {
            panic!("the accept loop broke");
        });
        let failed = tokio::time::timeout(Duration::from_secs(5), panicking.failed())
            .await
            .expect("told");
        assert!(
            failed.cause.contains("it panicked: the accept loop broke"),
            "{failed:?}"
        );
        trigger.fire();
        calm.await.expect("joins");
        assert!(
            !supervisor.down().iter().any(|d| d.task == "admin"),
            "ending at shutdown is no failure"
        );
    }
}
