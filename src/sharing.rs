//! Sharing the view through etcd: this replica's summary under `PREFIX.replicas/NAME` (beside
//! the documents' prefix, as the fleet's rollout keeps its keys, so an apply's guard and the
//! documents' watch never see it, while a role granted the prefix covers it), on a lease of
//! [`LEASE_TTL`]; and every replica's summary followed by one watch on that prefix.
//!
//! Liveness is the lease, never a clock: the lease is renewed by a task of its own (a slow
//! etcd call of this task cannot hold it up), and a summary whose lease ended is deleted by
//! etcd, which every watching replica sees at once. No replica compares another host's
//! clock with its own. A summary is written when what it is made of changed (this replica
//! looks at a few counters every [`LOOK`], and takes its status again at least every
//! [`REFRESH`], writing only what differs), so an idle fleet writes nothing.
//!
//! A replica that stops writes that it left, on a lease of [`LEFT_FOR`]; one that dies leaves
//! the view when its lease ends, and each replica that saw it go keeps, for
//! [`VANISHED_FOR`], which of its proxies no replica serves since (orphaned): named, but
//! holding no gate. While this replica cannot follow the summaries, its view keeps what it
//! last read, marked stale (`ReplicasStatus::stale`), with the reason in words.
//!
//! Must not: judge the summaries (`admin::standing::fleet_standing` does), or write anything
//! but this replica's summary.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use switchyard_etcd::{Client, EventType, GetOptions, PutOptions, WatchOptions};
use tokio::sync::watch;

use crate::admin::replicas::{summarize, ReplicaSummary, Replicas, Vanished, View};
use crate::admin::Admin;
use crate::shutdown::Shutdown;
use crate::source::etcd::{connect, Access};
use crate::source::{EtcdUrl, SourceError};

/// A replica's summary lives on a lease this long: a replica that dies leaves the view
/// within it.
pub const LEASE_TTL: i64 = 15;
/// How often this replica looks at what its summary is made of (a few counters, no etcd).
const LOOK: Duration = Duration::from_millis(200);
/// The longest this replica goes without taking its status again (pollers age out with no
/// counter moving); it is written only if it differs.
const REFRESH: Duration = Duration::from_secs(10);
/// How often this replica asks etcd whether the documents moved past its follower.
const AHEAD_EVERY: Duration = Duration::from_secs(2);
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a replica that stopped stays in the view as having left.
pub const LEFT_FOR: Duration = Duration::from_secs(120);
/// How long a replica whose summary went without its leaving is listed as vanished, with
/// its proxies that no replica serves since.
pub const VANISHED_FOR: Duration = Duration::from_secs(120);
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// Shares this replica's summary and follows everyone's, until shutdown.
#[derive(Clone)]
pub struct Sharing {
    pub url: EtcdUrl,
    pub access: Access,
    pub replica: String,
    /// This replica's admin address, as others reach it (set once the admin port is bound).
    pub admin_addr: String,
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

/// The summaries as this replica follows them: by replica, each with the revision it was
/// written at.
type Held = BTreeMap<String, (ReplicaSummary, i64)>;

/// Why a session with etcd ended.
enum Ended {
    Shutdown,
    Failed(SourceError),
}

impl From<SourceError> for Ended {
    fn from(e: SourceError) -> Ended {
        Ended::Failed(e)
    }
}

impl Sharing {
    /// Run until `shutdown`, taking this replica's status from `admin`, and sending what it
    /// follows of every replica to `view`. While etcd does not answer, the last summaries
    /// stay in the view, marked stale, with the reason beside them; the session is opened
    /// again, backing off.
    pub async fn run(self, admin: Admin, view: watch::Sender<View>, mut shutdown: Shutdown) {
        let mut tries = crate::source::etcd::session::Retry::new(RETRY_FIRST, RETRY_MAX);
        loop {
            // The session sees the shutdown itself: it says this replica left before it ends.
            let e = match self.session(&admin, &view, &mut shutdown, &mut tries).await {
                Ended::Shutdown => return,
                Ended::Failed(e) => e,
            };
            // Once a series of failures, as the source's follower logs an outage.
            if tries.failed() {
                tracing::warn!(error = %e, "The fleet's view is stale: the replicas' summaries are not followed until etcd is reachable again.");
            }
            view.send_modify(|v| {
                v.error = Some(e.to_string());
                v.stale = true;
            });
            if !tries.wait(&mut shutdown, Duration::ZERO).await {
                return;
            }
        }
    }

