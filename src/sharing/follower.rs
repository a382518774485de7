//! Every replica's summary, followed by one watch on `PREFIX.replicas/`: read whole once,
//! then kept up to date from the watch's events, resumed from the last revision read when
//! the watch fails (read whole again only after a compaction). Beside it, two questions
//! asked of etcd every [`CHECK_EVERY`]: whether the documents moved past what this
//! replica's follower of the prefix loaded (`source_ahead`), and which other replicas have
//! not loaded the documents this one did (`behind`); a check that fails keeps its last
//! answer.
//!
//! While the summaries cannot be followed the view keeps what it last read; it is said
//! stale once that has lasted [`crate::source::etcd::OUTAGE_AFTER`] (`View::lost`).
//!
//! Must not: write to etcd, or judge the summaries.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use switchyard_etcd::{Client, EventType, WatchOptions};
use tokio::sync::watch;

use super::{read, within, words, Held, Sharing, Written, VANISHED_FOR};
use crate::admin::replicas::{Lost, ReplicaSummary, Vanished, View};
use crate::shutdown::Shutdown;
use crate::source::etcd::{self, follow::Reached};
use crate::source::{EtcdUrl, SourceError};

/// How often etcd is asked whether the documents moved past this replica's follower, and
/// which replicas have not loaded what this one did.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// What the follower keeps between sessions.
struct Following<'a> {
    sharing: &'a Sharing,
    held: Held,
    /// The revision `held` is as of (`None`: to be read whole).
    revision: Option<i64>,
    behind: Behind,
    /// etcd's revision when the prefix was found past this replica's follower.
    ahead: Option<i64>,
    /// The ahead check's last answer: (what the follower reached, etcd's revision then,
    /// the answer), reused while neither moved.
    asked: Option<(i64, i64, Option<i64>)>,
    /// Since when the summaries cannot be followed, and why.
    lost: Option<Lost>,
    /// Whether this session said another replica uses this one's name.
    twin_told: bool,
}

/// Follow every replica's summary into `view` until `shutdown`, comparing with what this
/// replica `mine` wrote; `reached` is the revision its documents' follower loaded, and
/// what it sees of the prefix (etcd's revision, the newest write then) goes to `seen`.
pub(super) async fn follow(
    sharing: &Sharing,
    mine: watch::Receiver<Option<Written>>,
    reached: Option<Reached>,
    seen: watch::Sender<Option<(i64, i64)>>,
    view: watch::Sender<View>,
    mut shutdown: Shutdown,
) {
    let mut following = Following {
        sharing,
        held: Held::new(),
        revision: None,
        behind: Behind::default(),
        ahead: None,
        asked: None,
        lost: None,
        twin_told: false,
    };
    let mut tries = etcd::session::Retry::new(super::RETRY_FIRST, super::RETRY_MAX)
        .saying_after(etcd::OUTAGE_AFTER);
    let mut session = Session {
        mine,
        reached,
        seen: &seen,
        view: &view,
    };
    loop {
        let ended = following
            .session(&mut session, &mut shutdown, &mut tries)
            .await;
        let Some(e) = ended else { return };
        let lost = following.lost.get_or_insert_with(|| Lost {
            since: std::time::Instant::now(),
            at: SystemTime::now(),
            error: String::new(),
        });
        lost.error = e.to_string();
        if tries.failed() {
            tracing::warn!(error = %e, "The fleet's view is stale: the replicas' summaries are not followed until etcd is reachable again.");
        }
        following.publish(&view, &session.mine);
        if !tries.wait(&mut shutdown, Duration::ZERO).await {
            return;
        }
    }
}

/// The channels a session reads and writes.
struct Session<'a> {
    mine: watch::Receiver<Option<Written>>,
    reached: Option<Reached>,
    seen: &'a watch::Sender<Option<(i64, i64)>>,
    view: &'a watch::Sender<View>,
}

