//! The fleet's rollout, followed from etcd (`serve --source` with a canary policy): this
//! replica proposes each good load of the documents, reports what its canaries say, takes
//! the rollout's next step when the replicas' verdicts call for it (a compare-and-swap, so it
//! happens once), and makes its cache serve what the state says.
//!
//! One watch per replica, on the rollout's keys (never per proxy); a verdict is written only
//! when it changes; the state only when it moves.
//!
//! Must not: decide anything itself (`rollout::fleetwide` does, calling `rollout::decide`),
//! or read etcd's keys by hand (`store`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};

use super::store;
use crate::cache::Cache;
use crate::config::{Config, Document, LoadFailure};
use crate::fleet::Fleet;
use crate::publish::{Head, Heads, Publication, Publisher, Reports};
use crate::rollout::fleetwide::{
    self, FleetState, Follow, Local, Mark, NoCandidate, Stepped, Verdict,
};
use crate::rollout::Phase;
use crate::shutdown::Shutdown;
use crate::source::etcd;
use crate::source::{EtcdUrl, SourceError};
use crate::telemetry::{RolloutEnd, Telemetry};

/// How often verdicts are gathered and the next step considered.
const TICK: Duration = Duration::from_millis(250);
/// A replica's verdict lives on a lease this long: a replica that dies stops counting
/// within it.
const LEASE_TTL: i64 = 10;
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(10);
/// How long an operator's promote or abort waits for the driver.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

/// What a replica knows of the fleet's rollout, for `/status` and the page.
#[derive(Clone, Debug, Default)]
pub struct FleetView {
    /// This replica's name among the verdicts.
    pub replica: String,
    pub shared: Option<FleetState>,
    /// Every replica's verdict, by replica.
    pub verdicts: BTreeMap<String, Verdict>,
}

/// Why the driver did not do what it was to do: an operator's promote or abort, or serving
/// a generation the fleet's rollout names.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("the rollout driver has stopped")]
    Stopped,
    #[error("the fleet's rollout did not answer within {}s (etcd may not answer); the request is dropped unless it was already being written: look at `switchyard rollout status` before trying again", .0.as_secs())]
    NoAnswer(Duration),
    #[error("the fleet's rollout has not been read from etcd yet")]
    NotRead,
    #[error(transparent)]
    NoCandidate(#[from] NoCandidate),
    #[error("the fleet's rollout changed meanwhile (another replica took a step); look at it again and retry")]
    Moved,
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("the copy of revision {revision} holds {held} of its {documents} documents")]
    ShortCopy {
        revision: i64,
        held: usize,
        documents: usize,
    },
    #[error("revision {revision} does not load here: {failure}")]
    DoesNotLoad { revision: i64, failure: LoadFailure },
    #[error("loading revision {revision}: {why}")]
    LoadStopped {
        revision: i64,
        why: tokio::task::JoinError,
    },
    #[error("the documents read for revision {revision} are not what the rollout names")]
    NotNamed { revision: i64 },
}

/// `rollout promote` or `rollout abort`, sent to the driver by the admin API.
#[derive(Debug)]
struct Command {
    promote: bool,
    reply: oneshot::Sender<Result<String, DriverError>>,
    /// Past this the operator was told it timed out: it is dropped, not done late.
    deadline: tokio::time::Instant,
}

/// The admin API's way to the fleet's rollout.
#[derive(Clone, Debug)]
pub struct FleetRollout {
    commands: mpsc::Sender<Command>,
    view: watch::Receiver<FleetView>,
}

impl FleetRollout {
    /// Promote (every node gets the candidate) or abort, for the whole fleet: a message for
    /// the operator, or why not.
    pub async fn end(&self, promote: bool) -> Result<String, DriverError> {
        let deadline = tokio::time::Instant::now() + COMMAND_TIMEOUT;
        let ask = async {
            let (reply, answer) = oneshot::channel();
            self.commands
                .send(Command {
                    promote,
                    reply,
                    deadline,
                })
                .await
                .map_err(|_| DriverError::Stopped)?;
            answer.await.map_err(|_| DriverError::Stopped)?
        };
        // While etcd does not answer, the driver is reconnecting: say so rather than hang.
        tokio::time::timeout_at(deadline, ask)
            .await
            .unwrap_or(Err(DriverError::NoAnswer(COMMAND_TIMEOUT)))
    }

    /// What this replica knows of the fleet's rollout.
    pub fn view(&self) -> FleetView {
        self.view.borrow().clone()
    }
}

