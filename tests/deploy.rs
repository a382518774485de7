//! The deploy/ files: every manifest and compose file parses, the flags they give
//! `switchyard` are ones it takes, the snapshot files they carry validate, and the ports
//! they wire together match (Envoy's `switchyard` cluster, Switchyard's `--xds-addr`, the
//! upstream, the published listener).

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use serde::Deserialize;
use serde_yaml::Value;
use switchyard::cli::{Cli, Command as Sub, ServeArgs};

use switchyard_testkit as support;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// Every YAML document in a file.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("readable");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

/// `switchyard <args>` as the binary would parse it: the serve flags.
fn serve_args(args: &[&str]) -> ServeArgs {
    let cli = Cli::try_parse_from(std::iter::once("switchyard").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?} do not parse: {e}"));
    match cli.command {
        Sub::Serve(serve) => *serve,
        other => panic!("expected serve, not {other:?}"),
    }
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_sequence()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string"))
        .collect()
}

/// `switchyard validate --strict` on a directory of snapshot files.
fn validates(dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["validate", "--strict", "-c"])
        .arg(dir)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A ConfigMap's files written to a new directory.
fn config_map_files(doc: &Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    for (name, content) in doc["data"].as_mapping().expect("data") {
        std::fs::write(
            dir.path().join(name.as_str().expect("name")),
            content.as_str().expect("text"),
        )
        .expect("write");
    }
    dir
}

/// The port of the `switchyard` cluster in an Envoy bootstrap.
fn switchyard_port(bootstrap: &Value) -> u64 {
    let clusters = bootstrap["static_resources"]["clusters"]
        .as_sequence()
        .expect("clusters");
    let cluster = clusters
        .iter()
        .find(|c| c["name"] == "switchyard")
        .expect("a switchyard cluster");
    cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
        ["socket_address"]["port_value"]
        .as_u64()
        .expect("a port")
}

/// `kubectl kustomize deploy/kubernetes/overlays/<overlay>`, every document of it.
fn kustomize(overlay: &str) -> Vec<Value> {
    let kubectl = support::envoy::debian_tool("KUBECTL", "kubectl", "kubernetes-client");
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(deploy(&format!("kubernetes/overlays/{overlay}")))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize {overlay}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{overlay}: {e}")))
        .filter(|d| !d.is_null())
        .collect()
}

fn kind_named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Every ConfigMap a Deployment mounts is in the rendering (kustomize renamed both).
fn mounts_resolve(docs: &[Value], deployment: &Value) {
    for volume in deployment["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .expect("volumes")
    {
        if let Some(name) = volume["configMap"]["name"].as_str() {
            kind_named(docs, "ConfigMap", name);
        }
    }
}

#[test]
fn the_replicas_overlay_renders_validates_and_guards_its_admin_port() {
    let docs = kustomize("replicas");
    let mut kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"]
    );
    let deployment = kind_named(&docs, "Deployment", "switchyard");
    assert!(
        deployment["spec"]["replicas"].as_u64() >= Some(2),
        "replicas"
    );
    mounts_resolve(&docs, deployment);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let serve = serve_args(&strings(&container["args"]));
    assert!(
        !serve.admin.admin_addr.ip().is_loopback(),
        "probes need the pod IP"
    );
    assert!(
        serve.admin.token.admin_token_file.is_some() && serve.admin.admin_tls_cert.is_some(),
        "an admin API beyond loopback has its token and TLS"
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    // The ports the container names are the ones its flags listen on.
    let port = |name: &str| {
        container["ports"]
            .as_sequence()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("port {name}"))
    };
    assert_eq!(port("xds"), u64::from(serve.xds_addr.port()));
    assert_eq!(port("admin"), u64::from(serve.admin.admin_addr.port()));
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(
        annotations["prometheus.io/port"].as_str(),
        Some(serve.admin.admin_addr.port().to_string().as_str())
    );
    let service = kind_named(&docs, "Service", "switchyard");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "xds");
    let pdb = kind_named(&docs, "PodDisruptionBudget", "switchyard");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    validates(config_map_files(kind_named(&docs, "ConfigMap", "switchyard-snapshots")).path());
}

