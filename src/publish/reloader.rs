//! The sink of both sources: each read is loaded (parsing only what changed), checked,
//! reported, and a good load handed over, to the [`Publisher`] or to the fleet's rollout.
//!
//! Must not: publish itself, or decide what serves under the fleet's rollout.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::watch;

use super::load::Loading;
use super::{Head, Heads, LoadReport, Publication, Publisher, Reports};
use crate::cache::Cache;
use crate::config::{self, Config, ConfigError, LoadFailure, LoadOptions};
use crate::source::etcd::ApplyNote;
use crate::telemetry::Telemetry;

/// Loads what the sources read, and hands good loads over.
#[derive(Debug)]
pub struct Reloader {
    /// What is loaded, and how: the paths, the options, the loader that parses only what
    /// changed, and the pre-flight Envoy.
    pub(super) loading: Loading,
    /// What serves, which a load is checked against.
    cache: Arc<Cache>,
    /// Each load's report.
    reports: Reports,
    /// Where failed loads are logged and counted (good ones, where they are published).
    pub(super) telemetry: Telemetry,
    /// Who takes a good load.
    to: Handover,
    /// The reads of the files so far; held through a read's load and hand-over, so that
    /// reads (the watch's, a barrier's) are loaded one at a time, in order.
    reads: Mutex<u64>,
}

/// Who takes a good load.
#[derive(Debug)]
enum Handover {
    /// Published at once.
    Publish(Arc<Publisher>),
    /// `--source` with a canary policy: the fleet's rollout (`rollout::fleetwide::driver`)
    /// takes good loads of the documents and publishes what the rollout kept in etcd says.
    Rollout(Arc<Heads>),
}

impl Reloader {
    /// Load `paths` as `options` say, publishing good loads into `cache` (through a
    /// [`Publisher`] of its own, without a state directory) and logging each to
    /// `telemetry`.
    pub fn new(
        paths: Vec<PathBuf>,
        options: LoadOptions,
        cache: Arc<Cache>,
        telemetry: Telemetry,
    ) -> Reloader {
        let publisher = Publisher::new(
            Arc::clone(&cache),
            telemetry.clone(),
            paths.clone(),
            options.clone(),
        );
        Reloader {
            loading: Loading::new(paths, options),
            cache,
            reports: Reports::default(),
            telemetry,
            to: Handover::Publish(Arc::new(publisher)),
            reads: Mutex::new(0),
        }
    }

    /// Publish good loads through `publisher` (one with a state directory, or counting a
    /// fleet's ACKs).
    pub fn publishing_to(mut self, publisher: Arc<Publisher>) -> Reloader {
        self.to = Handover::Publish(publisher);
        self
    }

    /// Hand good loads of documents to the fleet's rollout (see [`Head`]) rather than
    /// publish them: nothing is published here.
    pub fn hand_loads_to(mut self, heads: Arc<Heads>) -> Reloader {
        self.to = Handover::Rollout(heads);
        self
    }

    /// Check each new config with the Envoy at `envoy` as nodes would be sent it
    /// (`secrets`) before handing it over.
    pub fn with_preflight(
        mut self,
        envoy: PathBuf,
        timeout: std::time::Duration,
        secrets: crate::resource::Secrets,
    ) -> Reloader {
        self.loading.preflight = Some((envoy, timeout, secrets));
        self
    }

    /// The publisher good loads go to; `None` under the fleet's rollout.
    pub fn publisher(&self) -> Option<&Arc<Publisher>> {
        match &self.to {
            Handover::Publish(publisher) => Some(publisher),
            Handover::Rollout(_) => None,
        }
    }

    /// How loads are made (the fleet's rollout loads the generations it names with the same
    /// options).
    pub fn options(&self) -> &LoadOptions {
        &self.loading.options
    }

    /// The loads' reports, for whoever serves a load later or something else instead.
    pub fn load_reports(&self) -> Reports {
        self.reports.clone()
    }

    /// The outcome of the latest load, if any.
    pub fn last_report(&self) -> Option<LoadReport> {
        self.reports.last()
    }

