//! End-to-end make-before-break (P28-P30): a real Envoy 1.40 on ADS (SotW and Incremental)
//! with a steady, bounded request loop through it on 127.0.0.1 while one file edit applies.
//! Zero failed requests is the bar; each test prints its counts. The cross-type edits also run
//! with `--ordering off`, where the same check must fail (so the check is shown able to).
//!
//! The new clusters health-check an upstream that answers `/healthz` only after
//! [`HEALTH_DELAY`], so they stay warming that long after their endpoints arrive: a route or
//! listener that reaches Envoy before they are warm fails requests for about that long.

use switchyard_testkit as support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::envoy::Upstream;
use support::envoy::{envoy_binary, eventually, free_port, http_get, Api, Envoy, Switchyard};
use support::{listener_item, route_item, write};

/// How long a new cluster's first health check takes.
const HEALTH_DELAY: Duration = Duration::from_millis(1000);
/// Requests per second through Envoy.
const RATE: u32 = 200;
/// Upper bound on any load loop.
const LOAD_LIMIT: Duration = Duration::from_secs(60);
/// How long config may take to reach Envoy.
const ARRIVE: Duration = Duration::from_secs(20);

/// These tests measure request failures: run them one at a time on the 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Requests through one listener at [`RATE`], one connection each, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Tally>,
}

/// What a load loop saw.
#[derive(Debug, Default)]
struct Tally {
    /// Successful answers, by body (which upstream answered).
    answered: BTreeMap<String, usize>,
    failed: usize,
    /// Connections refused before the listener first answered (it did not exist yet).
    not_listening: usize,
    /// The first few failures, for the log.
    failures: Vec<String>,
}

impl Load {
    /// Start the loop on `port`. `listener_may_be_new`: refused connections before the first
    /// answer are the listener not existing yet, not failures.
    fn start(port: u16, listener_may_be_new: bool) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .pool_max_idle_per_host(0)
                .build()
                .expect("client");
            let url = format!("http://127.0.0.1:{port}/");
            let period = Duration::from_secs(1) / RATE;
            let started = Instant::now();
            let mut next = started;
            let mut tally = Tally::default();
            let mut answered_once = false;
            while !flag.load(Ordering::Relaxed) && started.elapsed() < LOAD_LIMIT {
                let failure = match client.get(&url).send().await {
                    Ok(r) if r.status().is_success() => {
                        answered_once = true;
                        let body = r.text().await.unwrap_or_default();
                        *tally.answered.entry(body).or_default() += 1;
                        None
                    }
                    Ok(r) => {
                        answered_once = true;
                        let flags = r
                            .headers()
                            .get("x-envoy-response-flags")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        let status = r.status();
                        let body = r.text().await.unwrap_or_default();
                        Some(format!("{status} {flags} {body}"))
                    }
                    Err(e) if e.is_connect() && listener_may_be_new && !answered_once => {
                        tally.not_listening += 1;
                        None
                    }
                    Err(e) => Some(format!("error: {e}")),
                };
                if let Some(f) = failure {
                    tally.failed += 1;
                    if tally.failures.len() < 5 {
                        tally.failures.push(f);
                    }
                }
                next += period;
                tokio::time::sleep_until(next.into()).await;
            }
            tally
        });
        Load { stop, task }
    }

    async fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("load loop")
    }
}

/// Switchyard and a real Envoy over `api`, with ordering on or off, and upstreams `a`
/// (answers at once) and `b` (answers `/healthz` after [`HEALTH_DELAY`]).
struct Setup {
    a: Upstream,
    b: Upstream,
    listener: u16,
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
    switchyard: Switchyard,
    envoy: Envoy,
}

impl Setup {
    async fn start(api: Api, scenario: &str, ordering: bool, files: &str) -> Option<Setup> {
        let envoy_bin = envoy_binary()?;
        let a = Upstream::start("upstream-a").await;
        let b = Upstream::start_with_health_delay("upstream-b", HEALTH_DELAY).await;
        let listener = free_port();
        let dir = tempfile::tempdir().expect("tmp");
        let config = dir.path().join("config");
        std::fs::create_dir(&config).expect("mkdir");
        let text = files
            .replace("A_PORT", &a.port.to_string())
            .replace("LISTENER_PORT", &listener.to_string());
        write(&config, "mesh.yaml", &text);
        let flags: &[&str] = if ordering {
            &[]
        } else {
            &["--ordering", "off"]
        };
        let switchyard = Switchyard::start_with_args(&config, dir.path(), flags).await;
        let node = format!(
            "{}-{}",
            api.node(scenario),
            if ordering { "on" } else { "off" }
        );
        let envoy = Envoy::start_from(
            api.bootstrap(),
            &envoy_bin,
            switchyard.port,
            &node,
            dir.path(),
        )
        .await;
        let setup = Setup {
            a,
            b,
            listener,
            dir,
            config,
            switchyard,
            envoy,
        };
        let up = eventually(ARRIVE, || async {
            http_get(setup.listener).await.as_deref() == Some("upstream-a")
        })
        .await;
        assert!(up.is_some(), "the first config never served traffic");
        Some(setup)
    }

