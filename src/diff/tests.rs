use super::*;

use crate::testing::load_files as load;

fn cluster(name: &str, timeout: &str, port: u16) -> String {
    format!(
        "clusters:\n  - name: {name}\n    connect_timeout: {timeout}\n    type: STATIC\n    \
         load_assignment:\n      cluster_name: {name}\n      endpoints: [{{ lb_endpoints: [{{ \
         endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}] }}]\n"
    )
}

#[test]
fn nothing_changes_when_only_spelling_and_order_do() {
    let old = load(&[("a.yaml", &cluster("a", "1s", 80))]);
    let new = load(&[(
        "a.json",
        r#"{"clusters": [{"type": "STATIC", "connectTimeout": "1s", "name": "a",
        "loadAssignment": {"clusterName": "a", "endpoints": [{"lbEndpoints": [{"endpoint":
        {"address": {"socketAddress": {"address": "127.0.0.1", "portValue": 80}}}}]}]}}]}"#,
    )]);
    let report = diff(&old, &new);
    assert!(report.is_empty(), "{report}");
    assert_eq!(report.to_string(), "no changes\n");
}

#[test]
fn added_removed_and_changed_with_field_paths() {
    let old = load(&[
        ("a.yaml", &cluster("a", "1s", 80)),
        ("b.yaml", &cluster("b", "1s", 81)),
    ]);
    let new = load(&[
        ("a.yaml", &cluster("a", "2s", 8080)),
        ("c.yaml", &cluster("c", "1s", 82)),
    ]);
    let report = diff(&old, &new);
    assert_eq!(report.groups.len(), 1, "{report}");
    let cds = &report.groups[0].types[0];
    assert_eq!(cds.kind, "CDS");
    assert_eq!(cds.added, ["c"]);
    assert_eq!(cds.removed, ["b"]);
    assert_eq!(cds.changed.len(), 1);
    let (name, changes) = &cds.changed[0];
    assert_eq!(name, "a");
    let paths: Vec<(&str, Option<&str>, Option<&str>)> = changes
        .iter()
        .map(|c| (c.path.as_str(), c.old.as_deref(), c.new.as_deref()))
        .collect();
    // Paths as the files write them; endpoints known by their address (to Envoy another
    // address is another host).
    let host = |port: u16| {
        format!(
            "{{\"endpoint\":{{\"address\":{{\"socket_address\":{{\"address\":\"127.0.0.1\",\"port_value\":{port}}}}}}}}}"
        )
    };
    let (old_host, new_host) = (host(80), host(8080));
    assert_eq!(
        paths,
        [
            ("connect_timeout", Some("\"1s\""), Some("\"2s\"")),
            (
                "load_assignment.endpoints[0].lb_endpoints[address=127.0.0.1:80]",
                Some(old_host.as_str()),
                None
            ),
            (
                "load_assignment.endpoints[0].lb_endpoints[address=127.0.0.1:8080]",
                None,
                Some(new_host.as_str())
            ),
        ]
    );
    let text = report.to_string();
    assert!(
        text.contains("  CDS: 1 added, 1 removed, 1 changed\n    + c\n    - b\n    ~ a\n"),
        "{text}"
    );
    assert!(
        text.contains("        connect_timeout: \"1s\" -> \"2s\"\n"),
        "{text}"
    );
}

#[test]
fn per_node_group_and_secrets_never_shown() {
    // One certificate and its key (the loader judges the bytes as Envoy does), the key's
    // text changed only before its PEM block (which Envoy skips): a change in a sensitive
    // field alone.
    let pair = rcgen::generate_simple_self_signed(vec!["edge".to_string()]).expect("cert");
    let secret = |marker: &str| {
        let json = |pem: String| serde_json::to_string(&pem).expect("json");
        format!(
            "nodes: [{{ id: \"edge-*\" }}]\nsecrets:\n  - name: tls\n    tls_certificate:\n      \
             certificate_chain: {{ inline_string: {} }}\n      private_key: {{ inline_string: {} }}\n",
            json(pair.cert.pem()),
            json(format!("{marker}\n{}", pair.signing_key.serialize_pem()))
        )
    };
    let old = load(&[
        ("all.yaml", &cluster("a", "1s", 80)),
        ("edge.yaml", &secret("OLD-KEY")),
    ]);
    let new = load(&[
        ("all.yaml", &cluster("a", "1s", 80)),
        ("edge.yaml", &secret("NEW-KEY")),
    ]);
    let report = diff(&old, &new);
    assert_eq!(
        report.groups.len(),
        1,
        "only the edge group changes: {report}"
    );
    assert!(report.groups[0].group.contains("\"edge-\""), "{report}");
    let text = report.to_string();
    assert!(
        text.contains("~ tls\n        (sensitive fields, not shown)\n"),
        "{text}"
    );
    assert!(!text.contains("KEY"), "{text}");
}

