//! End-to-end: the real `switchyard` binary serving a real Envoy 1.40 over ADS, both State of
//! the World (`api_type: GRPC`) and Incremental (`api_type: DELTA_GRPC`), with config from
//! files in a temp directory and traffic to local upstreams. Every scenario runs over both;
//! Envoy is asserted through its admin API (/config_dump, /stats).

use switchyard_testkit as support;

use std::time::Duration;
use switchyard::fleet::SyncStatus;

use support::envoy::{
    envoy_binary, eventually, free_port, http_get, http_get_host, Api, Envoy, Switchyard, Upstream,
};
use support::{
    eds_cluster, envoy_rejected_cluster, rds_listener, route_to, write, ENVOY_REJECTED_CLUSTER,
};

/// How long config may take to reach Envoy.
const ARRIVE: Duration = Duration::from_secs(20);

/// What every Envoy scenario starts from: two upstreams answering `upstream-a` and
/// `upstream-b`, a free port for Envoy's listener, and an empty config directory.
struct Stage {
    a: Upstream,
    b: Upstream,
    listener: u16,
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
}

impl Stage {
    /// The usual mesh: clusters `a` and `b` (EDS, to the two upstreams), listener `http` on
    /// the stage's port with route configuration `main` to `a`.
    fn write_mesh(&self) {
        let config = &self.config;
        write(config, "a.yaml", &eds_cluster("a", "1s", self.a.port));
        write(config, "b.yaml", &eds_cluster("b", "1s", self.b.port));
        write(
            config,
            "listener.yaml",
            &rds_listener("http", self.listener, "main"),
        );
        write(config, "routes.yaml", &route_to("main", "a"));
    }

    async fn new() -> Stage {
        let (a, b) = (
            Upstream::start("upstream-a").await,
            Upstream::start("upstream-b").await,
        );
        let dir = tempfile::tempdir().expect("tmp");
        let config = dir.path().join("config");
        std::fs::create_dir(&config).expect("mkdir");
        Stage {
            a,
            b,
            listener: free_port(),
            dir,
            config,
        }
    }
}

/// Whether requests to the listener on `port` come to answer `body` within [`ARRIVE`].
async fn traffic_reaches(port: u16, body: &str) -> bool {
    eventually(ARRIVE, || async move {
        http_get(port).await.as_deref() == Some(body)
    })
    .await
    .is_some()
}

/// One `#[tokio::test]` per API for each `async fn(Api)` scenario: `<scenario>::sotw` and
/// `<scenario>::delta`.
macro_rules! over_both_apis {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sotw() {
                super::$scenario(super::Api::Sotw).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn delta() {
                super::$scenario(super::Api::Delta).await;
            }
        }
    )*};
}

over_both_apis!(
    e2e_config_arrives_and_a_route_edit_moves_traffic,
    e2e_broken_yaml_leaves_the_last_good_snapshot_serving,
    e2e_p5_p17_rejected_cluster_is_nacked_recorded_and_envoy_keeps_the_old_one,
    e2e_p5_a_nack_names_the_file_and_resource_it_rejected,
    e2e_p28_cluster_only_change_leaves_warming_at_once,
    e2e_per_type_services_serve_envoy_without_ads,
    e2e_p19_endpoint_removal_reaches_envoy,
    e2e_p25_ttl_resource_kept_by_heartbeats_and_dropped_when_the_server_stops,
    e2e_p13_p23_kill_9_and_restart_envoy_reconnects_and_applies_nothing_new,
    e2e_envoy_hot_restart_two_epochs_are_two_proxies_and_traffic_never_fails,
    e2e_replicas_agree_envoy_moves_to_the_other_and_applies_nothing_new,
    e2e_max_connection_age_moves_envoy_between_replicas_without_losing_config_or_traffic,
    e2e_p32_envoy_acks_responses_that_carry_resource_errors,
    e2e_status_wait_right_after_an_edit_returns_once_envoy_holds_it,
);

/// Envoy's counters of configuration applied and rejected, which a reconnect that brings
/// nothing new must leave alone.
const UPDATE_COUNTERS: [&str; 6] = [
    "cluster_manager.cds.update_success",
    "listener_manager.lds.update_success",
    "http.http.rds.main.update_success",
    "cluster.a.update_success",
    "cluster_manager.cds.update_rejected",
    "listener_manager.lds.update_rejected",
];

/// What must not move when Envoy reconnects to the same files: what it applied. Over delta
/// nothing is sent again (P23). Over SotW the wildcard CDS and LDS are not (P13), and the
/// route configuration and endpoints, asked for by name, go again (P9) and change nothing:
/// no route reload, no membership change.
fn unchanged_on_reconnect(api: Api) -> [&'static str; 6] {
    match api {
        Api::Delta => UPDATE_COUNTERS,
        Api::Sotw => [
            "cluster_manager.cds.update_success",
            "listener_manager.lds.update_success",
            "http.http.rds.main.config_reload",
            "cluster.a.membership_change",
            "cluster_manager.cds.update_rejected",
            "listener_manager.lds.update_rejected",
        ],
    }
}

/// Two upstreams, clusters `a` and `b` to them, a listener, and a route to `a`.
struct Fleet {
    _a: Upstream,
    _b: Upstream,
    a_port: u16,
    listener: u16,
    dir: tempfile::TempDir,
    switchyard: Switchyard,
    envoy: Envoy,
}

