//! Loads and their publication, as two owners:
//! - the [`Reloader`] is the sink of both sources (the `--config` files, an etcd prefix;
//!   `source::Sink`): it loads what a source read (in a blocking task, parsing only what
//!   changed), makes the last checks (pre-flight, emptied node groups), reports each load
//!   ([`Reports`]), and hands a good load over: to the [`Publisher`], or, under the fleet's
//!   rollout, to the rollout ([`Heads`]), which alone decides what serves;
//! - the [`Publisher`] publishes a good configuration to the cache as a generation, and
//!   keeps what goes with publishing: the history of generations, the copy in
//!   `--state-dir`, and what was last published (an aborted rollout is not proposed again).
//!
//! A failed load publishes nothing: the last good generation keeps serving.
//!
//! What is loaded and how (paths, options, the loader, pre-flight) is `load`'s; the copy in
//! `--state-dir` is `kept`'s; the history of generations is `crate::history`'s.
//!
//! Must not: watch or read a source (`source` does), parse files itself (that is
//! `config`), or know about streams and rollouts (a fleet's rollout takes the newest good
//! load from [`Heads`] and publishes through the [`Publisher`] itself).

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::watch;

mod heads;
mod kept;
mod load;
mod publisher;
mod reloader;

pub use heads::{Head, Heads};
pub use publisher::{Publication, Publisher};
pub use reloader::Reloader;

/// The outcome of the latest load attempt.
#[derive(Clone, Debug)]
pub struct LoadReport {
    pub at: SystemTime,
    /// Empty when the load succeeded.
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// The generation serving after this load.
    pub generation: u64,
    /// `--source`: the etcd revision the documents were read at (`None` for files).
    pub revision: Option<i64>,
    /// The files: the number of this read of them since start (`None` from etcd).
    pub read: Option<u64>,
    /// The files: when this read of them began, before any was listed or stamped (`None`
    /// from etcd). An edit after it may not be in this load.
    pub began: Option<SystemTime>,
    /// Handed to the fleet's rollout, which has not served it as a generation yet
    /// (`generation` is the one serving meanwhile).
    pub pending: bool,
}

impl LoadReport {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The last load's report, written by the sink as each load ends, and by whoever serves a
/// load later (the fleet's rollout) or serves something else instead (the copy in
/// `--state-dir` at start); watched by whoever waits for a load.
///
/// A load that publishes holds [`Reports::publishing`] from its publication to its report,
/// and whoever reads the report with what serves does so under [`Reports::consistent`]: no
/// reader sees a new generation serving beside the report of the load before it.
#[derive(Clone, Debug, Default)]
pub struct Reports(
    Arc<watch::Sender<Option<LoadReport>>>,
    Arc<std::sync::RwLock<()>>,
);

impl Reports {
    /// The outcome of the latest load, if any.
    pub fn last(&self) -> Option<LoadReport> {
        self.0.borrow().clone()
    }

    /// Held by a load from its publication to its report.
    pub fn publishing(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.1.write().unwrap_or_else(|p| p.into_inner())
    }

    /// `read` the last report with what it goes with (what serves), as one: no publication
    /// is between its publish and its report meanwhile.
    pub fn consistent<T>(&self, read: impl FnOnce(Option<LoadReport>) -> T) -> T {
        let _reading = self.1.read().unwrap_or_else(|p| p.into_inner());
        read(self.last())
    }

    /// Each load's report as it is made (to wait for one without polling).
    pub fn subscribe(&self) -> watch::Receiver<Option<LoadReport>> {
        self.0.subscribe()
    }

    /// The load of `revision` was handed over and now serves as `generation` (the fleet's
    /// rollout published it, or another replica's load of the same content).
    pub fn loaded_as(&self, revision: i64, generation: u64) {
        self.0.send_if_modified(|last| match last.as_mut() {
            Some(report)
                if report.ok()
                    && report.revision == Some(revision)
                    && (report.generation != generation || report.pending) =>
            {
                report.generation = generation;
                report.pending = false;
                true
            }
            _ => false,
        });
    }

    /// `generation` serves in place of what the last load made (the copy kept in
    /// `--state-dir`, after a first load that failed).
    pub fn serving(&self, generation: u64) {
        self.0.send_modify(|last| {
            if let Some(report) = last.as_mut() {
                report.generation = generation;
            }
        });
    }

    fn store(&self, report: LoadReport) {
        self.0.send_replace(Some(report));
    }

    /// Stamp the last report as the files' read number `read`, begun at `began`.
    fn read_of_files(&self, read: u64, began: SystemTime) {
        self.0.send_modify(|report| {
            if let Some(report) = report {
                report.read = Some(read);
                report.began = Some(began);
            }
        });
    }
}

#[cfg(test)]
mod tests;