/// Lists Envoy keys by name or match are paired by it. A route inserted
/// between two others is one added route (by its match, routes here have no name), not
/// field changes to every route after it; an HTTP filter added is one added filter; a new
/// order of the same routes is one change of its own.
#[test]
fn inserting_a_route_reads_as_one_added_route() {
    let routes = |list: &[(&str, &str)]| {
        let mut text = String::from(
            "routes:\n  - name: main\n    virtual_hosts:\n      - name: all\n        domains: [\"*\"]\n        routes:\n",
        );
        for (prefix, cluster) in list {
            text.push_str(&format!(
                "          - {{ match: {{ prefix: \"{prefix}\" }}, route: {{ cluster: {cluster}, timeout: 5s }} }}\n"
            ));
        }
        text
    };
    let old = load(&[("r.yaml", &routes(&[("/api", "a"), ("/", "b")]))]);
    let new = load(&[(
        "r.yaml",
        &routes(&[("/api", "a"), ("/static", "c"), ("/", "b")]),
    )]);
    let report = diff(&old, &new);
    let rds = &report.groups[0].types[0];
    assert_eq!(rds.kind, "RDS");
    let (_, changes) = &rds.changed[0];
    let paths: Vec<(&str, Option<&str>)> = changes
        .iter()
        .map(|c| (c.path.as_str(), c.old.as_deref()))
        .collect();
    assert_eq!(
        paths,
        [(
            "virtual_hosts[name=all].routes[match={\"prefix\":\"/static\"}]",
            None
        )],
        "{report}"
    );

    // The same routes in another order: one change, the order.
    let swapped = load(&[("r.yaml", &routes(&[("/", "b"), ("/api", "a")]))]);
    let report = diff(&old, &swapped);
    let (_, changes) = &report.groups[0].types[0].changed[0];
    assert_eq!(changes.len(), 1, "{report}");
    assert_eq!(
        changes[0].path, "virtual_hosts[name=all].routes (order)",
        "{report}"
    );
}

/// Output at size: a change every node group sees alike is shown once, naming the groups;
/// past `LIST_LIMIT` names of a kind, the first ones and a count, unless verbose; the JSON
/// keeps every name.
#[test]
fn a_change_shared_by_node_groups_is_shown_once_and_long_lists_are_summarized() {
    let group = |id: &str| format!("nodes: [{{ id: \"{id}-*\" }}]\nclusters: []\n");
    let old = load(&[
        ("all.yaml", &cluster("a", "1s", 80)),
        ("edge.yaml", &group("edge")),
        ("mesh.yaml", &group("mesh")),
    ]);
    let mut files: Vec<(String, String)> = (0..25)
        .map(|i| {
            (
                format!("c{i:03}.yaml"),
                cluster(&format!("c{i:03}"), "1s", 80),
            )
        })
        .collect();
    files.push(("all.yaml".into(), cluster("a", "2s", 80)));
    files.push(("edge.yaml".into(), group("edge")));
    files.push(("mesh.yaml".into(), group("mesh")));
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let new = load(&files);
    let report = diff(&old, &new);
    assert_eq!(report.groups.len(), 1, "one change, once: {report}");
    let g = &report.groups[0];
    assert_eq!(g.also.len(), 2, "{g:?}");
    let text = report.to_string();
    assert!(
        text.starts_with("3 node groups, the same change: "),
        "{text}"
    );
    assert!(
        text.contains("  CDS: 25 added, 0 removed, 1 changed\n"),
        "{text}"
    );
    assert!(text.contains("    + c019\n"), "{text}");
    assert!(!text.contains("    + c020\n"), "{text}");
    assert!(
        text.contains("    ... and 5 more (--verbose lists every one)\n"),
        "{text}"
    );
    let verbose = report.text(true);
    assert!(
        verbose.contains("    + c024\n") && !verbose.contains("lists every one"),
        "{verbose}"
    );
    assert_eq!(g.types[0].added.len(), 25);
}

#[test]
fn capped_lists_say_how_many_more() {
    let lines: Vec<String> = (0..23).map(|i| format!("line {i}")).collect();
    let text = capped(&lines, false, "  ");
    assert_eq!(text.lines().count(), LIST_LIMIT + 1, "{text}");
    assert!(
        text.ends_with("  ... and 3 more (--verbose lists every one)\n"),
        "{text}"
    );
    assert_eq!(capped(&lines, true, "").lines().count(), 23);
    assert_eq!(capped(&lines[..3], false, "").lines().count(), 3);
    let names: Vec<String> = (0..22).map(|i| i.to_string()).collect();
    assert!(joined(&names, false).ends_with(", 19 and 2 more"));
}
