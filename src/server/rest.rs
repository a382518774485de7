//! REST-JSON polling (`api_type: REST`): `POST /v3/discovery:<type>` on the xDS port, beside
//! gRPC, over HTTP/1.1 and HTTP/2.
//!
//! Each request is a `DiscoveryRequest` in proto3 JSON; the answer is the `DiscoveryResponse`
//! for the node's snapshot and the requested names, in proto3 JSON. A request whose
//! `version_info` is the current version is held until the type changes for that node or
//! [`REST_HOLD`] passes, then answered `304 Not Modified` (Envoy's "no update"), so a client
//! polling with a short refresh delay never gets a loop of unchanged answers. So is one for
//! names none of which exist any more, from a poller that has them: it keeps what it has, as
//! a stream's client does (Envoy's REST client would take an empty answer as an update, and
//! reject it for SDS, RTDS and ECDS).
//!
//! Each poll is reported to the fleet (`Fleet::polled`): a node that polls shows in
//! `/status` as one with a stream would, with what each of its types holds as far as its
//! polls tell (`protocol::PollState`).
//!
//! Must not: answer from state kept per client between polls (REST has no stream: each poll
//! is answered from the node's snapshot alone; what the fleet keeps is only reported).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use prost_reflect::DynamicMessage;

use envoy_types::pb::envoy::config::core::v3::Node;

use crate::cache::Cache;
use crate::config::{descriptors, json};
use crate::fleet::Fleet;
use crate::protocol::Subscription;
use crate::resource::{ResourceType, Secrets};
use crate::telemetry::PollApi;
use crate::telemetry::Telemetry;

/// How long a request for the version the client already has is held before `304`. Below
/// Envoy's default REST `request_timeout` (1 s), so the answer arrives before Envoy gives up.
pub const REST_HOLD: Duration = Duration::from_millis(500);

/// What the REST routes read.
#[derive(Clone, Debug)]
pub struct Rest {
    pub cache: Arc<Cache>,
    /// Where each poll is reported.
    pub fleet: Arc<Fleet>,
    pub telemetry: Telemetry,
    /// The server's shutdown: a held poll is answered at once.
    pub stop: crate::shutdown::Shutdown,
    /// Private key material only with `--insecure-serve-secrets`: a poll proves nothing about
    /// who it comes from (even a poll bound by `--node-identity` gets none: each resource's
    /// REST rendering is made once and shared).
    pub secrets: Secrets,
    /// `--node-identity`: a poll's client certificate must be bound to the node it names.
    pub identity: Option<std::sync::Arc<super::tls::IdentityPolicy>>,
}

/// `POST /v3/discovery:{type}`.
pub fn router(rest: Rest) -> Router {
    Router::new()
        .route("/v3/{discovery}", post(discovery))
        .with_state(rest)
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message + "\n").into_response()
}

async fn discovery(
    State(rest): State<Rest>,
    Path(segment): Path<String>,
    extensions: axum::http::Extensions,
    body: Bytes,
) -> Response {
    let Some(kind) = ResourceType::from_rest_path(&segment) else {
        return (
            StatusCode::NOT_FOUND,
            format!(
                "no REST discovery endpoint {segment:?}; use discovery:clusters, :endpoints, \
                 :listeners, :routes, :scoped-routes, :secrets, :runtime or :extension_configs\n"
            ),
        )
            .into_response();
    };
    let request = match parse_request(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("invalid DiscoveryRequest JSON: {e}")),
    };
    if !request.type_url.is_empty() && request.type_url != kind.type_url() {
        return bad_request(format!(
            "{segment} serves {}, not type_url {:?}",
            kind.type_url(),
            request.type_url
        ));
    }
    let Some(node) = request.node.clone() else {
        return bad_request("a REST DiscoveryRequest must carry `node`".into());
    };
    let conn = extensions.get::<super::incoming::ConnInfo>();
    if let Err(why) = rest.check_identity(conn, &node, "REST poll") {
        return (
            StatusCode::FORBIDDEN,
            format!("node {:?}: {why}\n", node.id),
        )
            .into_response();
    }
    let polled = rest.poll(kind, &request, &node).await;
    rest.report(PollApi::Rest, kind, &request, &node, conn, &polled);
    if polled.unchanged {
        rest.telemetry.poll_answered(PollApi::Rest, kind, None);
        return StatusCode::NOT_MODIFIED.into_response();
    }
    answer(&rest, kind, polled)
}