impl Following<'_> {
    /// One session: a connection, the summaries read (if not held) and watched from the
    /// revision held, until shutdown (`None`) or a failure.
    async fn session(
        &mut self,
        session: &mut Session<'_>,
        shutdown: &mut Shutdown,
        tries: &mut etcd::session::Retry,
    ) -> Option<SourceError> {
        let url = &self.sharing.url;
        let opened = async {
            let mut client = etcd::connect(url, &self.sharing.access, super::ETCD_TIMEOUT).await?;
            let revision = match self.revision {
                Some(revision) => revision,
                None => {
                    let (held, revision) = read(&mut client, url).await?;
                    self.held = held;
                    self.revision = Some(revision);
                    revision
                }
            };
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let prefix = etcd::keys::summaries(url);
            let stream = within(etcd::watcher(&client).watch(prefix.as_str(), Some(options)))
                .await
                .map_err(|e| {
                    self.sharing
                        .unavailable(format!("cannot watch the summaries: {}", words(&e)))
                })?;
            Ok::<_, SourceError>((client, stream))
        };
        let (mut client, mut stream) = tokio::select! {
            _ = shutdown.wait() => return None,
            opened = opened => match opened {
                Ok(opened) => opened,
                Err(e) => return Some(e),
            },
        };
        if tries.began() {
            tracing::info!("The fleet's view is followed again.");
        }
        self.lost = None;
        self.publish(session.view, &session.mine);
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let prefix = etcd::keys::summaries(url);
        loop {
            tokio::select! {
                _ = shutdown.wait() => return None,
                message = stream.message() => {
                    let response = match message {
                        Ok(Some(response)) => response,
                        Ok(None) => return Some(self.sharing.unavailable("the watch on the summaries ended".into())),
                        Err(e) => return Some(self.sharing.unavailable(format!("the watch on the summaries failed: {}", words(&e)))),
                    };
                    if response.compact_revision() > 0 || response.canceled() {
                        // Read whole again.
                        self.revision = None;
                        return Some(self.sharing.unavailable("the watch on the summaries was cancelled (etcd compacted past it): they are read again".into()));
                    }
                    // The revision held is that of the last event applied: a watch resumed
                    // after a failure goes on from the one after it.
                    let last = response
                        .events()
                        .iter()
                        .filter_map(|e| e.kv().map(|kv| kv.mod_revision()))
                        .max();
                    if let Some(last) = last {
                        self.revision = Some(last.max(self.revision.unwrap_or(0)));
                    }
                    self.twin(response.events(), &session.mine);
                    apply_events(&mut self.held, changes(response.events()), &prefix);
                }
                _ = check.tick() => self.check(&mut client, session).await,
                changed = session.mine.changed() => if changed.is_err() {
                    shutdown.wait().await;
                    return None;
                },
            }
            let mine = session.mine.borrow().as_ref().map(|w| w.summary.clone());
            // A check that fails keeps its last answer (etcd may be slow a moment).
            if let Err(e) = self
                .behind
                .update(
                    &mut client,
                    url,
                    &self.held,
                    &self.sharing.replica,
                    mine.as_ref(),
                )
                .await
            {
                tracing::debug!(error = %e, "Cannot tell which replicas are behind this one now.");
            }
            self.publish(session.view, &session.mine);
        }
    }

    /// Whether the documents changed in etcd past what this replica's follower has reached
    /// (a load on its way, or held while an apply switches the prefix over); what was seen
    /// of the prefix goes to the summaries.
    async fn check(&mut self, client: &mut Client, session: &Session<'_>) {
        let Some(reached) = &session.reached else {
            return;
        };
        let loaded = *reached.borrow();
        match self.ahead(client, loaded).await {
            Ok((ahead, seen)) => {
                self.ahead = ahead;
                session.seen.send_if_modified(|s| {
                    let moved = *s != Some(seen);
                    *s = Some(seen);
                    moved
                });
            }
            Err(e) => {
                tracing::debug!(error = %e, "Cannot tell whether the documents moved past this replica's follower now.");
            }
        }
    }

    /// etcd's revision now, when the keys under the prefix changed since `loaded` (what the
    /// follower reached): a load not made yet, or held (a switch on). With it, etcd's
    /// revision now and the newest write under the prefix then (one request gives both).
    async fn ahead(
        &mut self,
        client: &mut Client,
        loaded: i64,
    ) -> Result<(Option<i64>, (i64, i64)), SourceError> {
        let url = &self.sharing.url;
        let seen = etcd::now_and_last_write(client, url).await?;
        let (now, newest) = seen;
        // Nothing written under the prefix since the load (the store's revision moves
        // with every summary written beside it): not ahead, and nothing more to ask.
        if now <= loaded || newest <= loaded {
            return Ok((None, seen));
        }
        if let Some((reached, then, answer)) = self.asked {
            if (reached, then) == (loaded, now) {
                return Ok((answer, seen));
            }
        }
        let same = etcd::unchanged_between(client, url, loaded, now).await?;
        let answer = (!same).then_some(now);
        self.asked = Some((loaded, now, answer));
        Ok((answer, seen))
    }

    /// Say, once a session, that another replica writes its summary under this replica's
    /// name (a put on this replica's key on a lease not its own).
    fn twin(&mut self, events: &[switchyard_etcd::Event], mine: &watch::Receiver<Option<Written>>) {
        if self.twin_told {
            return;
        }
        let Some(lease) = mine.borrow().as_ref().map(|w| w.lease) else {
            return;
        };
        if let Some(other) = twin(events, &self.sharing.key(), lease) {
            self.twin_told = true;
            tracing::error!(replica = %self.sharing.replica, other_admin = %other, "Another replica writes its summary under this replica's name: give each replica its own --replica-name (the fleet's view and canary verdicts are by name).");
        }
    }

    /// Send what is followed to the view.
    fn publish(&self, view: &watch::Sender<View>, mine: &watch::Receiver<Option<Written>>) {
        let summaries: Vec<ReplicaSummary> = self.held.values().map(|(s, _)| s.clone()).collect();
        let against = mine.borrow().as_ref().and_then(|w| w.summary.revision);
        view.send_if_modified(|v| {
            let now = SystemTime::now();
            let vanished = vanished(
                &v.summaries,
                &summaries,
                &v.vanished,
                &self.sharing.replica,
                now,
            );
            let next = View {
                read_at: v.read_at,
                lost: self.lost.clone(),
                against,
                behind: self.behind.names.clone(),
                source_ahead: self.ahead,
                summaries,
                vanished,
            };
            if v.read_at.is_some() && v.same_as(&next) {
                return false;
            }
            *v = View {
                read_at: Some(now),
                ..next
            };
            true
        });
    }
}

