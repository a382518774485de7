//! `switchyard loadgen` against the `switchyard serve` binary on 127.0.0.1: simulated
//! proxies sync, a trigger edits the files, every proxy gets the change, and the JSON report
//! says so.

use switchyard_testkit as support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{eds_cluster, rds_listener, route_to, write};

fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.to_string())
        .expect("a free port")
}

/// The report's JSON, from a loadgen run with `args`.
fn loadgen(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("loadgen")
        .args(args)
        .args(["--output", "json", "--max-time", "60s"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), report, stderr)
}

struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn loadgen_syncs_proxies_runs_the_trigger_and_reports_convergence() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    write(
        &config,
        "clusters.yaml",
        &eds_cluster("backend", "1s", 8080),
    );
    write(
        &config,
        "listeners.yaml",
        &rds_listener("http", 10000, "main"),
    );
    write(&config, "routes.yaml", &route_to("main", "backend"));
    let (xds, admin) = (free_addr(), free_addr());
    let server = Serve(
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args([
                "serve",
                "--xds-addr",
                &xds,
                "--admin-addr",
                &admin,
                "--config",
            ])
            .arg(&config)
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts"),
    );
    let up = Instant::now();
    while std::net::TcpStream::connect(&xds).is_err() {
        assert!(
            up.elapsed() < Duration::from_secs(10),
            "serve never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = server.0.id().to_string();
    for (protocol, timeout) in [("sotw", "2s"), ("delta", "3s")] {
        // The trigger writes the new file aside and renames it over, as a deploy would.
        let edited = eds_cluster("backend", timeout, 8080);
        let aside = config.join(".clusters.tmp");
        std::fs::write(&aside, edited).expect("write");
        let trigger = format!(
            "mv {} {}",
            aside.display(),
            config.join("clusters.yaml").display()
        );
        let (code, report, stderr) = loadgen(&[
            "--xds-addr",
            &xds,
            "--clients",
            "50",
            "--protocol",
            protocol,
            "--server-pid",
            &pid,
            "--trigger",
            &trigger,
        ]);
        assert_eq!(code, Some(0), "{protocol}: {stderr}\n{report:#}");
        assert_eq!(report["synced"], 50, "{report:#}");
        assert_eq!(report["connect"]["count"], 50);
        assert_eq!(report["first_full_config"]["count"], 50);
        for kind in ["CDS", "EDS", "LDS", "RDS"] {
            assert!(
                report["responses"][kind]["responses"].as_u64() >= Some(50),
                "{protocol}: every proxy got {kind}: {report:#}"
            );
        }
        let trigger = &report["trigger"];
        assert_eq!(trigger["exit_code"], 0);
        assert_eq!(trigger["proxies_updated"], 50, "{report:#}");
        assert_eq!(trigger["convergence"]["count"], 50);
        assert_eq!(trigger["reconnected"]["count"], 0, "no stream ended");
        // A cluster changed: its CDS, and its endpoints again for warming (P28).
        assert_eq!(trigger["responses"]["CDS"]["responses"], 50, "{report:#}");
        assert_eq!(trigger["responses"]["EDS"]["responses"], 50, "{report:#}");
        assert!(trigger["responses"]["LDS"].is_null(), "{report:#}");
        assert!(report["server_process"]["rss_kib_synced"].as_u64() > Some(0));
    }
}

#[test]
fn loadgen_refuses_a_remote_server_and_a_bad_pid() {
    let (code, _, stderr) = loadgen(&["--xds-addr", "192.0.2.1:18000"]);
    assert_eq!(code, Some(64));
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    let (code, _, stderr) = loadgen(&["--server-pid", "999999999"]);
    assert_eq!(code, Some(64));
    assert!(stderr.contains("--server-pid"), "{stderr}");
    let (code, _, stderr) = loadgen(&["--nack-fraction", "2"]);
    assert_eq!(code, Some(64));
    assert!(stderr.contains("fraction"), "{stderr}");
}
