//! This replica's summary of its proxies ([`ReplicaSummary`]) as a stream of typed values for
//! the sharing of the view (`crate::sharing`): taken again when what it is made of changed
//! (a few typed inputs, compared by value; woken at once by a proxy's report, a
//! publication or a load, see [`LOOK`] for the rest), at the latest every [`REFRESH`]
//! (pollers age out with nothing moving), and when a one-off poll's hold on a gate ends;
//! while changes keep coming (a rollout in progress changes something on every ACK), at
//! most once per [`COST_SHARE`] times what taking the last one cost, and per
//! [`MIN_SPACING`]. Sent only when it differs from the last one sent but for when it was
//! taken.
//!
//! Must not: write anywhere but its channel (the sharing writes etcd), or judge other
//! replicas.

use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use super::replicas::{summarize, ReplicaSummary};
use super::Admin;
use crate::shutdown::Shutdown;

/// How often what a summary is made of is looked at when nothing woke the task: what has
/// no signal of its change (whether the source answers, the fleet's rollout, tasks down).
/// A proxy's report, a publication and a load wake it at once.
const LOOK: Duration = Duration::from_millis(200);
/// The least time between two takes: under constant change (every ACK of a rollout
/// changes a report), a summary is written at most this often.
const MIN_SPACING: Duration = Duration::from_millis(25);
/// The longest a summary goes without being taken again.
pub const REFRESH: Duration = Duration::from_secs(10);
/// A summary is taken at most once per this many times what the last one took (and per
/// [`MIN_SPACING`]): taking one copies every proxy's report, so under constant change (a
/// rollout on a large fleet) this keeps it to a twentieth of a core, while a small fleet's
/// summary follows a change at once.
const COST_SHARE: u32 = 20;

/// What a summary is made of, in a few typed values: the same values give the same
/// summary, but for pollers aging out and one-off polls' holds ending (both timed), and the
/// change a load holds (`ReplicaSummary::changed`, known once the follower's next check
/// has seen the prefix: taken with the next summary, not written on its own, which would
/// be half as many writes again under steady changes).
#[derive(Clone, Debug, PartialEq)]
struct Inputs {
    /// Every change to a proxy's report (`Fleet::changes`).
    reports: u64,
    /// The last load: when, the generation serving after it, whether good, pending, and
    /// the revision it read.
    load: Option<(SystemTime, u64, bool, bool, Option<i64>)>,
    stable: u64,
    rollout: Option<(u64, crate::cache::staged::Phase)>,
    source: Option<bool>,
    fleet: Option<(
        Option<crate::rollout::fleetwide::FleetState>,
        std::collections::BTreeMap<String, crate::rollout::fleetwide::Verdict>,
    )>,
    tasks_down: usize,
}

/// The change a load of `revision` holds: the newest write under the prefix, once the
/// sharing's follower has seen the prefix (`seen`: etcd's revision, the newest write then)
/// at or after the load with nothing written under it since.
fn changed(revision: Option<i64>, seen: Option<(i64, i64)>) -> Option<i64> {
    match (revision, seen) {
        (Some(read), Some((now, newest))) if now >= read && newest <= read => Some(newest),
        _ => None,
    }
}

impl Inputs {
    fn of(admin: &Admin) -> Inputs {
        let load = admin
            .reloader
            .last_report()
            .map(|r| (r.at, r.generation, r.ok(), r.pending, r.revision));
        let serving = admin.cache.serving();
        Inputs {
            reports: admin.fleet.changes(),
            stable: serving.stable.number,
            rollout: serving
                .rollout
                .as_ref()
                .map(|r| (r.candidate.number, r.phase.clone())),
            source: admin.source.now().map(|h| h.answering),
            fleet: admin.fleet_rollout.as_ref().map(|f| {
                let view = f.view();
                (view.shared, view.verdicts)
            }),
            tasks_down: admin.supervisor.down().len(),
            load,
        }
    }
}

