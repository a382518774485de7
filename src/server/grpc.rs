//! The gRPC services, as tower services routing each method path to a stream task.
//!
//! Not the generated `*Server` wrappers: those fix the response type to the prost
//! `DiscoveryResponse`, which would mean copying every resource into a fresh `Any` per client.
//! Here the SotW methods answer with [`WireResponse`](super::WireResponse) and the Delta
//! methods with [`WireDeltaResponse`](super::WireDeltaResponse), written from bytes encoded
//! once per snapshot; requests and responses each go through a buffer of their size
//! (`server::body`) rather than tonic's per-stream buffers. Paths and limits are otherwise
//! what the generated code does.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::watch;
use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, BoxFuture, Bytes, Service, StdError};
use tonic::server::NamedService;
use tonic::Status;

use super::body::{Requests, ResponseBody};
use super::status;
use super::stream::{spawn, Machine, Shared};
use super::MAX_REQUEST_BYTES;
use crate::cache::Cache;
use crate::fleet::Fleet;
use crate::protocol::{Delta, Sotw, Variant};
use crate::resource::ResourceType;

/// What every xDS service shares: the cache, and the signal that ends streams on shutdown.
#[derive(Clone, Debug)]
pub struct XdsServer {
    shared: Shared,
}

impl XdsServer {
    pub fn new(
        cache: Arc<Cache>,
        fleet: Arc<Fleet>,
        options: &super::ServeOptions,
        stop: watch::Receiver<bool>,
    ) -> XdsServer {
        XdsServer {
            shared: Shared {
                cache,
                fleet,
                peers: Arc::default(),
                ordering: options.ordering,
                secrets: options.secrets,
                limits: options.limits,
                identity: options.identity.clone(),
                stop,
            },
        }
    }
}

/// One gRPC service: its full name, its SotW and Delta streaming methods and what they
/// serve. Every other method of the service (Fetch*) answers UNIMPLEMENTED.
pub trait Spec: Send + Sync + 'static {
    const NAME: &'static str;
    const SOTW_METHOD: Option<&'static str>;
    const DELTA_METHOD: &'static str;
    const VARIANT: Variant;
}

macro_rules! spec {
    ($marker:ident, $name:literal, $method:expr, $delta:literal, $variant:expr) => {
        #[derive(Debug)]
        pub struct $marker;
        impl Spec for $marker {
            const NAME: &'static str = $name;
            const SOTW_METHOD: Option<&'static str> = $method;
            const DELTA_METHOD: &'static str = $delta;
            const VARIANT: Variant = $variant;
        }
    };
}

spec!(
    Ads,
    "envoy.service.discovery.v3.AggregatedDiscoveryService",
    Some("StreamAggregatedResources"),
    "DeltaAggregatedResources",
    Variant::Aggregated
);
spec!(
    Lds,
    "envoy.service.listener.v3.ListenerDiscoveryService",
    Some("StreamListeners"),
    "DeltaListeners",
    Variant::Single(ResourceType::Listener)
);
spec!(
    Rds,
    "envoy.service.route.v3.RouteDiscoveryService",
    Some("StreamRoutes"),
    "DeltaRoutes",
    Variant::Single(ResourceType::Route)
);
spec!(
    Srds,
    "envoy.service.route.v3.ScopedRoutesDiscoveryService",
    Some("StreamScopedRoutes"),
    "DeltaScopedRoutes",
    Variant::Single(ResourceType::ScopedRoute)
);
// VHDS exists only as a Delta service (P24).
spec!(
    Vhds,
    "envoy.service.route.v3.VirtualHostDiscoveryService",
    None,
    "DeltaVirtualHosts",
    Variant::Single(ResourceType::VirtualHost)
);
spec!(
    Cds,
    "envoy.service.cluster.v3.ClusterDiscoveryService",
    Some("StreamClusters"),
    "DeltaClusters",
    Variant::Single(ResourceType::Cluster)
);
spec!(
    Eds,
    "envoy.service.endpoint.v3.EndpointDiscoveryService",
    Some("StreamEndpoints"),
    "DeltaEndpoints",
    Variant::Single(ResourceType::Endpoint)
);
spec!(
    Sds,
    "envoy.service.secret.v3.SecretDiscoveryService",
    Some("StreamSecrets"),
    "DeltaSecrets",
    Variant::Single(ResourceType::Secret)
);
spec!(
    Rtds,
    "envoy.service.runtime.v3.RuntimeDiscoveryService",
    Some("StreamRuntime"),
    "DeltaRuntime",
    Variant::Single(ResourceType::Runtime)
);
spec!(
    Ecds,
    "envoy.service.extension.v3.ExtensionConfigDiscoveryService",
    Some("StreamExtensionConfigs"),
    "DeltaExtensionConfigs",
    Variant::Single(ResourceType::ExtensionConfig)
);

/// The tower service of one gRPC service.
#[derive(Debug)]
pub struct Grpc<S> {
    server: XdsServer,
    spec: PhantomData<fn() -> S>,
}

impl<S> Grpc<S> {
    pub fn new(server: XdsServer) -> Grpc<S> {
        Grpc {
            server,
            spec: PhantomData,
        }
    }
}

impl<S> Clone for Grpc<S> {
    fn clone(&self) -> Self {
        Grpc::new(self.server.clone())
    }
}

impl<S: Spec> NamedService for Grpc<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Grpc<S>
where
    S: Spec,
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
        let method = request
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|p| p.strip_prefix(S::NAME))
            .and_then(|p| p.strip_prefix('/'))
            .unwrap_or_default()
            .to_string();
        if S::SOTW_METHOD == Some(method.as_str()) {
            return stream_method::<Sotw, B>(self.server.clone(), S::VARIANT, request);
        }
        if S::DELTA_METHOD == method {
            return stream_method::<Delta, B>(self.server.clone(), S::VARIANT, request);
        }
        let status = if method.starts_with("Fetch") {
            status::fetch_unimplemented()
        } else {
            Status::unimplemented(format!("{} has no method {method:?}", S::NAME))
        };
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
            let requests = Requests::new(Body::new(request.into_body()), MAX_REQUEST_BYTES);
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
