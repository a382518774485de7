//! The unary `Fetch*` methods of the per-type services (P36): one `DiscoveryRequest` in, one
//! `DiscoveryResponse` out, the gRPC twin of REST-JSON polling.
//!
//! A fetch is answered as a REST poll is ([`Rest::poll`]): from the node's snapshot, with the
//! same node identity check and secret rules, the same hold (a request naming the current
//! version waits up to [`super::rest::REST_HOLD`] for a change), and the same metrics
//! (`switchyard_rest_polls_total{api="fetch"}`). gRPC has no "not modified": a fetch held
//! that long is answered with that same version. The response has no nonce (there is nothing
//! to ACK).
//!
//! Owns: the unary call. Must not: answer from state kept between calls; each call is
//! reported to the fleet as a REST poll is (`Rest::report`), so a node that fetches shows in
//! `/status`.

use std::convert::Infallible;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, BoxFuture, Bytes, StdError};
use tonic::Status;

use super::incoming::ConnInfo;
use super::rest::Rest;
use super::wire::WireResponse;
use super::{MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES};
use crate::protocol::Response;
use crate::resource::ResourceType;
use crate::telemetry::PollApi;

/// Serve one `Fetch*` call for `kind`.
pub fn call<B>(
    rest: Rest,
    kind: ResourceType,
    request: http::Request<B>,
) -> BoxFuture<http::Response<Body>, Infallible>
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    Box::pin(async move {
        let codec = tonic_prost::ProstCodec::<WireResponse, DiscoveryRequest>::default();
        let mut grpc = tonic::server::Grpc::new(codec)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .max_encoding_message_size(MAX_RESPONSE_BYTES);
        Ok(grpc.unary(Fetch { rest, kind }, request).await)
    })
}

/// The unary service of one type.
struct Fetch {
    rest: Rest,
    kind: ResourceType,
}

impl tonic::server::UnaryService<DiscoveryRequest> for Fetch {
    type Response = WireResponse;
    type Future = BoxFuture<tonic::Response<WireResponse>, Status>;

    fn call(&mut self, request: tonic::Request<DiscoveryRequest>) -> Self::Future {
        let (rest, kind) = (self.rest.clone(), self.kind);
        Box::pin(async move {
            let conn = request.extensions().get::<ConnInfo>().cloned();
            let request = request.into_inner();
            // P3: a per-type service serves its type only.
            if !request.type_url.is_empty() && request.type_url != kind.type_url() {
                return Err(Status::invalid_argument(format!(
                    "this service serves {}, not type_url {:?}",
                    kind.type_url(),
                    request.type_url
                )));
            }
            let node = request
                .node
                .clone()
                .ok_or_else(|| Status::invalid_argument("a Fetch request must carry `node`"))?;
            rest.check_identity(conn.as_ref(), &node, "Fetch call")
                .map_err(|why| Status::permission_denied(format!("node {:?}: {why}", node.id)))?;
            let polled = rest.poll(kind, &request, &node).await;
            rest.report(
                PollApi::Fetch,
                kind,
                &request,
                &node,
                conn.as_ref(),
                &polled,
            );
            let (count, unchanged) = (polled.resources.len(), polled.unchanged);
            let response = Response {
                kind,
                version: polled.version,
                nonce: String::new(),
                resources: polled.resources,
                wrap_ttl: false,
                not_found: polled.not_found,
            };
            let wire = WireResponse::new(response, super::CONTROL_PLANE_ID, rest.secrets);
            let bytes = prost::Message::encoded_len(&wire);
            rest.telemetry.poll_answered(
                PollApi::Fetch,
                kind,
                (!unchanged).then_some((count, bytes)),
            );
            Ok(tonic::Response::new(wire))
        })
    }
}
