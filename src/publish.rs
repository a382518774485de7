//! Publishing what a source reads: the [`Reloader`] is the sink of both sources (the
//! `--config` files, an etcd prefix; `source::Sink`).
//!
//! Owns: loading in a blocking task (the loader parses only what changed), the last checks
//! (pre-flight, emptied node groups), publishing a good load to the cache as a generation,
//! the history of generations, and the result of the last load. A failed load publishes
//! nothing: the last good generation keeps serving.
//!
//! Must not: watch or read a source (`source` does), parse files itself (that is
//! `config`), or know about streams and rollouts (a fleet's rollout gets good loads over a
//! channel, [`Reloader::hand_loads_to`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};

use crate::cache::Cache;
use crate::config::{self, Config, ConfigError, LoadFailure, LoadOptions, LoadWork, Loader};
use crate::source::files::Watching;
use crate::state::StateDir;
use crate::telemetry::{Loaded, Telemetry};

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
}

/// `--source`: whether etcd answers, and since when.
#[derive(Clone, Debug)]
pub struct SourceHealth {
    /// The source, as given (`etcd://...`).
    pub url: String,
    pub answering: bool,
    /// When it began answering, or stopped.
    pub since: SystemTime,
    /// Why it does not answer.
    pub error: Option<String>,
}

