//! Tests of loading snapshot files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prost::Message;

use super::*;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::listener::v3::Listener;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&path, text).expect("write");
    path
}

fn load_dir(dir: &Path) -> Result<Config, LoadFailure> {
    load(&[dir.to_path_buf()], &LoadOptions::default())
}

fn errors(dir: &Path) -> Vec<String> {
    match load_dir(dir) {
        Ok(_) => panic!("expected the load to fail"),
        Err(f) => f.errors.iter().map(|e| e.to_string()).collect(),
    }
}

const FULL: &str = r#"
clusters:
  - name: backend
    connect_timeout: 1s
    type: EDS
    eds_cluster_config: { eds_config: { ads: {} } }
endpoints:
  - cluster_name: backend
    endpoints:
      - lb_endpoints:
          - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
listeners:
  - name: http
    address: { socket_address: { address: 0.0.0.0, port_value: 10000 } }
    filter_chains:
      - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: ingress
              rds: { route_config_name: main, config_source: { ads: {} } }
              http_filters:
                - name: envoy.filters.http.router
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
routes:
  - name: main
    virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
          - match: { prefix: / }
            route: { cluster: backend }
runtimes:
  - name: rt
    layer: { a: 1, b: "two", c: { d: true }, e: 1.5, f: 3, g: 4 }
"#;

#[test]
fn loads_every_kind_with_typed_config_any() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "all.yaml", FULL);
    let config = load_dir(dir.path()).expect("loads");
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let file = &config.files[0];
    let kinds: Vec<_> = file
        .resources
        .iter()
        .map(|r| (r.kind, r.name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            (ResourceType::Cluster, "backend"),
            (ResourceType::Endpoint, "backend"),
            (ResourceType::Listener, "http"),
            (ResourceType::Route, "main"),
            (ResourceType::Runtime, "rt"),
        ]
    );
    // The bytes are real Envoy protobufs.
    let cluster = Cluster::decode(file.resources[0].body.clone()).expect("cluster");
    assert_eq!(cluster.connect_timeout.map(|d| d.seconds), Some(1));
    assert_eq!(file.resources[0].warms_with.as_deref(), Some("backend"));
    let listener = Listener::decode(file.resources[2].body.clone()).expect("listener");
    let any = listener.filter_chains[0].filters[0]
        .config_type
        .as_ref()
        .expect("typed_config");
    let envoy_types::pb::envoy::config::listener::v3::filter::ConfigType::TypedConfig(any) = any
    else {
        panic!("typed config expected");
    };
    assert!(any.type_url.ends_with("HttpConnectionManager"));
    assert!(!any.value.is_empty());
}

#[test]
fn versions_are_stable_across_loads_even_with_map_fields() {
    // The runtime layer is a Struct (a map): its encoded bytes may differ between loads, its
    // version must not.
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "all.yaml", FULL);
    let versions = |c: &Config| -> Vec<String> {
        c.files[0]
            .resources
            .iter()
            .map(|r| r.version.clone())
            .collect()
    };
    let first = versions(&load_dir(dir.path()).expect("loads"));
    for _ in 0..5 {
        assert_eq!(versions(&load_dir(dir.path()).expect("loads")), first);
    }
    // camelCase spelling of the same content: same versions.
    write(
        dir.path(),
        "all.yaml",
        &FULL
            .replace("connect_timeout", "connectTimeout")
            .replace("cluster_name", "clusterName"),
    );
    assert_eq!(versions(&load_dir(dir.path()).expect("loads")), first);
    // A real change: a new version for that resource only.
    write(
        dir.path(),
        "all.yaml",
        &FULL.replace("connect_timeout: 1s", "connect_timeout: 2s"),
    );
    let changed = versions(&load_dir(dir.path()).expect("loads"));
    assert_ne!(changed[0], first[0]);
    assert_eq!(changed[1..], first[1..]);
}

#[test]
fn unknown_field_names_file_resource_and_field_path() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = write(
        dir.path(),
        "bad.yaml",
        "clusters:\n  - name: c1\n    load_assignment:\n      cluster_name: c1\n      endpoints:\n        - lb_endpoints:\n            - endpoint: { adress: {} }\n",
    );
    let errs = errors(dir.path());
    assert_eq!(errs.len(), 1, "{errs:?}");
    let e = &errs[0];
    assert!(e.starts_with(&path.display().to_string()), "{e}");
    assert!(e.contains("clusters[0] \"c1\""), "{e}");
    assert!(
        e.contains("load_assignment.endpoints[0].lb_endpoints[0].endpoint"),
        "{e}"
    );
    assert!(e.contains("adress"), "{e}");
    // The resource is named by its name field in either spelling (here EDS's
    // `cluster_name` as `clusterName`, its proto3 JSON name).
    write(
        dir.path(),
        "bad.yaml",
        "endpoints:\n  - clusterName: e1\n    bogus: 1\n",
    );
    let errs = errors(dir.path());
    assert!(errs[0].contains("endpoints[0] \"e1\""), "{errs:?}");
}

#[test]
fn wrong_value_type_and_unknown_any_type_are_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "a.yaml",
        "clusters:\n  - name: c1\n    connect_timeout: soon\n",
    );
    write(
        dir.path(),
        "b.yaml",
        "listeners:\n  - name: l1\n    filter_chains:\n      - filters:\n          - name: x\n            typed_config:\n              \"@type\": type.googleapis.com/no.such.Filter\n",
    );
    let errs = errors(dir.path());
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].contains("a.yaml") && errs[0].contains("connect_timeout"),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].contains("b.yaml") && errs[1].contains("no.such.Filter"),
        "{}",
        errs[1]
    );
}

#[test]
fn missing_name_is_an_error() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "a.yaml", "endpoints:\n  - endpoints: []\n");
    let errs = errors(dir.path());
    assert!(
        errs[0].contains("endpoints[0]") && errs[0].contains("missing `cluster_name`"),
        "{errs:?}"
    );
}

#[test]
fn syntax_errors_give_the_line() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "a.yaml", "clusters:\n  - name: c1\n   bad: [\n");
    write(
        dir.path(),
        "b.json",
        "{\"clusters\": [\n  {\"name\": \"x\",}\n]}",
    );
    let errs = errors(dir.path());
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0].contains("invalid YAML") && errs[0].contains("line 3"),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].contains("invalid JSON") && errs[1].contains("line 2"),
        "{}",
        errs[1]
    );
}

#[test]
fn unknown_top_level_key_is_an_error() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "a.yaml", "clusterz: []\n");
    let errs = errors(dir.path());
    assert!(errs[0].contains("unknown field `clusterz`"), "{errs:?}");
    // The keys offered come from the type table: every file key.
    for kind in ResourceType::ALL {
        assert!(
            errs[0].contains(&format!("`{}`", kind.file_key())),
            "{errs:?}"
        );
    }
    write(dir.path(), "a.yaml", "- just a list\n");
    assert!(errors(dir.path())[0].contains("expected a mapping"));
    // A list that is not one, and a bad selector entry: named by where they are.
    write(dir.path(), "a.yaml", "clusters: 5\n");
    let errs = errors(dir.path());
    assert!(
        errs[0].contains("clusters") && errs[0].contains("expected a sequence"),
        "{errs:?}"
    );
    write(dir.path(), "a.yaml", "nodes:\n- id: a\n- idd: b\n");
    let errs = errors(dir.path());
    assert!(
        errs[0].contains("nodes[1]") && errs[0].contains("unknown field `idd`"),
        "{errs:?}"
    );
}