/// Everything the driver works with.
#[derive(Clone)]
pub struct Driver {
    pub url: EtcdUrl,
    pub access: etcd::Access,
    /// This replica's name (its verdict's key).
    pub replica: String,
    pub cache: Arc<Cache>,
    pub fleet: Arc<Fleet>,
    /// Publishes what the rollout names: under the fleet's rollout, the driver is the only
    /// one that publishes (but what serves at start, before it runs).
    pub publisher: Arc<Publisher>,
    /// The sink's reports, told when a load it handed over serves.
    pub reports: Reports,
    /// How the sink loads: the generations the rollout names are loaded the same way.
    pub options: crate::config::LoadOptions,
    /// The sink's good loads, handed over.
    pub heads: Arc<Heads>,
    pub telemetry: Telemetry,
}

/// This replica's name when the operator gives none (`serve --replica-name`): its host name
/// (a pod's name in Kubernetes), `switchyard` if it has none.
pub fn default_replica_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && replica_name_fault(h).is_none())
        .unwrap_or_else(|| "switchyard".into())
}

/// What is wrong with `name` as a replica's name, if anything: it names this replica's keys
/// in etcd (its summary, its canary verdicts), so it is 1 to 253 letters, digits, `.`, `_`
/// or `-`, not starting with `.`.
pub fn replica_name_fault(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 253 {
        return Some("a replica's name is 1 to 253 characters long");
    }
    if name.starts_with('.') {
        return Some("a replica's name does not start with `.`");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Some("a replica's name has only letters, digits, `.`, `_` and `-`");
    }
    None
}

/// The driver's channels: the admin API's handle, and the driver's ends.
pub fn channels() -> (FleetRollout, Inbox) {
    let (commands, inbox) = mpsc::channel(8);
    let (view_tx, view) = watch::channel(FleetView::default());
    (
        FleetRollout { commands, view },
        Inbox {
            commands: inbox,
            view: view_tx,
        },
    )
}

/// The driver's ends of [`channels`].
pub struct Inbox {
    commands: mpsc::Receiver<Command>,
    view: watch::Sender<FleetView>,
}

/// The driver's memory between rounds.
struct Known {
    shared: Option<FleetState>,
    /// The state key's modification revision (0: none), compared by every write.
    modified: i64,
    verdicts: BTreeMap<String, Verdict>,
    /// The content version the bake key holds, and when this replica saw it put: the bake
    /// is on while etcd keeps the key (`source::etcd::keys::bake`).
    baking: Option<(String, Instant)>,
    /// The newest good load not yet published (its config is taken when it is).
    pending: Option<Head>,
    /// Documents by content version, for the copy of what is promoted (newest last).
    documents: Vec<(String, Arc<Vec<Document>>)>,
    /// The verdict last written under the current lease.
    said: Option<Verdict>,
    /// Content versions of this replica's generations, by number.
    versions: BTreeMap<u64, String>,
    /// The last failure to follow, logged once until it changes.
    stuck: Option<String>,
    /// A generation the rollout names that this replica failed to load or publish: not tried
    /// again until its wait is over, or ever while it names the same content, when what
    /// failed cannot change by waiting (its documents do not load here).
    failing: Option<Failing>,
}

/// A generation that failed to serve, and when it is tried again.
#[derive(Debug)]
struct Failing {
    mark: Mark,
    /// `None`: not by waiting (only a change of what the rollout names).
    again_at: Option<tokio::time::Instant>,
    wait: Duration,
}

impl Failing {
    /// Whether `mark` is to be tried now.
    fn allows(failing: &Option<Failing>, mark: &Mark) -> bool {
        match failing {
            Some(f) if f.mark == *mark => f
                .again_at
                .is_some_and(|at| tokio::time::Instant::now() >= at),
            _ => true,
        }
    }

    /// `mark` failed with `e`: the next try waits twice as long as the last (from
    /// `RETRY_FIRST` up to `RETRY_MAX`), or never comes for this content when waiting
    /// cannot mend it.
    fn after(failing: Option<Failing>, mark: &Mark, e: &DriverError) -> Failing {
        let wait = match failing {
            Some(f) if f.mark == *mark => (f.wait * 2).min(RETRY_MAX),
            _ => RETRY_FIRST,
        };
        let mends_by_waiting = !matches!(
            e,
            DriverError::DoesNotLoad { .. } | DriverError::NotNamed { .. }
        );
        Failing {
            mark: mark.clone(),
            again_at: mends_by_waiting.then(|| tokio::time::Instant::now() + wait),
            wait,
        }
    }
}

