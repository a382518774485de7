//! One task per xDS stream (SotW or delta): requests, cache generations and heartbeat
//! timers in; responses out. The same loop drives both state machines through [`Machine`].
//!
//! Must not: decide what to send or when (the state machine does); it only moves inputs in
//! and responses out, and reports the stream to the fleet and telemetry.

use std::sync::Arc;

use bytes::Bytes;
use futures_channel::mpsc;
use tokio::sync::watch;
use tonic::Status;

use super::admission::{Admit, Bucket};
use super::body::{self, Outgoing, Requests, Unread};
use super::incoming::{ConnInfo, ConnSignals};
use super::peers::{PeerHandle, Peers};
use super::status;
use super::tls::IdentityPolicy;
use super::wire::{DeltaWire, SharedTails, SotwWire};
use super::MAX_RESPONSE_BYTES;
use crate::cache::{Cache, Generation};
use crate::config::selector::NodeFacts;
use crate::fleet::{Fleet, StreamHandle, StreamReport};
use crate::protocol::stream::Flavor;
use crate::protocol::{Delta, DeltaResponse, Ordering, Response, Sotw, UnknownResponse};
use crate::protocol::{Stream, Variant};
use crate::resource::{ResourceType, Secrets};
use crate::telemetry::{Limit, Sent, Telemetry};

/// Responses buffered per stream before the task waits for the client to read (the
/// channel holds one more per sender, and the task is its one sender).
const RESPONSE_BUFFER: usize = 15;

/// The response stream of a stream method: what its task wrote, for `body::ResponseBody`.
/// futures' channel, not tokio's: tokio's keeps 832 bytes a stream for as long as it lives
/// (its state, aligned to 128 bytes, and a block of 32 slots), futures' 208 (its state,
/// its sender's, and a node per message in flight; docs/benchmarks.md, "The stream's
/// channel and its task's future").
pub type Responses = mpsc::Receiver<Outgoing>;

/// A flavor of the protocol (SotW or delta) as the stream task writes it out: its wire type.
pub trait Machine: Flavor<Request: prost::Message + Default> {
    type Wire: Send + 'static;
    /// For logs: `sotw` or `delta`.
    const PROTOCOL: &'static str;
    /// The request's `node` field number (P1), whose repeats go undecoded
    /// ([`body::Requests::repeated_node`]).
    const NODE_FIELD: u32;
    /// The request's names and type URL field numbers, when a request's names that repeat
    /// those of the last one of its type go undecoded ([`body::Requests::repeated_names`]).
    const NAMES_FIELDS: Option<(u32, u32)>;

    /// `wire` framed ([`body::frame`]): the stream's bytes, and bytes shared with other
    /// streams to send after them, if any.
    fn frame(
        wire: &Self::Wire,
        max_message: usize,
        shared: &SharedTails,
    ) -> Result<(Bytes, Option<Bytes>), Status>;

    /// A response on the wire, with what to log and count of it.
    fn wire(response: Self::Response, control_plane: &str, secrets: Secrets)
        -> Written<Self::Wire>;
    /// A response for a type the server does not serve (P33) on the wire.
    fn wire_unknown(response: UnknownResponse, control_plane: &str) -> Written<Self::Wire>;
}

/// A response on the wire, and what to log and count of it.
pub struct Written<W> {
    pub wire: W,
    /// `None`: a type the server does not serve (P33).
    pub kind: Option<ResourceType>,
    pub version: String,
    /// Resources (delta: and removals).
    pub resources: usize,
    /// `NOT_FOUND` resource errors (P32).
    pub not_found: usize,
}

/// What is logged and counted of a response once it is sent: a [`Written`] without its wire.
struct Logged {
    kind: Option<ResourceType>,
    version: String,
    resources: usize,
    not_found: usize,
}

impl<W> Written<W> {
    fn log(self) -> Logged {
        Logged {
            kind: self.kind,
            version: self.version,
            resources: self.resources,
            not_found: self.not_found,
        }
    }
}

