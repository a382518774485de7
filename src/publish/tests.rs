//! Loads and publication: edits reload, broken files keep the last good config, secret
//! files swapped as Kubernetes swaps them, rollouts with a state directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::cache::Cache;
use crate::config::LoadOptions;
use crate::metrics::ResultLabels;
use crate::source::files::Watching;
use crate::state::StateDir;
use crate::telemetry::Telemetry;

/// How long to wait for what a file event should bring about.
const WAIT: Duration = Duration::from_secs(5);

/// Wait until the newest generation is `number` (woken by each publication, not polled).
async fn generation(cache: &Cache, number: u64) {
    let mut serving = cache.subscribe();
    let reached = serving.wait_for(|s| s.newest().number == number);
    if tokio::time::timeout(WAIT, reached).await.is_err() {
        panic!(
            "generation {number} never came (have {})",
            cache.current().number
        );
    }
}

/// Wait until a load's report says `done` (woken by each load).
async fn report(reloader: &Reloader, done: impl Fn(&LoadReport) -> bool) {
    let mut reports = reloader.reports();
    let reached = reports.wait_for(|r| r.as_ref().is_some_and(&done));
    assert!(
        tokio::time::timeout(WAIT, reached).await.is_ok(),
        "no such load: the last was {:?}",
        reloader.last_report()
    );
}

/// A reloader over `root`, publishing into a fresh cache.
fn reloader_over(root: PathBuf) -> (Arc<Cache>, Arc<Reloader>, Telemetry) {
    let cache = Arc::new(Cache::new());
    let telemetry = Telemetry::default();
    let reloader = Reloader::new(
        vec![root],
        LoadOptions::default(),
        Arc::clone(&cache),
        telemetry.clone(),
    );
    (cache, Arc::new(reloader), telemetry)
}

/// The files source on `reloader`'s paths, armed now.
fn watching(reloader: &Arc<Reloader>) -> Watching {
    Watching::arm(
        Arc::clone(reloader) as Arc<dyn crate::source::Sink>,
        reloader.loading.paths.clone(),
        reloader.telemetry.clone(),
        Default::default(),
    )
}

/// Run `watching` in a task until the returned trigger fires.
fn run_watch(watching: Watching) -> (crate::shutdown::Trigger, tokio::task::JoinHandle<()>) {
    let (stop, shutdown) = crate::shutdown::channel();
    (stop, tokio::spawn(watching.run(shutdown)))
}

const GOOD: &str = "clusters: [{name: a, connect_timeout: 1s}]\n";
const CHANGED: &str = "clusters: [{name: a, connect_timeout: 2s}]\n";

