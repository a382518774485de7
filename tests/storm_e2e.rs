//! End to end: make-before-break when changes overlap and replicas fail. Two
//! Switchyard replicas on one directory, three real Envoy 1.40s (SotW, delta, SotW) whose ADS
//! cluster lists both, a request loop through each, and a seeded random schedule of edits
//! every 0.5-1.5 s:
//! - the route moves between two warm clusters;
//! - the first cluster's endpoints move between two upstreams;
//! - a new cluster behind a slow first health check, with the route moved to it, and 0.3-0.5 s
//!   later (while it warms) a route-only edit;
//! - an invalid edit (five kinds), which must never reach a proxy;
//! - kill -9 of a replica right after an edit (mid-change), and its restart.
//!
//! Every response says which route revision served it (a header the route adds). The bar: no
//! request fails, no Envoy NACKs, and every Envoy ends serving the files' last revision. The
//! seed is printed (set `STORM_SEED` to replay one); `STORM_EDITS` sets the schedule's
//! length (the suite's 14 keep a run near a minute; a soak sets more). With `--ordering off`
//! a shorter schedule with the same kinds of change must fail requests (the check can fail).

use switchyard_testkit as support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::envoy::{envoy_binary, eventually, free_port, Api, Envoy, Switchyard, Upstream};
use support::listener_item;

/// How long a new cluster's first health check takes.
const HEALTH_DELAY: Duration = Duration::from_millis(1000);
/// Requests per second through each Envoy.
const RATE: u32 = 100;
/// Upper bound on any load loop: 150 s, or 5 s an edit for a longer schedule (an hour at
/// most).
fn load_limit() -> Duration {
    Duration::from_secs((storm_edits() as u64 * 5).clamp(150, 3_600))
}

/// The schedule's length: `STORM_EDITS`, or the suite's 14.
fn storm_edits() -> usize {
    std::env::var("STORM_EDITS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(14)
}
/// How long the first config and the last edit may take to reach every Envoy.
const ARRIVE: Duration = Duration::from_secs(30);

/// These tests count request failures: one at a time on the 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A seeded random source (SplitMix64): the schedule replays from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

/// What the files say now.
#[derive(Clone, Debug)]
struct Files {
    /// The cluster route `/` goes to.
    route_to: String,
    /// Bumped by every edit: the header `x-revision` of the answers.
    revision: u32,
    /// Cluster x's endpoints are on upstream a2 (else a).
    x_on_a2: bool,
    /// New health-checked clusters added so far and still in the files.
    new_clusters: Vec<String>,
}

/// The upstreams' ports.
struct Ports {
    a: u16,
    a2: u16,
    b: u16,
}

fn eds_cluster(name: &str, health_checked: bool) -> String {
    let checks = if health_checked {
        r#"
    health_checks:
      - timeout: 5s
        interval: 10s
        healthy_threshold: 1
        unhealthy_threshold: 1
        http_health_check: { path: /healthz }"#
    } else {
        ""
    };
    format!(
        r#"
  - name: "{name}"
    connect_timeout: 1s
    type: EDS
    eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}{checks}
"#
    )
}

fn endpoints(name: &str, port: u16) -> String {
    format!(
        r#"
  - cluster_name: "{name}"
    endpoints:
      - lb_endpoints:
          - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
    )
}

impl Files {
    /// `mesh.yaml`: clusters x (a or a2) and y (b, health-checked), the new ones (b,
    /// health-checked), and route configuration `main` with `/` to `route_to`.
    fn mesh(&self, ports: &Ports) -> String {
        let mut clusters = eds_cluster("x", false) + &eds_cluster("y", true);
        let x_port = if self.x_on_a2 { ports.a2 } else { ports.a };
        let mut eps = endpoints("x", x_port) + &endpoints("y", ports.b);
        for z in &self.new_clusters {
            clusters += &eds_cluster(z, true);
            eps += &endpoints(z, ports.b);
        }
        format!(
            r#"clusters:{clusters}endpoints:{eps}routes:
  - name: main
    virtual_hosts:
      - name: all
        domains: ["*"]
        response_headers_to_add:
          - header: {{ key: x-revision, value: "{revision}" }}
        routes:
          - match: {{ prefix: / }}
            route: {{ cluster: "{to}" }}
"#,
            revision = self.revision,
            to = self.route_to
        )
    }
}

