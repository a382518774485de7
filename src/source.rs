//! Where snapshot documents come from, and how they are followed. Two kinds:
//! - the `--config` files ([`files`]): watched with notify, gathered, and loaded again by
//!   the sink (the position is the generation the load publishes);
//! - an etcd prefix ([`etcd`]), `--source etcd://HOST:PORT[,HOST:PORT...]/PREFIX`: each key
//!   under `PREFIX/` holds one snapshot document in the files' format, named by its key;
//!   keys whose name starts with `.` are Switchyard's own (as hidden entries of a directory
//!   are skipped), never documents. Read at one revision first, then followed by one watch
//!   ([`etcd::follow`]); the position is the store's revision.
//!
//! [`Source`] is the choice between them. Each kind owns its first read, its following, its
//! health and its errors, and hands what it read to a [`Sink`] (`publish::Reloader`, which
//! loads it and hands a good load to whoever publishes).
//! Must not: parse or judge documents (`config` does), publish or serve them.

pub mod etcd;
pub mod files;

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Document;
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// Where the snapshot documents come from: `--config` or `--source`.
#[derive(Clone, Debug)]
pub enum Source {
    /// The files and directories named (`--config`). The sink's loader reads them (a
    /// document may name files of its own, `switchyard_files`); [`files::Watching`] follows
    /// them, armed before the first load.
    Files(Vec<PathBuf>),
    /// An etcd prefix (`--source`): read first by [`etcd::Prefix::read_first`], then followed
    /// by one watch from that read ([`etcd::follow`]).
    Etcd(etcd::Prefix),
}

impl Default for Source {
    /// No files: what a test that loads by hand starts from.
    fn default() -> Source {
        Source::Files(Vec::new())
    }
}

impl Source {
    /// The files a load reads (none from etcd).
    pub fn paths(&self) -> &[PathBuf] {
        match self {
            Source::Files(paths) => paths,
            Source::Etcd(_) => &[],
        }
    }
}

/// How far a source has been read and loaded: the files' read number (each load of the
/// files since start is one), or the etcd store's revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Position {
    Read(u64),
    Revision(i64),
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Read(n) => write!(f, "read {n} of the files"),
            Position::Revision(r) => write!(f, "revision {r}"),
        }
    }
}

/// A source being followed: every change after the first read goes to the sink, until
/// shutdown. A follower is run again after it stopped (`supervise`): the first run goes on
/// from the first read (the files' watch armed before it, the prefix's revision); a later
/// one arms the watch anew and loads the files again, or reads the prefix whole again, so a
/// change made while it was down is not missed.
pub enum Following {
    Files {
        sink: Arc<dyn Sink>,
        paths: Vec<PathBuf>,
        telemetry: Telemetry,
        quiet: files::QuietTime,
        /// The watch armed before the first load, for the first run.
        armed: std::sync::Mutex<Option<files::Watching>>,
    },
    Etcd {
        sink: Arc<dyn Sink>,
        prefix: etcd::Prefix,
        /// The first read, which the first run's watch goes on from.
        first: std::sync::Mutex<Option<Documents>>,
        progress: Arc<etcd::follow::Progress>,
        /// Where it says whether etcd answers.
        health: Health,
    },
}

impl Following {
    /// Follow the files from now (the watch is armed, on a blocking thread, before the first
    /// load reads them, so that a write landing during the load is loaded next).
    pub async fn files(
        sink: Arc<dyn Sink>,
        paths: Vec<PathBuf>,
        telemetry: Telemetry,
        quiet: files::QuietTime,
    ) -> Following {
        let armed = files::Watching::arm_off_worker(
            Arc::clone(&sink),
            paths.clone(),
            telemetry.clone(),
            quiet,
        )
        .await;
        Following::Files {
            sink,
            paths,
            telemetry,
            quiet,
            armed: std::sync::Mutex::new(Some(armed)),
        }
    }

    /// Follow an etcd prefix from its first read (loaded already); the barrier that waits
    /// for the follower.
    pub fn etcd(
        sink: Arc<dyn Sink>,
        prefix: etcd::Prefix,
        first: Documents,
        health: Health,
    ) -> (Following, Barrier) {
        let (progress, reached) = etcd::follow::Progress::new(first.revision);
        let barrier = Barrier::Etcd {
            prefix: prefix.clone(),
            reached,
        };
        let following = Following::Etcd {
            sink,
            prefix,
            first: std::sync::Mutex::new(Some(first)),
            progress: Arc::new(progress),
            health,
        };
        (following, barrier)
    }

