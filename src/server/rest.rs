//! REST-JSON polling (`api_type: REST`): `POST /v3/discovery:<type>` on the xDS port, beside
//! gRPC, over HTTP/1.1 and HTTP/2.
//!
//! Each request is a `DiscoveryRequest` in proto3 JSON; the answer is the `DiscoveryResponse`
//! for the node's snapshot and the requested names, in proto3 JSON. A request whose
//! `version_info` is the current version is held until the type changes for that node or
//! [`REST_HOLD`] passes, then answered `304 Not Modified` (Envoy's "no update"), so a client
//! polling with a short refresh delay never gets a loop of unchanged answers.

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
use tokio::sync::watch;

use crate::cache::Cache;
use crate::config::descriptors;
use crate::protocol::Subscription;
use crate::redact::Secrets;
use crate::resource::ResourceType;
use crate::telemetry::Telemetry;

/// How long a request for the version the client already has is held before `304`. Below
/// Envoy's default REST `request_timeout` (1 s), so the answer arrives before Envoy gives up.
pub const REST_HOLD: Duration = Duration::from_millis(500);

/// What the REST routes read.
#[derive(Clone, Debug)]
pub struct Rest {
    pub cache: Arc<Cache>,
    pub telemetry: Telemetry,
    pub stop: watch::Receiver<bool>,
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
    if let Some(policy) = &rest.identity {
        let conn = extensions.get::<super::incoming::ConnInfo>();
        let identity = conn.and_then(|c| c.identity.as_deref());
        if let Err(why) = policy.check(identity, &node.id, &node.cluster) {
            let peer = conn
                .and_then(|c| c.remote)
                .map_or_else(|| "unknown".to_string(), |p| p.to_string());
            rest.telemetry
                .identity_mismatch("REST poll", &node.id, &peer, &why);
            return (
                StatusCode::FORBIDDEN,
                format!("node {:?}: {why}\n", node.id),
            )
                .into_response();
        }
    }
    let mut subscription = Subscription::default();
    subscription.apply_sotw(&request.resource_names);

    let facts = crate::config::selector::NodeFacts::of(&node);
    let mut generations = rest.cache.subscribe();
    let mut stop = rest.stop.clone();
    let deadline = tokio::time::Instant::now() + REST_HOLD;
    loop {
        let generation = std::sync::Arc::clone(generations.borrow_and_update().for_node(&facts));
        let snapshot = generation.snapshot_for(&facts);
        let current = snapshot.get(kind);
        // The version of what this poll selects, as a SotW stream would give it (P13).
        let selected = subscription.select(current);
        let version = crate::protocol::sotw_version(&subscription, current, &selected);
        if version != request.version_info {
            return answer(&rest, kind, &version, selected);
        }
        tokio::select! {
            changed = generations.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep_until(deadline) => break,
            _ = stop.changed() => break,
        }
    }
    rest.telemetry.poll_answered(kind, None);
    StatusCode::NOT_MODIFIED.into_response()
}

/// A resource as the proto3 JSON of an `Any`: its fields plus `"@type"`.
fn render_any(r: &crate::resource::Resource, secrets: Secrets) -> Option<String> {
    let mut json = descriptors::resource_json(r, r.body_for(secrets))?;
    json.as_object_mut()?
        .insert("@type".into(), r.kind.type_url().into());
    Some(json.to_string())
}

/// proto3 JSON -> `DiscoveryRequest`, through the descriptor pool.
pub fn parse_request(body: &[u8]) -> Result<DiscoveryRequest, String> {
    let descriptor = descriptors::message_named("envoy.service.discovery.v3.DiscoveryRequest")
        .ok_or("the DiscoveryRequest descriptor is missing")?;
    let mut json = serde_json::Deserializer::from_slice(body);
    let message = DynamicMessage::deserialize(descriptor, &mut json).map_err(|e| e.to_string())?;
    json.end().map_err(|e| e.to_string())?;
    message.transcode_to().map_err(|e| e.to_string())
}

/// The `DiscoveryResponse` JSON for `selected`, at `version`.
fn answer(
    rest: &Rest,
    kind: ResourceType,
    version: &str,
    selected: Vec<&std::sync::Arc<crate::resource::Resource>>,
) -> Response {
    // Each resource's JSON is rendered once and shared by every poll (as gRPC shares the
    // encoded bytes); the answer is assembled around it.
    let count = selected.len();
    let mut body = String::from("{\"version_info\":");
    body.push_str(&serde_json::Value::from(version).to_string());
    body.push_str(",\"resources\":[");
    for (i, r) in selected.into_iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        // The server's policy is fixed for its life, so one cached rendering serves all.
        body.push_str(r.any_json(|r| render_any(r, rest.secrets)).unwrap_or("{}"));
    }
    body.push_str("],\"type_url\":");
    body.push_str(&serde_json::Value::from(kind.type_url()).to_string());
    body.push_str(",\"control_plane\":{\"identifier\":");
    body.push_str(&serde_json::Value::from(super::control_plane_id()).to_string());
    body.push_str("}}");
    rest.telemetry
        .poll_answered(kind, Some((count, body.len())));
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
