//! The etcd source against a real etcd (issue 34): `switchyard validate --source
//! etcd://HOST:PORT/PREFIX` reads every key under the prefix at one revision, as the
//! snapshot documents they hold.

mod support;

use std::process::Command;

use support::etcd::Etcd;

fn switchyard(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .output()
        .expect("switchyard runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const CLUSTERS: &str = "clusters:\n  - name: backend\n    connect_timeout: 1s\n";
const ROUTES: &str = "routes:\n  - name: main\n    virtual_hosts: [{ name: all, domains: [\"*\"], routes: [{ match: { prefix: \"/\" }, route: { cluster: backend } }] }]\n";

#[tokio::test]
async fn validate_reads_the_documents_under_a_prefix_at_one_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    etcd.put("/switchyard/clusters.yaml", CLUSTERS).await;
    etcd.put("/switchyard/edge/routes.yaml", ROUTES).await;
    // Beside the prefix, and Switchyard's own keys under it: not documents.
    etcd.put("/switchyardish/clusters.yaml", "not: a snapshot")
        .await;
    let revision = etcd.put("/switchyard/.switchyard/rollout", "{}").await;
    let url = format!("etcd://{}/switchyard", etcd.endpoint());

    let (code, out, err) = switchyard(&["validate", "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out.trim(),
        format!("OK: 2 document(s) at etcd revision {revision}, 2 resource(s), 0 warning(s)")
    );

    // A bad document is named by its key, with line and column, and nothing else counts.
    etcd.put(
        "/switchyard/clusters.yaml",
        "clusters:\n  - name: backend\n    conect_timeout: 1s\n",
    )
    .await;
    let (code, _, err) = switchyard(&["validate", "--source", &url]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "error: etcd:/switchyard/clusters.yaml:3:5: clusters[0] \"backend\": conect_timeout:"
        ) && err.contains("did you mean `connect_timeout`"),
        "{err}"
    );
    // The same documents as files give the same verdict and words (but the name).
    let files = dir.path().join("files");
    std::fs::create_dir_all(files.join("edge")).expect("mkdir");
    std::fs::write(
        files.join("clusters.yaml"),
        "clusters:\n  - name: backend\n    conect_timeout: 1s\n",
    )
    .expect("write");
    std::fs::write(files.join("edge/routes.yaml"), ROUTES).expect("write");
    let (code, _, from_files) =
        switchyard(&["validate", "--config", files.to_str().expect("utf-8")]);
    assert_eq!(code, Some(1));
    let tail = |s: &str| s.split(".yaml:3:5: ").nth(1).map(str::to_string);
    assert_eq!(tail(&err), tail(&from_files), "{err}\n{from_files}");

    // Bad URLs and an etcd that does not answer: clear errors, no hang.
    // (64: EX_USAGE, as every usage error.)
    let (code, _, err) = switchyard(&["validate", "--source", "etcd://127.0.0.1:2379"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("no key prefix"), "{err}");
    let (code, _, err) = switchyard(&[
        "validate",
        "--source",
        &url,
        "--config",
        files.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let nobody = format!(
        "etcd://127.0.0.1:{}/switchyard",
        support::envoy::free_port()
    );
    let started = std::time::Instant::now();
    let (code, _, err) = switchyard(&["validate", "--source", &nobody, "--source-timeout", "1s"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("error: {nobody}: ")), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "gave up in {:?}",
        started.elapsed()
    );
    let (code, _, err) = switchyard(&["validate"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("--config PATH, or --source URL"), "{err}");
}