    /// One run: hand each change to the sink until `shutdown`.
    pub fn run(
        self: &Arc<Self>,
        shutdown: Shutdown,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let following = Arc::clone(self);
        async move {
            match &*following {
                Following::Files {
                    sink,
                    paths,
                    telemetry,
                    quiet,
                    armed,
                } => {
                    let first = armed.lock().unwrap_or_else(|p| p.into_inner()).take();
                    let watching = match first {
                        Some(watching) => watching,
                        None => {
                            let watching = files::Watching::arm_off_worker(
                                Arc::clone(sink),
                                paths.clone(),
                                telemetry.clone(),
                                *quiet,
                            )
                            .await;
                            // Armed before the files are read again: nothing is missed.
                            load_files(sink).await;
                            watching
                        }
                    };
                    watching.run(shutdown).await
                }
                Following::Etcd {
                    sink,
                    prefix,
                    first,
                    progress,
                    health,
                } => {
                    let first = first.lock().unwrap_or_else(|p| p.into_inner()).take();
                    let start = match first {
                        Some(read) => etcd::follow::Start::Read(read),
                        None => etcd::follow::Start::Again(progress.at()),
                    };
                    etcd::follow::follow(
                        Arc::clone(sink),
                        prefix.clone(),
                        start,
                        Arc::clone(progress),
                        health.clone(),
                        shutdown,
                    )
                    .await
                }
            }
        }
    }
}

/// Have the sink load the files again, on a blocking thread (a load is CPU work); a load that
/// panicked is reported as a failed load.
pub(crate) async fn load_files(sink: &Arc<dyn Sink>) -> Option<u64> {
    let loading = Arc::clone(sink);
    let loaded = tokio::task::spawn_blocking(move || {
        crate::supervise::fail_point("load");
        loading.files_changed()
    })
    .await;
    match loaded {
        Ok(read) => Some(read),
        Err(e) => {
            sink.load_stopped(None, stopped_words(e));
            None
        }
    }
}

/// [`load_files`] for the files' watch: not published when `moved()` says the files changed
/// again since the read began ([`Sink::files_changed_unless`]). Whether it was published.
pub(crate) async fn load_files_unless(
    sink: &Arc<dyn Sink>,
    moved: Arc<dyn Fn() -> bool + Send + Sync>,
) -> bool {
    let loading = Arc::clone(sink);
    let loaded = tokio::task::spawn_blocking(move || {
        crate::supervise::fail_point("load");
        loading.files_changed_unless(&*moved)
    })
    .await;
    match loaded {
        Ok(read) => read.is_some(),
        Err(e) => {
            sink.load_stopped(None, stopped_words(e));
            true
        }
    }
}

/// Why a load on a blocking thread did not finish, in words.
pub(crate) fn stopped_words(e: tokio::task::JoinError) -> String {
    if e.is_panic() {
        format!(
            "it panicked: {}",
            crate::supervise::panic_words(e.into_panic())
        )
    } else {
        "it was cancelled".into()
    }
}

/// Settle an etcd prefix: the store's revision now (or `revision`), once the follower has
/// loaded it, or the prefix has not changed between what the follower loaded and it. The
/// watch's progress reports are not used: etcd 3.4 answers them before a watch opened
/// behind the store has replayed what it missed.
async fn settle_etcd(
    prefix: &etcd::Prefix,
    mut reached: etcd::follow::Reached,
    revision: Option<i64>,
) -> Result<Position, SourceError> {
    let late = |what: String| SourceError::Unavailable {
        url: prefix.url.display(),
        message: format!(
            "{what} within {}",
            humantime::format_duration(prefix.timeout)
        ),
    };
    let deadline = tokio::time::Instant::now() + prefix.timeout;
    let mut client = tokio::time::timeout_at(
        deadline,
        etcd::connect(&prefix.url, &prefix.access, prefix.timeout),
    )
    .await
    .map_err(|_| late("no answer".into()))??;
    let target = match revision {
        Some(revision) => revision,
        None => tokio::time::timeout_at(deadline, etcd::current_revision(&mut client, &prefix.url))
            .await
            .map_err(|_| late("no answer".into()))??,
    };
    // Asked once per revision the follower holds: until it moves, the answer stays.
    loop {
        let held = *reached.borrow_and_update();
        if held >= target {
            return Ok(Position::Revision(held));
        }
        let unchanged = tokio::time::timeout_at(
            deadline,
            etcd::unchanged_between(&mut client, &prefix.url, held, target),
        )
        .await
        .map_err(|_| late("no answer".into()))??;
        if unchanged {
            return Ok(Position::Revision(target));
        }
        tokio::select! {
            changed = reached.changed() => if changed.is_err() {
                return Err(SourceError::Stopped("the follower of the prefix ended".into()));
            },
            _ = tokio::time::sleep_until(deadline) => {
                return Err(late(format!("the follower did not reach revision {target} (it holds revision {held})")));
            }
        }
    }
}

