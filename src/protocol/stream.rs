//! The stream core: what SotW and delta streams share, written once.
//!
//! A [`Stream`] is a [`Core`] and a [`Flavor`]. The core owns the node (P1), the type checks
//! (P3), the client's features, per type the sync state (nonces, the response in flight, ACK
//! and NACK, P2/P4/P5/P17), the events, and the [`Planner`] that decides which snapshot the
//! types serve (the cache's newest, or a make-before-break step towards it, P28-P30). The
//! flavor owns what differs: how a request subscribes and answers (SotW's whole name lists,
//! delta's subscribe/unsubscribe), what the client has (SotW: the selection it was last
//! given; delta: name -> version), and how a response is built from the target snapshot.
//!
//! Call order (quinn-proto's vocabulary): `handle_request` for each message from the client
//! and `handle_snapshot` for each new snapshot of the stream's node (and `handle_history`
//! when `wants_history`: a client back from an earlier stream); then `poll_response(now)`
//! until `None`, and `poll_event`. `poll_timeout` says when to call `poll_response` again with
//! no new input (TTL refreshes and heartbeats, a plan step's time-out). No IO, no clocks.
//!
//! Must not: know how a flavor subscribes or builds a response (SotW's and delta's own), or
//! how the planner chooses its steps (`plan`).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::Node;

use super::per_type::{empty, PerType};
use super::plan::{Ordering, PlanStatus, Planner, Previous, Progress, Rejected, Rejection};
use super::unknown::Unknowns;
use super::{ClientFeatures, Event, ProtocolError, SyncState, TypeStatus, Variant};
use super::{RequestType, UnknownRequest, UnknownResponse, UnknownStatus};
use crate::cache::{Snapshot, TypeSnapshot};
use crate::resource::{Reference, Resource, ResourceType};

/// What a flavor of the protocol (SotW or delta) adds to the core.
pub trait Flavor: Default + std::fmt::Debug + Send + 'static {
    type Request: Send + 'static;
    type Response;

    /// The request's `type_url` (P3).
    fn type_url(request: &Self::Request) -> &str;
    /// The request's node, taken out (P1).
    fn take_node(request: &mut Self::Request) -> Option<Node>;
    /// What a request for a type the server does not serve says (P33).
    fn unknown_request(request: &Self::Request) -> UnknownRequest<'_>;
    /// Take in a request for `kind` (its node and type already checked); `first`: the first
    /// request for `kind` on the stream. ACKs and NACKs go to the core.
    fn handle_request(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        first: bool,
        request: Self::Request,
    );
    /// [`Flavor::handle_request`], for a request whose names were left undecoded (`repeat`)
    /// because they repeat byte for byte those of the last request of its type whose names
    /// the stream took in. Returns whether the stream took in its names (`false`, say, for
    /// an answer to an older response, P6). Only SotW leaves names undecoded: each of its
    /// requests, every ACK, lists the whole set again (P7).
    fn handle_request_repeating(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        first: bool,
        request: Self::Request,
        repeat: bool,
    ) -> bool {
        debug_assert!(!repeat, "only SotW names repeat");
        self.handle_request(core, kind, first, request);
        false
    }
    /// The response `kind` should send now to bring the client to `target`, if any; the core
    /// gives it a nonce ([`Core::send`]).
    fn respond(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        target: &Arc<TypeSnapshot>,
        now: Instant,
    ) -> Option<Self::Response>;
    /// Whether the latest response of `kind` carried the client's whole set of the type
    /// (P10), so that it brings the client to exactly what `kind` serves.
    fn sent_whole(&self, kind: ResourceType) -> bool {
        kind.sotw_whole(false)
    }
    /// When a TTL refresh or heartbeat is next due, if any.
    fn poll_timeout(&self, core: &Core) -> Option<Instant>;
    /// Whether the client holds this resource at this version, as far as the server knows.
    fn holds(&self, kind: ResourceType, name: &str, version: &str) -> bool;
    /// [`Flavor::holds`] of `resource`, one of `snapshot`'s: the same answer, which a
    /// flavor may give without looking the name up when the client was given `snapshot`
    /// itself (a make-before-break step asks it of every changed cluster on every ACK).
    fn holds_of(&self, kind: ResourceType, snapshot: &TypeSnapshot, resource: &Resource) -> bool {
        let _ = snapshot;
        self.holds(kind, &resource.name, &resource.version)
    }
    /// Whether the client holds every resource of `snapshot` it subscribes to, at the
    /// snapshot's version, known without a look at any name: it was given `snapshot` itself
    /// (or one of its version) for the subscription it has now, and owes nothing of it.
    /// `false` when that is not known so (then ask [`Flavor::holds_of`] name by name).
    fn holds_all(&self, kind: ResourceType, snapshot: &TypeSnapshot) -> bool {
        let _ = (kind, snapshot);
        false
    }
    /// Whether the client subscribes to the resource of this name.
    fn subscribes(&self, kind: ResourceType, name: &str) -> bool;
    /// What the resources of `kind` the client holds (as far as the server knows) refer to.
    fn references(&self, kind: ResourceType) -> BTreeSet<Reference>;
    /// How many resource names the client subscribes to, every type together.
    fn subscribed_names(&self) -> usize;
    /// What the client said it holds of `kind` on its first request (SotW's `version_info`,
    /// delta's `initial_resource_versions`), found among `known` snapshots (the recent
    /// generations of its node): the type snapshot it holds, or `None` if it names content
    /// none of them has.
    fn held_of(&self, kind: ResourceType, known: &[Arc<Snapshot>]) -> Option<Arc<TypeSnapshot>>;
    /// The client holds `held` of `kind` (what [`Flavor::held_of`] found), before anything
    /// of `kind` was sent on this stream: what the flavor counts the client as having.
    fn take_held(&mut self, core: &mut Core, kind: ResourceType, held: &Arc<TypeSnapshot>) {
        let _ = (core, kind, held);
    }
}

