//! Publishing what a source reads: the [`Reloader`] is the sink of both sources (the
//! `--config` files, an etcd prefix; `source::Sink`).
//!
//! Owns: loading in a blocking task (the loader parses only what changed), the last checks
//! (pre-flight, emptied node groups), publishing a good load to the cache as a generation,
//! the history of generations, and the result of the last load. A failed load publishes
//! nothing: the last good generation keeps serving.
//!
//! What is loaded and how (paths, options, the loader, pre-flight) is `load`'s; the copy in
//! `--state-dir` is `kept`'s; the history of generations is `crate::history`'s.
//!
//! Must not: watch or read a source (`source` does), parse files itself (that is
//! `config`), or know about streams and rollouts (a fleet's rollout takes the newest good
//! load from one slot, [`Heads`], [`Reloader::hand_loads_to`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::watch;

use crate::cache::Cache;
use crate::config::{self, Config, ConfigError, LoadFailure, LoadOptions, LoadWork};
use crate::state::StateDir;
use crate::telemetry::{Loaded, Telemetry};

mod kept;
mod load;

use load::Loading;

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

/// Loads the configured paths and publishes good loads.
#[derive(Debug)]
pub struct Reloader {
    /// What is loaded, and how: the paths, the options, the loader that parses only what
    /// changed, and the pre-flight Envoy.
    loading: Loading,
    cache: Arc<Cache>,
    /// The last load's report, watched by whoever waits for a load.
    last: watch::Sender<Option<LoadReport>>,
    /// Where loads and file events are logged and counted.
    telemetry: Telemetry,
    /// The generation the state directory last kept (0: none yet), watched by whoever waits
    /// for it.
    kept: watch::Sender<u64>,
    /// Where each good load is kept (`--state-dir`).
    state: Option<StateDir>,
    /// `--source` with a canary policy: good loads of the documents go to the fleet's
    /// rollout (`rollout::drive`), which publishes what the rollout kept in etcd says, instead
    /// of being published here (but the first, which every node gets).
    held: Option<Arc<Heads>>,
    /// The last generations published (in `--state-dir` too, with one).
    history: crate::history::History,
    /// Where ACKs and NACKs of each generation are counted.
    fleet: Option<Arc<crate::fleet::Fleet>>,
    /// The reads of the files so far; held through a read's load and publish, so that reads
    /// (the watch's, a barrier's) publish one at a time, in order.
    reads: std::sync::Mutex<u64>,
    /// What the last applies said of themselves, by the revision of the load they came
    /// with: its generation's history entry names the author and the message, whenever
    /// (the fleet's rollout may publish it later) it is published.
    notes: std::sync::Mutex<std::collections::VecDeque<(i64, crate::source::etcd::ApplyNote)>>,
    /// The last generation published here, and its content version.
    last_published: std::sync::Mutex<Option<(u64, String)>>,
}

/// How many apply notes a publisher remembers while their loads wait to be published.
const NOTES_KEPT: usize = 16;

/// A good load of the documents read at one revision, for the fleet's rollout to propose.
#[derive(Debug)]
pub struct Head {
    pub revision: i64,
    /// What it serves (`Config::content_version`).
    pub version: String,
    /// The load, unless it was published already (the first).
    pub config: Option<Config>,
    pub documents: Arc<Vec<config::Document>>,
    /// Written by `rollback --now`, by whom: the fleet's rollout promotes it at once.
    pub now: Option<String>,
}

impl Head {
    /// The same load without its configuration (loaded again from its documents).
    fn without_config(&self) -> Head {
        Head {
            revision: self.revision,
            version: self.version.clone(),
            config: None,
            documents: Arc::clone(&self.documents),
            now: self.now.clone(),
        }
    }
}

/// The newest good load the fleet's rollout has not taken yet: one slot, a newer load
/// replacing an older one (the rollout proposes only the newest), never a queue of whole
/// configurations.
#[derive(Debug, Default)]
pub struct Heads {
    /// The load not taken yet, and the last load put (without its configuration).
    slot: Mutex<(Option<Head>, Option<Head>)>,
    ready: tokio::sync::Notify,
}

impl Heads {
    /// Hand a good load over, replacing one not taken yet.
    pub fn put(&self, head: Head) {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        slot.1 = Some(head.without_config());
        slot.0 = Some(head);
        drop(slot);
        self.ready.notify_one();
    }

    /// The newest load not taken yet, once there is one. Cancel-safe: a load is taken only
    /// when this returns it.
    pub async fn next(&self) -> Head {
        loop {
            if let Some(head) = self.slot.lock().unwrap_or_else(|p| p.into_inner()).0.take() {
                return head;
            }
            self.ready.notified().await;
        }
    }