/// A source's barrier: a position that holds everything written to the source before the
/// call, once the sink has loaded it (what `status --wait` waits from).
#[derive(Clone)]
pub enum Barrier {
    /// The files are read again now, settling any change the watch has not loaded yet.
    Files(Arc<dyn Sink>),
    /// The store's revision now, once the follower has applied and loaded the prefix up to
    /// it (or the prefix has not changed since what it loaded).
    Etcd {
        prefix: etcd::Prefix,
        reached: etcd::follow::Reached,
    },
}

impl std::fmt::Debug for Barrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Barrier::Files(_) => f.write_str("Barrier::Files"),
            Barrier::Etcd { prefix, .. } => write!(f, "Barrier::Etcd({})", prefix.url.display()),
        }
    }
}

impl Barrier {
    /// Settle the source: the position that holds everything written before this call (or
    /// `revision`, from etcd), loaded by the sink when this returns.
    pub async fn settle(&self, revision: Option<i64>) -> Result<Position, SourceError> {
        match self {
            Barrier::Files(sink) => load_files(sink).await.map(Position::Read).ok_or_else(|| {
                SourceError::Stopped("the load of the files stopped on a bug; see the log".into())
            }),
            Barrier::Etcd { prefix, reached } => {
                settle_etcd(prefix, reached.clone(), revision).await
            }
        }
    }
}

/// Where a source hands what it read: loading, checking and publishing are the sink's.
/// Called on blocking threads (a load is CPU work).
pub trait Sink: Send + Sync + 'static {
    /// The files under the watched paths changed: load them again. The number of this
    /// read of the files (a [`Position::Read`]).
    fn files_changed(&self) -> u64;
    /// As [`Sink::files_changed`], for the files' watch: `moved()`, asked once the files are
    /// read, says whether they changed again since the read began. Such a load is not
    /// published (it may hold half of an edit that began meanwhile, whose events load the
    /// files again): `None` then, else the read's number. A sink that cannot tell loads as
    /// [`Sink::files_changed`] does.
    fn files_changed_unless(&self, moved: &dyn Fn() -> bool) -> Option<u64> {
        let _ = moved;
        Some(self.files_changed())
    }
    /// The files beyond the watched paths that the last load read (secret files named by
    /// `switchyard_files`), whose changes count too.
    fn files_read(&self) -> Vec<PathBuf>;
    /// Every document under an etcd prefix as of `revision`, and what the apply that wrote
    /// them said of itself (its guard key's note), if an apply did.
    fn documents(&self, documents: &[Document], revision: i64, note: Option<etcd::ApplyNote>);
    /// A load of the documents at `revision` (of the files: `None`) did not finish: it
    /// panicked (`why`). It counts as a failed load: the last good generation keeps
    /// serving, and the barrier does not report it loaded.
    fn load_stopped(&self, revision: Option<i64>, why: String);
}

/// `--source`: whether etcd answers, and since when.
#[derive(Clone, Debug)]
pub struct SourceHealth {
    /// The source, as given (`etcd://...`).
    pub url: String,
    pub answering: bool,
    /// When it began answering, or stopped.
    pub since: std::time::SystemTime,
    /// Why it does not answer.
    pub error: Option<String>,
}

/// Whether the source answers, and since when: said by its follower (and the daemon at its
/// first read), read by the admin API (`/status`, `/readyz`, the page, and
/// `switchyard_source_down` when scraped). From files it is never said: `None`.
///
/// A failure is the source's outage only once it has lasted [`etcd::OUTAGE_AFTER`]: the
/// follower tries again at once (a closed channel, a leader being elected, a member paused
/// for a moment), and an etcd stall shorter than that is never said.
#[derive(Clone, Debug, Default)]
pub struct Health {
    now: std::sync::Arc<std::sync::Mutex<Option<Said>>>,
}

/// What the follower last said of its source.
#[derive(Clone, Debug)]
struct Said {
    url: String,
    /// When it began answering (after an outage said, or at the first read).
    answering_since: std::time::SystemTime,
    /// Failing since (both clocks), and the last failure's words.
    failing: Option<(std::time::Instant, std::time::SystemTime, String)>,
}

impl Health {
    pub fn new() -> Health {
        Health::default()
    }

    /// The source at `url` answered.
    pub fn answering(&self, url: &str) {
        let mut now = self.lock();
        let was_down = now.as_ref().is_none_or(Said::down);
        match now.as_mut() {
            Some(said) if !was_down => said.failing = None,
            _ => {
                *now = Some(Said {
                    url: url.to_string(),
                    answering_since: std::time::SystemTime::now(),
                    failing: None,
                })
            }
        }
    }