    /// One session: a connection, a lease kept alive by a task of its own, every summary
    /// read, then followed by a watch, until shutdown or an error.
    async fn session(
        &self,
        admin: &Admin,
        view: &watch::Sender<View>,
        shutdown: &mut Shutdown,
        tries: &mut crate::source::etcd::session::Retry,
    ) -> Ended {
        let unavailable = |message: String| SourceError::Unavailable {
            url: self.url.display(),
            message,
        };
        let opened = async {
            let mut client = connect(&self.url, &self.access, ETCD_TIMEOUT).await?;
            let lease = within(client.lease_grant(LEASE_TTL))
                .await
                .map_err(|e| {
                    unavailable(format!(
                        "cannot take a lease for the summary: {}",
                        words(&e)
                    ))
                })?
                .id();
            let (held, revision) = read(&mut client, &self.url).await?;
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let prefix = crate::source::etcd::keys::summaries(&self.url);
            let stream =
                within(crate::source::etcd::watcher(&client).watch(prefix.as_str(), Some(options)))
                    .await
                    .map_err(|e| {
                        unavailable(format!("cannot watch the summaries: {}", words(&e)))
                    })?;
            Ok::<_, SourceError>((client, lease, held, stream))
        };
        let (mut client, lease, mut held, mut stream) = tokio::select! {
            _ = shutdown.wait() => return Ended::Shutdown,
            opened = opened => match opened {
                Ok(opened) => opened,
                Err(e) => return Ended::Failed(e),
            },
        };
        // etcd answered: a session begins (the view is no longer stale once it is sent).
        tries.began();
        let mut lapsed = crate::source::etcd::lease::Kept::spawn(
            client.clone(),
            lease,
            LEASE_TTL,
            ETCD_TIMEOUT,
            "the summary's lease",
        );
        let key = format!(
            "{}{}",
            crate::source::etcd::keys::summaries(&self.url),
            self.replica
        );
        // What this session last wrote, when, and what its status was taken from.
        let mut written: Option<ReplicaSummary> = None;
        let mut taken: Option<(String, Instant)> = None;
        let mut behind = Behind::default();
        let mut ahead = None;
        // Whether this session said another replica uses this one's name.
        let mut twin_told = false;
        // The ahead check's last look: (etcd's revision, the newest write under the prefix
        // then), from which the change a load holds is known.
        let mut last_write: Option<(i64, i64)> = None;
        // etcd's last answer on whether the documents moved past the follower: (what the
        // follower reached, etcd's revision then, the answer), asked again only when one
        // of the two moved.
        let mut asked: Option<(i64, i64, Option<i64>)> = None;
        let mut look = tokio::time::interval(LOOK);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ahead_tick = tokio::time::interval(AHEAD_EVERY);
        ahead_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.publish(view, &held, &written, &behind, ahead);
        let ended = loop {
            tokio::select! {
                _ = shutdown.wait() => break Ended::Shutdown,
                e = &mut lapsed => break Ended::Failed(unavailable(e.to_string())),
                message = stream.message() => {
                    let response = match message {
                        Ok(Some(response)) => response,
                        Ok(None) => break Ended::Failed(unavailable("the watch on the summaries ended".into())),
                        Err(e) => break Ended::Failed(unavailable(format!("the watch on the summaries failed: {}", words(&e)))),
                    };
                    if response.compact_revision() > 0 || response.canceled() {
                        break Ended::Failed(unavailable("the watch on the summaries was cancelled (etcd compacted past it): they are read again".into()));
                    }
                    if !twin_told {
                        if let Some(other) = twin(response.events(), &key, lease) {
                            twin_told = true;
                            tracing::error!(replica = %self.replica, other_admin = %other, "Another replica writes its summary under this replica's name: give each replica its own --replica-name (the fleet's view and canary verdicts are by name).");
                        }
                    }
                    apply_events(&mut held, changes(response.events()), &crate::source::etcd::keys::summaries(&self.url));
                }
                _ = look.tick() => {
                    let now_seen = seen(admin);
                    let due = taken
                        .as_ref()
                        .is_none_or(|(seen, when)| *seen != now_seen || when.elapsed() >= REFRESH);
                    if !due {
                        continue;
                    }
                    taken = Some((now_seen, Instant::now()));
                    let status = crate::admin::status_now(admin).await;
                    let standing = crate::admin::standing::replica_standing(&status);
                    let mut summary = summarize(&status, &self.replica, standing.name());
                    summary.admin.clone_from(&self.admin_addr);
                    // The change this load holds, once the ahead check has seen the prefix
                    // at or after the load with nothing written under it since.
                    summary.changed = match (summary.revision, last_write) {
                        (Some(read), Some((now, newest))) if now >= read && newest <= read => {
                            Some(newest)
                        }
                        _ => None,
                    };
                    if written.as_ref().is_some_and(|said| same_but_time(said, &summary)) {
                        continue;
                    }
                    let value = match serde_json::to_string(&summary) {
                        Ok(value) => value,
                        Err(e) => break Ended::Failed(unavailable(format!("cannot write the summary: {e}"))),
                    };
                    let put = within(client.put(key.as_str(), value, Some(PutOptions::new().with_lease(lease)))).await;
                    if let Err(e) = put {
                        let why = crate::source::etcd::lease::write_failed("the summary's lease", LEASE_TTL, &e);
                        break Ended::Failed(unavailable(format!("cannot write the summary: {why}")));
                    }
                    written = Some(summary);
                }
                _ = ahead_tick.tick() => {
                    // Whether the documents changed in etcd past what this replica's
                    // follower has reached (a load on its way, or held while an apply
                    // switches the prefix).
                    let reached = match &admin.barrier {
                        Some(crate::source::Barrier::Etcd { reached, .. }) => Some(*reached.borrow()),
                        _ => None,
                    };
                    ahead = match reached {
                        Some(reached) => match self.ahead(&mut client, reached, &mut asked).await {
                            Ok((ahead, seen)) => {
                                // Named in the summary when it is next taken (at the latest
                                // REFRESH later): no write more per change.
                                last_write = Some(seen);
                                ahead
                            }
                            Err(e) => break Ended::Failed(e),
                        },
                        None => None,
                    };
                }
            }
            if let Err(e) = behind
                .update(
                    &mut client,
                    &self.url,
                    &held,
                    &self.replica,
                    written.as_ref(),
                )
                .await
            {
                break Ended::Failed(e);
            }
            self.publish(view, &held, &written, &behind, ahead);
        };
        if matches!(ended, Ended::Shutdown) {
            // Said now, not when the lease runs out: this replica left.
            let left = written.unwrap_or_default();
            let _ =
                tokio::time::timeout(Duration::from_secs(1), self.leave(&mut client, &key, left))
                    .await;
            let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await;
        }
        ended
    }

