//! The gRPC services, as tower services routing each method path to a stream task.
//!
//! Not the generated `*Server` wrappers: those fix the response type to the prost
//! `DiscoveryResponse`, which would mean copying every resource into a fresh `Any` per client.
//! Here the SotW methods answer with [`WireResponse`] and the Delta methods with
//! [`WireDeltaResponse`], written from bytes encoded once per snapshot. Paths, codec and
//! limits are otherwise what the generated code does.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::watch;
use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, BoxFuture, Service, StdError};
use tonic::server::{NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use super::status;
use super::stream::{spawn, Machine, Responses, Shared};
use super::{MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES};
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
    B: HttpBody + Send + 'static,
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

/// Serve one streaming call with state machine `M`.
fn stream_method<M, B>(
    server: XdsServer,
    variant: Variant,
    request: http::Request<B>,
) -> BoxFuture<http::Response<Body>, Infallible>
where
    M: Machine,
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    let handler = Handler::<M> {
        server,
        variant,
        machine: PhantomData,
    };
    Box::pin(async move {
        let codec = SmallBuffers::<M::Wire, M::Request>(PhantomData);
        let mut grpc = tonic::server::Grpc::new(codec)
            .apply_max_message_size_config(Some(MAX_REQUEST_BYTES), Some(MAX_RESPONSE_BYTES));
        Ok(grpc.streaming(handler, request).await)
    })
}

/// How large each stream's encode and decode buffers start (tonic's default is 8 KiB each).
/// They grow to the largest message a stream carries; most xDS requests and many responses
/// are far smaller, and a fleet holds 10,000s of idle streams.
const CODEC_BUFFER: usize = 1024;

/// The prost codec with [`CODEC_BUFFER`]-sized buffers.
struct SmallBuffers<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> tonic::codec::Codec for SmallBuffers<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = tonic_prost::ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstCodec::<T, U>::raw_decoder(settings())
    }
}

fn settings() -> tonic::codec::BufferSettings {
    // The yield threshold stays tonic's default (32 KiB).
    tonic::codec::BufferSettings::new(CODEC_BUFFER, 32 * 1024)
}

struct Handler<M> {
    server: XdsServer,
    variant: Variant,
    machine: PhantomData<fn() -> M>,
}

impl<M: Machine> StreamingService<M::Request> for Handler<M> {
    type Response = M::Wire;
    type ResponseStream = Responses<M::Wire>;
    type Future = BoxFuture<Response<Responses<M::Wire>>, Status>;

    fn call(&mut self, request: Request<Streaming<M::Request>>) -> Self::Future {
        let conn = request
            .extensions()
            .get::<super::incoming::ConnInfo>()
            .cloned()
            .unwrap_or_default();
        let responses = spawn::<M>(
            self.variant,
            self.server.shared.clone(),
            request.into_inner(),
            conn,
        );
        Box::pin(async move { Ok(Response::new(responses)) })
    }
}