#[test]
fn every_error_is_reported_at_once() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "a.yaml",
        "clusters:\n  - name: a\n    nope: 1\n  - name: b\n    nope: 2\nroutes:\n  - {}\n",
    );
    write(dir.path(), "b.yaml", "nodes: []\n");
    let errs = errors(dir.path());
    assert_eq!(errs.len(), 4, "{errs:?}");
}

#[test]
fn duplicates_name_both_files_unless_selectors_are_disjoint() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "a.yaml",
        "clusters: [{name: c, connect_timeout: 1s}]\n",
    );
    write(
        dir.path(),
        "b.yaml",
        "clusters: [{name: c, connect_timeout: 2s}]\n",
    );
    let errs = errors(dir.path());
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].contains("a.yaml") && errs[0].contains("b.yaml"),
        "{}",
        errs[0]
    );
    // Disjoint selectors: the same name for two node groups is fine.
    write(
        dir.path(),
        "a.yaml",
        "nodes: [{id: edge-*}]\nclusters: [{name: c, connect_timeout: 1s}]\n",
    );
    write(
        dir.path(),
        "b.yaml",
        "nodes: [{id: core-*}]\nclusters: [{name: c, connect_timeout: 2s}]\n",
    );
    load_dir(dir.path()).expect("disjoint selectors");
    // Twice in one file.
    write(
        dir.path(),
        "a.yaml",
        "nodes: [{id: edge-*}]\nclusters: [{name: d}, {name: d}]\n",
    );
    assert!(errors(dir.path())[0].contains("defined twice"));
}

#[test]
fn reference_problems_are_warnings_or_errors_under_strict() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "a.yaml",
        &FULL
            .replace("route: { cluster: backend }", "route: { cluster: nowhere }")
            .replace("route_config_name: main", "route_config_name: missing")
            .replace("  - cluster_name: backend", "  - cluster_name: other"),
    );
    let config = load_dir(dir.path()).expect("warnings do not fail");
    let warnings: Vec<_> = config.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains("cluster \"nowhere\"")));
    assert!(warnings
        .iter()
        .any(|w| w.contains("route configuration \"missing\"")));
    assert!(warnings
        .iter()
        .any(|w| w.contains("EDS cluster") && w.contains("\"backend\"")));
    let strict = load(
        &[dir.path().to_path_buf()],
        &LoadOptions {
            strict: true,
            ..LoadOptions::default()
        },
    );
    assert_eq!(strict.expect_err("strict").errors.len(), 3);
}

#[test]
fn secrets_referenced_by_transport_sockets_are_checked() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "a.yaml",
        r#"
clusters:
  - name: tls
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          tls_certificate_sds_secret_configs: [{ name: cert, sds_config: { ads: {} } }]
"#,
    );
    let config = load_dir(dir.path()).expect("loads");
    assert!(config.warnings[0].to_string().contains("secret \"cert\""));
    write(
        dir.path(),
        "b.yaml",
        "secrets:\n  - name: cert\n    generic_secret: { secret: { inline_string: x } }\n",
    );
    assert!(load_dir(dir.path()).expect("loads").warnings.is_empty());
}

#[test]
fn directories_skip_hidden_entries_and_other_extensions_and_follow_links() {
    let dir = tempfile::tempdir().expect("tmp");
    // A Kubernetes ConfigMap mount: files live in a hidden timestamped directory, `..data`
    // links to it, and the visible names link through `..data`.
    write(dir.path(), "..2026_11_30/c.yaml", "clusters: [{name: c}]\n");
    std::os::unix::fs::symlink("..2026_11_30", dir.path().join("..data")).expect("link");
    std::os::unix::fs::symlink("..data/c.yaml", dir.path().join("c.yaml")).expect("link");
    write(dir.path(), "sub/l.yml", "listeners: [{name: l}]\n");
    write(
        dir.path(),
        "sub/e.json",
        "{\"endpoints\": [{\"cluster_name\": \"c\"}]}",
    );
    write(dir.path(), ".hidden.yaml", "this is: [not loaded\n");
    write(dir.path(), "README.md", "not a snapshot\n");
    let config = load_dir(dir.path()).expect("loads");
    let names: Vec<_> = config
        .files
        .iter()
        .flat_map(|f| f.resources.iter().map(|r| r.name.clone()))
        .collect();
    // c.yaml (through the links), sub/e.json (endpoints "c"), sub/l.yml.
    assert_eq!(names, ["c", "c", "l"]);
    assert_eq!(config.files.len(), 3);
}

#[test]
fn a_missing_path_and_an_empty_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let errs = match load(&[dir.path().join("nope")], &LoadOptions::default()) {
        Ok(_) => panic!("missing path must fail"),
        Err(f) => f.errors,
    };
    assert!(errs[0].to_string().contains("nope"));
    // A file that means nothing says so.
    write(dir.path(), "empty.yaml", "{}\n");
    let config = load_dir(dir.path()).expect("`{}` is an empty snapshot");
    assert_eq!(config.resource_count(), 0);
    write(dir.path(), "lists.yaml", "clusters: []\n");
    assert_eq!(load_dir(dir.path()).expect("loads").resource_count(), 0);
}

/// Bad input never removes good config: a truncated file, a dangling symlink or a snapshot
/// file that became a directory is a load error, not an empty snapshot.
#[test]
fn empty_files_dangling_links_and_directories_are_errors() {
    for (setup, says) in [
        ("truncated", "the file is empty"),
        ("comments", "the file is empty"),
        ("dangling", "a symlink to"),
        ("directory", "is a directory"),
    ] {
        let dir = tempfile::tempdir().expect("tmp");
        write(dir.path(), "good.yaml", "clusters: [{name: a}]\n");
        let path = dir.path().join("bad.yaml");
        match setup {
            "truncated" => std::fs::write(&path, "").expect("write"),
            "comments" => std::fs::write(&path, "# clusters: [...]\n").expect("write"),
            "dangling" => {
                std::os::unix::fs::symlink(dir.path().join("gone.yaml"), &path).expect("link")
            }
            _ => std::fs::create_dir(&path).expect("mkdir"),
        }
        let errs = errors(dir.path());
        assert_eq!(errs.len(), 1, "{setup}: {errs:?}");
        assert!(
            errs[0].contains("bad.yaml") && errs[0].contains(says),
            "{setup}: {errs:?}"
        );
    }
    // Named directly, a snapshot file that became a directory is an error too.
    let dir = tempfile::tempdir().expect("tmp");
    let as_dir = dir.path().join("clusters.yaml");
    std::fs::create_dir(&as_dir).expect("mkdir");
    let failure = load(&[as_dir], &LoadOptions::default()).expect_err("a directory");
    assert!(failure.errors[0].to_string().contains("is a directory"));
}

