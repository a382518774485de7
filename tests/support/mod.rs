//! Test support: the whole server in-process on 127.0.0.1:0, and a scriptable xDS client
//! that speaks like Envoy (a fake Envoy) over a real socket; real Envoys, etcd, gRPC's xDS
//! client and the `switchyard` binary (`envoy`, `etcd`, `run`). A crate of the workspace
//! (`switchyard-testkit`), compiled once for every integration test, each of which takes it
//! as `support`.

pub mod browser;
pub mod certs;
pub mod envoy;
pub mod etcd;
pub mod memory;
pub mod netns;
pub mod run;

/// The repository's root (the files the tests read: examples, scripts, the corpus beside it).
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `switchyard` binary Cargo built for the integration tests: beside the test binary's
/// `deps/` directory (`target/<profile>/switchyard`).
pub fn switchyard_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary under target/<profile>/deps");
    profile.join(format!("switchyard{}", std::env::consts::EXE_SUFFIX))
}

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use switchyard::cache::Cache;
use switchyard::daemon::{Daemon, Listeners, Options};
use switchyard::publish::Reloader;
use switchyard::resource::ResourceType;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

/// How long to wait for something that should happen.
pub const WAIT: Duration = Duration::from_secs(10);

/// The server, in-process, on a free port, over a temp config directory: the daemon as
/// `serve` runs it (`switchyard::daemon`), without the file watcher. Tests change files and
/// call [`TestServer::reload`] (the watcher has its own tests), so nothing here depends on
/// timing.
pub struct TestServer {
    pub addr: SocketAddr,
    /// The admin HTTP server (/healthz, /readyz, /status).
    pub admin_addr: SocketAddr,
    pub dir: tempfile::TempDir,
    pub cache: Arc<Cache>,
    pub reloader: Arc<Reloader>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// Start with these files (name, content) in the config directory, ordering updates
    /// make-before-break as `serve` does by default.
    pub async fn start(files: &[(&str, &str)]) -> TestServer {
        TestServer::start_with(files, switchyard::server::ServeOptions::default()).await
    }

    /// Start with these files and these options (the admin server shows secrets as
    /// `options.show_secrets` says, as `serve` does).
    pub async fn start_with(
        files: &[(&str, &str)],
        options: switchyard::server::ServeOptions,
    ) -> TestServer {
        TestServer::start_daemon(
            files,
            Options {
                serve: options,
                ..Default::default()
            },
        )
        .await
    }

