//! The xDS protocol as a pure state machine: no sockets, no clocks, no tokio, no tonic.
//!
//! Owns: per stream and per type, subscriptions (named, wildcard, legacy wildcard), nonces,
//! versions, ACK/NACK bookkeeping, and the decision of what may be sent next. The tonic
//! services (`server`) are thin adapters around it.
//!
//! One stream core ([`Stream`], in `stream`) serves both variants: it owns the node, the type
//! checks, nonces, ACK/NACK and the sync state per type, the events, and the make-before-break
//! [`plan`] (which snapshot the types serve, step by step, P28-P30). A [`stream::Flavor`]
//! adds what differs: [`SotwStream`] (State of the World: whole name lists, what the client
//! was given) and [`DeltaStream`] (incremental: subscribe/unsubscribe, name -> version), with
//! the subscription logic ([`Subscription`]) shared. The one state beyond a stream is the
//! table through which streams asking for the same names share one name set (in
//! `subscription`; SotW's, and delta's of up to 1,024 names): it changes what is allocated,
//! never what is decided. A stream keeps per-type state only for the types its client asked
//! for (`per_type`).
//!
//! Call order (in the vocabulary of quinn-proto): feed inputs with `handle_request` (each
//! message from the client) and `handle_snapshot` (each new snapshot of the cache for this
//! stream's node), and, when `wants_history` says a client back from an earlier stream said
//! what it holds, `handle_history` (the node's recent snapshots, to find it among); then
//! drain outputs with `poll_response(now)` until it returns `None`, and
//! `poll_event` for what happened (ACKs, NACKs, subscription changes, plan steps), for logs
//! and metrics. `poll_timeout` says when to call `poll_response` again with no new input (TTL
//! refreshes, a plan step's time-out); time comes in only as that `now` argument.
//!
//! Rules are cited by number (P1..P36), as `docs/protocol.md` states them.

mod delta;
mod per_type;
pub mod plan;
pub mod poll;
mod sotw;
pub mod stream;
mod subscription;
mod unknown;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;

pub use delta::{Delta, DeltaResource, DeltaResources, DeltaResponse, DeltaStream};
pub use plan::{Ordering, PlanEvent, PlanStatus};
pub use poll::PollState;
pub use sotw::{Sotw, SotwStream};
pub use stream::Stream;
pub use subscription::{DeltaChange, Subscription};
pub use unknown::{
    UnknownNames, UnknownRequest, UnknownResponse, UnknownStatus, MAX_UNKNOWN_TYPES,
    UNKNOWN_TYPE_VERSION,
};

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
    pub resources: Resources,
    /// Put each resource that has a TTL in a `Resource` wrapper carrying it (P26): only for
    /// clients announcing both `xds.config.resource-in-sotw` and TTL support.
    pub wrap_ttl: bool,
    /// Names the client subscribes to that do not exist for its node: each goes out as a
    /// `ResourceError` `NOT_FOUND` (P32), so the client need not wait out its timer (P31).
    pub not_found: Vec<String>,
}

/// The resources of a SotW response: chosen for this client, or a whole selection as the
/// streams that select the same share it (`cache::Selection::resources`), which the wire
/// writes from one buffer found by the list. Either reads as a slice.
#[derive(Clone, Debug)]
pub enum Resources {
    Each(Vec<Arc<Resource>>),
    Shared(Arc<[Arc<Resource>]>),
}

impl std::ops::Deref for Resources {
    type Target = [Arc<Resource>];

    fn deref(&self) -> &[Arc<Resource>] {
        match self {
            Resources::Each(each) => each,
            Resources::Shared(list) => list,
        }
    }
}

impl Default for Resources {
    fn default() -> Self {
        Resources::Each(Vec::new())
    }
}

impl From<Vec<Arc<Resource>>> for Resources {
    fn from(each: Vec<Arc<Resource>>) -> Self {
        Resources::Each(each)
    }
}

impl FromIterator<Arc<Resource>> for Resources {
    fn from_iter<I: IntoIterator<Item = Arc<Resource>>>(iter: I) -> Self {
        Resources::Each(iter.into_iter().collect())
    }
}

impl IntoIterator for Resources {
    type Item = Arc<Resource>;
    type IntoIter = std::vec::IntoIter<Arc<Resource>>;

