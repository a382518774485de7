//! Sharing the view through etcd: this replica's summary under `PREFIX.replicas/NAME` (beside
//! the documents' prefix, as the fleet's rollout keeps its keys, so an apply's guard and the
//! documents' watch never see it, while a role granted the prefix covers it), on a lease of
//! [`LEASE_TTL`] ([`writer`]); and every replica's summary followed by one watch on that
//! prefix ([`follower`]). The summaries written come typed from `admin::summary`, which
//! takes them from this replica's status; neither half reads anything else of the daemon.
//!
//! Liveness is the lease, never a clock: the lease is renewed by a task of its own (a slow
//! etcd call of the writer cannot hold it up), tried again until the time etcd granted runs
//! out (`source::etcd::lease`), and a summary whose lease ended is deleted by etcd, which
//! every watching replica sees at once. No replica compares another host's clock with its
//! own. A summary is written when it changed, so an idle fleet writes nothing.
//!
//! A stall of etcd changes nothing: a write that fails is tried again on the same lease
//! while the lease lives, a watch that fails resumes from the last revision read, and the
//! view is said stale only once it could not be followed for
//! [`crate::source::etcd::OUTAGE_AFTER`]: while this replica cannot follow the summaries,
//! its view keeps what it last read, marked stale (`ReplicasStatus::stale`), with the reason
//! in words.
//!
//! A replica that stops writes that it left, on a lease of [`LEFT_FOR`]; one that dies leaves
//! the view when its lease ends, and each replica that saw it go keeps, for
//! [`VANISHED_FOR`], which of its proxies no replica serves since (orphaned): named, but
//! holding no gate.
//!
//! Must not: judge the summaries (`admin::standing::fleet_standing` does), take this
//! replica's status (`admin::summary`), or write anything but this replica's summary.

pub mod follower;
pub mod writer;

use std::collections::BTreeMap;
use std::time::Duration;

use switchyard_etcd::{Client, GetOptions};
use tokio::sync::watch;

use crate::admin::replicas::{ReplicaSummary, Replicas, View};
use crate::shutdown::Shutdown;
use crate::source::etcd::Access;
use crate::source::{EtcdUrl, SourceError};

/// A replica's summary lives on a lease this long: a replica that dies leaves the view
/// within it.
pub const LEASE_TTL: i64 = 15;
/// How long a replica that stopped stays in the view as having left.
pub const LEFT_FOR: Duration = Duration::from_secs(120);
/// How long a replica whose summary went without its leaving is listed as vanished, with
/// its proxies that no replica serves since.
pub const VANISHED_FOR: Duration = Duration::from_secs(120);
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// Where this replica shares its summary and follows everyone's.
#[derive(Clone)]
pub struct Sharing {
    pub url: EtcdUrl,
    pub access: Access,
    pub replica: String,
}

/// A view's sender and the admin routes' handle on it.
pub fn channel(replica: &str) -> (watch::Sender<View>, Replicas) {
    let (tx, view) = watch::channel(View::default());
    (
        tx,
        Replicas {
            this: replica.to_string(),
            view,
        },
    )
}

/// What the writer last wrote, and on which lease (the follower tells another replica
/// writing under this replica's name by its lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub summary: ReplicaSummary,
    pub lease: i64,
}

/// The summaries as this replica follows them: by replica, each with the revision it was
/// written at.
type Held = BTreeMap<String, (ReplicaSummary, i64)>;

impl Sharing {
    /// Write this replica's summaries (from `summaries`) and follow everyone's into `view`
    /// until `shutdown`. `reached` is the revision the documents' follower has loaded
    /// (whether the prefix moved past it is asked of etcd); what the follower saw of the
    /// prefix goes to `seen`.
    pub async fn run(
        self,
        summaries: watch::Receiver<Option<ReplicaSummary>>,
        reached: Option<crate::source::etcd::follow::Reached>,
        seen: watch::Sender<Option<(i64, i64)>>,
        view: watch::Sender<View>,
        shutdown: Shutdown,
    ) {
        let (written, mine) = watch::channel(None);
        tokio::join!(
            writer::write(&self, summaries, written, shutdown.clone()),
            follower::follow(&self, mine, reached, seen, view, shutdown),
        );
    }

    /// This replica's key.
    fn key(&self) -> String {
        format!(
            "{}{}",
            crate::source::etcd::keys::summaries(&self.url),
            self.replica
        )
    }

    fn unavailable(&self, message: String) -> SourceError {
        SourceError::Unavailable {
            url: self.url.display(),
            message,
        }
    }
}

/// An etcd call, bounded by [`ETCD_TIMEOUT`].
async fn within<T>(
    call: impl std::future::Future<Output = Result<T, switchyard_etcd::Error>>,
) -> Result<T, switchyard_etcd::Error> {
    tokio::time::timeout(ETCD_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(switchyard_etcd::Error::InvalidArgs(format!(
                "no answer within {}",
                humantime::format_duration(ETCD_TIMEOUT)
            )))
        })
}

/// An etcd client's error in words for people (`crate::source::etcd::words`).
fn words(e: &switchyard_etcd::Error) -> String {
    crate::source::etcd::words(e)
}

/// Every replica's summary, by replica, with the revision it was written at, and etcd's
/// revision as of the read; a value that does not read is skipped (a replica of a newer
/// version may add fields, never remove them).
pub async fn read(client: &mut Client, url: &EtcdUrl) -> Result<(Held, i64), SourceError> {
    let prefix = crate::source::etcd::keys::summaries(url);
    let answer = within(
        crate::source::etcd::reader(client)
            .get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
    )
    .await
    .map_err(|e| SourceError::Unavailable {
        url: url.display(),
        message: format!("cannot read the replicas' summaries: {}", words(&e)),
    })?;
    let revision = answer.header().map_or(0, |h| h.revision());
    let held = answer
        .kvs()
        .iter()
        .filter_map(|kv| {
            let summary: ReplicaSummary = serde_json::from_slice(kv.value()).ok()?;
            Some((summary.replica.clone(), (summary, kv.mod_revision())))
        })
        .collect();
    Ok((held, revision))
}