    /// Start with these files and daemon options (a rollout policy, say); the config paths
    /// are the temp directory.
    pub async fn start_daemon(files: &[(&str, &str)], options: Options) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in files {
            write(dir.path(), name, text);
        }
        let daemon = Daemon::load(Options {
            source: switchyard::source::Source::Files(vec![dir.path().to_path_buf()]),
            ..options
        })
        .await
        .expect("the initial config loads");
        let listeners = listeners().await;
        let addr = listeners.xds.local_addr().expect("addr");
        let admin_addr = listeners.admin.local_addr().expect("admin addr");
        let (cache, reloader) = (Arc::clone(&daemon.cache), Arc::clone(&daemon.reloader));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            daemon
                .serve(listeners, async {
                    let _ = stopped.await;
                })
                .await
                .expect("server runs");
        });
        TestServer {
            addr,
            admin_addr,
            dir,
            cache,
            reloader,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Write a config file (replacing it) and reload; panics if the load fails.
    pub fn set_file(&self, name: &str, text: &str) {
        self.set_files(&[(name, text)]);
    }

    /// Write several config files, then reload once (one edit); panics if the load fails.
    pub fn set_files(&self, files: &[(&str, &str)]) {
        for (name, text) in files {
            write(self.dir.path(), name, text);
        }
        self.reloader.reload().expect("config loads");
    }

    /// Write a config file that must fail to load; returns the load errors.
    pub fn set_bad_file(&self, name: &str, text: &str) -> Vec<String> {
        write(self.dir.path(), name, text);
        match self.reloader.reload() {
            Ok(()) => panic!("{name} was expected not to load"),
            Err(f) => f.errors.iter().map(|e| e.to_string()).collect(),
        }
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    /// An ADS client for node `id` (node.cluster "test").
    pub async fn ads(&self, id: &str) -> XdsClient {
        XdsClient::ads(self.channel().await, node(id, "test")).await
    }

    /// `GET path` on the admin server: (status code, body).
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        let r = reqwest::get(format!("http://{}{path}", self.admin_addr))
            .await
            .expect("admin answers");
        let code = r.status().as_u16();
        (code, r.text().await.expect("body"))
    }

    /// `POST path` on the admin API: status code and body.
    pub async fn admin_post(&self, path: &str) -> (u16, String) {
        let r = reqwest::Client::new()
            .post(format!("http://{}{path}", self.admin_addr))
            .send()
            .await
            .expect("admin answers");
        let code = r.status().as_u16();
        (code, r.text().await.expect("body"))
    }

    /// `GET /status`, parsed.
    /// `switchyard status ARGS` against this server, run as a process (the test's runtime
    /// goes on serving meanwhile): its exit code, stdout and stderr.
    pub async fn status_cli(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let mut all = vec![
            "status".to_string(),
            "--admin-addr".to_string(),
            self.admin_addr.to_string(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        let out = cli(all).await;
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub async fn status(&self) -> switchyard::admin::Status {
        let (code, body) = self.admin_get("/status").await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("status JSON")
    }

    /// An Incremental ADS client for node `id` (node.cluster "test").
    pub async fn delta(&self, id: &str) -> DeltaClient {
        DeltaClient::ads(self.channel().await, node(id, "test")).await
    }

    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(WAIT, task)
                .await
                .expect("server stops in time")
                .expect("server task");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A small mesh in `dir`: cluster `a` (EDS) to `upstream_port` (a.yaml), listener `http` on
/// `listener_port` with RDS `main` (listener.yaml), and route configuration `main` to `a`
/// (routes.yaml).
pub fn write_mesh(dir: &Path, upstream_port: u16, listener_port: u16) {
    write(dir, "a.yaml", &eds_cluster("a", "1s", upstream_port));
    write(
        dir,
        "listener.yaml",
        &rds_listener("http", listener_port, "main"),
    );
    write(dir, "routes.yaml", &route_to("main", "a"));
}

/// The daemon's two listeners, each on a free port of 127.0.0.1.
pub async fn listeners() -> Listeners {
    let bind = || async {
        tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind")
    };
    Listeners {
        xds: bind().await,
        admin: bind().await,
    }
}

/// `switchyard ARGS` as a process, off the test's runtime (which goes on serving).
pub async fn cli(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(switchyard_binary())
            .args(&args)
            .output()
            .expect("runs")
    })
    .await
    .expect("joined")
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config file");
    path
}

pub fn node(id: &str, cluster: &str) -> Node {
    Node {
        id: id.into(),
        cluster: cluster.into(),
        user_agent_name: "switchyard-tests".into(),
        ..Default::default()
    }
}

/// A scriptable SotW client: send requests, read responses, ACK/NACK like Envoy does.
pub struct XdsClient {
    node: Node,
    tx: mpsc::Sender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
    sent_node: bool,
}

impl XdsClient {
    /// Open an ADS stream.
    pub async fn ads(channel: Channel, node: Node) -> XdsClient {
        let (tx, rx) = mpsc::channel(64);
        let responses = AggregatedDiscoveryServiceClient::new(channel)
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("ADS stream opens")
            .into_inner();
        XdsClient {
            node,
            tx,
            responses,
            sent_node: false,
        }
    }

    /// Wrap a stream opened on another service.
    pub fn from_parts(
        node: Node,
        tx: mpsc::Sender<DiscoveryRequest>,
        responses: Streaming<DiscoveryResponse>,
    ) -> XdsClient {
        XdsClient {
            node,
            tx,
            responses,
            sent_node: false,
        }
    }

    /// Send a raw request (node added on the first, as Envoy does).
    pub async fn send(&mut self, mut request: DiscoveryRequest) {
        if !self.sent_node && request.node.is_none() {
            request.node = Some(self.node.clone());
        }
        self.sent_node = true;
        self.tx.send(request).await.expect("request stream open");
    }

    /// Send a request exactly as given (no node added).
    pub async fn send_raw(&mut self, request: DiscoveryRequest) {
        self.sent_node = true;
        self.tx.send(request).await.expect("request stream open");
    }

    /// Subscribe to `kind` with `names` (empty: wildcard), as a first request.
    pub async fn subscribe(&mut self, kind: ResourceType, names: &[&str]) {
        self.send(request(kind, names, "", "")).await;
    }

    /// ACK `response`, keeping subscription `names`.
    pub async fn ack(&mut self, response: &DiscoveryResponse, names: &[&str]) {
        let kind = ResourceType::from_type_url(&response.type_url).expect("known type");
        self.send(request(
            kind,
            names,
            &response.version_info,
            &response.nonce,
        ))
        .await;
    }

    /// NACK `response`, saying the client still runs `accepted_version`.
    pub async fn nack(
        &mut self,
        response: &DiscoveryResponse,
        names: &[&str],
        accepted_version: &str,
        error: &str,
    ) {
        let kind = ResourceType::from_type_url(&response.type_url).expect("known type");
        let mut r = request(kind, names, accepted_version, &response.nonce);
        r.error_detail = Some(RpcStatus {
            code: 3,
            message: error.into(),
            details: vec![],
        });
        self.send(r).await;
    }

    /// The next response within `limit` (`None` past it); panics if the stream ends.
    pub async fn recv_within(&mut self, limit: Duration) -> Option<DiscoveryResponse> {
        match tokio::time::timeout(limit, self.responses.message()).await {
            Ok(Ok(Some(r))) => Some(r),
            Ok(Ok(None)) => panic!("stream ended"),
            Ok(Err(status)) => panic!("stream failed: {status:?}"),
            Err(_) => None,
        }
    }

    /// The next response; panics after [`WAIT`] or if the stream ends.
    pub async fn recv(&mut self) -> DiscoveryResponse {
        next_message(&mut self.responses).await
    }

    /// The next response, which must be of `kind`.
    pub async fn recv_type(&mut self, kind: ResourceType) -> DiscoveryResponse {
        let r = self.recv().await;
        assert_eq!(
            r.type_url,
            kind.type_url(),
            "expected {kind}, got {}",
            r.type_url
        );
        r
    }

    /// The status the stream ends with.
    pub async fn recv_error(&mut self) -> tonic::Status {
        end_status(&mut self.responses).await
    }

    /// From now on ACK every response as it comes (wildcard subscriptions), as an Envoy
    /// that accepts everything does, until the stream ends or the task is aborted.
    pub fn ack_everything(mut self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while let Ok(Some(response)) = self.responses.message().await {
                self.ack(&response, &[]).await;
            }
        })
    }

    /// Assert that no response comes within `wait`.
    pub async fn expect_quiet(&mut self, wait: Duration) {
        expect_quiet(&mut self.responses, wait).await
    }

    /// Assert that the server ends the stream cleanly (end of stream, status OK) within
    /// `wait`, with no more responses: not a connection torn down under it.
    pub async fn expect_end(&mut self, wait: Duration) {
        match tokio::time::timeout(wait, self.responses.message()).await {
            Ok(Ok(None)) => {}
            Ok(Err(status)) => panic!("the stream was torn down, not ended: {status:?}"),
            Ok(Ok(Some(r))) => panic!("expected the stream to end, got {r:?}"),
            Err(_) => panic!("the stream did not end within {wait:?}"),
        }
    }
}

