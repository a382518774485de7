//! State of the World streams: ADS (`StreamAggregatedResources`) and the per-type
//! `Stream*` methods.
//!
//! The SotW flavor of the stream core (`protocol::stream`): the core keeps nonces, ACK/NACK
//! and the make-before-break plan; this keeps per type the subscription and what the client
//! was given, and builds responses from the snapshot the plan says to serve.
//!
//! Per type the stream keeps at most one response in flight: a response goes out only while
//! the client has a request pending (its first request, or its ACK/NACK of the last
//! response), so every decision is taken by `poll_response`, which sees every ACK and NACK.
//!
//! TTLs (P26): for a client announcing `xds.config.resource-in-sotw` and TTL support,
//! resources with a TTL go out wrapped in `Resource` with it, and are refreshed by sending
//! them again (the whole set where a response is whole, since leaving one out would delete
//! it) every third of the shortest TTL, on the client's pending request. Time enters only as
//! `now`.
//!
//! A response is whole or partial by how the client subscribed, not by the type's name
//! (P10, P14; [`ResourceType::sotw_whole`]): to a wildcard it carries the client's whole set
//! of the type, whatever the type (Envoy takes every response to a wildcard watch as the
//! whole set and drops what it leaves out: CDS, LDS, and SRDS too); to names, LDS and CDS
//! carry every name asked for, and other types only what the client lacks: resources new to
//! it or changed, plus ClusterLoadAssignments due again for warming (P28), so one changed
//! endpoint set sends one ClusterLoadAssignment, not all.
//!
//! Must not: do IO or read a clock, or keep what the core keeps (nonces, ACK/NACK, the plan).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;

use super::per_type::{empty, PerType};
use super::plan::Previous;
use super::stream::{Core, Flavor, Stream};
use super::subscription::selection_version;
use super::{heartbeat_interval, Response, Subscription, UnknownNames, UnknownRequest};
use crate::cache::{Snapshot, TypeSnapshot};
use crate::resource::{Reference, Resource, ResourceType};

/// One SotW stream: the shared core with the SotW flavor. See `protocol::stream` for the call
/// order.
pub type SotwStream = Stream<Sotw>;

/// What a SotW stream adds to the core: per type, the subscription and what the client was
/// given.
#[derive(Debug, Default)]
pub struct Sotw {
    /// Only the types the client asked for are kept.
    types: PerType<TypeState>,
}

/// One type's sub-stream.
#[derive(Debug, Default)]
struct TypeState {
    subscription: Subscription,
    /// A request awaits a response: responses go out only then (P7).
    pending: bool,
    /// `version_info` of the first request: what the client had before this stream (P13).
    initial_version: Option<String>,
    /// What the client has of this type; `None` before anything was sent.
    given: Option<Given>,
    /// What it had before the latest response (to tell what that response brought).
    prev_given: Option<Given>,
    /// Clusters just sent anew: their ClusterLoadAssignments go on the next response even if
    /// unchanged, without which Envoy keeps them warming (P28). Those the client lacks go
    /// anyway, so nothing is looked up here, and no name is copied (nor a shared list of
    /// them: a whole selection sent is kept as it is).
    rewarm: Vec<Arc<[Arc<Resource>]>>,
    /// When the TTL'd resources the client has are due to be sent again (P25, P26).
    refresh_at: Option<Instant>,
    /// Names `given` counts that the client does not have yet: the rest of a response split
    /// for the response limit, sent on its next request.
    /// Boxed: almost always empty, and every stream keeps one per type (8 bytes instead of
    /// a set's 24; docs/benchmarks.md, "NACK details and split responses in the stream state").
    #[allow(clippy::box_collection)]
    owed: Option<Box<BTreeSet<String>>>,
    /// LDS, CDS: the client dropped the wildcard, or names, since the last response, and
    /// forgot what that leaves out: a whole set goes to it even if equal to what it was
    /// given (P9: what it names again goes again).
    forgot: bool,
}

/// What a client has of one type: exactly what `subscription` selects from `snapshot`.
///
/// After every decision (a response sent, or nothing to send because nothing it covers
/// changed) the client has the current selection, so this is two pointers' worth of state per
/// type instead of a copy of every name and version.
#[derive(Debug)]
struct Given {
    snapshot: Arc<TypeSnapshot>,
    subscription: Subscription,
}