impl Fleet {
    async fn start(api: Api, node: &str) -> Option<Fleet> {
        let envoy_bin = envoy_binary()?;
        let stage = Stage::new().await;
        stage.write_mesh();
        let Stage {
            a,
            b,
            listener,
            dir,
            config,
        } = stage;
        let switchyard = Switchyard::start(&config, dir.path()).await;
        let envoy = Envoy::start_from(
            api.bootstrap(),
            &envoy_bin,
            switchyard.port,
            node,
            dir.path(),
        )
        .await;
        let fleet = Fleet {
            a_port: a.port,
            _a: a,
            _b: b,
            listener,
            dir,
            switchyard,
            envoy,
        };
        fleet.expect_traffic_to("upstream-a").await;
        assert!(
            fleet.switchyard.logged(
                "xDS stream opened.",
                &[
                    ("node", node),
                    ("stream", "ADS"),
                    ("protocol", api.protocol())
                ]
            ),
            "Envoy did not use {api:?}"
        );
        Some(fleet)
    }

    fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("config")
    }

    fn edit(&self, name: &str, text: &str) {
        write(&self.config(), name, text);
    }

    async fn expect_traffic_to(&self, body: &str) {
        let port = self.listener;
        assert!(
            traffic_reaches(port, body).await,
            "traffic on :{port} never reached {body}"
        );
    }
}

/// `status --wait` run right after an edit, with no pause: a broken edit exits 3 naming its
/// file (never 0 on the generation before) and Envoy keeps what it had; a good edit exits 0
/// only once Envoy holds it: its config_dump, read at once after the exit, has the new
/// cluster (active, or warming on its endpoints). Three rounds.
async fn e2e_status_wait_right_after_an_edit_returns_once_envoy_holds_it(api: Api) {
    let node = api.node("e2e-wait");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let wait = ["--wait", "--timeout", "60s"];
    // connect_timeout of cluster `b` as Envoy's config_dump has it, active or warming.
    let held = || async {
        let mut timeouts = Vec::new();
        for resource in ["dynamic_active_clusters", "dynamic_warming_clusters"] {
            let dump = fleet.envoy.config_dump(resource).await;
            for c in dump["configs"].as_array().into_iter().flatten() {
                if c["cluster"]["name"] == "b" {
                    timeouts.push(c["cluster"]["connect_timeout"].to_string());
                }
            }
        }
        timeouts
    };
    for round in 0..3 {
        let before = held().await;
        fleet.edit("b.yaml", "clusters: [{name: b, connect_timeout: soon}]\n");
        let (code, out, err) = fleet.switchyard.status_said(&wait);
        assert_eq!(code, Some(3), "round {round}: refused: {out}{err}");
        assert!(err.contains("b.yaml"), "round {round}: {err}");
        assert_eq!(
            held().await,
            before,
            "round {round}: Envoy keeps what it had"
        );

        let timeout = format!("{}s", round + 2);
        fleet.edit("b.yaml", &eds_cluster("b", &timeout, fleet._b.port));
        let (code, out, err) = fleet.switchyard.status_said(&wait);
        assert_eq!(code, Some(0), "round {round}: {out}{err}");
        assert!(
            held().await.contains(&format!("\"{timeout}\"")),
            "round {round}: Envoy holds connect_timeout {timeout} when --wait exits 0: {:?}",
            held().await
        );
    }
    fleet.expect_traffic_to("upstream-a").await;
}

async fn e2e_config_arrives_and_a_route_edit_moves_traffic(api: Api) {
    let node = api.node("e2e-route");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    // Listener, route, both clusters and endpoints all came from the files.
    let listeners = fleet.envoy.config_dump("dynamic_listeners").await;
    assert!(listeners.to_string().contains("\"http\""), "{listeners}");
    assert_eq!(
        fleet.envoy.active_cluster_timeout("b").await.as_deref(),
        Some("1s")
    );

    fleet.edit("routes.yaml", &route_to("main", "b"));
    fleet.expect_traffic_to("upstream-b").await;
    // Envoy took every update: no rejections.
    assert_eq!(
        fleet
            .envoy
            .stat("cluster_manager.cds.update_rejected")
            .await,
        Some(0)
    );
    assert_eq!(
        fleet
            .envoy
            .stat("listener_manager.lds.update_rejected")
            .await,
        Some(0)
    );
}

async fn e2e_broken_yaml_leaves_the_last_good_snapshot_serving(api: Api) {
    let node = api.node("e2e-broken");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let rds_updates = fleet
        .envoy
        .stat("http.http.rds.main.update_success")
        .await
        .expect("rds stat");
    fleet.edit(
        "routes.yaml",
        "routes:\n  - name: main\n    virtual_hosts: [ {name: x, domains: [\n",
    );
    let reported = eventually(ARRIVE, || async {
        fleet.switchyard.logged("Configuration load failed", &[])
            && fleet.switchyard.process.log_text().contains("routes.yaml")
    })
    .await;
    assert!(reported.is_some(), "the load error was not logged");
    // Envoy still proxies to a, and got no route update.
    for _ in 0..5 {
        assert_eq!(
            http_get(fleet.listener).await.as_deref(),
            Some("upstream-a")
        );
    }
    assert_eq!(
        fleet.envoy.stat("http.http.rds.main.update_success").await,
        Some(rds_updates)
    );
    // A fix goes through.
    fleet.edit("routes.yaml", &route_to("main", "b"));
    fleet.expect_traffic_to("upstream-b").await;
}