#[test]
fn the_sidecar_overlay_wires_envoy_to_its_switchyard_on_loopback() {
    let docs = kustomize("sidecar");
    let snapshots = kind_named(&docs, "ConfigMap", "edge-switchyard-snapshots");
    validates(config_map_files(snapshots).path());
    let envoy_cm = kind_named(&docs, "ConfigMap", "edge-envoy");
    let bootstrap: Value =
        serde_yaml::from_str(envoy_cm["data"]["envoy.yaml"].as_str().expect("text"))
            .expect("the bootstrap parses");
    let deployment = kind_named(&docs, "Deployment", "edge-switchyard");
    mounts_resolve(&docs, deployment);
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers");
    let names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"envoy") && names.contains(&"switchyard"));
    let sidecar = containers
        .iter()
        .find(|c| c["name"] == "switchyard")
        .expect("switchyard container");
    let serve = serve_args(&strings(&sidecar["args"]));
    assert!(serve.xds_addr.ip().is_loopback() && serve.admin.admin_addr.ip().is_loopback());
    assert!(
        serve.insecure_serve_secrets,
        "the only client is the local Envoy"
    );
    assert_eq!(
        switchyard_port(&bootstrap),
        u64::from(serve.xds_addr.port())
    );
    assert!(
        !docs.iter().any(|d| d["kind"] == "Service"),
        "nothing outside the Pod reaches it"
    );
}

#[test]
fn the_compose_demo_wires_switchyard_envoy_and_the_upstream() {
    let compose = &documents(&deploy("compose/docker-compose.yaml"))[0];
    let services = &compose["services"];
    let serve = serve_args(&strings(&services["switchyard"]["command"]));
    let bootstrap = &documents(&deploy("compose/envoy.yaml"))[0];
    assert_eq!(switchyard_port(bootstrap), u64::from(serve.xds_addr.port()));
    assert_eq!(
        strings(&services["switchyard"]["expose"]),
        [serve.xds_addr.port().to_string()]
    );
    let snapshots = deploy("compose/snapshots");
    validates(&snapshots);
    let mesh = &documents(&snapshots.join("mesh.yaml"))[0];
    // The upstream listens where the snapshot's cluster points.
    let upstream = &mesh["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
        ["endpoint"]["address"]["socket_address"];
    assert_eq!(upstream["address"], "upstream");
    let listen = format!(":{}", upstream["port_value"].as_u64().expect("port"));
    assert!(
        strings(&services["upstream"]["command"])
            .iter()
            .any(|a| a.ends_with(&listen)),
        "the upstream does not listen on {listen}"
    );
    // Envoy publishes the snapshot's listener port.
    let port = mesh["listeners"][0]["address"]["socket_address"]["port_value"]
        .as_u64()
        .expect("port");
    assert_eq!(
        strings(&services["envoy"]["ports"]),
        [format!("{port}:{port}")]
    );
}

#[test]
fn the_dockerfile_command_parses() {
    let text = std::fs::read_to_string(deploy("Dockerfile")).expect("Dockerfile");
    let cmd = text
        .split("\nCMD ")
        .nth(1)
        .expect("a CMD")
        .replace("\\\n", " ");
    let json = cmd.lines().next().expect("CMD line");
    let args: Vec<String> = serde_json::from_str(json).expect("CMD is a JSON array");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let serve = serve_args(&args);
    assert!(serve.admin.token.admin_token_file.is_some() && serve.admin.admin_tls_cert.is_some());
}

/// The `etcd` overlay: the replicas serve an etcd prefix instead of mounted files,
/// reaching etcd over TLS with the client certificate of a Secret they mount; every path the
/// flags name is mounted, and no snapshot ConfigMap is.
#[test]
fn the_etcd_overlay_serves_a_prefix_over_tls_from_its_secret() {
    let docs = kustomize("etcd");
    let deployment = kind_named(&docs, "Deployment", "switchyard");
    assert!(deployment["spec"]["replicas"].as_u64() >= Some(2));
    let spec = &deployment["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let args = strings(&container["args"]);
    let serve = serve_args(&args);
    assert!(serve.config.paths.is_empty(), "no --config: {args:?}");
    let url: switchyard::source::EtcdUrl = serve
        .source
        .as_deref()
        .expect("--source")
        .parse()
        .expect("an etcd URL");
    assert_eq!(url.endpoints.len(), 3, "{url:?}");
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_sequence()
        .expect("mounts")
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    for file in [
        serve.etcd.etcd_ca.as_ref(),
        serve.etcd.etcd_cert.as_ref(),
        serve.etcd.etcd_key.as_ref(),
        serve.admin.admin_tls_cert.as_ref(),
    ] {
        let file = file.expect("the flag is set");
        assert!(
            mounts.iter().any(|m| file.starts_with(m)),
            "{} is not under a mount: {mounts:?}",
            file.display()
        );
    }
    assert!(!mounts.contains(&"/etc/switchyard"), "{mounts:?}");
    let volumes = spec["volumes"].as_sequence().expect("volumes");
    assert!(
        volumes.iter().all(|v| v["configMap"].is_null()),
        "{volumes:?}"
    );
    assert!(volumes
        .iter()
        .any(|v| v["secret"]["secretName"] == "switchyard-etcd"));
}