/// A symlink back to a directory being read is named as a loop, not walked for ever (nor
/// cut at an arbitrary depth).
#[test]
fn a_symlink_loop_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "good.yaml", "clusters: [{name: a}]\n");
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    std::os::unix::fs::symlink(dir.path(), sub.join("back")).expect("link");
    let errs = errors(dir.path());
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].contains("back") && errs[0].contains("symlink loop"),
        "{errs:?}"
    );
    // A link to a directory elsewhere is followed.
    let other = tempfile::tempdir().expect("tmp");
    write(other.path(), "more.yaml", "clusters: [{name: b}]\n");
    std::fs::remove_file(sub.join("back")).expect("unlink");
    std::os::unix::fs::symlink(other.path(), sub.join("more")).expect("link");
    assert_eq!(load_dir(dir.path()).expect("loads").resource_count(), 2);
}

#[test]
fn p25_ttl_key_beside_the_resource_sets_its_ttl_and_version() {
    let dir = tempfile::tempdir().expect("tmp");
    let with = |ttl: &str| {
        format!("clusters:\n  - name: c\n    connect_timeout: 1s\n{ttl}    type: STATIC\n")
    };
    write(dir.path(), "a.yaml", &with("    ttl: 30s\n"));
    let thirty = load_dir(dir.path()).expect("loads");
    let c = &thirty.files[0].resources[0];
    assert_eq!(c.ttl, Some(Duration::from_secs(30)));
    // The TTL is not a field of the Cluster on the wire.
    let decoded = Cluster::decode(c.body.clone()).expect("a Cluster");
    assert_eq!(decoded.name, "c");

    write(dir.path(), "a.yaml", &with("    ttl: 1.5m\n"));
    let ninety = load_dir(dir.path()).expect("loads");
    assert_eq!(
        ninety.files[0].resources[0].ttl,
        Some(Duration::from_secs(90))
    );
    write(dir.path(), "a.yaml", &with(""));
    let none = load_dir(dir.path()).expect("loads");
    assert_eq!(none.files[0].resources[0].ttl, None);
    // Changing only the TTL changes the version, so the resource is sent again (P25).
    let versions: BTreeSet<_> = [&thirty, &ninety, &none]
        .iter()
        .map(|c| c.files[0].resources[0].version.clone())
        .collect();
    assert_eq!(versions.len(), 3);

    for (bad, why) in [
        ("ttl: 30", "expected a duration"),
        ("ttl: 30x", "expected a duration"),
        ("ttl: fast", "expected a duration"),
        ("ttl: 200ms", "at least 1s"),
        ("ttl: -5s", "expected a duration"),
    ] {
        write(dir.path(), "a.yaml", &with(&format!("    {bad}\n")));
        let errs = errors(dir.path());
        assert_eq!(errs.len(), 1, "{bad}: {errs:?}");
        assert!(
            errs[0].contains("a.yaml:4:5: clusters[0] \"c\": ttl:") && errs[0].contains(why),
            "{bad}: {}",
            errs[0]
        );
    }
}

#[test]
fn no_resource_type_has_a_field_named_ttl() {
    for kind in crate::resource::ResourceType::ALL {
        assert!(
            descriptors::message(kind)
                .get_field_by_name(TTL_KEY)
                .is_none(),
            "{kind} has a `ttl` field: the TTL key would shadow it"
        );
    }
}

#[test]
fn p24_vhds_virtual_hosts_get_domain_aliases_and_need_a_namespaced_name() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "v.yaml",
        "virtual_hosts:\n  - name: main/shop\n    domains: [shop.example.com, \"*.shop.example.com\"]\n    routes: []\n",
    );
    let config = load_dir(dir.path()).expect("loads");
    let vh = &config.files[0].resources[0];
    assert_eq!(vh.namespace(), Some("main"));
    assert_eq!(
        vh.aliases,
        ["main/*.shop.example.com", "main/shop.example.com"]
    );

    write(
        dir.path(),
        "v.yaml",
        "virtual_hosts:\n  - name: shop\n    domains: [shop.example.com]\n",
    );
    let errs = errors(dir.path());
    assert!(
        errs[0].contains("virtual_hosts[0] \"shop\": name: a VHDS virtual host is named"),
        "{errs:?}"
    );

    // Two virtual hosts of one route configuration claiming one domain.
    write(
        dir.path(),
        "v.yaml",
        "virtual_hosts:\n  - name: main/a\n    domains: [x.com]\n  - name: main/b\n    domains: [x.com]\n",
    );
    let errs = errors(dir.path());
    assert!(
        errs[0].contains("\"main/x.com\" is defined twice"),
        "{errs:?}"
    );
}

/// The dependency graph the make-before-break plan reads (P30): each loaded resource keeps
/// what it refers to, for every kind of reference.
#[test]
fn p30_each_resource_keeps_what_it_refers_to() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "mesh.yaml",
        r#"
clusters:
  - name: backend
    connect_timeout: 1s
    type: EDS
    eds_cluster_config: { eds_config: { ads: {} }, service_name: backend-cla }
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          tls_certificate_sds_secret_configs: [{ name: client-cert, sds_config: { ads: {} } }]
          validation_context_sds_secret_config: { name: ca, sds_config: { ads: {} } }
listeners:
  - name: http
    address: { socket_address: { address: 0.0.0.0, port_value: 10000 } }
    filter_chains:
      - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: ingress
              rds: { route_config_name: main, config_source: { ads: {} } }
              http_filters:
                - name: ext-authz
                  config_discovery:
                    config_source: { ads: {} }
                    type_urls: [type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz]
                - name: envoy.filters.http.router
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  - name: tcp
    address: { socket_address: { address: 0.0.0.0, port_value: 10001 } }
    filter_chains:
      - filters:
          - name: envoy.filters.network.tcp_proxy
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
              stat_prefix: tcp
              weighted_clusters: { clusters: [{ name: t1, weight: 1 }, { name: t2, weight: 1 }] }
  - name: tcp-one
    address: { socket_address: { address: 0.0.0.0, port_value: 10002 } }
    filter_chains:
      - filters:
          - name: envoy.filters.network.tcp_proxy
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
              stat_prefix: tcp
              cluster: t3
routes:
  - name: main
    vhds: { config_source: { ads: {} } }
    virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
          - match: { prefix: /a }
            route: { cluster: backend }
          - match: { prefix: /b }
            route: { weighted_clusters: { clusters: [{ name: w1, weight: 1 }, { name: w2, weight: 1 }] } }
scoped_routes:
  - name: scope
    route_configuration_name: main
    key: { fragments: [{ string_key: k }] }
virtual_hosts:
  - name: main/extra
    domains: [extra.example.com]
    routes:
      - match: { prefix: / }
        route: { cluster: vh-cluster }
