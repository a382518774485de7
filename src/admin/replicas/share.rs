//! Sharing the view through etcd: this replica's summary under `PREFIX.replicas/NAME` (beside
//! the documents' prefix, as the fleet's rollout keeps its keys, so an apply's guard and the
//! documents' watch never see it, while a role granted the prefix covers it), on a lease of
//! [`LEASE_TTL`]; and every replica's summary read back each round for `/status`.
//!
//! A summary is written when it changes, and at least every [`REFRESH`] (a replica whose
//! summary is older than [`super::SILENT_AFTER`] is shown as silent). A replica that stops
//! writes that it left, on a lease of [`LEFT_FOR`]; one that dies is gone when its lease
//! ends, and every replica that saw it go shows it as vanished for [`VANISHED_FOR`].
//!
//! Must not: judge the summaries (`admin::standing::fleet_standing` does), or write anything
//! but this replica's summary.

use std::time::{Duration, Instant, SystemTime};

use etcd_client::{Client, GetOptions, PutOptions};
use tokio::sync::watch;

use super::{summarize, ReplicaSummary, View};
use crate::admin::Admin;
use crate::shutdown::Shutdown;
use crate::source::etcd::{connect, Access};
use crate::source::{EtcdUrl, SourceError};

/// A replica's summary lives on a lease this long: a replica that dies leaves the view
/// within it.
pub const LEASE_TTL: i64 = 15;
/// How often the summary is taken, written if it changed, and every summary read.
const ROUND: Duration = Duration::from_secs(2);
/// The longest a summary goes unwritten while it does not change.
const REFRESH: Duration = Duration::from_secs(10);
/// How often the lease is renewed.
const KEEP_ALIVE: Duration = Duration::from_secs(5);
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a replica that stopped stays in the view as having left.
pub const LEFT_FOR: Duration = Duration::from_secs(120);
/// How long a replica whose summary went without its leaving is shown as vanished.
pub const VANISHED_FOR: Duration = Duration::from_secs(120);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// Where every replica's summary is kept: beside the prefix.
pub fn summaries_prefix(url: &EtcdUrl) -> String {
    format!("{}.replicas/", url.prefix.trim_end_matches('/'))
}

/// Shares this replica's summary and reads everyone's, until shutdown.
pub struct Sharing {
    pub url: EtcdUrl,
    pub access: Access,
    pub replica: String,
}

/// A view's sender and the admin routes' handle on it.
pub fn channel(replica: &str) -> (watch::Sender<View>, super::Replicas) {
    let (tx, view) = watch::channel(View::default());
    (
        tx,
        super::Replicas {
            this: replica.to_string(),
            view,
        },
    )
}