empty!(TypeState);

impl TypeState {
    /// A request names `names` (stale or not, P6): what it no longer names the client has
    /// forgotten (P9: asked for again, it goes again), even if a later request names it
    /// again before anything was decided. A client that held the wildcard and now names
    /// some holds only those; one whose responses are whole too (a whole set is sent again
    /// only if it differs from what the client holds).
    fn forget_dropped(&mut self, kind: ResourceType, names: &[String]) {
        let Some(given) = &mut self.given else {
            return;
        };
        // What the request subscribes to (`[]` is the legacy wildcard only if nothing was
        // ever named, P15).
        let mut asked = self.subscription.clone();
        asked.apply_sotw(names);
        if asked.is_wildcard() {
            return;
        }
        if kind.sotw_whole(false) {
            // LDS, CDS: the narrower set goes whole anyway (P10); should what it dropped
            // (the wildcard, or names) come back before it went, the whole set goes again.
            if given.subscription.is_wildcard()
                || given
                    .subscription
                    .names()
                    .iter()
                    .any(|n| !asked.names().contains(n))
            {
                self.forgot = true;
            }
            return;
        }
        if given.subscription.is_wildcard() {
            // It keeps what it was given of the names it asks for (those that exist: any
            // other is news to tell it, P32).
            let kept: Vec<String> = asked
                .names()
                .iter()
                .filter(|n| given.snapshot.resources.contains_key(*n))
                .cloned()
                .collect();
            let mut narrowed = asked;
            narrowed.apply_sotw(&kept);
            given.subscription = narrowed;
            return;
        }
        let held = given.subscription.names();
        if held.iter().all(|n| asked.names().contains(n)) {
            return;
        }
        let kept: Vec<String> = held
            .iter()
            .filter(|n| asked.names().contains(*n))
            .cloned()
            .collect();
        given.subscription.apply_sotw(&kept);
    }

    /// Whether `name` is of the rest of a split response, still to send.
    fn owes(&self, name: &str) -> bool {
        self.owed.as_ref().is_some_and(|o| o.contains(name))
    }

    /// What the latest response brought the client, each with what it had of that name
    /// before: what it added or changed, or (`whole`, where the response carried the whole
    /// set) everything in it. Only asked for on a NACK, or on an ACK while the client has
    /// rejected resources.
    fn brought(&self, kind: ResourceType, whole: bool) -> Vec<(Arc<Resource>, Previous)> {
        let Some(given) = &self.given else {
            return Vec::new();
        };
        let now = given.subscription.select(&given.snapshot);
        let whole = whole && kind.sotw_whole(given.subscription.is_wildcard());
        let brought = match &self.prev_given {
            Some(prev) if !whole => prev.lacks(now.resources.iter(), |_| false),
            _ => now.resources.iter().collect(),
        };
        let previous = |name: &str| match &self.prev_given {
            Some(prev) if prev.subscription.covers(name) => prev
                .snapshot
                .resources
                .get(name)
                .map_or(Previous::Nothing, |r| Previous::Had(Arc::clone(r))),
            _ => Previous::Nothing,
        };
        brought
            .into_iter()
            .filter(|r| !self.owes(&r.name))
            .map(|r| (Arc::clone(r), previous(&r.name)))
            .collect()
    }
}

impl TypeState {
    /// What the client runs after rejecting the latest response (`in_flight`: what it had
    /// before that response; else what it was given), if that is the version the NACK says
    /// it runs (`accepted`, P5).
    fn runs(&self, in_flight: bool, accepted: &str) -> Option<super::Runs> {
        let had = if in_flight {
            self.prev_given.as_ref()
        } else {
            self.given.as_ref()
        }?;
        let selected = had.subscription.select(&had.snapshot);
        (selected.version == accepted).then(|| super::Runs {
            resources: selected.resources.to_vec(),
            subscription: had.subscription.clone(),
        })
    }
}

impl Given {
    fn new(snapshot: &Arc<TypeSnapshot>, subscription: &Subscription) -> Given {
        Given {
            snapshot: Arc::clone(snapshot),
            subscription: subscription.clone(),
        }
    }