"#,
    );
    let config = load_dir(dir.path()).expect("loads");
    let refs = |kind: ResourceType, name: &str| -> Vec<String> {
        let r = config
            .files
            .iter()
            .flat_map(|f| &f.resources)
            .find(|r| r.kind == kind && r.name == name)
            .expect("loaded");
        r.references
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect()
    };
    use ResourceType as T;
    assert_eq!(
        refs(T::Cluster, "backend"),
        ["EDS backend-cla", "SDS ca", "SDS client-cert"]
    );
    assert_eq!(refs(T::Listener, "http"), ["RDS main", "ECDS ext-authz"]);
    assert_eq!(refs(T::Listener, "tcp"), ["CDS t1", "CDS t2"]);
    assert_eq!(refs(T::Listener, "tcp-one"), ["CDS t3"]);
    assert_eq!(
        refs(T::Route, "main"),
        ["CDS backend", "CDS w1", "CDS w2", "VHDS main"]
    );
    assert_eq!(refs(T::ScopedRoute, "scope"), ["RDS main"]);
    assert_eq!(refs(T::VirtualHost, "main/extra"), ["CDS vh-cluster"]);
}

#[test]
fn a_file_past_the_size_limit_is_a_load_error() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "big.yaml", "clusters: [{name: a}]\n");
    let options = LoadOptions {
        max_file_bytes: 10,
        ..LoadOptions::default()
    };
    let failure = load(&[dir.path().to_path_buf()], &options).expect_err("too big");
    let text = failure.errors[0].to_string();
    assert!(
        text.contains("big.yaml") && text.contains("more than the limit of 10"),
        "{text}"
    );
    assert!(load_dir(dir.path()).is_ok(), "within the default limit");
}

/// A value that does not decode in a sensitive field (or inside one) is not echoed in the
/// load error, which goes to logs, `/status` and `validate`; it is still named by its path,
/// through lists and `Any` fields. Errors elsewhere keep their values.
#[test]
fn errors_in_sensitive_fields_do_not_show_the_value() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "secrets.yaml",
        r#"
secrets:
  - name: numeric-token
    generic_secret: { secret: { inline_string: 314159 } }
  - name: bad-key
    tls_certificate:
      certificate_chain: { inline_string: "CHAIN" }
      private_key: { inline_bytes: "TOPSECRET!KEY" }
"#,
    );
    write(
        dir.path(),
        "clusters.yaml",
        r#"
clusters:
  - name: tls
    connect_timeout: 1s
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context:
          tls_certificates:
            - private_key: { inline_string: 271828 }
  - name: plain
    connect_timeout: 1s
    alt_stat_name: 424242
"#,
    );
    let errs = errors(dir.path());
    assert_eq!(errs.len(), 4, "{errs:?}");
    let all = errs.join("\n");
    for secret in ["314159", "TOPSECRET", "271828"] {
        assert!(!all.contains(secret), "{secret} shown: {all}");
    }
    for path in [
        "generic_secret.secret.inline_string",
        "tls_certificate.private_key.inline_bytes",
        "tls_certificates[0].private_key.inline_string",
    ] {
        assert!(
            errs.iter()
                .any(|e| e.contains(path) && e.contains("not shown: the field is sensitive")),
            "{path}: {all}"
        );
    }
    assert!(
        all.contains("424242"),
        "a value in an ordinary field stays: {all}"
    );
}

fn cluster_file(name: &str, timeout: &str) -> String {
    format!("clusters: [{{name: {name}, connect_timeout: {timeout}}}]\n")
}

/// A reload parses only the files whose content changed (and new ones), reuses the rest,
/// forgets removed ones, and gives what a load from scratch gives.
#[test]
fn a_loader_parses_only_the_files_that_changed() {
    let dir = tempfile::tempdir().expect("tmp");
    for name in ["a", "b", "c"] {
        write(
            dir.path(),
            &format!("{name}.yaml"),
            &cluster_file(name, "1s"),
        );
    }
    let roots = [dir.path().to_path_buf()];
    let options = LoadOptions::default();
    let mut loader = Loader::default();
    let (first, work) = loader.load_counting(&roots, &options);
    assert_eq!(
        work,
        LoadWork {
            parsed: 3,
            reused: 0
        }
    );
    let first = first.expect("loads");
    let (again, work) = loader.load_counting(&roots, &options);
    assert_eq!(
        work,
        LoadWork {
            parsed: 0,
            reused: 3
        }
    );
    assert_eq!(again.expect("loads").version(), first.version());

    // An edit (written aside and renamed over, as editors and deploy tools do), a new file
    // and a removed one.
    let tmp = dir.path().join(".b.tmp");
    std::fs::write(&tmp, cluster_file("b", "2s")).expect("write");
    std::fs::rename(&tmp, dir.path().join("b.yaml")).expect("rename");
    write(dir.path(), "d.yaml", &cluster_file("d", "1s"));
    std::fs::remove_file(dir.path().join("c.yaml")).expect("rm");
    let (changed, work) = loader.load_counting(&roots, &options);
    assert_eq!(
        work,
        LoadWork {
            parsed: 2,
            reused: 1
        }
    );
    let changed = changed.expect("loads");
    let scratch = load(&roots, &options).expect("loads");
    assert_eq!(changed.version(), scratch.version());
    let names: Vec<&str> = changed
        .files
        .iter()
        .flat_map(|f| &f.resources)
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b", "d"]);
}

/// A file rewritten in place right after it was read, to the same size, may keep its
/// modification time (a coarse clock tick): its content is compared, so the edit is seen.
#[test]
fn a_loader_sees_an_in_place_edit_within_the_clock_tick() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = write(dir.path(), "a.yaml", &cluster_file("a", "1s"));
    let roots = [dir.path().to_path_buf()];
    let options = LoadOptions::default();
    let mut loader = Loader::default();
    let before = loader.load(&roots, &options).expect("loads").version();
    let stamp = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .expect("mtime");
    std::fs::write(&path, cluster_file("a", "2s")).expect("write in place");
    // Make the stamp exactly as it was: same size, same inode, same time.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(stamp))
        .expect("set mtime");
    let (after, work) = loader.load_counting(&roots, &options);
    assert_eq!(work.parsed, 1, "the edit was not seen");
    assert_ne!(after.expect("loads").version(), before);
}

/// A broken file is reported on every load until it changes, without being parsed again;
/// fixed, it is parsed and loads.
#[test]
fn a_loader_keeps_reporting_a_broken_file_until_it_changes() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "a.yaml", &cluster_file("a", "1s"));
    write(
        dir.path(),
        "b.yaml",
        "clusters: [{name: b, connect_timeout: soon}]\n",
    );
    let roots = [dir.path().to_path_buf()];
    let options = LoadOptions::default();
    let mut loader = Loader::default();
    let (first, _) = loader.load_counting(&roots, &options);
    let (second, work) = loader.load_counting(&roots, &options);
    assert_eq!(work.parsed, 0);
    for result in [first, second] {
        let errors = result.expect_err("b is broken").errors;
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("b.yaml"), "{}", errors[0]);
    }
    let tmp = dir.path().join(".b.tmp");
    std::fs::write(&tmp, cluster_file("b", "1s")).expect("write");
    std::fs::rename(&tmp, dir.path().join("b.yaml")).expect("rename");
    let (fixed, work) = loader.load_counting(&roots, &options);
    assert_eq!(
        work,
        LoadWork {
            parsed: 1,
            reused: 1
        }
    );
    assert_eq!(fixed.expect("loads").resource_count(), 2);
}