    /// Each load's report as it is made (to wait for one without polling).
    pub fn reports(&self) -> watch::Receiver<Option<LoadReport>> {
        self.reports.subscribe()
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

    /// Load now (parsing only the files that changed); publish when good and different
    /// from what is serving. Logs one line.
    pub fn reload(&self) -> Result<(), LoadFailure> {
        self.read_files(None).1.map(|_| ())
    }

    /// Read the files and publish what loads (one read at a time): the read's number, and
    /// whether it loaded, and was published. Not published, nor reported, when `moved()`
    /// says the files changed again since the read began (the watch's next load follows).
    fn read_files(&self, moved: Option<&dyn Fn() -> bool>) -> (u64, Result<bool, LoadFailure>) {
        let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        *reads += 1;
        let began = SystemTime::now();
        let (loaded, work) = self.loading.files();
        if moved.is_some_and(|moved| moved()) {
            tracing::debug!(
                "The config files changed while they were read: this load is not published (it \
                 may hold half of an edit); the change loads them again."
            );
            return (*reads, Ok(false));
        }
        let result = self.checked(loaded, None).map(|config| {
            self.hand_over(
                config,
                Publication {
                    work,
                    ..Publication::default()
                },
                None,
            );
            true
        });
        self.reports.read_of_files(*reads, began);
        (*reads, result)
    }

    /// Load the documents read from a source (`--source`: every key under an etcd prefix,
    /// at one revision, and what the apply that wrote them said of itself) as
    /// [`Reloader::reload`] loads the files (parsing only the documents whose text
    /// changed), and hand a good load over the same way.
    pub fn reload_documents(
        &self,
        documents: &[config::Document],
        revision: i64,
        note: Option<ApplyNote>,
    ) -> Result<(), LoadFailure> {
        let (loaded, work) = self.loading.documents(documents);
        let config = self.checked(loaded, Some(revision))?;
        let from = Publication {
            revision: Some(revision),
            note,
            work,
        };
        self.hand_over(config, from, Some(documents));
        Ok(())
    }

    /// Hand a good load over (to the publisher, or to the fleet's rollout with the
    /// `documents` it was loaded from), and report it.
    fn hand_over(&self, config: Config, from: Publication, documents: Option<&[config::Document]>) {
        let mut report = LoadReport {
            at: SystemTime::now(),
            errors: Vec::new(),
            warnings: config.warnings.iter().map(|w| w.to_string()).collect(),
            generation: self.cache.current().number,
            revision: from.revision,
            read: None,
            began: None,
            pending: false,
        };
        match (&self.to, from.revision.zip(documents)) {
            (Handover::Rollout(heads), Some((revision, documents))) => {
                // The fleet's rollout decides what serves, and says so (`Reports::loaded_as`).
                report.pending = true;
                let now = from.note.as_ref().filter(|n| n.now).map(|n| {
                    format!(
                        "rollback --now to revision {}{}",
                        n.rollback.map_or_else(|| "?".into(), |r| r.to_string()),
                        n.author
                            .as_ref()
                            .map(|a| format!(" by {a}"))
                            .unwrap_or_default()
                    )
                });
                let head = Head {
                    revision,
                    version: config.content_version(),
                    config: Some(config),
                    work: from.work,
                    documents: Arc::new(documents.to_vec()),
                    now,
                };
                self.reports.store(report);
                heads.put(head, from.note);
            }
            (Handover::Publish(publisher), _) => {
                // Published and reported as one, for whoever reads both (`/status`).
                let _publishing = self.reports.publishing();
                report.generation = publisher.publish_load(config, from);
                self.reports.store(report);
            }
            // Never made: the fleet's rollout follows an etcd prefix, not files. Not served,
            // and said so.
            (Handover::Rollout(_), None) => {
                report.errors = vec![
                    "a load of files was handed to the fleet's rollout, which takes an etcd \
                     prefix's documents only; it is not served"
                        .into(),
                ];
                tracing::error!("{}", report.errors[0]);
                self.reports.store(report);
            }
        }
    }

    /// A load's last checks; a failure is reported (logged, counted, kept) and returned.
    fn checked(
        &self,
        loaded: Result<Config, LoadFailure>,
        revision: Option<i64>,
    ) -> Result<Config, LoadFailure> {
        self.check_quietly(loaded)
            .map_err(|failure| self.failed(failure, revision))
    }

    /// Report a failed load: the last good generation keeps serving.
    fn failed(&self, failure: LoadFailure, revision: Option<i64>) -> LoadFailure {
        let current = self.cache.current().number;
        self.telemetry
            .config_failed(failure.errors.len(), current, &failure);
        self.reports.store(LoadReport {
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
}

/// The sink of both sources: files load again, documents are loaded as read.
impl crate::source::Sink for Reloader {
    fn files_changed(&self) -> u64 {
        self.read_files(None).0
    }

    fn files_changed_unless(&self, moved: &dyn Fn() -> bool) -> Option<u64> {
        let (read, result) = self.read_files(Some(moved));
        result
            .ok()
            .map_or(Some(read), |published| published.then_some(read))
    }

    fn files_read(&self) -> Vec<PathBuf> {
        self.loading.secret_files()
    }

    fn documents(&self, documents: &[config::Document], revision: i64, note: Option<ApplyNote>) {
        let _ = self.reload_documents(documents, revision, note);
    }

    fn load_stopped(&self, revision: Option<i64>, why: String) {
        let message = format!(
            "the load stopped on a bug in Switchyard ({why}); the last good generation keeps \
             serving; please report it with this replica's log"
        );
        let current = self.cache.current().number;
        self.telemetry.config_failed(1, current, &message);
        self.reports.store(LoadReport {
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
