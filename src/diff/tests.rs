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
    assert_eq!(
        paths,
        [
            ("connectTimeout", Some("\"1s\""), Some("\"2s\"")),
            (
                "loadAssignment.endpoints[0].lbEndpoints[0].endpoint.address.socketAddress.portValue",
                Some("80"),
                Some("8080")
            ),
        ]
    );
    let text = report.to_string();
    assert!(
        text.contains("  CDS: 1 added, 1 removed, 1 changed\n    + c\n    - b\n    ~ a\n"),
        "{text}"
    );
    assert!(
        text.contains("        connectTimeout: \"1s\" -> \"2s\"\n"),
        "{text}"
    );
}

#[test]
fn per_node_group_and_secrets_never_shown() {
    let secret = |key: &str| {
        format!(
            "nodes: [{{ id: \"edge-*\" }}]\nsecrets:\n  - name: tls\n    tls_certificate:\n      \
             certificate_chain: {{ inline_string: cert }}\n      private_key: {{ inline_string: {key} }}\n"
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
