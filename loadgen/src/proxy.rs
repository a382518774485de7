//! One simulated proxy's protocol state, pure: responses in, requests out, as Envoy's xDS
//! client asks (wildcard CDS and LDS, then EDS and RDS for the names they refer to; SotW or
//! delta), ACKing every response or NACKing a fraction.
//!
//! Must not: touch a socket or a clock (the stream and its timing are `run`'s).

use std::collections::{BTreeMap, BTreeSet};

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

use crate::args::Protocol;

pub(crate) const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub(crate) const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
pub(crate) const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
pub(crate) const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

/// The types a simulated proxy asks for, in the order it asks.
pub(crate) const TYPES: [&str; 4] = [CDS, EDS, LDS, RDS];

pub(crate) fn short(type_url: &str) -> &'static str {
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

/// The error a NACK carries (INVALID_ARGUMENT, as Envoy's).
fn nack_detail() -> RpcStatus {
    RpcStatus {
        code: 3,
        message: "loadgen: NACKed on purpose".into(),
        ..Default::default()
    }
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
            error_detail: nack.then(nack_detail),
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
            error_detail: nack.then(nack_detail),
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
}