/// What a poll (REST, or a gRPC `Fetch*`, P36) is answered with.
#[derive(Debug)]
pub struct Polled {
    /// The version of what it selects, as a SotW stream would give it (P13).
    pub version: String,
    pub resources: crate::protocol::Resources,
    /// What it names that does not exist for the node (P32).
    pub not_found: Vec<String>,
    /// The version is the one the poll named, and stayed so for [`REST_HOLD`].
    pub unchanged: bool,
    /// The generation it was answered from.
    pub generation: u64,
}

impl Rest {
    /// `--node-identity`: the poll's client certificate must be bound to the node it names.
    /// A mismatch is counted and logged (as `what`), and its reason returned.
    pub fn check_identity(
        &self,
        conn: Option<&super::incoming::ConnInfo>,
        node: &Node,
        what: &str,
    ) -> Result<(), super::tls::IdentityError> {
        let Some(policy) = &self.identity else {
            return Ok(());
        };
        let identity = conn.and_then(|c| c.identity.as_deref());
        policy
            .check(identity, &node.id, &node.cluster)
            .inspect_err(|why| {
                let peer = conn
                    .and_then(|c| c.remote)
                    .map_or_else(|| "unknown".to_string(), |p| p.to_string());
                self.telemetry
                    .identity_mismatch(what, &node.id, &peer, &why.to_string());
            })
    }

    /// Report a poll to the fleet (it shows in `/status` as its node), and what it changed
    /// of the poller's state to telemetry.
    pub fn report(
        &self,
        api: PollApi,
        kind: ResourceType,
        request: &DiscoveryRequest,
        node: &Node,
        conn: Option<&super::incoming::ConnInfo>,
        polled: &Polled,
    ) {
        let error = request.error_detail.as_ref().map(|e| e.message.as_str());
        let peer = conn
            .and_then(|c| c.remote)
            .map_or_else(|| "unknown".to_string(), |p| p.to_string());
        let changed = self.fleet.polled(crate::fleet::Poll {
            node,
            facts: Arc::new(crate::config::selector::NodeFacts::of(node)),
            peer,
            api: api.name(),
            kind,
            version_info: &request.version_info,
            error,
            answer: &polled.version,
            names: &request.resource_names,
            not_found: polled.not_found.clone(),
            generation: polled.generation,
        });
        if let Some((state, error)) = changed {
            self.telemetry
                .poller_state(api, &node.id, kind, state, error.as_deref());
        }
    }

    /// What `node` gets of `kind` for `request`'s names: at once when its version differs
    /// from the request's `version_info`, else once the type changes for the node, or after
    /// [`REST_HOLD`] (or at shutdown) unchanged.
    pub async fn poll(
        &self,
        kind: ResourceType,
        request: &DiscoveryRequest,
        node: &Node,
    ) -> Polled {
        let mut subscription = Subscription::default();
        subscription.apply_sotw(&request.resource_names);
        let facts = crate::config::selector::NodeFacts::of(node);
        let mut generations = self.cache.subscribe();
        let mut stop = self.stop.clone();
        let deadline = tokio::time::Instant::now() + REST_HOLD;
        let mut first = true;
        loop {
            let generation = Arc::clone(generations.borrow_and_update().for_node(&facts));
            let snapshot = generation.snapshot_for(&facts);
            let current = snapshot.get(kind);
            // The versions SotW streams send (P13: a poll is a stream of one request).
            let selected = subscription.select(current);
            // Names none of which exist any more, asked for by a poller that has them: there
            // is nothing to give it, and it keeps what it has (as a stream's client does,
            // P10, P31). Envoy's REST client takes an empty answer as an update, and rejects
            // it for SDS, RTDS and ECDS ("Unexpected RTDS resource length: 0").
            let nothing = !subscription.is_wildcard()
                && selected.resources.is_empty()
                && !request.version_info.is_empty();
            let version = if nothing {
                request.version_info.clone()
            } else {
                selected.version.clone()
            };
            let unchanged = version == request.version_info;
            if !unchanged || !first {
                return Polled {
                    version,
                    resources: crate::protocol::Resources::Shared(Arc::clone(&selected.resources)),
                    not_found: subscription.missing(current),
                    unchanged,
                    generation: generation.number,
                };
            }
            tokio::select! {
                changed = generations.changed() => first = changed.is_ok(),
                _ = tokio::time::sleep_until(deadline) => first = false,
                _ = stop.wait() => first = false,
            }
        }
    }
}