    /// Send what this session follows to the view.
    fn publish(
        &self,
        view: &watch::Sender<View>,
        held: &Held,
        written: &Option<ReplicaSummary>,
        behind: &Behind,
        ahead: Option<i64>,
    ) {
        let summaries: Vec<ReplicaSummary> = held.values().map(|(s, _)| s.clone()).collect();
        let against = written.as_ref().and_then(|mine| mine.revision);
        view.send_if_modified(|v| {
            let now = SystemTime::now();
            let vanished = vanished(&v.summaries, &summaries, &v.vanished, &self.replica, now);
            let next = View {
                read_at: v.read_at,
                error: None,
                stale: false,
                against,
                behind: behind.names.clone(),
                source_ahead: ahead,
                summaries,
                vanished,
            };
            let changed = !v.same_as(&next);
            if changed || v.stale || v.error.is_some() || v.read_at.is_none() {
                *v = View {
                    read_at: Some(now),
                    ..next
                };
                true
            } else {
                false
            }
        });
    }

    /// etcd's revision now, when the keys under the prefix changed since `loaded` (what the
    /// follower reached): a load not made yet, or held (a switch on).
    /// `asked` keeps the last answer, reused while neither revision moved (one range
    /// request a round, not three, on an idle fleet).
    /// With it, etcd's revision now and the newest write under the prefix then (one request
    /// gives both).
    async fn ahead(
        &self,
        client: &mut Client,
        loaded: i64,
        asked: &mut Option<(i64, i64, Option<i64>)>,
    ) -> Result<(Option<i64>, (i64, i64)), SourceError> {
        let seen = crate::source::etcd::now_and_last_write(client, &self.url).await?;
        let (now, newest) = seen;
        // Nothing written under the prefix since the load (the store's revision moves
        // with every summary written beside it): not ahead, and nothing more to ask.
        if now <= loaded || newest <= loaded {
            return Ok((None, seen));
        }
        if let Some((reached, then, answer)) = *asked {
            if (reached, then) == (loaded, now) {
                return Ok((answer, seen));
            }
        }
        let same = crate::source::etcd::unchanged_between(client, &self.url, loaded, now).await?;
        let answer = (!same).then_some(now);
        *asked = Some((loaded, now, answer));
        Ok((answer, seen))
    }

