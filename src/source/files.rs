//! The files source (`--config` paths): watching them (notify), gathering each change's
//! events, and telling the sink to load again after each change.
//!
//! A change is loaded once no file is being written and the files have been quiet for
//! `--file-quiet-time` (5 ms by default; [`next_change`] has the rule). A file written in place
//! (created, then written, then closed) is waited for until its close, however long that
//! takes up to [`MAX_WAIT`]: a file is never read half-written. The quiet time is for
//! edits of several files that are not atomic (`git checkout`, a script renaming files one
//! after another, `tar`): it lets the next file's first event come before the load starts.
//! Events that arrive during a load make exactly one more load after it, and the load they
//! arrived during is not published (an edit that began meanwhile may be read in half); after
//! one load held back so, the next is published whatever arrives during it.
//!
//! Editors and Kubernetes replace files rather than write them in place (rename-over,
//! symlink swaps, a whole directory renamed over another), which kills inotify watches on
//! the old inodes. So each round watches the paths and their parent directories anew, and
//! the directories of the secret files the last load read (a Kubernetes Secret mount swaps
//! a `..data` symlink beside the files, not the files).
//!
//! Must not: read or parse files (the sink's loader does, parsing only what changed), or
//! publish anything.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::Sink;
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// How long to wait before watching again when nothing could be watched.
const RETRY: Duration = Duration::from_secs(1);

/// `--file-quiet-time`: how long the files must see no event before a change is loaded
/// (by default [`QUIET`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuietTime(pub Duration);

impl Default for QuietTime {
    fn default() -> QuietTime {
        QuietTime(QUIET)
    }
}

/// The default quiet time.
pub const QUIET: Duration = Duration::from_millis(5);
/// The longest a change waits from its first event, for quiet or for a file being written to
/// be closed: files rewritten without a pause (a tool writing many times a second) are still
/// loaded within this, and a file held open longer is read as it is then (if it does not
/// parse, its close loads it again).
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// A watch on the config paths, armed and collecting change events. Armed before the first
/// load, a write that lands while the files are read (a large config takes seconds) is
/// seen, and loaded, once [`Watching::run`] runs.
pub struct Watching {
    sink: Arc<dyn Sink>,
    paths: Vec<PathBuf>,
    telemetry: Telemetry,
    quiet: QuietTime,
    /// Every change event seen, by any watcher of this watch: a load during which it moved
    /// is not published.
    events: Arc<AtomicU64>,
    armed: Option<Armed>,
}

/// A watcher, the channel of its change events, and the directories of secret files it
/// watches (`switchyard_files`, known from the loads so far).
type Armed = (
    notify::RecommendedWatcher,
    mpsc::UnboundedReceiver<Seen>,
    Vec<PathBuf>,
);

/// What one file event says of the writes in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    /// A regular file was created or written in place: it is whole at its close.
    Writing(PathBuf),
    /// A file was closed after writing, renamed away or removed: no longer being written.
    Closed(PathBuf),
    /// Anything else: a rename into place, a symlink or a directory made, a lost event.
    Changed,
}

impl Watching {
    /// Arm the watch on `paths` now; [`Watching::run`] then has `sink` load them again
    /// after each burst of changes. Blocking: it walks the trees (a watch per directory)
    /// and asks the sink what its last load read (waiting for a load in progress).
    pub fn arm(
        sink: Arc<dyn Sink>,
        paths: Vec<PathBuf>,
        telemetry: Telemetry,
        quiet: QuietTime,
    ) -> Watching {
        Watching::arm_counting(sink, paths, telemetry, quiet, Arc::default())
    }

    /// [`Watching::arm`], counting events in `events`.
    fn arm_counting(
        sink: Arc<dyn Sink>,
        paths: Vec<PathBuf>,
        telemetry: Telemetry,
        quiet: QuietTime,
        events: Arc<AtomicU64>,
    ) -> Watching {
        let mut watching = Watching {
            sink,
            paths,
            telemetry,
            quiet,
            events,
            armed: None,
        };
        watching.armed = watching.arm_now();
        watching
    }

