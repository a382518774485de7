//! End-to-end with the gRPC library's own xDS client (Python grpcio, target `xds:///echo`):
//! ADS, State of the World, every type subscribed by name (LDS and CDS too, P14), starting
//! from one API listener. An EDS edit moves its calls to another upstream. A name the server
//! does not have fails at once with resource errors (P32), not after gRPC's 15 s timer.

use switchyard_testkit as support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::envoy::{eventually, grpc_python, Process, Switchyard};
use support::write;

const WAIT: Duration = Duration::from_secs(30);

/// Everything gRPC needs for `xds:///echo`, its endpoint on `port`. gRPC ignores localities
/// without a weight, so the endpoint has one.
fn grpc_config(port: u16) -> String {
    format!(
        r#"
listeners:
  - name: echo
    api_listener:
      api_listener:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: echo
        rds: {{ route_config_name: echo-route, config_source: {{ ads: {{}}, resource_api_version: V3 }} }}
        http_filters:
          - name: router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
routes:
  - name: echo-route
    virtual_hosts:
      - name: echo
        domains: ["echo"]
        routes: [{{ match: {{ prefix: "" }}, route: {{ cluster: echo-cluster }} }}]
clusters:
  - name: echo-cluster
    type: EDS
    eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}
endpoints:
  - cluster_name: echo-cluster
    endpoints:
      - locality: {{ zone: z1 }}
        load_balancing_weight: 1
        lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}]
"#
    )
}

/// `switchyard serve` (with `extra` flags) on `dir/config`, holding one unrelated cluster so
/// that it can start before the test knows its upstreams' ports.
async fn serve(dir: &Path, extra: &[&str]) -> (std::path::PathBuf, Switchyard) {
    let config = dir.join("config");
    std::fs::create_dir(&config).expect("mkdir");
    write(
        &config,
        "other.yaml",
        "clusters: [{ name: other, connect_timeout: 1s }]\n",
    );
    let switchyard = Switchyard::start_with_args(&config, dir, extra).await;
    (config, switchyard)
}

fn answers(client: &Process) -> Vec<String> {
    client
        .log_text()
        .lines()
        .filter_map(|l| l.strip_prefix("ANSWER ").map(str::to_string))
        .collect()
}