/// The most resource names one stream may subscribe to, by default.
pub const DEFAULT_MAX_NAMES: usize = 100_000;

/// One xDS stream: the shared core and one flavor's state.
#[derive(Debug)]
pub struct Stream<F> {
    core: Core,
    flavor: F,
}

/// What every stream has, whatever its flavor.
#[derive(Debug)]
pub struct Core {
    variant: Variant,
    node: Option<super::FirstNode>,
    features: ClientFeatures,
    planner: Planner,
    /// Only the types the client asked for are kept.
    types: PerType<TypeSync>,
    /// Nonces are unique on the stream, so a nonce of one type never matches another's (P2).
    nonces: u64,
    events: VecDeque<Event>,
    /// Bumped whenever [`Stream::references`] may have changed.
    refs_changes: u64,
    /// What the client rejected and the snapshot still has at that version: what refers to
    /// it is held back (see `plan::effective`).
    rejected: Rejected,
    /// The most resource names the client may subscribe to.
    max_names: usize,
    /// The largest response to send whole (`--max-response-bytes`); larger ones of the types
    /// that can be split are split.
    max_response_bytes: usize,
    /// Types the server does not serve that the client asked for (P33); boxed, as almost no
    /// stream has any.
    unknown: Option<Box<Unknowns>>,
    /// Types whose first request said what the client holds from an earlier stream, not yet
    /// looked up ([`Stream::handle_history`]): one bit per type.
    claims: u16,
    /// Per type NACKed since its last ACK: the version the client said it runs, and what
    /// that is (a later NACK of the same version runs the same, whatever was sent since).
    /// Boxed: almost no stream has any.
    #[allow(clippy::box_collection)]
    ran: Option<Box<Vec<Ran>>>,
}

/// A type NACKed since its last ACK, the version the client said it runs, and what that is.
type Ran = (ResourceType, String, Arc<super::Runs>);

/// One type's sync state on a stream.
#[derive(Debug, Default)]
struct TypeSync {
    /// The client sent at least one request for this type.
    requested: bool,
    state: SyncState,
    /// The version the client last ACKed (or had, by P13, when the stream opened).
    acked_version: String,
    /// The nonce of the latest response (P2). Not a `String`: 8 bytes less make this state
    /// 160 bytes, a class of jemalloc's down from 192 (each type a client asks for boxes
    /// one; docs/benchmarks.md, "The stream task's memory and the convergence count").
    latest_nonce: Option<Box<str>>,
    /// The latest response is unanswered.
    in_flight: bool,
    /// Per-type streams only: what the client's accepted resources of this type refer to,
    /// and what the response in flight brings it to.
    refs_acked: Arc<BTreeSet<Reference>>,
    refs_sent: Option<Arc<BTreeSet<Reference>>>,
    /// The size of the latest response, when it went over the limit whole (4 bytes: every
    /// stream keeps one per type).
    oversized: Option<std::num::NonZeroU32>,
    /// What the client subscribes to by name and was told does not exist (P32); boxed, as
    /// it is almost always empty.
    #[allow(clippy::box_collection)]
    not_found: Option<Box<BTreeSet<String>>>,
    /// Moved by every change to what [`Stream::status`] reports of the type (its state,
    /// the version ACKed, the size over the limit, the names not found): a report that saw
    /// this revision says what the status says, told without comparing it.
    revision: u32,
}

