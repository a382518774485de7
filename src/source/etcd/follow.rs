//! Following an etcd prefix (`serve --source`) incrementally: one long-lived watch from the
//! revision after the last one read, each event's put or delete applied to the documents
//! held, and the documents loaded again after each burst of changes (the loader parses only
//! the documents whose content changed). The whole prefix is read again only when the watch
//! cannot resume (its start revision was compacted away). A value that is not a document
//! (bytes that are not text, a document over the size limit) is held as it is and refused
//! by the load, naming its key, as a typo is: only etcd failing to answer makes the source
//! down.
//! While etcd does not answer, tries wait longer each time. The barrier ([`Reached`])
//! learns the revision applied and loaded.
//!
//! Must not: parse or load documents (the sink loads them) or read files.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use switchyard_etcd::EventType;
use tokio::sync::watch;

use crate::config::Document;
use crate::shutdown::Shutdown;
use crate::source::{etcd, Documents, EtcdUrl, Sink, SourceError};

/// How long one connect or read of etcd may take.
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait before trying again after a failure, and the longest.
const ETCD_RETRY_FIRST: Duration = Duration::from_millis(500);
const ETCD_RETRY_MAX: Duration = Duration::from_secs(10);

/// The follower's side of the barrier: the revision applied and loaded so far.
pub struct Progress {
    caught_up: watch::Sender<i64>,
}

/// The barrier's side: the revision the follower has applied and loaded.
pub type Reached = watch::Receiver<i64>;

impl Progress {
    /// Both sides, from `revision` (the first read, loaded before following).
    pub fn new(revision: i64) -> (Progress, Reached) {
        let (caught_up, reached) = watch::channel(revision);
        (Progress { caught_up }, reached)
    }

    /// The revision applied and loaded so far.
    pub fn at(&self) -> i64 {
        *self.caught_up.borrow()
    }

    fn reached(&self, revision: i64) {
        self.caught_up.send_if_modified(|held| {
            let moved = revision > *held;
            *held = (*held).max(revision);
            moved
        });
    }
}

/// Where a run of the follower starts.
pub enum Start {
    /// From the first read (loaded already): the watch goes on from its revision.
    Read(Documents),
    /// Again, after the follower stopped having loaded this revision: the prefix is read
    /// whole again before the watch goes on (what changed meanwhile is loaded).
    Again(i64),
}

/// The documents under the prefix as of one revision, by key, kept up to date from the
/// watch's events.
struct Held {
    /// The store's revision the documents are as of.
    revision: i64,
    documents: BTreeMap<String, Document>,
    /// The watch could not go on from `revision` (a compaction, or the follower started
    /// again): the prefix is to be read whole again.
    stale: bool,
    /// What the last apply among the events not loaded yet said of itself.
    note: Option<etcd::ApplyNote>,
    /// An apply is switching the prefix over (`etcd::switch`): nothing is loaded until it
    /// ends; `pending` when documents changed meanwhile.
    switching: bool,
    pending: bool,
}

impl Held {
    fn of(read: Documents) -> Held {
        Held {
            revision: read.revision,
            documents: read
                .documents
                .into_iter()
                .map(|d| (d.name.clone(), d))
                .collect(),
            stale: false,
            note: None,
            switching: false,
            pending: false,
        }
    }

    fn documents(&self) -> Vec<Document> {
        self.documents.values().cloned().collect()
    }
}

/// What one burst of watch responses did to the documents held.
#[derive(Debug, Default, PartialEq, Eq)]
struct Applied {
    /// Documents written or deleted.
    changed: usize,
    /// Bytes of keys and values the events carried (what was read for this change).
    bytes: usize,
}