/// Envoy's YAML keeps the last of a key given twice: the load does too, and warns with both
/// lines.
#[test]
fn a_key_given_twice_loads_the_last_with_a_warning_naming_both_lines() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "c.yaml",
        "clusters:\n  - name: a\n    connect_timeout: 1s\n    connect_timeout: 2s\n",
    );
    let config = load_dir(dir.path()).expect("loads");
    let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("c.yaml: line 4: `connect_timeout` is given twice (first at line 3)"),
        "{warnings:?}"
    );
    let json = crate::config::json::resource_json(
        &config.files[0].resources[0],
        config.files[0].resources[0].body_for(crate::resource::Secrets::Serve),
    )
    .unwrap();
    assert_eq!(json["connectTimeout"], "2s");
}

/// Envoy's YAML reads a plain `yes` as a boolean: a bool field takes it, a string field
/// refuses it (quoted, it is a string).
#[test]
fn plain_yes_is_a_boolean_as_in_envoy() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "c.yaml",
        "clusters:\n  - name: a\n    connect_timeout: 1s\n    respect_dns_ttl: yes\n",
    );
    assert!(load_dir(dir.path()).is_ok());
    write(
        dir.path(),
        "c.yaml",
        "clusters:\n  - name: a\n    connect_timeout: 1s\n    alt_stat_name: yes\n",
    );
    let errs = errors(dir.path());
    assert!(errs[0].contains("alt_stat_name"), "{errs:?}");
    assert!(errs[0].contains("quote it for a string"), "{errs:?}");
    write(
        dir.path(),
        "c.yaml",
        "clusters:\n  - name: a\n    connect_timeout: 1s\n    alt_stat_name: 'yes'\n",
    );
    assert!(load_dir(dir.path()).is_ok());
}

// === P35: xdstp names ===

const XDSTP_CLUSTER: &str = "xdstp://mesh.test/envoy.config.cluster.v3.Cluster/backend?b=2&z=1";

fn xdstp_mesh(route_names_cluster: &str) -> String {
    FULL.replace("- name: backend", &format!("- name: \"{XDSTP_CLUSTER}\""))
        .replace(
            "- cluster_name: backend",
            "- cluster_name: \"xdstp://mesh.test/envoy.config.endpoint.v3.ClusterLoadAssignment/backend\"",
        )
        .replace(
            "eds_config: { ads: {} } }",
            "eds_config: { ads: {} }, service_name: \"xdstp://mesh.test/envoy.config.endpoint.v3.ClusterLoadAssignment/backend\" }",
        )
        .replace("cluster: backend", &format!("cluster: \"{route_names_cluster}\""))
}

#[test]
fn p35_xdstp_names_load_and_references_follow_them_in_canonical_form() {
    let dir = tempfile::tempdir().expect("tmp");
    assert!(
        FULL.contains("cluster: backend"),
        "the route names the cluster"
    );
    // The route names the cluster with its context parameters in another order.
    write(
        dir.path(),
        "a.yaml",
        &xdstp_mesh("xdstp://mesh.test/envoy.config.cluster.v3.Cluster/backend?z=1&b=2"),
    );
    let config = load_dir(dir.path()).expect("loads");
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let route = config.files[0]
        .resources
        .iter()
        .find(|r| r.kind == ResourceType::Route)
        .expect("route");
    assert!(route
        .references
        .contains(&(ResourceType::Cluster, XDSTP_CLUSTER.to_string())));
    // Another cluster: a reference problem, as for any name.
    write(
        dir.path(),
        "a.yaml",
        &xdstp_mesh("xdstp://mesh.test/envoy.config.cluster.v3.Cluster/other"),
    );
    let warnings: Vec<String> = load_dir(dir.path())
        .expect("loads")
        .warnings
        .iter()
        .map(|w| w.to_string())
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains("/other")),
        "{warnings:?}"
    );
}

#[test]
fn p35_an_xdstp_name_of_another_type_or_not_canonical_is_a_load_error() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "a.yaml",
        "clusters:\n  - { name: \"xdstp://a/envoy.config.listener.v3.Listener/x\", connect_timeout: 1s }\n",
    );
    let e = errors(dir.path());
    assert!(
        e.iter().any(|e| e.contains("clusters[0]")
            && e.contains("names type envoy.config.listener.v3.Listener")),
        "{e:?}"
    );
    write(
        dir.path(),
        "a.yaml",
        "clusters:\n  - { name: \"xdstp://a/envoy.config.cluster.v3.Cluster/x?z=1&a=2\", connect_timeout: 1s }\n",
    );
    let e = errors(dir.path());
    assert!(
        e.iter()
            .any(|e| e.contains("\"xdstp://a/envoy.config.cluster.v3.Cluster/x?a=2&z=1\"")),
        "{e:?}"
    );
}

#[test]
fn p35_a_resource_of_an_authority_this_server_does_not_answer_for_is_a_load_error() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "a.yaml", &xdstp_mesh(XDSTP_CLUSTER));
    let with = |authorities: &[&str]| {
        load(
            &[dir.path().to_path_buf()],
            &LoadOptions {
                authorities: authorities.iter().map(|a| a.to_string()).collect(),
                ..LoadOptions::default()
            },
        )
    };
    assert!(with(&[]).is_ok(), "none given: any");
    assert!(with(&["other.test", "mesh.test"]).is_ok());
    let e: Vec<String> = with(&["other.test"])
        .expect_err("mesh.test is not answered for")
        .errors
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(e.len(), 2, "the cluster and its endpoints: {e:?}");
    assert!(
        e[0].contains("names authority \"mesh.test\"") && e[0].contains("--authority other.test"),
        "{e:?}"
    );
}

// === P34: LEDS ===

const LEDS_FILE: &str = r#"
clusters:
  - name: leds
    connect_timeout: 1s
    type: EDS
    eds_cluster_config: { eds_config: { ads: {}, resource_api_version: V3 } }
endpoints:
  - cluster_name: leds
    endpoints:
      - locality: { zone: z1 }
        leds_cluster_locality_config:
          leds_config: { ads: {}, resource_api_version: V3 }
          leds_collection_name: "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/leds/z1/*"
lb_endpoints:
  - name: "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/leds/z1/h1"
    endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8080 } } }
"#;

