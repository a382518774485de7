//! The publisher: a good configuration published to the cache as a generation, with its
//! history entry, its copy in `--state-dir` (`kept`), and its log line and counts.
//!
//! Called by one owner at a time: the sink (`Reloader`) for the files or an etcd prefix
//! without the fleet's rollout; the fleet's rollout (and, at start, the daemon serving what
//! the rollout kept) with it. Must not: load, check or decide what serves; a configuration
//! given here was checked when it was loaded.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::cache::Cache;
use crate::config::{Config, LoadOptions, LoadWork};
use crate::source::etcd::ApplyNote;
use crate::state::StateDir;
use crate::telemetry::{Loaded, Telemetry};

/// Where a configuration to publish came from.
#[derive(Clone, Debug, Default)]
pub struct Publication {
    /// `--source`: the etcd revision its documents were read at (`None` for files).
    pub revision: Option<i64>,
    /// What the apply behind it said of itself, if one did.
    pub note: Option<ApplyNote>,
    /// What its load parsed anew and reused.
    pub work: LoadWork,
}

/// Publishes good configurations, and keeps what goes with them.
#[derive(Debug)]
pub struct Publisher {
    pub(super) cache: Arc<Cache>,
    telemetry: Telemetry,
    /// The `--config` paths and options, for the copy kept in `--state-dir`.
    pub(super) paths: Vec<PathBuf>,
    pub(super) options: LoadOptions,
    /// The generation the state directory last kept (0: none yet), watched by whoever waits
    /// for it.
    pub(super) kept: watch::Sender<u64>,
    /// Where each good load is kept (`--state-dir`).
    pub(super) state: Option<StateDir>,
    /// The last generations published (in `--state-dir` too, with one).
    pub(super) history: crate::history::History,
    /// Where ACKs and NACKs of each generation are counted.
    fleet: Option<Arc<crate::fleet::Fleet>>,
    /// The last generation published here, and its content version.
    last_published: Mutex<Option<(u64, String)>>,
}

impl Publisher {
    /// Publish into `cache`, logging and counting each publication in `telemetry`; `paths`
    /// and `options` are what a copy in the state directory is made from.
    pub fn new(
        cache: Arc<Cache>,
        telemetry: Telemetry,
        paths: Vec<PathBuf>,
        options: LoadOptions,
    ) -> Publisher {
        Publisher {
            cache,
            telemetry,
            paths,
            options,
            kept: watch::Sender::new(0),
            state: None,
            history: crate::history::History::default(),
            fleet: None,
            last_published: Mutex::default(),
        }
    }

    /// Count ACKs and NACKs of each generation in `fleet`'s tallies (for the history).
    pub fn counting(mut self, fleet: Arc<crate::fleet::Fleet>) -> Publisher {
        self.fleet = Some(fleet);
        self
    }

    /// Keep the history with the counts as they are now (`--state-dir`), at shutdown.
    pub fn save_history(&self) {
        self.history.save(|g| self.tally(g));
    }

    /// The last generations published, newest first, with how many nodes ACKed and NACKed
    /// each.
    pub fn history(&self) -> Vec<crate::history::Entry> {
        self.history.entries(|g| self.tally(g))
    }

    fn tally(&self, generation: u64) -> Option<(usize, usize)> {
        self.fleet.as_ref().and_then(|f| f.tally(generation))
    }

    /// Publish a load a source read (the sink's), unless it is what serves: the generation
    /// serving after it. The content of a rollout an operator aborted is not proposed again
    /// until the source changes: a read that finds it again (a barrier, a touched file)
    /// keeps reporting the aborted generation.
    pub fn publish_load(&self, config: Config, from: Publication) -> u64 {
        self.publish(config, from, true)
    }

    /// Publish a configuration the fleet's rollout names, unless it is what serves: the
    /// generation serving after it. (The fleet's rollout keeps its own record of what was
    /// aborted.)
    pub fn publish_named(&self, config: Config, from: Publication) -> u64 {
        self.publish(config, from, false)
    }

    fn publish(&self, config: Config, from: Publication, aborted_stays: bool) -> u64 {
        let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
        let current = self.cache.current();
        let version = config.version();
        let mut loaded = Loaded {
            generation: current.number,
            changed: false,
            files: config.files.len(),
            parsed: from.work.parsed,
            resources: config.resource_count(),
            version: &version,
        };
        if current.number > 0 && current.config.version() == version {
            self.telemetry.config_loaded(loaded, &warnings);
            return current.number;
        }
        if let Some(aborted) = self.aborted(&version).filter(|_| aborted_stays) {
            loaded.generation = aborted;
            self.telemetry.config_loaded(loaded, &warnings);
            return aborted;
        }
        // Under a rollout policy a new generation is kept only once promoted (see
        // `keep_promoted`); the first one goes to every node at once.
        let stable_now = self.cache.policy().is_none() || current.number == 0;
        let mut kept = false;
        if let (Some(state), true) = (&self.state, stable_now) {
            // Kept before it is published, from the files as they are now, checked to load
            // to what is published (its content version): an edit that landed after the
            // load read the files is not kept as good unchecked (it loads next, through
            // every check). A failure here does not stop serving.
            let published = config.content_version();
            match state.persist(&self.paths, &self.options, Some(&published)) {
                Ok(_) => kept = true,
                Err(e) => {
                    tracing::error!(error = %e, "Cannot keep the good snapshot in --state-dir; the previous copy stays.")
                }
            }
        }
        let mut entry = crate::history::Entry::of(&current.config, &config, 0, from.revision);
        if let Some(note) = from.note {
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
        self.history.record(entry, |g| self.tally(g));
        self.record_generation(loaded.generation);
        loaded.changed = true;
        if kept {
            self.kept.send_replace(loaded.generation);
        }
        self.telemetry.config_loaded(loaded, &warnings);
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
}