    fn into_iter(self) -> Self::IntoIter {
        let each = match self {
            Resources::Each(each) => each,
            Resources::Shared(list) => list.to_vec(),
        };
        each.into_iter()
    }
}

impl<'a> IntoIterator for &'a Resources {
    type Item = &'a Arc<Resource>;
    type IntoIter = std::slice::Iter<'a, Arc<Resource>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for Resources {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Resources {}

impl PartialEq<Vec<Arc<Resource>>> for Resources {
    fn eq(&self, other: &Vec<Arc<Resource>>) -> bool {
        **self == **other
    }
}

/// The message of a `NOT_FOUND` resource error (P32).
pub const NOT_FOUND_MESSAGE: &str = "no such resource for this node";

/// The client features (`node.client_features`) the server acts on (P25, P26, P27).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientFeatures {
    /// `xds.config.supports-resource-ttl`: accepts `Resource.ttl` and heartbeats (P25).
    pub resource_ttl: bool,
    /// `xds.config.resource-in-sotw`: accepts resources wrapped in `Resource` in SotW (P26).
    pub resource_in_sotw: bool,
}

/// The feature a client announces when it accepts TTLs (P25).
pub const FEATURE_RESOURCE_TTL: &str = "xds.config.supports-resource-ttl";
/// The feature a client announces when it accepts `Resource` wrapping in SotW (P26).
pub const FEATURE_RESOURCE_IN_SOTW: &str = "xds.config.resource-in-sotw";

impl ClientFeatures {
    /// The features `node` announces.
    pub fn of(node: &Node) -> ClientFeatures {
        let has = |f: &str| node.client_features.iter().any(|c| c == f);
        ClientFeatures {
            resource_ttl: has(FEATURE_RESOURCE_TTL),
            resource_in_sotw: has(FEATURE_RESOURCE_IN_SOTW),
        }
    }
}

/// The ClusterLoadAssignments that clusters sent anew warm with (P28), in name order, each
/// once.
fn rewarm_names<'a>(clusters: impl IntoIterator<Item = &'a Arc<Resource>>) -> Vec<&'a str> {
    let mut names: Vec<&str> = clusters
        .into_iter()
        .filter_map(|c| c.warms_with.as_deref())
        .collect();
    if !names.is_sorted() {
        names.sort_unstable();
    }
    names.dedup();
    names
}

/// When a heartbeat for a resource with this TTL is due after it was last sent: a third of
/// the TTL, so two heartbeats may be late before the client drops the resource.
pub fn heartbeat_interval(ttl: Duration) -> Duration {
    ttl / 3
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
    /// P3: an aggregated stream's request must name its type (a type the server does not
    /// serve is answered as not existing, P33).
    #[error("a request on an aggregated stream must name its type_url")]
    NoType,
    /// P33: more distinct types the server does not serve than one stream may ask for.
    #[error(
        "the stream asks for more than {limit} types this server does not serve (the latest \
         {type_url:?})"
    )]
    TooManyUnknownTypes { type_url: String, limit: usize },
    /// P3: a per-type service asked for another type.
    #[error("this service serves {expected}, not type_url {got:?}")]
    WrongType { expected: &'static str, got: String },
    /// The stream's subscriptions name more resources than the server allows.
    #[error(
        "the stream subscribes to {names} resource names, more than the server's limit of \
         {limit} (--max-names-per-stream)"
    )]
    TooManyNames { names: usize, limit: usize },
}

impl ProtocolError {
    /// Whether the client went past a limit (rather than broke the protocol).
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            ProtocolError::TooManyNames { .. } | ProtocolError::TooManyUnknownTypes { .. }
        )
    }
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
        /// The proxy's error text, and what the rejected response changed (behind one
        /// pointer: every stream keeps a state per type).
        nack: Arc<Nack>,
    },
}

/// What a client said of a response it rejected, and what that response changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    pub error: String,
    /// What the rejected response added or changed against what the client held: where the
    /// cause is.
    pub changed: Arc<[Changed]>,
    /// What the client still runs of the type, by content, when the stream knows it.
    pub runs: Option<Arc<Runs>>,
}