/// gRPC's xDS client (`tests/support/grpc_xds_client.py`) calling `targets` through
/// Switchyard, in `dir`, once its upstreams listen: with their ports. `strict`: it acts on
/// resource errors (gRFC A88's `fail_on_data_errors`).
async fn grpc_client(
    python: &Path,
    switchyard: &Switchyard,
    targets: &str,
    dir: &Path,
    strict: bool,
) -> (Process, Vec<u16>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/grpc_xds_client.py");
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .arg(switchyard.port.to_string())
        .arg(targets)
        .arg(dir);
    if strict {
        cmd.arg("strict");
    }
    let client = Process::spawn("grpc client", cmd, dir.join("client.log"));
    let ports_file = dir.join("ports");
    let started = eventually(WAIT, || {
        let p = ports_file.clone();
        async move { p.exists() }
    })
    .await;
    assert!(started.is_some(), "the gRPC upstreams did not start");
    let ports = std::fs::read_to_string(&ports_file)
        .expect("ports")
        .split_whitespace()
        .map(|p| p.parse().expect("a port"))
        .collect();
    (client, ports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_grpc_xds_client_finds_its_upstream_by_name_and_follows_an_eds_edit() {
    let Some(python) = grpc_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let (config, switchyard) = serve(dir.path(), &[]).await;
    let (client, ports) = grpc_client(&python, &switchyard, "echo", dir.path(), false).await;

    write(&config, "grpc.yaml", &grpc_config(ports[0]));
    std::fs::write(dir.path().join("go"), "").expect("go");
    let reaches = |want: &'static str| {
        let client = &client;
        async move {
            eventually(WAIT, || async move {
                answers(client).last().map(String::as_str) == Some(want)
            })
            .await
            .is_some()
        }
    };
    assert!(
        reaches("a").await,
        "gRPC never reached upstream a: {:?}",
        answers(&client)
    );

    write(&config, "grpc.yaml", &grpc_config(ports[1]));
    assert!(
        reaches("b").await,
        "gRPC did not follow the EDS edit: {:?}",
        answers(&client)
    );

    // Every type was subscribed by name and ACKed; nothing was rejected.
    assert!(switchyard.logged("xDS stream opened.", &[("node", "grpc-client-1")]));
    assert!(!switchyard.logged("NACK", &[]));
    std::fs::write(dir.path().join("stop"), "").expect("stop");
}

/// The line of `client`'s output that starts with `prefix`, once it is there.
async fn line(client: &Process, prefix: &str, wait: Duration) -> Option<String> {
    let find = || {
        client
            .log_text()
            .lines()
            .find_map(|l| l.strip_prefix(prefix).map(str::to_string))
    };
    eventually(wait, || async { find().is_some() }).await?;
    find()
}

/// P32 with gRPC's data-error handling (gRFC A88): `xds:///missing` fails as soon as the
/// server says NOT_FOUND, where without it gRPC waits out its 15 s does-not-exist timer
/// (P31); and once a file adds the listener, the same channel reaches its upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_p32_grpc_fails_a_missing_name_at_once_and_recovers_when_a_file_adds_it() {
    let Some(python) = grpc_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let (config, switchyard) = serve(dir.path(), &[]).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/grpc_not_found.py");
    let client = |mode: &'static str| {
        let work = dir.path().join(mode);
        std::fs::create_dir(&work).expect("mkdir");
        let mut cmd = Command::new(&python);
        cmd.arg(&script)
            .arg(switchyard.port.to_string())
            .arg("missing")
            .arg(&work)
            .arg(mode);
        Process::spawn(mode, cmd, work.join("client.log"))
    };
    // Both at once: the plain client's 15 s run beside the other's.
    let (errors, plain) = (client("errors"), client("plain"));

    let seconds = |text: &str| -> f64 {
        text.split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a time in {text:?}"))
    };
    let failed = line(&errors, "FAILED_AFTER ", WAIT)
        .await
        .unwrap_or_else(|| panic!("never failed: {}", errors.log_text()));
    assert!(failed.contains("UNAVAILABLE"), "{failed}");
    assert!(
        failed.contains("missing"),
        "names what is missing: {failed}"
    );
    let with_errors = seconds(&failed);
    assert!(with_errors < 1.0, "took {with_errors} s to fail");
    let failed = line(&plain, "FAILED_AFTER ", WAIT)
        .await
        .unwrap_or_else(|| panic!("never failed: {}", plain.log_text()));
    let without = seconds(&failed);
    assert!(
        without > 10.0,
        "without resource errors gRPC waits its timer: {without} s"
    );
    eprintln!("time to fail xds:///missing: {with_errors:.3} s with resource errors, {without:.3} s without");
    let status = switchyard.status().await.expect("/status");
    let grpc = status
        .nodes
        .iter()
        .find(|n| n.node_id == "grpc-errors")
        .expect("listed");
    assert_eq!(grpc.types["LDS"].not_found, ["missing"]);

    // The file adds it: the channel recovers.
    let port: u16 = std::fs::read_to_string(dir.path().join("errors/port"))
        .expect("port")
        .trim()
        .parse()
        .expect("a port");
    write(
        &config,
        "grpc.yaml",
        &grpc_config(port)
            .replace(
                "name: echo\n    api_listener",
                "name: missing\n    api_listener",
            )
            .replace("domains: [\"echo\"]", "domains: [\"*\"]"),
    );
    let ok = line(&errors, "OK_AFTER ", WAIT).await;
    assert!(ok.is_some(), "never recovered: {}", errors.log_text());
    assert!(!switchyard.logged("NACK", &[]));
}