/// Apply a watch response's events to `held` (every event of one etcd transaction comes in
/// one response, so a transaction is applied whole). Keys that are not documents
/// (Switchyard's own, `.`-named) move the revision only.
fn apply(held: &mut Held, prefix: &str, response: &switchyard_etcd::WatchResponse) -> Applied {
    let mut applied = Applied::default();
    for event in response.events() {
        let Some(kv) = event.kv() else { continue };
        held.revision = held.revision.max(kv.mod_revision());
        applied.bytes += kv.key().len() + kv.value().len();
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        if !etcd::is_document(prefix, &key) {
            // An apply's guard key: its note goes with the documents it wrote.
            if key == format!("{prefix}{}", etcd::keys::GUARD)
                && event.event_type() == EventType::Put
            {
                held.note = serde_json::from_slice(kv.value()).ok();
            }
            // A switch begins, or ends (its documents load as one change).
            if key == format!("{prefix}{}", etcd::keys::SWITCHING) {
                held.switching = event.event_type() == EventType::Put;
                held.pending |= !held.switching;
            }
            continue;
        }
        let document_name = etcd::document_name(&key);
        match event.event_type() {
            EventType::Delete => {
                held.documents.remove(&document_name);
            }
            EventType::Put => {
                held.documents
                    .insert(document_name, etcd::document(&key, kv.value()));
            }
        }
        applied.changed += 1;
    }
    applied
}