impl Machine for Sotw {
    type Wire = SotwWire;
    const PROTOCOL: &'static str = "sotw";
    /// `DiscoveryRequest.node`.
    const NODE_FIELD: u32 = 2;
    /// `DiscoveryRequest.resource_names` and `type_url`.
    const NAMES_FIELDS: Option<(u32, u32)> = Some((3, 4));

    fn frame(
        wire: &SotwWire,
        max_message: usize,
        shared: &SharedTails,
    ) -> Result<(Bytes, Option<Bytes>), Status> {
        wire.frame_shared(max_message, shared)
    }

    fn wire(r: Response, control_plane: &str, secrets: Secrets) -> Written<SotwWire> {
        let (kind, version) = (Some(r.kind), r.version.clone());
        let (resources, not_found) = (r.resources.len(), r.not_found.len());
        Written {
            wire: SotwWire::new(r, control_plane, secrets),
            kind,
            version,
            resources,
            not_found,
        }
    }

    fn wire_unknown(r: UnknownResponse, control_plane: &str) -> Written<SotwWire> {
        let (version, not_found) = (r.version.clone(), r.not_found.len());
        Written {
            wire: SotwWire::unknown(r, control_plane),
            kind: None,
            version,
            resources: 0,
            not_found,
        }
    }
}

impl Machine for Delta {
    type Wire = DeltaWire;
    const PROTOCOL: &'static str = "delta";
    /// `DeltaDiscoveryRequest.node`.
    const NODE_FIELD: u32 = 1;
    /// None: a delta request lists only what changes (P19).
    const NAMES_FIELDS: Option<(u32, u32)> = None;

    fn frame(
        wire: &DeltaWire,
        max_message: usize,
        shared: &SharedTails,
    ) -> Result<(Bytes, Option<Bytes>), Status> {
        wire.frame_shared(max_message, shared)
    }

    fn wire(r: DeltaResponse, control_plane: &str, secrets: Secrets) -> Written<DeltaWire> {
        let (kind, version) = (Some(r.kind), r.system_version.clone());
        let resources = r.resources.len() + r.removed.len();
        let not_found = r.not_found.len();
        Written {
            wire: DeltaWire::new(r, control_plane, secrets),
            kind,
            version,
            resources,
            not_found,
        }
    }

    fn wire_unknown(r: UnknownResponse, control_plane: &str) -> Written<DeltaWire> {
        let (version, not_found) = (r.version.clone(), r.not_found.len());
        Written {
            wire: DeltaWire::unknown(r, control_plane),
            kind: None,
            version,
            resources: not_found,
            not_found,
        }
    }
}

/// What every stream task shares: the cache, the fleet registry, the telemetry, the node
/// peers, the ordering, and the signal that ends streams on shutdown.
#[derive(Clone, Debug)]
pub struct StreamContext {
    pub cache: Arc<Cache>,
    pub fleet: Arc<Fleet>,
    pub telemetry: Telemetry,
    pub peers: Arc<Peers>,
    pub ordering: Ordering,
    /// Private key material to proxies, or not.
    pub secrets: Secrets,
    pub limits: super::Limits,
    /// `--max-new-streams-per-second`: the bucket every new stream takes a token from.
    pub admission: Option<Arc<std::sync::Mutex<Bucket>>>,
    /// `--node-identity`: how a client certificate must match the node it claims.
    pub identity: Option<Arc<IdentityPolicy>>,
    /// The server's shutdown: every stream ends.
    pub stop: crate::shutdown::Shutdown,
    /// What SotW responses of this server's streams share of their bytes.
    pub tails: Arc<SharedTails>,
}

