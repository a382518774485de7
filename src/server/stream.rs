//! One task per SotW stream: requests and cache generations in, responses out.

use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::grpc::SotwResponses;
use super::status;
use super::wire::WireResponse;
use crate::cache::{Cache, Generation};
use crate::protocol::{Event, SotwStream, Variant};

/// Responses buffered per stream before the task waits for the client to read.
const RESPONSE_BUFFER: usize = 16;

/// Start the task that runs one SotW stream, and return its response stream.
pub fn spawn_sotw(
    variant: Variant,
    cache: Arc<Cache>,
    requests: Streaming<DiscoveryRequest>,
    peer: Option<SocketAddr>,
    stop: watch::Receiver<bool>,
) -> SotwResponses {
    let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
    tokio::spawn(run_sotw(variant, cache, requests, peer, stop, tx));
    Box::pin(ReceiverStream::new(rx))
}

async fn run_sotw(
    variant: Variant,
    cache: Arc<Cache>,
    mut requests: Streaming<DiscoveryRequest>,
    peer: Option<SocketAddr>,
    mut stop: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<WireResponse, Status>>,
) {
    let peer = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    let mut machine = SotwStream::new(variant);
    let control_plane: Arc<str> = super::control_plane_id().into();
    let mut generations = cache.subscribe();
    let mut node_id: Option<String> = None;
    let reason: String = loop {
        tokio::select! {
            message = requests.message() => match message {
                Ok(Some(request)) => {
                    if let Err(e) = machine.handle_request(request) {
                        let _ = tx.send(Err(status::from_protocol(&e))).await;
                        break format!("protocol error: {e}");
                    }
                    if node_id.is_none() {
                        if let Some(node) = machine.node() {
                            tracing::info!(node = %node.id, node_cluster = %node.cluster, %peer, stream = %variant, "xDS stream opened.");
                            node_id = Some(node.id.clone());
                            let generation = Arc::clone(&generations.borrow_and_update());
                            attach(&mut machine, &generation);
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
            }
            // The flag only ever goes from false to true (or its sender is gone): both mean stop.
            _ = stop.changed() => break "server shutting down".into(),
            _ = tx.closed() => break "closed by the client".into(),
        }
        let node = node_id.as_deref().unwrap_or("");
        while let Some(event) = machine.poll_event() {
            log_event(node, &event);
        }
        let mut gone = false;
        while let Some(response) = machine.poll_response() {
            tracing::debug!(node, r#type = %response.kind, version = %response.version, nonce = %response.nonce, resources = response.resources.len(), "Sending response.");
            let wire = WireResponse::new(response, Arc::clone(&control_plane));
            if tx.send(Ok(wire)).await.is_err() {
                gone = true;
                break;
            }
        }
        if gone {
            break "closed by the client".into();
        }
    };
    tracing::info!(node = node_id.as_deref().unwrap_or(""), %peer, stream = %variant, %reason, "xDS stream closed.");
}

/// Give the machine the snapshot of its node in `generation`.
fn attach(machine: &mut SotwStream, generation: &Generation) {
    if let Some(node) = machine.node() {
        let snapshot = generation.snapshot_for(&node.id, &node.cluster);
        machine.handle_snapshot(snapshot);
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
        Event::Stale { kind, nonce } => {
            tracing::debug!(node, r#type = %kind, nonce, "Ignored a request with a stale nonce.");
        }
    }
}