async fn e2e_p5_p17_rejected_cluster_is_nacked_recorded_and_envoy_keeps_the_old_one(api: Api) {
    let node = api.node("e2e-nack");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    // Valid protobuf within every field rule (so Switchyard serves it), but Envoy rejects it.
    fleet.edit("a.yaml", &envoy_rejected_cluster("a", fleet.a_port));
    fleet.envoy.expect_cds_rejected().await;
    // Switchyard recorded the NACK with Envoy's own error text, for this node and type.
    let recorded = eventually(ARRIVE, || async {
        fleet.switchyard.logged(
            "NACK",
            &[
                ("node", node.as_str()),
                ("type", "CDS"),
                ("error", ENVOY_REJECTED_CLUSTER),
            ],
        )
    })
    .await;
    assert!(
        recorded.is_some(),
        "no NACK with Envoy's error text in the log"
    );
    // ... and in /status and `switchyard status`, which exits non-zero.
    let cds_state = |status: Option<switchyard::admin::Status>| {
        status
            .and_then(|s| s.nodes.into_iter().find(|n| n.node_id == node))
            .and_then(|mut n| n.types.remove("CDS"))
    };
    let nacked = cds_state(fleet.switchyard.status().await).expect("CDS of the node listed");
    assert_eq!(nacked.state, SyncStatus::Nacked);
    assert!(
        nacked
            .error
            .as_deref()
            .is_some_and(|e| e.contains(ENVOY_REJECTED_CLUSTER)),
        "{nacked:?}"
    );
    let (code, table) = fleet.switchyard.status_command(&[]);
    assert_eq!(code, Some(2), "{table}");
    assert!(
        table.contains("NACKED") && table.contains(ENVOY_REJECTED_CLUSTER),
        "{table}"
    );
    // Envoy keeps the previous cluster and keeps serving.
    assert_eq!(
        fleet.envoy.active_cluster_timeout("a").await.as_deref(),
        Some("1s")
    );
    assert_eq!(
        http_get(fleet.listener).await.as_deref(),
        Some("upstream-a")
    );
    // A fix is accepted, and the node is SYNCED again.
    fleet.edit("a.yaml", &eds_cluster("a", "3s", fleet.a_port));
    let fixed = eventually(ARRIVE, || async {
        fleet.envoy.active_cluster_timeout("a").await.as_deref() == Some("3s")
    })
    .await;
    assert!(fixed.is_some());
    let synced = eventually(ARRIVE, || async {
        cds_state(fleet.switchyard.status().await).is_some_and(|t| t.state == SyncStatus::Synced)
    })
    .await;
    assert!(synced.is_some(), "CDS never showed SYNCED after the fix");
    let (code, table) = fleet.switchyard.status_command(&[]);
    assert_eq!(code, Some(0), "{table}");
}

/// A second listener passes every field rule and every check of Switchyard's, and Envoy
/// NACKs it (its route's Lua fails when run): the NACK names it where it is
/// written, with when its file changed, in `/status`, `switchyard status` and the log.
async fn e2e_p5_a_nack_names_the_file_and_resource_it_rejected(api: Api) {
    let node = api.node("e2e-nack-trace");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let port = fleet.listener;
    fleet.edit(
        "listener.yaml",
        &format!(
            "listeners:{}{}",
            support::listener_item("http", port, "main"),
            support::envoy_rejected_listener_item("b", free_port(), "a")
        ),
    );
    let lds = || async {
        fleet
            .switchyard
            .status()
            .await
            .and_then(|s| s.nodes.into_iter().find(|n| n.node_id == node))
            .and_then(|mut n| n.types.remove("LDS"))
    };
    let nacked = eventually(ARRIVE, || async {
        lds().await.is_some_and(|t| t.state == SyncStatus::Nacked)
    })
    .await;
    assert!(nacked.is_some(), "Envoy never NACKed the second listener");
    let t = lds().await.expect("LDS listed");
    let names: Vec<&str> = t
        .rejected_changes
        .iter()
        .map(|c| c.resource.as_str())
        .collect();
    let written = format!(
        "{}: listeners[1] \"b\"",
        fleet.config().join("listener.yaml").display()
    );
    assert_eq!(names, [written.as_str()], "{t:?}");
    assert_eq!(t.rejected_changes[0].change, "added");
    assert!(t.rejected_changes[0].file_changed_at.is_some(), "{t:?}");
    let (code, table) = fleet.switchyard.status_command(&[]);
    assert_eq!(code, Some(2), "{table}");
    assert!(
        table.contains(&format!("    {written} (added; the file changed at ")),
        "{table}"
    );
    assert!(
        fleet.switchyard.logged(
            "NACK",
            &[("type", "LDS"), ("changed", &format!("{written} (added"))]
        ),
        "the log names it too"
    );
    // Traffic goes on through the first listener, and removing `b` is accepted.
    fleet.expect_traffic_to("upstream-a").await;
    fleet.edit("listener.yaml", &rds_listener("http", port, "main"));
    let synced = eventually(ARRIVE, || async {
        lds().await.is_some_and(|t| t.state == SyncStatus::Synced)
    })
    .await;
    assert!(synced.is_some(), "LDS never SYNCED after the fix");
}

/// P32: a listener names a route configuration no file has. Envoy's RDS request for it is
/// answered at once with NOT_FOUND; Envoy ACKs the responses that carry it (it takes no
/// action on the field), the node's /status lists the name, and the route's arrival from a
/// file brings the listener up.
async fn e2e_p32_envoy_acks_responses_that_carry_resource_errors(api: Api) {
    let node = api.node("e2e-not-found");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let late = free_port();
    fleet.edit(
        "listener.yaml",
        &format!(
            "listeners:{}{}",
            support::listener_item("http", fleet.listener, "main"),
            support::listener_item("late", late, "late-route")
        ),
    );
    let rds = || async {
        fleet
            .switchyard
            .status()
            .await
            .and_then(|s| s.nodes.into_iter().find(|n| n.node_id == node))
            .and_then(|mut n| n.types.remove("RDS"))
    };
    let told = eventually(ARRIVE, || async {
        rds()
            .await
            .is_some_and(|t| t.state == SyncStatus::Synced && t.not_found == ["late-route"])
    })
    .await;
    assert!(
        told.is_some(),
        "RDS never ACKed with late-route not found: {:?}",
        rds().await
    );
    assert!(!fleet.switchyard.logged("NACK", &[]), "Envoy NACKed");
    assert!(
        fleet
            .switchyard
            .metric("switchyard_resources_not_found_total{type_url=\"type.googleapis.com/envoy.config.route.v3.RouteConfiguration\"}")
            .await
            .is_some_and(|n| n >= 1.0)
    );
    fleet.expect_traffic_to("upstream-a").await;
    // The route arrives: the late listener comes up and serves.
    fleet.edit(
        "routes.yaml",
        &format!(
            "routes:{}{}",
            support::route_item("main", "{ cluster: a }"),
            support::route_item("late-route", "{ cluster: b }")
        ),
    );
    assert!(
        traffic_reaches(late, "upstream-b").await,
        "the late listener never served"
    );
    assert_eq!(rds().await.map(|t| t.not_found), Some(vec![]));
    assert!(!fleet.switchyard.logged("NACK", &[]), "Envoy NACKed");
}