/// Follow an etcd prefix (`serve --source`) from `first`, the read first loaded: one watch
/// from the revision after it, each burst of events applied to the documents held and
/// loaded, so that an edit of one key reads that key alone. A transaction is one
/// generation. After a compaction past the watch's start the prefix is read again (content
/// hashes keep what is unchanged from being sent again). While etcd does not answer, the
/// last good generation keeps serving and the watch resumes from the last revision held,
/// until `shutdown`.
pub async fn follow(
    sink: Arc<dyn Sink>,
    source: etcd::Prefix,
    start: Start,
    progress: Arc<Progress>,
    health: crate::source::Health,
    mut shutdown: Shutdown,
) {
    let etcd::Prefix { url, access, .. } = source;
    let mut held = match start {
        Start::Read(first) => {
            health.answering(&url.display());
            Held::of(first)
        }
        Start::Again(revision) => {
            let mut held = Held::of(Documents {
                revision,
                documents: Vec::new(),
            });
            held.stale = true;
            held
        }
    };
    let prefix = url.key_prefix();
    // Whatever fails (connecting, watching, reading), the next try waits, longer each time
    // up to ETCD_RETRY_MAX: an etcd that is away is never asked in a tight loop.
    // A failure is tried again at once; one that lasts etcd::OUTAGE_AFTER is an outage.
    let mut tries = etcd::session::Retry::new(ETCD_RETRY_FIRST, ETCD_RETRY_MAX)
        .saying_after(etcd::OUTAGE_AFTER);
    let mut failed: Option<SourceError> = None;
    // The last failure's words, for the outage said while a try is under way.
    let mut last_failure = String::new();
    let say = |error: &str, revision: i64| {
        tracing::warn!(error, revision, "etcd does not answer; the last good generation keeps serving, and the watch resumes from the last revision read.");
    };
    loop {
        if let Some(e) = failed.take() {
            health.failing(&url.display(), e.to_string());
            last_failure = e.to_string();
            if tries.failed() {
                say(&last_failure, held.revision);
            } else if !tries.away() {
                tracing::debug!(error = %e, revision = held.revision, "etcd failed to answer; trying again (an outage once it lasts).");
            }
            if !tries.wait(&mut shutdown, Duration::ZERO).await {
                return;
            }
        }
        let revision = held.revision;
        let connect = etcd::connect(&url, &access, ETCD_TIMEOUT);
        let Some(connected) = meanwhile(connect, &mut shutdown, &mut tries, || {
            say(&last_failure, revision)
        })
        .await
        else {
            return;
        };
        let mut client = match connected {
            Ok(client) => client,
            Err(e) => {
                failed = Some(e);
                continue;
            }
        };
        if held.stale {
            let reading = read_again(&mut client, &url);
            let Some(read) = meanwhile(reading, &mut shutdown, &mut tries, || {
                say(&last_failure, revision)
            })
            .await
            else {
                return;
            };
            match read {
                Ok(read) => {
                    tracing::info!(
                        revision = read.revision,
                        documents = read.documents.len(),
                        "The watch could not resume: the prefix was read again."
                    );
                    held = Held::of(read);
                    if load(&sink, &mut held).await {
                        progress.reached(held.revision);
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            }
        }
        let options = switchyard_etcd::WatchOptions::new()
            .with_prefix()
            .with_start_revision(held.revision + 1);
        let mut watcher = etcd::watcher(&client);
        let watching = watcher.watch(prefix.as_str(), Some(options));
        let revision = held.revision;
        let Some(watched) = meanwhile(watching, &mut shutdown, &mut tries, || {
            say(&last_failure, revision)
        })
        .await
        else {
            return;
        };
        let stream = match watched {
            Ok(stream) => stream,
            Err(e) => {
                failed = Some(SourceError::Unavailable {
                    url: url.display(),
                    message: format!("cannot watch: {}", crate::source::etcd::words(&e)),
                });
                continue;
            }
        };
        if tries.began() {
            tracing::info!(
                revision = held.revision,
                "etcd answers again; watching from the last revision read."
            );
        }
        health.answering(&url.display());
        let mut following = Watch {
            held: &mut held,
            url: &url,
            sink: &sink,
            progress: &progress,
            worked: false,
        };
        let ended = following.follow(stream, &mut shutdown).await;
        // A watch that delivered changes worked: if it fails now (its member killed, say),
        // the next try comes after the first wait, not after the waits of earlier outages.
        if following.worked {
            tries.worked();
        }
        match ended {
            WatchEnd::Shutdown => return,
            WatchEnd::Failed(e) => failed = Some(e),
            WatchEnd::Stale => held.stale = true,
        }
    }
}

/// `work` until it is done (`None`: shutdown came first); meanwhile, once the failures
/// before it have lasted the grace, the outage is said (`say`, once), as the source's
/// health says it (a try under way can take seconds: a connect in a partition).
async fn meanwhile<T>(
    work: impl std::future::Future<Output = T>,
    shutdown: &mut Shutdown,
    tries: &mut etcd::session::Retry,
    say: impl Fn(),
) -> Option<T> {
    tokio::pin!(work);
    loop {
        let due = tries.say_by();
        let said = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait() => return None,
            done = &mut work => return Some(done),
            () = said => {
                if tries.overdue() {
                    say();
                }
            }
        }
    }
}

/// How one watch ended.
enum WatchEnd {
    Shutdown,
    /// etcd failed: try again after a wait.
    Failed(SourceError),
    /// The watch cannot resume from the revision held: read the prefix again.
    Stale,
}

/// The prefix read whole again, within [`ETCD_TIMEOUT`].
async fn read_again(
    client: &mut switchyard_etcd::Client,
    url: &EtcdUrl,
) -> Result<Documents, SourceError> {
    match tokio::time::timeout(ETCD_TIMEOUT, etcd::read(client, url)).await {
        Ok(read) => read,
        Err(_) => Err(SourceError::Unavailable {
            url: url.display(),
            message: "reading the prefix again took too long".into(),
        }),
    }
}

/// One watch being followed, and what it updates.
struct Watch<'a> {
    held: &'a mut Held,
    url: &'a EtcdUrl,
    sink: &'a Arc<dyn Sink>,
    progress: &'a Progress,
    /// It delivered events.
    worked: bool,
}