/// Invalid edits, each refused at load: the last good snapshot keeps serving.
const INVALID: [(&str, &str); 5] = [
    ("YAML syntax", "clusters:\n  - name: [unclosed\n"),
    (
        "unknown field",
        "clusters:\n  - name: bad\n    conect_timeout: 1s\n    type: STATIC\n",
    ),
    (
        "bad enum",
        "clusters:\n  - name: bad\n    connect_timeout: 1s\n    type: STATIK\n",
    ),
    (
        "duplicate name",
        "clusters:\n  - name: x\n    connect_timeout: 1s\n    type: STATIC\n",
    ),
    (
        "bad duration",
        "clusters:\n  - name: bad\n    connect_timeout: -1s\n    type: STATIC\n",
    ),
];

/// What one request loop saw.
#[derive(Debug, Default)]
struct Tally {
    /// Answers by route revision.
    answered: BTreeMap<u32, usize>,
    failed: usize,
    failures: Vec<String>,
    /// The revision of the latest answer.
    last: u32,
}

/// Requests through one Envoy at [`RATE`], a new connection each, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Tally>,
    latest: Arc<std::sync::atomic::AtomicU32>,
}

impl Load {
    fn start(port: u16) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let latest = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (flag, seen) = (Arc::clone(&stop), Arc::clone(&latest));
        let task = tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .pool_max_idle_per_host(0)
                .build()
                .expect("client");
            let url = format!("http://127.0.0.1:{port}/");
            let period = Duration::from_secs(1) / RATE;
            let started = Instant::now();
            let mut next = started;
            let mut tally = Tally::default();
            let limit = load_limit();
            while !flag.load(Ordering::Relaxed) && started.elapsed() < limit {
                let failure = match client.get(&url).send().await {
                    Ok(r) if r.status().is_success() => {
                        let revision = r
                            .headers()
                            .get("x-revision")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        *tally.answered.entry(revision).or_default() += 1;
                        tally.last = revision;
                        seen.store(revision, Ordering::Relaxed);
                        None
                    }
                    Ok(r) => {
                        let status = r.status();
                        let body = r.text().await.unwrap_or_default();
                        Some(format!("{status} {body:?}"))
                    }
                    Err(e) => Some(format!("error: {e}")),
                };
                if let Some(f) = failure {
                    tally.failed += 1;
                    if tally.failures.len() < 5 {
                        let at = humantime_utc();
                        tally.failures.push(format!("{f} at {at}"));
                    }
                }
                next += period;
                tokio::time::sleep_until(next.into()).await;
            }
            tally
        });
        Load { stop, task, latest }
    }

    fn latest(&self) -> u32 {
        self.latest.load(Ordering::Relaxed)
    }

    async fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("load loop")
    }
}

/// One replica: its ports stay the same across restarts.
struct Replica {
    ports: (u16, u16),
    running: Option<Switchyard>,
    /// Each incarnation logs to its own folder.
    starts: usize,
}

/// The stage: upstreams, the files, two replicas, three Envoys.
struct Storm {
    ports: Ports,
    _upstreams: Vec<Upstream>,
    dir: tempfile::TempDir,
    config: PathBuf,
    files: Files,
    replicas: Vec<Replica>,
    flags: Vec<&'static str>,
    envoys: Vec<(Envoy, u16)>,
    /// What happened, for the failure message.
    log: Vec<String>,
    started: Instant,
}