impl Sharing {
    /// Run until `shutdown`, taking this replica's status from `admin`, and sending what is
    /// read of every replica to `view`. While etcd does not answer, the last summaries stay
    /// in the view with the error beside them; the session is opened again, backing off.
    pub async fn run(self, admin: Admin, view: watch::Sender<View>, mut shutdown: Shutdown) {
        let mut retry = ROUND;
        loop {
            // The session sees the shutdown itself: it says this replica left before it ends.
            let began = Instant::now();
            let ended = self.session(&admin, &view, &mut shutdown).await;
            let Err(e) = ended else { return };
            // A session that lasted was not the failure the backoff was for.
            if began.elapsed() > RETRY_MAX * 3 {
                retry = ROUND;
            }
            view.send_modify(|v| v.error = Some(e.to_string()));
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(retry) => {}
            }
            retry = (retry * 2).min(RETRY_MAX);
        }
    }

    /// One session: a connection and a lease, rounds until shutdown (`Ok`) or an error.
    async fn session(
        &self,
        admin: &Admin,
        view: &watch::Sender<View>,
        shutdown: &mut Shutdown,
    ) -> Result<(), SourceError> {
        let unavailable = |message: String| SourceError::Unavailable {
            url: self.url.display(),
            message,
        };
        let opened = async {
            let mut client = connect(&self.url, &self.access, ETCD_TIMEOUT).await?;
            let lease = within(client.lease_grant(LEASE_TTL, None))
                .await
                .map_err(|e| unavailable(format!("cannot take a lease for the summary: {e}")))?
                .id();
            let kept = within(client.lease_keep_alive(lease))
                .await
                .map_err(|e| unavailable(format!("cannot keep the summary's lease: {e}")))?;
            Ok::<_, SourceError>((client, lease, kept))
        };
        let (mut client, lease, (mut keeper, mut renewals)) = tokio::select! {
            _ = shutdown.wait() => return Ok(()),
            opened = opened => opened?,
        };
        let key = format!("{}{}", summaries_prefix(&self.url), self.replica);
        let mut written: Option<(ReplicaSummary, Instant)> = None;
        // What the last summary was taken from (see [`seen`]).
        let mut looked: Option<String> = None;
        // etcd's answers on whether the documents changed between two revisions.
        let mut compared = std::collections::HashMap::new();
        let mut renewed = Instant::now();
        let mut round = tokio::time::interval(ROUND);
        round.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.wait() => {
                    // Said now, not when the lease runs out: this replica left.
                    let left = written.map(|(summary, _)| summary).unwrap_or_default();
                    let _ = tokio::time::timeout(Duration::from_secs(1), self.leave(&mut client, &key, left)).await;
                    let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await;
                    return Ok(());
                }
                renewal = renewals.message() => {
                    if !matches!(renewal, Ok(Some(_))) {
                        return Err(unavailable("the summary's lease renewals ended".into()));
                    }
                    continue;
                }
                _ = round.tick() => {}
            }
            if renewed.elapsed() >= KEEP_ALIVE {
                within(keeper.keep_alive())
                    .await
                    .map_err(|e| unavailable(format!("cannot renew the summary's lease: {e}")))?;
                renewed = Instant::now();
            }
            // The status is taken only when what it is made of may have changed (or the
            // summary is due again): an idle fleet costs a look at a few counters.
            let now_seen = seen(admin);
            let due_again = written
                .as_ref()
                .is_none_or(|(_, when)| when.elapsed() >= REFRESH);
            if due_again || looked.as_ref() != Some(&now_seen) {
                looked = Some(now_seen);
                let status = super::super::status::current_status(admin);
                let standing = crate::admin::standing::replica_standing(&status);
                let summary = summarize(&status, &self.replica, standing.name());
                let due = due_again
                    || written
                        .as_ref()
                        .is_none_or(|(said, _)| !same_but_time(said, &summary));
                if due {
                    let value = serde_json::to_string(&summary)
                        .map_err(|e| unavailable(format!("cannot write the summary: {e}")))?;
                    within(client.put(
                        key.as_str(),
                        value,
                        Some(PutOptions::new().with_lease(lease)),
                    ))
                    .await
                    .map_err(|e| unavailable(format!("cannot write the summary: {e}")))?;
                    written = Some((summary, Instant::now()));
                }
            }
            let read = read(&mut client, &self.url).await?;
            let against = written.as_ref().and_then(|(mine, _)| mine.revision);
            let behind = match (&written, against) {
                (Some((mine, _)), Some(loaded)) => {
                    self.behind(&mut client, &read, mine, loaded, &mut compared)
                        .await?
                }
                _ => Vec::new(),
            };
            // Whether the documents changed in etcd past what this replica's follower has
            // reached (a load on its way, or held while an apply switches the prefix).
            let reached = match &admin.barrier {
                Some(crate::source::Barrier::Etcd { reached, .. }) => Some(*reached.borrow()),
                _ => None,
            };
            let ahead = match reached {
                Some(reached) => self.ahead(&mut client, reached).await?,
                None => None,
            };
            let summaries: Vec<ReplicaSummary> = read.into_iter().map(|(s, _)| s).collect();
            view.send_modify(|v| {
                let now = SystemTime::now();
                v.vanished = vanished(&v.summaries, &summaries, &v.vanished, now);
                v.read_at = Some(now);
                v.error = None;
                v.against = against;
                v.behind = behind;
                v.source_ahead = ahead;
                v.summaries = summaries;
            });
        }
    }

    /// etcd's revision now, when the keys under the prefix changed since `loaded` (what the
    /// follower reached): a load not made yet, or held (a switch on).
    async fn ahead(&self, client: &mut Client, loaded: i64) -> Result<Option<i64>, SourceError> {
        let now = crate::source::etcd::current_revision(client, &self.url).await?;
        if now <= loaded {
            return Ok(None);
        }
        let same = crate::source::etcd::unchanged_between(client, &self.url, loaded, now).await?;
        Ok((!same).then_some(now))
    }

    /// The other replicas that have not loaded the documents this one loaded at `loaded`:
    /// their last load read an older revision, and the documents changed since, unless
    /// their summary, written after `loaded`, says they serve what this one serves.
    async fn behind(
        &self,
        client: &mut Client,
        read: &[(ReplicaSummary, i64)],
        mine: &ReplicaSummary,
        loaded: i64,
        compared: &mut std::collections::HashMap<(i64, i64), bool>,
    ) -> Result<Vec<String>, SourceError> {
        let mut behind = Vec::new();
        for (other, written_at) in read
            .iter()
            .filter(|(s, _)| s.replica != self.replica && !s.left)
        {
            let revision = other.revision.unwrap_or(0);
            if revision >= loaded || (*written_at > loaded && other.version == mine.version) {
                continue;
            }
            let same = match compared.get(&(revision, loaded)) {
                Some(same) => *same,
                None => {
                    let same = revision > 0
                        && crate::source::etcd::unchanged_between(
                            client, &self.url, revision, loaded,
                        )
                        .await?;
                    if compared.len() > 1024 {
                        compared.clear();
                    }
                    compared.insert((revision, loaded), same);
                    same
                }
            };
            if !same {
                behind.push(other.replica.clone());
            }
        }
        Ok(behind)
    }

    /// Write that this replica left, on a lease of its own of [`LEFT_FOR`].
    async fn leave(
        &self,
        client: &mut Client,
        key: &str,
        mut summary: ReplicaSummary,
    ) -> Result<(), etcd_client::Error> {
        let lease = client
            .lease_grant(LEFT_FOR.as_secs() as i64, None)
            .await?
            .id();
        summary.replica.clone_from(&self.replica);
        summary.at = crate::fleet::format_time(SystemTime::now());
        summary.left = true;
        let value = serde_json::to_string(&summary).unwrap_or_default();
        client
            .put(key, value, Some(PutOptions::new().with_lease(lease)))
            .await?;
        Ok(())
    }
}

