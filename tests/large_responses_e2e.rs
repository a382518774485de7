//! End-to-end: a real Envoy 1.40 that refuses gRPC messages over 4 MiB
//! (`max_receive_message_length: 4194304`, gRPC's default receive limit) is sent 10 MB of
//! endpoints, over SotW and over delta ADS, and has every one: Switchyard splits the EDS
//! responses under `--max-response-bytes` (4 MiB by default).

use switchyard_testkit as support;

use std::path::Path;
use std::time::Duration;

use support::envoy::{envoy_binary, eventually, Api, Envoy, Switchyard};
use support::write;

const CLUSTERS: usize = 100;
const HOSTS: usize = 100;
/// Bytes of metadata per endpoint: 100 x 100 x 1 KiB is 10 MB of endpoints.
const PAD: usize = 1000;

/// `CLUSTERS` EDS clusters of `HOSTS` endpoints each, every endpoint with `PAD` bytes of
/// metadata.
fn snapshot(dir: &Path) {
    let pad = "p".repeat(PAD);
    let mut clusters = String::from("clusters:\n");
    let mut endpoints = String::from("endpoints:\n");
    for c in 0..CLUSTERS {
        clusters.push_str(&format!(
            "- {{name: c{c}, connect_timeout: 1s, type: EDS, eds_cluster_config: {{eds_config: {{ads: {{}}, resource_api_version: V3}}}}}}\n"
        ));
        endpoints.push_str(&format!(
            "- cluster_name: c{c}\n  endpoints:\n  - lb_endpoints:\n"
        ));
        for h in 0..HOSTS {
            endpoints.push_str(&format!(
                "    - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n      metadata: {{filter_metadata: {{pad: {{v: {pad}}}}}}}\n",
                20000 + h
            ));
        }
    }
    write(dir, "clusters.yaml", &clusters);
    write(dir, "endpoints.yaml", &endpoints);
}

async fn every_endpoint_arrives_in_parts(api: Api) {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    snapshot(&config);
    let bytes: u64 = std::fs::metadata(config.join("endpoints.yaml"))
        .expect("size")
        .len();
    assert!(bytes > 10_000_000, "10 MB of endpoints: {bytes}");
    let switchyard = Switchyard::start(&config, dir.path()).await;
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/envoy")
        .join(api.bootstrap());
    let bootstrap = std::fs::read_to_string(example)
        .expect("bootstrap")
        .replace(
            "envoy_grpc: { cluster_name: switchyard }",
            "envoy_grpc: { cluster_name: switchyard, max_receive_message_length: 4194304 }",
        );
    assert!(bootstrap.contains("max_receive_message_length"));
    let envoy_dir = dir.path().join("envoy");
    std::fs::create_dir(&envoy_dir).expect("mkdir");
    let node = api.node("big-eds");
    let envoy =
        Envoy::start_from_text(&bootstrap, &envoy_bin, switchyard.port, &node, &envoy_dir).await;
    let hosts = || async {
        let text = envoy
            .admin_text("/stats?filter=membership_total$")
            .await
            .unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                l.rsplit_once(": ")
                    .and_then(|(_, v)| v.parse::<usize>().ok())
            })
            .sum::<usize>()
    };
    let all = eventually(Duration::from_secs(60), || async {
        hosts().await == CLUSTERS * HOSTS + 1 // and the `switchyard` cluster's one host
    })
    .await;
    assert!(
        all.is_some(),
        "Envoy has {} hosts of {}:\n{}",
        hosts().await,
        CLUSTERS * HOSTS,
        envoy.process.log_text()
    );
    let synced = eventually(Duration::from_secs(20), || switchyard.node_synced(&node)).await;
    assert!(synced.is_some(), "{node} never synced");
    assert_eq!(
        envoy.stat("cluster_manager.cds.update_rejected").await,
        Some(0)
    );
    let eds = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
    let split = switchyard
        .metric(&format!(
            "switchyard_responses_split_total{{type_url=\"{eds}\"}}"
        ))
        .await;
    assert!(
        split.is_some_and(|n| n >= 2.0),
        "EDS split in 3 parts or more: {split:?}"
    );
    println!(
        "{api:?}: {} hosts in {:?}, {} EDS parts beyond the first",
        CLUSTERS * HOSTS,
        all,
        split.unwrap_or(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_ten_megabytes_of_endpoints_reach_an_envoy_with_a_4_mib_limit_over_sotw() {
    every_endpoint_arrives_in_parts(Api::Sotw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_ten_megabytes_of_endpoints_reach_an_envoy_with_a_4_mib_limit_over_delta() {
    every_endpoint_arrives_in_parts(Api::Delta).await;
}