    /// Write that this replica left, on a lease of its own of [`LEFT_FOR`].
    async fn leave(
        &self,
        client: &mut Client,
        key: &str,
        mut summary: ReplicaSummary,
    ) -> Result<(), switchyard_etcd::Error> {
        let lease = client.lease_grant(LEFT_FOR.as_secs() as i64).await?.id();
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

/// The other replicas that have not loaded the documents this one loaded: their last load
/// read an older revision, and the documents changed since, unless their summary, written
/// after this one's load, says they serve what this one serves. etcd's answers on whether
/// the documents changed between two revisions are kept (they do not change).
#[derive(Default)]
struct Behind {
    names: Vec<String>,
    compared: std::collections::HashMap<(i64, i64), bool>,
}

impl Behind {
    async fn update(
        &mut self,
        client: &mut Client,
        url: &EtcdUrl,
        held: &Held,
        this: &str,
        mine: Option<&ReplicaSummary>,
    ) -> Result<(), SourceError> {
        self.names.clear();
        let Some((mine, loaded)) = mine.and_then(|m| Some((m, m.revision?))) else {
            return Ok(());
        };
        for (other, written_at) in held.values().filter(|(s, _)| s.replica != this && !s.left) {
            let revision = other.revision.unwrap_or(0);
            if revision >= loaded || (*written_at > loaded && other.version == mine.version) {
                continue;
            }
            let same = match self.compared.get(&(revision, loaded)) {
                Some(same) => *same,
                None => {
                    let same = revision > 0
                        && crate::source::etcd::unchanged_between(client, url, revision, loaded)
                            .await?;
                    if self.compared.len() > 1024 {
                        self.compared.clear();
                    }
                    self.compared.insert((revision, loaded), same);
                    same
                }
            };
            if !same {
                self.names.push(other.replica.clone());
            }
        }
        Ok(())
    }
}

/// One event of the watch on the summaries, as [`apply_events`] takes it.
enum Change<'a> {
    /// A summary written (its value, and the revision it was written at).
    Put(&'a [u8], i64),
    /// A summary's key deleted: its lease ended, or the replica that left is gone.
    Delete(&'a [u8]),
}

/// A watch response's events, as [`Change`]s.
fn changes(events: &[switchyard_etcd::Event]) -> impl Iterator<Item = Change<'_>> {
    events.iter().filter_map(|event| {
        let kv = event.kv()?;
        Some(match event.event_type() {
            EventType::Put => Change::Put(kv.value(), kv.mod_revision()),
            EventType::Delete => Change::Delete(kv.key()),
        })
    })
}

/// The admin address another replica gives in a summary it wrote under this replica's
/// `key` (on a lease that is not this session's `lease`), if one did: two replicas of one
/// name (a replica restarted under its name writes on a new lease, but its predecessor is
/// dead and writes no more).
fn twin(events: &[switchyard_etcd::Event], key: &str, lease: i64) -> Option<String> {
    events.iter().find_map(|event| {
        let kv = event.kv()?;
        if event.event_type() != EventType::Put || kv.key() != key.as_bytes() || kv.lease() == lease
        {
            return None;
        }
        let summary: ReplicaSummary = serde_json::from_slice(kv.value()).ok()?;
        (!summary.left).then(|| match summary.admin.as_str() {
            "" => "an unknown address".to_string(),
            admin => admin.to_string(),
        })
    })
}

/// Apply a watch's changes to the summaries held: a put replaces a replica's (a value that
/// does not read is skipped, as in [`read`]), a delete removes the replica its key names.
fn apply_events<'a>(held: &mut Held, changes: impl Iterator<Item = Change<'a>>, prefix: &str) {
    for change in changes {
        match change {
            Change::Put(value, revision) => {
                if let Ok(summary) = serde_json::from_slice::<ReplicaSummary>(value) {
                    held.insert(summary.replica.clone(), (summary, revision));
                }
            }
            Change::Delete(key) => {
                let key = String::from_utf8_lossy(key);
                held.remove(key.strip_prefix(prefix).unwrap_or(&key));
            }
        }
    }
}

/// The replicas that vanished, as this replica saw them: those listed in `seen` within
/// the last [`VANISHED_FOR`] that are not back, and those whose summary went between
/// `before` and `now_read` without their leaving (`this` replica's own aside).
fn vanished(
    before: &[ReplicaSummary],
    now_read: &[ReplicaSummary],
    seen: &[Vanished],
    this: &str,
    now: SystemTime,
) -> Vec<Vanished> {
    let present = |name: &str| now_read.iter().any(|r| r.replica == name);
    let recent = |v: &&Vanished| {
        humantime::parse_rfc3339(&v.since)
            .ok()
            .and_then(|since| now.duration_since(since).ok())
            .is_none_or(|age| age < VANISHED_FOR)
    };
    let mut out: Vec<Vanished> = seen
        .iter()
        .filter(recent)
        .filter(|v| !present(&v.replica))
        .cloned()
        .collect();
    let gone = before
        .iter()
        .filter(|r| !r.left && r.replica != this && !present(&r.replica));
    for gone in gone {
        if out.iter().any(|v| v.replica == gone.replica) {
            continue;
        }
        out.push(Vanished {
            replica: gone.replica.clone(),
            admin: gone.admin.clone(),
            since: crate::fleet::format_time(now),
            proxies: gone.proxies,
            nodes: gone.nodes.iter().map(|n| n.node_id.clone()).collect(),
            omitted: gone.omitted,
            orphaned: Vec::new(),
        });
    }
    out
}

/// What this replica's summary is made of, in a few counters: its proxies' reports (their
/// change count), the last load, what the cache serves, whether the source answers, and the
/// fleet's rollout. The same text: the same summary, but for pollers aging out and the time
/// (both caught by [`REFRESH`]).
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
    let source = admin.source.now().map(|h| h.answering);
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