/// The replicas whose summary went between `before` and `now_read` without their leaving,
/// added to those `seen` go in the last [`VANISHED_FOR`] (one that is back is not).
fn vanished(
    before: &[ReplicaSummary],
    now_read: &[ReplicaSummary],
    seen: &[super::Vanished],
    now: SystemTime,
) -> Vec<super::Vanished> {
    let present = |name: &str| now_read.iter().any(|r| r.replica == name);
    let recent = |v: &&super::Vanished| {
        humantime::parse_rfc3339(&v.since)
            .ok()
            .and_then(|since| now.duration_since(since).ok())
            .is_none_or(|age| age < VANISHED_FOR)
    };
    let mut out: Vec<super::Vanished> = seen
        .iter()
        .filter(recent)
        .filter(|v| !present(&v.replica))
        .cloned()
        .collect();
    for gone in before.iter().filter(|r| !r.left && !present(&r.replica)) {
        out.push(super::Vanished {
            replica: gone.replica.clone(),
            since: crate::fleet::format_time(now),
            proxies: gone.proxies,
        });
    }
    out
}

/// What this replica's summary is made of, in a few counters: its proxies' reports (their
/// change count), the last load, what the cache serves, whether the source answers, and the
/// fleet's rollout. The same text: the same summary, but for pollers aging out and the time
/// (both caught by the refresh).
fn seen(admin: &Admin) -> String {
    let load = admin
        .reloader
        .last_report()
        .map(|r| (r.at, r.generation, r.ok(), r.pending, r.revision));
    let serving = admin.cache.serving();
    let rollout = serving
        .rollout
        .as_ref()
        .map(|r| (r.candidate.number, r.phase.name()));
    let source = admin.reloader.source().map(|h| h.answering);
    let fleet = admin
        .fleet_rollout
        .as_ref()
        .map(|f| format!("{:?}", f.view().shared));
    format!(
        "{} {load:?} {} {rollout:?} {source:?} {fleet:?}",
        admin.fleet.changes(),
        serving.stable.number
    )
}

