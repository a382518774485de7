//! A real etcd (Debian's `etcd-server`, which `scripts/deps` installs; `ETCD_BIN` points
//! elsewhere) on 127.0.0.1, one member with a data directory of its own, killed on drop.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::envoy::{debian_tool, eventually, free_port, Process};

pub struct Etcd {
    pub process: Process,
    pub client_port: u16,
    peer_port: u16,
    dir: std::path::PathBuf,
    /// With TLS: the CA's PEM and the client certificate and key etcd requires.
    tls: Option<(String, String, String)>,
    /// Another address it listens on for clients, beside 127.0.0.1 (a partition's host side).
    also_on: Option<String>,
}

impl Etcd {
    /// Start a one-member cluster with its data and log under `dir`; ready when it answers.
    pub async fn start(dir: &Path) -> Etcd {
        Etcd::start_also_on(dir, None).await
    }

    /// [`Etcd::start`], listening for clients on `also_on` too (the host's side of a
    /// `netns::Netns`, for a replica inside it), on the same port.
    pub async fn start_also_on(dir: &Path, also_on: Option<&str>) -> Etcd {
        let (client_port, peer_port) = (free_port(), free_port());
        let process = Etcd::spawn(dir, client_port, peer_port, false, also_on);
        let etcd = Etcd {
            process,
            client_port,
            peer_port,
            dir: dir.to_path_buf(),
            tls: None,
            also_on: also_on.map(str::to_string),
        };
        etcd.wait_up().await;
        etcd
    }

    /// A member that serves clients over TLS only and requires their certificates
    /// (`--client-cert-auth`): `dir/etcd-ca.pem`, `dir/etcd-client.{pem,key}` for them.
    pub async fn start_tls(dir: &Path) -> Etcd {
        let ca = super::certs::Ca::new("etcd test CA");
        ca.write(dir, "etcd-ca");
        ca.leaf(&["127.0.0.1", "localhost"], &[])
            .write(dir, "etcd-server");
        let client = ca.leaf(&["switchyard"], &[]);
        client.write(dir, "etcd-client");
        let (client_port, peer_port) = (free_port(), free_port());
        let process = Etcd::spawn(dir, client_port, peer_port, true, None);
        let etcd = Etcd {
            process,
            client_port,
            peer_port,
            dir: dir.to_path_buf(),
            tls: Some((ca.pem.clone(), client.cert, client.key)),
            also_on: None,
        };
        etcd.wait_up().await;
        etcd
    }

    /// Kill it (SIGKILL) and start it again on the same ports and data.
    pub async fn restart(&mut self) {
        self.kill();
        self.start_again().await;
    }

    /// Kill it (SIGKILL): nothing answers on its port until [`Etcd::start_again`].
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Start it again on the same ports and data, once it answers.
    pub async fn start_again(&mut self) {
        self.process = Etcd::spawn(
            &self.dir,
            self.client_port,
            self.peer_port,
            self.tls.is_some(),
            self.also_on.as_deref(),
        );
        self.wait_up().await;
    }

    async fn wait_up(&self) {
        let up = eventually(Duration::from_secs(20), || async {
            self.client().await.is_some()
        })
        .await;
        assert!(up.is_some(), "etcd did not answer on {}", self.client_port);
    }

    fn spawn(
        dir: &Path,
        client_port: u16,
        peer_port: u16,
        tls: bool,
        also_on: Option<&str>,
    ) -> Process {
        let binary = debian_tool("ETCD_BIN", "etcd", "etcd-server");
        let data = dir.join("etcd-data");
        let scheme = if tls { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{client_port}");
        let listen = match also_on {
            Some(host) => format!("{client},{scheme}://{host}:{client_port}"),
            None => client.clone(),
        };
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new(binary);
        cmd.arg("--name")
            .arg("s1")
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--listen-client-urls",
                &listen,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("s1={peer}")])
            .args(["--log-level", "warn"]);
        if tls {
            cmd.arg("--cert-file")
                .arg(dir.join("etcd-server.pem"))
                .arg("--key-file")
                .arg(dir.join("etcd-server.key"))
                .arg("--trusted-ca-file")
                .arg(dir.join("etcd-ca.pem"))
                .arg("--client-cert-auth");
        }
        Process::spawn("etcd", cmd, dir.join("etcd.log"))
    }

    /// `HOST:PORT` of its client endpoint.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// A client, if etcd answers a read (as `root` with `password`, once auth is on).
    pub async fn client(&self) -> Option<switchyard_etcd::Client> {
        self.client_as(None).await
    }

    /// A client authenticated as `user` (name, password), if etcd answers a read.
    pub async fn client_as(&self, user: Option<(&str, &str)>) -> Option<switchyard_etcd::Client> {
        let mut options = switchyard_etcd::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(2));
        let mut endpoint = format!("http://{}", self.endpoint());
        if let Some((ca, cert, key)) = &self.tls {
            endpoint = format!("https://{}", self.endpoint());
            options = options.with_tls(
                switchyard_etcd::TlsOptions::new()
                    .ca_certificate(switchyard_etcd::Certificate::from_pem(ca))
                    .identity(switchyard_etcd::Identity::from_pem(cert, key)),
            );
        }
        if let Some((name, password)) = user {
            options = options.with_user(name, password);
        }
        let mut client = switchyard_etcd::Client::connect([endpoint], Some(options))
            .await
            .ok()?;
        client.get("/", None).await.ok()?;
        Some(client)
    }

    /// Put every `(key, value)` in one transaction; the store's revision after.
    pub async fn put_all(&self, pairs: &[(&str, &str)]) -> i64 {
        let mut client = self.client().await.expect("etcd answers");
        let ops: Vec<switchyard_etcd::TxnOp> = pairs
            .iter()
            .map(|(k, v)| switchyard_etcd::TxnOp::put(*k, *v, None))
            .collect();
        let response = client
            .txn(switchyard_etcd::Txn::new().and_then(ops))
            .await
            .expect("txn");
        response.header().expect("a header").revision()
    }

    /// Put `value` at `key`; the store's revision after.
    pub async fn put(&self, key: &str, value: &str) -> i64 {
        let mut client = self.client().await.expect("etcd answers");
        let response = client.put(key, value, None).await.expect("put");
        response.header().expect("a header").revision()
    }
}