async fn e2e_p28_cluster_only_change_leaves_warming_at_once(api: Api) {
    let node = api.node("e2e-warm");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    // Only connect_timeout changes; the endpoints are the same. Envoy re-creates the
    // cluster and keeps it warming until a ClusterLoadAssignment arrives: Switchyard must
    // send one, or the cluster stays warming for Envoy's 15 s timeout.
    fleet.edit("a.yaml", &eds_cluster("a", "2s", fleet.a_port));
    fleet.envoy.expect_warmed_at_once("a", "2s").await;
    assert_eq!(
        http_get(fleet.listener).await.as_deref(),
        Some("upstream-a")
    );
}

/// The config source of a per-type gRPC stream to Switchyard (no ADS).
const PER_TYPE_SOURCE: &str = "{ resource_api_version: V3, api_config_source: { api_type: GRPC, transport_api_version: V3, grpc_services: [{ envoy_grpc: { cluster_name: switchyard } }] } }";

async fn e2e_per_type_services_serve_envoy_without_ads(api: Api) {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let node = api.node("e2e-per-type");
    // The ADS fixtures, with each `ads: {}` config source made a per-type stream.
    let per_type = |ads_config: &str| {
        ads_config.replace(
            "{ ads: {}, resource_api_version: V3 }",
            &api.api_type(PER_TYPE_SOURCE),
        )
    };
    let Stage {
        a,
        b,
        listener,
        dir,
        config,
    } = Stage::new().await;
    let cluster = eds_cluster("a", "1s", a.port);
    assert!(
        per_type(&cluster).contains("api_config_source"),
        "fixture changed shape"
    );
    write(&config, "a.yaml", &per_type(&cluster));
    write(
        &config,
        "b.yaml",
        &per_type(&eds_cluster("b", "1s", b.port)),
    );
    write(
        &config,
        "listener.yaml",
        &per_type(&rds_listener("http", listener, "main")),
    );
    write(&config, "routes.yaml", &route_to("main", "a"));
    let switchyard = Switchyard::start(&config, dir.path()).await;
    let bootstrap = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/envoy/bootstrap-per-type.yaml"),
    )
    .expect("example bootstrap");
    assert!(
        bootstrap.contains("api_type: GRPC"),
        "fixture changed shape"
    );
    let envoy = Envoy::start_from_text(
        &api.api_type(&bootstrap),
        &envoy_bin,
        switchyard.port,
        &node,
        dir.path(),
    )
    .await;
    let get = |want: &'static str| traffic_reaches(listener, want);
    assert!(
        get("upstream-a").await,
        "config never arrived over the per-type services"
    );
    // CDS, EDS, LDS and RDS each came over their own service.
    for stream in ["CDS", "EDS", "LDS", "RDS"] {
        assert!(
            switchyard.logged(
                "xDS stream opened.",
                &[
                    ("node", node.as_str()),
                    ("stream", stream),
                    ("protocol", api.protocol())
                ]
            ),
            "no {stream} stream"
        );
    }
    write(&config, "routes.yaml", &route_to("main", "b"));
    assert!(
        get("upstream-b").await,
        "the route edit did not arrive over RDS"
    );
    // P28 without ADS: Envoy opens a new EDS stream for a re-created cluster, so a
    // cluster-only change leaves warming at once here too.
    write(
        &config,
        "a.yaml",
        &per_type(&eds_cluster("a", "2s", a.port)),
    );
    envoy.expect_warmed_at_once("a", "2s").await;
    assert_eq!(
        envoy.stat("cluster_manager.cds.update_rejected").await,
        Some(0)
    );
}

/// Cluster `a`'s endpoints grow to both upstreams, then lose upstream-a: Envoy must stop
/// sending to it.
async fn e2e_p19_endpoint_removal_reaches_envoy(api: Api) {
    let node = api.node("e2e-endpoints");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let b_port = fleet._b.port;
    let with_ports = |ports: &[u16]| {
        let endpoints: String = ports
            .iter()
            .map(|p| format!("          - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {p} }} }} }}\n"))
            .collect();
        format!(
            "clusters:\n  - name: a\n    connect_timeout: 1s\n    type: EDS\n    eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}\nendpoints:\n  - cluster_name: a\n    endpoints:\n      - lb_endpoints:\n{endpoints}"
        )
    };
    fleet.edit("a.yaml", &with_ports(&[fleet.a_port, b_port]));
    fleet.expect_traffic_to("upstream-b").await;
    fleet.edit("a.yaml", &with_ports(&[b_port]));
    // Once the removal arrived, every request goes to b.
    let removed = eventually(ARRIVE, || async {
        let mut all_b = true;
        for _ in 0..10 {
            all_b &= http_get(fleet.listener).await.as_deref() == Some("upstream-b");
        }
        all_b
    })
    .await;
    assert!(
        removed.is_some(),
        "Envoy kept sending to the removed endpoint"
    );
    assert_eq!(
        fleet.envoy.stat("cluster.a.membership_total").await,
        Some(1),
        "one endpoint left"
    );
}