    /// Those of `selected` (in name order) that the client lacks or has at another
    /// version, plus those for which `also` holds. Linear: a merge with what it has.
    fn lacks<'a>(
        &self,
        selected: impl IntoIterator<Item = &'a Arc<Resource>>,
        mut also: impl FnMut(&str) -> bool,
    ) -> Vec<&'a Arc<Resource>> {
        let before = self.subscription.select(&self.snapshot);
        let mut before = before.resources.iter().peekable();
        selected
            .into_iter()
            .filter(|r| {
                // The same resource (an unchanged one is shared between snapshots) is had
                // without a compare of its name or version.
                let has = if before.next_if(|b| Arc::ptr_eq(b, r)).is_some() {
                    true
                } else {
                    while before.next_if(|b| b.name < r.name).is_some() {}
                    before
                        .peek()
                        .is_some_and(|b| b.name == r.name && b.version == r.version)
                };
                !has || also(&r.name)
            })
            .collect()
    }

    /// Whether the client has exactly `selected`, which `subscription` selects from
    /// `current`.
    fn has_exactly(
        &self,
        selected: &[Arc<Resource>],
        current: &TypeSnapshot,
        subscription: &Subscription,
    ) -> bool {
        // A wildcard selects the whole type, and a type's version hashes all of it.
        if self.subscription.is_wildcard() && subscription.is_wildcard() {
            return self.snapshot.version == current.version;
        }
        let before = &self.subscription.select(&self.snapshot).resources;
        before.len() == selected.len()
            && before
                .iter()
                .zip(selected)
                .all(|(a, b)| a.name == b.name && a.version == b.version)
    }
}

impl Flavor for Sotw {
    type Request = DiscoveryRequest;
    type Response = Response;

    fn type_url(request: &DiscoveryRequest) -> &str {
        &request.type_url
    }

    fn take_node(request: &mut DiscoveryRequest) -> Option<Node> {
        request.node.take()
    }