/// Start the task that runs one stream, and return its response stream.
pub fn spawn<M: Machine>(
    variant: Variant,
    shared: StreamContext,
    requests: Requests<M::Request>,
    conn: ConnInfo,
) -> Responses {
    let (mut tx, rx) = mpsc::channel(RESPONSE_BUFFER);
    // A reconnect storm is let in at the admission rate; the excess is told at once to come
    // back, without a task.
    if let Some(bucket) = &shared.admission {
        let verdict = bucket
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(std::time::Instant::now());
        if let Admit::No(log) = verdict {
            let peer = conn
                .remote
                .map_or_else(|| "unknown".to_string(), |p| p.to_string());
            shared
                .telemetry
                .limit_reached(Limit::NewStreams { peer: &peer, log });
            // The channel is empty and has room: this cannot fail.
            let _ = tx.try_send(Outgoing::end(Status::resource_exhausted(
                "too many new streams at once (--max-new-streams-per-second): retry with backoff",
            )));
            return rx;
        }
    }
    tokio::spawn(run::<M>(variant, shared, requests, conn, tx));
    rx
}

/// The stream's task. What it is given is taken apart before its future is made: an
/// `async fn` would keep each argument twice (as given, and as taken apart), and the future
/// is every stream's largest allocation (docs/benchmarks.md, "Memory per proxy, against the
/// floor").
///
/// One function on purpose: its locals are the stream task's state, held across its awaits,
/// and the loop is the task's one event loop (requests, cache events, timers, siblings,
/// shutdown). Each helper future it awaited would add its own state to every stream's
/// allocation; the figures above were measured with the loop as it is. In a release build
/// the future is 2,416 bytes, 40 under what keeps its task in jemalloc's 2,560-byte class
/// (a task is its future and 104 bytes, aligned to 128): a local that lives across two
/// awaits has a place of its own in every state and can put every stream a class up, 512
/// bytes (`cargo +nightly rustc --release --lib -- -Zprint-type-sizes`). So does what the
/// future captures, which it keeps in every state: what the task only reads once is read
/// before the future is made.
fn run<M: Machine>(
    variant: Variant,
    shared: StreamContext,
    mut requests: Requests<M::Request>,
    conn: ConnInfo,
    mut tx: mpsc::Sender<Outgoing>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let peer = conn
        .remote
        .map_or_else(|| "unknown".to_string(), |p| p.to_string());
    let ConnInfo {
        identity: conn_identity,
        signals: conn_signals,
        remote: _,
    } = conn;
    let StreamContext {
        cache,
        fleet,
        telemetry,
        peers,
        ordering,
        secrets,
        limits,
        admission: _,
        identity,
        mut stop,
        tails,
    } = shared;
    // Made here, not in the future: what the future captures it keeps for its whole life,
    // in every state (the limits are 120 bytes; these are what it reads of them).
    let mut machine = Stream::<M>::with_ordering(variant, ordering)
        .with_name_limit(limits.max_names_per_stream)
        .with_response_limit(limits.max_response_bytes);
    let (first_request_timeout, stalled_timeout) =
        (limits.first_request_timeout, limits.stalled_stream_timeout);
    // A per-type stream shares what its client refers to with the node's other streams.
    let joins_siblings = variant != Variant::Aggregated && ordering.enabled;
    async move {
        // Private key material goes to a client whose certificate is bound to its node (checked
        // on its first request), or to every client with --insecure-serve-secrets.
        let mut secrets = secrets;
        let first_request_by = tokio::time::Instant::now() + first_request_timeout;
        // Boxed: per-type streams alone have siblings.
        let mut sibling: Option<Box<Sibling>> = None;
        let mut generations = cache.subscribe();
        // What the node's selectors read (id, cluster, metadata, locality), from its first
        // request: `Some` once the stream is named (its id is then `events.node()`).
        let mut facts: Option<Arc<NodeFacts>> = None;
        // Listed in the fleet, and counted, from the first request (which names the node) until
        // the end.
        let mut listed: Option<StreamHandle> = None;
        let mut counted = None;
        // The generation the machine has.
        let mut attached = 0;
        let mut events = telemetry.stream(M::PROTOCOL);
        // The status a stream ends with, sent after the loop: awaiting the send inside the
        // select's arms would keep the request (and the select's output) in the task's
        // future across it, some 1.1 KB of every stream's largest allocation.
        let mut end: Option<Status> = None;
        // A response sent since the client's last request, and when the wait for its answer
        // (an ACK, a NACK, any request) ends: past it the client is stuck
        // (`--stalled-stream-timeout`), and its connection is closed.
        let mut unanswered: Option<tokio::time::Instant> = None;
        let reason: String = loop {
            tokio::select! {
                message = requests.message() => match message {
                    Ok(Some(request)) => {
                        unanswered = None;
                        match machine.handle_request_repeating(request, requests.names_repeated()) {
                            Ok(Some(kind)) => requests.took_names(kind.index()),
                            Ok(None) => {}
                            Err(e) => {
                                if e.is_limit() {
                                    telemetry.limit_reached(Limit::NamesPerStream { peer: &peer, error: &e.to_string() });
                                }
                                end = Some(status::from_protocol(&e));
                                break format!("protocol error: {e}");
                            }
                        }
                        if facts.is_none() {
                            if let (Some(policy), Some(node)) = (&identity, machine.node()) {
                                match policy.check(conn_identity.as_deref(), &node.id, &node.cluster) {
                                    Ok(()) => secrets = Secrets::Serve,
                                    Err(why) => {
                                        telemetry.identity_mismatch("stream", &node.id, &peer, &why);
                                        end = Some(Status::permission_denied(format!(
                                            "node {:?}: {why}", node.id
                                        )));
                                        break format!("identity mismatch: {why}");
                                    }
                                }
                            }
                            if let Some(node) = machine.node() {
                                counted = Some(telemetry.stream_opened(node, &peer, variant, M::PROTOCOL));
                                events.named(&node.id);
                                let node_facts = Arc::new(NodeFacts::of(node));
                                facts = Some(Arc::clone(&node_facts));
                                listed = Some(fleet.open(StreamReport::new(
                                    node,
                                    Arc::clone(&node_facts),
                                    peer.clone(),
                                    variant.to_string(),
                                    M::PROTOCOL,
                                )));
                                if joins_siblings {
                                    let (handle, changes) = peers.join(&node.id);
                                    sibling = Some(Box::new(Sibling { handle, changes, published: u64::MAX }));
                                }
                                let generation = Arc::clone(
                                    generations.borrow_and_update().for_node(&node_facts),
                                );
                                attach(&mut machine, &generation, &node_facts);
                                attached = generation.number;
                            }
                        }
                    }
                    Ok(None) => break "closed by the client".into(),
                    // A request that does not decode: tell the client why and end this
                    // stream only. A transport that broke: the client went away.
                    Err(unread) => {
                        let reason = match &unread {
                            Unread::Bad(status) => format!("bad request: {}", status.message()),
                            Unread::Gone(status) => format!(
                                "the client went away (its connection ended: {})",
                                status.message()
                            ),
                        };
                        end = Some(unread.into_status());
                        break reason;
                    }
                },
                changed = generations.changed(), if facts.is_some() => {
                    if changed.is_err() {
                        break "server shutting down".into();
                    }
                    // A new generation, or a rollout promoted or aborted: what this node gets
                    // may not have changed (a rollout's candidate goes to canaries only).
                    let Some(node_facts) = &facts else {
                        continue;
                    };
                    let generation = Arc::clone(generations.borrow_and_update().for_node(node_facts));
                    if generation.number != attached {
                        attach(&mut machine, &generation, node_facts);
                        attached = generation.number;
                        fleet.generation_arrived(generation.number, generation.published);
                        events.generation_arrived(generation.published);
                    }
                }
                // A sibling stream's client refers to something new.
                changed = sibling_changed(&mut sibling) => {
                    if let (Ok(()), Some(sibling)) = (changed, &sibling) {
                        machine.handle_peer_references(sibling.handle.others());
                    }
                }
                // One timer for both (each a future in every stream's task): the first
                // request's deadline, and a heartbeat due (P25), which falls through to poll.
                _ = sleep_until(deadline(machine.poll_timeout(), facts.is_some(), first_request_by, unanswered)) => {
                    // A stream that never says who it is holds resources for nothing.
                    if facts.is_none() && tokio::time::Instant::now() >= first_request_by {
                        let waited = first_request_timeout;
                        telemetry.limit_reached(Limit::FirstRequestTimeout { peer: &peer, waited });
                        end = Some(Status::deadline_exceeded(format!(
                            "no request with a node within {waited:?} of opening the stream (--first-request-timeout)"
                        )));
                        break format!("no first request within {waited:?}");
                    }
                    if unanswered.is_some_and(|at| tokio::time::Instant::now() >= at) {
                        stalled(&telemetry, &peer, events.node(), stalled_timeout, conn_signals.as_deref());
                        break "the client answered none of its responses within --stalled-stream-timeout".into();
                    }
                }
                _ = stop.wait() => break "server shutting down".into(),
                // The connection reached --max-connection-age: the client reconnects (perhaps to
                // another replica) and presents what it holds.
                _ = connection_closing(conn_signals.as_deref()) => {
                    let _ = tx.try_send(Outgoing::end(Status::unavailable(
                        "the connection reached its maximum age (--max-connection-age); reconnect",
                    )));
                    break "the connection reached --max-connection-age".into();
                }
            }
            // A proxy back from an earlier stream said what it holds: look it up among the
            // recent generations of its node, so that its update is ordered from there.
            if let (true, Some(node_facts)) = (machine.wants_history(), &facts) {
                let serving = Arc::clone(&generations.borrow());
                let known: Vec<_> = serving
                    .known()
                    .map(|g| g.snapshot_for(node_facts))
                    .collect();
                machine.handle_history(&known);
            }
            while let Some(event) = machine.poll_event() {
                events.protocol(&event);
            }
            let mut gone: Option<&str> = None;
            loop {
                // The response, framed here, once, into a buffer of its size (and bytes
                // shared with other streams): the body only passes them on. What it was
                // framed from is dropped before the sends below: held across their awaits,
                // it (and the loop's own `Option` of it) sat in every state of the task's
                // future, 480 bytes of every stream's largest allocation (docs/benchmarks.md,
                // "The stream task's memory and the convergence count").
                let Some((framed, log)) = machine
                    // Tokio's clock (the same as the system's, but for tests on a paused clock).
                    .poll_response(tokio::time::Instant::now().into_std())
                    .map(|r| M::wire(r, super::CONTROL_PLANE_ID, secrets))
                    .or_else(|| {
                        machine
                            .poll_unknown()
                            .map(|r| M::wire_unknown(r, super::CONTROL_PLANE_ID))
                    })
                    .map(|written| {
                        let framed = M::frame(&written.wire, MAX_RESPONSE_BYTES, &tails);
                        (framed, written.log())
                    })
                else {
                    break;
                };
                let (framed, shared) = match framed {
                    Ok(framed) => framed,
                    Err(status) => {
                        events.too_large(log.kind, &log.version, log.resources, status.message());
                        end = Some(status);
                        gone = Some("a response too large to send");
                        break;
                    }
                };
                let bytes = framed.len() + shared.as_ref().map_or(0, Bytes::len) - body::PREFIX;
                // A client that does not read blocks this send; shutdown must not wait for it,
                // nor this server hold its responses for ever (--stalled-stream-timeout).
                // Biased: with room for both parts (this task alone sends), the send is done
                // at its first poll and the timer is never armed. One await for both cases:
                // what lives across two awaits sits in every state of the task's future.
                let sent = tokio::select! {
                    biased;
                    sent = send_parts(&mut tx, framed, shared) => sent,
                    _ = stop.wait() => {
                        gone = Some("server shutting down");
                        break;
                    }
                    _ = tokio::time::sleep(stalled_timeout) => {
                        stalled(&telemetry, &peer, events.node(), stalled_timeout, conn_signals.as_deref());
                        gone = Some("the client read none of its responses within --stalled-stream-timeout");
                        break;
                    }
                };
                if !sent {
                    gone = Some("closed by the client");
                    break;
                }
                unanswered.get_or_insert_with(|| tokio::time::Instant::now() + stalled_timeout);
                let sent = Sent {
                    resources: log.resources,
                    not_found: log.not_found,
                    bytes,
                };
                events.sent(log.kind, &log.version, sent);
            }
            // What deciding the responses did (plan steps), counted and logged now, not at the
            // next input.
            while let Some(event) = machine.poll_event() {
                events.protocol(&event);
            }
            if let (Some(sibling), Some((changes, references))) =
                (&mut sibling, machine.references())
            {
                if changes != sibling.published {
                    sibling.published = changes;
                    sibling.handle.publish(references);
                }
            }
            if let Some(listed) = &mut listed {
                listed.update(
                    attached,
                    ResourceType::ALL
                        .iter()
                        .filter_map(|&kind| machine.status(kind).map(|s| (kind, s))),
                    machine.plan_status(),
                    machine.unknown_status(),
                );
            }
            if let Some(why) = gone {
                break why.into();
            }
        };
        if let Some(status) = end {
            let _ = send(&mut tx, Outgoing::end(status)).await;
        }
        drop(listed);
        telemetry.stream_closed(counted, events.node(), &peer, variant, M::PROTOCOL, &reason);
    }
}