/// Assert that a response stream carries nothing within `wait`.
async fn expect_quiet<T: std::fmt::Debug>(responses: &mut Streaming<T>, wait: Duration) {
    if let Ok(got) = tokio::time::timeout(wait, responses.message()).await {
        panic!("expected no response within {wait:?}, got {got:?}");
    }
}

/// The next message of a response stream; panics after [`WAIT`] or if the stream ends.
async fn next_message<T>(responses: &mut Streaming<T>) -> T {
    match tokio::time::timeout(WAIT, responses.message()).await {
        Ok(Ok(Some(r))) => r,
        Ok(Ok(None)) => panic!("stream ended"),
        Ok(Err(status)) => panic!("stream failed: {status:?}"),
        Err(_) => panic!("no response within {WAIT:?}"),
    }
}

/// The status a response stream ends with; panics on a message or after [`WAIT`].
async fn end_status<T: std::fmt::Debug>(responses: &mut Streaming<T>) -> tonic::Status {
    match tokio::time::timeout(WAIT, responses.message()).await {
        Ok(Err(status)) => status,
        Ok(Ok(other)) => panic!("expected an error status, got {other:?}"),
        Err(_) => panic!("no status within {WAIT:?}"),
    }
}

/// A scriptable delta client: subscribe, unsubscribe, read responses, ACK/NACK.
pub struct DeltaClient {
    node: Node,
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    responses: Streaming<DeltaDiscoveryResponse>,
    sent_node: bool,
}

