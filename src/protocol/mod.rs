//! The xDS protocol as a pure state machine: no sockets, no clocks, no tokio, no tonic.
//!
//! Owns: per stream and per type, subscriptions (named, wildcard, legacy wildcard), nonces,
//! versions, ACK/NACK bookkeeping, and the decision of what may be sent next. The tonic
//! services (`server`) are thin adapters around it.
//!
//! Call order (in the vocabulary of quinn-proto): feed inputs with `handle_request` (each
//! message from the client) and `handle_snapshot` (each new snapshot of the cache for this
//! stream's node); then drain outputs with `poll_response` until it returns `None`, and
//! `poll_event` for what happened (ACKs, NACKs), for logs and metrics.
//!
//! Rules are cited by number from `shared/xds-protocol.md` (P1..P31).

mod sotw;
mod subscription;

use std::fmt;
use std::sync::Arc;

pub use sotw::SotwStream;
pub use subscription::Subscription;

use crate::resource::{Resource, ResourceType};

/// A response to send: the server writes it to the wire (each resource's bytes as they are,
/// encoded once per snapshot, never per client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub kind: ResourceType,
    /// `version_info`: the version of the type's resources for this node (P13).
    pub version: String,
    /// Fresh per response (P2).
    pub nonce: String,
    pub resources: Vec<Arc<Resource>>,
}

/// Which service a stream arrived on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// An aggregated stream (ADS): every type, each an independent sub-stream.
    Aggregated,
    /// A per-type service: only this type.
    Single(ResourceType),
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Variant::Aggregated => f.write_str("ADS"),
            Variant::Single(t) => write!(f, "{t}"),
        }
    }
}

/// A client broke the protocol. The stream ends with a gRPC status (mapped in
/// `server::status`); the server and other streams carry on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// P1: the first request on a stream must identify the node.
    #[error("the first request on a stream must carry `node`")]
    MissingNode,
    /// P1: a later request carried a different node.
    #[error("`node` changed on the stream (first {first:?}, now {now:?}); open a new stream")]
    NodeChanged { first: String, now: String },
    /// P3: a type this server does not serve.
    #[error("unknown type_url {0:?}")]
    UnknownType(String),
    /// P3: a per-type service asked for another type.
    #[error("this service serves {expected}, not type_url {got:?}")]
    WrongType { expected: &'static str, got: String },
}

/// What the client has of one type, as far as the server knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SyncState {
    /// Nothing sent yet on this stream.
    #[default]
    NotSent,
    /// Sent, no ACK or NACK yet.
    Sent { nonce: String, version: String },
    /// The client ACKed this version (P4).
    Acked { version: String },
    /// The client rejected `rejected_version` (P5), and still runs `accepted_version`.
    Nacked {
        nonce: String,
        rejected_version: String,
        accepted_version: String,
        error: String,
    },
}

/// Something that happened on a stream, for logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Acked {
        kind: ResourceType,
        version: String,
    },
    Nacked {
        kind: ResourceType,
        rejected_version: String,
        error: String,
    },
    /// P6: a request with an old nonce, ignored.
    Stale {
        kind: ResourceType,
        nonce: String,
    },
}
