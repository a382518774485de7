//! Edits of several files as tools make them, against the files' watch (docs/reference.md,
//! "Reloading"): no generation ever holds a half-written edit. Each edit `k` gives every
//! file two clusters, `FILE-k` and `FILE-k-more`, the second written in a second chunk, so a
//! half-written file (truncated, or with only its first chunk) is valid YAML that would
//! load, and a generation mixing edits shows in its cluster names.
//!
//! A seeded random schedule of tools (`git checkout`, vim's save, an in-place write, a
//! rename over, a ConfigMap's symlink swap), with pauses inside a file's write of up to twice
//! the quiet time (only the file's close ends its write) and short gaps between files
//! (within the quiet time: what keeps a multi-file edit whole). Replay with
//! `SWITCHYARD_FILE_EDITS_SEED`.

use switchyard_testkit as support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use support::{listeners, seed_from, Seeded};
use switchyard::config::selector::NodeFacts;
use switchyard::daemon::{Daemon, Options};
use switchyard::resource::ResourceType::Cluster;
use switchyard::source::files::QuietTime;

const FILES: [&str; 3] = ["a", "b", "c"];
/// The test's quiet time: far above the gaps it leaves between files (at most 2 ms), so a
/// busy machine's scheduling does not split an edit.
const QUIET: Duration = Duration::from_millis(100);

/// The two chunks of `file`'s text at edit `k`, each a valid document up to its end.
fn chunks(file: &str, k: u32) -> [String; 2] {
    [
        format!("clusters:\n- name: {file}-{k}\n  connect_timeout: 1s\n"),
        format!("- name: {file}-{k}-more\n  connect_timeout: 1s\n"),
    ]
}