empty!(TypeSync);

// Within jemalloc's 160-byte class (see `latest_nonce`).
const _: () = assert!(std::mem::size_of::<TypeSync>() <= 160);

impl TypeSync {
    /// What [`Stream::status`] reports of the type is about to change.
    fn revised(&mut self) {
        self.revision = self.revision.wrapping_add(1);
    }
}

impl<F: Flavor> Stream<F> {
    /// A new stream on `variant`, ordering updates make-before-break with the defaults.
    pub fn new(variant: Variant) -> Stream<F> {
        Stream::with_ordering(variant, Ordering::default())
    }

    /// A new stream on `variant` with this ordering (only aggregated streams are ordered).
    pub fn with_ordering(variant: Variant, ordering: Ordering) -> Stream<F> {
        Stream {
            core: Core {
                variant,
                node: None,
                features: ClientFeatures::default(),
                planner: Planner::new(ordering, variant == Variant::Aggregated),
                types: Default::default(),
                nonces: 0,
                events: VecDeque::new(),
                refs_changes: 0,
                rejected: Rejected::new(),
                max_names: DEFAULT_MAX_NAMES,
                max_response_bytes: super::DEFAULT_MAX_RESPONSE_BYTES,
                unknown: None,
                claims: 0,
                ran: None,
            },
            flavor: F::default(),
        }
    }

    /// The same stream, splitting responses larger than `bytes` where the protocol allows
    /// (delta responses, and SotW responses that are not the whole set: P10, P14).
    pub fn with_response_limit(mut self, bytes: usize) -> Stream<F> {
        self.core.max_response_bytes = bytes;
        self
    }

    /// The same stream, allowing its client to subscribe to at most `limit` resource names
    /// (every type together); a request past it ends the stream.
    pub fn with_name_limit(mut self, limit: usize) -> Stream<F> {
        self.core.max_names = limit;
        self
    }

    /// The node that opened the stream (P1), once the first request arrived; without its
    /// extensions, which are not kept.
    pub fn node(&self) -> Option<&Node> {
        self.core.node.as_ref().map(|first| &first.node)
    }

    /// What the client has of `kind`: the last response's ACK/NACK state.
    pub fn state(&self, kind: ResourceType) -> &SyncState {
        &self.core.types[kind].state
    }