    /// Replace the snapshot file in one atomic rename, as an editor does: ports filled in.
    fn edit(&self, text: &str, new_listener: u16) {
        let text = text
            .replace("A_PORT", &self.a.port.to_string())
            .replace("B_PORT", &self.b.port.to_string())
            .replace("LISTENER_PORT", &self.listener.to_string())
            .replace("NEW_PORT", &new_listener.to_string());
        let tmp = self.dir.path().join("mesh.yaml.tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, self.config.join("mesh.yaml")).expect("rename");
    }

    /// The value of a Switchyard metric line starting with `prefix`, if present.
    async fn metric(&self, prefix: &str) -> Option<f64> {
        self.switchyard.metric(prefix).await
    }
}

/// Print a tally (CI logs show the counts) and return it.
fn report(name: &str, api: Api, ordering: bool, tally: Tally) -> Tally {
    eprintln!(
        "{name} over {api:?} with ordering {}: answered {:?}, failed {}, not yet listening {}; \
         first failures: {:?}",
        if ordering { "on" } else { "off" },
        tally.answered,
        tally.failed,
        tally.not_listening,
        tally.failures
    );
    tally
}

/// Assert the bar: zero failures with ordering on; some with it off (the same edit then
/// breaks traffic, which shows the check can fail).
fn judge(tally: &Tally, ordering: bool) {
    if ordering {
        assert_eq!(tally.failed, 0, "requests failed: {:?}", tally.failures);
    } else {
        assert!(
            tally.failed > 0,
            "with ordering off the edit was expected to fail requests: {tally:?}"
        );
    }
}

const CLUSTER_X: &str = r#"
  - name: x
    connect_timeout: 1s
    type: EDS
    eds_cluster_config: { eds_config: { ads: {}, resource_api_version: V3 } }
"#;

const ENDPOINTS_X_A: &str = r#"
  - cluster_name: x
    endpoints:
      - lb_endpoints:
          - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: A_PORT } } }
"#;

/// An EDS cluster with an active health check on `/healthz`, and its endpoints on upstream b.
fn health_checked(name: &str) -> (String, String) {
    (
        format!(
            r#"
  - name: "{name}"
    connect_timeout: 1s
    type: EDS
    eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}
    health_checks:
      - timeout: 5s
        interval: 10s
        healthy_threshold: 1
        unhealthy_threshold: 1
        http_health_check: {{ path: /healthz }}
"#
        ),
        format!(
            r#"
  - cluster_name: "{name}"
    endpoints:
      - lb_endpoints:
          - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: B_PORT }} }} }}
"#
        ),
    )
}

/// Cluster x (to upstream a), listener `http` with route `main` to x.
fn base() -> String {
    format!(
        "clusters:{CLUSTER_X}endpoints:{ENDPOINTS_X_A}listeners:{}routes:{}",
        listener_item("http", "LISTENER_PORT", "main"),
        route_item("main", "{ cluster: x }")
    )
}

/// Four tests per scenario: `<scenario>::{sotw, delta}` with ordering on, and
/// `<scenario>::{sotw_ordering_off, delta_ordering_off}`.
macro_rules! with_and_without_ordering {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use super::Api;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sotw() {
                super::$scenario(Api::Sotw, true).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn delta() {
                super::$scenario(Api::Delta, true).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sotw_ordering_off() {
                super::$scenario(Api::Sotw, false).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn delta_ordering_off() {
                super::$scenario(Api::Delta, false).await;
            }
        }
    )*};
}

/// Two tests per scenario, ordering on: `<scenario>::{sotw, delta}`.
macro_rules! with_ordering {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use super::Api;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sotw() {
                super::$scenario(Api::Sotw).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn delta() {
                super::$scenario(Api::Delta).await;
            }
        }
    )*};
}

with_and_without_ordering!(
    e2e_p30_route_cut_over_to_a_health_checked_cluster_drops_nothing,
    e2e_p30_new_listener_route_and_clusters_drop_nothing,
    e2e_p5_p30_cut_over_to_a_rejected_cluster_holds_the_route_until_the_fix,
    e2e_p30_route_edit_while_the_new_cluster_warms_waits_for_it,
);