    /// For a rollout driver started again (after it stopped): the last load handed over is
    /// handed over again (without its configuration) unless a newer one waits, so none is
    /// lost with the driver that took it.
    pub fn again(&self) {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.0.is_none() {
            slot.0 = slot.1.as_ref().map(Head::without_config);
        }
        drop(slot);
        self.ready.notify_one();
    }
}

impl Reloader {
    /// Load `paths` as `options` say into `cache`, reporting each load to `telemetry`.
    pub fn new(
        paths: Vec<PathBuf>,
        options: LoadOptions,
        cache: Arc<Cache>,
        telemetry: Telemetry,
    ) -> Reloader {
        Reloader {
            loading: Loading::new(paths, options),
            cache,
            last: watch::Sender::new(None),
            telemetry,
            kept: watch::Sender::new(0),
            state: None,
            held: None,
            history: crate::history::History::default(),
            fleet: None,
            reads: std::sync::Mutex::new(0),
            notes: std::sync::Mutex::default(),
            last_published: std::sync::Mutex::default(),
        }
    }

    /// Hand good loads of documents to the fleet's rollout (see [`Head`]) rather than
    /// publish them, once something is published.
    pub fn hand_loads_to(mut self, heads: Arc<Heads>) -> Reloader {
        self.held = Some(heads);
        self
    }

    /// Load documents as a reload would, without publishing them (the fleet's rollout loads
    /// the generations it names this way).
    pub fn load_only(&self, documents: &[config::Document]) -> Result<Config, LoadFailure> {
        self.loading.only(documents)
    }

    /// Publish a configuration the fleet's rollout names (a load is not checked again: it
    /// passed when it was loaded); the generation serving after it.
    pub fn publish_named(&self, config: Config, revision: i64) -> u64 {
        let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
        let work = LoadWork {
            parsed: 0,
            reused: 0,
        };
        self.publish(config, work, &warnings, Some(revision))
    }

    /// Count ACKs and NACKs of each generation in `fleet`'s tallies (for the history).
    pub fn counting(mut self, fleet: Arc<crate::fleet::Fleet>) -> Reloader {
        self.fleet = Some(fleet);
        self
    }