    /// What the server knows of `kind` on this stream, if the client asked for it.
    pub fn status(&self, kind: ResourceType) -> Option<TypeStatus<'_>> {
        let t = &self.core.types[kind];
        t.requested.then(|| TypeStatus {
            state: std::borrow::Cow::Borrowed(&t.state),
            acked_version: std::borrow::Cow::Borrowed(&t.acked_version),
            revision: t.revision,
            oversized: t.oversized.map(|n| n.get() as usize),
            not_found: t
                .not_found
                .as_ref()
                .map_or_else(Vec::new, |n| n.iter().cloned().collect()),
        })
    }

    /// Where this stream's make-before-break plan stands, if one is in progress.
    pub fn plan_status(&self) -> Option<PlanStatus> {
        self.core.planner.status()
    }

    /// What the client has rejected (type, name, version), for tests.
    #[cfg(test)]
    pub(crate) fn rejected_resources(&self) -> Vec<(ResourceType, String, String)> {
        self.core
            .rejected
            .iter()
            .map(|((k, n), r)| (*k, n.clone(), r.version.clone()))
            .collect()
    }

    /// What `kind` serves now, as the body of each resource (for tests).
    #[cfg(test)]
    pub(crate) fn target_bodies(&self, kind: ResourceType) -> Vec<String> {
        self.core
            .target(kind)
            .map(|t| {
                t.resources
                    .values()
                    .map(|r| String::from_utf8_lossy(&r.body).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The flavor's state (for the flavor's own accessors).
    pub(super) fn flavor(&self) -> &F {
        &self.flavor
    }

    /// Take in one request from the client. An error ends the stream.
    pub fn handle_request(&mut self, request: F::Request) -> Result<(), ProtocolError> {
        self.handle_request_repeating(request, false).map(drop)
    }

    /// Take in one request from the client, whose names, when `repeat`, were left undecoded
    /// because they repeat byte for byte those of the last request of its type whose names
    /// the stream took in (see [`Flavor::handle_request_repeating`]). Returns the type whose
    /// names the stream took in from the request, if it did: only then may the next
    /// request's repeat of them be left undecoded. An error ends the stream.
    pub fn handle_request_repeating(
        &mut self,
        mut request: F::Request,
        repeat: bool,
    ) -> Result<Option<ResourceType>, ProtocolError> {
        let core = &mut self.core;
        let served = super::request_type(core.variant, F::type_url(&request))?;
        let first_on_stream = core.node.is_none();
        super::check_node(&mut core.node, F::take_node(&mut request))?;
        if let (true, Some(first)) = (first_on_stream, &core.node) {
            core.features = ClientFeatures::of(&first.node);
        }
        let kind = match served {
            RequestType::Served(kind) => kind,
            // P33: answered as resources that do not exist; the stream goes on.
            RequestType::Unknown => {
                core.unknown.get_or_insert_default().handle(
                    F::type_url(&request),
                    F::unknown_request(&request),
                    &mut core.events,
                )?;
                debug_assert!(
                    !repeat,
                    "names repeat only for a type whose names were taken"
                );
                return self.check_names().map(|()| None);
            }
        };
        let t = &mut core.types[kind];
        let first = !t.requested;
        t.requested = true;
        let took = self
            .flavor
            .handle_request_repeating(core, kind, first, request, repeat);
        self.check_names().map(|()| took.then_some(kind))
    }

    /// The client's subscriptions stay within the name limit.
    fn check_names(&self) -> Result<(), ProtocolError> {
        let unknown = self
            .core
            .unknown
            .as_ref()
            .map_or(0, |u| u.subscribed_names());
        let names = self.flavor.subscribed_names() + unknown;
        if names > self.core.max_names {
            return Err(ProtocolError::TooManyNames {
                names,
                limit: self.core.max_names,
            });
        }
        Ok(())
    }

    /// Take in the snapshot this stream's node should now have. On an aggregated stream with
    /// ordering on, it may be served in make-before-break steps (see `plan`).
    pub fn handle_snapshot(&mut self, snapshot: Arc<Snapshot>) {
        let core = &mut self.core;
        // A rejected version that neither the files nor what the stream serves still have is
        // history (the fix arrived and went out), once the client ACKed a response of its
        // type since: until then, what it runs of the name is still what it had before the
        // rejection, which a later NACK of the type must not take for the rejected version.
        let serving = core.planner.target().cloned();
        let types = &core.types;
        core.rejected.retain(|(kind, name), r| {
            let unacked = types
                .get(*kind)
                .is_some_and(|t| !matches!(t.state, SyncState::Acked { .. }));
            unacked
                || [Some(&snapshot), serving.as_ref()]
                    .into_iter()
                    .flatten()
                    .any(|s| {
                        s.get(*kind)
                            .resources
                            .get(name)
                            .is_some_and(|x| x.version == r.version)
                    })
        });
        core.planner
            .handle_snapshot(snapshot, &core.rejected, &mut core.events);
    }

    /// Whether the client said on a first request what it holds from an earlier stream, and
    /// the stream would order from it: call [`Stream::handle_history`] before polling.
    pub fn wants_history(&self) -> bool {
        self.core.claims != 0
    }

    /// The snapshots of the node's recent generations (`known`): what the client said it
    /// holds is looked up among them, and a proxy back mid-change (on this replica or
    /// another serving the same files) is brought to the newest make-before-break from what
    /// it holds; content none of them has is served the newest at once, and reported
    /// ([`PlanEvent::Reconnected`](super::PlanEvent)).
    pub fn handle_history(&mut self, known: &[Arc<Snapshot>]) {
        let claims = std::mem::take(&mut self.core.claims);
        // A proxy moved mid-change holds a step of a plan between two of them: computed the
        // same here as on any replica (the steps follow from the two snapshots alone).
        let mut known = known.to_vec();
        for pair in known.clone().windows(2) {
            let (newer, older) = (&pair[0], &pair[1]);
            if !newer.same_as(older) {
                known.extend(super::plan::steps(older, newer).0);
            }
        }
        let known = &known[..];
        for &kind in ResourceType::ALL.iter() {
            if claims & (1 << kind.index()) == 0 {
                continue;
            }
            let held = self.flavor.held_of(kind, known);
            if let Some(held) = &held {
                self.flavor.take_held(&mut self.core, kind, held);
            }
            let core = &mut self.core;
            core.planner
                .handle_held(kind, held, &core.rejected, &mut core.events);
        }
    }

    /// Per-type streams: what the same node's other streams on this server still refer to
    /// (their [`Stream::references`]). A resource removed from the snapshot stays served
    /// while one of them names it, so a removed cluster goes only once the node's route
    /// stream has moved off it (P30 step 6, as far as separate streams allow).
    pub fn handle_peer_references(&mut self, references: Arc<BTreeSet<Reference>>) {
        self.core.planner.handle_peer_references(references);
    }

    /// Per-type streams: what the resources the client holds refer to (accepted, plus the
    /// response in flight), for the node's other streams; `None` on an aggregated stream,
    /// which orders its own types. With the count of changes so far, to publish only news.
    pub fn references(&self) -> Option<(u64, BTreeSet<Reference>)> {
        if self.core.variant == Variant::Aggregated {
            return None;
        }
        let mut all = BTreeSet::new();
        for t in self.core.types.iter() {
            all.extend(t.refs_acked.iter().cloned());
            if t.in_flight {
                all.extend(t.refs_sent.iter().flat_map(|r| r.iter().cloned()));
            }
        }
        Some((self.core.refs_changes, all))
    }

    /// The next response to send, if any. Call until `None` after every input, and when
    /// [`Stream::poll_timeout`] passes. On an aggregated stream types come out in the order
    /// SDS, CDS, EDS, LDS, RDS, SRDS, VHDS, ECDS, RTDS, and a plan's next step only once the
    /// client ACKed the one before (P30).
    pub fn poll_response(&mut self, now: Instant) -> Option<F::Response> {
        loop {
            self.core.planner.start_clock(now);
            let target = Arc::clone(self.core.planner.target()?);
            for &kind in super::served(self.core.variant) {
                if self.core.planner.withholds(kind) {
                    continue;
                }
                if let Some(r) = self
                    .flavor
                    .respond(&mut self.core, kind, target.get(kind), now)
                {
                    let whole = self.flavor.sent_whole(kind);
                    self.core.planner.sent(kind, whole);
                    if self.core.variant != Variant::Aggregated {
                        let refs = self.flavor.references(kind);
                        self.core.types[kind].refs_sent = Some(Arc::new(refs));
                        self.core.refs_changes += 1;
                    }
                    return Some(r);
                }
            }
            let client = Client {
                types: &self.core.types,
                flavor: &self.flavor,
            };
            if !self
                .core
                .planner
                .advance(now, &client, &mut self.core.events)
            {
                return None;
            }
        }
    }

    /// The next response for a type the server does not serve (P33), if any: call until
    /// `None` after every request.
    pub fn poll_unknown(&mut self) -> Option<UnknownResponse> {
        let core = &mut self.core;
        core.unknown.as_mut()?.poll(&mut core.nonces)
    }

    /// The types the server does not serve that the client asked for (P33).
    pub fn unknown_status(&self) -> Vec<UnknownStatus> {
        self.core
            .unknown
            .as_ref()
            .map_or_else(Vec::new, |u| u.status())
    }

    /// When to call `poll_response` again without input, if ever. Never in the past for
    /// long: `poll_response` consumes what is due (a timeout already past would otherwise
    /// wake the caller in a loop).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let flavor = self.flavor.poll_timeout(&self.core);
        let plan = self.core.planner.poll_timeout();
        flavor.into_iter().chain(plan).min()
    }

    /// The next event (ACK, NACK, stale request, subscription or plan change), if any.
    /// Once none is left, the queue's buffer is freed: events come a few at a time, after
    /// an input, and are taken at once; a buffer kept for the stream's life was 288 bytes
    /// of every stream (docs/benchmarks.md, "The stream's channel and its task's future").
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = self.core.events.pop_front();
        if event.is_none() && self.core.events.capacity() > 0 {
            self.core.events = VecDeque::new();
        }
        event
    }

    /// How many events the queue has room for (its buffer's size).
    #[cfg(test)]
    pub(crate) fn event_room(&self) -> usize {
        self.core.events.capacity()
    }
}

