//! Sharing the view through etcd: this replica's summary under `PREFIX.replicas/NAME` (beside
//! the documents' prefix, as the fleet's rollout keeps its keys, so an apply's guard and the
//! documents' watch never see it, while a role granted the prefix covers it), on a lease of
//! [`LEASE_TTL`]; and every replica's summary read back each round for `/status`.
//!
//! A summary is written when it changes, and at least every [`REFRESH`] (a replica whose
//! summary is older than [`super::SILENT_AFTER`] is shown as silent). A replica that stops
//! revokes its lease; one that dies is gone when the lease ends.
//!
//! Must not: judge the summaries (`super::fleet_standing` does), or write anything but this
//! replica's summary.

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
        let mut within_session = shutdown.clone();
        loop {
            let ended = tokio::select! {
                _ = shutdown.wait() => return,
                ended = self.session(&admin, &view, &mut within_session) => ended,
            };
            let Err(e) = ended else { return };
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
        let mut client = connect(&self.url, &self.access, ETCD_TIMEOUT).await?;
        let lease = within(client.lease_grant(LEASE_TTL, None))
            .await
            .map_err(|e| unavailable(format!("cannot take a lease for the summary: {e}")))?
            .id();
        let (mut keeper, mut renewals) = within(client.lease_keep_alive(lease))
            .await
            .map_err(|e| unavailable(format!("cannot keep the summary's lease: {e}")))?;
        let key = format!("{}{}", summaries_prefix(&self.url), self.replica);
        let mut written: Option<(ReplicaSummary, Instant)> = None;
        let mut renewed = Instant::now();
        let mut round = tokio::time::interval(ROUND);
        round.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.wait() => {
                    // The summary goes now, not when the lease runs out.
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
            let summary = summarize(&super::super::status::current_status(admin), &self.replica);
            let due = written.as_ref().is_none_or(|(said, when)| {
                when.elapsed() >= REFRESH || !same_but_time(said, &summary)
            });
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
            let summaries = read(&mut client, &self.url).await?;
            view.send_replace(View {
                read_at: Some(SystemTime::now()),
                error: None,
                summaries,
            });
        }
    }
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

/// Every replica's summary, by replica; a value that does not read is skipped (a replica
/// of a newer version may add fields, never remove them).
pub async fn read(client: &mut Client, url: &EtcdUrl) -> Result<Vec<ReplicaSummary>, SourceError> {
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
    let mut summaries: Vec<ReplicaSummary> = answer
        .kvs()
        .iter()
        .filter_map(|kv| serde_json::from_slice(kv.value()).ok())
        .collect();
    summaries.sort_by(|a, b| a.replica.cmp(&b.replica));
    Ok(summaries)
}