    /// A summary gone without a word is a replica vanished, listed until it is back or
    /// [`VANISHED_FOR`] has passed (by this replica's clock alone); one that said it left
    /// is not, nor is this replica itself.
    #[test]
    fn a_summary_gone_without_leaving_is_a_vanished_replica_for_a_while() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let (a, b, c) = (summary("a", false), summary("b", false), summary("c", true));
        let only_c = std::slice::from_ref(&c);
        let gone = vanished(&[a.clone(), b.clone(), c.clone()], only_c, &[], "a", t0);
        assert_eq!(gone.len(), 1, "{gone:?}");
        assert_eq!((gone[0].replica.as_str(), gone[0].proxies), ("b", 3));
        let later = t0 + Duration::from_secs(60);
        assert_eq!(vanished(only_c, only_c, &gone, "a", later), gone);
        assert!(
            vanished(only_c, &[c.clone(), b], &gone, "a", later).is_empty(),
            "back"
        );
        let past = t0 + VANISHED_FOR + Duration::from_secs(1);
        assert!(
            vanished(only_c, only_c, &gone, "a", past).is_empty(),
            "aged out"
        );
    }

    /// A watch's puts and deletes keep the summaries held: a put replaces, a delete
    /// removes, a value that does not read is skipped.
    #[test]
    fn watch_events_keep_the_summaries_held() {
        let b = serde_json::to_string(&summary("b", false)).expect("json");
        let mut held = Held::new();
        let puts = [Change::Put(b.as_bytes(), 7), Change::Put(b"{not", 8)];
        apply_events(&mut held, puts.into_iter(), "/sy.replicas/");
        assert_eq!(held.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(held["b"].1, 7);
        let delete = [Change::Delete(b"/sy.replicas/b")];
        apply_events(&mut held, delete.into_iter(), "/sy.replicas/");
        assert!(held.is_empty(), "{held:?}");
    }
}
