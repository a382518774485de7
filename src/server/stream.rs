//! One task per xDS stream (SotW or delta): requests, cache generations and heartbeat
//! timers in; responses out. The same loop drives both state machines through [`Machine`].

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use super::status;
use super::wire::{WireDeltaResponse, WireResponse};
use crate::cache::{Cache, Generation, Snapshot};
use crate::fleet::{Fleet, StreamHandle, StreamReport};
use crate::metrics::{observe, StreamLabels, StreamMetrics, TypeLabels};
use crate::protocol::{DeltaStream, Event, ProtocolError, SotwStream, TypeStatus, Variant};
use crate::resource::ResourceType;

/// Responses buffered per stream before the task waits for the client to read.
const RESPONSE_BUFFER: usize = 16;

/// The response stream of a stream method.
pub type Responses<W> = Pin<Box<dyn Stream<Item = Result<W, Status>> + Send>>;

/// A protocol state machine, as the stream task sees it.
pub trait Machine: Send + 'static {
    type Request: prost::Message + Default + Send + 'static;
    type Wire: prost::Message + Send + 'static;
    /// For logs: `sotw` or `delta`.
    const PROTOCOL: &'static str;

    fn new(variant: Variant) -> Self;
    fn handle_request(&mut self, request: Self::Request) -> Result<(), ProtocolError>;
    fn handle_snapshot(&mut self, snapshot: Arc<Snapshot>);
    fn node(&self) -> Option<&Node>;
    /// The next response on the wire, with what to log of it: type, version, resource count.
    fn poll_wire(
        &mut self,
        now: Instant,
        control_plane: &Arc<str>,
    ) -> Option<(Self::Wire, ResourceType, String, usize)>;
    fn poll_event(&mut self) -> Option<Event>;
    /// When to call `poll_wire` again without any input (heartbeats).
    fn poll_timeout(&self) -> Option<Instant>;
    /// What the server knows of `kind`, if the client asked for it.
    fn status(&self, kind: ResourceType) -> Option<TypeStatus>;
}

impl Machine for SotwStream {
    type Request = DiscoveryRequest;
    type Wire = WireResponse;
    const PROTOCOL: &'static str = "sotw";

    fn new(variant: Variant) -> Self {
        SotwStream::new(variant)
    }
    fn handle_request(&mut self, request: DiscoveryRequest) -> Result<(), ProtocolError> {
        SotwStream::handle_request(self, request)
    }
    fn handle_snapshot(&mut self, snapshot: Arc<Snapshot>) {
        SotwStream::handle_snapshot(self, snapshot)
    }
    fn node(&self) -> Option<&Node> {
        SotwStream::node(self)
    }
    fn poll_wire(
        &mut self,
        now: Instant,
        control_plane: &Arc<str>,
    ) -> Option<(WireResponse, ResourceType, String, usize)> {
        let r = self.poll_response(now)?;
        let (kind, version, count) = (r.kind, r.version.clone(), r.resources.len());
        Some((
            WireResponse::new(r, Arc::clone(control_plane)),
            kind,
            version,
            count,
        ))
    }
    fn poll_event(&mut self) -> Option<Event> {
        SotwStream::poll_event(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        SotwStream::poll_timeout(self)
    }
    fn status(&self, kind: ResourceType) -> Option<TypeStatus> {
        SotwStream::status(self, kind)
    }
}

impl Machine for DeltaStream {
    type Request = DeltaDiscoveryRequest;
    type Wire = WireDeltaResponse;
    const PROTOCOL: &'static str = "delta";