/// The connect_timeout of cluster `a` in the generation `node` gets.
fn timeout_for(cache: &Cache, node: &str) -> String {
    let snapshot = cache
        .for_node(&crate::config::selector::NodeFacts::new(node, ""))
        .snapshot_for(&crate::config::selector::NodeFacts::new(node, ""));
    let a = &snapshot
        .get(crate::resource::ResourceType::Cluster)
        .resources["a"];
    let json = crate::config::json::resource_json(a, &a.body).expect("json");
    json["connectTimeout"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Under a rollout policy the state directory keeps what was promoted, not every load;
/// after a restart that copy serves every node and the files roll out from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_rollouts_the_state_dir_keeps_what_was_promoted() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    let file = config.join("a.yaml");
    let state_dir = dir.path().join("state");
    let policy = || {
        crate::rollout::Policy::new(Some("canary-*".into()), None, Duration::ZERO).expect("policy")
    };
    let start = || {
        let cache = Arc::new(Cache::with_rollouts(policy()));
        let publisher = Arc::new(
            Publisher::new(
                Arc::clone(&cache),
                Telemetry::default(),
                vec![config.clone()],
                LoadOptions::default(),
            )
            .with_state(StateDir::open(&state_dir).expect("state")),
        );
        let reloader = Reloader::new(
            vec![config.clone()],
            LoadOptions::default(),
            Arc::clone(&cache),
            Telemetry::default(),
        )
        .publishing_to(Arc::clone(&publisher));
        (cache, Arc::new(reloader), publisher)
    };
    let kept = {
        let state_dir = state_dir.clone();
        move || {
            let roots = StateDir::open(&state_dir)
                .expect("state")
                .last_good()
                .expect("a copy");
            std::fs::read_to_string(roots[0].join("a.yaml")).expect("copy")
        }
    };

    std::fs::write(&file, GOOD).expect("write");
    let (cache, reloader, publisher) = start();
    reloader.reload().expect("loads");
    assert_eq!(kept(), GOOD, "the first generation is stable at once");

    std::fs::write(&file, CHANGED).expect("write");
    reloader.reload().expect("loads");
    assert_eq!(timeout_for(&cache, "canary-1"), "2s");
    assert_eq!(timeout_for(&cache, "edge-1"), "1s");
    assert_eq!(kept(), GOOD, "a candidate is not kept");
    let promoted = cache.promote().expect("in progress");
    // The keeper starts after the promotion (a task may first run that late): it goes by
    // what the state directory keeps, not by what serves when it starts.
    let (_stop, shutdown) = crate::shutdown::channel();
    tokio::spawn(Arc::clone(&publisher).keep_promoted(shutdown));
    let mut kept_generation = publisher.kept();
    let keeping = kept_generation.wait_for(|&n| n == promoted);
    assert!(
        tokio::time::timeout(WAIT, keeping).await.is_ok(),
        "the promoted generation is never kept"
    );
    assert_eq!(kept(), CHANGED, "the promoted generation is kept");

    // A restart with newer files: the kept copy serves every node, the files roll out.
    drop((reloader, publisher));
    let third = "clusters: [{name: a, connect_timeout: 3s}]\n";
    std::fs::write(&file, third).expect("write");
    let (cache, reloader, publisher) = start();
    assert!(publisher.serve_promoted_first().is_some());
    reloader.reload().expect("loads");
    assert_eq!(timeout_for(&cache, "edge-1"), "2s");
    assert_eq!(timeout_for(&cache, "canary-1"), "3s");
    assert_eq!(kept(), CHANGED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_reload_and_broken_files_keep_the_last_good_config() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("a.yaml");
    std::fs::write(&file, GOOD).expect("write");
    let (cache, reloader, telemetry) = reloader_over(dir.path().to_path_buf());
    reloader.reload().expect("first load");
    assert_eq!(cache.current().number, 1);
    // Armed here, before the edits below.
    let (stop_tx, task) = run_watch(watching(&reloader));

    // An edit in place.
    std::fs::write(&file, CHANGED).expect("write");
    generation(&cache, 2).await;

    // A broken edit: reported, not served.
    std::fs::write(&file, "clusters: [{name: a, connect_timeout: ").expect("write");
    report(&reloader, |r| !r.ok()).await;
    assert_eq!(
        cache.current().number,
        2,
        "the last good config keeps serving"
    );
    let m = telemetry.metrics();
    let loads = |result| m.config_loads.get_or_create(&ResultLabels { result }).get();
    assert!(m.file_watch_events.get() >= 2);
    assert!(loads("ok") >= 2 && loads("failed") >= 1);

    // An editor's atomic rename-over fixes it.
    let tmp = dir.path().join(".a.yaml.swp");
    std::fs::write(&tmp, GOOD).expect("write");
    std::fs::rename(&tmp, &file).expect("rename");
    generation(&cache, 3).await;
    // The report is stored just after the publication.
    report(&reloader, |r| r.ok() && r.generation == 3).await;

    stop_tx.fire();
    task.await.expect("watch task ends on shutdown");
}

/// An edit made while the first load runs (seconds, for a large config) is not lost:
/// the watch is armed before that load, and loads the edit once it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_during_the_first_load_is_loaded_once_the_watch_runs() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("a.yaml");
    std::fs::write(&file, GOOD).expect("write");
    let (cache, reloader, _) = reloader_over(dir.path().to_path_buf());
    let watching = watching(&reloader);
    reloader.reload().expect("first load");
    // The edit lands after the first load read the files, before the watch task runs.
    std::fs::write(&file, CHANGED).expect("write");
    let (stop_tx, task) = run_watch(watching);
    generation(&cache, 2).await;
    stop_tx.fire();
    task.await.expect("watch task ends on shutdown");
}

/// A load of the files for the watch is not published when the files moved while they were
/// read (an edit may have begun meanwhile, and be read in half), and not reported either:
/// the last report stays the last published read.
#[test]
fn a_load_during_which_the_files_moved_is_not_published() {
    use crate::source::Sink;
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("a.yaml"), GOOD).expect("write");
    let (cache, reloader, _) = reloader_over(dir.path().to_path_buf());
    assert_eq!(reloader.files_changed_unless(&|| false), Some(1));
    assert_eq!(cache.current().number, 1);
    std::fs::write(dir.path().join("a.yaml"), CHANGED).expect("write");
    assert_eq!(reloader.files_changed_unless(&|| true), None);
    assert_eq!(cache.current().number, 1, "not published");
    let report = reloader.last_report().expect("report");
    assert_eq!(
        report.read,
        Some(1),
        "the last report is the published read's"
    );
    assert_eq!(reloader.files_changed_unless(&|| false), Some(3));
    assert_eq!(cache.current().number, 2);
    assert_eq!(timeout_for(&cache, "edge-1"), "2s");
}