/// What a client that rejected a response still runs of its type, as the stream knows it:
/// the resources it holds (name order), and how it subscribes, with which the same content
/// is found in another snapshot ([`Runs::served_by`]): whatever changed in between, the
/// newest generation that serves it exactly is the way back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runs {
    pub resources: Vec<Arc<Resource>>,
    pub subscription: Subscription,
}

impl Runs {
    /// Whether `snapshot` gives a client so subscribed exactly what it runs: the same names,
    /// at the same versions.
    pub fn served_by(&self, snapshot: &crate::cache::TypeSnapshot) -> bool {
        let selected = self.subscription.select(snapshot);
        selected.resources.len() == self.resources.len()
            && selected
                .resources
                .iter()
                .zip(&self.resources)
                .all(|(a, b)| a.name == b.name && a.version == b.version)
    }
}

/// A resource a response added or changed against what the client held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    pub resource: Arc<Resource>,
    /// The client held no version of it before.
    pub added: bool,
}

impl Changed {
    /// What `brought` (a response's resources, with what the client had of each name)
    /// changed.
    fn of(brought: &[(Arc<Resource>, plan::Previous)]) -> Arc<[Changed]> {
        brought
            .iter()
            .map(|(resource, previous)| Changed {
                resource: Arc::clone(resource),
                added: matches!(previous, plan::Previous::Nothing),
            })
            .collect()
    }
}

impl SyncState {
    /// The version of the latest response, if any was sent.
    pub fn sent_version(&self) -> Option<&str> {
        match self {
            SyncState::NotSent => None,
            SyncState::Sent { version, .. } | SyncState::Acked { version } => Some(version),
            SyncState::Nacked {
                rejected_version, ..
            } => Some(rejected_version),
        }
    }

    /// The nonce of the latest response the state names, if any.
    pub fn nonce(&self) -> Option<&str> {
        match self {
            SyncState::Sent { nonce, .. } | SyncState::Nacked { nonce, .. } => Some(nonce),
            SyncState::NotSent | SyncState::Acked { .. } => None,
        }
    }
}

/// What the server knows of one type on one stream, for operators (`/status`, CSDS).
/// Borrowed from the stream where it can be: a stream reports after every input, and
/// mostly nothing changed, so nothing needs copying (docs/benchmarks.md, "Memory per proxy, against the floor").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeStatus<'a> {
    pub state: std::borrow::Cow<'a, SyncState>,
    /// The version the client last ACKed; empty before its first ACK.
    pub acked_version: std::borrow::Cow<'a, str>,
    /// Moved by every change to the rest of this status on its stream (never compared
    /// across streams or types): a report of the same revision says the same.
    pub revision: u32,
    /// The size of the latest response when it was over the response limit and could not be
    /// split (a SotW response of the whole set, or one resource alone over it).
    pub oversized: Option<usize>,
    /// What the client subscribes to by name and the latest response said does not exist
    /// (P32).
    pub not_found: Vec<String>,
}

/// The default of `--max-response-bytes`: gRPC's default receive limit, which Envoy's
/// `max_receive_message_length` and most gRPC clients keep.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 << 20;

/// What a response's framing takes besides its resources (type URL, version, nonce, control
/// plane), kept free under the limit.
const RESPONSE_OVERHEAD: usize = 1024;

/// About what one resource adds to an encoded response: its `Any`, the name and version a
/// delta `Resource` (or a TTL wrapper) carries, and the field tags and lengths.
fn response_cost(resource: &Resource) -> usize {
    resource.any.len() + resource.name.len() + resource.version.len() + 16
}

