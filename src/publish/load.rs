//! What the publisher loads, and how: the `--config` paths (or documents a source read),
//! the load options, the loader that parses only what changed since its last load, and the
//! pre-flight Envoy that checks a new config before it is published.
//!
//! Must not: publish, or know the cache beyond the config it is given to compare with.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::config::{self, Config, ConfigError, LoadFailure, LoadOptions, LoadWork, Loader};

/// The paths and options a publisher loads, and the loader it keeps between loads.
#[derive(Debug)]
pub(super) struct Loading {
    pub(super) paths: Vec<PathBuf>,
    pub(super) options: LoadOptions,
    /// Keeps each file's (or document's) result, so a load parses only what changed.
    loader: Mutex<Loader>,
    /// `--preflight-envoy`: the Envoy binary that checks each new config, its time limit,
    /// and the form nodes get (with or without inline key material).
    pub(super) preflight: Option<(PathBuf, std::time::Duration, crate::resource::Secrets)>,
}

impl Loading {
    pub(super) fn new(paths: Vec<PathBuf>, options: LoadOptions) -> Loading {
        Loading {
            paths,
            options,
            loader: Mutex::new(Loader::default()),
            preflight: None,
        }
    }

    fn loader(&self) -> std::sync::MutexGuard<'_, Loader> {
        self.loader.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The files under the paths, parsing only those that changed.
    pub(super) fn files(&self) -> (Result<Config, LoadFailure>, LoadWork) {
        self.loader().load_counting(&self.paths, &self.options)
    }

    /// Documents a source read, parsing only those whose text changed.
    pub(super) fn documents(
        &self,
        documents: &[config::Document],
    ) -> (Result<Config, LoadFailure>, LoadWork) {
        self.loader().load_documents(documents, &self.options)
    }

    /// The files beyond the paths that the last load read (secret files).
    pub(super) fn secret_files(&self) -> Vec<PathBuf> {
        self.loader().secret_files()
    }

    /// Envoy's verdict on a config that differs from the one serving: the groups it rejects
    /// as errors (an Envoy that cannot be run is one too: the check fails closed).
    pub(super) fn preflight(&self, config: &Config, serving: &Config) -> Vec<ConfigError> {
        let Some((envoy, timeout, secrets)) = &self.preflight else {
            return Vec::new();
        };
        if serving.version() == config.version() {
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
}