impl Storm {
    async fn start(ordering: bool) -> Option<Storm> {
        let envoy_bin = envoy_binary()?;
        let a = Upstream::start("upstream-a").await;
        let a2 = Upstream::start("upstream-a2").await;
        let b = Upstream::start_with_health_delay("upstream-b", HEALTH_DELAY).await;
        let ports = Ports {
            a: a.port,
            a2: a2.port,
            b: b.port,
        };
        let dir = tempfile::tempdir().expect("tmp");
        let config = dir.path().join("config");
        std::fs::create_dir(&config).expect("mkdir");
        let files = Files {
            route_to: "x".into(),
            revision: 1,
            x_on_a2: false,
            new_clusters: Vec::new(),
        };
        support::write(&config, "mesh.yaml", &files.mesh(&ports));
        let apis = [Api::Sotw, Api::Delta, Api::Sotw];
        let listener_ports: Vec<u16> = apis.iter().map(|_| free_port()).collect();
        for (i, port) in listener_ports.iter().enumerate() {
            support::write(
                &config,
                &format!("listener-{i}.yaml"),
                &format!(
                    "nodes:\n  - id: storm-{i}\nlisteners:{}",
                    listener_item(&format!("http{i}"), port, "main")
                ),
            );
        }
        let flags: Vec<&'static str> = if ordering {
            vec![]
        } else {
            vec!["--ordering", "off"]
        };
        let mut storm = Storm {
            ports,
            _upstreams: vec![a, a2, b],
            dir,
            config,
            files,
            replicas: (0..2)
                .map(|_| Replica {
                    ports: (free_port(), free_port()),
                    running: None,
                    starts: 0,
                })
                .collect(),
            flags,
            envoys: Vec::new(),
            log: Vec::new(),
            started: Instant::now(),
        };
        for r in 0..2 {
            storm.start_replica(r).await;
        }
        let second = storm.replicas[1].ports.0;
        for (i, api) in apis.iter().enumerate() {
            let envoy_dir = storm.dir.path().join(format!("envoy-{i}"));
            std::fs::create_dir(&envoy_dir).expect("mkdir");
            let envoy = Envoy::start_with(
                &api.two_replica_bootstrap(second),
                &envoy_bin,
                (storm.replicas[0].ports.0, free_port()),
                &format!("storm-{i}"),
                &envoy_dir,
                &["--disable-hot-restart"],
            )
            .await;
            storm.envoys.push((envoy, listener_ports[i]));
        }
        for (_, port) in &storm.envoys {
            let port = *port;
            let up = eventually(ARRIVE, || async move {
                support::envoy::http_get(port).await.as_deref() == Some("upstream-a")
            })
            .await;
            assert!(
                up.is_some(),
                "the first config never served traffic on {port}"
            );
        }
        Some(storm)
    }

    async fn start_replica(&mut self, r: usize) {
        self.replicas[r].starts += 1;
        let (ports, starts) = (self.replicas[r].ports, self.replicas[r].starts);
        let log_dir = self.dir.path().join(format!("replica-{r}-{starts}"));
        std::fs::create_dir(&log_dir).expect("mkdir");
        let started = Switchyard::start_on(&self.config, &log_dir, ports, &self.flags).await;
        self.replicas[r].running = Some(started);
    }

    fn note(&mut self, what: String) {
        let at = self.started.elapsed();
        eprintln!("storm {at:>6.2?}: {what}");
        self.log.push(format!("{at:.2?} {what}"));
    }

    /// Write the files' next revision in one atomic rename, as an editor does.
    fn write(&mut self, what: &str) {
        self.files.revision += 1;
        let text = self.files.mesh(&self.ports);
        let tmp = self.dir.path().join("mesh.yaml.tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, self.config.join("mesh.yaml")).expect("rename");
        let note = format!("revision {}: {what}", self.files.revision);
        self.note(note);
    }

    /// The route moves to the other warm cluster (x or y); new clusters go.
    fn move_route(&mut self) {
        let to = if self.files.route_to == "x" { "y" } else { "x" };
        self.files.route_to = to.into();
        self.files.new_clusters.clear();
        self.write(&format!("route to {to}, new clusters removed"));
    }

    /// A new health-checked cluster with the route moved to it.
    fn add_cluster(&mut self, n: usize) -> String {
        let name = format!("z{n}");
        self.files.new_clusters.push(name.clone());
        self.files.route_to = name.clone();
        self.write(&format!("new cluster {name}, the route to it"));
        name
    }

    fn bad_edit(&mut self, kind: usize) {
        let (what, text) = INVALID[kind];
        let path = self.config.join("bad.yaml");
        std::fs::write(&path, text).expect("write");
        self.note(format!("invalid edit: {what}"));
    }

    fn clear_bad_edit(&mut self) {
        let _ = std::fs::remove_file(self.config.join("bad.yaml"));
    }

    /// Every JSON line of every replica's every incarnation, with which (`replica.start`).
    fn log_lines(&self) -> Vec<(String, serde_json::Value)> {
        let mut lines = Vec::new();
        for (r, replica) in self.replicas.iter().enumerate() {
            for start in 1..=replica.starts {
                let path = self
                    .dir
                    .path()
                    .join(format!("replica-{r}-{start}/switchyard.log"));
                let log = std::fs::read_to_string(path).unwrap_or_default();
                lines.extend(
                    log.lines()
                        .filter_map(|l| serde_json::from_str(l).ok())
                        .map(|v| (format!("{r}.{start}"), v)),
                );
            }
        }
        lines
    }

    /// The log lines whose message has `text`: time, replica, node, type and message.
    fn logged(&self, text: &str) -> Vec<String> {
        self.log_lines()
            .into_iter()
            .filter(|(_, v)| v["message"].as_str().is_some_and(|m| m.contains(text)))
            .map(|(replica, v)| {
                format!(
                    "{} replica {replica} {} {}: {}",
                    v["timestamp"].as_str().unwrap_or(""),
                    v["node"].as_str().unwrap_or(""),
                    v["type"].as_str().unwrap_or(""),
                    v["message"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    /// How long each completed update plan took, from every replica's log (`took`), in
    /// seconds, sorted.
    fn plan_times(&self) -> Vec<f64> {
        let mut times: Vec<f64> = self
            .log_lines()
            .into_iter()
            .filter(|(_, v)| v["message"].as_str() == Some("Update plan completed."))
            .filter_map(|(_, v)| v["took"].as_str().and_then(seconds))
            .collect();
        times.sort_by(f64::total_cmp);
        times
    }

    /// A request loop through each Envoy.
    fn loads(&self) -> Vec<Load> {
        self.envoys
            .iter()
            .map(|(_, port)| Load::start(*port))
            .collect()
    }

    /// Run `edits` random changes, from `seed`. `alone`: 3-3.5 s between edits, and the route
    /// edit after a new cluster as long after it, so that no two changes overlap.
    async fn run(&mut self, seed: u64, edits: usize, alone: bool) {
        let (gap, follow) = if alone {
            ((3000, 3500), (3000, 3500))
        } else {
            ((500, 1500), (300, 500))
        };
        let mut rng = Rng(seed);
        let mut added = 0;
        let mut down: Option<(usize, Instant)> = None;
        for _ in 0..edits {
            tokio::time::sleep(rng.millis(gap.0, gap.1)).await;
            self.clear_bad_edit();
            if let Some((r, since)) = down {
                if since.elapsed() > Duration::from_millis(1500) {
                    self.start_replica(r).await;
                    self.note(format!("replica {r} restarted"));
                    down = None;
                }
            }
            match rng.below(10) {
                0 | 1 => self.move_route(),
                2 | 3 => {
                    self.files.x_on_a2 = !self.files.x_on_a2;
                    let on = if self.files.x_on_a2 { "a2" } else { "a" };
                    self.write(&format!("x's endpoints to {on}"));
                }
                4..=6 => {
                    added += 1;
                    self.add_cluster(added);
                    tokio::time::sleep(rng.millis(follow.0, follow.1)).await;
                    self.write("route-only edit while the new cluster warms");
                }
                7 => {
                    let kind = rng.below(INVALID.len() as u64) as usize;
                    self.bad_edit(kind);
                }
                _ => {
                    // Mid-change: a new cluster and its route, then a replica dies.
                    added += 1;
                    self.add_cluster(added);
                    if down.is_none() {
                        tokio::time::sleep(rng.millis(50, 300)).await;
                        let r = rng.below(2) as usize;
                        if let Some(mut s) = self.replicas[r].running.take() {
                            s.process.kill();
                        }
                        self.note(format!("replica {r} killed (-9)"));
                        down = Some((r, Instant::now()));
                    }
                }
            }
        }
        self.clear_bad_edit();
        if let Some((r, _)) = down {
            self.start_replica(r).await;
            self.note(format!("replica {r} restarted"));
        }
    }
}

/// A storm with ordering on: zero failed requests, no NACK, and every Envoy ends on the
/// files' last revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_storm_of_overlapping_edits_and_replica_kills_fails_no_request() {
    let seed = support::seed_from("STORM_SEED");
    let edits = storm_edits();
    // STORM_ALONE=1: the same kinds of change, none overlapping (docs/benchmarks.md).
    let alone = std::env::var("STORM_ALONE").is_ok_and(|v| v == "1");
    let _serial = SERIAL.lock().await;
    eprintln!("storm: seed {seed} (STORM_SEED={seed} replays it), {edits} edits, alone {alone}");
    let Some(mut storm) = Storm::start(true).await else {
        return;
    };
    let loads = storm.loads();
    storm.run(seed, edits, alone).await;
    // The last edit: back to x, new clusters gone.
    storm.files.route_to = "x".into();
    storm.files.new_clusters.clear();
    storm.write("the last edit: route to x, new clusters removed");
    let last = storm.files.revision;
    let arrived = eventually(ARRIVE, || async {
        loads.iter().all(|l| l.latest() == last)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut tallies = Vec::new();
    for load in loads {
        tallies.push(load.stop().await);
    }
    let total: usize = tallies
        .iter()
        .map(|t| t.failed + t.answered.values().sum::<usize>())
        .sum();
    let failed: usize = tallies.iter().map(|t| t.failed).sum();
    eprintln!(
        "storm (seed {seed}): {total} requests, {failed} failed, last revision {last}, arrived \
         after {arrived:?}; per Envoy: {:?}",
        tallies
            .iter()
            .map(|t| (t.failed, t.answered.len(), &t.failures))
            .collect::<Vec<_>>()
    );
    let times = storm.plan_times();
    let at = |q: f64| times.get(((times.len() as f64 - 1.0) * q).round() as usize);
    eprintln!(
        "storm (seed {seed}): {} plans completed, took median {:?} s, p90 {:?} s, max {:?} s",
        times.len(),
        at(0.5),
        at(0.9),
        times.last()
    );
    let context = format!(
        "seed {seed} (STORM_SEED={seed}); schedule {:#?}; the replicas on reconnects: {:#?}",
        storm.log,
        storm.logged("back on a new stream")
    );
    assert!(
        arrived.is_some(),
        "not every Envoy reached revision {last}; {context}"
    );
    assert_eq!(failed, 0, "requests failed: {tallies:?}; {context}");
    for (i, (envoy, _)) in storm.envoys.iter().enumerate() {
        for stat in [
            "cluster_manager.cds.update_rejected".to_string(),
            "listener_manager.lds.update_rejected".to_string(),
            format!("http.http{i}.rds.main.update_rejected"),
        ] {
            let rejected = envoy.stat(&stat).await.unwrap_or(0);
            assert_eq!(rejected, 0, "Envoy {i} NACKed ({stat}); {context}");
        }
        // Its clusters are the files': x and y, no leftover new cluster.
        let dump = envoy.config_dump("dynamic_active_clusters").await;
        let mut names: Vec<String> = dump["configs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["cluster"]["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        assert_eq!(names, ["x", "y"], "Envoy {i}'s clusters; {context}");
    }
    // Every invalid edit was refused by every running replica, and none reached a proxy
    // (no NACK above).
    for replica in &storm.replicas {
        if let Some(s) = &replica.running {
            assert!(s.status().await.is_some(), "a replica stopped answering");
        }
    }
}

/// The same kinds of change with `--ordering off` fail requests: the check above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_storm_with_ordering_off_fails_requests() {
    let _serial = SERIAL.lock().await;
    let Some(mut storm) = Storm::start(false).await else {
        return;
    };
    let loads = storm.loads();
    tokio::time::sleep(Duration::from_millis(500)).await;
    storm.add_cluster(1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    storm.write("route-only edit while the new cluster warms");
    tokio::time::sleep(HEALTH_DELAY * 2).await;
    let mut failed = 0;
    for load in loads {
        failed += load.stop().await.failed;
    }
    eprintln!("storm with --ordering off: {failed} failed");
    assert!(
        failed > 0,
        "with ordering off the storm was expected to fail requests"
    );
}

/// Now, as the replicas' logs write it (UTC, to the millisecond).
fn humantime_utc() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    format!(
        "{:02}:{:02}:{:02}.{:03}Z",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60,
        now.subsec_millis()
    )
}

/// A duration as Rust's `Debug` writes it (`1.5s`, `812.3ms`, `40µs`, `0ns`), in seconds.
fn seconds(text: &str) -> Option<f64> {
    let units = [
        ("ns", 1e-9),
        ("µs", 1e-6),
        ("us", 1e-6),
        ("ms", 1e-3),
        ("s", 1.0),
    ];
    units.iter().find_map(|(unit, scale)| {
        let number = text.strip_suffix(unit)?;
        number.parse::<f64>().ok().map(|n| n * scale)
    })
}