/// The client as the planner sees it.
struct Client<'a, F> {
    types: &'a PerType<TypeSync>,
    flavor: &'a F,
}

impl<F: Flavor> Progress for Client<'_, F> {
    fn in_flight(&self, kind: ResourceType) -> bool {
        self.types[kind].in_flight
    }

    fn holds(&self, kind: ResourceType, name: &str, version: &str) -> bool {
        self.flavor.holds(kind, name, version)
    }

    fn holds_of(&self, kind: ResourceType, snapshot: &TypeSnapshot, resource: &Resource) -> bool {
        self.flavor.holds_of(kind, snapshot, resource)
    }

    fn holds_all(&self, kind: ResourceType, snapshot: &TypeSnapshot) -> bool {
        self.flavor.holds_all(kind, snapshot)
    }

    fn subscribes(&self, kind: ResourceType, name: &str) -> bool {
        self.flavor.subscribes(kind, name)
    }

    fn requested(&self, kind: ResourceType) -> bool {
        self.types.get(kind).is_some_and(|t| t.requested)
    }
}

// === impl Core ===

impl Core {
    /// The features the client announced.
    pub fn features(&self) -> ClientFeatures {
        self.features
    }

    /// What `kind` serves now, once a snapshot arrived.
    pub fn target(&self, kind: ResourceType) -> Option<&Arc<TypeSnapshot>> {
        self.planner.target().map(|s| s.get(kind))
    }