impl DeltaClient {
    /// Open an Incremental ADS stream.
    pub async fn ads(channel: Channel, node: Node) -> DeltaClient {
        let (tx, rx) = mpsc::channel(64);
        let responses = AggregatedDiscoveryServiceClient::new(channel)
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("Incremental ADS stream opens")
            .into_inner();
        DeltaClient::from_parts(node, tx, responses)
    }

    /// Wrap a stream opened on another service.
    pub fn from_parts(
        node: Node,
        tx: mpsc::Sender<DeltaDiscoveryRequest>,
        responses: Streaming<DeltaDiscoveryResponse>,
    ) -> DeltaClient {
        DeltaClient {
            node,
            tx,
            responses,
            sent_node: false,
        }
    }

    /// Send a request (node added on the first, as Envoy does).
    pub async fn send(&mut self, mut request: DeltaDiscoveryRequest) {
        if !self.sent_node && request.node.is_none() {
            request.node = Some(self.node.clone());
        }
        self.sent_node = true;
        self.tx.send(request).await.expect("request stream open");
    }

    /// Subscribe to and unsubscribe from names of `kind` (no nonce: a spontaneous change).
    pub async fn subscribe(
        &mut self,
        kind: ResourceType,
        subscribe: &[&str],
        unsubscribe: &[&str],
    ) {
        self.send(delta_request(kind, subscribe, unsubscribe, ""))
            .await;
    }

    /// ACK `response`.
    pub async fn ack(&mut self, response: &DeltaDiscoveryResponse) {
        let kind = ResourceType::from_type_url(&response.type_url).expect("known type");
        self.send(delta_request(kind, &[], &[], &response.nonce))
            .await;
    }

    /// NACK `response`.
    pub async fn nack(&mut self, response: &DeltaDiscoveryResponse, error: &str) {
        let kind = ResourceType::from_type_url(&response.type_url).expect("known type");
        let mut r = delta_request(kind, &[], &[], &response.nonce);
        r.error_detail = Some(RpcStatus {
            code: 3,
            message: error.into(),
            details: vec![],
        });
        self.send(r).await;
    }

    /// The next response; panics after [`WAIT`] or if the stream ends.
    pub async fn recv(&mut self) -> DeltaDiscoveryResponse {
        next_message(&mut self.responses).await
    }

    /// The status the stream ends with.
    pub async fn recv_error(&mut self) -> tonic::Status {
        end_status(&mut self.responses).await
    }

    /// Assert that no response comes within `wait`.
    pub async fn expect_quiet(&mut self, wait: Duration) {
        expect_quiet(&mut self.responses, wait).await
    }
}