impl Known {
    /// The bake key as a read found it (`None`: not there), keeping when this replica first
    /// saw it if it still holds the same candidate.
    fn read_bake(&mut self, baking: Option<String>) {
        self.baking = match (baking, self.baking.take()) {
            (Some(v), Some((was, seen))) if v == was => Some((v, seen)),
            (baking, _) => baking.map(|v| (v, Instant::now())),
        };
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Driver {
    /// Drive until `shutdown`: `start` is what was read
    /// of the rollout before serving (a driver started again after it stopped reads it
    /// again, and is handed the last good load again). The inbox is held for the run.
    pub async fn run(
        self,
        inbox: Arc<tokio::sync::Mutex<Inbox>>,
        start: store::Held,
        mut shutdown: Shutdown,
    ) {
        let mut inbox = inbox.lock().await;
        let Inbox { commands, view } = &mut *inbox;
        let mut known = Known {
            shared: start.shared,
            modified: start.modified,
            verdicts: start.verdicts,
            baking: start.baking.map(|v| (v, Instant::now())),
            pending: None,
            documents: Vec::new(),
            said: None,
            versions: BTreeMap::new(),
            stuck: None,
            failing: None,
        };
        let mut tries =
            etcd::session::Retry::new(RETRY_FIRST, RETRY_MAX).saying_after(etcd::OUTAGE_AFTER);
        let mut failed: Option<SourceError> = None;
        let mut corrupt: Option<String> = None;
        // The verdict's lease, kept across sessions while it lives: a watch that failed is
        // opened again on it (an etcd stall changes no lease).
        let mut leased: Option<(i64, etcd::lease::Kept)> = None;
        loop {
            if let Some(e) = failed.take() {
                let outage = tries.failed();
                let mut at_least = Duration::ZERO;
                if !e.is_transient() {
                    // Not etcd away: a key that does not read, which waiting does not mend.
                    // Said once per cause, not on every try.
                    let why = e.to_string();
                    if corrupt.as_ref() != Some(&why) {
                        tracing::error!(error = %e, "The fleet's rollout in etcd does not read; this replica serves what it has, and reads it again after a wait. Someone must act (the error says how).");
                        corrupt = Some(why);
                    }
                    at_least = RETRY_MAX;
                } else if outage {
                    tracing::warn!(error = %e, "The fleet's rollout cannot be read from etcd; this replica serves what it has until it can.");
                }
                if !tries.wait(&mut shutdown, at_least).await {
                    return;
                }
            }
            let session = tokio::select! {
                _ = shutdown.wait() => return,
                s = self.open(&mut known, &mut leased) => s,
            };
            let (mut client, mut stream) = match session {
                Ok(s) => s,
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            };
            let Some((lease, kept)) = leased.as_mut() else {
                continue;
            };
            let lease = *lease;
            if tries.began() {
                tracing::info!("The fleet's rollout is read from etcd again.");
                corrupt = None;
            }
            self.settle(&mut client, &mut known).await;
            view.send_replace(self.view(&known));
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let ended = loop {
                tokio::select! {
                    _ = shutdown.wait() => {
                        // The verdict goes now, not when the lease runs out.
                        let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await;
                        return;
                    }
                    message = stream.message() => {
                        let response = match message {
                            Ok(Some(r)) if r.compact_revision() == 0 && !r.canceled() => r,
                            Ok(Some(_)) => break "the watch was compacted or canceled".to_string(),
                            Ok(None) => break "the watch ended".to_string(),
                            Err(e) => break format!("the watch failed: {}", crate::source::etcd::words(&e)),
                        };
                        for event in response.events() {
                            self.saw(&mut known, event);
                        }
                    }
                    head = self.heads.next() => {
                        remember(&mut known.documents, &head.version, &head.documents);
                        known.pending = Some(head);
                    }
                    // Renewed on a task of its own, so no load or copy awaited here holds it
                    // up; lapsed, the verdict is written again on a new lease before any
                    // replica sums it.
                    lapsed = &mut *kept => {
                        tracing::warn!(error = %lapsed, "This replica's verdict lease lapsed; the fleet's rollout is read again and the verdict written on a new lease.");
                        leased = None;
                        break lapsed.to_string();
                    }
                    command = commands.recv() => {
                        let Some(command) = command else { return };
                        // One the operator was told timed out (asked while etcd was away) is
                        // not done late.
                        if tokio::time::Instant::now() < command.deadline {
                            let answer = self.end(&mut client, &mut known, command.promote).await;
                            let _ = command.reply.send(answer);
                        }
                    }
                    _ = tick.tick() => {
                        match self.report(&mut client, &mut known, lease).await {
                            Ok(()) => {}
                            Err(store::VerdictNotWritten::LeaseGone(lapsed)) => {
                                tracing::warn!(error = %lapsed, "This replica's verdict lease lapsed; the fleet's rollout is read again and the verdict written on a new lease.");
                                leased = None;
                                break lapsed.to_string();
                            }
                            // Tried again on the next tick, on the same lease.
                            Err(e) => tracing::debug!(error = %e, "Cannot write this replica's verdict now; trying again."),
                        }
                        self.decide(&mut client, &mut known).await;
                    }
                }
                self.settle(&mut client, &mut known).await;
                view.send_replace(self.view(&known));
            };
            failed = Some(SourceError::Unavailable {
                url: self.url.display(),
                message: ended,
            });
        }
    }

    fn view(&self, known: &Known) -> FleetView {
        FleetView {
            replica: self.replica.clone(),
            shared: known.shared.clone(),
            verdicts: known.verdicts.clone(),
        }
    }

    /// Connect, take a lease unless one is `leased` and lives, read the rollout, and watch
    /// it from the next revision.
    async fn open(
        &self,
        known: &mut Known,
        leased: &mut Option<(i64, etcd::lease::Kept)>,
    ) -> Result<(switchyard_etcd::Client, switchyard_etcd::WatchStream), SourceError> {
        let unavailable = |message: String| SourceError::Unavailable {
            url: self.url.display(),
            message,
        };
        let mut client = etcd::connect(&self.url, &self.access, ETCD_TIMEOUT).await?;
        if leased
            .as_mut()
            .is_some_and(|(_, kept)| kept.lapsed().is_some())
        {
            *leased = None;
        }
        if leased.is_none() {
            let granted = tokio::time::Instant::now();
            let lease = tokio::time::timeout(ETCD_TIMEOUT, client.lease_grant(LEASE_TTL))
                .await
                .map_err(|_| unavailable("cannot take a lease: no answer in time".into()))?
                .map_err(|e| {
                    unavailable(format!(
                        "cannot take a lease: {}",
                        crate::source::etcd::words(&e)
                    ))
                })?
                .id();
            let kept = etcd::lease::Kept::spawn(
                client.clone(),
                lease,
                LEASE_TTL,
                granted,
                ETCD_TIMEOUT,
                "the verdict's lease",
            );
            *leased = Some((lease, kept));
        }
        let held = store::read(&mut client, &self.url).await?;
        known.shared = held.shared;
        known.modified = held.modified;
        known.verdicts = held.verdicts;
        known.read_bake(held.baking);
        known.said = None;
        let options = switchyard_etcd::WatchOptions::new()
            .with_prefix()
            .with_start_revision(held.revision + 1);
        let stream = client
            .watch(etcd::keys::rollout(&self.url), Some(options))
            .await
            .map_err(|e| {
                unavailable(format!(
                    "cannot watch the rollout: {}",
                    crate::source::etcd::words(&e)
                ))
            })?;
        Ok((client, stream))
    }

    /// A change to the rollout's keys.
    fn saw(&self, known: &mut Known, event: &switchyard_etcd::Event) {
        let Some(kv) = event.kv() else { return };
        let deleted = event.event_type() == switchyard_etcd::EventType::Delete;
        if kv.key() == etcd::keys::rollout_state(&self.url).as_bytes() {
            if deleted {
                known.shared = None;
                known.modified = 0;
            } else {
                match store::decode_state(&self.url, kv.value()) {
                    Ok(shared) => {
                        known.shared = Some(shared);
                        known.modified = kv.mod_revision();
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "The fleet's rollout state does not read; following what was read before.")
                    }
                }
            }
        } else if kv.key() == etcd::keys::bake(&self.url).as_bytes() {
            // Deleted: its lease ended, the bake is over (etcd's word, not a clock's).
            known.baking = (!deleted).then(|| {
                (
                    String::from_utf8_lossy(kv.value()).into_owned(),
                    Instant::now(),
                )
            });
        } else if let Some(replica) = store::replica_of(&self.url, kv.key()) {
            if deleted {
                known.verdicts.remove(&replica);
            } else if let Ok(verdict) = serde_json::from_slice::<Verdict>(kv.value()) {
                known.verdicts.insert(replica, verdict);
            }
        }
    }

    /// Propose the newest good load, then make the cache serve what the state says.
    async fn settle(&self, client: &mut switchyard_etcd::Client, known: &mut Known) {
        if let Some(head) = &known.pending {
            let mark = Mark {
                revision: head.revision,
                version: head.version.clone(),
            };
            let shared = known.shared.as_ref();
            let count = head.documents.len();
            let proposed = match &head.now {
                Some(by) => fleetwide::promote_now(shared, &mark, count, now_ms(), by.clone()),
                None => fleetwide::propose(shared, &mark, count, now_ms()),
            };
            if let Some(mut next) = proposed {
                let documents = Arc::clone(&head.documents);
                // The first state, and a rollback --now, promote this load: its copy is
                // written before the state names it.
                let now = head.now.is_some();
                let promotes = known.shared.is_none() || now;
                let copied = if promotes {
                    next.documents = documents.len();
                    store::copy_stable(client, &self.url, mark.revision, &documents).await
                } else {
                    Ok(())
                };
                match copied {
                    Ok(()) => {
                        if self.write(client, known, next).await && now {
                            tracing::warn!(replica = %self.replica, revision = mark.revision, "Promoted for the fleet at once: rollback --now skips the canaries and the bake.");
                            let _ = store::drop_copies(client, &self.url, mark.revision).await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Cannot propose the new revision to the fleet's rollout yet.")
                    }
                }
            }
        }
        let Some(shared) = known.shared.clone() else {
            return;
        };
        let local = self.local(known);
        let bake_left = self.bake_left(known, &shared);
        let steps = fleetwide::follow(&local, &shared, Instant::now(), bake_left);
        for step in steps {
            let publishing = match &step {
                Follow::Publish(mark) => Some(mark.clone()),
                _ => None,
            };
            // A generation that failed waits for its next try (or for other content).
            if let Some(mark) = publishing.as_ref() {
                if !Failing::allows(&known.failing, mark) {
                    return;
                }
            }
            if let Err(e) = self.take(client, known, &shared, step).await {
                if let Some(mark) = publishing.as_ref() {
                    known.failing = Some(Failing::after(known.failing.take(), mark, &e));
                }
                // Said once per reason, not on every try.
                let why = e.to_string();
                if known.stuck.as_ref() != Some(&why) {
                    let again = match known.failing.as_ref().map(|f| f.again_at.map(|_| f.wait)) {
                        Some(Some(wait)) => {
                            format!("trying again in {}", humantime::format_duration(wait))
                        }
                        Some(None) => {
                            "trying again once the rollout names other content".to_string()
                        }
                        None => "trying again".to_string(),
                    };
                    tracing::error!(error = %e, again = %again, "Cannot serve what the fleet's rollout says yet; serving what this replica has.");
                    known.stuck = Some(why);
                }
                return;
            }
            if publishing.is_some() {
                known.failing = None;
            }
        }
        known.stuck = None;
        // The last load this replica made serves (as published here, or read by another
        // replica first): its report names the generation it serves as.
        if let Some(head) = &known.pending {
            let serving = self.cache.serving();
            let generation = std::iter::once(&serving.stable)
                .chain(serving.rollout.as_ref().map(|r| &r.candidate))
                .find(|g| known.versions.get(&g.number) == Some(&head.version));
            if let Some(generation) = generation {
                self.reports.loaded_as(head.revision, generation.number);
            }
        }
    }

    /// Write `next` over the state read; on success it is what is known.
    async fn write(
        &self,
        client: &mut switchyard_etcd::Client,
        known: &mut Known,
        next: FleetState,
    ) -> bool {
        match store::write_state(client, &self.url, &next, known.modified).await {
            Ok(Some(modified)) => {
                known.shared = Some(next);
                known.modified = modified;
                true
            }
            // Another replica wrote first: its state arrives on the watch; read it now, so
            // that the next try starts from it rather than writing against a stale one.
            Ok(None) => {
                if let Ok(held) = store::read(client, &self.url).await {
                    if held.modified >= known.modified {
                        known.shared = held.shared;
                        known.modified = held.modified;
                        // The bake as of the same read: a state read ahead of the watch
                        // must not be judged without the bake key the watch has not brought.
                        known.read_bake(held.baking);
                    }
                }
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "Cannot write the fleet's rollout.");
                false
            }
        }
    }

    /// What is left of the candidate's bake as far as etcd says: `None` once its bake key is
    /// gone (or holds another candidate); while it is there, the policy's bake less the
    /// time since this replica saw it put, at least a tick (the key's deletion ends it).
    fn bake_left(&self, known: &Known, shared: &FleetState) -> Option<Duration> {
        let candidate = shared.candidate.as_ref()?;
        let (version, seen) = known.baking.as_ref()?;
        (*version == candidate.mark.version).then(|| {
            let bake = self.cache.policy().map_or(Duration::ZERO, |p| p.bake);
            bake.saturating_sub(seen.elapsed()).max(TICK)
        })
    }

    /// What this replica's cache serves, by content version.
    fn local(&self, known: &mut Known) -> Local {
        let serving = self.cache.serving();
        let mut version = |g: &Arc<crate::cache::Generation>| {
            known
                .versions
                .entry(g.number)
                .or_insert_with(|| g.config.content_version())
                .clone()
        };
        let stable = version(&serving.stable);
        let candidate = serving
            .rollout
            .as_ref()
            .map(|r| (version(&r.candidate), r.phase.name()));
        // Only the generations in use are remembered.
        let keep = [
            Some(serving.stable.number),
            serving.rollout.as_ref().map(|r| r.candidate.number),
        ];
        known.versions.retain(|n, _| keep.contains(&Some(*n)));
        Local { stable, candidate }
    }

    /// One change to the cache.
    async fn take(
        &self,
        client: &mut switchyard_etcd::Client,
        known: &mut Known,
        shared: &FleetState,
        step: Follow,
    ) -> Result<(), DriverError> {
        let serving = self.cache.serving();
        match step {
            Follow::Publish(mark) => {
                let (config, work) = self.config_of(client, known, shared, &mark).await?;
                // Publishing diffs the configurations for the history and may copy the
                // files: a blocking thread's work.
                let publisher = Arc::clone(&self.publisher);
                let revision = mark.revision;
                let from = Publication {
                    revision: Some(revision),
                    note: self.heads.note_of(revision),
                    work,
                };
                let generation =
                    tokio::task::spawn_blocking(move || publisher.publish_named(config, from))
                        .await
                        .map_err(|why| DriverError::LoadStopped { revision, why })?;
                tracing::info!(
                    generation,
                    revision = mark.revision,
                    stable = mark == shared.stable,
                    "Serving a generation the fleet's rollout names."
                );
            }
            Follow::Promote => {
                if let Ok(generation) = self.cache.promote() {
                    self.telemetry.rollout_ended(RolloutEnd::Promoted {
                        generation,
                        canaries: fleetwide::sum(known.verdicts.values(), &shared.stable.version)
                            .canaries,
                    });
                }
            }
            Follow::Abort => {
                if let Ok(generation) = self.cache.abort() {
                    self.telemetry.rollout_ended(RolloutEnd::ByOperator {
                        generation,
                        promote: false,
                    });
                }
            }
            Follow::Phase(phase) => {
                let Some(rollout) = &serving.rollout else {
                    return Ok(());
                };
                match &phase {
                    Phase::Halted { reason } => self.telemetry.rollout_ended(RolloutEnd::Halted {
                        generation: rollout.candidate.number,
                        stable: serving.stable.number,
                        reason,
                    }),
                    Phase::Baking { .. } => tracing::info!(
                        generation = rollout.candidate.number,
                        "Rollout baking: every canary in the fleet has ACKed the new generation."
                    ),
                    Phase::Canary => {}
                }
                self.cache.set_phase(rollout.candidate.number, phase);
            }
        }
        Ok(())
    }

    /// The configuration of `mark`: the pending load if it is that one, else its documents
    /// (the promoted copy for the stable generation, the revision for a candidate) loaded
    /// and checked to be that content.
    async fn config_of(
        &self,
        client: &mut switchyard_etcd::Client,
        known: &mut Known,
        shared: &FleetState,
        mark: &Mark,
    ) -> Result<(Config, crate::config::LoadWork), DriverError> {
        if let Some(head) = known.pending.as_mut().filter(|h| h.version == mark.version) {
            if let Some(config) = head.config.take() {
                return Ok((config, head.work));
            }
        }
        let documents = self.documents_of(client, known, shared, mark).await?;
        let options = self.options.clone();
        let loading = Arc::clone(&documents);
        let revision = mark.revision;
        let loaded =
            tokio::task::spawn_blocking(move || crate::config::load_documents(&loading, &options))
                .await
                .map_err(|why| DriverError::LoadStopped { revision, why })?
                .map_err(|failure| DriverError::DoesNotLoad { revision, failure })?;
        if loaded.content_version() != mark.version {
            return Err(DriverError::NotNamed { revision });
        }
        // Loaded from nothing: every document parsed.
        let work = crate::config::LoadWork {
            parsed: documents.len(),
            reused: 0,
        };
        Ok((loaded, work))
    }

    /// The documents of `mark`: remembered, or read (the promoted copy for the stable
    /// generation, else the documents at its revision).
    async fn documents_of(
        &self,
        client: &mut switchyard_etcd::Client,
        known: &mut Known,
        shared: &FleetState,
        mark: &Mark,
    ) -> Result<Arc<Vec<Document>>, DriverError> {
        if let Some((_, documents)) = known.documents.iter().find(|(v, _)| *v == mark.version) {
            return Ok(Arc::clone(documents));
        }
        let documents = if *mark == shared.stable {
            let copy = store::read_copy(client, &self.url, mark.revision).await?;
            if copy.len() != shared.documents {
                return Err(DriverError::ShortCopy {
                    revision: mark.revision,
                    held: copy.len(),
                    documents: shared.documents,
                });
            }
            copy
        } else {
            etcd::read_at(client, &self.url, Some(mark.revision))
                .await?
                .documents
        };
        let documents = Arc::new(documents);
        remember(&mut known.documents, &mark.version, &documents);
        Ok(documents)
    }

    /// Write this replica's verdict on the candidate the state names, if it changed.
    async fn report(
        &self,
        client: &mut switchyard_etcd::Client,
        known: &mut Known,
        lease: i64,
    ) -> Result<(), store::VerdictNotWritten> {
        let mut verdict = Verdict::default();
        if let (Some(policy), Some(candidate)) = (
            self.cache.policy(),
            known.shared.as_ref().and_then(|s| s.candidate.as_ref()),
        ) {
            // This replica's canaries count even before it serves the candidate (they have
            // not taken it yet, so the fleet waits for them).
            let serving = self.cache.serving();
            let number = serving
                .rollout
                .as_ref()
                .filter(|r| {
                    known.versions.get(&r.candidate.number) == Some(&candidate.mark.version)
                })
                .map_or(u64::MAX, |r| r.candidate.number);
            let canaries = self
                .fleet
                .reports_where(|r| policy.is_canary(&r.node_id, &r.node_cluster));
            let seen = crate::rollout::replica::observe(&canaries, policy, number);
            verdict = Verdict {
                candidate: candidate.mark.version.clone(),
                canaries: seen.canaries,
                synced: seen.synced,
                nacked: seen.nacked,
            };
        }
        if known.said.as_ref() == Some(&verdict) {
            return Ok(());
        }
        store::put_verdict(
            client,
            &self.url,
            &self.replica,
            &verdict,
            (lease, LEASE_TTL),
        )
        .await?;
        known.verdicts.insert(self.replica.clone(), verdict.clone());
        known.said = Some(verdict);
        Ok(())
    }

    /// Take the rollout's next step if the fleet's verdicts call for one.
    async fn decide(&self, client: &mut switchyard_etcd::Client, known: &mut Known) {
        let Some(shared) = known.shared.clone() else {
            return;
        };
        let Some(candidate) = &shared.candidate else {
            return;
        };
        let seen = fleetwide::sum(known.verdicts.values(), &candidate.mark.version);
        let bake = self.cache.policy().map_or(Duration::ZERO, |p| p.bake);
        let Some((mut next, stepped)) = fleetwide::step(
            &shared,
            &seen,
            Instant::now(),
            now_ms(),
            self.bake_left(known, &shared),
            bake,
        ) else {
            return;
        };
        if let Stepped::Entered(Phase::Baking { .. }) = stepped {
            // The bake's end is etcd's to say: its key goes on a lease before the state
            // names the phase.
            if let Err(e) =
                store::begin_bake(client, &self.url, &candidate.mark.version, bake).await
            {
                tracing::warn!(error = %e, "Cannot begin the bake yet.");
                return;
            }
            if bake >= Duration::from_secs(1) {
                known.baking = Some((candidate.mark.version.clone(), Instant::now()));
            }
        }
        if stepped == Stepped::Promoted {
            if let Err(e) = self.copy(client, known, &shared, &mut next).await {
                tracing::warn!(error = %e, "Cannot promote yet: the promoted documents cannot be copied.");
                return;
            }
        }
        if self.write(client, known, next).await {
            let step = match &stepped {
                Stepped::Promoted => "PROMOTED",
                Stepped::Entered(phase) => phase.name(),
            };
            tracing::info!(replica = %self.replica, step, revision = candidate.mark.revision, "Took the fleet's rollout a step.");
            if stepped == Stepped::Promoted {
                let _ = store::drop_copies(client, &self.url, candidate.mark.revision).await;
            }
        }
    }

    /// Copy the candidate's documents before a state that promotes it is written.
    async fn copy(
        &self,
        client: &mut switchyard_etcd::Client,
        known: &mut Known,
        shared: &FleetState,
        next: &mut FleetState,
    ) -> Result<(), DriverError> {
        let mark = next.stable.clone();
        let documents = self.documents_of(client, known, shared, &mark).await?;
        store::copy_stable(client, &self.url, mark.revision, &documents).await?;
        next.documents = documents.len();
        Ok(())
    }

    /// An operator's promote or abort, for the fleet.
    async fn end(
        &self,
        client: &mut switchyard_etcd::Client,
        known: &mut Known,
        promote: bool,
    ) -> Result<String, DriverError> {
        let shared = known.shared.clone().ok_or(DriverError::NotRead)?;
        let mut next = fleetwide::end(&shared, promote, now_ms())?;
        if promote {
            self.copy(client, known, &shared, &mut next).await?;
        }
        let revision = next.stable.revision;
        let candidate = shared.candidate.as_ref().map_or(0, |c| c.mark.revision);
        if !self.write(client, known, next).await {
            return Err(DriverError::Moved);
        }
        if promote {
            let _ = store::drop_copies(client, &self.url, revision).await;
            Ok(format!(
                "rollout promoted for the fleet: revision {revision} serves every node on every replica"
            ))
        } else {
            Ok(format!(
                "rollout aborted for the fleet: the canaries on every replica go back to revision {revision}; revision {candidate} is not proposed again"
            ))
        }
    }
}

/// What is read of the fleet's rollout before serving: the state, and the documents of
/// the generations it names (the promoted copy; the candidate's revision, while etcd keeps
/// it).
#[derive(Debug, Default)]
pub struct FleetStart {
    pub held: store::Held,
    pub stable: Option<Vec<Document>>,
    pub candidate: Option<Vec<Document>>,
}

/// Read the fleet's rollout at start. A state whose promoted copy cannot be read is an error:
/// a replica must not serve every node what was never promoted.
pub async fn read_start(
    client: &mut switchyard_etcd::Client,
    url: &EtcdUrl,
) -> Result<FleetStart, SourceError> {
    let held = store::read(client, url).await?;
    let Some(shared) = held.shared.clone() else {
        return Ok(FleetStart {
            held,
            ..FleetStart::default()
        });
    };
    let copy = store::read_copy(client, url, shared.stable.revision).await?;
    if copy.len() != shared.documents {
        return Err(SourceError::Unavailable {
            url: url.display(),
            message: format!(
                "the rollout kept in etcd promoted revision {}, but its copy ({}) holds {} of                  its {} documents",
                shared.stable.revision,
                etcd::keys::stable(url, shared.stable.revision),
                copy.len(),
                shared.documents
            ),
        });
    }
    let candidate = match &shared.candidate {
        Some(c) => etcd::read_at(client, url, Some(c.mark.revision))
            .await
            .ok()
            .map(|s| s.documents),
        None => None,
    };
    Ok(FleetStart {
        held,
        stable: Some(copy),
        candidate,
    })
}

/// Remember the documents of content `version` (the newest four).
fn remember(
    memory: &mut Vec<(String, Arc<Vec<Document>>)>,
    version: &str,
    documents: &Arc<Vec<Document>>,
) {
    memory.retain(|(v, _)| v != version);
    memory.push((version.to_string(), Arc::clone(documents)));
    if memory.len() > 4 {
        memory.remove(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(revision: i64) -> Mark {
        Mark {
            revision,
            version: format!("v{revision}"),
        }
    }

    /// A generation that failed is tried again after a wait that doubles (etcd did not
    /// answer), or not at all while the rollout names the same content (its documents do
    /// not load here: waiting mends nothing); other content is tried at once.
    #[tokio::test(start_paused = true)]
    async fn a_failing_generation_waits_for_its_next_try_or_for_other_content() {
        let away = DriverError::Source(SourceError::Unavailable {
            url: "etcd://x/sy".into(),
            message: "etcd does not answer".into(),
        });
        let mut failing = Some(Failing::after(None, &mark(5), &away));
        assert!(!Failing::allows(&failing, &mark(5)), "not at once");
        assert!(Failing::allows(&failing, &mark(6)), "other content at once");
        tokio::time::advance(RETRY_FIRST).await;
        assert!(Failing::allows(&failing, &mark(5)), "after the first wait");
        failing = Some(Failing::after(failing, &mark(5), &away));
        tokio::time::advance(RETRY_FIRST).await;
        assert!(!Failing::allows(&failing, &mark(5)), "the wait doubled");
        tokio::time::advance(RETRY_FIRST).await;
        assert!(Failing::allows(&failing, &mark(5)));

        let bad = DriverError::NotNamed { revision: 5 };
        let failing = Some(Failing::after(failing, &mark(5), &bad));
        tokio::time::advance(RETRY_MAX * 10).await;
        assert!(
            !Failing::allows(&failing, &mark(5)),
            "never again for the same content"
        );
        assert!(Failing::allows(&failing, &mark(7)));
    }
}