    /// Whether removals of what the client claims of `kind` at versions the server does not
    /// keep wait (it is back from an earlier stream and has not completed its update yet, or
    /// the removals of what may name `kind` are not complete yet).
    pub fn defers_removal_of(&self, kind: ResourceType) -> bool {
        self.planner.defers_removal_of(kind)
    }

    /// Whether the client has asked for `kind`.
    pub fn requested(&self, kind: ResourceType) -> bool {
        self.types[kind].requested
    }

    pub fn state(&self, kind: ResourceType) -> &SyncState {
        &self.types[kind].state
    }

    pub fn acked_version(&self, kind: ResourceType) -> &str {
        &self.types[kind].acked_version
    }

    /// The nonce of the latest response of `kind`, if any was sent.
    pub fn latest_nonce(&self, kind: ResourceType) -> Option<&str> {
        self.types[kind].latest_nonce.as_deref()
    }

    /// Whether the latest response of `kind` is unanswered.
    pub fn in_flight(&self, kind: ResourceType) -> bool {
        self.types[kind].in_flight
    }

    /// A response of `kind` at `version` goes out: its fresh nonce (P2).
    pub fn send(&mut self, kind: ResourceType, version: &str) -> String {
        self.nonces += 1;
        let nonce = self.nonces.to_string();
        let t = &mut self.types[kind];
        t.revised();
        t.latest_nonce = Some(nonce.as_str().into());
        t.in_flight = true;
        t.state = SyncState::Sent {
            nonce: nonce.clone(),
            version: version.to_string(),
        };
        nonce
    }

    /// Record what a response of `kind` going out says does not exist (P32): with `all`
    /// (SotW, whose every response names every such name) this replaces the record, else it
    /// adds to it.
    pub fn record_not_found(&mut self, kind: ResourceType, names: &[String], all: bool) {
        if names.is_empty() && self.types.get(kind).is_none_or(|t| t.not_found.is_none()) {
            return;
        }
        let t = &mut self.types[kind];
        let recorded = |n: &String| t.not_found.as_ref().is_some_and(|set| set.contains(n));
        let unchanged = if all {
            t.not_found.as_ref().map_or(0, |set| set.len()) == names.len()
                && names.iter().all(recorded)
        } else {
            names.iter().all(recorded)
        };
        if unchanged {
            return;
        }
        t.revised();
        if all {
            t.not_found = None;
        }
        if !names.is_empty() {
            t.not_found
                .get_or_insert_default()
                .extend(names.iter().cloned());
        }
    }

    /// Of `names`, those that do not exist for the node: not in the newest snapshot either
    /// (a make-before-break step may not serve yet what the node will have, P30).
    pub fn not_found(&self, kind: ResourceType, mut names: Vec<String>) -> Vec<String> {
        if let Some(newest) = self.planner.newest() {
            let resources = &newest.get(kind).resources;
            names.retain(|n| !resources.contains_key(n));
        }
        names
    }

    /// The newest snapshot's `kind`, if any (a make-before-break step may serve another).
    pub fn newest_of(&self, kind: ResourceType) -> Option<&Arc<TypeSnapshot>> {
        self.planner.newest().map(|newest| newest.get(kind))
    }