#[test]
fn p34_lb_endpoints_load_named_beside_their_fields_and_the_collection_is_referenced() {
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "a.yaml", LEDS_FILE);
    let config = load_dir(dir.path()).expect("loads");
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    let resources = &config.files[0].resources;
    let member = resources
        .iter()
        .find(|r| r.kind == ResourceType::LbEndpoint)
        .expect("the member");
    assert_eq!(
        member.name,
        "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/leds/z1/h1"
    );
    let decoded =
        envoy_types::pb::envoy::config::endpoint::v3::LbEndpoint::decode(&member.body[..])
            .expect("an LbEndpoint");
    assert!(decoded.host_identifier.is_some());
    let cla = resources
        .iter()
        .find(|r| r.kind == ResourceType::Endpoint)
        .expect("the CLA");
    assert!(cla.references.contains(&(
        ResourceType::LbEndpoint,
        "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/leds/z1/*".to_string()
    )));
    // A collection no member is in: a reference warning, as for any missing name.
    write(
        dir.path(),
        "a.yaml",
        &LEDS_FILE.replace("leds/z1/h1", "leds/z2/h1"),
    );
    let warnings: Vec<String> = load_dir(dir.path())
        .expect("loads")
        .warnings
        .iter()
        .map(|w| w.to_string())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("LEDS collection") && w.contains("leds/z1/*")),
        "{warnings:?}"
    );
}

#[test]
fn p34_an_lb_endpoint_needs_an_xdstp_name() {
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "a.yaml",
        "lb_endpoints:\n  - name: h1\n    endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 1 } } }\n",
    );
    let e = errors(dir.path());
    assert!(
        e.iter()
            .any(|e| e.contains("lb_endpoints[0]") && e.contains("xdstp URL")),
        "{e:?}"
    );
    write(
        dir.path(),
        "a.yaml",
        "lb_endpoints:\n  - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 1 } } }\n",
    );
    let e = errors(dir.path());
    assert!(
        e.iter().any(|e| e.contains("every resource needs a name")),
        "{e:?}"
    );
}

/// Two listeners on one address and port for the same nodes are refused as
/// Envoy refuses the second (tests/rules_envoy.rs checks the words against Envoy); on
/// another protocol, port 0, or for nodes no one node matches both of, they load.
#[test]
fn two_listeners_on_one_address_for_the_same_nodes_are_refused() {
    let listener = |name: &str, address: &str, port: u32, extra: &str| {
        format!(
            "  - name: {name}\n    address: {{ socket_address: {{ address: {address}, port_value: {port}{extra} }} }}\n    \
             filter_chains: [{{ filters: [{{ name: t, typed_config: {{ \"@type\": \
             type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, \
             stat_prefix: t, cluster: c }} }}] }}]\n"
        )
    };
    let clusters = "clusters: [{ name: c, connect_timeout: 1s }]\n";
    let load = |files: &[(&str, String)]| {
        let dir = tempfile::tempdir().expect("tmp");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        std::fs::write(dir.path().join("c.yaml"), clusters).expect("write");
        load(&[dir.path().to_path_buf()], &LoadOptions::default())
    };
    let same = format!(
        "listeners:\n{}{}",
        listener("l1", "127.0.0.1", 10000, ""),
        listener("l2", "127.0.0.1", 10000, "")
    );
    let failure = load(&[("l.yaml", same)]).expect_err("refused");
    let message = failure.errors[0].to_string();
    assert!(
        message.contains("listeners[1] \"l2\": address: on the address of listener \"l1\"")
            && message.ends_with(
                "Envoy would reject it with: error adding listener: 'l2' has duplicate address \
                 '127.0.0.1:10000' as existing listener, to check if the listener has \
                 duplicated addresses with other listeners or 'enable_reuse_port' is set to \
                 'false' for the listener"
            ),
        "{message}"
    );
    // Two files whose selectors a node matches both of: refused too.
    let edge = |name: &str, selector: &str| {
        format!(
            "nodes: [{selector}]\nlisteners:\n{}",
            listener(name, "127.0.0.1", 10000, "")
        )
    };
    assert!(load(&[
        ("a.yaml", edge("a", "{ id: \"edge-*\" }")),
        ("b.yaml", edge("b", "{ cluster: eu }"))
    ])
    .is_err());
    // Nodes no one node is among both of; UDP beside TCP; port 0 twice: all load.
    assert!(load(&[
        ("a.yaml", edge("a", "{ id: \"edge-*\" }")),
        ("b.yaml", edge("b", "{ id: \"core-*\" }"))
    ])
    .is_ok());
    let other = format!(
        "listeners:\n{}{}{}{}",
        listener("tcp", "127.0.0.1", 10000, ""),
        // A plain UDP listener takes no filter chains (Envoy refuses one that has any).
        listener("udp", "127.0.0.1", 10000, ", protocol: UDP")
            .split("    filter_chains")
            .next()
            .unwrap_or_default(),
        listener("any1", "127.0.0.1", 0, ""),
        listener("any2", "127.0.0.1", 0, "")
    );
    assert!(load(&[("l.yaml", other)]).is_ok());
}

