//! The staged rollout's driver: reads the canaries' reports from the fleet on a timer, asks
//! `crate::rollout` what to do, and applies it to the cache (promote, or a new phase).
//!
//! Must not: decide anything itself (the decisions are `rollout::decide`'s, tested there).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::cache::Cache;
use crate::fleet::Fleet;
use crate::rollout::{decide, Decision, Observation, Phase};

/// How often the canaries' reports are read.
const TICK: Duration = Duration::from_millis(200);

/// Drive rollouts until `stop` turns true. Does nothing without a rollout policy.
pub async fn drive(cache: Arc<Cache>, fleet: Arc<Fleet>, mut stop: watch::Receiver<bool>) {
    let Some(policy) = cache.policy().cloned() else {
        return;
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let serving = cache.serving();
        let Some(rollout) = &serving.rollout else {
            continue;
        };
        let candidate = rollout.candidate.number;
        // Only the canaries' reports are copied: the rest of the fleet may be thousands.
        let canaries = fleet.reports_where(|r| policy.is_canary(&r.node_id, &r.node_cluster));
        let seen = Observation::of(&canaries, &policy, candidate);
        match decide(&rollout.phase, &seen, Instant::now(), policy.bake) {
            Decision::Stay => {}
            Decision::Promote => {
                if cache.promote().is_ok() {
                    fleet
                        .metrics
                        .rollouts
                        .get_or_create(&outcome("promoted"))
                        .inc();
                    tracing::info!(
                        generation = candidate,
                        canaries = seen.canaries,
                        "Rollout promoted: every canary took the new generation and the bake time passed without a NACK; it now goes to every node."
                    );
                }
            }
            Decision::Enter(phase) => {
                match &phase {
                    Phase::Baking { .. } => tracing::info!(
                        generation = candidate,
                        canaries = seen.canaries,
                        bake = ?policy.bake,
                        "Rollout baking: every canary has ACKed the new generation."
                    ),
                    Phase::Halted { reason } => {
                        fleet
                            .metrics
                            .rollouts
                            .get_or_create(&outcome("halted"))
                            .inc();
                        tracing::error!(
                            generation = candidate,
                            stable = serving.stable.number,
                            reason = %reason,
                            "Rollout halted: a canary rejected the new generation; the other nodes stay on the stable one (fix the files, or `switchyard rollout abort`)."
                        );
                    }
                    Phase::Canary => tracing::info!(
                        generation = candidate,
                        "Rollout waiting: a canary has not ACKed the new generation yet."
                    ),
                }
                cache.set_phase(candidate, phase);
            }
        }
    }
}

fn outcome(outcome: &'static str) -> crate::metrics::RolloutLabels {
    crate::metrics::RolloutLabels { outcome }
}