/// A stream whose client answered (or read) none of its responses within
/// `--stalled-stream-timeout`: counted and logged, and its connection told to close (what
/// it was sent may sit unread in the connection's buffers, where no status would reach it).
fn stalled(
    telemetry: &crate::telemetry::Telemetry,
    peer: &str,
    node: &str,
    waited: std::time::Duration,
    connection: Option<&ConnSignals>,
) {
    telemetry.limit_reached(Limit::StalledStream { peer, node, waited });
    if let Some(connection) = connection {
        connection.stall();
    }
}

/// Send a framed response, its own bytes then those shared with other streams; `false`
/// once the client has gone.
async fn send_parts(tx: &mut mpsc::Sender<Outgoing>, framed: Bytes, shared: Option<Bytes>) -> bool {
    if send(tx, Outgoing::message(framed)).await.is_err() {
        return false;
    }
    match shared {
        Some(shared) => send(tx, Outgoing::message(shared)).await.is_ok(),
        None => true,
    }
}

/// Send `message` once the channel has room; an error once the body has gone.
async fn send(tx: &mut mpsc::Sender<Outgoing>, message: Outgoing) -> Result<(), mpsc::SendError> {
    std::future::poll_fn(|cx| tx.poll_ready(cx)).await?;
    tx.start_send(message)
}