    fn unknown_request(request: &DiscoveryRequest) -> UnknownRequest<'_> {
        UnknownRequest {
            nonce: &request.response_nonce,
            error: request.error_detail.as_ref().map(|e| e.message.as_str()),
            version: &request.version_info,
            names: UnknownNames::Sotw(&request.resource_names),
        }
    }

    fn handle_request(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        first: bool,
        request: DiscoveryRequest,
    ) {
        self.handle_request_repeating(core, kind, first, request, false);
    }

    fn handle_request_repeating(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        first: bool,
        request: DiscoveryRequest,
        repeat: bool,
    ) -> bool {
        let st = &mut self.types[kind];
        if !repeat {
            st.forget_dropped(kind, &request.resource_names);
        }
        let nonce = request.response_nonce;
        if let Some(latest) = core.latest_nonce(kind) {
            if !nonce.is_empty() && nonce != latest {
                // P6: an answer to an older response; a newer request will follow.
                core.event(super::Event::Stale { kind, nonce });
                return false;
            }
            if nonce == latest {
                let sent_version = core.state(kind).sent_version().unwrap_or("").to_string();
                let version = request.version_info.clone();
                let in_flight = core.in_flight(kind);
                match request.error_detail {
                    // P5: a NACK names the last accepted version, not the rejected one.
                    Some(status) => {
                        let brought = if in_flight {
                            st.brought(kind, false)
                        } else {
                            Vec::new()
                        };
                        let runs = st.runs(in_flight, &version);
                        core.nack(
                            kind,
                            nonce,
                            sent_version,
                            version,
                            status.message,
                            brought,
                            runs,
                        );
                    }
                    // P4: an ACK of the latest response.
                    None => {
                        let accepted = if in_flight && core.has_rejected(kind) {
                            st.brought(kind, true)
                                .into_iter()
                                .map(|(r, _)| (r.name.clone(), r.version.clone()))
                                .collect()
                        } else {
                            Vec::new()
                        };
                        core.ack(kind, version, accepted);
                    }
                }
            }
        }
        if first {
            if !request.version_info.is_empty() {
                core.claim(kind);
            }
            st.initial_version = Some(request.version_info);
        } else if st.given.is_none() && st.initial_version.is_some() && !repeat {
            // The version the stream opened with was of what the first request named; other
            // names, before anything was sent, prove nothing with it (P13).
            let before = st.subscription.clone();
            st.subscription.apply_sotw(&request.resource_names);
            if st.subscription != before {
                st.initial_version = None;
            }
        }
        // P7: the names replace the set; names that repeat the set's own leave it as it is.
        if !repeat {
            st.subscription.apply_sotw(&request.resource_names);
            // P32: what it no longer names is no longer reported not found (it may get no
            // response to say so: nothing else changed).
            let subscription = &st.subscription;
            core.keep_not_found(kind, |n| subscription.names().contains(n));
        }
        st.pending = true;
        true
    }

    fn respond(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        target: &Arc<TypeSnapshot>,
        now: Instant,
    ) -> Option<Response> {
        self.respond_type(core, kind, target, now)
    }

    /// A response to a wildcard is whole, of any type; to names, for LDS and CDS (P10).
    fn sent_whole(&self, kind: ResourceType) -> bool {
        let given = self.types.get(kind).and_then(|st| st.given.as_ref());
        kind.sotw_whole(given.is_some_and(|g| g.subscription.is_wildcard()))
    }

    /// When TTL'd resources are next due to be refreshed, if any. A type without a pending
    /// request has none: a refresh needs one, and the request is the next input anyway.
    fn poll_timeout(&self, _: &Core) -> Option<Instant> {
        self.types
            .iter()
            .filter(|st| st.pending)
            .filter_map(|st| st.refresh_at)
            .min()
    }

    fn references(&self, kind: ResourceType) -> BTreeSet<Reference> {
        let Some(given) = &self.types[kind].given else {
            return BTreeSet::new();
        };
        given
            .subscription
            .select(&given.snapshot)
            .resources
            .iter()
            .flat_map(|r| r.references.iter().cloned())
            .collect()
    }

    fn subscribed_names(&self) -> usize {
        self.types
            .iter()
            .map(|t| t.subscription.names().len())
            .sum()
    }

    /// What it was found to hold is what it was given (so a NACK of the next response tells
    /// what it runs), ACKed at the version it named (P13).
    fn take_held(&mut self, core: &mut Core, kind: ResourceType, held: &Arc<TypeSnapshot>) {
        let st = &mut self.types[kind];
        if st.given.is_some() {
            return;
        }
        // Named resources go again whole (see `respond_type`): what the client holds of them
        // orders the update, and is not taken as given. A wildcard holds the whole set, of
        // any type (P10, P14).
        if st.subscription.is_wildcard() {
            st.given = Some(Given::new(held, &st.subscription));
        }
        if let Some(version) = st.initial_version.clone() {
            core.assume_acked(kind, &version);
        }
    }

    /// P13: the `version_info` of the first request names what the client holds: the
    /// type's version (wildcard) or that of exactly what it asks for of the type; the first
    /// of `known` whose type snapshot gives that version.
    fn held_of(&self, kind: ResourceType, known: &[Arc<Snapshot>]) -> Option<Arc<TypeSnapshot>> {
        let st = self.types.get(kind)?;
        let version = st.initial_version.as_deref().filter(|v| !v.is_empty())?;
        known
            .iter()
            .map(|s| s.get(kind))
            .find(|t| st.subscription.select(t).version == version)
            .cloned()
    }

    fn subscribes(&self, kind: ResourceType, name: &str) -> bool {
        self.types[kind].subscription.covers(name)
    }

    fn holds(&self, kind: ResourceType, name: &str, version: &str) -> bool {
        let st = &self.types[kind];
        !st.owes(name)
            && st.given.as_ref().is_some_and(|g| {
                g.subscription.covers(name)
                    && g.snapshot
                        .resources
                        .get(name)
                        .is_some_and(|r| r.version == version)
            })
    }

    /// Given `snapshot` itself (or one of its version: the same names at the same
    /// versions), the client holds each of its resources that it was given and does not
    /// owe: the name and the version need no lookup.
    fn holds_of(&self, kind: ResourceType, snapshot: &TypeSnapshot, resource: &Resource) -> bool {
        let st = &self.types[kind];
        let held = match &st.given {
            Some(g) if g.snapshot.version == snapshot.version => {
                !st.owes(&resource.name) && g.subscription.covers(&resource.name)
            }
            _ => return self.holds(kind, &resource.name, &resource.version),
        };
        debug_assert_eq!(
            held,
            self.holds(kind, &resource.name, &resource.version),
            "{kind:?} {}: the same answer as by name",
            resource.name
        );
        held
    }

    /// Given `snapshot` itself (or one of its version) for the subscription it has now, and
    /// owing nothing, the client holds each resource of it that it subscribes to.
    fn holds_all(&self, kind: ResourceType, snapshot: &TypeSnapshot) -> bool {
        let st = &self.types[kind];
        st.owed.is_none()
            && st.given.as_ref().is_some_and(|g| {
                g.snapshot.version == snapshot.version && g.subscription.same(&st.subscription)
            })
    }
}

