//! The etcd source against a real etcd: `switchyard validate --source
//! etcd://HOST:PORT/PREFIX` reads every key under the prefix at one revision, as the
//! snapshot documents they hold; `serve --source` serves them and follows the prefix.

use switchyard_testkit as support;

use std::process::Command;
use std::time::Duration;

use support::envoy::{eventually, free_port, get_json, Switchyard};
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

/// A deadline for a library call's retries.
fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(5)
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
    // CI asking for JSON gets JSON saying why.
    let (code, out, err) = switchyard(&[
        "validate",
        "--source",
        &nobody,
        "--source-timeout",
        "1s",
        "--output",
        "json",
    ]);
    assert_eq!(code, Some(1), "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).expect("a JSON document");
    assert_eq!(json["ok"], false, "{out}");
    assert!(
        json["findings"][0]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("{nobody}: "))),
        "{out}"
    );
    let (code, _, err) = switchyard(&["validate"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("--config PATH, or --source URL"), "{err}");
}

/// `serve --source`: the documents under the prefix served, then followed. A transaction of
/// two documents is one generation; a bad document is refused (named by its key) while the
/// last good generation serves; etcd killed and started again: serving goes on, and the
/// watch resumes from the last revision read.
#[tokio::test]
async fn serve_follows_the_prefix_one_generation_per_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut etcd = Etcd::start(dir.path()).await;
    let cluster = |names: &[&str]| {
        let mut text = String::from("clusters:\n");
        for name in names {
            text.push_str(&format!("  - name: {name}\n    connect_timeout: 1s\n"));
        }
        text
    };
    etcd.put("/sy/clusters.yaml", &cluster(&["a"])).await;
    let server = serve_prefix(&etcd, dir.path()).await;
    let config = || async { server.status().await.and_then(|s| s.config) };
    let dump = || async {
        get_json(
            &format!("http://127.0.0.1:{}/config_dump", server.admin_port),
            &[("node", "edge-1")],
        )
        .await
        .map(|v| v.to_string())
        .unwrap_or_default()
    };
    let first = eventually(Duration::from_secs(20), || async {
        config().await.is_some_and(|c| c.ok && c.generation == 1)
    })
    .await;
    assert!(first.is_some(), "the first read serves");
    assert!(dump().await.contains("\"a\""));

    // Two documents in one transaction: one generation holding both.
    etcd.put_all(&[
        ("/sy/clusters.yaml", &cluster(&["a", "b"])),
        ("/sy/more.yaml", &cluster(&["c"])),
    ])
    .await;
    let second = eventually(Duration::from_secs(20), || async {
        config().await.is_some_and(|c| c.ok && c.generation == 2)
    })
    .await;
    assert!(second.is_some(), "the transaction is published");
    let served = dump().await;
    assert!(
        served.contains("\"b\"") && served.contains("\"c\""),
        "{served}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        config().await.map(|c| c.generation),
        Some(2),
        "one generation, not two"
    );

    // A bad document: refused, named by its key; the last good generation serves.
    etcd.put(
        "/sy/bad.yaml",
        "clusters:\n  - name: d\n    conect_timeout: 1s\n",
    )
    .await;
    let refused = eventually(Duration::from_secs(20), || async {
        config().await.is_some_and(|c| {
            !c.ok
                && c.generation == 2
                && c.errors
                    .iter()
                    .any(|e| e.starts_with("etcd:/sy/bad.yaml:3:5: clusters[0] \"d\""))
        })
    })
    .await;
    assert!(refused.is_some(), "{:?}", config().await);
    etcd.put("/sy/bad.yaml", &cluster(&["d"])).await;
    let fixed = eventually(Duration::from_secs(20), || async {
        config().await.is_some_and(|c| c.ok && c.generation == 3)
    })
    .await;
    assert!(fixed.is_some(), "the fix is published");

    // etcd away: serving goes on; back: the watch resumes, and a change made meanwhile (by
    // another client, as soon as etcd is up) is published.
    let before = config().await.expect("status");
    assert!(
        before.source.as_ref().is_some_and(|s| s.answering),
        "{before:?}"
    );
    etcd.process.kill();
    let noticed = eventually(Duration::from_secs(20), || async {
        config()
            .await
            .and_then(|c| c.source)
            .is_some_and(|s| !s.answering && s.error.is_some())
    })
    .await;
    assert!(
        noticed.is_some(),
        "/status says etcd does not answer: {:?}",
        config().await
    );
    assert!(config().await.is_some_and(|c| c.ok && c.generation == 3));
    assert!(dump().await.contains("\"d\""));
    assert_eq!(server.metric("switchyard_source_down").await, Some(1.0));
    let ready = reqwest::get(format!("http://127.0.0.1:{}/readyz", server.admin_port))
        .await
        .expect("readyz answers");
    assert_eq!(
        ready.status(),
        200,
        "still ready: the last good generation serves"
    );
    let text = ready.text().await.unwrap_or_default();
    assert!(text.contains("does not answer since"), "{text}");
    etcd.restart().await;
    let revision = etcd.put("/sy/more.yaml", &cluster(&["c", "e"])).await;
    let resumed = eventually(Duration::from_secs(30), || async {
        config().await.is_some_and(|c| c.ok && c.generation == 4)
    })
    .await;
    assert!(resumed.is_some(), "{:?}", config().await);
    let after = config().await.expect("status");
    assert_eq!(
        after.revision,
        Some(revision),
        "the generation names its revision"
    );
    assert!(after.source.is_some_and(|s| s.answering));
    assert_eq!(server.metric("switchyard_source_down").await, Some(0.0));
    assert!(dump().await.contains("\"e\""));
    let etcd_lines: Vec<String> = server
        .log_lines()
        .iter()
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .filter(|m| m.contains("etcd"))
        .collect();
    assert!(
        server.logged("etcd does not answer", &[]) && server.logged("etcd answers again", &[]),
        "the outage is logged: {etcd_lines:?}"
    );
    // Once, however long it lasts: the tries wait (and are not logged) in between.
    assert_eq!(
        etcd_lines
            .iter()
            .filter(|m| m.contains("etcd does not answer"))
            .count(),
        1,
        "{etcd_lines:?}"
    );
}

/// `switchyard serve --source` on etcd's prefix `/sy`, on free ports.
async fn serve_prefix(etcd: &Etcd, log_dir: &std::path::Path) -> Switchyard {
    let url = format!("etcd://{}/sy", etcd.endpoint());
    Switchyard::start_serving(
        &["--source", &url],
        log_dir,
        (free_port(), free_port()),
        &[],
    )
    .await
}

/// The clusters `server` serves node `edge-1`: (name, connect_timeout), by name.
async fn served_clusters(server: &Switchyard) -> Vec<(String, String)> {
    let dump = get_json(
        &format!("http://127.0.0.1:{}/config_dump", server.admin_port),
        &[("node", "edge-1")],
    )
    .await
    .unwrap_or_default();
    let mut clusters: Vec<(String, String)> = dump["types"]["CDS"]["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let cluster = &c["resource"];
            let text = |field: &str| cluster[field].as_str().unwrap_or_default().to_string();
            (text("name"), text("connectTimeout"))
        })
        .collect();
    clusters.sort();
    clusters
}