/// Whether two summaries say the same but for when they were taken.
fn same_but_time(a: &ReplicaSummary, b: &ReplicaSummary) -> bool {
    ReplicaSummary {
        at: String::new(),
        ..a.clone()
    } == ReplicaSummary {
        at: String::new(),
        ..b.clone()
    }
}

/// An etcd call, bounded by [`ETCD_TIMEOUT`].
async fn within<T>(
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, etcd_client::Error> {
    tokio::time::timeout(ETCD_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(etcd_client::Error::InvalidArgs(format!(
                "no answer within {}",
                humantime::format_duration(ETCD_TIMEOUT)
            )))
        })
}

/// Every replica's summary, by replica, with the revision it was written at; a value that
/// does not read is skipped (a replica of a newer version may add fields, never remove
/// them).
pub async fn read(
    client: &mut Client,
    url: &EtcdUrl,
) -> Result<Vec<(ReplicaSummary, i64)>, SourceError> {
    let prefix = summaries_prefix(url);
    let answer = within(
        crate::source::etcd::reader(client)
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
    )
    .await
    .map_err(|e| SourceError::Unavailable {
        url: url.display(),
        message: format!("cannot read the replicas' summaries: {e}"),
    })?;
    let mut summaries: Vec<(ReplicaSummary, i64)> = answer
        .kvs()
        .iter()
        .filter_map(|kv| Some((serde_json::from_slice(kv.value()).ok()?, kv.mod_revision())))
        .collect();
    summaries.sort_by(|a, b| a.0.replica.cmp(&b.0.replica));
    Ok(summaries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(name: &str, left: bool) -> ReplicaSummary {
        ReplicaSummary {
            replica: name.into(),
            proxies: 3,
            left,
            ..ReplicaSummary::default()
        }
    }

    /// A summary gone without a word is a replica vanished, shown until it is back or
    /// [`VANISHED_FOR`] has passed; one that said it left is not.
    #[test]
    fn a_summary_gone_without_leaving_is_a_vanished_replica_for_a_while() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let (a, b, c) = (summary("a", false), summary("b", false), summary("c", true));
        let only_a = std::slice::from_ref(&a);
        let gone = vanished(&[a.clone(), b.clone(), c], only_a, &[], t0);
        assert_eq!(gone.len(), 1, "{gone:?}");
        assert_eq!((gone[0].replica.as_str(), gone[0].proxies), ("b", 3));
        let later = t0 + Duration::from_secs(60);
        assert_eq!(vanished(only_a, only_a, &gone, later), gone);
        assert!(
            vanished(only_a, &[a.clone(), b], &gone, later).is_empty(),
            "back"
        );
        let past = t0 + VANISHED_FOR + Duration::from_secs(1);
        assert!(vanished(only_a, only_a, &gone, past).is_empty(), "aged out");
    }
}