impl LoadReport {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Loads the configured paths and publishes good loads.
#[derive(Debug)]
pub struct Reloader {
    paths: Vec<PathBuf>,
    options: LoadOptions,
    cache: Arc<Cache>,
    /// Keeps each file's result, so a reload parses only the files that changed.
    loader: Mutex<Loader>,
    /// The last load's report, watched by whoever waits for a load.
    last: watch::Sender<Option<LoadReport>>,
    /// Where loads and file events are logged and counted.
    telemetry: Telemetry,
    /// The generation the state directory last kept (0: none yet), watched by whoever waits
    /// for it.
    kept: watch::Sender<u64>,
    /// Where each good load is kept (`--state-dir`).
    state: Option<StateDir>,
    /// `--preflight-envoy`: the Envoy binary that checks each new config, its time limit,
    /// and the form nodes get (with or without inline key material).
    preflight: Option<(PathBuf, std::time::Duration, crate::resource::Secrets)>,
    /// `--source`: whether etcd answers (`None` when serving files).
    source: watch::Sender<Option<SourceHealth>>,
    /// `--source` with a canary policy: good loads of the documents go to the fleet's
    /// rollout (`rollout::drive`), which publishes what the rollout kept in etcd says, instead
    /// of being published here (but the first, which every node gets).
    held: Option<mpsc::UnboundedSender<Head>>,
    /// The last generations published (in `--state-dir` too, with one).
    history: crate::history::History,
    /// Where ACKs and NACKs of each generation are counted.
    fleet: Option<Arc<crate::fleet::Fleet>>,
}

/// A good load of the documents read at one revision, for the fleet's rollout to propose.
#[derive(Debug)]
pub struct Head {
    pub revision: i64,
    /// What it serves (`Config::content_version`).
    pub version: String,
    /// The load, unless it was published already (the first).
    pub config: Option<Config>,
    pub documents: Arc<Vec<config::Document>>,
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
            paths,
            options,
            cache,
            loader: Mutex::new(Loader::default()),
            last: watch::Sender::new(None),
            telemetry,
            kept: watch::Sender::new(0),
            state: None,
            preflight: None,
            source: watch::Sender::new(None),
            held: None,
            history: crate::history::History::default(),
            fleet: None,
        }
    }

    /// Hand good loads of documents to the fleet's rollout (see [`Head`]) rather than
    /// publish them, once something is published.
    pub fn hand_loads_to(mut self, heads: mpsc::UnboundedSender<Head>) -> Reloader {
        self.held = Some(heads);
        self
    }

    /// Load documents as a reload would, without publishing them (the fleet's rollout loads
    /// the generations it names this way).
    pub fn load_only(&self, documents: &[config::Document]) -> Result<Config, LoadFailure> {
        config::load_documents(documents, &self.options)
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
                    && report.generation != generation =>
            {
                report.generation = generation;
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

    /// `--source`: record whether etcd answers (the metric and `/status` say so).
    pub fn source_health(&self, url: &str, error: Option<String>) {
        let answering = error.is_none();
        self.telemetry.source_answering(answering);
        self.source.send_modify(|health| {
            if health.as_ref().is_some_and(|h| h.answering == answering) {
                return;
            }
            *health = Some(SourceHealth {
                url: url.to_string(),
                answering,
                since: SystemTime::now(),
                error,
            });
        });
    }

    /// `--source`: whether etcd answers, and since when.
    pub fn source(&self) -> Option<SourceHealth> {
        self.source.borrow().clone()
    }

    /// The same, checking each new config with the Envoy at `envoy` before publishing it.
    /// Check each new config with `envoy` as nodes are sent it (`secrets`).
    pub fn with_preflight(
        mut self,
        envoy: PathBuf,
        timeout: std::time::Duration,
        secrets: crate::resource::Secrets,
    ) -> Reloader {
        self.preflight = Some((envoy, timeout, secrets));
        self
    }

    /// Envoy's verdict on a config that differs from the one serving: the groups it rejects
    /// as errors (an Envoy that cannot be run is one too: the check fails closed).
    fn preflight(&self, config: &Config) -> Vec<ConfigError> {
        let Some((envoy, timeout, secrets)) = &self.preflight else {
            return Vec::new();
        };
        if self.cache.current().config.version() == config.version() {
            return Vec::new();
        }
        match crate::preflight::check(envoy, config, *timeout, *secrets) {
            Ok(verdicts) => verdicts
                .into_iter()
                .filter_map(|v| {
                    v.result.err().map(|message| ConfigError::Preflight {
                        group: v.group.to_string(),
                        message,
                    })
                })
                .collect(),
            Err(e) => vec![ConfigError::Preflight {
                group: "configuration".into(),
                message: e.to_string(),
            }],
        }
    }

    /// The same, keeping each good load in `state`; generations are numbered on from the last
    /// one published with it.
    pub fn with_state(mut self, state: StateDir) -> Reloader {
        self.cache.number_after(state.last_generation());
        self.history = crate::history::History::kept_in(state.dir());
        self.state = Some(state);
        self
    }

    /// At start, when the files do not load (`failure`): serve the last good copy kept in
    /// the state directory, if there is one, keeping `failure` as the last load's report so
    /// operators see it. Returns the generation serving, or `None` without a copy.
    pub fn serve_last_good(&self, failure: &LoadFailure) -> Option<u64> {
        let generation = self.publish_kept_copy()?;
        tracing::error!(
            serving_generation = generation,
            "The snapshot files do not load; serving the last good copy from --state-dir until \
             they do. {failure}"
        );
        self.last.send_modify(|last| {
            if let Some(report) = last.as_mut() {
                report.generation = generation;
            }
        });
        Some(generation)
    }

    /// Under a rollout policy, with a state directory: serve the last promoted copy kept
    /// there to every node first, so that the files (loaded next) roll out to the canaries
    /// from it, as they would have before a restart. Returns the generation, or `None`
    /// without a copy (or a policy).
    pub fn serve_promoted_first(&self) -> Option<u64> {
        self.cache.policy()?;
        let generation = self.publish_kept_copy()?;
        tracing::info!(
            generation,
            "Serving the last promoted copy from --state-dir to every node; the snapshot files roll out to the canaries from it."
        );
        Some(generation)
    }

    /// Keep `generation` as the last number published, in the state directory if there is
    /// one (a failure is logged; numbering goes on in memory).
    fn record_generation(&self, generation: u64) {
        if let Some(state) = &self.state {
            if let Err(e) = state.record_generation(generation) {
                tracing::error!(error = %e, "Cannot keep the generation number in --state-dir.");
            }
        }
    }

    /// Load the copy kept in the state directory and publish it: its generation, or `None`
    /// without a copy (or when it does not load, which is logged).
    fn publish_kept_copy(&self) -> Option<u64> {
        let roots = self.state.as_ref()?.last_good()?;
        match config::load(&roots, &self.options) {
            Ok(config) => {
                let generation = self.cache.publish(config).number;
                self.record_generation(generation);
                // What serves is what the state directory keeps.
                self.kept.send_replace(generation);
                Some(generation)
            }
            Err(e) => {
                tracing::error!("The copy kept in --state-dir does not load: {e}");
                None
            }
        }
    }

    /// Under a rollout policy, with a state directory: keep each generation that becomes
    /// stable (promoted) there, until the cache closes. The copy is made from the files, and
    /// kept only if they are still what was promoted.
    pub async fn keep_promoted(self: Arc<Self>) {
        if self.cache.policy().is_none() || self.state.is_none() {
            return;
        }
        let mut serving = self.cache.subscribe();
        // Checked against what the state directory keeps, from the start: a promotion may
        // come before this task first runs. Each generation is tried once.
        let mut tried = None;
        loop {
            let stable = Arc::clone(&serving.borrow_and_update().stable);
            if stable.number != *self.kept.borrow() && tried != Some(stable.number) {
                tried = Some(stable.number);
                self.keep(&stable).await;
            }
            if serving.changed().await.is_err() {
                return;
            }
        }
    }

    /// Keep `stable`'s files in the state directory, if they are still what it holds.
    async fn keep(self: &Arc<Self>, stable: &crate::cache::Generation) {
        let reloader = Arc::clone(self);
        let version = stable.config.content_version();
        let kept_copy = tokio::task::spawn_blocking(move || {
            reloader
                .state
                .as_ref()
                .map(|state| state.persist(&reloader.paths, &reloader.options, Some(&version)))
        })
        .await;
        match kept_copy {
            Ok(Some(Err(e))) => {
                tracing::error!(error = %e, generation = stable.number, "Cannot keep the promoted snapshot in --state-dir; the previous copy stays.")
            }
            Ok(_) => {
                tracing::debug!(
                    generation = stable.number,
                    "Kept the promoted snapshot in --state-dir."
                );
                self.kept.send_replace(stable.number);
            }
            Err(e) => tracing::error!(error = %e, "Keeping the promoted snapshot failed."),
        }
    }

    /// The outcome of the latest load, if any.
    pub fn last_report(&self) -> Option<LoadReport> {
        self.last.borrow().clone()
    }

    /// Each load's report as it is made (to wait for one without polling).
    pub fn reports(&self) -> watch::Receiver<Option<LoadReport>> {
        self.last.subscribe()
    }

    /// The generation the state directory last kept a copy of (0: none yet).
    pub fn kept(&self) -> watch::Receiver<u64> {
        self.kept.subscribe()
    }

    /// Load now (parsing only the files that changed); publish when good and different
    /// from what is serving. Logs one line.
    pub fn reload(&self) -> Result<(), LoadFailure> {
        let (loaded, work) = self
            .loader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .load_counting(&self.paths, &self.options);
        self.finish(loaded, work, None)
    }

    /// Load the documents read from a source (`--source`: every key under an etcd prefix,
    /// at one revision) as [`Reloader::reload`] loads the files (parsing only the documents
    /// whose text changed), and publish the same way.
    pub fn reload_documents(
        &self,
        documents: &[crate::config::Document],
        revision: i64,
    ) -> Result<(), LoadFailure> {
        let (loaded, work) = self
            .loader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .load_documents(documents, &self.options);
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
        };
        let config = if report.generation == 0 {
            report.generation = self.publish(checked, work, &report.warnings, Some(revision));
            None
        } else {
            Some(checked)
        };
        self.store(report);
        let _ = heads.send(Head {
            revision,
            version,
            config,
            documents: Arc::new(documents.to_vec()),
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
        });
        failure
    }

    /// Pre-flight, and the emptied node groups: a load that passes is good to serve.
    fn check_quietly(&self, loaded: Result<Config, LoadFailure>) -> Result<Config, LoadFailure> {
        loaded.and_then(|config| {
            let rejected = self.preflight(&config);
            if !rejected.is_empty() {
                return Err(LoadFailure {
                    errors: rejected,
                    warnings: config.warnings,
                });
            }
            if self.options.allow_empty {
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
        // Under a rollout policy a new generation is kept only once promoted (see
        // `keep_promoted`); the first one goes to every node at once.
        let stable_now = self.cache.policy().is_none() || current.number == 0;
        let mut kept = false;
        if let (Some(state), true) = (&self.state, stable_now) {
            // Kept before it is published, from the files as they are now (checked by
            // loading the copy); a failure here does not stop serving.
            match state.persist(&self.paths, &self.options, None) {
                Ok(_) => kept = true,
                Err(e) => {
                    tracing::error!(error = %e, "Cannot keep the good snapshot in --state-dir; the previous copy stays.")
                }
            }
        }
        let mut entry = crate::history::Entry::of(&current.config, &config, 0, revision);
        loaded.generation = self.cache.publish(config).number;
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

    fn store(&self, report: LoadReport) {
        self.last.send_replace(Some(report));
    }

    /// The files source on this reloader's paths, armed now ([`Watching::arm`]): armed
    /// before the first load, a write that lands while it reads the files is loaded once
    /// the watch runs.
    pub fn watching(self: &Arc<Self>) -> Watching {
        Watching::arm(
            Arc::clone(self) as Arc<dyn crate::source::Sink>,
            self.paths.clone(),
            self.telemetry.clone(),
        )
    }
}

/// The sink of both sources: files load again, documents are loaded as read.
impl crate::source::Sink for Reloader {
    fn files_changed(&self) {
        let _ = self.reload();
    }

    fn files_read(&self) -> Vec<PathBuf> {
        self.loader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .secret_files()
    }

    fn documents(&self, documents: &[config::Document], revision: i64) {
        let _ = self.reload_documents(documents, revision);
    }

    fn health(&self, url: &str, error: Option<String>) {
        self.source_health(url, error);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::metrics::ResultLabels;

    /// How long to wait for what a file event should bring about.
    const WAIT: Duration = Duration::from_secs(5);

    /// Wait until the newest generation is `number` (woken by each publication, not polled).
    async fn generation(cache: &Cache, number: u64) {
        let mut serving = cache.subscribe();
        let reached = serving.wait_for(|s| s.newest().number == number);
        if tokio::time::timeout(WAIT, reached).await.is_err() {
            panic!(
                "generation {number} never came (have {})",
                cache.current().number
            );
        }
    }

    /// Wait until a load's report says `done` (woken by each load).
    async fn report(reloader: &Reloader, done: impl Fn(&LoadReport) -> bool) {
        let mut reports = reloader.reports();
        let reached = reports.wait_for(|r| r.as_ref().is_some_and(&done));
        assert!(
            tokio::time::timeout(WAIT, reached).await.is_ok(),
            "no such load: the last was {:?}",
            reloader.last_report()
        );
    }

    /// A reloader over `root`, publishing into a fresh cache.
    fn reloader_over(root: PathBuf) -> (Arc<Cache>, Arc<Reloader>, Telemetry) {
        let cache = Arc::new(Cache::new());
        let telemetry = Telemetry::default();
        let reloader = Reloader::new(
            vec![root],
            LoadOptions::default(),
            Arc::clone(&cache),
            telemetry.clone(),
        );
        (cache, Arc::new(reloader), telemetry)
    }

    /// Run `watching` in a task until the returned sender is used.
    fn run_watch(
        watching: Watching,
    ) -> (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(watching.run(async {
            let _ = stop_rx.await;
        }));
        (stop_tx, task)
    }

    const GOOD: &str = "clusters: [{name: a, connect_timeout: 1s}]\n";
    const CHANGED: &str = "clusters: [{name: a, connect_timeout: 2s}]\n";

    /// The connect_timeout of cluster `a` in the generation `node` gets.
    fn timeout_for(cache: &Cache, node: &str) -> String {
        let snapshot = cache
            .for_node(&crate::config::selector::NodeFacts::new(node, ""))
            .snapshot_for(&crate::config::selector::NodeFacts::new(node, ""));
        let a = &snapshot
            .get(crate::resource::ResourceType::Cluster)
            .resources["a"];
        let json = crate::config::json::resource_json(a, &a.body).expect("json");
        json["connectTimeout"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Under a rollout policy the state directory keeps what was promoted, not every load;
    /// after a restart that copy serves every node and the files roll out from it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_rollouts_the_state_dir_keeps_what_was_promoted() {
        let dir = tempfile::tempdir().expect("tmp");
        let config = dir.path().join("config");
        std::fs::create_dir(&config).expect("mkdir");
        let file = config.join("a.yaml");
        let state_dir = dir.path().join("state");
        let policy = || {
            crate::rollout::Policy::new(Some("canary-*".into()), None, Duration::ZERO)
                .expect("policy")
        };
        let start = || {
            let cache = Arc::new(Cache::with_rollouts(policy()));
            let reloader = Reloader::new(
                vec![config.clone()],
                LoadOptions::default(),
                Arc::clone(&cache),
                Telemetry::default(),
            )
            .with_state(StateDir::open(&state_dir).expect("state"));
            (cache, Arc::new(reloader))
        };
        let kept = {
            let state_dir = state_dir.clone();
            move || {
                let roots = StateDir::open(&state_dir)
                    .expect("state")
                    .last_good()
                    .expect("a copy");
                std::fs::read_to_string(roots[0].join("a.yaml")).expect("copy")
            }
        };

        std::fs::write(&file, GOOD).expect("write");
        let (cache, reloader) = start();
        reloader.reload().expect("loads");
        assert_eq!(kept(), GOOD, "the first generation is stable at once");

        std::fs::write(&file, CHANGED).expect("write");
        reloader.reload().expect("loads");
        assert_eq!(timeout_for(&cache, "canary-1"), "2s");
        assert_eq!(timeout_for(&cache, "edge-1"), "1s");
        assert_eq!(kept(), GOOD, "a candidate is not kept");
        let promoted = cache.promote().expect("in progress");
        // The keeper starts after the promotion (a task may first run that late): it goes by
        // what the state directory keeps, not by what serves when it starts.
        tokio::spawn(Arc::clone(&reloader).keep_promoted());
        let mut kept_generation = reloader.kept();
        let keeping = kept_generation.wait_for(|&n| n == promoted);
        assert!(
            tokio::time::timeout(WAIT, keeping).await.is_ok(),
            "the promoted generation is never kept"
        );
        assert_eq!(kept(), CHANGED, "the promoted generation is kept");

        // A restart with newer files: the kept copy serves every node, the files roll out.
        drop(reloader);
        let third = "clusters: [{name: a, connect_timeout: 3s}]\n";
        std::fs::write(&file, third).expect("write");
        let (cache, reloader) = start();
        assert!(reloader.serve_promoted_first().is_some());
        reloader.reload().expect("loads");
        assert_eq!(timeout_for(&cache, "edge-1"), "2s");
        assert_eq!(timeout_for(&cache, "canary-1"), "3s");
        assert_eq!(kept(), CHANGED);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn edits_reload_and_broken_files_keep_the_last_good_config() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, GOOD).expect("write");
        let (cache, reloader, telemetry) = reloader_over(dir.path().to_path_buf());
        reloader.reload().expect("first load");
        assert_eq!(cache.current().number, 1);
        // Armed here, before the edits below.
        let (stop_tx, task) = run_watch(reloader.watching());

        // An edit in place.
        std::fs::write(&file, CHANGED).expect("write");
        generation(&cache, 2).await;

        // A broken edit: reported, not served.
        std::fs::write(&file, "clusters: [{name: a, connect_timeout: ").expect("write");
        report(&reloader, |r| !r.ok()).await;
        assert_eq!(
            cache.current().number,
            2,
            "the last good config keeps serving"
        );
        let m = telemetry.metrics();
        let loads = |result| m.config_loads.get_or_create(&ResultLabels { result }).get();
        assert!(m.file_watch_events.get() >= 2);
        assert!(loads("ok") >= 2 && loads("failed") >= 1);

        // An editor's atomic rename-over fixes it.
        let tmp = dir.path().join(".a.yaml.swp");
        std::fs::write(&tmp, GOOD).expect("write");
        std::fs::rename(&tmp, &file).expect("rename");
        generation(&cache, 3).await;
        // The report is stored just after the publication.
        report(&reloader, |r| r.ok() && r.generation == 3).await;

        let _ = stop_tx.send(());
        task.await.expect("watch task ends on shutdown");
    }

    /// An edit made while the first load runs (seconds, for a large config) is not lost:
    /// the watch is armed before that load, and loads the edit once it runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_edit_during_the_first_load_is_loaded_once_the_watch_runs() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, GOOD).expect("write");
        let (cache, reloader, _) = reloader_over(dir.path().to_path_buf());
        let watching = reloader.watching();
        reloader.reload().expect("first load");
        // The edit lands after the first load read the files, before the watch task runs.
        std::fs::write(&file, CHANGED).expect("write");
        let (stop_tx, task) = run_watch(watching);
        generation(&cache, 2).await;
        let _ = stop_tx.send(());
        task.await.expect("watch task ends on shutdown");
    }

    #[test]
    fn a_reload_that_changes_nothing_publishes_nothing() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("a.yaml"), GOOD).expect("write");
        let cache = Arc::new(Cache::new());
        let reloader = Reloader::new(
            vec![dir.path().to_path_buf()],
            LoadOptions::default(),
            Arc::clone(&cache),
            Telemetry::default(),
        );
        reloader.reload().expect("loads");
        // Same content, rewritten (and with keys in another order).
        std::fs::write(
            dir.path().join("a.yaml"),
            "clusters: [{connect_timeout: 1s, name: a}]\n",
        )
        .expect("write");
        reloader.reload().expect("loads");
        assert_eq!(cache.current().number, 1);
        std::fs::write(dir.path().join("a.yaml"), CHANGED).expect("write");
        reloader.reload().expect("loads");
        assert_eq!(cache.current().number, 2);
        let report = reloader.last_report().expect("report");
        assert!(report.ok() && report.generation == 2);
    }

    /// Secret files named by `switchyard_files` are watched where they are, outside the
    /// config paths, and a Kubernetes Secret update (a `..data` symlink swapped to a new
    /// directory beside the files' links) reloads.
    #[cfg(unix)]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn secret_files_swapped_as_kubernetes_does_reload() {
        let root = tempfile::tempdir().expect("tmp");
        let config = root.path().join("config");
        let certs = root.path().join("certs");
        std::fs::create_dir_all(&config).expect("mkdir");
        std::fs::create_dir_all(&certs).expect("mkdir");
        // certs/tls.crt -> ..data/tls.crt, ..data -> ..v1 (as the kubelet lays it out).
        let version = |n: u32| {
            let dir = certs.join(format!("..v{n}"));
            std::fs::create_dir(&dir).expect("mkdir");
            let pair = rcgen::generate_simple_self_signed(vec![format!("v{n}")]).expect("cert");
            std::fs::write(dir.join("tls.crt"), pair.cert.pem()).expect("write");
            std::fs::write(dir.join("tls.key"), pair.signing_key.serialize_pem()).expect("write");
            let tmp = certs.join("..data_tmp");
            std::os::unix::fs::symlink(format!("..v{n}"), &tmp).expect("link");
            std::fs::rename(&tmp, certs.join("..data")).expect("swap");
        };
        version(1);
        for name in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), certs.join(name)).expect("link");
        }
        std::fs::write(
            config.join("secrets.yaml"),
            format!(
                "secrets:\n- name: edge\n  switchyard_files: {{certificate_chain: {}, private_key: {}}}\n",
                certs.join("tls.crt").display(),
                certs.join("tls.key").display()
            ),
        )
        .expect("write");
        let (cache, reloader, _) = reloader_over(config.clone());
        // Armed before the first load, as the daemon does: the secret directory is added
        // once the load names it.
        let watching = reloader.watching();
        reloader.reload().expect("first load");
        let (stop_tx, task) = run_watch(watching);
        let serial = |cache: &Cache| {
            cache
                .current()
                .config
                .certificates()
                .map(|c| c.subject.clone())
                .collect::<Vec<_>>()
        };
        assert!(serial(&cache)[0].contains("rcgen"));
        let first = cache.current().number;
        // Let the watch re-arm for the secret directory (it also loads once more, finding
        // nothing new), then swap.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(cache.current().number, first, "nothing changed yet");
        version(2);
        generation(&cache, first + 1).await;
        let _ = stop_tx.send(());
        task.await.expect("ends");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_swapped_directory_is_followed() {
        let parent = tempfile::tempdir().expect("tmp");
        let dir = parent.path().join("snap");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("a.yaml"), GOOD).expect("write");
        let (cache, reloader, _) = reloader_over(dir.clone());
        reloader.reload().expect("first load");
        let (stop_tx, task) = run_watch(reloader.watching());
        for (round, content) in [CHANGED, GOOD].into_iter().enumerate() {
            // Build a new directory beside it and rename it over the old one.
            let next = parent.path().join(format!("snap.new{round}"));
            std::fs::create_dir(&next).expect("mkdir");
            std::fs::write(next.join("a.yaml"), content).expect("write");
            let old = parent.path().join(format!("snap.old{round}"));
            std::fs::rename(&dir, &old).expect("move old away");
            std::fs::rename(&next, &dir).expect("move new in");
            generation(&cache, round as u64 + 2).await;
        }
        let _ = stop_tx.send(());
        task.await.expect("ends");
    }
}