    /// [`Watching::arm`] on a blocking thread.
    pub async fn arm_off_worker(
        sink: Arc<dyn Sink>,
        paths: Vec<PathBuf>,
        telemetry: Telemetry,
        quiet: QuietTime,
    ) -> Watching {
        let arming = (Arc::clone(&sink), paths.clone(), telemetry.clone());
        let armed =
            tokio::task::spawn_blocking(move || Watching::arm(arming.0, arming.1, arming.2, quiet))
                .await;
        match armed {
            Ok(watching) => watching,
            // The runtime is shutting down: nothing armed, and nothing to watch for.
            Err(_) => Watching {
                sink,
                paths,
                telemetry,
                quiet,
                events: Arc::default(),
                armed: None,
            },
        }
    }

    /// Arm again, on a blocking thread (see [`Watching::arm`]): the new watch, and the
    /// secret files' directories its last load named.
    async fn rearm(&mut self) {
        let sink = Arc::clone(&self.sink);
        let paths = std::mem::take(&mut self.paths);
        let telemetry = self.telemetry.clone();
        let armed = self.armed.take();
        let quiet = self.quiet;
        let events = Arc::clone(&self.events);
        // The old watch is dropped there too (removing its inotify watches).
        let rearmed = tokio::task::spawn_blocking(move || {
            drop(armed);
            Watching::arm_counting(sink, paths, telemetry, quiet, events)
        })
        .await;
        if let Ok(rearmed) = rearmed {
            *self = rearmed;
        }
    }