/// What etcd has answered of one kind of request (`Range`, `Watch`, ...), from its metrics.
async fn etcd_handled(etcd: &Etcd, method: &str) -> f64 {
    let text = reqwest::get(format!("http://{}/metrics", etcd.endpoint()))
        .await
        .expect("etcd's /metrics answers")
        .text()
        .await
        .unwrap_or_default();
    text.lines()
        .filter(|l| {
            l.starts_with("grpc_server_handled_total")
                && l.contains(&format!("grpc_method=\"{method}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `serve --source` follows the prefix incrementally: an edit of one document, a new one and
/// a deleted one are each taken from the watch's event (the prefix is not read again: etcd
/// answers no `Range`), and the generation holds exactly the documents under the prefix;
/// a compaction past the watch (with the follower away) makes it read the prefix again once,
/// and what changed meanwhile is served.
#[tokio::test]
async fn serve_reads_one_key_per_edit_and_the_prefix_again_only_after_a_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut etcd = Etcd::start(dir.path()).await;
    let cluster = |name: &str, timeout: &str| {
        format!("clusters:\n  - name: {name}\n    connect_timeout: {timeout}\n")
    };
    let mut pairs = Vec::new();
    for i in 0..50 {
        pairs.push((
            format!("/sy/c{i:02}.yaml"),
            cluster(&format!("c{i:02}"), "1s"),
        ));
    }
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    etcd.put_all(&refs).await;
    let server = serve_prefix(&etcd, dir.path()).await;
    let config = || async { server.status().await.and_then(|s| s.config) };
    let clusters = || served_clusters(&server);
    let at = |generation: u64| {
        let config = &config;
        async move {
            eventually(Duration::from_secs(20), || async {
                config()
                    .await
                    .is_some_and(|c| c.ok && c.generation == generation)
            })
            .await
            .is_some()
        }
    };
    assert!(at(1).await, "the first read serves: {:?}", config().await);
    assert_eq!(clusters().await.len(), 50);
    // One client for the edits (connecting reads a key): every Range from here on is the
    // server's.
    let mut client = etcd.client().await.expect("etcd client");
    let ranges = etcd_handled(&etcd, "Range").await;

    // One document edited: served, and nothing else moves.
    let put = client
        .put("/sy/c07.yaml", cluster("c07", "7s"), None)
        .await
        .expect("put");
    let revision = put.header().expect("a header").revision();
    assert!(at(2).await, "{:?}", config().await);
    assert_eq!(config().await.and_then(|c| c.revision), Some(revision));
    let served = clusters().await;
    assert_eq!(served.len(), 50, "{served:?}");
    assert!(served.contains(&("c07".into(), "7s".into())), "{served:?}");
    assert!(served.contains(&("c06".into(), "1s".into())), "{served:?}");
    // A new document, then one deleted.
    client
        .put("/sy/new.yaml", cluster("fresh", "2s"), None)
        .await
        .expect("put");
    assert!(at(3).await, "{:?}", config().await);
    client.delete("/sy/c00.yaml", None).await.expect("delete");
    assert!(at(4).await, "{:?}", config().await);
    let served = clusters().await;
    assert_eq!(served.len(), 50, "{served:?}");
    assert!(
        served.contains(&("fresh".into(), "2s".into())),
        "{served:?}"
    );
    assert!(!served.iter().any(|(n, _)| n == "c00"), "{served:?}");
    assert_eq!(
        etcd_handled(&etcd, "Range").await,
        ranges,
        "an edit is read from the watch's event, not by reading the prefix again"
    );

    // Away (the server stopped) while etcd restarts, the prefix changes and etcd compacts
    // past the follower's revision: back, it cannot resume the watch, reads the prefix
    // again, and serves what is there.
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([format!("-{name}"), server.process.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -{name}");
    };
    signal("STOP");
    etcd.process.kill();
    etcd.restart().await;
    let mut client = etcd.client().await.expect("etcd client");
    let mut latest = 0;
    for key in ["c01", "c02"] {
        let put = client
            .put(format!("/sy/{key}.yaml"), cluster(key, "9s"), None)
            .await
            .expect("put");
        latest = put.header().expect("a header").revision();
    }
    client.compact(latest).await.expect("compact");
    signal("CONT");
    // Read at the last write or past it: the replica's own summary, written beside the
    // prefix as it comes back, may move the store's revision before the read.
    let caught_up = eventually(Duration::from_secs(30), || async {
        config()
            .await
            .is_some_and(|c| c.ok && c.revision.is_some_and(|r| r >= latest))
    })
    .await;
    assert!(caught_up.is_some(), "{:?}", config().await);
    assert!(
        server.logged("The watch could not resume", &[]),
        "the prefix is read again after a compaction"
    );
    let served = clusters().await;
    assert!(served.contains(&("c01".into(), "9s".into())), "{served:?}");
    assert!(served.contains(&("c02".into(), "9s".into())), "{served:?}");
}

/// `switchyard apply DIR --source ...`: checked as serve would load it,
/// shown, and written in one transaction guarded by the revision it read; `--dry-run`
/// writes nothing; an invalid change writes nothing; two applies from one read cannot both
/// land (the second is refused, naming the revision); `export` writes the documents back.
#[tokio::test]
async fn apply_writes_a_directory_in_one_guarded_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir_all(snapshot.join("edge")).expect("mkdir");
    std::fs::write(snapshot.join("clusters.yaml"), CLUSTERS).expect("write");
    std::fs::write(snapshot.join("edge/routes.yaml"), ROUTES).expect("write");
    let snap = snapshot.to_str().expect("utf-8");

    let (code, out, err) = switchyard(&["apply", snap, "--source", &url, "--dry-run"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("  add    /sy/clusters.yaml") && out.contains("dry run: nothing written"),
        "{out}"
    );
    let (code, _, _) = switchyard(&["validate", "--source", &url]);
    assert_eq!(code, Some(0), "an empty prefix validates");

    let (code, out, err) = switchyard(&["apply", snap, "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("  add    /sy/clusters.yaml")
            && out.contains("  add    /sy/edge/routes.yaml")
            && out.contains("applied at revision "),
        "{out}"
    );
    let first_applied: i64 = out
        .split("applied at revision ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the revision applied");
    let (code, out, err) = switchyard(&["validate", "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("OK: 2 document(s)"), "{out}");
    let (code, out, _) = switchyard(&["apply", snap, "--source", &url]);
    assert_eq!(code, Some(0));
    assert!(out.contains("nothing to apply"), "{out}");

    // An invalid change writes nothing.
    let before = etcd.put("/elsewhere", "x").await;
    std::fs::write(
        snapshot.join("clusters.yaml"),
        "clusters:\n  - name: backend\n    conect_timeout: 1s\n",
    )
    .expect("write");
    let (code, _, err) = switchyard(&["apply", snap, "--source", &url]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("conect_timeout") && err.contains("nothing written"),
        "{err}"
    );
    assert_eq!(
        etcd.put("/elsewhere", "y").await,
        before + 1,
        "nothing was written"
    );

    // A change and a removal: shown by document and by resource, one transaction.
    std::fs::write(snapshot.join("clusters.yaml"), CLUSTERS.replace("1s", "2s")).expect("write");
    std::fs::remove_file(snapshot.join("edge/routes.yaml")).expect("rm");
    let (code, out, err) = switchyard(&["apply", snap, "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("  change /sy/clusters.yaml") && out.contains("  delete /sy/edge/routes.yaml"),
        "{out}"
    );
    assert!(out.contains("connect_timeout"), "the resource diff: {out}");

    // Two applies from one read: the first lands, the second is refused by the guard.
    let parsed: switchyard::source::EtcdUrl = url.parse().expect("url");
    let mut client = etcd.client().await.expect("client");
    let (_, at) = switchyard::source::etcd::read_for_write(&mut client, &parsed, soon())
        .await
        .expect("read");
    let change = |text: &str| switchyard::source::etcd::Change {
        put: vec![("/sy/clusters.yaml".into(), text.into())],
        delete: vec![],
    };
    let first = switchyard::source::etcd::apply(
        &mut client,
        &parsed,
        &change(CLUSTERS),
        at,
        "{\"a\":1}",
        soon(),
    )
    .await;
    assert!(first.is_ok(), "{first:?}");
    let second = switchyard::source::etcd::apply(
        &mut client,
        &parsed,
        &change(&CLUSTERS.replace("1s", "3s")),
        at,
        "{\"a\":2}",
        soon(),
    )
    .await
    .expect_err("refused");
    assert!(
        second.to_string().starts_with(&format!(
            "the prefix changed since revision {} (another apply, or a direct write); nothing was written",
            at.revision
        )),
        "{second}"
    );
    // A direct write after the read is caught too.
    let (_, at) = switchyard::source::etcd::read_for_write(&mut client, &parsed, soon())
        .await
        .expect("read");
    etcd.put("/sy/other.yaml", CLUSTERS).await;
    assert!(switchyard::source::etcd::apply(
        &mut client,
        &parsed,
        &change("clusters: []\n"),
        at,
        "{\"a\":3}",
        soon()
    )
    .await
    .is_err());

    // rollback: the documents of the first apply, written back as a new change through
    // apply's checks (shown, guarded); the routes come back, other.yaml goes.
    let first = first_applied.to_string();
    let (code, out, err) = switchyard(&["rollback", &first, "--source", &url, "--dry-run"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("dry run: nothing written"), "{out}");
    let (code, out, err) = switchyard(&["rollback", &first, "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!(
            "rolling back to the 2 document(s) the prefix held at revision {first}"
        )) && out.contains("  add    /sy/edge/routes.yaml")
            && out.contains("  delete /sy/other.yaml")
            && out.contains("applied at revision "),
        "{out}"
    );
    let (code, out, err) = switchyard(&["validate", "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("OK: 2 document(s)"), "{out}");
    let (code, _, err) = switchyard(&["rollback", "999999", "--source", &url]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("at revision 999999"), "{err}");
    // Put other.yaml back for export below.
    let put_back = etcd.put("/sy/other.yaml", CLUSTERS).await;

    // history: newest first, each change by document and by resource, applies with a time.
    let (code, out, err) = switchyard(&["history", "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    let newest = format!("revision {put_back}\n  add    /sy/other.yaml\n");
    assert!(out.starts_with(&newest), "{out}");
    assert!(
        out.contains(&format!("revision {first_applied}, applied at "))
            && out.contains("connect_timeout: \"1s\" -> \"2s\"")
            && out.contains("since revision 1 (the oldest etcd keeps)"),
        "{out}"
    );
    let (code, out, _) = switchyard(&["history", "--source", &url, "--limit", "1"]);
    assert_eq!(code, Some(0));
    assert!(out.ends_with("the last 1 shown\n"), "{out}");
    // After a compaction, history goes back to it, and no further.
    let mut client = etcd.client().await.expect("client");
    client.compact(put_back - 1).await.expect("compact");
    let (code, out, err) = switchyard(&["history", "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!(
            "since revision {} (the oldest etcd keeps)",
            put_back - 1
        )),
        "{out}"
    );

    // export writes the documents back as files.
    let out_dir = dir.path().join("exported");
    let (code, out, err) =
        switchyard(&["export", "--source", &url, out_dir.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("exported 3 document(s) at etcd revision"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("clusters.yaml")).expect("written"),
        CLUSTERS
    );
    assert!(out_dir.join("other.yaml").is_file());
    let (code, _, err) =
        switchyard(&["export", "--source", &url, out_dir.to_str().expect("utf-8")]);
    assert_eq!(code, Some(64), "not into a directory with files: {err}");
}

/// etcd over TLS with client certificates, and etcd's users: the
/// `--etcd-ca`, `--etcd-cert`, `--etcd-key`, `--etcd-user` and `--etcd-password-file`
/// flags reach it; without them it is refused, with a clear error.
#[tokio::test]
async fn tls_and_a_user_reach_a_secured_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start_tls(dir.path()).await;
    let mut admin = etcd.client().await.expect("a TLS client");
    admin
        .put("/sy/clusters.yaml", CLUSTERS, None)
        .await
        .expect("put");
    admin.user_add("root", "s3cret").await.expect("user");
    admin.user_grant_role("root", "root").await.expect("role");
    admin.auth_enable().await.expect("auth on");
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let path = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_string();
    std::fs::write(dir.path().join("password"), "s3cret\n").expect("write");
    let tls = [
        "--etcd-ca".to_string(),
        path("etcd-ca.pem"),
        "--etcd-cert".to_string(),
        path("etcd-client.pem"),
        "--etcd-key".to_string(),
        path("etcd-client.key"),
    ];
    let user = [
        "--etcd-user".to_string(),
        "root".to_string(),
        "--etcd-password-file".to_string(),
        path("password"),
    ];
    let validate = |extra: &[String]| {
        let mut args = vec!["validate".to_string(), "--source".into(), url.clone()];
        args.extend(["--source-timeout".to_string(), "3s".to_string()]);
        args.extend(extra.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        switchyard(&args)
    };
    let (code, _, err) = validate(&[]);
    assert_eq!(code, Some(1), "plain text to a TLS-only etcd: {err}");
    assert!(err.contains(&format!("error: {url}: ")), "{err}");
    let (code, _, err) = validate(&tls);
    assert_eq!(
        code,
        Some(1),
        "TLS without the user, once auth is on: {err}"
    );
    let mut both = tls.to_vec();
    both.extend(user.iter().cloned());
    let (code, out, err) = validate(&both);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("OK: 1 document(s) at etcd revision"),
        "{out}"
    );
    // A user without its password file is a usage error, before anything is tried.
    let (code, _, err) = validate(
        &[
            tls.to_vec(),
            vec!["--etcd-user".to_string(), "root".to_string()],
        ]
        .concat(),
    );
    assert_eq!(code, Some(64), "{err}");
}

/// Two operators applying at once: whatever the timing, they never
/// overwrite each other. Either one lands and the other is refused naming the revision it
/// read, or both land one after the other, the second having read what the first wrote.
/// Five rounds of two `switchyard apply` processes started together.
#[tokio::test]
async fn two_applies_at_once_never_overwrite_each_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let landed = |out: &str| -> Option<(i64, i64)> {
        let line = out
            .lines()
            .find(|l| l.starts_with("applied at revision "))?;
        let mut numbers = line
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<i64>().ok());
        Some((numbers.next()??, numbers.next()??))
    };
    let (mut both, mut one) = (0, 0);
    for round in 0..5 {
        let dirs: Vec<std::path::PathBuf> = (0..2)
            .map(|who| {
                let d = dir.path().join(format!("r{round}-{who}"));
                std::fs::create_dir_all(&d).expect("mkdir");
                let timeout = format!("{}s", 10 + round * 2 + who);
                std::fs::write(d.join("clusters.yaml"), CLUSTERS.replace("1s", &timeout))
                    .expect("write");
                d
            })
            .collect();
        let children: Vec<std::process::Child> = dirs
            .iter()
            .map(|d| {
                Command::new(env!("CARGO_BIN_EXE_switchyard"))
                    .arg("apply")
                    .arg(d)
                    .args(["--source", &url])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("apply starts")
            })
            .collect();
        let outs: Vec<(bool, String)> = children
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().expect("apply ends");
                (
                    out.status.success(),
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ),
                )
            })
            .collect();
        let held = {
            let mut client = etcd.client().await.expect("client");
            let got = client.get("/sy/clusters.yaml", None).await.expect("get");
            String::from_utf8_lossy(got.kvs()[0].value()).into_owned()
        };
        match (landed(&outs[0].1), landed(&outs[1].1)) {
            (Some((at0, read0)), Some((at1, read1))) => {
                both += 1;
                assert!(
                    read1 >= at0 || read0 >= at1,
                    "round {round}: both landed from reads that missed each other: {outs:?}"
                );
                let last = if at0 > at1 { 0 } else { 1 };
                assert_eq!(
                    std::fs::read_to_string(dirs[last].join("clusters.yaml")).ok(),
                    Some(held)
                );
            }
            (Some(_), None) | (None, Some(_)) => {
                one += 1;
                let (winner, loser) = if outs[0].0 { (0, 1) } else { (1, 0) };
                assert!(
                    outs[loser].1.contains("the prefix changed since revision"),
                    "round {round}: {outs:?}"
                );
                assert_eq!(
                    std::fs::read_to_string(dirs[winner].join("clusters.yaml")).ok(),
                    Some(held)
                );
            }
            (None, None) => panic!("round {round}: neither landed: {outs:?}"),
        }
    }
    eprintln!("{one} round(s) where one apply was refused, {both} where both landed in turn");
}

/// `status --wait` right after a write to etcd waits for that write: the barrier is etcd's
/// revision now, reached by the follower, so a broken document exits 3 with its key and the
/// reason (never 0 on the generation before), and a good one exits 0 once it serves. A
/// revision that changed nothing under the prefix is reached too (the prefix is the same
/// there as at the revision the follower loaded). With etcd down, `status` and `status --wait` exit 8 and say so;
/// once etcd is back, `status` exits 0 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_waits_for_what_was_written_and_fails_while_etcd_does_not_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut etcd = Etcd::start(dir.path()).await;
    etcd.put("/sy/clusters.yaml", CLUSTERS).await;
    let server = serve_prefix(&etcd, dir.path()).await;
    let wait = ["--wait", "--timeout", "30s"];
    let served_timeout = || async {
        served_clusters(&server)
            .await
            .into_iter()
            .find(|(name, _)| name == "backend")
            .map(|(_, timeout)| timeout)
            .unwrap_or_default()
    };
    for round in 0..3 {
        etcd.put(
            "/sy/clusters.yaml",
            "clusters:\n  - name: backend\n    connect_timeout: soon\n",
        )
        .await;
        let (code, out, err) = server.status_said(&wait);
        assert_eq!(code, Some(3), "round {round}: refused: {out}{err}");
        assert!(
            err.contains("was refused")
                && err.contains("/sy/clusters.yaml")
                && err.contains("connect_timeout"),
            "round {round}: the key and the reason: {err}"
        );
        let timeout = format!("{}s", round + 2);
        etcd.put(
            "/sy/clusters.yaml",
            &format!("clusters:\n  - name: backend\n    connect_timeout: {timeout}\n"),
        )
        .await;
        let (code, out, err) = server.status_said(&wait);
        assert_eq!(code, Some(0), "round {round}: {out}{err}");
        assert_eq!(served_timeout().await, timeout, "round {round}: it serves");
    }

    // A write elsewhere moves the store's revision past anything under the prefix.
    let elsewhere = etcd.put("/elsewhere", "x").await;
    let (code, out, err) = server.status_said(&wait);
    assert_eq!(code, Some(0), "the prefix is unchanged since: {out}{err}");
    let (code, out, err) = server.status_said(&["--wait", "--revision", &elsewhere.to_string()]);
    assert_eq!(code, Some(0), "{out}{err}");

    // A deletion is waited for too (no key is left to say it was written).
    let clusters = || async { served_clusters(&server).await.len() };
    etcd.put(
        "/sy/extra.yaml",
        "clusters:\n  - name: extra\n    connect_timeout: 1s\n",
    )
    .await;
    let (code, out, err) = server.status_said(&wait);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(clusters().await, 2);
    let mut client = etcd.client().await.expect("etcd answers");
    client.delete("/sy/extra.yaml", None).await.expect("delete");
    let (code, out, err) = server.status_said(&wait);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        clusters().await,
        1,
        "the deletion serves when --wait exits 0"
    );

    etcd.kill();
    let down = eventually(Duration::from_secs(20), || async {
        server.status_said(&[]).0 == Some(8)
    })
    .await;
    assert!(
        down.is_some(),
        "`status` exits 8 while etcd does not answer"
    );
    let (_, out, err) = server.status_said(&[]);
    assert!(
        out.contains("does NOT answer") && err.contains("does not answer"),
        "{out}{err}"
    );
    let (code, _, err) = server.status_said(&wait);
    assert_eq!(code, Some(8), "{err}");
    assert!(err.contains("does not answer"), "{err}");
    // In words for people, everywhere it is said: `status`, the page, and an apply or a
    // history that cannot reach etcd; never the libraries' own dumps.
    let page = reqwest::get(format!("http://127.0.0.1:{}/", server.admin_port))
        .await
        .expect("the page")
        .text()
        .await
        .expect("the page");
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let snapshot = dir.path().join("outage");
    std::fs::create_dir_all(&snapshot).expect("mkdir");
    std::fs::write(snapshot.join("clusters.yaml"), CLUSTERS).expect("write");
    let (_, apply_out, apply_err) = switchyard(&[
        "apply",
        snapshot.to_str().expect("utf-8"),
        "--source",
        &url,
        "--source-timeout",
        "1s",
    ]);
    let (_, history_out, history_err) =
        switchyard(&["history", "--source", &url, "--source-timeout", "1s"]);
    assert!(
        apply_err.contains("cannot start the apply: etcd does not answer")
            && history_err.contains("etcd does not answer"),
        "{apply_out}{apply_err}{history_out}{history_err}"
    );
    for said in [&out, &err, &page, &apply_err, &history_err] {
        for dump in [
            "tonic",
            "grpc request error",
            "transport error",
            "ConnectError",
            "error sending request",
            "switch key",
        ] {
            assert!(!said.contains(dump), "{dump:?} in: {said}");
        }
    }

    etcd.start_again().await;
    let back = eventually(Duration::from_secs(30), || async {
        server.status_said(&[]).0 == Some(0)
    })
    .await;
    assert!(back.is_some(), "`status` exits 0 once etcd answers again");
    etcd.put(
        "/sy/clusters.yaml",
        "clusters:\n  - name: backend\n    connect_timeout: later\n",
    )
    .await;
    let (code, out, err) = server.status_said(&wait);
    assert_eq!(code, Some(3), "after the outage too: {out}{err}");
}

/// A guarded apply: `--expect-revision R` writes only while no key under the prefix was
/// written after R, so of two people who read the same revision the second is refused
/// (nothing written, a clear message) instead of silently winning; `--message` and the
/// author (`--author`, else SWITCHYARD_AUTHOR) are recorded with the change and shown by
/// `history --source`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_with_an_expected_revision_refuses_a_prefix_that_moved_and_records_who_and_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let read = etcd.put("/sy/clusters.yaml", CLUSTERS).await;
    let server = serve_prefix(&etcd, dir.path()).await;
    let (alice, bob) = (dir.path().join("alice"), dir.path().join("bob"));
    for (who, timeout) in [(&alice, "2s"), (&bob, "3s")] {
        std::fs::create_dir_all(who).expect("mkdir");
        std::fs::write(who.join("clusters.yaml"), CLUSTERS.replace("1s", timeout)).expect("write");
    }
    let apply = |snapshot: &std::path::Path, extra: &[&str], author: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        command
            .arg("apply")
            .arg(snapshot)
            .args(["--source", &url])
            .args(extra)
            .env_remove("SWITCHYARD_AUTHOR");
        if let Some(author) = author {
            command.env("SWITCHYARD_AUTHOR", author);
        }
        let out = command.output().expect("runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let expect = read.to_string();
    let (code, out, err) = apply(
        &alice,
        &["--expect-revision", &expect, "--message", "slower connects"],
        Some("alice"),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = apply(
        &bob,
        &["--expect-revision", &expect, "--message", "mine"],
        None,
    );
    assert_eq!(code, Some(1), "bob read the same revision: {out}{err}");
    assert!(
        err.contains(&format!("moved past revision {expect}"))
            && err.contains("nothing was written"),
        "{err}"
    );
    // The replica's history names who wrote the generation and why: /status, the page's
    // table and `switchyard history` against the server.
    let noted = eventually(Duration::from_secs(20), || async {
        server.status().await.is_some_and(|s| {
            s.history.first().is_some_and(|e| {
                e.author.as_deref() == Some("alice")
                    && e.message.as_deref() == Some("slower connects")
            })
        })
    })
    .await;
    assert!(
        noted.is_some(),
        "{:?}",
        server.status().await.map(|s| s.history)
    );
    let admin = format!("127.0.0.1:{}", server.admin_port);
    let (code, out, err) = switchyard(&["history", "--admin-addr", &admin]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("written by alice: slower connects"), "{out}");
    let page = reqwest::get(format!("http://{admin}/"))
        .await
        .expect("the page")
        .text()
        .await
        .expect("text");
    assert!(page.contains("<td>alice: slower connects</td>"), "{page}");

    let mut client = etcd.client().await.expect("etcd answers");
    let held = client.get("/sy/clusters.yaml", None).await.expect("get");
    let text = String::from_utf8_lossy(held.kvs()[0].value()).into_owned();
    assert!(
        text.contains("connect_timeout: 2s"),
        "alice's change stands: {text}"
    );

    // Against what etcd holds now, bob's apply goes through, under his own name.
    let (code, out, err) = apply(
        &bob,
        &["--author", "bob", "--message", "mine after all"],
        Some("x"),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = switchyard(&["history", "--source", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("by alice: slower connects"), "{out}");
    assert!(
        out.contains("by bob: mine after all"),
        "the flag wins over the environment: {out}"
    );
    assert!(
        !out.contains(": mine\n"),
        "the refused apply left nothing: {out}"
    );

    // With no author named anywhere (USER and LOGNAME unset too), the process owner's name
    // is recorded, and the apply prints what it recorded.
    std::fs::write(alice.join("clusters.yaml"), CLUSTERS.replace("1s", "4s")).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("apply")
        .arg(&alice)
        .args(["--source", &url, "--message", "nobody said who"])
        .env_remove("SWITCHYARD_AUTHOR")
        .env_remove("USER")
        .env_remove("LOGNAME")
        .output()
        .expect("runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("me"));
    let owner = std::fs::read_to_string("/etc/passwd")
        .expect("passwd")
        .lines()
        .find(|l| l.split(':').nth(2) == Some(uid.to_string().as_str()))
        .and_then(|l| l.split(':').next().map(str::to_string))
        .expect("this user is listed");
    let by = format!("by {owner}: nobody said who");
    assert!(said.contains(&by), "printed: {said}");
    let (_, out, _) = switchyard(&["history", "--source", &url]);
    assert!(out.contains(&by), "recorded: {out}");
}

/// A write etcd refuses (a document over its 1.5 MiB request limit) is told apart from one
/// whose outcome is unknown: nothing was written, for sure, and the limit is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_etcd_refuses_is_told_apart_from_one_whose_outcome_is_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir_all(&snapshot).expect("mkdir");
    let padding = "x".repeat(1_700_000);
    std::fs::write(
        snapshot.join("big.yaml"),
        format!("# {padding}\nclusters:\n  - name: big\n    connect_timeout: 1s\n"),
    )
    .expect("write");
    let (code, out, err) =
        switchyard(&["apply", snapshot.to_str().expect("utf-8"), "--source", &url]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("etcd refused the write, nothing was written")
            && err.contains("too large")
            && err.contains("--max-request-bytes"),
        "{err}"
    );
    assert!(!err.contains("cannot be told"), "{err}");
    assert_eq!(keys_under(&etcd, "/sy/").await, 0, "nothing was written");
    assert_eq!(
        keys_under(&etcd, "/sy.staging/").await,
        0,
        "the staging it began is gone"
    );
}

/// Keys under `prefix` etcd holds.
async fn keys_under(etcd: &Etcd, prefix: &str) -> usize {
    let mut client = etcd.client().await.expect("etcd answers");
    let got = client
        .get(
            prefix,
            Some(
                switchyard_etcd::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .expect("count");
    got.count() as usize
}

/// An apply of 5,000 documents against an etcd at its default limits (128 operations and
/// 1.5 MiB a transaction): switched over in several transactions, still one generation on
/// the replica following the prefix (every generation it publishes holds all of a change or
/// none of it). An apply killed at the switch's start, or at a seeded random moment, leaves
/// the replica serving what it had; the next apply finishes it, and nothing is left under
/// the staging keys nor the switch key. The time of a one-document apply among 5,000 is
/// printed (docs/benchmarks.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_of_5000_documents_is_whole_on_a_default_etcd_even_when_killed() {
    const N: usize = 5_000;
    let seed = support::seed_from("SWITCHYARD_FAULT_SEED");
    let mut random = support::Seeded(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    etcd.put("/sy/base.yaml", CLUSTERS).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let server = serve_prefix(&etcd, dir.path()).await;
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir_all(&snapshot).expect("mkdir");
    let write_all = |timeout: &str| {
        std::fs::write(snapshot.join("base.yaml"), CLUSTERS).expect("write");
        for i in 0..N {
            std::fs::write(
                snapshot.join(format!("c{i:04}.yaml")),
                format!("clusters:\n  - name: c{i:04}\n    connect_timeout: {timeout}\n"),
            )
            .expect("write");
        }
    };
    // Its output read to the end (a pipe not read would stop it), or dropped.
    let run = |read: bool| {
        let out = || match read {
            true => std::process::Stdio::piped(),
            false => std::process::Stdio::null(),
        };
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .arg("apply")
            .arg(&snapshot)
            .args(["--source", &url, "--source-timeout", "30s"])
            .stdout(out())
            .stderr(out())
            .spawn()
            .expect("apply runs")
    };
    let apply = || run(true);
    // Every generation the replica published holds all of a change to the 5,000 or none.
    let whole = |history: &[switchyard::history::Entry]| {
        history
            .iter()
            .all(|e| e.counts.iter().all(|c| *c == 0 || *c == 1 || *c == N))
    };

    write_all("1s");
    let started = std::time::Instant::now();
    let out = apply().wait_with_output().expect("apply");
    let took = started.elapsed();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    eprintln!("an apply of {N} new documents took {took:?}");
    let all_in = eventually(Duration::from_secs(30), || async {
        server
            .status()
            .await
            .is_some_and(|s| s.history.first().is_some_and(|e| e.counts[0] == N))
    })
    .await;
    let history = server.status().await.map(|s| s.history).unwrap_or_default();
    assert!(all_in.is_some(), "{history:?}");
    assert_eq!(history.len(), 2, "one generation for the whole apply");
    assert_eq!(keys_under(&etcd, "/sy.staging/").await, 0);

    // Killed at the start of its switch, then at random moments: never a partial generation.
    for round in 0..3 {
        write_all(["2s", "3s", "4s"][round]);
        let mut watching = etcd.client().await.expect("etcd answers");
        let mut events = watching
            .watch("/sy/.switchyard/switching", None)
            .await
            .expect("watch");
        let mut child = run(false);
        if round == 0 {
            // Killed as soon as its switch began: mid-way through the copy.
            let began = tokio::time::timeout(Duration::from_secs(60), async {
                while let Ok(Some(r)) = events.message().await {
                    if !r.events().is_empty() {
                        return true;
                    }
                }
                false
            })
            .await;
            let _ = child.kill();
            assert_eq!(began, Ok(true), "the switch began");
        } else {
            let delay = random.draw() % 1_500;
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let _ = child.kill();
        }
        let _ = child.wait();
        let half = keys_under(&etcd, "/sy/.switchyard/switching").await;
        eprintln!(
            "round {round}: killed with the switch key {}",
            ["gone", "left"][half.min(1)]
        );
        if round == 0 {
            assert_eq!(half, 1, "killed mid-switch");
            // The replica holds what it had, and says it is behind its source.
            let behind = eventually(Duration::from_secs(15), || async {
                server.status_said(&[]).0 == Some(7)
            })
            .await;
            let (_, out, err) = server.status_said(&[]);
            assert!(
                behind.is_some() && out.contains("an apply switching the prefix over"),
                "{out}{err}"
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let history = server.status().await.map(|s| s.history).unwrap_or_default();
        assert!(
            whole(&history),
            "round {round}: a partial generation: {history:?}"
        );
        // The next apply finishes what the killed one began (or writes it whole).
        let out = apply().wait_with_output().expect("apply");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(0), "round {round}: {said}");
        if round == 0 {
            assert!(
                said.contains("finished the switch of the prefix an interrupted apply began"),
                "{said}"
            );
        }
        assert_eq!(
            keys_under(&etcd, "/sy.staging/").await,
            0,
            "round {round}: staging left"
        );
        assert_eq!(
            keys_under(&etcd, "/sy/.switchyard/switching").await,
            0,
            "round {round}"
        );
        let served = eventually(Duration::from_secs(30), || async {
            server
                .status()
                .await
                .is_some_and(|s| s.history.first().is_some_and(|e| e.counts[1] == N))
        })
        .await;
        let history = server.status().await.map(|s| s.history).unwrap_or_default();
        assert!(served.is_some(), "round {round}: {history:?}");
        assert!(
            whole(&history),
            "round {round}: a partial generation: {history:?}"
        );
    }

    // One document changed among 5,000: one transaction.
    std::fs::write(
        snapshot.join("c0042.yaml"),
        "clusters:\n  - name: c0042\n    connect_timeout: 9s\n",
    )
    .expect("write");
    let started = std::time::Instant::now();
    let out = apply().wait_with_output().expect("apply");
    let took = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("an apply of one changed document among {N} took {took:?}");
}

/// The fleet's view (operations.md "One view of the fleet"): two replicas on one prefix, an
/// ADS node on each. Any replica shows every replica's proxies and judges the fleet by its
/// worst replica: `apply --wait` through A returns only once B's node has ACKed too (P4);
/// B's node's NACK (P5) makes `status` on A exit 2 naming B and the node; `rollback --now`
/// is recorded as such; B killed vanishes from the view without leaving (exit 9, naming
/// it), and a replica stopped by SIGTERM is shown as having left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_shows_the_whole_fleet_and_a_wait_waits_on_every_replica() {
    use switchyard::fleet::SyncStatus;
    use switchyard::resource::ResourceType::Cluster;
    let cluster =
        |timeout: &str| format!("clusters:\n  - name: backend\n    connect_timeout: {timeout}\n");
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    etcd.put("/sy/clusters.yaml", &cluster("1s")).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let logs = |name: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(&path).expect("log dir");
        path
    };
    let a = Switchyard::start_serving(
        &["--source", &url],
        &logs("a"),
        (free_port(), free_port()),
        &[],
    )
    .await;
    let mut b = Switchyard::start_serving(
        &["--source", &url],
        &logs("b"),
        (free_port(), free_port()),
        &[],
    )
    .await;
    let a_addr = format!("127.0.0.1:{}", a.admin_port);
    let (mut edge_a, mut edge_b) = (a.ads("edge-a").await, b.ads("edge-b").await);
    for edge in [&mut edge_a, &mut edge_b] {
        edge.subscribe(Cluster, &[]).await;
        let got = edge.recv_type(Cluster).await;
        edge.ack(&got, &[]).await;
    }
    let both = eventually(Duration::from_secs(20), || async {
        a.status().await.and_then(|s| s.replicas).is_some_and(|r| {
            r.replicas.len() == 2
                && r.replicas.iter().any(|s| {
                    s.nodes.iter().any(|n| {
                        n.node_id == "edge-b"
                            && n.types
                                .get("CDS")
                                .is_some_and(|t| t.state == SyncStatus::Synced)
                    })
                })
        })
    })
    .await;
    assert!(
        both.is_some(),
        "A's view holds B's node: {:?}",
        a.status().await.and_then(|s| s.replicas)
    );
    let replicas = a.status().await.and_then(|s| s.replicas).expect("a view");
    let b_name = replicas.others().next().expect("B").replica.clone();
    let (code, out, err) = a.status_said(&[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("replicas (2 sharing this view through etcd"),
        "{out}"
    );
    assert!(
        out.contains("the other replicas' proxies:") && out.contains("edge-b"),
        "{out}"
    );

    // apply --wait through A waits for B's node as well as A's.
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    std::fs::write(snap.join("clusters.yaml"), cluster("2s")).expect("write");
    let mut apply = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("apply")
        .arg(&snap)
        .args([
            "--source",
            &url,
            "--wait",
            "--wait-timeout",
            "60s",
            "--admin-addr",
            &a_addr,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("apply runs");
    let got = edge_a.recv_type(Cluster).await;
    edge_a.ack(&got, &[]).await;
    let held = edge_b.recv_type(Cluster).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        apply.try_wait().expect("apply").is_none(),
        "apply --wait returned while B's node had not ACKed"
    );
    edge_b.ack(&held, &[]).await;
    let returned = eventually(Duration::from_secs(30), || {
        let done = apply.try_wait().expect("apply").is_some();
        async move { done }
    })
    .await;
    assert!(
        returned.is_some(),
        "apply --wait returns once B's node ACKed"
    );
    let out = apply.wait_with_output().expect("apply");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("applied at revision") && said.contains("edge-b"),
        "{said}"
    );

    // B's node NACKs the next change: the fleet's NACK, said on A with B and the node.
    let three = etcd.put("/sy/clusters.yaml", &cluster("3s")).await;
    let got = edge_a.recv_type(Cluster).await;
    edge_a.ack(&got, &[]).await;
    let rejected = edge_b.recv_type(Cluster).await;
    edge_b
        .nack(
            &rejected,
            &[],
            &held.version_info,
            "backend: refused by the test",
        )
        .await;
    let nacked = eventually(Duration::from_secs(20), || async {
        a.status_said(&[]).0 == Some(2)
    })
    .await;
    let (_, out, err) = a.status_said(&[]);
    assert!(nacked.is_some(), "{out}{err}");
    assert!(
        out.contains(&format!("REPLICA {b_name} NACKED"))
            && out.contains("edge-b rejected CDS: backend: refused by the test"),
        "{out}"
    );
    let page = reqwest::get(format!("http://{a_addr}/"))
        .await
        .expect("page")
        .text()
        .await
        .expect("page");
    assert!(
        page.contains("id=\"replicas\"") && page.contains("edge-b rejected CDS"),
        "{page}"
    );
    // Under the NACK, on A: the revision B's node still runs (the apply's), and the command
    // that writes it back; the page lists B's node among the fleet's, counts the fleet, and
    // its filter finds it.
    let applied = support::run::applied_revision(&said);
    let back = format!("`switchyard rollback --source {url} {applied}`");
    assert!(
        out.contains(&format!("last good: revision {applied} ")) && out.contains(&back),
        "{out}"
    );
    assert!(
        page.contains("<b>2</b> nodes on 2 replicas")
            && page.contains("<b>1</b> NACKing")
            && page.contains(&format!(
                "<code>switchyard rollback --source {url} {applied}</code>"
            )),
        "{page}"
    );
    let found = reqwest::get(format!("http://{a_addr}/?q=edge-b"))
        .await
        .expect("page")
        .text()
        .await
        .expect("page");
    assert!(
        found.contains("<p>1 node(s) match")
            && found.contains(&format!("edge-b</a></td><td>test</td><td>{b_name}</td>")),
        "{found}"
    );
    // config-dump of B's node through A: asked of B, at the address B's summary gives, and
    // what the node still runs apart from what it rejected.
    let (code, out, err) = switchyard(&["config-dump", "edge-b", "--admin-addr", &a_addr]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        err.contains(&format!(
            "node edge-b is connected to replica {b_name} (127.0.0.1:{}): asked it",
            b.admin_port
        )),
        "{err}"
    );
    assert!(
        out.contains("CDS NACKED: still runs version")
            && out.contains("REJECTED version")
            && out.contains("backend: refused by the test"),
        "{out}"
    );

    // A rollback with --now, waited for: recorded as such in the replica's history.
    etcd.put("/sy/clusters.yaml", &cluster("4s")).await;
    for edge in [&mut edge_a, &mut edge_b] {
        let got = edge.recv_type(Cluster).await;
        edge.ack(&got, &[]).await;
    }
    let acking = [edge_a.ack_everything(), edge_b.ack_everything()];
    let (code, out, err) = switchyard(&[
        "rollback",
        &three.to_string(),
        "--now",
        "--source",
        &url,
        "--message",
        "back to 3s",
        "--wait",
        "--wait-timeout",
        "60s",
        "--admin-addr",
        &a_addr,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = switchyard(&["history", "--admin-addr", &a_addr]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!(
            "back to 3s (rollback to revision {three}, --now: every node at once"
        )),
        "{out}"
    );

    // B killed, and an apply --wait through A at once: B's summary goes with its lease
    // (15 s), and with it B leaves the view; the wait returns then, not minutes later. A
    // names B's proxy that no replica serves now (orphaned), and it holds no gate.
    let killed = std::time::Instant::now();
    b.process.kill();
    std::fs::write(snap.join("clusters.yaml"), cluster("5s")).expect("write");
    let (code, out, err) = switchyard(&[
        "apply",
        snap.to_str().expect("utf-8"),
        "--source",
        &url,
        "--wait",
        "--wait-timeout",
        "90s",
        "--admin-addr",
        &a_addr,
    ]);
    let took = killed.elapsed();
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        took < Duration::from_secs(35),
        "apply --wait took {took:?}: {out}{err}"
    );
    let (code, out, err) = a.status_said(&[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!("REPLICA {b_name} VANISHED: its lease ended"))
            && out.contains("1 no replica serves now (orphaned")
            && out.contains("edge-b"),
        "{out}"
    );

    // A replica stopped by SIGTERM says it left.
    b = Switchyard::start_serving(
        &["--source", &url],
        &logs("c"),
        (free_port(), free_port()),
        &["--replica-name", "edge-c"],
    )
    .await;
    let c_pid = b.process.pid().to_string();
    let joined = eventually(Duration::from_secs(20), || async {
        a.status()
            .await
            .and_then(|s| s.replicas)
            .is_some_and(|r| r.replicas.iter().any(|s| s.replica == "edge-c"))
    })
    .await;
    assert!(joined.is_some(), "C joins the view");
    let sent = Command::new("kill")
        .args(["-TERM", &c_pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let left = eventually(Duration::from_secs(20), || async {
        a.status().await.and_then(|s| s.replicas).is_some_and(|r| {
            r.replicas.iter().any(|s| s.replica == "edge-c" && s.left)
                && r.vanished.iter().all(|v| v.replica != "edge-c")
        })
    })
    .await;
    assert!(
        left.is_some(),
        "{:?}",
        a.status().await.and_then(|s| s.replicas)
    );
    let (_, out, err) = a.status_said(&[]);
    assert!(
        out.lines()
            .any(|l| l.contains("edge-c ") && l.contains(" LEFT ")),
        "{out}{err}"
    );
    for task in acking {
        task.abort();
    }
}

/// Gates through incidents (operations.md "Waiting"): a broken document fails every
/// replica's load; a fix applied with `--wait` then waits for the fleet to load the fix,
/// and is not failed by the other replica's report of the broken revision before it. An
/// apply whose admin API does not answer is applied but cannot be watched: exit 10, at
/// once, not after the wait's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fix_after_a_failed_load_is_judged_by_its_own_revision() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    etcd.put("/sy/clusters.yaml", CLUSTERS).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        let logs = dir.path().join(name);
        std::fs::create_dir_all(&logs).expect("log dir");
        replicas.push(
            Switchyard::start_serving(&["--source", &url], &logs, (free_port(), free_port()), &[])
                .await,
        );
    }
    let a_addr = format!("127.0.0.1:{}", replicas[0].admin_port);
    let both = eventually(Duration::from_secs(20), || async {
        replicas[0]
            .status()
            .await
            .and_then(|s| s.replicas)
            .is_some_and(|r| r.replicas.len() == 2)
    })
    .await;
    assert!(both.is_some(), "both replicas share the view");

    let mut expected = etcd
        .put(
            "/sy/clusters.yaml",
            "clusters:\n  - name: backend\n    conect_timeout: 1s\n",
        )
        .await;
    for replica in &replicas {
        let failed = eventually(Duration::from_secs(20), || async {
            replica.status_said(&[]).0 == Some(3)
        })
        .await;
        assert!(failed.is_some(), "{:?}", replica.status_said(&[]));
    }
    // Both replicas' summaries say their load of `broken` failed.
    let said_failed = eventually(Duration::from_secs(20), || async {
        replicas[0]
            .status()
            .await
            .and_then(|s| s.replicas)
            .is_some_and(|r| {
                r.replicas.iter().all(|s| {
                    s.standing == switchyard::admin::standing::Standing::LoadFailed
                        && s.revision == Some(expected)
                })
            })
    })
    .await;
    assert!(
        said_failed.is_some(),
        "{:?}",
        replicas[0].status().await.and_then(|s| s.replicas)
    );

    let fixed = dir.path().join("fixed");
    std::fs::create_dir(&fixed).expect("mkdir");
    std::fs::write(fixed.join("clusters.yaml"), CLUSTERS).expect("write");
    for round in 0..2 {
        // The second round writes nothing new: the fix is what etcd holds.
        if round == 1 {
            std::fs::write(
                fixed.join("clusters.yaml"),
                "clusters:\n  - name: backend\n    connect_timeout: 3s\n",
            )
            .expect("write");
            expected = etcd
                .put(
                    "/sy/clusters.yaml",
                    "clusters:\n  - name: backend\n    conect_timeout: 2s\n",
                )
                .await;
            for replica in &replicas {
                let failed = eventually(Duration::from_secs(20), || async {
                    replica.status_said(&[]).0 == Some(3)
                })
                .await;
                assert!(failed.is_some());
            }
        }
        let started = std::time::Instant::now();
        let (code, out, err) = switchyard(&[
            "apply",
            fixed.to_str().expect("utf-8"),
            "--source",
            &url,
            "--expect-revision",
            &expected.to_string(),
            "--wait",
            "--wait-timeout",
            "60s",
            "--admin-addr",
            &a_addr,
        ]);
        assert_eq!(
            code,
            Some(0),
            "round {round}, after {:?}: {out}{err}",
            started.elapsed()
        );
        // The replica asked saw the fleet done; another one's view of it follows within
        // its summary's next take (LOOK, 200 ms) and the watch.
        for replica in &replicas {
            let done = eventually(Duration::from_secs(5), || async {
                replica.status_said(&[]).0 == Some(0)
            })
            .await;
            let (_, out, err) = replica.status_said(&[]);
            assert!(done.is_some(), "{out}{err}");
        }
    }

    // Nothing listens at the admin address: applied, but the fleet cannot be watched.
    std::fs::write(
        fixed.join("clusters.yaml"),
        "clusters:\n  - name: backend\n    connect_timeout: 4s\n",
    )
    .expect("write");
    let nobody = format!("127.0.0.1:{}", free_port());
    let started = std::time::Instant::now();
    let (code, out, err) = switchyard(&[
        "apply",
        fixed.to_str().expect("utf-8"),
        "--source",
        &url,
        "--wait",
        "--wait-timeout",
        "5m",
        "--admin-addr",
        &nobody,
    ]);
    assert_eq!(code, Some(10), "{out}{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(
        err.contains("applied at revision") && err.contains("but the fleet cannot be watched"),
        "{err}"
    );
}

/// Two live replicas given one `--replica-name` write their summaries under one key: the
/// one that sees the other's summary there says so as an error naming the flag (each
/// replica's view and canary verdicts are by name), while both keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_of_one_name_are_told_apart_as_a_mistake() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    etcd.put("/sy/clusters.yaml", CLUSTERS).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        let logs = dir.path().join(name);
        std::fs::create_dir_all(&logs).expect("log dir");
        replicas.push(
            Switchyard::start_serving(
                &["--source", &url],
                &logs,
                (free_port(), free_port()),
                &["--replica-name", "edge"],
            )
            .await,
        );
    }
    let said = "Another replica writes its summary under this replica's name";
    let told = eventually(Duration::from_secs(20), || async {
        replicas.iter().any(|r| r.process.log_text().contains(said))
    })
    .await;
    assert!(
        told.is_some(),
        "{}\n{}",
        replicas[0].process.log_text(),
        replicas[1].process.log_text()
    );
    let line = replicas
        .iter()
        .flat_map(|r| {
            r.process
                .log_text()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .find(|l| l.contains(said))
        .expect("the line");
    assert!(
        line.contains("\"level\":\"ERROR\"") && line.contains("--replica-name"),
        "{line}"
    );
    for r in &replicas {
        assert!(r.status().await.is_some(), "both keep serving");
    }
}

/// A directory of one cluster document, `a`.
fn one_cluster(dir: &std::path::Path) -> std::path::PathBuf {
    let snap = dir.join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    support::write(
        &snap,
        "a.yaml",
        "clusters:\n  - name: a\n    connect_timeout: 1s\n",
    );
    snap
}

/// `apply SNAP --source URL --source-timeout TIMEOUT`: (exit code, stdout, stderr, how long
/// it took).
fn timed_apply(
    snap: &std::path::Path,
    url: &str,
    timeout: &str,
) -> (Option<i32>, String, String, Duration) {
    let started = std::time::Instant::now();
    let (code, out, err) = switchyard(&[
        "apply",
        snap.to_str().expect("utf-8"),
        "--source",
        url,
        "--source-timeout",
        timeout,
    ]);
    (code, out, err, started.elapsed())
}

/// An apply behind another apply's switch (a large change in several transactions, its
/// `.alive` key on a lease) waits for it within its one `--source-timeout`, which its read
/// shares: past it, it says another apply is switching, writes nothing, and never says
/// "no answer in time" after a wait. Once the other ends, it applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_behind_another_switch_waits_within_its_one_deadline() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/deadline", etcd.endpoint());
    let snap = one_cluster(dir.path());
    // Another apply, staging now: its `.alive` key on a lease it keeps.
    let mut client = etcd.client().await.expect("etcd answers");
    let lease = client.lease_grant(60).await.expect("a lease").id();
    client
        .put(
            "/deadline.staging/other-1/.alive",
            "",
            Some(switchyard_etcd::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    let (code, out, err, took) = timed_apply(&snap, &url, "2s");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("another apply is switching the prefix over")
            && err.contains("nothing was written")
            && !err.contains("no answer in time"),
        "{err}"
    );
    assert!(
        took < Duration::from_secs(6),
        "the wait keeps to --source-timeout 2s: it took {took:?}"
    );
    assert!(
        err.contains("waiting: another apply"),
        "it said it waits: {err}"
    );
    // The other apply ends: this one applies.
    client.lease_revoke(lease).await.expect("revoke");
    let (code, out, err, _) = timed_apply(&snap, &url, "2s");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("applied at revision"), "{out}");
}

/// A key Switchyard wrote that does not read (an apply's switch key, written by hand) is
/// permanent until someone acts: `apply` says so at once, naming the key and what to do,
/// and does not try again until its deadline as if etcd were away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_key_that_does_not_read_is_said_at_once_not_retried() {
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/corrupt", etcd.endpoint());
    let snap = one_cluster(dir.path());
    etcd.put("/corrupt/.switchyard/switching", "{not json")
        .await;
    let (code, out, err, took) = timed_apply(&snap, &url, "10s");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("the switch key /corrupt/.switchyard/switching does not read")
            && err.contains("delete it"),
        "{err}"
    );
    assert!(
        took < Duration::from_secs(5),
        "said at once, not tried again until the deadline: {took:?}"
    );
}

/// A key under the prefix whose value is not a document (bytes that are not UTF-8 text, or
/// more bytes than `--max-file-size`) is a load failure naming the key (exit 3), as a typo
/// is, never an outage: etcd answers, the watch goes on (a later edit is loaded, and fails
/// on the same key, at its own revision), and deleting or fixing the key loads at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_not_a_document_is_a_load_failure_naming_its_key_not_an_outage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start(dir.path()).await;
    etcd.put("/sy/clusters.yaml", CLUSTERS).await;
    let url = format!("etcd://{}/sy", etcd.endpoint());
    let server = Switchyard::start_serving(
        &["--source", &url],
        dir.path(),
        (free_port(), free_port()),
        &["--max-file-size", "1024"],
    )
    .await;
    let ready = eventually(Duration::from_secs(20), || async {
        server.status_said(&[]).0 == Some(0)
    })
    .await;
    assert!(ready.is_some(), "{:?}", server.status_said(&[]));

    // Waits until `status` exits 3 with the last load of `revision` failing on `key` for
    // `why`, while etcd is said to answer and the last good generation serves.
    let fails_on =
        |key: &'static str, why: &'static str, revision: i64, serving: &'static [&'static str]| {
            let server = &server;
            async move {
                let failed = eventually(Duration::from_secs(20), || async {
                    let status = server.status().await;
                    let config = status.as_ref().and_then(|s| s.config.clone());
                    server.status_said(&[]).0 == Some(3)
                        && config.is_some_and(|c| {
                            !c.ok
                                && c.revision == Some(revision)
                                && c.errors.iter().any(|e| e.contains(key) && e.contains(why))
                        })
                })
                .await;
                let (code, out, err) = server.status_said(&[]);
                assert!(failed.is_some(), "{code:?}\n{out}{err}");
                assert!(out.contains(key) && out.contains(why), "{out}");
                let source = server
                    .status()
                    .await
                    .and_then(|s| s.config)
                    .and_then(|c| c.source)
                    .expect("the source's health");
                assert!(source.answering, "etcd answers: {source:?}");
                let served: Vec<String> = served_clusters(server)
                    .await
                    .into_iter()
                    .map(|(name, _)| name)
                    .collect();
                assert_eq!(served, serving, "the last good generation serves");
            }
        };

    let mut client = etcd.client().await.expect("etcd answers");
    let written = client
        .put("/sy/binary.yaml", vec![b'x', 0xff, 0xfe, 0x00], None)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision();
    fails_on(
        "etcd:/sy/binary.yaml",
        "is not UTF-8 text",
        written,
        &["backend"],
    )
    .await;
    // The watch goes on: an edit elsewhere is loaded at its own revision (and fails on
    // the same key).
    let other = etcd
        .put(
            "/sy/more.yaml",
            "clusters:\n  - name: more\n    connect_timeout: 2s\n",
        )
        .await;
    fails_on(
        "etcd:/sy/binary.yaml",
        "is not UTF-8 text",
        other,
        &["backend"],
    )
    .await;
    // Deleted: the next load serves at once.
    client
        .delete("/sy/binary.yaml", None)
        .await
        .expect("delete");
    let recovered = eventually(Duration::from_secs(10), || async {
        served_clusters(&server).await.len() == 2 && server.status_said(&[]).0 == Some(0)
    })
    .await;
    assert!(recovered.is_some(), "{:?}", server.status_said(&[]));

    // Over --max-file-size: the same, then fixed in place.
    let large = format!("# {}\nclusters: []\n", "x".repeat(2000));
    let written = etcd.put("/sy/more.yaml", &large).await;
    fails_on(
        "etcd:/sy/more.yaml",
        "more than the limit of 1024 (--max-file-size)",
        written,
        &["backend", "more"],
    )
    .await;
    etcd.put("/sy/more.yaml", "clusters: []\n").await;
    let recovered = eventually(Duration::from_secs(10), || async {
        server.status_said(&[]).0 == Some(0)
    })
    .await;
    assert!(recovered.is_some(), "{:?}", server.status_said(&[]));
    let log = server.process.log_text();
    assert!(
        !log.contains("etcd does not answer"),
        "a bad value is not an outage:\n{log}"
    );
}

/// One deadline per apply, honoured by every step: etcd stalled (SIGSTOP) at a seeded
/// random moment of a large apply (switched over in several transactions: connect, read,
/// stage, begin, copy, end), for longer than `--source-timeout`: the apply ends within
/// its deadline (and the tidying after it), with words saying etcd did not answer, never
/// stalled with it. Once etcd is back, an apply finishes what was left, and the prefix
/// holds the change whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_ends_within_its_one_deadline_wherever_etcd_stalls() {
    let seed = support::seed_from("SWITCHYARD_FAULT_SEED");
    let mut random = support::Seeded(seed);
    let dir = tempfile::tempdir().expect("tmp");
    let etcd = Etcd::start(dir.path()).await;
    let url = format!("etcd://{}/stall", etcd.endpoint());
    let snap = dir.path().join("snap");
    std::fs::create_dir(&snap).expect("mkdir");
    let pid = etcd.process.pid();
    let signal = |signal: &str| support::run::signal(pid, signal);
    const DOCUMENTS: usize = 1500;
    let stage = |round: u32| {
        for i in 0..DOCUMENTS {
            support::write(
                &snap,
                &format!("c{i}.yaml"),
                &format!(
                    "clusters:\n  - name: c{i}\n    connect_timeout: {}s\n",
                    round + 1
                ),
            );
        }
    };
    // How long such an apply takes here, unstalled: the stalls fall within it.
    stage(99);
    let (code, out, err, whole) = timed_apply(&snap, &url, "20s");
    assert_eq!(code, Some(0), "{out}{err}");
    eprintln!("an unstalled apply of {DOCUMENTS} documents took {whole:?}");
    for round in 0..6u32 {
        // The switch, in several transactions.
        stage(round);
        // From the apply's second half on (its talk with etcd comes after it checked the
        // documents) to a little past its end: each step of its talk may meet the stall.
        let half = u64::try_from(whole.as_millis() / 2).unwrap_or(1).max(1);
        let delay = Duration::from_millis(half + random.draw() % (2 * half));
        let started = std::time::Instant::now();
        let applying = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["apply", snap.to_str().expect("utf-8"), "--source", &url])
            .args(["--source-timeout", "2s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("apply starts");
        tokio::time::sleep(delay).await;
        signal("-STOP");
        // Bounded: an apply stalled with etcd is resumed with it after 15 s, and fails here.
        let mut applying = applying;
        let ended = eventually_exits(&mut applying, Duration::from_secs(15)).await;
        let took = started.elapsed();
        signal("-CONT");
        let out = tokio::task::spawn_blocking(move || applying.wait_with_output())
            .await
            .expect("joins")
            .expect("apply ends");
        assert!(
            ended,
            "round {round}: the apply stalled with etcd past 15 s"
        );
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "round {round} (seed {seed}): etcd stalled {delay:?} into the apply; it ended after \
             {took:?}, exit {:?}: {}",
            out.status.code(),
            said.lines().last().unwrap_or_default()
        );
        // 2 s, the tidying's 1 s, the process's start and end.
        assert!(
            took < Duration::from_secs(5),
            "round {round}: the apply took {took:?} with --source-timeout 2s:\n{said}"
        );
        if !out.status.success() {
            assert!(
                said.contains("within --source-timeout")
                    || said.contains("no answer")
                    || said.contains("did not answer"),
                "round {round}: {said}"
            );
        }
        // Back: an apply finishes it (or finds it landed), and the prefix holds it whole.
        let (code, out, err, _) = timed_apply(&snap, &url, "20s");
        assert_eq!(code, Some(0), "round {round}: {out}{err}");
        let mut client = etcd.client().await.expect("etcd answers");
        let read = client
            .get(
                "/stall/",
                Some(switchyard_etcd::GetOptions::new().with_prefix()),
            )
            .await
            .expect("read");
        let want = format!("connect_timeout: {}s", round + 1);
        let whole = read
            .kvs()
            .iter()
            .filter(|kv| kv.key().starts_with(b"/stall/c"))
            .filter(|kv| String::from_utf8_lossy(kv.value()).contains(&want))
            .count();
        assert_eq!(whole, DOCUMENTS, "round {round}: the change is whole");
    }
}

/// Whether `child` exits within `limit` (looked at every 50 ms).
async fn eventually_exits(child: &mut std::process::Child, limit: Duration) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if child.try_wait().ok().flatten().is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
