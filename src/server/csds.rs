//! CSDS: `envoy.service.status.v3.ClientStatusDiscoveryService` on the xDS port, so standard
//! tooling (grpcdebug, Envoy's CSDS clients) can ask what each connected client has.
//!
//! Answers from the [`Fleet`] (what each node ACKed or NACKed, per type) and the node's
//! current snapshot (the resources of each type it asked for). For a type subscribed by name
//! (EDS, RDS) the listing is every resource of that type in the node's group, which may be
//! more than it asked for.
//!
//! Must not: show secrets unless the server was told to (`--admin-show-secrets`), or answer
//! clients beyond `--csds-from`.

use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::admin::v3::{ClientResourceStatus, UpdateFailureState};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::StringMatcher;
use envoy_types::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_server::ClientStatusDiscoveryService;
use envoy_types::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use envoy_types::pb::google::protobuf::{Any, Timestamp};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::incoming::ConnInfo;
use crate::cache::Cache;
use crate::fleet::{Fleet, StreamReport, SyncStatus, TypeReport};
use crate::resource::{ResourceType, Secrets};

/// The CSDS service.
#[derive(Clone, Debug)]
pub struct Csds {
    pub fleet: Arc<Fleet>,
    pub cache: Arc<Cache>,
    /// Operators see sensitive fields only with `--admin-show-secrets`.
    pub show_secrets: Secrets,
    /// Who may ask (`--csds-from`).
    pub from: CsdsFrom,
    /// The largest answer built ([`MAX_ANSWER_BYTES`]).
    pub max_answer: usize,
}

/// Who may ask CSDS on the xDS port, which lists every connected node and its resources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CsdsFrom {
    /// Only clients on this host (127.0.0.0/8, ::1).
    #[default]
    Loopback,
    /// Any client that reaches the xDS port.
    Any,
}

impl CsdsFrom {
    /// Whether a client at `peer` may ask: on this host, or authenticated by mutual TLS;
    /// an unknown peer may not, unless any may.
    pub fn allows(self, peer: Option<std::net::SocketAddr>, authenticated: bool) -> bool {
        match self {
            CsdsFrom::Any => true,
            CsdsFrom::Loopback => authenticated || peer.is_some_and(|p| p.ip().is_loopback()),
        }
    }

    fn check(self, conn: Option<&ConnInfo>) -> Result<(), Status> {
        let peer = conn.and_then(|c| c.remote);
        if self.allows(peer, conn.is_some_and(|c| c.identity.is_some())) {
            return Ok(());
        }
        tracing::warn!(peer = ?peer, "Refused a CSDS request from beyond loopback (--csds-from).");
        Err(Status::permission_denied(
            "CSDS answers only clients on this host or authenticated by mutual TLS; the \
             server's --csds-from any opens it",
        ))
    }
}

type StatusStream = Pin<Box<dyn Stream<Item = Result<ClientStatusResponse, Status>> + Send>>;

/// The largest CSDS answer built: past it the request is refused, with how to narrow it.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

#[tonic::async_trait]
impl ClientStatusDiscoveryService for Csds {
    type StreamClientStatusStream = StatusStream;

    async fn stream_client_status(
        &self,
        request: Request<Streaming<ClientStatusRequest>>,
    ) -> Result<Response<StatusStream>, Status> {
        self.from.check(request.extensions().get::<ConnInfo>())?;
        let csds = self.clone();
        let answers = request
            .into_inner()
            .map(move |r| r.and_then(|r| csds.answer(&r)));
        Ok(Response::new(Box::pin(answers)))
    }

    async fn fetch_client_status(
        &self,
        request: Request<ClientStatusRequest>,
    ) -> Result<Response<ClientStatusResponse>, Status> {
        self.from.check(request.extensions().get::<ConnInfo>())?;
        self.answer(request.get_ref()).map(Response::new)
    }
}

impl Csds {
    /// One answer: a `ClientConfig` per connected node the request's matchers select.
    fn answer(&self, request: &ClientStatusRequest) -> Result<ClientStatusResponse, Status> {
        let mut matchers = Vec::new();
        for m in &request.node_matchers {
            if !m.node_metadatas.is_empty() {
                return Err(Status::unimplemented(
                    "node_metadatas matchers are not supported; match on node_id",
                ));
            }
            matchers.push(m.node_id.clone());
        }
        let serving = self.cache.serving();
        let mut nodes: std::collections::BTreeMap<String, Vec<StreamReport>> = Default::default();
        for r in self.fleet.reports() {
            nodes.entry(r.node_id.clone()).or_default().push(r);
        }
        let mut config = Vec::new();
        let mut size = 0;
        for (id, streams) in nodes {
            if !matchers.is_empty()
                && !matchers
                    .iter()
                    .any(|m| m.as_ref().is_some_and(|m| string_matches(m, &id)))
            {
                continue;
            }
            let first = &streams[0];
            let snapshot = serving.for_node(&first.facts).snapshot_for(&first.facts);
            let mut generic = Vec::new();
            for kind in ResourceType::ALL {
                let Some(t) = streams.iter().find_map(|s| s.types.get(kind.short_name())) else {
                    continue;
                };
                for r in snapshot.get(kind).resources.values() {
                    generic.push(resource_config(
                        kind,
                        r,
                        t,
                        request.exclude_resource_contents,
                        self.show_secrets,
                    ));
                }
                // P32: what the node asked for by name and was told does not exist.
                for name in t.not_found.as_slice() {
                    generic.push(does_not_exist(kind.type_url(), name, t.last_change));
                }
            }
            // P33: what it asked for of types this server does not serve.
            for u in streams.iter().flat_map(|s| s.unknown_types.as_slice()) {
                for name in &u.names {
                    generic.push(does_not_exist(&u.type_url, name, first.connected_since));
                }
            }
            let node_config = ClientConfig {
                node: Some(Node {
                    id,
                    cluster: first.node_cluster.clone(),
                    user_agent_name: first.user_agent.clone(),
                    client_features: first.client_features.clone(),
                    ..Default::default()
                }),
                generic_xds_configs: generic,
                ..Default::default()
            };
            // Bounded as it is built, node by node, so a large fleet cannot make the server
            // hold an answer of any size.
            size += prost::Message::encoded_len(&node_config);
            if size > self.max_answer {
                return Err(Status::resource_exhausted(format!(
                    "the answer would be more than {} bytes: narrow it with node_matchers, or \
                     set exclude_resource_contents",
                    self.max_answer
                )));
            }
            config.push(node_config);
        }
        Ok(ClientStatusResponse { config })
    }
}