/// A regex's RE2 program is judged with the limit of the nodes that get
/// it: `re2.max_program_size.error_level` of the RTDS runtimes they get (flat or nested, a
/// number or a string), else Envoy's 100; where some of its nodes could lack the runtime,
/// Envoy's default still counts, and the smallest of several limits wins.
#[test]
fn a_regex_program_is_judged_with_the_limit_its_nodes_runtime_sets() {
    // x{0,60} is 124 instructions; x{0,48}, 100.
    let routes = |regex: &str, selector: &str| {
        format!(
            "{selector}routes:\n  - name: r\n    virtual_hosts: [{{ name: a, domains: [\"*\"], routes: \
             [{{ match: {{ safe_regex: {{ regex: \"{regex}\" }} }}, direct_response: {{ status: 200 }} }}] }}]\n"
        )
    };
    let runtime = |name: &str, layer: &str, selector: &str| {
        format!("{selector}runtimes:\n  - name: {name}\n    layer: {layer}\n")
    };
    let edge = "nodes: [{ id: \"edge-*\" }]\n";
    // (what, the files, the limit the load is refused at).
    type Case<'a> = (&'a str, &'a [(&'a str, String)], Option<u64>);
    let cases: &[Case] = &[
        (
            "at the default limit",
            &[("r.yaml", routes("x{0,48}", ""))],
            None,
        ),
        ("over it", &[("r.yaml", routes("x{0,60}", ""))], Some(100)),
        (
            "raised for every node, nested",
            &[
                ("r.yaml", routes("x{0,60}", "")),
                (
                    "rt.yaml",
                    runtime(
                        "l",
                        "{ re2: { max_program_size: { error_level: 200 } } }",
                        "",
                    ),
                ),
            ],
            None,
        ),
        (
            "raised too little, flat, as a string",
            &[
                ("r.yaml", routes("x{0,60}", "")),
                (
                    "rt.yaml",
                    runtime("l", "{ re2.max_program_size.error_level: \"110\" }", ""),
                ),
            ],
            Some(110),
        ),
        (
            "lowered",
            &[
                ("r.yaml", routes("x{0,48}", "")),
                (
                    "rt.yaml",
                    runtime("l", "{ re2.max_program_size.error_level: 50 }", ""),
                ),
            ],
            Some(50),
        ),
        (
            "raised for the edge nodes only: the others keep 100",
            &[
                ("r.yaml", routes("x{0,60}", "")),
                (
                    "rt.yaml",
                    runtime("l", "{ re2.max_program_size.error_level: 200 }", edge),
                ),
            ],
            Some(100),
        ),
        (
            "raised for the same nodes as the routes",
            &[
                ("r.yaml", routes("x{0,60}", edge)),
                (
                    "rt.yaml",
                    runtime("l", "{ re2.max_program_size.error_level: 200 }", edge),
                ),
            ],
            None,
        ),
        (
            "two runtimes: the smaller",
            &[
                ("r.yaml", routes("x{0,60}", "")),
                (
                    "rt.yaml",
                    format!(
                        "{}{}",
                        runtime("l", "{ re2.max_program_size.error_level: 300 }", ""),
                        "  - name: m\n    layer: { re2.max_program_size.error_level: 120 }\n"
                    ),
                ),
            ],
            Some(120),
        ),
        (
            "a runtime that sets something else",
            &[
                ("r.yaml", routes("x{0,60}", "")),
                (
                    "rt.yaml",
                    runtime("l", "{ re2.max_program_size.warn_level: 1 }", ""),
                ),
            ],
            Some(100),
        ),
    ];
    for (what, files, refused_at) in cases {
        let dir = tempfile::tempdir().expect("tmp");
        for (name, text) in *files {
            write(dir.path(), name, text);
        }
        let result = load_dir(dir.path());
        match (refused_at, result) {
            (None, Ok(_)) => {}
            (Some(limit), Err(failure)) => {
                let message = failure.errors[0].to_string();
                assert!(
                    message.contains(&format!(
                        "max program size of {limit} set for the error level"
                    )) && message.contains("r.yaml:")
                        && message.contains(
                            "routes[0] \"r\": virtual_hosts[0].routes[0].match.safe_regex.regex:"
                        ),
                    "{what}: {message}"
                );
            }
            (expected, got) => panic!("{what}: expected refusal at {expected:?}, got {got:?}"),
        }
    }
    // What the proxies' bootstraps set (`--re2-max-program-size`) is the limit where no
    // runtime in the files sets one; a runtime that reaches the nodes still decides.
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "r.yaml", &routes("x{0,60}", ""));
    let with = |limit: u64| {
        load(
            &[dir.path().to_path_buf()],
            &LoadOptions {
                re2_max_program_size: limit,
                ..LoadOptions::default()
            },
        )
    };
    assert!(with(200).is_ok());
    let refused = with(110).expect_err("over 110").errors[0].to_string();
    assert!(
        refused.contains("over the limit of 110 (--re2-max-program-size)"),
        "{refused}"
    );
    write(
        dir.path(),
        "rt.yaml",
        &runtime("l", "{ re2.max_program_size.error_level: 120 }", ""),
    );
    assert!(with(200).is_err(), "the files' runtime says 120");
}

/// A loader kept across loads of documents (an etcd prefix followed) parses only the
/// documents whose text changed, forgets those that are gone, and gives the same
/// configuration as a load from nothing; a reused document's error stays reported.
#[test]
fn a_loader_parses_only_the_documents_that_changed() {
    let doc = |name: &str, text: &str| Document::text(name, text);
    let cluster = |name: &str, timeout: &str| {
        format!("clusters:\n  - name: {name}\n    connect_timeout: {timeout}\n")
    };
    let options = LoadOptions::default();
    let mut documents: Vec<Document> = (0..20)
        .map(|i| {
            doc(
                &format!("etcd:/sy/c{i}.yaml"),
                &cluster(&format!("c{i}"), "1s"),
            )
        })
        .collect();
    let mut loader = crate::config::Loader::default();
    let (first, work) = loader.load_documents(&documents, &options);
    assert!(first.is_ok());
    assert_eq!((work.parsed, work.reused), (20, 0));

    documents[7] = doc("etcd:/sy/c7.yaml", &cluster("c7", "7s"));
    documents.remove(3);
    documents.push(doc(
        "etcd:/sy/bad.yaml",
        "clusters:\n  - name: x\n    conect_timeout: 1s\n",
    ));
    let (loaded, work) = loader.load_documents(&documents, &options);
    assert_eq!((work.parsed, work.reused), (2, 18));
    let failure = loaded.expect_err("the bad document is refused");
    assert!(
        failure
            .errors
            .iter()
            .any(|e| e.to_string().contains("etcd:/sy/bad.yaml")),
        "{:?}",
        failure.errors
    );
    // Nothing changed: nothing parsed, and the reused document's error is still there.
    let (again, work) = loader.load_documents(&documents, &options);
    assert_eq!((work.parsed, work.reused), (0, 20));
    assert_eq!(
        again.expect_err("still refused").errors.len(),
        failure.errors.len()
    );

    documents.pop();
    let (kept, work) = loader.load_documents(&documents, &options);
    assert_eq!((work.parsed, work.reused), (0, 19));
    let kept = kept.expect("loads");
    let fresh = load_documents(&documents, &options).expect("loads");
    assert_eq!(kept.version(), fresh.version());
    assert_eq!(kept.resource_count(), 19);
}

/// A document that cannot be read as one (bytes that are not UTF-8 text, more bytes than
/// `--max-file-size`) is a load error naming it, as a typo is, whether it came from a
/// source's key or a file; the other documents are reused, and taking it away (or writing
/// text there) loads again.
#[test]
fn a_document_that_is_not_text_or_too_large_is_a_load_error_naming_it() {
    let good = Document::text(
        "etcd:/sy/clusters.yaml",
        "clusters:\n  - name: backend\n    connect_timeout: 1s\n",
    );
    let not_text = Document::from_bytes("etcd:/sy/bad.yaml", vec![b'a', 0xff, 0xfe, b'\n']);
    assert_eq!(not_text.as_text(), None, "kept as bytes");
    assert_eq!(not_text.bytes(), [b'a', 0xff, 0xfe, b'\n']);
    let options = LoadOptions {
        max_file_bytes: 100,
        ..LoadOptions::default()
    };
    let large = Document::text(
        "etcd:/sy/large.yaml",
        format!("# {}\n{{}}\n", "x".repeat(200)),
    );
    let mut loader = crate::config::Loader::default();
    let (loaded, _) = loader.load_documents(&[good.clone(), not_text.clone(), large], &options);
    let said: Vec<String> = loaded
        .expect_err("refused")
        .errors
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].starts_with("etcd:/sy/bad.yaml: the document is not UTF-8 text (invalid utf-8 sequence of 1 bytes from index 1)"),
        "{said:?}"
    );
    assert!(
        said[1].starts_with("etcd:/sy/large.yaml: the document is 206 bytes, more than the limit of 100 (--max-file-size)"),
        "{said:?}"
    );
    // Fixed: only the fixed document is parsed again.
    let fixed = Document::text("etcd:/sy/bad.yaml", "{}\n");
    let (loaded, work) = loader.load_documents(&[good.clone(), fixed], &options);
    assert!(loaded.is_ok(), "{loaded:?}");
    assert_eq!((work.parsed, work.reused), (1, 1));

    // A file that is not text, the same.
    let dir = tempfile::tempdir().expect("tmp");
    write(dir.path(), "clusters.yaml", good.as_text().expect("text"));
    std::fs::write(dir.path().join("bad.yaml"), not_text.bytes()).expect("write");
    let errors = errors(dir.path());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("bad.yaml: cannot read file: not UTF-8 text"),
        "{errors:?}"
    );
}