/// The other replicas that have not loaded the documents this one loaded: their last load
/// read an older revision, and the documents changed since, unless their summary, written
/// after this one's load, says they serve what this one serves. etcd's answers on whether
/// the documents changed between two revisions are kept (they do not change).
#[derive(Default)]
struct Behind {
    names: Vec<String>,
    compared: HashMap<(i64, i64), bool>,
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
        let Some((mine, loaded)) = mine.and_then(|m| Some((m, m.revision?))) else {
            self.names.clear();
            return Ok(());
        };
        let mut names = Vec::new();
        for (other, written_at) in held.values().filter(|(s, _)| s.replica != this && !s.left) {
            let revision = other.revision.unwrap_or(0);
            if revision >= loaded || (*written_at > loaded && other.version == mine.version) {
                continue;
            }
            let same = match self.compared.get(&(revision, loaded)) {
                Some(same) => *same,
                None => {
                    let same = revision > 0
                        && etcd::unchanged_between(client, url, revision, loaded).await?;
                    if self.compared.len() > 1024 {
                        self.compared.clear();
                    }
                    self.compared.insert((revision, loaded), same);
                    same
                }
            };
            if !same {
                names.push(other.replica.clone());
            }
        }
        self.names = names;
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
/// `key` (on a lease that is not this replica's `lease`), if one did: two replicas of one
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