#[test]
fn a_reload_that_changes_nothing_publishes_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("a.yaml"), GOOD).expect("write");
    let cache = Arc::new(Cache::new());
    let reloader = Reloader::new(
        vec![dir.path().to_path_buf()],
        LoadOptions::default(),
        Arc::clone(&cache),
        Telemetry::default(),
    );
    reloader.reload().expect("loads");
    // Same content, rewritten (and with keys in another order).
    std::fs::write(
        dir.path().join("a.yaml"),
        "clusters: [{connect_timeout: 1s, name: a}]\n",
    )
    .expect("write");
    reloader.reload().expect("loads");
    assert_eq!(cache.current().number, 1);
    std::fs::write(dir.path().join("a.yaml"), CHANGED).expect("write");
    reloader.reload().expect("loads");
    assert_eq!(cache.current().number, 2);
    let report = reloader.last_report().expect("report");
    assert!(report.ok() && report.generation == 2);
}

/// A file modified after a read of the files began is unread (`config.unread`), even when
/// the load ended after the edit: the read may have listed or stamped it before the edit.
/// One modified before the read began was read.
#[test]
fn an_edit_made_while_a_load_ran_is_unread() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("a.yaml");
    std::fs::write(&file, GOOD).expect("write");
    let (_cache, reloader, _) = reloader_over(dir.path().to_path_buf());
    reloader.reload().expect("loads");
    let report = reloader.last_report().expect("report");
    let began = report
        .began
        .expect("a read of the files says when it began");
    assert_eq!(reloader.unread_edit(), None, "written before the read");

    let touch = |at: SystemTime| {
        std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(at))
            .expect("set the modification time");
    };
    // Modified while the load ran: after its read began, before its report.
    assert!(began < report.at, "a load takes time");
    let during = began + report.at.duration_since(began).expect("ordered") / 2;
    touch(during);
    let (unread, at) = reloader
        .unread_edit()
        .expect("an edit after the read began");
    assert_eq!(unread, file);
    assert!(at > began, "{at:?} {began:?}");
    touch(began - Duration::from_millis(1));
    assert_eq!(reloader.unread_edit(), None);
}