/// A cluster with a 2 s TTL stays while Switchyard refreshes it, and goes once Switchyard is
/// gone; a cluster without a TTL stays.
async fn e2e_p25_ttl_resource_kept_by_heartbeats_and_dropped_when_the_server_stops(api: Api) {
    let node = api.node("e2e-ttl");
    let Some(mut fleet) = Fleet::start(api, &node).await else {
        return;
    };
    fleet.edit(
        "ttl.yaml",
        "clusters:\n  - name: short-lived\n    ttl: 2s\n    connect_timeout: 1s\n    type: STATIC\n    load_assignment: { cluster_name: short-lived, endpoints: [] }\n",
    );
    assert!(
        eventually(ARRIVE, || has_cluster(&fleet.envoy, "short-lived"))
            .await
            .is_some(),
        "the TTL'd cluster never arrived"
    );
    // Three TTLs later it is still there: refreshes keep it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        has_cluster(&fleet.envoy, "short-lived").await,
        "Envoy dropped the cluster while refreshes flowed"
    );
    fleet.switchyard.process.kill();
    let dropped = eventually(ARRIVE, || async {
        !has_cluster(&fleet.envoy, "short-lived").await
    })
    .await;
    assert!(
        dropped.is_some(),
        "Envoy kept the TTL'd cluster after Switchyard stopped"
    );
    assert_eq!(
        fleet.envoy.active_cluster_timeout("a").await.as_deref(),
        Some("1s"),
        "a cluster without a TTL stays"
    );
}

async fn has_cluster(envoy: &Envoy, name: &str) -> bool {
    envoy.active_cluster_timeout(name).await.is_some()
}

/// VHDS (delta only): the route configuration has no virtual hosts of its own; Envoy
/// subscribes to its name as a namespace and gets `main/*` from `virtual_hosts` files (P24).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_delta_p24_vhds_virtual_hosts_reach_envoy() {
    let api = Api::Delta;
    let node = api.node("e2e-vhds");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let vhost = |domain: &str, cluster: &str| {
        format!(
            "  - name: main/{cluster}\n    domains: [\"{domain}\"]\n    routes: [{{ match: {{ prefix: / }}, route: {{ cluster: {cluster} }} }}]\n"
        )
    };
    // The on-demand filter asks VHDS for `main/<host>` when no virtual host matches.
    let listener = rds_listener("http", fleet.listener, "main").replace(
        "                - name: envoy.filters.http.router",
        "                - name: envoy.filters.http.on_demand\n                  typed_config:\n                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.on_demand.v3.OnDemand\n                - name: envoy.filters.http.router",
    );
    assert!(listener.contains("on_demand"), "fixture changed shape");
    fleet.edit("listener.yaml", &listener);
    fleet.edit(
        "routes.yaml",
        "routes:\n  - name: main\n    vhds: { config_source: { ads: {}, resource_api_version: V3 } }\n",
    );
    fleet.edit(
        "vhosts.yaml",
        &format!("virtual_hosts:\n{}", vhost("x.example.com", "b")),
    );
    let get = |host: &'static str| http_get_host(fleet.listener, Some(host));
    let arrived = eventually(ARRIVE, || async {
        get("x.example.com").await.as_deref() == Some("upstream-b")
    })
    .await;
    assert!(arrived.is_some(), "the VHDS virtual host never routed");
    // The route configuration's former catch-all virtual host is gone.
    assert_eq!(http_get(fleet.listener).await, None);
    // Another virtual host added to the namespace reaches Envoy incrementally.
    fleet.edit(
        "vhosts.yaml",
        &format!(
            "virtual_hosts:\n{}{}",
            vhost("x.example.com", "b"),
            vhost("y.example.com", "a")
        ),
    );
    let arrived = eventually(ARRIVE, || async {
        get("y.example.com").await.as_deref() == Some("upstream-a")
    })
    .await;
    assert!(arrived.is_some(), "the second virtual host never routed");
    assert_eq!(get("x.example.com").await.as_deref(), Some("upstream-b"));
    // On demand: a host nothing names is asked for by alias and answered at once with the
    // unresolved alias, so Envoy answers 404 instead of holding the request.
    let started = std::time::Instant::now();
    assert_eq!(get("nowhere.example.com").await, None);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(eventually(ARRIVE, || async {
        fleet.switchyard.logged(
            "Sending response.",
            &[("type", "VHDS"), ("node", node.as_str())],
        )
    })
    .await
    .is_some());
    assert!(fleet.switchyard.logged(
        "xDS stream opened.",
        &[("node", node.as_str()), ("protocol", "delta")]
    ));
}