    /// Whether the newest snapshot has `name` of `kind` (a make-before-break step may not
    /// serve it yet, P30).
    pub fn newest_has(&self, kind: ResourceType, name: &str) -> bool {
        self.planner
            .newest()
            .is_some_and(|newest| newest.get(kind).resources.contains_key(name))
    }

    /// Whether the client was told of any name of `kind` that it does not exist (P32).
    pub fn has_not_found(&self, kind: ResourceType) -> bool {
        self.types.get(kind).is_some_and(|t| t.not_found.is_some())
    }

    /// Whether the client was told that `name` of `kind` does not exist (P32).
    pub fn told_not_found(&self, kind: ResourceType, name: &str) -> bool {
        self.types[kind]
            .not_found
            .as_ref()
            .is_some_and(|n| n.contains(name))
    }

    /// Of the names of `kind` recorded as not existing (P32), keep only those `asked`
    /// still holds: a name the client no longer asks for leaves the record (and `/status`)
    /// at once, whatever is sent next.
    pub fn keep_not_found(&mut self, kind: ResourceType, asked: impl Fn(&str) -> bool) {
        let Some(t) = self.types.get_mut(kind) else {
            return;
        };
        if let Some(set) = &mut t.not_found {
            let before = set.len();
            set.retain(|n| asked(n));
            if set.len() != before {
                t.revision = t.revision.wrapping_add(1);
            }
            if set.is_empty() {
                t.not_found = None;
            }
        }
    }

    /// The client was sent `name` of `kind`, or no longer subscribes to it: it is no longer
    /// recorded as not existing.
    pub fn record_found(&mut self, kind: ResourceType, name: &str) {
        let Some(t) = self.types.get_mut(kind) else {
            return;
        };
        if let Some(set) = &mut t.not_found {
            if set.remove(name) {
                t.revision = t.revision.wrapping_add(1);
            }
            if set.is_empty() {
                t.not_found = None;
            }
        }
    }

    /// The response limit (`--max-response-bytes`).
    pub fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    /// Whether resources that add `cost` to a response (`response_cost`, in all) go in one
    /// response whole: then the type is no longer oversized, as [`Core::fit`] of them says.
    pub fn fits(&mut self, kind: ResourceType, cost: usize) -> bool {
        if cost
            > self
                .max_response_bytes
                .saturating_sub(super::RESPONSE_OVERHEAD)
        {
            return false;
        }
        let t = &mut self.types[kind];
        if t.oversized.is_some() {
            t.revised();
            t.oversized = None;
        }
        true
    }

