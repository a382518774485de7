//! The staged rollout's driver: reads the canaries' reports from the fleet on a timer, sums
//! them up as an [`Observation`] ([`observe`]), asks `crate::rollout` what to do, and applies
//! it to the cache (promote, or a new phase).
//!
//! With a rollout kept in etcd for the fleet, `fleetwide::driver` drives instead.
//!
//! Must not: decide anything itself (the decisions are `rollout::decide`'s, tested there).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cache::Cache;
use crate::fleet::{Fleet, StreamReport, SyncStatus};
use crate::rollout::{decide, Decision, Observation, Phase, Policy};
use crate::shutdown::Shutdown;
use crate::telemetry::{RolloutEnd, Telemetry};

/// How often the canaries' reports are read.
const TICK: Duration = Duration::from_millis(200);

/// Whether this replica drives its own rollouts ([`drive`] has work): a rollout policy, not
/// decided for the fleet in etcd.
pub fn drives(cache: &Cache) -> bool {
    cache.policy().is_some_and(|p| !p.fleetwide)
}

/// Drive rollouts until `shutdown`. Does nothing without a rollout policy.
pub async fn drive(
    cache: Arc<Cache>,
    fleet: Arc<Fleet>,
    telemetry: Telemetry,
    mut shutdown: Shutdown,
) {
    let Some(policy) = cache.policy().cloned() else {
        return;
    };
    if policy.fleetwide {
        // Decided for the fleet in etcd (`fleetwide::driver`).
        return;
    }
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => return,
        }
        let serving = cache.serving();
        let Some(rollout) = &serving.rollout else {
            continue;
        };
        let candidate = rollout.candidate.number;
        // Only the canaries' reports are copied: the rest of the fleet may be thousands.
        let canaries = fleet.reports_where(|r| policy.is_canary(&r.node_id, &r.node_cluster));
        let seen = observe(&canaries, &policy, candidate);
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

/// From the fleet's stream reports: the canaries' view of generation `candidate`.
pub fn observe(reports: &[StreamReport], policy: &Policy, candidate: u64) -> Observation {
    let mut nodes: std::collections::BTreeMap<&str, bool> = Default::default();
    let mut nacked = None;
    for r in reports
        .iter()
        .filter(|r| policy.is_canary(&r.node_id, &r.node_cluster))
    {
        let on_candidate = r.generation >= candidate;
        let synced = nodes.entry(r.node_id.as_str()).or_insert(true);
        *synced &= on_candidate && r.synced();
        if on_candidate && nacked.is_none() {
            nacked = r
                .types
                .iter()
                .find(|(_, t)| t.state == SyncStatus::Nacked)
                .map(|(kind, t)| {
                    (
                        r.node_id.clone(),
                        kind.to_string(),
                        t.nack.as_ref().map(|n| n.error.clone()).unwrap_or_default(),
                    )
                });
        }
    }
    Observation {
        canaries: nodes.len(),
        synced: nodes.values().filter(|s| **s).count(),
        nacked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::TypeReport;
    use std::time::SystemTime;

    const BAKE: Duration = Duration::from_secs(30);

    fn report(node: &str, generation: u64, cds: &str) -> StreamReport {
        StreamReport {
            facts: std::sync::Arc::new(crate::config::selector::NodeFacts::new(node, "")),
            node_id: node.into(),
            node_cluster: String::new(),
            user_agent: "envoy".into(),
            user_agent_version: String::new(),
            client_features: vec![],
            peer: String::new(),
            stream: "ADS".into(),
            protocol: "sotw",
            connected_since: SystemTime::now(),
            types: [(
                "CDS",
                TypeReport {
                    state: SyncStatus::from_name(cds).expect("a state"),
                    version_sent: "v".into(),
                    version_acked: "v".into(),
                    nonce: "1".into(),
                    nack: (cds == "NACKED").then(|| {
                        Box::new(crate::fleet::NackReport {
                            error: "no".into(),
                            rejected_version: "v".into(),
                            rejected_changes: Vec::new(),
                            runs: None,
                        })
                    }),
                    oversized_bytes: None,
                    not_found: Default::default(),
                    last_change: SystemTime::now(),
                },
            )]
            .into_iter()
            .collect(),
            generation,
            plan: None,
            polls: None,
            unknown_types: Default::default(),
        }
    }

    #[test]
    fn observations_count_canary_nodes_on_the_candidate() {
        let policy = Policy::new(Some("canary-*".into()), None, BAKE).expect("policy");
        let reports = [
            report("canary-1", 5, "SYNCED"),
            report("canary-2", 5, "STALE"),
            report("canary-3", 4, "SYNCED"),
            report("edge-1", 4, "NACKED"),
        ];
        let seen = observe(&reports, &policy, 5);
        assert_eq!((seen.canaries, seen.synced, seen.nacked), (3, 1, None));
        // A NACK counts only on the candidate: a canary still on the old generation that
        // rejects something rejects the old config, not this rollout.
        let reports = [
            report("canary-1", 4, "NACKED"),
            report("canary-2", 5, "NACKED"),
        ];
        let seen = observe(&reports, &policy, 5);
        assert_eq!(
            seen.nacked,
            Some(("canary-2".into(), "CDS".into(), "no".into()))
        );
    }
}