/// On-demand CDS (delta only): Envoy's on-demand filter asks for a cluster it lacks by name on
/// top of its wildcard CDS subscription. A name no file defines is answered at once (P20),
/// so the request fails fast; once a file adds the cluster, traffic flows.
/// LEDS (P34) with a real Envoy over Incremental ADS: cluster `leds` takes its endpoints from
/// a glob collection of LbEndpoint resources. Envoy subscribes to the glob, gets each member
/// by its full URL, lists both hosts in /clusters and routes to them; removing one host from
/// the file sends exactly one removed name, and Envoy drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_delta_p34_leds_endpoints_reach_envoy_and_one_removed_host_is_one_removal() {
    let api = Api::Delta;
    let node = api.node("e2e-leds");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let collection = "xdstp://test/envoy.config.endpoint.v3.LbEndpoint/leds/z1";
    let member = |id: &str, port: u16| {
        format!(
            "  - name: \"{collection}/{id}\"\n    endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n"
        )
    };
    let leds = |members: &str| {
        format!(
            r#"
clusters:
  - name: leds
    connect_timeout: 1s
    type: EDS
    eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}
endpoints:
  - cluster_name: leds
    endpoints:
      - locality: {{ zone: z1 }}
        leds_cluster_locality_config:
          leds_config: {{ ads: {{}}, resource_api_version: V3 }}
          leds_collection_name: "{collection}/*"
lb_endpoints:
{members}"#
        )
    };
    let (a, b) = (fleet.a_port, fleet._b.port);
    fleet.edit(
        "leds.yaml",
        &leds(&format!("{}{}", member("a", a), member("b", b))),
    );
    fleet.edit("routes.yaml", &route_to("main", "leds"));
    let both = eventually(ARRIVE, || async {
        fleet.envoy.stat("cluster.leds.membership_total").await == Some(2)
    })
    .await;
    assert!(
        both.is_some(),
        "Envoy never had both LEDS hosts: {:?}",
        fleet.envoy.admin_text("/clusters").await
    );
    let clusters = fleet
        .envoy
        .admin_text("/clusters")
        .await
        .unwrap_or_default();
    for port in [a, b] {
        assert!(
            clusters.contains(&format!("leds::127.0.0.1:{port}::")),
            "{clusters}"
        );
    }
    // Traffic reaches both upstreams through the LEDS hosts.
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let reached = eventually(ARRIVE, || async {
        if let Some(body) = http_get(fleet.listener).await {
            seen.lock().expect("not poisoned").insert(body);
        }
        seen.lock().expect("not poisoned").len() == 2
    })
    .await;
    assert!(reached.is_some(), "traffic reached {seen:?}");
    let leds_sent = "switchyard_resources_sent_total{type_url=\"type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint\"}";
    let before = fleet.switchyard.metric(leds_sent).await.expect("counted");
    assert_eq!(before, 2.0, "each member once");

    // Host b leaves: one removed name, and Envoy drops it.
    fleet.edit("leds.yaml", &leds(&member("a", a)));
    let one = eventually(ARRIVE, || async {
        fleet.envoy.stat("cluster.leds.membership_total").await == Some(1)
    })
    .await;
    assert!(one.is_some(), "Envoy kept the removed host");
    assert_eq!(
        fleet.switchyard.metric(leds_sent).await,
        Some(before + 1.0),
        "exactly one removed name"
    );
    for _ in 0..10 {
        assert_eq!(
            http_get(fleet.listener).await.as_deref(),
            Some("upstream-a")
        );
    }
    let status = fleet.switchyard.status().await.expect("/status");
    let leds_state = status
        .nodes
        .iter()
        .find(|n| n.node_id == node)
        .and_then(|n| n.types.get("LEDS"))
        .map(|t| t.state);
    assert_eq!(leds_state, Some(SyncStatus::Synced));
    assert!(!fleet.switchyard.logged("NACK", &[]), "Envoy NACKed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_delta_on_demand_cds_asks_by_name() {
    let api = Api::Delta;
    let node = api.node("e2e-odcds");
    let Some(fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let listener = rds_listener("http", fleet.listener, "main").replace(
        "                - name: envoy.filters.http.router",
        "                - name: envoy.filters.http.on_demand\n                  typed_config:\n                    \"@type\": type.googleapis.com/envoy.extensions.filters.http.on_demand.v3.OnDemand\n                    odcds: { source: { ads: {}, resource_api_version: V3 }, timeout: 10s }\n                - name: envoy.filters.http.router",
    );
    assert!(listener.contains("odcds"), "fixture changed shape");
    fleet.edit("listener.yaml", &listener);
    fleet.edit("routes.yaml", &route_to("main", "late"));
    // Wait for the route to `late` (a cluster no file defines) to be in place.
    let routed = eventually(ARRIVE, || async {
        fleet
            .envoy
            .config_dump("dynamic_route_configs")
            .await
            .to_string()
            .contains("\"late\"")
    })
    .await;
    assert!(routed.is_some(), "the route to `late` never arrived");
    let started = std::time::Instant::now();
    assert_eq!(http_get(fleet.listener).await, None);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the on-demand request for a missing cluster was not answered at once"
    );
    let late = format!(
        "clusters:\n  - name: late\n    connect_timeout: 1s\n    type: STATIC\n    load_assignment: {{ cluster_name: late, endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }} }}] }}] }}\n",
        fleet._b.port
    );
    // Envoy asked for `late` by name on its CDS subscription.
    assert!(fleet.switchyard.logged(
        "Subscription changed.",
        &[
            ("node", node.as_str()),
            ("type", "CDS"),
            ("subscribed", "late")
        ]
    ));
    fleet.edit("late.yaml", &late);
    fleet.expect_traffic_to("upstream-b").await;
}

/// A static cluster `name` to 127.0.0.1:`port`.
fn static_cluster(name: &str, port: u16) -> String {
    format!(
        "clusters:\n  - name: {name}\n    connect_timeout: 1s\n    type: STATIC\n    load_assignment: {{ cluster_name: {name}, endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}] }}] }}\n"
    )
}

/// An HTTP listener on `port` with an inline route to `cluster` (no RDS).
fn inline_listener(port: u16, cluster: &str) -> String {
    rds_listener("http", port, "main").replace(
        "              rds: { route_config_name: main, config_source: { ads: {}, resource_api_version: V3 } }",
        &format!("              route_config: {{ name: main, virtual_hosts: [{{ name: all, domains: [\"*\"], routes: [{{ match: {{ prefix: / }}, route: {{ cluster: {cluster} }} }}] }}] }}"),
    )
}

