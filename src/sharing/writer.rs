//! This replica's summary under `PREFIX.replicas/NAME`, on a lease of its own: written when
//! it changed (the summaries come typed, compared by value where they are taken), written
//! again on a new lease when the lease lapsed, and said to have left at shutdown.
//!
//! A write that fails is tried again on the same lease, every [`WRITE_RETRY`], for as long as
//! the lease lives: an etcd stall shorter than the lease changes neither the lease nor the
//! summary other replicas read.
//!
//! Must not: read the other replicas' summaries (the follower does), or take the summary.

use std::time::{Duration, SystemTime};

use switchyard_etcd::{Client, PutOptions};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{within, words, Sharing, Written, LEASE_TTL, LEFT_FOR};
use crate::admin::replicas::ReplicaSummary;
use crate::shutdown::Shutdown;
use crate::source::etcd::{self, lease};
use crate::source::SourceError;

/// The wait before a write that failed is tried again (on the same lease).
const WRITE_RETRY: Duration = Duration::from_secs(1);

/// Write each summary `summaries` holds under this replica's key until `shutdown`, telling
/// `written` what was written on which lease; then write that it left.
pub(super) async fn write(
    sharing: &Sharing,
    mut summaries: watch::Receiver<Option<ReplicaSummary>>,
    written: watch::Sender<Option<Written>>,
    mut shutdown: Shutdown,
) {
    let key = sharing.key();
    let mut tries = etcd::session::Retry::new(super::RETRY_FIRST, super::RETRY_MAX)
        .saying_after(etcd::OUTAGE_AFTER);
    loop {
        let opened = tokio::select! {
            _ = shutdown.wait() => return,
            opened = open(sharing) => opened,
        };
        let (mut client, id, mut kept) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                if tries.failed() {
                    tracing::warn!(error = %e, "This replica's summary cannot be shared: etcd does not answer; it is written once etcd answers.");
                }
                if !tries.wait(&mut shutdown, Duration::ZERO).await {
                    return;
                }
                continue;
            }
        };
        tries.began();
        // On a new lease the summary is written again, whatever was written before.
        let mut due = Some(Instant::now());
        let mut failure: Option<String> = None;
        let lapsed = loop {
            if due.is_some_and(|at| at <= Instant::now()) {
                let Some(summary) = summaries.borrow_and_update().clone() else {
                    due = None;
                    continue;
                };
                match put(&mut client, &key, &summary, id).await {
                    Ok(()) => {
                        if let Some(f) = failure.take() {
                            tracing::debug!(after = %f, "This replica's summary was written again after a write failed.");
                        }
                        written.send_replace(Some(Written { summary, lease: id }));
                        due = None;
                    }
                    Err(e) if lease::gone(&e) => {
                        break lease::Lapsed::Ended {
                            what: "the summary's lease",
                            ttl: LEASE_TTL,
                        }
                    }
                    Err(e) => {
                        let why = words(&e);
                        tracing::debug!(error = %why, "Cannot write this replica's summary; trying again on the same lease.");
                        failure = Some(why);
                        due = Some(Instant::now() + WRITE_RETRY);
                    }
                }
            }
            let retry = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.wait() => {
                    // Said now, not when the lease runs out: this replica left.
                    let left = written.borrow().as_ref().map(|w| w.summary.clone()).unwrap_or_default();
                    let _ = tokio::time::timeout(Duration::from_secs(1), leave(sharing, &mut client, &key, left)).await;
                    let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(id)).await;
                    return;
                }
                lapsed = &mut kept => break lapsed,
                changed = summaries.changed() => {
                    if changed.is_err() {
                        // Nobody takes summaries any more: the daemon is stopping.
                        shutdown.wait().await;
                        return;
                    }
                    due.get_or_insert_with(Instant::now);
                }
                () = retry => {}
            }
        };
        tracing::warn!(error = %lapsed, "This replica's summary lease lapsed; the summary is written again on a new lease.");
    }
}

/// A client, and a lease of [`LEASE_TTL`] kept by a task of its own.
async fn open(sharing: &Sharing) -> Result<(Client, i64, lease::Kept), SourceError> {
    let mut client = etcd::connect(&sharing.url, &sharing.access, super::ETCD_TIMEOUT).await?;
    let granted = Instant::now();
    let id = within(client.lease_grant(LEASE_TTL))
        .await
        .map_err(|e| {
            sharing.unavailable(format!(
                "cannot take a lease for the summary: {}",
                words(&e)
            ))
        })?
        .id();
    let kept = lease::Kept::spawn(
        client.clone(),
        id,
        LEASE_TTL,
        granted,
        super::ETCD_TIMEOUT,
        "the summary's lease",
    );
    Ok((client, id, kept))
}

/// Write `summary` under `key` on lease `id`.
async fn put(
    client: &mut Client,
    key: &str,
    summary: &ReplicaSummary,
    id: i64,
) -> Result<(), switchyard_etcd::Error> {
    let value = serde_json::to_string(summary)
        .map_err(|e| switchyard_etcd::Error::InvalidArgs(format!("cannot write JSON: {e}")))?;
    within(client.put(key, value, Some(PutOptions::new().with_lease(id)))).await?;
    Ok(())
}

/// Write that this replica left, on a lease of its own of [`LEFT_FOR`].
async fn leave(
    sharing: &Sharing,
    client: &mut Client,
    key: &str,
    mut summary: ReplicaSummary,
) -> Result<(), switchyard_etcd::Error> {
    let lease = client
        .lease_grant(i64::try_from(LEFT_FOR.as_secs()).unwrap_or(i64::MAX))
        .await?
        .id();
    summary.replica.clone_from(&sharing.replica);
    summary.at = crate::fleet::format_time(SystemTime::now());
    summary.left = true;
    put(client, key, &summary, lease).await
}