/// Everything gRPC needs to reach its upstream on `port` by xdstp names of authority
/// `switchyard.test` (P35): listener, route configuration, cluster and endpoints, the route
/// naming the cluster with its context parameters in another order than the cluster's own
/// name (compared in canonical form).
fn xdstp_config(port: u16) -> String {
    let x = |kind: &str, id: &str| format!("xdstp://switchyard.test/envoy.config.{kind}/{id}");
    let (listener, route) = (
        x("listener.v3.Listener", "echo"),
        x("route.v3.RouteConfiguration", "echo-route"),
    );
    let cla = x("endpoint.v3.ClusterLoadAssignment", "echo");
    let cluster = x("cluster.v3.Cluster", "echo?a=1&b=2");
    let cluster_reordered = x("cluster.v3.Cluster", "echo?b=2&a=1");
    grpc_config(port)
        .replace("- name: echo\n    api_listener", &format!("- name: \"{listener}\"\n    api_listener"))
        .replace("route_config_name: echo-route", &format!("route_config_name: \"{route}\""))
        .replace("- name: echo-route", &format!("- name: \"{route}\""))
        .replace("domains: [\"echo\"]", "domains: [\"*\"]")
        .replace("cluster: echo-cluster", &format!("cluster: \"{cluster_reordered}\""))
        .replace("- name: echo-cluster", &format!("- name: \"{cluster}\""))
        .replace("eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}", "")
        .replace(
            "eds_cluster_config: { eds_config: { ads: {}, resource_api_version: V3 } }",
            &format!("eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }}, service_name: \"{cla}\" }}"),
        )
        .replace("- cluster_name: echo-cluster", &format!("- cluster_name: \"{cla}\""))
}

/// P35 with gRPC federation (gRFC A47): a bootstrap with `authorities` and
/// `client_default_listener_resource_name_template` reaches the same service by
/// `xds:///echo` and by `xds://switchyard.test/echo`, every resource named by an xdstp URL;
/// an authority the server does not answer for (`--authority switchyard.test`) is answered
/// as not existing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_p35_grpc_reaches_a_service_by_xdstp_names_through_its_authority() {
    let Some(python) = grpc_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let (config, switchyard) = serve(dir.path(), &["--authority", "switchyard.test"]).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/grpc_xdstp_client.py");
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .arg(switchyard.port.to_string())
        .arg(dir.path());
    let client = Process::spawn("grpc xdstp client", cmd, dir.path().join("client.log"));
    let port_file = dir.path().join("port");
    assert!(
        eventually(WAIT, || {
            let p = port_file.clone();
            async move { p.exists() }
        })
        .await
        .is_some(),
        "the upstream did not start"
    );
    let port: u16 = std::fs::read_to_string(&port_file)
        .expect("port")
        .trim()
        .parse()
        .expect("a port");
    write(&config, "grpc.yaml", &xdstp_config(port));
    // The client tries each target once, and a name not there yet fails at once: go only
    // once the file is loaded.
    let loaded = eventually(WAIT, || async {
        switchyard
            .status()
            .await
            .and_then(|s| s.config)
            .is_some_and(|c| c.generation >= 2 || !c.ok)
    })
    .await;
    let config_status = switchyard.status().await.and_then(|s| s.config);
    assert!(
        loaded.is_some() && config_status.as_ref().is_some_and(|c| c.ok),
        "{config_status:?}"
    );
    std::fs::write(dir.path().join("go"), "").expect("go");
    let result = |target: &'static str| {
        let client = &client;
        async move { line(client, &format!("RESULT {target} "), WAIT).await }
    };
    assert_eq!(
        result("xds:///echo").await.as_deref(),
        Some("ok"),
        "{}",
        client.log_text()
    );
    assert_eq!(
        result("xds://switchyard.test/echo").await.as_deref(),
        Some("ok"),
        "{}",
        client.log_text()
    );
    let other = result("xds://other.test/echo").await.expect("a result");
    assert!(
        other.starts_with("error StatusCode.UNAVAILABLE after 0."),
        "{other}"
    );
    assert!(other.contains("other.test"), "{other}");
    assert!(!switchyard.logged("NACK", &[]));
}

