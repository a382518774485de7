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
use crate::telemetry::{RolloutEnd, Telemetry};

/// How often the canaries' reports are read.
const TICK: Duration = Duration::from_millis(200);

/// Drive rollouts until `stop` turns true. Does nothing without a rollout policy.
pub async fn drive(
    cache: Arc<Cache>,
    fleet: Arc<Fleet>,
    telemetry: Telemetry,
    mut stop: watch::Receiver<bool>,
) {
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
                    telemetry.rollout_ended(RolloutEnd::Promoted {
                        generation: candidate,
                        canaries: seen.canaries,
                    });
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
                    Phase::Halted { reason } => telemetry.rollout_ended(RolloutEnd::Halted {
                        generation: candidate,
                        stable: serving.stable.number,
                        reason,
                    }),
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
