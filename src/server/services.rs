//! The tonic service traits, implemented by one [`XdsServer`] that hands every stream to
//! [`super::stream::spawn_sotw`]. Thin on purpose: no protocol logic here.

use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_server::ClusterDiscoveryService;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryService;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_server::EndpointDiscoveryService;
use envoy_types::pb::envoy::service::extension::v3::extension_config_discovery_service_server::ExtensionConfigDiscoveryService;
use envoy_types::pb::envoy::service::listener::v3::listener_discovery_service_server::ListenerDiscoveryService;
use envoy_types::pb::envoy::service::route::v3::route_discovery_service_server::RouteDiscoveryService;
use envoy_types::pb::envoy::service::route::v3::scoped_routes_discovery_service_server::ScopedRoutesDiscoveryService;
use envoy_types::pb::envoy::service::route::v3::virtual_host_discovery_service_server::VirtualHostDiscoveryService;
use envoy_types::pb::envoy::service::runtime::v3::runtime_discovery_service_server::RuntimeDiscoveryService;
use envoy_types::pb::envoy::service::secret::v3::secret_discovery_service_server::SecretDiscoveryService;
use futures::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

use super::status;
use super::stream::{spawn_sotw, SotwResponses};
use crate::cache::Cache;
use crate::protocol::Variant;
use crate::resource::ResourceType;

/// The response stream of a Delta method (none yet: they answer UNIMPLEMENTED).
pub type DeltaResponses =
    Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;

/// Every xDS service, over one cache.
#[derive(Clone, Debug)]
pub struct XdsServer {
    cache: Arc<Cache>,
    stop: watch::Receiver<bool>,
}

impl XdsServer {
    pub fn new(cache: Arc<Cache>, stop: watch::Receiver<bool>) -> XdsServer {
        XdsServer { cache, stop }
    }

    fn open_sotw(
        &self,
        variant: Variant,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Response<SotwResponses> {
        let peer = request.remote_addr();
        Response::new(spawn_sotw(
            variant,
            Arc::clone(&self.cache),
            request.into_inner(),
            peer,
            self.stop.clone(),
        ))
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for XdsServer {
    type StreamAggregatedResourcesStream = SotwResponses;
    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<SotwResponses>, Status> {
        Ok(self.open_sotw(Variant::Aggregated, request))
    }

    type DeltaAggregatedResourcesStream = DeltaResponses;
    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaResponses>, Status> {
        Err(status::delta_unimplemented())
    }
}

/// Implement one per-type service: its SotW stream on the state machine, its Delta and
/// Fetch methods as UNIMPLEMENTED.
macro_rules! per_type_service {
    ($trait:ident, $kind:expr,
     $stream_ty:ident, $stream_fn:ident, $delta_ty:ident, $delta_fn:ident, $fetch_fn:ident) => {
        #[tonic::async_trait]
        impl $trait for XdsServer {
            type $stream_ty = SotwResponses;
            async fn $stream_fn(
                &self,
                request: Request<Streaming<DiscoveryRequest>>,
            ) -> Result<Response<SotwResponses>, Status> {
                Ok(self.open_sotw(Variant::Single($kind), request))
            }

            type $delta_ty = DeltaResponses;
            async fn $delta_fn(
                &self,
                _request: Request<Streaming<DeltaDiscoveryRequest>>,
            ) -> Result<Response<DeltaResponses>, Status> {
                Err(status::delta_unimplemented())
            }

            async fn $fetch_fn(
                &self,
                _request: Request<DiscoveryRequest>,
            ) -> Result<Response<DiscoveryResponse>, Status> {
                Err(status::fetch_unimplemented())
            }
        }
    };
}

per_type_service!(
    ListenerDiscoveryService,
    ResourceType::Listener,
    StreamListenersStream,
    stream_listeners,
    DeltaListenersStream,
    delta_listeners,
    fetch_listeners
);
per_type_service!(
    RouteDiscoveryService,
    ResourceType::Route,
    StreamRoutesStream,
    stream_routes,
    DeltaRoutesStream,
    delta_routes,
    fetch_routes
);
per_type_service!(
    ScopedRoutesDiscoveryService,
    ResourceType::ScopedRoute,
    StreamScopedRoutesStream,
    stream_scoped_routes,
    DeltaScopedRoutesStream,
    delta_scoped_routes,
    fetch_scoped_routes
);
per_type_service!(
    ClusterDiscoveryService,
    ResourceType::Cluster,
    StreamClustersStream,
    stream_clusters,
    DeltaClustersStream,
    delta_clusters,
    fetch_clusters
);
per_type_service!(
    EndpointDiscoveryService,
    ResourceType::Endpoint,
    StreamEndpointsStream,
    stream_endpoints,
    DeltaEndpointsStream,
    delta_endpoints,
    fetch_endpoints
);
per_type_service!(
    SecretDiscoveryService,
    ResourceType::Secret,
    StreamSecretsStream,
    stream_secrets,
    DeltaSecretsStream,
    delta_secrets,
    fetch_secrets
);
per_type_service!(
    RuntimeDiscoveryService,
    ResourceType::Runtime,
    StreamRuntimeStream,
    stream_runtime,
    DeltaRuntimeStream,
    delta_runtime,
    fetch_runtime
);
per_type_service!(
    ExtensionConfigDiscoveryService,
    ResourceType::ExtensionConfig,
    StreamExtensionConfigsStream,
    stream_extension_configs,
    DeltaExtensionConfigsStream,
    delta_extension_configs,
    fetch_extension_configs
);

/// VHDS exists only as a Delta service (P24); it answers UNIMPLEMENTED until delta lands.
#[tonic::async_trait]
impl VirtualHostDiscoveryService for XdsServer {
    type DeltaVirtualHostsStream = DeltaResponses;
    async fn delta_virtual_hosts(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaResponses>, Status> {
        Err(status::delta_unimplemented())
    }
}