/// Named documents (an etcd key each) load as the files they would be: the
/// same resources and versions (a proxy moved between sources is sent nothing new), errors
/// named `NAME:LINE:COLUMN`, and every check across documents as across files.
#[test]
fn documents_load_as_the_files_they_would_be() {
    let texts = [
        ("edge/clusters.yaml", "clusters:\n  - name: backend\n    connect_timeout: 1s\n"),
        (
            "edge/routes.yaml",
            "nodes: [{ id: \"edge-*\" }]\nroutes:\n  - name: main\n    virtual_hosts: [{ name: all, domains: [\"*\"], routes: [{ match: { prefix: \"/\" }, route: { cluster: backend } }] }]\n",
        ),
        (
            "runtime.json",
            "{\"runtimes\": [{\"name\": \"rt\", \"layer\": {\"flag\": true}}]}",
        ),
    ];
    let documents: Vec<Document> = texts
        .iter()
        .map(|(name, text)| Document::text(*name, *text))
        .collect();
    let dir = tempfile::tempdir().expect("tmp");
    for (name, text) in texts {
        write(dir.path(), name, text);
    }
    let versions = |config: &Config| {
        let mut all: Vec<(ResourceType, String, String)> = config
            .files
            .iter()
            .flat_map(|f| f.resources.iter())
            .map(|r| (r.kind, r.name.clone(), r.version.clone()))
            .collect();
        all.sort();
        all
    };
    let from_files = load_dir(dir.path()).expect("files load");
    let from_documents =
        load_documents(&documents, &LoadOptions::default()).expect("documents load");
    assert_eq!(versions(&from_files), versions(&from_documents));
    assert_eq!(versions(&from_documents).len(), 3);
    // The selector of a document applies as a file's does.
    let edge = from_documents
        .files
        .iter()
        .find(|f| f.path == Path::new("edge/routes.yaml"))
        .expect("the routes document");
    assert!(edge
        .selector
        .matches(&crate::config::selector::NodeFacts::new("edge-1", "")));
    assert!(!edge
        .selector
        .matches(&crate::config::selector::NodeFacts::new("core-1", "")));

    let with = |name: &str, text: &str| {
        let mut all = documents.clone();
        all.push(Document::text(name, text));
        load_documents(&all, &LoadOptions::default())
            .expect_err("refused")
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    // An error in a document names it, with line and column.
    let typo = with(
        "prod/c.yaml",
        "clusters:\n  - name: c\n    conect_timeout: 1s\n",
    );
    assert!(
        typo[0].starts_with("prod/c.yaml:3:5: clusters[0] \"c\": conect_timeout:"),
        "{typo:?}"
    );
    // The same cluster in two documents for the same nodes.
    let twice = with(
        "more.yaml",
        "clusters:\n  - name: backend\n    connect_timeout: 2s\n",
    );
    assert!(
        twice
            .iter()
            .any(|e| e.contains("backend") && e.contains("edge/clusters.yaml")),
        "{twice:?}"
    );
    // A regex judged with the limit a runtime in another document sets.
    let regex = "routes:\n  - name: r\n    virtual_hosts: [{ name: a, domains: [\"*\"], routes: [{ match: { safe_regex: { regex: \"x{0,60}\" } }, direct_response: { status: 200 } }] }]\n";
    let over = with("regex.yaml", regex);
    assert!(
        over[0].starts_with("regex.yaml:3:82: routes[0] \"r\": ")
            && over[0].contains("RE2 program size of 124"),
        "{over:?}"
    );
    let mut raised = documents.clone();
    raised.push(Document::text("regex.yaml", regex));
    raised.push(Document::text(
        "limits.yaml",
        "runtimes: [{ name: l, layer: { re2.max_program_size.error_level: 200 } }]\n",
    ));
    assert!(load_documents(&raised, &LoadOptions::default()).is_ok());
    // A reference no document defines, where the document says it (from its text: no file
    // of that name is read): at the route's own `cluster:`, not the route configuration's
    // first line.
    let mut dangling = documents.clone();
    dangling.push(Document::text("dangling.yaml", "routes:\n  - name: d\n    virtual_hosts:\n      - name: a\n        domains: [\"*\"]\n        routes:\n          - match: { prefix: \"/\" }\n            route: { cluster: nope }\n"));
    let strict = LoadOptions {
        strict: true,
        ..LoadOptions::default()
    };
    let missing = load_documents(&dangling, &strict)
        .expect_err("strict")
        .errors[0]
        .to_string();
    assert!(
        missing.starts_with("dangling.yaml:8:22: RDS \"d\": refers to cluster \"nope\""),
        "{missing}"
    );
    // The same name twice, and a document over the size limit.
    let again = with("runtime.json", "{}");
    assert!(
        again
            .iter()
            .any(|e| e.starts_with("runtime.json: a second document of this name")),
        "{again:?}"
    );
    let small = LoadOptions {
        max_file_bytes: 64,
        ..LoadOptions::default()
    };
    let big = load_documents(&documents, &small)
        .expect_err("too big")
        .errors[0]
        .to_string();
    assert!(
        big.contains("more than the limit of 64 (--max-file-size)"),
        "{big}"
    );
}

/// Each resource's redacted forms are made at load: a private key is hidden from proxies and
/// operators; a key named by path, and a resource with nothing sensitive, keep one form for
/// all. (config::redact's tests cover the fields hidden from operators only.)
#[test]
fn redacted_forms_are_made_once_at_load_for_proxies_and_operators() {
    use crate::resource::Secrets;
    let dir = tempfile::tempdir().expect("tmp");
    write(
        dir.path(),
        "s.yaml",
        "secrets:\n  - name: key\n    tls_certificate:\n      private_key: { inline_string: \"-----BEGIN PRIVATE KEY-----\\nAAAA\\n-----END PRIVATE KEY-----\\n\" }\n  - name: path\n    tls_certificate:\n      private_key: { filename: /etc/key.pem }\nclusters:\n  - name: plain\n    connect_timeout: 1s\n",
    );
    let config = load_dir(dir.path()).expect("loads");
    let by_name = |name: &str| {
        config.files[0]
            .resources
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .expect("resource")
    };
    let key = by_name("key");
    assert!(key.has_private_material());
    assert_ne!(
        key.body_for(Secrets::Redact),
        &key.body,
        "hidden from proxies"
    );
    assert_ne!(
        key.body_shown(Secrets::Redact),
        &key.body,
        "hidden from operators"
    );
    assert_eq!(key.body_for(Secrets::Serve), &key.body);
    // A path names where the key is on the proxy's host: nothing to hide.
    for name in ["path", "plain"] {
        let r = by_name(name);
        assert!(!r.has_private_material(), "{name}");
        assert_eq!(r.body_for(Secrets::Redact), &r.body, "{name}");
        assert_eq!(r.body_shown(Secrets::Redact), &r.body, "{name}");
    }
}