/// A token of what `/status` is made of on this replica: the same token, the same status
/// but for what time changes (pollers aging out, holds ending); `super::wait` answers a
/// long poll when it differs. The inputs above, and the other replicas' summaries as read.
pub(super) fn status_token(admin: &Admin) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    format!("{:?}", Inputs::of(admin)).hash(&mut hasher);
    if let Some(replicas) = &admin.replicas {
        let view = replicas.view.borrow();
        format!(
            "{:?}{:?}{:?}",
            view.read_at,
            view.summaries,
            view.lost.is_some()
        )
        .hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

/// Take this replica's summary (`replica`, its admin API at `admin_addr`) from `admin`
/// whenever what it is made of changed, and send it on `out` when it differs, until
/// `shutdown`. `seen` is what the sharing's follower last saw of the prefix.
pub async fn summaries(
    admin: Admin,
    replica: String,
    admin_addr: String,
    seen: watch::Receiver<Option<(i64, i64)>>,
    out: watch::Sender<Option<ReplicaSummary>>,
    mut shutdown: Shutdown,
) {
    let mut look = tokio::time::interval(LOOK);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut serving = admin.cache.subscribe();
    let mut reports = admin.reloader.reports();
    // No take before this (what the last one cost, COST_SHARE times over, and MIN_SPACING).
    let mut next_take = Instant::now();
    // What the last summary was taken from, when, and when a one-off poll's hold on a gate
    // it counted ends.
    let mut taken: Option<(Inputs, Instant, Option<SystemTime>)> = None;
    loop {
        // Armed before the inputs are read: a change after the read wakes the wait below.
        let next = admin.fleet.next_change();
        serving.borrow_and_update();
        reports.borrow_and_update();
        let inputs = Inputs::of(&admin);
        let due = taken.as_ref().is_none_or(|(was, when, hold_ends)| {
            *was != inputs
                || when.elapsed() >= REFRESH
                || hold_ends.is_some_and(|end| SystemTime::now() >= end)
        });
        if due && Instant::now() >= next_take {
            // A change during the take is seen by the next loop's look at the inputs.
            drop(next);
            let began = Instant::now();
            let status = super::status_now(&admin).await;
            let standing = super::standing::replica_standing(&status);
            let mut summary = summarize(&status, &replica, standing);
            summary.admin.clone_from(&admin_addr);
            summary.changed = changed(summary.revision, *seen.borrow());
            next_take = began + (began.elapsed() * COST_SHARE).max(MIN_SPACING);
            taken = Some((inputs, Instant::now(), super::standing::holds_end(&status)));
            out.send_if_modified(|last| {
                if last
                    .as_ref()
                    .is_some_and(|said| said.same_but_time(&summary))
                {
                    return false;
                }
                *last = Some(summary);
                true
            });
            continue;
        }
        if due {
            // Too soon after the last take: at `next_take`, whatever comes meanwhile (so no
            // change need wake this task meanwhile).
            drop(next);
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep_until(next_take) => {}
            }
            continue;
        }
        // What the follower saw of the prefix (`seen`) wakes nothing: it is taken with the
        // next summary (see `Inputs`). A closed channel (the publisher or the reloader gone)
        // wakes nothing either: what is left comes at the next look.
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = next.wait() => {}
            Ok(()) = serving.changed() => {}
            Ok(()) = reports.changed() => {}
            _ = look.tick() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A publication wakes the summaries: the new one is taken as soon as MIN_SPACING since
    /// the last take allows, not at the next LOOK. On tokio's paused clock: the times are
    /// exact.
    #[tokio::test(start_paused = true)]
    async fn a_publication_is_summarized_without_waiting_for_the_next_look() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, "clusters: [{name: a, connect_timeout: 1s}]\n").expect("write");
        let cache = Arc::new(crate::cache::Cache::new());
        let telemetry = crate::telemetry::Telemetry::default();
        let reloader = Arc::new(crate::publish::Reloader::new(
            vec![dir.path().to_path_buf()],
            crate::config::LoadOptions::default(),
            Arc::clone(&cache),
            telemetry.clone(),
        ));
        reloader.reload().expect("loads");
        let admin = Admin {
            fleet: Arc::new(crate::fleet::Fleet::default()),
            cache,
            publisher: Arc::clone(reloader.publisher().expect("publishes itself")),
            reloader: Arc::clone(&reloader),
            telemetry,
            show_secrets: Default::default(),
            token: None,
            new_streams: None,
            fleet_rollout: None,
            barrier: None,
            replicas: None,
            supervisor: Default::default(),
            source: Default::default(),
        };
        let (out, mut taken) = watch::channel(None);
        let (_seen, seen) = watch::channel(None);
        let (_stop, shutdown) = crate::shutdown::channel();
        let task = tokio::spawn(summaries(
            admin,
            "r".into(),
            "127.0.0.1:1".into(),
            seen,
            out,
            shutdown,
        ));
        let generation = |n: u64| {
            move |s: &Option<ReplicaSummary>| s.as_ref().is_some_and(|s| s.generation == n)
        };
        taken.wait_for(generation(1)).await.expect("first summary");
        let start = tokio::time::Instant::now();
        std::fs::write(&file, "clusters: [{name: a, connect_timeout: 2s}]\n").expect("write");
        reloader.reload().expect("loads");
        taken.wait_for(generation(2)).await.expect("second summary");
        assert_eq!(start.elapsed(), MIN_SPACING);
        assert!(MIN_SPACING < LOOK);
        task.abort();
    }
}
