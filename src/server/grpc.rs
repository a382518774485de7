//! The gRPC services, as tower services routing each method path to a stream task.
//!
//! Not the generated `*Server` wrappers: those fix the response type to the prost
//! `DiscoveryResponse`, which would mean copying every resource into a fresh `Any` per client.
//! Here the SotW methods answer with [`WireResponse`](super::WireResponse) and the Delta
//! methods with [`WireDeltaResponse`](super::WireDeltaResponse), written from bytes encoded
//! once per snapshot; requests and responses each go through a buffer of their size
//! (`server::body`) rather than tonic's per-stream buffers. Paths and limits are otherwise
//! what the generated code does.
//!
//! Must not: decide anything per stream (each method's task does, in `stream`).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, BoxFuture, Bytes, Service, StdError};
use tonic::Status;

use super::body::{Requests, ResponseBody};
use super::stream::{spawn, Machine, StreamContext};
use super::MAX_REQUEST_BYTES;
use crate::cache::Cache;
use crate::fleet::Fleet;
use crate::protocol::{Delta, Sotw, Variant};
use crate::resource::ResourceType;
use crate::telemetry::Telemetry;

/// What every xDS service shares: the cache, and the signal that ends streams on shutdown.
#[derive(Clone, Debug)]
pub struct XdsServer {
    shared: StreamContext,
}

impl XdsServer {
    /// What a `Fetch*` call is answered from: the REST poll's state (P36).
    fn rest(&self) -> super::rest::Rest {
        let s = &self.shared;
        super::rest::Rest {
            cache: Arc::clone(&s.cache),
            fleet: Arc::clone(&s.fleet),
            telemetry: s.telemetry.clone(),
            stop: s.stop.clone(),
            secrets: s.secrets,
            identity: s.identity.clone(),
        }
    }

    pub fn new(
        cache: Arc<Cache>,
        fleet: Arc<Fleet>,
        telemetry: Telemetry,
        options: &super::ServeOptions,
        stop: crate::shutdown::Shutdown,
    ) -> XdsServer {
        XdsServer {
            shared: StreamContext {
                cache,
                fleet,
                telemetry,
                peers: Arc::default(),
                ordering: options.ordering,
                secrets: options.secrets,
                limits: options.limits,
                admission: options.limits.new_streams.map(|rate| {
                    Arc::new(std::sync::Mutex::new(super::admission::Bucket::new(
                        rate,
                        std::time::Instant::now(),
                    )))
                }),
                identity: options.identity.clone(),
                stop,
                tails: Arc::default(),
            },
        }
    }
}

/// One gRPC service: its full name, its SotW and Delta streaming methods and what they
/// serve. A per-type service's unary `Fetch*` method (P36) is named after its SotW method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub name: &'static str,
    pub sotw_method: Option<&'static str>,
    pub delta_method: &'static str,
    pub variant: Variant,
}

/// Every xDS service: ADS, then one per resource type, from the table in `resource`.
pub fn specs() -> impl Iterator<Item = Spec> {
    let ads = Spec {
        name: "envoy.service.discovery.v3.AggregatedDiscoveryService",
        sotw_method: Some("StreamAggregatedResources"),
        delta_method: "DeltaAggregatedResources",
        variant: Variant::Aggregated,
    };
    std::iter::once(ads).chain(ResourceType::ALL.into_iter().map(|kind| {
        let facts = kind.facts();
        Spec {
            name: facts.service,
            sotw_method: facts.sotw_method,
            delta_method: facts.delta_method,
            variant: Variant::Single(kind),
        }
    }))
}

/// Every xDS service, routed by path (`/<service>/<method>`), added to `router`.
pub fn route(router: axum::Router, server: &XdsServer) -> axum::Router {
    specs().fold(router, |router, spec| {
        router.route_service(
            &format!("/{}/{{*method}}", spec.name),
            Grpc {
                server: server.clone(),
                spec,
            },
        )
    })
}

/// The tower service of one gRPC service.
#[derive(Clone, Debug)]
pub struct Grpc {
    server: XdsServer,
    spec: Spec,
}

impl<B> Service<http::Request<B>> for Grpc
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let spec = self.spec;
        let method = request
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(spec.name))
            .and_then(|p| p.strip_prefix('/'))
            .unwrap_or_default()
            .to_string();
        if spec.sotw_method == Some(method.as_str()) {
            return stream_method::<Sotw, B>(self.server.clone(), spec.variant, request);
        }
        if spec.delta_method == method {
            return stream_method::<Delta, B>(self.server.clone(), spec.variant, request);
        }
        // P36: `FetchClusters` beside `StreamClusters`, and so on.
        if let (Variant::Single(kind), Some(fetched)) = (spec.variant, method.strip_prefix("Fetch"))
        {
            if spec.sotw_method.and_then(|m| m.strip_prefix("Stream")) == Some(fetched) {
                return super::fetch::call(self.server.rest(), kind, request);
            }
        }
        let status = Status::unimplemented(format!("{} has no method {method:?}", spec.name));
        Box::pin(async move { Ok(status.into_http()) })
    }
}