/// REST-JSON polling: a real Envoy with `api_type: REST` for CDS and LDS gets its config,
/// follows an edit, and while nothing changes the server answers only 304s, at a bounded rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_rest_polling_envoy_gets_config_follows_edits_and_idles() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let Stage {
        a,
        b,
        listener,
        dir,
        config,
    } = Stage::new().await;
    write(&config, "a.yaml", &static_cluster("a", a.port));
    write(&config, "b.yaml", &static_cluster("b", b.port));
    let route = inline_listener(listener, "a");
    assert!(route.contains("route_config"), "fixture changed shape");
    write(&config, "listener.yaml", &route);
    let switchyard = Switchyard::start(&config, dir.path()).await;
    let bootstrap = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envoy/bootstrap-rest.yaml"),
    )
    .expect("example bootstrap");
    assert!(
        bootstrap.contains("refresh_delay: 1s"),
        "fixture changed shape"
    );
    let envoy = Envoy::start_from_text(
        &bootstrap.replace("refresh_delay: 1s", "refresh_delay: 0.2s"),
        &envoy_bin,
        switchyard.port,
        "e2e-rest",
        dir.path(),
    )
    .await;
    let get = |want: &'static str| traffic_reaches(listener, want);
    assert!(get("upstream-a").await, "config never arrived over REST");
    write(&config, "listener.yaml", &inline_listener(listener, "b"));
    assert!(get("upstream-b").await, "the edit never arrived over REST");
    assert_eq!(
        envoy.stat("listener_manager.lds.update_rejected").await,
        Some(0)
    );

    // Idle: no answer with content, and polls bounded by the hold (0.5 s) + refresh (0.2 s).
    let polls = |metrics: &str, result: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("switchyard_rest_polls_total{")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let metrics = || async {
        reqwest::get(format!(
            "http://127.0.0.1:{}/metrics",
            switchyard.admin_port
        ))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
    };
    // Let the last edit settle: both types polled at their current version.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = metrics().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = metrics().await;
    assert_eq!(
        polls(&after, "changed"),
        polls(&before, "changed"),
        "an unchanged config was answered with content while idle"
    );
    let idle_polls = polls(&after, "not_modified") - polls(&before, "not_modified");
    eprintln!("REST: {idle_polls} polls answered 304 in 3 s of idle (CDS + LDS)");
    assert!(
        (2.0..=2.0 * 3.0 / 0.7 + 2.0).contains(&idle_polls),
        "{idle_polls} polls in 3 s for 2 types: not held, or not polling"
    );
}

/// `kill -9` of the server, and a restart on the same port with the same files: Envoy
/// reconnects and applies nothing new ([`unchanged_on_reconnect`]), and traffic goes on.
async fn e2e_p13_p23_kill_9_and_restart_envoy_reconnects_and_applies_nothing_new(api: Api) {
    let node = api.node("e2e-restart");
    let Some(mut fleet) = Fleet::start(api, &node).await else {
        return;
    };
    let counted = unchanged_on_reconnect(api);
    let route_version = |dump: serde_json::Value| {
        dump["configs"][0]["version_info"]
            .as_str()
            .map(str::to_string)
    };
    let before = fleet.envoy.stats(&counted).await;
    let routes_before = route_version(fleet.envoy.config_dump("dynamic_route_configs").await);
    let ports = (fleet.switchyard.port, fleet.switchyard.admin_port);
    fleet.switchyard.process.kill();
    let restart_dir = fleet.dir.path().join("restart");
    std::fs::create_dir(&restart_dir).expect("mkdir");
    fleet.switchyard = Switchyard::start_on(&fleet.config(), &restart_dir, ports, &[]).await;
    let back = eventually(Duration::from_secs(30), || async {
        fleet
            .switchyard
            .logged("xDS stream opened.", &[("node", node.as_str())])
            && fleet.switchyard.node_synced(&node).await
    })
    .await;
    assert!(back.is_some(), "Envoy did not reconnect and sync");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = fleet.envoy.stats(&counted).await;
    for ((name, b), a) in counted.iter().zip(&before).zip(&after) {
        eprintln!("{api:?} {name}: {b:?} -> {a:?}");
    }
    assert_eq!(
        http_get(fleet.listener).await.as_deref(),
        Some("upstream-a")
    );
    for i in 0..counted.len() {
        assert!(before[i].is_some(), "{} not found", counted[i]);
        assert_eq!(
            before[i], after[i],
            "{}: Envoy applied something new",
            counted[i]
        );
    }
    let routes_after = route_version(fleet.envoy.config_dump("dynamic_route_configs").await);
    assert!(routes_before.is_some());
    assert_eq!(
        routes_before, routes_after,
        "the route configuration changed"
    );
}