/// A resource the node subscribes to and was told does not exist (P32).
fn does_not_exist(type_url: &str, name: &str, since: std::time::SystemTime) -> GenericXdsConfig {
    GenericXdsConfig {
        type_url: type_url.to_string(),
        name: name.to_string(),
        last_updated: timestamp(since),
        client_status: ClientResourceStatus::DoesNotExist as i32,
        ..Default::default()
    }
}

fn timestamp(at: std::time::SystemTime) -> Option<Timestamp> {
    at.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| Timestamp {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        })
}

fn resource_config(
    kind: ResourceType,
    r: &crate::resource::Resource,
    t: &TypeReport,
    exclude_contents: bool,
    secrets: Secrets,
) -> GenericXdsConfig {
    let (config_status, client_status) = match t.state {
        SyncStatus::Synced => (ConfigStatus::Synced, ClientResourceStatus::Acked),
        SyncStatus::Stale => (ConfigStatus::Stale, ClientResourceStatus::Requested),
        SyncStatus::Nacked => (ConfigStatus::Error, ClientResourceStatus::Nacked),
        SyncStatus::NotSent => (ConfigStatus::NotSent, ClientResourceStatus::Requested),
    };
    let last_updated = timestamp(t.last_change);
    GenericXdsConfig {
        type_url: kind.type_url().to_string(),
        name: r.name.clone(),
        version_info: r.version.clone(),
        xds_config: (!exclude_contents).then(|| Any {
            type_url: kind.type_url().to_string(),
            value: r.body_shown(secrets).to_vec(),
        }),
        last_updated,
        config_status: config_status as i32,
        client_status: client_status as i32,
        error_state: t.nack.as_ref().map(|n| UpdateFailureState {
            details: n.error.clone(),
            version_info: n.rejected_version.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether `value` matches an Envoy `StringMatcher` (exact, prefix, suffix, contains; regex
/// is not supported and matches nothing).
fn string_matches(m: &StringMatcher, value: &str) -> bool {
    let fold = |s: &str| {
        if m.ignore_case {
            s.to_lowercase()
        } else {
            s.to_string()
        }
    };
    let value = fold(value);
    match &m.match_pattern {
        Some(MatchPattern::Exact(e)) => value == fold(e),
        Some(MatchPattern::Prefix(p)) => value.starts_with(&fold(p)),
        Some(MatchPattern::Suffix(p)) => value.ends_with(&fold(p)),
        Some(MatchPattern::Contains(p)) => value.contains(&fold(p)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::CsdsFrom;

    #[test]
    fn an_answer_past_the_size_limit_is_refused_with_how_to_narrow_it() {
        use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
        use std::sync::Arc;
        let fleet = Arc::new(crate::fleet::Fleet::default());
        let mut report = crate::testing::stream_report("n1", "127.0.0.1:1", "ADS");
        report.types.insert(
            "CDS",
            crate::fleet::TypeReport {
                state: crate::fleet::SyncStatus::Synced,
                version_sent: "v".into(),
                version_acked: "v".into(),
                nonce: "1".into(),
                nack: None,
                oversized_bytes: None,
                not_found: Default::default(),
                last_change: std::time::SystemTime::UNIX_EPOCH,
            },
        );
        let _listed = fleet.open(report);
        let csds = |max_answer| super::Csds {
            fleet: Arc::clone(&fleet),
            cache: Arc::new(crate::cache::Cache::new()),
            show_secrets: Default::default(),
            from: super::CsdsFrom::Loopback,
            max_answer,
        };
        let request = ClientStatusRequest::default();
        assert_eq!(
            csds(1 << 20).answer(&request).expect("fits").config.len(),
            1
        );
        let refused = csds(4).answer(&request).expect_err("too large");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("node_matchers"), "{refused:?}");
    }

    #[test]
    fn csds_answers_loopback_peers_unless_opened() {
        let local = "127.0.0.1:5000".parse().ok();
        let local6 = "[::1]:5000".parse().ok();
        let remote = "10.1.2.3:5000".parse().ok();
        assert!(CsdsFrom::Loopback.allows(local, false));
        assert!(CsdsFrom::Loopback.allows(local6, false));
        assert!(!CsdsFrom::Loopback.allows(remote, false));
        assert!(
            CsdsFrom::Loopback.allows(remote, true),
            "authenticated by mutual TLS"
        );
        assert!(
            !CsdsFrom::Loopback.allows(None, false),
            "an unknown peer is not trusted"
        );
        assert!(CsdsFrom::Any.allows(remote, false) && CsdsFrom::Any.allows(None, false));
        let conn = super::ConnInfo {
            remote,
            ..Default::default()
        };
        let refused = CsdsFrom::Loopback.check(Some(&conn)).expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    }
}