    /// The fleet's rollout published the load of `revision` as `generation`: the last load's
    /// report says so (it was handed over, not published, when it was made).
    pub fn loaded_as(&self, revision: i64, generation: u64) {
        self.last.send_if_modified(|last| match last.as_mut() {
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

    /// Keep the history with the counts as they are now (`--state-dir`), at shutdown.
    pub fn save_history(&self) {
        self.history
            .save(|g| self.fleet.as_ref().and_then(|f| f.tally(g)));
    }

    /// The last generations published, newest first, with how many nodes ACKed and NACKed
    /// each.
    pub fn history(&self) -> Vec<crate::history::Entry> {
        self.history
            .entries(|g| self.fleet.as_ref().and_then(|f| f.tally(g)))
    }

    /// The same, checking each new config with the Envoy at `envoy` before publishing it.
    /// Check each new config with `envoy` as nodes are sent it (`secrets`).
    pub fn with_preflight(
        mut self,
        envoy: PathBuf,
        timeout: std::time::Duration,
        secrets: crate::resource::Secrets,
    ) -> Reloader {
        self.loading.preflight = Some((envoy, timeout, secrets));
        self
    }

    /// The outcome of the latest load, if any.
    pub fn last_report(&self) -> Option<LoadReport> {
        self.last.borrow().clone()
    }

    /// The snapshot file under the `--config` paths changed last, and when, if that was
    /// after the last read of the files began (an edit made while a load ran may not be in
    /// it): an edit the watch has not loaded (yet, or ever: a watch that stopped working).
    /// `None` from a source of documents, and for a time ahead of this host's clock (it
    /// cannot be judged). File times come from the kernel's coarse clock, so an edit within
    /// a tick (milliseconds) of the read's start may not show.
    pub fn unread_edit(&self) -> Option<(PathBuf, SystemTime)> {
        let report = self.last_report()?;
        let loaded = report.began.unwrap_or(report.at);
        let now = SystemTime::now();
        let (modified, path) = self
            .loading
            .paths
            .iter()
            .flat_map(|root| config::snapshot_files(root).unwrap_or_default())
            .filter_map(|file| {
                let modified = std::fs::metadata(&file).ok()?.modified().ok()?;
                Some((modified, file))
            })
            .filter(|(modified, _)| *modified <= now)
            .max()?;
        (modified > loaded).then_some((path, modified))
    }

    /// Each load's report as it is made (to wait for one without polling).
    pub fn reports(&self) -> watch::Receiver<Option<LoadReport>> {
        self.last.subscribe()
    }

    /// Load now (parsing only the files that changed); publish when good and different
    /// from what is serving. Logs one line.
    pub fn reload(&self) -> Result<(), LoadFailure> {
        self.read_files().1
    }

    /// Read the files and publish what loads (one read at a time): the read's number, and
    /// whether it loaded.
    fn read_files(&self) -> (u64, Result<(), LoadFailure>) {
        let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        *reads += 1;
        let began = SystemTime::now();
        let (loaded, work) = self.loading.files();
        let result = self.finish(loaded, work, None);
        let read = *reads;
        self.last.send_modify(|report| {
            if let Some(report) = report {
                report.read = Some(read);
                report.began = Some(began);
            }
        });
        (read, result)
    }

    /// Load the documents read from a source (`--source`: every key under an etcd prefix,
    /// at one revision) as [`Reloader::reload`] loads the files (parsing only the documents
    /// whose text changed), and publish the same way.
    pub fn reload_documents(
        &self,
        documents: &[crate::config::Document],
        revision: i64,
    ) -> Result<(), LoadFailure> {
        let (loaded, work) = self.loading.documents(documents);
        let Some(heads) = &self.held else {
            return self.finish(loaded, work, Some(revision));
        };
        // The fleet's rollout decides what serves; the first load serves at once (every node
        // gets it, as on one server) and is handed over too.
        let checked = self.check(loaded, revision)?;
        let version = checked.content_version();
        let mut report = LoadReport {
            at: SystemTime::now(),
            errors: Vec::new(),
            warnings: checked.warnings.iter().map(|w| w.to_string()).collect(),
            generation: self.cache.current().number,
            revision: Some(revision),
            read: None,
            began: None,
            pending: false,
        };
        let config = if report.generation == 0 {
            report.generation = self.publish(checked, work, &report.warnings, Some(revision));
            None
        } else {
            report.pending = true;
            Some(checked)
        };
        self.store(report);
        heads.put(Head {
            revision,
            version,
            config,
            documents: Arc::new(documents.to_vec()),
            now: self.note_of(revision).filter(|n| n.now).map(|n| {
                format!(
                    "rollback --now to revision {}{}",
                    n.rollback.map_or_else(|| "?".into(), |r| r.to_string()),
                    n.author.map(|a| format!(" by {a}")).unwrap_or_default()
                )
            }),
        });
        Ok(())
    }

    /// A load's last checks (pre-flight, emptied node groups), then publish it when good and
    /// different from what is serving, and report it.
    fn finish(
        &self,
        loaded: Result<Config, LoadFailure>,
        work: LoadWork,
        revision: Option<i64>,
    ) -> Result<(), LoadFailure> {
        let result = self.check_quietly(loaded);
        match result {
            Ok(config) => {
                let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
                let generation = self.publish(config, work, &warnings, revision);
                self.store(LoadReport {
                    at: SystemTime::now(),
                    errors: Vec::new(),
                    warnings,
                    generation,
                    revision,
                    read: None,
                    began: None,
                    pending: false,
                });
                Ok(())
            }
            Err(failure) => Err(self.failed(failure, revision)),
        }
    }

    /// A load's last checks; a failure is reported (logged, counted, kept) and returned.
    fn check(
        &self,
        loaded: Result<Config, LoadFailure>,
        revision: i64,
    ) -> Result<Config, LoadFailure> {
        self.check_quietly(loaded)
            .map_err(|failure| self.failed(failure, Some(revision)))
    }

    /// Report a failed load: the last good generation keeps serving.
    fn failed(&self, failure: LoadFailure, revision: Option<i64>) -> LoadFailure {
        let current = self.cache.current().number;
        self.telemetry
            .config_failed(failure.errors.len(), current, &failure);
        self.store(LoadReport {
            at: SystemTime::now(),
            errors: failure.errors.iter().map(|e| e.to_string()).collect(),
            warnings: failure.warnings.iter().map(|e| e.to_string()).collect(),
            generation: current,
            revision,
            read: None,
            began: None,
            pending: false,
        });
        failure
    }

    /// Pre-flight, and the emptied node groups: a load that passes is good to serve.
    fn check_quietly(&self, loaded: Result<Config, LoadFailure>) -> Result<Config, LoadFailure> {
        loaded.and_then(|config| {
            let rejected = self
                .loading
                .preflight(&config, &self.cache.current().config);
            if !rejected.is_empty() {
                return Err(LoadFailure {
                    errors: rejected,
                    warnings: config.warnings,
                });
            }
            if self.loading.options.allow_empty {
                return Ok(config);
            }
            // A load that would leave connected proxies with no listener or no cluster at
            // all is refused: it is far more often a broken deploy than intent.
            let errors: Vec<ConfigError> = self
                .cache
                .emptied_groups(&config)
                .into_iter()
                .map(|e| ConfigError::WouldEmpty {
                    kind: e.kind,
                    node: e.node,
                    now: e.now,
                })
                .collect();
            if errors.is_empty() {
                Ok(config)
            } else {
                Err(LoadFailure {
                    errors,
                    warnings: config.warnings,
                })
            }
        })
    }

    /// Publish a good load unless it is what serves; the generation serving after it.
    fn publish(
        &self,
        config: Config,
        work: LoadWork,
        warnings: &[String],
        revision: Option<i64>,
    ) -> u64 {
        let current = self.cache.current();
        let version = config.version();
        let mut loaded = Loaded {
            generation: current.number,
            changed: false,
            files: config.files.len(),
            parsed: work.parsed,
            resources: config.resource_count(),
            version: &version,
        };
        if current.number > 0 && current.config.version() == version {
            self.telemetry.config_loaded(loaded, warnings);
            return current.number;
        }
        // The content of a rollout an operator aborted is not proposed again until the
        // source changes: a read that finds it again (a barrier, a touched file) keeps
        // reporting the aborted generation, whose content differs from what serves. (The
        // fleet's rollout keeps its own record of what was aborted.)
        if let Some(aborted) = self.aborted(&version).filter(|_| self.held.is_none()) {
            loaded.generation = aborted;
            self.telemetry.config_loaded(loaded, warnings);
            return aborted;
        }
        // Under a rollout policy a new generation is kept only once promoted (see
        // `keep_promoted`); the first one goes to every node at once.
        let stable_now = self.cache.policy().is_none() || current.number == 0;
        let mut kept = false;
        if let (Some(state), true) = (&self.state, stable_now) {
            // Kept before it is published, from the files as they are now (checked by
            // loading the copy); a failure here does not stop serving.
            match state.persist(&self.loading.paths, &self.loading.options, None) {
                Ok(_) => kept = true,
                Err(e) => {
                    tracing::error!(error = %e, "Cannot keep the good snapshot in --state-dir; the previous copy stays.")
                }
            }
        }
        let mut entry = crate::history::Entry::of(&current.config, &config, 0, revision);
        if let Some(note) = revision.and_then(|r| self.note_of(r)) {
            entry.author = note.author;
            entry.message = note.message;
            entry.rollback = note.rollback;
            entry.now = note.now;
        }
        loaded.generation = self.cache.publish(config).number;
        *self
            .last_published
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some((loaded.generation, version.clone()));
        entry.generation = loaded.generation;
        self.history
            .record(entry, |g| self.fleet.as_ref().and_then(|f| f.tally(g)));
        self.record_generation(loaded.generation);
        loaded.changed = true;
        if kept {
            self.kept.send_replace(loaded.generation);
        }
        self.telemetry.config_loaded(loaded, warnings);
        loaded.generation
    }

    /// The generation last published here, if its content is `version` and it serves no
    /// node any more: an operator aborted its rollout.
    fn aborted(&self, version: &str) -> Option<u64> {
        let last = self
            .last_published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let serving = self.cache.serving();
        let serves = |number: u64| {
            serving.stable.number == number
                || serving
                    .rollout
                    .as_ref()
                    .is_some_and(|r| r.candidate.number == number)
        };
        (last.1 == version && !serves(last.0)).then_some(last.0)
    }

    /// Remember what the apply behind the load of `revision` said of itself.
    fn noted(&self, revision: i64, note: crate::source::etcd::ApplyNote) {
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        if notes.len() == NOTES_KEPT {
            notes.pop_front();
        }
        notes.push_back((revision, note));
    }

    /// What the apply behind the load of `revision` said of itself, if one did.
    fn note_of(&self, revision: i64) -> Option<crate::source::etcd::ApplyNote> {
        let notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        notes
            .iter()
            .rev()
            .find(|(r, _)| *r == revision)
            .map(|(_, note)| note.clone())
    }

    fn store(&self, report: LoadReport) {
        self.last.send_replace(Some(report));
    }
}

/// The sink of both sources: files load again, documents are loaded as read.
impl crate::source::Sink for Reloader {
    fn files_changed(&self) -> u64 {
        self.read_files().0
    }

    fn files_read(&self) -> Vec<PathBuf> {
        self.loading.secret_files()
    }

    fn documents(
        &self,
        documents: &[config::Document],
        revision: i64,
        note: Option<crate::source::etcd::ApplyNote>,
    ) {
        if let Some(note) = note {
            self.noted(revision, note);
        }
        let _ = self.reload_documents(documents, revision);
    }

    fn load_stopped(&self, revision: Option<i64>, why: String) {
        let message = format!(
            "the load stopped on a bug in Switchyard ({why}); the last good generation keeps \
             serving; please report it with this replica's log"
        );
        let current = self.cache.current().number;
        self.telemetry.config_failed(1, current, &message);
        self.store(LoadReport {
            at: SystemTime::now(),
            errors: vec![message],
            warnings: Vec::new(),
            generation: current,
            revision,
            read: None,
            began: None,
            pending: false,
        });
    }
}

#[cfg(test)]
mod tests;