with_ordering!(
    e2e_p30_endpoint_replacement_drops_nothing_and_needs_no_plan,
    e2e_p28_p30_cluster_only_change_drops_nothing_and_leaves_warming_at_once,
);

/// (a) A route moves from cluster x to a new cluster y (active health check), x removed, in
/// one edit: y must be warm before the route moves, and x must stay until it has.
async fn e2e_p30_route_cut_over_to_a_health_checked_cluster_drops_nothing(
    api: Api,
    ordering: bool,
) {
    let _serial = SERIAL.lock().await;
    let Some(setup) = Setup::start(api, "mbb-cutover", ordering, &base()).await else {
        return;
    };
    let (cluster_y, endpoints_y) = health_checked("y");
    let load = Load::start(setup.listener, false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup.edit(
        &format!(
            "clusters:{cluster_y}endpoints:{endpoints_y}listeners:{}routes:{}",
            listener_item("http", "LISTENER_PORT", "main"),
            route_item("main", "{ cluster: \"y\" }")
        ),
        0,
    );
    let moved = eventually(ARRIVE, || async {
        http_get(setup.listener).await.as_deref() == Some("upstream-b")
            && setup.envoy.active_cluster_timeout("x").await.is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tally = report("route cut-over", api, ordering, load.stop().await);
    assert!(moved.is_some(), "traffic never moved to y with x removed");
    assert!(tally.answered.get("upstream-b").is_some_and(|n| *n > 0));
    judge(&tally, ordering);
    if ordering {
        assert!(
            setup
                .metric("switchyard_update_plans_total{event=\"completed\"}")
                .await
                >= Some(1.0)
        );
    }
}

/// (b) A new listener with a new route to two new clusters (weighted, both health-checked),
/// in one edit: the listener must not answer before its clusters are warm.
async fn e2e_p30_new_listener_route_and_clusters_drop_nothing(api: Api, ordering: bool) {
    let _serial = SERIAL.lock().await;
    let Some(setup) = Setup::start(api, "mbb-listener", ordering, &base()).await else {
        return;
    };
    let (y1, y1_endpoints) = health_checked("y1");
    let (y2, y2_endpoints) = health_checked("y2");
    let new_port = free_port();
    let load = Load::start(new_port, true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup.edit(
        &format!(
            "clusters:{CLUSTER_X}{y1}{y2}endpoints:{ENDPOINTS_X_A}{y1_endpoints}{y2_endpoints}\
             listeners:{}{}routes:{}{}",
            listener_item("http", "LISTENER_PORT", "main"),
            listener_item("http2", "NEW_PORT", "second"),
            route_item("main", "{ cluster: x }"),
            route_item(
                "second",
                "{ weighted_clusters: { clusters: [ { name: y1, weight: 50 }, { name: y2, weight: 50 } ] } }"
            ),
        ),
        new_port,
    );
    let up = eventually(ARRIVE, || async {
        http_get(new_port).await.as_deref() == Some("upstream-b")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tally = report("new listener", api, ordering, load.stop().await);
    assert!(up.is_some(), "the new listener never served traffic");
    judge(&tally, ordering);
    // The old listener was never disturbed.
    assert_eq!(
        http_get(setup.listener).await.as_deref(),
        Some("upstream-a")
    );
}

/// (c) Endpoint replacement: x's endpoints move from upstream a to upstream b. Nothing
/// crosses types, so no plan starts: one EDS response, as without ordering.
async fn e2e_p30_endpoint_replacement_drops_nothing_and_needs_no_plan(api: Api) {
    let _serial = SERIAL.lock().await;
    let Some(setup) = Setup::start(api, "mbb-endpoints", true, &base()).await else {
        return;
    };
    let load = Load::start(setup.listener, false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let to_b = ENDPOINTS_X_A.replace("A_PORT", "B_PORT");
    setup.edit(
        &format!(
            "clusters:{CLUSTER_X}endpoints:{to_b}listeners:{}routes:{}",
            listener_item("http", "LISTENER_PORT", "main"),
            route_item("main", "{ cluster: x }")
        ),
        0,
    );
    let moved = eventually(ARRIVE, || async {
        http_get(setup.listener).await.as_deref() == Some("upstream-b")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tally = report("endpoint replacement", api, true, load.stop().await);
    assert!(moved.is_some(), "traffic never moved to upstream b");
    judge(&tally, true);
    assert_eq!(
        setup
            .metric("switchyard_update_plans_total{event=\"started\"}")
            .await
            .unwrap_or(0.0),
        0.0,
        "an endpoints-only change must not start a plan"
    );
}

/// (d) A cluster-only change (connect_timeout): Envoy re-creates x, which must leave warming
/// at once (its ClusterLoadAssignment re-sent, P28), with nothing dropped meanwhile.
async fn e2e_p28_p30_cluster_only_change_drops_nothing_and_leaves_warming_at_once(api: Api) {
    let _serial = SERIAL.lock().await;
    let Some(setup) = Setup::start(api, "mbb-cluster", true, &base()).await else {
        return;
    };
    let load = Load::start(setup.listener, false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup.edit(
        &base().replace("connect_timeout: 1s", "connect_timeout: 2s"),
        0,
    );
    setup.envoy.expect_warmed_at_once("x", "2s").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tally = report("cluster-only change", api, true, load.stop().await);
    judge(&tally, true);
}

/// (e) A cut-over to a cluster Envoy rejects (its requests per connection limited twice,
/// which breaks no field rule and no check of Switchyard's, so Switchyard serves it), `x` removed: the NACK
/// holds back the route that names it and keeps `x`, so traffic stays on `x`; the fix then
/// goes out in order. Without ordering, `x` goes and the route points at nothing.
async fn e2e_p5_p30_cut_over_to_a_rejected_cluster_holds_the_route_until_the_fix(
    api: Api,
    ordering: bool,
) {
    let _serial = SERIAL.lock().await;
    let Some(setup) = Setup::start(api, "mbb-nack", ordering, &base()).await else {
        return;
    };
    let (cluster_y, endpoints_y) = health_checked("y");
    let cut_over = |cluster: &str| {
        format!(
            "clusters:{cluster}endpoints:{endpoints_y}listeners:{}routes:{}",
            listener_item("http", "LISTENER_PORT", "main"),
            route_item("main", "{ cluster: \"y\" }")
        )
    };
    let load = Load::start(setup.listener, false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup.edit(
        &cut_over(&cluster_y.replace(
            "    type: EDS\n",
            &format!("    type: EDS\n{}", support::ENVOY_REJECTED_CLUSTER_LINES),
        )),
        0,
    );
    setup.envoy.expect_cds_rejected().await;
    // Give a wrongly moved route time to show.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let held = report(
        "cut-over to a rejected cluster",
        api,
        ordering,
        load.stop().await,
    );
    judge(&held, ordering);
    if !ordering {
        return;
    }
    assert!(!held.answered.contains_key("upstream-b"), "{held:?}");
    assert!(
        setup.envoy.active_cluster_timeout("x").await.is_some(),
        "x was removed"
    );
    // The fix goes out in order: y warms, the route moves, then x goes.
    let load = Load::start(setup.listener, false);
    setup.edit(&cut_over(&cluster_y), 0);
    let moved = eventually(ARRIVE, || async {
        http_get(setup.listener).await.as_deref() == Some("upstream-b")
            && setup.envoy.active_cluster_timeout("x").await.is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fixed = report("the fix", api, ordering, load.stop().await);
    assert!(
        moved.is_some(),
        "the fix never moved traffic to y with x removed"
    );
    judge(&fixed, ordering);
}

/// (f) Overlapping edits: a route moves to a new cluster y (active health check),
/// and 400 ms later, while y still warms and Envoy holds its CDS ACK, a second edit changes
/// only the route (a timeout). The plan's progress is what Envoy ACKed: the newer snapshot
/// must not send the route before y is warm.
async fn e2e_p30_route_edit_while_the_new_cluster_warms_waits_for_it(api: Api, ordering: bool) {
    let _serial = SERIAL.lock().await;
    let Some(setup) = Setup::start(api, "mbb-overlap", ordering, &base()).await else {
        return;
    };
    let (cluster_y, endpoints_y) = health_checked("y");
    let to_y = |action: &str| {
        format!(
            "clusters:{cluster_y}endpoints:{endpoints_y}listeners:{}routes:{}",
            listener_item("http", "LISTENER_PORT", "main"),
            route_item("main", action)
        )
    };
    let load = Load::start(setup.listener, false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup.edit(&to_y("{ cluster: \"y\" }"), 0);
    tokio::time::sleep(HEALTH_DELAY * 2 / 5).await;
    setup.edit(&to_y("{ cluster: \"y\", timeout: 3s }"), 0);
    let moved = eventually(ARRIVE, || async {
        http_get(setup.listener).await.as_deref() == Some("upstream-b")
            && setup.envoy.active_cluster_timeout("x").await.is_none()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tally = report("route edit while y warms", api, ordering, load.stop().await);
    assert!(moved.is_some(), "traffic never moved to y with x removed");
    judge(&tally, ordering);
    if ordering {
        assert!(
            setup
                .metric("switchyard_update_plans_total{event=\"replaced\"}")
                .await
                >= Some(1.0),
            "the second edit arrived mid-plan"
        );
    }
}
