//! The publisher's copy in `--state-dir`: numbering on from it, serving it when the files
//! do not load at start (or, under a rollout policy, first), and keeping each generation
//! that becomes stable.
//!
//! Must not: load or publish anything but the copy it keeps.

use std::sync::Arc;

use tokio::sync::watch;

use super::Publisher;
use crate::config::{self, LoadFailure};
use crate::state::StateDir;

impl Publisher {
    /// The same, keeping each good load in `state`; generations are numbered on from the last
    /// one published with it.
    pub fn with_state(mut self, state: StateDir) -> Publisher {
        self.cache.number_after(state.last_generation());
        self.history = crate::history::History::kept_in(state.dir());
        self.state = Some(state);
        self
    }

    /// At start, when the files do not load (`failure`): serve the last good copy kept in
    /// the state directory, if there is one (the failed load's report stays, saying it
    /// serves this instead: `Reports::serving`). Returns the generation serving, or `None`
    /// without a copy.
    pub fn serve_last_good(&self, failure: &LoadFailure) -> Option<u64> {
        let generation = self.publish_kept_copy()?;
        tracing::error!(
            serving_generation = generation,
            "The snapshot files do not load; serving the last good copy from --state-dir until \
             they do. {failure}"
        );
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
    pub(super) fn record_generation(&self, generation: u64) {
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

    /// Whether there is a promoted copy to keep ([`Publisher::keep_promoted`] has work): a
    /// rollout policy and a state directory.
    pub fn keeps_promoted(&self) -> bool {
        self.cache.policy().is_some() && self.state.is_some()
    }

    /// Under a rollout policy, with a state directory: keep each generation that becomes
    /// stable (promoted) there, until `shutdown`. The copy is made from the files, and kept
    /// only if they are still what was promoted.
    pub async fn keep_promoted(self: Arc<Self>, mut shutdown: crate::shutdown::Shutdown) {
        if !self.keeps_promoted() {
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
            tokio::select! {
                changed = serving.changed() => if changed.is_err() { return },
                _ = shutdown.wait() => return,
            }
        }
    }

    /// Keep `stable`'s files in the state directory, if they are still what it holds.
    async fn keep(self: &Arc<Self>, stable: &crate::cache::Generation) {
        let publisher = Arc::clone(self);
        let version = stable.config.content_version();
        let kept_copy = tokio::task::spawn_blocking(move || {
            publisher
                .state
                .as_ref()
                .map(|state| state.persist(&publisher.paths, &publisher.options, Some(&version)))
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

    /// The generation the state directory last kept a copy of (0: none yet).
    pub fn kept(&self) -> watch::Receiver<u64> {
        self.kept.subscribe()
    }
}
