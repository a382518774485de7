//! The files source (`--config` paths): watching them (notify), debouncing bursts of events,
//! and telling the sink to load again after each burst.
//!
//! Editors and Kubernetes replace files rather than write them in place (rename-over,
//! symlink swaps, a whole directory renamed over another), which kills inotify watches on
//! the old inodes. So each round watches the paths and their parent directories anew, and
//! the directories of the secret files the last load read (a Kubernetes Secret mount swaps
//! a `..data` symlink beside the files, not the files).
//!
//! Must not: read or parse files (the sink's loader does, parsing only what changed), or
//! publish anything.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::{Sink, DEBOUNCE, MAX_DEBOUNCE};
use crate::shutdown::Shutdown;
use crate::telemetry::Telemetry;

/// How long to wait before watching again when nothing could be watched.
const RETRY: Duration = Duration::from_secs(1);

/// A watch on the config paths, armed and collecting change events. Armed before the first
/// load, a write that lands while the files are read (a large config takes seconds) is
/// seen, and loaded, once [`Watching::run`] runs.
pub struct Watching {
    sink: Arc<dyn Sink>,
    paths: Vec<PathBuf>,
    telemetry: Telemetry,
    armed: Option<Armed>,
}

/// A watcher, the channel of its change events, and the directories of secret files it
/// watches (`switchyard_files`, known from the loads so far).
type Armed = (
    notify::RecommendedWatcher,
    mpsc::UnboundedReceiver<()>,
    Vec<PathBuf>,
);

impl Watching {
    /// Arm the watch on `paths` now; [`Watching::run`] then has `sink` load them again
    /// after each burst of changes. Blocking: it walks the trees (a watch per directory)
    /// and asks the sink what its last load read (waiting for a load in progress).
    pub fn arm(sink: Arc<dyn Sink>, paths: Vec<PathBuf>, telemetry: Telemetry) -> Watching {
        let mut watching = Watching {
            sink,
            paths,
            telemetry,
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
    ) -> Watching {
        let arming = (Arc::clone(&sink), paths.clone(), telemetry.clone());
        match tokio::task::spawn_blocking(move || Watching::arm(arming.0, arming.1, arming.2)).await
        {
            Ok(watching) => watching,
            // The runtime is shutting down: nothing armed, and nothing to watch for.
            Err(_) => Watching {
                sink,
                paths,
                telemetry,
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
        // The old watch is dropped there too (removing its inotify watches).
        let rearmed = tokio::task::spawn_blocking(move || {
            drop(armed);
            Watching::arm(sink, paths, telemetry)
        })
        .await;
        if let Ok(rearmed) = rearmed {
            *self = rearmed;
        }
    }

    /// Load again after each burst of changes (events since the watch was armed included)
    /// until `shutdown` completes.
    pub async fn run(mut self, mut shutdown: Shutdown) {
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
                        burst = next_burst(rx) => if !burst { return },
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
            // A failed load is logged and kept by the sink; a half-written file that fails
            // to parse is loaded again on its next event; a load that panicked is reported
            // as failed.
            tracing::debug!("Loading the config files.");
            super::load_files(&self.sink).await;
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
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let wanted = match &event {
                Ok(e) => {
                    is_change(&e.kind)
                        && (touches(&relevant, &e.paths) || within(&in_secret_dirs, &e.paths))
                }
                Err(_) => true, // e.g. a queue overflow: reload to be sure
            };
            if wanted {
                telemetry.file_event();
                let _ = tx.send(());
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

/// Wait for a change, then for quiet ([`DEBOUNCE`]): but no longer than [`MAX_DEBOUNCE`]
/// from the first change, so files edited without pause (a deploy tool writing many times a
/// second) still reload. `false` once the events end (the watcher is gone).
async fn next_burst(events: &mut mpsc::UnboundedReceiver<()>) -> bool {
    if events.recv().await.is_none() {
        return false;
    }
    tracing::debug!("A change to the config files was seen; loading them once they are quiet.");
    let at_most = tokio::time::Instant::now() + MAX_DEBOUNCE;
    loop {
        tokio::select! {
            got = events.recv() => if got.is_none() { return false },
            _ = tokio::time::sleep(DEBOUNCE) => return true,
            _ = tokio::time::sleep_until(at_most) => return true,
        }
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

    /// Send an event into `tx` every `every`, `count` times (on tokio's clock).
    fn events_every(
        tx: mpsc::UnboundedSender<()>,
        every: Duration,
        count: u32,
    ) -> tokio::task::JoinHandle<mpsc::UnboundedSender<()>> {
        tokio::spawn(async move {
            for _ in 0..count {
                let _ = tx.send(());
                tokio::time::sleep(every).await;
            }
            tx
        })
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

    /// A burst of events reloads once, DEBOUNCE after its last event. On tokio's paused
    /// clock: the times are exact, and nothing waits in real time.
    #[tokio::test(start_paused = true)]
    async fn a_burst_reloads_once_after_quiet() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        // Events at 0, 30, 60 and 90 ms, then quiet.
        let sender = events_every(tx, Duration::from_millis(30), 4);
        assert!(next_burst(&mut rx).await);
        assert_eq!(start.elapsed(), Duration::from_millis(90) + DEBOUNCE);
        assert!(rx.is_empty(), "the whole burst was taken in");
        // The watcher gone (its sender dropped): no more bursts.
        drop(sender.await.expect("sender"));
        assert!(!next_burst(&mut rx).await);
    }

    /// Files edited without a pause (an event every 30 ms, never DEBOUNCE of quiet) still
    /// reload, MAX_DEBOUNCE after the first event of each burst, while the edits go on.
    #[tokio::test(start_paused = true)]
    async fn edits_without_a_pause_still_reload() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = tokio::time::Instant::now();
        // 100 events, at 0, 30, ..., 2970 ms.
        let sender = events_every(tx, Duration::from_millis(30), 100);
        let mut ends = Vec::new();
        for _ in 0..3 {
            assert!(next_burst(&mut rx).await);
            ends.push(start.elapsed().as_millis());
        }
        // Bursts from 0, 1020 (the first event after 1000) and 2040 ms, each ended by
        // MAX_DEBOUNCE: the third too, since 2970 + DEBOUNCE comes later than 3040.
        assert_eq!(ends, [1000, 2020, 3040]);
        drop(sender.await.expect("sender"));
        assert!(!next_burst(&mut rx).await, "no reload once the edits stop");
    }
}