pub fn delta_request(
    kind: ResourceType,
    subscribe: &[&str],
    unsubscribe: &[&str],
    nonce: &str,
) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: kind.type_url().into(),
        resource_names_subscribe: subscribe.iter().map(|s| s.to_string()).collect(),
        resource_names_unsubscribe: unsubscribe.iter().map(|s| s.to_string()).collect(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// The names of the resources in a delta response.
pub fn delta_names(response: &DeltaDiscoveryResponse) -> Vec<String> {
    response.resources.iter().map(|r| r.name.clone()).collect()
}

pub fn request(kind: ResourceType, names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version.into(),
        resource_names: names.iter().map(|s| s.to_string()).collect(),
        type_url: kind.type_url().into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// Resource names in a response (decoded by type).
/// The names resource errors say do not exist (P32), each checked to be NOT_FOUND.
pub fn not_found(
    errors: &[envoy_types::pb::envoy::service::discovery::v3::ResourceError],
) -> Vec<String> {
    errors
        .iter()
        .map(|e| {
            assert_eq!(
                e.error_detail.as_ref().map(|s| s.code),
                Some(tonic::Code::NotFound as i32),
                "{e:?}"
            );
            e.resource_name
                .as_ref()
                .map(|n| n.name.clone())
                .unwrap_or_default()
        })
        .collect()
}

pub fn names(response: &DiscoveryResponse) -> Vec<String> {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, ScopedRouteConfiguration};
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
    use envoy_types::pb::envoy::service::runtime::v3::Runtime;
    use prost::Message;
    let kind = ResourceType::from_type_url(&response.type_url).expect("known type");
    response
        .resources
        .iter()
        .map(|any| {
            assert_eq!(
                any.type_url, response.type_url,
                "Any type matches response type"
            );
            let v = any.value.as_slice();
            match kind {
                ResourceType::Cluster => Cluster::decode(v).map(|m| m.name),
                ResourceType::Endpoint => ClusterLoadAssignment::decode(v).map(|m| m.cluster_name),
                ResourceType::Listener => Listener::decode(v).map(|m| m.name),
                ResourceType::Route => RouteConfiguration::decode(v).map(|m| m.name),
                ResourceType::ScopedRoute => ScopedRouteConfiguration::decode(v).map(|m| m.name),
                ResourceType::Secret => Secret::decode(v).map(|m| m.name),
                ResourceType::Runtime => Runtime::decode(v).map(|m| m.name),
                ResourceType::ExtensionConfig => TypedExtensionConfig::decode(v).map(|m| m.name),
                ResourceType::VirtualHost => {
                    envoy_types::pb::envoy::config::route::v3::VirtualHost::decode(v)
                        .map(|m| m.name)
                }
                // An LbEndpoint carries no name: LEDS is delta only (P34).
                ResourceType::LbEndpoint => panic!("an LbEndpoint in a SotW response"),
            }
            .expect("resource decodes as its type")
        })
        .collect()
}

/// A cluster of `name` (EDS) with `timeout` as connect_timeout, and its endpoints on `port`.
pub fn eds_cluster(name: &str, timeout: &str, port: u16) -> String {
    format!(
        r#"
clusters:
  - name: {name}
    connect_timeout: {timeout}
    type: EDS
    eds_cluster_config: {{ eds_config: {{ ads: {{}}, resource_api_version: V3 }} }}
endpoints:
  - cluster_name: {name}
    endpoints:
      - lb_endpoints:
          - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
    )
}

/// A cluster like [`eds_cluster`] that Envoy rejects although it breaks none of Envoy's field
/// rules and none of Switchyard's checks (so Switchyard loads and serves it): an EDS cluster
/// whose upstream TLS trusts a CA in a file the proxy's host does not have
/// ([`ENVOY_REJECTED_CLUSTER_LINES`]): only the proxy can know. Envoy 1.40: "Invalid path:
/// /nonexistent/switchyard-test/ca.pem".
pub fn envoy_rejected_cluster(name: &str, port: u16) -> String {
    eds_cluster(name, "1s", port).replace(
        "    type: EDS\n",
        &format!("    type: EDS\n{ENVOY_REJECTED_CLUSTER_LINES}"),
    )
}

/// The fields that make a cluster item one Envoy rejects ([`envoy_rejected_cluster`]), at a
/// cluster item's indentation.
pub const ENVOY_REJECTED_CLUSTER_LINES: &str = "    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        common_tls_context: { validation_context: { trusted_ca: { filename: /nonexistent/switchyard-test/ca.pem } } }
";

/// The words of Envoy's NACK of [`envoy_rejected_cluster`].
pub const ENVOY_REJECTED_CLUSTER: &str = "Invalid path: /nonexistent/switchyard-test/ca.pem";

/// A CA file no proxy's host has: what [`envoy_rejected_cluster`] and the other fixtures
/// Envoy alone refuses trust.
pub const MISSING_CA: &str = "/nonexistent/switchyard-test/ca.pem";

/// Lua that compiles and fails when run: Envoy runs a script as it loads it, Switchyard only
/// compiles it (never runs the operator's code), so Switchyard lets it through, and Envoy
/// 1.40 refuses it at load with [`ENVOY_REJECTED_LUA`].
pub const BAD_LUA: &str = "error('refused when run')";

/// The start of Envoy's words for [`BAD_LUA`].
pub const ENVOY_REJECTED_LUA: &str = "script load error";

/// A route's `typed_per_filter_config` (one line) whose Lua script fails when run
/// ([`BAD_LUA`]): Envoy builds a route's Lua config, and refuses it, whether or not its
/// listener has a Lua filter.
pub fn bad_lua_per_route() -> String {
    format!(
        "typed_per_filter_config: {{ envoy.filters.http.lua: {{ \"@type\": \
         type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute, source_code: \
         {{ inline_string: \"{BAD_LUA}\" }} }} }}"
    )
}

/// An HTTP listener `name` on `port` whose routes come from RDS `route`.
pub fn rds_listener(name: &str, port: u16, route: &str) -> String {
    format!("\nlisteners:{}", listener_item(name, port, route))
}

/// [`rds_listener`]'s list item alone (`port` may be a placeholder to fill in later).
pub fn listener_item(name: &str, port: impl std::fmt::Display, route: &str) -> String {
    hcm_listener_item(
        name,
        port,
        &format!(
            "rds: {{ route_config_name: {route}, config_source: {{ ads: {{}}, resource_api_version: V3 }} }}"
        ),
    )
}

/// A listener item every field rule and every check of Switchyard's passes, and Envoy 1.40
/// refuses: its inline route carries Lua that fails when run ([`bad_lua_per_route`]), which
/// only Envoy's Lua runtime judges (docs/reference.md, "What Envoy refuses beyond its field
/// rules"; [`ENVOY_REJECTED_LISTENER`]). For tests that need a NACK.
pub fn envoy_rejected_listener_item(
    name: &str,
    port: impl std::fmt::Display,
    cluster: &str,
) -> String {
    hcm_listener_item(
        name,
        port,
        &format!(
            "route_config: {{ name: {name}, virtual_hosts: [{{ name: all, domains: [\"*\"], routes: \
             [{{ match: {{ prefix: \"/\" }}, route: {{ cluster: {cluster} }}, {} }}] }}] }}",
            bad_lua_per_route()
        ),
    )
}

/// The words of Envoy's NACK of [`envoy_rejected_listener_item`].
pub const ENVOY_REJECTED_LISTENER: &str = ENVOY_REJECTED_LUA;

/// An HTTP listener item `name` on `port` whose connection manager takes its routes from
/// `routes` (one line: `rds: ...` or `route_config: ...`).
fn hcm_listener_item(name: &str, port: impl std::fmt::Display, routes: &str) -> String {
    format!(
        r#"
  - name: {name}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
      - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: {name}
              {routes}
              http_filters:
                - name: envoy.filters.http.router
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}

/// Route configuration `name` sending everything to `cluster`.
pub fn route_to(name: &str, cluster: &str) -> String {
    format!(
        "\nroutes:{}",
        route_item(name, &format!("{{ cluster: {cluster} }}"))
    )
}

/// A route configuration list item: everything to the route action `action`.
pub fn route_item(name: &str, action: &str) -> String {
    format!(
        r#"
  - name: {name}
    virtual_hosts:
      - name: all
        domains: ["*"]
        routes:
          - match: {{ prefix: / }}
            route: {action}
"#
    )
}

/// Every `*.yaml` file under `dir`, at any depth, in path order.
/// The public corpus of real configurations (`../shared/corpus/envoy-examples`, beside the
/// repository, not in it). Present: its path. Absent: required under `CI=true` (a failure
/// naming it); elsewhere `None`, after saying plainly that the test did not run, and why.
pub fn shared_corpus(test: &str) -> Option<std::path::PathBuf> {
    let path = repo().join("../shared/corpus/envoy-examples");
    if path.is_dir() {
        return Some(path);
    }
    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false");
    assert!(
        !in_ci,
        "{test}: {} is missing, and it is required under CI=true (CI lays shared/ beside the \
         clone)",
        path.display()
    );
    // Written to the process's stderr itself, past the test harness's capture, so that a
    // plain `cargo test` shows it.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "DID NOT RUN: {test} reads the public corpus, {}, which is not beside this clone \
         (CI lays it there; under CI=true its absence fails).",
        path.display()
    );
    None
}

pub fn yaml_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A seed for a test's random schedule: `var` from the environment (to replay a failure),
/// else the clock; printed as `VAR=seed` so a failure can be replayed.
pub fn seed_from(var: &str) -> u64 {
    let seed = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("{var}={seed}");
    seed
}

/// A small seeded generator (a linear congruential one: enough for test schedules).
pub struct Seeded(pub u64);

impl Seeded {
    pub fn draw(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}