impl Sotw {
    /// Decide whether `kind` has something to send now to bring the client to `current`,
    /// and build it.
    ///
    /// One function on purpose: it is the state machine's decision for one type, read top
    /// to bottom in the order the rules apply (nothing pending; what the client holds mid
    /// make-before-break, P30; NOT_FOUND, P32; re-warming, P28; the whole set or the names,
    /// P10/P14; TTL heartbeats, P25; the size split; what is then taken as sent). Each step
    /// reads and narrows what the previous ones decided about the same type's state; split
    /// apart, those would be a dozen arguments passed along, and the order of the rules
    /// would no longer be visible in one place.
    fn respond_type(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        current: &Arc<TypeSnapshot>,
        now: Instant,
    ) -> Option<Response> {
        // P34: LEDS is Incremental only (an LbEndpoint has no name a SotW client could match):
        // over SotW the type has nothing, so names asked for are not found.
        let nothing;
        let current = if kind == ResourceType::LbEndpoint {
            nothing = TypeSnapshot::empty();
            &nothing
        } else {
            current
        };
        let features = core.features();
        let wrap_ttl = features.resource_ttl && features.resource_in_sotw;
        // A type the client never asked for has no state, and nothing to send.
        let st = self.types.get_mut(kind)?;
        if !st.pending {
            return None;
        }
        // Nothing changed on either side since the last decision: decided before selecting
        // (every stream asks each of its types after every input, and most have nothing).
        // The same test as the `Some(given)` arm below, short of what needs the selection.
        if let Some(given) = &st.given {
            if st.rewarm.is_empty()
                && st.refresh_at.is_none_or(|at| at > now)
                && st.owed.is_none()
                && !st.forgot
                && Arc::ptr_eq(&given.snapshot, current)
                && given.subscription == st.subscription
            {
                return None;
            }
        }
        // P30: a whole set never leaves out what the client holds and the newest snapshot
        // has, though a make-before-break step does not serve it yet (the step was planned
        // from what the server served, which the client may not have been sent): it keeps
        // what it holds of those until a later step brings them. The step's snapshot with
        // them is what the client is to hold, and what it is then taken to hold.
        let with_kept;
        let current = match (&st.given, core.newest_of(kind)) {
            (Some(given), Some(newest))
                if !Arc::ptr_eq(newest, current)
                    && kind.sotw_whole(st.subscription.is_wildcard()) =>
            {
                let before = given.subscription.select(&given.snapshot);
                let mut kept: Vec<&Arc<Resource>> = before
                    .resources
                    .iter()
                    .filter(|r| {
                        !current.resources.contains_key(&r.name)
                            && st.subscription.covers_resource(r)
                            && newest.resources.contains_key(&r.name)
                    })
                    .collect();
                // To names, a partial type's responses never said what was deleted (P10):
                // of a name it asked for and was not given, the client may hold what an
                // earlier response gave it. Now a wildcard, it keeps the newest's of those.
                if !given.subscription.is_wildcard() && !kind.sotw_whole(false) {
                    kept.extend(
                        given
                            .subscription
                            .names()
                            .iter()
                            .filter(|n| {
                                !given.snapshot.resources.contains_key(*n)
                                    && !current.resources.contains_key(*n)
                            })
                            .filter_map(|n| newest.resources.get(n)),
                    );
                }
                if kept.is_empty() {
                    current
                } else {
                    let mut resources = current.resources.clone();
                    for r in kept {
                        resources.insert(r.name.clone(), Arc::clone(r));
                    }
                    with_kept = Arc::new(TypeSnapshot::new(resources));
                    &with_kept
                }
            }
            _ => current,
        };
        let selection = st.subscription.select(current);
        let selected = &selection.resources;
        // P32: the names the client asks for that this node lacks, each answered NOT_FOUND.
        // Looked for only when the selection may be short of them: it is short of the names
        // exactly when one is missing, unless a wildcard selects more.
        let names = st.subscription.names().len();
        let not_found = if selected.len() < names || (st.subscription.is_wildcard() && names > 0) {
            match kind {
                // Never served over SotW, whatever the newest snapshot has: every name,
                // a glob collection too, is not found.
                ResourceType::LbEndpoint => st.subscription.names().iter().cloned().collect(),
                _ => core.not_found(kind, st.subscription.missing(current)),
            }
        } else {
            Vec::new()
        };
        // Names the client has not been told do not exist: a response is due for them.
        let news = not_found.iter().any(|n| !core.told_not_found(kind, n));
        // P10, P14: a response to a wildcard is the whole set, whatever the type; to names,
        // for LDS and CDS.
        let wildcard = st.subscription.is_wildcard();
        let whole = kind.sotw_whole(wildcard);
        // The ClusterLoadAssignments to send again (P28): from one list of clusters (a
        // push's, shared by the streams it went to), their positions in the selection,
        // worked out once per list and selection; else their names, in name order.
        let warmed = match &st.rewarm[..] {
            [clusters] => Some(selection.warmed_by(clusters, |clusters| {
                let names = super::rewarm_names(clusters.iter());
                (0..selected.len())
                    .filter(|&i| names.binary_search(&selected[i].name.as_str()).is_ok())
                    .collect()
            })),
            _ => None,
        };
        let rewarm_names = match warmed {
            Some(_) => Vec::new(),
            None => super::rewarm_names(st.rewarm.iter().flat_map(|l| l.iter())),
        };
        let rewarm = match &warmed {
            Some(warmed) => !warmed.is_empty(),
            None => {
                !rewarm_names.is_empty()
                    && selected
                        .iter()
                        .any(|r| rewarm_names.binary_search(&r.name.as_str()).is_ok())
            }
        };
        let refresh = st.refresh_at.is_some_and(|at| at <= now);
        // The next refresh: a third of the shortest TTL among what the client will have.
        let next_refresh = wrap_ttl
            .then(|| selected.iter().filter_map(|r| r.ttl).min())
            .flatten()
            .map(|ttl| now + heartbeat_interval(ttl));
        if refresh {
            // This refresh is being handled: whatever happens below, the next one is due from
            // now (never left in the past, which would wake the stream in a loop).
            st.refresh_at = next_refresh;
        }

        // What to send, if anything.
        let (payload, version): (Vec<&Arc<Resource>>, String) = match &st.given {
            None => {
                // The version of what the client will hold: the type's, for a wildcard; for
                // names, one computed from the names and versions they select, so that a
                // client back on a new stream proves with it what it holds (P13). Computed
                // only when a response goes out, or on a stream's first decision.
                let version = selection.version.clone();
                // P13: a client back on a new stream with the version of what it would get
                // has it already: a wildcard at the type's version. Not so names
                // (P9: on a new stream the set grows from nothing): Envoy keeps a type's
                // version when it drops names and presents it again once they come back,
                // so a version of exactly the names it asks for does not prove it holds
                // them (a cluster removed and added again before the server answered).
                let holds_it = st.initial_version.as_deref() == Some(version.as_str())
                    && not_found.is_empty()
                    && wildcard;
                if holds_it {
                    st.given = Some(Given::new(current, &st.subscription));
                    core.assume_acked(kind, &version);
                    // Its TTLs have been running since the last stream: refresh now.
                    st.refresh_at = next_refresh.map(|_| now);
                    return None;
                }
                // P10: an empty answer to a wildcard means "none" (and ends the client's
                // initial fetch); to names an empty answer says nothing, so wait for the names
                // to exist (P11), unless it says which do not (P32).
                if !wildcard && selected.is_empty() && not_found.is_empty() {
                    return None;
                }
                (selected.iter().collect(), version)
            }
            // Nothing changed on either side since the last decision.
            Some(given)
                if !rewarm
                    && !refresh
                    && st.owed.is_none()
                    && !st.forgot
                    && Arc::ptr_eq(&given.snapshot, current)
                    && given.subscription == st.subscription =>
            {
                return None;
            }
            Some(given) if whole => {
                // P10: a whole response carries the whole set, so any change (a deletion
                // too) resends it; so does a TTL refresh (P26). So does a wildcard new to
                // the stream (P9: the set grew): a client that held names only was never
                // told which of them were deleted, and takes this response as all it has.
                // A client that narrowed a wildcard forgot what it no longer named: names
                // it asks for again go again (P9), though the set equals what it was given.
                let became_wildcard = wildcard && !given.subscription.is_wildcard();
                if !rewarm
                    && !refresh
                    && !news
                    && !became_wildcard
                    && !st.forgot
                    && given.has_exactly(selected, current, &st.subscription)
                {
                    st.given = Some(Given::new(current, &st.subscription));
                    core.record_not_found(kind, &not_found, true);
                    return None;
                }
                (selected.iter().collect(), selection.version.clone())
            }
            Some(given) => {
                // P8/P9/P10: a partial response carries only what is new to the client,
                // changed, due again for warming (P28), or due for a TTL refresh (P26). What
                // it no longer subscribes to (or what was deleted) is forgotten, so asking
                // again sends it again (P9).
                let mut fresh = if st.rewarm.is_empty() && st.owed.is_none() && !refresh {
                    // Only what differs between the two selections: the same for every
                    // stream that had the one and now selects the other, so shared.
                    let before = given.subscription.select(&given.snapshot);
                    selection.lacking_since(&before)
                } else if let (Some(warmed), None, false) = (&warmed, &st.owed, refresh) {
                    // That, and the endpoints to send again, each found once for the
                    // streams that share them: merged by position.
                    let before = given.subscription.select(&given.snapshot);
                    let lacking = selection.lacking_at(&before);
                    let (mut lacking, mut warmed) =
                        (lacking.iter().peekable(), warmed.iter().peekable());
                    let mut fresh = Vec::with_capacity(lacking.len().max(warmed.len()));
                    loop {
                        let next = match (lacking.peek(), warmed.peek()) {
                            (Some(&&l), Some(&&w)) if l == w => {
                                warmed.next();
                                lacking.next();
                                l
                            }
                            (Some(&&l), Some(&&w)) if l < w => {
                                lacking.next();
                                l
                            }
                            (_, Some(&&w)) => {
                                warmed.next();
                                w
                            }
                            (Some(&&l), None) => {
                                lacking.next();
                                l
                            }
                            (None, None) => break,
                        };
                        fresh.push(&selected[next]);
                    }
                    debug_assert!({
                        let names = super::rewarm_names(st.rewarm.iter().flat_map(|l| l.iter()));
                        let walked = given.lacks(selected.iter(), |n| names.contains(&n));
                        walked.len() == fresh.len()
                            && walked.iter().zip(&fresh).all(|(a, b)| Arc::ptr_eq(a, b))
                    });
                    fresh
                } else {
                    // The names come in order: the ClusterLoadAssignments to send again are
                    // walked beside them, not searched for each.
                    let rewarm_names = match warmed {
                        Some(_) => super::rewarm_names(st.rewarm.iter().flat_map(|l| l.iter())),
                        None => rewarm_names,
                    };
                    let mut rewarm_left = rewarm_names.iter().peekable();
                    let mut rewarmed_next = |n: &str| {
                        while rewarm_left.next_if(|r| **r < n).is_some() {}
                        rewarm_left.peek().is_some_and(|r| **r == n)
                    };
                    given.lacks(selected.iter(), |n| {
                        rewarmed_next(n)
                            || st.owes(n)
                            || (refresh
                                && current.resources.get(n).is_some_and(|r| r.ttl.is_some()))
                    })
                };
                if given.snapshot.version != current.version && core.has_rejected(kind) {
                    // The type changed: what the client rejected goes again (P5), so that
                    // what it rejected only for being in a response with something bad is
                    // not lost.
                    let again: BTreeSet<&str> = core
                        .rejected(kind)
                        .filter(|(n, v)| current.resources.get(*n).is_some_and(|r| r.version == *v))
                        .map(|(n, _)| n)
                        .collect();
                    let have: BTreeSet<&str> = fresh.iter().map(|r| r.name.as_str()).collect();
                    let more: Vec<_> = selected
                        .iter()
                        .filter(|r| {
                            again.contains(r.name.as_str()) && !have.contains(r.name.as_str())
                        })
                        .collect();
                    fresh.extend(more);
                    fresh.sort_by(|a, b| a.name.cmp(&b.name));
                }
                if fresh.is_empty() && !news {
                    st.given = Some(Given::new(current, &st.subscription));
                    st.owed = None;
                    core.record_not_found(kind, &not_found, true);
                    return None;
                }
                (fresh, selection.version.clone())
            }
        };

        // Over the response limit: a whole response goes whole (P10: what is left out is
        // deleted); a partial one sends what fits, and the rest on the client's next request.
        // The response's version is that of what the client then holds of the selection, so
        // that it never claims what is still to come (P13: a client back with it is sent the
        // rest).
        let mut payload = payload;
        let mut version = version;
        // The whole selection (what is sent is always of it, in its order): its cost is
        // worked out once for the streams that share it.
        let all = payload.len() == selected.len();
        debug_assert!(
            !all || payload
                .iter()
                .zip(selected.iter())
                .all(|(p, s)| Arc::ptr_eq(p, s))
        );
        let count = if all && core.fits(kind, selection.cost(super::response_cost)) {
            payload.len()
        } else {
            core.fit(kind, payload.iter().map(|r| r.as_ref()), !whole)
        };
        st.owed = None;
        if count < payload.len() {
            let owed: BTreeSet<String> = payload[count..].iter().map(|r| r.name.clone()).collect();
            st.owed = Some(Box::new(owed));
            payload.truncate(count);
            version = selection_version(
                selection
                    .resources
                    .iter()
                    .filter(|r| !st.owes(&r.name))
                    .map(Arc::as_ref),
            );
        }

        // P28: a cluster this response adds or changes warms until its ClusterLoadAssignment
        // arrives anew; collected here, queued on EDS below. A response of the whole selection
        // (CDS's always are) to a client that had a whole selection: what it lacks is the
        // same for every stream that had the one and now has the other, so shared.
        // The whole selection changed (or is new to the client): the selection's own list,
        // kept as it is.
        let all = payload.len() == selected.len();
        let warming: Option<Arc<[Arc<Resource>]>> = if kind == ResourceType::Cluster {
            let changed = match &st.given {
                Some(given) if all => {
                    selection.lacking_since(&given.subscription.select(&given.snapshot))
                }
                Some(given) => given.lacks(payload.iter().copied(), |_| false),
                None => payload.clone(),
            };
            if all && changed.len() == selected.len() {
                Some(Arc::clone(&selection.resources))
            } else {
                let warming: Vec<Arc<Resource>> = changed
                    .into_iter()
                    .filter(|r| r.warms_with.is_some())
                    .cloned()
                    .collect();
                (!warming.is_empty()).then(|| warming.into())
            }
        } else {
            None
        };

        let nonce = core.send(kind, &version);
        core.record_not_found(kind, &not_found, true);
        // P12: the snapshot's names are map keys, so never twice.
        st.refresh_at = next_refresh;
        let response = Response {
            kind,
            version,
            nonce,
            resources: match all {
                true => super::Resources::Shared(Arc::clone(&selection.resources)),
                false => payload.into_iter().cloned().collect(),
            },
            wrap_ttl,
            not_found,
        };
        st.prev_given = st.given.replace(Given::new(current, &st.subscription));
        st.pending = false;
        st.forgot = false;
        st.rewarm = Vec::new();
        // A ClusterLoadAssignment the client does not have yet goes out anyway (it is new to
        // it); one it has must be sent again though unchanged. Before anything was sent,
        // everything goes.
        if let Some(eds) = self.types.get_mut(ResourceType::Endpoint) {
            if let (Some(_), Some(warming)) = (&eds.given, warming) {
                eds.rewarm.push(warming);
            }
        }
        Some(response)
    }
}

#[cfg(test)]
mod tests;