/// A three-member etcd cluster on 127.0.0.1 (members `m1`..`m3`, each with its own data
/// directory under `dir`), for the fault tests: members are killed (SIGKILL) and started
/// again on the same ports and data.
pub struct EtcdCluster {
    members: Vec<Option<Process>>,
    ports: Vec<(u16, u16)>,
    dir: std::path::PathBuf,
}

impl EtcdCluster {
    /// Start three members; ready when each answers.
    pub async fn start(dir: &Path) -> EtcdCluster {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let mut cluster = EtcdCluster {
            members: Vec::new(),
            ports,
            dir: dir.to_path_buf(),
        };
        for i in 0..3 {
            let member = cluster.spawn(i, "new");
            cluster.members.push(Some(member));
        }
        for i in 0..3 {
            cluster.wait_up(i).await;
        }
        cluster
    }

    fn spawn(&self, i: usize, state: &str) -> Process {
        let binary = debian_tool("ETCD_BIN", "etcd", "etcd-server");
        let name = format!("m{}", i + 1);
        let (client_port, peer_port) = self.ports[i];
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let initial: Vec<String> = self
            .ports
            .iter()
            .enumerate()
            .map(|(j, (_, p))| format!("m{}=http://127.0.0.1:{p}", j + 1))
            .collect();
        let mut cmd = Command::new(binary);
        cmd.arg("--name")
            .arg(&name)
            .arg("--data-dir")
            .arg(self.dir.join(format!("{name}-data")))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", "switchyard-tests"])
            .args(["--log-level", "warn"]);
        let log = self.dir.join(format!("{name}.log"));
        Process::spawn("etcd member", cmd, log)
    }

    /// `HOST:PORT` of member `i`'s client endpoint.
    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i].0)
    }

    /// Every member's endpoint, joined by `,` (as `--source` takes them).
    pub fn endpoints(&self) -> String {
        (0..3)
            .map(|i| self.endpoint(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A client of member `i` alone, if it answers a read.
    pub async fn member(&self, i: usize) -> Option<switchyard_etcd::Client> {
        let options = switchyard_etcd::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(2));
        let mut client = switchyard_etcd::Client::connect(
            [format!("http://{}", self.endpoint(i))],
            Some(options),
        )
        .await
        .ok()?;
        client.get("/", None).await.ok()?;
        Some(client)
    }

    /// A client of any running member that answers a read, within 10 s (a member may be
    /// electing a leader and refuse reads for a moment).
    pub async fn client(&self) -> Option<switchyard_etcd::Client> {
        for _ in 0..50 {
            for i in 0..3 {
                if self.members[i].is_some() {
                    if let Some(client) = self.member(i).await {
                        return Some(client);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    async fn wait_up(&self, i: usize) {
        let up = eventually(Duration::from_secs(30), || async {
            self.member(i).await.is_some()
        })
        .await;
        assert!(up.is_some(), "etcd member m{} did not answer", i + 1);
    }

    /// The member that leads now (as the first member that answers says).
    pub async fn leader(&self) -> usize {
        for _ in 0..100 {
            if let Some(mut client) = self.client().await {
                if let Ok(status) = client.status().await {
                    let leader = status.leader();
                    for i in 0..3 {
                        let Some(mut member) = self.member(i).await else {
                            continue;
                        };
                        if let Ok(s) = member.status().await {
                            if s.header().map(|h| h.member_id()) == Some(leader) {
                                return i;
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no etcd member leads");
    }

    /// Kill member `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut member) = self.members[i].take() {
            member.kill();
        }
    }

    /// Start member `i` again on its ports and data; ready when it answers.
    pub async fn restart(&mut self, i: usize) {
        self.kill(i);
        self.members[i] = Some(self.spawn(i, "existing"));
        self.wait_up(i).await;
    }

    /// Start every killed member again (all at once: a cluster with no quorum needs them
    /// together).
    pub async fn restart_all(&mut self) {
        for i in 0..3 {
            if self.members[i].is_none() {
                self.members[i] = Some(self.spawn(i, "existing"));
            }
        }
        for i in 0..3 {
            self.wait_up(i).await;
        }
    }
}