/// A resource as the proto3 JSON of an `Any`: its fields plus `"@type"`.
fn render_any(r: &crate::resource::Resource, secrets: Secrets) -> Option<String> {
    let mut json = json::resource_json(r, r.body_for(secrets))?;
    json.as_object_mut()?
        .insert("@type".into(), r.kind.type_url().into());
    Some(json.to_string())
}

/// Why a poll's body is not a `DiscoveryRequest` in proto3 JSON (serde's or prost's words).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RequestError(String);

/// proto3 JSON -> `DiscoveryRequest`, through the descriptor pool.
pub fn parse_request(body: &[u8]) -> Result<DiscoveryRequest, RequestError> {
    let descriptor = descriptors::message_named("envoy.service.discovery.v3.DiscoveryRequest")
        .ok_or_else(|| RequestError("the DiscoveryRequest descriptor is missing".into()))?;
    let mut json = serde_json::Deserializer::from_slice(body);
    let message = DynamicMessage::deserialize(descriptor, &mut json)
        .map_err(|e| RequestError(e.to_string()))?;
    json.end().map_err(|e| RequestError(e.to_string()))?;
    message
        .transcode_to()
        .map_err(|e| RequestError(e.to_string()))
}

/// The `DiscoveryResponse` JSON for what a poll got.
fn answer(rest: &Rest, kind: ResourceType, polled: Polled) -> Response {
    // Each resource's JSON is rendered once and shared by every poll (as gRPC shares the
    // encoded bytes); the answer is assembled around it.
    let count = polled.resources.len();
    let mut body = String::from("{\"version_info\":");
    body.push_str(&serde_json::Value::from(polled.version).to_string());
    body.push_str(",\"resources\":[");
    for (i, r) in polled.resources.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        // The server's policy is fixed for its life, so one cached rendering serves all.
        body.push_str(r.any_json(|r| render_any(r, rest.secrets)).unwrap_or("{}"));
    }
    body.push_str("],\"type_url\":");
    body.push_str(&serde_json::Value::from(kind.type_url()).to_string());
    body.push_str(",\"control_plane\":{\"identifier\":");
    body.push_str(&serde_json::Value::from(super::CONTROL_PLANE_ID).to_string());
    body.push('}');
    // P32: NOT_FOUND for each name that does not exist for the node.
    if !polled.not_found.is_empty() {
        let errors: Vec<serde_json::Value> = polled
            .not_found
            .iter()
            .map(|name| {
                serde_json::json!({
                    "resource_name": {"name": name},
                    "error_detail": {"code": 5, "message": crate::protocol::NOT_FOUND_MESSAGE},
                })
            })
            .collect();
        body.push_str(",\"resource_errors\":");
        body.push_str(&serde_json::Value::from(errors).to_string());
    }
    body.push('}');
    rest.telemetry
        .poll_answered(PollApi::Rest, kind, Some((count, body.len())));
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_every_rest_type() {
        assert_eq!(
            ResourceType::from_rest_path("discovery:clusters"),
            Some(ResourceType::Cluster)
        );
        assert_eq!(
            ResourceType::from_rest_path("discovery:scoped-routes"),
            Some(ResourceType::ScopedRoute)
        );
        assert_eq!(
            ResourceType::from_rest_path("discovery:extension_configs"),
            Some(ResourceType::ExtensionConfig)
        );
        assert_eq!(
            ResourceType::from_rest_path("discovery:virtual_hosts"),
            None
        );
        assert_eq!(ResourceType::from_rest_path("clusters"), None);
    }

    #[test]
    fn requests_parse_from_proto3_json() {
        let r = parse_request(
            br#"{"version_info":"v1","node":{"id":"n1","cluster":"c"},"resource_names":["a"],"typeUrl":"t"}"#,
        )
        .expect("parses");
        assert_eq!(r.version_info, "v1");
        assert_eq!(r.node.map(|n| n.id), Some("n1".to_string()));
        assert_eq!(r.resource_names, ["a"]);
        assert_eq!(r.type_url, "t");
        assert!(parse_request(b"{\"bogus\": 1}").is_err());
        assert!(parse_request(b"not json").is_err());
    }
}