    /// Load again after each change (events since the watch was armed included) until
    /// `shutdown` completes.
    pub async fn run(mut self, mut shutdown: Shutdown) {
        // Whether the last load was not published (the files moved while it read them): the
        // next one is, whatever comes during it, so that files rewritten without a pause
        // are still served.
        let mut held_back = false;
        loop {
            // What the last load read, asked on a blocking thread (a load in progress
            // holds it).
            let secret_dirs = {
                let sink = Arc::clone(&self.sink);
                tokio::task::spawn_blocking(move || secret_dirs(&*sink))
                    .await
                    .unwrap_or_default()
            };
            match &mut self.armed {
                // A load named secret files the watch does not cover yet (the first load
                // does, after the watch was armed): watch them too, and load again, since
                // they may have changed meanwhile.
                Some((_, _, watched)) if *watched != secret_dirs => {}
                Some((_watcher, rx, _)) => {
                    tokio::select! {
                        _ = shutdown.wait() => return,
                        change = next_change(rx, self.quiet.0) => if !change { return },
                    }
                }
                None => {
                    // Nothing could be watched (every path and parent missing): look again
                    // later, and load then, since anything may have changed meanwhile.
                    tokio::select! {
                        _ = shutdown.wait() => return,
                        _ = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
            // Armed before the files are read, so a write that lands during the load
            // triggers another one instead of being missed.
            self.rearm().await;
            // An edit that begins while the files are read may be read in half: such a
            // load is not published, and the edit's events load the files again.
            let at_start = self.events.load(Ordering::SeqCst);
            let events = Arc::clone(&self.events);
            let publish_anyway = held_back;
            let moved: Arc<dyn Fn() -> bool + Send + Sync> =
                Arc::new(move || !publish_anyway && events.load(Ordering::SeqCst) != at_start);
            // A failed load is logged and kept by the sink; a half-written file that fails
            // to parse is loaded again on its next event; a load that panicked is reported
            // as failed.
            tracing::debug!("Loading the config files.");
            held_back = !super::load_files_unless(&self.sink, moved).await;
        }
    }

    /// A fresh watcher on the paths (new inodes after a swap) and the channel of its change
    /// events; `None` when nothing can be watched.
    fn arm_now(&self) -> Option<Armed> {
        let (tx, rx) = mpsc::unbounded_channel();
        let relevant = self.paths.clone();
        let secret_dirs = self.secret_dirs();
        let in_secret_dirs = secret_dirs.clone();
        let telemetry = self.telemetry.clone();
        let events = Arc::clone(&self.events);
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let seen = match &event {
                Ok(e) => {
                    if is_change(&e.kind)
                        && (touches(&relevant, &e.paths) || within(&in_secret_dirs, &e.paths))
                    {
                        Some(seen(e))
                    } else {
                        None
                    }
                }
                Err(_) => Some(Seen::Changed), // e.g. a queue overflow: reload to be sure
            };
            if let Some(seen) = seen {
                events.fetch_add(1, Ordering::SeqCst);
                telemetry.file_event();
                let _ = tx.send(seen);
            }
        });
        match watcher {
            Ok(mut w) => {
                if self.watch_paths(&mut w) == 0 {
                    tracing::warn!(
                        "None of the config paths can be watched; looking again shortly."
                    );
                    return None;
                }
                for dir in &secret_dirs {
                    if let Err(e) = w.watch(dir, RecursiveMode::NonRecursive) {
                        tracing::warn!(dir = %dir.display(), error = %e, "Cannot watch a directory of secret files (switchyard_files); their changes are seen at the next reload.");
                    }
                }
                Some((w, rx, secret_dirs))
            }
            Err(e) => {
                tracing::error!(error = %e, "Cannot watch files; looking again shortly.");
                None
            }
        }
    }

    /// Watch each path (recursively) and its parent; returns how many watches were set.
    fn watch_paths(&self, watcher: &mut impl Watcher) -> usize {
        let mut count = 0;
        for path in &self.paths {
            if watcher.watch(path, RecursiveMode::Recursive).is_ok() {
                count += 1;
            }
            if let Some(parent) = parent_dir(path) {
                if watcher.watch(&parent, RecursiveMode::NonRecursive).is_ok() {
                    count += 1;
                }
            }
        }
        count
    }

    /// The directories of the secret files the last load read: watched whole.
    fn secret_dirs(&self) -> Vec<PathBuf> {
        secret_dirs(&*self.sink)
    }
}

/// The directories of the secret files `sink`'s last load read (blocking: a load in
/// progress holds what it read).
fn secret_dirs(sink: &dyn Sink) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = sink
        .files_read()
        .iter()
        .filter_map(|f| parent_dir(f))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Wait for a change, then until no file is being written and no event came for `quiet`:
/// `true` then, `false` once the events end (the watcher is gone).
///
/// Bounded: neither the quiet nor a file being written is waited for past [`MAX_WAIT`] from
/// the change's first event, so files rewritten without a pause still load. Events already
/// arrived when it returns are part of this change.
async fn next_change(events: &mut mpsc::UnboundedReceiver<Seen>, quiet: Duration) -> bool {
    let Some(first) = events.recv().await else {
        return false;
    };
    tracing::debug!(event = ?first, "A change to the config files was seen.");
    let start = tokio::time::Instant::now();
    let mut writing = HashSet::new();
    note(&mut writing, first);
    let mut quiet_at = start + quiet;
    loop {
        // What has arrived already belongs to this change.
        loop {
            match events.try_recv() {
                Ok(seen) => {
                    note(&mut writing, seen);
                    quiet_at = tokio::time::Instant::now() + quiet;
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
        let now = tokio::time::Instant::now();
        let bound = start + MAX_WAIT;
        if now >= bound {
            if !writing.is_empty() {
                tracing::debug!(files = ?writing, "Loading the config files while some are still open for writing, past the wait's bound.");
            }
            return true;
        }
        let until = match writing.is_empty() {
            true if now >= quiet_at => return true,
            true => quiet_at.min(bound),
            false => bound,
        };
        tokio::select! {
            got = events.recv() => match got {
                Some(seen) => {
                    note(&mut writing, seen);
                    quiet_at = tokio::time::Instant::now() + quiet;
                }
                None => return false,
            },
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}

/// Keep track of the files being written.
fn note(writing: &mut HashSet<PathBuf>, seen: Seen) {
    match seen {
        Seen::Writing(path) => {
            writing.insert(path);
        }
        Seen::Closed(path) => {
            writing.remove(&path);
        }
        Seen::Changed => {}
    }
}

/// What an event says of the writes in progress. A created entry counts as being written
/// only when it is an empty regular file (inotify says "created" of a symlink or a hard link
/// too, which no close follows). Only inotify (Linux) tells of closes: elsewhere every event
/// is [`Seen::Changed`], and the quiet time alone gathers a change.
fn seen(event: &notify::Event) -> Seen {
    if !cfg!(target_os = "linux") {
        return Seen::Changed;
    }
    let path = event.paths.first().cloned();
    match (&event.kind, path) {
        (EventKind::Create(CreateKind::File | CreateKind::Any), Some(path)) => {
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_file() && meta.len() == 0 => Seen::Writing(path),
                _ => Seen::Changed,
            }
        }
        (EventKind::Modify(ModifyKind::Data(_)), Some(path)) => Seen::Writing(path),
        (EventKind::Access(AccessKind::Close(AccessMode::Write)), Some(path)) => Seen::Closed(path),
        (EventKind::Remove(_), Some(path)) => Seen::Closed(path),
        (EventKind::Modify(ModifyKind::Name(RenameMode::From | RenameMode::Both)), Some(path)) => {
            Seen::Closed(path)
        }
        _ => Seen::Changed,
    }
}

/// Whether an event is about an entry directly in one of `dirs`.
fn within(dirs: &[PathBuf], event_paths: &[PathBuf]) -> bool {
    event_paths.iter().any(|p| {
        p.parent()
            .is_some_and(|parent| dirs.iter().any(|d| d == parent))
    })
}

fn parent_dir(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    absolute.parent().map(Path::to_path_buf)
}

/// Reading a file (ours included) is not a change.
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Whether an event is about one of the config paths (events on their parents are about
/// siblings too).
fn touches(paths: &[PathBuf], event_paths: &[PathBuf]) -> bool {
    if event_paths.is_empty() {
        return true;
    }
    event_paths.iter().any(|p| {
        paths.iter().any(|root| {
            let root = std::path::absolute(root).unwrap_or_else(|_| root.clone());
            p.starts_with(&root)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Send `seen` into `tx` every `every`, `count` times (on tokio's clock).
    fn events_every(
        tx: mpsc::UnboundedSender<Seen>,
        seen: Seen,
        every: Duration,
        count: u32,
    ) -> tokio::task::JoinHandle<mpsc::UnboundedSender<Seen>> {
        tokio::spawn(async move {
            for _ in 0..count {
                let _ = tx.send(seen.clone());
                tokio::time::sleep(every).await;
            }
            tx
        })
    }

    /// Send each event at its time after now (on tokio's clock).
    fn events_at(
        tx: mpsc::UnboundedSender<Seen>,
        events: Vec<(u64, Seen)>,
    ) -> tokio::task::JoinHandle<mpsc::UnboundedSender<Seen>> {
        let start = tokio::time::Instant::now();
        tokio::spawn(async move {
            for (at, seen) in events {
                tokio::time::sleep_until(start + Duration::from_millis(at)).await;
                let _ = tx.send(seen);
            }
            tx
        })
    }

    fn file(name: &str) -> PathBuf {
        PathBuf::from("/config").join(name)
    }

    /// A sink whose loads are held (`gate` locked): asking what its last load read waits for
    /// the gate, as the real sink waits for a load in progress.
    struct Held {
        gate: Arc<std::sync::Mutex<()>>,
        loads: std::sync::atomic::AtomicU64,
    }

    impl Sink for Held {
        fn files_changed(&self) -> u64 {
            let _held = self.gate.lock().unwrap_or_else(|p| p.into_inner());
            self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
        }
        fn files_read(&self) -> Vec<PathBuf> {
            let _held = self.gate.lock().unwrap_or_else(|p| p.into_inner());
            Vec::new()
        }
        fn documents(
            &self,
            _: &[crate::config::Document],
            _: i64,
            _: Option<super::super::etcd::ApplyNote>,
        ) {
        }
        fn load_stopped(&self, _: Option<i64>, _: String) {}
    }

    /// The watch never blocks the runtime's thread: with a load in progress (the sink held),
    /// the files' watch asks what the last load read and arms itself anew on blocking
    /// threads, so another task of a one-thread runtime goes on meanwhile.
    #[tokio::test]
    async fn the_watch_waits_for_a_load_in_progress_off_the_runtime() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("a.yaml"), "{}\n").expect("write");
        let gate = Arc::new(std::sync::Mutex::new(()));
        let sink = Arc::new(Held {
            gate: Arc::clone(&gate),
            loads: Default::default(),
        });
        let watching = Watching::arm_off_worker(
            Arc::clone(&sink) as Arc<dyn Sink>,
            vec![dir.path().to_path_buf()],
            Telemetry::default(),
            QuietTime::default(),
        )
        .await;
        let (_trigger, shutdown) = crate::shutdown::channel();
        // A load in progress: the gate held by another thread for a while.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let holder = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || {
                let _held = gate.lock().unwrap_or_else(|p| p.into_inner());
                let _ = held_tx.send(());
                std::thread::sleep(Duration::from_millis(1500));
            })
        };
        held_rx.recv().expect("held");
        let watch = tokio::spawn(watching.run(shutdown));
        // On this one-thread runtime, a task that ticks: it must go on while the watch
        // waits for the load.
        let started = std::time::Instant::now();
        let mut ticks = 0;
        while started.elapsed() < Duration::from_millis(1000) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            ticks += 1;
        }
        assert!(
            ticks >= 3,
            "the runtime's thread was blocked: {ticks} ticks in 1 s"
        );
        holder.join().expect("joins");
        watch.abort();
    }

    /// A sink whose first load writes a file under the watch while it "reads" (an edit
    /// that begins during a load), and records what `moved()` said after each load.
    struct EditedDuringLoad {
        file: PathBuf,
        moved: std::sync::Mutex<Vec<bool>>,
    }

    impl Sink for EditedDuringLoad {
        fn files_changed(&self) -> u64 {
            unreachable!("the watch loads with files_changed_unless")
        }
        fn files_changed_unless(&self, moved: &dyn Fn() -> bool) -> Option<u64> {
            let mut said = self.moved.lock().unwrap_or_else(|p| p.into_inner());
            if said.is_empty() {
                std::fs::write(&self.file, "clusters: []\n").expect("write");
                // Until the watcher has seen the write (bounded).
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while !moved() && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            said.push(moved());
            let published = !said.last().copied().unwrap_or(false);
            published.then_some(said.len() as u64)
        }
        fn files_read(&self) -> Vec<PathBuf> {
            Vec::new()
        }
        fn documents(
            &self,
            _: &[crate::config::Document],
            _: i64,
            _: Option<super::super::etcd::ApplyNote>,
        ) {
        }
        fn load_stopped(&self, _: Option<i64>, _: String) {}
    }

    /// An edit that begins while the files are read: that load is told the files moved
    /// (and is not published), and the edit's own events load them again, told nothing
    /// moved.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_load_during_which_the_files_moved_is_told_so_and_loaded_again() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, "{}\n").expect("write");
        let sink = Arc::new(EditedDuringLoad {
            file: file.clone(),
            moved: Default::default(),
        });
        let watching = Watching::arm_off_worker(
            Arc::clone(&sink) as Arc<dyn Sink>,
            vec![dir.path().to_path_buf()],
            Telemetry::default(),
            QuietTime::default(),
        )
        .await;
        let (_trigger, shutdown) = crate::shutdown::channel();
        let watch = tokio::spawn(watching.run(shutdown));
        // The first change: an edit before any load.
        std::fs::write(&file, "clusters: [{name: a, connect_timeout: 1s}]\n").expect("write");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let said = sink.moved.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if said.len() >= 2 {
                assert_eq!(said[..2], [true, false], "{said:?}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the edit made during the load was never loaded again: {said:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        watch.abort();
    }

    /// Renames into place (what editors, rsync and a ConfigMap's symlink swap do) 1 ms
    /// apart load once, the quiet time after the last. On tokio's paused clock: the times
    /// are exact, and nothing waits in real time.
    #[tokio::test(start_paused = true)]
    async fn a_change_loads_once_after_its_quiet_time() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        // Events at 0, 1, 2 and 3 ms, then quiet.
        let sender = events_every(tx, Seen::Changed, Duration::from_millis(1), 4);
        assert!(next_change(&mut rx, QUIET).await);
        assert_eq!(start.elapsed(), Duration::from_millis(3) + QUIET);
        assert!(rx.is_empty(), "the whole change was taken in");
        // The watcher gone (its sender dropped): no more changes.
        drop(sender.await.expect("sender"));
        assert!(!next_change(&mut rx, QUIET).await);
    }

    /// With no quiet time, a rename loads at its event, and what had arrived with it is
    /// part of the same change.
    #[tokio::test(start_paused = true)]
    async fn no_quiet_time_loads_at_the_first_event() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(Seen::Changed).expect("send");
        tx.send(Seen::Changed).expect("send");
        let start = tokio::time::Instant::now();
        assert!(next_change(&mut rx, Duration::ZERO).await);
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(rx.is_empty(), "what had arrived was taken in");
    }

    /// A file written in place is not read before its close, however long the writer
    /// pauses between writes (here 40 ms, eight times the quiet time), with or without a
    /// quiet time; then the quiet time after the close.
    #[tokio::test(start_paused = true)]
    async fn a_file_being_written_is_waited_for_until_its_close() {
        for quiet in [QUIET, Duration::ZERO] {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let start = tokio::time::Instant::now();
            let a = file("a.yaml");
            let sender = events_at(
                tx,
                vec![
                    (0, Seen::Writing(a.clone())),  // created
                    (40, Seen::Writing(a.clone())), // a first write
                    (80, Seen::Writing(a.clone())), // a second one
                    (120, Seen::Closed(a.clone())),
                ],
            );
            assert!(next_change(&mut rx, quiet).await);
            assert_eq!(
                start.elapsed(),
                Duration::from_millis(120) + quiet,
                "quiet time {quiet:?}"
            );
            drop(sender.await.expect("sender"));
        }
    }

    /// Two files written one after the other (`git checkout`): the second's first event
    /// comes within the quiet time of the first's close, so the change holds both.
    #[tokio::test(start_paused = true)]
    async fn files_written_one_after_another_are_one_change() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        let (a, b) = (file("a.yaml"), file("b.yaml"));
        let sender = events_at(
            tx,
            vec![
                (0, Seen::Closed(a.clone())), // a removed
                (1, Seen::Writing(a.clone())),
                (2, Seen::Closed(a)),
                (4, Seen::Writing(b.clone())), // 2 ms after a's close
                (30, Seen::Closed(b)),
            ],
        );
        assert!(next_change(&mut rx, QUIET).await);
        assert_eq!(start.elapsed(), Duration::from_millis(30) + QUIET);
        assert!(rx.is_empty());
        drop(sender.await.expect("sender"));
    }

    /// Files edited without a pause (an event every 2 ms, never the quiet time) still load,
    /// MAX_WAIT after the first event of each change, while the edits go on: the quiet time
    /// does not restart without end.
    #[tokio::test(start_paused = true)]
    async fn edits_without_a_pause_still_load() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        // 1,500 events, at 0, 2, ..., 2998 ms.
        let sender = events_every(tx, Seen::Changed, Duration::from_millis(2), 1500);
        let mut ends = Vec::new();
        for _ in 0..3 {
            assert!(next_change(&mut rx, QUIET).await);
            ends.push(start.elapsed().as_millis());
        }
        // Changes from 0, 1000 and 2000 ms (an event at each), each ended by MAX_WAIT; the
        // third took the last event, at 2998 ms.
        assert_eq!(MAX_WAIT, Duration::from_secs(1));
        assert_eq!(ends, [1000, 2000, 3000]);
        drop(sender.await.expect("sender"));
        assert!(rx.is_empty());
        assert!(
            !next_change(&mut rx, QUIET).await,
            "no load once the edits stop"
        );
    }

    /// A file held open for writing is read at MAX_WAIT after the change's first event (if it
    /// does not parse yet, its close loads it again).
    #[tokio::test(start_paused = true)]
    async fn a_file_held_open_is_read_at_the_bound() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        tx.send(Seen::Writing(file("held.yaml"))).expect("send");
        assert!(next_change(&mut rx, QUIET).await);
        assert_eq!(start.elapsed(), MAX_WAIT);
    }
}
