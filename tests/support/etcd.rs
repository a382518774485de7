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
}

impl Etcd {
    /// Start a one-member cluster with its data and log under `dir`; ready when it answers.
    pub async fn start(dir: &Path) -> Etcd {
        let (client_port, peer_port) = (free_port(), free_port());
        let process = Etcd::spawn(dir, client_port, peer_port);
        let etcd = Etcd {
            process,
            client_port,
            peer_port,
            dir: dir.to_path_buf(),
        };
        etcd.wait_up().await;
        etcd
    }

    /// Kill it (SIGKILL) and start it again on the same ports and data.
    pub async fn restart(&mut self) {
        self.process.kill();
        self.process = Etcd::spawn(&self.dir, self.client_port, self.peer_port);
        self.wait_up().await;
    }

    async fn wait_up(&self) {
        let up = eventually(Duration::from_secs(20), || async {
            self.client().await.is_some()
        })
        .await;
        assert!(up.is_some(), "etcd did not answer on {}", self.client_port);
    }

    fn spawn(dir: &Path, client_port: u16, peer_port: u16) -> Process {
        let binary = debian_tool("ETCD_BIN", "etcd", "etcd-server");
        let data = dir.join("etcd-data");
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new(binary);
        cmd.arg("--name")
            .arg("s1")
            .arg("--data-dir")
            .arg(&data)
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
            .args(["--initial-cluster", &format!("s1={peer}")])
            .args(["--log-level", "warn"]);
        Process::spawn("etcd", cmd, dir.join("etcd.log"))
    }

    /// `HOST:PORT` of its client endpoint.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// A client, if etcd answers a read.
    pub async fn client(&self) -> Option<etcd_client::Client> {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(2));
        let mut client = etcd_client::Client::connect([self.endpoint()], Some(options))
            .await
            .ok()?;
        client.get("/", None).await.ok()?;
        Some(client)
    }

    /// Put every `(key, value)` in one transaction; the store's revision after.
    pub async fn put_all(&self, pairs: &[(&str, &str)]) -> i64 {
        let mut client = self.client().await.expect("etcd answers");
        let ops: Vec<etcd_client::TxnOp> = pairs
            .iter()
            .map(|(k, v)| etcd_client::TxnOp::put(*k, *v, None))
            .collect();
        let response = client
            .txn(etcd_client::Txn::new().and_then(ops))
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