/// Secret files named by `switchyard_files` are watched where they are, outside the
/// config paths, and a Kubernetes Secret update (a `..data` symlink swapped to a new
/// directory beside the files' links) reloads.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_files_swapped_as_kubernetes_does_reload() {
    let root = tempfile::tempdir().expect("tmp");
    let config = root.path().join("config");
    let certs = root.path().join("certs");
    std::fs::create_dir_all(&config).expect("mkdir");
    std::fs::create_dir_all(&certs).expect("mkdir");
    // certs/tls.crt -> ..data/tls.crt, ..data -> ..v1 (as the kubelet lays it out).
    let version = |n: u32| {
        let dir = certs.join(format!("..v{n}"));
        std::fs::create_dir(&dir).expect("mkdir");
        let pair = rcgen::generate_simple_self_signed(vec![format!("v{n}")]).expect("cert");
        std::fs::write(dir.join("tls.crt"), pair.cert.pem()).expect("write");
        std::fs::write(dir.join("tls.key"), pair.signing_key.serialize_pem()).expect("write");
        let tmp = certs.join("..data_tmp");
        std::os::unix::fs::symlink(format!("..v{n}"), &tmp).expect("link");
        std::fs::rename(&tmp, certs.join("..data")).expect("swap");
    };
    version(1);
    for name in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{name}"), certs.join(name)).expect("link");
    }
    std::fs::write(
        config.join("secrets.yaml"),
        format!(
            "secrets:\n- name: edge\n  switchyard_files: {{certificate_chain: {}, private_key: {}}}\n",
            certs.join("tls.crt").display(),
            certs.join("tls.key").display()
        ),
    )
    .expect("write");
    let (cache, reloader, _) = reloader_over(config.clone());
    // Armed before the first load, as the daemon does: the secret directory is added
    // once the load names it.
    let watching = watching(&reloader);
    reloader.reload().expect("first load");
    let (stop_tx, task) = run_watch(watching);
    let serial = |cache: &Cache| {
        cache
            .current()
            .config
            .certificates()
            .map(|c| c.subject.clone())
            .collect::<Vec<_>>()
    };
    assert!(serial(&cache)[0].contains("rcgen"));
    let first = cache.current().number;
    // Let the watch re-arm for the secret directory (it also loads once more, finding
    // nothing new), then swap.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(cache.current().number, first, "nothing changed yet");
    version(2);
    generation(&cache, first + 1).await;
    stop_tx.fire();
    task.await.expect("ends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_directory_is_followed() {
    let parent = tempfile::tempdir().expect("tmp");
    let dir = parent.path().join("snap");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("a.yaml"), GOOD).expect("write");
    let (cache, reloader, _) = reloader_over(dir.clone());
    reloader.reload().expect("first load");
    let (stop_tx, task) = run_watch(watching(&reloader));
    for (round, content) in [CHANGED, GOOD].into_iter().enumerate() {
        // Build a new directory beside it and rename it over the old one.
        let next = parent.path().join(format!("snap.new{round}"));
        std::fs::create_dir(&next).expect("mkdir");
        std::fs::write(next.join("a.yaml"), content).expect("write");
        let old = parent.path().join(format!("snap.old{round}"));
        std::fs::rename(&dir, &old).expect("move old away");
        std::fs::rename(&next, &dir).expect("move new in");
        generation(&cache, round as u64 + 2).await;
    }
    stop_tx.fire();
    task.await.expect("ends");
}