impl Watch<'_> {
    /// Follow one watch for as long as it lasts: each burst of events applied to the
    /// documents held, and handed to the sink when a document changed.
    async fn follow(
        &mut self,
        mut stream: switchyard_etcd::WatchStream,
        shutdown: &mut Shutdown,
    ) -> WatchEnd {
        let prefix = self.url.key_prefix();
        loop {
            let burst = match next_burst(&mut stream, shutdown).await {
                Burst::Shutdown => return WatchEnd::Shutdown,
                Burst::Ended => {
                    return WatchEnd::Failed(SourceError::Unavailable {
                        url: self.url.display(),
                        message: "the watch ended".into(),
                    })
                }
                Burst::Compacted => {
                    tracing::info!(
                        revision = self.held.revision,
                        "etcd compacted past the watch: the prefix is read again."
                    );
                    return WatchEnd::Stale;
                }
                Burst::Responses(responses) => responses,
            };
            self.worked = true;
            let mut applied = Applied::default();
            for response in &burst {
                let a = apply(self.held, &prefix, response);
                applied.changed += a.changed;
                applied.bytes += a.bytes;
            }
            if self.held.switching {
                // Held until the switch ends, and the barrier with it: what the prefix
                // held before the switch keeps serving.
                if !std::mem::replace(&mut self.held.pending, true) {
                    tracing::info!(
                        revision = self.held.revision,
                        "An apply is switching the prefix over in several transactions: loading nothing until it ends."
                    );
                }
                continue;
            }
            if applied.changed > 0 || std::mem::take(&mut self.held.pending) {
                self.held.pending = false;
                tracing::debug!(
                    revision = self.held.revision,
                    documents = applied.changed,
                    bytes = applied.bytes,
                    "etcd: documents changed; loading them."
                );
                if !load(self.sink, self.held).await {
                    // Not loaded (the load panicked, reported as failed): the barrier does
                    // not pass it, and the next change loads every document held again.
                    continue;
                }
            } else {
                // Documents unchanged: the note belongs to no load.
                self.held.note = None;
            }
            self.progress.reached(self.held.revision);
        }
    }
}

/// Hand the documents held to the sink (on a blocking thread: loading is CPU work), with
/// the note of the apply that wrote them, if one did. `false` when the load did not finish
/// (it panicked): reported to the sink as a failed load.
async fn load(sink: &Arc<dyn Sink>, held: &mut Held) -> bool {
    let loading = Arc::clone(sink);
    let documents = held.documents();
    let revision = held.revision;
    let note = held.note.take();
    let loaded = tokio::task::spawn_blocking(move || {
        crate::supervise::fail_point("load");
        loading.documents(&documents, revision, note)
    })
    .await;
    match loaded {
        Ok(()) => true,
        Err(e) => {
            sink.load_stopped(Some(revision), crate::source::stopped_words(e));
            false
        }
    }
}

/// What the watch gave: a burst of responses with events, or why there are none.
enum Burst {
    Responses(Vec<switchyard_etcd::WatchResponse>),
    /// The watch's start was compacted away: everything must be read again.
    Compacted,
    /// The watch ended or failed.
    Ended,
    Shutdown,
}

/// Wait for a response with events on the watch, then take every response already
/// arrived, and no more: an etcd transaction comes whole in one response (a switch's
/// several, held by `Held::switching` until it ends), so there is nothing to wait for, and
/// what arrives while the burst loads makes the next burst, loaded right after.
async fn next_burst(stream: &mut switchyard_etcd::WatchStream, shutdown: &mut Shutdown) -> Burst {
    let mut responses = Vec::new();
    loop {
        let message = tokio::select! {
            _ = shutdown.wait() => return Burst::Shutdown,
            m = stream.message() => m,
        };
        let Some(response) = message.ok().flatten() else {
            return Burst::Ended;
        };
        if response.compact_revision() > 0 {
            return Burst::Compacted;
        }
        if response.canceled() {
            return Burst::Ended;
        }
        if !response.events().is_empty() {
            tracing::debug!(
                revision = response.header().map_or(0, |h| h.revision()),
                events = response.events().len(),
                "etcd: a change arrived on the watch."
            );
            responses.push(response);
            break;
        }
    }
    // What has arrived already (polled once each, never waited for: no timer either, which
    // would wait for the timer's next tick).
    while let Some(more) = futures_util::FutureExt::now_or_never(stream.message()) {
        match more {
            Ok(Some(response)) if response.compact_revision() > 0 => return Burst::Compacted,
            Ok(Some(response)) if response.canceled() => break,
            Ok(Some(response)) => {
                if !response.events().is_empty() {
                    responses.push(response);
                }
            }
            // What arrived is applied; the end is seen on the next wait.
            Ok(None) | Err(_) => break,
        }
    }
    Burst::Responses(responses)
}