    fn new(variant: Variant) -> Self {
        DeltaStream::new(variant)
    }
    fn handle_request(&mut self, request: DeltaDiscoveryRequest) -> Result<(), ProtocolError> {
        DeltaStream::handle_request(self, request)
    }
    fn handle_snapshot(&mut self, snapshot: Arc<Snapshot>) {
        DeltaStream::handle_snapshot(self, snapshot)
    }
    fn node(&self) -> Option<&Node> {
        DeltaStream::node(self)
    }
    fn poll_wire(
        &mut self,
        now: Instant,
        control_plane: &Arc<str>,
    ) -> Option<(WireDeltaResponse, ResourceType, String, usize)> {
        let r = self.poll_response(now)?;
        let (kind, version) = (r.kind, r.system_version.clone());
        let count = r.resources.len() + r.removed.len();
        Some((
            WireDeltaResponse::new(r, Arc::clone(control_plane)),
            kind,
            version,
            count,
        ))
    }
    fn poll_event(&mut self) -> Option<Event> {
        DeltaStream::poll_event(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        DeltaStream::poll_timeout(self)
    }
    fn status(&self, kind: ResourceType) -> Option<TypeStatus> {
        DeltaStream::status(self, kind)
    }
}

/// Start the task that runs one stream, and return its response stream.
pub fn spawn<M: Machine>(
    variant: Variant,
    cache: Arc<Cache>,
    fleet: Arc<Fleet>,
    requests: Streaming<M::Request>,
    peer: Option<SocketAddr>,
    stop: watch::Receiver<bool>,
) -> Responses<M::Wire> {
    let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
    tokio::spawn(run::<M>(variant, cache, fleet, requests, peer, stop, tx));
    Box::pin(ReceiverStream::new(rx))
}

async fn run<M: Machine>(
    variant: Variant,
    cache: Arc<Cache>,
    fleet: Arc<Fleet>,
    mut requests: Streaming<M::Request>,
    peer: Option<SocketAddr>,
    mut stop: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<M::Wire, Status>>,
) {
    let peer = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    let protocol = M::PROTOCOL;
    let mut machine = M::new(variant);
    let control_plane: Arc<str> = super::control_plane_id().into();
    let mut generations = cache.subscribe();
    let mut node_id: Option<String> = None;
    // Listed in the fleet from the first request (which names the node) until the end.
    let mut listed: Option<StreamHandle> = None;
    // The generation the machine has, and when the newest one was published (until its
    // first response is written: the push latency).
    let mut attached = 0;
    let mut push_from: Option<Instant> = None;
    // When each type's latest response was written (for the ACK latency).
    let mut sent_at: [Option<Instant>; ResourceType::ALL.len()] = Default::default();
    let metrics = &fleet.metrics;
    let reason: String = loop {
        let timeout = machine.poll_timeout();
        tokio::select! {
            message = requests.message() => match message {
                Ok(Some(request)) => {
                    if let Err(e) = machine.handle_request(request) {
                        let _ = tx.send(Err(status::from_protocol(&e))).await;
                        break format!("protocol error: {e}");
                    }
                    if node_id.is_none() {
                        if let Some(node) = machine.node() {
                            tracing::info!(node = %node.id, node_cluster = %node.cluster, %peer, stream = %variant, protocol, features = ?node.client_features, "xDS stream opened.");
                            node_id = Some(node.id.clone());
                            listed = Some(fleet.open(StreamReport {
                                node_id: node.id.clone(),
                                node_cluster: node.cluster.clone(),
                                user_agent: node.user_agent_name.clone(),
                                user_agent_version: user_agent_version(node),
                                client_features: node.client_features.clone(),
                                peer: peer.clone(),
                                stream: variant.to_string(),
                                protocol,
                                connected_since: std::time::SystemTime::now(),
                                types: Default::default(),
                                generation: 0,
                            }, StreamLabels::new(protocol, variant)));
                            let generation = Arc::clone(&generations.borrow_and_update());
                            attach(&mut machine, &generation);
                            attached = generation.number;
                        }
                    }
                }
                Ok(None) => break "closed by the client".into(),
                // A request that does not decode (or a broken transport): tell the client
                // why, if it is still there, and end this stream only.
                Err(status) => {
                    let reason = format!("bad request: {}", status.message());
                    let _ = tx.send(Err(status)).await;
                    break reason;
                }
            },
            changed = generations.changed(), if node_id.is_some() => {
                if changed.is_err() {
                    break "server shutting down".into();
                }
                let generation = Arc::clone(&generations.borrow_and_update());
                attach(&mut machine, &generation);
                attached = generation.number;
                fleet.generation_arrived(generation.number, generation.published);
                push_from = Some(generation.published);
            }
            // A heartbeat is due (P25): fall through to poll.
            _ = sleep_until(timeout), if timeout.is_some() => {}
            // The flag only ever goes from false to true (or its sender is gone): both mean stop.
            _ = stop.changed() => break "server shutting down".into(),
            _ = tx.closed() => break "closed by the client".into(),
        }
        let node = node_id.as_deref().unwrap_or("");
        while let Some(event) = machine.poll_event() {
            log_event(node, &event);
            count_event(metrics, &event, &mut sent_at);
        }
        let mut gone = false;
        while let Some((wire, kind, version, resources)) =
            machine.poll_wire(Instant::now(), &control_plane)
        {
            tracing::debug!(node, r#type = %kind, version, resources, protocol, "Sending response.");
            let bytes = prost::Message::encoded_len(&wire);
            if tx.send(Ok(wire)).await.is_err() {
                gone = true;
                break;
            }
            metrics.sent(kind, resources, bytes);
            sent_at[kind.index()] = Some(Instant::now());
            if let Some(published) = push_from.take() {
                observe(&metrics.push_latency, published.elapsed());
            }
        }
        if let Some(listed) = &listed {
            listed.update(
                attached,
                ResourceType::ALL
                    .iter()
                    .filter_map(|&kind| machine.status(kind).map(|s| (kind, s))),
            );
        }
        if gone {
            break "closed by the client".into();
        }
    };
    drop(listed);
    tracing::info!(node = node_id.as_deref().unwrap_or(""), %peer, stream = %variant, protocol, %reason, "xDS stream closed.");
}

/// `node.user_agent_version`, or the build version's `major.minor.patch` (Envoy sends that).
fn user_agent_version(node: &Node) -> String {
    use envoy_types::pb::envoy::config::core::v3::node::UserAgentVersionType;
    match &node.user_agent_version_type {
        Some(UserAgentVersionType::UserAgentVersion(v)) => v.clone(),
        Some(UserAgentVersionType::UserAgentBuildVersion(b)) => b
            .version
            .as_ref()
            .map(|v| format!("{}.{}.{}", v.major_number, v.minor_number, v.patch))
            .unwrap_or_default(),
        None => String::new(),
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}

/// Give the machine the snapshot of its node in `generation`.
fn attach<M: Machine>(machine: &mut M, generation: &Generation) {
    if let Some(node) = machine.node() {
        let snapshot = generation.snapshot_for(&node.id, &node.cluster);
        machine.handle_snapshot(snapshot);
    }
}

/// Count ACKs and NACKs, and time ACKs from their response.
fn count_event(
    metrics: &StreamMetrics,
    event: &Event,
    sent_at: &mut [Option<Instant>; ResourceType::ALL.len()],
) {
    match event {
        Event::Acked { kind, .. } => {
            metrics.acks.get_or_create(&TypeLabels::new(*kind)).inc();
            if let Some(at) = sent_at[kind.index()].take() {
                observe(&metrics.ack_latency, at.elapsed());
            }
        }
        Event::Nacked { kind, .. } => {
            metrics.nacks.get_or_create(&TypeLabels::new(*kind)).inc();
            sent_at[kind.index()] = None;
        }
        Event::Subscribed { .. } | Event::Stale { .. } => {}
    }
}

fn log_event(node: &str, event: &Event) {
    match event {
        Event::Acked { kind, version } => {
            tracing::debug!(node, r#type = %kind, version, "ACK.");
        }
        Event::Nacked {
            kind,
            rejected_version,
            error,
        } => {
            tracing::warn!(node, r#type = %kind, rejected_version, error, "NACK: the proxy rejected the configuration and keeps its previous one.");
        }
        Event::Subscribed {
            kind,
            wildcard,
            subscribed,
            unsubscribed,
        } => {
            tracing::debug!(node, r#type = %kind, wildcard, subscribed = ?subscribed, unsubscribed = ?unsubscribed, "Subscription changed.");
        }
        Event::Stale { kind, nonce } => {
            tracing::debug!(node, r#type = %kind, nonce, "Ignored a request with a stale nonce.");
        }
    }
}