/// The cluster names of a whole edit `k`.
fn whole(k: u32) -> BTreeSet<String> {
    FILES
        .iter()
        .flat_map(|f| [format!("{f}-{k}"), format!("{f}-{k}-more")])
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Tool {
    /// Remove the file, create it, write it (two chunks), close it; file after file.
    GitCheckout,
    /// Rename the file to a backup, write a new one, remove the backup.
    Vim,
    /// Truncate and write in place.
    InPlace,
    /// Write a hidden temporary file, then rename it over (rsync, `mv`).
    RenameOver,
}

/// Write `path` from scratch in two chunks, pausing `pause` between them (the file open).
fn write_slowly(path: &Path, text: &[String; 2], pause: Duration) {
    let mut f = std::fs::File::create(path).expect("create");
    f.write_all(text[0].as_bytes()).expect("write");
    f.flush().expect("flush");
    std::thread::sleep(pause);
    f.write_all(text[1].as_bytes()).expect("write");
}

/// Edit every file of `dir` to edit `k` with `tool`.
fn edit(dir: &Path, k: u32, tool: Tool, rng: &mut Seeded) {
    for file in FILES {
        let path = dir.join(format!("{file}.yaml"));
        let text = chunks(file, k);
        // Inside a file: a third of the time 100 to 200 ms, past the quiet time (only the
        // file's close ends its write), else under 5 ms; an edit lasts under `MAX_WAIT`.
        let pause = match rng.draw() % 3 {
            0 => Duration::from_millis(100 + rng.draw() % 100),
            _ => Duration::from_micros(rng.draw() % 5_000),
        };
        match tool {
            Tool::GitCheckout => {
                std::fs::remove_file(&path).expect("remove");
                write_slowly(&path, &text, pause);
            }
            Tool::Vim => {
                let backup = dir.join(format!("{file}.yaml~"));
                std::fs::rename(&path, &backup).expect("backup");
                write_slowly(&path, &text, pause);
                std::fs::remove_file(&backup).expect("remove backup");
            }
            Tool::InPlace => write_slowly(&path, &text, pause),
            Tool::RenameOver => {
                let tmp = dir.join(format!(".{file}.yaml.tmp"));
                write_slowly(&tmp, &text, pause);
                std::fs::rename(&tmp, &path).expect("rename over");
            }
        }
        // Between files: at most 2 ms.
        std::thread::sleep(Duration::from_micros(rng.draw() % 2_000));
    }
}

/// A ConfigMap's swap, as the kubelet makes it: the files are symlinks through `..data`,
/// a symlink to a timestamped directory; an edit writes a new directory, points
/// `..data_tmp` at it, renames that over `..data`, and removes the old directory.
fn swap(dir: &Path, k: u32) {
    let data = format!("..{k}");
    std::fs::create_dir(dir.join(&data)).expect("mkdir");
    for file in FILES {
        let [first, second] = chunks(file, k);
        std::fs::write(
            dir.join(&data).join(format!("{file}.yaml")),
            first + &second,
        )
        .expect("write");
    }
    std::os::unix::fs::symlink(&data, dir.join("..data_tmp")).expect("symlink");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
    if k > 1 {
        std::fs::remove_dir_all(dir.join(format!("..{}", k - 1))).expect("remove old");
    }
}

/// The cluster names a node gets from `generation`.
fn cluster_names(generation: &switchyard::cache::Generation) -> BTreeSet<String> {
    generation
        .snapshot_for(&NodeFacts::new("edge-1", ""))
        .get(Cluster)
        .resources
        .keys()
        .cloned()
        .collect()
}

/// The cluster names of every generation the daemon keeps, by number.
fn generations(daemon_cache: &switchyard::cache::Cache) -> Vec<(u64, BTreeSet<String>)> {
    let serving = daemon_cache.serving();
    let mut all: Vec<(u64, BTreeSet<String>)> = serving
        .known()
        .map(|g| (g.number, cluster_names(g)))
        .collect();
    all.sort_by_key(|(n, _)| *n);
    all.dedup_by_key(|(n, _)| *n);
    all
}

/// Run `edits` edits made by `make` against a daemon watching `dir`, each waited for (its
/// generation served, bounded), then check every generation published: each holds one
/// whole edit, and no load failed (no file was read half-written).
async fn edits_are_served_whole(
    dir: &Path,
    edits: u32,
    mut make: impl FnMut(&Path, u32) -> String + Send + 'static,
) {
    let daemon = Daemon::load(Options {
        source: switchyard::source::Source::Files(vec![dir.to_path_buf()]),
        watch: true,
        keep_generations: 1000,
        file_quiet: QuietTime(QUIET),
        ..Default::default()
    })
    .await
    .expect("loads");
    let cache = std::sync::Arc::clone(&daemon.cache);
    let telemetry = daemon.telemetry.clone();
    let mut serving = cache.subscribe();
    let running = tokio::spawn(daemon.serve(listeners().await, std::future::pending()));
    let mut done = Vec::new();
    for k in 2..=edits + 1 {
        let dir = dir.to_path_buf();
        let (back, how) = tokio::task::spawn_blocking(move || {
            let how = make(&dir, k);
            (make, how)
        })
        .await
        .expect("edits");
        make = back;
        done.push(how.clone());
        let want = whole(k);
        let served = serving.wait_for(|s| cluster_names(s.newest()) == want);
        assert!(
            tokio::time::timeout(Duration::from_secs(10), served)
                .await
                .is_ok(),
            "edit {k} ({how}) was never served whole; generations: {:?}",
            generations(&cache)
        );
    }
    running.abort();
    let published = generations(&cache);
    assert!(
        published.len() as u32 > edits,
        "every generation is kept: {published:?}"
    );
    for (number, names) in &published {
        assert!(
            (1..=edits + 1).any(|k| *names == whole(k)),
            "generation {number} holds a half-written edit: {names:?} (the edits: {done:?})"
        );
    }
    let failed = telemetry
        .metrics()
        .config_loads
        .get_or_create(&switchyard::metrics::ResultLabels { result: "failed" })
        .get();
    assert_eq!(
        failed, 0,
        "a load read a half-written file (the edits: {done:?})"
    );
}

/// Tools that write the files one after another, in place or by renames, with pauses
/// inside a file's write: every generation holds one whole edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_file_edit_is_never_served_half_written() {
    let seed = seed_from("SWITCHYARD_FILE_EDITS_SEED");
    let mut rng = Seeded(seed);
    let dir = tempfile::tempdir().expect("tmp");
    for file in FILES {
        let [first, second] = chunks(file, 1);
        std::fs::write(dir.path().join(format!("{file}.yaml")), first + &second).expect("write");
    }
    const TOOLS: [Tool; 4] = [
        Tool::GitCheckout,
        Tool::Vim,
        Tool::InPlace,
        Tool::RenameOver,
    ];
    edits_are_served_whole(dir.path(), 16, move |dir, k| {
        let tool = TOOLS[(rng.draw() % TOOLS.len() as u64) as usize];
        edit(dir, k, tool, &mut rng);
        format!("{k}: {tool:?} (seed {seed})")
    })
    .await;
}

/// A ConfigMap mount's swap (files as symlinks through `..data`) is followed: each swap is
/// served, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_swap_is_served_whole() {
    let dir = tempfile::tempdir().expect("tmp");
    swap(dir.path(), 1);
    for file in FILES {
        let name = format!("{file}.yaml");
        std::os::unix::fs::symlink(Path::new("..data").join(&name), dir.path().join(&name))
            .expect("symlink");
    }
    edits_are_served_whole(dir.path(), 5, |dir, k| {
        swap(dir, k);
        format!("{k}: swap")
    })
    .await;
}