/// How many of `resources` (in order) go in one response under `limit` bytes: at least one,
/// so that a resource larger than the limit alone still goes (whole, and reported).
fn fitting<'a>(resources: impl Iterator<Item = &'a Resource>, limit: usize) -> usize {
    let budget = limit.saturating_sub(RESPONSE_OVERHEAD);
    let mut used = 0usize;
    let mut count = 0;
    for r in resources {
        used = used.saturating_add(response_cost(r));
        if used > budget && count > 0 {
            break;
        }
        count += 1;
    }
    count
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
        /// What the rejected response added or changed against what the client held.
        changed: Arc<[Changed]>,
    },
    /// A delta client changed its subscription (names newly subscribed and unsubscribed;
    /// phantoms left out).
    Subscribed {
        kind: ResourceType,
        wildcard: bool,
        subscribed: Vec<String>,
        unsubscribed: Vec<String>,
    },
    /// P6: a request with an old nonce, ignored.
    Stale {
        kind: ResourceType,
        nonce: String,
    },
    /// The make-before-break plan moved (P30).
    Plan(PlanEvent),
    /// A response over the response limit was split: `sent` resources go now, `left` in the
    /// next responses, each after the client's answer to the one before.
    Split {
        kind: ResourceType,
        sent: usize,
        left: usize,
    },
    /// A response over the response limit that cannot be split went whole: a SotW response
    /// of the whole set (to a wildcard, or of LDS or CDS; P10: a resource left out would be
    /// deleted), or one resource alone over the limit. The client may refuse it.
    Oversized {
        kind: ResourceType,
        bytes: usize,
        limit: usize,
    },
    /// P33: the client asked for a type the server does not serve, for the first time on
    /// this stream; it is answered as a set of resources that do not exist.
    UnknownType {
        type_url: String,
    },
}

/// The first request's node (P1), kept for the stream's life: without its extensions,
/// which are most of an Envoy's node (516 of them, 60 KB, from Envoy 1.40) and which
/// nothing reads; they are kept as a digest, so that a later node is still compared whole.
#[derive(Debug)]
struct FirstNode {
    node: Node,
    extensions: u64,
}

impl FirstNode {
    /// `node`, its extensions taken out and digested.
    fn of(mut node: Node) -> FirstNode {
        let extensions = extensions_digest(&std::mem::take(&mut node.extensions));
        FirstNode { node, extensions }
    }
}

/// A digest of a node's extensions, from their encoding (an order or a field changed is
/// another digest). Unkeyed: a collision a client made would only let a changed node pass
/// for its first one, which identifies the stream anyway.
fn extensions_digest(extensions: &[envoy_types::pb::envoy::config::core::v3::Extension]) -> u64 {
    use prost::Message;
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = foldhash::quality::FixedState::default().build_hasher();
    let mut encoded = Vec::new();
    for e in extensions {
        encoded.clear();
        e.encode(&mut encoded).unwrap_or_default();
        hasher.write(&encoded);
        hasher.write_usize(encoded.len());
    }
    hasher.finish()
}

/// P1: keep the first request's node; a later one may omit it but not change it.
fn check_node(first: &mut Option<FirstNode>, now: Option<Node>) -> Result<(), ProtocolError> {
    match (&*first, now) {
        (None, None) => Err(ProtocolError::MissingNode),
        (None, Some(node)) => {
            *first = Some(FirstNode::of(node));
            Ok(())
        }
        (Some(first), Some(mut now)) => {
            let extensions = std::mem::take(&mut now.extensions);
            if first.node != now || first.extensions != extensions_digest(&extensions) {
                return Err(ProtocolError::NodeChanged {
                    first: first.node.id.clone(),
                    now: now.id,
                });
            }
            Ok(())
        }
        (Some(_), None) => Ok(()),
    }
}

/// What a request's type is.
enum RequestType {
    Served(ResourceType),
    /// P33: on an aggregated stream, a type the server does not serve.
    Unknown,
}

/// P3: the type a request on `variant` names.
fn request_type(variant: Variant, type_url: &str) -> Result<RequestType, ProtocolError> {
    let kind = match variant {
        // A per-type request may leave type_url empty: the service names the type.
        Variant::Single(kind) if type_url.is_empty() || type_url == kind.type_url() => Ok(kind),
        Variant::Single(kind) => Err(ProtocolError::WrongType {
            expected: kind.type_url(),
            got: type_url.to_string(),
        }),
        Variant::Aggregated if type_url.is_empty() => Err(ProtocolError::NoType),
        Variant::Aggregated => match ResourceType::from_type_url(type_url) {
            Some(kind) => Ok(kind),
            None => return Ok(RequestType::Unknown),
        },
    }?;
    Ok(RequestType::Served(kind))
}

/// The types a stream on `variant` serves, in send order (P30).
fn served(variant: Variant) -> &'static [ResourceType] {
    let all: &'static [ResourceType] = &ResourceType::ALL;
    match variant {
        Variant::Aggregated => &ResourceType::SEND_ORDER,
        Variant::Single(kind) => &all[kind.index()..=kind.index()],
    }
}