/// Serve one streaming call with state machine `M`: requests read by [`Requests`], responses
/// written by [`ResponseBody`]. This is what tonic's `Grpc::streaming` does with no
/// compression enabled, except for the buffers (see `server::body`).
fn stream_method<M, B>(
    server: XdsServer,
    variant: Variant,
    request: http::Request<B>,
) -> BoxFuture<http::Response<Body>, Infallible>
where
    M: Machine,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    let response = match refuse_compressed(request.headers()) {
        Err(status) => status.into_http(),
        Ok(()) => {
            let conn = request
                .extensions()
                .get::<super::incoming::ConnInfo>()
                .cloned()
                .unwrap_or_default();
            let mut requests = Requests::new(Body::new(request.into_body()), MAX_REQUEST_BYTES)
                .repeated_node(M::NODE_FIELD);
            if let Some((names, type_url)) = M::NAMES_FIELDS {
                requests = requests.repeated_names(names, type_url, &TYPE_URLS);
            }
            let responses = spawn::<M>(variant, server.shared, requests, conn);
            let mut response = http::Response::new(Body::new(ResponseBody::new(responses)));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            response
        }
    };
    Box::pin(async move { Ok(response) })
}

/// Every served type's URL, which requests name (see `body::Requests::repeated_names`).
static TYPE_URLS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    ResourceType::ALL
        .into_iter()
        .map(ResourceType::type_url)
        .collect()
});

/// Requests must not be compressed: no compression is enabled, so a `grpc-encoding` other
/// than `identity` is refused with `UNIMPLEMENTED`, naming the one encoding accepted, as tonic
/// refuses it.
fn refuse_compressed(headers: &http::HeaderMap) -> Result<(), Status> {
    match headers.get("grpc-encoding") {
        None => Ok(()),
        Some(v) if v.as_bytes() == b"identity" => Ok(()),
        Some(v) => {
            let mut status = Status::unimplemented(format!(
                "Content is compressed with `{}` which isn't supported",
                String::from_utf8_lossy(v.as_bytes())
            ));
            status.metadata_mut().insert(
                "grpc-accept-encoding",
                tonic::metadata::MetadataValue::from_static("identity"),
            );
            Err(status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_service_and_method_in_the_table_exists_in_envoys_api() {
        let pool = crate::config::descriptors::pool();
        let specs: Vec<Spec> = specs().collect();
        assert_eq!(specs.len(), 1 + ResourceType::ALL.len());
        for spec in specs {
            let service = pool
                .get_service_by_name(spec.name)
                .unwrap_or_else(|| panic!("{} is not in Envoy's API", spec.name));
            let method = |name: &str| {
                service
                    .methods()
                    .find(|m| m.name() == name)
                    .unwrap_or_else(|| panic!("{} has no method {name}", spec.name))
            };
            let delta = method(spec.delta_method);
            assert!(delta.is_client_streaming() && delta.is_server_streaming());
            assert_eq!(
                delta.output().full_name(),
                "envoy.service.discovery.v3.DeltaDiscoveryResponse"
            );
            match spec.sotw_method {
                Some(sotw) => {
                    // P36: the unary twin, named after the SotW method.
                    if spec.variant != Variant::Aggregated {
                        let fetch = method(&sotw.replacen("Stream", "Fetch", 1));
                        assert!(!fetch.is_client_streaming() && !fetch.is_server_streaming());
                        assert_eq!(
                            fetch.output().full_name(),
                            "envoy.service.discovery.v3.DiscoveryResponse"
                        );
                    }
                    let sotw = method(sotw);
                    assert!(sotw.is_client_streaming() && sotw.is_server_streaming());
                    assert_eq!(
                        sotw.output().full_name(),
                        "envoy.service.discovery.v3.DiscoveryResponse"
                    );
                }
                // P24, P34: VHDS and LEDS are delta only.
                None => assert!(
                    [ResourceType::VirtualHost, ResourceType::LbEndpoint]
                        .map(Variant::Single)
                        .contains(&spec.variant),
                    "{spec:?}"
                ),
            }
        }
    }

    #[test]
    fn compressed_requests_are_refused_naming_the_encoding_accepted() {
        let mut headers = http::HeaderMap::new();
        assert!(refuse_compressed(&headers).is_ok());
        headers.insert("grpc-encoding", http::HeaderValue::from_static("identity"));
        assert!(refuse_compressed(&headers).is_ok());
        headers.insert("grpc-encoding", http::HeaderValue::from_static("gzip"));
        let refused = refuse_compressed(&headers).expect_err("gzip is not enabled");
        assert_eq!(refused.code(), tonic::Code::Unimplemented);
        assert!(refused.message().contains("`gzip`"), "{refused:?}");
        assert_eq!(
            refused
                .metadata()
                .get("grpc-accept-encoding")
                .map(|v| v.to_str().ok()),
            Some(Some("identity"))
        );
    }
}