    /// How many of `resources` (in order) the next response of `kind` carries: all of them
    /// when they fit the limit or `splittable` is false; else as many as fit, at least one.
    /// Reports a split, or a response that goes over the limit whole.
    pub fn fit<'a>(
        &mut self,
        kind: ResourceType,
        resources: impl Iterator<Item = &'a Resource> + Clone,
        splittable: bool,
    ) -> usize {
        let limit = self.max_response_bytes;
        let (mut all, mut total) = (0usize, 0usize);
        for r in resources.clone() {
            all += 1;
            total = total.saturating_add(super::response_cost(r));
        }
        if self.fits(kind, total) {
            return all;
        }
        let count = if splittable {
            super::fitting(resources.clone(), limit)
        } else {
            all
        };
        let sent: usize = resources.take(count).map(super::response_cost).sum();
        if count < all {
            self.events.push_back(Event::Split {
                kind,
                sent: count,
                left: all - count,
            });
        }
        let oversized = (sent > limit)
            .then(|| std::num::NonZeroU32::new(u32::try_from(sent).unwrap_or(u32::MAX)))
            .flatten();
        let t = &mut self.types[kind];
        if t.oversized != oversized {
            t.revised();
            t.oversized = oversized;
        }
        if sent > limit {
            self.events.push_back(Event::Oversized {
                kind,
                bytes: sent,
                limit,
            });
        }
        count
    }

    /// Whether the client has rejected resources of `kind` that the snapshot still has.
    pub fn has_rejected(&self, kind: ResourceType) -> bool {
        self.rejected.keys().any(|(k, _)| *k == kind)
    }

    /// The resources of `kind` the client rejected: name and version. The next response of
    /// the type sends them again (P5: only once the type changes), so that what the client
    /// rejected only for being in the same response as something bad is not lost.
    pub fn rejected(&self, kind: ResourceType) -> impl Iterator<Item = (&str, &str)> {
        self.rejected
            .iter()
            .filter(move |((k, _), _)| *k == kind)
            .map(|((_, name), r)| (name.as_str(), r.version.as_str()))
    }

    /// The client ACKed `version` of `kind` (P4), accepting `resources` (name, version) that
    /// it had rejected before, if any: what was held back for them goes out.
    pub fn ack(&mut self, kind: ResourceType, version: String, resources: Vec<(String, String)>) {
        if let Some(ran) = &mut self.ran {
            ran.retain(|(k, _, _)| *k != kind);
            if ran.is_empty() {
                self.ran = None;
            }
        }
        let before = self.rejected.len();
        for (name, v) in resources {
            let key = (kind, name);
            if self.rejected.get(&key).is_some_and(|r| r.version == v) {
                self.rejected.remove(&key);
            }
        }
        if self.rejected.len() != before {
            self.planner
                .handle_accepted(&self.rejected, &mut self.events);
        }
        let t = &mut self.types[kind];
        if t.in_flight {
            if let Some(sent) = t.refs_sent.take() {
                t.refs_acked = sent;
                self.refs_changes += 1;
            }
        }
        t.in_flight = false;
        t.revised();
        self.planner.answered(kind);
        t.acked_version.clone_from(&version);
        t.state = SyncState::Acked {
            version: version.clone(),
        };
        self.events.push_back(Event::Acked { kind, version });
    }

    /// The client has `version` of `kind` without a response on this stream (P13).
    pub fn assume_acked(&mut self, kind: ResourceType, version: &str) {
        let t = &mut self.types[kind];
        t.revised();
        t.acked_version = version.to_string();
        t.state = SyncState::Acked {
            version: version.to_string(),
        };
    }

    /// The client rejected the response `nonce` (`rejected` version) and still runs
    /// `accepted` (P5, P17); `resources` are what that response brought it, each with what
    /// the client had of that name before; `runs`, what the flavor knows it still runs of
    /// the type (a NACK after a NACK of the same accepted version keeps what the first
    /// said). What refers to them is held back; the rest of a plan in progress goes on.
    #[allow(clippy::too_many_arguments)]
    pub fn nack(
        &mut self,
        kind: ResourceType,
        nonce: String,
        rejected: String,
        accepted: String,
        error: String,
        resources: Vec<(Arc<Resource>, Previous)>,
        runs: Option<super::Runs>,
    ) {
        // Rejected again: the client still runs what it ran at the first rejection.
        let ran = self.ran.as_mut().and_then(|ran| {
            let at = ran.iter().position(|(k, _, _)| *k == kind)?;
            Some(ran.swap_remove(at))
        });
        let runs = match ran {
            Some((_, version, runs)) if version == accepted => Some(runs),
            _ => runs.map(Arc::new),
        };
        if let Some(runs) = &runs {
            self.ran.get_or_insert_with(Default::default).push((
                kind,
                accepted.clone(),
                Arc::clone(runs),
            ));
        }
        let changed = super::Changed::of(&resources);
        for (brought, previous) in resources {
            let key = (kind, brought.name.clone());
            // Rejected again after a rejection: what the client runs is still what it had
            // before the first.
            let previous = match (self.rejected.remove(&key), previous) {
                (Some(earlier), Previous::Had(p)) if p.version == earlier.version => {
                    earlier.previous
                }
                (_, previous) => previous,
            };
            let rejection = Rejection {
                version: brought.version.clone(),
                previous,
            };
            self.rejected.insert(key, rejection);
        }
        let t = &mut self.types[kind];
        if t.refs_sent.take().is_some() {
            self.refs_changes += 1;
        }
        t.in_flight = false;
        t.revised();
        t.state = SyncState::Nacked {
            nonce,
            rejected_version: rejected.clone(),
            accepted_version: accepted,
            nack: Arc::new(super::Nack {
                error: error.clone(),
                changed: Arc::clone(&changed),
                runs,
            }),
        };
        self.events.push_back(Event::Nacked {
            kind,
            rejected_version: rejected,
            error,
            changed,
        });
        self.planner
            .handle_nack(kind, &self.rejected, &mut self.events);
        self.planner.answered(kind);
    }

    /// The first request of `kind` said what the client holds from an earlier stream: look
    /// it up before the next response, if the stream orders its updates.
    pub fn claim(&mut self, kind: ResourceType) {
        if self.planner.ordered() {
            self.claims |= 1 << kind.index();
        }
    }

    /// Record an event.
    pub fn event(&mut self, event: Event) {
        self.events.push_back(event);
    }
}