/// Envoy hot restart: a new epoch with the same node id connects while the old one drains.
/// Both are served and shown as two proxies in `/status` until the old one leaves, and a
/// request loop through Envoy sees no failure across the restart.
async fn e2e_envoy_hot_restart_two_epochs_are_two_proxies_and_traffic_never_fails(api: Api) {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let node = api.node("e2e-hot");
    let stage = Stage::new().await;
    stage.write_mesh();
    let Stage {
        a: _a,
        b: _b,
        listener,
        dir,
        config,
    } = stage;
    let switchyard = Switchyard::start(&config, dir.path()).await;
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/envoy")
        .join(api.bootstrap());
    let text = std::fs::read_to_string(example).expect("bootstrap");
    let base_id =
        (std::process::id() % 10_000 + 20_000 + matches!(api, Api::Delta) as u32 * 10_000)
            .to_string();
    let ports = (switchyard.port, free_port());
    let epoch = |n: u32| {
        let d = dir.path().join(format!("epoch-{n}"));
        std::fs::create_dir(&d).expect("mkdir");
        d
    };
    let (d0, d1) = (epoch(0), epoch(1));
    let flags = |n: &'static str| {
        [
            "--base-id",
            base_id.as_str(),
            "--restart-epoch",
            n,
            "--drain-time-s",
            "2",
            "--parent-shutdown-time-s",
            "4",
        ]
    };
    let old = Envoy::start_with(&text, &envoy_bin, ports, &node, &d0, &flags("0")).await;
    assert!(traffic_reaches(listener, "upstream-a").await);
    // A bounded request loop through Envoy across the restart.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&stop);
    let requests = tokio::spawn(async move {
        let (mut ok, mut failed) = (0, 0);
        let started = std::time::Instant::now();
        while !flag.load(std::sync::atomic::Ordering::Relaxed)
            && started.elapsed() < Duration::from_secs(60)
        {
            match http_get(listener).await.as_deref() {
                Some("upstream-a") => ok += 1,
                _ => failed += 1,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (ok, failed)
    });
    let new = Envoy::start_with(&text, &envoy_bin, ports, &node, &d1, &flags("1")).await;
    let both = eventually(ARRIVE, || async {
        switchyard
            .status()
            .await
            .is_some_and(|s| s.nodes.iter().filter(|n| n.node_id == node).count() == 2)
    })
    .await;
    assert!(
        both.is_some(),
        "the two epochs were not two proxies in /status"
    );
    let one = eventually(ARRIVE, || async {
        switchyard
            .status()
            .await
            .is_some_and(|s| s.nodes.iter().filter(|n| n.node_id == node).count() == 1)
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = requests.await.expect("loop");
    eprintln!("hot restart over {api:?}: {ok} requests answered, {failed} failed");
    assert!(one.is_some(), "the old epoch never left");
    assert_eq!(failed, 0, "requests failed across the hot restart");
    assert!(ok > 0);
    drop((old, new));
}

/// The usual mesh served by two replicas (started with `flags`), and an Envoy for `node`
/// whose ADS cluster lists both, its traffic flowing; `None` without Envoy outside CI.
async fn two_replicas_and_envoy(
    api: Api,
    node: &str,
    flags: &[&str],
) -> Option<(Stage, [Switchyard; 2], Envoy)> {
    let envoy_bin = envoy_binary()?;
    let stage = Stage::new().await;
    stage.write_mesh();
    let (r1_dir, r2_dir) = (stage.dir.path().join("r1"), stage.dir.path().join("r2"));
    std::fs::create_dir(&r1_dir).expect("mkdir");
    std::fs::create_dir(&r2_dir).expect("mkdir");
    let replicas = [
        Switchyard::start_with_args(&stage.config, &r1_dir, flags).await,
        Switchyard::start_with_args(&stage.config, &r2_dir, flags).await,
    ];
    let text = api.two_replica_bootstrap(replicas[1].port);
    let envoy = Envoy::start_with(
        &text,
        &envoy_bin,
        (replicas[0].port, free_port()),
        node,
        stage.dir.path(),
        &["--disable-hot-restart"],
    )
    .await;
    assert!(
        traffic_reaches(stage.listener, "upstream-a").await,
        "no traffic through Envoy"
    );
    Some((stage, replicas, envoy))
}

/// Two replicas on the same files give the same versions: an Envoy whose ADS cluster lists
/// both, after the one it uses is killed, reconnects to the other and applies nothing new
/// (P13, P23), over SotW and delta, and traffic goes on.
async fn e2e_replicas_agree_envoy_moves_to_the_other_and_applies_nothing_new(api: Api) {
    let node = api.node("e2e-replicas");
    let Some((stage, mut replicas, envoy)) = two_replicas_and_envoy(api, &node, &[]).await else {
        return;
    };
    let serving = |r: &Switchyard| r.logged("xDS stream opened.", &[("node", node.as_str())]);
    let used = replicas
        .iter()
        .position(serving)
        .expect("a replica serves Envoy");
    let other = 1 - used;
    let counted = unchanged_on_reconnect(api);
    let before = envoy.stats(&counted).await;
    assert!(
        before.iter().all(Option::is_some),
        "{counted:?}: {before:?}"
    );
    replicas[used].process.kill();
    let moved = eventually(Duration::from_secs(30), || async {
        serving(&replicas[other]) && replicas[other].node_synced(&node).await
    })
    .await;
    assert!(moved.is_some(), "Envoy did not move to the other replica");
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (s, b) in counted.iter().zip(&before) {
        let a = envoy.stat(s).await;
        eprintln!("{api:?} {s}: {b:?} -> {a:?}");
        assert_eq!(
            *b, a,
            "{s}: Envoy applied something new from the other replica"
        );
    }
    assert_eq!(
        http_get(stage.listener).await.as_deref(),
        Some("upstream-a")
    );
}

/// `--max-connection-age`: two replicas close Envoy's connection every ~2 s; Envoy reconnects
/// and, its ADS cluster listing both, comes to be served by each in turn. Nothing is applied
/// again (the replicas agree on every version) and a request loop sees no failure.
async fn e2e_max_connection_age_moves_envoy_between_replicas_without_losing_config_or_traffic(
    api: Api,
) {
    let node = api.node("e2e-age");
    let age = [
        "--max-connection-age",
        "2s",
        "--max-connection-age-grace",
        "1s",
    ];
    let Some((stage, replicas, envoy)) = two_replicas_and_envoy(api, &node, &age).await else {
        return;
    };
    let counted = &unchanged_on_reconnect(api)[..4];
    let before = envoy.stats(counted).await;
    assert!(
        before.iter().all(Option::is_some),
        "{counted:?}: {before:?}"
    );
    // Requests every 20 ms until both replicas have served Envoy (bounded).
    let served_by_both = || {
        replicas
            .iter()
            .all(|r| r.logged("xDS stream opened.", &[("node", node.as_str())]))
    };
    let (mut answered, mut failed) = (0, 0);
    let started = std::time::Instant::now();
    while !served_by_both() && started.elapsed() < Duration::from_secs(30) {
        match http_get(stage.listener).await.as_deref() {
            Some("upstream-a") => answered += 1,
            _ => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "{api:?}: {answered} requests answered, {failed} failed, while Envoy moved between replicas"
    );
    assert!(served_by_both(), "Envoy never moved to the other replica");
    let aged: usize = replicas
        .iter()
        .map(|r| {
            r.log_lines()
                .iter()
                .filter(|l| {
                    l["reason"]
                        .as_str()
                        .is_some_and(|why| why.contains("--max-connection-age"))
                })
                .count()
        })
        .sum();
    assert!(aged >= 1, "no stream ended for its connection's age");
    assert_eq!(failed, 0, "requests failed while Envoy moved");
    for (s, b) in counted.iter().zip(&before) {
        let a = envoy.stat(s).await;
        assert_eq!(*b, a, "{s}: Envoy applied something again");
    }
}