/// Resolves once the stream's connection is closing, or never.
async fn connection_closing(signals: Option<&ConnSignals>) {
    match signals {
        Some(signals) => signals.closing().await,
        None => std::future::pending().await,
    }
}

/// A per-type stream's link to its node's other streams (P30): what they refer to, and
/// what this one's client refers to, published to them.
struct Sibling {
    handle: PeerHandle,
    /// Moves when a sibling publishes.
    changes: watch::Receiver<u64>,
    /// What [`Stream::references`] last published was at this count of changes.
    published: u64,
}

/// Wait until a sibling stream publishes, or for ever without siblings.
async fn sibling_changed(
    sibling: &mut Option<Box<Sibling>>,
) -> Result<(), watch::error::RecvError> {
    match sibling {
        Some(sibling) => sibling.changes.changed().await,
        None => std::future::pending().await,
    }
}

/// When the stream's one timer fires: the machine's next timeout (a heartbeat due, P25),
/// the first request's deadline until the stream is named, and the end of the wait for
/// an answer to a response (`--stalled-stream-timeout`); `None`: no timer.
fn deadline(
    timeout: Option<std::time::Instant>,
    named: bool,
    first_request_by: tokio::time::Instant,
    unanswered: Option<tokio::time::Instant>,
) -> Option<tokio::time::Instant> {
    let timeout = timeout.map(tokio::time::Instant::from_std);
    let first_request = (!named).then_some(first_request_by);
    [timeout, first_request, unanswered]
        .into_iter()
        .flatten()
        .min()
}

/// Sleep until `at`, or for ever.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Give the machine the snapshot of its node (`facts`) in `generation`.
fn attach<M: Machine>(machine: &mut Stream<M>, generation: &Generation, facts: &NodeFacts) {
    if machine.node().is_some() {
        machine.handle_snapshot(generation.snapshot_for(facts));
    }
}