/// P10 with gRPC: two targets, `one` and `two`, each its own listener, route configuration,
/// cluster and endpoints. `one` changes one type at a time (EDS, CDS, RDS, then LDS), each
/// time one resource of the type; `two` keeps answering from its upstream throughout, its
/// answers unchanged. gRPC asks for every type by name, and here acts on resource errors
/// (gRFC A88's `fail_on_data_errors`): a response that said `two`'s listener, route
/// configuration, cluster or endpoints do not exist would fail its calls. (gRPC 1.85 keeps
/// a listener or cluster a LDS or CDS response leaves out, even so: that LDS and CDS go
/// whole to names is held by the unit tests, `p10_names_get_what_changed_and_lds_cds_every_name_asked_for`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_p10_grpc_keeps_every_other_resource_when_one_changes() {
    let Some(python) = grpc_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let (config, switchyard) = serve(dir.path(), &[]).await;
    let (client, ports) = grpc_client(&python, &switchyard, "one,two", dir.path(), true).await;
    // A target's listener, route configuration, cluster (with its EDS service name) and
    // endpoints, each named after the target and what the step made of it.
    let target = |name: &str, route: &str, cluster: &str, service: &str, port: u16| {
        grpc_config(port)
            .replace(
                "name: echo\n    api_listener",
                &format!("name: {name}\n    api_listener"),
            )
            .replace("stat_prefix: echo", &format!("stat_prefix: {name}"))
            .replace("echo-route", route)
            .replace("domains: [\"echo\"]", &format!("domains: [\"{name}\"]"))
            .replace(
                "eds_cluster_config: { eds_config:",
                &format!("eds_cluster_config: {{ service_name: {service}, eds_config:"),
            )
            .replace(
                "cluster_name: echo-cluster",
                &format!("cluster_name: {service}"),
            )
            .replace("echo-cluster", cluster)
    };
    let (a, b) = (ports[0], ports[1]);
    let two = target("two", "two-route", "two-cluster", "two-eds", a);
    let files = |one: String| {
        write(&config, "one.yaml", &one);
        write(&config, "two.yaml", &two);
    };
    files(target("one", "one-route", "one-cluster", "one-eds", a));
    std::fs::write(dir.path().join("go"), "").expect("go");
    let says = |which: &'static str| {
        let prefix = format!("{which} ");
        client
            .log_text()
            .lines()
            .filter_map(|l| l.strip_prefix("ANSWER "))
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let reaches = |want: &'static str| {
        let says = &says;
        async move {
            eventually(WAIT, || async move {
                says("one").last().map(String::as_str) == Some(want)
            })
            .await
            .is_some()
        }
    };
    assert!(reaches("a").await, "one never answered: {:?}", says("one"));
    // (Written one file after the other, `two` may fail before its file is read.)
    let two_answers = eventually(WAIT, || async {
        says("two").last().map(String::as_str) == Some("a")
    })
    .await;
    assert!(
        two_answers.is_some(),
        "two never answered: {:?}",
        says("two")
    );
    let before = says("two");
    let steps: [(&str, String, &str); 4] = [
        // EDS: one's endpoints move to b.
        (
            "EDS",
            target("one", "one-route", "one-cluster", "one-eds", b),
            "b",
        ),
        // CDS: one's cluster takes its endpoints from another EDS service (at a).
        (
            "CDS",
            target("one", "one-route", "one-cluster", "one-eds-2", a),
            "a",
        ),
        // RDS: one's route configuration sends to another cluster (at b).
        (
            "RDS",
            target("one", "one-route", "one-cluster-b", "one-eds-3", b),
            "b",
        ),
        // LDS: one's listener takes another route configuration (to a).
        (
            "LDS",
            target("one", "one-route-2", "one-cluster-b", "one-eds-4", a),
            "a",
        ),
    ];
    for (kind, one, want) in steps {
        files(one);
        assert!(
            reaches(want).await,
            "{kind}: one did not move to {want}: {:?}",
            says("one")
        );
        // A moment more of calls through `two`, then check it never changed.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            says("two"),
            before,
            "{kind}: two did not keep answering while one changed"
        );
    }
    assert!(!switchyard.logged("NACK", &[]), "gRPC rejected a response");
    std::fs::write(dir.path().join("stop"), "").expect("stop");
}