/// Under the fleet's rollout the sink only hands loads over: nothing it loads is published
/// by it, not even the first; whoever publishes the load later says so in its report, and
/// the apply's note rides with the load to the history entry of the generation it becomes.
#[tokio::test]
async fn handed_to_the_fleets_rollout_a_load_is_never_published_by_the_sink() {
    let cache = Arc::new(Cache::new());
    let telemetry = Telemetry::default();
    let heads = Arc::new(Heads::default());
    let reloader = Reloader::new(
        Vec::new(),
        LoadOptions::default(),
        Arc::clone(&cache),
        telemetry.clone(),
    )
    .hand_loads_to(Arc::clone(&heads));
    assert!(reloader.publisher().is_none(), "it publishes nowhere");
    let publisher = Publisher::new(
        Arc::clone(&cache),
        telemetry,
        Vec::new(),
        LoadOptions::default(),
    );
    let documents = |text: &str| vec![crate::config::Document::text("a.yaml", text)];
    let note = crate::source::etcd::ApplyNote {
        author: Some("ana".into()),
        message: Some("first".into()),
        ..Default::default()
    };

    reloader
        .reload_documents(&documents(GOOD), 5, Some(note))
        .expect("loads");
    assert_eq!(
        cache.current().number,
        0,
        "the sink published the first load"
    );
    let report = reloader.last_report().expect("a report");
    assert!(report.ok() && report.pending && report.generation == 0);
    assert_eq!(report.revision, Some(5));
    assert!(heads.take_config(4).is_none(), "not the load of revision 4");

    // Served at start by the daemon, as the fleet's rollout names it.
    let (config, work) = heads.take_config(5).expect("the load of revision 5 waits");
    assert_eq!(work.parsed, 1);
    let from = Publication {
        revision: Some(5),
        note: heads.note_of(5),
        work,
    };
    let generation = publisher.publish_named(config, from);
    assert_eq!(generation, 1);
    reloader.load_reports().loaded_as(5, generation);
    let report = reloader.last_report().expect("a report");
    assert!(!report.pending && report.generation == 1, "{report:?}");
    let entry = &publisher.history()[0];
    assert_eq!(entry.generation, 1);
    assert_eq!(entry.author.as_deref(), Some("ana"));
    assert_eq!(entry.message.as_deref(), Some("first"));

    // The next load waits for the rollout, whole, in the one slot; the first is still
    // there to propose, without its configuration (taken to serve it).
    reloader
        .reload_documents(&documents(CHANGED), 6, None)
        .expect("loads");
    assert_eq!(cache.current().number, 1, "the sink published a later load");
    let report = reloader.last_report().expect("a report");
    assert!(report.pending && report.generation == 1);
    let head = tokio::time::timeout(WAIT, heads.next())
        .await
        .expect("a load waits");
    assert_eq!(head.revision, 6, "the newer load replaced the older");
    assert!(head.config.is_some(), "handed over whole");
    assert!(heads.note_of(6).is_none());

    // A load that fails is reported as failed, and nothing is handed over.
    let failed = reloader.reload_documents(
        &documents("clusters: [{name: a, connect_timeout: "),
        7,
        None,
    );
    assert!(failed.is_err());
    assert!(heads.take_config(7).is_none());
    assert!(!reloader.last_report().expect("a report").ok());
}

/// The copy kept in `--state-dir` is what was published: an edit that lands after a load
/// read the files (mid-load) is not kept as the last good copy unchecked, since it went
/// through no check (pre-flight, the emptied-group guard); the copy before stays, and the
/// edit is kept once it loads and is published itself.
#[test]
fn the_kept_copy_is_what_was_published_not_an_edit_made_during_the_load() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    let file = config.join("a.yaml");
    let state_dir = dir.path().join("state");
    let cache = Arc::new(Cache::new());
    let publisher = Publisher::new(
        Arc::clone(&cache),
        Telemetry::default(),
        vec![config.clone()],
        LoadOptions::default(),
    )
    .with_state(StateDir::open(&state_dir).expect("state"));
    let kept = || {
        let roots = StateDir::open(&state_dir)
            .expect("state")
            .last_good()
            .expect("a copy");
        std::fs::read_to_string(roots[0].join("a.yaml")).expect("copy")
    };
    let load = || {
        crate::config::load(std::slice::from_ref(&config), &LoadOptions::default()).expect("loads")
    };
    std::fs::write(&file, GOOD).expect("write");
    publisher.publish_load(load(), Publication::default());
    assert_eq!(kept(), GOOD);
    // Loaded, then edited before it is published.
    std::fs::write(&file, CHANGED).expect("write");
    let read_before_the_edit = {
        std::fs::write(&file, GOOD.replace("1s", "5s")).expect("write");
        let config = load();
        std::fs::write(&file, CHANGED).expect("write");
        config
    };
    publisher.publish_load(read_before_the_edit, Publication::default());
    assert_eq!(
        kept(),
        GOOD,
        "the edit is not kept: it was not what was published"
    );
    // Loaded and published itself: kept.
    publisher.publish_load(load(), Publication::default());
    assert_eq!(kept(), CHANGED);
}