    /// The source at `url` failed to answer (`error`): from the first failure of a series,
    /// an outage once it has lasted [`etcd::OUTAGE_AFTER`].
    pub fn failing(&self, url: &str, error: String) {
        let mut now = self.lock();
        let said = now.get_or_insert_with(|| Said {
            url: url.to_string(),
            answering_since: std::time::SystemTime::now(),
            failing: None,
        });
        match &mut said.failing {
            Some((_, _, words)) => *words = error,
            None => {
                said.failing = Some((
                    std::time::Instant::now(),
                    std::time::SystemTime::now(),
                    error,
                ))
            }
        }
    }

    /// Whether it answers now, and since when (`None` from files).
    pub fn now(&self) -> Option<SourceHealth> {
        let now = self.lock();
        let said = now.as_ref()?;
        Some(match &said.failing {
            Some((_, since, error)) if said.down() => SourceHealth {
                url: said.url.clone(),
                answering: false,
                since: *since,
                error: Some(error.clone()),
            },
            _ => SourceHealth {
                url: said.url.clone(),
                answering: true,
                since: said.answering_since,
                error: None,
            },
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Said>> {
        self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Said {
    /// Failing for [`etcd::OUTAGE_AFTER`] or longer.
    fn down(&self) -> bool {
        self.failing
            .as_ref()
            .is_some_and(|(since, _, _)| since.elapsed() >= etcd::OUTAGE_AFTER)
    }
}

/// A source's URL, or a source, that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("--source {url}: {message}")]
    Url { url: String, message: String },
    /// etcd did not answer, or not in time: transient, tried again.
    #[error("{url}: {message}")]
    Unavailable { url: String, message: String },
    /// A key Switchyard wrote holds what does not read (a rollout state, an apply's switch
    /// key, an interrupted apply's staging that is short): permanent until someone acts
    /// (`what` says how), never tried again as if etcd were away.
    #[error("{url}: {what}")]
    Corrupt { url: String, what: String },
    /// The source's follower, or a load it waited for, stopped.
    #[error("the source's follower stopped: {0}")]
    Stopped(String),
}

impl SourceError {
    /// Whether trying again may succeed without someone acting (etcd away, a leader being
    /// elected); a corrupt key or a bad URL does not heal by waiting.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SourceError::Unavailable { .. } | SourceError::Stopped(_)
        )
    }
}

/// `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`: the cluster's members and the key prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `HOST:PORT` of each member, as written.
    pub endpoints: Vec<String>,
    /// The prefix as written after the members, with its leading `/` (`/switchyard`).
    pub prefix: String,
}

impl EtcdUrl {
    /// The keys of documents start with this: the prefix and a `/`.
    pub fn key_prefix(&self) -> String {
        format!("{}/", self.prefix.trim_end_matches('/'))
    }

    /// The URL as given (members joined by `,`).
    pub fn display(&self) -> String {
        format!("etcd://{}{}", self.endpoints.join(","), self.prefix)
    }
}

impl std::str::FromStr for EtcdUrl {
    type Err = SourceError;

    fn from_str(url: &str) -> Result<EtcdUrl, SourceError> {
        let bad = |message: String| SourceError::Url {
            url: url.to_string(),
            message,
        };
        let Some(rest) = url.strip_prefix("etcd://") else {
            return Err(bad(
                "not an etcd URL: etcd://HOST:PORT[,HOST:PORT...]/PREFIX".into(),
            ));
        };
        let (members, prefix) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, ""),
        };
        if prefix.trim_matches('/').is_empty() {
            return Err(bad(
                "no key prefix: name one after the members (etcd://HOST:PORT/PREFIX); the \
                 whole key space is never read"
                    .into(),
            ));
        }
        let mut endpoints = Vec::new();
        for member in members.split(',') {
            let Some((host, port)) = member.rsplit_once(':') else {
                return Err(bad(format!("member {member:?} has no port (HOST:PORT)")));
            };
            if host.is_empty() {
                return Err(bad(format!("member {member:?} has no host (HOST:PORT)")));
            }
            match port.parse::<u16>() {
                Ok(p) if p > 0 => endpoints.push(member.to_string()),
                _ => return Err(bad(format!("member {member:?}: {port:?} is not a port"))),
            }
        }
        Ok(EtcdUrl {
            endpoints,
            prefix: prefix.to_string(),
        })
    }
}

/// The documents under a prefix at one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Documents {
    /// The store's revision they were read at.
    pub revision: i64,
    pub documents: Vec<Document>,
}

#[cfg(test)]
mod tests;
